/*
 * tests/test_stacks.c — cmocka tests of sched/stacks: the eu-stack and gdb parsers, and the
 * verdict (grouping, outliers, the blamed mesh group, machines).
 *
 * The parser inputs are texts in the two tools' formats, built here frame by frame; every
 * assertion compares with what the text says (which frames belong to the executable, which
 * thread is the main one), not with a recorded answer. The verdict cases are stacks built
 * here for layouts whose groups are worked out independently from the mesh formula
 * rank = tp_rank + tp·(cp_rank + cp·(dp_rank + dp·pp_rank)) (parallel/mesh.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sched/stacks.h"

static void test_parse_eu_stack(void **state) {
    (void)state;
    const char *exe = "/opt/mt/minitrain";
    char text[4096];
    snprintf(text, sizeof text,
             "PID 41 - process\n"
             "TID 42:\n" /* an OpenMP worker first: must be skipped */
             "#0  0x00007f0000000001 do_futex_wait - /usr/lib/libgomp.so.1\n"
             "TID 41:\n"
             "#0  0x00007f0000000010 __poll - /usr/lib/x86_64-linux-gnu/libc.so.6\n"
             "    ../sysdeps/unix/sysv/linux/poll.c:29:10\n"
             "#1  0x00007f0000000020 opal_progress - /usr/lib/libopen-pal.so.40\n"
             "#2  0x0000560000000030 comm_all_reduce.constprop.0 - %s\n"
             "    parallel/comm.c:236:5\n"
             "#3  0x0000560000000040 dp_finish.isra.2 - %s\n"
             "    parallel/dp.c:120\n"
             "#4  0x0000560000000050 ?? - %s\n"
             "#5  0x0000560000000060 trainer_run - %s\n"
             "#6  0x00007f0000000070 __libc_start_main@@GLIBC_2.34 - /usr/lib/libc.so.6\n"
             "#7  0x0000560000000080 _start - %s\n",
             exe, exe, exe, exe, exe);
    stk_stack s;
    assert_int_equal(stk_parse_eu_stack(text, 41, NULL, &s), 0);
    assert_true(s.ok);
    assert_string_equal(s.leaf, "__poll");
    assert_int_equal(s.nframes, 3); /* comm_all_reduce, dp_finish, trainer_run; not ??/_start */
    assert_string_equal(s.frames[0].func, "comm_all_reduce");
    assert_string_equal(s.frames[0].where, "parallel/comm.c:236");
    assert_string_equal(s.frames[1].func, "dp_finish");
    assert_string_equal(s.frames[1].where, "parallel/dp.c:120");
    assert_string_equal(s.frames[2].func, "trainer_run");
    assert_string_equal(s.frames[2].where, "");
    /* the executable named: the same frames; the worker's thread has none of them */
    assert_int_equal(stk_parse_eu_stack(text, 41, exe, &s), 0);
    assert_int_equal(s.nframes, 3);
    assert_int_equal(stk_parse_eu_stack(text, 42, exe, &s), -1);
    assert_false(s.ok);
    assert_int_equal(stk_parse_eu_stack(text, 7, NULL, &s), -1);
    assert_non_null(strstr(s.err, "thread 7"));
}

static void test_parse_gdb(void **state) {
    (void)state;
    const char *text =
        "[Thread debugging using libthread_db enabled]\n"
        "0x00007f00 in __libc_pause () from /lib/x86_64-linux-gnu/libc.so.6\n"
        "#0  0x00007f0000000010 in __libc_pause () from /lib/x86_64-linux-gnu/libc.so.6\n"
        "#1  0x0000560000000020 in sched_fault_hook (tr=0x1, step=3, final=0, user=0x0) at "
        "sched/hooks.c:196\n"
        "#2  run_hooks (tr=0x1, step=3) at train/trainer.c:223\n"
        "#3  0x0000560000000030 in trainer_run (tr=0x1) at train/trainer.c:681\n"
        "#4  0x0000560000000040 in _start ()\n";
    stk_stack s;
    assert_int_equal(stk_parse_gdb(text, &s), 0);
    assert_string_equal(s.leaf, "__libc_pause");
    assert_int_equal(s.nframes, 3);
    assert_string_equal(s.frames[0].func, "sched_fault_hook");
    assert_string_equal(s.frames[0].where, "sched/hooks.c:196");
    assert_string_equal(s.frames[1].func, "run_hooks"); /* an inlined frame has no address */
    assert_string_equal(s.frames[2].where, "train/trainer.c:681");
    assert_int_equal(stk_parse_gdb("No stack.\n", &s), -1);
}

/* A captured stack of rank r with the given frames (innermost first), on host h. */
static stk_stack mk(int r, const char *h, const char *f0, const char *f1) {
    stk_stack s;
    memset(&s, 0, sizeof s);
    s.rank = r, s.pid = 100 + r, s.ok = 1, s.stuck_s = 12.0;
    snprintf(s.host, sizeof s.host, "%s", h);
    snprintf(s.frames[0].func, STK_FUNC, "%s", f0);
    snprintf(s.frames[1].func, STK_FUNC, "%s", f1);
    s.nframes = 2;
    return s;
}

static void test_verdict_dp(void **state) {
    (void)state;
    stk_stack st[4];
    for (int r = 0; r < 4; r++) st[r] = mk(r, r < 2 ? "n1" : "n2", "comm_all_reduce", "trainer_run");
    st[2] = mk(2, "n2", "sched_fault_hook", "trainer_run");
    stk_layout L = {1, 1, 1, 4, 1};
    stk_verdict v;
    assert_int_equal(stk_verdict_of(st, 4, &L, &v), 0);
    assert_int_equal(v.ngroups, 2);
    assert_int_equal(v.noutliers, 1);
    assert_int_equal(v.outliers[0], 2);
    /* tp, pp groups are {2} alone, dp is the whole job: the rank alone is blamed */
    assert_string_equal(v.blame_kind, "rank");
    assert_int_equal(v.nblame, 1);
    assert_int_equal(v.machines, 1);
    assert_non_null(strstr(v.text, "rank 2 (tp 0 pp 0 dp 2) in sched_fault_hook"));
    assert_non_null(strstr(v.text, "ranks 0,1,3 in comm_all_reduce"));
    assert_non_null(strstr(v.text, "on n2"));
    /* a rank that could not be captured is left out of the groups */
    st[3].ok = 0;
    assert_int_equal(stk_verdict_of(st, 4, &L, &v), 0);
    assert_int_equal(v.noutliers, 1);
    assert_null(strstr(v.text, "0,1,3"));
}

static void test_verdict_groups(void **state) {
    (void)state;
    /* tp 2 × pp 2 × dp 2: rank = tp_rank + 2·(dp_rank + 2·pp_rank). Ranks 6 and 7 (dp 1, pp 1)
     * form one TP group; two outliers there blame that group, not the job */
    stk_stack st[8];
    for (int r = 0; r < 8; r++) st[r] = mk(r, r < 4 ? "a" : "b", "comm_all_reduce", "trainer_run");
    st[6] = mk(6, "b", "ops_matmul_forward", "gpt_forward");
    st[7] = mk(7, "b", "ops_matmul_forward", "gpt_forward");
    stk_layout L = {2, 1, 2, 2, 1};
    stk_verdict v;
    assert_int_equal(stk_verdict_of(st, 8, &L, &v), 0);
    assert_int_equal(v.noutliers, 2);
    assert_string_equal(v.blame_kind, "tp");
    assert_int_equal(v.nblame, 2);
    assert_int_equal(v.blame[0], 6);
    assert_int_equal(v.blame[1], 7);
    /* outliers 1 and 5 share no TP group (0,1 and 4,5) but one PP group: tp 1, dp 0 -> {1, 5} */
    for (int r = 0; r < 8; r++) st[r] = mk(r, r < 4 ? "a" : "b", "comm_all_reduce", "trainer_run");
    st[1] = mk(1, "a", "pp_recv", "trainer_pipe_step");
    st[5] = mk(5, "b", "pp_recv", "trainer_pipe_step");
    assert_int_equal(stk_verdict_of(st, 8, &L, &v), 0);
    assert_string_equal(v.blame_kind, "pp");
    assert_int_equal(v.nblame, 2);
    assert_int_equal(v.blame[0], 1);
    assert_int_equal(v.blame[1], 5);
    assert_int_equal(v.machines, 2);
    /* a tie (2 against 2): the ranks waiting in communication are taken as the healthy ones */
    stk_stack t[4];
    stk_layout L4 = {1, 1, 1, 4, 1};
    for (int r = 0; r < 4; r++) t[r] = mk(r, "a", r < 2 ? "gpt_forward" : "comm_all_reduce", "x");
    assert_int_equal(stk_verdict_of(t, 4, &L4, &v), 0);
    assert_int_equal(v.noutliers, 2);
    assert_int_equal(v.outliers[0], 0);
    assert_int_equal(v.outliers[1], 1);
    /* everyone in one place: no outlier, nothing blamed */
    for (int r = 0; r < 4; r++) t[r] = mk(r, "a", "comm_all_reduce", "x");
    assert_int_equal(stk_verdict_of(t, 4, &L4, &v), 0);
    assert_int_equal(v.noutliers, 0);
    assert_int_equal(v.nblame, 0);
    assert_non_null(strstr(v.text, "no odd one out"));
    /* nothing captured */
    for (int r = 0; r < 4; r++) t[r].ok = 0;
    assert_int_equal(stk_verdict_of(t, 4, &L4, &v), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_eu_stack),
        cmocka_unit_test(test_parse_gdb),
        cmocka_unit_test(test_verdict_dp),
        cmocka_unit_test(test_verdict_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
