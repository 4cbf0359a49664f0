/*
 * model/model_ckpt.h — what a checkpoint of a GPT model contains: the shard files and their
 * names, the tensors of each, the trainer_state.json format; and loading a model from a
 * checkpoint directory without a trainer (serve, sample, export). Prefix model_ckpt_.
 *
 *   ROOT/step_00000500/
 *     model-tp00-pp00.safetensors        parameters of the (tp, pp) shard: local shapes, and
 *                                        "shard:<name>" metadata for a piece of a larger tensor
 *     optim-tp00-pp00.safetensors        AdamW m, v as "optim.m.<tensor>", "optim.v.<tensor>"
 *     model-tp00-pp00-ep01.safetensors   with expert parallelism (ep > 1) every file name carries
 *                                        the EP rank, and EP ranks > 0 hold their experts only
 *     trainer_state.json                 step, data position, RNG, optimizer t, model shape,
 *                                        mesh, the file list, resolved config (train/checkpoint.c)
 *     manifest.json                      written last by the commit (ckpt/ckpt.h)
 *
 * TP-replicated tensors are stored by TP rank 0 only, the last pipeline stage's tied copy of wte
 * not at all. Loading assembles every local tensor's box from whichever files hold pieces of it
 * (ckpt/reshard.h), so the saving layout does not matter. This module knows models, not
 * trainers: train/checkpoint.c (the trainer's checkpointer) and model/model_io.c use it.
 */
#ifndef MT_MODEL_CKPT_H
#define MT_MODEL_CKPT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "ckpt/reshard.h"
#include "ckpt/safetensors.h"
#include "model/model.h"

#define MODEL_CKPT_STATE_FILE "trainer_state.json"
#define MODEL_CKPT_STATE_FORMAT "minitrain-trainer-state"
#define MODEL_CKPT_NAME_MAX 128 /* = CKPT_FILE_NAME_MAX of ckpt/writer.h */

/* Where a shard sits in the layout: TP rank / degree, PP stage / stages, EP rank / degree
 * (degrees 0 or 1 mean "not split"). */
typedef struct {
    int tp_rank, tp, pp_rank, pp, ep_rank, ep;
} model_ckpt_shard;

/* The shard m holds (from its gpt_config). */
model_ckpt_shard model_ckpt_shard_of(const gpt_model *m);

/* THE name of a shard file: "<kind>-tpXX-ppYY.safetensors", plus "-epZZ" before the suffix when
 * ep > 1. kind is "model" or "optim". Every writer and every file list uses this one function. */
void model_ckpt_file_name(char *buf, size_t len, const char *kind, const model_ckpt_shard *s);

/* Append to `array` (a cJSON array) the names of every `kind` file of a layout: for each stage,
 * TP rank and EP rank in that order. */
void model_ckpt_list_files(cJSON *array, const char *kind, int tp, int pp, int ep);

/* One checkpoint file of this rank's shard, ready for st_write (see ckpt/writer.h ckpt_file). */
typedef struct {
    char name[MODEL_CKPT_NAME_MAX];
    st_tensor *tensors;
    int n_tensors;
    char (*names)[96];   /* storage of the tensor names */
    char *metadata_json; /* format, minitrain.step/model/shard and "shard:" keys */
} model_ckpt_file;

/* Fill f with the `kind` file of m's shard at `step`: for each source buffer src[s] (laid out as
 * m->params) and each local tensor, "<prefix[s]><name>" with its local shape, data pointing into
 * src[s]. TP-replicated tensors only on TP rank 0, experts only on EP ranks > 0, never the last
 * stage's tied wte copy. Returns 0 or -1 with err. Free with model_ckpt_file_free. */
int model_ckpt_file_build(model_ckpt_file *f, const gpt_model *m, const char *kind, int step,
                          const float *const *src, const char *const *prefix, int nsrc,
                          char *err, size_t errlen);
void model_ckpt_file_free(model_ckpt_file *f);

/* ---- reading ----------------------------------------------------------------------------------- */

/* Parse step_dir/trainer_state.json and check its format and version. Returns the object (caller
 * cJSON_Deletes) or NULL with err. */
cJSON *model_ckpt_read_state(const char *step_dir, char *err, size_t errlen);

/* state[obj][key] (obj NULL: state[key]) as an int into *out. Returns 0, or -1 with err naming
 * step_dir's state file and the key when it is absent or not a number. */
int model_ckpt_state_int(const cJSON *state, const char *obj, const char *key, int *out,
                         const char *step_dir, char *err, size_t errlen);

/* The model shape recorded in a state's "model" object, read by gpt_config_from_json
 * (model/model.h: tp/pp/ep fields zero; a missing or ill-typed field refused by name). Returns 0
 * or -1 with err. */
int model_ckpt_state_config(const cJSON *state, const char *step_dir, gpt_config *cfg,
                            char *err, size_t errlen);

/* Read every local tensor of m, named "<name_prefix><name>" ("", "optim.m.", "optim.v."), from
 * the files of fs into dst + the tensor's offset (the box of m's shard, whatever layout wrote
 * the files). Returns 0 or -1 with err. */
int model_ckpt_read_tensors(const ckpt_fileset *fs, const gpt_model *m, const char *name_prefix,
                            float *dst, char *err, size_t errlen);

/* Build m (unsharded, tp = 1) from the committed checkpoint directory step_dir (ROOT/step_N):
 * the model shape comes from its trainer_state.json, every tensor is assembled from the
 * model-*.safetensors pieces whatever layout wrote them; a tensor holding NaN/Inf is refused.
 * The caller verifies first (ckpt_verify); this only reads. step_out (may be NULL) gets the
 * step. Returns 0 or -1 with err. */
int model_ckpt_load(gpt_model *m, const char *step_dir, int *step_out, char *err, size_t errlen);

#endif /* MT_MODEL_CKPT_H */
