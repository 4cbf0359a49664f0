/*
 * train/cmd_sample.c — `minitrain sample`: generate text from a trained run with a KV cache.
 *
 * The prompt is encoded with the run's tokenizer and fed token by token into the decode state
 * (each prompt token costs one cached step, the prefix is never recomputed); generated tokens are
 * written to stdout as soon as they are chosen.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "train/model_io.h"
#include "train/sample.h"
#include "train/tokenizer.h"

static void usage(void) {
    printf("usage: minitrain sample --run DIR [--prompt TEXT] [--max-tokens N] [--temperature T]\n"
           "                        [--top-k K] [--top-p P] [--seed S]\n\n"
           "Generate text from the run in DIR: its newest checkpoint that verifies (DIR/ckpt) if\n"
           "that is newer than DIR/model.safetensors, else DIR/model.safetensors; DIR/tokenizer.bin.\n"
           "  --prompt TEXT      text to continue (default: a newline)\n"
           "  --max-tokens N     tokens to generate (default 256; past the context, the last\n"
           "                     context/2 tokens are re-read as a fresh context)\n"
           "  --temperature T    0 = greedy, default 1.0 (range 0..10)\n"
           "  --top-k K          keep the K most likely tokens (default 0 = all)\n"
           "  --top-p P          nucleus sampling threshold in (0, 1] (default 1)\n"
           "  --seed S           random seed (default 1337)\n");
}

static double parse_num(const char *flag, const char *s, double lo, double hi) {
    char *end;
    double v = strtod(s, &end);
    if (*s == 0 || *end != 0 || !isfinite(v)) mt_fail("%s needs a number, got '%s'", flag, s);
    if (v < lo || v > hi) mt_fail("%s = %s is out of range [%g, %g]", flag, s, lo, hi);
    return v;
}

int train_cmd_sample(int argc, char **argv) {
    const char *run = NULL, *prompt = "\n";
    int max_tokens = 256;
    unsigned long long seed = 1337;
    sample_params sp = {1.0f, 0, 1.0f};
    static struct option opts[] = {{"run", required_argument, 0, 'r'},
                                   {"prompt", required_argument, 0, 'p'},
                                   {"max-tokens", required_argument, 0, 'n'},
                                   {"temperature", required_argument, 0, 't'},
                                   {"top-k", required_argument, 0, 'k'},
                                   {"top-p", required_argument, 0, 'P'},
                                   {"seed", required_argument, 0, 's'},
                                   {"help", no_argument, 0, 'h'},
                                   {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'r': run = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n': max_tokens = (int)parse_num("--max-tokens", optarg, 0, 1e9); break;
        case 't': sp.temperature = (float)parse_num("--temperature", optarg, 0, 10); break;
        case 'k': sp.top_k = (int)parse_num("--top-k", optarg, 0, 1e9); break;
        case 'P': sp.top_p = (float)parse_num("--top-p", optarg, 1e-6, 1); break;
        case 's': seed = (unsigned long long)parse_num("--seed", optarg, 0, 1.8e19); break;
        case 'h': usage(); return MT_EXIT_OK;
        default:
            mt_fail("unknown or incomplete option '%s' (see `minitrain sample --help`)",
                    argv[optind - 1]);
        }
    }
    if (optind < argc) mt_fail("unexpected argument '%s'", argv[optind]);
    if (!run) mt_fail("--run DIR is required (a directory written by `minitrain train`)");

    char err[1024], path[1100];
    gpt_model m;
    if (model_io_load(&m, run, NULL, err, sizeof(err)) != 0) mt_fail("%s", err);
    tok_tokenizer tok;
    snprintf(path, sizeof(path), "%s/tokenizer.bin", run);
    if (tok_load(&tok, path, err, sizeof(err)) != 0) mt_fail("%s", err);
    int V = m.cfg.vocab_size, ctx = m.cfg.seq_len, tv = tok_vocab_size(&tok);

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

    gpt_decode_state st;
    gpt_decode_init(&st, &m);
    rng_state rng;
    rng_seed(&rng, seed);
    float *work = mallocCheck((size_t)2 * V * sizeof(float));
    fwrite(prompt, 1, plen, stdout);
    /* history of every token, so generation can go past the context: when the cache is full,
     * the last ctx/2 tokens are fed again as a fresh context (a recompute, once per ctx/2). */
    int *hist = mallocCheck(((size_t)n + (size_t)max_tokens + 1) * sizeof(int));
    size_t nh = 0;
    const float *logits = NULL;
    for (size_t i = 0; i < n; i++) logits = gpt_decode_step(&m, &st, hist[nh++] = (int)ids[i]);
    for (int i = 0; i < max_tokens; i++) {
        int t = sample_token(logits, tv < V ? tv : V, &sp, &rng, work);
        hist[nh++] = t;
        size_t bl;
        const uint8_t *b = tok_token_bytes(&tok, (uint32_t)t, &bl);
        fwrite(b, 1, bl, stdout);
        fflush(stdout);
        if (i + 1 == max_tokens) break;
        if (st.pos == ctx) {
            gpt_decode_reset(&st);
            size_t keep = (size_t)ctx / 2;
            for (size_t j = nh - keep; j < nh - 1; j++) gpt_decode_step(&m, &st, hist[j]);
        }
        logits = gpt_decode_step(&m, &st, t);
    }
    free(hist);
    fputc('\n', stdout);
    free(work);
    free(ids);
    gpt_decode_free(&st);
    tok_free(&tok);
    gpt_free(&m);
    return MT_EXIT_OK;
}
