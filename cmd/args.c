/*
 * cmd/args.c — the option-table parser of cmd/args.h.
 *
 * Two passes over argv: the first only looks for -h/--help (skipping the values of options that
 * take one, so `--prompt --help` is a prompt), so that help wins wherever it stands and prints the
 * defaults untouched; the second assigns. The table is core/keytab.h's: values are parsed whole,
 * range-checked and refused by the option's name there — one line here, exit code 2.
 */
#include "cmd/args.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static const args_opt *find(const args_spec *s, const char *name, size_t len) {
    return keytab_find(s->opts, name, len);
}

static int is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help"); }

static int fail(const args_spec *s, const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "minitrain: error: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see `minitrain %s --help`%s%s)\n", s->cmd, s->hint ? "; " : "",
            s->hint ? s->hint : "");
    fflush(stderr);
    return MT_EXIT_USAGE;
}

/* Store v into o's variable (core/keytab.c parses and range-checks it). Returns ARGS_CONTINUE,
 * or MT_EXIT_USAGE after the one-line message. */
static int assign(const args_opt *o, const char *v) {
    char err[512];
    if (keytab_parse(o, NULL, v, KEYTAB_OPTION, err, sizeof(err)) == 0) return ARGS_CONTINUE;
    fprintf(stderr, "minitrain: error: %s\n", err);
    fflush(stderr);
    return MT_EXIT_USAGE;
}

int args_double(const char *name, const char *text, double lo, double hi, double *out) {
    const args_opt o = {name, KEYTAB_DOUBLE, out, lo, hi, NULL, NULL, NULL};
    return assign(&o, text);
}

/* Split "--name" / "--name=value": *name_len and *eq (NULL when no '='). */
static void split(const char *a, size_t *name_len, const char **eq) {
    *eq = strchr(a + 2, '=');
    *name_len = *eq ? (size_t)(*eq - (a + 2)) : strlen(a + 2);
}

/* 1 when the option word a (no '=') takes the next word as its value. */
static int takes_value(const args_spec *s, const char *a) {
    size_t len;
    const char *eq;
    split(a, &len, &eq);
    if (eq) return 0;
    const args_opt *o = find(s, a + 2, len);
    if (o) return o->type != KEYTAB_FLAG;
    return s->known && s->known(a + 2);
}

int args_parse(const args_spec *s, int argc, char **argv, int *rest) {
    if (rest) *rest = argc;
    /* pass 1: --help anywhere before `--` (values skipped) */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (s->dashdash && !strcmp(a, "--")) break;
        if (is_help(a)) {
            args_help(s, stdout);
            return MT_EXIT_OK;
        }
        if (!strncmp(a, "--", 2) && takes_value(s, a)) i++;
    }
    /* pass 2: assign */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) {
            if (!s->dashdash) return fail(s, "unexpected argument '%s'%s", a, "");
            if (rest) *rest = i + 1;
            return ARGS_CONTINUE;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == 0)
            return fail(s, "unexpected argument '%s' for `minitrain %s`", a, s->cmd);
        size_t len;
        const char *eq;
        split(a, &len, &eq);
        const args_opt *o = find(s, a + 2, len);
        if (!o) {
            char name[128];
            snprintf(name, sizeof(name), "%.*s", (int)(len < 120 ? len : 120), a + 2);
            if (!s->known || !s->known(name))
                return fail(s, "unknown option '--%s' for `minitrain %s`", name, s->cmd);
            const char *v = eq ? eq + 1 : NULL;
            if (!v) {
                if (i + 1 >= argc) return fail(s, "option '--%s' needs a value%s", name, "");
                v = argv[++i];
            }
            s->other(s->ctx, name, v);
            continue;
        }
        if (o->type == KEYTAB_FLAG) {
            if (eq) return fail(s, "--%s takes no value, got '%s'", o->name, eq + 1);
            *(int *)o->at = 1;
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) return fail(s, "--%s needs a value%s", o->name, "");
            v = argv[++i];
        }
        int rc = assign(o, v);
        if (rc != ARGS_CONTINUE) return rc;
    }
    return ARGS_CONTINUE;
}

#define HELP_COL 24

void args_help(const args_spec *s, FILE *out) {
    fprintf(out, "%s\n", s->synopsis);
    if (s->about) fprintf(out, "\n%s\n", s->about);
    fprintf(out, "\n");
    keytab_print_options(out, s->opts, NULL, HELP_COL);
    fprintf(out, "  -h, --help%*sthis help\n", HELP_COL - 12, "");
    if (s->help_tail) {
        fprintf(out, "\n");
        s->help_tail(out);
    }
    if (s->epilog) fprintf(out, "\n%s\n", s->epilog);
}

void args_override_add(void *ctx, const char *key, const char *val) {
    args_overrides *o = ctx;
    if (o->n == ARGS_MAX_OVERRIDES) {
        o->overflow = 1;
        return;
    }
    o->key[o->n] = strdup(key);
    mtCheck(o->key[o->n] != NULL, "out of memory");
    o->val[o->n++] = val;
}

void args_overrides_free(args_overrides *o) {
    for (int i = 0; i < o->n; i++) free(o->key[i]);
    o->n = 0;
}
