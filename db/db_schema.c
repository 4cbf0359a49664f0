/*
 * db/db_schema.c — the PostgreSQL schema of the team's database, in one place: the descriptors of
 * the shipped tables and the forward migrations.
 *
 * Every table of run.db (core/rundb.h) exists in PostgreSQL with the same columns, prefixed by
 * the natural key: job_id (the UUID in run.db's meta table), node (the node whose run.db it is)
 * and rowid (the row's rowid in that run.db; for runs, its id). The key is the primary key, so a
 * row sent twice — after a failover, or by `db ship` after a trainer's shipper — is kept once
 * (INSERT ... ON CONFLICT DO NOTHING). Beside them: jobs (one row per job and node: its name and
 * run directory, for `db runs`), cluster (a random UUID made once: the marks in run.db belong to
 * one cluster) and schema_version (one row per applied migration).
 *
 * Migrations are append-only: MIGRATIONS[i] takes version i to i + 1 and is never edited once
 * released; a new column is a new entry. db_schema_migrate applies the missing ones in one
 * transaction under a transaction-scoped advisory lock, and refuses a database whose version is
 * newer than this binary's DB_SCHEMA_VERSION (a newer minitrain's columns would be lost).
 */
#ifdef MT_HAVE_LIBPQ
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "db/db.h"
#include "db/db_impl.h"

static const char *const RUNS_COLS[] = {"name", "config", "git_commit", "started_at", "ended_at",
                                        "status", "world_size", NULL};
static const char *const METRICS_COLS[] = {"run_id", "step", "train_loss", "val_loss", "lr",
                                           "grad_norm", "tokens_per_s", "mfu", "mfu_theoretical",
                                           "step_ms", "wall_s", NULL};
static const char *const EVENTS_COLS[] = {"run_id", "time", "kind", "rank", "detail", NULL};
static const char *const CKPT_COLS[] = {"run_id", "step", "tier", "path", "bytes", "checksum",
                                        "state", "snapshot_ms", "write_ms", "time", NULL};
static const char *const EVALS_COLS[] = {"run_id", "step", "kind", "attack", "norm", "eps_rel",
                                         "eps_abs", "k", "clean_loss", "adv_loss", "clean_acc",
                                         "adv_acc", "success_rate", "n_tokens", "ms", "time", NULL};

const db_table db_tables[DB_NTABLES] = {
    {"runs", RUNS_COLS, "tttrrti", 1, NULL},
    {"metrics", METRICS_COLS, "iirrrrrrrrr", 0, NULL},
    {"events", EVENTS_COLS, "irtit", 0, NULL},
    {"checkpoints", CKPT_COLS, "iiitittrrr", 1, "time"},
    {"evals", EVALS_COLS, "iitttrrirrrrrirr", 0, NULL},
};

#define KEY_COLS "job_id uuid NOT NULL, node text NOT NULL, rowid bigint NOT NULL, "
#define KEY_PK ", PRIMARY KEY (job_id, node, rowid))"

/* MIGRATIONS[i]: version i -> i + 1. Never edit a released entry; append. */
static const char *const MIGRATIONS[DB_SCHEMA_VERSION] = {
    /* 0 -> 1: the run.db tables of schema 2 with their natural keys, jobs, cluster */
    "CREATE TABLE cluster(id uuid PRIMARY KEY DEFAULT gen_random_uuid(),"
    "  created_at timestamptz NOT NULL DEFAULT now());"
    "INSERT INTO cluster DEFAULT VALUES;"
    "CREATE TABLE jobs(job_id uuid NOT NULL, node text NOT NULL, name text, run_dir text,"
    "  first_shipped timestamptz NOT NULL DEFAULT now(), last_shipped timestamptz,"
    "  PRIMARY KEY (job_id, node));"
    "CREATE TABLE runs(" KEY_COLS "name text, config text, git_commit text,"
    "  started_at double precision, ended_at double precision, status text, world_size bigint"
    KEY_PK ";"
    "CREATE INDEX runs_started ON runs(started_at);"
    "CREATE INDEX runs_name ON runs(name, started_at);"
    "CREATE INDEX runs_status ON runs(status);"
    "CREATE TABLE metrics(" KEY_COLS "run_id bigint, step bigint, train_loss double precision,"
    "  val_loss double precision, lr double precision, grad_norm double precision,"
    "  tokens_per_s double precision, mfu double precision, mfu_theoretical double precision,"
    "  step_ms double precision, wall_s double precision" KEY_PK ";"
    "CREATE TABLE events(" KEY_COLS "run_id bigint, time double precision, kind text, rank bigint,"
    "  detail text" KEY_PK ";"
    "CREATE INDEX events_job_kind ON events(job_id, kind);"
    "CREATE TABLE checkpoints(" KEY_COLS "run_id bigint, step bigint, tier bigint, path text,"
    "  bytes bigint, checksum text, state text, snapshot_ms double precision,"
    "  write_ms double precision, time double precision" KEY_PK ";"
    "CREATE TABLE evals(" KEY_COLS "run_id bigint, step bigint, kind text, attack text, norm text,"
    "  eps_rel double precision, eps_abs double precision, k bigint,"
    "  clean_loss double precision, adv_loss double precision, clean_acc double precision,"
    "  adv_acc double precision, success_rate double precision, n_tokens bigint,"
    "  ms double precision, time double precision" KEY_PK ";",
};

/* schema_version exists in every version; created outside the migrations so the version can be
 * read (and locked) before any is applied. */
static const char *BOOTSTRAP_SQL =
    "CREATE TABLE IF NOT EXISTS schema_version(version int PRIMARY KEY,"
    "  applied_at timestamptz NOT NULL DEFAULT now(), minitrain text)";

/* Advisory lock key: "minitrain" in the low bytes, so other applications' keys do not collide. */
#define DB_LOCK_KEY "7236833063449014626"

int db_schema_version(db_conn *c, int *version, char *err, size_t errlen) {
    int code = 0;
    *version = 0;
    /* two queries: a query naming an absent table fails as a whole, CASE or not */
    PGresult *res = db_pg_query(c, "SELECT to_regclass('schema_version') IS NOT NULL", 0, NULL,
                                &code, err, errlen);
    if (res == NULL) return code;
    int exists = PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    if (!exists) return 0;
    res = db_pg_query(c, "SELECT COALESCE(MAX(version), 0) FROM schema_version", 0, NULL, &code,
                      err, errlen);
    if (res == NULL) return code;
    *version = PQntuples(res) == 1 ? atoi(PQgetvalue(res, 0, 0)) : 0;
    PQclear(res);
    return 0;
}

static int newer_error(int v, char *err, size_t errlen) {
    mt_errf(err, errlen, "the database's schema is version %d, written by a newer minitrain (this "
            "one knows up to %d): upgrade minitrain; nothing was written", v, DB_SCHEMA_VERSION);
    return DB_EUSAGE;
}

int db_schema_migrate(db_conn *c, int *from, int *to, char *err, size_t errlen) {
    int v = 0, rc;
    if ((rc = db_schema_version(c, &v, err, errlen)) != 0) return rc;
    if (from) *from = v;
    if (to) *to = v;
    if (v > DB_SCHEMA_VERSION) return newer_error(v, err, errlen);
    if (v == DB_SCHEMA_VERSION) return 0;
    if ((rc = db_pg_exec(c, "BEGIN", err, errlen)) != 0) return rc;
    rc = db_pg_exec(c, "SELECT pg_advisory_xact_lock(" DB_LOCK_KEY ")", err, errlen);
    if (rc == 0) rc = db_pg_exec(c, BOOTSTRAP_SQL, err, errlen);
    if (rc == 0) rc = db_schema_version(c, &v, err, errlen); /* another process may have won */
    if (rc == 0 && v > DB_SCHEMA_VERSION) rc = newer_error(v, err, errlen);
    if (from && rc == 0) *from = v;
    for (int i = v; rc == 0 && i < DB_SCHEMA_VERSION; i++) {
        rc = db_pg_exec(c, MIGRATIONS[i], err, errlen);
        char sql[160];
        snprintf(sql, sizeof(sql), "INSERT INTO schema_version(version, minitrain) VALUES(%d, "
                 "'minitrain')", i + 1);
        if (rc == 0) rc = db_pg_exec(c, sql, err, errlen);
    }
    if (rc == 0) rc = db_pg_exec(c, "COMMIT", err, errlen);
    if (rc != 0) {
        char ignore[8];
        db_pg_exec(c, "ROLLBACK", ignore, sizeof(ignore));
        return rc;
    }
    if (to) *to = DB_SCHEMA_VERSION;
    return 0;
}
#endif /* MT_HAVE_LIBPQ */
