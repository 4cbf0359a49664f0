/*
 * parallel/comm.h — one communicator interface, three backends.
 *
 *   self  one process, no MPI needed: collectives are copies (or no-ops), point-to-point is an
 *         error. Every single-process run and most unit tests use it.
 *   mpi   CPU buffers over MPI (OpenMPI); one MPI_Comm per group (MPI_Comm_split by the mesh).
 *   nccl  GPU buffers over NCCL (built with `make GPU=1`); the ncclUniqueId is made on the group's
 *         rank 0 and broadcast over the group's MPI communicator; one ncclComm_t per group.
 *
 * Counts are in ELEMENTS of the named type, never bytes. Every call runs under the watchdog
 * (comm_watchdog_start): a collective that does not finish within the timeout aborts the whole
 * job with a message naming the rank and the call, so a dead peer never leaves the others hanging.
 * Errors from the library abort the job the same way (MPI_Abort), naming rank and call.
 */
#ifndef MT_COMM_H
#define MT_COMM_H

#include <stddef.h>

typedef enum { COMM_SELF = 0, COMM_MPI = 1, COMM_NCCL = 2 } comm_backend;
typedef enum { COMM_SUM = 0, COMM_AVG = 1, COMM_MAX = 2 } comm_op;

typedef struct comm comm;

/* Initialise the process-wide layer: MPI_Init when launched under mpirun (OMPI_COMM_WORLD_SIZE
 * or PMI_SIZE set) and MPI is compiled in; otherwise the self backend. Returns the world
 * communicator. Safe to call once per process. */
comm *comm_init_world(int *argc, char ***argv);
/* Finalize MPI if it was initialised (call once at exit). */
void comm_finalize(void);

/* Split `parent` into groups by color; ranks are ordered by key inside a group (MPI_Comm_split).
 * name labels the group in error messages ("tp", "dp", ...). Collective over parent. */
comm *comm_split(comm *parent, int color, int key, const char *name);
void comm_free(comm *c);

int comm_rank(const comm *c);
int comm_size(const comm *c);
const char *comm_name(const comm *c);
/* Rank in the world communicator of this process. */
int comm_world_rank(void);

/* In-place all-reduce of buf (count floats). */
void comm_all_reduce(comm *c, float *buf, size_t count, comm_op op);
/* In-place all-reduce of doubles (norms, loss sums). */
void comm_all_reduce_f64(comm *c, double *buf, size_t count, comm_op op);
/* send (size·recv_count floats, rank r's block at r·recv_count) → recv (recv_count) holds the
 * reduction of every rank's block for this rank. */
void comm_reduce_scatter(comm *c, const float *send, float *recv, size_t recv_count, comm_op op);
/* send (send_count) from every rank → recv (size·send_count), rank r's block at r·send_count.
 * send may alias its own block of recv. */
void comm_all_gather(comm *c, const float *send, float *recv, size_t send_count);
/* Broadcast count bytes from root. (Bytes here: it carries structs and ids, not tensors.) */
void comm_broadcast_bytes(comm *c, void *buf, size_t count, int root);
/* Variable all-to-all of floats; counts and displacements in elements, per peer. */
void comm_all_to_all_v(comm *c, const float *send, const size_t *send_counts,
                       const size_t *send_displs, float *recv, const size_t *recv_counts,
                       const size_t *recv_displs);
/* Non-blocking in-place all-reduce (sum) of buf (count floats): returns a request to finish
 * with comm_wait. comm_test drives progress (MPI progresses non-blocking collectives only inside
 * MPI calls) and returns 1 when done. With one rank the request is already complete. */
typedef struct comm_request comm_request;
comm_request *comm_iall_reduce(comm *c, float *buf, size_t count);
/* Non-blocking all-gather (send_count floats from each rank into recv, rank order); send and recv
 * must stay untouched until comm_wait. */
comm_request *comm_iall_gather(comm *c, const float *send, float *recv, size_t send_count);
int comm_test(comm_request *r);
void comm_wait(comm_request *r); /* completes and frees r */

/* Point-to-point (pipeline parallel). Blocking. */
void comm_send(comm *c, const float *buf, size_t count, int peer, int tag);
void comm_recv(comm *c, float *buf, size_t count, int peer, int tag);
/* Exchange with one peer without deadlock (send to `to`, receive from `from`). */
void comm_sendrecv(comm *c, const float *sendbuf, size_t send_count, int to, float *recvbuf,
                   size_t recv_count, int from, int tag);
void comm_barrier(comm *c);
/* Non-blocking send of a COPY of buf (count floats, host or device memory: the copy is taken
 * before the call returns, so buf may be overwritten at once) over MPI, never NCCL; finish it
 * with comm_wait (or poll with comm_test). Match it with comm_recv_mpi and the same tag. For
 * schedules whose per-stage order is not a chain of paired exchanges (parallel/pp_exec.c):
 * with every send non-blocking, any order consistent with the passes' dependencies completes. */
comm_request *comm_isend(comm *c, const float *buf, size_t count, int peer, int tag);
/* 1 when MPI runs with MPI_THREAD_MULTIPLE, so a second thread may call comm_test while the main
 * thread computes or blocks in another call (0 without MPI or with a lesser thread level). */
int comm_thread_multiple(void);
/* Blocking receive over MPI whatever buf is (device memory staged through a host copy): the
 * receiving side of comm_isend. */
void comm_recv_mpi(comm *c, float *buf, size_t count, int peer, int tag);

/* Abort the whole job (MPI_Abort, or exit without MPI) after printing
 * "minitrain: rank R: <msg>". Never returns. */
void comm_abort(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));

/* Seconds this process has spent inside blocking comm calls (collectives, waits) so far. */
double comm_seconds(void);

/* Start the collective watchdog thread: any comm_* call that takes longer than timeout_s
 * seconds aborts the job with "rank R: <call> on group <name> did not complete in S s".
 * timeout_s <= 0 disables it. */
void comm_watchdog_start(double timeout_s);

/* ---- device buffers (parallel/comm_dev.c) ---------------------------------------------------
 * The float collectives and point-to-point calls above accept device buffers as well as host
 * ones. Which memory a buffer is, and how to copy it, is told by the ops backend
 * (ops/ops.h registers itself: parallel/ cannot include train/). The split, docs/gpu.md:
 *   device buffer, group with a NCCL communicator (device = cuda) → NCCL on the comm stream;
 *   device buffer, no NCCL (device = guard)                    → staged: copied to a host
 *                                                                 buffer, MPI, copied back;
 *   host buffer (cpu, and small scalars on every device)       → MPI directly.
 * comm_all_reduce_f64 and comm_broadcast_bytes are host-only (loss, counts, votes, ids). */
typedef struct {
    int (*is_device)(const void *p);
    void (*h2d)(void *dst, const void *src, size_t bytes);
    void (*d2h)(void *dst, const void *src, size_t bytes);
    void (*d2d)(void *dst, const void *src, size_t bytes);
} comm_devmem;
/* Register the device memory (NULL = every buffer is host memory, the default). */
void comm_set_devmem(const comm_devmem *d);
/* memmove that works on device memory too (both sides the same kind), for parallel/ modules. */
void comm_copy(void *dst, const void *src, size_t bytes);
/* Give group c a NCCL communicator (collective over c; GPU=1 builds with a device selected).
 * Returns 0, or -1 with err (no CUDA in this build). Groups of one rank need none. */
int comm_enable_nccl(comm *c, char *err, size_t errlen);
/* Abort every NCCL communicator (ncclCommAbort): the watchdog's path out of a hung collective. */
void comm_nccl_abort_all(void);

/* The MPI/self implementations on HOST buffers, which the wrappers above call (comm.c). */
void comm_host_all_reduce(comm *c, float *buf, size_t count, comm_op op);
void comm_host_reduce_scatter(comm *c, const float *send, float *recv, size_t recv_count,
                              comm_op op);
void comm_host_all_gather(comm *c, const float *send, float *recv, size_t send_count);
void comm_host_broadcast_bytes(comm *c, void *buf, size_t count, int root);
void comm_host_all_to_all_v(comm *c, const float *send, const size_t *send_counts,
                            const size_t *send_displs, float *recv, const size_t *recv_counts,
                            const size_t *recv_displs);
comm_request *comm_host_iall_reduce(comm *c, float *buf, size_t count);
comm_request *comm_host_iall_gather(comm *c, const float *send, float *recv, size_t send_count);
void comm_host_send(comm *c, const float *buf, size_t count, int peer, int tag);
void comm_host_recv(comm *c, float *buf, size_t count, int peer, int tag);
/* MPI_Isend from host_buf, which the request owns from now on (comm_wait frees it). */
comm_request *comm_host_isend_owned(comm *c, float *host_buf, size_t count, int peer, int tag);
void comm_host_sendrecv(comm *c, const float *sendbuf, size_t send_count, int to, float *recvbuf,
                        size_t recv_count, int from, int tag);
struct comm_nccl;
void comm_set_nccl(comm *c, struct comm_nccl *n);
struct comm_nccl *comm_get_nccl(const comm *c);

#endif /* MT_COMM_H */
