/*
 * text/data.h — token shards (llm.c's format) and a stateless, deterministic data loader.
 *
 * Shard file: 256 little-endian int32 header — [0] = 20240520 (magic), [1] = version
 * (1: uint16 tokens, 2: uint32 tokens), [2] = token count — then the tokens. The same files
 * llm.c writes, so its GPT-2 shards (fineweb_train_*.bin, tiny_shakespeare_val.bin) load here.
 *
 * The loader treats the shards of a split as ONE concatenated token stream (sorted by file
 * name) and cuts it into nwin = floor((ntokens - 1) / T) windows of T+1 tokens; window w starts
 * at token w*T, so windows may straddle a shard boundary. Sequence s (any uint64) reads window
 * perm_e(s mod nwin) with epoch e = s / nwin. perm_e is a keyed Feistel bijection on
 * [0, nwin) (cycle-walking over the next power of 4), seeded by (seed, e): O(1) memory even for
 * ~1e9 windows, and each epoch is a fresh shuffle. With shuffle = 0 perm_e is the identity.
 * No position is stored: a data-parallel rank reads sequences step*global_B + rank*B .. +B-1,
 * and resuming from a checkpoint needs only the step number.
 *
 * Shards are mmap'ed read-only; all offsets and counts are 64-bit, so shards over 2 GiB work.
 * A loader may also read shards it does not hold (data_loader_open_source): a data_source maps
 * shard k on demand and is told when a read is done with it — the object store's cache (issue
 * 27, train/data_object.h) fetches, verifies and evicts behind that interface; reads are the same.
 * Library functions never exit on bad input: they return -1 and a one-line message naming the
 * file in err (the CLI turns that into exit 2).
 */
#ifndef MT_DATA_H
#define MT_DATA_H

#include <stddef.h>
#include <stdint.h>

#define DATA_MAGIC 20240520
#define DATA_HEADER_INTS 256
#define DATA_HEADER_BYTES (DATA_HEADER_INTS * 4)

/* One mapped shard (internal to the loader; exposed for diagnostics). */
typedef struct {
    char *path;
    const uint8_t *map; /* whole file, read-only */
    size_t map_bytes;
    int version; /* 1: uint16 tokens, 2: uint32 tokens */
    uint64_t ntokens;
    uint64_t first; /* index of this shard's first token in the concatenated stream */
} data_shard;

/* Shards mapped on demand (data_loader_open_source). acquire returns shard k's whole file
 * (header included, pinned until release) or NULL with a one-line message in err. Called from
 * the reading thread; the source does its own locking and prefetching. */
typedef struct {
    void *user;
    const uint8_t *(*acquire)(void *user, int k, char *err, size_t errlen);
    void (*release)(void *user, int k);
} data_source;

typedef struct {
    data_shard *shards; /* non-empty shards only, in file-name order */
    const data_source *src; /* NULL: every shard is mapped at open (map set) */
    int nshards;
    int nfiles;       /* files matched, empty ones included */
    char *source;     /* the directory or pattern given, for messages */
    char *first_file; /* first matched file, for messages */
    char split[16];
    uint64_t ntokens; /* total over shards */
    uint64_t nwin;    /* floor((ntokens - 1) / T) */
    int T;
    uint64_t seed;
    int shuffle;
    int half_bits; /* Feistel halves: the domain is 4^half_bits >= nwin */
} data_loader;

/* Write tokens[0..n) as a shard at path, durably and atomically (core/fs.h: partial file, fsync,
 * rename). Version 1 (uint16) when vocab_size <= 65536, else version 2 (uint32). Every token must be < vocab_size and
 * n <= INT32_MAX (the header's count is an int32). 0 ok, -1 with a message in err. */
int data_write_shard(const char *path, const uint32_t *tokens, size_t n, int vocab_size, char *err,
                     size_t errlen);

/* Open the shards of a split. dir_or_pattern is
 *   - a directory DIR: reads DIR/<split>_*.bin (what `minitrain prepare` writes) or, when there
 *     are none, llm.c's names DIR/<name>_<split>.bin and DIR/<name>_<split>_<n>.bin
 *     (tiny_shakespeare_train.bin, fineweb_train_000001.bin), or
 *   - a glob pattern (brace expansion allowed): if it contains "{split}" that is replaced by
 *     split; otherwise the LAST occurrence of "train" or "val" in its file-name part (after the
 *     last '/') is replaced by split (so llm.c's "dev/data/fineweb10B/fineweb_train_*.bin" also finds
 *     fineweb_val_*.bin); with neither, the pattern is used as given for every split.
 * Each file is validated: shorter than the 1024-byte header ("truncated"), bad magic,
 * unsupported version, header count disagreeing with the size ("header says N tokens but file
 * holds M"). The split must hold at least T+1 tokens (one window). T >= 1.
 * Returns 0, or -1 with a one-line message naming the file (or pattern) in err; on error *dl
 * is left closed. */
int data_loader_open(data_loader *dl, const char *dir_or_pattern, const char *split, int T,
                     uint64_t seed, int shuffle, char *err, size_t errlen);

/* Open a split whose n shards src maps on demand: names (for messages), ntokens[k] and version
 * (1 or 2) of shard k, in stream order; nothing is read here. A shard src fails to deliver while
 * reading is mt_fail (one line: the object store gave up after its retries). Otherwise as
 * data_loader_open (same windows, same order, same tokens as the same files opened locally). */
int data_loader_open_source(data_loader *dl, const data_source *src, const char *source,
                            const char *const *names, const uint64_t *ntokens, const int *version,
                            int n, const char *split, int T, uint64_t seed, int shuffle,
                            char *err, size_t errlen);

/* "'file'" or "'pattern' (N files, first 'file')": the shards an open loader reads, for logs and
 * messages. */
void data_loader_describe(const data_loader *dl, char *out, size_t len);

/* Check that the split holds at least B*T+1 tokens (a full microbatch of B sequences of the
 * loader's T, plus the last target). 0 ok, -1 with a message naming the files and sizes. */
int data_loader_check_fit(const data_loader *dl, int B, char *err, size_t errlen);

/* Check every token is < vocab_size (one pass over all tokens). 0 ok, -1 with the file and
 * position of the first bad token in err. */
int data_loader_check_vocab(const data_loader *dl, int vocab_size, char *err, size_t errlen);

/* Total tokens of the split. */
uint64_t data_loader_num_tokens(const data_loader *dl);

/* Number of distinct (T+1)-token windows: floor((ntokens - 1) / T). */
uint64_t data_loader_num_windows(const data_loader *dl);

/* Window index (in [0, nwin)) that sequence seq_index reads: perm_e(seq_index mod nwin),
 * e = seq_index / nwin. Pure function of (seed, shuffle, nwin, seq_index). */
uint64_t data_loader_window(const data_loader *dl, uint64_t seq_index);

/* Fill inputs (count, T) and targets (count, T) with sequences seq_index .. seq_index+count-1:
 * for window w, inputs = tokens[w*T .. w*T+T), targets = tokens[w*T+1 .. w*T+T].
 * Stateless and thread-safe. */
void data_loader_get(const data_loader *dl, uint64_t seq_index, int count, int *inputs,
                     int *targets);

/* Unmap and free. Safe on a zeroed or closed loader. */
void data_loader_close(data_loader *dl);

#endif /* MT_DATA_H */
