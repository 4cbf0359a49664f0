/*
 * db/db_read.c — reading the team's database: one job materialised as a run.db, and the list
 * of jobs.
 *
 * `minitrain report --db URL --run NAME|JOB_ID` must print the same report as `report --run DIR`,
 * so there is one report path: this reader copies the job's rows from PostgreSQL into an
 * in-memory SQLite database created with run.db's own schema (core/rundb.h: rundb_schema_sql),
 * rowids kept, and hands it to report/report.h's report_load_db, which cannot tell the two apart.
 * The copy is one REPEATABLE READ transaction, so the tables agree with each other even while a
 * shipper writes; it works on a hot standby (prefer-standby URLs), which is where reads belong.
 * Values travel as text: float8 prints the shortest text that reads back as the same double
 * (PostgreSQL 12+), so the report's figures are the ones run.db would give.
 */
#ifdef MT_HAVE_LIBPQ
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/check.h"
#include "core/rundb.h"
#include "db/db.h"
#include "db/db_impl.h"

/* Resolve job (a job id or a run name: the newest job of that name) to a job id. */
static int find_job(db_conn *c, const char *job, char job_id[37], char *err, size_t errlen) {
    int code = 0;
    const char *p[1] = {job};
    PGresult *res = db_pg_query(c, "SELECT j.job_id::text FROM jobs j WHERE j.job_id::text = $1"
                                   " OR j.name = $1 ORDER BY (j.job_id::text = $1) DESC,"
                                   " (SELECT MAX(started_at) FROM runs r WHERE r.job_id = j.job_id)"
                                   " DESC NULLS LAST LIMIT 1", 1, p, &code, err, errlen);
    if (res == NULL) return code;
    int found = PQntuples(res) == 1;
    if (found) snprintf(job_id, 37, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    if (!found) {
        mt_errf(err, errlen, "no job '%s' in the database (a run name or a job id; `minitrain db "
                "runs --db URL` lists them)", job);
        return DB_EUSAGE;
    }
    return 0;
}

/* Copy table t of job_id into lite (rowids kept). */
static int copy_table(db_conn *c, sqlite3 *lite, const db_table *t, const char *job_id,
                      char *err, size_t errlen) {
    int ncol = 0;
    char sel[1024], ins[1024];
    size_t a = (size_t)snprintf(sel, sizeof(sel), "SELECT rowid");
    size_t b = (size_t)snprintf(ins, sizeof(ins), "INSERT INTO %s(rowid", t->name);
    for (; t->cols[ncol]; ncol++) {
        a += (size_t)snprintf(sel + a, sizeof(sel) - a, ", %s", t->cols[ncol]);
        b += (size_t)snprintf(ins + b, sizeof(ins) - b, ", %s", t->cols[ncol]);
    }
    snprintf(sel + a, sizeof(sel) - a, " FROM %s WHERE job_id = $1::uuid ORDER BY node, rowid",
             t->name);
    b += (size_t)snprintf(ins + b, sizeof(ins) - b, ") VALUES(?");
    for (int j = 0; j < ncol; j++) b += (size_t)snprintf(ins + b, sizeof(ins) - b, ", ?");
    snprintf(ins + b, sizeof(ins) - b, ")");
    int code = 0;
    const char *p[1] = {job_id};
    PGresult *res = db_pg_query(c, sel, 1, p, &code, err, errlen);
    if (res == NULL) return code;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(lite, ins, -1, &st, NULL) == SQLITE_OK ? 0 : DB_EFAIL;
    for (int r = 0; rc == 0 && r < PQntuples(res); r++) {
        sqlite3_bind_int64(st, 1, strtoll(PQgetvalue(res, r, 0), NULL, 10));
        for (int j = 0; j < ncol; j++) {
            const char *v = PQgetvalue(res, r, j + 1);
            if (PQgetisnull(res, r, j + 1)) sqlite3_bind_null(st, j + 2);
            else if (t->kinds[j] == 'i') sqlite3_bind_int64(st, j + 2, strtoll(v, NULL, 10));
            else if (t->kinds[j] == 'r') sqlite3_bind_double(st, j + 2, strtod(v, NULL));
            else sqlite3_bind_text(st, j + 2, v, -1, SQLITE_TRANSIENT);
        }
        if (sqlite3_step(st) != SQLITE_DONE) rc = DB_EFAIL;
        sqlite3_reset(st);
    }
    if (rc != 0)
        mt_errf(err, errlen, "copying %s of job %s: %s (rows of several nodes under one job are "
                "not merged yet)", t->name, job_id, sqlite3_errmsg(lite));
    sqlite3_finalize(st);
    PQclear(res);
    return rc;
}

int db_read_job(db_conn *c, const char *job, sqlite3 **out, char job_id[37], char *err,
                size_t errlen) {
    *out = NULL;
    int rc = db_pg_exec(c, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", err, errlen);
    if (rc == 0) rc = find_job(c, job, job_id, err, errlen);
    sqlite3 *lite = NULL;
    if (rc == 0 && sqlite3_open(":memory:", &lite) != SQLITE_OK) {
        mt_errf(err, errlen, "cannot open an in-memory database: %s", sqlite3_errmsg(lite));
        rc = DB_EFAIL;
    }
    if (rc == 0 && (sqlite3_exec(lite, rundb_schema_sql(), NULL, NULL, NULL) != SQLITE_OK ||
                    sqlite3_exec(lite, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)) {
        mt_errf(err, errlen, "in-memory run database: %s", sqlite3_errmsg(lite));
        rc = DB_EFAIL;
    }
    for (int i = 0; rc == 0 && i < DB_NTABLES; i++)
        rc = copy_table(c, lite, &db_tables[i], job_id, err, errlen);
    if (rc == 0) {
        char *q = sqlite3_mprintf("INSERT INTO meta VALUES('job_id', %Q); COMMIT", job_id);
        if (sqlite3_exec(lite, q, NULL, NULL, NULL) != SQLITE_OK) rc = DB_EFAIL;
        sqlite3_free(q);
    }
    char ignore[8];
    db_pg_exec(c, rc == 0 ? "COMMIT" : "ROLLBACK", ignore, sizeof(ignore));
    if (rc != 0) {
        sqlite3_close(lite);
        return rc;
    }
    *out = lite;
    return 0;
}

static double num_or_nan(PGresult *res, int r, int col) {
    return PQgetisnull(res, r, col) ? NAN : strtod(PQgetvalue(res, r, col), NULL);
}

int db_list_runs(db_conn *c, double since, const char *status, int json, FILE *out, char *err,
                 size_t errlen) {
    char since_s[64];
    snprintf(since_s, sizeof(since_s), "%.17g", since);
    const char *p[2] = {isnan(since) ? NULL : since_s, status};
    int code = 0;
    PGresult *res = db_pg_query(
        c,
        "SELECT j.job_id::text, j.name, j.node, r.status, r.started_at, r.ended_at,"
        " (SELECT COUNT(DISTINCT step) FROM metrics m WHERE m.job_id = j.job_id),"
        " (SELECT COUNT(*) FROM runs r2 WHERE r2.job_id = j.job_id), j.run_dir"
        " FROM jobs j LEFT JOIN LATERAL (SELECT status, started_at, ended_at FROM runs r"
        "   WHERE r.job_id = j.job_id AND r.node = j.node ORDER BY rowid DESC LIMIT 1) r ON true"
        " WHERE ($1::float8 IS NULL OR r.started_at >= $1::float8)"
        "   AND ($2::text IS NULL OR r.status = $2::text)"
        " ORDER BY r.started_at DESC NULLS LAST, j.job_id",
        2, p, &code, err, errlen);
    if (res == NULL) return code;
    cJSON *arr = json ? cJSON_CreateArray() : NULL;
    if (!json)
        fprintf(out, "%-36s  %-20s  %-9s  %-19s  %7s  %4s  %s\n", "JOB_ID", "NAME", "STATUS",
                "STARTED (UTC)", "STEPS", "RUNS", "NODE");
    for (int r = 0; r < PQntuples(res); r++) {
        double started = num_or_nan(res, r, 4), ended = num_or_nan(res, r, 5);
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "job_id", PQgetvalue(res, r, 0));
            cJSON_AddItemToObject(o, "name", PQgetisnull(res, r, 1) ? cJSON_CreateNull()
                                              : cJSON_CreateString(PQgetvalue(res, r, 1)));
            cJSON_AddStringToObject(o, "node", PQgetvalue(res, r, 2));
            cJSON_AddItemToObject(o, "status", PQgetisnull(res, r, 3) ? cJSON_CreateNull()
                                                : cJSON_CreateString(PQgetvalue(res, r, 3)));
            cJSON_AddItemToObject(o, "started_at", isnan(started) ? cJSON_CreateNull()
                                                    : cJSON_CreateNumber(started));
            cJSON_AddItemToObject(o, "ended_at", isnan(ended) ? cJSON_CreateNull()
                                                  : cJSON_CreateNumber(ended));
            cJSON_AddNumberToObject(o, "steps", num_or_nan(res, r, 6));
            cJSON_AddNumberToObject(o, "runs", num_or_nan(res, r, 7));
            cJSON_AddStringToObject(o, "run_dir", PQgetvalue(res, r, 8));
            cJSON_AddItemToArray(arr, o);
            continue;
        }
        char when[32] = "n/a";
        if (!isnan(started)) {
            time_t t = (time_t)started;
            struct tm tm;
            gmtime_r(&t, &tm);
            strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
        }
        fprintf(out, "%-36s  %-20s  %-9s  %-19s  %7s  %4s  %s\n", PQgetvalue(res, r, 0),
                PQgetisnull(res, r, 1) ? "-" : PQgetvalue(res, r, 1),
                PQgetisnull(res, r, 3) ? "-" : PQgetvalue(res, r, 3), when, PQgetvalue(res, r, 6),
                PQgetvalue(res, r, 7), PQgetvalue(res, r, 2));
    }
    if (json) {
        char *s = cJSON_Print(arr);
        fprintf(out, "%s\n", s ? s : "[]");
        free(s);
        cJSON_Delete(arr);
    }
    PQclear(res);
    return 0;
}
#endif /* MT_HAVE_LIBPQ */
