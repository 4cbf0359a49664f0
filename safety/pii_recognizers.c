/*
 * safety/pii_recognizers.c — the PII scan: the byte classes, the email and IBAN recognizers, the
 * dispatch of each trigger byte to the recognizers that can start there, and the anchor
 * prefilter that lets prose through at a table test per byte. The recognizers of numbers are in
 * safety/pii_numbers.c, those of secrets in safety/pii_secrets.c (shared: safety/pii_scan.h).
 * Each recognizer validates beyond the shape (Luhn and IIN ranges for cards, mod-97 for IBANs,
 * the MOD 11-2 check digit and birth date of PRC resident IDs, octet ranges, the SSN allocation
 * rules, NANP area/exchange rules).
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
#include <string.h>

#include "safety/pii_scan.h"

/* ---------------------------------------------------------------------------------------------
 * byte classes and shared helpers */

const uint8_t pii_cls[256] = {
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

/* run of bytes in the class set (or in extra) from j, at most maxn; returns its length */
size_t pii_run(const uint8_t *b, size_t len, size_t j, int cls, const char *extra,
                  size_t maxn) {
    size_t k = j;
    while (k < len && k - j < maxn && ((CLS[b[k]] & cls) || (extra && b[k] && strchr(extra, b[k]))))
        k++;
    return k - j;
}

/* case-insensitive: does b[s..e) contain the lower-case word w? */
int pii_has_word(const uint8_t *b, size_t s, size_t e, const char *w) {
    size_t n = strlen(w);
    for (size_t k = s; k + n <= e; k++) {
        size_t c = 0;
        while (c < n && lower(b[k + c]) == (uint8_t)w[c])
            c++;
        if (c == n)
            return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * email (RFC 5322 practical subset: dot-atom local part of [A-Za-z0-9._%+-], hostname labels,
 * an alphabetic TLD of two or more letters or an xn-- label) */

/* a Latin letter with a diacritic (U+00C0..U+017F: UTF-8 C3..C5 + continuation) at b[j] */
static inline int latin2(const uint8_t *b, size_t len, size_t j) {
    return j + 1 < len && b[j] >= 0xC3 && b[j] <= 0xC5 && (b[j + 1] & 0xC0) == 0x80;
}

static int m_email(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    size_t j = i;
    while (j < len && j - i < 80 && ((CLS[b[j]] & C_LOCAL) || latin2(b, len, j)))
        j += latin2(b, len, j) ? 2 : 1; /* "renée@" is one local part (RFC 6531) */
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
 * dispatch */

#define T(x) (types & (1u << (x)))

static int try_digit(const uint8_t *b, size_t len, size_t i, unsigned types, pii_span *m) {
    if (!num_left_ok(b, i))
        return 0;
    /* an IPv6 group ends within 4 hex digits in a ':'; never from inside a failed one */
    if (T(PII_IPV6) && !(i > 0 && (b[i - 1] == ':' || b[i - 1] == '.'))) {
        size_t h = pii_run(b, len, i, C_HEX, NULL, 5);
        if (h <= 4 && at(b, len, i + h, ':') && pii_m_ipv6(b, len, i, m))
            return 1;
    }
    if (T(PII_CNID) && pii_m_cnid(b, len, i, m))
        return 1;
    if (T(PII_CARD) && pii_m_card(b, len, i, m))
        return 1;
    if (T(PII_SSN) && pii_m_ssn(b, len, i, m))
        return 1;
    if (T(PII_IPV4) && pii_m_ipv4(b, len, i, m))
        return 1;
    if (T(PII_PHONE) && (pii_m_cn_mobile(b, len, i, m) || pii_m_nanp(b, len, i, 0, m)))
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
        if (c == 'A' && wl == 20 && pii_m_aws(b, len, i, m))
            return 1;
        if (((c == 's' && (t == '-' || t == '_')) || ((c == 'r' || c == 'g') && t == '_') ||
             (c == 'x' && t == '-')) &&
            pii_m_token(b, len, i, m))
            return 1;
        if (c == 'B' && wl == 6 && t == ' ' && pii_m_bearer(b, len, i, m))
            return 1;
    }
    if (T(PII_IBAN) && (CLS[c] & C_UPPER) && (wl >= 15 || (wl == 4 && t == ' ')) &&
        m_iban(b, len, i, m))
        return 1;
    if (T(PII_IPV6) && (CLS[c] & C_HEX) && wl <= 4 && t == ':' &&
        !(i > 0 && (b[i - 1] == ':' || b[i - 1] == '.')) && pii_m_ipv6(b, len, i, m))
        return 1;
    return 0;
}

/* a word b[i..we) after a non-alphanumeric byte */
static int try_word(const uint8_t *b, size_t len, size_t i, size_t we, unsigned types,
                    pii_span *m) {
    uint8_t t = we < len ? b[we] : 0;
    if (T(PII_EMAIL) && (t == '@' || (CLS[t] & C_LOCAL) || latin2(b, len, we)) &&
        !(i > 0 && (CLS[b[i - 1]] & C_LOCAL)) &&
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
    case '+': /* not inside version strings: "1:14~++20220123085548+413684" */
        return T(PII_PHONE) && !(pk & C_ALNUM) && !(i > 0 && strchr("+~._-", b[i - 1]) && b[i - 1]) &&
               is(b, len, i + 1, C_DIGIT) && pii_m_e164(b, len, i, m);
    case '(':
        if (!T(PII_PHONE) || (pk & C_ALNUM))
            return 0;
        if (at(b, len, i + 1, '+'))
            return pii_m_e164(b, len, i, m);
        return is(b, len, i + 1, C_DIGIT) && pii_m_nanp(b, len, i, 1, m);
    case ':':
        if (at(b, len, i + 1, ':'))
            return T(PII_IPV6) && !(pk & C_ALNUM) && !(i > 0 && b[i - 1] == ':') &&
                   pii_m_ipv6(b, len, i, m);
        if (!T(PII_SECRET))
            return 0;
        if (at(b, len, i + 1, '/'))
            return pii_m_urlcred(b, len, i, m);
        return pii_m_assign(b, len, i, m);
    case '=':
        return T(PII_SECRET) && pii_m_assign(b, len, i, m);
    case '-':
        return T(PII_SECRET) && !(i > 0 && b[i - 1] == '-') && pii_m_pem(b, len, i, m);
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
