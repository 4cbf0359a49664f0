/*
 * gateway/gw_limit.c — token buckets per key, in process or in Redis (see gw_limit.h).
 *
 * Why it is shaped so:
 *   - A bucket is two numbers (level, time of last refill); refilling is computed lazily at each
 *     touch: level = min(cap, level + elapsed · cap / 60). No timers, no background thread.
 *   - Admission takes all three (request, tokens, concurrency slot) or none, inside one critical
 *     section. Checking first and taking later is the known bug that lets N parallel requests
 *     all pass a budget meant for a few; here check and take cannot be separated.
 *   - In Redis the critical section is one Lua script (EVALSHA): Redis runs a script atomically,
 *     so two gateway processes cannot interleave inside it. The bucket is a hash {r, t, ts}; the
 *     concurrency slots are a sorted set of reservation ids scored by lease expiry, so a gateway
 *     that dies holding slots frees them after GW_LIMIT_LEASE_S instead of never. Times come
 *     from Redis TIME: replicas with skewed clocks still share one clock.
 *   - Reservations are remembered in process (handle → key, cost, backend): settle and release
 *     need only the handle, and a reservation taken on the fallback buckets while Redis was down
 *     is settled there, not in Redis.
 *   - One hiredis connection, behind its own mutex (a redisContext is not thread-safe); each call
 *     is one round trip of ~50 µs on loopback. A failed call drops the connection; reconnecting
 *     is tried at most once a second so a dead Redis costs one timeout per second, not one per
 *     request.
 */
#include "gateway/gw_limit.h"

#include <hiredis/hiredis.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/check.h"

#define NKEYB 256  /* hash buckets of key states */
#define NRESB 1024 /* hash buckets of open reservations */
#define REDIS_TIMEOUT_MS 250
#define RECONNECT_S 1.0
#define CONC_RETRY_S 1.0 /* Retry-After when only the concurrency cap refused */

enum { BK_NONE, BK_LOCAL, BK_REDIS };

typedef struct kstate {
    char id[24];
    double r, t, ts; /* request and token levels, time of the last refill */
    int conc;
    struct kstate *next;
} kstate;

typedef struct res {
    unsigned long long h;
    int backend;
    char id[24];
    long cost, rpm, tpm;
    struct res *next;
} res;

struct gw_limiter {
    pthread_mutex_t mu; /* key states and reservations */
    kstate *keys[NKEYB];
    res *res[NRESB];
    int n_open;
    unsigned long long next_h;
    double (*now)(void *);
    void *now_ctx;
    /* Redis */
    int use_redis, fail_open;
    char host[256];
    int port;
    pthread_mutex_t rmu; /* the connection */
    redisContext *rc;
    double next_connect;
    int up, warned_down;
    char sha_reserve[48], sha_settle[48];
    char inst[20]; /* random instance id: reservation ids are unique across processes */
};

/* ---- the Lua scripts ---------------------------------------------------------------------------
 * Both refill exactly as the in-process code does (same formulas, same order), so a test can
 * check either backend against the same arithmetic. Numbers travel as %.17g strings: Lua numbers
 * returned to Redis would be truncated to integers. */

#define LUA_REFILL                                                                                 \
    "local h = redis.call('HMGET', KEYS[1], 'r', 't', 'ts')\n"                                     \
    "local r = tonumber(h[1]) or rpm\n"                                                            \
    "local t = tonumber(h[2]) or tpm\n"                                                            \
    "local ts = tonumber(h[3]) or now\n"                                                           \
    "local dt = now - ts\n"                                                                        \
    "if dt < 0 then dt = 0 end\n"                                                                  \
    "if rpm > 0 then r = math.min(rpm, r + dt * rpm / 60) end\n"                                   \
    "if tpm > 0 then t = math.min(tpm, t + dt * tpm / 60) end\n"
#define LUA_NOW                                                                                    \
    "local now = tonumber(ARGV[#ARGV])\n"                                                          \
    "if now == nil then local tt = redis.call('TIME'); now = tonumber(tt[1]) + "                   \
    "tonumber(tt[2]) / 1000000 end\n"
#define LUA_STORE                                                                                  \
    "redis.call('HSET', KEYS[1], 'r', string.format('%.17g', r), 't', string.format('%.17g', t), " \
    "'ts', string.format('%.17g', now))\n"                                                         \
    "redis.call('PEXPIRE', KEYS[1], 120000)\n"

/* KEYS: bucket, slots. ARGV: rpm tpm maxc cost rid lease now|"" */
static const char *LUA_RESERVE =
    "local rpm, tpm, maxc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "local cost, rid, lease = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])\n" LUA_NOW LUA_REFILL
    "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)\n"
    "local c = redis.call('ZCARD', KEYS[2])\n"
    "local wait = 0\n"
    "if rpm > 0 and r < 1 then wait = (1 - r) * 60 / rpm end\n"
    "if tpm > 0 and t < cost then local w = (cost - t) * 60 / tpm; if w > wait then wait = w end end\n"
    "local ok = 0\n"
    "if wait == 0 and (maxc == 0 or c < maxc) then\n"
    "  ok = 1\n"
    "  if rpm > 0 then r = r - 1 end\n"
    "  if tpm > 0 then t = t - cost end\n"
    "  redis.call('ZADD', KEYS[2], now + lease, rid)\n"
    "  redis.call('PEXPIRE', KEYS[2], math.floor(lease * 1000) + 1000)\n"
    "  c = c + 1\n"
    "end\n" LUA_STORE
    "return {ok, string.format('%.17g', wait), string.format('%.17g', r), "
    "string.format('%.17g', t), c}\n";

/* KEYS: bucket, slots. ARGV: rpm tpm refund rid now|"" */
static const char *LUA_SETTLE =
    "local rpm, tpm, refund = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])\n"
    "redis.call('ZREM', KEYS[2], ARGV[4])\n"
    "if tpm > 0 and refund ~= 0 then\n" LUA_NOW LUA_REFILL
    "  t = math.min(tpm, t + refund)\n" LUA_STORE
    "end\n"
    "return 1\n";

/* ---- time, hashing ------------------------------------------------------------------------- */

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double lim_now(gw_limiter *l) { return l->now ? l->now(l->now_ctx) : mono_now(); }

void gw_limiter_set_clock(gw_limiter *l, double (*now)(void *ctx), void *ctx) {
    l->now = now;
    l->now_ctx = ctx;
}

static unsigned hash_str(const char *s) { /* FNV-1a */
    unsigned h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* ---- in-process buckets (call with l->mu held) ---------------------------------------------- */

static kstate *key_state(gw_limiter *l, const gw_key_info *key, double now) {
    unsigned b = hash_str(key->id) % NKEYB;
    for (kstate *k = l->keys[b]; k; k = k->next)
        if (!strcmp(k->id, key->id)) return k;
    kstate *k = callocCheck(1, sizeof(kstate));
    snprintf(k->id, sizeof(k->id), "%s", key->id);
    k->r = (double)key->rpm; /* a new key starts full */
    k->t = (double)key->tpm;
    k->ts = now;
    k->next = l->keys[b];
    l->keys[b] = k;
    return k;
}

static kstate *find_state(gw_limiter *l, const char *id) {
    for (kstate *k = l->keys[hash_str(id) % NKEYB]; k; k = k->next)
        if (!strcmp(k->id, id)) return k;
    return NULL;
}

/* level = min(cap, level + dt · cap / 60): the bucket refills its whole capacity in 60 s. */
static void refill(kstate *k, long rpm, long tpm, double now) {
    double dt = now - k->ts;
    if (dt < 0) dt = 0;
    if (rpm > 0) k->r = fmin((double)rpm, k->r + dt * (double)rpm / 60.0);
    if (tpm > 0) k->t = fmin((double)tpm, k->t + dt * (double)tpm / 60.0);
    k->ts = now;
}

static unsigned long long add_res(gw_limiter *l, int backend, const gw_key_info *key, long cost) {
    res *r = callocCheck(1, sizeof(res));
    r->h = ++l->next_h;
    r->backend = backend;
    snprintf(r->id, sizeof(r->id), "%s", key->id);
    r->cost = cost;
    r->rpm = key->rpm;
    r->tpm = key->tpm;
    unsigned b = (unsigned)(r->h % NRESB);
    r->next = l->res[b];
    l->res[b] = r;
    l->n_open++;
    return r->h;
}

static res *take_res(gw_limiter *l, unsigned long long h) {
    for (res **p = &l->res[h % NRESB]; *p; p = &(*p)->next)
        if ((*p)->h == h) {
            res *r = *p;
            *p = r->next;
            l->n_open--;
            return r;
        }
    return NULL;
}

/* Fill the x-ratelimit fields from levels r, t (after the decision). */
static void fill_levels(gw_admission *out, const gw_key_info *key, double r, double t) {
    out->limit_requests = key->rpm > 0 ? key->rpm : -1;
    out->limit_tokens = key->tpm > 0 ? key->tpm : -1;
    out->remaining_requests = key->rpm > 0 ? (long)fmax(0, floor(r)) : -1;
    out->remaining_tokens = key->tpm > 0 ? (long)fmax(0, floor(t)) : -1;
    out->reset_requests_s = key->rpm > 0 ? fmax(0, ((double)key->rpm - r) * 60.0 / (double)key->rpm) : 0;
    out->reset_tokens_s = key->tpm > 0 ? fmax(0, ((double)key->tpm - t) * 60.0 / (double)key->tpm) : 0;
}

/* Seconds until `need` units are in a bucket at level `have` refilling at cap/60 per second. */
static double wait_for(double need, double have, long cap) {
    return cap > 0 && have < need ? (need - have) * 60.0 / (double)cap : 0;
}

static void reserve_local(gw_limiter *l, const gw_key_info *key, long cost, gw_admission *out) {
    pthread_mutex_lock(&l->mu);
    double now = lim_now(l);
    kstate *k = key_state(l, key, now);
    refill(k, key->rpm, key->tpm, now);
    double wait = fmax(wait_for(1, k->r, key->rpm), wait_for((double)cost, k->t, key->tpm));
    int conc_full = key->max_concurrent > 0 && k->conc >= key->max_concurrent;
    out->admitted = wait == 0 && !conc_full;
    if (out->admitted) {
        if (key->rpm > 0) k->r -= 1;
        if (key->tpm > 0) k->t -= (double)cost;
        k->conc++;
        out->reservation = add_res(l, BK_LOCAL, key, cost);
    } else {
        out->retry_after_s = wait > 0 ? wait : CONC_RETRY_S;
    }
    fill_levels(out, key, k->r, k->t);
    pthread_mutex_unlock(&l->mu);
}

/* Give back `refund` tokens (negative: charge more) and the slot of a local reservation. */
static void finish_local(gw_limiter *l, const res *r, long refund) {
    kstate *k = find_state(l, r->id);
    if (!k) return;
    refill(k, r->rpm, r->tpm, lim_now(l));
    if (r->tpm > 0) k->t = fmin((double)r->tpm, k->t + (double)refund);
    if (k->conc > 0) k->conc--;
}

/* ---- Redis ------------------------------------------------------------------------------------ */

static void redis_drop(gw_limiter *l, const char *why_in) {
    char why[160]; /* why_in may point into the context freed below */
    snprintf(why, sizeof(why), "%s", why_in && *why_in ? why_in : "no reply");
    if (l->rc) redisFree(l->rc);
    l->rc = NULL;
    l->next_connect = mono_now() + RECONNECT_S;
    if (l->up || !l->warned_down) {
        mt_warn("rate limiter: Redis at %s:%d is unreachable (%s): %s until it answers", l->host,
                l->port, why, l->fail_open ? "failing OPEN (in-process buckets per replica)"
                                           : "failing CLOSED (limited requests are refused)");
        l->warned_down = 1;
    }
    l->up = 0;
}

static int load_script(gw_limiter *l, const char *src, char *sha) {
    redisReply *r = redisCommand(l->rc, "SCRIPT LOAD %s", src);
    int ok = r && r->type == REDIS_REPLY_STRING && r->len < 48;
    if (ok) snprintf(sha, 48, "%s", r->str);
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Connected (connecting if due)? Call with rmu held. */
static int redis_ready(gw_limiter *l) {
    if (l->rc) return 1;
    if (mono_now() < l->next_connect) return 0;
    struct timeval tv = {0, REDIS_TIMEOUT_MS * 1000};
    l->rc = redisConnectWithTimeout(l->host, l->port, tv);
    if (!l->rc || l->rc->err) {
        redis_drop(l, l->rc ? l->rc->errstr : "cannot allocate a connection");
        return 0;
    }
    redisSetTimeout(l->rc, tv);
    if (load_script(l, LUA_RESERVE, l->sha_reserve) || load_script(l, LUA_SETTLE, l->sha_settle)) {
        redis_drop(l, l->rc && l->rc->err ? l->rc->errstr : "SCRIPT LOAD failed");
        return 0;
    }
    if (!l->up && l->warned_down)
        fprintf(stderr, "minitrain: rate limiter: Redis at %s:%d answers again\n", l->host, l->port);
    l->up = 1;
    return 1;
}

/* EVALSHA sha with 2 keys and n args. Returns the reply (caller frees) or NULL (connection
 * dropped). A NOSCRIPT (Redis restarted or SCRIPT FLUSH) reloads the scripts and retries once. */
static redisReply *redis_eval(gw_limiter *l, const char *sha_field, const char *id, int n,
                              const char **args) {
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!redis_ready(l)) return NULL;
        char kb[64], kc[64];
        snprintf(kb, sizeof(kb), "mt:rl:{%s}", id);
        snprintf(kc, sizeof(kc), "mt:rl:{%s}:c", id);
        const char *argv[16];
        int argc = 0;
        argv[argc++] = "EVALSHA";
        argv[argc++] = sha_field == l->sha_reserve ? l->sha_reserve : l->sha_settle;
        argv[argc++] = "2";
        argv[argc++] = kb;
        argv[argc++] = kc;
        for (int i = 0; i < n; i++) argv[argc++] = args[i];
        redisReply *r = redisCommandArgv(l->rc, argc, argv, NULL);
        if (!r) {
            redis_drop(l, l->rc->errstr[0] ? l->rc->errstr : "no reply");
            return NULL;
        }
        if (r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOSCRIPT", 8) && attempt == 0) {
            freeReplyObject(r);
            if (load_script(l, LUA_RESERVE, l->sha_reserve) ||
                load_script(l, LUA_SETTLE, l->sha_settle)) {
                redis_drop(l, "SCRIPT LOAD failed");
                return NULL;
            }
            continue;
        }
        return r;
    }
    return NULL;
}

static void fmt_num(char *out, size_t cap, double v) { snprintf(out, cap, "%.17g", v); }

/* 0 decided (out filled), -1 Redis unavailable. */
static int reserve_redis(gw_limiter *l, const gw_key_info *key, long cost, gw_admission *out) {
    char a_rpm[32], a_tpm[32], a_maxc[32], a_cost[32], a_rid[64], a_lease[32], a_now[40] = "";
    snprintf(a_rpm, sizeof(a_rpm), "%ld", key->rpm);
    snprintf(a_tpm, sizeof(a_tpm), "%ld", key->tpm);
    snprintf(a_maxc, sizeof(a_maxc), "%d", key->max_concurrent);
    snprintf(a_cost, sizeof(a_cost), "%ld", cost);
    snprintf(a_lease, sizeof(a_lease), "%d", GW_LIMIT_LEASE_S);
    pthread_mutex_lock(&l->mu);
    unsigned long long h = ++l->next_h; /* the handle doubles as the reservation id */
    if (l->now) fmt_num(a_now, sizeof(a_now), lim_now(l));
    pthread_mutex_unlock(&l->mu);
    snprintf(a_rid, sizeof(a_rid), "%s-%llu", l->inst, h);
    const char *args[] = {a_rpm, a_tpm, a_maxc, a_cost, a_rid, a_lease, a_now};
    pthread_mutex_lock(&l->rmu);
    redisReply *r = redis_eval(l, l->sha_reserve, key->id, 7, args);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 5 &&
             r->element[0]->type == REDIS_REPLY_INTEGER;
    if (r && !ok)
        mt_warn("rate limiter: unexpected reply from Redis: %s",
                r->type == REDIS_REPLY_ERROR ? r->str : "(not the script's array)");
    if (ok) {
        out->admitted = r->element[0]->integer == 1;
        double wait = strtod(r->element[1]->str, NULL);
        double lr = strtod(r->element[2]->str, NULL), lt = strtod(r->element[3]->str, NULL);
        if (!out->admitted) out->retry_after_s = wait > 0 ? wait : CONC_RETRY_S;
        fill_levels(out, key, lr, lt);
    }
    if (r) freeReplyObject(r);
    pthread_mutex_unlock(&l->rmu);
    if (!ok) return -1;
    if (out->admitted) {
        pthread_mutex_lock(&l->mu);
        res *rs = callocCheck(1, sizeof(res));
        rs->h = h;
        rs->backend = BK_REDIS;
        snprintf(rs->id, sizeof(rs->id), "%s", key->id);
        rs->cost = cost;
        rs->rpm = key->rpm;
        rs->tpm = key->tpm;
        rs->next = l->res[h % NRESB];
        l->res[h % NRESB] = rs;
        l->n_open++;
        pthread_mutex_unlock(&l->mu);
        out->reservation = h;
    }
    return 0;
}

static void finish_redis(gw_limiter *l, const res *rs, long refund) {
    char a_rpm[32], a_tpm[32], a_ref[32], a_rid[64], a_now[40] = "";
    snprintf(a_rpm, sizeof(a_rpm), "%ld", rs->rpm);
    snprintf(a_tpm, sizeof(a_tpm), "%ld", rs->tpm);
    snprintf(a_ref, sizeof(a_ref), "%ld", refund);
    snprintf(a_rid, sizeof(a_rid), "%s-%llu", l->inst, rs->h);
    if (l->now) fmt_num(a_now, sizeof(a_now), lim_now(l));
    const char *args[] = {a_rpm, a_tpm, a_ref, a_rid, a_now};
    pthread_mutex_lock(&l->rmu);
    redisReply *r = redis_eval(l, l->sha_settle, rs->id, 5, args);
    /* lost: the tokens stay charged (the safe side) and the slot's lease expires on its own */
    if (r) freeReplyObject(r);
    pthread_mutex_unlock(&l->rmu);
}

/* ---- the public face -------------------------------------------------------------------------- */

gw_limiter *gw_limiter_new(const char *redis, int fail_open, char *err, size_t errlen) {
    gw_limiter *l = callocCheck(1, sizeof(gw_limiter));
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->rmu, NULL);
    l->fail_open = fail_open != 0;
    unsigned char rnd[8];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) memset(rnd, 0, sizeof(rnd));
    for (int i = 0; i < 8; i++) snprintf(l->inst + 2 * i, 3, "%02x", rnd[i]);
    if (redis && *redis) {
        const char *colon = strrchr(redis, ':');
        char *end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : 0;
        size_t hl = colon ? (size_t)(colon - redis) : 0;
        const char *h = redis;
        if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') h++, hl -= 2; /* [::1]:6379 */
        if (!colon || hl == 0 || hl >= sizeof(l->host) || !end || *end || port < 1 || port > 65535) {
            if (err && errlen)
                snprintf(err, errlen, "redis address '%s' must be HOST:PORT (e.g. 127.0.0.1:6379)",
                         redis);
            gw_limiter_free(l);
            return NULL;
        }
        memcpy(l->host, h, hl);
        l->host[hl] = 0;
        l->port = (int)port;
        l->use_redis = 1;
        pthread_mutex_lock(&l->rmu);
        redis_ready(l); /* warns if down; the policy applies until it answers */
        pthread_mutex_unlock(&l->rmu);
    }
    return l;
}

void gw_limiter_free(gw_limiter *l) {
    if (!l) return;
    for (int b = 0; b < NKEYB; b++)
        for (kstate *k = l->keys[b], *n; k; k = n) n = k->next, free(k);
    for (int b = 0; b < NRESB; b++)
        for (res *r = l->res[b], *n; r; r = n) n = r->next, free(r);
    if (l->rc) redisFree(l->rc);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->rmu);
    free(l);
}

int gw_limiter_reserve(gw_limiter *l, const gw_key_info *key, long tokens, gw_admission *out) {
    memset(out, 0, sizeof(*out));
    long cost = tokens > 0 ? tokens : 0;
    if (key->tpm > 0 && cost > key->tpm) { /* more than a full bucket: waiting never helps */
        fill_levels(out, key, (double)key->rpm, (double)key->tpm);
        return GW_LIMIT_TOO_LARGE;
    }
    if (key->rpm == 0 && key->tpm == 0 && key->max_concurrent == 0) { /* nothing to count */
        out->admitted = 1;
        fill_levels(out, key, 0, 0);
        pthread_mutex_lock(&l->mu);
        out->reservation = add_res(l, BK_NONE, key, cost);
        pthread_mutex_unlock(&l->mu);
        return GW_LIMIT_OK;
    }
    if (!l->use_redis) {
        reserve_local(l, key, cost, out);
        return GW_LIMIT_OK;
    }
    if (reserve_redis(l, key, cost, out) == 0) return GW_LIMIT_OK;
    memset(out, 0, sizeof(*out));
    if (l->fail_open) {
        reserve_local(l, key, cost, out);
    } else {
        out->admitted = 0;
        out->retry_after_s = RECONNECT_S;
        fill_levels(out, key, 0, 0);
    }
    return GW_LIMIT_UNAVAILABLE;
}

static void finish(gw_limiter *l, unsigned long long h, int settle, long used) {
    pthread_mutex_lock(&l->mu);
    res *r = take_res(l, h);
    if (r && r->backend == BK_LOCAL) finish_local(l, r, settle ? r->cost - used : r->cost);
    pthread_mutex_unlock(&l->mu);
    if (!r) return; /* unknown or already finished: settling twice must not refund twice */
    if (r->backend == BK_REDIS) finish_redis(l, r, settle ? r->cost - used : r->cost);
    free(r);
}

void gw_limiter_settle(gw_limiter *l, unsigned long long reservation, long used_tokens) {
    finish(l, reservation, 1, used_tokens > 0 ? used_tokens : 0);
}

void gw_limiter_release(gw_limiter *l, unsigned long long reservation) {
    finish(l, reservation, 0, 0);
}

int gw_limiter_fails_open(gw_limiter *l) { return l->fail_open; }

int gw_limiter_redis_up(gw_limiter *l) {
    pthread_mutex_lock(&l->rmu);
    int up = l->use_redis && l->up;
    pthread_mutex_unlock(&l->rmu);
    return up;
}

int gw_limiter_open_reservations(gw_limiter *l) {
    pthread_mutex_lock(&l->mu);
    int n = l->n_open;
    pthread_mutex_unlock(&l->mu);
    return n;
}
