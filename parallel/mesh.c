/*
 * parallel/mesh.c — rank layout and process groups (see parallel/mesh.h).
 */
#include "parallel/mesh.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

int mesh_check(int world_size, int tp, int cp, int pp, int *dp, int ep, char *err,
               size_t errlen) {
    if (tp < 1 || cp < 1 || pp < 1 || ep < 1 || *dp < 0) {
        snprintf(err, errlen, "parallel degrees must be positive (tp %d, cp %d, pp %d, dp %d, "
                 "ep %d)", tp, cp, pp, *dp, ep);
        return -1;
    }
    int fixed = tp * cp * pp; /* the degrees given; dp = 0 takes the rest of the world */
    char what[64];
    if (cp > 1) snprintf(what, sizeof(what), "tp %d x cp %d x pp %d", tp, cp, pp);
    else snprintf(what, sizeof(what), "tp %d x pp %d", tp, pp);
    if (*dp == 0) {
        if (world_size % fixed != 0) {
            snprintf(err, errlen, "world size %d is not divisible by %s = %d", world_size, what,
                     fixed);
            return -1;
        }
        *dp = world_size / fixed;
    }
    if (fixed * *dp != world_size) {
        snprintf(err, errlen, "layout %s x dp %d = %d ranks does not match the world size %d "
                 "(launch with mpirun -np %d, or change the degrees)", what, *dp, fixed * *dp,
                 world_size, fixed * *dp);
        return -1;
    }
    if (*dp % ep != 0) {
        snprintf(err, errlen, "ep %d must divide dp %d (experts are sharded inside the "
                 "data-parallel group)", ep, *dp);
        return -1;
    }
    return 0;
}

void mesh_coords(int rank, int tp, int cp, int pp, int dp, int ep, int *tp_rank, int *cp_rank,
                 int *dp_rank, int *pp_rank, int *ep_rank) {
    (void)pp;
    *tp_rank = rank % tp;
    *cp_rank = (rank / tp) % cp;
    *dp_rank = (rank / (tp * cp)) % dp;
    *pp_rank = rank / (tp * cp * dp);
    *ep_rank = *dp_rank % ep;
}

int mesh_rank_of(int tp, int cp, int dp, int tp_rank, int cp_rank, int dp_rank, int pp_rank) {
    return tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank));
}

void mesh_split_key(int rank, int tp, int cp, int pp, int dp, int ep, mesh_group g, int *color,
                    int *key) {
    int t, c, d, p, e;
    mesh_coords(rank, tp, cp, pp, dp, ep, &t, &c, &d, &p, &e);
    int ep_block = d / ep; /* which replica of the expert set */
    int ends = p == 0 || p == pp - 1;
    int tc = t + tp * c;   /* (tp, cp) place: the id of a DP, PP, EP or EDP group's slice */
    /* colors: a unique id of the coordinates the group shares; key orders ranks in the group */
    switch (g) {
    case MESH_TP: *color = c + cp * (d + dp * p), *key = t; break;
    case MESH_DP: *color = tc + tp * cp * p, *key = d; break;
    case MESH_PP: *color = tc + tp * cp * d, *key = p; break;
    case MESH_EP: *color = (tc + tp * cp * p) * dp + ep_block, *key = e; break;
    case MESH_EDP: *color = (tc + tp * cp * p) * ep + e, *key = ep_block; break;
    case MESH_EMBED: *color = ends ? tc + tp * cp * d : tp * cp * dp + rank, *key = p; break;
    case MESH_CP: *color = t + tp * (d + dp * p), *key = c; break;
    case MESH_DPCP: *color = t + tp * p, *key = c + cp * d; break;
    default: mtCheck(0, "mesh_split_key: unknown group");
    }
}

void mesh_init(mesh *m, comm *world, int tp, int cp, int pp, int dp, int ep) {
    memset(m, 0, sizeof(*m));
    m->world = world;
    m->world_size = comm_size(world);
    m->rank = comm_rank(world);
    m->tp = tp, m->cp = cp, m->pp = pp, m->dp = dp, m->ep = ep;
    mesh_coords(m->rank, tp, cp, pp, dp, ep, &m->tp_rank, &m->cp_rank, &m->dp_rank, &m->pp_rank,
                &m->ep_rank);
    static const char *const NAME[MESH_NGROUPS] = {"tp",    "dp", "pp", "ep",
                                                   "edp",   "embed", "cp", "dpcp"};
    comm **group[MESH_NGROUPS] = {&m->tp_group,  &m->dp_group,    &m->pp_group,
                                  &m->ep_group,  &m->edp_group,   &m->embed_group,
                                  &m->cp_group,  &m->dpcp_group};
    for (int g = 0; g < MESH_NGROUPS; g++) { /* the same order on every rank: collective */
        int color, key;
        mesh_split_key(m->rank, tp, cp, pp, dp, ep, (mesh_group)g, &color, &key);
        *group[g] = comm_split(world, color, key, NAME[g]);
    }
}

/* Format "[a,b,c]" of the world ranks that share this rank's group along one dimension. */
static void members(const mesh *m, int r, char which, char *buf, size_t cap) {
    int t, c, d, p, e;
    mesh_coords(r, m->tp, m->cp, m->pp, m->dp, m->ep, &t, &c, &d, &p, &e);
    size_t n = 0;
    n += snprintf(buf + n, cap - n, "[");
    int cnt = which == 't' ? m->tp : which == 'c' ? m->cp : which == 'd' ? m->dp : m->pp;
    for (int i = 0; i < cnt && n < cap; i++) {
        int q = mesh_rank_of(m->tp, m->cp, m->dp, which == 't' ? i : t, which == 'c' ? i : c,
                             which == 'd' ? i : d, which == 'p' ? i : p);
        n += snprintf(buf + n, cap - n, "%s%d", i ? "," : "", q);
    }
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

void mesh_print(const mesh *m) {
    if (m->rank != 0) return;
    if (m->cp > 1)
        printf("layout: world %d = tp %d x cp %d x pp %d x dp %d (ep %d inside dp) | order: tp "
               "fastest, then cp, then dp, then pp\n", m->world_size, m->tp, m->cp, m->pp, m->dp,
               m->ep);
    else
        printf("layout: world %d = tp %d x pp %d x dp %d (ep %d inside dp) | order: tp fastest, "
               "then dp, then pp\n", m->world_size, m->tp, m->pp, m->dp, m->ep);
    /* coordinates are a pure function of the rank, so rank 0 can print every rank's view */
    for (int r = 0; r < m->world_size; r++) {
        char t[256], c[256], d[256], p[256];
        int tr, cr, dr, pr, er;
        mesh_coords(r, m->tp, m->cp, m->pp, m->dp, m->ep, &tr, &cr, &dr, &pr, &er);
        members(m, r, 't', t, sizeof(t));
        members(m, r, 'c', c, sizeof(c));
        members(m, r, 'd', d, sizeof(d));
        members(m, r, 'p', p, sizeof(p));
        if (m->cp > 1)
            printf("  rank %d: tp %d, cp %d, dp %d, pp %d | tp group %s, cp ring %s, dp group %s, "
                   "pp group %s\n", r, tr, cr, dr, pr, t, c, d, p);
        else
            printf("  rank %d: tp %d, dp %d, pp %d | tp group %s, dp group %s, pp group %s\n", r,
                   tr, dr, pr, t, d, p);
    }
    fflush(stdout);
}

void mesh_free(mesh *m) {
    comm_free(m->tp_group);
    comm_free(m->dp_group);
    comm_free(m->pp_group);
    comm_free(m->ep_group);
    comm_free(m->edp_group);
    comm_free(m->embed_group);
    comm_free(m->cp_group);
    comm_free(m->dpcp_group);
    memset(m, 0, sizeof(*m));
}
