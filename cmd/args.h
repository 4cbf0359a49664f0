/*
 * cmd/args.h — the one option parser of every subcommand: a table of options, parsed and printed.
 *
 * Each subcommand describes its options once, as a table of {name, type, pointer, range, metavar,
 * help, default} (core/keytab.h's one table format); args_parse() reads `--name value` and `--name=value` (and -h / --help) against
 * it, and args_help() prints --help from the same table, so the help cannot drift from what is
 * parsed. The pointers hold the defaults before parsing (set them first); a given option
 * overwrites them.
 *
 * Errors are one line on stderr naming the option — "minitrain: error: --slots must be in
 * [1, 256], got '0'" — and args_parse returns MT_EXIT_USAGE rather than exiting, so the unit tests
 * can call a subcommand with bad flags and check its exit code.
 */
#ifndef MT_CMD_ARGS_H
#define MT_CMD_ARGS_H

#include <stddef.h>
#include <stdio.h>

#include "core/keytab.h"

/* An option is a row of core/keytab.h's table: {name, type, &variable, lo, hi, metavar, help,
 * def}. name is the long name without the dashes ("max-tokens"); the variable's C type follows
 * the row's type (KEYTAB_INT: int, KEYTAB_STRING: const char *, ...); def is the default shown in
 * --help (NULL: printed from the variable; "": none shown). A table ends with a NULL name. */
typedef keytab_key args_opt;

/* The command line of one subcommand. */
typedef struct {
    const char *cmd;      /* names the command in messages: "sample", "ckpt ls" */
    const char *synopsis; /* "usage: minitrain sample --run DIR [options]" (may hold '\n') */
    const char *about;    /* paragraph printed after the synopsis, or NULL */
    const args_opt *opts; /* terminated by an entry with name NULL */
    const char *epilog;   /* printed after the options (examples), or NULL */
    /* `--` ends the options and the words after it are the caller's (*rest = their index);
     * without this a `--` is an unexpected argument. */
    int dashdash;
    /* Options outside the table (train's config keys): known(name) says whether one exists (it
     * then takes a value); other(ctx, name, value) receives it in command-line order. */
    int (*known)(const char *name);
    void (*other)(void *ctx, const char *name, const char *value);
    void *ctx;
    void (*help_tail)(FILE *out); /* more help after the table (train: every config key) */
    const char *hint;             /* added to the unknown-option message, or NULL */
} args_spec;

/* args_parse returns this when the command should go on. */
#define ARGS_CONTINUE (-1)

/* Parse argv[1..argc-1] (argv[0] is the subcommand's name) into the table's pointers.
 * Returns ARGS_CONTINUE; or MT_EXIT_OK after printing --help to stdout (-h or --help anywhere
 * before `--`: nothing is assigned then); or MT_EXIT_USAGE after one error line on stderr
 * (unknown option, missing value, bad or out-of-range number, unexpected positional argument,
 * a value given to a flag). rest may be NULL unless spec->dashdash: it receives the index of the
 * first word after `--` (argc when there is none). */
int args_parse(const args_spec *spec, int argc, char **argv, int *rest);

/* Parse text as the value of option --name with the table's rules for type KEYTAB_DOUBLE (whole
 * text, finite or inf, in [lo, hi]) — for values the table cannot type, such as the parts of
 * --backoff MIN:MAX. Returns ARGS_CONTINUE with *out set, or MT_EXIT_USAGE after one error line. */
int args_double(const char *name, const char *text, double lo, double hi, double *out);

/* Print the help of spec to out: synopsis, about, one line per option (with its default), the
 * help tail and the epilog. */
void args_help(const args_spec *spec, FILE *out);

/* Options outside the table kept in command-line order, for a caller that applies them after its
 * config file (train's config keys, gateway's policy and [gateway] keys): set spec.other =
 * args_override_add and spec.ctx = an args_overrides zeroed by the caller. Each key is a copy (the
 * parser's buffer for --key=value is reused), each value points into argv. Past
 * ARGS_MAX_OVERRIDES the rest are dropped and overflow is set: the caller refuses the command
 * line. args_overrides_free frees the keys. */
#define ARGS_MAX_OVERRIDES 512
typedef struct {
    char *key[ARGS_MAX_OVERRIDES];
    const char *val[ARGS_MAX_OVERRIDES];
    int n, overflow;
} args_overrides;
void args_override_add(void *ctx, const char *key, const char *val);
void args_overrides_free(args_overrides *o);

#endif /* MT_CMD_ARGS_H */
