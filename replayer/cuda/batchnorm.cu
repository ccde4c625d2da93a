// batchnorm.cu — native_batch_norm and native_batch_norm_backward on the CUDA
// backend, over channel dim 1 of x (N,C) or (N,C,*), any strides. CPU
// reference: cpu_dense_norm.c (same checks, messages and formulas):
//
//   training: mean, biased var per channel (sums in double); save_mean,
//             save_invstd; running stats updated in place (unbiased var)
//   eval:     mean = running_mean, invstd = 1/sqrt(running_var + eps) in opmath
//   y = x*alpha + beta per channel, in opmath (f32 for f32/f16/bf16, f64)
//   backward: sum = Σ dy, dotp = Σ (x-mean)·dy (double); dx, dw, db
//
// One block per channel reduces in a fixed order (each thread a strided run
// in index order, then a fixed tree), its thread 0 does the per-channel
// scalar work exactly as the CPU loop body; a pointwise kernel then writes
// y / dx. Elementwise formulas use the _rn intrinsics so nvcc does not fuse
// them into FMAs the CPU reference does not do.
#include "dense.cuh"

#define TRY(expr) CPU_FORWARD_IF_ERROR(expr)

static rgpu_status check_param(const rgpu_exec *e, const rgpu_view *v, const char *what, int64_t C,
                               char *err, size_t errlen)
{
    if (v == NULL) return RGPU_OK;
    if (v->ndim != 1 || v->sizes[0] != C)
        CPU_FAIL(RGPU_ERR_SHAPE, "%s: %s must be a vector of %lld channels", rgpu_op_name(e->op), what, (long long)C);
    if (!cpu_dtype_is_float(v->dtype))
        CPU_FAIL(RGPU_ERR_BAD_ARG, "%s: %s has dtype %s, want a floating dtype", rgpu_op_name(e->op), what,
                 rgpu_dtype_name(v->dtype));
    return RGPU_OK;
}

static rgpu_status check_x(const rgpu_exec *e, const rgpu_view *x, int64_t *C, int64_t *n, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    if (x->ndim < 2) CPU_FAIL(RGPU_ERR_SHAPE, "%s: input must be (N,C) or (N,C,*), got %d-d", name, x->ndim);
    if (!cpu_dtype_is_float(x->dtype))
        CPU_FAIL(RGPU_ERR_UNSUPPORTED, "%s: not implemented for %s (as ATen)", name, rgpu_dtype_name(x->dtype));
    int64_t numel = cpu_numel(x);
    if (numel == 0) CPU_FAIL(RGPU_ERR_SHAPE, "%s: input tensor must have at least one element", name);
    *C = x->sizes[1];
    *n = numel / *C;
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// Device side

// Rounds like the opmath type: float for f32/f16/bf16, double for f64.
__device__ __forceinline__ double opm(bool f64, double v) { return f64 ? v : (double)(float)v; }

// v rounded to (floating) dtype dt, as a value stored in a tensor of that dtype.
__device__ __forceinline__ double round_to(int dt, double v)
{
    switch (dt) {
    case RGPU_F64:  return v;
    case RGPU_F16:  return __half2float(__float2half_rn((float)v));
    case RGPU_BF16: return __bfloat162float(__float2bfloat16_rn((float)v));
    default:        return (double)(float)v;
    }
}

// The channel-c elements of x: the (N, *) view rest (channel dim removed)
// advanced by c channels.
struct chan_view {
    rgpu_cuda_view rest;
    int dt;
    int64_t cstride;   // elements
};
static chan_view chan_view_of(const rgpu_view *x)
{
    rgpu_view r = dense_subview(x, 1, 0);
    chan_view cv = { rgpu_cuda_view_of(&r), x->dtype, x->strides[1] };
    return cv;
}
__device__ __forceinline__ double chan_at(const chan_view &v, int64_t c, int64_t i)
{
    int64_t esz = dcu::esize(v.dt);
    return dcu::load_f64((const char *)v.rest.data + (c * v.cstride + rgpu_cuda_offset(v.rest, i)) * esz, v.dt);
}

struct bn_fwd_args {
    chan_view x;
    int64_t C, n;
    bool training, f64;
    double momentum, eps;
    int stat_dt;
    dcu::param w, b, rm, rv, sm, si;   // p NULL when absent / not written
    double *coef;                      // (C, 2): alpha, beta (float values when !f64)
};

static __global__ void bn_fwd_stats_kernel(bn_fwd_args a)
{
    __shared__ double sh[dcu::THREADS];
    for (int64_t c = blockIdx.x; c < a.C; c += gridDim.x) {
        double mean = 0.0, invstd = 0.0;
        if (a.training) {
            double s = 0.0;
            for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) s = __dadd_rn(s, chan_at(a.x, c, i));
            double sum = dcu::block_sum(s, sh);
            mean = sum / (double)a.n;
            double v = 0.0;
            for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
                double d = __dsub_rn(chan_at(a.x, c, i), mean);
                v = __dadd_rn(v, __dmul_rn(d, d));
            }
            double var_sum = dcu::block_sum(v, sh);
            if (threadIdx.x == 0) {
                /* ATen keeps mean and var_sum in tensors of the stats dtype first */
                mean = round_to(a.stat_dt, mean);
                var_sum = round_to(a.stat_dt, var_sum);
                double var = round_to(a.stat_dt, var_sum / (double)a.n);
                double unbiased = round_to(a.stat_dt, var_sum / (double)(a.n - 1));
                invstd = (var == 0.0 && a.eps == 0.0) ? 0.0 : 1.0 / sqrt(var + a.eps);
                double om = 1.0 - a.momentum;
                if (a.rm.p) dcu::param_set(a.rm, c, __dadd_rn(__dmul_rn(a.momentum, mean), __dmul_rn(om, dcu::param_at(a.rm, c))));
                if (a.rv.p) dcu::param_set(a.rv, c, __dadd_rn(__dmul_rn(a.momentum, unbiased), __dmul_rn(om, dcu::param_at(a.rv, c))));
                if (a.sm.p) dcu::param_set(a.sm, c, mean);
                if (a.si.p) dcu::param_set(a.si, c, invstd);
                mean = opm(a.f64, round_to(a.stat_dt, mean));
                invstd = opm(a.f64, round_to(a.stat_dt, invstd));
            }
        } else if (threadIdx.x == 0) {
            mean = opm(a.f64, dcu::param_at(a.rm, c));
            double v = opm(a.f64, dcu::param_at(a.rv, c) + opm(a.f64, a.eps));
            invstd = opm(a.f64, 1.0 / (a.f64 ? sqrt(v) : (double)sqrtf((float)v)));
            if (a.sm.p) dcu::param_set(a.sm, c, mean);
            if (a.si.p) dcu::param_set(a.si, c, invstd);
        }
        if (threadIdx.x == 0) {
            double wc = a.w.p ? opm(a.f64, dcu::param_at(a.w, c)) : 1.0;
            double bc = a.b.p ? opm(a.f64, dcu::param_at(a.b, c)) : 0.0;
            if (a.f64) {
                double alpha = __dmul_rn(invstd, wc);
                a.coef[2 * c] = alpha;
                a.coef[2 * c + 1] = __dsub_rn(bc, __dmul_rn(mean, alpha));
            } else {
                float alpha = __fmul_rn((float)invstd, (float)wc);
                a.coef[2 * c] = alpha;
                a.coef[2 * c + 1] = __fsub_rn((float)bc, __fmul_rn((float)mean, alpha));
            }
        }
    }
}

// y[i] = x[i]*alpha[c] + beta[c], c = channel of element i (row-major over x's sizes).
static __global__ void bn_apply_kernel(rgpu_cuda_view x, int xdt, rgpu_cuda_view y, int ydt, int64_t numel,
                                       int64_t C, int64_t inner, bool f64, const double *coef)
{
    int64_t xe = dcu::esize(xdt), ye = dcu::esize(ydt);
    DCU_LOOP(i, numel) {
        int64_t c = (i / inner) % C;
        double xv = dcu::load_f64((const char *)x.data + rgpu_cuda_offset(x, i) * xe, xdt), r;
        if (f64) r = __dadd_rn(__dmul_rn(xv, coef[2 * c]), coef[2 * c + 1]);
        else r = __fadd_rn(__fmul_rn((float)xv, (float)coef[2 * c]), (float)coef[2 * c + 1]);
        dcu::store_f64((char *)y.data + rgpu_cuda_offset(y, i) * ye, ydt, r);
    }
}

struct bn_bwd_args {
    chan_view x, g;
    int64_t C, n;
    bool training, f64;
    double eps;
    dcu::param w, rm, rv, sm, si, dw, db;
    double *coef;   // (C, 5): mean, invstd, wc, k, gm
};

static __global__ void bn_bwd_stats_kernel(bn_bwd_args a)
{
    __shared__ double sh[dcu::THREADS];
    __shared__ double mean_s;
    for (int64_t c = blockIdx.x; c < a.C; c += gridDim.x) {
        if (threadIdx.x == 0) {
            mean_s = a.training ? opm(a.f64, dcu::param_at(a.sm, c)) : opm(a.f64, dcu::param_at(a.rm, c));
        }
        __syncthreads();
        double mean = mean_s;
        double s = 0.0, d = 0.0;
        for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
            double gv = chan_at(a.g, c, i), xv = chan_at(a.x, c, i);
            s = __dadd_rn(s, gv);
            d = __dadd_rn(d, __dmul_rn(__dsub_rn(xv, mean), gv));
        }
        double sum = dcu::block_sum(s, sh);
        double dotp = dcu::block_sum(d, sh);
        if (threadIdx.x == 0) {
            double invstd;
            if (a.training) {
                invstd = opm(a.f64, dcu::param_at(a.si, c));
            } else {
                double v = opm(a.f64, dcu::param_at(a.rv, c) + opm(a.f64, a.eps));
                invstd = opm(a.f64, 1.0 / (a.f64 ? sqrt(v) : (double)sqrtf((float)v)));
            }
            double wc = a.w.p ? opm(a.f64, dcu::param_at(a.w, c)) : 1.0;
            double *q = a.coef + 5 * c;
            q[0] = mean;
            q[1] = invstd;
            q[2] = wc;
            q[3] = dotp * invstd * invstd / (double)a.n;
            q[4] = sum / (double)a.n;
            if (a.dw.p) dcu::param_set(a.dw, c, dotp * invstd);
            if (a.db.p) dcu::param_set(a.db, c, sum);
        }
    }
}

static __global__ void bn_bwd_dx_kernel(rgpu_cuda_view x, int xdt, rgpu_cuda_view g, int gdt, rgpu_cuda_view dx,
                                        int dxdt, int64_t numel, int64_t C, int64_t inner, bool training,
                                        const double *coef)
{
    int64_t xe = dcu::esize(xdt), ge = dcu::esize(gdt), de = dcu::esize(dxdt);
    DCU_LOOP(i, numel) {
        int64_t c = (i / inner) % C;
        const double *q = coef + 5 * c;
        double gv = dcu::load_f64((const char *)g.data + rgpu_cuda_offset(g, i) * ge, gdt), r;
        if (training) {
            double xv = dcu::load_f64((const char *)x.data + rgpu_cuda_offset(x, i) * xe, xdt);
            double t = __dsub_rn(__dsub_rn(gv, q[4]), __dmul_rn(__dsub_rn(xv, q[0]), q[3]));
            r = __dmul_rn(__dmul_rn(t, q[1]), q[2]);
        } else {
            r = __dmul_rn(__dmul_rn(gv, q[1]), q[2]);
        }
        dcu::store_f64((char *)dx.data + rgpu_cuda_offset(dx, i) * de, dxdt, r);
    }
}

static int64_t inner_of(const rgpu_view *x)
{
    int64_t inner = 1;
    for (int d = 2; d < x->ndim; d++) inner *= x->sizes[d];
    return inner;
}

static unsigned channel_blocks(int64_t C) { return (unsigned)(C < 65535 ? C : 65535); }

// ---------------------------------------------------------------------------
// Entry points

/* in x, w?, b?, running_mean?, running_var?; training, momentum, eps;
 * outs y, save_mean, save_invstd (size 0 in eval, as ATen) */
rgpu_status rgpu_cuda_dense_batch_norm(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    TRY(dense_check_io(e, 0x1eu, 0x6u, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *x = e->in[0], *w = e->in[1], *b = e->in[2], *rm = e->in[3], *rv = e->in[4];
    rgpu_view *y = e->out[0], *sm = e->out[1], *si = e->out[2];
    bool training;
    double momentum, eps;
    TRY(dense_arg_bool(e, 0, "training", &training, err, errlen));
    TRY(dense_arg_float(e, 1, "momentum", &momentum, err, errlen));
    TRY(dense_arg_float(e, 2, "eps", &eps, err, errlen));
    int64_t C, n;
    TRY(check_x(e, x, &C, &n, err, errlen));
    TRY(check_param(e, w, "weight", C, err, errlen));
    TRY(check_param(e, b, "bias", C, err, errlen));
    TRY(check_param(e, rm, "running_mean", C, err, errlen));
    TRY(check_param(e, rv, "running_var", C, err, errlen));
    if (!training && (!rm || !rv))
        CPU_FAIL(RGPU_ERR_BAD_ARG, "%s: running_mean and running_var must be defined in evaluation mode", name);
    TRY(dense_check_shape(y, "out", x->sizes, x->ndim, e->op, err, errlen));
    if (!cpu_dtype_is_float(y->dtype))
        CPU_FAIL(RGPU_ERR_BAD_ARG, "%s: output dtype %s is not floating", name, rgpu_dtype_name(y->dtype));
    rgpu_view *saves[2] = { sm, si };
    for (int k = 0; k < 2; k++) {
        if (!saves[k]) continue;
        if (cpu_numel(saves[k]) == 0) { saves[k] = NULL; continue; }
        TRY(dense_check_shape(saves[k], k ? "save_invstd" : "save_mean", &C, 1, e->op, err, errlen));
        if (!cpu_dtype_is_float(saves[k]->dtype))
            CPU_FAIL(RGPU_ERR_BAD_ARG, "%s: saved stats must be floating", name);
    }
    /* ATen keeps the stats in tensors of x's dtype, or f32 when the params
     * are f32 and x is reduced ("mixed type"), and normalises with them as
     * stored: we round the same way */
    int stat_dt = x->dtype;
    if (sm) stat_dt = sm->dtype;
    else if ((w && w->dtype != x->dtype) || (b && b->dtype != x->dtype) || (rm && rm->dtype != x->dtype) ||
             (rv && rv->dtype != x->dtype)) stat_dt = RGPU_F32;

    dcu::scratch sc(c);
    double *coef = (double *)sc.get(2 * C, sizeof(double));
    if (!coef) CPU_FAIL(RGPU_ERR_NOMEM, "%s: out of device memory for %lld channels", name, (long long)C);
    bn_fwd_args a;
    a.x = chan_view_of(x);
    a.C = C; a.n = n;
    a.training = training;
    a.f64 = x->dtype == RGPU_F64;
    a.momentum = momentum; a.eps = eps;
    a.stat_dt = stat_dt;
    a.w = dcu::param_of(w); a.b = dcu::param_of(b); a.rm = dcu::param_of(rm); a.rv = dcu::param_of(rv);
    a.sm = dcu::param_of(saves[0]); a.si = dcu::param_of(saves[1]);
    a.coef = coef;
    bn_fwd_stats_kernel<<<channel_blocks(C), dcu::THREADS, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    int64_t numel = cpu_numel(x);
    bn_apply_kernel<<<dcu::blocks_for(numel), dcu::THREADS, 0, c->stream>>>(
        rgpu_cuda_view_of(x), x->dtype, rgpu_cuda_view_of(y), y->dtype, numel, C, inner_of(x), a.f64, coef);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

/* in grad, x, w?, running_mean?, running_var?, save_mean?, save_invstd?;
 * training, eps; outs dx?, dw?, db? */
rgpu_status rgpu_cuda_dense_batch_norm_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    TRY(dense_check_io(e, 0x7cu, 0x7u, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *gr = e->in[0], *x = e->in[1], *w = e->in[2], *rm = e->in[3], *rv = e->in[4];
    const rgpu_view *sm = e->in[5], *si = e->in[6];
    rgpu_view *dx = e->out[0], *dw = e->out[1], *db = e->out[2];
    bool training;
    double eps;
    TRY(dense_arg_bool(e, 0, "training", &training, err, errlen));
    TRY(dense_arg_float(e, 1, "eps", &eps, err, errlen));
    int64_t C, n;
    TRY(check_x(e, x, &C, &n, err, errlen));
    TRY(dense_check_shape(gr, "grad", x->sizes, x->ndim, e->op, err, errlen));
    TRY(check_param(e, w, "weight", C, err, errlen));
    TRY(check_param(e, rm, "running_mean", C, err, errlen));
    TRY(check_param(e, rv, "running_var", C, err, errlen));
    TRY(check_param(e, sm, "save_mean", C, err, errlen));
    TRY(check_param(e, si, "save_invstd", C, err, errlen));
    if (training && (!sm || !si))
        CPU_FAIL(RGPU_ERR_BAD_ARG, "%s: save_mean and save_invstd must be defined in training mode", name);
    if (!training && (!rm || !rv))
        CPU_FAIL(RGPU_ERR_BAD_ARG, "%s: running_mean and running_var must be defined in evaluation mode", name);
    if (!cpu_dtype_is_float(gr->dtype))
        CPU_FAIL(RGPU_ERR_BAD_ARG, "%s: grad dtype %s is not floating", name, rgpu_dtype_name(gr->dtype));
    if (dx) TRY(dense_check_shape(dx, "grad_input", x->sizes, x->ndim, e->op, err, errlen));
    if (dw) TRY(dense_check_shape(dw, "grad_weight", &C, 1, e->op, err, errlen));
    if (db) TRY(dense_check_shape(db, "grad_bias", &C, 1, e->op, err, errlen));
    rgpu_view *outs[3] = { dx, dw, db };
    for (int k = 0; k < 3; k++)
        if (outs[k] && !cpu_dtype_is_float(outs[k]->dtype))
            CPU_FAIL(RGPU_ERR_BAD_ARG, "%s: out[%d] dtype %s is not floating", name, k, rgpu_dtype_name(outs[k]->dtype));

    dcu::scratch sc(c);
    double *coef = (double *)sc.get(5 * C, sizeof(double));
    if (!coef) CPU_FAIL(RGPU_ERR_NOMEM, "%s: out of device memory for %lld channels", name, (long long)C);
    bn_bwd_args a;
    a.x = chan_view_of(x);
    a.g = chan_view_of(gr);
    a.C = C; a.n = n;
    a.training = training;
    a.f64 = x->dtype == RGPU_F64;
    a.eps = eps;
    a.w = dcu::param_of(w); a.rm = dcu::param_of(rm); a.rv = dcu::param_of(rv);
    a.sm = dcu::param_of(sm); a.si = dcu::param_of(si);
    a.dw = dcu::param_of(dw); a.db = dcu::param_of(db);
    a.coef = coef;
    bn_bwd_stats_kernel<<<channel_blocks(C), dcu::THREADS, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    if (dx) {
        int64_t numel = cpu_numel(x);
        bn_bwd_dx_kernel<<<dcu::blocks_for(numel), dcu::THREADS, 0, c->stream>>>(
            rgpu_cuda_view_of(x), x->dtype, rgpu_cuda_view_of(gr), gr->dtype, rgpu_cuda_view_of(dx), dx->dtype,
            numel, C, inner_of(x), training, coef);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    return RGPU_OK;
}
