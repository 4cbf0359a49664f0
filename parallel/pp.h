/*
 * parallel/pp.h — the pipeline-parallel schedule drivers: GPipe, 1F1B, interleaved 1F1B, ZB-H1.
 *
 * The drivers know stages, microbatches and buffers, not transformers: they call the stage's
 * forward/backward through callbacks and move activations forward and gradients back with
 * point-to-point messages on the pipeline group (stage s talks to s-1 and s+1; with model chunks
 * the last stage also feeds the first). One file per schedule:
 *
 * 1F1B (parallel/pp_1f1b.c; PipeDream-Flush, Narayanan et al. 2021; Megatron-LM's
 * non-interleaved schedule): stage s runs min(P-s-1, M) warm-up forwards, then alternates one
 * forward and one backward, then cools down with the remaining backwards. At most P-s
 * microbatches are in flight on stage s, so activation memory is bounded by P, not M.
 * Steady-state exchanges pair a send with a receive from the same neighbour in one MPI_Sendrecv,
 * which is what makes the order deadlock-free. M < P works: all warm-up, then cool-down.
 * GPipe (parallel/pp_1f1b.c; Huang et al. 2019): all M forwards, then all M backwards.
 * Bubble of both: (P-1)/(M+P-1) of the step is idle.
 *
 * Interleaved 1F1B (parallel/pp_interleaved.c; Narayanan et al. 2021, §2.2): the layers are cut
 * into P·v chunks and stage s holds chunks s, s+P, ..., s+(v-1)P, so a microbatch crosses every
 * stage v times. Each stage runs 1F1B over the v·M (microbatch, chunk) pairs; the bubble shrinks
 * to (P-1)/(v·M+P-1) of the step at the cost of v times the messages and a longer warm-up:
 * 2(P-s-1) + (v-1)P forwards, so stage s holds up to that + 1 chunk activations. M must be a
 * multiple of P (the forward order walks P microbatches per chunk).
 *
 * ZB-H1 (parallel/pp_zb.c; Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §3.1): the
 * backward splits into B (gradient w.r.t. the stage input, which the previous stage waits for)
 * and W (gradients w.r.t. the weights, which nobody waits for). Stage s runs 1F1B's warm-up, then
 * F, B and W with its first s W passes postponed; they fill the cool-down bubble. In flight: at
 * most P microbatches on every stage (1F1B's peak, on its first stage); bubble
 * (P-1)(T_F+T_B-T_W) against 1F1B's (P-1)(T_F+T_B+T_W), i.e. a third of it when the three passes
 * cost the same (valid while T_W <= T_B).
 *
 * Every schedule runs, per stage and per weight, the backwards of the microbatches in microbatch
 * order, so gradients accumulate in the same order and all four give bit-identical parameters.
 */
#ifndef MT_PP_H
#define MT_PP_H

#include <stddef.h>

#include "parallel/comm.h"

typedef enum { PP_1F1B = 0, PP_GPIPE = 1, PP_INTERLEAVED = 2, PP_ZBH1 = 3 } pp_schedule;

/* When one (microbatch, chunk)'s passes ran on this stage: unix seconds (CLOCK_REALTIME, so the
 * stages of one machine, each its own process, share the clock; across machines it is as good
 * as their clock sync). w0 = w1 = 0 when the backward was not split (every schedule but ZB-H1).
 * The gaps between spans are the stage's idle time (the bubble). */
typedef struct {
    double f0, f1; /* forward start, end */
    double b0, b1; /* backward (ZB-H1: its input-gradient half B) start, end */
    double w0, w1; /* ZB-H1: the weight-gradient half W */
} pp_span;

typedef struct {
    void *user;
    size_t count; /* floats in every activation and gradient message (N·C) */
    int chunks;   /* model chunks on this stage: v for interleaved, else 1 (0 reads as 1) */
    /* where to receive the input activations of microbatch i, chunk c (all but global chunk 0) */
    float *(*input_buf)(void *user, int micro, int chunk);
    /* run the forward of (i, c); returns its output to send (ignored for the last chunk) */
    const float *(*forward)(void *user, int micro, int chunk);
    /* run the backward of (i, c) given the gradient of its output (NULL for the last chunk of
     * the model); returns the gradient of its input to send back (ignored for global chunk 0).
     * With weight != NULL (ZB-H1) this is B alone: the parameter gradients wait for weight() */
    const float *(*backward)(void *user, int micro, int chunk, const float *dout);
    /* ZB-H1 only: W of (i, c), the parameter gradients its backward left pending */
    void (*weight)(void *user, int micro, int chunk);
    /* where the gradient from the next stage is received (count floats): device memory when the
     * model lives on a device, so the p2p goes device to device; NULL = pp_run allocates host
     * memory */
    float *grad_buf;
    /* (chunks·M) NULL = no record; else trace[c·M + i] receives (i, c)'s times (two clock reads
     * per call: the cost of recording is negligible next to a stage's forward) */
    pp_span *trace;
} pp_stage_fns;

/* What one pp_run saw on this stage. */
typedef struct {
    double idle_s;      /* seconds spent waiting in point-to-point calls */
    int peak_in_flight; /* most (microbatch, chunk) activations held at once: from a forward
                         * until its backward (ZB-H1: until its W) */
} pp_stats;

/* Parse "gpipe" | "1f1b" | "interleaved" | "zb-h1". 0, or -1 for anything else. */
int pp_schedule_parse(const char *name, pp_schedule *out);
/* The config name of a schedule ("1f1b", ...). */
const char *pp_schedule_name(pp_schedule s);

/* Check a layout for a schedule before anything is built: n_layer layers over P stages, v
 * chunks per stage (interleaved; ignored otherwise), M microbatches, with a hand layer split
 * (pp_layers, "" = even). Interleaved needs v >= 2, n_layer divisible by P·v, M a multiple of P
 * and no hand split. Returns 0, or -1 with one line in err. */
int pp_schedule_check(pp_schedule s, int n_layer, int P, int v, int M, const char *pp_layers,
                      char *err, size_t errlen);

/* Run one optimizer step's M microbatches through the pipeline. Collective over pp.
 * st (may be NULL) receives what the stage saw. */
void pp_run(comm *pp, pp_schedule schedule, int M, const pp_stage_fns *fns, pp_stats *st);

/* One pass of a stage's order: F, B (the whole backward, or ZB-H1's input half) or W. */
typedef struct {
    char kind; /* 'F', 'B', 'W' */
    int micro, chunk;
} pp_op;

/* The order stage `stage` of P runs its passes in, for M microbatches and v chunks (v used by
 * interleaved only). out receives at most 3·v·M ops; returns their number. What pp_run executes
 * for interleaved and ZB-H1, and what tests and bench/ replay for the other two. */
int pp_stage_order(pp_schedule s, int P, int stage, int M, int v, pp_op *out);

/* Forwards stage `stage` of P runs before its first backward (the warm-up): min(P - stage - 1, M)
 * for 1F1B and ZB-H1, min(2(P-stage-1) + (v-1)P, v·M) for interleaved (all v·M when M == P), M
 * for GPipe. */
int pp_warmup_forwards(pp_schedule schedule, int P, int stage, int M, int v);

/* Activation slots stage `stage` of P needs, the schedule's bound on (microbatch, chunk) pairs
 * in flight: min(M, P - stage) for 1F1B, M for GPipe, min(warm-up + 1, v·M) for interleaved (each
 * slot one chunk's layers), min(M, P) for ZB-H1 (pp_slot_table says which pair takes which). */
int pp_slots_needed(pp_schedule schedule, int P, int stage, int M, int v);

/* Which slot each (microbatch i, chunk c) of stage `stage` uses: slot[c·M + i], in
 * [0, pp_slots_needed). Replays the stage's order: a forward takes the lowest free slot, the pass
 * that ends the pair (backward; ZB-H1: W) frees it. For 1F1B and GPipe that is i % slots. */
void pp_slot_table(pp_schedule schedule, int P, int stage, int M, int v, int *slot);

/* The ideal bubble fraction (P-1)/(M+P-1) of 1F1B and GPipe (Huang et al. 2019). */
double pp_bubble_fraction(int P, int M);

/* The schedule's ideal idle fraction of a step on every stage, for pass times t_f, t_b, t_w (one
 * microbatch through one stage, whole model share; t_w = 0 when the backward is not split, t_b
 * then the whole backward): 1F1B/GPipe (P-1)/(M+P-1); interleaved (P-1)/(v·M+P-1); ZB-H1
 * (P-1)(t_f+t_b-t_w) / (M(t_f+t_b+t_w) + (P-1)(t_f+t_b-t_w)). Communication is not counted. */
double pp_idle_formula(pp_schedule s, int P, int M, int v, double t_f, double t_b, double t_w);

/* Split n_layer layers over P stages: spec NULL or "" = as even as possible, earlier stages
 * taking the remainder; else a comma list of P positive counts summing to n_layer ("3,4").
 * begin receives P+1 boundaries. Returns 0, or -1 with a message in err. */
int pp_split_layers(int n_layer, int P, const char *spec, int *begin, char *err, size_t errlen);

#endif /* MT_PP_H */
