/*
 * report/svg_layout.c — the parallel layout of the run (report/svg.h: svg_layout): which world
 * rank holds which (tp, cp, pp, dp, ep) coordinate, and the communication groups.
 *
 * Drawn from the latest run's config (tp, pp, dp, ep, n_layer, pp_layers, MoE keys) and world
 * size with the mesh's own pure functions (parallel/mesh.h: mesh_coords, mesh_split_key) and
 * layer split (parallel/pp.h: pp_split_layers), so the picture is the layout the trainer built,
 * not a second derivation. One panel per pipeline stage (its layers in the header), inside it a
 * dp × tp grid of ranks: a row is a TP group (solid outline), ep consecutive rows of a column an
 * EP group (dashed outline, cells shaded by ep_rank), a column the DP group, the same cell
 * across panels a PP group (arrows: activations forward, gradients back). With context
 * parallelism the rows are the (cp, dp) pairs in rank order, and cp consecutive rows of a column
 * are a CP ring (dotted outline). Every group is also listed in words below the grid. The title
 * names the ZeRO stage, the DP line what it shards, and the last line the memory budget
 * (svg_memory_load: the events of train/memory.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>

#include "core/events.h"
#include "parallel/mesh.h"
#include "parallel/pp.h"
#include "report/svg.h"
#include "report/svg_draw.h"

static int cfg_int(const cJSON *c, const char *key, int dflt) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(c, key);
    return cJSON_IsNumber(x) ? x->valueint : dflt;
}

/* "name: {0,1} {2,3} ..." of group g, into f as one <text> line (shortened past ~140 chars). */
static void group_line(FILE *f, double x, double y, const char *name, int world, int tp, int cp,
                       int pp, int dp, int ep, mesh_group g) {
    char line[400];
    size_t L = (size_t)snprintf(line, sizeof(line), "%s:", name);
    int *color = malloc(world * sizeof(int)), *key = malloc(world * sizeof(int));
    int *done = calloc(world, sizeof(int)), *members = malloc(world * sizeof(int));
    if (!color || !key || !done || !members) goto out;
    for (int r = 0; r < world; r++) mesh_split_key(r, tp, cp, pp, dp, ep, g, &color[r], &key[r]);
    for (int r = 0; r < world && L < 150; r++) {
        if (done[r]) continue;
        L += (size_t)snprintf(line + L, sizeof(line) - L, " {");
        int nm = 0; /* the group's members, by key (insertion sort: groups are small) */
        for (int q = r; q < world; q++) {
            if (done[q] || color[q] != color[r]) continue;
            int i = nm++;
            while (i > 0 && key[members[i - 1]] > key[q]) members[i] = members[i - 1], i--;
            members[i] = q;
            done[q] = 1;
        }
        for (int i = 0; i < nm && L < sizeof(line) - 16; i++)
            L += (size_t)snprintf(line + L, sizeof(line) - L, "%s%d", i ? "," : "", members[i]);
        L += (size_t)snprintf(line + L, sizeof(line) - L, "}");
    }
    int left = 0;
    for (int r = 0; r < world; r++) left += !done[r];
    if (left && L < sizeof(line) - 8) snprintf(line + L, sizeof(line) - L, " …");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"layout-groups\" data-group=\"%s\">", x, y, name);
    svgd_text(f, line);
    fputs("</text>\n", f);
out:
    free(color);
    free(key);
    free(done);
    free(members);
}

/* The shade of an ep_rank's cells. */
static const char *EPFILL[] = {"#ffffff", "#dde8f3", "#b9cfe6", "#f3e3c3", "#e6c98f",
                               "#d9d9d9", "#bdbdbd", "#a6c8a6"};

/* One rank's cell at (x, y), cw x ch with inset in: its coordinates (tr_, dr_, pr_, er_) in the
 * tooltip, shaded by ep_rank when ep > 1, labelled as the cell's size allows (with its experts
 * when the model has E of them, every moe_every layers, and the cell is tall enough). */
static void draw_rank(FILE *f, int r, int tr_, int cr_, int cp, int dr_, int pr_, int er_, int ep,
                      double x, double y, double cw, double ch, double in, int moe_every, int E) {
    char cpt[32] = "";
    if (cp > 1) snprintf(cpt, sizeof(cpt), "cp %d, ", cr_);
    fprintf(f, "<g class=\"layout-rank\" data-rank=\"%d\"><title>rank %d: tp %d, %spp %d, "
            "dp %d, ep %d</title><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
            "fill=\"%s\" stroke=\"#666\"/>", r, r, tr_, cpt, pr_, dr_, er_, x + in, y + in,
            cw - 2 * in, ch - 2 * in, ep > 1 ? EPFILL[er_ % 8] : "#ffffff");
    if (cw >= 60 && ch >= 30) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                "font-weight=\"bold\">rank %d</text>", x + cw / 2, y + in + 14, r);
        char sub[96];
        int n = cp > 1 ? snprintf(sub, sizeof(sub), "tp %d · cp %d · dp %d", tr_, cr_, dr_)
                       : snprintf(sub, sizeof(sub), "tp %d · dp %d", tr_, dr_);
        if (ep > 1) snprintf(sub + n, sizeof(sub) - n, " · ep %d", er_);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                "font-size=\"%d\">%s</text>", x + cw / 2, y + in + 28, cw > 110 ? 11 : 9, sub);
        if (moe_every > 0 && E > 0 && ch >= 62)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                    "font-size=\"9\" fill=\"#444\">experts %d–%d</text>", x + cw / 2,
                    y + in + 41, er_ * E / ep, (er_ + 1) * E / ep - 1);
    } else if (cw >= 18 && ch >= 14) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                "font-size=\"9\">%d</text>", x + cw / 2, y + ch / 2 + 3, r);
    }
    fputs("</g>\n", f);
}

/* Outlines (class cls, dashed) of every run of `span` consecutive rows of each of the tp columns,
 * over `rows` rows: EP groups, CP rings. */
static void column_groups(FILE *f, const char *cls, const char *color, const char *dash, double px,
                          double cw, double ch, double in, int tp, int rows, int span, int MT) {
    for (int t = 0; t < tp; t++)
        for (int d = 0; d < rows; d += span)
            fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                    "rx=\"7\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                    "stroke-dasharray=\"%s\"/>\n", cls, px + t * cw + in / 2, MT + d * ch + in / 2,
                    cw - in, span * ch - in, color, dash);
}

/* Stage s's group outlines (at px, pw wide; cells cw x ch, inset in; rows = cp·dp): TP groups as
 * rows, CP rings as cp consecutive rows of a column, EP groups as ep consecutive rows of a column,
 * and the PP arrows to the next stage (gap GAPX) per row. */
static void draw_groups(FILE *f, int s, double px, double pw, double cw, double ch, double in,
                        int tp, int cp, int pp, int dp, int ep, int GAPX, int MT) {
    const int rows = cp * dp;
    /* TP groups: rows */
    if (tp > 1)
        for (int d = 0; d < rows; d++)
            fprintf(f, "<rect class=\"layout-tp\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                    "height=\"%.1f\" rx=\"5\" fill=\"none\" stroke=\"%s\" stroke-width=\"2.2\"/>\n",
                    px + 0.5, MT + d * ch + 0.5, pw - 1, ch - 1, SVGD_COLORS[0]);
    /* EP groups: ep consecutive dp rows of one column */
    if (ep > 1) column_groups(f, "layout-ep", SVGD_COLORS[1], "6,3", px, cw, ch, in, tp, dp, ep, MT);
    /* CP rings: cp consecutive rows (cp_rank varies after tp_rank) of one column */
    if (cp > 1)
        column_groups(f, "layout-cp", SVGD_COLORS[2], "2,2", px, cw, ch, in, tp, rows, cp, MT);
    /* PP: arrows to the next stage, one per row */
    if (s + 1 < pp)
        for (int d = 0; d < rows; d++) {
            double y = MT + d * ch + ch / 2, x0 = px + pw + 3, x1 = px + pw + GAPX - 3;
            fprintf(f, "<path class=\"layout-pp\" d=\"M%.1f %.1f L%.1f %.1f M%.1f %.1f L%.1f "
                    "%.1f L%.1f %.1f\" stroke=\"#222\" fill=\"none\" stroke-width=\"1.5\"/>"
                    "<path d=\"M%.1f %.1f L%.1f %.1f M%.1f %.1f L%.1f %.1f L%.1f %.1f\" "
                    "stroke=\"#888\" fill=\"none\" stroke-width=\"1.2\" stroke-dasharray=\"3,2\"/>\n",
                    x0, y - 4, x1, y - 4, x1 - 6, y - 8, x1, y - 4, x1 - 6, y, x1, y + 4, x0,
                    y + 4, x0 + 6, y, x0, y + 4, x0 + 6, y + 8);
        }
}

/* The latest detail of event kind in db, parsed; NULL when there is none. */
static cJSON *latest_detail(sqlite3 *db, const char *kind) {
    sqlite3_stmt *st = NULL;
    cJSON *d = NULL;
    if (sqlite3_prepare_v2(db, "SELECT detail FROM events WHERE kind = ? AND run_id = (SELECT "
                           "MAX(id) FROM runs) ORDER BY rowid DESC LIMIT 1", -1, &st, NULL) != SQLITE_OK)
        return NULL;
    sqlite3_bind_text(st, 1, kind, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        d = cJSON_Parse((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    return d;
}

static double item_at(const cJSON *d, const char *key, int i) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(d, key);
    const cJSON *x = cJSON_IsArray(a) ? cJSON_GetArrayItem(a, i) : NULL;
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

static const char *const MEM_KEYS[9] = {EVK_PARAMS,  EVK_GRADS,     EVK_OPTIMIZER,
                                        EVK_ACTIVATIONS, EVK_COMM_BYTES, EVK_WORKSPACE,
                                        EVK_CKPT_BYTES,  EVK_RUNTIME,    EVK_TOTAL};

int svg_memory_load(sqlite3 *db, svg_memory *m) {
    memset(m, 0, sizeof(*m));
    m->peak = NAN;
    cJSON *d = latest_detail(db, EV_MEMORY);
    if (!d) return 0;
    const cJSON *tot = cJSON_GetObjectItemCaseSensitive(d, EVK_TOTAL);
    m->ranks = cJSON_IsArray(tot) ? cJSON_GetArraySize(tot) : 0;
    for (int r = 1; r < m->ranks; r++)
        if (item_at(d, EVK_TOTAL, r) > item_at(d, EVK_TOTAL, m->rank)) m->rank = r;
    for (int i = 0; i < 9; i++) m->bytes[i] = item_at(d, MEM_KEYS[i], m->rank);
    m->zero = cfg_int(d, EVK_ZERO, 0);
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(d, EVK_RECOMPUTE);
    snprintf(m->recompute, sizeof(m->recompute), "%s", cJSON_IsString(rc) ? rc->valuestring : "?");
    const cJSON *lim = cJSON_GetObjectItemCaseSensitive(d, EVK_LIMIT);
    m->limit = cJSON_IsNumber(lim) ? lim->valuedouble : 0;
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(d, EVK_FLOPS_PER_TOKEN);
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(d, EVK_RECOMPUTE_FLOPS);
    m->hfu_over_mfu = cJSON_IsNumber(fl) && cJSON_IsNumber(rf) && fl->valuedouble > 0
                          ? (fl->valuedouble + rf->valuedouble) / fl->valuedouble : NAN;
    cJSON_Delete(d);
    cJSON *p = latest_detail(db, EV_MEMORY_PEAK);
    if (p) m->peak = item_at(p, EVK_PEAK_RSS, m->rank);
    cJSON_Delete(p);
    return m->ranks > 0;
}

static const char *mib(double b, char *buf, size_t n) {
    if (b >= 1073741824.0) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else snprintf(buf, n, "%.1f MiB", b / 1048576.0);
    return buf;
}

const char *svg_memory_text(const svg_memory *m, char *buf, size_t n) {
    char a[32], b[32], c[32], d[32], e[32];
    int k = snprintf(buf, n, "zero %d, recompute %s | rank %d predicted %s (params %s, grads %s, "
                     "optimizer %s, activations %s)", m->zero, m->recompute, m->rank,
                     mib(m->bytes[8], a, sizeof(a)), mib(m->bytes[0], b, sizeof(b)),
                     mib(m->bytes[1], c, sizeof(c)), mib(m->bytes[2], d, sizeof(d)),
                     mib(m->bytes[3], e, sizeof(e)));
    if (k > 0 && (size_t)k < n && isfinite(m->peak))
        k += snprintf(buf + k, n - k, " | measured peak %s (%+.1f%%)", mib(m->peak, a, sizeof(a)),
                      100 * (m->peak / m->bytes[8] - 1));
    if (k > 0 && (size_t)k < n)
        snprintf(buf + k, n - k, " | limit %s", m->limit > 0 ? mib(m->limit, a, sizeof(a)) : "off");
    return buf;
}

/* The layout svg_layout draws: the latest run's mesh and layer split, and the picture's
 * geometry (pixels). */
typedef struct {
    int world, tp, pp, dp, ep, cp, n_layer, moe_every, E, zero, have_split;
    int begin[4097]; /* stage s holds layers begin[s] .. begin[s + 1] - 1 (pp_split_layers) */
    int W, ML, GAPX, MT, rows;
    double pw, cw, ch, in;
} layout_pic;

/* svg_layout, step 1: the latest run's config and world size; 0 when there is none or its mesh
 * does not check (mesh_check), so there is nothing to draw. */
static int layout_load(sqlite3 *db, layout_pic *L) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT config, world_size FROM runs ORDER BY id DESC LIMIT 1", -1,
                           &st, NULL) != SQLITE_OK)
        return 0;
    cJSON *c = NULL;
    int world = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        c = t ? cJSON_Parse(t) : NULL;
        world = sqlite3_column_int(st, 1);
    }
    sqlite3_finalize(st);
    if (!c || world < 1) {
        cJSON_Delete(c);
        return 0;
    }
    L->world = world;
    L->tp = cfg_int(c, "tp", 1), L->pp = cfg_int(c, "pp", 1), L->dp = cfg_int(c, "dp", 0),
    L->ep = cfg_int(c, "ep", 1), L->cp = cfg_int(c, "cp", 1), L->n_layer = cfg_int(c, "n_layer", 0),
    L->moe_every = cfg_int(c, "moe_every", 0), L->E = cfg_int(c, "n_experts", 0);
    L->zero = cfg_int(c, "zero", 0);
    char err[200];
    if (L->tp < 1 || L->pp < 1 || L->cp < 1 || world > 4096 ||
        mesh_check(world, L->tp, L->cp, L->pp, &L->dp, L->ep, err, sizeof(err)) != 0) {
        cJSON_Delete(c);
        return 0;
    }
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(c, "pp_layers");
    L->have_split = L->pp <= 4096 && L->n_layer >= L->pp &&
                    pp_split_layers(L->n_layer, L->pp, cJSON_IsString(spec) ? spec->valuestring
                                                                            : "",
                                    L->begin, err, sizeof(err)) == 0;
    cJSON_Delete(c);
    return 1;
}

/* svg_layout, step 2: the picture's opening, title (layout, ZeRO stage, ep) and the rank rule. */
static void layout_head(FILE *f, const layout_pic *L, int H) {
    char title[200], cpt[32] = "";
    if (L->cp > 1) snprintf(cpt, sizeof(cpt), "cp %d × ", L->cp);
    char zs[24] = "";
    if (L->zero) snprintf(zs, sizeof(zs), ", ZeRO-%d", L->zero);
    snprintf(title, sizeof(title), "parallel layout: %d rank%s = tp %d × %spp %d × dp %d%s",
             L->world, L->world == 1 ? "" : "s", L->tp, cpt, L->pp, L->dp, zs);
    if (L->ep > 1) {
        size_t n = strlen(title);
        snprintf(title + n, sizeof(title) - n, ", ep %d inside dp", L->ep);
    }
    svgd_begin(f, "pic-layout", L->W, H, title);
    svgd_title(f, 20, 24, title);
    if (L->cp > 1)
        fprintf(f, "<text x=\"20\" y=\"44\" fill=\"#444\">rank = tp_rank + tp·(cp_rank + "
                "cp·(dp_rank + dp·pp_rank)) (parallel/mesh.h) · a row is a TP group, cp "
                "consecutive rows of a column a CP ring, the same place in every stage a PP "
                "group</text>\n");
    else
        fprintf(f, "<text x=\"20\" y=\"44\" fill=\"#444\">rank = tp_rank + tp·(dp_rank + "
                "dp·pp_rank) (parallel/mesh.h) · a row is a TP group, a column a DP group, the "
                "same place in every stage a PP group</text>\n");
}

/* svg_layout, step 3: one panel per pipeline stage: its header, its grid of ranks, its groups. */
static void layout_stages(FILE *f, const layout_pic *L) {
    const int tp = L->tp, cp = L->cp, pp = L->pp, dp = L->dp, ep = L->ep;
    for (int s = 0; s < pp; s++) {
        double px = L->ML + s * (L->pw + L->GAPX);
        char head[96] = "";
        if (L->have_split)
            snprintf(head, sizeof(head), "stage %d: layers %d–%d%s%s", s, L->begin[s],
                     L->begin[s + 1] - 1, s == 0 ? " + embeddings" : "",
                     s == pp - 1 ? " + head" : "");
        else
            snprintf(head, sizeof(head), "stage %d", s);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" font-weight=\"bold\" text-anchor=\"middle\" "
                "font-size=\"%d\">", px + L->pw / 2, L->MT - 10, L->pw > 200 ? 13 : 10);
        svgd_text(f, head);
        fputs("</text>\n", f);
        for (int row = 0; row < L->rows; row++)
            for (int t = 0; t < tp; t++) {
                int r = mesh_rank_of(tp, cp, dp, t, row % cp, row / cp, s), tr_, cr_, dr_, pr_, er_;
                mesh_coords(r, tp, cp, pp, dp, ep, &tr_, &cr_, &dr_, &pr_, &er_);
                double x = px + t * L->cw, y = L->MT + row * L->ch;
                draw_rank(f, r, tr_, cr_, cp, dr_, pr_, er_, ep, x, y, L->cw, L->ch, L->in,
                          L->moe_every, L->E);
            }
        draw_groups(f, s, px, L->pw, L->cw, L->ch, L->in, tp, cp, pp, dp, ep, L->GAPX, L->MT);
    }
}

/* svg_layout, step 4: the legend, every group in words, and the memory budget line (mem, when
 * have_mem). */
static void layout_groups_text(FILE *f, const layout_pic *L, const svg_memory *mem, int have_mem) {
    const int world = L->world, tp = L->tp, cp = L->cp, pp = L->pp, dp = L->dp, ep = L->ep;
    double y = L->MT + L->rows * L->ch + 26, lx = 20;
    if (tp > 1) lx = svgd_legend(f, lx, y, "none", SVGD_COLORS[0], NULL, 0, "TP group (all-reduces)");
    if (cp > 1) lx = svgd_legend(f, lx, y, "none", SVGD_COLORS[2], "2,2", 0, "CP ring (K/V blocks)");
    if (ep > 1) {
        lx = svgd_legend(f, lx, y, "none", SVGD_COLORS[1], NULL, 0, "EP group (all-to-all)");
        lx = svgd_legend(f, lx, y, EPFILL[1], "#666", NULL, 0, "shade: ep_rank");
    }
    if (pp > 1) {
        lx = svgd_legend(f, lx, y, NULL, "#222", NULL, 1, "activations");
        lx = svgd_legend(f, lx, y, NULL, "#888", "3,2", 1, "gradients (PP send/recv)");
    }
    y += 20;
    group_line(f, 20, y, "TP groups", world, tp, cp, pp, dp, ep, MESH_TP);
    const char *dp_what[4] = {"DP groups (gradient all-reduce)",
                              "DP groups (ZeRO-1: gradient reduce-scatter, AdamW state sharded)",
                              "DP groups (ZeRO-2: per-block gradient reduce-scatter, gradients "
                              "and AdamW state sharded)",
                              "DP groups (ZeRO-3: per-block all-gather and reduce-scatter, "
                              "parameters, gradients and AdamW state sharded)"};
    const int zero = L->zero;
    if (cp > 1)
        group_line(f, 20, y + 18,
                   zero == 1 ? "DP x CP groups (ZeRO-1: gradient reduce-scatter, AdamW state "
                               "sharded)"
                             : "DP x CP groups (gradient all-reduce)",
                   world, tp, cp, pp, dp, ep, MESH_DPCP);
    else
        group_line(f, 20, y + 18, dp_what[zero >= 0 && zero <= 3 ? zero : 0], world, tp, cp, pp,
                   dp, ep, MESH_DP);
    group_line(f, 20, y + 36, "PP groups (one pipeline each)", world, tp, cp, pp, dp, ep, MESH_PP);
    if (ep > 1) {
        group_line(f, 20, y + 54, "EP groups", world, tp, cp, pp, dp, ep, MESH_EP);
        group_line(f, 20, y + 72, "EDP groups (same experts)", world, tp, cp, pp, dp, ep,
                   MESH_EDP);
    } else if (cp > 1) {
        group_line(f, 20, y + 54, "CP rings (ring attention)", world, tp, cp, pp, dp, ep, MESH_CP);
        group_line(f, 20, y + 72, "DP groups (which sequences)", world, tp, cp, pp, dp, ep,
                   MESH_DP);
    }
    if (have_mem) { /* the memory budget, train/memory.h */
        char line[512];
        fprintf(f, "<text x=\"20\" y=\"%.1f\">memory per rank: ", y + (ep > 1 || cp > 1 ? 90 : 54));
        svgd_text(f, svg_memory_text(mem, line, sizeof(line)));
        fputs("</text>\n", f);
    }
}

int svg_layout(sqlite3 *db, FILE *f) {
    layout_pic L;
    if (!layout_load(db, &L)) return 0;
    L.W = 960, L.ML = 20, L.GAPX = 44, L.MT = 80;
    L.pw = (L.W - 2 * L.ML - (L.pp - 1) * L.GAPX) / (double)L.pp;
    L.rows = L.cp * L.dp; /* a row per (cp, dp) pair, in rank order */
    L.cw = L.pw / L.tp, L.ch = fmin(68, fmax(18, 420.0 / L.rows));
    L.in = L.ch >= 40 && L.cw >= 60 ? 8 : 2; /* cell inset: room for the group outlines */
    svg_memory mem;
    int have_mem = svg_memory_load(db, &mem);
    const int H = (int)(L.MT + L.rows * L.ch + 46 +
                        ((L.ep > 1 ? 5 : L.cp > 1 ? 5 : 3) + have_mem) * 18);
    layout_head(f, &L, H);
    layout_stages(f, &L);
    layout_groups_text(f, &L, &mem, have_mem);
    svgd_end(f);
    return 1;
}
