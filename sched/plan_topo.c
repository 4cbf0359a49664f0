/*
 * sched/plan_topo.c — where the planner's topology comes from: flags (a uniform cluster), a
 * topology file (INI through inih; the format is in docs/placement.md), hwloc (the local node) or
 * Slurm (the nodes of the current allocation, and its switch tree when a topology plugin is
 * configured).
 *
 * Leaves are kept as indices; files and Slurm name them, so names are mapped to indices as they
 * are met (the last leaf first — a [nodes] section makes its leaves in order — then a hash
 * table: nodes_per_leaf = 1 makes a leaf per host). A file's hosts are checked for duplicates by sorting
 * their names: a [nodes] section may list up to PLAN_TOPO_MAX_NODES hosts. inih keeps a section
 * name in a 50-byte buffer and cuts a longer one without a word, so the file is read through a
 * line reader (topo_read_line) that swaps each long header for a short token and keeps its text:
 * a host name is then checked against the planner's own limit (PLAN_NAME_MAX), never cut.
 */
#include "sched/plan.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef MT_HAVE_HWLOC
#include <hwloc.h>
#endif

#include "core/check.h"
#include "core/hash.h"

void plan_topo_init(plan_topo *t) {
    memset(t, 0, sizeof(*t));
    t->scaleup_gbs = 450;
    t->intranode_gbs = 64;
    t->nic_gbs = 50;
    t->oversub = 2;
}

void plan_topo_free(plan_topo *t) {
    free(t->nodes);
    free(t->leaf_names);
    memset(t, 0, sizeof(*t));
}

int plan_topo_add(plan_topo *t, const char *name, int gpus, int domain, int rails, int leaf) {
    if (t->n_nodes == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->nodes = realloc(t->nodes, sizeof(plan_node) * (size_t)t->cap);
        mtCheck(t->nodes != NULL, "out of memory growing the topology");
    }
    plan_node *n = &t->nodes[t->n_nodes];
    memset(n, 0, sizeof(*n));
    snprintf(n->name, sizeof(n->name), "%s", name);
    n->gpus = gpus;
    n->domain = domain;
    n->rails = rails;
    n->leaf = leaf;
    if (leaf + 1 > t->n_leaves) t->n_leaves = leaf + 1;
    return t->n_nodes++;
}

void plan_topo_uniform(plan_topo *t, int n_nodes, int gpus, int nodes_per_leaf) {
    char name[PLAN_NAME_MAX];
    for (int i = 0; i < n_nodes; i++) {
        snprintf(name, sizeof(name), "node%d", i);
        plan_topo_add(t, name, gpus, gpus, gpus < 64 ? gpus : 64,
                      nodes_per_leaf > 0 ? i / nodes_per_leaf : 0);
    }
}

int plan_topo_host_leaf(const plan_topo *t, const char *host, char *name, size_t len) {
    for (int i = 0; i < t->n_nodes; i++) {
        if (strcmp(t->nodes[i].name, host) != 0) continue;
        int leaf = t->nodes[i].leaf;
        if (leaf < t->n_leaf_names) snprintf(name, len, "%s", t->leaf_names[leaf]);
        else snprintf(name, len, "leaf%d", leaf);
        return leaf;
    }
    if (len > 0) name[0] = 0;
    return -1;
}

int plan_topo_exclude(plan_topo *t, const char *list, char *err, size_t errlen) {
    char *copy = strdup(list), *save = NULL;
    mtCheck(copy != NULL, "out of memory");
    for (char *h = strtok_r(copy, ", ", &save); h; h = strtok_r(NULL, ", ", &save)) {
        int found = 0;
        for (int i = 0; i < t->n_nodes; i++)
            if (!strcmp(t->nodes[i].name, h)) t->nodes[i].excluded = found = 1;
        if (!found) {
            snprintf(err, errlen, "--exclude: no host '%s' in the topology", h);
            free(copy);
            return -1;
        }
    }
    free(copy);
    return 0;
}

/* ---- the topology file ----------------------------------------------------------------------- */

typedef struct {
    plan_topo *t;
    char err[256];
    /* the section being read: [node NAME] or [nodes PREFIX] */
    char section[128];
    int kind; /* 0 none/fabric, 1 node, 2 nodes */
    int gpus, domain, rails, count, first, per_leaf;
    char leaf[PLAN_NAME_MAX];
    char (*leaf_names)[PLAN_NAME_MAX];
    int n_leaf_names, leaf_cap;
    int *slots, slot_cap; /* leaf-name hash table (leaf_index) */
    unsigned seen; /* keys given in this section (bit per key): a repeat is an error */
    FILE *fp;      /* the file, read by topo_read_line */
    char **long_sections; /* (n_long) the text of each header swapped for "\001<index>" */
    int n_long, long_cap;
} topo_reader;

/* the most hosts a topology file may describe (as `plan --nodes`) */
#define PLAN_TOPO_MAX_NODES 1000000


/* The index of leaf `name`, added when new. An open-addressing table of indices (-1 = empty),
 * kept at most half full: a [nodes] section with nodes_per_leaf = 1 makes a leaf per host. */
static int leaf_index(topo_reader *r, const char *name) {
    if (r->n_leaf_names > 0 && !strcmp(r->leaf_names[r->n_leaf_names - 1], name))
        return r->n_leaf_names - 1;
    size_t mask = (size_t)r->slot_cap - 1;
    for (size_t h = (size_t)hash_fnv1a64_str(name) & mask; r->slot_cap && r->slots[h] >= 0;
         h = (h + 1) & mask)
        if (!strcmp(r->leaf_names[r->slots[h]], name)) return r->slots[h];
    if (r->n_leaf_names == r->leaf_cap) {
        r->leaf_cap = r->leaf_cap ? 2 * r->leaf_cap : 16;
        r->leaf_names = realloc(r->leaf_names, sizeof(*r->leaf_names) * (size_t)r->leaf_cap);
        mtCheck(r->leaf_names != NULL, "out of memory");
    }
    snprintf(r->leaf_names[r->n_leaf_names], PLAN_NAME_MAX, "%s", name);
    int idx = r->n_leaf_names++;
    if (2 * r->n_leaf_names > r->slot_cap) { /* grow and rehash every name */
        free(r->slots);
        r->slot_cap = r->slot_cap ? 2 * r->slot_cap : 64;
        r->slots = malloc(sizeof(*r->slots) * (size_t)r->slot_cap);
        mtCheck(r->slots != NULL, "out of memory");
        memset(r->slots, 0xff, sizeof(*r->slots) * (size_t)r->slot_cap);
        mask = (size_t)r->slot_cap - 1;
        for (int i = 0; i < r->n_leaf_names; i++) {
            size_t h = (size_t)hash_fnv1a64_str(r->leaf_names[i]) & mask;
            while (r->slots[h] >= 0) h = (h + 1) & mask;
            r->slots[h] = i;
        }
    } else {
        size_t h = (size_t)hash_fnv1a64_str(name) & mask;
        while (r->slots[h] >= 0) h = (h + 1) & mask;
        r->slots[h] = idx;
    }
    return idx;
}

/* Add the nodes of the section just finished. Returns 0 or -1 with r->err. */
static int flush_section(topo_reader *r) {
    if (r->kind == 0) return 0;
    const char *what = r->section;
    if (r->gpus < 1 || r->gpus > 4096) {
        snprintf(r->err, sizeof(r->err), "[%s]: gpus must be in [1, 4096]", what);
        return -1;
    }
    int domain = r->domain ? r->domain : r->gpus;
    int rails = r->rails ? r->rails : (r->gpus < 64 ? r->gpus : 64);
    if (domain < 1 || r->gpus % domain != 0) {
        snprintf(r->err, sizeof(r->err), "[%s]: domain (%d) must divide gpus (%d)", what, domain,
                 r->gpus);
        return -1;
    }
    if (rails < 1 || rails > 64 || rails > r->gpus) {
        snprintf(r->err, sizeof(r->err), "[%s]: rails must be in [1, min(64, gpus)], got %d",
                 what, rails);
        return -1;
    }
    const char *name = strchr(r->section, ' ') + 1;
    size_t name_room = PLAN_NAME_MAX - 1 - (r->kind == 2 ? 8 : 0); /* [nodes]: room for the index */
    if (strlen(name) > name_room || strpbrk(name, " \t=,") != NULL) {
        snprintf(r->err, sizeof(r->err), "[%s]: a host name must be at most %zu characters, "
                 "without spaces, '=' or ','", what, name_room);
        return -1;
    }
    long total = (long)r->t->n_nodes + (r->kind == 2 ? r->count : 1);
    if (total > PLAN_TOPO_MAX_NODES) {
        snprintf(r->err, sizeof(r->err), "[%s]: the file describes %ld hosts; at most %d",
                 what, total, PLAN_TOPO_MAX_NODES);
        return -1;
    }
    if (r->kind == 1) {
        plan_topo_add(r->t, name, r->gpus, domain, rails, leaf_index(r, r->leaf[0] ? r->leaf
                                                                                   : "default"));
    } else {
        if (r->count < 1) {
            snprintf(r->err, sizeof(r->err), "[%s]: count must be >= 1", what);
            return -1;
        }
        for (int i = 0; i < r->count; i++) {
            char nm[PLAN_NAME_MAX], lf[PLAN_NAME_MAX + 32];
            snprintf(nm, sizeof(nm), "%s%d", name, r->first + i);
            if (r->per_leaf > 0)
                snprintf(lf, sizeof(lf), "%s:leaf%d", name, i / r->per_leaf);
            else
                snprintf(lf, sizeof(lf), "%s", r->leaf[0] ? r->leaf : "default");
            plan_topo_add(r->t, nm, r->gpus, domain, rails, leaf_index(r, lf));
        }
    }
    r->kind = 0;
    return 0;
}

static int parse_num(topo_reader *r, const char *key, const char *v, double lo, double hi,
                     double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    while (*end && isspace((unsigned char)*end)) end++;
    if (end == v || *end || errno || !(x >= lo && x <= hi)) {
        snprintf(r->err, sizeof(r->err), "[%s] %s: expected a number in [%g, %g], got '%s'",
                 r->section, key, lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* inih's ini_reader: one line of r->fp, a section header of more than LONG_SECTION characters
 * replaced by "[\001<index>]" (inih would cut it at 49) with its text kept in r->long_sections;
 * the same header twice in a row gets the same token, so inih's "sections of one name run on as
 * one" still shows a repeat. */
#define LONG_SECTION 40
static char *topo_read_line(char *str, int num, void *stream) {
    topo_reader *r = stream;
    if (!fgets(str, num, r->fp)) return NULL;
    char *p = str;
    while (isspace((unsigned char)*p)) p++;
    char *end = *p == '[' ? strchr(p, ']') : NULL;
    if (!end || end - p - 1 <= LONG_SECTION) return str;
    size_t len = (size_t)(end - p - 1);
    if (r->n_long == 0 || strlen(r->long_sections[r->n_long - 1]) != len ||
        strncmp(r->long_sections[r->n_long - 1], p + 1, len) != 0) {
        if (r->n_long == r->long_cap) {
            r->long_cap = r->long_cap ? 2 * r->long_cap : 16;
            r->long_sections = realloc(r->long_sections, sizeof(char *) * (size_t)r->long_cap);
            mtCheck(r->long_sections != NULL, "out of memory");
        }
        r->long_sections[r->n_long] = strndup(p + 1, len);
        mtCheck(r->long_sections[r->n_long] != NULL, "out of memory");
        r->n_long++;
    }
    snprintf(str, (size_t)num, "[\001%d]\n", r->n_long - 1);
    return str;
}

static int on_topo_key(void *user, const char *section, const char *key, const char *value) {
    topo_reader *r = user;
    int long_no = section[0] == '\001' ? atoi(section + 1) : -1; /* a file's own "\001" is not ours */
    if (long_no >= 0 && long_no < r->n_long) section = r->long_sections[long_no];
    if (strcmp(section, r->section) != 0) {
        if (flush_section(r) != 0) return 0;
        snprintf(r->section, sizeof(r->section), "%s", section);
        r->kind = !strncmp(section, "node ", 5) && section[5] ? 1
                  : !strncmp(section, "nodes ", 6) && section[6] ? 2 : 0;
        if (r->kind == 0 && strcmp(section, "fabric") != 0) {
            snprintf(r->err, sizeof(r->err), "unknown section [%s] (expected [fabric], "
                     "[node NAME] or [nodes PREFIX])", section);
            return 0;
        }
        r->gpus = r->domain = r->rails = r->count = r->first = r->per_leaf = 0;
        r->leaf[0] = 0;
        r->seen = 0;
    }
    /* inih runs two sections of one name on as one: a key given twice is how a repeat shows */
    static const char *const keys[] = {"gpus", "domain", "rails", "count", "first",
                                       "nodes_per_leaf", "leaf", "scaleup_gbs", "intranode_gbs",
                                       "nic_gbs", "oversubscription"};
    for (unsigned k = 0; k < sizeof(keys) / sizeof(keys[0]); k++)
        if (!strcmp(key, keys[k])) {
            if (r->seen & (1u << k)) {
                snprintf(r->err, sizeof(r->err), "[%s]: '%s' given twice (or the section is "
                         "repeated: a host listed twice)", section, key);
                return 0;
            }
            r->seen |= 1u << k;
        }
    double x;
    if (r->kind == 0) {
        double *dst = !strcmp(key, "scaleup_gbs") ? &r->t->scaleup_gbs
                      : !strcmp(key, "intranode_gbs") ? &r->t->intranode_gbs
                      : !strcmp(key, "nic_gbs") ? &r->t->nic_gbs
                      : !strcmp(key, "oversubscription") ? &r->t->oversub : NULL;
        if (!dst) {
            snprintf(r->err, sizeof(r->err), "[fabric]: unknown key '%s' (scaleup_gbs, "
                     "intranode_gbs, nic_gbs, oversubscription)", key);
            return 0;
        }
        return parse_num(r, key, value, dst == &r->t->oversub ? 1 : 1e-6, 1e9, dst) == 0;
    }
    if (!strcmp(key, "leaf")) {
        snprintf(r->leaf, sizeof(r->leaf), "%s", value);
        return 1;
    }
    int *dst = !strcmp(key, "gpus") ? &r->gpus : !strcmp(key, "domain") ? &r->domain
               : !strcmp(key, "rails") ? &r->rails
               : r->kind == 2 && !strcmp(key, "count") ? &r->count
               : r->kind == 2 && !strcmp(key, "first") ? &r->first
               : r->kind == 2 && !strcmp(key, "nodes_per_leaf") ? &r->per_leaf : NULL;
    if (!dst) {
        snprintf(r->err, sizeof(r->err), "[%s]: unknown key '%s' (gpus, domain, rails, leaf%s)",
                 section, key, r->kind == 2 ? ", count, first, nodes_per_leaf" : "");
        return 0;
    }
    if (parse_num(r, key, value, 0, 1e7, &x) != 0 || x != (int)x) {
        if (!r->err[0])
            snprintf(r->err, sizeof(r->err), "[%s] %s: expected an integer, got '%s'", section,
                     key, value);
        return 0;
    }
    *dst = (int)x;
    return 1;
}

/* inih reports the first bad line, whether its own syntax error or our handler's refusal, and
 * parses on: r->err may be a later line's. Returns 1 when line `lineno` of path is itself a
 * syntax error (a section header without ']', a line with neither '=' nor ':'), with its text. */
static int topo_syntax_line(const char *path, int lineno, char *text, size_t len) {
    FILE *fp = fopen(path, "r");
    if (fp == NULL) return 0;
    char line[512];
    int n = 0, bad = 0;
    while (fgets(line, sizeof(line), fp))
        if (++n == lineno) {
            line[strcspn(line, "\r\n")] = 0;
            const char *p = line;
            while (isspace((unsigned char)*p)) p++;
            bad = *p == '[' ? strchr(p, ']') == NULL : strpbrk(p, "=:") == NULL;
            mt_escape(p, MT_ESCAPE_LINE, text, len); /* a binary file: \xNN, not raw bytes */
            break;
        }
    fclose(fp);
    return bad;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int plan_topo_load(plan_topo *t, const char *path, char *err, size_t errlen) {
    struct stat sb; /* fopen opens a directory and reading it fails: say what it is */
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "topology '%s' is a directory, not a topology file", path);
        return -1;
    }
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(err, errlen, "cannot read topology %s: %s", path, strerror(errno));
        return -1;
    }
    topo_reader r = {.t = t, .fp = fp};
    int rc = ini_parse_stream(topo_read_line, &r, on_topo_key, &r);
    fclose(fp);
    for (int i = 0; i < r.n_long; i++) free(r.long_sections[i]);
    free(r.long_sections);
    if (rc == 0 && flush_section(&r) != 0) rc = -2;
    free(r.slots);
    free(t->leaf_names); /* a file names every leaf its nodes use: keep the names */
    t->leaf_names = r.leaf_names;
    t->n_leaf_names = r.n_leaf_names;
    if (rc != 0) {
        char text[128], shown[sizeof(r.err) * 4];
        mt_escape(r.err, sizeof(shown) - 4, shown, sizeof(shown)); /* a section's bytes: \xNN */
        if (rc > 0 && topo_syntax_line(path, rc, text, sizeof(text)))
            snprintf(err, errlen, "%s:%d: cannot parse '%s' (%s)", path, rc, text,
                     text[0] == '[' ? "a section header ends in ']'" : "expected key = value");
        else if (rc > 0)
            snprintf(err, errlen, "%s:%d: %s", path, rc, r.err[0] ? shown : "syntax error");
        else
            snprintf(err, errlen, "%s: %s", path, r.err[0] ? shown : "cannot parse");
        return -1;
    }
    if (t->n_nodes == 0) {
        snprintf(err, errlen, "%s: no [node NAME] or [nodes PREFIX] section", path);
        return -1;
    }
    const char **names = malloc(sizeof(*names) * (size_t)t->n_nodes);
    mtCheck(names != NULL, "out of memory checking the host names");
    for (int i = 0; i < t->n_nodes; i++) names[i] = t->nodes[i].name;
    qsort(names, (size_t)t->n_nodes, sizeof(*names), cmp_name);
    int dup = -1;
    for (int i = 1; i < t->n_nodes && dup < 0; i++)
        if (!strcmp(names[i - 1], names[i])) dup = i;
    if (dup >= 0) snprintf(err, errlen, "%s: host %s is listed twice", path, names[dup]);
    free(names);
    return dup >= 0 ? -1 : 0;
}

/* ---- hwloc ------------------------------------------------------------------------------------ */

int plan_topo_from_hwloc(plan_topo *t, char *err, size_t errlen) {
#ifdef MT_HAVE_HWLOC
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) {
        snprintf(err, errlen, "hwloc: cannot initialise a topology");
        return -1;
    }
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        snprintf(err, errlen, "hwloc: cannot load this machine's topology");
        return -1;
    }
    int gpus = 0, nics = 0;
    for (hwloc_obj_t o = NULL; (o = hwloc_get_next_osdev(topo, o)) != NULL;) {
        if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC ||
            (o->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU && o->name &&
             (!strncmp(o->name, "nvml", 4) || !strncmp(o->name, "rsmi", 4))))
            gpus++;
        if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) nics++;
    }
    int cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    int packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
    int numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    hwloc_topology_destroy(topo);
    int slots = gpus > 0 ? gpus : (cores > 0 ? cores : 1);
    /* GPUs: one NVLink domain assumed (hwloc does not see NVSwitch); CPU slots: a package shares
     * its memory, so one domain per package when the cores divide evenly */
    int domain = gpus > 0 ? gpus : (packages > 0 && slots % packages == 0 ? slots / packages
                                                                            : slots);
    int rails = nics > 0 ? (nics < slots ? nics : slots) : 1;
    if (rails > 64) rails = 64;
    char host[PLAN_NAME_MAX] = "localhost";
    gethostname(host, sizeof(host) - 1);
    plan_topo_add(t, host, slots, domain, rails, 0);
    fprintf(stderr, "plan: hwloc: %s: %d %s, %d package(s), %d NUMA node(s), %d RDMA NIC(s)\n",
            host, slots, gpus > 0 ? "GPU(s)" : "cores (no GPU seen: CPU slots)", packages, numa,
            nics);
    (void)err;
    (void)errlen;
    return 0;
#else
    (void)t;
    snprintf(err, errlen, "--from-hwloc: minitrain was built without libhwloc (apt-get install "
             "libhwloc-dev, then make)");
    return -1;
#endif
}

/* ---- Slurm ------------------------------------------------------------------------------------ */

/* A hostlist expression is passed to a shell: accept only hostname characters and brackets. */
static int hostlist_ok(const char *s) {
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("[]-,._", *s)) return 0;
    return 1;
}

/* Expand a Slurm hostlist ("n[1-3],gpu7") through `scontrol show hostnames`; calls fn per host. */
static int expand_hostlist(const char *list, void (*fn)(void *, const char *), void *ctx) {
    if (!hostlist_ok(list)) return -1;
    char cmd[4200];
    snprintf(cmd, sizeof(cmd), "scontrol show hostnames '%s' 2>/dev/null", list);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[256];
    int n = 0;
    while (fgets(line, sizeof(line), p)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0]) {
            fn(ctx, line);
            n++;
        }
    }
    return pclose(p) == 0 && n > 0 ? n : -1;
}

/* Slots of the i-th node from SLURM_JOB_CPUS_PER_NODE's "4(x3),2" run-length form. */
static int cpus_of_node(const char *spec, int i) {
    int seen = 0;
    while (spec && *spec) {
        char *end;
        long v = strtol(spec, &end, 10), rep = 1;
        if (end == spec) return -1;
        if (!strncmp(end, "(x", 2)) {
            rep = strtol(end + 2, &end, 10);
            if (*end == ')') end++;
        }
        if (i < seen + rep) return (int)v;
        seen += (int)rep;
        spec = *end == ',' ? end + 1 : end;
    }
    return -1;
}

typedef struct {
    plan_topo *t;
    int idx, leaf;
    const char *cpus;
    int fixed;
    int bad;
} slurm_ctx;

static void add_slurm_node(void *vctx, const char *host) {
    slurm_ctx *c = vctx;
    int slots = c->fixed > 0 ? c->fixed : cpus_of_node(c->cpus, c->idx);
    if (slots < 1) {
        c->bad = 1;
        slots = 1;
    }
    plan_topo_add(c->t, host, slots, slots, slots < 64 ? slots : 64, 0);
    c->idx++;
}

static void set_leaf(void *vctx, const char *host) {
    slurm_ctx *c = vctx;
    for (int i = 0; i < c->t->n_nodes; i++)
        if (!strcmp(c->t->nodes[i].name, host)) c->t->nodes[i].leaf = c->leaf;
}

/* Leaves from `scontrol show topology`: each Level=0 switch's Nodes=... becomes one leaf. */
static void slurm_leaves(plan_topo *t) {
    FILE *p = popen("scontrol show topology 2>/dev/null", "r");
    if (!p) return;
    char line[4096];
    slurm_ctx c = {.t = t};
    int leaves = 0;
    while (fgets(line, sizeof(line), p)) {
        const char *lv = strstr(line, "Level=0"), *nodes = strstr(line, "Nodes=");
        if (!lv || !nodes) continue;
        char list[4096];
        snprintf(list, sizeof(list), "%s", nodes + 6);
        list[strcspn(list, " \r\n")] = 0;
        c.leaf = leaves;
        if (expand_hostlist(list, set_leaf, &c) > 0) leaves++;
    }
    pclose(p);
    if (leaves > 0) t->n_leaves = leaves;
}

int plan_topo_from_slurm(plan_topo *t, char *err, size_t errlen) {
    const char *list = getenv("SLURM_JOB_NODELIST");
    if (!list) list = getenv("SLURM_NODELIST");
    if (!list || !*list) {
        snprintf(err, errlen, "--from-slurm: not inside a Slurm allocation (SLURM_JOB_NODELIST "
                 "is unset; run under salloc or sbatch)");
        return -1;
    }
    slurm_ctx c = {.t = t, .cpus = getenv("SLURM_JOB_CPUS_PER_NODE")};
    const char *g = getenv("SLURM_GPUS_ON_NODE"), *tpn = getenv("SLURM_NTASKS_PER_NODE");
    c.fixed = g && atoi(g) > 0 ? atoi(g) : tpn && atoi(tpn) > 0 ? atoi(tpn) : 0;
    if (expand_hostlist(list, add_slurm_node, &c) < 0) {
        snprintf(err, errlen, "--from-slurm: cannot expand SLURM_JOB_NODELIST '%s' with "
                 "`scontrol show hostnames` (is scontrol on PATH?)", list);
        return -1;
    }
    if (c.bad) {
        snprintf(err, errlen, "--from-slurm: cannot tell the slots per node (set "
                 "SLURM_NTASKS_PER_NODE, or request GPUs)");
        return -1;
    }
    t->n_leaves = 1;
    slurm_leaves(t);
    return 0;
}
