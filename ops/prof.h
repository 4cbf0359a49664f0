/*
 * ops/prof.h — time per op kind of a training step (bench/bench_step's breakdown).
 *
 * The model pass (model/model_pass.c) and the optimizer wrap each kernel call in PROF(kind, ...).
 * Off (the default) that is one load of a global flag and a predictable branch per kernel call —
 * a few hundred per step against a step of ~1 s, i.e. nothing measurable; on, it adds two
 * clock_gettime calls (~40 ns) per kernel. Single-threaded accounting: the kernels are called
 * from the one thread that drives the step (their OpenMP teams run inside the timed region).
 */
#ifndef MT_PROF_H
#define MT_PROF_H

#include "core/timer.h"

typedef enum {
    PROF_MM_QKV_FWD, PROF_MM_QKV_BWD,         /* ln1 → qkv (N, C) @ (3C, C)ᵀ */
    PROF_MM_ATTPROJ_FWD, PROF_MM_ATTPROJ_BWD, /* atty → proj (N, C) @ (C, C)ᵀ */
    PROF_MM_FC_FWD, PROF_MM_FC_BWD,           /* ln2 → fc (N, C) @ (4C, C)ᵀ */
    PROF_MM_FCPROJ_FWD, PROF_MM_FCPROJ_BWD,   /* gelu → proj (N, 4C) @ (C, 4C)ᵀ */
    PROF_MM_HEAD_FWD, PROF_MM_HEAD_BWD,       /* lnf → logits (N, C) @ (V, C)ᵀ, tied */
    PROF_ATTN_FWD, PROF_ATTN_BWD,             /* QKᵀ, softmax, PV per (b, h) */
    PROF_LN_FWD, PROF_LN_BWD,
    PROF_GELU_FWD, PROF_GELU_BWD,
    PROF_SOFTMAX_LOSS,                        /* fused softmax + cross-entropy */
    PROF_RESIDUAL,                            /* residual adds, embedding fwd/bwd, memsets */
    PROF_ZERO_GRAD, PROF_GRAD_NORM, PROF_ADAMW,
    PROF_N
} prof_kind;

/* Non-zero while profiling is on; read by PROF. Set with prof_enable. */
extern int prof_on;
/* Accumulated seconds per kind since the last prof_reset. */
extern double prof_acc[PROF_N];

/* Turn accounting on (1) or off (0). */
void prof_enable(int on);
/* Zero every accumulator. */
void prof_reset(void);
/* A short printable name of a kind ("mm qkv fwd", "adamw", ...). */
const char *prof_name(prof_kind k);

/* Run stmt; when profiling is on, add its wall time to prof_acc[k]. */
#define PROF(k, stmt)                                                                             \
    do {                                                                                          \
        if (__builtin_expect(prof_on, 0)) {                                                       \
            const double prof_t0_ = timer_now();                                                  \
            stmt;                                                                                 \
            prof_acc[k] += timer_now() - prof_t0_;                                                \
        } else {                                                                                  \
            stmt;                                                                                 \
        }                                                                                         \
    } while (0)

#endif /* MT_PROF_H */
