/*
 * tests/test_rundb.c — the run database (core/rundb) and `minitrain report` (cmd/report.c).
 *
 * Writes go through the rundb API; every check reads back with raw SQLite queries or parses the
 * report's JSON, and compares with values this test computes on its own (its own median, its own
 * "last non-NULL"), so a wrong column, a NAN stored as a number, a wrong median or a wrong ordering
 * across restarts fails here.
 */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <sqlite3.h>

#include "cmd/cmd.h"
#include "core/rundb.h"

#define TU_PREFIX "test_rundb"
#include "tests/testutil.h"

/* ---- raw SQLite helpers (independent of rundb) ------------------------------------------------ */

static sqlite3 *raw_open(const char *dir) {
    char path[512];
    snprintf(path, sizeof(path), "%s/run.db", dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

/* First column of the first row as double; NAN for NULL. Fails the test if there is no row. */
static double raw_real(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    double v = sqlite3_column_type(st, 0) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void raw_text(sqlite3 *db, const char *sql, char *out, size_t n) {
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const unsigned char *s = sqlite3_column_text(st, 0);
    snprintf(out, n, "%s", s ? (const char *)s : "(null)");
    sqlite3_finalize(st);
}

/* ---- report runner: stdout captured into a file, then parsed ---------------------------------- */

static int run_capture(int argc, char **argv, char *out, size_t outlen) {
    char file[300];
    snprintf(file, sizeof(file), "%s/report.out", tu_dir);
    fflush(stdout);
    int saved = dup(STDOUT_FILENO);
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, STDOUT_FILENO);
    close(fd);
    int rc = cmd_report(argc, argv);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    FILE *f = fopen(file, "r");
    assert_non_null(f);
    size_t got = fread(out, 1, outlen - 1, f);
    out[got] = '\0';
    fclose(f);
    return rc;
}

static int run_report(const char *dir, int json, char *out, size_t outlen) {
    char *argv[] = {"report", "--run", (char *)dir, json ? "--json" : NULL, NULL};
    return run_capture(json ? 4 : 3, argv, out, outlen);
}

static double jnum(const cJSON *o, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    assert_non_null(it);
    if (cJSON_IsNull(it)) return NAN;
    assert_true(cJSON_IsNumber(it));
    return it->valuedouble;
}

static void assert_close(double got, double want) {
    assert_true(isfinite(got));
    if (fabs(got - want) > 1e-12 * fmax(1.0, fabs(want))) fail_msg("got %.17g want %.17g", got, want);
}

/* The test's own median: insertion sort of a copy, middle (mean of the two middles if even). */
static double my_median(const double *x, int n) {
    double s[64];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i])) continue;
        int j = k++;
        while (j > 0 && s[j - 1] > x[i]) {
            s[j] = s[j - 1];
            j--;
        }
        s[j] = x[i];
    }
    return (k % 2) ? s[k / 2] : (s[k / 2 - 1] + s[k / 2]) / 2;
}

/* ---- tests ------------------------------------------------------------------------------------ */

#define NM 7
static const int STEPS[NM] = {0, 1, 2, 3, 3, 4, 5}; /* step 3 recomputed: a duplicate row */
static const double TRAIN[NM] = {4.5, 4.1, 3.9, 3.7, 3.65, 3.5, 3.4};
static const double VAL[NM] = {NAN, NAN, 3.95, NAN, 3.8, 3.85, NAN};
static const double TPS[NM] = {1000, 3000, 2000, 5000, 4000, 1500, 2500};
static const double MFU[NM] = {0.10, NAN, 0.30, 0.25, 0.40, 0.20, 0.35};

static void log_first_run(rundb *db, int64_t *run_id) {
    *run_id = rundb_run_begin(db, "unit", "{\"n_layer\": 2, \"lr\": 0.001}", "abc1234", 2);
    assert_true(*run_id > 0);
    rundb_log_event(db, *run_id, "start", 0, "hello");
    for (int i = 0; i < NM; i++) {
        rundb_metric m = {.step = STEPS[i], .train_loss = TRAIN[i], .val_loss = VAL[i],
                          .lr = 1e-3 * (i + 1), .grad_norm = 0.5 + i, .tokens_per_s = TPS[i],
                          .mfu = MFU[i], .mfu_theoretical = MFU[i] / 2, .step_ms = 10.0 + i,
                          .wall_s = 0.5 * (i + 1)};
        rundb_log_metric(db, *run_id, &m);
    }
    rundb_log_event(db, *run_id, "checkpoint", 0, "step 2");
    rundb_log_event(db, *run_id, "checkpoint", 1, NULL);
}

static void test_write_and_read_back(void **state) {
    (void)state;
    char dir[300], err[256] = "";
    snprintf(dir, sizeof(dir), "%s/a/b/run", tu_dir); /* nested: rundb_open must mkdir -p */
    rundb *db = rundb_open(dir, err, sizeof(err));
    assert_non_null(db);
    int64_t id;
    log_first_run(db, &id);
    rundb_run_end(db, id, "completed");
    rundb_close(db);

    sqlite3 *raw = raw_open(dir);
    char s[256];
    raw_text(raw, "PRAGMA journal_mode", s, sizeof(s));
    assert_string_equal(s, "wal");
    assert_int_equal((int)raw_real(raw, "SELECT COUNT(*) FROM metrics"), NM);
    /* NAN val_loss stored as NULL; real values intact; column order right. */
    int nan_val = 0, nan_mfu = 0;
    for (int i = 0; i < NM; i++) nan_val += isnan(VAL[i]), nan_mfu += isnan(MFU[i]);
    assert_int_equal((int)raw_real(raw, "SELECT COUNT(*) FROM metrics WHERE val_loss IS NULL"),
                     nan_val);
    assert_int_equal((int)raw_real(raw, "SELECT COUNT(*) FROM metrics WHERE mfu IS NULL"), nan_mfu);
    assert_true(isnan(raw_real(raw, "SELECT val_loss FROM metrics WHERE step=0")));
    assert_close(raw_real(raw, "SELECT val_loss FROM metrics WHERE step=2"), 3.95);
    assert_close(raw_real(raw, "SELECT train_loss FROM metrics WHERE step=5"), 3.4);
    assert_close(raw_real(raw, "SELECT lr FROM metrics WHERE step=5"), 7e-3);
    assert_close(raw_real(raw, "SELECT grad_norm FROM metrics WHERE step=5"), 6.5);
    assert_close(raw_real(raw, "SELECT tokens_per_s FROM metrics WHERE step=4"), 1500);
    assert_close(raw_real(raw, "SELECT mfu_theoretical FROM metrics WHERE step=4"), 0.10);
    assert_close(raw_real(raw, "SELECT step_ms FROM metrics WHERE step=4"), 15.0);
    assert_close(raw_real(raw, "SELECT wall_s FROM metrics WHERE step=4"), 3.0);
    assert_int_equal((int)raw_real(raw, "SELECT COUNT(*) FROM metrics WHERE step=3"), 2);
    /* runs row */
    raw_text(raw, "SELECT status FROM runs", s, sizeof(s));
    assert_string_equal(s, "completed");
    raw_text(raw, "SELECT name || '|' || git_commit || '|' || world_size FROM runs", s, sizeof(s));
    assert_string_equal(s, "unit|abc1234|2");
    double t0 = raw_real(raw, "SELECT started_at FROM runs"),
           t1 = raw_real(raw, "SELECT ended_at FROM runs");
    assert_true(t0 > 1.6e9 && t1 >= t0 && t1 - t0 < 60); /* unix seconds, this decade */
    /* events */
    assert_int_equal((int)raw_real(raw, "SELECT COUNT(*) FROM events WHERE kind='checkpoint'"), 2);
    assert_int_equal((int)raw_real(raw, "SELECT SUM(rank) FROM events"), 1);
    assert_int_equal((int)raw_real(raw, "SELECT COUNT(*) FROM events WHERE detail IS NULL"), 1);
    raw_text(raw, "SELECT detail FROM events WHERE kind='start'", s, sizeof(s));
    assert_string_equal(s, "hello");
    sqlite3_close(raw);
}

static void test_report_json(void **state) {
    (void)state;
    char dir[300], err[256] = "";
    snprintf(dir, sizeof(dir), "%s/rep", tu_dir);
    rundb *db = rundb_open(dir, err, sizeof(err));
    assert_non_null(db);
    int64_t id;
    log_first_run(db, &id);
    rundb_run_end(db, id, "failed");
    rundb_close(db);

    static char out[65536];
    assert_int_equal(run_report(dir, 1, out, sizeof(out)), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_close(jnum(j, "runs"), 1);
    assert_close(jnum(j, "steps"), 6); /* distinct steps 0..5 */
    assert_close(jnum(j, "tokens_per_s"), my_median(TPS, NM));
    assert_close(jnum(j, "mfu"), my_median(MFU, NM)); /* 6 values: even-count median */
    double half[NM];
    for (int i = 0; i < NM; i++) half[i] = MFU[i] / 2;
    assert_close(jnum(j, "mfu_theoretical"), my_median(half, NM));
    double last_val = NAN, best_val = INFINITY;
    for (int i = 0; i < NM; i++)
        if (!isnan(VAL[i])) {
            last_val = VAL[i];
            best_val = fmin(best_val, VAL[i]);
        }
    assert_close(jnum(j, "final_val_loss"), last_val);
    assert_close(jnum(j, "best_val_loss"), best_val);
    assert_close(jnum(j, "final_train_loss"), TRAIN[NM - 1]);
    assert_close(jnum(j, "first_train_loss"), TRAIN[0]);
    assert_true(jnum(j, "wall_s") >= 0);
    assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, "failed");
    const cJSON *ev = cJSON_GetObjectItem(j, "events");
    assert_close(jnum(ev, "checkpoint"), 2);
    assert_close(jnum(ev, "start"), 1);
    assert_close(jnum(cJSON_GetObjectItem(j, "config"), "n_layer"), 2); /* embedded as object */
    cJSON_Delete(j);

    /* The text form runs too and names the status. */
    assert_int_equal(run_report(dir, 0, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "failed"));
    assert_non_null(strstr(out, "checkpoint 2"));
}

/* A restart appends a second run: figures span both, in run order; steps count distinct steps. */
static void test_report_restart(void **state) {
    (void)state;
    char dir[300], err[256] = "";
    snprintf(dir, sizeof(dir), "%s/restart", tu_dir);
    rundb *db = rundb_open(dir, err, sizeof(err));
    assert_non_null(db);
    int64_t id1;
    log_first_run(db, &id1);
    rundb_run_end(db, id1, "failed");
    int64_t id2 = rundb_run_begin(db, "unit", "{}", "abc1234", 2);
    assert_true(id2 > id1);
    /* Run 2 resumes from step 4 (recomputes 4, 5), wall_s restarts from 0 and is smaller than
     * run 1's: ordering must follow the run, not the raw wall_s. */
    const double train2[3] = {3.45, 3.35, 3.3}, val2[3] = {NAN, 3.7, NAN};
    rundb_begin_batch(db);
    for (int i = 0; i < 3; i++) {
        rundb_metric m = {.step = 4 + i, .train_loss = train2[i], .val_loss = val2[i],
                          .lr = NAN, .grad_norm = NAN, .tokens_per_s = 9000, .mfu = NAN,
                          .mfu_theoretical = NAN, .step_ms = NAN, .wall_s = 0.01 * (i + 1)};
        rundb_log_metric(db, id2, &m);
    }
    rundb_commit_batch(db);
    rundb_log_event(db, id2, "restart", 0, "from step 4");
    rundb_close(db); /* run 2 never ended: status stays "running" */

    static char out[65536];
    assert_int_equal(run_report(dir, 1, out, sizeof(out)), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_close(jnum(j, "runs"), 2);
    assert_close(jnum(j, "steps"), 7); /* 0..6 */
    assert_close(jnum(j, "final_train_loss"), 3.3);
    assert_close(jnum(j, "final_val_loss"), 3.7);
    assert_close(jnum(j, "best_val_loss"), 3.7);
    assert_close(jnum(j, "first_train_loss"), TRAIN[0]);
    double tps[NM + 3];
    for (int i = 0; i < NM; i++) tps[i] = TPS[i];
    for (int i = 0; i < 3; i++) tps[NM + i] = 9000;
    assert_close(jnum(j, "tokens_per_s"), my_median(tps, NM + 3));
    assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, "running");
    cJSON_Delete(j);
}

static void test_report_errors(void **state) {
    (void)state;
    static char out[4096];
    char dir[300];
    snprintf(dir, sizeof(dir), "%s/nothing_here", tu_dir);
    assert_int_not_equal(run_report(dir, 1, out, sizeof(out)), 0);
    char *bad[] = {"report", "--bogus", NULL};
    assert_int_equal(cmd_report(2, bad), 2);
    char *norun[] = {"report", "--json", NULL};
    assert_int_equal(cmd_report(2, norun), 2);
    char *help[] = {"report", "--help", NULL};
    assert_int_equal(run_capture(2, help, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "usage: minitrain report"));

    /* A file that is not a database: rundb_open says which path; report refuses without a crash. */
    snprintf(dir, sizeof(dir), "%s/garbage", tu_dir);
    mkdir(dir, 0755);
    char path[400];
    snprintf(path, sizeof(path), "%s/run.db", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 200; i++) fputs("this is not sqlite ", f);
    fclose(f);
    char err[512] = "";
    assert_null(rundb_open(dir, err, sizeof(err)));
    assert_non_null(strstr(err, path));
    assert_int_not_equal(run_report(dir, 1, out, sizeof(out)), 0);

    /* A database without our tables. */
    snprintf(dir, sizeof(dir), "%s/foreign", tu_dir);
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/run.db", dir);
    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open(path, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, "CREATE TABLE x(a)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
    assert_int_not_equal(run_report(dir, 1, out, sizeof(out)), 0);
}

/* Several processes append events at once (ranks): WAL + busy_timeout must keep every row. */
static void test_concurrent_writers(void **state) {
    (void)state;
    char dir[300], err[256] = "";
    snprintf(dir, sizeof(dir), "%s/conc", tu_dir);
    enum { NPROC = 3, NEV = 150 };
    pid_t pids[NPROC];
    for (int p = 0; p < NPROC; p++) {
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            rundb *db = rundb_open(dir, err, sizeof(err)); /* first opens race too */
            if (db == NULL) _exit(3);
            for (int i = 0; i < NEV; i++) rundb_log_event(db, 1, "tick", p, NULL);
            rundb_close(db);
            _exit(0);
        }
    }
    for (int p = 0; p < NPROC; p++) {
        int st = 0;
        assert_int_equal(waitpid(pids[p], &st, 0), pids[p]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    sqlite3 *raw = raw_open(dir);
    assert_int_equal((int)raw_real(raw, "SELECT COUNT(*) FROM events"), NPROC * NEV);
    for (int p = 0; p < NPROC; p++) {
        char sql[96];
        snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM events WHERE rank=%d", p);
        assert_int_equal((int)raw_real(raw, sql), NEV);
    }
    sqlite3_close(raw);
}

static void test_git_commit_and_path(void **state) {
    (void)state;
    const char *c = rundb_git_commit();
    assert_non_null(c);
    assert_true(strlen(c) > 0);
    assert_ptr_equal(c, rundb_git_commit()); /* computed once */
    char p[64];
    assert_string_equal(rundb_path("runs/x/", p, sizeof(p)), "runs/x/run.db");
    assert_string_equal(rundb_path("runs/x", p, sizeof(p)), "runs/x/run.db");
}

/* The supervisor's verdict on rows left "running" by processes that died: only those change. */
static void test_end_running(void **state) {
    (void)state;
    char dir[300], err[256];
    snprintf(dir, sizeof(dir), "%s/endrun", tu_dir);
    rundb *db = rundb_open(dir, err, sizeof(err));
    assert_non_null(db);
    int64_t a = rundb_run_begin(db, "a", NULL, NULL, 1);
    int64_t b = rundb_run_begin(db, "b", NULL, NULL, 1);
    int64_t c = rundb_run_begin(db, "c", NULL, NULL, 1);
    rundb_run_end(db, b, "completed");
    assert_int_equal(rundb_end_running(db, "crashed", 1234.5), 2);
    assert_int_equal(rundb_end_running(db, "hung", 99), 0); /* nothing is running any more */
    rundb_close(db);
    sqlite3 *r = raw_open(dir);
    char q[160];
    snprintf(q, sizeof(q), "SELECT ended_at FROM runs WHERE id = %lld AND status = 'crashed'",
             (long long)a);
    assert_true(raw_real(r, q) == 1234.5);
    snprintf(q, sizeof(q), "SELECT ended_at FROM runs WHERE id = %lld AND status = 'crashed'",
             (long long)c);
    assert_true(raw_real(r, q) == 1234.5);
    snprintf(q, sizeof(q), "SELECT ended_at > 1e9 FROM runs WHERE id = %lld AND status = "
             "'completed'", (long long)b);
    assert_true(raw_real(r, q) == 1);
    sqlite3_close(r);
    assert_true(rundb_status_valid("killed"));
    assert_false(rundb_status_valid("gave_up")); /* a job status, not a run row's */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_end_running),
        cmocka_unit_test(test_write_and_read_back), cmocka_unit_test(test_report_json),
        cmocka_unit_test(test_report_restart),      cmocka_unit_test(test_report_errors),
        cmocka_unit_test(test_concurrent_writers),  cmocka_unit_test(test_git_commit_and_path),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
