/*
 * train/import.h — `minitrain ckpt import`: another framework's weights as a minitrain run
 * directory (train/import.c). A floor above model/interop.h, because it writes through the
 * trainer's checkpointer.
 */
#ifndef MT_TRAIN_IMPORT_H
#define MT_TRAIN_IMPORT_H

#include <stddef.h>

/* `minitrain ckpt import` (cmd/ckpt.c): read src (kind "llmc": an llm.c model file; "hf": a
 * Hugging Face directory or safetensors file) and, when tokenizer is not NULL, a tokenizer (any
 * format tok_load reads, at most the model's vocabulary); write the run directory out with a
 * verified step-0 checkpoint (through the checkpointer training uses: trainer_init_weights +
 * checkpoint_save), run.db (an "import" event) and out/tokenizer.bin. out must not hold
 * checkpoints yet. Returns 0 with a one-line summary, or -1 with a one-line message in err. */
int import_run(const char *kind, const char *src, const char *out, const char *tokenizer,
                   char *summary, size_t sumlen, char *err, size_t errlen);

#endif /* MT_TRAIN_IMPORT_H */
