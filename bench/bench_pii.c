/*
 * bench/bench_pii.c — PII scrubber throughput (MB/s, one thread) on tinyshakespeare with PII
 * injected, against baselines measured in the same run on the same bytes: a memcpy of the
 * buffer and a memchr pass counting newlines (the least any scanner does).
 *
 * The input is examples/data/tinyshakespeare.txt with one PII line (English or Chinese, from
 * the list below, values varied) after every --every lines, repeated to at least --mb MB so
 * that it does not sit in the CPU caches. Each figure is the median of --repeats runs, timed in
 * this thread's CPU time (CLOCK_THREAD_CPUTIME_ID): on a shared machine wall time mostly measures
 * the other tenants; the wall-clock median is printed beside it.
 *
 *   make build/bench/bench_pii && ./build/bench/bench_pii [--mb 32] [--every 10] [--repeats 9]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/stats.h"
#include "core/timer.h"
#include "safety/pii.h"

static const char *INJECT[] = {
    "Write to john.doe%d@example.com for the tickets.\n",
    "手机1381234%04d号，请尽快联系。\n",
    "Card 4111 1111 1111 1111 on file, order %d.\n",
    "卡号4111111111111111谢谢，订单%d。\n",
    "Call +1 (415) 555-%04d after noon.\n",
    "IBAN DE89 3704 0044 0532 0130 00, ref %d.\n",
    "Connection from 192.168.%d.17 refused.\n",
    "listen [2001:db8::%x]:443\n",
    "SSN 123-45-%04d on the form.\n",
    "身份证号11010519491231002X，编号%d。\n",
    "export AWS_KEY=AKIAIOSFODNN7EXAMPLE # %d\n",
    "db: postgres://bob:s3cret%d@db.example.com/app\n",
    "build 1.2.3.%d.5 at 1748503543012\n",
};
#define NINJ (int)(sizeof(INJECT) / sizeof(INJECT[0]))

static int sink_discard(void *ctx, const char *p, size_t n) {
    (void)p;
    *(size_t *)ctx += n;
    return 0;
}

static volatile size_t g_sink; /* keeps the baselines from being optimised away */

enum { B_MEMCPY, B_MEMCHR, B_FIND, B_MASK, B_HASH, B_DROP, B_STREAM, B_N };
static const char *LABEL[B_N] = {"memcpy (baseline)",
                                 "memchr newline count (baseline)",
                                 "pii_find (scan only)",
                                 "scrub mask (pii_scrub_text)",
                                 "scrub hash (HMAC-SHA256)",
                                 "scrub drop-line",
                                 "stream mask (push, 1 MiB pieces)"};

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* one run; returns CPU seconds, *wall gets wall seconds */
static double run_once(int which, const char *text, size_t n, char *dst, double *wall) {
    static const uint8_t key[] = "bench-key-0123456789abcdef";
    double w0 = timer_now(), t0 = cpu_now();
    size_t acc = 0;
    switch (which) {
    case B_MEMCPY:
        memcpy(dst, text, n);
        acc = (size_t)dst[n / 2];
        break;
    case B_MEMCHR:
        for (const char *p = text, *e = text + n; (p = memchr(p, '\n', (size_t)(e - p))); p++)
            acc++;
        break;
    case B_FIND:
        acc = pii_find(text, n, PII_ALL, NULL, 0);
        break;
    case B_MASK:
    case B_HASH:
    case B_DROP: {
        pii_mode m = which == B_MASK ? PII_MASK : which == B_HASH ? PII_HASH : PII_DROP_LINE;
        char *o = pii_scrub_text(text, n, m, PII_ALL, key, sizeof(key) - 1, NULL, &acc);
        free(o);
        break;
    }
    case B_STREAM: {
        pii_scrubber *s = pii_scrubber_new(PII_MASK, PII_ALL, NULL, 0, sink_discard, &acc);
        for (size_t k = 0; k < n; k += 1u << 20)
            pii_scrubber_push(s, text + k, n - k < (1u << 20) ? n - k : (1u << 20));
        pii_scrubber_finish(s);
        pii_scrubber_free(s);
        break;
    }
    }
    double dt = cpu_now() - t0;
    *wall = timer_now() - w0;
    g_sink += acc;
    return dt;
}

int main(int argc, char **argv) {
    double mb = 32;
    int every = 10, repeats = 9;
    const char *path = "examples/data/tinyshakespeare.txt";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mb"))
            mb = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--every"))
            every = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats"))
            repeats = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--input"))
            path = argv[i + 1];
    }
    if (every < 1 || repeats < 1 || repeats > 101 || mb <= 0) {
        fprintf(stderr, "usage: bench_pii [--mb 32] [--every 10] [--repeats 9] [--input FILE]\n");
        return 2;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench_pii: cannot open %s (run from the repository root)\n", path);
        return 2;
    }
    fseek(f, 0, SEEK_END);
    long sl = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *src = malloc((size_t)sl + 1);
    if (fread(src, 1, (size_t)sl, f) != (size_t)sl)
        return 1;
    src[sl] = '\0';
    fclose(f);

    /* tinyshakespeare with a PII line after every `every` lines, repeated to >= mb MB */
    size_t want = (size_t)(mb * 1e6), cap = want + (size_t)sl * 2 + 4096, n = 0;
    char *text = malloc(cap);
    long items = 0, lines = 0;
    while (n < want) {
        for (const char *p = src; *p;) {
            const char *nl = strchr(p, '\n');
            size_t L = nl ? (size_t)(nl - p) + 1 : strlen(p);
            memcpy(text + n, p, L);
            n += L;
            p += L;
            if (++lines % every == 0) {
                n += (size_t)snprintf(text + n, cap - n, INJECT[items % NINJ],
                                      (int)(items % 9973));
                items++;
            }
        }
    }
    free(src);
    char *dst = malloc(n);
    memset(dst, 1, n);
    size_t nf = pii_find(text, n, PII_ALL, NULL, 0);
    printf("bench_pii: %.1f MB = tinyshakespeare x%.0f with one PII line every %d lines "
           "(%ld lines injected, %zu matches found), one thread, median of %d\n",
           (double)n / 1e6, (double)n / (double)sl, every, items, nf, repeats);
    double med[B_N];
    for (int b = 0; b < B_N; b++) {
        double t[101], w[101];
        run_once(b, text, n, dst, &w[0]); /* warm-up */
        for (int r = 0; r < repeats; r++)
            t[r] = run_once(b, text, n, dst, &w[r]);
        stats_sort(t, (size_t)repeats);
        stats_sort(w, (size_t)repeats);
        med[b] = t[repeats / 2];
        double mbs = (double)n / 1e6 / med[b];
        printf("  %-34s %8.0f MB/s (wall %6.0f)", LABEL[b], mbs, (double)n / 1e6 / w[repeats / 2]);
        if (b >= B_FIND)
            printf("   (%.1f%% of memchr, %.1f%% of memcpy)", 100.0 * med[B_MEMCHR] / med[b],
                   100.0 * med[B_MEMCPY] / med[b]);
        printf("\n");
    }
    printf("target: scrub mask >= 100 MB/s -> %s\n",
           (double)n / 1e6 / med[B_MASK] >= 100 ? "met" : "NOT met");
    free(text);
    free(dst);
    return 0;
}
