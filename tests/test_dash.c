/*
 * tests/test_dash.c — the dashboard's parts without a browser (dash/dash.h, dash/dash_impl.h) and
 * the compare picture (report/svg.h: svg_compare), against values computed here:
 *   loopback:  which bind addresses need no token;
 *   compare:   two runs written through core/rundb.h → 2 runs × 2 panels of polylines with one
 *              point per metrics row, val dots per evaluation, the step axis mapped as the frame
 *              says (x0 80 px, width 850 px: step 1 at 80.0, step 10 at 930.0);
 *   index:     runs found under a root (a directory without run.db is not one, a garbage run.db
 *              is listed unreadable), a changed run re-read and an unchanged one not, a deleted
 *              one dropped; the entity tag moves exactly when a file does;
 *   refusals:  a non-loopback bind without a token, a missing root.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define TU_PREFIX "test_dash"
#include "tests/testutil.h"

#include "core/rundb.h"
#include "dash/dash.h"
#include "dash/dash_impl.h"
#include "report/svg.h"

static void write_run(const char *dir, const char *name, int rows, int val_every) {
    char err[512];
    rundb *db = rundb_open(dir, err, sizeof(err));
    assert_non_null(db);
    int64_t id = rundb_run_begin(db, name, "{\"lr\": 0.001}", "test", 1);
    rundb_log_event(db, id, "start", 0, "{}");
    for (int s = 1; s <= rows; s++) {
        rundb_metric m = {s, 5.0 - 0.1 * s, s % val_every ? NAN : 5.1 - 0.1 * s, 1e-3, 1, 1000,
                          0.1, 0.05, 10, 0.01 * s};
        rundb_log_metric(db, id, &m);
    }
    rundb_run_end(db, id, "completed");
    rundb_close(db);
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void test_loopback(void **state) {
    (void)state;
    const char *yes[] = {"127.0.0.1", "127.1.2.3", "::1", "localhost"};
    const char *no[] = {"0.0.0.0", "10.0.0.1", "::", "example.com", "128.0.0.1"};
    for (size_t i = 0; i < 4; i++) assert_int_equal(dash_is_loopback(yes[i]), 1);
    for (size_t i = 0; i < 5; i++) assert_int_equal(dash_is_loopback(no[i]), 0);
    assert_int_equal(dash_is_loopback(NULL), 0);
}

static void test_compare(void **state) {
    (void)state;
    char a[512], b[512];
    write_run(tu_path(a, sizeof(a), "a"), "run_a", 10, 5);
    write_run(tu_path(b, sizeof(b), "b"), "run_b", 5, 100);
    sqlite3 *da, *db;
    char pa[600], pb[600];
    snprintf(pa, sizeof(pa), "%s/run.db", a);
    snprintf(pb, sizeof(pb), "%s/run.db", b);
    assert_int_equal(sqlite3_open_v2(pa, &da, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_open_v2(pb, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    svg_compare_run runs[2] = {{da, "run_a"}, {db, "run_b"}};
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(svg_compare(runs, 2, f), 1);
    fclose(f);
    assert_int_equal(count(text, "class=\"cmp-series\""), 4);
    /* val dots: run a evaluated at steps 5 and 10, on both panels */
    assert_int_equal(count(text, "class=\"cmp-val\" data-run=\"0\""), 4);
    assert_int_equal(count(text, "class=\"cmp-val\" data-run=\"1\""), 0);
    /* the first polyline is run a by step: 10 points, step 1 at x 80.0, step 10 at x 930.0 */
    const char *p = strstr(text, "class=\"cmp-series\" data-run=\"0\"");
    assert_non_null(p);
    p = strstr(p, "points=\"") + 8;
    const char *end = strchr(p, '"');
    char pts[2048];
    snprintf(pts, sizeof(pts), "%.*s", (int)(end - p), p);
    assert_int_equal(count(pts, ","), 10);
    assert_true(strncmp(pts, "80.0,", 5) == 0);
    assert_non_null(strstr(pts, "930.0,"));
    assert_non_null(strstr(text, "run_b"));
    free(text);
    /* nothing to draw: no losses */
    svg_compare_run none[1] = {{NULL, "x"}};
    f = open_memstream(&text, &len);
    assert_int_equal(svg_compare(none, 1, f), 0);
    fclose(f);
    free(text);
    sqlite3_close(da);
    sqlite3_close(db);
}

static void test_index(void **state) {
    (void)state;
    char root[512], a[600], b[600], junk[600], empty[600], path[700];
    tu_path(root, sizeof(root), "runs");
    snprintf(a, sizeof(a), "%s/a", root);
    snprintf(b, sizeof(b), "%s/group/b", root); /* two levels deep */
    snprintf(junk, sizeof(junk), "%s/junk", root);
    snprintf(empty, sizeof(empty), "%s/empty", root);
    write_run(a, "run_a", 10, 5);
    write_run(b, "run_b", 5, 100);
    char cmd[2000];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s' '%s' && printf 'not a database, at all....' > '%s/run.db'",
             junk, empty, junk);
    assert_int_equal(system(cmd), 0);
    const char *roots[1] = {root};
    dash_index ix;
    dash_index_init(&ix, roots, 1);
    dash_index_refresh(&ix);
    assert_int_equal(ix.n, 3);
    dash_run *ra = dash_index_find(&ix, a), *rb = dash_index_find(&ix, b), *rj = dash_index_find(&ix, junk);
    assert_non_null(ra);
    assert_non_null(rb);
    assert_non_null(rj);
    assert_null(dash_index_find(&ix, empty));
    assert_int_equal(ra->ok, 1);
    assert_int_equal(ra->steps, 10);
    assert_string_equal(ra->status, "completed");
    assert_true(fabs(ra->loss - 4.0) < 1e-9); /* 5.0 - 0.1 * 10 */
    assert_true(fabs(ra->val - 4.1) < 1e-9);
    assert_int_equal(rj->ok, 0);
    assert_non_null(strstr(rj->err, "not a database"));
    dash_run *all[1] = {rb};
    char tag0[40], tag1[40];
    dash_etag(all, 1, "x", tag0, sizeof(tag0));
    const char *b_name = rb->name; /* not re-read when nothing changed: same allocation */
    dash_index_refresh(&ix);
    rb = dash_index_find(&ix, b);
    assert_ptr_equal(rb->name, b_name);
    all[0] = rb;
    dash_etag(all, 1, "x", tag1, sizeof(tag1));
    assert_string_equal(tag0, tag1);
    /* run b grows: re-read, and its tag moves */
    char err[512];
    rundb *w = rundb_open(b, err, sizeof(err));
    rundb_metric m = {6, 4.2, NAN, 1e-3, 1, 1000, 0.1, 0.05, 10, 0.06};
    rundb_log_metric(w, 1, &m);
    rundb_close(w);
    dash_index_refresh(&ix);
    rb = dash_index_find(&ix, b);
    assert_int_equal(rb->steps, 6);
    all[0] = rb;
    dash_etag(all, 1, "x", tag1, sizeof(tag1));
    assert_string_not_equal(tag0, tag1);
    /* deleted: dropped */
    snprintf(path, sizeof(path), "%s/run.db", a);
    assert_int_equal(unlink(path), 0);
    dash_index_refresh(&ix);
    assert_int_equal(ix.n, 2);
    assert_null(dash_index_find(&ix, a));
    dash_index_free(&ix);
}

static void test_refusals(void **state) {
    (void)state;
    char root[512], err[512];
    tu_path(root, sizeof(root), "r");
    assert_int_equal(system("true"), 0);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", root);
    assert_int_equal(system(cmd), 0);
    const char *roots[1] = {root};
    int port = 0;
    dash_opts o = {roots, 1, "0.0.0.0", 0, NULL, 0, NULL};
    assert_null(dash_start(&o, &port, err, sizeof(err)));
    assert_non_null(strstr(err, "--token"));
    const char *gone[1] = {"/nonexistent/minitrain/runs"};
    dash_opts o2 = {gone, 1, "127.0.0.1", 0, NULL, 0, NULL};
    assert_null(dash_start(&o2, &port, err, sizeof(err)));
    assert_non_null(strstr(err, "no such directory"));
    dash_opts o3 = {roots, 1, "127.0.0.1", 0, NULL, 0, NULL};
    dash_server *s = dash_start(&o3, &port, err, sizeof(err));
    assert_non_null(s);
    assert_true(port > 0);
    dash_stop(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loopback),
        cmocka_unit_test_setup_teardown(test_compare, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_index, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_refusals, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
