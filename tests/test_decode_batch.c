/*
 * tests/test_decode_batch.c — continuous batching (model/decode_batch.c) against the one-token
 * decoder it must agree with: several generations with different prompts, fed as prefill chunks
 * of uneven sizes beside single decode tokens of others, give the logits gpt_decode_step gives
 * each of them alone (to float rounding of the GEMM), for a dense and a MoE model.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model/model.h"

#define NSEQ 5
#define LEN 40

static void build(gpt_model *m, int moe_every) {
    gpt_config cfg = {.n_layer = 3, .n_head = 4, .d_model = 64, .seq_len = 64, .vocab_size = 300,
                      .moe_every = moe_every, .n_experts = moe_every ? 4 : 0,
                      .top_k = moe_every ? 2 : 0, .capacity_factor = 2.0f};
    char err[256];
    assert_int_equal(gpt_build(m, &cfg, err, sizeof(err)), 0);
    gpt_init_weights(m, 11);
}

/* Feed NSEQ token streams through gpt_decode_batch in a schedule where each step gives sequence
 * s a chunk of 1 + (step + s) % 7 tokens (sequences start at different steps), and compare the
 * logits after every chunk with the one-token decoder's at the same position. */
static void check_model(int moe_every) {
    gpt_model m;
    build(&m, moe_every);
    const int V = m.cfg.vocab_size;
    int toks[NSEQ][LEN];
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < LEN; i++) toks[s][i] = (i * 31 + s * 17 + i * i * s) % V;
    /* reference: every position's logits, one token at a time */
    float *ref = malloc((size_t)NSEQ * LEN * V * sizeof(float));
    gpt_decode_state one;
    gpt_decode_init(&one, &m);
    for (int s = 0; s < NSEQ; s++) {
        gpt_decode_reset(&one);
        for (int i = 0; i < LEN; i++)
            memcpy(ref + ((size_t)s * LEN + i) * V, gpt_decode_step(&m, &one, toks[s][i]),
                   (size_t)V * sizeof(float));
    }
    gpt_decode_free(&one);

    gpt_decode_state st[NSEQ];
    for (int s = 0; s < NSEQ; s++) gpt_decode_init(&st[s], &m);
    gpt_batch *b = gpt_batch_create(&m, NSEQ * 7, NSEQ);
    double worst = 0;
    int checked = 0;
    for (int step = 0;; step++) {
        gpt_decode_state *sp[NSEQ];
        const int *tp[NSEQ];
        int n_tok[NSEQ], who[NSEQ], n = 0;
        for (int s = 0; s < NSEQ; s++) {
            int left = LEN - st[s].pos;
            if (step < s || left == 0) continue; /* joins late / finished */
            int k = 1 + (step + s) % 7;
            n_tok[n] = k < left ? k : left;
            tp[n] = toks[s] + st[s].pos;
            sp[n] = &st[s];
            who[n++] = s;
        }
        if (n == 0) break;
        gpt_decode_batch(&m, b, sp, tp, n_tok, n);
        for (int i = 0; i < n; i++) {
            int s = who[i], pos = st[s].pos - 1; /* logits after the chunk's last token */
            const float *want = ref + ((size_t)s * LEN + pos) * V;
            double scale = 0;
            for (int v = 0; v < V; v++) scale = fmax(scale, fabs(want[v]));
            for (int v = 0; v < V; v++) {
                double d = fabs(st[s].logits[v] - want[v]) / (scale + 1e-6);
                if (d > worst) worst = d;
            }
            checked++;
        }
    }
    for (int s = 0; s < NSEQ; s++) assert_int_equal(st[s].pos, LEN);
    printf("  moe_every %d: %d chunks checked, worst |diff| / max|logit| = %.2e\n", moe_every,
           checked, worst);
    assert_true(worst < 1e-5);
    gpt_batch_free(b);
    for (int s = 0; s < NSEQ; s++) gpt_decode_free(&st[s]);
    free(ref);
    gpt_free(&m);
}

static void test_batch_dense(void **state) {
    (void)state;
    check_model(0);
}

static void test_batch_moe(void **state) {
    (void)state;
    check_model(2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_dense),
        cmocka_unit_test(test_batch_moe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
