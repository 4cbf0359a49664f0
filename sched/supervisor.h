/*
 * sched/supervisor.h — `minitrain run`: the restart loop around a training job.
 *
 *   minitrain run [--max-restarts N] [--heartbeat-timeout S] [--backoff MIN:MAX] [--run-dir DIR]
 *                 [--hostfile F] [--evict-stragglers] [--fault-mtbf S --seed N] -- LAUNCH...
 *
 * The supervisor starts LAUNCH (e.g. `mpirun -np 4 ./minitrain train --config X`) in its own
 * process group, watches it (exit status, per-rank heartbeats, stragglers), and on a failure
 * kills the whole group (SIGTERM, SIGKILL after a grace period), waits an exponential backoff and
 * relaunches it with `--resume auto` appended. Every event goes to RUN_DIR/run.db with run_id 0
 * (see docs/ettr.md). The pieces that are pure functions are exposed here for the unit tests.
 */
#ifndef MT_SCHED_SUPERVISOR_H
#define MT_SCHED_SUPERVISOR_H

#include <stddef.h>

#include "sched/heartbeat.h"

#define SUP_MAX_HOSTS 256

/* A hostfile in OpenMPI's format: "name [slots=N]" per line, '#' comments. */
typedef struct {
    int n;
    char name[SUP_MAX_HOSTS][64];
    int slots[SUP_MAX_HOSTS];
    int blamed[SUP_MAX_HOSTS];   /* failures blamed on the host */
    int cordoned[SUP_MAX_HOSTS]; /* excluded from launches */
} sup_hosts;

/* Backoff before relaunch number `consecutive` (1 = after the first failure in the window):
 * min(max_s, min_s · 2^(consecutive-1)). */
double sup_backoff_s(double min_s, double max_s, int consecutive);

/* Parse a hostfile. Returns 0 or -1 with err naming the file and line. */
int sup_hosts_parse(const char *path, sup_hosts *h, char *err, size_t errlen);

/* Host index of `rank` when ranks fill the slots of the non-cordoned hosts in file order
 * (mpirun's default by-slot mapping); -1 when rank is beyond the available slots. */
int sup_host_of_rank(const sup_hosts *h, int rank);

/* Slots of the non-cordoned hosts. */
int sup_hosts_slots(const sup_hosts *h);

/* Write the non-cordoned hosts to path in hostfile format. Returns 0 or -1. */
int sup_hosts_write(const sup_hosts *h, const char *path);

/* The rank to blame for a failure from the last heartbeats: the one furthest behind (lowest
 * step, then oldest record), since the fault hook runs before the heartbeat hook. -1 when n = 0. */
int sup_blame(const hb_record *r, int n);

/* Lower median of the busy_ms of records with state "run" (NAN when none). */
double sup_median_busy(const hb_record *r, int n);

/* `minitrain run` (see --help). Returns the process exit code: 0 when the job finished cleanly,
 * 1 when it gave up (restarts exhausted, usage error of the launch, no hosts left), 2 for bad
 * flags, 130 when interrupted. */
int sup_cmd_run(int argc, char **argv);

#endif /* MT_SCHED_SUPERVISOR_H */
