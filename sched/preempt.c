/*
 * sched/preempt.c — the checkpoint-now-and-stop hook (sched/preempt.h).
 */
#include "sched/preempt.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/events.h"
#include "core/log.h"
#include "parallel/comm.h"
#include "sched/heartbeat.h"
#include "sched/supervisor.h"

static char g_request[4300];

void sched_preempt_hook(trainer *tr, int step, int final, void *user) {
    (void)user;
    if (final || !g_request[0]) return;
    int rank = tr->mesh ? tr->mesh->rank : 0;
    struct stat sb;
    double asked = rank == 0 && stat(g_request, &sb) == 0; /* rank 0 looks, everyone agrees */
    if (tr->mesh) comm_all_reduce_f64(tr->mesh->world, &asked, 1, COMM_MAX);
    if (asked == 0) return;
    tr->stop_requested = 1;
    log_info("the supervisor asks for a checkpoint now (SIGUSR1: time limit or preemption): "
             "saving step %d and stopping", step);
    if (rank == 0) {
        cJSON *d = ev_detail();
        ev_num(d, EVK_STEP, step);
        ev_log(tr->db, tr->run_id, EV_CHECKPOINT_NOW, 0, d);
    }
}

int sched_preempt_attach(trainer *tr) {
    const char *dir = getenv(HB_ENV_DIR);
    if (!dir || !dir[0]) return 0;
    snprintf(g_request, sizeof(g_request), "%s/%s", dir, SUP_STOP_REQUEST_FILE);
    trainer_add_hook(tr, "preempt", 1, sched_preempt_hook, NULL);
    return 1;
}
