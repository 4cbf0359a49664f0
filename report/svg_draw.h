/*
 * report/svg_draw.h — the few drawing helpers every picture of `minitrain report` shares (axes with
 * "nice" ticks, legend swatches, escaped text, the greyscale-safe palette and hatch patterns).
 * Internal to report/svg*.c: the module's face is report/svg.h.
 *
 * Why these and no more: each picture is a handful of rects, lines and texts printed with
 * fprintf; what they must agree on is how an axis looks, which colours mean what, and that the
 * colours still read when printed in greyscale (so every series also differs in lightness, dash
 * or hatch, and the palette below is ordered dark → light).
 */
#ifndef MT_SCHED_SVG_DRAW_H
#define MT_SCHED_SVG_DRAW_H

#include <stdio.h>

/* Paul Tol's "bright" qualitative scheme reordered by lightness (dark first): distinct for
 * colour-blind readers and, in this order, distinct in greyscale. */
extern const char *const SVGD_COLORS[6];

/* Colour i of a sequential ramp of n (light blue #9ecae1 → dark blue #08306b, linear in RGB, as
 * ColorBrewer's "Blues" ends): for ordered series such as evaluations at increasing steps.
 * Writes "#rrggbb" into buf[len]; n <= 1 gives the dark end. */
void svgd_shade(int i, int n, char *buf, size_t len);

/* A plot region in pixels and the data ranges it maps. */
typedef struct {
    double x0, y0, w, h;     /* pixels: left, top, width, height */
    double xlo, xhi, ylo, yhi; /* data */
} svgd_frame;

double svgd_x(const svgd_frame *fr, double v);
double svgd_y(const svgd_frame *fr, double v);

/* 1, 2 or 5 × 10^k, about range/target. */
double svgd_nice_step(double range, int target);

/* Widen [*lo, *hi] to a non-empty range padded by pad (a fraction of it). */
void svgd_range(double *lo, double *hi, double pad);

/* Open an <svg> element of w × h with a white background, id, and a <title> (tooltips, and what
 * a screen reader says). Closed by svgd_end. */
void svgd_begin(FILE *f, const char *id, int w, int h, const char *title);
void svgd_end(FILE *f);

/* Hatch patterns, defined once per <svg> (ids prefixed with id so that several pictures inline in
 * one HTML page do not collide): "<id>-hatch" diagonal lines, "<id>-dots" a dot grid. */
void svgd_patterns(FILE *f, const char *id);

/* Grid, frame, ticks and the two axis labels (with units) of fr. xfmt/yfmt: printf formats of
 * the tick labels ("%g"). */
void svgd_axes(FILE *f, const svgd_frame *fr, const char *xlabel, const char *ylabel,
               const char *xfmt, const char *yfmt);

/* Bold title at (x, y). */
void svgd_title(FILE *f, double x, double y, const char *text);

/* One legend entry at (x, y): a swatch (fill: a colour or "url(#...)", stroke, dash or NULL)
 * and its label; returns the x after it, for the next entry. line = 1 draws a line, not a box. */
double svgd_legend(FILE *f, double x, double y, const char *fill, const char *stroke,
                   const char *dash, int line, const char *label);

/* Print s with &, <, >, " escaped (XML text and attribute values). */
void svgd_text(FILE *f, const char *s);

#endif /* MT_SCHED_SVG_DRAW_H */
