/*
 * tests/test_ckpt_writer.c — cmocka tests of the checkpoint writer and the storage tiers
 * (ckpt/writer.c, ckpt/tiers.c) on their own: named tensors and a state blob, no model, no
 * trainer, one process.
 *
 * Independent checks: what the writer reports through its sink (catalog rows, events) is
 * recorded here and compared with the directories as found on disk — sizes summed here with
 * stat(), the manifest checksum recomputed here bit by bit from the CRC-32C definition, tensors
 * read back with st_open; retention is checked against "the keep_last newest" evaluated here; a
 * save due while one is in flight must wait ("ckpt_wait"); a failed save must leave committed
 * steps alone and, with stop_on_error, stop further saves; the resume choice must skip a
 * corrupted copy for the next tier's copy of the same step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/tiers.h"
#include "ckpt/writer.h"

#define TU_PREFIX "test_ckpt_writer"
#include "tests/testutil.h"

/* ---- a sink that records everything ------------------------------------------------------------ */

#define MAX_REC 256
typedef struct {
    int n_rows;
    struct {
        int tier;
        int64_t step, bytes;
        char state[16], checksum[24], path[CKPT_PATH_MAX];
        double snapshot_ms;
    } rows[MAX_REC];
    int n_events;
    struct {
        char kind[32], detail[CKPT_PATH_MAX + 512];
    } events[MAX_REC];
} recorder;

static void rec_catalog(void *user, const ckpt_record *r) {
    recorder *c = user;
    assert_true(c->n_rows < MAX_REC);
    c->rows[c->n_rows].tier = r->tier;
    c->rows[c->n_rows].step = r->step;
    c->rows[c->n_rows].bytes = r->bytes;
    c->rows[c->n_rows].snapshot_ms = r->snapshot_ms;
    snprintf(c->rows[c->n_rows].state, sizeof c->rows[0].state, "%s", r->state);
    snprintf(c->rows[c->n_rows].checksum, sizeof c->rows[0].checksum, "%s",
             r->checksum ? r->checksum : "");
    snprintf(c->rows[c->n_rows].path, sizeof c->rows[0].path, "%s", r->path);
    c->n_rows++;
}

static void rec_event(void *user, const char *kind, cJSON *detail) {
    recorder *c = user;
    assert_true(c->n_events < MAX_REC);
    char *text = cJSON_PrintUnformatted(detail);
    assert_non_null(text);
    snprintf(c->events[c->n_events].kind, sizeof c->events[0].kind, "%s", kind);
    snprintf(c->events[c->n_events].detail, sizeof c->events[0].detail, "%s", text);
    c->n_events++;
    free(text);
    cJSON_Delete(detail); /* the sink owns the detail */
}

/* The last row of (tier, step), or NULL. */
static const char *row_state(const recorder *c, int tier, int64_t step, int *at) {
    for (int i = c->n_rows - 1; i >= 0; i--)
        if (c->rows[i].tier == tier && c->rows[i].step == step) {
            if (at) *at = i;
            return c->rows[i].state;
        }
    return NULL;
}

static int count_events(const recorder *c, const char *kind) {
    int n = 0;
    for (int i = 0; i < c->n_events; i++) n += strcmp(c->events[i].kind, kind) == 0;
    return n;
}

/* ---- independent measurements ------------------------------------------------------------------ */

static int64_t dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int64_t sum = 0;
    struct dirent *e;
    char p[CKPT_PATH_MAX + 256];
    struct stat st;
    while ((e = readdir(d)) != NULL) {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &st) == 0 && S_ISREG(st.st_mode)) sum += st.st_size;
    }
    closedir(d);
    return sum;
}

static void manifest_checksum(const char *dir, char *out, size_t len) {
    char p[CKPT_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/%s", dir, CKPT_MANIFEST_NAME);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    assert_true(n > 0 && n < sizeof buf);
    fclose(f);
    snprintf(out, len, "crc32c:%08x", tu_crc32c_bitwise(buf, n));
}

/* ---- the writer under test --------------------------------------------------------------------- */

enum { NA = 12, NB = 5 };

typedef struct {
    ckpt_writer *w;
    recorder rec;
    float *snap;       /* NA + NB floats in the writer's buffer */
    st_tensor t[2];
    ckpt_file file;
} fixture;

static void open_writer(fixture *fx, int async, int stop_on_error, const char *durable) {
    memset(fx, 0, sizeof(*fx));
    char run[512], shm[512], err[512];
    tu_path(run, sizeof run, "run");
    tu_path(shm, sizeof shm, "shm");
    assert_int_equal(fs_mkdir_p(run, err, sizeof err), 0);
    setenv("MINITRAIN_SHM_DIR", shm, 1);
    ckpt_writer_opts o = {0};
    assert_int_equal(ckpt_tiers_init(&o.tiers, run, "w", 1, durable, 2, 0), 0);
    o.async = async;
    o.stop_on_error = stop_on_error;
    o.sink = (ckpt_sink){&fx->rec, rec_catalog, rec_event};
    fx->w = ckpt_writer_create(&o);
    fx->snap = ckpt_writer_buffer(fx->w, (NA + NB) * sizeof(float));
    fx->t[0] = (st_tensor){"a", ST_F32, 2, {3, 4}, fx->snap};
    fx->t[1] = (st_tensor){"b", ST_F32, 1, {NB}, fx->snap + NA};
    snprintf(fx->file.name, sizeof fx->file.name, "tensors.safetensors");
    fx->file.tensors = fx->t;
    fx->file.n_tensors = 2;
}

/* One save of `step` whose tensors hold step * 100 + index. Returns ckpt_writer_begin's value. */
static int save(fixture *fx, int64_t step) {
    if (ckpt_writer_begin(fx->w, step) != 0) return -1;
    for (int i = 0; i < NA + NB; i++) fx->snap[i] = (float)(step * 100 + i); /* the snapshot */
    char state[64];
    snprintf(state, sizeof state, "{\"step\": %" PRId64 "}", step);
    ckpt_writer_start(fx->w, &fx->file, 1, "state.json", state);
    return 0;
}

static void test_async_save_commit_report_retain(void **state) {
    (void)state;
    static fixture fx; /* large: the recorder holds every report */
    char durable[512], err[1024];
    tu_path(durable, sizeof durable, "durable");
    open_writer(&fx, 1, 1, durable);
    const ckpt_tiers *tiers = ckpt_writer_tiers(fx.w);
    for (int64_t step = 1; step <= 3; step++) {
        assert_int_equal(save(&fx, step), 0);
        assert_true(ckpt_writer_busy(fx.w));
        ckpt_writer_progress(fx.w, 1);
        assert_false(ckpt_writer_busy(fx.w));
    }
    ckpt_writer_stats s;
    ckpt_writer_get_stats(fx.w, &s);
    assert_int_equal(s.saves, 3);
    assert_int_equal(s.committed, 3);
    assert_int_equal(s.failures, 0);
    for (int t = 0; t < CKPT_TIERS; t++) {
        const char *root = ckpt_tiers_root(tiers, t);
        assert_non_null(root);
        /* the newest step in every tier: verified, read back, reported as measured here */
        if (ckpt_verify(root, 3, err, sizeof err) != 0) fail_msg("tier %d: %s", t, err);
        char dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX + 32], sum[32];
        ckpt_step_path(dir, sizeof dir, root, 3, "");
        snprintf(path, sizeof path, "%s/tensors.safetensors", dir);
        st_file f;
        assert_int_equal(st_open(&f, path, err, sizeof err), 0);
        float b[NB];
        assert_int_equal(st_read_tensor(&f, "b", b, sizeof b, err, sizeof err), 0);
        for (int i = 0; i < NB; i++) assert_float_equal(b[i], 300 + NA + i, 0);
        st_close(&f);
        int at = -1;
        assert_string_equal(row_state(&fx.rec, t, 3, &at), "committed");
        assert_int_equal(fx.rec.rows[at].bytes, dir_bytes(dir));
        manifest_checksum(dir, sum, sizeof sum);
        assert_string_equal(fx.rec.rows[at].checksum, sum);
        assert_string_equal(fx.rec.rows[at].path, dir);
        assert_true(fx.rec.rows[at].snapshot_ms >= 0);
        /* retention keep_last = 2: steps 2 and 3 stay, step 1 is gone and reported deleted */
        int64_t *steps = NULL;
        int n = 0;
        assert_int_equal(ckpt_list(root, &steps, &n, err, sizeof err), 0);
        assert_int_equal(n, 2);
        assert_int_equal(steps[0], 2);
        assert_int_equal(steps[1], 3);
        free(steps);
        assert_string_equal(row_state(&fx.rec, t, 1, NULL), "deleted");
    }
    /* tiers 0 and 1 were written from the snapshot ("writing" first); tier 2 only copied */
    int first = -1;
    for (int i = 0; i < fx.rec.n_rows && first < 0; i++)
        if (fx.rec.rows[i].step == 1) first = i;
    assert_string_equal(fx.rec.rows[first].state, "writing");
    for (int i = 0; i < fx.rec.n_rows; i++)
        if (fx.rec.rows[i].tier == 2) assert_string_not_equal(fx.rec.rows[i].state, "writing");
    /* one "checkpoint" event per committed tier, its detail valid JSON naming the step dir */
    assert_int_equal(count_events(&fx.rec, "checkpoint"), 9);
    for (int i = 0; i < fx.rec.n_events; i++) {
        if (strcmp(fx.rec.events[i].kind, "checkpoint") != 0) continue;
        cJSON *o = cJSON_Parse(fx.rec.events[i].detail);
        assert_non_null(o);
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "path");
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
        assert_true(cJSON_IsString(p) && cJSON_IsNumber(step));
        char want[32];
        snprintf(want, sizeof want, "step_%08d", step->valueint);
        assert_non_null(strstr(p->valuestring, want));
        cJSON_Delete(o);
    }
    /* a save due while one is in flight waits for it */
    assert_int_equal(save(&fx, 4), 0);
    assert_int_equal(save(&fx, 5), 0);
    assert_int_equal(count_events(&fx.rec, "ckpt_wait"), 1);
    for (int i = 0; i < fx.rec.n_events; i++) {
        if (strcmp(fx.rec.events[i].kind, "ckpt_wait") != 0) continue;
        cJSON *o = cJSON_Parse(fx.rec.events[i].detail);
        const cJSON *ms = cJSON_GetObjectItemCaseSensitive(o, "waited_ms");
        assert_true(cJSON_IsNumber(ms) && ms->valuedouble >= 0);
        assert_int_equal(cJSON_GetObjectItemCaseSensitive(o, "step")->valueint, 5);
        cJSON_Delete(o);
    }
    assert_string_equal(row_state(&fx.rec, 1, 4, NULL), "committed");
    /* the end of a completed run drops tier 0, reporting its steps deleted */
    char tier0_parent[CKPT_PATH_MAX];
    snprintf(tier0_parent, sizeof tier0_parent, "%s", ckpt_tiers_root(tiers, 0));
    *strrchr(tier0_parent, '/') = 0;
    assert_int_equal(ckpt_writer_finish(fx.w, 1), 0);
    struct stat sb;
    assert_int_not_equal(stat(tier0_parent, &sb), 0);
    assert_string_equal(row_state(&fx.rec, 0, 5, NULL), "deleted");
    assert_string_equal(row_state(&fx.rec, 1, 5, NULL), "committed");
    ckpt_writer_free(fx.w);
}

static void test_failure_stops_and_keeps_committed(void **state) {
    (void)state;
    static fixture fx; /* large: the recorder holds every report */
    char err[1024];
    open_writer(&fx, 1, 1, NULL);
    const ckpt_tiers *tiers = ckpt_writer_tiers(fx.w);
    assert_int_equal(save(&fx, 1), 0);
    ckpt_writer_progress(fx.w, 1);
    /* tier 1's root replaced by a plain file: the next save cannot begin */
    char moved[CKPT_PATH_MAX + 16];
    snprintf(moved, sizeof moved, "%s.moved", tiers->root[1]);
    assert_int_equal(rename(tiers->root[1], moved), 0);
    assert_int_equal(fs_write_atomic(tiers->root[1], "x", 1, err, sizeof err), 0);
    assert_int_equal(save(&fx, 2), -1);
    assert_true(ckpt_writer_failed(fx.w));
    assert_string_equal(row_state(&fx.rec, 1, 2, NULL), "failed");
    assert_true(count_events(&fx.rec, "ckpt_error") >= 1);
    ckpt_writer_stats s;
    ckpt_writer_get_stats(fx.w, &s);
    assert_int_equal(s.failures, 1);
    assert_int_equal(s.last_failed_step, 2);
    /* stop_on_error: no further save starts; the committed step 1 is intact */
    assert_int_equal(save(&fx, 3), -1);
    ckpt_writer_get_stats(fx.w, &s);
    assert_int_equal(s.saves, 2);
    assert_int_equal(ckpt_verify(moved, 1, err, sizeof err), 0);
    /* a failed run keeps its memory copies for the restart */
    assert_int_equal(ckpt_writer_finish(fx.w, 1), 1);
    assert_int_equal(ckpt_verify(ckpt_tiers_root(tiers, 0), 1, err, sizeof err), 0);
    ckpt_writer_free(fx.w);
}

static void test_choose_skips_corrupt_copy(void **state) {
    (void)state;
    static fixture fx; /* large: the recorder holds every report */
    char err[1024];
    open_writer(&fx, 0, 0, NULL); /* synchronous: start returns committed */
    const ckpt_tiers *tiers = ckpt_writer_tiers(fx.w);
    assert_int_equal(save(&fx, 1), 0);
    assert_int_equal(save(&fx, 2), 0);
    assert_false(ckpt_writer_busy(fx.w));
    int tier = -1;
    int64_t step = -1;
    recorder *rec = &fx.rec;
    ckpt_sink sink = {rec, rec_catalog, rec_event};
    assert_int_equal(ckpt_tiers_choose(tiers, -1, &tier, &step, &sink, err, sizeof err), 1);
    assert_int_equal(step, 2);
    assert_int_equal(tier, 0); /* the fastest tier first */
    /* flip a byte of step 2's tensor file in tier 0: the same step is taken from tier 1 */
    char path[CKPT_PATH_MAX + 32], dir[CKPT_PATH_MAX];
    ckpt_step_path(dir, sizeof dir, tiers->root[0], 2, "");
    snprintf(path, sizeof path, "%s/tensors.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, -3, SEEK_END);
    int c = fgetc(f);
    fseek(f, -3, SEEK_END);
    fputc(c ^ 0x40, f);
    fclose(f);
    int skips = count_events(rec, "ckpt_skip");
    assert_int_equal(ckpt_tiers_choose(tiers, -1, &tier, &step, &sink, err, sizeof err), 1);
    assert_int_equal(step, 2);
    assert_int_equal(tier, 1);
    assert_int_equal(count_events(rec, "ckpt_skip"), skips + 1);
    assert_string_equal(row_state(rec, 0, 2, NULL), "corrupt");
    /* an exact step that does not exist is an error naming it */
    assert_int_equal(ckpt_tiers_choose(tiers, 7, &tier, &step, &sink, err, sizeof err), -1);
    assert_non_null(strstr(err, "no committed checkpoint of step 7"));
    ckpt_writer_free(fx.w);
}

int main(void) {
    unsetenv("MINITRAIN_CKPT_WRITE_DELAY_MS");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_async_save_commit_report_retain, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_failure_stops_and_keeps_committed, tu_setup,
                                        tu_teardown),
        cmocka_unit_test_setup_teardown(test_choose_skips_corrupt_copy, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
