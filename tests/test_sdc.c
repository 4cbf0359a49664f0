/*
 * tests/test_sdc.c — the silent-corruption check's units (sched/sdc.h): the word hash catches
 * every single flipped bit (checked against every bit of a buffer, not sampled), the parameter
 * hash changes with one flipped bit in any tensor and splits dense from expert tensors, the
 * verdict names the odd rank out of a majority and calls a 1-against-1 split a tie under the
 * layouts the trainer uses (dp, tp x dp, pp x dp, ep), and the bitflip fault spec parses.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/hash.h"
#include "model/model.h"
#include "model/param_hash.h"
#include "sched/fault.h"
#include "sched/sdc.h"

/* hash_words64: flipping any one bit of a buffer changes the hash; so does the length; equal
 * bytes at different alignments hash equal (words are read with memcpy). */
static void test_word_hash(void **state) {
    (void)state;
    enum { N = 203 }; /* not a multiple of 8 or 32: the tail paths run too */
    uint8_t buf[N + 1], shifted[N + 1];
    for (int i = 0; i < N; i++) buf[i] = (uint8_t)(i * 37 + 11);
    uint64_t h0 = hash_words64(buf, N);
    for (int i = 0; i < N; i++)
        for (int b = 0; b < 8; b++) {
            buf[i] ^= (uint8_t)(1u << b);
            uint64_t h = hash_words64(buf, N);
            buf[i] ^= (uint8_t)(1u << b);
            if (h == h0) fail_msg("flipping bit %d of byte %d did not change the hash", b, i);
        }
    assert_true(hash_words64(buf, N - 1) != h0);
    memcpy(shifted + 1, buf, N);
    assert_true(hash_words64(shifted + 1, N) == h0);
    /* not the byte-wise FNV-1a (a different function), and not constant */
    assert_true(h0 != hash_fnv1a64(buf, N));
    assert_true(hash_words64(buf, 0) != h0);
}

/* gpt_params_hash: one bit of any tensor changes the hash of its kind only. */
static void test_param_hash(void **state) {
    (void)state;
    gpt_config cfg = {.n_layer = 2, .n_head = 2, .d_model = 32, .seq_len = 16, .vocab_size = 50,
                      .moe_every = 2, .n_experts = 2, .top_k = 1, .capacity_factor = 2.0f};
    char err[256];
    gpt_model m;
    assert_int_equal(gpt_build(&m, &cfg, err, sizeof(err)), 0);
    gpt_init_weights(&m, 7);
    uint64_t h0[2], h[2];
    gpt_params_hash(&m, h0);
    assert_true(h0[1] != 0); /* the model has experts */
    int dense = 0, expert = 0;
    for (int i = 0; i < m.n_tensors; i++) {
        const gpt_tensor *t = &m.tensors[i];
        float *p = m.params + t->offset + t->numel - 1; /* the last element: the tail path */
        uint32_t u;
        memcpy(&u, p, 4);
        u ^= 1u << 3;
        memcpy(p, &u, 4);
        gpt_params_hash(&m, h);
        u ^= 1u << 3;
        memcpy(p, &u, 4);
        int e = t->expert != 0;
        if (h[e] == h0[e]) fail_msg("a flipped bit of %s left its hash unchanged", t->name);
        if (h[!e] != h0[!e]) fail_msg("a flipped bit of %s changed the other hash", t->name);
        dense += !e;
        expert += e;
    }
    assert_true(dense > 0 && expert > 0);
    gpt_params_hash(&m, h);
    assert_true(h[0] == h0[0] && h[1] == h0[1]); /* restored: equal again */
    assert_int_equal(gpt_tensor_index(&m, m.tensors[3].name), 3);
    assert_int_equal(gpt_tensor_index(&m, "no.such.tensor"), -1);
    gpt_free(&m);
}

/* world ranks' hashes, all equal to (a, e), then rank `odd` (if >= 0) given dense value x */
static void fill(uint64_t *h, int world, int odd, uint64_t x) {
    for (int r = 0; r < world; r++) h[2 * r] = 0xaaaa, h[2 * r + 1] = 0xeeee;
    if (odd >= 0) h[2 * odd] = x;
}

static void test_verdict_dp(void **state) {
    (void)state;
    uint64_t h[2 * 8];
    sdc_verdict v;
    fill(h, 4, -1, 0);
    assert_int_equal(sdc_judge(h, 4, 1, 1, 1, 4, 1, &v), 0);
    assert_int_equal(v.nblame, 0);
    /* dp 4, rank 2 odd: it alone is blamed, no tie */
    fill(h, 4, 2, 0xbad);
    assert_int_equal(sdc_judge(h, 4, 1, 1, 1, 4, 1, &v), 1);
    assert_int_equal(v.nblame, 1);
    assert_int_equal(v.blame[0], 2);
    assert_int_equal(v.tie, 0);
    assert_int_equal(v.groups, 1);
    assert_non_null(strstr(v.text, "rank 2 "));
    assert_non_null(strstr(v.text, "ranks 0,1,3 agree"));
    /* dp 2: one against one is a tie, both named */
    fill(h, 2, 1, 0xbad);
    assert_int_equal(sdc_judge(h, 2, 1, 1, 1, 2, 1, &v), 1);
    assert_int_equal(v.nblame, 2);
    assert_int_equal(v.blame[0], 0);
    assert_int_equal(v.blame[1], 1);
    assert_int_equal(v.tie, 1);
    assert_non_null(strstr(v.text, "tie"));
    /* dp 4, 2 against 2: a tie naming all four */
    fill(h, 4, -1, 0);
    h[2 * 1] = h[2 * 3] = 0xbad;
    assert_int_equal(sdc_judge(h, 4, 1, 1, 1, 4, 1, &v), 1);
    assert_int_equal(v.nblame, 4);
    assert_int_equal(v.tie, 1);
    /* dp 1: nothing to compare, whatever the hash */
    fill(h, 1, 0, 0xbad);
    assert_int_equal(sdc_judge(h, 1, 1, 1, 1, 1, 1, &v), 0);
    /* a layout that does not multiply to the world: no verdict */
    assert_int_equal(sdc_judge(h, 4, 1, 1, 1, 3, 1, &v), 0);
}

/* tp 2 x dp 3 (world 6): ranks of different TP shards hold different values by design; only
 * the dp replicas of one shard (rank = tp_rank + 2·dp_rank) are compared. */
static void test_verdict_groups(void **state) {
    (void)state;
    uint64_t h[2 * 8];
    sdc_verdict v;
    for (int r = 0; r < 6; r++) h[2 * r] = 100 + r % 2, h[2 * r + 1] = 0;
    assert_int_equal(sdc_judge(h, 6, 2, 1, 1, 3, 1, &v), 0);
    h[2 * 3] = 7; /* tp 1, dp 1 */
    assert_int_equal(sdc_judge(h, 6, 2, 1, 1, 3, 1, &v), 1);
    assert_int_equal(v.nblame, 1);
    assert_int_equal(v.blame[0], 3);
    assert_non_null(strstr(v.text, "tp 1 pp 0"));
    /* pp 2 x dp 2 (world 4, rank = dp_rank + 2·pp_rank): stage 1's replicas are ranks 2, 3 */
    for (int r = 0; r < 4; r++) h[2 * r] = 200 + r / 2, h[2 * r + 1] = 0;
    assert_int_equal(sdc_judge(h, 4, 1, 1, 2, 2, 1, &v), 0);
    h[2 * 3] = 9;
    assert_int_equal(sdc_judge(h, 4, 1, 1, 2, 2, 1, &v), 1);
    assert_int_equal(v.nblame, 2); /* a tie within stage 1 */
    assert_int_equal(v.blame[0], 2);
    assert_int_equal(v.blame[1], 3);
    assert_non_null(strstr(v.text, "tp 0 pp 1"));
    /* dp 4, ep 2: experts differ between ep ranks (dp_rank % 2) by design; replicas of one
     * expert shard are dp ranks {0, 2} and {1, 3}; the dense hash is shared by all four */
    for (int r = 0; r < 4; r++) h[2 * r] = 300, h[2 * r + 1] = 400 + r % 2;
    assert_int_equal(sdc_judge(h, 4, 1, 1, 1, 4, 2, &v), 0);
    h[2 * 2 + 1] = 5; /* rank 2's experts */
    assert_int_equal(sdc_judge(h, 4, 1, 1, 1, 4, 2, &v), 1);
    assert_int_equal(v.nblame, 2); /* ranks 0 and 2: one against one */
    assert_int_equal(v.blame[0], 0);
    assert_int_equal(v.blame[1], 2);
    assert_non_null(strstr(v.text, "expert"));
    /* the world hash depends on every rank's hashes and on their order */
    uint64_t a[4] = {1, 2, 3, 4}, b[4] = {3, 4, 1, 2};
    assert_true(sdc_world_hash(a, 2) != sdc_world_hash(b, 2));
}

static void test_bitflip_spec(void **state) {
    (void)state;
    fault_spec f;
    char err[256];
    assert_int_equal(fault_parse("bitflip@step=23,rank=1", &f, err, sizeof(err)), 0);
    assert_int_equal(f.kind, FAULT_BITFLIP);
    assert_int_equal(f.step, 23);
    assert_int_equal(f.rank, 1);
    assert_int_equal(f.bit, 10);
    assert_string_equal(f.tensor, "");
    assert_string_equal(fault_kind_name(f.kind), "bitflip");
    assert_int_equal(fault_parse("bitflip@step=5,rank=0,tensor=h.1.attn.c_attn.weight,bit=31", &f,
                                 err, sizeof(err)), 0);
    assert_string_equal(f.tensor, "h.1.attn.c_attn.weight");
    assert_int_equal(f.bit, 31);
    static const char *const bad[][2] = {
        {"bitflip@rank=1", "needs step"},
        {"bitflip@step=3,bit=32", "bit=32 is not a bit index"},
        {"bitflip@step=3,tensor=", "is not a tensor name"},
        {"bitflip@step=3,factor=2", "unknown key 'factor'"},
        {"kill@step=3,tensor=wte", "unknown key 'tensor'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        if (fault_parse(bad[i][0], &f, err, sizeof(err)) != -1 || !strstr(err, bad[i][1]))
            fail_msg("'%s': want an error with '%s', got '%s'", bad[i][0], bad[i][1], err);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_word_hash),
        cmocka_unit_test(test_param_hash),
        cmocka_unit_test(test_verdict_dp),
        cmocka_unit_test(test_verdict_groups),
        cmocka_unit_test(test_bitflip_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
