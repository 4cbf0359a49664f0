/*
 * train/checkpoint_hash.h — the parameter hashes a checkpoint records (train/checkpoint.c's
 * trainer_state.json key "params_hash"), and their check after a resume loads the step.
 *
 * With the silent-corruption checks on (cfg.sdc_check_every > 0, sched/sdc.h), a save records
 * every rank's gpt_params_hash (model/param_hash.h) of the step it holds: the restart that
 * follows a mismatch loads an older step and proves it got exactly those parameters back (a
 * checkpoint of a step whose check agreed holds what the replicas agreed on). Off with zero 3
 * (no rank holds whole parameters) and when the checks are off (no extra pass per save).
 *
 *   "params_hash": {"layout": "tp1 cp1 pp1 dp2 ep1",
 *                   "ranks": ["<dense hex>:<expert hex>", ...]}   one per world rank
 */
#ifndef MT_TRAIN_CHECKPOINT_HASH_H
#define MT_TRAIN_CHECKPOINT_HASH_H

#include <stddef.h>

#include <cjson/cJSON.h>
#include "train/trainer.h"

/* Every rank's parameter hashes, gathered over the world (collective: call on every rank), as
 * the "params_hash" object; NULL (on every rank) when the record is off. Caller owns it. */
cJSON *checkpoint_hash_record(trainer *tr);

/* After step dir was loaded into tr (this rank only, no communication): when its state (the
 * parsed trainer_state.json) records params_hash under this run's layout, this rank's hashes of
 * the loaded parameters must equal its entry. Returns 0 (equal, no record, another layout) or
 * -1 with err naming the rank, the step directory and both hashes. */
int checkpoint_hash_verify(trainer *tr, const cJSON *state, const char *dir, char *err,
                           size_t errlen);

#endif /* MT_TRAIN_CHECKPOINT_HASH_H */
