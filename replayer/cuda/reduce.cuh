// reduce.cuh — private to the reduce family (reduce.cu, softmax.cu, norm.cu,
// loss.cu): host-side argument checks taken from replayer/cpu/cpu_reduce2.h
// (the CPU reference's own functions: same codes, same messages), an N-d counter with per-operand
// element strides, element loads/stores that mirror cpu_internal.h's
// conversions, and fixed-order warp/block sums.
//
// Determinism: every reduction here has a fixed order that depends only on
// the shapes (never on timing or the device): a thread's own elements in
// increasing order, then an xor-butterfly or a shared-memory tree of fixed
// shape. No float atomics.
#pragma once

#include "common.cuh"
#include "convert.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <initializer_list>
#include <math.h>
#include <string.h>

#include "op/reduce.h"

#define RF_MAXD RGPU_MAX_DIMS

// One line into err, then return code (as the CPU's RETURN_ERROR).

// ---------------------------------------------------------------------------
// Host checks: the CPU reference's own (rgpu_op_check_view, rgpu_op_check_exec,
// rgpu_op_numel, op_dtype_is_float from cpu_internal.h; rgpu_op_reduce_arg, OP_ARGK,
// rgpu_op_reduce_want_float, rgpu_op_reduce_want_shape, rgpu_op_reduce_wrap_dim from cpu_reduce2.h), so the
// messages are the same by construction.

// ---------------------------------------------------------------------------
// N-d counter over sizes (row-major) with K operands, strides in elements.
// Built on the host, passed to kernels by value; rf_ctr_offs maps a linear
// position to each operand's element offset.
template <int K> struct rf_ctr {
    int n;
    long long total;
    long long sz[RF_MAXD];
    long long st[K][RF_MAXD];
};

template <int K> static inline void rf_ctr_init(rf_ctr<K> *c, int n, const int64_t *sizes)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->total = 1;
    for (int d = 0; d < n; d++) { c->sz[d] = sizes[d]; c->total *= sizes[d]; }
}

// Operand k steps by strides[0..n) (NULL: 0 everywhere, a broadcast/absent operand).
template <int K> static inline void rf_ctr_set(rf_ctr<K> *c, int k, const int64_t *strides)
{
    for (int d = 0; d < c->n; d++) c->st[k][d] = strides ? strides[d] : 0;
}

// Drops size-1 dims and merges a dim into the next inner one when every
// operand steps through both as one; row-major order is kept (as the CPU's
// r2_ctr_coalesce), so positions keep their meaning.
template <int K> static inline void rf_ctr_coalesce(rf_ctr<K> *c)
{
    int n = 0;
    for (int d = 0; d < c->n; d++) {
        if (c->sz[d] == 1) continue;
        if (n > 0) {
            bool merge = true;
            for (int k = 0; k < K; k++)
                if (c->st[k][n - 1] != c->st[k][d] * c->sz[d]) { merge = false; break; }
            if (merge) {
                c->sz[n - 1] *= c->sz[d];
                for (int k = 0; k < K; k++) c->st[k][n - 1] = c->st[k][d];
                continue;
            }
        }
        c->sz[n] = c->sz[d];
        for (int k = 0; k < K; k++) c->st[k][n] = c->st[k][d];
        n++;
    }
    c->n = n;
}

// rf_ctr_init, then operand k steps by strides[k] (NULL: 0 everywhere), then
// rf_ctr_coalesce: the counter a launcher builds, in one call.
template <int K>
static inline void rf_ctr_build(rf_ctr<K> *c, int n, const int64_t *sizes, std::initializer_list<const int64_t *> strides)
{
    rf_ctr_init(c, n, sizes);
    int k = 0;
    for (const int64_t *st : strides) rf_ctr_set(c, k++, st);
    rf_ctr_coalesce(c);
}

template <int K> __device__ __forceinline__ void rf_ctr_offs(const rf_ctr<K> &c, long long i, long long *off)
{
    if (c.n == 1) {
#pragma unroll
        for (int k = 0; k < K; k++) off[k] = i * c.st[k][0];
        return;
    }
#pragma unroll
    for (int k = 0; k < K; k++) off[k] = 0;
    for (int d = c.n - 1; d >= 0; d--) {
        long long s = c.sz[d];
        long long q = i / s, r = i - q * s;
#pragma unroll
        for (int k = 0; k < K; k++) off[k] += r * c.st[k][d];
        i = q;
    }
}

// Elements: convert.cuh (cvt_ld_* / cvt_st_*: op/dtype.h's casts, element i of an array).

// ---------------------------------------------------------------------------
// Fixed-order group sums for the row kernels. A group is one warp (BLK false)
// or the whole block (BLK true; blockDim.x a multiple of 32, at most 1024).
// The xor butterfly leaves the same bits in every lane (a + b == b + a in
// IEEE), so every thread gets the identical result; the order depends only
// on the group size.

template <typename T> __device__ __forceinline__ T rf_warp_sum(T v)
{
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}

// max with NaN winning; equal values give the same bits both ways round
// (+0 over -0), so the butterfly stays identical across lanes.
template <typename T> __device__ __forceinline__ T rf_max_nan(T a, T b)
{
    if (a != a) return a;
    if (b != b) return b;
    if (a > b) return a;
    if (b > a) return b;
    return signbit(a) ? b : a;
}

template <typename T> __device__ __forceinline__ T rf_warp_max(T v)
{
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v = rf_max_nan(v, __shfl_xor_sync(0xffffffffu, v, m));
    return v;
}

// sh: 32 Ts of shared memory, used only when BLK.
template <bool BLK, typename T> __device__ __forceinline__ T rf_group_sum(T v, T *sh)
{
    v = rf_warp_sum(v);
    if (!BLK) return v;
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();   // sh may still be read by the previous call
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < nw ? sh[l] : (T)0;
    return rf_warp_sum(v);
}

template <bool BLK, typename T> __device__ __forceinline__ T rf_group_max(T v, T *sh)
{
    v = rf_warp_max(v);
    if (!BLK) return v;
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < nw ? sh[l] : (T)-INFINITY;
    return rf_warp_max(v);
}

// ---------------------------------------------------------------------------
// Opmath of the row kernels (softmax, layer_norm), ATen's: float when every
// floating operand is float32, float16 or bfloat16, double when one is
// float64. A kernel is instantiated for both; the float one's loads and
// stores know only the three narrow dtypes, so it runs no FP64 instruction.
// The cpu backend computes these rows in double: the two agree within
// rgpu-diff's per-dtype tolerances, not bitwise (as ATen's CPU and CUDA).

// A host-computed constant in the opmath: the kernel argument holds it both
// ways, so the float instantiation converts nothing from double.
template <typename T> __device__ T rf_pick(double d, float f);
template <> __device__ __forceinline__ double rf_pick<double>(double d, float) { return d; }
template <> __device__ __forceinline__ float rf_pick<float>(double, float f) { return f; }


// Row kernels: the group of this thread, its lane and size, its first row
// and the row step (grid-stride). Warp mode packs blockDim.x / 32 rows per block.
struct rf_group {
    long long row0, rstep;
    int lane, size;
};
template <bool BLK> __device__ __forceinline__ rf_group rf_group_of()
{
    rf_group g;
    if (BLK) {
        g.row0 = blockIdx.x; g.rstep = gridDim.x; g.lane = threadIdx.x; g.size = blockDim.x;
    } else {
        const int wpb = blockDim.x >> 5;
        g.row0 = (long long)blockIdx.x * wpb + (threadIdx.x >> 5);
        g.rstep = (long long)gridDim.x * wpb;
        g.lane = threadIdx.x & 31;
        g.size = 32;
    }
    return g;
}

// Rows up to this length go one warp per row; longer ones one block per row.
#define RF_WARP_ROW_MAX 1024
#define RF_ROW_THREADS 256
#define RF_MAX_GRID (1ll << 20)

// Grid for a row kernel over rows rows.
static inline unsigned rf_row_grid(long long rows, bool blk)
{
    long long b = blk ? rows : (rows + (RF_ROW_THREADS / 32) - 1) / (RF_ROW_THREADS / 32);
    if (b > RF_MAX_GRID) b = RF_MAX_GRID;
    if (b < 1) b = 1;
    return (unsigned)b;
}

// ---------------------------------------------------------------------------
// The family's other files (their exec functions run after rgpu_op_check_exec).
rgpu_status rgpu_cuda_red_softmax(rgpu_cuda_ctx *c, const rgpu_exec *e, bool is_log, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_softmax_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, bool is_log, char *err,
                                           size_t errlen);
rgpu_status rgpu_cuda_red_layer_norm(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_layer_norm_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_rms_norm(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_cross_entropy(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_cross_entropy_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_rms_norm_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_nll_loss(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_nll_loss_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_ctc_loss(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_ctc_loss_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
