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

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "core/config.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/comm.h"
#include "parallel/mesh.h"
#include "safety/robust.h"
#include "sched/hooks.h"
#include "sched/plan.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

/* The config-key overrides in command-line order; applied after the config file is loaded. */
#define MAX_OVERRIDES 512
typedef struct {
    char *key[MAX_OVERRIDES];
    const char *val[MAX_OVERRIDES];
    int n, overflow;
} overrides;

static void add_override(void *ctx, const char *key, const char *val) {
    overrides *o = ctx;
    if (o->n == MAX_OVERRIDES) {
        o->overflow = 1;
        return;
    }
    o->key[o->n] = strdup(key); /* key is the parser's buffer for --key=value: keep a copy */
    mtCheck(o->key[o->n] != NULL, "out of memory");
    o->val[o->n++] = val;
}

static void config_help(FILE *out) {
    fflush(out);
    config_print_help();
}

/* The layout of a rankfile written by `minitrain plan` (sched/plan.h): the plan placed rank r
 * as the mesh's rank r, so the mesh must be built with the same degrees. A config or override
 * that set a degree to something else is refused rather than silently replaced. */
static void take_rankfile_layout(mt_config *cfg, const char *path) {
    char err[512];
    int tp, pp, dp, ep, world;
    if (plan_read_rankfile(path, &tp, &pp, &dp, &ep, &world, err, sizeof(err)) != 0)
        mt_fail("%s", err);
    const struct { const char *name; int *cur, want, def; } d[] = {
        {"tp", &cfg->tp, tp, 1}, {"pp", &cfg->pp, pp, 1}, {"dp", &cfg->dp, dp, 0},
        {"ep", &cfg->ep, ep, 1}};
    for (int i = 0; i < 4; i++) {
        if (*d[i].cur != d[i].def && *d[i].cur != d[i].want)
            mt_fail("--rankfile %s was planned for %s %d, the config says %s %d", path,
                    d[i].name, d[i].want, d[i].name, *d[i].cur);
        *d[i].cur = d[i].want;
    }
}

int cmd_train(int argc, char **argv) {
    const char *config_path = NULL, *rankfile = NULL;
    overrides ov = {0};
    const args_opt opts[] = {
        {"config", ARG_STRING, &config_path, 0, 0, "FILE", "INI config file, read before the "
         "--KEY VALUE overrides", ""},
        {"rankfile", ARG_STRING, &rankfile, 0, 0, "FILE", "take tp/pp/dp/ep from a rankfile of "
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
                 "examples/shakespeare.ini --steps 200",
        .opts = opts,
        .known = config_has_key,
        .other = add_override,
        .ctx = &ov,
        .help_tail = config_help,
    };
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    if (ov.overflow) mt_fail("more than %d config overrides on the command line", MAX_OVERRIDES);
    mt_config cfg;
    config_defaults(&cfg);
    char err[1024];
    if (config_path && config_load_ini(&cfg, config_path, err, sizeof(err)) != 0) mt_fail("%s", err);
    for (int i = 0; i < ov.n; i++) {
        int bad = config_set(&cfg, ov.key[i], ov.val[i], err, sizeof(err));
        free(ov.key[i]);
        if (bad) mt_fail("%s", err);
    }
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

    comm *world = comm_init_world(NULL, NULL);
    log_set_rank(comm_rank(world));
    int dp = cfg.dp;
    if (mesh_check(comm_size(world), cfg.tp, cfg.pp, &dp, cfg.ep, err, sizeof(err)) != 0) {
        if (comm_rank(world) == 0) fprintf(stderr, "minitrain: error: %s\n", err);
        comm_finalize();
        return MT_EXIT_USAGE;
    }
    cfg.dp = dp;
    mesh ms;
    mesh_init(&ms, world, cfg.tp, cfg.pp, cfg.dp, cfg.ep);
    if (ms.world_size > 1) {
        comm_watchdog_start(cfg.comm_timeout);
        mesh_print(&ms);
        if (cfg.tp > 1)
            log_info("tensor parallel: qkv/fc column-parallel, out-projections row-parallel; "
                     "embedding and tied LM head replicated on every TP rank (full logits)");
    }
    trainer tr;
    if (trainer_init(&tr, &cfg, &ms, err, sizeof(err)) != 0) {
        /* the same input gives every rank the same verdict: one message, a clean exit */
        if (ms.rank == 0) fprintf(stderr, "minitrain: error: %s\n", err);
        comm_finalize();
        return MT_EXIT_USAGE;
    }
    const mt_config *c = &tr.cfg;
    log_info("minitrain train: run '%s' -> %s", c->name, c->run_dir);
    log_info("model: %d layers, %d heads, d_model %d, seq_len %d, vocab %d | %.2fM parameters",
             c->n_layer, c->n_head, c->d_model, c->seq_len, c->vocab_size,
             tr.model.num_params / 1e6);
    log_info("batch: %d sequences x %d tokens per microbatch%s, %d microbatches per step "
             "(global batch %d = %d tokens) | %d steps",
             c->batch_size, c->seq_len, c->microbatches ? " (batch_size = global_batch / "
             "(microbatches x dp), from --microbatches)" : "", tr.grad_accum, c->global_batch,
             c->global_batch * c->seq_len, c->steps);
    log_info("compute: %.1f MFLOP/token | sgemm peak measured %.1f GFLOP/s | theoretical %s",
             tr.flops_per_token / 1e6, tr.peak_measured / 1e9,
             tr.peak_theoretical > 0 ? tr.peak_desc : "unknown");
    if (tr.peak_theoretical <= 0) log_info("  (theoretical peak unknown: %s)", tr.peak_desc);
    if (ms.pp > 1) {
        char split[512] = "";
        for (int st = 0, n = 0; st < ms.pp && n < (int)sizeof(split) - 16; st++)
            n += snprintf(split + n, sizeof(split) - n, "%s%d", st ? "," : "",
                          tr.stage_begin[st + 1] - tr.stage_begin[st]);
        log_info("pipeline: %d stages (layers %s), %d microbatches of %d, schedule %s | bubble "
                 "(P-1)/(M+P-1) = %.1f%%", ms.pp, split, tr.grad_accum, c->batch_size,
                 tr.schedule == PP_GPIPE ? "GPipe" : "1F1B",
                 100 * pp_bubble_fraction(ms.pp, tr.grad_accum));
    }
    if (ms.world_size > 1) {
        double opt_mb = 2.0 * tr.opt.n * sizeof(float) / 1048576.0;
        double full_mb = 2.0 * tr.model.num_params * sizeof(float) / 1048576.0;
        log_info("optimizer state per rank: %.2f MiB (AdamW m+v)%s; without ZeRO-1 %.2f MiB | "
                 "%d threads per rank", opt_mb, c->zero ? " with ZeRO-1" : "", full_mb,
                 tr.threads);
    }
    trainer_add_hook(&tr, "eval", c->eval_every, trainer_hook_eval, NULL);
    if (c->sample_tokens > 0) trainer_add_hook(&tr, "sample", c->sample_every, trainer_hook_sample, NULL);
    /* Robustness (safety/robust.h): the robust_every evaluation hook and adv_train. */
    robust_wiring *robust = robust_attach_trainer(&tr, err, sizeof(err));
    if (!robust) {
        if (ms.rank == 0) fprintf(stderr, "minitrain: error: %s\n", err);
        trainer_free(&tr);
        comm_finalize();
        return MT_EXIT_USAGE;
    }
    /* Checkpoints (train/checkpoint.h): --resume auto|no|STEP, then a save every ckpt_every
     * steps and at the end; the hook runs every step to advance an asynchronous save. */
    checkpointer *ckpt = checkpoint_create(&tr);
    if (checkpoint_resume(ckpt, &tr, err, sizeof(err)) < 0) {
        if (ms.rank == 0) {
            fprintf(stderr, "minitrain: error: %s\n", err);
            trainer_log_error(&tr, err);
            rundb_run_end(tr.db, tr.run_id, "failed");
        }
        checkpoint_free(ckpt);
        robust_detach(robust);
        trainer_free(&tr);
        comm_finalize();
        return MT_EXIT_USAGE;
    }
    if (c->ckpt_every > 0) trainer_add_hook(&tr, "checkpoint", 1, checkpoint_hook, ckpt);
    /* Resilience (sched/hooks.h): --fault injection + heartbeats for `minitrain run`. Keep this
     * after the checkpoint resume and the checkpoint hook (it reads the resumed step, and a
     * corrupt-ckpt fault waits for the step's commit). */
    if (sched_attach_trainer(&tr, err, sizeof(err)) != 0) mt_fail("%s", err);

    double t0 = timer_now();
    int end = c->stop_after > 0 ? c->stop_after : c->steps;
    if (tr.step >= end) { /* resumed at (or past) the end: nothing to train, nothing to rewrite */
        log_info("run '%s' is already at step %d of %d; nothing to do (raise --steps to train "
                 "further)", c->name, tr.step, end);
        checkpoint_free(ckpt);
        robust_detach(robust);
        if (ms.rank == 0) {
            trainer_log_end(&tr, "completed", "already at the last step: nothing to do");
            rundb_run_end(tr.db, tr.run_id, "completed");
        }
        trainer_free(&tr);
        mesh_free(&ms);
        comm_free(world);
        comm_finalize();
        return MT_EXIT_OK;
    }
    int rc = trainer_run(&tr);
    int ckpt_rc = checkpoint_finish(ckpt, &tr); /* waits for a save in flight */
    if (rc == MT_EXIT_OK) rc = ckpt_rc;
    checkpoint_free(ckpt);
    robust_detach(robust);
    double wall = timer_now() - t0;
    if (trainer_save_model(&tr, err, sizeof(err)) != 0) { /* only rank 0 writes, so fails */
        trainer_log_error(&tr, err);
        rundb_run_end(tr.db, tr.run_id, "failed");
        trainer_free(&tr);
        mt_fail("saving the model: %s", err);
    }
    const char *status = rc != MT_EXIT_OK ? "failed" : (tr.step < c->steps ? "stopped" : "completed");
    if (ms.rank == 0) {
        trainer_log_end(&tr, status, NULL);
        rundb_run_end(tr.db, tr.run_id, status);
    }
    char dbuf[32];
    log_info("done: %d steps in %s | final train loss %.4f | val loss %.4f | saved %s/model.safetensors",
             tr.step, log_duration(wall, dbuf, sizeof(dbuf)), tr.last_loss, tr.last_val_loss,
             c->run_dir);
    trainer_free(&tr);
    mesh_free(&ms);
    comm_free(world);
    comm_finalize();
    return rc;
}
