/*
 * sched/replan.c — rank → host of the active rankfile, and the re-plan after a cordon
 * (sched/replan.h).
 *
 * The re-plan goes through sched/plan's own placer, so a relaunched job keeps the rules a planned
 * one has (TP inside a node, DP rail-aligned, PP across nodes) and cordoned hosts are simply
 * "excluded" nodes to it. Node order is the host list's (the allocation's), so surviving nodes
 * keep their ranks whenever the placer's rules allow and the spare takes the lost node's.
 */
#include "sched/replan.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "sched/plan.h"
#include "sched/slurm.h"

void replan_free(replan_rankfile *rf) {
    free(rf->host);
    free(rf->slot);
    memset(rf, 0, sizeof(*rf));
}

int replan_read(const char *path, replan_rankfile *rf, char *err, size_t errlen) {
    memset(rf, 0, sizeof(*rf));
    if (plan_read_rankfile(path, &rf->tp, &rf->pp, &rf->dp, &rf->ep, &rf->world, &rf->cp, err,
                           errlen))
        return -1;
    rf->host = calloc((size_t)rf->world, sizeof(*rf->host));
    rf->slot = calloc((size_t)rf->world, sizeof(*rf->slot));
    FILE *fp = fopen(path, "r");
    if (!rf->host || !rf->slot || !fp) {
        snprintf(err, errlen, "cannot read rankfile %s: %s", path, strerror(errno));
        if (fp) fclose(fp);
        replan_free(rf);
        return -1;
    }
    char line[1024], name[256];
    int r, lineno = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), fp)) {
        lineno++;
        if (sscanf(line, "# spare %255s", name) == 1) rf->n_spares++;
        if (sscanf(line, " rank %d=%255[^ \t\n]", &r, name) != 2) continue;
        /* plan_read_rankfile checked 0..world-1 in order; checked again, in case the file
         * changed between the two reads */
        if (r < 0 || r >= rf->world) {
            snprintf(err, errlen, "%s:%d: rank %d outside 0..%d (did the file change?)", path,
                     lineno, r, rf->world - 1);
            rc = -1;
        } else if (strlen(name) >= REPLAN_HOST_MAX) {
            snprintf(err, errlen, "%s:%d: host name longer than %d bytes", path, lineno,
                     REPLAN_HOST_MAX - 1);
            rc = -1;
        } else {
            memcpy(rf->host[r], name, strlen(name) + 1);
            /* "slot=S"; Open MPI's socket:core forms ("slot=1:0-3") are left unchecked (-1) */
            const char *sl = strstr(line, " slot=");
            char *end = NULL;
            long v = sl ? strtol(sl + 6, &end, 10) : -1;
            rf->slot[r] = sl && end != sl + 6 && (*end == 0 || isspace((unsigned char)*end)) &&
                                  v >= 0 && v <= INT_MAX ? (int)v : -1;
            if (sl && sl[6] == '-') {
                snprintf(err, errlen, "%s:%d: rank %d: a negative slot", path, lineno, r);
                rc = -1;
            }
        }
    }
    fclose(fp);
    if (rc) replan_free(rf);
    return rc;
}

static int host_index(const sup_hosts *h, const char *name) {
    for (int i = 0; i < h->n; i++)
        if (!strcmp(h->name[i], name)) return i;
    return -1;
}

int replan_host_of_rank(const replan_rankfile *rf, const sup_hosts *h, int rank) {
    if (rank < 0 || rank >= rf->world) return -1;
    return host_index(h, rf->host[rank]);
}

int replan_check_hosts(const replan_rankfile *rf, const sup_hosts *h, char *err, size_t errlen) {
    for (int r = 0; r < rf->world; r++)
        if (host_index(h, rf->host[r]) < 0) {
            snprintf(err, errlen, "the rankfile places rank %d on host %s, which is not among the "
                     "job's hosts (the Slurm allocation or --hostfile)", r, rf->host[r]);
            return -1;
        } else if (rf->slot[r] >= h->slots[host_index(h, rf->host[r])]) {
            int n = h->slots[host_index(h, rf->host[r])];
            snprintf(err, errlen, "the rankfile places rank %d on host %s slot %d, but %s has %d "
                     "slot%s (0..%d in the Slurm allocation or --hostfile)", r, rf->host[r],
                     rf->slot[r], rf->host[r], n, n == 1 ? "" : "s", n - 1);
            return -1;
        }
    return 0;
}

static int cmp_node_name(const void *a, const void *b) {
    return strcmp((*(const plan_node *const *)a)->name, (*(const plan_node *const *)b)->name);
}

int replan_check_topology(const replan_rankfile *rf, const plan_topo *t, char *err,
                          size_t errlen) {
    /* the topology's nodes sorted by name: a file may list a million hosts */
    const plan_node **by_name = malloc(sizeof(*by_name) * (size_t)(t->n_nodes + 1));
    if (by_name == NULL) {
        snprintf(err, errlen, "out of memory checking the rankfile's slots");
        return -1;
    }
    for (int i = 0; i < t->n_nodes; i++) by_name[i] = &t->nodes[i];
    qsort(by_name, (size_t)t->n_nodes, sizeof(*by_name), cmp_node_name);
    int rc = 0;
    for (int r = 0; r < rf->world && rc == 0; r++) {
        plan_node key;
        snprintf(key.name, sizeof(key.name), "%s", rf->host[r]);
        const plan_node *kp = &key, **hit = rf->slot[r] < 0 ? NULL :
            bsearch(&kp, by_name, (size_t)t->n_nodes, sizeof(*by_name), cmp_node_name);
        if (hit && rf->slot[r] >= (*hit)->gpus) {
            snprintf(err, errlen, "the rankfile places rank %d on host %s slot %d, but %s has "
                     "%d slot%s (0..%d) in the topology", r, rf->host[r], rf->slot[r],
                     rf->host[r], (*hit)->gpus, (*hit)->gpus == 1 ? "" : "s", (*hit)->gpus - 1);
            rc = -1;
        }
    }
    free(by_name);
    return rc;
}

/* The topology to place on: the allocation's (leaves from Slurm) inside one, else h's hosts as
 * nodes of h->slots slots in one leaf; cordoned hosts excluded. */
static int topology(plan_topo *t, const sup_hosts *h, char *err, size_t errlen) {
    plan_topo_init(t);
    if (slurm_in_allocation()) {
        if (plan_topo_from_slurm(t, err, errlen) != 0) return -1;
    } else {
        for (int i = 0; i < h->n; i++) plan_topo_add(t, h->name[i], h->slots[i], h->slots[i], 1, 0);
    }
    for (int i = 0; i < h->n; i++) {
        if (!h->cordoned[i]) continue;
        for (int k = 0; k < t->n_nodes; k++)
            if (!strcmp(t->nodes[k].name, h->name[i])) t->nodes[k].excluded = 1;
    }
    return 0;
}

int replan_write(replan_rankfile *rf, const sup_hosts *h, int spares, const char *out, char *err,
                 size_t errlen) {
    plan_topo t;
    if (topology(&t, h, err, errlen) != 0) {
        plan_topo_free(&t);
        return -1;
    }
    /* only the layout matters for placing; the shape (GPT-2 124M's) only feeds the cost model */
    plan_model m = {.tp = rf->tp, .pp = rf->pp, .dp = rf->dp, .ep = rf->ep, .cp = rf->cp, .n_layer = 12,
                    .d_model = 768, .seq_len = 1024, .vocab_size = 50257, .micro_batch = 1,
                    .microbatches = 8, .bytes_per_elem = 4};
    plan_placement p;
    char perr[512];
    int rc = plan_place(&t, &m, spares, PLAN_ORDER_PLANNED, &p, perr, sizeof(perr));
    if (rc != 0) {
        snprintf(err, errlen, "re-plan of tp %d x pp %d x dp %d without the cordoned hosts: %s",
                 rf->tp, rf->pp, rf->dp, perr);
        plan_topo_free(&t);
        return -1;
    }
    fs_afile af; /* atomic (core/fs.h): mpirun never reads half a rankfile */
    FILE *fp = fs_stream_open(&af, out, err, errlen);
    if (fp) {
        plan_write_rankfile(fp, &t, &m, &p);
        rc = fs_stream_commit(&af, fp, err, errlen);
    } else {
        rc = -1;
    }
    if (rc == 0) {
        rf->n_spares = p.n_spares;
        for (int r = 0; r < rf->world; r++) {
            snprintf(rf->host[r], REPLAN_HOST_MAX, "%s", t.nodes[p.node[r]].name);
            rf->slot[r] = p.slot[r];
        }
    }
    plan_placement_free(&p);
    plan_topo_free(&t);
    return rc;
}
