/*
 * parallel/mesh.c — rank layout and process groups (see parallel/mesh.h).
 */
#include "parallel/mesh.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

int mesh_check(int world_size, int tp, int pp, int *dp, int ep, char *err, size_t errlen) {
    if (tp < 1 || pp < 1 || ep < 1 || *dp < 0) {
        snprintf(err, errlen, "parallel degrees must be positive (tp %d, pp %d, dp %d, ep %d)", tp,
                 pp, *dp, ep);
        return -1;
    }
    if (*dp == 0) {
        if (world_size % (tp * pp) != 0) {
            snprintf(err, errlen, "world size %d is not divisible by tp x pp = %d x %d", world_size,
                     tp, pp);
            return -1;
        }
        *dp = world_size / (tp * pp);
    }
    if (tp * pp * *dp != world_size) {
        snprintf(err, errlen, "layout tp %d x pp %d x dp %d = %d ranks does not match the world "
                 "size %d (launch with mpirun -np %d, or change the degrees)", tp, pp, *dp,
                 tp * pp * *dp, world_size, tp * pp * *dp);
        return -1;
    }
    if (*dp % ep != 0) {
        snprintf(err, errlen, "ep %d must divide dp %d (experts are sharded inside the "
                 "data-parallel group)", ep, *dp);
        return -1;
    }
    return 0;
}

void mesh_coords(int rank, int tp, int pp, int dp, int ep, int *tp_rank, int *dp_rank,
                 int *pp_rank, int *ep_rank) {
    (void)pp;
    *tp_rank = rank % tp;
    *dp_rank = (rank / tp) % dp;
    *pp_rank = rank / (tp * dp);
    *ep_rank = *dp_rank % ep;
}

void mesh_split_key(int rank, int tp, int pp, int dp, int ep, mesh_group g, int *color,
                    int *key) {
    int t, d, p, e;
    mesh_coords(rank, tp, pp, dp, ep, &t, &d, &p, &e);
    int ep_block = d / ep; /* which replica of the expert set */
    int ends = p == 0 || p == pp - 1;
    /* colors: a unique id of the coordinates the group shares; key orders ranks in the group */
    switch (g) {
    case MESH_TP: *color = d + dp * p, *key = t; break;
    case MESH_DP: *color = t + tp * p, *key = d; break;
    case MESH_PP: *color = t + tp * d, *key = p; break;
    case MESH_EP: *color = (t + tp * p) * dp + ep_block, *key = e; break;
    case MESH_EDP: *color = (t + tp * p) * ep + e, *key = ep_block; break;
    case MESH_EMBED: *color = ends ? t + tp * d : tp * dp + rank, *key = p; break;
    default: mtCheck(0, "mesh_split_key: unknown group");
    }
}

void mesh_init(mesh *m, comm *world, int tp, int pp, int dp, int ep) {
    memset(m, 0, sizeof(*m));
    m->world = world;
    m->world_size = comm_size(world);
    m->rank = comm_rank(world);
    m->tp = tp, m->pp = pp, m->dp = dp, m->ep = ep;
    mesh_coords(m->rank, tp, pp, dp, ep, &m->tp_rank, &m->dp_rank, &m->pp_rank, &m->ep_rank);
    static const char *const NAME[MESH_NGROUPS] = {"tp", "dp", "pp", "ep", "edp", "embed"};
    comm **group[MESH_NGROUPS] = {&m->tp_group, &m->dp_group,  &m->pp_group,
                                  &m->ep_group, &m->edp_group, &m->embed_group};
    for (int g = 0; g < MESH_NGROUPS; g++) { /* the same order on every rank: collective */
        int color, key;
        mesh_split_key(m->rank, tp, pp, dp, ep, (mesh_group)g, &color, &key);
        *group[g] = comm_split(world, color, key, NAME[g]);
    }
}

/* Format "[a,b,c]" of the world ranks that share this rank's group along one dimension. */
static void members(const mesh *m, int r, char which, char *buf, size_t cap) {
    int tp = m->tp, dp = m->dp;
    int t = r % tp, d = (r / tp) % dp, p = r / (tp * dp);
    size_t n = 0;
    n += snprintf(buf + n, cap - n, "[");
    int cnt = which == 't' ? tp : which == 'd' ? dp : m->pp;
    for (int i = 0; i < cnt && n < cap; i++) {
        int tt = which == 't' ? i : t, dd = which == 'd' ? i : d, pp = which == 'p' ? i : p;
        n += snprintf(buf + n, cap - n, "%s%d", i ? "," : "", tt + tp * (dd + dp * pp));
    }
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

void mesh_print(const mesh *m) {
    if (m->rank != 0) return;
    printf("layout: world %d = tp %d x pp %d x dp %d (ep %d inside dp) | order: tp fastest, then "
           "dp, then pp\n", m->world_size, m->tp, m->pp, m->dp, m->ep);
    /* coordinates are a pure function of the rank, so rank 0 can print every rank's view */
    for (int r = 0; r < m->world_size; r++) {
        char t[256], d[256], p[256];
        members(m, r, 't', t, sizeof(t));
        members(m, r, 'd', d, sizeof(d));
        members(m, r, 'p', p, sizeof(p));
        printf("  rank %d: tp %d, dp %d, pp %d | tp group %s, dp group %s, pp group %s\n", r,
               r % m->tp, (r / m->tp) % m->dp, r / (m->tp * m->dp), t, d, p);
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
    memset(m, 0, sizeof(*m));
}
