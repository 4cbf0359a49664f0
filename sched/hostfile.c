/*
 * sched/hostfile.c — the supervisor's hosts (sched/supervisor.h, sup_hosts_*): an OpenMPI
 * hostfile parsed from a user's bytes (tests/fuzz/fuzz_hostfile.c fuzzes it), the by-slot mapping
 * of ranks onto hosts mpirun uses, and the hostfile of the next launch without the cordoned hosts.
 *
 * Words, not substrings: "max_slots=8 slots=2" has 2 slots (a substring search once read 8), a
 * slot count is bounded (SUP_MAX_SLOTS, so no sum overflows), and a line longer than the read
 * buffer is an error rather than a second host made of its tail.
 */
#define _GNU_SOURCE
#include "sched/hostfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"

/* The value of a "slots=N" / "count=N" / "max_slots=N" word: 1..SUP_MAX_SLOTS, else -1. */
static int slots_value(const char *v) {
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || errno != 0 || x < 1 || x > SUP_MAX_SLOTS) return -1;
    return (int)x;
}

int sup_hosts_parse(const char *path, sup_hosts *h, char *err, size_t errlen) {
    memset(h, 0, sizeof(*h));
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "cannot read hostfile %s: %s", path, strerror(errno));
        return -1;
    }
    char line[512];
    int ln = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof(line), f)) {
        ln++;
        size_t L = strlen(line);
        if (L == sizeof(line) - 1 && line[L - 1] != '\n' && !feof(f)) {
            /* the rest would be read as another line: as another host */
            snprintf(err, errlen, "%s:%d: line longer than %zu bytes", path, ln, sizeof(line) - 2);
            rc = -1;
            break;
        }
        line[strcspn(line, "#\r\n")] = '\0';
        char *save = NULL, *name = strtok_r(line, " \t\f\v", &save);
        if (!name) continue;
        if (h->n == SUP_MAX_HOSTS || strlen(name) >= sizeof(h->name[0])) {
            snprintf(err, errlen, "%s:%d: too many hosts (max %d) or host name longer than %zu",
                     path, ln, SUP_MAX_HOSTS, sizeof(h->name[0]) - 1);
            rc = -1;
            break;
        }
        int slots = 1;
        /* OpenMPI's words: slots=N (count=N is its synonym); max_slots and others ignored */
        for (char *w = strtok_r(NULL, " \t\f\v", &save); w; w = strtok_r(NULL, " \t\f\v", &save)) {
            const char *v = !strncmp(w, "slots=", 6) ? w + 6 : !strncmp(w, "count=", 6) ? w + 6
                                                                                        : NULL;
            if (v && (slots = slots_value(v)) < 0) {
                snprintf(err, errlen, "%s:%d: slots must be an integer in [1, %d], got '%.40s'",
                         path, ln, SUP_MAX_SLOTS, w);
                rc = -1;
                break;
            }
        }
        if (rc != 0) break;
        memcpy(h->name[h->n], name, strlen(name) + 1); /* length checked above */
        h->slots[h->n++] = slots;
    }
    fclose(f);
    if (rc == 0 && h->n == 0) {
        snprintf(err, errlen, "hostfile %s lists no hosts", path);
        rc = -1;
    }
    return rc;
}

int sup_host_of_rank(const sup_hosts *h, int rank) {
    if (rank < 0) return -1;
    int r = rank;
    for (int i = 0; i < h->n; i++) {
        if (h->cordoned[i]) continue;
        if (r < h->slots[i]) return i;
        r -= h->slots[i];
    }
    return -1;
}

int sup_hosts_slots(const sup_hosts *h) {
    int s = 0;
    for (int i = 0; i < h->n; i++) s += h->cordoned[i] ? 0 : h->slots[i];
    return s;
}

int sup_hosts_write(const sup_hosts *h, const char *path) {
    /* atomic (core/fs.h): a relaunch never reads a half-written hostfile */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return -1;
    fprintf(f, "# written by minitrain run: cordoned hosts are left out\n");
    for (int i = 0; i < h->n; i++)
        if (!h->cordoned[i]) fprintf(f, "%s slots=%d\n", h->name[i], h->slots[i]);
    int rc = fclose(f) == 0 ? fs_write_atomic(path, text, len, NULL, 0) : -1;
    free(text);
    return rc;
}

