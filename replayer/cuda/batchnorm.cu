// batchnorm.cu — native_batch_norm and native_batch_norm_backward on the CUDA
// backend, over channel dim 1 of x (N,C) or (N,C,*), any strides: on cuDNN
// where it is found and takes the case (the section "cuDNN" below), else on
// the kernels here. CPU
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
#include "dnn.cuh"
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
// cuDNN (dnn.cuh: loaded on first use; RGPU_CUDNN=0 keeps these kernels):
// cudnnBatchNormalizationForwardTraining / ForwardInference / Backward in
// CUDNN_BATCHNORM_SPATIAL mode (deterministic, as cuDNN documents it: no
// atomics) for what cuDNN takes, as ATen's cudnn_batch_norm does: x of
// float32/float16/bfloat16/float64 with 2 to 5 dims (2-d and 3-d as (N,C,1,1)
// and (N,C,L,1)), the output of x's strides; weight and bias present; every
// per-channel tensor (weight, bias, running and saved stats, dw, db) packed
// and float32 (float64 for float64 x). The backward: training mode with the
// saved stats, and dx, dw, db all wanted. Anything else, and a call cuDNN
// refuses (said on the log), runs the kernels above. Same formulas (biased
// variance normalises, unbiased updates the running variance with factor =
// momentum); cuDNN's own order of summation.

// x's 4-d/5-d form for cuDNN: (N,C) -> (N,C,1,1), (N,C,L) -> (N,C,L,1).
static rgpu_view bn_nd(const rgpu_view *x)
{
    rgpu_view v = *x;
    for (int d = x->ndim; d < 4; d++) { v.sizes[d] = 1; v.strides[d] = 1; }
    if (v.ndim < 4) v.ndim = 4;
    return v;
}

// A per-channel tensor cuDNN can take: absent (when allowed), or C packed of dtype pdt.
static bool bn_param_ok(const rgpu_view *v, int pdt, int64_t C, bool may_be_absent)
{
    if (!v || rgpu_op_numel(v) == 0) return may_be_absent;
    return v->dtype == pdt && v->ndim == 1 && v->sizes[0] == C && (C == 1 || v->strides[0] == 1);
}

static bool same_strides(const rgpu_view *a, const rgpu_view *b)
{
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d] || (a->sizes[d] != 1 && a->strides[d] != b->strides[d])) return false;
    return true;
}

static const void *ptr_of(const rgpu_view *v) { return v && rgpu_op_numel(v) ? v->data : NULL; }

// A call cuDNN refuses: the kernels run instead (nothing was written), said
// on the server's log (the first 5 times). Returns false.
static bool bn_refused(const char *name, const char *call, const char *why, int status)
{
    static int said;
    if (said < 5) {
        said++;
        fprintf(stderr, "rgpu cuda: %s: cuDNN batch norm: %s failed: %s (cudnnStatus %d); rgpu's kernels run\n", name,
                call, why, status);
    }
    return false;
}

// The x descriptor (also y's, dy's, dx's: the same strides) and the derived
// per-channel one, destroyed with it.
struct bn_descs {
    rgpu_cudnn *D;
    void *x = NULL, *p = NULL;
    const void *alpha = NULL, *beta = NULL;   // 1 and 0 as x's scaling type (double for float64, else float)
    double one = 1.0, zero = 0.0;
    float onef = 1.0f, zerof = 0.0f;
    explicit bn_descs(rgpu_cudnn *d) : D(d) {}
    ~bn_descs()
    {
        if (x) D->DestroyTensorDescriptor(x);
        if (p) D->DestroyTensorDescriptor(p);
    }
    bn_descs(const bn_descs &) = delete;
    bn_descs &operator=(const bn_descs &) = delete;
    // false: cuDNN cannot take x (the caller runs the kernels); an error status otherwise
    rgpu_status init(const rgpu_view *x0, bool *ok, const char *name, char *err, size_t errlen)
    {
        alpha = x0->dtype == RGPU_F64 ? (const void *)&one : (const void *)&onef;
        beta = x0->dtype == RGPU_F64 ? (const void *)&zero : (const void *)&zerof;
        rgpu_view xv = bn_nd(x0);
        dnn_td td;
        *ok = rgpu_dnn_td_of(&xv, &td);
        if (!*ok) return RGPU_OK;
        int s = D->CreateTensorDescriptor(&x);
        if (s == 0) s = D->CreateTensorDescriptor(&p);
        if (s == 0) s = D->SetTensorNdDescriptor(x, rgpu_dnn_dtype(x0->dtype), td.nd, td.dims, td.strides);
        if (s == 0) s = D->DeriveBNTensorDescriptor(p, x, DNN_BN_SPATIAL);
        if (s != 0) *ok = bn_refused(name, "the descriptors", D->GetErrorString(s), s);
        return RGPU_OK;
    }
};

/* *done false: the kernels run */
static rgpu_status dnn_bn_forward(rgpu_cuda_ctx *c, const rgpu_exec *e, const op_bn_setup *su, bool *done, char *err,
                                  size_t errlen)
{
    *done = false;
    const rgpu_view *x = e->in[0], *y = e->out[0];
    int dt = x->dtype, pdt = dt == RGPU_F64 ? RGPU_F64 : RGPU_F32;
    const rgpu_view *w = e->in[1], *b = e->in[2], *rm = e->in[3], *rv = e->in[4];
    bool stats = rm && rgpu_op_numel(rm) && rv && rgpu_op_numel(rv);
    if (rgpu_dnn_dtype(dt) < 0 || y->dtype != dt || x->ndim < 2 || x->ndim > 5 || rgpu_op_numel(x) == 0 ||
        !same_strides(x, y) || !bn_param_ok(w, pdt, su->C, false) || !bn_param_ok(b, pdt, su->C, false) ||
        !bn_param_ok(rm, pdt, su->C, true) || !bn_param_ok(rv, pdt, su->C, true) ||
        (!stats && ((rm && rgpu_op_numel(rm)) || (rv && rgpu_op_numel(rv)) || !su->training)) ||
        !bn_param_ok(su->saves[0], pdt, su->C, true) || !bn_param_ok(su->saves[1], pdt, su->C, true) ||
        !rgpu_cuda_dnn_ready(c))
        return RGPU_OK;
    rgpu_cudnn *D = &c->dnn;
    const char *name = rgpu_op_name(e->op);
    bn_descs ds(D);
    bool ok;
    FORWARD_IF_ERROR(ds.init(x, &ok, name, err, errlen));
    if (!ok) return RGPU_OK;
    int s;
    const char *call;
    if (su->training) {
        call = "cudnnBatchNormalizationForwardTraining";
        s = D->BatchNormalizationForwardTraining(D->handle, DNN_BN_SPATIAL, ds.alpha, ds.beta, ds.x, x->data, ds.x,
                                                 y->data, ds.p, w->data, b->data, su->momentum,
                                                 stats ? rm->data : NULL, stats ? rv->data : NULL, su->eps,
                                                 (void *)ptr_of(su->saves[0]), (void *)ptr_of(su->saves[1]));
    } else {
        call = "cudnnBatchNormalizationForwardInference";
        s = D->BatchNormalizationForwardInference(D->handle, DNN_BN_SPATIAL, ds.alpha, ds.beta, ds.x, x->data, ds.x,
                                                  y->data, ds.p, w->data, b->data, rm->data, rv->data, su->eps);
    }
    *done = s == 0 || bn_refused(name, call, D->GetErrorString(s), s);
    return RGPU_OK;
}

static rgpu_status dnn_bn_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, const op_bn_setup *su, bool *done, char *err,
                                   size_t errlen)
{
    *done = false;
    const rgpu_view *gr = e->in[0], *x = e->in[1], *w = e->in[2], *sm = e->in[5], *si = e->in[6];
    const rgpu_view *dx = e->out[0], *dw = e->out[1], *db = e->out[2];
    int dt = x->dtype, pdt = dt == RGPU_F64 ? RGPU_F64 : RGPU_F32;
    if (!su->training || rgpu_dnn_dtype(dt) < 0 || gr->dtype != dt || !dx || dx->dtype != dt || x->ndim < 2 ||
        x->ndim > 5 || rgpu_op_numel(x) == 0 || !same_strides(x, gr) || !same_strides(x, dx) ||
        !bn_param_ok(w, pdt, su->C, false) || !bn_param_ok(sm, pdt, su->C, false) ||
        !bn_param_ok(si, pdt, su->C, false) || !bn_param_ok(dw, pdt, su->C, false) ||
        !bn_param_ok(db, pdt, su->C, false) || !rgpu_cuda_dnn_ready(c))
        return RGPU_OK;
    rgpu_cudnn *D = &c->dnn;
    const char *name = rgpu_op_name(e->op);
    bn_descs ds(D);
    bool ok;
    FORWARD_IF_ERROR(ds.init(x, &ok, name, err, errlen));
    if (!ok) return RGPU_OK;
    int s = D->BatchNormalizationBackward(D->handle, DNN_BN_SPATIAL, ds.alpha, ds.beta, ds.alpha, ds.beta, ds.x,
                                          x->data, ds.x, gr->data, ds.x, dx->data, ds.p, w->data, dw->data,
                                          db->data, su->eps, sm->data, si->data);
    *done = s == 0 || bn_refused(name, "cudnnBatchNormalizationBackward", D->GetErrorString(s), s);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// Entry points

/* in x, w?, b?, running_mean?, running_var?; training, momentum, eps;
 * outs y, save_mean, save_invstd (size 0 in eval, as ATen) */
rgpu_status rgpu_cuda_dense_batch_norm(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_bn_setup su;
    FORWARD_IF_ERROR(rgpu_op_bn_forward_setup(e, &su, err, errlen));
    bool done;
    FORWARD_IF_ERROR(dnn_bn_forward(c, e, &su, &done, err, errlen));
    if (done) return RGPU_OK;
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
    bool done;
    FORWARD_IF_ERROR(dnn_bn_backward(c, e, &su, &done, err, errlen));
    if (done) return RGPU_OK;
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
