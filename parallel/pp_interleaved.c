/*
 * parallel/pp_interleaved.c — the interleaved 1F1B driver (Narayanan et al. 2021, §2.2;
 * Megatron-LM's get_forward_backward_func with virtual_pipeline_model_parallel_size).
 *
 * Stage s holds v model chunks, global chunks s, s+P, ..., s+(v-1)P, so chunk c of stage s
 * feeds chunk c of stage s+1, and the last stage's chunk c feeds chunk c+1 of stage 0. The
 * stage runs 1F1B over the v·M (microbatch, chunk) pairs in the order below; the executor
 * (parallel/pp_exec.c) moves the messages.
 *
 * Forward order (k = 0 .. v·M-1): P microbatches through chunk 0, the same P through chunk 1, ...,
 * then the next P: chunk (k / P) % v, microbatch (k / (P·v))·P + k % P. The backward order is the
 * same walk with the chunks reversed (the last chunk's backward comes first). Within one chunk
 * both walks visit the microbatches in increasing order, so every weight accumulates its
 * gradients in microbatch order, as 1F1B does.
 *
 * Warm-up: 2(P-s-1) + (v-1)P forwards (all v·M when M == P), then one forward and one backward
 * alternately, then the remaining backwards. Bubble (P-1)/(v·M+P-1) of the step.
 */
#include "parallel/pp_impl.h"

#include <stdlib.h>

#include "core/check.h"

static pp_op forward_pair(int P, int v, int k) {
    return (pp_op){'F', (k / (P * v)) * P + k % P, (k / P) % v};
}
static pp_op backward_pair(int P, int v, int k) {
    pp_op o = forward_pair(P, v, k);
    return (pp_op){'B', o.micro, v - 1 - o.chunk};
}

int pp_order_interleaved(int P, int s, int M, int v, pp_op *out) {
    int total = v * M, warm = pp_warmup_forwards(PP_INTERLEAVED, P, s, M, v), n = 0;
    for (int k = 0; k < warm; k++) out[n++] = forward_pair(P, v, k);
    for (int k = 0; k < total - warm; k++) { /* steady state: one forward, one backward */
        out[n++] = forward_pair(P, v, k + warm);
        out[n++] = backward_pair(P, v, k);
    }
    for (int k = total - warm; k < total; k++) out[n++] = backward_pair(P, v, k); /* cool-down */
    return n;
}

void pp_drive_interleaved(pp_pipe *p) {
    pp_op *ops = mallocCheck((size_t)3 * p->v * p->M * sizeof(pp_op));
    int n = pp_order_interleaved(p->P, p->s, p->M, p->v, ops);
    pp_execute(p, ops, n);
    free(ops);
}
