/*
 * sched/hostfile.h — the hosts the supervisor launches on: an Open MPI hostfile parsed, written back,
 * with the failures blamed on each host and the ones cordoned (excluded from launches).
 *
 * Its own header because both the restart loop (supervisor.c) and the placement (replan.c) use it.
 */
#ifndef MT_SCHED_HOSTFILE_H
#define MT_SCHED_HOSTFILE_H

#include <stddef.h>

#define SUP_MAX_HOSTS 256
#define SUP_MAX_SLOTS 65536 /* per host: so that no slot count overflows */

/* A hostfile in OpenMPI's format: "name [slots=N] [max_slots=M] ..." per line, '#' comments;
 * slots defaults to 1 (count=N is the same), other words are ignored. */
typedef struct {
    int n;
    char name[SUP_MAX_HOSTS][64];
    int slots[SUP_MAX_HOSTS];
    int blamed[SUP_MAX_HOSTS];   /* failures blamed on the host */
    int cordoned[SUP_MAX_HOSTS]; /* excluded from launches */
} sup_hosts;

/* Parse a hostfile (the bytes of a user's file: tests/fuzz/fuzz_hostfile.c fuzzes it). Returns 0,
 * or -1 with err naming the file and line (unreadable, no hosts, more than SUP_MAX_HOSTS, a name
 * over 63 bytes, slots outside [1, SUP_MAX_SLOTS], a line over 510 bytes). */
int sup_hosts_parse(const char *path, sup_hosts *h, char *err, size_t errlen);

/* Host index of `rank` when ranks fill the slots of the non-cordoned hosts in file order
 * (mpirun's default by-slot mapping); -1 when rank is beyond the available slots. */
int sup_host_of_rank(const sup_hosts *h, int rank);

/* Slots of the non-cordoned hosts. */
int sup_hosts_slots(const sup_hosts *h);

/* Write the non-cordoned hosts to path in hostfile format. Returns 0 or -1. */
int sup_hosts_write(const sup_hosts *h, const char *path);

#endif /* MT_SCHED_HOSTFILE_H */
