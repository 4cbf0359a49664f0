/*
 * sched/plan.h — topology-aware placement: which GPU (host, slot) each rank of the 4D mesh gets,
 * and what the placement costs in communication time per step.
 *
 * The topology (docs/placement.md): nodes with G GPU slots each; the GPUs of a node form
 * scale-up domains of S GPUs (NVLink/NVSwitch: S = G on an HGX node); each node has R NICs
 * ("rails": GPU g uses rail g·R/G); nodes hang under leaf switches, leaves under a spine. In a
 * rail-optimized fat tree the leaf switch of rail r connects rail r of every node in the leaf, so
 * same-rail traffic inside one leaf takes one hop at NIC speed, and everything else (other rail,
 * other leaf) climbs to the spine, whose bandwidth is the NIC's divided by the oversubscription.
 *
 * The mesh's rank order is fixed (parallel/mesh.h, Megatron's): rank = t + tp·(c + cp·(d + dp·p))
 * (c the context-parallel rank; cp = 1 gives t + tp·(d + dp·p)). A placement is therefore a map
 * rank → (node, slot). The planner's rules:
 *   - TP groups (then EP groups) inside one scale-up domain whenever they fit;
 *   - CP rings next: ring neighbours are consecutive TP blocks, so a ring sits inside one
 *     scale-up domain whenever tp·cp fits in it (the ring passes K/V every layer, the heaviest
 *     traffic after TP's);
 *   - DP groups rail-aligned: every node a DP group touches hosts its members on the same rails,
 *     and a DP group's nodes share one leaf when they fit in it (a leaf-aligned node order);
 *   - PP stages across nodes (the cheapest traffic takes the longest links);
 *   - excluded (cordoned) hosts are never used; N spare nodes are held back, unused.
 * Megatron's default (ranks in host order) and a naive order (round robin over the hosts, like
 * `mpirun --map-by node`) are computed on the same topology for comparison.
 *
 * The cost model (docs/placement.md gives the derivation): for each parallel dimension, the bytes
 * one rank moves per optimizer step × the collective's bus factor (all-reduce 2(n−1)/n;
 * all-gather, reduce-scatter and all-to-all (n−1)/n; point-to-point 1), divided by the bandwidth of
 * the slowest link class the group crosses; a dimension's time is its slowest group's. Bandwidth
 * only (no latency term), no overlap of communication with compute.
 */
#ifndef MT_SCHED_PLAN_H
#define MT_SCHED_PLAN_H

#include <stddef.h>
#include <stdio.h>

#define PLAN_NAME_MAX 64

typedef struct {
    char name[PLAN_NAME_MAX];
    int gpus;     /* G: GPU (or CPU) slots */
    int domain;   /* S: GPUs per scale-up domain (divides gpus) */
    int rails;    /* R: NICs; GPU g uses rail g·R/G (1..64) */
    int leaf;     /* index of its leaf switch */
    int excluded; /* cordoned: never placed on */
} plan_node;

typedef struct {
    plan_node *nodes;
    int n_nodes, cap;
    int n_leaves;
    char (*leaf_names)[PLAN_NAME_MAX]; /* (n_leaf_names) as a file names them; else "leaf<i>" */
    int n_leaf_names;
    double scaleup_gbs;   /* per-GPU bandwidth inside a scale-up domain, GB/s (NVLink) */
    double intranode_gbs; /* between domains of one node (PCIe / host), GB/s */
    double nic_gbs;       /* network bandwidth per GPU, GB/s: same-rail traffic inside one leaf */
    double oversub;       /* spine oversubscription (>= 1): spine bandwidth = nic_gbs / oversub */
} plan_topo;

/* The slowest link a group crosses, fastest first. */
typedef enum { PLAN_LINK_SELF, PLAN_LINK_DOMAIN, PLAN_LINK_NODE, PLAN_LINK_LEAF,
               PLAN_LINK_SPINE } plan_link;

/* What the cost model needs of the model and the layout. */
typedef struct {
    int tp, pp, dp, ep;
    int cp; /* context-parallel degree (0 or 1 = none) */
    int n_layer, d_model, seq_len, vocab_size;
    int micro_batch;  /* sequences per microbatch */
    int microbatches; /* per optimizer step, per pipeline */
    int moe_every, top_k; /* MoE layers: every moe_every-th block (0 = dense); top-k routing */
    int bytes_per_elem; /* 4 (fp32, what minitrain's CPU path moves) or 2 (bf16) */
} plan_model;

/* DP's groups are the ranks that sum gradients: dp·cp of them (parallel/mesh.h's DPCP group). */
typedef enum { PLAN_DIM_TP, PLAN_DIM_DP, PLAN_DIM_PP, PLAN_DIM_EP, PLAN_DIM_CP, PLAN_NDIM } plan_dim;

typedef struct {
    double bytes[PLAN_NDIM];   /* bytes one rank moves per step (before the bus factor) */
    double seconds[PLAN_NDIM]; /* predicted time per step of the slowest group */
    plan_link link[PLAN_NDIM]; /* the slowest link class of the slowest group */
    double total_s;            /* sum over the dimensions (no overlap) */
} plan_cost;

typedef struct {
    int world;
    int *node; /* (world) node index of each rank */
    int *slot; /* (world) local GPU index on that node */
    int *spares; int n_spares; /* node indices held back */
    int n_used_nodes;
} plan_placement;

typedef enum { PLAN_ORDER_PLANNED, PLAN_ORDER_MEGATRON, PLAN_ORDER_NAIVE } plan_order;

/* ---- topologies ---------------------------------------------------------------------------- */

/* Defaults of the fabric: H100 HGX-like, 450 GB/s NVLink per GPU, 64 GB/s between domains, 50 GB/s
 * (400 Gb/s) per NIC, spine oversubscription 2. No nodes. */
void plan_topo_init(plan_topo *t);
void plan_topo_free(plan_topo *t);

/* Append a node; returns its index. */
int plan_topo_add(plan_topo *t, const char *name, int gpus, int domain, int rails, int leaf);

/* Uniform topology: nodes node0..node{n-1} of g GPUs (one domain each, g rails — one NIC per
 * GPU, capped at 64), nodes_per_leaf per leaf (0 = all in one leaf). */
void plan_topo_uniform(plan_topo *t, int n_nodes, int gpus, int nodes_per_leaf);

/* Read a topology file (INI, docs/placement.md) into t (initialised by plan_topo_init). Returns 0,
 * or -1 with one line (file:line and the problem) in err. */
int plan_topo_load(plan_topo *t, const char *path, char *err, size_t errlen);

/* The leaf switch of host `host` in t: its index, its name in name (the topology file's, else
 * "leaf<index>"). Returns -1 (name "") when t has no such host. Tier-0 buddies are chosen
 * behind another leaf with this (cmd/train.c, `topology = FILE`). */
int plan_topo_host_leaf(const plan_topo *t, const char *host, char *name, size_t len);

/* The local node from hwloc: GPUs if hwloc sees any (CUDA/NVML OS devices), else cores as CPU
 * slots with one scale-up domain per package. Returns 0 or -1 with err (also when minitrain was
 * built without libhwloc). */
int plan_topo_from_hwloc(plan_topo *t, char *err, size_t errlen);

/* The nodes of the current Slurm allocation: SLURM_JOB_NODELIST (expanded by `scontrol show
 * hostnames`), slots per node from SLURM_GPUS_ON_NODE, else SLURM_NTASKS_PER_NODE, else
 * SLURM_JOB_CPUS_PER_NODE ("4(x3),2"); leaves from `scontrol show topology` (level-0 switches)
 * when a topology plugin answers. Returns 0 or -1 with err (not in an allocation, scontrol
 * missing). */
int plan_topo_from_slurm(plan_topo *t, char *err, size_t errlen);

/* Mark hosts excluded: list is comma-separated names. Returns 0, or -1 with err naming an
 * unknown host. */
int plan_topo_exclude(plan_topo *t, const char *list, char *err, size_t errlen);

/* ---- placing and costing ------------------------------------------------------------------- */

/* Place tp·cp·pp·dp ranks on t with the given order, holding back `spares` nodes (PLANNED and the
 * other orders alike, so the comparison is on the same GPUs' worth of machines). Returns 0, or
 * -1 with err (too few usable GPUs, ep not dividing dp, ...). p is zeroed first; free with
 * plan_placement_free. */
int plan_place(const plan_topo *t, const plan_model *m, int spares, plan_order order,
               plan_placement *p, char *err, size_t errlen);
void plan_placement_free(plan_placement *p);

/* `--dp 0`: the data-parallel degree that fills every usable GPU but the spares': the GPUs of the
 * hosts not excluded that have the first such host's GPU count, minus spares nodes of it, over
 * tp·pp, rounded down to a multiple of ep. Returns it, or -1 with one line in err when tp·pp does
 * not fit those GPUs or the result is below ep. */
int plan_auto_dp(const plan_topo *t, const plan_model *m, int spares, char *err, size_t errlen);

/* The slowest link class among the ranks ranks[0..n-1] of placement p (see the header comment:
 * one domain, one node, same rails inside one leaf, else spine). */
plan_link plan_group_link(const plan_topo *t, const plan_placement *p, const int *ranks, int n);

/* Bandwidth of a link class, bytes/s (SELF: infinite). */
double plan_link_bw(const plan_topo *t, plan_link l);
const char *plan_link_name(plan_link l);

/* Bytes per step per rank of each dimension (see docs/placement.md):
 *   TP: 4 all-reduces (2 forward, 2 backward) per layer per microbatch of (micro_batch, seq_len,
 *       d_model) activations, for the n_layer/pp layers of one stage;
 *   DP: one all-reduce of the rank's gradient shard, params/(tp·pp) elements, over the dp·cp
 *       ranks holding the same parameters;
 *   PP: per microbatch one activation sent forward and one gradient back, (micro_batch, seq_len,
 *       d_model) each;
 *   EP: 4 all-to-alls (dispatch + combine, forward and backward) per MoE layer of a stage per
 *       microbatch, of top_k·micro_batch·seq_len token vectors of d_model (0 for a dense model);
 *   CP: the ring (parallel/cp.h), (6·cp − 4)·micro_batch·(seq_len/cp)·(d_model/tp) elements per
 *       layer of a stage per microbatch, sent point-to-point to the ring neighbour.
 * With cp > 1, TP and PP move a rank's seq_len/cp positions, not seq_len.
 * Parameters: 12·L·d² + V·d + T·d (GPT-2, tied head). */
void plan_bytes(const plan_model *m, double bytes[PLAN_NDIM]);

/* Bus factor of dimension d's collective over n ranks: TP, DP 2(n−1)/n; EP (n−1)/n; PP, CP 1
 * (0 when n == 1). */
double plan_bus_factor(plan_dim d, int n);

/* Predicted communication time per step of placement p. */
void plan_cost_eval(const plan_topo *t, const plan_model *m, const plan_placement *p,
                    plan_cost *c);

/* Check the rules on placement p; returns the number broken, describing each in buf (one line
 * each, "" when none). Rules that cannot hold (TP larger than a domain) are not counted. */
int plan_check_rules(const plan_topo *t, const plan_model *m, const plan_placement *p, char *buf,
                     size_t buflen);

/* Write the Open MPI rankfile ("rank N=host slot=S", one per rank, in rank order) to fp, headed by
 * a "# minitrain plan: tp=.. pp=.. dp=.. ep=.. world=.. cp=.." line that `train --rankfile` reads
 * (a header without cp= is cp 1), and
 * "# spare HOST" / "# excluded HOST" comments. */
void plan_write_rankfile(FILE *fp, const plan_topo *t, const plan_model *m,
                         const plan_placement *p);

/* Read the layout header of a rankfile written by plan_write_rankfile and count its rank lines.
 * Returns 0 with tp/pp/dp/ep/world/cp set, or -1 with err (no header, rank lines not 0..world-1
 * in order, count differing from world). */
int plan_read_rankfile(const char *path, int *tp, int *pp, int *dp, int *ep, int *world, int *cp,
                       char *err, size_t errlen);

#endif /* MT_SCHED_PLAN_H */
