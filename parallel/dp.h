/*
 * parallel/dp.h — data-parallel gradient reduction: bucketed all-reduce, or ZeRO-1
 * reduce-scatter of a padded flat buffer.
 *
 * Buckets (PyTorch DDP's idea, Li et al. 2020): the flat gradient buffer is cut into buckets of
 * about bucket_mb, counted from the END of the buffer because the backward finalises gradients
 * from the last layers first. When the model reports that everything from offset on is final
 * (dp_ready_from), every bucket lying wholly in [offset, n) starts a non-blocking all-reduce while
 * the backward continues; dp_finish starts the rest and waits for all.
 *
 * ZeRO-1 (Rajbhandari et al. 2020, stage 1): gradients are reduce-scattered so each rank gets the
 * summed gradient of its 1/dp shard of the parameters, updates that shard with its shard of the
 * AdamW state, and the parameters are all-gathered back. The buffer is padded to a multiple of
 * dp (parameter counts dp does not divide are padded, not refused).
 * Sums, not averages: the trainer scales the loss by 1/(global batch tokens) up front.
 */
#ifndef MT_DP_H
#define MT_DP_H

#include <stddef.h>

#include "parallel/comm.h"

typedef struct {
    comm *dp;
    int zero;
    size_t n;           /* gradient elements (the model's num_params) */
    size_t padded;      /* n rounded up to a multiple of the group size */
    size_t shard;       /* padded / group size (ZeRO-1) */
    size_t shard_start; /* this rank's shard: [shard_start, shard_start + shard) */
    size_t bucket;      /* elements per bucket */
    int nbuckets;       /* bucket k covers [max(0, n-(k+1)·bucket), n-k·bucket) */
    int launched;       /* buckets started this step (from the end) */
    comm_request **reqs;
    float *scratch; // (shard) ZeRO-1 reduce-scatter output
} dp_reducer;

/* Set up for n gradient elements over group dp. bucket_elems > 0. zero: 0 or 1. */
void dp_init(dp_reducer *r, comm *dp, size_t n, size_t bucket_elems, int zero);

/* grads[offset, n) are final for this step: start the buckets that lie wholly inside.
 * (No-op for ZeRO-1, whose single reduce-scatter runs in dp_finish.) */
void dp_ready_from(dp_reducer *r, float *grads, size_t offset);

/* Finish the reduction of grads (padded floats for ZeRO-1). Afterwards: without ZeRO every rank
 * holds the summed gradient in grads[0, n); with ZeRO-1 only grads[shard_start, +shard) is the
 * summed gradient of this rank's shard (the rest is stale). */
void dp_finish(dp_reducer *r, float *grads);

/* ZeRO-1: params[shard_start, +shard) were updated here; all-gather every rank's shard so all
 * ranks hold the full updated params (padded floats). No-op without ZeRO. */
void dp_gather_params(dp_reducer *r, float *params);

void dp_free(dp_reducer *r);

#endif /* MT_DP_H */
