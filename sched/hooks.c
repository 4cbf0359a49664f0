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
#include "ckpt/tiers.h"

static struct {
    int attached;
    fault_spec f[FAULT_MAX];
    int fired[FAULT_MAX];
    int n;
    int rank;
    hb_writer hb;
    double hb_t_prev, hb_comm_prev;
    char roots[3][4200]; /* checkpoint tier roots to corrupt (tiers 0 and 1; "" = off) */
    int corrupted[FAULT_MAX][3]; /* corrupt-ckpt: tiers already damaged */
    int active[FAULT_MAX];       /* slow: fired in THIS process (keeps acting) */
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

static void poison(trainer *tr) {
    for (size_t k = 0; k < tr->model.num_params; k++) tr->model.params[k] = NAN;
}

/* corrupt-ckpt: damage every copy of the step that is committed by now, tier by tier (the tiers
 * commit at different moments; a copy committed later is damaged at a later step boundary).
 * The once-only record is written at the first damage. */
static void corrupt(trainer *tr, int i, int final) {
    int step = S.f[i].step, pending = 0;
    for (int t = 0; t < 3; t++) {
        if (!S.roots[t][0] || S.corrupted[i][t]) continue;
        char dir[4300], man[4400], which[4300], msg[600];
        snprintf(dir, sizeof(dir), "%s/step_%08d", S.roots[t], step);
        snprintf(man, sizeof(man), "%s/manifest.json", dir);
        struct stat st;
        if (stat(man, &st) != 0) {
            pending++;
            continue;
        }
        S.corrupted[i][t] = 1;
        if (fault_corrupt_checkpoint(dir, which, sizeof(which), msg, sizeof(msg)) != 0) {
            mt_warn("fault '%s': %s", S.f[i].spec, msg);
            continue;
        }
        if (!S.fired[i]) mark_fired(tr, i, step, t, which);
        else log_fault(tr, FAULT_CORRUPT_CKPT, step, NULL, t, which);
    }
    if (final && pending && !S.fired[i])
        mt_warn("fault '%s': checkpoint step %d was never committed (is it a multiple of "
                "ckpt_every?); not fired", S.f[i].spec, step);
    if (!pending) {
        S.corrupted[i][0] = S.corrupted[i][1] = S.corrupted[i][2] = 1;
        if (S.f[i].then_kill && S.fired[i]) { /* every copy is damaged: now fail */
            fprintf(stderr, "minitrain: rank %d: fault '%s': every copy of step %d damaged; "
                    "killing this rank\n", S.rank, S.f[i].spec, step);
            fflush(stderr);
            /* the moment of failure, for the ETTR accounting */
            log_fault(tr, FAULT_KILL, tr->step, S.f[i].spec, -1, NULL);
            kill(getpid(), SIGKILL);
        }
    }
}

void sched_fault_hook(trainer *tr, int step, int final, void *user) {
    (void)user;
    for (int i = 0; i < S.n; i++) {
        fault_spec *f = &S.f[i];
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
        if (f->kind == FAULT_CORRUPT_CKPT) {
            int all = S.corrupted[i][0] && S.corrupted[i][1] && S.corrupted[i][2];
            if (step >= f->step && !all && (!S.fired[i] || S.corrupted[i][0] ||
                                            S.corrupted[i][1] || S.corrupted[i][2]))
                corrupt(tr, i, final);
            continue;
        }
        if (S.fired[i]) continue;
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
    hb_write(&S.hb, step, tr->last_step_s * 1e3, busy * 1e3, final ? "done" : "run");
}

int sched_attach_trainer(trainer *tr, char *err, size_t errlen) {
    mtCheck(!S.attached, "sched_attach_trainer called twice in one process");
    memset(&S, 0, sizeof(S));
    S.rank = tr->mesh ? tr->mesh->rank : 0;
    int world = tr->mesh ? tr->mesh->world_size : 1;
    S.n = fault_parse_list(tr->cfg.fault, S.f, FAULT_MAX, err, errlen);
    if (S.n < 0 || fault_check_ranks(S.f, S.n, world, err, errlen) != 0) return -1;
    int disarmed = fault_load_fired(tr->cfg.run_dir, S.f, S.n, S.fired);
    if (disarmed > 0)
        log_info("faults: %d of %d already fired in this run directory (%s/%s); not re-armed",
                 disarmed, S.n, tr->cfg.run_dir, FAULT_RECORD_FILE);
    /* checkpoint tiers a corrupt-ckpt fault damages: every copy, so resume must fall back */
    snprintf(S.roots[1], sizeof(S.roots[1]), "%s/ckpt", tr->cfg.run_dir);
    if (tr->cfg.ckpt_tier0 &&
        ckpt_tier0_root(S.roots[0], sizeof(S.roots[0]), tr->cfg.run_dir, tr->cfg.name) != 0)
        S.roots[0][0] = '\0';
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
