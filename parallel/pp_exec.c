/*
 * parallel/pp_exec.c — run a stage's order of passes (pp_op list) with tagged, non-blocking
 * sends: the executor behind the interleaved and ZB-H1 drivers (parallel/pp_interleaved.c,
 * parallel/pp_zb.c).
 *
 * Why not 1F1B's paired Sendrecv: with chunks and split backwards a stage's next receive is not
 * always from the neighbour it just sent to, and two blocking sends facing each other deadlock
 * once messages are too large for MPI's eager protocol. Here every send is a copy handed to
 * MPI_Isend (comm_isend) and only receives block; each message is tagged by the (microbatch,
 * chunk) it belongs to, so it lands in the right buffer whatever order the neighbour sent in.
 * Then any set of per-stage orders consistent with the dependencies (a forward needs the
 * previous chunk's output, a backward the next chunk's input gradient) runs to completion.
 *
 * Topology: global chunk g = c·P + s. Its forward input comes from stage s-1 (chunk c), or for
 * s = 0 from stage P-1 (chunk c-1); g = 0 reads the data. Its output goes the other way round;
 * the model's last chunk (g = v·P - 1) starts the backward from its loss.
 */
#include "parallel/pp_impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "core/check.h"

/* MPI guarantees tags up to 32767 (MPI_TAG_UB); pp_schedule_check keeps 2·v·M below it. */
static int tag_of(const pp_pipe *p, int dir, int micro, int chunk) {
    int t = 1 + 2 * (chunk * p->M + micro) + dir;
    mtCheck(t <= 32767, "pipeline message tag out of range (too many microbatches x chunks)");
    return t;
}

/* The sends in flight, and the thread that keeps them moving. MPI moves a large message only
 * inside MPI calls of BOTH sides (unless a single-copy mechanism lets the receiver pull it), and
 * a stage that has just sent goes on computing for a whole pass without one: the receiver would
 * wait that pass out, one pass per hop, which is the bubble the schedule meant to remove. So
 * while sends are in flight a helper thread calls comm_test on them every 50 µs (MPI_THREAD_
 * MULTIPLE; without it the sends progress only when this stage next calls MPI). The helper only
 * tests; the main thread frees finished requests (comm_wait also feeds the watchdog's clock). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    comm_request **req;
    char *finished; /* (cap) set by the helper when req[j] has completed */
    int n, cap, stop, helper;
    pthread_t th;
} sends;

static void *progress_main(void *arg) {
    sends *q = arg;
    pthread_mutex_lock(&q->mu);
    while (!q->stop) {
        int open = 0;
        for (int j = 0; j < q->n; j++)
            if (!q->finished[j]) open += !(q->finished[j] = (char)comm_test(q->req[j]));
        if (!open) {
            pthread_cond_wait(&q->cv, &q->mu);
            continue;
        }
        pthread_mutex_unlock(&q->mu);
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&q->mu);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

static void sends_init(sends *q, int cap) {
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->req = mallocCheck((size_t)cap * sizeof(comm_request *));
    q->finished = callocCheck((size_t)cap, 1);
    q->n = 0, q->cap = cap, q->stop = 0;
    q->helper = comm_thread_multiple() && pthread_create(&q->th, NULL, progress_main, q) == 0;
}

/* Start a send; free the ones already finished. */
static void post(sends *q, comm_request *r) {
    pthread_mutex_lock(&q->mu);
    int k = 0;
    for (int j = 0; j < q->n; j++) {
        if (q->finished[j] || (!q->helper && comm_test(q->req[j]))) {
            comm_wait(q->req[j]);
        } else {
            q->req[k] = q->req[j];
            q->finished[k++] = 0;
        }
    }
    q->n = k;
    mtCheck(q->n < q->cap, "pipeline executor: more sends in flight than passes");
    q->req[q->n] = r;
    q->finished[q->n++] = 0;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

/* Stop the helper and finish every send. */
static void sends_finish(sends *q) {
    if (q->helper) {
        pthread_mutex_lock(&q->mu);
        q->stop = 1;
        pthread_cond_signal(&q->cv);
        pthread_mutex_unlock(&q->mu);
        pthread_join(q->th, NULL);
    }
    for (int j = 0; j < q->n; j++) comm_wait(q->req[j]);
    free(q->req);
    free(q->finished);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
}

void pp_execute(pp_pipe *p, const pp_op *ops, int n) {
    const pp_stage_fns *f = p->f;
    int P = p->P, s = p->s, v = p->v, prev = (s + P - 1) % P, next = (s + 1) % P;
    sends q;
    sends_init(&q, n + 1);
    for (int k = 0; k < n; k++) {
        pp_op o = ops[k];
        int g = o.chunk * P + s, first = g == 0, last = g == v * P - 1;
        int up = s == 0 ? o.chunk - 1 : o.chunk;   /* chunk index of the previous global chunk */
        int down = s == P - 1 ? o.chunk + 1 : o.chunk; /* ... and of the next one */
        if (o.kind == 'F') {
            if (!first)
                comm_recv_mpi(p->pp, f->input_buf(f->user, o.micro, o.chunk), f->count, prev,
                              tag_of(p, 0, o.micro, o.chunk));
            const float *out = pp_pass_forward(p, o.micro, o.chunk);
            if (!last) post(&q, comm_isend(p->pp, out, f->count, next, tag_of(p, 0, o.micro, down)));
        } else if (o.kind == 'B') {
            if (!last)
                comm_recv_mpi(p->pp, p->grad_in, f->count, next, tag_of(p, 1, o.micro, o.chunk));
            const float *g_in = pp_pass_backward(p, o.micro, o.chunk, last ? NULL : p->grad_in);
            if (!first) post(&q, comm_isend(p->pp, g_in, f->count, prev, tag_of(p, 1, o.micro, up)));
        } else {
            pp_pass_weight(p, o.micro, o.chunk);
        }
    }
    sends_finish(&q);
}
