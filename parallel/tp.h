/*
 * parallel/tp.h — the conjugate operators of Megatron-style tensor parallelism
 * (Shoeybi et al. 2019, "Megatron-LM", section 3, operators f and g).
 *
 * A column-parallel linear (weight split by output rows: qkv by heads, MLP fc) is preceded by f;
 * a row-parallel linear (weight split by input columns: attention out-projection, MLP proj)
 * is followed by g:
 *     f: forward identity,   backward all-reduce (sum) of the input gradient over the TP group
 *     g: forward all-reduce (sum) of the partial outputs,   backward identity
 * So each transformer block costs two all-reduces forward and two backward. These operate on
 * plain buffers; the model decides where they go.
 */
#ifndef MT_TP_H
#define MT_TP_H

#include <stddef.h>

#include "parallel/comm.h"

/* f, backward: x (n) ← Σ over the TP group of x. No-op when the group has one rank. */
static inline void tp_f_backward(comm *tp, float *x, size_t n) {
    if (tp && comm_size(tp) > 1) comm_all_reduce(tp, x, n, COMM_SUM);
}

/* g, forward: y (n) ← Σ over the TP group of the partial outputs y. */
static inline void tp_g_forward(comm *tp, float *y, size_t n) {
    if (tp && comm_size(tp) > 1) comm_all_reduce(tp, y, n, COMM_SUM);
}

#endif /* MT_TP_H */
