/*
 * sched/supervisor.c — the restart loop of `minitrain run` (cmd/run.c): launch, watch, tear down,
 * back off, relaunch.
 *
 * Shape: one single-threaded polling loop (every SUP_POLL_MS) per attempt. Each poll reaps the
 * launch process (waitpid WNOHANG: exit or signal = crash, exit 3 = non-finite loss, exit 4 = I/O
 * failure), reads the heartbeat files (sched/heartbeat.h: progress, stragglers, which rank to
 * blame, and each rank's pid: a rank whose process is gone is a failure at once, without waiting
 * for mpirun to notice), and fires the --fault-mtbf kill when it is due. Polling rather than
 * SIGCHLD keeps every decision in one place and bounds detection latency by the poll period.
 *
 * Process hygiene: the launch runs in its own process group (setpgid in both parent and child,
 * so there is no race), and the supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER): every
 * descendant that loses its parent (ranks of a dead mpirun) is re-parented to us, so a teardown
 * can signal the group AND every descendant found in /proc (sched/proctree.h), then reap until
 * none is left — no orphan rank keeps running into the next attempt. After a failure the ranks get SIGKILL at once
 * and a launcher above them (mpirun) its grace period to exit by itself. The other direction: the
 * launch gets PR_SET_PDEATHSIG and every rank watches the supervisor's record in the heartbeat
 * directory (sched/hooks.h), so a job never outlives a supervisor killed by SIGKILL. The run
 * directory's lock (core/runlock.h) is held for the whole job and inherited by the launch.
 *
 * Status: the supervisor owns the job's (supervisor_end: completed | gave_up | usage_error |
 * killed, with a reason) and ends the run rows its dead attempts left "running" (crashed | hung |
 * killed | failed) once their processes are gone. The first failure of a restart window is
 * relaunched at once; later ones back off exponentially.
 *
 * Placement and Slurm (docs/slurm.md): the hosts come from --hostfile or the Slurm allocation; with
 * --rankfile a failed rank's host is the rankfile's, and a host blamed --cordon-after times is
 * cordoned, drained in Slurm (sched/slurm.h) and the layout re-planned without it onto a spare
 * (sched/replan.h) before the relaunch. SIGUSR1 asks the ranks to checkpoint now and stop
 * (sched/preempt.h); the job is then requeued in Slurm.
 *
 * Time: decisions use the monotonic clock; run.db events carry unix time (rundb_now) so the ETTR
 * accounting can line them up with the trainer's events.
 */
#define _GNU_SOURCE
#include "sched/supervisor.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/rng.h"
#include "core/events.h"
#include "core/fs.h"
#include "core/rundb.h"
#include "core/runlock.h"
#include "core/timer.h"
#include "sched/ettr.h"
#include "sched/proctree.h"
#include "sched/replan.h"
#include "sched/slurm.h"

#define SUP_POLL_MS 20
#define SUP_MAX_ARGS 512

/* ---- pure helpers (tested in tests/test_sched.c) --------------------------------------------- */

double sup_backoff_s(double min_s, double max_s, int consecutive) {
    double b = min_s;
    for (int i = 1; i < consecutive && b < max_s; i++) b *= 2;
    return b < max_s ? b : max_s;
}

int sup_blame(const hb_record *r, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (best < 0 || r[i].step < r[best].step ||
            (r[i].step == r[best].step && r[i].time < r[best].time))
            best = i;
    return best < 0 ? -1 : r[best].rank;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double sup_median_busy(const hb_record *r, int n) {
    double v[HB_MAX_RANKS];
    int k = 0;
    for (int i = 0; i < n && k < HB_MAX_RANKS; i++)
        if (!strcmp(r[i].state, "run")) v[k++] = r[i].busy_ms;
    if (k == 0) return NAN;
    qsort(v, (size_t)k, sizeof(double), cmp_double);
    return v[(k - 1) / 2];
}

/* ---- the supervisor --------------------------------------------------------------------------- */

typedef struct {
    /* flags */
    int max_restarts;
    double window_s, hb_timeout_s, backoff_min, backoff_max, grace_s, fault_mtbf_s;
    double straggler_k;
    int straggler_w, evict_stragglers;
    uint64_t seed;
    const char *run_dir, *hostfile;
    int cordon_after;
    char **launch;
    int nlaunch;
    /* state */
    rundb *db;
    sup_hosts hosts;
    char hb_dir[4200], active_hostfile[4200];
    replan_rankfile rf;      /* --rankfile: the active placement (sched/replan.h) */
    int have_rf;
    char active_rankfile[4200], stop_path[4300];
    double fail_times[1024]; /* monotonic, of every failure */
    int nfail;
    rng_state rng;
    runlock lock;            /* RUN_DIR/.lock, held for the whole job */
    char sup_path[4300];     /* RUN_DIR/heartbeat/supervisor: what the ranks watch */
    unsigned long long start_ticks; /* this process's start time (/proc), in that record */
    double last_beat;        /* monotonic time of the last write of that record */
} sup;

static volatile sig_atomic_t g_stop = 0, g_ckpt_now = 0;
static void on_signal(int sig) { g_stop = sig; }
static void on_usr1(int sig) { (void)sig; g_ckpt_now = 1; }

static MT_PRINTF(1, 2) void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "minitrain run: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
}

/* Log a supervisor event (run_id 0; core/events.h) and free its detail d. */
static void event(sup *s, const char *kind, int rank, cJSON *d) { ev_log(s->db, 0, kind, rank, d); }

/* A detail {"attempt": attempt} to add to. */
static cJSON *attempt_detail(int attempt) {
    cJSON *d = ev_detail();
    ev_num(d, EVK_ATTEMPT, attempt);
    return d;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Rewrite the supervisor's own record about once a second (sched/heartbeat.h): ranks on another
 * host judge the supervisor alive by its age. */
static void beat(sup *s) {
    if (timer_now() - s->last_beat < 1.0) return;
    s->last_beat = timer_now();
    hb_sup_write(s->sup_path, (int)getpid(), s->start_ticks);
}

/* Sleep ms in short slices, keeping the supervisor's record fresh. */
static void nap(sup *s, int ms) {
    beat(s);
    sleep_ms(ms);
}

static double teardown(sup *s, pid_t child, int failed) {
    double t0 = timer_now();
    if (failed && proc_unreaped(child)) {
        /* nothing of a failed attempt is worth waiting for (checkpoints are committed
         * atomically; run.db is crash-safe): SIGKILL the ranks, then the launcher — mpirun takes
         * a second to exit by itself, and a SIGTERM reaching it while it aborts can crash it */
        int ranks = proc_kill_ranks(child);
        kill(-child, SIGKILL);
        while (!proc_reap_all() && timer_now() - t0 < s->grace_s) {
            proc_kill_ranks(child); /* one it started meanwhile */
            nap(s, 5);
        }
        if (ranks > 0) proc_remove_mpi_session(child);
    } else {
        proc_signal_all(child, proc_unreaped(child), SIGTERM);
    }
    while (!proc_reap_all() && timer_now() - t0 < s->grace_s) nap(s, 5);
    if (!proc_reap_all()) {
        proc_signal_all(child, proc_unreaped(child), SIGKILL);
        double t1 = timer_now();
        while (!proc_reap_all() && timer_now() - t1 < 10.0) nap(s, 5);
        if (!proc_reap_all()) say("warning: some processes of the job did not exit after SIGKILL");
    }
    return timer_now() - t0;
}

static double exp_sample(rng_state *r, double mean) {
    double u = (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return -mean * log(1.0 - u);
}

static void clear_heartbeats(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (!strncmp(de->d_name, "rank_", 5)) {
            char p[4500];
            snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
            unlink(p);
        }
    closedir(d);
}

static pid_t launch(sup *s, int attempt) {
    char *argv[SUP_MAX_ARGS + 8];
    int n = 0;
    for (int i = 0; i < s->nlaunch && n < SUP_MAX_ARGS; i++)
        argv[n++] = (s->hostfile && !strcmp(s->launch[i], "{hostfile}")) ? s->active_hostfile
                    : (s->have_rf && !strcmp(s->launch[i], "{rankfile}")) ? s->active_rankfile
                                                                          : s->launch[i];
    int has_run_dir = 0;
    for (int i = 0; i < s->nlaunch; i++)
        if (!strncmp(s->launch[i], "--run-dir", 9) || !strncmp(s->launch[i], "--run_dir", 9))
            has_run_dir = 1;
    if (!has_run_dir) {
        argv[n++] = "--run-dir";
        argv[n++] = (char *)s->run_dir;
    }
    /* a relaunch resumes; so does the first launch of a job Slurm requeued (USR1, node loss) */
    const char *requeued = getenv("SLURM_RESTART_COUNT");
    int resume = attempt > 1 || (requeued && atoi(requeued) > 0);
    if (resume) {
        argv[n++] = "--resume";
        argv[n++] = "auto";
    }
    argv[n] = NULL;
    clear_heartbeats(s->hb_dir);
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setpgid(0, 0);
        /* the job's lifetime follows ours: SIGKILL when the supervisor dies, however it dies
         * (the ranks below mpirun watch our record instead, sched_watch_supervisor) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127); /* it died before the prctl */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        /* the run lock travels down: the job holds it until its last process is gone */
        if (s->lock.fd >= 0) fcntl(s->lock.fd, F_SETFD, 0);
        setenv(RUNLOCK_ENV, s->lock.path, 1);
        setenv(HB_ENV_SUP, s->sup_path, 1);
        char a[32];
        snprintf(a, sizeof(a), "%d", attempt);
        setenv(HB_ENV_DIR, s->hb_dir, 1);
        setenv("MINITRAIN_ATTEMPT", a, 1);
        if (s->hostfile) setenv("MINITRAIN_HOSTFILE", s->active_hostfile, 1);
        if (s->have_rf) setenv("MINITRAIN_RANKFILE", s->active_rankfile, 1);
        execvp(argv[0], argv);
        fprintf(stderr, "minitrain: error: run: cannot execute '%s': %s\n", argv[0],
                strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    char cmd[1500] = "";
    for (int i = 0; i < n; i++) {
        size_t L = strlen(cmd);
        snprintf(cmd + L, sizeof(cmd) - L, "%s%s", i ? " " : "", argv[i]);
    }
    cJSON *d = attempt_detail(attempt);
    ev_num(d, EVK_PID, (double)pid);
    ev_bool(d, EVK_RESUME, resume);
    ev_strv(d, EVK_ARGV, argv, n); /* what execvp ran, word for word */
    event(s, EV_LAUNCH, -1, d);
    say("attempt %d: launched pid %d: %s", attempt, (int)pid, cmd);
    return pid;
}

/* Index of a rank (in r[0..n)) whose process is gone although its heartbeat does not say "done":
 * on this host (by the record's node id), not the launch process itself (its exit status is
 * better evidence, and waitpid gets it). -1 when every rank lives. */
static int dead_rank(const hb_record *r, int n, pid_t child) {
    for (int i = 0; i < n; i++) {
        if (r[i].pid <= 0 || r[i].pid == child || r[i].node != hb_node_id()) continue;
        if (!strcmp(r[i].state, "done")) continue;
        if (!hb_proc_alive(r[i].pid)) return i;
    }
    return -1;
}

/* The failure kind of a launch (or rank) exit status: nonfinite (3), io (4: a file could not be
 * written, e.g. disk full), else crash (any other status, or -1 = killed by a signal). */
static const char *failure_kind(int code) {
    return code == MT_EXIT_NONFINITE ? EV_FAILURE_NONFINITE
           : code == MT_EXIT_IO      ? EV_FAILURE_IO
                                     : EV_FAILURE_CRASH;
}

static const char *exit_meaning(int code) {
    return code == MT_EXIT_NONFINITE ? " (non-finite loss)"
           : code == MT_EXIT_IO      ? " (I/O error: disk full?)"
                                     : "";
}

typedef struct {
    const char *kind; /* crash | nonfinite | io | hang | straggler */
    int code, sig, rank, step;
    double failed_at; /* unix s, best estimate of when it broke */
    int trained;      /* some rank of the attempt had trained (a heartbeat in state "run") */
    char why[256];
} failure;

/* The supervisor's call-in to Slurm (sched/slurm.h): drain a cordoned host in Slurm too, with
 * the failure as the reason, and record it (event EV_SLURM_DRAIN) in run.db. */
static void slurm_cordon(sup *s, int host, const failure *f) {
    char why[300], err[512];
    int k = s->hosts.blamed[host];
    snprintf(why, sizeof(why), "%s of rank %d, %d failure%s blamed on the node (%s)", f->kind,
             f->rank, k, k == 1 ? "" : "s", f->why);
    int ok = slurm_drain(s->hosts.name[host], why, err, sizeof(err)) == 0;
    cJSON *d = ev_detail();
    ev_str(d, EVK_HOST, s->hosts.name[host]);
    ev_bool(d, EVK_OK, ok);
    ev_str(d, EVK_WHY, why);
    event(s, EV_SLURM_DRAIN, f->rank, d);
    if (ok) say("drained %s in Slurm (reason \"minitrain: %s\")", s->hosts.name[host], why);
    else mt_warn("run: could not drain %s in Slurm: %s", s->hosts.name[host], err);
}

/* SIGUSR1 arrived (sbatch --signal=B:USR1@S: time limit near, or preemption): ask the ranks to
 * checkpoint now and stop, by creating the request file they poll (sched/preempt.h). Once. */
static void ask_checkpoint_now(sup *s, int attempt) {
    g_ckpt_now = 2;
    int ok = fs_write_atomic(s->stop_path, "SIGUSR1\n", 8, NULL, 0) == 0;
    cJSON *d = attempt_detail(attempt);
    ev_bool(d, EVK_OK, ok);
    event(s, EV_CHECKPOINT_NOW, -1, d);
    say("attempt %d: SIGUSR1: asking the job to checkpoint now and stop%s", attempt,
        ok ? "" : " (cannot write the request file!)");
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
    event(s, EV_REPLAN, -1, d);
    say("re-planned tp %d x pp %d x dp %d without %s: ranks on %s, %d spare(s) left (%s)",
        s->rf.tp, s->rf.pp, s->rf.dp, s->hosts.name[host], hosts, s->rf.n_spares,
        s->active_rankfile);
    return 0;
}

/* Cordon host (blamed for s->cordon_after failures): leave it out of later launches, drain it in
 * Slurm inside an allocation, and re-plan a rankfile job without it. Returns 0, or -1 when the job
 * cannot go on (no slots left, no placement without it: reason filled, give_up logged). */
static int cordon(sup *s, int host, const failure *f, char *reason, size_t rlen) {
    s->hosts.cordoned[host] = 1;
    cJSON *d = ev_detail();
    ev_str(d, EVK_HOST, s->hosts.name[host]);
    ev_num(d, EVK_FAILURES, s->hosts.blamed[host]);
    ev_num(d, EVK_SLOTS_LEFT, sup_hosts_slots(&s->hosts));
    event(s, EV_CORDON, f->rank, d);
    say("cordoning host %s (blamed for %d failure%s); %d slots left", s->hosts.name[host],
        s->hosts.blamed[host], s->hosts.blamed[host] == 1 ? "" : "s", sup_hosts_slots(&s->hosts));
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
        event(s, EV_GIVE_UP, -1, d);
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
        say("%s; not in a Slurm job: resume with --resume auto", reason);
        return EV_SUP_STOPPED;
    }
    /* The event is written BEFORE the request: `scontrol requeue` makes Slurm end this job at
     * once (SIGTERM to the batch shell, then SIGKILL to what is left of it, us included), so a
     * line written after it may never be written. A failed request writes a second event. */
    char err[512];
    cJSON *d = attempt_detail(attempt);
    ev_bool(d, EVK_OK, 1);
    ev_str(d, EVK_REASON, "SIGUSR1");
    event(s, EV_REQUEUE, -1, d);
    int ok = slurm_requeue(err, sizeof(err)) == 0;
    if (!ok) {
        d = attempt_detail(attempt);
        ev_bool(d, EVK_OK, 0);
        ev_str(d, EVK_REASON, err);
        event(s, EV_REQUEUE, -1, d);
    }
    snprintf(reason, rlen, "checkpointed on SIGUSR1 and %s Slurm job %s", ok ? "requeued" :
             "could not requeue", getenv("SLURM_JOB_ID"));
    if (ok) say("%s", reason);
    else mt_warn("run: %s: %s", reason, err);
    return ok ? EV_SUP_REQUEUED : EV_SUP_STOPPED;
}

/* Watch one attempt until it ends. Returns 0 for a clean finish, 1 for a failure (f filled),
 * 2 for a usage error of the launch (exit 2: restarting cannot help), 3 for a clean stop after
 * SIGUSR1 asked for a checkpoint now, -1 interrupted. */
static int watch(sup *s, pid_t child, int attempt, double last_fail_unix, failure *f) {
    memset(f, 0, sizeof(*f));
    f->rank = -1;
    f->step = -1;
    double last_progress = timer_now(), last_progress_unix = rundb_now();
    double next_kill = s->fault_mtbf_s > 0 ? timer_now() + exp_sample(&s->rng, s->fault_mtbf_s)
                                           : INFINITY;
    static hb_record hb[HB_MAX_RANKS];
    static int seen_step[HB_MAX_RANKS], slow_count[HB_MAX_RANKS], reported[HB_MAX_RANKS];
    static char seen_state[HB_MAX_RANKS][16];
    for (int i = 0; i < HB_MAX_RANKS; i++) seen_step[i] = -1, slow_count[i] = reported[i] = 0;
    memset(seen_state, 0, sizeof(seen_state));
    int recovered = attempt == 1, killed_rank = -1;
    double killed_at = NAN;
    int n = 0;
    for (;;) {
        if (g_stop) return -1;
        if (g_ckpt_now == 1) ask_checkpoint_now(s, attempt);
        int st;
        pid_t p = waitpid(child, &st, WNOHANG);
        n = hb_scan(s->hb_dir, hb, HB_MAX_RANKS);
        if (p == child) {
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return g_ckpt_now ? 3 : 0;
            if (WIFEXITED(st) && WEXITSTATUS(st) == MT_EXIT_USAGE) return 2;
            f->kind = failure_kind(WIFEXITED(st) ? WEXITSTATUS(st) : -1);
            f->code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            f->sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
            f->failed_at = isfinite(killed_at) ? killed_at : rundb_now();
            f->rank = killed_rank >= 0 ? killed_rank : sup_blame(hb, n);
            if (f->sig)
                snprintf(f->why, sizeof(f->why), "launch process killed by signal %d (%s)", f->sig,
                         strsignal(f->sig));
            else
                snprintf(f->why, sizeof(f->why), "launch process exited with status %d%s", f->code,
                         exit_meaning(f->code));
            break;
        }
        /* a rank whose process is gone (SIGKILL, _exit) is a failure now: mpirun takes about a
         * second to notice, tear the other ranks down and exit */
        int dead = dead_rank(hb, n, child);
        if (dead >= 0) {
            int code = -1;
            if (sscanf(hb[dead].state, "exit:%d", &code) == 1 && code == MT_EXIT_USAGE) return 2;
            f->kind = failure_kind(code);
            f->code = code;
            f->rank = killed_rank >= 0 ? killed_rank : hb[dead].rank;
            f->failed_at = isfinite(killed_at) ? killed_at : rundb_now();
            if (code >= 0)
                snprintf(f->why, sizeof(f->why), "rank %d (pid %d) exited with status %d%s after "
                         "step %d", hb[dead].rank, hb[dead].pid, code, exit_meaning(code),
                         hb[dead].step);
            else
                snprintf(f->why, sizeof(f->why), "rank %d (pid %d) died (last heartbeat: step "
                         "%d, %s)", hb[dead].rank, hb[dead].pid, hb[dead].step, hb[dead].state);
            break;
        }
        /* progress: any rank's (step, state) changed */
        for (int i = 0; i < n; i++) {
            int r = hb[i].rank;
            if (r < 0 || r >= HB_MAX_RANKS) continue;
            if (!strcmp(hb[i].state, "run")) f->trained = 1;
            if (hb[i].step != seen_step[r] || strcmp(hb[i].state, seen_state[r]) != 0) {
                int advanced = seen_step[r] >= 0 && hb[i].step > seen_step[r];
                seen_step[r] = hb[i].step;
                snprintf(seen_state[r], sizeof(seen_state[r]), "%s", hb[i].state);
                last_progress = timer_now();
                last_progress_unix = hb[i].time;
                if (!recovered && !strcmp(hb[i].state, "run")) {
                    /* the step it resumed at is the record's start (by the time this poll
                     * looks it may be several steps further) */
                    recovered = 1;
                    cJSON *d = attempt_detail(attempt);
                    ev_num(d, EVK_STEP, hb[i].start);
                    ev_num(d, EVK_AT_STEP, hb[i].step);
                    ev_num(d, EVK_SECONDS, hb[i].time - last_fail_unix);
                    event(s, EV_RECOVERED, r, d);
                    say("attempt %d: training again from step %d (where it resumed), %.1f s "
                        "after the failure", attempt, hb[i].start, hb[i].time - last_fail_unix);
                }
                /* stragglers: busy time above k x the median for W consecutive steps */
                double med = sup_median_busy(hb, n);
                if (advanced && n >= 2 && !strcmp(hb[i].state, "run") && med > 0) {
                    slow_count[r] = hb[i].busy_ms > s->straggler_k * med ? slow_count[r] + 1 : 0;
                    if (slow_count[r] >= s->straggler_w && !reported[r]) {
                        reported[r] = 1;
                        cJSON *d = attempt_detail(attempt);
                        ev_num(d, EVK_STEP, hb[i].step);
                        ev_num(d, EVK_BUSY_MS, hb[i].busy_ms);
                        ev_num(d, EVK_MEDIAN_MS, med);
                        ev_num(d, EVK_RATIO, hb[i].busy_ms / med);
                        ev_num(d, EVK_STEPS, slow_count[r]);
                        event(s, EV_STRAGGLER, r, d);
                        say("attempt %d: rank %d is a straggler (%.1f ms busy per step vs median "
                            "%.1f ms for %d steps)%s", attempt, r, hb[i].busy_ms, med,
                            slow_count[r], s->evict_stragglers ? ": evicting" : "");
                        if (s->evict_stragglers) {
                            f->kind = EV_FAILURE_STRAGGLER;
                            f->rank = r;
                            f->step = hb[i].step;
                            f->failed_at = rundb_now();
                            snprintf(f->why, sizeof(f->why), "rank %d at %.1fx the median step "
                                     "time for %d steps", r, hb[i].busy_ms / med, slow_count[r]);
                            return 1;
                        }
                    }
                }
            }
        }
        if (timer_now() - last_progress > s->hb_timeout_s) {
            f->kind = EV_FAILURE_HANG;
            f->rank = sup_blame(hb, n);
            f->failed_at = n > 0 ? last_progress_unix : rundb_now() - s->hb_timeout_s;
            snprintf(f->why, sizeof(f->why), "no heartbeat progress for %.1f s%s", s->hb_timeout_s,
                     n == 0 ? " (no heartbeat file was ever written: is LAUNCH a minitrain train?)"
                            : "");
            break;
        }
        if (timer_now() >= next_kill) { /* --fault-mtbf: kill a random training rank */
            int live[HB_MAX_RANKS], nl = 0;
            for (int i = 0; i < n; i++)
                if (hb[i].pid > 0 && !strcmp(hb[i].state, "run") && kill(hb[i].pid, 0) == 0)
                    live[nl++] = i;
            if (nl == 0) {
                next_kill = timer_now() + 0.1; /* nobody training yet: as soon as one is */
            } else {
                int i = live[rng_u64(&s->rng) % (uint64_t)nl];
                killed_rank = hb[i].rank;
                killed_at = rundb_now();
                cJSON *d = attempt_detail(attempt);
                ev_num(d, EVK_PID, hb[i].pid);
                ev_num(d, EVK_STEP, hb[i].step);
                event(s, EV_MTBF_KILL, hb[i].rank, d);
                say("attempt %d: --fault-mtbf: killing rank %d (pid %d) at step %d", attempt,
                    hb[i].rank, hb[i].pid, hb[i].step);
                kill(hb[i].pid, SIGKILL);
                next_kill = INFINITY;
            }
        }
        nap(s, SUP_POLL_MS);
    }
    for (int i = 0; i < n; i++)
        if (hb[i].rank == f->rank) f->step = hb[i].step;
    return 1;
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

int sup_run(const sup_opts *o, char **launch_argv, int nlaunch) {
    sup s;
    memset(&s, 0, sizeof(s));
    s.max_restarts = o->max_restarts;
    s.window_s = o->window_s;
    s.hb_timeout_s = o->hb_timeout_s;
    s.backoff_min = o->backoff_min;
    s.backoff_max = o->backoff_max;
    s.grace_s = o->grace_s;
    s.fault_mtbf_s = o->fault_mtbf_s;
    s.straggler_k = o->straggler_k;
    s.straggler_w = o->straggler_w;
    s.evict_stragglers = o->evict_stragglers;
    s.seed = o->seed;
    s.run_dir = o->run_dir;
    s.hostfile = o->hostfile;
    s.cordon_after = o->cordon_after > 0 ? o->cordon_after : 2;
    s.launch = launch_argv;
    s.nlaunch = nlaunch;
    if (nlaunch < 1) mt_fail("run: no launch command (usage: minitrain run [options] -- LAUNCH...)");
    if (nlaunch > SUP_MAX_ARGS) mt_fail("run: launch command has more than %d words", SUP_MAX_ARGS);
    if (!s.run_dir) mt_fail("run: no run directory");
    char err[1024];
    setup_hosts(&s, o);
    /* one job per run directory (core/runlock.h): a second supervisor or trainer is refused */
    if (runlock_acquire(&s.lock, s.run_dir, "run", err, sizeof(err)) != 0) mt_fail("run: %s", err);
    s.db = rundb_open(s.run_dir, err, sizeof(err));
    if (!s.db) {
        runlock_release(&s.lock);
        mt_fail("run: %s", err);
    }
    snprintf(s.hb_dir, sizeof(s.hb_dir), "%s/heartbeat", s.run_dir);
    snprintf(s.active_hostfile, sizeof(s.active_hostfile), "%s/hostfile.active", s.run_dir);
    snprintf(s.sup_path, sizeof(s.sup_path), "%s/%s", s.hb_dir, HB_SUP_FILE);
    snprintf(s.stop_path, sizeof(s.stop_path), "%s/%s", s.hb_dir, SUP_STOP_REQUEST_FILE);
    mkdir(s.hb_dir, 0755);
    unlink(s.stop_path); /* a request of an earlier job (the one Slurm requeued) is answered */
    s.start_ticks = hb_proc_start((int)getpid());
    s.last_beat = -INFINITY;
    beat(&s);
    rng_seed(&s.rng, s.seed);
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
    ev_num(d, EVK_MAX_RESTARTS, s.max_restarts);
    ev_num(d, EVK_WINDOW_S, s.window_s);
    ev_num(d, EVK_HEARTBEAT_TIMEOUT_S, s.hb_timeout_s);
    double backoff[2] = {s.backoff_min, s.backoff_max};
    cJSON *range = cJSON_CreateDoubleArray(backoff, 2);
    mtCheck(range != NULL && cJSON_AddItemToObject(d, EVK_BACKOFF, range), "out of memory");
    ev_num(d, EVK_FAULT_MTBF_S, s.fault_mtbf_s);
    ev_num(d, EVK_PID, (double)getpid());
    event(&s, EV_SUPERVISOR_START, -1, d);
    int rc = MT_EXIT_ERROR;
    const char *status = EV_SUP_GAVE_UP;
    char reason[600] = "";
    double last_fail_unix = NAN;
    int in_a_row = 0; /* failures since an attempt last trained: a crash loop backs off */
    for (int attempt = 1;; attempt++) {
        if (s.hostfile && sup_hosts_write(&s.hosts, s.active_hostfile) != 0)
            mt_fail("run: cannot write %s: %s", s.active_hostfile, strerror(errno));
        pid_t child = launch(&s, attempt);
        if (child < 0) {
            snprintf(reason, sizeof(reason), "cannot fork: %s", strerror(errno));
            say("%s", reason);
            break;
        }
        failure f;
        int w = watch(&s, child, attempt, last_fail_unix, &f);
        if (w == 0) {
            teardown(&s, child, 0); /* stragglers of a clean exit, if any */
            rc = MT_EXIT_OK;
            status = EV_SUP_COMPLETED;
            say("attempt %d: job finished cleanly", attempt);
            break;
        }
        if (w < 0) {
            say("interrupted (signal %d): stopping the job", (int)g_stop);
            teardown(&s, child, 0);
            rundb_end_running(s.db, "killed", rundb_now());
            rc = 128 + (int)g_stop;
            status = EV_SUP_KILLED;
            snprintf(reason, sizeof(reason), "the supervisor got signal %d (%s)", (int)g_stop,
                     strsignal((int)g_stop));
            break;
        }
        if (w == 3) {
            teardown(&s, child, 0);
            rc = MT_EXIT_OK;
            status = stopped_on_usr1(&s, attempt, reason, sizeof(reason));
            break;
        }
        if (w == 2) {
            teardown(&s, child, 0);
            rundb_end_running(s.db, "failed", rundb_now());
            snprintf(reason, sizeof(reason), "the launch failed with a usage error (exit 2) on "
                     "attempt %d; restarting cannot fix that", attempt);
            fprintf(stderr, "minitrain: error: run: %s (see its message above)\n", reason);
            status = EV_SUP_USAGE_ERROR;
            break;
        }
        /* a failure */
        double t_det = rundb_now();
        last_fail_unix = f.failed_at;
        int host = s.have_rf    ? replan_host_of_rank(&s.rf, &s.hosts, f.rank)
                   : s.hostfile ? sup_host_of_rank(&s.hosts, f.rank)
                                : -1;
        d = ev_detail();
        ev_str(d, EVK_KIND, f.kind);
        ev_num(d, EVK_ATTEMPT, attempt);
        ev_num(d, EVK_EXIT_CODE, f.code);
        ev_num(d, EVK_SIGNAL, f.sig);
        ev_num(d, EVK_STEP, f.step);
        ev_num(d, EVK_FAILED_AT, f.failed_at);
        ev_num(d, EVK_DETECTED_AT, t_det);
        ev_str(d, EVK_HOST, host >= 0 ? s.hosts.name[host] : "");
        ev_str(d, EVK_WHY, f.why);
        event(&s, EV_FAILURE, f.rank, d);
        char blame[160] = "";
        if (f.rank >= 0)
            snprintf(blame, sizeof(blame), "; blamed on rank %d%s%s", f.rank,
                     host >= 0 ? " on host " : "", host >= 0 ? s.hosts.name[host] : "");
        say("attempt %d failed: %s — %s%s", attempt, f.kind, f.why, blame);
        double td = teardown(&s, child, 1);
        d = attempt_detail(attempt);
        ev_num(d, EVK_SECONDS, td);
        event(&s, EV_TEARDOWN, -1, d);
        /* every process of the attempt is gone: rows it left "running" get its real outcome */
        rundb_end_running(s.db, !strcmp(f.kind, EV_FAILURE_HANG) ? "hung"
                                : !strcmp(f.kind, EV_FAILURE_CRASH) ? "crashed"
                                : !strcmp(f.kind, EV_FAILURE_STRAGGLER) ? "killed" : "failed",
                          f.failed_at);
        double now = timer_now();
        if (s.nfail < (int)(sizeof(s.fail_times) / sizeof(s.fail_times[0])))
            s.fail_times[s.nfail++] = now;
        int in_window = 0;
        for (int k = 0; k < s.nfail; k++) in_window += now - s.fail_times[k] <= s.window_s;
        if (in_window > s.max_restarts) {
            snprintf(reason, sizeof(reason), "%d failure%s within %.0f s exceeds --max-restarts "
                     "%d (last: %s, %s)", in_window, in_window == 1 ? "" : "s", s.window_s,
                     s.max_restarts, f.kind, f.why);
            d = ev_detail();
            ev_num(d, EVK_FAILURES_IN_WINDOW, in_window);
            ev_num(d, EVK_MAX_RESTARTS, s.max_restarts);
            ev_str(d, EVK_REASON, reason);
            event(&s, EV_GIVE_UP, -1, d);
            fprintf(stderr, "minitrain: error: run: giving up: %s\n", reason);
            break;
        }
        if (host >= 0 && ++s.hosts.blamed[host] >= s.cordon_after && !s.hosts.cordoned[host] &&
            cordon(&s, host, &f, reason, sizeof(reason)) != 0)
            break;
        /* an attempt that trained relaunches at once (independent faults are the common case
         * and waiting buys nothing); failures in a row without training in between — a crash
         * loop: a bad node, a bad checkpoint — back off exponentially */
        in_a_row = f.trained ? 1 : in_a_row + 1;
        double b = in_a_row <= 1 ? 0 : sup_backoff_s(s.backoff_min, s.backoff_max, in_a_row - 1);
        if (b > 0)
            say("restarting in %.1f s (failure %d in a row without training; %d of at most %d in "
                "the window)", b, in_a_row, in_window, s.max_restarts);
        else
            say("restarting now (failure %d of at most %d in the window)", in_window,
                s.max_restarts);
        double t_b = timer_now();
        while (timer_now() - t_b < b && !g_stop) nap(&s, 20);
        d = attempt_detail(attempt);
        ev_num(d, EVK_SECONDS, timer_now() - t_b);
        event(&s, EV_BACKOFF, -1, d);
        if (g_ckpt_now) { /* USR1 while backing off: the last checkpoint is the one to resume */
            rc = MT_EXIT_OK;
            status = stopped_on_usr1(&s, attempt, reason, sizeof(reason));
            break;
        }
        if (g_stop) {
            rc = 128 + (int)g_stop;
            status = EV_SUP_KILLED;
            snprintf(reason, sizeof(reason), "the supervisor got signal %d (%s)", (int)g_stop,
                     strsignal((int)g_stop));
            break;
        }
    }
    d = ev_detail();
    ev_num(d, EVK_EXIT, rc);
    ev_str(d, EVK_STATUS, status);
    ev_str(d, EVK_REASON, reason);
    event(&s, EV_SUPERVISOR_END, -1, d);
    rundb_close(s.db);
    unlink(s.sup_path);
    replan_free(&s.rf);
    runlock_release(&s.lock);
    ettr_report er;
    if (ettr_compute_dir(s.run_dir, &er, err, sizeof(err)) == 0 && er.wall_s > 0) {
        char mttr[32] = "n/a";
        if (isfinite(er.mttr_s)) snprintf(mttr, sizeof(mttr), "%.2f s", er.mttr_s);
        say("%s: ETTR %.3f over %.1f s, %d failure%s, %d restart%s, MTTR %s (minitrain report "
            "--run %s)", status, er.ettr, er.wall_s, er.failures, er.failures == 1 ? "" : "s",
            er.restarts, er.restarts == 1 ? "" : "s", mttr, s.run_dir);
    }
    return rc;
}
