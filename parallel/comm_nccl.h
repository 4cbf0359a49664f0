/*
 * parallel/comm_nccl.h — the NCCL backend of parallel/comm.h (GPU buffers), built with GPU=1.
 *
 * A NCCL communicator is made for an existing MPI group: the group's rank 0 creates the
 * ncclUniqueId, broadcasts it over MPI, and every member calls ncclCommInitRank. Collectives run
 * on the backend's CUDA stream and are synchronised before returning, so the interface stays
 * blocking like the MPI backend (overlap comes from issuing buckets early, as with MPI).
 * Counts are in elements.
 */
#ifndef MT_COMM_NCCL_H
#define MT_COMM_NCCL_H

#include <stddef.h>

#include "parallel/comm.h"

typedef struct comm_nccl comm_nccl;

/* Create the NCCL communicator of `group` (collective over group; device already selected).
 * Aborts the job with a message naming the rank on any CUDA/NCCL error. */
comm_nccl *comm_nccl_create(comm *group);
void comm_nccl_destroy(comm_nccl *n);

/* In-place all-reduce of device buffer buf (count floats). */
void comm_nccl_all_reduce(comm_nccl *n, float *buf, size_t count, comm_op op);
/* send (size·recv_count, device) → recv (recv_count, device). */
void comm_nccl_reduce_scatter(comm_nccl *n, const float *send, float *recv, size_t recv_count,
                              comm_op op);
/* send (send_count, device) → recv (size·send_count, device). */
void comm_nccl_all_gather(comm_nccl *n, const float *send, float *recv, size_t send_count);
void comm_nccl_broadcast(comm_nccl *n, float *buf, size_t count, int root);
void comm_nccl_send(comm_nccl *n, const float *buf, size_t count, int peer);
void comm_nccl_recv(comm_nccl *n, float *buf, size_t count, int peer);

/* Paired p2p (PP), all-to-all-v (EP) as NCCL groups; abort for the watchdog (ncclCommAbort). */
void comm_nccl_sendrecv(comm_nccl *n, const float *send, size_t send_count, int to, float *recv,
                        size_t recv_count, int from);
void comm_nccl_all_to_all_v(comm_nccl *n, const float *send, const size_t *send_counts,
                            const size_t *send_displs, float *recv, const size_t *recv_counts,
                            const size_t *recv_displs);
void comm_nccl_abort(comm_nccl *n);

/* `minitrain bench nccl` (cmd/bench.c): all-reduce bus bandwidth over every rank of world (one GPU
 * each, device = rank mod visible devices), as nccl-tests reports it: busbw = bytes · 2(n-1)/n /
 * time, for 2^16..2^26 floats, printed by rank 0. Collective over world. Returns 0, or -1 with err
 * when no CUDA device is visible. */
int comm_nccl_bench_all_reduce(comm *world, char *err, size_t errlen);

#endif /* MT_COMM_NCCL_H */
