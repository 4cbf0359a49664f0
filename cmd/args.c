/*
 * cmd/args.c — the option-table parser of cmd/args.h.
 *
 * Two passes over argv: the first only looks for -h/--help (skipping the values of options that
 * take one, so `--prompt --help` is a prompt), so that help wins wherever it stands and prints the
 * defaults untouched; the second assigns. Numbers are parsed whole (strtol/strtod must consume
 * every character), range-checked, and refused by the option's name — one line, exit code 2.
 */
#include "cmd/args.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static const args_opt *find(const args_spec *s, const char *name, size_t len) {
    for (const args_opt *o = s->opts; o && o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0) return o;
    return NULL;
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

/* "%g" of a range bound, with "inf" spelled out */
static void bound(char *buf, size_t n, double v) {
    if (isinf(v)) snprintf(buf, n, "%sinf", v < 0 ? "-" : "");
    else snprintf(buf, n, "%.15g", v);
}

static int range_fail(const args_opt *o, const char *v) {
    char lo[32], hi[32];
    bound(lo, sizeof(lo), o->lo);
    bound(hi, sizeof(hi), o->hi);
    fprintf(stderr, "minitrain: error: --%s must be in [%s, %s], got '%s'\n", o->name, lo, hi, v);
    fflush(stderr);
    return MT_EXIT_USAGE;
}

static int number_fail(const args_opt *o, const char *what, const char *v) {
    fprintf(stderr, "minitrain: error: --%s needs %s, got '%s'\n", o->name, what, v);
    fflush(stderr);
    return MT_EXIT_USAGE;
}

/* Store v into o->ptr. Returns ARGS_CONTINUE or MT_EXIT_USAGE (after the message). */
static int assign(const args_opt *o, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case ARG_FLAG: *(int *)o->ptr = 1; return ARGS_CONTINUE;
    case ARG_STRING: *(const char **)o->ptr = v; return ARGS_CONTINUE;
    case ARG_INT:
    case ARG_I64: {
        long long x = strtoll(v, &end, 10);
        if (*v == 0 || *end != 0 || errno) return number_fail(o, "an integer", v);
        if ((double)x < o->lo || (double)x > o->hi) return range_fail(o, v);
        if (o->kind == ARG_INT) *(int *)o->ptr = (int)x;
        else *(long long *)o->ptr = x;
        return ARGS_CONTINUE;
    }
    case ARG_U64: {
        const char *p = v;
        while (*p == ' ' || *p == '\t') p++;
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == 0 || *p == '-' || *end != 0 || errno)
            return number_fail(o, "a non-negative integer", v);
        if ((double)x < o->lo || (double)x > o->hi) return range_fail(o, v);
        *(unsigned long long *)o->ptr = x;
        return ARGS_CONTINUE;
    }
    case ARG_DOUBLE: {
        double x = strtod(v, &end);
        if (*v == 0 || *end != 0 || isnan(x) || (errno && !isinf(x)))
            return number_fail(o, "a number", v);
        if (!(x >= o->lo && x <= o->hi)) return range_fail(o, v);
        *(double *)o->ptr = x;
        return ARGS_CONTINUE;
    }
    case ARG_BYTES: {
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == 0 || *v == '-' || end == v || errno)
            return number_fail(o, "a byte count like 1048576 or 1M", v);
        int shift = 0;
        if (*end == 'k' || *end == 'K') shift = 10, end++;
        else if (*end == 'm' || *end == 'M') shift = 20, end++;
        if (*end != 0 || x > (~0ull >> shift))
            return number_fail(o, "a byte count like 1048576 or 1M", v);
        x <<= shift;
        if ((double)x < o->lo || (double)x > o->hi) return range_fail(o, v);
        *(size_t *)o->ptr = (size_t)x;
        return ARGS_CONTINUE;
    }
    }
    return ARGS_CONTINUE;
}

int args_double(const char *name, const char *text, double lo, double hi, double *out) {
    const args_opt o = {name, ARG_DOUBLE, out, lo, hi, NULL, NULL, NULL};
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
    if (o) return o->kind != ARG_FLAG;
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
        if (o->kind == ARG_FLAG) {
            if (eq) return fail(s, "--%s takes no value, got '%s'", o->name, eq + 1);
            *(int *)o->ptr = 1;
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

/* The default of o as text, or "" when there is none to show. */
static void default_text(const args_opt *o, char *buf, size_t n) {
    buf[0] = 0;
    if (o->def) {
        snprintf(buf, n, "%s", o->def);
        return;
    }
    switch (o->kind) {
    case ARG_FLAG: break;
    case ARG_INT: snprintf(buf, n, "%d", *(int *)o->ptr); break;
    case ARG_I64: snprintf(buf, n, "%lld", *(long long *)o->ptr); break;
    case ARG_U64: snprintf(buf, n, "%llu", *(unsigned long long *)o->ptr); break;
    case ARG_DOUBLE:
        if (!isnan(*(double *)o->ptr)) /* 1048576, not 1.04858e+06: the value itself */
            bound(buf, n, *(double *)o->ptr);
        break;
    case ARG_BYTES: {
        size_t b = *(size_t *)o->ptr;
        if (b && b % (1u << 20) == 0) snprintf(buf, n, "%zuM", b >> 20);
        else if (b && b % 1024 == 0) snprintf(buf, n, "%zuK", b >> 10);
        else snprintf(buf, n, "%zu", b);
        break;
    }
    case ARG_STRING:
        if (*(const char **)o->ptr) snprintf(buf, n, "%s", *(const char **)o->ptr);
        break;
    }
}

static const char *metavar(const args_opt *o) {
    if (o->metavar) return o->metavar;
    switch (o->kind) {
    case ARG_FLAG: return "";
    case ARG_DOUBLE: return "X";
    case ARG_BYTES: return "BYTES";
    case ARG_STRING: return "TEXT";
    default: return "N";
    }
}

#define HELP_COL 24

void args_help(const args_spec *s, FILE *out) {
    fprintf(out, "%s\n", s->synopsis);
    if (s->about) fprintf(out, "\n%s\n", s->about);
    fprintf(out, "\n");
    for (const args_opt *o = s->opts; o && o->name; o++) {
        char head[128], def[128];
        const char *mv = metavar(o);
        int n = snprintf(head, sizeof(head), "  --%s%s%s", o->name, *mv ? " " : "", mv);
        fprintf(out, "%s", head);
        if (n + 2 > HELP_COL) fprintf(out, "\n%*s", HELP_COL, "");
        else fprintf(out, "%*s", HELP_COL - n, "");
        for (const char *h = o->help ? o->help : ""; *h; h++) {
            fputc(*h, out);
            if (*h == '\n') fprintf(out, "%*s", HELP_COL, "");
        }
        default_text(o, def, sizeof(def));
        if (def[0]) fprintf(out, " (default %s)", def);
        fputc('\n', out);
    }
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
