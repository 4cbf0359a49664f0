/*
 * tests/test_events.c — event details (core/events): valid JSON for any bytes, non-finite numbers
 * as strings, exec vectors as arrays, and rows in run.db exactly as built.
 *
 * The expected texts are written out by hand from the JSON grammar (RFC 8259 section 7: '"' and
 * '\' are escaped with a backslash, control characters below 0x20 as \b \f \n \r \t or \u00XX),
 * not produced by cJSON, so a builder that forgot to escape or printed NaN as a number fails.
 * run.db is read back with raw SQLite, not through rundb.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "core/events.h"

static char g_tmp[256];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof(g_tmp), "/tmp/test_events_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static void expect_text(cJSON *d, const char *want) {
    char *s = ev_text(d);
    assert_string_equal(s, want);
    cJSON_free(s);
    cJSON_Delete(d);
}

static void test_strings_escaped(void **state) {
    (void)state;
    cJSON *d = ev_detail();
    ev_str(d, EVK_PATH, "/tmp/run \"q\" back\\slash\ttab\n\x01" "end");
    ev_str(d, EVK_WHY, NULL);
    expect_text(d, "{\"path\":\"/tmp/run \\\"q\\\" back\\\\slash\\ttab\\n\\u0001end\","
                   "\"why\":null}");
}

static void test_numbers(void **state) {
    (void)state;
    cJSON *d = ev_detail();
    ev_num(d, EVK_STEP, 25);
    ev_num(d, EVK_LOSS, NAN);
    ev_num(d, EVK_GRAD_NORM, INFINITY);
    ev_num(d, EVK_RATIO, -INFINITY);
    ev_num(d, EVK_SECONDS, 1.5);
    ev_bool(d, EVK_RESUME, 7);
    expect_text(d, "{\"step\":25,\"loss\":\"nan\",\"grad_norm\":\"inf\",\"ratio\":\"-inf\","
                   "\"seconds\":1.5,\"resume\":true}");
    /* a value that is not a short decimal survives the round trip exactly */
    d = ev_detail();
    ev_num(d, EVK_FAILED_AT, 1732960000.123456);
    char *s = ev_text(d);
    cJSON *back = cJSON_Parse(s);
    assert_non_null(back);
    assert_true(cJSON_GetObjectItem(back, "failed_at")->valuedouble == 1732960000.123456);
    cJSON_Delete(back);
    cJSON_free(s);
    cJSON_Delete(d);
}

static void test_argv_array(void **state) {
    (void)state;
    char *argv[] = {"./minitrain", "--run-dir", "a \"b\"\\c", "", NULL};
    cJSON *d = ev_detail();
    ev_strv(d, EVK_ARGV, argv, 4);
    expect_text(d, "{\"argv\":[\"./minitrain\",\"--run-dir\",\"a \\\"b\\\"\\\\c\",\"\"]}");
    d = ev_detail();
    ev_strv(d, EVK_ARGV, argv, 0);
    expect_text(d, "{\"argv\":[]}");
}

static void test_logged_row(void **state) {
    (void)state;
    char err[256], dir[300];
    snprintf(dir, sizeof(dir), "%s/run\t\"x\"", g_tmp);
    rundb *db = rundb_open(dir, err, sizeof(err));
    assert_non_null(db);
    cJSON *d = ev_detail();
    ev_num(d, EVK_STEP, 3);
    ev_str(d, EVK_PATH, dir);
    ev_log(db, 7, EV_CHECKPOINT, 2, d);
    ev_log(NULL, 7, EV_CHECKPOINT, 2, ev_detail()); /* no database: only frees */
    rundb_close(db);

    char path[400], want[600];
    snprintf(path, sizeof(path), "%s/run.db", dir);
    snprintf(want, sizeof(want), "{\"step\":3,\"path\":\"%s/run\\t\\\"x\\\"\"}", g_tmp);
    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open_v2(path, &raw, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(raw, "SELECT run_id, kind, rank, detail FROM events", -1,
                                        &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 7);
    assert_string_equal((const char *)sqlite3_column_text(st, 1), "checkpoint");
    assert_int_equal(sqlite3_column_int(st, 2), 2);
    assert_string_equal((const char *)sqlite3_column_text(st, 3), want);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE); /* exactly one row */
    sqlite3_finalize(st);
    sqlite3_close(raw);
}

/* Two kinds with the same text would merge in every report: the vocabulary must be distinct. */
static void test_kinds_distinct(void **state) {
    (void)state;
    const char *k[] = {EV_SUPERVISOR_START, EV_LAUNCH,   EV_RECOVERED,  EV_STRAGGLER,
                       EV_MTBF_KILL,        EV_FAILURE,  EV_TEARDOWN,   EV_GIVE_UP,
                       EV_CORDON,           EV_BACKOFF,  EV_SUPERVISOR_END, EV_START,
                       EV_EVAL,             EV_MOE,      EV_NONFINITE,  EV_PP_IDLE,
                       EV_END,              EV_ERROR,    EV_CHECKPOINT, EV_CKPT_ERROR,
                       EV_CKPT_WARNING,     EV_CKPT_WAIT, EV_CKPT_SKIP, EV_RESUME,
                       EV_FAULT};
    size_t n = sizeof(k) / sizeof(k[0]);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) assert_true(strcmp(k[i], k[j]) != 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strings_escaped),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_argv_array),
        cmocka_unit_test(test_logged_row),
        cmocka_unit_test(test_kinds_distinct),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
