/*
 * core/config.c — the key table behind mt_config, the INI loader (inih) and overrides.
 *
 * One row per key of core/keytab.h's table format: name, type, offset into mt_config, range,
 * help, default. Parsing, range checks and --help are the engine's (core/keytab.c); this file adds
 * the three keys with a rule of their own (fault is a list, name a plain name, ckpt_every takes
 * "auto"), the INI file and the cross-key checks, and the JSON dump walks the same rows.
 */
#include "core/config.h"

#include <cjson/cJSON.h>
#include <ini.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/keytab.h"

#define KI(field, d, lo, hi, h) {#field, KEYTAB_INT, KEYTAB_OFF(mt_config, field), lo, hi, NULL, h, #d}
#define KF(field, d, lo, hi, h) \
    {#field, KEYTAB_FLOAT, KEYTAB_OFF(mt_config, field), lo, hi, NULL, h, #d}
#define KS(field, d, h) \
    {#field, KEYTAB_CHARS, KEYTAB_OFF(mt_config, field), 0, sizeof(((mt_config *)0)->field), NULL, \
     h, d}

static const keytab_key KEYS[] = {
    KS(data, "", "token shards: a directory (`minitrain prepare`'s, or llm.c's *_train*.bin / "
                 "*_val*.bin) or a glob pattern"),
    KS(tokenizer, "", "tokenizer file (minitrain, tiktoken, Hugging Face, llm.c; default "
                      "DATA/tokenizer.bin)"),
    KS(init_from, "", "start from these weights with fresh optimizer state: a run directory, "
                      "a model.safetensors, an llm.c model file or a Hugging Face directory"),
    KI(init_any_tokenizer, 0, 0, 1, "1 = allow init_from with a tokenizer other than the source "
                                   "run's (refused otherwise: its ids would mean other text)"),
    KS(run_dir, "", "run directory (default runs/<config name>)"),
    KS(name, "", "run name (default: the config file's base name)"),
    KI(n_layer, 4, 1, 1024, "transformer blocks"),
    KI(n_head, 4, 1, 1024, "attention heads"),
    KI(d_model, 128, 1, 65536, "embedding width"),
    KI(seq_len, 64, 1, 1 << 20, "sequence length T (context)"),
    KI(vocab_size, 0, 0, 1 << 30, "vocabulary size; 0 = from the tokenizer"),
    KI(batch_size, 8, 1, 1 << 20, "sequences per microbatch per data-parallel rank"),
    KI(global_batch, 8, 1, 1 << 24, "sequences per optimizer step (grad accumulation fills it)"),
    KI(steps, 100, 1, 1 << 30, "optimizer steps (the LR schedule spans them)"),
    KF(lr, 1e-3, 0, 10, "peak learning rate"),
    KF(min_lr, 1e-4, 0, 10, "floor of the cosine decay"),
    KI(warmup_steps, 10, 0, 1 << 30, "linear warm-up steps"),
    KF(weight_decay, 0.1, 0, 10, "AdamW decoupled weight decay (2-D weights only)"),
    KF(grad_clip, 1.0, 0, 1e9, "global gradient-norm clip (0 = off)"),
    KF(beta1, 0.9, 0, 0.999999, "AdamW beta1"),
    KF(beta2, 0.95, 0, 0.999999, "AdamW beta2"),
    KF(eps, 1e-8, 0, 1, "AdamW epsilon"),
    KI(seed, 1337, 0, 2147483647, "seed for weights, data order and sampling"),
    KI(threads, 0, 0, 1024, "CPU threads per rank (0 = all cores / ranks)"),
    KI(log_every, 1, 1, 1 << 30, "print a log line every N steps"),
    KI(eval_every, 0, 0, 1 << 30, "validation loss every N steps (0 = at the end only)"),
    KI(eval_batches, 8, 1, 1 << 20, "microbatches per data-parallel rank per validation pass"),
    KI(sample_every, 0, 0, 1 << 30, "print a sample every N steps (0 = at the end only)"),
    KI(sample_tokens, 128, 0, 1 << 20, "tokens per printed sample"),
    KI(stop_after, 0, 0, 1 << 30, "stop cleanly after this step (0 = run all steps)"),
    KI(tp, 1, 1, 1024, "tensor-parallel degree"),
    KI(pp, 1, 1, 256, "pipeline-parallel degree"),
    KI(cp, 1, 1, 1024, "context-parallel degree (ring attention; 2*cp divides seq_len)"),
    KI(sp, 0, 0, 1, "sequence parallelism inside the TP group (1 = on; needs tp > 1)"),
    KI(dp, 0, 0, 1 << 20, "data-parallel degree (0 = world / (tp*cp*pp))"),
    KI(ep, 1, 1, 1024, "expert-parallel degree (carved out of dp)"),
    KI(zero, 0, 0, 3, "ZeRO stage: 0 | 1 (optimizer state sharded) | 2 (+ gradients) | 3 (+ "
       "parameters, gathered per layer)"),
    KS(recompute, "none", "activation recompute: none | selective (attention probabilities) | "
       "full (whole blocks)"),
    KS(memory_limit, "auto", "bytes one rank may use, e.g. 6G or 512M (auto = the rank's share of "
       "physical memory, or the device's memory on cuda; off = no check)"),
    KI(moe_every, 0, 0, 1024, "every N-th block's MLP is a mixture of experts (0 = dense)"),
    KI(n_experts, 4, 1, 4096, "experts per MoE layer"),
    KI(top_k, 1, 1, 2, "experts each token is routed to (1 or 2)"),
    KF(capacity_factor, 1.25, 0, 64, "expert capacity factor (>= 1; 0 = dropless)"),
    KF(aux_loss_coef, 0.01, 0, 100, "Switch load-balancing loss coefficient alpha"),
    KF(z_loss_coef, 0, 0, 100, "router z-loss coefficient (ST-MoE)"),
    KI(microbatches, 0, 0, 1 << 20, "pipeline microbatches per step (0 = global_batch/(batch_size*dp))"),
    KS(pp_layers, "", "layers per pipeline stage, e.g. 3,4 (empty = even split)"),
    KS(pp_schedule, "1f1b", "pipeline schedule: 1f1b | gpipe | interleaved | zb-h1 (docs/parallel.md)"),
    KI(virtual_stages, 1, 1, 64, "model chunks per pipeline stage (pp_schedule = interleaved; n_layer "
       "must divide into pp x virtual_stages chunks)"),
    KS(device, "cpu", "ops backend: cpu | guard (cpu kernels, PROT_NONE memory) | cuda (GPU=1)"),
    KF(comm_timeout, 300, 0, 1e6, "seconds a collective may take before the job is aborted (0 = off)"),
    KF(bucket_mb, 25, 0.001, 1e6, "data-parallel gradient bucket size in MiB"),
    KI(ckpt_every, 0, 0, 1 << 30, "checkpoint every N steps (0 = none; auto = Young/Daly "
       "sqrt(2 x stall x MTBF), measured)"),
    KI(ckpt_async, 1, 0, 1, "1 = snapshot then write in the background"),
    KI(ckpt_keep, 3, 1, 1 << 20, "committed checkpoints kept per tier"),
    KI(ckpt_major_every, 0, 0, 1 << 30, "also keep every M-th step's checkpoint (0 = none)"),
    KI(ckpt_tier0, 1, 0, 1, "also keep checkpoints in memory (/dev/shm) for fast restarts"),
    KS(ckpt_tier0_root, "", "tier-0 directory (default $MINITRAIN_SHM_DIR or /dev/shm/minitrain); "
       "%n or $SLURMD_NODENAME expands to the node name (a per-node tier 0)"),
    KI(ckpt_replicas, 0, 0, 1, "1 = also keep each rank's tier-0 checkpoint in the memory of a "
       "buddy rank on another node (restart survives losing a node)"),
    KS(topology, "", "topology file of `minitrain plan` (docs/placement.md): each host's leaf "
       "switch, so tier-0 buddies sit behind another leaf ($MINITRAIN_LEAF overrides)"),
    KS(ckpt_durable, "", "tier-2 directory checkpoints are copied to in the background"),
    KS(ckpt_object, "", "tier-3 object store s3://bucket/prefix committed checkpoints are archived "
       "to in the background (credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"),
    KI(keep_object, 3, 1, 1 << 20, "archived checkpoints kept in tier 3"),
    KS(s3_endpoint, "", "object store endpoint, e.g. http://127.0.0.1:8080 (empty = "
       "$AWS_ENDPOINT_URL)"),
    KS(s3_region, "", "object store SigV4 region (empty = $AWS_REGION, else us-east-1)"),
    KI(s3_part_mb, 16, 5, 5120, "multipart upload part size and download chunk, MiB"),
    KF(s3_max_mb_s, 0, 0, 1e6, "tier-3 upload bandwidth cap, MB/s (0 = none)"),
    KS(resume, "auto", "auto | no | STEP: where a run starts"),
    KS(ckpt_on_error, "stop", "stop | continue: what a failed checkpoint save does"),
    KS(db, "", "PostgreSQL the run's records are shipped to, a libpq URL such as postgresql://h1,h2/"
       "minitrain?target_session_attrs=read-write (empty = $MINITRAIN_DB; docs/database.md). "
       "Recorded in run.db's config: keep passwords in ~/.pgpass or $PGPASSWORD"),
    KS(fault, "", "fault injection spec (repeatable: --fault kill@step=5,rank=1)"),
    KI(robust_every, 0, 0, 1 << 30, "adversarial-robustness evaluation every N steps (0 = off)"),
    KS(robust_attack, "pgd", "robustness attack: fgsm | pgd | hotflip"),
    KS(robust_norm, "l2", "robustness ball: l2 (per sequence) | linf (per element)"),
    KS(robust_eps, "0,0.01,0.03,0.1", "robustness eps list, relative to the mean wte row norm"),
    KI(robust_steps, 5, 1, 1000, "PGD ascent steps of the robustness evaluation"),
    KI(robust_flips, 2, 1, 1000, "HotFlip token swaps per sequence"),
    KI(robust_batches, 2, 1, 1 << 20, "validation microbatches the robustness evaluation attacks"),
    KS(adv_train, "none", "adversarial training: none | fgsm | pgd | freelb"),
    KF(adv_eps, 0.03, 0, 100, "adversarial training eps, relative to the mean wte row norm"),
    KI(adv_steps, 3, 1, 1000, "ascent steps of pgd / freelb adversarial training"),
    KS(adv_norm, "l2", "adversarial training ball: l2 | linf"),
    KF(mtbf_s, 0, 0, 1e9, "job MTBF for ckpt_every = auto, s (0 = observed from the run's "
       "failures)"),
    {NULL, 0, NULL, 0, 0, NULL, NULL, NULL},
};
#define NKEYS (sizeof(KEYS) / sizeof(KEYS[0]) - 1)

static const keytab_key *find_key(const char *key) { return keytab_find(KEYS, key, strlen(key)); }

int config_has_key(const char *key) { return find_key(key) != NULL; }

void config_defaults(mt_config *cfg) {
    char err[256];
    memset(cfg, 0, sizeof(*cfg));
    int rc = keytab_defaults(KEYS, cfg, err, sizeof(err));
    mtCheck(rc == 0, err); /* a default that does not parse is a bug in the table */
}

int config_set(mt_config *cfg, const char *key, const char *value, char *err, size_t errlen) {
    const keytab_key *k = find_key(key);
    char shown[MT_ESCAPE_LINE + 8]; /* the user's key or value, escaped (core/check.h) */
    if (!k) {
        snprintf(err, errlen, "unknown config key '%s' (see `minitrain train --help`)",
                 mt_escape(key, MT_ESCAPE_LINE, shown, sizeof(shown)));
        return -1;
    }
    char *base = keytab_addr(k, cfg);
    if (strcmp(k->name, "fault") == 0 && base[0] && value[0]) {
        /* repeatable: each --fault adds one spec */
        if (strlen(base) + 1 + strlen(value) >= (size_t)k->hi) {
            snprintf(err, errlen, "too many fault specs (max %zu chars)", (size_t)k->hi - 1);
            return -1;
        }
        strcat(base, ";");
        strcat(base, value);
        return 0;
    }
    if (strcmp(k->name, "name") == 0 &&
        (strchr(value, '/') || strcmp(value, ".") == 0 || strcmp(value, "..") == 0)) {
        /* the default run directory is runs/<name>: "../x" would train outside runs/ */
        snprintf(err, errlen, "'name' = '%s' must be a plain name (no '/', not . or ..); "
                 "choose the directory with run_dir", mt_escape(value, MT_ESCAPE_LINE, shown,
                                                                sizeof(shown)));
        return -1;
    }
    if (strcmp(k->name, "ckpt_every") == 0 && strcmp(value, "auto") == 0) {
        *(int *)base = CONFIG_CKPT_AUTO; /* the only word a number key takes */
        return 0;
    }
    return keytab_parse(k, cfg, value, KEYTAB_KEY, err, errlen);
}

typedef struct {
    mt_config *cfg;
    char *err;
    size_t errlen;
    const char *path;
    int failed;
    unsigned char seen[NKEYS];  /* 1 once a key has been given in this file */
    char seen_in[NKEYS][64];    /* section of that first line ("" = above any section) */
} ini_ctx;

/* A key given twice in one file (same or another section) would silently be "last wins": refuse
 * it by name, like an unknown key. `fault` is the exception: it is a list, each line adds a spec. */
static int ini_check_repeat(ini_ctx *c, const char *section, const char *name) {
    const keytab_key *k = find_key(name);
    if (k == NULL || strcmp(k->name, "fault") == 0) return 0;
    size_t i = (size_t)(k - KEYS);
    if (c->seen[i]) {
        const char *was = c->seen_in[i];
        snprintf(c->err, c->errlen, "%s: key '%s' is given twice (first %s%s%s, again %s%s%s)",
                 c->path, k->name, was[0] ? "in [" : "at the top", was, was[0] ? "]" : "",
                 section[0] ? "in [" : "at the top", section, section[0] ? "]" : "");
        return -1;
    }
    c->seen[i] = 1;
    snprintf(c->seen_in[i], sizeof(c->seen_in[i]), "%s", section);
    return 0;
}

static int on_ini_key(void *user, const char *section, const char *name, const char *value) {
    ini_ctx *c = user;
    if (c->failed) return 0;
    if (ini_check_repeat(c, section, name) != 0) {
        c->failed = 1;
        return 0;
    }
    char msg[512];
    if (config_set(c->cfg, name, value, msg, sizeof(msg)) != 0) {
        snprintf(c->err, c->errlen, "%s: %s", c->path, msg);
        c->failed = 1;
        return 0;
    }
    return 1;
}

/* Line `lineno` (1-based) of path into line[len], without its newline ("" when unreadable). */
static void ini_line(const char *path, int lineno, char *line, size_t len) {
    FILE *fp = fopen(path, "r");
    line[0] = 0;
    if (fp == NULL) return;
    for (int n = 1; fgets(line, (int)len, fp); n++) {
        size_t l = strlen(line);
        int whole = l > 0 && line[l - 1] == '\n';
        if (n == lineno) break;
        while (!whole && fgets(line, (int)len, fp)) { /* the rest of a long line */
            l = strlen(line);
            whole = l > 0 && line[l - 1] == '\n';
        }
        line[0] = 0;
    }
    line[strcspn(line, "\r\n")] = 0;
    fclose(fp);
}

int config_load_ini(mt_config *cfg, const char *path, char *err, size_t errlen) {
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        snprintf(err, errlen, "config '%s' is not a regular file", path);
        return -1;
    }
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, errlen, "cannot open config '%s'", path);
        return -1;
    }
    ini_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        fclose(fp);
        snprintf(err, errlen, "out of memory reading config '%s'", path);
        return -1;
    }
    *c = (ini_ctx){.cfg = cfg, .err = err, .errlen = errlen, .path = path};
    int rc = ini_parse_file(fp, on_ini_key, c);
    int failed = c->failed;
    free(c);
    fclose(fp);
    if (failed) return -1; /* message already says file + key */
    if (rc != 0) {
        char line[512] = "", shown[MT_ESCAPE_LINE + 8];
        ini_line(path, rc, line, sizeof(line));
        snprintf(err, errlen, "%s:%d: malformed line '%s' (expected 'key = value' or '[section]')",
                 path, rc, mt_escape(line, MT_ESCAPE_LINE, shown, sizeof(shown)));
        return -1;
    }
    return 0;
}

static int validate(const mt_config *cfg, char *err, size_t errlen);

/* The checks of validate(), their message with any byte of a string key's value escaped
 * (core/check.h's mt_escape): a value may come from a binary file given as --config. */
int config_validate(const mt_config *cfg, char *err, size_t errlen) {
    int rc = validate(cfg, err, errlen);
    if (rc != 0 && errlen > 0) {
        char raw[2048];
        snprintf(raw, sizeof(raw), "%s", err);
        mt_escape(raw, errlen > 4 ? errlen - 4 : 0, err, errlen);
    }
    return rc;
}

static int validate(const mt_config *cfg, char *err, size_t errlen) {
    if (cfg->d_model % cfg->n_head != 0) {
        snprintf(err, errlen, "d_model (%d) must be divisible by n_head (%d)", cfg->d_model,
                 cfg->n_head);
        return -1;
    }
    if (cfg->min_lr > cfg->lr) {
        snprintf(err, errlen, "min_lr (%g) must not exceed lr (%g)", cfg->min_lr, cfg->lr);
        return -1;
    }
    if (cfg->stop_after > cfg->steps) {
        snprintf(err, errlen, "stop_after (%d) exceeds steps (%d)", cfg->stop_after, cfg->steps);
        return -1;
    }
    if (cfg->microbatches == 0 && cfg->global_batch % cfg->batch_size != 0) {
        snprintf(err, errlen, "global_batch (%d) must be a multiple of batch_size (%d)",
                 cfg->global_batch, cfg->batch_size);
        return -1;
    }
    if (cfg->data[0] == 0) {
        snprintf(err, errlen, "no 'data' directory given (set data = DIR in the config or --data)");
        return -1;
    }
    /* resume: auto | no | a step number (digits only) */
    int resume_ok = strcmp(cfg->resume, "auto") == 0 || strcmp(cfg->resume, "no") == 0;
    if (!resume_ok && cfg->resume[0] != 0 && strlen(cfg->resume) <= 9) {
        resume_ok = 1;
        for (const char *p = cfg->resume; *p; p++)
            if (*p < '0' || *p > '9') resume_ok = 0;
    }
    if (!resume_ok) {
        snprintf(err, errlen, "'resume' must be auto, no or a step number, got '%s'", cfg->resume);
        return -1;
    }
    if (cfg->ckpt_replicas && !cfg->ckpt_tier0) { /* the replicas are copies of tier 0 */
        snprintf(err, errlen, "ckpt_replicas = 1 needs ckpt_tier0 = 1: peer replicas are copies "
                 "of the tier-0 (in-memory) checkpoint, which ckpt_tier0 = 0 turns off (drop "
                 "--ckpt-replicas, or keep --ckpt-tier0 1)");
        return -1;
    }
    if (cfg->moe_every > 0 && cfg->capacity_factor > 0 && cfg->capacity_factor < 1) {
        snprintf(err, errlen, "capacity_factor (%g) must be >= 1 (or 0 for dropless)",
                 cfg->capacity_factor);
        return -1;
    }
    if (cfg->moe_every > 0 && cfg->top_k > cfg->n_experts) {
        snprintf(err, errlen, "top_k (%d) exceeds n_experts (%d)", cfg->top_k, cfg->n_experts);
        return -1;
    }
    if (strcmp(cfg->device, "cpu") != 0 && strcmp(cfg->device, "guard") != 0 &&
        strcmp(cfg->device, "cuda") != 0) {
        snprintf(err, errlen, "'device' must be cpu, guard or cuda, got '%s'", cfg->device);
        return -1;
    }
#ifndef MT_HAVE_CUDA
    if (strcmp(cfg->device, "cuda") == 0) {
        snprintf(err, errlen, "device = cuda: this build has no CUDA (rebuild with make GPU=1)");
        return -1;
    }
#endif
    if (strcmp(cfg->recompute, "none") != 0 && strcmp(cfg->recompute, "selective") != 0 &&
        strcmp(cfg->recompute, "full") != 0) {
        snprintf(err, errlen, "'recompute' must be none, selective or full, got '%s'",
                 cfg->recompute);
        return -1;
    }
    if (strcmp(cfg->pp_schedule, "1f1b") != 0 && strcmp(cfg->pp_schedule, "gpipe") != 0 &&
        strcmp(cfg->pp_schedule, "interleaved") != 0 && strcmp(cfg->pp_schedule, "zb-h1") != 0) {
        snprintf(err, errlen, "'pp_schedule' must be 1f1b, gpipe, interleaved or zb-h1, got '%s'",
                 cfg->pp_schedule);
        return -1;
    }
    if (cfg->virtual_stages > 1 && strcmp(cfg->pp_schedule, "interleaved") != 0) {
        snprintf(err, errlen, "virtual_stages = %d needs pp_schedule = interleaved (got '%s')",
                 cfg->virtual_stages, cfg->pp_schedule);
        return -1;
    }
    if (strcmp(cfg->robust_attack, "fgsm") != 0 && strcmp(cfg->robust_attack, "pgd") != 0 &&
        strcmp(cfg->robust_attack, "hotflip") != 0) {
        snprintf(err, errlen, "'robust_attack' must be fgsm, pgd or hotflip, got '%s'",
                 cfg->robust_attack);
        return -1;
    }
    const char *norms[2][2] = {{"robust_norm", cfg->robust_norm}, {"adv_norm", cfg->adv_norm}};
    for (int i = 0; i < 2; i++)
        if (strcmp(norms[i][1], "l2") != 0 && strcmp(norms[i][1], "linf") != 0) {
            snprintf(err, errlen, "'%s' must be l2 or linf, got '%s'", norms[i][0], norms[i][1]);
            return -1;
        }
    /* robust_eps: a comma list of numbers in [0, 100] (safety/robust.c robust_parse_eps parses
     * it the same way, ROBUST_EPS_MAX; refused here so that a run is not killed at its first
     * robustness evaluation) */
    const char *p = cfg->robust_eps;
    int n_eps = 0;
    while (*p) {
        char *end;
        double v = strtod(p, &end);
        if (end == p || !isfinite(v) || v < 0 || v > 100 || (*end != ',' && *end != 0) ||
            (*end == ',' && end[1] == 0)) {
            snprintf(err, errlen, "'robust_eps' must be a comma list of numbers in [0, 100] (e.g. "
                     "0,0.01,0.03,0.1), got '%s'", cfg->robust_eps);
            return -1;
        }
        n_eps++;
        p = *end ? end + 1 : end;
    }
    if (!strcmp(cfg->robust_attack, "hotflip") && cfg->robust_flips > cfg->seq_len) {
        snprintf(err, errlen, "'robust_flips' = %d is more swaps than a sequence has tokens "
                 "(seq_len = %d)", cfg->robust_flips, cfg->seq_len);
        return -1;
    }
    if (n_eps == 0 && strcmp(cfg->robust_attack, "hotflip") != 0 && cfg->robust_every > 0) {
        snprintf(err, errlen, "'robust_eps' is empty: give at least one eps (e.g. 0,0.03,0.1)");
        return -1;
    }
    if (strcmp(cfg->adv_train, "none") != 0 && strcmp(cfg->adv_train, "fgsm") != 0 &&
        strcmp(cfg->adv_train, "pgd") != 0 && strcmp(cfg->adv_train, "freelb") != 0) {
        snprintf(err, errlen, "'adv_train' must be none, fgsm, pgd or freelb, got '%s'",
                 cfg->adv_train);
        return -1;
    }
    if (strcmp(cfg->adv_train, "none") != 0 && cfg->pp > 1) {
        snprintf(err, errlen, "adv_train = %s with pp = %d is not supported (the ascent passes run "
                 "outside the pipeline schedule); use tp/dp layouts or adv_train = none",
                 cfg->adv_train, cfg->pp);
        return -1;
    }
    if (strcmp(cfg->ckpt_on_error, "stop") != 0 && strcmp(cfg->ckpt_on_error, "continue") != 0) {
        snprintf(err, errlen, "'ckpt_on_error' must be stop or continue, got '%s'",
                 cfg->ckpt_on_error);
        return -1;
    }
    return 0;
}

/* The config as a cJSON object, one member per key in table order (ckpt_every = auto as "auto").
 * A float goes through its %.9g text, the shortest that reads back as the same float, so 0.1f is
 * 0.100000001 rather than the double 0.10000000149011612. */
static cJSON *config_json(const mt_config *cfg) {
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < NKEYS; i++) {
        const keytab_key *k = &KEYS[i];
        const void *v = keytab_addr(k, (void *)cfg);
        char num[32];
        cJSON *item;
        if (v == &cfg->ckpt_every && cfg->ckpt_every == CONFIG_CKPT_AUTO)
            item = cJSON_CreateString("auto");
        else if (k->type == KEYTAB_INT) item = cJSON_CreateNumber(*(const int *)v);
        else if (k->type == KEYTAB_FLOAT) {
            snprintf(num, sizeof(num), "%.9g", (double)*(const float *)v);
            item = cJSON_CreateNumber(strtod(num, NULL));
        } else item = cJSON_CreateString((const char *)v);
        mtCheck(item != NULL && cJSON_AddItemToObject(o, k->name, item), "out of memory");
    }
    return o;
}

size_t config_to_json(const mt_config *cfg, char *buf, size_t cap) {
    cJSON *o = config_json(cfg);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    mtCheck(text != NULL, "out of memory");
    size_t n = strlen(text);
    if (buf && cap) snprintf(buf, cap, "%s", text);
    cJSON_free(text);
    return n;
}

void config_print_help(void) {
    mt_config def;
    config_defaults(&def);
    printf("config keys (INI `key = value`, or on the command line `--key value`):\n");
    keytab_print_keys(stdout, KEYS, &def);
}
