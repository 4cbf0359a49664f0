/*
 * tests/fuzz/fuzz_fault.c — the fault-injection spec language (`--fault kill@step=30,rank=1;...`).
 *
 * Specs come from the command line and from config files; fault_parse_list must refuse every
 * malformed one by name and never write past its output array.
 */
#include "fuzz_util.h"

#include "sched/fault.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = strndup((const char *)data, size);
    fault_spec specs[8];
    char err[512];
    int n = fault_parse_list(text, specs, 8, err, sizeof(err));
    if (n > 8) abort();
    for (int i = 0; i < n; i++) {
        fault_check_ranks(&specs[i], 1, 4, err, sizeof(err));
        (void)fault_applies(&specs[i], 1);
        (void)fault_kind_name(specs[i].kind);
    }
    free(text);
    return 0;
}
