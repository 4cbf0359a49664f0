/*
 * tests/test_db_meta.c — the job identity the shipper keys rows by (core/rundb.h's meta table)
 * and the choice of database URL (db/db.h). No server needed: the PostgreSQL side is
 * tests/run_db.sh.
 *
 * Each check reads back with raw SQLite: a fresh run.db gets a version-4 UUID (the RFC 4122
 * version and variant bits checked character by character) and this process's node; reopening
 * keeps it; two run directories get two ids; a schema-1 run.db (the tables of before, no meta,
 * user_version 1) gains a job id on its first read-write open and is stamped schema 2, while a
 * read-only look at it finds none.
 */
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "core/rundb.h"
#include "db/db.h"

#define TU_PREFIX "test_db_meta"
#include "tests/testutil.h"

/* meta[key] of DIR/run.db through a connection of our own, "" when absent. */
static void raw_meta(const char *dir, const char *key, char *out, size_t len) {
    char path[512], sql[128];
    snprintf(path, sizeof(path), "%s/run.db", dir);
    snprintf(sql, sizeof(sql), "SELECT value FROM meta WHERE key = '%s'", key);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    out[0] = '\0';
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        snprintf(out, len, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static int raw_user_version(const char *dir) {
    char path[512];
    snprintf(path, sizeof(path), "%s/run.db", dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx, lower-case hex */
static int is_uuid_v4(const char *s) {
    if (strlen(s) != 36) return 0;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-') return 0;
        } else if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])) {
            return 0;
        }
    }
    return s[14] == '4' && strchr("89ab", s[19]) != NULL;
}

static void open_close(const char *dir) {
    char err[512];
    rundb *r = rundb_open(dir, err, sizeof(err));
    assert_non_null(r);
    rundb_close(r);
}

static void test_job_id_stamped_and_kept(void **state) {
    (void)state;
    char a[600], b[600], id1[64], id2[64], idb[64], node[256];
    tu_path(a, sizeof(a), "a");
    tu_path(b, sizeof(b), "b");
    open_close(a);
    raw_meta(a, "job_id", id1, sizeof(id1));
    assert_true(is_uuid_v4(id1));
    raw_meta(a, "node", node, sizeof(node));
    assert_string_equal(node, "node-7"); /* MINITRAIN_NODE, set in main */
    open_close(a);
    raw_meta(a, "job_id", id2, sizeof(id2));
    assert_string_equal(id1, id2);
    open_close(b);
    raw_meta(b, "job_id", idb, sizeof(idb));
    assert_true(is_uuid_v4(idb));
    assert_string_not_equal(id1, idb);
    assert_int_equal(raw_user_version(a), RUNDB_SCHEMA_VERSION);
}

/* A run.db as minitrain wrote it before the job id: schema 1. */
static void make_schema1(const char *dir) {
    char path[700];
    assert_int_equal(fs_mkdir_p(dir, NULL, 0), 0);
    snprintf(path, sizeof(path), "%s/run.db", dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    /* schema 1 = today's tables without meta (the only change of schema 2) */
    assert_int_equal(sqlite3_exec(db, rundb_schema_sql(), NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "DROP TABLE meta; INSERT INTO runs(name, status)"
                                      " VALUES('old', 'completed'); PRAGMA user_version = 1;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
}

static void test_schema1_migrated(void **state) {
    (void)state;
    char dir[600], id[64], path[700];
    tu_path(dir, sizeof(dir), "old");
    make_schema1(dir);
    /* a read-only reader of the old file finds no job id, and fails softly */
    snprintf(path, sizeof(path), "%s/run.db", dir);
    sqlite3 *ro = NULL;
    assert_int_equal(sqlite3_open_v2(path, &ro, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    char got[64] = "x";
    assert_int_equal(rundb_meta_get(ro, "job_id", got, sizeof(got)), -1);
    assert_string_equal(got, "");
    sqlite3_close(ro);
    open_close(dir);
    raw_meta(dir, "job_id", id, sizeof(id));
    assert_true(is_uuid_v4(id));
    assert_int_equal(raw_user_version(dir), 2);
    /* the old row is still there */
    assert_int_equal(sqlite3_open_v2(path, &ro, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(rundb_meta_get(ro, "job_id", got, sizeof(got)), 0);
    assert_string_equal(got, id);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(ro, "SELECT name FROM runs", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "old");
    sqlite3_finalize(st);
    sqlite3_close(ro);
}

static void test_url_pick(void **state) {
    (void)state;
    unsetenv(DB_ENV_URL);
    assert_null(db_url_pick(NULL, NULL));
    assert_null(db_url_pick("", ""));
    setenv(DB_ENV_URL, "postgresql://env/x", 1);
    assert_string_equal(db_url_pick(NULL, ""), "postgresql://env/x");
    assert_string_equal(db_url_pick(NULL, "postgresql://cfg/x"), "postgresql://cfg/x");
    assert_string_equal(db_url_pick("postgresql://opt/x", "postgresql://cfg/x"),
                        "postgresql://opt/x");
    unsetenv(DB_ENV_URL);
}

int main(void) {
    setenv("MINITRAIN_NODE", "node-7", 1); /* before the first rundb_node_name() */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_id_stamped_and_kept),
        cmocka_unit_test(test_schema1_migrated),
        cmocka_unit_test(test_url_pick),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
