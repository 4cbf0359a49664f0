/*
 * tests/test_checkpoint_trainer.c — cmocka tests of a trainer's checkpoints (train/checkpoint.c
 * driving ckpt/writer.c and ckpt/tiers.c) and of model_io's run-directory loading, on a small
 * trainer built by hand (no data needed).
 *
 * Independent checks: the state saved is copied here before the save and compared byte for byte
 * after a resume into a scrambled trainer; the asynchronous save is checked to write the snapshot
 * (parameters changed right after the save must not leak in); catalog sizes and checksums are
 * recomputed here with stat() and a bit-at-a-time CRC-32C of manifest.json; retention is checked
 * against the rule "K newest + every M-th" evaluated here; trainer_state.json is re-parsed; a
 * corrupted newest step must be skipped, and failures must follow ckpt_on_error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "core/config.h"
#include "core/rundb.h"
#include "parallel/comm.h"
#include "parallel/mesh.h"
#include "train/checkpoint.h"
#include "model/model_io.h"
#include "train/trainer.h"

#define TU_PREFIX "test_checkpoint_trainer"
#include "tests/testutil.h"

static comm *g_world;
static mesh g_mesh;

static int setup(void **state) {
    if (tu_setup(state) != 0) return -1;
    char shm[300];
    snprintf(shm, sizeof shm, "%s/shm", tu_dir);
    setenv("MINITRAIN_SHM_DIR", shm, 1);
    unsetenv("MINITRAIN_CKPT_WRITE_DELAY_MS");
    return 0;
}

/* A trainer with a tiny model, random params and optimizer state, run dir tu_dir/run. */
static void make_trainer(trainer *tr, int async, int tier0, const char *durable) {
    memset(tr, 0, sizeof(*tr));
    mt_config *c = &tr->cfg;
    config_defaults(c);
    snprintf(c->run_dir, sizeof c->run_dir, "%s/run", tu_dir);
    snprintf(c->name, sizeof c->name, "t");
    snprintf(c->data, sizeof c->data, "unused");
    c->n_layer = 2, c->n_head = 2, c->d_model = 16, c->seq_len = 8, c->vocab_size = 40;
    c->steps = 100, c->ckpt_every = 1, c->ckpt_async = async, c->ckpt_keep = 10;
    c->ckpt_tier0 = tier0;
    snprintf(c->ckpt_durable, sizeof c->ckpt_durable, "%s", durable ? durable : "");
    tr->mesh = &g_mesh;
    gpt_config gc = {.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab_size = 40};
    char err[256];
    assert_int_equal(gpt_build(&tr->model, &gc, err, sizeof err), 0);
    optim_init(&tr->opt, tr->model.num_params, 0.9f, 0.95f, 1e-8f, 0.1f);
    rng_state r;
    rng_seed(&r, 5);
    for (size_t i = 0; i < tr->model.num_params; i++) {
        tr->model.params[i] = rng_normal(&r);
        tr->opt.m[i] = rng_normal(&r);
        tr->opt.v[i] = rng_uniform(&r);
    }
    tr->opt.t = 7;
    tr->step = 3;
    tr->grad_accum = 1;
    rng_seed(&tr->sample_rng, 99);
    rng_u64(&tr->sample_rng);
    config_to_json(c, tr->config_json, sizeof tr->config_json);
    tr->db = rundb_open(c->run_dir, err, sizeof err);
    assert_non_null(tr->db);
    tr->run_id = rundb_run_begin(tr->db, "t", tr->config_json, "test", 1);
}

static void free_trainer(trainer *tr) {
    rundb_close(tr->db);
    gpt_free(&tr->model);
    optim_free(&tr->opt);
}

/* Sum of the sizes of the regular files in dir. */
static int64_t dir_bytes(const char *dir) {
    int64_t total = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    char path[1024];
    struct stat st;
    while ((e = readdir(d)) != NULL) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) total += st.st_size;
    }
    closedir(d);
    return total;
}

static char *slurp(const char *path, size_t *len) {
    char *out = NULL, err[256];
    assert_int_equal(fs_read_file(path, 1 << 26, &out, len, err, sizeof err), 0);
    return out;
}

static void test_async_roundtrip_tiers_catalog(void **state) {
    (void)state;
    char durable[300];
    snprintf(durable, sizeof durable, "%s/durable", tu_dir);
    setenv("MINITRAIN_CKPT_WRITE_DELAY_MS", "40", 1); /* keep the writer busy a while */
    trainer tr;
    make_trainer(&tr, 1, 1, durable);
    size_t n = tr.model.num_params;
    float *p0 = malloc(n * 4), *m0 = malloc(n * 4), *v0 = malloc(n * 4);
    memcpy(p0, tr.model.params, n * 4);
    memcpy(m0, tr.opt.m, n * 4);
    memcpy(v0, tr.opt.v, n * 4);
    rng_state rng0 = tr.sample_rng;
    checkpointer *ck = checkpoint_create(&tr);
    checkpoint_save(ck, &tr);
    for (size_t i = 0; i < n; i++) tr.model.params[i] += 1.0f; /* "the next step" */
    checkpoint_wait(ck, &tr);
    unsetenv("MINITRAIN_CKPT_WRITE_DELAY_MS");
    char err[1024];
    for (int t = 0; t < 3; t++) {
        assert_non_null(checkpoint_root(ck, t));
        if (ckpt_verify(checkpoint_root(ck, t), 3, err, sizeof err) != 0) fail_msg("tier %d: %s", t, err);
    }
    /* catalog rows: sizes and checksums recomputed here */
    sqlite3 *db;
    char path[1024];
    snprintf(path, sizeof path, "%s/run/run.db", tu_dir);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT tier, path, bytes, checksum, state, snapshot_ms,"
                                        " write_ms FROM checkpoints WHERE step = 3 ORDER BY tier",
                                        -1, &q, NULL), SQLITE_OK);
    int rows = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *dir = (const char *)sqlite3_column_text(q, 1);
        assert_int_equal(sqlite3_column_int(q, 0), rows);
        assert_string_equal((const char *)sqlite3_column_text(q, 4), "committed");
        assert_int_equal(sqlite3_column_int64(q, 2), dir_bytes(dir));
        snprintf(path, sizeof path, "%s/manifest.json", dir);
        size_t len;
        char *man = slurp(path, &len), want[32];
        snprintf(want, sizeof want, "crc32c:%08x", tu_crc32c_bitwise((unsigned char *)man, len));
        free(man);
        assert_string_equal((const char *)sqlite3_column_text(q, 3), want);
        assert_true(sqlite3_column_type(q, 5) != SQLITE_NULL && sqlite3_column_double(q, 5) >= 0);
        assert_true(sqlite3_column_double(q, 6) >= 40); /* at least the injected delay */
        rows++;
    }
    sqlite3_finalize(q);
    assert_int_equal(rows, 3);
    /* trainer_state.json */
    snprintf(path, sizeof path, "%s/run/ckpt/step_00000003/trainer_state.json", tu_dir);
    char *text = slurp(path, NULL);
    cJSON *st = cJSON_Parse(text);
    free(text);
    assert_non_null(st);
    assert_int_equal(cJSON_GetObjectItem(st, "step")->valueint, 3);
    assert_true(cJSON_GetObjectItem(st, "tokens_seen")->valuedouble ==
                3.0 * tr.cfg.global_batch * tr.cfg.seq_len);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(st, "optimizer"), "t")->valueint, 7);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(st, "model"), "d_model")->valueint, 16);
    cJSON *rs = cJSON_GetObjectItem(cJSON_GetObjectItem(st, "rng"), "sample");
    for (int i = 0; i < 4; i++) {
        char hex[24];
        snprintf(hex, sizeof hex, "%016" PRIx64, rng0.s[i]);
        assert_string_equal(cJSON_GetArrayItem(rs, i)->valuestring, hex);
    }
    cJSON_Delete(st);
    /* scramble, resume: everything comes back as it was at the snapshot */
    memset(tr.model.params, 0, n * 4);
    memset(tr.opt.m, 0, n * 4);
    memset(tr.opt.v, 0, n * 4);
    tr.opt.t = 0;
    tr.step = 0;
    rng_seed(&tr.sample_rng, 1);
    assert_int_equal(checkpoint_resume(ck, &tr, err, sizeof err), 1);
    assert_memory_equal(tr.model.params, p0, n * 4);
    assert_memory_equal(tr.opt.m, m0, n * 4);
    assert_memory_equal(tr.opt.v, v0, n * 4);
    assert_int_equal(tr.opt.t, 7);
    assert_int_equal(tr.step, 3);
    assert_memory_equal(&tr.sample_rng, &rng0, sizeof rng0);
    /* it came from tier 0, the fastest */
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT detail FROM events WHERE kind = 'resume'", -1,
                                        &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_non_null(strstr((const char *)sqlite3_column_text(q, 0), "\"tier\":0"));
    sqlite3_finalize(q);
    sqlite3_close(db);
    /* a completed run drops tier 0 */
    tr.step = tr.cfg.steps;
    assert_int_equal(checkpoint_finish(ck, &tr), MT_EXIT_OK);
    struct stat sb;
    assert_int_not_equal(stat(checkpoint_root(ck, 0), &sb), 0);
    checkpoint_free(ck);
    free(p0);
    free(m0);
    free(v0);
    free_trainer(&tr);
}

static void test_retention_skip_corrupt_and_model_io(void **state) {
    (void)state;
    trainer tr;
    make_trainer(&tr, 0, 0, NULL);
    tr.cfg.ckpt_keep = 2;
    tr.cfg.ckpt_major_every = 2;
    checkpointer *ck = checkpoint_create(&tr);
    size_t n = tr.model.num_params;
    float *p4 = malloc(n * 4);
    for (int s = 1; s <= 5; s++) {
        tr.step = s;
        tr.model.params[0] = (float)s; /* tell the steps apart */
        if (s == 4) memcpy(p4, tr.model.params, n * 4);
        checkpoint_save(ck, &tr);
    }
    const char *root = checkpoint_root(ck, 1);
    int64_t *steps;
    int count;
    char err[1024];
    assert_int_equal(ckpt_list(root, &steps, &count, err, sizeof err), 0);
    /* keep the 2 newest and every 2nd: {4, 5} U {2, 4} */
    int64_t want[3] = {2, 4, 5};
    assert_int_equal(count, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(steps[i], want[i]);
    free(steps);
    sqlite3 *db;
    char path[1024];
    snprintf(path, sizeof path, "%s/run/run.db", tu_dir);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT step FROM checkpoints WHERE state = 'deleted' "
                                        "ORDER BY step", -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(q, 0), 1);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(q, 0), 3);
    assert_int_equal(sqlite3_step(q), SQLITE_DONE);
    sqlite3_finalize(q);
    /* serve-side loading: no model.safetensors yet -> the newest checkpoint */
    gpt_model m;
    int step = -1;
    assert_int_equal(model_io_load(&m, tr.cfg.run_dir, &step, err, sizeof err), 0);
    assert_int_equal(step, 5);
    assert_true(m.params[0] == 5.0f);
    gpt_free(&m);
    assert_int_equal(model_io_load_step(&m, tr.cfg.run_dir, 4, &step, err, sizeof err), 0);
    assert_int_equal(step, 4);
    assert_memory_equal(m.params, p4, n * 4);
    gpt_free(&m);
    assert_int_equal(model_io_load_step(&m, tr.cfg.run_dir, 3, &step, err, sizeof err), -1);
    assert_non_null(strstr(err, "2, 4, 5"));
    /* corrupt the newest: resume and model_io skip it */
    snprintf(path, sizeof path, "%s/step_00000005/model-tp00-pp00.safetensors", root);
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    fseek(fp, -10, SEEK_END);
    int c = fgetc(fp);
    fseek(fp, -10, SEEK_END);
    fputc(c ^ 0x40, fp);
    fclose(fp);
    assert_int_equal(model_io_load(&m, tr.cfg.run_dir, &step, err, sizeof err), 0);
    assert_int_equal(step, 4);
    gpt_free(&m);
    memset(tr.model.params, 0, n * 4);
    assert_int_equal(checkpoint_resume(ck, &tr, err, sizeof err), 1);
    assert_int_equal(tr.step, 4);
    assert_memory_equal(tr.model.params, p4, n * 4);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT state FROM checkpoints WHERE step = 5", -1, &q,
                                        NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(q, 0), "corrupt");
    sqlite3_finalize(q);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM events WHERE kind = 'ckpt_skip'",
                                        -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(q, 0), 1);
    sqlite3_finalize(q);
    sqlite3_close(db);
    /* a model.safetensors newer than every checkpoint wins */
    snprintf(path, sizeof path, "%s/model.safetensors", tr.cfg.run_dir);
    assert_int_equal(model_io_save(&tr.model, path, NULL, 10, err, sizeof err), 0);
    assert_int_equal(model_io_load(&m, tr.cfg.run_dir, &step, err, sizeof err), 0);
    assert_int_equal(step, 10);
    gpt_free(&m);
    /* resume errors: a missing step, an incompatible model */
    snprintf(tr.cfg.resume, sizeof tr.cfg.resume, "3");
    assert_int_equal(checkpoint_resume(ck, &tr, err, sizeof err), -1);
    assert_non_null(strstr(err, "step 3"));
    snprintf(tr.cfg.resume, sizeof tr.cfg.resume, "auto");
    tr.cfg.d_model = 32;
    assert_int_equal(checkpoint_resume(ck, &tr, err, sizeof err), -1);
    assert_non_null(strstr(err, "d_model 16"));
    assert_non_null(strstr(err, "d_model 32"));
    tr.cfg.d_model = 16;
    snprintf(tr.cfg.resume, sizeof tr.cfg.resume, "no");
    assert_int_equal(checkpoint_resume(ck, &tr, err, sizeof err), 0);
    checkpoint_free(ck);
    free(p4);
    free_trainer(&tr);
}

static void test_failure_policy(void **state) {
    (void)state;
    for (int stop = 0; stop < 2; stop++) {
        trainer tr;
        make_trainer(&tr, 1, 0, NULL);
        snprintf(tr.cfg.ckpt_on_error, sizeof tr.cfg.ckpt_on_error, "%s", stop ? "stop" : "continue");
        char path[1024];
        snprintf(path, sizeof path, "%s/ckpt", tr.cfg.run_dir); /* a file where the root goes */
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fclose(fp);
        checkpointer *ck = checkpoint_create(&tr);
        checkpoint_save(ck, &tr);
        checkpoint_wait(ck, &tr);
        checkpoint_stats s;
        checkpoint_get_stats(ck, &s);
        assert_int_equal(s.failures, 1);
        assert_int_equal(s.committed, 0);
        assert_int_equal(tr.stop_requested, stop);
        assert_int_equal(checkpoint_finish(ck, &tr), stop ? MT_EXIT_ERROR : MT_EXIT_OK);
        checkpoint_free(ck);
        sqlite3 *db;
        char dbp[1024];
        snprintf(dbp, sizeof dbp, "%s/run.db", tr.cfg.run_dir);
        assert_int_equal(sqlite3_open(dbp, &db), SQLITE_OK);
        sqlite3_stmt *q;
        assert_int_equal(sqlite3_prepare_v2(db, "SELECT detail FROM events WHERE kind = 'ckpt_error'"
                                            " ORDER BY rowid DESC", -1, &q, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        assert_non_null(strstr((const char *)sqlite3_column_text(q, 0), "/ckpt"));
        sqlite3_finalize(q);
        sqlite3_close(db);
        unlink(path);
        free_trainer(&tr);
    }
}

int main(void) {
    g_world = comm_init_world(NULL, NULL);
    mesh_init(&g_mesh, g_world, 1, 1, 1, 1, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_async_roundtrip_tiers_catalog, setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_retention_skip_corrupt_and_model_io, setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_failure_policy, setup, tu_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    mesh_free(&g_mesh);
    comm_free(g_world);
    comm_finalize();
    return rc;
}
