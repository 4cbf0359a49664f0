/*
 * train/memory.c — the memory budget (see train/memory.h): predicted bytes from the sizes the
 * trainer allocates, the memory_limit, and the resident set the kernel reports.
 */
#include "train/memory.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/events.h"

const char *const memory_names[MEMORY_N] = {EVK_PARAMS,      EVK_GRADS,      EVK_OPTIMIZER,
                                            EVK_ACTIVATIONS, EVK_COMM_BYTES, EVK_WORKSPACE,
                                            EVK_CKPT_BYTES,  EVK_RUNTIME,    EVK_TOTAL};

int memory_limit_bytes(const char *spec, int local_ranks, double device_bytes, double *bytes,
                       char *err, size_t errlen) {
    *bytes = 0;
    if (strcmp(spec, "off") == 0) return 0;
    if (strcmp(spec, "auto") == 0) {
        if (device_bytes > 0) {
            *bytes = device_bytes;
            return 0;
        }
        double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
        *bytes = phys / (local_ranks > 0 ? local_ranks : 1);
        return 0;
    }
    char *end = NULL;
    double v = strtod(spec, &end);
    double unit = 1;
    if (end && *end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': unit = 1024.0; break;
        case 'M': unit = 1048576.0; break;
        case 'G': unit = 1073741824.0; break;
        case 'T': unit = 1099511627776.0; break;
        default: unit = 0;
        }
        end++;
        if (*end == 'B' || *end == 'b') end++; /* "6GB" reads as 6 GiB too */
    }
    if (end == spec || !(v > 0) || !isfinite(v) || unit == 0 || (end && *end)) {
        snprintf(err, errlen, "memory_limit '%s' is not a size: give bytes with an optional K, M, "
                 "G or T suffix (6G, 512M), auto or off", spec);
        return -1;
    }
    *bytes = v * unit;
    return 0;
}

double memory_rss_bytes(int peak) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    const char *key = peak ? "VmHWM:" : "VmRSS:";
    double kb = -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, strlen(key)) == 0) {
            kb = atof(line + strlen(key));
            break;
        }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024.0;
}

const char *memory_format(double bytes, char *buf, size_t len) {
    if (bytes >= 1073741824.0) snprintf(buf, len, "%.2f GiB", bytes / 1073741824.0);
    else snprintf(buf, len, "%.1f MiB", bytes / 1048576.0);
    return buf;
}
