/*
 * minitrain.c — main(): the subcommand table and nothing else.
 *
 * Each subcommand lives with its module (train/cmd_train.c, ...); this file only dispatches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "parallel/comm_nccl.h"
#include "train/flops.h"

int data_cmd_prepare(int argc, char **argv);
int train_cmd_train(int argc, char **argv);
int train_cmd_sample(int argc, char **argv);
int report_cmd_report(int argc, char **argv);
int flops_cmd_bench_gemm(int argc, char **argv);
static int cmd_bench(int argc, char **argv);

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} subcommand;

static const subcommand COMMANDS[] = {
    {"prepare", data_cmd_prepare, "tokenize a text file into train/val token shards"},
    {"train", train_cmd_train, "train a model from a config (INI) with --key value overrides"},
    {"sample", train_cmd_sample, "generate text from a trained run (KV cache)"},
    {"report", report_cmd_report, "summarise a run from its run.db (--json for machines)"},
    {"bench", cmd_bench, "micro-benchmarks: `bench gemm` measures the sgemm peak"},
};
#define NCOMMANDS (int)(sizeof(COMMANDS) / sizeof(COMMANDS[0]))

static void usage(FILE *out) {
    fprintf(out, "usage: minitrain <command> [options]   (minitrain <command> --help for more)\n\n"
                 "commands:\n");
    for (int i = 0; i < NCOMMANDS; i++) fprintf(out, "  %-9s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(out, "\nquick start:\n"
                 "  minitrain prepare --input examples/data/tinyshakespeare.txt --out examples/data/shakespeare_byte\n"
                 "  minitrain train --config examples/shakespeare.ini\n"
                 "  minitrain sample --run runs/shakespeare --prompt \"ROMEO:\"\n");
}

static int cmd_bench(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("usage: minitrain bench gemm [--threads N] [--seconds S] [--size N]\n"
               "       mpirun -np N minitrain bench nccl      (GPU build)\n"
               "  gemm   measure the sgemm peak (GFLOP/s) that MFU is reported against\n"
               "  nccl   all-reduce bus bandwidth over the job's GPUs\n");
        return argc < 2 ? MT_EXIT_USAGE : MT_EXIT_OK;
    }
    if (!strcmp(argv[1], "gemm")) return flops_cmd_bench_gemm(argc - 1, argv + 1);
    if (!strcmp(argv[1], "nccl")) return comm_nccl_cmd_bench(argc - 1, argv + 1);
    mt_fail("unknown benchmark '%s' (available: gemm, nccl)", argv[1]);
}

/* Debian's OpenBLAS 0.3.21 does not recognise some newer CPUs (e.g. Sapphire Rapids) and falls
 * back to SSE3 kernels, ~6x below peak. It picks kernels when the library loads, before main(),
 * so the only fix from inside is to set OPENBLAS_CORETYPE and re-execute ourselves once. */
static void ensure_blas_kernels(char **argv) {
    char msg[512];
    if (getenv("OPENBLAS_CORETYPE") || !flops_blas_kernel_check(msg, sizeof(msg))) return;
    setenv("OPENBLAS_CORETYPE", __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell", 1);
    execv("/proc/self/exe", argv);
    mt_warn("%s", msg); /* exec failed: carry on with slow kernels, loudly */
}

int main(int argc, char **argv) {
    ensure_blas_kernels(argv);
    if (argc < 2) {
        usage(stderr);
        return MT_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return MT_EXIT_OK;
    }
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "minitrain: error: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return MT_EXIT_USAGE;
}
