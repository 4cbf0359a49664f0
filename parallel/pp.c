/*
 * parallel/pp.c — what every pipeline schedule shares (see parallel/pp.h): pp_run's dispatch to
 * the schedule's driver (parallel/pp_1f1b.c, pp_interleaved.c, pp_zb.c), the timed pass calls,
 * the schedules' closed forms (warm-up, slots, idle fraction), the slot table, the layout checks
 * and the layer split.
 *
 * Every pass goes through pp_pass_*, which also stamp the pair's span when the caller asked for
 * a trace (the measured pipeline picture, report/svg_pipeline.c) and count activations in flight.
 */
#include "parallel/pp_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/timer.h"

static const char *const NAMES[] = {"1f1b", "gpipe", "interleaved", "zb-h1"};

int pp_schedule_parse(const char *name, pp_schedule *out) {
    for (int i = 0; i < 4; i++)
        if (strcmp(name, NAMES[i]) == 0) {
            *out = (pp_schedule)i;
            return 0;
        }
    return -1;
}

const char *pp_schedule_name(pp_schedule s) { return (unsigned)s < 4 ? NAMES[s] : "?"; }

int pp_schedule_check(pp_schedule s, int n_layer, int P, int v, int M, const char *pp_layers,
                      char *err, size_t errlen) {
    if (s != PP_INTERLEAVED) return 0;
    if (v < 2) {
        snprintf(err, errlen, "pp_schedule = interleaved needs virtual_stages >= 2 (got %d); "
                 "with one chunk per stage it is 1f1b", v);
        return -1;
    }
    if (n_layer % (P * v) != 0) {
        snprintf(err, errlen, "pp_schedule = interleaved: %d layers do not split into pp x "
                 "virtual_stages = %d x %d = %d equal chunks", n_layer, P, v, P * v);
        return -1;
    }
    if (M % P != 0) {
        snprintf(err, errlen, "pp_schedule = interleaved: microbatches (%d) must be a multiple "
                 "of pp (%d)", M, P);
        return -1;
    }
    if (pp_layers && pp_layers[0]) {
        snprintf(err, errlen, "pp_schedule = interleaved splits the layers into equal chunks; "
                 "pp_layers ('%s') is for 1f1b, gpipe and zb-h1", pp_layers);
        return -1;
    }
    if (2 * v * M + 1 > 32767) {
        snprintf(err, errlen, "pp_schedule = interleaved: virtual_stages x microbatches = %d is "
                 "more than the pipeline's message tags can name (16383)", v * M);
        return -1;
    }
    return 0;
}

/* ---- the passes ------------------------------------------------------------------------------ */

static pp_span *span_of(pp_pipe *p, int i, int c) {
    return p->f->trace ? &p->f->trace[(size_t)c * p->M + i] : NULL;
}

const float *pp_pass_forward(pp_pipe *p, int i, int c) {
    pp_span *sp = span_of(p, i, c);
    if (sp) sp->f0 = timer_unix();
    const float *out = p->f->forward(p->f->user, i, c);
    if (sp) sp->f1 = timer_unix();
    if (++p->live > p->peak) p->peak = p->live;
    return out;
}

const float *pp_pass_backward(pp_pipe *p, int i, int c, const float *dout) {
    pp_span *sp = span_of(p, i, c);
    if (sp) sp->b0 = timer_unix();
    const float *g = p->f->backward(p->f->user, i, c, dout);
    if (sp) sp->b1 = timer_unix();
    if (!p->f->weight) p->live--; /* the whole backward ran: the activation is free */
    return g;
}

void pp_pass_weight(pp_pipe *p, int i, int c) {
    pp_span *sp = span_of(p, i, c);
    if (sp) sp->w0 = timer_unix();
    p->f->weight(p->f->user, i, c);
    if (sp) sp->w1 = timer_unix();
    p->live--;
}

void pp_run(comm *pp, pp_schedule schedule, int M, const pp_stage_fns *f, pp_stats *st) {
    pp_pipe p = {pp, f, comm_rank(pp), comm_size(pp), M, f->chunks > 1 ? f->chunks : 1, NULL, 0, 0};
    mtCheck(schedule == PP_INTERLEAVED || p.v == 1, "model chunks need the interleaved schedule");
    mtCheck(schedule == PP_ZBH1 || f->weight == NULL,
            "a split backward (weight pass) needs the zb-h1 schedule");
    p.grad_in = f->grad_buf ? f->grad_buf : mallocCheck(f->count * sizeof(float));
    double c0 = comm_seconds();
    switch (schedule) {
    case PP_GPIPE: pp_drive_gpipe(&p); break;
    case PP_INTERLEAVED: pp_drive_interleaved(&p); break;
    case PP_ZBH1: pp_drive_zbh1(&p); break;
    default: pp_drive_1f1b(&p); break;
    }
    if (st) {
        st->idle_s = comm_seconds() - c0;
        st->peak_in_flight = p.peak;
    }
    if (!f->grad_buf) free(p.grad_in);
}

/* ---- closed forms ---------------------------------------------------------------------------- */

int pp_stage_order(pp_schedule s, int P, int stage, int M, int v, pp_op *out) {
    switch (s) {
    case PP_GPIPE: return pp_order_gpipe(M, out);
    case PP_INTERLEAVED: return pp_order_interleaved(P, stage, M, v, out);
    case PP_ZBH1: return pp_order_zbh1(P, stage, M, out);
    default: return pp_order_1f1b(P, stage, M, out);
    }
}

int pp_warmup_forwards(pp_schedule schedule, int P, int stage, int M, int v) {
    if (schedule == PP_GPIPE) return M;
    if (schedule == PP_INTERLEAVED) {
        int w = 2 * (P - stage - 1) + (v - 1) * P;
        return M == P || w > v * M ? v * M : w;
    }
    return P - stage - 1 < M ? P - stage - 1 : M;
}

int pp_slots_needed(pp_schedule schedule, int P, int stage, int M, int v) {
    switch (schedule) {
    case PP_GPIPE: return M;
    case PP_INTERLEAVED: {
        int w = pp_warmup_forwards(schedule, P, stage, M, v);
        return w + 1 < v * M ? w + 1 : v * M;
    }
    case PP_ZBH1: return M < P ? M : P;
    default: return M < P - stage ? M : P - stage;
    }
}

void pp_slot_table(pp_schedule schedule, int P, int stage, int M, int v, int *slot) {
    if (schedule != PP_INTERLEAVED) v = 1;
    pp_op *ops = mallocCheck((size_t)3 * v * M * sizeof(pp_op));
    int n = pp_stage_order(schedule, P, stage, M, v, ops), S = pp_slots_needed(schedule, P, stage, M, v);
    char *used = callocCheck((size_t)S, 1);
    char end = schedule == PP_ZBH1 ? 'W' : 'B'; /* the pass that frees the pair's activation */
    for (int k = 0; k < n; k++) {
        int *sl = &slot[(size_t)ops[k].chunk * M + ops[k].micro];
        if (ops[k].kind == 'F') {
            int j = 0;
            while (j < S && used[j]) j++;
            mtCheck(j < S, "pipeline schedule holds more activations than its bound");
            used[j] = 1, *sl = j;
        } else if (ops[k].kind == end) {
            used[*sl] = 0;
        }
    }
    free(used);
    free(ops);
}

double pp_bubble_fraction(int P, int M) { return (double)(P - 1) / (M + P - 1); }

double pp_idle_formula(pp_schedule s, int P, int M, int v, double t_f, double t_b, double t_w) {
    if (s == PP_INTERLEAVED) return (double)(P - 1) / ((double)v * M + P - 1);
    if (s == PP_ZBH1) {
        double bubble = (P - 1) * (t_f + t_b - t_w);
        return bubble / (M * (t_f + t_b + t_w) + bubble);
    }
    return pp_bubble_fraction(P, M);
}

/* ---- layer split ----------------------------------------------------------------------------- */

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
