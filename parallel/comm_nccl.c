/*
 * parallel/comm_nccl.c — NCCL backend (see parallel/comm_nccl.h). Compiled only with GPU=1
 * (MT_HAVE_CUDA); a CPU build contains none of it. It needs no MPI of its own: the unique id
 * travels by comm_broadcast_bytes (MPI, or the self backend of a `make GPU=1 MPICC=` build, where
 * every group has one rank), so a GPU node without MPI still builds and trains on one GPU.
 */
#include "parallel/comm_nccl.h"

#ifdef MT_HAVE_CUDA
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"
#include "core/timer.h"

struct comm_nccl {
    ncclComm_t nccl;
    cudaStream_t stream;
    int rank, size;
    const char *name;
};

#define ncclCheck(call, n)                                                                         \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            comm_abort(MT_EXIT_ERROR, "NCCL %s on group '%s' failed: %s (at %s:%d)", #call,       \
                       (n)->name, ncclGetErrorString(r_), __FILE__, __LINE__);                     \
    } while (0)
#define cudaCheck(call, n)                                                                         \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            comm_abort(MT_EXIT_ERROR, "CUDA %s on group '%s' failed: %s (at %s:%d)", #call,       \
                       (n)->name, cudaGetErrorString(e_), __FILE__, __LINE__);                     \
    } while (0)

static ncclRedOp_t nccl_op(comm_op op) {
    return op == COMM_MAX ? ncclMax : op == COMM_AVG ? ncclAvg : ncclSum;
}

comm_nccl *comm_nccl_create(comm *group) {
    comm_nccl *n = callocCheck(1, sizeof(comm_nccl));
    n->rank = comm_rank(group);
    n->size = comm_size(group);
    n->name = comm_name(group);
    ncclUniqueId id;
    if (n->rank == 0) ncclCheck(ncclGetUniqueId(&id), n);
    comm_broadcast_bytes(group, &id, sizeof(id), 0); /* over MPI (or self) */
    cudaCheck(cudaStreamCreate(&n->stream), n);
    ncclCheck(ncclCommInitRank(&n->nccl, n->size, id, n->rank), n);
    return n;
}

void comm_nccl_destroy(comm_nccl *n) {
    if (!n) return;
    ncclCommDestroy(n->nccl);
    cudaStreamDestroy(n->stream);
    free(n);
}

static void sync(comm_nccl *n) { cudaCheck(cudaStreamSynchronize(n->stream), n); }

void comm_nccl_all_reduce(comm_nccl *n, float *buf, size_t count, comm_op op) {
    ncclCheck(ncclAllReduce(buf, buf, count, ncclFloat, nccl_op(op), n->nccl, n->stream), n);
    sync(n);
}

void comm_nccl_reduce_scatter(comm_nccl *n, const float *send, float *recv, size_t recv_count,
                              comm_op op) {
    ncclCheck(ncclReduceScatter(send, recv, recv_count, ncclFloat, nccl_op(op), n->nccl,
                                n->stream), n);
    sync(n);
}

void comm_nccl_all_gather(comm_nccl *n, const float *send, float *recv, size_t send_count) {
    ncclCheck(ncclAllGather(send, recv, send_count, ncclFloat, n->nccl, n->stream), n);
    sync(n);
}

void comm_nccl_broadcast(comm_nccl *n, float *buf, size_t count, int root) {
    ncclCheck(ncclBroadcast(buf, buf, count, ncclFloat, root, n->nccl, n->stream), n);
    sync(n);
}

void comm_nccl_send(comm_nccl *n, const float *buf, size_t count, int peer) {
    ncclCheck(ncclSend(buf, count, ncclFloat, peer, n->nccl, n->stream), n);
    sync(n);
}

void comm_nccl_recv(comm_nccl *n, float *buf, size_t count, int peer) {
    ncclCheck(ncclRecv(buf, count, ncclFloat, peer, n->nccl, n->stream), n);
    sync(n);
}

/* PP: one send and one receive as a pair (ncclGroupStart/End), so neighbours that both send
 * first cannot deadlock. */
void comm_nccl_sendrecv(comm_nccl *n, const float *send, size_t send_count, int to, float *recv,
                        size_t recv_count, int from) {
    ncclCheck(ncclGroupStart(), n);
    if (send_count) ncclCheck(ncclSend(send, send_count, ncclFloat, to, n->nccl, n->stream), n);
    if (recv_count) ncclCheck(ncclRecv(recv, recv_count, ncclFloat, from, n->nccl, n->stream), n);
    ncclCheck(ncclGroupEnd(), n);
    sync(n);
}

/* EP: all-to-all-v as one group of sends and receives (NCCL has no alltoallv). */
void comm_nccl_all_to_all_v(comm_nccl *n, const float *send, const size_t *send_counts,
                            const size_t *send_displs, float *recv, const size_t *recv_counts,
                            const size_t *recv_displs) {
    ncclCheck(ncclGroupStart(), n);
    for (int p = 0; p < n->size; p++) {
        if (send_counts[p])
            ncclCheck(ncclSend(send + send_displs[p], send_counts[p], ncclFloat, p, n->nccl,
                               n->stream), n);
        if (recv_counts[p])
            ncclCheck(ncclRecv(recv + recv_displs[p], recv_counts[p], ncclFloat, p, n->nccl,
                               n->stream), n);
    }
    ncclCheck(ncclGroupEnd(), n);
    sync(n);
}

/* The watchdog's exit: abandon in-flight collectives so the process can leave (never blocks). */
void comm_nccl_abort(comm_nccl *n) {
    if (n) ncclCommAbort(n->nccl);
}

int comm_nccl_bench_all_reduce(comm *world, char *err, size_t errlen) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        snprintf(err, errlen, "no CUDA device visible");
        return -1;
    }
    cudaSetDevice(comm_rank(world) % ndev);
    comm_nccl *n = comm_nccl_create(world);
    for (size_t count = 1 << 16; count <= (size_t)1 << 26; count <<= 2) {
        float *buf;
        cudaCheck(cudaMalloc((void **)&buf, count * sizeof(float)), n);
        cudaCheck(cudaMemset(buf, 0, count * sizeof(float)), n);
        comm_nccl_all_reduce(n, buf, count, COMM_SUM); /* warm-up */
        comm_barrier(world);
        double t0 = timer_now();
        const int iters = 20;
        for (int i = 0; i < iters; i++) comm_nccl_all_reduce(n, buf, count, COMM_SUM);
        double dt = (timer_now() - t0) / iters;
        double bytes = count * sizeof(float), nn = n->size;
        if (n->rank == 0)
            printf("all_reduce %10zu floats: %8.1f us, busbw %6.1f GB/s\n", count, dt * 1e6,
                   bytes * 2 * (nn - 1) / nn / dt / 1e9);
        cudaFree(buf);
    }
    comm_nccl_destroy(n);
    return 0;
}
#endif
