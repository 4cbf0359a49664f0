/*
 * tests/test_report_svg.c — the report's pictures (report/svg.h) drawn from a run.db whose events
 * were written here with known values: what each picture says (titles, tooltips, element counts)
 * is checked against figures computed in this file by hand, not read back from the drawing code.
 *
 *   pipeline: two stages on different t0 clocks; of the complete steps the one of median
 *             duration is drawn; measured idle share, ideal bubble, one-clock box alignment
 *   moe:      per-layer loads and drops → load share × E in the cells, overall drop rate
 *   layout:   tp 2 × pp 2 × dp 2 with ep 2 → rank coordinates and the TP/PP groups in words
 *   applicability: a dense single-stage run draws no pipeline and no MoE picture
 *   html:     the page holds each applicable section once, no script, escaped event text
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

#define TU_PREFIX "test_report_svg"
#include "tests/testutil.h"

#include "core/rundb.h"
#include "report/report.h"
#include "report/svg.h"

/* Draw picture `draw` of db into a malloc'd string (caller frees); *drawn its return value. */
static char *draw_text(int (*draw)(sqlite3 *, FILE *), rundb *db, int *drawn) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    *drawn = draw(rundb_sqlite(db), f);
    fclose(f);
    return text;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

static rundb *fresh_db(const char *name, const char *config, int world) {
    char dir[512], err[256];
    tu_path(dir, sizeof(dir), name);
    rundb *db = rundb_open(dir, err, sizeof(err));
    assert_non_null(db);
    assert_true(rundb_run_begin(db, name, config, "test", world) > 0);
    return db;
}

/* One pp_timeline event of `schedule` with `chunks` chunks: spans given in absolute ms (from 0),
 * stored as offsets from t0; M = (microbatch, chunk) pairs; w NULL = no W spans. */
static void timeline_of(rundb *db, const char *schedule, int chunks, int step, int stage,
                        double t0_ms, const double *f, const double *b, const double *w, int M) {
    char d[2048];
    int n = snprintf(d, sizeof(d), "{\"step\":%d,\"stage\":%d,\"stages\":2,\"schedule\":\"%s\","
                     "\"chunks\":%d,\"t0\":%.6f,\"forward_ms\":[", step, stage, schedule, chunks,
                     1.8e9 + t0_ms / 1e3);
    for (int i = 0; i < 2 * M; i++) n += snprintf(d + n, sizeof(d) - n, "%s%g", i ? "," : "", f[i] - t0_ms);
    n += snprintf(d + n, sizeof(d) - n, "],\"backward_ms\":[");
    for (int i = 0; i < 2 * M; i++) n += snprintf(d + n, sizeof(d) - n, "%s%g", i ? "," : "", b[i] - t0_ms);
    if (w) {
        n += snprintf(d + n, sizeof(d) - n, "],\"weight_ms\":[");
        for (int i = 0; i < 2 * M; i++) n += snprintf(d + n, sizeof(d) - n, "%s%g", i ? "," : "", w[i] - t0_ms);
    }
    snprintf(d + n, sizeof(d) - n, "]}");
    rundb_log_event(db, 1, "pp_timeline", stage, d);
}

static void timeline(rundb *db, int step, int stage, double t0_ms, const double *f, const double *b,
                     int M) {
    timeline_of(db, "1f1b", 1, step, stage, t0_ms, f, b, NULL, M);
}

static void test_pipeline_picture(void **state) {
    (void)state;
    rundb *db = fresh_db("pp", "{\"tp\":1,\"pp\":2,\"dp\":1,\"ep\":1}", 2);
    /* step 4, absolute ms. Stage 0 (its t0 at 0): F 0-1, 1-2, 2-3; B 6-7, 8-9, 10-11.
     * Stage 1 (its t0 at 0.5 ms): F 1-2, 3-4, 5-6; B 2-3, 4-5, 6-7. Window 0-11 ms: each stage
     * busy 6 ms, idle 5/11 = 45%; the ideal bubble (P-1)/(M+P-1) = 1/4 = 25%. */
    const double f0[] = {0, 1, 1, 2, 2, 3}, b0[] = {6, 7, 8, 9, 10, 11};
    const double f1[] = {1, 2, 3, 4, 5, 6}, b1[] = {2, 3, 4, 5, 6, 7};
    /* the picture shows the complete step of median duration: step 2 stretched to 33 ms, step
     * 8 shrunk to 10 ms, step 4 (11 ms) between them; step 6 is incomplete */
    double f0s[6], b0s[6], f1s[6], b1s[6], f0q[6], b0q[6], f1q[6], b1q[6];
    for (int i = 0; i < 6; i++) {
        f0s[i] = 3 * f0[i], b0s[i] = 3 * b0[i], f1s[i] = 3 * f1[i], b1s[i] = 3 * b1[i];
        f0q[i] = f0[i] * 10 / 11, b0q[i] = b0[i] * 10 / 11, f1q[i] = f1[i] * 10 / 11,
        b1q[i] = b1[i] * 10 / 11;
    }
    timeline(db, 2, 0, 0, f0s, b0s, 3);
    timeline(db, 2, 1, 1.5, f1s, b1s, 3);
    timeline(db, 4, 0, 0, f0, b0, 3);
    timeline(db, 4, 1, 0.5, f1, b1, 3);
    timeline(db, 6, 0, 0, f0, b0, 3); /* stage 1 never logged step 6 */
    timeline(db, 8, 0, 0, f0q, b0q, 3);
    timeline(db, 8, 1, 0.5, f1q, b1q, 3);
    int drawn;
    char *svg = draw_text(svg_pipeline, db, &drawn);
    assert_int_equal(drawn, 1);
    assert_non_null(strstr(svg, "step 4: 1F1B, 2 stages × 3 microbatches"));
    assert_non_null(strstr(svg, "measured idle 45%, ideal (p−1)/(m+p−1) 25%"));
    assert_int_equal(count(svg, "class=\"pp-forward\""), 6);
    assert_int_equal(count(svg, "class=\"pp-backward\""), 6);
    assert_int_equal(count(svg, ">idle 45%<"), 2);
    /* stage 1's offsets put back on the common clock */
    assert_non_null(strstr(svg, "stage 1 forward of microbatch 0: 1.00–2.00 ms"));
    assert_non_null(strstr(svg, "stage 0 backward of microbatch 2: 10.00–11.00 ms"));
    free(svg);
    rundb_close(db);
}

/* ZB-H1: B and W boxes apart. P 2, M 2, absolute ms. Stage 1: F0 1-2, B0 2-3, F1 3-4, B1 4-5,
 * W0 5-6, W1 6-7. Stage 0: F0 0-1, F1 1-2, B0 3-4, W0 4-5, B1 5-6, W1 6-7. Window 0-7: each stage
 * busy 6, idle 1/7 = 14%; ideal with F = B = W: (P-1)(F+B-W) / (M(F+B+W) + (P-1)(F+B-W)) = 1/7. */
static void test_pipeline_picture_zb(void **state) {
    (void)state;
    rundb *db = fresh_db("ppzb", "{\"tp\":1,\"pp\":2,\"dp\":1,\"ep\":1}", 2);
    const double f0[] = {0, 1, 1, 2}, b0[] = {3, 4, 5, 6}, w0[] = {4, 5, 6, 7};
    const double f1[] = {1, 2, 3, 4}, b1[] = {2, 3, 4, 5}, w1[] = {5, 6, 6, 7};
    timeline_of(db, "zb-h1", 1, 3, 0, 0, f0, b0, w0, 2);
    timeline_of(db, "zb-h1", 1, 3, 1, 0, f1, b1, w1, 2);
    int drawn;
    char *svg = draw_text(svg_pipeline, db, &drawn);
    assert_int_equal(drawn, 1);
    assert_non_null(strstr(svg, "step 3: ZB-H1, 2 stages × 2 microbatches — measured idle 14%"));
    assert_non_null(strstr(svg, "ideal bubble (p−1)(F+B−W) 14%"));
    assert_int_equal(count(svg, "class=\"pp-forward\""), 4);
    assert_int_equal(count(svg, "class=\"pp-backward\""), 4);
    assert_int_equal(count(svg, "class=\"pp-weight\""), 4);
    assert_non_null(strstr(svg, "stage 0 B (input gradient) of microbatch 1: 5.00–6.00 ms"));
    assert_non_null(strstr(svg, "stage 0 W (weight gradient) of microbatch 1: 6.00–7.00 ms"));
    assert_non_null(strstr(svg, "W: weight gradient"));
    free(svg);
    rundb_close(db);
}

/* Interleaved, P 2, v 2, M 2: four (microbatch, chunk) pairs per stage, labelled i.c; ideal
 * (P-1)/(v·M+P-1) = 1/5 = 20%. Pair c·M + i: stage 0 F 0.0 0-1, 1.0 1-2, 0.1 3-4, 1.1 4-5. */
static void test_pipeline_picture_interleaved(void **state) {
    (void)state;
    rundb *db = fresh_db("ppil", "{\"tp\":1,\"pp\":2,\"dp\":1,\"ep\":1}", 2);
    const double f0[] = {0, 1, 1, 2, 3, 4, 4, 5}, b0[] = {9, 10, 10, 11, 6, 7, 7, 8};
    const double f1[] = {1, 2, 2, 3, 4, 5, 5, 6}, b1[] = {8, 9, 9, 10, 5, 6, 6, 7};
    timeline_of(db, "interleaved", 2, 5, 0, 0, f0, b0, NULL, 4);
    timeline_of(db, "interleaved", 2, 5, 1, 0, f1, b1, NULL, 4);
    int drawn;
    char *svg = draw_text(svg_pipeline, db, &drawn);
    assert_int_equal(drawn, 1);
    assert_non_null(strstr(svg, "step 5: interleaved 1F1B, 2 stages × 2 chunks × 2 microbatches"));
    assert_non_null(strstr(svg, "ideal (p−1)/(v·m+p−1) 20%"));
    assert_int_equal(count(svg, "class=\"pp-forward\""), 8);
    assert_int_equal(count(svg, "class=\"pp-weight\""), 0);
    assert_non_null(strstr(svg, "stage 0 forward of microbatch 1, chunk 1: 4.00–5.00 ms"));
    assert_non_null(strstr(svg, ">1.1</text>"));
    free(svg);
    rundb_close(db);
}

static void test_moe_picture(void **state) {
    (void)state;
    rundb *db = fresh_db("moe", "{\"moe_every\":2,\"n_experts\":2}", 1);
    /* layers 1 and 3, two experts: layer 1 gets 30 | 10 (share × E = 1.5 | 0.5) with 4 dropped,
     * layer 3 20 | 20 with none; three steps: 12 of 240 assignments dropped = 5.0%. */
    for (int s = 1; s <= 3; s++) {
        char d[256];
        snprintf(d, sizeof(d), "{\"step\":%d,\"aux_loss\":0.01,\"dropped\":4,\"load\":[30,10,20,20],"
                 "\"dropped_layer\":[4,0],\"layers\":[1,3],\"experts\":2}", s);
        rundb_log_event(db, 1, "moe", 0, d);
    }
    int drawn;
    char *svg = draw_text(svg_moe, db, &drawn);
    assert_int_equal(drawn, 1);
    assert_non_null(strstr(svg, "2 layers × 2 experts, steps 1–3 — 5.0% of assignments dropped"));
    assert_int_equal(count(svg, "class=\"moe-cell\""), 3 * 4);
    assert_non_null(strstr(svg, "layer 1 expert 0 step 2: load 1.50 (30 assignments)"));
    assert_non_null(strstr(svg, "layer 1 expert 1 step 3: load 0.50 (10 assignments)"));
    assert_non_null(strstr(svg, "layer 3 expert 1 step 1: load 1.00 (20 assignments)"));
    free(svg);
    rundb_close(db);
}

static void test_layout_picture(void **state) {
    (void)state;
    rundb *db = fresh_db("layout", "{\"tp\":2,\"pp\":2,\"dp\":2,\"ep\":2,\"n_layer\":4,"
                         "\"moe_every\":2,\"n_experts\":4,\"pp_layers\":\"\"}", 8);
    int drawn;
    char *svg = draw_text(svg_layout, db, &drawn);
    assert_int_equal(drawn, 1);
    assert_int_equal(count(svg, "class=\"layout-rank\""), 8);
    /* rank = tp_rank + tp·(dp_rank + dp·pp_rank): 6 = 0 + 2·(1 + 2·1) */
    assert_non_null(strstr(svg, "rank 6: tp 0, pp 1, dp 1, ep 1"));
    assert_non_null(strstr(svg, "rank 3: tp 1, pp 0, dp 1, ep 1"));
    assert_non_null(strstr(svg, "TP groups: {0,1} {2,3} {4,5} {6,7}"));
    assert_non_null(strstr(svg, "PP groups (one pipeline each): {0,4} {1,5} {2,6} {3,7}"));
    assert_non_null(strstr(svg, "stage 1: layers 2–3 + head"));
    assert_int_equal(count(svg, "class=\"layout-tp\""), 2 * 2);  /* dp rows per stage */
    assert_int_equal(count(svg, "class=\"layout-ep\""), 2 * 2);  /* tp columns × dp/ep per stage */
    free(svg);
    rundb_close(db);
}

/* tp 2 x cp 2 x dp 2: rank = t + 2·(c + 2·d); rows are (cp, dp) pairs, cp consecutive rows of
 * a column are a ring; gradients sum over dp x cp. */
static void test_layout_picture_cp(void **state) {
    (void)state;
    rundb *db = fresh_db("layout_cp", "{\"tp\":2,\"cp\":2,\"pp\":1,\"dp\":2,\"ep\":1,"
                         "\"n_layer\":2,\"pp_layers\":\"\"}", 8);
    int drawn;
    char *svg = draw_text(svg_layout, db, &drawn);
    assert_int_equal(drawn, 1);
    assert_non_null(strstr(svg, "tp 2 × cp 2 × pp 1 × dp 2"));
    assert_int_equal(count(svg, "class=\"layout-rank\""), 8);
    assert_non_null(strstr(svg, "rank 5: tp 1, cp 0, pp 0, dp 1, ep 0"));
    assert_non_null(strstr(svg, "CP rings (ring attention): {0,2} {1,3} {4,6} {5,7}"));
    assert_non_null(strstr(svg, "DP x CP groups (gradient all-reduce): {0,2,4,6} {1,3,5,7}"));
    assert_int_equal(count(svg, "class=\"layout-tp\""), 4); /* cp·dp rows */
    assert_int_equal(count(svg, "class=\"layout-cp\""), 2 * 2); /* tp columns × dp rings */
    free(svg);
    rundb_close(db);
}

static void test_dense_run_has_no_pp_or_moe_picture(void **state) {
    (void)state;
    rundb *db = fresh_db("dense", "{\"tp\":1,\"pp\":1,\"dp\":1,\"ep\":1,\"n_layer\":2}", 1);
    rundb_metric m = {.step = 1, .train_loss = 5.0, .val_loss = NAN, .lr = 1e-3, .grad_norm = 1,
                      .tokens_per_s = 1000, .mfu = 0.1, .mfu_theoretical = 0.05, .step_ms = 10,
                      .wall_s = 0.5};
    rundb_log_metric(db, 1, &m);
    int drawn;
    char *svg = draw_text(svg_pipeline, db, &drawn);
    assert_int_equal(drawn, 0);
    assert_true(svg == NULL || svg[0] == 0);
    free(svg);
    svg = draw_text(svg_moe, db, &drawn);
    assert_int_equal(drawn, 0);
    free(svg);
    svg = draw_text(svg_metrics, db, &drawn);
    assert_int_equal(drawn, 1);
    /* one launch: lines of train loss, tokens/s, MFU and theoretical MFU (val loss is dots) */
    assert_int_equal(count(svg, "class=\"series\""), 4);
    free(svg);
    rundb_close(db);
}

/* The HTML page of a small pp run: every section that applies, each once, and the pictures
 * inline (the browser-side checks are tests/run_report_html.sh's). */
static void test_html_page(void **state) {
    (void)state;
    rundb *db = fresh_db("html", "{\"tp\":1,\"pp\":2,\"dp\":1,\"ep\":1,\"n_layer\":2}", 2);
    rundb_log_event(db, 1, "start", 0, "{}");
    for (int s = 1; s <= 3; s++) {
        rundb_metric m = {.step = s, .train_loss = 5.0 - s * 0.1, .val_loss = NAN, .lr = 1e-3,
                          .grad_norm = 1, .tokens_per_s = 1000, .mfu = 0.1,
                          .mfu_theoretical = 0.05, .step_ms = 10, .wall_s = 0.1 * s};
        rundb_log_metric(db, 1, &m);
    }
    const double f0[] = {0, 1, 1, 2}, b0[] = {3, 4, 5, 6}, f1[] = {1, 2, 2.5, 3.5},
                 b1[] = {2, 3, 4, 5};
    timeline(db, 3, 0, 0, f0, b0, 2);
    timeline(db, 3, 1, 0, f1, b1, 2);
    rundb_log_event(db, 1, "eval", 0, "{\"step\":3,\"val_loss\":\"<&>\"}");
    rundb_run_end(db, 1, "completed");
    rundb_close(db);
    char dir[512], page[600], err[512];
    tu_path(dir, sizeof(dir), "html");
    snprintf(page, sizeof(page), "%s/report.html", dir);
    report_summary r;
    assert_int_equal(report_load(dir, &r, err, sizeof(err)), 0);
    assert_int_equal(report_html(&r, NULL, NULL, 0, page, err, sizeof(err)), 0);
    report_free(&r);
    FILE *f = fopen(page, "r");
    assert_non_null(f);
    static char text[1 << 20];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    text[n] = 0;
    fclose(f);
    static const char *ONCE[] = {"<section id=\"summary\">", "<section id=\"config\">",
                                 "<section id=\"ettr\">", "<section id=\"metrics\">",
                                 "<section id=\"pipeline\">", "<section id=\"checkpoints\">",
                                 "<section id=\"events\">", "id=\"pic-pipeline\"",
                                 "id=\"pic-layout\"", "id=\"pic-metrics\""};
    for (size_t i = 0; i < sizeof(ONCE) / sizeof(ONCE[0]); i++) assert_int_equal(count(text, ONCE[i]), 1);
    assert_int_equal(count(text, "<section id=\"moe\">"), 0);   /* not a MoE run */
    assert_int_equal(count(text, "<script"), 0);
    assert_null(strstr(text, "<?xml"));                        /* no prolog inside HTML */
    assert_non_null(strstr(text, "&quot;&lt;&amp;&gt;&quot;")); /* event text escaped */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipeline_picture),
        cmocka_unit_test(test_pipeline_picture_zb),
        cmocka_unit_test(test_pipeline_picture_interleaved),
        cmocka_unit_test(test_moe_picture),
        cmocka_unit_test(test_layout_picture),
        cmocka_unit_test(test_layout_picture_cp),
        cmocka_unit_test(test_dense_run_has_no_pp_or_moe_picture),
        cmocka_unit_test(test_html_page),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
