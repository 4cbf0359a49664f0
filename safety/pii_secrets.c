/*
 * safety/pii_secrets.c — the recognizers of secrets: AWS access key ids, API tokens (sk-,
 * sk_live_, ghp_, github_pat_, xoxb-), Bearer tokens, PEM private key blocks, password=/token=
 * assignments in URLs, configs and JSON (with the rules that tell a literal from code), and the
 * user:password of URLs. Everything found here is reported as PII_SECRET.
 */
#define _GNU_SOURCE /* memmem */
#include <string.h>

#include "safety/pii_scan.h"

/* ---------------------------------------------------------------------------------------------
 * secrets */


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
int pii_m_aws(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    if (!STARTS(b, len, i, "AKIA") && !STARTS(b, len, i, "ASIA"))
        return 0;
    size_t n = pii_run(b, len, i + 4, C_UPPER | C_DIGIT, NULL, 17);
    if (n != 16 || is(b, len, i + 20, C_ALNUM))
        return 0;
    return set_span(m, i, i + 20, PII_SECRET);
}

/* sk-... (OpenAI/Anthropic style, 20+ chars after the prefix), sk_live_/sk_test_ (Stripe),
 * ghp_/gho_/ghu_/ghs_/ghr_ and github_pat_ (GitHub), xoxb-/xoxp-... (Slack) */
int pii_m_token(const uint8_t *b, size_t len, size_t i, pii_span *m) {
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
    size_t n = pii_run(b, len, body, C_ALNUM, extra, 512);
    if (n < minn || n >= 512 || !mixed(b, body, body + n))
        return 0;
    return set_span(m, i, body + n, PII_SECRET);
}

/* "Bearer <token>" (HTTP Authorization): the token, 16+ chars of the RFC 6750 b64token set
 * with a letter and a digit among its first 64 */
int pii_m_bearer(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    if (!STARTS(b, len, i, "Bearer "))
        return 0;
    size_t s = i + 7, n = pii_run(b, len, s, C_ALNUM, "-._~+/", 4096);
    while (s + n < len && b[s + n] == '=' && n < 4096)
        n++;
    if (n < 16 || n >= 4096 || !mixed(b, s, s + (n < 64 ? n : 64)))
        return 0;
    return set_span(m, s, s + n, PII_SECRET);
}

/* -----BEGIN [...] PRIVATE KEY----- ... -----END [...] PRIVATE KEY-----, the whole block. Without
 * its END line within reach, the header and the base64 lines that follow it. */
int pii_m_pem(const uint8_t *b, size_t len, size_t i, pii_span *m) {
    if (!STARTS(b, len, i, "-----BEGIN "))
        return 0;
    size_t j = i + 11, lab = pii_run(b, len, j, C_UPPER | C_DIGIT, " ", 48);
    j += lab;
    if (lab < 11 || !STARTS(b, len, j, "-----") || memcmp(b + j - 11, "PRIVATE KEY", 11) != 0)
        return 0;
    j += 5;
    size_t lim = len < i + PII_REACH ? len : i + PII_REACH;
    const uint8_t *e = memmem(b + j, lim - j, "-----END ", 9);
    if (e != NULL) {
        size_t k = (size_t)(e - b) + 9;
        k += pii_run(b, lim, k, C_UPPER | C_DIGIT, " ", 48);
        if (STARTS(b, lim, k, "-----"))
            return set_span(m, i, k + 5, PII_SECRET);
    }
    size_t k = j; /* no END: the header and the key-looking lines after it */
    while (k < lim && (b[k] == '\n' || b[k] == '\r')) {
        size_t l0 = k + 1 + (b[k] == '\r' && at(b, lim, k + 1, '\n'));
        size_t n = pii_run(b, lim, l0, C_ALNUM, "+/=:- ,", lim - l0);
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
int pii_m_assign(const uint8_t *b, size_t len, size_t i, pii_span *m) {
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
    int same = 1, ident = !q && ((CLS[b[v0]] & C_ALPHA) || b[v0] == '_'), dots = 0;
    for (size_t c = v0; c < v; c++) {
        same &= b[c] == b[v0];
        if (!q && (b[c] == '(' || b[c] == '[')) /* a call or an index in code, not a literal */
            return 0;
        dots += b[c] == '.';
        ident &= (CLS[b[c]] & C_ALNUM) || b[c] == '_' || (b[c] == '.' && c + 1 < v && c > v0);
    }
    if (same || (ident && dots > 0)) /* "****", self.password, config.db.password */
        return 0;
    /* "token = nextchar", "x.password = credentials": in code, "key = word" with spaces around
     * '=' assigns a variable; a password there has a digit or a symbol ("password = hunter2") */
    int word = ident && !dots;
    for (size_t c = v0; word && c < v; c++)
        word = !isdig(b[c]);
    if (word && b[i] == '=' && i > 0 && b[i - 1] == ' ' && at(b, len, i + 1, ' '))
        return 0;
    for (size_t w = 0; !q && w < sizeof(SECRET_KEYS) / sizeof(SECRET_KEYS[0]); w++)
        if (n == SECRET_KEYS[w].n && pii_has_word(b, v0, v, SECRET_KEYS[w].key))
            return 0; /* "password = password", "password: password to use" */
    return set_span(m, v0, v, PII_SECRET);
}

/* scheme://user:password@host — the user:password part */
int pii_m_urlcred(const uint8_t *b, size_t len, size_t i, pii_span *m) {
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
