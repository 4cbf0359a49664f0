/*
 * parallel/pp.c — 1F1B and GPipe schedules (see parallel/pp.h).
 *
 * Every forward and backward goes through fwd()/bwd(), which also stamp the microbatch's span
 * when the caller asked for a trace: the measured pipeline picture (report/svg_pipeline.c).
 */
#include "parallel/pp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/timer.h"

typedef struct {
    comm *pp;
    const pp_stage_fns *f;
    int s, P;
    float *grad_in; // (count) gradient received from the next stage
} pipe;

/* Stage forward / backward of microbatch i, timed into the trace when there is one. */
static const float *fwd(const pp_stage_fns *f, int i) {
    if (!f->trace) return f->forward(f->user, i);
    f->trace[i].f0 = timer_unix();
    const float *out = f->forward(f->user, i);
    f->trace[i].f1 = timer_unix();
    return out;
}
static const float *bwd(const pp_stage_fns *f, int i, const float *dout) {
    if (!f->trace) return f->backward(f->user, i, dout);
    f->trace[i].b0 = timer_unix();
    const float *g = f->backward(f->user, i, dout);
    f->trace[i].b1 = timer_unix();
    return g;
}

static int first(const pipe *p) { return p->s == 0; }
static int last(const pipe *p) { return p->s == p->P - 1; }

static void recv_forward(pipe *p, int i) {
    if (!first(p)) comm_recv(p->pp, p->f->input_buf(p->f->user, i), p->f->count, p->s - 1, 0);
}
static void send_forward(pipe *p, const float *out) {
    if (!last(p)) comm_send(p->pp, out, p->f->count, p->s + 1, 0);
}
static void recv_backward(pipe *p) {
    if (!last(p)) comm_recv(p->pp, p->grad_in, p->f->count, p->s + 1, 0);
}
static void send_backward(pipe *p, const float *g) {
    if (!first(p)) comm_send(p->pp, g, p->f->count, p->s - 1, 0);
}

void pp_run(comm *pp, pp_schedule schedule, int M, const pp_stage_fns *f, double *idle_s) {
    pipe p = {pp, f, comm_rank(pp), comm_size(pp), NULL};
    p.grad_in = f->grad_buf ? f->grad_buf : mallocCheck(f->count * sizeof(float));
    double c0 = comm_seconds();
    const float *dout = last(&p) ? NULL : p.grad_in;
    if (schedule == PP_GPIPE) {
        for (int i = 0; i < M; i++) {
            recv_forward(&p, i);
            send_forward(&p, fwd(f, i));
        }
        for (int i = 0; i < M; i++) {
            recv_backward(&p);
            send_backward(&p, bwd(f, i, dout));
        }
    } else {
        int warm = pp_warmup_forwards(PP_1F1B, p.P, p.s, M), rem = M - warm;
        int fi = 0, bi = 0;
        for (int i = 0; i < warm; i++, fi++) { /* warm-up forwards */
            recv_forward(&p, fi);
            send_forward(&p, fwd(f, fi));
        }
        if (rem > 0) recv_forward(&p, fi);
        for (int i = 0; i < rem; i++) { /* steady state: one forward, one backward */
            const float *out = fwd(f, fi++);
            if (!last(&p)) /* send_forward_recv_backward */
                comm_sendrecv(pp, out, f->count, p.s + 1, p.grad_in, f->count, p.s + 1, 0);
            const float *g = bwd(f, bi++, dout);
            if (i == rem - 1) {
                send_backward(&p, g);
            } else if (!first(&p)) { /* send_backward_recv_forward */
                comm_sendrecv(pp, g, f->count, p.s - 1, f->input_buf(f->user, fi), f->count,
                              p.s - 1, 0);
            }
        }
        for (int i = 0; i < warm; i++) { /* cool-down backwards */
            recv_backward(&p);
            send_backward(&p, bwd(f, bi++, dout));
        }
    }
    if (idle_s) *idle_s = comm_seconds() - c0;
    if (!f->grad_buf) free(p.grad_in);
}

int pp_warmup_forwards(pp_schedule schedule, int P, int stage, int M) {
    if (schedule == PP_GPIPE) return M;
    return P - stage - 1 < M ? P - stage - 1 : M;
}

int pp_slots_needed(pp_schedule schedule, int P, int stage, int M) {
    if (schedule == PP_GPIPE) return M;
    return M < P - stage ? M : P - stage;
}

double pp_bubble_fraction(int P, int M) { return (double)(P - 1) / (M + P - 1); }

int pp_split_layers(int n_layer, int P, const char *spec, int *begin, char *err, size_t errlen) {
    begin[0] = 0;
    if (!spec || !spec[0]) {
        if (n_layer < P) {
            snprintf(err, errlen, "pp %d exceeds the %d layers (every stage needs a layer)", P,
                     n_layer);
            return -1;
        }
        for (int s = 0; s < P; s++) begin[s + 1] = begin[s] + n_layer / P + (s < n_layer % P);
        return 0;
    }
    const char *q = spec;
    for (int s = 0; s < P; s++) {
        char *end;
        long v = strtol(q, &end, 10);
        if (end == q || v < 1) {
            snprintf(err, errlen, "pp_layers '%s': expected %d positive counts separated by commas",
                     spec, P);
            return -1;
        }
        begin[s + 1] = begin[s] + (int)v;
        q = end;
        if (s == P - 1 && *q == ',') {
            snprintf(err, errlen, "pp_layers '%s' lists more than pp = %d stages", spec, P);
            return -1;
        }
        if (s < P - 1) {
            if (*q != ',') {
                snprintf(err, errlen, "pp_layers '%s' lists fewer than pp = %d stages", spec, P);
                return -1;
            }
            q++;
        }
    }
    if (*q != 0) {
        snprintf(err, errlen, "pp_layers '%s': unexpected '%s' (expected %d positive counts "
                 "separated by commas)", spec, q, P);
        return -1;
    }
    if (begin[P] != n_layer) {
        snprintf(err, errlen, "pp_layers '%s' sums to %d, but the model has %d layers", spec,
                 begin[P], n_layer);
        return -1;
    }
    return 0;
}
