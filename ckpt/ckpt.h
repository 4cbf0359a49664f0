/*
 * ckpt/ckpt.h — checkpoint directories: CRC-32C, the commit protocol, verification, retention.
 *
 * The checkpoint library saves NAMED TENSORS (see ckpt/safetensors.h), never models: the trainer
 * decides which tensors go into which file. This header is the "directory" half (files are written
 * by core/fs.h; the asynchronous multi-rank writer and the tiers are ckpt/writer.h, ckpt/tiers.h):
 *
 *   ROOT/step_00000100.tmp/   a save in progress (never read by a loader)
 *   ROOT/step_00000100/       a committed step: the rename from .tmp is the commit point
 *       model-tp00-pp00.safetensors, optim-....safetensors, trainer_state.json, ...
 *       manifest.json         name, size and CRC-32C of every other file; written LAST
 *   ROOT/latest               "step_00000100\n": a convenience pointer, updated after the rename
 *
 * Protocol for one save (docs/formats.md, "Checkpoint directory"):
 *   rank 0: ckpt_begin(root, step)          -> creates ROOT/step_N.tmp/ (stale one removed)
 *   barrier
 *   every rank: st_write / ckpt_write_json into the .tmp dir (each file fsynced, renamed in place)
 *   barrier
 *   rank 0: ckpt_commit(root, step)         -> manifest.json, fsync dir, rename, fsync ROOT, latest
 * A loader calls ckpt_latest_verified(), which re-verifies sizes and checksums and skips torn or
 * corrupt steps, so a crash at any instant leaves either the old or the new step loadable.
 *
 * Errors: every function that can fail returns 0 (or a count) on success and -1 on failure with
 * a one-line message in err[errlen] that names the path and the failing call's strerror(). No
 * function exits the process; a failure never modifies an already committed step.
 */
#ifndef CKPT_CKPT_H
#define CKPT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "core/check.h"
#include "core/fs.h"

#define CKPT_PATH_MAX FS_PATH_MAX
#define CKPT_MANIFEST_NAME "manifest.json"
#define CKPT_LATEST_NAME "latest"
#define CKPT_MANIFEST_FORMAT "minitrain-checkpoint"
#define CKPT_MANIFEST_VERSION 1

/* ---- CRC-32C (Castagnoli), ckpt/crc32c.c ------------------------------------------------------ */

/* CRC-32C of buf[0..n) continuing from `crc` (0 to start; pass the previous result to continue),
 * so ckpt_crc32c(ckpt_crc32c(0, a, na), b, nb) == ckpt_crc32c(0, a||b, na+nb).
 * Polynomial 0x82F63B78 (reflected), init and final XOR 0xFFFFFFFF — RFC 3720 §12.1 / B.4;
 * CRC32C("123456789") = 0xE3069283. Uses SSE4.2 when the CPU has it, else slice-by-8. */
uint32_t ckpt_crc32c(uint32_t crc, const void *buf, size_t n);

/* Same value as ckpt_crc32c, always computed by the portable slice-by-8 tables. */
uint32_t ckpt_crc32c_sw(uint32_t crc, const void *buf, size_t n);

/* 1 when ckpt_crc32c uses the SSE4.2 crc32 instruction on this CPU, else 0. */
int ckpt_crc32c_hw_available(void);

/* CRC-32C and byte count of a whole file, read in 1 MiB chunks. Either out pointer may be NULL.
 * Returns 0, or -1 (cannot open / read error) with err naming the path. */
int ckpt_crc32c_file(const char *path, uint32_t *crc, uint64_t *bytes, char *err, size_t errlen);

/* ---- checkpoint files ------------------------------------------------------------------------ */

/* Write a JSON text (e.g. trainer_state.json) as dir/name, durably and atomically (core/fs.h).
 * The text is parsed first and refused (-1, naming the file) if it is not valid JSON; a trailing
 * newline is added. */
int ckpt_write_json(const char *dir, const char *name, const char *json, char *err,
                    size_t errlen);

/* ---- commit protocol, ckpt/ckpt.c ------------------------------------------------------------- */

/* Callback for non-fatal warnings (skipped corrupt steps...). NULL means: print with mt_warn(). */
typedef void (*ckpt_warn_fn)(void *user, const char *msg);

/* Format ROOT/step_%08d<suffix> (suffix "" for the committed dir, ".tmp" for a save in progress).
 * Returns 0, or -1 when the path does not fit in len. */
int ckpt_step_path(char *buf, size_t len, const char *root, int64_t step, const char *suffix);

/* Start the save of `step` (>= 0): mkdir -p ROOT, remove a stale ROOT/step_N.tmp left by a crash,
 * create it empty, fsync ROOT. Writes the .tmp path into dir[dirlen] when dir is not NULL.
 * Multi-rank: rank 0 calls it, then a barrier, then every rank writes its files into the dir. */
int ckpt_begin(const char *root, int64_t step, char *dir, size_t dirlen, char *err, size_t errlen);

/* Commit the save of `step` (rank 0, after a barrier): list the regular files of step_N.tmp
 * (sub-directories are refused), compute size + CRC-32C of each, write manifest.json last (fsync),
 * fsync the dir, rename step_N.tmp -> step_N (an older committed step_N is replaced: moved to
 * step_N.old first, removed after), fsync ROOT, then point ROOT/latest at the newest committed
 * step (latest.tmp + fsync + rename + fsync ROOT). Returns 0 or -1 (the .tmp dir is left). */
int ckpt_commit(const char *root, int64_t step, char *err, size_t errlen);

/* A file whose CRC-32C the writer computed while writing it (ckpt/bulkio.h), so the commit need
 * not read it back. */
typedef struct {
    char name[128];
    uint64_t bytes;
    uint32_t crc;
} ckpt_known_file;

/* ckpt_commit, taking the CRC of each file listed in known[0..n_known) whose name AND current
 * size match (the file is still fsynced and, for *.safetensors, its header checked); every other
 * file is read and checksummed as ckpt_commit does. Same protocol, same errors. */
int ckpt_commit_known(const char *root, int64_t step, const ckpt_known_file *known, int n_known,
                      char *err, size_t errlen);

/* Verify committed step_N: manifest.json present, valid JSON with the expected format, version
 * and step; every listed file present with the listed size and CRC-32C; every *.safetensors file
 * has a valid header whose tensors fill the file exactly (no truncation). Returns 0, or -1 with
 * the first problem, naming the file ("...: size 1000 bytes, manifest says 1024"). */
int ckpt_verify(const char *root, int64_t step, char *err, size_t errlen);

/* Committed steps under ROOT (directories named exactly step_<digits>; .tmp/.old ignored), sorted
 * ascending, in a malloc'd array (*steps; caller frees; NULL when *n == 0). A missing ROOT gives
 * *n = 0 and returns 0. Returns 0 or -1 (cannot read ROOT). */
int ckpt_list(const char *root, int64_t **steps, int *n, char *err, size_t errlen);

/* Every step_<digits> and step_<digits>.tmp entry under ROOT (a committed step and a save that
 * never committed), sorted by (step, committed first), for listing: (*steps)[i] is the step and
 * (*partial)[i] is 1 for the .tmp one. Nothing is opened or checked (see ckpt_verify); entries of
 * any type count. Both arrays malloc'd (caller frees; NULL when *n == 0). Returns 0, or -1 when
 * ROOT cannot be opened (missing included). */
int ckpt_list_all(const char *root, int64_t **steps, int **partial, int *n);

/* The newest committed step that passes ckpt_verify. Steps that fail are skipped with a warning
 * (via warn) naming the step and the problem; a step is never returned unverified. Also warns when
 * ROOT/latest disagrees with the answer. Returns 1 (found, *step set), 0 (none verified), -1. */
int ckpt_latest_verified(const char *root, int64_t *step, ckpt_warn_fn warn, void *user,
                         char *err, size_t errlen);

/* Parse ROOT/latest ("step_%08d\n"). Returns 1 (*step set), 0 (no latest file), -1 (malformed). */
int ckpt_read_latest(const char *root, int64_t *step, char *err, size_t errlen);

/* Retention: among committed steps, keep the keep_last newest (the newest is always kept, even for
 * keep_last <= 0), every step divisible by keep_every (when keep_every > 0), and the newest step
 * that verifies (so retention never leaves ROOT without a loadable step — this costs one
 * re-verification, normally of the newest step). Every other committed step, all of them older
 * than the newest, is removed: renamed to step_N.del (atomic: it is no longer "committed"), then
 * deleted. .tmp directories are never touched. *n_removed (may be NULL) gets the count.
 * Returns 0 or -1 (the first failing removal; steps not yet reached stay). */
int ckpt_retain(const char *root, int keep_last, int64_t keep_every, int *n_removed,
                ckpt_warn_fn warn, void *user, char *err, size_t errlen);

/* ckpt_retain, right after this process committed step `fresh` from CRCs it computed while
 * writing (ckpt_commit_known): when retention needs "the newest step that verifies" and that is
 * `fresh`, it is verified without its CRC pass (manifest, presence, sizes, safetensors headers),
 * which saves reading the whole step back; any other step gets the full ckpt_verify. fresh < 0:
 * exactly ckpt_retain. */
int ckpt_retain_fresh(const char *root, int keep_last, int64_t keep_every, int64_t fresh,
                      int *n_removed, ckpt_warn_fn warn, void *user, char *err, size_t errlen);

#endif /* CKPT_CKPT_H */
