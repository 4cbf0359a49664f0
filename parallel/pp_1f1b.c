/*
 * parallel/pp_1f1b.c — the 1F1B and GPipe drivers (see parallel/pp.h).
 *
 * Blocking point-to-point calls; the steady state pairs each send with the receive from the same
 * neighbour in one MPI_Sendrecv (send_forward_recv_backward, send_backward_recv_forward), which
 * is what makes 1F1B's order deadlock-free without non-blocking sends.
 */
#include "parallel/pp_impl.h"

static int first(const pp_pipe *p) { return p->s == 0; }
static int last(const pp_pipe *p) { return p->s == p->P - 1; }

static void recv_forward(pp_pipe *p, int i) {
    if (!first(p)) comm_recv(p->pp, p->f->input_buf(p->f->user, i, 0), p->f->count, p->s - 1, 0);
}
static void send_forward(pp_pipe *p, const float *out) {
    if (!last(p)) comm_send(p->pp, out, p->f->count, p->s + 1, 0);
}
static void recv_backward(pp_pipe *p) {
    if (!last(p)) comm_recv(p->pp, p->grad_in, p->f->count, p->s + 1, 0);
}
static void send_backward(pp_pipe *p, const float *g) {
    if (!first(p)) comm_send(p->pp, g, p->f->count, p->s - 1, 0);
}

void pp_drive_gpipe(pp_pipe *p) {
    const float *dout = last(p) ? NULL : p->grad_in;
    for (int i = 0; i < p->M; i++) {
        recv_forward(p, i);
        send_forward(p, pp_pass_forward(p, i, 0));
    }
    for (int i = 0; i < p->M; i++) {
        recv_backward(p);
        send_backward(p, pp_pass_backward(p, i, 0, dout));
    }
}

void pp_drive_1f1b(pp_pipe *p) {
    const pp_stage_fns *f = p->f;
    const float *dout = last(p) ? NULL : p->grad_in;
    int warm = pp_warmup_forwards(PP_1F1B, p->P, p->s, p->M, 1), rem = p->M - warm;
    int fi = 0, bi = 0;
    for (int i = 0; i < warm; i++, fi++) { /* warm-up forwards */
        recv_forward(p, fi);
        send_forward(p, pp_pass_forward(p, fi, 0));
    }
    if (rem > 0) recv_forward(p, fi);
    for (int i = 0; i < rem; i++) { /* steady state: one forward, one backward */
        const float *out = pp_pass_forward(p, fi++, 0);
        if (!last(p)) /* send_forward_recv_backward */
            comm_sendrecv(p->pp, out, f->count, p->s + 1, p->grad_in, f->count, p->s + 1, 0);
        const float *g = pp_pass_backward(p, bi++, 0, dout);
        if (i == rem - 1) {
            send_backward(p, g);
        } else if (!first(p)) { /* send_backward_recv_forward */
            comm_sendrecv(p->pp, g, f->count, p->s - 1, f->input_buf(f->user, fi, 0), f->count,
                          p->s - 1, 0);
        }
    }
    for (int i = 0; i < warm; i++) { /* cool-down backwards */
        recv_backward(p);
        send_backward(p, pp_pass_backward(p, bi++, 0, dout));
    }
}

int pp_order_gpipe(int M, pp_op *out) {
    int n = 0;
    for (int i = 0; i < M; i++) out[n++] = (pp_op){'F', i, 0};
    for (int i = 0; i < M; i++) out[n++] = (pp_op){'B', i, 0};
    return n;
}

int pp_order_1f1b(int P, int s, int M, pp_op *out) {
    int warm = pp_warmup_forwards(PP_1F1B, P, s, M, 1), n = 0, fi = 0, bi = 0;
    for (int i = 0; i < warm; i++) out[n++] = (pp_op){'F', fi++, 0};
    for (int i = 0; i < M - warm; i++) {
        out[n++] = (pp_op){'F', fi++, 0};
        out[n++] = (pp_op){'B', bi++, 0};
    }
    for (int i = 0; i < warm; i++) out[n++] = (pp_op){'B', bi++, 0};
    return n;
}
