/*
 * sched/fault.h — fault injection for tests, demos and ETTR experiments (`train --fault SPEC`).
 *
 * A spec is KIND@key=value,key=value:
 *   kill@step=57,rank=3          SIGKILL this rank right after optimizer step 57
 *   hang@step=30,rank=1          stop (sleep forever, no more heartbeats) after step 30
 *   nan@step=40                  poison the parameters after step 39, so step 40's loss is NaN
 *                                (the trainer then exits with MT_EXIT_NONFINITE)
 *   slow@rank=2,factor=3         from step `step` (default 1) on, sleep (factor-1) x the step time
 *                                after every step: a straggler running at 1/factor speed
 *   exit@step=12,rank=0,code=1   exit(code) after step 12 (code 1..255, default 1)
 *   corrupt-ckpt@step=40         once checkpoint step 40 is committed, flip a byte inside one of
 *                                its tensor files (silent storage corruption: nothing fails until
 *                                a restart tries to load it; pair it with a kill to see recovery)
 *                                — in every copy: tiers 0, 1, 2 and, with ckpt_replicas = 1,
 *                                the replica the rank's buddy holds (the buddy damages it)
 *   corrupt-ckpt@step=40,kill=1  the same, then SIGKILL this rank once every copy is damaged
 *                                (on every rank): the restart must skip step 40, load an older one
 *   torn-ckpt@step=40[,kill=1]   once checkpoint step 40 is committed in tier 0 (memory), cut the
 *                                largest tensor file of this rank's own tier-0 copy to half its
 *                                size (a torn copy); the resume must skip it and load the same
 *                                step from the buddy's verified replica (ckpt_replicas = 1) or
 *                                from tier 1
 *   kill@at=resume,rank=1        SIGKILL this rank in the middle of the next checkpoint resume
 *                                (verified, not yet loaded): a failure while recovering
 *   bitflip@step=23,rank=1[,tensor=NAME][,bit=B]
 *                                silent data corruption: after optimizer step 23 (before the
 *                                silent-corruption check, sched/sdc.h) flip bit B (default 10, a
 *                                mantissa bit: the loss does not notice) of the middle element of
 *                                tensor NAME (default: this rank's first 2-D non-expert weight)
 *                                in this rank's parameters; training goes on as if nothing
 *                                happened until --sdc-check-every compares the replicas
 * rank: the rank the fault fires on; omitted = every rank (corrupt-ckpt, torn-ckpt: rank 0).
 *
 * Once only: a fault that fired is appended (and fsynced) to RUN_DIR/faults_fired BEFORE it acts,
 * and faults listed there are disarmed at start-up. So a relaunch with the same --fault flags
 * never re-fires one, whether it resumes past the fault's step or from a checkpoint before it.
 * Each firing also logs an event kind "fault" (detail {"kind","step","spec"}) in run.db, which
 * the ETTR accounting uses as the moment of failure.
 */
#ifndef MT_SCHED_FAULT_H
#define MT_SCHED_FAULT_H

#include <stddef.h>

#define FAULT_MAX 16
#define FAULT_RECORD_FILE "faults_fired"

typedef enum {
    FAULT_KILL,
    FAULT_HANG,
    FAULT_NAN,
    FAULT_SLOW,
    FAULT_EXIT,
    FAULT_CORRUPT_CKPT,
    FAULT_TORN_CKPT,
    FAULT_BITFLIP,
} fault_kind;

typedef struct {
    fault_kind kind;
    int step;      /* step it fires at (after that optimizer step); slow: first slowed step */
    int rank;      /* -1 = every rank */
    double factor; /* slow: > 1 */
    int code;      /* exit: 1..255 */
    int then_kill; /* corrupt-ckpt, torn-ckpt: 1 = SIGKILL after damaging every copy */
    int at_resume; /* kill: 1 = during the next checkpoint resume instead of at a step */
    char tensor[64]; /* bitflip: the tensor's name ("" = the default) */
    int bit;         /* bitflip: the bit of the float32 to flip, 0..31 (default 10) */
    char spec[128]; /* the spec text (trimmed): its identity in the once-only record */
} fault_spec;

/* Name of a kind ("kill", "corrupt-ckpt", ...). */
const char *fault_kind_name(fault_kind k);

/* Parse one spec. Returns 0, or -1 with one line in err saying what is wrong with which spec
 * (unknown kind or key, missing step/factor, bad number, duplicate key). */
int fault_parse(const char *text, fault_spec *out, char *err, size_t errlen);

/* Parse a ';'-separated list (empty items are skipped). Returns the number of specs (0..max), or
 * -1 with err (a bad spec, or more than max). */
int fault_parse_list(const char *text, fault_spec *out, int max, char *err, size_t errlen);

/* Check the ranks of parsed specs against the world size. Returns 0 or -1 with err. */
int fault_check_ranks(const fault_spec *f, int n, int world_size, char *err, size_t errlen);

/* 1 if spec f fires on `rank`. */
int fault_applies(const fault_spec *f, int rank);

/* Read RUN_DIR/faults_fired and set fired[i] = 1 for every spec already recorded there (by spec
 * text). A missing file means nothing fired. Returns the number disarmed. */
int fault_load_fired(const char *run_dir, const fault_spec *f, int n, int *fired);

/* Append "<spec>\trank=R\tstep=S\n" to RUN_DIR/faults_fired and fsync it. Returns 0 or -1. */
int fault_record_fired(const char *run_dir, const fault_spec *f, int rank, int step);

/* Flip one byte in the middle of the data section of the largest *.safetensors file of the
 * committed checkpoint directory step_dir (and fsync). Returns 0, or -1 with err (no such
 * directory / no tensor file / I/O error). The file's path is written to which (may be NULL). */
int fault_corrupt_checkpoint(const char *step_dir, char *which, size_t whichlen, char *err,
                             size_t errlen);

/* Truncate the largest *.safetensors file of step_dir to half its size (and fsync): a torn copy
 * that ckpt_verify catches by its size. Returns 0 or -1 with err; which as above. */
int fault_tear_checkpoint(const char *step_dir, char *which, size_t whichlen, char *err,
                          size_t errlen);

#endif /* MT_SCHED_FAULT_H */
