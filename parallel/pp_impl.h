/*
 * parallel/pp_impl.h — private to parallel/pp*.c: the state one pp_run shares with its
 * schedule's driver, the timed pass calls every driver goes through, and the drivers.
 *
 * Why a private header: each schedule is a small file of its own (pp_1f1b.c, pp_interleaved.c,
 * pp_zb.c) readable beside the others, and they share the pass calls (which stamp the trace and
 * count activations in flight) and the executor of an order (pp_exec.c).
 */
#ifndef MT_PP_IMPL_H
#define MT_PP_IMPL_H

#include "parallel/pp.h"

typedef struct {
    comm *pp;
    const pp_stage_fns *f;
    int s, P, M, v; /* this stage, stages, microbatches, chunks per stage */
    float *grad_in; /* (count) gradient received from the next stage */
    int live, peak; /* (microbatch, chunk) activations in flight now, and the most so far */
} pp_pipe;

/* The stage's passes of (microbatch i, chunk c), stamped into the trace when there is one and
 * counted in flight: a forward takes an activation, the pass that ends the pair (the backward,
 * or W when the backward is split) gives it back. */
const float *pp_pass_forward(pp_pipe *p, int i, int c);
const float *pp_pass_backward(pp_pipe *p, int i, int c, const float *dout);
void pp_pass_weight(pp_pipe *p, int i, int c);

/* The drivers, one per schedule (parallel/pp_1f1b.c, pp_interleaved.c, pp_zb.c). */
void pp_drive_1f1b(pp_pipe *p);
void pp_drive_gpipe(pp_pipe *p);
void pp_drive_interleaved(pp_pipe *p);
void pp_drive_zbh1(pp_pipe *p);

/* The orders (pp_stage_order dispatches to them); out holds at most 3·v·M ops. */
int pp_order_1f1b(int P, int s, int M, pp_op *out);
int pp_order_gpipe(int M, pp_op *out);
int pp_order_interleaved(int P, int s, int M, int v, pp_op *out);
int pp_order_zbh1(int P, int s, int M, pp_op *out);

/* Run ops[0..n) on this stage (parallel/pp_exec.c): before a pass, receive what it needs
 * (blocking), after it send what it made (non-blocking, tagged by (microbatch, chunk), so any
 * order consistent with the dependencies completes); every send is finished before returning. */
void pp_execute(pp_pipe *p, const pp_op *ops, int n);

#endif /* MT_PP_IMPL_H */
