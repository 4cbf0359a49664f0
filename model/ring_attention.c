/*
 * model/ring_attention.c — ring attention forward and backward over the context-parallel group
 * (see model/ring_attention.h). The K/V blocks travel with parallel/cp.h's cp_ring_shift; the
 * block products are OpenBLAS sgemms, like ops_cpu_attention_forward's, on host memory.
 *
 * Blocks: rank r's queries are its two chunks (q-half 0 = chunk r, q-half 1 = chunk 2cp−1−r);
 * the visiting block of rank src holds key chunks src and 2cp−1−src. A (query chunk a, key
 * chunk b) pair is skipped when b > a (fully masked), lower-triangular when b == a, full when
 * b < a. Scores go straight into att at their global key columns, so att's row is exactly the
 * row ops_attention_forward keeps, restricted to this rank's queries.
 */
#include "model/ring_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "core/check.h"
#include "ops/ops.h"
#include "parallel/cp.h"

/* kv (rows, 2C) ← the k and v columns of qkv (rows, 3C): the block that travels. */
static void pack_kv(float *kv, const float *qkv, size_t rows, int C) {
    for (size_t i = 0; i < rows; i++)
        memcpy(kv + i * 2 * C, qkv + i * 3 * C + C, 2 * (size_t)C * sizeof(float));
}

/* Key chunk of half h of rank r's block (parallel/cp.h's order). */
static int chunk_of(int cp, int r, int h) { return h == 0 ? r : 2 * cp - 1 - r; }

/* One online-softmax merge: the (half, half) score block S (row stride T) of query rows against
 * one key chunk, already scale·QKᵀ, becomes e^(S − m_new) (masked entries 0; diag: key j <= query
 * i only); the running max m, sum l and the output rows o (stride C) are rescaled by
 * e^(m_old − m_new) and o += e^(S − m_new)·V. mk[i·nchunk] records m_new for the final
 * normalisation of this block. */
static void merge_block(float *S, int T, int half, int diag, float *m, float *l, float *mk,
                        int nchunk, float *o, int C, const float *v, int ldv, int HS) {
    for (int i = 0; i < half; i++) {
        float *row = S + (size_t)i * T;
        int n = diag ? i + 1 : half;
        float mx = row[0];
        for (int j = 1; j < n; j++) mx = row[j] > mx ? row[j] : mx;
        float mnew = m[i] > mx ? m[i] : mx;
        float corr = isinf(m[i]) ? 0.0f : expf(m[i] - mnew); /* first block: nothing to rescale */
        float sum = 0.0f;
        for (int j = 0; j < n; j++) {
            row[j] = expf(row[j] - mnew);
            sum += row[j];
        }
        for (int j = n; j < half; j++) row[j] = 0.0f; /* causal mask: exactly zero */
        l[i] = l[i] * corr + sum;
        float *orow = o + (size_t)i * C;
        for (int d = 0; d < HS; d++) orow[d] *= corr;
        m[i] = mnew;
        mk[(size_t)i * nchunk] = mnew;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, half, HS, half, 1.0f, S, T, v, ldv,
                1.0f, o, C);
}

void ring_attention_forward(comm *cpc, float *out, float *att, const float *qkv, int B, int Tl,
                            int NH, int HS) {
    const int cp = comm_size(cpc), r = comm_rank(cpc);
    const int T = Tl * cp, half = Tl / 2, C = NH * HS, nchunk = 2 * cp;
    mtCheck(Tl % 2 == 0 && Tl > 0, "ring attention: the local sequence must be two equal chunks");
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t rows = (size_t)B * Tl, nrow = (size_t)B * NH * Tl;
    float *kv = mallocCheck(rows * 2 * C * sizeof(float));
    float *kv_next = mallocCheck(rows * 2 * C * sizeof(float));
    float *m = mallocCheck(nrow * sizeof(float)), *l = mallocCheck(nrow * sizeof(float));
    float *mk = mallocCheck(nrow * nchunk * sizeof(float)); /* m after each key chunk's merge */
    pack_kv(kv, qkv, rows, C);
    memset(out, 0, rows * C * sizeof(float));
    for (size_t i = 0; i < nrow; i++) m[i] = -INFINITY, l[i] = 0.0f;
    for (int s = 0; s < cp; s++) {
        const int src = (r - s + cp) % cp; /* whose K/V block this rank holds now */
#pragma omp parallel for collapse(2) if (B * NH > 1) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int qh = 0; qh < 2; qh++) {
                    const int qc = chunk_of(cp, r, qh);
                    const size_t q0 = (size_t)b * Tl + (size_t)qh * half; /* first local row */
                    const size_t row0 = ((size_t)b * NH + h) * Tl + (size_t)qh * half;
                    const float *q = qkv + q0 * 3 * C + (size_t)h * HS;
                    float *o = out + q0 * C + (size_t)h * HS;
                    for (int kh = 0; kh < 2; kh++) {
                        const int kc = chunk_of(cp, src, kh);
                        if (kc > qc) continue; /* keys after every query: fully masked */
                        const float *k = kv + ((size_t)b * Tl + (size_t)kh * half) * 2 * C +
                                         (size_t)h * HS;
                        float *S = att + row0 * T + (size_t)kc * half;
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, half, half, HS,
                                    scale, q, 3 * C, k, 2 * C, 0.0f, S, T);
                        merge_block(S, T, half, kc == qc, m + row0, l + row0,
                                    mk + row0 * nchunk + kc, nchunk, o, C, k + C, 2 * C, HS);
                    }
                }
        if (s + 1 < cp) { /* pass the block on: the next rank's keys arrive */
            cp_ring_shift(cpc, kv, kv_next, rows * 2 * C);
            float *t = kv;
            kv = kv_next, kv_next = t;
        }
    }
    /* normalise: O /= l, and each stored block e^(S − m_k) → P = e^(S − m_k)·e^(m_k − m)/l */
#pragma omp parallel for collapse(2) if (B * NH > 1) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < Tl; i++) {
                const size_t row = ((size_t)b * NH + h) * Tl + i;
                const int qc = chunk_of(cp, r, i / half), i_in = i % half;
                const float inv = 1.0f / l[row]; /* l >= 1: the max entry contributes e^0 */
                float *orow = out + ((size_t)b * Tl + i) * C + (size_t)h * HS;
                for (int d = 0; d < HS; d++) orow[d] *= inv;
                float *prow = att + row * T;
                for (int kc = 0; kc <= qc; kc++) {
                    const float f = expf(mk[row * nchunk + kc] - m[row]) * inv;
                    const int n = kc == qc ? i_in + 1 : half;
                    float *p = prow + (size_t)kc * half;
                    for (int j = 0; j < n; j++) p[j] *= f;
                }
            }
    free(kv);
    free(kv_next);
    free(m);
    free(l);
    free(mk);
}

/* The backward of one (query half, key chunk) block: P (half, half), dS scratch (both row stride
 * T); dO (stride C), q and dq (stride 3C), k, v, dk, dv (stride 2C); D the rows' rowsum(dO ⊙ O). */
static void block_backward(const float *P, float *dS, int T, int half, int diag, const float *D,
                           const float *dO, int C, const float *q, float *dq, const float *k,
                           const float *v, float *dk, float *dv, int HS, float scale) {
    // dP = dO Vᵀ
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, half, half, HS, 1.0f, dO, C, v, 2 * C,
                0.0f, dS, T);
    // dV += Pᵀ dO
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, half, HS, half, 1.0f, P, T, dO, C, 1.0f,
                dv, 2 * C);
    // dS = P ⊙ (dP − D): the softmax backward, D = rowsum(P ⊙ dP) = rowsum(dO ⊙ O)
    for (int i = 0; i < half; i++) {
        const float *prow = P + (size_t)i * T;
        float *drow = dS + (size_t)i * T;
        int n = diag ? i + 1 : half;
        for (int j = 0; j < n; j++) drow[j] = prow[j] * (drow[j] - D[i]);
        for (int j = n; j < half; j++) drow[j] = 0.0f;
    }
    // dQ += scale dS K ; dK += scale dSᵀ Q
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, half, HS, half, scale, dS, T, k, 2 * C,
                1.0f, dq, 3 * C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, half, HS, half, scale, dS, T, q, 3 * C,
                1.0f, dk, 2 * C);
}

void ring_attention_backward(comm *cpc, float *dqkv, float *datt, const float *dout,
                             const float *qkv, const float *out, const float *att, int B, int Tl,
                             int NH, int HS) {
    const int cp = comm_size(cpc), r = comm_rank(cpc);
    const int T = Tl * cp, half = Tl / 2, C = NH * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t rows = (size_t)B * Tl, nrow = (size_t)B * NH * Tl, nkv = rows * 2 * C;
    float *kv = mallocCheck(nkv * sizeof(float)), *kv_next = mallocCheck(nkv * sizeof(float));
    float *dkv = callocCheck(nkv, sizeof(float)), *dkv_next = mallocCheck(nkv * sizeof(float));
    float *D = mallocCheck(nrow * sizeof(float));
    pack_kv(kv, qkv, rows, C);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < Tl; i++) {
                const float *o = out + ((size_t)b * Tl + i) * C + (size_t)h * HS;
                const float *g = dout + ((size_t)b * Tl + i) * C + (size_t)h * HS;
                float dot = 0.0f;
                for (int d = 0; d < HS; d++) dot += o[d] * g[d];
                D[((size_t)b * NH + h) * Tl + i] = dot;
            }
    for (int s = 0; s < cp; s++) {
        const int src = (r - s + cp) % cp;
#pragma omp parallel for collapse(2) if (B * NH > 1) schedule(static)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int qh = 0; qh < 2; qh++) {
                    const int qc = chunk_of(cp, r, qh);
                    const size_t q0 = (size_t)b * Tl + (size_t)qh * half;
                    const size_t row0 = ((size_t)b * NH + h) * Tl + (size_t)qh * half;
                    for (int kh = 0; kh < 2; kh++) {
                        const int kc = chunk_of(cp, src, kh);
                        if (kc > qc) continue;
                        const size_t k0 = ((size_t)b * Tl + (size_t)kh * half) * 2 * C +
                                          (size_t)h * HS;
                        const size_t at = row0 * T + (size_t)kc * half;
                        block_backward(att + at, datt + at, T, half, kc == qc, D + row0,
                                       dout + q0 * C + (size_t)h * HS, C,
                                       qkv + q0 * 3 * C + (size_t)h * HS,
                                       dqkv + q0 * 3 * C + (size_t)h * HS, kv + k0, kv + k0 + C,
                                       dkv + k0, dkv + k0 + C, HS, scale);
                    }
                }
        if (s + 1 < cp) {
            cp_ring_shift(cpc, kv, kv_next, nkv);
            float *t = kv;
            kv = kv_next, kv_next = t;
        }
        /* the accumulators travel with their block; after the last step one more shift brings
         * every block's dK, dV home to its owner */
        cp_ring_shift(cpc, dkv, dkv_next, nkv);
        float *t = dkv;
        dkv = dkv_next, dkv_next = t;
    }
    for (size_t i = 0; i < rows; i++) {
        float *d = dqkv + i * 3 * C + C;
        const float *g = dkv + i * 2 * C;
        for (int c = 0; c < 2 * C; c++) d[c] += g[c];
    }
    free(kv);
    free(kv_next);
    free(dkv);
    free(dkv_next);
    free(D);
}

void ring_attention_embed_forward(float *out, const int *inp, const float *wte, const float *wpe,
                                  int B, int Tl, int C, int cp, int r) {
    const int half = Tl / 2;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < 2; h++) {
            size_t at = (size_t)b * Tl + (size_t)h * half;
            ops_encoder_forward(out + at * C, inp + at, wte,
                                wpe + (size_t)cp_half_start(Tl * cp, cp, r, h) * C, 1, half, C);
        }
}

void ring_attention_embed_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                                   int B, int Tl, int C, int cp, int r) {
    const int half = Tl / 2;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < 2; h++) {
            size_t at = (size_t)b * Tl + (size_t)h * half;
            ops_encoder_backward(dwte, dwpe + (size_t)cp_half_start(Tl * cp, cp, r, h) * C,
                                 dout + at * C, inp + at, 1, half, C);
        }
}
