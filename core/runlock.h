/*
 * core/runlock.h — one job per run directory: an exclusive lock on RUN_DIR/.lock.
 *
 * Two trainers (or two supervisors) on one RUN_DIR would both write checkpoints and run.db and
 * corrupt each other's state. So the process that owns a job takes flock(LOCK_EX | LOCK_NB) on
 * RUN_DIR/.lock and keeps the descriptor open for its whole life; the kernel releases the lock on
 * any exit, SIGKILL included, so a lock is never left behind by a dead holder. The file holds one
 * line naming the holder ("pid=4242 what=run host=node1"), which is how a second starter can name
 * it in its error. The file itself stays (it is the lock's identity; removing it would let two
 * processes lock two different inodes).
 *
 * Who holds it: `minitrain run` (the supervisor) for the whole job, and it passes the lock path
 * down in $MINITRAIN_RUN_LOCK (RUNLOCK_ENV) so that the trainers it launches do not try again;
 * an unsupervised `minitrain train` takes it on world rank 0 only (the other ranks of the job
 * never touch it).
 */
#ifndef MT_RUNLOCK_H
#define MT_RUNLOCK_H

#include <stddef.h>

#define RUNLOCK_FILE ".lock"
#define RUNLOCK_ENV "MINITRAIN_RUN_LOCK"

typedef struct {
    int fd;              /* -1 = not held */
    int created_dir;     /* 1 = runlock_acquire made RUN_DIR itself */
    char dir[4096];
    char path[4200];
} runlock;

/* A lock that is not held (fd = -1), safe to pass to runlock_release. */
void runlock_init(runlock *l);

/* Take the lock of run_dir (mkdir -p run_dir first), write "pid=P what=WHAT host=H" into it.
 * Returns 0 when held; 1 when another process holds it (err: "run directory D is in use by
 * pid P (minitrain WHAT on host H); ..."); -1 for any other error (err names the path and errno).
 * `what` is the holder's role, e.g. "run" or "train". */
int runlock_acquire(runlock *l, const char *run_dir, const char *what, char *err, size_t errlen);

/* 1 when $MINITRAIN_RUN_LOCK names run_dir's lock file (the same file, compared by device and
 * inode): a supervisor above this process holds it. */
int runlock_held_above(const char *run_dir);

/* Release (close) the lock. When runlock_acquire created the directory and nothing but the lock
 * file is in it (a start that failed before writing anything), the directory is removed again, so
 * an early error leaves no trace. No-op for a lock that is not held. */
void runlock_release(runlock *l);

/* The holder line of run_dir's lock file into buf ("" when there is no such file); for messages
 * and `report`. Returns 1 when the lock is held right now by some process, 0 when it is free, -1
 * when there is no lock file. Never takes the lock for longer than the test. */
int runlock_probe(const char *run_dir, char *buf, size_t len);

#endif /* MT_RUNLOCK_H */
