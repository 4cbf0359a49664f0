/*
 * ops/prof.c — accumulators of ops/prof.h.
 */
#include "ops/prof.h"

#include <string.h>

int prof_on;
double prof_acc[PROF_N];

void prof_enable(int on) { prof_on = on != 0; }

void prof_reset(void) { memset(prof_acc, 0, sizeof(prof_acc)); }

const char *prof_name(prof_kind k) {
    static const char *names[PROF_N] = {
        [PROF_MM_QKV_FWD] = "matmul qkv fwd",       [PROF_MM_QKV_BWD] = "matmul qkv bwd",
        [PROF_MM_ATTPROJ_FWD] = "matmul attproj fwd", [PROF_MM_ATTPROJ_BWD] = "matmul attproj bwd",
        [PROF_MM_FC_FWD] = "matmul fc fwd",         [PROF_MM_FC_BWD] = "matmul fc bwd",
        [PROF_MM_FCPROJ_FWD] = "matmul fcproj fwd", [PROF_MM_FCPROJ_BWD] = "matmul fcproj bwd",
        [PROF_MM_HEAD_FWD] = "matmul LM head fwd",  [PROF_MM_HEAD_BWD] = "matmul LM head bwd",
        [PROF_ATTN_FWD] = "attention fwd",          [PROF_ATTN_BWD] = "attention bwd",
        [PROF_LN_FWD] = "layernorm fwd",            [PROF_LN_BWD] = "layernorm bwd",
        [PROF_GELU_FWD] = "gelu fwd",               [PROF_GELU_BWD] = "gelu bwd",
        [PROF_SOFTMAX_LOSS] = "softmax + loss",     [PROF_RESIDUAL] = "residual/embed/memset",
        [PROF_ZERO_GRAD] = "zero grad",             [PROF_GRAD_NORM] = "grad norm",
        [PROF_ADAMW] = "adamw",
    };
    return k >= 0 && k < PROF_N && names[k] ? names[k] : "?";
}
