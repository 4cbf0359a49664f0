/*
 * sched/heartbeat.h — per-rank heartbeats: how the supervisor sees a job's progress.
 *
 * The supervisor (sched/supervisor.c) creates a directory and passes it to every rank in the
 * environment variable MINITRAIN_HEARTBEAT_DIR. Each rank owns one file there, rank_NNNNN.hb,
 * and rewrites ONE fixed-size text record at offset 0 after every optimizer step (a pwrite of
 * HB_RECORD_BYTES bytes: no SQLite, no fsync, no rename — a few microseconds):
 *
 *   MTHB1 rank=3 pid=4242 step=57 step_ms=12.500 busy_ms=12.100 time=1732960000.123456 state=run
 *   sum=1a2b3c4d<spaces to HB_RECORD_BYTES-1>\n
 *
 *   step     optimizer steps completed by this rank;
 *   step_ms  the step's wall time (what the trainer logs);
 *   busy_ms  wall time since this rank's previous heartbeat minus the time it spent blocked in
 *            communication (comm_seconds()): in synchronous training every rank's step takes as
 *            long as the slowest rank's, so only busy time tells the straggler apart;
 *   time     unix seconds of the write; state init|run|done;
 *   sum      FNV-1a 32 of the bytes before " sum=", so a reader never trusts a torn record.
 * The supervisor only reads these files (hb_scan); "no progress" = no rank's (step, state)
 * changed for the heartbeat timeout.
 */
#ifndef MT_SCHED_HEARTBEAT_H
#define MT_SCHED_HEARTBEAT_H

#include <stddef.h>

#define HB_ENV_DIR "MINITRAIN_HEARTBEAT_DIR"
#define HB_RECORD_BYTES 192
#define HB_MAX_RANKS 1024

typedef struct {
    int rank, pid, step;
    double step_ms, busy_ms, time;
    char state[16];
} hb_record;

typedef struct {
    int fd; /* -1 = disabled (no MINITRAIN_HEARTBEAT_DIR) */
    int rank;
    char path[4200];
} hb_writer;

/* Open (create) DIR/rank_NNNNN.hb for this rank. dir NULL or "" disables the writer (every call
 * becomes a no-op) and returns 0. Returns -1 with err when the file cannot be created. */
int hb_open(hb_writer *w, const char *dir, int rank, char *err, size_t errlen);

/* Rewrite the record (state: "init", "run" or "done"). Cheap; errors are ignored (a missing
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

#endif /* MT_SCHED_HEARTBEAT_H */
