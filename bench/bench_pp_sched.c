/*
 * bench/bench_pp_sched.c — the pipeline schedule drivers' bubble, measured against each
 * schedule's formula, with passes of known cost.
 *
 * The drivers of parallel/pp.h run for real (pp_run: the same order, the same point-to-point
 * messages over MPI as in training) on P ranks, but each pass is a sleep of a fixed duration
 * instead of a stage's compute. That isolates what the schedule decides — when each stage must
 * wait — from what the machine adds (on a shared 2-core machine, P ranks of real compute also
 * time-share the cores, which no bubble formula describes; a sleeping pass needs no core). The
 * idle fraction of stage s is 1 − busy_s / span, span from the first pass of any stage to the
 * last, busy_s the stage's measured pass time (so sleep overshoot is counted as work, and the
 * formula is evaluated with the measured mean pass times). Peak activations in flight come from
 * pp_run's own count (pp_stats) and are compared with pp_slots_needed.
 *
 *   mpirun -np 4 build/bench/bench_pp_sched --schedule zb-h1 --microbatches 8 \
 *       [--chunks 2] [--f-ms 100 --b-ms 100 --w-ms 100] [--steps 4] [--floats 4096]
 *
 * Pass costs per microbatch and stage: forward f, backward b + w; with zb-h1 the backward is B
 * (b) then W (w); with v chunks each chunk's passes cost 1/v of that. Rank 0 prints one line per
 * stage (median over steps after the first) and exits 1 if a stage misses its formula by more
 * than --tolerance points (default 3) or its peak differs from the bound.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/timer.h"
#include "parallel/comm.h"
#include "parallel/pp.h"

typedef struct {
    double f_s, b_s, w_s; /* per pass, already divided by the chunks */
    int split;
    float *in, *out;      /* (pairs, count) receive buffers; one output buffer */
    size_t count;
    int M;
} sched_bench;

static void pass_sleep(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static float *bench_input(void *u, int micro, int chunk) {
    sched_bench *b = u;
    return b->in + ((size_t)chunk * b->M + micro) * b->count;
}
static const float *bench_forward(void *u, int micro, int chunk) {
    sched_bench *b = u;
    (void)micro, (void)chunk;
    pass_sleep(b->f_s);
    return b->out;
}
static const float *bench_backward(void *u, int micro, int chunk, const float *dout) {
    sched_bench *b = u;
    (void)micro, (void)chunk, (void)dout;
    pass_sleep(b->split ? b->b_s : b->b_s + b->w_s);
    return b->out;
}
static void bench_weight(void *u, int micro, int chunk) {
    sched_bench *b = u;
    (void)micro, (void)chunk;
    pass_sleep(b->w_s);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    comm *world = comm_init_world(&argc, &argv);
    const char *sname = "1f1b";
    int M = 8, v = 1, steps = 4;
    double f_ms = 100, b_ms = 100, w_ms = 100, tol = 3;
    size_t count = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--schedule")) sname = argv[i + 1];
        else if (!strcmp(argv[i], "--microbatches")) M = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunks")) v = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--f-ms")) f_ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--b-ms")) b_ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--w-ms")) w_ms = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--floats")) count = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--tolerance")) tol = atof(argv[i + 1]);
        else comm_abort(2, "unknown option '%s'", argv[i]);
    }
    pp_schedule sch;
    if (pp_schedule_parse(sname, &sch) != 0) comm_abort(2, "unknown schedule '%s'", sname);
    int P = comm_size(world), s = comm_rank(world);
    if (sch != PP_INTERLEAVED) v = 1;
    char err[256];
    if (P < 2 || steps < 2 || pp_schedule_check(sch, P * v, P, v, M, "", err, sizeof(err)) != 0)
        comm_abort(2, "%s", P < 2 ? "run under mpirun with 2 or more ranks" :
                           steps < 2 ? "--steps must be at least 2" : err);
    sched_bench b = {f_ms / 1e3 / v, b_ms / 1e3 / v, w_ms / 1e3 / v, sch == PP_ZBH1, NULL, NULL,
                     count, M};
    b.in = callocCheck((size_t)v * M * count, sizeof(float));
    b.out = callocCheck(count, sizeof(float));
    pp_span *tr = callocCheck((size_t)v * M, sizeof(pp_span));
    pp_stage_fns fns = {&b, count, v, bench_input, bench_forward, bench_backward,
                        b.split ? bench_weight : NULL, NULL, tr};
    double *idle = callocCheck((size_t)steps, sizeof(double));
    double pass[3] = {0, 0, 0}; /* summed F, B, W seconds over the measured steps, this stage */
    int peak = 0;
    for (int k = 0; k < steps; k++) {
        comm_barrier(world);
        pp_stats st;
        pp_run(world, sch, M, &fns, &st);
        double lo = INFINITY, hi = 0, busy = 0, p3[3] = {0, 0, 0};
        for (int i = 0; i < v * M; i++) {
            lo = fmin(lo, tr[i].f0);
            hi = fmax(hi, fmax(tr[i].b1, tr[i].w1));
            p3[0] += tr[i].f1 - tr[i].f0, p3[1] += tr[i].b1 - tr[i].b0;
            p3[2] += b.split ? tr[i].w1 - tr[i].w0 : 0;
        }
        busy = p3[0] + p3[1] + p3[2];
        double span[2] = {-lo, hi};
        comm_all_reduce_f64(world, span, 2, COMM_MAX);
        idle[k] = 1 - busy / (span[1] + span[0]);
        if (k > 0)
            for (int j = 0; j < 3; j++) pass[j] += p3[j];
        peak = st.peak_in_flight > peak ? st.peak_in_flight : peak;
    }
    qsort(idle + 1, (size_t)steps - 1, sizeof(double), cmp_d);
    double med = idle[1 + (steps - 1) / 2 - ((steps - 1) % 2 == 0)];
    /* the formula from the measured mean pass times of the whole pipeline (equal stages assumed) */
    double tot[3] = {pass[0], pass[1], pass[2]};
    comm_all_reduce_f64(world, tot, 3, COMM_SUM);
    double want = pp_idle_formula(sch, P, M, v, tot[0], tot[1], tot[2]);
    double row[4] = {med, want, (double)peak, (double)pp_slots_needed(sch, P, s, M, v)};
    double *all = callocCheck((size_t)4 * P, sizeof(double));
    memcpy(all + 4 * s, row, sizeof(row));
    comm_all_reduce_f64(world, all, (size_t)4 * P, COMM_SUM);
    int bad = 0;
    if (s == 0) {
        printf("%-12s P %d M %d v %d | passes F %.1f B %.1f W %.1f ms per microbatch and stage\n",
               pp_schedule_name(sch), P, M, v, tot[0] / P / M / (steps - 1) * 1e3,
               tot[1] / P / M / (steps - 1) * 1e3, tot[2] / P / M / (steps - 1) * 1e3);
        printf("  %5s %10s %10s %8s %8s %8s\n", "stage", "idle", "formula", "diff", "peak", "bound");
        for (int r = 0; r < P; r++) {
            const double *x = all + 4 * r;
            double d = 100 * (x[0] - x[1]);
            int miss = fabs(d) > tol || x[2] != x[3];
            bad |= miss;
            printf("  %5d %9.1f%% %9.1f%% %+7.1fpt %8.0f %8.0f%s\n", r, 100 * x[0], 100 * x[1], d,
                   x[2], x[3], miss ? "  MISS" : "");
        }
    }
    free(all);
    free(idle);
    free(tr);
    free(b.in);
    free(b.out);
    comm_free(world);
    comm_finalize();
    return bad ? 1 : 0;
}
