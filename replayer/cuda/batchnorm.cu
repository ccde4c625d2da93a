// batchnorm.cu — native_batch_norm and native_batch_norm_backward on the CUDA
// backend, over channel dim 1 of x (N,C) or (N,C,*), any strides. CPU
// reference: cpu_dense_norm.c (same checks, messages and formulas):
//
//   training: mean, biased var per channel (sums in the opmath: float for
//             f32/f16/bf16 as ATen's CUDA, double for f64; the CPU: double); save_mean,
//             save_invstd; running stats updated in place (unbiased var)
//   eval:     mean = running_mean, invstd = 1/sqrt(running_var + eps) in opmath
//   y = x*alpha + beta per channel, in opmath (f32 for f32/f16/bf16, f64)
//   backward: sum = Σ dy, dotp = Σ (x-mean)·dy (the opmath); dx, dw, db
//
// One block per channel reduces in a fixed order (each thread a strided run
// in index order, then a fixed tree), its thread 0 does the per-channel
// scalar work exactly as the CPU loop body; a pointwise kernel then writes
// y / dx. Elementwise formulas use the _rn intrinsics so nvcc does not fuse
// them into FMAs the CPU reference does not do.
#include "dense.cuh"
#include "reduce.cuh"


// Args and checks: rgpu_op_bn_forward_setup / rgpu_op_bn_backward_setup from cpu_dense.h (the CPU's).

// ---------------------------------------------------------------------------
// Device side

// T: the opmath, float when x, the gradient, the parameters, the stats and
// the outputs are all float32/float16/bfloat16 (reduce.cuh's
// rf_opmath_float; ATen's CUDA kernels accumulate them in float), double
// otherwise, with the CPU reference's rounding to the opmath (opm) and its
// sums in double: the float64 case and mixed ones.

// Rounds like the opmath type: float for f32/f16/bf16, double for f64 (T
// float: a float already is).
__device__ __forceinline__ double opm(bool f64, double v) { return f64 ? v : (double)(float)v; }
__device__ __forceinline__ float opm(bool, float v) { return v; }

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
__device__ __forceinline__ float round_to(int dt, float v)
{
    switch (dt) {
    case RGPU_F16:  return __half2float(__float2half_rn(v));
    case RGPU_BF16: return __bfloat162float(__float2bfloat16_rn(v));
    default:        return v;
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
template <typename T> __device__ __forceinline__ T chan_at(const chan_view &v, int64_t c, int64_t i)
{
    return rf_ld<T>(v.rest.data, c * v.cstride + rgpu_cuda_offset(v.rest, i), v.dt);
}
template <typename T> __device__ __forceinline__ T par_at(const rgpu_dcu::param &q, int64_t i)
{
    return rf_ld<T>(q.p, i * q.stride, q.dt);
}
template <typename T> __device__ __forceinline__ void par_set(const rgpu_dcu::param &q, int64_t i, T v)
{
    rf_st(q.p, i * q.stride, q.dt, v);
}

// What the forward and the backward kernels both read: x, the channel count,
// the elements per channel, the mode and eps (op_bn_setup's), and a device
// scratch of coefficients per channel (T).
struct bn_base {
    chan_view x;
    int64_t C, n;
    bool training, f64;
    double eps;
    float epsf;
    void *coef;
};

// a's bn_base from su and x, with per_channel coefficients each in sc.
static rgpu_status bn_base_init(bn_base *a, rgpu_dcu::scratch *sc, const op_bn_setup *su, const rgpu_view *x,
                                int per_channel, bool opf, const char *name, char *err, size_t errlen)
{
    a->coef = sc->get(per_channel * su->C, opf ? sizeof(float) : sizeof(double));
    if (!a->coef) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of device memory for %lld channels", name, (long long)su->C);
    a->x = chan_view_of(x);
    a->C = su->C; a->n = su->n;
    a->training = su->training;
    a->f64 = x->dtype == RGPU_F64;
    a->eps = su->eps;
    a->epsf = (float)su->eps;
    return RGPU_OK;
}

struct bn_fwd_args : bn_base {
    double momentum;
    float momentumf;
    int stat_dt;
    rgpu_dcu::param w, b, rm, rv, sm, si;   // p NULL when absent / not written
    // coef: (C, 2): alpha, beta (float values when !f64)
};

template <typename T> __global__ void bn_fwd_stats_kernel(bn_fwd_args a)
{
    __shared__ T sh[rgpu_dcu::THREADS];
    T *const coef = (T *)a.coef;
    const T eps = rf_pick<T>(a.eps, a.epsf), mom = rf_pick<T>(a.momentum, a.momentumf);
    for (int64_t c = blockIdx.x; c < a.C; c += gridDim.x) {
        T mean = 0, invstd = 0;
        if (a.training) {
            T s = 0;
            for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) s = rf_add(s, chan_at<T>(a.x, c, i));
            T sum = rgpu_dcu::block_sum(s, sh);
            mean = sum / (T)a.n;
            T v = 0;
            for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
                T d = rf_sub(chan_at<T>(a.x, c, i), mean);
                v = rf_add(v, rf_mul(d, d));
            }
            T var_sum = rgpu_dcu::block_sum(v, sh);
            if (threadIdx.x == 0) {
                /* ATen keeps mean and var_sum in tensors of the stats dtype first */
                mean = round_to(a.stat_dt, mean);
                var_sum = round_to(a.stat_dt, var_sum);
                T var = round_to(a.stat_dt, var_sum / (T)a.n);
                T unbiased = round_to(a.stat_dt, var_sum / (T)(a.n - 1));
                invstd = (var == (T)0 && eps == (T)0) ? (T)0 : (T)1 / sqrt(var + eps);
                T om = (T)1 - mom;
                if (a.rm.p) par_set<T>(a.rm, c, rf_add(rf_mul(mom, mean), rf_mul(om, par_at<T>(a.rm, c))));
                if (a.rv.p) par_set<T>(a.rv, c, rf_add(rf_mul(mom, unbiased), rf_mul(om, par_at<T>(a.rv, c))));
                if (a.sm.p) par_set<T>(a.sm, c, mean);
                if (a.si.p) par_set<T>(a.si, c, invstd);
                mean = opm(a.f64, round_to(a.stat_dt, mean));
                invstd = opm(a.f64, round_to(a.stat_dt, invstd));
            }
        } else if (threadIdx.x == 0) {
            mean = opm(a.f64, par_at<T>(a.rm, c));
            T v = opm(a.f64, par_at<T>(a.rv, c) + opm(a.f64, eps));
            if constexpr (sizeof(T) == 4) invstd = 1.0f / sqrtf(v);
            else invstd = opm(a.f64, 1.0 / (a.f64 ? sqrt(v) : (double)sqrtf((float)v)));
            if (a.sm.p) par_set<T>(a.sm, c, mean);
            if (a.si.p) par_set<T>(a.si, c, invstd);
        }
        if (threadIdx.x == 0) {
            T wc = a.w.p ? opm(a.f64, par_at<T>(a.w, c)) : (T)1;
            T bc = a.b.p ? opm(a.f64, par_at<T>(a.b, c)) : (T)0;
            if (sizeof(T) == 8 && a.f64) {
                T alpha = rf_mul(invstd, wc);
                coef[2 * c] = alpha;
                coef[2 * c + 1] = rf_sub(bc, rf_mul(mean, alpha));
            } else {
                float alpha = __fmul_rn((float)invstd, (float)wc);
                coef[2 * c] = alpha;
                coef[2 * c + 1] = __fsub_rn((float)bc, __fmul_rn((float)mean, alpha));
            }
        }
    }
}

// y[i] = x[i]*alpha[c] + beta[c], c = channel of element i (row-major over x's sizes).
template <typename T>
__global__ void bn_apply_kernel(rgpu_cuda_view x, int xdt, rgpu_cuda_view y, int ydt, int64_t numel, int64_t C,
                                int64_t inner, bool f64, const void *coefp)
{
    const T *const coef = (const T *)coefp;
    DCU_LOOP(i, numel) {
        int64_t c = (i / inner) % C;
        T xv = rf_ld<T>(x.data, rgpu_cuda_offset(x, i), xdt), r;
        if (sizeof(T) == 8 && f64) r = rf_add(rf_mul(xv, coef[2 * c]), coef[2 * c + 1]);
        else r = __fadd_rn(__fmul_rn((float)xv, (float)coef[2 * c]), (float)coef[2 * c + 1]);
        rf_st(y.data, rgpu_cuda_offset(y, i), ydt, r);
    }
}

struct bn_bwd_args : bn_base {
    chan_view g;
    rgpu_dcu::param w, rm, rv, sm, si, dw, db;
    // coef: (C, 5): mean, invstd, wc, k, gm
};

template <typename T> __global__ void bn_bwd_stats_kernel(bn_bwd_args a)
{
    __shared__ T sh[rgpu_dcu::THREADS];
    __shared__ T mean_s;
    T *const coef = (T *)a.coef;
    const T eps = rf_pick<T>(a.eps, a.epsf);
    for (int64_t c = blockIdx.x; c < a.C; c += gridDim.x) {
        if (threadIdx.x == 0) {
            mean_s = a.training ? opm(a.f64, par_at<T>(a.sm, c)) : opm(a.f64, par_at<T>(a.rm, c));
        }
        __syncthreads();
        T mean = mean_s;
        T s = 0, d = 0;
        for (int64_t i = threadIdx.x; i < a.n; i += blockDim.x) {
            T gv = chan_at<T>(a.g, c, i), xv = chan_at<T>(a.x, c, i);
            s = rf_add(s, gv);
            d = rf_add(d, rf_mul(rf_sub(xv, mean), gv));
        }
        T sum = rgpu_dcu::block_sum(s, sh);
        T dotp = rgpu_dcu::block_sum(d, sh);
        if (threadIdx.x == 0) {
            T invstd;
            if (a.training) {
                invstd = opm(a.f64, par_at<T>(a.si, c));
            } else {
                T v = opm(a.f64, par_at<T>(a.rv, c) + opm(a.f64, eps));
                if constexpr (sizeof(T) == 4) invstd = 1.0f / sqrtf(v);
                else invstd = opm(a.f64, 1.0 / (a.f64 ? sqrt(v) : (double)sqrtf((float)v)));
            }
            T wc = a.w.p ? opm(a.f64, par_at<T>(a.w, c)) : (T)1;
            T *q = coef + 5 * c;
            q[0] = mean;
            q[1] = invstd;
            q[2] = wc;
            q[3] = dotp * invstd * invstd / (T)a.n;
            q[4] = sum / (T)a.n;
            if (a.dw.p) par_set<T>(a.dw, c, dotp * invstd);
            if (a.db.p) par_set<T>(a.db, c, sum);
        }
    }
}

template <typename T>
__global__ void bn_bwd_dx_kernel(rgpu_cuda_view x, int xdt, rgpu_cuda_view g, int gdt, rgpu_cuda_view dx, int dxdt,
                                 int64_t numel, int64_t C, int64_t inner, bool training, const void *coefp)
{
    const T *const coef = (const T *)coefp;
    DCU_LOOP(i, numel) {
        int64_t c = (i / inner) % C;
        const T *q = coef + 5 * c;
        T gv = rf_ld<T>(g.data, rgpu_cuda_offset(g, i), gdt), r;
        if (training) {
            T xv = rf_ld<T>(x.data, rgpu_cuda_offset(x, i), xdt);
            T t = rf_sub(rf_sub(gv, q[4]), rf_mul(rf_sub(xv, q[0]), q[3]));
            r = rf_mul(rf_mul(t, q[1]), q[2]);
        } else {
            r = rf_mul(rf_mul(gv, q[1]), q[2]);
        }
        rf_st(dx.data, rgpu_cuda_offset(dx, i), dxdt, r);
    }
}

static int dt_of(const rgpu_view *v) { return v ? v->dtype : -1; }

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
    const bool opf = rf_opmath_float({ x->dtype, y->dtype, dt_of(e->in[1]), dt_of(e->in[2]), dt_of(e->in[3]),
                                       dt_of(e->in[4]), dt_of(su.saves[0]), dt_of(su.saves[1]), su.stat_dt });
    bn_fwd_args a;
    FORWARD_IF_ERROR(bn_base_init(&a, &sc, &su, x, 2, opf, name, err, errlen));
    a.momentum = su.momentum;
    a.momentumf = (float)su.momentum;
    a.stat_dt = su.stat_dt;
    a.w = rgpu_dcu::param_of(e->in[1]); a.b = rgpu_dcu::param_of(e->in[2]);
    a.rm = rgpu_dcu::param_of(e->in[3]); a.rv = rgpu_dcu::param_of(e->in[4]);
    a.sm = rgpu_dcu::param_of(su.saves[0]); a.si = rgpu_dcu::param_of(su.saves[1]);
    if (opf) bn_fwd_stats_kernel<float><<<channel_blocks(C), rgpu_dcu::THREADS, 0, c->stream>>>(a);
    else bn_fwd_stats_kernel<double><<<channel_blocks(C), rgpu_dcu::THREADS, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    int64_t numel = rgpu_op_numel(x);
    const unsigned nb = rgpu_dcu::blocks_for(numel);
    if (opf)
        bn_apply_kernel<float><<<nb, rgpu_dcu::THREADS, 0, c->stream>>>(
            rgpu_cuda_view_of(x), x->dtype, rgpu_cuda_view_of(y), y->dtype, numel, C, inner_of(x), a.f64, a.coef);
    else
        bn_apply_kernel<double><<<nb, rgpu_dcu::THREADS, 0, c->stream>>>(
            rgpu_cuda_view_of(x), x->dtype, rgpu_cuda_view_of(y), y->dtype, numel, C, inner_of(x), a.f64, a.coef);
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
    const bool opf = rf_opmath_float({ gr->dtype, x->dtype, dt_of(e->in[2]), dt_of(e->in[3]), dt_of(e->in[4]),
                                       dt_of(e->in[5]), dt_of(e->in[6]), dt_of(dx), dt_of(e->out[1]),
                                       dt_of(e->out[2]) });
    bn_bwd_args a;
    FORWARD_IF_ERROR(bn_base_init(&a, &sc, &su, x, 5, opf, name, err, errlen));
    a.g = chan_view_of(gr);
    a.w = rgpu_dcu::param_of(e->in[2]); a.rm = rgpu_dcu::param_of(e->in[3]); a.rv = rgpu_dcu::param_of(e->in[4]);
    a.sm = rgpu_dcu::param_of(e->in[5]); a.si = rgpu_dcu::param_of(e->in[6]);
    a.dw = rgpu_dcu::param_of(e->out[1]); a.db = rgpu_dcu::param_of(e->out[2]);
    if (opf) bn_bwd_stats_kernel<float><<<channel_blocks(C), rgpu_dcu::THREADS, 0, c->stream>>>(a);
    else bn_bwd_stats_kernel<double><<<channel_blocks(C), rgpu_dcu::THREADS, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    if (dx) {
        int64_t numel = rgpu_op_numel(x);
        const unsigned nb = rgpu_dcu::blocks_for(numel);
        if (opf)
            bn_bwd_dx_kernel<float><<<nb, rgpu_dcu::THREADS, 0, c->stream>>>(
                rgpu_cuda_view_of(x), x->dtype, rgpu_cuda_view_of(gr), gr->dtype, rgpu_cuda_view_of(dx), dx->dtype,
                numel, C, inner_of(x), su.training, a.coef);
        else
            bn_bwd_dx_kernel<double><<<nb, rgpu_dcu::THREADS, 0, c->stream>>>(
                rgpu_cuda_view_of(x), x->dtype, rgpu_cuda_view_of(gr), gr->dtype, rgpu_cuda_view_of(dx), dx->dtype,
                numel, C, inner_of(x), su.training, a.coef);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    return RGPU_OK;
}
