/*
 * sched/plan.c — placing the mesh's ranks on a topology, the cost model, the rule checks and the
 * Open MPI rankfile (sched/plan.h says what the rules and the model are; docs/placement.md why).
 *
 * Because the mesh's rank order is fixed (tp fastest, then dp, then pp), the planner does not
 * permute ranks: it orders the GPUs. Ranks then fill that GPU order in sequence, so a node holds
 * whole TP groups (and the EP groups made of consecutive dp ranks), a stage of tp·dp ranks fills
 * whole nodes, and stage after stage moves to other nodes. What the planner decides is the order
 * of the NODES: excluded hosts out, spares held back, and each stage's block of nodes taken from
 * one leaf when it fits (first fit), so that no DP group straddles a leaf boundary.
 *
 * Everything is O(world) per dimension, so 16,384 GPUs plan in milliseconds.
 */
#include "sched/plan.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

/* ---- placement ------------------------------------------------------------------------------ */

void plan_placement_free(plan_placement *p) {
    free(p->node);
    free(p->slot);
    free(p->spares);
    memset(p, 0, sizeof(*p));
}

/* The GPUs per node of the placement: the first usable node's; nodes with another count are not
 * used (a topology mixing node shapes is planned on its majority shape by listing it first). */
/* The context-parallel degree of m (0, an unset field, is 1). */
static int cp_of(const plan_model *m) { return m->cp > 1 ? m->cp : 1; }

static int usable_gpus(const plan_topo *t) {
    for (int i = 0; i < t->n_nodes; i++)
        if (!t->nodes[i].excluded) return t->nodes[i].gpus;
    return 0;
}

/* Nodes per stage block: a stage (tp·cp·dp ranks) fills this many whole nodes; 1 when a stage
 * fits in one node. */
static int stage_nodes(const plan_model *m, int g) {
    long stage = (long)m->tp * cp_of(m) * m->dp;
    return stage >= g && stage % g == 0 ? (int)(stage / g) : 1;
}

/* Order the nodes PLANNED-style: first fit of stage blocks into leaves. order receives `need`
 * node indices; used[] marks them. Returns 0 or -1 when not enough nodes. */
static int order_leaf_aligned(const plan_topo *t, const int *usable, int n_usable, int need,
                              int block, int *order, char *used) {
    int *leaf_free = callocCheck((size_t)t->n_leaves + 1, sizeof(int));
    for (int i = 0; i < n_usable; i++) leaf_free[t->nodes[usable[i]].leaf]++;
    int n = 0;
    while (n < need) {
        int want = need - n < block ? need - n : block, leaf = -1;
        for (int l = 0; l < t->n_leaves && leaf < 0; l++)
            if (leaf_free[l] >= want) leaf = l;
        for (int i = 0; i < n_usable && want > 0; i++) {
            int k = usable[i];
            if (used[k] || (leaf >= 0 && t->nodes[k].leaf != leaf)) continue;
            used[k] = 1;
            leaf_free[t->nodes[k].leaf]--;
            order[n++] = k;
            want--;
        }
        if (want > 0) break; /* ran out */
    }
    free(leaf_free);
    return n == need ? 0 : -1;
}

int plan_place(const plan_topo *t, const plan_model *m, int spares, plan_order order,
               plan_placement *p, char *err, size_t errlen) {
    memset(p, 0, sizeof(*p));
    if (m->tp < 1 || m->pp < 1 || m->dp < 1 || m->ep < 1 || m->cp < 0) {
        snprintf(err, errlen, "plan: tp, cp, pp, dp and ep must be >= 1");
        return -1;
    }
    if (m->dp % m->ep != 0) {
        snprintf(err, errlen, "plan: ep (%d) must divide dp (%d)", m->ep, m->dp);
        return -1;
    }
    long world = (long)m->tp * cp_of(m) * m->pp * m->dp;
    int g = usable_gpus(t);
    if (g < 1) {
        snprintf(err, errlen, "plan: no usable node (all excluded?)");
        return -1;
    }
    int *usable = mallocCheck(sizeof(int) * (size_t)t->n_nodes), n_usable = 0;
    for (int i = 0; i < t->n_nodes; i++)
        if (!t->nodes[i].excluded && t->nodes[i].gpus == g) usable[n_usable++] = i;
    long need = (world + g - 1) / g;
    if (world > (long)1 << 30 || need + spares > n_usable) {
        snprintf(err, errlen, "plan: %ld ranks need %ld nodes of %d GPUs plus %d spare(s); the "
                 "topology has %d usable", world, need, g, spares, n_usable);
        free(usable);
        return -1;
    }
    int *nodes = mallocCheck(sizeof(int) * (size_t)need);
    char *used = callocCheck((size_t)t->n_nodes, 1);
    if (order == PLAN_ORDER_PLANNED) {
        /* need + spares <= n_usable, so first fit always finds `need` nodes; what it leaves
         * over holds the spares */
        int block = stage_nodes(m, g);
        if (order_leaf_aligned(t, usable, n_usable, (int)need, block, nodes, used) != 0)
            mtCheck(0, "first fit ran out of nodes although enough are usable");
    } else {
        /* host order, the spares are the last usable hosts */
        for (int i = 0; i < need; i++) {
            nodes[i] = usable[i];
            used[usable[i]] = 1;
        }
    }
    p->world = (int)world;
    p->node = mallocCheck(sizeof(int) * (size_t)world);
    p->slot = mallocCheck(sizeof(int) * (size_t)world);
    for (long r = 0; r < world; r++) {
        if (order == PLAN_ORDER_NAIVE) { /* mpirun --map-by node */
            p->node[r] = nodes[r % need];
            p->slot[r] = (int)(r / need);
        } else {
            p->node[r] = nodes[r / g];
            p->slot[r] = (int)(r % g);
        }
    }
    p->n_used_nodes = (int)need;
    p->spares = mallocCheck(sizeof(int) * (size_t)(spares > 0 ? spares : 1));
    /* spares: unused usable nodes, preferring leaves that host ranks (a replacement close to the
     * nodes it replaces), then any */
    for (int pass = 0; pass < 2 && p->n_spares < spares; pass++)
        for (int i = 0; i < n_usable && p->n_spares < spares; i++) {
            int k = usable[i], near = 0;
            if (used[k]) continue;
            for (int j = 0; j < need && !near; j++) near = t->nodes[nodes[j]].leaf == t->nodes[k].leaf;
            if (pass == 0 && !near) continue;
            used[k] = 1;
            p->spares[p->n_spares++] = k;
        }
    free(usable);
    free(nodes);
    free(used);
    return 0;
}

/* ---- link classes ---------------------------------------------------------------------------- */

const char *plan_link_name(plan_link l) {
    static const char *names[] = {"self", "nvlink", "node", "leaf", "spine"};
    return l >= PLAN_LINK_SELF && l <= PLAN_LINK_SPINE ? names[l] : "?";
}

double plan_link_bw(const plan_topo *t, plan_link l) {
    switch (l) {
    case PLAN_LINK_SELF: return INFINITY;
    case PLAN_LINK_DOMAIN: return t->scaleup_gbs * 1e9;
    case PLAN_LINK_NODE: return t->intranode_gbs * 1e9;
    case PLAN_LINK_LEAF: return t->nic_gbs * 1e9;
    case PLAN_LINK_SPINE: return t->nic_gbs * 1e9 / (t->oversub >= 1 ? t->oversub : 1);
    }
    return NAN;
}

static int rail_of(const plan_node *n, int slot) {
    return (int)((long)slot * n->rails / n->gpus);
}

/* What a group of ranks spans. scratch: n_nodes zeroed uint64 rail masks, restored on return. */
typedef struct {
    int nodes;      /* distinct nodes touched */
    int one_domain; /* all in one scale-up domain */
    int aligned;    /* every touched node uses the same set of rails */
    int one_leaf;
} group_span;

static group_span span_of(const plan_topo *t, const plan_placement *p, const int *ranks, int n,
                          uint64_t *mask, int *touched) {
    group_span s = {0, 1, 1, 1};
    int n0 = p->node[ranks[0]], dom0 = p->slot[ranks[0]] / t->nodes[n0].domain;
    for (int i = 0; i < n; i++) {
        int k = p->node[ranks[i]];
        const plan_node *nd = &t->nodes[k];
        if (k != n0 || p->slot[ranks[i]] / nd->domain != dom0) s.one_domain = 0;
        if (nd->leaf != t->nodes[n0].leaf) s.one_leaf = 0;
        if (!mask[k]) touched[s.nodes++] = k;
        mask[k] |= (uint64_t)1 << rail_of(nd, p->slot[ranks[i]]);
    }
    for (int i = 0; i < s.nodes; i++)
        if (mask[touched[i]] != mask[touched[0]]) s.aligned = 0;
    for (int i = 0; i < s.nodes; i++) mask[touched[i]] = 0;
    return s;
}

static plan_link link_of(group_span s, int n) {
    if (n <= 1) return PLAN_LINK_SELF;
    if (s.nodes == 1) return s.one_domain ? PLAN_LINK_DOMAIN : PLAN_LINK_NODE;
    return s.aligned && s.one_leaf ? PLAN_LINK_LEAF : PLAN_LINK_SPINE;
}

plan_link plan_group_link(const plan_topo *t, const plan_placement *p, const int *ranks, int n) {
    if (n <= 1) return PLAN_LINK_SELF;
    uint64_t *mask = callocCheck((size_t)t->n_nodes, sizeof(uint64_t));
    int *touched = mallocCheck(sizeof(int) * (size_t)n);
    plan_link l = link_of(span_of(t, p, ranks, n, mask, touched), n);
    free(mask);
    free(touched);
    return l;
}

/* ---- the groups of each dimension ------------------------------------------------------------ */

/* Call fn(ctx, ranks, n) for every group of dimension d (PP: every pair of consecutive stages,
 * since pipeline traffic is point-to-point between neighbours). */
typedef void (*group_fn)(void *ctx, const int *ranks, int n);
static void for_each_group(const plan_model *m, plan_dim d, int *buf, group_fn fn, void *ctx) {
    int tp = m->tp, dp = m->dp, pp = m->pp, ep = m->ep, cp = cp_of(m);
    /* parallel/mesh.h's order: tp fastest, then cp, dp, pp (mesh_rank_of) */
#define RANK(t, c, dd, p) ((t) + tp * ((c) + cp * ((dd) + dp * (p))))
    switch (d) {
    case PLAN_DIM_TP:
        for (int p = 0; p < pp; p++)
            for (int dd = 0; dd < dp; dd++)
                for (int c = 0; c < cp; c++) {
                    for (int t = 0; t < tp; t++) buf[t] = RANK(t, c, dd, p);
                    fn(ctx, buf, tp);
                }
        break;
    case PLAN_DIM_DP: /* the gradient sum: dp x cp ranks */
        for (int p = 0; p < pp; p++)
            for (int t = 0; t < tp; t++) {
                for (int dd = 0; dd < dp; dd++)
                    for (int c = 0; c < cp; c++) buf[c + cp * dd] = RANK(t, c, dd, p);
                fn(ctx, buf, dp * cp);
            }
        break;
    case PLAN_DIM_PP:
        for (int p = 0; p + 1 < pp; p++)
            for (int dd = 0; dd < dp; dd++)
                for (int c = 0; c < cp; c++)
                    for (int t = 0; t < tp; t++) {
                        buf[0] = RANK(t, c, dd, p);
                        buf[1] = RANK(t, c, dd, p + 1);
                        fn(ctx, buf, 2);
                    }
        break;
    case PLAN_DIM_EP:
        for (int p = 0; p < pp; p++)
            for (int c = 0; c < cp; c++)
                for (int t = 0; t < tp; t++)
                    for (int e0 = 0; e0 < dp; e0 += ep) {
                        for (int e = 0; e < ep; e++) buf[e] = RANK(t, c, e0 + e, p);
                        fn(ctx, buf, ep);
                    }
        break;
    case PLAN_DIM_CP: /* one ring: its slowest hop is the ring's link */
        if (cp == 1) break;
        for (int p = 0; p < pp; p++)
            for (int dd = 0; dd < dp; dd++)
                for (int t = 0; t < tp; t++) {
                    for (int c = 0; c < cp; c++) buf[c] = RANK(t, c, dd, p);
                    fn(ctx, buf, cp);
                }
        break;
    default: break;
    }
#undef RANK
}

typedef struct {
    const plan_topo *t;
    const plan_placement *p;
    uint64_t *mask;
    int *touched;
    plan_link worst;
    /* rule checking */
    int groups, misaligned, straddle, off_domain, same_node;
    int fit_leaf; /* the group's nodes would fit in one leaf */
} group_ctx;

static void worst_link(void *vctx, const int *ranks, int n) {
    group_ctx *c = vctx;
    group_span s = span_of(c->t, c->p, ranks, n, c->mask, c->touched);
    plan_link l = link_of(s, n);
    if (l > c->worst) c->worst = l;
    c->groups++;
    if (s.nodes > 1 && !s.aligned) c->misaligned++;
    if (s.nodes > 1 && !s.one_leaf) c->straddle++;
    if (!(s.nodes == 1 && s.one_domain)) c->off_domain++;
    if (s.nodes == 1) c->same_node++;
}

static group_ctx scan_dim(const plan_topo *t, const plan_model *m, const plan_placement *p,
                          plan_dim d) {
    group_ctx c = {.t = t, .p = p, .worst = PLAN_LINK_SELF};
    c.mask = callocCheck((size_t)t->n_nodes, sizeof(uint64_t));
    c.touched = mallocCheck(sizeof(int) * (size_t)p->world);
    int *buf = mallocCheck(sizeof(int) * (size_t)p->world);
    for_each_group(m, d, buf, worst_link, &c);
    free(buf);
    free(c.mask);
    free(c.touched);
    c.mask = NULL;
    c.touched = NULL;
    return c;
}

/* ---- the cost model -------------------------------------------------------------------------- */

void plan_bytes(const plan_model *m, double bytes[PLAN_NDIM]) {
    double L = m->n_layer, d = m->d_model, T = m->seq_len, V = m->vocab_size;
    double b = m->micro_batch, mb = m->microbatches, e = m->bytes_per_elem;
    double layers = L / m->pp, cp = cp_of(m);
    double act = b * (T / cp) * d * e; /* one rank's (micro_batch, seq_len/cp, d_model), bytes */
    double params = 12.0 * L * d * d + V * d + T * d;
    int moe_layers = m->moe_every > 0 ? m->n_layer / m->moe_every : 0;
    bytes[PLAN_DIM_TP] = m->tp > 1 ? 4.0 * layers * mb * act : 0;
    bytes[PLAN_DIM_DP] = m->dp * cp > 1 ? params / ((double)m->tp * m->pp) * e : 0; /* dp x cp */
    bytes[PLAN_DIM_PP] = m->pp > 1 ? 2.0 * mb * act : 0;
    bytes[PLAN_DIM_EP] = m->ep > 1 && moe_layers > 0
                             ? 4.0 * ((double)moe_layers / m->pp) * mb * m->top_k * act
                             : 0;
    /* the ring formula of parallel/cp.h: (6·cp − 4) blocks of (B, T/cp, d/tp) per layer */
    bytes[PLAN_DIM_CP] = cp > 1 ? (6.0 * cp - 4.0) * layers * mb * act / m->tp : 0;
}

double plan_bus_factor(plan_dim d, int n) {
    if (n <= 1) return 0;
    switch (d) {
    case PLAN_DIM_TP:
    case PLAN_DIM_DP: return 2.0 * (n - 1) / n;
    case PLAN_DIM_EP: return (double)(n - 1) / n;
    case PLAN_DIM_PP:
    case PLAN_DIM_CP: return 1;
    default: return NAN;
    }
}

static int dim_size(const plan_model *m, plan_dim d) {
    switch (d) {
    case PLAN_DIM_TP: return m->tp;
    case PLAN_DIM_DP: return m->dp * cp_of(m);
    case PLAN_DIM_CP: return cp_of(m);
    case PLAN_DIM_PP: return m->pp > 1 ? 2 : 1;
    case PLAN_DIM_EP: return m->ep;
    default: return 1;
    }
}

void plan_cost_eval(const plan_topo *t, const plan_model *m, const plan_placement *p,
                    plan_cost *c) {
    memset(c, 0, sizeof(*c));
    plan_bytes(m, c->bytes);
    for (int d = 0; d < PLAN_NDIM; d++) {
        group_ctx g = scan_dim(t, m, p, (plan_dim)d);
        c->link[d] = g.worst;
        double bf = plan_bus_factor((plan_dim)d, dim_size(m, (plan_dim)d));
        c->seconds[d] = c->bytes[d] > 0 && bf > 0 ? c->bytes[d] * bf / plan_link_bw(t, g.worst)
                                                  : 0;
        c->total_s += c->seconds[d];
    }
}

/* ---- rule checks ----------------------------------------------------------------------------- */

static void say(char *buf, size_t buflen, size_t *off, const char *fmt, ...) MT_PRINTF(4, 5);
static void say(char *buf, size_t buflen, size_t *off, const char *fmt, ...) {
    if (*off >= buflen) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *off, buflen - *off, fmt, ap);
    va_end(ap);
    if (n > 0) *off += (size_t)n;
}

int plan_check_rules(const plan_topo *t, const plan_model *m, const plan_placement *p, char *buf,
                     size_t buflen) {
    size_t off = 0;
    int broken = 0;
    if (buflen) buf[0] = 0;
    int g = p->world > 0 ? t->nodes[p->node[0]].gpus : 1, s = t->nodes[p->node[0]].domain;
    int min_leaf = t->n_nodes;
    int *leaf_n = callocCheck((size_t)t->n_leaves + 1, sizeof(int));
    for (int i = 0; i < t->n_nodes; i++)
        if (!t->nodes[i].excluded) leaf_n[t->nodes[i].leaf]++;
    for (int l = 0; l < t->n_leaves; l++)
        if (leaf_n[l] > 0 && leaf_n[l] < min_leaf) min_leaf = leaf_n[l];
    free(leaf_n);
    if (m->tp > 1 && m->tp <= s && s % m->tp == 0) {
        group_ctx c = scan_dim(t, m, p, PLAN_DIM_TP);
        if (c.off_domain) {
            broken++;
            say(buf, buflen, &off, "TP: %d of %d groups leave their scale-up domain\n",
                c.off_domain, c.groups);
        }
    }
    int cp = cp_of(m);
    if (cp > 1 && (long)m->tp * cp <= s && s % (m->tp * cp) == 0) {
        group_ctx c = scan_dim(t, m, p, PLAN_DIM_CP);
        if (c.off_domain) {
            broken++;
            say(buf, buflen, &off, "CP: %d of %d rings leave their scale-up domain\n",
                c.off_domain, c.groups);
        }
    }
    if (m->ep > 1 && (long)m->tp * m->ep <= s && s % (m->tp * m->ep) == 0) {
        group_ctx c = scan_dim(t, m, p, PLAN_DIM_EP);
        if (c.off_domain) {
            broken++;
            say(buf, buflen, &off, "EP: %d of %d groups leave their scale-up domain\n",
                c.off_domain, c.groups);
        }
    }
    if (m->dp * cp > 1) {
        group_ctx c = scan_dim(t, m, p, PLAN_DIM_DP);
        if (c.misaligned) {
            broken++;
            say(buf, buflen, &off, "DP: %d of %d groups are not rail-aligned\n", c.misaligned,
                c.groups);
        }
        int dp_nodes = stage_nodes(m, g);
        if (c.straddle && dp_nodes <= min_leaf) {
            broken++;
            say(buf, buflen, &off, "DP: %d of %d groups straddle leaves although %d node(s) fit "
                "in one\n", c.straddle, c.groups, dp_nodes);
        }
    }
    if (m->pp > 1 && (long)m->tp * cp * m->dp >= g) {
        group_ctx c = scan_dim(t, m, p, PLAN_DIM_PP);
        if (c.same_node) {
            broken++;
            say(buf, buflen, &off, "PP: %d of %d stage pairs share a node\n", c.same_node,
                c.groups);
        }
    }
    int bad_host = 0;
    for (int r = 0; r < p->world; r++) bad_host += t->nodes[p->node[r]].excluded;
    for (int r = 0; r < p->world; r++)
        for (int i = 0; i < p->n_spares; i++) bad_host += p->node[r] == p->spares[i];
    if (bad_host) {
        broken++;
        say(buf, buflen, &off, "hosts: %d rank(s) on excluded or spare nodes\n", bad_host);
    }
    return broken;
}

/* ---- rankfiles ------------------------------------------------------------------------------- */

void plan_write_rankfile(FILE *fp, const plan_topo *t, const plan_model *m,
                         const plan_placement *p) {
    fprintf(fp, "# minitrain plan: tp=%d pp=%d dp=%d ep=%d world=%d cp=%d\n", m->tp, m->pp,
            m->dp, m->ep, p->world, cp_of(m));
    fprintf(fp, "# rank = tp_rank + tp*(cp_rank + cp*(dp_rank + dp*pp_rank)) (parallel/mesh.h); "
                "slot = the GPU index on the host\n");
    for (int i = 0; i < t->n_nodes; i++)
        if (t->nodes[i].excluded) fprintf(fp, "# excluded %s\n", t->nodes[i].name);
    for (int i = 0; i < p->n_spares; i++) fprintf(fp, "# spare %s\n", t->nodes[p->spares[i]].name);
    for (int r = 0; r < p->world; r++)
        fprintf(fp, "rank %d=%s slot=%d\n", r, t->nodes[p->node[r]].name, p->slot[r]);
}

int plan_read_rankfile(const char *path, int *tp, int *pp, int *dp, int *ep, int *world, int *cp,
                       char *err, size_t errlen) {
    *cp = 1;
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, errlen, "cannot read rankfile %s: %s", path, strerror(errno));
        return -1;
    }
    char line[1024];
    int have = 0, next = 0, lineno = 0, rc = 0;
    while (fgets(line, sizeof(line), fp)) {
        lineno++;
        int r;
        if (sscanf(line, "# minitrain plan: tp=%d pp=%d dp=%d ep=%d world=%d cp=%d", tp, pp, dp,
                   ep, world, cp) >= 5)
            have = 1;
        else if (sscanf(line, " rank %d=", &r) == 1) {
            if (r != next) {
                snprintf(err, errlen, "%s:%d: rank %d where rank %d was expected (the rank order "
                         "must be the mesh's)", path, lineno, r, next);
                rc = -1;
                break;
            }
            next++;
        }
    }
    fclose(fp);
    if (rc) return rc;
    if (!have) {
        snprintf(err, errlen, "%s: no '# minitrain plan:' header (write it with minitrain plan)",
                 path);
        return -1;
    }
    if (*cp < 1 || next != *world || (long)*tp * *cp * *pp * *dp != *world) {
        snprintf(err, errlen, "%s: %d rank lines for a layout of world %d (tp %d x cp %d x pp %d "
                 "x dp %d)", path, next, *world, *tp, *cp, *pp, *dp);
        return -1;
    }
    return 0;
}

int plan_auto_dp(const plan_topo *t, const plan_model *m, int spares, char *err, size_t errlen) {
    long gpus = 0;
    int g = 0;
    for (int i = 0; i < t->n_nodes; i++)
        if (!t->nodes[i].excluded) {
            if (!g) g = t->nodes[i].gpus;
            if (t->nodes[i].gpus == g) gpus += g;
        }
    long all = gpus;
    gpus -= (long)spares * g;
    if (gpus < 0) gpus = 0;
    int dp = (int)(gpus / ((long)m->tp * cp_of(m) * m->pp));
    if (dp < 1) {
        snprintf(err, errlen, "plan: tp x cp x pp = %d does not fit the %ld usable GPUs (%ld on "
                 "hosts not excluded, %d spare node(s) held back)", m->tp * cp_of(m) * m->pp,
                 gpus, all, spares);
        return -1;
    }
    dp -= dp % m->ep;
    if (dp < 1) {
        snprintf(err, errlen, "plan: --dp 0 gives dp %d, fewer than ep %d (dp must be a multiple "
                 "of ep): lower --ep or add GPUs", (int)(gpus / ((long)m->tp * cp_of(m) * m->pp)),
                 m->ep);
        return -1;
    }
    return dp;
}
