/* cpu_reduce2_norm.c — the CPU reference for _softmax, _log_softmax and their
 * backwards, native_layer_norm (+ backward) and nll_loss (+ backward).
 *
 * All of them work row by row: a row is loaded into a double buffer (any
 * dtype, any strides), computed in double, stored in the output's dtype. The
 * training hot paths (softmax / layer norm over a contiguous last dim) thus
 * run as a few tight passes over a row that sits in L1. Outputs are written
 * only after the row has been read, so an output aliasing its input is fine.
 *
 * Rows run over the thread pool (rgpu_pool_for over the outer rows, grain from
 * the row length); each row is computed by the same code whatever thread runs
 * it. Sums along a row use R2_LANES lane accumulators (a fixed order); layer
 * norm backward's weight/bias gradients are column sums: one partial per
 * fixed block of rows, combined in block order on the calling thread. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_families.h"
#include "cpu_pool.h"
#include "cpu_reduce2.h"
#include "cpu_reduce2_util.h"
#include "cpu_vmath.h"
#include "op/ctc.h"

/* ---------------------------------------------------------------------------
 * softmax, log_softmax: in x, out y (x's shape); args int dim, bool half_to_float.
 *   y = exp(x - max) / sum(exp(x - max))          along dim
 *   y = x - max - log(sum(exp(x - max)))          (log)
 * half_to_float only changes out's dtype (f32 for f16/bf16 x), which the
 * client already chose. A 0-d x is one row of one element. */

/* A counter over every dim of v but dim (0-d: one position), with the
 * operands' strides; row n/strides along dim in bytes. */
static void rows_along(r2_ctr *c, const rgpu_view *const *v, int nv, int dim,
                       int64_t *n, int64_t *rs)
{
    const rgpu_view *v0 = v[0];
    int64_t sz[RGPU_MAX_DIMS];
    for (int d = 0; d < v0->ndim; d++) sz[d] = d == dim ? 1 : v0->sizes[d];
    rgpu_r2_ctr_init(c, v0->ndim, sz);
    *n = v0->ndim > 0 ? v0->sizes[dim] : 1;
    for (int k = 0; k < nv; k++) {
        int64_t esz = (int64_t)rgpu_dtype_size(v[k]->dtype);
        rgpu_r2_ctr_add(c, v[k]->strides, esz);
        rs[k] = v0->ndim > 0 ? v[k]->strides[dim] * esz : 0;
    }
}

/* Rows in double whose results are rounded to a float type (f32/f16/bf16
 * in and out) take cpu_vmath's vectorised exp (1 ulp in double, then one
 * rounding to float); f64 keeps libm's. */
static bool float_results(const rgpu_view *in, const rgpu_view *out)
{
    return in->dtype != RGPU_F64 && out->dtype != RGPU_F64;
}

static void row_exp(double *x, int64_t n, bool fast)
{
    if (fast) rgpu_vm_exp_d2f(x, x, n);
    else for (int64_t i = 0; i < n; i++) x[i] = exp(x[i]);
}

typedef struct rows_job {
    r2_ctr c;                 /* the outer rows */
    int64_t n, rs[3];         /* row length, byte strides along it */
    const rgpu_view *v[3];
    bool is_log;
    bool nomem;
} rows_job;

static void softmax_task(void *vj, int64_t b, int64_t e)
{
    rows_job *j = vj;
    const rgpu_view *in = j->v[0], *out = j->v[1];
    int64_t n = j->n;
    double *buf = rgpu_op_alloc(n, 2 * sizeof *buf);
    if (buf == NULL) { __atomic_store_n(&j->nomem, true, __ATOMIC_RELAXED); return; }
    double *ex = buf + n;
    bool fast = float_results(in, out);
    r2_ctr c = j->c;
    rgpu_r2_ctr_seek(&c, b);
    for (int64_t r = b; r < e; r++, r2_ctr_next(&c)) {
        cpu_load_row_f64(buf, (const char *)in->data + c.off[0], in->dtype, j->rs[0], n);
        if (fast) {             /* the same operations in this CPU's widest build */
            rgpu_vm_softmax_row(buf, ex, n, j->is_log);
            cpu_store_row_f64((char *)out->data + c.off[1], out->dtype, j->rs[1], buf, n);
            continue;
        }
        double mx = rgpu_vm_max_f64(buf, n);
        if (j->is_log) {
            for (int64_t i = 0; i < n; i++) ex[i] = buf[i] - mx;
            row_exp(ex, n, fast);
            double sub = mx + log(r2_sum_f64(ex, n));
            for (int64_t i = 0; i < n; i++) buf[i] = buf[i] - sub;
        } else {
            for (int64_t i = 0; i < n; i++) buf[i] = buf[i] - mx;
            row_exp(buf, n, fast);
            double sum = r2_sum_f64(buf, n);
            if (fast) {   /* ATen's order: one reciprocal, then a multiply per element */
                double inv = 1.0 / sum;
                for (int64_t i = 0; i < n; i++) buf[i] *= inv;
            } else {
                for (int64_t i = 0; i < n; i++) buf[i] /= sum;
            }
        }
        cpu_store_row_f64((char *)out->data + c.off[1], out->dtype, j->rs[1], buf, n);
    }
    free(buf);
}

rgpu_status rgpu_r2_softmax(const rgpu_exec *e, bool is_log, char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    int dim;
    FORWARD_IF_ERROR(rgpu_op_softmax_check(e, &dim, err, errlen));

    rows_job j;
    memset(&j, 0, sizeof j);
    j.v[0] = in;
    j.v[1] = out;
    j.is_log = is_log;
    rows_along(&j.c, j.v, 2, dim, &j.n, j.rs);
    if (j.c.total == 0 || j.n == 0) return RGPU_OK;
    rgpu_pool_for(j.c.total, rgpu_pool_grain(j.n * 16), softmax_task, &j);
    if (j.nomem) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for a row of %lld", rgpu_op_name(e->op), (long long)j.n);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * _softmax_backward_data / _log_softmax_backward_data: in grad g, output y
 * (same shape); args int dim, DTYPE input_dtype (out's dtype).
 *   softmax:     gx = y * (g - sum(g * y))
 *   log_softmax: gx = g - exp(y) * sum(g) */

static void softmax_bw_task(void *vj, int64_t b, int64_t e)
{
    rows_job *j = vj;
    const rgpu_view *g = j->v[0], *y = j->v[1], *out = j->v[2];
    int64_t n = j->n;
    double *gb = rgpu_op_alloc(n, 2 * sizeof *gb);
    if (gb == NULL) { __atomic_store_n(&j->nomem, true, __ATOMIC_RELAXED); return; }
    double *yb = gb + n;
    bool fast = float_results(y, out);
    r2_ctr c = j->c;
    rgpu_r2_ctr_seek(&c, b);
    for (int64_t r = b; r < e; r++, r2_ctr_next(&c)) {
        cpu_load_row_f64(gb, (const char *)g->data + c.off[0], g->dtype, j->rs[0], n);
        cpu_load_row_f64(yb, (const char *)y->data + c.off[1], y->dtype, j->rs[1], n);
        if (fast || !j->is_log) {   /* this CPU's widest build */
            rgpu_vm_softmax_bw_row(gb, yb, n, j->is_log);
        } else {                    /* log_softmax of float64: libm's exp */
            double sum = r2_sum_f64(gb, n);
            row_exp(yb, n, false);
            for (int64_t i = 0; i < n; i++) gb[i] -= yb[i] * sum;
        }
        cpu_store_row_f64((char *)out->data + c.off[2], out->dtype, j->rs[2], gb, n);
    }
    free(gb);
}

rgpu_status rgpu_r2_softmax_backward(const rgpu_exec *e, bool is_log, char *err, size_t errlen)
{
    int dim;
    FORWARD_IF_ERROR(rgpu_op_softmax_backward_check(e, &dim, err, errlen));

    rows_job j;
    memset(&j, 0, sizeof j);
    j.v[0] = e->in[0];
    j.v[1] = e->in[1];
    j.v[2] = e->out[0];
    j.is_log = is_log;
    rows_along(&j.c, j.v, 3, dim, &j.n, j.rs);
    if (j.c.total == 0 || j.n == 0) return RGPU_OK;
    rgpu_pool_for(j.c.total, rgpu_pool_grain(j.n * (is_log ? 16 : 4)), softmax_bw_task, &j);
    if (j.nomem) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for a row of %lld", rgpu_op_name(e->op), (long long)j.n);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Layer norm shapes: x is (lead..., norm...) with norm = normalized_shape,
 * M = prod(lead), N = prod(norm); mean/rstd are (lead..., 1...); weight and
 * bias are norm-shaped. */

/* v (norm-shaped, optional) as N doubles; fill when v is NULL. */
static rgpu_status ln_param(const rgpu_view *v, int64_t N, double fill, double *dst, char *err, size_t errlen)
{
    if (v == NULL) { for (int64_t i = 0; i < N; i++) dst[i] = fill; return RGPU_OK; }
    r2_row r;
    FORWARD_IF_ERROR(rgpu_r2_row_init(&r, v, 0, err, errlen));
    rgpu_r2_row_load(&r, v->data, dst);
    rgpu_r2_row_free(&r);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * native_layer_norm: in x, weight?, bias?; args ints normalized_shape, float
 * eps; outs y (x's shape), mean, rstd (stat shape).
 *   mean = sum(x)/N, var = sum((x - mean)^2)/N (biased), rstd = 1/sqrt(var + eps)
 *   y = (x - mean) * rstd * w + b
 * N == 0 gives mean 0, rstd NaN, as ATen. */

typedef struct ln_job {
    r2_ctr c;                 /* the leading dims: operands per kernel below */
    r2_row r[3];              /* rows: forward x, y; backward g, x, dx */
    const rgpu_view *v[7];
    int64_t N;
    double eps;
    const double *wb, *bb;    /* weight / bias as N doubles */
    double *part;             /* backward: per row block, dw then db partials (2N) */
    int64_t grain;
    bool rms;                 /* rms norm: mean taken as 0, no bias, no db */
    bool nomem;
} ln_job;

/* forward: operands x, y, mean, rstd */
static void ln_task(void *vj, int64_t b, int64_t e)
{
    ln_job *j = vj;
    const rgpu_view *x = j->v[0], *y = j->v[1], *mean = j->v[2], *rstd = j->v[3];
    int64_t N = j->N;
    double *buf = rgpu_op_alloc(N > 0 ? N : 1, sizeof *buf);
    if (buf == NULL) { __atomic_store_n(&j->nomem, true, __ATOMIC_RELAXED); return; }
    const double *restrict wb = j->wb, *restrict bb = j->bb;
    r2_ctr c = j->c;
    rgpu_r2_ctr_seek(&c, b);
    for (int64_t r = b; r < e; r++, r2_ctr_next(&c)) {
        rgpu_r2_row_load(&j->r[0], (const char *)x->data + c.off[0], buf);
        double mu = 0.0, rs = NAN;
        if (N > 0) rgpu_vm_ln_row(buf, N, wb, bb, j->eps, j->rms, &mu, &rs);   /* this CPU's widest build */
        rgpu_r2_row_store(&j->r[1], (char *)y->data + c.off[1], buf);
        if (mean) op_store_f64((char *)mean->data + c.off[2], mean->dtype, mu);
        if (rstd) op_store_f64((char *)rstd->data + c.off[3], rstd->dtype, rs);
    }
    free(buf);
}

static rgpu_status ln_forward(const char *name, const rgpu_view *x, const rgpu_view *w, const rgpu_view *b, rgpu_view *y,
                              rgpu_view *mean, rgpu_view *rstd, const op_ln_shape s, bool rms, char *err, size_t errlen)
{
    if (s.M == 0) return RGPU_OK;
    ln_job j;
    memset(&j, 0, sizeof j);
    j.rms = rms;
    j.v[0] = x; j.v[1] = y; j.v[2] = mean; j.v[3] = rstd;
    j.N = s.N;
    j.eps = s.eps;
    rgpu_r2_ctr_init(&j.c, s.lead, x->sizes);
    rgpu_r2_ctr_add(&j.c, x->strides, (int64_t)rgpu_dtype_size(x->dtype));
    rgpu_r2_ctr_add(&j.c, y->strides, (int64_t)rgpu_dtype_size(y->dtype));
    rgpu_r2_ctr_add(&j.c, mean ? mean->strides : NULL, mean ? (int64_t)rgpu_dtype_size(mean->dtype) : 0);
    rgpu_r2_ctr_add(&j.c, rstd ? rstd->strides : NULL, rstd ? (int64_t)rgpu_dtype_size(rstd->dtype) : 0);
    FORWARD_IF_ERROR(rgpu_r2_row_init(&j.r[0], x, s.lead, err, errlen));
    rgpu_status st = rgpu_r2_row_init(&j.r[1], y, s.lead, err, errlen);
    if (st != RGPU_OK) { rgpu_r2_row_free(&j.r[0]); return st; }
    double *buf = rgpu_op_alloc(s.N, 2 * sizeof *buf);
    if (buf == NULL) {
        rgpu_r2_row_free(&j.r[0]); rgpu_r2_row_free(&j.r[1]);
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for rows of %lld", name, (long long)s.N);
    }
    double *wb = buf, *bb = wb + s.N;
    j.wb = wb;
    j.bb = bb;
    st = ln_param(w, s.N, 1.0, wb, err, errlen);
    if (st == RGPU_OK) st = ln_param(b, s.N, 0.0, bb, err, errlen);
    if (st == RGPU_OK) {
        rgpu_pool_for(s.M, rgpu_pool_grain(s.N * 4), ln_task, &j);
        if (j.nomem) st = rgpu_op_fail(err, errlen, RGPU_ERR_NOMEM, "%s: out of memory for rows of %lld", name, (long long)s.N);
    }
    free(buf);
    rgpu_r2_row_free(&j.r[0]);
    rgpu_r2_row_free(&j.r[1]);
    return st;
}

rgpu_status rgpu_r2_layer_norm(const rgpu_exec *e, char *err, size_t errlen)
{
    op_ln_shape s;
    FORWARD_IF_ERROR(rgpu_op_layer_norm_check(e, &s, err, errlen));
    return ln_forward(rgpu_op_name(e->op), e->in[0], e->in[1], e->in[2], e->out[0], e->out[1], e->out[2], s, false,
                      err, errlen);
}

/* _fused_rms_norm: in x, weight?; outs y, rstd?: layer norm with mean 0 and no bias. */
rgpu_status rgpu_r2_rms_norm(const rgpu_exec *e, char *err, size_t errlen)
{
    op_ln_shape s;
    FORWARD_IF_ERROR(rgpu_op_rms_norm_check(e, &s, err, errlen));
    return ln_forward(rgpu_op_name(e->op), e->in[0], e->in[1], NULL, e->out[0], NULL, e->out[1], s, true, err, errlen);
}

/* ---------------------------------------------------------------------------
 * native_layer_norm_backward: in grad g, x, mean, rstd, weight?, bias?;
 * args ints normalized_shape; outs dx?, dw?, db? (NULL: not wanted).
 * Per row, with xhat = (x - mean) * rstd and gw = g * w:
 *   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
 *   dw = sum over rows of g * xhat,  db = sum over rows of g
 * mean/rstd are the saved ones (not recomputed), as ATen. dw and db sum each
 * fixed block of rows (the pool's chunks) into a partial; the partials are
 * added in block order. */

#define LN_MAX_BLOCKS 64

/* operands g, x, mean, rstd, dx */
static void ln_bw_task(void *vj, int64_t b, int64_t e)
{
    ln_job *j = vj;
    const rgpu_view *g = j->v[0], *x = j->v[1], *mean = j->v[2], *rstd = j->v[3], *dx = j->v[4];
    int64_t N = j->N;
    double *buf = rgpu_op_alloc(N, 3 * sizeof *buf);
    if (buf == NULL) { __atomic_store_n(&j->nomem, true, __ATOMIC_RELAXED); return; }
    double *restrict gb = buf, *restrict xb = gb + N, *restrict gwb = xb + N;
    double *restrict dwa = j->part + b / j->grain * 2 * N, *restrict dba = dwa + N;
    const double *restrict wb = j->wb;
    for (int64_t i = 0; i < N; i++) { dwa[i] = 0.0; dba[i] = 0.0; }
    r2_ctr c = j->c;
    rgpu_r2_ctr_seek(&c, b);
    for (int64_t r = b; r < e; r++, r2_ctr_next(&c)) {
        rgpu_r2_row_load(&j->r[0], (const char *)g->data + c.off[0], gb);
        rgpu_r2_row_load(&j->r[1], (const char *)x->data + c.off[1], xb);
        double mu = mean ? op_load_f64((const char *)mean->data + c.off[2], mean->dtype) : 0.0;   /* rms: 0 */
        double rs = op_load_f64((const char *)rstd->data + c.off[3], rstd->dtype);
        rgpu_vm_ln_bw_row(gb, xb, gwb, dwa, dba, wb, N, mu, rs, j->rms, dx != NULL);
        if (dx) rgpu_r2_row_store(&j->r[2], (char *)dx->data + c.off[4], xb);
    }
    free(buf);
}

static rgpu_status ln_backward(const char *name, const rgpu_view *g, const rgpu_view *x, const rgpu_view *mean,
                               const rgpu_view *rstd, const rgpu_view *w, rgpu_view *dx, rgpu_view *dw, rgpu_view *db,
                               const op_ln_shape s, bool rms, char *err, size_t errlen)
{
    if (s.N == 0 || (dx == NULL && dw == NULL && db == NULL)) return RGPU_OK;

    int64_t N = s.N, M = s.M;
    ln_job j;
    memset(&j, 0, sizeof j);
    j.rms = rms;
    j.v[0] = g; j.v[1] = x; j.v[2] = mean; j.v[3] = rstd; j.v[4] = dx;
    j.N = N;
    /* row blocks: by work, at most LN_MAX_BLOCKS of them (sizes only) */
    j.grain = rgpu_pool_grain(N * 8);
    if (j.grain < (M + LN_MAX_BLOCKS - 1) / LN_MAX_BLOCKS) j.grain = (M + LN_MAX_BLOCKS - 1) / LN_MAX_BLOCKS;
    int64_t blocks = rgpu_pool_chunks(M, j.grain);
    rgpu_status st = RGPU_OK;
    double *buf = rgpu_op_alloc(N, (size_t)(3 + 2 * blocks) * sizeof *buf);
    if (buf == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for rows of %lld", name, (long long)N);
    double *wb = buf, *dwa = wb + N, *dba = dwa + N;
    j.wb = wb;
    j.part = dba + N;
    for (int64_t i = 0; i < N; i++) { dwa[i] = 0.0; dba[i] = 0.0; }
    st = ln_param(w, N, 1.0, wb, err, errlen);
    if (st == RGPU_OK) st = rgpu_r2_row_init(&j.r[0], g, s.lead, err, errlen);
    if (st == RGPU_OK) st = rgpu_r2_row_init(&j.r[1], x, s.lead, err, errlen);
    if (st == RGPU_OK && dx) st = rgpu_r2_row_init(&j.r[2], dx, s.lead, err, errlen);
    if (st == RGPU_OK && M > 0) {
        rgpu_r2_ctr_init(&j.c, s.lead, x->sizes);
        rgpu_r2_ctr_add(&j.c, g->strides, (int64_t)rgpu_dtype_size(g->dtype));
        rgpu_r2_ctr_add(&j.c, x->strides, (int64_t)rgpu_dtype_size(x->dtype));
        rgpu_r2_ctr_add(&j.c, mean ? mean->strides : NULL, mean ? (int64_t)rgpu_dtype_size(mean->dtype) : 0);
        rgpu_r2_ctr_add(&j.c, rstd->strides, (int64_t)rgpu_dtype_size(rstd->dtype));
        rgpu_r2_ctr_add(&j.c, dx ? dx->strides : NULL, dx ? (int64_t)rgpu_dtype_size(dx->dtype) : 0);
        rgpu_pool_for(M, j.grain, ln_bw_task, &j);
        if (j.nomem) st = rgpu_op_fail(err, errlen, RGPU_ERR_NOMEM, "%s: out of memory for rows of %lld", name, (long long)N);
        for (int64_t k = 0; k < blocks; k++) {
            const double *restrict pw = j.part + k * 2 * N, *restrict pb = pw + N;
            for (int64_t i = 0; i < N; i++) { dwa[i] += pw[i]; dba[i] += pb[i]; }
        }
    }
    if (st == RGPU_OK && dw) {
        r2_row r;
        st = rgpu_r2_row_init(&r, dw, 0, err, errlen);
        if (st == RGPU_OK) { rgpu_r2_row_store(&r, dw->data, dwa); rgpu_r2_row_free(&r); }
    }
    if (st == RGPU_OK && db) {
        r2_row r;
        st = rgpu_r2_row_init(&r, db, 0, err, errlen);
        if (st == RGPU_OK) { rgpu_r2_row_store(&r, db->data, dba); rgpu_r2_row_free(&r); }
    }
    free(buf);
    rgpu_r2_row_free(&j.r[0]);
    rgpu_r2_row_free(&j.r[1]);
    rgpu_r2_row_free(&j.r[2]);
    return st;
}

rgpu_status rgpu_r2_layer_norm_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    op_ln_shape s;
    FORWARD_IF_ERROR(rgpu_op_layer_norm_backward_check(e, &s, err, errlen));
    return ln_backward(rgpu_op_name(e->op), e->in[0], e->in[1], e->in[2], e->in[3], e->in[4], e->out[0], e->out[1],
                       e->out[2], s, false, err, errlen);
}

/* _fused_rms_norm_backward: in grad, x, rstd, weight?; outs dx?, dw?. */
rgpu_status rgpu_r2_rms_norm_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    op_ln_shape s;
    FORWARD_IF_ERROR(rgpu_op_rms_norm_backward_check(e, &s, err, errlen));
    return ln_backward(rgpu_op_name(e->op), e->in[0], e->in[1], NULL, e->in[2], e->in[3], e->out[0], e->out[1], NULL,
                       s, true, err, errlen);
}

/* ---------------------------------------------------------------------------
 * nll_loss: logp is (N,C) with target (N,), or (C,) with target () or (1,);
 * weight? is (C,); targets are int64 or uint8. */

/* s's element strides as byte strides. */
static void nll_bytes(op_nll_shape *s, const rgpu_view *logp, const rgpu_view *t, const rgpu_view *w)
{
    int64_t le = (int64_t)rgpu_dtype_size(logp->dtype);
    s->ls0 *= le;
    s->ls1 *= le;
    s->ts *= (int64_t)rgpu_dtype_size(t->dtype);
    if (w) s->ws *= (int64_t)rgpu_dtype_size(w->dtype);
}

static int64_t nll_target(const rgpu_view *t, const op_nll_shape *s, int64_t i)
{
    return (int64_t)op_load_u64((const char *)t->data + i * s->ts, t->dtype);
}

/* Each of the first n non-ignored targets in [0, C) or RGPU_ERR_BAD_ARG
 * (checked before any write). */
static rgpu_status nll_check_targets(const rgpu_exec *e, const rgpu_view *t, const op_nll_shape *s, int64_t n,
                                     char *err, size_t errlen)
{
    for (int64_t i = 0; i < n; i++) {
        int64_t v = nll_target(t, s, i);
        if (v != s->ignore && (v < 0 || v >= s->C))
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: Target %lld is out of bounds.", rgpu_op_name(e->op), (long long)v);
    }
    return RGPU_OK;
}

/* nll_loss_forward: args int reduction, int ignore_index; outs loss
 * ((N,) for reduction none with 2-d logp, else 0-d), total_weight? (0-d).
 *   loss_i = -w[t_i] * logp[i, t_i]  (0 where t_i == ignore_index)
 *   total_weight = sum of w[t_i] over non-ignored i (0 for none with 2-d logp)
 *   mean: sum(loss_i) / total_weight (NaN for an empty logp); sum: sum(loss_i) */
rgpu_status rgpu_r2_nll_loss(const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *logp = e->in[0], *t = e->in[1], *w = e->in[2];
    rgpu_view *loss = e->out[0], *tw = e->out[1];
    op_nll_shape s;
    FORWARD_IF_ERROR(rgpu_op_nll_loss_check(e, &s, err, errlen));
    bool per_row = s.per_row;
    nll_bytes(&s, logp, t, w);
    /* as ATen: a reduced loss over an empty logp checks no target */
    FORWARD_IF_ERROR(nll_check_targets(e, t, &s, per_row || s.C > 0 ? s.N : 0, err, errlen));
    const char *lp = logp->data;
    if (per_row) {
        int64_t os = loss->ndim == 1 ? loss->strides[0] * (int64_t)rgpu_dtype_size(loss->dtype) : 0;
        for (int64_t i = 0; i < s.N; i++) {
            int64_t c = nll_target(t, &s, i);
            double v = 0.0;
            if (c != s.ignore) {
                double wc = w ? op_load_f64((const char *)w->data + c * s.ws, w->dtype) : 1.0;
                v = -op_load_f64(lp + i * s.ls0 + c * s.ls1, logp->dtype) * wc;
            }
            op_store_f64((char *)loss->data + i * os, loss->dtype, v);
        }
        if (tw) op_store_f64(tw->data, tw->dtype, 0.0);
        return RGPU_OK;
    }
    double sum = 0.0, wsum = 0.0;
    bool empty = s.N * s.C == 0;
    for (int64_t i = 0; !empty && i < s.N; i++) {
        int64_t c = nll_target(t, &s, i);
        if (c == s.ignore) continue;
        double wc = w ? op_load_f64((const char *)w->data + c * s.ws, w->dtype) : 1.0;
        sum -= op_load_f64(lp + i * s.ls0 + c * s.ls1, logp->dtype) * wc;
        wsum += wc;
    }
    double out = sum;
    if (s.reduction == 1) out = empty ? NAN : sum / wsum;
    op_store_f64(loss->data, loss->dtype, out);
    if (tw) op_store_f64(tw->data, tw->dtype, wsum);
    return RGPU_OK;
}

typedef struct nll_bw_job {
    const op_nll_shape *s;
    const rgpu_view *t, *w, *go;
    rgpu_view *gx;
    double g;             /* the reduced grad (-grad, / total_weight for mean) */
    int64_t gos;          /* per-row grad's byte stride */
    bool per_row;
    int64_t ge, gs0, gs1;
} nll_bw_job;

/* rows [b, e) of grad_input: zeros, then -w[t_i] * grad at the target */
static void nll_bw_task(void *vj, int64_t b, int64_t e)
{
    const nll_bw_job *j = vj;
    const op_nll_shape *s = j->s;
    char *gp = j->gx->data;
    for (int64_t i = b; i < e; i++) {
        char *row = gp + i * j->gs0;
        if (j->gs1 == j->ge) memset(row, 0, (size_t)(s->C * j->ge));   /* 0.0 is all-zero bits in every dtype */
        else for (int64_t c = 0; c < s->C; c++) op_store_f64(row + c * j->gs1, j->gx->dtype, 0.0);
        int64_t c = nll_target(j->t, s, i);
        if (c == s->ignore) continue;
        double wc = j->w ? op_load_f64((const char *)j->w->data + c * s->ws, j->w->dtype) : 1.0;
        double gi = j->per_row ? -op_load_f64((const char *)j->go->data + i * j->gos, j->go->dtype) : j->g;
        op_store_f64(row + c * j->gs1, j->gx->dtype, wc * gi);
    }
}

/* nll_loss_backward: in grad ((N,) for none with 2-d logp, else one
 * element), logp, target, weight?, total_weight (one element); args int
 * reduction, int ignore_index; out grad_input (logp's shape): zeros except
 *   none (2-d): gx[i, t_i] = -w[t_i] * grad[i]
 *   otherwise:  gx[i, t_i] = -w[t_i] * grad (/ total_weight for mean) */
rgpu_status rgpu_r2_nll_loss_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *go = e->in[0], *logp = e->in[1], *t = e->in[2], *w = e->in[3], *twv = e->in[4];
    rgpu_view *gx = e->out[0];
    op_nll_shape s;
    FORWARD_IF_ERROR(rgpu_op_nll_loss_backward_check(e, &s, err, errlen));
    bool per_row = s.per_row;
    nll_bytes(&s, logp, t, w);
    FORWARD_IF_ERROR(nll_check_targets(e, t, &s, s.N, err, errlen));

    nll_bw_job j = { &s, t, w, go, gx, 0.0, 0, per_row, 0, 0, 0 };
    j.ge = (int64_t)rgpu_dtype_size(gx->dtype);
    j.gs0 = s.batched ? gx->strides[0] * j.ge : 0;
    j.gs1 = gx->strides[gx->ndim - 1] * j.ge;
    if (s.N * s.C == 0) return RGPU_OK;
    if (per_row) j.gos = go->strides[0] * (int64_t)rgpu_dtype_size(go->dtype);
    else {
        j.g = -op_load_f64(go->data, go->dtype);
        if (s.reduction == 1) j.g /= op_load_f64(twv->data, twv->dtype);
    }
    rgpu_pool_for(s.N, rgpu_pool_grain(s.C), nll_bw_task, &j);
    return RGPU_OK;
}

/* --- cross_entropy_loss (fused: logits in, no log-softmax tensor) ------------------------
 * in logits, target, weight?; outs loss, total_weight?, lse: nll_loss of
 * log_softmax(logits) with lse_i = max + ln sum_c exp(x_ic - max) saved. Rows
 * run on the pool (each writes its lse and its term); the reduction adds the
 * terms in row order on the calling thread. */

typedef struct ce_job {
    const op_nll_shape *s;
    const rgpu_view *x, *t, *w, *go;
    rgpu_view *lse, *gx;
    double *term, *wt;      /* forward: row i's w[t_i] * (lse_i - x_it), w[t_i] (0 when ignored) */
    double g;               /* backward: the reduced grad (/ total_weight for mean) */
    int64_t gos, ge, gs0, gs1, lses;
    bool per_row;
    bool nomem;
} ce_job;

/* lse of row i (buf, ex: C doubles each): the softmax rows' loads and exp */
static double ce_row_lse(const ce_job *j, int64_t i, double *buf, double *ex)
{
    const op_nll_shape *s = j->s;
    cpu_load_row_f64(buf, (const char *)j->x->data + i * s->ls0, j->x->dtype, s->ls1, s->C);
    double m = rgpu_vm_max_f64(buf, s->C);
    if (m == -INFINITY || m != m) return m;
    for (int64_t c = 0; c < s->C; c++) ex[c] = buf[c] - m;
    row_exp(ex, s->C, j->x->dtype != RGPU_F64);
    return m + log(r2_sum_f64(ex, s->C));
}

static void ce_task(void *vj, int64_t b, int64_t e)
{
    ce_job *j = vj;
    const op_nll_shape *s = j->s;
    double *buf = rgpu_op_alloc(s->C, 2 * sizeof *buf);
    if (buf == NULL) { __atomic_store_n(&j->nomem, true, __ATOMIC_RELAXED); return; }
    for (int64_t i = b; i < e; i++) {
        double lse = ce_row_lse(j, i, buf, buf + s->C);
        op_store_f64((char *)j->lse->data + i * j->lses, j->lse->dtype, lse);
        int64_t c = nll_target(j->t, s, i);
        double term = 0.0, wc = 0.0;
        if (c != s->ignore) {
            wc = j->w ? op_load_f64((const char *)j->w->data + c * s->ws, j->w->dtype) : 1.0;
            term = (lse - buf[c]) * wc;
        }
        j->term[i] = term;
        j->wt[i] = wc;
    }
    free(buf);
}

rgpu_status rgpu_r2_cross_entropy(const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *x = e->in[0], *t = e->in[1], *w = e->in[2];
    rgpu_view *loss = e->out[0], *tw = e->out[1], *lse = e->out[2];
    op_nll_shape s;
    FORWARD_IF_ERROR(rgpu_op_cross_entropy_check(e, &s, err, errlen));
    nll_bytes(&s, x, t, w);
    FORWARD_IF_ERROR(nll_check_targets(e, t, &s, s.per_row || s.C > 0 ? s.N : 0, err, errlen));
    bool empty = s.N * s.C == 0;
    double *buf = rgpu_op_alloc(2 * s.N, sizeof *buf);
    if (buf == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lld rows", rgpu_op_name(e->op), (long long)s.N);
    ce_job j = { &s, x, t, w, NULL, lse, NULL, buf, buf + s.N, 0.0, 0, 0, 0, 0, 0, s.per_row, false };
    j.lses = s.batched ? lse->strides[0] * (int64_t)rgpu_dtype_size(lse->dtype) : 0;
    if (s.C > 0) rgpu_pool_for(s.N, rgpu_pool_grain(s.C * 8), ce_task, &j);
    else for (int64_t i = 0; i < s.N; i++) op_store_f64((char *)lse->data + i * j.lses, lse->dtype, -INFINITY);
    if (j.nomem) {
        free(buf);
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for a row of %lld", rgpu_op_name(e->op), (long long)s.C);
    }
    if (s.per_row) {
        int64_t os = loss->ndim == 1 ? loss->strides[0] * (int64_t)rgpu_dtype_size(loss->dtype) : 0;
        for (int64_t i = 0; i < s.N; i++) op_store_f64((char *)loss->data + i * os, loss->dtype, empty ? 0.0 : j.term[i]);
        if (tw) op_store_f64(tw->data, tw->dtype, 0.0);
    } else {
        double sum = 0.0, wsum = 0.0;
        for (int64_t i = 0; !empty && i < s.N; i++) { sum += j.term[i]; wsum += j.wt[i]; }
        double out = sum;
        if (s.reduction == 1) out = empty ? NAN : sum / wsum;
        op_store_f64(loss->data, loss->dtype, out);
        if (tw) op_store_f64(tw->data, tw->dtype, wsum);
    }
    free(buf);
    return RGPU_OK;
}

/* rows [b, e) of grad_logits: g_i * w[t_i] * (exp(x_ic - lse_i) - [c == t_i]) */
static void ce_bw_task(void *vj, int64_t b, int64_t e)
{
    ce_job *j = vj;
    const op_nll_shape *s = j->s;
    double *buf = rgpu_op_alloc(s->C, sizeof *buf);
    if (buf == NULL) { __atomic_store_n(&j->nomem, true, __ATOMIC_RELAXED); return; }
    const bool fast = float_results(j->x, j->gx);
    for (int64_t i = b; i < e; i++) {
        char *row = (char *)j->gx->data + i * j->gs0;
        int64_t t = nll_target(j->t, s, i);
        if (t == s->ignore || t < 0 || t >= s->C) {
            for (int64_t c = 0; c < s->C; c++) buf[c] = 0.0;
        } else {
            double wc = j->w ? op_load_f64((const char *)j->w->data + t * s->ws, j->w->dtype) : 1.0;
            double gi = j->per_row ? op_load_f64((const char *)j->go->data + i * j->gos, j->go->dtype) : j->g;
            double lse = op_load_f64((const char *)j->lse->data + i * j->lses, j->lse->dtype), f = gi * wc;
            cpu_load_row_f64(buf, (const char *)j->x->data + i * s->ls0, j->x->dtype, s->ls1, s->C);
            for (int64_t c = 0; c < s->C; c++) buf[c] -= lse;
            row_exp(buf, s->C, fast);
            buf[t] -= 1.0;
            for (int64_t c = 0; c < s->C; c++) buf[c] *= f;
        }
        cpu_store_row_f64(row, j->gx->dtype, j->gs1, buf, s->C);
    }
    free(buf);
}

rgpu_status rgpu_r2_cross_entropy_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *go = e->in[0], *x = e->in[1], *t = e->in[2], *w = e->in[3], *twv = e->in[4], *lse = e->in[5];
    rgpu_view *gx = e->out[0];
    op_nll_shape s;
    FORWARD_IF_ERROR(rgpu_op_cross_entropy_backward_check(e, &s, err, errlen));
    nll_bytes(&s, x, t, w);
    if (s.N * s.C == 0) return RGPU_OK;
    ce_job j = { &s, x, t, w, go, (rgpu_view *)lse, gx, NULL, NULL, 0.0, 0, 0, 0, 0, 0, s.per_row, false };
    j.ge = (int64_t)rgpu_dtype_size(gx->dtype);
    j.gs0 = s.batched ? gx->strides[0] * j.ge : 0;
    j.gs1 = gx->strides[gx->ndim - 1] * j.ge;
    j.lses = s.batched ? lse->strides[0] * (int64_t)rgpu_dtype_size(lse->dtype) : 0;
    if (s.per_row) j.gos = go->strides[0] * (int64_t)rgpu_dtype_size(go->dtype);
    else {
        j.g = op_load_f64(go->data, go->dtype);
        if (s.reduction == 1) j.g /= op_load_f64(twv->data, twv->dtype);
    }
    rgpu_pool_for(s.N, rgpu_pool_grain(s.C * 8), ce_bw_task, &j);
    if (j.nomem) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for a row of %lld", rgpu_op_name(e->op), (long long)s.C);
    return RGPU_OK;
}

/* --- CTC loss (op/ctc.h: the recursions both backends run) ------------------------------ */

rgpu_status rgpu_r2_ctc_loss(const rgpu_exec *e, char *err, size_t errlen)
{
    op_ctc a;
    FORWARD_IF_ERROR(rgpu_op_ctc_check(e, &a, err, errlen));
    for (int64_t b = 0; b < a.N; b++) op_ctc_forward_one(&a, b);
    return RGPU_OK;
}

rgpu_status rgpu_r2_ctc_loss_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    op_ctc a;
    FORWARD_IF_ERROR(rgpu_op_ctc_check(e, &a, err, errlen));
    double *beta = rgpu_op_alloc(2 * a.Sp, sizeof *beta);
    if (beta == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory", rgpu_op_name(e->op));
    for (int64_t b = 0; b < a.N; b++) op_ctc_backward_one(&a, b, beta);
    free(beta);
    return RGPU_OK;
}
