/*
 * cmd/prepare.c — `minitrain prepare`: text file -> tokenizer.bin + train/val token shards.
 *
 * This file parses the options, reads the input, scrubs it (safety/pii.h, --scrub-pii), builds
 * the tokenizer (text/tokenizer.h: byte, BPE trained on the text with the PII placeholders as
 * atoms, or a tokenizer file), encodes, and prints. The token-level train/val split and the
 * durable, atomic writes of the three files are text/prepare.h. User errors (missing/empty
 * input, bad flag values, unknown flags) are one line + exit 2.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "objstore/dataset.h"
#include "text/data.h"
#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "core/fs.h"
#include "core/timer.h"
#include "safety/pii.h"
#include "text/prepare.h"
#include "text/tokenizer.h"

#define PREP_DEFAULT_BPE_VOCAB 1024
#define PREP_MAX_VOCAB 65536

/* "\\n" "\\t" "\\\\" escapes of --doc-separator, in place; returns the length */
static size_t unescape(char *s) {
    size_t w = 0;
    for (size_t r = 0; s[r]; r++) {
        if (s[r] == '\\' && (s[r + 1] == 'n' || s[r + 1] == 't' || s[r + 1] == '\\')) {
            r++;
            s[w++] = s[r] == 'n' ? '\n' : s[r] == 't' ? '\t' : '\\';
        } else {
            s[w++] = s[r];
        }
    }
    s[w] = 0;
    return w;
}

/* `--scrub-pii` may stand without its mode: give it "mask" then (a copy of argv, *argv kept) */
static char **default_scrub_mode(int *argc, char **argv) {
    char **v = mallocCheck(((size_t)*argc * 2 + 1) * sizeof(char *));
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        v[n++] = argv[i];
        if (!strcmp(argv[i], "--scrub-pii") && (i + 1 >= *argc || !strncmp(argv[i + 1], "--", 2)))
            v[n++] = (char *)"mask";
    }
    v[n] = NULL;
    *argc = n;
    return v;
}

/* Scrub text[0..*n) in place of the original (freed) and write DIR/pii_report.json. */
static uint8_t *scrub_text(uint8_t *text, size_t *n, const char *mode_s, const char *types_s,
                           const char *keyfile, const char *out, pii_mode *mode,
                           unsigned *types) {
    if (pii_mode_parse(mode_s, mode) != 0)
        mt_fail("prepare: --scrub-pii must be mask, hash or drop-line, not '%s'", mode_s);
    char err[256];
    *types = pii_types_parse(types_s, err, sizeof(err));
    if (*types == 0)
        mt_fail("prepare: --pii-types: %s", err);
    uint8_t *key = NULL;
    size_t keylen = 0;
    if (*mode == PII_HASH && keyfile == NULL)
        mt_fail("prepare: --scrub-pii hash needs --hash-key-file FILE (the HMAC key)");
    if (*mode == PII_HASH && pii_key_load(keyfile, &key, &keylen, err, sizeof(err)) != 0)
        mt_fail("prepare: %s", err);
    pii_counts c;
    size_t sn = 0;
    double t0 = timer_now();
    char *sc = pii_scrub_text((const char *)text, *n, *mode, *types, key, keylen, &c, &sn);
    double dt = timer_now() - t0;
    mtCheck(sc != NULL, "out of memory scrubbing the input");
    if (key) {
        memset(key, 0, keylen);
        free(key);
    }
    free(text);
    uint64_t total = 0;
    for (int t = 0; t < PII_NTYPES; t++)
        total += c.found[t];
    char *js = pii_report_json(&c, *mode, *types, dt);
    char *rp = fs_join_alloc(out, "pii_report.json");
    mtCheck(js != NULL, "out of memory");
    if (fs_write_atomic(rp, js, strlen(js), err, sizeof(err)) != 0)
        mt_fail("prepare: %s", err);
    printf("prepare: scrub-pii  %s: %llu matches, %zu -> %zu bytes (%.0f MB/s), report -> %s\n",
           pii_mode_name(*mode), (unsigned long long)total, *n, sn,
           dt > 0 ? (double)*n / 1e6 / dt : 0.0, rp);
    free(js);
    free(rp);
    if (sn == 0)
        mt_fail("prepare: nothing is left of the input after --scrub-pii %s", mode_s);
    *n = sn;
    return (uint8_t *)sc;
}

/* --shard-tokens: the train split again as shards of n tokens (train_000.bin .. ), replacing the
 * one prepare_write wrote. Returns how many. */
static int write_train_shards(const char *out, const uint32_t *ids, size_t ntrain, size_t n, int V) {
    int k = 0;
    char err[1024];
    for (size_t off = 0; off < ntrain; off += n, k++) {
        char name[32];
        snprintf(name, sizeof(name), "train_%03d.bin", k);
        char *path = fs_join_alloc(out, name);
        size_t len = ntrain - off < n ? ntrain - off : n;
        if (data_write_shard(path, ids + off, len, V, err, sizeof(err)) != 0)
            mt_fail("prepare: %s", err);
        free(path);
    }
    return k;
}

/* --out s3://...: upload the staging directory's shards and tokenizer, index.json last, then
 * remove the staging directory. */
static void upload(const char *url, const char *stage, size_t ntrain, size_t nval,
                   size_t shard_tokens, int nshards, int V) {
    objstore_shard *sh = callocCheck((size_t)nshards + 1, sizeof(*sh));
    for (int k = 0; k < nshards; k++) {
        snprintf(sh[k].name, sizeof(sh[k].name), "train_%03d.bin", k);
        snprintf(sh[k].split, sizeof(sh[k].split), "train");
        size_t off = (size_t)k * shard_tokens;
        sh[k].tokens = (int64_t)(nshards == 1 ? ntrain
                                              : (ntrain - off < shard_tokens ? ntrain - off
                                                                             : shard_tokens));
        sh[k].version = V <= 65536 ? 1 : 2;
    }
    snprintf(sh[nshards].name, sizeof(sh[nshards].name), "val_000.bin");
    snprintf(sh[nshards].split, sizeof(sh[nshards].split), "val");
    sh[nshards].tokens = (int64_t)nval;
    sh[nshards].version = V <= 65536 ? 1 : 2;
    s3_config cfg;
    s3_config_default(&cfg);
    char err[1024];
    if (objstore_dataset_upload(&cfg, url, stage, sh, nshards + 1, "tokenizer.bin", err,
                                sizeof(err)) != 0)
        mt_fail("prepare: %s", err);
    fs_remove_tree(stage, err, sizeof(err));
    free(sh);
}

/* --out must not be a run directory (its tokenizer.bin would be replaced under the run) nor lie
 * in a checkpoint (a directory holding manifest.json) or a run's checkpoint tier root RUN/ckpt:
 * the rule fs_check_output applies to outputs that are files, for this output directory. */
static void check_out_dir(const char *out) {
    char real[FS_PATH_MAX], p[FS_PATH_MAX + 32];
    struct stat st;
    char up[FS_PATH_MAX];
    snprintf(up, sizeof(up), "%s", out);
    int exists = 1;
    while (realpath(up, real) == NULL) { /* not there yet: its nearest existing ancestor */
        exists = 0;
        char *cut = strrchr(up, '/');
        if (cut == up) return; /* "/x": the root exists */
        if (cut == NULL) snprintf(up, sizeof(up), "."); /* "x": the current directory */
        else *cut = '\0';
    }
    snprintf(p, sizeof(p), "%s/run.db", real);
    if (exists && stat(p, &st) == 0)
        mt_fail("prepare: --out %s is a run directory (it holds run.db): its tokenizer.bin would "
                "be replaced; prepare into a directory of its own", out);
    for (char *slash = real + strlen(real); slash > real; slash = strrchr(real, '/')) {
        *slash = '\0'; /* real is now each ancestor in turn (the first pass: out itself) */
        snprintf(p, sizeof(p), "%s/manifest.json", real);
        if (stat(p, &st) == 0)
            mt_fail("prepare: --out %s lies inside the checkpoint %s (its files are verified by "
                    "their checksums); prepare elsewhere", out, real);
        const char *base = strrchr(real, '/');
        snprintf(p, sizeof(p), "%s/../run.db", real);
        if (base && !strcmp(base, "/ckpt") && stat(p, &st) == 0)
            mt_fail("prepare: --out %s lies inside the checkpoint tier %s; prepare elsewhere", out,
                    real);
    }
}

/* The whole input file (one clear line and exit 2 when it is missing, not a regular file or
 * empty). */
static uint8_t *read_input(const char *input, size_t *n) {
    struct stat st;
    if (stat(input, &st) != 0)
        mt_fail("prepare: cannot read input '%s': %s", input, strerror(errno));
    if (!S_ISREG(st.st_mode))
        mt_fail("prepare: input '%s' is not a regular file", input);
    if (st.st_size == 0)
        mt_fail("prepare: input '%s' is empty", input);
    size_t nbytes = (size_t)st.st_size;
    FILE *fin = fopenCheck(input, "rb");
    uint8_t *text = mallocCheck(nbytes);
    freadCheck(text, 1, nbytes, fin);
    fcloseCheck(fin);
    *n = nbytes;
    return text;
}

/* The tokenizer: a tokenizer file to encode with (kind, is_file), BPE trained on text[0..n) with
 * vocab ids (is_bpe), else the byte tokenizer. pmode is the --scrub-pii mode (NULL: no scrub):
 * after a scrub, BPE builds each placeholder (or "<TYPE:" of a hash token) of ptypes as one token
 * with its first merges. A tokenizer that cannot encode, or a vocabulary too small for the
 * placeholders, is a user error (exit 2). */
static void make_tokenizer(tok_tokenizer *tok, const char *kind, int is_file, int is_bpe,
                           long long vocab, const uint8_t *text, size_t n, const pii_mode *pmode,
                           unsigned ptypes) {
    char err[1024];
    if (is_file) {
        if (tok_load(tok, kind, err, sizeof(err)) != 0) mt_fail("prepare: %s", err);
        if (!tok_can_encode(tok))
            mt_fail("prepare: tokenizer '%s' is %s: it holds no merges, so it cannot encode (give "
                    "a tiktoken rank file or Hugging Face tokenizer.json / vocab.json + merges.txt)",
                    kind, tok_describe(tok, err, sizeof(err)));
    } else if (is_bpe) {
        char atoms[PII_NTYPES][24];
        const char *atomp[PII_NTYPES];
        int natoms = 0;
        for (int t = 0; pmode && *pmode != PII_DROP_LINE && t < PII_NTYPES; t++) {
            if (!(ptypes & (1u << t)))
                continue;
            const char *ph = pii_type_placeholder((pii_type)t);
            snprintf(atoms[natoms], sizeof(atoms[natoms]), "%.*s", (int)strlen(ph) - 1, ph);
            strcat(atoms[natoms], *pmode == PII_HASH ? ":" : ">");
            atomp[natoms] = atoms[natoms];
            natoms++;
        }
        if (tok_train_bpe_atomic(tok, text, n, (int)vocab, atomp, natoms, 1) != 0)
            mt_fail("prepare: --vocab-size %lld is too small to hold the PII placeholders as "
                    "tokens (needs about %d more than 256)",
                    vocab, 6 * natoms);
    } else {
        tok_init_byte(tok);
    }
}

/* The flags of `minitrain prepare`, and what the tokenizer flag names (is_bpe, is_file). */
typedef struct {
    const char *scrub, *pii_types, *keyfile, *input, *out, *kind, *docsep_arg;
    long long vocab, shard_tokens;
    double valf;
    int is_bpe, is_file;
} prep_args;

/* Step 1: the option table and its parse (a bare --scrub-pii given its default mode first);
 * ARGS_CONTINUE or the exit code (--help, bad flag). */
static int parse_prepare_args(prep_args *a, int argc, char **argv) {
    *a = (prep_args){.pii_types = "all", .kind = "byte", .vocab = -1, .valf = 0.1};
    char **args = default_scrub_mode(&argc, argv);
    char vocab_help[128];
    snprintf(vocab_help, sizeof(vocab_help), "bpe: 257..%d (default %d); byte: 256 only",
             PREP_MAX_VOCAB, PREP_DEFAULT_BPE_VOCAB);
    const args_opt opts[] = {
        {"input", KEYTAB_STRING, &a->input, 0, 0, "FILE", "text to tokenize (any bytes)", ""},
        {"out", KEYTAB_STRING, &a->out, 0, 0, "DIR", "output directory (created if missing), or "
         "s3://bucket/prefix: the\nfiles plus index.json (tokens, SHA-256 per shard) uploaded "
         "to an\nobject store (AWS_* credentials; docs/storage.md)", ""},
        {"shard-tokens", KEYTAB_I64, &a->shard_tokens, 0, 2e9, "N", "cut the train split into "
         "shards of N tokens (train_000.bin,\ntrain_001.bin, ...; default 0: one shard)", ""},
        {"tokenizer", KEYTAB_STRING, &a->kind, 0, 0, "KIND", "byte (default: 256 ids, one per byte) or "
         "bpe (byte-level BPE\ntrained on FILE), or a tokenizer FILE to encode with: GPT-2's as a\n"
         "tiktoken rank file, Hugging Face tokenizer.json or vocab.json +\nmerges.txt, or any "
         "minitrain tokenizer.bin (docs/interop.md);\nDIR/tokenizer.bin is its minitrain copy", ""},
        {"doc-separator", KEYTAB_STRING, &a->docsep_arg, 0, 0, "TEXT", "with a tokenizer that has "
         "<|endoftext|>: cut the input into\ndocuments after each TEXT (escapes \\n \\t \\\\), "
         "each preceded\nby <|endoftext|> (llm.c's dev/data scripts); default: one document", ""},
        {"vocab-size", KEYTAB_I64, &a->vocab, -1e18, 1e18, "N", vocab_help, ""},
        {"val-fraction", KEYTAB_DOUBLE, &a->valf, -INFINITY, INFINITY, "F", "share of tokens (the last "
         "ones) kept for validation,\n0 < F <= 0.5", NULL},
        {"scrub-pii", KEYTAB_STRING, &a->scrub, 0, 0, "[MODE]", "scrub PII before tokenizing: mask "
         "(the default when MODE is left\nout), hash or drop-line (see minitrain scrub --help); "
         "the counts go\nto DIR/pii_report.json; a bpe tokenizer keeps each placeholder\nwhole "
         "(one token)", ""},
        {"pii-types", KEYTAB_STRING, &a->pii_types, 0, 0, "LIST", "with --scrub-pii: all, or a comma "
         "list (email,phone,card,...)", "all"},
        {"hash-key-file", KEYTAB_STRING, &a->keyfile, 0, 0, "FILE", "with --scrub-pii hash: the HMAC key",
         ""},
        {0},
    };
    const args_spec spec = {
        .cmd = "prepare",
        .synopsis = "usage: minitrain prepare --input FILE --out DIR [options]",
        .about = "Tokenize a text file and write DIR/tokenizer.bin, DIR/train_000.bin, "
                 "DIR/val_000.bin\n(llm.c token shards: 256 x int32 header, then uint16 tokens).",
        .opts = opts,
    };
    int prc = args_parse(&spec, argc, args, NULL);
    free(args);
    return prc;
}

/* Step 2: the flags that go together, the tokenizer kind and its --vocab-size (bpe's default
 * filled in), --val-fraction in (0, 0.5]; a user error (exit 2) otherwise. */
static void check_prepare_args(prep_args *a) {
    if (a->scrub == NULL && (a->keyfile != NULL || strcmp(a->pii_types, "all") != 0))
        mt_fail("prepare: --pii-types and --hash-key-file go with --scrub-pii");
    if (a->input == NULL)
        mt_fail("prepare: --input FILE is required (see minitrain prepare --help)");
    if (a->out == NULL)
        mt_fail("prepare: --out DIR is required (see minitrain prepare --help)");
    a->is_bpe = strcmp(a->kind, "bpe") == 0;
    a->is_file = !a->is_bpe && strcmp(a->kind, "byte") != 0; /* a tokenizer file to encode with */
    struct stat st;
    if (a->is_file && stat(a->kind, &st) != 0)
        mt_fail("prepare: --tokenizer '%s' is neither byte, bpe nor a tokenizer file", a->kind);
    if (a->is_file) {
        if (a->vocab >= 0)
            mt_fail("prepare: --vocab-size is for --tokenizer bpe; a tokenizer file has its own");
    } else if (a->is_bpe) {
        if (a->vocab < 0)
            a->vocab = PREP_DEFAULT_BPE_VOCAB;
        if (a->vocab < 257 || a->vocab > PREP_MAX_VOCAB)
            mt_fail("prepare: --vocab-size %lld out of range for bpe (257..%d)", a->vocab,
                    PREP_MAX_VOCAB);
    } else if (a->vocab >= 0 && a->vocab != 256) {
        mt_fail("prepare: --vocab-size %lld is invalid for the byte tokenizer (always 256; use "
                "--tokenizer bpe for other sizes)",
                a->vocab);
    }
    if (!(a->valf > 0.0 && a->valf <= 0.5))
        mt_fail("prepare: --val-fraction %g must be in (0, 0.5]", a->valf);
}

int cmd_prepare(int argc, char **argv) {
    prep_args a;
    int prc = parse_prepare_args(&a, argc, argv);
    if (prc != ARGS_CONTINUE) return prc;
    check_prepare_args(&a);

    const char *url = NULL; /* --out s3://...: prepared in a staging directory, then uploaded */
    char stage[64] = "";
    if (strncmp(a.out, "s3://", 5) == 0) {
        url = a.out;
        snprintf(stage, sizeof(stage), "/tmp/mt_prepare_XXXXXX");
        if (!mkdtemp(stage)) mt_fail("prepare: cannot make a staging directory under /tmp");
        a.out = stage;
    }
    check_out_dir(a.out);
    size_t nbytes;
    uint8_t *text = read_input(a.input, &nbytes);
    char why[FS_PATH_MAX + 64]; /* fs_mkdir_p's own words: "'X' exists and is not a directory" */
    if (fs_mkdir_p(a.out, why, sizeof(why)) != 0)
        mt_fail("prepare: cannot create output directory: %s", why);
    pii_mode pmode = PII_MASK;
    unsigned ptypes = 0;
    size_t input_bytes = nbytes;
    if (a.scrub)
        text = scrub_text(text, &nbytes, a.scrub, a.pii_types, a.keyfile, a.out, &pmode, &ptypes);

    /* tokenizer */
    tok_tokenizer tok;
    double t0 = timer_now();
    char err[1024];
    make_tokenizer(&tok, a.kind, a.is_file, a.is_bpe, a.vocab, text, nbytes,
                   a.scrub ? &pmode : NULL, ptypes);
    double t_train = timer_now() - t0;
    int V = tok_vocab_size(&tok);
    char *docsep = a.docsep_arg ? strdup(a.docsep_arg) : NULL;
    size_t seplen = docsep ? unescape(docsep) : 0;
    if (docsep && (seplen == 0 || tok_eot(&tok) < 0))
        mt_fail("prepare: --doc-separator needs a non-empty TEXT and a tokenizer with "
                "<|endoftext|> (GPT-2's)");

    /* encode and split */
    t0 = timer_now();
    size_t ntok;
    uint32_t *ids = tok_encode_documents(&tok, text, nbytes, (const uint8_t *)docsep, seplen, &ntok);
    double t_enc = timer_now() - t0;
    size_t ntrain, nval;
    if (prepare_split(ntok, a.valf, &ntrain, &nval) != 0)
        mt_fail("prepare: input '%s' gives only %zu tokens; need at least 4 (2 for train, 2 "
                "for val)",
                a.input, ntok);

    /* write */
    prepare_paths pp;
    if (prepare_write(a.out, &tok, ids, ntrain, nval, &pp, err, sizeof(err)) != 0)
        mt_fail("prepare: %s", err);
    int nshards = a.shard_tokens > 0
                      ? write_train_shards(a.out, ids, ntrain, (size_t)a.shard_tokens, V)
                      : 1;
    if (url) upload(url, stage, ntrain, nval, (size_t)a.shard_tokens, nshards, V);

    printf("prepare: input      %s (%zu bytes)\n", a.input, input_bytes);
    char desc[128];
    printf("prepare: tokenizer  %s, vocab %d%s (%.2f s)\n", tok_describe(&tok, desc, sizeof(desc)), V,
           a.is_bpe && V < a.vocab ? " (stopped early: no pair repeats)" : "", t_train);
    printf("prepare: tokens     %zu (%.3f bytes/token), encoded in %.2f s\n", ntok,
           (double)nbytes / (double)ntok, t_enc);
    printf("prepare: train      %zu tokens -> %s%s\n", ntrain, url ? url : pp.train_path,
           nshards > 1 ? " (and the shards after it)" : "");
    printf("prepare: val        %zu tokens -> %s\n", nval, url ? url : pp.val_path);
    printf("prepare: tokenizer  -> %s\n", url ? url : pp.tok_path);
    prepare_paths_free(&pp);
    free(ids);
    free(text);
    free(docsep);
    tok_free(&tok);
    return MT_EXIT_OK;
}
