/*
 * core/utf8.c — strict UTF-8 validation, maximal subparts and incomplete tails (see core/utf8.h).
 * Every function walks the byte ranges of Unicode 15 Table 3-7 through utf8_lead.
 */
#include "core/utf8.h"

/* Sequence length announced by lead byte c (0 if c cannot start a sequence) and the allowed
 * range [*lo, *hi] of the second byte (Table 3-7). */
static int utf8_lead(uint8_t c, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c == 0xE0) { *lo = 0xA0; return 3; }          /* no overlong 3-byte forms */
    if (c >= 0xE1 && c <= 0xEC) return 3;
    if (c == 0xED) { *hi = 0x9F; return 3; }          /* no surrogates U+D800..DFFF */
    if (c == 0xEE || c == 0xEF) return 3;
    if (c == 0xF0) { *lo = 0x90; return 4; }          /* no overlong 4-byte forms */
    if (c >= 0xF1 && c <= 0xF3) return 4;
    if (c == 0xF4) { *hi = 0x8F; return 4; }          /* nothing above U+10FFFF */
    return 0;                                         /* 80..C1, F5..FF */
}

/* 1 if s[0..k) (1 <= k < announced length) is a valid beginning of a sequence. */
static int utf8_prefix_ok(const uint8_t *s, size_t k, int L, uint8_t lo, uint8_t hi) {
    if (k >= 2 && (s[1] < lo || s[1] > hi)) return 0;
    for (size_t i = 2; i < k && i < (size_t)L; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return 1;
}

int utf8_seq_len(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    uint8_t lo, hi;
    int L = utf8_lead(s[0], &lo, &hi);
    if (L == 0 || (size_t)L > n) return 0;
    if (L == 1) return 1;
    return utf8_prefix_ok(s, (size_t)L, L, lo, hi) ? L : 0;
}

size_t utf8_maximal_subpart(const uint8_t *s, size_t n) {
    uint8_t lo, hi;
    int L = utf8_lead(s[0], &lo, &hi);
    size_t k = 1;
    while (L > 1 && k < (size_t)L && k < n &&
           (k == 1 ? s[1] >= lo && s[1] <= hi : (s[k] & 0xC0) == 0x80))
        k++;
    return k;
}

long utf8_invalid_at(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        int L = utf8_seq_len(s + i, n - i);
        if (L == 0) return (long)i;
        i += (size_t)L;
    }
    return -1;
}

int utf8_valid(const uint8_t *s, size_t n) { return utf8_invalid_at(s, n) < 0; }

size_t utf8_incomplete_tail(const uint8_t *s, size_t n) {
    /* the last byte that is not a continuation byte, within the last 3 */
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        const uint8_t *p = s + n - k;
        if ((p[0] & 0xC0) == 0x80) continue;
        uint8_t lo, hi;
        int L = utf8_lead(p[0], &lo, &hi);
        if (L > (int)k && utf8_prefix_ok(p, k, L, lo, hi)) return k;
        return 0;
    }
    return 0;
}
