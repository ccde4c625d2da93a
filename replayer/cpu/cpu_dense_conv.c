/* rgpu_cpu_dense_conv.c — convolution and convolution_backward on the CPU:
 * im2col + GEMM per (image, group), 3-D (N,C,D,H,W), 2-D (N,C,H,W) as D = 1
 * and 1-D (N,C,L) as D = H = 1, plain and transposed.
 *
 * Three cores over one geometry: an input-space tensor I (N,C,H,W), an
 * output-space tensor G (N,O,Ho,Wo) and the weight (O, C/groups, kh, kw):
 *   conv_fwd:    G = conv(I, w)                       (W_g @ im2col(I_g))
 *   conv_data:   I = conv^T(G, w)                     (col2im(W_g^T @ G_g))
 *   conv_weight: dw = sum over images of G_g @ im2col(I_g)^T, in image order
 * A plain convolution runs fwd forward and data/weight backward; a transposed
 * one is the same geometry with x on the G side (its weight is
 * (C_in, C_out/groups, kh, kw)): data forward, fwd/weight backward.
 * Compute: f32 for f32/f16/bf16 (rounded once at the end), f64, and wrapping
 * int64 for integer forward (ATen's slow conv accepts integers forward only).
 * ATen's CPU conv runs oneDNN for floats, whose sums are ordered differently:
 * results agree to rounding, not bit for bit. */
#include <limits.h>
#include <stdlib.h>

#include "cpu_dense.h"
#include "cpu_dense_util.h"
#include "cpu_pool.h"


/* ---------------------------------------------------------------------------
 * im2col / col2im on one group of one image, per compute type.
 * x is (Cg, D, H, W); col is (Cg*kt*kh*kw, Do*Ho*Wo); padding reads as zero. */

#define DEFINE_IM2COL(T, SUF)                                                           \
static void im2col_##SUF(const T *x, const op_conv_geom *g, T *col)                         \
{                                                                                        \
    int64_t hwo = g->out_sp;                                                             \
    for (int64_t c = 0; c < g->Cg; c++)                                                  \
      for (int64_t kt = 0; kt < g->kt; kt++)                                             \
        for (int64_t ki = 0; ki < g->kh; ki++)                                           \
            for (int64_t kj = 0; kj < g->kw; kj++) {                                     \
                T *row = col + (((c * g->kt + kt) * g->kh + ki) * g->kw + kj) * hwo;     \
                for (int64_t od = 0; od < g->Do; od++) {                                 \
                  int64_t id = od * g->st - g->pt + kt * g->dt;                          \
                  for (int64_t oh = 0; oh < g->Ho; oh++) {                               \
                    T *r = row + (od * g->Ho + oh) * g->Wo;                              \
                    int64_t ih = oh * g->sh - g->ph + ki * g->dh;                        \
                    if (id < 0 || id >= g->D || ih < 0 || ih >= g->H) {                  \
                        for (int64_t ow = 0; ow < g->Wo; ow++) r[ow] = 0;                \
                        continue;                                                        \
                    }                                                                    \
                    const T *xr = x + ((c * g->D + id) * g->H + ih) * g->W;              \
                    for (int64_t ow = 0; ow < g->Wo; ow++) {                             \
                        int64_t iw = ow * g->sw - g->pw + kj * g->dw;                    \
                        r[ow] = (iw >= 0 && iw < g->W) ? xr[iw] : 0;                     \
                    }                                                                    \
                  }                                                                      \
                }                                                                        \
            }                                                                            \
}                                                                                        \
static void col2im_##SUF(const T *col, const op_conv_geom *g, T *x)                         \
{                                                                                        \
    int64_t hwo = g->out_sp;                                                             \
    for (int64_t c = 0; c < g->Cg; c++)                                                  \
      for (int64_t kt = 0; kt < g->kt; kt++)                                             \
        for (int64_t ki = 0; ki < g->kh; ki++)                                           \
            for (int64_t kj = 0; kj < g->kw; kj++) {                                     \
                const T *row = col + (((c * g->kt + kt) * g->kh + ki) * g->kw + kj) * hwo; \
                for (int64_t od = 0; od < g->Do; od++) {                                 \
                  int64_t id = od * g->st - g->pt + kt * g->dt;                          \
                  if (id < 0 || id >= g->D) continue;                                    \
                  for (int64_t oh = 0; oh < g->Ho; oh++) {                               \
                    const T *r = row + (od * g->Ho + oh) * g->Wo;                        \
                    int64_t ih = oh * g->sh - g->ph + ki * g->dh;                        \
                    if (ih < 0 || ih >= g->H) continue;                                  \
                    T *xr = x + ((c * g->D + id) * g->H + ih) * g->W;                    \
                    for (int64_t ow = 0; ow < g->Wo; ow++) {                             \
                        int64_t iw = ow * g->sw - g->pw + kj * g->dw;                    \
                        if (iw >= 0 && iw < g->W) xr[iw] += r[ow];                       \
                    }                                                                    \
                  }                                                                      \
                }                                                                        \
            }                                                                            \
}

DEFINE_IM2COL(float, f32)
DEFINE_IM2COL(double, f64)
DEFINE_IM2COL(uint64_t, i64)
#undef DEFINE_IM2COL

static void im2col(int ct, const void *x, const op_conv_geom *g, void *col)
{
    if (ct == OP_CT_F32) im2col_f32(x, g, col);
    else if (ct == OP_CT_F64) im2col_f64(x, g, col);
    else im2col_i64(x, g, col);
}

static void col2im(int ct, const void *col, const op_conv_geom *g, void *x)
{
    if (ct == OP_CT_F32) col2im_f32(col, g, x);
    else if (ct == OP_CT_F64) col2im_f64(col, g, x);
    else col2im_i64(col, g, x);
}

/* rows (R, L) of buf += bias[r] (bias packed as ct, NULL = nothing). */
static void add_bias_rows(int ct, void *buf, const void *bias, int64_t R, int64_t L)
{
    if (bias == NULL) return;
    for (int64_t r = 0; r < R; r++) {
        if (ct == OP_CT_F32) { float *p = (float *)buf + r * L, b = ((const float *)bias)[r];
                             for (int64_t i = 0; i < L; i++) p[i] += b; }
        else if (ct == OP_CT_F64) { double *p = (double *)buf + r * L, b = ((const double *)bias)[r];
                                  for (int64_t i = 0; i < L; i++) p[i] += b; }
        else { uint64_t *p = (uint64_t *)buf + r * L, b = ((const uint64_t *)bias)[r];
               for (int64_t i = 0; i < L; i++) p[i] += b; }
    }
}

#define NOMEM_IF(cond) do { if (cond) { st = RGPU_ERR_NOMEM; \
    rgpu_op_errf(err, errlen, "%s: out of memory for convolution buffers", rgpu_op_name(op)); goto done; } } while (0)

/* ---------------------------------------------------------------------------
 * Cores. wbuf is the weight packed as (O, Cg*kh*kw); bias packed per row of
 * the tensor written (O for fwd, C for data), or NULL. */

/* conv_fwd and conv_data over the pool, images [n0, n1) per chunk with
 * buffers of their own. Each image is computed by the same code whichever
 * thread runs it (its GEMMs' row blocks then run inline), so results are
 * those of the serial image loop, at any thread count. */
typedef struct conv_job {
    int ct;
    bool data;                       /* conv_data (col2im) rather than conv_fwd */
    const op_conv_geom *g;
    const void *wbuf, *bias;
    const rgpu_view *src;            /* fwd: I; data: G */
    rgpu_view *dst;                  /* fwd: G; data: I */
    bool nomem;
} conv_job;

static void conv_task(void *vj, int64_t n0, int64_t n1)
{
    conv_job *j = vj;
    const op_conv_geom *g = j->g;
    int ct = j->ct;
    size_t cs = op_dense_ct_size(ct);
    int64_t kd = g->Cg * g->kvol, hwo = g->out_sp, hw = g->in_sp;
    int64_t src_n = j->data ? g->O * hwo : g->C * hw, dst_n = j->data ? g->C * hw : g->O * hwo;
    char *x = rgpu_op_alloc(src_n, cs), *y = rgpu_op_alloc(dst_n, cs);
    char *col = g->pointwise ? NULL : rgpu_op_alloc(kd * hwo, cs);
    if (!x || !y || (!g->pointwise && !col)) {
        __atomic_store_n(&j->nomem, true, __ATOMIC_RELAXED);
        free(x); free(y); free(col);
        return;
    }
    for (int64_t n = n0; n < n1; n++) {
        rgpu_view in = rgpu_op_dense_subview(j->src, 0, n), out = rgpu_op_dense_subview(j->dst, 0, n);
        rgpu_dense_load(&in, ct, x);
        if (!j->data) {                /* y (O, hwo) = W_g @ im2col(x_g) */
            for (int64_t gi = 0; gi < g->groups; gi++) {
                const char *xg = x + (size_t)(gi * g->Cg * hw) * cs;
                if (!g->pointwise) im2col(ct, xg, g, col);
                rgpu_dense_gemm(ct, false, false, g->Og, hwo, kd, 1.0,
                                (const char *)j->wbuf + (size_t)(gi * g->Og * kd) * cs, kd,
                                g->pointwise ? xg : col, hwo, 0.0, y + (size_t)(gi * g->Og * hwo) * cs, hwo);
            }
            add_bias_rows(ct, y, j->bias, g->O, hwo);
        } else {                       /* y (C, hw) = col2im(W_g^T @ x_g) */
            if (!g->pointwise) memset(y, 0, (size_t)(g->C * hw) * cs);
            for (int64_t gi = 0; gi < g->groups; gi++) {
                const char *wg = (const char *)j->wbuf + (size_t)(gi * g->Og * kd) * cs;
                const char *gg = x + (size_t)(gi * g->Og * hwo) * cs;
                char *yg = y + (size_t)(gi * g->Cg * hw) * cs;
                if (g->pointwise) {
                    rgpu_dense_gemm(ct, true, false, g->Cg, hwo, g->Og, 1.0, wg, kd, gg, hwo, 0.0, yg, hw);
                } else {
                    rgpu_dense_gemm(ct, true, false, kd, hwo, g->Og, 1.0, wg, kd, gg, hwo, 0.0, col, hwo);
                    col2im(ct, col, g, yg);
                }
            }
            add_bias_rows(ct, y, j->bias, g->C, hw);
        }
        rgpu_dense_store(&out, ct, y);
    }
    free(x); free(y); free(col);
}

/* Images over the pool (small images or few channels: one row block each). */
static rgpu_status conv_images(int op, conv_job *j, char *err, size_t errlen)
{
    const op_conv_geom *g = j->g;
    int64_t kd = g->Cg * g->kvol;
    int64_t rows = j->data ? (g->pointwise ? g->Cg : kd) : g->Og, depth = j->data ? g->Og : kd;
    int64_t grain = rgpu_dense_items_grain(g->N, g->groups, rows, g->out_sp, depth);
    rgpu_pool_for(g->N, grain, conv_task, j);
    if (j->nomem) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for convolution buffers", rgpu_op_name(op));
    return RGPU_OK;
}

static rgpu_status conv_fwd(int op, int ct, const op_conv_geom *g, const void *wbuf, const void *bias,
                            const rgpu_view *I, rgpu_view *G, char *err, size_t errlen)
{
    conv_job j = { ct, false, g, wbuf, bias, I, G, false };
    return conv_images(op, &j, err, errlen);
}

static rgpu_status conv_data(int op, int ct, const op_conv_geom *g, const void *wbuf, const void *bias,
                             const rgpu_view *G, rgpu_view *I, char *err, size_t errlen)
{
    conv_job j = { ct, true, g, wbuf, bias, G, I, false };
    return conv_images(op, &j, err, errlen);
}

static rgpu_status conv_weight(int op, int ct, const op_conv_geom *g, const rgpu_view *I, const rgpu_view *G,
                               rgpu_view *dw, char *err, size_t errlen)
{
    rgpu_status st = RGPU_OK;
    size_t cs = op_dense_ct_size(ct);
    int64_t kd = g->Cg * g->kvol, hwo = g->out_sp, hw = g->in_sp;
    char *x = rgpu_op_alloc(g->C * hw, cs);
    char *col = g->pointwise ? NULL : rgpu_op_alloc(kd * hwo, cs);
    char *gb = rgpu_op_alloc(g->O * hwo, cs);
    char *wb = rgpu_dense_calloc(g->O * kd, cs);
    /* dw_g (Og, kd) is a GEMM of few rows (the output channels) and a long
     * depth: one row block, one thread. Its transpose (kd, Og) = col @ G_g^T
     * has kd rows and splits over the pool; each element still sums the
     * images in order. */
    bool tr = g->Og <= rgpu_dense_gemm_block_rows(g->Og, kd, hwo) && kd > rgpu_dense_gemm_block_rows(kd, g->Og, hwo);
    char *wt = tr ? rgpu_dense_calloc(g->O * kd, cs) : NULL;
    NOMEM_IF(!x || (!g->pointwise && !col) || !gb || !wb || (tr && !wt));
    for (int64_t n = 0; n < g->N; n++) {
        rgpu_view in = rgpu_op_dense_subview(I, 0, n), gv = rgpu_op_dense_subview(G, 0, n);
        rgpu_dense_load(&in, ct, x);
        rgpu_dense_load(&gv, ct, gb);
        for (int64_t gi = 0; gi < g->groups; gi++) {
            const char *xg = x + (size_t)(gi * g->Cg * hw) * cs, *gg = gb + (size_t)(gi * g->Og * hwo) * cs;
            if (!g->pointwise) im2col(ct, xg, g, col);
            if (tr)
                rgpu_dense_gemm(ct, false, true, kd, g->Og, hwo, 1.0, g->pointwise ? xg : col, hwo, gg, hwo,
                                1.0, wt + (size_t)(gi * g->Og * kd) * cs, g->Og);
            else
                rgpu_dense_gemm(ct, false, true, g->Og, kd, hwo, 1.0, gg, hwo, g->pointwise ? xg : col, hwo,
                                1.0, wb + (size_t)(gi * g->Og * kd) * cs, kd);
        }
    }
    if (tr) {   /* wb[group][o][j] = wt[group][j][o] */
        for (int64_t gi = 0; gi < g->groups; gi++)
            for (int64_t o = 0; o < g->Og; o++)
                for (int64_t q = 0; q < kd; q++)
                    memcpy(wb + (size_t)((gi * g->Og + o) * kd + q) * cs,
                           wt + (size_t)(gi * g->Og * kd + q * g->Og + o) * cs, cs);
    }
    rgpu_dense_store(dw, ct, wb);
done:
    free(x); free(col); free(gb); free(wb); free(wt);
    return st;
}

/* db[c] = sum of grad over N and the spatial dims, in double, image order. */
static rgpu_status conv_bias_grad(int op, const rgpu_view *grad, rgpu_view *db, char *err, size_t errlen)
{
    int64_t C = grad->sizes[1], per = grad->sizes[0];
    for (int d = 2; d < grad->ndim; d++) per *= grad->sizes[d];
    double *buf = rgpu_op_alloc(per, sizeof(double)), *sums = rgpu_op_alloc(C, sizeof(double));
    if (!buf || !sums) {
        free(buf); free(sums);
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for the bias gradient", rgpu_op_name(op));
    }
    for (int64_t c = 0; c < C; c++) {
        rgpu_view v = rgpu_op_dense_subview(grad, 1, c);
        rgpu_dense_load(&v, OP_CT_F64, buf);
        double s = 0.0;
        for (int64_t i = 0; i < per; i++) s += buf[i];
        sums[c] = s;
    }
    rgpu_dense_store(db, OP_CT_F64, sums);
    free(buf); free(sums);
    return RGPU_OK;
}

/* Weight (O, Cg, kh, kw) packed as (O, Cg*kh*kw). */
static void *pack_weight(int ct, const rgpu_view *w)
{
    void *buf = rgpu_op_alloc(rgpu_op_numel(w), op_dense_ct_size(ct));
    if (buf) rgpu_dense_load(w, ct, buf);
    return buf;
}

/* ---------------------------------------------------------------------------
 * Entry points */

/* in x, w, bias?; stride, padding, dilation, transposed, output_padding, groups */
rgpu_status rgpu_cpu_dense_conv(const rgpu_exec *e, char *err, size_t errlen)
{
    op_conv_fwd q;
    FORWARD_IF_ERROR(rgpu_op_conv_fwd_args(e, "cpu", &q, err, errlen));
    if (q.empty) return RGPU_OK;
    const char *name = rgpu_op_name(e->op);

    int ct = op_dense_ct_of(q.dt);
    void *wb = pack_weight(ct, &q.w), *bb = NULL;
    if (q.bias) { bb = rgpu_op_alloc(q.nb, op_dense_ct_size(ct)); if (bb) rgpu_dense_load(q.bias, ct, bb); }
    rgpu_status st;
    if (!wb || (q.bias && !bb)) {
        rgpu_op_errf(err, errlen, "%s: out of memory packing the weight", name);
        st = RGPU_ERR_NOMEM;
    } else if (!q.a.transposed) {
        st = conv_fwd(e->op, ct, &q.g, wb, bb, &q.x, &q.y, err, errlen);
    } else {
        st = conv_data(e->op, ct, &q.g, wb, bb, &q.x, &q.y, err, errlen);
    }
    free(wb); free(bb);
    return st;
}

/* in grad, x, w; bias_sizes|NONE, stride, padding, dilation, transposed,
 * output_padding, groups; outs dx?, dw?, db? */
rgpu_status rgpu_cpu_dense_conv_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    op_conv_bwd q;
    FORWARD_IF_ERROR(rgpu_op_conv_bwd_args(e, "cpu", &q, err, errlen));
    const char *name = rgpu_op_name(e->op);

    int ct = op_dense_ct_of(q.dt);
    rgpu_status st = RGPU_OK;
    if (q.dx0 && rgpu_op_numel(q.dx0) > 0) {
        rgpu_view dx = rgpu_op_conv_as_4d(q.dx0);
        void *wb = pack_weight(ct, &q.w);
        if (!wb) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory packing the weight", name);
        if (!q.a.transposed) st = conv_data(e->op, ct, &q.g, wb, NULL, &q.gr, &dx, err, errlen);
        else st = conv_fwd(e->op, ct, &q.g, wb, NULL, &q.gr, &dx, err, errlen);
        free(wb);
        FORWARD_IF_ERROR(st);
    }
    if (q.dw0 && rgpu_op_numel(q.dw0) > 0) {
        rgpu_view dw = rgpu_op_conv_as_4d(q.dw0);
        if (!q.a.transposed) st = conv_weight(e->op, ct, &q.g, &q.x, &q.gr, &dw, err, errlen);
        else st = conv_weight(e->op, ct, &q.g, &q.gr, &q.x, &dw, err, errlen);
        FORWARD_IF_ERROR(st);
    }
    if (q.db && rgpu_op_numel(q.db) > 0) FORWARD_IF_ERROR(conv_bias_grad(e->op, &q.gr, q.db, err, errlen));
    return RGPU_OK;
}
