/*
 * train/memory.h — the memory budget of one rank, predicted before step 1 and measured after.
 *
 * What decides what a cluster can train is bytes per rank (the memory wall). The budget names
 * every large buffer the trainer allocates, from the sizes it allocates them with
 * (predict_memory, train/trainer_setup.c):
 *   params       4 B × the local parameters (zero 3: the shard + the root units + one block)
 *   grads        4 B × the local parameters (zero 2/3: the shard + the root units + one block)
 *   optimizer    AdamW m and v: 8 B × the parameters this rank steps (zero >= 1: its shard)
 *   activations  the activation slots at the chosen recompute (model/model.h)
 *   comm         ZeRO-1 reduce-scatter output, ZeRO-2/3 gather/scatter staging (ZeRO-3: and
 *                the prefetch's), MPI's scratch
 *                of the bucketed all-reduce (about one bucket), the pipeline's gradient receive
 *                buffer
 *   workspace    the backward scratch (with recompute's work copy), token ids, and the sgemm
 *                probe at start-up as far as it exceeds what exists only inside a step (the
 *                probe is freed before step 1, so the peak holds the larger of the two)
 *   checkpoint   the snapshot buffer of asynchronous checkpoints (params, m, v) when ckpt_every
 *   runtime      the process before the trainer allocated anything (code, libraries, MPI, the
 *                data index): measured, VmRSS
 * With Ψ parameters that is Rajbhandari et al. 2020's 16Ψ bytes (fp32: 4 + 4 + 8) at zero 0 and
 * about 16Ψ/dp + the gathered root and block at zero 3. Not counted: MoE layer state, MPI's own
 * buffers beyond the runtime figure, the full model assembled on rank 0 for a sample or the save
 * under tp/pp (transient), allocator slack.
 */
#ifndef MT_MEMORY_H
#define MT_MEMORY_H

#include <stddef.h>


enum {
    MEMORY_PARAMS,
    MEMORY_GRADS,
    MEMORY_OPTIMIZER,
    MEMORY_ACTIVATIONS,
    MEMORY_COMM,
    MEMORY_WORKSPACE,
    MEMORY_CHECKPOINT,
    MEMORY_RUNTIME,
    MEMORY_TOTAL,
    MEMORY_N
};

/* The column names of the budget (MEMORY_PARAMS .. MEMORY_TOTAL), also the run.db detail keys. */
extern const char *const memory_names[MEMORY_N];

/* The byte limit of memory_limit: "auto" = physical memory / local_ranks (cpu) or the device's
 * memory (cuda: device_bytes > 0), "off" = 0 (no check), else a number with an optional K, M, G
 * or T suffix (powers of 1024; "6G", "512M", "1.5G"). 0 or -1 with err for anything else. */
int memory_limit_bytes(const char *spec, int local_ranks, double device_bytes, double *bytes,
                       char *err, size_t errlen);

/* The process's resident set size in bytes from /proc/self/status: VmHWM (the peak since start)
 * when peak, else VmRSS; -1 when it cannot be read. */
double memory_rss_bytes(int peak);

/* Human-readable bytes ("1.23 GiB", "45.6 MiB") into buf. Returns buf. */
const char *memory_format(double bytes, char *buf, size_t len);

#endif /* MT_MEMORY_H */
