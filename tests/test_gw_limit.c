/*
 * tests/test_gw_limit.c — token buckets: refill arithmetic against an injected clock, settle and
 * release arithmetic, all-or-nothing admission, and the concurrency property: N parallel
 * reservations of cost c against a budget B admit exactly ⌊B/c⌋ (50 threads against a budget
 * for 10 → 10), for tokens, requests and concurrency slots alike.
 *
 * The expected numbers are worked out here from the definition of the bucket (capacity = the
 * per-minute limit, refill = limit/60 per second, capped at capacity), not read back from the
 * code. Redis mode with a real redis-server (two processes sharing one budget, Redis killed) is
 * tests/run_gw_redis.sh; the fail-open/closed policy against an unreachable address is here.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/gw_limit.h"

static double fake_t;
static double clock_fn(void *ctx) { (void)ctx; return fake_t; }

static gw_limiter *local_limiter(void) {
    char err[128];
    gw_limiter *l = gw_limiter_new(NULL, 0, err, sizeof(err));
    assert_non_null(l);
    fake_t = 1000.0;
    gw_limiter_set_clock(l, clock_fn, NULL);
    return l;
}

static gw_key_info key(const char *id, long rpm, long tpm, int maxc) {
    gw_key_info k;
    memset(&k, 0, sizeof(k));
    snprintf(k.id, sizeof(k.id), "%s", id);
    k.role = GW_ROLE_USER;
    k.rpm = rpm;
    k.tpm = tpm;
    k.max_concurrent = maxc;
    return k;
}

/* the token level right now, read through a cost-0 reservation (rpm must be 0: it costs nothing) */
static long level(gw_limiter *l, const gw_key_info *k) {
    gw_admission a;
    assert_int_equal(k->rpm, 0);
    assert_int_equal(gw_limiter_reserve(l, k, 0, &a), GW_LIMIT_OK);
    if (a.admitted) gw_limiter_release(l, a.reservation);
    return a.remaining_tokens;
}

static void test_refill_tokens(void **state) {
    (void)state;
    gw_limiter *l = local_limiter();
    gw_key_info k = key("tok", 0, 600, 0); /* 600 tokens/min = 10 tokens/s */
    gw_admission a;
    /* a new key starts full: six reservations of 100, the seventh waits (100 - 0) / 10 = 10 s */
    for (int i = 0; i < 6; i++) {
        assert_int_equal(gw_limiter_reserve(l, &k, 100, &a), GW_LIMIT_OK);
        assert_true(a.admitted);
        assert_int_equal(a.remaining_tokens, 600 - 100 * (i + 1));
        assert_int_equal(a.limit_tokens, 600);
        assert_int_equal(a.limit_requests, -1); /* no request limit: no header */
    }
    assert_int_equal(gw_limiter_reserve(l, &k, 100, &a), GW_LIMIT_OK);
    assert_false(a.admitted);
    assert_true(fabs(a.retry_after_s - 10.0) < 1e-9);
    assert_true(fabs(a.reset_tokens_s - 60.0) < 1e-9); /* empty → full in a minute */
    /* 5 s later: 50 tokens, still short by 50 → 5 s */
    fake_t += 5;
    assert_int_equal(gw_limiter_reserve(l, &k, 100, &a), GW_LIMIT_OK);
    assert_false(a.admitted);
    assert_true(fabs(a.retry_after_s - 5.0) < 1e-9);
    assert_int_equal(a.remaining_tokens, 50);
    /* after exactly the advertised Retry-After it is admitted, leaving 0 */
    fake_t += a.retry_after_s;
    assert_int_equal(gw_limiter_reserve(l, &k, 100, &a), GW_LIMIT_OK);
    assert_true(a.admitted);
    assert_int_equal(a.remaining_tokens, 0);
    /* refill is capped at the capacity however long the key idles */
    fake_t += 1e6;
    assert_int_equal(level(l, &k), 600);
    /* a clock that steps back refills nothing (and takes nothing) */
    gw_admission b;
    assert_int_equal(gw_limiter_reserve(l, &k, 600, &b), GW_LIMIT_OK);
    assert_true(b.admitted);
    fake_t -= 100;
    assert_int_equal(level(l, &k), 0);
    gw_limiter_free(l);
}

static void test_refill_requests(void **state) {
    (void)state;
    gw_limiter *l = local_limiter();
    gw_key_info k = key("req", 3, 0, 0); /* 3 requests/min: one per 20 s */
    gw_admission a;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(gw_limiter_reserve(l, &k, 1000000, &a), GW_LIMIT_OK); /* tpm 0: any cost */
        assert_true(a.admitted);
        assert_int_equal(a.remaining_requests, 2 - i);
        assert_int_equal(a.limit_requests, 3);
        assert_int_equal(a.remaining_tokens, -1);
        gw_limiter_settle(l, a.reservation, 10); /* settling never gives a request back */
    }
    assert_int_equal(gw_limiter_reserve(l, &k, 1, &a), GW_LIMIT_OK);
    assert_false(a.admitted);
    assert_true(fabs(a.retry_after_s - 20.0) < 1e-9);
    fake_t += 10; /* half a request */
    assert_int_equal(gw_limiter_reserve(l, &k, 1, &a), GW_LIMIT_OK);
    assert_false(a.admitted);
    assert_true(fabs(a.retry_after_s - 10.0) < 1e-9);
    assert_int_equal(a.remaining_requests, 0); /* whole units only */
    fake_t += 10;
    assert_int_equal(gw_limiter_reserve(l, &k, 1, &a), GW_LIMIT_OK);
    assert_true(a.admitted);
    /* both buckets: admission needs both; a refusal takes from neither */
    gw_key_info kb = key("both", 2, 100, 0);
    assert_int_equal(gw_limiter_reserve(l, &kb, 80, &a), GW_LIMIT_OK);
    assert_true(a.admitted);
    assert_int_equal(gw_limiter_reserve(l, &kb, 80, &a), GW_LIMIT_OK); /* tokens short */
    assert_false(a.admitted);
    assert_int_equal(a.remaining_requests, 1); /* the refused request took no request */
    assert_int_equal(a.remaining_tokens, 20);
    assert_true(fabs(a.retry_after_s - 36.0) < 1e-9); /* (80 - 20) · 60 / 100 */
    assert_int_equal(gw_limiter_reserve(l, &kb, 20, &a), GW_LIMIT_OK);
    assert_true(a.admitted);
    assert_int_equal(a.remaining_requests, 0);
    assert_int_equal(a.remaining_tokens, 0);
    assert_int_equal(gw_limiter_reserve(l, &kb, 0, &a), GW_LIMIT_OK); /* requests short */
    assert_false(a.admitted);
    assert_true(fabs(a.retry_after_s - 30.0) < 1e-9); /* (1 - 0) · 60 / 2 */
    gw_limiter_free(l);
}

static void test_settle_release(void **state) {
    (void)state;
    gw_limiter *l = local_limiter();
    gw_key_info k = key("settle", 0, 1000, 0);
    gw_admission a, b;
    /* settle: reserve 300, use 100 → 200 come back */
    assert_int_equal(gw_limiter_reserve(l, &k, 300, &a), GW_LIMIT_OK);
    assert_int_equal(a.remaining_tokens, 700);
    assert_int_equal(gw_limiter_open_reservations(l), 1);
    gw_limiter_settle(l, a.reservation, 100);
    assert_int_equal(gw_limiter_open_reservations(l), 0);
    assert_int_equal(level(l, &k), 900);
    /* settling or releasing again (or an unknown handle) changes nothing */
    gw_limiter_settle(l, a.reservation, 0);
    gw_limiter_release(l, a.reservation);
    gw_limiter_release(l, 987654321ull);
    assert_int_equal(level(l, &k), 900);
    /* release: everything reserved comes back */
    assert_int_equal(gw_limiter_reserve(l, &k, 300, &a), GW_LIMIT_OK);
    assert_int_equal(a.remaining_tokens, 600);
    gw_limiter_release(l, a.reservation);
    assert_int_equal(level(l, &k), 900);
    /* using more than reserved charges the difference */
    assert_int_equal(gw_limiter_reserve(l, &k, 100, &a), GW_LIMIT_OK);
    gw_limiter_settle(l, a.reservation, 150);
    assert_int_equal(level(l, &k), 750);
    /* refunds never lift a bucket above its capacity: refill to full while reserved */
    assert_int_equal(gw_limiter_reserve(l, &k, 500, &a), GW_LIMIT_OK);
    fake_t += 60;
    gw_limiter_release(l, a.reservation);
    assert_int_equal(level(l, &k), 1000);
    /* two open reservations settle independently */
    assert_int_equal(gw_limiter_reserve(l, &k, 400, &a), GW_LIMIT_OK);
    assert_int_equal(gw_limiter_reserve(l, &k, 400, &b), GW_LIMIT_OK);
    assert_int_equal(b.remaining_tokens, 200);
    gw_limiter_settle(l, b.reservation, 400);
    gw_limiter_settle(l, a.reservation, 0);
    assert_int_equal(level(l, &k), 600);
    /* concurrency: slots are taken at admission and freed by settle and by release */
    gw_key_info c = key("conc", 0, 0, 2);
    gw_admission s1, s2, s3;
    assert_int_equal(gw_limiter_reserve(l, &c, 10, &s1), GW_LIMIT_OK);
    assert_int_equal(gw_limiter_reserve(l, &c, 10, &s2), GW_LIMIT_OK);
    assert_true(s1.admitted && s2.admitted);
    assert_int_equal(gw_limiter_reserve(l, &c, 10, &s3), GW_LIMIT_OK);
    assert_false(s3.admitted);
    assert_true(s3.retry_after_s > 0);
    gw_limiter_release(l, s1.reservation);
    assert_int_equal(gw_limiter_reserve(l, &c, 10, &s3), GW_LIMIT_OK);
    assert_true(s3.admitted);
    gw_limiter_settle(l, s2.reservation, 3);
    gw_limiter_settle(l, s3.reservation, 3);
    assert_int_equal(gw_limiter_open_reservations(l), 0);
    /* more than a full bucket can never be admitted: told apart from "wait" */
    assert_int_equal(gw_limiter_reserve(l, &k, 1001, &a), GW_LIMIT_TOO_LARGE);
    assert_false(a.admitted);
    /* a key without limits is always admitted and still gets a handle */
    gw_key_info u = key("free", 0, 0, 0);
    assert_int_equal(gw_limiter_reserve(l, &u, 1 << 30, &a), GW_LIMIT_OK);
    assert_true(a.admitted);
    assert_int_equal(a.limit_tokens, -1);
    gw_limiter_settle(l, a.reservation, 5);
    assert_int_equal(gw_limiter_open_reservations(l), 0);
    gw_limiter_free(l);
}

/* ---- the concurrency property ------------------------------------------------------------- */

#define NTHREADS 50

typedef struct {
    gw_limiter *l;
    gw_key_info k;
    long cost;
    pthread_barrier_t *go;
    int admitted;
    gw_admission a;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    pthread_barrier_wait(r->go);
    int rc = gw_limiter_reserve(r->l, &r->k, r->cost, &r->a);
    r->admitted = rc == GW_LIMIT_OK && r->a.admitted;
    return NULL;
}

/* NTHREADS parallel reservations released together only after all decided; returns the number
 * admitted. */
static int run_race(gw_limiter *l, gw_key_info k, long cost) {
    pthread_t th[NTHREADS];
    racer r[NTHREADS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, NTHREADS);
    for (int i = 0; i < NTHREADS; i++) {
        r[i] = (racer){.l = l, .k = k, .cost = cost, .go = &go};
        assert_int_equal(pthread_create(&th[i], NULL, race, &r[i]), 0);
    }
    int n = 0;
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        n += r[i].admitted;
    }
    for (int i = 0; i < NTHREADS; i++)
        if (r[i].admitted) gw_limiter_release(l, r[i].a.reservation);
    pthread_barrier_destroy(&go);
    return n;
}

static void test_parallel_exact(void **state) {
    (void)state;
    /* the real clock here: refill over the race (ms) is far below one reservation */
    char err[128];
    gw_limiter *l = gw_limiter_new(NULL, 0, err, sizeof(err));
    assert_non_null(l);
    for (int rep = 0; rep < 20; rep++) {
        char id[24];
        snprintf(id, sizeof(id), "tok%d", rep);
        /* tokens: B = 1000, c = 100 → 10; B = 1099, c = 100 → still 10; c = 333 → 3 */
        assert_int_equal(run_race(l, key(id, 0, 1000, 0), 100), 10);
        snprintf(id, sizeof(id), "tok%db", rep);
        assert_int_equal(run_race(l, key(id, 0, 1099, 0), 100), 10);
        snprintf(id, sizeof(id), "tok%dc", rep);
        assert_int_equal(run_race(l, key(id, 0, 1000, 0), 333), 3);
        /* requests: rpm 10 → 10 */
        snprintf(id, sizeof(id), "req%d", rep);
        assert_int_equal(run_race(l, key(id, 10, 0, 0), 1), 10);
        /* concurrency slots held through the race: max_concurrent 10 → 10 */
        snprintf(id, sizeof(id), "conc%d", rep);
        assert_int_equal(run_race(l, key(id, 0, 0, 10), 1), 10);
    }
    assert_int_equal(gw_limiter_open_reservations(l), 0);
    gw_limiter_free(l);
}

/* ---- Redis unreachable: the fail_open policy ------------------------------------------------ */

static void test_redis_unreachable(void **state) {
    (void)state;
    char err[160];
    assert_null(gw_limiter_new("localhost", 0, err, sizeof(err)));
    assert_non_null(strstr(err, "HOST:PORT"));
    assert_null(gw_limiter_new("127.0.0.1:99999", 0, err, sizeof(err)));
    assert_null(gw_limiter_new(":6379", 0, err, sizeof(err)));
    /* port 1 on loopback: connection refused at once */
    gw_limiter *closed = gw_limiter_new("127.0.0.1:1", 0, err, sizeof(err));
    gw_limiter *open = gw_limiter_new("[::1]:1", 1, err, sizeof(err));
    assert_non_null(closed);
    assert_non_null(open);
    assert_false(gw_limiter_redis_up(closed));
    gw_key_info k = key("k", 2, 0, 0);
    gw_admission a;
    /* fail closed: every limited request is refused, with a Retry-After */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(gw_limiter_reserve(closed, &k, 1, &a), GW_LIMIT_UNAVAILABLE);
        assert_false(a.admitted);
        assert_true(a.retry_after_s > 0);
    }
    /* fail open: served on this process's buckets, which still enforce rpm 2 */
    int admitted = 0;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(gw_limiter_reserve(open, &k, 1, &a), GW_LIMIT_UNAVAILABLE);
        admitted += a.admitted;
        if (a.admitted) gw_limiter_settle(open, a.reservation, 1);
    }
    assert_int_equal(admitted, 2);
    /* a key without limits needs no Redis at all */
    gw_key_info u = key("u", 0, 0, 0);
    assert_int_equal(gw_limiter_reserve(closed, &u, 5, &a), GW_LIMIT_OK);
    assert_true(a.admitted);
    gw_limiter_release(closed, a.reservation);
    gw_limiter_free(closed);
    gw_limiter_free(open);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refill_tokens),
        cmocka_unit_test(test_refill_requests),
        cmocka_unit_test(test_settle_release),
        cmocka_unit_test(test_parallel_exact),
        cmocka_unit_test(test_redis_unreachable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
