/*
 * tests/fuzz/fuzz_util.h — shared scaffolding for the libFuzzer harnesses.
 *
 * Most of minitrain's parsers read files (they mmap or stream what a user or a crashed writer
 * left on disk), so a harness writes the fuzzer's bytes into a file under a private directory in
 * /dev/shm and calls the real, path-taking entry point. One directory per process, made once.
 */
#ifndef MT_FUZZ_UTIL_H
#define MT_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The per-process scratch directory ("/dev/shm/mt-fuzz-<pid>"), created on first use. */
static inline const char *fuzz_dir(void) {
    static char dir[64];
    if (dir[0] == 0) {
        snprintf(dir, sizeof(dir), "/dev/shm/mt-fuzz-%d", (int)getpid());
        if (mkdir(dir, 0700) != 0 && access(dir, W_OK) != 0) abort();
    }
    return dir;
}

/* Write data[0..n) to fuzz_dir()/rel (sub-directories of rel are made here).
 * Returns the full path in a static buffer. Aborts on I/O failure: that is the harness's fault,
 * not the parser's. */
static inline const char *fuzz_write(const char *rel, const uint8_t *data, size_t n) {
    static char path[256];
    snprintf(path, sizeof(path), "%s/%s", fuzz_dir(), rel);
    for (char *p = path + strlen(fuzz_dir()) + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(path, 0700);
        *p = '/';
    }
    FILE *f = fopen(path, "wb");
    if (f == NULL) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    if (fclose(f) != 0) abort();
    return path;
}

#endif /* MT_FUZZ_UTIL_H */
