/*
 * sched/heartbeat.h — per-rank heartbeats: how the supervisor sees a job's progress.
 *
 * The supervisor (sched/supervisor.c, sched/sup_attempt.c) creates a directory and passes it to
 * every rank in the environment variable MINITRAIN_HEARTBEAT_DIR. Each rank owns one file there,
 * rank_NNNNN.hb, and rewrites ONE fixed-size text record at offset 0 after every optimizer step
 * (a pwrite of HB_RECORD_BYTES bytes: no SQLite, no fsync, no rename — a few microseconds):
 *
 *   MTHB1 rank=3 pid=4242 node=5f0e1d2c start=40 step=57 step_ms=12.500 busy_ms=12.100
 *   time=1732960000.123456 state=run sum=1a2b3c4d<spaces to HB_RECORD_BYTES-1>\n
 *
 *   node     FNV-1a 32 of the rank's host name: the supervisor checks a pid only on its own host;
 *   start    the step this process started at (0, or the step its checkpoint resume loaded): the
 *            first record a writer writes fixes it, so the supervisor can say where a relaunch
 *            really resumed, whatever step it has reached by the time it looks;
 *   step     optimizer steps completed by this rank;
 *   step_ms  the step's wall time (what the trainer logs);
 *   busy_ms  wall time since this rank's previous heartbeat minus the time it spent blocked in
 *            communication (comm_seconds()): in synchronous training every rank's step takes as
 *            long as the slowest rank's, so only busy time tells the straggler apart;
 *   time     unix seconds of the write; state init|run|done, or exit:N when the rank is about to
 *            exit with status N (sched_exit_heartbeat) — a dead rank that said so is not a crash;
 *   sum      FNV-1a 32 of the bytes before " sum=", so a reader never trusts a torn record.
 * The supervisor only reads these files (hb_scan); "no progress" = no rank's (step, state)
 * changed for the heartbeat timeout.
 *
 * The other direction: the supervisor rewrites HB_SUP_FILE in the same directory about once a
 * second ("MTSUP1 pid=P node=N start=T time=S", T = the process start time from /proc, so a
 * reused pid is not mistaken for it) and passes its path in HB_ENV_SUP. Every rank watches it
 * (sched/hooks.h) and stops when the supervisor is gone — on its own host at once (the pid is
 * dead), elsewhere once the record is HB_SUP_STALE_S old — so a `kill -9` of `minitrain run`
 * does not leave a job training with nobody watching it.
 */
#ifndef MT_SCHED_HEARTBEAT_H
#define MT_SCHED_HEARTBEAT_H

#include <stddef.h>

#define HB_ENV_DIR "MINITRAIN_HEARTBEAT_DIR"
#define HB_RECORD_BYTES 192
#define HB_MAX_RANKS 1024
#define HB_ENV_SUP "MINITRAIN_SUPERVISOR"
#define HB_SUP_FILE "supervisor"
#define HB_SUP_STALE_S 10.0

typedef struct {
    int rank, pid;
    unsigned node; /* hb_node_id() of the writer's host */
    int start, step;
    double step_ms, busy_ms, time;
    char state[16];
} hb_record;

typedef struct {
    int fd; /* -1 = disabled (no MINITRAIN_HEARTBEAT_DIR) */
    int rank;
    int start; /* step of the first record (-1 before it) */
    char path[4200];
} hb_writer;

/* Open (create) DIR/rank_NNNNN.hb for this rank. dir NULL or "" disables the writer (every call
 * becomes a no-op) and returns 0. Returns -1 with err when the file cannot be created. */
int hb_open(hb_writer *w, const char *dir, int rank, char *err, size_t errlen);

/* Rewrite the record (state: "init", "run" or "done"); the first call's step becomes the
 * record's `start` for the writer's life. Cheap; errors are ignored (a missing
 * heartbeat is what the supervisor is there to notice). */
void hb_write(hb_writer *w, int step, double step_ms, double busy_ms, const char *state);

void hb_close(hb_writer *w);

/* Format / parse one record. hb_format writes exactly HB_RECORD_BYTES bytes (no NUL needed by the
 * reader) into buf (which must hold HB_RECORD_BYTES + 1). hb_parse returns 0, or -1 for a torn,
 * truncated or foreign record. */
void hb_format(char *buf, const hb_record *r);
int hb_parse(const char *buf, size_t len, hb_record *out);

/* Read every rank_*.hb in dir. Fills out[0..n) (sorted by rank) and returns n; records that do
 * not parse (torn write in progress) are skipped this time. Returns 0 for a missing directory. */
int hb_scan(const char *dir, hb_record *out, int max);

/* FNV-1a 32 of this host's name (cached). */
unsigned hb_node_id(void);

/* Start time of process pid on this host (field 22 of /proc/PID/stat, clock ticks; 1 when the
 * kernel says 0), or 0 when there is no such process or it has exited (zombie). */
unsigned long long hb_proc_start(int pid);

/* 1 when pid is a live (not zombie) process on this host. */
int hb_proc_alive(int pid);

/* The supervisor's record: write "MTSUP1 pid= node= start= time=" to path (atomic rename).
 * Returns 0 or -1. */
int hb_sup_write(const char *path, int pid, unsigned long long start);

/* Is the supervisor whose record is at path alive? On the same host: its pid lives and has the
 * recorded start time; on another host: the record is at most stale_s old at unix time now.
 * Returns 1 alive, 0 gone, -1 no readable record. */
int hb_sup_alive(const char *path, double stale_s, double now);

#endif /* MT_SCHED_HEARTBEAT_H */
