/*
 * tests/test_objstore.c — cmocka tests of the S3 client (objstore/s3.h) against a real OpenStack
 * Swift with s3api (tests/swift_lib.sh): when MT_S3_ENDPOINT is not set, the test re-executes
 * itself through `bash tests/swift_lib.sh run`, which starts a one-box Swift in a temp dir and
 * stops it afterwards (exit 77, a skip, when Swift is not installed).
 *
 * Independent checks: SHA-256 against the FIPS 180-2 vector for "abc" and against coreutils'
 * sha256sum of a file; every byte read back is compared with the bytes written here; ranges are
 * cut from the local buffer; the listing is checked against the set of keys put, across pages of
 * 7 keys; the error codes (NoSuchBucket, SignatureDoesNotMatch, NoSuchKey) are the server's
 * verdicts, not values we compute. Retry counts are read from the client's counter: a dead port costs tries - 1
 * retries, a 4xx none, a server that accepts and never answers is a timeout of ~stall_s.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/timer.h"
#include "objstore/s3.h"

#define TU_PREFIX "test_objstore"
#include "tests/testutil.h"

static char bucket[64];

static void client(s3_client *c) {
    s3_config cfg;
    s3_config_default(&cfg);
    cfg.part_mb = 5;
    cfg.threads = 3;
    cfg.list_page = 7;
    cfg.backoff_base_s = 0.01;
    assert_int_equal(s3_client_init(c, &cfg), 0);
}

static void test_sha256_and_urls(void **state) {
    (void)state;
    char hex[65];
    s3_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    char path[512], cmd[700], ref[80] = "";
    tu_path(path, sizeof path, "f.bin");
    unsigned char *b = malloc(3 << 20);
    tu_fill(b, 3 << 20, 7);
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, 3 << 20, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(fgets(ref, 65, p));
    pclose(p);
    int64_t size = 0;
    assert_int_equal(s3_sha256_file(path, hex, &size), 0);
    assert_string_equal(hex, ref);
    assert_int_equal(size, 3 << 20);
    free(b);

    char bk[64], pre[256];
    assert_int_equal(s3_parse_url("s3://my-bucket/a/b/", bk, sizeof bk, pre, sizeof pre), 0);
    assert_string_equal(bk, "my-bucket");
    assert_string_equal(pre, "a/b");
    assert_int_equal(s3_parse_url("s3://abc", bk, sizeof bk, pre, sizeof pre), 0);
    assert_string_equal(pre, "");
    assert_int_equal(s3_parse_url("s3://ab/x", bk, sizeof bk, pre, sizeof pre), -1);
    assert_int_equal(s3_parse_url("s3://Upper/x", bk, sizeof bk, pre, sizeof pre), -1);
    assert_int_equal(s3_parse_url("http://abc/x", bk, sizeof bk, pre, sizeof pre), -1);
}

static void test_config_and_policy(void **state) {
    (void)state;
    s3_config cfg;
    s3_config_default(&cfg);
    char err[256];
    assert_int_equal(s3_config_set(&cfg, "s3_part_mb", "64", err, sizeof err), 0);
    assert_int_equal(cfg.part_mb, 64);
    assert_int_equal(s3_config_set(&cfg, "s3_part_mb", "4", err, sizeof err), -1);
    assert_non_null(strstr(err, "s3_part_mb"));
    assert_int_equal(s3_config_set(&cfg, "s3_threads", "2.5", err, sizeof err), -1);
    assert_int_equal(s3_config_set(&cfg, "s3_bogus", "1", err, sizeof err), -1);
    assert_int_equal(s3_config_set(&cfg, "s3_region", "eu-west-3", err, sizeof err), 0);
    assert_string_equal(cfg.region, "eu-west-3");
    /* full jitter: u·min(cap, base·2^k) */
    cfg.backoff_base_s = 0.2;
    cfg.backoff_cap_s = 5;
    assert_true(s3_backoff_s(&cfg, 0, 0.5) == 0.1);
    assert_true(s3_backoff_s(&cfg, 3, 0.5) == 0.8);
    assert_true(s3_backoff_s(&cfg, 10, 0.999) <= 5.0 && s3_backoff_s(&cfg, 10, 0.999) > 4.9);
    assert_true(s3_retryable(28 /* CURLE_OPERATION_TIMEDOUT */, 0, NULL));
    assert_true(s3_retryable(0, 503, "ServiceUnavailable"));
    assert_true(s3_retryable(0, 400, "SlowDown"));
    assert_false(s3_retryable(0, 403, "SignatureDoesNotMatch"));
    assert_false(s3_retryable(0, 404, "NoSuchBucket"));
    assert_false(s3_retryable(0, 200, NULL));
    /* no credentials: one clear message */
    s3_client c;
    cfg.access_key[0] = 0;
    snprintf(cfg.endpoint, sizeof cfg.endpoint, "http://127.0.0.1:1");
    assert_int_equal(s3_client_init(&c, &cfg), -1);
    assert_non_null(strstr(c.err, "AWS_ACCESS_KEY_ID"));
}

static void test_put_get_head_delete(void **state) {
    (void)state;
    s3_client c;
    client(&c);
    const char *msg = "the quick brown fox jumps over the lazy dog";
    assert_int_equal(s3_put(&c, bucket, "dir/fox.txt", msg, strlen(msg)), 0);
    int64_t size = -1;
    assert_int_equal(s3_head(&c, bucket, "dir/fox.txt", &size), 1);
    assert_int_equal(size, (int64_t)strlen(msg));
    char buf[16] = {0};
    assert_int_equal(s3_get_range(&c, bucket, "dir/fox.txt", 4, 5, buf), 0);
    assert_memory_equal(buf, msg + 4, 5);
    void *all;
    size_t n;
    assert_int_equal(s3_get(&c, bucket, "dir/fox.txt", &all, &n), 0);
    assert_int_equal(n, strlen(msg));
    assert_memory_equal(all, msg, n);
    free(all);
    /* an empty object and a key that needs escaping */
    assert_int_equal(s3_put(&c, bucket, "odd key+&=.bin", "", 0), 0);
    assert_int_equal(s3_head(&c, bucket, "odd key+&=.bin", &size), 1);
    assert_int_equal(size, 0);
    assert_int_equal(s3_delete(&c, bucket, "dir/fox.txt"), 0);
    assert_int_equal(s3_head(&c, bucket, "dir/fox.txt", NULL), 0);
    assert_int_equal(s3_get(&c, bucket, "dir/fox.txt", &all, &n), -1);
    assert_non_null(strstr(c.err, "NoSuchKey"));
    s3_client_free(&c);
}

static void test_list_pages(void **state) {
    (void)state;
    s3_client c;
    client(&c);
    int want = 20;
    for (int i = 0; i < want; i++) {
        char key[64], body[16];
        snprintf(key, sizeof key, "list/k%03d", i);
        int n = snprintf(body, sizeof body, "%d", i * 11);
        assert_int_equal(s3_put(&c, bucket, key, body, (size_t)n), 0);
    }
    assert_int_equal(s3_put(&c, bucket, "listx/other", "x", 1), 0);
    s3_object *o;
    int n;
    assert_int_equal(s3_list(&c, bucket, "list/", &o, &n), 0);
    assert_int_equal(n, want); /* 3 pages of 7 */
    for (int i = 0; i < n; i++) {
        char key[64], body[16];
        snprintf(key, sizeof key, "list/k%03d", i);
        assert_string_equal(o[i].key, key);
        assert_int_equal(o[i].size, snprintf(body, sizeof body, "%d", i * 11));
    }
    free(o);
    assert_int_equal(s3_list(&c, bucket, "nothing-here/", &o, &n), 0);
    assert_int_equal(n, 0);
    free(o);
    s3_client_free(&c);
}

static void test_multipart_and_parallel_get(void **state) {
    (void)state;
    s3_client c;
    client(&c);
    size_t size = (12u << 20) + 12345; /* 3 parts of 5 MiB (the last short) */
    unsigned char *b = malloc(size), *back;
    tu_fill(b, size, 11);
    char src[512], dst[512], hex[65], ref[65];
    tu_path(src, sizeof src, "big.bin");
    tu_path(dst, sizeof dst, "big.back");
    FILE *f = fopen(src, "wb");
    fwrite(b, 1, size, f);
    fclose(f);
    s3_sha256_hex(b, size, ref);
    double t0 = timer_now();
    assert_int_equal(s3_put_file(&c, bucket, "mp/big.bin", src, hex), 0);
    double up = timer_now() - t0;
    assert_string_equal(hex, ref);
    int64_t got = 0;
    assert_int_equal(s3_head(&c, bucket, "mp/big.bin", &got), 1);
    assert_int_equal(got, (int64_t)size);
    t0 = timer_now();
    assert_int_equal(s3_get_file(&c, bucket, "mp/big.bin", dst, 0), 0);
    double down = timer_now() - t0;
    size_t n;
    back = (unsigned char *)tu_slurp(dst, &n);
    assert_int_equal(n, size);
    assert_memory_equal(back, b, size);
    free(back);
    printf("  multipart upload %.1f MB/s, parallel ranged download %.1f MB/s (3 connections)\n",
           size / up / 1e6, size / down / 1e6);

    /* resume: chunk 0 marked done in .part.done is not fetched again (garbage there stays),
     * chunks 1 and 2 are */
    char part[600], done[700];
    snprintf(part, sizeof part, "%s.part", dst);
    snprintf(done, sizeof done, "%s.part.done", dst);
    unsigned char *junk = calloc(size, 1);
    memset(junk, 0xAB, 5u << 20);
    f = fopen(part, "wb");
    fwrite(junk, 1, size, f);
    fclose(f);
    /* the ETag as the server gives it, read through a listing */
    s3_object *o;
    int no;
    assert_int_equal(s3_list(&c, bucket, "mp/big.bin", &o, &no), 0);
    assert_int_equal(no, 1);
    f = fopen(done, "w");
    /* listing ETags are quoted like the header's: "…" */
    fprintf(f, "%zu %s\n0\n", size, o[0].etag);
    fclose(f);
    free(o);
    assert_int_equal(s3_get_file(&c, bucket, "mp/big.bin", dst, 1), 0);
    back = (unsigned char *)tu_slurp(dst, &n);
    assert_int_equal(n, size);
    assert_memory_equal(back, junk, 5u << 20);                          /* kept */
    assert_memory_equal(back + (5u << 20), b + (5u << 20), size - (5u << 20)); /* fetched */
    assert_int_equal(access(done, F_OK), -1);
    free(back);
    free(junk);
    free(b);
    s3_client_free(&c);
}

static void test_errors(void **state) {
    (void)state;
    s3_client c;
    client(&c);
    assert_int_equal(s3_put(&c, "no-such-bucket-xyz", "k", "x", 1), -1);
    assert_non_null(strstr(c.err, "NoSuchBucket"));
    int r0 = c.retries;
    assert_int_equal(c.status, 404);
    assert_int_equal(c.retries, r0); /* a 4xx is never retried */
    s3_client_free(&c);

    s3_config cfg;
    s3_config_default(&cfg);
    snprintf(cfg.secret_key, sizeof cfg.secret_key, "wrong");
    assert_int_equal(s3_client_init(&c, &cfg), 0);
    assert_int_equal(s3_put(&c, bucket, "k", "x", 1), -1);
    assert_int_equal(c.status, 403);
    assert_non_null(strstr(c.err, "SignatureDoesNotMatch"));
    assert_int_equal(c.retries, 0);
    s3_client_free(&c);

    /* a dead port: every try fails, tries - 1 retries with backoff */
    s3_config_default(&cfg);
    snprintf(cfg.endpoint, sizeof cfg.endpoint, "http://127.0.0.1:16498");
    cfg.tries = 3;
    cfg.backoff_base_s = 0.01;
    assert_int_equal(s3_client_init(&c, &cfg), 0);
    assert_int_equal(s3_put(&c, bucket, "k", "x", 1), -1);
    assert_int_equal(c.retries, 2);
    assert_non_null(strstr(c.err, "after 3 tries"));
    s3_client_free(&c);

    /* a server that accepts and never answers: a timeout after ~stall_s, retried */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s, 8), 0);
    getsockname(s, (struct sockaddr *)&a, &al);
    snprintf(cfg.endpoint, sizeof cfg.endpoint, "http://127.0.0.1:%d", ntohs(a.sin_port));
    cfg.tries = 2;
    cfg.stall_s = 1;
    assert_int_equal(s3_client_init(&c, &cfg), 0);
    double t0 = timer_now();
    assert_int_equal(s3_head(&c, bucket, "k", NULL), -1);
    double dt = timer_now() - t0;
    assert_true(dt > 1.5 && dt < 10);
    assert_int_equal(c.retries, 1);
    assert_non_null(strstr(c.err, "no answer"));
    s3_client_free(&c);
    close(s);
}

int main(int argc, char **argv) {
    (void)argc;
    if (!getenv("MT_S3_ENDPOINT")) { /* start a Swift for this test and come back through it */
        execlp("bash", "bash", "tests/swift_lib.sh", "run", argv[0], (char *)NULL);
        perror("exec bash tests/swift_lib.sh");
        return 1;
    }
    snprintf(bucket, sizeof bucket, "mt-test-%d", (int)getpid());
    s3_client c;
    client(&c);
    if (s3_create_bucket(&c, bucket)) {
        fprintf(stderr, "test_objstore: cannot create bucket %s: %s\n", bucket, c.err);
        return 1;
    }
    s3_client_free(&c);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_and_urls),
        cmocka_unit_test(test_config_and_policy),
        cmocka_unit_test(test_put_get_head_delete),
        cmocka_unit_test(test_list_pages),
        cmocka_unit_test(test_multipart_and_parallel_get),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
