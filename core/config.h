/*
 * core/config.h — the training configuration: one struct, one table of keys.
 *
 * Every key lives in a single table (core/config.c, in core/keytab.h's format) with its type,
 * default, range and help text, so the INI loader (inih), the command-line overrides
 * (`--key value`), validation, `--help` and the JSON dump recorded in run.db all read the same
 * list and cannot drift apart.
 * INI files may use [sections] for readability; keys are global and the section is ignored.
 * Unknown keys and out-of-range values are refused by name.
 */
#ifndef MT_CONFIG_H
#define MT_CONFIG_H

#include <stddef.h>

typedef struct {
    /* data */
    char data[512];    /* token shards: a directory or a glob pattern (text/data.h) */
    char tokenizer[512]; /* tokenizer file ("" = DATA/tokenizer.bin, see trainer_init) */
    char init_from[512]; /* initial weights ("" = random init, see trainer_init) */
    int init_any_tokenizer; /* 1: init_from may use another tokenizer than the source run's */
    char run_dir[512]; /* default runs/<config name> */
    char name[128];    /* run name; default: config file's base name */
    /* model (GPT-2 architecture) */
    int n_layer;
    int n_head;
    int d_model;
    int seq_len;
    int vocab_size; /* 0 = from the tokenizer in `data` */
    /* batch */
    int batch_size;   /* sequences per microbatch (per data-parallel rank) */
    int global_batch; /* sequences per optimizer step; = batch_size * dp * grad_accum */
    /* optimisation */
    int steps;
    float lr;
    float min_lr;
    int warmup_steps;
    float weight_decay;
    float grad_clip; /* 0 = off */
    float beta1, beta2, eps;
    /* runtime */
    int seed;
    int threads; /* 0 = all cores */
    int log_every;
    int eval_every; /* 0 = only at the end */
    int eval_batches;
    int sample_every; /* 0 = only at the end */
    int sample_tokens;
    int stop_after; /* end cleanly after this step (0 = run to `steps`) */
    /* parallel layout (parallel runtime issues) */
    int tp, pp, dp, ep, zero;
    int cp; /* context-parallel degree: the sequence split over a ring (parallel/cp.h) */
    int sp; /* 1: Megatron sequence parallelism inside the TP group (parallel/sp.h) */
    /* mixture of experts */
    int moe_every;         /* every N-th block's MLP is a MoE layer (0 = dense model) */
    int n_experts, top_k;
    float capacity_factor; /* >= 1, or 0 = dropless */
    float aux_loss_coef, z_loss_coef;
    int microbatches;     /* pipeline microbatches per step (0 = global_batch / (batch_size·dp)) */
    char pp_layers[256];  /* layers per stage, e.g. "3,4" ("" = even split) */
    char pp_schedule[16]; /* 1f1b | gpipe | interleaved | zb-h1 */
    int virtual_stages;   /* model chunks per pipeline stage (interleaved) */
    char device[16];      /* cpu | guard | cuda: the ops backend (ops/ops.h) */
    float comm_timeout;  /* seconds before the collective watchdog aborts the job */
    float bucket_mb;     /* data-parallel gradient bucket size */
    char recompute[16];    /* none | selective | full (model/model.h gpt_recompute) */
    char memory_limit[32]; /* bytes per rank with K/M/G/T suffix | auto | off (train/memory.h) */
    /* checkpointing */
    int ckpt_every;         /* 0 = no periodic checkpoints; CONFIG_CKPT_AUTO = "auto" */
    int ckpt_async;         /* 1 = snapshot then write in a background thread */
    int ckpt_keep;          /* keep the last K committed checkpoints per tier */
    int ckpt_major_every;   /* also keep every M-th step (0 = none) */
    int ckpt_tier0;         /* 1 = also write to /dev/shm/minitrain/<run>/ (tier 0) */
    char ckpt_tier0_root[512]; /* tier 0 base ("" = $MINITRAIN_SHM_DIR or /dev/shm/minitrain);
                                * %n / $SLURMD_NODENAME = the node name (per-node tier 0) */
    int ckpt_replicas;      /* 1 = each rank's tier 0 also in a buddy's memory on another node */
    char topology[512];     /* topology file (docs/placement.md): hosts' leaf switches pick
                             * tier-0 buddies behind another leaf ("" = none) */
    char ckpt_durable[512]; /* tier 2 directory, copied in the background ("" = none) */
    char ckpt_object[512];  /* tier 3 s3://bucket/prefix, archived in the background ("" = none) */
    int keep_object;        /* archived steps kept in tier 3 */
    char s3_endpoint[256];  /* object store endpoint ("" = $AWS_ENDPOINT_URL) */
    char s3_region[64];     /* SigV4 region ("" = $AWS_REGION or us-east-1) */
    int s3_part_mb;         /* multipart part size, MiB */
    float s3_max_mb_s;      /* upload bandwidth cap, MB/s (0 = none) */
    char resume[32];        /* auto | no | STEP */
    char ckpt_on_error[16]; /* stop | continue */
    /* records: the team's PostgreSQL (db/db.h) */
    char db[512]; /* libpq URL run.db's rows are shipped to ("" = $MINITRAIN_DB, else none) */
    /* resilience */
    char fault[1024]; /* fault specs, ';'-separated (--fault may be repeated) */
    /* robustness evaluation during training and adversarial training (safety/robust.h) */
    int robust_every;       /* evaluate every N steps and at the end (0 = off) */
    char robust_attack[16]; /* fgsm | pgd | hotflip */
    char robust_norm[8];    /* l2 | linf */
    char robust_eps[128];   /* comma list of ε relative to the mean token-embedding row norm */
    int robust_steps;       /* PGD ascent steps K */
    int robust_flips;       /* HotFlip: token swaps per sequence */
    int robust_batches;     /* validation microbatches (of batch_size) evaluated */
    char adv_train[16];     /* none | fgsm | pgd | freelb */
    float adv_eps;          /* relative ε of adversarial training */
    int adv_steps;          /* ascent steps K of pgd / freelb */
    char adv_norm[8];       /* l2 | linf */
    float mtbf_s;     /* job MTBF assumed by ckpt_every = auto (0 = observed), s */
} mt_config;

/* ckpt_every = auto: the interval follows Young/Daly sqrt(2·C·M) from the measured checkpoint
 * stall C and the MTBF M (sched/hooks.h, sched_ckpt_auto_hook). */
#define CONFIG_CKPT_AUTO (-1)

/* Fill cfg with every key's default. */
void config_defaults(mt_config *cfg);

/* Load an INI file on top of cfg. Returns 0, or -1 with a message naming the file, line and key
 * in err (unknown key, unparsable or out-of-range value, unreadable file). */
int config_load_ini(mt_config *cfg, const char *path, char *err, size_t errlen);

/* Set one key from text (command-line override). Dashes in key are read as underscores.
 * Returns 0, or -1 with a message (unknown key, bad value) in err. */
int config_set(mt_config *cfg, const char *key, const char *value, char *err, size_t errlen);

/* 1 if key names a config key (dashes read as underscores). */
int config_has_key(const char *key);

/* Cross-key checks after all sources are applied (d_model % n_head, global_batch divisibility,
 * min_lr <= lr, ...). Returns 0 or -1 with the first problem in err. */
int config_validate(const mt_config *cfg, char *err, size_t errlen);

/* Write the resolved config as a JSON object into buf. Returns bytes needed (like snprintf). */
size_t config_to_json(const mt_config *cfg, char *buf, size_t cap);

/* Print every key with its default and help text (for `train --help`). */
void config_print_help(void);

#endif /* MT_CONFIG_H */
