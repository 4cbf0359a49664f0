/*
 * tests/test_gw_ledger.c — spend budgets and the ledger (gateway/gw_ledger.h): calendar windows
 * against Python's calendar.timegm (the epoch seconds below were computed with it, not with the
 * code under test), the month-end reset under an injected clock (restores the budget exactly
 * once), settling in the window of the reservation across midnight, cut streams and releases,
 * role budgets, cost budgets, and the concurrency property: 100 threads over TWO connections to
 * one database file (two gateways on one store) against a budget that fits 10 admit exactly 10.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gateway/gw_ledger.h"

/* python3 -c "import calendar, datetime as d; print(calendar.timegm(d.datetime.fromisoformat(S).timetuple()))" */
#define T_2026_01_31_235950 1769903990LL
#define T_2026_02_01_000000 1769904000LL
#define T_2026_02_01_000005 1769904005LL
#define T_2026_02_15_120000 1771156800LL
#define T_2026_03_01_000000 1772323200LL
#define T_2028_02_28_120000 1835352000LL
#define T_2028_02_29_000000 1835395200LL
#define T_2028_03_01_000000 1835481600LL
#define T_2026_12_31_235959 1798761599LL
#define T_2027_01_01_000000 1798761600LL

static long long fake_now;
static long long clock_fn(void *ctx) { (void)ctx; return fake_now; }

static char db_path[256];

static gw_ledger *open_fresh(void) {
    snprintf(db_path, sizeof(db_path), "/tmp/test_gw_ledger_%d.db", (int)getpid());
    unlink(db_path);
    char wal[300];
    snprintf(wal, sizeof(wal), "%s-wal", db_path);
    unlink(wal);
    snprintf(wal, sizeof(wal), "%s-shm", db_path);
    unlink(wal);
    char err[256];
    gw_ledger *l = gw_ledger_open(db_path, err, sizeof(err));
    assert_non_null(l);
    gw_ledger_set_clock(l, clock_fn, NULL);
    return l;
}

static void budget(gw_ledger *l, const char *subject, long long tpd, long long tpm, double cpd,
                   double cpm) {
    gw_budget_limits b = {tpd, tpm, cpd, cpm};
    char err[128];
    assert_int_equal(gw_ledger_set_budget(l, subject, &b, err, sizeof(err)), 0);
}

static void test_windows(void **state) {
    (void)state;
    char d[16], m[16];
    long long de, me;
    gw_ledger_windows(T_2026_01_31_235950, d, m, &de, &me);
    assert_string_equal(d, "2026-01-31");
    assert_string_equal(m, "2026-01");
    assert_int_equal(de, T_2026_02_01_000000);
    assert_int_equal(me, T_2026_02_01_000000);
    gw_ledger_windows(T_2028_02_28_120000, d, m, &de, &me); /* a leap year's February */
    assert_string_equal(d, "2028-02-28");
    assert_int_equal(de, T_2028_02_29_000000);
    assert_int_equal(me, T_2028_03_01_000000);
    gw_ledger_windows(T_2026_12_31_235959, d, m, &de, &me); /* the year's end */
    assert_string_equal(m, "2026-12");
    assert_int_equal(de, T_2027_01_01_000000);
    assert_int_equal(me, T_2027_01_01_000000);
    gw_ledger_windows(T_2027_01_01_000000, d, m, &de, &me);
    assert_string_equal(d, "2027-01-01");
}

static long long reserve(gw_ledger *l, const char *key, long long tokens, double cost, int want) {
    gw_spend_decision dec;
    assert_int_equal(gw_ledger_reserve(l, key, "user", "req", "m", tokens, cost, &dec), want);
    return dec.reservation;
}

static void test_month_reset_once(void **state) {
    (void)state;
    gw_ledger *l = open_fresh();
    fake_now = T_2026_01_31_235950;
    budget(l, "k1", 0, 100, 0, 0);
    long long r = reserve(l, "k1", 60, 0, GW_SPEND_OK);
    assert_int_equal(gw_ledger_settle(l, r, GW_SETTLE_DONE, "a", 20, 40, 0), 0);
    gw_spend_decision dec;
    assert_int_equal(gw_ledger_reserve(l, "k1", "user", "req", "m", 60, 0, &dec), GW_SPEND_REFUSED);
    assert_string_equal(dec.period, "month");
    assert_string_equal(dec.what, "tokens");
    assert_int_equal((long long)dec.used, 60);
    assert_int_equal(dec.reset_at, T_2026_02_01_000000);
    fake_now = T_2026_02_01_000000 - 1; /* the last second of January: still refused */
    reserve(l, "k1", 60, 0, GW_SPEND_REFUSED);
    fake_now = T_2026_02_01_000005; /* the reset: the whole budget again */
    r = reserve(l, "k1", 60, 0, GW_SPEND_OK);
    gw_ledger_settle(l, r, GW_SETTLE_DONE, "a", 30, 30, 0);
    reserve(l, "k1", 40, 0, GW_SPEND_OK); /* 60 + 40 = 100: exactly full */
    reserve(l, "k1", 1, 0, GW_SPEND_REFUSED);
    fake_now = T_2026_02_15_120000; /* mid-month: no second reset */
    reserve(l, "k1", 1, 0, GW_SPEND_REFUSED);
    gw_usage u;
    assert_int_equal(gw_ledger_usage(l, "k1", &u), 0);
    assert_string_equal(u.month.window, "2026-02");
    assert_int_equal(u.month.tokens, 100);
    assert_int_equal(u.month.requests, 2);
    assert_int_equal(u.open, 1);
    assert_int_equal(u.ledger_rows, 3);
    fake_now = T_2026_03_01_000000;
    reserve(l, "k1", 100, 0, GW_SPEND_OK);
    reserve(l, "k1", 101, 0, GW_SPEND_TOO_LARGE); /* never admissible, whatever the window */
    gw_ledger_close(l);
}

static void test_settle_in_reserved_window(void **state) {
    (void)state;
    gw_ledger *l = open_fresh();
    fake_now = T_2026_01_31_235950;
    budget(l, "k2", 50, 0, 0, 0);
    long long r = reserve(l, "k2", 50, 0, GW_SPEND_OK);
    fake_now = T_2026_02_01_000005; /* the answer comes after midnight */
    gw_ledger_settle(l, r, GW_SETTLE_DONE, "a", 4, 6, 0);
    gw_usage u;
    gw_ledger_usage(l, "k2", &u);
    assert_string_equal(u.day.window, "2026-02-01");
    assert_int_equal(u.day.tokens, 0);   /* the new day is untouched ... */
    assert_int_equal(u.open, 0);
    fake_now = T_2026_01_31_235950;      /* ... and January 31 holds the real 10, not 50 */
    gw_ledger_usage(l, "k2", &u);
    assert_int_equal(u.day.tokens, 10);
    assert_int_equal(u.month.tokens, 10);
    gw_ledger_close(l);
}

static void test_cut_release_cached(void **state) {
    (void)state;
    gw_ledger *l = open_fresh();
    fake_now = T_2026_02_15_120000;
    long long r1 = reserve(l, "k3", 1001, 0, GW_SPEND_OK); /* no budget: still in the ledger */
    long long r2 = reserve(l, "k3", 1001, 0, GW_SPEND_OK);
    long long r3 = reserve(l, "k3", 20, 0, GW_SPEND_OK);
    gw_usage u;
    gw_ledger_usage(l, "k3", &u);
    assert_int_equal(u.day.tokens, 2022); /* worst cases while open */
    assert_int_equal(u.open, 3);
    gw_ledger_settle(l, r1, GW_SETTLE_CUT, "a", 1, 37, 0);
    gw_ledger_settle(l, r2, GW_SETTLE_RELEASE, "", 5, 5, 0); /* a release charges nothing */
    gw_ledger_settle(l, r3, GW_SETTLE_CACHED, "", 5, 5, 0);
    gw_ledger_settle(l, r1, GW_SETTLE_DONE, "a", 500, 500, 0); /* settled once only */
    gw_ledger_usage(l, "k3", &u);
    assert_int_equal(u.day.tokens, 38);
    assert_int_equal(u.day.requests, 2); /* the released one was never served */
    assert_int_equal(u.open, 0);
    gw_ledger_row *rows;
    int n = gw_ledger_rows(l, "k3", 10, &rows);
    assert_int_equal(n, 3);
    assert_string_equal(rows[0].state, "cached");
    assert_string_equal(rows[1].state, "released");
    assert_string_equal(rows[2].state, "cut");
    assert_int_equal(rows[2].completion_tokens, 37);
    assert_int_equal(rows[2].reserved_tokens, 1001);
    free(rows);
    gw_ledger_close(l);
}

static void test_role_and_cost(void **state) {
    (void)state;
    gw_ledger *l = open_fresh();
    fake_now = T_2026_02_15_120000;
    budget(l, "role:user", 20, 0, 0, 0);
    reserve(l, "ka", 15, 0, GW_SPEND_OK);
    gw_spend_decision dec;
    assert_int_equal(gw_ledger_reserve(l, "kb", "user", "r", "m", 15, 0, &dec), GW_SPEND_REFUSED);
    assert_string_equal(dec.subject, "role:user");
    assert_int_equal(gw_ledger_reserve(l, "kc", "admin", "r", "m", 15, 0, &dec), GW_SPEND_OK);
    budget(l, "kd", 0, 0, 1.0, 0);
    budget(l, "role:user", 0, 0, 0, 0); /* removed */
    reserve(l, "kd", 1, 0.4, GW_SPEND_OK);
    long long r = reserve(l, "kd", 1, 0.4, GW_SPEND_OK);
    assert_int_equal(gw_ledger_reserve(l, "kd", "user", "r", "m", 1, 0.4, &dec), GW_SPEND_REFUSED);
    assert_string_equal(dec.what, "cost");
    gw_ledger_settle(l, r, GW_SETTLE_DONE, "a", 1, 0, 0.1); /* 0.4 + 0.1 + 0.4 = 0.9 fits now */
    reserve(l, "kd", 1, 0.4, GW_SPEND_OK);
    gw_ledger_close(l);
}

/* ---- 100 threads, two connections, one file -------------------------------------------------- */

typedef struct {
    gw_ledger *l;
    int ok;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    gw_spend_decision dec;
    w->ok = gw_ledger_reserve(w->l, "kp", "user", "r", "m", 9, 0, &dec) == GW_SPEND_OK;
    return NULL;
}

static void test_parallel_two_stores(void **state) {
    (void)state;
    gw_ledger *a = open_fresh();
    char err[256];
    gw_ledger *b = gw_ledger_open(db_path, err, sizeof(err)); /* a second "gateway" */
    assert_non_null(b);
    fake_now = T_2026_02_15_120000;
    gw_ledger_set_clock(b, clock_fn, NULL);
    budget(a, "kp", 90, 0, 0, 0); /* fits 10 reservations of 9 */
    enum { N = 100 };
    pthread_t th[N];
    worker w[N];
    for (int i = 0; i < N; i++) {
        w[i].l = i % 2 ? b : a;
        w[i].ok = 0;
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    int admitted = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        admitted += w[i].ok;
    }
    assert_int_equal(admitted, 10);
    gw_usage u;
    gw_ledger_usage(b, "kp", &u);
    assert_int_equal(u.day.tokens, 90);
    assert_int_equal(u.ledger_rows, 10);
    gw_ledger_close(b);
    gw_ledger_close(a);
    unlink(db_path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_month_reset_once),
        cmocka_unit_test(test_settle_in_reserved_window),
        cmocka_unit_test(test_cut_release_cached),
        cmocka_unit_test(test_role_and_cost),
        cmocka_unit_test(test_parallel_two_stores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
