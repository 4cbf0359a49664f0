/*
 * parallel/comm_dev.c — the device-aware face of parallel/comm.h: each float collective and
 * point-to-point call looks at its buffers and goes to NCCL (device buffers on a group with a
 * NCCL communicator), to MPI through a host staging copy (device buffers without NCCL: the guard
 * device, or a GPU group of one node without NCCL), or straight to MPI (host buffers).
 *
 * Why the split is decided per call from the buffer and not per group: the same group carries
 * both the gradient buckets (device) and small host scalars (loss sums, counts, agreement
 * votes), and a scalar round trip through a device costs more than the MPI call. With
 * device = guard the staging branch runs in every multi-rank test, so the boundary a GPU build
 * depends on (which buffers are device memory, where host copies happen) is exercised on CPUs.
 */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "parallel/comm.h"
#ifdef MT_HAVE_CUDA
#include "parallel/comm_nccl.h"
#endif

static const comm_devmem *g_dev;

void comm_set_devmem(const comm_devmem *d) { g_dev = d; }

static int is_dev(const void *p) { return g_dev && p && g_dev->is_device(p); }

void comm_copy(void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src)
        return;
    int dd = is_dev(dst), ds = is_dev(src);
    if (dd && ds)
        g_dev->d2d(dst, src, bytes);
    else if (dd)
        g_dev->h2d(dst, src, bytes);
    else if (ds)
        g_dev->d2h(dst, src, bytes);
    else
        memmove(dst, src, bytes);
}

/* A host view of buffer p of `bytes`: p itself when it is host memory, else a host copy (filled
 * from the device if `in`). unstage copies a staged view back (if `out`) and frees it. */
static void *stage(const void *p, size_t bytes, int in) {
    if (!is_dev(p))
        return (void *)p;
    void *h = mallocCheck(bytes ? bytes : 1);
    if (in && bytes)
        g_dev->d2h(h, p, bytes);
    return h;
}
static void unstage(void *p, void *h, size_t bytes, int out) {
    if (h == p)
        return;
    if (out && bytes)
        g_dev->h2d(p, h, bytes);
    free(h);
}

/* ---- NCCL communicators (GPU=1) -------------------------------------------------------------- */

#ifdef MT_HAVE_CUDA
#define MAX_NCCL 64
static comm_nccl *g_nccl[MAX_NCCL];
static int g_n_nccl;
#define NCCL_OF(c) ((comm_nccl *)comm_get_nccl(c))
#endif

int comm_enable_nccl(comm *c, char *err, size_t errlen) {
#ifdef MT_HAVE_CUDA
    if (comm_size(c) == 1 || comm_get_nccl(c))
        return 0;
    if (g_n_nccl == MAX_NCCL) {
        snprintf(err, errlen, "too many NCCL communicators (%d)", MAX_NCCL);
        return -1;
    }
    comm_nccl *n = comm_nccl_create(c);
    g_nccl[g_n_nccl++] = n;
    comm_set_nccl(c, (struct comm_nccl *)n);
    return 0;
#else
    (void)c;
    snprintf(err, errlen, "NCCL communicators need a GPU=1 build");
    return -1;
#endif
}


void comm_nccl_abort_all(void) {
#ifdef MT_HAVE_CUDA
    for (int i = 0; i < g_n_nccl; i++)
        comm_nccl_abort(g_nccl[i]);
    g_n_nccl = 0;
#endif
}

/* ---- the wrappers ---------------------------------------------------------------------------- */

void comm_all_reduce(comm *c, float *buf, size_t count, comm_op op) {
    if (!is_dev(buf)) {
        comm_host_all_reduce(c, buf, count, op);
        return;
    }
    if (comm_size(c) == 1 || count == 0)
        return;
#ifdef MT_HAVE_CUDA
    if (comm_get_nccl(c)) {
        comm_nccl_all_reduce(NCCL_OF(c), buf, count, op);
        return;
    }
#endif
    float *h = stage(buf, count * sizeof(float), 1);
    comm_host_all_reduce(c, h, count, op);
    unstage(buf, h, count * sizeof(float), 1);
}

void comm_reduce_scatter(comm *c, const float *send, float *recv, size_t recv_count, comm_op op) {
    if (!is_dev(send) && !is_dev(recv)) {
        comm_host_reduce_scatter(c, send, recv, recv_count, op);
        return;
    }
    const size_t n = (size_t)comm_size(c) * recv_count;
    if (comm_size(c) == 1) {
        comm_copy(recv, send, recv_count * sizeof(float));
        return;
    }
#ifdef MT_HAVE_CUDA
    if (comm_get_nccl(c) && is_dev(send) && is_dev(recv)) {
        comm_nccl_reduce_scatter(NCCL_OF(c), send, recv, recv_count, op);
        return;
    }
#endif
    float *hs = stage(send, n * sizeof(float), 1), *hr = stage(recv, recv_count * sizeof(float), 0);
    comm_host_reduce_scatter(c, hs, hr, recv_count, op);
    unstage((void *)send, hs, 0, 0);
    unstage(recv, hr, recv_count * sizeof(float), 1);
}

void comm_all_gather(comm *c, const float *send, float *recv, size_t send_count) {
    if (!is_dev(send) && !is_dev(recv)) {
        comm_host_all_gather(c, send, recv, send_count);
        return;
    }
    const size_t n = (size_t)comm_size(c) * send_count;
    if (comm_size(c) == 1) {
        comm_copy(recv, send, send_count * sizeof(float));
        return;
    }
#ifdef MT_HAVE_CUDA
    if (comm_get_nccl(c) && is_dev(send) && is_dev(recv)) {
        comm_nccl_all_gather(NCCL_OF(c), send, recv, send_count);
        return;
    }
#endif
    float *hs = stage(send, send_count * sizeof(float), 1), *hr = stage(recv, n * sizeof(float), 0);
    comm_host_all_gather(c, hs, hr, send_count);
    unstage((void *)send, hs, 0, 0);
    unstage(recv, hr, n * sizeof(float), 1);
}

void comm_broadcast_bytes(comm *c, void *buf, size_t count, int root) {
    if (!is_dev(buf) || comm_size(c) == 1) {
        comm_host_broadcast_bytes(c, buf, count, root);
        return;
    }
    void *h = stage(buf, count, comm_rank(c) == root);
    comm_host_broadcast_bytes(c, h, count, root);
    unstage(buf, h, count, 1);
}

void comm_all_to_all_v(comm *c, const float *send, const size_t *send_counts,
                       const size_t *send_displs, float *recv, const size_t *recv_counts,
                       const size_t *recv_displs) {
    if (!is_dev(send) && !is_dev(recv)) {
        comm_host_all_to_all_v(c, send, send_counts, send_displs, recv, recv_counts, recv_displs);
        return;
    }
    const int p = comm_size(c);
    if (p == 1) {
        comm_copy(recv + recv_displs[0], send + send_displs[0], send_counts[0] * sizeof(float));
        return;
    }
#ifdef MT_HAVE_CUDA
    if (comm_get_nccl(c) && is_dev(send) && is_dev(recv)) {
        comm_nccl_all_to_all_v(NCCL_OF(c), send, send_counts, send_displs, recv, recv_counts,
                               recv_displs);
        return;
    }
#endif
    size_t sn = 0, rn = 0;
    for (int i = 0; i < p; i++) {
        sn = send_displs[i] + send_counts[i] > sn ? send_displs[i] + send_counts[i] : sn;
        rn = recv_displs[i] + recv_counts[i] > rn ? recv_displs[i] + recv_counts[i] : rn;
    }
    float *hs = stage(send, sn * sizeof(float), 1), *hr = stage(recv, rn * sizeof(float), 1);
    comm_host_all_to_all_v(c, hs, send_counts, send_displs, hr, recv_counts, recv_displs);
    unstage((void *)send, hs, 0, 0);
    unstage(recv, hr, rn * sizeof(float), 1);
}

/* Device buffers complete before returning (staged, or NCCL with a stream sync): the request is
 * already done. Overlap of NCCL buckets with the backward is future work (docs/gpu.md). */
comm_request *comm_iall_reduce(comm *c, float *buf, size_t count) {
    if (!is_dev(buf))
        return comm_host_iall_reduce(c, buf, count);
    comm_all_reduce(c, buf, count, COMM_SUM);
    return comm_host_iall_reduce(c, buf, 0); /* an empty, completed request */
}

/* Device buffers: the blocking all-gather, then a completed request (as comm_iall_reduce). */
comm_request *comm_iall_gather(comm *c, const float *send, float *recv, size_t send_count) {
    if (!is_dev(send) && !is_dev(recv)) return comm_host_iall_gather(c, send, recv, send_count);
    comm_all_gather(c, send, recv, send_count);
    return comm_host_iall_reduce(c, recv, 0);
}

void comm_send(comm *c, const float *buf, size_t count, int peer, int tag) {
    if (!is_dev(buf)) {
        comm_host_send(c, buf, count, peer, tag);
        return;
    }
#ifdef MT_HAVE_CUDA
    if (comm_get_nccl(c)) {
        comm_nccl_send(NCCL_OF(c), buf, count, peer);
        return;
    }
#endif
    float *h = stage(buf, count * sizeof(float), 1);
    comm_host_send(c, h, count, peer, tag);
    unstage((void *)buf, h, 0, 0);
}

void comm_recv(comm *c, float *buf, size_t count, int peer, int tag) {
    if (!is_dev(buf)) {
        comm_host_recv(c, buf, count, peer, tag);
        return;
    }
#ifdef MT_HAVE_CUDA
    if (comm_get_nccl(c)) {
        comm_nccl_recv(NCCL_OF(c), buf, count, peer);
        return;
    }
#endif
    float *h = stage(buf, count * sizeof(float), 0);
    comm_host_recv(c, h, count, peer, tag);
    unstage(buf, h, count * sizeof(float), 1);
}

comm_request *comm_isend(comm *c, const float *buf, size_t count, int peer, int tag) {
    float *h = mallocCheck(count ? count * sizeof(float) : 1);
    comm_copy(h, buf, count * sizeof(float)); /* d2h for device memory, memmove for host */
    return comm_host_isend_owned(c, h, count, peer, tag);
}

void comm_recv_mpi(comm *c, float *buf, size_t count, int peer, int tag) {
    float *h = stage(buf, count * sizeof(float), 0);
    comm_host_recv(c, h, count, peer, tag);
    unstage(buf, h, count * sizeof(float), 1);
}

void comm_sendrecv(comm *c, const float *sendbuf, size_t send_count, int to, float *recvbuf,
                   size_t recv_count, int from, int tag) {
    if (!is_dev(sendbuf) && !is_dev(recvbuf)) {
        comm_host_sendrecv(c, sendbuf, send_count, to, recvbuf, recv_count, from, tag);
        return;
    }
#ifdef MT_HAVE_CUDA
    if (comm_get_nccl(c) && is_dev(sendbuf) && is_dev(recvbuf)) {
        comm_nccl_sendrecv(NCCL_OF(c), sendbuf, send_count, to, recvbuf, recv_count, from);
        return;
    }
#endif
    float *hs = stage(sendbuf, send_count * sizeof(float), 1);
    float *hr = stage(recvbuf, recv_count * sizeof(float), 0);
    comm_host_sendrecv(c, hs, send_count, to, hr, recv_count, from, tag);
    unstage((void *)sendbuf, hs, 0, 0);
    unstage(recvbuf, hr, recv_count * sizeof(float), 1);
}
