/*
 * report/svg_draw.c — shared drawing helpers of the report's pictures (report/svg_draw.h).
 */
#include "report/svg_draw.h"

#include <math.h>
#include <stdio.h>

/* Paul Tol's "high contrast" scheme (blue, red, yellow: three distinct greys by design) then
 * black, cyan and a mid grey: dark → light, so series stay apart when printed in greyscale. */
const char *const SVGD_COLORS[6] = {"#004488", "#BB5566", "#DDAA33", "#222222", "#66CCEE",
                                    "#888888"};

void svgd_shade(int i, int n, char *buf, size_t len) {
    double t = n > 1 ? (double)i / (n - 1) : 1.0;
    int r = (int)(158 - t * (158 - 8)), g = (int)(202 - t * (202 - 48)), b = (int)(225 - t * (225 - 107));
    snprintf(buf, len, "#%02x%02x%02x", r, g, b);
}

double svgd_x(const svgd_frame *fr, double v) {
    return fr->x0 + (v - fr->xlo) / (fr->xhi - fr->xlo) * fr->w;
}

double svgd_y(const svgd_frame *fr, double v) {
    return fr->y0 + (fr->yhi - v) / (fr->yhi - fr->ylo) * fr->h;
}

double svgd_nice_step(double range, int target) {
    if (!(range > 0) || !isfinite(range)) return 1;
    double raw = range / target, p = pow(10, floor(log10(raw))), q = raw / p;
    return (q < 1.5 ? 1 : q < 3.5 ? 2 : q < 7.5 ? 5 : 10) * p;
}

void svgd_range(double *lo, double *hi, double pad) {
    if (!isfinite(*lo) || !isfinite(*hi)) *lo = 0, *hi = 1;
    if (*hi - *lo < 1e-12) {
        double d = fabs(*lo) > 0 ? 0.05 * fabs(*lo) : 1;
        *lo -= d;
        *hi += d;
    }
    double d = pad * (*hi - *lo);
    *lo -= d;
    *hi += d;
}

void svgd_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

void svgd_begin(FILE *f, const char *id, int w, int h, const char *title) {
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"%s\" class=\"mt-picture\" "
            "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
            "font-size=\"12\">\n<title>", id, w, h, w, h);
    svgd_text(f, title);
    fprintf(f, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", w, h);
}

void svgd_end(FILE *f) { fputs("</svg>\n", f); }

void svgd_patterns(FILE *f, const char *id) {
    fprintf(f, "<defs><pattern id=\"%s-hatch\" width=\"6\" height=\"6\" "
            "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
            "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#333\" stroke-width=\"1.2\"/>"
            "</pattern><pattern id=\"%s-dots\" width=\"5\" height=\"5\" "
            "patternUnits=\"userSpaceOnUse\"><rect width=\"5\" height=\"5\" fill=\"#f2f2f2\"/>"
            "<circle cx=\"2.5\" cy=\"2.5\" r=\"0.8\" fill=\"#999\"/></pattern></defs>\n", id, id);
}

void svgd_axes(FILE *f, const svgd_frame *fr, const char *xlabel, const char *ylabel,
               const char *xfmt, const char *yfmt) {
    double xs = svgd_nice_step(fr->xhi - fr->xlo, 8), ys = svgd_nice_step(fr->yhi - fr->ylo, 5);
    char buf[64];
    for (double v = ceil(fr->ylo / ys - 1e-9) * ys; v <= fr->yhi + 1e-9 * ys; v += ys) {
        double y = svgd_y(fr, v);
        snprintf(buf, sizeof(buf), yfmt, fabs(v) < 1e-12 * ys ? 0.0 : v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", fr->x0, y,
                fr->x0 + fr->w, y, fr->x0 - 5, y + 4, buf);
    }
    for (double v = ceil(fr->xlo / xs - 1e-9) * xs; v <= fr->xhi + 1e-9 * xs; v += xs) {
        double x = svgd_x(fr, v);
        snprintf(buf, sizeof(buf), xfmt, fabs(v) < 1e-12 * xs ? 0.0 : v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, fr->y0, x,
                fr->y0 + fr->h, x, fr->y0 + fr->h + 15, buf);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"#333\"/>\n", fr->x0, fr->y0, fr->w, fr->h);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", fr->x0 + fr->w / 2,
            fr->y0 + fr->h + 32);
    svgd_text(f, xlabel);
    double yc = fr->y0 + fr->h / 2, xc = fr->x0 - 60;
    fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 %.1f %.1f)\">", xc, yc, xc, yc);
    svgd_text(f, ylabel);
    fputs("</text>\n", f);
}

void svgd_title(FILE *f, double x, double y, const char *text) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" font-weight=\"bold\">", x, y);
    svgd_text(f, text);
    fputs("</text>\n", f);
}

double svgd_legend(FILE *f, double x, double y, const char *fill, const char *stroke,
                   const char *dash, int line, const char *label) {
    if (line)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"2.5\"%s%s%s/>", x, y - 4, x + 22, y - 4, stroke,
                dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
    else
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"22\" height=\"12\" fill=\"%s\" "
                "stroke=\"%s\"/>", x, y - 10, fill, stroke ? stroke : "#333");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", x + 27, y);
    svgd_text(f, label);
    fputs("</text>\n", f);
    /* about 6.5 px per character at font-size 12 */
    size_t n = 0;
    for (const char *s = label; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return x + 27 + 6.5 * (double)n + 16;
}
