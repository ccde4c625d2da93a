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


// Args and checks: rgpu_op_bn_forward_setup / rgpu_op_bn_backward_setup from cpu_dense.h (the CPU's).

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
    rgpu_view r = rgpu_op_dense_subview(x, 1, 0);
    chan_view cv = { rgpu_cuda_view_of(&r), x->dtype, x->strides[1] };
    return cv;
}
__device__ __forceinline__ double chan_at(const chan_view &v, int64_t c, int64_t i)
{
    int64_t esz = op_dtype_esize(v.dt);
    return op_load_f64((const char *)v.rest.data + (c * v.cstride + rgpu_cuda_offset(v.rest, i)) * esz, v.dt);
}

// What the forward and the backward kernels both read: x, the channel count,
// the elements per channel, the mode and eps (op_bn_setup's), and a device
// scratch of coefficients per channel.
struct bn_base {
    chan_view x;
    int64_t C, n;
    bool training, f64;
    double eps;
    double *coef;
};

// a's bn_base from su and x, with per_channel coefficients each in sc.
static rgpu_status bn_base_init(bn_base *a, rgpu_dcu::scratch *sc, const op_bn_setup *su, const rgpu_view *x,
                                int per_channel, const char *name, char *err, size_t errlen)
{
    a->coef = (double *)sc->get(per_channel * su->C, sizeof(double));
    if (!a->coef) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of device memory for %lld channels", name, (long long)su->C);
    a->x = chan_view_of(x);
    a->C = su->C; a->n = su->n;
    a->training = su->training;
    a->f64 = x->dtype == RGPU_F64;
    a->eps = su->eps;
    return RGPU_OK;
}

struct bn_fwd_args : bn_base {
    double momentum;
    int stat_dt;
    rgpu_dcu::param w, b, rm, rv, sm, si;   // p NULL when absent / not written
    // coef: (C, 2): alpha, beta (float values when !f64)
};

static __global__ void bn_fwd_stats_kernel(bn_fwd_args a)
{
    __shared__ double sh[rgpu_dcu::THREADS];
    for (int64_t c = blockIdx.x; c < a.C; c += gridDim.x) {
        double mean = 0.0, invstd = 0.0;
        if (a.training) {
            double s = 0.0;
            for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) s = __dadd_rn(s, chan_at(a.x, c, i));
            double sum = rgpu_dcu::block_sum(s, sh);
            mean = sum / (double)a.n;
            double v = 0.0;
            for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
                double d = __dsub_rn(chan_at(a.x, c, i), mean);
                v = __dadd_rn(v, __dmul_rn(d, d));
            }
            double var_sum = rgpu_dcu::block_sum(v, sh);
            if (threadIdx.x == 0) {
                /* ATen keeps mean and var_sum in tensors of the stats dtype first */
                mean = round_to(a.stat_dt, mean);
                var_sum = round_to(a.stat_dt, var_sum);
                double var = round_to(a.stat_dt, var_sum / (double)a.n);
                double unbiased = round_to(a.stat_dt, var_sum / (double)(a.n - 1));
                invstd = (var == 0.0 && a.eps == 0.0) ? 0.0 : 1.0 / sqrt(var + a.eps);
                double om = 1.0 - a.momentum;
                if (a.rm.p) rgpu_dcu::param_set(a.rm, c, __dadd_rn(__dmul_rn(a.momentum, mean), __dmul_rn(om, rgpu_dcu::param_at(a.rm, c))));
                if (a.rv.p) rgpu_dcu::param_set(a.rv, c, __dadd_rn(__dmul_rn(a.momentum, unbiased), __dmul_rn(om, rgpu_dcu::param_at(a.rv, c))));
                if (a.sm.p) rgpu_dcu::param_set(a.sm, c, mean);
                if (a.si.p) rgpu_dcu::param_set(a.si, c, invstd);
                mean = opm(a.f64, round_to(a.stat_dt, mean));
                invstd = opm(a.f64, round_to(a.stat_dt, invstd));
            }
        } else if (threadIdx.x == 0) {
            mean = opm(a.f64, rgpu_dcu::param_at(a.rm, c));
            double v = opm(a.f64, rgpu_dcu::param_at(a.rv, c) + opm(a.f64, a.eps));
            invstd = opm(a.f64, 1.0 / (a.f64 ? sqrt(v) : (double)sqrtf((float)v)));
            if (a.sm.p) rgpu_dcu::param_set(a.sm, c, mean);
            if (a.si.p) rgpu_dcu::param_set(a.si, c, invstd);
        }
        if (threadIdx.x == 0) {
            double wc = a.w.p ? opm(a.f64, rgpu_dcu::param_at(a.w, c)) : 1.0;
            double bc = a.b.p ? opm(a.f64, rgpu_dcu::param_at(a.b, c)) : 0.0;
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
    int64_t xe = op_dtype_esize(xdt), ye = op_dtype_esize(ydt);
    DCU_LOOP(i, numel) {
        int64_t c = (i / inner) % C;
        double xv = op_load_f64((const char *)x.data + rgpu_cuda_offset(x, i) * xe, xdt), r;
        if (f64) r = __dadd_rn(__dmul_rn(xv, coef[2 * c]), coef[2 * c + 1]);
        else r = __fadd_rn(__fmul_rn((float)xv, (float)coef[2 * c]), (float)coef[2 * c + 1]);
        op_store_f64((char *)y.data + rgpu_cuda_offset(y, i) * ye, ydt, r);
    }
}

struct bn_bwd_args : bn_base {
    chan_view g;
    rgpu_dcu::param w, rm, rv, sm, si, dw, db;
    // coef: (C, 5): mean, invstd, wc, k, gm
};

static __global__ void bn_bwd_stats_kernel(bn_bwd_args a)
{
    __shared__ double sh[rgpu_dcu::THREADS];
    __shared__ double mean_s;
    for (int64_t c = blockIdx.x; c < a.C; c += gridDim.x) {
        if (threadIdx.x == 0) {
            mean_s = a.training ? opm(a.f64, rgpu_dcu::param_at(a.sm, c)) : opm(a.f64, rgpu_dcu::param_at(a.rm, c));
        }
        __syncthreads();
        double mean = mean_s;
        double s = 0.0, d = 0.0;
        for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
            double gv = chan_at(a.g, c, i), xv = chan_at(a.x, c, i);
            s = __dadd_rn(s, gv);
            d = __dadd_rn(d, __dmul_rn(__dsub_rn(xv, mean), gv));
        }
        double sum = rgpu_dcu::block_sum(s, sh);
        double dotp = rgpu_dcu::block_sum(d, sh);
        if (threadIdx.x == 0) {
            double invstd;
            if (a.training) {
                invstd = opm(a.f64, rgpu_dcu::param_at(a.si, c));
            } else {
                double v = opm(a.f64, rgpu_dcu::param_at(a.rv, c) + opm(a.f64, a.eps));
                invstd = opm(a.f64, 1.0 / (a.f64 ? sqrt(v) : (double)sqrtf((float)v)));
            }
            double wc = a.w.p ? opm(a.f64, rgpu_dcu::param_at(a.w, c)) : 1.0;
            double *q = a.coef + 5 * c;
            q[0] = mean;
            q[1] = invstd;
            q[2] = wc;
            q[3] = dotp * invstd * invstd / (double)a.n;
            q[4] = sum / (double)a.n;
            if (a.dw.p) rgpu_dcu::param_set(a.dw, c, dotp * invstd);
            if (a.db.p) rgpu_dcu::param_set(a.db, c, sum);
        }
    }
}

static __global__ void bn_bwd_dx_kernel(rgpu_cuda_view x, int xdt, rgpu_cuda_view g, int gdt, rgpu_cuda_view dx,
                                        int dxdt, int64_t numel, int64_t C, int64_t inner, bool training,
                                        const double *coef)
{
    int64_t xe = op_dtype_esize(xdt), ge = op_dtype_esize(gdt), de = op_dtype_esize(dxdt);
    DCU_LOOP(i, numel) {
        int64_t c = (i / inner) % C;
        const double *q = coef + 5 * c;
        double gv = op_load_f64((const char *)g.data + rgpu_cuda_offset(g, i) * ge, gdt), r;
        if (training) {
            double xv = op_load_f64((const char *)x.data + rgpu_cuda_offset(x, i) * xe, xdt);
            double t = __dsub_rn(__dsub_rn(gv, q[4]), __dmul_rn(__dsub_rn(xv, q[0]), q[3]));
            r = __dmul_rn(__dmul_rn(t, q[1]), q[2]);
        } else {
            r = __dmul_rn(__dmul_rn(gv, q[1]), q[2]);
        }
        op_store_f64((char *)dx.data + rgpu_cuda_offset(dx, i) * de, dxdt, r);
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
    op_bn_setup su;
    FORWARD_IF_ERROR(rgpu_op_bn_forward_setup(e, &su, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *x = e->in[0], *y = e->out[0];
    int64_t C = su.C;
    rgpu_dcu::scratch sc(c);
    bn_fwd_args a;
    FORWARD_IF_ERROR(bn_base_init(&a, &sc, &su, x, 2, name, err, errlen));
    double *coef = a.coef;
    a.momentum = su.momentum;
    a.stat_dt = su.stat_dt;
    a.w = rgpu_dcu::param_of(e->in[1]); a.b = rgpu_dcu::param_of(e->in[2]);
    a.rm = rgpu_dcu::param_of(e->in[3]); a.rv = rgpu_dcu::param_of(e->in[4]);
    a.sm = rgpu_dcu::param_of(su.saves[0]); a.si = rgpu_dcu::param_of(su.saves[1]);
    bn_fwd_stats_kernel<<<channel_blocks(C), rgpu_dcu::THREADS, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    int64_t numel = rgpu_op_numel(x);
    bn_apply_kernel<<<rgpu_dcu::blocks_for(numel), rgpu_dcu::THREADS, 0, c->stream>>>(
        rgpu_cuda_view_of(x), x->dtype, rgpu_cuda_view_of(y), y->dtype, numel, C, inner_of(x), a.f64, coef);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

/* in grad, x, w?, running_mean?, running_var?, save_mean?, save_invstd?;
 * training, eps; outs dx?, dw?, db? */
rgpu_status rgpu_cuda_dense_batch_norm_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_bn_setup su;
    FORWARD_IF_ERROR(rgpu_op_bn_backward_setup(e, &su, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *gr = e->in[0], *x = e->in[1], *dx = e->out[0];
    int64_t C = su.C;
    rgpu_dcu::scratch sc(c);
    bn_bwd_args a;
    FORWARD_IF_ERROR(bn_base_init(&a, &sc, &su, x, 5, name, err, errlen));
    double *coef = a.coef;
    a.g = chan_view_of(gr);
    a.w = rgpu_dcu::param_of(e->in[2]); a.rm = rgpu_dcu::param_of(e->in[3]); a.rv = rgpu_dcu::param_of(e->in[4]);
    a.sm = rgpu_dcu::param_of(e->in[5]); a.si = rgpu_dcu::param_of(e->in[6]);
    a.dw = rgpu_dcu::param_of(e->out[1]); a.db = rgpu_dcu::param_of(e->out[2]);
    bn_bwd_stats_kernel<<<channel_blocks(C), rgpu_dcu::THREADS, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    if (dx) {
        int64_t numel = rgpu_op_numel(x);
        bn_bwd_dx_kernel<<<rgpu_dcu::blocks_for(numel), rgpu_dcu::THREADS, 0, c->stream>>>(
            rgpu_cuda_view_of(x), x->dtype, rgpu_cuda_view_of(gr), gr->dtype, rgpu_cuda_view_of(dx), dx->dtype,
            numel, C, inner_of(x), su.training, coef);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    return RGPU_OK;
}
