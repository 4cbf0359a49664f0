/*
 * cmd/bench.c — `minitrain bench gemm|nccl`: micro-benchmarks of the machine's own limits.
 *
 *   gemm  the fp32 sgemm peak that MFU is reported against on CPUs (model/flops.h);
 *   nccl  the all-reduce bus bandwidth over the job's GPUs (parallel/comm_nccl.h; GPU build,
 *         one rank per GPU under mpirun).
 */
#include <stdio.h>
#include <string.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "parallel/comm.h"
#include "parallel/comm_nccl.h"
#include "ops/peak.h"

static int bench_gemm(int argc, char **argv) {
    int threads = 0, size = PEAK_PROBE_N;
    double seconds = 1.0;
    const args_opt opts[] = {
        {"threads", KEYTAB_INT, &threads, 1, 4096, "N", "OpenBLAS threads (default: all available)",
         ""},
        {"seconds", KEYTAB_DOUBLE, &seconds, 0.001, 600, "S", "probe duration after a warm-up call",
         NULL},
        {"size", KEYTAB_INT, &size, 64, 16384, "N", "square matrix size, 64..16384", NULL},
        {0},
    };
    const args_spec spec = {
        .cmd = "bench gemm",
        .synopsis = "usage: minitrain bench gemm [--threads N] [--seconds S] [--size N]",
        .about = "Measure this machine's fp32 sgemm peak (the MFU denominator on CPUs) and print\n"
                 "it beside the theoretical peak (cores x clock x FLOP/cycle); then the stable\n"
                 "peak (rounds over 4 sizes until two agree within 3%) and the read bandwidth,\n"
                 "written to the per-machine peak cache every training run reads (docs/mfu.md).",
        .opts = opts,
    };
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    return peak_bench_gemm(threads, seconds, size);
}

static int bench_nccl(int argc, char **argv) {
    const args_opt opts[] = {{0}};
    const args_spec spec = {
        .cmd = "bench nccl",
        .synopsis = "usage: mpirun -np N minitrain bench nccl      (GPU build: make GPU=1)",
        .about = "All-reduce bus bandwidth (nccl-tests' busbw) over every rank of the job, one GPU\n"
                 "each, for 2^16..2^26 floats.",
        .opts = opts,
    };
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
#ifndef MT_HAVE_CUDA
    mt_fail("bench nccl needs a GPU build (make GPU=1)");
#else
    comm *world = comm_init_world(NULL, NULL);
    char err[256];
    if (comm_nccl_bench_all_reduce(world, err, sizeof(err)) != 0) mt_fail("bench nccl: %s", err);
    comm_finalize();
    return MT_EXIT_OK;
#endif
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("usage: minitrain bench gemm [--threads N] [--seconds S] [--size N]\n"
               "       mpirun -np N minitrain bench nccl      (GPU build)\n"
               "  gemm   measure the sgemm peak (GFLOP/s) that MFU is reported against\n"
               "  nccl   all-reduce bus bandwidth over the job's GPUs\n");
        return argc < 2 ? MT_EXIT_USAGE : MT_EXIT_OK;
    }
    if (!strcmp(argv[1], "gemm")) return bench_gemm(argc - 1, argv + 1);
    if (!strcmp(argv[1], "nccl")) return bench_nccl(argc - 1, argv + 1);
    mt_fail("unknown benchmark '%s' (available: gemm, nccl)", argv[1]);
}
