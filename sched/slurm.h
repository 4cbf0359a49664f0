/*
 * sched/slurm.h — the supervisor's side of Slurm: the allocation it runs in, draining a node it
 * blames, requeueing the job.
 *
 * Kept apart from sched/supervisor.c (which calls in at two points: where the hosts are learned
 * and where a host is cordoned) so that the restart loop does not grow a resource manager inside
 * it. Everything goes through Slurm's own commands (`scontrol`), exec'd without a shell, so it
 * works with any Slurm that has them on PATH and leaves Slurm's event log to record the change.
 */
#ifndef MT_SCHED_SLURM_H
#define MT_SCHED_SLURM_H

#include <stddef.h>

/* 1 when running inside a Slurm allocation (SLURM_JOB_ID and SLURM_JOB_NODELIST are set). */
int slurm_in_allocation(void);

/* Write the allocation's hosts as an Open MPI hostfile ("host slots=N", one per line; slots from
 * SLURM_NTASKS_PER_NODE / SLURM_JOB_CPUS_PER_NODE, see plan_topo_from_slurm) to path. Returns
 * the number of hosts, or -1 with err. */
int slurm_write_hostfile(const char *path, char *err, size_t errlen);

/* `scontrol update nodename=HOST state=drain reason="minitrain: WHY"`: cordon the node in Slurm
 * so no job (this one's next launch included) is scheduled on it until an admin resumes it.
 * Returns 0, or -1 with err (scontrol missing or refusing, e.g. not an operator). */
int slurm_drain(const char *host, const char *why, char *err, size_t errlen);

/* `scontrol requeue $SLURM_JOB_ID`: put this batch job back in the queue (used on SIGUSR1, the
 * time-limit or preemption warning of `sbatch --signal=B:USR1@S`). Returns 0 or -1 with err. */
int slurm_requeue(char *err, size_t errlen);

#endif /* MT_SCHED_SLURM_H */
