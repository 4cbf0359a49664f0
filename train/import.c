/*
 * train/import.c — `minitrain ckpt import` (cmd/ckpt.c): llm.c or Hugging Face weights into a
 * minitrain run directory.
 *
 * The import writes its step-0 checkpoint through the same checkpointer that training uses
 * (trainer_init_weights + checkpoint_save), so the directory is an ordinary run: `sample`,
 * `serve`, `robust`, `ckpt verify|export` and `train --init-from` (or `train --resume auto` in the
 * same directory, which continues from step 0 with the zero optimizer state) take it unchanged.
 */
#include "train/import.h"

#include <cjson/cJSON.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/config.h"
#include "parallel/comm.h"
#include "parallel/mesh.h"
#include "train/checkpoint.h"
#include "model/interop.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "train/trainer.h"

/* ---- ckpt import ------------------------------------------------------------------------------ */

/* Write the run directory. Returns 0 or -1 with err. */
static int write_run(const gpt_model *w, const tok_tokenizer *tok, const char *out,
                     const char *source, const char *what, char *err, size_t errlen) {
    mt_config cfg;
    config_defaults(&cfg);
    snprintf(cfg.run_dir, sizeof(cfg.run_dir), "%s", out);
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s", out);
    snprintf(cfg.name, sizeof(cfg.name), "%s", basename(tmp));
    snprintf(cfg.init_from, sizeof(cfg.init_from), "%s", source);
    cfg.ckpt_async = 0;
    cfg.ckpt_tier0 = 0;
    comm *world = comm_init_world(NULL, NULL);
    mesh ms;
    mesh_init(&ms, world, 1, 1, 1, 1, 1);
    trainer tr;
    int rc = trainer_init_weights(&tr, &cfg, &ms, w, err, errlen);
    if (rc == 0) {
        checkpointer *ck = checkpoint_create(&tr);
        checkpoint_save(ck, &tr);
        rc = checkpoint_finish(ck, &tr) == MT_EXIT_OK ? 0 : -1;
        checkpoint_free(ck);
        char root[CKPT_PATH_MAX], msg[1024] = "the save failed (see the ckpt_error event in run.db)";
        snprintf(root, sizeof(root), "%.4000s/ckpt", out);
        if (rc == 0 && ckpt_verify(root, 0, msg, sizeof(msg)) != 0) rc = -1;
        if (rc != 0) snprintf(err, errlen, "the step-0 checkpoint in '%.600s' was not written: %.900s",
                              root, msg);
        if (rc == 0 && tok) {
            char p[CKPT_PATH_MAX];
            snprintf(p, sizeof(p), "%.4000s/tokenizer.bin", out);
            rc = tok_save(tok, p, err, errlen);
        }
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "source", source);
        cJSON_AddStringToObject(d, "format", what);
        char *detail = cJSON_PrintUnformatted(d);
        rundb_log_event(tr.db, tr.run_id, "import", 0, detail);
        free(detail);
        cJSON_Delete(d);
        rundb_run_end(tr.db, tr.run_id, rc == 0 ? "completed" : "failed");
        trainer_free(&tr);
    }
    mesh_free(&ms);
    comm_free(world);
    comm_finalize();
    return rc;
}

int import_run(const char *kind, const char *src, const char *out, const char *tokpath,
                   char *summary, size_t sumlen, char *err, size_t errlen) {
    if (strcmp(kind, "llmc") && strcmp(kind, "hf")) {
        snprintf(err, errlen, "--from '%s': expected llmc or hf", kind);
        return -1;
    }
    char root[CKPT_PATH_MAX], msg[2048];
    snprintf(root, sizeof(root), "%.4000s/ckpt", out);
    int64_t *steps = NULL;
    int n = 0;
    if (ckpt_list(root, &steps, &n, msg, sizeof(msg)) == 0 && n > 0) {
        free(steps);
        snprintf(err, errlen, "'%s' already holds checkpoints; import into a new run directory", out);
        return -1;
    }
    free(steps);
    gpt_model m;
    int version = 0;
    if (!strcmp(kind, "llmc") ? interop_llmc_read(&m, src, &version, err, errlen)
                              : interop_hf_read(&m, src, err, errlen))
        return -1;
    tok_tokenizer tok;
    memset(&tok, 0, sizeof(tok));
    int rc = 0;
    if (tokpath && tok_load(&tok, tokpath, err, errlen) != 0) rc = -1;
    if (rc == 0 && tokpath && tok_vocab_size(&tok) > m.cfg.vocab_size) {
        snprintf(err, errlen, "tokenizer '%s' has %d ids but the model's vocabulary is %d", tokpath,
                 tok_vocab_size(&tok), m.cfg.vocab_size);
        rc = -1;
    }
    char what[128];
    if (!strcmp(kind, "llmc"))
        snprintf(what, sizeof(what), "llm.c model file, version %d (%s)", version,
                 version == INTEROP_LLMC_BF16 ? "bf16" : "fp32");
    else
        snprintf(what, sizeof(what), "Hugging Face GPT-2 safetensors");
    if (rc == 0) rc = write_run(&m, tokpath ? &tok : NULL, out, src, what, err, errlen);
    if (rc == 0) {
        char tb[160] = "", d[100];
        if (tokpath)
            snprintf(tb, sizeof(tb), " + tokenizer.bin (%s, vocab %d)",
                     tok_describe(&tok, d, sizeof(d)), tok_vocab_size(&tok));
        snprintf(summary, sumlen, "imported %s %.1000s: %d layers, %d heads, d_model %d, context %d, "
                 "vocab %d, %.2fM parameters -> %.1000s/ckpt/step_00000000 (verified)%s", what, src,
                 m.cfg.n_layer, m.cfg.n_head, m.cfg.d_model, m.cfg.seq_len, m.cfg.vocab_size,
                 m.num_params / 1e6, out, tb);
    }
    tok_free(&tok);
    gpt_free(&m);
    return rc;
}
