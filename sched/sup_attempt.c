/*
 * sched/sup_attempt.c — one attempt of the job under `minitrain run` (sched/supervisor.c holds
 * the restart loop around it): launch it, watch it, tear it down.
 *
 * Shape: one single-threaded polling loop (every SUP_POLL_MS) per attempt. Each poll reaps the
 * launch process (waitpid WNOHANG: exit or signal = crash, exit 3 = non-finite loss, exit 4 = I/O
 * failure), reads the heartbeat files (sched/heartbeat.h: progress, stragglers, which rank to
 * blame, and each rank's pid: a rank whose process is gone is a failure at once, without waiting
 * for mpirun to notice), and fires the --fault-mtbf kill when it is due. Polling rather than
 * SIGCHLD keeps every decision in one place and bounds detection latency by the poll period.
 * What the watch finds is a sup_failure (sched/supervisor_impl.h); what to do about it is the
 * loop's.
 *
 * Process hygiene: the launch runs in its own process group (setpgid in both parent and child,
 * so there is no race), and the supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER, set by
 * sup_run): every descendant that loses its parent (ranks of a dead mpirun) is re-parented to us,
 * so a teardown can signal the group AND every descendant found in /proc (sched/proctree.h), then
 * reap until none is left — no orphan rank keeps running into the next attempt. After a failure
 * the ranks get SIGKILL at once and a launcher above them (mpirun) its grace period to exit by
 * itself. The other direction: the launch gets PR_SET_PDEATHSIG and every rank watches the
 * supervisor's record in the heartbeat directory (sched/hooks.h), so a job never outlives a
 * supervisor killed by SIGKILL. The run directory's lock (core/runlock.h) is inherited by the
 * launch.
 *
 * Time: decisions use the monotonic clock; run.db events carry unix time (timer_unix, core/timer.h).
 */
#define _GNU_SOURCE
#include "sched/supervisor_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/stats.h"
#include "core/timer.h"
#include "sched/proctree.h"
#include "sched/stacks.h"

/* ---- pure helpers (tested in tests/test_sched.c) --------------------------------------------- */

int sup_blame(const hb_record *r, int n) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (best < 0 || r[i].step < r[best].step ||
            (r[i].step == r[best].step && r[i].time < r[best].time))
            best = i;
    return best < 0 ? -1 : r[best].rank;
}

double sup_median_busy(const hb_record *r, int n) {
    double v[HB_MAX_RANKS];
    int k = 0;
    for (int i = 0; i < n && k < HB_MAX_RANKS; i++)
        if (!strcmp(r[i].state, "run")) v[k++] = r[i].busy_ms;
    if (k == 0) return NAN;
    stats_sort(v, (size_t)k);
    return stats_percentile_sorted(v, (size_t)k, 0.5); /* the lower median, v[(k - 1) / 2] */
}

/* ---- one attempt ---------------------------------------------------------------------------- */

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Rewrite the supervisor's own record about once a second (sched/heartbeat.h): ranks on another
 * host judge the supervisor alive by its age. */
void sup_beat(sup *s) {
    if (timer_now() - s->last_beat < 1.0) return;
    s->last_beat = timer_now();
    hb_sup_write(s->sup_path, (int)getpid(), s->start_ticks);
}

/* Sleep ms in short slices, keeping the supervisor's record fresh. */
void sup_nap(sup *s, int ms) {
    sup_beat(s);
    sleep_ms(ms);
}

double sup_teardown(sup *s, pid_t child, int failed) {
    double t0 = timer_now();
    if (failed && proc_unreaped(child)) {
        /* nothing of a failed attempt is worth waiting for (checkpoints are committed
         * atomically; run.db is crash-safe): SIGKILL the ranks, then the launcher — mpirun takes
         * a second to exit by itself, and a SIGTERM reaching it while it aborts can crash it */
        int ranks = proc_kill_ranks(child);
        kill(-child, SIGKILL);
        while (!proc_reap_all() && timer_now() - t0 < s->grace_s) {
            proc_kill_ranks(child); /* one it started meanwhile */
            sup_nap(s, 5);
        }
        if (ranks > 0) proc_remove_mpi_session(child);
    } else {
        proc_signal_all(child, proc_unreaped(child), SIGTERM);
    }
    while (!proc_reap_all() && timer_now() - t0 < s->grace_s) sup_nap(s, 5);
    if (!proc_reap_all()) {
        proc_signal_all(child, proc_unreaped(child), SIGKILL);
        double t1 = timer_now();
        while (!proc_reap_all() && timer_now() - t1 < 10.0) sup_nap(s, 5);
        if (!proc_reap_all())
            sup_say("warning: some processes of the job did not exit after SIGKILL");
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

pid_t sup_launch(sup *s, int attempt) {
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
    cJSON *d = sup_attempt_detail(attempt);
    ev_num(d, EVK_PID, (double)pid);
    ev_bool(d, EVK_RESUME, resume);
    ev_strv(d, EVK_ARGV, argv, n); /* what execvp ran, word for word */
    sup_event(s, EV_LAUNCH, -1, d);
    sup_say("attempt %d: launched pid %d: %s", attempt, (int)pid, cmd);
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
 * written, e.g. disk full), sdc (5: the silent-corruption check, sched/sdc.h), else crash (any other status, or -1 = killed by a signal). */
static const char *failure_kind(int code) {
    return code == MT_EXIT_NONFINITE ? EV_FAILURE_NONFINITE
           : code == MT_EXIT_IO      ? EV_FAILURE_IO
           : code == MT_EXIT_SDC     ? EV_FAILURE_SDC
                                     : EV_FAILURE_CRASH;
}

static const char *exit_meaning(int code) {
    return code == MT_EXIT_NONFINITE ? " (non-finite loss)"
           : code == MT_EXIT_IO      ? " (I/O error: disk full?)"
           : code == MT_EXIT_SDC     ? " (silent data corruption: replicas' parameters differ)"
                                     : "";
}

/* SIGUSR1 arrived (sbatch --signal=B:USR1@S: time limit near, or preemption): ask the ranks to
 * checkpoint now and stop, by creating the request file they poll (sched/preempt.h). Once. */
static void ask_checkpoint_now(sup *s, int attempt) {
    sup_ckpt_now = 2;
    int ok = fs_write_atomic(s->stop_path, "SIGUSR1\n", 8, NULL, 0) == 0;
    cJSON *d = sup_attempt_detail(attempt);
    ev_bool(d, EVK_OK, ok);
    sup_event(s, EV_CHECKPOINT_NOW, -1, d);
    sup_say("attempt %d: SIGUSR1: asking the job to checkpoint now and stop%s", attempt,
            ok ? "" : " (cannot write the request file!)");
}

/* What the watch of one attempt remembers between polls. Per rank: the last (step, state) seen
 * (a change is progress) and the straggler state machine — slow_count consecutive advanced steps
 * with busy time above straggler_k x the median; at straggler_w it is reported, once. */
typedef struct {
    hb_record hb[HB_MAX_RANKS]; /* this poll's heartbeats, n of them */
    int n;
    int seen_step[HB_MAX_RANKS], slow_count[HB_MAX_RANKS], reported[HB_MAX_RANKS];
    char seen_state[HB_MAX_RANKS][16];
    int recovered;                          /* a rank of this attempt trains (attempt 1: yes) */
    double last_progress, last_progress_unix; /* monotonic and unix time of the last change */
    int killed_rank;                        /* --fault-mtbf's victim, or -1 */
    double killed_at;                       /* unix s of that kill, or NAN */
    double next_kill;                       /* monotonic time of the next kill, or INFINITY */
    int fsl_on;                             /* the fail-slow rounds run (once a rank trains) */
    fsl_state fsl;                          /* their state (sched/failslow.h) */
} watch_state;

/* The launch process exited with wait status st: 0 (clean; 3 when SIGUSR1 asked for the stop,
 * to the supervisor or to the ranks),
 * 2 (usage error, exit 2), or 1 with f filled (the kind from the exit code, the rank blamed). */
static int launch_exited(const watch_state *w, int st, sup_failure *f) {
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return sup_ckpt_now ? 3 : 0;
    /* the ranks got SIGUSR1 themselves (`sbatch --signal=USR1@T` without B:) and stopped after a
     * checkpoint (sched/preempt.h): the same stop as the supervisor's own SIGUSR1 */
    if (WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGUSR1) return 3;
    if (WIFEXITED(st) && WEXITSTATUS(st) == MT_EXIT_USAGE) return 2;
    f->kind = failure_kind(WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    f->code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    f->sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    f->failed_at = isfinite(w->killed_at) ? w->killed_at : timer_unix();
    f->rank = w->killed_rank >= 0 ? w->killed_rank : sup_blame(w->hb, w->n);
    if (f->sig)
        snprintf(f->why, sizeof(f->why), "launch process killed by signal %d (%s)", f->sig,
                 strsignal(f->sig));
    else
        snprintf(f->why, sizeof(f->why), "launch process exited with status %d%s", f->code,
                 exit_meaning(f->code));
    return 1;
}

/* The process of rank record *r is gone: 2 when its last record says it exited with a usage
 * error, else 1 with f filled (the kind from its exit code when the record has one). */
static int rank_died(const watch_state *w, const hb_record *r, sup_failure *f) {
    int code = -1;
    if (sscanf(r->state, "exit:%d", &code) == 1 && code == MT_EXIT_USAGE) return 2;
    f->kind = failure_kind(code);
    f->code = code;
    f->rank = w->killed_rank >= 0 ? w->killed_rank : r->rank;
    f->failed_at = isfinite(w->killed_at) ? w->killed_at : timer_unix();
    if (code >= 0)
        snprintf(f->why, sizeof(f->why), "rank %d (pid %d) exited with status %d%s after "
                 "step %d", r->rank, r->pid, code, exit_meaning(code), r->step);
    else
        snprintf(f->why, sizeof(f->why), "rank %d (pid %d) died (last heartbeat: step "
                 "%d, %s)", r->rank, r->pid, r->step, r->state);
    return 1;
}

/* Record i of this poll changed: progress. Logs "recovered" for the first training record of a
 * relaunch and runs rank r's straggler state machine. Returns 1 when the rank is a straggler to
 * evict (f filled), else 0. */
static int on_progress(sup *s, watch_state *w, int i, int attempt, double last_fail_unix,
                       sup_failure *f) {
    const hb_record *hb = w->hb;
    int n = w->n, r = hb[i].rank;
    int advanced = w->seen_step[r] >= 0 && hb[i].step > w->seen_step[r];
    w->seen_step[r] = hb[i].step;
    snprintf(w->seen_state[r], sizeof(w->seen_state[r]), "%s", hb[i].state);
    w->last_progress = timer_now();
    w->last_progress_unix = hb[i].time;
    if (!w->recovered && !strcmp(hb[i].state, "run")) {
        /* the step it resumed at is the record's start (by the time this poll
         * looks it may be several steps further) */
        w->recovered = 1;
        cJSON *d = sup_attempt_detail(attempt);
        ev_num(d, EVK_STEP, hb[i].start);
        ev_num(d, EVK_AT_STEP, hb[i].step);
        ev_num(d, EVK_SECONDS, hb[i].time - last_fail_unix);
        sup_event(s, EV_RECOVERED, r, d);
        sup_say("attempt %d: training again from step %d (where it resumed), %.1f s "
                "after the failure", attempt, hb[i].start, hb[i].time - last_fail_unix);
    }
    if (advanced && w->fsl_on && !strcmp(hb[i].state, "run")) fsl_sample(&w->fsl, r, hb[i].busy_ms);
    /* stragglers: busy time above k x the median for W consecutive steps */
    double med = sup_median_busy(hb, n);
    if (!(advanced && n >= 2 && !strcmp(hb[i].state, "run") && med > 0)) return 0;
    w->slow_count[r] = hb[i].busy_ms > s->straggler_k * med ? w->slow_count[r] + 1 : 0;
    if (w->slow_count[r] < s->straggler_w || w->reported[r]) return 0;
    w->reported[r] = 1;
    cJSON *d = sup_attempt_detail(attempt);
    ev_num(d, EVK_STEP, hb[i].step);
    ev_num(d, EVK_BUSY_MS, hb[i].busy_ms);
    ev_num(d, EVK_MEDIAN_MS, med);
    ev_num(d, EVK_RATIO, hb[i].busy_ms / med);
    ev_num(d, EVK_STEPS, w->slow_count[r]);
    sup_event(s, EV_STRAGGLER, r, d);
    sup_say("attempt %d: rank %d is a straggler (%.1f ms busy per step vs median %.1f ms for %d "
            "steps)%s", attempt, r, hb[i].busy_ms, med, w->slow_count[r],
            s->evict_stragglers ? ": evicting" : "");
    if (!s->evict_stragglers) return 0;
    f->kind = EV_FAILURE_STRAGGLER;
    f->rank = r;
    f->step = hb[i].step;
    f->failed_at = timer_unix();
    snprintf(f->why, sizeof(f->why), "rank %d at %.1fx the median step time for %d steps", r,
             hb[i].busy_ms / med, w->slow_count[r]);
    return 1;
}

/* --fault-mtbf: kill a random training rank (SIGKILL) and log it; with nobody training yet, try
 * again at the next poll after 0.1 s. One kill per attempt. */
static void mtbf_kill(sup *s, watch_state *w, int attempt) {
    const hb_record *hb = w->hb;
    int live[HB_MAX_RANKS], nl = 0;
    for (int i = 0; i < w->n; i++)
        if (hb[i].pid > 0 && !strcmp(hb[i].state, "run") && kill(hb[i].pid, 0) == 0)
            live[nl++] = i;
    if (nl == 0) {
        w->next_kill = timer_now() + 0.1; /* nobody training yet: as soon as one is */
        return;
    }
    int i = live[rng_u64(&s->rng) % (uint64_t)nl];
    w->killed_rank = hb[i].rank;
    w->killed_at = timer_unix();
    cJSON *d = sup_attempt_detail(attempt);
    ev_num(d, EVK_PID, hb[i].pid);
    ev_num(d, EVK_STEP, hb[i].step);
    sup_event(s, EV_MTBF_KILL, hb[i].rank, d);
    sup_say("attempt %d: --fault-mtbf: killing rank %d (pid %d) at step %d", attempt,
            hb[i].rank, hb[i].pid, hb[i].step);
    kill(hb[i].pid, SIGKILL);
    w->next_kill = INFINITY;
}

/* Start the fail-slow rounds once the job trains: its layout from run.db (the trainer has
 * written its config row by then), or data parallel over the ranks seen. */
static void failslow_start(sup *s, watch_state *w) {
    stk_layout L = {1, 1, 1, w->n, 1};
    stk_layout_of_db(rundb_sqlite(s->db), &L);
    int world = L.tp * L.cp * L.pp * L.dp;
    if (world != w->n) L = (stk_layout){1, 1, 1, w->n, 1}, world = w->n;
    fsl_init(&w->fsl, &s->failslow, &L, world, timer_now());
    w->fsl_on = 1;
}

/* A round ended (fsl_tick returned 2): the verdict as an EV_FAILSLOW event and a line, with the
 * hosts of the blamed group (from the rankfile; this host otherwise). Returns 1 when it is
 * evicted (--evict-stragglers; f filled), else 0. */
static int failslow_verdict(sup *s, watch_state *w, int attempt, const fsl_round *r,
                            const fsl_verdict *v, sup_failure *f) {
    char hosts[512] = "", local[64] = "this host";
    int machines = 0;
    gethostname(local, sizeof(local));
    local[sizeof(local) - 1] = 0;
    cJSON *hl = cJSON_CreateArray();
    for (int k = 0; k < v->nblame; k++) {
        int rk = v->blame[k];
        const char *h = s->have_rf && rk < s->rf.world ? s->rf.host[rk] : local;
        int seen = 0;
        for (int j = 0; j < k; j++)
            seen |= !strcmp(h, s->have_rf && v->blame[j] < s->rf.world ? s->rf.host[v->blame[j]]
                                                                       : local);
        if (seen) continue;
        size_t o = strlen(hosts);
        snprintf(hosts + o, sizeof(hosts) - o, "%s%s", o ? "," : "", h);
        cJSON_AddItemToArray(hl, cJSON_CreateString(h));
        machines++;
    }
    int evict = s->evict_stragglers;
    cJSON *d = sup_attempt_detail(attempt);
    ev_str(d, "text", v->text);
    ev_str(d, "blame_kind", v->kind);
    cJSON *bl = cJSON_CreateArray();
    for (int k = 0; k < v->nblame; k++) cJSON_AddItemToArray(bl, cJSON_CreateNumber(v->blame[k]));
    cJSON_AddItemToObject(d, "blame", bl);
    cJSON_AddItemToObject(d, "hosts", hl);
    ev_num(d, "machines", machines);
    ev_num(d, "flagged_rounds", v->flagged_rounds);
    ev_num(d, "window", v->window);
    ev_num(d, EVK_RATIO, v->ratio);
    ev_num(d, "round_s", s->failslow.round_s);
    ev_bool(d, "evicted", evict);
    sup_event(s, EV_FAILSLOW, r->slowest, d);
    sup_say("attempt %d: fail-slow: %s. Blamed: %s on %s — %d machine%s evicted%s", attempt,
            v->text, !strcmp(v->kind, "rank") ? "the rank" : v->kind, hosts, machines,
            machines == 1 ? "" : "s", evict ? "" : " (not: no --evict-stragglers)");
    (void)w;
    if (!evict) return 0;
    f->kind = EV_FAILURE_FAILSLOW;
    f->rank = r->slowest;
    f->failed_at = timer_unix();
    snprintf(f->why, sizeof(f->why), "fail-slow: %.200s", v->text);
    return 1;
}

/* The job stopped making progress: capture every local rank's stack, group them and name the
 * outliers (sched/stacks.h), log the verdict (EV_STACKS), and blame the first outlier instead of
 * the heartbeat's guess — the rank that is elsewhere, not the one that logged last. With a
 * rankfile the outliers' group is named by host. */
static void localise_hang(sup *s, int attempt, sup_failure *f) {
    static stk_stack st[STK_MAX_RANKS];
    double t0 = timer_now();
    int n = stk_capture_heartbeats(s->hb_dir, timer_unix(), st, STK_MAX_RANKS);
    if (n <= 0) return;
    for (int i = 0; s->have_rf && i < n; i++)
        if (st[i].rank >= 0 && st[i].rank < s->rf.world)
            snprintf(st[i].host, sizeof(st[i].host), "%s", s->rf.host[st[i].rank]);
    stk_layout L = {0, 0, 0, 0, 0};
    stk_layout_of_db(rundb_sqlite(s->db), &L);
    stk_verdict v;
    int rc = stk_verdict_of(st, n, &L, &v);
    cJSON *d = stk_verdict_json(st, n, &v, timer_now() - t0);
    cJSON_AddStringToObject(d, "source", "supervisor");
    ev_num(d, EVK_ATTEMPT, attempt);
    sup_event(s, EV_STACKS, v.noutliers ? v.outliers[0] : -1, d);
    sup_say("attempt %d: stacks: %s", attempt, v.text);
    if (rc == 0 && v.noutliers > 0) {
        f->rank = v.outliers[0];
        size_t o = strlen(f->why);
        char where[160];
        for (int i = 0; i < n; i++)
            if (st[i].rank == f->rank && st[i].ok) {
                stk_describe(&st[i], 2, where, sizeof(where));
                snprintf(f->why + o, sizeof(f->why) - o, "; rank %d in %s", f->rank, where);
            }
    }
}

int sup_watch(sup *s, pid_t child, int attempt, double last_fail_unix, sup_failure *f) {
    memset(f, 0, sizeof(*f));
    f->rank = -1;
    f->step = -1;
    static watch_state w; /* static: HB_MAX_RANKS heartbeat records are too big for the stack */
    w.last_progress = timer_now(), w.last_progress_unix = timer_unix();
    w.next_kill = s->fault_mtbf_s > 0 ? timer_now() + exp_sample(&s->rng, s->fault_mtbf_s)
                                      : INFINITY;
    for (int i = 0; i < HB_MAX_RANKS; i++) w.seen_step[i] = -1, w.slow_count[i] = w.reported[i] = 0;
    memset(w.seen_state, 0, sizeof(w.seen_state));
    w.recovered = attempt == 1, w.killed_rank = -1;
    w.fsl_on = 0;
    w.killed_at = NAN;
    w.n = 0;
    double stop_asked = NAN; /* when a SIGINT/SIGTERM was forwarded as the checkpoint request */
    for (;;) {
        if (sup_stop_sig && isnan(stop_asked)) { /* `train` promises a checkpoint for the same
                                                    signal: take the agreed-step path */
            stop_asked = timer_now();
            int ok = fs_write_atomic(s->stop_path, "STOP\n", 5, NULL, 0) == 0;
            sup_say("attempt %d: %s: asking the job to checkpoint now and stop (send it again to "
                    "stop at once)%s", attempt, strsignal((int)sup_stop_sig),
                    ok ? "" : " (cannot write the request file: stopping now)");
            if (!ok) return -1;
        }
        if (!isnan(stop_asked) && (sup_stop_count > 1 || timer_now() - stop_asked > s->hb_timeout_s))
            return -1; /* a second signal, or the job did not stop within a heartbeat timeout */
        if (sup_ckpt_now == 1) ask_checkpoint_now(s, attempt);
        int st;
        pid_t p = waitpid(child, &st, WNOHANG);
        w.n = hb_scan(s->hb_dir, w.hb, HB_MAX_RANKS);
        if (p == child) {
            if (!isnan(stop_asked)) return -1; /* stopped (after its checkpoint) as asked */
            int rc = launch_exited(&w, st, f);
            if (rc != 1) return rc;
            break;
        }
        /* a rank whose process is gone (SIGKILL, _exit) is a failure now: mpirun takes about a
         * second to notice, tear the other ranks down and exit */
        int dead = dead_rank(w.hb, w.n, child);
        if (dead >= 0) {
            int rc = rank_died(&w, &w.hb[dead], f);
            if (rc != 1) return rc;
            break;
        }
        /* progress: any rank's (step, state) changed */
        for (int i = 0; i < w.n; i++) {
            int r = w.hb[i].rank;
            if (r < 0 || r >= HB_MAX_RANKS) continue;
            if (!strcmp(w.hb[i].state, "run")) f->trained = 1;
            if (f->trained && !w.fsl_on && s->failslow.rounds > 0) failslow_start(s, &w);
            if ((w.hb[i].step != w.seen_step[r] || strcmp(w.hb[i].state, w.seen_state[r]) != 0) &&
                on_progress(s, &w, i, attempt, last_fail_unix, f))
                return 1;
        }
        if (timer_now() - w.last_progress > s->hb_timeout_s) {
            f->kind = EV_FAILURE_HANG;
            f->rank = sup_blame(w.hb, w.n);
            f->failed_at = w.n > 0 ? w.last_progress_unix : timer_unix() - s->hb_timeout_s;
            snprintf(f->why, sizeof(f->why), "no heartbeat progress for %.1f s%s", s->hb_timeout_s,
                     w.n == 0 ? " (no heartbeat file was ever written: is LAUNCH a minitrain "
                                "train?)"
                              : "");
            localise_hang(s, attempt, f);
            break;
        }
        if (w.fsl_on) {
            static fsl_round fr;
            static fsl_verdict fv;
            if (fsl_tick(&w.fsl, timer_now(), &fr, &fv) == 2 &&
                failslow_verdict(s, &w, attempt, &fr, &fv, f)) {
                for (int i = 0; i < w.n; i++)
                    if (w.hb[i].rank == f->rank) f->step = w.hb[i].step;
                return 1;
            }
        }
        if (timer_now() >= w.next_kill) mtbf_kill(s, &w, attempt);
        sup_nap(s, SUP_POLL_MS);
    }
    for (int i = 0; i < w.n; i++)
        if (w.hb[i].rank == f->rank) f->step = w.hb[i].step;
    return 1;
}
