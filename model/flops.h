/*
 * model/flops.h — FLOPs per token, peak FLOP/s (measured and theoretical) and MFU: the one place
 * both sides of the MFU fraction are defined (the trainer and bench/ only call these).
 *
 * MFU = flops_per_token × tokens/s ÷ peak FLOP/s (docs/design.md, "What good means").
 * The numerator is the model's FLOPs (what the math needs, not what the kernels happen to do);
 * the denominator is, on CPUs, both a measured sgemm peak (the best this machine's BLAS reaches on
 * a large square matmul) and a theoretical peak (cores × clock × FLOP/cycle of the ISA); on GPUs a
 * table by device name. For a job, the denominator is the per-rank peak × world size.
 * docs/mfu.md explains every choice and its sources.
 */
#ifndef MT_FLOPS_H
#define MT_FLOPS_H

#include <stddef.h>

#include "model/model.h"

/* Training FLOPs per token of the WHOLE model cfg describes (forward + backward; its tp/pp/ep
 * split changes who does the work, not how much), following PaLM (Chowdhery et al. 2022,
 * appendix B) and Kaplan et al. 2020 (section 2.1, the "6N" rule):
 *
 *     flops = 6·N + 12·L·d·T
 *
 *   N   = matmul parameters one token touches:
 *         dense layer: 12·d² (qkv 3d², attention out-proj d², fc 4d², fc-proj 4d²);
 *         MoE layer (cfg->moe_every > 0 and (l + 1) % moe_every == 0): 4·d² of attention, the
 *         router E·d, and only the top_k ACTIVE experts' fc and fc-proj, top_k·2·H·d with
 *         H = 4·d (model/moe.h moe_active_matmul_params; a dropped assignment is still counted);
 *         plus the LM head V·d. The head is counted although it is tied to the token embedding:
 *         tying shares the storage, but the head is still a (T,d)×(d,V) matmul.
 *         Excluded: embedding lookups (token, position: a gather, no FLOPs), biases, LayerNorm,
 *         GELU, softmax, top-k routing — not matmuls, O(d) per token.
 *   6·N = 2 FLOPs per multiply-add × (1 forward + 2 backward: input and weight gradients).
 *   12·L·d·T = attention scores QKᵀ and the weighted sum A·V: 2·T·d FLOPs each per token per
 *         layer forward, ×3 for forward + backward, over the FULL T×T matrix — no halving for the
 *         causal mask (PaLM's convention; a causal-aware count would be 6·L·d·T).
 *   T   = cfg->seq_len (the trainer trains full windows of seq_len tokens; bench/ sets the T it
 *         runs).
 * Units: FLOPs per token (a training token, i.e. one position of one sequence).
 * Returns -1 when n_layer, d_model, seq_len or vocab_size is < 1, or a MoE config has
 * n_experts or top_k < 1. */
double flops_per_token(const gpt_config *cfg);

/* The same formula from an explicit N (matmul parameters a token touches): 6·N + 12·L·d·T.
 * Returns -1 when n_matmul_params <= 0 or any int argument is < 1. */
double flops_per_token_n(double n_matmul_params, int n_layer, int d_model, int seq_len);

/* The FLOPs per token that activation recompute (model/model.h gpt_recompute) adds, for
 * hardware FLOPs utilisation (HFU; Chowdhery et al. 2022, PaLM, appendix B: HFU counts the
 * recomputation, MFU does not):
 *   NONE      0
 *   SELECTIVE 4·L·d·T: QKᵀ and A·V of every layer again (2·T·d each per token, full T×T as in
 *             flops_per_token)
 *   FULL      2·N_blocks + 4·L·d·T: every block's forward again (N_blocks = the blocks' matmul
 *             parameters a token touches, MoE: router + top_k experts; not the LM head).
 * HFU = (flops_per_token + flops_recompute_per_token) × tokens/s ÷ peak (flops_mfu's form).
 * Returns -1 for a config flops_per_token refuses. */
double flops_recompute_per_token(const gpt_config *cfg, gpt_recompute recompute);

/* MFU as a fraction of the job's peak:
 *     flops_per_token × tokens_per_s ÷ (peak_per_rank × world_size)
 * tokens_per_s is the job's (global batch tokens per step ÷ step time), so the numerator is the
 * FLOP/s of the whole job, and every rank — whatever its tp/pp/dp/ep coordinate — adds one
 * per-rank peak to the denominator. NAN when peak_per_rank <= 0, world_size < 1 or an input is
 * not finite (an unknown peak must show as unknown, never as 0 or a silent -1). */
double flops_mfu(double flops_per_token, double tokens_per_s, double peak_per_rank,
                 int world_size);

/* Measured CPU peak: a square n×n sgemm (C = A·B, 2·n³ FLOPs) with `threads` OpenBLAS threads
 * (<= 0: leave the library's count), one warm-up call, then repeated for about `seconds`
 * (at least 3 calls). Returns the best single-call rate in FLOP/s, or -1 when seconds <= 0.
 * The OpenBLAS thread count is restored afterwards. Uses n = FLOPS_PROBE_N. */
#define FLOPS_PROBE_N 1536
double flops_sgemm_probe(int threads, double seconds);

/* flops_sgemm_probe with an explicit size n (64..16384; else -1). */
double flops_sgemm_probe_n(int threads, double seconds, int n);

/* The cores one rank may count towards its theoretical peak (a fraction when ranks share cores):
 *     min(threads, affinity_cpus, node_cpus / local_ranks)
 *   threads:       the rank's compute threads (<= 0: no limit from threads);
 *   affinity_cpus: CPUs this process may run on (sched_getaffinity; mpirun binding shrinks it);
 *   node_cpus:     CPUs the job may use on this node (its cpuset), shared by
 *   local_ranks:   the ranks of the job on this node (< 1 counts as 1).
 * So 8 ranks of 1 thread on 2 cores get 0.25 core each (the job counts 2 cores, not 8), and 2
 * ranks bound to one core each get 1. Returns 0 when affinity_cpus or node_cpus < 1. */
double flops_rank_cores(int threads, int affinity_cpus, int node_cpus, int local_ranks);

/* Theoretical CPU peak fp32 FLOP/s of one rank = cores × GHz × FLOP/cycle/core.
 *   cores: flops_rank_cores(threads, CPUs this process may run on, CPUs of the node's cpuset
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
double flops_theoretical_peak_rank(int threads, int local_ranks, char *desc, size_t desclen);

/* flops_theoretical_peak_rank for a process alone on its node (local_ranks = 1). */
double flops_theoretical_peak(int threads, char *desc, size_t desclen);

/* OpenBLAS (DYNAMIC_ARCH) picks its kernels from CPUID when it loads; releases older than the CPU
 * fall back to old kernels — Debian 12's 0.3.21 runs SSE3 "Prescott" kernels on Emerald Rapids,
 * about 6x below peak. Returns 1 and writes a hint (the OPENBLAS_CORETYPE to export before the
 * process starts) into msg when the kernels in use lack the CPU's widest ISA (AVX-512 or AVX2);
 * else 0 (also on non-x86). */
int flops_blas_kernel_check(char *msg, size_t msglen);

/* Dense bf16 tensor-core peak FLOP/s by CUDA device name (case-insensitive substring):
 * H100 SXM ("H100 SXM", "H100 80GB HBM3") and H200 (and GH200): 989e12; H100 PCIe: 756e12;
 * A100 (any form factor): 312e12. NVL variants and everything else: -1 (unknown — the caller must
 * say so). Sources: NVIDIA H100/H200 and A100 datasheets (dense, i.e. without 2:4 sparsity). */
double flops_gpu_peak_by_name(const char *device_name);
/* flops_gpu_peak_by_name plus its description for the MFU lines: "NAME: 989 TFLOP/s bf16 dense
 * (datasheet)", or "unknown (NAME)" when the device is not tabled (the return value is then -1).
 * More rows: B200 2250e12, L40S 362e12, L4 121e12 (datasheets, dense). */
double flops_gpu_peak_describe(const char *device_name, char *desc, size_t desclen);

/* `minitrain bench gemm` (cmd/bench.c): warn when OpenBLAS runs kernels below the CPU's ISA, then
 * print the measured sgemm peak of flops_sgemm_probe_n(threads, seconds, size) in GFLOP/s (threads
 * <= 0: OpenBLAS's count) and the theoretical peak line. Returns MT_EXIT_OK, or MT_EXIT_USAGE when
 * seconds or size are out of the probe's range. */
int flops_bench_gemm(int threads, double seconds, int size);

/* Debian's OpenBLAS 0.3.21 does not recognise some newer CPUs (e.g. Sapphire Rapids) and falls
 * back to SSE3 kernels, ~6x below peak. It picks kernels when the library loads, before main(),
 * so the fix from inside is to set OPENBLAS_CORETYPE (SkylakeX on AVX-512, Haswell on AVX2) and
 * re-execute the program once. Call first thing in main(); returns only if no re-exec was needed
 * (or it failed, after a warning). A value already in the environment is respected. */
void flops_blas_reexec(char **argv);

#endif /* MT_FLOPS_H */
