/*
 * sched/failslow.c — ByteRobust's fail-slow rounds over the heartbeats' busy time
 * (sched/failslow.h has the method: per-round means, a threshold from the run's own noise, the
 * slow ranks' smallest shared mesh group, a majority over the last `rounds` rounds).
 *
 * Kept free of I/O so that tests/test_failslow.c can feed it synthetic samples with known spread.
 */
#include "sched/failslow.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/stats.h"

void fsl_opts_default(fsl_opts *o) {
    o->round_s = 10.0;
    o->rounds = 5;
    o->min_ratio = 1.3;
    o->noise_k = 1.0;
    o->min_samples = 3;
}

static void clear_samples(fsl_state *s) {
    memset(s->sum, 0, sizeof(s->sum));
    memset(s->sumsq, 0, sizeof(s->sumsq));
    memset(s->n, 0, sizeof(s->n));
}

void fsl_init(fsl_state *s, const fsl_opts *o, const stk_layout *L, int world, double now) {
    s->o = *o;
    if (s->o.rounds > FSL_MAX_ROUNDS) s->o.rounds = FSL_MAX_ROUNDS;
    s->L = *L;
    s->world = world < STK_MAX_RANKS ? world : STK_MAX_RANKS;
    s->t0 = now;
    s->nrounds = 0;
    s->decided = 0;
    for (int k = 0; k < FSL_MAX_ROUNDS; k++) s->hist_kind[k] = NULL, s->hist_first[k] = -1;
    clear_samples(s);
}

void fsl_sample(fsl_state *s, int rank, double busy_ms) {
    if (rank < 0 || rank >= s->world || !isfinite(busy_ms) || busy_ms < 0) return;
    s->sum[rank] += busy_ms;
    s->sumsq[rank] += busy_ms * busy_ms;
    s->n[rank]++;
}

/* The round's statistics and its flag, into *r (samples of s, not yet cleared). */
static void judge_round(const fsl_state *s, fsl_round *r) {
    static double mean[STK_MAX_RANKS], sorted[STK_MAX_RANKS], cv[STK_MAX_RANKS];
    static stk_verdict v;
    memset(r, 0, sizeof(*r));
    r->index = s->nrounds + 1;
    r->slowest = -1;
    r->median_ms = r->noise = r->ratio = NAN;
    int k = 0;
    for (int i = 0; i < s->world; i++) {
        mean[i] = NAN;
        if (s->n[i] < s->o.min_samples) continue;
        double m = s->sum[i] / s->n[i];
        double var = s->sumsq[i] / s->n[i] - m * m;
        mean[i] = m;
        sorted[k] = m;
        cv[k] = m > 0 ? sqrt(var > 0 ? var : 0) / m : 0;
        k++;
        if (r->slowest < 0 || m > mean[r->slowest]) r->slowest = i;
    }
    r->nranks = k;
    if (k < 2) return; /* one rank has nobody to be slower than */
    stats_sort(sorted, (size_t)k);
    stats_sort(cv, (size_t)k);
    r->median_ms = stats_percentile_sorted(sorted, (size_t)k, 0.5);
    r->noise = stats_percentile_sorted(cv, (size_t)k, 0.5);
    r->threshold = fmax(s->o.min_ratio, 1.0 + s->o.noise_k * r->noise);
    if (!(r->median_ms > 0)) return;
    r->ratio = mean[r->slowest] / r->median_ms;
    v.noutliers = 0;
    for (int i = 0; i < s->world; i++)
        if (isfinite(mean[i]) && mean[i] > r->threshold * r->median_ms) v.outliers[v.noutliers++] = i;
    /* more than half the ranks "slow" is the median's problem, not a degrader's */
    if (v.noutliers == 0 || 2 * v.noutliers > k) return;
    r->flagged = 1;
    if (stk_blame_group(&s->L, s->world, &v)) {
        r->kind = v.blame_kind;
        r->nblame = v.nblame;
        memcpy(r->blame, v.blame, sizeof(int) * (size_t)v.nblame);
    } else {
        r->kind = "rank";
        r->nblame = v.noutliers;
        memcpy(r->blame, v.outliers, sizeof(int) * (size_t)v.noutliers);
    }
}

static void rank_list(const int *r, int n, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n && o + 12 < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? "," : "", r[i]);
}

int fsl_tick(fsl_state *s, double now, fsl_round *r, fsl_verdict *v) {
    if (s->o.rounds <= 0 || now - s->t0 < s->o.round_s) return 0;
    judge_round(s, r);
    int slot = s->nrounds % s->o.rounds;
    s->hist_kind[slot] = r->flagged ? r->kind : NULL;
    s->hist_first[slot] = r->flagged ? r->blame[0] : -1;
    s->nrounds++;
    s->t0 = now;
    clear_samples(s);
    if (s->decided || !r->flagged || s->nrounds < s->o.rounds / 2 + 1) return 1;
    /* this round's group: flagged in how many of the last `rounds` rounds? */
    int window = s->nrounds < s->o.rounds ? s->nrounds : s->o.rounds, count = 0;
    for (int k = 0; k < window; k++)
        count += s->hist_kind[k] && !strcmp(s->hist_kind[k], r->kind) &&
                 s->hist_first[k] == r->blame[0];
    if (count < s->o.rounds / 2 + 1) return 1;
    s->decided = 1;
    v->kind = r->kind;
    v->nblame = r->nblame;
    memcpy(v->blame, r->blame, sizeof(int) * (size_t)r->nblame);
    v->flagged_rounds = count;
    v->window = window;
    v->ratio = r->ratio;
    char list[256];
    rank_list(r->blame, r->nblame, list, sizeof(list));
    if (!strcmp(r->kind, "rank"))
        snprintf(v->text, sizeof(v->text), "rank%s %s slowest in %d of %d rounds of %.0f s "
                 "(last: %.2fx the median busy time, threshold %.2fx)", r->nblame > 1 ? "s" : "",
                 list, count, window, s->o.round_s, r->ratio, r->threshold);
    else
        snprintf(v->text, sizeof(v->text), "its %s group (ranks %s) slowest in %d of %d rounds of "
                 "%.0f s (last: rank %d at %.2fx the median busy time, threshold %.2fx)", r->kind,
                 list, count, window, s->o.round_s, r->slowest, r->ratio, r->threshold);
    return 2;
}
