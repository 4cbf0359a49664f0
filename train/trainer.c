/*
 * train/trainer.c — the training loop (see train/trainer.h).
 */
#include "train/trainer.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/log.h"
#include "core/timer.h"
#include "train/flops.h"
#include "train/model_io.h"
#include "train/ops.h"
#include "train/sample.h"

static int mkdir_p(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            mkdir(buf, 0755);
            *p = '/';
        }
    }
    return mkdir(buf, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

int trainer_init(trainer *tr, const mt_config *cfg, mesh *ms, char *err, size_t errlen) {
    memset(tr, 0, sizeof(*tr));
    tr->cfg = *cfg;
    tr->mesh = ms;
    mt_config *c = &tr->cfg;
    int threads = c->threads > 0 ? c->threads : omp_get_num_procs();
    ops_set_threads(threads);

    /* tokenizer and data */
    char path[1100];
    snprintf(path, sizeof(path), "%s/tokenizer.bin", c->data);
    char msg[512];
    if (tok_load(&tr->tok, path, msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "%s (is '%s' a directory written by `minitrain prepare`?)", msg,
                 c->data);
        return -1;
    }
    int tok_vocab = tok_vocab_size(&tr->tok);
    if (c->vocab_size == 0) c->vocab_size = tok_vocab;
    if (c->vocab_size < tok_vocab) {
        snprintf(err, errlen, "vocab_size %d is smaller than the tokenizer's %d", c->vocab_size,
                 tok_vocab);
        return -1;
    }
    if (data_loader_open(&tr->train_dl, c->data, "train", c->seq_len, (uint64_t)c->seed, 1, msg,
                         sizeof(msg)) != 0) {
        snprintf(err, errlen, "%s", msg);
        return -1;
    }
    if (data_loader_num_windows(&tr->train_dl) < (uint64_t)c->batch_size) {
        snprintf(err, errlen, "train split of '%s' has %llu windows of seq_len+1 tokens, fewer than "
                 "batch_size %d (needs at least batch_size*seq_len+1 tokens)", c->data,
                 (unsigned long long)data_loader_num_windows(&tr->train_dl), c->batch_size);
        return -1;
    }
    if (data_loader_check_vocab(&tr->train_dl, c->vocab_size, msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "%s", msg);
        return -1;
    }
    if (data_loader_open(&tr->val_dl, c->data, "val", c->seq_len, (uint64_t)c->seed, 0, msg,
                         sizeof(msg)) != 0) {
        snprintf(err, errlen, "%s", msg);
        return -1;
    }
    if (data_loader_check_vocab(&tr->val_dl, c->vocab_size, msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "%s", msg);
        return -1;
    }
    if (data_loader_num_windows(&tr->val_dl) < 1) {
        snprintf(err, errlen, "val split of '%s' is shorter than seq_len+1 = %d tokens", c->data,
                 c->seq_len + 1);
        return -1;
    }

    /* model and optimizer */
    gpt_config gc = {c->n_layer, c->n_head, c->d_model, c->seq_len, c->vocab_size};
    if (gpt_build(&tr->model, &gc, msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "%s", msg);
        return -1;
    }
    gpt_init_weights(&tr->model, (uint64_t)c->seed);
    gpt_alloc_training(&tr->model, c->batch_size, c->seq_len);
    optim_init(&tr->opt, tr->model.num_params, c->beta1, c->beta2, c->eps, c->weight_decay);
    tr->grad_accum = c->global_batch / c->batch_size;
    rng_seed(&tr->sample_rng, (uint64_t)c->seed ^ 0x5A4D504CULL);

    /* run directory and database */
    if (mkdir_p(c->run_dir) != 0) {
        snprintf(err, errlen, "cannot create run directory '%s': %s", c->run_dir, strerror(errno));
        return -1;
    }
    config_to_json(c, tr->config_json, sizeof(tr->config_json));
    tr->db = rundb_open(c->run_dir, msg, sizeof(msg));
    if (!tr->db) {
        snprintf(err, errlen, "%s", msg);
        return -1;
    }
    tr->run_id = rundb_run_begin(tr->db, c->name, tr->config_json, rundb_git_commit(), 1);

    /* accounting */
    tr->flops_per_token = flops_per_token(c->n_layer, c->d_model, c->seq_len, c->vocab_size, 1);
    tr->peak_measured = flops_sgemm_probe(threads, 0.5);
    tr->peak_theoretical = flops_theoretical_peak(threads, tr->peak_desc, sizeof(tr->peak_desc));
    tr->last_val_loss = NAN;
    return 0;
}

void trainer_add_hook(trainer *tr, const char *name, int every, trainer_hook_fn fn, void *user) {
    mtCheck(tr->n_hooks < TRAINER_MAX_HOOKS, "too many trainer hooks");
    tr->hooks[tr->n_hooks].name = name;
    tr->hooks[tr->n_hooks].every = every;
    tr->hooks[tr->n_hooks].fn = fn;
    tr->hooks[tr->n_hooks].user = user;
    tr->n_hooks++;
}

float trainer_eval(trainer *tr) {
    const mt_config *c = &tr->cfg;
    int B = c->batch_size, T = c->seq_len;
    int *inp = mallocCheck((size_t)B * T * sizeof(int));
    int *tgt = mallocCheck((size_t)B * T * sizeof(int));
    uint64_t nwin = data_loader_num_windows(&tr->val_dl);
    int batches = c->eval_batches;
    if ((uint64_t)batches * B > nwin) batches = (int)(nwin / B > 0 ? nwin / B : 1);
    int bsz = (uint64_t)B > nwin ? (int)nwin : B;
    double sum = 0;
    for (int i = 0; i < batches; i++) {
        data_loader_get(&tr->val_dl, (uint64_t)i * bsz, bsz, inp, tgt);
        sum += gpt_forward(&tr->model, inp, tgt, bsz, T, 0.0f);
    }
    free(inp);
    free(tgt);
    return (float)(sum / batches);
}

void trainer_hook_eval(trainer *tr, int step, int final, void *user) {
    (void)user;
    (void)final;
    float v = trainer_eval(tr);
    tr->last_val_loss = v;
    log_info("step %d/%d | val loss %.4f", step, tr->cfg.steps, v);
    rundb_metric row = {.step = step, .train_loss = NAN, .val_loss = v, .lr = NAN,
                        .grad_norm = NAN, .tokens_per_s = NAN, .mfu = NAN,
                        .mfu_theoretical = NAN, .step_ms = NAN,
                        .wall_s = timer_now() - tr->t_start};
    rundb_log_metric(tr->db, tr->run_id, &row);
    char detail[64];
    snprintf(detail, sizeof(detail), "{\"step\":%d,\"val_loss\":%.6f}", step, v);
    rundb_log_event(tr->db, tr->run_id, "eval", 0, detail);
}

void trainer_hook_sample(trainer *tr, int step, int final, void *user) {
    (void)user;
    (void)final;
    const gpt_model *m = &tr->model;
    gpt_decode_state st;
    gpt_decode_init(&st, m);
    int V = m->cfg.vocab_size;
    float *work = mallocCheck((size_t)2 * V * sizeof(float));
    sample_params sp = {0.8f, 0, 1.0f};
    uint32_t prompt[8];
    size_t np = tok_encode(&tr->tok, (const uint8_t *)"\n", 1, prompt);
    int tok = np ? (int)prompt[0] : 0;
    int n = tr->cfg.sample_tokens < m->cfg.seq_len ? tr->cfg.sample_tokens : m->cfg.seq_len - 1;
    size_t cap = 64, len = 0;
    char *text = mallocCheck(cap);
    for (int i = 0; i < n; i++) {
        const float *logits = gpt_decode_step(m, &st, tok);
        tok = sample_token(logits, tok_vocab_size(&tr->tok) < V ? tok_vocab_size(&tr->tok) : V,
                           &sp, &tr->sample_rng, work);
        size_t bl;
        const uint8_t *b = tok_token_bytes(&tr->tok, (uint32_t)tok, &bl);
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
}

static void run_hooks(trainer *tr, int step, int final) {
    for (int i = 0; i < tr->n_hooks; i++) {
        int every = tr->hooks[i].every;
        int due = final || (every > 0 && step % every == 0);
        if (due) tr->hooks[i].fn(tr, step, final, tr->hooks[i].user);
    }
}

int trainer_run(trainer *tr) {
    const mt_config *c = &tr->cfg;
    gpt_model *m = &tr->model;
    int B = c->batch_size, T = c->seq_len;
    int end = c->stop_after > 0 ? c->stop_after : c->steps;
    int *inp = mallocCheck((size_t)B * T * sizeof(int));
    int *tgt = mallocCheck((size_t)B * T * sizeof(int));
    double tokens_per_step = (double)c->global_batch * T;
    float dloss = 1.0f / ((float)B * T * tr->grad_accum);
    char buf[64];
    tr->t_start = timer_now();
    rundb_log_event(tr->db, tr->run_id, "start", 0, tr->config_json);
    double t_loop = timer_now();
    int rc = MT_EXIT_OK;
    for (int s = tr->step; s < end; s++) {
        double t0 = timer_now();
        gpt_zero_grad(m);
        double loss_sum = 0;
        for (int k = 0; k < tr->grad_accum; k++) {
            uint64_t seq = (uint64_t)s * c->global_batch + (uint64_t)k * B;
            data_loader_get(&tr->train_dl, seq, B, inp, tgt);
            loss_sum += gpt_forward(m, inp, tgt, B, T, dloss);
            gpt_backward(m);
        }
        float loss = (float)(loss_sum / tr->grad_accum);
        double norm = optim_grad_norm(m->grads, m->num_params);
        if (!isfinite(loss) || !isfinite(norm)) {
            char detail[128];
            snprintf(detail, sizeof(detail), "{\"step\":%d,\"loss\":\"%g\",\"grad_norm\":\"%g\"}",
                     s + 1, loss, norm);
            rundb_log_event(tr->db, tr->run_id, "nonfinite", 0, detail);
            log_info("step %d: loss %g, grad norm %g is not finite; stopping (exit %d)", s + 1,
                     loss, norm, MT_EXIT_NONFINITE);
            rc = MT_EXIT_NONFINITE;
            break;
        }
        float lr = optim_lr(s, c->steps, c->warmup_steps, c->lr, c->min_lr);
        optim_step(&tr->opt, m, lr, optim_clip_scale(norm, c->grad_clip));
        double t1 = timer_now();
        tr->step = s + 1;
        double step_s = t1 - t0;
        double tps = tokens_per_step / step_s;
        double achieved = tps * tr->flops_per_token;
        double mfu = achieved / tr->peak_measured;
        double mfu_th = tr->peak_theoretical > 0 ? achieved / tr->peak_theoretical : NAN;
        tr->last_loss = loss;
        tr->last_lr = lr;
        tr->last_norm = norm;
        tr->last_tokens_per_s = tps;
        tr->last_mfu = mfu;
        tr->last_step_s = step_s;
        rundb_metric row = {.step = tr->step, .train_loss = loss, .val_loss = NAN, .lr = lr,
                            .grad_norm = norm, .tokens_per_s = tps, .mfu = mfu,
                            .mfu_theoretical = mfu_th, .step_ms = step_s * 1e3,
                            .wall_s = t1 - tr->t_start};
        rundb_log_metric(tr->db, tr->run_id, &row);
        double eta = (t1 - t_loop) / (tr->step - 0) * (end - tr->step);
        if (tr->step % c->log_every == 0 || tr->step == end || tr->step == 1) {
            char th[48] = "";
            if (isfinite(mfu_th)) snprintf(th, sizeof(th), " (%.1f%% of theoretical)", 100 * mfu_th);
            log_progress(!log_is_tty(),
                         "step %d/%d | loss %.4f | lr %.2e | norm %.3f | %.0f ms | %.0f tok/s | "
                         "MFU %.1f%%%s | ETA %s",
                         tr->step, c->steps, loss, lr, norm, step_s * 1e3, tps, 100 * mfu, th,
                         log_duration(eta, buf, sizeof(buf)));
        }
        int final = tr->step == end;
        if (!final) run_hooks(tr, tr->step, 0);
    }
    if (rc == MT_EXIT_OK) run_hooks(tr, tr->step, 1);
    free(inp);
    free(tgt);
    return rc;
}

void trainer_gather_optimizer_state(trainer *tr, float *m_out, float *v_out) {
    size_t n = tr->model.num_params;
    mtCheck(tr->opt.n == n, "optimizer state is sharded; gather is not wired for this layout");
    memcpy(m_out, tr->opt.m, n * sizeof(float));
    memcpy(v_out, tr->opt.v, n * sizeof(float));
}

void trainer_scatter_optimizer_state(trainer *tr, const float *m_in, const float *v_in) {
    size_t n = tr->model.num_params;
    mtCheck(tr->opt.n == n, "optimizer state is sharded; scatter is not wired for this layout");
    memcpy(tr->opt.m, m_in, n * sizeof(float));
    memcpy(tr->opt.v, v_in, n * sizeof(float));
}

int trainer_save_model(trainer *tr, char *err, size_t errlen) {
    char path[1100];
    snprintf(path, sizeof(path), "%s/model.safetensors", tr->cfg.run_dir);
    if (model_io_save(&tr->model, path, tr->config_json, tr->step, err, errlen) != 0) return -1;
    snprintf(path, sizeof(path), "%s/tokenizer.bin", tr->cfg.run_dir);
    return tok_save(&tr->tok, path, err, errlen);
}

void trainer_free(trainer *tr) {
    if (tr->db) rundb_close(tr->db);
    gpt_free(&tr->model);
    optim_free(&tr->opt);
    data_loader_close(&tr->train_dl);
    data_loader_close(&tr->val_dl);
    tok_free(&tr->tok);
    memset(tr, 0, sizeof(*tr));
}
