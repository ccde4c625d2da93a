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
 * The parameters may have another floating dtype than x (bf16 x, f32 w). */
#include <math.h>
#include <stdlib.h>

#include "cpu_dense.h"

/* A present per-channel param must be a floating (C) vector. */
static rgpu_status check_param(const rgpu_exec *e, const rgpu_view *v, const char *what, int64_t C,
                               char *err, size_t errlen)
{
    if (v == NULL) return RGPU_OK;
    if (v->ndim != 1 || v->sizes[0] != C)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: %s must be a vector of %lld channels", rgpu_op_name(e->op), what, (long long)C);
    if (!op_dtype_is_float(v->dtype))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: %s has dtype %s, want a floating dtype", rgpu_op_name(e->op), what,
                 rgpu_dtype_name(v->dtype));
    return RGPU_OK;
}

static void store_at(const rgpu_view *v, int64_t i, double val)
{
    op_store_f64((char *)v->data + i * v->strides[0] * (int64_t)rgpu_dtype_size(v->dtype), v->dtype, val);
}

/* Rounds like the opmath type: float for f32/f16/bf16, double for f64. */
static inline double opm(bool f64, double v) { return f64 ? v : (double)(float)v; }

/* v rounded to dtype dt (as a value stored in a tensor of that dtype). */
static double round_to(int dt, double v)
{
    char b[8];
    op_store_f64(b, dt, v);
    return op_load_f64(b, dt);
}

/* Shared checks on x (N,C,*) and the per-channel count. */
static rgpu_status check_x(const rgpu_exec *e, const rgpu_view *x, int64_t *C, int64_t *n, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    if (x->ndim < 2) RETURN_ERROR(RGPU_ERR_SHAPE, "%s: input must be (N,C) or (N,C,*), got %d-d", name, x->ndim);
    if (!op_dtype_is_float(x->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for %s (as ATen)", name, rgpu_dtype_name(x->dtype));
    int64_t numel = op_numel(x);
    if (numel == 0) RETURN_ERROR(RGPU_ERR_SHAPE, "%s: input tensor must have at least one element", name);
    *C = x->sizes[1];
    *n = numel / *C;
    return RGPU_OK;
}

/* in x, w?, b?, running_mean?, running_var?; training, momentum, eps;
 * outs y, save_mean, save_invstd (size 0 in eval, as ATen) */
rgpu_status bn_forward_setup(const rgpu_exec *e, bn_setup *s, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(dense_check_io(e, 0x1eu, 0x6u, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *x = e->in[0], *w = e->in[1], *b = e->in[2], *rm = e->in[3], *rv = e->in[4];
    rgpu_view *y = e->out[0], *sm = e->out[1], *si = e->out[2];
    FORWARD_IF_ERROR(dense_arg_bool(e, 0, "training", &s->training, err, errlen));
    FORWARD_IF_ERROR(dense_arg_float(e, 1, "momentum", &s->momentum, err, errlen));
    FORWARD_IF_ERROR(dense_arg_float(e, 2, "eps", &s->eps, err, errlen));
    FORWARD_IF_ERROR(check_x(e, x, &s->C, &s->n, err, errlen));
    int64_t C = s->C;
    FORWARD_IF_ERROR(check_param(e, w, "weight", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, b, "bias", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, rm, "running_mean", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, rv, "running_var", C, err, errlen));
    if (!s->training && (!rm || !rv))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: running_mean and running_var must be defined in evaluation mode", name);
    FORWARD_IF_ERROR(dense_check_shape(y, "out", x->sizes, x->ndim, e->op, err, errlen));
    if (!op_dtype_is_float(y->dtype))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: output dtype %s is not floating", name, rgpu_dtype_name(y->dtype));
    /* save_mean / save_invstd: (C) when written, empty when not (eval) */
    rgpu_view **saves = s->saves;
    saves[0] = sm; saves[1] = si;
    for (int k = 0; k < 2; k++) {
        if (!saves[k]) continue;
        if (op_numel(saves[k]) == 0) { saves[k] = NULL; continue; }
        FORWARD_IF_ERROR(dense_check_shape(saves[k], k ? "save_invstd" : "save_mean", &C, 1, e->op, err, errlen));
        if (!op_dtype_is_float(saves[k]->dtype))
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: saved stats must be floating", name);
    }
    /* ATen keeps the stats in tensors of x's dtype, or f32 when the params
     * are f32 and x is reduced ("mixed type"), and normalises with them as
     * stored: we round the same way */
    s->stat_dt = x->dtype;
    if (sm) s->stat_dt = sm->dtype;
    else if ((w && w->dtype != x->dtype) || (b && b->dtype != x->dtype) || (rm && rm->dtype != x->dtype) ||
             (rv && rv->dtype != x->dtype)) s->stat_dt = RGPU_F32;
    return RGPU_OK;
}

rgpu_status cpu_dense_batch_norm(const rgpu_exec *e, char *err, size_t errlen)
{
    bn_setup su;
    FORWARD_IF_ERROR(bn_forward_setup(e, &su, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *x = e->in[0], *w = e->in[1], *b = e->in[2], *rm = e->in[3], *rv = e->in[4];
    rgpu_view *y = e->out[0];
    bool training = su.training;
    double momentum = su.momentum, eps = su.eps;
    int64_t C = su.C, n = su.n;
    rgpu_view **saves = su.saves;
    int stat_dt = su.stat_dt;

    double *buf = op_alloc(n, sizeof(double));
    if (!buf) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for a %lld-element channel", name, (long long)n);
    bool f64 = x->dtype == RGPU_F64;
    for (int64_t c = 0; c < C; c++) {
        rgpu_view xc = dense_subview(x, 1, c), yc = dense_subview(y, 1, c);
        dense_load(&xc, OP_CT_F64, buf);
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
            if (rm) store_at(rm, c, momentum * mean + (1.0 - momentum) * dense_at_f64(rm, c));
            if (rv) store_at(rv, c, momentum * unbiased + (1.0 - momentum) * dense_at_f64(rv, c));
            if (saves[0]) store_at(saves[0], c, mean);
            if (saves[1]) store_at(saves[1], c, invstd);
            mean = opm(f64, round_to(stat_dt, mean));
            invstd = opm(f64, round_to(stat_dt, invstd));
        } else {
            mean = opm(f64, dense_at_f64(rm, c));
            double v = opm(f64, dense_at_f64(rv, c) + opm(f64, eps));
            invstd = opm(f64, 1.0 / (f64 ? sqrt(v) : (double)sqrtf((float)v)));
            if (saves[0]) store_at(saves[0], c, mean);
            if (saves[1]) store_at(saves[1], c, invstd);
        }
        double wc = w ? opm(f64, dense_at_f64(w, c)) : 1.0, bc = b ? opm(f64, dense_at_f64(b, c)) : 0.0;
        if (f64) {
            double alpha = invstd * wc, beta = bc - mean * alpha;
            for (int64_t i = 0; i < n; i++) buf[i] = buf[i] * alpha + beta;
        } else {
            float alpha = (float)invstd * (float)wc, beta = (float)bc - (float)mean * alpha;
            for (int64_t i = 0; i < n; i++) buf[i] = (float)buf[i] * alpha + beta;
        }
        dense_store(&yc, OP_CT_F64, buf);
    }
    free(buf);
    return RGPU_OK;
}

/* in grad, x, w?, running_mean?, running_var?, save_mean?, save_invstd?;
 * training, eps; outs dx?, dw?, db? */
rgpu_status bn_backward_setup(const rgpu_exec *e, bn_setup *s, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(dense_check_io(e, 0x7cu, 0x7u, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *gr = e->in[0], *x = e->in[1], *w = e->in[2], *rm = e->in[3], *rv = e->in[4];
    const rgpu_view *sm = e->in[5], *si = e->in[6];
    rgpu_view *dx = e->out[0], *dw = e->out[1], *db = e->out[2];
    memset(s, 0, sizeof *s);
    FORWARD_IF_ERROR(dense_arg_bool(e, 0, "training", &s->training, err, errlen));
    FORWARD_IF_ERROR(dense_arg_float(e, 1, "eps", &s->eps, err, errlen));
    bool training = s->training;
    FORWARD_IF_ERROR(check_x(e, x, &s->C, &s->n, err, errlen));
    int64_t C = s->C;
    FORWARD_IF_ERROR(dense_check_shape(gr, "grad", x->sizes, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(check_param(e, w, "weight", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, rm, "running_mean", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, rv, "running_var", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, sm, "save_mean", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, si, "save_invstd", C, err, errlen));
    if (training && (!sm || !si))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: save_mean and save_invstd must be defined in training mode", name);
    if (!training && (!rm || !rv))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: running_mean and running_var must be defined in evaluation mode", name);
    if (!op_dtype_is_float(gr->dtype))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: grad dtype %s is not floating", name, rgpu_dtype_name(gr->dtype));
    if (dx) FORWARD_IF_ERROR(dense_check_shape(dx, "grad_input", x->sizes, x->ndim, e->op, err, errlen));
    if (dw) FORWARD_IF_ERROR(dense_check_shape(dw, "grad_weight", &C, 1, e->op, err, errlen));
    if (db) FORWARD_IF_ERROR(dense_check_shape(db, "grad_bias", &C, 1, e->op, err, errlen));
    rgpu_view *outs[3] = { dx, dw, db };
    for (int k = 0; k < 3; k++)
        if (outs[k] && !op_dtype_is_float(outs[k]->dtype))
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: out[%d] dtype %s is not floating", name, k, rgpu_dtype_name(outs[k]->dtype));
    return RGPU_OK;
}

rgpu_status cpu_dense_batch_norm_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    bn_setup su;
    FORWARD_IF_ERROR(bn_backward_setup(e, &su, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *gr = e->in[0], *x = e->in[1], *w = e->in[2], *rm = e->in[3], *rv = e->in[4];
    const rgpu_view *sm = e->in[5], *si = e->in[6];
    rgpu_view *dx = e->out[0], *dw = e->out[1], *db = e->out[2];
    bool training = su.training;
    double eps = su.eps;
    int64_t C = su.C, n = su.n;

    double *xb = op_alloc(n, sizeof(double)), *gb = op_alloc(n, sizeof(double));
    if (!xb || !gb) {
        free(xb); free(gb);
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for a %lld-element channel", name, (long long)n);
    }
    bool f64 = x->dtype == RGPU_F64;
    for (int64_t c = 0; c < C; c++) {
        rgpu_view xc = dense_subview(x, 1, c), gc = dense_subview(gr, 1, c);
        dense_load(&xc, OP_CT_F64, xb);
        dense_load(&gc, OP_CT_F64, gb);
        double mean, invstd;
        if (training) {
            mean = opm(f64, dense_at_f64(sm, c));
            invstd = opm(f64, dense_at_f64(si, c));
        } else {
            mean = opm(f64, dense_at_f64(rm, c));
            double v = opm(f64, dense_at_f64(rv, c) + opm(f64, eps));
            invstd = opm(f64, 1.0 / (f64 ? sqrt(v) : (double)sqrtf((float)v)));
        }
        double wc = w ? opm(f64, dense_at_f64(w, c)) : 1.0;
        double sum = 0.0, dotp = 0.0;
        for (int64_t i = 0; i < n; i++) {
            sum += gb[i];
            dotp += (xb[i] - mean) * gb[i];
        }
        if (dx) {
            rgpu_view dxc = dense_subview(dx, 1, c);
            if (training) {
                double k = dotp * invstd * invstd / (double)n, gm = sum / (double)n;
                for (int64_t i = 0; i < n; i++) gb[i] = (gb[i] - gm - (xb[i] - mean) * k) * invstd * wc;
            } else {
                for (int64_t i = 0; i < n; i++) gb[i] = gb[i] * invstd * wc;
            }
            dense_store(&dxc, OP_CT_F64, gb);
        }
        if (dw) store_at(dw, c, dotp * invstd);
        if (db) store_at(db, c, sum);
    }
    free(xb); free(gb);
    return RGPU_OK;
}
