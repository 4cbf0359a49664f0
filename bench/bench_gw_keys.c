/*
 * bench/bench_gw_keys.c — what keys and rate limits add to each gateway request.
 *
 *   make bench && build/bench/bench_gw_keys [HOST:PORT]
 *
 * Times, per call, on one thread: gw_keys_check of a valid key (SHA-256 + one indexed SELECT in
 * gateway.db + CRYPTO_memcmp), of an unknown key, and gw_limiter_reserve + gw_limiter_settle on
 * in-process buckets; with a Redis address also on Redis buckets (two round trips). Prints
 * microseconds per call (median of 5 rounds). The gateway's overhead budget is ~1 ms at p50.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/stats.h"
#include "core/timer.h"
#include "gateway/gw_keys.h"
#include "gateway/gw_limit.h"

/* median over 5 rounds of the per-call time of fn, in µs */
typedef void (*op)(void *ctx);
static double time_us(op fn, void *ctx, int n) {
    double r[5];
    for (int k = 0; k < 5; k++) {
        double t0 = timer_now();
        for (int i = 0; i < n; i++) fn(ctx);
        r[k] = 1e6 * (timer_now() - t0) / n;
    }
    return stats_median(r, 5);
}

typedef struct {
    gw_keys *k;
    const char *auth;
    gw_limiter *l;
    gw_key_info key;
} ctx_t;

static void do_check(void *p) {
    ctx_t *c = p;
    gw_key_info info;
    if (gw_keys_check(c->k, c->auth, &info) == GW_AUTH_UNAVAILABLE) abort();
}

static void do_limit(void *p) {
    ctx_t *c = p;
    gw_admission a;
    gw_limiter_reserve(c->l, &c->key, 100, &a);
    if (a.admitted) gw_limiter_settle(c->l, a.reservation, 40);
}

int main(int argc, char **argv) {
    char dir[] = "/tmp/mt_bench_keys_XXXXXX", db[64], err[256];
    if (!mkdtemp(dir)) return 1;
    snprintf(db, sizeof(db), "%s/gateway.db", dir);
    gw_keys *k = gw_keys_open(db, err, sizeof(err));
    if (!k) return fprintf(stderr, "%s\n", err), 1;
    gw_key_info spec = {.role = GW_ROLE_USER, .rpm = 1000000000L, .tpm = 1000000000000L};
    char key[GW_KEY_LEN + 1], auth[GW_KEY_LEN + 16];
    for (int i = 0; i < 1000; i++) /* a realistic table: 1000 keys */
        if (gw_keys_create(k, "bench", "", &spec, key, NULL, err, sizeof(err))) return 1;
    snprintf(auth, sizeof(auth), "Bearer %s", key);
    ctx_t c = {.k = k, .auth = auth};
    printf("gw_keys_check, valid key (1000 keys in gateway.db): %.2f us/call\n", time_us(do_check, &c, 20000));
    char bad[GW_KEY_LEN + 16];
    snprintf(bad, sizeof(bad), "Bearer mt-%064d", 7);
    c.auth = bad;
    printf("gw_keys_check, unknown key:                          %.2f us/call\n", time_us(do_check, &c, 20000));
    c.key = spec;
    snprintf(c.key.id, sizeof(c.key.id), "benchkey");
    c.l = gw_limiter_new(NULL, 0, err, sizeof(err));
    printf("reserve + settle, in-process buckets:                %.2f us/call\n", time_us(do_limit, &c, 200000));
    gw_limiter_free(c.l);
    if (argc > 1) {
        c.l = gw_limiter_new(argv[1], 0, err, sizeof(err));
        if (!c.l || !gw_limiter_redis_up(c.l)) return fprintf(stderr, "no Redis at %s\n", argv[1]), 1;
        printf("reserve + settle, Redis buckets (%s):   %.2f us/call\n", argv[1], time_us(do_limit, &c, 5000));
        gw_limiter_free(c.l);
    }
    gw_keys_close(k);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : 1;
}
