/*
 * sched/preempt.h — "checkpoint now and stop": the ranks' side of the supervisor's SIGUSR1
 * (`sbatch --signal=B:USR1@S`: the time limit is near, or the job is being preempted), and of a
 * SIGINT / SIGTERM / SIGHUP sent to an unsupervised `minitrain train` (Ctrl-C, `kill PID`, a
 * closed terminal).
 *
 * Supervised: the supervisor (sched/supervisor.h) creates SUP_STOP_REQUEST_FILE in the heartbeat
 * directory; every step world rank 0 looks for it. Unsupervised: a SIGINT or SIGTERM handler
 * sets a flag (nothing else: a handler may do little), which the hook reads at the next step
 * boundary. SIGUSR1 sent to the ranks themselves (`sbatch --signal=USR1@T` without B:, `scancel
 * --signal=USR1`), supervised or not, takes the same path: its default action would kill the rank
 * at once with no checkpoint; SA_RESETHAND makes a second signal act at once (default action, no checkpoint). A
 * signal that was ignored when the process started (SIGINT of a script's `cmd &`) stays ignored.
 * Either way one all-reduce (max) over the world tells every rank, so all of them stop after the
 * SAME step — a collective checkpoint needs that; ranks polling on their own would see it at
 * different steps. The hook then sets stop_requested: the trainer leaves its loop cleanly, the
 * checkpoint hook's end-of-run save writes that step. A supervised process exits 0 with the run
 * "stopped"; a signalled one exits 128 + the signal number (130 SIGINT, 143 SIGTERM, 129 SIGHUP, 138 SIGUSR1,
 * what a shell reports for a process the signal ended), after its checkpoint is committed; the
 * supervisor reads 138 as its own SIGUSR1 stop (requeue, not a failure). Cost: one 8-byte
 * all-reduce per step.
 */
#ifndef MT_SCHED_PREEMPT_H
#define MT_SCHED_PREEMPT_H

#include "train/trainer.h"

/* Register the hook (every step); register it after the checkpoint hook. Supervised
 * (MINITRAIN_HEARTBEAT_DIR set) it polls the supervisor's request file, and the supervisor owns
 * SIGINT/SIGTERM; otherwise it installs the SIGINT/SIGTERM handlers. Returns 1 when supervised,
 * 0 when not. */
int sched_preempt_attach(trainer *tr);

/* rc, or 128 + the signal number when rc is MT_EXIT_OK and the hook stopped this unsupervised
 * run for a SIGINT/SIGTERM (one that arrives after the last step changes nothing: the run
 * completed). */
int sched_preempt_exit_code(int rc);

/* The hook itself (user = NULL), exposed for tests. */
void sched_preempt_hook(trainer *tr, int step, int final, void *user);

#endif /* MT_SCHED_PREEMPT_H */
