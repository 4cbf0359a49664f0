/*
 * sched/stacks.h — where is every rank stuck? Stack traces taken from outside the processes,
 * reduced to minitrain's own frames, grouped by equality, and the odd ones out named with the
 * mesh group they share.
 *
 * A hung job looks the same from the heartbeats whichever rank hangs: no rank makes progress,
 * because the healthy ones wait for the sick one in a collective. Their stacks tell them apart:
 * the healthy ranks all sit in the same frames (comm_all_reduce ← dp_... ← trainer_run), the sick
 * one somewhere else (ByteRobust, SOSP 2025, §4.2 "aggregated stack traces": group the stacks
 * of every process by equality, the small groups are the suspects, and evict the parallel group
 * the suspects share — over-eviction, so that one decision removes the fault).
 *
 * Capture: `eu-stack -m -s -i -p PID` (elfutils; ptrace, as root or with ptrace_scope 0), or
 * `gdb -batch -p PID -ex bt` when eu-stack is missing. Only the main thread is read (OpenMP
 * workers idle in the runtime). A frame is minitrain's when its module is the process's own
 * executable; the innermost frame of any module (pause, poll, an MPI progress loop) is kept as
 * the "leaf". The build carries -g, so frames name file:line.
 *
 * Stacks are compared by the function names of their minitrain frames only (not lines, not
 * addresses): two ranks waiting in the same all-reduce from the same call chain are equal.
 */
#ifndef MT_SCHED_STACKS_H
#define MT_SCHED_STACKS_H

#include <stddef.h>

#define STK_MAX_FRAMES 32
#define STK_FUNC 96
#define STK_WHERE 128
#define STK_MAX_RANKS 1024

typedef struct {
    char func[STK_FUNC];   /* function, compiler suffixes (.isra.0, .constprop.1, .part.0) cut */
    char where[STK_WHERE]; /* "sched/hooks.c:120", or "" without line information */
} stk_frame;

typedef struct {
    int rank, pid;
    int ok;                       /* 1 = captured and parsed */
    char err[160];                /* why not, when !ok */
    int nframes;                  /* minitrain frames, innermost first */
    stk_frame frames[STK_MAX_FRAMES];
    char leaf[STK_FUNC];          /* innermost frame of any module, e.g. "pause" */
    double stuck_s;               /* seconds since the rank's last heartbeat (NAN = unknown) */
    char host[64];                /* where the rank runs ("" = unknown) */
} stk_stack;

/* Parse eu-stack's output (`eu-stack -m -s -i -p PID`) for the thread TID == pid into *out:
 * frames of module exe (the executable's path as eu-stack prints it; NULL = the module of the
 * outermost frame, which is always the executable's _start) become out->frames. Returns 0, or
 * -1 with out->err when the text has no such thread or no minitrain frame. Pure. */
int stk_parse_eu_stack(const char *text, int pid, const char *exe, stk_stack *out);

/* Parse `gdb -batch -p PID -ex bt` output (the current thread is the main thread): frames
 * "at FILE:LINE" or without "from LIB" are minitrain's. Returns 0 or -1 with out->err. Pure. */
int stk_parse_gdb(const char *text, stk_stack *out);

/* Capture the main thread of pid (rank `rank`): eu-stack, gdb when eu-stack is not installed,
 * each under a 10 s timeout. Fills *out (out->ok, or out->err). Returns 0 or -1. */
int stk_capture(int pid, int rank, stk_stack *out);

/* Degrees of the run's layout: world = tp·cp·pp·dp, ep divides dp (parallel/mesh.h). */
typedef struct {
    int tp, cp, pp, dp, ep;
} stk_layout;

#define STK_MAX_GROUPS 16

typedef struct {
    int ngroups;               /* distinct stacks among the captured ranks, largest first */
    int group_size[STK_MAX_GROUPS];
    int group_first[STK_MAX_GROUPS]; /* index (into the stacks array) of a representative */
    int normal;                /* the group taken as healthy: the largest (ties: the one that
                                  waits in communication, comm_*) */
    int noutliers;
    int outliers[STK_MAX_RANKS]; /* ranks outside the normal group, ascending */
    const char *blame_kind;    /* "tp" | "cp" | "ep" | "pp" | "dp" | "rank": the group evicted */
    int nblame;
    int blame[STK_MAX_RANKS];  /* the ranks of that group, ascending */
    int machines;              /* distinct hosts among them (0 when hosts are unknown) */
    char text[2048];           /* one paragraph: who is where, for how long, what is blamed */
} stk_verdict;

/* Group stacks[0..n) (the ranks that could not be captured are left out) and name the outliers:
 * the ranks outside the largest group. The blamed group is the smallest of the rank's TP, CP,
 * EP, PP, DP groups (in that order on ties) that has more than one rank, contains every outlier and
 * is not the whole job; when none does, the outliers alone. Returns 0, or -1 when fewer than
 * one stack was captured (v->text says so). Pure. */
int stk_verdict_of(const stk_stack *stacks, int n, const stk_layout *L, stk_verdict *v);

/* The group that holds every one of v->outliers[0..v->noutliers), into v->blame, v->nblame and
 * v->blame_kind: the smallest TP, CP, EP, PP or DP group (that order on ties) of size > 1 that is
 * not the whole job of `world` ranks. Returns 1, or 0 (v->blame untouched) when there is none.
 * Pure; shared with the fail-slow rounds (sched/failslow.h). */
int stk_blame_group(const stk_layout *L, int world, stk_verdict *v);

/* "f0 ← f1 ← f2 (where of f0)": a stack's innermost `depth` minitrain frames, into buf. */
void stk_describe(const stk_stack *s, int depth, char *buf, size_t len);

/* ---- a run's ranks ------------------------------------------------------------------------- */
struct cJSON;
struct sqlite3;

/* Capture every rank of the heartbeat directory hb_dir (sched/heartbeat.h) whose process runs on
 * this host: out[0..n) gets one entry per heartbeat record (ranks of other hosts, or whose pid
 * is gone, with ok = 0 and err saying so), stuck_s = now_unix − the record's time, host = this
 * host's name. Returns n (0 when hb_dir holds no record), or -1 when hb_dir cannot be read. */
int stk_capture_heartbeats(const char *hb_dir, double now_unix, stk_stack *out, int max);

/* The layout of the newest run in a run database (runs.config: tp, cp, pp, dp, ep), or 1·1·1·n·1
 * defaults left in *L. Returns 0 when read, -1 otherwise. */
int stk_layout_of_db(struct sqlite3 *db, stk_layout *L);

/* {ranks: [{rank, pid, host, ok, error, leaf, stuck_s, frames: [{func, where}]}], text,
 * outliers, blame_kind, blame, machines, seconds}: the capture and its verdict as JSON (the
 * detail of the EV_STACKS event, `diagnose --json`). seconds = the capture's wall time. */
struct cJSON *stk_verdict_json(const stk_stack *stacks, int n, const stk_verdict *v,
                               double seconds);

#endif /* MT_SCHED_STACKS_H */
