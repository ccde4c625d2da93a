// index.cuh — private to the CUDA index family (index.cu, index_data.cu,
// random.cu): device element helpers mirroring replayer/cpu/cpu_internal.h,
// an N-d offset walker, launch helpers and the host helpers the three files
// share. The CPU reference (replayer/cpu/cpu_index*.c) defines the
// semantics; host-side argument and shape checks reuse its helpers from
// cpu_index.h (they only read view metadata), so messages match exactly.
#pragma once

#include "common.cuh"

#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cpu/cpu_index.h"
}

// Everything of the family lives in this namespace (the entry points,
// extern "C", are outside it).
namespace rgpu_ix {

// ---------------------------------------------------------------------------
// Launch shape: one-dimensional grids, capped, with grid-stride loops.
#define IX_THREADS 256
#define IX_MAX_BLOCKS 16384

static inline unsigned ix_blocks(long long n)
{
    long long b = (n + IX_THREADS - 1) / IX_THREADS;
    if (b < 1) b = 1;
    if (b > IX_MAX_BLOCKS) b = IX_MAX_BLOCKS;
    return (unsigned)b;
}

#define IX_FOR(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// ---------------------------------------------------------------------------
// f16 / bf16 <-> f32, the integer algorithms of replayer/cpu/half.h line by
// line (so NaN encodings match too: f16 NaN -> sign|0x7E00, bf16 -> 0x7FC0).
__device__ inline float ix_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0) {
        float v = __fmul_rn((float)m, 5.9604644775390625e-8f);   // exact
        return __uint_as_float(__float_as_uint(v) | sign);
    }
    if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

__device__ inline uint16_t ix_float_to_half(float f)
{
    uint32_t x = __float_as_uint(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) {
        uint32_t hv = (ax >> 13) - (112u << 10);
        uint32_t rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (hv & 1u))) hv++;
        return (uint16_t)(sign | hv);
    }
    uint32_t e = ax >> 23;
    if (e < 102) return (uint16_t)sign;
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;
    return (uint16_t)(sign | r);
}

__device__ inline float ix_bf16_to_float(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

__device__ inline uint16_t ix_float_to_bf16(float f)
{
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    uint32_t bias = 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)((x + bias) >> 16);
}

// ---------------------------------------------------------------------------
// Elements, as cpu_internal.h (float -> int truncates and clamps, NaN -> 0;
// int -> narrower int wraps; f16/bf16 through f32).
__device__ inline int64_t ix_f64_to_i64_sat(double x)
{
    if (x != x) return 0;
    if (x >= 9223372036854775808.0) return INT64_MAX;
    if (x <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)x;
}

__device__ inline double ix_clamp_trunc(double x, double lo, double hi)
{
    if (x != x) return 0.0;
    if (x < lo) return lo;
    if (x > hi) return hi;
    return x;
}

__device__ inline double ix_load_f64(const char *p, int dt)
{
    switch (dt) {
    case RGPU_F32:  return *(const float *)p;
    case RGPU_F64:  return *(const double *)p;
    case RGPU_F16:  return ix_half_to_float(*(const uint16_t *)p);
    case RGPU_BF16: return ix_bf16_to_float(*(const uint16_t *)p);
    case RGPU_I64:  return (double)*(const int64_t *)p;
    case RGPU_I32:  return *(const int32_t *)p;
    case RGPU_I16:  return *(const int16_t *)p;
    case RGPU_I8:   return *(const int8_t *)p;
    case RGPU_U8:   return *(const uint8_t *)p;
    case RGPU_BOOL: return *(const uint8_t *)p != 0;
    default:        return 0.0;
    }
}

__device__ inline float ix_load_f32(const char *p, int dt)
{
    switch (dt) {
    case RGPU_F32:  return *(const float *)p;
    case RGPU_F64:  return (float)*(const double *)p;
    case RGPU_F16:  return ix_half_to_float(*(const uint16_t *)p);
    case RGPU_BF16: return ix_bf16_to_float(*(const uint16_t *)p);
    case RGPU_I64:  return (float)*(const int64_t *)p;
    case RGPU_I32:  return (float)*(const int32_t *)p;
    case RGPU_I16:  return *(const int16_t *)p;
    case RGPU_I8:   return *(const int8_t *)p;
    case RGPU_U8:   return *(const uint8_t *)p;
    case RGPU_BOOL: return *(const uint8_t *)p != 0;
    default:        return 0.0f;
    }
}

__device__ inline uint64_t ix_load_u64(const char *p, int dt)
{
    switch (dt) {
    case RGPU_F32:  return (uint64_t)ix_f64_to_i64_sat(*(const float *)p);
    case RGPU_F64:  return (uint64_t)ix_f64_to_i64_sat(*(const double *)p);
    case RGPU_F16:  return (uint64_t)ix_f64_to_i64_sat(ix_half_to_float(*(const uint16_t *)p));
    case RGPU_BF16: return (uint64_t)ix_f64_to_i64_sat(ix_bf16_to_float(*(const uint16_t *)p));
    case RGPU_I64:  return (uint64_t)*(const int64_t *)p;
    case RGPU_I32:  return (uint64_t)(int64_t)*(const int32_t *)p;
    case RGPU_I16:  return (uint64_t)(int64_t)*(const int16_t *)p;
    case RGPU_I8:   return (uint64_t)(int64_t)*(const int8_t *)p;
    case RGPU_U8:   return *(const uint8_t *)p;
    case RGPU_BOOL: return *(const uint8_t *)p != 0;
    default:        return 0;
    }
}

__device__ inline bool ix_load_bool(const char *p, int dt)
{
    switch (dt) {
    case RGPU_F32:  return *(const float *)p != 0.0f;
    case RGPU_F64:  return *(const double *)p != 0.0;
    case RGPU_F16:  return (*(const uint16_t *)p & 0x7fffu) != 0;
    case RGPU_BF16: return (*(const uint16_t *)p & 0x7fffu) != 0;
    case RGPU_I64:  return *(const int64_t *)p != 0;
    case RGPU_I32:  return *(const int32_t *)p != 0;
    case RGPU_I16:  return *(const int16_t *)p != 0;
    case RGPU_I8:   return *(const int8_t *)p != 0;
    case RGPU_U8:   return *(const uint8_t *)p != 0;
    case RGPU_BOOL: return *(const uint8_t *)p != 0;
    default:        return false;
    }
}

__device__ inline void ix_store_f64(char *p, int dt, double v)
{
    switch (dt) {
    case RGPU_F32:  *(float *)p = (float)v; break;
    case RGPU_F64:  *(double *)p = v; break;
    case RGPU_F16:  *(uint16_t *)p = ix_float_to_half((float)v); break;
    case RGPU_BF16: *(uint16_t *)p = ix_float_to_bf16((float)v); break;
    case RGPU_I64:  *(int64_t *)p = ix_f64_to_i64_sat(v); break;
    case RGPU_I32:  *(int32_t *)p = (int32_t)ix_clamp_trunc(v, -2147483648.0, 2147483647.0); break;
    case RGPU_I16:  *(int16_t *)p = (int16_t)ix_clamp_trunc(v, -32768.0, 32767.0); break;
    case RGPU_I8:   *(int8_t *)p = (int8_t)ix_clamp_trunc(v, -128.0, 127.0); break;
    case RGPU_U8:   *(uint8_t *)p = (uint8_t)(uint64_t)ix_f64_to_i64_sat(v); break;
    case RGPU_BOOL: *(uint8_t *)p = v != 0.0; break;
    default: break;
    }
}

__device__ inline void ix_store_f32(char *p, int dt, float v)
{
    switch (dt) {
    case RGPU_F32:  *(float *)p = v; break;
    case RGPU_F16:  *(uint16_t *)p = ix_float_to_half(v); break;
    case RGPU_BF16: *(uint16_t *)p = ix_float_to_bf16(v); break;
    default:        ix_store_f64(p, dt, v); break;
    }
}

__device__ inline void ix_store_u64(char *p, int dt, uint64_t v)
{
    switch (dt) {
    case RGPU_F32:  *(float *)p = (float)(int64_t)v; break;
    case RGPU_F64:  *(double *)p = (double)(int64_t)v; break;
    case RGPU_F16:  *(uint16_t *)p = ix_float_to_half((float)(int64_t)v); break;
    case RGPU_BF16: *(uint16_t *)p = ix_float_to_bf16((float)(int64_t)v); break;
    case RGPU_I64:  *(uint64_t *)p = v; break;
    case RGPU_I32:  *(uint32_t *)p = (uint32_t)v; break;
    case RGPU_I16:  *(uint16_t *)p = (uint16_t)v; break;
    case RGPU_I8:
    case RGPU_U8:   *(uint8_t *)p = (uint8_t)v; break;
    case RGPU_BOOL: *(uint8_t *)p = v != 0; break;
    default: break;
    }
}

// v rounded to dtype dt (an f32 opmath value of an f16/bf16 tensor).
__device__ inline float ix_round_to(int dt, float v)
{
    if (dt == RGPU_F16) return ix_half_to_float(ix_float_to_half(v));
    if (dt == RGPU_BF16) return ix_bf16_to_float(ix_float_to_bf16(v));
    return v;
}

__device__ inline void ix_elem_copy(char *d, const char *s, int esz)
{
    switch (esz) {
    case 1: *(uint8_t *)d = *(const uint8_t *)s; break;
    case 2: *(uint16_t *)d = *(const uint16_t *)s; break;
    case 4: *(uint32_t *)d = *(const uint32_t *)s; break;
    default: *(uint64_t *)d = *(const uint64_t *)s; break;
    }
}

// Element size of a dtype, in device code.
__device__ inline int ix_esz(int dt)
{
    switch (dt) {
    case RGPU_F64: case RGPU_I64: return 8;
    case RGPU_F32: case RGPU_I32: return 4;
    case RGPU_F16: case RGPU_BF16: case RGPU_I16: return 2;
    default: return 1;
    }
}

__device__ inline bool ix_is_float(int dt)
{
    return dt == RGPU_F32 || dt == RGPU_F64 || dt == RGPU_F16 || dt == RGPU_BF16;
}

// d (dtype ddt) = s (dtype sdt), cast as copy_ does (idx_elem_convert).
__device__ inline void ix_elem_convert(char *d, int ddt, const char *s, int sdt, int desz)
{
    if (ddt == sdt) ix_elem_copy(d, s, desz);
    else if (ix_is_float(sdt)) ix_store_f64(d, ddt, ix_load_f64(s, sdt));
    else ix_store_u64(d, ddt, ix_load_u64(s, sdt));
}

// An index element (i64 or i32).
__device__ inline int64_t ix_load_index(const char *p, int dt)
{
    return dt == RGPU_I32 ? (int64_t)*(const int32_t *)p : *(const int64_t *)p;
}

// ---------------------------------------------------------------------------
// N-d walker: row-major decomposition of a linear index over sz[0..nd),
// giving up to IX_NW byte offsets (one per stride set). Set from the host;
// passed to kernels by value.
#define IX_NW 4

struct ix_walk {
    int nd;
    long long sz[RGPU_MAX_DIMS];
    long long st[IX_NW][RGPU_MAX_DIMS];   // bytes
};

static inline void ix_walk_init(ix_walk *w, int nd, const int64_t *sizes)
{
    memset(w, 0, sizeof *w);
    w->nd = nd;
    for (int d = 0; d < nd; d++) w->sz[d] = sizes[d];
}

// Stride set k from a view's element strides (bytes), over its first
// min(v->ndim, nd) dims; the rest stay 0 (as idx_walk_strides).
static inline void ix_walk_strides(ix_walk *w, int k, const rgpu_view *v)
{
    long long esz = (long long)rgpu_dtype_size(v->dtype);
    for (int d = 0; d < v->ndim && d < w->nd; d++) w->st[k][d] = v->strides[d] * esz;
}

static inline long long ix_walk_numel(const ix_walk *w)
{
    long long n = 1;
    for (int d = 0; d < w->nd; d++) n *= w->sz[d];
    return n;
}

__device__ inline void ix_walk_at(const ix_walk &w, long long i, long long off[IX_NW])
{
    for (int k = 0; k < IX_NW; k++) off[k] = 0;
    for (int d = w.nd - 1; d >= 0; d--) {
        long long s = w.sz[d];
        long long c = i % s;
        i /= s;
        for (int k = 0; k < IX_NW; k++) off[k] += c * w.st[k][d];
    }
}

// As ix_walk_at, also returning the coordinate of dim `dim`.
__device__ inline long long ix_walk_at_dim(const ix_walk &w, long long i, long long off[IX_NW], int dim)
{
    long long cd = 0;
    for (int k = 0; k < IX_NW; k++) off[k] = 0;
    for (int d = w.nd - 1; d >= 0; d--) {
        long long s = w.sz[d];
        long long c = i % s;
        i /= s;
        if (d == dim) cd = c;
        for (int k = 0; k < IX_NW; k++) off[k] += c * w.st[k][d];
    }
    return cd;
}

// Host: byte offset of linear index i over sizes with byte strides st.
static inline long long ix_host_offset(int nd, const long long *sz, const long long *st, long long i)
{
    long long off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (i % sz[d]) * st[d];
        i /= sz[d];
    }
    return off;
}

// ---------------------------------------------------------------------------
// Accumulation modes, as cpu_index.h's idx_alpha / idx_elem_reduce.
struct ix_alpha {
    int one, round_prod, fused, b;
    float f;
    double d;
    uint64_t i;
};

static inline ix_alpha ix_alpha_of(const idx_alpha *a)
{
    ix_alpha r;
    r.one = a->one; r.round_prod = a->round_prod; r.fused = a->fused; r.b = a->b;
    r.f = a->f; r.d = a->d; r.i = a->i;
    return r;
}

static inline ix_alpha ix_alpha_one(void)
{
    idx_alpha a = idx_alpha_one();
    return ix_alpha_of(&a);
}

// x (f32 opmath of dtype dt) after one reduce step with y; not yet rounded
// to dt. No contraction: every product and sum rounds once (CPU: -std=c11
// means -ffp-contract=off), fmaf only where the CPU calls fmaf.
__device__ inline float ix_step_f32(float x, float y, int dt, int mode, const ix_alpha &a)
{
    if (mode == IDX_MUL) return __fmul_rn(x, y);
    if (a.one) return __fadd_rn(x, y);
    if (a.round_prod) return __fadd_rn(x, ix_round_to(dt, __fmul_rn(y, a.f)));
    if (a.fused) return __fmaf_rn(a.f, y, x);
    return __fadd_rn(x, __fmul_rn(a.f, y));
}

__device__ inline double ix_step_f64(double x, double y, int mode, const ix_alpha &a)
{
    if (mode == IDX_MUL) return __dmul_rn(x, y);
    if (a.one) return __dadd_rn(x, y);
    if (a.fused) return __fma_rn(a.d, y, x);
    return __dadd_rn(x, __dmul_rn(a.d, y));
}

// *d (op)= *s in place, both of dtype dt (idx_elem_reduce).
__device__ inline void ix_elem_reduce(char *d, const char *s, int dt, int mode, const ix_alpha &a)
{
    if (mode == IDX_ASSIGN) { ix_elem_copy(d, s, ix_esz(dt)); return; }
    switch (dt) {
    case RGPU_F32: case RGPU_F16: case RGPU_BF16:
        ix_store_f32(d, dt, ix_step_f32(ix_load_f32(d, dt), ix_load_f32(s, dt), dt, mode, a));
        break;
    case RGPU_F64:
        *(double *)d = ix_step_f64(*(const double *)d, *(const double *)s, mode, a);
        break;
    case RGPU_BOOL: {
        bool x = *(const uint8_t *)d != 0, y = *(const uint8_t *)s != 0;
        *(uint8_t *)d = mode == IDX_MUL ? (x && y) : (x || (a.b && y));
        break;
    }
    default: {
        uint64_t x = ix_load_u64(d, dt), y = ix_load_u64(s, dt);
        x = mode == IDX_MUL ? x * y : x + a.i * y;
        ix_store_u64(d, dt, x);
        break;
    }
    }
}

// ---------------------------------------------------------------------------
// Host helpers shared by the family (defined in index.cu).

// Device scratch freed when the holder goes out of scope (on every path).
struct ix_scratch {
    rgpu_cuda_ctx *c;
    void *p;
    explicit ix_scratch(rgpu_cuda_ctx *ctx) : c(ctx), p(NULL) {}
    ~ix_scratch() { if (p) rgpu_cuda_scratch_free(c, p); }
    void *get(size_t n) { p = rgpu_cuda_scratch(c, n); return p; }
    ix_scratch(const ix_scratch &) = delete;
    ix_scratch &operator=(const ix_scratch &) = delete;
};

// `type ptr` = scratch of nbytes from holder, or fail with RGPU_ERR_NOMEM.
#define IX_SCRATCH(holder, ptr, type, nbytes, what)                                      \
    type ptr = (type)(holder).get(nbytes);                                               \
    if (ptr == NULL)                                                                     \
        RETURN_ERROR(RGPU_ERR_NOMEM, "out of device memory for %s (%llu bytes)", what,       \
                 (unsigned long long)(nbytes))

// n bytes of device memory at src into host dst, in stream order, waiting
// for them.
static inline cudaError_t ix_read_back(rgpu_cuda_ctx *c, void *dst, const void *src, size_t n)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream);
    return e != cudaSuccess ? e : cudaStreamSynchronize(c->stream);
}

// Host memory freed when the holder goes out of scope.
struct ix_host {
    void *p;
    ix_host() : p(NULL) {}
    ~ix_host() { free(p); }
    void *get(size_t n) { p = malloc(n ? n : 1); return p; }
    ix_host(const ix_host &) = delete;
    ix_host &operator=(const ix_host &) = delete;
};

// Looks for an index outside [lo, hi) (skipping the value `skip` when
// has_skip) among the elements of the view ix walked over (nd, sizes) in
// row-major order (ix's strides on its first min(ndim, nd) dims, 0 beyond,
// as the CPU's walker). *found tells; *value is the first bad one in that
// order. Synchronises the stream.
rgpu_status ix_find_bad_index(rgpu_cuda_ctx *c, const rgpu_view *ix, int nd, const int64_t *sizes,
                              int64_t lo, int64_t hi, bool has_skip, int64_t skip,
                              bool *found, int64_t *value, char *err, size_t errlen);

// dst = src elementwise over dst's shape (same shape; dtype cast when they
// differ), on the stream.
rgpu_status ix_copy_view(rgpu_cuda_ctx *c, const rgpu_view *dst, const rgpu_view *src, char *err, size_t errlen);

// Every element of dst = the esz-byte value at val (host memory).
rgpu_status ix_fill_view(rgpu_cuda_ctx *c, const rgpu_view *dst, const void *val, char *err, size_t errlen);

// A host array of numel(dst) elements of dst's dtype, row-major, written
// into dst's strided layout. Synchronises the stream (host may be reused).
rgpu_status ix_upload_view(rgpu_cuda_ctx *c, const rgpu_view *dst, const void *host, char *err, size_t errlen);

// The elements of v, row-major, packed into host memory (numel * esz bytes,
// v's dtype). Synchronises the stream.
rgpu_status ix_download_view(rgpu_cuda_ctx *c, const rgpu_view *v, void *host, char *err, size_t errlen);

// Per-file entry points (dispatched from index.cu).
rgpu_status ix_cat(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_pad(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_count_nonzero(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_nonzero(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_masked_select(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_unique(rgpu_cuda_ctx *c, const rgpu_exec *e, bool count_only, char *err, size_t errlen);
rgpu_status ix_random(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_dropout(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_dropout_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);

}  // namespace rgpu_ix
