/*
 * minitrain.c — main(): the subcommand table and nothing else.
 *
 * Each subcommand is one file under cmd/ (cmd/train.c, ...; declared in cmd/cmd.h); this file only
 * dispatches. peak_blas_reexec runs first because OpenBLAS picks its kernels when it loads.
 */
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "core/check.h"
#include "ops/peak.h"

#define MINITRAIN_VERSION "0.1.0"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} subcommand;

static const subcommand COMMANDS[] = {
    {"prepare", cmd_prepare, "tokenize a text file into train/val token shards"},
    {"train", cmd_train, "train a model from a config (INI) with --key value overrides"},
    {"sample", cmd_sample, "generate text from a trained run (KV cache)"},
    {"report", cmd_report, "summarise a run from its run.db: ETTR, MTTR (--json, --svg)"},
    {"run", cmd_run, "supervise a job: restart on crash/hang/NaN, heartbeats, faults"},
    {"plan", cmd_plan, "place ranks on a topology: rankfile + predicted comm time per step"},
    {"diagnose", cmd_diagnose, "where every rank of a running job is stuck: stacks, grouped"},
    {"simulate", cmd_simulate, "Monte Carlo ETTR at cluster scale (Young/Daly interval)"},
    {"dashboard", cmd_dashboard, "live read-only web dashboard of every run (runs, run, compare)"},
    {"serve", cmd_serve, "serve a trained run over HTTP (OpenAI completions API)"},
    {"gateway", cmd_gateway, "AI gateway in front of servers: fallback, ejection, keys, limits"},
    {"robust", cmd_robust, "adversarial robustness of a run: FGSM/PGD/HotFlip (--json)"},
    {"scrub", cmd_scrub, "remove PII and secrets from text (mask, keyed hash, drop-line)"},
    {"ckpt", cmd_ckpt, "list, verify and export checkpoints (ls|verify|export)"},
    {"db", cmd_db, "the team's PostgreSQL database: init, ship run.db's rows, list runs"},
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

int main(int argc, char **argv) {
    peak_blas_reexec(argv);
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
