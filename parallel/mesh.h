/*
 * parallel/mesh.h — the 5D rank layout: world = tp × cp × dp × pp (ep is carved out of dp).
 *
 * Order (Megatron-LM's tp-cp-dp-pp): tp varies fastest, so the ranks of one tensor-parallel
 * group are neighbours (one node on a cluster); then cp, so a context-parallel ring — which
 * passes K/V blocks every attention layer — is the next closest; then dp, then pp:
 *     rank = tp_rank + tp · (cp_rank + cp · (dp_rank + dp · pp_rank))
 * Groups are built with comm_split: a TP group shares (cp, dp, pp), a CP group (the ring, in
 * cp_rank order) shares (tp, dp, pp), a DP group shares (tp, cp, pp), a PP group shares
 * (tp, cp, dp). The DPCP group (same tp, pp: the dp·cp ranks holding the same parameters) is
 * where gradients are summed — a CP rank's gradients are partial sums over its share of the
 * sequence, exactly like a DP rank's over its share of the batch. Expert parallelism splits
 * each DP group into dp/ep expert-data-parallel replicas of ep consecutive dp ranks.
 * With cp = 1 every formula is the 4D one: rank = tp_rank + tp · (dp_rank + dp · pp_rank).
 */
#ifndef MT_MESH_H
#define MT_MESH_H

#include <stddef.h>

#include "parallel/comm.h"

typedef struct {
    int world_size, rank;
    int tp, cp, pp, dp, ep;
    int tp_rank, cp_rank, pp_rank, dp_rank, ep_rank;
    comm *world;
    comm *tp_group; /* ranks with the same (cp_rank, dp_rank, pp_rank) */
    comm *dp_group; /* ranks with the same (tp_rank, cp_rank, pp_rank) */
    comm *pp_group; /* ranks with the same (tp_rank, cp_rank, dp_rank) */
    comm *ep_group; /* ep consecutive dp ranks (experts sharded across them) */
    comm *edp_group; /* ranks holding the same experts: dp/ep of them */
    comm *embed_group; /* first and last pipeline stage of one (tp, dp) pipeline: the two copies
                        * of the tied embedding sum their gradients here (others: alone) */
    comm *cp_group;    /* the context-parallel ring: same (tp_rank, dp_rank, pp_rank) */
    comm *dpcp_group;  /* same (tp_rank, pp_rank): gradient reduction over dp and cp (the
                        * dp_group's members when cp = 1) */
} mesh;

/* Check a layout before any work: tp·cp·pp·dp must equal world_size (dp = 0 means
 * world / (tp·cp·pp)), ep must divide dp. Returns 0 or -1 with one clear line in err. Pure
 * function (no communication), so every rank reaches the same verdict. */
int mesh_check(int world_size, int tp, int cp, int pp, int *dp, int ep, char *err,
               size_t errlen);

/* The groups of the mesh, in the order mesh_init creates them. */
typedef enum {
    MESH_TP, MESH_DP, MESH_PP, MESH_EP, MESH_EDP, MESH_EMBED, MESH_CP, MESH_DPCP, MESH_NGROUPS
} mesh_group;

/* Coordinates of world rank `rank` in the layout (tp, cp, pp, dp, ep): tp_rank = rank % tp,
 * cp_rank = (rank / tp) % cp, dp_rank = (rank / (tp·cp)) % dp, pp_rank = rank / (tp·cp·dp),
 * ep_rank = dp_rank % ep. Pure. */
void mesh_coords(int rank, int tp, int cp, int pp, int dp, int ep, int *tp_rank, int *cp_rank,
                 int *dp_rank, int *pp_rank, int *ep_rank);

/* World rank of coordinates (tp_rank, cp_rank, dp_rank, pp_rank) — mesh_coords' inverse. */
int mesh_rank_of(int tp, int cp, int dp, int tp_rank, int cp_rank, int dp_rank, int pp_rank);

/* The comm_split arguments of world rank `rank` for group g: the ranks with equal *color form
 * one group, ordered by *key. Pure — mesh_init splits with exactly these, so a test can derive
 * every group of a layout without MPI:
 *   TP    same (cp, dp, pp), by tp_rank;   DP same (tp, cp, pp), by dp_rank;
 *   PP    same (tp, cp, dp), by pp_rank;   CP same (tp, dp, pp), by cp_rank (the ring order);
 *   DPCP  same (tp, pp), by cp_rank + cp · dp_rank;
 *   EP    same (tp, cp, pp) and dp_rank / ep (ep consecutive dp ranks), by ep_rank;
 *   EDP   same (tp, cp, pp) and ep_rank (the dp/ep replicas of one expert shard), by
 *         dp_rank / ep;
 *   EMBED first and last pipeline stage of one (tp, cp, dp) pipeline, by pp_rank; every
 *         other rank alone. */
void mesh_split_key(int rank, int tp, int cp, int pp, int dp, int ep, mesh_group g, int *color,
                    int *key);

/* Build the mesh over `world` (collective: every rank calls it with the same degrees, already
 * checked by mesh_check). */
void mesh_init(mesh *m, comm *world, int tp, int cp, int pp, int dp, int ep);

/* Print the layout on rank 0: degrees and each rank's coordinates and group members (a pure
 * function of the rank, so no communication is needed). */
void mesh_print(const mesh *m);

void mesh_free(mesh *m);

#endif /* MT_MESH_H */
