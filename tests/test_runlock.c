/*
 * tests/test_runlock.c — the run directory lock (core/runlock.h): one holder at a time, the
 * second starter told who holds it, the lock gone with its holder (even one killed by SIGKILL),
 * a lock inherited by a launched child, and no trace left by a start that made the directory and
 * failed.
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/runlock.h"

#define TU_PREFIX "test_runlock"
#include "tests/testutil.h"

/* In a child process: try to take dir's lock; exit 0 when taken, 1 when busy (message on the
 * pipe fd), 2 on error. */
static int try_in_child(const char *dir, char *msg, size_t len) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        runlock l;
        char err[512] = "";
        int r = runlock_acquire(&l, dir, "train", err, sizeof(err));
        if (write(p[1], err, strlen(err) + 1) < 0) _exit(3);
        _exit(r == 0 ? 0 : r == 1 ? 1 : 2);
    }
    close(p[1]);
    ssize_t n = read(p[0], msg, len - 1);
    msg[n > 0 ? n : 0] = '\0';
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_exclusive(void **state) {
    (void)state;
    char dir[320], msg[512], holder[256], want[64];
    snprintf(dir, sizeof(dir), "%s/run", tu_dir);
    assert_int_equal(mkdir(dir, 0755), 0); /* an existing run directory keeps its lock file */
    runlock l;
    assert_int_equal(runlock_acquire(&l, dir, "run", msg, sizeof(msg)), 0);
    assert_int_equal(runlock_probe(dir, holder, sizeof(holder)), 1);
    snprintf(want, sizeof(want), "pid=%d what=run ", (int)getpid());
    assert_non_null(strstr(holder, want));
    assert_int_equal(try_in_child(dir, msg, sizeof(msg)), 1);
    snprintf(want, sizeof(want), "in use by pid %d (minitrain run", (int)getpid());
    assert_non_null(strstr(msg, want));
    runlock_release(&l);
    assert_int_equal(runlock_probe(dir, holder, sizeof(holder)), 0);
    assert_int_equal(try_in_child(dir, msg, sizeof(msg)), 0);
    runlock_release(&l); /* twice: a no-op */
}

/* A holder killed by SIGKILL frees the lock; a child that inherited the descriptor keeps it
 * held until it is gone too. */
static void test_released_by_death(void **state) {
    (void)state;
    char dir[320], msg[512];
    snprintf(dir, sizeof(dir), "%s/death", tu_dir);
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t holder = fork();
    if (holder == 0) {
        runlock l;
        char err[256];
        if (runlock_acquire(&l, dir, "run", err, sizeof(err)) != 0) _exit(2);
        if (write(ready[1], "x", 1) != 1) _exit(3);
        for (;;) pause();
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    assert_int_equal(runlock_probe(dir, msg, sizeof(msg)), 1);
    kill(holder, SIGKILL);
    int st;
    waitpid(holder, &st, 0);
    assert_int_equal(runlock_probe(dir, msg, sizeof(msg)), 0);
    assert_int_equal(try_in_child(dir, msg, sizeof(msg)), 0);
    close(ready[0]);
    close(ready[1]);
}

/* A start that created the run directory and failed before writing anything leaves no trace; a
 * directory that existed, or holds other files, stays. */
static void test_no_trace(void **state) {
    (void)state;
    char dir[320], err[256], f[400];
    snprintf(dir, sizeof(dir), "%s/fresh/nested", tu_dir);
    runlock l;
    assert_int_equal(runlock_acquire(&l, dir, "train", err, sizeof(err)), 0);
    runlock_release(&l);
    struct stat sb;
    assert_int_not_equal(stat(dir, &sb), 0);
    assert_int_equal(runlock_acquire(&l, dir, "train", err, sizeof(err)), 0);
    snprintf(f, sizeof(f), "%s/run.db", dir);
    FILE *fp = fopen(f, "w");
    assert_non_null(fp);
    fclose(fp);
    runlock_release(&l);
    assert_int_equal(stat(f, &sb), 0);
    assert_int_equal(runlock_probe(dir, err, sizeof(err)), 0);
    /* a path that is a file, not a directory: an error, not "busy" */
    assert_int_equal(runlock_acquire(&l, f, "train", err, sizeof(err)), -1);
    assert_non_null(strstr(err, "cannot create run directory"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exclusive),
        cmocka_unit_test(test_released_by_death),
        cmocka_unit_test(test_no_trace),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
