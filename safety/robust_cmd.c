/*
 * safety/robust_cmd.c — `minitrain robust`: attack a trained run's model on its validation split
 * and print (and record in run.db) the robustness table. See safety/robust.h for the attacks.
 *
 * TEMPORARY HOME: subcommands move to the cmd/ floor (cmd/robust.c) when it lands on main; this
 * file holds only argument parsing and wiring, so the move is a rename.
 *
 * Layouts: under mpirun with --tp/--pp/--dp every rank loads the saved (unsharded) model, keeps
 * its own shard (gpt_take_from_full) and runs its part of the same evaluation; world rank 0
 * prints and writes. One process and any layout print the same numbers (fp32 tolerance).
 */
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/check.h"
#include "core/log.h"
#include "core/rundb.h"
#include "parallel/comm.h"
#include "parallel/mesh.h"
#include "parallel/pp.h"
#include "safety/robust.h"
#include "train/model_io.h"
#include "train/ops.h"
#include "train/tokenizer.h"

static void usage(void) {
    printf("usage: minitrain robust --run DIR [--step N] [--attack fgsm|pgd|hotflip]\n"
           "                        [--norm l2|linf] [--eps 0,0.01,0.03,0.1] [--steps K]\n"
           "                        [--alpha-mult A] [--random-start] [--flips K] [--beam W]\n"
           "                        [--batches N] [--batch-size B] [--seed S] [--data DIR]\n"
           "                        [--tp N] [--pp N] [--dp N] [--threads N] [--json] [--no-db]\n\n"
           "Attack the model of run DIR (its newest checkpoint or model.safetensors; --step N for\n"
           "exactly that step) on the first batches x batch-size windows of its validation split,\n"
           "and print clean vs adversarial NLL, perplexity, next-token accuracy and the attack\n"
           "success rate (positions whose argmax changed) per eps. Rows go to DIR/run.db, table\n"
           "evals (kind 'cli'), unless --no-db.\n\n"
           "  --attack A       pgd (default), fgsm (one step of size eps) or hotflip (token swaps)\n"
           "  --norm N         l2: one ball per sequence (default); linf: per element\n"
           "  --eps LIST       eps relative to the mean L2 norm of the token-embedding rows, per\n"
           "                   token (default 0,0.01,0.03,0.1; the absolute radius is printed)\n"
           "  --steps K        PGD ascent steps (default 5); step size alpha = A*eps/K\n"
           "  --alpha-mult A   default 2.5 (Madry et al. 2018)\n"
           "  --random-start   PGD starts at a uniform random point of the ball\n"
           "  --flips K        HotFlip: token swaps per sequence (default 2)\n"
           "  --beam W         HotFlip: 1 = greedy (default), up to 10 = beam search\n"
           "  --batches N      validation batches (default 2); --batch-size B (default: the run's)\n"
           "  --seed S         seed of random starts (default: the run's seed)\n"
           "  --data DIR       validation data (default: the run's `data` directory)\n"
           "  --tp/--pp/--dp   parallel layout under mpirun (default: one process; dp = world /\n"
           "                   (tp x pp))\n"
           "  --json           print one JSON object with a `rows` array\n\n"
           "example:\n  minitrain robust --run runs/shakespeare --eps 0,0.03,0.1 --steps 10\n");
}

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

static double num(const char *flag, const char *s, double lo, double hi) {
    char *end;
    double v = strtod(s, &end);
    if (*s == 0 || *end != 0 || !isfinite(v)) mt_fail("robust: %s needs a number, got '%s'", flag, s);
    if (v < lo || v > hi) mt_fail("robust: %s = %s is out of range [%g, %g]", flag, s, lo, hi);
    return v;
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

int robust_cmd(int argc, char **argv) {
    const char *run = NULL, *data = NULL;
    int step = -1, json = 0, no_db = 0, tp = 1, pp = 1, dp = 0, threads = 0, batch_size = 0;
    long long seed = -1;
    char err[1024];
    robust_opts o;
    robust_opts_default(&o);
    static struct option opts[] = {
        {"run", required_argument, 0, 'r'},      {"step", required_argument, 0, 'S'},
        {"attack", required_argument, 0, 'a'},   {"norm", required_argument, 0, 'n'},
        {"eps", required_argument, 0, 'e'},      {"steps", required_argument, 0, 'k'},
        {"alpha-mult", required_argument, 0, 'A'}, {"random-start", no_argument, 0, 'R'},
        {"flips", required_argument, 0, 'f'},    {"beam", required_argument, 0, 'w'},
        {"batches", required_argument, 0, 'b'},  {"batch-size", required_argument, 0, 'B'},
        {"seed", required_argument, 0, 's'},     {"data", required_argument, 0, 'd'},
        {"tp", required_argument, 0, 't'},       {"pp", required_argument, 0, 'p'},
        {"dp", required_argument, 0, 'D'},       {"threads", required_argument, 0, 'T'},
        {"json", no_argument, 0, 'j'},           {"no-db", no_argument, 0, 'N'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'r': run = optarg; break;
        case 'S': step = (int)num("--step", optarg, 0, 2e9); break;
        case 'a':
            if (robust_parse_attack(optarg, &o.attack, err, sizeof(err)) != 0) mt_fail("robust: %s", err);
            break;
        case 'n':
            if (robust_parse_norm(optarg, &o.norm, err, sizeof(err)) != 0) mt_fail("robust: %s", err);
            break;
        case 'e':
            if (robust_parse_eps(optarg, &o, err, sizeof(err)) != 0) mt_fail("robust: %s", err);
            break;
        case 'k': o.steps = (int)num("--steps", optarg, 1, 10000); break;
        case 'A': o.alpha_mult = num("--alpha-mult", optarg, 1e-6, 1e6); break;
        case 'R': o.random_start = 1; break;
        case 'f': o.flips = (int)num("--flips", optarg, 1, 1e6); break;
        case 'w': o.beam = (int)num("--beam", optarg, 1, 10); break;
        case 'b': o.batches = (int)num("--batches", optarg, 1, 1e9); break;
        case 'B': batch_size = (int)num("--batch-size", optarg, 1, 1e6); break;
        case 's': seed = (long long)num("--seed", optarg, 0, 9e18); break;
        case 'd': data = optarg; break;
        case 't': tp = (int)num("--tp", optarg, 1, 1024); break;
        case 'p': pp = (int)num("--pp", optarg, 1, 256); break;
        case 'D': dp = (int)num("--dp", optarg, 0, 1e6); break;
        case 'T': threads = (int)num("--threads", optarg, 0, 1024); break;
        case 'j': json = 1; break;
        case 'N': no_db = 1; break;
        case 'h': usage(); return MT_EXIT_OK;
        default:
            mt_fail("robust: unknown or incomplete option '%s' (see `minitrain robust --help`)",
                    argv[optind - 1]);
        }
    }
    if (optind < argc) mt_fail("robust: unexpected argument '%s'", argv[optind]);
    if (!run) mt_fail("robust: --run DIR is required (a directory written by `minitrain train`)");

    comm *world = comm_init_world(NULL, NULL);
    g_rank = comm_rank(world);
    log_set_rank(g_rank);
    if (mesh_check(comm_size(world), tp, pp, &dp, 1, err, sizeof(err)) != 0) cli_fail("%s", err);
    mesh ms;
    mesh_init(&ms, world, tp, pp, dp, 1);
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int local_ranks = local && atoi(local) > 0 ? atoi(local) : 1;
    if (threads <= 0) threads = omp_get_num_procs() / local_ranks;
    ops_set_threads(threads < 1 ? 1 : threads);

    /* the model, the tokenizer (real vocabulary) and the validation split */
    gpt_model full, m;
    int model_step = 0;
    int rc = step >= 0 ? model_io_load_step(&full, run, step, &model_step, err, sizeof(err))
                       : model_io_load(&full, run, &model_step, err, sizeof(err));
    if (rc != 0) cli_fail("%s", err);
    if (full.cfg.n_head % tp != 0 || full.cfg.d_model % tp != 0)
        cli_fail("tp (%d) must divide n_head (%d) and d_model (%d)", tp, full.cfg.n_head,
                 full.cfg.d_model);
    if (pp > full.cfg.n_layer) cli_fail("pp (%d) exceeds the model's %d layers", pp, full.cfg.n_layer);
    char path[1100];
    tok_tokenizer tok;
    snprintf(path, sizeof(path), "%s/tokenizer.bin", run);
    if (tok_load(&tok, path, err, sizeof(err)) != 0) cli_fail("%s", err);
    o.vocab_limit = tok_vocab_size(&tok);
    tok_free(&tok);
    run_info ri;
    read_run(run, &ri);
    if (!data) data = ri.data;
    if (!data[0]) cli_fail("run '%s' records no data directory (no run.db?): give --data DIR", run);
    data_loader val;
    if (data_loader_open(&val, data, "val", full.cfg.seq_len, 0, 0, err, sizeof(err)) != 0)
        cli_fail("%s (the run's validation data; give --data DIR if it moved)", err);
    if (data_loader_check_vocab(&val, full.cfg.vocab_size, err, sizeof(err)) != 0)
        cli_fail("%s", err);
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
