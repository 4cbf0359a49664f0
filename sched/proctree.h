/*
 * sched/proctree.h — the supervisor's process hygiene (sched/sup_attempt.c): the job's processes
 * found by walking /proc (the supervisor is a child subreaper, so every orphan of the job is its
 * descendant), signalled, killed and reaped, and what a SIGKILLed mpirun leaves behind removed.
 *
 * Out of the supervisor so that an attempt's teardown reads as decisions, not /proc parsing.
 */
#ifndef MT_SCHED_PROCTREE_H
#define MT_SCHED_PROCTREE_H

#include <sys/types.h>

/* Every descendant of root (by /proc/<pid>/stat ppid), in out[1..]; out[0] = root. Returns the
 * count of descendants (at most max - 1). */
int proc_descendants(pid_t root, pid_t *out, int max);

/* Signal the job: its process group (only while child_alive: a reaped leader's pid may be reused)
 * and every descendant of this process — as a subreaper it adopts the job's orphans, and it has
 * no other children. */
void proc_signal_all(pid_t child, int child_alive, int sig);

/* 1 while the launch process `child` has not been reaped. */
int proc_unreaped(pid_t child);

/* Reap every child (and adopted orphan) that has exited; returns 1 when none is left. */
int proc_reap_all(void);

/* SIGKILL every descendant of this process but `child` (the launch process) itself: after a
 * failure the job's ranks are of no further use. Returns how many were signalled. */
int proc_kill_ranks(pid_t child);

/* Remove Open MPI's session directory of an mpirun SIGKILLed with pid ($TMPDIR/ompi.<host>.<uid>/
 * pid.<pid>): a killed mpirun cannot, and a job failing every two minutes would leave hundreds. */
void proc_remove_mpi_session(pid_t pid);

#endif /* MT_SCHED_PROCTREE_H */
