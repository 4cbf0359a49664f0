/*
 * sched/failslow.h — fail-slow rounds: which mesh group keeps the job slow, when nothing failed.
 *
 * A machine that is slow rather than dead (a throttled CPU, a bad link, a noisy neighbour) makes
 * every step as long as its own, since the others wait for it in the collectives; the heartbeats'
 * busy time (sched/heartbeat.h: wall time between two heartbeats minus the time blocked in
 * communication) tells it apart. ByteRobust (SOSP 2025, §4.3) finds the degrader over repeated
 * rounds rather than from one sample: every round (10 s) the slowest group is flagged, and the
 * group flagged in the majority of 5 rounds is evicted. minitrain does the same:
 *
 *   - a round gathers every busy_ms sample the supervisor sees per rank (one per step it polls);
 *   - at the round's end each rank's mean busy time is compared with the lower median m of the
 *     ranks' means; the ranks above threshold·m are the round's slow ranks, where
 *       threshold = max(min_ratio, 1 + noise_k·noise)
 *     and noise is the run's own measured noise in that round: the median over the ranks of the
 *     coefficient of variation (sd / mean) of their per-step busy time. A spread within that
 *     noise flags nothing (the false-positive guard);
 *   - the slow ranks are mapped to the smallest TP/CP/EP/PP/DP group that holds them all and is
 *     not the whole job (stk_blame_group, sched/stacks.h), or to the ranks alone; that group is
 *     the round's flag;
 *   - once `rounds` rounds are done, the group flagged in more than half of the last `rounds`
 *     rounds is the verdict (so a steady 2x rank is named after 3 rounds of 5).
 *
 * Pure: the caller supplies the clock and the samples (sched/sup_attempt.c, from the heartbeats).
 */
#ifndef MT_SCHED_FAILSLOW_H
#define MT_SCHED_FAILSLOW_H

#include "sched/stacks.h"

#define FSL_MAX_ROUNDS 32

/* The rounds' settings (`minitrain run --failslow-round S --failslow-rounds N`). */
typedef struct {
    double round_s;   /* length of one round, s (default 10) */
    int rounds;       /* rounds in the window; majority = rounds/2 + 1 (default 5; 0 = off) */
    double min_ratio; /* a slow rank's mean busy time is at least this x the median (1.3) */
    double noise_k;   /* ... and above 1 + noise_k x the measured noise (1.0) */
    int min_samples;  /* a rank needs this many samples in a round to count (3) */
} fsl_opts;

/* ByteRobust's defaults: 10 s rounds, 5 of them, ratio floor 1.3, noise_k 1, 3 samples. */
void fsl_opts_default(fsl_opts *o);

/* What one round found. */
typedef struct {
    int index;            /* 1, 2, ... */
    int nranks;           /* ranks with enough samples */
    double median_ms;     /* lower median of the ranks' mean busy time, ms */
    double noise;         /* median coefficient of variation of the per-step busy time */
    double threshold;     /* max(min_ratio, 1 + noise_k·noise) */
    int slowest;          /* the rank with the highest mean (-1: none) */
    double ratio;         /* its mean / median_ms */
    int flagged;          /* 1: a group was flagged this round */
    const char *kind;     /* its kind: "tp" | "cp" | "ep" | "pp" | "dp" | "rank" */
    int nblame, blame[STK_MAX_RANKS]; /* its ranks, ascending */
} fsl_round;

/* The state of the rounds of one attempt. */
typedef struct {
    fsl_opts o;
    stk_layout L;
    int world;
    double t0;                         /* start of the current round (caller's clock, s) */
    double sum[STK_MAX_RANKS], sumsq[STK_MAX_RANKS]; /* busy_ms samples of this round */
    int n[STK_MAX_RANKS];
    int nrounds;                       /* rounds completed */
    const char *hist_kind[FSL_MAX_ROUNDS]; /* flag of round k (ring by index), NULL = none */
    int hist_first[FSL_MAX_ROUNDS];    /* first rank of that flagged group */
    int decided;                       /* a verdict was given (once per attempt) */
} fsl_state;

/* The verdict: the group flagged in the majority of the window's rounds. */
typedef struct {
    const char *kind;
    int nblame, blame[STK_MAX_RANKS];
    int flagged_rounds, window;        /* e.g. 4 of 5 */
    double ratio;                      /* the last round's slowest/median */
    char text[512];                    /* "its tp group (ranks 4,5) was slowest in 4 of 5 ..." */
} fsl_verdict;

/* Start the rounds for a job of `world` ranks with layout L at time now (s). */
void fsl_init(fsl_state *s, const fsl_opts *o, const stk_layout *L, int world, double now);

/* One busy-time sample (ms) of rank's latest step. Ranks outside [0, world) are ignored. */
void fsl_sample(fsl_state *s, int rank, double busy_ms);

/* Advance the clock to now (s). Returns 0 while the round runs; at a round's end 1 with *r
 * filled, or 2 with *r and *v filled when this round completes a majority (once per state).
 * Samples are cleared at every round's end. */
int fsl_tick(fsl_state *s, double now, fsl_round *r, fsl_verdict *v);

#endif /* MT_SCHED_FAILSLOW_H */
