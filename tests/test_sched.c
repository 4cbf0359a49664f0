/*
 * tests/test_sched.c — resilience units: fault specs and the once-only record, checkpoint
 * corruption (caught by ckpt_verify), heartbeat records, the supervisor's pure helpers, ETTR
 * accounting on hand-made run databases (answers worked out on paper from the timelines below),
 * `report --json` keys, and the ETTR simulator against exact and closed-form answers.
 */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <sqlite3.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "cmd/cmd.h"
#include "core/rundb.h"
#include "report/ettr.h"
#include "sched/fault.h"
#include "sched/heartbeat.h"
#include "sched/hooks.h"
#include "sched/simulate.h"
#include "sched/supervisor.h"

#define TU_PREFIX "test_sched"
#include "tests/testutil.h"

static void assert_near(double got, double want, double tol) {
    if (!(fabs(got - want) <= tol)) fail_msg("got %.9g want %.9g (tol %g)", got, want, tol);
}

/* ---- fault specs ------------------------------------------------------------------------------ */

static void test_fault_parse(void **state) {
    (void)state;
    fault_spec f;
    char err[256];
    assert_int_equal(fault_parse(" kill@step=57,rank=3 ", &f, err, sizeof(err)), 0);
    assert_int_equal(f.kind, FAULT_KILL);
    assert_int_equal(f.step, 57);
    assert_int_equal(f.rank, 3);
    assert_string_equal(f.spec, "kill@step=57,rank=3");
    assert_int_equal(fault_parse("hang@step=30,rank=1", &f, err, sizeof(err)), 0);
    assert_int_equal(f.kind, FAULT_HANG);
    assert_int_equal(fault_parse("nan@step=40", &f, err, sizeof(err)), 0);
    assert_int_equal(f.kind, FAULT_NAN);
    assert_int_equal(f.rank, -1); /* every rank */
    assert_int_equal(fault_parse("slow@rank=2,factor=3", &f, err, sizeof(err)), 0);
    assert_int_equal(f.kind, FAULT_SLOW);
    assert_near(f.factor, 3.0, 0);
    assert_int_equal(f.step, 1); /* from the start */
    assert_int_equal(fault_parse("exit@step=12,rank=0,code=7", &f, err, sizeof(err)), 0);
    assert_int_equal(f.kind, FAULT_EXIT);
    assert_int_equal(f.code, 7);
    assert_int_equal(fault_parse("exit@step=12", &f, err, sizeof(err)), 0);
    assert_int_equal(f.code, 1);
    assert_int_equal(fault_parse("corrupt-ckpt@step=40", &f, err, sizeof(err)), 0);
    assert_int_equal(f.kind, FAULT_CORRUPT_CKPT);
    assert_int_equal(f.rank, 0); /* one rank damages the shared files */
    assert_int_equal(f.then_kill, 0);
    assert_string_equal(fault_kind_name(FAULT_CORRUPT_CKPT), "corrupt-ckpt");
    assert_true(fault_applies(&f, 0) && !fault_applies(&f, 1));
    assert_int_equal(fault_parse("corrupt-ckpt@step=40,kill=1", &f, err, sizeof(err)), 0);
    assert_int_equal(f.then_kill, 1);
    assert_int_equal(fault_parse("torn-ckpt@step=30,kill=1", &f, err, sizeof(err)), 0);
    assert_int_equal(f.kind, FAULT_TORN_CKPT);
    assert_int_equal(f.rank, 0);
    assert_int_equal(f.then_kill, 1);
    assert_string_equal(fault_kind_name(FAULT_TORN_CKPT), "torn-ckpt");
    assert_int_equal(fault_parse("kill@at=resume,rank=2", &f, err, sizeof(err)), 0);
    assert_int_equal(f.kind, FAULT_KILL);
    assert_int_equal(f.at_resume, 1);
    assert_int_equal(f.step, -1); /* no step: the next resume */
    assert_int_equal(f.rank, 2);
}

/* A torn copy is cut to half its size: the verify of its step must then fail on the size. */
static void test_fault_tear(void **state) {
    (void)state;
    char dir[300], path[400], err[256], which[400];
    snprintf(dir, sizeof(dir), "%s/tear", tu_dir);
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/a.safetensors", dir);
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 1000; i++) fputc(i & 0xff, f);
    fclose(f);
    assert_int_equal(fault_tear_checkpoint(dir, which, sizeof(which), err, sizeof(err)), 0);
    assert_string_equal(which, path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((int)st.st_size, 500);
    snprintf(path, sizeof(path), "%s/none", tu_dir);
    assert_int_equal(fault_tear_checkpoint(path, NULL, 0, err, sizeof(err)), -1);
}

static void test_fault_parse_bad(void **state) {
    (void)state;
    /* each bad spec, and a word the message must contain */
    static const char *BAD[][2] = {
        {"", "empty"},
        {"explode@step=3", "unknown kind 'explode'"},
        {"kill", "needs step"},
        {"kill@rank=1", "needs step"},
        {"kill@step=0", "step=0 is not an integer >= 1"},
        {"kill@step=5x", "step=5x"},
        {"kill@step=5,rank=-1", "rank=-1"},
        {"kill@step=5,step=6", "given twice"},
        {"kill@step=5,color=red", "unknown key 'color'"},
        {"kill@step=5,code=3", "unknown key 'code'"}, /* code belongs to exit */
        {"slow@rank=1", "needs factor"},
        {"slow@rank=1,factor=1", "factor=1 is not a number > 1"},
        {"exit@step=3,code=0", "code=0"},
        {"exit@step=3,code=256", "code=256"},
        {"nan@step", "not key=value"},
        {"corrupt-ckpt@step=4,kill=2", "kill=2 is not 0 or 1"},
        {"kill@step=4,kill=1", "unknown key 'kill'"},
        {"kill@at=start", "at=start is not 'resume'"},
        {"kill@at=resume,step=3", "takes no step"},
        {"hang@at=resume", "unknown key 'at'"},
        {"torn-ckpt@rank=0", "needs step"},
    };
    for (size_t i = 0; i < sizeof(BAD) / sizeof(BAD[0]); i++) {
        fault_spec f;
        char err[256] = "";
        if (fault_parse(BAD[i][0], &f, err, sizeof(err)) != -1) fail_msg("accepted '%s'", BAD[i][0]);
        if (!strstr(err, BAD[i][1])) fail_msg("'%s': message '%s' lacks '%s'", BAD[i][0], err, BAD[i][1]);
    }
    fault_spec fs[4];
    char err[256] = "";
    assert_int_equal(fault_parse_list("kill@step=1;hang@step=2;nan@step=3;exit@step=4;slow@factor=2",
                                      fs, 4, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "too many"));
    assert_int_equal(fault_parse_list("kill@step=3;bogus", fs, 4, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "bogus"));
    assert_int_equal(fault_parse_list("kill@step=3,rank=4", fs, 4, err, sizeof(err)), 1);
    assert_int_equal(fault_check_ranks(fs, 1, 4, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "rank 4 is outside this job of 4 ranks"));
    assert_int_equal(fault_check_ranks(fs, 1, 5, err, sizeof(err)), 0);
}

/* The once-only record: what fired is disarmed on the next start, whatever the resume step. */
static void test_fault_record(void **state) {
    (void)state;
    fault_spec f[FAULT_MAX];
    char err[256];
    int n = fault_parse_list(" kill@step=5 ;; nan@step=3 ; slow@rank=1,factor=2.5;", f, FAULT_MAX,
                             err, sizeof(err));
    assert_int_equal(n, 3);
    char dir[300];
    snprintf(dir, sizeof(dir), "%s/rec", tu_dir);
    mkdir(dir, 0755);
    int fired[FAULT_MAX] = {0};
    assert_int_equal(fault_load_fired(dir, f, n, fired), 0); /* no file yet */
    assert_int_equal(fault_record_fired(dir, &f[1], 0, 3), 0);
    assert_int_equal(fault_record_fired(dir, &f[2], 1, 1), 0);
    memset(fired, 0, sizeof(fired));
    assert_int_equal(fault_load_fired(dir, f, n, fired), 2);
    assert_int_equal(fired[0], 0);
    assert_int_equal(fired[1], 1);
    assert_int_equal(fired[2], 1);
    /* a different spec with a common prefix is not disarmed */
    fault_spec g;
    assert_int_equal(fault_parse("nan@step=30", &g, err, sizeof(err)), 0);
    int gf = 0;
    assert_int_equal(fault_load_fired(dir, &g, 1, &gf), 0);
}

/* corrupt-ckpt flips one byte in the data section, and the checkpoint no longer verifies. */
static void test_fault_corrupt(void **state) {
    (void)state;
    char root[300], tmpdir[600], file[700], err[512];
    snprintf(root, sizeof(root), "%s/ckroot", tu_dir);
    assert_int_equal(ckpt_begin(root, 40, tmpdir, sizeof(tmpdir), err, sizeof(err)), 0);
    float w[64];
    for (int i = 0; i < 64; i++) w[i] = (float)i;
    st_tensor t = {.name = "w", .dtype = ST_F32, .ndim = 1, .shape = {64}, .data = w};
    snprintf(file, sizeof(file), "%s/model.safetensors", tmpdir);
    assert_int_equal(st_write(file, &t, 1, NULL, err, sizeof(err)), 0);
    assert_int_equal(ckpt_commit(root, 40, err, sizeof(err)), 0);
    assert_int_equal(ckpt_verify(root, 40, err, sizeof(err)), 0);
    char step_dir[600], path[700];
    ckpt_step_path(step_dir, sizeof(step_dir), root, 40, "");
    snprintf(path, sizeof(path), "%s/model.safetensors", step_dir);
    unsigned char before[1024], after[1024];
    FILE *fp = fopen(path, "rb");
    size_t nb = fread(before, 1, sizeof(before), fp);
    fclose(fp);
    char which[800];
    assert_int_equal(fault_corrupt_checkpoint(step_dir, which, sizeof(which), err, sizeof(err)), 0);
    assert_string_equal(which, path);
    fp = fopen(path, "rb");
    size_t na = fread(after, 1, sizeof(after), fp);
    fclose(fp);
    assert_int_equal(na, nb);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | before[i];
    int ndiff = 0;
    for (size_t i = 0; i < nb; i++)
        if (before[i] != after[i]) {
            ndiff++;
            assert_true(i >= 8 + hlen); /* inside the tensor bytes, not the header */
        }
    assert_int_equal(ndiff, 1);
    assert_int_equal(ckpt_verify(root, 40, err, sizeof(err)), -1);
    assert_int_equal(fault_corrupt_checkpoint(root, NULL, 0, err, sizeof(err)), -1); /* no tensors */
}

/* ---- heartbeats ------------------------------------------------------------------------------- */

static void test_heartbeat(void **state) {
    (void)state;
    hb_record r = {.rank = 3, .pid = 4242, .node = 0xdeadbeef, .start = 40, .step = 57,
                   .step_ms = 12.5, .busy_ms = 11.25, .time = 1732960000.125};
    snprintf(r.state, sizeof(r.state), "run");
    char buf[HB_RECORD_BYTES + 1];
    hb_format(buf, &r);
    assert_int_equal(strlen(buf), HB_RECORD_BYTES);
    assert_int_equal(buf[HB_RECORD_BYTES - 1], '\n');
    hb_record q;
    assert_int_equal(hb_parse(buf, HB_RECORD_BYTES, &q), 0);
    assert_int_equal(q.rank, 3);
    assert_int_equal(q.pid, 4242);
    assert_int_equal(q.step, 57);
    assert_int_equal(q.start, 40);
    assert_true(q.node == 0xdeadbeefu);
    assert_near(q.step_ms, 12.5, 1e-9);
    assert_near(q.busy_ms, 11.25, 1e-9);
    assert_near(q.time, 1732960000.125, 1e-6);
    assert_string_equal(q.state, "run");
    char torn[HB_RECORD_BYTES + 1];
    memcpy(torn, buf, sizeof(torn));
    char *s = strstr(torn, "step=57");
    s[6] = '8'; /* a half-written record: step=58 with the old checksum */
    assert_int_equal(hb_parse(torn, HB_RECORD_BYTES, &q), -1);
    assert_int_equal(hb_parse(buf, 10, &q), -1);

    char dir[300], err[256];
    snprintf(dir, sizeof(dir), "%s/hb", tu_dir);
    hb_writer w[3];
    for (int k = 2; k >= 0; k--) {
        assert_int_equal(hb_open(&w[k], dir, k, err, sizeof(err)), 0);
        hb_write(&w[k], 10 + k, 5.0, 4.0 + k, "run");
    }
    hb_write(&w[1], 20, 5.0, 4.0, "done"); /* rewritten in place */
    hb_record all[8];
    assert_int_equal(hb_scan(dir, all, 8), 3);
    assert_int_equal(all[0].rank, 0);
    assert_int_equal(all[1].step, 20);
    assert_int_equal(all[1].start, 11); /* the first record's step, kept for the writer's life */
    assert_true(all[1].node == hb_node_id());
    assert_string_equal(all[1].state, "done");
    assert_int_equal(all[2].pid, (int)getpid());
    for (int k = 0; k < 3; k++) hb_close(&w[k]);
    hb_writer off;
    assert_int_equal(hb_open(&off, NULL, 0, err, sizeof(err)), 0); /* disabled: no-op */
    hb_write(&off, 1, 1, 1, "run");
    char missing[320];
    snprintf(missing, sizeof(missing), "%s/none", tu_dir);
    assert_int_equal(hb_scan(missing, all, 8), 0);
}

/* ckpt_every = auto: Young/Daly's interval in steps. */
static void test_ckpt_auto_every(void **state) {
    (void)state;
    /* C = 0.05 s, M = 100 s: tau = sqrt(10) = 3.162 s; at 0.1 s/step -> 32 steps */
    assert_int_equal(sched_auto_every(0.05, 100, 0.1), 32);
    assert_int_equal(sched_auto_every(0.05, 400, 0.1), 63); /* 4x the MTBF: 2x the interval */
    assert_int_equal(sched_auto_every(0.05, 100, 10), 1);   /* never below one step */
    assert_int_equal(sched_auto_every(0.05, INFINITY, 0.1), 1000000000); /* never fails */
    assert_int_equal(sched_auto_every(0, 100, 0.1), 1); /* tau = sqrt(2e-4) = 0.014 s */
}

/* The supervisor's record: alive while its pid lives with the recorded start time; a dead pid,
 * a reused pid (other start time) or, for another host, a stale record is gone. */
static void test_supervisor_record(void **state) {
    (void)state;
    char path[320];
    snprintf(path, sizeof(path), "%s/sup.rec", tu_dir);
    assert_int_equal(hb_sup_alive(path, 10, 0), -1); /* no record yet */
    unsigned long long me = hb_proc_start((int)getpid());
    assert_true(me > 0);
    assert_true(hb_proc_alive((int)getpid()));
    assert_int_equal(hb_sup_write(path, (int)getpid(), me), 0);
    assert_int_equal(hb_sup_alive(path, 10, 0), 1);
    assert_int_equal(hb_sup_write(path, (int)getpid(), me + 1), 0); /* a reused pid */
    assert_int_equal(hb_sup_alive(path, 10, 0), 0);
    pid_t child = fork();
    if (child == 0) _exit(0);
    int st;
    waitpid(child, &st, 0);
    assert_false(hb_proc_alive((int)child)); /* reaped: no such process */
    assert_int_equal(hb_sup_write(path, (int)child, 0), 0);
    assert_int_equal(hb_sup_alive(path, 10, 0), 0);
    /* another host (a foreign node id): judged by the record's age */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "MTSUP1 pid=1 node=%08x start=5 time=1000.000000\n", hb_node_id() ^ 1u);
    fclose(f);
    assert_int_equal(hb_sup_alive(path, 10, 1009.0), 1);
    assert_int_equal(hb_sup_alive(path, 10, 1011.0), 0);
}

/* ---- supervisor helpers ----------------------------------------------------------------------- */

static void test_supervisor_helpers(void **state) {
    (void)state;
    const double want[] = {0.5, 1, 2, 4, 6, 6};
    for (int k = 1; k <= 6; k++) assert_near(sup_backoff_s(0.5, 6, k), want[k - 1], 1e-12);
    char path[300], err[512];
    snprintf(path, sizeof(path), "%s/hosts", tu_dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "# fake cluster\nnode-a slots=2\nnode-b slots=2 # two ranks\n\nnode-c\n");
    fclose(f);
    sup_hosts h;
    assert_int_equal(sup_hosts_parse(path, &h, err, sizeof(err)), 0);
    assert_int_equal(h.n, 3);
    assert_int_equal(sup_hosts_slots(&h), 5);
    const int host_of[] = {0, 0, 1, 1, 2, -1};
    for (int r = 0; r < 6; r++) assert_int_equal(sup_host_of_rank(&h, r), host_of[r]);
    h.cordoned[0] = 1; /* ranks shift onto the remaining hosts */
    assert_int_equal(sup_hosts_slots(&h), 3);
    assert_int_equal(sup_host_of_rank(&h, 0), 1);
    assert_int_equal(sup_host_of_rank(&h, 2), 2);
    assert_int_equal(sup_host_of_rank(&h, 3), -1);
    char out[320];
    snprintf(out, sizeof(out), "%s/hosts.active", tu_dir);
    assert_int_equal(sup_hosts_write(&h, out), 0);
    sup_hosts h2;
    assert_int_equal(sup_hosts_parse(out, &h2, err, sizeof(err)), 0);
    assert_int_equal(h2.n, 2);
    assert_string_equal(h2.name[0], "node-b");
    f = fopen(path, "w");
    fprintf(f, "node-a slots=zero\n");
    fclose(f);
    assert_int_equal(sup_hosts_parse(path, &h, err, sizeof(err)), -1);
    assert_non_null(strstr(err, ":1: slots"));
    /* max_slots= is not slots= (it used to be found by a substring search), count= is */
    f = fopen(path, "w");
    fprintf(f, "node-a max_slots=8 slots=2\nnode-b count=3 cpu=x\n");
    fclose(f);
    assert_int_equal(sup_hosts_parse(path, &h, err, sizeof(err)), 0);
    assert_int_equal(h.slots[0], 2);
    assert_int_equal(h.slots[1], 3);
    /* slot counts whose sum would overflow an int are refused */
    f = fopen(path, "w");
    fprintf(f, "node-a slots=2147483647\n");
    fclose(f);
    assert_int_equal(sup_hosts_parse(path, &h, err, sizeof(err)), -1);
    /* a line longer than the buffer is an error, not a second host made of its tail */
    f = fopen(path, "w");
    fprintf(f, "node-a slots=1 ");
    for (int k = 0; k < 600; k++) fputc(k < 500 ? ' ' : 'x', f);
    fprintf(f, "\n");
    fclose(f);
    assert_int_equal(sup_hosts_parse(path, &h, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "longer than"));

    hb_record r[4] = {{.rank = 0, .step = 30, .time = 5, .busy_ms = 10},
                      {.rank = 1, .step = 29, .time = 6, .busy_ms = 31},
                      {.rank = 2, .step = 30, .time = 4, .busy_ms = 11},
                      {.rank = 3, .step = 29, .time = 3, .busy_ms = 12}};
    for (int i = 0; i < 4; i++) snprintf(r[i].state, sizeof(r[i].state), "run");
    assert_int_equal(sup_blame(r, 4), 3); /* lowest step, then oldest */
    assert_int_equal(sup_blame(r, 0), -1);
    assert_near(sup_median_busy(r, 4), 11, 0); /* lower median of 10, 11, 12, 31 */
    snprintf(r[3].state, sizeof(r[3].state), "init");
    assert_near(sup_median_busy(r, 4), 11, 0); /* 10, 11, 31 */
}

/* ---- ETTR on hand-made logs ------------------------------------------------------------------- */

static const double T = 1.7e9; /* job clock origin (unix s) */

static void exec_sql(sqlite3 *db, const char *fmt, ...) {
    char sql[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof(sql), fmt, ap);
    va_end(ap);
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) fail_msg("%s: %s", sql, msg);
}

static void ev(sqlite3 *db, int run, double t, const char *kind, const char *detail) {
    exec_sql(db, "INSERT INTO events(run_id, time, kind, rank, detail) VALUES(%d, %.6f, '%s', 0,"
             " '%s')", run, T + t, kind, detail);
}

static sqlite3 *fresh_db(const char *name, char *dir, size_t n) {
    snprintf(dir, n, "%s/%s", tu_dir, name);
    char err[256];
    rundb *r = rundb_open(dir, err, sizeof(err)); /* the real schema */
    assert_non_null(r);
    rundb_close(r);
    char path[400];
    snprintf(path, sizeof(path), "%s/run.db", dir);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    return db;
}

/* Timeline (seconds after T):
 *   0.0 supervisor_start; 0.5 launch 1; run 1 created at 1.0, loop starts at 2.0;
 *   steps 1..10: 0.5 s each, step k ends at 2.0 + 0.6k (first starts at 2.1, last ends at 8.0);
 *   checkpoint of step 5 (two tiers, one save, stall 50 ms); 8.2 kill fault; 9.0 failure
 *   detected (supervisor estimate 8.9); 9.5 teardown done; 10.5 backoff done + launch 2;
 *   run 2 created at 11.0, loads step 5 in 300 ms, loop starts at 12.0; steps 6..20 end at
 *   12.0 + 0.6(k-5) (step 6 starts at 12.1, ends at 12.6); checkpoint of step 10 (stall 70 ms,
 *   plus a 30 ms wait for the previous save); 21.5 supervisor_end. */
static double g_overlap_ms; /* > 0: the step-10 save also logs overlap_ms (its steps' excess) */

static void build_faulted_job(sqlite3 *db) {
    ev(db, 0, 0.0, "supervisor_start", "{}");
    ev(db, 0, 0.5, "launch", "{\"attempt\":1}");
    exec_sql(db, "INSERT INTO runs(id, name, started_at, status, world_size) VALUES(1, 'j', %.6f,"
             " 'running', 1)", T + 1.0);
    ev(db, 1, 2.0, "start", "{}");
    for (int k = 1; k <= 10; k++)
        exec_sql(db, "INSERT INTO metrics(run_id, step, train_loss, step_ms, wall_s, tokens_per_s)"
                 " VALUES(1, %d, %g, 500, %g, 100)", k, 5.0 - 0.1 * k, 0.6 * k);
    ev(db, 1, 5.0, "checkpoint", "{\"step\":5,\"tier\":0,\"snapshot_ms\":50}");
    ev(db, 1, 5.0, "checkpoint", "{\"step\":5,\"tier\":1,\"snapshot_ms\":50}");
    ev(db, 1, 8.2, "fault", "{\"kind\":\"kill\",\"step\":11}");
    ev(db, 0, 9.0, "failure", "{\"kind\":\"crash\",\"failed_at\":1700000008.9}");
    ev(db, 0, 9.5, "teardown", "{\"seconds\":0.5}");
    ev(db, 0, 10.5, "backoff", "{\"seconds\":1.0}");
    ev(db, 0, 10.5, "launch", "{\"attempt\":2}");
    exec_sql(db, "INSERT INTO runs(id, name, started_at, ended_at, status, world_size) VALUES(2,"
             " 'j', %.6f, %.6f, 'completed', 1)", T + 11.0, T + 21.2);
    ev(db, 2, 11.4, "resume", "{\"step\":5,\"load_ms\":300}");
    ev(db, 2, 12.0, "start", "{}");
    for (int k = 6; k <= 20; k++)
        exec_sql(db, "INSERT INTO metrics(run_id, step, train_loss, step_ms, wall_s, tokens_per_s)"
                 " VALUES(2, %d, %g, 500, %g, 100)", k, 5.0 - 0.1 * k, 0.6 * (k - 5));
    exec_sql(db, "INSERT INTO metrics(run_id, step, val_loss, wall_s) VALUES(2, 20, 3.1, 9.1)");
    char ck10[128];
    snprintf(ck10, sizeof(ck10), "{\"step\":10,\"tier\":1,\"snapshot_ms\":70%s%.0f}",
             g_overlap_ms > 0 ? ",\"overlap_ms\":" : "", g_overlap_ms > 0 ? g_overlap_ms : 0);
    if (g_overlap_ms > 0) ev(db, 2, 15.0, "checkpoint", ck10);
    else ev(db, 2, 15.0, "checkpoint", "{\"step\":10,\"tier\":1,\"snapshot_ms\":70}");
    ev(db, 2, 15.1, "ckpt_wait", "{\"step\":10,\"waited_ms\":30.0}");
    ev(db, 0, 21.5, "supervisor_end", "{\"exit\":0}");
}

/* A save's overlap cost (overlap_ms: the excess of the steps its background write overlapped)
 * moves from the training line to the checkpoint line: the stall line grows by it, the useful
 * time shrinks by it, the other lines and the remainder do not move. */
static void test_ettr_overlap(void **state) {
    (void)state;
    char dir[300], err[256];
    sqlite3 *db = fresh_db("ettr_overlap", dir, sizeof(dir));
    g_overlap_ms = 400;
    build_faulted_job(db);
    g_overlap_ms = 0;
    ettr_report r;
    assert_int_equal(ettr_compute(db, &r, err, sizeof(err)), 0);
    sqlite3_close(db);
    const double eps = 1e-6, wall = 21.5;
    assert_near(r.useful_s, 20 * 0.5 - 0.4, eps);
    assert_near(r.ckpt_stall_s, 0.050 + 0.070 + 0.030 + 0.4, eps);
    assert_near(r.ettr, (20 * 0.5 - 0.4) / wall, eps);
    assert_near(r.recompute_s, 5 * 0.5 + (8.2 - 8.0), eps);
    assert_near(r.other_s, wall - (r.useful_s + r.recompute_s + r.detect_s + r.teardown_s +
                                   r.backoff_s + r.startup_s + r.ckpt_load_s + r.relaunch_s +
                                   r.ckpt_stall_s), eps);
    assert_near(r.other_s, wall - (10 + 2.7 + 0.8 + 0.5 + 1.0 + 2.1 + 0.3 + 1.3 + 0.15), eps);
    assert_int_equal(r.checkpoints, 2);
}

/* Localisation (sched/stacks.h, sched/sdc.h) is its own line: the supervisor's stack capture
 * inside the detection window moves from detection to localisation (a diagnose capture outside
 * any window, and one from `minitrain diagnose`, do not count), and the silent-corruption checks'
 * ms move from "other" to localisation; every other line stays where it was. */
static void test_ettr_localisation(void **state) {
    (void)state;
    char dir[300], err[256];
    sqlite3 *db = fresh_db("ettr_loc", dir, sizeof(dir));
    build_faulted_job(db);
    ettr_report base;
    assert_int_equal(ettr_compute(db, &base, err, sizeof(err)), 0);
    assert_near(base.localise_s, 0, 0);
    ev(db, 0, 8.95, "stacks", "{\"seconds\":0.3,\"source\":\"supervisor\"}");
    ev(db, 0, 8.96, "stacks", "{\"seconds\":0.2,\"source\":\"diagnose\"}");
    ev(db, 0, 3.00, "stacks", "{\"seconds\":0.1,\"source\":\"supervisor\"}");
    ev(db, 1, 3.10, "sdc_ok", "{\"step\":2,\"ms\":20}");
    ev(db, 2, 14.0, "sdc_ok", "{\"step\":10,\"ms\":30}");
    ettr_report r;
    assert_int_equal(ettr_compute(db, &r, err, sizeof(err)), 0);
    sqlite3_close(db);
    const double eps = 1e-6;
    assert_near(r.localise_s, 0.3 + 0.020 + 0.030, eps);
    assert_int_equal(r.localisations, 3);
    assert_near(r.detect_s, base.detect_s - 0.3, eps);
    assert_near(r.other_s, base.other_s - 0.050, eps);
    assert_near(r.useful_s, base.useful_s, eps);
    assert_near(r.recompute_s, base.recompute_s, eps);
    assert_near(r.teardown_s, base.teardown_s, eps);
    assert_near(r.wall_s, base.wall_s, eps);
}

static void test_ettr_hand_made(void **state) {
    (void)state;
    char dir[300], err[256];
    sqlite3 *db = fresh_db("ettr1", dir, sizeof(dir));
    build_faulted_job(db);
    ettr_report r;
    assert_int_equal(ettr_compute(db, &r, err, sizeof(err)), 0);
    sqlite3_close(db);
    const double eps = 1e-6;
    double wall = 21.5;
    double useful = 20 * 0.5;                  /* steps 1..5 of run 1, 6..20 of run 2 */
    double recompute = 5 * 0.5 + (8.2 - 8.0);  /* steps 6..10 of run 1 + work after step 10 */
    double detect = 9.0 - 8.2, teardown_s = 9.5 - 9.0, backoff = 10.5 - 9.5;
    double startup = 2.1 - 0.0;                /* job start -> first step starts */
    double load = 0.3, relaunch = (12.1 - 10.5) - load;
    double stall = 0.050 + 0.070 + 0.030;
    assert_near(r.wall_s, wall, eps);
    assert_near(r.useful_s, useful, eps);
    assert_near(r.recompute_s, recompute, eps);
    assert_near(r.detect_s, detect, eps);
    assert_near(r.teardown_s, teardown_s, eps);
    assert_near(r.backoff_s, backoff, eps);
    assert_near(r.startup_s, startup, eps);
    assert_near(r.ckpt_load_s, load, eps);
    assert_near(r.relaunch_s, relaunch, eps);
    assert_near(r.ckpt_stall_s, stall, eps);
    assert_near(r.other_s, wall - (useful + recompute + detect + teardown_s + backoff + startup +
                                   load + relaunch + stall), eps);
    assert_true(r.other_s > 0);
    assert_near(r.ettr, useful / wall, eps);
    assert_int_equal(r.failures, 1);
    assert_int_equal(r.restarts, 1);
    assert_int_equal(r.lost_steps, 5);
    assert_int_equal(r.kept_steps, 20);
    assert_int_equal(r.n_kinds, 1);
    assert_string_equal(r.by_kind[0].kind, "crash");
    assert_near(r.mttr_s, 12.6 - 8.2, eps);           /* failure -> end of first step after */
    assert_near(r.restart_overhead_s, 12.1 - 8.2, eps); /* failure -> training again */
    assert_near(r.mtbf_s, wall, eps);
    assert_int_equal(r.checkpoints, 2);

    /* The same through `report --json` (stdout captured). */
    char out_path[400];
    snprintf(out_path, sizeof(out_path), "%s/report.json", tu_dir);
    fflush(stdout);
    int saved = dup(1), fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    close(fd);
    char svg[400];
    snprintf(svg, sizeof(svg), "%s/plot.svg", tu_dir);
    char *argv[] = {"report", "--run", dir, "--json", "--svg", svg, NULL};
    int rc = cmd_report(6, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    assert_int_equal(rc, 0);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(fs_read_file(out_path, 1 << 20, &text, &len, err, sizeof(err)), 0);
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    assert_near(cJSON_GetObjectItem(j, "ettr")->valuedouble, useful / wall, eps);
    assert_int_equal(cJSON_GetObjectItem(j, "restarts")->valueint, 1);
    assert_int_equal(cJSON_GetObjectItem(j, "failures")->valueint, 1);
    assert_int_equal(cJSON_GetObjectItem(j, "lost_steps")->valueint, 5);
    assert_near(cJSON_GetObjectItem(j, "mttr_s")->valuedouble, 4.4, eps);
    assert_int_equal(cJSON_GetObjectItem(j, "steps")->valueint, 20); /* existing key kept */
    cJSON_Delete(j);
    free(text);
    assert_int_equal(fs_read_file(svg, 1 << 20, &text, &len, err, sizeof(err)), 0);
    assert_non_null(strstr(text, "<svg"));
    assert_non_null(strstr(text, ">crash</text>"));
    assert_non_null(strstr(text, "restart 1"));
    assert_non_null(strstr(text, "</svg>"));
    free(text);
}

/* One clean run, no supervisor: 10 steps of 0.2 s; run created at 0, loop at 1.0,
 * step k ends at 1.0 + 0.25k, run ends at 4.0. */
static void test_ettr_clean_unsupervised(void **state) {
    (void)state;
    char dir[300], err[256];
    sqlite3 *db = fresh_db("ettr2", dir, sizeof(dir));
    exec_sql(db, "INSERT INTO runs(id, name, started_at, ended_at, status, world_size) VALUES(1,"
             " 'c', %.6f, %.6f, 'completed', 1)", T, T + 4.0);
    ev(db, 1, 1.0, "start", "{}");
    for (int k = 1; k <= 10; k++)
        exec_sql(db, "INSERT INTO metrics(run_id, step, train_loss, step_ms, wall_s) VALUES(1, %d,"
                 " 2.0, 200, %g)", k, 0.25 * k);
    ev(db, 1, 3.9, "end", "completed");
    ettr_report r;
    assert_int_equal(ettr_compute(db, &r, err, sizeof(err)), 0);
    sqlite3_close(db);
    assert_near(r.wall_s, 4.0, 1e-6);
    assert_near(r.ettr, 10 * 0.2 / 4.0, 1e-6);
    assert_near(r.startup_s, 1.05, 1e-6);
    assert_int_equal(r.failures + r.restarts + r.lost_steps, 0);
    assert_true(isnan(r.mttr_s) && isnan(r.mtbf_s));
    /* an empty database: no runs, no answer, no crash */
    db = fresh_db("ettr3", dir, sizeof(dir));
    assert_int_equal(ettr_compute(db, &r, err, sizeof(err)), 0);
    assert_true(isnan(r.ettr));
    exec_sql(db, "DROP TABLE metrics");
    assert_int_equal(ettr_compute(db, &r, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "metrics"));
    sqlite3_close(db);
}

/* ---- simulator -------------------------------------------------------------------------------- */

static void test_sim_no_failures(void **state) {
    (void)state;
    /* Never fails: ETTR = 1 - checkpoint overhead = tau / (tau + C) over whole cycles. */
    const double tau = 600, C = 20;
    sim_params p = {.job_mtbf_s = INFINITY, .ckpt_save_s = C, .restart_s = 99,
                    .interval_s = tau, .horizon_s = 50 * (tau + C)};
    sim_result r;
    sim_run(&p, 7, &r);
    assert_near(r.ettr, tau / (tau + C), 1e-12);
    assert_int_equal(r.failures, 0);
    assert_int_equal(r.checkpoints, 50);
    assert_near(r.ckpt_s, 50 * C, 1e-6);
    assert_near(sim_first_order_ettr(&p), tau / (tau + C), 1e-12);
    /* free checkpoints, no failures: everything is useful */
    p.ckpt_save_s = 0;
    sim_run(&p, 7, &r);
    assert_near(r.ettr, 1.0, 1e-12);
    assert_true(isinf(sim_job_mtbf_s(1000, INFINITY)));
    assert_near(sim_job_mtbf_s(16384, 50000), 50000.0 * 3600 / 16384, 1e-6);
}

static void test_sim_time_adds_up(void **state) {
    (void)state;
    sim_params p = {.job_mtbf_s = 3000, .ckpt_save_s = 30, .restart_s = 200, .interval_s = 500,
                    .horizon_s = 2e5};
    sim_result r;
    sim_run(&p, 3, &r);
    assert_true(r.failures > 20);
    assert_near(r.useful_s + r.lost_s + r.ckpt_s + r.restart_s, p.horizon_s, 1e-6 * p.horizon_s);
    sim_result r2;
    sim_run(&p, 3, &r2); /* deterministic per seed */
    assert_true(r2.ettr == r.ettr);
}

/* C, R << tau << M: Monte Carlo mean within 1% of the first-order model. */
static void test_sim_vs_first_order(void **state) {
    (void)state;
    sim_params p = {.job_mtbf_s = 100 * 3600.0, .ckpt_save_s = 30, .restart_s = 60,
                    .interval_s = 3600, .horizon_s = 20000 * 3600.0};
    sim_summary s;
    sim_many(&p, 20, 11, &s);
    double fo = sim_first_order_ettr(&p);
    /* by hand: 3600/3630 * (1 - (60 + 1815)/360000) */
    assert_near(fo, 3600.0 / 3630.0 * (1 - 1875.0 / 360000.0), 1e-12);
    assert_true(fabs(s.mean - fo) / fo < 0.01);
    assert_true(s.std > 0 && s.p5 <= s.p50 && s.p50 <= s.p95);
    assert_near(s.mean_failures, p.horizon_s / p.job_mtbf_s, 0.1 * p.horizon_s / p.job_mtbf_s);
}

/* Young's interval is (near) optimal: ETTR there beats half and double the interval. */
static void test_sim_young_daly(void **state) {
    (void)state;
    const double C = 60, M = 4 * 3600.0, R = 300;
    double yd = sim_young_daly_interval(C, M);
    assert_near(yd * yd, 2 * C * M, 1e-6);
    double e[3];
    const double f[3] = {0.5, 1.0, 2.0};
    for (int k = 0; k < 3; k++) {
        sim_params p = {M, C, R, f[k] * yd, 4000 * 3600.0};
        sim_summary s;
        sim_many(&p, 8, 5, &s);
        e[k] = s.mean;
    }
    assert_true(e[1] > e[0] && e[1] > e[2]);
    /* the restart time that reaches a target, plugged back in, gives the target */
    double rmax = sim_max_restart_for(0.95, 5, 600, 20000);
    sim_params q = {20000, 5, rmax, 600, 1};
    assert_near(sim_first_order_ettr(&q), 0.95, 1e-12);
    char *help[] = {"simulate", "--help", NULL};
    fflush(stdout);
    int saved = dup(1), devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    int rc = cmd_simulate(2, help);
    char *bad[] = {"simulate", "--bogus", "1", NULL};
    int rc2 = cmd_simulate(3, bad);
    fflush(stdout);
    dup2(saved, 1);
    close(devnull);
    close(saved);
    assert_int_equal(rc, 0);
    assert_int_equal(rc2, 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fault_parse),
        cmocka_unit_test(test_fault_parse_bad),
        cmocka_unit_test(test_fault_tear),
        cmocka_unit_test(test_fault_record),
        cmocka_unit_test(test_fault_corrupt),
        cmocka_unit_test(test_heartbeat),
        cmocka_unit_test(test_supervisor_record),
        cmocka_unit_test(test_ckpt_auto_every),
        cmocka_unit_test(test_supervisor_helpers),
        cmocka_unit_test(test_ettr_hand_made),
        cmocka_unit_test(test_ettr_localisation),
        cmocka_unit_test(test_ettr_overlap),
        cmocka_unit_test(test_ettr_clean_unsupervised),
        cmocka_unit_test(test_sim_no_failures),
        cmocka_unit_test(test_sim_time_adds_up),
        cmocka_unit_test(test_sim_vs_first_order),
        cmocka_unit_test(test_sim_young_daly),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
