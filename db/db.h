/*
 * db/db.h — the team's database: every job's run.db rows shipped to PostgreSQL, and read back.
 *
 * Local first: the trainer and the supervisor write run.db (core/rundb.h) and nothing in the
 * training step waits on the network. run.db is the outbox: a shipper — a thread of `train` and of
 * the supervisor, or the sidecar `minitrain db ship --run DIR [--follow]` — copies the rows not yet
 * shipped to PostgreSQL in batches, each batch one transaction keyed by the natural key
 * (job_id, node, rowid) of its table with INSERT ... ON CONFLICT DO NOTHING, and advances its
 * per-table mark (run.db's table `shipped`) only after COMMIT returned. A failover or an outage
 * therefore delays rows and never loses or duplicates one: a batch whose COMMIT was not seen is
 * sent again and its rows already there are skipped by the key. docs/database.md tells the story.
 *
 * URL: any libpq connection string, typically a multi-host URL such as
 * postgresql://h1:5432,h2:5432/minitrain?target_session_attrs=read-write — libpq tries the hosts
 * in order and keeps the first that is the primary, which is how a shipper finds the new primary
 * after a failover; readers may say prefer-standby to read from a standby.
 *
 * Built without libpq (no libpq-dev when it was compiled) every entry point fails with one line
 * saying so (db/db_nolibpq.c), and the rest of minitrain is unchanged.
 *
 * Errors: functions return 0 on success and a negative DB_E* code with one line in err.
 */
#ifndef MT_DB_H
#define MT_DB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <sqlite3.h>

/* The PostgreSQL schema this minitrain writes (db/db_schema.c holds every migration). */
#define DB_SCHEMA_VERSION 1

/* Error codes. */
#define DB_EUSAGE (-2)    /* bad URL, newer schema, no such job: the user's to fix */
#define DB_EDOWN (-3)     /* connection refused / broken, read-only server, shutdown: retry later */
#define DB_EFAIL (-4)     /* any other server error (permission, disk full ...): retry later */

/* Env variable naming the database when neither --db nor config key db does. */
#define DB_ENV_URL "MINITRAIN_DB"
/* Set by a supervisor that ships the run directory itself: its trainers then start no shipper
 * of their own (two would only send the same rows twice, which the keys would drop). */
#define DB_ENV_SHIPPER "MINITRAIN_DB_SHIPPER"

/* 1 when this binary was built with libpq. */
int db_available(void);

/* ---- connections (db/db_conn.c) ------------------------------------------------------------ */

typedef struct db_conn db_conn;

/* Connect to url (libpq connection string or URI); connect_timeout is added when the string has
 * none (DB_CONNECT_TIMEOUT_S). Returns 0 and *out, DB_EUSAGE for a string libpq cannot parse
 * (checked before any connection), or DB_EDOWN (refused, no primary, authentication ...). The
 * message never contains the password. */
#define DB_CONNECT_TIMEOUT_S 5
int db_connect(const char *url, db_conn **out, char *err, size_t errlen);

/* Close and free; NULL is a no-op. */
void db_close(db_conn *c);

/* Which server answered: host, port, whether it is a standby (pg_is_in_recovery()) and, on a
 * standby, the replication lag in seconds (now() - pg_last_xact_replay_timestamp(); 0 when the
 * standby has replayed everything it received, NAN when unknown). */
typedef struct {
    char host[256];
    int port;
    int in_recovery;
    double lag_s;
} db_server;
int db_server_info(db_conn *c, db_server *s, char *err, size_t errlen);

/* ---- schema (db/db_schema.c) --------------------------------------------------------------- */

/* Apply every forward migration the database lacks, in one transaction under an advisory lock
 * (two processes migrating at once wait for each other). *from and *to receive the version found
 * and the version now (either may be NULL). A database already at a version newer than
 * DB_SCHEMA_VERSION is refused with DB_EUSAGE ("written by a newer minitrain"). */
int db_schema_migrate(db_conn *c, int *from, int *to, char *err, size_t errlen);

/* The version of the schema in the database: 0 when it has none. Returns 0 or an error code. */
int db_schema_version(db_conn *c, int *version, char *err, size_t errlen);

/* ---- shipping (db/db_ship.c) --------------------------------------------------------------- */

/* Rows shipped by one call, per table, in the order runs, metrics, events, checkpoints, evals. */
#define DB_NTABLES 5
typedef struct {
    int64_t rows[DB_NTABLES]; /* rows the server inserted or updated (a row it had: 0) */
} db_ship_stats;

/* One pass: every row of run_dir's run.db not yet shipped to c's cluster, batch rows per
 * transaction (<= 0: DB_SHIP_BATCH). Opens its own read-write connection to run.db (for the
 * marks) and closes it. Returns 0, DB_EUSAGE (no run.db, newer schema), DB_EDOWN or DB_EFAIL;
 * the marks of the batches that committed stay advanced either way. */
#define DB_SHIP_BATCH 500
int db_ship_pass(db_conn *c, const char *run_dir, int batch, db_ship_stats *st, char *err,
                 size_t errlen);

/* `minitrain db ship`: connect, migrate, ship run_dir. follow = 0: one pass, then return.
 * follow = 1: a pass every poll_s seconds while the run directory's lock is held (the run is
 * live), reconnecting with jittered backoff through outages (one line each on stderr), then a
 * final pass once the run ended, retried for up to drain_s seconds. Prints the rows shipped when
 * verbose. Returns 0 when every row is shipped, else an error code with err. */
int db_ship_run(const char *url, const char *run_dir, int follow, double poll_s, double drain_s,
                int verbose, char *err, size_t errlen);

/* The shipper thread of `train` (rank 0) and of the supervisor: db_ship_run's follow loop on its
 * own connections (a read connection to run.db, one to PostgreSQL), so the caller never waits
 * on the network. Outages are logged once each ("database unavailable ... rows wait in run.db"),
 * recoveries once. Returns NULL with err only for a URL libpq cannot parse. */
typedef struct db_shipper db_shipper;
db_shipper *db_shipper_start(const char *url, const char *run_dir, char *err, size_t errlen);

/* Stop the thread after a last pass that ships what the run wrote last, given up to drain_s
 * seconds when the database is unreachable (the rows then wait in run.db for `db ship`). Joins
 * and frees; NULL is a no-op. */
void db_shipper_stop(db_shipper *s, double drain_s);

/* The URL a command should use: opt (--db) when set, else the config key value cfg, else
 * $MINITRAIN_DB; NULL when none names one. */
const char *db_url_pick(const char *opt, const char *cfg);

/* ---- reads (db/db_read.c) ------------------------------------------------------------------ */

/* Materialise one job's rows from PostgreSQL into a new in-memory SQLite database with the
 * run.db schema (core/rundb.h's rundb_schema_sql, rowids kept), so that the one report path
 * (report/report.h) reads it exactly as it reads a run.db. job is a job id (UUID) or a run name
 * (the newest job of that name). On success *out is the open database (the caller closes it)
 * and job_id[37] the job. DB_EUSAGE when no job matches. */
int db_read_job(db_conn *c, const char *job, sqlite3 **out, char job_id[37], char *err,
                size_t errlen);

/* `minitrain db runs`: one line per job (or a JSON array when json), newest first: job id, name,
 * status of its newest run, started, steps, node. since: unix seconds or NAN for all; status:
 * NULL for all or one of RUNDB_STATUSES. Returns 0 or an error code. */
int db_list_runs(db_conn *c, double since, const char *status, int json, FILE *out, char *err,
                 size_t errlen);

#endif /* MT_DB_H */
