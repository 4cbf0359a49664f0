/*
 * tests/test_replan.c — the supervisor's placement (sched/replan.h): rank -> host of a rankfile
 * written by sched/plan, and the re-plan after a cordon: same layout, the cordoned node never
 * used, the spare taking its ranks, the surviving node keeping its own; and the refusals (too
 * few nodes left, a rankfile host outside the job's hosts, a slot beyond its host's count).
 *
 * The expected placements are worked out by hand from the planner's rules (TP pairs inside a
 * node, nodes in host order), not read back from the code under test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sched/plan.h"
#include "sched/replan.h"
#include "sched/supervisor.h"

#define TU_PREFIX "test_replan"
#include "tests/testutil.h"

/* Three nodes of 2 slots (node0..node2) and a tp 2 x dp 2 plan with one spare, written by
 * sched/plan the way `minitrain plan --out` writes it. */
static void write_plan(const char *path) {
    plan_topo t;
    plan_topo_init(&t);
    plan_topo_uniform(&t, 3, 2, 0);
    plan_model m = {.tp = 2, .pp = 1, .dp = 2, .ep = 1, .n_layer = 2, .d_model = 32, .seq_len = 32,
                    .vocab_size = 256, .micro_batch = 1, .microbatches = 1, .bytes_per_elem = 4};
    plan_placement p;
    char err[256];
    assert_int_equal(plan_place(&t, &m, 1, PLAN_ORDER_PLANNED, &p, err, sizeof(err)), 0);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    plan_write_rankfile(fp, &t, &m, &p);
    fclose(fp);
    plan_placement_free(&p);
    plan_topo_free(&t);
}

static void hosts3(sup_hosts *h) {
    memset(h, 0, sizeof(*h));
    h->n = 3;
    for (int i = 0; i < 3; i++) {
        snprintf(h->name[i], sizeof(h->name[i]), "node%d", i);
        h->slots[i] = 2;
    }
}

static void test_read_and_blame(void **state) {
    (void)state;
    char path[300], err[512];
    tu_path(path, sizeof(path), "job.rankfile");
    write_plan(path);
    replan_rankfile rf;
    assert_int_equal(replan_read(path, &rf, err, sizeof(err)), 0);
    assert_int_equal(rf.world, 4);
    assert_int_equal(rf.tp, 2);
    assert_int_equal(rf.dp, 2);
    assert_int_equal(rf.n_spares, 1);
    sup_hosts h;
    hosts3(&h);
    const int host_of[] = {0, 0, 1, 1}; /* TP pairs on node0, node1; node2 the spare */
    for (int r = 0; r < 4; r++) assert_int_equal(replan_host_of_rank(&rf, &h, r), host_of[r]);
    assert_int_equal(replan_host_of_rank(&rf, &h, 4), -1);
    assert_int_equal(replan_host_of_rank(&rf, &h, -1), -1);
    assert_int_equal(replan_check_hosts(&rf, &h, err, sizeof(err)), 0);
    h.n = 1; /* node1 is no longer among the job's hosts */
    assert_int_equal(replan_check_hosts(&rf, &h, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "node1"));
    replan_free(&rf);
}

/* A slot the host does not have (slot=2 on a 2-slot host) is refused by name; a host with more
 * slots takes it; a negative slot is refused when read; Open MPI's socket:core form is not a
 * slot number and is left to mpirun. */
static void test_slot_beyond_host(void **state) {
    (void)state;
    char path[300], err[512];
    tu_path(path, sizeof(path), "slots.rankfile");
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("# minitrain plan: tp=2 pp=1 dp=1 ep=1 world=2\nrank 0=node0 slot=1\n"
          "rank 1=node0 slot=2\n", fp);
    fclose(fp);
    replan_rankfile rf;
    assert_int_equal(replan_read(path, &rf, err, sizeof(err)), 0);
    assert_int_equal(rf.slot[1], 2);
    sup_hosts h;
    hosts3(&h);
    assert_int_equal(replan_check_hosts(&rf, &h, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "rank 1 on host node0 slot 2, but node0 has 2 slots"));
    h.slots[0] = 3;
    assert_int_equal(replan_check_hosts(&rf, &h, err, sizeof(err)), 0);
    replan_free(&rf);
    fp = fopen(path, "w");
    fputs("# minitrain plan: tp=2 pp=1 dp=1 ep=1 world=2\nrank 0=node0 slot=0:5\n"
          "rank 1=node0 slot=1\n", fp);
    fclose(fp);
    assert_int_equal(replan_read(path, &rf, err, sizeof(err)), 0);
    assert_int_equal(rf.slot[0], -1);
    h.slots[0] = 2;
    assert_int_equal(replan_check_hosts(&rf, &h, err, sizeof(err)), 0);
    replan_free(&rf);
    fp = fopen(path, "w");
    fputs("# minitrain plan: tp=2 pp=1 dp=1 ep=1 world=2\nrank 0=node0 slot=0\n"
          "rank 1=node0 slot=-1\n", fp);
    fclose(fp);
    assert_int_equal(replan_read(path, &rf, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "rank 1: a negative slot"));
}

/* The same check against a topology (train --rankfile with a `topology` file): node1 has 2
 * slots, so slot=2 is refused by name, slot=1 fits, and a host the topology does not list is
 * not checked. */
static void test_slot_beyond_topology(void **state) {
    (void)state;
    char path[300], err[512];
    tu_path(path, sizeof(path), "topo_slots.rankfile");
    plan_topo t;
    plan_topo_init(&t);
    plan_topo_uniform(&t, 3, 2, 0); /* node0..node2, 2 GPUs each */
    const char *cases[][2] = {{"node1 slot=2", "rank 1 on host node1 slot 2, but node1 has 2 slots"},
                              {"node1 slot=1", NULL},
                              {"other slot=7", NULL}};
    for (int i = 0; i < 3; i++) {
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fprintf(fp, "# minitrain plan: tp=2 pp=1 dp=1 ep=1 world=2\nrank 0=node1 slot=0\n"
                "rank 1=%s\n", cases[i][0]);
        fclose(fp);
        replan_rankfile rf;
        assert_int_equal(replan_read(path, &rf, err, sizeof(err)), 0);
        assert_int_equal(replan_check_topology(&rf, &t, err, sizeof(err)), cases[i][1] ? -1 : 0);
        if (cases[i][1]) assert_non_null(strstr(err, cases[i][1]));
        replan_free(&rf);
    }
    plan_topo_free(&t);
}

static void test_replan_onto_spare(void **state) {
    (void)state;
    unsetenv("SLURM_JOB_ID"); /* the host list, not an allocation */
    char path[300], out[300], err[512];
    tu_path(path, sizeof(path), "job.rankfile");
    tu_path(out, sizeof(out), "rankfile.active");
    write_plan(path);
    replan_rankfile rf;
    assert_int_equal(replan_read(path, &rf, err, sizeof(err)), 0);
    sup_hosts h;
    hosts3(&h);
    h.cordoned[1] = 1; /* node1 lost */
    assert_int_equal(replan_write(&rf, &h, 0, out, err, sizeof(err)), 0);
    const char *want[] = {"node0", "node0", "node2", "node2"};
    for (int r = 0; r < 4; r++) assert_string_equal(rf.host[r], want[r]);
    assert_int_equal(rf.n_spares, 0);
    /* the file says the same, keeps the layout header, and names the excluded node */
    replan_rankfile back;
    assert_int_equal(replan_read(out, &back, err, sizeof(err)), 0);
    assert_int_equal(back.world, 4);
    assert_int_equal(back.tp, 2);
    assert_int_equal(back.dp, 2);
    for (int r = 0; r < 4; r++) assert_string_equal(back.host[r], want[r]);
    replan_free(&back);
    FILE *fp = fopen(out, "r");
    char text[2048];
    size_t n = fread(text, 1, sizeof(text) - 1, fp);
    fclose(fp);
    text[n] = '\0';
    assert_non_null(strstr(text, "# excluded node1\n"));
    assert_null(strstr(text, "=node1 "));
    /* a second loss leaves one node for two TP pairs: refused, the active file untouched */
    h.cordoned[2] = 1;
    assert_int_equal(replan_write(&rf, &h, 0, out, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "re-plan"));
    assert_int_equal(replan_read(out, &back, err, sizeof(err)), 0);
    assert_string_equal(back.host[2], "node2");
    replan_free(&back);
    replan_free(&rf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_and_blame),
        cmocka_unit_test(test_replan_onto_spare),
        cmocka_unit_test(test_slot_beyond_host),
        cmocka_unit_test(test_slot_beyond_topology),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
