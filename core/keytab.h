/*
 * core/keytab.h — the one key-table engine: a table of typed keys, parsed, range-checked, given
 * defaults and printed as help from the same rows.
 *
 * Three front ends read it: the training configuration (core/config.c: INI keys and their
 * `--key value` overrides), the gateway's policy and [gateway] keys (gateway/gw_config.c) and
 * every subcommand's options (cmd/args.c). Each is a table plus a few lines, so a number is
 * parsed and a range refused the same way everywhere, and --help cannot drift from what is parsed.
 *
 * A row names its value either by address (`at` = &variable: the tables of cmd/args.h, whose
 * variables hold the defaults) or by offset into a struct (`at` = KEYTAB_OFF(type, field), read
 * against a base pointer: the config tables, whose defaults are the rows' `def` text).
 *
 * Messages come in two voices, for the two places a value comes from: a command-line option
 * ("--slots must be in [1, 256], got '0'") and a configuration key, from an INI file or its
 * override ("'steps' = 0 is out of range [1, 1073741824]").
 */
#ifndef MT_KEYTAB_H
#define MT_KEYTAB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum {
    KEYTAB_FLAG,   /* int: set to 1; takes no value */
    KEYTAB_INT,    /* int: a whole number in [lo, hi] */
    KEYTAB_I64,    /* long long: a whole number in [lo, hi] */
    KEYTAB_U64,    /* unsigned long long: a decimal integer >= 0, <= hi (seeds) */
    KEYTAB_FLOAT,  /* float: a number in [lo, hi]; "inf" passes when hi is INFINITY; never NaN */
    KEYTAB_DOUBLE, /* double: the same, in double precision */
    KEYTAB_BYTES,  /* size_t: a byte count with an optional K, M or G suffix (KiB, MiB, GiB) */
    KEYTAB_STRING, /* const char *: the text itself (not copied: it points into argv) */
    KEYTAB_CHARS,  /* char[size]: the text copied, refused when it does not fit */
    KEYTAB_BOOL,   /* int: 1 for 1/true/yes/on, 0 for 0/false/no/off (any case) */
    KEYTAB_WORD,   /* int: one of the words of metavar ("off|mask"), stored as lo + its index */
} keytab_type;

typedef struct {
    const char *name;    /* "max-tokens" or "n_layer": '-' and '_' match each other; NULL ends */
    keytab_type type;
    void *at;            /* the value's address, or KEYTAB_OFF(...) for a table over a struct */
    double lo, hi;       /* numbers: the accepted range, inclusive; KEYTAB_CHARS: hi = capacity in
                          * bytes, the NUL included (lo unused) */
    const char *metavar; /* the value's name in option help ("N", "FILE"); NULL: from type */
    const char *help;    /* text for help; '\n' starts an aligned continuation line */
    const char *def;     /* the default as text: keytab_defaults parses it, help shows it; NULL:
                          * help prints the current value; "": none shown */
} keytab_key;

/* The `at` of a row in a table over struct type: its field's offset. */
#define KEYTAB_OFF(type, field) ((void *)offsetof(type, field))

/* Where a value comes from, which is how its messages name it. */
typedef enum {
    KEYTAB_OPTION, /* "--name ..." (cmd/args.h) */
    KEYTAB_KEY,    /* "'name' ..." (configuration keys) */
} keytab_voice;

/* The row of table t (terminated by name NULL) named name[0..len) ('-' and '_' alike), or NULL. */
const keytab_key *keytab_find(const keytab_key *t, const char *name, size_t len);

/* The value's address: base + offset for a table over a struct (base != NULL), else k->at. */
void *keytab_addr(const keytab_key *k, void *base);

/* Parse text as k's value and store it (at keytab_addr(k, base)). Numbers are read whole
 * (trailing blanks allowed), whole-number types also in exponent form ("1e3"), then
 * range-checked; NaN is never a number. Returns 0, or -1 with one message in err naming the key
 * in voice v (the value shown escaped, core/check.h's mt_escape). */
int keytab_parse(const keytab_key *k, void *base, const char *text, keytab_voice v, char *err,
                 size_t errlen);

/* Give every row of t its default: parse its def text into base (a row with def NULL or "" is
 * zeroed). Returns 0, or -1 with err when a def does not parse (a bug in the table). */
int keytab_defaults(const keytab_key *t, void *base, char *err, size_t errlen);

/* k's value at addr as help shows it: %d, %g, 1M/64K byte counts, the text, the word. */
void keytab_value_text(const keytab_key *k, const void *addr, char *buf, size_t n);

/* Option help, one row each: "  --name METAVAR" (underscores shown as dashes), the help text from
 * column col (on the next line when the name is longer), then " (default X)" (def, or the
 * current value when def is NULL). */
void keytab_print_options(FILE *out, const keytab_key *t, void *base, int col);

/* Key help, one row each: "  name  default  help" in columns of 14 and 10, the default read from
 * base (a struct holding the defaults; text values quoted). */
void keytab_print_keys(FILE *out, const keytab_key *t, void *base);

#endif /* MT_KEYTAB_H */
