/* cpu_sort.c — the sort family on the CPU: sort and mode (a stable merge
 * sort of (key, index) pairs per line; a pass merges each pair of runs
 * sequentially, where the CUDA kernel places every element on its own), the
 * scans cummax / cummin / logcumsumexp / cumprod, searchsorted and histc.
 * The math is op/sort.h's (OP_FN), the same code the CUDA kernels run. */
#include <stdlib.h>

#include "cpu_internal.h"
#include "cpu_families.h"
#include "op/sort.h"

#define AT(v, off) ((char *)(v)->data + (off) * (int64_t)rgpu_dtype_size((v)->dtype))

/* Sorts every line of L into the out views: sort (values, indices) or mode. */
static rgpu_status sort_lines(const rgpu_exec *e, int dim, int64_t n, bool desc, const op_sort_lines *L,
                              char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0];
    rgpu_view *vals = e->out[0], *idx = e->out[1];
    bool mode = e->op == RGPU_OP_MODE;
    if (L->total == 0 || n == 0) return RGPU_OK;
    uint64_t *k0 = malloc((size_t)n * 2 * sizeof *k0);
    int64_t *i0 = malloc((size_t)n * 2 * sizeof *i0);
    if (k0 == NULL || i0 == NULL) {
        free(k0); free(i0);
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lld elements", rgpu_op_name(e->op), (long long)n);
    }
    int64_t is = in->ndim ? in->strides[dim] : 0, vs = in->ndim ? vals->strides[dim] : 0;
    int64_t xs = in->ndim ? idx->strides[dim] : 0;
    int esz = (int)rgpu_dtype_size(in->dtype);
    int passes = op_sort_passes(n);
    for (int64_t l = 0; l < L->total; l++) {
        int64_t off[3];
        op_sort_line_offs(L, 3, l, off);
        const char *src = AT(in, off[0]);
        uint64_t *k[2] = {k0, k0 + n};
        int64_t *ix[2] = {i0, i0 + n};
        for (int64_t i = 0; i < n; i++) {
            k[0][i] = op_sort_key(src + i * is * esz, in->dtype, desc);
            ix[0][i] = i;
        }
        int64_t w = 1;
        for (int p = 0; p < passes; p++, w *= 2)
            for (int64_t lo = 0; lo < n; lo += 2 * w)
                op_sort_merge_run(k[p & 1], ix[p & 1], k[!(p & 1)], ix[!(p & 1)], n, w, lo);
        const uint64_t *kr = k[passes & 1];
        const int64_t *xr = ix[passes & 1];
        if (mode) {
            int64_t j = op_sort_mode_pos(kr, n);
            op_elem_copy(AT(vals, off[1]), src + xr[j] * is * esz, esz);
            *(int64_t *)AT(idx, off[2]) = xr[j];
            continue;
        }
        for (int64_t i = 0; i < n; i++) {
            op_elem_copy(AT(vals, off[1] + i * vs), src + xr[i] * is * esz, esz);
            *(int64_t *)AT(idx, off[2] + i * xs) = xr[i];
        }
    }
    free(k0);
    free(i0);
    return RGPU_OK;
}

static rgpu_status op_sort(const rgpu_exec *e, char *err, size_t errlen)
{
    int dim;
    int64_t n;
    bool desc;
    op_sort_lines L;
    FORWARD_IF_ERROR(rgpu_op_sort_check(e, &dim, &n, &desc, &L, err, errlen));
    return sort_lines(e, dim, n, desc, &L, err, errlen);
}

static rgpu_status op_scan(const rgpu_exec *e, char *err, size_t errlen)
{
    int kind;
    int64_t n, is, os, xs;
    op_sort_lines L;
    FORWARD_IF_ERROR(rgpu_op_scan_check(e, &kind, &n, &is, &os, &xs, &L, err, errlen));
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0], *idx = e->n_out > 1 ? e->out[1] : NULL;
    int ie = (int)rgpu_dtype_size(in->dtype), oe = (int)rgpu_dtype_size(out->dtype);
    for (int64_t l = 0; l < L.total; l++) {
        int64_t off[3];
        op_sort_line_offs(&L, 3, l, off);
        op_scan_line(kind, AT(in, off[0]), is * ie, in->dtype, AT(out, off[1]), os * oe, out->dtype,
                     idx ? AT(idx, off[2]) : NULL, xs * 8, n);
    }
    return RGPU_OK;
}

static rgpu_status op_searchsorted(const rgpu_exec *e, char *err, size_t errlen)
{
    op_searchsorted_args a;
    FORWARD_IF_ERROR(rgpu_op_searchsorted_check(e, &a, err, errlen));
    const rgpu_view *bd = e->in[0], *v = e->in[1], *so = e->in[2];
    rgpu_view *out = e->out[0];
    int be = (int)rgpu_dtype_size(bd->dtype);
    for (int64_t l = 0; l < a.L.total; l++) {
        int64_t off[4];
        op_sort_line_offs(&a.L, 4, l, off);
        for (int64_t j = 0; j < a.m; j++) {
            int64_t r = op_searchsorted_one(AT(bd, off[2]), a.bs * be, bd->dtype, so ? AT(so, off[3]) : NULL,
                                            a.ss * 8, a.n, AT(v, off[0] + j * a.vs), v->dtype, a.right);
            op_store_u64(AT(out, off[1] + j * a.os), out->dtype, (uint64_t)r);
        }
    }
    return RGPU_OK;
}

/* Every element of v in order (row-major), through f(p, ctx). */
static void each_elem(const rgpu_view *v, void (*f)(const char *, void *), void *ctx)
{
    int64_t n = rgpu_op_numel(v), esz = (int64_t)rgpu_dtype_size(v->dtype);
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0, r = i;
        for (int d = v->ndim - 1; d >= 0; d--) {
            off += (r % v->sizes[d]) * v->strides[d];
            r /= v->sizes[d];
        }
        f((const char *)v->data + off * esz, ctx);
    }
}

typedef struct { int dt; uint64_t lo, hi; double l, h; int64_t bins; uint64_t *cnt; } histc_ctx;

static void histc_minmax(const char *p, void *vc)
{
    histc_ctx *c = vc;
    uint64_t k = op_sort_key(p, c->dt, false);
    if (k < c->lo) c->lo = k;
    if (k > c->hi) c->hi = k;
}

static void histc_count(const char *p, void *vc)
{
    histc_ctx *c = vc;
    int64_t b = op_histc_bin(p, c->dt, c->l, c->h, c->bins);
    if (b >= 0) c->cnt[b]++;
}

static rgpu_status op_histc(const rgpu_exec *e, char *err, size_t errlen)
{
    int64_t bins;
    bool from_data;
    histc_ctx c;
    FORWARD_IF_ERROR(rgpu_op_histc_check(e, &bins, &c.l, &c.h, &from_data, err, errlen));
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    c.dt = in->dtype;
    c.bins = bins;
    if (from_data) {
        c.lo = ~(uint64_t)0;
        c.hi = 0;
        each_elem(in, histc_minmax, &c);
        c.l = op_sort_key_f64(c.lo);
        c.h = op_sort_key_f64(c.hi);
        op_histc_widen(&c.l, &c.h);
        RETURN_ERROR_IF(isinf(c.l) || isinf(c.h) || isnan(c.l) || isnan(c.h), RGPU_ERR_BAD_ARG,
                        "torch.histc: range of [%g, %g] is not finite", c.l, c.h);
    }
    c.cnt = calloc((size_t)bins, sizeof *c.cnt);
    RETURN_ERROR_IF(c.cnt == NULL, RGPU_ERR_NOMEM, "histc: out of memory for %lld bins", (long long)bins);
    each_elem(in, histc_count, &c);
    for (int64_t b = 0; b < bins; b++)
        op_store_f64(AT(out, b * out->strides[0]), out->dtype, (double)c.cnt[b]);
    free(c.cnt);
    return RGPU_OK;
}

static rgpu_status op_histogram(const rgpu_exec *e, char *err, size_t errlen)
{
    bool density;
    FORWARD_IF_ERROR(rgpu_op_histogram_check(e, &density, err, errlen));
    const rgpu_view *in = e->in[0], *bins = e->in[1], *w = e->in[2];
    rgpu_view *hist = e->out[0], *edges = e->out[1];
    int dt = in->dtype, esz = (int)rgpu_dtype_size(dt);
    int64_t ne = bins->sizes[0], nb = ne - 1, n = rgpu_op_numel(in);
    int64_t es = bins->strides[0] * esz, hs = nb ? hist->strides[0] * esz : 0;
    for (int64_t b = 0; b < ne; b++)
        op_elem_copy(AT(edges, b * edges->strides[0]), AT(bins, b * bins->strides[0]), esz);
    for (int64_t b = 0; b < nb; b++) op_store_f64(AT(hist, b * hist->strides[0]), dt, 0.0);
    for (int64_t i = 0; i < n; i++) {
        int64_t xo = 0, wo = 0, r = i;
        for (int d = in->ndim - 1; d >= 0; d--) {
            int64_t k = r % in->sizes[d];
            r /= in->sizes[d];
            xo += k * in->strides[d];
            if (w) wo += k * w->strides[d];
        }
        int64_t b = op_histogram_bin(AT(in, xo), dt, AT(bins, 0), es, ne);
        if (b >= 0) op_histogram_add(AT(hist, b * hist->strides[0]), w ? AT(w, wo) : NULL, dt);
    }
    if (density && nb > 0) op_histogram_density(AT(hist, 0), hs, AT(bins, 0), es, dt, nb);
    return RGPU_OK;
}

rgpu_status rgpu_cpu_sort_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_SORT: case RGPU_OP_MODE:
        return op_sort(e, err, errlen);
    case RGPU_OP_CUMMAX: case RGPU_OP_CUMMIN: case RGPU_OP_LOGCUMSUMEXP: case RGPU_OP_CUMPROD:
        return op_scan(e, err, errlen);
    case RGPU_OP_SEARCHSORTED:
        return op_searchsorted(e, err, errlen);
    case RGPU_OP_HISTC:
        return op_histc(e, err, errlen);
    case RGPU_OP_HISTOGRAM:
        return op_histogram(e, err, errlen);
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cpu backend: unsupported op %s", rgpu_op_name(e->op));
    }
}
