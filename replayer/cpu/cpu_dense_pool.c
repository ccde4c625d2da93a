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
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu_dense.h"
#include "cpu_dense_util.h"
#include "cpu_pool.h"


static rgpu_view as_4d(const rgpu_view *v) { return v->ndim == 3 ? rgpu_op_dense_unsqueeze(v, 0) : *v; }

static rgpu_view plane(const rgpu_view *v4, int64_t n, int64_t c)
{
    rgpu_view a = rgpu_op_dense_subview(v4, 0, n);
    return rgpu_op_dense_subview(&a, 0, c);
}

/* ---------------------------------------------------------------------------
 * Plane kernels. Buffers are row-major planes in the compute type. */

#define DEFINE_MAX(T, SUF, LOWEST, ISNAN)                                                   \
static void max_plane_##SUF(const T *x, const op_pool_geom *g, T *y, uint64_t *idx)            \
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
static bool avg_window(const op_pool_geom *g, int64_t oh, int64_t ow, int64_t *ih0, int64_t *ih1,
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

static void avg_plane(int ct, const void *xv, const op_pool_geom *g, void *yv)
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

static void avg_plane_backward(int ct, int dt, const void *gv, const op_pool_geom *g, void *dxv)
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

static void adaptive_plane(int ct, int dt, const void *xv, const op_pool_geom *g, void *yv, bool backward)
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

/* The planes run over the pool, a chunk of planes with buffers of its own:
 * each plane is computed by the same code whichever thread runs it, so the
 * results are the serial loop's. A bad index in max_pool2d_backward is
 * reported for the first plane (in plane order) that has one, as the serial
 * loop reports it. */
typedef struct planes_job {
    int kind, ct, out_dt;
    const op_pool_geom *g;
    rgpu_view s4, d4, a4, d24;
    int64_t in_n, out_n, hw;
    bool nomem;
    pthread_mutex_t mu;
    int64_t bad_plane, bad_k;     /* the first plane with a bad index (INT64_MAX: none) */
} planes_job;

static void planes_task(void *vj, int64_t p0, int64_t p1)
{
    planes_job *j = vj;
    const op_pool_geom *g = j->g;
    int ct = j->ct, kind = j->kind;
    size_t cs = op_dense_ct_size(ct);
    bool backward = kind == PK_MAX_BW || kind == PK_AVG_BW || kind == PK_ADA_BW;
    void *in = rgpu_op_alloc(j->in_n, cs), *out = rgpu_op_alloc(j->out_n, cs);
    uint64_t *idx = (kind == PK_MAX || kind == PK_MAX_BW) ? rgpu_op_alloc(g->Ho * g->Wo, 8) : NULL;
    if (!in || !out || ((kind == PK_MAX || kind == PK_MAX_BW) && !idx)) {
        __atomic_store_n(&j->nomem, true, __ATOMIC_RELAXED);
        goto done;
    }
    for (int64_t pl = p0; pl < p1; pl++) {
        int64_t n = pl / g->C, c = pl % g->C;
        rgpu_view sp = plane(&j->s4, n, c), dp = plane(&j->d4, n, c);
        rgpu_dense_load(&sp, ct, in);
        if (backward) memset(out, 0, (size_t)j->out_n * cs);
        switch (kind) {
        case PK_MAX: {
            if (ct == OP_CT_F32) max_plane_f32(in, g, out, idx);
            else if (ct == OP_CT_F64) max_plane_f64(in, g, out, idx);
            else max_plane_i64(in, g, out, idx);
            rgpu_view ip = plane(&j->d24, n, c);
            rgpu_dense_store(&ip, OP_CT_I64, idx);
            break;
        }
        case PK_MAX_BW: {
            rgpu_view ip = plane(&j->a4, n, c);
            rgpu_dense_load(&ip, OP_CT_I64, idx);
            for (int64_t i = 0; i < j->in_n; i++) {
                int64_t k = (int64_t)idx[i];
                if (k == -1) continue;
                if (k < 0 || k >= j->hw) {
                    pthread_mutex_lock(&j->mu);
                    if (pl < j->bad_plane) { j->bad_plane = pl; j->bad_k = k; }
                    pthread_mutex_unlock(&j->mu);
                    goto done;
                }
                if (ct == OP_CT_F32) ((float *)out)[k] = rnd_dt(j->out_dt, ((float *)out)[k] + ((const float *)in)[i]);
                else ((double *)out)[k] += ((const double *)in)[i];
            }
            break;
        }
        case PK_AVG: avg_plane(ct, in, g, out); break;
        case PK_AVG_BW: avg_plane_backward(ct, j->out_dt, in, g, out); break;
        case PK_ADA: adaptive_plane(ct, j->out_dt, in, g, out, false); break;
        default: adaptive_plane(ct, j->out_dt, in, g, out, true); break;
        }
        rgpu_dense_store(&dp, ct, out);
    }
done:
    free(in); free(out); free(idx);
}

static rgpu_status run_planes(const rgpu_exec *e, int kind, int ct, const op_pool_geom *g, const rgpu_view *src,
                              const rgpu_view *aux, rgpu_view *dst, rgpu_view *dst2, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    bool backward = kind == PK_MAX_BW || kind == PK_AVG_BW || kind == PK_ADA_BW;
    planes_job j;
    memset(&j, 0, sizeof j);
    j.kind = kind;
    j.ct = ct;
    j.out_dt = dst->dtype;
    j.g = g;
    j.in_n = backward ? g->Ho * g->Wo : g->H * g->W;
    j.out_n = backward ? g->H * g->W : g->Ho * g->Wo;
    j.hw = g->H * g->W;
    j.s4 = as_4d(src);
    j.d4 = as_4d(dst);
    j.a4 = aux ? as_4d(aux) : j.s4;
    j.d24 = dst2 ? as_4d(dst2) : j.d4;
    j.bad_plane = INT64_MAX;
    pthread_mutex_init(&j.mu, NULL);
    /* a plane costs about its window reads: kernel area per output element */
    int64_t per_plane = (j.in_n + j.out_n) * (g->kh > 0 ? g->kh : 1) * (g->kw > 0 ? g->kw : 1);
    rgpu_pool_for(g->N * g->C, rgpu_pool_grain(per_plane), planes_task, &j);
    pthread_mutex_destroy(&j.mu);
    if (j.nomem) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for plane buffers", name);
    if (j.bad_plane != INT64_MAX)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: index %lld is out of bounds for a plane of size %lld", name,
                     (long long)j.bad_k, (long long)j.hw);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Entry points */

rgpu_status rgpu_cpu_dense_max_pool(const rgpu_exec *e, char *err, size_t errlen)
{
    op_pool_geom g;
    FORWARD_IF_ERROR(rgpu_op_pool_max_check(e, &g, err, errlen));
    const rgpu_view *x = e->in[0];
    return run_planes(e, PK_MAX, op_dense_ct_of(x->dtype), &g, x, NULL, e->out[0], e->out[1], err, errlen);
}

rgpu_status rgpu_cpu_dense_max_pool_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    op_pool_geom g;
    FORWARD_IF_ERROR(rgpu_op_pool_max_backward_check(e, &g, err, errlen));
    const rgpu_view *x = e->in[1];
    return run_planes(e, PK_MAX_BW, op_dense_ct_of(x->dtype), &g, e->in[0], e->in[2], e->out[0], NULL, err, errlen);
}

rgpu_status rgpu_cpu_dense_avg_pool(const rgpu_exec *e, char *err, size_t errlen)
{
    op_pool_geom g;
    FORWARD_IF_ERROR(rgpu_op_pool_avg_check(e, &g, err, errlen));
    const rgpu_view *x = e->in[0];
    return run_planes(e, PK_AVG, op_dense_ct_of(x->dtype), &g, x, NULL, e->out[0], NULL, err, errlen);
}

rgpu_status rgpu_cpu_dense_avg_pool_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    op_pool_geom g;
    FORWARD_IF_ERROR(rgpu_op_pool_avg_backward_check(e, &g, err, errlen));
    const rgpu_view *x = e->in[1];
    return run_planes(e, PK_AVG_BW, op_dense_ct_of(x->dtype), &g, e->in[0], NULL, e->out[0], NULL, err, errlen);
}

rgpu_status rgpu_cpu_dense_adaptive_pool(const rgpu_exec *e, char *err, size_t errlen)
{
    op_pool_geom g;
    FORWARD_IF_ERROR(rgpu_op_pool_adaptive_check(e, &g, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0];
    if (rgpu_op_numel(y) == 0) return RGPU_OK;
    return run_planes(e, PK_ADA, op_dense_ct_of(x->dtype), &g, x, NULL, y, NULL, err, errlen);
}

rgpu_status rgpu_cpu_dense_adaptive_pool_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    op_pool_geom g;
    FORWARD_IF_ERROR(rgpu_op_pool_adaptive_backward_check(e, &g, err, errlen));
    const rgpu_view *gr = e->in[0], *x = e->in[1];
    rgpu_view *dx = e->out[0];
    if (rgpu_op_numel(gr) == 0) {   /* nothing pooled: the gradient is zero */
        int64_t n = rgpu_op_numel(dx);
        void *z = rgpu_dense_calloc(n, 8);
        if (!z) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory", rgpu_op_name(e->op));
        rgpu_dense_store(dx, OP_CT_F64, z);
        free(z);
        return RGPU_OK;
    }
    return run_planes(e, PK_ADA_BW, op_dense_ct_of(x->dtype), &g, gr, NULL, dx, NULL, err, errlen);
}
