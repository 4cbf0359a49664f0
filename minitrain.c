/*
 * minitrain.c — main(): the subcommand table and nothing else.
 *
 * Each subcommand lives with its module (train/cmd_train.c, ...); this file only dispatches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

#define MINITRAIN_VERSION "0.1.0"
#include "parallel/comm_nccl.h"
#include "train/flops.h"

int data_cmd_prepare(int argc, char **argv);
int train_cmd_train(int argc, char **argv);
int train_cmd_sample(int argc, char **argv);
int report_cmd_report(int argc, char **argv);
int sup_cmd_run(int argc, char **argv);
int sim_cmd_simulate(int argc, char **argv);
int flops_cmd_bench_gemm(int argc, char **argv);
int checkpoint_cmd_ckpt(int argc, char **argv);
int gw_cmd_serve(int argc, char **argv);
int robust_cmd(int argc, char **argv);
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
    {"report", report_cmd_report, "summarise a run from its run.db: ETTR, MTTR (--json, --svg)"},
    {"run", sup_cmd_run, "supervise a job: restart on crash/hang/NaN, heartbeats, faults"},
    {"simulate", sim_cmd_simulate, "Monte Carlo ETTR at cluster scale (Young/Daly interval)"},
    {"serve", gw_cmd_serve, "serve a trained run over HTTP (OpenAI completions API)"},
    {"robust", robust_cmd, "adversarial robustness of a run: FGSM/PGD/HotFlip (--json)"},
    {"ckpt", checkpoint_cmd_ckpt, "list, verify and export checkpoints (ls|verify|export)"},
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

int main(int argc, char **argv) {
    flops_blas_reexec(argv);
    if (argc < 2) {
        usage(stderr);
        return MT_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("minitrain %s (built %s)\n", MINITRAIN_VERSION, __DATE__);
        return MT_EXIT_OK;
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
