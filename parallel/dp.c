/*
 * parallel/dp.c — bucketed all-reduce and ZeRO-1 reduce-scatter (see parallel/dp.h).
 */
#include "parallel/dp.h"

#include <string.h>

#include "core/check.h"

void dp_init(dp_reducer *r, comm *dp, size_t n, size_t bucket_elems, int zero) {
    memset(r, 0, sizeof(*r));
    r->dp = dp;
    r->zero = zero;
    r->n = n;
    size_t P = (size_t)comm_size(dp);
    r->padded = (n + P - 1) / P * P;
    r->shard = r->padded / P;
    r->shard_start = (size_t)comm_rank(dp) * r->shard;
    r->bucket = bucket_elems > 0 ? bucket_elems : n;
    r->nbuckets = (int)((n + r->bucket - 1) / r->bucket);
    r->reqs = callocCheck((size_t)r->nbuckets + 1, sizeof(comm_request *));
    if (zero) r->scratch = callocCheck(r->shard, sizeof(float));
}

static size_t bucket_lo(const dp_reducer *r, int k) {
    size_t hi_from_end = (size_t)(k + 1) * r->bucket;
    return hi_from_end >= r->n ? 0 : r->n - hi_from_end;
}

void dp_ready_from(dp_reducer *r, float *grads, size_t offset) {
    if (r->zero || comm_size(r->dp) == 1) return;
    while (r->launched < r->nbuckets && bucket_lo(r, r->launched) >= offset) {
        int k = r->launched++;
        size_t lo = bucket_lo(r, k), hi = r->n - (size_t)k * r->bucket;
        r->reqs[k] = comm_iall_reduce(r->dp, grads + lo, hi - lo);
    }
    /* give MPI a chance to progress the buckets already in flight */
    for (int k = 0; k < r->launched; k++) comm_test(r->reqs[k]);
}

void dp_finish(dp_reducer *r, float *grads) {
    if (comm_size(r->dp) == 1) return;
    if (r->zero) {
        comm_reduce_scatter(r->dp, grads, r->scratch, r->shard, COMM_SUM);
        comm_copy(grads + r->shard_start, r->scratch, r->shard * sizeof(float)); /* grads: device */
        return;
    }
    dp_ready_from(r, grads, 0);
    for (int k = 0; k < r->launched; k++) {
        comm_wait(r->reqs[k]);
        r->reqs[k] = NULL;
    }
    r->launched = 0;
}

void dp_gather_params(dp_reducer *r, float *params) {
    if (!r->zero || comm_size(r->dp) == 1) return;
    comm_all_gather(r->dp, params + r->shard_start, params, r->shard);
}

void dp_free(dp_reducer *r) {
    free(r->reqs);
    free(r->scratch);
    memset(r, 0, sizeof(*r));
}
