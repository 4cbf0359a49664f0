/*
 * gateway/gw_cache.c — the exact-match response cache: deterministic requests (temperature 0, or
 * a seed) answered again byte for byte, in process, least recently used first out under a cap on
 * the bytes it holds.
 *
 * Why it is shaped so:
 *   - The key is SHA-256 over the route, the caller's scope (its key id unless cache_shared) and
 *     the request in a canonical form: object members sorted by name at every depth, numbers and
 *     strings printed by cJSON, so {"a":1,"b":2} and {"b":2,"a":1.0} are one request while any
 *     change of a sampling parameter, the prompt or the stream options is another. A 256-bit hash
 *     makes a collision (one request answered with another's body) practically impossible; the
 *     table compares all 32 bytes.
 *   - Only what a request may be answered with again is cached: a whole 200 body, or the bytes of
 *     a stream that ended with a finish reason; a stream is replayed as the same server-sent
 *     events. Entries over a quarter of the cap are not stored (one answer must not flush the
 *     whole cache).
 *   - One mutex over a chained hash table and an LRU list: a hit is a hash, a lookup and a copy,
 *     microseconds next to any model call, so striping the lock would buy nothing measurable.
 *   - With cache_ttl_s the entries live in Redis instead (GET / SET EX, key "mt:cache:" + the
 *     hash in hex), shared by every gateway on that Redis and expired by Redis; Redis's own
 *     maxmemory policy bounds it. A cache is an optimisation: a Redis that does not answer is a
 *     miss (and no store), never an error, and is retried at most once a second.
 */
#include "gateway/gw_impl.h"

#include <hiredis/hiredis.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBUCKETS 4096 /* chains stay short up to tens of thousands of entries */

typedef struct entry {
    unsigned char key[32];
    struct entry *chain;        /* next in the bucket */
    struct entry *newer, *older; /* the LRU list */
    size_t n;
    char *data;
} entry;

#define REDIS_TIMEOUT_MS 200

struct gw_cache {
    pthread_mutex_t mu;
    size_t cap, bytes;
    /* Redis mode (ttl_s > 0): one connection under mu */
    int ttl_s;
    char host[200];
    int port;
    redisContext *rc;
    double next_connect;
    entry *bucket[NBUCKETS];
    entry *newest, *oldest;
    uint64_t entries, hits, misses, stores, evictions;
};

gw_cache *gw_cache_new(size_t cap_bytes) {
    gw_cache *c = callocCheck(1, sizeof(gw_cache));
    pthread_mutex_init(&c->mu, NULL);
    c->cap = cap_bytes;
    return c;
}

gw_cache *gw_cache_new_redis(size_t cap_bytes, const char *addr, int ttl_s) {
    gw_cache *c = gw_cache_new(cap_bytes);
    c->ttl_s = ttl_s;
    const char *colon = strrchr(addr, ':'); /* gw_config_set checked HOST:PORT */
    snprintf(c->host, sizeof(c->host), "%.*s", (int)(colon - addr), addr);
    c->port = atoi(colon + 1);
    return c;
}

/* Connected (connecting if due)? Call with mu held. */
static int redis_ready(gw_cache *c) {
    if (c->rc) return 1;
    if (api_now() < c->next_connect) return 0;
    struct timeval tv = {0, REDIS_TIMEOUT_MS * 1000};
    c->rc = redisConnectWithTimeout(c->host, c->port, tv);
    if (!c->rc || c->rc->err) {
        if (c->rc) redisFree(c->rc);
        c->rc = NULL;
        c->next_connect = api_now() + 1.0;
        return 0;
    }
    redisSetTimeout(c->rc, tv);
    return 1;
}

/* A reply of a command on the connection, or NULL (the connection is dropped). mu held. */
static redisReply *redis_reply(gw_cache *c, redisReply *r) {
    if (r && r->type != REDIS_REPLY_ERROR) return r;
    if (r) freeReplyObject(r);
    redisFree(c->rc);
    c->rc = NULL;
    c->next_connect = api_now() + 1.0;
    return NULL;
}

static void hex_key(const unsigned char key[32], char out[80]) {
    int n = snprintf(out, 80, "mt:cache:");
    for (int i = 0; i < 32; i++) n += snprintf(out + n, (size_t)(80 - n), "%02x", key[i]);
}

static int redis_get(gw_cache *c, const unsigned char key[32], api_buf *out) {
    char k[80];
    hex_key(key, k);
    int hit = 0;
    if (redis_ready(c)) {
        redisReply *r = redis_reply(c, redisCommand(c->rc, "GET %s", k));
        if (r && r->type == REDIS_REPLY_STRING) {
            api_buf_put(out, r->str, r->len);
            hit = 1;
        }
        if (r) freeReplyObject(r);
    }
    return hit;
}

static void redis_put(gw_cache *c, const unsigned char key[32], const char *data, size_t n) {
    char k[80];
    hex_key(key, k);
    if (!redis_ready(c)) return;
    redisReply *r = redis_reply(c, redisCommand(c->rc, "SET %s %b EX %d", k, data, n, c->ttl_s));
    if (r) {
        c->stores++;
        freeReplyObject(r);
    }
}

void gw_cache_free(gw_cache *c) {
    if (!c) return;
    if (c->rc) redisFree(c->rc);
    for (entry *e = c->newest; e;) {
        entry *next = e->older;
        free(e->data);
        free(e);
        e = next;
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* ---- the key --------------------------------------------------------------------------------- */

static int by_name(const void *a, const void *b) {
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    return strcmp(x->string ? x->string : "", y->string ? y->string : "");
}

/* the canonical text of j: members sorted by name at every depth, no whitespace */
static void canon(api_buf *b, const cJSON *j) {
    if (cJSON_IsObject(j) || cJSON_IsArray(j)) {
        int obj = cJSON_IsObject(j), n = cJSON_GetArraySize(j), i = 0;
        const cJSON **kids = callocCheck((size_t)(n ? n : 1), sizeof(*kids));
        const cJSON *it;
        cJSON_ArrayForEach(it, j) kids[i++] = it;
        if (obj) qsort(kids, (size_t)n, sizeof(*kids), by_name);
        api_buf_puts(b, obj ? "{" : "[");
        for (i = 0; i < n; i++) {
            if (i) api_buf_puts(b, ",");
            if (obj) {
                api_buf_json_string(b, (const uint8_t *)kids[i]->string, strlen(kids[i]->string));
                api_buf_puts(b, ":");
            }
            canon(b, kids[i]);
        }
        api_buf_puts(b, obj ? "}" : "]");
        free(kids);
        return;
    }
    char *s = cJSON_PrintUnformatted(j);
    mtCheck(s != NULL, "out of memory hashing a request");
    api_buf_puts(b, s);
    free(s);
}

int gw_cache_eligible(const cJSON *req, int embeddings) {
    if (embeddings) return 1; /* an embedding is a function of its input */
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(req, "temperature");
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(req, "seed");
    return (cJSON_IsNumber(t) && t->valuedouble == 0) || cJSON_IsNumber(seed);
}

void gw_cache_key(const char *route, const char *scope, int chat, const cJSON *req,
                  unsigned char out[32]) {
    api_buf b = {0};
    api_buf_puts(&b, "minitrain-gateway-cache-1");
    api_buf_put(&b, "", 1);
    api_buf_puts(&b, route);
    api_buf_put(&b, "", 1);
    api_buf_puts(&b, scope);
    api_buf_put(&b, "", 1);
    api_buf_puts(&b, chat == 2 ? "embeddings" : chat ? "chat" : "completions");
    api_buf_put(&b, "", 1);
    canon(&b, req);
    SHA256((const unsigned char *)b.p, b.len, out);
    api_buf_free(&b);
}

/* ---- the table ------------------------------------------------------------------------------- */

static unsigned bucket_of(const unsigned char key[32]) {
    return ((unsigned)key[0] | (unsigned)key[1] << 8) % NBUCKETS;
}

static void lru_unlink(gw_cache *c, entry *e) {
    if (e->newer) e->newer->older = e->older;
    else c->newest = e->older;
    if (e->older) e->older->newer = e->newer;
    else c->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(gw_cache *c, entry *e) {
    e->older = c->newest;
    e->newer = NULL;
    if (c->newest) c->newest->newer = e;
    c->newest = e;
    if (!c->oldest) c->oldest = e;
}

static entry **find(gw_cache *c, const unsigned char key[32]) {
    entry **p = &c->bucket[bucket_of(key)];
    while (*p && memcmp((*p)->key, key, 32)) p = &(*p)->chain;
    return p;
}

static void drop(gw_cache *c, entry *e) {
    entry **p = find(c, e->key);
    *p = e->chain;
    lru_unlink(c, e);
    c->bytes -= e->n;
    c->entries--;
    free(e->data);
    free(e);
}

int gw_cache_get(gw_cache *c, const unsigned char key[32], api_buf *out) {
    pthread_mutex_lock(&c->mu);
    if (c->ttl_s > 0) {
        int hit = redis_get(c, key, out);
        if (hit) c->hits++;
        else c->misses++;
        pthread_mutex_unlock(&c->mu);
        return hit;
    }
    entry *e = *find(c, key);
    if (e) {
        lru_unlink(c, e);
        lru_push(c, e);
        api_buf_put(out, e->data, e->n);
        c->hits++;
    } else {
        c->misses++;
    }
    pthread_mutex_unlock(&c->mu);
    return e != NULL;
}

void gw_cache_put(gw_cache *c, const unsigned char key[32], const char *data, size_t n) {
    if (n == 0 || n > c->cap / 4) return;
    if (c->ttl_s > 0) {
        pthread_mutex_lock(&c->mu);
        redis_put(c, key, data, n);
        pthread_mutex_unlock(&c->mu);
        return;
    }
    entry *e = callocCheck(1, sizeof(entry));
    memcpy(e->key, key, 32);
    e->data = mallocCheck(n);
    memcpy(e->data, data, n);
    e->n = n;
    pthread_mutex_lock(&c->mu);
    entry *old = *find(c, key);
    if (old) drop(c, old); /* the newer answer replaces it */
    while (c->oldest && c->bytes + n > c->cap) {
        drop(c, c->oldest);
        c->evictions++;
    }
    entry **p = &c->bucket[bucket_of(key)];
    e->chain = *p;
    *p = e;
    lru_push(c, e);
    c->bytes += n;
    c->entries++;
    c->stores++;
    pthread_mutex_unlock(&c->mu);
}

void gw_cache_stats(gw_cache *c, gw_cache_counts *out) {
    pthread_mutex_lock(&c->mu);
    out->entries = c->entries;
    out->bytes = c->bytes;
    out->hits = c->hits;
    out->misses = c->misses;
    out->stores = c->stores;
    out->evictions = c->evictions;
    pthread_mutex_unlock(&c->mu);
}
