/*
 * tests/test_pp_schedules.c — the pipeline schedules' orders (parallel/pp.h: pp_stage_order) for
 * GPipe, 1F1B, interleaved 1F1B and ZB-H1, replayed by an independent discrete-event simulation
 * of all stages at once, over many (P, M, v).
 *
 * Independence: the simulator here knows only the dependencies the schedules must respect (a
 * forward needs the previous global chunk's forward of the same microbatch, a backward the next
 * global chunk's backward; W follows its own B) and the chunk topology (global chunk c·P + s), not
 * how the orders are built. From the simulated run it measures:
 *   - completion: every stage's order runs to its end (no stage waits forever: deadlock-free
 *     for the executor's semantics, sends never block);
 *   - every (microbatch, chunk) has one F, one B (and, ZB-H1, one W after its B);
 *   - the peak of activations in flight (F done, B — ZB-H1: W — not) = pp_slots_needed;
 *   - the idle fraction of each stage = pp_idle_formula, exactly, for pass times that satisfy the
 *     formula's assumptions (equal stages; interleaved chunks cost 1/v; ZB-H1 with T_W <= T_B);
 *   - per chunk, the passes that write weight gradients run in microbatch order (the reason all
 *     schedules give bit-identical parameters);
 *   - pp_slot_table never gives one slot to two pairs in flight.
 * Plus two orders written out by hand from the papers' rules.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "parallel/pp.h"

#define MAXS 8
#define MAXOPS (3 * 4 * 16)

typedef struct {
    int P, M, v, split;
    pp_op ops[MAXS][MAXOPS];
    int n[MAXS];
    double idle[MAXS];
    int peak[MAXS];
} run;

/* done[kind][stage][chunk][micro] = end time, or -1 */
static double done[3][MAXS][4][16];

static int kind_ix(char k) { return k == 'F' ? 0 : k == 'B' ? 1 : 2; }

/* Simulate all stages; returns 0 when every order completes, -1 on a stall. */
static int simulate(run *r, double tf, double tb, double tw) {
    int P = r->P, v = r->v, at[MAXS] = {0};
    double t[MAXS] = {0}, busy[MAXS] = {0};
    int live[MAXS] = {0};
    for (int k = 0; k < 3; k++)
        for (int s = 0; s < MAXS; s++)
            for (int c = 0; c < 4; c++)
                for (int i = 0; i < 16; i++) done[k][s][c][i] = -1;
    memset(r->peak, 0, sizeof(r->peak));
    int left = 0;
    for (int s = 0; s < P; s++) left += r->n[s];
    while (left > 0) {
        int progressed = 0;
        for (int s = 0; s < P; s++) {
            if (at[s] == r->n[s]) continue;
            pp_op o = r->ops[s][at[s]];
            int g = o.chunk * P + s;
            double ready = 0;
            if (o.kind == 'F' && g > 0) { /* previous global chunk's forward */
                int ps = (g - 1) % P, pc = (g - 1) / P;
                ready = done[0][ps][pc][o.micro];
            } else if (o.kind == 'B' && g < v * P - 1) { /* next global chunk's backward */
                int ns = (g + 1) % P, nc = (g + 1) / P;
                ready = done[1][ns][nc][o.micro];
            } else if (o.kind == 'W') {
                ready = done[1][s][o.chunk][o.micro];
            }
            if (ready < 0) continue;
            double dur = o.kind == 'F' ? tf : o.kind == 'B' ? tb : tw;
            double st = t[s] > ready ? t[s] : ready;
            t[s] = st + dur;
            busy[s] += dur;
            done[kind_ix(o.kind)][s][o.chunk][o.micro] = t[s];
            if (o.kind == 'F' && ++live[s] > r->peak[s]) r->peak[s] = live[s];
            if (o.kind == (r->split ? 'W' : 'B')) live[s]--;
            at[s]++, left--, progressed = 1;
        }
        if (!progressed) return -1;
    }
    double span = 0;
    for (int s = 0; s < P; s++) span = t[s] > span ? t[s] : span;
    for (int s = 0; s < P; s++) r->idle[s] = (span - busy[s]) / span;
    return 0;
}

static void build(run *r, pp_schedule sch, int P, int M, int v) {
    r->P = P, r->M = M, r->v = sch == PP_INTERLEAVED ? v : 1, r->split = sch == PP_ZBH1;
    for (int s = 0; s < P; s++) r->n[s] = pp_stage_order(sch, P, s, M, r->v, r->ops[s]);
}

/* Structure of one stage's order: counts, W after B, weight passes in microbatch order. */
static void check_structure(const run *r, int s) {
    int seen[3][4][16] = {{{0}}}, last_w[4];
    for (int c = 0; c < 4; c++) last_w[c] = -1;
    for (int k = 0; k < r->n[s]; k++) {
        pp_op o = r->ops[s][k];
        assert_true(o.chunk >= 0 && o.chunk < r->v && o.micro >= 0 && o.micro < r->M);
        seen[kind_ix(o.kind)][o.chunk][o.micro]++;
        if (o.kind == 'B') assert_int_equal(seen[0][o.chunk][o.micro], 1); /* after its F */
        if (o.kind == 'W') assert_int_equal(seen[1][o.chunk][o.micro], 1); /* after its B */
        if (o.kind == (r->split ? 'W' : 'B')) { /* the pass that writes weight gradients */
            assert_int_equal(o.micro, last_w[o.chunk] + 1);
            last_w[o.chunk] = o.micro;
        }
    }
    for (int c = 0; c < r->v; c++)
        for (int i = 0; i < r->M; i++) {
            assert_int_equal(seen[0][c][i], 1);
            assert_int_equal(seen[1][c][i], 1);
            assert_int_equal(seen[2][c][i], r->split);
        }
}

/* The slot table: in range, and no slot held by two pairs at once while replaying the order. */
static void check_slots(pp_schedule sch, const run *r, int s) {
    int S = pp_slots_needed(sch, r->P, s, r->M, r->v), slot[64], holder[64];
    pp_slot_table(sch, r->P, s, r->M, r->v, slot);
    for (int j = 0; j < S; j++) holder[j] = -1;
    for (int k = 0; k < r->n[s]; k++) {
        pp_op o = r->ops[s][k];
        int id = o.chunk * r->M + o.micro, sl = slot[id];
        assert_true(sl >= 0 && sl < S);
        if (o.kind == 'F') {
            assert_int_equal(holder[sl], -1);
            holder[sl] = id;
        } else if (o.kind == (r->split ? 'W' : 'B')) {
            assert_int_equal(holder[sl], id);
            holder[sl] = -1;
        }
    }
}

static void check_all(pp_schedule sch, int P, int M, int v, double tf, double tb, double tw,
                      int formula) {
    static run r;
    build(&r, sch, P, M, v);
    assert_int_equal(simulate(&r, tf, tb, tw), 0);
    double want = pp_idle_formula(sch, P, M, r.v, tf * r.v, tb * r.v, tw * r.v);
    for (int s = 0; s < P; s++) {
        check_structure(&r, s);
        check_slots(sch, &r, s);
        assert_int_equal(r.peak[s], pp_slots_needed(sch, P, s, M, r.v));
        if (formula && !(r.idle[s] > want - 1e-9 && r.idle[s] < want + 1e-9)) {
            fail_msg("%s P %d M %d v %d stage %d: simulated idle %.6f, formula %.6f",
                     pp_schedule_name(sch), P, M, v, s, r.idle[s], want);
        }
    }
}

static void test_orders_many_layouts(void **state) {
    (void)state;
    for (int P = 2; P <= 6; P++)
        for (int M = 1; M <= 12; M++) {
            /* 1F1B and GPipe: backward twice the forward; the formula holds for every M */
            check_all(PP_1F1B, P, M, 1, 1, 2, 0, 1);
            check_all(PP_GPIPE, P, M, 1, 1, 2, 0, 1);
            /* ZB-H1: equal passes, and B dearer than W; the formula's regime is M >= P */
            check_all(PP_ZBH1, P, M, 1, 1, 1, 1, M >= P);
            check_all(PP_ZBH1, P, M, 1, 1, 1.2, 0.8, M >= P);
            /* interleaved: a chunk costs 1/v of the stage */
            for (int v = 2; v <= 4 && v * M <= 16; v++)
                if (M % P == 0) check_all(PP_INTERLEAVED, P, M, v, 1.0 / v, 2.0 / v, 0, 1);
        }
}

static void test_orders_by_hand(void **state) {
    (void)state;
    pp_op o[64];
    char buf[256];
    /* ZB-H1, P 2, M 3: stage 0 warms up with 1 forward and postpones no W; stage 1 postpones 1 */
    const char *zb[] = {"F0 F1 B0 W0 F2 B1 W1 B2 W2", "F0 B0 F1 B1 W0 F2 B2 W1 W2"};
    /* interleaved, P 2, M 2, v 2: M == P, all four forwards first; backwards last chunk first */
    const char *il = "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0";
    for (int s = 0; s < 2; s++) {
        int n = pp_stage_order(PP_ZBH1, 2, s, 3, 1, o), len = 0;
        for (int k = 0; k < n; k++)
            len += snprintf(buf + len, sizeof(buf) - len, "%s%c%d", k ? " " : "", o[k].kind, o[k].micro);
        assert_string_equal(buf, zb[s]);
        n = pp_stage_order(PP_INTERLEAVED, 2, s, 2, 2, o), len = 0;
        for (int k = 0; k < n; k++)
            len += snprintf(buf + len, sizeof(buf) - len, "%s%c%d.%d", k ? " " : "", o[k].kind,
                            o[k].micro, o[k].chunk);
        assert_string_equal(buf, il);
    }
    /* bounds by hand at P 4, M 8: interleaved v 2: 2(P-s-1) + (v-1)P + 1 = 11, 9, 7, 5 */
    int il8[] = {11, 9, 7, 5};
    for (int s = 0; s < 4; s++) {
        assert_int_equal(pp_slots_needed(PP_INTERLEAVED, 4, s, 8, 2), il8[s]);
        assert_int_equal(pp_slots_needed(PP_ZBH1, 4, s, 8, 1), 4);
    }
    /* formulas: 1F1B 3/11, interleaved v 2 3/19, ZB-H1 equal passes 3/27 */
    assert_true(pp_idle_formula(PP_1F1B, 4, 8, 1, 1, 2, 0) == 3.0 / 11);
    assert_true(pp_idle_formula(PP_INTERLEAVED, 4, 8, 2, 1, 2, 0) == 3.0 / 19);
    assert_true(pp_idle_formula(PP_ZBH1, 4, 8, 1, 1, 1, 1) == 3.0 / 27);
}

static void test_schedule_names_and_checks(void **state) {
    (void)state;
    pp_schedule s;
    char err[256];
    const char *names[] = {"1f1b", "gpipe", "interleaved", "zb-h1"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pp_schedule_parse(names[i], &s), 0);
        assert_string_equal(pp_schedule_name(s), names[i]);
    }
    assert_int_equal(pp_schedule_parse("zbv", &s), -1);
    assert_int_equal(pp_schedule_check(PP_INTERLEAVED, 8, 2, 2, 4, "", err, sizeof(err)), 0);
    assert_int_equal(pp_schedule_check(PP_INTERLEAVED, 8, 2, 3, 4, "", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "8 layers do not split"));
    assert_int_equal(pp_schedule_check(PP_INTERLEAVED, 8, 2, 1, 4, "", err, sizeof(err)), -1);
    assert_int_equal(pp_schedule_check(PP_INTERLEAVED, 8, 4, 2, 6, "", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "multiple of pp"));
    assert_int_equal(pp_schedule_check(PP_INTERLEAVED, 8, 2, 2, 4, "3,5", err, sizeof(err)), -1);
    assert_int_equal(pp_schedule_check(PP_ZBH1, 7, 2, 1, 3, "3,4", err, sizeof(err)), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders_many_layouts),
        cmocka_unit_test(test_orders_by_hand),
        cmocka_unit_test(test_schedule_names_and_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
