/*
 * safety/pii_recognizers.c — the PII recognizers: hand-written scanners, each with the
 * validation that a regular expression alone cannot do (Luhn and IIN ranges for cards, mod-97
 * for IBANs, the MOD 11-2 check digit and birth date of PRC resident IDs, octet ranges, the SSN
 * allocation rules, NANP area/exchange rules).
 *
 * Why hand-written and not libpcre2: one pass over the bytes with a 256-entry class table
 * decides in a branch or two that a byte cannot start anything (spaces, most punctuation,
 * every byte >= 0x80), and skips the inside of words in a tight loop, because every recognizer
 * wants a non-alphanumeric byte before its start. That is what makes several hundred MB/s on
 * one thread possible, and it keeps each rule readable in C next to its validation.
 *
 * Boundaries are byte classes, never \b: bytes >= 0x80 (CJK, any UTF-8, invalid UTF-8) and NUL
 * are "not alphanumeric", so "手机13812345678号" and "卡号4111111111111111谢谢" match, and no
 * decoding is needed (invalid UTF-8 cannot derail the scan).
 *
 * The reach contract of safety/pii_impl.h holds for every function here: a recognizer triggered
 * at i reads b[i - PII_LOOKBEHIND .. i + PII_REACH) at most, always clipped to [0, len).
 */
#define _GNU_SOURCE /* memmem */
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

static const uint8_t CLS[256] = {
    ['0' ... '9'] = C_DIGIT | C_HEX | C_WORD,
    ['A' ... 'F'] = C_UPPER | C_HEX | C_WORD,
    ['G' ... 'Z'] = C_UPPER | C_WORD,
    ['a' ... 'f'] = C_LOWER | C_HEX | C_WORD,
    ['g' ... 'z'] = C_LOWER | C_WORD,
    ['.'] = C_LOCAL | C_TRIG,
    ['_'] = C_LOCAL | C_TRIG,
    ['%'] = C_LOCAL | C_TRIG,
    ['+'] = C_LOCAL | C_TRIG,
    ['-'] = C_LOCAL | C_DOMAIN | C_TRIG,
    ['('] = C_TRIG,
    [':'] = C_TRIG,
    ['='] = C_TRIG,
};

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

static size_t run(const uint8_t *b, size_t len, size_t j, int cls, const char *extra,
                  size_t maxn);

static int set_span(pii_span *m, size_t s, size_t e, pii_type t) {
    m->start = s;
    m->end = e;
    m->type = t;
    return 1;
}

/* A number may start at i: no alphanumeric byte before it, and not the continuation of a dotted
 * or dashed alphanumeric thing ("1.2.3.4.5", "ORD-555-123-4567", "Chrome/1.2.3.4"). */
static int num_left_ok(const uint8_t *b, size_t i) {
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
static int num_right_ok(const uint8_t *b, size_t len, size_t e) {
    if (e >= len)
        return 1;
    uint8_t c = b[e];
    if (CLS[c] & C_ALNUM)
        return 0;
    if ((c == '.' || c == '-' || c == '_') && is(b, len, e + 1, C_ALNUM))
        return 0;
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * validators */

int pii_luhn_ok(const uint8_t *d, size_t n) {
    int sum = 0;
    for (size_t k = 0; k < n; k++) {
        int x = d[n - 1 - k] - '0';
        if (k & 1) {
            x *= 2;
            if (x > 9)
                x -= 9;
        }
        sum += x;
    }
    return n > 0 && sum % 10 == 0;
}

static int prefix_num(const uint8_t *d, int k) {
    int v = 0;
    for (int i = 0; i < k; i++)
        v = v * 10 + (d[i] - '0');
    return v;
}

/* Issuer identification number ranges and lengths (ISO/IEC 7812; the networks' published
 * tables): Visa, Mastercard (51-55 and 2221-2720), Amex, Discover, UnionPay, JCB, Diners, Mir,
 * Maestro, RuPay. No network issues 13-digit numbers starting with 1, which is why 13-digit
 * millisecond timestamps (1748503543012 is Luhn-valid) are not cards. */
int pii_card_iin_ok(const uint8_t *d, size_t n) {
    if (n < 13 || n > 19)
        return 0;
    int p1 = prefix_num(d, 1), p2 = prefix_num(d, 2), p3 = prefix_num(d, 3);
    int p4 = prefix_num(d, 4), p6 = prefix_num(d, 6);
    if (p1 == 4) /* Visa */
        return n == 13 || n == 16 || n == 19;
    if ((p2 >= 51 && p2 <= 55) || (p4 >= 2221 && p4 <= 2720)) /* Mastercard */
        return n == 16;
    if (p2 == 34 || p2 == 37) /* American Express */
        return n == 15;
    if (p4 == 6011 || (p3 >= 644 && p3 <= 649) || p2 == 65 || (p6 >= 622126 && p6 <= 622925))
        return n >= 16; /* Discover */
    if (p2 == 62 || p2 == 81) /* UnionPay */
        return n >= 16;
    if (p4 >= 3528 && p4 <= 3589) /* JCB */
        return n >= 16;
    if ((p3 >= 300 && p3 <= 305) || p4 == 3095 || p2 == 36 || p2 == 38 || p2 == 39) /* Diners */
        return n >= 14;
    if (p4 >= 2200 && p4 <= 2204) /* Mir */
        return n >= 16;
    if (p2 == 50 || (p2 >= 56 && p2 <= 58) || p2 == 63 || p2 == 67) /* Maestro */
        return 1;
    if (p2 == 60 || p2 == 82 || p3 == 508) /* RuPay */
        return n == 16;
    return 0;
}

/* ISO 13616 IBAN lengths by country (SWIFT IBAN registry). */
static const struct {
    char cc[3];
    uint8_t len;
} IBAN_LEN[] = {
    {"AD", 24}, {"AE", 23}, {"AL", 28}, {"AT", 20}, {"AZ", 28}, {"BA", 20}, {"BE", 16},
    {"BG", 22}, {"BH", 22}, {"BI", 27}, {"BR", 29}, {"BY", 28}, {"CH", 21}, {"CR", 22},
    {"CY", 28}, {"CZ", 24}, {"DE", 22}, {"DJ", 27}, {"DK", 18}, {"DO", 28}, {"EE", 20},
    {"EG", 29}, {"ES", 24}, {"FI", 18}, {"FK", 18}, {"FO", 18}, {"FR", 27}, {"GB", 22},
    {"GE", 22}, {"GI", 23}, {"GL", 18}, {"GR", 27}, {"GT", 28}, {"HR", 21}, {"HU", 28},
    {"IE", 22}, {"IL", 23}, {"IQ", 23}, {"IS", 26}, {"IT", 27}, {"JO", 30}, {"KW", 30},
    {"KZ", 20}, {"LB", 28}, {"LC", 32}, {"LI", 21}, {"LT", 20}, {"LU", 20}, {"LV", 21},
    {"LY", 25}, {"MC", 27}, {"MD", 24}, {"ME", 22}, {"MK", 19}, {"MN", 20}, {"MR", 27},
    {"MT", 31}, {"MU", 30}, {"NI", 28}, {"NL", 18}, {"NO", 15}, {"OM", 23}, {"PK", 24},
    {"PL", 28}, {"PS", 29}, {"PT", 25}, {"QA", 29}, {"RO", 24}, {"RS", 22}, {"RU", 33},
    {"SA", 24}, {"SC", 31}, {"SD", 18}, {"SE", 24}, {"SI", 19}, {"SK", 24}, {"SM", 27},
    {"SO", 23}, {"ST", 25}, {"SV", 28}, {"TL", 23}, {"TN", 24}, {"TR", 26}, {"UA", 29},
    {"VA", 22}, {"VG", 24}, {"XK", 20}, {"YE", 30},
};

static int iban_len(uint8_t a, uint8_t b) {
    for (size_t k = 0; k < sizeof(IBAN_LEN) / sizeof(IBAN_LEN[0]); k++)
        if (IBAN_LEN[k].cc[0] == a && IBAN_LEN[k].cc[1] == b)
            return IBAN_LEN[k].len;
    return 0;
}

/* ISO 13616 / ISO 7064 MOD 97-10: move the first four characters to the end, letters become
 * 10..35, and the number mod 97 must be 1 (computed digit by digit). */
int pii_iban_ok(const uint8_t *s, size_t n) {
    if (n < 15 || n > 34 || !(CLS[s[0]] & C_UPPER) || !(CLS[s[1]] & C_UPPER) || !isdig(s[2]) ||
        !isdig(s[3]) || (size_t)iban_len(s[0], s[1]) != n)
        return 0;
    unsigned r = 0;
    for (size_t k = 0; k < n; k++) {
        uint8_t c = s[(k + 4) % n];
        if (isdig(c))
            r = (r * 10 + (c - '0')) % 97;
        else if (c >= 'A' && c <= 'Z')
            r = (r * 100 + (c - 'A' + 10)) % 97;
        else
            return 0;
    }
    return r == 1;
}

static int leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static int date_ok(int y, int mo, int d) {
    static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1900 || y > 2099 || mo < 1 || mo > 12 || d < 1)
        return 0;
    return d <= dim[mo - 1] + (mo == 2 && leap(y));
}

/* GB 2260 province-level codes: the first two digits of a PRC resident ID */
static int province_ok(int p) {
    return (p >= 11 && p <= 15) || (p >= 21 && p <= 23) || (p >= 31 && p <= 37) ||
           (p >= 41 && p <= 46) || (p >= 50 && p <= 54) || (p >= 61 && p <= 65) || p == 71 ||
           p == 81 || p == 82 || p == 83;
}

/* GB 11643-1999: 6-digit region (first two = a province code), 8-digit birth date YYYYMMDD,
 * 3-digit sequence, check character = "10X98765432"[sum(d_i * w_i) mod 11] with the ISO 7064
 * MOD 11-2 weights w_i = 2^(17-i) mod 11. */
int pii_cnid_ok(const uint8_t *s) {
    static const int W[17] = {7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2};
    static const char CHECK[] = "10X98765432";
    for (int k = 0; k < 17; k++)
        if (!isdig(s[k]))
            return 0;
    if (!province_ok(prefix_num(s, 2)) || !date_ok(prefix_num(s + 6, 4), prefix_num(s + 10, 2), prefix_num(s + 12, 2)))
        return 0;
    int sum = 0;
    for (int k = 0; k < 17; k++)
        sum += (s[k] - '0') * W[k];
    uint8_t c = s[17] == 'x' ? 'X' : s[17];
    return c == (uint8_t)CHECK[sum % 11];
}

/* SSA rules: area 000, 666 and 900-999 are never issued, nor group 00 or serial 0000. */
int pii_ssn_ok(int area, int group, int serial) {
    return area != 0 && area != 666 && area < 900 && group != 0 && serial != 0;
}

/* NANP: area code NXX with X-middle not 9 and not N11; exchange NXX not N11 (N = 2-9). */
static int nanp_ok(const uint8_t *d) {
    if (d[0] < '2' || d[1] == '9' || (d[1] == '1' && d[2] == '1'))
        return 0;
    return d[3] >= '2' && !(d[4] == '1' && d[5] == '1');
}

/* E.164 digits (country code first, no '+'): 8..15 digits, the NANP (+1) and PRC (+86) plans
 * checked more closely. */
static int e164_ok(const uint8_t *d, int n) {
    if (n < 8 || n > 15 || d[0] == '0')
        return 0;
    if (d[0] == '1')
        return n == 11 && nanp_ok(d + 1);
    if (d[0] == '8' && d[1] == '6') {
        if (d[2] == '1')
            return n == 13 && d[3] >= '3';
        return d[2] != '0' && n >= 11 && n <= 13;
    }
    if (d[0] == '7')
        return n == 11;
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * numbers: cards, SSN, PRC ID, IPv4, phones */

typedef struct {
    uint8_t d[24];   /* the digits */
    int nd;          /* digit count */
    int ng;          /* groups */
    int gnd[12];     /* digits up to the end of group g */
    size_t gend[12]; /* byte offset after group g */
} digit_groups;

/* Collect up to maxd digits starting at j in groups split by one separator from seps (the same
 * one throughout when same_sep), optionally "(123)" groups. A group that would pass maxd digits
 * ends the collection before it; a first group longer than maxd gives ng = 0. */
static void collect(const uint8_t *b, size_t len, size_t j, const char *seps, int same_sep,
                    int parens, int maxd, digit_groups *g) {
    g->nd = g->ng = 0;
    uint8_t sep = 0;
    while (g->ng < 12) {
        int paren = parens && at(b, len, j, '(') && is(b, len, j + 1, C_DIGIT);
        size_t g0 = j + (size_t)paren;
        size_t k = g0;
        while (k < len && isdig(b[k]) && (int)(k - g0) <= maxd)
            k++;
        int gl = (int)(k - g0);
        if (paren && !at(b, len, k, ')'))
            return;
        if (gl == 0 || g->nd + gl > maxd || is(b, len, k, C_DIGIT))
            return;
        memcpy(g->d + g->nd, b + g0, (size_t)gl);
        g->nd += gl;
        j = k + (size_t)paren;
        g->gnd[g->ng] = g->nd;
        g->gend[g->ng] = j;
        g->ng++;
        if (paren && at(b, len, j, ' ') && (is(b, len, j + 1, C_DIGIT) || at(b, len, j + 1, '(')))
            j++; /* "(415) 555" */
        else if (j + 1 < len && strchr(seps, b[j]) && b[j] != 0 &&
                 (!same_sep || sep == 0 || b[j] == sep) &&
                 (isdig(b[j + 1]) || (parens && b[j + 1] == '('))) {
            sep = b[j];
            j++;
        } else if (!(parens && at(b, len, j, '(')))
            return;
    }
}

/* 18 digits with a province code and a birth date where a PRC ID has them: an ID (perhaps
 * mistyped), not a card — 18-digit cards are rare and 62/65/50/36 are both IIN and province
 * prefixes, so a Luhn pass by chance would otherwise call one ID in ten a card */
static int cnid_shaped(const uint8_t *d, int n) {
    return n == 18 && province_ok(prefix_num(d, 2)) && prefix_num(d + 6, 2) >= 19 &&
           prefix_num(d + 6, 2) <= 20 && prefix_num(d + 10, 2) >= 1 &&
           prefix_num(d + 10, 2) <= 12 && prefix_num(d + 12, 2) >= 1 &&
           prefix_num(d + 12, 2) <= 31;
}

static int m_card(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    digit_groups g;
    collect(b, len, i, " -", 1, 0, 19, &g);
    if (g.ng == 0)
        return 0;
    /* grouped: 4 digits, then groups of 3-6 (4-4-4-4, 4-6-5 Amex, 4-6-4 Diners, 4-4-4-4-3) */
    if (g.ng >= 2 && g.gnd[0] == 4) {
        int k_ok = 0;
        for (int k = 1; k < g.ng; k++) {
            int gl = g.gnd[k] - g.gnd[k - 1];
            if (gl < 3 || gl > 6)
                break;
            k_ok = k;
        }
        /* the longest run of card-sized groups that validates; what follows may be a CVV or
         * a date ("4111 1111 1111 1111 123 12/27") */
        for (int k = k_ok; k >= 1; k--) {
            int n = g.gnd[k];
            if (n >= 13 && !cnid_shaped(g.d, n) && pii_luhn_ok(g.d, (size_t)n) &&
                pii_card_iin_ok(g.d, (size_t)n) && num_right_ok(b, len, g.gend[k]))
                return set_span(m, i, g.gend[k], PII_CARD);
        }
    }
    int n = g.gnd[0];
    if (n >= 13 && !cnid_shaped(g.d, n) && pii_luhn_ok(g.d, (size_t)n) &&
        pii_card_iin_ok(g.d, (size_t)n) &&
        num_right_ok(b, len, g.gend[0]))
        return set_span(m, i, g.gend[0], PII_CARD);
    return 0;
}

static int m_ssn(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    if (i + 11 > len)
        return 0;
    const uint8_t *p = b + i;
    uint8_t s = p[3];
    if ((s != '-' && s != ' ') || p[6] != s)
        return 0;
    static const int DIG[9] = {0, 1, 2, 4, 5, 7, 8, 9, 10};
    for (int k = 0; k < 9; k++)
        if (!isdig(p[DIG[k]]))
            return 0;
    if (!num_right_ok(b, len, i + 11))
        return 0;
    int area = prefix_num(p, 3), group = prefix_num(p + 4, 2), serial = prefix_num(p + 7, 4);
    return pii_ssn_ok(area, group, serial) && set_span(m, i, i + 11, PII_SSN);
}

static int m_cnid(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    if (i + 18 > len || !pii_cnid_ok(b + i) || !num_right_ok(b, len, i + 18))
        return 0;
    return set_span(m, i, i + 18, PII_CNID);
}

/* dotted quad at j, each octet 0..255 without leading zeros; *end after it */
static int ipv4_parse(const uint8_t *b, size_t len, size_t j, size_t *end) {
    for (int k = 0; k < 4; k++) {
        size_t g0 = j;
        int v = 0;
        while (j < len && isdig(b[j]) && j - g0 < 4)
            v = v * 10 + (b[j++] - '0');
        size_t gl = j - g0;
        if (gl == 0 || gl > 3 || v > 255 || (gl > 1 && b[g0] == '0'))
            return 0;
        if (k < 3) {
            if (!at(b, len, j, '.'))
                return 0;
            j++;
        }
    }
    *end = j;
    return 1;
}

/* "version 1.2.3.4", "ver. 1.2.3.4", "release 10.0.0.1", "build 1.2.3.4" read as versions */
static int after_version_word(const uint8_t *b, size_t i) {
    static const char *WORDS[] = {"version", "ver", "ver.", "v", "v.", "release", "build", "rev"};
    size_t k = i;
    while (k > 0 && i - k < 3 && (b[k - 1] == ' ' || b[k - 1] == ':'))
        k--;
    size_t w1 = k;
    while (k > 0 && w1 - k < 8 && ((CLS[b[k - 1]] & C_ALPHA) || b[k - 1] == '.'))
        k--;
    if (k > 0 && (CLS[b[k - 1]] & C_ALNUM))
        return 0;
    for (size_t q = 0; q < sizeof(WORDS) / sizeof(WORDS[0]); q++) {
        size_t n = strlen(WORDS[q]);
        if (w1 - k != n)
            continue;
        size_t c = 0;
        while (c < n && lower(b[k + c]) == (uint8_t)WORDS[q][c])
            c++;
        if (c == n)
            return 1;
    }
    return 0;
}

static int m_ipv4(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    size_t e;
    if (!ipv4_parse(b, len, i, &e) || !num_right_ok(b, len, e) || after_version_word(b, i))
        return 0;
    return set_span(m, i, e, PII_IPV4);
}

/* PRC mobile without country code: 1[3-9]XXXXXXXXX, or 3-4-4 split by spaces or dashes */
static int m_cn_mobile(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    digit_groups g;
    collect(b, len, i, " -", 1, 0, 11, &g);
    if (g.ng == 0 || g.nd != 11 || g.d[0] != '1' || g.d[1] < '3')
        return 0;
    int k = g.ng - 1;
    if (!((g.ng == 1) || (g.ng == 3 && g.gnd[0] == 3 && g.gnd[1] == 7)))
        return 0;
    return num_right_ok(b, len, g.gend[k]) && set_span(m, i, g.gend[k], PII_PHONE);
}

/* NANP without '+': [1 sep] 415 sep 555 sep 2671 (sep one of "-. "), or (415) 555-2671 */
static int m_nanp(const uint8_t *b, size_t len, size_t i, int paren, pii_span *m) {
    digit_groups g;
    collect(b, len, i, "-. ", 0, paren, 11, &g);
    int k = -1;
    if (g.ng >= 3 && g.gnd[0] == 3 && g.gnd[1] == 6 && g.gnd[2] == 10)
        k = 2;
    else if (!paren && g.ng >= 4 && g.gnd[0] == 1 && g.d[0] == '1' && g.gnd[1] == 4 &&
             g.gnd[2] == 7 && g.gnd[3] == 11)
        k = 3;
    if (k < 0) /* the group structure also demands separators: no bare 10-digit numbers */
        return 0;
    if (paren != (b[i] == '('))
        return 0;
    const uint8_t *d = g.d + (k == 3 ? 1 : 0);
    return nanp_ok(d) && num_right_ok(b, len, g.gend[k]) && set_span(m, i, g.gend[k], PII_PHONE);
}

/* '+' E.164 (the longest group prefix that validates), or "(+86)138..." when paren */
static int m_e164(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    size_t j = i + 1;
    digit_groups g;
    uint8_t cc[4];
    int ncc = 0;
    if (b[i] == '(') { /* (+CC) rest */
        j++;
        while (j < len && isdig(b[j]) && ncc < 4)
            cc[ncc++] = b[j++];
        if (ncc == 0 || ncc > 3 || !at(b, len, j, ')'))
            return 0;
        j++;
        if (at(b, len, j, ' ') || at(b, len, j, '-'))
            j++;
        if (!is(b, len, j, C_DIGIT))
            return 0;
    }
    collect(b, len, j, " -.", 0, 1, 15 - ncc, &g);
    if (g.ng == 0)
        return 0;
    uint8_t d[16];
    memcpy(d, cc, (size_t)ncc);
    for (int k = g.ng - 1; k >= 0; k--) {
        int n = ncc + g.gnd[k];
        memcpy(d + ncc, g.d, (size_t)g.gnd[k]);
        if (e164_ok(d, n) && num_right_ok(b, len, g.gend[k]))
            return set_span(m, i, g.gend[k], PII_PHONE);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * IPv6 (RFC 4291 section 2.2 text forms; RFC 5952 output is one of them) */

static int m_ipv6(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    size_t j = i, end = i;
    int groups = 0, dbl = 0, digits = 0, lead_dbl = 0;
    if (b[i] == ':') {
        if (!at(b, len, i + 1, ':'))
            return 0;
        dbl = lead_dbl = 1;
        j = end = i + 2;
    }
    for (;;) {
        size_t g0 = j;
        int dec = 0;
        while (j < len && j - g0 < 5 && (CLS[b[j]] & C_HEX))
            dec += isdig(b[j++]);
        size_t gl = j - g0;
        if (gl == 0)
            break;
        if (gl > 4)
            return 0;
        if (at(b, len, j, '.') && is(b, len, j + 1, C_DIGIT) && dec == (int)gl) {
            /* embedded IPv4 tail: ::ffff:10.0.0.1 */
            size_t e4;
            if (groups > 6 || !ipv4_parse(b, len, g0, &e4))
                return 0;
            groups += 2;
            digits++;
            end = e4;
            break;
        }
        groups++;
        digits += dec;
        end = j;
        if (groups > 8)
            return 0;
        if (at(b, len, j, ':') && at(b, len, j + 1, ':')) {
            if (dbl)
                return 0;
            dbl = 1;
            j += 2;
            end = j;
            continue;
        }
        if (at(b, len, j, ':') && is(b, len, j + 1, C_HEX)) {
            j++;
            continue;
        }
        break;
    }
    if (groups == 0 || (dbl ? groups > 7 : groups != 8) || digits == 0)
        return 0;
    if (groups < 2 && !lead_dbl) /* "fe80::" alone is a prefix, "1::" a typo */
        return 0;
    if (is(b, len, end, C_ALNUM) || (at(b, len, end, '.') && is(b, len, end + 1, C_DIGIT)))
        return 0;
    return set_span(m, i, end, PII_IPV6);
}

/* ---------------------------------------------------------------------------------------------
 * email (RFC 5322 practical subset: dot-atom local part of [A-Za-z0-9._%+-], hostname labels,
 * an alphabetic TLD of two or more letters or an xn-- label) */

static int m_email(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    size_t j = i;
    while (j < len && j - i < 80 && (CLS[b[j]] & C_LOCAL))
        j++;
    if (!at(b, len, j, '@'))
        return 0;
    size_t s = i;
    while (s < j && !(CLS[b[s]] & C_ALNUM)) /* "...john@" / "--john@": start at the name */
        s++;
    if (s == j || j - s > 64 || b[j - 1] == '.')
        return 0;
    for (size_t k = s; k + 1 < j; k++)
        if (b[k] == '.' && b[k + 1] == '.')
            return 0;
    size_t d0 = j + 1, k = d0, good = 0, tld0 = 0;
    int labels = 0;
    for (;;) {
        size_t l0 = k;
        while (k < len && k - d0 < 254 && (CLS[b[k]] & C_DOMAIN))
            k++;
        size_t ll = k - l0;
        if (ll == 0 || ll > 63 || b[l0] == '-' || b[k - 1] == '-' || k - d0 > 253)
            break;
        labels++;
        tld0 = l0;
        good = k;
        if (at(b, len, k, '.') && is(b, len, k + 1, C_ALNUM)) {
            k++;
            continue;
        }
        break;
    }
    if (labels < 2)
        return 0;
    int tld_ok = good - tld0 >= 2;
    if (good - tld0 >= 4 && STARTS(b, len, tld0, "xn--"))
        tld_ok = 1;
    else
        for (size_t q = tld0; q < good; q++)
            tld_ok &= !!(CLS[b[q]] & C_ALPHA);
    if (!tld_ok)
        return 0;
    if (good < len && ((CLS[b[good]] & (C_ALNUM | C_DOMAIN)) || b[good] == '_' || b[good] == '@'))
        return 0;
    return set_span(m, s, good, PII_EMAIL);
}

/* ---------------------------------------------------------------------------------------------
 * IBAN: CCkk then the BBAN, compact or in groups of four split by single spaces */

static int m_iban(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    if (i + 4 > len || !(CLS[b[i + 1]] & C_UPPER) || !isdig(b[i + 2]) || !isdig(b[i + 3]))
        return 0;
    int want = iban_len(b[i], b[i + 1]);
    if (want == 0)
        return 0;
    uint8_t s[34];
    int n = 0, grouped = at(b, len, i + 4, ' ');
    size_t j = i;
    while (n < want && j < len) {
        uint8_t c = b[j];
        if (isdig(c) || (c >= 'A' && c <= 'Z')) {
            s[n++] = c;
            j++;
        } else if (grouped && c == ' ' && n % 4 == 0 && n > 0 && is(b, len, j + 1, C_ALNUM)) {
            j++;
        } else
            break;
    }
    if (n != want || is(b, len, j, C_ALNUM))
        return 0;
    return pii_iban_ok(s, (size_t)n) && set_span(m, i, j, PII_IBAN);
}

/* ---------------------------------------------------------------------------------------------
 * secrets */

/* run of bytes in the class set (or in extra) from j, at most maxn; returns its length */
static size_t run(const uint8_t *b, size_t len, size_t j, int cls, const char *extra,
                  size_t maxn) {
    size_t k = j;
    while (k < len && k - j < maxn && ((CLS[b[k]] & cls) || (extra && b[k] && strchr(extra, b[k]))))
        k++;
    return k - j;
}

/* at least one letter and one digit: real keys have both, words like "sk-learn-..." do not */
static int mixed(const uint8_t *b, size_t s, size_t e) {
    int d = 0, a = 0;
    for (size_t k = s; k < e; k++) {
        d |= isdig(b[k]);
        a |= !!(CLS[b[k]] & C_ALPHA);
    }
    return d && a;
}

/* AWS access key ids: AKIA (long-term) or ASIA (temporary), then 16 upper-case letters and
 * digits */
static int m_aws(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    if (!STARTS(b, len, i, "AKIA") && !STARTS(b, len, i, "ASIA"))
        return 0;
    size_t n = run(b, len, i + 4, C_UPPER | C_DIGIT, NULL, 17);
    if (n != 16 || is(b, len, i + 20, C_ALNUM))
        return 0;
    return set_span(m, i, i + 20, PII_SECRET);
}

/* sk-... (OpenAI/Anthropic style, 20+ chars after the prefix), sk_live_/sk_test_ (Stripe),
 * ghp_/gho_/ghu_/ghs_/ghr_ and github_pat_ (GitHub), xoxb-/xoxp-... (Slack) */
static int m_token(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    size_t body = 0, minn = 0;
    const char *extra = "_-";
    if (STARTS(b, len, i, "sk-"))
        body = i + 3, minn = 20;
    else if (STARTS(b, len, i, "sk_live_") || STARTS(b, len, i, "sk_test_") ||
             STARTS(b, len, i, "rk_live_"))
        body = i + 8, minn = 16;
    else if (STARTS(b, len, i, "github_pat_"))
        body = i + 11, minn = 22;
    else if (i + 4 <= len && b[i] == 'g' && b[i + 1] == 'h' && strchr("pousr", b[i + 2]) &&
             b[i + 2] && b[i + 3] == '_')
        body = i + 4, minn = 36, extra = NULL;
    else if (i + 5 <= len && STARTS(b, len, i, "xox") && b[i + 3] && strchr("abprs", b[i + 3]) &&
             b[i + 4] == '-')
        body = i + 5, minn = 10, extra = "-";
    else
        return 0;
    size_t n = run(b, len, body, C_ALNUM, extra, 512);
    if (n < minn || n >= 512 || !mixed(b, body, body + n))
        return 0;
    return set_span(m, i, body + n, PII_SECRET);
}

/* "Bearer <token>" (HTTP Authorization): the token, 16+ chars of the RFC 6750 b64token set
 * with a letter and a digit among its first 64 */
static int m_bearer(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    if (!STARTS(b, len, i, "Bearer "))
        return 0;
    size_t s = i + 7, n = run(b, len, s, C_ALNUM, "-._~+/", 4096);
    while (s + n < len && b[s + n] == '=' && n < 4096)
        n++;
    if (n < 16 || n >= 4096 || !mixed(b, s, s + (n < 64 ? n : 64)))
        return 0;
    return set_span(m, s, s + n, PII_SECRET);
}

/* -----BEGIN [...] PRIVATE KEY----- ... -----END [...] PRIVATE KEY-----, the whole block. Without
 * its END line within reach, the header and the base64 lines that follow it. */
static int m_pem(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    if (!STARTS(b, len, i, "-----BEGIN "))
        return 0;
    size_t j = i + 11, lab = run(b, len, j, C_UPPER | C_DIGIT, " ", 48);
    j += lab;
    if (lab < 11 || !STARTS(b, len, j, "-----") || memcmp(b + j - 11, "PRIVATE KEY", 11) != 0)
        return 0;
    j += 5;
    size_t lim = len < i + PII_REACH ? len : i + PII_REACH;
    const uint8_t *e = memmem(b + j, lim - j, "-----END ", 9);
    if (e != NULL) {
        size_t k = (size_t)(e - b) + 9;
        k += run(b, lim, k, C_UPPER | C_DIGIT, " ", 48);
        if (STARTS(b, lim, k, "-----"))
            return set_span(m, i, k + 5, PII_SECRET);
    }
    size_t k = j; /* no END: the header and the key-looking lines after it */
    while (k < lim && (b[k] == '\n' || b[k] == '\r')) {
        size_t l0 = k + 1 + (b[k] == '\r' && at(b, lim, k + 1, '\n'));
        size_t n = run(b, lim, l0, C_ALNUM, "+/=:- ,", lim - l0);
        if (n == 0)
            break;
        k = l0 + n;
    }
    return set_span(m, i, k, PII_SECRET);
}

/* Keys whose value is a secret; `any` = also as the tail of a longer identifier
 * (DB_PASSWORD, userPasswd), otherwise only after a separator (db_pwd, api-token, X.secret). */
static const struct {
    const char *key;
    uint8_t n, any, minlen;
} SECRET_KEYS[] = {
    {"password", 8, 1, 4},     {"passwd", 6, 1, 4},      {"passphrase", 10, 1, 4},
    {"pass", 4, 0, 4},         {"pwd", 3, 0, 4},         {"secret", 6, 0, 8},
    {"token", 5, 0, 8},        {"apikey", 6, 1, 8},      {"api_key", 7, 1, 8},
    {"api-key", 7, 1, 8},      {"access_key", 10, 1, 8}, {"secret_key", 10, 1, 8},
    {"private_key", 11, 1, 8}, {"auth_key", 8, 1, 8},
};

/* bytes that end an unquoted value: URL and config separators, quotes, brackets */
static const uint8_t VALUE_STOP[256] = {
    ['&'] = 1, [';'] = 1, [','] = 1, ['"'] = 1, ['\''] = 1, ['<'] = 1,
    ['>'] = 1, [')'] = 1, [']'] = 1, ['}'] = 1, ['#'] = 1,
};

/* "key=value" / "key: value" / "key = 'value'" / "\"key\": \"value\"" at the '=' or ':' i */
static int m_assign(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    size_t k = i;
    while (k > 0 && i - k < 4 && (b[k - 1] == ' ' || b[k - 1] == '\t'))
        k--;
    if (k > 0 && (b[k - 1] == '"' || b[k - 1] == '\''))
        k--;
    size_t k1 = k;
    while (k > 0 && k1 - k < 48 && ((CLS[b[k - 1]] & C_ALNUM) || b[k - 1] == '_' ||
                                    b[k - 1] == '-' || b[k - 1] == '.'))
        k--;
    if (k1 == k || (k > 0 && (CLS[b[k - 1]] & C_ALNUM)))
        return 0;
    uint8_t last = lower(b[k1 - 1]); /* every key ends in one of these */
    if (last != 'd' && last != 'e' && last != 's' && last != 't' && last != 'n' && last != 'y')
        return 0;
    /* "key: value" in prose ("the pass: ...") is common; there only the unmistakable keys
     * count, unless the key is quoted as in JSON/YAML */
    int loose = b[i] == ':' && !(k1 < i && (b[k1] == '"' || b[k1] == '\''));
    int minlen = 0;
    for (size_t q = 0; q < sizeof(SECRET_KEYS) / sizeof(SECRET_KEYS[0]) && !minlen; q++) {
        size_t n = SECRET_KEYS[q].n;
        if (k1 - k < n || lower(b[k1 - 1]) != (uint8_t)SECRET_KEYS[q].key[n - 1])
            continue;
        size_t s = k1 - n, c = 0;
        while (c < n && lower(b[s + c]) == (uint8_t)SECRET_KEYS[q].key[c])
            c++;
        if (c < n)
            continue;
        int sep_ok = s == k || strchr("_-.", b[s - 1]) ||
                     ((CLS[b[s - 1]] & C_LOWER) && (CLS[b[s]] & C_UPPER)); /* dbPwd */
        if (SECRET_KEYS[q].any || (sep_ok && !loose))
            minlen = SECRET_KEYS[q].minlen;
    }
    if (!minlen)
        return 0;
    size_t j = i + 1;
    while (j < len && j - i < 5 && (b[j] == ' ' || b[j] == '\t'))
        j++;
    uint8_t q = (at(b, len, j, '"') || at(b, len, j, '\'')) ? b[j] : 0;
    size_t v0 = j + (q != 0), v = v0;
    if (q) {
        while (v < len && v - v0 < 256 && b[v] != q && b[v] != '\n')
            v++;
        if (!at(b, len, v, q))
            return 0;
    } else {
        while (v < len && v - v0 < 256 && b[v] > ' ' && b[v] < 0x80 &&
               !VALUE_STOP[b[v]]) /* >= 0x80: "hunter2，" in Chinese text */
            v++;
        while (v > v0 && (b[v - 1] == '.' || b[v - 1] == ':') && (v == len || b[v] <= ' '))
            v--; /* "password=hunter2." ends a sentence */
    }
    size_t n = v - v0;
    if (n < (size_t)minlen || n >= 256 || strchr("$%{<[/~", b[v0]))
        return 0; /* ${VAR}, %(x)s, {{x}}, <SECRET>, paths */
    static const char *NOT[] = {"null", "none", "true", "false", "undefined", "required"};
    for (size_t w = 0; w < sizeof(NOT) / sizeof(NOT[0]); w++) {
        size_t L = strlen(NOT[w]), c = 0;
        while (c < L && n == L && lower(b[v0 + c]) == (uint8_t)NOT[w][c])
            c++;
        if (n == L && c == L)
            return 0;
    }
    int same = 1;
    for (size_t c = v0; c < v; c++) {
        same &= b[c] == b[v0];
        if (b[c] == '(') /* a call in code, not a literal */
            return 0;
    }
    if (same)
        return 0;
    return set_span(m, v0, v, PII_SECRET);
}

/* scheme://user:password@host — the user:password part */
static int m_urlcred(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    if (!at(b, len, i + 1, '/') || !at(b, len, i + 2, '/'))
        return 0;
    size_t k = i;
    while (k > 0 && i - k < 16 && ((CLS[b[k - 1]] & C_ALNUM) || b[k - 1] == '+' || b[k - 1] == '.' ||
                                   b[k - 1] == '-'))
        k--;
    if (k == i || !(CLS[b[k]] & C_ALPHA))
        return 0;
    size_t u0 = i + 3, j = u0, colon = 0;
    while (j < len && j - u0 < 256 && b[j] > ' ' && !strchr("/@?#<>\"'", b[j])) {
        if (b[j] == ':' && !colon)
            colon = j;
        j++;
    }
    if (!at(b, len, j, '@') || !colon || colon == u0 || colon + 1 == j)
        return 0;
    if (!(is(b, len, j + 1, C_ALNUM) || at(b, len, j + 1, '[')))
        return 0;
    return set_span(m, u0, j, PII_SECRET);
}

/* ---------------------------------------------------------------------------------------------
 * dispatch */

#define T(x) (types & (1u << (x)))

static int try_digit(const uint8_t *b, size_t len, size_t i, unsigned types, pii_span *m) {
    if (!num_left_ok(b, i))
        return 0;
    /* an IPv6 group ends within 4 hex digits in a ':'; never from inside a failed one */
    if (T(PII_IPV6) && !(i > 0 && (b[i - 1] == ':' || b[i - 1] == '.'))) {
        size_t h = run(b, len, i, C_HEX, NULL, 5);
        if (h <= 4 && at(b, len, i + h, ':') && m_ipv6(b, len, i, m))
            return 1;
    }
    if (T(PII_CNID) && m_cnid(b, len, i, m))
        return 1;
    if (T(PII_CARD) && m_card(b, len, i, m))
        return 1;
    if (T(PII_SSN) && m_ssn(b, len, i, m))
        return 1;
    if (T(PII_IPV4) && m_ipv4(b, len, i, m))
        return 1;
    if (T(PII_PHONE) && (m_cn_mobile(b, len, i, m) || m_nanp(b, len, i, 0, m)))
        return 1;
    return 0;
}

/* a word (maximal alphanumeric run b[i..we), followed by t) that starts with a letter: each
 * recognizer is only tried when the word's length and terminator allow it, which keeps prose
 * at a few compares per word */
static int try_alpha(const uint8_t *b, size_t len, size_t i, size_t we, unsigned types,
                     pii_span *m) {
    uint8_t c = b[i], t = we < len ? b[we] : 0;
    size_t wl = we - i;
    if (T(PII_SECRET)) {
        if (c == 'A' && wl == 20 && m_aws(b, len, i, m))
            return 1;
        if (((c == 's' && (t == '-' || t == '_')) || ((c == 'r' || c == 'g') && t == '_') ||
             (c == 'x' && t == '-')) &&
            m_token(b, len, i, m))
            return 1;
        if (c == 'B' && wl == 6 && t == ' ' && m_bearer(b, len, i, m))
            return 1;
    }
    if (T(PII_IBAN) && (CLS[c] & C_UPPER) && (wl >= 15 || (wl == 4 && t == ' ')) &&
        m_iban(b, len, i, m))
        return 1;
    if (T(PII_IPV6) && (CLS[c] & C_HEX) && wl <= 4 && t == ':' &&
        !(i > 0 && (b[i - 1] == ':' || b[i - 1] == '.')) && m_ipv6(b, len, i, m))
        return 1;
    return 0;
}

/* a word b[i..we) after a non-alphanumeric byte */
static int try_word(const uint8_t *b, size_t len, size_t i, size_t we, unsigned types,
                    pii_span *m) {
    uint8_t t = we < len ? b[we] : 0;
    if (T(PII_EMAIL) && (t == '@' || (CLS[t] & C_LOCAL)) && !(i > 0 && (CLS[b[i - 1]] & C_LOCAL)) &&
        m_email(b, len, i, m))
        return 1;
    if (CLS[b[i]] & C_DIGIT)
        return try_digit(b, len, i, types, m);
    return try_alpha(b, len, i, we, types, m);
}

/* a non-alphanumeric trigger byte */
static int try_punct(const uint8_t *b, size_t len, size_t i, unsigned types, pii_span *m) {
    uint8_t c = b[i], k = CLS[c], pk = i > 0 ? CLS[b[i - 1]] : 0;
    if (T(PII_EMAIL) && (k & C_LOCAL) && !(pk & C_LOCAL) && m_email(b, len, i, m))
        return 1;
    switch (c) {
    case '+':
        return T(PII_PHONE) && !(pk & C_ALNUM) && is(b, len, i + 1, C_DIGIT) && m_e164(b, len, i, m);
    case '(':
        if (!T(PII_PHONE) || (pk & C_ALNUM))
            return 0;
        if (at(b, len, i + 1, '+'))
            return m_e164(b, len, i, m);
        return is(b, len, i + 1, C_DIGIT) && m_nanp(b, len, i, 1, m);
    case ':':
        if (at(b, len, i + 1, ':'))
            return T(PII_IPV6) && !(pk & C_ALNUM) && !(i > 0 && b[i - 1] == ':') &&
                   m_ipv6(b, len, i, m);
        if (!T(PII_SECRET))
            return 0;
        if (at(b, len, i + 1, '/'))
            return m_urlcred(b, len, i, m);
        return m_assign(b, len, i, m);
    case '=':
        return T(PII_SECRET) && m_assign(b, len, i, m);
    case '-':
        return T(PII_SECRET) && !(i > 0 && b[i - 1] == '-') && m_pem(b, len, i, m);
    }
    return 0;
}

/* The exact scan: try every trigger in [pos, hi). */
int pii_next_exact(const uint8_t *b, size_t len, size_t pos, size_t hi, unsigned types,
                   pii_span *m) {
    size_t i = pos;
    while (i < hi) {
        uint8_t k = CLS[b[i]];
        if (!(k & C_TRIG)) {
            i++;
            continue;
        }
        if (k & C_ALNUM) {
            /* a word: nothing starts inside one (every recognizer wants a non-alphanumeric byte
             * before it), so try its start, if it is one, and skip to its end */
            size_t we = i + 1;
            while (we < len && (CLS[b[we]] & C_ALNUM))
                we++;
            if (!(i > 0 && (CLS[b[i - 1]] & C_ALNUM)) && try_word(b, len, i, we, types, m))
                return 1;
            i = we;
            continue;
        }
        if (try_punct(b, len, i, types, m))
            return 1;
        i++;
    }
    return 0;
}

/* The prefilter. Every match needs an "anchor" byte a little after its trigger: the '@' of an
 * email (at most AT_BACK = 80 bytes after the local part starts), or one of these at most
 * SMALL_BACK = 6 bytes after it: a digit (numbers; IBAN's check digits 2 after its start; the
 * "+CC" and "(+86)" prefixes), ':' (IPv6 groups are <= 4 hex digits; URL credentials and
 * "key: value" trigger on it), '=', '-' (PEM, sk-, xoxb-), '_' (sk_live_, ghp_, github_pat_ at
 * most 6 in), and the starts of "AKIA"/"ASIA" and "Bearer " themselves. So only the bytes in [q - back, q] of each
 * anchor q need the exact scan; prose has few anchors, and the rest of its bytes pass one
 * predictable table test each. The windows are taken in order of their starts (the nearest '@'
 * competes with the next small anchor), so the first match found is the leftmost, exactly as
 * pii_next_exact would find it (tests/test_pii.c compares the two). */
#define SMALL_BACK 6
#define AT_BACK 80
static const uint8_t ANCHOR[256] = {
    ['0' ... '9'] = 1, [':'] = 1, ['='] = 1, ['-'] = 1, ['_'] = 1,
    ['A'] = 2, ['B'] = 2, /* only as the start of AKIA / ASIA / "Bearer " */
};

/* next anchor at or after q, or lim */
static inline size_t next_anchor(const uint8_t *b, size_t len, size_t q, size_t lim) {
    for (;; q++) {
        while (q < lim && !ANCHOR[b[q]])
            q++;
        if (q >= lim || ANCHOR[b[q]] == 1)
            return q;
        if (b[q] == 'A' ? (STARTS(b, len, q, "AKIA") || STARTS(b, len, q, "ASIA"))
                        : STARTS(b, len, q, "Bearer "))
            return q;
    }
}

int pii_next(const uint8_t *b, size_t len, size_t pos, size_t hi, unsigned types, pii_span *m) {
    /* every trigger below `done` that could match has been tried */
    size_t done = pos;
    size_t lim_s = hi + SMALL_BACK < len ? hi + SMALL_BACK : len;
    size_t lim_a = hi + AT_BACK < len ? hi + AT_BACK : len;
    size_t q = done;
    size_t at = SIZE_MAX, at_seen = done; /* no '@' in [done, at_seen) other than at */
    while (done < hi) {
        if (q < done)
            q = done;
        q = next_anchor(b, len, q, lim_s);
        /* an '@' matters now only if its window starts no later than q's */
        size_t need = q < lim_s ? q + (AT_BACK - SMALL_BACK) + 1 : lim_a;
        if (need > lim_a)
            need = lim_a;
        if (at != SIZE_MAX && at < done)
            at = SIZE_MAX;
        if (at == SIZE_MAX && at_seen < need) {
            size_t from = at_seen > done ? at_seen : done;
            const uint8_t *p = from < need ? memchr(b + from, '@', need - from) : NULL;
            at = p ? (size_t)(p - b) : SIZE_MAX;
            at_seen = p ? at + 1 : need;
        }
        if (q >= lim_s && at == SIZE_MAX)
            return 0;
        size_t ws = q < lim_s ? (q > done + SMALL_BACK ? q - SMALL_BACK : done) : SIZE_MAX;
        size_t wa = at != SIZE_MAX ? (at > done + AT_BACK ? at - AT_BACK : done) : SIZE_MAX;
        size_t x = wa <= ws ? wa : ws, y = wa <= ws ? at + 1 : q + 1;
        if (y > hi)
            y = hi;
        if (x >= y)
            return 0; /* the next window starts at or past hi */
        if (pii_next_exact(b, len, x, y, types, m))
            return 1;
        done = y;
    }
    return 0;
}
