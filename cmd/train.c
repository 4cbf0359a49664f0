/*
 * cmd/train.c — `minitrain train`: config + overrides → trainer, with its hooks wired.
 *
 * This is the one place that decides which hooks a training run has (eval, sample, checkpoints,
 * safety/'s robustness evaluation and adversarial-training microbatch, and sched/'s fault
 * injection + heartbeats), so train/trainer.c stays free of those concerns and train/ never
 * includes safety/ or sched/. Options: --config FILE, then any config key as --key value
 * (core/config.h's table; dashes = underscores), applied in command-line order on top of the file.
 */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/peer.h"
#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "core/config.h"
#include "core/log.h"
#include "core/runlock.h"
#include "core/timer.h"
#include "parallel/comm.h"
#include "parallel/mesh.h"
#include "safety/robust.h"
#include "sched/hooks.h"
#include "sched/sdc.h"
#include "sched/preempt.h"
#include "sched/plan.h"
#include "sched/replan.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

static void config_help(FILE *out) {
    fflush(out);
    config_print_help();
}

/* The layout of a rankfile written by `minitrain plan` (sched/plan.h): the plan placed rank r
 * as the mesh's rank r, so the mesh must be built with the same degrees. A config or override
 * that set a degree to something else is refused rather than silently replaced. With a
 * `topology` file, a slot=S past its host's GPU count is refused too (sched/replan.h); a topology
 * that does not load is left to the run's own check of it, which names the file. */
static void take_rankfile_layout(mt_config *cfg, const char *path) {
    char err[512];
    int tp, pp, dp, ep, world, cp;
    if (plan_read_rankfile(path, &tp, &pp, &dp, &ep, &world, &cp, err, sizeof(err)) != 0)
        mt_fail("%s", err);
    const struct { const char *name; int *cur, want, def; } d[] = {
        {"tp", &cfg->tp, tp, 1}, {"pp", &cfg->pp, pp, 1}, {"dp", &cfg->dp, dp, 0},
        {"ep", &cfg->ep, ep, 1}, {"cp", &cfg->cp, cp, 1}};
    for (int i = 0; i < 5; i++) {
        if (*d[i].cur != d[i].def && *d[i].cur != d[i].want)
            mt_fail("--rankfile %s was planned for %s %d, the config says %s %d", path,
                    d[i].name, d[i].want, d[i].name, *d[i].cur);
        *d[i].cur = d[i].want;
    }
    if (cfg->topology[0] == 0) return; /* else a host's slot count is known: slot=S must fit */
    replan_rankfile rf;
    plan_topo t;
    plan_topo_init(&t);
    int bad = replan_read(path, &rf, err, sizeof(err)) != 0 ||
              (plan_topo_load(&t, cfg->topology, err, sizeof(err)) == 0 &&
               replan_check_topology(&rf, &t, err, sizeof(err)) != 0);
    if (rf.host) replan_free(&rf);
    plan_topo_free(&t);
    if (bad) mt_fail("--rankfile %s: %s %s", path, err, cfg->topology);
}

/* The leaf switch of this rank's host in cfg.topology (sched/plan.h's topology file), for the
 * peer tier 0's buddies (train/checkpoint_peer.c puts them behind another leaf). The host is
 * ckpt/peer.h's node name ($MINITRAIN_NODE, $SLURMD_NODENAME, the hostname), as the tier 0 names
 * it. Returns 0, or -1 with err when the file does not load (the same verdict on every rank); a
 * host the file does not list is a warning, its leaf stays unknown. */
static int take_topology_leaf(trainer *tr, char *err, size_t errlen) {
    const char *path = tr->cfg.topology;
    if (path[0] == 0) return 0;
    plan_topo t;
    plan_topo_init(&t);
    char msg[512], node[CKPT_PEER_NODE_MAX];
    int rc = plan_topo_load(&t, path, msg, sizeof(msg));
    if (rc != 0) {
        snprintf(err, errlen, "topology: %s", msg);
    } else {
        ckpt_peer_node_name(node, sizeof(node));
        if (plan_topo_host_leaf(&t, node, tr->leaf, sizeof(tr->leaf)) < 0)
            mt_warn("topology %s does not list this rank's node '%s' (MINITRAIN_NODE, "
                    "SLURMD_NODENAME or the hostname): its leaf switch is unknown", path, node);
    }
    plan_topo_free(&t);
    return rc;
}

/* Everything one training process owns, released in one place (job_free) whatever path the run
 * takes, early errors included: a sanitizer build then exits with the product's own codes (2 for
 * bad input), not LeakSanitizer's 1. */
typedef struct {
    comm *world;
    mesh ms;
    int have_mesh;
    trainer tr;
    int have_trainer; /* trainer_init ran: trainer_free releases whatever it made */
    checkpointer *ckpt;
    robust_wiring *robust; /* safety/robust.h: the robustness hook and adversarial training */
    runlock lock;
} train_proc;

static void job_free(train_proc *j) {
    checkpoint_free(j->ckpt);
    j->ckpt = NULL;
    if (j->robust) robust_detach(j->robust);
    j->robust = NULL;
    if (j->have_trainer) trainer_free(&j->tr);
    if (j->have_mesh) mesh_free(&j->ms);
    j->have_trainer = j->have_mesh = 0;
    comm_free(j->world);
    j->world = NULL;
    runlock_release(&j->lock);
    comm_finalize();
}

/* A failure that ends the run: rank 0 prints the one line and, once a run row exists, records
 * it; returns code. */
static int fail_run(train_proc *j, int code, const char *what, const char *err) {
    int rank = comm_rank(j->world);
    if (rank == 0) fprintf(stderr, "minitrain: error: %s%s\n", what, err);
    if (rank == 0 && j->have_trainer && j->tr.db && j->tr.run_id > 0) {
        trainer_log_error(&j->tr, err);
        rundb_run_end(j->tr.db, j->tr.run_id, "failed");
    }
    return code;
}

/* One job per run directory (core/runlock.h): world rank 0 takes RUN_DIR/.lock unless the
 * supervisor above it holds it; every rank learns the verdict. Returns 0, or -1 with err set on
 * rank 0. */
static int take_run_lock(train_proc *j, const mt_config *cfg, char *err, size_t errlen) {
    double busy = 0;
    err[0] = '\0';
    if (comm_rank(j->world) == 0 && !runlock_held_above(cfg->run_dir))
        busy = runlock_acquire(&j->lock, cfg->run_dir, "train", err, errlen) != 0;
    comm_all_reduce_f64(j->world, &busy, 1, COMM_MAX);
    return busy > 0 ? -1 : 0;
}

/* 1 on every rank when RUN_DIR/model.safetensors exists (rank 0 looks). */
static int model_file_exists(train_proc *j) {
    char path[1100];
    snprintf(path, sizeof(path), "%s/model.safetensors", j->tr.cfg.run_dir);
    double have = comm_rank(j->world) == 0 ? access(path, F_OK) == 0 : 0;
    comm_all_reduce_f64(j->world, &have, 1, COMM_MAX);
    return have > 0;
}

static void log_setup(const trainer *t, const mesh *ms) {
    const mt_config *c = &t->cfg;
    log_info("minitrain train: run '%s' -> %s", c->name, c->run_dir);
    log_info("model: %d layers, %d heads, d_model %d, seq_len %d, vocab %d | %.2fM parameters",
             c->n_layer, c->n_head, c->d_model, c->seq_len, c->vocab_size,
             t->model.num_params / 1e6);
    log_info("batch: %d sequences x %d tokens per microbatch%s, %d microbatches per step "
             "(global batch %d = %d tokens) | %d steps",
             c->batch_size, c->seq_len, c->microbatches ? " (batch_size = global_batch / "
             "(microbatches x dp), from --microbatches)" : "", t->grad_accum, c->global_batch,
             c->global_batch * c->seq_len, c->steps);
    log_info("compute: %.1f MFLOP/token | sgemm peak measured %.1f GFLOP/s | theoretical %s",
             t->flops_per_token / 1e6, t->peak_measured / 1e9,
             t->peak_theoretical > 0 ? t->peak_desc : "unknown");
    if (t->peak_theoretical <= 0) log_info("  (theoretical peak unknown: %s)", t->peak_desc);
    if (ms->pp > 1) {
        char split[512] = "";
        for (int st = 0, n = 0; st < ms->pp && n < (int)sizeof(split) - 16; st++)
            n += snprintf(split + n, sizeof(split) - n, "%s%d", st ? "," : "",
                          t->stage_begin[st + 1] - t->stage_begin[st]);
        if (t->schedule == PP_INTERLEAVED)
            log_info("pipeline: %d stages x %d chunks (%d layers each; stage s holds chunks s, "
                     "s+%d, ...), %d microbatches of %d, schedule interleaved | bubble "
                     "(P-1)/(v·M+P-1) = %.1f%%", ms->pp, t->chunks, t->stage_begin[1], ms->pp,
                     t->grad_accum, c->batch_size,
                     100 * pp_idle_formula(t->schedule, ms->pp, t->grad_accum, t->chunks, 1, 2, 0));
        else if (t->schedule == PP_ZBH1)
            log_info("pipeline: %d stages (layers %s), %d microbatches of %d, schedule zb-h1 | "
                     "bubble (P-1)(F+B-W)/(M(F+B+W)+(P-1)(F+B-W)) = %.1f%% with equal pass times",
                     ms->pp, split, t->grad_accum, c->batch_size,
                     100 * pp_idle_formula(t->schedule, ms->pp, t->grad_accum, 1, 1, 1, 1));
        else
            log_info("pipeline: %d stages (layers %s), %d microbatches of %d, schedule %s | "
                     "bubble (P-1)/(M+P-1) = %.1f%%", ms->pp, split, t->grad_accum,
                     c->batch_size, t->schedule == PP_GPIPE ? "GPipe" : "1F1B",
                     100 * pp_bubble_fraction(ms->pp, t->grad_accum));
    }
    if (ms->cp > 1) {
        int T = c->seq_len, Tl = T / ms->cp;
        double mine = gpt_activation_floats(&t->model, c->batch_size, Tl) * 4.0 / 1048576.0;
        double one = gpt_activation_floats_whole_sequence(&t->model, c->batch_size, T) * 4.0 /
                     1048576.0;
        log_info("context parallel: cp %d ring, head-tail chunks of %d positions (rank r holds "
                 "chunks r and %d-r) | activation memory per rank %.2f MiB, without cp %.2f MiB "
                 "(%.3fx)", ms->cp, T / (2 * ms->cp), 2 * ms->cp - 1, mine, one, mine / one);
    }
    if (c->sp) {
        double mine = gpt_activation_floats(&t->model, c->batch_size, c->seq_len) * 4.0 / 1048576.0;
        double one = gpt_activation_floats_whole_sequence(&t->model, c->batch_size, c->seq_len) *
                     4.0 / 1048576.0;
        log_info("sequence parallel: LayerNorm/residual rows sharded %d ways inside the TP group "
                 "(all-reduce -> reduce-scatter + all-gather) | activation memory per rank %.2f "
                 "MiB, without sp %.2f MiB (%.3fx)", c->tp, mine, one, mine / one);
    }
    if (ms->world_size > 1) {
        double opt_mb = 2.0 * t->opt.n * sizeof(float) / 1048576.0;
        double full_mb = 2.0 * t->model.num_params * sizeof(float) / 1048576.0;
        char stage[32] = "";
        if (c->zero) snprintf(stage, sizeof(stage), " with ZeRO-%d", c->zero);
        log_info("optimizer state per rank: %.2f MiB (AdamW m+v)%s; without ZeRO %.2f MiB | "
                 "%d threads per rank", opt_mb, stage, full_mb, t->threads);
    }
}

/* Save model.safetensors + tokenizer.bin; a failure (disk full, I/O error) is MT_EXIT_IO: the
 * supervisor retries, and the committed checkpoints are untouched. */
static int save_model(train_proc *j) {
    char err[1024];
    if (trainer_save_model(&j->tr, err, sizeof(err)) == 0) return MT_EXIT_OK;
    return fail_run(j, MT_EXIT_IO, "saving the model: ", err); /* only rank 0 writes, so fails */
}

/* The run itself, from an initialised world to the saved model. Returns the exit code; every
 * object it makes is in j, released by the caller. */
static int train_job_run(train_proc *j, mt_config *cfgp) {
    mt_config cfg = *cfgp;
    char err[1024];
    log_set_rank(comm_rank(j->world));
    int dp = cfg.dp;
    if (mesh_check(comm_size(j->world), cfg.tp, cfg.cp, cfg.pp, &dp, cfg.ep, err, sizeof(err)) != 0)
        return fail_run(j, MT_EXIT_USAGE, "", err);
    cfg.dp = dp;
    if (take_run_lock(j, &cfg, err, sizeof(err)) != 0) return fail_run(j, MT_EXIT_USAGE, "", err);
    mesh_init(&j->ms, j->world, cfg.tp, cfg.cp, cfg.pp, cfg.dp, cfg.ep);
    j->have_mesh = 1;
    mesh *ms = &j->ms;
    if (ms->world_size > 1) {
        comm_watchdog_start(cfg.comm_timeout);
        mesh_print(ms);
        if (cfg.tp > 1)
            log_info("tensor parallel: qkv/fc column-parallel, out-projections row-parallel; "
                     "embedding and tied LM head replicated on every TP rank (full logits)");
    }
    trainer *tr = &j->tr;
    j->have_trainer = 1;
    /* the same input gives every rank the same verdict: one message, a clean exit */
    if (trainer_init(tr, &cfg, ms, err, sizeof(err)) != 0) return fail_run(j, MT_EXIT_USAGE, "", err);
    const mt_config *c = &tr->cfg;
    log_setup(tr, ms);
    trainer_add_hook(tr, "eval", c->eval_every, trainer_hook_eval, NULL);
    if (c->sample_tokens > 0) trainer_add_hook(tr, "sample", c->sample_every, trainer_hook_sample, NULL);
    /* Robustness (safety/robust.h): the robust_every evaluation hook and adv_train. */
    j->robust = robust_attach_trainer(tr, err, sizeof(err));
    if (!j->robust) return fail_run(j, MT_EXIT_USAGE, "", err);
    /* Checkpoints (train/checkpoint.h): --resume auto|no|STEP, then a save every ckpt_every
     * steps and at the end; the hook runs every step to advance an asynchronous save. */
    if (take_topology_leaf(tr, err, sizeof(err)) != 0) return fail_run(j, MT_EXIT_USAGE, "", err);
    j->ckpt = checkpoint_create(tr);
    checkpoint_set_resume_hook(j->ckpt, sched_resume_fault, tr); /* kill@at=resume faults */
    sched_sdc_resume_plan(tr); /* after a silent-corruption stop: a checkpoint before it */
    if (checkpoint_resume(j->ckpt, tr, err, sizeof(err)) < 0) return fail_run(j, MT_EXIT_USAGE, "", err);
    if (c->ckpt_every != 0) trainer_add_hook(tr, "checkpoint", 1, checkpoint_hook, j->ckpt);
    /* Resilience (sched/hooks.h): --fault injection + heartbeats for `minitrain run`. Keep this
     * after the checkpoint resume and the checkpoint hook (it reads the resumed step, and a
     * corrupt-ckpt fault waits for the step's commit). */
    if (sched_attach_trainer(tr, c->ckpt_every != 0 ? j->ckpt : NULL, err, sizeof(err)) != 0) return fail_run(j, MT_EXIT_USAGE, "", err);
    sched_sdc_attach(tr); /* --sdc-check-every: after the fault hook (a bitflip is then caught) */
    if (c->ckpt_every == CONFIG_CKPT_AUTO) sched_ckpt_auto_attach(tr, j->ckpt);
    /* SIGUSR1 to `minitrain run`, or SIGINT/SIGTERM to this unsupervised process: checkpoint
     * now, stop (sched/preempt.h) */
    sched_preempt_attach(tr);

    double t0 = timer_now();
    int end = c->stop_after > 0 ? c->stop_after : c->steps;
    if (tr->step >= end) { /* resumed at (or past) the end: nothing to train */
        /* ... unless the final save of the model failed last time (disk full): write it now */
        if (!model_file_exists(j)) {
            log_info("run '%s' is at step %d of %d but %s/model.safetensors is missing: saving "
                     "it", c->name, tr->step, end, c->run_dir);
            int rc = save_model(j);
            if (rc != MT_EXIT_OK) return rc;
        } else {
            log_info("run '%s' is already at step %d of %d; nothing to do (raise --steps to "
                     "train further)", c->name, tr->step, end);
        }
        if (ms->rank == 0) {
            trainer_log_end(tr, "completed", "already at the last step: nothing to do");
            rundb_run_end(tr->db, tr->run_id, "completed");
        }
        return MT_EXIT_OK;
    }
    int rc = trainer_run(tr);
    int ckpt_rc = checkpoint_finish(j->ckpt, tr); /* waits for a save in flight */
    if (rc == MT_EXIT_OK) rc = ckpt_rc;
    checkpoint_free(j->ckpt);
    j->ckpt = NULL;
    double wall = timer_now() - t0;
    int save_rc = save_model(j);
    if (save_rc != MT_EXIT_OK) return save_rc;
    const char *status = rc != MT_EXIT_OK ? "failed" : (tr->step < c->steps ? "stopped" : "completed");
    if (ms->rank == 0) {
        trainer_log_end(tr, status, NULL);
        rundb_run_end(tr->db, tr->run_id, status);
    }
    char dbuf[32];
    log_info("done: %d steps in %s | final train loss %.4f | val loss %.4f | saved %s/model.safetensors",
             tr->step, log_duration(wall, dbuf, sizeof(dbuf)), tr->last_loss, tr->last_val_loss,
             c->run_dir);
    return rc;
}

static int train_job(mt_config *cfg) {
    train_proc j;
    memset(&j, 0, sizeof(j));
    runlock_init(&j.lock);
    j.world = comm_init_world(NULL, NULL);
    sched_watch_supervisor(); /* a job dies with its supervisor, even one killed by SIGKILL */
    int rc = sched_preempt_exit_code(train_job_run(&j, cfg)); /* 130/143 after a SIGINT/SIGTERM */
    sched_exit_heartbeat(rc);
    job_free(&j);
    return rc;
}

int cmd_train(int argc, char **argv) {
    const char *config_path = NULL, *rankfile = NULL;
    args_overrides ov = {0}; /* the config-key overrides, applied after the config file */
    const args_opt opts[] = {
        {"config", KEYTAB_STRING, &config_path, 0, 0, "FILE", "INI config file, read before the "
         "--KEY VALUE overrides", ""},
        {"rankfile", KEYTAB_STRING, &rankfile, 0, 0, "FILE", "take tp/pp/dp/ep from a rankfile of "
         "`minitrain plan` (its rank\norder is the mesh's; a config that disagrees is an "
         "error)", ""},
        {0},
    };
    const args_spec spec = {
        .cmd = "train",
        .synopsis = "usage: minitrain train [--config FILE] [--KEY VALUE ...]",
        .about = "Train a GPT-2-style model. Keys come from the INI config file, then from the "
                 "command\nline (`--key value` or `--key=value`; dashes and underscores are the "
                 "same).\nThe run directory (default runs/<config name>) receives run.db, "
                 "model.safetensors\nand tokenizer.bin.\n\nexample:\n  minitrain train --config "
                 "examples/shakespeare.ini --steps 200\n\nSIGINT (Ctrl-C) or SIGTERM: the "
                 "run finishes the step in progress, checkpoints it and\nstops (exit 130 / 143; "
                 "`--resume auto` continues from it); a second signal stops\nat once.",
        .opts = opts,
        .known = config_has_key,
        .other = args_override_add,
        .ctx = &ov,
        .help_tail = config_help,
    };
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) {
        args_overrides_free(&ov); /* those taken before the refused word */
        return prc;
    }
    if (ov.overflow)
        mt_fail("more than %d config overrides on the command line", ARGS_MAX_OVERRIDES);
    mt_config cfg;
    config_defaults(&cfg);
    char err[1024];
    if (config_path && config_load_ini(&cfg, config_path, err, sizeof(err)) != 0) mt_fail("%s", err);
    for (int i = 0; i < ov.n; i++)
        if (config_set(&cfg, ov.key[i], ov.val[i], err, sizeof(err))) mt_fail("%s", err);
    args_overrides_free(&ov);
    if (rankfile) take_rankfile_layout(&cfg, rankfile);
    if (cfg.name[0] == 0) {
        if (config_path) {
            char tmp[512];
            snprintf(tmp, sizeof(tmp), "%s", config_path);
            char *b = basename(tmp);
            char *dot = strrchr(b, '.');
            if (dot && dot != b) *dot = 0;
            snprintf(cfg.name, sizeof(cfg.name), "%s", b);
        } else {
            snprintf(cfg.name, sizeof(cfg.name), "run");
        }
    }
    if (cfg.run_dir[0] == 0) snprintf(cfg.run_dir, sizeof(cfg.run_dir), "runs/%s", cfg.name);
    if (config_validate(&cfg, err, sizeof(err)) != 0) mt_fail("%s", err);
    if (cfg.warmup_steps > cfg.steps) { /* e.g. a short --steps on a config made for long runs */
        int w = cfg.steps / 10;
        fprintf(stderr, "minitrain: note: warmup_steps %d exceeds steps %d; using warmup_steps %d "
                "(10%% of steps; set --warmup-steps to choose)\n", cfg.warmup_steps, cfg.steps, w);
        cfg.warmup_steps = w;
    }

    return train_job(&cfg);
}
