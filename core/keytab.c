/*
 * core/keytab.c — the key-table engine of core/keytab.h: find, parse, range-check, defaults, help.
 *
 * Whole-number types are read with strtoll/strtoull first (exact up to 2^63, which doubles are
 * not), then as a double that must be whole ("1e3"), so a configuration written either way reads
 * the same. A number's range is checked before it is converted, so an out-of-range value is named
 * as such rather than wrapped. Every message names the key in its voice and shows the user's text
 * escaped (core/check.h's mt_escape): a value may come from a binary file given as a config.
 */
#include "core/keytab.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/check.h"

static int same_name(const char *a, const char *b, size_t len) {
    for (size_t i = 0; i < len; i++) {
        char x = a[i] == '-' ? '_' : a[i], y = b[i] == '-' ? '_' : b[i];
        if (x != y || b[i] == 0) return 0;
    }
    return a[len] == 0;
}

const keytab_key *keytab_find(const keytab_key *t, const char *name, size_t len) {
    for (const keytab_key *k = t; k && k->name; k++)
        if (same_name(k->name, name, len)) return k;
    return NULL;
}

void *keytab_addr(const keytab_key *k, void *base) {
    return base ? (char *)base + (uintptr_t)k->at : k->at;
}

/* ---- messages ------------------------------------------------------------------------------- */

/* "%.15g" of a range bound, with "inf" spelled out */
static void bound(char *buf, size_t n, double v) {
    if (isinf(v)) snprintf(buf, n, "%sinf", v < 0 ? "-" : "");
    else snprintf(buf, n, "%.15g", v);
}

/* "--name needs WHAT, got 'text'" / "'name' needs WHAT, got 'text'" */
static int need(const keytab_key *k, keytab_voice v, const char *what, const char *text,
                char *err, size_t errlen) {
    char shown[MT_ESCAPE_LINE + 8];
    mt_escape(text, MT_ESCAPE_LINE, shown, sizeof(shown));
    if (v == KEYTAB_OPTION) snprintf(err, errlen, "--%s needs %s, got '%s'", k->name, what, shown);
    else snprintf(err, errlen, "'%s' needs %s, got '%s'", k->name, what, shown);
    return -1;
}

static int out_of_range(const keytab_key *k, keytab_voice v, const char *text, char *err,
                        size_t errlen) {
    char lo[32], hi[32], shown[MT_ESCAPE_LINE + 8];
    bound(lo, sizeof(lo), k->lo);
    bound(hi, sizeof(hi), k->hi);
    mt_escape(text, MT_ESCAPE_LINE, shown, sizeof(shown));
    if (v == KEYTAB_OPTION)
        snprintf(err, errlen, "--%s must be in [%s, %s], got '%s'", k->name, lo, hi, shown);
    else snprintf(err, errlen, "'%s' = %s is out of range [%s, %s]", k->name, shown, lo, hi);
    return -1;
}

/* ---- parsing -------------------------------------------------------------------------------- */

static int only_blanks(const char *s) {
    while (*s == ' ' || *s == '\t') s++;
    return *s == 0;
}

/* text as a whole number into *x; 0, or -1 when it is not one. Range-checked against k. */
static int whole(const keytab_key *k, const char *text, int non_negative, double *x,
                 long long *ll, unsigned long long *ull) {
    const char *p = text;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == 0 || (non_negative && *p == '-')) return -1;
    char *end;
    errno = 0;
    if (non_negative) {
        *ull = strtoull(p, &end, 10);
        if (!errno && only_blanks(end)) return *x = (double)*ull, 0;
    } else {
        *ll = strtoll(p, &end, 10);
        if (!errno && only_blanks(end)) return *x = (double)*ll, 0;
    }
    errno = 0;
    double d = strtod(p, &end);
    if (end == p || !only_blanks(end) || !isfinite(d) || d != floor(d)) return -1;
    *x = d;
    if (d >= k->lo && d <= k->hi) { /* in range: the bounds fit the type */
        if (non_negative) *ull = (unsigned long long)d;
        else *ll = (long long)d;
    }
    return 0;
}

static int parse_number(const keytab_key *k, void *addr, const char *text, keytab_voice v,
                        char *err, size_t errlen) {
    char *end;
    errno = 0;
    double x = strtod(text, &end);
    if (text[0] == 0 || end == text || !only_blanks(end) || isnan(x) || (errno && !isinf(x)))
        return need(k, v, "a number", text, err, errlen);
    if (!(x >= k->lo && x <= k->hi)) return out_of_range(k, v, text, err, errlen);
    if (k->type == KEYTAB_FLOAT) *(float *)addr = (float)x;
    else *(double *)addr = x;
    return 0;
}

static int parse_bytes(const keytab_key *k, void *addr, const char *text, keytab_voice v,
                       char *err, size_t errlen) {
    const char *p = text, *what = "a byte count like 1048576 or 1M";
    while (*p == ' ' || *p == '\t') p++;
    if (*p == 0 || *p == '-') return need(k, v, what, text, err, errlen);
    char *end;
    errno = 0;
    double x = strtod(p, &end);
    if (end == p || errno) return need(k, v, what, text, err, errlen);
    if (*end == 'k' || *end == 'K') x *= 1024.0, end++;
    else if (*end == 'm' || *end == 'M') x *= 1048576.0, end++;
    else if (*end == 'g' || *end == 'G') x *= 1073741824.0, end++;
    if (!only_blanks(end) || !isfinite(x) || x != floor(x)) return need(k, v, what, text, err, errlen);
    if (!(x >= k->lo && x <= k->hi)) return out_of_range(k, v, text, err, errlen);
    *(size_t *)addr = (size_t)x;
    return 0;
}

static int parse_bool(const keytab_key *k, void *addr, const char *text, keytab_voice v,
                      char *err, size_t errlen) {
    static const char *const yes[] = {"1", "true", "yes", "on"}, *const no[] = {"0", "false", "no",
                                                                                 "off"};
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(text, yes[i])) return *(int *)addr = 1, 0;
        if (!strcasecmp(text, no[i])) return *(int *)addr = 0, 0;
    }
    return need(k, v, "true or false", text, err, errlen);
}

/* The i-th word of k->metavar ("a|b|c") into buf; 0, or -1 past the last. */
static int word_at(const keytab_key *k, int i, char *buf, size_t n) {
    const char *w = k->metavar ? k->metavar : "";
    for (; i > 0 && w; i--) w = strchr(w, '|') ? strchr(w, '|') + 1 : NULL;
    if (w == NULL) return -1;
    size_t len = strcspn(w, "|");
    snprintf(buf, n, "%.*s", (int)len, w);
    return 0;
}

static int parse_word(const keytab_key *k, void *addr, const char *text, keytab_voice v,
                      char *err, size_t errlen) {
    char w[64], list[256] = "", shown[MT_ESCAPE_LINE + 8];
    int n = 0;
    for (; word_at(k, n, w, sizeof(w)) == 0; n++)
        if (!strcmp(w, text)) return *(int *)addr = (int)k->lo + n, 0;
    for (int i = 0; i < n; i++) { /* "a, b or c" */
        word_at(k, i, w, sizeof(w));
        size_t l = strlen(list);
        snprintf(list + l, sizeof(list) - l, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", w);
    }
    mt_escape(text, MT_ESCAPE_LINE, shown, sizeof(shown));
    if (v == KEYTAB_OPTION) snprintf(err, errlen, "--%s must be %s, got '%s'", k->name, list, shown);
    else snprintf(err, errlen, "'%s' must be %s, got '%s'", k->name, list, shown);
    return -1;
}

int keytab_parse(const keytab_key *k, void *base, const char *text, keytab_voice v, char *err,
                 size_t errlen) {
    void *addr = keytab_addr(k, base);
    double x;
    long long ll = 0;
    unsigned long long ull = 0;
    switch (k->type) {
    case KEYTAB_FLAG: *(int *)addr = 1; return 0;
    case KEYTAB_STRING: *(const char **)addr = text; return 0;
    case KEYTAB_CHARS:
        if (strlen(text) >= (size_t)k->hi) {
            if (v == KEYTAB_OPTION)
                snprintf(err, errlen, "--%s is too long (max %zu chars)", k->name,
                         (size_t)k->hi - 1);
            else snprintf(err, errlen, "value of '%s' is too long (max %zu chars)", k->name,
                          (size_t)k->hi - 1);
            return -1;
        }
        memcpy(addr, text, strlen(text) + 1);
        return 0;
    case KEYTAB_BOOL: return parse_bool(k, addr, text, v, err, errlen);
    case KEYTAB_WORD: return parse_word(k, addr, text, v, err, errlen);
    case KEYTAB_INT:
    case KEYTAB_I64:
        if (whole(k, text, 0, &x, &ll, &ull))
            return need(k, v, v == KEYTAB_OPTION ? "an integer" : "a whole number", text, err,
                        errlen);
        if (x < k->lo || x > k->hi) return out_of_range(k, v, text, err, errlen);
        if (k->type == KEYTAB_INT) *(int *)addr = (int)ll;
        else *(long long *)addr = ll;
        return 0;
    case KEYTAB_U64:
        if (whole(k, text, 1, &x, &ll, &ull))
            return need(k, v, v == KEYTAB_OPTION ? "a non-negative integer"
                                                 : "a non-negative whole number", text, err, errlen);
        if (x < k->lo || x > k->hi) return out_of_range(k, v, text, err, errlen);
        *(unsigned long long *)addr = ull;
        return 0;
    case KEYTAB_FLOAT:
    case KEYTAB_DOUBLE: return parse_number(k, addr, text, v, err, errlen);
    case KEYTAB_BYTES: return parse_bytes(k, addr, text, v, err, errlen);
    }
    return 0;
}

int keytab_defaults(const keytab_key *t, void *base, char *err, size_t errlen) {
    for (const keytab_key *k = t; k->name; k++) {
        void *addr = keytab_addr(k, base);
        if (k->def == NULL || k->def[0] == 0) {
            switch (k->type) {
            case KEYTAB_FLAG:
            case KEYTAB_BOOL:
            case KEYTAB_INT: *(int *)addr = 0; break;
            case KEYTAB_WORD: *(int *)addr = (int)k->lo; break;
            case KEYTAB_I64: *(long long *)addr = 0; break;
            case KEYTAB_U64: *(unsigned long long *)addr = 0; break;
            case KEYTAB_FLOAT: *(float *)addr = 0; break;
            case KEYTAB_DOUBLE: *(double *)addr = 0; break;
            case KEYTAB_BYTES: *(size_t *)addr = 0; break;
            case KEYTAB_STRING: *(const char **)addr = NULL; break;
            case KEYTAB_CHARS: *(char *)addr = 0; break;
            }
        } else if (keytab_parse(k, base, k->def, KEYTAB_KEY, err, errlen) != 0) {
            return -1;
        }
    }
    return 0;
}

/* ---- help ----------------------------------------------------------------------------------- */

void keytab_value_text(const keytab_key *k, const void *addr, char *buf, size_t n) {
    buf[0] = 0;
    switch (k->type) {
    case KEYTAB_FLAG: break;
    case KEYTAB_BOOL: snprintf(buf, n, "%s", *(const int *)addr ? "true" : "false"); break;
    case KEYTAB_INT: snprintf(buf, n, "%d", *(const int *)addr); break;
    case KEYTAB_I64: snprintf(buf, n, "%lld", *(const long long *)addr); break;
    case KEYTAB_U64: snprintf(buf, n, "%llu", *(const unsigned long long *)addr); break;
    case KEYTAB_FLOAT: snprintf(buf, n, "%g", (double)*(const float *)addr); break;
    case KEYTAB_DOUBLE:
        if (!isnan(*(const double *)addr)) snprintf(buf, n, "%g", *(const double *)addr);
        break;
    case KEYTAB_BYTES: {
        size_t b = *(const size_t *)addr;
        if (b && b % (1u << 20) == 0) snprintf(buf, n, "%zuM", b >> 20);
        else if (b && b % 1024 == 0) snprintf(buf, n, "%zuK", b >> 10);
        else snprintf(buf, n, "%zu", b);
        break;
    }
    case KEYTAB_STRING:
        if (*(const char *const *)addr) snprintf(buf, n, "%s", *(const char *const *)addr);
        break;
    case KEYTAB_CHARS: snprintf(buf, n, "%s", (const char *)addr); break;
    case KEYTAB_WORD: word_at(k, *(const int *)addr - (int)k->lo, buf, n); break;
    }
}

static const char *metavar(const keytab_key *k) {
    if (k->metavar) return k->metavar;
    switch (k->type) {
    case KEYTAB_FLAG: return "";
    case KEYTAB_FLOAT:
    case KEYTAB_DOUBLE: return "X";
    case KEYTAB_BYTES: return "BYTES";
    case KEYTAB_STRING:
    case KEYTAB_CHARS: return "TEXT";
    case KEYTAB_BOOL: return "BOOL";
    default: return "N";
    }
}

void keytab_print_options(FILE *out, const keytab_key *t, void *base, int col) {
    for (const keytab_key *k = t; k && k->name; k++) {
        char head[128], def[128];
        const char *mv = metavar(k);
        int n = snprintf(head, sizeof(head), "  --");
        for (const char *c = k->name; *c && n < (int)sizeof(head) - 1; c++)
            head[n++] = *c == '_' ? '-' : *c;
        head[n] = 0;
        n += snprintf(head + n, sizeof(head) - (size_t)n, "%s%s", *mv ? " " : "", mv);
        fprintf(out, "%s", head);
        if (n + 2 > col) fprintf(out, "\n%*s", col, "");
        else fprintf(out, "%*s", col - n, "");
        for (const char *h = k->help ? k->help : ""; *h; h++) {
            fputc(*h, out);
            if (*h == '\n') fprintf(out, "%*s", col, "");
        }
        if (k->def) snprintf(def, sizeof(def), "%s", k->def);
        else keytab_value_text(k, keytab_addr(k, base), def, sizeof(def));
        if (def[0]) fprintf(out, " (default %s)", def);
        fputc('\n', out);
    }
}

void keytab_print_keys(FILE *out, const keytab_key *t, void *base) {
    for (const keytab_key *k = t; k->name; k++) {
        char val[64], def[72];
        keytab_value_text(k, keytab_addr(k, base), val, sizeof(val));
        if (k->type == KEYTAB_CHARS || k->type == KEYTAB_STRING) snprintf(def, sizeof(def), "\"%s\"", val);
        else snprintf(def, sizeof(def), "%s", val);
        fprintf(out, "  %-14s %-10s %s\n", k->name, def, k->help);
    }
}
