/*
 * cmd/ckpt.c — `minitrain ckpt ls|verify|export|import`: list, check, export and import the
 * checkpoints of a run (format: docs/formats.md, model/model_ckpt.h; llm.c and Hugging Face:
 * model/interop.h, docs/interop.md).
 *
 * This file parses the options, calls the modules and prints. The tier roots (tier 1 is always
 * RUN_DIR/ckpt; tiers 0 and 2 come from the run.db catalog), a step's catalog state and the newest
 * step that verifies are train/checkpoint.h (checkpoint_catalog_*); the step directories under a
 * root, committed or not, ckpt_list_all (ckpt/ckpt.h); the Hugging Face layout (Conv1D weights
 * transposed, config.json) interop_hf_write and llm.c's interop_llmc_write (model/interop.h).
 * Nothing here trusts a checkpoint: `verify` and `export` run ckpt_verify (sizes, CRC-32C,
 * safetensors structure) first.
 */
#include <dirent.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "ckpt/ckpt.h"
#include "core/check.h"
#include "core/fs.h"
#include "train/checkpoint.h"
#include "model/interop.h"
#include "train/import.h"
#include "model/model.h"
#include "model/model_ckpt.h"

typedef struct {
    const char *run;
    int64_t step; /* -1 = not given */
    const char *out;
    const char *format; /* export: hf | llmc */
    const char *dtype;  /* export --format llmc: fp32 | bf16 */
    checkpoint_catalog cat; /* the run's tier roots and run.db (train/checkpoint.h) */
} ckpt_args;

static const char *const SUB_SYNOPSIS[] = {
    "usage: minitrain ckpt ls --run DIR [--step N]",
    "usage: minitrain ckpt verify --run DIR [--step N]",
    "usage: minitrain ckpt export --run DIR [--step N] [--out FILE] [--format hf|llmc]\n"
    "                             [--dtype fp32|bf16]",
    "usage: minitrain ckpt import --from llmc FILE --out RUN_DIR [--tokenizer FILE]\n"
    "       minitrain ckpt import --from hf DIR --out RUN_DIR [--tokenizer FILE]",
};
static const char *const SUB_ABOUT[] = {
    "List the checkpoints of a run in every tier (0 memory, 1 RUN_DIR/ckpt, 2 durable, 3 object\n"
    "store) with state (committed, corrupt per the catalog, incomplete = a save that never\n"
    "committed; tier 3: archived, from the run.db catalog) and size. Does not verify; see\n"
    "`ckpt verify`.",
    "Check every committed checkpoint (or step N): manifest present, every file's size and\n"
    "CRC-32C, safetensors structure. Exit 0 when all pass, 2 otherwise (each failure names the\n"
    "file).",
    "Merge the shards of the newest verified checkpoint (or step N) into one safetensors file\n"
    "with Hugging Face GPT-2 names and layout (Conv1D weights transposed to (in, out)) plus\n"
    "config.json beside it (GPT2Config keys). --format llmc writes llm.c's model file instead\n"
    "(version 3 fp32, or 5 with --dtype bf16; vocabulary padded to a multiple of 128), which\n"
    "llm.c's trainers load to continue the run.",
    "Turn GPT-2 weights from llm.c (gpt2_124M.bin: version 3 fp32 or 5 bf16; the padded\n"
    "vocabulary is cut to the real one) or Hugging Face (config.json + model.safetensors;\n"
    "Conv1D weights transposed) into a run directory: a verified step-0 checkpoint with fresh\n"
    "optimizer state, run.db, and RUN_DIR/tokenizer.bin when --tokenizer is given (any\n"
    "tokenizer `prepare` reads). Then: sample|serve --run RUN_DIR, train --init-from RUN_DIR.",
};

static void usage_all(void) {
    printf("minitrain ckpt: list, verify, export and import the checkpoints of a run\n\n");
    for (int k = 0; k < 4; k++) printf("%s\n  %s\n", SUB_SYNOPSIS[k], SUB_ABOUT[k]);
}

/* ---- arguments, roots, catalog --------------------------------------------------------------- */

/* Parse `ckpt SUB` options (argv[0] = SUB, k its index in SUB_SYNOPSIS) into a. Returns
 * ARGS_CONTINUE or an exit code (help printed, or a bad flag). */
static int parse_args(ckpt_args *a, int argc, char **argv, int k) {
    const char *sub = argv[0];
    memset(a, 0, sizeof(*a));
    long long step = -1;
    args_opt opts[] = {
        {"run", KEYTAB_STRING, &a->run, 0, 0, "DIR", "run directory (holds ckpt/ and run.db)", ""},
        {"step", KEYTAB_I64, &step, 0, 9.2e18, "N", "only this step (default: every step; export: "
         "the newest that\nverifies)", ""},
        {"out", KEYTAB_STRING, &a->out, 0, 0, "FILE", "the file to write (default "
         "DIR/hf/model.safetensors, llmc:\nDIR/llmc/model.bin or model_bf16.bin)", ""},
        {"format", KEYTAB_STRING, &a->format, 0, 0, "FMT", "hf (Hugging Face safetensors + "
         "config.json) or llmc (llm.c's\nmodel file)", "hf"},
        {"dtype", KEYTAB_STRING, &a->dtype, 0, 0, "T", "--format llmc: fp32 (version 3) or bf16 "
         "(version 5, round to\nnearest even)", "fp32"},
        {0},
    };
    if (k != 2) opts[2].name = NULL; /* --out, --format, --dtype belong to export only */
    char cmd[32];
    snprintf(cmd, sizeof(cmd), "ckpt %s", sub);
    const args_spec spec = {.cmd = cmd, .synopsis = SUB_SYNOPSIS[k], .about = SUB_ABOUT[k],
                            .opts = opts};
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    a->step = step;
    if (a->run == NULL) mt_fail("`minitrain ckpt %s` needs --run DIR", sub);
    if (a->format && strcmp(a->format, "hf") && strcmp(a->format, "llmc"))
        mt_fail("--format '%s': expected hf or llmc", a->format);
    if (a->dtype && (!a->format || strcmp(a->format, "llmc")))
        mt_fail("--dtype applies to --format llmc only");
    if (a->dtype && strcmp(a->dtype, "fp32") && strcmp(a->dtype, "bf16"))
        mt_fail("--dtype '%s': expected fp32 or bf16", a->dtype);
    struct stat st;
    if (stat(a->run, &st) != 0 || !S_ISDIR(st.st_mode))
        mt_fail("run directory '%s' does not exist", a->run);
    return ARGS_CONTINUE;
}

static int64_t dir_bytes(const char *dir) {
    int64_t total = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    char path[CKPT_PATH_MAX];
    struct stat st;
    while ((e = readdir(d)) != NULL)
        if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < (int)sizeof(path) &&
            lstat(path, &st) == 0 && S_ISREG(st.st_mode))
            total += st.st_size;
    closedir(d);
    return total;
}

static const char *human(int64_t b, char *buf, size_t len) {
    if (b >= 1000000000) snprintf(buf, len, "%.2f GB", b / 1e9);
    else if (b >= 1000000) snprintf(buf, len, "%.1f MB", b / 1e6);
    else if (b >= 1000) snprintf(buf, len, "%.1f kB", b / 1e3);
    else snprintf(buf, len, "%lld B", (long long)b);
    return buf;
}

static int cmp_i64(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* "ROOT1 or ROOT2 (committed steps: 2, 4)" for an error that names where a step was looked for:
 * every tier root, not only the first (tier 0 in /dev/shm, which a user does not think of). */
static const char *where(const ckpt_args *a, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = '\0';
    for (int r = 0; r < a->cat.n_roots && o < len; r++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", r ? " or " : "", a->cat.roots[r].root);
    int64_t all[64]; /* each step once, though tier 0 and tier 1 both hold it */
    int n_all = 0;
    for (int r = 0; r < a->cat.n_roots; r++) {
        int64_t *steps = NULL;
        int n = 0;
        char msg[256];
        if (ckpt_list(a->cat.roots[r].root, &steps, &n, msg, sizeof(msg)) != 0) continue;
        for (int i = 0; i < n && n_all < 64; i++) {
            int dup = 0;
            for (int j = 0; j < n_all; j++) dup |= all[j] == steps[i];
            if (!dup) all[n_all++] = steps[i];
        }
        free(steps);
    }
    qsort(all, (size_t)n_all, sizeof(all[0]), cmp_i64);
    const char *sep = " (committed steps: ";
    for (int i = 0; i < n_all && o < len; i++, sep = ", ")
        o += (size_t)snprintf(buf + o, len - o, "%s%" PRId64, sep, all[i]);
    if (strcmp(sep, ", ") == 0 && o < len) snprintf(buf + o, len - o, ")");
    return buf;
}

/* ---- ls ---------------------------------------------------------------------------------------- */

static int do_ls(ckpt_args *a) {
    printf("%-4s %-10s %-10s %10s  %s\n", "tier", "step", "state", "size", "path");
    int shown = 0;
    for (int r = 0; r < a->cat.n_roots; r++) {
        const char *root = a->cat.roots[r].root;
        int64_t *steps = NULL;
        int *tmp = NULL, n = 0;
        if (ckpt_list_all(root, &steps, &tmp, &n) != 0) continue;
        for (int i = 0; i < n; i++) {
            if (a->step >= 0 && steps[i] != a->step) continue;
            char dir[CKPT_PATH_MAX], sb[64], cs[32];
            ckpt_step_path(dir, sizeof(dir), root, steps[i], tmp[i] ? ".tmp" : "");
            const char *state = "incomplete";
            if (!tmp[i]) {
                const char *c = checkpoint_catalog_state(&a->cat, dir, cs, sizeof(cs));
                state = c && strcmp(c, "corrupt") == 0 ? "corrupt" : "committed";
            }
            printf("%-4d %-10" PRId64 " %-10s %10s  %s\n", a->cat.roots[r].tier, steps[i], state,
                   human(dir_bytes(dir), sb, sizeof(sb)), dir);
            shown++;
        }
        free(steps);
        free(tmp);
    }
    checkpoint_archived *arch = NULL;
    int n_arch = checkpoint_catalog_archived(&a->cat, &arch);
    for (int i = 0; i < n_arch; i++) {
        if (a->step >= 0 && arch[i].step != a->step) continue;
        char sb[64];
        printf("%-4d %-10" PRId64 " %-10s %10s  %s\n", 3, arch[i].step, "archived",
               arch[i].bytes < 0 ? "?" : human(arch[i].bytes, sb, sizeof(sb)), arch[i].path);
        shown++;
    }
    free(arch);
    if (shown == 0) printf("(no checkpoints under %s)\n", a->cat.roots[0].root);
    return MT_EXIT_OK;
}

/* ---- verify ------------------------------------------------------------------------------------ */

static int do_verify(ckpt_args *a) {
    int checked = 0, failed = 0;
    char msg[2048];
    for (int r = 0; r < a->cat.n_roots; r++) {
        int64_t *steps = NULL;
        int n = 0;
        if (ckpt_list(a->cat.roots[r].root, &steps, &n, msg, sizeof(msg)) != 0) {
            fprintf(stderr, "minitrain: error: %s\n", msg);
            failed++;
            continue;
        }
        for (int i = 0; i < n; i++) {
            if (a->step >= 0 && steps[i] != a->step) continue;
            checked++;
            if (ckpt_verify(a->cat.roots[r].root, steps[i], msg, sizeof(msg)) == 0) {
                printf("ok    tier %d step %-8" PRId64 " %s/step_%08" PRId64 "\n",
                       a->cat.roots[r].tier, steps[i], a->cat.roots[r].root, steps[i]);
            } else {
                printf("FAIL  tier %d step %-8" PRId64 " %s\n", a->cat.roots[r].tier, steps[i],
                       msg);
                fprintf(stderr, "minitrain: error: checkpoint step %" PRId64 " (tier %d): %s\n",
                        steps[i], a->cat.roots[r].tier, msg);
                failed++;
            }
        }
        free(steps);
    }
    if (checked == 0) {
        if (a->step >= 0)
            fprintf(stderr, "minitrain: error: no committed checkpoint of step %" PRId64
                    " in %s\n", a->step, where(a, msg, sizeof(msg)));
        else
            fprintf(stderr, "minitrain: error: no committed checkpoints in %s\n",
                    a->cat.roots[0].root);
        return MT_EXIT_USAGE;
    }
    printf("%d checkpoint(s) checked, %d failed\n", checked, failed);
    return failed ? MT_EXIT_USAGE : MT_EXIT_OK;
}

/* ---- export ------------------------------------------------------------------------------------ */

/* --format llmc: llm.c's model file (model/interop.h). */
static int export_llmc(const ckpt_args *a, gpt_model *m, int step, const char *dir) {
    int bf16 = a->dtype && !strcmp(a->dtype, "bf16");
    char out[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX], msg[2048], sb[64];
    if (a->out) snprintf(out, sizeof(out), "%s", a->out);
    else snprintf(out, sizeof(out), "%.4000s/llmc/model%s.bin", a->run, bf16 ? "_bf16" : "");
    snprintf(tmp, sizeof(tmp), "%s", out);
    if (fs_mkdir_p(dirname(tmp), msg, sizeof(msg)) != 0) mt_fail("%s", msg);
    if (interop_llmc_write(m, out, bf16 ? INTEROP_LLMC_BF16 : INTEROP_LLMC_FP32, msg,
                           sizeof(msg)) != 0) {
        if (m->cfg.moe_every > 0) mt_fail("%s", msg); /* refused before anything is written */
        mt_fail_io("writing %s: %s", out, msg);
    }
    struct stat st;
    printf("exported step %d from %s -> %s (llm.c model file, version %d %s, %s)\n", step, dir,
           out, bf16 ? INTEROP_LLMC_BF16 : INTEROP_LLMC_FP32, bf16 ? "bf16" : "fp32",
           human(stat(out, &st) == 0 ? (int64_t)st.st_size : 0, sb, sizeof(sb)));
    gpt_free(m);
    return MT_EXIT_OK;
}

/* `ckpt import` (argv[0] = "import"): the source is the one word that is not an option. */
static int do_import(int argc, char **argv) {
    const char *from = NULL, *out = NULL, *tok = NULL, *src = NULL;
    const args_opt opts[] = {
        {"from", KEYTAB_STRING, &from, 0, 0, "KIND", "llmc (an llm.c model file) or hf (a Hugging "
         "Face directory\nor .safetensors file with config.json beside it)", ""},
        {"out", KEYTAB_STRING, &out, 0, 0, "RUN_DIR", "the run directory to create (must hold no "
         "checkpoints)", ""},
        {"tokenizer", KEYTAB_STRING, &tok, 0, 0, "FILE", "tokenizer to store as RUN_DIR/tokenizer.bin "
         "(tiktoken, Hugging\nFace, llm.c or minitrain)", ""},
        {0},
    };
    const args_spec spec = {.cmd = "ckpt import", .synopsis = SUB_SYNOPSIS[3],
                            .about = SUB_ABOUT[3], .opts = opts};
    char **rest = callocCheck((size_t)argc + 1, sizeof(char *));
    int n = 0;
    for (int i = 0; i < argc; i++) { /* take the positional source out; the table parses the rest */
        const char *w = argv[i];
        int takes_value = !strcmp(w, "--from") || !strcmp(w, "--out") || !strcmp(w, "--tokenizer");
        if (i > 0 && w[0] != '-' && !src) {
            src = w;
            continue;
        }
        rest[n++] = argv[i];
        if (takes_value && i + 1 < argc) rest[n++] = argv[++i];
    }
    int prc = args_parse(&spec, n, rest, NULL);
    free(rest);
    if (prc != ARGS_CONTINUE) return prc;
    if (!from) mt_fail("`minitrain ckpt import` needs --from llmc FILE or --from hf DIR");
    if (!src)
        mt_fail("`minitrain ckpt import --from %s` needs the %s to import", from,
                strcmp(from, "hf") ? "llm.c model file" : "Hugging Face directory");
    if (!out) mt_fail("`minitrain ckpt import` needs --out RUN_DIR");
    char summary[2600], err[2048];
    if (import_run(from, src, out, tok, summary, sizeof(summary), err, sizeof(err)) != 0)
        mt_fail("%s", err);
    printf("%s\n", summary);
    return MT_EXIT_OK;
}

/* An export goes through the one output rule (checkpoint_catalog_check_output): never the run's
 * own files (`--out DIR/run.db` once turned the run database into a safetensors file), never into
 * a checkpoint (then `ckpt verify` fails), never renamed over /dev/null, a FIFO or a symbolic
 * link. For hf, config.json beside the output is held to the same rule. */
static void export_check_out(const ckpt_args *a) {
    if (!a->out) return;
    char err[2 * CKPT_PATH_MAX], cfg[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX];
    if (checkpoint_catalog_check_output(&a->cat, a->run, a->out, FS_OUT_MAKE_DIR, err, sizeof(err)) < 0)
        mt_fail("ckpt export --out: %s", err);
    if (a->format && !strcmp(a->format, "llmc")) return;
    snprintf(tmp, sizeof(tmp), "%s", a->out);
    snprintf(cfg, sizeof(cfg), "%.4000s/config.json", dirname(tmp));
    if (checkpoint_catalog_check_output(&a->cat, a->run, cfg, FS_OUT_MAKE_DIR, err, sizeof(err)) < 0)
        mt_fail("ckpt export --out: config.json goes beside it: %s", err);
}

static int do_export(ckpt_args *a) {
    export_check_out(a);
    /* newest verified step (or step N) in the fastest tier holding it */
    char dir[CKPT_PATH_MAX] = "", msg[2048], last[2048] = "";
    int64_t best = checkpoint_catalog_newest_verified(&a->cat, a->step, dir, sizeof(dir), last,
                                                      sizeof(last));
    if (best < 0) {
        if (last[0]) mt_fail("no checkpoint to export verifies: %s", last);
        if (a->step >= 0) mt_fail("no committed checkpoint of step %" PRId64 " in %s", a->step,
                                  where(a, msg, sizeof(msg)));
        mt_fail("no committed checkpoints in %s", a->cat.roots[0].root);
    }
    gpt_model m;
    int step = 0;
    if (model_ckpt_load(&m, dir, &step, msg, sizeof(msg)) != 0) mt_fail("%s", msg);
    if (a->format && !strcmp(a->format, "llmc")) return export_llmc(a, &m, step, dir);
    char out[CKPT_PATH_MAX], outdir[CKPT_PATH_MAX];
    if (a->out) snprintf(out, sizeof(out), "%s", a->out);
    else snprintf(out, sizeof(out), "%.4000s/hf/model.safetensors", a->run);
    char tmp[CKPT_PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s", out);
    snprintf(outdir, sizeof(outdir), "%s", dirname(tmp)); /* dirname may modify its argument */
    char werr[CKPT_PATH_MAX + 2100]; /* "writing PATH: why" */
    /* --out passed export_check_out: a failure is the disk's (exit 4), but for an MoE model,
     * which the format cannot hold (refused before anything is written: exit 2) */
    if (interop_hf_write(&m, out, step, werr, sizeof(werr)) != 0) {
        if (m.cfg.moe_every > 0) mt_fail("%s", werr);
        mt_fail_io("%s", werr);
    }
    char sb[64];
    printf("exported step %d from %s -> %s (%s) and %s/config.json\n", step, dir, out,
           human((int64_t)m.num_params * 4, sb, sizeof(sb)), outdir);
    gpt_free(&m);
    return MT_EXIT_OK;
}

int cmd_ckpt(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage_all();
        return argc < 2 ? MT_EXIT_USAGE : MT_EXIT_OK;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "import")) return do_import(argc - 1, argv + 1);
    int k = !strcmp(sub, "ls") ? 0 : !strcmp(sub, "verify") ? 1 : !strcmp(sub, "export") ? 2 : -1;
    if (k < 0) mt_fail("unknown ckpt command '%s' (ls, verify, export or import)", sub);
    ckpt_args a;
    int prc = parse_args(&a, argc - 1, argv + 1, k);
    if (prc != ARGS_CONTINUE) return prc;
    checkpoint_catalog_open(&a.cat, a.run);
    int rc = k == 0 ? do_ls(&a) : k == 1 ? do_verify(&a) : do_export(&a);
    checkpoint_catalog_close(&a.cat);
    return rc;
}
