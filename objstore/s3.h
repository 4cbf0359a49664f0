/*
 * objstore/s3.h — an S3 client on libcurl: the object-store tier's only way to a bucket (issue 27).
 * Prefix s3_.
 *
 * Requests are path-style (ENDPOINT/BUCKET/KEY) and signed with AWS Signature Version 4 by
 * libcurl itself (CURLOPT_AWS_SIGV4, "aws:amz:REGION:s3"); each request carries the real
 * x-amz-content-sha256 of its body (OpenSSL SHA-256), which libcurl puts into the canonical
 * request, so the server checks every byte it stores against the signature. Debian's libs3 signs
 * only SigV2, which is why this is our own code.
 *
 *   s3_put / s3_put_file      one PUT, or a multipart upload (parts of part_mb MiB uploaded by
 *                             `threads` parallel connections; any part that fails for good aborts
 *                             the upload, so no half object is left behind)
 *   s3_get_range / s3_get_file  ranged GET into memory; a whole object by parallel ranged GETs
 *                             into PATH.part, renamed to PATH once complete (a failed download
 *                             resumes by range: the ranges already fetched are not fetched again)
 *   s3_head, s3_list (v2, every page), s3_delete, s3_create_bucket
 *
 * Retries: a timeout, a refused or reset connection, any 5xx and SlowDown are retried up to
 * `tries` times with full-jitter exponential backoff (sleep uniform in [0, min(cap, base·2^k)],
 * "Exponential Backoff And Jitter", AWS Architecture Blog, 2015); a 4xx never is (a wrong key or
 * a missing bucket stays wrong). A stalled server is a timeout: less than 1 KiB/s for
 * stall_s seconds.
 *
 * Errors: every call returns 0 or -1 with one line in c->err, e.g.
 * "s3: PUT s3://bkt/a/b: HTTP 404 NoSuchBucket: The specified bucket does not exist".
 * A client is used by one thread at a time; s3_put_file/s3_get_file open their own connections.
 */
#ifndef OBJSTORE_S3_H
#define OBJSTORE_S3_H

#include <stddef.h>
#include <stdint.h>

#define S3_ERR 512
#define S3_STR 256

typedef struct {
    char endpoint[S3_STR];   /* http(s)://host:port, no trailing '/' */
    char region[64];         /* "us-east-1" */
    char access_key[S3_STR]; /* AWS_ACCESS_KEY_ID */
    char secret_key[S3_STR]; /* AWS_SECRET_ACCESS_KEY */
    int part_mb;             /* multipart part size, MiB (S3: 5 .. 5120; default 16) */
    int threads;             /* parallel connections of one upload or download (default 4) */
    int tries;               /* attempts per request, >= 1 (default 5) */
    double backoff_base_s;   /* first backoff cap (default 0.2 s) */
    double backoff_cap_s;    /* largest backoff (default 5 s) */
    double connect_s;        /* connect timeout (default 5 s) */
    double stall_s;          /* < 1 KiB/s for this long is a timeout (default 10 s) */
    double max_mb_s;         /* upload bandwidth cap of one transfer, MB/s (0: none) */
    double max_get_mb_s;     /* download bandwidth cap of one transfer, MB/s (0: none) */
    int list_page;           /* keys per LIST page, max-keys (S3: at most 1000; default 1000) */
} s3_config;

typedef struct {
    s3_config cfg;
    void *curl;              /* CURL *, reused between calls (keep-alive) */
    char err[S3_ERR];
    long status;             /* HTTP status of the last response (0: none) */
    int retries;             /* retries spent since the client was made (all calls) */
} s3_client;

/* One entry of a listing. */
typedef struct {
    char key[1024];
    int64_t size;
    char etag[80];
} s3_object;

/* Defaults, then the standard environment: AWS_ENDPOINT_URL (or MT_S3_ENDPOINT),
 * AWS_REGION (or AWS_DEFAULT_REGION), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY. */
void s3_config_default(s3_config *cfg);

/* Set one config key: s3_endpoint, s3_region, s3_access_key, s3_secret_key, s3_part_mb,
 * s3_threads, s3_tries, s3_stall_s, s3_max_mb_s, s3_get_mb_s. Returns 0, or -1 with a message in err
 * (unknown key, value out of range). */
int s3_config_set(s3_config *cfg, const char *key, const char *value, char *err, size_t errlen);

/* A client for cfg (copied). Returns 0, or -1 with c->err (no endpoint, no credentials,
 * endpoint not http(s)). */
int s3_client_init(s3_client *c, const s3_config *cfg);
void s3_client_free(s3_client *c);

/* Split "s3://bucket/prefix" into bucket and prefix (no leading or trailing '/'; "" when
 * absent). Returns 0, or -1 when url is not s3:// or the bucket name is not 3..63 characters of
 * [a-z0-9.-]. */
int s3_parse_url(const char *url, char *bucket, size_t blen, char *prefix, size_t plen);

/* Lower-case hex SHA-256 (65 bytes with the NUL) of n bytes. */
void s3_sha256_hex(const void *p, size_t n, char hex[65]);

/* Lower-case hex SHA-256 of a whole file. Returns 0, or -1 (cannot read it). */
int s3_sha256_file(const char *path, char hex[65], int64_t *size);

int s3_create_bucket(s3_client *c, const char *bucket);

/* PUT n bytes as bucket/key. */
int s3_put(s3_client *c, const char *bucket, const char *key, const void *p, size_t n);

/* Upload a file: one PUT up to part_mb MiB, else a multipart upload (parallel parts, aborted on
 * failure). *sha_hex (may be NULL) receives the SHA-256 of the bytes read. */
int s3_put_file(s3_client *c, const char *bucket, const char *key, const char *path,
                char sha_hex[65]);

/* GET bytes [off, off + n) of bucket/key into buf (n bytes). Fails when fewer come back. */
int s3_get_range(s3_client *c, const char *bucket, const char *key, int64_t off, size_t n,
                 void *buf);

/* GET a whole object (any size) into malloc'd *p, *n bytes. */
int s3_get(s3_client *c, const char *bucket, const char *key, void **p, size_t *n);

/* Download bucket/key to path by parallel ranged GETs into path.part, then rename. When
 * path.part exists with the object's size and resume = 1, only the ranges not yet marked done in
 * path.part.done are fetched again. */
int s3_get_file(s3_client *c, const char *bucket, const char *key, const char *path, int resume);

/* HEAD: 1 (exists, *size set when size != NULL), 0 (404), -1 (other error, c->err). */
int s3_head(s3_client *c, const char *bucket, const char *key, int64_t *size);

/* LIST v2 of every key under prefix, all pages (continuation tokens). *out is malloc'd (free it),
 * *n entries, in key order. */
int s3_list(s3_client *c, const char *bucket, const char *prefix, s3_object **out, int *n);

/* DELETE bucket/key (a missing key is not an error: S3 answers 204). */
int s3_delete(s3_client *c, const char *bucket, const char *key);

/* Backoff before retry k (0-based), seconds: uniform in [0, min(cap, base·2^k)] from the
 * uniform u in [0, 1). */
double s3_backoff_s(const s3_config *cfg, int k, double u);

/* 1 when an outcome is worth retrying: curl error (timeouts, connect, reset, partial), HTTP 5xx,
 * or a body whose S3 error code is SlowDown; 0 for success and every 4xx. */
int s3_retryable(int curl_code, long status, const char *code);

#endif /* OBJSTORE_S3_H */
