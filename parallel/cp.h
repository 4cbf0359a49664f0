/*
 * parallel/cp.h — context parallelism: the sequence split across a ring of cp ranks, head-tail
 * (zig-zag) chunking, the ring exchange of K/V blocks and its communication volume.
 *
 * Chunking (the "load-balanced" layout of ring attention as used by Megatron-LM's context
 * parallelism and zigzag ring attention): a sequence of T positions is cut into 2·cp chunks of
 * T/(2·cp); CP rank r holds chunks r and 2·cp−1−r, in that order, as its local sequence of
 * T/cp positions. Under a causal mask a chunk-pair (query chunk a, key chunk b) has work only
 * when b <= a, so a head chunk (little work) is paired with a tail chunk (much work) and every
 * rank computes 2·cp − 1 full chunk-pair blocks and 2 diagonal (triangular) ones: work is
 * balanced, unlike a contiguous split where the last rank does 2·cp − 1 times the first's.
 *
 * The ring: each step, a rank sends the block it holds to cp_rank + 1 and receives from
 * cp_rank − 1 (one comm_sendrecv on the CP group). This module moves buffers; the attention
 * math that uses them is model/ring_attention.c.
 */
#ifndef MT_CP_H
#define MT_CP_H

#include <stddef.h>

#include "parallel/comm.h"

/* Check a context-parallel degree against the sequence length before any work: cp >= 1 and
 * 2·cp must divide seq_len (every rank holds two equal chunks). 0, or -1 with one clear line. */
int cp_check(int seq_len, int cp, char *err, size_t errlen);

/* Global position of the first token of half h (0 = head chunk r, 1 = tail chunk 2·cp−1−r) of
 * CP rank r's local sequence, for a global sequence of T positions. */
int cp_half_start(int T, int cp, int r, int h);

/* Global position of local index i (0 <= i < T/cp) of CP rank r. */
int cp_position(int T, int cp, int r, int i);

/* Take CP rank r's local rows of a (B, T) token array: local (B, T/cp) ← full's positions
 * cp_position(T, cp, r, i) for each sequence. */
void cp_shard_tokens(const int *full, int *local, int B, int T, int cp, int r);

/* The ring step: send `send` (n floats) to the next CP rank, receive n floats from the previous
 * one into `recv` (distinct buffers). Counts the floats sent (cp_ring_floats). No-op copy when
 * the group has one rank. */
void cp_ring_shift(comm *cp, const float *send, float *recv, size_t n);

/* Floats this process has sent with cp_ring_shift so far (the measured ring volume). */
double cp_ring_floats(void);

/* The ring formula: floats one rank sends per microbatch and per transformer layer for ring
 * attention over a local sequence of B·T/cp rows of width C_local (= d_model / tp): the forward
 * passes K and V around cp − 1 times, the backward passes K, V and their gradient accumulators
 * dK, dV cp − 1 times and dK, dV once more to bring them home:
 *     B · (T/cp) · C_local · (2(cp − 1) + 4(cp − 1) + 2) = B · (T/cp) · C_local · (6·cp − 4).
 * 0 when cp == 1. */
double cp_ring_formula_floats(int cp, int B, int T, int C_local);

#endif /* MT_CP_H */
