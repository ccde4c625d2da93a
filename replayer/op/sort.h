/* op/sort.h — what the sort family's ops mean, for both backends
 * (cpu/cpu_sort.c, cuda/sort.cu): sort (and mode, which sorts first), the
 * scans cummax / cummin / logcumsumexp / cumprod, searchsorted and histc.
 * The per-element and per-line math is OP_FN here, so both backends run the
 * very same code and give the same bits; the checks live in op/sort.c.
 *
 * Sorting is a bottom-up merge sort of (key, index) pairs per line, stable,
 * where each pass moves every element on its own (op_sort_merge_at: its
 * rank in its run plus a binary search in the sibling run), so the CUDA
 * backend runs a pass as one thread per element and the CPU as a loop.
 * Keys are order-preserving u64 images of the elements (op_sort_key): NaN is
 * the greatest (ATen's order), -0.0 equals 0.0, descending is the complement. */
#ifndef RGPU_OP_SORT_H
#define RGPU_OP_SORT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "dtype.h"
#include "error.h"
#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Lines: the elements of every dim but one, as element offsets into up to
 * OP_SORT_NV views of one shape. */

#define OP_SORT_NV 4
typedef struct op_sort_lines {
    int nd;                                  /* dims other than the op's dim */
    int64_t total;                           /* number of lines */
    int64_t sz[RGPU_MAX_DIMS];
    int64_t st[OP_SORT_NV][RGPU_MAX_DIMS];   /* element strides */
} op_sort_lines;

OP_FN void op_sort_line_offs(const op_sort_lines *L, int nv, int64_t l, int64_t *off)
{
    for (int v = 0; v < nv; v++) off[v] = 0;
    for (int d = L->nd - 1; d >= 0; d--) {
        int64_t i = l % L->sz[d];
        l /= L->sz[d];
        for (int v = 0; v < nv; v++) off[v] += i * L->st[v][d];
    }
}

/* ---------------------------------------------------------------------------
 * Keys and the merge pass */

OP_FN uint64_t op_sort_key(const char *p, int dt, bool desc)
{
    uint64_t k;
    if (op_dtype_is_float(dt)) {
        double d = op_load_f64(p, dt);
        if (d != d) {
            k = ~(uint64_t)0;
        } else {
            if (d == 0) d = 0.0;
            uint64_t b;
            memcpy(&b, &d, sizeof b);
            k = (b >> 63) ? ~b : b | ((uint64_t)1 << 63);
        }
    } else if (dt == RGPU_U8 || dt == RGPU_BOOL) {
        k = op_load_u64(p, dt);
    } else {
        k = op_load_u64(p, dt) ^ ((uint64_t)1 << 63);
    }
    return desc ? ~k : k;
}

/* The double an ascending float key came from (NaN's key gives NaN). */
OP_FN double op_sort_key_f64(uint64_t k)
{
    if (k == ~(uint64_t)0) return NAN;
    uint64_t b = (k >> 63) ? k & ~((uint64_t)1 << 63) : ~k;
    double d;
    memcpy(&d, &b, sizeof d);
    return d;
}

/* Passes of the merge sort of n elements (runs of 1, 2, 4 ... < n). */
OP_FN int op_sort_passes(int64_t n)
{
    int p = 0;
    for (int64_t w = 1; w < n; w *= 2) p++;
    return p;
}

/* One element i of the pass merging runs of width w of the line (ks, is)
 * into (kd, id): its place is its rank in its run plus the sibling run's
 * elements that go first (equal keys: the left run's first, so stable). */
OP_FN void op_sort_merge_at(const uint64_t *ks, const int64_t *is, uint64_t *kd, int64_t *id,
                            int64_t n, int64_t w, int64_t i)
{
    int64_t lo = i / (2 * w) * (2 * w);
    int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
    uint64_t k = ks[i];
    bool left = i < mid;
    int64_t a = left ? mid : lo, b = left ? hi : mid;
    while (a < b) {
        int64_t m = a + (b - a) / 2;
        if (ks[m] < k || (!left && ks[m] == k)) a = m + 1;
        else b = m;
    }
    int64_t pos = left ? lo + (i - lo) + (a - mid) : lo + (i - mid) + (a - lo);
    kd[pos] = k;
    id[pos] = is[i];
}

/* The same pass for the pair of runs starting at lo, sequentially (the CPU's
 * way: O(n) a pass); the result equals op_sort_merge_at's for each element. */
OP_FN void op_sort_merge_run(const uint64_t *ks, const int64_t *is, uint64_t *kd, int64_t *id,
                             int64_t n, int64_t w, int64_t lo)
{
    int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
    int64_t a = lo, b = mid, o = lo;
    while (a < mid && b < hi) {
        if (ks[b] < ks[a]) { kd[o] = ks[b]; id[o++] = is[b++]; }
        else { kd[o] = ks[a]; id[o++] = is[a++]; }
    }
    while (a < mid) { kd[o] = ks[a]; id[o++] = is[a++]; }
    while (b < hi) { kd[o] = ks[b]; id[o++] = is[b++]; }
}

/* mode of a line sorted ascending: the position (in the sorted line) of the
 * last element of the first longest run of equal keys (ATen: the smallest
 * most frequent value, the index of its last occurrence). n > 0. */
OP_FN int64_t op_sort_mode_pos(const uint64_t *k, int64_t n)
{
    int64_t best = 0, maxf = 0, f = 0;
    for (int64_t i = 0; i < n; i++) {
        f++;
        if (i == n - 1 || k[i] != k[i + 1]) {
            if (f > maxf) { maxf = f; best = i; }
            f = 0;
        }
    }
    return best;
}

/* ---------------------------------------------------------------------------
 * Scans along a line (byte strides): cummax / cummin (values + int64
 * indices), logcumsumexp, cumprod (each element cast to out's dtype first,
 * accumulated in double for f32/f64, float for f16/bf16, int64 (wrapping)
 * for integers, "and" for bool), as ATen's CPU kernels. */

enum { OP_SCAN_CUMMAX, OP_SCAN_CUMMIN, OP_SCAN_LOGCUMSUMEXP, OP_SCAN_CUMPROD };

OP_FN double op_scan_lae_d(double x, double y)
{
    double mn = y != y ? y : (y < x ? y : x);
    double mx = y != y ? y : (x < y ? y : x);
    if (mn != mx || isfinite(mn)) return log1p(exp(mn - mx)) + mx;
    return x;
}

OP_FN float op_scan_lae_f(float x, float y)
{
    float mn = y != y ? y : (y < x ? y : x);
    float mx = y != y ? y : (x < y ? y : x);
    if (mn != mx || isfinite(mn)) return log1pf(expf(mn - mx)) + mx;
    return x;
}

OP_FN void op_scan_line(int kind, const char *in, int64_t is, int idt, char *out, int64_t os, int odt,
                        char *ix, int64_t xs, int64_t n)
{
    if (n <= 0) return;
    int ie = op_dtype_esize(idt);
    if (kind == OP_SCAN_CUMMAX || kind == OP_SCAN_CUMMIN) {
        bool mx = kind == OP_SCAN_CUMMAX;
        int64_t bi = 0;
        if (op_dtype_is_float(idt)) {
            double best = op_load_f64(in, idt);
            for (int64_t i = 0; i < n; i++) {
                double x = op_load_f64(in + i * is, idt);
                if (x != x || (best == best && (mx ? x >= best : x <= best))) { best = x; bi = i; }
                op_elem_copy(out + i * os, in + bi * is, ie);
                *(int64_t *)(ix + i * xs) = bi;
            }
        } else {
            bool u = idt == RGPU_U8 || idt == RGPU_BOOL;
            uint64_t best = op_load_u64(in, idt);
            for (int64_t i = 0; i < n; i++) {
                uint64_t x = op_load_u64(in + i * is, idt);
                bool take = u ? (mx ? x >= best : x <= best)
                              : (mx ? (int64_t)x >= (int64_t)best : (int64_t)x <= (int64_t)best);
                if (take) { best = x; bi = i; }
                op_elem_copy(out + i * os, in + bi * is, ie);
                *(int64_t *)(ix + i * xs) = bi;
            }
        }
        return;
    }
    if (kind == OP_SCAN_LOGCUMSUMEXP) {
        if (odt == RGPU_F16 || odt == RGPU_BF16) {
            float acc = -INFINITY;
            for (int64_t i = 0; i < n; i++) {
                acc = op_scan_lae_f(op_load_f32(in + i * is, idt), acc);
                op_store_f32(out + i * os, odt, acc);
            }
        } else {
            double acc = -INFINITY;
            for (int64_t i = 0; i < n; i++) {
                acc = op_scan_lae_d(op_load_f64(in + i * is, idt), acc);
                op_store_f64(out + i * os, odt, acc);
            }
        }
        return;
    }
    /* cumprod */
    double accd = 1.0;
    float accf = 1.0f;
    uint64_t accu = 1;
    for (int64_t i = 0; i < n; i++) {
        char v[16];   /* the element cast to out's dtype */
        op_elem_convert(v, odt, in + i * is, idt);
        char *o = out + i * os;
        switch (odt) {
        case RGPU_F32: case RGPU_F64:
            accd *= op_load_f64(v, odt);
            op_store_f64(o, odt, accd);
            break;
        case RGPU_F16: case RGPU_BF16:
            accf *= op_load_f32(v, odt);
            op_store_f32(o, odt, accf);
            break;
        case RGPU_BOOL:
            accu = accu && op_load_bool(v, odt);
            op_store_u64(o, odt, accu);
            break;
        default:
            accu *= op_load_u64(v, odt);
            op_store_u64(o, odt, accu);
            break;
        }
    }
}

/* ---------------------------------------------------------------------------
 * searchsorted: the insertion point of the value at v in the boundaries row
 * bd (n elements, byte stride bs), through sorter (int64, byte stride ss)
 * when given; right: after equal elements. As ATen: a NaN value goes last.
 * Compared as int64 when both dtypes are integral, else as double. */

OP_FN int64_t op_searchsorted_one(const char *bd, int64_t bs, int bdt, const char *sorter, int64_t ss,
                                  int64_t n, const char *v, int vdt, bool right)
{
    bool fl = op_dtype_is_float(bdt) || op_dtype_is_float(vdt);
    double vd = fl ? op_load_f64(v, vdt) : 0.0;
    int64_t vi = fl ? 0 : (int64_t)op_load_u64(v, vdt);
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + ((hi - lo) >> 1);
        int64_t at = sorter ? *(const int64_t *)(sorter + mid * ss) : mid;
        const char *p = bd + at * bs;
        bool go;
        if (fl) {
            double m = op_load_f64(p, bdt);
            go = right ? !(m > vd) : !(m >= vd);
        } else {
            int64_t m = (int64_t)op_load_u64(p, bdt);
            go = right ? !(m > vi) : !(m >= vi);
        }
        if (go) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* ---------------------------------------------------------------------------
 * histc: the bin of x among bins equal bins over [lo, hi] (lo < hi), or -1
 * when x is outside (NaN too). As ATen's linear-interpolation histogram: the
 * arithmetic in the input's type (float for f32/f16/bf16, double for f64),
 * the last bin closed. */

OP_FN int64_t op_histc_bin(const char *p, int dt, double lo, double hi, int64_t bins)
{
    int64_t pos;
    if (dt == RGPU_F64) {
        double x = op_load_f64(p, dt);
        if (!(x >= lo && x <= hi)) return -1;
        pos = (int64_t)((x - lo) * (double)bins / (hi - lo));
    } else {
        float x = op_load_f32(p, dt), l = (float)lo, h = (float)hi;
        if (!(x >= l && x <= h)) return -1;
        pos = (int64_t)((x - l) * (float)bins / (h - l));
    }
    if (pos >= bins) pos = bins - 1;
    if (pos < 0) pos = 0;
    return pos;
}

/* ---------------------------------------------------------------------------
 * histogram (bins given as a tensor of ne increasing edges, byte stride es):
 * the bin of x by binary search, or -1 outside [edge 0, edge ne-1] (NaN too),
 * the last bin closed (ATen's BINARY_SEARCH; its linear interpolation with a
 * local search, for an int bin count, lands on the same bin). */

OP_FN int64_t op_histogram_bin(const char *p, int dt, const char *edges, int64_t es, int64_t ne)
{
    double x = op_load_f64(p, dt);
    if (ne < 2 || !(x >= op_load_f64(edges, dt) && x <= op_load_f64(edges + (ne - 1) * es, dt))) return -1;
    int64_t lo = 0, hi = ne;   /* the first edge > x */
    while (lo < hi) {
        int64_t mid = lo + ((hi - lo) >> 1);
        if (op_load_f64(edges + mid * es, dt) > x) hi = mid;
        else lo = mid + 1;
    }
    int64_t pos = lo - 1;
    return pos >= ne - 1 ? ne - 2 : pos;
}

/* *acc (dtype dt) += the weight at w (NULL: 1), in dt's arithmetic. */
OP_FN void op_histogram_add(char *acc, const char *w, int dt)
{
    if (dt == RGPU_F64) op_store_f64(acc, dt, op_load_f64(acc, dt) + (w ? op_load_f64(w, dt) : 1.0));
    else op_store_f32(acc, dt, op_load_f32(acc, dt) + (w ? op_load_f32(w, dt) : 1.0f));
}

/* density: hist[b] /= sum(hist) * (edge[b+1] - edge[b]), as ATen in dt's
 * arithmetic; nb bins, byte strides hs, es. Sequential (one thread). */
OP_FN void op_histogram_density(char *hist, int64_t hs, const char *edges, int64_t es, int dt, int64_t nb)
{
    if (dt == RGPU_F64) {
        double s = 0;
        for (int64_t b = 0; b < nb; b++) s += op_load_f64(hist + b * hs, dt);
        for (int64_t b = 0; b < nb; b++) {
            double len = op_load_f64(edges + (b + 1) * es, dt) - op_load_f64(edges + b * es, dt);
            op_store_f64(hist + b * hs, dt, op_load_f64(hist + b * hs, dt) / (s * len));
        }
    } else {
        float s = 0;
        for (int64_t b = 0; b < nb; b++) s = op_round_to(dt, s + op_load_f32(hist + b * hs, dt));
        for (int64_t b = 0; b < nb; b++) {
            float len = op_round_to(dt, op_load_f32(edges + (b + 1) * es, dt) - op_load_f32(edges + b * es, dt));
            op_store_f32(hist + b * hs, dt, op_load_f32(hist + b * hs, dt) / op_round_to(dt, s * len));
        }
    }
}

/* ---------------------------------------------------------------------------
 * Checks (op/sort.c): both backends accept the same records. */

/* SORT / MODE: in x; outs values, indices (int64). *dim wrapped, *n the
 * line length, *desc (SORT) the order; L's views: in, values, indices. For
 * MODE without keepdim the outputs' dims get the reduced dim back (size 1). */
rgpu_status rgpu_op_sort_check(const rgpu_exec *e, int *dim, int64_t *n, bool *desc, op_sort_lines *L,
                          char *err, size_t errlen);
/* CUMMAX / CUMMIN (outs values, indices), LOGCUMSUMEXP, CUMPROD: in x; args
 * int dim. L's views: in, out, indices; *is, *os, *xs element strides of
 * the dim. */
rgpu_status rgpu_op_scan_check(const rgpu_exec *e, int *kind, int64_t *n, int64_t *is, int64_t *os, int64_t *xs,
                          op_sort_lines *L, char *err, size_t errlen);
/* SEARCHSORTED: in boundaries, values, sorter?; args bool right. L's views:
 * values, out, boundaries, sorter (lines: values' leading dims); *m values
 * per line, *n boundaries per row, the last dim's element strides. */
typedef struct op_searchsorted_args {
    op_sort_lines L;
    int64_t m, n;
    int64_t vs, os, bs, ss;   /* element strides of the last dim */
    bool right;
} op_searchsorted_args;
rgpu_status rgpu_op_searchsorted_check(const rgpu_exec *e, op_searchsorted_args *a, char *err, size_t errlen);
/* HISTC: in x (floating); args int bins, float min, float max; out (bins,)
 * in x's dtype. *from_data when min == max (the data's min and max then). */
rgpu_status rgpu_op_histc_check(const rgpu_exec *e, int64_t *bins, double *lo, double *hi, bool *from_data,
                           char *err, size_t errlen);
/* HISTOGRAM: in x (floating), bins (1-d, x's dtype), weight? (x's shape and
 * dtype); outs hist (ne - 1,), bin_edges (ne,); args bool density. */
rgpu_status rgpu_op_histogram_check(const rgpu_exec *e, bool *density, char *err, size_t errlen);
/* min == max after taking the data's: ATen widens to [min - 1, max + 1]. */
OP_FN void op_histc_widen(double *lo, double *hi)
{
    if (*lo == *hi) { *lo -= 1; *hi += 1; }
}

#ifdef __cplusplus
}
#endif

#endif
