/*
 * tests/fuzz/fuzz_hostfile.c — the supervisor's hostfile parser (`minitrain run --hostfile F`).
 *
 * Beyond "no crash": a parsed hostfile must map every rank below its slot count to a host and
 * the next one to none, and what the supervisor writes for the next launch (the hosts not
 * cordoned, RUN_DIR/hostfile.active) must parse back to the same names and slots.
 */
#include "fuzz_util.h"

#include "sched/supervisor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fuzz_write("hosts", data, size);
    char path[256], out[256], err[512];
    snprintf(path, sizeof(path), "%s", p);
    snprintf(out, sizeof(out), "%s/hosts.active", fuzz_dir());
    static sup_hosts h, back;
    if (sup_hosts_parse(path, &h, err, sizeof(err)) != 0) return 0;
    if (h.n < 1 || h.n > SUP_MAX_HOSTS) abort();
    int total = sup_hosts_slots(&h);
    if (total < h.n) abort(); /* every host has at least one slot */
    for (int r = 0; r < total && r < 2048; r++)
        if (sup_host_of_rank(&h, r) < 0) abort();
    if (sup_host_of_rank(&h, total) != -1 || sup_host_of_rank(&h, -1) != -1) abort();
    /* cordon every other host, write the rest, read it back */
    int kept = 0;
    for (int i = 0; i < h.n; i++) kept += !(h.cordoned[i] = i % 2);
    if (sup_hosts_write(&h, out) != 0) abort();
    if (sup_hosts_parse(out, &back, err, sizeof(err)) != 0) abort(); /* host 0 is always kept */
    if (back.n != kept) abort();
    for (int i = 0, k = 0; i < h.n; i++) {
        if (h.cordoned[i]) continue;
        if (strcmp(back.name[k], h.name[i]) != 0 || back.slots[k] != h.slots[i]) abort();
        k++;
    }
    return 0;
}
