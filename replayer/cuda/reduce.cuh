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

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>

extern "C" {
#include "cpu/cpu_reduce2.h"
}

#define RF_MAXD RGPU_MAX_DIMS

// One line into err, then return code (as the CPU's RETURN_ERROR).

// ---------------------------------------------------------------------------
// Host checks: the CPU reference's own (op_check_view, op_check_exec,
// op_numel, op_dtype_is_float from cpu_internal.h; r2_arg, R2K,
// r2_want_float, r2_want_shape, r2_wrap_dim from cpu_reduce2.h), so the
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

// ---------------------------------------------------------------------------
// Element conversions, mirrors of cpu_internal.h / half.h. NaN to f16 is
// sign|0x7E00 and to bf16 0x7FC0, as the CPU (CUDA's own rounding gives 0x7FFF).

__device__ __forceinline__ float rf_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float rf_bf2f(uint16_t b) { return __uint_as_float((unsigned)b << 16); }
__device__ __forceinline__ uint16_t rf_f2h(float f)
{
    if (f != f) return (uint16_t)(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u);
    return __half_as_ushort(__float2half_rn(f));
}
__device__ __forceinline__ uint16_t rf_f2bf(float f)
{
    if (f != f) return 0x7fc0u;
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

__device__ __forceinline__ long long rf_f64_to_i64_sat(double x)
{
    if (x != x) return 0;
    if (x >= 9223372036854775808.0) return INT64_MAX;
    if (x <= -9223372036854775808.0) return INT64_MIN;
    return (long long)x;
}
__device__ __forceinline__ double rf_clamp_trunc(double x, double lo, double hi)
{
    if (x != x) return 0.0;
    if (x < lo) return lo;
    if (x > hi) return hi;
    return x;
}

// Element i (element offset) of an array of dtype dt at p.
__device__ __forceinline__ double rf_ld_f64(const void *p, long long i, int dt)
{
    switch (dt) {
    case RGPU_F32:  return ((const float *)p)[i];
    case RGPU_F64:  return ((const double *)p)[i];
    case RGPU_F16:  return rf_h2f(((const uint16_t *)p)[i]);
    case RGPU_BF16: return rf_bf2f(((const uint16_t *)p)[i]);
    case RGPU_I64:  return (double)((const long long *)p)[i];
    case RGPU_I32:  return ((const int32_t *)p)[i];
    case RGPU_I16:  return ((const int16_t *)p)[i];
    case RGPU_I8:   return ((const int8_t *)p)[i];
    case RGPU_U8:   return ((const uint8_t *)p)[i];
    case RGPU_BOOL: return ((const uint8_t *)p)[i] != 0;
    default:        return 0.0;
    }
}

__device__ __forceinline__ float rf_ld_f32(const void *p, long long i, int dt)
{
    switch (dt) {
    case RGPU_F32:  return ((const float *)p)[i];
    case RGPU_F64:  return (float)((const double *)p)[i];
    case RGPU_F16:  return rf_h2f(((const uint16_t *)p)[i]);
    case RGPU_BF16: return rf_bf2f(((const uint16_t *)p)[i]);
    case RGPU_I64:  return (float)((const long long *)p)[i];
    case RGPU_I32:  return (float)((const int32_t *)p)[i];
    case RGPU_I16:  return ((const int16_t *)p)[i];
    case RGPU_I8:   return ((const int8_t *)p)[i];
    case RGPU_U8:   return ((const uint8_t *)p)[i];
    case RGPU_BOOL: return ((const uint8_t *)p)[i] != 0;
    default:        return 0.0f;
    }
}

// As int64 bits (floats truncated, clamped, NaN -> 0).
__device__ __forceinline__ unsigned long long rf_ld_u64(const void *p, long long i, int dt)
{
    switch (dt) {
    case RGPU_F32:  return (unsigned long long)rf_f64_to_i64_sat(((const float *)p)[i]);
    case RGPU_F64:  return (unsigned long long)rf_f64_to_i64_sat(((const double *)p)[i]);
    case RGPU_F16:  return (unsigned long long)rf_f64_to_i64_sat(rf_h2f(((const uint16_t *)p)[i]));
    case RGPU_BF16: return (unsigned long long)rf_f64_to_i64_sat(rf_bf2f(((const uint16_t *)p)[i]));
    case RGPU_I64:  return (unsigned long long)((const long long *)p)[i];
    case RGPU_I32:  return (unsigned long long)(long long)((const int32_t *)p)[i];
    case RGPU_I16:  return (unsigned long long)(long long)((const int16_t *)p)[i];
    case RGPU_I8:   return (unsigned long long)(long long)((const int8_t *)p)[i];
    case RGPU_U8:   return ((const uint8_t *)p)[i];
    case RGPU_BOOL: return ((const uint8_t *)p)[i] != 0;
    default:        return 0;
    }
}

__device__ __forceinline__ bool rf_ld_bool(const void *p, long long i, int dt)
{
    switch (dt) {
    case RGPU_F32:  return ((const float *)p)[i] != 0.0f;
    case RGPU_F64:  return ((const double *)p)[i] != 0.0;
    case RGPU_F16:
    case RGPU_BF16: return (((const uint16_t *)p)[i] & 0x7fffu) != 0;
    case RGPU_I64:  return ((const long long *)p)[i] != 0;
    case RGPU_I32:  return ((const int32_t *)p)[i] != 0;
    case RGPU_I16:  return ((const int16_t *)p)[i] != 0;
    case RGPU_I8:   return ((const int8_t *)p)[i] != 0;
    case RGPU_U8:
    case RGPU_BOOL: return ((const uint8_t *)p)[i] != 0;
    default:        return false;
    }
}

// A double into dtype dt (f16/bf16 via f32, as c10).
__device__ __forceinline__ void rf_st_f64(void *p, long long i, int dt, double v)
{
    switch (dt) {
    case RGPU_F32:  ((float *)p)[i] = (float)v; break;
    case RGPU_F64:  ((double *)p)[i] = v; break;
    case RGPU_F16:  ((uint16_t *)p)[i] = rf_f2h((float)v); break;
    case RGPU_BF16: ((uint16_t *)p)[i] = rf_f2bf((float)v); break;
    case RGPU_I64:  ((long long *)p)[i] = rf_f64_to_i64_sat(v); break;
    case RGPU_I32:  ((int32_t *)p)[i] = (int32_t)rf_clamp_trunc(v, -2147483648.0, 2147483647.0); break;
    case RGPU_I16:  ((int16_t *)p)[i] = (int16_t)rf_clamp_trunc(v, -32768.0, 32767.0); break;
    case RGPU_I8:   ((int8_t *)p)[i] = (int8_t)rf_clamp_trunc(v, -128.0, 127.0); break;
    case RGPU_U8:   ((uint8_t *)p)[i] = (uint8_t)(unsigned long long)rf_f64_to_i64_sat(v); break;
    case RGPU_BOOL: ((uint8_t *)p)[i] = v != 0.0; break;
    default: break;
    }
}

// A float computed in f32 opmath into dtype dt.
__device__ __forceinline__ void rf_st_f32(void *p, long long i, int dt, float v)
{
    switch (dt) {
    case RGPU_F32:  ((float *)p)[i] = v; break;
    case RGPU_F16:  ((uint16_t *)p)[i] = rf_f2h(v); break;
    case RGPU_BF16: ((uint16_t *)p)[i] = rf_f2bf(v); break;
    default:        rf_st_f64(p, i, dt, (double)v); break;
    }
}

// An int64 (its uint64 bits) into dtype dt: narrower ints wrap.
__device__ __forceinline__ void rf_st_u64(void *p, long long i, int dt, unsigned long long v)
{
    switch (dt) {
    case RGPU_F32:  ((float *)p)[i] = (float)(long long)v; break;
    case RGPU_F64:  ((double *)p)[i] = (double)(long long)v; break;
    case RGPU_F16:  ((uint16_t *)p)[i] = rf_f2h((float)(long long)v); break;
    case RGPU_BF16: ((uint16_t *)p)[i] = rf_f2bf((float)(long long)v); break;
    case RGPU_I64:  ((unsigned long long *)p)[i] = v; break;
    case RGPU_I32:  ((uint32_t *)p)[i] = (uint32_t)v; break;
    case RGPU_I16:  ((uint16_t *)p)[i] = (uint16_t)v; break;
    case RGPU_I8:
    case RGPU_U8:   ((uint8_t *)p)[i] = (uint8_t)v; break;
    case RGPU_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

__device__ __forceinline__ bool rf_dev_is_float(int dt)
{
    return dt == RGPU_F32 || dt == RGPU_F64 || dt == RGPU_F16 || dt == RGPU_BF16;
}

// ---------------------------------------------------------------------------
// Fixed-order group sums for the row kernels. A group is one warp (BLK false)
// or the whole block (BLK true; blockDim.x a multiple of 32, at most 1024).
// The xor butterfly leaves the same bits in every lane (a + b == b + a in
// IEEE), so every thread gets the identical result; the order depends only
// on the group size.

__device__ __forceinline__ double rf_warp_sum(double v)
{
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}

// max with NaN winning; equal values give the same bits both ways round
// (+0 over -0), so the butterfly stays identical across lanes.
__device__ __forceinline__ double rf_max_nan(double a, double b)
{
    if (a != a) return a;
    if (b != b) return b;
    if (a > b) return a;
    if (b > a) return b;
    return signbit(a) ? b : a;
}

__device__ __forceinline__ double rf_warp_max(double v)
{
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v = rf_max_nan(v, __shfl_xor_sync(0xffffffffu, v, m));
    return v;
}

// sh: 32 doubles of shared memory, used only when BLK.
template <bool BLK> __device__ __forceinline__ double rf_group_sum(double v, double *sh)
{
    v = rf_warp_sum(v);
    if (!BLK) return v;
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();   // sh may still be read by the previous call
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < nw ? sh[l] : 0.0;
    return rf_warp_sum(v);
}

template <bool BLK> __device__ __forceinline__ double rf_group_max(double v, double *sh)
{
    v = rf_warp_max(v);
    if (!BLK) return v;
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (l == 0) sh[w] = v;
    __syncthreads();
    v = l < nw ? sh[l] : -INFINITY;
    return rf_warp_max(v);
}

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
// The family's other files (their exec functions run after op_check_exec).
rgpu_status rgpu_cuda_red_softmax(rgpu_cuda_ctx *c, const rgpu_exec *e, bool is_log, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_softmax_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, bool is_log, char *err,
                                           size_t errlen);
rgpu_status rgpu_cuda_red_layer_norm(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_layer_norm_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_nll_loss(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_red_nll_loss_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
