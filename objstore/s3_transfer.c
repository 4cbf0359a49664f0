/*
 * objstore/s3_transfer.c — the two transfers of whole files: upload (one PUT, or a multipart
 * upload whose parts go up over `threads` parallel connections) and download (parallel ranged
 * GETs into PATH.part, resumable, renamed once complete).
 *
 * Multipart (S3 API: CreateMultipartUpload, UploadPart, CompleteMultipartUpload,
 * AbortMultipartUpload): parts are numbered 1..N, each part_mb MiB except the last; every part
 * is signed with its own SHA-256; the completion lists each part's ETag. When any part fails
 * after its retries, the upload is aborted — the key never names a partial object, and the
 * server drops the parts.
 *
 * Download: chunks of part_mb MiB; a chunk is written with pwrite at its offset and, once
 * written, its index is appended to PATH.part.done (first line: the object's size and ETag). A
 * download that died resumes from those records when the object is still the same (size and
 * ETag), fetching only the missing chunks; then fsync, rename PATH.part -> PATH.
 */
#include "objstore/s3_impl.h" /* the module face objstore/s3.h, and its private part */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Work shared by the threads of one transfer. */
typedef struct {
    s3_client *c;
    const char *bucket, *key;
    int fd;
    int64_t size, chunk;
    int n_parts;
    int next;            /* next part index to take (under mu) */
    int streams;         /* threads of the transfer: they share the bandwidth caps */
    int failed;          /* a part failed for good: the others stop */
    char err[S3_ERR];
    char upload_id[512];
    char (*etags)[80];   /* [n_parts], upload only */
    unsigned char *done; /* [n_parts], download only: 1 when already fetched */
    FILE *done_log;      /* download only */
    pthread_mutex_t mu;
} job;

static int take(job *j) {
    pthread_mutex_lock(&j->mu);
    int i = -1;
    while (!j->failed && j->next < j->n_parts) {
        int k = j->next++;
        if (!j->done || !j->done[k]) {
            i = k;
            break;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return i;
}

static void fail(job *j, const char *msg) {
    pthread_mutex_lock(&j->mu);
    if (!j->failed) snprintf(j->err, sizeof j->err, "%s", msg);
    j->failed = 1;
    pthread_mutex_unlock(&j->mu);
}

static int run_threads(job *j, void *(*fn)(void *)) {
    int nt = j->c->cfg.threads < j->n_parts ? j->c->cfg.threads : j->n_parts;
    j->streams = nt;
    pthread_t th[64];
    int started = 0;
    for (int t = 0; t < nt; t++)
        if (!pthread_create(&th[t], NULL, fn, j)) started++;
        else break;
    if (!started) fn(j);
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    return j->failed ? -1 : 0;
}

/* ---- upload ------------------------------------------------------------------------------------ */

static void *upload_main(void *arg) {
    job *j = arg;
    CURL *h = curl_easy_init();
    void *buf = malloc((size_t)j->chunk);
    if (!h || !buf) fail(j, "s3: out of memory for a part");
    int i;
    while (h && buf && (i = take(j)) >= 0) {
        int64_t off = (int64_t)i * j->chunk;
        size_t n = (size_t)(j->size - off < j->chunk ? j->size - off : j->chunk);
        if (pread(j->fd, buf, n, off) != (ssize_t)n) {
            fail(j, "s3: short read of the file being uploaded");
            break;
        }
        char query[700], id_enc[600], err[S3_ERR];
        s3_uri_encode(j->upload_id, 0, id_enc, sizeof id_enc);
        snprintf(query, sizeof query, "partNumber=%d&uploadId=%s", i + 1, id_enc);
        s3_req r = {.method = "PUT", .bucket = j->bucket, .key = j->key, .query = query,
                    .body = buf, .body_n = n, .streams = j->streams};
        int rc = s3_request(j->c, h, &r, err);
        s3_buf_free(&r.resp);
        if (rc) {
            fail(j, err);
            break;
        }
        snprintf(j->etags[i], sizeof j->etags[i], "%s", r.etag);
    }
    free(buf);
    if (h) curl_easy_cleanup(h);
    return NULL;
}

static int multipart(s3_client *c, job *j) {
    s3_req r = {.method = "POST", .bucket = j->bucket, .key = j->key, .query = "uploads="};
    int rc = s3_request(c, NULL, &r, NULL);
    if (!rc && !s3_xml_field(r.resp.p, "UploadId", j->upload_id, sizeof j->upload_id)) {
        snprintf(c->err, sizeof c->err, "s3: POST s3://%s/%s?uploads: no UploadId in the answer",
                 j->bucket, j->key);
        rc = -1;
    }
    s3_buf_free(&r.resp);
    if (rc) return -1;
    j->etags = calloc((size_t)j->n_parts, sizeof *j->etags);
    if (!j->etags) abort();
    char id_enc[600], query[700];
    s3_uri_encode(j->upload_id, 0, id_enc, sizeof id_enc);
    snprintf(query, sizeof query, "uploadId=%s", id_enc);
    if (run_threads(j, upload_main)) {
        int k = snprintf(c->err, sizeof c->err, "%.480s (multipart upload aborted)", j->err);
        (void)k;
        s3_req a = {.method = "DELETE", .bucket = j->bucket, .key = j->key, .query = query};
        char ignore[S3_ERR];
        s3_request(c, NULL, &a, ignore); /* best effort: the server expires it otherwise */
        s3_buf_free(&a.resp);
        free(j->etags);
        return -1;
    }
    size_t cap = 128 + (size_t)j->n_parts * 160, o = 0;
    char *xml = malloc(cap);
    if (!xml) abort();
    o += (size_t)snprintf(xml + o, cap - o, "<CompleteMultipartUpload>");
    for (int i = 0; i < j->n_parts; i++)
        o += (size_t)snprintf(xml + o, cap - o, "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>",
                              i + 1, j->etags[i]);
    o += (size_t)snprintf(xml + o, cap - o, "</CompleteMultipartUpload>");
    s3_req d = {.method = "POST", .bucket = j->bucket, .key = j->key, .query = query, .body = xml,
                .body_n = o};
    rc = s3_request(c, NULL, &d, NULL);
    /* S3 may answer 200 with an <Error> body when completion fails late */
    if (!rc && d.resp.p && strstr(d.resp.p, "<Error>")) {
        char code[96] = "";
        s3_xml_field(d.resp.p, "Code", code, sizeof code);
        snprintf(c->err, sizeof c->err, "s3: completing s3://%s/%s failed: %s", j->bucket, j->key,
                 code);
        rc = -1;
    }
    s3_buf_free(&d.resp);
    free(xml);
    free(j->etags);
    return rc;
}

int s3_put_file(s3_client *c, const char *bucket, const char *key, const char *path,
                char sha_hex[65]) {
    char hex[65];
    int64_t size = 0;
    if (s3_sha256_file(path, hex, &size)) {
        snprintf(c->err, sizeof c->err, "s3: cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    if (sha_hex) memcpy(sha_hex, hex, 65);
    job j = {.c = c, .bucket = bucket, .key = key, .size = size,
             .chunk = (int64_t)c->cfg.part_mb << 20, .mu = PTHREAD_MUTEX_INITIALIZER};
    j.fd = open(path, O_RDONLY);
    if (j.fd < 0) {
        snprintf(c->err, sizeof c->err, "s3: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    int rc;
    if (size <= j.chunk) {
        void *buf = malloc(size ? (size_t)size : 1);
        if (!buf) abort();
        rc = pread(j.fd, buf, (size_t)size, 0) == (ssize_t)size ? s3_put(c, bucket, key, buf, (size_t)size) : -1;
        if (rc && !c->err[0]) snprintf(c->err, sizeof c->err, "s3: short read of %s", path);
        free(buf);
    } else {
        j.n_parts = (int)((size + j.chunk - 1) / j.chunk);
        rc = multipart(c, &j);
    }
    close(j.fd);
    return rc;
}

/* ---- download ---------------------------------------------------------------------------------- */

static void *download_main(void *arg) {
    job *j = arg;
    s3_client local = *j->c; /* own handle and err; shares cfg */
    local.curl = curl_easy_init();
    local.cfg.max_get_mb_s /= j->streams > 0 ? j->streams : 1; /* the cap is the transfer's */
    int retries0 = local.retries;
    void *buf = malloc((size_t)j->chunk);
    if (!local.curl || !buf) fail(j, "s3: out of memory for a chunk");
    int i;
    while (local.curl && buf && (i = take(j)) >= 0) {
        int64_t off = (int64_t)i * j->chunk;
        size_t n = (size_t)(j->size - off < j->chunk ? j->size - off : j->chunk);
        local.err[0] = 0;
        if (s3_get_range(&local, j->bucket, j->key, off, n, buf)) {
            fail(j, local.err);
            break;
        }
        if (pwrite(j->fd, buf, n, off) != (ssize_t)n) {
            fail(j, "s3: cannot write the download (disk full?)");
            break;
        }
        pthread_mutex_lock(&j->mu);
        fprintf(j->done_log, "%d\n", i);
        fflush(j->done_log);
        pthread_mutex_unlock(&j->mu);
    }
    __atomic_add_fetch(&j->c->retries, local.retries - retries0, __ATOMIC_RELAXED);
    free(buf);
    if (local.curl) curl_easy_cleanup(local.curl);
    return NULL;
}

/* Read PATH.part.done: chunks fetched already, when its header matches size and etag. */
static void read_done(const char *done_path, int64_t size, const char *etag, job *j) {
    FILE *f = fopen(done_path, "r");
    if (!f) return;
    char line[256], want[256];
    snprintf(want, sizeof want, "%lld %s\n", (long long)size, etag);
    if (fgets(line, sizeof line, f) && !strcmp(line, want)) {
        int i;
        while (fscanf(f, "%d", &i) == 1)
            if (i >= 0 && i < j->n_parts) j->done[i] = 1;
    }
    fclose(f);
}

int s3_get_file(s3_client *c, const char *bucket, const char *key, const char *path, int resume) {
    s3_req hr = {.method = "HEAD", .bucket = bucket, .key = key};
    int rc = s3_request(c, NULL, &hr, NULL);
    s3_buf_free(&hr.resp);
    if (rc) return -1;
    char part[4096], done_path[4200];
    snprintf(part, sizeof part, "%s.part", path);
    snprintf(done_path, sizeof done_path, "%s.part.done", path);
    job j = {.c = c, .bucket = bucket, .key = key, .size = hr.content_length,
             .chunk = (int64_t)c->cfg.part_mb << 20, .mu = PTHREAD_MUTEX_INITIALIZER};
    j.n_parts = (int)((j.size + j.chunk - 1) / j.chunk);
    j.done = calloc((size_t)j.n_parts + 1, 1);
    if (!j.done) abort();
    struct stat st;
    if (resume && !stat(part, &st) && st.st_size == j.size) read_done(done_path, j.size, hr.etag, &j);
    else unlink(done_path);
    j.fd = open(part, O_WRONLY | O_CREAT, 0644);
    int any_done = 0;
    for (int i = 0; i < j.n_parts; i++) any_done |= j.done[i];
    j.done_log = fopen(done_path, any_done ? "a" : "w");
    if (j.fd < 0 || !j.done_log || ftruncate(j.fd, j.size)) {
        snprintf(c->err, sizeof c->err, "s3: cannot write %.400s: %s", part, strerror(errno));
        rc = -1;
    } else {
        if (!any_done) fprintf(j.done_log, "%lld %s\n", (long long)j.size, hr.etag);
        fflush(j.done_log);
        rc = j.n_parts ? run_threads(&j, download_main) : 0;
        if (rc) snprintf(c->err, sizeof c->err, "%s", j.err);
        if (!rc && (fsync(j.fd) || rename(part, path))) {
            snprintf(c->err, sizeof c->err, "s3: cannot finish %.400s: %s", path, strerror(errno));
            rc = -1;
        }
    }
    if (j.done_log) fclose(j.done_log);
    if (j.fd >= 0) close(j.fd);
    if (!rc) unlink(done_path);
    free(j.done);
    return rc;
}
