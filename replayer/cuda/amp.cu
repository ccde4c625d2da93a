// amp.cu — the two ops of torch.amp.GradScaler on the GPU (CPU reference:
// replayer/cpu/cpu_amp.c, whose semantics and messages this file mirrors):
//
//   AMP_UNSCALE       grad := grad * inv_scale in place (any strides); found_inf
//                     := 1 when grad holds an inf or NaN, unchanged otherwise
//   AMP_UPDATE_SCALE  ATen's _amp_update_scale_ on one thread
//
// found_inf is deterministic without atomics: every thread that sees a
// non-finite input stores the same 1.0f and nothing else writes it, so the
// result does not depend on which threads ran or in what order.
#include "common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "op/amp.h"


// ---------------------------------------------------------------------------
// AMP_UNSCALE

struct unscale_args {
    rgpu_cuda_view g, out;      // grad as read and as written (the same tensor)
    long long n;
    int dt;
    bool contig;                // both row-major contiguous: element i at offset i
    const float *inv;
    float *found;
};

// DT: the gradient's dtype, fixed per instantiation (float64 computes in
// double, float32/float16/bfloat16 in float: no FP64 instruction in theirs).
template <int DT>
static __global__ void unscale_kernel(unscale_args a)
{
    const float inv = *a.inv;
    const bool one = inv == 1.0f;
    bool bad = false;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (long long)gridDim.x * blockDim.x) {
        long long gi = a.contig ? i : rgpu_cuda_offset(a.g, i);
        long long oi = a.contig ? i : rgpu_cuda_offset(a.out, i);
        if constexpr (DT == RGPU_F64) {
            double v = ((const double *)a.g.data)[gi];
            bad |= !isfinite(v);
            ((double *)a.out.data)[oi] = one ? v : __dmul_rn(v, (double)inv);
        } else if constexpr (DT == RGPU_F32) {
            float v = ((const float *)a.g.data)[gi];
            bad |= !isfinite(v);
            ((float *)a.out.data)[oi] = one ? v : __fmul_rn(v, inv);
        } else if constexpr (DT == RGPU_F16) {
            float v = rgpu_half_to_float(((const uint16_t *)a.g.data)[gi]);
            bad |= !isfinite(v);
            ((uint16_t *)a.out.data)[oi] = rgpu_float_to_half(one ? v : __fmul_rn(v, inv));
        } else {   // RGPU_BF16
            float v = rgpu_bf16_to_float(((const uint16_t *)a.g.data)[gi]);
            bad |= !isfinite(v);
            ((uint16_t *)a.out.data)[oi] = rgpu_float_to_bf16(one ? v : __fmul_rn(v, inv));
        }
    }
    if (bad) *a.found = 1.0f;   // the only value ever stored: no race on the result
}

static bool row_major(const rgpu_view *v)
{
    long long s = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (v->sizes[d] != 1 && v->strides[d] != s) return false;
        s *= v->sizes[d];
    }
    return true;
}

static rgpu_status launch_unscale(rgpu_cuda_ctx *c, const unscale_args &a, char *err, size_t errlen)
{
    if (a.n == 0) return RGPU_OK;
    const int threads = 256;
    long long blocks = (a.n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    switch (a.dt) {
    case RGPU_F64: unscale_kernel<RGPU_F64><<<(unsigned)blocks, threads, 0, c->stream>>>(a); break;
    case RGPU_F32: unscale_kernel<RGPU_F32><<<(unsigned)blocks, threads, 0, c->stream>>>(a); break;
    case RGPU_F16: unscale_kernel<RGPU_F16><<<(unsigned)blocks, threads, 0, c->stream>>>(a); break;
    default:       unscale_kernel<RGPU_BF16><<<(unsigned)blocks, threads, 0, c->stream>>>(a); break;
    }
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

static rgpu_status op_unscale(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *g = e->in[0], *inv = e->in[1];
    rgpu_view *out = e->out[0], *found = e->out[1];
    FORWARD_IF_ERROR(rgpu_op_amp_unscale_check(e, err, errlen));

    unscale_args a;
    a.g = rgpu_cuda_view_of(g);
    a.out = rgpu_cuda_view_of(out);
    a.n = rgpu_op_numel(g);
    a.dt = g->dtype;
    a.contig = row_major(g) && row_major(out);
    a.inv = (const float *)inv->data;
    a.found = (float *)found->data;
    return launch_unscale(c, a, err, errlen);
}

// ---------------------------------------------------------------------------
// AMP_UPDATE_SCALE

static __global__ void update_scale_kernel(float *scale, int32_t *tracker, const float *found, double growth, double backoff,
                                    long long interval)
{
    if (*found != 0.0f) {   // NaN compares unequal: backs off too
        *scale = (float)__dmul_rn((double)*scale, backoff);
        *tracker = 0;
    } else {
        int32_t successful = (int32_t)((uint32_t)*tracker + 1u);
        if ((long long)successful == interval) {
            float grown = (float)__dmul_rn((double)*scale, growth);
            if (isfinite(grown)) *scale = grown;
            *tracker = 0;
        } else {
            *tracker = successful;
        }
    }
}

static rgpu_status op_update_scale(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *found = e->in[0];
    rgpu_view *scale = e->out[0], *tracker = e->out[1];
    double growth, backoff;
    int64_t interval;
    FORWARD_IF_ERROR(rgpu_op_amp_update_scale_args(e, &growth, &backoff, &interval, err, errlen));
    update_scale_kernel<<<1, 1, 0, c->stream>>>((float *)scale->data, (int32_t *)tracker->data,
                                                (const float *)found->data, growth, backoff,
                                                (long long)interval);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// The family

extern "C" rgpu_status rgpu_cuda_amp_exec(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_AMP_UNSCALE:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, true, err, errlen));
        return op_unscale(c, e, err, errlen);
    case RGPU_OP_AMP_UPDATE_SCALE:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, true, err, errlen));
        return op_update_scale(c, e, err, errlen);
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cuda backend: unsupported op %s", rgpu_op_name(e->op));
    }
}
