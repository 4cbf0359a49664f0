/*
 * objstore/s3_impl.h — private to objstore/s3*.c: one signed request with retries, the response
 * buffer, and the few XML fields S3 answers with. Not for other modules (tests/run_layers.sh).
 */
#ifndef OBJSTORE_S3_IMPL_H
#define OBJSTORE_S3_IMPL_H

#include <curl/curl.h>

#include "objstore/s3.h"

typedef struct {
    char *p;
    size_t n, cap;
} s3_buf;

/* One request. query is already canonical (keys sorted, values URI-encoded); body NULL with
 * body_n 0 is an empty body. When dst is set, a 2xx body goes there (at most dst_cap bytes,
 * *dst_n counts them); otherwise into resp. */
typedef struct {
    const char *method;
    const char *bucket, *key; /* key NULL: the bucket itself */
    const char *query;        /* "" or NULL: none */
    const void *body;
    size_t body_n;
    const char *range;        /* "bytes=a-b" or NULL */
    void *dst;
    size_t dst_cap, dst_n;
    s3_buf resp;              /* body of the last response (error XML, listings); free it */
    char etag[80];            /* ETag header of the response, quotes kept */
    int64_t content_length;   /* Content-Length of the response (-1: none) */
    int streams;              /* parallel connections of the transfer this request is one of:
                                 they share the upload cap max_mb_s (0: 1, the whole cap) */
} s3_req;

/* Run r on handle h (NULL: the client's own) with retries (s3_retryable, s3_backoff_s). On
 * failure one line in c->err. Returns 0 on a 2xx answer, else -1 (c->status holds the last HTTP
 * status, 0 when none came). err_out (may be NULL, S3_ERR bytes) receives the message as well —
 * for threads that share a client but not its err. */
int s3_request(s3_client *c, CURL *h, s3_req *r, char *err_out);

/* The text of the first <tag>…</tag> at or after s, entities decoded, into out (n bytes).
 * Returns a pointer just past the closing tag, or NULL when there is none. */
const char *s3_xml_field(const char *s, const char *tag, char *out, size_t n);

/* URI-encode s as SigV4 wants it (unreserved A-Za-z0-9-_.~ kept; '/' kept when keep_slash). */
void s3_uri_encode(const char *s, int keep_slash, char *out, size_t n);

void s3_buf_free(s3_buf *b);

#endif /* OBJSTORE_S3_IMPL_H */
