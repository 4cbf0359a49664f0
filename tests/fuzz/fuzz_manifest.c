/*
 * tests/fuzz/fuzz_manifest.c — checkpoint manifest.json and ROOT/latest on untrusted bytes.
 *
 * A torn or tampered checkpoint must be refused by ckpt_verify (or skipped by
 * ckpt_latest_verified), never crash the loader. The input is split at the first NUL byte:
 * before it, manifest.json of ROOT/step_00000001; after it, ROOT/latest. A small real tensor file
 * (an empty safetensors) sits beside the manifest so a manifest that names it exercises the size,
 * CRC and header checks; the seed corpus holds a manifest that verifies.
 */
#include "fuzz_util.h"

#include "ckpt/ckpt.h"

static void warn_quiet(void *user, const char *msg) { (void)user, (void)msg; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t nman = nul ? (size_t)(nul - data) : size;
    /* a valid, empty safetensors file: 8-byte header length, then "{}" padded with spaces */
    static const uint8_t empty_st[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    fuzz_write("root/step_00000001/model.safetensors", empty_st, sizeof(empty_st));
    const char *man = fuzz_write("root/step_00000001/" CKPT_MANIFEST_NAME, data, nman);
    (void)man;
    if (nul) fuzz_write("root/" CKPT_LATEST_NAME, nul + 1, size - nman - 1);
    else fuzz_write("root/" CKPT_LATEST_NAME, (const uint8_t *)"step_00000001\n", 14);
    char root[256], err[512];
    snprintf(root, sizeof(root), "%s/root", fuzz_dir());
    ckpt_verify(root, 1, err, sizeof(err));
    int64_t step;
    ckpt_read_latest(root, &step, err, sizeof(err));
    ckpt_latest_verified(root, &step, warn_quiet, NULL, err, sizeof(err));
    int64_t *steps = NULL;
    int n = 0;
    if (ckpt_list(root, &steps, &n, err, sizeof(err)) == 0) free(steps);
    return 0;
}
