/*
 * tests/fuzz/fuzz_safetensors.c — the safetensors reader on untrusted bytes.
 *
 * A checkpoint or an imported model is a file a user got from somewhere: its 8-byte header
 * length, its JSON tensor table (dtype, shape, data_offsets) and its __metadata__ (shard specs)
 * must be refused cleanly when they lie. Opens the file, walks every tensor, reads each one whose
 * size is sane, parses every shard spec.
 */
#include "fuzz_util.h"

#include "ckpt/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write("t.safetensors", data, size);
    st_file f;
    char err[512];
    if (st_open(&f, path, err, sizeof(err)) != 0) return 0;
    for (int i = 0; i < st_count(&f); i++) {
        const st_info *ti = st_info_at(&f, i);
        size_t bytes = ti->nbytes;
        if (bytes <= (1u << 20)) {
            void *buf = malloc(bytes ? bytes : 1);
            st_read_tensor(&f, ti->name, buf, bytes, err, sizeof(err));
            free(buf);
        }
        st_shard s;
        st_shard_get(&f, ti->name, &s, err, sizeof(err));
        (void)st_find(&f, ti->name);
    }
    for (int i = 0; i < st_metadata_count(&f); i++) {
        const char *key;
        const char *val = st_metadata_at(&f, i, &key);
        if (val) (void)st_metadata(&f, key);
    }
    st_close(&f);
    return 0;
}
