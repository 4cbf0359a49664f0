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
#include "model/flops.h"
#include "train/trainer.h"

const char *const memory_names[MEMORY_N] = {EVK_PARAMS,      EVK_GRADS,      EVK_OPTIMIZER,
                                            EVK_ACTIVATIONS, EVK_COMM_BYTES, EVK_WORKSPACE,
                                            EVK_CKPT_BYTES,  EVK_RUNTIME,    EVK_TOTAL};

/* Open MPI's reduce-scatter reduces to the group's first rank and scatters from there: that rank
 * holds scratch of the whole send buffer, twice from 3 ranks on (measured with VmHWM; the
 * figures are in docs/parallel.md). In units of the send buffer; 0 on the other ranks. */
static double reduce_scatter_scratch(const trainer *tr) {
    if (tr->mesh->dp_rank != 0 || tr->mesh->dp == 1) return 0;
    return tr->mesh->dp > 2 ? 2 : 1;
}

void memory_budget_predict(const trainer *tr, double runtime_bytes, double b[MEMORY_N]) {
    const mt_config *c = &tr->cfg;
    const gpt_model *m = &tr->model;
    const double F = sizeof(float);
    memset(b, 0, MEMORY_N * sizeof(double));
    double local = (double)(m->capacity > m->num_params ? m->capacity : m->num_params);
    double transient = 0; /* what exists only inside a step (the probe runs before, freed) */
    if (c->zero >= 2) {
        double resident = (double)tr->zero.shard + (double)zero_resident_floats(&tr->zero);
        b[MEMORY_PARAMS] = F * (c->zero == 3 ? resident : local);
        b[MEMORY_GRADS] = F * resident;
        /* staging + one piece; the group's first rank also holds MPI's reduce-scatter scratch
         * (reduce_scatter_scratch) of the staging's size */
        double P = tr->zero.P, mp = (double)tr->zero.max_piece;
        b[MEMORY_COMM] = F * ((P + 1) * mp + reduce_scatter_scratch(tr) * P * mp);
        double block = (double)zero_resident_floats(&tr->zero) - (double)zero_root_floats(&tr->zero);
        transient = b[MEMORY_COMM] + F * block * (c->zero == 3 ? 2 : 1);
    } else {
        b[MEMORY_PARAMS] = b[MEMORY_GRADS] = F * local;
        /* MPI's reduction scratch of every bucket's non-blocking all-reduce at once (they may
         * all be in flight; measured: docs/parallel.md), or ZeRO-1's reduce-scatter output */
        if (c->zero == 0 && tr->mesh->dp > 1 && tr->mesh->ep == 1) b[MEMORY_COMM] = F * local;
        if (c->zero == 1) /* and the first rank's scratch of the whole buffer, as above */
            b[MEMORY_COMM] = F * ((double)tr->dp.shard + reduce_scatter_scratch(tr) * local);
        transient = b[MEMORY_COMM];
    }
    b[MEMORY_OPTIMIZER] = 2 * F * (double)tr->opt.n;
    size_t slot = 0, scratch = 0;
    int B = m->B ? m->B : c->batch_size, T = m->T ? m->T : c->seq_len;
    gpt_activation_sizes(m, B, T, &slot, &scratch);
    double N = (double)B * T, slots = m->n_slots > 0 ? m->n_slots : 1;
    b[MEMORY_ACTIVATIONS] = F * slot * slots;
    if (tr->mesh->pp > 1) b[MEMORY_COMM] += F * N * c->d_model; /* the received input gradient */
    /* the sgemm probe's a, b, c, as far as they exceed the step's transient buffers */
    double probe = 3 * F * FLOPS_PROBE_N * FLOPS_PROBE_N;
    b[MEMORY_WORKSPACE] = F * scratch + slots * 3 * N * sizeof(int) +
                          (probe > transient ? probe - transient : 0);
    if (c->ckpt_every != 0) b[MEMORY_CHECKPOINT] = (c->ckpt_async ? 3 : 2) * F * m->num_params;
    b[MEMORY_RUNTIME] = runtime_bytes > 0 ? runtime_bytes : 0;
    for (int i = 0; i < MEMORY_TOTAL; i++) b[MEMORY_TOTAL] += b[i];
}

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
