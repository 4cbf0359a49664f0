/*
 * parallel/pp.h — the pipeline-parallel schedule driver: 1F1B and GPipe.
 *
 * The driver knows stages, microbatches and buffers, not transformers: it calls the stage's
 * forward/backward through callbacks and moves activations forward and gradients back with
 * point-to-point messages on the pipeline group (stage s talks to s-1 and s+1).
 *
 * 1F1B (PipeDream-Flush, Narayanan et al. 2021; Megatron-LM's non-interleaved schedule): stage s
 * runs min(P-s-1, M) warm-up forwards, then alternates one forward and one backward, then
 * cools down with the remaining backwards. At most P-s microbatches are in flight on stage s,
 * so activation memory is bounded by P, not M. Steady-state exchanges pair a send with a
 * receive from the same neighbour in one MPI_Sendrecv (send_forward_recv_backward and
 * send_backward_recv_forward), which is what makes the order deadlock-free. M < P works: all
 * microbatches are warm-up, then cool-down.
 * GPipe (Huang et al. 2019): all M forwards, then all M backwards; M activations in flight.
 * Backwards run in microbatch order in both schedules, so gradients accumulate in the same
 * order and the two give bit-identical results.
 * Bubble fraction of both: (P-1)/(M+P-1) of the step is idle.
 */
#ifndef MT_PP_H
#define MT_PP_H

#include <stddef.h>

#include "parallel/comm.h"

typedef enum { PP_1F1B = 0, PP_GPIPE = 1 } pp_schedule;

/* When one microbatch's forward and backward ran on this stage: unix seconds (CLOCK_REALTIME,
 * so the stages of one machine, each its own process, share the clock; across machines it is as
 * good as their clock sync). The gaps between spans are the stage's idle time (the bubble). */
typedef struct {
    double f0, f1; /* forward start, end */
    double b0, b1; /* backward start, end */
} pp_span;

typedef struct {
    void *user;
    size_t count; /* floats in every activation and gradient message (N·C) */
    /* where to receive microbatch i's input activations (non-first stages) */
    float *(*input_buf)(void *user, int micro);
    /* run the stage forward of microbatch i; returns its output to send (ignored on the last) */
    const float *(*forward)(void *user, int micro);
    /* run the stage backward of microbatch i given the gradient of its output (NULL on the last
     * stage); returns the gradient of its input to send back (ignored on the first stage) */
    const float *(*backward)(void *user, int micro, const float *dout);
    /* where the gradient from the next stage is received (count floats): device memory when the
     * model lives on a device, so the p2p goes device to device; NULL = pp_run allocates host
     * memory */
    float *grad_buf;
    /* (M) NULL = no record; else trace[i] receives microbatch i's times (two clock reads per
     * call: the cost of recording is negligible next to a stage's forward) */
    pp_span *trace;
} pp_stage_fns;

/* Run one optimizer step's M microbatches through the pipeline. Collective over pp.
 * idle_s (may be NULL) receives the seconds spent waiting in point-to-point calls. */
void pp_run(comm *pp, pp_schedule schedule, int M, const pp_stage_fns *fns, double *idle_s);

/* Forwards stage `stage` of P runs before its first backward (the warm-up): min(P - stage - 1, M)
 * for 1F1B (the last stage starts its backwards at once), M for GPipe. pp_run uses it. */
int pp_warmup_forwards(pp_schedule schedule, int P, int stage, int M);

/* Activation slots stage `stage` of P needs for M microbatches: min(M, P - stage) for 1F1B,
 * M for GPipe. Microbatch i uses slot i % slots. */
int pp_slots_needed(pp_schedule schedule, int P, int stage, int M);

/* The ideal bubble fraction (P-1)/(M+P-1) (Huang et al. 2019). */
double pp_bubble_fraction(int P, int M);

/* Split n_layer layers over P stages: spec NULL or "" = as even as possible, earlier stages
 * taking the remainder; else a comma list of P positive counts summing to n_layer ("3,4").
 * begin receives P+1 boundaries. Returns 0, or -1 with a message in err. */
int pp_split_layers(int n_layer, int P, const char *spec, int *begin, char *err, size_t errlen);

#endif /* MT_PP_H */
