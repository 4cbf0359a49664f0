/*
 * objstore/dataset.c — datasets in the object store (objstore/dataset.h): the upload under the
 * commit rule (shards, tokenizer, then index.json), and the bounded local cache with its
 * prefetch thread, LRU eviction outside the prefetch window and SHA-256 verification.
 *
 * Why a cache of whole shards and not ranged reads per batch: a shard is read sequentially by
 * every window that falls in it, and an object store answers one large GET far faster than many
 * small ones; the same choice as MosaicML Streaming's shard cache (its cache_limit, predownload).
 */
#include "objstore/dataset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/fs.h"
#include "core/timer.h"

#define INDEX "index.json"
#define FORMAT "minitrain-dataset"

static void key_of(char *buf, size_t n, const char *prefix, const char *name) {
    snprintf(buf, n, "%s%s%s", prefix, *prefix ? "/" : "", name);
}

/* ---- upload ------------------------------------------------------------------------------------ */

static int put_one(s3_client *c, const char *bucket, const char *prefix, const char *dir,
                   const char *name, int64_t *bytes, char sha[65], char *err, size_t errlen) {
    char path[4400], key[1400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    key_of(key, sizeof key, prefix, name);
    struct stat st;
    if (stat(path, &st) || s3_put_file(c, bucket, key, path, sha)) {
        snprintf(err, errlen, "dataset upload: %.600s", c->err[0] ? c->err : path);
        return -1;
    }
    *bytes = st.st_size;
    return 0;
}

int objstore_dataset_upload(const s3_config *cfg, const char *url, const char *local_dir,
                            objstore_shard *sh, int n, const char *tokenizer, char *err,
                            size_t errlen) {
    char bucket[64], prefix[1024];
    if (s3_parse_url(url, bucket, sizeof bucket, prefix, sizeof prefix)) {
        snprintf(err, errlen, "'%s': want s3://bucket/prefix", url);
        return -1;
    }
    s3_client c;
    if (s3_client_init(&c, cfg)) {
        snprintf(err, errlen, "%s", c.err);
        s3_client_free(&c);
        return -1;
    }
    cJSON *idx = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    cJSON_AddStringToObject(idx, "format", FORMAT);
    int rc = 0;
    char tsha[65];
    int64_t tbytes;
    if (tokenizer) rc = put_one(&c, bucket, prefix, local_dir, tokenizer, &tbytes, tsha, err, errlen);
    if (tokenizer && !rc) {
        cJSON_AddStringToObject(idx, "tokenizer", tokenizer);
        cJSON_AddStringToObject(idx, "tokenizer_sha256", tsha);
    } else {
        cJSON_AddNullToObject(idx, "tokenizer");
    }
    for (int i = 0; i < n && !rc; i++) {
        rc = put_one(&c, bucket, prefix, local_dir, sh[i].name, &sh[i].bytes, sh[i].sha256, err,
                     errlen);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", sh[i].name);
        cJSON_AddStringToObject(o, "split", sh[i].split);
        cJSON_AddNumberToObject(o, "tokens", (double)sh[i].tokens);
        cJSON_AddNumberToObject(o, "version", sh[i].version);
        cJSON_AddNumberToObject(o, "bytes", (double)sh[i].bytes);
        cJSON_AddStringToObject(o, "sha256", sh[i].sha256);
        cJSON_AddItemToArray(arr, o);
    }
    cJSON_AddItemToObject(idx, "shards", arr);
    char *text = cJSON_Print(idx);
    cJSON_Delete(idx);
    char key[1400];
    key_of(key, sizeof key, prefix, INDEX);
    if (!rc && s3_put(&c, bucket, key, text, strlen(text))) { /* the commit point */
        snprintf(err, errlen, "dataset upload: %.600s", c.err);
        rc = -1;
    }
    free(text);
    s3_client_free(&c);
    return rc;
}

/* ---- the cache --------------------------------------------------------------------------------- */

enum { ABSENT, FETCHING, CACHED };

typedef struct {
    int state;
    int pins;
    uint64_t last_use;
    const uint8_t *map;
} entry;

struct objstore_dataset {
    s3_client reader, pre;         /* the reading thread's and the prefetcher's connections */
    char bucket[64], prefix[1024], dir[4096], tok_path[4400];
    objstore_shard *sh;
    entry *e;
    int n, prefetch;
    int64_t limit, cached;         /* bytes of CACHED files */
    int win_lo, win_hi;            /* prefetch window [lo, hi) */
    uint64_t clock;
    int stop;
    objstore_dataset_stats st;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
};

static void path_of(const objstore_dataset *ds, int i, const char *suffix, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s%s", ds->dir, ds->sh[i].name, suffix);
}

/* Download shard i into NAME.part, check it, rename to NAME: 0, 1 (does not verify), -1 (err). */
static int download(objstore_dataset *ds, s3_client *c, int i, char *err, size_t errlen) {
    char part[4400], final[4400], key[1400], hex[65];
    path_of(ds, i, ".part", part, sizeof part);
    path_of(ds, i, "", final, sizeof final);
    key_of(key, sizeof key, ds->prefix, ds->sh[i].name);
    double t0 = timer_now();
    if (s3_get_file(c, ds->bucket, key, part, 0)) {
        snprintf(err, errlen, "shard %s: %.500s", ds->sh[i].name, c->err);
        return -1;
    }
    int64_t got = -1;
    int bad = s3_sha256_file(part, hex, &got) || got != ds->sh[i].bytes ||
              strcmp(hex, ds->sh[i].sha256);
    if (bad) {
        snprintf(err, errlen, "shard s3://%s/%.400s: %" PRId64 " bytes SHA-256 %.16s…, index.json "
                 "says %" PRId64 " bytes %.16s…", ds->bucket, key, got, hex, ds->sh[i].bytes,
                 ds->sh[i].sha256);
        unlink(part);
        return 1;
    }
    if (rename(part, final)) {
        snprintf(err, errlen, "cannot rename %.500s: %s", part, strerror(errno));
        return -1;
    }
    pthread_mutex_lock(&ds->mu);
    ds->st.fetch_s += timer_now() - t0;
    pthread_mutex_unlock(&ds->mu);
    return 0;
}

/* Twice at most: a shard that does not verify is fetched once more, then refused. */
static int fetch_verified(objstore_dataset *ds, s3_client *c, int i, char *err, size_t errlen) {
    int v = download(ds, c, i, err, errlen);
    if (v == 1) {
        fprintf(stderr, "minitrain: warning: dataset: %s: refused, fetching it again\n", err);
        pthread_mutex_lock(&ds->mu);
        ds->st.refetched++;
        pthread_mutex_unlock(&ds->mu);
        v = download(ds, c, i, err, errlen);
        if (v == 1) {
            size_t l = strlen(err);
            snprintf(err + l, errlen - l, " (fetched twice; corrupt in the object store)");
        }
    }
    return v ? -1 : 0;
}

/* Under mu: delete least recently used shards outside the window until under the limit. */
static void evict(objstore_dataset *ds) {
    while (ds->cached > ds->limit) {
        int best = -1;
        for (int i = 0; i < ds->n; i++) {
            entry *e = &ds->e[i];
            if (e->state != CACHED || e->pins || (i >= ds->win_lo && i < ds->win_hi)) continue;
            if (best < 0 || e->last_use < ds->e[best].last_use) best = i;
        }
        if (best < 0) return; /* everything cached is pinned or in the window */
        entry *e = &ds->e[best];
        if (e->map) munmap((void *)e->map, (size_t)ds->sh[best].bytes);
        char p[4400];
        path_of(ds, best, "", p, sizeof p);
        unlink(p);
        e->map = NULL;
        e->state = ABSENT;
        ds->cached -= ds->sh[best].bytes;
        ds->st.evicted++;
    }
}

/* Under mu: shard i's download finished (rc 0) or failed. */
static void landed(objstore_dataset *ds, int i, int rc) {
    ds->e[i].state = rc ? ABSENT : CACHED;
    if (!rc) {
        ds->cached += ds->sh[i].bytes;
        ds->st.fetched++;
        ds->e[i].last_use = ++ds->clock;
        if (ds->cached > ds->st.cached_max) ds->st.cached_max = ds->cached;
        evict(ds);
    }
    pthread_cond_broadcast(&ds->cv);
}

static void *prefetch_main(void *arg) {
    objstore_dataset *ds = arg;
    pthread_mutex_lock(&ds->mu);
    while (!ds->stop) {
        int i = -1;
        for (int k = ds->win_lo; k < ds->win_hi && i < 0; k++)
            if (ds->e[k].state == ABSENT) i = k;
        if (i < 0) {
            pthread_cond_wait(&ds->cv, &ds->mu);
            continue;
        }
        ds->e[i].state = FETCHING;
        pthread_mutex_unlock(&ds->mu);
        char err[768];
        int rc = fetch_verified(ds, &ds->pre, i, err, sizeof err);
        if (rc) fprintf(stderr, "minitrain: warning: dataset prefetch: %s\n", err);
        pthread_mutex_lock(&ds->mu);
        landed(ds, i, rc);
        if (rc) ds->win_hi = i; /* the reader fetches it itself and reports for good */
    }
    pthread_mutex_unlock(&ds->mu);
    return NULL;
}

/* Under mu: the window becomes the `prefetch` shards of i's split after i. */
static void move_window(objstore_dataset *ds, int i) {
    int hi = i + 1, k = 0;
    while (hi < ds->n && k < ds->prefetch && !strcmp(ds->sh[hi].split, ds->sh[i].split)) hi++, k++;
    if (ds->win_lo != i + 1 || ds->win_hi != hi) {
        ds->win_lo = i + 1;
        ds->win_hi = hi;
        pthread_cond_broadcast(&ds->cv);
    }
}

const uint8_t *objstore_dataset_acquire(objstore_dataset *ds, int i, char *err, size_t errlen) {
    pthread_mutex_lock(&ds->mu);
    entry *e = &ds->e[i];
    int waited = 0;
    while (e->state != CACHED) {
        waited = 1;
        if (e->state == FETCHING) {
            pthread_cond_wait(&ds->cv, &ds->mu);
            continue;
        }
        e->state = FETCHING; /* absent: fetched by the reader itself */
        pthread_mutex_unlock(&ds->mu);
        int rc = fetch_verified(ds, &ds->reader, i, err, errlen);
        pthread_mutex_lock(&ds->mu);
        landed(ds, i, rc);
        if (rc) {
            pthread_mutex_unlock(&ds->mu);
            return NULL;
        }
    }
    if (!e->map) {
        char p[4400];
        path_of(ds, i, "", p, sizeof p);
        int fd = open(p, O_RDONLY);
        void *m = fd < 0 ? MAP_FAILED
                         : mmap(NULL, (size_t)ds->sh[i].bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (fd >= 0) close(fd);
        if (m == MAP_FAILED) {
            snprintf(err, errlen, "cannot map %.500s: %s", p, strerror(errno));
            pthread_mutex_unlock(&ds->mu);
            return NULL;
        }
        e->map = m;
    }
    e->pins++;
    e->last_use = ++ds->clock;
    ds->st.waited += waited;
    move_window(ds, i);
    const uint8_t *m = e->map;
    pthread_mutex_unlock(&ds->mu);
    return m;
}

void objstore_dataset_release(objstore_dataset *ds, int i) {
    pthread_mutex_lock(&ds->mu);
    if (ds->e[i].pins > 0) ds->e[i].pins--;
    evict(ds);
    pthread_mutex_unlock(&ds->mu);
}

/* ---- open and close ---------------------------------------------------------------------------- */

static int parse_index(objstore_dataset *ds, const char *text, char *err, size_t errlen) {
    cJSON *idx = cJSON_Parse(text);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(idx, "format");
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(idx, "shards");
    int rc = 0;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT) || !cJSON_IsArray(arr) ||
        cJSON_GetArraySize(arr) < 1) {
        snprintf(err, errlen, "s3://%s/%s/%s is not a minitrain dataset index", ds->bucket,
                 ds->prefix, INDEX);
        cJSON_Delete(idx);
        return -1;
    }
    ds->n = cJSON_GetArraySize(arr);
    ds->sh = calloc((size_t)ds->n, sizeof *ds->sh);
    ds->e = calloc((size_t)ds->n, sizeof *ds->e);
    if (!ds->sh || !ds->e) abort();
    int i = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, arr) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(o, "split");
        const cJSON *tk = cJSON_GetObjectItemCaseSensitive(o, "tokens");
        const cJSON *vr = cJSON_GetObjectItemCaseSensitive(o, "version");
        const cJSON *by = cJSON_GetObjectItemCaseSensitive(o, "bytes");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "sha256");
        objstore_shard *s = &ds->sh[i++];
        if (!cJSON_IsString(nm) || !cJSON_IsString(sp) || !cJSON_IsNumber(tk) ||
            !cJSON_IsNumber(vr) || !cJSON_IsNumber(by) || !cJSON_IsString(sh) ||
            strchr(nm->valuestring, '/') || nm->valuestring[0] == '.' ||
            strlen(nm->valuestring) >= sizeof s->name || strlen(sp->valuestring) >= sizeof s->split ||
            strlen(sh->valuestring) != 64 || by->valuedouble < 1) {
            snprintf(err, errlen, "s3://%s/%s/%s: bad shard entry %d", ds->bucket, ds->prefix,
                     INDEX, i - 1);
            rc = -1;
            break;
        }
        snprintf(s->name, sizeof s->name, "%s", nm->valuestring);
        snprintf(s->split, sizeof s->split, "%s", sp->valuestring);
        snprintf(s->sha256, sizeof s->sha256, "%s", sh->valuestring);
        s->tokens = (int64_t)tk->valuedouble;
        s->version = (int)vr->valuedouble;
        s->bytes = (int64_t)by->valuedouble;
    }
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(idx, "tokenizer");
    const cJSON *tsha = cJSON_GetObjectItemCaseSensitive(idx, "tokenizer_sha256");
    if (!rc && cJSON_IsString(tok) && cJSON_IsString(tsha) && !strchr(tok->valuestring, '/')) {
        char key[1400], hex[65];
        key_of(key, sizeof key, ds->prefix, tok->valuestring);
        snprintf(ds->tok_path, sizeof ds->tok_path, "%s/%.200s", ds->dir, tok->valuestring);
        if (s3_get_file(&ds->reader, ds->bucket, key, ds->tok_path, 0) ||
            s3_sha256_file(ds->tok_path, hex, NULL) || strcmp(hex, tsha->valuestring)) {
            snprintf(err, errlen, "dataset tokenizer s3://%s/%.400s: %s", ds->bucket, key,
                     ds->reader.err[0] ? ds->reader.err : "SHA-256 differs from index.json");
            rc = -1;
        }
    }
    cJSON_Delete(idx);
    return rc;
}

/* The cache must hold the window, the shard being read and one more. */
static int check_limit(const objstore_dataset *ds, char *err, size_t errlen) {
    int64_t big = 0;
    for (int i = 0; i < ds->n; i++)
        if (ds->sh[i].bytes > big) big = ds->sh[i].bytes;
    int64_t need = (int64_t)(ds->prefetch + 2) * big;
    if (ds->limit < need) {
        snprintf(err, errlen, "cache_limit %.1f MB holds less than prefetch + 2 = %d shards of "
                 "up to %.1f MB: give cache_limit >= %.1f MB or a smaller prefetch",
                 ds->limit / 1e6, ds->prefetch + 2, big / 1e6, need / 1e6);
        return -1;
    }
    return 0;
}

objstore_dataset *objstore_dataset_open(const s3_config *cfg, const char *url,
                                        const char *cache_dir, int64_t cache_limit, int prefetch,
                                        char *err, size_t errlen) {
    objstore_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) abort();
    ds->limit = cache_limit;
    ds->prefetch = prefetch;
    pthread_mutex_init(&ds->mu, NULL);
    pthread_cond_init(&ds->cv, NULL);
    snprintf(ds->dir, sizeof ds->dir, "%s", cache_dir);
    void *p = NULL;
    size_t n = 0;
    char key[1400];
    int ok = 0;
    if (s3_parse_url(url, ds->bucket, sizeof ds->bucket, ds->prefix, sizeof ds->prefix)) {
        snprintf(err, errlen, "data '%s': want s3://bucket/prefix", url);
    } else if (s3_client_init(&ds->reader, cfg) || s3_client_init(&ds->pre, cfg)) {
        snprintf(err, errlen, "data '%s': %s", url, ds->reader.err[0] ? ds->reader.err : ds->pre.err);
    } else if (fs_mkdir_p(cache_dir, err, errlen) == 0) {
        key_of(key, sizeof key, ds->prefix, INDEX);
        if (s3_get(&ds->reader, ds->bucket, key, &p, &n)) {
            snprintf(err, errlen, "data '%s': no dataset index: %.500s", url, ds->reader.err);
        } else {
            char *text = realloc(p, n + 1);
            if (!text) abort();
            text[n] = 0;
            ok = parse_index(ds, text, err, errlen) == 0 && check_limit(ds, err, errlen) == 0;
            free(text);
        }
    }
    if (ok && pthread_create(&ds->th, NULL, prefetch_main, ds)) {
        snprintf(err, errlen, "data '%s': cannot start the prefetch thread", url);
        ok = 0;
    }
    if (!ok) {
        s3_client_free(&ds->reader);
        s3_client_free(&ds->pre);
        free(ds->sh);
        free(ds->e);
        free(ds);
        return NULL;
    }
    /* the cache starts empty: a partial download of an earlier run is not trusted */
    for (int i = 0; i < ds->n; i++) {
        char q[4400];
        path_of(ds, i, "", q, sizeof q);
        unlink(q);
        path_of(ds, i, ".part", q, sizeof q);
        unlink(q);
    }
    pthread_mutex_lock(&ds->mu); /* the first shards of the first split are wanted first */
    ds->win_lo = ds->win_hi = 0;
    while (ds->win_hi < ds->n && ds->win_hi <= ds->prefetch &&
           !strcmp(ds->sh[ds->win_hi].split, ds->sh[0].split))
        ds->win_hi++;
    pthread_cond_broadcast(&ds->cv);
    pthread_mutex_unlock(&ds->mu);
    return ds;
}

const objstore_shard *objstore_dataset_shards(const objstore_dataset *ds, int *n) {
    *n = ds->n;
    return ds->sh;
}

const char *objstore_dataset_tokenizer(const objstore_dataset *ds) {
    return ds->tok_path[0] ? ds->tok_path : NULL;
}

void objstore_dataset_stats_get(objstore_dataset *ds, objstore_dataset_stats *out) {
    pthread_mutex_lock(&ds->mu);
    *out = ds->st;
    pthread_mutex_unlock(&ds->mu);
}

void objstore_dataset_close(objstore_dataset *ds) {
    if (!ds) return;
    pthread_mutex_lock(&ds->mu);
    ds->stop = 1;
    pthread_cond_broadcast(&ds->cv);
    pthread_mutex_unlock(&ds->mu);
    pthread_join(ds->th, NULL);
    for (int i = 0; i < ds->n; i++) {
        char q[4400];
        if (ds->e[i].map) munmap((void *)ds->e[i].map, (size_t)ds->sh[i].bytes);
        path_of(ds, i, "", q, sizeof q);
        unlink(q);
    }
    s3_client_free(&ds->reader);
    s3_client_free(&ds->pre);
    pthread_mutex_destroy(&ds->mu);
    pthread_cond_destroy(&ds->cv);
    free(ds->sh);
    free(ds->e);
    free(ds);
}
