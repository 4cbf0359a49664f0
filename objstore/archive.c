/*
 * objstore/archive.c — checkpoint tier 3 (objstore/archive.h): the archiver thread, one step's
 * upload under the commit rule (objects, then objects.json, then latest), retention, and the
 * verified fetch of a step back into a local tier root.
 *
 * Why SHA-256 and not the CRC-32C of tier 1's manifest.json: an object store is reached over a
 * network and kept for months; the digest in objects.json is the one the upload was signed with
 * (x-amz-content-sha256), so the bytes a reader checks are the bytes the server accepted.
 */
#include "objstore/archive.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/fs.h"
#include "core/timer.h"

#define MANIFEST "objects.json"
#define FORMAT "minitrain-objects"

/* ---- one step up ------------------------------------------------------------------------------- */

static void step_key(char *buf, size_t n, const char *prefix, int64_t step, const char *file) {
    snprintf(buf, n, "%s%sstep_%08" PRId64 "%s%s", prefix, *prefix ? "/" : "", step,
             file ? "/" : "", file ? file : "");
}

/* Regular files of dir, sorted by name (malloc'd names). */
static int list_files(const char *dir, char ***names, int *n) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    int cap = 0;
    *names = NULL;
    *n = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4400];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            char **q = realloc(*names, (size_t)cap * sizeof *q);
            if (!q) abort();
            *names = q;
        }
        (*names)[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    for (int i = 1; i < *n; i++) /* insertion sort: a step has a handful of files */
        for (int j = i; j > 0 && strcmp((*names)[j - 1], (*names)[j]) > 0; j--) {
            char *t = (*names)[j];
            (*names)[j] = (*names)[j - 1];
            (*names)[j - 1] = t;
        }
    return 0;
}

/* Steps under prefix that have objects.json, ascending. */
static int archived_steps(s3_client *c, const char *bucket, const char *prefix, int64_t **steps,
                          int *n) {
    char pre[1100];
    snprintf(pre, sizeof pre, "%s%sstep_", prefix, *prefix ? "/" : "");
    s3_object *o;
    int no;
    *steps = NULL;
    *n = 0;
    if (s3_list(c, bucket, pre, &o, &no)) return -1;
    *steps = malloc(((size_t)no + 1) * sizeof **steps);
    if (!*steps) abort();
    size_t pl = strlen(pre);
    for (int i = 0; i < no; i++) {
        const char *rest = o[i].key + pl;
        char *end;
        long long s = strtoll(rest, &end, 10);
        if (end != rest && !strcmp(end, "/" MANIFEST)) (*steps)[(*n)++] = s;
    }
    free(o); /* listing order is key order, and step keys are zero-padded: ascending */
    return 0;
}

/* Step number of a key PRE<digits>/..., or -1. */
static int64_t key_step(const char *key, size_t pl, const char **rest) {
    char *end;
    long long s = strtoll(key + pl, &end, 10);
    if (end == key + pl || *end != '/') return -1;
    *rest = end + 1;
    return s;
}

/* Retention after step `done` was archived: the objects.json of all but the `keep` newest
 * archived steps first (each step is gone for readers at that moment), then their objects; and
 * the objects of any older step that has no objects.json (an upload cut short earlier: an
 * orphan no reader trusts, which would otherwise stay forever). One listing of the prefix. */
static void retain(s3_client *c, const char *bucket, const char *prefix, int keep, int64_t done,
                   objstore_result *r) {
    char pre[1100];
    snprintf(pre, sizeof pre, "%s%sstep_", prefix, *prefix ? "/" : "");
    size_t pl = strlen(pre);
    s3_object *o;
    int no;
    if (keep <= 0 || s3_list(c, bucket, pre, &o, &no)) return;
    int64_t *man = malloc(((size_t)no + 1) * sizeof *man); /* steps with objects.json, ascending */
    if (!man) abort();
    int nm = 0;
    for (int i = 0; i < no; i++) {
        const char *rest;
        int64_t s = key_step(o[i].key, pl, &rest);
        if (s >= 0 && !strcmp(rest, MANIFEST)) man[nm++] = s;
    }
    int64_t oldest_kept = nm > keep ? man[nm - keep] : (nm ? man[0] : done);
    int ok = 1;
    for (int i = 0; i + keep < nm && ok; i++) {
        char key[1200];
        step_key(key, sizeof key, prefix, man[i], MANIFEST);
        ok = s3_delete(c, bucket, key) == 0; /* manifest first: the step is gone for readers */
        if (ok && r->n_deleted < 16) r->deleted[r->n_deleted++] = man[i];
    }
    for (int i = 0; i < no && ok; i++) { /* objects of removed steps and of older orphans */
        const char *rest;
        int64_t s = key_step(o[i].key, pl, &rest);
        if (s < 0 || s >= oldest_kept || s == done || !strcmp(rest, MANIFEST)) continue;
        s3_delete(c, bucket, o[i].key);
    }
    free(man);
    free(o);
}

int objstore_archive_step(s3_client *c, const char *bucket, const char *prefix,
                          const char *local_root, int64_t step, int keep, objstore_result *r) {
    memset(r, 0, sizeof *r);
    r->step = step;
    double t0 = timer_now();
    int retries0 = c->retries;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/step_%08" PRId64, local_root, step);
    char **names;
    int n;
    if (list_files(dir, &names, &n) || n == 0) {
        snprintf(r->msg, sizeof r->msg, "tier 3: cannot read %.600s (removed by retention "
                 "before it was archived?)", dir);
        return -1;
    }
    cJSON *man = cJSON_CreateObject(), *files = cJSON_CreateArray();
    cJSON_AddStringToObject(man, "format", FORMAT);
    cJSON_AddNumberToObject(man, "step", (double)step);
    cJSON_AddItemToObject(man, "files", files);
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        char path[8192], key[1200], hex[65];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        step_key(key, sizeof key, prefix, step, names[i]);
        int64_t size = 0;
        struct stat st;
        if (stat(path, &st) == 0) size = st.st_size;
        if (s3_put_file(c, bucket, key, path, hex)) {
            snprintf(r->msg, sizeof r->msg, "tier 3: step %" PRId64 " not archived: %.600s", step,
                     c->err);
            rc = -1;
            break;
        }
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", names[i]);
        cJSON_AddNumberToObject(f, "size", (double)size);
        cJSON_AddStringToObject(f, "sha256", hex);
        cJSON_AddItemToArray(files, f);
        r->bytes += size;
    }
    char *text = cJSON_Print(man);
    cJSON_Delete(man);
    if (!rc) { /* the commit point: the manifest, only after every object is up */
        char key[1200];
        step_key(key, sizeof key, prefix, step, MANIFEST);
        if (s3_put(c, bucket, key, text, strlen(text))) {
            snprintf(r->msg, sizeof r->msg, "tier 3: step %" PRId64 " not archived: %.600s", step,
                     c->err);
            rc = -1;
        }
    }
    if (!rc) {
        char key[1100], body[32];
        snprintf(key, sizeof key, "%s%slatest", prefix, *prefix ? "/" : "");
        int bl = snprintf(body, sizeof body, "%" PRId64 "\n", step);
        if (s3_put(c, bucket, key, body, (size_t)bl)) /* the step is archived; latest is a hint */
            snprintf(r->msg, sizeof r->msg, "tier 3: step %" PRId64 " archived but 'latest' not "
                     "updated: %.600s", step, c->err);
        retain(c, bucket, prefix, keep, step, r);
        r->ok = 1;
    }
    free(text);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    r->ms = (timer_now() - t0) * 1e3;
    r->retries = c->retries - retries0;
    return rc;
}

/* ---- the archiver thread ----------------------------------------------------------------------- */

struct objstore_archiver {
    s3_client c;
    char bucket[64], prefix[1024], root[4096];
    int keep;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t pending;  /* newest queued step, -1: none */
    int busy, stop;
    objstore_result done[32];
    int n_done;
};

/* Wait (a->mu held) up to s seconds for a newer step to be queued. Returns 1 when one was. */
static int newer_within(objstore_archiver *a, double s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)s;
    ts.tv_nsec += (long)((s - (time_t)s) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    while (a->pending < 0)
        if (pthread_cond_timedwait(&a->cv, &a->mu, &ts) == ETIMEDOUT) break;
    return a->pending >= 0;
}

/* Archive one step: up to OBJSTORE_STEP_TRIES attempts, OBJSTORE_STEP_PAUSE_S·k apart (the
 * server may be restarting: each request's own retries span only a few seconds), unless a
 * newer step is queued meanwhile — then this one is given up for it. */
static void archive_with_retries(objstore_archiver *a, int64_t step, objstore_result *r) {
    for (int k = 1;; k++) {
        objstore_archive_step(&a->c, a->bucket, a->prefix, a->root, step, a->keep, r);
        if (r->ok || k == OBJSTORE_STEP_TRIES) break;
        pthread_mutex_lock(&a->mu);
        int newer = newer_within(a, OBJSTORE_STEP_PAUSE_S * k);
        pthread_mutex_unlock(&a->mu);
        if (newer) {
            size_t l = strlen(r->msg);
            snprintf(r->msg + l, sizeof r->msg - l, " (attempt %d; a newer step goes first)", k);
            return;
        }
    }
    if (!r->ok) {
        size_t l = strlen(r->msg);
        snprintf(r->msg + l, sizeof r->msg - l, " (%d attempts)", OBJSTORE_STEP_TRIES);
    }
}

static void *archiver_main(void *arg) {
    objstore_archiver *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (a->pending < 0 && !a->stop) pthread_cond_wait(&a->cv, &a->mu);
        if (a->pending < 0 && a->stop) break;
        int64_t step = a->pending;
        a->pending = -1;
        a->busy = 1;
        pthread_mutex_unlock(&a->mu);
        objstore_result r;
        archive_with_retries(a, step, &r);
        pthread_mutex_lock(&a->mu);
        if (a->n_done < 32) a->done[a->n_done++] = r;
        a->busy = 0;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

objstore_archiver *objstore_archiver_start(const s3_config *cfg, const char *url, int keep,
                                           const char *local_root, char *err, size_t errlen) {
    objstore_archiver *a = calloc(1, sizeof *a);
    if (!a) abort();
    if (s3_parse_url(url, a->bucket, sizeof a->bucket, a->prefix, sizeof a->prefix)) {
        snprintf(err, errlen, "ckpt_object = '%s': want s3://bucket/prefix (bucket: 3..63 of "
                 "a-z 0-9 . -)", url);
        free(a);
        return NULL;
    }
    if (s3_client_init(&a->c, cfg)) {
        snprintf(err, errlen, "ckpt_object: %s", a->c.err);
        s3_client_free(&a->c);
        free(a);
        return NULL;
    }
    snprintf(a->root, sizeof a->root, "%s", local_root);
    a->keep = keep;
    a->pending = -1;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    if (pthread_create(&a->th, NULL, archiver_main, a)) {
        snprintf(err, errlen, "ckpt_object: cannot start the archiver thread");
        s3_client_free(&a->c);
        free(a);
        return NULL;
    }
    return a;
}

void objstore_archiver_enqueue(objstore_archiver *a, int64_t step) {
    pthread_mutex_lock(&a->mu);
    if (step > a->pending) a->pending = step;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

int objstore_archiver_poll(objstore_archiver *a, objstore_result *out, int max) {
    pthread_mutex_lock(&a->mu);
    int n = a->n_done < max ? a->n_done : max;
    memcpy(out, a->done, (size_t)n * sizeof *out);
    memmove(a->done, a->done + n, (size_t)(a->n_done - n) * sizeof *out);
    a->n_done -= n;
    pthread_mutex_unlock(&a->mu);
    return n;
}

void objstore_archiver_drain(objstore_archiver *a) {
    pthread_mutex_lock(&a->mu);
    while (a->pending >= 0 || a->busy) pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
}

void objstore_archiver_stop(objstore_archiver *a) {
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->th, NULL);
    s3_client_free(&a->c);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
}

/* ---- back down --------------------------------------------------------------------------------- */

int objstore_newest(s3_client *c, const char *bucket, const char *prefix, int64_t *step,
                    char *err, size_t errlen) {
    char key[1100];
    snprintf(key, sizeof key, "%s%slatest", prefix, *prefix ? "/" : "");
    void *p;
    size_t n;
    if (s3_get(c, bucket, key, &p, &n) == 0) {
        char buf[32] = "";
        memcpy(buf, p, n < 31 ? n : 31);
        free(p);
        char *end;
        long long s = strtoll(buf, &end, 10);
        char mk[1200];
        step_key(mk, sizeof mk, prefix, s, MANIFEST);
        if (end != buf && s3_head(c, bucket, mk, NULL) == 1) {
            *step = s;
            return 1;
        }
    } else if (c->status != 404) {
        snprintf(err, errlen, "%s", c->err);
        return -1;
    }
    int64_t *steps;
    int ns;
    if (archived_steps(c, bucket, prefix, &steps, &ns)) {
        snprintf(err, errlen, "%s", c->err);
        return -1;
    }
    int found = ns > 0;
    if (found) *step = steps[ns - 1];
    free(steps);
    return found;
}

/* 1 when path holds exactly size bytes with SHA-256 sha (an earlier fetch got it whole). */
static int have_verified(const char *path, int64_t size, const char *sha) {
    char hex[65];
    int64_t got = -1;
    return access(path, F_OK) == 0 && s3_sha256_file(path, hex, &got) == 0 && got == size &&
           strcmp(hex, sha) == 0;
}

/* Fetch one object to path and check it; 0 ok, 1 mismatch (msg says), -1 transfer error. */
static int fetch_one(s3_client *c, const char *bucket, const char *key, const char *path,
                     int64_t size, const char *sha, char *msg, size_t mlen) {
    if (s3_get_file(c, bucket, key, path, 1)) {
        snprintf(msg, mlen, "%s", c->err);
        return -1;
    }
    char hex[65];
    int64_t got = -1;
    if (s3_sha256_file(path, hex, &got)) {
        snprintf(msg, mlen, "cannot read back %.500s", path);
        return -1;
    }
    if (got != size || strcmp(hex, sha)) {
        snprintf(msg, mlen, "s3://%s/%.400s: %" PRId64 " bytes SHA-256 %.16s…, objects.json says "
                 "%" PRId64 " bytes %.16s…", bucket, key, got, hex, size, sha);
        return 1;
    }
    return 0;
}

int objstore_fetch_step(s3_client *c, const char *bucket, const char *prefix,
                        const char *local_root, int64_t step, char *err, size_t errlen) {
    char key[1200], fetch_dir[4200], final_dir[4200], msg[OBJSTORE_MSG];
    step_key(key, sizeof key, prefix, step, MANIFEST);
    void *p;
    size_t n;
    if (s3_get(c, bucket, key, &p, &n)) {
        snprintf(err, errlen, "tier 3: step %" PRId64 " %s: %.600s", step,
                 c->status == 404 ? "is not archived (no objects.json)" : "cannot be read",
                 c->err);
        return -1;
    }
    char *text = realloc(p, n + 1);
    text[n] = 0;
    cJSON *man = cJSON_Parse(text);
    free(text);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(man, "files");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(man, "format");
    if (!cJSON_IsArray(files) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT)) {
        snprintf(err, errlen, "tier 3: s3://%s/%.600s is not a minitrain objects.json", bucket, key);
        cJSON_Delete(man);
        return -1;
    }
    snprintf(fetch_dir, sizeof fetch_dir, "%s/step_%08" PRId64 ".fetch", local_root, step);
    snprintf(final_dir, sizeof final_dir, "%s/step_%08" PRId64, local_root, step);
    if (fs_mkdir_p(fetch_dir, err, errlen)) {
        cJSON_Delete(man);
        return -1;
    }
    int rc = 0, n_had = 0, n_got = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, files) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *sz = cJSON_GetObjectItemCaseSensitive(f, "size");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(f, "sha256");
        if (!cJSON_IsString(nm) || !cJSON_IsNumber(sz) || !cJSON_IsString(sh) ||
            strchr(nm->valuestring, '/') || nm->valuestring[0] == '.') {
            snprintf(err, errlen, "tier 3: step %" PRId64 ": bad entry in objects.json", step);
            rc = -1;
            break;
        }
        char path[8400];
        snprintf(path, sizeof path, "%s/%s", fetch_dir, nm->valuestring);
        step_key(key, sizeof key, prefix, step, nm->valuestring);
        if (have_verified(path, (int64_t)sz->valuedouble, sh->valuestring)) {
            n_had++; /* a fetch cut short earlier got this one whole: not fetched again */
            continue;
        }
        n_got++;
        int v = fetch_one(c, bucket, key, path, (int64_t)sz->valuedouble, sh->valuestring, msg,
                          sizeof msg);
        if (v == 1) { /* torn or flipped: refused, fetched once more from scratch */
            fprintf(stderr, "minitrain: warning: tier 3: %s: refused, fetching it again\n", msg);
            unlink(path);
            v = fetch_one(c, bucket, key, path, (int64_t)sz->valuedouble, sh->valuestring, msg,
                          sizeof msg);
            if (v == 1) {
                snprintf(err, errlen, "tier 3: step %" PRId64 " is corrupt in the object store "
                         "(fetched twice): %s; not loaded", step, msg);
                unlink(path);
                rc = -1;
                break;
            }
        }
        if (v < 0) {
            snprintf(err, errlen, "tier 3: step %" PRId64 ": %s", step, msg);
            rc = -1;
            break;
        }
    }
    cJSON_Delete(man);
    if (rc) return -1;
    if (n_had)
        fprintf(stderr, "minitrain: tier 3: step %" PRId64 ": fetch resumed, %d of %d objects "
                "already here and verified, %d fetched\n", step, n_had, n_had + n_got, n_got);
    struct stat st;
    if (stat(final_dir, &st) == 0) { /* a local copy that did not verify: kept aside */
        char aside[4300];
        snprintf(aside, sizeof aside, "%s.corrupt", final_dir);
        fs_remove_tree(aside, msg, sizeof msg);
        if (rename(final_dir, aside)) {
            snprintf(err, errlen, "tier 3: cannot move %.500s aside: %s", final_dir, strerror(errno));
            return -1;
        }
    }
    if (fs_fsync_dir(fetch_dir, err, errlen)) return -1;
    if (rename(fetch_dir, final_dir)) {
        snprintf(err, errlen, "tier 3: cannot rename %.500s: %s", fetch_dir, strerror(errno));
        return -1;
    }
    return fs_fsync_dir(local_root, err, errlen);
}
