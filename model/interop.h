/*
 * model/interop.h — GPT-2 weights from and to the other ecosystems: llm.c's model file and
 * Hugging Face's GPT-2 safetensors + config.json, and the commands built on them.
 *
 * All three layouts hold the same numbers; only names, order and orientation differ:
 *   minitrain     named tensors "h.3.attn.c_attn.weight", linear weights (out, in), tied head
 *   llm.c         one flat array in a fixed order, tensors of all layers stacked (L, ...),
 *                 linear weights (out, in) (PyTorch nn.Linear), wte padded to Vp rows
 *   Hugging Face  GPT-2 names (optionally under "transformer."), linear layers as Conv1D
 *                 (in, out), c_attn one (C, 3C) matrix whose columns split into q | k | v
 * so an import is a relabelling (and a transpose for Hugging Face), never a numerical change,
 * except that a bf16 llm.c file widens to fp32 exactly and an export to bf16 rounds to nearest
 * even (PyTorch's rounding). docs/interop.md has the byte layouts and the commands.
 */
#ifndef MT_INTEROP_H
#define MT_INTEROP_H

#include <stddef.h>

#include "model/model.h"
#include "text/tokenizer.h"

#define INTEROP_LLMC_MAGIC 20240326
#define INTEROP_LLMC_FP32 3 /* llm.c model file versions */
#define INTEROP_LLMC_BF16 5

/* Read an llm.c model file (gpt2_124M.bin, gpt2_124M_bf16.bin, or what llm.c's trainer writes):
 * 256 x int32 header [magic 20240326, version 3 (fp32) | 5 (bf16), maxT, V, L, NH, C, Vp], then the
 * parameters in llm.c's order. Builds m (seq_len = maxT, vocab_size = V: the Vp - V padding rows
 * of wte are dropped). *version_out (may be NULL) gets 3 or 5. Errors (-1, one line naming the
 * file): unreadable, truncated or trailing bytes (the header's shape fixes the size exactly),
 * wrong magic (an llm.c tokenizer or state file, a shard, anything else), unknown version,
 * inconsistent shape (C % NH, Vp < V), non-finite weights. */
int interop_llmc_read(gpt_model *m, const char *path, int *version_out, char *err, size_t errlen);

/* Write m (dense, unsharded) as an llm.c model file at path (atomically): version 3 (fp32) or 5
 * (bf16, round to nearest even), Vp = V rounded up to a multiple of 128 with zero padding rows.
 * Returns 0 or -1 with err (a MoE model: llm.c has no experts; I/O errors). */
int interop_llmc_write(const gpt_model *m, const char *path, int version, char *err,
                       size_t errlen);

/* Read Hugging Face GPT-2 weights: path is a directory with config.json and model.safetensors, or
 * the .safetensors file with config.json beside it. Tensor names may carry "transformer."; the
 * causal-mask buffers (attn.bias, attn.masked_bias) are ignored; lm_head.weight, if present, must
 * equal wte.weight (minitrain ties them). F32, F16 and BF16 tensors are accepted. Errors (-1, one
 * line): missing files, a config.json that is not GPT-2's architecture (activation, n_inner,
 * layer_norm_epsilon, untied head), a missing tensor, a tensor whose shape disagrees with
 * config.json, layers beyond config.json's n_layer. */
int interop_hf_read(gpt_model *m, const char *path, char *err, size_t errlen);

/* Write m (dense, unsharded; read through its host mirror) as Hugging Face GPT-2 weights: path, a
 * safetensors file (its directory is created), with the same tensor names, F32, Conv1D weights
 * (c_attn, attn.c_proj, c_fc, mlp.c_proj) transposed to (in, out), metadata {"format": "pt",
 * "minitrain.step": step}; and config.json beside it (GPT2Config keys: GPT2LMHeadModel,
 * gelu_new, n_inner null, eps 1e-5, tied embeddings, minitrain_step). What interop_hf_read
 * reads back exactly. Returns 0, or -1 with one line in err ("writing PATH: why", "writing
 * config.json: why", or the directory that cannot be created). */
int interop_hf_write(gpt_model *m, const char *path, int step, char *err, size_t errlen);

/* Weights from any source, recognised by content: a minitrain run directory or model file
 * (model/model_io.h), an llm.c model file, a Hugging Face directory or safetensors file.
 * what (may be NULL) gets a short description of the source for logs. Returns 0 or -1. */
int interop_load_weights(gpt_model *m, const char *path, char *what, size_t whatlen, char *err,
                         size_t errlen);

/* A copy of full (unsharded) with context seq_len <= full's: the first seq_len rows of wpe. */
void interop_cut_context(gpt_model *dst, const gpt_model *full, int seq_len);

#endif /* MT_INTEROP_H */
