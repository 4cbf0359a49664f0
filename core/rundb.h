/*
 * core/rundb.h — the run database: one SQLite file, RUN_DIR/run.db, that every report reads.
 *
 * A job (one RUN_DIR) may span several processes: MPI ranks that log events, and restarts by the
 * supervisor, each of which adds a row to `runs`. So the file is opened in WAL mode with a busy
 * timeout, every process holds its own connection, and the hot path (one metric row per step) is a
 * reused prepared statement in autocommit mode with synchronous=NORMAL (no fsync per row).
 *
 * Schema (created if missing; PRAGMA user_version = RUNDB_SCHEMA_VERSION). Later modules add their
 * own tables (checkpoints, evals) through rundb_sqlite(); nothing here assumes it owns the file.
 *   runs(id INTEGER PRIMARY KEY, name TEXT, config TEXT (JSON), git_commit TEXT,
 *        started_at REAL (unix s), ended_at REAL, status TEXT (RUNDB_STATUSES), world_size INT)
 *        — the trainer ends its own row (completed|failed|stopped); a process that died without
 *        a word is ended by the supervisor after the teardown (crashed|hung|killed).
 *   metrics(run_id INT, step INT, train_loss REAL, val_loss REAL (NULL = not evaluated), lr REAL,
 *           grad_norm REAL, tokens_per_s REAL, mfu REAL (fraction of measured peak),
 *           mfu_theoretical REAL (fraction of theoretical peak), step_ms REAL,
 *           wall_s REAL (seconds since that run's start))
 *           — no primary key: a step recomputed after a restart is logged again.
 *   events(run_id INT, time REAL (unix s), kind TEXT, rank INT, detail TEXT (a JSON object))
 *           — kinds and detail keys: core/events.h, which also builds every detail
 *   checkpoints(run_id INT, step INT, tier INT (0 memory, 1 run dir, 2 durable),
 *               path TEXT UNIQUE (the committed directory ROOT/step_N), bytes INT,
 *               checksum TEXT ("crc32c:<hex>" of the step's manifest.json),
 *               state TEXT (writing|committed|corrupt|deleted|failed),
 *               snapshot_ms REAL (training stall), write_ms REAL (background write + commit),
 *               time REAL (unix s of the last state change))
 *   evals(run_id INT, step INT (model step evaluated), kind TEXT (train = the trainer hook,
 *         cli = `minitrain robust`), attack TEXT (fgsm|pgd|hotflip), norm TEXT (l2|linf; NULL for
 *         hotflip), eps_rel REAL (ε / mean L2 norm of the token-embedding rows), eps_abs REAL
 *         (the radius of the ball itself, see safety/robust.h), k INT (ascent steps, or flips),
 *         clean_loss REAL, adv_loss REAL (mean nats/token), clean_acc REAL, adv_acc REAL
 *         (next-token accuracy, fractions), success_rate REAL (share of positions whose argmax
 *         changed), n_tokens INT, ms REAL (wall time of the row's attack),
 *         time REAL (unix s when the evaluation began: one value per evaluation, so the rows of
 *         the newest evaluation are those with the largest time))
 *   meta(key TEXT PRIMARY KEY, value TEXT) — schema 2: 'job_id' (a random UUID written when the
 *         file is created, or when a schema-1 file is first opened read-write: the forward
 *         migration) and 'node' (rundb_node_name() of that process). The job id and node are the
 *         first two parts of the natural key rows are shipped to PostgreSQL under (db/db.h).
 *
 * Errors: rundb_open() reports a bad RUN_DIR or file to the caller (NULL + message), because that is
 * user input. After a successful open, a failing write is a system failure: sqliteCheck prints
 * file:line, SQLite's message and a hint, and exits with MT_EXIT_ERROR.
 */
#ifndef MT_RUNDB_H
#define MT_RUNDB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <sqlite3.h>

#include "core/check.h"

#define RUNDB_SCHEMA_VERSION 2
#define RUNDB_FILE "run.db"
#define RUNDB_BUSY_TIMEOUT_MS 10000

/* sqliteCheck(rc, db): when rc is not SQLITE_OK/ROW/DONE, print file:line, the SQLite error text of
 * connection `db` (may be NULL) and a hint, then exit(MT_EXIT_ERROR). */
static inline void rundb_sqlite_check(int rc, sqlite3 *db, const char *file, int line) {
    if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return;
    fprintf(stderr,
            "minitrain: error: SQLite call failed (code %d): %s\n  at %s:%d\n"
            "  hint: %s\n",
            rc, db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc), file, line,
            (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
                ? "another process held the run database longer than the busy timeout"
                : "check that the run directory is writable, the disk is not full and run.db is "
                  "a minitrain run database");
    exit(MT_EXIT_ERROR);
}
#define sqliteCheck(rc, db) rundb_sqlite_check((rc), (db), __FILE__, __LINE__)

typedef struct rundb rundb;

/* One row of the metrics table. Any field that is NAN is stored as NULL (val_loss is NAN on steps
 * without an evaluation). Units: lr dimensionless, tokens_per_s tokens/s, mfu and mfu_theoretical
 * fractions in [0, 1] of the measured (sgemm probe) and theoretical peak, step_ms milliseconds,
 * wall_s seconds since the run (this process's `runs` row) started. */
typedef struct {
    int step;
    double train_loss, val_loss, lr, grad_norm, tokens_per_s, mfu, mfu_theoretical, step_ms,
        wall_s;
} rundb_metric;

/* Open (creating if needed) RUN_DIR/run.db: mkdir -p run_dir, WAL journal, busy timeout
 * RUNDB_BUSY_TIMEOUT_MS, create missing tables. Returns NULL on error and writes one line saying
 * what is wrong (and with which path) into err (errlen bytes, may be 0). */
rundb *rundb_open(const char *run_dir, char *err, size_t errlen);

/* Insert a `runs` row with status "running" and started_at = now; returns its id (> 0).
 * Any string may be NULL (stored as NULL). world_size = number of ranks in the job. */
int64_t rundb_run_begin(rundb *db, const char *name, const char *config_json,
                        const char *git_commit, int world_size);

#define RUNDB_STATUSES "running|completed|failed|stopped|crashed|hung|killed"

/* 1 when status is one of RUNDB_STATUSES. */
int rundb_status_valid(const char *status);

/* Set ended_at = now and status (one of RUNDB_STATUSES; anything else is a programming error
 * and exits). */
void rundb_run_end(rundb *db, int64_t run_id, const char *status);

/* End every row still "running" with status (crashed|hung|killed|failed|...) and ended_at = at
 * (unix s): the supervisor's verdict on attempts whose processes died without ending their row
 * (it calls this only after tearing the whole job down, so no such row is live). Returns the
 * number of rows changed. */
int rundb_end_running(rundb *db, const char *status, double at);

/* Append one metrics row (NAN fields -> NULL). Cheap: a reused prepared statement. */
void rundb_log_metric(rundb *db, int64_t run_id, const rundb_metric *m);

/* Append one events row with time = now. kind must be non-NULL; detail may be NULL. rank = the
 * logging rank (0 in single-process runs). Writers use ev_log (core/events.h), which builds the
 * detail as JSON; this is the raw insert beneath it. */
void rundb_log_event(rundb *db, int64_t run_id, const char *kind, int rank, const char *detail);

/* One row of the checkpoints table (train/checkpoint.c writes it). bytes < 0, checksum NULL and
 * NAN timings mean "unknown" (NULL; an update keeps the value already stored). state is one of
 * writing | committed | corrupt | deleted | failed (a save that never committed). */
typedef struct {
    int64_t step;
    int tier;
    const char *path;
    int64_t bytes;
    const char *checksum;
    const char *state;
    double snapshot_ms, write_ms;
} rundb_checkpoint;

/* Insert the row of c->path, or update it (state, time, and any field that is known). */
void rundb_log_checkpoint(rundb *db, int64_t run_id, const rundb_checkpoint *c);

/* One row of the evals table (safety/robust.c writes it). NAN fields are stored as NULL; kind
 * and attack must be non-NULL, norm may be NULL. Units as in the schema above. */
typedef struct {
    int step;
    const char *kind, *attack, *norm;
    double eps_rel, eps_abs;
    int k;
    double clean_loss, adv_loss, clean_acc, adv_acc, success_rate;
    int64_t n_tokens;
    double ms, time;
} rundb_eval;

/* Append one evals row. */
void rundb_log_eval(rundb *db, int64_t run_id, const rundb_eval *e);

/* Group the following writes in one transaction (BEGIN IMMEDIATE ... COMMIT). Calls nest; only the
 * outermost pair touches the database. Both return 0. */
int rundb_begin_batch(rundb *db);
int rundb_commit_batch(rundb *db);

/* Commit any open batch, finalize statements and close. NULL is a no-op. */
void rundb_close(rundb *db);

/* The CREATE statements of every table above (IF NOT EXISTS), for a reader that rebuilds a run
 * database elsewhere (db/db_read.c materialises a job from PostgreSQL into ":memory:"). */
const char *rundb_schema_sql(void);

/* meta[key] of the run database behind db (any connection, read-only too) into out. Returns 0,
 * or -1 (out = "") when the key or the meta table (a schema-1 file opened read-only) is absent. */
int rundb_meta_get(sqlite3 *db, const char *key, char *out, size_t outlen);

/* This process's node name: $MINITRAIN_NODE, else $SLURMD_NODENAME, else the hostname.
 * Static storage. */
const char *rundb_node_name(void);

/* The raw connection, for modules that add their own tables (checkpoints, evals). */
sqlite3 *rundb_sqlite(rundb *db);

/* Path of the database file for run_dir ("<run_dir>/run.db") into out; returns out. */
char *rundb_path(const char *run_dir, char *out, size_t outlen);

/* Best effort `git rev-parse --short HEAD` in the current directory (popen), or "unknown".
 * Computed once; the returned string is static. */
const char *rundb_git_commit(void);

#endif /* MT_RUNDB_H */
