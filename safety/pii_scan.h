/*
 * safety/pii_scan.h — what the recognizer files share (safety/pii_recognizers.c: byte classes,
 * email, IBAN, dispatch and the anchor prefilter; safety/pii_numbers.c: validators, cards, SSN,
 * PRC ID, IPv4, phones, IPv6; safety/pii_secrets.c: keys, tokens, PEM blocks, assignments, URL
 * credentials). Private to safety/: the byte-class table, small inline helpers and each
 * recognizer's entry point.
 *
 * A recognizer pii_m_X(b, len, i, m) is tried at trigger i of b[0..len): it returns 1 and fills
 * *m with a span starting at or after i, or 0. It keeps the reach contract of safety/pii_impl.h.
 */
#ifndef MT_PII_SCAN_H
#define MT_PII_SCAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "safety/pii_impl.h"

/* ---------------------------------------------------------------------------------------------
 * byte classes */

enum {
    C_DIGIT = 1,
    C_UPPER = 2,
    C_LOWER = 4,
    C_HEX = 8,     /* 0-9 a-f A-F */
    C_LOCAL = 16,  /* email local part: alnum . _ % + - */
    C_DOMAIN = 32, /* host label: alnum - */
    C_TRIG = 128,  /* may start (or trigger) a recognizer */
};
#define C_ALPHA (C_UPPER | C_LOWER)
#define C_ALNUM (C_DIGIT | C_UPPER | C_LOWER)
#define C_WORD (C_LOCAL | C_DOMAIN | C_TRIG)

extern const uint8_t pii_cls[256];
#define CLS pii_cls

static inline int isdig(uint8_t c) { return (unsigned)(c - '0') < 10u; }
static inline int is(const uint8_t *b, size_t len, size_t j, int cls) {
    return j < len && (CLS[b[j]] & cls);
}
static inline int at(const uint8_t *b, size_t len, size_t j, uint8_t c) {
    return j < len && b[j] == c;
}
static inline uint8_t lower(uint8_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* b[j..] starts with the n bytes of s (case-sensitive); STARTS takes a string literal */
static inline int starts_n(const uint8_t *b, size_t len, size_t j, const char *s, size_t n) {
    return j + n <= len && memcmp(b + j, s, n) == 0;
}
#define STARTS(b, len, j, lit) starts_n(b, len, j, lit, sizeof(lit) - 1)


static inline int set_span(pii_span *m, size_t s, size_t e, pii_type t) {
    m->start = s;
    m->end = e;
    m->type = t;
    return 1;
}

/* A number may start at i: no alphanumeric byte before it, and not the continuation of a dotted
 * or dashed alphanumeric thing ("1.2.3.4.5", "ORD-555-123-4567", "Chrome/1.2.3.4"). */
static inline int num_left_ok(const uint8_t *b, size_t i) {
    if (i == 0)
        return 1;
    uint8_t p = b[i - 1];
    if (CLS[p] & C_ALNUM)
        return 0;
    if ((p == '.' || p == '-' || p == '_' || p == '/') && i >= 2 && (CLS[b[i - 2]] & C_ALNUM))
        return 0;
    return 1;
}

/* A number may end at e: no alphanumeric byte after it and no ".5" / "-7" continuation. */
static inline int num_right_ok(const uint8_t *b, size_t len, size_t e) {
    if (e >= len)
        return 1;
    uint8_t c = b[e];
    if (CLS[c] & C_ALNUM)
        return 0;
    if ((c == '.' || c == '-' || c == '_') && is(b, len, e + 1, C_ALNUM))
        return 0;
    return 1;
}

/* length of the run of bytes of class cls (or in extra) from j, at most maxn */
size_t pii_run(const uint8_t *b, size_t len, size_t j, int cls, const char *extra, size_t maxn);
/* case-insensitive: b[s..e) contains the lower-case word w */
int pii_has_word(const uint8_t *b, size_t s, size_t e, const char *w);

/* safety/pii_numbers.c */
int pii_m_card(const uint8_t *b, size_t len, size_t i, pii_span *m);
int pii_m_ssn(const uint8_t *b, size_t len, size_t i, pii_span *m);
int pii_m_cnid(const uint8_t *b, size_t len, size_t i, pii_span *m);
int pii_m_ipv4(const uint8_t *b, size_t len, size_t i, pii_span *m);
int pii_m_cn_mobile(const uint8_t *b, size_t len, size_t i, pii_span *m);
int pii_m_nanp(const uint8_t *b, size_t len, size_t i, int paren, pii_span *m);
int pii_m_e164(const uint8_t *b, size_t len, size_t i, pii_span *m);
int pii_m_ipv6(const uint8_t *b, size_t len, size_t i, pii_span *m);

/* safety/pii_secrets.c */
int pii_m_aws(const uint8_t *b, size_t len, size_t i, pii_span *m);
int pii_m_token(const uint8_t *b, size_t len, size_t i, pii_span *m);
int pii_m_bearer(const uint8_t *b, size_t len, size_t i, pii_span *m);
int pii_m_pem(const uint8_t *b, size_t len, size_t i, pii_span *m);
int pii_m_assign(const uint8_t *b, size_t len, size_t i, pii_span *m);
int pii_m_urlcred(const uint8_t *b, size_t len, size_t i, pii_span *m);

#endif /* MT_PII_SCAN_H */
