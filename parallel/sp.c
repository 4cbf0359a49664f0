/*
 * parallel/sp.c — the sequence-parallel all-gather and reduce-scatter (see parallel/sp.h).
 */
#include "parallel/sp.h"

#include <string.h>

void sp_all_gather(comm *tp, const float *local, float *full, float *work, int B, int T, int C) {
    const int n = comm_size(tp), Tl = T / n;
    const size_t blk = (size_t)Tl * C; /* one sequence's positions on one rank */
    if (B == 1) {
        comm_all_gather(tp, local, full, blk);
        return;
    }
    comm_all_gather(tp, local, work, (size_t)B * blk); /* (tp, B, Tl, C) */
    for (int r = 0; r < n; r++)
        for (int b = 0; b < B; b++)
            comm_copy(full + ((size_t)b * T + (size_t)r * Tl) * C,
                      work + ((size_t)r * B + b) * blk, blk * sizeof(float));
}

void sp_reduce_scatter(comm *tp, const float *full, float *local, float *work, int B, int T,
                       int C) {
    const int n = comm_size(tp), Tl = T / n;
    const size_t blk = (size_t)Tl * C;
    if (B == 1) {
        comm_reduce_scatter(tp, full, local, blk, COMM_SUM);
        return;
    }
    for (int r = 0; r < n; r++) /* (B, T, C) → rank-major (tp, B, Tl, C) */
        for (int b = 0; b < B; b++)
            comm_copy(work + ((size_t)r * B + b) * blk, full + ((size_t)b * T + (size_t)r * Tl) * C,
                      blk * sizeof(float));
    comm_reduce_scatter(tp, work, local, (size_t)B * blk, COMM_SUM);
}
