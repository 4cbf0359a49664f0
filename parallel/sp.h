/*
 * parallel/sp.h — Megatron sequence parallelism inside a tensor-parallel group (Korthikanti et
 * al. 2022, "Reducing Activation Recomputation in Large Transformer Models", section 4.2.2).
 *
 * Outside the column-/row-parallel linears (LayerNorms, residual adds, the embedding and the
 * head), each of the tp ranks of a TP group holds only its 1/tp of the sequence: positions
 * [tp_rank·T/tp, (tp_rank+1)·T/tp) of every sequence, rows (B, T/tp). The conjugate operators
 * of parallel/tp.h change accordingly:
 *     g (after a row-parallel linear): forward reduce-scatter (was all-reduce), backward
 *       all-gather;
 *     f (before a column-parallel linear): forward all-gather (was identity), backward
 *       reduce-scatter (was all-reduce).
 * An all-reduce is a reduce-scatter followed by an all-gather, so the bytes moved are the same as
 * plain tensor parallelism; what falls is the activation memory of the sequence-local regions,
 * by 1/tp.
 *
 * Layout: the collectives move rank-major blocks (tp, B, T/tp, C); a (B, T, C) buffer is that
 * only when B = 1, so for B > 1 these helpers permute through `work` (N·C floats).
 */
#ifndef MT_SP_H
#define MT_SP_H

#include <stddef.h>

#include "parallel/comm.h"

/* full (B, T, C) ← the all-gather over tp of every rank's local (B, T/tp, C). work (B·T·C)
 * scratch, distinct from both. */
void sp_all_gather(comm *tp, const float *local, float *full, float *work, int B, int T, int C);

/* local (B, T/tp, C) ← this rank's positions of Σ over tp of every rank's full (B, T, C).
 * work (B·T·C) scratch, distinct from both. */
void sp_reduce_scatter(comm *tp, const float *full, float *local, float *work, int B, int T,
                       int C);

#endif /* MT_SP_H */
