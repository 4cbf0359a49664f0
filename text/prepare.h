/*
 * text/prepare.h — a tokenized text into a dataset directory (`minitrain prepare`, cmd/prepare.c):
 * DIR/tokenizer.bin, DIR/train_000.bin and DIR/val_000.bin, the token shards of text/data.h.
 *
 * The split is made on TOKENS (first 1-F for train, last F for val), not on bytes, so the two
 * shards hold exactly the encoding of the whole text. Every output is written durably and
 * atomically (NAME.tmp renamed into place: tok_save, data_write_shard), so an interrupted run
 * never leaves a half-written file under its final name. Choosing the tokenizer and scrubbing the
 * text (safety/pii.h) are the command's: train/ does not include safety/.
 */
#ifndef MT_PREPARE_H
#define MT_PREPARE_H

#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

/* The train/val split of ntok tokens: nval = round(ntok · val_fraction), at least 2, the last
 * nval tokens; ntrain = ntok - nval. Returns 0, or -1 when ntok < nval + 2 (each split needs at
 * least 2 tokens: one window of one token and its target). */
int prepare_split(size_t ntok, double val_fraction, size_t *ntrain, size_t *nval);

/* The files prepare_write wrote (malloc'd paths; prepare_paths_free). */
typedef struct {
    char *tok_path, *train_path, *val_path;
} prepare_paths;

/* Write tok as out/tokenizer.bin, ids[0..ntrain) as out/train_000.bin and ids[ntrain..+nval) as
 * out/val_000.bin (shards at tok's vocabulary size), in that order; out must exist. Then warns
 * (mt_warn) about other out/train_*.bin and out/val_*.bin files left from an earlier run, which
 * the loader would read too. Returns 0, or -1 with the first write's one-line error in err; p
 * gets the paths either way. */
int prepare_write(const char *out, const tok_tokenizer *tok, const uint32_t *ids, size_t ntrain,
                  size_t nval, prepare_paths *p, char *err, size_t errlen);

void prepare_paths_free(prepare_paths *p);

#endif /* MT_PREPARE_H */
