/*
 * parallel/mesh.h — the 4D rank layout: world = tp × dp × pp (ep is carved out of dp).
 *
 * Order (Megatron-LM's): tp varies fastest, so the ranks of one tensor-parallel group are
 * neighbours (one node on a cluster), then dp, then pp:
 *     rank = tp_rank + tp · (dp_rank + dp · pp_rank)
 * Groups are built with comm_split: a TP group shares (dp_rank, pp_rank), a DP group shares
 * (tp_rank, pp_rank), a PP group shares (tp_rank, dp_rank). Expert parallelism splits each DP
 * group into dp/ep expert-data-parallel replicas of ep consecutive dp ranks (parallel runtime II).
 */
#ifndef MT_MESH_H
#define MT_MESH_H

#include <stddef.h>

#include "parallel/comm.h"

typedef struct {
    int world_size, rank;
    int tp, pp, dp, ep;
    int tp_rank, pp_rank, dp_rank, ep_rank;
    comm *world;
    comm *tp_group; /* ranks with the same (dp_rank, pp_rank) */
    comm *dp_group; /* ranks with the same (tp_rank, pp_rank) */
    comm *pp_group; /* ranks with the same (tp_rank, dp_rank) */
    comm *ep_group; /* ep consecutive dp ranks (experts sharded across them) */
    comm *edp_group; /* ranks holding the same experts: dp/ep of them */
    comm *embed_group; /* first and last pipeline stage of one (tp, dp) pipeline: the two copies
                        * of the tied embedding sum their gradients here (others: alone) */
} mesh;

/* Check a layout before any work: tp·pp·dp must equal world_size (dp = 0 means
 * world / (tp·pp)), ep must divide dp. Returns 0 or -1 with one clear line in err. Pure
 * function (no communication), so every rank reaches the same verdict. */
int mesh_check(int world_size, int tp, int pp, int *dp, int ep, char *err, size_t errlen);

/* The groups of the mesh, in the order mesh_init creates them. */
typedef enum { MESH_TP, MESH_DP, MESH_PP, MESH_EP, MESH_EDP, MESH_EMBED, MESH_NGROUPS } mesh_group;

/* Coordinates of world rank `rank` in the layout (tp, pp, dp, ep): tp_rank = rank % tp,
 * dp_rank = (rank / tp) % dp, pp_rank = rank / (tp·dp), ep_rank = dp_rank % ep. Pure. */
void mesh_coords(int rank, int tp, int pp, int dp, int ep, int *tp_rank, int *dp_rank,
                 int *pp_rank, int *ep_rank);

/* The comm_split arguments of world rank `rank` for group g: the ranks with equal *color form
 * one group, ordered by *key. Pure — mesh_init splits with exactly these, so a test can derive
 * every group of a layout without MPI:
 *   TP    same (dp_rank, pp_rank), by tp_rank;   DP same (tp_rank, pp_rank), by dp_rank;
 *   PP    same (tp_rank, dp_rank), by pp_rank;
 *   EP    same (tp_rank, pp_rank) and dp_rank / ep (ep consecutive dp ranks), by ep_rank;
 *   EDP   same (tp_rank, pp_rank) and ep_rank (the dp/ep replicas of one expert shard), by
 *         dp_rank / ep;
 *   EMBED first and last pipeline stage of one (tp_rank, dp_rank) pipeline, by pp_rank; every
 *         other rank alone. */
void mesh_split_key(int rank, int tp, int pp, int dp, int ep, mesh_group g, int *color,
                    int *key);

/* Build the mesh over `world` (collective: every rank calls it with the same degrees, already
 * checked by mesh_check). */
void mesh_init(mesh *m, comm *world, int tp, int pp, int dp, int ep);

/* Print the layout on rank 0: degrees and each rank's coordinates and group members (a pure
 * function of the rank, so no communication is needed). */
void mesh_print(const mesh *m);

void mesh_free(mesh *m);

#endif /* MT_MESH_H */
