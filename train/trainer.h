/*
 * train/trainer.h — the training loop and its hooks.
 *
 * One optimizer step = grad_accum microbatches of (batch_size, seq_len) forward+backward, the
 * global gradient norm and clipping, an AdamW step with the scheduled LR, then a metrics row in
 * run.db, a log/progress line and the hooks that are due. Hooks (eval, sample, and later
 * checkpoint and robustness) are registered by whoever wires the `train` subcommand, so train/
 * never includes safety/ or sched/.
 *
 * Data order: sequence number i of the whole run is window data_loader_get(i); step s consumes
 * sequences [s·global_batch, (s+1)·global_batch). That makes the data position a pure function
 * of the step, which is what resume and data-parallel slicing need.
 */
#ifndef MT_TRAINER_H
#define MT_TRAINER_H

#include <stdint.h>

#include "core/config.h"
#include "core/rng.h"
#include "core/rundb.h"
#include "db/db.h"
#include "parallel/dp.h"
#include "parallel/mesh.h"
#include "parallel/pp.h"
#include "text/data.h"
#include "model/model.h"
#include "model/optim.h"
#include "text/tokenizer.h"
#include "train/memory.h"
#include "train/zero.h"

typedef struct trainer trainer;

/* A hook runs after optimizer step `step` (1-based count of completed steps) when
 * step % every == 0, and once more at the end of the run with final = 1. */
typedef void (*trainer_hook_fn)(trainer *tr, int step, int final, void *user);

#define TRAINER_MAX_HOOKS 16

/* A replacement for one microbatch's forward + backward (pp = 1), e.g. adversarial training
 * (safety/robust.h), installed by whoever wires the `train` subcommand. It must accumulate the
 * microbatch's parameter gradients, scaled by dloss (the gradient of the mean over the global
 * batch: 1 / (global_batch · T)), into tr->model.grads, as gpt_forward + gpt_backward do, and
 * return the mean token loss it trained on. seq0 is the global index of the microbatch's first
 * sequence (a seed that does not depend on the layout). The trainer sets model.grads_ready before the call
 * (the last microbatch's buckets start reducing during its backward): only the function's LAST
 * full backward may run with it set. */
typedef float (*trainer_micro_fn)(trainer *tr, const int *inp, const int *tgt, int B, int T,
                                  uint64_t seq0, float dloss, void *user);

struct trainer {
    mt_config cfg;
    mesh *mesh; /* the rank layout (single process: world 1, all degrees 1); not owned */
    char config_json[8192];
    gpt_model model;
    optim_adamw opt;
    tok_tokenizer tok;
    data_loader train_dl, val_dl;
    rundb *db;
    int64_t run_id;
    db_shipper *shipper; /* rank 0, when config db / $MINITRAIN_DB names a database (db/db.h) */
    dp_reducer dp; /* data-parallel gradient reduction (and ZeRO-1 shards) */
    zero_state zero; /* ZeRO-2/3 units and shards (cfg.zero >= 2; train/zero.h) */
    int threads;   /* CPU threads of this rank */
    int grad_accum; /* microbatches per step on each data-parallel rank (pipeline: M) */
    int stage_begin[257]; /* pipeline stage s holds layers [stage_begin[s], stage_begin[s+1])
                           * (interleaved: its chunk 0; chunk j is shifted by j·pp·chunk size) */
    pp_schedule schedule;
    int chunks;   /* model chunks per pipeline stage (interleaved: virtual_stages, else 1) */
    int *pp_slot; /* (chunks·grad_accum) activation slot of (microbatch i, chunk c) at c·M + i */
    double last_idle_s; /* pipeline: time this stage waited in point-to-point calls last step */
    int last_in_flight; /* pipeline: most (microbatch, chunk) activations held last step */
    int step; /* optimizer steps completed */
    /* accounting */
    double memory[MEMORY_N];    /* this rank's predicted bytes (train/memory.h) */
    double *memory_ranks;       /* rank 0: (world, MEMORY_N) every rank's prediction */
    double memory_limit;        /* bytes per rank (0 = no check) */
    double flops_per_token;           /* the model's (MFU) */
    double recompute_flops_per_token; /* what activation recompute adds (HFU counts it too) */
    double peak_measured, peak_theoretical; /* FLOP/s; theoretical -1 if unknown */
    char peak_desc[256];
    int peak_ranks; /* ranks sharing this node: with threads and the CPU, the peak cache's key */
    double t_start;
    /* last values, for hooks and the final summary */
    float last_loss, last_val_loss, last_lr;
    double last_norm, last_tokens_per_s, last_mfu, last_hfu;
    double last_step_s; /* wall time of the last optimizer step, seconds */
    double last_aux_loss; /* MoE: mean auxiliary loss of the last step */
    double last_comm_s; /* of which blocking communication */
    double last_cp_floats; /* context parallel: floats this rank sent around the ring last step */
    rng_state sample_rng;
    int stop_requested; /* set by a hook (e.g. a failed checkpoint): end cleanly after this step */
    struct {
        const char *name;
        int every;
        trainer_hook_fn fn;
        void *user;
    } hooks[TRAINER_MAX_HOOKS];
    int n_hooks;
    trainer_micro_fn micro_fn; /* NULL = gpt_forward + gpt_backward */
    void *micro_user;
    /* called before anything modifies parameters or optimizer state (the optimizer step, a
     * fault that poisons the weights): an asynchronous checkpoint copies them meanwhile
     * (train/checkpoint.c); NULL = nothing to wait for */
    void (*before_update)(void *user);
    void *before_update_user;
    /* this rank's leaf switch from the placement, set by whoever wires `train` (cmd/train.c:
     * cfg.topology) before checkpoint_create; "" = unknown. $MINITRAIN_LEAF overrides it. */
    char leaf[64];
};

/* Call tr->before_update (if set): from here on the caller may modify parameters, AdamW m and v. */
void trainer_before_update(trainer *tr);

/* Resolve the data/tokenizer, build and initialise the model and optimizer, open run.db and
 * measure the sgemm peak. Tokenizer: cfg.tokenizer, else tokenizer.bin of the data directory,
 * else of the init_from run; with none, vocab_size must be given (llm.c's shards). init_from:
 * the model's shape and weights come from it (model/interop.h: a run, a model file, llm.c, Hugging
 * Face), optimizer state is fresh; a seq_len below its context keeps the first seq_len positions.
 * Returns 0, or -1 with a user-facing message in err (missing data directory, bad shards, a model
 * that does not fit the tokenizer, unreadable init weights, ...). */
int trainer_init(trainer *tr, const mt_config *cfg, mesh *ms, char *err, size_t errlen);

/* A trainer around weights that are already in memory, without data or tokenizer (`ckpt import`
 * saves its step-0 checkpoint through the checkpointer training uses): the model shape comes from
 * weights (copied), the optimizer state is fresh (zero m, v, t), run.db gets a run row in
 * cfg.run_dir. No activations, no sgemm probe; one process. 0 or -1 with err. */
int trainer_init_weights(trainer *tr, const mt_config *cfg, mesh *ms, const gpt_model *weights,
                         char *err, size_t errlen);

/* Register a hook; every <= 0 means "only at the end". */
void trainer_add_hook(trainer *tr, const char *name, int every, trainer_hook_fn fn, void *user);

/* Install fn as every microbatch's forward + backward (NULL restores the plain pass). Needs a
 * layout without pipeline parallelism (checked). */
void trainer_set_microbatch(trainer *tr, trainer_micro_fn fn, void *user);

/* Run steps until cfg.steps (or cfg.stop_after). Returns a process exit code: MT_EXIT_OK, or
 * MT_EXIT_NONFINITE if the loss became NaN/Inf (the event is in run.db). */
int trainer_run(trainer *tr);

/* Mean validation loss over cfg.eval_batches microbatches (the same windows every call). */
float trainer_eval(trainer *tr);

/* Optimizer state in the model's local (this TP/PP shard's) flat layout, whatever the ZeRO
 * stage: gather copies this rank's full m and v (each m.num_params floats) into m_out/v_out
 * (collective over the data-parallel group when ZeRO-1 shards the state); scatter is the
 * inverse (every DP rank passes the same full arrays and keeps its shard). Checkpoints use these
 * so their files do not depend on dp or zero. */
void trainer_gather_optimizer_state(trainer *tr, float *m_out, float *v_out);
void trainer_scatter_optimizer_state(trainer *tr, const float *m_in, const float *v_in);

/* ZeRO-3 keeps only the running block's parameters resident: trainer_params_gather makes
 * tr->model.params hold every parameter (collective over the data-parallel group), for whoever
 * reads them whole (checkpoint snapshot, sample, save); trainer_params_release drops them again;
 * trainer_params_loaded: the whole params were just written (a resume), take them into the shard.
 * No-ops below ZeRO-3. */
void trainer_params_gather(trainer *tr);
void trainer_params_release(trainer *tr);
void trainer_params_loaded(trainer *tr);

/* Built-in hooks: validation loss (logged to run.db), and a printed sample. */
void trainer_hook_eval(trainer *tr, int step, int final, void *user);
void trainer_hook_sample(trainer *tr, int step, int final, void *user);

/* Save the model to RUN_DIR/model.safetensors and copy the tokenizer (if any) to
 * RUN_DIR/tokenizer.bin.
 * Returns 0 or -1 with err. */
int trainer_save_model(trainer *tr, char *err, size_t errlen);

/* run.db events of the run's outcome (core/events.h; no-op without a database): "end"
 * {status, step, message (omitted when NULL)} and "error" {error, step}. status is the run's
 * status (completed|failed|stopped). */
void trainer_log_end(trainer *tr, const char *status, const char *message);
void trainer_log_error(trainer *tr, const char *error);

/* The loop's inner pieces, shared by train/trainer.c and train/trainer_pipe.c (the pipeline
 * half of a step); not for callers outside train/. */
/* Step s's microbatches through the pipeline (pp > 1; parallel/pp.c drives the order of the
 * schedule tr->schedule), the measured timeline of the steps that log (event pp_timeline, one per
 * stage, when (s + 1) % log_every == 0 or s + 1 == end), and the tied embedding's two gradient
 * copies summed over the embedding group. inp, tgt: (batch_size, seq_len / cp) scratch.
 * Returns the step's loss sum over microbatches (the mean token loss of each; every stage gets
 * it). Collective over the pipeline group. */
double trainer_pipe_step(trainer *tr, int s, int end, int *inp, int *tgt);

/* Debug check (MINITRAIN_PP_CHECK=1): the first and last stages hold copies of the tied
 * embedding; after every optimizer step they must be identical. Prints the largest difference,
 * seen from the first stage. Collective over the embedding group. */
void trainer_pipe_tied_check(trainer *tr);

/* Sequences [seq, seq + B) of dl into inp, tgt: (B, seq_len / cp) ints each — with context
 * parallelism this rank's head-tail chunks of each sequence (parallel/cp.h). */
void trainer_load_batch(trainer *tr, data_loader *dl, uint64_t seq, int B, int *inp, int *tgt);

/* The model's grads_ready callback (model/model.h): the gradients from offset on are final for
 * this step; reduces the DP buckets they complete (ZeRO-2/3: reduce-scatters them). user: the
 * trainer. */
void trainer_grads_ready(void *user, size_t offset);

void trainer_free(trainer *tr);

#endif /* MT_TRAINER_H */
