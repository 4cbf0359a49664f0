/*
 * safety/pii.c — the PII scrubber's engine: the three modes (mask, keyed hash, drop-line), the
 * bounded-memory push scrubber that the file and in-memory entry points share, type names and
 * the counts-only JSON report. The recognizers live in safety/pii_recognizers.c.
 *
 * Streaming with carry-over. The scrubber owns one buffer. Bytes before `scan` are decided
 * (written or dropped), bytes after it are not. A recognizer triggered at i reads at most
 * PII_REACH bytes ahead and PII_LOOKBEHIND bytes back (safety/pii_impl.h), so while more input
 * may come, only triggers below len - PII_MAX_SPAN are decided; the rest waits in the buffer
 * for the next read. Compaction keeps PII_LOOKBEHIND bytes of decided text in front of `scan`.
 * The result is byte-for-byte the output of scrubbing the whole input at once (the tests hold
 * it to that with buffers that cut every match), in memory bounded by the buffer whatever the
 * input: a 2 GB file, a 100 MB line, NUL bytes and invalid UTF-8 are only bytes.
 *
 * Drop-line mode holds the current line (up to PII_LINE_MAX bytes) until its '\n' decides it.
 * A longer line is written out as it comes and any later match in it is masked instead (counted
 * as long_lines_masked): dropping it would need the whole line in memory.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>

#include "safety/pii_impl.h"

#define PII_DEFAULT_BUF ((size_t)(4u << 20) + PII_MAX_SPAN)

static const char *NAMES[PII_NTYPES] = {"email", "phone", "card", "iban",  "ipv4",
                                        "ipv6",  "ssn",   "cnid", "secret"};
static const char *PLACEHOLDERS[PII_NTYPES] = {"<EMAIL>", "<PHONE>", "<CARD>", "<IBAN>",
                                               "<IPV4>",  "<IPV6>",  "<SSN>",  "<CNID>",
                                               "<SECRET>"};

const char *pii_type_name(pii_type t) { return (unsigned)t < PII_NTYPES ? NAMES[t] : NULL; }

const char *pii_type_placeholder(pii_type t) {
    return (unsigned)t < PII_NTYPES ? PLACEHOLDERS[t] : NULL;
}

unsigned pii_types_parse(const char *csv, char *err, size_t errlen) {
    unsigned mask = 0;
    const char *p = csv ? csv : "";
    for (;;) {
        while (*p == ' ')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > p && t[-1] == ' ')
            t--;
        size_t n = (size_t)(t - p);
        unsigned bit = 0;
        if (n == 3 && !strncmp(p, "all", 3))
            bit = PII_ALL;
        else if (n == 2 && !strncmp(p, "ip", 2))
            bit = (1u << PII_IPV4) | (1u << PII_IPV6);
        for (int k = 0; k < PII_NTYPES && !bit; k++)
            if (strlen(NAMES[k]) == n && !strncmp(p, NAMES[k], n))
                bit = 1u << k;
        if (!bit) {
            if (err && errlen)
                snprintf(err, errlen,
                         "unknown PII type '%.*s' (known: all, ip, email, phone, card, iban, "
                         "ipv4, ipv6, ssn, cnid, secret)",
                         (int)(n > 40 ? 40 : n), p);
            return 0;
        }
        mask |= bit;
        if (*e == '\0')
            return mask;
        p = e + 1;
    }
}

int pii_mode_parse(const char *s, pii_mode *mode) {
    if (s && !strcmp(s, "mask"))
        *mode = PII_MASK;
    else if (s && !strcmp(s, "hash"))
        *mode = PII_HASH;
    else if (s && (!strcmp(s, "drop-line") || !strcmp(s, "drop_line")))
        *mode = PII_DROP_LINE;
    else
        return -1;
    return 0;
}

const char *pii_mode_name(pii_mode mode) {
    return mode == PII_HASH ? "hash" : mode == PII_DROP_LINE ? "drop-line" : "mask";
}

size_t pii_find(const char *in, size_t n, unsigned types, pii_span *spans, size_t max_spans) {
    const uint8_t *b = (const uint8_t *)in;
    size_t pos = 0, count = 0;
    pii_span m;
    while (pos < n && pii_next(b, n, pos, n, types & PII_ALL, &m)) {
        if (count < max_spans)
            spans[count] = m;
        count++;
        pos = m.end > pos ? m.end : pos + 1;
    }
    return count;
}

/* ---------------------------------------------------------------------------------------------
 * the scrubber */

struct pii_scrubber {
    pii_mode mode;
    unsigned types;
    uint8_t *key;
    size_t keylen;
    EVP_MAC *mac;         /* HMAC, fetched once */
    EVP_MAC_CTX *mac_ctx; /* keyed with key; re-initialised per value with the same key */
    pii_write_fn write;
    void *ctx;
    int failed;
    uint8_t *buf; /* [0, len): context, then undecided bytes from scan on */
    size_t cap, len, scan;
    uint8_t *line; /* drop-line: the current line so far (clean part) */
    size_t line_len;
    int line_dirty; /* the current line holds a match: drop it */
    int line_long;  /* the current line outgrew PII_LINE_MAX and is being written as it comes */
    int line_long_counted;
    pii_counts c;
};

static void out(pii_scrubber *s, const void *p, size_t n) {
    if (n == 0 || s->failed)
        return;
    if (s->write(s->ctx, p, n) != 0)
        s->failed = 1;
    else
        s->c.bytes_out += n;
}

/* "<TYPE:8 hex>" from HMAC-SHA256(key, "name:" + canonical form): numbers without separators
 * (and upper-case, for IBAN / the X of a PRC ID), emails lower-case, the rest as written. */
static void out_hash(pii_scrubber *s, const uint8_t *p, size_t n, pii_type t) {
    size_t nl = strlen(NAMES[t]);
    uint8_t stackbuf[512];
    uint8_t *msg = n + nl + 1 <= sizeof(stackbuf) ? stackbuf : malloc(n + nl + 1);
    if (msg == NULL) {
        s->failed = 1;
        return;
    }
    memcpy(msg, NAMES[t], nl);
    msg[nl] = ':';
    size_t k = nl + 1;
    int numeric = t == PII_PHONE || t == PII_CARD || t == PII_IBAN || t == PII_SSN || t == PII_CNID;
    for (size_t q = 0; q < n; q++) {
        uint8_t ch = p[q];
        if (numeric) {
            if (ch >= 'a' && ch <= 'z')
                ch -= 32;
            if ((ch >= '0' && ch <= '9') || (ch >= 'A' && ch <= 'Z'))
                msg[k++] = ch;
        } else
            msg[k++] = (t == PII_EMAIL || t == PII_IPV6) && ch >= 'A' && ch <= 'Z' ? ch + 32 : ch;
    }
    uint8_t mac[EVP_MAX_MD_SIZE];
    size_t maclen = 0;
    int ok = EVP_MAC_init(s->mac_ctx, NULL, 0, NULL) == 1 && /* NULL key: the same key again */
             EVP_MAC_update(s->mac_ctx, msg, k) == 1 &&
             EVP_MAC_final(s->mac_ctx, mac, &maclen, sizeof(mac)) == 1 && maclen >= 4;
    if (msg != stackbuf)
        free(msg);
    if (!ok) {
        s->failed = 1;
        return;
    }
    char tok[48];
    const char *ph = PLACEHOLDERS[t];
    int L = snprintf(tok, sizeof(tok), "<%.*s:%02x%02x%02x%02x>", (int)strlen(ph) - 2, ph + 1,
                     mac[0], mac[1], mac[2], mac[3]);
    out(s, tok, (size_t)L);
}

/* drop-line: end of the current line (its '\n' is at the end of the text just handed over) */
static void line_end(pii_scrubber *s) {
    if (s->line_dirty)
        s->c.lines_dropped++;
    else if (!s->line_long)
        out(s, s->line, s->line_len);
    s->line_len = 0;
    s->line_dirty = s->line_long = s->line_long_counted = 0;
}

/* undecided text p[0..n) that holds no match */
static void emit_text(pii_scrubber *s, const uint8_t *p, size_t n) {
    if (s->mode != PII_DROP_LINE) {
        out(s, p, n);
        return;
    }
    while (n > 0) {
        const uint8_t *nl = memchr(p, '\n', n);
        size_t seg = nl ? (size_t)(nl - p) + 1 : n;
        if (s->line_long)
            out(s, p, seg);
        else if (!s->line_dirty) {
            if (s->line_len + seg > PII_LINE_MAX) { /* too long to hold: write it as it comes */
                out(s, s->line, s->line_len);
                out(s, p, seg);
                s->line_len = 0;
                s->line_long = 1;
            } else {
                memcpy(s->line + s->line_len, p, seg);
                s->line_len += seg;
            }
        }
        if (nl)
            line_end(s);
        p += seg;
        n -= seg;
    }
}

static void emit_match(pii_scrubber *s, const uint8_t *p, const pii_span *m) {
    size_t n = m->end - m->start;
    s->c.found[m->type]++;
    if (s->mode == PII_HASH) {
        out_hash(s, p, n, m->type);
    } else if (s->mode == PII_MASK) {
        out(s, PLACEHOLDERS[m->type], strlen(PLACEHOLDERS[m->type]));
    } else if (s->line_long) {
        out(s, PLACEHOLDERS[m->type], strlen(PLACEHOLDERS[m->type]));
        if (!s->line_long_counted)
            s->c.long_lines_masked++;
        s->line_long_counted = 1;
    } else {
        s->line_dirty = 1;
        s->line_len = 0;
        for (size_t q = 0; q < n; q++) /* a PEM block: its inner lines go with it */
            s->c.lines_dropped += p[q] == '\n';
    }
}

/* Decide every trigger in [scan, hi) of buf[0..len): write text and replacements. Returns the new
 * scan position (>= hi; a match may end past hi). */
static size_t decide(pii_scrubber *s, const uint8_t *buf, size_t len, size_t scan, size_t hi) {
    pii_span m;
    while (scan < hi && !s->failed) {
        if (!pii_next(buf, len, scan, hi, s->types, &m)) {
            emit_text(s, buf + scan, hi - scan);
            return hi;
        }
        emit_text(s, buf + scan, m.start - scan);
        emit_match(s, buf + m.start, &m);
        scan = m.end;
    }
    return scan;
}

/* Decide every trigger that has its full reach in the buffer (all of them at eof); compact. */
static void process(pii_scrubber *s, int eof) {
    size_t hi = eof ? s->len : (s->len > PII_MAX_SPAN ? s->len - PII_MAX_SPAN : 0);
    s->scan = decide(s, s->buf, s->len, s->scan, hi);
    size_t keep = s->scan > PII_LOOKBEHIND ? s->scan - PII_LOOKBEHIND : 0;
    if (!eof && keep > 0) {
        memmove(s->buf, s->buf + keep, s->len - keep);
        s->len -= keep;
        s->scan -= keep;
    }
}

/* bufsize 0: no buffer (pii_scrub_text decides straight on the caller's bytes) */
static pii_scrubber *scrubber_new(pii_mode mode, unsigned types, const uint8_t *hash_key,
                                  size_t keylen, pii_write_fn write, void *ctx, size_t bufsize) {
    if ((mode == PII_HASH && (hash_key == NULL || keylen == 0)) || (types & PII_ALL) == 0 ||
        write == NULL || (unsigned)mode > PII_DROP_LINE) {
        errno = EINVAL;
        return NULL;
    }
    pii_scrubber *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->mode = mode;
    s->types = types & PII_ALL;
    s->write = write;
    s->ctx = ctx;
    s->cap = bufsize;
    s->buf = bufsize ? malloc(bufsize) : NULL;
    if (mode == PII_DROP_LINE)
        s->line = malloc(PII_LINE_MAX);
    if (mode == PII_HASH) {
        s->key = malloc(keylen);
        if (s->key)
            memcpy(s->key, hash_key, keylen);
        s->keylen = keylen;
        s->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
        s->mac_ctx = s->mac ? EVP_MAC_CTX_new(s->mac) : NULL;
        OSSL_PARAM params[] = {
            OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
            OSSL_PARAM_construct_end()};
        if (s->mac_ctx && s->key && EVP_MAC_init(s->mac_ctx, s->key, keylen, params) != 1) {
            EVP_MAC_CTX_free(s->mac_ctx);
            s->mac_ctx = NULL;
        }
    }
    if ((bufsize && s->buf == NULL) || (mode == PII_DROP_LINE && s->line == NULL) ||
        (mode == PII_HASH && (s->key == NULL || s->mac_ctx == NULL))) {
        pii_scrubber_free(s);
        errno = ENOMEM;
        return NULL;
    }
    return s;
}

pii_scrubber *pii_scrubber_new_sized(pii_mode mode, unsigned types, const uint8_t *hash_key,
                                     size_t keylen, pii_write_fn write, void *ctx,
                                     size_t bufsize) {
    if (bufsize < PII_MAX_SPAN + PII_LOOKBEHIND + 1) {
        errno = EINVAL;
        return NULL;
    }
    return scrubber_new(mode, types, hash_key, keylen, write, ctx, bufsize);
}

pii_scrubber *pii_scrubber_new(pii_mode mode, unsigned types, const uint8_t *hash_key,
                               size_t keylen, pii_write_fn write, void *ctx) {
    return pii_scrubber_new_sized(mode, types, hash_key, keylen, write, ctx, PII_DEFAULT_BUF);
}

int pii_scrubber_push(pii_scrubber *s, const char *p, size_t n) {
    s->c.bytes_in += n;
    while (n > 0 && !s->failed) {
        size_t room = s->cap - s->len;
        size_t k = n < room ? n : room;
        memcpy(s->buf + s->len, p, k);
        s->len += k;
        p += k;
        n -= k;
        if (s->len == s->cap)
            process(s, 0); /* frees all but PII_MAX_SPAN + PII_LOOKBEHIND bytes */
    }
    return s->failed ? -1 : 0;
}

int pii_scrubber_finish(pii_scrubber *s) {
    process(s, 1);
    if (s->mode == PII_DROP_LINE && (s->line_len > 0 || s->line_dirty || s->line_long))
        line_end(s); /* a last line without '\n' */
    return s->failed ? -1 : 0;
}

const pii_counts *pii_scrubber_counts(const pii_scrubber *s) { return &s->c; }

void pii_scrubber_free(pii_scrubber *s) {
    if (s == NULL)
        return;
    if (s->key) {
        memset(s->key, 0, s->keylen);
        free(s->key);
    }
    EVP_MAC_CTX_free(s->mac_ctx);
    EVP_MAC_free(s->mac);
    free(s->buf);
    free(s->line);
    free(s);
}

/* ---------------------------------------------------------------------------------------------
 * in-memory and FILE* entry points */

typedef struct {
    char *p;
    size_t n, cap;
} membuf;

static int mem_write(void *ctx, const char *p, size_t n) {
    membuf *m = ctx;
    if (m->n + n + 1 > m->cap) {
        size_t cap = m->cap ? m->cap : 256;
        while (m->n + n + 1 > cap)
            cap *= 2;
        char *q = realloc(m->p, cap);
        if (q == NULL)
            return -1;
        m->p = q;
        m->cap = cap;
    }
    memcpy(m->p + m->n, p, n);
    m->n += n;
    return 0;
}

char *pii_scrub_text(const char *in, size_t n, pii_mode mode, unsigned types,
                     const uint8_t *hash_key, size_t keylen, pii_counts *counts, size_t *out_len) {
    membuf mb = {malloc(n + n / 8 + 64), 0, n + n / 8 + 64}; /* placeholders rarely grow text */
    if (mb.p == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pii_scrubber *s = scrubber_new(mode, types, hash_key, keylen, mem_write, &mb, 0);
    if (s == NULL) {
        free(mb.p);
        return NULL;
    }
    /* the whole input is the buffer at end of input: the same decisions as a stream, no copy */
    s->c.bytes_in = n;
    if (mem_write(&mb, "", 0) != 0) /* an output buffer even for empty output */
        s->failed = 1;
    decide(s, (const uint8_t *)in, n, 0, n);
    pii_scrubber_finish(s); /* drop-line: the last line; the (empty) buffer decides nothing */
    int failed = s->failed;
    if (counts)
        *counts = s->c;
    pii_scrubber_free(s);
    if (failed) {
        free(mb.p);
        errno = ENOMEM;
        return NULL;
    }
    mb.p[mb.n] = '\0';
    if (out_len)
        *out_len = mb.n;
    return mb.p;
}

/* ---------------------------------------------------------------------------------------------
 * report */

char *pii_report_json(const pii_counts *c, pii_mode mode, unsigned types, double seconds) {
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    cJSON_AddStringToObject(o, "mode", pii_mode_name(mode));
    cJSON *ts = cJSON_AddArrayToObject(o, "types");
    uint64_t total = 0;
    for (int t = 0; t < PII_NTYPES; t++) {
        if (types & (1u << t))
            cJSON_AddItemToArray(ts, cJSON_CreateString(NAMES[t]));
        total += c->found[t];
    }
    cJSON_AddNumberToObject(o, "bytes_in", (double)c->bytes_in);
    cJSON_AddNumberToObject(o, "bytes_out", (double)c->bytes_out);
    cJSON_AddNumberToObject(o, "lines_dropped", (double)c->lines_dropped);
    cJSON_AddNumberToObject(o, "long_lines_masked", (double)c->long_lines_masked);
    cJSON_AddNumberToObject(o, "total", (double)total);
    cJSON *cs = cJSON_AddObjectToObject(o, "counts");
    for (int t = 0; t < PII_NTYPES; t++)
        if (types & (1u << t))
            cJSON_AddNumberToObject(cs, NAMES[t], (double)c->found[t]);
    if (seconds >= 0) {
        cJSON_AddNumberToObject(o, "seconds", seconds);
        cJSON_AddNumberToObject(o, "mb_per_s",
                                seconds > 0 ? (double)c->bytes_in / 1e6 / seconds : 0.0);
    }
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    return txt;
}

int pii_key_load(const char *path, uint8_t **key, size_t *keylen, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        snprintf(err, errlen, "cannot open hash key file '%s': %s", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = malloc(4099);
    size_t n = buf ? fread(buf, 1, 4099, f) : 0;
    int bad = buf == NULL || ferror(f);
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "cannot read hash key file '%s'", path);
        free(buf);
        return -1;
    }
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    if (n == 0 || n > 4096) {
        snprintf(err, errlen, "hash key file '%s' is %s (1..4096 bytes expected)", path,
                 n == 0 ? "empty" : "too long");
        memset(buf, 0, 4099);
        free(buf);
        return -1;
    }
    *key = buf;
    *keylen = n;
    return 0;
}
