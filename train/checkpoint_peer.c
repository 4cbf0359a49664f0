/*
 * train/checkpoint_peer.c — the trainer's peer-replicated tier 0: own step in the node's memory,
 * the copy in a buddy's on another node, and the restart that rebuilds a lost node's tier 0 from
 * those copies (see train/checkpoint_peer.h; ckpt/peer.h has the layout and the byte format).
 *
 * Why this shape: what dies with a node is its memory, so the restart of a replaced node must
 * find every rank's state somewhere else in memory, or fall back to disk. Each rank therefore
 * keeps exactly what it needs to restart in the same layout (flat params, m, v and the state
 * blob), so a restored rank loads its own directory without reading any other rank's; the buddy
 * copy is that committed directory byte for byte. All transfers use the world communicator on
 * the main thread, in a fixed order every rank computes the same way, so no transfer waits on
 * one that is not coming; when the buddy map is a permutation (equal ranks per node) every rank
 * sends and receives at once with one sendrecv.
 */
#include "train/checkpoint_peer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/peer.h"
#include "ckpt/safetensors.h"
#include "ckpt/st_shard.h"
#include "ckpt/tiers.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/comm.h"

#define TAG_SIZE 7101
#define TAG_DATA 7102

struct ckpt_peer_tr {
    trainer *tr;
    comm *world;
    int rank, size, keep;
    int *buddy;    /* (size) buddy rank of each rank, -1 = none */
    int *node_id;  /* (size) node of each rank (lowest rank with the same name) */
    char (*node)[CKPT_PEER_NODE_MAX]; /* (size) node names */
    int permutation; /* every rank is the buddy of exactly one rank */
    int replicated;  /* some rank has a buddy */
    char t0[CKPT_PATH_MAX];  /* this node's T0 */
    char own[CKPT_PATH_MAX]; /* T0/rank_<me> */
    char mesh[160];          /* minitrain.mesh of this rank's local file */
    ckpt_peer_stats stats;
};

static void mesh_string(char *buf, size_t len, const trainer *tr, int rank) {
    const mesh *m = tr->mesh;
    snprintf(buf, len, "world=%d rank=%d tp=%d pp=%d dp=%d ep=%d zero=%d", m->world_size, rank,
             m->tp, m->pp, m->dp, m->ep, tr->cfg.zero);
}

/* ---- create ------------------------------------------------------------------------------------ */

/* All-gather a short string of every rank (names travel as floats: the copy is bitwise). */
static void gather_names(comm *c, const char *mine, char (*all)[CKPT_PEER_NODE_MAX], int size) {
    float send[CKPT_PEER_NODE_MAX / 4];
    memset(send, 0, sizeof(send));
    memcpy(send, mine, strnlen(mine, CKPT_PEER_NODE_MAX - 1));
    comm_all_gather(c, send, (float *)all, CKPT_PEER_NODE_MAX / 4);
    (void)size;
}

/* One log line: the leaf switch of every node (of its lowest rank), and where rank 0's came from. */
static void print_leaves(const ckpt_peer_tr *p, char (*leafname)[CKPT_PEER_NODE_MAX],
                         int from_topology) {
    char line[4096];
    int o = snprintf(line, sizeof(line), "tier 0 (peer): leaf switches (%s%s)",
                     from_topology ? "topology " : "",
                     from_topology ? p->tr->cfg.topology : "$MINITRAIN_LEAF");
    for (int r = 0; r < p->size && o < (int)sizeof(line) - 2 * CKPT_PEER_NODE_MAX; r++)
        if (p->node_id[r] == r)
            o += snprintf(line + o, sizeof(line) - (size_t)o, " %s=%s", p->node[r],
                          leafname[r][0] ? leafname[r] : "?");
    log_info("%s", line);
}

ckpt_peer_tr *ckpt_peer_tr_create(trainer *tr) {
    const mt_config *c = &tr->cfg;
    char node[CKPT_PEER_NODE_MAX], base[CKPT_PATH_MAX], err[512];
    ckpt_peer_node_name(node, sizeof(node));
    const char *tmpl = c->ckpt_tier0_root;
    if (tmpl[0] == 0) tmpl = getenv("MINITRAIN_SHM_DIR");
    if (tmpl == NULL || tmpl[0] == 0) tmpl = "/dev/shm/minitrain";
    int per_node = ckpt_peer_expand(base, sizeof(base), tmpl, node, err, sizeof(err));
    if (per_node < 0) mt_fail("%s", err);
    if (!c->ckpt_tier0 || (c->ckpt_replicas == 0 && per_node == 0)) return NULL;
    ckpt_peer_tr *p = callocCheck(1, sizeof(*p));
    p->tr = tr;
    p->world = tr->mesh->world;
    p->rank = tr->mesh->rank;
    p->size = tr->mesh->world_size;
    p->keep = c->ckpt_keep;
    /* T0 = base + "/<name>-<8 hex>/ckpt", the same run key as the shared tier 0 */
    char old[CKPT_PATH_MAX];
    const char *env = getenv("MINITRAIN_SHM_DIR");
    snprintf(old, sizeof(old), "%s", env ? env : "");
    setenv("MINITRAIN_SHM_DIR", base, 1);
    int rc = ckpt_tier0_root(p->t0, sizeof(p->t0), c->run_dir, c->name);
    if (env) setenv("MINITRAIN_SHM_DIR", old, 1);
    else unsetenv("MINITRAIN_SHM_DIR");
    if (rc != 0 || ckpt_peer_root(p->own, sizeof(p->own), p->t0, p->rank, 1) != 0)
        mt_fail("ckpt_tier0_root: cannot resolve the tier-0 directory under '%s' for run dir "
                 "'%s'", base, c->run_dir);
    mesh_string(p->mesh, sizeof(p->mesh), tr, p->rank);
    p->node = callocCheck((size_t)p->size, sizeof(*p->node));
    p->node_id = callocCheck((size_t)p->size, sizeof(int));
    p->buddy = callocCheck((size_t)p->size, sizeof(int));
    if (p->size > 1) gather_names(p->world, node, p->node, p->size);
    else snprintf(p->node[0], sizeof(p->node[0]), "%s", node);
    for (int r = 0; r < p->size; r++) {
        p->node[r][CKPT_PEER_NODE_MAX - 1] = 0;
        int q = 0;
        while (strcmp(p->node[q], p->node[r]) != 0) q++;
        p->node_id[r] = q;
    }
    /* leaf switches: $MINITRAIN_LEAF names this rank's leaf (a launcher that knows the
     * topology sets it), else the placement's (tr->leaf: the host's leaf in cfg.topology); when
     * no rank names one, all nodes count as one leaf */
    char (*leafname)[CKPT_PEER_NODE_MAX] = callocCheck((size_t)p->size, sizeof(*leafname));
    const char *lf = getenv("MINITRAIN_LEAF");
    if (lf == NULL || lf[0] == 0) lf = tr->leaf;
    if (p->size > 1) gather_names(p->world, lf ? lf : "", leafname, p->size);
    int *leaf = callocCheck((size_t)p->size, sizeof(int)), named = 0;
    for (int r = 0; r < p->size; r++) {
        leafname[r][CKPT_PEER_NODE_MAX - 1] = 0;
        named |= leafname[r][0] != 0;
        int q = 0;
        while (strcmp(leafname[q], leafname[r]) != 0) q++;
        leaf[r] = q;
    }
    int with = c->ckpt_replicas > 0
                   ? ckpt_peer_buddies(p->size, p->node_id, named ? leaf : NULL, p->buddy)
                   : 0;
    if (p->rank == 0 && named && with > 0) print_leaves(p, leafname, lf == tr->leaf && c->topology[0]);
    free(leaf);
    free(leafname);
    if (c->ckpt_replicas == 0)
        for (int r = 0; r < p->size; r++) p->buddy[r] = -1;
    int *held = callocCheck((size_t)p->size, sizeof(int));
    for (int r = 0; r < p->size; r++)
        if (p->buddy[r] >= 0) held[p->buddy[r]]++;
    p->replicated = with > 0;
    p->permutation = with == p->size;
    for (int r = 0; r < p->size; r++) p->permutation &= held[r] == 1;
    free(held);
    if (p->rank == 0) {
        if (c->ckpt_replicas > 0 && with == 0)
            mt_warn("ckpt_replicas = 1 but every rank runs on node '%s': tier 0 is not "
                    "replicated (MINITRAIN_NODE or SLURMD_NODENAME name the node)", node);
        else if (with > 0) {
            char line[4096];
            int o = snprintf(line, sizeof(line), "tier 0 (peer): buddies");
            for (int r = 0; r < p->size && o < (int)sizeof(line) - 64; r++)
                o += snprintf(line + o, sizeof(line) - (size_t)o, " %d@%s->%d@%s", r, p->node[r],
                              p->buddy[r], p->buddy[r] >= 0 ? p->node[p->buddy[r]] : "-");
            log_info("%s", line);
        }
    }
    return p;
}

void ckpt_peer_tr_free(ckpt_peer_tr *p) {
    if (p == NULL) return;
    free(p->buddy);
    free(p->node_id);
    free(p->node);
    free(p);
}

void ckpt_peer_tr_get_stats(const ckpt_peer_tr *p, ckpt_peer_stats *out) { *out = p->stats; }

/* ---- save -------------------------------------------------------------------------------------- */

/* This rank's own step: local.safetensors + trainer_state.json, committed, retained. */
static int save_own(ckpt_peer_tr *p, int64_t step, const float *params, const float *m,
                    const float *v, const char *state_json, char *err, size_t errlen) {
    size_t n = p->tr->model.num_params;
    st_tensor t[3] = {{"params", ST_F32, 1, {(int64_t)n}, params},
                      {"optim.m", ST_F32, 1, {(int64_t)n}, m},
                      {"optim.v", ST_F32, 1, {(int64_t)n}, v}};
    char dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
    st_meta sm;
    st_meta_init(&sm);
    int rc = st_meta_set(&sm, "minitrain.mesh", p->mesh, err, errlen);
    char *meta = rc == 0 ? st_meta_json(&sm) : NULL;
    st_meta_free(&sm);
    if (meta == NULL) return -1;
    rc = ckpt_begin(p->own, step, dir, sizeof(dir), err, errlen);
    if (rc != 0) {
        free(meta);
        return -1;
    }
    rc = fs_join(path, sizeof(path), dir, CKPT_PEER_LOCAL_FILE, err, errlen) != 0 ||
        st_write(path, t, 3, meta, err, errlen) != 0 ||
        ckpt_write_json(dir, "trainer_state.json", state_json, err, errlen) != 0 ||
        ckpt_commit(p->own, step, err, errlen) != 0;
    free(meta);
    if (rc != 0) {
        char ignored[256];
        fs_remove_tree(dir, ignored, sizeof(ignored));
        return -1;
    }
    p->stats.bytes = (int64_t)(3 * n * sizeof(float));
    return ckpt_peer_retain(p->own, p->keep, err, errlen) != 0 ? 1 : 0;
}

static void send_bytes(ckpt_peer_tr *p, const void *buf, size_t len, int to) {
    uint64_t n = len;
    comm_send(p->world, (const float *)&n, 2, to, TAG_SIZE);
    if (len) comm_send(p->world, buf, len / 4, to, TAG_DATA);
}

static void *recv_bytes(ckpt_peer_tr *p, size_t *len, int from) {
    uint64_t n = 0;
    comm_recv(p->world, (float *)&n, 2, from, TAG_SIZE);
    *len = (size_t)n;
    if (n == 0) return NULL;
    void *b = mallocCheck((size_t)n);
    comm_recv(p->world, b, (size_t)n / 4, from, TAG_DATA);
    return b;
}

/* A received copy of rank src's step: commit it under T0/peer/rank_src, keep the newest. */
static void store_held(ckpt_peer_tr *p, int src, int64_t step, const void *b, size_t len) {
    char root[CKPT_PATH_MAX], err[CKPT_MSG];
    if (b == NULL) return; /* the sender had nothing to send (its own save failed) */
    if (ckpt_peer_root(root, sizeof(root), p->t0, src, 0) != 0 ||
        ckpt_peer_unpack(root, step, b, len, err, sizeof(err)) != 0) {
        mt_warn("tier 0 (peer): copy of rank %d's step %" PRId64 " not kept: %s", src, step, err);
        return;
    }
    if (ckpt_peer_retain(root, p->keep, err, sizeof(err)) != 0)
        mt_warn("tier 0 (peer): retention of %s: %s", root, err);
}

/* Send `mine` (len bytes, NULL = nothing) to our buddy, receive from everyone whose buddy we are,
 * storing each copy with `store`. Collective; every rank walks the same order. */
static void exchange(ckpt_peer_tr *p, const void *mine, size_t len, int64_t step) {
    int me = p->rank, to = p->buddy[me];
    if (p->permutation) {
        int from = 0;
        while (p->buddy[from] != me) from++;
        uint64_t out = len, in = 0;
        comm_sendrecv(p->world, (const float *)&out, 2, to, (float *)&in, 2, from, TAG_SIZE);
        void *b = in ? mallocCheck((size_t)in) : NULL;
        comm_sendrecv(p->world, mine ? mine : (const void *)&out, len / 4, to, b ? b : (void *)&in,
                      (size_t)in / 4, from, TAG_DATA);
        store_held(p, from, step, b, (size_t)in);
        free(b);
        return;
    }
    for (int s = 0; s < p->size; s++) { /* one pair at a time, in rank order */
        if (p->buddy[s] < 0) continue;
        if (s == me) send_bytes(p, mine, len, to);
        else if (p->buddy[s] == me) {
            size_t n = 0;
            void *b = recv_bytes(p, &n, s);
            store_held(p, s, step, b, n);
            free(b);
        }
    }
}

void ckpt_peer_tr_save(ckpt_peer_tr *p, int64_t step, const float *params, const float *m,
                       const float *v, const char *state_json) {
    char err[CKPT_MSG];
    double t0 = timer_now();
    int rc = save_own(p, step, params, m, v, state_json, err, sizeof(err));
    if (rc < 0) mt_warn("tier-0 checkpoint of step %" PRId64 " (rank %d) not saved: %s", step,
                        p->rank, err);
    else if (rc > 0) mt_warn("tier 0: retention of %s: %s", p->own, err);
    double t1 = timer_now();
    p->stats.own_ms = (t1 - t0) * 1e3;
    p->stats.copy_ms = 0;
    if (!p->replicated) return;
    void *b = NULL;
    size_t len = 0;
    if (rc >= 0 && p->buddy[p->rank] >= 0 &&
        ckpt_peer_pack(p->own, step, &b, &len, err, sizeof(err)) != 0) {
        mt_warn("tier 0 (peer): step %" PRId64 " of rank %d not sent: %s", step, p->rank, err);
        b = NULL, len = 0;
    }
    exchange(p, b, len, step);
    free(b);
    p->stats.copy_ms = (timer_now() - t1) * 1e3;
    log_info("tier 0 (peer): step %" PRId64 " of rank 0: own %.1f MB in %.0f ms, copy to rank %d "
             "(node %s) %.0f ms (training stall)", step, p->stats.bytes / 1e6, p->stats.own_ms,
             p->buddy[0], p->buddy[0] >= 0 ? p->node[p->buddy[0]] : "-", p->stats.copy_ms);
}

/* ---- restart ----------------------------------------------------------------------------------- */

int ckpt_peer_tr_is_local(const char *dir) {
    char path[CKPT_PATH_MAX];
    struct stat st;
    return snprintf(path, sizeof(path), "%s/%s", dir, CKPT_PEER_LOCAL_FILE) <
               (int)sizeof(path) && stat(path, &st) == 0;
}

int ckpt_peer_tr_read_local(const char *dir, size_t n, float *params, float *m, float *v,
                            char *err, size_t errlen) {
    char path[CKPT_PATH_MAX];
    st_file f = {0};
    if (fs_join(path, sizeof(path), dir, CKPT_PEER_LOCAL_FILE, err, errlen) != 0 ||
        st_open(&f, path, err, errlen) != 0)
        return -1;
    int rc = st_read_tensor(&f, "params", params, n * sizeof(float), err, errlen) != 0 ||
             st_read_tensor(&f, "optim.m", m, n * sizeof(float), err, errlen) != 0 ||
             st_read_tensor(&f, "optim.v", v, n * sizeof(float), err, errlen) != 0;
    st_close(&f);
    return rc ? -1 : 0;
}

/* Step `step` of root verifies (sizes, CRC-32C, safetensors headers) and was saved by rank
 * `rank` of this very layout. */
static int usable(const ckpt_peer_tr *p, const char *root, int64_t step, int rank, char *err,
                  size_t errlen) {
    if (ckpt_verify(root, step, err, errlen) != 0) return 0;
    char dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX], want[160];
    st_file f = {0};
    ckpt_step_path(dir, sizeof(dir), root, step, "");
    if (fs_join(path, sizeof(path), dir, CKPT_PEER_LOCAL_FILE, err, errlen) != 0 ||
        st_open(&f, path, err, errlen) != 0)
        return 0;
    mesh_string(want, sizeof(want), p->tr, rank);
    const char *got = st_metadata(&f, "minitrain.mesh");
    int ok = got && strcmp(got, want) == 0;
    if (!ok) mt_errf(err, errlen, "%s: saved as '%s', this job is '%s'", path, got ? got : "?",
                     want);
    const st_info *t = st_find(&f, "params"); /* a buddy cannot know another stage's size */
    if (ok && rank == p->rank && (t == NULL || (size_t)t->numel != p->tr->model.num_params)) {
        mt_errf(err, errlen, "%s: %lld parameters, this rank has %zu", path,
                t ? (long long)t->numel : -1LL, p->tr->model.num_params);
        ok = 0;
    }
    st_close(&f);
    return ok;
}

/* Newest committed step <= bound in root (-1: none). */
static int64_t newest_in(const char *root, int64_t bound) {
    int64_t *s = NULL, best = -1;
    int n = 0;
    char err[CKPT_MSG];
    if (ckpt_list(root, &s, &n, err, sizeof(err)) == 0)
        for (int i = 0; i < n; i++)
            if (s[i] <= bound && s[i] > best) best = s[i];
    free(s);
    return best;
}

/* Newest step <= bound among this rank's own steps and the copies it holds. */
static int64_t newest_local(const ckpt_peer_tr *p, int64_t bound) {
    int64_t best = newest_in(p->own, bound);
    char root[CKPT_PATH_MAX];
    for (int s = 0; s < p->size; s++) {
        if (p->buddy[s] != p->rank || ckpt_peer_root(root, sizeof(root), p->t0, s, 0) != 0)
            continue;
        int64_t b = newest_in(root, bound);
        if (b > best) best = b;
    }
    return best;
}

static double max_all(ckpt_peer_tr *p, double x) {
    comm_all_reduce_f64(p->world, &x, 1, COMM_MAX);
    return x;
}

/* For step `step`: own[r] = rank r's own copy is usable, held[r] = its buddy's is (only looked at
 * where own[r] = 0). Both arrays (size) end up identical on every rank. */
static void availability(ckpt_peer_tr *p, int64_t step, double *own, double *held) {
    char err[CKPT_MSG], root[CKPT_PATH_MAX];
    memset(own, 0, sizeof(double) * (size_t)p->size);
    memset(held, 0, sizeof(double) * (size_t)p->size);
    own[p->rank] = usable(p, p->own, step, p->rank, err, sizeof(err));
    if (!own[p->rank] && newest_in(p->own, step) == step)
        mt_warn("tier 0: rank %d's own step %" PRId64 " is unusable: %s", p->rank, step, err);
    comm_all_reduce_f64(p->world, own, (size_t)p->size, COMM_MAX);
    for (int s = 0; s < p->size; s++) {
        if (own[s] || p->buddy[s] != p->rank) continue;
        if (ckpt_peer_root(root, sizeof(root), p->t0, s, 0) != 0) continue;
        held[s] = usable(p, root, step, s, err, sizeof(err));
        if (!held[s])
            mt_warn("tier 0 (peer): rank %d's copy of rank %d's step %" PRId64 " is unusable: %s",
                    p->rank, s, step, err);
    }
    comm_all_reduce_f64(p->world, held, (size_t)p->size, COMM_MAX);
}

/* Ranks whose own copy of `step` is unusable get their buddy's, re-committed in their own tier
 * 0 and verified. Returns 1 when every restored rank verifies, else 0 (collective). */
static int restore(ckpt_peer_tr *p, int64_t step, const double *own) {
    int me = p->rank, fail = 0;
    char err[CKPT_MSG], root[CKPT_PATH_MAX];
    for (int r = 0; r < p->size; r++) {
        if (own[r]) continue;
        int b = p->buddy[r];
        if (me == b) {
            void *buf = NULL;
            size_t len = 0;
            if (ckpt_peer_root(root, sizeof(root), p->t0, r, 0) != 0 ||
                ckpt_peer_pack(root, step, &buf, &len, err, sizeof(err)) != 0) {
                mt_warn("tier 0 (peer): cannot send rank %d's step %" PRId64 ": %s", r, step, err);
                buf = NULL, len = 0;
            }
            send_bytes(p, buf, len, r);
            free(buf);
        } else if (me == r) {
            double t = timer_now();
            size_t len = 0;
            void *buf = recv_bytes(p, &len, b);
            if (buf == NULL ||
                ckpt_peer_unpack(p->own, step, buf, len, err, sizeof(err)) != 0 ||
                !usable(p, p->own, step, me, err, sizeof(err))) {
                mt_warn("tier 0 (peer): rank %d could not restore step %" PRId64 " from rank %d "
                        "(node %s): %s", me, step, b, p->node[b], buf ? err : "nothing received");
                fail = 1;
            } else {
                fprintf(stdout, "rank %d (node %s): step %" PRId64 " restored from tier 0 (peer) "
                        "of rank %d (node %s), %.1f MB, CRC-32C verified, %.0f ms\n", me,
                        p->node[me], step, b, p->node[b], len / 1e6, (timer_now() - t) * 1e3);
                fflush(stdout);
            }
            free(buf);
        }
    }
    return max_all(p, fail) == 0;
}

int ckpt_peer_tr_choose(ckpt_peer_tr *p, int64_t want, int64_t newer_elsewhere, char *dir,
                        size_t len, int *fetched, int64_t *step_out) {
    double *own = mallocCheck(sizeof(double) * (size_t)p->size);
    double *held = mallocCheck(sizeof(double) * (size_t)p->size);
    int64_t bound = want >= 0 ? want : INT64_MAX, step = -1;
    for (int tries = 0; tries < 1000; tries++) {
        int64_t s = (int64_t)max_all(p, (double)newest_local(p, bound));
        if (s < 0 || (want >= 0 && s != want)) break;
        availability(p, s, own, held);
        int all = 1;
        for (int r = 0; r < p->size; r++) all &= own[r] || held[r];
        if (all) {
            step = s;
            break;
        }
        if (p->rank == 0)
            log_info("tier 0: step %" PRId64 " is not complete in memory (some rank has neither "
                     "its own copy nor its buddy's)", s);
        bound = s - 1;
    }
    int rc = 0;
    if (step >= 0 && want < 0 && newer_elsewhere > step) {
        if (p->rank == 0)
            log_info("tier 0: newest complete step %" PRId64 " is older than step %" PRId64
                     " of tier 1/2; using those", step, newer_elsewhere);
    } else if (step >= 0) {
        int n = 0;
        for (int r = 0; r < p->size; r++) n += !own[r];
        if (n == 0 || restore(p, step, own)) {
            ckpt_step_path(dir, len, p->own, step, "");
            *fetched = n;
            *step_out = step;
            rc = 1;
        } else if (p->rank == 0) {
            log_info("tier 0 (peer): a restored copy did not verify; falling back to tier 1");
        }
    }
    free(own);
    free(held);
    return rc;
}

void ckpt_peer_tr_copies(const ckpt_peer_tr *p, int rank, int64_t step, char *own, char *held,
                         size_t len) {
    char root[CKPT_PATH_MAX];
    own[0] = held[0] = 0;
    if (rank == p->rank) ckpt_step_path(own, len, p->own, step, "");
    if (rank >= 0 && rank < p->size && p->buddy[rank] == p->rank &&
        ckpt_peer_root(root, sizeof(root), p->t0, rank, 0) == 0)
        ckpt_step_path(held, len, root, step, "");
}

/* ---- end of run -------------------------------------------------------------------------------- */

void ckpt_peer_tr_drop(ckpt_peer_tr *p) {
    char err[CKPT_MSG], root[CKPT_PATH_MAX];
    if (fs_remove_tree(p->own, err, sizeof(err)) != 0) mt_warn("%s", err);
    for (int s = 0; s < p->size; s++)
        if (p->buddy[s] == p->rank && ckpt_peer_root(root, sizeof(root), p->t0, s, 0) == 0 &&
            fs_remove_tree(root, err, sizeof(err)) != 0)
            mt_warn("%s", err);
    /* the emptied directories above (peer/, ckpt/, <name>-<hash>/): whoever is last removes
     * them; rmdir fails harmlessly while another rank of the node still has files there */
    if (fs_join(root, sizeof(root), p->t0, "peer", err, sizeof(err)) == 0) rmdir(root);
    rmdir(p->t0);
    char *slash = strrchr(p->t0, '/');
    if (slash) {
        *slash = 0;
        rmdir(p->t0);
        *slash = '/';
    }
}
