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
 * train/ does not include sched/ (DESIGN.md: arrows point down): cmd/train.c, a floor above both,
 * includes this header and registers the hooks.
 */
#ifndef MT_SCHED_HOOKS_H
#define MT_SCHED_HOOKS_H

#include <stddef.h>

#include "train/trainer.h"

/* Parse tr->cfg.fault, check ranks against the world, disarm faults recorded in
 * RUN_DIR/faults_fired, open the heartbeat file, write the "init" heartbeat, and register the
 * hooks. A nan fault due at the very next step poisons the parameters now. Returns 0, or -1 with
 * a user-facing message in err (bad fault spec, heartbeat directory not writable). One trainer
 * per process. */
int sched_attach_trainer(trainer *tr, char *err, size_t errlen);

/* The hooks themselves (user = NULL), exposed for tests. */
void sched_fault_hook(trainer *tr, int step, int final, void *user);
void sched_heartbeat_hook(trainer *tr, int step, int final, void *user);

#endif /* MT_SCHED_HOOKS_H */
