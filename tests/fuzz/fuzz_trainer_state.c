/*
 * tests/fuzz/fuzz_trainer_state.c — a checkpoint's trainer_state.json on untrusted bytes.
 *
 * serve, sample and export read the model shape from this file (model_ckpt_read_state,
 * model_ckpt_state_config) before they allocate anything, so lying shapes (negative, huge, inconsistent) must be refused with a
 * message, never turned into a giant allocation or a crash.
 */
#include "fuzz_util.h"

#include "train/model_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write("step/trainer_state.json", data, size);
    char dir[256], err[512];
    snprintf(dir, sizeof(dir), "%s/step", fuzz_dir());
    cJSON *state = model_ckpt_read_state(dir, err, sizeof(err));
    if (state == NULL) return 0;
    gpt_config cfg;
    model_ckpt_state_config(state, dir, &cfg, err, sizeof(err));
    int step;
    if (model_ckpt_state_int(state, NULL, "step", &step, dir, err, sizeof(err)) == 0) {
        /* accepted: the int must be exactly the file's number (no truncation, no overflow) */
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(state, "step");
        if (!cJSON_IsNumber(v) || (double)step != v->valuedouble) abort();
    } else if (strstr(err, "step") == NULL) {
        abort(); /* a refusal names the key it refused */
    }
    cJSON_Delete(state);
    return 0;
}
