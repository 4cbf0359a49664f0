/*
 * tests/fuzz/fuzz_trainer_state.c — a checkpoint's trainer_state.json on untrusted bytes.
 *
 * serve, sample and export read the model shape from this file (model_ckpt_read_state,
 * model_ckpt_state_config) before they allocate anything. Here: no crash on any bytes; every int
 * the reader accepts equals the file's number exactly (no truncation or overflow into a lying
 * shape); every refusal names the key it refused. (Whether a shape is sane — n_head divides
 * d_model, sizes in range — is gpt_config's check, downstream of this reader.)
 */
#include "fuzz_util.h"

#include "model/model_ckpt.h"

/* An int taken from state[obj][key] must be exactly the file's number (no truncation, no
 * overflow): abort() otherwise. */
static void check_exact(const cJSON *state, const char *obj, const char *key, int got) {
    const cJSON *o = obj ? cJSON_GetObjectItemCaseSensitive(state, obj) : state;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || (double)got != v->valuedouble) abort();
}

/* Does err name a field of the model shape the way gpt_config_from_json words its refusals? */
static int names_shape_field(const char *err) {
    static const char *const f[] = {"n_layer", "n_head", "d_model", "seq_len", "vocab_size",
                                    "moe_every", "n_experts", "top_k", "capacity_factor",
                                    "aux_coef", "z_coef"};
    char want[96];
    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        snprintf(want, sizeof(want), "model shape field '%s' ", f[i]);
        if (strstr(err, want)) return 1;
    }
    return strstr(err, "the model shape is not a JSON object") != NULL;
}

/* Does err name key (obj.key, or key at the top level) the way model_ckpt_state_int words its
 * two refusals? (A plain strstr would match the directory name, which is ".../step".) */
static int names_key(const char *err, const char *obj, const char *key) {
    char full[64], missing[96], bad[96];
    snprintf(full, sizeof(full), "%s%s%s", obj ? obj : "", obj ? "." : "", key);
    snprintf(missing, sizeof(missing), "missing number %s", full);
    snprintf(bad, sizeof(bad), ": %s = ", full);
    return strstr(err, missing) != NULL || strstr(err, bad) != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write("step/trainer_state.json", data, size);
    char dir[256], err[512];
    snprintf(dir, sizeof(dir), "%s/step", fuzz_dir());
    cJSON *state = model_ckpt_read_state(dir, err, sizeof(err));
    if (state == NULL) return 0;
    gpt_config cfg;
    if (model_ckpt_state_config(state, dir, &cfg, err, sizeof(err)) == 0) {
        /* accepted: every shape field is the file's number exactly */
        check_exact(state, "model", "n_layer", cfg.n_layer);
        check_exact(state, "model", "n_head", cfg.n_head);
        check_exact(state, "model", "d_model", cfg.d_model);
        check_exact(state, "model", "seq_len", cfg.seq_len);
        check_exact(state, "model", "vocab_size", cfg.vocab_size);
        const cJSON *mo = cJSON_GetObjectItemCaseSensitive(state, "model");
        if (cJSON_GetObjectItemCaseSensitive(mo, "moe_every")) { /* the MoE group, when there */
            check_exact(state, "model", "moe_every", cfg.moe_every);
            check_exact(state, "model", "n_experts", cfg.n_experts);
            check_exact(state, "model", "top_k", cfg.top_k);
        }
    } else if (!names_shape_field(err)) {
        abort(); /* a refusal names the key it refused */
    }
    int step;
    if (model_ckpt_state_int(state, NULL, "step", &step, dir, err, sizeof(err)) == 0) {
        check_exact(state, NULL, "step", step);
    } else if (!names_key(err, NULL, "step")) {
        abort(); /* a refusal names the key it refused */
    }
    cJSON_Delete(state);
    return 0;
}
