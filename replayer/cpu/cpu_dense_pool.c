/* cpu_dense_pool.c — 2-d pooling on the CPU, (N,C,H,W) or (C,H,W) input,
 * one (H,W) plane at a time, loops in ATen's order (its NCHW kernels):
 *
 *   max_pool2d_with_indices: window rows ih0 = oh*s - p (stepped by dilation
 *     into the image), max in opmath with NaN winning (last NaN), index =
 *     ih*W + iw within the plane; backward scatters grad to the indices
 *     (summing overlaps, in output order; -1 skipped as ATen).
 *   avg_pool2d: window clipped to the padded image gives count_include_pad's
 *     divisor, clipped to the image the other one; divisor_override wins;
 *     sum in opmath (f32/f64, int64 for int64 input) then one division.
 *   backwards of f16/bf16 round every quotient and sum to the dtype, as
 *     ATen's kernels accumulate in the tensor's own type.
 *   _adaptive_avg_pool2d: rows floor(o*H/Ho) .. ceil((o+1)*H/Ho), out =
 *     sum / kh / kw (two divisions, as ATen); backward spreads grad / kh / kw.
 * Output sizes follow ATen's pooling_output_shape (ceil_mode windows must
 * start inside the image or left padding). */
#include <math.h>
#include <stdlib.h>

#include "cpu_dense.h"

/* ---------------------------------------------------------------------------
 * Geometry */

#define POOL_PARAM_MAX (1LL << 31)

static int64_t div_floor(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t d, bool ceil_mode)
{
    int64_t o = div_floor(in + 2 * pad - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0), s) + 1;
    if (ceil_mode && (o - 1) * s >= in + pad) o--;
    return o;
}

/* A 1-or-2 int list into (h, w); empty gives dflt when allow_empty. */
static rgpu_status pool_pair(const rgpu_exec *e, int i, const char *what, bool allow_empty, const int64_t dflt[2],
                             int64_t lo, int64_t out[2], char *err, size_t errlen)
{
    int64_t v[2];
    uint32_t n;
    FORWARD_IF_ERROR(dense_arg_ints(e, i, what, allow_empty ? 0 : 1, 2, v, &n, err, errlen));
    for (int d = 0; d < 2; d++) {
        out[d] = n == 0 ? dflt[d] : n == 1 ? v[0] : v[d];
        if (out[d] < lo || out[d] > POOL_PARAM_MAX)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: %s %lld is out of range (want %lld to %lld)", rgpu_op_name(e->op), what,
                     (long long)out[d], (long long)lo, (long long)POOL_PARAM_MAX);
    }
    return RGPU_OK;
}

/* x is (C,H,W) or (N,C,H,W) with C, H, W > 0 (N may be 0), as ATen. */
rgpu_status pool_input(const rgpu_exec *e, const rgpu_view *x, pool_geom *g, char *err, size_t errlen)
{
    char s[96];
    if (x->ndim != 3 && x->ndim != 4)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: expected a 3-d or 4-d input, got %s", rgpu_op_name(e->op),
                 dense_shape_str(s, sizeof s, x->sizes, x->ndim));
    int l = x->ndim - 3;
    for (int d = l; d < x->ndim; d++)
        if (x->sizes[d] == 0)
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: expected non-empty C, H, W dims (only the batch may be 0), got %s",
                     rgpu_op_name(e->op), dense_shape_str(s, sizeof s, x->sizes, x->ndim));
    g->N = l ? x->sizes[0] : 1;
    g->C = x->sizes[l];
    g->H = x->sizes[l + 1];
    g->W = x->sizes[l + 2];
    return RGPU_OK;
}

/* max: kernel, stride, padding, dilation, ceil_mode; avg: kernel, stride,
 * padding, ceil_mode, count_include_pad, divisor_override|NONE. */
rgpu_status pool_args(const rgpu_exec *e, bool is_max, pool_geom *g, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    int64_t k[2], s[2], p[2], d[2] = { 1, 1 };
    FORWARD_IF_ERROR(pool_pair(e, 0, "kernel_size", false, NULL, 1, k, err, errlen));
    FORWARD_IF_ERROR(pool_pair(e, 1, "stride", true, k, 1, s, err, errlen));
    FORWARD_IF_ERROR(pool_pair(e, 2, "padding", false, NULL, 0, p, err, errlen));
    int next = 3;
    if (is_max) FORWARD_IF_ERROR(pool_pair(e, next++, "dilation", false, NULL, 1, d, err, errlen));
    FORWARD_IF_ERROR(dense_arg_bool(e, next++, "ceil_mode", &g->ceil_mode, err, errlen));
    g->count_include_pad = true;
    g->has_divisor = false;
    if (!is_max) {
        FORWARD_IF_ERROR(dense_arg_bool(e, next++, "count_include_pad", &g->count_include_pad, err, errlen));
        if (!dense_arg_is_none(e, next)) {
            FORWARD_IF_ERROR(dense_arg_int(e, next, "divisor_override", &g->divisor, err, errlen));
            if (g->divisor == 0) RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: divisor must be not zero", name);
            g->has_divisor = true;
        }
    }
    if (k[0] / 2 < p[0] || k[1] / 2 < p[1])
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: pad should be at most half of kernel size, got pad (%lld, %lld), kernel (%lld, %lld)",
                 name, (long long)p[0], (long long)p[1], (long long)k[0], (long long)k[1]);
    g->kh = k[0]; g->kw = k[1]; g->sh = s[0]; g->sw = s[1];
    g->ph = p[0]; g->pw = p[1]; g->dh = d[0]; g->dw = d[1];
    g->Ho = pool_out_size(g->H, g->kh, g->ph, g->sh, g->dh, g->ceil_mode);
    g->Wo = pool_out_size(g->W, g->kw, g->pw, g->sw, g->dw, g->ceil_mode);
    if (g->Ho < 1 || g->Wo < 1)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: input (%lld, %lld) gives output size (%lld, %lld), too small", name,
                 (long long)g->H, (long long)g->W, (long long)g->Ho, (long long)g->Wo);
    return RGPU_OK;
}

/* Sizes of x with the last two dims replaced by (h, w). */
void pool_shape(const rgpu_view *x, int64_t h, int64_t w, int64_t out[4])
{
    for (int d = 0; d < x->ndim; d++) out[d] = x->sizes[d];
    out[x->ndim - 2] = h;
    out[x->ndim - 1] = w;
}

static rgpu_view as_4d(const rgpu_view *v) { return v->ndim == 3 ? dense_unsqueeze(v, 0) : *v; }

static rgpu_view plane(const rgpu_view *v4, int64_t n, int64_t c)
{
    rgpu_view a = dense_subview(v4, 0, n);
    return dense_subview(&a, 0, c);
}

/* ---------------------------------------------------------------------------
 * Plane kernels. Buffers are row-major planes in the compute type. */

#define DEFINE_MAX(T, SUF, LOWEST, ISNAN)                                                   \
static void max_plane_##SUF(const T *x, const pool_geom *g, T *y, uint64_t *idx)            \
{                                                                                            \
    for (int64_t oh = 0; oh < g->Ho; oh++) {                                                 \
        int64_t ih0 = oh * g->sh - g->ph;                                                    \
        int64_t ih1 = ih0 + (g->kh - 1) * g->dh + 1;                                         \
        if (ih1 > g->H) ih1 = g->H;                                                          \
        while (ih0 < 0) ih0 += g->dh;                                                        \
        for (int64_t ow = 0; ow < g->Wo; ow++) {                                             \
            int64_t iw0 = ow * g->sw - g->pw;                                                \
            int64_t iw1 = iw0 + (g->kw - 1) * g->dw + 1;                                     \
            if (iw1 > g->W) iw1 = g->W;                                                      \
            while (iw0 < 0) iw0 += g->dw;                                                    \
            int64_t maxindex = ih0 * g->W + iw0;                                             \
            T maxval = LOWEST;                                                               \
            for (int64_t ih = ih0; ih < ih1; ih += g->dh)                                    \
                for (int64_t iw = iw0; iw < iw1; iw += g->dw) {                              \
                    int64_t i = ih * g->W + iw;                                              \
                    T v = x[i];                                                              \
                    if (v > maxval || ISNAN(v)) { maxval = v; maxindex = i; }                \
                }                                                                            \
            y[oh * g->Wo + ow] = maxval;                                                     \
            idx[oh * g->Wo + ow] = (uint64_t)maxindex;                                       \
        }                                                                                    \
    }                                                                                        \
}

#define NO_NAN(v) ((void)(v), 0)
DEFINE_MAX(float, f32, -INFINITY, isnan)
DEFINE_MAX(double, f64, -INFINITY, isnan)
DEFINE_MAX(int64_t, i64, INT64_MIN, NO_NAN)
#undef NO_NAN
#undef DEFINE_MAX

/* Window of output (oh, ow) for avg pooling: clipped bounds and divisor. */
static bool avg_window(const pool_geom *g, int64_t oh, int64_t ow, int64_t *ih0, int64_t *ih1,
                       int64_t *iw0, int64_t *iw1, int64_t *div)
{
    int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw;
    int64_t h1 = h0 + g->kh, w1 = w0 + g->kw;
    if (h1 > g->H + g->ph) h1 = g->H + g->ph;
    if (w1 > g->W + g->pw) w1 = g->W + g->pw;
    int64_t pool_size = (h1 - h0) * (w1 - w0);
    if (h0 < 0) h0 = 0;
    if (w0 < 0) w0 = 0;
    if (h1 > g->H) h1 = g->H;
    if (w1 > g->W) w1 = g->W;
    *ih0 = h0; *ih1 = h1; *iw0 = w0; *iw1 = w1;
    if (h0 >= h1 || w0 >= w1) return false;
    *div = g->has_divisor ? g->divisor : g->count_include_pad ? pool_size : (h1 - h0) * (w1 - w0);
    return true;
}

/* ATen's backward kernels accumulate in the tensor's own dtype: for f16/bf16
 * every quotient and every += rounds to it. Identity for f32. */
static inline float rnd_dt(int dt, float v)
{
    if (dt == RGPU_F16) return rgpu_half_to_float(rgpu_float_to_half(v));
    if (dt == RGPU_BF16) return rgpu_bf16_to_float(rgpu_float_to_bf16(v));
    return v;
}

/* int64 a / b truncating, without INT64_MIN / -1 overflow. */
static int64_t idiv(int64_t a, int64_t b)
{
    if (b == -1) return (int64_t)(0 - (uint64_t)a);
    return a / b;
}

static void avg_plane(int ct, const void *xv, const pool_geom *g, void *yv)
{
    for (int64_t oh = 0; oh < g->Ho; oh++)
        for (int64_t ow = 0; ow < g->Wo; ow++) {
            int64_t h0, h1, w0, w1, div = 1, o = oh * g->Wo + ow;
            bool any = avg_window(g, oh, ow, &h0, &h1, &w0, &w1, &div);
            if (ct == OP_CT_F32) {
                const float *x = xv;
                float sum = 0.0f;
                if (any) for (int64_t ih = h0; ih < h1; ih++) for (int64_t iw = w0; iw < w1; iw++) sum += x[ih * g->W + iw];
                ((float *)yv)[o] = any ? sum / (float)div : 0.0f;
            } else if (ct == OP_CT_F64) {
                const double *x = xv;
                double sum = 0.0;
                if (any) for (int64_t ih = h0; ih < h1; ih++) for (int64_t iw = w0; iw < w1; iw++) sum += x[ih * g->W + iw];
                ((double *)yv)[o] = any ? sum / (double)div : 0.0;
            } else {
                const uint64_t *x = xv;
                uint64_t sum = 0;
                if (any) for (int64_t ih = h0; ih < h1; ih++) for (int64_t iw = w0; iw < w1; iw++) sum += x[ih * g->W + iw];
                ((uint64_t *)yv)[o] = any ? (uint64_t)idiv((int64_t)sum, div) : 0;
            }
        }
}

static void avg_plane_backward(int ct, int dt, const void *gv, const pool_geom *g, void *dxv)
{
    for (int64_t oh = 0; oh < g->Ho; oh++)
        for (int64_t ow = 0; ow < g->Wo; ow++) {
            int64_t h0, h1, w0, w1, div = 1, o = oh * g->Wo + ow;
            if (!avg_window(g, oh, ow, &h0, &h1, &w0, &w1, &div)) continue;
            if (ct == OP_CT_F32) {
                float *dx = dxv, d = rnd_dt(dt, ((const float *)gv)[o] / (float)div);
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) dx[ih * g->W + iw] = rnd_dt(dt, dx[ih * g->W + iw] + d);
            } else if (ct == OP_CT_F64) {
                double *dx = dxv, d = ((const double *)gv)[o] / (double)div;
                for (int64_t ih = h0; ih < h1; ih++) for (int64_t iw = w0; iw < w1; iw++) dx[ih * g->W + iw] += d;
            } else {
                uint64_t *dx = dxv, d = (uint64_t)idiv((int64_t)((const uint64_t *)gv)[o], div);
                for (int64_t ih = h0; ih < h1; ih++) for (int64_t iw = w0; iw < w1; iw++) dx[ih * g->W + iw] += d;
            }
        }
}

/* Adaptive windows: [start, end) of output o of n over an input of size in. */
static int64_t ad_start(int64_t o, int64_t n, int64_t in) { return (o / n) * in + ((o % n) * in) / n; }
static int64_t ad_end(int64_t o, int64_t n, int64_t in) { return 1 + ((o + 1) * in - 1) / n; }

static void adaptive_plane(int ct, int dt, const void *xv, const pool_geom *g, void *yv, bool backward)
{
    for (int64_t oh = 0; oh < g->Ho; oh++) {
        int64_t h0 = ad_start(oh, g->Ho, g->H), h1 = ad_end(oh, g->Ho, g->H);
        for (int64_t ow = 0; ow < g->Wo; ow++) {
            int64_t w0 = ad_start(ow, g->Wo, g->W), w1 = ad_end(ow, g->Wo, g->W);
            int64_t kh = h1 - h0, kw = w1 - w0, o = oh * g->Wo + ow;
            if (ct == OP_CT_F32) {
                if (backward) {
                    float *dx = yv, d = rnd_dt(dt, rnd_dt(dt, ((const float *)xv)[o] / (float)kh) / (float)kw);
                    for (int64_t ih = h0; ih < h1; ih++)
                        for (int64_t iw = w0; iw < w1; iw++) dx[ih * g->W + iw] = rnd_dt(dt, dx[ih * g->W + iw] + d);
                } else {
                    const float *x = xv;
                    float sum = 0.0f;
                    for (int64_t ih = h0; ih < h1; ih++) for (int64_t iw = w0; iw < w1; iw++) sum += x[ih * g->W + iw];
                    ((float *)yv)[o] = sum / (float)kh / (float)kw;
                }
            } else {
                if (backward) {
                    double *dx = yv, d = ((const double *)xv)[o] / (double)kh / (double)kw;
                    for (int64_t ih = h0; ih < h1; ih++) for (int64_t iw = w0; iw < w1; iw++) dx[ih * g->W + iw] += d;
                } else {
                    const double *x = xv;
                    double sum = 0.0;
                    for (int64_t ih = h0; ih < h1; ih++) for (int64_t iw = w0; iw < w1; iw++) sum += x[ih * g->W + iw];
                    ((double *)yv)[o] = sum / (double)kh / (double)kw;
                }
            }
        }
    }
}

/* ---------------------------------------------------------------------------
 * Plane loop: for each (n, c), in = the plane of src (hi x wi), out = the
 * plane of dst (ho x wo); kind selects the kernel. */

enum { PK_MAX, PK_MAX_BW, PK_AVG, PK_AVG_BW, PK_ADA, PK_ADA_BW };

static rgpu_status run_planes(const rgpu_exec *e, int kind, int ct, const pool_geom *g, const rgpu_view *src,
                              const rgpu_view *aux, rgpu_view *dst, rgpu_view *dst2, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    size_t cs = dense_ct_size(ct);
    bool backward = kind == PK_MAX_BW || kind == PK_AVG_BW || kind == PK_ADA_BW;
    int64_t in_n = backward ? g->Ho * g->Wo : g->H * g->W, out_n = backward ? g->H * g->W : g->Ho * g->Wo;
    void *in = op_alloc(in_n, cs), *out = op_alloc(out_n, cs);
    uint64_t *idx = (kind == PK_MAX || kind == PK_MAX_BW) ? op_alloc(g->Ho * g->Wo, 8) : NULL;
    rgpu_status st = RGPU_OK;
    if (!in || !out || ((kind == PK_MAX || kind == PK_MAX_BW) && !idx)) {
        op_errf(err, errlen, "%s: out of memory for plane buffers", name);
        st = RGPU_ERR_NOMEM;
        goto done;
    }
    rgpu_view s4 = as_4d(src), d4 = as_4d(dst);
    rgpu_view a4 = aux ? as_4d(aux) : s4, d24 = dst2 ? as_4d(dst2) : d4;
    int64_t hw = g->H * g->W;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t c = 0; c < g->C; c++) {
            rgpu_view sp = plane(&s4, n, c), dp = plane(&d4, n, c);
            dense_load(&sp, ct, in);
            if (backward) memset(out, 0, (size_t)out_n * cs);
            switch (kind) {
            case PK_MAX: {
                if (ct == OP_CT_F32) max_plane_f32(in, g, out, idx);
                else if (ct == OP_CT_F64) max_plane_f64(in, g, out, idx);
                else max_plane_i64(in, g, out, idx);
                rgpu_view ip = plane(&d24, n, c);
                dense_store(&ip, OP_CT_I64, idx);
                break;
            }
            case PK_MAX_BW: {
                rgpu_view ip = plane(&a4, n, c);
                dense_load(&ip, OP_CT_I64, idx);
                for (int64_t i = 0; i < in_n; i++) {
                    int64_t k = (int64_t)idx[i];
                    if (k == -1) continue;
                    if (k < 0 || k >= hw) {
                        op_errf(err, errlen, "%s: index %lld is out of bounds for a plane of size %lld", name,
                                 (long long)k, (long long)hw);
                        st = RGPU_ERR_BAD_ARG;
                        goto done;
                    }
                    if (ct == OP_CT_F32) ((float *)out)[k] = rnd_dt(dst->dtype, ((float *)out)[k] + ((const float *)in)[i]);
                    else ((double *)out)[k] += ((const double *)in)[i];
                }
                break;
            }
            case PK_AVG: avg_plane(ct, in, g, out); break;
            case PK_AVG_BW: avg_plane_backward(ct, dst->dtype, in, g, out); break;
            case PK_ADA: adaptive_plane(ct, dst->dtype, in, g, out, false); break;
            default: adaptive_plane(ct, dst->dtype, in, g, out, true); break;
            }
            dense_store(&dp, ct, out);
        }
done:
    free(in); free(out); free(idx);
    return st;
}

/* ---------------------------------------------------------------------------
 * Entry points */

/* in x; kernel, stride, padding, dilation, ceil_mode; outs y, indices (i64) */
rgpu_status pool_max_check(const rgpu_exec *e, pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(dense_check_io(e, 0, 0, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0], *ind = e->out[1];
    FORWARD_IF_ERROR(pool_input(e, x, g, err, errlen));
    FORWARD_IF_ERROR(pool_args(e, true, g, err, errlen));
    if (x->dtype == RGPU_BOOL) RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for bool (as ATen)", name);
    if (y->dtype != x->dtype || ind->dtype != RGPU_I64)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: want out dtype %s and int64 indices, got %s and %s", name,
                 rgpu_dtype_name(x->dtype), rgpu_dtype_name(y->dtype), rgpu_dtype_name(ind->dtype));
    int64_t ys[4];
    pool_shape(x, g->Ho, g->Wo, ys);
    FORWARD_IF_ERROR(dense_check_shape(y, "out", ys, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(dense_check_shape(ind, "indices", ys, x->ndim, e->op, err, errlen));
    return RGPU_OK;
}

rgpu_status cpu_dense_max_pool(const rgpu_exec *e, char *err, size_t errlen)
{
    pool_geom g;
    FORWARD_IF_ERROR(pool_max_check(e, &g, err, errlen));
    const rgpu_view *x = e->in[0];
    return run_planes(e, PK_MAX, dense_ct_of(x->dtype), &g, x, NULL, e->out[0], e->out[1], err, errlen);
}

/* in grad, x, indices; same args as forward; out dx */
rgpu_status pool_max_backward_check(const rgpu_exec *e, pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(dense_check_io(e, 0, 0, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *gr = e->in[0], *x = e->in[1], *ind = e->in[2];
    rgpu_view *dx = e->out[0];
    FORWARD_IF_ERROR(pool_input(e, x, g, err, errlen));
    FORWARD_IF_ERROR(pool_args(e, true, g, err, errlen));
    if (!op_dtype_is_float(x->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for %s (as ATen)", name, rgpu_dtype_name(x->dtype));
    if (gr->dtype != x->dtype || dx->dtype != x->dtype || ind->dtype != RGPU_I64)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: grad and grad_input must have dtype %s and indices int64", name,
                 rgpu_dtype_name(x->dtype));
    int64_t ys[4];
    pool_shape(x, g->Ho, g->Wo, ys);
    FORWARD_IF_ERROR(dense_check_shape(gr, "grad", ys, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(dense_check_shape(ind, "indices", ys, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(dense_check_shape(dx, "grad_input", x->sizes, x->ndim, e->op, err, errlen));
    return RGPU_OK;
}

rgpu_status cpu_dense_max_pool_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    pool_geom g;
    FORWARD_IF_ERROR(pool_max_backward_check(e, &g, err, errlen));
    const rgpu_view *x = e->in[1];
    return run_planes(e, PK_MAX_BW, dense_ct_of(x->dtype), &g, e->in[0], e->in[2], e->out[0], NULL, err, errlen);
}

static rgpu_status avg_check_dtype(const rgpu_exec *e, int dt, char *err, size_t errlen)
{
    if (!op_dtype_is_float(dt) && dt != RGPU_I64)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for %s (floating or int64, as ATen)",
                 rgpu_op_name(e->op), rgpu_dtype_name(dt));
    return RGPU_OK;
}

/* in x; kernel, stride, padding, ceil_mode, count_include_pad, divisor_override|NONE */
rgpu_status pool_avg_check(const rgpu_exec *e, pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(dense_check_io(e, 0, 0, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0];
    FORWARD_IF_ERROR(pool_input(e, x, g, err, errlen));
    FORWARD_IF_ERROR(pool_args(e, false, g, err, errlen));
    FORWARD_IF_ERROR(avg_check_dtype(e, x->dtype, err, errlen));
    if (y->dtype != x->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: out dtype %s differs from the input's %s", rgpu_op_name(e->op),
                 rgpu_dtype_name(y->dtype), rgpu_dtype_name(x->dtype));
    int64_t ys[4];
    pool_shape(x, g->Ho, g->Wo, ys);
    FORWARD_IF_ERROR(dense_check_shape(y, "out", ys, x->ndim, e->op, err, errlen));
    return RGPU_OK;
}

rgpu_status cpu_dense_avg_pool(const rgpu_exec *e, char *err, size_t errlen)
{
    pool_geom g;
    FORWARD_IF_ERROR(pool_avg_check(e, &g, err, errlen));
    const rgpu_view *x = e->in[0];
    return run_planes(e, PK_AVG, dense_ct_of(x->dtype), &g, x, NULL, e->out[0], NULL, err, errlen);
}

/* in grad, x; same args as forward; out dx */
rgpu_status pool_avg_backward_check(const rgpu_exec *e, pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(dense_check_io(e, 0, 0, err, errlen));
    const rgpu_view *gr = e->in[0], *x = e->in[1];
    rgpu_view *dx = e->out[0];
    FORWARD_IF_ERROR(pool_input(e, x, g, err, errlen));
    FORWARD_IF_ERROR(pool_args(e, false, g, err, errlen));
    FORWARD_IF_ERROR(avg_check_dtype(e, x->dtype, err, errlen));
    if (gr->dtype != x->dtype || dx->dtype != x->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: grad and grad_input must have the input's dtype %s", rgpu_op_name(e->op),
                 rgpu_dtype_name(x->dtype));
    int64_t ys[4];
    pool_shape(x, g->Ho, g->Wo, ys);
    FORWARD_IF_ERROR(dense_check_shape(gr, "grad", ys, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(dense_check_shape(dx, "grad_input", x->sizes, x->ndim, e->op, err, errlen));
    return RGPU_OK;
}

rgpu_status cpu_dense_avg_pool_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    pool_geom g;
    FORWARD_IF_ERROR(pool_avg_backward_check(e, &g, err, errlen));
    const rgpu_view *x = e->in[1];
    return run_planes(e, PK_AVG_BW, dense_ct_of(x->dtype), &g, e->in[0], NULL, e->out[0], NULL, err, errlen);
}

static rgpu_status adaptive_common(const rgpu_exec *e, const rgpu_view *x, pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(pool_input(e, x, g, err, errlen));
    if (!op_dtype_is_float(x->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for %s (as ATen)", rgpu_op_name(e->op),
                 rgpu_dtype_name(x->dtype));
    int64_t p;
    /* window arithmetic multiplies an output index by an input size */
    if (__builtin_mul_overflow(g->Ho + 1, g->H, &p) || __builtin_mul_overflow(g->Wo + 1, g->W, &p))
        RETURN_ERROR(RGPU_ERR_OVERFLOW, "%s: output size times input size overflows", rgpu_op_name(e->op));
    return RGPU_OK;
}

/* in x; ints output_size (2) */
rgpu_status pool_adaptive_check(const rgpu_exec *e, pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(dense_check_io(e, 0, 0, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0];
    memset(g, 0, sizeof *g);
    int64_t os[2];
    uint32_t n;
    FORWARD_IF_ERROR(dense_arg_ints(e, 0, "output_size", 2, 2, os, &n, err, errlen));
    if (os[0] < 0 || os[1] < 0)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: output_size must be >= 0, got (%lld, %lld)", rgpu_op_name(e->op),
                 (long long)os[0], (long long)os[1]);
    g->Ho = os[0]; g->Wo = os[1];
    int64_t ys[4];
    FORWARD_IF_ERROR(pool_input(e, x, g, err, errlen));
    pool_shape(x, g->Ho, g->Wo, ys);
    FORWARD_IF_ERROR(dense_check_shape(y, "out", ys, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(adaptive_common(e, x, g, err, errlen));
    if (y->dtype != x->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: out dtype %s differs from the input's %s", rgpu_op_name(e->op),
                 rgpu_dtype_name(y->dtype), rgpu_dtype_name(x->dtype));
    return RGPU_OK;
}

rgpu_status cpu_dense_adaptive_pool(const rgpu_exec *e, char *err, size_t errlen)
{
    pool_geom g;
    FORWARD_IF_ERROR(pool_adaptive_check(e, &g, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0];
    if (op_numel(y) == 0) return RGPU_OK;
    return run_planes(e, PK_ADA, dense_ct_of(x->dtype), &g, x, NULL, y, NULL, err, errlen);
}

/* in grad (.., Ho, Wo), x; out dx */
rgpu_status pool_adaptive_backward_check(const rgpu_exec *e, pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(dense_check_io(e, 0, 0, err, errlen));
    const rgpu_view *gr = e->in[0], *x = e->in[1];
    rgpu_view *dx = e->out[0];
    memset(g, 0, sizeof *g);
    FORWARD_IF_ERROR(pool_input(e, x, g, err, errlen));
    if (gr->ndim != x->ndim)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: grad has %d dims, input %d", rgpu_op_name(e->op), gr->ndim, x->ndim);
    g->Ho = gr->sizes[gr->ndim - 2];
    g->Wo = gr->sizes[gr->ndim - 1];
    int64_t ys[4];
    pool_shape(x, g->Ho, g->Wo, ys);
    FORWARD_IF_ERROR(dense_check_shape(gr, "grad", ys, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(dense_check_shape(dx, "grad_input", x->sizes, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(adaptive_common(e, x, g, err, errlen));
    if (gr->dtype != x->dtype || dx->dtype != x->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: grad and grad_input must have the input's dtype %s", rgpu_op_name(e->op),
                 rgpu_dtype_name(x->dtype));
    return RGPU_OK;
}

rgpu_status cpu_dense_adaptive_pool_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    pool_geom g;
    FORWARD_IF_ERROR(pool_adaptive_backward_check(e, &g, err, errlen));
    const rgpu_view *gr = e->in[0], *x = e->in[1];
    rgpu_view *dx = e->out[0];
    if (op_numel(gr) == 0) {   /* nothing pooled: the gradient is zero */
        int64_t n = op_numel(dx);
        void *z = dense_calloc(n, 8);
        if (!z) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory", rgpu_op_name(e->op));
        dense_store(dx, OP_CT_F64, z);
        free(z);
        return RGPU_OK;
    }
    return run_planes(e, PK_ADA_BW, dense_ct_of(x->dtype), &g, gr, NULL, dx, NULL, err, errlen);
}
