/*
 * tests/test_flops.c — FLOPs per token, MFU, the sgemm probe, the peaks (model/flops).
 *
 * flops_per_token is checked against independent counts of N:
 *   (1) the weight shapes of every matmul summed one by one (integers, no formula reuse);
 *   (2) GPT-2 small's published total parameter count, 124,439,808 (Radford et al. 2019 /
 *       Hugging Face "gpt2"; llm.c prints it as num_parameters), minus the parameters that are not
 *       matmul weights (position embedding, biases, LayerNorm), with the tied head counted once;
 *   (3) the tensor table of a model gpt_build really builds, dense and mixture-of-experts: every
 *       2-D/3-D weight except the position embedding, expert weights scaled by top_k / E (a token
 *       runs top_k of the E experts), the tied wte counted as the LM head.
 * The per-rank core share that caps the theoretical peak is checked on layouts worked by hand.
 * The probe and the theoretical peak are machine-dependent: only sanity (positive, finite, or -1
 * with a reason) and self-consistency of the reported assumptions are asserted — timings belong in
 * bench/, not in tests.
 */
#define _GNU_SOURCE /* sched_getaffinity */
#include <math.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cmd/cmd.h"
#include "model/flops.h"
#include "model/model.h"
#include "ops/peak.h"

static gpt_config dense(int L, int d, int T, int V) {
    gpt_config c = {.n_layer = L, .n_head = 1, .d_model = d, .seq_len = T, .vocab_size = V};
    return c;
}

/* N by summing (out, in) shapes of each matmul weight explicitly. */
static int64_t matmul_params_by_shapes(int64_t L, int64_t d, int64_t V) {
    const int64_t shapes[4][2] = {
        {3 * d, d}, /* attn.c_attn   (3C, C) */
        {d, d},     /* attn.c_proj   (C, C)  */
        {4 * d, d}, /* mlp.c_fc      (4C, C) */
        {d, 4 * d}, /* mlp.c_proj    (C, 4C) */
    };
    int64_t n = 0;
    for (int64_t l = 0; l < L; l++)
        for (int k = 0; k < 4; k++) n += shapes[k][0] * shapes[k][1];
    return n + V * d; /* lm_head (V, C) */
}

static void test_gpt2_124m_by_shapes(void **state) {
    (void)state;
    const int64_t L = 12, d = 768, T = 1024, V = 50257;
    int64_t n = matmul_params_by_shapes(L, d, V);
    int64_t want = 6 * n + 12 * L * d * T; /* exact in int64, exact in double (< 2^53) */
    gpt_config c = dense(12, 768, 1024, 50257);
    assert_true(flops_per_token(&c) == (double)want);
    c.n_head = 12; /* heads split d, they do not change the FLOPs */
    assert_true(flops_per_token(&c) == (double)want);
}

/* HFU's recompute FLOPs for GPT-2 124M, by the matmul shapes: full recompute reruns every
 * block's forward (2 FLOPs per weight, no LM head) plus the attention core's forward (QKᵀ and
 * A·V: 2·T·d each per layer); selective reruns only the core. Full adds a third of the blocks'
 * training FLOPs, as Korthikanti et al. 2022 count. */
static void test_recompute_flops(void **state) {
    (void)state;
    const int64_t L = 12, d = 768, T = 1024, V = 50257;
    int64_t blocks = matmul_params_by_shapes(L, d, V) - V * d;
    gpt_config c = dense(12, 768, 1024, 50257);
    assert_true(flops_recompute_per_token(&c, GPT_RECOMPUTE_NONE) == 0);
    assert_true(flops_recompute_per_token(&c, GPT_RECOMPUTE_SELECTIVE) == (double)(4 * L * T * d));
    double full = flops_recompute_per_token(&c, GPT_RECOMPUTE_FULL);
    assert_true(full == (double)(2 * blocks + 4 * L * T * d));
    double train_blocks = (double)(6 * blocks + 12 * L * d * T); /* fwd + bwd of the blocks */
    assert_true(fabs(full / train_blocks - 1.0 / 3.0) < 1e-12);
    c.vocab_size = 0;
    assert_true(flops_recompute_per_token(&c, GPT_RECOMPUTE_FULL) == -1);
}

static void test_gpt2_124m_from_published_total(void **state) {
    (void)state;
    const int64_t L = 12, d = 768, T = 1024, V = 50257;
    const int64_t total = 124439808; /* GPT-2 small, tied wte/lm_head counted once */
    int64_t wpe = T * d;
    int64_t biases_per_layer = 3 * d + d + 4 * d + d; /* c_attn, c_proj, c_fc, mlp.c_proj */
    int64_t ln_per_layer = 2 * (2 * d);               /* ln_1, ln_2: weight + bias */
    int64_t ln_f = 2 * d;
    /* total = wte(V·d) + wpe + L·(matmuls + biases + LN) + ln_f; the head reuses wte, so
     * N (matmuls incl. head) = total - wpe - L·(biases + LN) - ln_f. */
    int64_t n = total - wpe - L * (biases_per_layer + ln_per_layer) - ln_f;
    gpt_config c = dense((int)L, (int)d, (int)T, (int)V);
    assert_true(flops_per_token(&c) == (double)(6 * n + 12 * L * d * T));
}

/* A small, lopsided config: any swap of (L, d, T, V) or a missing term changes the result. */
static void test_small_config_and_n_variant(void **state) {
    (void)state;
    const int64_t L = 3, d = 40, T = 17, V = 301;
    int64_t n = matmul_params_by_shapes(L, d, V);
    gpt_config c = dense(3, 40, 17, 301);
    assert_true(flops_per_token(&c) == (double)(6 * n + 12 * L * d * T));
    assert_true(flops_per_token_n((double)n, 3, 40, 17) == (double)(6 * n + 12 * L * d * T));
    /* bad input */
    c = dense(0, 40, 17, 301);
    assert_true(flops_per_token(&c) == -1);
    c = dense(3, 40, 17, 0);
    assert_true(flops_per_token(&c) == -1);
    c = dense(3, -1, 17, 301);
    assert_true(flops_per_token(&c) == -1);
    c = dense(3, 40, 17, 301);
    c.moe_every = 1; /* MoE without experts */
    assert_true(flops_per_token(&c) == -1);
    assert_true(flops_per_token_n(0, 3, 40, 17) == -1);
}

/* N from the tensors of a built model: every matmul weight (2-D, or 3-D for stacked experts)
 * except the position embedding (a lookup); the tied wte stands for the LM head; an expert tensor
 * (E, ., .) counts top_k / E of its elements, the experts one token runs. Biases and LayerNorms
 * are 1-D (2-D per expert: (E, H)) and not matmuls. */
static double n_from_built_model(const gpt_config *cfg) {
    gpt_model m;
    char err[256];
    assert_int_equal(gpt_build(&m, cfg, err, sizeof(err)), 0);
    double n = 0;
    for (int i = 0; i < m.n_tensors; i++) {
        const gpt_tensor *t = &m.tensors[i];
        if (strcmp(t->name, "wpe.weight") == 0) continue;
        if (t->expert) {
            if (t->ndim == 3) n += (double)t->numel * cfg->top_k / cfg->n_experts;
        } else if (t->ndim == 2) {
            n += (double)t->numel;
        }
    }
    gpt_free(&m);
    return n;
}

static void test_dense_against_built_model(void **state) {
    (void)state;
    gpt_config c = dense(3, 48, 20, 257);
    c.n_head = 4;
    double n = n_from_built_model(&c);
    assert_true(flops_per_token(&c) == 6 * n + 12.0 * 3 * 48 * 20);
}

/* MoE: 4 layers, every 2nd a mixture of 4 experts with top-2 routing. By hand, per MoE layer:
 * attention 4d², router E·d, 2 active experts × (fc 4d·d + proj d·4d); dense layers 12d²; head
 * V·d. The built model's tensor table must agree, and both fix the FLOPs. */
static void test_moe_active_params(void **state) {
    (void)state;
    const int64_t L = 4, d = 32, T = 16, V = 97, E = 4, K = 2, H = 4 * d;
    gpt_config c = dense((int)L, (int)d, (int)T, (int)V);
    c.n_head = 2;
    c.moe_every = 2;
    c.n_experts = (int)E;
    c.top_k = (int)K;
    c.capacity_factor = 1.25f;
    int64_t moe_layer = 4 * d * d + E * d + K * (H * d + d * H);
    int64_t by_hand = 2 * 12 * d * d + 2 * moe_layer + V * d;
    assert_true(n_from_built_model(&c) == (double)by_hand);
    assert_true(flops_per_token(&c) == (double)(6 * by_hand + 12 * L * d * T));
    /* fewer FLOPs than the same model with every expert active, more than a dense one */
    gpt_config all = c;
    all.top_k = (int)E;
    assert_true(flops_per_token(&all) > flops_per_token(&c));
    assert_true(flops_per_token(&c) > flops_per_token(&(gpt_config){.n_layer = 4, .n_head = 2,
                                     .d_model = 32, .seq_len = 16, .vocab_size = 97}));
}

static void test_mfu(void **state) {
    (void)state;
    /* 1e9 FLOP/token × 50 tokens/s on a 200 GFLOP/s peak = 25%. */
    assert_true(fabs(flops_mfu(1e9, 50, 200e9, 1) - 0.25) < 1e-15);
    /* a job of 8 ranks at 25 GFLOP/s each has the same 200 GFLOP/s peak */
    assert_true(fabs(flops_mfu(1e9, 50, 25e9, 8) - 0.25) < 1e-15);
    assert_true(isnan(flops_mfu(1e9, 50, -1, 1))); /* unknown peak stays unknown */
    assert_true(isnan(flops_mfu(1e9, 50, 0, 1)));
    assert_true(isnan(flops_mfu(1e9, 50, 200e9, 0)));
    assert_true(isnan(flops_mfu(1e9, NAN, 200e9, 1)));
}

/* The cores one rank counts: worked by hand for the layouts docs/mfu.md names. */
static void test_rank_cores(void **state) {
    (void)state;
    /* 8 ranks x 1 thread on 2 unbound cores: the job has 2 cores, 0.25 per rank */
    assert_true(peak_rank_cores(1, 2, 2, 8) == 0.25);
    /* 2 ranks bound to one core each (mpirun's default for np <= 2) */
    assert_true(peak_rank_cores(1, 1, 2, 2) == 1.0);
    /* one process, 2 threads, 2 cores; and one thread on 2 cores */
    assert_true(peak_rank_cores(2, 2, 2, 1) == 2.0);
    assert_true(peak_rank_cores(1, 2, 2, 1) == 1.0);
    /* 4 ranks x 8 threads on a 64-core node bound to its 32-core sockets: 8 each */
    assert_true(peak_rank_cores(8, 32, 64, 4) == 8.0);
    assert_true(peak_rank_cores(0, 32, 64, 4) == 16.0); /* no thread limit: the fair share */
    assert_true(peak_rank_cores(1, 2, 2, 0) == 1.0);    /* local_ranks < 1 counts as 1 */
    assert_true(peak_rank_cores(1, 0, 2, 1) == 0);
    /* the theoretical peak scales with that share: 8 ranks count 1/8 of one process's peak */
    char d1[256], d8[256];
    double p1 = peak_theoretical_rank(0, 1, d1, sizeof(d1));
    double p8 = peak_theoretical_rank(0, 8, d8, sizeof(d8));
    if (p1 > 0) {
        assert_non_null(strstr(d8, "8 ranks share"));
        assert_true(p8 <= p1 * (1 + 1e-12)); /* never more than one process alone gets */
        cpu_set_t set; /* unbound (this process may use every CPU online): exactly 1/8 */
        if (sched_getaffinity(0, sizeof(set), &set) == 0 &&
            CPU_COUNT(&set) == sysconf(_SC_NPROCESSORS_ONLN))
            assert_true(fabs(p8 - p1 / 8) <= 1e-9 * p1);
    }
}

static void test_sgemm_probe_sane(void **state) {
    (void)state;
    double r = peak_sgemm_probe_n(1, 0.2, 512);
    assert_true(isfinite(r) && r > 0);
    r = peak_sgemm_probe(0, 0.2);
    assert_true(isfinite(r) && r > 0);
    assert_true(peak_sgemm_probe(1, 0) == -1);
    assert_true(peak_sgemm_probe_n(1, 0.1, 8) == -1);
}

/* The stable probe's bookkeeping: at least two rounds, the returned figure is the maximum round,
 * the spread is (max - min) / max, and a run that stopped on agreement had agreed. */
static void test_sgemm_stable(void **state) {
    (void)state;
    peak_stable st;
    double r = peak_sgemm_stable(1, 1.0, &st);
    assert_true(isfinite(r) && r > 0);
    assert_true(st.rounds >= 2);
    assert_true(r == st.max && st.min <= st.max && st.min > 0);
    assert_true(st.last >= st.min && st.last <= st.max);
    assert_true(fabs(st.spread - (st.max - st.min) / st.max) < 1e-12);
    assert_true(st.best_n == 512 || st.best_n == 1024 || st.best_n == 1536 || st.best_n == 2048);
    assert_true(st.agreed || st.seconds >= 1.0);
    assert_true(peak_sgemm_stable(1, 0, &st) == -1);
    /* read bandwidth: a 64 MiB buffer, between 100 MB/s and 10 TB/s on anything that runs this */
    double bw = peak_bandwidth(1, (size_t)64 << 20, 0.5, &st);
    assert_true(bw > 1e8 && bw < 1e13);
    assert_true(st.rounds >= 2 && bw == st.max && st.best_n == 64);
    assert_true(peak_bandwidth(1, 1000, 0.5, NULL) == -1);
}

/* The per-machine cache: a missing file is a miss, a stored line reads back, malformed lines and
 * other keys are ignored on lookup, junk is dropped and other keys kept on store, "off" disables
 * it, and peak_sgemm_machine answers from the cache (and never lowers it on refresh). */
static void test_peak_cache(void **state) {
    (void)state;
    char dir[] = "/tmp/mt_peak_cacheXXXXXX", path[256], buf[4096];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/sub/peak", dir);
    setenv("MINITRAIN_PEAK_CACHE", path, 1);
    peak_cache_entry e;
    assert_int_equal(peak_cache_lookup(2, 1, &e), -1); /* no file yet */
    peak_cache_entry in = {.threads = 2, .ranks = 1, .sgemm = 1.25e11, .bandwidth = 1.5e10,
                           .spread = 0.021};
    assert_int_equal(peak_cpu_model(in.cpu, sizeof(in.cpu)) == 0 || strcmp(in.cpu, "unknown") == 0, 1);
    char err[256];
    assert_int_equal(peak_cache_store(&in, err, sizeof(err)), 0);
    assert_int_equal(peak_cache_lookup(2, 1, &e), 0);
    assert_true(fabs(e.sgemm - 1.25e11) < 1e5 && fabs(e.bandwidth - 1.5e10) < 1e4);
    assert_true(fabs(e.spread - 0.021) < 1e-6 && strcmp(e.cpu, in.cpu) == 0);
    assert_int_equal(peak_cache_lookup(1, 1, &e), -1); /* another thread count: another key */
    assert_int_equal(peak_cache_lookup(2, 4, &e), -1); /* another rank count */
    /* junk, a torn line, a negative peak and another CPU's line around ours */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "garbage\nv1 threads=2 ranks=1 sgemm=\nv1 threads=2 ranks=1 sgemm=-5 bw=0 "
               "spread=0 cpu=%s\nv1 threads=2 ranks=1 sgemm=9e10 bw=0 spread=0.5 cpu=Other CPU\n",
            in.cpu);
    fclose(f);
    assert_int_equal(peak_cache_lookup(2, 1, &e), -1); /* only malformed lines for our key */
    in.sgemm = 2e11;
    assert_int_equal(peak_cache_store(&in, err, sizeof(err)), 0);
    f = fopen(path, "r");
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    assert_null(strstr(buf, "garbage"));
    assert_null(strstr(buf, "sgemm=-5"));
    assert_non_null(strstr(buf, "cpu=Other CPU\n"));
    assert_int_equal(peak_cache_lookup(2, 1, &e), 0);
    assert_true(fabs(e.sgemm - 2e11) < 1e5);
    /* from the cache: no probe, the stored figure; a refresh probes but never goes lower */
    double pk = peak_sgemm_machine(2, 1, 0.5, 0, &e);
    assert_true(pk == e.sgemm && e.from_cache == 1 && fabs(pk - 2e11) < 1e5);
    in.sgemm = 1e6; /* far below any real sgemm: the refresh must measure more */
    assert_int_equal(peak_cache_store(&in, err, sizeof(err)), 0);
    pk = peak_sgemm_machine(2, 1, 0.5, 1, &e);
    assert_true(pk > 1e6 && e.from_cache == 0 && e.rounds >= 2 && fabs(e.bandwidth - 1.5e10) < 1e4);
    setenv("MINITRAIN_PEAK_CACHE", "off", 1);
    assert_int_equal(peak_cache_path(path, sizeof(path)), -1);
    assert_int_equal(peak_cache_lookup(2, 1, &e), -1);
    assert_int_equal(peak_cache_store(&in, err, sizeof(err)), -1);
    unsetenv("MINITRAIN_PEAK_CACHE");
    setenv("XDG_CACHE_HOME", "/x/y", 1);
    assert_int_equal(peak_cache_path(path, sizeof(path)), 0);
    assert_string_equal(path, "/x/y/minitrain/peak");
    snprintf(buf, sizeof(buf), "rm -rf '%s'", dir);
    assert_int_equal(system(buf), 0);
}

static void test_theoretical_peak(void **state) {
    (void)state;
    char desc[256] = "";
    double p = peak_theoretical(1, desc, sizeof(desc));
    assert_true(strlen(desc) > 0);
    if (p == -1) {
        assert_non_null(strstr(desc, "unknown"));
        return;
    }
    assert_true(isfinite(p) && p > 0);
    /* The number must be the product of the assumptions it states. */
    int cores = 0, fpc = 0;
    double ghz = 0;
    char unit[16];
    assert_int_equal(sscanf(desc, "%d %15s x %lf GHz x %d FLOP/cycle", &cores, unit, &ghz, &fpc),
                     4);
    assert_int_equal(cores, 1); /* one thread asked: one core */
    assert_true(fpc == 8 || fpc == 16 || fpc == 32 || fpc == 64);
    assert_true(fabs(p - cores * ghz * 1e9 * fpc) <= 0.005 * p); /* ghz printed to 0.01 */
    /* More threads never lower the peak. */
    char desc2[256];
    assert_true(peak_theoretical(2, desc2, sizeof(desc2)) >= p);
}

static void test_gpu_table(void **state) {
    (void)state;
    assert_true(peak_gpu_by_name("NVIDIA H100 80GB HBM3") == 989e12); /* SXM5 */
    assert_true(peak_gpu_by_name("NVIDIA H100 SXM5 80GB") == 989e12);
    assert_true(peak_gpu_by_name("NVIDIA H200") == 989e12);
    assert_true(peak_gpu_by_name("NVIDIA H100 PCIe") == 756e12);
    assert_true(peak_gpu_by_name("nvidia h100 pcie") == 756e12);
    assert_true(peak_gpu_by_name("NVIDIA A100-SXM4-80GB") == 312e12);
    assert_true(peak_gpu_by_name("NVIDIA A100-PCIE-40GB") == 312e12);
    assert_true(peak_gpu_by_name("NVIDIA H100 NVL") == -1);
    assert_true(peak_gpu_by_name("NVIDIA GeForce RTX 4090") == -1);
    assert_true(peak_gpu_by_name(NULL) == -1);
    assert_true(peak_gpu_by_name("NVIDIA L40S") == 362e12); /* not L4's 121 */
    assert_true(peak_gpu_by_name("NVIDIA L4") == 121e12);
    assert_true(peak_gpu_by_name("NVIDIA B200") == 2250e12);
    char d[128];
    assert_true(peak_gpu_describe("NVIDIA H200", d, sizeof(d)) == 989e12);
    assert_string_equal(d, "NVIDIA H200: 989 TFLOP/s bf16 dense (datasheet)");
    assert_true(peak_gpu_describe("Tesla K80", d, sizeof(d)) == -1);
    assert_string_equal(d, "unknown (Tesla K80)");
}

static void test_bench_flags(void **state) {
    (void)state;
    char *bad[] = {"bench", "gemm", "--frobnicate", NULL};
    assert_int_equal(cmd_bench(3, bad), 2);
    char *badnum[] = {"bench", "gemm", "--threads", "two", NULL};
    assert_int_equal(cmd_bench(4, badnum), 2);
    char *missing[] = {"bench", "gemm", "--seconds", NULL};
    assert_int_equal(cmd_bench(3, missing), 2);
    char *tiny[] = {"bench", "gemm", "--size", "8", NULL};
    assert_int_equal(cmd_bench(4, tiny), 2);
    char msg[320];
    int mismatch = peak_blas_kernel_check(msg, sizeof(msg));
    assert_true(mismatch == 0 || strstr(msg, "OPENBLAS_CORETYPE=") != NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_124m_by_shapes),
        cmocka_unit_test(test_gpt2_124m_from_published_total),
        cmocka_unit_test(test_recompute_flops),
        cmocka_unit_test(test_small_config_and_n_variant),
        cmocka_unit_test(test_dense_against_built_model),
        cmocka_unit_test(test_moe_active_params),
        cmocka_unit_test(test_mfu),
        cmocka_unit_test(test_rank_cores),
        cmocka_unit_test(test_sgemm_probe_sane),
        cmocka_unit_test(test_sgemm_stable),
        cmocka_unit_test(test_peak_cache),
        cmocka_unit_test(test_theoretical_peak),
        cmocka_unit_test(test_gpu_table),
        cmocka_unit_test(test_bench_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
