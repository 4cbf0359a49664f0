/*
 * ckpt/peer.h — peer-replicated tier-0 checkpoints (ByteRobust, Gemini): the node a rank runs
 * on, per-node tier-0 roots, the choice of a buddy rank on another node, and moving one committed
 * step directory between ranks as bytes with its checksums checked on arrival. Prefix ckpt_peer_.
 *
 * Layout of one node's tier 0 (T0 = the expanded ckpt_tier0_root + "/<name>-<8 hex>/ckpt"):
 *   T0/rank_00003/step_N/     rank 3's own restart state (ckpt/ckpt.h layout: manifest, latest)
 *   T0/peer/rank_00001/step_N/  the copy of rank 1's step_N this rank holds as rank 1's buddy
 * Every directory is committed by ckpt_commit (manifest last, fsync, rename, latest), by the one
 * rank that writes it, so no two processes ever commit the same directory.
 *
 * This module moves bytes and names directories; what is inside a step and which collectives
 * carry the bytes are the caller's (train/checkpoint_peer.c).
 */
#ifndef CKPT_PEER_H
#define CKPT_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"

#define CKPT_PEER_NODE_MAX 64

/* The node this process runs on: $MINITRAIN_NODE, else $SLURMD_NODENAME, else the hostname
 * (single-machine tests fake nodes with MINITRAIN_NODE). Never fails ("localhost" at worst). */
void ckpt_peer_node_name(char *buf, size_t len);

/* Expand the node name into a tier-0 root template: "%n", "$SLURMD_NODENAME",
 * "${SLURMD_NODENAME}", "$MINITRAIN_NODE" and "${MINITRAIN_NODE}" become `node`, "%%" becomes
 * "%". Returns 1 when the template named the node (a per-node root), 0 when it did not, -1 when
 * the result does not fit in len or the template holds another "%x" (err says which). */
int ckpt_peer_expand(char *buf, size_t len, const char *tmpl, const char *node, char *err,
                     size_t errlen);

/* The buddy of every rank: node[r] is rank r's node id and leaf[r] its leaf switch (NULL:
 * unknown, all in one leaf). The distinct nodes form a ring in order of their lowest rank; node
 * i's buddy node is the next node on the ring in ANOTHER leaf, else the next node; the k-th rank
 * of a node (in rank order) gets the (k mod m)-th rank of its buddy node (m ranks there). With
 * equal ranks per node every rank holds exactly one copy (buddy is a permutation). buddy[r] = -1
 * when every rank is on one node (no other node to copy to). Returns the number of ranks with a
 * buddy. */
int ckpt_peer_buddies(int world, const int *node, const int *leaf, int *buddy);

/* T0/rank_%05d (own = 1) or T0/peer/rank_%05d (own = 0). Returns 0 or -1 (does not fit). */
int ckpt_peer_root(char *buf, size_t len, const char *t0, int rank, int own);

/* Pack committed ROOT/step_N (every file named by its manifest, then manifest.json itself) into
 * one malloc'd buffer *out of *len bytes (a multiple of 4, so it travels as floats):
 *   "MTPEER01" | u32 n_files | n × (char name[128], u64 size) | the files' bytes | zero padding
 * Returns 0 or -1 with err (the step is missing or its manifest unreadable). */
int ckpt_peer_pack(const char *root, int64_t step, void **out, size_t *len, char *err,
                   size_t errlen);

/* Unpack a ckpt_peer_pack buffer as committed ROOT/step_N: ckpt_begin, every file written
 * durably, ckpt_commit (which computes every file's CRC-32C), then the new manifest's names,
 * sizes and CRC-32C compared with the sender's manifest: a copy torn or flipped in flight is
 * removed again, an accepted one is bit-identical to what the sender committed. (ckpt_verify's
 * safetensors checks are the reader's, before use.) Returns 0 or -1 with err; on -1 no committed
 * step_N is left behind. */
int ckpt_peer_unpack(const char *root, int64_t step, const void *buf, size_t len, char *err,
                     size_t errlen);

/* Retention of a tier-0 directory of one rank: keep the `keep` (>= 1) newest committed steps,
 * remove the others (renamed to step_N.del, then deleted). Unlike ckpt_retain it does not
 * re-verify the newest (a memory tier is re-verified before any use, and tier 1 stays the
 * checkpoint of record), so a save does not read its own shard back. Returns 0 or -1 with err. */
int ckpt_peer_retain(const char *root, int keep, char *err, size_t errlen);

#endif /* CKPT_PEER_H */
