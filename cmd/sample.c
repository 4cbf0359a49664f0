/*
 * cmd/sample.c — `minitrain sample`: generate text from a trained run with a KV cache.
 *
 * The prompt is encoded with the run's tokenizer and continued by sample_generate (model/sample.h:
 * a KV cache, the prefix never recomputed); generated tokens are written to stdout as soon as
 * they are chosen.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/args.h"
#include "cmd/cmd.h"
#include "core/check.h"
#include "core/rng.h"
#include "model/model_io.h"
#include "ops/ops.h"
#include "model/sample.h"
#include "text/tokenizer.h"

/* Write a generated token's bytes as soon as it is chosen. */
static void emit_token(int token, void *user) {
    size_t len;
    const uint8_t *b = tok_token_bytes(user, (uint32_t)token, &len);
    fwrite(b, 1, len, stdout);
    fflush(stdout);
}

/* The most tokens one `sample` generates: past the context it slides on without end, so the bound
 * is what a person would read (about 4 MB of text, minutes on a CPU), not the model's limit. */
#define SAMPLE_MAX_TOKENS 1000000

int cmd_sample(int argc, char **argv) {
    const char *run = NULL, *prompt = "\n", *device = "cpu";
    int max_tokens = 256, top_k = 0;
    unsigned long long seed = 1337;
    double temperature = 1.0, top_p = 1.0;
    const args_opt opts[] = {
        {"run", KEYTAB_STRING, &run, 0, 0, "DIR", "run directory written by `minitrain train`", ""},
        {"prompt", KEYTAB_STRING, &prompt, 0, 0, "TEXT", "text to continue (default: a newline)", ""},
        {"max-tokens", KEYTAB_INT, &max_tokens, 1, SAMPLE_MAX_TOKENS, "N", "tokens to generate, 1.."
         "1000000 (default 256; past the context,\nthe last context/2 tokens are re-read as a "
         "fresh context)", ""},
        {"temperature", KEYTAB_DOUBLE, &temperature, 0, 10, "T", "0 = greedy, range 0..10", NULL},
        {"top-k", KEYTAB_INT, &top_k, 0, 1e9, "K", "keep the K most likely tokens (0 = all)", NULL},
        {"top-p", KEYTAB_DOUBLE, &top_p, 1e-6, 1, "P", "nucleus sampling threshold in (0, 1]", NULL},
        {"seed", KEYTAB_U64, &seed, 0, 1.8e19, "S", "random seed", NULL},
        {"device", KEYTAB_STRING, &device, 0, 0, "NAME", "cpu | guard | cuda (GPU=1 builds); env "
         "MINITRAIN_DEVICE overrides", NULL},
        {0},
    };
    const args_spec spec = {
        .cmd = "sample",
        .synopsis = "usage: minitrain sample --run DIR [--prompt TEXT] [--max-tokens N] "
                    "[--temperature T]\n                        [--top-k K] [--top-p P] [--seed S]",
        .about = "Generate text from the run in DIR: its newest checkpoint that verifies "
                 "(DIR/ckpt) if\nthat is newer than DIR/model.safetensors, else "
                 "DIR/model.safetensors; DIR/tokenizer.bin.",
        .opts = opts,
    };
    int prc = args_parse(&spec, argc, argv, NULL);
    if (prc != ARGS_CONTINUE) return prc;
    if (!run) mt_fail("--run DIR is required (a directory written by `minitrain train`)");
    sample_params sp = {(float)temperature, top_k, (float)top_p};

    char err[1024], path[1100];
    if (ops_select(device, 0, err, sizeof(err)) != 0) mt_fail("%s", err);
    gpt_model m;
    if (model_io_load(&m, run, NULL, err, sizeof(err)) != 0) mt_fail("%s", err);
    tok_tokenizer tok;
    snprintf(path, sizeof(path), "%s/tokenizer.bin", run);
    if (tok_load(&tok, path, err, sizeof(err)) != 0) mt_fail("%s", err);
    int ctx = m.cfg.seq_len, tv = tok_vocab_size(&tok);

    size_t plen = strlen(prompt);
    uint32_t *ids = mallocCheck((plen + 1) * sizeof(uint32_t));
    size_t n = tok_encode(&tok, (const uint8_t *)prompt, plen, ids);
    if (!tok_can_encode(&tok))
        mt_fail("%s is llm.c's decode-only tokenizer (no merges): it cannot encode the prompt; "
                "import the run with a tiktoken or Hugging Face tokenizer (docs/interop.md)", path);
    if (n == 0) mt_fail("the prompt is empty after encoding");
    if ((int)n >= ctx)
        mt_fail("the prompt is %zu tokens; the model's context is %d (prompt must be shorter)", n,
                ctx);

    rng_state rng;
    rng_seed(&rng, seed);
    fwrite(prompt, 1, plen, stdout);
    sample_generate(&m, ids, n, max_tokens, tv, &sp, &rng, emit_token, &tok);
    fputc('\n', stdout);
    free(ids);
    tok_free(&tok);
    gpt_free(&m);
    return MT_EXIT_OK;
}
