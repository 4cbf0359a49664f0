/*
 * tests/test_gw_keys.c — API keys: hash-only storage, the constant-time compare path, every
 * authentication outcome, roles on the admin API, the audit trail, and the CLI.
 *
 * Independent references: the stored hash is compared with Python's hashlib.sha256 of the key
 * (not the OpenSSL call the code uses); the database is read back with raw SQL and as raw file
 * bytes (main file + WAL); CRYPTO_memcmp is interposed by this executable (it forwards to
 * OpenSSL's through dlsym) to count that the compare really runs, over all 32 bytes, on both the
 * accepting and the refusing path; the expected statuses come from the issue (a user key cannot
 * call /admin; a viewer cannot create keys; revoked or expired → 401-class codes).
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "cmd/cmd.h"
#include "gateway/gw_keys.h"

#include "tests/testutil.h"

/* ---- CRYPTO_memcmp interposer: counts calls and their lengths -------------------------------- */

static int ct_calls, ct_len_32;
int CRYPTO_memcmp(const volatile void *a, const volatile void *b, size_t len) {
    static int (*real)(const volatile void *, const volatile void *, size_t);
    if (!real) real = (int (*)(const volatile void *, const volatile void *, size_t))dlsym(RTLD_NEXT, "CRYPTO_memcmp");
    ct_calls++;
    if (len == 32) ct_len_32++;
    return real(a, b, len);
}

/* ---- helpers ------------------------------------------------------------------------------- */

static char dir[256], db[300];
static long long fake_now;
static long long clock_fn(void *ctx) { (void)ctx; return fake_now; }

static int setup(void **state) {
    (void)state;
    assert_int_equal(tu_mkdtemp(dir, sizeof(dir), "mt_keys"), 0);
    snprintf(db, sizeof(db), "%s/gateway.db", dir);
    return 0;
}
static int teardown(void **state) {
    (void)state;
    assert_int_equal(tu_rmtree(dir), 0);
    return 0;
}

static gw_keys *open_db(void) {
    char err[256];
    gw_keys *k = gw_keys_open(db, err, sizeof(err));
    if (!k) fail_msg("gw_keys_open: %s", err);
    return k;
}

static void bearer(char *out, size_t cap, const char *key) { snprintf(out, cap, "Bearer %s", key); }

static void make_key(gw_keys *k, gw_role role, const char *models, char key[GW_KEY_LEN + 1],
                     gw_key_row *row) {
    gw_key_info spec;
    memset(&spec, 0, sizeof(spec));
    spec.role = role;
    snprintf(spec.models, sizeof(spec.models), "%s", models);
    char err[256];
    if (gw_keys_create(k, "test", "t", &spec, key, row, err, sizeof(err)) != 0)
        fail_msg("create: %s", err);
}

/* whole file as bytes (empty if missing) */
static char *slurp(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return calloc(1, 1);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static int contains(const char *hay, size_t n, const char *needle) {
    return memmem(hay, n, needle, strlen(needle)) != NULL;
}

/* SHA-256 hex of s from Python's hashlib: an implementation independent of OpenSSL's call. */
static void py_sha256(const char *s, char out[65]) {
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "/usr/bin/python3 -c \"import hashlib;print(hashlib.sha256(b'%s').hexdigest())\"", s);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[128];
    assert_non_null(fgets(line, sizeof(line), p));
    pclose(p);
    line[strcspn(line, "\n")] = 0;
    assert_int_equal(strlen(line), 64);
    memcpy(out, line, 65);
    assert_int_equal(strlen(out), 64);
}

/* ---- tests --------------------------------------------------------------------------------- */

static void test_hash_only_storage(void **state) {
    (void)state;
    gw_keys *k = open_db();
    char key[GW_KEY_LEN + 1], key2[GW_KEY_LEN + 1];
    gw_key_row row, row2;
    make_key(k, GW_ROLE_USER, "", key, &row);
    make_key(k, GW_ROLE_ADMIN, "", key2, &row2);
    assert_int_equal(strlen(key), GW_KEY_LEN);
    assert_memory_equal(key, "mt-", 3);
    assert_string_not_equal(key, key2);
    /* the stored hash is SHA-256(key) and the id its first 16 hex digits */
    char hexd[65];
    py_sha256(key, hexd);
    assert_memory_equal(row.info.id, hexd, 16);
    assert_int_equal(strlen(row.info.id), 16);
    sqlite3 *s;
    assert_int_equal(sqlite3_open(db, &s), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(s, "SELECT hex(hash) FROM keys WHERE id = ?", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, row.info.id, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    char stored[65];
    snprintf(stored, sizeof(stored), "%s", (const char *)sqlite3_column_text(st, 0));
    for (char *p = stored; *p; p++) *p = (char)(*p >= 'A' && *p <= 'F' ? *p + 32 : *p);
    assert_string_equal(stored, hexd);
    sqlite3_finalize(st);
    /* journal mode is WAL */
    assert_int_equal(sqlite3_prepare_v2(s, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(s);
    /* the key itself (and its random hex part) appears nowhere in the files */
    const char *files[] = {"gateway.db", "gateway.db-wal"};
    for (int i = 0; i < 2; i++) {
        char p[400];
        snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
        size_t n;
        char *b = slurp(p, &n);
        assert_false(contains(b, n, key));
        assert_false(contains(b, n, key + 3));
        assert_false(contains(b, n, key2 + 3));
        free(b);
    }
    struct stat sb;
    assert_int_equal(stat(db, &sb), 0);
    assert_int_equal(sb.st_mode & 077, 0); /* owner-only */
    gw_keys_close(k);
}

static void test_check_codes(void **state) {
    (void)state;
    gw_keys *k = open_db();
    fake_now = 1700000000;
    gw_keys_set_clock(k, clock_fn, NULL);
    char key[GW_KEY_LEN + 1], auth[128];
    gw_key_row row;
    gw_key_info spec = {.role = GW_ROLE_USER, .rpm = 60, .tpm = 1000, .max_concurrent = 2,
                        .max_tokens = 64, .expires_at = fake_now + 100};
    snprintf(spec.models, sizeof(spec.models), "a,b");
    char err[256];
    assert_int_equal(gw_keys_create(k, "test", "x", &spec, key, &row, err, sizeof(err)), 0);
    gw_key_info info;
    bearer(auth, sizeof(auth), key);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_OK);
    assert_string_equal(info.id, row.info.id);
    assert_int_equal(info.role, GW_ROLE_USER);
    assert_string_equal(info.models, "a,b");
    assert_int_equal(info.rpm, 60);
    assert_int_equal(info.tpm, 1000);
    assert_int_equal(info.max_concurrent, 2);
    assert_int_equal(info.max_tokens, 64);
    /* scheme is case-insensitive (RFC 7235), surrounding blanks tolerated */
    snprintf(auth, sizeof(auth), "bearer   %s  ", key);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_OK);
    /* missing, wrong scheme, malformed, one digit off, unknown */
    assert_int_equal(gw_keys_check(k, NULL, &info), GW_AUTH_MISSING);
    assert_int_equal(gw_keys_check(k, "  ", &info), GW_AUTH_MISSING);
    snprintf(auth, sizeof(auth), "Basic %s", key);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_INVALID);
    assert_int_equal(gw_keys_check(k, "Bearer mt-123", &info), GW_AUTH_INVALID);
    char off[GW_KEY_LEN + 1];
    memcpy(off, key, sizeof(off));
    off[GW_KEY_LEN - 1] = off[GW_KEY_LEN - 1] == '0' ? '1' : '0';
    bearer(auth, sizeof(auth), off);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_INVALID);
    assert_string_equal(info.id, ""); /* nothing leaks out on a refusal */
    char upper[GW_KEY_LEN + 1];
    memcpy(upper, key, sizeof(upper));
    for (char *p = upper + 3; *p; p++) *p = (char)(*p >= 'a' && *p <= 'f' ? *p - 32 : *p);
    bearer(auth, sizeof(auth), upper);
    if (strcmp(upper, key)) assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_INVALID);
    /* expiry: valid until expires_at, expired from then on */
    bearer(auth, sizeof(auth), key);
    fake_now += 99;
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_OK);
    fake_now += 1;
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_EXPIRED);
    assert_string_equal(info.id, row.info.id); /* the caller may log which key */
    /* disabled (checked before expiry), then enabled again with a later expiry */
    gw_key_row r;
    assert_int_equal(gw_keys_get(k, row.info.id, &r), 0);
    r.info.disabled = 1;
    r.info.expires_at = 0;
    assert_int_equal(gw_keys_put(k, &r), 0);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_DISABLED);
    r.info.disabled = 0;
    assert_int_equal(gw_keys_put(k, &r), 0);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_OK);
    /* revoked: INVALID, like a key that never existed; the row stays, hashless and frozen */
    assert_int_equal(gw_keys_revoke(k, row.info.id), 0);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_INVALID);
    assert_int_equal(gw_keys_revoke(k, row.info.id), 1);
    assert_int_equal(gw_keys_put(k, &r), 1);
    assert_int_equal(gw_keys_revoke(k, "0000000000000000"), -1);
    assert_int_equal(gw_keys_get(k, row.info.id, &r), 0);
    assert_true(r.revoked_at == fake_now);
    gw_key_row *rows;
    assert_int_equal(gw_keys_list(k, 0, &rows), 0);
    free(rows);
    assert_int_equal(gw_keys_list(k, 1, &rows), 1);
    free(rows);
    /* a key survives close and reopen (another process: the gateway) */
    char key2[GW_KEY_LEN + 1];
    make_key(k, GW_ROLE_VIEWER, "", key2, NULL);
    gw_keys_close(k);
    k = open_db();
    bearer(auth, sizeof(auth), key2);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_OK);
    assert_int_equal(info.role, GW_ROLE_VIEWER);
    gw_keys_close(k);
}

static void test_constant_time_path(void **state) {
    (void)state;
    gw_keys *k = open_db();
    char key[GW_KEY_LEN + 1], auth[128];
    gw_key_row row;
    make_key(k, GW_ROLE_USER, "", key, &row);
    gw_key_info info;
    bearer(auth, sizeof(auth), key);
    /* accepting and refusing a well-formed key both run one 32-byte CRYPTO_memcmp */
    ct_calls = ct_len_32 = 0;
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_OK);
    assert_int_equal(ct_calls, 1);
    assert_int_equal(ct_len_32, 1);
    char other[GW_KEY_LEN + 1];
    memcpy(other, key, sizeof(other));
    other[10] = other[10] == 'a' ? 'b' : 'a';
    bearer(auth, sizeof(auth), other);
    ct_calls = ct_len_32 = 0;
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_INVALID);
    assert_int_equal(ct_calls, 1);
    assert_int_equal(ct_len_32, 1);
    /* the id prefix alone never authenticates: tamper with the LAST byte of the stored hash */
    sqlite3 *s;
    assert_int_equal(sqlite3_open(db, &s), SQLITE_OK);
    char sql[200];
    snprintf(sql, sizeof(sql), "UPDATE keys SET hash = substr(hash, 1, 31) || "
             "CASE WHEN substr(hash, 32, 1) = x'00' THEN x'01' ELSE x'00' END WHERE id = '%s'",
             row.info.id);
    assert_int_equal(sqlite3_exec(s, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(s);
    bearer(auth, sizeof(auth), key);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_INVALID);
    gw_keys_close(k);
}

static void test_allows_model(void **state) {
    (void)state;
    gw_key_info k;
    memset(&k, 0, sizeof(k));
    assert_true(gw_key_allows_model(&k, "anything"));
    snprintf(k.models, sizeof(k.models), "*");
    assert_true(gw_key_allows_model(&k, "x"));
    snprintf(k.models, sizeof(k.models), "shakespeare, tiny ,big");
    assert_true(gw_key_allows_model(&k, "shakespeare"));
    assert_true(gw_key_allows_model(&k, "tiny"));
    assert_true(gw_key_allows_model(&k, "big"));
    assert_false(gw_key_allows_model(&k, "tin"));
    assert_false(gw_key_allows_model(&k, "shakespeare2"));
    assert_false(gw_key_allows_model(&k, NULL));
    k.role = GW_ROLE_VIEWER;
    assert_false(gw_key_can_generate(&k));
    k.role = GW_ROLE_USER;
    assert_true(gw_key_can_generate(&k));
    /* spec validation */
    char err[256];
    gw_key_info s = {.role = GW_ROLE_USER};
    snprintf(s.models, sizeof(s.models), "ok-name,bad name");
    assert_int_equal(gw_key_spec_check(&s, 0, 0, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "bad name"));
    snprintf(s.models, sizeof(s.models), "a,,b");
    assert_int_equal(gw_key_spec_check(&s, 0, 0, err, sizeof(err)), -1);
    s.models[0] = 0;
    s.rpm = -1;
    assert_int_equal(gw_key_spec_check(&s, 0, 0, err, sizeof(err)), -1);
    s.rpm = 0;
    s.expires_at = 100;
    assert_int_equal(gw_key_spec_check(&s, 100, 1, err, sizeof(err)), -1);
    assert_int_equal(gw_key_spec_check(&s, 99, 1, err, sizeof(err)), 0);
    s.role = (gw_role)7;
    assert_int_equal(gw_key_spec_check(&s, 0, 0, err, sizeof(err)), -1);
}

/* status of one admin call; *j = parsed body (caller deletes) */
static int admin(gw_keys *k, const gw_key_info *caller, const char *method, const char *path,
                 const char *body, cJSON **j) {
    char *out = NULL;
    int st = gw_admin_handle(k, caller, method, path, body, body ? strlen(body) : 0, &out);
    assert_non_null(out);
    *j = cJSON_Parse(out);
    assert_non_null(*j);
    free(out);
    if (st >= 400) { /* OpenAI error shape */
        cJSON *e = cJSON_GetObjectItem(*j, "error");
        assert_non_null(e);
        assert_true(cJSON_IsString(cJSON_GetObjectItem(e, "message")));
        assert_true(cJSON_IsString(cJSON_GetObjectItem(e, "type")));
    }
    return st;
}

static const char *errcode(cJSON *j) {
    cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "code");
    return cJSON_IsString(c) ? c->valuestring : "";
}

static void test_admin_roles_and_audit(void **state) {
    (void)state;
    gw_keys *k = open_db();
    char akey[GW_KEY_LEN + 1], vkey[GW_KEY_LEN + 1], ukey[GW_KEY_LEN + 1], auth[128];
    gw_key_row ar, vr, ur;
    make_key(k, GW_ROLE_ADMIN, "", akey, &ar);
    make_key(k, GW_ROLE_VIEWER, "", vkey, &vr);
    make_key(k, GW_ROLE_USER, "", ukey, &ur);
    gw_key_info admin_k = ar.info, viewer_k = vr.info, user_k = ur.info;
    cJSON *j;
    /* no caller → 401 */
    assert_int_equal(admin(k, NULL, "GET", "/admin/keys", NULL, &j), 401);
    cJSON_Delete(j);
    /* admin creates a key: 201, the key shown once, settings echoed */
    assert_int_equal(admin(k, &admin_k, "POST", "/admin/keys",
                           "{\"name\":\"alice\",\"role\":\"user\",\"models\":[\"tiny\",\"big\"],"
                           "\"rpm\":60,\"tpm\":5000,\"max_concurrent\":2,\"max_tokens\":128,"
                           "\"expires_in\":3600}", &j), 201);
    const char *newkey = cJSON_GetObjectItem(j, "key")->valuestring;
    char created[GW_KEY_LEN + 1], cid[24];
    snprintf(created, sizeof(created), "%s", newkey);
    snprintf(cid, sizeof(cid), "%s", cJSON_GetObjectItem(j, "id")->valuestring);
    assert_string_equal(cJSON_GetObjectItem(j, "role")->valuestring, "user");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "models")), 2);
    assert_int_equal((int)cJSON_GetObjectItem(j, "tpm")->valuedouble, 5000);
    cJSON_Delete(j);
    gw_key_info info;
    bearer(auth, sizeof(auth), created);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_OK);
    assert_string_equal(info.models, "tiny,big");
    assert_true(gw_key_allows_model(&info, "tiny") && !gw_key_allows_model(&info, "other"));
    /* viewer: may read, cannot create, update or revoke */
    assert_int_equal(admin(k, &viewer_k, "GET", "/admin/keys", NULL, &j), 200);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "data")), 4);
    char *listing = cJSON_PrintUnformatted(j);
    assert_null(strstr(listing, "mt-")); /* a listing never holds a key */
    free(listing);
    cJSON_Delete(j);
    char path[64];
    snprintf(path, sizeof(path), "/admin/keys/%s", cid);
    assert_int_equal(admin(k, &viewer_k, "GET", path, NULL, &j), 200);
    assert_string_equal(cJSON_GetObjectItem(j, "name")->valuestring, "alice");
    cJSON_Delete(j);
    assert_int_equal(admin(k, &viewer_k, "POST", "/admin/keys", "{\"role\":\"admin\"}", &j), 403);
    assert_string_equal(errcode(j), "insufficient_role");
    cJSON_Delete(j);
    assert_int_equal(admin(k, &viewer_k, "DELETE", path, NULL, &j), 403);
    cJSON_Delete(j);
    assert_int_equal(admin(k, &viewer_k, "POST", path, "{\"disabled\":true}", &j), 403);
    cJSON_Delete(j);
    assert_int_equal(admin(k, &viewer_k, "GET", "/admin/audit", NULL, &j), 200);
    cJSON_Delete(j);
    /* user: nothing under /admin, not even reads or unknown paths */
    const char *um[][2] = {{"GET", "/admin/keys"}, {"POST", "/admin/keys"}, {"GET", "/admin/audit"},
                           {"DELETE", path}, {"GET", "/admin/nothing"}};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(admin(k, &user_k, um[i][0], um[i][1], "{}", &j), 403);
        cJSON_Delete(j);
    }
    /* admin: bad bodies are 400 with the field named; unknown paths 404; wrong method 405 */
    assert_int_equal(admin(k, &admin_k, "POST", "/admin/keys", "{\"role\":\"root\"}", &j), 400);
    cJSON_Delete(j);
    assert_int_equal(admin(k, &admin_k, "POST", "/admin/keys", "{\"rpm\":-5}", &j), 400);
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "param")->valuestring, "rpm");
    cJSON_Delete(j);
    assert_int_equal(admin(k, &admin_k, "POST", "/admin/keys", "{\"frob\":1}", &j), 400);
    cJSON_Delete(j);
    assert_int_equal(admin(k, &admin_k, "POST", "/admin/keys", "[1,2", &j), 400);
    cJSON_Delete(j);
    assert_int_equal(admin(k, &admin_k, "POST", "/admin/keys", "{\"expires_at\":1}", &j), 400);
    cJSON_Delete(j);
    assert_int_equal(admin(k, &admin_k, "GET", "/admin/keys/00000000deadbeef", NULL, &j), 404);
    cJSON_Delete(j);
    assert_int_equal(admin(k, &admin_k, "GET", "/admin/keys/../../etc", NULL, &j), 404);
    cJSON_Delete(j);
    assert_int_equal(admin(k, &admin_k, "PUT", "/admin/keys", NULL, &j), 405);
    cJSON_Delete(j);
    /* admin updates: disabled → DISABLED; then revokes → INVALID; revoked keys are frozen */
    assert_int_equal(admin(k, &admin_k, "POST", path, "{\"disabled\":true,\"rpm\":5}", &j), 200);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "disabled")));
    cJSON_Delete(j);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_DISABLED);
    assert_int_equal(info.rpm, 5);
    assert_int_equal(admin(k, &admin_k, "DELETE", path, NULL, &j), 200);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "revoked")));
    cJSON_Delete(j);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_INVALID);
    assert_int_equal(admin(k, &admin_k, "POST", path, "{\"disabled\":false}", &j), 409);
    cJSON_Delete(j);
    assert_int_equal(admin(k, &admin_k, "GET", "/admin/audit?limit=100", NULL, &j), 200);
    cJSON *data = cJSON_GetObjectItem(j, "data");
    /* every call above is audited, refusals included: count the 403s and find the create */
    int n403 = 0, creates = 0, revokes = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, data) {
        int st = (int)cJSON_GetObjectItem(e, "status")->valuedouble;
        const char *act = cJSON_GetObjectItem(e, "action")->valuestring;
        const char *actor = cJSON_GetObjectItem(e, "actor")->valuestring;
        if (st == 403) n403++;
        if (!strcmp(act, "key.create") && st == 201) {
            creates++;
            assert_string_equal(cJSON_GetObjectItem(e, "target")->valuestring, cid);
            assert_int_equal(strncmp(actor, "key:", 4), 0);
            assert_string_equal(actor + 4, admin_k.id);
        }
        if (!strcmp(act, "key.revoke") && st == 200) revokes++;
    }
    assert_int_equal(n403, 3 + 5);
    assert_int_equal(creates, 1);
    assert_int_equal(revokes, 1);
    cJSON_Delete(j);
    gw_keys_close(k);
    /* no audit row holds a key or a full hash (raw SQL, every column) */
    sqlite3 *s;
    assert_int_equal(sqlite3_open(db, &s), SQLITE_OK);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(s, "SELECT at || actor || action || target || status || "
                                           "detail FROM audit", -1, &st, NULL), SQLITE_OK);
    const char *keys[] = {akey, vkey, ukey, created};
    int rows = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        rows++;
        for (int i = 0; i < 4; i++) {
            char hexd[65];
            assert_null(strstr(t, keys[i] + 3));
            if (i == 3) {
                py_sha256(keys[i], hexd);
                assert_null(strstr(t, hexd));
                assert_null(strstr(t, hexd + 16)); /* not even the non-id part */
            }
        }
        assert_null(strstr(t, "mt-"));
    }
    assert_true(rows >= 20);
    sqlite3_finalize(st);
    sqlite3_close(s);
}

/* run cmd_gateway_keys with stdout captured; returns the exit code, *out the output (malloc'd) */
static int cli(char **out, int argc, ...) {
    char *argv[32];
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc; i++) argv[i] = va_arg(ap, char *);
    va_end(ap);
    argv[argc] = NULL;
    char path[400];
    snprintf(path, sizeof(path), "%s/cli.out", dir);
    fflush(stdout);
    int saved = dup(1);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    close(fd);
    int rc = cmd_gateway_keys(argc, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    size_t n;
    *out = slurp(path, &n);
    (*out)[n] = 0;
    return rc;
}

static void test_cli(void **state) {
    (void)state;
    char *out;
    /* add: the key alone on the last stdout line, and it authenticates */
    assert_int_equal(cli(&out, 12, "keys", "add", "--keys-db", db, "--role", "user", "--models",
                         "tiny", "--rpm", "30", "--expires", "2h"), 0);
    char *last = out + strlen(out) - 1;
    assert_true(*last == '\n');
    *last = 0;
    char *nl = strrchr(out, '\n');
    char key[GW_KEY_LEN + 1];
    snprintf(key, sizeof(key), "%s", nl ? nl + 1 : out);
    assert_int_equal(strlen(nl ? nl + 1 : out), GW_KEY_LEN);
    free(out);
    gw_keys *k = open_db();
    char auth[128];
    gw_key_info info;
    bearer(auth, sizeof(auth), key);
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_OK);
    assert_int_equal(info.rpm, 30);
    assert_string_equal(info.models, "tiny");
    long long dt = info.expires_at - (long long)time(NULL);
    assert_true(dt > 7190 && dt <= 7200);
    gw_keys_close(k);
    /* ls shows the id (never the key) */
    assert_int_equal(cli(&out, 4, "keys", "ls", "--keys-db", db), 0);
    assert_non_null(strstr(out, info.id));
    assert_null(strstr(out, key + 3));
    assert_non_null(strstr(out, "active"));
    free(out);
    /* disable, enable, revoke by id; ls --all shows it revoked */
    assert_int_equal(cli(&out, 5, "keys", "disable", "--keys-db", db, info.id), 0);
    free(out);
    k = open_db();
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_DISABLED);
    gw_keys_close(k);
    assert_int_equal(cli(&out, 5, "keys", "enable", info.id, "--keys-db", db), 0); /* id first */
    free(out);
    assert_int_equal(cli(&out, 5, "keys", "revoke", "--keys-db", db, info.id), 0);
    free(out);
    k = open_db();
    assert_int_equal(gw_keys_check(k, auth, &info), GW_AUTH_INVALID);
    gw_keys_close(k);
    assert_int_equal(cli(&out, 5, "keys", "ls", "--keys-db", db, "--all"), 0);
    assert_non_null(strstr(out, "revoked"));
    free(out);
    /* a whole key works in place of its id */
    assert_int_equal(cli(&out, 4, "keys", "add", "--keys-db", db), 0);
    last = out + strlen(out) - 1;
    *last = 0;
    snprintf(key, sizeof(key), "%s", strrchr(out, '\n') + 1);
    free(out);
    assert_int_equal(cli(&out, 5, "keys", "revoke", "--keys-db", db, key), 0);
    free(out);
    /* the audit trail shows the CLI as actor */
    assert_int_equal(cli(&out, 4, "keys", "audit", "--keys-db", db), 0);
    assert_non_null(strstr(out, "cli:"));
    assert_non_null(strstr(out, "key.revoke"));
    assert_null(strstr(out, key + 3));
    free(out);
    /* user errors: exit 2 */
    char missing[400];
    snprintf(missing, sizeof(missing), "%s/none.db", dir);
    assert_int_equal(cli(&out, 6, "keys", "add", "--keys-db", db, "--role", "root"), 2);
    free(out);
    assert_int_equal(cli(&out, 6, "keys", "add", "--keys-db", db, "--expires", "tomorrow"), 2);
    free(out);
    assert_int_equal(cli(&out, 6, "keys", "add", "--keys-db", db, "--rpm", "-1"), 2);
    free(out);
    assert_int_equal(cli(&out, 4, "keys", "ls", "--keys-db", missing), 2);
    free(out);
    assert_int_equal(access(missing, F_OK), -1); /* ls did not create it */
    assert_int_equal(cli(&out, 2, "keys", "frob"), 2);
    free(out);
    assert_int_equal(cli(&out, 4, "keys", "revoke", "--keys-db", db), 2);
    free(out);
    assert_int_equal(cli(&out, 5, "keys", "revoke", "--keys-db", db, "ffffffffffffffff"), 2);
    free(out);
    assert_int_equal(cli(&out, 6, "keys", "ls", "--keys-db", db, "--role", "user"), 2);
    free(out);
    assert_int_equal(cli(&out, 2, "keys", "--help"), 0);
    assert_non_null(strstr(out, "--keys-db"));
    free(out);
    assert_int_equal(cli(&out, 3, "keys", "add", "--help"), 0); /* per-command tables */
    assert_non_null(strstr(out, "--max-concurrent"));
    assert_null(strstr(out, "--all"));
    free(out);
    /* a file that is not a key database: one clear error */
    char junk[400];
    snprintf(junk, sizeof(junk), "%s/junk.db", dir);
    FILE *f = fopen(junk, "w");
    fputs("this is not sqlite, just text that is long enough to not be empty ............\n", f);
    fclose(f);
    assert_int_equal(cli(&out, 4, "keys", "ls", "--keys-db", junk), 2);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_hash_only_storage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_codes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_constant_time_path, setup, teardown),
        cmocka_unit_test(test_allows_model),
        cmocka_unit_test_setup_teardown(test_admin_roles_and_audit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
