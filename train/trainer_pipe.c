/*
 * train/trainer_pipe.c — one optimizer step through the pipeline (pp > 1): the stage callbacks
 * parallel/pp.c's schedules drive (input, forward, backward, and zb-h1's weight half), the
 * measured timeline of a step into run.db (event pp_timeline), and the tied-embedding check.
 * The rest of the training loop is train/trainer.c.
 */
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"
#include "core/events.h"
#include "core/timer.h"
#include "ops/ops.h"
#include "parallel/comm.h"
#include "parallel/pp.h"

/* One optimizer step's microbatches through the pipeline (parallel/pp.c drives the order). */
typedef struct {
    trainer *tr;
    int step, *inp, *tgt;
    double loss_sum; /* sum over microbatches of the mean token loss (last stage) */
} pipe_ctx;

/* The activation slot of (microbatch, chunk) on this stage (parallel/pp.h: pp_slot_table). */
static int pipe_slot(const pipe_ctx *p, int micro, int chunk) {
    return p->tr->pp_slot[(size_t)chunk * p->tr->grad_accum + micro];
}

static float *pipe_input(void *user, int micro, int chunk) {
    pipe_ctx *p = user;
    return gpt_stage_input(&p->tr->model, pipe_slot(p, micro, chunk));
}

static const float *pipe_forward(void *user, int micro, int chunk) {
    pipe_ctx *p = user;
    trainer *tr = p->tr;
    const mt_config *c = &tr->cfg;
    gpt_model *m = &tr->model;
    int B = c->batch_size, T = c->seq_len, slot = pipe_slot(p, micro, chunk);
    int embeds = m->first && chunk == 0, heads = m->last && chunk == tr->chunks - 1;
    if (embeds || heads) {
        uint64_t seq = (uint64_t)p->step * c->global_batch +
                       ((uint64_t)micro * tr->mesh->dp + tr->mesh->dp_rank) * B;
        trainer_load_batch(tr, &tr->train_dl, seq, B, p->inp, p->tgt);
    }
    int counted = 0;
    double sum = gpt_chunk_forward(m, slot, chunk, p->inp, p->tgt, B, T / tr->mesh->cp,
                                   1.0f / ((float)c->global_batch * T), &counted);
    if (heads && counted) p->loss_sum += sum / counted;
    return gpt_chunk_output(m, slot);
}

/* The whole backward, or with zb-h1 its input half B (pipe_weight runs W later). */
static const float *pipe_backward(void *user, int micro, int chunk, const float *dout) {
    pipe_ctx *p = user;
    int slot = pipe_slot(p, micro, chunk);
    if (p->tr->schedule == PP_ZBH1) return gpt_chunk_backward_b(&p->tr->model, slot, chunk, dout);
    return gpt_chunk_backward(&p->tr->model, slot, chunk, dout);
}

static void pipe_weight(void *user, int micro, int chunk) {
    pipe_ctx *p = user;
    gpt_chunk_backward_w(&p->tr->model, pipe_slot(p, micro, chunk), chunk);
}

/* t seconds as milliseconds after t0, rounded to the microsecond. */
static double ms_after(double t, double t0) { return round((t - t0) * 1e6) / 1e3; }

/* The measured pipeline timeline of one step on this stage into run.db (event pp_timeline,
 * core/events.h): each (microbatch, chunk)'s forward, backward (zb-h1: B) and, with zb-h1, W
 * as [start, end] ms after t0, pair c·M + i at index 2·(c·M + i). */
static void log_pp_timeline(trainer *tr, int step, double t0, const pp_span *sp) {
    int n = tr->grad_accum * tr->chunks, zb = tr->schedule == PP_ZBH1;
    double *f = mallocCheck(6 * (size_t)n * sizeof(double)), *b = f + 2 * n, *w = f + 4 * n;
    for (int i = 0; i < n; i++) {
        f[2 * i] = ms_after(sp[i].f0, t0), f[2 * i + 1] = ms_after(sp[i].f1, t0);
        b[2 * i] = ms_after(sp[i].b0, t0), b[2 * i + 1] = ms_after(sp[i].b1, t0);
        w[2 * i] = ms_after(sp[i].w0, t0), w[2 * i + 1] = ms_after(sp[i].w1, t0);
    }
    cJSON *d = ev_detail();
    ev_num(d, EVK_STEP, step);
    ev_num(d, EVK_STAGE, tr->mesh->pp_rank);
    ev_num(d, EVK_STAGES, tr->mesh->pp);
    ev_str(d, EVK_SCHEDULE, pp_schedule_name(tr->schedule));
    ev_num(d, EVK_CHUNKS, tr->chunks);
    ev_num(d, EVK_T0, t0);
    ev_numv(d, EVK_FORWARD_MS, f, 2 * n);
    ev_numv(d, EVK_BACKWARD_MS, b, 2 * n);
    if (zb) ev_numv(d, EVK_WEIGHT_MS, w, 2 * n);
    ev_log(tr->db, tr->run_id, EV_PP_TIMELINE, tr->mesh->rank, d);
    free(f);
}

/* Debug check (MINITRAIN_PP_CHECK=1): the first and last pipeline stages hold copies of the
 * tied embedding; after every optimizer step they must be identical. Logs the largest
 * difference, seen from the first stage. */
void trainer_pipe_tied_check(trainer *tr) {
    const gpt_model *m = &tr->model;
    if (m->cfg.pp == 1 || m->i_wte < 0) return;
    size_t n = m->tensors[m->i_wte].numel;
    float *mine = mallocCheck(n * sizeof(float)), *neg = mallocCheck(n * sizeof(float));
    ops_copy_d2h(mine, m->wte, n * sizeof(float)); /* wte is device memory */
    for (size_t j = 0; j < n; j++) neg[j] = -mine[j];
    comm_all_reduce(tr->mesh->embed_group, mine, n, COMM_MAX);
    comm_all_reduce(tr->mesh->embed_group, neg, n, COMM_MAX);
    float spread = 0;
    for (size_t j = 0; j < n; j++)
        if (mine[j] + neg[j] > spread) spread = mine[j] + neg[j];
    free(mine);
    free(neg);
    if (m->first && tr->mesh->tp_rank == 0 && tr->mesh->dp_rank == 0)
        printf("pp-check: step %d: the two copies of wte differ by at most %g\n", tr->step,
               spread);
}

/* Step s's microbatches through the pipeline (pp > 1; parallel/pp.c drives the order), the
 * measured timeline of the steps that log (event pp_timeline), and the tied embedding's two
 * gradient copies summed. Returns the step's loss sum over microbatches (every stage gets it). */
double trainer_pipe_step(trainer *tr, int s, int end, int *inp, int *tgt) {
    const mt_config *c = &tr->cfg;
    const mesh *ms = tr->mesh;
    gpt_model *m = &tr->model;
    int B = c->batch_size, T = c->seq_len;
    pipe_ctx pc = {tr, s, inp, tgt, 0};
    /* this rank's positions: 1/cp of each sequence, and with sp 1/tp of that */
    size_t act = (size_t)B * (T / ms->cp / (c->sp ? c->tp : 1)) * c->d_model;
    float *grad_buf = ops_alloc(act * sizeof(float), "pp grad in");
    pp_stage_fns fns = {&pc, act, tr->chunks, pipe_input, pipe_forward,
                        pipe_backward, tr->schedule == PP_ZBH1 ? pipe_weight : NULL, grad_buf,
                        NULL};
    /* the measured timeline of the steps that log (event pp_timeline, one per stage) */
    int traced = ms->tp_rank == 0 && ms->dp_rank == 0 &&
                 ((s + 1) % c->log_every == 0 || s + 1 == end);
    if (traced) fns.trace = callocCheck((size_t)tr->grad_accum * tr->chunks, sizeof(pp_span));
    double pp_t0 = timer_unix();
    m->grads_ready = c->zero >= 2 ? trainer_grads_ready : NULL; /* ZeRO-2/3: each block's backward */
    m->grads_ready_user = tr;
    pp_stats st;
    pp_run(ms->pp_group, tr->schedule, tr->grad_accum, &fns, &st);
    m->grads_ready = NULL;
    tr->last_idle_s = st.idle_s;
    tr->last_in_flight = st.peak_in_flight;
    if (traced) log_pp_timeline(tr, s + 1, pp_t0, fns.trace);
    free(fns.trace);
    ops_free(grad_buf);
    comm_all_reduce_f64(ms->pp_group, &pc.loss_sum, 1, COMM_SUM);
    /* the two copies of the tied embedding: sum their gradients so they stay equal */
    if (m->i_wte >= 0)
        comm_all_reduce(ms->embed_group, m->dwte, m->tensors[m->i_wte].numel, COMM_SUM);
    return pc.loss_sum;
}
