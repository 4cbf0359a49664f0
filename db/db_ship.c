/*
 * db/db_ship.c — the shipper: run.db's rows not yet shipped, to PostgreSQL, exactly once.
 *
 * The outbox is run.db itself. For each table the shipper keeps a mark in run.db's table
 * `shipped` (per cluster, so pointing a run at another cluster ships everything there too):
 *   - append-only tables (metrics, events, evals): the highest rowid shipped. A pass reads the
 *     rows above it in rowid order, batch rows at a time; each batch is one PostgreSQL
 *     transaction INSERT ... ON CONFLICT (job_id, node, rowid) DO NOTHING, and the mark moves to
 *     the batch's last rowid only after COMMIT returned. A COMMIT whose answer was lost (the
 *     server died, a failover) leaves the mark behind: the batch is sent again and the key drops
 *     the rows the server had kept. No loss, no duplicate.
 *   - tables updated in place (runs: ended_at and status; checkpoints: state, sizes): upserted,
 *     ON CONFLICT DO UPDATE only WHERE the values differ. runs (one row per restart) is re-sent
 *     whole every pass; checkpoints only the rows above the mark or whose `time` (set on every
 *     state change) is at most MUTABLE_OVERLAP_S before the newest time shipped.
 * The shipper reads run.db on its own connection and holds no SQLite write lock across a network
 * call (a mark is one short transaction after COMMIT), so the trainer's inserts never wait on
 * PostgreSQL. The follow loop reconnects with jittered exponential backoff and says so once per
 * outage.
 */
#ifdef MT_HAVE_LIBPQ
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/rundb.h"
#include "core/runlock.h"
#include "core/timer.h"
#include "db/db.h"
#include "db/db_impl.h"

#define MUTABLE_OVERLAP_S 10.0
#define BACKOFF_MIN_S 0.5
#define BACKOFF_MAX_S 10.0

static const char *SHIPPED_SQL =
    "CREATE TABLE IF NOT EXISTS shipped(cluster TEXT, tbl TEXT, mark INTEGER, tmark REAL,"
    " rows INTEGER, at REAL, PRIMARY KEY(cluster, tbl))";

/* What one pass works with. */
typedef struct {
    db_conn *c;
    sqlite3 *lite;       /* run.db, read-write (the marks) */
    char job_id[64], node[256], cluster[64], run_dir[4096];
    int batch;
} pass_ctx;

/* ---- run.db side --------------------------------------------------------------------------- */

static int lite_error(sqlite3 *db, const char *what, char *err, size_t errlen) {
    mt_errf(err, errlen, "run.db %s: %s", what, sqlite3_errmsg(db));
    return DB_EFAIL;
}

static int read_mark(pass_ctx *p, const char *tbl, int64_t *mark, double *tmark) {
    sqlite3_stmt *st = NULL;
    *mark = 0;
    *tmark = -INFINITY;
    if (sqlite3_prepare_v2(p->lite, "SELECT mark, tmark FROM shipped WHERE cluster=?1 AND tbl=?2",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, p->cluster, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, tbl, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
        *mark = sqlite3_column_int64(st, 0);
        if (sqlite3_column_type(st, 1) != SQLITE_NULL) *tmark = sqlite3_column_double(st, 1);
    }
    sqlite3_finalize(st);
    return 0;
}

/* Advance tbl's mark (never backwards) after a COMMIT; rows counts what this batch sent. */
static int write_mark(pass_ctx *p, const char *tbl, int64_t mark, double tmark, int64_t rows,
                      char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(p->lite,
                                "INSERT INTO shipped(cluster, tbl, mark, tmark, rows, at)"
                                " VALUES(?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(cluster, tbl) DO UPDATE"
                                " SET mark = MAX(mark, excluded.mark),"
                                " tmark = MAX(COALESCE(tmark, excluded.tmark), excluded.tmark),"
                                " rows = rows + excluded.rows, at = excluded.at", -1, &st, NULL);
    if (rc != SQLITE_OK) return lite_error(p->lite, "mark", err, errlen);
    sqlite3_bind_text(st, 1, p->cluster, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, tbl, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, mark);
    if (isfinite(tmark))
        sqlite3_bind_double(st, 4, tmark);
    else
        sqlite3_bind_null(st, 4);
    sqlite3_bind_int64(st, 5, rows);
    sqlite3_bind_double(st, 6, timer_unix());
    do rc = sqlite3_step(st);
    while (rc == SQLITE_BUSY); /* after the busy timeout: the trainer's writes are short */
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : lite_error(p->lite, "mark", err, errlen);
}

/* Column i of st as PostgreSQL text input (malloc'd), or NULL for SQL NULL. Reals keep 17
 * significant digits, so a float8 read back is the same double. */
static char *col_text(sqlite3_stmt *st, int i) {
    char buf[64];
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL: return NULL;
    case SQLITE_INTEGER:
        snprintf(buf, sizeof(buf), "%lld", (long long)sqlite3_column_int64(st, i));
        return strdup(buf);
    case SQLITE_FLOAT: {
        double v = sqlite3_column_double(st, i);
        if (isinf(v)) return strdup(v > 0 ? "Infinity" : "-Infinity");
        snprintf(buf, sizeof(buf), "%.17g", v);
        return strdup(buf);
    }
    default: return strdup((const char *)sqlite3_column_text(st, i));
    }
}

/* ---- PostgreSQL side ----------------------------------------------------------------------- */

/* "INSERT INTO t(job_id, node, rowid, c...) VALUES ($1,$2,$3,...),... ON CONFLICT ..." for n
 * rows; malloc'd. */
static char *insert_sql(const db_table *t, int ncol, int n) {
    size_t cap = 512 + (size_t)n * (size_t)(ncol + 1) * 10 + (size_t)ncol * 96;
    char *s = mallocCheck(cap);
    size_t k = (size_t)snprintf(s, cap, "INSERT INTO %s AS t(job_id, node, rowid", t->name);
    for (int j = 0; j < ncol; j++) k += (size_t)snprintf(s + k, cap - k, ", %s", t->cols[j]);
    k += (size_t)snprintf(s + k, cap - k, ") VALUES ");
    int param = 3;
    for (int r = 0; r < n; r++) {
        k += (size_t)snprintf(s + k, cap - k, "%s($1, $2", r ? ", " : "");
        for (int j = 0; j <= ncol; j++) k += (size_t)snprintf(s + k, cap - k, ", $%d", param++);
        k += (size_t)snprintf(s + k, cap - k, ")");
    }
    if (!t->mutable_) {
        snprintf(s + k, cap - k, " ON CONFLICT (job_id, node, rowid) DO NOTHING");
        return s;
    }
    k += (size_t)snprintf(s + k, cap - k, " ON CONFLICT (job_id, node, rowid) DO UPDATE SET ");
    for (int j = 0; j < ncol; j++)
        k += (size_t)snprintf(s + k, cap - k, "%s%s = EXCLUDED.%s", j ? ", " : "", t->cols[j],
                              t->cols[j]);
    k += (size_t)snprintf(s + k, cap - k, " WHERE (");
    for (int j = 0; j < ncol; j++)
        k += (size_t)snprintf(s + k, cap - k, "%st.%s", j ? ", " : "", t->cols[j]);
    k += (size_t)snprintf(s + k, cap - k, ") IS DISTINCT FROM (");
    for (int j = 0; j < ncol; j++)
        k += (size_t)snprintf(s + k, cap - k, "%sEXCLUDED.%s", j ? ", " : "", t->cols[j]);
    snprintf(s + k, cap - k, ")");
    return s;
}

/* One transaction: the jobs row (with the runs table) and n rows of params. *changed: the
 * rows the server inserted or updated (PQcmdTuples: a row already there counts 0). */
static int send_batch(pass_ctx *p, const db_table *t, int ncol, int n, char **params,
                      int64_t *changed, char *err, size_t errlen) {
    *changed = 0;
    int rc = db_pg_exec(p->c, "BEGIN", err, errlen), code = 0;
    if (rc == 0 && t == &db_tables[0]) {
        char name[512] = "";
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(p->lite, "SELECT name FROM runs ORDER BY id DESC LIMIT 1", -1, &st,
                               NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
            sqlite3_column_text(st, 0))
            snprintf(name, sizeof(name), "%s", (const char *)sqlite3_column_text(st, 0));
        sqlite3_finalize(st);
        const char *jp[4] = {p->job_id, p->node, name[0] ? name : NULL, p->run_dir};
        PGresult *res = db_pg_query(p->c, "INSERT INTO jobs(job_id, node, name, run_dir,"
                                          " last_shipped) VALUES($1, $2, $3, $4, now())"
                                          " ON CONFLICT (job_id, node) DO UPDATE SET"
                                          " name = EXCLUDED.name, run_dir = EXCLUDED.run_dir,"
                                          " last_shipped = now()", 4, jp, &code, err, errlen);
        PQclear(res);
        rc = code;
    }
    if (rc == 0 && n > 0) {
        char *sql = insert_sql(t, ncol, n);
        PGresult *res = db_pg_query(p->c, sql, 2 + n * (ncol + 1), (const char *const *)params,
                                    &code, err, errlen);
        free(sql);
        if (res != NULL) *changed = strtoll(PQcmdTuples(res), NULL, 10);
        PQclear(res);
        rc = code;
    }
    if (rc == 0) rc = db_pg_exec(p->c, "COMMIT", err, errlen);
    if (rc != 0 && PQstatus(p->c->pg) == CONNECTION_OK) {
        char ignore[8];
        db_pg_exec(p->c, "ROLLBACK", ignore, sizeof(ignore));
    }
    return rc;
}

/* Ship table t: batches above the mark (and, for a mutable table, the rows that may have
 * changed). Adds the rows sent to *sent. */
static int ship_table(pass_ctx *p, const db_table *t, int64_t *sent, char *err, size_t errlen) {
    int ncol = 0;
    while (t->cols[ncol]) ncol++;
    int64_t mark, after = -1;
    double tmark;
    if (read_mark(p, t->name, &mark, &tmark) != 0) return lite_error(p->lite, "marks", err, errlen);
    char sql[1024];
    size_t k = (size_t)snprintf(sql, sizeof(sql), "SELECT rowid");
    for (int j = 0; j < ncol; j++) k += (size_t)snprintf(sql + k, sizeof(sql) - k, ", %s", t->cols[j]);
    if (!t->mutable_)
        snprintf(sql + k, sizeof(sql) - k, " FROM %s WHERE rowid > ?1 ORDER BY rowid LIMIT ?2",
                 t->name);
    else if (t->tcol == NULL)
        snprintf(sql + k, sizeof(sql) - k, " FROM %s WHERE rowid > ?3 ORDER BY rowid LIMIT ?2",
                 t->name);
    else
        snprintf(sql + k, sizeof(sql) - k, " FROM %s WHERE rowid > ?3 AND (rowid > ?1 OR %s >= ?4)"
                 " ORDER BY rowid LIMIT ?2", t->name, t->tcol);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(p->lite, sql, -1, &st, NULL) != SQLITE_OK)
        return lite_error(p->lite, "read", err, errlen);
    size_t np = 2 + (size_t)p->batch * (size_t)(ncol + 1);
    char **params = callocCheck(np, sizeof(char *));
    int rc = 0;
    for (;;) {
        sqlite3_bind_int64(st, 1, mark);
        sqlite3_bind_int(st, 2, p->batch);
        sqlite3_bind_int64(st, 3, after);
        sqlite3_bind_double(st, 4, isfinite(tmark) ? tmark - MUTABLE_OVERLAP_S : -1e300);
        int n = 0, src;
        int64_t last = after;
        double tmax = tmark;
        size_t q = 2;
        while ((src = sqlite3_step(st)) == SQLITE_ROW) {
            last = sqlite3_column_int64(st, 0);
            for (int j = 0; j <= ncol; j++) params[q++] = col_text(st, j);
            if (t->tcol && sqlite3_column_type(st, ncol) != SQLITE_NULL) /* tcol is the last */
                tmax = fmax(tmax, sqlite3_column_double(st, ncol));
            n++;
        }
        sqlite3_reset(st);
        if (src != SQLITE_DONE) rc = lite_error(p->lite, "read", err, errlen);
        params[0] = p->job_id;
        params[1] = p->node;
        int64_t changed = 0;
        if (rc == 0 && (n > 0 || t == &db_tables[0]))
            rc = send_batch(p, t, ncol, n, params, &changed, err, errlen);
        for (size_t i = 2; i < q; i++) free(params[i]);
        if (rc == 0 && n > 0) {
            rc = write_mark(p, t->name, t->mutable_ ? (last > mark ? last : mark) : last, tmax, n,
                            err, errlen);
            *sent += changed;
        }
        if (rc != 0 || n < p->batch) break;
        if (t->mutable_) after = last;
        else mark = last;
    }
    free(params);
    sqlite3_finalize(st);
    return rc;
}

/* The job's identity from run.db's meta table (stamped by rundb_open). */
static int read_identity(pass_ctx *p, char *err, size_t errlen) {
    if (rundb_meta_get(p->lite, "job_id", p->job_id, sizeof(p->job_id)) != 0 ||
        rundb_meta_get(p->lite, "node", p->node, sizeof(p->node)) != 0) {
        mt_errf(err, errlen, "%s/run.db has no job id yet (open it once with a minitrain of "
                "schema %d: `minitrain db ship` does)", p->run_dir, RUNDB_SCHEMA_VERSION);
        return DB_EUSAGE;
    }
    return 0;
}

int db_ship_pass(db_conn *c, const char *run_dir, int batch, db_ship_stats *stats, char *err,
                 size_t errlen) {
    pass_ctx p = {.c = c, .batch = batch > 0 ? batch : DB_SHIP_BATCH};
    db_ship_stats local = {{0}};
    db_ship_stats *s = stats ? stats : &local;
    *s = local;
    char path[4200];
    rundb_path(run_dir, path, sizeof(path));
    struct stat sb;
    if (stat(path, &sb) != 0) {
        mt_errf(err, errlen, "no run database at %s", path);
        return DB_EUSAGE;
    }
    if (realpath(run_dir, p.run_dir) == NULL) snprintf(p.run_dir, sizeof(p.run_dir), "%s", run_dir);
    int rc = db_cluster_id(c, p.cluster, err, errlen);
    if (rc != 0) return rc;
    if (sqlite3_open_v2(path, &p.lite, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        rc = lite_error(p.lite, "open", err, errlen);
        sqlite3_close(p.lite);
        return rc;
    }
    sqlite3_busy_timeout(p.lite, RUNDB_BUSY_TIMEOUT_MS);
    if (sqlite3_exec(p.lite, SHIPPED_SQL, NULL, NULL, NULL) != SQLITE_OK)
        rc = lite_error(p.lite, "shipped table", err, errlen);
    if (rc == 0) rc = read_identity(&p, err, errlen);
    for (int i = 0; rc == 0 && i < DB_NTABLES; i++) rc = ship_table(&p, &db_tables[i], &s->rows[i], err, errlen);
    sqlite3_close(p.lite);
    return rc;
}

/* ---- the follow loop (db ship --follow and the shipper thread) ----------------------------- */

struct db_shipper {
    char url[4096], run_dir[4096];
    double poll_s, drain_s;
    int verbose, threaded;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    int rc;
    char err[1024];
};

/* Has the run ended? The thread: its owner said stop. The sidecar: the run directory's lock is
 * no longer held. */
static int run_ended(db_shipper *s) {
    if (s->threaded) {
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        return stop;
    }
    char holder[256];
    return runlock_probe(s->run_dir, holder, sizeof(holder)) != 1;
}

/* Sleep sec seconds, or until the owner says stop (the thread). */
static void nap(db_shipper *s, double sec) {
    if (!s->threaded) {
        struct timespec ts = {(time_t)sec, (long)((sec - floor(sec)) * 1e9)};
        nanosleep(&ts, NULL);
        return;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double t = (double)until.tv_sec + until.tv_nsec * 1e-9 + sec;
    until.tv_sec = (time_t)t;
    until.tv_nsec = (long)((t - floor(t)) * 1e9);
    pthread_mutex_lock(&s->mu);
    if (!s->stop) pthread_cond_timedwait(&s->cv, &s->mu, &until);
    pthread_mutex_unlock(&s->mu);
}

/* Connect when needed (migrating the schema on a fresh connection), then one pass. */
static int attempt(db_shipper *s, db_conn **c, db_ship_stats *st, char *err, size_t errlen) {
    int rc = 0;
    if (*c == NULL) {
        rc = db_connect(s->url, c, err, errlen);
        if (rc == 0) rc = db_schema_migrate(*c, NULL, NULL, err, errlen);
    }
    if (rc == 0) rc = db_ship_pass(*c, s->run_dir, DB_SHIP_BATCH, st, err, errlen);
    if (rc != 0) {
        db_close(*c);
        *c = NULL;
    }
    return rc;
}

static int64_t total_rows(const db_ship_stats *st) {
    int64_t n = 0;
    for (int i = 0; i < DB_NTABLES; i++) n += st->rows[i];
    return n;
}

static int follow_loop(db_shipper *s) {
    db_conn *c = NULL;
    double backoff = BACKOFF_MIN_S, outage_t0 = NAN, drain_until = NAN;
    int64_t shipped = 0;
    unsigned seed = (unsigned)getpid() ^ (unsigned)(timer_unix() * 1000);
    char err[1024] = "";
    for (;;) {
        int ending = run_ended(s);
        if (ending && isnan(drain_until)) drain_until = timer_unix() + s->drain_s;
        db_ship_stats st;
        int rc = attempt(s, &c, &st, err, sizeof(err));
        shipped += rc == 0 ? total_rows(&st) : 0;
        if (rc == 0) {
            if (!isnan(outage_t0))
                fprintf(stderr, "minitrain: database reachable again after %.1f s: the rows that "
                        "waited in run.db are shipped\n", timer_unix() - outage_t0);
            outage_t0 = NAN;
            backoff = BACKOFF_MIN_S;
            if (ending) break;
            nap(s, s->poll_s);
            continue;
        }
        if (isnan(outage_t0)) {
            mt_warn("database unavailable (%s): training goes on, the rows wait in run.db; "
                    "retrying with backoff", err);
            outage_t0 = timer_unix();
        }
        if (!s->threaded && rc == DB_EUSAGE) { /* the sidecar: a user error will not heal */
            mt_errf(s->err, sizeof(s->err), "%s", err);
            db_close(c);
            return rc;
        }
        if (ending && timer_unix() >= drain_until) {
            mt_errf(s->err, sizeof(s->err), "%s; the rows not shipped wait in %s/run.db: ship "
                     "them with `minitrain db ship --run %s`", err, s->run_dir, s->run_dir);
            db_close(c);
            return rc;
        }
        double wait = backoff * (0.5 + (double)rand_r(&seed) / RAND_MAX); /* jitter */
        if (ending) wait = fmin(wait, fmax(0.05, drain_until - timer_unix()));
        nap(s, wait);
        backoff = fmin(backoff * 2, BACKOFF_MAX_S);
    }
    db_close(c);
    if (s->verbose) printf("shipped %lld rows from %s\n", (long long)shipped, s->run_dir);
    return 0;
}

static db_shipper *shipper_new(const char *url, const char *run_dir, double poll_s,
                               double drain_s, int verbose) {
    db_shipper *s = callocCheck(1, sizeof(*s));
    snprintf(s->url, sizeof(s->url), "%s", url);
    snprintf(s->run_dir, sizeof(s->run_dir), "%s", run_dir);
    s->poll_s = poll_s;
    s->drain_s = drain_s;
    s->verbose = verbose;
    return s;
}

int db_ship_run(const char *url, const char *run_dir, int follow, double poll_s, double drain_s,
                int verbose, char *err, size_t errlen) {
    char path[4200];
    rundb_path(run_dir, path, sizeof(path));
    struct stat sb;
    if (stat(path, &sb) != 0) {
        mt_errf(err, errlen, "no run database at %s", path);
        return DB_EUSAGE;
    }
    /* a run.db older than schema 2 gets its job id here (rundb_open's forward migration) */
    rundb *r = rundb_open(run_dir, err, errlen);
    if (r == NULL) return DB_EUSAGE;
    rundb_close(r);
    if (follow) {
        db_shipper *s = shipper_new(url, run_dir, poll_s, drain_s, verbose);
        int rc = follow_loop(s);
        if (rc != 0) mt_errf(err, errlen, "%s", s->err);
        free(s);
        return rc;
    }
    db_conn *c = NULL;
    int rc = db_connect(url, &c, err, errlen);
    if (rc == 0) rc = db_schema_migrate(c, NULL, NULL, err, errlen);
    db_ship_stats st;
    if (rc == 0) rc = db_ship_pass(c, run_dir, DB_SHIP_BATCH, &st, err, errlen);
    if (rc == 0 && verbose) {
        printf("shipped %lld rows from %s (", (long long)total_rows(&st), run_dir);
        for (int i = 0; i < DB_NTABLES; i++)
            printf("%s%s %lld", i ? ", " : "", db_tables[i].name, (long long)st.rows[i]);
        printf(")\n");
    }
    db_close(c);
    return rc;
}

static void *shipper_main(void *arg) {
    db_shipper *s = arg;
    s->rc = follow_loop(s);
    if (s->rc != 0) mt_warn("%s", s->err);
    return NULL;
}

db_shipper *db_shipper_start(const char *url, const char *run_dir, char *err, size_t errlen) {
    char *perr = NULL;
    PQconninfoOption *o = PQconninfoParse(url, &perr);
    if (o == NULL) {
        mt_errf(err, errlen, "bad database URL: %s", perr ? perr : "out of memory");
        PQfreemem(perr);
        return NULL;
    }
    PQconninfoFree(o);
    db_shipper *s = shipper_new(url, run_dir, 1.0, 10.0, 0);
    s->threaded = 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    /* the thread blocks every signal (it inherits the mask): SIGTERM, SIGUSR1 and the like stay
     * the business of the threads that handle them */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int prc = pthread_create(&s->thread, NULL, shipper_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (prc != 0) {
        mt_errf(err, errlen, "cannot start the shipper thread: %s", strerror(prc));
        free(s);
        return NULL;
    }
    return s;
}

void db_shipper_stop(db_shipper *s, double drain_s) {
    if (s == NULL) return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    s->drain_s = drain_s;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
#endif /* MT_HAVE_LIBPQ */
