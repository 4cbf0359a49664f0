/*
 * core/fs.h — files a user keeps, written so that a crash or a full disk never leaves a torn one;
 * and the few directory operations around them (mkdir -p, rm -rf, copy). Prefix fs_.
 *
 * Every file minitrain writes for a user to keep (token shards, the tokenizer, model.safetensors,
 * checkpoint files, reports) goes through fs_afile or fs_write_atomic: the bytes go to a partial
 * file "<path>.part.<pid>.<k>" beside the target, which is fsynced, closed, renamed onto the final
 * name (atomic on POSIX) and then the parent directory is fsynced so that the rename itself is on
 * disk — the recipe of SQLite and LevelDB. Until the rename an existing file at the path is
 * untouched; on any error the partial file is removed.
 *
 * Errors: functions return 0 on success and -1 on failure with one line in err[errlen] naming the
 * path and the failing call's strerror() (err may be NULL), and errno left as the failing call set
 * it, so a caller may also phrase its own message. Nothing here exits the process: the caller (a
 * trainer mid-run) decides what a failure means.
 */
#ifndef MT_FS_H
#define MT_FS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FS_PATH_MAX 4096

/* A file written durably and atomically (see the top of this header). */
typedef struct {
    int fd;                   /* -1 when not open */
    uint64_t bytes;           /* bytes written so far */
    char path[FS_PATH_MAX];   /* final name */
    char tmp[FS_PATH_MAX];    /* partial name */
} fs_afile;

/* Create the partial file beside path (mode 0644). Returns 0 or -1 (ENOENT, EACCES, EROFS...). */
int fs_afile_open(fs_afile *a, const char *path, char *err, size_t errlen);
/* Append n bytes (loops over short writes and EINTR). On error (ENOSPC, EFBIG, EIO...) the file
 * is aborted (partial removed) and -1 returned with the byte offset in the message. */
int fs_afile_write(fs_afile *a, const void *buf, size_t n, char *err, size_t errlen);
/* fsync, close, rename onto the final name, fsync the directory. Returns 0 or -1 (aborted). */
int fs_afile_commit(fs_afile *a, char *err, size_t errlen);
/* Close and remove the partial file; safe to call twice or on a never-opened fs_afile. */
void fs_afile_abort(fs_afile *a);

/* The same, as a buffered stdio stream (for writers of many small pieces): fs_afile_open, then a
 * FILE on a duplicate of its descriptor. fs_stream_commit flushes and closes the stream, then
 * fs_afile_commit; fs_stream_abort drops both. Returns the stream, or NULL with err. */
FILE *fs_stream_open(fs_afile *a, const char *path, char *err, size_t errlen);
int fs_stream_commit(fs_afile *a, FILE *f, char *err, size_t errlen);
void fs_stream_abort(fs_afile *a, FILE *f);

/* Write buf[0..n) to path durably and atomically (an fs_afile in one call). */
int fs_write_atomic(const char *path, const void *buf, size_t n, char *err, size_t errlen);

/* Copy the regular file src to dst durably and atomically (4 MiB reads; dst's partial file is
 * removed on error). Returns 0 or -1. */
int fs_copy_file(const char *src, const char *dst, char *err, size_t errlen);

/* Read a whole (small) file into a malloc'd, NUL-terminated buffer; *len gets its size (may be
 * NULL). Refuses files over max_bytes and non-regular files. Returns 0 or -1. Caller frees *out. */
int fs_read_file(const char *path, size_t max_bytes, char **out, size_t *len, char *err,
                 size_t errlen);

/* fsync a directory so that renames/creations inside it are durable. */
int fs_fsync_dir(const char *dir, char *err, size_t errlen);

/* mkdir -p with mode 0755; an existing directory is fine, an existing non-directory is an error
 * (errno ENOTDIR). */
int fs_mkdir_p(const char *dir, char *err, size_t errlen);

/* rm -rf through nftw(3), depth first, never following symbolic links (a link is removed, not its
 * target); a missing path is success. Returns 0 or -1 (the first entry that cannot be removed). */
int fs_remove_tree(const char *path, char *err, size_t errlen);

/* dir + "/" + name into buf[len]. Returns 0, or -1 ("path too long" in err) when it does not fit. */
int fs_join(char *buf, size_t len, const char *dir, const char *name, char *err, size_t errlen);

/* 1 when paths a and b name the same file: the same inode when both exist, else the same string
 * (an output that does not exist yet cannot be an existing input). */
int fs_same_file(const char *a, const char *b);

/* fs_check_output's answers (and its flags) */
#define FS_OUT_ATOMIC 0   /* a new or regular file: write it with fs_afile (renamed over) */
#define FS_OUT_IN_PLACE 1 /* a FIFO, device or socket: open and write it as it is */
#define FS_OUT_ALLOW_IN_PLACE 1 /* flag: the caller can stream into a non-regular file */
#define FS_OUT_MAKE_DIR 2       /* flag: the caller creates missing directories (fs_mkdir_p): the
                                   nearest existing ancestor must be a writable directory */

/* The one rule for a file a user names as an output (`ckpt export --out`, `report --svg/--html`,
 * `scrub --out/--report`, `plan --out`, ...), checked before any work: its directory exists and is
 * writable; it is not a directory nor a symbolic link (a rename would replace the link, not its
 * target); a FIFO, device node or socket is refused unless flags has FS_OUT_ALLOW_IN_PLACE (a
 * rename would turn /dev/null into a regular file); and it is neither one of the files in
 * protect[] nor anywhere inside one of its directories (protect: NULL-terminated, may be NULL;
 * missing entries are skipped; the run database, a checkpoint tier root). Directories are compared
 * by real path, so "DIR/./ckpt/../ckpt/x" is inside DIR/ckpt. Returns FS_OUT_ATOMIC or
 * FS_OUT_IN_PLACE, or -1 with one line in err naming the path and why. */
int fs_check_output(const char *path, const char *const *protect, int flags, char *err,
                    size_t errlen);

#endif /* MT_FS_H */
