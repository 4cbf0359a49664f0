/*
 * bench/bench_ckpt.c — checkpoint costs for the GPT-2 124M shape (12 layers, d_model 768, 12 heads,
 * vocab 50257, context 1024; fp32 parameters + AdamW m and v = 1.5 GB per checkpoint).
 *
 * Every figure is measured in ONE run, interleaved with its baseline so that a noisy shared machine
 * shifts both alike, and printed as the median over --repeat rounds (load average at start/end):
 *   1. where the time of a save goes: the previous path measured phase by phase (header
 *      serialise, write() of the tensors, fsync, then the commit's separate CRC pass reading every
 *      file back) beside the writer's path (ckpt/bulkio.c: CRC while writing, writeback windows,
 *      2 files in parallel; its thread-time phases), both against `dd if=/dev/zero bs=1M
 *      conv=fsync` of the same size to the same directory in the same round. Target: the save's
 *      write throughput >= 80% of dd;
 *   2. training stall per checkpoint: synchronous save (write + fsync + commit on the training
 *      thread) vs asynchronous save — its snapshot copied by the writer's thread while the next
 *      forward/backward runs (the optimizer step waits for it: trainer_before_update), and, for
 *      comparison, copied inline before training resumes. Target: async stall <= 3% of sync;
 *   3. step time of training while an async save is being written vs without, and each async
 *      save's total cost: its stall + (the --train-steps steps it overlapped − as many steps
 *      right after it) + the wait for the rest of its write (checkpoint_wait); target <= 10% of
 *      the synchronous save;
 *   4. restart to first step (--restart 1): verified resume (manifest + CRC-32C of every file +
 *      load) plus one training step, from tier 0 (tmpfs) vs tier 1 (the disk; page cache
 *      dropped first with posix_fadvise(DONTNEED) so the read really comes from the disk).
 *
 *   make bench && build/bench/bench_ckpt [--dir DIR] [--shm DIR] [--threads 2] [--repeat 3]
 *                                         [--layers 12] [--train-steps 1] [--restart 1] [--async 1]
 * (--async 0 --restart 0: only the write figures, a few seconds per round.)
 * DIR (default /tmp/minitrain_bench_ckpt) is tier 1 and the dd target; --shm (default
 * /dev/shm/minitrain_bench) is tier 0. Both are removed at the end.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "core/config.h"
#include "core/rng.h"
#include "core/stats.h"
#include "core/timer.h"
#include "parallel/comm.h"
#include "parallel/mesh.h"
#include "ckpt/bulkio.h"
#include "train/checkpoint.h"
#include "model/model_ckpt.h"
#include "model/model.h"
#include "ops/ops.h"
#include "model/optim.h"
#include "train/trainer.h"

/* the median of a sample, leaving it unsorted (core/stats.h) */
#define median(v, n) stats_median_copy((v), (size_t)(n))

static int B = 4, T = 64;
static int *g_inp, *g_tgt;

static double train_step(trainer *tr) {
    double t0 = timer_now();
    gpt_model *m = &tr->model;
    gpt_zero_grad(m);
    gpt_forward(m, g_inp, g_tgt, B, T, 1.0f / (B * T));
    gpt_backward(m);
    double norm = optim_grad_norm(m->grads, m->num_params);
    trainer_before_update(tr); /* an async save's snapshot copy must be done */
    optim_step(&tr->opt, m, 1e-4f, optim_clip_scale(norm, 1.0f));
    tr->opt.t++;
    tr->step++;
    return timer_now() - t0;
}

/* Drop the page cache of every file under dir (clean pages only: they were fsynced). */
static void evict(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[4200];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            evict(path);
            continue;
        }
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
    closedir(d);
}

static void set_ckpt(trainer *tr, int async, int tier0) {
    tr->cfg.ckpt_every = 1;
    tr->cfg.ckpt_async = async;
    tr->cfg.ckpt_tier0 = tier0;
    tr->cfg.ckpt_keep = 1;
}

static double loadavg1(void) {
    double l[3] = {0, 0, 0};
    return getloadavg(l, 3) >= 1 ? l[0] : -1;
}

/* Let the disk settle before a measurement: the previous item's deletions (retention, dd's and
 * the previous path's files) are discarded by ext4 (`-o discard`) at its next journal commit, up
 * to 5 s later, and would otherwise land on whatever is measured next. */
static void settle(void) {
    sync();
    sleep(6);
}

/* dd of `mb` MiB from /dev/zero to dir, conv=fsync; seconds (negative when dd failed). */
static double run_dd(const char *dir, int mb) {
    char cmd[4400], path[4200];
    snprintf(path, sizeof(path), "%s/dd.bin", dir);
    snprintf(cmd, sizeof(cmd), "dd if=/dev/zero of='%s' bs=1M count=%d conv=fsync 2>/dev/null",
             path, mb);
    double t = timer_now();
    int rc = system(cmd);
    double s = timer_now() - t;
    unlink(path);
    return rc == 0 ? s : -s;
}

/* The previous write path, phase by phase, on the same files: st_write's header, its write()s of
 * whole tensors, its fsync, then ckpt_commit's CRC pass that read every file back. ms[4]. */
typedef struct {
    double header, write, fsync, crc;
} legacy_phases;

static void write_all_fd(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t put = write(fd, p, n < ((size_t)1 << 30) ? n : ((size_t)1 << 30));
        if (put <= 0) {
            perror("bench_ckpt: write");
            exit(1);
        }
        p += put;
        n -= (size_t)put;
    }
}

static legacy_phases legacy_save(const char *dir, const model_ckpt_file *files, int n) {
    legacy_phases ph = {0, 0, 0, 0};
    char path[4400], err[512];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/legacy-%s", dir, files[i].name);
        double t0 = timer_now();
        size_t hb;
        char *head = st_header_block(path, files[i].tensors, files[i].n_tensors,
                                     files[i].metadata_json, &hb, err, sizeof(err));
        double t1 = timer_now();
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (head == NULL || fd < 0) {
            fprintf(stderr, "bench_ckpt: %s\n", head ? path : err);
            exit(1);
        }
        write_all_fd(fd, head, hb);
        for (int k = 0; k < files[i].n_tensors; k++) {
            uint64_t b;
            st_tensor_bytes(&files[i].tensors[k], &b);
            write_all_fd(fd, files[i].tensors[k].data, (size_t)b);
        }
        double t2 = timer_now();
        fsync(fd);
        close(fd);
        double t3 = timer_now();
        ph.header += (t1 - t0) * 1e3, ph.write += (t2 - t1) * 1e3, ph.fsync += (t3 - t2) * 1e3;
        free(head);
    }
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/legacy-%s", dir, files[i].name);
        double t0 = timer_now();
        uint32_t crc;
        ckpt_crc32c_file(path, &crc, NULL, err, sizeof(err));
        ph.crc += (timer_now() - t0) * 1e3;
        unlink(path);
    }
    return ph;
}

/* The bench's options (see the opening comment). */
typedef struct {
    const char *dir, *shm;
    int threads, repeat, L, train_steps, do_restart, do_async;
} ckpt_opts;

enum { R_MAX = 64 };

/* Figures 1 + 2a, one entry per round: MB/s, ratios to the round's dd, ms. */
typedef struct {
    double dd_mbs[R_MAX], leg_mbs[R_MAX], leg_ratio[R_MAX], new_mbs[R_MAX], new_ratio[R_MAX];
    double dir_mbs[R_MAX], dir_ratio[R_MAX], sync_stall[R_MAX], new_commit[R_MAX];
    double leg_total_mbs[R_MAX], new_total_mbs[R_MAX];
    double ph_leg[4][R_MAX], ph_new[4][R_MAX], ph_dir[4][R_MAX], buf_stall[R_MAX];
    int64_t bytes; /* of one checkpoint */
    int dd_failed, mb;
} write_figs;

/* Figures 2b + 3: [0] snapshot deferred to the writer, [1] copied inline; ms, and step seconds. */
typedef struct {
    double stall[2][R_MAX], wait[2][R_MAX], write[2][R_MAX], total_cost[R_MAX];
    double during, without; /* seconds of the steps with / without a save in flight */
    int n_during;
} async_figs;

/* Figure 4, [tier]: ms. */
typedef struct {
    double restart[2], resume_ms[2], first_ms[2];
} restart_figs;

/* Step 1: the flags (clamped: 1 <= repeat <= 64, train_steps >= 1); 0, or 2 after the usage. */
static int parse_ckpt_opts(ckpt_opts *o, int argc, char **argv) {
    *o = (ckpt_opts){.dir = "/tmp/minitrain_bench_ckpt", .shm = "/dev/shm/minitrain_bench",
                     .threads = 2, .repeat = 3, .L = 12, .train_steps = 1, .do_restart = 1,
                     .do_async = 1};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dir")) o->dir = argv[i + 1];
        else if (!strcmp(argv[i], "--shm")) o->shm = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) o->threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeat")) o->repeat = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--layers")) o->L = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--train-steps")) o->train_steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--restart")) o->do_restart = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--async")) o->do_async = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_ckpt [--dir DIR] [--shm DIR] [--threads N] [--repeat N]"
                            " [--layers N] [--train-steps N] [--restart 0|1] [--async 0|1]\n");
            return 2;
        }
    }
    if (o->repeat < 1) o->repeat = 1;
    if (o->repeat > 64) o->repeat = 64;
    if (o->train_steps < 1) o->train_steps = 1;
    return 0;
}

/* Step 2: a trainer around the 124M model (L layers), built by hand as bench/bench_step.c
 * does, a random batch, two warm-up steps (m, v != 0) when a step will be timed. 1 on error. */
static int setup_trainer(trainer *tr, mesh *ms, const ckpt_opts *o) {
    char err[1024];
    memset(tr, 0, sizeof(*tr));
    config_defaults(&tr->cfg);
    snprintf(tr->cfg.run_dir, sizeof(tr->cfg.run_dir), "%s", o->dir);
    snprintf(tr->cfg.name, sizeof(tr->cfg.name), "bench");
    tr->cfg.n_layer = o->L, tr->cfg.n_head = 12, tr->cfg.d_model = 768, tr->cfg.seq_len = 1024;
    tr->cfg.vocab_size = 50257, tr->cfg.steps = 1000, tr->cfg.batch_size = B, tr->cfg.global_batch = B;
    tr->mesh = ms;
    tr->grad_accum = 1;
    gpt_config gc = {.n_layer = o->L, .n_head = 12, .d_model = 768, .seq_len = 1024, .vocab_size = 50257};
    if (gpt_build(&tr->model, &gc, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    gpt_init_weights(&tr->model, 1);
    gpt_alloc_training(&tr->model, B, T);
    optim_init(&tr->opt, tr->model.num_params, 0.9f, 0.95f, 1e-8f, 0.1f);
    config_to_json(&tr->cfg, tr->config_json, sizeof(tr->config_json));
    g_inp = malloc(sizeof(int) * B * T);
    g_tgt = malloc(sizeof(int) * B * T);
    rng_state r;
    rng_seed(&r, 3);
    for (int i = 0; i < B * T; i++) g_inp[i] = (int)(rng_u64(&r) % 50257), g_tgt[i] = (int)(rng_u64(&r) % 50257);
    for (int i = 0; (o->do_async || o->do_restart) && i < 2; i++) train_step(tr); /* warm-up */
    return 0;
}

/* Step 3, one round of figures 1 + 2a: synchronous save (buffered) | dd | previous path on the
 * files lf | synchronous save (O_DIRECT), each against the dd of its own round. 1 on a failed
 * save. */
static int write_round(trainer *tr, const ckpt_opts *o, const model_ckpt_file *lf,
                       checkpointer *ck, checkpointer *ckd, write_figs *w, int i) {
    checkpoint_stats s;
    tr->step++;
    settle();
    checkpoint_save(ck, tr);
    checkpoint_get_stats(ck, &s);
    if (s.failures) {
        fprintf(stderr, "synchronous save failed\n");
        return 1;
    }
    w->bytes = s.last_bytes;
    w->mb = (int)(w->bytes / 1048576) + 1;
    double mbytes = w->bytes / 1e6;
    settle();
    double dd_s = run_dd(o->dir, w->mb);
    if (dd_s < 0) w->dd_failed = 1, dd_s = -dd_s;
    w->dd_mbs[i] = w->mb * 1.048576 / dd_s;
    settle();
    legacy_phases lp = legacy_save(o->dir, lf, 2);
    double leg_files = lp.header + lp.write + lp.fsync;
    w->leg_mbs[i] = mbytes / (leg_files / 1e3);
    w->leg_total_mbs[i] = mbytes / ((leg_files + lp.crc) / 1e3);
    w->leg_ratio[i] = w->leg_mbs[i] / w->dd_mbs[i];
    w->ph_leg[0][i] = lp.header, w->ph_leg[1][i] = lp.write, w->ph_leg[2][i] = lp.fsync,
    w->ph_leg[3][i] = lp.crc;
    /* the synchronous save above ran first in the round; its figures */
    w->new_mbs[i] = mbytes / (s.last_files_ms / 1e3);
    w->new_ratio[i] = w->new_mbs[i] / w->dd_mbs[i];
    w->buf_stall[i] = s.last_snapshot_ms;
    w->ph_new[0][i] = s.last_io.header_ms, w->ph_new[1][i] = s.last_io.write_ms;
    w->ph_new[2][i] = s.last_io.sync_ms, w->ph_new[3][i] = s.last_io.crc_ms;
    tr->step++;
    settle();
    checkpoint_save(ckd, tr);
    checkpoint_get_stats(ckd, &s);
    if (s.failures) {
        fprintf(stderr, "synchronous save (O_DIRECT) failed\n");
        return 1;
    }
    w->dir_mbs[i] = mbytes / (s.last_files_ms / 1e3);
    w->dir_ratio[i] = w->dir_mbs[i] / w->dd_mbs[i];
    w->new_total_mbs[i] = mbytes / (s.last_write_ms / 1e3);
    w->new_commit[i] = s.last_write_ms - s.last_files_ms;
    w->sync_stall[i] = s.last_snapshot_ms;
    w->ph_dir[0][i] = s.last_io.header_ms, w->ph_dir[1][i] = s.last_io.write_ms;
    w->ph_dir[2][i] = s.last_io.sync_ms, w->ph_dir[3][i] = s.last_io.crc_ms;
    printf("  round %d (load %.2f): dd %.0f MB/s | previous path %.0f MB/s (%.0f%%) | writer "
           "buffered %.0f MB/s (%.0f%%), O_DIRECT %.0f MB/s (%.0f%%) | sync stall %.0f ms\n", i + 1,
           loadavg1(), w->dd_mbs[i], w->leg_mbs[i], 100 * w->leg_ratio[i], w->new_mbs[i],
           100 * w->new_ratio[i], w->dir_mbs[i], 100 * w->dir_ratio[i], w->sync_stall[i]);
    return 0;
}

/* Step 3: the trainer's two files for the previous path measured by hand, the two synchronous
 * checkpointers (buffered, O_DIRECT), and --repeat rounds of write_round. 1 on error. */
static int write_rounds(trainer *tr, const ckpt_opts *o, write_figs *w) {
    char err[1024];
    model_ckpt_file lf[2];
    memset(lf, 0, sizeof(lf));
    {
        const float *ps[1] = {tr->model.params}, *os[2] = {tr->opt.m, tr->opt.v};
        const char *pp[1] = {""}, *op[2] = {"optim.m.", "optim.v."};
        if (model_ckpt_file_build(&lf[0], &tr->model, "model", 1, ps, pp, 1, err, sizeof(err)) ||
            model_ckpt_file_build(&lf[1], &tr->model, "optim", 1, os, op, 2, err, sizeof(err))) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
    }
    set_ckpt(tr, 0, 0);
    setenv("MINITRAIN_CKPT_DIRECT", "0", 1);
    checkpointer *ck = checkpoint_create(tr);
    setenv("MINITRAIN_CKPT_DIRECT", "1", 1);
    checkpointer *ckd = checkpoint_create(tr);
    unsetenv("MINITRAIN_CKPT_DIRECT"); /* the default (O_DIRECT) from here on */
    for (int i = 0; i < o->repeat; i++)
        if (write_round(tr, o, lf, ck, ckd, w, i) != 0) return 1;
    checkpoint_free(ck);
    checkpoint_free(ckd);
    for (int i = 0; i < 2; i++) model_ckpt_file_free(&lf[i]);
    return 0;
}

/* Step 4 (figures 2b + 3): asynchronous saves, the snapshot deferred to the writer (default),
 * then copied inline; each with --train-steps steps overlapping it. 1 on a failed save. */
static int async_saves(trainer *tr, const ckpt_opts *o, async_figs *a) {
    const int train_steps = o->train_steps;
    for (int s = 0; o->do_async && s < train_steps; s++) a->without += train_step(tr);
    for (int mode = 0; o->do_async && mode < 2; mode++) {
        if (mode == 1) setenv("MINITRAIN_CKPT_SNAPSHOT_INLINE", "1", 1);
        set_ckpt(tr, 1, 0);
        checkpointer *ck = checkpoint_create(tr);
        for (int i = 0; i < o->repeat; i++) {
            checkpoint_stats s;
            checkpoint_hook(tr, tr->step, 0, ck); /* as trainer_run saves: may defer the copy */
            double ov = 0, base = 0;
            for (int k = 0; k < train_steps; k++) {
                double st = train_step(tr);
                ov += st;
                if (mode == 0) a->during += st, a->n_during++;
            }
            double tw = timer_now();
            checkpoint_wait(ck, tr);
            tw = timer_now() - tw; /* the part of the write no step overlapped: a stall too */
            for (int k = 0; mode == 0 && k < train_steps; k++) base += train_step(tr);
            checkpoint_get_stats(ck, &s);
            if (s.failures) {
                fprintf(stderr, "asynchronous save failed\n");
                return 1;
            }
            a->stall[mode][i] = s.last_snapshot_ms;
            a->wait[mode][i] = s.last_snapshot_wait_ms;
            a->write[mode][i] = s.last_write_ms;
            /* total cost: stall + what the overlapped steps took beyond the same number of steps
             * right after (no save in flight) + waiting for the rest of the write */
            if (mode == 0) {
                a->total_cost[i] = s.last_snapshot_ms + 1e3 * (ov - base) + 1e3 * tw;
                printf("  async save %d total cost: stall %.1f + overlapped steps %.0f - baseline "
                       "%.0f + wait for the rest %.0f = %.0f ms\n", i + 1, s.last_snapshot_ms,
                       1e3 * ov, 1e3 * base, 1e3 * tw, a->total_cost[i]);
            }
            printf("  async save %d (%s snapshot, load %.2f): stall %.1f ms (of which waiting for "
                   "the copy %.1f), background write+commit %.0f ms\n", i + 1,
                   mode ? "inline" : "deferred", loadavg1(), s.last_snapshot_ms,
                   s.last_snapshot_wait_ms, s.last_write_ms);
        }
        checkpoint_free(ck);
    }
    unsetenv("MINITRAIN_CKPT_SNAPSHOT_INLINE");
    return 0;
}

/* Step 5 (figure 4): restart to first step, tier 0 vs tier 1 (one save into both, then two
 * resumes, tier 1's page cache dropped first). 1 on a failed resume. */
static int restarts(trainer *tr, const ckpt_opts *o, restart_figs *r) {
    char err[1024];
    for (int tier = 0; o->do_restart && tier < 2; tier++) {
        if (tier == 0) {
            set_ckpt(tr, 0, 1);
            tr->step++;
            checkpointer *ck = checkpoint_create(tr);
            checkpoint_save(ck, tr);
            checkpoint_free(ck);
        }
        set_ckpt(tr, 0, tier == 0);
        tr->cfg.ckpt_every = 0; /* a restarted process before its first save: no snapshot buffer */
        snprintf(tr->cfg.resume, sizeof(tr->cfg.resume), "auto");
        memset(tr->model.params, 0, tr->model.num_params * 4);
        tr->step = 0;
        char root1[4200];
        snprintf(root1, sizeof(root1), "%s/ckpt", o->dir);
        evict(root1);
        checkpointer *ck = checkpoint_create(tr);
        double t0 = timer_now();
        int rc = checkpoint_resume(ck, tr, err, sizeof(err));
        double t1 = timer_now();
        train_step(tr);
        double t2 = timer_now();
        checkpoint_free(ck);
        if (rc != 1) {
            fprintf(stderr, "resume from tier %d failed: %s\n", tier, err);
            return 1;
        }
        r->resume_ms[tier] = (t1 - t0) * 1e3;
        r->first_ms[tier] = (t2 - t1) * 1e3;
        r->restart[tier] = (t2 - t0) * 1e3;
    }
    return 0;
}

/* Step 6: the table of the write figures (1 + 2a), medians over n rounds. */
static void print_write_figs(const write_figs *w, int n, double load0) {
    printf("\n%-56s %12s   (medians of %d rounds; load average %.2f at start, %.2f at end)\n",
           "checkpoint (GPT-2 124M, fp32 params + AdamW m, v)", "value", n, load0, loadavg1());
    printf("%-56s %9.2f GB\n", "bytes per checkpoint (tier 1, all files)", w->bytes / 1e9);
    double lo = w->dd_mbs[0], hi = w->dd_mbs[0];
    for (int i = 1; i < n; i++)
        lo = w->dd_mbs[i] < lo ? w->dd_mbs[i] : lo, hi = w->dd_mbs[i] > hi ? w->dd_mbs[i] : hi;
    printf("%-56s %9.0f MB/s (%d MiB; rounds %.0f..%.0f: the machine's noise)%s\n",
           "dd bs=1M conv=fsync, same directory", median(w->dd_mbs, n), w->mb, lo, hi,
           w->dd_failed ? "  [dd failed]" : "");
    printf("%-56s %9.0f MB/s = %.0f%% of dd (with the CRC pass: %.0f MB/s)\n",
           "previous path: header+write+fsync", median(w->leg_mbs, n),
           100 * median(w->leg_ratio, n), median(w->leg_total_mbs, n));
    printf("%-56s header %.0f | write %.0f | fsync %.0f | CRC pass (read back) %.0f ms\n",
           "  where its time goes", median(w->ph_leg[0], n), median(w->ph_leg[1], n),
           median(w->ph_leg[2], n), median(w->ph_leg[3], n));
    printf("%-56s %9.0f MB/s = %.0f%% of dd (sync stall %.0f ms)\n",
           "save write throughput, buffered (serialise+write+fsync)", median(w->new_mbs, n),
           100 * median(w->new_ratio, n), median(w->buf_stall, n));
    printf("%-56s header %.0f | write %.0f | CRC (while writing) %.0f | writeback+fsync %.0f ms "
           "(thread times, 2 files in parallel)\n", "  where its time goes",
           median(w->ph_new[0], n), median(w->ph_new[1], n), median(w->ph_new[3], n),
           median(w->ph_new[2], n));
    printf("%-56s %9.0f MB/s = %.0f%% of dd   (target >= 80%%)\n",
           "save write throughput, O_DIRECT (the default)", median(w->dir_mbs, n),
           100 * median(w->dir_ratio, n));
    printf("%-56s header %.0f | copy+write %.0f | CRC (while writing) %.0f | fsync %.0f ms "
           "(thread times, 2 files in parallel)\n", "  where its time goes",
           median(w->ph_dir[0], n), median(w->ph_dir[1], n), median(w->ph_dir[3], n),
           median(w->ph_dir[2], n));
    printf("%-56s %9.0f ms (whole save incl. commit: %.0f MB/s)\n",
           "  commit (manifest from known CRCs, rename, retention)", median(w->new_commit, n),
           median(w->new_total_mbs, n));
}

/* Step 7: the stall and cost rows: synchronous, and (do_async) the asynchronous saves. */
static void print_async_figs(const write_figs *w, const async_figs *a, int n, int do_async,
                             int train_steps) {
    double sync_med = median(w->sync_stall, n), as_med = median(a->stall[0], n);
    printf("%-56s %9.0f ms\n", "stall, synchronous save (write+fsync+commit)", sync_med);
    if (!do_async) return;
    printf("%-56s %9.1f ms (waiting for the copy %.1f ms)\n",
           "stall, async save, snapshot copied by the writer", as_med, median(a->wait[0], n));
    printf("%-56s %9.1f %%   (target <= 3%%)\n", "async stall / sync stall", 100 * as_med / sync_med);
    printf("%-56s %9.1f ms = %.1f %% of sync\n", "stall, async save, snapshot copied inline",
           median(a->stall[1], n), 100 * median(a->stall[1], n) / sync_med);
    printf("%-56s %9.0f ms\n", "async background write + commit", median(a->write[0], n));
    printf("%-56s %9.0f ms\n", "train step (B=4 T=64) without a save in flight",
           1e3 * a->without / train_steps);
    printf("%-56s %9.0f ms\n", "train step while an async save is written",
           a->n_during ? 1e3 * a->during / a->n_during : 0);
    printf("%-56s %9.0f ms = %.1f %% of sync   (target <= 10%%; writer at nice 19, idle I/O)\n",
           "total cost of an async save (median)", median(a->total_cost, n),
           100 * median(a->total_cost, n) / sync_med);
}

int main(int argc, char **argv) {
    ckpt_opts o;
    int prc = parse_ckpt_opts(&o, argc, argv);
    if (prc != 0) return prc;
    ops_set_threads(o.threads);
    setenv("MINITRAIN_SHM_DIR", o.shm, 1);
    unsetenv("MINITRAIN_CKPT_SNAPSHOT_INLINE");
    unsetenv("MINITRAIN_CKPT_DIRECT");
    char err[1024];
    fs_remove_tree(o.dir, err, sizeof(err));
    if (fs_mkdir_p(o.dir, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double load0 = loadavg1();
    comm *world = comm_init_world(NULL, NULL);
    mesh ms;
    mesh_init(&ms, world, 1, 1, 1, 1, 1);
    static trainer tr; /* static: large, and off the stack */
    if (setup_trainer(&tr, &ms, &o) != 0) return 1;
    double gb = 3.0 * tr.model.num_params * 4 / 1e9;
    printf("GPT-2 124M shape: %.1fM parameters, checkpoint = params + AdamW m, v = %.2f GB | "
           "%d threads | tier 1 %s, tier 0 %s | %d rounds | load average %.2f | %s\n",
           tr.model.num_params / 1e6, gb, o.threads, o.dir, o.shm, o.repeat, load0,
           ckpt_crc32c_hw_available() ? "crc32c: SSE4.2" : "crc32c: software");

    static write_figs w;
    static async_figs a;
    static restart_figs r;
    if (write_rounds(&tr, &o, &w) != 0 || async_saves(&tr, &o, &a) != 0 ||
        restarts(&tr, &o, &r) != 0)
        return 1;

    print_write_figs(&w, o.repeat, load0);
    print_async_figs(&w, &a, o.repeat, o.do_async, o.train_steps);
    if (o.do_restart) {
        printf("%-56s %9.0f ms (resume %.0f + first step %.0f)\n", "restart to first step, tier 0 (tmpfs)",
               r.restart[0], r.resume_ms[0], r.first_ms[0]);
        printf("%-56s %9.0f ms (resume %.0f + first step %.0f)\n", "restart to first step, tier 1 (disk, cold cache)",
               r.restart[1], r.resume_ms[1], r.first_ms[1]);
    }
    fs_remove_tree(o.dir, err, sizeof(err));
    fs_remove_tree(o.shm, err, sizeof(err));
    free(g_inp);
    free(g_tgt);
    gpt_free(&tr.model);
    optim_free(&tr.opt);
    mesh_free(&ms);
    comm_free(world);
    comm_finalize();
    return 0;
}
