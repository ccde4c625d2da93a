/* cpu_dense_norm.c — native_batch_norm and native_batch_norm_backward on the
 * CPU, over channel dim 1 of x (N,C) or (N,C,*), ATen's formulas:
 *
 *   training: mean, biased var per channel (sums in double, as ATen's
 *             acc_type); save_mean = mean, save_invstd = 1/sqrt(var+eps)
 *             (0 when var == eps == 0); running stats, when given, updated in
 *             place: r = momentum*stat + (1-momentum)*r, var unbiased n/(n-1)
 *   eval:     mean = running_mean, invstd = 1/sqrt(running_var + eps) in opmath
 *   y = x*alpha + beta with alpha = invstd*w, beta = b - mean*alpha, in opmath
 *       (f32 for f32/f16/bf16, f64 for f64), as ATen's contiguous kernel.
 *   backward: sum = Σ dy, dotp = Σ (x-mean)·dy per channel (double);
 *             training dx = (dy - sum/n - (x-mean)·dotp·invstd²/n)·invstd·w,
 *             eval dx = dy·invstd·w; dw = dotp·invstd; db = sum.
 * Each channel is gathered into a buffer, so any strides (channels-last) work.
 * The parameters may have another floating dtype than x (bf16 x, f32 w).
 * Channels run over the thread pool (each channel's sums in one fixed order,
 * whatever thread computes it). */
#include <math.h>
#include <stdlib.h>

#include "cpu_dense.h"
#include "cpu_dense_util.h"
#include "cpu_pool.h"

static void store_at(const rgpu_view *v, int64_t i, double val)
{
    op_store_f64((char *)v->data + i * v->strides[0] * (int64_t)rgpu_dtype_size(v->dtype), v->dtype, val);
}

/* Rounds like the opmath type: float for f32/f16/bf16, double for f64. */
static inline double opm(bool f64, double v) { return f64 ? v : (double)(float)v; }

/* v rounded to dtype dt (as a value stored in a tensor of that dtype). */
static double round_to(int dt, double v)
{
    _Alignas(16) char b[16];   /* any dtype, complex128 included */
    op_store_f64(b, dt, v);
    return op_load_f64(b, dt);
}

typedef struct bn_job {
    const rgpu_view *x, *w, *b, *rm, *rv, *gr, *sm, *si;
    rgpu_view *y, *dx, *dw, *db;
    rgpu_view **saves;
    bool training, f64, nomem;
    double momentum, eps;
    int64_t n;
    int stat_dt;
} bn_job;

/* channels [c0, c1) of the forward */
static void bn_task(void *vj, int64_t c0, int64_t c1)
{
    bn_job *jb = vj;
    const rgpu_view *x = jb->x, *w = jb->w, *b = jb->b, *rm = jb->rm, *rv = jb->rv;
    rgpu_view *y = jb->y;
    rgpu_view **saves = jb->saves;
    bool training = jb->training, f64 = jb->f64;
    double momentum = jb->momentum, eps = jb->eps;
    int64_t n = jb->n;
    int stat_dt = jb->stat_dt;
    double *buf = rgpu_op_alloc(n, sizeof(double));
    if (!buf) { __atomic_store_n(&jb->nomem, true, __ATOMIC_RELAXED); return; }
    for (int64_t c = c0; c < c1; c++) {
        rgpu_view xc = rgpu_op_dense_subview(x, 1, c), yc = rgpu_op_dense_subview(y, 1, c);
        rgpu_dense_load(&xc, OP_CT_F64, buf);
        double mean, invstd;
        if (training) {
            double sum = 0.0, var_sum = 0.0;
            for (int64_t i = 0; i < n; i++) sum += buf[i];
            mean = sum / (double)n;
            for (int64_t i = 0; i < n; i++) { double d = buf[i] - mean; var_sum += d * d; }
            /* ATen keeps mean and var_sum in tensors of the stats dtype first */
            mean = round_to(stat_dt, mean);
            var_sum = round_to(stat_dt, var_sum);
            /* var_sum / n is a division in that dtype too */
            double var = round_to(stat_dt, var_sum / (double)n);
            double unbiased = round_to(stat_dt, var_sum / (double)(n - 1));
            invstd = (var == 0.0 && eps == 0.0) ? 0.0 : 1.0 / sqrt(var + eps);
            if (rm) store_at(rm, c, momentum * mean + (1.0 - momentum) * op_dense_at_f64(rm, c));
            if (rv) store_at(rv, c, momentum * unbiased + (1.0 - momentum) * op_dense_at_f64(rv, c));
            if (saves[0]) store_at(saves[0], c, mean);
            if (saves[1]) store_at(saves[1], c, invstd);
            mean = opm(f64, round_to(stat_dt, mean));
            invstd = opm(f64, round_to(stat_dt, invstd));
        } else {
            mean = opm(f64, op_dense_at_f64(rm, c));
            double v = opm(f64, op_dense_at_f64(rv, c) + opm(f64, eps));
            invstd = opm(f64, 1.0 / (f64 ? sqrt(v) : (double)sqrtf((float)v)));
            if (saves[0]) store_at(saves[0], c, mean);
            if (saves[1]) store_at(saves[1], c, invstd);
        }
        double wc = w ? opm(f64, op_dense_at_f64(w, c)) : 1.0, bc = b ? opm(f64, op_dense_at_f64(b, c)) : 0.0;
        if (f64) {
            double alpha = invstd * wc, beta = bc - mean * alpha;
            for (int64_t i = 0; i < n; i++) buf[i] = buf[i] * alpha + beta;
        } else {
            float alpha = (float)invstd * (float)wc, beta = (float)bc - (float)mean * alpha;
            for (int64_t i = 0; i < n; i++) buf[i] = (float)buf[i] * alpha + beta;
        }
        rgpu_dense_store(&yc, OP_CT_F64, buf);
    }
    free(buf);
}

rgpu_status rgpu_cpu_dense_batch_norm(const rgpu_exec *e, char *err, size_t errlen)
{
    op_bn_setup su;
    FORWARD_IF_ERROR(rgpu_op_bn_forward_setup(e, &su, err, errlen));
    const char *name = rgpu_op_name(e->op);
    bn_job j = { .x = e->in[0], .w = e->in[1], .b = e->in[2], .rm = e->in[3], .rv = e->in[4], .y = e->out[0],
                 .saves = su.saves, .training = su.training, .f64 = e->in[0]->dtype == RGPU_F64,
                 .momentum = su.momentum, .eps = su.eps, .n = su.n, .stat_dt = su.stat_dt };
    rgpu_pool_for(su.C, rgpu_pool_grain(su.n * 4), bn_task, &j);
    if (j.nomem) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for a %lld-element channel", name, (long long)su.n);
    return RGPU_OK;
}

/* channels [c0, c1) of the backward */
static void bn_bw_task(void *vj, int64_t c0, int64_t c1)
{
    bn_job *jb = vj;
    const rgpu_view *gr = jb->gr, *x = jb->x, *w = jb->w, *rm = jb->rm, *rv = jb->rv, *sm = jb->sm, *si = jb->si;
    rgpu_view *dx = jb->dx, *dw = jb->dw, *db = jb->db;
    bool training = jb->training, f64 = jb->f64;
    double eps = jb->eps;
    int64_t n = jb->n;
    double *xb = rgpu_op_alloc(n, 2 * sizeof(double));
    if (!xb) { __atomic_store_n(&jb->nomem, true, __ATOMIC_RELAXED); return; }
    double *gb = xb + n;
    for (int64_t c = c0; c < c1; c++) {
        rgpu_view xc = rgpu_op_dense_subview(x, 1, c), gc = rgpu_op_dense_subview(gr, 1, c);
        rgpu_dense_load(&xc, OP_CT_F64, xb);
        rgpu_dense_load(&gc, OP_CT_F64, gb);
        double mean, invstd;
        if (training) {
            mean = opm(f64, op_dense_at_f64(sm, c));
            invstd = opm(f64, op_dense_at_f64(si, c));
        } else {
            mean = opm(f64, op_dense_at_f64(rm, c));
            double v = opm(f64, op_dense_at_f64(rv, c) + opm(f64, eps));
            invstd = opm(f64, 1.0 / (f64 ? sqrt(v) : (double)sqrtf((float)v)));
        }
        double wc = w ? opm(f64, op_dense_at_f64(w, c)) : 1.0;
        double sum = 0.0, dotp = 0.0;
        for (int64_t i = 0; i < n; i++) {
            sum += gb[i];
            dotp += (xb[i] - mean) * gb[i];
        }
        if (dx) {
            rgpu_view dxc = rgpu_op_dense_subview(dx, 1, c);
            if (training) {
                double k = dotp * invstd * invstd / (double)n, gm = sum / (double)n;
                for (int64_t i = 0; i < n; i++) gb[i] = (gb[i] - gm - (xb[i] - mean) * k) * invstd * wc;
            } else {
                for (int64_t i = 0; i < n; i++) gb[i] = gb[i] * invstd * wc;
            }
            rgpu_dense_store(&dxc, OP_CT_F64, gb);
        }
        if (dw) store_at(dw, c, dotp * invstd);
        if (db) store_at(db, c, sum);
    }
    free(xb);
}

rgpu_status rgpu_cpu_dense_batch_norm_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    op_bn_setup su;
    FORWARD_IF_ERROR(rgpu_op_bn_backward_setup(e, &su, err, errlen));
    const char *name = rgpu_op_name(e->op);
    bn_job j = { .gr = e->in[0], .x = e->in[1], .w = e->in[2], .rm = e->in[3], .rv = e->in[4], .sm = e->in[5],
                 .si = e->in[6], .dx = e->out[0], .dw = e->out[1], .db = e->out[2], .training = su.training,
                 .f64 = e->in[1]->dtype == RGPU_F64, .eps = su.eps, .n = su.n };
    rgpu_pool_for(su.C, rgpu_pool_grain(su.n * 4), bn_bw_task, &j);
    if (j.nomem) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for a %lld-element channel", name, (long long)su.n);
    return RGPU_OK;
}
