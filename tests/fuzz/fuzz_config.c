/*
 * tests/fuzz/fuzz_config.c — the INI config loader and `--key value` overrides.
 *
 * Input: an INI file, optionally followed by a NUL byte and override lines "key=value" (what
 * `minitrain train --key value` feeds config_set). Every path ends in config_validate, as the
 * trainer's start does. Unknown keys, bad numbers and out-of-range values must come back as
 * messages.
 */
#include "fuzz_util.h"

#include "core/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t nini = nul ? (size_t)(nul - data) : size;
    const char *path = fuzz_write("c.ini", data, nini);
    static mt_config cfg; /* large; static keeps it off the fuzzer's stack */
    char err[1024];
    config_defaults(&cfg);
    if (config_load_ini(&cfg, path, err, sizeof(err)) != 0) return 0;
    if (nul) {
        char *rest = strndup((const char *)nul + 1, size - nini - 1);
        for (char *save = NULL, *line = strtok_r(rest, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            char *eq = strchr(line, '=');
            if (eq == NULL) continue;
            *eq = 0;
            if (config_set(&cfg, line, eq + 1, err, sizeof(err)) != 0) break;
        }
        free(rest);
    }
    config_validate(&cfg, err, sizeof(err));
    static char json[1 << 16];
    config_to_json(&cfg, json, sizeof(json));
    return 0;
}
