/*
 * ckpt/writer.h — the checkpoint writer: saves of named tensors plus a state blob, written from
 * a snapshot by a background thread, committed across ranks by rank 0. Prefix ckpt_writer_.
 *
 * One save, as train/checkpoint.c drives it at a step boundary:
 *   ckpt_writer_begin(w, step)   wait for the save in flight (at most one); rank 0 creates
 *                                step_N.tmp/ in tiers 0 and 1 and broadcasts the outcome — the
 *                                barrier after which every rank may write into them
 *   (the caller)                 snapshot: copy what is saved into ckpt_writer_buffer() — the
 *                                only training stall of an asynchronous save
 *   ckpt_writer_start(w, files)  the background thread writes this rank's files (st_write) and,
 *                                on rank 0, the state blob into every tier's step_N.tmp/
 *   ckpt_writer_progress(w, 0)   at every later step boundary, one 3-double max-all-reduce
 *                                ("my writer is busy / failed"); once all are done, rank 0
 *                                commits in the background (ckpt/tiers.h: manifest.json, the
 *                                rename step_N.tmp -> step_N, retention, the tier-2 copy), and
 *                                the next all-reduce carries the commit's outcome to every rank,
 *                                which then reports it (catalog rows, the "checkpoint" event).
 * No collective ever runs off the main thread; every rank calls begin/start/progress at the same
 * step boundaries, so all take the same decision at the same step. The writer knows nothing of
 * models or trainers: the group's collectives and the reports are callbacks.
 *
 * Failures: a tier-0 or tier-2 failure is a warning; a tier-1 failure fails the save ("failed"
 * catalog rows, "ckpt_error" event, its .tmp removed). With stop_on_error the writer then refuses
 * further saves and ckpt_writer_failed() is 1 (the caller stops training cleanly); an already
 * committed step is never touched by a failed save.
 */
#ifndef CKPT_WRITER_H
#define CKPT_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/bulkio.h"
#include "ckpt/safetensors.h"
#include "ckpt/tiers.h"

/* The ranks that save together. Single process: rank 0 and NULL collectives. */
typedef struct {
    void *user;
    int rank; /* this process's rank in the group; rank 0 creates, commits and reports */
    /* element-wise maximum of v[0..n) over the group (a collective) */
    void (*max_f64)(void *user, double *v, int n);
    /* broadcast buf[0..n) from rank 0 to the group (a collective) */
    void (*bcast)(void *user, void *buf, size_t n);
} ckpt_group;

/* One safetensors file of this rank: written as <step dir>/name by st_write. */
#define CKPT_FILE_NAME_MAX 128

typedef struct {
    char name[CKPT_FILE_NAME_MAX];
    const st_tensor *tensors;
    int n_tensors;
    const char *metadata_json; /* NULL or a JSON object of strings (st_meta_json) */
} ckpt_file;

typedef struct {
    ckpt_tiers tiers;
    int async;         /* 1: files written and committed by a background thread */
    int stop_on_error; /* 1: after a failed save, refuse further saves */
    int delay_ms;      /* test hook: sleep this long before each file (files then written by one
                          thread, in order) */
    int io_threads;    /* threads writing the files of a save (0: CKPT_WRITER_THREADS) */
    int io_direct;     /* 1: O_DIRECT writes (ckpt/bulkio.h) where the file system allows; 0:
                          buffered writes with writeback windows */
    ckpt_group group;
    ckpt_sink sink;
} ckpt_writer_opts;

#define CKPT_WRITER_THREADS 2
#define CKPT_WRITER_MAX_THREADS 16

/* Counters of one writer (for logs and benchmarks). Times in milliseconds. */
typedef struct {
    int saves;               /* saves started */
    int committed;           /* tier-1 commits that succeeded */
    int failures;            /* saves that failed (tier 1) */
    double last_snapshot_ms; /* training stall of the last save (async: begin..start plus the
                                wait for a deferred snapshot; sync: all) */
    double last_snapshot_wait_ms; /* of which: ckpt_writer_snapshot_wait blocked */
    double last_write_ms;    /* background write + commit of the last committed save */
    double last_files_ms;    /* of which: writing the files (serialise + write + fsync) */
    double total_stall_ms;   /* sum of stalls, including waits for a previous save */
    double total_overlap_ms; /* sum of the steps' excess while saves were in flight (note_step) */
    double total_wait_ms;    /* of which: waiting for a previous save to finish */
    int64_t last_bytes;      /* bytes of the last committed tier-1 step (all files; rank 0) */
    int64_t last_failed_step; /* step of the last failed save, -1 when none */
    ckpt_io_stats last_io;   /* phases of the files of the last committed save (thread times) */
} ckpt_writer_stats;

typedef struct ckpt_writer ckpt_writer;

/* A writer with options o (copied). Never fails (out of memory exits via mallocCheck). */
ckpt_writer *ckpt_writer_create(const ckpt_writer_opts *o);

/* The snapshot buffer: at least `bytes` long, allocated and pre-faulted once (a save then costs a
 * copy, not page faults), kept until ckpt_writer_free. Grows (contents lost) if asked for more.
 * Call it only while no save is in flight (before begin or after it returned 0). */
void *ckpt_writer_buffer(ckpt_writer *w, size_t bytes);

/* Start the save of `step` (collective): waits for a save in flight ("ckpt_wait" event), then
 * rank 0 creates step_N.tmp in tiers 0 and 1. Returns 0: snapshot now, then ckpt_writer_start;
 * -1: this save does not happen (tier 1 cannot be created — reported as a failed save — or an
 * earlier failure stopped saving). */
int ckpt_writer_begin(ckpt_writer *w, int64_t step);

/* Write files[0..n_files) of this rank and, on rank 0, the state blob state_json as state_name
 * (ckpt_write_json: must be valid JSON; other ranks pass NULL) into the step begun last, in the
 * background when async, else inline followed by the whole commit. files, their tensors and
 * the tensors' data must stay unchanged until the save is finished (the next ckpt_writer_begin,
 * ckpt_writer_finish, or ckpt_writer_busy() == 0). state_json is copied. */
void ckpt_writer_start(ckpt_writer *w, const ckpt_file *files, int n_files,
                       const char *state_name, const char *state_json);

/* A snapshot copy run by the background job before it writes (see ckpt_writer_start_deferred). */
typedef void (*ckpt_snapshot_fn)(void *user);

/* ckpt_writer_start, but the snapshot is not taken yet: the background job first calls
 * copy(copy_user) — which fills what files[] point to from the live training state — then
 * writes. Training may go on READING that state meanwhile (the forward and backward of the next
 * step), and must call ckpt_writer_snapshot_wait() before it next MODIFIES it (the optimizer
 * step): the stall of the save is then only the part of the copy that the next forward and
 * backward did not hide. Synchronous writers (async = 0) copy inline. copy must not call
 * collectives (it runs off the main thread). */
void ckpt_writer_start_deferred(ckpt_writer *w, const ckpt_file *files, int n_files,
                                const char *state_name, const char *state_json,
                                ckpt_snapshot_fn copy, void *copy_user);

/* Block until the snapshot of the save begun last is copied (returns at once when it is, or when
 * no deferred snapshot is pending). The time blocked counts as training stall of that save
 * (stats last_snapshot_ms, last_snapshot_wait_ms, total_stall_ms). Main thread only. */
void ckpt_writer_snapshot_wait(ckpt_writer *w);

/* Advance the save in flight (collective while one is: call on every rank at the same step
 * boundaries). wait = 1 blocks until it is committed or failed. No-op when none is in flight. */
void ckpt_writer_progress(ckpt_writer *w, int wait);

/* 1 while a save is in flight (begun and not yet committed or failed). */
int ckpt_writer_busy(const ckpt_writer *w);

/* The trainer's step time (seconds) of the step that just ended, before ckpt_writer_progress at
 * that step boundary. With no save in flight it joins the baseline (the last 8 such steps);
 * while one is in flight, its excess over the baseline's median is that save's overlap cost,
 * reported as the "checkpoint" event's overlap_ms (beside snapshot_ms, the stall) and summed in
 * ckpt_writer_stats.total_overlap_ms. A save's total cost = snapshot_ms + overlap_ms. */
void ckpt_writer_note_step(ckpt_writer *w, double step_s);

/* 1 when a save failed with stop_on_error (no further saves happen). */
int ckpt_writer_failed(const ckpt_writer *w);

/* End of run (collective): waits for a save in flight; when drop_memory and nothing failed, rank
 * 0 removes tier 0 (ckpt_tiers_drop_memory). Returns ckpt_writer_failed(). */
int ckpt_writer_finish(ckpt_writer *w, int drop_memory);

void ckpt_writer_get_stats(const ckpt_writer *w, ckpt_writer_stats *out);
const ckpt_tiers *ckpt_writer_tiers(const ckpt_writer *w);

/* Free the writer (joins a background job still running). NULL is a no-op. */
void ckpt_writer_free(ckpt_writer *w);

#endif /* CKPT_WRITER_H */
