/*
 * cmd/robust.c — `minitrain robust`: attack a trained run's model on its validation split and
 * print (and record in run.db) the robustness table. The attacks are safety/robust.h's; this file
 * parses the options and wires the model, the data and the layout to them.
 *
 * Layouts: under mpirun with --tp/--pp/--dp every rank loads the saved (unsharded) model, keeps
 * its own shard (gpt_take_from_full) and runs its part of the same evaluation; world rank 0
 * prints and writes. One process and any layout print the same numbers (fp32 tolerance).
 */
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "core/log.h"
#include "core/rundb.h"
#include "parallel/comm.h"
#include "parallel/mesh.h"
#include "parallel/pp.h"
#include "safety/robust.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "text/tokenizer.h"

static int g_rank;

/* A user error after MPI started: one line from rank 0, every rank exits 2. */
static MT_NORETURN MT_PRINTF(1, 2) void cli_fail(const char *fmt, ...) {
    if (g_rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "minitrain: error: robust: ");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    comm_finalize();
    exit(MT_EXIT_USAGE);
}

/* The run's newest `runs` row: its id and its config (data directory, batch size, seed). */
typedef struct {
    int64_t run_id;
    char data[512];
    int batch_size, seed;
} run_info;

static void read_run(const char *run_dir, run_info *ri) {
    memset(ri, 0, sizeof(*ri));
    char path[4200];
    rundb_path(run_dir, path, sizeof(path));
    struct stat sb;
    sqlite3 *db = NULL;
    if (stat(path, &sb) != 0 || sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return;
    }
    sqlite3_busy_timeout(db, RUNDB_BUSY_TIMEOUT_MS);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT id, config FROM runs ORDER BY id DESC LIMIT 1", -1, &st,
                           NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
        ri->run_id = sqlite3_column_int64(st, 0);
        const char *cfg = (const char *)sqlite3_column_text(st, 1);
        cJSON *o = cfg ? cJSON_Parse(cfg) : NULL;
        const cJSON *v;
        if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(o, "data")))
            snprintf(ri->data, sizeof(ri->data), "%s", v->valuestring);
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(o, "batch_size")))
            ri->batch_size = v->valueint;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(o, "seed"))) ri->seed = v->valueint;
        cJSON_Delete(o);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static void progress(int done, int total, void *user) {
    double *t0 = user;
    fprintf(stderr, "robust: batch %d/%d (%.1f s)\n", done, total, omp_get_wtime() - *t0);
}

/* The saved model (step < 0: the newest), the tokenizer's vocabulary size, the run's config and
 * its validation split (data NULL: the run's own `data`). User errors end the job (cli_fail). */
static void load_inputs(const char *run, int step, const char *data, int tp, int pp,
                        gpt_model *full, int *model_step, int *vocab_limit, run_info *ri,
                        data_loader *val) {
    char err[1024], path[1100];
    int rc = step >= 0 ? model_io_load_step(full, run, step, model_step, err, sizeof(err))
                       : model_io_load(full, run, model_step, err, sizeof(err));
    if (rc != 0) cli_fail("%s", err);
    if (full->cfg.n_head % tp != 0 || full->cfg.d_model % tp != 0)
        cli_fail("tp (%d) must divide n_head (%d) and d_model (%d)", tp, full->cfg.n_head,
                 full->cfg.d_model);
    if (pp > full->cfg.n_layer)
        cli_fail("pp (%d) exceeds the model's %d layers", pp, full->cfg.n_layer);
    tok_tokenizer tok;
    snprintf(path, sizeof(path), "%s/tokenizer.bin", run);
    if (tok_load(&tok, path, err, sizeof(err)) != 0) cli_fail("%s", err);
    *vocab_limit = tok_vocab_size(&tok);
    tok_free(&tok);
    read_run(run, ri);
    if (!data) data = ri->data;
    if (!data[0]) cli_fail("run '%s' records no data directory (no run.db?): give --data DIR", run);
    if (data_loader_open(val, data, "val", full->cfg.seq_len, 0, 0, err, sizeof(err)) != 0)
        cli_fail("%s (the run's validation data; give --data DIR if it moved)", err);
    if (data_loader_check_vocab(val, full->cfg.vocab_size, err, sizeof(err)) != 0)
        cli_fail("%s", err);
}

/* This rank's shard of `full` for the mesh (full itself when nothing is sharded). */
static void make_shard(gpt_model *m, gpt_model *full, const mesh *ms) {
    if (ms->tp == 1 && ms->pp == 1) {
        *m = *full;
        return;
    }
    int begin[257];
    char err[256];
    if (pp_split_layers(full->cfg.n_layer, ms->pp, NULL, begin, err, sizeof(err)) != 0)
        cli_fail("%s", err);
    gpt_config gc = full->cfg;
    gc.tp = ms->tp, gc.tp_rank = ms->tp_rank;
    gc.pp = ms->pp, gc.pp_rank = ms->pp_rank;
    gc.layer_begin = begin[ms->pp_rank], gc.layer_end = begin[ms->pp_rank + 1];
    if (gpt_build(m, &gc, err, sizeof(err)) != 0) cli_fail("layout: %s", err);
    gpt_take_from_full(m, full);
    gpt_free(full);
}

static const char ABOUT[] =
    "Attack the model of run DIR (its newest checkpoint or model.safetensors; --step N for\n"
    "exactly that step) on the first batches x batch-size windows of its validation split,\n"
    "and print clean vs adversarial NLL, perplexity, next-token accuracy and the attack\n"
    "success rate (positions whose argmax changed) per eps. eps is relative to the mean L2\n"
    "norm of the token-embedding rows, per token (docs/safety.md). Rows go to DIR/run.db,\n"
    "table evals (kind 'cli'), unless --no-db. Under mpirun, --tp/--pp/--dp choose the layout.";

int cmd_robust(int argc, char **argv) {
    const char *run = NULL, *data = NULL, *attack = "pgd", *norm = "l2",
               *eps = "0,0.01,0.03,0.1";
    int step = -1, json = 0, no_db = 0, tp = 1, pp = 1, dp = 0, threads = 0, batch_size = 0;
    long long seed = -1;
    char err[1024];
    robust_opts o;
    robust_opts_default(&o);
    const args_opt opts[] = {
        {"run", KEYTAB_STRING, &run, 0, 0, "DIR", "run directory written by `minitrain train`", ""},
        {"step", KEYTAB_INT, &step, 0, 2e9, "N", "evaluate exactly this step (default: the newest)",
         ""},
        {"attack", KEYTAB_STRING, &attack, 0, 0, "A", "pgd | fgsm (one step of size eps) | hotflip "
         "(token swaps)", "pgd"},
        {"norm", KEYTAB_STRING, &norm, 0, 0, "N", "l2: one ball per sequence | linf: per element",
         "l2"},
        {"eps", KEYTAB_STRING, &eps, 0, 0, "LIST", "comma list of relative eps", "0,0.01,0.03,0.1"},
        {"steps", KEYTAB_INT, &o.steps, 1, 10000, "K", "PGD ascent steps", NULL},
        {"alpha-mult", KEYTAB_DOUBLE, &o.alpha_mult, 1e-6, 1e6, "A", "PGD step size alpha = A*eps/K "
         "(Madry et al. 2018)", NULL},
        {"random-start", KEYTAB_FLAG, &o.random_start, 0, 0, NULL, "PGD starts at a uniform random "
         "point of the ball", NULL},
        {"flips", KEYTAB_INT, &o.flips, 1, 1e6, "K", "HotFlip: token swaps per sequence", NULL},
        {"beam", KEYTAB_INT, &o.beam, 1, 10, "W", "HotFlip: 1 = greedy, up to 10 = beam search", NULL},
        {"batches", KEYTAB_INT, &o.batches, 1, 1e9, "N", "validation batches attacked", NULL},
        {"batch-size", KEYTAB_INT, &batch_size, 1, 1e6, "B", "sequences per batch", "the run's"},
        {"seed", KEYTAB_I64, &seed, 0, 9e18, "S", "seed of the random starts", "the run's"},
        {"data", KEYTAB_STRING, &data, 0, 0, "DIR", "validation data", "the run's `data`"},
        {"tp", KEYTAB_INT, &tp, 1, 1024, "N", "tensor-parallel degree (under mpirun)", NULL},
        {"pp", KEYTAB_INT, &pp, 1, 256, "N", "pipeline-parallel degree (under mpirun)", NULL},
        {"dp", KEYTAB_INT, &dp, 0, 1e6, "N", "data-parallel degree (0 = world / (tp x pp))", NULL},
        {"threads", KEYTAB_INT, &threads, 0, 1024, "N", "CPU threads per rank (0 = cores / ranks)",
         NULL},
        {"json", KEYTAB_FLAG, &json, 0, 0, NULL, "print one JSON object with a `rows` array", NULL},
        {"no-db", KEYTAB_FLAG, &no_db, 0, 0, NULL, "do not write the rows into run.db", NULL},
        {0},
    };
    const args_spec spec = {
        .cmd = "robust",
        .synopsis = "usage: minitrain robust --run DIR [--step N] [--attack fgsm|pgd|hotflip] "
                    "[--norm l2|linf]\n                        [--eps LIST] [--steps K] "
                    "[--json] [options]",
        .about = ABOUT,
        .opts = opts,
        .epilog = "examples:\n"
                  "  minitrain robust --run runs/shakespeare --eps 0,0.03,0.1 --steps 10\n"
                  "  minitrain robust --run runs/shakespeare --attack hotflip --flips 3 --beam 4\n"
                  "  mpirun -np 2 minitrain robust --run runs/shakespeare --pp 2 --json",
    };
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    if (!run) mt_fail("robust: --run DIR is required (a directory written by `minitrain train`)");
    if (robust_parse_attack(attack, &o.attack, err, sizeof(err)) != 0 ||
        robust_parse_norm(norm, &o.norm, err, sizeof(err)) != 0 ||
        robust_parse_eps(eps, &o, err, sizeof(err)) != 0)
        mt_fail("robust: %s", err);

    comm *world = comm_init_world(NULL, NULL);
    g_rank = comm_rank(world);
    log_set_rank(g_rank);
    if (mesh_check(comm_size(world), tp, 1, pp, &dp, 1, err, sizeof(err)) != 0) cli_fail("%s", err);
    mesh ms;
    mesh_init(&ms, world, tp, 1, pp, dp, 1);
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int local_ranks = local && atoi(local) > 0 ? atoi(local) : 1;
    if (threads <= 0) threads = omp_get_num_procs() / local_ranks;
    ops_set_threads(threads < 1 ? 1 : threads);
    /* cpu unless MINITRAIN_DEVICE says otherwise (the suite's guard pass) */
    if (ops_select("cpu", 0, err, sizeof(err)) != 0) cli_fail("%s", err);

    /* the model, the tokenizer (real vocabulary) and the validation split */
    gpt_model full, m;
    int model_step = 0;
    data_loader val;
    run_info ri;
    load_inputs(run, step, data, tp, pp, &full, &model_step, &o.vocab_limit, &ri, &val);
    o.batch_size = batch_size > 0 ? batch_size : ri.batch_size > 0 ? ri.batch_size : 8;
    o.seed = seed >= 0 ? (uint64_t)seed : (uint64_t)(ri.seed > 0 ? ri.seed : 1337);
    make_shard(&m, &full, &ms);
    m.tp_comm = ms.tp_group;
    gpt_alloc_slots(&m, o.batch_size, m.cfg.seq_len, 1);

    double t0 = omp_get_wtime();
    o.progress = json ? NULL : progress;
    o.progress_user = &t0;
    robust_result res;
    if (robust_evaluate(&m, &ms, &val, &o, &res, err, sizeof(err)) != 0) cli_fail("%s", err);
    if (g_rank == 0) {
        robust_print(&res, &o, run, model_step, json);
        if (!no_db) {
            rundb *db = rundb_open(run, err, sizeof(err));
            if (!db) cli_fail("%s", err);
            robust_log(db, ri.run_id, model_step, "cli", &o, &res);
            rundb_close(db);
        }
    }
    data_loader_close(&val);
    gpt_free(&m);
    mesh_free(&ms);
    comm_free(world);
    comm_finalize();
    return MT_EXIT_OK;
}
