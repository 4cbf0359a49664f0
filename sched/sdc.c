/*
 * sched/sdc.c — the silent-data-corruption check (sched/sdc.h): the verdict over every rank's
 * parameter hashes, the trainer hook that gathers them every N steps and stops the job on a
 * mismatch, the resume plan that skips checkpoints saved after the last check that agreed, and
 * the supervisor's read of the verdict.
 *
 * Shape: one static state per process (a process trains one model), like sched/hooks.c.
 */
#include "sched/sdc.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/events.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/timer.h"
#include "model/param_hash.h"
#include "parallel/comm.h"
#include "sched/hooks.h"

static struct {
    int every;
    int last_good;     /* step of the last check that agreed (-1: none yet) */
    int checks;        /* checks after start-up */
    double total_ms;   /* their cost */
    double hash_ms;    /* of which hashing this rank's parameters (the rest: the all-gather,
                        * including waiting for the slowest rank) */
    double step_ms;    /* sum of the step times seen at those checks */
    uint64_t *h;       /* (world, 2) */
} D;

/* ---- the verdict -------------------------------------------------------------------------------- */

/* Judge one replica group: members[0..n) (world ranks), their hashes vals[0..n). Adds the blamed
 * ranks to v and one sentence to v->text. what: "" or " expert". */
static void judge_group(const int *members, const uint64_t *vals, int n, const char *what,
                        int tp, int cp, int dp, sdc_verdict *v) {
    int best = 0, best_count = 0;
    for (int i = 0; i < n; i++) {
        int c = 0;
        for (int j = 0; j < n; j++) c += vals[j] == vals[i];
        if (c > best_count) best = i, best_count = c;
    }
    if (best_count == n) return;
    int majority = 2 * best_count > n;
    v->mismatch = 1;
    v->groups++;
    v->tie |= !majority;
    char names[200] = "", agree[200] = "";
    int named = 0;
    for (int i = 0; i < n; i++) {
        int odd = !majority || vals[i] != vals[best];
        char *buf = odd ? names : agree;
        size_t L = strlen(buf);
        snprintf(buf + L, 200 - L, "%s%d", L ? "," : "", members[i]);
        if (!odd) continue;
        named++;
        int dup = 0;
        for (int k = 0; k < v->nblame; k++) dup |= v->blame[k] == members[i];
        if (!dup && v->nblame < SDC_MAX_BLAME) v->blame[v->nblame++] = members[i];
    }
    int r0 = members[0], tp_r = r0 % tp, pp_r = r0 / (tp * cp * dp);
    size_t L = strlen(v->text);
    if (majority)
        snprintf(v->text + L, sizeof(v->text) - L, "%srank%s %s (tp %d pp %d) hold%s%s parameters "
                 "that differ from their %d replica%s (ranks %s agree on %016" PRIx64 ")",
                 L ? "; " : "", named == 1 ? "" : "s", names, tp_r, pp_r, named == 1 ? "s" : "",
                 what, best_count, best_count == 1 ? "" : "s", agree, vals[best]);
    else
        snprintf(v->text + L, sizeof(v->text) - L, "%sranks %s (tp %d pp %d) disagree on their%s "
                 "parameters with no majority: a tie, any of them may be the corrupted one",
                 L ? "; " : "", names, tp_r, pp_r, what);
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int sdc_judge(const uint64_t *h, int world, int tp, int cp, int pp, int dp, int ep,
              sdc_verdict *v) {
    memset(v, 0, sizeof(*v));
    if (world <= 0 || world > SDC_MAX_RANKS || tp * cp * pp * dp != world) return 0;
    int members[SDC_MAX_RANKS];
    uint64_t vals[SDC_MAX_RANKS];
    /* dense tensors: same (tp_rank, pp_rank) — the dp·cp ranks of one shard */
    for (int p = 0; p < pp; p++)
        for (int t = 0; t < tp; t++) {
            int n = 0;
            for (int r = 0; r < world; r++)
                if (r % tp == t && r / (tp * cp * dp) == p) members[n] = r, vals[n++] = h[2 * r];
            judge_group(members, vals, n, "", tp, cp, dp, v);
        }
    /* experts under ep > 1: same (tp_rank, pp_rank, ep_rank); with ep = 1 they are in the dense
     * hash's group already, but their own hash is compared there too */
    for (int p = 0; p < pp; p++)
        for (int t = 0; t < tp; t++)
            for (int e = 0; e < ep; e++) {
                int n = 0;
                for (int r = 0; r < world; r++) {
                    int dp_r = (r / (tp * cp)) % dp;
                    if (r % tp == t && r / (tp * cp * dp) == p && dp_r % ep == e)
                        members[n] = r, vals[n++] = h[2 * r + 1];
                }
                judge_group(members, vals, n, " expert", tp, cp, dp, v);
            }
    qsort(v->blame, (size_t)v->nblame, sizeof(int), cmp_int);
    return v->mismatch;
}

uint64_t sdc_world_hash(const uint64_t *h, int world) {
    return hash_fnv1a64(h, (size_t)world * 2 * sizeof(uint64_t));
}

void sdc_gather_hashes(trainer *tr, uint64_t *h, double *hash_ms) {
    int world = tr->mesh->world_size, rank = tr->mesh->rank;
    uint64_t mine[2];
    double t0 = timer_now();
    gpt_params_hash(&tr->model, mine);
    if (hash_ms) *hash_ms = (timer_now() - t0) * 1e3;
    /* 16 bytes per rank carried as 4 floats: the all-gather copies them bit for bit */
    float *buf = mallocCheck((size_t)world * 4 * sizeof(float));
    memcpy(buf + 4 * rank, mine, sizeof(mine));
    comm_host_all_gather(tr->mesh->world, buf + 4 * rank, buf, 4);
    memcpy(h, buf, (size_t)world * 2 * sizeof(uint64_t));
    free(buf);
}

/* ---- the check ----------------------------------------------------------------------------------- */

static void layout_text(const mesh *m, char *out, size_t n) {
    snprintf(out, n, "tp%d cp%d pp%d dp%d ep%d", m->tp, m->cp, m->pp, m->dp, m->ep);
}

/* A mismatch: the event and the line (world rank 0), then every rank exits MT_EXIT_SDC. */
MT_NORETURN static void stop_job(trainer *tr, int step, const sdc_verdict *v, double ms) {
    const mesh *m = tr->mesh;
    if (m->rank == 0) {
        cJSON *d = ev_detail();
        ev_num(d, EVK_STEP, step);
        ev_num(d, "last_good", D.last_good);
        cJSON *bl = cJSON_CreateArray();
        for (int k = 0; k < v->nblame; k++) cJSON_AddItemToArray(bl, cJSON_CreateNumber(v->blame[k]));
        cJSON_AddItemToObject(d, "blame", bl);
        ev_bool(d, "tie", v->tie);
        ev_num(d, "groups", v->groups);
        ev_str(d, "text", v->text);
        cJSON *hl = cJSON_CreateArray();
        for (int r = 0; r < m->world_size; r++) {
            char hex[40];
            snprintf(hex, sizeof(hex), "%016" PRIx64 ":%016" PRIx64, D.h[2 * r], D.h[2 * r + 1]);
            cJSON_AddItemToArray(hl, cJSON_CreateString(hex));
        }
        cJSON_AddItemToObject(d, "hashes", hl);
        ev_num(d, "ms", ms);
        ev_log(tr->db, tr->run_id, EV_SDC, v->nblame ? v->blame[0] : -1, d);
        fprintf(stderr, "minitrain: error: silent data corruption after step %d: %s. Last check "
                "that agreed: step %d. Stopping the job (exit %d) so that it resumes from a "
                "checkpoint before it\n", step, v->text, D.last_good, MT_EXIT_SDC);
    }
    fflush(stdout);
    fflush(stderr);
    /* rank 0's event is in run.db before any rank exits (mpirun tears the job down at the
     * first exit) */
    comm_barrier(m->world);
    sched_exit_heartbeat(MT_EXIT_SDC);
    _exit(MT_EXIT_SDC); /* at once: no final hooks, no save of the corrupted parameters */
}

/* Rank 0 at start-up: the EV_SDC_OK record of the step just resumed under this layout, compared
 * with what was loaded. Returns 1 verified, 0 no record, -1 differs (text in why). */
static int verify_resumed(trainer *tr, uint64_t world_hash, char *why, size_t n) {
    char layout[96], want[24] = "";
    layout_text(tr->mesh, layout, sizeof(layout));
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(rundb_sqlite(tr->db), "SELECT json_extract(detail, '$.hash') FROM "
                           "events WHERE kind = '" EV_SDC_OK "' AND json_extract(detail, "
                           "'$.step') = ? AND json_extract(detail, '$.layout') = ? ORDER BY time "
                           "DESC, rowid DESC LIMIT 1", -1, &q, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_int(q, 1, tr->step);
    sqlite3_bind_text(q, 2, layout, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0))
        snprintf(want, sizeof(want), "%s", (const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    if (!want[0]) return 0;
    char got[24];
    snprintf(got, sizeof(got), "%016" PRIx64, world_hash);
    if (!strcmp(got, want)) return 1;
    snprintf(why, n, "the parameters resumed at step %d hash to %s, but the check of step %d "
             "agreed on %s", tr->step, got, tr->step, want);
    return -1;
}

static void log_ok(trainer *tr, int step, uint64_t world_hash, double ms, double hash_ms) {
    char hex[24], layout[96];
    snprintf(hex, sizeof(hex), "%016" PRIx64, world_hash);
    layout_text(tr->mesh, layout, sizeof(layout));
    cJSON *d = ev_detail();
    ev_num(d, EVK_STEP, step);
    ev_str(d, "hash", hex);
    ev_str(d, "layout", layout);
    ev_num(d, "ms", ms);
    ev_num(d, "hash_ms", hash_ms);
    ev_num(d, "step_ms", tr->last_step_s * 1e3);
    ev_log(tr->db, tr->run_id, EV_SDC_OK, 0, d);
}

/* One check after step `step` (every rank). startup: the first check of this process. */
static void check(trainer *tr, int step, int startup) {
    const mesh *m = tr->mesh;
    double t0 = timer_now(), hash_ms = 0;
    sdc_gather_hashes(tr, D.h, &hash_ms);
    sdc_verdict v;
    sdc_judge(D.h, m->world_size, m->tp, m->cp, m->pp, m->dp, m->ep, &v);
    double ms = (timer_now() - t0) * 1e3;
    if (v.mismatch) stop_job(tr, step, &v, ms);
    uint64_t wh = sdc_world_hash(D.h, m->world_size);
    if (m->rank == 0) {
        char why[300];
        int ver = startup && step > 0 ? verify_resumed(tr, wh, why, sizeof(why)) : 0;
        if (ver < 0) {
            fprintf(stderr, "minitrain: error: sdc: %s (the checkpoint does not hold what the "
                    "replicas agreed on)\n", why);
            fflush(stderr);
            comm_abort(MT_EXIT_ERROR, "sdc: resumed checkpoint failed its verification");
        }
        if (ver > 0)
            log_info("sdc: resumed step %d verified: its parameters hash to %016" PRIx64 ", as "
                     "the check of step %d agreed", step, wh, step);
        log_ok(tr, step, wh, ms, hash_ms);
    }
    D.last_good = step;
    if (startup) return;
    D.checks++;
    D.total_ms += ms;
    D.hash_ms += hash_ms;
    D.step_ms += tr->last_step_s * 1e3;
    if (D.checks == 1 && m->rank == 0)
        log_info("sdc: check after step %d: replicas agree (%016" PRIx64 "); cost %.2f ms (hash "
                 "%.2f ms) = %.3f%% of a %.1f ms step, %.4f%% of training at every %d steps", step,
                 wh, ms, hash_ms,
                 100 * ms / fmax(tr->last_step_s * 1e3, 1e-9), tr->last_step_s * 1e3,
                 100 * ms / fmax(D.every * tr->last_step_s * 1e3, 1e-9), D.every);
}

static void sdc_hook(trainer *tr, int step, int final, void *user) {
    (void)user;
    if (final) {
        /* the last step (hooks see it only as final): checked too, before the model is saved */
        if (D.last_good != step) check(tr, step, 0);
        if (tr->mesh->rank == 0 && D.checks > 0) {
            double per = D.total_ms / D.checks, step_ms = D.step_ms / D.checks;
            log_info("sdc: %d checks, none found a mismatch; %.2f ms each = %.3f%% of a %.1f ms "
                     "step, %.4f%% of training at every %d steps (hashing %.2f ms of it, the "
                     "all-gather the rest)", D.checks, per,
                     100 * per / fmax(step_ms, 1e-9), step_ms,
                     100 * per / fmax(D.every * step_ms, 1e-9), D.every,
                     D.hash_ms / D.checks);
        }
        return;
    }
    if (step % D.every == 0) check(tr, step, 0);
}

void sched_sdc_attach(trainer *tr) {
    if (tr->cfg.sdc_check_every <= 0) return;
    memset(&D, 0, sizeof(D));
    D.every = tr->cfg.sdc_check_every;
    D.last_good = -1;
    D.h = mallocCheck((size_t)tr->mesh->world_size * 2 * sizeof(uint64_t));
    const mesh *m = tr->mesh;
    if (m->rank == 0 && m->dp * m->cp == 1)
        mt_warn("sdc_check_every %d: this layout has no data-parallel replicas (dp x cp = 1), "
                "so the checks have nothing to compare", D.every);
    check(tr, tr->step, 1);
    trainer_add_hook(tr, "sdc", 1, sdc_hook, NULL);
}

/* ---- resume ------------------------------------------------------------------------------------ */

/* Rank 0: the step a resume after a mismatch must use: -2 (leave "auto"), -1 (none left: start
 * over), else the step. */
static int64_t plan_step(sqlite3 *db, int64_t *newest) {
    static const char *const Q =
        "SELECT MAX(c.step), (SELECT MAX(step) FROM checkpoints WHERE state = 'committed'), "
        "(SELECT COUNT(*) FROM events WHERE kind = '" EV_SDC "') FROM checkpoints c "
        "WHERE c.state = 'committed' AND NOT EXISTS (SELECT 1 FROM events e WHERE e.kind = '"
        EV_SDC "' AND c.time <= e.time AND c.step > json_extract(e.detail, '$.last_good') "
        "AND c.step <= json_extract(e.detail, '$.step'))";
    sqlite3_stmt *q = NULL;
    int64_t best = -2;
    *newest = -1;
    if (sqlite3_prepare_v2(db, Q, -1, &q, NULL) != SQLITE_OK) return -2;
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 2) > 0) {
        *newest = sqlite3_column_type(q, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, 1);
        int64_t ok = sqlite3_column_type(q, 0) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, 0);
        if (ok != *newest) best = ok;
    }
    sqlite3_finalize(q);
    return best;
}

void sched_sdc_resume_plan(trainer *tr) {
    if (strcmp(tr->cfg.resume, "auto") != 0) return;
    int64_t v[2] = {-2, -1}; /* the plan, the newest committed step */
    if (tr->mesh->rank == 0 && tr->db) v[0] = plan_step(rundb_sqlite(tr->db), &v[1]);
    comm_broadcast_bytes(tr->mesh->world, v, sizeof(v), 0);
    if (v[0] == -2) return;
    if (v[0] < 0) snprintf(tr->cfg.resume, sizeof(tr->cfg.resume), "no");
    else snprintf(tr->cfg.resume, sizeof(tr->cfg.resume), "%" PRId64, v[0]);
    if (tr->mesh->rank == 0)
        log_info("sdc: checkpoints after the last check that agreed are suspect (newest step "
                 "%" PRId64 "): resuming from %s", v[1],
                 v[0] < 0 ? "scratch (no older checkpoint is left)" : tr->cfg.resume);
}

/* ---- the supervisor's read -------------------------------------------------------------------- */

int sdc_last_verdict(sqlite3 *db, int *ranks, int max, int *n, int *step, char *text,
                     size_t len) {
    sqlite3_stmt *q = NULL;
    int rc = -1;
    *n = 0;
    if (sqlite3_prepare_v2(db, "SELECT detail FROM events WHERE kind = '" EV_SDC "' ORDER BY "
                           "time DESC, rowid DESC LIMIT 1", -1, &q, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0)) {
        cJSON *d = cJSON_Parse((const char *)sqlite3_column_text(q, 0));
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(d, "blame");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(d, EVK_STEP);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(d, "text");
        const cJSON *e;
        cJSON_ArrayForEach(e, b) if (cJSON_IsNumber(e) && *n < max) ranks[(*n)++] = e->valueint;
        *step = cJSON_IsNumber(s) ? s->valueint : -1;
        snprintf(text, len, "%s", cJSON_IsString(t) ? t->valuestring : "");
        rc = d ? 0 : -1;
        cJSON_Delete(d);
    }
    sqlite3_finalize(q);
    return rc;
}
