/*
 * bench/bench_ckpt.c — checkpoint costs for the GPT-2 124M shape (12 layers, d_model 768, 12 heads,
 * vocab 50257, context 1024; fp32 parameters + AdamW m and v = 1.5 GB per checkpoint).
 *
 * Measures, through the same code the trainer uses (train/checkpoint.h):
 *   1. training stall per checkpoint: synchronous save (write + fsync + commit on the training
 *      thread) vs asynchronous save (snapshot copy only; the rest in the background). Target:
 *      async stall <= 10% of the synchronous save;
 *   2. step time of training while an async save is being written (the background thread shares
 *      the CPU and memory bandwidth) vs without;
 *   3. write throughput of a save (serialise + write + fsync of the files) vs `dd if=/dev/zero
 *      bs=1M conv=fsync` of the same size to the same directory;
 *   4. restart to first step: verified resume (manifest + CRC-32C of every file + load) plus one
 *      training step, from tier 0 (tmpfs) vs tier 1 (the disk; page cache dropped first with
 *      posix_fadvise(DONTNEED) so the read really comes from the disk).
 *
 *   make bench && build/bench/bench_ckpt [--dir DIR] [--shm DIR] [--threads 2] [--repeat 2]
 *                                         [--layers 12] [--train-steps 2]
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
#include "core/timer.h"
#include "parallel/comm.h"
#include "parallel/mesh.h"
#include "train/checkpoint.h"
#include "train/model.h"
#include "train/ops.h"
#include "train/optim.h"
#include "train/trainer.h"

static int B = 4, T = 64;
static int *g_inp, *g_tgt;

static double train_step(trainer *tr) {
    double t0 = timer_now();
    gpt_model *m = &tr->model;
    gpt_zero_grad(m);
    gpt_forward(m, g_inp, g_tgt, B, T, 1.0f / (B * T));
    gpt_backward(m);
    double norm = optim_grad_norm(m->grads, m->num_params);
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

int main(int argc, char **argv) {
    const char *dir = "/tmp/minitrain_bench_ckpt", *shm = "/dev/shm/minitrain_bench";
    int threads = 2, repeat = 2, L = 12, train_steps = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--shm")) shm = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeat")) repeat = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--layers")) L = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--train-steps")) train_steps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_ckpt [--dir DIR] [--shm DIR] [--threads N] [--repeat N]"
                            " [--layers N] [--train-steps N]\n");
            return 2;
        }
    }
    if (repeat < 1) repeat = 1;
    ops_set_threads(threads);
    setenv("MINITRAIN_SHM_DIR", shm, 1);
    char err[1024];
    fs_remove_tree(dir, err, sizeof(err));
    if (fs_mkdir_p(dir, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    comm *world = comm_init_world(NULL, NULL);
    mesh ms;
    mesh_init(&ms, world, 1, 1, 1, 1);

    /* a trainer around the 124M model, built by hand as bench/bench_step.c does */
    trainer tr;
    memset(&tr, 0, sizeof(tr));
    config_defaults(&tr.cfg);
    snprintf(tr.cfg.run_dir, sizeof(tr.cfg.run_dir), "%s", dir);
    snprintf(tr.cfg.name, sizeof(tr.cfg.name), "bench");
    tr.cfg.n_layer = L, tr.cfg.n_head = 12, tr.cfg.d_model = 768, tr.cfg.seq_len = 1024;
    tr.cfg.vocab_size = 50257, tr.cfg.steps = 1000, tr.cfg.batch_size = B, tr.cfg.global_batch = B;
    tr.mesh = &ms;
    tr.grad_accum = 1;
    gpt_config gc = {.n_layer = L, .n_head = 12, .d_model = 768, .seq_len = 1024, .vocab_size = 50257};
    if (gpt_build(&tr.model, &gc, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    gpt_init_weights(&tr.model, 1);
    gpt_alloc_training(&tr.model, B, T);
    optim_init(&tr.opt, tr.model.num_params, 0.9f, 0.95f, 1e-8f, 0.1f);
    config_to_json(&tr.cfg, tr.config_json, sizeof(tr.config_json));
    g_inp = malloc(sizeof(int) * B * T);
    g_tgt = malloc(sizeof(int) * B * T);
    rng_state r;
    rng_seed(&r, 3);
    for (int i = 0; i < B * T; i++) g_inp[i] = (int)(rng_u64(&r) % 50257), g_tgt[i] = (int)(rng_u64(&r) % 50257);
    double step0 = 0;
    for (int i = 0; i < 2; i++) step0 = train_step(&tr); /* warm-up; m and v become non-zero */
    double gb = 3.0 * tr.model.num_params * 4 / 1e9;
    printf("GPT-2 124M shape: %.1fM parameters, checkpoint = params + AdamW m, v = %.2f GB | "
           "%d threads | tier 1 %s, tier 0 %s\n", tr.model.num_params / 1e6, gb, threads, dir, shm);

    /* 1. synchronous saves */
    set_ckpt(&tr, 0, 0);
    checkpointer *ck = checkpoint_create(&tr);
    double sync_best = 1e30, files_best = 1e30, commit_best = 1e30;
    int64_t bytes = 0;
    for (int i = 0; i < repeat; i++) {
        tr.step++;
        checkpoint_save(ck, &tr);
        checkpoint_stats s;
        checkpoint_get_stats(ck, &s);
        if (s.failures) {
            fprintf(stderr, "synchronous save failed\n");
            return 1;
        }
        if (s.last_snapshot_ms < sync_best) sync_best = s.last_snapshot_ms;
        if (s.last_files_ms < files_best) files_best = s.last_files_ms;
        if (s.last_write_ms - s.last_files_ms < commit_best) commit_best = s.last_write_ms - s.last_files_ms;
        bytes = s.last_bytes;
        printf("  sync save %d: stall %.0f ms (files %.0f ms, commit %.0f ms)\n", i + 1,
               s.last_snapshot_ms, s.last_files_ms, s.last_write_ms - s.last_files_ms);
    }
    checkpoint_free(ck);

    /* 2. asynchronous saves, with training steps while the writer runs */
    set_ckpt(&tr, 1, 0);
    ck = checkpoint_create(&tr);
    double async_best = 1e30, async_write = 0, during = 0, without = 0;
    int n_during = 0;
    for (int s = 0; s < train_steps; s++) without += train_step(&tr);
    for (int i = 0; i < repeat; i++) {
        checkpoint_save(ck, &tr);
        checkpoint_stats s;
        checkpoint_get_stats(ck, &s);
        if (s.last_snapshot_ms < async_best) async_best = s.last_snapshot_ms;
        for (int k = 0; k < train_steps; k++) {
            during += train_step(&tr);
            n_during++;
        }
        checkpoint_wait(ck, &tr);
        checkpoint_get_stats(ck, &s);
        if (s.failures) {
            fprintf(stderr, "asynchronous save failed\n");
            return 1;
        }
        async_write = s.last_write_ms;
        printf("  async save %d: stall %.1f ms, background write+commit %.0f ms\n", i + 1,
               s.last_snapshot_ms, s.last_write_ms);
    }
    checkpoint_free(ck);

    /* 3. dd to the same directory, same size */
    char cmd[4400], ddpath[4200];
    snprintf(ddpath, sizeof(ddpath), "%s/dd.bin", dir);
    int mb = (int)(bytes / 1048576) + 1;
    snprintf(cmd, sizeof(cmd), "dd if=/dev/zero of='%s' bs=1M count=%d conv=fsync 2>/dev/null", ddpath, mb);
    double t = timer_now();
    int ddrc = system(cmd);
    double dd_s = timer_now() - t;
    unlink(ddpath);

    /* 4. restart to first step: tier 0 vs tier 1 (one save into both, then two resumes) */
    set_ckpt(&tr, 0, 1);
    tr.step++;
    ck = checkpoint_create(&tr);
    checkpoint_save(ck, &tr);
    checkpoint_free(ck);
    double restart[2], resume_ms[2], first_ms[2];
    for (int tier = 0; tier < 2; tier++) {
        set_ckpt(&tr, 0, tier == 0);
        tr.cfg.ckpt_every = 0; /* a restarted process before its first save: no snapshot buffer */
        snprintf(tr.cfg.resume, sizeof(tr.cfg.resume), "auto");
        memset(tr.model.params, 0, tr.model.num_params * 4);
        tr.step = 0;
        char root1[4200];
        snprintf(root1, sizeof(root1), "%s/ckpt", dir);
        evict(root1);
        ck = checkpoint_create(&tr);
        double t0 = timer_now();
        int rc = checkpoint_resume(ck, &tr, err, sizeof(err));
        double t1 = timer_now();
        train_step(&tr);
        double t2 = timer_now();
        checkpoint_free(ck);
        if (rc != 1) {
            fprintf(stderr, "resume from tier %d failed: %s\n", tier, err);
            return 1;
        }
        resume_ms[tier] = (t1 - t0) * 1e3;
        first_ms[tier] = (t2 - t1) * 1e3;
        restart[tier] = (t2 - t0) * 1e3;
    }

    double mbytes = bytes / 1e6;
    printf("\n%-52s %12s\n", "checkpoint (GPT-2 124M, fp32 params + AdamW m, v)", "value");
    printf("%-52s %9.2f GB\n", "bytes per checkpoint (tier 1, all files)", bytes / 1e9);
    printf("%-52s %9.0f ms\n", "stall, synchronous save (write+fsync+commit)", sync_best);
    printf("%-52s %9.1f ms\n", "stall, asynchronous save (snapshot copy)", async_best);
    printf("%-52s %9.1f %%   (target <= 10%%)\n", "async stall / sync stall", 100 * async_best / sync_best);
    printf("%-52s %9.0f ms\n", "async background write + commit", async_write);
    printf("%-52s %9.0f ms\n", "train step (B=4 T=64) without a save in flight", 1e3 * without / train_steps);
    printf("%-52s %9.0f ms\n", "train step while an async save is written", n_during ? 1e3 * during / n_during : 0);
    printf("%-52s %9.0f MB/s (files %.0f ms, commit CRC pass %.0f ms)\n",
           "save write throughput (serialise+write+fsync)", mbytes / (files_best / 1e3), files_best, commit_best);
    printf("%-52s %9.0f MB/s (%d MiB in %.2f s)%s\n", "dd bs=1M conv=fsync, same directory",
           mb * 1.048576 / dd_s, mb, dd_s, ddrc == 0 ? "" : "  [dd failed]");
    printf("%-52s %9.0f ms (resume %.0f + first step %.0f)\n", "restart to first step, tier 0 (tmpfs)",
           restart[0], resume_ms[0], first_ms[0]);
    printf("%-52s %9.0f ms (resume %.0f + first step %.0f)\n", "restart to first step, tier 1 (disk, cold cache)",
           restart[1], resume_ms[1], first_ms[1]);
    (void)step0;
    fs_remove_tree(dir, err, sizeof(err));
    fs_remove_tree(shm, err, sizeof(err));
    free(g_inp);
    free(g_tgt);
    gpt_free(&tr.model);
    optim_free(&tr.opt);
    mesh_free(&ms);
    comm_free(world);
    comm_finalize();
    return 0;
}
