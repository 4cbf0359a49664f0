/*
 * cmd/cmd.h — the subcommands of `minitrain`, one file each under cmd/.
 *
 * cmd/ is the top floor (docs/design.md: core ← parallel, ckpt, text ← ops ← model ← train ←
 * safety, sched ← cmd ← minitrain.c): the only one that may include every module. A subcommand parses its options
 * with the table parser (cmd/args.h), wires the modules together (e.g. cmd/train.c registers the
 * trainer's hooks, sched's among them) and calls their public functions; the work itself lives in
 * the modules.
 *
 * Every function takes the subcommand's own argv (argv[0] is its name, e.g. "train") and returns
 * the process exit code: MT_EXIT_OK (0); MT_EXIT_USAGE (2) after one "minitrain: error: ..." line
 * for bad input; other codes as documented by each command's --help. Some user errors deep in a
 * command exit(2) directly through mt_fail (core/check.h).
 */
#ifndef MT_CMD_H
#define MT_CMD_H

/* `minitrain prepare --input FILE --out DIR [--tokenizer byte|bpe|FILE] [--vocab-size N]
 * [--val-fraction F] [--doc-separator TEXT]`: tokenize FILE into DIR/tokenizer.bin,
 * DIR/train_000.bin (the first 1-F of the tokens) and DIR/val_000.bin (the last F); a tokenizer
 * FILE is any format tok_load reads (text/tokenizer.h, docs/interop.md). */
int cmd_prepare(int argc, char **argv);

/* `minitrain train [--config FILE] [--KEY VALUE ...]`: train from an INI config with any config
 * key overridden on the command line (dashes = underscores). Registers the eval, sample,
 * checkpoint and resilience (sched/hooks.h) hooks. Exit 3 on a non-finite loss. */
int cmd_train(int argc, char **argv);

/* `minitrain sample --run DIR [--prompt TEXT] [--max-tokens N] ...`: generate text (KV cache). */
int cmd_sample(int argc, char **argv);

/* `minitrain report --run DIR [--json] [--svg FILE]`: the summary of a job from its run.db,
 * with its ETTR accounting. */
int cmd_report(int argc, char **argv);

/* The sections `report --html` adds to a run's page beyond report/'s own (safety's
 * robustness), for the run database db; the dashboard's run page adds the same. Fills
 * out[0..max), returns how many. */
#include <sqlite3.h>
#include "report/report.h"
int cmd_report_sections(sqlite3 *db, report_section *out, int max);

/* `minitrain dashboard [--runs DIR ...] [--port P] [--bind ADDR] [--token T]`: the live,
 * read-only web dashboard over the run databases under DIR (dash/dash.h) until SIGINT or SIGTERM.
 * 2 for bad flags (a non-loopback --bind without --token; --db, which waits for issue 25). */
int cmd_dashboard(int argc, char **argv);

/* `minitrain run [options] -- LAUNCH...`: the supervisor's restart loop (sched/supervisor.h).
 * 0 when the job finished cleanly, 1 when it gave up, 2 for bad flags, 128+signal when stopped. */
int cmd_run(int argc, char **argv);

/* `minitrain diagnose --run DIR [--json]`: every local rank's stack, grouped, the outliers named
 * (sched/stacks.h). */
int cmd_diagnose(int argc, char **argv);

/* `minitrain simulate ...`: the Monte Carlo ETTR simulator (sched/simulate.h). */
int cmd_simulate(int argc, char **argv);

/* `minitrain plan (--topology F | --nodes N --gpus-per-node G | --from-hwloc | --from-slurm)
 * --tp T --pp P --dp D [--ep E] [--exclude HOSTS] [--spares N] [--out FILE]`: topology-aware
 * placement (sched/plan.h): the table of predicted communication time per step (planned vs
 * Megatron's order vs naive) and the Open MPI rankfile. 2 for bad input. */
int cmd_plan(int argc, char **argv);

/* `minitrain serve --run DIR|FILE [options]`: the OpenAI-compatible HTTP server
 * (serve/server.h), until SIGINT or SIGTERM. */
int cmd_serve(int argc, char **argv);

/* `minitrain gateway --config FILE | --port P --upstream NAME=URL ... --route MODEL=A,B ...`: the
 * AI gateway (gateway/gw_proxy.h) until SIGINT or SIGTERM; `minitrain gateway keys ...` runs
 * cmd_gateway_keys. 2 for a bad flag or configuration. */
int cmd_gateway(int argc, char **argv);

/* `minitrain gateway keys add|ls|revoke|disable|enable|audit --keys-db FILE [options]`: the key
 * manager of the gateway (gateway/gw_keys.h). argv[0] is "keys" (called by `minitrain gateway`
 * with its argv from "keys" on). `add` prints the new key alone on its last stdout line. */
int cmd_gateway_keys(int argc, char **argv);

/* `minitrain ckpt ls|verify|export --run DIR [--step N] [--out FILE] [--format hf|llmc]` and
 * `minitrain ckpt import --from llmc|hf SRC --out RUN_DIR [--tokenizer FILE]`: list, check, export
 * and import the checkpoints of a run (import: model/interop.h). 2 for bad input or a checkpoint
 * that fails verification. */
int cmd_ckpt(int argc, char **argv);

/* `minitrain db init|ship|runs`: the team's PostgreSQL database (db/db.h, docs/database.md). */
int cmd_db(int argc, char **argv);

/* `minitrain scrub --input FILE --out FILE [--mode mask|hash|drop-line] [--types LIST]
 * [--report FILE.json] [--hash-key-file FILE]`: PII and secrets out of a text file, streaming, in
 * bounded memory (safety/pii.h). */
int cmd_scrub(int argc, char **argv);

/* `minitrain robust --run DIR [--attack fgsm|pgd|hotflip] [--norm l2|linf] [--eps LIST] ...`:
 * attack the run's model on its validation split (safety/robust.h) and print the robustness
 * table (--json: one object); any layout under mpirun (--tp/--pp/--dp). Rows go to run.db. */
int cmd_robust(int argc, char **argv);

/* `minitrain bench gemm|nccl [options]`: the sgemm peak (model/flops.h) or the NCCL all-reduce
 * bus bandwidth (parallel/comm_nccl.h, GPU build). */
int cmd_bench(int argc, char **argv);

#endif /* MT_CMD_H */
