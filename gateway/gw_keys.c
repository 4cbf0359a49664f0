/*
 * gateway/gw_keys.c — the key store: gateway.db (SQLite, WAL), key generation, authentication.
 *
 * Why it is shaped so:
 *   - Only SHA-256(key) is stored. A key is 256 random bits, so a plain hash is enough: slow
 *     password hashes (bcrypt, argon2) exist to stretch guessable passwords; nobody can guess a
 *     256-bit key, and a fast hash keeps the per-request check in microseconds. OpenSSL's
 *     libcrypto gives both SHA256() and CRYPTO_memcmp (a constant-time compare) and is on every
 *     Debian machine already (libcurl links it), where libsodium would be one more library.
 *   - The lookup index is the hash's first 8 bytes (the public key id); the full 32 bytes are then
 *     compared with CRYPTO_memcmp. A timing difference in the index lookup says only whether some
 *     key's hash starts with the attacker's hash prefix, which needs a SHA-256 preimage to use.
 *   - Every check reads the database (one prepared statement by primary key, ~10 µs), so a key
 *     revoked or disabled by the CLI in another process stops working on its next request; no
 *     cache to invalidate. WAL lets those readers run beside the CLI's writes.
 *   - One mutex guards the connection and its prepared statements: SQLite connections are not to
 *     be shared between threads mid-statement, and the gateway's connection threads all check.
 *   - Nothing here prints a key except gw_keys_create's caller, once; the audit table gets ids.
 */
#include "gateway/gw_keys.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"

#define BUSY_TIMEOUT_MS 5000
#define ID_HEX 16 /* key id: the first 8 bytes of SHA-256(key), in hex */

struct gw_keys {
    sqlite3 *db;
    pthread_mutex_t mu;
    sqlite3_stmt *by_id; /* SELECT ... WHERE id = ? */
    long long (*now)(void *);
    void *now_ctx;
    char path[512];
};

static const char *SCHEMA_SQL =
    "CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT);"
    "CREATE TABLE IF NOT EXISTS keys("
    "  id TEXT PRIMARY KEY, hash BLOB, name TEXT NOT NULL DEFAULT '',"
    "  role TEXT NOT NULL CHECK(role IN ('viewer','user','admin')),"
    "  models TEXT NOT NULL DEFAULT '', rpm INTEGER NOT NULL DEFAULT 0,"
    "  tpm INTEGER NOT NULL DEFAULT 0, max_concurrent INTEGER NOT NULL DEFAULT 0,"
    "  max_tokens INTEGER NOT NULL DEFAULT 0, expires_at INTEGER NOT NULL DEFAULT 0,"
    "  disabled INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL,"
    "  created_by TEXT NOT NULL DEFAULT '', revoked_at INTEGER NOT NULL DEFAULT 0);"
    "CREATE TABLE IF NOT EXISTS audit("
    "  seq INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, actor TEXT NOT NULL,"
    "  action TEXT NOT NULL, target TEXT NOT NULL DEFAULT '', status INTEGER NOT NULL,"
    "  detail TEXT NOT NULL DEFAULT '');"
    "INSERT OR IGNORE INTO meta(k, v) VALUES('app', 'minitrain-gateway-keys'), ('schema', '1');";

#define ROW_COLS "id, name, role, models, rpm, tpm, max_concurrent, max_tokens, expires_at," \
                 " disabled, created_at, created_by, revoked_at, hash"

long long gw_keys_now(gw_keys *k) { return k->now ? k->now(k->now_ctx) : (long long)time(NULL); }

void gw_keys_set_clock(gw_keys *k, long long (*now)(void *ctx), void *ctx) {
    k->now = now;
    k->now_ctx = ctx;
}

const char *gw_role_name(gw_role r) {
    switch (r) {
    case GW_ROLE_VIEWER: return "viewer";
    case GW_ROLE_USER: return "user";
    case GW_ROLE_ADMIN: return "admin";
    }
    return NULL;
}

int gw_role_parse(const char *s, gw_role *out) {
    for (int r = GW_ROLE_VIEWER; r <= GW_ROLE_ADMIN; r++)
        if (s && !strcmp(s, gw_role_name((gw_role)r))) {
            *out = (gw_role)r;
            return 0;
        }
    return -1;
}

/* ---- open / close --------------------------------------------------------------------------- */

static int exec_sql(sqlite3 *db, const char *sql, char *err, size_t errlen, const char *path) {
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        mt_errf(err, errlen, "cannot initialise key database '%s': %s", path,
                msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int wal_cb(void *arg, int n, char **vals, char **cols) {
    (void)cols;
    if (n > 0 && vals[0]) snprintf((char *)arg, 16, "%s", vals[0]);
    return 0;
}

gw_keys *gw_keys_open(const char *db_path, char *err, size_t errlen) {
    if (!db_path || !*db_path) {
        mt_errf(err, errlen, "the key database path is empty");
        return NULL;
    }
    /* create it owner-only before SQLite does (SQLite would use 0644): the audit trail and the
     * key metadata are nobody else's business */
    int fd = open(db_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        mt_errf(err, errlen, "cannot open key database '%s': %s", db_path, strerror(errno));
        return NULL;
    }
    close(fd);
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, NULL);
    if (rc != SQLITE_OK) {
        mt_errf(err, errlen, "cannot open key database '%s': %s", db_path,
                db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
    char mode[16] = "";
    char *msg = NULL;
    /* journal_mode=WAL also validates the file: a non-database file fails here */
    rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL", wal_cb, mode, &msg);
    if (rc != SQLITE_OK) {
        mt_errf(err, errlen, "'%s' is not a gateway key database: %s", db_path,
                msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        sqlite3_close(db);
        return NULL;
    }
    if (strcmp(mode, "wal") != 0)
        mt_warn("key database '%s' is in journal mode '%s', not WAL", db_path, mode);
    if (exec_sql(db, "PRAGMA synchronous=NORMAL;", err, errlen, db_path) ||
        exec_sql(db, SCHEMA_SQL, err, errlen, db_path)) {
        sqlite3_close(db);
        return NULL;
    }
    /* a SQLite file of some other program that happens to have no clashing tables */
    sqlite3_stmt *st = NULL;
    int ours = 0;
    if (sqlite3_prepare_v2(db, "SELECT v FROM meta WHERE k = 'app'", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        ours = !strcmp((const char *)sqlite3_column_text(st, 0), "minitrain-gateway-keys");
    sqlite3_finalize(st);
    if (!ours) {
        mt_errf(err, errlen, "'%s' is a SQLite database of another program, not a gateway key "
                "database", db_path);
        sqlite3_close(db);
        return NULL;
    }
    gw_keys *k = callocCheck(1, sizeof(gw_keys));
    k->db = db;
    pthread_mutex_init(&k->mu, NULL);
    snprintf(k->path, sizeof(k->path), "%s", db_path);
    rc = sqlite3_prepare_v2(db, "SELECT " ROW_COLS " FROM keys WHERE id = ?", -1, &k->by_id, NULL);
    if (rc != SQLITE_OK) {
        mt_errf(err, errlen, "key database '%s' has an unexpected schema: %s", db_path,
                sqlite3_errmsg(db));
        gw_keys_close(k);
        return NULL;
    }
    return k;
}

void gw_keys_close(gw_keys *k) {
    if (!k) return;
    sqlite3_finalize(k->by_id);
    sqlite3_close(k->db);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

/* ---- rows ----------------------------------------------------------------------------------- */

static void col_text(sqlite3_stmt *st, int i, char *out, size_t cap) {
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(out, cap, "%s", t ? (const char *)t : "");
}

/* Read the current row of a statement selecting ROW_COLS. hash (32 bytes) gets the stored hash;
 * returns 1 if there is one (0 for a revoked key). */
static int read_row(sqlite3_stmt *st, gw_key_row *r, unsigned char hash[32]) {
    memset(r, 0, sizeof(*r));
    col_text(st, 0, r->info.id, sizeof(r->info.id));
    col_text(st, 1, r->name, sizeof(r->name));
    char role[16];
    col_text(st, 2, role, sizeof(role));
    gw_role_parse(role, &r->info.role); /* the CHECK constraint allows nothing else */
    col_text(st, 3, r->info.models, sizeof(r->info.models));
    r->info.rpm = (long)sqlite3_column_int64(st, 4);
    r->info.tpm = (long)sqlite3_column_int64(st, 5);
    r->info.max_concurrent = sqlite3_column_int(st, 6);
    r->info.max_tokens = sqlite3_column_int(st, 7);
    r->info.expires_at = sqlite3_column_int64(st, 8);
    r->info.disabled = sqlite3_column_int(st, 9) != 0;
    r->created_at = sqlite3_column_int64(st, 10);
    col_text(st, 11, r->created_by, sizeof(r->created_by));
    r->revoked_at = sqlite3_column_int64(st, 12);
    int has = sqlite3_column_type(st, 13) == SQLITE_BLOB && sqlite3_column_bytes(st, 13) == 32;
    if (hash) {
        if (has) memcpy(hash, sqlite3_column_blob(st, 13), 32);
        else memset(hash, 0, 32);
    }
    return has;
}

/* Look up id under k->mu. 1 found, 0 not found, -1 database error. */
static int lookup_locked(gw_keys *k, const char *id, gw_key_row *r, unsigned char hash[32],
                         int *has_hash) {
    sqlite3_stmt *st = k->by_id;
    sqlite3_reset(st);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    int out = 0;
    if (rc == SQLITE_ROW) {
        int h = read_row(st, r, hash);
        if (has_hash) *has_hash = h;
        out = 1;
    } else if (rc != SQLITE_DONE) {
        mt_warn("key database '%s': %s", k->path, sqlite3_errmsg(k->db));
        out = -1;
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return out;
}

int gw_keys_get(gw_keys *k, const char *id, gw_key_row *out) {
    pthread_mutex_lock(&k->mu);
    int rc = lookup_locked(k, id, out, NULL, NULL);
    pthread_mutex_unlock(&k->mu);
    return rc == 1 ? 0 : -1;
}

/* ---- authentication ------------------------------------------------------------------------- */

static void hex(const unsigned char *b, size_t n, char *out) {
    static const char H[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = H[b[i] >> 4];
        out[2 * i + 1] = H[b[i] & 15];
    }
    out[2 * n] = 0;
}

/* 1 if s is "mt-" followed by exactly 64 lowercase hex digits. */
static int well_formed(const char *s, size_t n) {
    if (n != GW_KEY_LEN || memcmp(s, "mt-", 3) != 0) return 0;
    for (size_t i = 3; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

int gw_keys_check(gw_keys *k, const char *authorization, gw_key_info *out) {
    memset(out, 0, sizeof(*out));
    if (authorization == NULL) return GW_AUTH_MISSING;
    const char *p = authorization;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == 0) return GW_AUTH_MISSING;
    if (strncasecmp(p, "Bearer", 6) != 0 || (p[6] != ' ' && p[6] != '\t')) return GW_AUTH_INVALID;
    p += 6;
    while (*p == ' ' || *p == '\t') p++;
    size_t n = strlen(p);
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
    if (!well_formed(p, n)) return GW_AUTH_INVALID;
    unsigned char h[SHA256_DIGEST_LENGTH], stored[32] = {0};
    SHA256((const unsigned char *)p, n, h);
    char id[ID_HEX + 1];
    hex(h, ID_HEX / 2, id);
    gw_key_row row;
    int has_hash = 0;
    pthread_mutex_lock(&k->mu);
    int found = lookup_locked(k, id, &row, stored, &has_hash);
    long long now = gw_keys_now(k);
    pthread_mutex_unlock(&k->mu);
    if (found < 0) return GW_AUTH_UNAVAILABLE;
    /* the compare runs whether or not a row was found (against zeros then): same code path */
    int equal = CRYPTO_memcmp(h, stored, 32) == 0;
    if (found != 1 || !has_hash || !equal) return GW_AUTH_INVALID;
    *out = row.info;
    if (row.info.disabled) return GW_AUTH_DISABLED;
    if (row.info.expires_at && now >= row.info.expires_at) return GW_AUTH_EXPIRED;
    return GW_AUTH_OK;
}

int gw_key_allows_model(const gw_key_info *key, const char *model) {
    const char *m = key->models;
    while (*m == ' ') m++;
    if (*m == 0 || !strcmp(m, "*")) return 1;
    if (!model) return 0;
    size_t ml = strlen(model);
    while (*m) {
        const char *e = strchr(m, ',');
        size_t n = e ? (size_t)(e - m) : strlen(m);
        const char *a = m, *b = m + n;
        while (a < b && *a == ' ') a++;
        while (b > a && b[-1] == ' ') b--;
        if ((size_t)(b - a) == ml && !memcmp(a, model, ml)) return 1;
        if ((size_t)(b - a) == 1 && *a == '*') return 1;
        if (!e) break;
        m = e + 1;
    }
    return 0;
}

int gw_key_can_generate(const gw_key_info *key) {
    return key && (key->role == GW_ROLE_USER || key->role == GW_ROLE_ADMIN);
}

/* ---- create / update / revoke --------------------------------------------------------------- */

static int model_name_ok(const char *a, size_t n) {
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = a[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == ':' || c == '/'))
            return 0;
    }
    return 1;
}

int gw_key_spec_check(const gw_key_info *s, long long now, int require_future, char *err,
                      size_t errlen) {
    if (!gw_role_name(s->role)) {
        mt_errf(err, errlen, "role must be admin, user or viewer");
        return -1;
    }
    if (memchr(s->models, 0, sizeof(s->models)) == NULL) {
        mt_errf(err, errlen, "models list is longer than %zu bytes", sizeof(s->models) - 1);
        return -1;
    }
    const char *m = s->models;
    if (*m && strcmp(m, "*")) {
        for (;;) {
            const char *e = strchr(m, ',');
            size_t n = e ? (size_t)(e - m) : strlen(m);
            if (!(n == 1 && *m == '*') && !model_name_ok(m, n)) {
                mt_errf(err, errlen, "model name '%.*s' must be 1..64 characters of "
                        "A-Z a-z 0-9 . _ - : / (comma-separated, '*' = all)", (int)(n > 64 ? 64 : n), m);
                return -1;
            }
            if (!e) break;
            m = e + 1;
        }
    }
    if (s->rpm < 0 || s->tpm < 0 || s->max_concurrent < 0 || s->max_tokens < 0) {
        mt_errf(err, errlen, "rpm, tpm, max_concurrent and max_tokens must be >= 0 (0 = unlimited)");
        return -1;
    }
    if (s->rpm > 1000000000L || s->tpm > 1000000000000L || s->max_concurrent > 1000000 ||
        s->max_tokens > 1000000000) {
        mt_errf(err, errlen, "a limit is out of range (rpm <= 1e9, tpm <= 1e12, max_concurrent <= "
                "1e6, max_tokens <= 1e9)");
        return -1;
    }
    if (s->expires_at < 0 || (require_future && s->expires_at && s->expires_at <= now)) {
        mt_errf(err, errlen, "expiry must be in the future (or 0 = never)");
        return -1;
    }
    return 0;
}

static int bind_settable(sqlite3_stmt *st, int first, const gw_key_row *r) {
    const gw_key_info *s = &r->info;
    int i = first;
    sqlite3_bind_text(st, i++, r->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, i++, gw_role_name(s->role), -1, SQLITE_STATIC);
    sqlite3_bind_text(st, i++, s->models, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, i++, s->rpm);
    sqlite3_bind_int64(st, i++, s->tpm);
    sqlite3_bind_int(st, i++, s->max_concurrent);
    sqlite3_bind_int(st, i++, s->max_tokens);
    sqlite3_bind_int64(st, i++, s->expires_at);
    sqlite3_bind_int(st, i++, s->disabled ? 1 : 0);
    return i;
}

int gw_keys_create(gw_keys *k, const char *actor, const char *name, const gw_key_info *spec,
                   char key_out[GW_KEY_LEN + 1], gw_key_row *out, char *err, size_t errlen) {
    long long now = gw_keys_now(k);
    if (gw_key_spec_check(spec, now, 1, err, errlen)) return -1;
    if (name && strlen(name) >= sizeof(((gw_key_row *)0)->name)) {
        mt_errf(err, errlen, "name must be at most 63 bytes");
        return -1;
    }
    gw_key_row row;
    memset(&row, 0, sizeof(row));
    row.info = *spec;
    row.info.disabled = 0;
    snprintf(row.name, sizeof(row.name), "%s", name ? name : "");
    snprintf(row.created_by, sizeof(row.created_by), "%s", actor ? actor : "");
    row.created_at = now;
    unsigned char raw[32], h[32];
    int rc = SQLITE_CONSTRAINT;
    pthread_mutex_lock(&k->mu);
    /* an id collision (two keys whose hashes share 64 bits) is astronomically rare: draw again */
    for (int attempt = 0; attempt < 4 && rc == SQLITE_CONSTRAINT; attempt++) {
        ssize_t got = getrandom(raw, sizeof(raw), 0);
        mtCheck(got == (ssize_t)sizeof(raw), "getrandom(2) failed: no kernel randomness for keys");
        memcpy(key_out, "mt-", 3);
        hex(raw, sizeof(raw), key_out + 3);
        SHA256((const unsigned char *)key_out, GW_KEY_LEN, h);
        hex(h, ID_HEX / 2, row.info.id);
        sqlite3_stmt *st = NULL;
        rc = sqlite3_prepare_v2(k->db,
                                "INSERT INTO keys(name, role, models, rpm, tpm, max_concurrent,"
                                " max_tokens, expires_at, disabled, id, hash, created_at,"
                                " created_by) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                                -1, &st, NULL);
        if (rc == SQLITE_OK) {
            int i = bind_settable(st, 1, &row);
            sqlite3_bind_text(st, i++, row.info.id, -1, SQLITE_TRANSIENT);
            sqlite3_bind_blob(st, i++, h, 32, SQLITE_TRANSIENT);
            sqlite3_bind_int64(st, i++, row.created_at);
            sqlite3_bind_text(st, i++, row.created_by, -1, SQLITE_TRANSIENT);
            rc = sqlite3_step(st);
            if (rc == SQLITE_DONE) rc = SQLITE_OK;
            else rc = sqlite3_extended_errcode(k->db) == SQLITE_CONSTRAINT_PRIMARYKEY ? SQLITE_CONSTRAINT : rc;
        }
        sqlite3_finalize(st);
    }
    OPENSSL_cleanse(raw, sizeof(raw));
    if (rc != SQLITE_OK) mt_errf(err, errlen, "cannot store the key in '%s': %s", k->path,
                                 sqlite3_errmsg(k->db));
    pthread_mutex_unlock(&k->mu);
    if (rc != SQLITE_OK) {
        OPENSSL_cleanse(key_out, GW_KEY_LEN + 1);
        return -1;
    }
    if (out) *out = row;
    return 0;
}

int gw_keys_put(gw_keys *k, const gw_key_row *row) {
    gw_key_row cur;
    pthread_mutex_lock(&k->mu);
    int found = lookup_locked(k, row->info.id, &cur, NULL, NULL);
    int out = found == 1 ? 0 : -1;
    if (found == 1 && cur.revoked_at) out = 1;
    if (out == 0) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(k->db,
                                    "UPDATE keys SET name=?, role=?, models=?, rpm=?, tpm=?,"
                                    " max_concurrent=?, max_tokens=?, expires_at=?, disabled=?"
                                    " WHERE id=? AND revoked_at=0", -1, &st, NULL);
        if (rc == SQLITE_OK) {
            int i = bind_settable(st, 1, row);
            sqlite3_bind_text(st, i, row->info.id, -1, SQLITE_TRANSIENT);
            rc = sqlite3_step(st);
        }
        if (rc != SQLITE_DONE) {
            mt_warn("key database '%s': update failed: %s", k->path, sqlite3_errmsg(k->db));
            out = -1;
        }
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&k->mu);
    return out;
}

int gw_keys_revoke(gw_keys *k, const char *id) {
    gw_key_row cur;
    pthread_mutex_lock(&k->mu);
    int found = lookup_locked(k, id, &cur, NULL, NULL);
    int out = found == 1 ? (cur.revoked_at ? 1 : 0) : -1;
    if (out == 0) {
        sqlite3_stmt *st = NULL;
        int rc = sqlite3_prepare_v2(k->db, "UPDATE keys SET hash=NULL, revoked_at=? WHERE id=?",
                                    -1, &st, NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_int64(st, 1, gw_keys_now(k));
            sqlite3_bind_text(st, 2, id, -1, SQLITE_TRANSIENT);
            rc = sqlite3_step(st);
        }
        if (rc != SQLITE_DONE) {
            mt_warn("key database '%s': revoke failed: %s", k->path, sqlite3_errmsg(k->db));
            out = -1;
        }
        sqlite3_finalize(st);
    }
    pthread_mutex_unlock(&k->mu);
    return out;
}

int gw_keys_list(gw_keys *k, int include_revoked, gw_key_row **rows) {
    *rows = NULL;
    int n = 0, cap = 0;
    pthread_mutex_lock(&k->mu);
    sqlite3_stmt *st = NULL;
    const char *sql = include_revoked ? "SELECT " ROW_COLS " FROM keys ORDER BY created_at, rowid"
                                      : "SELECT " ROW_COLS " FROM keys WHERE revoked_at = 0"
                                        " ORDER BY created_at, rowid";
    if (sqlite3_prepare_v2(k->db, sql, -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                *rows = realloc(*rows, (size_t)cap * sizeof(gw_key_row));
                mtCheck(*rows != NULL, "out of memory listing keys");
            }
            read_row(st, &(*rows)[n++], NULL);
        }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&k->mu);
    return n;
}

/* ---- audit ------------------------------------------------------------------------------------ */

void gw_keys_audit(gw_keys *k, const char *actor, const char *action, const char *target,
                   int status, const char *detail) {
    pthread_mutex_lock(&k->mu);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(k->db, "INSERT INTO audit(at, actor, action, target, status, detail)"
                                       " VALUES(?,?,?,?,?,?)", -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, gw_keys_now(k));
        sqlite3_bind_text(st, 2, actor ? actor : "", -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, action, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 4, target ? target : "", -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 5, status);
        sqlite3_bind_text(st, 6, detail ? detail : "", -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st);
    }
    /* an audit row that cannot be written is reported, never silently dropped */
    if (rc != SQLITE_DONE)
        mt_warn("key database '%s': cannot write the audit row (%s %s): %s", k->path,
                actor ? actor : "", action, sqlite3_errmsg(k->db));
    sqlite3_finalize(st);
    pthread_mutex_unlock(&k->mu);
}

int gw_keys_audit_list(gw_keys *k, int limit, gw_audit_row **rows) {
    *rows = NULL;
    int n = 0;
    if (limit <= 0) return 0;
    pthread_mutex_lock(&k->mu);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(k->db, "SELECT at, actor, action, target, status, detail FROM audit"
                                  " ORDER BY seq DESC LIMIT ?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int(st, 1, limit);
        *rows = callocCheck((size_t)limit, sizeof(gw_audit_row));
        while (n < limit && sqlite3_step(st) == SQLITE_ROW) {
            gw_audit_row *a = &(*rows)[n++];
            a->at = sqlite3_column_int64(st, 0);
            col_text(st, 1, a->actor, sizeof(a->actor));
            col_text(st, 2, a->action, sizeof(a->action));
            col_text(st, 3, a->target, sizeof(a->target));
            a->status = sqlite3_column_int(st, 4);
            col_text(st, 5, a->detail, sizeof(a->detail));
        }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&k->mu);
    return n;
}
