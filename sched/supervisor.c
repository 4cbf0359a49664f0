/*
 * sched/supervisor.c — the restart loop of `minitrain run` (cmd/run.c) and its policies: launch an
 * attempt, and when it fails decide — count it in the restart window, blame a host and cordon it,
 * back off, relaunch, or give up. Running one attempt (launch, heartbeat watch, teardown) is
 * sched/sup_attempt.c; what the two share is sched/supervisor_impl.h.
 *
 * Status: the supervisor owns the job's (supervisor_end: completed | gave_up | usage_error |
 * killed, with a reason) and ends the run rows its dead attempts left "running" (crashed | hung |
 * killed | failed) once their processes are gone. The first failure of a restart window is
 * relaunched at once; later ones back off exponentially. The run directory's lock
 * (core/runlock.h) is held for the whole job.
 *
 * Placement and Slurm (docs/slurm.md): the hosts come from --hostfile or the Slurm allocation; with
 * --rankfile a failed rank's host is the rankfile's, and a host blamed --cordon-after times is
 * cordoned, drained in Slurm (sched/slurm.h) and the layout re-planned without it onto a spare
 * (sched/replan.h) before the relaunch. SIGUSR1 asks the ranks to checkpoint now and stop
 * (sched/preempt.h); the job is then requeued in Slurm.
 *
 * Time: decisions use the monotonic clock; run.db events carry unix time (timer_unix, core/timer.h) so the ETTR
 * accounting can line them up with the trainer's events.
 */
#define _GNU_SOURCE
#include "sched/supervisor_impl.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/timer.h"
#include "report/ettr.h"
#include "sched/slurm.h"

/* ---- pure helpers (tested in tests/test_sched.c) --------------------------------------------- */

double sup_backoff_s(double min_s, double max_s, int consecutive) {
    double b = min_s;
    for (int i = 1; i < consecutive && b < max_s; i++) b *= 2;
    return b < max_s ? b : max_s;
}

/* ---- the supervisor --------------------------------------------------------------------------- */

volatile sig_atomic_t sup_stop_sig = 0, sup_ckpt_now = 0, sup_stop_count = 0;
static void on_signal(int sig) {
    sup_stop_sig = sig;
    sup_stop_count++;
}
static void on_usr1(int sig) { (void)sig; sup_ckpt_now = 1; }

void sup_say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "minitrain run: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
}

void sup_event(sup *s, const char *kind, int rank, cJSON *d) { ev_log(s->db, 0, kind, rank, d); }

cJSON *sup_attempt_detail(int attempt) {
    cJSON *d = ev_detail();
    ev_num(d, EVK_ATTEMPT, attempt);
    return d;
}

/* The supervisor's call-in to Slurm (sched/slurm.h): drain a cordoned host in Slurm too, with
 * the failure as the reason, and record it (event EV_SLURM_DRAIN) in run.db. */
static void slurm_cordon(sup *s, int host, const sup_failure *f) {
    char why[300], err[512];
    int k = s->hosts.blamed[host];
    snprintf(why, sizeof(why), "%s of rank %d, %d failure%s blamed on the node (%s)", f->kind,
             f->rank, k, k == 1 ? "" : "s", f->why);
    int ok = slurm_drain(s->hosts.name[host], why, err, sizeof(err)) == 0;
    cJSON *d = ev_detail();
    ev_str(d, EVK_HOST, s->hosts.name[host]);
    ev_bool(d, EVK_OK, ok);
    ev_str(d, EVK_WHY, why);
    sup_event(s, EV_SLURM_DRAIN, f->rank, d);
    if (ok) sup_say("drained %s in Slurm (reason \"minitrain: %s\")", s->hosts.name[host], why);
    else mt_warn("run: could not drain %s in Slurm: %s", s->hosts.name[host], err);
}

/* A host was cordoned and the job runs from a rankfile: place the same layout again on the hosts
 * left plus a spare (sched/replan.h) for the next launch. 0, or -1 with reason filled. */
static int replan(sup *s, int host, char *reason, size_t rlen) {
    char err[400];
    int spares = s->rf.n_spares > 0 ? s->rf.n_spares - 1 : 0;
    if (replan_write(&s->rf, &s->hosts, spares, s->active_rankfile, err, sizeof(err)) != 0) {
        snprintf(reason, rlen, "host %s is cordoned and the job cannot be placed without it: %s",
                 s->hosts.name[host], err);
        return -1;
    }
    char hosts[1024] = "";
    for (int r = 0; r < s->rf.world; r++) { /* the distinct hosts, in rank order */
        if (r > 0 && !strcmp(s->rf.host[r], s->rf.host[r - 1])) continue;
        size_t L = strlen(hosts);
        if (!strstr(hosts, s->rf.host[r]))
            snprintf(hosts + L, sizeof(hosts) - L, "%s%s", L ? "," : "", s->rf.host[r]);
    }
    cJSON *d = ev_detail();
    ev_str(d, EVK_HOST, s->hosts.name[host]);
    ev_str(d, EVK_HOSTS, hosts);
    ev_num(d, EVK_SPARES, s->rf.n_spares);
    ev_str(d, EVK_PATH, s->active_rankfile);
    sup_event(s, EV_REPLAN, -1, d);
    sup_say("re-planned tp %d x pp %d x dp %d without %s: ranks on %s, %d spare(s) left (%s)",
            s->rf.tp, s->rf.pp, s->rf.dp, s->hosts.name[host], hosts, s->rf.n_spares,
            s->active_rankfile);
    return 0;
}

/* Cordon host (blamed for s->cordon_after failures): leave it out of later launches, drain it in
 * Slurm inside an allocation, and re-plan a rankfile job without it. Returns 0, or -1 when the job
 * cannot go on (no slots left, no placement without it: reason filled, give_up logged). */
static int cordon(sup *s, int host, const sup_failure *f, char *reason, size_t rlen) {
    s->hosts.cordoned[host] = 1;
    cJSON *d = ev_detail();
    ev_str(d, EVK_HOST, s->hosts.name[host]);
    ev_num(d, EVK_FAILURES, s->hosts.blamed[host]);
    ev_num(d, EVK_SLOTS_LEFT, sup_hosts_slots(&s->hosts));
    sup_event(s, EV_CORDON, f->rank, d);
    sup_say("cordoning host %s (blamed for %d failure%s); %d slots left", s->hosts.name[host],
            s->hosts.blamed[host], s->hosts.blamed[host] == 1 ? "" : "s",
            sup_hosts_slots(&s->hosts));
    if (slurm_in_allocation()) slurm_cordon(s, host, f);
    int rc = 0;
    if (sup_hosts_slots(&s->hosts) == 0) {
        snprintf(reason, rlen, "every host in %s is cordoned", s->hostfile);
        rc = -1;
    } else if (s->have_rf) {
        rc = replan(s, host, reason, rlen);
    }
    if (rc != 0) {
        fprintf(stderr, "minitrain: error: run: giving up: %s\n", reason);
        d = ev_detail();
        ev_str(d, EVK_REASON, reason);
        sup_event(s, EV_GIVE_UP, -1, d);
    }
    return rc;
}

/* The job stopped after SIGUSR1 (its checkpoint is committed): inside a Slurm allocation requeue
 * it (`scontrol requeue`: the requeued job resumes from that checkpoint). Returns the job's status
 * (EV_SUP_REQUEUED or EV_SUP_STOPPED); reason says what happened. */
static const char *stopped_on_usr1(sup *s, int attempt, char *reason, size_t rlen) {
    unlink(s->stop_path);
    if (!slurm_in_allocation()) {
        snprintf(reason, rlen, "stopped on SIGUSR1 after a checkpoint (attempt %d)", attempt);
        sup_say("%s; not in a Slurm job: resume with --resume auto", reason);
        return EV_SUP_STOPPED;
    }
    /* The event is written BEFORE the request: `scontrol requeue` makes Slurm end this job at
     * once (SIGTERM to the batch shell, then SIGKILL to what is left of it, us included), so a
     * line written after it may never be written. A failed request writes a second event. */
    char err[512];
    cJSON *d = sup_attempt_detail(attempt);
    ev_bool(d, EVK_OK, 1);
    ev_str(d, EVK_REASON, "SIGUSR1");
    sup_event(s, EV_REQUEUE, -1, d);
    int ok = slurm_requeue(err, sizeof(err)) == 0;
    if (!ok) {
        d = sup_attempt_detail(attempt);
        ev_bool(d, EVK_OK, 0);
        ev_str(d, EVK_REASON, err);
        sup_event(s, EV_REQUEUE, -1, d);
    }
    snprintf(reason, rlen, "checkpointed on SIGUSR1 and %s Slurm job %s", ok ? "requeued" :
             "could not requeue", getenv("SLURM_JOB_ID"));
    if (ok) sup_say("%s", reason);
    else mt_warn("run: %s: %s", reason, err);
    return ok ? EV_SUP_REQUEUED : EV_SUP_STOPPED;
}

/* The job's hosts: --hostfile, else the Slurm allocation's (RUN_DIR/hostfile.slurm); with
 * --rankfile, its placement (RUN_DIR/rankfile.active). A bad file is a user error (exit 2). */
static void setup_hosts(sup *s, const sup_opts *o) {
    char err[1024];
    static char slurm_hostfile[4200]; /* sched/slurm.h: the hosts of the Slurm allocation */
    if (!s->hostfile && slurm_in_allocation()) {
        mkdir(s->run_dir, 0755);
        snprintf(slurm_hostfile, sizeof(slurm_hostfile), "%s/hostfile.slurm", s->run_dir);
        if (slurm_write_hostfile(slurm_hostfile, err, sizeof(err)) < 0) mt_fail("run: %s", err);
        s->hostfile = slurm_hostfile;
    }
    if (s->hostfile && sup_hosts_parse(s->hostfile, &s->hosts, err, sizeof(err)) != 0)
        mt_fail("run: %s", err);
    if (o->rankfile) { /* sched/replan.h: ranks -> hosts, and the re-plan after a cordon */
        if (!s->hostfile)
            mt_fail("run: --rankfile needs the job's hosts to re-plan on: run inside a Slurm "
                    "allocation or give --hostfile");
        if (replan_read(o->rankfile, &s->rf, err, sizeof(err)) != 0 ||
            replan_check_hosts(&s->rf, &s->hosts, err, sizeof(err)) != 0)
            mt_fail("run: %s", err);
        s->have_rf = 1;
        mkdir(s->run_dir, 0755);
        snprintf(s->active_rankfile, sizeof(s->active_rankfile), "%s/rankfile.active", s->run_dir);
        if (fs_copy_file(o->rankfile, s->active_rankfile, err, sizeof(err)) != 0)
            mt_fail("run: %s", err);
    }
}

void sup_opts_default(sup_opts *o) {
    memset(o, 0, sizeof(*o));
    o->max_restarts = 5;
    o->window_s = 3600;
    o->hb_timeout_s = 60;
    o->backoff_min = 1;
    o->backoff_max = 30;
    o->grace_s = 5;
    o->straggler_k = 2.0;
    o->straggler_w = 10;
    o->failslow_round_s = 10;
    o->failslow_rounds = 5;
    o->seed = 1;
    o->cordon_after = 2;
}

const char *sup_launch_run_dir(char **launch, int nlaunch) {
    for (int k = 0; k < nlaunch; k++) {
        const char *w = launch[k];
        if ((!strcmp(w, "--run-dir") || !strcmp(w, "--run_dir")) && k + 1 < nlaunch)
            return launch[k + 1];
        if (!strncmp(w, "--run-dir=", 10) || !strncmp(w, "--run_dir=", 10)) return w + 10;
    }
    return NULL;
}
/* The run directory already holds a job the supervisor saw complete: ETTR accounts every
 * supervisor of a run.db as one job, so this launch counts as a restart of it and lowers its ETTR.
 * Say so before anything is launched (a new job wants a new --run-dir). */
static void warn_finished_job(sup *s) {
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(rundb_sqlite(s->db), "SELECT json_extract(detail, '$." EVK_STATUS "') "
                           "FROM events WHERE run_id = 0 AND kind = '" EV_SUPERVISOR_END "' "
                           "ORDER BY time DESC LIMIT 1", -1, &q, NULL) != SQLITE_OK)
        return;
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_text(q, 0) &&
        !strcmp((const char *)sqlite3_column_text(q, 0), EV_SUP_COMPLETED))
        sup_say("note: %s holds a job that already completed; this launch is accounted as a "
                "restart of that job (its ETTR falls by the time this one takes). For a new job, "
                "give a new --run-dir", s->run_dir);
    sqlite3_finalize(q);
}


/* Set up the job: the settings, the hosts (setup_hosts), RUN_DIR's lock and run.db, the heartbeat
 * directory and the supervisor's record in it, the subreaper bit and the signal handlers; then
 * the supervisor_start event. A user error (no launch, no run directory, a bad hostfile, a run
 * directory another job holds) ends the process (mt_fail, exit 2). */
static void start(sup *s, const sup_opts *o, char **launch_argv, int nlaunch) {
    memset(s, 0, sizeof(*s));
    s->max_restarts = o->max_restarts;
    s->window_s = o->window_s;
    s->hb_timeout_s = o->hb_timeout_s;
    s->backoff_min = o->backoff_min;
    s->backoff_max = o->backoff_max;
    s->grace_s = o->grace_s;
    s->fault_mtbf_s = o->fault_mtbf_s;
    s->straggler_k = o->straggler_k;
    s->straggler_w = o->straggler_w;
    s->evict_stragglers = o->evict_stragglers;
    fsl_opts_default(&s->failslow);
    s->failslow.round_s = o->failslow_round_s;
    s->failslow.rounds = o->failslow_rounds;
    s->seed = o->seed;
    s->run_dir = o->run_dir;
    s->hostfile = o->hostfile;
    s->cordon_after = o->cordon_after > 0 ? o->cordon_after : 2;
    s->launch = launch_argv;
    s->nlaunch = nlaunch;
    if (nlaunch < 1) mt_fail("run: no launch command (usage: minitrain run [options] -- LAUNCH...)");
    if (nlaunch > SUP_MAX_ARGS) mt_fail("run: launch command has more than %d words", SUP_MAX_ARGS);
    if (!s->run_dir) mt_fail("run: no run directory");
    char err[1024];
    setup_hosts(s, o);
    /* one job per run directory (core/runlock.h): a second supervisor or trainer is refused */
    if (runlock_acquire(&s->lock, s->run_dir, "run", err, sizeof(err)) != 0)
        mt_fail("run: %s", err);
    s->db = rundb_open(s->run_dir, err, sizeof(err));
    if (!s->db) {
        runlock_release(&s->lock);
        mt_fail("run: %s", err);
    }
    warn_finished_job(s);
    if (o->db_url != NULL) {
        /* the trainers it launches leave the shipping to it (DB_ENV_SHIPPER is inherited) */
        setenv(DB_ENV_SHIPPER, "supervisor", 1);
        s->shipper = db_shipper_start(o->db_url, s->run_dir, err, sizeof(err));
        if (s->shipper == NULL)
            mt_warn("run: %s: the job's records stay in run.db only", err);
    }
    snprintf(s->hb_dir, sizeof(s->hb_dir), "%s/heartbeat", s->run_dir);
    snprintf(s->active_hostfile, sizeof(s->active_hostfile), "%s/hostfile.active", s->run_dir);
    snprintf(s->sup_path, sizeof(s->sup_path), "%s/%s", s->hb_dir, HB_SUP_FILE);
    snprintf(s->stop_path, sizeof(s->stop_path), "%s/%s", s->hb_dir, SUP_STOP_REQUEST_FILE);
    mkdir(s->hb_dir, 0755);
    unlink(s->stop_path); /* a request of an earlier job (the one Slurm requeued) is answered */
    s->start_ticks = hb_proc_start((int)getpid());
    s->last_beat = -INFINITY;
    sup_beat(s);
    rng_seed(&s->rng, s->seed);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);

    cJSON *d = ev_detail();
    ev_num(d, EVK_MAX_RESTARTS, s->max_restarts);
    ev_num(d, EVK_WINDOW_S, s->window_s);
    ev_num(d, EVK_HEARTBEAT_TIMEOUT_S, s->hb_timeout_s);
    double backoff[2] = {s->backoff_min, s->backoff_max};
    cJSON *range = cJSON_CreateDoubleArray(backoff, 2);
    mtCheck(range != NULL && cJSON_AddItemToObject(d, EVK_BACKOFF, range), "out of memory");
    ev_num(d, EVK_FAULT_MTBF_S, s->fault_mtbf_s);
    ev_num(d, EVK_PID, (double)getpid());
    sup_event(s, EV_SUPERVISOR_START, -1, d);
}

/* A failed attempt: the failure event and line (naming the blamed rank and its host), the
 * teardown (and its event), then the outcome of the run rows the attempt left "running". Returns
 * the blamed rank's host, -1 when unknown (no hostfile or rankfile, or no rank blamed). */
static int record_failure(sup *s, pid_t child, int attempt, const sup_failure *f) {
    double t_det = timer_unix();
    int host = s->have_rf    ? replan_host_of_rank(&s->rf, &s->hosts, f->rank)
               : s->hostfile ? sup_host_of_rank(&s->hosts, f->rank)
                             : -1;
    cJSON *d = ev_detail();
    ev_str(d, EVK_KIND, f->kind);
    ev_num(d, EVK_ATTEMPT, attempt);
    ev_num(d, EVK_EXIT_CODE, f->code);
    ev_num(d, EVK_SIGNAL, f->sig);
    ev_num(d, EVK_STEP, f->step);
    ev_num(d, EVK_FAILED_AT, f->failed_at);
    ev_num(d, EVK_DETECTED_AT, t_det);
    ev_str(d, EVK_HOST, host >= 0 ? s->hosts.name[host] : "");
    ev_str(d, EVK_WHY, f->why);
    sup_event(s, EV_FAILURE, f->rank, d);
    char blame[160] = "";
    if (f->rank >= 0)
        snprintf(blame, sizeof(blame), "; blamed on rank %d%s%s", f->rank,
                 host >= 0 ? " on host " : "", host >= 0 ? s->hosts.name[host] : "");
    sup_say("attempt %d failed: %s — %s%s", attempt, f->kind, f->why, blame);
    double td = sup_teardown(s, child, 1);
    d = sup_attempt_detail(attempt);
    ev_num(d, EVK_SECONDS, td);
    sup_event(s, EV_TEARDOWN, -1, d);
    /* every process of the attempt is gone: rows it left "running" get its real outcome */
    rundb_end_running(s->db, !strcmp(f->kind, EV_FAILURE_HANG) ? "hung"
                            : !strcmp(f->kind, EV_FAILURE_CRASH) ? "crashed"
                            : !strcmp(f->kind, EV_FAILURE_STRAGGLER) ||
                                      !strcmp(f->kind, EV_FAILURE_FAILSLOW) ? "killed" : "failed",
                      f->failed_at);
    return host;
}

/* The restart window: count this failure; more failures within window_s than max_restarts is
 * the end (reason filled, give_up logged, the line on stderr): -1. Else the failures in the
 * window, this one included. */
static int count_in_window(sup *s, const sup_failure *f, char *reason, size_t rlen) {
    double now = timer_now();
    if (s->nfail < (int)(sizeof(s->fail_times) / sizeof(s->fail_times[0])))
        s->fail_times[s->nfail++] = now;
    int in_window = 0;
    for (int k = 0; k < s->nfail; k++) in_window += now - s->fail_times[k] <= s->window_s;
    if (in_window > s->max_restarts) {
        snprintf(reason, rlen, "%d failure%s within %.0f s exceeds --max-restarts "
                 "%d (last: %s, %s)", in_window, in_window == 1 ? "" : "s", s->window_s,
                 s->max_restarts, f->kind, f->why);
        cJSON *d = ev_detail();
        ev_num(d, EVK_FAILURES_IN_WINDOW, in_window);
        ev_num(d, EVK_MAX_RESTARTS, s->max_restarts);
        ev_str(d, EVK_REASON, reason);
        sup_event(s, EV_GIVE_UP, -1, d);
        fprintf(stderr, "minitrain: error: run: giving up: %s\n", reason);
        return -1;
    }
    return in_window;
}

/* Wait before relaunching: not at all after an attempt that trained (in_a_row = 1), else the
 * exponential backoff of the crash loop (sup_backoff_s); cut short by a stop signal. The line
 * saying so, then the backoff event with the time waited. */
static void back_off(sup *s, int attempt, int in_a_row, int in_window) {
    double b = in_a_row <= 1 ? 0 : sup_backoff_s(s->backoff_min, s->backoff_max, in_a_row - 1);
    if (b > 0)
        sup_say("restarting in %.1f s (failure %d in a row without training; %d of at most "
                "%d in the window)", b, in_a_row, in_window, s->max_restarts);
    else
        sup_say("restarting now (failure %d of at most %d in the window)", in_window,
                s->max_restarts);
    double t_b = timer_now();
    while (timer_now() - t_b < b && !sup_stop_sig) sup_nap(s, 20);
    cJSON *d = sup_attempt_detail(attempt);
    ev_num(d, EVK_SECONDS, timer_now() - t_b);
    sup_event(s, EV_BACKOFF, -1, d);
}

/* The job is over: the supervisor_end event, run.db and the lock released, the supervisor's
 * record removed, and the ETTR summary line when the run has any. */
static void finish(sup *s, int rc, const char *status, const char *reason) {
    char err[1024];
    cJSON *d = ev_detail();
    ev_num(d, EVK_EXIT, rc);
    ev_str(d, EVK_STATUS, status);
    ev_str(d, EVK_REASON, reason);
    sup_event(s, EV_SUPERVISOR_END, -1, d);
    rundb_close(s->db);
    db_shipper_stop(s->shipper, 10.0); /* a last pass: the supervisor_end event too */
    s->shipper = NULL;
    unlink(s->sup_path);
    replan_free(&s->rf);
    runlock_release(&s->lock);
    ettr_report er;
    if (ettr_compute_dir(s->run_dir, &er, err, sizeof(err)) == 0 && er.wall_s > 0) {
        char mttr[32] = "n/a";
        if (isfinite(er.mttr_s)) snprintf(mttr, sizeof(mttr), "%.2f s", er.mttr_s);
        sup_say("%s: ETTR %.3f over %.1f s, %d failure%s, %d restart%s, MTTR %s (minitrain report "
                "--run %s)", status, er.ettr, er.wall_s, er.failures, er.failures == 1 ? "" : "s",
                er.restarts, er.restarts == 1 ? "" : "s", mttr, s->run_dir);
    }
}

int sup_run(const sup_opts *o, char **launch_argv, int nlaunch) {
    sup s;
    start(&s, o, launch_argv, nlaunch);
    int rc = MT_EXIT_ERROR;
    const char *status = EV_SUP_GAVE_UP;
    char reason[600] = "";
    double last_fail_unix = NAN;
    int in_a_row = 0; /* failures since an attempt last trained: a crash loop backs off */
    for (int attempt = 1;; attempt++) {
        if (s.hostfile && sup_hosts_write(&s.hosts, s.active_hostfile) != 0)
            mt_fail("run: cannot write %s: %s", s.active_hostfile, strerror(errno));
        pid_t child = sup_launch(&s, attempt);
        if (child < 0) {
            snprintf(reason, sizeof(reason), "cannot fork: %s", strerror(errno));
            sup_say("%s", reason);
            break;
        }
        sup_failure f;
        int w = sup_watch(&s, child, attempt, last_fail_unix, &f);
        if (w == 0) {
            sup_teardown(&s, child, 0); /* stragglers of a clean exit, if any */
            rc = MT_EXIT_OK;
            status = EV_SUP_COMPLETED;
            sup_say("attempt %d: job finished cleanly", attempt);
            break;
        }
        if (w < 0) {
            sup_say("interrupted (signal %d): stopping the job", (int)sup_stop_sig);
            sup_teardown(&s, child, 0);
            rundb_end_running(s.db, "killed", timer_unix());
            rc = 128 + (int)sup_stop_sig;
            status = EV_SUP_KILLED;
            snprintf(reason, sizeof(reason), "the supervisor got signal %d (%s)", (int)sup_stop_sig,
                     strsignal((int)sup_stop_sig));
            break;
        }
        if (w == 3) {
            sup_teardown(&s, child, 0);
            rc = MT_EXIT_OK;
            status = stopped_on_usr1(&s, attempt, reason, sizeof(reason));
            break;
        }
        if (w == 2) {
            sup_teardown(&s, child, 0);
            rundb_end_running(s.db, "failed", timer_unix());
            snprintf(reason, sizeof(reason), "the launch failed with a usage error (exit 2) on "
                     "attempt %d; restarting cannot fix that", attempt);
            fprintf(stderr, "minitrain: error: run: %s (see its message above)\n", reason);
            status = EV_SUP_USAGE_ERROR;
            break;
        }
        /* a failure */
        last_fail_unix = f.failed_at;
        int host = record_failure(&s, child, attempt, &f);
        int in_window = count_in_window(&s, &f, reason, sizeof(reason));
        if (in_window < 0) break;
        if (host >= 0 && ++s.hosts.blamed[host] >= s.cordon_after && !s.hosts.cordoned[host] &&
            cordon(&s, host, &f, reason, sizeof(reason)) != 0)
            break;
        /* an attempt that trained relaunches at once (independent faults are the common case
         * and waiting buys nothing); failures in a row without training in between — a crash
         * loop: a bad node, a bad checkpoint — back off exponentially */
        in_a_row = f.trained ? 1 : in_a_row + 1;
        back_off(&s, attempt, in_a_row, in_window);
        if (sup_ckpt_now) { /* USR1 while backing off: the last checkpoint is the one to resume */
            rc = MT_EXIT_OK;
            status = stopped_on_usr1(&s, attempt, reason, sizeof(reason));
            break;
        }
        if (sup_stop_sig) {
            rc = 128 + (int)sup_stop_sig;
            status = EV_SUP_KILLED;
            snprintf(reason, sizeof(reason), "the supervisor got signal %d (%s)", (int)sup_stop_sig,
                     strsignal((int)sup_stop_sig));
            break;
        }
    }
    finish(&s, rc, status, reason);
    return rc;
}
