/*
 * sched/hooks.h — the resilience hooks of a training run: fault injection and heartbeats.
 *
 * `minitrain train` (cmd/train.c) calls sched_attach_trainer() once, after trainer_init and the checkpoint
 * resume, before trainer_run. It registers two trainer hooks (every step, in this order):
 *   "fault"      fires the --fault specs due at this step on this rank (sched/fault.h);
 *   "heartbeat"  rewrites this rank's heartbeat record when MINITRAIN_HEARTBEAT_DIR is set
 *                (sched/heartbeat.h).
 * The fault hook runs first so a rank that is killed or hangs at step N never reports step N:
 * the supervisor blames the rank whose heartbeat is behind.
 *
 * train/ does not include sched/ (docs/design.md: arrows point down): cmd/train.c, a floor above both,
 * includes this header and registers the hooks.
 */
#ifndef MT_SCHED_HOOKS_H
#define MT_SCHED_HOOKS_H

#include <stddef.h>

#include "train/checkpoint.h"
#include "train/trainer.h"

/* Parse tr->cfg.fault, check ranks against the world, disarm faults recorded in
 * RUN_DIR/faults_fired, open the heartbeat file, write the "init" heartbeat, and register the
 * hooks. A nan fault due at the very next step poisons the parameters now. ck (NULL when
 * checkpoints are off) lets a corrupt-ckpt/torn-ckpt fault armed for step N wait, on every rank
 * together, for step N's save to commit before it damages the copies: the fault then acts at a
 * fixed step however slow the disk, instead of whenever the background write happens to land.
 * The copies it damages are checkpoint_copies' (train/checkpoint.h): the faulted rank's own
 * tier-0 copy wherever ckpt_tier0_root puts it (shared, per node, per rank) and tiers 1 and 2,
 * plus the replica its buddy holds (ckpt_replicas = 1), damaged by the buddy itself; with
 * kill=1 the rank dies only after every rank has damaged what it reaches.
 * Returns 0, or -1 with a user-facing message in err (bad fault spec, heartbeat directory not
 * writable). One trainer per process. */
int sched_attach_trainer(trainer *tr, checkpointer *ck, char *err, size_t errlen);

/* Under `minitrain run` ($MINITRAIN_SUPERVISOR set, sched/heartbeat.h): start a detached thread
 * that checks the supervisor's record four times a second and ends this process (exit 1) once
 * the supervisor is gone, so a job never outlives its supervisor, even one killed by SIGKILL, and
 * even while this rank is blocked in a collective. Call once, as early as possible (before
 * trainer_init). Returns 1 when watching, 0 when not supervised. */
int sched_watch_supervisor(void);

/* The rank is about to exit with status code != 0 on purpose (non-finite loss, failed save):
 * its heartbeat says "exit:<code>", so the supervisor, which may see the process gone before the
 * launch's exit status arrives, does not take it for a crash. No-op for code 0 or before
 * sched_attach_trainer. */
void sched_exit_heartbeat(int code);

/* ckpt_every = auto: register a hook (after the checkpoint hook, after sched_attach_trainer)
 * that, after every save, sets the checkpoint interval to Young/Daly's τ = √(2·C·M) compute
 * seconds (Young 1974; Daly 2006) converted to steps at the measured step time: C = the measured
 * stall per save (snapshot copy plus any wait for the previous save, smoothed), M = cfg.mtbf_s,
 * or the job's wall time per failure from run.db's supervisor events (before any failure, the
 * wall time so far plus an hour). All ranks agree (one all-reduce per save). The first save
 * comes CHECKPOINT_AUTO_FIRST steps after the start, or, in a relaunch, at the interval the
 * previous process chose last (its latest ckpt_interval event); each change is logged and recorded as a
 * "ckpt_interval" event {step, every, stall_s, mtbf_s, interval_s, step_s}. */
void sched_ckpt_auto_attach(trainer *tr, checkpointer *ck);

/* The policy itself: steps between saves = round(√(2·stall_s·mtbf_s) / step_s), at least 1, at
 * most 1e9 (an infinite MTBF, or a stall of 0 taken as 1 µs). */
int sched_auto_every(double stall_s, double mtbf_s, double step_s);
void sched_ckpt_auto_hook(trainer *tr, int step, int final, void *user);

/* The checkpoint-resume hook (checkpoint_set_resume_hook, user = the trainer): fires a
 * kill@at=resume fault not fired yet in this run directory (recorded first, then SIGKILL). */
void sched_resume_fault(void *user, int step);

/* The hooks themselves (user = NULL), exposed for tests. */
void sched_fault_hook(trainer *tr, int step, int final, void *user);
void sched_heartbeat_hook(trainer *tr, int step, int final, void *user);

#endif /* MT_SCHED_HOOKS_H */
