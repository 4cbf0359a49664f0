/*
 * ops/peak.h — the denominator of MFU on this machine: the measured sgemm peak, the theoretical
 * CPU peak (cores × clock × FLOP/cycle of the ISA), the GPU peak table by device name, the check
 * that OpenBLAS runs the kernels the ISA supports (and the re-exec that makes it), and `minitrain
 * bench gemm`. Prefix peak_. The numerator (the model's FLOPs per token) and MFU itself are
 * model/flops.h's; docs/mfu.md explains every choice and its sources.
 */
#ifndef MT_PEAK_H
#define MT_PEAK_H

#include <stddef.h>

/* Measured CPU peak: a square n×n sgemm (C = A·B, 2·n³ FLOPs) with `threads` OpenBLAS threads
 * (<= 0: leave the library's count), one warm-up call, then repeated for about `seconds`
 * (at least 3 calls). Returns the best single-call rate in FLOP/s, or -1 when seconds <= 0.
 * The OpenBLAS thread count is restored afterwards. Uses n = PEAK_PROBE_N. */
#define PEAK_PROBE_N 1536
double peak_sgemm_probe(int threads, double seconds);

/* peak_sgemm_probe with an explicit size n (64..16384; else -1). */
double peak_sgemm_probe_n(int threads, double seconds, int n);

/* The cores one rank may count towards its theoretical peak (a fraction when ranks share cores):
 *     min(threads, affinity_cpus, node_cpus / local_ranks)
 *   threads:       the rank's compute threads (<= 0: no limit from threads);
 *   affinity_cpus: CPUs this process may run on (sched_getaffinity; mpirun binding shrinks it);
 *   node_cpus:     CPUs the job may use on this node (its cpuset), shared by
 *   local_ranks:   the ranks of the job on this node (< 1 counts as 1).
 * So 8 ranks of 1 thread on 2 cores get 0.25 core each (the job counts 2 cores, not 8), and 2
 * ranks bound to one core each get 1. Returns 0 when affinity_cpus or node_cpus < 1. */
double peak_rank_cores(int threads, int affinity_cpus, int node_cpus, int local_ranks);

/* Theoretical CPU peak fp32 FLOP/s of one rank = cores × GHz × FLOP/cycle/core.
 *   cores: peak_rank_cores(threads, CPUs this process may run on, CPUs of the node's cpuset
 *          (cgroup v2 cpuset.cpus.effective or v1 cpuset.effective_cpus, else CPUs online),
 *          local_ranks), each CPU count first capped by the physical cores — SMT siblings share
 *          the FMA units.
 *   FLOP/cycle/core (fp32, from the ISA via __builtin_cpu_supports AND /proc/cpuinfo flags):
 *          AVX-512F 64 (2 FMA units × 16 lanes × 2, two units assumed: some parts have one),
 *          AVX2+FMA 32 (2 × 8 × 2), AVX 16 (one 8-wide add + one 8-wide mul), SSE 8 (4 + 4).
 *   GHz:   /sys/.../cpufreq/base_frequency, else cpuinfo_max_freq, else the largest "cpu MHz" in
 *          /proc/cpuinfo (in VMs usually the nominal clock).
 * Writes the assumptions into desc, e.g. "2 cores x 2.10 GHz x 64 FLOP/cycle (AVX-512, 2 FMA units
 * assumed; clock from /proc/cpuinfo cpu MHz)". Returns -1 when it cannot be determined, and then
 * desc says why (never empty when desclen > 0). */
double peak_theoretical_rank(int threads, int local_ranks, char *desc, size_t desclen);

/* peak_theoretical_rank for a process alone on its node (local_ranks = 1). */
double peak_theoretical(int threads, char *desc, size_t desclen);

/* OpenBLAS (DYNAMIC_ARCH) picks its kernels from CPUID when it loads; releases older than the CPU
 * fall back to old kernels — Debian 12's 0.3.21 runs SSE3 "Prescott" kernels on Emerald Rapids,
 * about 6x below peak. Returns 1 and writes a hint (the OPENBLAS_CORETYPE to export before the
 * process starts) into msg when the kernels in use lack the CPU's widest ISA (AVX-512 or AVX2);
 * else 0 (also on non-x86). */
int peak_blas_kernel_check(char *msg, size_t msglen);

/* Dense bf16 tensor-core peak FLOP/s by CUDA device name (case-insensitive substring):
 * H100 SXM ("H100 SXM", "H100 80GB HBM3") and H200 (and GH200): 989e12; H100 PCIe: 756e12;
 * A100 (any form factor): 312e12. NVL variants and everything else: -1 (unknown — the caller must
 * say so). Sources: NVIDIA H100/H200 and A100 datasheets (dense, i.e. without 2:4 sparsity). */
double peak_gpu_by_name(const char *device_name);
/* peak_gpu_by_name plus its description for the MFU lines: "NAME: 989 TFLOP/s bf16 dense
 * (datasheet)", or "unknown (NAME)" when the device is not tabled (the return value is then -1).
 * More rows: B200 2250e12, L40S 362e12, L4 121e12 (datasheets, dense). */
double peak_gpu_describe(const char *device_name, char *desc, size_t desclen);

/* `minitrain bench gemm` (cmd/bench.c): warn when OpenBLAS runs kernels below the CPU's ISA, then
 * print the measured sgemm peak of peak_sgemm_probe_n(threads, seconds, size) in GFLOP/s (threads
 * <= 0: OpenBLAS's count) and the theoretical peak line; then peak_sgemm_stable (capped at
 * 4·seconds) with its rounds and spread and peak_bandwidth, both stored in the peak cache (ranks
 * = 1; the sgemm figure never lowered). Returns MT_EXIT_OK, or MT_EXIT_USAGE when
 * seconds or size are out of the probe's range. */
int peak_bench_gemm(int threads, double seconds, int size);

/* Debian's OpenBLAS 0.3.21 does not recognise some newer CPUs (e.g. Sapphire Rapids) and falls
 * back to SSE3 kernels, ~6x below peak. It picks kernels when the library loads, before main(),
 * so the fix from inside is to set OPENBLAS_CORETYPE (SkylakeX on AVX-512, Haswell on AVX2) and
 * re-execute the program once. Call first thing in main(); returns only if no re-exec was needed
 * (or it failed, after a warning). A value already in the environment is respected. */
void peak_blas_reexec(char **argv);

/* ---- a stable peak, the read bandwidth and the per-machine cache (ops/peak_stable.c) ---------- */

/* Two rounds agree when they differ by at most this fraction of the larger. */
#define PEAK_STABLE_TOL 0.03

/* How a repeated probe went: rounds run, whether the last two agreed within PEAK_STABLE_TOL (0:
 * the time cap ended it first), min/max/last round figure (FLOP/s or bytes/s), spread =
 * (max - min) / max over the rounds, wall seconds, and best_n (the sgemm size of the best round,
 * or the bandwidth buffer in MiB). */
typedef struct {
    int rounds, agreed, best_n;
    double min, max, last, spread, seconds;
} peak_stable;

/* The sgemm peak that does not move between runs: rounds of peak_sgemm_probe_n over the sizes
 * 512, 1024, 1536, 2048 (a round's figure is its best size), repeated until two consecutive rounds
 * agree within PEAK_STABLE_TOL or cap_s seconds have passed (at least 2 rounds). Returns the
 * maximum round in FLOP/s (a neighbour's load only slows calls down), -1 when cap_s <= 0; st
 * (may be NULL) gets the rounds and the spread. */
double peak_sgemm_stable(int threads, double cap_s, peak_stable *st);

/* Read bandwidth in bytes/s: `threads` OpenMP threads (<= 0: OpenMP's count) sum a `bytes` buffer
 * (>= 1 MiB; make it several times the last-level cache, e.g. 256 MiB) of fp32, one warm-up pass,
 * then passes until two agree within PEAK_STABLE_TOL or cap_s passes. The maximum pass; -1 on bad
 * arguments. This is the limit of decode: a step reads every weight once (docs/benchmarks.md). */
double peak_bandwidth(int threads, size_t bytes, double cap_s, peak_stable *st);

/* The CPU's "model name" from /proc/cpuinfo into out ("unknown" and -1 when absent). */
int peak_cpu_model(char *out, size_t outlen);

/* One machine kind's line of the peak cache. rounds, agreed and from_cache are not stored: they
 * say how this process got the figures. */
typedef struct {
    int threads, ranks;    /* the key, with cpu: OpenBLAS threads, ranks sharing the node */
    char cpu[256];
    double sgemm;          /* FLOP/s, > 0 */
    double bandwidth;      /* read bytes/s, 0 = not measured */
    double spread;         /* of the sgemm rounds, 0..1 */
    int rounds, agreed, from_cache;
} peak_cache_entry;

/* The cache file: $MINITRAIN_PEAK_CACHE ("off": none, returns -1), else
 * $XDG_CACHE_HOME/minitrain/peak, else $HOME/.cache/minitrain/peak. 0, or -1 when there is none.
 * Format (one line per key, malformed lines ignored): docs/mfu.md "A stable peak". */
int peak_cache_path(char *out, size_t outlen);

/* The entry for (this CPU model, threads, ranks): 0 and *out, or -1 (no cache, no such line). */
int peak_cache_lookup(int threads, int ranks, peak_cache_entry *out);

/* Write in's line into the cache atomically (directories made), keeping other keys' well-formed
 * lines and dropping malformed ones. 0, or -1 with err. */
int peak_cache_store(const peak_cache_entry *in, char *err, size_t errlen);

/* The machine's sgemm peak in FLOP/s: the cached figure for (CPU model, threads, ranks) unless
 * refresh, else peak_sgemm_stable(threads, cap_s) (on refresh never below the cached figure). out
 * (may be NULL) gets the entry (from_cache says which; the bandwidth is kept from the cache). Does
 * not write the cache: the caller stores (rank 0 only, after averaging the ranks). */
double peak_sgemm_machine(int threads, int ranks, double cap_s, int refresh,
                          peak_cache_entry *out);

#endif /* MT_PEAK_H */
