/*
 * tests/test_plan.c — the placement planner (sched/plan.h): the rules on example topologies, the
 * cost model against values worked out by hand below, link classes of hand-made placements,
 * topology files and rankfiles.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "sched/plan.h"

static plan_model model(int tp, int pp, int dp, int ep) {
    plan_model m = {.tp = tp, .pp = pp, .dp = dp, .ep = ep, .n_layer = 12, .d_model = 768,
                    .seq_len = 1024, .vocab_size = 50257, .micro_batch = 1, .microbatches = 8,
                    .bytes_per_elem = 4};
    return m;
}

static plan_link dim_link(const plan_topo *t, const plan_model *m, const plan_placement *p,
                          plan_dim d) {
    plan_cost c;
    plan_cost_eval(t, m, p, &c);
    return c.link[d];
}

/* 4 nodes x 8 GPUs, 2 nodes per leaf, tp 4 x pp 2 x dp 4: a node holds 2 TP groups (dp ranks
 * 2k, 2k+1), a stage (16 ranks) fills one leaf, stage 1 is the other leaf. */
static void test_uniform_rules(void **state) {
    (void)state;
    plan_topo t;
    plan_topo_init(&t);
    plan_topo_uniform(&t, 4, 8, 2);
    assert_int_equal(t.n_leaves, 2);
    plan_model m = model(4, 2, 4, 1);
    plan_placement p;
    char err[256], rules[1024];
    assert_int_equal(plan_place(&t, &m, 0, PLAN_ORDER_PLANNED, &p, err, sizeof(err)), 0);
    assert_int_equal(p.world, 32);
    /* rank = t + 4 (d + 4 p): rank 13 = (t 1, d 3, p 0) -> node1 slot 5; rank 16 -> node2 */
    assert_int_equal(p.node[13], 1);
    assert_int_equal(p.slot[13], 5);
    assert_int_equal(p.node[16], 2);
    assert_int_equal(plan_check_rules(&t, &m, &p, rules, sizeof(rules)), 0);
    assert_string_equal(rules, "");
    assert_int_equal(dim_link(&t, &m, &p, PLAN_DIM_TP), PLAN_LINK_DOMAIN);
    assert_int_equal(dim_link(&t, &m, &p, PLAN_DIM_DP), PLAN_LINK_LEAF);
    assert_int_equal(dim_link(&t, &m, &p, PLAN_DIM_PP), PLAN_LINK_SPINE);
    plan_placement_free(&p);

    /* the naive order (round robin over hosts) puts TP neighbours on different nodes */
    assert_int_equal(plan_place(&t, &m, 0, PLAN_ORDER_NAIVE, &p, err, sizeof(err)), 0);
    assert_int_equal(p.node[1], 1);
    assert_int_equal(p.slot[5], 1);
    assert_true(plan_check_rules(&t, &m, &p, rules, sizeof(rules)) >= 1);
    assert_non_null(strstr(rules, "TP: 8 of 8 groups leave"));
    assert_int_equal(dim_link(&t, &m, &p, PLAN_DIM_TP), PLAN_LINK_SPINE);
    plan_placement_free(&p);
    plan_topo_free(&t);
}

/* EP inside the node: tp 2, ep 4 -> 8 GPUs = one node per EP group. */
static void test_ep_in_domain(void **state) {
    (void)state;
    plan_topo t;
    plan_topo_init(&t);
    plan_topo_uniform(&t, 4, 8, 0);
    plan_model m = model(2, 1, 16, 4);
    m.moe_every = 2;
    m.top_k = 2;
    plan_placement p;
    char err[256], rules[1024];
    assert_int_equal(plan_place(&t, &m, 0, PLAN_ORDER_PLANNED, &p, err, sizeof(err)), 0);
    assert_int_equal(plan_check_rules(&t, &m, &p, rules, sizeof(rules)), 0);
    assert_int_equal(dim_link(&t, &m, &p, PLAN_DIM_EP), PLAN_LINK_DOMAIN);
    /* DP spans 4 nodes at the same slots of each: rail-aligned, one leaf */
    assert_int_equal(dim_link(&t, &m, &p, PLAN_DIM_DP), PLAN_LINK_LEAF);
    plan_placement_free(&p);
    plan_topo_free(&t);
}

/* 6 nodes, 3 per leaf, tp 8 x pp 2 x dp 2, one spare: a stage needs 2 nodes. Host order puts
 * stage 1 on node2 (leaf 0) + node3 (leaf 1): its DP groups straddle leaves. First fit takes
 * node3 + node4 and leaves node2 (and node5) over; the spare is node2 (a leaf with ranks). */
static void test_leaf_alignment_and_spares(void **state) {
    (void)state;
    plan_topo t;
    plan_topo_init(&t);
    plan_topo_uniform(&t, 6, 8, 3);
    plan_model m = model(8, 2, 2, 1);
    plan_placement p, q;
    char err[256], rules[1024];
    assert_int_equal(plan_place(&t, &m, 1, PLAN_ORDER_PLANNED, &p, err, sizeof(err)), 0);
    assert_int_equal(p.node[8], 1);
    assert_int_equal(p.node[16], 3);
    assert_int_equal(p.node[24], 4);
    assert_int_equal(p.n_spares, 1);
    assert_int_equal(p.spares[0], 2);
    assert_int_equal(plan_check_rules(&t, &m, &p, rules, sizeof(rules)), 0);
    assert_int_equal(dim_link(&t, &m, &p, PLAN_DIM_DP), PLAN_LINK_LEAF);

    assert_int_equal(plan_place(&t, &m, 1, PLAN_ORDER_MEGATRON, &q, err, sizeof(err)), 0);
    assert_int_equal(q.node[16], 2);
    assert_int_equal(q.node[24], 3);
    assert_int_equal(dim_link(&t, &m, &q, PLAN_DIM_DP), PLAN_LINK_SPINE);
    assert_int_equal(plan_check_rules(&t, &m, &q, rules, sizeof(rules)), 1);
    assert_non_null(strstr(rules, "straddle"));
    /* the DP time is the spine's: twice the leaf's at oversubscription 2 */
    plan_cost cp, cq;
    plan_cost_eval(&t, &m, &p, &cp);
    plan_cost_eval(&t, &m, &q, &cq);
    assert_true(fabs(cq.seconds[PLAN_DIM_DP] - 2 * cp.seconds[PLAN_DIM_DP]) <
                1e-12 + 1e-9 * cp.seconds[PLAN_DIM_DP]);
    plan_placement_free(&p);
    plan_placement_free(&q);
    plan_topo_free(&t);
}

static void test_excluded_never_used(void **state) {
    (void)state;
    plan_topo t;
    plan_topo_init(&t);
    plan_topo_uniform(&t, 5, 8, 0);
    char err[256];
    assert_int_equal(plan_topo_exclude(&t, "node1", err, sizeof(err)), 0);
    assert_int_equal(plan_topo_exclude(&t, "node9", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "node9"));
    plan_model m = model(8, 2, 1, 1);
    plan_placement p;
    for (int o = 0; o < 3; o++) {
        assert_int_equal(plan_place(&t, &m, 2, (plan_order)o, &p, err, sizeof(err)), 0);
        for (int r = 0; r < p.world; r++) {
            assert_int_not_equal(p.node[r], 1);
            for (int s = 0; s < p.n_spares; s++) assert_int_not_equal(p.node[r], p.spares[s]);
        }
        assert_int_equal(p.n_spares, 2);
        plan_placement_free(&p);
    }
    /* 4 usable nodes cannot hold 2 nodes of ranks + 3 spares */
    assert_int_equal(plan_place(&t, &m, 3, PLAN_ORDER_PLANNED, &p, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "4 usable"));
    plan_topo_free(&t);
}

/* Link classes of hand-made placements on 2 nodes x 8 GPUs with 8 rails (GPU g -> rail g) and 2
 * nodes x 8 GPUs with 2 domains of 4 each. */
static void test_link_classes(void **state) {
    (void)state;
    plan_topo t;
    plan_topo_init(&t);
    plan_topo_add(&t, "a", 8, 4, 8, 0);
    plan_topo_add(&t, "b", 8, 4, 8, 0);
    plan_topo_add(&t, "c", 8, 4, 2, 1); /* 2 NICs: GPUs 0-3 rail 0, 4-7 rail 1 */
    int node[4] = {0, 0, 1, 2}, slot[4] = {0, 1, 0, 3};
    plan_placement p = {.world = 4, .node = node, .slot = slot};
    int r01[2] = {0, 1}, r02[2] = {0, 2}, r12[2] = {1, 2}, r03[2] = {0, 3};
    assert_int_equal(plan_group_link(&t, &p, r01, 1), PLAN_LINK_SELF);
    assert_int_equal(plan_group_link(&t, &p, r01, 2), PLAN_LINK_DOMAIN);
    slot[1] = 5; /* the other domain of node a */
    assert_int_equal(plan_group_link(&t, &p, r01, 2), PLAN_LINK_NODE);
    assert_int_equal(plan_group_link(&t, &p, r02, 2), PLAN_LINK_LEAF);  /* rail 0 both, leaf 0 */
    assert_int_equal(plan_group_link(&t, &p, r12, 2), PLAN_LINK_SPINE); /* rail 5 vs rail 0 */
    assert_int_equal(plan_group_link(&t, &p, r03, 2), PLAN_LINK_SPINE); /* other leaf */
    assert_true(plan_link_bw(&t, PLAN_LINK_SPINE) == 25e9);
    assert_true(plan_link_bw(&t, PLAN_LINK_DOMAIN) == 450e9);
    plan_topo_free(&t);
}

/* The cost model on a tiny shape, by hand:
 *   L 2, d 4, T 8, V 16, micro_batch 1, 2 microbatches, 4-byte elements, tp 2 x pp 2 x dp 2.
 *   activation = 1·8·4·4 = 128 B; layers per stage = 1
 *   TP = 4 · 1 · 2 · 128 = 1024 B, bus factor 2(2−1)/2 = 1
 *   params = 12·2·16 + 16·4 + 8·4 = 384 + 64 + 32 = 480; DP = 480/(2·2)·4 = 480 B, bus factor 1
 *   PP = 2 · 2 · 128 = 512 B, bus factor 1
 *   EP (ep 2, moe_every 1, top_k 2): moe layers per stage 1 → 4 · 1 · 2 · 2 · 128 = 2048 B,
 *       bus factor (2−1)/2 = 0.5
 * On 1 node x 8 GPUs every group is in the NVLink domain: time = bytes·bf / 450e9. */
static void test_cost_model_by_hand(void **state) {
    (void)state;
    plan_model m = {.tp = 2, .pp = 2, .dp = 2, .ep = 2, .n_layer = 2, .d_model = 4, .seq_len = 8,
                    .vocab_size = 16, .micro_batch = 1, .microbatches = 2, .moe_every = 1,
                    .top_k = 2, .bytes_per_elem = 4};
    double b[PLAN_NDIM];
    plan_bytes(&m, b);
    assert_true(b[PLAN_DIM_TP] == 1024);
    assert_true(b[PLAN_DIM_DP] == 480);
    assert_true(b[PLAN_DIM_PP] == 512);
    assert_true(b[PLAN_DIM_EP] == 2048);
    assert_true(plan_bus_factor(PLAN_DIM_DP, 8) == 1.75);
    assert_true(plan_bus_factor(PLAN_DIM_EP, 8) == 0.875);
    assert_true(plan_bus_factor(PLAN_DIM_PP, 2) == 1);
    assert_true(plan_bus_factor(PLAN_DIM_TP, 1) == 0);
    plan_topo t;
    plan_topo_init(&t);
    plan_topo_uniform(&t, 1, 8, 0);
    plan_placement p;
    char err[256];
    assert_int_equal(plan_place(&t, &m, 0, PLAN_ORDER_PLANNED, &p, err, sizeof(err)), 0);
    plan_cost c;
    plan_cost_eval(&t, &m, &p, &c);
    double want[PLAN_NDIM] = {1024 / 450e9, 480 / 450e9, 512 / 450e9, 1024 / 450e9, 0};
    assert_true(c.bytes[PLAN_DIM_CP] == 0); /* cp 1: no ring */
    for (int d = 0; d < PLAN_NDIM; d++) {
        assert_int_equal(c.link[d], d == PLAN_DIM_CP ? PLAN_LINK_SELF : PLAN_LINK_DOMAIN);
        assert_true(fabs(c.seconds[d] - want[d]) < 1e-18);
    }
    assert_true(fabs(c.total_s - (1024 + 480 + 512 + 1024) / 450e9) < 1e-18);
    plan_placement_free(&p);
    plan_topo_free(&t);
}

/* Context parallel, by hand: tp 2 x cp 2 x dp 2, L 2, d 4, T 8, micro_batch 1, 2 microbatches,
 * fp32. A rank holds T/cp = 4 positions: act = 1·4·4·4 = 64 B.
 *   CP = (6·2 − 4) · 2 layers · 2 microbatches · 64 / tp 2 = 1024 B, bus factor 1
 *   TP = 4 · 2 · 2 · 64 = 1024 B
 * On one node of 8 GPUs in two NVLink domains of 4, rank = t + 2·(c + 2·d): ranks 0-3 (dp 0) in
 * domain 0, so every ring (and TP group) stays in its domain; the gradient sum over dp x cp
 * crosses the domains (node link). Round robin over 4 nodes of 4 breaks the ring rule. */
static void test_cp_rings_placed(void **state) {
    (void)state;
    plan_model m = {.tp = 2, .cp = 2, .pp = 1, .dp = 2, .ep = 1, .n_layer = 2, .d_model = 4,
                    .seq_len = 8, .vocab_size = 16, .micro_batch = 1, .microbatches = 2,
                    .bytes_per_elem = 4};
    double b[PLAN_NDIM];
    plan_bytes(&m, b);
    assert_true(b[PLAN_DIM_CP] == 1024);
    assert_true(b[PLAN_DIM_TP] == 1024);
    assert_true(plan_bus_factor(PLAN_DIM_CP, 2) == 1);
    m.dp = 1; /* the ring's ranks still sum their gradients: DP bytes over dp x cp = 2 ranks */
    plan_bytes(&m, b);
    assert_true(b[PLAN_DIM_DP] == (12.0 * 2 * 16 + 16 * 4 + 8 * 4) / (2 * 1) * 4);
    m.dp = 2;
    plan_topo t;
    plan_topo_init(&t);
    plan_topo_add(&t, "n0", 8, 4, 8, 0);
    t.n_leaves = 1;
    plan_placement p;
    char err[256], rules[1024];
    assert_int_equal(plan_place(&t, &m, 0, PLAN_ORDER_PLANNED, &p, err, sizeof(err)), 0);
    assert_int_equal(p.world, 8);
    assert_int_equal(plan_check_rules(&t, &m, &p, rules, sizeof(rules)), 0);
    assert_int_equal(dim_link(&t, &m, &p, PLAN_DIM_CP), PLAN_LINK_DOMAIN);
    assert_int_equal(dim_link(&t, &m, &p, PLAN_DIM_TP), PLAN_LINK_DOMAIN);
    assert_int_equal(dim_link(&t, &m, &p, PLAN_DIM_DP), PLAN_LINK_NODE);
    plan_placement_free(&p);
    plan_topo_free(&t);

    plan_model r = model(1, 1, 4, 1);
    r.cp = 4;
    plan_topo_init(&t);
    plan_topo_uniform(&t, 4, 4, 0);
    assert_int_equal(plan_place(&t, &r, 0, PLAN_ORDER_PLANNED, &p, err, sizeof(err)), 0);
    assert_int_equal(p.world, 16);
    assert_int_equal(plan_check_rules(&t, &r, &p, rules, sizeof(rules)), 0);
    assert_int_equal(dim_link(&t, &r, &p, PLAN_DIM_CP), PLAN_LINK_DOMAIN);
    plan_placement_free(&p);
    assert_int_equal(plan_place(&t, &r, 0, PLAN_ORDER_NAIVE, &p, err, sizeof(err)), 0);
    assert_true(plan_check_rules(&t, &r, &p, rules, sizeof(rules)) >= 1);
    assert_non_null(strstr(rules, "CP: 4 of 4 rings leave"));
    assert_true(dim_link(&t, &r, &p, PLAN_DIM_CP) > PLAN_LINK_NODE);
    plan_placement_free(&p);
    plan_topo_free(&t);
}

static void write_file(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void test_topology_file(void **state) {
    (void)state;
    char path[] = "/tmp/test_plan_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_file(path, "[fabric]\nnic_gbs = 25\noversubscription = 4\n\n"
                     "[node head]\ngpus = 4\ndomain = 2\nrails = 1\nleaf = rack1\n\n"
                     "[nodes gpu]\ncount = 6\ngpus = 8\nnodes_per_leaf = 4\n");
    plan_topo t;
    plan_topo_init(&t);
    char err[256];
    assert_int_equal(plan_topo_load(&t, path, err, sizeof(err)), 0);
    assert_int_equal(t.n_nodes, 7);
    assert_int_equal(t.n_leaves, 3); /* rack1, gpu:leaf0, gpu:leaf1 */
    assert_string_equal(t.nodes[0].name, "head");
    assert_int_equal(t.nodes[0].domain, 2);
    assert_string_equal(t.nodes[6].name, "gpu5");
    assert_int_equal(t.nodes[6].leaf, 2);
    assert_int_equal(t.nodes[6].rails, 8);
    assert_true(t.nic_gbs == 25 && t.oversub == 4);
    plan_topo_free(&t);

    write_file(path, "[node a]\ngpus = 8\n[node b]\ngpus = 8\ndomain = 3\n");
    plan_topo_init(&t);
    assert_int_equal(plan_topo_load(&t, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "domain (3) must divide gpus (8)"));
    plan_topo_free(&t);
    write_file(path, "[node a]\ngpus = 8\nspeed = 9\n");
    plan_topo_init(&t);
    assert_int_equal(plan_topo_load(&t, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, ":3:"));
    assert_non_null(strstr(err, "unknown key 'speed'"));
    plan_topo_free(&t);
    unlink(path);
}

static void test_rankfile_round_trip(void **state) {
    (void)state;
    char path[] = "/tmp/test_plan_rf_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    plan_topo t;
    plan_topo_init(&t);
    plan_topo_uniform(&t, 3, 4, 0);
    plan_model m = model(2, 2, 2, 1);
    plan_placement p;
    char err[256];
    assert_int_equal(plan_place(&t, &m, 1, PLAN_ORDER_PLANNED, &p, err, sizeof(err)), 0);
    FILE *fp = fopen(path, "w");
    plan_write_rankfile(fp, &t, &m, &p);
    fclose(fp);
    int tp, pp, dp, ep, world, cp;
    assert_int_equal(plan_read_rankfile(path, &tp, &pp, &dp, &ep, &world, &cp, err, sizeof(err)), 0);
    assert_int_equal(cp, 1);
    assert_int_equal(tp, 2);
    assert_int_equal(pp, 2);
    assert_int_equal(dp, 2);
    assert_int_equal(world, 8);
    fp = fopen(path, "r");
    char text[2048];
    size_t n = fread(text, 1, sizeof(text) - 1, fp);
    text[n] = 0;
    fclose(fp);
    assert_non_null(strstr(text, "rank 5=node1 slot=1\n"));
    assert_non_null(strstr(text, "# spare node2\n"));
    /* a header of before cp is cp 1; cp=2 takes its share of the world */
    write_file(path, "# minitrain plan: tp=1 pp=1 dp=1 ep=1 world=2 cp=2\nrank 0=a slot=0\n"
                     "rank 1=a slot=1\n");
    assert_int_equal(plan_read_rankfile(path, &tp, &pp, &dp, &ep, &world, &cp, err, sizeof(err)), 0);
    assert_int_equal(cp, 2);
    write_file(path, "# minitrain plan: tp=2 pp=1 dp=1 ep=1 world=2\nrank 1=a slot=0\n");
    assert_int_equal(plan_read_rankfile(path, &tp, &pp, &dp, &ep, &world, &cp, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "rank 1 where rank 0"));
    plan_placement_free(&p);
    plan_topo_free(&t);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform_rules),
        cmocka_unit_test(test_ep_in_domain),
        cmocka_unit_test(test_leaf_alignment_and_spares),
        cmocka_unit_test(test_excluded_never_used),
        cmocka_unit_test(test_link_classes),
        cmocka_unit_test(test_cost_model_by_hand),
        cmocka_unit_test(test_cp_rings_placed),
        cmocka_unit_test(test_topology_file),
        cmocka_unit_test(test_rankfile_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
