/*
 * ops/peak.c — the sgemm peak probe, the theoretical CPU peak, the GPU peak table, the BLAS kernel
 * check and re-exec, and `minitrain bench gemm` (see ops/peak.h).
 *
 * Why two CPU peaks: a theoretical peak (cores × clock × FLOP/cycle) depends on assumptions a
 * program cannot check (FMA units per core, the all-core AVX-512 clock), while a measured sgemm
 * peak is what the BLAS that trains the model actually reaches here. Reports show MFU against both
 * (docs/mfu.md). The probe times each sgemm call separately and keeps the best, so a noisy
 * neighbour on a shared machine lowers the count of good calls, not the figure.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "ops/peak.h"

#include <ctype.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/check.h"
#include "core/timer.h"

/* ---- measured peak: sgemm probe --------------------------------------------------------------- */

/* Best rate and number of timed calls of the last probe (for bench output). */
static int g_probe_calls;

double peak_sgemm_probe_n(int threads, double seconds, int n) {
    if (!(seconds > 0) || n < 64 || n > 16384) return -1;
    size_t nn = (size_t)n * (size_t)n;
    float *a = mallocCheck(nn * sizeof(float)); // (n, n)
    float *b = mallocCheck(nn * sizeof(float)); // (n, n)
    float *c = mallocCheck(nn * sizeof(float)); // (n, n)
    /* Small bounded values: no denormals, no overflow, not all-zero (no shortcut paths). */
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)((i * 7u) % 13u) * (1.0f / 13.0f) - 0.5f;
        b[i] = (float)((i * 5u) % 11u) * (1.0f / 11.0f) - 0.5f;
        c[i] = 0.0f;
    }
    /* OpenBLAS's OpenMP build sets the OpenMP thread count too: save and restore both. */
    int saved = openblas_get_num_threads();
#ifdef _OPENMP
    int saved_omp = omp_get_max_threads();
#endif
    if (threads > 0) openblas_set_num_threads(threads);
    double flops = 2.0 * (double)n * (double)n * (double)n; /* n³ multiply-adds */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double best = 0, start = timer_now();
    int calls = 0;
    while (calls < 3 || timer_now() - start < seconds) {
        double t0 = timer_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c,
                    n);
        double dt = timer_now() - t0;
        if (dt > 0 && flops / dt > best) best = flops / dt;
        calls++;
    }
    openblas_set_num_threads(saved);
#ifdef _OPENMP
    omp_set_num_threads(saved_omp);
#endif
    g_probe_calls = calls;
    /* Use the result so the calls cannot be elided, and catch a broken BLAS: C[0][0] is a dot
     * product we can check cheaply. */
    double ref = 0;
    for (int k = 0; k < n; k++) ref += (double)a[k] * (double)b[(size_t)k * n];
    mtCheck(fabs(ref - c[0]) <= 1e-3 * (1 + fabs(ref)), "sgemm returned a wrong result: "
                                                        "check the OpenBLAS installation");
    free(a);
    free(b);
    free(c);
    return best;
}

double peak_sgemm_probe(int threads, double seconds) {
    return peak_sgemm_probe_n(threads, seconds, PEAK_PROBE_N);
}

/* ---- theoretical peak ------------------------------------------------------------------------- */

static void setdesc(char *desc, size_t desclen, const char *msg) {
    if (desc != NULL && desclen > 0) snprintf(desc, desclen, "%s", msg);
}

/* Read one number from a sysfs file; returns -1 if absent or unparsable. */
static double read_sysfs_number(const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    double v = -1;
    if (fscanf(f, "%lf", &v) != 1) v = -1;
    fclose(f);
    return v;
}

typedef struct {
    double max_mhz;       /* largest "cpu MHz", or -1 */
    int physical_cores;   /* distinct (physical id, core id) pairs, or 0 if not listed */
    char flags[4096];     /* the first "flags" line's value */
} cpuinfo;

static void read_cpuinfo(cpuinfo *ci) {
    memset(ci, 0, sizeof(*ci));
    ci->max_mhz = -1;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL) return;
    enum { MAXPAIRS = 4096 };
    long pairs[MAXPAIRS];
    int npairs = 0;
    long phys = 0;
    char line[8192];
    while (fgets(line, sizeof(line), f) != NULL) {
        char *colon = strchr(line, ':');
        if (colon == NULL) continue;
        const char *val = colon + 1;
        while (*val == ' ' || *val == '\t') val++;
        if (strncmp(line, "cpu MHz", 7) == 0) {
            double mhz = atof(val);
            if (mhz > ci->max_mhz) ci->max_mhz = mhz;
        } else if (strncmp(line, "physical id", 11) == 0) {
            phys = atol(val);
        } else if (strncmp(line, "core id", 7) == 0) {
            long key = phys * 1000003L + atol(val);
            int seen = 0;
            for (int i = 0; i < npairs && !seen; i++) seen = pairs[i] == key;
            if (!seen && npairs < MAXPAIRS) pairs[npairs++] = key;
        } else if (strncmp(line, "flags", 5) == 0 && ci->flags[0] == '\0') {
            snprintf(ci->flags, sizeof(ci->flags), " %s", val);
            ci->flags[strcspn(ci->flags, "\n")] = '\0';
            strncat(ci->flags, " ", sizeof(ci->flags) - strlen(ci->flags) - 1);
        }
    }
    fclose(f);
    ci->physical_cores = npairs;
}

/* Number of CPUs in a kernel cpu list ("0-3,8,10-11"), or -1 when it does not parse. */
static int cpulist_count(const char *s) {
    int n = 0;
    while (*s && *s != '\n') {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || a < 0) return -1;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s || b < a) return -1;
        }
        n += (int)(b - a + 1);
        s = end;
        if (*s == ',') s++;
    }
    return n > 0 ? n : -1;
}

/* CPUs of this process's cpuset cgroup (v2 cpuset.cpus.effective, v1 cpuset.effective_cpus):
 * the CPUs the whole job may use on this node, whatever each rank's binding. -1 if unknown. */
static int cgroup_cpus(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f == NULL) return -1;
    char line[1024], path[1200], v2[1024] = "", v1[1024] = "";
    int found_v2 = 0, found_v1 = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "0::", 3) == 0) found_v2 = snprintf(v2, sizeof(v2), "%s", line + 3) >= 0;
        char *c = strstr(line, ":cpuset:");
        if (c != NULL) found_v1 = snprintf(v1, sizeof(v1), "%s", c + 8) >= 0;
    }
    fclose(f);
    const char *try[2][2] = {{found_v1 ? v1 : NULL, "/sys/fs/cgroup/cpuset%s/cpuset.effective_cpus"},
                             {found_v2 ? v2 : NULL, "/sys/fs/cgroup%s/cpuset.cpus.effective"}};
    for (int i = 0; i < 2; i++) {
        if (try[i][0] == NULL) continue;
        snprintf(path, sizeof(path), try[i][1], strcmp(try[i][0], "/") ? try[i][0] : "");
        FILE *g = fopen(path, "r");
        if (g == NULL) continue;
        char list[4096];
        int n = fgets(list, sizeof(list), g) != NULL ? cpulist_count(list) : -1;
        fclose(g);
        if (n > 0) return n;
    }
    return -1;
}

double peak_rank_cores(int threads, int affinity_cpus, int node_cpus, int local_ranks) {
    if (affinity_cpus < 1 || node_cpus < 1) return 0;
    if (local_ranks < 1) local_ranks = 1;
    double cores = (double)node_cpus / local_ranks;
    if (affinity_cpus < cores) cores = affinity_cpus;
    if (threads > 0 && threads < cores) cores = threads;
    return cores;
}

static int has_flag(const cpuinfo *ci, const char *flag) {
    char pat[64];
    snprintf(pat, sizeof(pat), " %s ", flag);
    return strstr(ci->flags, pat) != NULL;
}

double peak_theoretical(int threads, char *desc, size_t desclen) {
    return peak_theoretical_rank(threads, 1, desc, desclen);
}

double peak_theoretical_rank(int threads, int local_ranks, char *desc, size_t desclen) {
#if defined(__x86_64__) || defined(__i386__)
    cpuinfo ci;
    read_cpuinfo(&ci);
    if (ci.flags[0] == '\0') {
        setdesc(desc, desclen, "unknown: /proc/cpuinfo has no 'flags' line to identify the ISA");
        return -1;
    }
    /* FLOP/cycle/core: both the compiler's CPUID view and the kernel's flags must agree (the
     * kernel hides features it does not enable, e.g. AVX-512 state in some VMs). */
    __builtin_cpu_init();
    int fpc;
    const char *isa;
    if (__builtin_cpu_supports("avx512f") && has_flag(&ci, "avx512f")) {
        fpc = 64;
        isa = "AVX-512, 2 FMA units assumed";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               has_flag(&ci, "avx2") && has_flag(&ci, "fma")) {
        fpc = 32;
        isa = "AVX2 + FMA, 2 FMA units assumed";
    } else if (__builtin_cpu_supports("avx") && has_flag(&ci, "avx")) {
        fpc = 16;
        isa = "AVX without FMA: one add + one mul per cycle";
    } else if (has_flag(&ci, "sse") || has_flag(&ci, "sse2")) {
        fpc = 8;
        isa = "SSE: one 4-wide add + one 4-wide mul per cycle";
    } else {
        setdesc(desc, desclen, "unknown: no SSE/AVX/AVX-512 in /proc/cpuinfo flags");
        return -1;
    }
    /* Clock. */
    double ghz = read_sysfs_number("/sys/devices/system/cpu/cpu0/cpufreq/base_frequency") / 1e6;
    const char *clk = "cpufreq base_frequency";
    if (!(ghz > 0)) {
        ghz = read_sysfs_number("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") / 1e6;
        clk = "cpufreq cpuinfo_max_freq";
    }
    if (!(ghz > 0)) {
        ghz = ci.max_mhz / 1e3;
        clk = "/proc/cpuinfo cpu MHz";
    }
    if (!(ghz > 0)) {
        setdesc(desc, desclen, "unknown: no cpufreq in /sys and no 'cpu MHz' in /proc/cpuinfo, "
                               "so the clock cannot be determined");
        return -1;
    }
    /* Cores: this process's CPUs, the node's (the job's cpuset) shared by its local ranks. */
    int avail = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) avail = CPU_COUNT(&set);
    if (avail < 1) avail = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int node = cgroup_cpus();
    if (node < 1) node = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (avail < 1 || node < 1) {
        setdesc(desc, desclen, "unknown: cannot count the CPUs available to this process");
        return -1;
    }
    if (node < avail) node = avail;
    const char *smt = "";
    if (ci.physical_cores > 0 && node > ci.physical_cores) {
        node = ci.physical_cores;
        if (avail > node) avail = node;
        smt = "; SMT siblings share FMA units: physical cores counted";
    }
    double cores = peak_rank_cores(threads, avail, node, local_ranks);
    char share[96] = "";
    if (local_ranks > 1)
        snprintf(share, sizeof(share), "; %d ranks share this node's %d core%s", local_ranks, node,
                 node == 1 ? "" : "s");
    double peak = cores * ghz * 1e9 * fpc;
    if (desc != NULL && desclen > 0)
        snprintf(desc, desclen, "%g core%s x %.2f GHz x %d FLOP/cycle (%s; clock from %s%s%s)",
                 cores, cores == 1 ? "" : "s", ghz, fpc, isa, clk, smt, share);
    return peak;
#else
    (void)threads;
    (void)local_ranks;
    setdesc(desc, desclen, "unknown: the FLOP/cycle table covers x86 (SSE/AVX/AVX-512) only");
    return -1;
#endif
}

int peak_blas_kernel_check(char *msg, size_t msglen) {
    if (msg != NULL && msglen > 0) msg[0] = '\0';
#if defined(__x86_64__) || defined(__i386__)
    const char *core = openblas_get_corename();
    if (core == NULL) return 0;
    static const char *AVX512[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    static const char *AVX2[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids",
                                 NULL};
    __builtin_cpu_init();
    const char **ok = NULL, *want = NULL, *isa = NULL;
    if (__builtin_cpu_supports("avx512f")) {
        ok = AVX512, want = "SkylakeX", isa = "AVX-512";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        ok = AVX2, want = "Haswell", isa = "AVX2";
    } else {
        return 0;
    }
    for (int i = 0; ok[i] != NULL; i++)
        if (strcasecmp(core, ok[i]) == 0) return 0;
    if (msg != NULL && msglen > 0)
        snprintf(msg, msglen,
                 "OpenBLAS uses '%s' kernels on a CPU with %s (it does not recognise this CPU); "
                 "matmuls run far below peak. Export OPENBLAS_CORETYPE=%s before starting minitrain",
                 core, isa, want);
    return 1;
#else
    return 0;
#endif
}

/* ---- GPU peak table --------------------------------------------------------------------------- */

static int icontains(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (const char *h = hay; *h; h++) {
        size_t i = 0;
        while (i < n && h[i] && tolower((unsigned char)h[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n) return 1;
    }
    return 0;
}

double peak_gpu_by_name(const char *name) {
    if (name == NULL) return -1;
    if (icontains(name, "NVL")) return -1; /* H100 NVL / H200 NVL: different clocks, not tabled */
    if (icontains(name, "H200")) return 989e12;
    if (icontains(name, "H100")) return icontains(name, "PCIe") ? 756e12 : 989e12;
    if (icontains(name, "A100")) return 312e12;
    if (icontains(name, "B200")) return 2250e12;
    if (icontains(name, "L40S")) return 362e12;
    if (icontains(name, "L4")) return 121e12; /* after L40S: "L4" is a substring of it */
    return -1;
}

double peak_gpu_describe(const char *name, char *desc, size_t desclen) {
    double p = peak_gpu_by_name(name);
    if (p > 0) snprintf(desc, desclen, "%s: %.0f TFLOP/s bf16 dense (datasheet)", name, p / 1e12);
    else snprintf(desc, desclen, "unknown (%s)", name ? name : "no device name");
    return p;
}

/* ---- minitrain bench gemm (cmd/bench.c) ------------------------------------------------------ */

int peak_bench_gemm(int threads, double seconds, int size) {
    char warn[320];
    if (peak_blas_kernel_check(warn, sizeof(warn))) mt_warn("%s", warn);
    int nthreads = threads > 0 ? threads : openblas_get_num_threads();
    double peak = peak_sgemm_probe_n(nthreads, seconds, size);
    if (peak < 0) return MT_EXIT_USAGE;
    printf("sgemm peak: %.1f GFLOP/s (n=%d, %d thread%s, best of %d calls over %.2f s)\n",
           peak / 1e9, size, nthreads, nthreads == 1 ? "" : "s", g_probe_calls, seconds);
    char desc[256];
    double th = peak_theoretical(nthreads, desc, sizeof(desc));
    if (th > 0)
        printf("theoretical peak: %.1f GFLOP/s = %s; measured is %.0f%% of it\n", th / 1e9, desc,
               100.0 * peak / th);
    else
        printf("theoretical peak: unknown (%s)\n", desc);
    /* the figures every run on this machine uses: the stable probe, the read bandwidth, cached */
    peak_stable st, bst;
    peak_cache_entry e = {.threads = nthreads, .ranks = 1};
    e.sgemm = peak_sgemm_stable(nthreads, 4 * seconds, &st);
    e.spread = st.spread;
    printf("stable sgemm peak: %.1f GFLOP/s (sizes 512-2048, %d rounds, %s; spread %.1f%%: "
           "min %.1f, max %.1f)\n", e.sgemm / 1e9, st.rounds,
           st.agreed ? "the last two within 3%" : "capped in time before two agreed",
           100 * st.spread, st.min / 1e9, st.max / 1e9);
    e.bandwidth = peak_bandwidth(nthreads, (size_t)256 << 20, 2 * seconds, &bst);
    printf("read bandwidth: %.1f GB/s (256 MiB, %d passes, spread %.1f%%)\n", e.bandwidth / 1e9,
           bst.rounds, 100 * bst.spread);
    peak_cpu_model(e.cpu, sizeof(e.cpu));
    char path[1024], err[256];
    peak_cache_entry old;
    if (peak > e.sgemm) e.sgemm = peak; /* the first probe counts too: the fastest call wins */
    if (peak_cache_lookup(nthreads, 1, &old) == 0 && old.sgemm > e.sgemm) e.sgemm = old.sgemm;
    if (peak_cache_path(path, sizeof(path)) == 0) {
        if (peak_cache_store(&e, err, sizeof(err)) == 0)
            printf("cached for this machine (%s, %d threads): %s\n", e.cpu, nthreads, path);
        else
            mt_warn("the peak cache: %s", err);
    }
    return MT_EXIT_OK;
}

void peak_blas_reexec(char **argv) {
    char msg[512];
    if (getenv("OPENBLAS_CORETYPE") || !peak_blas_kernel_check(msg, sizeof(msg))) return;
    setenv("OPENBLAS_CORETYPE", __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell", 1);
    execv("/proc/self/exe", argv);
    mt_warn("%s", msg); /* exec failed: carry on with slow kernels, loudly */
}
