/*
 * tests/fuzz/fuzz_shard.c — token shard headers (llm.c format: 256 x int32 header, magic
 * 20240520, version 1 = uint16 / 2 = uint32 tokens).
 *
 * A shard is a file from another tool or a crashed writer: a lying token count, a bad version or
 * a truncated body must be refused when the loader opens it; a shard that opens must serve every
 * window it claims without reading out of bounds.
 */
#include "fuzz_util.h"

#include "text/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write("shards/train_000000.bin", data, size);
    char dir[256], err[512];
    snprintf(dir, sizeof(dir), "%s/shards", fuzz_dir());
    data_loader dl;
    memset(&dl, 0, sizeof(dl));
    const int T = 4;
    if (data_loader_open(&dl, dir, "train", T, 1, 1, err, sizeof(err)) != 0) return 0;
    data_loader_check_vocab(&dl, 256, err, sizeof(err));
    uint64_t nwin = data_loader_num_windows(&dl);
    int inputs[2 * T], targets[2 * T];
    for (uint64_t s = 0; s < nwin && s < 64; s += 2) data_loader_get(&dl, s, 2, inputs, targets);
    data_loader_close(&dl);
    return 0;
}
