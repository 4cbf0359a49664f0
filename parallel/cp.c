/*
 * parallel/cp.c — context-parallel chunking and the ring exchange (see parallel/cp.h).
 */
#include "parallel/cp.h"

#include <stdio.h>
#include <string.h>

#include "core/check.h"

static double ring_floats; /* sent by cp_ring_shift in this process */

int cp_check(int seq_len, int cp, char *err, size_t errlen) {
    if (cp < 1) {
        snprintf(err, errlen, "cp must be >= 1 (got %d)", cp);
        return -1;
    }
    if (cp > 1 && seq_len % (2 * cp) != 0) {
        snprintf(err, errlen, "cp %d must divide seq_len/2 (seq_len %d): context parallelism "
                 "gives each rank two equal chunks of seq_len/(2·cp) (head-tail balance)", cp,
                 seq_len);
        return -1;
    }
    return 0;
}

int cp_half_start(int T, int cp, int r, int h) {
    int chunk = T / (2 * cp);
    return (h == 0 ? r : 2 * cp - 1 - r) * chunk;
}

int cp_position(int T, int cp, int r, int i) {
    int chunk = T / (2 * cp);
    return cp_half_start(T, cp, r, i / chunk) + i % chunk;
}

void cp_shard_tokens(const int *full, int *local, int B, int T, int cp, int r) {
    int Tl = T / cp, chunk = T / (2 * cp);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < 2; h++)
            memcpy(local + (size_t)b * Tl + (size_t)h * chunk,
                   full + (size_t)b * T + cp_half_start(T, cp, r, h), (size_t)chunk * sizeof(int));
}

void cp_ring_shift(comm *cp, const float *send, float *recv, size_t n) {
    int size = comm_size(cp), rank = comm_rank(cp);
    if (size == 1) {
        comm_copy(recv, send, n * sizeof(float));
        return;
    }
    comm_sendrecv(cp, send, n, (rank + 1) % size, recv, n, (rank + size - 1) % size, 29);
    ring_floats += (double)n;
}

double cp_ring_floats(void) { return ring_floats; }

double cp_ring_formula_floats(int cp, int B, int T, int C_local) {
    if (cp <= 1) return 0.0;
    return (double)B * (T / cp) * C_local * (6.0 * cp - 4.0);
}
