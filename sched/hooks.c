/*
 * sched/hooks.c — fault injection and heartbeats as trainer hooks (sched/hooks.h).
 *
 * Shape: one static state per process (a process trains one model), filled by
 * sched_attach_trainer; the two hooks read it. Every fault is recorded in RUN_DIR/faults_fired
 * (fsynced) and logged as a "fault" event BEFORE it acts, because several of them end the process
 * on the spot (SIGKILL, exit) or never return (hang).
 */
#include "sched/hooks.h"

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
#include "core/events.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/comm.h"
#include "sched/fault.h"
#include "sched/heartbeat.h"
#include "sched/simulate.h"
#include "model/param_hash.h"
#include "train/checkpoint.h"
#include "ops/ops.h"

static struct {
    int attached;
    fault_spec f[FAULT_MAX];
    int fired[FAULT_MAX];
    int n;
    int rank;
    hb_writer hb;
    double hb_t_prev, hb_comm_prev;
    /* corrupt-ckpt / torn-ckpt: armed[i] = not fired when this process started (the same on
     * every rank); corrupted[i][k]: copy k of checkpoint_copies already damaged here; done[i]:
     * every rank has damaged every copy it reaches (agreed by all ranks) */
    int armed[FAULT_MAX], done[FAULT_MAX];
    int corrupted[FAULT_MAX][CHECKPOINT_MAX_COPIES];
    int active[FAULT_MAX];       /* slow: fired in THIS process (keeps acting) */
    int last_step;               /* of the last heartbeat */
    checkpointer *ck;            /* for corrupt-ckpt: wait for the step's commit (or NULL) */
} S;

static void sleep_s(double s) {
    if (!(s > 0)) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Log a "fault" event {kind, step, spec, tier, file} (core/events.h): spec NULL, tier < 0 and file
 * NULL are left out. */
static void log_fault(trainer *tr, fault_kind kind, int step, const char *spec, int tier,
                      const char *file) {
    cJSON *d = ev_detail();
    ev_str(d, EVK_KIND, fault_kind_name(kind));
    ev_num(d, EVK_STEP, step);
    if (spec) ev_str(d, EVK_SPEC, spec);
    if (tier >= 0) ev_num(d, EVK_TIER, tier);
    if (file) ev_str(d, EVK_FILE, file);
    ev_log(tr->db, tr->run_id, EV_FAULT, S.rank, d);
}

/* Record, log and announce fault i; returns after the record is durable. tier, file: the copy a
 * corrupt-ckpt fault damaged (else -1, NULL). */
static void mark_fired(trainer *tr, int i, int step, int tier, const char *file) {
    S.fired[i] = 1;
    if (fault_record_fired(tr->cfg.run_dir, &S.f[i], S.rank, step) != 0)
        mt_warn("fault '%s': cannot append to %s/%s; it may fire again after a restart",
                S.f[i].spec, tr->cfg.run_dir, FAULT_RECORD_FILE);
    log_fault(tr, S.f[i].kind, step, S.f[i].spec, tier, file);
    fprintf(stderr, "minitrain: rank %d: injecting fault '%s' at step %d\n", S.rank, S.f[i].spec,
            step);
    fflush(stderr);
    fflush(stdout);
}

/* Every parameter becomes NaN (x · NaN = NaN), on whatever device holds them — once a checkpoint's
 * snapshot taken in the background is complete. */
static void poison(trainer *tr) {
    trainer_before_update(tr);
    ops_scale(tr->model.params, tr->model.num_params, NAN);
}

/* The tensor a bitflip fault flips a bit of: tensor=NAME, else this rank's first 2-D weight that
 * is neither a MoE expert nor the last stage's tied copy of wte. -1 when there is none. */
static int bitflip_tensor(const trainer *tr, const fault_spec *f) {
    const gpt_model *m = &tr->model;
    if (f->tensor[0]) return gpt_tensor_index(m, f->tensor);
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].ndim == 2 && !m->tensors[i].expert && !m->tensors[i].pp_tied_copy)
            return i;
    return -1;
}

/* bitflip fault i after step `step`: flip bit f->bit of the middle element of its tensor in this
 * rank's parameters (once a checkpoint's background snapshot is complete). */
static void bitflip(trainer *tr, int i, int step) {
    fault_spec *f = &S.f[i];
    int t = bitflip_tensor(tr, f);
    if (t < 0) return; /* checked by sched_attach_trainer */
    const gpt_tensor *ten = &tr->model.tensors[t];
    size_t at = ten->offset + ten->numel / 2;
    mark_fired(tr, i, step, -1, NULL);
    trainer_before_update(tr);
    float *p = gpt_params_host(&tr->model);
    uint32_t u;
    memcpy(&u, &p[at], 4);
    float before = p[at];
    u ^= 1u << f->bit;
    memcpy(&p[at], &u, 4);
    gpt_params_upload(&tr->model);
    fprintf(stderr, "minitrain: rank %d: bitflip: %s[%zu] bit %d: %.9g -> %.9g\n", S.rank,
            ten->name, ten->numel / 2, f->bit, before, p[at]);
    fflush(stderr);
}

/* corrupt-ckpt / torn-ckpt fault i: damage the copies of its step that THIS process reaches
 * (checkpoint_copies: rank f->rank's own tier-0 copy and tiers 1 and 2, or the replica this rank
 * holds as its buddy) and that are committed by now; torn-ckpt damages the own tier-0 copy only,
 * so a verified replica or tier 1 still holds the step. Returns how many of those copies are not
 * committed yet. Rank f->rank writes the once-only record at its first damage; a buddy only logs
 * the copy it damaged. */
static int corrupt_local(trainer *tr, int i) {
    fault_spec *f = &S.f[i];
    int torn = f->kind == FAULT_TORN_CKPT, pending = 0, actor = S.rank == f->rank;
    checkpoint_copy c[CHECKPOINT_MAX_COPIES];
    int n = S.ck ? checkpoint_copies(S.ck, f->rank, f->step, c) : 0;
    for (int k = 0; k < n; k++) {
        if (S.corrupted[i][k] || (torn && (c[k].tier != 0 || c[k].replica))) continue;
        char man[CKPT_PATH_MAX + 16], which[CKPT_PATH_MAX + 64], msg[600];
        snprintf(man, sizeof(man), "%s/manifest.json", c[k].dir);
        struct stat st;
        if (stat(man, &st) != 0) {
            pending++;
            continue;
        }
        S.corrupted[i][k] = 1;
        if ((torn ? fault_tear_checkpoint : fault_corrupt_checkpoint)(c[k].dir, which,
                                                                      sizeof(which), msg,
                                                                      sizeof(msg)) != 0) {
            mt_warn("fault '%s': %s", f->spec, msg);
            continue;
        }
        if (actor && !S.fired[i]) mark_fired(tr, i, f->step, c[k].tier, which);
        else log_fault(tr, f->kind, f->step, NULL, c[k].tier, which);
        if (!actor)
            fprintf(stderr, "minitrain: rank %d: fault '%s': damaged the replica of rank %d's "
                    "step %d it holds (%s)\n", S.rank, f->spec, f->rank, f->step, which);
    }
    return pending;
}

/* One step boundary of an armed corrupt-ckpt / torn-ckpt fault i, from its step on, on EVERY
 * rank (collective while the fault is not done): each rank damages what it reaches, then all
 * ranks agree how many copies are still uncommitted. With none left the fault is done, and with
 * kill=1 rank f->rank is SIGKILLed only now — after its buddy has damaged the replica, so no
 * teardown can race a copy that is still intact. */
static void corrupt(trainer *tr, int i, int final) {
    fault_spec *f = &S.f[i];
    int torn = f->kind == FAULT_TORN_CKPT;
    double pending = corrupt_local(tr, i); /* copies not committed yet, summed over the ranks */
    if (tr->mesh && tr->mesh->world_size > 1)
        comm_all_reduce_f64(tr->mesh->world, &pending, 1, COMM_SUM);
    if (pending > 0) {
        if (final && S.rank == f->rank && !S.fired[i])
            mt_warn("fault '%s': checkpoint step %d was never committed%s (is it a multiple of "
                    "ckpt_every?); not fired", f->spec, f->step, torn ? " in tier 0" : "");
        return; /* a copy committed later is damaged at a later step boundary */
    }
    S.done[i] = 1;
    if (S.rank != f->rank) return;
    if (!S.fired[i]) {
        mt_warn("fault '%s': no %scopy of checkpoint step %d to damage (is it a multiple of "
                "ckpt_every%s?); not fired", f->spec, torn ? "tier-0 " : "", f->step,
                torn ? ", and is ckpt_tier0 on" : "");
        return;
    }
    if (f->then_kill) { /* every copy is damaged: now fail */
        fprintf(stderr, "minitrain: rank %d: fault '%s': every copy of step %d damaged; killing "
                "this rank\n", S.rank, f->spec, f->step);
        fflush(stderr);
        /* the moment of failure, for the ETTR accounting */
        log_fault(tr, FAULT_KILL, tr->step, f->spec, -1, NULL);
        kill(getpid(), SIGKILL);
    }
}

void sched_fault_hook(trainer *tr, int step, int final, void *user) {
    (void)user;
    for (int i = 0; i < S.n; i++) {
        fault_spec *f = &S.f[i];
        int ckpt_kind = f->kind == FAULT_CORRUPT_CKPT || f->kind == FAULT_TORN_CKPT;
        if (ckpt_kind) {
            /* every rank, before any rank test: the wait and corrupt() are collective, and
             * armed/done are the same on every rank */
            if (!S.armed[i] || S.done[i] || step < f->step) continue;
            if (step == f->step && S.ck) checkpoint_wait(S.ck, tr); /* the step's commit */
            corrupt(tr, i, final);
            continue;
        }
        if (!fault_applies(f, S.rank)) continue;
        if (f->kind == FAULT_SLOW) {
            /* fired in an earlier process: that "node" was replaced by the restart */
            if (step < f->step || (S.fired[i] && !S.active[i])) continue;
            if (!S.active[i]) {
                mark_fired(tr, i, step, -1, NULL);
                S.active[i] = 1;
            }
            sleep_s((f->factor - 1.0) * tr->last_step_s); /* acts for the rest of this process */
            continue;
        }
        if (S.fired[i] || f->at_resume) continue; /* at=resume: sched_resume_fault */
        switch (f->kind) {
        case FAULT_KILL:
            if (step != f->step) break;
            mark_fired(tr, i, step, -1, NULL);
            kill(getpid(), SIGKILL);
            break;
        case FAULT_HANG:
            if (step != f->step) break;
            mark_fired(tr, i, step, -1, NULL);
            for (;;) pause(); /* no more steps, no more heartbeats */
        case FAULT_EXIT:
            if (step != f->step) break;
            mark_fired(tr, i, step, -1, NULL);
            _exit(f->code); /* like a crash: no cleanup, no MPI_Finalize */
        case FAULT_BITFLIP:
            if (step != f->step || final) break;
            bitflip(tr, i, step);
            break;
        case FAULT_NAN:
            if (step != f->step - 1 || final) break;
            mark_fired(tr, i, step + 1, -1, NULL);
            poison(tr);
            break;
        default:
            break;
        }
    }
}

void sched_heartbeat_hook(trainer *tr, int step, int final, void *user) {
    (void)user;
    double now = timer_now(), comm = comm_seconds();
    double busy = (now - S.hb_t_prev) - (comm - S.hb_comm_prev);
    S.hb_t_prev = now;
    S.hb_comm_prev = comm;
    S.last_step = step;
    hb_write(&S.hb, step, tr->last_step_s * 1e3, busy * 1e3, final ? "done" : "run");
}

void sched_exit_heartbeat(int code) {
    if (!S.attached || code == 0) return;
    char state[16];
    snprintf(state, sizeof(state), "exit:%d", code & 255);
    hb_write(&S.hb, S.last_step, 0, 0, state);
}

/* ---- the supervisor watch ------------------------------------------------------------------- */

static char g_sup_path[4200];

static void *sup_watch_main(void *arg) {
    (void)arg;
    double unreadable_since = NAN;
    for (;;) {
        sleep_s(0.25);
        double now = timer_unix();
        int alive = hb_sup_alive(g_sup_path, HB_SUP_STALE_S, now);
        if (alive == 1) {
            unreadable_since = NAN;
            continue;
        }
        if (alive < 0) { /* no record (yet, or being replaced): only a long absence counts */
            if (isnan(unreadable_since)) unreadable_since = now;
            if (now - unreadable_since < HB_SUP_STALE_S) continue;
        }
        fprintf(stderr, "minitrain: rank %d: the supervisor of this job is gone (%s %s); "
                "stopping this rank\n", comm_world_rank(), g_sup_path,
                alive < 0 ? "unreadable" : "names a dead process");
        fflush(stderr);
        _exit(MT_EXIT_ERROR); /* the whole process, from any thread */
    }
    return NULL;
}

int sched_watch_supervisor(void) {
    const char *p = getenv(HB_ENV_SUP);
    if (!p || !p[0] || g_sup_path[0]) return 0;
    snprintf(g_sup_path, sizeof(g_sup_path), "%s", p);
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &at, sup_watch_main, NULL);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        mt_warn("cannot start the supervisor watch thread: %s", strerror(rc));
        g_sup_path[0] = '\0';
        return 0;
    }
    return 1;
}

int sched_attach_trainer(trainer *tr, checkpointer *ck, char *err, size_t errlen) {
    mtCheck(!S.attached, "sched_attach_trainer called twice in one process");
    memset(&S, 0, sizeof(S));
    S.ck = ck;
    S.rank = tr->mesh ? tr->mesh->rank : 0;
    int world = tr->mesh ? tr->mesh->world_size : 1;
    S.n = fault_parse_list(tr->cfg.fault, S.f, FAULT_MAX, err, errlen);
    if (S.n < 0 || fault_check_ranks(S.f, S.n, world, err, errlen) != 0) return -1;
    for (int i = 0; i < S.n; i++)
        if (S.f[i].kind == FAULT_BITFLIP && fault_applies(&S.f[i], S.rank) &&
            bitflip_tensor(tr, &S.f[i]) < 0) {
            mt_errf(err, errlen, "fault '%s': rank %d holds no %s%s%s", S.f[i].spec, S.rank,
                    S.f[i].tensor[0] ? "tensor '" : "2-D weight to flip a bit of",
                    S.f[i].tensor, S.f[i].tensor[0] ? "' (names as in `minitrain ckpt ls`)" : "");
            return -1;
        }
    int disarmed = fault_load_fired(tr->cfg.run_dir, S.f, S.n, S.fired);
    if (disarmed > 0)
        log_info("faults: %d of %d already fired in this run directory (%s/%s); not re-armed",
                 disarmed, S.n, tr->cfg.run_dir, FAULT_RECORD_FILE);
    for (int i = 0; i < S.n; i++) /* the copies a ckpt fault damages: checkpoint_copies */
        S.armed[i] = (S.f[i].kind == FAULT_CORRUPT_CKPT || S.f[i].kind == FAULT_TORN_CKPT) &&
                     !S.fired[i];
    if (hb_open(&S.hb, getenv(HB_ENV_DIR), S.rank, err, errlen) != 0) return -1;
    S.hb_t_prev = timer_now();
    S.hb_comm_prev = comm_seconds();
    hb_write(&S.hb, tr->step, 0, 0, "init");
    for (int i = 0; i < S.n; i++) /* a nan due at the first step of this process: poison now */
        if (S.f[i].kind == FAULT_NAN && !S.fired[i] && fault_applies(&S.f[i], S.rank) &&
            S.f[i].step == tr->step + 1) {
            mark_fired(tr, i, S.f[i].step, -1, NULL);
            poison(tr);
        }
    if (S.n > 0) trainer_add_hook(tr, "fault", 1, sched_fault_hook, NULL);
    trainer_add_hook(tr, "heartbeat", 1, sched_heartbeat_hook, NULL);
    S.attached = 1;
    return 0;
}

/* ---- ckpt_every = auto ------------------------------------------------------------------------ */

static struct {
    checkpointer *ck;
    int saves_seen, every;
    double stall_ms_seen, stall_s, step_s; /* smoothed measurements */
    double job_start;                      /* unix s: this job's first supervisor start or run */
    int failures;                          /* failures of the job before this process */
    double last_every, last_stall_s;       /* the previous process's last choice, if any */
} A;

/* The job's history in run.db (world rank 0): when it started and how often it failed. */
static void read_history(trainer *tr) {
    sqlite3 *db = rundb_sqlite(tr->db);
    sqlite3_stmt *st = NULL;
    A.job_start = NAN;
    A.failures = 0;
    /* the latest supervisor of this run directory, else the first trainer run */
    if (sqlite3_prepare_v2(db, "SELECT COALESCE((SELECT MAX(time) FROM events WHERE run_id = 0 AND"
                               " kind = 'supervisor_start'), (SELECT MIN(started_at) FROM runs))",
                           -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_type(st, 0) != SQLITE_NULL)
        A.job_start = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    st = NULL;
    if (isfinite(A.job_start) &&
        sqlite3_prepare_v2(db, "SELECT COUNT(*) FROM events WHERE run_id = 0 AND kind = 'failure'"
                               " AND time >= ?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_double(st, 1, A.job_start);
        if (sqlite3_step(st) == SQLITE_ROW) A.failures = sqlite3_column_int(st, 0);
    }
    sqlite3_finalize(st);
    st = NULL;
    /* a relaunch starts where the previous process's policy ended, not from scratch */
    if (sqlite3_prepare_v2(db, "SELECT detail FROM events WHERE kind = 'ckpt_interval' ORDER BY"
                               " time DESC, rowid DESC LIMIT 1", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0)) {
        cJSON *d = cJSON_Parse((const char *)sqlite3_column_text(st, 0));
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(d, EVK_EVERY);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(d, EVK_STALL_S);
        if (cJSON_IsNumber(e) && e->valuedouble >= 1) A.last_every = e->valuedouble;
        if (cJSON_IsNumber(c) && c->valuedouble > 0) A.last_stall_s = c->valuedouble;
        cJSON_Delete(d);
    }
    sqlite3_finalize(st);
}

/* The MTBF the interval is computed for, s: mtbf_s when given; else the job's observed wall time
 * per failure; before any failure, the wall time so far plus an hour (an optimistic guess that
 * the first failure corrects). */
static double auto_mtbf(const trainer *tr) {
    if (tr->cfg.mtbf_s > 0) return tr->cfg.mtbf_s;
    double wall = isfinite(A.job_start) ? timer_unix() - A.job_start : 0;
    if (wall < 0) wall = 0;
    return A.failures > 0 ? fmax(wall / A.failures, 1.0) : wall + 3600.0;
}

int sched_auto_every(double stall_s, double mtbf_s, double step_s) {
    double tau = sim_young_daly_interval(fmax(stall_s, 1e-6), mtbf_s);
    double n = step_s > 0 ? tau / step_s : 1;
    return !(n < 1e9) ? 1000000000 : n < 1 ? 1 : (int)lround(n);
}

void sched_ckpt_auto_hook(trainer *tr, int step, int final, void *user) {
    (void)user;
    if (final) return;
    if (tr->last_step_s > 0)
        A.step_s = A.step_s > 0 ? 0.8 * A.step_s + 0.2 * tr->last_step_s : tr->last_step_s;
    checkpoint_stats cs;
    checkpoint_get_stats(A.ck, &cs);
    if (cs.saves <= A.saves_seen) return; /* re-evaluate after each save: C was just measured */
    double c = (cs.total_stall_ms - A.stall_ms_seen) / 1e3 / (cs.saves - A.saves_seen);
    A.saves_seen = cs.saves;
    A.stall_ms_seen = cs.total_stall_ms;
    A.stall_s = A.stall_s > 0 ? 0.5 * A.stall_s + 0.5 * c : c;
    /* every rank must pick the same interval: the slowest stall and step, rank 0's MTBF */
    double v[3] = {A.stall_s, A.step_s, S.rank == 0 ? auto_mtbf(tr) : 0};
    if (tr->mesh) comm_all_reduce_f64(tr->mesh->world, v, 3, COMM_MAX);
    double tau = sim_young_daly_interval(fmax(v[0], 1e-6), v[2]); /* compute seconds */
    int every = sched_auto_every(v[0], v[2], v[1]);
    checkpoint_set_every(A.ck, every);
    if (every != A.every && S.rank == 0) {
        log_info("ckpt_every auto: every %d steps = %.1f s of compute (Young/Daly sqrt(2 x stall "
                 "%.1f ms x MTBF %.0f s%s), %.1f ms/step)", every, every * v[1], v[0] * 1e3, v[2],
                 tr->cfg.mtbf_s > 0 ? ", given" : A.failures ? ", observed" : ", none seen yet",
                 v[1] * 1e3);
        cJSON *d = ev_detail();
        ev_num(d, EVK_STEP, step);
        ev_num(d, EVK_EVERY, every);
        ev_num(d, EVK_STALL_S, v[0]);
        ev_num(d, EVK_MTBF_S, v[2]);
        ev_num(d, EVK_INTERVAL_S, tau);
        ev_num(d, EVK_STEP_S, v[1]);
        ev_log(tr->db, tr->run_id, EV_CKPT_INTERVAL, 0, d);
    }
    A.every = every;
}

void sched_ckpt_auto_attach(trainer *tr, checkpointer *ck) {
    memset(&A, 0, sizeof(A));
    A.ck = ck;
    A.every = CHECKPOINT_AUTO_FIRST;
    checkpoint_stats cs;
    checkpoint_get_stats(ck, &cs);
    A.saves_seen = cs.saves;
    A.stall_ms_seen = cs.total_stall_ms;
    if (S.rank == 0 || !tr->mesh) read_history(tr);
    double v[2] = {A.last_every, A.last_stall_s}; /* every rank starts from rank 0's history */
    if (tr->mesh) comm_all_reduce_f64(tr->mesh->world, v, 2, COMM_MAX);
    if (v[0] >= 1) {
        A.every = (int)v[0];
        A.stall_s = v[1];
        checkpoint_set_every(ck, A.every);
        if (S.rank == 0)
            log_info("ckpt_every auto: every %d steps, as the previous attempt chose", A.every);
    }
    trainer_add_hook(tr, "ckpt_auto", 1, sched_ckpt_auto_hook, NULL);
}

/* ---- kill@at=resume ------------------------------------------------------------------------- */

void sched_resume_fault(void *user, int step) {
    trainer *tr = user;
    fault_spec f[FAULT_MAX];
    int fired[FAULT_MAX] = {0};
    char err[512];
    int n = fault_parse_list(tr->cfg.fault, f, FAULT_MAX, err, sizeof(err));
    if (n <= 0) return; /* a bad list is reported by sched_attach_trainer */
    int rank = tr->mesh ? tr->mesh->rank : 0;
    fault_load_fired(tr->cfg.run_dir, f, n, fired);
    for (int i = 0; i < n; i++) {
        if (f[i].kind != FAULT_KILL || !f[i].at_resume || fired[i] || !fault_applies(&f[i], rank))
            continue;
        if (fault_record_fired(tr->cfg.run_dir, &f[i], rank, step) != 0)
            mt_warn("fault '%s': cannot append to %s/%s; it may fire again after a restart",
                    f[i].spec, tr->cfg.run_dir, FAULT_RECORD_FILE);
        cJSON *d = ev_detail();
        ev_str(d, EVK_KIND, fault_kind_name(FAULT_KILL));
        ev_num(d, EVK_STEP, step);
        ev_str(d, EVK_SPEC, f[i].spec);
        ev_log(tr->db, tr->run_id, EV_FAULT, rank, d);
        fprintf(stderr, "minitrain: rank %d: injecting fault '%s' while resuming step %d\n", rank,
                f[i].spec, step);
        fflush(stderr);
        kill(getpid(), SIGKILL);
    }
}
