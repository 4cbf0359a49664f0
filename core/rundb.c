/*
 * core/rundb.c — the run database (SQLite, WAL) behind every figure minitrain reports.
 *
 * Shape: one connection per process, opened by rundb_open(); prepared statements for the three
 * inserts are made once and reused, so logging a metric per step costs a bind + step + reset.
 * Concurrency comes from SQLite itself: WAL lets readers (`minitrain report`) run beside a writer,
 * and busy_timeout makes concurrent writers (ranks logging events, a supervisor closing a run)
 * wait their turn instead of failing. synchronous=NORMAL in WAL mode keeps the database consistent
 * on power loss (the last transactions may be lost, never corrupted) and skips the fsync per row.
 * See core/rundb.h for the schema and the error policy.
 */
#include "core/rundb.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/timer.h"

struct rundb {
    sqlite3 *db;
    sqlite3_stmt *ins_metric;
    sqlite3_stmt *ins_event;
    sqlite3_stmt *ins_run;
    sqlite3_stmt *end_run;
    sqlite3_stmt *ins_ckpt;
    sqlite3_stmt *ins_eval;
    int batch_depth;
};

static const char *SCHEMA_SQL =
    "CREATE TABLE IF NOT EXISTS runs("
    "  id INTEGER PRIMARY KEY, name TEXT, config TEXT, git_commit TEXT,"
    "  started_at REAL, ended_at REAL, status TEXT, world_size INT);"
    "CREATE TABLE IF NOT EXISTS metrics("
    "  run_id INT, step INT, train_loss REAL, val_loss REAL, lr REAL, grad_norm REAL,"
    "  tokens_per_s REAL, mfu REAL, mfu_theoretical REAL, step_ms REAL, wall_s REAL);"
    "CREATE INDEX IF NOT EXISTS metrics_run_step ON metrics(run_id, step);"
    "CREATE TABLE IF NOT EXISTS events("
    "  run_id INT, time REAL, kind TEXT, rank INT, detail TEXT);"
    "CREATE INDEX IF NOT EXISTS events_run_kind ON events(run_id, kind);"
    "CREATE TABLE IF NOT EXISTS checkpoints("
    "  run_id INT, step INT, tier INT, path TEXT UNIQUE, bytes INT, checksum TEXT, state TEXT,"
    "  snapshot_ms REAL, write_ms REAL, time REAL);"
    "CREATE TABLE IF NOT EXISTS evals("
    "  run_id INT, step INT, kind TEXT, attack TEXT, norm TEXT, eps_rel REAL, eps_abs REAL, k INT,"
    "  clean_loss REAL, adv_loss REAL, clean_acc REAL, adv_acc REAL, success_rate REAL,"
    "  n_tokens INT, ms REAL, time REAL);"
    "CREATE INDEX IF NOT EXISTS evals_run_step ON evals(run_id, step);"
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);";

const char *rundb_schema_sql(void) { return SCHEMA_SQL; }

/* A random (version 4) UUID, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", into out[37]: 16 bytes of
 * /dev/urandom with the version and variant bits of RFC 4122 section 4.4. */
static void new_uuid(char out[37]) {
    unsigned char b[16] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(b, 1, sizeof(b), f) : 0;
    if (f) fclose(f);
    if (got != sizeof(b)) { /* no /dev/urandom: time and pid, still unique enough per host */
        uint64_t t = (uint64_t)(timer_unix() * 1e6), p = (uint64_t)getpid();
        memcpy(b, &t, 8);
        memcpy(b + 8, &p, 8);
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

const char *rundb_node_name(void) {
    static char node[256];
    const char *e = getenv("MINITRAIN_NODE");
    if (e == NULL || e[0] == '\0') e = getenv("SLURMD_NODENAME");
    if (e != NULL && e[0] != '\0') {
        snprintf(node, sizeof(node), "%s", e);
    } else if (gethostname(node, sizeof(node) - 1) != 0 || node[0] == '\0') {
        snprintf(node, sizeof(node), "localhost");
    }
    return node;
}

int rundb_meta_get(sqlite3 *db, const char *key, char *out, size_t outlen) {
    sqlite3_stmt *st = NULL;
    if (outlen > 0) out[0] = '\0';
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?1", -1, &st, NULL) != SQLITE_OK)
        return -1; /* a file older than schema 2 opened read-only: no meta table */
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(st), found = 0;
    if (rc == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL) {
        snprintf(out, outlen, "%s", (const char *)sqlite3_column_text(st, 0));
        found = 1;
    }
    sqlite3_finalize(st);
    return found ? 0 : -1;
}

/* The job's identity, written once when the file is created or first opened by a minitrain that
 * knows it (a run.db of schema 1 gets its job id here: the forward migration to schema 2). */
static int exec_retry(sqlite3 *db, const char *sql, int (*cb)(void *, int, char **, char **),
                      void *arg, char **msg);
static int stamp_identity(sqlite3 *db, char **msg) {
    char uuid[37];
    new_uuid(uuid);
    char *q = sqlite3_mprintf("INSERT OR IGNORE INTO meta(key, value) VALUES('job_id', %Q),"
                              " ('node', %Q)", uuid, rundb_node_name());
    mtCheck(q != NULL, "out of memory stamping the run database");
    int rc = exec_retry(db, q, NULL, NULL, msg);
    sqlite3_free(q);
    return rc;
}

char *rundb_path(const char *run_dir, char *out, size_t outlen) {
    size_t n = strlen(run_dir);
    while (n > 1 && run_dir[n - 1] == '/') n--; /* "runs/x/" -> "runs/x/run.db", not "//" */
    snprintf(out, outlen, "%.*s/%s", (int)n, run_dir, RUNDB_FILE);
    return out;
}

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = NULL;
    sqliteCheck(sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL), db);
    return st;
}

/* sqlite3_exec callback: copy the first column of the first row into a char[16]. */
static int text_cb(void *arg, int ncol, char **vals, char **names) {
    (void)names;
    if (ncol > 0 && vals[0] != NULL) snprintf((char *)arg, 16, "%s", vals[0]);
    return 0;
}

static int user_version_cb(void *arg, int ncol, char **vals, char **names) {
    (void)names;
    if (ncol > 0 && vals[0] != NULL) *(int *)arg = atoi(vals[0]);
    return 0;
}

/* sqlite3_exec that retries on SQLITE_BUSY/LOCKED. The busy handler does not cover every case
 * when several processes open a new database at once (switching to WAL and creating the schema
 * can return BUSY immediately to avoid a deadlock), so the first open retries for up to ~10 s. */
static int exec_retry(sqlite3 *db, const char *sql, int (*cb)(void *, int, char **, char **),
                      void *arg, char **msg) {
    int rc = SQLITE_BUSY;
    for (int attempt = 0; attempt < 500; attempt++) {
        if (*msg) {
            sqlite3_free(*msg);
            *msg = NULL;
        }
        rc = sqlite3_exec(db, sql, cb, arg, msg);
        if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) break;
        sqlite3_sleep(20);
    }
    return rc;
}

/* Remove a run.db this process created but could not initialise (disk full, read-only
 * directory), with its WAL and shared-memory files. */
static void remove_db_files(const char *path) {
    char p[4300];
    unlink(path);
    snprintf(p, sizeof(p), "%s-wal", path);
    unlink(p);
    snprintf(p, sizeof(p), "%s-shm", path);
    unlink(p);
}

rundb *rundb_open(const char *run_dir, char *err, size_t errlen) {
    int version = 0;
    if (run_dir == NULL || run_dir[0] == '\0') {
        mt_errf(err, errlen, "run directory is empty");
        return NULL;
    }
    char why[FS_PATH_MAX + 64]; /* fs_mkdir_p's own words: "'X' exists and is not a directory" */
    if (fs_mkdir_p(run_dir, why, sizeof(why)) != 0) {
        mt_errf(err, errlen, "cannot create run directory: %s", why);
        return NULL;
    }
    char path[4200];
    rundb_path(run_dir, path, sizeof(path));
    sqlite3 *db = NULL;
    struct stat sb;
    int existed = stat(path, &sb) == 0;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        mt_errf(err, errlen, "cannot open run database '%s': %s", path,
                db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        if (!existed) remove_db_files(path);
        return NULL;
    }
    sqlite3_busy_timeout(db, RUNDB_BUSY_TIMEOUT_MS);
    /* journal_mode=WAL also validates the file: a non-database file fails here ("file is not a
     * database"). Concurrent first opens are serialized by the busy handler. */
    char *msg = NULL;
    char mode[16] = "";
    rc = exec_retry(db, "PRAGMA journal_mode=WAL", text_cb, mode, &msg);
    if (rc == SQLITE_OK && strcmp(mode, "wal") != 0)
        mt_warn("run database '%s' is in journal mode '%s', not WAL (filesystem without shared "
                "memory?): concurrent writers will wait longer", path, mode);
    if (rc == SQLITE_OK) {
        sqlite3_free(msg);
        msg = NULL;
        rc = exec_retry(db, "PRAGMA synchronous=NORMAL", NULL, NULL, &msg);
    }
    if (rc == SQLITE_OK) {
        sqlite3_free(msg);
        msg = NULL;
        rc = exec_retry(db, SCHEMA_SQL, NULL, NULL, &msg);
    }
    if (rc == SQLITE_OK) {
        sqlite3_free(msg);
        msg = NULL;
        rc = stamp_identity(db, &msg);
    }
    if (rc == SQLITE_OK) {
        sqlite3_free(msg);
        msg = NULL;
        /* Stamp the schema version, never lowering one written by a newer minitrain. */
        char pragma[96];
        rc = exec_retry(db, "PRAGMA user_version", user_version_cb, &version, &msg);
        if (rc == SQLITE_OK && version < RUNDB_SCHEMA_VERSION) {
            snprintf(pragma, sizeof(pragma), "PRAGMA user_version=%d;", RUNDB_SCHEMA_VERSION);
            rc = exec_retry(db, pragma, NULL, NULL, &msg);
        }
    }
    if (rc != SQLITE_OK) {
        mt_errf(err, errlen, "cannot initialise run database '%s': %s", path,
                msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        sqlite3_close(db);
        if (!existed) remove_db_files(path); /* no empty run.db to confuse a later report */
        return NULL;
    }
    rundb *r = callocCheck(1, sizeof(*r));
    r->db = db;
    r->ins_metric = prepare(db, "INSERT INTO metrics(run_id, step, train_loss, val_loss, lr,"
                                " grad_norm, tokens_per_s, mfu, mfu_theoretical, step_ms, wall_s)"
                                " VALUES(?,?,?,?,?,?,?,?,?,?,?)");
    r->ins_event = prepare(db, "INSERT INTO events(run_id, time, kind, rank, detail)"
                               " VALUES(?,?,?,?,?)");
    r->ins_run = prepare(db, "INSERT INTO runs(name, config, git_commit, started_at, ended_at,"
                             " status, world_size) VALUES(?,?,?,?,NULL,'running',?)");
    r->end_run = prepare(db, "UPDATE runs SET ended_at=?, status=? WHERE id=?");
    /* one row per checkpoint directory: a later state of the same path updates it, keeping the
     * sizes and timings already known when the new values are NULL */
    r->ins_ckpt = prepare(db, "INSERT INTO checkpoints(run_id, step, tier, path, bytes, checksum,"
                              " state, snapshot_ms, write_ms, time) VALUES(?,?,?,?,?,?,?,?,?,?)"
                              " ON CONFLICT(path) DO UPDATE SET run_id=excluded.run_id,"
                              " step=excluded.step, tier=excluded.tier,"
                              " bytes=COALESCE(excluded.bytes, bytes),"
                              " checksum=COALESCE(excluded.checksum, checksum),"
                              " state=excluded.state,"
                              " snapshot_ms=COALESCE(excluded.snapshot_ms, snapshot_ms),"
                              " write_ms=COALESCE(excluded.write_ms, write_ms),"
                              " time=excluded.time");
    r->ins_eval = prepare(db, "INSERT INTO evals(run_id, step, kind, attack, norm, eps_rel, eps_abs,"
                              " k, clean_loss, adv_loss, clean_acc, adv_acc, success_rate, n_tokens,"
                              " ms, time) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
    return r;
}

/* Bind a double, or NULL when it is NAN (missing value). */
static void bind_real(rundb *r, sqlite3_stmt *st, int idx, double v) {
    if (isnan(v))
        sqliteCheck(sqlite3_bind_null(st, idx), r->db);
    else
        sqliteCheck(sqlite3_bind_double(st, idx, v), r->db);
}

static void bind_text(rundb *r, sqlite3_stmt *st, int idx, const char *s) {
    if (s == NULL)
        sqliteCheck(sqlite3_bind_null(st, idx), r->db);
    else
        sqliteCheck(sqlite3_bind_text(st, idx, s, -1, SQLITE_TRANSIENT), r->db);
}

/* Run a bound statement to completion and make it reusable. */
static void step_reset(rundb *r, sqlite3_stmt *st) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    sqliteCheck(rc == SQLITE_DONE ? SQLITE_OK : rc, r->db);
}

int64_t rundb_run_begin(rundb *db, const char *name, const char *config_json,
                        const char *git_commit, int world_size) {
    mtCheck(db != NULL, "rundb_run_begin needs an open run database");
    bind_text(db, db->ins_run, 1, name);
    bind_text(db, db->ins_run, 2, config_json);
    bind_text(db, db->ins_run, 3, git_commit);
    bind_real(db, db->ins_run, 4, timer_unix());
    sqliteCheck(sqlite3_bind_int(db->ins_run, 5, world_size), db->db);
    step_reset(db, db->ins_run);
    return (int64_t)sqlite3_last_insert_rowid(db->db);
}

int rundb_status_valid(const char *status) {
    static const char *const OK[] = {"running", "completed", "failed", "stopped",
                                     "crashed", "hung", "killed"};
    for (size_t i = 0; status && i < sizeof(OK) / sizeof(OK[0]); i++)
        if (strcmp(status, OK[i]) == 0) return 1;
    return 0;
}

int rundb_end_running(rundb *db, const char *status, double at) {
    mtCheck(db != NULL && rundb_status_valid(status) && strcmp(status, "running") != 0,
            "rundb_end_running needs an open database and a final status");
    sqlite3_stmt *st = NULL;
    sqliteCheck(sqlite3_prepare_v2(db->db, "UPDATE runs SET status = ?1, ended_at = ?2 WHERE "
                                           "status = 'running'", -1, &st, NULL), db->db);
    sqliteCheck(sqlite3_bind_text(st, 1, status, -1, SQLITE_TRANSIENT), db->db);
    sqliteCheck(sqlite3_bind_double(st, 2, at), db->db);
    int rc = sqlite3_step(st);
    while (rc == SQLITE_BUSY) rc = sqlite3_step(st); /* after the busy timeout: keep trying */
    sqliteCheck(rc, db->db);
    sqlite3_finalize(st);
    return sqlite3_changes(db->db);
}

void rundb_run_end(rundb *db, int64_t run_id, const char *status) {
    mtCheck(db != NULL, "rundb_run_end needs an open run database");
    mtCheck(rundb_status_valid(status), "run status must be one of " RUNDB_STATUSES);
    bind_real(db, db->end_run, 1, timer_unix());
    bind_text(db, db->end_run, 2, status);
    sqliteCheck(sqlite3_bind_int64(db->end_run, 3, run_id), db->db);
    step_reset(db, db->end_run);
}

void rundb_log_metric(rundb *db, int64_t run_id, const rundb_metric *m) {
    mtCheck(db != NULL && m != NULL, "rundb_log_metric needs an open database and a metric");
    sqlite3_stmt *st = db->ins_metric;
    sqliteCheck(sqlite3_bind_int64(st, 1, run_id), db->db);
    sqliteCheck(sqlite3_bind_int(st, 2, m->step), db->db);
    bind_real(db, st, 3, m->train_loss);
    bind_real(db, st, 4, m->val_loss);
    bind_real(db, st, 5, m->lr);
    bind_real(db, st, 6, m->grad_norm);
    bind_real(db, st, 7, m->tokens_per_s);
    bind_real(db, st, 8, m->mfu);
    bind_real(db, st, 9, m->mfu_theoretical);
    bind_real(db, st, 10, m->step_ms);
    bind_real(db, st, 11, m->wall_s);
    step_reset(db, st);
}

void rundb_log_event(rundb *db, int64_t run_id, const char *kind, int rank, const char *detail) {
    mtCheck(db != NULL && kind != NULL, "rundb_log_event needs an open database and a kind");
    sqlite3_stmt *st = db->ins_event;
    sqliteCheck(sqlite3_bind_int64(st, 1, run_id), db->db);
    bind_real(db, st, 2, timer_unix());
    bind_text(db, st, 3, kind);
    sqliteCheck(sqlite3_bind_int(st, 4, rank), db->db);
    bind_text(db, st, 5, detail);
    step_reset(db, st);
}

void rundb_log_checkpoint(rundb *db, int64_t run_id, const rundb_checkpoint *c) {
    mtCheck(db != NULL && c != NULL && c->path != NULL && c->state != NULL,
            "rundb_log_checkpoint needs an open database, a path and a state");
    mtCheck(strcmp(c->state, "writing") == 0 || strcmp(c->state, "committed") == 0 ||
                strcmp(c->state, "corrupt") == 0 || strcmp(c->state, "deleted") == 0 ||
                strcmp(c->state, "failed") == 0,
            "checkpoint state must be one of writing|committed|corrupt|deleted|failed");
    sqlite3_stmt *st = db->ins_ckpt;
    sqliteCheck(sqlite3_bind_int64(st, 1, run_id), db->db);
    sqliteCheck(sqlite3_bind_int64(st, 2, c->step), db->db);
    sqliteCheck(sqlite3_bind_int(st, 3, c->tier), db->db);
    bind_text(db, st, 4, c->path);
    if (c->bytes < 0)
        sqliteCheck(sqlite3_bind_null(st, 5), db->db);
    else
        sqliteCheck(sqlite3_bind_int64(st, 5, c->bytes), db->db);
    bind_text(db, st, 6, c->checksum);
    bind_text(db, st, 7, c->state);
    bind_real(db, st, 8, c->snapshot_ms);
    bind_real(db, st, 9, c->write_ms);
    bind_real(db, st, 10, timer_unix());
    step_reset(db, st);
}

void rundb_log_eval(rundb *db, int64_t run_id, const rundb_eval *e) {
    mtCheck(db != NULL && e != NULL && e->kind != NULL && e->attack != NULL,
            "rundb_log_eval needs an open database, a kind and an attack");
    sqlite3_stmt *st = db->ins_eval;
    sqliteCheck(sqlite3_bind_int64(st, 1, run_id), db->db);
    sqliteCheck(sqlite3_bind_int(st, 2, e->step), db->db);
    bind_text(db, st, 3, e->kind);
    bind_text(db, st, 4, e->attack);
    bind_text(db, st, 5, e->norm);
    bind_real(db, st, 6, e->eps_rel);
    bind_real(db, st, 7, e->eps_abs);
    sqliteCheck(sqlite3_bind_int(st, 8, e->k), db->db);
    bind_real(db, st, 9, e->clean_loss);
    bind_real(db, st, 10, e->adv_loss);
    bind_real(db, st, 11, e->clean_acc);
    bind_real(db, st, 12, e->adv_acc);
    bind_real(db, st, 13, e->success_rate);
    sqliteCheck(sqlite3_bind_int64(st, 14, e->n_tokens), db->db);
    bind_real(db, st, 15, e->ms);
    bind_real(db, st, 16, e->time);
    step_reset(db, st);
}

int rundb_begin_batch(rundb *db) {
    mtCheck(db != NULL, "rundb_begin_batch needs an open run database");
    if (db->batch_depth++ == 0)
        sqliteCheck(sqlite3_exec(db->db, "BEGIN IMMEDIATE", NULL, NULL, NULL), db->db);
    return 0;
}

int rundb_commit_batch(rundb *db) {
    mtCheck(db != NULL && db->batch_depth > 0, "rundb_commit_batch without rundb_begin_batch");
    if (--db->batch_depth == 0)
        sqliteCheck(sqlite3_exec(db->db, "COMMIT", NULL, NULL, NULL), db->db);
    return 0;
}

void rundb_close(rundb *db) {
    if (db == NULL) return;
    if (db->batch_depth > 0) {
        db->batch_depth = 1;
        rundb_commit_batch(db);
    }
    sqlite3_finalize(db->ins_metric);
    sqlite3_finalize(db->ins_event);
    sqlite3_finalize(db->ins_run);
    sqlite3_finalize(db->end_run);
    sqlite3_finalize(db->ins_ckpt);
    sqlite3_finalize(db->ins_eval);
    sqliteCheck(sqlite3_close(db->db), NULL);
    free(db);
}

sqlite3 *rundb_sqlite(rundb *db) { return db != NULL ? db->db : NULL; }

const char *rundb_git_commit(void) {
    static char commit[64];
    static int done = 0;
    if (done) return commit;
    done = 1;
    snprintf(commit, sizeof(commit), "unknown");
    FILE *p = popen("git rev-parse --short HEAD 2>/dev/null", "r");
    if (p == NULL) return commit;
    char line[64] = {0};
    if (fgets(line, sizeof(line), p) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        int ok = line[0] != '\0';
        for (const char *c = line; *c; c++)
            if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'))) ok = 0;
        if (ok) snprintf(commit, sizeof(commit), "%s", line);
    }
    pclose(p);
    return commit;
}
