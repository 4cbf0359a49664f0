/*
 * tests/fuzz/fuzz_trainer_state.c — a checkpoint's trainer_state.json on untrusted bytes.
 *
 * serve, sample and export read the model shape and the training config from this file before
 * they allocate anything, so lying shapes (negative, huge, inconsistent) must be refused with a
 * message, never turned into a giant allocation or a crash.
 */
#include "fuzz_util.h"

#include "train/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write("step/trainer_state.json", data, size);
    char dir[256], err[512];
    snprintf(dir, sizeof(dir), "%s/step", fuzz_dir());
    gpt_config cfg;
    char *config_json = NULL;
    if (checkpoint_read_model_config(dir, &cfg, &config_json, err, sizeof(err)) == 0)
        free(config_json);
    return 0;
}
