/*
 * core/stats.c — sort, median and nearest-rank percentile of doubles (see core/stats.h).
 */
#include "core/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void stats_sort(double *v, size_t n) {
    if (n > 1) qsort(v, n, sizeof(double), cmp_double);
}

double stats_median(double *v, size_t n) {
    if (n == 0) return NAN;
    stats_sort(v, n);
    size_t h = n / 2;
    return (n % 2) ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

double stats_median_copy(const double *v, size_t n) {
    if (n == 0) return NAN;
    double *c = mallocCheck(n * sizeof(double));
    memcpy(c, v, n * sizeof(double));
    double m = stats_median(c, n);
    free(c);
    return m;
}

double stats_percentile_sorted(const double *s, size_t n, double q) {
    if (n == 0) return NAN;
    double r = ceil(q * (double)n) - 1;
    size_t k = r < 0 ? 0 : (size_t)r;
    if (k >= n) k = n - 1;
    return s[k];
}
