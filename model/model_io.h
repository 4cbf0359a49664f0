/*
 * model/model_io.h — a trained model as one safetensors file (RUN_DIR/model.safetensors).
 *
 * Tensors keep the model's own names and (out, in) layout; the resolved config JSON and the step
 * travel in the safetensors __metadata__ ("minitrain.config", "minitrain.step"), so `sample`,
 * `eval` and `serve` rebuild the model from the file alone.
 */
#ifndef MT_MODEL_IO_H
#define MT_MODEL_IO_H

#include <stddef.h>

#include "model/model.h"

/* Write every parameter tensor of m to path (written to path.tmp, fsynced, renamed). Returns 0
 * or -1 with err (disk full, read-only, ...); an existing file at path is untouched on error. */
int model_io_save(const gpt_model *m, const char *path, const char *config_json, int step,
                  char *err, size_t errlen);

/* Build m from a file written by model_io_save, or from a run directory: there, the newest
 * checkpoint under RUN_DIR/ckpt that verifies (train/checkpoint.h) when its step is newer than
 * RUN_DIR/model.safetensors' (a run still training or killed), else model.safetensors. Reads the
 * config from the metadata, checks every tensor's presence and shape, loads weights. step_out
 * (may be NULL) receives the step. Returns 0 or -1 with err. */
int model_io_load(gpt_model *m, const char *path_or_run_dir, int *step_out, char *err,
                  size_t errlen);

/* Build m from exactly step `step` of run_dir: the checkpoint RUN_DIR/ckpt/step_N (verified
 * first: sizes, CRC-32C, structure), or model.safetensors when it holds that step. Errors (-1,
 * err): not a directory, no such step (the message lists the committed steps), a checkpoint that
 * does not verify, unreadable tensors. */
int model_io_load_step(gpt_model *m, const char *run_dir, int step, int *step_out, char *err,
                       size_t errlen);

#endif /* MT_MODEL_IO_H */
