/*
 * db/db_conn.c — connecting to PostgreSQL through libpq, and sorting its failures.
 *
 * A connection string may name several hosts; libpq tries them in order and, with
 * target_session_attrs=read-write, keeps the first that accepts writes (the primary), so
 * reconnecting after a failover is just connecting again. Failures are sorted into "the server
 * is not there or not the primary right now" (DB_EDOWN: retry with backoff) and everything else
 * (DB_EFAIL), by the connection state and the SQLSTATE. Messages are one line: libpq's are
 * several ("connection to server ... failed: Connection refused\n\tIs the server running ...").
 * Every statement waits at most DB_STATEMENT_DEADLINE_S for its answer (db/db_impl.h says why).
 */
#ifdef MT_HAVE_LIBPQ
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/check.h"
#include "db/db.h"
#include "db/db_impl.h"

int db_available(void) { return 1; }

const char *db_url_pick(const char *opt, const char *cfg) {
    if (opt != NULL && opt[0] != '\0') return opt;
    if (cfg != NULL && cfg[0] != '\0') return cfg;
    const char *e = getenv(DB_ENV_URL);
    return e != NULL && e[0] != '\0' ? e : NULL;
}

/* libpq's message on one line: newlines and tabs become spaces, trailing blanks dropped. */
static void one_line(char *dst, size_t len, const char *msg) {
    size_t j = 0;
    for (const char *p = msg ? msg : ""; *p && j + 1 < len; p++) {
        char ch = (*p == '\n' || *p == '\t' || *p == '\r') ? ' ' : *p;
        if (ch == ' ' && (j == 0 || dst[j - 1] == ' ')) continue;
        dst[j++] = ch;
    }
    while (j > 0 && dst[j - 1] == ' ') j--;
    if (len > 0) dst[j] = '\0';
}

int db_pg_error(PGconn *pg, PGresult *res, const char *what, char *err, size_t errlen) {
    char msg[600];
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    one_line(msg, sizeof(msg), res && PQresultErrorMessage(res)[0] ? PQresultErrorMessage(res)
                                                                   : PQerrorMessage(pg));
    int down = PQstatus(pg) == CONNECTION_BAD;
    if (state != NULL)
        down = down || strncmp(state, "08", 2) == 0 || strcmp(state, "25006") == 0 ||
               strcmp(state, "57P01") == 0 || strcmp(state, "57P02") == 0 ||
               strcmp(state, "57P03") == 0;
    if (state != NULL)
        mt_errf(err, errlen, "%s: %s (SQLSTATE %s)", what, msg[0] ? msg : "no message", state);
    else
        mt_errf(err, errlen, "%s: %s", what, msg[0] ? msg : "no message");
    PQclear(res);
    return down ? DB_EDOWN : DB_EFAIL;
}

/* The statement deadline in seconds: $MINITRAIN_DB_DEADLINE_S when positive (tests freeze a
 * server for a few seconds), else DB_STATEMENT_DEADLINE_S. */
static double deadline_s(void) {
    const char *e = getenv("MINITRAIN_DB_DEADLINE_S");
    double v = e ? strtod(e, NULL) : 0;
    return v > 0 ? v : DB_STATEMENT_DEADLINE_S;
}

/* Send sql (nparams < 0: a plain query, several statements allowed) and wait for its answer up to
 * DB_STATEMENT_DEADLINE_S: past it the socket is shut down (c->timed_out set), which libpq sees as
 * a broken connection. The last result, or the first error (as PQexec); NULL when not sent. */
static PGresult *exec_deadline(db_conn *c, const char *sql, int nparams,
                               const char *const *params) {
    c->timed_out = 0;
    int sent = nparams < 0 ? PQsendQuery(c->pg, sql)
                           : PQsendQueryParams(c->pg, sql, nparams, NULL, params, NULL, NULL, 0);
    if (!sent) return NULL;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double end = ts.tv_sec + ts.tv_nsec * 1e-9 + deadline_s();
    PGresult *last = NULL;
    for (;;) {
        while (PQisBusy(c->pg)) {
            clock_gettime(CLOCK_MONOTONIC, &ts);
            double left = end - (ts.tv_sec + ts.tv_nsec * 1e-9);
            struct pollfd pfd = {.fd = PQsocket(c->pg), .events = POLLIN};
            int n = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
            if (n == 0) { /* no answer in time: drop the connection, PQgetResult then fails */
                c->timed_out = 1;
                shutdown(PQsocket(c->pg), SHUT_RDWR);
                break;
            }
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 || !PQconsumeInput(c->pg)) break;
        }
        PGresult *r = PQgetResult(c->pg);
        if (r == NULL) break;
        ExecStatusType st = last ? PQresultStatus(last) : PGRES_COMMAND_OK;
        if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE) {
            PQclear(r); /* keep the first error, as PQexec does */
        } else {
            PQclear(last);
            last = r;
        }
    }
    return last;
}

/* The error of a statement run by exec_deadline: the deadline's own words, or libpq's. */
static int statement_error(db_conn *c, PGresult *res, char *err, size_t errlen) {
    if (!c->timed_out) return db_pg_error(c->pg, res, "database", err, errlen);
    PQclear(res);
    mt_errf(err, errlen, "database: no answer from the server within %g s (frozen or cut off?); "
            "connection dropped", deadline_s());
    return DB_EDOWN;
}

int db_pg_exec(db_conn *c, const char *sql, char *err, size_t errlen) {
    PGresult *res = exec_deadline(c, sql, -1, NULL);
    ExecStatusType s = PQresultStatus(res);
    if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) {
        PQclear(res);
        return 0;
    }
    return statement_error(c, res, err, errlen);
}

PGresult *db_pg_query(db_conn *c, const char *sql, int nparams, const char *const *params,
                      int *code, char *err, size_t errlen) {
    PGresult *res = exec_deadline(c, sql, nparams, params);
    ExecStatusType s = PQresultStatus(res);
    if (s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK) {
        *code = 0;
        return res;
    }
    *code = statement_error(c, res, err, errlen);
    return NULL;
}

/* Does the connection string set keyword kw? (-1: the string does not parse, msg in err) */
static int has_keyword(const char *url, const char *kw, char *err, size_t errlen) {
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(url, &perr);
    if (opts == NULL) {
        char msg[400];
        one_line(msg, sizeof(msg), perr ? perr : "out of memory");
        mt_errf(err, errlen, "bad database URL: %s (expected a libpq connection string such as "
                "postgresql://host:5432/minitrain)", msg);
        PQfreemem(perr);
        return -1;
    }
    int found = 0;
    for (PQconninfoOption *o = opts; o->keyword; o++)
        if (strcmp(o->keyword, kw) == 0 && o->val != NULL && o->val[0] != '\0') found = 1;
    PQconninfoFree(opts);
    return found;
}

static void quiet_notice(void *arg, const char *msg) { (void)arg, (void)msg; }

int db_connect(const char *url, db_conn **out, char *err, size_t errlen) {
    *out = NULL;
    if (url == NULL || url[0] == '\0') {
        mt_errf(err, errlen, "no database URL (--db URL, config key db or $%s)", DB_ENV_URL);
        return DB_EUSAGE;
    }
    int has_timeout = has_keyword(url, "connect_timeout", err, errlen);
    if (has_timeout < 0) return DB_EUSAGE;
    char timeout[16];
    snprintf(timeout, sizeof(timeout), "%d", DB_CONNECT_TIMEOUT_S);
    /* later keywords win: the URL's own application_name replaces ours */
    const char *kw[4], *val[4];
    int n = 0;
    if (!has_timeout) {
        kw[n] = "connect_timeout";
        val[n++] = timeout;
    }
    kw[n] = "application_name";
    val[n++] = "minitrain";
    kw[n] = "dbname";
    val[n++] = url;
    kw[n] = NULL;
    val[n] = NULL;
    PGconn *pg = PQconnectdbParams(kw, val, 1);
    if (pg == NULL) {
        mt_errf(err, errlen, "cannot connect to the database: out of memory");
        return DB_EFAIL;
    }
    if (PQstatus(pg) != CONNECTION_OK) {
        char msg[600];
        one_line(msg, sizeof(msg), PQerrorMessage(pg));
        mt_errf(err, errlen, "cannot connect to the database: %s", msg);
        PQfinish(pg);
        return DB_EDOWN;
    }
    /* the server's notices (and the FATAL of a dying server) are not printed by libpq: the
     * shipper says what matters once, in its own words */
    PQsetNoticeProcessor(pg, quiet_notice, NULL);
    /* one session setting: warnings of the migrations (NOTICE: relation exists) stay quiet */
    PQclear(PQexec(pg, "SET client_min_messages = warning"));
    db_conn *c = callocCheck(1, sizeof(*c));
    c->pg = pg;
    *out = c;
    return 0;
}

void db_close(db_conn *c) {
    if (c == NULL) return;
    PQfinish(c->pg);
    free(c);
}

int db_server_info(db_conn *c, db_server *s, char *err, size_t errlen) {
    *s = (db_server){.lag_s = NAN};
    snprintf(s->host, sizeof(s->host), "%s", PQhost(c->pg) ? PQhost(c->pg) : "?");
    s->port = PQport(c->pg) ? atoi(PQport(c->pg)) : 0;
    int code = 0;
    PGresult *res = db_pg_query(c, "SELECT pg_is_in_recovery(), CASE WHEN pg_is_in_recovery() THEN"
                                   " CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn()"
                                   " THEN 0 ELSE EXTRACT(EPOCH FROM now() -"
                                   " pg_last_xact_replay_timestamp()) END END", 0, NULL, &code,
                                err, errlen);
    if (res == NULL) return code;
    if (PQntuples(res) == 1) {
        s->in_recovery = PQgetvalue(res, 0, 0)[0] == 't';
        if (!PQgetisnull(res, 0, 1)) s->lag_s = strtod(PQgetvalue(res, 0, 1), NULL);
    }
    PQclear(res);
    return 0;
}

int db_cluster_id(db_conn *c, char out[64], char *err, size_t errlen) {
    int code = 0;
    PGresult *res = db_pg_query(c, "SELECT id::text FROM cluster LIMIT 1", 0, NULL, &code, err,
                                errlen);
    if (res == NULL) return code;
    int ok = PQntuples(res) == 1;
    if (ok) snprintf(out, 64, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    if (!ok) mt_errf(err, errlen, "the database has no cluster row (run `minitrain db init`)");
    return ok ? 0 : DB_EUSAGE;
}
#endif /* MT_HAVE_LIBPQ */
