/*
 * sched/preempt.h — "checkpoint now and stop": the ranks' side of the supervisor's SIGUSR1
 * (`sbatch --signal=B:USR1@S`: the time limit is near, or the job is being preempted).
 *
 * The supervisor (sched/supervisor.h) creates SUP_STOP_REQUEST_FILE in the heartbeat directory.
 * Every step, world rank 0 looks for it and one all-reduce (max) over the world tells every rank,
 * so all of them stop after the SAME step — a collective checkpoint needs that; ranks polling a
 * file on their own would see it at different steps. The hook then sets stop_requested: the
 * trainer leaves its loop cleanly, the checkpoint hook's end-of-run save writes that step, and
 * the process exits 0 with the run "stopped". Cost: one 8-byte all-reduce per step, only under
 * `minitrain run` (MINITRAIN_HEARTBEAT_DIR set).
 */
#ifndef MT_SCHED_PREEMPT_H
#define MT_SCHED_PREEMPT_H

#include "train/trainer.h"

/* Register the hook (every step) when supervised; register it after the checkpoint hook. Returns
 * 1 when registered, 0 when not supervised. */
int sched_preempt_attach(trainer *tr);

/* The hook itself (user = NULL), exposed for tests. */
void sched_preempt_hook(trainer *tr, int step, int final, void *user);

#endif /* MT_SCHED_PREEMPT_H */
