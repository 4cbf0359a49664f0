/*
 * train/model_io.h — a trained model as one safetensors file (RUN_DIR/model.safetensors).
 *
 * Tensors keep the model's own names and (out, in) layout; the resolved config JSON and the step
 * travel in the safetensors __metadata__ ("minitrain.config", "minitrain.step"), so `sample`,
 * `eval` and `serve` rebuild the model from the file alone.
 */
#ifndef MT_MODEL_IO_H
#define MT_MODEL_IO_H

#include <stddef.h>

#include "train/model.h"

/* Write every parameter tensor of m to path (written to path.tmp, fsynced, renamed). Returns 0
 * or -1 with err (disk full, read-only, ...); an existing file at path is untouched on error. */
int model_io_save(const gpt_model *m, const char *path, const char *config_json, int step,
                  char *err, size_t errlen);

/* Build m from a file written by model_io_save (or a run directory holding model.safetensors):
 * reads the config from the metadata, checks every tensor's presence and shape, loads weights.
 * step_out (may be NULL) receives the stored step. Returns 0 or -1 with err. */
int model_io_load(gpt_model *m, const char *path_or_run_dir, int *step_out, char *err,
                  size_t errlen);

#endif /* MT_MODEL_IO_H */
