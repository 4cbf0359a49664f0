/*
 * objstore/s3.c — the S3 client's core: configuration (keys and AWS_* environment), one SigV4
 * request with retries (libcurl signs, we hash the body), the XML fields of S3's answers, and the
 * single-request operations: PUT, ranged GET, HEAD, LIST v2 with pagination, DELETE, bucket
 * creation. Multipart uploads and parallel downloads are objstore/s3_transfer.c.
 *
 * Why libcurl signs: CURLOPT_AWS_SIGV4 builds the canonical request from the method, path, query,
 * the headers we set and the value of our x-amz-content-sha256 header, so the signature covers
 * the body's real SHA-256 (not UNSIGNED-PAYLOAD). Its canonical query is the query as written,
 * so this file writes queries already canonical: keys sorted, values URI-encoded, "key=" for a
 * key without a value (SigV4, "Create a canonical request").
 */
#include "objstore/s3_impl.h" /* the module face objstore/s3.h, and its private part */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "core/timer.h"

/* ---- configuration ----------------------------------------------------------------------------- */

static void copy_env(char *dst, size_t n, const char *a, const char *b) {
    const char *v = getenv(a);
    if ((!v || !*v) && b) v = getenv(b);
    if (v && *v) snprintf(dst, n, "%s", v);
}

void s3_config_default(s3_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->region, sizeof cfg->region, "us-east-1");
    cfg->part_mb = 16;
    cfg->threads = 4;
    cfg->tries = 5;
    cfg->backoff_base_s = 0.2;
    cfg->backoff_cap_s = 5.0;
    cfg->connect_s = 5.0;
    cfg->stall_s = 10.0;
    cfg->list_page = 1000;
    copy_env(cfg->endpoint, sizeof cfg->endpoint, "AWS_ENDPOINT_URL", "MT_S3_ENDPOINT");
    copy_env(cfg->region, sizeof cfg->region, "AWS_REGION", "AWS_DEFAULT_REGION");
    copy_env(cfg->access_key, sizeof cfg->access_key, "AWS_ACCESS_KEY_ID", NULL);
    copy_env(cfg->secret_key, sizeof cfg->secret_key, "AWS_SECRET_ACCESS_KEY", NULL);
}

static int parse_num(const char *v, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) return -1;
    *out = x;
    return 0;
}

int s3_config_set(s3_config *cfg, const char *key, const char *value, char *err, size_t errlen) {
    struct { const char *name; char *s; size_t n; } strs[] = {
        {"s3_endpoint", cfg->endpoint, sizeof cfg->endpoint},
        {"s3_region", cfg->region, sizeof cfg->region},
        {"s3_access_key", cfg->access_key, sizeof cfg->access_key},
        {"s3_secret_key", cfg->secret_key, sizeof cfg->secret_key},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (!strcmp(key, strs[i].name)) {
            if (strlen(value) >= strs[i].n) {
                snprintf(err, errlen, "%s: value longer than %zu characters", key, strs[i].n - 1);
                return -1;
            }
            snprintf(strs[i].s, strs[i].n, "%s", value);
            return 0;
        }
    struct { const char *name; double lo, hi; int *i; double *d; } nums[] = {
        {"s3_part_mb", 5, 5120, &cfg->part_mb, NULL},
        {"s3_threads", 1, 64, &cfg->threads, NULL},
        {"s3_tries", 1, 100, &cfg->tries, NULL},
        {"s3_stall_s", 0.1, 3600, NULL, &cfg->stall_s},
        {"s3_max_mb_s", 0, 1e6, NULL, &cfg->max_mb_s},
        {"s3_get_mb_s", 0, 1e6, NULL, &cfg->max_get_mb_s},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        if (!strcmp(key, nums[i].name)) {
            double x;
            if (parse_num(value, nums[i].lo, nums[i].hi, &x) ||
                (nums[i].i && x != (int)x)) {
                snprintf(err, errlen, "%s = '%s': want a %s in [%g, %g]", key, value,
                         nums[i].i ? "whole number" : "number", nums[i].lo, nums[i].hi);
                return -1;
            }
            if (nums[i].i) *nums[i].i = (int)x;
            else *nums[i].d = x;
            return 0;
        }
    snprintf(err, errlen, "unknown object-store key '%s'", key);
    return -1;
}

int s3_client_init(s3_client *c, const s3_config *cfg) {
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    size_t n = strlen(c->cfg.endpoint);
    while (n && c->cfg.endpoint[n - 1] == '/') c->cfg.endpoint[--n] = 0;
    if (!n) {
        snprintf(c->err, sizeof c->err, "s3: no endpoint (set s3_endpoint or AWS_ENDPOINT_URL)");
        return -1;
    }
    if (strncmp(c->cfg.endpoint, "http://", 7) && strncmp(c->cfg.endpoint, "https://", 8)) {
        snprintf(c->err, sizeof c->err, "s3: endpoint '%s' is not http:// or https://",
                 c->cfg.endpoint);
        return -1;
    }
    if (!c->cfg.access_key[0] || !c->cfg.secret_key[0]) {
        snprintf(c->err, sizeof c->err, "s3: no credentials (set AWS_ACCESS_KEY_ID and "
                 "AWS_SECRET_ACCESS_KEY, or s3_access_key and s3_secret_key)");
        return -1;
    }
    c->curl = curl_easy_init();
    if (!c->curl) {
        snprintf(c->err, sizeof c->err, "s3: curl_easy_init failed");
        return -1;
    }
    return 0;
}

void s3_client_free(s3_client *c) {
    if (c->curl) curl_easy_cleanup(c->curl);
    c->curl = NULL;
}

int s3_parse_url(const char *url, char *bucket, size_t blen, char *prefix, size_t plen) {
    if (strncmp(url, "s3://", 5)) return -1;
    const char *b = url + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    if (bl < 3 || bl > 63 || bl >= blen) return -1;
    for (size_t i = 0; i < bl; i++)
        if (!(islower((unsigned char)b[i]) || isdigit((unsigned char)b[i]) || b[i] == '.' ||
              b[i] == '-'))
            return -1;
    memcpy(bucket, b, bl);
    bucket[bl] = 0;
    const char *p = slash ? slash + 1 : "";
    while (*p == '/') p++;
    size_t pl = strlen(p);
    while (pl && p[pl - 1] == '/') pl--;
    if (pl >= plen) return -1;
    memcpy(prefix, p, pl);
    prefix[pl] = 0;
    return 0;
}

/* ---- hashing, encoding, XML -------------------------------------------------------------------- */

static void to_hex(const unsigned char *d, int n, char *hex) {
    for (int i = 0; i < n; i++) sprintf(hex + 2 * i, "%02x", d[i]);
    hex[2 * n] = 0;
}

void s3_sha256_hex(const void *p, size_t n, char hex[65]) {
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256(p, n, d);
    to_hex(d, SHA256_DIGEST_LENGTH, hex);
}

int s3_sha256_file(const char *path, char hex[65], int64_t *size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    size_t cap = 1 << 20;
    unsigned char *buf = malloc(cap);
    int64_t total = 0;
    ssize_t k = 0;
    while (buf && (k = read(fd, buf, cap)) > 0) {
        EVP_DigestUpdate(ctx, buf, (size_t)k);
        total += k;
    }
    unsigned char d[SHA256_DIGEST_LENGTH];
    unsigned int dl = 0;
    EVP_DigestFinal_ex(ctx, d, &dl);
    EVP_MD_CTX_free(ctx);
    free(buf);
    close(fd);
    if (!buf || k < 0) return -1;
    to_hex(d, SHA256_DIGEST_LENGTH, hex);
    if (size) *size = total;
    return 0;
}

void s3_uri_encode(const char *s, int keep_slash, char *out, size_t n) {
    size_t o = 0;
    for (; *s && o + 4 < n; s++) {
        unsigned char ch = (unsigned char)*s;
        if (isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~' ||
            (keep_slash && ch == '/'))
            out[o++] = (char)ch;
        else
            o += (size_t)sprintf(out + o, "%%%02X", ch);
    }
    out[o] = 0;
}

const char *s3_xml_field(const char *s, const char *tag, char *out, size_t n) {
    char open[96], close[96];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = s ? strstr(s, open) : NULL;
    if (!a) return NULL;
    a += strlen(open);
    const char *b = strstr(a, close);
    if (!b) return NULL;
    static const struct { const char *ent; char ch; } ents[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    size_t o = 0;
    for (const char *p = a; p < b && o + 1 < n;) {
        int hit = 0;
        for (size_t e = 0; e < 5 && !hit; e++) {
            size_t el = strlen(ents[e].ent);
            if ((size_t)(b - p) >= el && !strncmp(p, ents[e].ent, el)) {
                out[o++] = ents[e].ch;
                p += el;
                hit = 1;
            }
        }
        if (!hit) out[o++] = *p++;
    }
    out[o] = 0;
    return b + strlen(close);
}

void s3_buf_free(s3_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---- one request ------------------------------------------------------------------------------- */

double s3_backoff_s(const s3_config *cfg, int k, double u) {
    double cap = cfg->backoff_base_s;
    for (int i = 0; i < k && cap < cfg->backoff_cap_s; i++) cap *= 2;
    if (cap > cfg->backoff_cap_s) cap = cfg->backoff_cap_s;
    return u * cap;
}

int s3_retryable(int curl_code, long status, const char *code) {
    if (curl_code != CURLE_OK) return 1;
    if (status >= 500) return 1;
    if (code && !strcmp(code, "SlowDown")) return 1;
    return 0;
}

typedef struct {
    s3_req *r;
    CURL *h;
    size_t sent;
} io_ctx;

static size_t on_write(char *p, size_t sz, size_t nm, void *user) {
    io_ctx *io = user;
    s3_req *r = io->r;
    size_t n = sz * nm;
    long st = 0;
    curl_easy_getinfo(io->h, CURLINFO_RESPONSE_CODE, &st);
    if (r->dst && st >= 200 && st < 300) {
        if (r->dst_n + n > r->dst_cap) return 0; /* more than asked for: fail the transfer */
        memcpy((char *)r->dst + r->dst_n, p, n);
        r->dst_n += n;
        return n;
    }
    if (r->resp.n + n + 1 > r->resp.cap) {
        size_t cap = r->resp.cap ? r->resp.cap : 4096;
        while (cap < r->resp.n + n + 1) cap *= 2;
        char *q = realloc(r->resp.p, cap);
        if (!q) return 0;
        r->resp.p = q;
        r->resp.cap = cap;
    }
    memcpy(r->resp.p + r->resp.n, p, n);
    r->resp.n += n;
    r->resp.p[r->resp.n] = 0;
    return n;
}

static size_t on_read(char *p, size_t sz, size_t nm, void *user) {
    io_ctx *io = user;
    size_t left = io->r->body_n - io->sent, n = sz * nm < left ? sz * nm : left;
    memcpy(p, (const char *)io->r->body + io->sent, n);
    io->sent += n;
    return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *user) {
    s3_req *r = user;
    size_t n = sz * nm;
    if (n > 5 && !strncasecmp(p, "ETag:", 5)) {
        const char *v = p + 5;
        while (*v == ' ') v++;
        size_t l = (size_t)(p + n - v);
        while (l && (v[l - 1] == '\r' || v[l - 1] == '\n')) l--;
        if (l >= sizeof r->etag) l = sizeof r->etag - 1;
        memcpy(r->etag, v, l);
        r->etag[l] = 0;
    } else if (n > 15 && !strncasecmp(p, "Content-Length:", 15)) {
        r->content_length = strtoll(p + 15, NULL, 10);
    }
    return n;
}

/* The per-thread generator of backoff jitter (xorshift64*, seeded from the clock and the thread). */
static double jitter_u(void) {
    static __thread uint64_t s;
    if (!s) s = (uint64_t)(timer_unix() * 1e9) ^ (uint64_t)pthread_self() ^ 0x9e3779b97f4a7c15ull;
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return (double)((s * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

static void set_up(s3_client *c, CURL *h, s3_req *r, io_ctx *io, struct curl_slist **hdrs,
                   char *url, size_t url_n, char *sigv4, size_t sig_n) {
    char key_enc[3200] = "";
    if (r->key) s3_uri_encode(r->key, 1, key_enc, sizeof key_enc);
    snprintf(url, url_n, "%s/%s%s%s%s%s", c->cfg.endpoint, r->bucket, r->key ? "/" : "", key_enc,
             r->query && *r->query ? "?" : "", r->query ? r->query : "");
    snprintf(sigv4, sig_n, "aws:amz:%s:s3", c->cfg.region);
    char hash[65], line[128];
    s3_sha256_hex(r->body ? r->body : "", r->body_n, hash);
    snprintf(line, sizeof line, "x-amz-content-sha256: %s", hash);
    *hdrs = curl_slist_append(NULL, line);
    if (r->range) {
        snprintf(line, sizeof line, "Range: %s", r->range);
        *hdrs = curl_slist_append(*hdrs, line);
    }
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
    curl_easy_setopt(h, CURLOPT_USERNAME, c->cfg.access_key);
    curl_easy_setopt(h, CURLOPT_PASSWORD, c->cfg.secret_key);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (getenv("MT_S3_VERBOSE")) curl_easy_setopt(h, CURLOPT_VERBOSE, 1L); /* debugging aid */
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(c->cfg.connect_s * 1000));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)(c->cfg.stall_s + 0.999));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, io);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
    if (!strcmp(r->method, "PUT")) {
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(h, CURLOPT_READDATA, io);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_n);
        /* no "Expect:" override: libcurl 7.88 would sign that empty header too */
        curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 200L);
        if (c->cfg.max_mb_s > 0)
            curl_easy_setopt(h, CURLOPT_MAX_SEND_SPEED_LARGE,
                             (curl_off_t)(c->cfg.max_mb_s * 1e6 / (r->streams > 0 ? r->streams : 1)));
    } else if (!strcmp(r->method, "POST")) {
        curl_easy_setopt(h, CURLOPT_POST, 1L);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? (const char *)r->body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_n);
    } else if (!strcmp(r->method, "HEAD")) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (strcmp(r->method, "GET")) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
    } else if (c->cfg.max_get_mb_s > 0) {
        curl_easy_setopt(h, CURLOPT_MAX_RECV_SPEED_LARGE, (curl_off_t)(c->cfg.max_get_mb_s * 1e6));
    }
}

int s3_request(s3_client *c, CURL *h, s3_req *r, char *err_out) {
    if (!h) h = c->curl;
    char url[4096], sigv4[96], msg[S3_ERR] = "";
    int rc = -1;
    for (int k = 0; k < c->cfg.tries; k++) {
        if (k) {
            __atomic_add_fetch(&c->retries, 1, __ATOMIC_RELAXED);
            double s = s3_backoff_s(&c->cfg, k - 1, jitter_u());
            struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
            nanosleep(&ts, NULL);
        }
        io_ctx io = {r, h, 0};
        struct curl_slist *hdrs = NULL;
        r->dst_n = 0;
        r->resp.n = 0;
        r->etag[0] = 0;
        r->content_length = -1;
        if (r->resp.p) r->resp.p[0] = 0;
        set_up(c, h, r, &io, &hdrs, url, sizeof url, sigv4, sizeof sigv4);
        CURLcode cc = curl_easy_perform(h);
        long st = 0;
        if (cc == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
        curl_slist_free_all(hdrs);
        c->status = st;
        char code[96] = "", text[256] = "";
        if (cc == CURLE_OK && st >= 200 && st < 300) {
            rc = 0;
            break;
        }
        if (cc != CURLE_OK) {
            snprintf(msg, sizeof msg, "no answer from %s: %s", c->cfg.endpoint,
                     curl_easy_strerror(cc));
        } else {
            if (getenv("MT_S3_VERBOSE") && r->resp.p) fprintf(stderr, "%s\n", r->resp.p);
            s3_xml_field(r->resp.p, "Code", code, sizeof code);
            s3_xml_field(r->resp.p, "Message", text, sizeof text);
            snprintf(msg, sizeof msg, "HTTP %ld%s%s%s%s", st, code[0] ? " " : "", code,
                     text[0] ? ": " : "", text);
            if (st == 403 && !code[0]) snprintf(msg + strlen(msg), sizeof msg - strlen(msg),
                                                " (wrong credentials or clock skew?)");
        }
        if (!s3_retryable(cc, st, code)) {
            k = c->cfg.tries; /* a 4xx stays wrong */
            break;
        }
        if (k + 1 == c->cfg.tries)
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " (after %d tries)",
                     c->cfg.tries);
    }
    if (rc) {
        char e[S3_ERR];
        /* the call, then as much of msg as fits (a very long key cuts it short) */
        int n = snprintf(e, sizeof e, "s3: %s s3://%s%s%s: ", r->method, r->bucket,
                         r->key ? "/" : "", r->key ? r->key : "");
        if (n < 0 || n >= (int)sizeof e) n = (int)sizeof e - 1;
        snprintf(e + n, sizeof e - (size_t)n, "%.*s", (int)(sizeof e - (size_t)n - 1), msg);
        if (err_out) snprintf(err_out, S3_ERR, "%s", e);
        else snprintf(c->err, sizeof c->err, "%s", e);
    }
    return rc;
}

/* ---- single-request operations ----------------------------------------------------------------- */

static int simple(s3_client *c, const char *method, const char *bucket, const char *key,
                  const char *query, const void *body, size_t n) {
    s3_req r = {.method = method, .bucket = bucket, .key = key, .query = query, .body = body,
                .body_n = n};
    int rc = s3_request(c, NULL, &r, NULL);
    s3_buf_free(&r.resp);
    return rc;
}

int s3_create_bucket(s3_client *c, const char *bucket) {
    return simple(c, "PUT", bucket, NULL, NULL, NULL, 0);
}

int s3_put(s3_client *c, const char *bucket, const char *key, const void *p, size_t n) {
    return simple(c, "PUT", bucket, key, NULL, p, n);
}

int s3_delete(s3_client *c, const char *bucket, const char *key) {
    return simple(c, "DELETE", bucket, key, NULL, NULL, 0);
}

int s3_get_range(s3_client *c, const char *bucket, const char *key, int64_t off, size_t n,
                 void *buf) {
    char range[64];
    snprintf(range, sizeof range, "bytes=%lld-%lld", (long long)off, (long long)off + (long long)n - 1);
    s3_req r = {.method = "GET", .bucket = bucket, .key = key, .range = range, .dst = buf,
                .dst_cap = n};
    int rc = n ? s3_request(c, NULL, &r, NULL) : 0;
    if (!rc && r.dst_n != n) {
        snprintf(c->err, sizeof c->err, "s3: GET s3://%s/%s bytes %lld..: %zu of %zu bytes came",
                 bucket, key, (long long)off, r.dst_n, n);
        rc = -1;
    }
    s3_buf_free(&r.resp);
    return rc;
}

int s3_get(s3_client *c, const char *bucket, const char *key, void **p, size_t *n) {
    s3_req r = {.method = "GET", .bucket = bucket, .key = key};
    int rc = s3_request(c, NULL, &r, NULL);
    if (rc) {
        s3_buf_free(&r.resp);
        return -1;
    }
    *n = r.resp.n;
    *p = r.resp.p ? r.resp.p : calloc(1, 1);
    return 0;
}

int s3_head(s3_client *c, const char *bucket, const char *key, int64_t *size) {
    s3_req r = {.method = "HEAD", .bucket = bucket, .key = key};
    int rc = s3_request(c, NULL, &r, NULL);
    s3_buf_free(&r.resp);
    if (rc) return c->status == 404 ? 0 : -1;
    if (size) *size = r.content_length;
    return 1;
}

int s3_list(s3_client *c, const char *bucket, const char *prefix, s3_object **out, int *n) {
    *out = NULL;
    *n = 0;
    int cap = 0;
    char token[1024] = "", prefix_enc[3200];
    s3_uri_encode(prefix ? prefix : "", 0, prefix_enc, sizeof prefix_enc);
    for (;;) {
        char query[6600], token_enc[3200];
        s3_uri_encode(token, 0, token_enc, sizeof token_enc);
        /* canonical order: continuation-token < list-type < max-keys < prefix */
        snprintf(query, sizeof query, "%s%s%slist-type=2&max-keys=%d&prefix=%s",
                 token[0] ? "continuation-token=" : "", token_enc, token[0] ? "&" : "",
                 c->cfg.list_page, prefix_enc);
        s3_req r = {.method = "GET", .bucket = bucket, .query = query};
        if (s3_request(c, NULL, &r, NULL)) {
            s3_buf_free(&r.resp);
            free(*out);
            *out = NULL;
            *n = 0;
            return -1;
        }
        const char *p = r.resp.p;
        char item[4096];
        while (p && (p = s3_xml_field(p, "Contents", item, sizeof item))) {
            if (*n == cap) {
                cap = cap ? 2 * cap : 64;
                s3_object *q = realloc(*out, (size_t)cap * sizeof *q);
                if (!q) abort();
                *out = q;
            }
            s3_object *o = &(*out)[(*n)++];
            char sz[32] = "0";
            s3_xml_field(item, "Key", o->key, sizeof o->key);
            s3_xml_field(item, "Size", sz, sizeof sz);
            if (!s3_xml_field(item, "ETag", o->etag, sizeof o->etag)) o->etag[0] = 0;
            o->size = strtoll(sz, NULL, 10);
        }
        char trunc[16] = "false";
        s3_xml_field(r.resp.p, "IsTruncated", trunc, sizeof trunc);
        int more = !strcmp(trunc, "true") &&
                   s3_xml_field(r.resp.p, "NextContinuationToken", token, sizeof token);
        s3_buf_free(&r.resp);
        if (!more) return 0;
    }
}
