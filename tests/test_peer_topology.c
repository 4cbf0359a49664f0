/*
 * tests/test_peer_topology.c — tier-0 buddies chosen from the placement's topology: a topology
 * file (sched/plan.h) gives each host its leaf switch (plan_topo_host_leaf), and
 * ckpt_peer_buddies (ckpt/peer.h) then puts every rank's copy on a node behind ANOTHER leaf.
 * This is the path `train --topology FILE` takes (cmd/train.c → trainer.leaf →
 * train/checkpoint_peer.c), without the processes.
 *
 * Independent checks: the leaf names are the ones the file written here gives; the buddy map of
 * 4 nodes × 2 ranks in 2 leaves is worked out by hand below, and every buddy is checked against
 * the rule (another node, another leaf) through the names, not the indices the code returns. The
 * same ranks without leaves give a same-leaf buddy, so the topology is what made the difference.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/peer.h"
#include "sched/plan.h"

#define TU_PREFIX "test_peer_topology"
#include "tests/testutil.h"

static void write_file(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void load(plan_topo *t, const char *name, const char *text) {
    char path[TU_DIR_MAX + 64], err[512];
    tu_path(path, sizeof(path), name);
    write_file(path, text);
    plan_topo_init(t);
    int rc = plan_topo_load(t, path, err, sizeof(err));
    if (rc != 0) print_error("%s\n", err);
    assert_int_equal(rc, 0);
}

/* 4 nodes × 2 ranks (rank r on n(r/2 + 1)), n1 n2 behind rackA, n3 n4 behind rackB. */
static void test_four_nodes_two_leaves(void **state) {
    (void)state;
    plan_topo t;
    load(&t, "four.ini",
         "[node n1]\ngpus = 2\nleaf = rackA\n[node n2]\ngpus = 2\nleaf = rackA\n"
         "[node n3]\ngpus = 2\nleaf = rackB\n[node n4]\ngpus = 2\nleaf = rackB\n");
    enum { W = 8 };
    char host[W][16], leafname[W][PLAN_NAME_MAX];
    int node[W], leaf[W], buddy[W];
    for (int r = 0; r < W; r++) {
        snprintf(host[r], sizeof(host[r]), "n%d", r / 2 + 1);
        node[r] = r - r % 2; /* the node's lowest rank, as train/checkpoint_peer.c numbers it */
        leaf[r] = plan_topo_host_leaf(&t, host[r], leafname[r], sizeof(leafname[r]));
        assert_true(leaf[r] >= 0);
        assert_string_equal(leafname[r], r < 4 ? "rackA" : "rackB");
    }
    assert_int_equal(ckpt_peer_buddies(W, node, leaf, buddy), W);
    /* ring n1 n2 n3 n4: n1, n2 -> n3 (the next node behind another leaf), n3, n4 -> n1 */
    const int want[W] = {4, 5, 4, 5, 0, 1, 0, 1};
    for (int r = 0; r < W; r++) {
        assert_int_equal(buddy[r], want[r]);
        assert_string_not_equal(host[buddy[r]], host[r]);
        assert_string_not_equal(leafname[buddy[r]], leafname[r]);
    }
    /* without the topology the ring's next node is n2, behind the same leaf as n1 */
    int plain[W];
    assert_int_equal(ckpt_peer_buddies(W, node, NULL, plain), W);
    assert_int_equal(plain[0], 2);
    assert_string_equal(leafname[plain[0]], leafname[0]);
    /* a host the file does not list: no leaf, no name */
    char name[PLAN_NAME_MAX] = "x";
    assert_int_equal(plan_topo_host_leaf(&t, "n5", name, sizeof(name)), -1);
    assert_string_equal(name, "");
    plan_topo_free(&t);
}

/* [nodes PREFIX] with nodes_per_leaf names its leaves PREFIX:leafK; flags name none (leafK). */
static void test_leaf_names(void **state) {
    (void)state;
    plan_topo t;
    load(&t, "many.ini", "[nodes gpu]\ncount = 4\nfirst = 1\ngpus = 8\nnodes_per_leaf = 2\n");
    char name[PLAN_NAME_MAX];
    assert_int_equal(plan_topo_host_leaf(&t, "gpu2", name, sizeof(name)), 0);
    assert_string_equal(name, "gpu:leaf0");
    assert_int_equal(plan_topo_host_leaf(&t, "gpu3", name, sizeof(name)), 1);
    assert_string_equal(name, "gpu:leaf1");
    assert_int_equal(plan_topo_host_leaf(&t, "gpu0", name, sizeof(name)), -1);
    plan_topo_free(&t);
    plan_topo_init(&t);
    plan_topo_uniform(&t, 6, 8, 4); /* node0..node3 leaf 0, node4 node5 leaf 1 */
    assert_int_equal(plan_topo_host_leaf(&t, "node5", name, sizeof(name)), 1);
    assert_string_equal(name, "leaf1");
    assert_int_equal(plan_topo_host_leaf(&t, "node3", name, sizeof(name)), 0);
    assert_string_equal(name, "leaf0");
    plan_topo_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_four_nodes_two_leaves),
        cmocka_unit_test(test_leaf_names),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
