/*
 * sched/fault.c — fault spec parsing, the once-only record, and checkpoint corruption
 * (sched/fault.h). Firing faults inside a training run is sched/hooks.c's job: this file has no
 * trainer dependency, so the parser and the record are unit-testable on their own.
 */
#include "sched/fault.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/events.h"

static const char *const KIND_NAMES[] = {EV_FAULT_KIND_KILL, EV_FAULT_KIND_HANG, "nan", "slow",
                                         EV_FAULT_KIND_EXIT, "corrupt-ckpt", "torn-ckpt",
                                         "bitflip"};
#define NKINDS (int)(sizeof(KIND_NAMES) / sizeof(KIND_NAMES[0]))

const char *fault_kind_name(fault_kind k) {
    return (int)k >= 0 && (int)k < NKINDS ? KIND_NAMES[k] : "unknown";
}

/* Strict decimal integer in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* The keys a kind requires, once every key=value is read: slow's factor (its step defaults to 1),
 * no step for at=resume, a step for the rest. 0, or -1 with one line in err. */
static int check_required(fault_spec *out, int seen_step, int seen_factor, char *err,
                          size_t errlen) {
    if (out->kind == FAULT_SLOW) {
        if (!seen_factor) {
            mt_errf(err, errlen, "fault '%s': slow needs factor=F (> 1)", out->spec);
            return -1;
        }
        if (!seen_step) out->step = 1;
    } else if (out->at_resume) {
        if (seen_step) {
            mt_errf(err, errlen, "fault '%s': at=resume fires during the next checkpoint resume; "
                    "it takes no step", out->spec);
            return -1;
        }
    } else if (!seen_step) {
        mt_errf(err, errlen, "fault '%s': %s needs step=N", out->spec, KIND_NAMES[out->kind]);
        return -1;
    }
    return 0;
}

int fault_parse(const char *text, fault_spec *out, char *err, size_t errlen) {
    memset(out, 0, sizeof(*out));
    out->step = -1;
    out->rank = -1;
    out->code = 1;
    out->bit = 10;
    /* trim */
    while (isspace((unsigned char)*text)) text++;
    size_t n = strlen(text);
    while (n > 0 && isspace((unsigned char)text[n - 1])) n--;
    if (n == 0) {
        mt_errf(err, errlen, "empty fault spec (expected KIND@key=value,...)");
        return -1;
    }
    if (n >= sizeof(out->spec)) {
        mt_errf(err, errlen, "fault spec '%.40s...' is too long (max %zu characters)", text,
                sizeof(out->spec) - 1);
        return -1;
    }
    memcpy(out->spec, text, n);
    out->spec[n] = '\0';
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", out->spec);
    char *at = strchr(buf, '@');
    if (at) *at = '\0';
    int kind = -1;
    for (int k = 0; k < NKINDS; k++)
        if (!strcmp(buf, KIND_NAMES[k])) kind = k;
    if (kind < 0) {
        mt_errf(err, errlen, "fault '%s': unknown kind '%s' (kill, hang, nan, slow, exit, "
                "corrupt-ckpt, torn-ckpt, bitflip)", out->spec, buf);
        return -1;
    }
    out->kind = (fault_kind)kind;
    int ckpt_kind = out->kind == FAULT_CORRUPT_CKPT || out->kind == FAULT_TORN_CKPT;
    int seen_step = 0, seen_rank = 0, seen_factor = 0, seen_code = 0, seen_kill = 0, seen_at = 0;
    int seen_tensor = 0, seen_bit = 0, flip = out->kind == FAULT_BITFLIP;
    char *save = NULL;
    for (char *kv = at ? strtok_r(at + 1, ",", &save) : NULL; kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) {
            mt_errf(err, errlen, "fault '%s': '%s' is not key=value", out->spec, kv);
            return -1;
        }
        *eq = '\0';
        const char *key = kv, *val = eq + 1;
        int *seen = NULL, bad = 0;
        if (!strcmp(key, "step")) {
            seen = &seen_step;
            bad = parse_int(val, 1, 1 << 30, &out->step);
        } else if (!strcmp(key, "rank")) {
            seen = &seen_rank;
            bad = parse_int(val, 0, 1 << 20, &out->rank);
        } else if (!strcmp(key, "code") && out->kind == FAULT_EXIT) {
            seen = &seen_code;
            bad = parse_int(val, 1, 255, &out->code);
        } else if (!strcmp(key, "kill") && ckpt_kind) {
            seen = &seen_kill;
            bad = parse_int(val, 0, 1, &out->then_kill);
        } else if (!strcmp(key, "at") && out->kind == FAULT_KILL) {
            seen = &seen_at;
            bad = strcmp(val, "resume") != 0;
            out->at_resume = !bad;
        } else if (!strcmp(key, "tensor") && flip) {
            seen = &seen_tensor;
            bad = !val[0] || strlen(val) >= sizeof(out->tensor);
            if (!bad) snprintf(out->tensor, sizeof(out->tensor), "%s", val);
        } else if (!strcmp(key, "bit") && flip) {
            seen = &seen_bit;
            bad = parse_int(val, 0, 31, &out->bit);
        } else if (!strcmp(key, "factor") && out->kind == FAULT_SLOW) {
            seen = &seen_factor;
            char *end = NULL;
            out->factor = strtod(val, &end);
            bad = end == val || *end != '\0' || !(out->factor > 1) || !isfinite(out->factor);
        } else {
            mt_errf(err, errlen, "fault '%s': unknown key '%s' for %s (keys: step, rank%s)",
                    out->spec, key, KIND_NAMES[kind],
                    out->kind == FAULT_EXIT   ? ", code"
                    : out->kind == FAULT_SLOW ? ", factor"
                    : ckpt_kind               ? ", kill"
                    : out->kind == FAULT_KILL ? ", at"
                    : flip                    ? ", tensor, bit"
                                              : "");
            return -1;
        }
        if (*seen) {
            mt_errf(err, errlen, "fault '%s': key '%s' given twice", out->spec, key);
            return -1;
        }
        *seen = 1;
        if (bad) {
            const char *want = !strcmp(key, "step")     ? "an integer >= 1"
                               : !strcmp(key, "rank")   ? "an integer >= 0"
                               : !strcmp(key, "code")   ? "an exit code in 1..255"
                               : !strcmp(key, "kill")   ? "0 or 1"
                               : !strcmp(key, "at")     ? "'resume'"
                               : !strcmp(key, "tensor") ? "a tensor name (1..63 characters)"
                               : !strcmp(key, "bit")    ? "a bit index in 0..31"
                                                        : "a number > 1";
            mt_errf(err, errlen, "fault '%s': %s=%s is not %s", out->spec, key, val, want);
            return -1;
        }
    }
    if (check_required(out, seen_step, seen_factor, err, errlen) != 0) return -1;
    if (ckpt_kind && !seen_rank) out->rank = 0;
    return 0;
}

int fault_parse_list(const char *text, fault_spec *out, int max, char *err, size_t errlen) {
    int n = 0;
    const char *p = text ? text : "";
    while (*p) {
        const char *semi = strchr(p, ';');
        size_t len = semi ? (size_t)(semi - p) : strlen(p);
        char item[256];
        if (len >= sizeof(item)) {
            mt_errf(err, errlen, "fault spec '%.40s...' is too long", p);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        int blank = 1;
        for (size_t i = 0; i < len; i++) blank &= isspace((unsigned char)item[i]) != 0;
        if (!blank) {
            if (n == max) {
                mt_errf(err, errlen, "too many fault specs (at most %d)", max);
                return -1;
            }
            if (fault_parse(item, &out[n], err, errlen) != 0) return -1;
            n++;
        }
        p += len + (semi ? 1 : 0);
    }
    return n;
}

int fault_check_ranks(const fault_spec *f, int n, int world_size, char *err, size_t errlen) {
    for (int i = 0; i < n; i++)
        if (f[i].rank >= world_size) {
            mt_errf(err, errlen, "fault '%s': rank %d is outside this job of %d rank%s", f[i].spec,
                    f[i].rank, world_size, world_size == 1 ? "" : "s");
            return -1;
        }
    return 0;
}

int fault_applies(const fault_spec *f, int rank) { return f->rank < 0 || f->rank == rank; }

static void record_path(const char *run_dir, char *out, size_t n) {
    snprintf(out, n, "%s/%s", run_dir, FAULT_RECORD_FILE);
}

int fault_load_fired(const char *run_dir, const fault_spec *f, int n, int *fired) {
    char path[4200], line[512];
    record_path(run_dir, path, sizeof(path));
    FILE *fp = fopen(path, "r");
    if (!fp) return 0;
    int count = 0;
    while (fgets(line, sizeof(line), fp)) {
        line[strcspn(line, "\t\r\n")] = '\0';
        for (int i = 0; i < n; i++)
            if (!fired[i] && !strcmp(line, f[i].spec)) {
                fired[i] = 1;
                count++;
            }
    }
    fclose(fp);
    return count;
}

int fault_record_fired(const char *run_dir, const fault_spec *f, int rank, int step) {
    char path[4200], line[256];
    record_path(run_dir, path, sizeof(path));
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0) return -1;
    int len = snprintf(line, sizeof(line), "%s\trank=%d\tstep=%d\n", f->spec, rank, step);
    int ok = write(fd, line, (size_t)len) == len && fsync(fd) == 0;
    close(fd);
    return ok ? 0 : -1;
}

/* The largest *.safetensors file of step_dir into best (its size returned), or -1 with err. */
static long long largest_tensor_file(const char *step_dir, char *best, size_t bestlen, char *err,
                                     size_t errlen) {
    DIR *d = opendir(step_dir);
    if (!d) {
        mt_errf(err, errlen, "cannot open checkpoint directory %s: %s", step_dir, strerror(errno));
        return -1;
    }
    best[0] = '\0';
    long long best_size = -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t L = strlen(de->d_name);
        if (L < 12 || strcmp(de->d_name + L - 12, ".safetensors") != 0) continue;
        char p[4200];
        snprintf(p, sizeof(p), "%s/%s", step_dir, de->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && (long long)st.st_size > best_size) {
            best_size = (long long)st.st_size;
            snprintf(best, bestlen, "%s", p);
        }
    }
    closedir(d);
    if (best_size < 0) mt_errf(err, errlen, "no *.safetensors file in %s", step_dir);
    return best_size;
}

int fault_tear_checkpoint(const char *step_dir, char *which, size_t whichlen, char *err,
                          size_t errlen) {
    char best[4200];
    long long size = largest_tensor_file(step_dir, best, sizeof(best), err, errlen);
    if (size < 0) return -1;
    int fd = open(best, O_WRONLY);
    int ok = fd >= 0 && ftruncate(fd, size / 2) == 0 && fsync(fd) == 0;
    int e = errno;
    if (fd >= 0) close(fd);
    if (!ok) {
        mt_errf(err, errlen, "cannot truncate %s: %s", best, strerror(e));
        return -1;
    }
    if (which && whichlen) snprintf(which, whichlen, "%s", best);
    return 0;
}

int fault_corrupt_checkpoint(const char *step_dir, char *which, size_t whichlen, char *err,
                             size_t errlen) {
    char best[4200];
    long long best_size = largest_tensor_file(step_dir, best, sizeof(best), err, errlen);
    if (best_size < 0) return -1;
    int fd = open(best, O_RDWR);
    if (fd < 0) {
        mt_errf(err, errlen, "cannot open %s: %s", best, strerror(errno));
        return -1;
    }
    /* The data section starts after the 8-byte header length and the header (docs/formats.md). */
    uint64_t hlen = 0;
    unsigned char b8[8];
    if (pread(fd, b8, 8, 0) == 8)
        for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | b8[i];
    long long data0 = 8 + (long long)hlen;
    long long off = (data0 < best_size) ? data0 + (best_size - data0) / 2 : best_size / 2;
    unsigned char byte;
    int ok = pread(fd, &byte, 1, off) == 1;
    byte ^= 0x5A;
    ok = ok && pwrite(fd, &byte, 1, off) == 1 && fsync(fd) == 0;
    int e = errno;
    close(fd);
    if (!ok) {
        mt_errf(err, errlen, "cannot flip a byte of %s: %s", best, strerror(e));
        return -1;
    }
    if (which && whichlen) snprintf(which, whichlen, "%s", best);
    return 0;
}
