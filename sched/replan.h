/*
 * sched/replan.h — the supervisor's placement (`minitrain run --rankfile F`): which host each rank
 * of the active rankfile runs on (to blame a failure on a node), and a new rankfile for the next
 * launch once a node is cordoned: the same layout (tp, pp, dp, ep of F's header) placed by
 * sched/plan on the hosts that are left — the surviving nodes plus a spare.
 *
 * Kept out of sched/supervisor.c (the restart loop) and out of sched/plan.c (which knows nothing
 * of failures): this is the glue between the two, small enough to read at once.
 */
#ifndef MT_SCHED_REPLAN_H
#define MT_SCHED_REPLAN_H

#include <stddef.h>

#include "sched/hostfile.h"
#include "sched/plan.h"

#define REPLAN_HOST_MAX 64

/* A rankfile written by `minitrain plan` (or by replan_write), as the supervisor uses it. */
typedef struct {
    int tp, pp, dp, ep, world, cp;
    char (*host)[REPLAN_HOST_MAX]; /* (world) host of each rank */
    int *slot;                     /* (world) its slot=S, -1 when not a plain number (socket:core) */
    int n_spares;                  /* "# spare HOST" lines */
} replan_rankfile;

/* Read path: the layout header (plan_read_rankfile), each "rank N=HOST slot=S" line's host, and
 * the spare count. Returns 0, or -1 with err (file:line). Free with replan_free. */
int replan_read(const char *path, replan_rankfile *rf, char *err, size_t errlen);
void replan_free(replan_rankfile *rf);

/* Index in h of the host of `rank` in rf; -1 for a rank outside rf or a host not in h. */
int replan_host_of_rank(const replan_rankfile *rf, const sup_hosts *h, int rank);

/* Place rf's layout again on the hosts of h that are not cordoned (in h's order, h->slots GPU
 * slots each; inside a Slurm allocation the allocation's own topology, sched/plan.h, with the
 * cordoned hosts excluded), holding back `spares` nodes, and write the rankfile to out
 * atomically. On success rf is replaced by the new placement. Returns 0, or -1 with err (too few
 * slots left for the layout, out not writable). */
int replan_write(replan_rankfile *rf, const sup_hosts *h, int spares, const char *out, char *err,
                 size_t errlen);

/* Every host of rf is in h, and every slot=S below that host's slot count in h (else -1 with err
 * naming the first rank that is not). */
int replan_check_hosts(const replan_rankfile *rf, const sup_hosts *h, char *err, size_t errlen);

/* Every slot=S of rf below the GPU count its host has in topology t (`train --rankfile F` with a
 * `topology` file: the only place a plain train learns a host's slots). Hosts t does not list
 * are not checked. Returns 0, or -1 with err naming the first rank that does not fit. */
int replan_check_topology(const replan_rankfile *rf, const plan_topo *t, char *err,
                          size_t errlen);

#endif /* MT_SCHED_REPLAN_H */
