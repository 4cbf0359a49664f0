/*
 * train/trainer.c — the training loop (see train/trainer.h): one optimizer step's forward,
 * backward, gradient reduction and update, eval, the hooks, and gathering the sharded model and
 * optimizer state. Building the trainer (layout, device, tokenizer, data, model memory, run.db)
 * is train/trainer_setup.c.
 */
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/events.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/comm.h"
#include "parallel/cp.h"
#include "parallel/pp.h"
#include "model/flops.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "ops/peak.h"
#include "model/sample.h"

void trainer_add_hook(trainer *tr, const char *name, int every, trainer_hook_fn fn, void *user) {
    mtCheck(tr->n_hooks < TRAINER_MAX_HOOKS, "too many trainer hooks");
    tr->hooks[tr->n_hooks].name = name;
    tr->hooks[tr->n_hooks].every = every;
    tr->hooks[tr->n_hooks].fn = fn;
    tr->hooks[tr->n_hooks].user = user;
    tr->n_hooks++;
}

void trainer_set_microbatch(trainer *tr, trainer_micro_fn fn, void *user) {
    mtCheck(fn == NULL || tr->mesh->pp == 1,
            "a microbatch function replaces the pass of a non-pipelined layout only (pp = 1)");
    tr->micro_fn = fn;
    tr->micro_user = user;
}

/* Sequences [seq, seq + B) of dl into inp, tgt — with context parallelism this rank's shard of
 * each (B, seq_len / cp), its head-tail chunks (parallel/cp.h), in place. */
void trainer_load_batch(trainer *tr, data_loader *dl, uint64_t seq, int B, int *inp, int *tgt) {
    data_loader_get(dl, seq, B, inp, tgt);
    const mesh *ms = tr->mesh;
    if (ms->cp == 1) return;
    int T = tr->cfg.seq_len;
    int *tmp = mallocCheck((size_t)B * T * sizeof(int));
    memcpy(tmp, inp, (size_t)B * T * sizeof(int));
    cp_shard_tokens(tmp, inp, B, T, ms->cp, ms->cp_rank);
    memcpy(tmp, tgt, (size_t)B * T * sizeof(int));
    cp_shard_tokens(tmp, tgt, B, T, ms->cp, ms->cp_rank);
    free(tmp);
}

float trainer_eval(trainer *tr) {
    const mt_config *c = &tr->cfg;
    const mesh *ms = tr->mesh;
    int B = c->batch_size, T = c->seq_len, Tl = T / ms->cp; /* Tl: this CP rank's positions */
    int *inp = mallocCheck((size_t)B * T * sizeof(int));
    int *tgt = mallocCheck((size_t)B * T * sizeof(int));
    uint64_t nwin = data_loader_num_windows(&tr->val_dl);
    int bsz = (uint64_t)B > nwin ? (int)nwin : B;
    /* eval_batches microbatches per data-parallel rank: round `it` covers the global batch
     * [it·dp·bsz, (it+1)·dp·bsz), exactly as training splits a step, so a layout and one process
     * with microbatch dp·bsz evaluate the same windows in the same groups */
    int batches = c->eval_batches * ms->dp;
    if ((uint64_t)batches * bsz > nwin) batches = (int)(nwin / bsz);
    double acc[2] = {0, 0}; /* loss sum, batches */
    gpt_model *m = &tr->model;
    size_t act = (size_t)bsz * (Tl / (c->sp ? c->tp : 1)) * m->cfg.d_model; /* sp: 1/tp */
    /* every rank runs the same number of forwards (MoE expert parallelism makes them
     * collective across data-parallel ranks); rounds past the end are computed, not counted */
    int rounds = (batches + ms->dp - 1) / ms->dp;
    for (int it = 0; it < rounds; it++) {
        int i = it * ms->dp + ms->dp_rank, counts = i < batches;
        if (!counts) i %= batches;
        trainer_load_batch(tr, &tr->val_dl, (uint64_t)i * bsz, bsz, inp, tgt);
        /* forward only through the pipeline: receive, run this stage's chunk, pass it on (with
         * interleaved chunks the last stage's chunk c feeds the first stage's chunk c + 1) */
        int P = ms->pp, s = ms->pp_rank, counted = 0;
        double sum = 0;
        for (int ch = 0; ch < tr->chunks; ch++) {
            if (!(m->first && ch == 0))
                comm_recv(ms->pp_group, gpt_stage_input(m, 0), act, (s + P - 1) % P, 0);
            sum = gpt_chunk_forward(m, 0, ch, inp, tgt, bsz, Tl, 0.0f, &counted);
            if (!(m->last && ch == tr->chunks - 1))
                comm_send(ms->pp_group, gpt_chunk_output(m, 0), act, (s + 1) % P, 0);
        }
        if (m->last && counts) acc[0] += sum / counted, acc[1] += 1;
    }
    memset(&m->moe_stats, 0, sizeof(m->moe_stats)); /* eval routing is not a training statistic */
    comm_all_reduce_f64(ms->pp_group, acc, 2, COMM_SUM); /* only the last stage has losses */
    /* over dp and cp: a CP rank's mean is over its equal share of each sequence's positions */
    comm_all_reduce_f64(ms->dpcp_group, acc, 2, COMM_SUM);
    if (c->sp) comm_all_reduce_f64(ms->tp_group, acc, 2, COMM_SUM); /* sp: TP ranks' shares */
    free(inp);
    free(tgt);
    return (float)(acc[0] / acc[1]);
}

/* The config of the shard held by (tp_rank, pp_rank, ep_rank). */
static gpt_config shard_config(const trainer *tr, int tp_rank, int pp_rank, int ep_rank) {
    gpt_config gc = tr->model.cfg;
    gc.tp_rank = tp_rank;
    gc.pp_rank = pp_rank;
    gc.ep_rank = ep_rank;
    gc.layer_begin = tr->stage_begin[pp_rank];
    gc.layer_end = tr->stage_begin[pp_rank + 1];
    return gc;
}

/* The whole model (tp = pp = ep = 1) on world rank 0, assembled from the shards of the first
 * expert-parallel group of data-parallel ranks (dp_rank < ep; without EP just dp_rank 0): each
 * sends its parameters to rank 0. The model itself when nothing is sharded. Other ranks get NULL.
 * Collective over those ranks. */
static gpt_model *full_model(trainer *tr) {
    gpt_model *m = &tr->model;
    const mesh *ms = tr->mesh;
    if (m->cfg.tp == 1 && m->cfg.pp == 1 && m->cfg.ep == 1) return ms->rank == 0 ? m : NULL;
    if (ms->dp_rank >= ms->ep || ms->cp_rank != 0) return NULL; /* CP ranks hold copies */
    if (ms->rank != 0) {
        comm_send(ms->world, m->params, m->num_params, 0, 7);
        return NULL;
    }
    gpt_model *full = callocCheck(1, sizeof(gpt_model));
    gpt_config fc = m->cfg;
    fc.tp = 1, fc.tp_rank = 0, fc.pp = 1, fc.pp_rank = 0, fc.layer_begin = 0, fc.layer_end = 0;
    fc.ep = 1, fc.ep_rank = 0, fc.cp = 1, fc.cp_rank = 0, fc.sp = 0;
    char err[256];
    mtCheck(gpt_build(full, &fc, err, sizeof(err)) == 0, "cannot build the unsharded model");
    gpt_place_into_full(m, gpt_params_host(m), full);
    for (int p = 0; p < ms->pp; p++)
        for (int e = 0; e < ms->ep; e++)
            for (int t = 0; t < ms->tp; t++) {
                int r = mesh_rank_of(ms->tp, ms->cp, ms->dp, t, 0, e, p); /* (t, cp 0, dp e, p) */
                if (r == 0) continue;
                gpt_model src;
                gpt_config gc = shard_config(tr, t, p, e);
                mtCheck(gpt_build(&src, &gc, err, sizeof(err)) == 0, "cannot build a shard table");
                comm_recv(ms->world, src.params, src.num_params, r, 7);
                gpt_place_into_full(&src, gpt_params_host(&src), full);
                gpt_free(&src);
            }
    return full;
}

static void free_full_model(trainer *tr, gpt_model *full) {
    if (full && full != &tr->model) {
        gpt_free(full);
        free(full);
    }
}

void trainer_hook_eval(trainer *tr, int step, int final, void *user) {
    (void)user;
    (void)final;
    float v = trainer_eval(tr);
    tr->last_val_loss = v;
    if (tr->mesh->rank != 0) return;
    log_info("step %d/%d | val loss %.4f", step, tr->cfg.steps, v);
    rundb_metric row = {.step = step, .train_loss = NAN, .val_loss = v, .lr = NAN,
                        .grad_norm = NAN, .tokens_per_s = NAN, .mfu = NAN,
                        .mfu_theoretical = NAN, .step_ms = NAN,
                        .wall_s = timer_now() - tr->t_start};
    rundb_log_metric(tr->db, tr->run_id, &row);
    cJSON *d = ev_detail();
    ev_num(d, EVK_STEP, step);
    ev_num(d, EVK_VAL_LOSS, v);
    ev_log(tr->db, tr->run_id, EV_EVAL, 0, d);
}

void trainer_hook_sample(trainer *tr, int step, int final, void *user) {
    (void)user;
    (void)final;
    trainer_params_gather(tr); /* ZeRO-3: every parameter resident while it samples */
    gpt_model *full = full_model(tr);
    if (!full) {
        trainer_params_release(tr);
        return;
    }
    const gpt_model *m = full;
    gpt_decode_state st;
    gpt_decode_init(&st, m);
    int V = m->cfg.vocab_size;
    float *work = mallocCheck((size_t)2 * V * sizeof(float));
    sample_params sp = {0.8f, 0, 1.0f};
    uint32_t prompt[8];
    size_t np = tok_can_encode(&tr->tok) ? tok_encode(&tr->tok, (const uint8_t *)"\n", 1, prompt) : 0;
    int tok = np ? (int)prompt[0] : tok_eot(&tr->tok) >= 0 ? tok_eot(&tr->tok) : 0;
    int ids_only = tok_vocab_size(&tr->tok) == 0; /* no tokenizer: print the ids */
    int n = tr->cfg.sample_tokens < m->cfg.seq_len ? tr->cfg.sample_tokens : m->cfg.seq_len - 1;
    size_t cap = 64, len = 0;
    char *text = mallocCheck(cap);
    for (int i = 0; i < n; i++) {
        const float *logits = gpt_decode_step(m, &st, tok);
        int tv = tok_vocab_size(&tr->tok);
        tok = sample_token(logits, tv > 0 && tv < V ? tv : V, &sp, &tr->sample_rng, work);
        size_t bl;
        char idbuf[16];
        const uint8_t *b = tok_token_bytes(&tr->tok, (uint32_t)tok, &bl);
        if (ids_only) {
            bl = (size_t)snprintf(idbuf, sizeof(idbuf), "%d ", tok);
            b = (const uint8_t *)idbuf;
        }
        if (len + bl + 1 > cap) {
            while (len + bl + 1 > cap) cap *= 2;
            text = realloc(text, cap);
            mtCheck(text != NULL, "out of memory");
        }
        memcpy(text + len, b, bl);
        len += bl;
    }
    text[len] = 0;
    log_info("step %d/%d | sample:\n---\n%s\n---", step, tr->cfg.steps, text);
    free(text);
    free(work);
    gpt_decode_free(&st);
    free_full_model(tr, full);
    trainer_params_release(tr);
}

static void run_hooks(trainer *tr, int step, int final) {
    for (int i = 0; i < tr->n_hooks; i++) {
        int every = tr->hooks[i].every;
        int due = final || (every > 0 && step % every == 0);
        if (due) tr->hooks[i].fn(tr, step, final, tr->hooks[i].user);
    }
}

void trainer_grads_ready(void *user, size_t offset) {
    trainer *tr = user;
    if (tr->cfg.zero >= 2) zero_grads_ready(&tr->zero, &tr->model, offset);
    else dp_ready_from(&tr->dp, tr->model.grads, offset);
}

void trainer_params_gather(trainer *tr) {
    if (tr->cfg.zero == 3) zero_gather_all(&tr->zero, &tr->model);
}

void trainer_params_release(trainer *tr) {
    if (tr->cfg.zero == 3) zero_release_all(&tr->zero, &tr->model);
}

void trainer_params_loaded(trainer *tr) {
    if (tr->cfg.zero == 3) zero_take_params(&tr->zero, &tr->model);
}

/* Global L2 norm of the reduced gradient, identical to the single-process value: tensor-parallel
 * shards are summed over the TP group, replicated tensors counted once, ZeRO-1 shards summed over
 * the DP group (ZeRO-2/3's expert shards over the expert-data-parallel group). */
static double global_grad_norm(trainer *tr) {
    const gpt_model *m = &tr->model;
    size_t lo = 0, hi = m->num_params;
    if (tr->cfg.zero) {
        lo = tr->dp.shard_start;
        hi = lo + tr->dp.shard < m->num_params ? lo + tr->dp.shard : m->num_params;
    }
    double part[3] = {0, 0, 0}; /* replicated, tp-sharded, expert (ep-sharded) */
    if (tr->cfg.zero >= 2) {
        zero_grad_sumsq(&tr->zero, m, part);
        hi = lo; /* nothing of the flat buffer below */
    }
    const float **x = mallocCheck(((size_t)m->n_tensors + 1) * sizeof(float *));
    size_t *n = mallocCheck(((size_t)m->n_tensors + 1) * sizeof(size_t));
    double *sq = mallocCheck(((size_t)m->n_tensors + 1) * sizeof(double));
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *t = &m->tensors[i];
        size_t a = t->offset > lo ? t->offset : lo;
        size_t b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        /* the tied wte counts once, on the first stage */
        x[i] = m->grads + a;
        n[i] = a < b && !t->pp_tied_copy ? b - a : 0;
    }
    ops_sumsq_multi(sq, x, n, m->n_tensors); /* one call for the whole model */
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *t = &m->tensors[i];
        if (n[i]) part[t->expert ? 2 : t->tp_replicated ? 0 : 1] += sq[i];
    }
    free(x);
    free(n);
    free(sq);
    if (tr->cfg.zero >= 2) { /* shards: dense ones over dp, expert ones over edp (train/zero.h) */
        comm_all_reduce_f64(tr->mesh->dp_group, part, 2, COMM_SUM);
        comm_all_reduce_f64(tr->zero.group[ZERO_EXPERT], &part[2], 1, COMM_SUM);
    } else if (tr->cfg.zero) {
        comm_all_reduce_f64(tr->mesh->dp_group, part, 3, COMM_SUM);
    }
    comm_all_reduce_f64(tr->mesh->tp_group, &part[1], 1, COMM_SUM);
    comm_all_reduce_f64(tr->mesh->ep_group, &part[2], 1, COMM_SUM); /* distinct experts */
    comm_all_reduce_f64(tr->mesh->pp_group, part, 3, COMM_SUM); /* stages hold disjoint layers */
    return sqrt(part[0] + part[1] + part[2]);
}

/* Debug check (MINITRAIN_TP_CHECK=1): the gradients of replicated tensors (LayerNorms, biases
 * of row-parallel layers, embeddings) must be identical on every rank of a TP group, because
 * each rank computes them from the same, already all-reduced activations. Logs the largest
 * spread max_r g - min_r g over all replicated elements. */
static void tp_replica_check(trainer *tr) {
    const gpt_model *m = &tr->model;
    if (m->cfg.tp == 1 || tr->cfg.zero) return;
    float spread = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *t = &m->tensors[i];
        if (!t->tp_replicated) continue;
        float *hi = mallocCheck(t->numel * sizeof(float)), *lo = mallocCheck(t->numel * sizeof(float));
        ops_copy_d2h(hi, m->grads + t->offset, t->numel * sizeof(float));
        for (size_t j = 0; j < t->numel; j++) lo[j] = -hi[j];
        comm_all_reduce(tr->mesh->tp_group, hi, t->numel, COMM_MAX);
        comm_all_reduce(tr->mesh->tp_group, lo, t->numel, COMM_MAX);
        for (size_t j = 0; j < t->numel; j++)
            if (hi[j] + lo[j] > spread) spread = hi[j] + lo[j];
        free(hi);
        free(lo);
    }
    log_info("tp-check: step %d: replicated gradients differ across the TP group by at most %g",
             tr->step + 1, spread);
}

/* Per-step MoE statistics into run.db (event "moe"): the auxiliary loss averaged over
 * (EP group, microbatch) pairs, dropped assignments summed over the job, expert load. */
static void log_moe_stats(trainer *tr) {
    const mesh *ms = tr->mesh;
    const gpt_moe_stats *st = &tr->model.moe_stats;
    double v[3] = {st->aux_loss, st->z_loss, st->dropped};
    double mx[3] = {st->tokens_max, -(double)st->tokens_min, st->tokens_cv};
    if (st->layers == 0) mx[1] = -1e300; /* this stage has no MoE block */
    comm_all_reduce_f64(ms->dp_group, v, 3, COMM_SUM);
    comm_all_reduce_f64(ms->pp_group, v, 3, COMM_SUM);
    comm_all_reduce_f64(ms->pp_group, mx, 3, COMM_MAX);
    /* the job's (MoE layer, expert) loads: each stage fills its own layers' rows */
    const mt_config *c = &tr->cfg;
    int nmoe = c->n_layer / c->moe_every, E1 = tr->model.cfg.n_experts + 1;
    double *G = NULL;
    if (tr->model.moe_load && nmoe > 0) {
        const gpt_model *m = &tr->model;
        G = callocCheck((size_t)nmoe * E1, sizeof(double));
        for (int l = 0; l < m->n_local; l++) {
            int g = gpt_global_layer(m, l);
            if ((g + 1) % c->moe_every == 0)
                memcpy(G + (size_t)((g + 1) / c->moe_every - 1) * E1,
                       m->moe_load + (size_t)l * E1, E1 * sizeof(double));
        }
        comm_all_reduce_f64(ms->dp_group, G, (size_t)nmoe * E1, COMM_SUM);
        comm_all_reduce_f64(ms->pp_group, G, (size_t)nmoe * E1, COMM_SUM);
    }
    if (ms->rank != 0) {
        free(G);
        return;
    }
    double denom = (double)tr->grad_accum * ms->dp;
    cJSON *d = ev_detail();
    ev_num(d, EVK_STEP, tr->step);
    ev_num(d, EVK_AUX_LOSS, v[0] / denom);
    ev_num(d, EVK_Z_LOSS, v[1] / denom);
    ev_num(d, EVK_DROPPED, v[2]);
    ev_num(d, EVK_TOKENS_MIN, -mx[1]);
    ev_num(d, EVK_TOKENS_MAX, mx[0]);
    ev_num(d, EVK_TOKENS_CV, mx[2]);
    if (G) { /* per-layer expert load and drops, for the heat map (report/svg_moe.c) */
        int E = tr->model.cfg.n_experts;
        double *load = mallocCheck((size_t)nmoe * E * sizeof(double));
        double *drop = mallocCheck((size_t)nmoe * sizeof(double)), *layer = drop;
        for (int j = 0; j < nmoe; j++) {
            for (int e = 0; e < E; e++) load[(size_t)j * E + e] = G[(size_t)j * (E + 1) + e] / ms->ep;
            drop[j] = G[(size_t)j * (E + 1) + E];
        }
        ev_numv(d, EVK_LOAD, load, nmoe * E);
        ev_numv(d, EVK_DROPPED_LAYER, drop, nmoe);
        for (int j = 0; j < nmoe; j++) layer[j] = (double)(j + 1) * c->moe_every - 1;
        ev_numv(d, EVK_LAYERS, layer, nmoe);
        ev_num(d, EVK_EXPERTS, E);
        free(load);
        free(drop);
        free(G);
    }
    ev_log(tr->db, tr->run_id, EV_MOE, 0, d);
    tr->last_aux_loss = v[0] / denom;
}

/* With expert parallelism, dense gradients are summed over the data-parallel group and expert
 * gradients over the expert-data-parallel group (the dp/ep ranks holding the same experts).
 * Contiguous runs of dense tensors go in one all-reduce. */
static void reduce_grads_ep(trainer *tr) {
    gpt_model *m = &tr->model;
    size_t run_lo = 0, run_hi = 0; /* pending dense run [lo, hi) */
    for (int i = 0; i <= m->n_tensors; i++) {
        const gpt_tensor *t = i < m->n_tensors ? &m->tensors[i] : NULL;
        if (t && !t->expert && t->offset == run_hi) {
            run_hi += t->numel;
            continue;
        }
        if (run_hi > run_lo)
            comm_all_reduce(tr->mesh->dp_group, m->grads + run_lo, run_hi - run_lo, COMM_SUM);
        if (!t) break;
        if (t->expert) {
            comm_all_reduce(tr->mesh->edp_group, m->grads + t->offset, t->numel, COMM_SUM);
            run_lo = run_hi = t->offset + t->numel;
        } else {
            run_lo = t->offset;
            run_hi = t->offset + t->numel;
        }
    }
}

void trainer_before_update(trainer *tr) {
    if (tr->before_update) tr->before_update(tr->before_update_user);
}

/* Step s's grad_accum microbatches of this data-parallel rank (pp = 1): forward and backward, or
 * the microbatch function when one is set; the last backward overlaps the DP buckets' all-reduce
 * (not with EP). dloss is the gradient of the mean loss over the global batch. Returns the loss
 * sum over the microbatches. */
static double microbatch_step(trainer *tr, int s, int *inp, int *tgt, float dloss) {
    const mt_config *c = &tr->cfg;
    const mesh *ms = tr->mesh;
    gpt_model *m = &tr->model;
    int B = c->batch_size, T = c->seq_len / ms->cp, dp = ms->dp; /* T: this CP rank's share */
    double loss_sum = 0;
    for (int k = 0; k < tr->grad_accum; k++) {
        /* microbatch k of this DP rank = sequences of the global batch no other rank reads */
        uint64_t seq = (uint64_t)s * c->global_batch + ((uint64_t)k * dp + ms->dp_rank) * B;
        trainer_load_batch(tr, &tr->train_dl, seq, B, inp, tgt);
        int last = k == tr->grad_accum - 1;
        /* overlap buckets with the backward (not with EP: two reduction groups); ZeRO-2/3
         * reduce-scatter each block after every microbatch's backward */
        m->grads_ready = (last && ms->ep == 1) || c->zero >= 2 ? trainer_grads_ready : NULL;
        m->grads_ready_user = tr;
        if (tr->micro_fn) {
            loss_sum += tr->micro_fn(tr, inp, tgt, B, T, seq, dloss, tr->micro_user);
        } else {
            loss_sum += gpt_forward(m, inp, tgt, B, T, dloss);
            gpt_backward(m);
        }
        m->grads_ready = NULL;
    }
    return loss_sum;
}

/* A non-finite loss or gradient norm after step s: the nonfinite event and the line saying the
 * run stops with MT_EXIT_NONFINITE. */
static void log_nonfinite(trainer *tr, int s, float loss, double norm) {
    if (tr->mesh->rank == 0) {
        cJSON *d = ev_detail();
        ev_num(d, EVK_STEP, s + 1);
        ev_num(d, EVK_LOSS, loss); /* "nan" / "inf" when not finite */
        ev_num(d, EVK_GRAD_NORM, norm);
        ev_log(tr->db, tr->run_id, EV_NONFINITE, 0, d);
    }
    log_info("step %d: loss %g, grad norm %g is not finite; stopping (exit %d)", s + 1, loss, norm,
             MT_EXIT_NONFINITE);
}

/* The ring volume of the last step on this rank against parallel/cp.h's formula,
 * (6·cp − 4)·B·(T/cp)·(d_model/tp) floats per layer and microbatch. */
static void log_cp_ring(const trainer *tr) {
    const mt_config *c = &tr->cfg;
    const gpt_model *m = &tr->model;
    double want = cp_ring_formula_floats(tr->mesh->cp, c->batch_size, c->seq_len,
                                         c->d_model / c->tp) * m->n_local * tr->grad_accum;
    log_info("cp ring: step %d sent %.3f MiB per rank (%.0f floats) | formula "
             "(6·cp-4)·B·(T/cp)·(d/tp) x %d layers x %d microbatches = %.3f MiB (%.0f floats)",
             tr->step, tr->last_cp_floats * sizeof(float) / 1048576.0, tr->last_cp_floats,
             m->n_local, tr->grad_accum, want * sizeof(float) / 1048576.0, want);
}

/* A step ran faster than the measured peak (per rank: `achieved` FLOP/s): the peak was wrong.
 * Re-probe (peak_sgemm_machine, 1.5 s at most), keep the larger of the new probe and the achieved
 * rate, say so, and write it to the per-machine cache, so that MFU is never above 100%. Local to
 * this rank (no collective: the ranks decide on their own step times). */
static void raise_peak(trainer *tr, double achieved) {
    double old = tr->peak_measured;
    peak_cache_entry e = {0};
    double pk = strcmp(ops_device(), "cuda") == 0
                    ? achieved
                    : peak_sgemm_machine(tr->threads, tr->peak_ranks, 1.5, 1, &e);
    if (!(pk >= achieved)) pk = achieved;
    tr->peak_measured = pk;
    if (tr->mesh->rank != 0) return;
    mt_warn("step %d ran at %.1f GFLOP/s per rank, above the sgemm peak of %.1f GFLOP/s: the peak "
            "was measured low; re-probed, MFU is now against %.1f GFLOP/s", tr->step,
            achieved / 1e9, old / 1e9, pk / 1e9);
    if (strcmp(ops_device(), "cuda") == 0) return;
    char err[256];
    e.sgemm = pk;
    if (peak_cache_store(&e, err, sizeof(err)) != 0 && strstr(err, "no peak cache") == NULL)
        mt_warn("the peak cache: %s", err);
}

/* After the update of step tr->step (it ran from t0 to t1, c0 = comm_seconds() at t0): the
 * tr->last_* figures, the metrics row, the MoE statistics, the pipeline idle share, and the
 * progress line when it is due. t_loop and steps_here give the ETA. */
static void log_step(trainer *tr, float loss, float lr, double norm, double t0, double t1,
                     double c0, double t_loop, int steps_here, int end) {
    const mt_config *c = &tr->cfg;
    const mesh *ms = tr->mesh;
    double tokens_per_step = (double)c->global_batch * c->seq_len;
    char buf[64];
    double step_s = t1 - t0;
    double tps = tokens_per_step / step_s;
    /* of the job: its FLOP/s over (per-rank peak x world size), docs/mfu.md */
    if (flops_mfu(tr->flops_per_token, tps, tr->peak_measured, ms->world_size) > 1)
        raise_peak(tr, tr->flops_per_token * tps / ms->world_size);
    double mfu = flops_mfu(tr->flops_per_token, tps, tr->peak_measured, ms->world_size);
    double mfu_th = flops_mfu(tr->flops_per_token, tps, tr->peak_theoretical, ms->world_size);
    /* hardware FLOPs: the recomputation counted too (model/flops.h, docs/mfu.md) */
    double hfu = flops_mfu(tr->flops_per_token + tr->recompute_flops_per_token, tps,
                           tr->peak_measured, ms->world_size);
    tr->last_hfu = hfu;
    tr->last_loss = loss;
    tr->last_lr = lr;
    tr->last_norm = norm;
    tr->last_tokens_per_s = tps;
    tr->last_mfu = mfu;
    tr->last_step_s = step_s;
    tr->last_comm_s = comm_seconds() - c0;
    if (ms->rank == 0) {
        rundb_metric row = {.step = tr->step, .train_loss = loss, .val_loss = NAN, .lr = lr,
                            .grad_norm = norm, .tokens_per_s = tps, .mfu = mfu,
                            .mfu_theoretical = mfu_th, .step_ms = step_s * 1e3,
                            .wall_s = t1 - tr->t_start};
        rundb_log_metric(tr->db, tr->run_id, &row);
    }
    if (c->moe_every > 0) log_moe_stats(tr);
    if (ms->pp > 1 && ms->tp_rank == 0 && ms->dp_rank == 0 &&
        (tr->step % c->log_every == 0 || tr->step == end)) {
        cJSON *d = ev_detail();
        ev_num(d, EVK_STEP, tr->step);
        ev_num(d, EVK_STAGE, ms->pp_rank);
        ev_num(d, EVK_IDLE_SHARE, tr->last_idle_s / step_s);
        ev_num(d, EVK_IN_FLIGHT, tr->last_in_flight);
        ev_log(tr->db, tr->run_id, EV_PP_IDLE, ms->rank, d);
    }
    double eta = (t1 - t_loop) / steps_here * (end - tr->step);
    if (tr->step % c->log_every == 0 || tr->step == end || steps_here == 1) {
        char th[48] = "", cm[48] = "";
        if (isfinite(mfu_th)) snprintf(th, sizeof(th), " (%.1f%% of theoretical)", 100 * mfu_th);
        if (ms->world_size > 1)
            snprintf(cm, sizeof(cm), " | comm %.0f%%", 100 * tr->last_comm_s / step_s);
        log_progress(!log_is_tty(),
                     "step %d/%d | loss %.4f | lr %.2e | norm %.3f | %.0f ms | %.0f tok/s | "
                     "MFU %.1f%%%s | HFU %.1f%%%s | ETA %s",
                     tr->step, c->steps, loss, lr, norm, step_s * 1e3, tps, 100 * mfu, th,
                     100 * hfu, cm,
                     log_duration(eta, buf, sizeof(buf)));
        if (ms->cp > 1 && ms->rank == 0) log_cp_ring(tr);
    }
}

/* The predicted budget of every rank (train/memory.h) into run.db: event memory. */
static void log_memory_budget(trainer *tr) {
    const mesh *ms = tr->mesh;
    if (ms->rank != 0 || !tr->memory_ranks) return;
    int W = ms->world_size;
    double *col = mallocCheck((size_t)W * sizeof(double));
    cJSON *d = ev_detail();
    ev_num(d, EVK_ZERO, tr->cfg.zero);
    ev_str(d, EVK_RECOMPUTE, tr->cfg.recompute);
    ev_num(d, EVK_LIMIT, tr->memory_limit);
    ev_num(d, EVK_FLOPS_PER_TOKEN, tr->flops_per_token); /* report's HFU = MFU x (F + R) / F */
    ev_num(d, EVK_RECOMPUTE_FLOPS, tr->recompute_flops_per_token);
    for (int i = 0; i < MEMORY_N; i++) {
        for (int r = 0; r < W; r++) col[r] = tr->memory_ranks[(size_t)r * MEMORY_N + i];
        ev_numv(d, memory_names[i], col, W);
    }
    ev_log(tr->db, tr->run_id, EV_MEMORY, 0, d);
    free(col);
}

/* Every rank's measured peak resident set against its prediction: event memory_peak and one line
 * on rank 0 (the rank furthest from its prediction). Collective over the world. */
static void log_memory_peak(trainer *tr) {
    const mesh *ms = tr->mesh;
    int W = ms->world_size;
    double *peak = callocCheck((size_t)W, sizeof(double));
    peak[ms->rank] = memory_rss_bytes(1);
    comm_all_reduce_f64(ms->world, peak, (size_t)W, COMM_SUM);
    if (ms->rank == 0 && tr->memory_ranks) {
        double *pred = mallocCheck((size_t)W * sizeof(double));
        int far = 0;
        for (int r = 0; r < W; r++) {
            pred[r] = tr->memory_ranks[(size_t)r * MEMORY_N + MEMORY_TOTAL];
            if (fabs(peak[r] / pred[r] - 1) > fabs(peak[far] / pred[far] - 1)) far = r;
        }
        cJSON *d = ev_detail();
        ev_numv(d, EVK_PEAK_RSS, peak, W);
        ev_numv(d, EVK_TOTAL, pred, W);
        ev_log(tr->db, tr->run_id, EV_MEMORY_PEAK, 0, d);
        char a[32], b[32];
        log_info("memory: peak resident %s on rank %d, predicted %s (%+.1f%%)",
                 memory_format(peak[far], a, sizeof(a)), far,
                 memory_format(pred[far], b, sizeof(b)), 100 * (peak[far] / pred[far] - 1));
        free(pred);
    }
    free(peak);
}

int trainer_run(trainer *tr) {
    const mt_config *c = &tr->cfg;
    const mesh *ms = tr->mesh;
    gpt_model *m = &tr->model;
    int B = c->batch_size, T = c->seq_len, dp = ms->dp;
    int end = c->stop_after > 0 ? c->stop_after : c->steps;
    int *inp = mallocCheck((size_t)B * T * sizeof(int));
    int *tgt = mallocCheck((size_t)B * T * sizeof(int));
    /* gradient of the mean loss over the whole global batch: every rank's sum adds up to it */
    float dloss = 1.0f / ((float)c->global_batch * T);
    tr->t_start = timer_now();
    if (c->moe_every > 0 && !m->moe_load) /* the per-layer expert load (event moe) */
        m->moe_load = callocCheck((size_t)m->n_local * (m->cfg.n_experts + 1), sizeof(double));
    if (ms->rank == 0) rundb_log_event(tr->db, tr->run_id, EV_START, 0, tr->config_json);
    log_memory_budget(tr);
    double t_loop = timer_now();
    int steps_here = 0;
    int tp_check = getenv("MINITRAIN_TP_CHECK") != NULL;
    int pp_check = getenv("MINITRAIN_PP_CHECK") != NULL;
    int rc = MT_EXIT_OK;
    for (int s = tr->step; s < end; s++) {
        double t0 = timer_now(), c0 = comm_seconds(), ring0 = cp_ring_floats();
        if (c->zero >= 2) zero_begin_step(&tr->zero, m); /* the blocks' flat pages are clear */
        else gpt_zero_grad(m);
        memset(&m->moe_stats, 0, sizeof(m->moe_stats));
        if (m->moe_load)
            memset(m->moe_load, 0, (size_t)m->n_local * (m->cfg.n_experts + 1) * sizeof(double));
        /* each (EP group, microbatch) adds its auxiliary losses once to the objective */
        m->aux_grad = (float)ms->ep / ((float)tr->grad_accum * dp);
        double loss_sum = ms->pp > 1 ? trainer_pipe_step(tr, s, end, inp, tgt)
                                     : microbatch_step(tr, s, inp, tgt, dloss);
        tr->last_cp_floats = cp_ring_floats() - ring0; /* the step's passes, not eval's */
        if (c->zero >= 2) zero_finish(&tr->zero, m); /* dense over dp, experts over edp */
        else if (ms->ep > 1) reduce_grads_ep(tr);
        else dp_finish(&tr->dp, m->grads);
        gpt_sp_reduce_grads(m); /* sp: LayerNorm/embedding gradients are per-position partials */
        if (tp_check) tp_replica_check(tr);
        double lsum = loss_sum; /* CP ranks: means over equal shares of the same sequences */
        comm_all_reduce_f64(ms->dpcp_group, &lsum, 1, COMM_SUM);
        if (c->sp) comm_all_reduce_f64(ms->tp_group, &lsum, 1, COMM_SUM); /* sp: TP ranks' means */
        float loss = (float)(lsum / (tr->grad_accum * dp * ms->cp * (c->sp ? c->tp : 1)));
        double norm = global_grad_norm(tr);
        if (!isfinite(loss) || !isfinite(norm)) {
            log_nonfinite(tr, s, loss, norm);
            rc = MT_EXIT_NONFINITE;
            break;
        }
        float lr = optim_lr(s, c->steps, c->warmup_steps, c->lr, c->min_lr);
        trainer_before_update(tr); /* an async checkpoint's snapshot copy must be done */
        if (c->zero >= 2) {
            zero_optim_step(&tr->zero, m, &tr->opt, lr, optim_clip_scale(norm, c->grad_clip));
        } else {
            optim_step(&tr->opt, m, lr, optim_clip_scale(norm, c->grad_clip));
            dp_gather_params(&tr->dp, m->params);
        }
        double t1 = timer_now();
        tr->step = s + 1;
        if (pp_check) trainer_pipe_tied_check(tr);
        steps_here++;
        log_step(tr, loss, lr, norm, t0, t1, c0, t_loop, steps_here, end);
        int final = tr->step == end;
        if (!final) run_hooks(tr, tr->step, 0);
        if (tr->stop_requested) break; /* a hook asked for a clean stop */
    }
    if (rc == MT_EXIT_OK) run_hooks(tr, tr->step, 1);
    log_memory_peak(tr);
    free(inp);
    free(tgt);
    return rc;
}

void trainer_gather_optimizer_state(trainer *tr, float *m_out, float *v_out) {
    size_t n = tr->model.num_params;
    if (tr->cfg.zero >= 2) {
        zero_gather_flat(&tr->zero, tr->opt.m, m_out, n);
        zero_gather_flat(&tr->zero, tr->opt.v, v_out, n);
        return;
    }
    if (!tr->cfg.zero) {
        ops_copy_d2h(m_out, tr->opt.m, n * sizeof(float));
        ops_copy_d2h(v_out, tr->opt.v, n * sizeof(float));
        return;
    }
    float *full = mallocCheck(tr->dp.padded * sizeof(float));
    comm_all_gather(tr->mesh->dp_group, tr->opt.m, full, tr->dp.shard);
    memcpy(m_out, full, n * sizeof(float));
    comm_all_gather(tr->mesh->dp_group, tr->opt.v, full, tr->dp.shard);
    memcpy(v_out, full, n * sizeof(float));
    free(full);
}

void trainer_scatter_optimizer_state(trainer *tr, const float *m_in, const float *v_in) {
    size_t n = tr->model.num_params, lo = tr->opt.offset;
    if (tr->cfg.zero >= 2) {
        zero_scatter_flat(&tr->zero, m_in, tr->opt.m, n);
        zero_scatter_flat(&tr->zero, v_in, tr->opt.v, n);
        return;
    }
    float *h = mallocCheck((tr->opt.n + 1) * sizeof(float)); /* host staging of the shard */
    for (size_t i = 0; i < tr->opt.n; i++) h[i] = lo + i < n ? m_in[lo + i] : 0.0f;
    ops_copy_h2d(tr->opt.m, h, tr->opt.n * sizeof(float));
    for (size_t i = 0; i < tr->opt.n; i++) h[i] = lo + i < n ? v_in[lo + i] : 0.0f;
    ops_copy_h2d(tr->opt.v, h, tr->opt.n * sizeof(float));
    free(h);
}

int trainer_save_model(trainer *tr, char *err, size_t errlen) {
    trainer_params_gather(tr);        /* ZeRO-3: every parameter resident (collective) */
    gpt_model *full = full_model(tr); /* collective over the TP group */
    if (!full) {                      /* only world rank 0 writes */
        trainer_params_release(tr);
        return 0;
    }
    char path[1100];
    snprintf(path, sizeof(path), "%s/model.safetensors", tr->cfg.run_dir);
    int rc = model_io_save(full, path, tr->config_json, tr->step, err, errlen);
    free_full_model(tr, full);
    trainer_params_release(tr);
    if (rc != 0) return -1;
    if (tok_vocab_size(&tr->tok) == 0) return 0; /* trained on ids without a tokenizer */
    snprintf(path, sizeof(path), "%s/tokenizer.bin", tr->cfg.run_dir);
    return tok_save(&tr->tok, path, err, errlen);
}

void trainer_log_end(trainer *tr, const char *status, const char *message) {
    cJSON *d = ev_detail();
    ev_str(d, EVK_STATUS, status);
    ev_num(d, EVK_STEP, tr->step);
    if (message) ev_str(d, EVK_MESSAGE, message);
    ev_log(tr->db, tr->run_id, EV_END, 0, d);
}

void trainer_log_error(trainer *tr, const char *error) {
    cJSON *d = ev_detail();
    ev_str(d, EVK_ERROR, error);
    ev_num(d, EVK_STEP, tr->step);
    ev_log(tr->db, tr->run_id, EV_ERROR, 0, d);
}
