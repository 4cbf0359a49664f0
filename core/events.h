/*
 * core/events.h — the run.db event vocabulary: every event kind, every detail key, and the one
 * way to build a detail (cJSON), so a detail is valid JSON whatever path or message it carries.
 *
 * Why one table: the writers (the supervisor, the trainer, the checkpointer, the fault hooks) and
 * the readers (report/ettr.c, `minitrain report`, the tests) must agree on names that no compiler
 * checks when they are string literals scattered over ten files. Each kind below says who logs it
 * (run_id 0 = the supervisor, else the trainer's `runs` row; rank -1 = not a rank) and the keys of
 * its detail, a JSON object. A detail is never built with printf: a run directory holding a quote,
 * a backslash or a tab would make it invalid JSON (cJSON escapes them), and a number that is not
 * finite (a NaN loss) is written as the string "nan" / "inf" / "-inf" (JSON has no such numbers).
 *
 * Use:
 *     cJSON *d = ev_detail();
 *     ev_num(d, EVK_STEP, step);
 *     ev_str(d, EVK_PATH, dir);
 *     ev_log(db, run_id, EV_CHECKPOINT, rank, d);   // logs, then frees d
 *
 * Strings are stored byte for byte; run.db readers decode TEXT as UTF-8, so a path that is not
 * UTF-8 is the one thing a detail cannot carry faithfully (it is stored, but is not valid text).
 */
#ifndef MT_EVENTS_H
#define MT_EVENTS_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/rundb.h"

/* ---- event kinds: name, who logs it as (run_id, rank), and the keys of its detail ------------ */
/* the supervisor, sched/supervisor.c (run_id 0) */
#define EV_SUPERVISOR_START "supervisor_start" /* (0, -1) max_restarts, window_s,
                                                  heartbeat_timeout_s, backoff [min, max] s,
                                                  fault_mtbf_s, pid */
#define EV_LAUNCH "launch"                     /* (0, -1) attempt, pid, resume (bool), argv:
                                                  the exact exec vector, an array of strings */
#define EV_RECOVERED "recovered"               /* (0, first rank training again) attempt, step
                                                  (the step the relaunch resumed at), at_step
                                                  (where it was when seen), seconds (failure ->
                                                  training again) */
#define EV_STRAGGLER "straggler"               /* (0, slow rank) attempt, step, busy_ms,
                                                  median_ms, ratio, steps */
#define EV_FAILSLOW "failslow"                 /* (0, slowest rank) a fail-slow verdict
                                                  (sched/failslow.h): attempt, text, blame_kind,
                                                  blame, hosts, machines, flagged_rounds,
                                                  window, ratio, round_s, evicted (bool) */
#define EV_MTBF_KILL "mtbf_kill"               /* (0, killed rank) attempt, pid, step */
#define EV_FAILURE "failure"                   /* (0, blamed rank or -1) kind (EV_FAILURE_*),
                                                  attempt, exit_code, signal, step, failed_at,
                                                  detected_at (unix s), host, why */
#define EV_STACKS "stacks"                     /* (0, first outlier rank or -1) the ranks' stacks
                                                  and the verdict (sched/stacks.h,
                                                  stk_verdict_json): ranks, text, outliers,
                                                  blame_kind, blame, machines, groups, seconds,
                                                  source (supervisor | diagnose), attempt */
#define EV_TEARDOWN "teardown"                 /* (0, -1) attempt, seconds */
#define EV_GIVE_UP "give_up"                   /* (0, -1) failures_in_window, max_restarts, or
                                                  reason */
#define EV_CORDON "cordon"                     /* (0, blamed rank) host, failures, slots_left */
#define EV_SLURM_DRAIN "slurm_drain"           /* (0, blamed rank) host, ok (bool: scontrol drained it),
                                               * why (the reason given to Slurm) */
#define EV_BACKOFF "backoff"                   /* (0, -1) attempt, seconds */
#define EV_REPLAN "replan"                     /* (0, -1) host (the cordoned one), hosts (the new
                                                  placement's, comma-separated), spares (left),
                                                  path (the next launch's rankfile) */
#define EV_CHECKPOINT_NOW "checkpoint_now"     /* (0, -1) attempt, ok: SIGUSR1 asked the ranks to
                                                  checkpoint now and stop; (run, 0) step: the
                                                  trainer agreed to stop after that step */
#define EV_REQUEUE "requeue"                   /* (0, -1) attempt, ok, reason: `scontrol requeue`
                                                  after that checkpoint; written before the
                                                  request (ok 1), a failed one adds ok 0 */
#define EV_SUPERVISOR_END "supervisor_end"     /* (0, -1) exit, status (EV_SUP_*: the job's
                                                  status), reason ("" when completed) */
/* the trainer, train/trainer.c and train/cmd_train.c (world rank 0 unless said) */
#define EV_START "start"         /* (run, 0) the run's config: one key per config key. Its time is
                                    the time base of metrics.wall_s */
#define EV_EVAL "eval"           /* (run, 0) step, val_loss */
#define EV_MOE "moe"             /* (run, 0) step, aux_loss, z_loss, dropped, tokens_min,
                                    tokens_max, tokens_cv; layers (global indices of the MoE
                                    blocks), experts, load ((layers, experts) assignments per
                                    expert before capacity, row-major), dropped_layer (per
                                    layer), all summed over the step's microbatches and the job */
#define EV_NONFINITE "nonfinite" /* (run, 0) step, loss, grad_norm (strings when not finite) */
#define EV_PP_IDLE "pp_idle"     /* (run, stage's first rank) step, stage, idle_share */
#define EV_PP_TIMELINE "pp_timeline" /* (run, stage's first rank) on the steps that log: step,
                                        stage, stages, schedule (1f1b|gpipe), t0 (unix s: the
                                        stage entered the schedule), forward_ms, backward_ms:
                                        [start, end, start, end, ...] per microbatch, ms after t0 */
#define EV_MEMORY "memory"       /* (run, 0) before step 1: zero, recompute, limit (bytes, 0 =
                                    off) and one array per budget column of train/memory.h
                                    (params, grads, optimizer, activations, comm, workspace,
                                    checkpoint, runtime, total), predicted bytes per world rank */
#define EV_MEMORY_PEAK "memory_peak" /* (run, 0) at the end of training: peak_rss (measured
                                        bytes per world rank: VmHWM) and total (predicted) */
#define EV_END "end"             /* (run, 0) status (completed|failed|stopped), step, message */
#define EV_ERROR "error"         /* (run, 0) error (the message), step */
/* the checkpointer: ckpt/writer.c and ckpt/tiers.c through train/checkpoint.c's sink, and
 * train/checkpoint.c itself (resume) */
#define EV_CHECKPOINT "checkpoint"     /* (run, 0) one per committed tier: step, tier, path, bytes,
                                          snapshot_ms (the training stall), write_ms */
#define EV_CKPT_ERROR "ckpt_error"     /* (run, rank) step, tier, error */
#define EV_CKPT_WARNING "ckpt_warning" /* (run, rank) step, tier (absent: not tier-specific),
                                          warning */
#define EV_CKPT_INTERVAL "ckpt_interval" /* (run, 0) ckpt_every = auto chose a new interval:
                                          step, every (steps), stall_s, mtbf_s, interval_s (the
                                          Young/Daly compute seconds), step_s (sched/hooks.h) */
#define EV_CKPT_WAIT "ckpt_wait"       /* (run, 0) step, waited_ms (a save waited for the last) */
#define EV_CKPT_SKIP "ckpt_skip"       /* (run, 0) step (-1: a whole tier), tier, warning: a
                                          checkpoint resume passed over (it did not verify) */
#define EV_RESUME "resume"             /* (run, 0) step, tier, path, verify_ms, load_ms */
/* node health checks, `minitrain doctor --record RUN_DIR` (sched/doctor.h) */
#define EV_DOCTOR "doctor" /* (0, -1) host, ok (bool), failed (names), sgemm_gflops,
                              bandwidth_gbs, checks ([{name, ok, value, reference, unit, text}]) */
/* silent-corruption checks, sched/sdc.c (world rank 0; every rank reaches the same verdict) */
#define EV_SDC "sdc"       /* (run, first blamed rank) a mismatch: step, last_good (the last step
                              whose check agreed, -1 none), blame (ranks), tie (bool), groups,
                              text, hashes (hex per rank), ms (the check's cost) */
#define EV_SDC_OK "sdc_ok" /* (run, 0) a check that agreed: step, hash (hex: FNV-1a 64 of the
                              world's per-rank hashes in rank order), layout, ms,
                              hash_ms (of ms: hashing), step_ms */
/* fault injection, sched/hooks.c (the rank it fires on) */
#define EV_FAULT "fault" /* (run, rank) kind (sched/fault.h names), step, spec; corrupt-ckpt adds
                            tier, file. Logged BEFORE the fault acts: the moment of failure */
/* The fault kinds (detail "kind" of EV_FAULT) that end or stop the process, named here so that
 * ETTR accounting (report/ettr.c) reads them without the fault injector (sched/fault.c, whose
 * table spells them the same). */
#define EV_FAULT_KIND_KILL "kill"
#define EV_FAULT_KIND_HANG "hang"
#define EV_FAULT_KIND_EXIT "exit"

/* Values of the failure event's "kind" (what the supervisor saw). */
#define EV_FAILURE_CRASH "crash"         /* the launch exited non-zero or was killed */
#define EV_FAILURE_NONFINITE "nonfinite" /* exit MT_EXIT_NONFINITE: the loss was not finite */
#define EV_FAILURE_HANG "hang"           /* no heartbeat progress for the timeout */
#define EV_FAILURE_STRAGGLER "straggler" /* evicted straggler (--evict-stragglers) */
#define EV_FAILURE_FAILSLOW "failslow"   /* evicted fail-slow group (--evict-stragglers) */
#define EV_FAILURE_IO "io"               /* exit MT_EXIT_IO: a file could not be written */
#define EV_FAILURE_SDC "sdc"             /* exit MT_EXIT_SDC: replicas' parameters differ */

/* Values of supervisor_end's "status". */
#define EV_SUP_COMPLETED "completed"
#define EV_SUP_STOPPED "stopped" /* (older run directories: interrupted) */
#define EV_SUP_KILLED "killed"   /* the supervisor was interrupted by a signal */
#define EV_SUP_USAGE_ERROR "usage_error"
#define EV_SUP_GAVE_UP "gave_up"
#define EV_SUP_REQUEUED "requeued" /* stopped on SIGUSR1 after a checkpoint, requeued in Slurm */

/* ---- detail keys (alphabetical; units in the name or here) ---------------------------------- */
#define EVK_ACTIVATIONS "activations" /* bytes per rank: activation slots (train/memory.h) */
#define EVK_CKPT_BYTES "checkpoint"   /* bytes per rank: the asynchronous checkpoint snapshot */
#define EVK_FLOPS_PER_TOKEN "flops_per_token" /* the model's training FLOPs per token (MFU's) */
#define EVK_COMM_BYTES "comm"         /* bytes per rank: communication buffers */
#define EVK_GRADS "grads"             /* bytes per rank: gradients */
#define EVK_LIMIT "limit"             /* memory_limit in bytes (0 = no check) */
#define EVK_OPTIMIZER "optimizer"     /* bytes per rank: AdamW m and v */
#define EVK_PARAMS "params"           /* bytes per rank: parameters */
#define EVK_PEAK_RSS "peak_rss"       /* bytes per rank: measured peak resident set (VmHWM) */
#define EVK_RECOMPUTE "recompute"     /* none | selective | full */
#define EVK_RECOMPUTE_FLOPS "recompute_flops_per_token" /* what recompute adds (HFU's extra) */
#define EVK_RUNTIME "runtime"         /* bytes per rank: the process before the trainer built */
#define EVK_TOTAL "total"             /* bytes per rank: the predicted total */
#define EVK_WORKSPACE "workspace"     /* bytes per rank: backward scratch, token ids, probes */
#define EVK_ZERO "zero"               /* ZeRO stage 0..3 */
#define EVK_ARGV "argv"               /* array of strings */
#define EVK_AT_STEP "at_step"         /* the step a rank had reached when the supervisor looked */
#define EVK_ATTEMPT "attempt"         /* 1, 2, ...: the supervisor's launch number */
#define EVK_AUX_LOSS "aux_loss"       /* MoE balancing loss, mean per (EP group, microbatch) */
#define EVK_BACKOFF "backoff"         /* [min, max] seconds */
#define EVK_BACKWARD_MS "backward_ms" /* [start, end] pairs per microbatch, ms after t0 */
#define EVK_CHUNKS "chunks"           /* model chunks per pipeline stage (interleaved: v) */
#define EVK_BUSY_MS "busy_ms"         /* a rank's compute time in its last step (ms) */
#define EVK_BYTES "bytes"             /* size of a committed checkpoint */
#define EVK_DETECTED_AT "detected_at" /* unix seconds */
#define EVK_DROPPED "dropped"         /* MoE (token, slot) assignments dropped */
#define EVK_DROPPED_LAYER "dropped_layer" /* MoE assignments dropped, per MoE layer */
#define EVK_ERROR "error"             /* a message */
#define EVK_EVERY "every"             /* steps between checkpoints */
#define EVK_EXIT "exit"               /* the supervisor's exit status */
#define EVK_EXPERTS "experts"         /* experts per MoE layer */
#define EVK_EXIT_CODE "exit_code"     /* the launch's exit status, -1 when signalled */
#define EVK_FAILED_AT "failed_at"     /* unix seconds, best estimate */
#define EVK_FAILURES "failures"       /* failures blamed on a host */
#define EVK_FAILURES_IN_WINDOW "failures_in_window" /* failures within --restart-window */
#define EVK_FAULT_MTBF_S "fault_mtbf_s" /* mean seconds between --fault-mtbf kills (0 = off) */
#define EVK_FILE "file"               /* a path */
#define EVK_FORWARD_MS "forward_ms"   /* [start, end] pairs per microbatch, ms after t0 */
#define EVK_GRAD_NORM "grad_norm"     /* global gradient norm */
#define EVK_HEARTBEAT_TIMEOUT_S "heartbeat_timeout_s" /* no progress for this long = hang */
#define EVK_HOST "host"               /* host name from --hostfile ("" = none) */
#define EVK_HOSTS "hosts"             /* host names, comma-separated */
#define EVK_SPARES "spares"           /* spare nodes held back */
#define EVK_IDLE_SHARE "idle_share"   /* fraction of the step a pipeline stage waited */
#define EVK_IN_FLIGHT "in_flight"     /* most (microbatch, chunk) activations a stage held */
#define EVK_KIND "kind"               /* failure: EV_FAILURE_*; fault: sched/fault.h names */
#define EVK_LAYERS "layers"           /* global layer indices */
#define EVK_LOAD "load"               /* MoE assignments per (layer, expert), row-major */
#define EVK_LOAD_MS "load_ms"         /* reading a checkpoint into the trainer (after verify) */
#define EVK_LOSS "loss"               /* training loss (mean over the global batch) */
#define EVK_INTERVAL_S "interval_s"   /* compute seconds between checkpoints */
#define EVK_MAX_RESTARTS "max_restarts" /* --max-restarts */
#define EVK_MEDIAN_MS "median_ms"     /* median busy_ms over the ranks */
#define EVK_MESSAGE "message"         /* a message for a person */
#define EVK_OK "ok"                   /* bool: the action succeeded */
#define EVK_MTBF_S "mtbf_s"           /* job MTBF assumed by an interval policy, s */
#define EVK_PATH "path"               /* a checkpoint directory */
#define EVK_PID "pid"                 /* process id */
#define EVK_RATIO "ratio"             /* busy_ms / median_ms */
#define EVK_REASON "reason"           /* why the supervisor gave up, in words */
#define EVK_RESUME "resume"           /* bool: the launch resumes (--resume auto) */
#define EVK_SCHEDULE "schedule"       /* pipeline schedule: 1f1b | gpipe | interleaved | zb-h1 */
#define EVK_SECONDS "seconds"         /* duration of the phase the kind names */
#define EVK_SIGNAL "signal"           /* 0 = none */
#define EVK_SLOTS_LEFT "slots_left"   /* slots on hosts not cordoned */
#define EVK_SNAPSHOT_MS "snapshot_ms" /* the training stall of a save */
#define EVK_OVERLAP_MS "overlap_ms"   /* the excess time of the steps a background save overlapped */
#define EVK_SPEC "spec"               /* a fault spec as given */
#define EVK_STAGE "stage"             /* pipeline stage (pp rank) */
#define EVK_STALL_S "stall_s"         /* training stall per checkpoint save, s */
#define EVK_STAGES "stages"           /* pipeline stages (pp) */
#define EVK_WEIGHT_MS "weight_ms"     /* zb-h1: [start, end] pairs of each W pass, ms after t0 */
#define EVK_STATUS "status"           /* how a run or the supervisor ended */
#define EVK_STEP "step"               /* optimizer step (after it), or the checkpoint's step */
#define EVK_STEP_S "step_s"           /* seconds per optimizer step */
#define EVK_STEPS "steps"             /* consecutive slow steps */
#define EVK_T0 "t0"                   /* unix s: the origin of the *_ms offsets */
#define EVK_TIER "tier"               /* 0 memory, 1 run dir, 2 durable */
#define EVK_TOKENS_CV "tokens_cv"     /* coefficient of variation of tokens per expert */
#define EVK_TOKENS_MAX "tokens_max"   /* most (token, slot) assignments an expert got */
#define EVK_TOKENS_MIN "tokens_min"   /* fewest (token, slot) assignments an expert got */
#define EVK_VAL_LOSS "val_loss"       /* validation loss */
#define EVK_VERIFY_MS "verify_ms"     /* checksumming a checkpoint before loading it */
#define EVK_WAITED_MS "waited_ms"     /* a save waited this long for the previous one */
#define EVK_WARNING "warning"         /* a message */
#define EVK_WHY "why"                 /* a message */
#define EVK_WINDOW_S "window_s"       /* --restart-window */
#define EVK_WRITE_MS "write_ms"       /* background write + commit of a save */
#define EVK_Z_LOSS "z_loss"           /* MoE router z-loss, mean like aux_loss */

/* ---- building and logging a detail ------------------------------------------------------- */

/* A new, empty detail object. Exits (mtCheck) when out of memory. */
cJSON *ev_detail(void);

/* Add key: a number. A value that is not finite becomes the string "nan", "inf" or "-inf". */
void ev_num(cJSON *d, const char *key, double v);

/* Add key: a string, any bytes (cJSON escapes quotes, backslashes, control characters). NULL is
 * stored as JSON null. */
void ev_str(cJSON *d, const char *key, const char *s);

/* Add key: true or false. */
void ev_bool(cJSON *d, const char *key, int b);

/* Add key: an array of the n strings v[0..n-1] (an exec vector, byte for byte). */
void ev_strv(cJSON *d, const char *key, char *const *v, int n);

/* Add key: an array of the n numbers v[0..n-1] (non-finite ones as strings, like ev_num). */
void ev_numv(cJSON *d, const char *key, const double *v, int n);

/* The detail as compact JSON text (malloc'd, caller frees), or NULL for d == NULL. */
char *ev_text(const cJSON *d);

/* Append one events row (kind, rank, detail as compact JSON; time = now) and free d. db NULL
 * (a process without a run database) only frees d. kind is one of the EV_* kinds above. */
void ev_log(rundb *db, int64_t run_id, const char *kind, int rank, cJSON *d);

#endif /* MT_EVENTS_H */
