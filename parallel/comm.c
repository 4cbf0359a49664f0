/*
 * parallel/comm.c — the self and MPI backends of parallel/comm.h, and the collective watchdog.
 *
 * The watchdog is one thread that wakes every 100 ms and compares "now" with the start time of
 * the call in progress (set on entry to every comm_* call, cleared on exit). A rank stuck in a
 * collective because a peer died or hung is aborted with a message that names it and the call;
 * MPI_Abort then tears down the whole job, so nothing hangs forever.
 */
#include "parallel/comm.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/timer.h"

#ifdef MT_HAVE_MPI
#include <mpi.h>
#endif

struct comm {
    comm_backend backend;
    struct comm_nccl *nccl; /* device collectives of this group (comm_dev.c), NULL = none */
    int rank, size;
    char name[32];
#ifdef MT_HAVE_MPI
    MPI_Comm mpi;
#endif
};

#ifdef MT_HAVE_MPI
static int g_mpi = 0; /* MPI_Init done, MPI_Finalize not yet */
#endif
static int g_world_rank = 0;

/* ---- watchdog ---------------------------------------------------------------------------- */

static _Atomic double g_call_start = 0; /* monotonic seconds; 0 = no call in progress */
static const char *volatile g_call_name = "";
static const char *volatile g_call_group = "";
static double g_timeout = 0;

static void *watchdog_main(void *arg) {
    (void)arg;
    for (;;) {
        usleep(100000);
        double t0 = atomic_load(&g_call_start);
        if (t0 > 0 && timer_now() - t0 > g_timeout)
            comm_abort(MT_EXIT_ERROR, "%s on group '%s' did not complete in %.0f s (a peer rank "
                       "died or hangs); aborting the job (watchdog, see --comm-timeout)",
                       g_call_name, g_call_group, g_timeout);
    }
    return NULL;
}

void comm_watchdog_start(double timeout_s) {
    static int started = 0;
    if (timeout_s <= 0 || started) return;
    g_timeout = timeout_s;
    pthread_t th;
    if (pthread_create(&th, NULL, watchdog_main, NULL) == 0) {
        pthread_detach(th);
        started = 1;
    }
}

#define ENTER(c, what)                                                                             \
    do {                                                                                           \
        g_call_name = what;                                                                        \
        g_call_group = (c)->name;                                                                  \
        atomic_store(&g_call_start, timer_now());                                                      \
    } while (0)
static double g_comm_seconds = 0; /* time spent inside blocking comm calls, for accounting */
#define LEAVE()                                                                                    \
    do {                                                                                           \
        g_comm_seconds += timer_now() - atomic_load(&g_call_start);                                    \
        atomic_store(&g_call_start, 0.0);                                                          \
    } while (0)

double comm_seconds(void) { return g_comm_seconds; }

/* ---- errors ------------------------------------------------------------------------------ */

void comm_abort(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "minitrain: rank %d: ", g_world_rank);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    fflush(stderr);
    comm_nccl_abort_all(); /* NCCL collectives in flight would keep the process from leaving */
#ifdef MT_HAVE_MPI
    if (g_mpi) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    _exit(code);
}

#ifdef MT_HAVE_MPI
#define mpiCheck(call, c, what)                                                                    \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) {                                                                  \
            char s_[MPI_MAX_ERROR_STRING];                                                         \
            int n_ = 0;                                                                            \
            MPI_Error_string(rc_, s_, &n_);                                                        \
            comm_abort(MT_EXIT_ERROR, "%s on group '%s' failed: %s (at %s:%d)", what, (c)->name,  \
                       s_, __FILE__, __LINE__);                                                    \
        }                                                                                          \
    } while (0)

static MPI_Op mpi_op(comm_op op) { return op == COMM_MAX ? MPI_MAX : MPI_SUM; }
#endif

/* ---- setup ------------------------------------------------------------------------------- */

static comm *new_comm(comm_backend b, int rank, int size, const char *name) {
    comm *c = callocCheck(1, sizeof(comm));
    c->backend = b;
    c->rank = rank;
    c->size = size;
    snprintf(c->name, sizeof(c->name), "%s", name);
    return c;
}

static int g_thread_multiple; /* MPI_Init_thread provided MPI_THREAD_MULTIPLE */

comm *comm_init_world(int *argc, char ***argv) {
    int launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
#ifdef MT_HAVE_MPI
    if (launched) {
        int provided = 0;
        /* MULTIPLE where the library has it: the pipeline executor's progress thread tests its
         * sends while the main thread computes (parallel/pp_exec.c); FUNNELED is enough else */
        MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
        g_thread_multiple = provided >= MPI_THREAD_MULTIPLE;
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        g_mpi = 1;
        int rank, size;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        g_world_rank = rank;
        comm *c = new_comm(COMM_MPI, rank, size, "world");
        c->mpi = MPI_COMM_WORLD;
        return c;
    }
#else
    (void)argc;
    (void)argv;
    if (launched && getenv("OMPI_COMM_WORLD_SIZE") && atoi(getenv("OMPI_COMM_WORLD_SIZE")) > 1)
        mt_fail("launched under mpirun but this minitrain was built without MPI (make deps; make)");
#endif
    return new_comm(COMM_SELF, 0, 1, "world");
}

void comm_finalize(void) {
#ifdef MT_HAVE_MPI
    if (g_mpi) {
        MPI_Finalize();
        g_mpi = 0;
    }
#endif
}

int comm_thread_multiple(void) { return g_thread_multiple; }
int comm_world_rank(void) { return g_world_rank; }

comm *comm_split(comm *parent, int color, int key, const char *name) {
#ifdef MT_HAVE_MPI
    if (parent->backend == COMM_MPI) {
        MPI_Comm out;
        mpiCheck(MPI_Comm_split(parent->mpi, color, key, &out), parent, "MPI_Comm_split");
        MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
        int r, s;
        MPI_Comm_rank(out, &r);
        MPI_Comm_size(out, &s);
        comm *c = new_comm(COMM_MPI, r, s, name);
        c->mpi = out;
        return c;
    }
#else
    (void)parent;
#endif
    (void)color;
    (void)key;
    return new_comm(COMM_SELF, 0, 1, name);
}

void comm_free(comm *c) {
    if (!c) return;
#ifdef MT_HAVE_MPI
    if (c->backend == COMM_MPI && c->mpi != MPI_COMM_WORLD && g_mpi) MPI_Comm_free(&c->mpi);
#endif
    free(c);
}

int comm_rank(const comm *c) { return c->rank; }
void comm_set_nccl(comm *c, struct comm_nccl *n) { c->nccl = n; }
struct comm_nccl *comm_get_nccl(const comm *c) { return c->nccl; }
int comm_size(const comm *c) { return c->size; }
const char *comm_name(const comm *c) { return c->name; }

/* ---- collectives ------------------------------------------------------------------------- */

void comm_host_all_reduce(comm *c, float *buf, size_t count, comm_op op) {
    if (c->size == 1 || count == 0) return;
#ifdef MT_HAVE_MPI
    ENTER(c, "all_reduce");
    /* MPI counts are int: large buffers go in chunks. */
    for (size_t off = 0; off < count;) {
        size_t n = count - off > (1u << 30) ? (1u << 30) : count - off;
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)n, MPI_FLOAT, mpi_op(op), c->mpi), c,
                 "MPI_Allreduce");
        off += n;
    }
    LEAVE();
    if (op == COMM_AVG) {
        float s = 1.0f / c->size;
        for (size_t i = 0; i < count; i++) buf[i] *= s;
    }
#else
    (void)buf;
    (void)op;
#endif
}

void comm_all_reduce_f64(comm *c, double *buf, size_t count, comm_op op) {
    if (c->size == 1 || count == 0) return;
#ifdef MT_HAVE_MPI
    ENTER(c, "all_reduce_f64");
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_DOUBLE, mpi_op(op), c->mpi), c,
             "MPI_Allreduce");
    LEAVE();
    if (op == COMM_AVG)
        for (size_t i = 0; i < count; i++) buf[i] /= c->size;
#else
    (void)buf;
    (void)op;
#endif
}

void comm_host_reduce_scatter(comm *c, const float *send, float *recv, size_t recv_count, comm_op op) {
    if (c->size == 1) {
        if (recv != send) memmove(recv, send, recv_count * sizeof(float));
        return;
    }
#ifdef MT_HAVE_MPI
    ENTER(c, "reduce_scatter");
    mtCheck(recv_count < (1u << 31), "reduce_scatter block too large for MPI int counts");
    mpiCheck(MPI_Reduce_scatter_block(send, recv, (int)recv_count, MPI_FLOAT, mpi_op(op), c->mpi),
             c, "MPI_Reduce_scatter_block");
    LEAVE();
    if (op == COMM_AVG) {
        float s = 1.0f / c->size;
        for (size_t i = 0; i < recv_count; i++) recv[i] *= s;
    }
#else
    (void)op;
#endif
}

void comm_host_all_gather(comm *c, const float *send, float *recv, size_t send_count) {
    if (c->size == 1) {
        if (recv != send) memmove(recv, send, send_count * sizeof(float));
        return;
    }
#ifdef MT_HAVE_MPI
    ENTER(c, "all_gather");
    mtCheck(send_count < (1u << 31), "all_gather block too large for MPI int counts");
    const void *sb = send == recv + (size_t)c->rank * send_count ? MPI_IN_PLACE : (const void *)send;
    mpiCheck(MPI_Allgather(sb, (int)send_count, MPI_FLOAT, recv, (int)send_count, MPI_FLOAT,
                           c->mpi), c, "MPI_Allgather");
    LEAVE();
#endif
}

void comm_host_broadcast_bytes(comm *c, void *buf, size_t count, int root) {
    if (c->size == 1) return;
#ifdef MT_HAVE_MPI
    ENTER(c, "broadcast");
    mpiCheck(MPI_Bcast(buf, (int)count, MPI_BYTE, root, c->mpi), c, "MPI_Bcast");
    LEAVE();
#else
    (void)buf;
    (void)count;
    (void)root;
#endif
}

void comm_host_all_to_all_v(comm *c, const float *send, const size_t *send_counts,
                       const size_t *send_displs, float *recv, const size_t *recv_counts,
                       const size_t *recv_displs) {
    if (c->size == 1) {
        memmove(recv + recv_displs[0], send + send_displs[0], send_counts[0] * sizeof(float));
        return;
    }
#ifdef MT_HAVE_MPI
    int n = c->size;
    int *sc = mallocCheck(4 * sizeof(int) * n), *sd = sc + n, *rc = sd + n, *rd = rc + n;
    for (int i = 0; i < n; i++) {
        sc[i] = (int)send_counts[i];
        sd[i] = (int)send_displs[i];
        rc[i] = (int)recv_counts[i];
        rd[i] = (int)recv_displs[i];
    }
    ENTER(c, "all_to_all_v");
    mpiCheck(MPI_Alltoallv(send, sc, sd, MPI_FLOAT, recv, rc, rd, MPI_FLOAT, c->mpi), c,
             "MPI_Alltoallv");
    LEAVE();
    free(sc);
#else
    (void)recv_counts;
#endif
}

struct comm_request {
    comm *c;
    int nreq;
    const char *what; /* the call a watchdog report names */
    void *owned;      /* freed by comm_wait (comm_host_isend_owned's copy) */
#ifdef MT_HAVE_MPI
    MPI_Request req[8];
#endif
};

comm_request *comm_host_iall_reduce(comm *c, float *buf, size_t count) {
    comm_request *r = callocCheck(1, sizeof(comm_request));
    r->c = c;
    r->what = "all_reduce (bucket wait)";
    if (c->size == 1 || count == 0) return r;
#ifdef MT_HAVE_MPI
    const size_t chunk = (size_t)1 << 28; /* int counts; 8 chunks = 2^31 floats max */
    mtCheck(count <= 8 * chunk, "iall_reduce buffer too large");
    for (size_t off = 0; off < count; off += chunk) {
        size_t n = count - off > chunk ? chunk : count - off;
        mpiCheck(MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)n, MPI_FLOAT, MPI_SUM, c->mpi,
                                &r->req[r->nreq++]), c, "MPI_Iallreduce");
    }
#else
    (void)buf;
#endif
    return r;
}

comm_request *comm_host_iall_gather(comm *c, const float *send, float *recv, size_t send_count) {
    comm_request *r = callocCheck(1, sizeof(comm_request));
    r->c = c;
    r->what = "all_gather (ZeRO-3 prefetch wait)";
    if (c->size == 1) {
        if (recv != send) memmove(recv, send, send_count * sizeof(float));
        return r;
    }
#ifdef MT_HAVE_MPI
    mtCheck(send_count < (1u << 31), "iall_gather block too large for MPI int counts");
    mpiCheck(MPI_Iallgather(send, (int)send_count, MPI_FLOAT, recv, (int)send_count, MPI_FLOAT,
                            c->mpi, &r->req[r->nreq++]), c, "MPI_Iallgather");
#else
    (void)recv;
#endif
    return r;
}

int comm_test(comm_request *r) {
    if (!r || r->nreq == 0) return 1;
#ifdef MT_HAVE_MPI
    int done = 0;
    mpiCheck(MPI_Testall(r->nreq, r->req, &done, MPI_STATUSES_IGNORE), r->c, "MPI_Testall");
    return done;
#else
    return 1;
#endif
}

void comm_wait(comm_request *r) {
    if (!r) return;
#ifdef MT_HAVE_MPI
    if (r->nreq) {
        ENTER(r->c, r->what);
        mpiCheck(MPI_Waitall(r->nreq, r->req, MPI_STATUSES_IGNORE), r->c, "MPI_Waitall");
        LEAVE();
    }
#endif
    free(r->owned);
    free(r);
}

comm_request *comm_host_isend_owned(comm *c, float *host_buf, size_t count, int peer, int tag) {
    if (c->size == 1) comm_abort(MT_EXIT_ERROR, "isend on a single-rank group '%s'", c->name);
    comm_request *r = callocCheck(1, sizeof(comm_request));
    r->c = c;
    r->what = "isend (wait)";
    r->owned = host_buf;
#ifdef MT_HAVE_MPI
    mtCheck(count <= (size_t)2147483647, "isend message too large");
    mpiCheck(MPI_Isend(host_buf, (int)count, MPI_FLOAT, peer, tag, c->mpi, &r->req[r->nreq++]),
             c, "MPI_Isend");
#else
    (void)count, (void)peer, (void)tag;
#endif
    return r;
}

void comm_host_send(comm *c, const float *buf, size_t count, int peer, int tag) {
    if (c->size == 1) comm_abort(MT_EXIT_ERROR, "send on a single-rank group '%s'", c->name);
#ifdef MT_HAVE_MPI
    ENTER(c, "send");
    mpiCheck(MPI_Send(buf, (int)count, MPI_FLOAT, peer, tag, c->mpi), c, "MPI_Send");
    LEAVE();
#else
    (void)buf, (void)count, (void)peer, (void)tag;
#endif
}

void comm_host_recv(comm *c, float *buf, size_t count, int peer, int tag) {
    if (c->size == 1) comm_abort(MT_EXIT_ERROR, "recv on a single-rank group '%s'", c->name);
#ifdef MT_HAVE_MPI
    ENTER(c, "recv");
    mpiCheck(MPI_Recv(buf, (int)count, MPI_FLOAT, peer, tag, c->mpi, MPI_STATUS_IGNORE), c,
             "MPI_Recv");
    LEAVE();
#else
    (void)buf, (void)count, (void)peer, (void)tag;
#endif
}

void comm_host_sendrecv(comm *c, const float *sendbuf, size_t send_count, int to, float *recvbuf,
                   size_t recv_count, int from, int tag) {
    if (c->size == 1) comm_abort(MT_EXIT_ERROR, "sendrecv on a single-rank group '%s'", c->name);
#ifdef MT_HAVE_MPI
    ENTER(c, "sendrecv");
    mpiCheck(MPI_Sendrecv(sendbuf, (int)send_count, MPI_FLOAT, to, tag, recvbuf, (int)recv_count,
                          MPI_FLOAT, from, tag, c->mpi, MPI_STATUS_IGNORE), c, "MPI_Sendrecv");
    LEAVE();
#else
    (void)sendbuf, (void)send_count, (void)to, (void)recvbuf, (void)recv_count, (void)from, (void)tag;
#endif
}

void comm_barrier(comm *c) {
    if (c->size == 1) return;
#ifdef MT_HAVE_MPI
    ENTER(c, "barrier");
    mpiCheck(MPI_Barrier(c->mpi), c, "MPI_Barrier");
    LEAVE();
#endif
}
