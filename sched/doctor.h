/*
 * sched/doctor.h — node health checks (`minitrain doctor`, cmd/doctor.c): the stop-time checks a
 * suspect machine must pass before it rejoins a job (ByteRobust, SOSP 2025 §4.3: GPU diagnostics
 * and NCCL tests on the suspects; here the CPU analogues).
 *
 *   sgemm       the stable sgemm peak (ops/peak.h peak_sgemm_stable) against a reference: a
 *               baseline file, else the fleet median of the doctor records in run.db files, else
 *               this machine's own figure in the peak cache; fails below tolerance x reference
 *   bandwidth   memory read bandwidth (peak_bandwidth over 256 MiB) against the same references
 *   disk        per tier root: write 32 MiB + fsync, MB/s; fails on any error
 *   tier0_free  free space under the tier-0 root (statvfs) against a minimum
 *   pingpong    under mpirun, every pair of ranks: half round-trip of one float, µs
 *   allreduce   under mpirun, every pair of ranks: all-reduce of 16 MiB over the pair, GB/s;
 *               fails below half the median over the pairs (the odd link out)
 *
 * Test hook: MINITRAIN_DOCTOR_SLOWDOWN=F (> 1) divides the measured sgemm and bandwidth by F — a
 * machine that computes F times slower than it should, for tests of the re-admission rule.
 */
#ifndef MT_SCHED_DOCTOR_H
#define MT_SCHED_DOCTOR_H

#include <stddef.h>

#include "parallel/comm.h"

#define DOCTOR_MAX_CHECKS 64

typedef struct {
    char name[48];   /* "sgemm", "disk tier 1", "pingpong 0-1", ... */
    int ok;
    double value;    /* in unit */
    double ref;      /* the reference it was held to (NAN: none) */
    char unit[16];
    char text[512];  /* one line: what was measured and why it passes or fails */
} doctor_check;

typedef struct {
    doctor_check c[DOCTOR_MAX_CHECKS];
    int n, failed;
    char host[64];
    char ref_source[300]; /* where the sgemm/bandwidth reference came from */
} doctor_result;

typedef struct {
    int threads;             /* OpenBLAS/OpenMP threads (0: the library default) */
    double tolerance;        /* pass at >= tolerance x reference (default 0.8) */
    double ref_sgemm, ref_bw; /* FLOP/s, bytes/s (<= 0: none) */
    const char *roots[4];    /* tier roots to write to; NULL-terminated */
    int root_tier[4];        /* their tier numbers */
    const char *tier0_root;  /* for the free-space check (NULL: skip) */
    double min_free_mb;
    double probe_s;          /* time cap of each probe (s) */
} doctor_opts;

/* The reference figures from a baseline file (JSON with "sgemm_gflops", "bandwidth_gbs", as
 * `doctor --json` prints). Returns 0, or -1 with err. */
int doctor_read_baseline(const char *path, double *sgemm, double *bw, char *err, size_t errlen);

/* The fleet medians of the newest doctor record (EV_DOCTOR) of every host other than `self` in
 * DIR/run.db and DIR/<each subdirectory>/run.db. Returns the number of hosts (0: none; the
 * figures are then left alone). */
int doctor_fleet_median(const char *dir, const char *self, double *sgemm, double *bw);

/* Run the node checks (this process only) into r. */
void doctor_run_local(const doctor_opts *o, doctor_result *r);

/* Under MPI with >= 2 ranks: ping-pong and pair all-reduce between every pair of world ranks
 * (collective over world); world rank 0's r gets one check per pair and test. No-op for 1 rank. */
void doctor_run_pairs(comm *world, doctor_result *r);

/* The result as JSON (caller frees with cJSON_Delete). */
struct cJSON *doctor_json(const doctor_result *r);

#endif /* MT_SCHED_DOCTOR_H */
