/*
 * model/param_hash.h — a 64-bit fingerprint of a model's parameters, for the silent-corruption
 * check (sched/sdc.h: data-parallel replicas must hold bit-identical weights after every
 * optimizer step) and for checkpoint records (train/checkpoint.c: the hash of the step a
 * checkpoint holds, verified after a resume loads it).
 *
 * Two hashes per rank, because they are compared over different groups: [0] every tensor that
 * is not a MoE expert weight (identical across the dp·cp ranks of the same (tp, pp) shard),
 * [1] the expert weights (identical across the expert-data-parallel group only; 0 when the
 * model has none). Each tensor is hashed by hash_words64 (core/hash.h) over its float bytes,
 * and the per-tensor hashes, in tensor order, by FNV-1a 64: a single flipped bit anywhere
 * always changes the result (each step of both is a bijection).
 */
#ifndef MT_MODEL_PARAM_HASH_H
#define MT_MODEL_PARAM_HASH_H

#include <stdint.h>

#include "model/model.h"

/* out[0]: hash of the dense (non-expert) tensors, out[1]: of the expert tensors (0 when none),
 * over the host mirror of m's parameters (gpt_params_host: copied from the device first when the
 * parameters live there). m must hold all of its local parameters (not a ZeRO-3 shard). */
void gpt_params_hash(gpt_model *m, uint64_t out[2]);

/* Index of the tensor named `name` in m (exact match), or -1. */
int gpt_tensor_index(const gpt_model *m, const char *name);

#endif /* MT_MODEL_PARAM_HASH_H */
