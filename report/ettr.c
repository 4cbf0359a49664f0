/*
 * report/ettr.c — ETTR accounting from run.db (see report/ettr.h for the categories).
 *
 * Shape: read everything once into small arrays (runs, metric rows, events), then walk the job as
 * a sequence of ATTEMPTS. With a supervisor, an attempt is [launch_k, launch_k+1): it may hold a
 * trainer run (a `runs` row) or die before creating one. Without a supervisor each run is its own
 * attempt. Every category is a difference of timestamps that the attempt's events pin down, so
 * the breakdown sums to the wall time by construction ("other" is the remainder) and a hand-made
 * event log has an answer one can compute on paper (tests/test_sched.c does).
 *
 * Timestamps: runs.started_at and events.time are unix seconds (CLOCK_REALTIME); metrics.wall_s is
 * seconds since the run's `start` event (the trainer's loop start), so a step ends at
 * start_event.time + wall_s and began step_ms earlier.
 */
#include "report/ettr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/check.h"
#include "core/events.h"
#include "core/rundb.h"

typedef struct {
    long long id;
    double started_at, ended_at, base; /* base = time of the `start` event (metrics time zero) */
    int attempt;
    double first_start, first_end, last_end; /* of its steps; NAN without steps */
} run_row;

typedef struct {
    long long run; /* index into runs */
    int step;
    double step_s, end;
} step_row;

typedef struct {
    long long run_id;
    double time;
    char kind[32];
    int rank;
    char *detail;
} event_row;

typedef struct {
    double launch, next_launch; /* next_launch = INFINITY for the last */
    double first_start, first_end, last_end;
    int has_steps;
} attempt;

/* ---- helpers ---------------------------------------------------------------------------------- */

/* Number `key` of a JSON object text, or NAN. */
static double detail_num(const char *detail, const char *key) {
    if (!detail) return NAN;
    cJSON *j = cJSON_Parse(detail);
    double v = NAN;
    if (j) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, key);
        if (cJSON_IsNumber(it)) v = it->valuedouble;
    }
    cJSON_Delete(j);
    return v;
}

/* String `key` of a JSON object text into out ("" when absent). */
static void detail_str(const char *detail, const char *key, char *out, size_t n) {
    out[0] = '\0';
    if (!detail) return;
    cJSON *j = cJSON_Parse(detail);
    if (j) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, key);
        if (cJSON_IsString(it)) snprintf(out, n, "%s", it->valuestring);
    }
    cJSON_Delete(j);
}

static double col_real(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

static int has_table(sqlite3 *db, const char *name) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", -1,
                           &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

/* The cost of one checkpoint event in seconds, NAN when it carries no stall: the stall
 * (snapshot_ms) plus the excess time of the training steps its background write overlapped
 * (overlap_ms, when logged; ckpt/writer.h ckpt_writer_note_step). */
static double save_stall_s(const char *detail) {
    double over = detail_num(detail, EVK_OVERLAP_MS);
    return (detail_num(detail, EVK_SNAPSHOT_MS) + (isfinite(over) ? over : 0)) / 1e3;
}

/* The overlap part alone (s, 0 when not logged): inside the kept steps' time, so moved from
 * useful to the checkpoint line by the caller. */
static double save_overlap_s(const char *detail) {
    double over = detail_num(detail, EVK_OVERLAP_MS);
    return isfinite(over) ? over / 1e3 : 0;
}

static void add_kind(ettr_report *r, const char *kind) {
    const char *k = kind[0] ? kind : "unknown";
    for (int i = 0; i < r->n_kinds; i++)
        if (!strcmp(r->by_kind[i].kind, k)) {
            r->by_kind[i].count++;
            return;
        }
    if (r->n_kinds < ETTR_MAX_KINDS) {
        snprintf(r->by_kind[r->n_kinds].kind, sizeof(r->by_kind[0].kind), "%s", k);
        r->by_kind[r->n_kinds++].count = 1;
    }
}

static int cmp_step(const void *a, const void *b) {
    const step_row *x = a, *y = b;
    if (x->step != y->step) return (x->step > y->step) - (x->step < y->step);
    return (x->run > y->run) - (x->run < y->run); /* run index follows start order */
}

/* ---- loading ---------------------------------------------------------------------------------- */

typedef struct {
    run_row *runs;
    int nruns;
    step_row *steps;
    long long nsteps;
    event_row *ev;
    long long nev;
} job_data;

static void job_free(job_data *j) {
    for (long long i = 0; i < j->nev; i++) free(j->ev[i].detail);
    free(j->runs);
    free(j->steps);
    free(j->ev);
    memset(j, 0, sizeof(*j));
}

static int run_index(const job_data *j, long long id) {
    for (int i = 0; i < j->nruns; i++)
        if (j->runs[i].id == id) return i;
    return -1;
}

static int load(sqlite3 *db, job_data *j, char *err, size_t errlen) {
    static const char *TABLES[] = {"runs", "metrics", "events"};
    for (int t = 0; t < 3; t++)
        if (!has_table(db, TABLES[t])) {
            mt_errf(err, errlen, "not a minitrain run database (no table '%s')", TABLES[t]);
            return -1;
        }
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(
        db, "SELECT id, started_at, ended_at, (SELECT MIN(time) FROM events e WHERE e.run_id = r.id"
            " AND e.kind = '" EV_START "') FROM runs r ORDER BY started_at, id", -1, &st, NULL);
    if (rc != SQLITE_OK) goto sql_error;
    int cap = 16;
    j->runs = mallocCheck((size_t)cap * sizeof(run_row));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (j->nruns == cap) {
            cap *= 2;
            j->runs = realloc(j->runs, (size_t)cap * sizeof(run_row));
            mtCheck(j->runs != NULL, "out of memory reading runs");
        }
        run_row *r = &j->runs[j->nruns++];
        r->id = sqlite3_column_int64(st, 0);
        r->started_at = col_real(st, 1);
        r->ended_at = col_real(st, 2);
        r->base = col_real(st, 3);
        if (isnan(r->base)) r->base = r->started_at;
        r->first_start = r->first_end = r->last_end = NAN;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) goto sql_error;

    rc = sqlite3_prepare_v2(db, "SELECT run_id, step, step_ms, wall_s FROM metrics WHERE"
                                " train_loss IS NOT NULL AND step_ms IS NOT NULL AND wall_s IS NOT"
                                " NULL ORDER BY run_id, step, rowid", -1, &st, NULL);
    if (rc != SQLITE_OK) goto sql_error;
    long long scap = 256;
    j->steps = mallocCheck((size_t)scap * sizeof(step_row));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int ri = run_index(j, sqlite3_column_int64(st, 0));
        int step = sqlite3_column_int(st, 1);
        if (ri < 0) continue; /* a metric of an unknown run */
        /* one row per (run, step): several ranks may log the same step */
        if (j->nsteps > 0 && j->steps[j->nsteps - 1].run == ri && j->steps[j->nsteps - 1].step == step)
            continue;
        if (j->nsteps == scap) {
            scap *= 2;
            j->steps = realloc(j->steps, (size_t)scap * sizeof(step_row));
            mtCheck(j->steps != NULL, "out of memory reading metrics");
        }
        step_row *s = &j->steps[j->nsteps++];
        s->run = ri;
        s->step = step;
        s->step_s = sqlite3_column_double(st, 2) / 1e3;
        s->end = j->runs[ri].base + sqlite3_column_double(st, 3);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) goto sql_error;

    rc = sqlite3_prepare_v2(db, "SELECT run_id, time, kind, rank, detail FROM events"
                                " ORDER BY time, rowid", -1, &st, NULL);
    if (rc != SQLITE_OK) goto sql_error;
    long long ecap = 256;
    j->ev = mallocCheck((size_t)ecap * sizeof(event_row));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (j->nev == ecap) {
            ecap *= 2;
            j->ev = realloc(j->ev, (size_t)ecap * sizeof(event_row));
            mtCheck(j->ev != NULL, "out of memory reading events");
        }
        event_row *e = &j->ev[j->nev++];
        e->run_id = sqlite3_column_int64(st, 0);
        e->time = col_real(st, 1);
        const unsigned char *k = sqlite3_column_text(st, 2);
        snprintf(e->kind, sizeof(e->kind), "%s", k ? (const char *)k : "");
        e->rank = sqlite3_column_int(st, 3);
        const unsigned char *d = sqlite3_column_text(st, 4);
        e->detail = d ? strdup((const char *)d) : NULL;
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_DONE) goto sql_error;
    return 0;
sql_error:
    mt_errf(err, errlen, "reading the run database: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return -1;
}

/* Checkpoint stalls from the `checkpoints` table (core/rundb.h: one row per tier and step, each
 * carrying the same snapshot_ms, so one value per (run, step)). Returns the number of saves with
 * a stall (sum in *sum_s), or -1 when there is no such table. */
static int table_stalls(sqlite3 *db, double *sum_s) {
    *sum_s = 0;
    if (!has_table(db, "checkpoints")) return -1;
    sqlite3_stmt *st = NULL;
    int n = 0;
    if (sqlite3_prepare_v2(db, "SELECT MAX(snapshot_ms) FROM checkpoints WHERE snapshot_ms IS NOT"
                               " NULL GROUP BY run_id, step", -1, &st, NULL) != SQLITE_OK)
        return -1;
    while (sqlite3_step(st) == SQLITE_ROW) {
        *sum_s += sqlite3_column_double(st, 0) / 1e3;
        n++;
    }
    sqlite3_finalize(st);
    return n;
}

/* The stall in seconds that event i adds: an EV_CHECKPOINT carries its save's snapshot_ms once
 * per committed tier, so only the first of a (run, step) counts; an EV_CKPT_WAIT adds the time a
 * save waited for the previous one (waited_ms). NAN for any other event. */
static double event_stall(const job_data *j, long long i) {
    const event_row *e = &j->ev[i];
    if (!strcmp(e->kind, EV_CKPT_WAIT)) {
        double ms = detail_num(e->detail, EVK_WAITED_MS);
        return isfinite(ms) ? ms / 1e3 : NAN;
    }
    if (strcmp(e->kind, EV_CHECKPOINT) != 0) return NAN;
    double s = save_stall_s(e->detail);
    if (!isfinite(s)) return NAN;
    double step = detail_num(e->detail, EVK_STEP);
    for (long long k = i - 1; k >= 0; k--) /* the same save reported for another tier */
        if (j->ev[k].run_id == e->run_id && !strcmp(j->ev[k].kind, EV_CHECKPOINT) &&
            detail_num(j->ev[k].detail, EVK_STEP) == step && isfinite(step))
            return NAN;
    return s;
}

/* Checkpoint stalls from events (event_stall). Returns the number of saves. */
static int event_stalls(const job_data *j, double *sum_s) {
    *sum_s = 0;
    int n = 0;
    for (long long i = 0; i < j->nev; i++) {
        double s = event_stall(j, i);
        if (!isfinite(s)) continue;
        *sum_s += s;
        n += strcmp(j->ev[i].kind, EV_CHECKPOINT) == 0;
    }
    return n;
}

/* The stalls of saves logged in (a, b]: a save before an attempt's first step (the step-0
 * checkpoint of `ckpt import`) lies inside its start-up, which must not count it twice. */
static double event_stalls_in(const job_data *j, double a, double b) {
    double sum = 0;
    for (long long i = 0; i < j->nev; i++) {
        double s = j->ev[i].time > a && j->ev[i].time <= b ? event_stall(j, i) : NAN;
        if (isfinite(s)) sum += s;
    }
    return sum;
}

/* ---- the accounting --------------------------------------------------------------------------- */

/* The job's span [*t0, *t1] (unix s): from the first run start or supervisor start/launch to the
 * last run end, event or step, or to supervisor_end when there is one; *nlaunch the supervisor's
 * launches; r->fault_mtbf_s from supervisor_start. */
static void job_span(const job_data *j, ettr_report *r, double *t0_out, double *t1_out,
                     int *nlaunch_out) {
    double t0 = INFINITY, t1 = -INFINITY, sup_end = NAN;
    for (int i = 0; i < j->nruns; i++) {
        if (isfinite(j->runs[i].started_at)) t0 = fmin(t0, j->runs[i].started_at);
        if (isfinite(j->runs[i].ended_at)) t1 = fmax(t1, j->runs[i].ended_at);
    }
    int nlaunch = 0;
    for (long long i = 0; i < j->nev; i++) {
        event_row *e = &j->ev[i];
        if (!isfinite(e->time)) continue;
        t1 = fmax(t1, e->time);
        if (e->run_id == 0 && (!strcmp(e->kind, EV_SUPERVISOR_START) || !strcmp(e->kind, EV_LAUNCH)))
            t0 = fmin(t0, e->time);
        if (e->run_id == 0 && !strcmp(e->kind, EV_LAUNCH)) nlaunch++;
        if (e->run_id == 0 && !strcmp(e->kind, EV_SUPERVISOR_END)) sup_end = e->time;
        if (e->run_id == 0 && !strcmp(e->kind, EV_SUPERVISOR_START)) {
            double m = detail_num(e->detail, EVK_FAULT_MTBF_S);
            r->fault_mtbf_s = m > 0 ? m : NAN;
        }
    }
    for (long long i = 0; i < j->nsteps; i++) t1 = fmax(t1, j->steps[i].end);
    if (isfinite(sup_end)) t1 = sup_end;
    *t0_out = t0;
    *t1_out = t1;
    *nlaunch_out = nlaunch;
}

/* The attempts (*na of them): the supervisor's launches, else one per run; each run is assigned
 * the attempt of the last launch before it started; each attempt gets its steps' first start,
 * first end and last end. The steps are then sorted, and the kept ones (the occurrence of a step
 * number in the latest run that logged it) counted as useful time, the others as recompute. */
static attempt *attempts(job_data *j, int nlaunch, ettr_report *r, int *na_out) {
    int na = nlaunch > 0 ? nlaunch : j->nruns;
    attempt *at = callocCheck((size_t)(na > 0 ? na : 1), sizeof(attempt));
    if (nlaunch > 0) {
        int k = 0;
        for (long long i = 0; i < j->nev; i++)
            if (j->ev[i].run_id == 0 && !strcmp(j->ev[i].kind, EV_LAUNCH))
                at[k++].launch = j->ev[i].time;
    } else {
        for (int i = 0; i < j->nruns; i++) at[i].launch = j->runs[i].started_at;
    }
    for (int k = 0; k < na; k++) {
        at[k].next_launch = k + 1 < na ? at[k + 1].launch : INFINITY;
        at[k].first_start = at[k].first_end = at[k].last_end = NAN;
    }
    for (int i = 0; i < j->nruns; i++) { /* the attempt a run belongs to: last launch before it */
        int k = 0;
        while (k + 1 < na && at[k + 1].launch <= j->runs[i].started_at) k++;
        j->runs[i].attempt = k;
    }

    /* Steps: kept = the occurrence of a step number in the latest run that logged it. */
    for (long long i = 0; i < j->nsteps; i++) {
        step_row *s = &j->steps[i];
        attempt *a = &at[j->runs[s->run].attempt];
        double start = s->end - s->step_s;
        if (!a->has_steps || start < a->first_start) a->first_start = start, a->first_end = s->end;
        if (!a->has_steps || s->end > a->last_end) a->last_end = s->end;
        a->has_steps = 1;
    }
    qsort(j->steps, (size_t)j->nsteps, sizeof(step_row), cmp_step);
    for (long long i = 0; i < j->nsteps; i++) {
        int kept = (i + 1 == j->nsteps) || j->steps[i + 1].step != j->steps[i].step;
        if (kept) {
            r->useful_s += j->steps[i].step_s;
            r->kept_steps++;
        } else {
            r->recompute_s += j->steps[i].step_s;
            r->lost_steps++;
        }
    }
    *na_out = na;
    return at;
}

/* Checkpoint stalls into r (the checkpoints table when it has them, else the events), and the
 * checkpoint load time of each of the na attempts (resume events, s; calloc'd, caller frees). */
static double *checkpoint_time(sqlite3 *db, const job_data *j, int na, ettr_report *r) {
    double stall_sum = 0;
    int nstall = event_stalls(j, &stall_sum);
    /* the overlapped steps' excess is inside the kept steps' time (attempts() ran first): move
     * it from the training line to the checkpoint line, so the lines still sum to the wall */
    for (long long i = 0; nstall > 0 && i < j->nev; i++)
        if (!strcmp(j->ev[i].kind, EV_CHECKPOINT) && isfinite(event_stall(j, i)))
            r->useful_s -= save_overlap_s(j->ev[i].detail);
    if (nstall == 0) nstall = table_stalls(db, &stall_sum);
    if (nstall < 0) nstall = 0, stall_sum = 0;
    r->ckpt_stall_s = stall_sum;
    r->checkpoints = nstall;
    if (nstall > 0) r->ckpt_stall_mean_s = stall_sum / nstall;
    double *load_s = callocCheck((size_t)na, sizeof(double));
    for (long long i = 0; i < j->nev; i++) {
        if (strcmp(j->ev[i].kind, EV_RESUME) != 0) continue;
        double ms = detail_num(j->ev[i].detail, EVK_LOAD_MS);
        int ri = run_index(j, j->ev[i].run_id);
        if (ri >= 0 && isfinite(ms)) load_s[j->runs[ri].attempt] += ms / 1e3;
    }
    return load_s;
}

/* The supervisor's verdict on attempt k (events in [lo, hi)): its first failure event and the
 * teardown after it (NULL when none), and in *t_fault the earliest fault of the attempt that ends
 * or stops the process (kill, hang, exit, non-finite loss, an MTBF kill; INFINITY when none). */
static void attempt_verdict(const job_data *j, int k, double lo, double hi,
                            const event_row **fail_out, const event_row **tdown_out,
                            double *t_fault_out) {
    const event_row *fail = NULL, *tdown = NULL;
    double t_fault = INFINITY;
    for (long long i = 0; i < j->nev; i++) {
        const event_row *e = &j->ev[i];
        if (e->time < lo || e->time >= hi) continue;
        if (e->run_id == 0 && !strcmp(e->kind, EV_FAILURE) && !fail) fail = e;
        if (e->run_id == 0 && !strcmp(e->kind, EV_TEARDOWN) && fail && !tdown) tdown = e;
        if (fail) continue;
        int mine = e->run_id == 0 ? !strcmp(e->kind, EV_MTBF_KILL)
                                  : (run_index(j, e->run_id) >= 0 &&
                                     j->runs[run_index(j, e->run_id)].attempt == k);
        if (!mine) continue;
        char fk[32];
        detail_str(e->detail, EVK_KIND, fk, sizeof(fk));
        /* the faults that end or stop the process are the moment of failure */
        int is_fault = (!strcmp(e->kind, EV_FAULT) &&
                        (!strcmp(fk, EV_FAULT_KIND_KILL) ||
                         !strcmp(fk, EV_FAULT_KIND_HANG) ||
                         !strcmp(fk, EV_FAULT_KIND_EXIT))) ||
                       !strcmp(e->kind, EV_NONFINITE) || !strcmp(e->kind, EV_MTBF_KILL) ||
                       !strcmp(e->kind, EV_SDC);
        if (is_fault) t_fault = fmin(t_fault, e->time);
    }
    *fail_out = fail;
    *tdown_out = tdown;
    *t_fault_out = t_fault;
}

/* Seconds the supervisor spent capturing stacks inside the detection window (t_f, t_d] (its
 * `stacks` events of source "supervisor"), at most the window. */
static double stacks_in(const job_data *j, double t_f, double t_d, int *count) {
    double s = 0;
    for (long long i = 0; i < j->nev; i++) {
        const event_row *e = &j->ev[i];
        if (e->run_id != 0 || strcmp(e->kind, EV_STACKS) != 0 || e->time <= t_f || e->time > t_d)
            continue;
        char src[32];
        detail_str(e->detail, "source", src, sizeof(src));
        double sec = detail_num(e->detail, "seconds");
        if (strcmp(src, "supervisor") != 0 || !(sec > 0)) continue;
        s += sec;
        (*count)++;
    }
    return fmin(s, fmax(t_d - t_f, 0));
}

/* Seconds of silent-corruption checks (sdc_ok and sdc events' "ms"), and their number. */
static double sdc_checks(const job_data *j, int *count) {
    double s = 0;
    for (long long i = 0; i < j->nev; i++) {
        const event_row *e = &j->ev[i];
        if (strcmp(e->kind, EV_SDC_OK) != 0 && strcmp(e->kind, EV_SDC) != 0) continue;
        double ms = detail_num(e->detail, "ms");
        if (!(ms > 0)) continue;
        s += ms / 1e3;
        (*count)++;
    }
    return s;
}

int ettr_compute(sqlite3 *db, ettr_report *r, char *err, size_t errlen) {
    memset(r, 0, sizeof(*r));
    r->ettr = r->mttr_s = r->mtbf_s = r->restart_overhead_s = r->ckpt_stall_mean_s = NAN;
    r->fault_mtbf_s = r->step_s = NAN;
    r->max_recovery_s = NAN;
    job_data j = {0};
    if (load(db, &j, err, errlen) != 0) {
        job_free(&j);
        return -1;
    }

    /* Job span. */
    double t0, t1;
    int nlaunch;
    job_span(&j, r, &t0, &t1, &nlaunch);
    if (!isfinite(t0) || !(t1 > t0)) { /* nothing to account */
        job_free(&j);
        return 0;
    }
    r->job_start = t0;
    r->job_end = t1;
    r->wall_s = t1 - t0;

    /* Attempts: supervisor launches, else one per run; the steps' useful and recomputed time. */
    int na;
    attempt *at = attempts(&j, nlaunch, r, &na);

    /* Checkpoint stalls (table if it has them, else events) and loads (events, per attempt). */
    double *load_s = checkpoint_time(db, &j, na, r);

    /* Walk the attempts. */
    double rec_sum = 0, over_sum = 0;
    int nover = 0;
    for (int k = 0; k < na; k++) {
        attempt *a = &at[k];
        double lo = a->launch, hi = a->next_launch;
        /* the supervisor's verdict on this attempt */
        const event_row *fail, *tdown;
        double t_fault;
        attempt_verdict(&j, k, lo, hi, &fail, &tdown, &t_fault);
        double attempt_end = isfinite(hi) ? hi : t1;
        /* start-up / relaunch: launch -> first step start (or the failure, if none) */
        double init_end = a->has_steps ? a->first_start : NAN;
        double t_f = NAN;
        if (fail) {
            double t_d = fail->time;
            double est = detail_num(fail->detail, EVK_FAILED_AT);
            t_f = isfinite(t_fault) ? t_fault : (isfinite(est) && est <= t_d ? est : t_d);
            if (t_f > t_d) t_f = t_d;
            r->failures++;
            char fk[32];
            detail_str(fail->detail, EVK_KIND, fk, sizeof(fk));
            add_kind(r, fk);
            if (a->has_steps && t_f > a->last_end) r->recompute_s += t_f - a->last_end;
            if (!a->has_steps) init_end = t_f;
            double loc = stacks_in(&j, t_f, t_d, &r->localisations);
            r->localise_s += loc;
            r->detect_s += t_d - t_f - loc;
            double t_td = tdown ? tdown->time : t_d;
            r->teardown_s += t_td - t_d;
            if (isfinite(hi)) r->backoff_s += hi - t_td; /* teardown -> next launch */
            /* recovery: the first step that ends after the failure, in a later attempt */
            for (int m = k + 1; m < na; m++)
                if (at[m].has_steps) {
                    double rec = at[m].first_end - t_f;
                    rec_sum += rec;
                    r->recoveries++;
                    if (isnan(r->max_recovery_s) || rec > r->max_recovery_s) r->max_recovery_s = rec;
                    over_sum += at[m].first_start - t_f;
                    nover++;
                    break;
                }
        }
        if (isnan(init_end)) init_end = attempt_end; /* never stepped, never failed: all init */
        double init = init_end - (k == 0 ? t0 : lo);
        double ld = fmin(load_s[k], fmax(init, 0));
        r->ckpt_load_s += ld;
        /* the categories partition the wall time: a stall inside start-up is a stall */
        double st = fmin(event_stalls_in(&j, (k == 0 ? t0 : lo) - 1e-9, init_end),
                         fmax(init - ld, 0));
        if (k == 0)
            r->startup_s += init - ld - st;
        else
            r->relaunch_s += init - ld - st;
    }
    r->localise_s += sdc_checks(&j, &r->localisations);
    r->launches = na;
    r->restarts = na > 0 ? na - 1 : 0;
    r->other_s = r->wall_s - (r->useful_s + r->recompute_s + r->detect_s + r->localise_s +
                              r->teardown_s +
                              r->backoff_s + r->startup_s + r->relaunch_s + r->ckpt_load_s +
                              r->ckpt_stall_s);
    r->ettr = r->useful_s / r->wall_s;
    if (r->recoveries > 0) r->mttr_s = rec_sum / r->recoveries;
    if (nover > 0) r->restart_overhead_s = over_sum / nover;
    if (r->failures > 0) r->mtbf_s = r->wall_s / r->failures;
    if (r->kept_steps > 0) r->step_s = r->useful_s / r->kept_steps;
    free(load_s);
    free(at);
    job_free(&j);
    return 0;
}

int ettr_compute_dir(const char *run_dir, ettr_report *out, char *err, size_t errlen) {
    char path[4200];
    rundb_path(run_dir, path, sizeof(path));
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        mt_errf(err, errlen, "cannot open run database %s: %s", path,
                db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return -1;
    }
    sqlite3_busy_timeout(db, RUNDB_BUSY_TIMEOUT_MS);
    char msg[512];
    int rc = ettr_compute(db, out, msg, sizeof(msg));
    if (rc != 0) mt_errf(err, errlen, "%s: %s", path, msg);
    sqlite3_close(db);
    return rc;
}

static void line(const char *indent, const char *label, double s, double wall) {
    printf("%s%-26s %9.2f s  %5.1f%%\n", indent, label, s, wall > 0 ? 100 * s / wall : 0.0);
}

void ettr_print(const ettr_report *r, const char *indent) {
    if (!(r->wall_s > 0)) {
        printf("%sETTR: n/a (nothing logged)\n", indent);
        return;
    }
    printf("%sETTR %.4f = kept step time %.2f s / job wall time %.2f s\n", indent, r->ettr,
           r->useful_s, r->wall_s);
    line(indent, "  training (kept steps)", r->useful_s, r->wall_s);
    line(indent, "  recomputation", r->recompute_s, r->wall_s);
    line(indent, "  failure detection", r->detect_s, r->wall_s);
    line(indent, "  localisation", r->localise_s, r->wall_s);
    line(indent, "  teardown", r->teardown_s, r->wall_s);
    line(indent, "  backoff", r->backoff_s, r->wall_s);
    line(indent, "  start-up (first launch)", r->startup_s, r->wall_s);
    line(indent, "  relaunch + init", r->relaunch_s, r->wall_s);
    line(indent, "  checkpoint load", r->ckpt_load_s, r->wall_s);
    line(indent, "  checkpoint stalls", r->ckpt_stall_s, r->wall_s);
    line(indent, "  other (eval, hooks, save)", r->other_s, r->wall_s);
    printf("%sfailures: %d", indent, r->failures);
    for (int i = 0; i < r->n_kinds; i++)
        printf("%s%s %d", i ? ", " : " (", r->by_kind[i].kind, r->by_kind[i].count);
    printf("%s | restarts %d | steps recomputed %d (kept %d)\n", r->n_kinds ? ")" : "",
           r->restarts, r->lost_steps, r->kept_steps);
    char mtbf[32] = "n/a", mttr[32] = "n/a", mx[32] = "n/a";
    if (isfinite(r->mtbf_s)) snprintf(mtbf, sizeof(mtbf), "%.1f s", r->mtbf_s);
    if (isfinite(r->mttr_s)) snprintf(mttr, sizeof(mttr), "%.2f s", r->mttr_s);
    if (isfinite(r->max_recovery_s)) snprintf(mx, sizeof(mx), "%.2f s", r->max_recovery_s);
    printf("%sMTBF observed %s | MTTR (failure -> first step after restart) %s, max %s\n", indent,
           mtbf, mttr, mx);
}
