/*
 * sched/stacks.c — stack traces of every rank from outside the process, grouped by equality,
 * and the verdict: which ranks are elsewhere, which mesh group they share, which machines to evict
 * (sched/stacks.h says why; ByteRobust's aggregated stack traces).
 */
#include "sched/stacks.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "core/check.h"
#include "parallel/mesh.h"
#include "sched/heartbeat.h"

/* ---- parsing ------------------------------------------------------------------------------- */

/* A function name without the compiler's clone suffixes (.isra.0, .constprop.1, .part.0, .cold,
 * ._omp_fn.2) or symbol versions (@@GLIBC_2.34): the name a reader finds in the source. */
static void clean_func(const char *in, char *out, size_t len) {
    size_t n = strcspn(in, ".@");
    if (n == 0) n = strlen(in); /* a name that starts with '.' is left alone */
    snprintf(out, len, "%.*s", (int)n, in);
}

/* "path/to/file.c:120:10" -> "path/to/file.c:120" (the column dropped), leading ./ and ../
 * kept as printed. */
static void clean_where(const char *in, char *out, size_t len) {
    while (*in == ' ' || *in == '\t') in++;
    snprintf(out, len, "%s", in);
    size_t n = strlen(out);
    while (n && (out[n - 1] == '\n' || out[n - 1] == '\r' || out[n - 1] == ' ')) out[--n] = 0;
    char *last = strrchr(out, ':');
    if (last && last != out) {
        char *prev = last - 1;
        while (prev > out && isdigit((unsigned char)*prev)) prev--;
        if (*prev == ':' && prev < last - 1 && isdigit((unsigned char)last[1])) *last = 0;
    }
}

static void stack_reset(stk_stack *out) {
    out->ok = 0;
    out->err[0] = 0;
    out->nframes = 0;
    out->leaf[0] = 0;
}

/* One eu-stack frame line "#N  0xADDR FUNC - MODULE": func and module, or -1. */
static int eu_frame(const char *line, char *func, size_t flen, char *module, size_t mlen) {
    const char *p = line + 1;
    while (isdigit((unsigned char)*p)) p++;
    while (*p == ' ') p++;
    if (strncmp(p, "0x", 2) != 0) return -1;
    while (*p && *p != ' ') p++;
    while (*p == ' ') p++;
    const char *dash = strstr(p, " - ");
    size_t fn = dash ? (size_t)(dash - p) : strcspn(p, "\n");
    char raw[STK_FUNC * 2];
    snprintf(raw, sizeof(raw), "%.*s", (int)fn, p);
    clean_func(raw, func, flen);
    module[0] = 0;
    if (dash) {
        snprintf(module, mlen, "%s", dash + 3);
        module[strcspn(module, "\n\r")] = 0;
    }
    return 0;
}

int stk_parse_eu_stack(const char *text, int pid, const char *exe, stk_stack *out) {
    stack_reset(out);
    /* the main thread's frames, with their modules and source lines, in a first pass */
    enum { MAXF = 128 };
    static __thread struct {
        char func[STK_FUNC], module[256], where[STK_WHERE];
    } fr[MAXF];
    int nf = 0, in_thread = 0, found = 0;
    const char *line = text;
    while (line && *line) {
        const char *next = strchr(line, '\n');
        int tid;
        if (sscanf(line, "TID %d:", &tid) == 1) {
            in_thread = tid == pid;
            found |= in_thread;
        } else if (in_thread && line[0] == '#' && nf < MAXF) {
            if (eu_frame(line, fr[nf].func, STK_FUNC, fr[nf].module, 256) == 0) {
                fr[nf].where[0] = 0;
                nf++;
            }
        } else if (in_thread && nf > 0 && (line[0] == ' ' || line[0] == '\t') &&
                   fr[nf - 1].where[0] == 0) {
            char tmp[STK_WHERE * 2];
            snprintf(tmp, sizeof(tmp), "%.*s", next ? (int)(next - line) : (int)strlen(line), line);
            clean_where(tmp, fr[nf - 1].where, STK_WHERE);
        }
        line = next ? next + 1 : NULL;
    }
    if (!found || nf == 0) {
        snprintf(out->err, sizeof(out->err), "eu-stack printed no frames of thread %d", pid);
        return -1;
    }
    const char *own = exe ? exe : fr[nf - 1].module; /* _start lives in the executable */
    snprintf(out->leaf, sizeof(out->leaf), "%s", fr[0].func);
    for (int i = 0; i < nf && out->nframes < STK_MAX_FRAMES; i++) {
        if (strcmp(fr[i].module, own) != 0 || !strcmp(fr[i].func, "_start") || !fr[i].func[0] ||
            !strcmp(fr[i].func, "??"))
            continue;
        stk_frame *f = &out->frames[out->nframes++];
        snprintf(f->func, sizeof(f->func), "%.*s", STK_FUNC - 1, fr[i].func);
        snprintf(f->where, sizeof(f->where), "%.*s", STK_WHERE - 1, fr[i].where);
    }
    if (out->nframes == 0) {
        snprintf(out->err, sizeof(out->err), "no frame of %s in thread %d", own, pid);
        return -1;
    }
    out->ok = 1;
    return 0;
}

int stk_parse_gdb(const char *text, stk_stack *out) {
    stack_reset(out);
    const char *line = text;
    int nf = 0;
    while (line && *line) {
        const char *next = strchr(line, '\n');
        char buf[1024];
        snprintf(buf, sizeof(buf), "%.*s", next ? (int)(next - line) : (int)strlen(line), line);
        line = next ? next + 1 : NULL;
        if (buf[0] != '#' || !isdigit((unsigned char)buf[1])) continue;
        const char *p = buf + 1;
        while (isdigit((unsigned char)*p)) p++;
        while (*p == ' ') p++;
        if (!strncmp(p, "0x", 2)) {
            const char *in = strstr(p, " in ");
            if (!in) continue;
            p = in + 4;
        }
        char raw[STK_FUNC * 2], func[STK_FUNC];
        snprintf(raw, sizeof(raw), "%.*s", (int)strcspn(p, " ("), p);
        clean_func(raw, func, sizeof(func));
        if (nf++ == 0) snprintf(out->leaf, sizeof(out->leaf), "%s", func);
        const char *at = strstr(p, ") at "), *from = strstr(p, ") from ");
        if (from || !strcmp(func, "??") || !strcmp(func, "_start") || out->nframes >= STK_MAX_FRAMES)
            continue;
        stk_frame *f = &out->frames[out->nframes++];
        snprintf(f->func, sizeof(f->func), "%s", func);
        f->where[0] = 0;
        if (at) clean_where(at + 5, f->where, sizeof(f->where));
    }
    if (out->nframes == 0) {
        snprintf(out->err, sizeof(out->err), "gdb printed no minitrain frame");
        return -1;
    }
    out->ok = 1;
    return 0;
}

/* ---- capture -------------------------------------------------------------------------------- */

/* Run a shell command line and keep at most cap-1 bytes of its output. Returns its exit status
 * (127 = not found), or -1 when it could not start. */
static int run_capture(const char *cmdline, char *buf, size_t cap) {
    FILE *p = popen(cmdline, "r");
    if (!p) return -1;
    size_t n = 0, r;
    char sink[4096];
    while ((r = fread(n + 1 < cap ? buf + n : sink, 1, n + 1 < cap ? cap - 1 - n : sizeof(sink),
                      p)) > 0)
        if (n + 1 < cap) n += r;
    buf[n] = 0;
    int st = pclose(p);
    return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int stk_capture(int pid, int rank, stk_stack *out) {
    stack_reset(out);
    out->rank = rank;
    out->pid = pid;
    if (pid <= 0 || kill(pid, 0) != 0) {
        snprintf(out->err, sizeof(out->err), "pid %d is not running here", pid);
        return -1;
    }
    enum { CAP = 1 << 20 };
    char *buf = malloc(CAP);
    mtCheck(buf != NULL, "out of memory");
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "timeout -k 2 10 eu-stack -m -s -i -p %d 2>&1", pid);
    int rc = run_capture(cmd, buf, CAP);
    int parsed = -1;
    char exe[4096], link[64];
    snprintf(link, sizeof(link), "/proc/%d/exe", pid);
    ssize_t el = readlink(link, exe, sizeof(exe) - 1);
    exe[el > 0 ? el : 0] = 0;
    char *del = strstr(exe, " (deleted)"); /* the binary was replaced while it ran */
    if (del) *del = 0;
    if (rc == 0 || (rc != 127 && rc != 124 && strstr(buf, "TID "))) {
        parsed = stk_parse_eu_stack(buf, pid, exe[0] ? exe : NULL, out);
    } else if (rc == 127) { /* no eu-stack: gdb */
        snprintf(cmd, sizeof(cmd), "timeout -k 2 15 gdb -nx -batch -p %d -ex bt 2>/dev/null", pid);
        rc = run_capture(cmd, buf, CAP);
        if (rc == 127)
            snprintf(out->err, sizeof(out->err), "neither eu-stack (elfutils) nor gdb is installed");
        else
            parsed = stk_parse_gdb(buf, out);
    } else {
        char first[120];
        snprintf(first, sizeof(first), "%.*s", (int)strcspn(buf, "\n"), buf);
        snprintf(out->err, sizeof(out->err), "eu-stack -p %d failed (%s): %.100s", pid,
                 rc == 124 ? "timed out" : "exit status", first);
    }
    out->rank = rank;
    out->pid = pid;
    free(buf);
    return parsed;
}

/* ---- the verdict ---------------------------------------------------------------------------- */

/* The signature two stacks are compared by: their minitrain function names, innermost first. */
static void signature(const stk_stack *s, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < s->nframes && o + 1 < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s;", s->frames[i].func);
}

static int waits_in_comm(const stk_stack *s) {
    for (int i = 0; i < s->nframes; i++)
        if (!strncmp(s->frames[i].func, "comm_", 5)) return 1;
    return 0;
}

void stk_describe(const stk_stack *s, int depth, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < s->nframes && i < depth && o + 1 < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? " ← " : "", s->frames[i].func);
    if (s->nframes > 0 && s->frames[0].where[0] && o + 1 < len)
        snprintf(buf + o, len - o, " (%s)", s->frames[0].where);
}

/* "2" or "0,1,3", at most 24 numbers then "…" */
static void rank_list(const int *r, int n, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n && o + 1 < len; i++) {
        if (i == 24) {
            snprintf(buf + o, len - o, ",… (%d ranks)", n);
            return;
        }
        o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? "," : "", r[i]);
    }
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int stk_blame_group(const stk_layout *L, int world, stk_verdict *v) {
    static const struct {
        mesh_group g;
        const char *name;
    } kinds[] = {{MESH_TP, "tp"}, {MESH_CP, "cp"}, {MESH_EP, "ep"}, {MESH_PP, "pp"},
                 {MESH_DP, "dp"}};
    int best = -1, best_size = world + 1;
    for (int k = 0; k < (int)(sizeof(kinds) / sizeof(kinds[0])); k++) {
        int color0 = 0, key, same = 1;
        for (int i = 0; i < v->noutliers && same; i++) {
            int c;
            mesh_split_key(v->outliers[i], L->tp, L->cp, L->pp, L->dp, L->ep, kinds[k].g, &c, &key);
            if (i == 0) color0 = c;
            else same = c == color0;
        }
        if (!same) continue;
        int size = 0;
        for (int r = 0; r < world; r++) {
            int c;
            mesh_split_key(r, L->tp, L->cp, L->pp, L->dp, L->ep, kinds[k].g, &c, &key);
            size += c == color0;
        }
        if (size > 1 && size < world && size < best_size) best = k, best_size = size;
    }
    if (best < 0) return 0;
    int color0, key;
    mesh_split_key(v->outliers[0], L->tp, L->cp, L->pp, L->dp, L->ep, kinds[best].g, &color0, &key);
    v->nblame = 0;
    for (int r = 0; r < world; r++) {
        int c;
        mesh_split_key(r, L->tp, L->cp, L->pp, L->dp, L->ep, kinds[best].g, &c, &key);
        if (c == color0) v->blame[v->nblame++] = r;
    }
    v->blame_kind = kinds[best].name;
    return 1;
}

/* The rank's place in the mesh, " (tp 0 pp 1 dp 0)", or "" when the layout is unknown. */
static void coords_of(int rank, const stk_layout *L, char *buf, size_t len) {
    int t, cpr, d, p, e;
    mesh_coords(rank, L->tp, L->cp, L->pp, L->dp, L->ep, &t, &cpr, &d, &p, &e);
    if (L->cp > 1) snprintf(buf, len, " (tp %d cp %d pp %d dp %d)", t, cpr, p, d);
    else snprintf(buf, len, " (tp %d pp %d dp %d)", t, p, d);
}

/* One group's sentence: "rank 2 (tp 0 pp 0 dp 2) in f ← g (file:line) for 3.1 s". */
static size_t say_group(const stk_stack *st, int n, const char *sig, const stk_layout *L,
                        char *buf, size_t len) {
    int ranks[STK_MAX_RANKS], nr = 0;
    double stuck = NAN;
    const stk_stack *rep = NULL;
    for (int i = 0; i < n; i++) {
        if (!st[i].ok) continue;
        char s2[STK_MAX_FRAMES * STK_FUNC];
        signature(&st[i], s2, sizeof(s2));
        if (strcmp(s2, sig) != 0) continue;
        ranks[nr++] = st[i].rank;
        if (!rep) rep = &st[i];
        if (isfinite(st[i].stuck_s) && !(stuck >= st[i].stuck_s)) stuck = st[i].stuck_s;
    }
    qsort(ranks, (size_t)nr, sizeof(int), cmp_int);
    char list[256], where[512], coords[48] = "", for_s[48] = "";
    rank_list(ranks, nr, list, sizeof(list));
    stk_describe(rep, 4, where, sizeof(where));
    if (nr == 1) coords_of(ranks[0], L, coords, sizeof(coords));
    if (isfinite(stuck)) snprintf(for_s, sizeof(for_s), " for %.1f s", stuck);
    return (size_t)snprintf(buf, len, "%s %s%s in %s%s", nr == 1 ? "rank" : "ranks", list, coords,
                            where, for_s);
}

int stk_verdict_of(const stk_stack *stacks, int n, const stk_layout *layout, stk_verdict *v) {
    memset(v, 0, sizeof(*v));
    v->blame_kind = "none";
    static __thread char sigs[STK_MAX_GROUPS][STK_MAX_FRAMES * STK_FUNC];
    int ncap = 0, world_max = 0;
    for (int i = 0; i < n; i++) {
        if (stacks[i].rank + 1 > world_max) world_max = stacks[i].rank + 1;
        if (!stacks[i].ok) continue;
        ncap++;
        char s[STK_MAX_FRAMES * STK_FUNC];
        signature(&stacks[i], s, sizeof(s));
        int g = 0;
        while (g < v->ngroups && strcmp(sigs[g], s) != 0) g++;
        if (g == v->ngroups) {
            if (g == STK_MAX_GROUPS) g = STK_MAX_GROUPS - 1; /* lump the rest in the last */
            else {
                snprintf(sigs[g], sizeof(sigs[g]), "%s", s);
                v->group_first[g] = i;
                v->ngroups++;
            }
        }
        v->group_size[g]++;
    }
    if (ncap == 0) {
        snprintf(v->text, sizeof(v->text), "no rank's stack could be captured%s%s",
                 n > 0 ? ": " : "", n > 0 ? stacks[0].err : "");
        return -1;
    }
    stk_layout L = *layout;
    if (L.cp <= 0) L.cp = 1;
    if (L.tp <= 0 || L.pp <= 0 || L.dp <= 0 || L.tp * L.cp * L.pp * L.dp < world_max)
        L = (stk_layout){1, 1, 1, world_max, 1};
    if (L.ep <= 0 || L.dp % L.ep != 0) L.ep = 1;
    int world = L.tp * L.cp * L.pp * L.dp;
    /* the healthy group: the largest; among equals, the one waiting in communication */
    v->normal = 0;
    for (int g = 1; g < v->ngroups; g++) {
        int a = v->group_size[g], b = v->group_size[v->normal];
        if (a > b || (a == b && waits_in_comm(&stacks[v->group_first[g]]) &&
                      !waits_in_comm(&stacks[v->group_first[v->normal]])))
            v->normal = g;
    }
    for (int i = 0; i < n; i++) {
        if (!stacks[i].ok) continue;
        char s[STK_MAX_FRAMES * STK_FUNC];
        signature(&stacks[i], s, sizeof(s));
        if (strcmp(s, sigs[v->normal]) != 0) v->outliers[v->noutliers++] = stacks[i].rank;
    }
    qsort(v->outliers, (size_t)v->noutliers, sizeof(int), cmp_int);
    size_t o = 0, cap = sizeof(v->text);
    /* the outliers' groups first, then the healthy one */
    for (int pass = 0; pass < 2; pass++)
        for (int g = 0; g < v->ngroups && o + 1 < cap; g++) {
            if ((pass == 0) == (g == v->normal)) continue;
            if (o) o += (size_t)snprintf(v->text + o, cap - o, "; ");
            if (o + 1 < cap) o += say_group(stacks, n, sigs[g], &L, v->text + o, cap - o);
        }
    if (v->noutliers == 0) {
        if (o + 1 < cap)
            snprintf(v->text + o, cap - o, " — every captured rank is in the same place: no odd "
                     "one out (a hang inside a collective, or every rank waiting on I/O)");
        return 0;
    }
    if (!stk_blame_group(&L, world, v)) {
        v->blame_kind = "rank";
        v->nblame = v->noutliers;
        memcpy(v->blame, v->outliers, sizeof(int) * (size_t)v->noutliers);
    }
    /* machines: distinct known hosts among the blamed ranks */
    const char *hosts[STK_MAX_RANKS];
    int nh = 0;
    for (int b = 0; b < v->nblame; b++)
        for (int i = 0; i < n; i++) {
            if (stacks[i].rank != v->blame[b] || !stacks[i].host[0]) continue;
            int seen = 0;
            for (int h = 0; h < nh; h++) seen |= !strcmp(hosts[h], stacks[i].host);
            if (!seen) hosts[nh++] = stacks[i].host;
        }
    v->machines = nh;
    char list[256], hl[512] = "";
    rank_list(v->blame, v->nblame, list, sizeof(list));
    size_t ho = 0;
    for (int h = 0; h < nh && ho + 1 < sizeof(hl); h++)
        ho += (size_t)snprintf(hl + ho, sizeof(hl) - ho, "%s%s", h ? "," : "", hosts[h]);
    if (o + 1 < cap) {
        if (!strcmp(v->blame_kind, "rank"))
            o += (size_t)snprintf(v->text + o, cap - o, ". Blamed: rank%s %s", v->nblame > 1 ? "s" : "",
                                  list);
        else
            o += (size_t)snprintf(v->text + o, cap - o, ". Blamed: %s %s group (ranks %s)",
                                  v->noutliers == 1 ? "its" : "their", v->blame_kind, list);
    }
    if (o + 1 < cap && nh > 0)
        snprintf(v->text + o, cap - o, " on %s — %d machine%s evicted", hl, nh, nh == 1 ? "" : "s");
    return 0;
}

/* ---- a run's ranks ------------------------------------------------------------------------- */

int stk_capture_heartbeats(const char *hb_dir, double now_unix, stk_stack *out, int max) {
    static hb_record hb[HB_MAX_RANKS];
    int n = hb_scan(hb_dir, hb, HB_MAX_RANKS);
    if (n < 0) return -1;
    if (n > max) n = max;
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    unsigned me = hb_node_id();
    for (int i = 0; i < n; i++) {
        stk_stack *s = &out[i];
        memset(s, 0, sizeof(*s));
        s->rank = hb[i].rank;
        s->pid = hb[i].pid;
        s->stuck_s = now_unix - hb[i].time;
        if (hb[i].node != me) {
            snprintf(s->err, sizeof(s->err), "rank %d runs on another host", hb[i].rank);
            continue;
        }
        snprintf(s->host, sizeof(s->host), "%s", host);
        if (strncmp(hb[i].state, "exit", 4) == 0 || !strcmp(hb[i].state, "done")) {
            snprintf(s->err, sizeof(s->err), "rank %d has finished (%s)", hb[i].rank, hb[i].state);
            continue;
        }
        double keep = s->stuck_s;
        stk_capture(hb[i].pid, hb[i].rank, s);
        s->stuck_s = keep;
        snprintf(s->host, sizeof(s->host), "%s", host);
    }
    return n;
}

int stk_layout_of_db(sqlite3 *db, stk_layout *L) {
    sqlite3_stmt *st = NULL;
    int rc = -1;
    if (!db || sqlite3_prepare_v2(db, "SELECT config FROM runs ORDER BY id DESC LIMIT 1", -1, &st,
                                  NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const char *txt = (const char *)sqlite3_column_text(st, 0);
        cJSON *c = txt ? cJSON_Parse(txt) : NULL;
        const char *keys[5] = {"tp", "pp", "dp", "ep", "cp"};
        int *dst[5] = {&L->tp, &L->pp, &L->dp, &L->ep, &L->cp}, got = 0;
        L->cp = 1; /* runs before context parallelism have no "cp" */
        for (int k = 0; k < 5; k++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(c, keys[k]);
            if (cJSON_IsNumber(x) && x->valuedouble >= 1) *dst[k] = x->valueint, got++;
        }
        rc = got >= 4 ? 0 : -1;
        cJSON_Delete(c);
    }
    sqlite3_finalize(st);
    return rc;
}

static cJSON *int_array(const int *v, int n) {
    cJSON *a = cJSON_CreateArray();
    mtCheck(a != NULL, "out of memory");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

cJSON *stk_verdict_json(const stk_stack *stacks, int n, const stk_verdict *v, double seconds) {
    cJSON *o = cJSON_CreateObject(), *ranks = cJSON_CreateArray();
    mtCheck(o != NULL && ranks != NULL, "out of memory");
    for (int i = 0; i < n; i++) {
        const stk_stack *s = &stacks[i];
        cJSON *r = cJSON_CreateObject(), *fr = cJSON_CreateArray();
        mtCheck(r != NULL && fr != NULL, "out of memory");
        cJSON_AddNumberToObject(r, "rank", s->rank);
        cJSON_AddNumberToObject(r, "pid", s->pid);
        cJSON_AddStringToObject(r, "host", s->host);
        cJSON_AddBoolToObject(r, "ok", s->ok);
        if (!s->ok) cJSON_AddStringToObject(r, "error", s->err);
        cJSON_AddStringToObject(r, "leaf", s->leaf);
        if (isfinite(s->stuck_s)) cJSON_AddNumberToObject(r, "stuck_s", s->stuck_s);
        for (int f = 0; f < s->nframes; f++) {
            cJSON *x = cJSON_CreateObject();
            mtCheck(x != NULL, "out of memory");
            cJSON_AddStringToObject(x, "func", s->frames[f].func);
            cJSON_AddStringToObject(x, "where", s->frames[f].where);
            cJSON_AddItemToArray(fr, x);
        }
        cJSON_AddItemToObject(r, "frames", fr);
        cJSON_AddItemToArray(ranks, r);
    }
    cJSON_AddItemToObject(o, "ranks", ranks);
    cJSON_AddStringToObject(o, "text", v->text);
    cJSON_AddItemToObject(o, "outliers", int_array(v->outliers, v->noutliers));
    cJSON_AddStringToObject(o, "blame_kind", v->blame_kind);
    cJSON_AddItemToObject(o, "blame", int_array(v->blame, v->nblame));
    cJSON_AddNumberToObject(o, "machines", v->machines);
    cJSON_AddNumberToObject(o, "groups", v->ngroups);
    cJSON_AddNumberToObject(o, "seconds", seconds);
    return o;
}
