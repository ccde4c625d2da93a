// loss.cu — nll_loss_forward and nll_loss_backward on the GPU (CPU reference:
// rgpu_r2_nll_loss / rgpu_r2_nll_loss_backward in replayer/cpu/cpu_reduce2_norm.c).
//
// logp is (N, C) with target (N,), or (C,) with target () or (1,); weight? is
// (C,); targets are int64 or uint8. Targets are checked on the device: a
// check kernel records the first bad position (integer atomicMin: the same
// answer whatever the order) in the session's device error word, reported with
// the CPU's message at the session's next wait (common.cuh; without a word,
// e.g. in a capture, the entry point reads it back and fails at once). The
// compute kernels skip bad targets, so nothing is ever read out of bounds. The reduced loss is one
// block folding its threads' partial sums in a fixed order, in the opmath
// (reduce.cuh: float, double when an operand is float64; the CPU: double).
#include "reduce.cuh"
#include "op/ctc.h"

// targets are int64 or uint8 (checked on the host): integer loads only
__device__ __forceinline__ long long nll_target(const void *t, int tdt, long long ts, long long i)
{
    return (long long)rf_ld_int(t, i * ts, tdt);
}

// bad: a scratch slot (seq 0) or the session's device error word (rgpu_dev_flag)
static __global__ void nll_check_kernel(const void *t, int tdt, long long ts, long long n, long long C, long long ignore,
                                        unsigned long long *bad, unsigned long long seq)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        long long v = nll_target(t, tdt, ts, i);
        if (v != ignore && (v < 0 || v >= C)) rgpu_dev_flag(bad, seq, (unsigned long long)i);
    }
}

// The word's fields for check s.seq when it failed: the first bad target.
static __global__ void nll_check_finish(rgpu_dev_word *w, rgpu_dev_site s, const void *t, int tdt, long long ts)
{
    if (rgpu_dev_mine(w, s)) rgpu_dev_finish(w, s, nll_target(t, tdt, ts, (long long)w->pos));
}

// Each of the first n non-ignored targets in [0, C) or RGPU_ERR_BAD_ARG with
// the first bad one's value (checked before any write, as the CPU). With e's
// device error word the check stays on the device and the error comes at the
// session's next wait; the kernels skip bad targets, so they read nothing out
// of bounds meanwhile.
static rgpu_status nll_check_targets(rgpu_cuda_ctx *c, const rgpu_exec *e, const rgpu_view *t, const op_nll_shape *s,
                                     int64_t n, char *err, size_t errlen)
{
    if (n <= 0) return RGPU_OK;
    const long long nb = (n + 255) / 256 > 4096 ? 4096 : (n + 255) / 256;
    rgpu_dev_word *wd = rgpu_cuda_dev_word(c, e);
    if (wd) {
        nll_check_kernel<<<(unsigned)nb, 256, 0, c->stream>>>(t->data, t->dtype, s->ts, n, s->C, s->ignore,
                                                              (unsigned long long *)wd, e->dev_seq);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        nll_check_finish<<<1, 1, 0, c->stream>>>(wd, rgpu_cuda_dev_site(e, RGPU_DEVERR_TARGET, rgpu_op_name(e->op), 0, s->C),
                                                 t->data, t->dtype, s->ts);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        return RGPU_OK;
    }
    RGPU_CUDA_NEEDS_HOST(c, "the target bounds check", err, errlen);
    unsigned long long *bad = (unsigned long long *)rgpu_cuda_scratch(c, sizeof *bad);
    if (bad == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of device memory", rgpu_op_name(e->op));
    unsigned long long first = ~0ull;
    cudaError_t ce = cudaMemsetAsync(bad, 0xff, sizeof *bad, c->stream);
    if (ce == cudaSuccess) {
        nll_check_kernel<<<(unsigned)nb, 256, 0, c->stream>>>(t->data, t->dtype, s->ts, n, s->C, s->ignore, bad, 0);
        ce = cudaGetLastError();
    }
    if (ce == cudaSuccess) ce = cudaMemcpyAsync(&first, bad, sizeof first, cudaMemcpyDeviceToHost, c->stream);
    if (ce == cudaSuccess) ce = rgpu_cuda_stream_wait(c->stream);
    rgpu_cuda_scratch_free(c, bad);
    RGPU_CUDA_TRY(ce, err, errlen);
    if (first == ~0ull) return RGPU_OK;
    // the offending value, read back from the target tensor
    int64_t v = 0;
    const char *p = (const char *)t->data + (int64_t)first * s->ts * (int64_t)rgpu_dtype_size(t->dtype);
    if (t->dtype == RGPU_I64) {
        RGPU_CUDA_TRY(cudaMemcpyAsync(&v, p, sizeof v, cudaMemcpyDeviceToHost, c->stream), err, errlen);
    } else {
        uint8_t b = 0;
        RGPU_CUDA_TRY(cudaMemcpyAsync(&b, p, 1, cudaMemcpyDeviceToHost, c->stream), err, errlen);
        RGPU_CUDA_TRY(rgpu_cuda_stream_wait(c->stream), err, errlen);
        v = b;
    }
    if (t->dtype == RGPU_I64) RGPU_CUDA_TRY(rgpu_cuda_stream_wait(c->stream), err, errlen);
    RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: Target %lld is out of bounds.", rgpu_op_name(e->op), (long long)v);
}

struct nll_args {
    long long N, C, ls0, ls1, ts, ws, ignore;
    int reduction;
    const void *logp, *t, *w;
    int ldt, tdt, wdt;
    void *loss, *tw;
    long long los;      // loss element stride (per-row loss)
    int lossdt, twdt;
    // backward
    const void *go, *twin;
    long long gos;
    int godt, twindt;
    void *gx;
    long long gs0, gs1;
    int gxdt;
    // cross_entropy_loss: the logits are logp's fields; lse (N,)|()
    void *lse;
    long long lses;
    int lsedt;
};

__device__ __forceinline__ bool nll_valid(long long c, const nll_args &a)
{
    return c != a.ignore && c >= 0 && c < a.C;
}

// The fields forward and backward share: the shape of the check, logp,
// target and weight?; the rest zero.
static nll_args nll_args_of(const op_nll_shape *s, const rgpu_view *logp, const rgpu_view *t, const rgpu_view *w)
{
    nll_args a;
    memset(&a, 0, sizeof a);
    a.N = s->N; a.C = s->C; a.ls0 = s->ls0; a.ls1 = s->ls1; a.ts = s->ts; a.ws = s->ws; a.ignore = s->ignore;
    a.reduction = (int)s->reduction;
    a.logp = logp->data; a.ldt = logp->dtype;
    a.t = t->data; a.tdt = t->dtype;
    a.w = w ? w->data : NULL; a.wdt = w ? w->dtype : 0;
    return a;
}

// The backwards' fields (nll_loss_backward, cross_entropy_loss_backward):
// grad (one element for all rows unless per row), total_weight, grad_input.
static nll_args nll_bw_args_of(const op_nll_shape *s, const rgpu_view *go, const rgpu_view *logp, const rgpu_view *t,
                               const rgpu_view *w, const rgpu_view *twv, const rgpu_view *gx)
{
    nll_args a = nll_args_of(s, logp, t, w);
    a.go = go->data; a.godt = go->dtype;
    a.gos = s->per_row ? go->strides[0] : -1;   // -1: one grad element for all rows
    a.twin = twv->data; a.twindt = twv->dtype;
    a.gx = gx->data; a.gxdt = gx->dtype;
    a.gs0 = s->batched ? gx->strides[0] : 0;
    a.gs1 = gx->strides[gx->ndim - 1];
    return a;
}

// One thread per element of grad_input (blocks of 256, grid-stride beyond RF_MAX_GRID).
static unsigned nll_bw_grid(const op_nll_shape *s)
{
    long long nb = (s->N * s->C + 255) / 256;
    return (unsigned)(nb > RF_MAX_GRID ? RF_MAX_GRID : nb);
}

// reduction none with 2-d logp: loss_i = -w[t_i] * logp[i, t_i] (0 when ignored)
// T: the opmath (reduce.cuh), float unless an operand is float64.
template <typename T> __global__ void nll_rows_kernel(nll_args a)
{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.N;
         i += (long long)gridDim.x * blockDim.x) {
        long long c = nll_target(a.t, a.tdt, a.ts, i);
        T v = 0;
        if (nll_valid(c, a)) {
            T wc = a.w ? rf_ld<T>(a.w, c * a.ws, a.wdt) : (T)1;
            v = rf_mul(-rf_ld<T>(a.logp, i * a.ls0 + c * a.ls1, a.ldt), wc);
        }
        rf_st(a.loss, i * a.los, a.lossdt, v);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0 && a.tw) rf_st(a.tw, 0, a.twdt, (T)0);
}

// logp[i, c]; for cross_entropy_loss (a.lse set) logits[i, c] - lse_i
template <typename T> __device__ __forceinline__ T nll_logp(const nll_args &a, long long i, long long c)
{
    T v = rf_ld<T>(a.logp, i * a.ls0 + c * a.ls1, a.ldt);
    return a.lse ? rf_sub(v, rf_ld<T>(a.lse, i * a.lses, a.lsedt)) : v;
}

// mean / sum: one block, thread t folds rows t, t + blockDim.x, .., then the
// fixed block sum; mean = sum / total_weight (NaN for an empty logp).
#define NLL_REDUCE_THREADS 512
template <typename T> __global__ void __launch_bounds__(NLL_REDUCE_THREADS) nll_reduce_kernel(nll_args a)
{
    __shared__ T sh[32];
    T sum = 0, wsum = 0;
    const bool empty = a.N * a.C == 0;
    for (long long i = threadIdx.x; !empty && i < a.N; i += blockDim.x) {
        long long c = nll_target(a.t, a.tdt, a.ts, i);
        if (!nll_valid(c, a)) continue;
        T wc = a.w ? rf_ld<T>(a.w, c * a.ws, a.wdt) : (T)1;
        sum = rf_sub(sum, rf_mul(nll_logp<T>(a, i, c), wc));
        wsum += wc;
    }
    sum = rf_group_sum<true>(sum, sh);
    wsum = rf_group_sum<true>(wsum, sh);
    if (threadIdx.x == 0) {
        T out = sum;
        if (a.reduction == 1) out = empty ? (T)NAN : sum / wsum;
        rf_st(a.loss, 0, a.lossdt, out);
        if (a.tw) rf_st(a.tw, 0, a.twdt, wsum);
    }
}

rgpu_status rgpu_cuda_red_nll_loss(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *logp = e->in[0], *t = e->in[1], *w = e->in[2];
    rgpu_view *loss = e->out[0], *tw = e->out[1];
    op_nll_shape s;
    FORWARD_IF_ERROR(rgpu_op_nll_loss_check(e, &s, err, errlen));
    bool per_row = s.per_row;
    // as ATen: a reduced loss over an empty logp checks no target
    FORWARD_IF_ERROR(nll_check_targets(c, e, t, &s, per_row || s.C > 0 ? s.N : 0, err, errlen));

    nll_args a = nll_args_of(&s, logp, t, w);
    a.loss = loss->data; a.lossdt = loss->dtype;
    a.tw = tw ? tw->data : NULL; a.twdt = tw ? tw->dtype : 0;
    const bool opf = rf_opmath_float({ a.ldt, w ? a.wdt : -1, a.lossdt, tw ? a.twdt : -1 });
    if (per_row) {
        a.los = loss->ndim == 1 ? loss->strides[0] : 0;
        long long nb = (s.N + 255) / 256;
        if (nb > RF_MAX_GRID) nb = RF_MAX_GRID;
        if (nb < 1) nb = 1;   // still writes total_weight for N == 0
        if (opf) nll_rows_kernel<float><<<(unsigned)nb, 256, 0, c->stream>>>(a);
        else nll_rows_kernel<double><<<(unsigned)nb, 256, 0, c->stream>>>(a);
    } else {
        if (opf) nll_reduce_kernel<float><<<1, NLL_REDUCE_THREADS, 0, c->stream>>>(a);
        else nll_reduce_kernel<double><<<1, NLL_REDUCE_THREADS, 0, c->stream>>>(a);
    }
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// in grad ((N,) for none with 2-d logp, else one element), logp, target,
// weight?, total_weight (one element); out grad_input (logp's shape): zeros except
//   none (2-d): gx[i, t_i] = -w[t_i] * grad[i]
//   otherwise:  gx[i, t_i] = -w[t_i] * grad (/ total_weight for mean)
// One thread per element of gx, so the zeros and the values are one pass.
// Row i's gradient scale, w[t_i] * grad (grad[i] for none with 2-d input, else
// grad / total_weight for mean, grad for sum), target t_i valid: the factor of
// both backwards (nll's negated, cross-entropy's times softmax - onehot).
template <typename T> __device__ __forceinline__ T nll_bw_scale(const nll_args &a, long long i, long long tc)
{
    T wc = a.w ? rf_ld<T>(a.w, tc * a.ws, a.wdt) : (T)1;
    T gi;
    if (a.reduction == 0 && a.gos >= 0) {
        gi = rf_ld<T>(a.go, i * a.gos, a.godt);
    } else {
        gi = rf_ld<T>(a.go, 0, a.godt);
        if (a.reduction == 1) gi /= rf_ld<T>(a.twin, 0, a.twindt);
    }
    return rf_mul(wc, gi);
}

template <typename T> __global__ void nll_backward_kernel(nll_args a)
{
    const long long total = a.N * a.C;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total;
         k += (long long)gridDim.x * blockDim.x) {
        const long long i = k / a.C, cc = k - i * a.C;
        long long tc = nll_target(a.t, a.tdt, a.ts, i);
        T v = tc == cc && nll_valid(tc, a) ? -nll_bw_scale<T>(a, i, tc) : (T)0;
        rf_st(a.gx, i * a.gs0 + cc * a.gs1, a.gxdt, v);
    }
}

rgpu_status rgpu_cuda_red_nll_loss_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *go = e->in[0], *logp = e->in[1], *t = e->in[2], *w = e->in[3], *twv = e->in[4];
    rgpu_view *gx = e->out[0];
    op_nll_shape s;
    FORWARD_IF_ERROR(rgpu_op_nll_loss_backward_check(e, &s, err, errlen));
    FORWARD_IF_ERROR(nll_check_targets(c, e, t, &s, s.N, err, errlen));
    if (s.N * s.C == 0) return RGPU_OK;

    nll_args a = nll_bw_args_of(&s, go, logp, t, w, twv, gx);
    const unsigned nb = nll_bw_grid(&s);
    if (rf_opmath_float({ a.godt, a.ldt, w ? a.wdt : -1, a.twindt, a.gxdt }))
        nll_backward_kernel<float><<<nb, 256, 0, c->stream>>>(a);
    else nll_backward_kernel<double><<<nb, 256, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// --- cross_entropy_loss (fused) --------------------------------------------------------
// The logits are logp's fields of nll_args. Forward: a row kernel (one warp
// per row up to RF_WARP_ROW_MAX classes, one block beyond: softmax.cu's
// layout) writes lse_i = max + ln sum exp(x - max) and, for reduction none,
// the row's loss w[t_i] * (lse_i - x_it); the reduced loss is nll_reduce_kernel
// with logp = x - lse. Backward: one thread per
// element, g_i * w[t_i] * (exp(x - lse_i) - [c == t_i]).

template <bool BLK, typename T> __global__ void ce_rows_kernel(nll_args a)
{
    __shared__ T sh[32];
    const rf_group gr = rf_group_of<BLK>();
    for (long long i = gr.row0; i < a.N; i += gr.rstep) {
        const long long xo = i * a.ls0;
        T mx = -INFINITY;
        for (long long c = gr.lane; c < a.C; c += gr.size) {
            T v = rf_ld<T>(a.logp, xo + c * a.ls1, a.ldt);
            if (mx == mx && !(v <= mx)) mx = v;   // a NaN wins and sticks
        }
        mx = rf_group_max<BLK>(mx, sh);
        T sum = 0;
        if (mx != (T)-INFINITY && mx == mx)
            for (long long c = gr.lane; c < a.C; c += gr.size) sum += exp(rf_ld<T>(a.logp, xo + c * a.ls1, a.ldt) - mx);
        sum = rf_group_sum<BLK>(sum, sh);
        if (gr.lane == 0) {
            const T lse = mx != (T)-INFINITY && mx == mx ? mx + log(sum) : mx;
            rf_st(a.lse, i * a.lses, a.lsedt, lse);
            if (a.reduction == 0 && a.los >= 0) {
                long long t = nll_target(a.t, a.tdt, a.ts, i);
                T v = 0;
                if (nll_valid(t, a)) {
                    T wc = a.w ? rf_ld<T>(a.w, t * a.ws, a.wdt) : (T)1;
                    v = rf_mul(rf_sub(lse, rf_ld<T>(a.logp, xo + t * a.ls1, a.ldt)), wc);
                }
                rf_st(a.loss, i * a.los, a.lossdt, v);
            }
        }
    }
}

rgpu_status rgpu_cuda_red_cross_entropy(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *x = e->in[0], *t = e->in[1], *w = e->in[2];
    rgpu_view *loss = e->out[0], *tw = e->out[1], *lse = e->out[2];
    op_nll_shape s;
    FORWARD_IF_ERROR(rgpu_op_cross_entropy_check(e, &s, err, errlen));
    FORWARD_IF_ERROR(nll_check_targets(c, e, t, &s, s.per_row || s.C > 0 ? s.N : 0, err, errlen));
    nll_args a = nll_args_of(&s, x, t, w);
    a.loss = loss->data; a.lossdt = loss->dtype;
    a.tw = tw ? tw->data : NULL; a.twdt = tw ? tw->dtype : 0;
    a.lse = lse->data; a.lsedt = lse->dtype;
    a.lses = s.batched ? lse->strides[0] : 0;
    a.los = s.per_row ? (loss->ndim == 1 ? loss->strides[0] : 0) : -1;
    const bool opf = rf_opmath_float({ a.ldt, w ? a.wdt : -1, a.lossdt, tw ? a.twdt : -1, a.lsedt });
    if (s.N > 0) {
        const bool blk = s.C > RF_WARP_ROW_MAX;
        const unsigned grid = rf_row_grid(s.N, blk);
        if (opf) {
            if (blk) ce_rows_kernel<true, float><<<grid, RF_ROW_THREADS, 0, c->stream>>>(a);
            else ce_rows_kernel<false, float><<<grid, RF_ROW_THREADS, 0, c->stream>>>(a);
        } else {
            if (blk) ce_rows_kernel<true, double><<<grid, RF_ROW_THREADS, 0, c->stream>>>(a);
            else ce_rows_kernel<false, double><<<grid, RF_ROW_THREADS, 0, c->stream>>>(a);
        }
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    if (s.per_row) {
        if (tw)     // total_weight 0 for reduction none, as nll_loss's (0.0 is all-zero bits in every dtype)
            RGPU_CUDA_TRY(cudaMemsetAsync(tw->data, 0, rgpu_dtype_size(tw->dtype), c->stream), err, errlen);
        return RGPU_OK;
    }
    if (opf) nll_reduce_kernel<float><<<1, NLL_REDUCE_THREADS, 0, c->stream>>>(a);     // logp = x - lse
    else nll_reduce_kernel<double><<<1, NLL_REDUCE_THREADS, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

template <typename T> __global__ void ce_backward_kernel(nll_args a)
{
    const long long total = a.N * a.C;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total;
         k += (long long)gridDim.x * blockDim.x) {
        const long long i = k / a.C, cc = k - i * a.C;
        T v = 0;
        long long tc = nll_target(a.t, a.tdt, a.ts, i);
        if (nll_valid(tc, a)) {
            T p = exp(rf_ld<T>(a.logp, i * a.ls0 + cc * a.ls1, a.ldt) - rf_ld<T>(a.lse, i * a.lses, a.lsedt));
            v = rf_mul(nll_bw_scale<T>(a, i, tc), cc == tc ? rf_sub(p, (T)1) : p);
        }
        rf_st(a.gx, i * a.gs0 + cc * a.gs1, a.gxdt, v);
    }
}

rgpu_status rgpu_cuda_red_cross_entropy_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *go = e->in[0], *x = e->in[1], *t = e->in[2], *w = e->in[3], *twv = e->in[4], *lse = e->in[5];
    rgpu_view *gx = e->out[0];
    op_nll_shape s;
    FORWARD_IF_ERROR(rgpu_op_cross_entropy_backward_check(e, &s, err, errlen));
    if (s.N * s.C == 0) return RGPU_OK;
    nll_args a = nll_bw_args_of(&s, go, x, t, w, twv, gx);
    a.lse = (void *)lse->data; a.lsedt = lse->dtype;
    a.lses = s.batched ? lse->strides[0] : 0;
    const unsigned nb = nll_bw_grid(&s);
    if (rf_opmath_float({ a.godt, a.ldt, w ? a.wdt : -1, a.twindt, a.gxdt, a.lsedt }))
        ce_backward_kernel<float><<<nb, 256, 0, c->stream>>>(a);
    else ce_backward_kernel<double><<<nb, 256, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// --- CTC loss ---------------------------------------------------------------------------
// _ctc_loss and _ctc_loss_backward: the recursions of op/ctc.h, the code the CPU
// backend runs, one thread per batch element (each walks its own time steps;
// the elements' outputs are disjoint, so there are no races and no atomics).

#define CTC_THREADS 64

static __global__ void ctc_forward_kernel(op_ctc a)
{
    long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (b < a.N) op_ctc_forward_one(&a, b);
}

static __global__ void ctc_backward_kernel(op_ctc a, double *beta)
{
    long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (b < a.N) op_ctc_backward_one(&a, b, beta + b * 2 * a.Sp);
}

rgpu_status rgpu_cuda_red_ctc_loss(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_ctc a;
    FORWARD_IF_ERROR(rgpu_op_ctc_check(e, &a, err, errlen));
    if (a.N == 0) return RGPU_OK;
    ctc_forward_kernel<<<(unsigned)((a.N + CTC_THREADS - 1) / CTC_THREADS), CTC_THREADS, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

rgpu_status rgpu_cuda_red_ctc_loss_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_ctc a;
    FORWARD_IF_ERROR(rgpu_op_ctc_check(e, &a, err, errlen));
    if (a.N == 0) return RGPU_OK;
    double *beta = (double *)rgpu_cuda_scratch(c, (size_t)a.N * 2 * (size_t)a.Sp * sizeof(double));
    if (beta == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of device memory", rgpu_op_name(e->op));
    ctc_backward_kernel<<<(unsigned)((a.N + CTC_THREADS - 1) / CTC_THREADS), CTC_THREADS, 0, c->stream>>>(a, beta);
    cudaError_t ce = cudaGetLastError();
    rgpu_cuda_scratch_free(c, beta);
    RGPU_CUDA_TRY(ce, err, errlen);
    return RGPU_OK;
}
