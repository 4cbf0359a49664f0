/*
 * sched/preempt.c — the checkpoint-now-and-stop hook (sched/preempt.h).
 */
#include "sched/preempt.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/events.h"
#include "core/log.h"
#include "parallel/comm.h"
#include "sched/heartbeat.h"
#include "sched/supervisor.h"

static char g_request[4300];           /* the supervisor's request file, when supervised */
static int g_attached;                 /* the hook is registered */
static volatile sig_atomic_t g_signal; /* SIGINT/SIGTERM received (unsupervised) */
static int g_acted;                    /* the hook stopped the run (once) */

static void on_signal(int sig) { g_signal = sig; }

/* The supervisor's request file, in the all-reduced "asked" value: above every signal number
 * (SIGHUP is 1, so 1 cannot mean "the file"); a signal that reached a rank wins the max only if
 * larger, and either way the job stops after the same step. */
#define ASKED_BY_FILE 1000

int sched_preempt_exit_code(int rc) {
    return rc == MT_EXIT_OK && g_acted && g_signal ? 128 + g_signal : rc;
}

void sched_preempt_hook(trainer *tr, int step, int final, void *user) {
    (void)user;
    if (final || !g_attached || g_acted) return;
    int rank = tr->mesh ? tr->mesh->rank : 0;
    struct stat sb;
    double asked; /* ASKED_BY_FILE = the supervisor's file (rank 0 looks), else the signal number */
    /* the supervisor's file (rank 0 looks), and a signal to this rank: SIGUSR1 reaches the ranks
     * themselves from `sbatch --signal=USR1@T` (no B:) and `scancel --signal=USR1` */
    asked = g_signal;
    if (g_request[0] && rank == 0 && stat(g_request, &sb) == 0 && asked == 0)
        asked = ASKED_BY_FILE;
    if (tr->mesh) comm_all_reduce_f64(tr->mesh->world, &asked, 1, COMM_MAX);
    if (asked == 0) return;
    g_acted = 1;
    tr->stop_requested = 1;
    const char *sig = (int)asked == SIGINT    ? "SIGINT"
                      : (int)asked == SIGTERM ? "SIGTERM"
                      : (int)asked == SIGUSR1 ? "SIGUSR1 (time limit or preemption)"
                      : (int)asked == SIGHUP  ? "SIGHUP"
                                              : "a signal";
    if ((int)asked == ASKED_BY_FILE)
        log_info("the supervisor asks for a checkpoint now (SIGUSR1: time limit or preemption): "
                 "saving step %d and stopping", step);
    else if (tr->cfg.ckpt_every != 0)
        log_info("%s received: saving a checkpoint of step %d and stopping (exit %d; send it "
                 "again to stop at once, losing the steps since the last checkpoint)", sig, step,
                 128 + (int)asked);
    else
        log_info("%s received: stopping after step %d without a checkpoint (ckpt_every = 0; "
                 "exit %d)", sig, step, 128 + (int)asked);
    if ((int)asked != ASKED_BY_FILE) g_signal = (sig_atomic_t)asked; /* a rank that only heard of it exits alike */
    if (rank == 0) {
        cJSON *d = ev_detail();
        ev_num(d, EVK_STEP, step);
        ev_log(tr->db, tr->run_id, EV_CHECKPOINT_NOW, 0, d);
    }
}

int sched_preempt_attach(trainer *tr) {
    const char *dir = getenv(HB_ENV_DIR);
    int supervised = dir && dir[0];
    if (supervised) snprintf(g_request, sizeof(g_request), "%s/%s", dir, SUP_STOP_REQUEST_FILE);
    /* SIGUSR1 always (its default action kills at once, with no checkpoint); SIGINT/SIGTERM only
     * unsupervised (the supervisor owns them) */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND | SA_RESTART; /* a second signal: default action, at once */
    sigemptyset(&sa.sa_mask);
    /* SIGHUP too: a closed terminal or a dropped ssh session ends an unsupervised run the same
     * way, and its default action would lose the steps since the last checkpoint */
    const int sigs[4] = {SIGUSR1, SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < (supervised ? 1 : 4); i++) { /* one ignored by our parent stays ignored */
        struct sigaction old;                      /* (a shell script's `cmd &` ignores SIGINT) */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaction(sigs[i], &sa, NULL);
    }
    g_attached = 1;
    trainer_add_hook(tr, "preempt", 1, sched_preempt_hook, NULL);
    return supervised;
}
