/*
 * core/stats.h — order statistics of a sample of doubles: sort, median, nearest-rank percentile.
 * Prefix stats_. One home for what the supervisor (the median step time of the ranks that run),
 * the run report (median step and checkpoint times), the failure simulator (ETTR p5/p50/p95) and
 * the benchmarks (median of repeats) each used to write with their own qsort comparator.
 *
 * NaN: sorted as if unordered by qsort with a (x > y) - (x < y) comparator, i.e. not meaningful;
 * callers pass finite values.
 */
#ifndef MT_STATS_H
#define MT_STATS_H

#include <stddef.h>

/* Sort v[0..n) ascending, in place. */
void stats_sort(double *v, size_t n);

/* Median of v[0..n): the middle value for odd n, the mean of the two middle values for even n;
 * NAN when n == 0. Sorts v in place. */
double stats_median(double *v, size_t n);

/* stats_median of a copy of v[0..n): v itself is left as it is. */
double stats_median_copy(const double *v, size_t n);

/* Nearest-rank percentile of a sorted s[0..n), q in [0, 1]: s[ceil(q·n) − 1] with the index
 * clamped to [0, n − 1] — the smallest value with at least a fraction q of the sample at or below
 * it (the "nearest-rank method"; no interpolation). q = 0.5 is the lower median s[(n − 1)/2].
 * NAN when n == 0. */
double stats_percentile_sorted(const double *s, size_t n, double q);

#endif /* MT_STATS_H */
