/*
 * report/report.c — the summary of a job from its run database (DIR/run.db, see core/rundb.h),
 * with its ETTR accounting (report/ettr.h) and loss plot (report/svg.h); `minitrain report`
 * (cmd/report.c) prints it. It lives in sched/ because ETTR needs the supervisor's events.
 *
 * A run directory is one job; each (re)start of the trainer adds a `runs` row. So the report is
 * shaped in two parts:
 *   - per-run figures (name, status, git commit, start, duration, config) from the LATEST run row;
 *   - training figures (steps, losses, throughput and MFU medians) from the metrics of ALL runs,
 *     ordered by wall time: by run start, then by wall_s within the run (then insertion order).
 *     With one run this is simply that run; after restarts the "final" losses are the last ones
 *     logged, and `steps` counts distinct step numbers so recomputed steps are not counted twice.
 * Medians (not means) summarise throughput because the first steps (warm-up, page faults) and
 * checkpoint stalls are outliers. Missing numbers print "n/a" and are JSON null.
 *
 * ETTR, its breakdown, failures by kind, MTBF/MTTR and recomputed steps come from ettr_compute;
 * --json adds them as keys ettr, restarts, failures, lost_steps, mttr_s (plus ettr_breakdown,
 * failures_by_kind, mtbf_s, max_recovery_s). --svg FILE draws loss vs wall time (report/svg.h).
 *
 * The database is opened read-only; a missing or foreign file is a user error (exit 2), reported
 * with its path. The JSON object is built with cJSON.
 */
#include "report/report.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "core/check.h"
#include "core/rundb.h"
#include "core/runlock.h"
#include "core/stats.h"
#include "report/ettr.h"
#include "report/svg.h"

/* A growable array of doubles (the non-NULL, finite values of one metrics column). */
typedef struct {
    double *v;
    size_t n, cap;
} dvec;

static void dvec_push(dvec *a, double x) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 256;
        double *v = realloc(a->v, cap * sizeof(double));
        mtCheck(v != NULL, "out of memory reading the metrics table");
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
}


static char *col_strdup(sqlite3_stmt *st, int i) {
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? strdup((const char *)s) : NULL;
}

static double col_real(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

/* Run a one-row query that yields a single REAL (NULL -> NAN). Returns SQLite's rc. */
static int query_real(sqlite3 *db, const char *sql, int64_t bind, double *out) {
    sqlite3_stmt *st = NULL;
    *out = NAN;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK) return rc;
    if (sqlite3_bind_parameter_count(st) > 0) sqlite3_bind_int64(st, 1, bind);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = col_real(st, 0);
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int load_metrics(sqlite3 *db, report_summary *r);

/* Fill r's run and metric figures from the database. Returns SQLITE_OK, or an SQLite error code
 * (message in db). */
static int load_report(sqlite3 *db, report_summary *r) {
    sqlite3_stmt *st = NULL;
    int rc;

    /* Latest run row + number of runs. */
    rc = sqlite3_prepare_v2(db,
                            "SELECT id, name, config, git_commit, started_at, ended_at, status,"
                            " world_size, (SELECT COUNT(*) FROM runs), (SELECT MIN(started_at)"
                            " FROM runs) FROM runs ORDER BY id DESC LIMIT 1",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        r->run_id = sqlite3_column_int64(st, 0);
        r->name = col_strdup(st, 1);
        r->config = col_strdup(st, 2);
        r->git_commit = col_strdup(st, 3);
        r->started_at = col_real(st, 4);
        r->ended_at = col_real(st, 5);
        r->run_status = col_strdup(st, 6);
        r->world_size = sqlite3_column_int64(st, 7);
        r->runs = sqlite3_column_int64(st, 8);
        r->job_start = col_real(st, 9);
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK; /* no runs: r->runs stays 0 */
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_OK || r->runs == 0) return rc;
    return load_metrics(db, r);
}

/* Metrics of all runs and the latest run's duration. */
static int load_metrics(sqlite3 *db, report_summary *r) {
    sqlite3_stmt *st = NULL;
    int rc;
    /* Metrics of all runs in wall-time order. */
    rc = sqlite3_prepare_v2(db,
                            "SELECT m.step, m.train_loss, m.val_loss, m.tokens_per_s, m.mfu,"
                            " m.mfu_theoretical FROM metrics m LEFT JOIN runs r ON r.id = m.run_id"
                            " ORDER BY r.started_at, m.run_id, m.wall_s, m.rowid",
                            -1, &st, NULL);
    if (rc != SQLITE_OK) return rc;
    dvec tps = {0}, mfu = {0}, mfut = {0};
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        r->metric_rows++;
        int64_t step = sqlite3_column_int64(st, 0);
        if (r->metric_rows == 1 || step > r->last_step) r->last_step = step;
        double tl = col_real(st, 1), vl = col_real(st, 2);
        if (isfinite(tl)) {
            if (isnan(r->first_train_loss)) r->first_train_loss = tl;
            r->final_train_loss = tl;
        }
        if (isfinite(vl)) {
            r->final_val_loss = vl;
            if (isnan(r->best_val_loss) || vl < r->best_val_loss) r->best_val_loss = vl;
        }
        double x;
        if (isfinite(x = col_real(st, 3))) dvec_push(&tps, x);
        if (isfinite(x = col_real(st, 4))) dvec_push(&mfu, x);
        if (isfinite(x = col_real(st, 5))) dvec_push(&mfut, x);
    }
    sqlite3_finalize(st);
    r->tokens_per_s = stats_median(tps.v, tps.n);
    r->mfu = stats_median(mfu.v, mfu.n);
    r->mfu_theoretical = stats_median(mfut.v, mfut.n);
    free(tps.v);
    free(mfu.v);
    free(mfut.v);
    if (rc != SQLITE_DONE) return rc;

    double x;
    rc = query_real(db, "SELECT COUNT(DISTINCT step) FROM metrics", 0, &x);
    if (rc != SQLITE_OK) return rc;
    r->steps = (int64_t)x;

    /* Latest run's duration: ended_at, or (still running / crashed) the last thing it logged. */
    static const char *LAST_TIME_SQL =
        "SELECT MAX(t) FROM ("
        " SELECT MAX(ended_at) AS t FROM runs WHERE id = ?1 OR ?1 < 0"
        " UNION ALL SELECT MAX(r.started_at + m.wall_s) FROM metrics m JOIN runs r"
        "   ON r.id = m.run_id WHERE m.run_id = ?1 OR ?1 < 0"
        " UNION ALL SELECT MAX(time) FROM events WHERE run_id = ?1 OR ?1 < 0)";
    double end;
    if ((rc = query_real(db, LAST_TIME_SQL, r->run_id, &end)) != SQLITE_OK) return rc;
    r->duration_s = end - r->started_at; /* NAN when nothing after the start was logged */
    if ((rc = query_real(db, LAST_TIME_SQL, -1, &end)) != SQLITE_OK) return rc;
    r->wall_s = end - r->job_start;
    return SQLITE_OK;
}

/* Events by kind, whole job. */
static int load_event_counts(sqlite3 *db, report_summary *r) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT kind, COUNT(*) FROM events GROUP BY kind ORDER BY kind", -1,
                            &st, NULL);
    if (rc != SQLITE_OK) return rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const unsigned char *k = sqlite3_column_text(st, 0);
        cJSON_AddNumberToObject(r->events, k ? (const char *)k : "(null)",
                                (double)sqlite3_column_int64(st, 1));
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

/* Text of key `key` of a JSON object text, malloc'd, or NULL. */
static char *detail_text(const char *detail, const char *key) {
    cJSON *j = detail ? cJSON_Parse(detail) : NULL;
    const cJSON *it = j ? cJSON_GetObjectItemCaseSensitive(j, key) : NULL;
    char *out = cJSON_IsString(it) && it->valuestring[0] ? strdup(it->valuestring) : NULL;
    cJSON_Delete(j);
    return out;
}

/* The job's status (see report_summary): from the supervisor's events, else from the latest run
 * row, each checked against the run directory's lock. */
static int load_job_status(sqlite3 *db, const char *run_dir, report_summary *r) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "SELECT kind, time, detail FROM events WHERE run_id = 0 AND"
                                    " kind IN ('supervisor_start', 'supervisor_end')"
                                    " ORDER BY time, rowid", -1, &st, NULL);
    if (rc != SQLITE_OK) return rc;
    double start = NAN, end = NAN;
    char *end_detail = NULL;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *kind = (const char *)sqlite3_column_text(st, 0);
        const char *detail = (const char *)sqlite3_column_text(st, 2);
        if (kind && !strcmp(kind, "supervisor_start")) { /* a later supervisor of this dir */
            start = col_real(st, 1);
            end = NAN;
            free(end_detail);
            end_detail = NULL;
        } else if (kind && isfinite(start)) {
            end = col_real(st, 1);
            free(end_detail);
            end_detail = detail ? strdup(detail) : NULL;
        }
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) {
        free(end_detail);
        return rc;
    }
    char holder[256];
    /* 1 held, 0 free, -1 none (also when the rows came from elsewhere: no run directory) */
    int lock = run_dir != NULL ? runlock_probe(run_dir, holder, sizeof(holder)) : -1;
    r->supervised = isfinite(start);
    if (r->supervised && isfinite(end)) {
        r->status = detail_text(end_detail, "status");
        r->status_reason = detail_text(end_detail, "reason");
        r->ended_at = end;
    } else if (r->supervised) {
        r->status = strdup(lock == 0 || lock < 0 ? "killed" : "running");
        if (lock != 1)
            r->status_reason = strdup("the supervisor ended without a word (killed by SIGKILL, or "
                                      "its machine went down)");
        r->ended_at = NAN;
    } else if (r->run_status && !strcmp(r->run_status, "running") && lock == 0) {
        r->status = strdup("killed");
        r->status_reason = strdup("the trainer ended without a word (its run directory's lock is "
                                  "free)");
    } else if (r->run_status) {
        r->status = strdup(r->run_status);
    }
    free(end_detail);
    return SQLITE_OK;
}

/* ---- output ----------------------------------------------------------------------------------- */

static void add_num(cJSON *o, const char *key, double v) {
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

static void add_str(cJSON *o, const char *key, const char *s) {
    if (s)
        cJSON_AddStringToObject(o, key, s);
    else
        cJSON_AddNullToObject(o, key);
}

/* The fail-slow verdicts of the job (EV_FAILSLOW, sched/failslow.h), one "failslow:" line
 * each: the verdict's text, the hosts blamed and whether the group was evicted. */
static void failslow_lines(const report_summary *r) {
    sqlite3_stmt *st = NULL;
    if (!r->db || sqlite3_prepare_v2(r->db, "SELECT detail FROM events WHERE kind = 'failslow' "
                                     "ORDER BY time, rowid", -1, &st, NULL) != SQLITE_OK)
        return;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(st, 0);
        cJSON *d = detail ? cJSON_Parse(detail) : NULL;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, "text");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(d, "hosts");
        printf("failslow:       %s; hosts", cJSON_IsString(t) ? t->valuestring : "?");
        for (const cJSON *x = h ? h->child : NULL; x; x = x->next)
            printf(" %s", cJSON_IsString(x) ? x->valuestring : "?");
        printf("%s\n", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "evicted")) ? ", evicted"
                                                                                  : "");
        cJSON_Delete(d);
    }
    sqlite3_finalize(st);
}

/* The stack captures of the job (EV_STACKS, sched/stacks.h: the supervisor's on a hang, and
 * `minitrain diagnose`'s), in time order: [{time, source, text, outliers, blame_kind, blame,
 * machines}]. An empty array when none. */
static cJSON *stack_verdicts(const report_summary *r) {
    cJSON *a = cJSON_CreateArray();
    mtCheck(a != NULL, "out of memory");
    sqlite3_stmt *st = NULL;
    if (!r->db || sqlite3_prepare_v2(r->db, "SELECT time, detail FROM events WHERE kind = 'stacks' "
                                     "ORDER BY time, rowid", -1, &st, NULL) != SQLITE_OK)
        return a;
    static const char *const keep[] = {"source", "text", "outliers", "blame_kind", "blame",
                                       "machines"};
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(st, 1);
        cJSON *d = detail ? cJSON_Parse(detail) : NULL, *o = cJSON_CreateObject();
        mtCheck(o != NULL, "out of memory");
        cJSON_AddNumberToObject(o, "time", sqlite3_column_double(st, 0));
        for (size_t k = 0; k < sizeof(keep) / sizeof(keep[0]); k++) {
            cJSON *x = cJSON_DetachItemFromObjectCaseSensitive(d, keep[k]);
            if (x) cJSON_AddItemToObject(o, keep[k], x);
        }
        cJSON_Delete(d);
        cJSON_AddItemToArray(a, o);
    }
    sqlite3_finalize(st);
    return a;
}

/* The nodes the supervisor drained in Slurm (its slurm_drain events, sched/slurm.h), in time
 * order: [{host, why, ok, time}]. Read at print time from r->db; an empty array when none. */
static cJSON *drained_nodes(const report_summary *r) {
    cJSON *a = cJSON_CreateArray();
    mtCheck(a != NULL, "out of memory");
    sqlite3_stmt *st = NULL;
    if (!r->db || sqlite3_prepare_v2(r->db, "SELECT time, detail FROM events WHERE run_id = 0 AND "
                                     "kind = 'slurm_drain' ORDER BY time, rowid", -1, &st,
                                     NULL) != SQLITE_OK)
        return a;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *detail = (const char *)sqlite3_column_text(st, 1);
        cJSON *d = detail ? cJSON_Parse(detail) : NULL, *o = cJSON_CreateObject();
        mtCheck(o != NULL, "out of memory");
        const cJSON *host = cJSON_GetObjectItemCaseSensitive(d, "host");
        const cJSON *why = cJSON_GetObjectItemCaseSensitive(d, "why");
        add_str(o, "host", cJSON_IsString(host) ? host->valuestring : NULL);
        add_str(o, "why", cJSON_IsString(why) ? why->valuestring : NULL);
        cJSON_AddBoolToObject(o, "ok", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "ok")));
        add_num(o, "time", col_real(st, 0));
        cJSON_AddItemToArray(a, o);
        cJSON_Delete(d);
    }
    sqlite3_finalize(st);
    return a;
}

int report_print_json(const report_summary *r) {
    cJSON *o = cJSON_CreateObject();
    mtCheck(o != NULL, "out of memory building the JSON report");
    cJSON_AddNumberToObject(o, "runs", (double)r->runs);
    cJSON_AddNumberToObject(o, "run_id", (double)r->run_id);
    add_str(o, "name", r->name);
    add_str(o, "status", r->status);
    add_str(o, "status_reason", r->status_reason);
    add_str(o, "run_status", r->run_status);
    cJSON_AddBoolToObject(o, "supervised", r->supervised);
    add_str(o, "git_commit", r->git_commit);
    cJSON_AddNumberToObject(o, "world_size", (double)r->world_size);
    add_num(o, "started_at", r->started_at);
    add_num(o, "ended_at", r->ended_at);
    add_num(o, "duration_s", r->duration_s);
    add_num(o, "wall_s", r->wall_s);
    /* The config is stored as JSON text: embed it as an object when it parses, else as a string. */
    cJSON *cfg = r->config ? cJSON_Parse(r->config) : NULL;
    if (cfg)
        cJSON_AddItemToObject(o, "config", cfg);
    else
        add_str(o, "config", r->config);
    cJSON_AddNumberToObject(o, "steps", (double)r->steps);
    if (r->metric_rows > 0)
        cJSON_AddNumberToObject(o, "last_step", (double)r->last_step);
    else
        cJSON_AddNullToObject(o, "last_step");
    cJSON_AddNumberToObject(o, "metric_rows", (double)r->metric_rows);
    add_num(o, "first_train_loss", r->first_train_loss);
    add_num(o, "final_train_loss", r->final_train_loss);
    add_num(o, "final_val_loss", r->final_val_loss);
    add_num(o, "best_val_loss", r->best_val_loss);
    add_num(o, "tokens_per_s", r->tokens_per_s);
    add_num(o, "mfu", r->mfu);
    add_num(o, "mfu_theoretical", r->mfu_theoretical);
    svg_memory mem;
    if (svg_memory_load(r->db, &mem)) { /* the budget's largest rank, predicted vs measured */
        cJSON *mo = cJSON_AddObjectToObject(o, "memory");
        cJSON_AddNumberToObject(mo, "zero", mem.zero);
        add_str(mo, "recompute", mem.recompute);
        cJSON_AddNumberToObject(mo, "rank", mem.rank);
        add_num(mo, "predicted_bytes", mem.bytes[8]);
        add_num(mo, "peak_rss_bytes", mem.peak);
        add_num(mo, "limit_bytes", mem.limit);
    }
    cJSON_AddItemToObject(o, "events", cJSON_Duplicate(r->events, 1));
    const ettr_report *e = &r->ettr;
    add_num(o, "ettr", e->ettr);
    cJSON_AddNumberToObject(o, "restarts", e->restarts);
    cJSON_AddNumberToObject(o, "failures", e->failures);
    cJSON_AddNumberToObject(o, "lost_steps", e->lost_steps);
    add_num(o, "mttr_s", e->mttr_s);
    add_num(o, "max_recovery_s", e->max_recovery_s);
    add_num(o, "mtbf_s", e->mtbf_s);
    cJSON *kinds = cJSON_AddObjectToObject(o, "failures_by_kind");
    for (int i = 0; i < e->n_kinds; i++)
        cJSON_AddNumberToObject(kinds, e->by_kind[i].kind, e->by_kind[i].count);
    cJSON *b = cJSON_AddObjectToObject(o, "ettr_breakdown");
    add_num(b, "wall_s", e->wall_s);
    add_num(b, "useful_s", e->useful_s);
    add_num(b, "recompute_s", e->recompute_s);
    add_num(b, "detect_s", e->detect_s);
    add_num(b, "teardown_s", e->teardown_s);
    add_num(b, "backoff_s", e->backoff_s);
    add_num(b, "startup_s", e->startup_s);
    add_num(b, "relaunch_s", e->relaunch_s);
    add_num(b, "ckpt_load_s", e->ckpt_load_s);
    add_num(b, "ckpt_stall_s", e->ckpt_stall_s);
    add_num(b, "other_s", e->other_s);
    cJSON_AddItemToObject(o, "drained", drained_nodes(r));
    cJSON_AddItemToObject(o, "stacks", stack_verdicts(r));
    for (const cJSON *x = r->extra ? r->extra->child : NULL; x; x = x->next)
        cJSON_AddItemToObject(o, x->string, cJSON_Duplicate(x, 1));
    char *s = cJSON_Print(o);
    mtCheck(s != NULL, "out of memory printing the JSON report");
    printf("%s\n", s);
    cJSON_free(s);
    cJSON_Delete(o);
    return MT_EXIT_OK;
}

/* "1h 02m 03s"-style duration, or "n/a". */
static const char *fmt_duration(double s, char *buf, size_t n) {
    if (!isfinite(s) || s < 0) return "n/a";
    long t = (long)(s + 0.5);
    snprintf(buf, n, "%ldh %02ldm %02lds", t / 3600, (t / 60) % 60, t % 60);
    return buf;
}

static const char *fmt_num(double v, const char *fmt, double scale, char *buf, size_t n) {
    if (!isfinite(v)) return "n/a";
    snprintf(buf, n, fmt, v * scale);
    return buf;
}

int report_print_text(const report_summary *r) {
    char a[64], b[64], c[64];
    if (r->runs == 0)
        printf("run:            none: no launch started a trainer (what the supervisor saw "
               "follows)\n");
    else
        printf("run:            %s (id %lld, latest of %lld run%s in this database)\n",
               r->name ? r->name : "(unnamed)", (long long)r->run_id, (long long)r->runs,
               r->runs == 1 ? "" : "s");
    printf("status:         %s%s%s", r->status ? r->status : "n/a",
           r->status_reason ? " — " : "", r->status_reason ? r->status_reason : "");
    if (r->supervised && r->run_status)
        printf(" (latest run: %s)", r->run_status);
    printf("\n");
    printf("git commit:     %s\n", r->git_commit ? r->git_commit : "n/a");
    printf("world size:     %lld\n", (long long)r->world_size);
    if (isfinite(r->started_at)) {
        time_t t0 = (time_t)r->started_at;
        struct tm tm;
        localtime_r(&t0, &tm);
        strftime(a, sizeof(a), "%Y-%m-%d %H:%M:%S %Z", &tm);
        printf("started:        %s\n", a);
    } else {
        printf("started:        n/a\n");
    }
    printf("duration:       %s (latest run%s); job wall time %s\n",
           fmt_duration(r->duration_s, a, sizeof(a)),
           isfinite(r->ended_at) ? "" : ", not ended: up to its last log",
           fmt_duration(r->wall_s, b, sizeof(b)));
    printf("config:         %s\n", r->config ? r->config : "n/a");
    if (r->metric_rows > 0)
        printf("steps:          %lld distinct (last step %lld, %lld metric rows)\n",
               (long long)r->steps, (long long)r->last_step, (long long)r->metric_rows);
    else
        printf("steps:          0 (no metrics logged)\n");
    printf("train loss:     first %s, final %s\n",
           fmt_num(r->first_train_loss, "%.4f", 1, a, sizeof(a)),
           fmt_num(r->final_train_loss, "%.4f", 1, b, sizeof(b)));
    printf("val loss:       final %s, best %s\n",
           fmt_num(r->final_val_loss, "%.4f", 1, a, sizeof(a)),
           fmt_num(r->best_val_loss, "%.4f", 1, b, sizeof(b)));
    printf("tokens/s:       %s (median)\n", fmt_num(r->tokens_per_s, "%.1f", 1, a, sizeof(a)));
    printf("MFU (median):   %s of measured sgemm peak, %s of theoretical peak\n",
           fmt_num(r->mfu, "%.1f%%", 100, b, sizeof(b)),
           fmt_num(r->mfu_theoretical, "%.1f%%", 100, c, sizeof(c)));
    svg_memory mem;
    char line[512];
    if (svg_memory_load(r->db, &mem)) printf("memory:         %s\n", svg_memory_text(&mem, line, sizeof(line)));
    printf("events:        ");
    int any = 0;
    for (cJSON *e = r->events->child; e; e = e->next, any = 1)
        printf("%s %s %d", any ? "," : "", e->string, (int)e->valuedouble);
    printf("%s\n", any ? "" : " none");
    cJSON *dr = drained_nodes(r);
    for (const cJSON *x = dr->child; x; x = x->next) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(x, "host");
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(x, "why");
        printf("drained:        %s in Slurm%s — minitrain: %s\n",
               cJSON_IsString(h) ? h->valuestring : "?",
               cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "ok")) ? "" : " (scontrol FAILED)",
               cJSON_IsString(w) ? w->valuestring : "?");
    }
    cJSON_Delete(dr);
    cJSON *sv = stack_verdicts(r);
    for (const cJSON *x = sv->child; x; x = x->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "text");
        const cJSON *src = cJSON_GetObjectItemCaseSensitive(x, "source");
        printf("stacks:         %s (%s)\n", cJSON_IsString(t) ? t->valuestring : "?",
               cJSON_IsString(src) ? src->valuestring : "?");
    }
    cJSON_Delete(sv);
    failslow_lines(r);
    ettr_print(&r->ettr, "");
    return MT_EXIT_OK;
}

/* Open path read-only and check it holds the tables a report reads: a foreign or damaged file
 * says which table is missing rather than failing mid-query. */
static int open_db(const char *path, sqlite3 **out, char *err, size_t errlen) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "no run database at %s", path);
        return -1;
    }
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL);
    if (rc == SQLITE_OK) sqlite3_busy_timeout(db, RUNDB_BUSY_TIMEOUT_MS);
    static const char *TABLES[] = {"runs", "metrics", "events"};
    for (size_t t = 0; rc == SQLITE_OK && t < sizeof(TABLES) / sizeof(TABLES[0]); t++) {
        sqlite3_stmt *st = NULL;
        rc = sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                                -1, &st, NULL);
        if (rc != SQLITE_OK) break;
        sqlite3_bind_text(st, 1, TABLES[t], -1, SQLITE_STATIC);
        rc = sqlite3_step(st);
        sqlite3_finalize(st);
        if (rc == SQLITE_DONE) {
            snprintf(err, errlen, "%s is not a minitrain run database (no table '%s')", path,
                     TABLES[t]);
            sqlite3_close(db);
            return -1;
        }
        rc = (rc == SQLITE_ROW) ? SQLITE_OK : rc;
    }
    if (rc != SQLITE_OK) {
        snprintf(err, errlen, "cannot read run database %s: %s", path,
                 db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return -1;
    }
    *out = db;
    return 0;
}

int report_load(const char *run_dir, report_summary *r, char *err, size_t errlen) {
    char path[sizeof(r->path)];
    rundb_path(run_dir, path, sizeof(path));
    sqlite3 *db = NULL;
    if (open_db(path, &db, err, errlen) != 0) return -1;
    return report_load_db(db, run_dir, path, r, err, errlen);
}

int report_load_db(sqlite3 *db, const char *run_dir, const char *label, report_summary *r,
                   char *err, size_t errlen) {
    *r = (report_summary){.first_train_loss = NAN, .final_train_loss = NAN,
                          .final_val_loss = NAN, .best_val_loss = NAN, .started_at = NAN,
                          .ended_at = NAN, .duration_s = NAN, .job_start = NAN, .wall_s = NAN,
                          .tokens_per_s = NAN, .mfu = NAN, .mfu_theoretical = NAN};
    snprintf(r->path, sizeof(r->path), "%s", label);
    r->db = db;
    r->events = cJSON_CreateObject();
    mtCheck(r->events != NULL, "out of memory building the report");
    char eerr[512] = "";
    int rc = load_report(r->db, r);
    if (rc == SQLITE_OK) rc = load_event_counts(r->db, r);
    if (rc == SQLITE_OK) rc = load_job_status(r->db, run_dir, r);
    if (rc != SQLITE_OK)
        snprintf(err, errlen, "cannot read run database %s: %s", r->path, sqlite3_errmsg(r->db));
    else if (r->runs == 0 && !r->supervised)
        snprintf(err, errlen, "run database %s holds no runs yet", r->path);
    else if (ettr_compute(r->db, &r->ettr, eerr, sizeof(eerr)) != 0)
        snprintf(err, errlen, "ETTR accounting of %s: %s", r->path, eerr);
    else {
        if (r->runs == 0 && r->ettr.wall_s > 0) { /* only the supervisor's events: its span */
            r->job_start = r->started_at = r->ettr.job_start;
            r->wall_s = r->ettr.wall_s;
        }
        return 0;
    }
    report_free(r);
    return -1;
}

int report_svg(const report_summary *r, const svg_panel *beside, const char *path, char *err,
               size_t errlen) {
    return svg_loss_plot(r->db, &r->ettr, beside, path, err, errlen);
}

void report_free(report_summary *r) {
    if (r->db) sqlite3_close(r->db);
    cJSON_Delete(r->events);
    cJSON_Delete(r->extra);
    r->extra = NULL;
    free(r->name);
    free(r->status);
    free(r->status_reason);
    free(r->run_status);
    free(r->git_commit);
    free(r->config);
    r->db = NULL;
    r->events = NULL;
    r->name = r->status = r->status_reason = r->run_status = r->git_commit = r->config = NULL;
}
