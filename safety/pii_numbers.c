/*
 * safety/pii_numbers.c — the recognizers of numbers: the validators (Luhn and IIN ranges, the GB
 * 11643 check digit and birth date, SSA and NANP rules, E.164 lengths), payment cards, US SSNs,
 * PRC resident IDs, IPv4 (with the "is it a version number?" context), phone numbers and IPv6.
 * A shape alone is never enough: each match passes its validation. See safety/pii_scan.h for the
 * shared helpers and docs/safety.md for what each accepts and rejects.
 */
#include <string.h>

#include "safety/pii_scan.h"

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

int pii_m_card(const uint8_t *b, size_t len, size_t i, pii_span *m) {
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

int pii_m_ssn(const uint8_t *b, size_t len, size_t i, pii_span *m) {
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

int pii_m_cnid(const uint8_t *b, size_t len, size_t i, pii_span *m) {
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


/* A dotted quad that reads as a version number, not an address: "version 1.2.3.4",
 * "Standards-Version to 4.5.1.0", "Policy 3.6.1.1", "ver. 1.2.3.4", "v 1.2.3.4", "bump to
 * 3.7.2.0", "updated to 2.4.1.0", "release 10.0.0.1", ">=1.15.7.2~", "2.8.0.3 patch" (Debian
 * changelogs were the test). Looks at most 40 bytes back and 8 ahead on the same line. */
static int reads_as_version(const uint8_t *b, size_t len, size_t i, size_t e) {
    size_t s = i;
    while (s > 0 && i - s < 40 && b[s - 1] != '\n')
        s--;
    if (pii_has_word(b, s, i, "version") || pii_has_word(b, s, i, "release") ||
        pii_has_word(b, s, i, "standard") || pii_has_word(b, s, i, "policy"))
        return 1;
    if ((i >= 2 && b[i - 1] == '=' && strchr("<>=!", b[i - 2]) && b[i - 2]) || at(b, len, e, '~') ||
        at(b, len, e, '+'))
        return 1; /* ">=1.15.7.2", "2.4.1.0~rc1", "1.2.3.4+dfsg" */
    static const char *WORDS[] = {"ver", "ver.", "v", "v.", "build", "rev", "to"};
    size_t k = i;
    while (k > 0 && i - k < 3 && (b[k - 1] == ' ' || b[k - 1] == ':'))
        k--;
    size_t w1 = k;
    while (k > 0 && w1 - k < 8 && ((CLS[b[k - 1]] & C_ALPHA) || b[k - 1] == '.'))
        k--;
    for (size_t q = 0; q < sizeof(WORDS) / sizeof(WORDS[0]); q++) {
        size_t n = strlen(WORDS[q]);
        if (w1 - k != n || (k > 0 && (CLS[b[k - 1]] & C_ALNUM)) || !pii_has_word(b, k, w1, WORDS[q]))
            continue;
        if (q + 1 < sizeof(WORDS) / sizeof(WORDS[0])) /* ver, v, build, rev */
            return 1;
        /* "to": only after bump / update(d) / upgrade(d) / standard */
        return pii_has_word(b, s, k, "bump") || pii_has_word(b, s, k, "update") ||
               pii_has_word(b, s, k, "upgrade") || pii_has_word(b, s, k, "standard");
    }
    size_t f = e; /* a word after: "2.8.0.3 patch" */
    while (f < len && f - e < 2 && b[f] == ' ')
        f++;
    size_t fe = f + 8 < len ? f + 8 : len;
    return f > e && (pii_has_word(b, f, fe, "patch") || pii_has_word(b, f, fe, "release") ||
                     pii_has_word(b, f, fe, "version"));
}

int pii_m_ipv4(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    size_t e;
    if (!ipv4_parse(b, len, i, &e) || !num_right_ok(b, len, e) || reads_as_version(b, len, i, e))
        return 0;
    return set_span(m, i, e, PII_IPV4);
}

/* PRC mobile without country code: 1[3-9]XXXXXXXXX, or 3-4-4 split by spaces or dashes */
int pii_m_cn_mobile(const uint8_t *b, size_t len, size_t i, pii_span *m) {
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
int pii_m_nanp(const uint8_t *b, size_t len, size_t i, int paren, pii_span *m) {
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
int pii_m_e164(const uint8_t *b, size_t len, size_t i, pii_span *m) {
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
        if (e164_ok(d, n) && num_right_ok(b, len, g.gend[k]) && !at(b, len, g.gend[k], '+') &&
            !at(b, len, g.gend[k], '~'))
            return set_span(m, i, g.gend[k], PII_PHONE);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * IPv6 (RFC 4291 section 2.2 text forms; RFC 5952 output is one of them) */

int pii_m_ipv6(const uint8_t *b, size_t len, size_t i, pii_span *m) {
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
    /* Python slices a[::2], a[1::2] look like tiny compressed addresses; of those only the
     * loopback ::1 is common as an address */
    size_t hexd = 0;
    for (size_t k = i; k < end; k++)
        hexd += b[k] != ':';
    if (dbl && hexd <= 2 && !(end - i == 3 && b[i] == ':' && b[i + 2] == '1'))
        return 0;
    if (is(b, len, end, C_ALNUM) || (at(b, len, end, '.') && is(b, len, end + 1, C_DIGIT)))
        return 0;
    return set_span(m, i, end, PII_IPV6);
}
