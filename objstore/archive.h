/*
 * objstore/archive.h — checkpoint tier 3: committed step directories copied to an object store
 * (s3://bucket/prefix) by a background thread, and fetched back, verified, for a resume.
 * Prefix objstore_. Knows directories of files, not what is inside a step (like ckpt/tiers.h).
 *
 *   s3://bucket/prefix/step_00000500/<file>          every file of ROOT/step_00000500/, as is
 *   s3://bucket/prefix/step_00000500/objects.json    {"format":"minitrain-objects","step":500,
 *                                                     "files":[{"name","size","sha256"}...]}
 *   s3://bucket/prefix/latest                        "500\n"
 *
 * The commit rule, as on disk: the objects go up first, then objects.json, then latest. A reader
 * trusts only a step whose objects.json exists and whose every object has the listed size and
 * SHA-256; a step without objects.json (an upload cut short) does not exist for it. Retention
 * (keep) removes a step's objects.json first, then its objects, so a listing never shows a
 * manifest whose objects are gone.
 *
 * The archiver is fed committed steps only (the caller hears of a tier-1 commit and enqueues it);
 * it reads the tier-1 directory while retention there may remove it — a file that vanishes makes
 * that step "not archived" (no manifest), never a half step.
 */
#ifndef OBJSTORE_ARCHIVE_H
#define OBJSTORE_ARCHIVE_H

#include <stddef.h>
#include <stdint.h>

#include "objstore/s3.h"

#define OBJSTORE_MSG 768
#define OBJSTORE_STEP_TRIES 3     /* attempts at archiving one step (each request retries too) */
#define OBJSTORE_STEP_PAUSE_S 2.0 /* pause before attempt k+1: k times this, seconds */

typedef struct objstore_archiver objstore_archiver;

/* What the archiver did with one step (objstore_archiver_poll). */
typedef struct {
    int64_t step;
    int ok;               /* 1 archived, 0 failed (msg) */
    int64_t bytes;        /* all objects of the step */
    double ms;            /* upload of the objects and the manifest */
    int retries;          /* request retries spent on it */
    char msg[OBJSTORE_MSG];
    int64_t deleted[16];  /* steps removed by retention after it */
    int n_deleted;
} objstore_result;

/* Start the archiver thread: steps of local_root go to url (s3://bucket/prefix) with client
 * settings cfg, keeping the `keep` newest archived steps. Returns NULL with err (bad url, no
 * endpoint or credentials). Nothing is contacted until the first step. */
objstore_archiver *objstore_archiver_start(const s3_config *cfg, const char *url, int keep,
                                           const char *local_root, char *err, size_t errlen);

/* Queue committed step `step` of local_root. When steps pile up, only the newest queued one is
 * archived (older pending ones are dropped: archiving is for the latest state, not every step).
 * A step whose upload fails is tried again (OBJSTORE_STEP_TRIES attempts, paused) unless a newer
 * step is queued meanwhile; a failed attempt leaves no objects.json, so readers never see it, and
 * its objects are removed by the retention pass of the next step that is archived. */
void objstore_archiver_enqueue(objstore_archiver *a, int64_t step);

/* Outcomes since the last poll into out (at most max). Returns how many. */
int objstore_archiver_poll(objstore_archiver *a, objstore_result *out, int max);

/* Wait until the queue is empty and nothing is uploading (wait = 1), then stop the thread and
 * free. Outcomes not yet polled are lost: poll after objstore_archiver_drain. */
void objstore_archiver_stop(objstore_archiver *a);

/* Block until the queue is empty and nothing is in flight. */
void objstore_archiver_drain(objstore_archiver *a);

/* Upload ROOT/step_N (all files) then its objects.json then latest, then apply retention
 * (keep > 0). The synchronous core of the archiver. Returns 0, or -1 with r->msg. */
int objstore_archive_step(s3_client *c, const char *bucket, const char *prefix,
                          const char *local_root, int64_t step, int keep, objstore_result *r);

/* Newest archived step under s3://bucket/prefix whose objects.json exists: from `latest` when it
 * names one with a manifest, else from the listing. Returns 1 (*step set), 0 (none), -1 (err). */
int objstore_newest(s3_client *c, const char *bucket, const char *prefix, int64_t *step,
                    char *err, size_t errlen);

/* Fetch archived step `step` into local_root/step_N: every object by parallel ranged GETs into
 * local_root/step_N.fetch/, each checked against objects.json (size, SHA-256); an object that
 * fails is removed and fetched once more, then the fetch fails loudly naming it. Once all
 * verify, step_N.fetch is renamed to step_N (an existing step_N is first renamed to
 * step_N.corrupt). Returns 0, or -1 with err; nothing unverified is left under a step_N name. */
int objstore_fetch_step(s3_client *c, const char *bucket, const char *prefix,
                        const char *local_root, int64_t step, char *err, size_t errlen);

#endif /* OBJSTORE_ARCHIVE_H */
