/*
 * core/check.h — error-checking macros and the user-error exit.
 *
 * Two kinds of failure, two tools (llm.c's xxxCheck style):
 *   - a failed system/library call (fopen, malloc, fread, sqlite): the xxxCheck macros print
 *     file:line, the call's arguments, errno text and a hint, then exit(1);
 *   - bad user input (a malformed config, a bad flag, a torn file): mt_fail() prints one clear
 *     line "minitrain: error: ..." and exits with status 2 (MT_EXIT_USAGE).
 * Everything here is header-only so that every module can use it without linking order games.
 */
#ifndef MT_CHECK_H
#define MT_CHECK_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Process exit codes shared by the trainer and the supervisor (sched/ relies on them). */
#define MT_EXIT_OK 0
#define MT_EXIT_ERROR 1     /* internal/system error */
#define MT_EXIT_USAGE 2     /* bad input: config, flags, files */
#define MT_EXIT_NONFINITE 3 /* loss became NaN/Inf or spiked: the supervisor restarts */
#define MT_EXIT_IO 4        /* a file could not be written (disk full, I/O error): the supervisor
                               restarts; the last committed checkpoint is intact */
#define MT_EXIT_SDC 5       /* data-parallel replicas' parameters differ (silent data corruption,
                               sched/sdc.h): the supervisor blames the odd rank's host and resumes
                               from a checkpoint older than the last check that agreed */

#if defined(__GNUC__)
#define MT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define MT_NORETURN __attribute__((noreturn))
#else
#define MT_PRINTF(a, b)
#define MT_NORETURN
#endif

/* Print the one line "minitrain: error: <msg>" on stderr (flushed). */
static inline void mt_verror(const char *fmt, va_list ap) {
    fprintf(stderr, "minitrain: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    fflush(stderr);
}

/* Print "minitrain: error: <msg>" on stderr and exit with MT_EXIT_USAGE. For user errors. */
static inline MT_NORETURN MT_PRINTF(1, 2) void mt_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mt_verror(fmt, ap);
    va_end(ap);
    exit(MT_EXIT_USAGE);
}

/* The same line, exiting with MT_EXIT_IO: for a file that could not be written or read once the
 * input was accepted (disk full, I/O error) — not the user's usage mistake. */
static inline MT_NORETURN MT_PRINTF(1, 2) void mt_fail_io(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mt_verror(fmt, ap);
    va_end(ap);
    exit(MT_EXIT_IO);
}

/* The same line, without exiting: returns MT_EXIT_USAGE for a subcommand to return. */
static inline MT_PRINTF(1, 2) int mt_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mt_verror(fmt, ap);
    va_end(ap);
    return MT_EXIT_USAGE;
}

/* Format an error message into err[errlen] for a caller to report (no-op when err is NULL or
 * errlen is 0). The one way every module fills the (char *err, size_t errlen) of its API. */
static inline MT_PRINTF(3, 4) void mt_errf(char *err, size_t errlen, const char *fmt, ...) {
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Print a warning line on stderr; never exits. */
static inline MT_PRINTF(1, 2) void mt_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "minitrain: warning: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

/* Copy user text s into out[outlen] fit for a one-line message: printable ASCII as is, every other
 * byte (control, non-ASCII, a binary file's bytes) as \xNN, cut after `max` output characters
 * with "..." (max ~80 for a line of a file). A binary file passed as --config then reads
 * "'\x7fELF\x02...'" instead of writing raw bytes to the terminal. Returns out. */
#define MT_ESCAPE_LINE 80
static inline const char *mt_escape(const char *s, size_t max, char *out, size_t outlen) {
    size_t n = 0;
    if (outlen == 0) return out;
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        size_t w = c >= 0x20 && c < 0x7f ? 1 : 4;
        if (n + w > max || n + w + 4 > outlen) {
            if (n + 4 <= outlen) {
                memcpy(out + n, "...", 3);
                n += 3;
            }
            break;
        }
        if (w == 1) out[n] = (char)c;
        else snprintf(out + n, 5, "\\x%02x", c);
        n += w;
    }
    out[n] = 0;
    return out;
}

static inline FILE *fopen_check(const char *path, const char *mode, const char *file, int line) {
    FILE *fp = fopen(path, mode);
    if (fp == NULL) {
        fprintf(stderr, "minitrain: error: cannot open '%s' (mode %s): %s\n  at %s:%d\n"
                        "  hint: check the path exists and is readable/writable\n",
                path, mode, strerror(errno), file, line);
        exit(MT_EXIT_ERROR);
    }
    return fp;
}
#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)

static inline void fread_check(void *ptr, size_t size, size_t nmemb, FILE *fp, const char *file,
                               int line) {
    size_t got = fread(ptr, size, nmemb, fp);
    if (got != nmemb) {
        fprintf(stderr, "minitrain: error: short read (%zu of %zu items of %zu bytes)%s\n"
                        "  at %s:%d\n  hint: the file is truncated or not in the expected format\n",
                got, nmemb, size, feof(fp) ? " at end of file" : "", file, line);
        exit(MT_EXIT_ERROR);
    }
}
#define freadCheck(ptr, size, nmemb, fp) fread_check(ptr, size, nmemb, fp, __FILE__, __LINE__)

static inline void fwrite_check(const void *ptr, size_t size, size_t nmemb, FILE *fp,
                                const char *file, int line) {
    size_t put = fwrite(ptr, size, nmemb, fp);
    if (put != nmemb) {
        fprintf(stderr, "minitrain: error: short write (%zu of %zu items): %s\n  at %s:%d\n"
                        "  hint: is the disk full or read-only?\n",
                put, nmemb, strerror(errno), file, line);
        exit(MT_EXIT_ERROR);
    }
}
#define fwriteCheck(ptr, size, nmemb, fp) fwrite_check(ptr, size, nmemb, fp, __FILE__, __LINE__)

static inline void fclose_check(FILE *fp, const char *file, int line) {
    if (fclose(fp) != 0) {
        fprintf(stderr, "minitrain: error: fclose failed: %s\n  at %s:%d\n", strerror(errno), file,
                line);
        exit(MT_EXIT_ERROR);
    }
}
#define fcloseCheck(fp) fclose_check(fp, __FILE__, __LINE__)

static inline void *malloc_check(size_t size, const char *file, int line) {
    void *p = malloc(size == 0 ? 1 : size);
    if (p == NULL) {
        fprintf(stderr, "minitrain: error: out of memory allocating %zu bytes (%.1f MiB)\n"
                        "  at %s:%d\n  hint: reduce batch_size, seq_len or model size\n",
                size, size / 1048576.0, file, line);
        exit(MT_EXIT_ERROR);
    }
    return p;
}
#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)

static inline void *calloc_check(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
    if (p == NULL) {
        fprintf(stderr, "minitrain: error: out of memory allocating %zu x %zu bytes\n  at %s:%d\n"
                        "  hint: reduce batch_size, seq_len or model size\n",
                n, size, file, line);
        exit(MT_EXIT_ERROR);
    }
    return p;
}
#define callocCheck(n, size) calloc_check(n, size, __FILE__, __LINE__)

/* Generic condition check for internal invariants: prints the expression and a hint. */
#define mtCheck(cond, hint)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "minitrain: error: check failed: %s\n  at %s:%d\n  hint: %s\n", #cond, \
                    __FILE__, __LINE__, hint);                                                     \
            exit(MT_EXIT_ERROR);                                                                   \
        }                                                                                          \
    } while (0)

#endif /* MT_CHECK_H */
