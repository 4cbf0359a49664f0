/*
 * train/trainer_setup.c — building a trainer and tearing it down (see train/trainer.h).
 *
 * Everything trainer_init does before the first step lives here: the layout checks (batch and
 * microbatch arithmetic against dp, tp against heads), the ops device and its NCCL groups, the
 * --init-from weights that fix the model's shape, the tokenizer and the data splits, this rank's
 * model shard with its activation slots, the data-parallel reducer and AdamW state, run.db, and
 * the FLOP/s peaks MFU is measured against. train/trainer.c holds what runs once it is built (the
 * step, eval, hooks, gathering the model). Split so because setup is read once, top to bottom,
 * when a run refuses to start, and the step is read when it trains wrong; neither needs the other.
 */
#include "train/trainer.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"
#include "core/log.h"
#include "parallel/comm.h"
#include "parallel/cp.h"
#include "parallel/pp.h"
#include "model/flops.h"
#include "model/interop.h"
#include "ops/ops.h"
#include "ops/peak.h"

/* The sgemm peak MFU is measured against (per rank, averaged over the ranks, which probe at
 * once: the peak each gets while sharing). Every run on one machine divides by one figure: the
 * per-machine cache (ops/peak.h peak_sgemm_machine, keyed by CPU model, threads and ranks per
 * node) is read first, and only a machine without a line probes (peak_sgemm_stable, rounds until
 * two agree within 3%, at most 3 s) and writes it. A relaunch by the supervisor
 * ($MINITRAIN_ATTEMPT > 1) on the same layout reuses the measurement of the attempt before
 * (RUN_DIR/.sgemm_peak): a restart is time the job is not training. Collective. */
static double measured_peak(trainer *tr, int threads, int local_ranks) {
    const mesh *ms = tr->mesh;
    char path[1100], want[128], err[256], cpath[1024];
    int cached = peak_cache_path(cpath, sizeof(cpath)) == 0;
    snprintf(path, sizeof(path), "%s/.sgemm_peak", tr->cfg.run_dir);
    snprintf(want, sizeof(want), "world=%d threads=%d local=%d peak=", ms->world_size, threads,
             local_ranks);
    const char *attempt = getenv("MINITRAIN_ATTEMPT");
    double pk = 0, spread = 0;
    if (ms->rank == 0 && attempt && atoi(attempt) > 1) {
        char *text = NULL;
        if (fs_read_file(path, 4096, &text, NULL, err, sizeof(err)) == 0 &&
            strncmp(text, want, strlen(want)) == 0)
            pk = atof(text + strlen(want));
        free(text);
    }
    comm_all_reduce_f64(ms->world, &pk, 1, COMM_MAX);
    if (pk > 0) {
        if (ms->rank == 0) log_info("sgemm peak: %.1f GFLOP/s, measured by the previous attempt", pk / 1e9);
        return pk;
    }
    peak_cache_entry e = {0};
    if (ms->rank == 0 && peak_cache_lookup(threads, local_ranks, &e) == 0) {
        pk = e.sgemm;
        spread = e.spread;
    }
    comm_all_reduce_f64(ms->world, &pk, 1, COMM_MAX);
    if (pk > 0) {
        if (ms->rank == 0)
            log_info("sgemm peak: %.1f GFLOP/s (spread %.1f%%), this machine's cached figure (%s)",
                     pk / 1e9, 100 * spread,
                     cpath);
    } else {
        comm_barrier(ms->world);
        peak_stable st;
        pk = peak_sgemm_stable(threads, 3.0, &st);
        comm_all_reduce_f64(ms->world, &pk, 1, COMM_AVG);
        if (ms->rank == 0) {
            log_info("sgemm peak: %.1f GFLOP/s, probed in %d rounds%s (spread %.1f%%, %.1f s)",
                     pk / 1e9, st.rounds, st.agreed ? " until two agreed within 3%" :
                     ", capped in time before two agreed", 100 * st.spread, st.seconds);
            peak_cache_entry in = {.threads = threads, .ranks = local_ranks < 1 ? 1 : local_ranks,
                                   .sgemm = pk, .spread = st.spread};
            peak_cpu_model(in.cpu, sizeof(in.cpu));
            peak_cache_entry old;
            if (peak_cache_lookup(threads, local_ranks, &old) == 0) in.bandwidth = old.bandwidth;
            if (cached && peak_cache_store(&in, err, sizeof(err)) != 0)
                mt_warn("the peak cache: %s", err);
        }
    }
    if (ms->rank == 0) {
        char line[200];
        int n = snprintf(line, sizeof(line), "%s%.6e\n", want, pk);
        if (fs_write_atomic(path, line, (size_t)n, err, sizeof(err)) != 0) mt_warn("%s", err);
    }
    return pk;
}

/* Build the model (this rank's shard; weights from init when given, else GPT-2's random
 * initialisation), its activations (when activations != 0), the data-parallel reducer and AdamW
 * with fresh state. 0 or -1 with err. */
static int init_model(trainer *tr, const gpt_model *init, int activations, char *err,
                      size_t errlen) {
    mt_config *c = &tr->cfg;
    mesh *ms = tr->mesh;
    char msg[512];
    tr->grad_accum = c->global_batch / (c->batch_size * ms->dp);
    if (pp_schedule_parse(c->pp_schedule, &tr->schedule) != 0) {
        snprintf(err, errlen, "unknown pp_schedule '%s'", c->pp_schedule);
        return -1;
    }
    tr->chunks = ms->pp > 1 && tr->schedule == PP_INTERLEAVED ? c->virtual_stages : 1;
    if (ms->pp > 1 && pp_schedule_check(tr->schedule, c->n_layer, ms->pp, c->virtual_stages,
                                        tr->grad_accum, c->pp_layers, msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "%s", msg);
        return -1;
    }
    if (ms->pp > 1 && c->moe_every > 0 &&
        (tr->schedule == PP_INTERLEAVED || tr->schedule == PP_ZBH1)) {
        snprintf(err, errlen, "pp_schedule = %s does not run mixture-of-experts blocks (%s); use "
                 "1f1b or gpipe with moe_every", c->pp_schedule, tr->schedule == PP_ZBH1 ?
                 "their backward is not split into B and W" : "a slot holds one dense chunk");
        return -1;
    }
    if (tr->chunks > 1 && c->robust_every > 0) {
        snprintf(err, errlen, "robust_every needs one model chunk per stage (the attacks run "
                 "whole stages); use pp_schedule = 1f1b or zb-h1 with robust_every");
        return -1;
    }
    if (tr->chunks > 1) { /* chunk j of stage s: global chunk j·P + s of equal size */
        int per = c->n_layer / (ms->pp * tr->chunks);
        for (int s = 0; s <= ms->pp; s++) tr->stage_begin[s] = s * per;
    } else if (pp_split_layers(c->n_layer, ms->pp, c->pp_layers, tr->stage_begin, msg,
                               sizeof(msg)) != 0) {
        snprintf(err, errlen, "%s", msg);
        return -1;
    }
    gpt_config gc = {.n_layer = c->n_layer, .n_head = c->n_head, .d_model = c->d_model,
                     .seq_len = c->seq_len, .vocab_size = c->vocab_size, .tp = c->tp,
                     .tp_rank = ms->tp_rank, .pp = ms->pp, .pp_rank = ms->pp_rank,
                     .layer_begin = tr->stage_begin[ms->pp_rank],
                     .layer_end = tr->stage_begin[ms->pp_rank + 1], .n_chunks = tr->chunks,
                     .chunk_stride = tr->chunks > 1 ? tr->stage_begin[ms->pp] : 0,
                     .moe_every = c->moe_every, .n_experts = c->n_experts, .top_k = c->top_k,
                     .capacity_factor = c->capacity_factor, .aux_coef = c->aux_loss_coef,
                     .z_coef = c->z_loss_coef, .ep = ms->ep, .ep_rank = ms->ep_rank,
                     .cp = ms->cp, .cp_rank = ms->cp_rank, .sp = c->sp};
    if (ms->ep > 1 && c->moe_every == 0) {
        snprintf(err, errlen, "ep %d needs a mixture-of-experts model (set moe_every)", ms->ep);
        return -1;
    }
    if (ms->ep > 1 && c->zero == 1) {
        snprintf(err, errlen, "zero=1 together with ep>1 is not supported (expert and dense "
                 "gradients reduce over different groups); use zero=0");
        return -1;
    }
    if (c->zero >= 2 && ms->dp == 1) {
        snprintf(err, errlen, "zero = %d with dp = 1: there is no data-parallel group to shard "
                 "over (use dp >= 2, or zero = 0)", c->zero);
        return -1;
    }
    if (c->zero >= 2 && ms->ep > 1) {
        snprintf(err, errlen, "zero = %d together with ep > 1 is not supported (expert gradients "
                 "reduce over the expert-data-parallel group, not dp); use zero = 0", c->zero);
        return -1;
    }
    if (c->zero >= 2 && (strcmp(c->adv_train, "none") != 0 || c->robust_every > 0)) {
        snprintf(err, errlen, "zero = %d with adv_train / robust_every is not supported (their "
                 "extra backwards would reduce-scatter out of step); use zero = 1", c->zero);
        return -1;
    }
    if (c->zero == 3 && !c->ckpt_async) {
        snprintf(err, errlen, "zero = 3 with ckpt_async = 0 is not supported (a synchronous save "
                 "writes the live parameters, which zero 3 does not keep whole)");
        return -1;
    }
    if (gpt_build(&tr->model, &gc, msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "%s", msg);
        return -1;
    }
    tr->model.tp_comm = ms->tp_group;
    tr->model.ep_comm = ms->ep_group;
    tr->model.cp_comm = ms->cp_group;
    if (init) gpt_take_from_full(&tr->model, init); /* --init-from / ckpt import: every tensor */
    else gpt_init_weights(&tr->model, (uint64_t)c->seed);
    tr->model.recompute = strcmp(c->recompute, "full") == 0        ? GPT_RECOMPUTE_FULL
                          : strcmp(c->recompute, "selective") == 0 ? GPT_RECOMPUTE_SELECTIVE
                                                                   : GPT_RECOMPUTE_NONE;
    /* ZeRO-2/3: the flat gradient (and parameter) buffers become unit-sharded, before the
     * activations would allocate the gradients (cp and sp are refused with zero, check_cp and
     * check_sp, so the DP group is the whole dp x cp group here) */
    if (c->zero >= 2 && zero_init(&tr->zero, &tr->model, ms->dp_group, c->zero, err, errlen) != 0)
        return -1;
    if (activations) {
        gpt_alloc_slots(&tr->model, c->batch_size, c->seq_len / ms->cp, /* this CP shard */
                        ms->pp > 1 ? pp_slots_needed(tr->schedule, ms->pp, ms->pp_rank,
                                                     tr->grad_accum, tr->chunks) : 1);
        if (ms->pp > 1) { /* which slot each (microbatch, chunk) takes */
            tr->pp_slot = mallocCheck((size_t)tr->chunks * tr->grad_accum * sizeof(int));
            pp_slot_table(tr->schedule, ms->pp, ms->pp_rank, tr->grad_accum, tr->chunks,
                          tr->pp_slot);
        }
        if (ms->pp > 1 && tr->schedule == PP_ZBH1) gpt_alloc_split(&tr->model); /* B keeps, W reads */
    }
    /* data parallel: bucketed all-reduce, or ZeRO-1 shards of a padded buffer */
    size_t bucket = (size_t)(c->bucket_mb * 1048576.0 / sizeof(float));
    int zero1 = c->zero == 1;
    dp_init(&tr->dp, ms->dpcp_group, tr->model.num_params, bucket, zero1); /* dp (x cp) */
    if (zero1) gpt_reserve(&tr->model, tr->dp.padded);
    size_t opt_n = zero1 ? tr->dp.shard : c->zero >= 2 ? tr->zero.shard : tr->model.num_params;
    optim_init(&tr->opt, opt_n, c->beta1, c->beta2, c->eps, c->weight_decay);
    tr->opt.offset = zero1 ? tr->dp.shard_start : 0; /* ZeRO-2/3: shard layout (train/zero.h) */
    rng_seed(&tr->sample_rng, (uint64_t)c->seed ^ 0x5A4D504CULL);
    return 0;
}

/* Rank 0's shipper thread (db/db.h), when a database is named and no supervisor ships this run
 * directory already. It runs on its own connections: the training step never waits on it. A URL
 * libpq cannot parse is one warning; training goes on with run.db alone. */
static void start_shipper(trainer *tr) {
    const char *url = db_url_pick(NULL, tr->cfg.db);
    if (tr->mesh->rank != 0 || url == NULL || getenv(DB_ENV_SHIPPER) != NULL) return;
    char err[1024];
    tr->shipper = db_shipper_start(url, tr->cfg.run_dir, err, sizeof(err));
    if (tr->shipper == NULL)
        mt_warn("%s: the run's records stay in run.db only (ship them later with `minitrain db "
                "ship`)", err);
}

/* Create the run directory and run.db with this run's row (rank 0 first, then the others open
 * it for events). 0 or -1 with err. */
static int init_run(trainer *tr, char *err, size_t errlen) {
    mt_config *c = &tr->cfg;
    mesh *ms = tr->mesh;
    char msg[512];
    char why[FS_PATH_MAX + 64]; /* fs_mkdir_p's own words: "'X' exists and is not a directory" */
    if (fs_mkdir_p(c->run_dir, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "cannot create run directory: %s", why);
        return -1;
    }
    if (config_to_json(c, tr->config_json, sizeof(tr->config_json)) >= sizeof(tr->config_json)) {
        /* a truncated text would be invalid JSON in runs.config and the start event */
        snprintf(err, errlen, "the run's config does not fit in %zu bytes of JSON (very long or "
                 "heavily escaped paths?)", sizeof(tr->config_json));
        return -1;
    }
    if (ms->rank == 0) {
        tr->db = rundb_open(c->run_dir, msg, sizeof(msg));
        if (!tr->db) {
            snprintf(err, errlen, "%s", msg);
            return -1;
        }
        tr->run_id = rundb_run_begin(tr->db, c->name, tr->config_json, rundb_git_commit(),
                                     ms->world_size);
        /* now, not only with the final model: `sample`/`serve` of a live or killed run load its
         * newest checkpoint and need the tokenizer beside it */
        char path[1100];
        snprintf(path, sizeof(path), "%s/tokenizer.bin", c->run_dir);
        if (tok_vocab_size(&tr->tok) > 0 && tok_save(&tr->tok, path, msg, sizeof(msg)) != 0) {
            snprintf(err, errlen, "%s", msg);
            return -1;
        }
    }
    comm_broadcast_bytes(ms->world, &tr->run_id, sizeof(tr->run_id), 0);
    start_shipper(tr);
    if (ms->rank != 0) {
        tr->db = rundb_open(c->run_dir, msg, sizeof(msg));
        if (!tr->db) {
            snprintf(err, errlen, "%s", msg);
            return -1;
        }
    }
    return 0;
}

/* --init-from: load the whole source model into *init (every rank reads it) and take the model
 * shape from it; a shorter seq_len keeps the first seq_len position embeddings. */
static int load_init(trainer *tr, gpt_model *init, char *err, size_t errlen) {
    mt_config *c = &tr->cfg;
    gpt_model full;
    char what[256], msg[1024];
    if (interop_load_weights(&full, c->init_from, what, sizeof(what), msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "init_from: %s", msg);
        return -1;
    }
    const gpt_config *f = &full.cfg;
    if (c->seq_len > f->seq_len) {
        snprintf(err, errlen, "init_from: seq_len %d exceeds the context of '%s' (%d positions); "
                 "use --seq-len %d or less", c->seq_len, c->init_from, f->seq_len, f->seq_len);
        gpt_free(&full);
        return -1;
    }
    /* the experts are the source's: a value set away from its default that disagrees is
     * refused, not silently replaced (a dense source cannot grow experts: no upcycling here) */
    mt_config d;
    config_defaults(&d);
    const struct { const char *key; int given, deflt, source; } moe[] = {
        {"moe_every", c->moe_every, d.moe_every, f->moe_every},
        {"n_experts", c->n_experts, d.n_experts, f->moe_every > 0 ? f->n_experts : d.n_experts},
        {"top_k", c->top_k, d.top_k, f->moe_every > 0 ? f->top_k : d.top_k},
    };
    for (size_t k = 0; k < sizeof(moe) / sizeof(moe[0]); k++)
        if (moe[k].given != moe[k].deflt && moe[k].given != moe[k].source) {
            if (f->moe_every > 0)
                snprintf(err, errlen, "init_from: %s = %d contradicts the source '%s' (MoE: "
                         "moe_every %d, %d experts, top-%d); the experts come from the source: "
                         "drop the flag", moe[k].key, moe[k].given, c->init_from, f->moe_every,
                         f->n_experts, f->top_k);
            else
                snprintf(err, errlen, "init_from: %s = %d, but the source '%s' is a dense model "
                         "(no experts) and its weights cannot become experts; drop the flag or "
                         "train from scratch", moe[k].key, moe[k].given, c->init_from);
            gpt_free(&full);
            return -1;
        }
    c->n_layer = f->n_layer;
    c->n_head = f->n_head;
    c->d_model = f->d_model;
    c->vocab_size = f->vocab_size;
    c->moe_every = f->moe_every;
    if (f->moe_every > 0) {
        c->n_experts = f->n_experts;
        c->top_k = f->top_k;
    }
    int source_ctx = f->seq_len;
    if (c->seq_len < source_ctx) {
        interop_cut_context(init, &full, c->seq_len);
        gpt_free(&full);
    } else {
        *init = full;
    }
    if (tr->mesh->rank == 0) {
        char experts[96] = "dense";
        if (c->moe_every > 0)
            snprintf(experts, sizeof(experts), "MoE every %d blocks, %d experts, top-%d",
                     c->moe_every, c->n_experts, c->top_k);
        log_info("init_from %s: %s | model shape from it: %d layers, %d heads, d_model %d, vocab "
                 "%d, %s; context %d of its %d positions; fresh optimizer state", c->init_from,
                 what, c->n_layer, c->n_head, c->d_model, c->vocab_size, experts, c->seq_len,
                 source_ctx);
    }
    return 0;
}

/* The shards each split reads, and a warning when both splits read the same files (a --data
 * pattern with neither "{split}" nor train/val in its file name: validation losses are then
 * training losses). */
static void log_data_splits(const trainer *tr) {
    char a[800], b[800];
    data_loader_describe(&tr->train_dl, a, sizeof(a));
    data_loader_describe(&tr->val_dl, b, sizeof(b));
    if (strcmp(a, b) == 0)
        mt_warn("data '%s': the train and val splits read the same files %s (the pattern has "
                "neither {split} nor train/val in its file name): validation measures training "
                "data", tr->cfg.data, a);
    else log_info("data: train %s | val %s", a, b);
}

/* The run's tokenizer: cfg.tokenizer, else tokenizer.bin in the data directory (or beside a data
 * pattern's files), else the init_from run's tokenizer.bin. None (vocab 0) is fine when
 * vocab_size is known (given, or from init_from): llm.c's shards carry no tokenizer; samples then
 * print token ids. 0, or -1 with err. */
static int resolve_tokenizer(trainer *tr, char *used, size_t usedlen, char *err, size_t errlen) {
    mt_config *c = &tr->cfg;
    char path[1100], msg[1024];
    used[0] = '\0';
    if (c->tokenizer[0]) {
        snprintf(used, usedlen, "%s", c->tokenizer);
        return tok_load(&tr->tok, c->tokenizer, err, errlen);
    }
    struct stat st;
    const char *tried[2];
    int nt = 0;
    if (stat(c->data, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(path, sizeof(path), "%s/tokenizer.bin", c->data);
    } else {
        char tmp[600];
        snprintf(tmp, sizeof(tmp), "%s", c->data);
        snprintf(path, sizeof(path), "%s/tokenizer.bin", dirname(tmp));
    }
    tried[nt++] = "the data directory";
    if (stat(path, &st) != 0 && c->init_from[0] && stat(c->init_from, &st) == 0 &&
        S_ISDIR(st.st_mode)) {
        snprintf(path, sizeof(path), "%s/tokenizer.bin", c->init_from);
        tried[nt++] = "the init_from run";
    }
    if (stat(path, &st) == 0) {
        if (tok_load(&tr->tok, path, msg, sizeof(msg)) != 0) {
            snprintf(err, errlen, "%.700s (is '%.300s' a directory written by `minitrain "
                     "prepare`?)", msg, c->data);
            return -1;
        }
        snprintf(used, usedlen, "%s", path);
        return 0;
    }
    if (c->vocab_size > 0) {
        if (tr->mesh->rank == 0)
            log_info("no tokenizer (none given, none in %s%s%s): training on token ids with "
                     "vocab_size %d; samples print ids (give --tokenizer FILE to decode them)",
                     tried[0], nt > 1 ? " or " : "", nt > 1 ? tried[1] : "", c->vocab_size);
        return 0;
    }
    snprintf(err, errlen, "no tokenizer for data '%.300s' (no tokenizer.bin in %s%s%s): give "
             "--tokenizer FILE (minitrain, tiktoken, Hugging Face or llm.c) or --vocab-size N",
             c->data, tried[0], nt > 1 ? " or " : "", nt > 1 ? tried[1] : "");
    return -1;
}

/* The first token id on which tokenizers a and b differ (their bytes), or -1 when they are the
 * same vocabulary. A vocabulary size difference is reported at the shorter size. */
static int64_t first_difference(const tok_tokenizer *a, const tok_tokenizer *b) {
    int na = tok_vocab_size(a), nb = tok_vocab_size(b), n = na < nb ? na : nb;
    for (int id = 0; id < n; id++) {
        size_t la, lb;
        const uint8_t *pa = tok_token_bytes(a, (uint32_t)id, &la);
        const uint8_t *pb = tok_token_bytes(b, (uint32_t)id, &lb);
        if (la != lb || (la && memcmp(pa, pb, la) != 0)) return id;
    }
    return na == nb ? -1 : n;
}

/* Fine-tuning (--init-from a run) on data tokenized by another tokenizer than the source run's:
 * its embeddings would read every id as other text. Refused unless init_any_tokenizer = 1. */
static int check_init_tokenizer(trainer *tr, const char *used, char *err, size_t errlen) {
    const mt_config *c = &tr->cfg;
    char src[1100], msg[1024];
    struct stat st;
    if (!c->init_from[0] || stat(c->init_from, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    snprintf(src, sizeof(src), "%.1000s/tokenizer.bin", c->init_from);
    if (stat(src, &st) != 0 || (used[0] && strcmp(used, src) == 0)) return 0;
    tok_tokenizer s;
    if (tok_load(&s, src, msg, sizeof(msg)) != 0) return 0; /* unreadable: nothing to compare */
    int64_t at = first_difference(&s, &tr->tok);
    char da[128], db[128];
    tok_describe(&s, da, sizeof(da));
    tok_describe(&tr->tok, db, sizeof(db));
    tok_free(&s);
    if (at < 0) return 0;
    if (c->init_any_tokenizer) {
        if (tr->mesh->rank == 0)
            mt_warn("init_from: the tokenizer %s (%s) differs from the source run's %s (%s) at id "
                    "%lld; going on (init_any_tokenizer = 1)", used[0] ? used : "(none: ids)", db,
                    src, da, (long long)at);
        return 0;
    }
    snprintf(err, errlen, "init_from: the data's tokenizer %.300s (%s) is not the source run's "
             "%.300s (%s): they differ at id %lld, so the model would read other text; prepare "
             "the data with --tokenizer %.300s, or set --init-any-tokenizer 1 to go on",
             used[0] ? used : "(none: ids)", db, src, da, (long long)at, src);
    return -1;
}

/* The ops backend for this process (config key device, env MINITRAIN_DEVICE) and, on cuda, a
 * NCCL communicator for every group of the mesh (one rank per GPU: local_rank % devices). */
static int select_device(const mt_config *c, mesh *ms, char *err, size_t errlen) {
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (ops_select(c->device, lr ? atoi(lr) : 0, err, errlen) != 0) return -1;
    if (strcmp(ops_device(), "cuda") != 0) return 0;
    comm *groups[] = {ms->world, ms->tp_group, ms->dp_group, ms->pp_group, ms->ep_group,
                      ms->edp_group, ms->embed_group, ms->cp_group, ms->dpcp_group};
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
        if (groups[i] && comm_enable_nccl(groups[i], err, errlen) != 0) return -1;
    return 0;
}

/* Open MPI's reduce-scatter reduces to the group's first rank and scatters from there: that rank
 * holds scratch of the whole send buffer, twice from 3 ranks on (measured with VmHWM; the
 * figures are in docs/parallel.md). In units of the send buffer; 0 on the other ranks. */
static double reduce_scatter_scratch(const trainer *tr) {
    if (tr->mesh->dp_rank != 0 || tr->mesh->dp == 1) return 0;
    return tr->mesh->dp > 2 ? 2 : 1;
}

/* This rank's predicted bytes, b[MEMORY_N] (train/memory.h), for trainer tr as built (model,
 * activations, ZeRO state, optimizer), runtime_bytes being the process's resident size before it
 * built them. */
static void predict_memory(const trainer *tr, double runtime_bytes, double b[MEMORY_N]) {
    const mt_config *c = &tr->cfg;
    const gpt_model *m = &tr->model;
    const double F = sizeof(float);
    memset(b, 0, MEMORY_N * sizeof(double));
    double local = (double)(m->capacity > m->num_params ? m->capacity : m->num_params);
    double transient = 0; /* what exists only inside a step (the probe runs before, freed) */
    if (c->zero >= 2) {
        double resident = (double)tr->zero.shard + (double)zero_resident_floats(&tr->zero);
        b[MEMORY_PARAMS] = F * (c->zero == 3 ? resident : local);
        b[MEMORY_GRADS] = F * resident;
        /* staging + one piece (+ zero 3's prefetch staging); the group's first rank also holds
         * MPI's reduce-scatter scratch (reduce_scatter_scratch) of the staging's size */
        double P = tr->zero.P, mp = (double)tr->zero.max_piece;
        double prefetch = c->zero == 3 ? P * mp : 0; /* the next block's gather in flight */
        b[MEMORY_COMM] = F * ((P + 1) * mp + prefetch + reduce_scatter_scratch(tr) * P * mp);
        double block = (double)zero_resident_floats(&tr->zero) - (double)zero_root_floats(&tr->zero);
        transient = b[MEMORY_COMM] + F * block * (c->zero == 3 ? 2 : 1);
    } else {
        b[MEMORY_PARAMS] = b[MEMORY_GRADS] = F * local;
        /* MPI's reduction scratch of every bucket's non-blocking all-reduce at once (they may
         * all be in flight; measured: docs/parallel.md), or ZeRO-1's reduce-scatter output */
        if (c->zero == 0 && tr->mesh->dp > 1 && tr->mesh->ep == 1) b[MEMORY_COMM] = F * local;
        if (c->zero == 1) /* and the first rank's scratch of the whole buffer, as above */
            b[MEMORY_COMM] = F * ((double)tr->dp.shard + reduce_scatter_scratch(tr) * local);
        transient = b[MEMORY_COMM];
    }
    b[MEMORY_OPTIMIZER] = 2 * F * (double)tr->opt.n;
    size_t slot = 0, scratch = 0;
    /* this rank's share of the sequence: T/cp positions (the CP shard the slots were sized for);
     * sp's sequence-local rows (N/tp) are gpt_activation_sizes's */
    int B = m->B ? m->B : c->batch_size, T = m->T ? m->T : c->seq_len / tr->mesh->cp;
    gpt_activation_sizes(m, B, T, &slot, &scratch);
    double N = (double)B * T, slots = m->n_slots > 0 ? m->n_slots : 1;
    double Nl = c->sp ? N / c->tp : N; /* rows of the residual stream that crosses stages */
    b[MEMORY_ACTIVATIONS] = F * slot * slots;
    if (tr->mesh->pp > 1) b[MEMORY_COMM] += F * Nl * c->d_model; /* the received input gradient */
    if (tr->mesh->cp > 1) /* ring attention's backward: K,V and their gradients, twice each */
        b[MEMORY_COMM] += F * 8 * N * (c->d_model / c->tp);
    /* the sgemm probe's a, b, c, as far as they exceed the step's transient buffers */
    double probe = 3 * F * PEAK_PROBE_N * PEAK_PROBE_N;
    b[MEMORY_WORKSPACE] = F * scratch + slots * 3 * N * sizeof(int) +
                          (probe > transient ? probe - transient : 0);
    if (c->ckpt_every != 0) b[MEMORY_CHECKPOINT] = (c->ckpt_async ? 3 : 2) * F * m->num_params;
    b[MEMORY_RUNTIME] = runtime_bytes > 0 ? runtime_bytes : 0;
    for (int i = 0; i < MEMORY_TOTAL; i++) b[MEMORY_TOTAL] += b[i];
}

/* The memory budget before step 1 (train/memory.h): every rank's prediction to every rank (rank
 * 0 prints the table and keeps it for run.db), and the refusal when a rank's total exceeds
 * memory_limit — on every rank at once, so the job ends together. rss0: the process's resident
 * bytes before the trainer allocated anything. Collective over the world. 0 or -1 with err. */
static int check_memory(trainer *tr, double rss0, int local_ranks, char *err, size_t errlen) {
    const mt_config *c = &tr->cfg;
    const mesh *ms = tr->mesh;
    if (memory_limit_bytes(c->memory_limit, local_ranks, 0, &tr->memory_limit, err, errlen) != 0)
        return -1;
    predict_memory(tr, rss0, tr->memory);
    int W = ms->world_size;
    double *all = callocCheck((size_t)W * MEMORY_N, sizeof(double));
    memcpy(all + (size_t)ms->rank * MEMORY_N, tr->memory, sizeof(tr->memory));
    comm_all_reduce_f64(ms->world, all, (size_t)W * MEMORY_N, COMM_SUM);
    int worst = 0;
    for (int r = 1; r < W; r++)
        if (all[(size_t)r * MEMORY_N + MEMORY_TOTAL] > all[(size_t)worst * MEMORY_N + MEMORY_TOTAL])
            worst = r;
    char a[32], b[32];
    if (ms->rank == 0) {
        log_info("memory budget per rank, predicted (zero %d, recompute %s, limit %s):", c->zero,
                 c->recompute, tr->memory_limit > 0 ? memory_format(tr->memory_limit, a, sizeof(a))
                                                     : "off");
        for (int r = 0; r < W && r < 8; r++) {
            char line[512];
            int n = snprintf(line, sizeof(line), "  rank %d:", r);
            for (int i = 0; i < MEMORY_N && n < (int)sizeof(line); i++)
                n += snprintf(line + n, sizeof(line) - n, "%s %s %s", i ? " |" : "",
                              memory_names[i],
                              memory_format(all[(size_t)r * MEMORY_N + i], b, sizeof(b)));
            log_info("%s", line);
        }
        if (W > 8) log_info("  ... %d more ranks; the largest total is rank %d's", W - 8, worst);
    }
    double top = all[(size_t)worst * MEMORY_N + MEMORY_TOTAL];
    if (ms->rank == 0) tr->memory_ranks = all;
    else free(all);
    if (tr->memory_limit > 0 && top > tr->memory_limit) {
        snprintf(err, errlen, "the memory budget of rank %d, %s, exceeds memory_limit %s "
                 "(zero 3, recompute = full, a larger dp or a smaller batch_size shrink it; "
                 "memory_limit = off skips the check)", worst, memory_format(top, a, sizeof(a)),
                 memory_format(tr->memory_limit, b, sizeof(b)));
        return -1;
    }
    return 0;
}

/* What context parallelism (cp > 1) does not combine with, refused before any work with one
 * line each: 2·cp must divide seq_len (parallel/cp.h); ring attention runs on host memory (cpu
 * device); the MoE statistics, ZeRO-1 shards and adversarial training are reduced over the
 * data-parallel group alone, not yet over dp x cp. 0 or -1 with err. */
/* 1 when the layout's pipeline runs 1F1B or GPipe (or there is no pipeline): the schedules that
 * sp and cp are implemented with. */
static int plain_pipeline(const mt_config *c) {
    return c->pp <= 1 || !strcmp(c->pp_schedule, "1f1b") || !strcmp(c->pp_schedule, "gpipe");
}

static int check_cp(const mt_config *c, char *err, size_t errlen) {
    if (cp_check(c->seq_len, c->cp, err, errlen) != 0) return -1;
    if (c->cp == 1) return 0;
    const char *why = strcmp(ops_device(), "cpu") != 0 ? "device = cpu (ring attention runs "
                                                         "on host memory)"
                    : c->moe_every > 0 ? "a dense model (moe_every = 0)"
                    : c->zero ? "zero = 0"
                    : strcmp(c->adv_train, "none") != 0 ? "adv_train = none"
                    : !plain_pipeline(c) ? "pp_schedule = 1f1b or gpipe (the interleaved and "
                                           "zb-h1 drivers do not carry the ring's shards)"
                    : NULL;
    if (!why) return 0;
    snprintf(err, errlen, "cp %d needs %s: not implemented together with context parallelism",
             c->cp, why);
    return -1;
}

/* Sequence parallelism (sp = 1) shards inside the TP group, so it needs tp > 1 dividing
 * seq_len; the MoE layer, ZeRO-1, adversarial training (probes) and context parallelism are not
 * implemented with it. 0, or -1 with one line in err. */
static int check_sp(const mt_config *c, char *err, size_t errlen) {
    if (!c->sp) return 0;
    if (c->tp < 2) {
        snprintf(err, errlen, "sp = 1 needs tp > 1: sequence parallelism shards the sequence "
                 "inside the tensor-parallel group (tp %d)", c->tp);
        return -1;
    }
    if (c->seq_len % c->tp != 0) {
        snprintf(err, errlen, "sp = 1 needs tp (%d) to divide seq_len (%d): each TP rank holds "
                 "seq_len/tp positions", c->tp, c->seq_len);
        return -1;
    }
    const char *why = c->cp > 1 ? "cp = 1" : c->moe_every > 0 ? "a dense model (moe_every = 0)"
                    : c->zero ? "zero = 0" : strcmp(c->adv_train, "none") != 0 ? "adv_train = none"
                    : !plain_pipeline(c) ? "pp_schedule = 1f1b or gpipe" : NULL;
    if (!why) return 0;
    snprintf(err, errlen, "sp = 1 needs %s: not implemented together with sequence parallelism",
             why);
    return -1;
}

/* Activation recompute and ZeRO-2/3 (train/zero.h) are implemented for one model chunk per stage
 * with the whole sequence on the rank: recompute's work copy is one per stage, which ZB-H1's
 * deferred weight-gradient pass W would read after another block overwrote it, and the chunked
 * schedules interleave blocks of different chunks; ZeRO-2/3's per-block reduce-scatter runs in
 * grads_ready, which W does not call, and zero 3's prefetch walks one chunk's blocks. cp and sp
 * already refuse any zero (check_cp, check_sp). 0, or -1 with one line in err. */
static int check_memwall(const mt_config *c, char *err, size_t errlen) {
    int recompute = strcmp(c->recompute, "none") != 0;
    if (recompute && (c->cp > 1 || c->sp)) {
        snprintf(err, errlen, "recompute = %s with %s is not supported (the recomputation "
                 "runs the whole-sequence attention and rows); use recompute = none", c->recompute,
                 c->cp > 1 ? "cp > 1" : "sp = 1");
        return -1;
    }
    if (!plain_pipeline(c) && (recompute || c->zero >= 2)) {
        if (recompute)
            snprintf(err, errlen, "recompute = %s with pp_schedule = %s is not supported (the "
                     "one shared recompute copy would be overwritten before the chunk's or W's "
                     "use); use pp_schedule = 1f1b or gpipe", c->recompute, c->pp_schedule);
        else
            snprintf(err, errlen, "zero = %d with pp_schedule = %s is not supported (the "
                     "per-block reduce-scatter and gather follow one chunk's backward); use "
                     "pp_schedule = 1f1b or gpipe, or zero = 1", c->zero, c->pp_schedule);
        return -1;
    }
    return 0;
}

/* trainer_init's body; *init receives the --init-from weights (freed by the caller). */
static int init_all(trainer *tr, const mt_config *cfg, mesh *ms, gpt_model *init, char *err,
                    size_t errlen) {
    double rss0 = memory_rss_bytes(0); /* the process before the trainer allocates */
    memset(tr, 0, sizeof(*tr));
    tr->cfg = *cfg;
    tr->mesh = ms;
    mt_config *c = &tr->cfg;
    /* threads: all cores, shared by the ranks on this node */
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int local_ranks = local && atoi(local) > 0 ? atoi(local) : 1;
    int threads = c->threads > 0 ? c->threads : omp_get_num_procs() / local_ranks;
    if (threads < 1) threads = 1;
    ops_set_threads(threads);
    if (select_device(c, ms, err, errlen) != 0) return -1;
    if (c->microbatches > 0) { /* --microbatches M fixes the microbatch size instead */
        if (c->global_batch % (c->microbatches * ms->dp) != 0) {
            snprintf(err, errlen, "global_batch (%d) must be a multiple of microbatches x dp = "
                     "%d x %d", c->global_batch, c->microbatches, ms->dp);
            return -1;
        }
        c->batch_size = c->global_batch / (c->microbatches * ms->dp);
    }
    if (c->global_batch % (c->batch_size * ms->dp) != 0) {
        snprintf(err, errlen, "global_batch (%d) must be a multiple of batch_size x dp = %d x %d "
                 "(each data-parallel rank runs whole microbatches)", c->global_batch,
                 c->batch_size, ms->dp);
        return -1;
    }
    if (c->d_model % c->tp != 0 || c->n_head % c->tp != 0) {
        snprintf(err, errlen, "tp (%d) must divide n_head (%d) and d_model (%d): tensor "
                 "parallelism splits attention by heads", c->tp, c->n_head, c->d_model);
        return -1;
    }
    if (check_cp(c, err, errlen) != 0 || check_sp(c, err, errlen) != 0 ||
        check_memwall(c, err, errlen) != 0)
        return -1;

    /* initial weights (--init-from): they fix the model's shape */
    char msg[512];
    if (c->init_from[0] && load_init(tr, init, err, errlen) != 0) return -1;

    /* data, then the tokenizer: a missing --data path is "no shard files match", not "no
     * tokenizer" (the tokenizer is looked for beside the data) */
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
    if (data_loader_open(&tr->val_dl, c->data, "val", c->seq_len, (uint64_t)c->seed, 0, msg,
                         sizeof(msg)) != 0) {
        snprintf(err, errlen, "%s", msg);
        return -1;
    }
    if (tr->mesh->rank == 0) log_data_splits(tr);
    char tok_used[1100];
    if (resolve_tokenizer(tr, tok_used, sizeof(tok_used), err, errlen) != 0) return -1;
    if (check_init_tokenizer(tr, tok_used, err, errlen) != 0) return -1;
    if (tr->mesh->rank == 0 && tok_used[0]) {
        char d[128];
        log_info("tokenizer: %s (%s)", tok_used, tok_describe(&tr->tok, d, sizeof(d)));
    }
    int tok_vocab = tok_vocab_size(&tr->tok);
    if (c->vocab_size == 0) c->vocab_size = tok_vocab;
    if (c->vocab_size < tok_vocab) {
        snprintf(err, errlen, "vocab_size %d is smaller than the tokenizer's %d", c->vocab_size,
                 tok_vocab);
        return -1;
    }
    if (data_loader_check_vocab(&tr->train_dl, c->vocab_size, msg, sizeof(msg)) != 0) {
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

    if (init_model(tr, init->params ? init : NULL, 1, err, errlen) != 0) return -1;
    if (check_memory(tr, rss0, local_ranks, err, errlen) != 0) return -1; /* before any work */
    if (init_run(tr, err, errlen) != 0) return -1;

    /* accounting */
    tr->flops_per_token = flops_per_token(&tr->model.cfg); /* whole model; MoE: active experts */
    tr->recompute_flops_per_token = flops_recompute_per_token(&tr->model.cfg,
                                                              tr->model.recompute);
    tr->peak_measured = measured_peak(tr, threads, local_ranks);
    tr->peak_ranks = local_ranks;
    /* per rank: the ranks on this node share its cores (model/flops.h peak_rank_cores) */
    tr->peak_theoretical = peak_theoretical_rank(threads, local_ranks, tr->peak_desc,
                                                       sizeof(tr->peak_desc));
    if (strcmp(ops_device(), "cuda") == 0) /* a GPU: the datasheet's peak, by device name */
        tr->peak_theoretical = peak_gpu_describe(ops_device_name(), tr->peak_desc,
                                                       sizeof(tr->peak_desc));
    tr->threads = threads;
    tr->last_val_loss = NAN;
    return 0;
}

int trainer_init(trainer *tr, const mt_config *cfg, mesh *ms, char *err, size_t errlen) {
    gpt_model init;
    memset(&init, 0, sizeof(init));
    int rc = init_all(tr, cfg, ms, &init, err, errlen);
    if (init.params) gpt_free(&init);
    return rc;
}

int trainer_init_weights(trainer *tr, const mt_config *cfg, mesh *ms, const gpt_model *weights,
                         char *err, size_t errlen) {
    memset(tr, 0, sizeof(*tr));
    tr->cfg = *cfg;
    tr->mesh = ms;
    mt_config *c = &tr->cfg;
    const gpt_config *w = &weights->cfg;
    c->n_layer = w->n_layer;
    c->n_head = w->n_head;
    c->d_model = w->d_model;
    c->seq_len = w->seq_len;
    c->vocab_size = w->vocab_size;
    c->moe_every = w->moe_every;
    if (w->moe_every > 0) {
        c->n_experts = w->n_experts;
        c->top_k = w->top_k;
    }
    c->batch_size = c->global_batch = 1;
    c->tp = c->pp = c->dp = c->ep = c->cp = 1;
    c->zero = c->sp = 0;
    if (ms->world_size != 1) {
        snprintf(err, errlen, "trainer_init_weights runs in one process");
        return -1;
    }
    if (init_model(tr, weights, 0, err, errlen) != 0) return -1;
    tr->last_val_loss = NAN;
    return init_run(tr, err, errlen);
}

void trainer_free(trainer *tr) {
    db_shipper_stop(tr->shipper, 10.0); /* a last pass: the run's end row and final metrics */
    tr->shipper = NULL;
    if (tr->db) rundb_close(tr->db);
    free(tr->model.moe_load);
    tr->model.moe_load = NULL;
    free(tr->memory_ranks);
    zero_free(&tr->zero, &tr->model); /* its flat buffers are not the model's to free */
    free(tr->pp_slot);
    gpt_free(&tr->model);
    optim_free(&tr->opt);
    dp_free(&tr->dp);
    data_loader_close(&tr->train_dl);
    data_loader_close(&tr->val_dl);
    tok_free(&tr->tok);
    memset(tr, 0, sizeof(*tr));
}
