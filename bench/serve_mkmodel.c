/*
 * bench/serve_mkmodel.c — write a randomly initialised model of any shape as a servable run
 * directory (model.safetensors + a byte-level tokenizer.bin), for bench/bench_serve.sh and
 * tests/run_serve.sh.
 *
 * Decode speed depends on the shape, not on the weights, so a GPT-2 124M-shaped model
 * (12 layers, 12 heads, d_model 768, context 1024, vocab 50257) with GPT-2 initialisation measures
 * serving throughput honestly without training one. The tokenizer is byte-level (256 ids); the
 * server samples only ids the tokenizer can decode, as `minitrain sample` does.
 *
 * usage: serve_mkmodel OUT_DIR N_LAYER N_HEAD D_MODEL SEQ_LEN VOCAB [SEED]
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "model/model.h"
#include "model/model_io.h"
#include "text/tokenizer.h"

int main(int argc, char **argv) {
    if (argc < 7 || argc > 8) {
        fprintf(stderr, "usage: %s OUT_DIR N_LAYER N_HEAD D_MODEL SEQ_LEN VOCAB [SEED]\n"
                        "  e.g. %s /tmp/gpt2 12 12 768 1024 50257   (GPT-2 124M shape)\n",
                argv[0], argv[0]);
        return MT_EXIT_USAGE;
    }
    gpt_config cfg = {.n_layer = atoi(argv[2]), .n_head = atoi(argv[3]), .d_model = atoi(argv[4]),
                      .seq_len = atoi(argv[5]), .vocab_size = atoi(argv[6])};
    uint64_t seed = argc == 8 ? strtoull(argv[7], NULL, 10) : 1337;
    char err[1024], path[2048];
    gpt_model m;
    if (gpt_build(&m, &cfg, err, sizeof(err)) != 0) mt_fail("%s", err);
    gpt_init_weights(&m, seed);
    if (mkdir(argv[1], 0755) != 0 && access(argv[1], W_OK) != 0)
        mt_fail("cannot create output directory '%s'", argv[1]);
    snprintf(path, sizeof(path), "%s/model.safetensors", argv[1]);
    if (model_io_save(&m, path, NULL, 0, err, sizeof(err)) != 0) mt_fail("%s", err);
    tok_tokenizer tok;
    tok_init_byte(&tok);
    snprintf(path, sizeof(path), "%s/tokenizer.bin", argv[1]);
    if (tok_save(&tok, path, err, sizeof(err)) != 0) mt_fail("%s", err);
    printf("wrote %s: %d layers, %d heads, d_model %d, context %d, vocab %d (%.1fM params)\n",
           argv[1], cfg.n_layer, cfg.n_head, cfg.d_model, cfg.seq_len, cfg.vocab_size,
           (double)m.num_params / 1e6);
    tok_free(&tok);
    gpt_free(&m);
    return 0;
}
