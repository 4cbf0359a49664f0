/*
 * cmd/scrub.c — `minitrain scrub`: remove PII and secrets from a text file, streaming.
 *
 * The wiring around safety/pii.h: options, the hash key file, progress on stderr (stdout may be
 * the output), the output written to NAME.tmp and renamed into place (an interrupted scrub never
 * leaves a half-scrubbed file under the final name), and the counts-only JSON report.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "core/fs.h"
#include "core/timer.h"
#include "safety/pii.h"

/* ~1 s progress line on stderr: a live line on a terminal, plain lines otherwise */
static void progress(double t0, uint64_t done, uint64_t total, int final) {
    double dt = timer_now() - t0;
    double mbs = dt > 0 ? (double)done / 1e6 / dt : 0;
    int tty = isatty(2);
    if (total > 0)
        fprintf(stderr, "%sscrub: %.1f / %.1f MB (%.0f%%), %.0f MB/s%s", tty ? "\r" : "",
                (double)done / 1e6, (double)total / 1e6, 100.0 * (double)done / (double)total,
                mbs, tty && !final ? "   " : "\n");
    else
        fprintf(stderr, "%sscrub: %.1f MB, %.0f MB/s%s", tty ? "\r" : "", (double)done / 1e6,
                mbs, tty && !final ? "   " : "\n");
    if (tty && final)
        fprintf(stderr, "\n");
    fflush(stderr);
}

static int file_write(void *ctx, const char *p, size_t n) {
    return fwrite(p, 1, n, (FILE *)ctx) == n ? 0 : -1;
}

/* The output: stdout ("-"), a non-regular file written in place (/dev/null, a FIFO), or a
 * regular file written durably and atomically (core/fs.h: a partial file, renamed when
 * complete). */
typedef struct {
    FILE *fp;
    fs_afile file;    /* the partial file of a regular output */
    int atomic;       /* written through `file` */
    const char *path; /* the final name */
    int in_place;     /* opened as itself (not stdout, not a partial file) */
} out_file;

static void out_open(out_file *o, const char *outp) {
    static char obuf[1 << 20];
    memset(o, 0, sizeof(*o));
    o->path = outp;
    o->fp = stdout;
    char err[1024];
    int kind = strcmp(outp, "-") ? fs_check_output(outp, NULL, FS_OUT_ALLOW_IN_PLACE, err,
                                                   sizeof(err)) : FS_OUT_ATOMIC;
    if (kind < 0) mt_fail("scrub: --out %s", err);
    if (kind == FS_OUT_IN_PLACE) {
        o->in_place = 1; /* /dev/null, a FIFO: written as it is, never renamed over */
        o->fp = fopen(outp, "wb");
        if (o->fp == NULL)
            mt_fail("scrub: cannot write '%s': %s", outp, strerror(errno));
    } else if (strcmp(outp, "-")) {
        o->atomic = 1;
        o->fp = fs_stream_open(&o->file, outp, err, sizeof(err));
        if (o->fp == NULL)
            mt_fail("scrub: %s", err);
    }
    setvbuf(o->fp, obuf, _IOFBF, sizeof(obuf));
}

static void out_abort(out_file *o) {
    if (o->atomic) fs_stream_abort(&o->file, o->fp);
}

/* durable and under its final name, or one error line */
static void out_commit(out_file *o) {
    char err[1024];
    if (o->in_place && fclose(o->fp) != 0)
        mt_fail_io("scrub: cannot write '%s': %s", o->path, strerror(errno));
    if (o->atomic && fs_stream_commit(&o->file, o->fp, err, sizeof(err)) != 0)
        mt_fail_io("scrub: %s", err);
}

/* Read `in` to its end into the scrubber, with a progress line about every second.
 * Returns 0, 1 on a read error, 2 on a write error. */
static int pump(pii_scrubber *s, FILE *in, uint64_t total, int quiet, double t0) {
    size_t chunk = 1u << 20;
    char *cbuf = mallocCheck(chunk);
    double last = t0;
    int rc = 0;
    for (;;) {
        size_t got = fread(cbuf, 1, chunk, in);
        if (got > 0 && pii_scrubber_push(s, cbuf, got) != 0) {
            rc = 2;
            break;
        }
        if (got < chunk && (feof(in) || ferror(in))) {
            rc = ferror(in) ? 1 : 0;
            break;
        }
        if (!quiet && timer_now() - last > 1.0) {
            last = timer_now();
            progress(t0, pii_scrubber_counts(s)->bytes_in, total, 0);
        }
    }
    free(cbuf);
    return rc;
}

/* one line on stderr: size, speed, counts per type (never the matched text) */
static void summary(const pii_counts *c, pii_mode mode, unsigned types, double secs,
                    const char *report) {
    uint64_t n = 0;
    for (int t = 0; t < PII_NTYPES; t++)
        n += c->found[t];
    fprintf(stderr, "scrub: %.1f MB in %.2f s (%.0f MB/s), %llu matches (%s):",
            (double)c->bytes_in / 1e6, secs, secs > 0 ? (double)c->bytes_in / 1e6 / secs : 0,
            (unsigned long long)n, pii_mode_name(mode));
    for (int t = 0; t < PII_NTYPES; t++)
        if (types & (1u << t))
            fprintf(stderr, " %s %llu", pii_type_name((pii_type)t),
                    (unsigned long long)c->found[t]);
    if (mode == PII_DROP_LINE)
        fprintf(stderr, "; %llu lines dropped", (unsigned long long)c->lines_dropped);
    if (c->long_lines_masked)
        fprintf(stderr, "; %llu over-long lines masked instead",
                (unsigned long long)c->long_lines_masked);
    fprintf(stderr, "%s%s\n", report ? "; report " : "", report ? report : "");
}

/* The flags of `minitrain scrub`, and what check_scrub_args makes of them. */
typedef struct {
    const char *input, *outp, *mode_s, *types_s, *report, *keyfile;
    int quiet;
    pii_mode mode;
    unsigned types;
    uint8_t *key; /* the HMAC key of --mode hash (keylen bytes), else NULL */
    size_t keylen;
} scrub_args;

/* Step 1: the option table and its parse; ARGS_CONTINUE or the exit code (--help, bad flag). */
static int parse_scrub_args(scrub_args *a, int argc, char **argv) {
    *a = (scrub_args){.mode_s = "mask", .types_s = "all"};
    const args_opt opts[] = {
        {"input", KEYTAB_STRING, &a->input, 0, 0, "FILE", "text to scrub ('-' = stdin; any bytes)", ""},
        {"out", KEYTAB_STRING, &a->outp, 0, 0, "FILE", "scrubbed text ('-' = stdout); a file is "
         "written as FILE.tmp,\nthen renamed", ""},
        {"mode", KEYTAB_STRING, &a->mode_s, 0, 0, "M", "mask: <EMAIL>, <PHONE>, <CARD>, <IBAN>, <IPV4>, "
         "<IPV6>, <SSN>,\n<CNID>, <SECRET>; hash: <EMAIL:1a2b3c4d> (HMAC-SHA256 with\n"
         "--hash-key-file: the same value gives the same token);\ndrop-line: remove every line "
         "that holds a match", "mask"},
        {"types", KEYTAB_STRING, &a->types_s, 0, 0, "LIST", "all, or a comma list of: email, phone, "
         "card, iban, ipv4,\nipv6 (ip = both), ssn, cnid (PRC resident ID), secret", "all"},
        {"report", KEYTAB_STRING, &a->report, 0, 0, "FILE", "write the counts per type as JSON (never "
         "the matched text)", ""},
        {"hash-key-file", KEYTAB_STRING, &a->keyfile, 0, 0, "FILE", "the HMAC key for --mode hash (the "
         "file's bytes, one trailing\nnewline removed; 16 random bytes or more)", ""},
        {"quiet", KEYTAB_FLAG, &a->quiet, 0, 0, NULL, "no progress or summary on stderr", ""},
        {0},
    };
    const args_spec spec = {
        .cmd = "scrub",
        .synopsis = "usage: minitrain scrub --input FILE --out FILE [--mode mask|hash|drop-line]\n"
                    "                       [--types all|email,phone,...] [--report FILE.json]\n"
                    "                       [--hash-key-file FILE]",
        .about = "Find personal data and secrets in a text file and replace them, streaming (any "
                 "size,\nany bytes; about 6 MiB of memory whatever the input).",
        .opts = opts,
        .epilog = "What each recognizer accepts and rejects: docs/safety.md (PII scrubbing).",
    };
    return args_parse(&spec, argc, argv, NULL);
}

/* Step 2: --input/--out given, the mode and types parsed, the hash key loaded (a warning for a
 * short key, or a key without --mode hash); a user error (exit 2) otherwise. */
static void check_scrub_args(scrub_args *a) {
    if (a->input == NULL || a->outp == NULL)
        mt_fail("scrub: --input and --out are required (see minitrain scrub --help)");
    if (pii_mode_parse(a->mode_s, &a->mode) != 0)
        mt_fail("scrub: --mode must be mask, hash or drop-line, not '%s'", a->mode_s);
    char err[256];
    a->types = pii_types_parse(a->types_s, err, sizeof(err));
    if (a->types == 0)
        mt_fail("scrub: --types: %s", err);
    if (a->mode == PII_HASH) {
        if (a->keyfile == NULL)
            mt_fail("scrub: --mode hash needs --hash-key-file FILE (the HMAC key)");
        if (pii_key_load(a->keyfile, &a->key, &a->keylen, err, sizeof(err)) != 0)
            mt_fail("scrub: %s", err);
        if (a->keylen < 16)
            mt_warn("scrub: the hash key is %zu bytes; with fewer than 16 random bytes hashed "
                    "phone numbers and IDs can be recovered by trying them all",
                    a->keylen);
    } else if (a->keyfile != NULL)
        mt_warn("scrub: --hash-key-file is only used with --mode hash");
}

/* Step 3: the report's partial file, opened before the scrub: a bad --report path fails now, not
 * after the whole input is scrubbed and --out already committed under its name. Returns whether
 * rep is open (--report given). */
static int open_scrub_report(const scrub_args *a, int from_stdin, fs_afile *rep) {
    const char *input = a->input, *outp = a->outp, *report = a->report;
    char err[256];
    if (report && ((!from_stdin && fs_same_file(input, report)) ||
                   (strcmp(outp, "-") && (fs_same_file(outp, report) || !strcmp(outp, report)))))
        mt_fail("scrub: --report is the same file as --%s", !from_stdin && fs_same_file(input, report)
                                                                 ? "input" : "out");
    if (report && fs_check_output(report, NULL, 0, err, sizeof(err)) < 0)
        mt_fail("scrub: --report %s", err);
    if (report && fs_afile_open(rep, report, err, sizeof(err)) != 0)
        mt_fail("scrub: --report: %s", err);
    return report != NULL;
}

/* Step 5: the counts c as JSON into the report rep, committed; --out is complete and committed
 * by now, so a failure is an I/O error (exit 4, as the trainer's disk-full exit). */
static void write_scrub_report(const scrub_args *a, fs_afile *rep, const pii_counts *c,
                               double secs) {
    char err[256];
    char *js = pii_report_json(c, a->mode, a->types, secs);
    mtCheck(js != NULL, "out of memory");
    size_t jn = strlen(js);
    /* a text file ends in a newline (`cat` then keeps lines apart) */
    err[0] = 0;
    if (fs_afile_write(rep, js, jn, err, sizeof(err)) != 0 ||
        fs_afile_write(rep, "\n", 1, err, sizeof(err)) != 0 ||
        fs_afile_commit(rep, err, sizeof(err)) != 0)
        mt_fail_io("scrub: --report: %s (--out %s is complete)", err[0] ? err : strerror(errno),
                   a->outp);
    free(js);
}

int cmd_scrub(int argc, char **argv) {
    scrub_args a;
    int prc = parse_scrub_args(&a, argc, argv);
    if (prc != ARGS_CONTINUE)
        return prc;
    check_scrub_args(&a);
    const char *input = a.input, *outp = a.outp;
    int from_stdin = !strcmp(input, "-");
    if (strcmp(outp, "-") && !from_stdin && fs_same_file(input, outp))
        mt_fail("scrub: --out is the same file as --input");
    FILE *in = from_stdin ? stdin : fopen(input, "rb");
    if (in == NULL)
        mt_fail("scrub: cannot open --input '%s': %s", input, strerror(errno));
    uint64_t total = 0;
    struct stat st;
    if (!from_stdin && fstat(fileno(in), &st) == 0 && S_ISREG(st.st_mode))
        total = (uint64_t)st.st_size;
    fs_afile rep; /* written with write(2) (fs_afile): a full disk is seen at once */
    int rep_open = open_scrub_report(&a, from_stdin, &rep);
    out_file of;
    out_open(&of, outp);

    /* Step 4: the scrub itself, streaming from in to --out */
    pii_scrubber *s = pii_scrubber_new(a.mode, a.types, a.key, a.keylen, file_write, of.fp);
    mtCheck(s != NULL, "scrubber arguments were checked above");
    double t0 = timer_now();
    int rc = pump(s, in, total, a.quiet, t0);
    if (rc == 0 && (pii_scrubber_finish(s) != 0 || fflush(of.fp) != 0))
        rc = 2;
    double secs = timer_now() - t0;
    if (rc != 0) {
        int e = errno;
        out_abort(&of);
        if (rep_open) fs_afile_abort(&rep);
        mt_fail_io("scrub: %s error on '%s': %s", rc == 1 ? "read" : "write",
                rc == 1 ? input : outp, strerror(e));
    }
    out_commit(&of);
    if (!from_stdin)
        fclose(in);
    pii_counts c = *pii_scrubber_counts(s);
    pii_scrubber_free(s);
    if (a.key) {
        memset(a.key, 0, a.keylen);
        free(a.key);
    }
    if (a.report) write_scrub_report(&a, &rep, &c, secs);
    if (!a.quiet) {
        if (secs > 1.0)
            progress(t0, c.bytes_in, total, 1);
        summary(&c, a.mode, a.types, secs, a.report);
    }
    return MT_EXIT_OK;
}
