// copy.cu — the "copy" family: COPY (copy_: src broadcast to dst, any
// strides, cast between all 10 dtypes), FULL (fill) and ARANGE.
//
// Mirrors replayer/cpu/cpu_kernels.c (op_copy, op_full, op_arange) and the
// conversions of replayer/cpu/cpu_internal.h + half.h bit for bit:
//   float -> signed int: truncate, clamp to range, NaN -> 0
//   float -> u8: truncate to int64 (clamped), then wrap mod 256
//   int -> narrower int: wrap; x -> bool: x != 0 (NaN -> true)
//   float sources go through double, int/bool sources through int64;
//   anything -> f16/bf16 rounds via f32 (round to nearest even; NaN -> c10's
//   canonical NaN: f16 sign|0x7E00, bf16 0x7FC0)
// Validation and messages are the CPU kernel's.
//
// Layout: the operands are reduced by rgpu_op_iter_init (dims ordered by the
// output's strides, size-1 dims dropped, mergeable dims coalesced), then one
// thread per output element (grid-stride). Contiguous same-dtype copies are a
// cudaMemcpyAsync; contiguous fills of a byte pattern a cudaMemsetAsync.
#include "common.cuh"
#include "convert.cuh"
#include "op/iter.h"

#include <stdarg.h>
#include <string.h>

// ---------------------------------------------------------------------------
// Elements: convert.cuh (op/dtype.h's casts) with the dtype a template
// argument, so each (source, destination) pair compiles to its own loop.

template <int DT> __host__ __device__ static constexpr bool is_float_dt() {
    return DT == RGPU_F32 || DT == RGPU_F64 || DT == RGPU_F16 || DT == RGPU_BF16;
}

// Runtime dtype -> template argument.
#define COPY_EACH_DTYPE(dt, STMT) do { switch (dt) {                       \
    case RGPU_F32:  { constexpr int DT_ = RGPU_F32;  STMT; } break;         \
    case RGPU_F64:  { constexpr int DT_ = RGPU_F64;  STMT; } break;         \
    case RGPU_F16:  { constexpr int DT_ = RGPU_F16;  STMT; } break;         \
    case RGPU_BF16: { constexpr int DT_ = RGPU_BF16; STMT; } break;         \
    case RGPU_I64:  { constexpr int DT_ = RGPU_I64;  STMT; } break;         \
    case RGPU_I32:  { constexpr int DT_ = RGPU_I32;  STMT; } break;         \
    case RGPU_I16:  { constexpr int DT_ = RGPU_I16;  STMT; } break;         \
    case RGPU_I8:   { constexpr int DT_ = RGPU_I8;   STMT; } break;         \
    case RGPU_U8:   { constexpr int DT_ = RGPU_U8;   STMT; } break;         \
    case RGPU_BOOL: { constexpr int DT_ = RGPU_BOOL; STMT; } break;         \
    case RGPU_C64:  { constexpr int DT_ = RGPU_C64;  STMT; } break;         \
    case RGPU_C128: { constexpr int DT_ = RGPU_C128; STMT; } break;         \
    case RGPU_C32:  { constexpr int DT_ = RGPU_C32;  STMT; } break;         \
    default: break; } } while (0)

template <int DT> __host__ __device__ static constexpr bool is_complex_dt() {
    return DT == RGPU_C64 || DT == RGPU_C128 || DT == RGPU_C32;
}

// A 16-byte element (complex128), moved as one.
struct alignas(16) elem16 { unsigned long long lo, hi; };

// ---------------------------------------------------------------------------
// The reduced iteration space (rgpu_op_iter_init's, with at most one input), strides
// in elements of each operand. zmask: dims where the output's stride is 0
// (an expanded output): only the last index along them writes, so the value
// that lands is the one the CPU's in-order loop writes last.

struct copy_iter {
    int ndim;
    unsigned zmask;
    long long numel;
    long long sizes[RGPU_MAX_DIMS];
    long long ostr[RGPU_MAX_DIMS];
    long long istr[RGPU_MAX_DIMS];
    bool i32;                            // numel < 2^31: 32-bit index math (rgpu_fastdiv)
    unsigned dmul[RGPU_MAX_DIMS];
    unsigned char dshift[RGPU_MAX_DIMS];
};

static rgpu_status iter_init(copy_iter *it, const rgpu_view *out, const rgpu_view *in, int op, char *err,
                             size_t errlen) {
    op_iter oi;
    op_operand src = { in, NULL, 0 };
    FORWARD_IF_ERROR(rgpu_op_iter_init(&oi, out, &src, in ? 1 : 0, op, err, errlen));
    // op_iter's strides are bytes; the kernels index typed elements
    long long oes = (long long)rgpu_dtype_size(out->dtype), ies = in ? (long long)rgpu_dtype_size(in->dtype) : 1;
    it->ndim = oi.ndim;
    it->numel = oi.numel;
    it->zmask = 0;
    for (int d = 0; d < oi.ndim; d++) {
        it->sizes[d] = oi.sizes[d];
        it->ostr[d] = oi.strides[0][d] / oes;
        it->istr[d] = in ? oi.strides[1][d] / ies : 0;
        if (it->ostr[d] == 0 && it->sizes[d] > 1) it->zmask |= 1u << d;
    }
    it->i32 = it->ndim > 1 && it->numel > 0 && it->numel < (1LL << 31);
    if (it->i32)
        for (int d = 0; d < it->ndim; d++) rgpu_fastdiv_init((unsigned long long)it->sizes[d], &it->dmul[d], &it->dshift[d]);
    return RGPU_OK;
}

// Offsets of linear index i (row-major over it.sizes); false when this
// element must not write (not the last along a zero-stride output dim).
__host__ __device__ static inline bool iter_offsets(const copy_iter &it, long long i, long long &oo, long long &io) {
    oo = 0; io = 0;
    bool write = true;
    if (it.i32) {
        unsigned rem = (unsigned)i;
        for (int d = it.ndim - 1; d >= 0; d--) {
            long long idx = rgpu_fastdiv_digit(rem, it.dmul[d], it.dshift[d], (unsigned)it.sizes[d]);
            oo += idx * it.ostr[d];
            io += idx * it.istr[d];
            if (((it.zmask >> d) & 1u) && idx != it.sizes[d] - 1) write = false;
        }
        return write;
    }
    for (int d = it.ndim - 1; d >= 0; d--) {
        long long s = it.sizes[d];
        long long idx = i % s;
        i /= s;
        oo += idx * it.ostr[d];
        io += idx * it.istr[d];
        if (((it.zmask >> d) & 1u) && idx != s - 1) write = false;
    }
    return write;
}

static const int THREADS = 256;
static unsigned grid_for(long long n) {
    long long b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

// ---------------------------------------------------------------------------
// Kernels

// Same dtype: move T-sized elements.
template <typename T>
__global__ void move_kernel(T *out, const T *in, copy_iter it) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < it.numel;
         i += (long long)gridDim.x * blockDim.x) {
        long long oo, io;
        if (iter_offsets(it, i, oo, io)) out[oo] = in[io];
    }
}

// Cast SD -> DD: float32/float16/bfloat16 sources through float (exact; the
// integer saturation of op_store_f32 gives op_store_f64's values), float64
// ones and float64 targets through double, the rest through int64.
template <int DD, int SD>
__global__ void cast_kernel(void *out, const void *in, copy_iter it) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < it.numel;
         i += (long long)gridDim.x * blockDim.x) {
        long long oo, io;
        if (!iter_offsets(it, i, oo, io)) continue;
        if constexpr (is_complex_dt<SD>() || is_complex_dt<DD>())
            op_elem_convert((char *)out + oo * op_dtype_esize(DD), DD, (const char *)in + io * op_dtype_esize(SD), SD);
        else if constexpr (is_float_dt<SD>() && SD != RGPU_F64 && DD != RGPU_F64)   // f32/f16/bf16: exact in float
            cvt_st_f32<DD>(out, oo, cvt_ld_f32(in, io, SD));
        else if constexpr (is_float_dt<SD>()) cvt_st_f64<DD>(out, oo, cvt_ld_f64<SD>(in, io));
        else cvt_st_u64<DD>(out, oo, cvt_ld_u64<SD>(in, io));
    }
}

template <typename T>
__global__ void fill_kernel(T *out, T v, copy_iter it) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < it.numel;
         i += (long long)gridDim.x * blockDim.x) {
        long long oo, io;
        iter_offsets(it, i, oo, io);   // all writes are the same value: no need to skip
        out[oo] = v;
    }
}

// ARANGE, one mode per dtype group (see op_arange): int64 wrapping for
// integers, float for f16/bf16, double for f32/f64. No FMA contraction.
template <int DT>
__global__ void arange_int_kernel(void *out, long long n, long long os, uint64_t start, uint64_t step) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        cvt_st_u64<DT>(out, i * os, start + step * (uint64_t)i);
}
template <int DT>
__global__ void arange_f32_kernel(void *out, long long n, long long os, float start, float step) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        cvt_st_f32<DT>(out, i * os, __fadd_rn(start, __fmul_rn(step, (float)i)));
}
template <int DT>
__global__ void arange_f64_kernel(void *out, long long n, long long os, double start, double step) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        cvt_st_f64<DT>(out, i * os, __dadd_rn(start, __dmul_rn(step, (double)i)));
}

// ---------------------------------------------------------------------------
// Launchers (take the stream)

static rgpu_status launch_move(void *out, const void *in, size_t esz, const copy_iter &it, cudaStream_t s,
                               char *err, size_t errlen) {
    unsigned g = grid_for(it.numel);
    switch (esz) {
    case 1: move_kernel<uint8_t><<<g, THREADS, 0, s>>>((uint8_t *)out, (const uint8_t *)in, it); break;
    case 2: move_kernel<uint16_t><<<g, THREADS, 0, s>>>((uint16_t *)out, (const uint16_t *)in, it); break;
    case 4: move_kernel<uint32_t><<<g, THREADS, 0, s>>>((uint32_t *)out, (const uint32_t *)in, it); break;
    case 16: move_kernel<elem16><<<g, THREADS, 0, s>>>((elem16 *)out, (const elem16 *)in, it); break;
    default: move_kernel<uint64_t><<<g, THREADS, 0, s>>>((uint64_t *)out, (const uint64_t *)in, it); break;
    }
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

template <int DD>
static void launch_cast_to(void *out, const void *in, int sd, const copy_iter &it, cudaStream_t s) {
    unsigned g = grid_for(it.numel);
    // (sd == DD never gets here: same-dtype copies move bytes)
    COPY_EACH_DTYPE(sd, if constexpr (DD != DT_) (cast_kernel<DD, DT_><<<g, THREADS, 0, s>>>(out, in, it)));
}

static rgpu_status launch_cast(void *out, int dd, const void *in, int sd, const copy_iter &it, cudaStream_t s,
                               char *err, size_t errlen) {
    COPY_EACH_DTYPE(dd, launch_cast_to<DT_>(out, in, sd, it, s));
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// Ops

static rgpu_status op_copy(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen) {
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    copy_iter it;
    FORWARD_IF_ERROR(iter_init(&it, out, in, e->op, err, errlen));
    if (it.numel == 0) return RGPU_OK;
    int dd = out->dtype, sd = in->dtype;
    if (dd != sd && it.ndim == 1 && it.zmask == 0) {   // held with the pointwise records (common.cuh)
        bool done;
        FORWARD_IF_ERROR(rgpu_cuda_pw_cast(c, out->data, dd, it.ostr[0] * (long long)rgpu_dtype_size(dd), in->data, sd,
                                           it.istr[0] * (long long)rgpu_dtype_size(sd), it.numel, &done, err, errlen));
        if (done) return RGPU_OK;
    }
    FORWARD_IF_ERROR(rgpu_cuda_pw_flush(c, err, errlen));   // everything else runs after the held records
    if (dd != sd) return launch_cast(out->data, dd, in->data, sd, it, c->stream, err, errlen);

    size_t esz = rgpu_dtype_size(dd);
    if (it.ndim == 1 && it.ostr[0] == 1 && it.istr[0] == 1) {   // contiguous both: one memcpy
        size_t n = (size_t)it.numel * esz;
        const char *src = (const char *)in->data;
        char *dst = (char *)out->data;
        if (src == dst) return RGPU_OK;
        if (src < dst + n && dst < src + n) {                    // overlapping (memmove semantics)
            void *tmp = rgpu_cuda_scratch(c, n);
            if (!tmp) RETURN_ERROR(RGPU_ERR_NOMEM, "copy_: no device memory for a %zu-byte overlap buffer", n);
            cudaError_t ce = cudaMemcpyAsync(tmp, src, n, cudaMemcpyDeviceToDevice, c->stream);
            if (ce == cudaSuccess) ce = cudaMemcpyAsync(dst, tmp, n, cudaMemcpyDeviceToDevice, c->stream);
            rgpu_cuda_scratch_free(c, tmp);   // stream-ordered: safe right after the copies
            if (ce != cudaSuccess)
                RETURN_ERROR(ce == cudaErrorMemoryAllocation ? RGPU_ERR_NOMEM : RGPU_ERR_EXEC,
                     "copy_: cudaMemcpyAsync (overlapping %zu bytes, via a buffer): %s", n, cudaGetErrorString(ce));
            return RGPU_OK;
        }
        RGPU_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->stream), err, errlen);
        return RGPU_OK;
    }
    return launch_move(out->data, in->data, esz, it, c->stream, err, errlen);
}

static rgpu_status op_full(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen) {
    FORWARD_IF_ERROR(rgpu_op_check_scalar_arg(e, 0, "value", err, errlen));
    rgpu_view *out = e->out[0];
    uint64_t vals[2] = { 0, 0 };   // element bytes in the low end (little-endian)
    rgpu_op_scalar_to(&e->args[0], out->dtype, vals);
    uint64_t val = vals[0];
    size_t esz = rgpu_dtype_size(out->dtype);
    copy_iter it;
    FORWARD_IF_ERROR(iter_init(&it, out, NULL, e->op, err, errlen));
    if (it.numel == 0) return RGPU_OK;
    cudaStream_t s = c->stream;
    if (it.ndim == 1 && it.ostr[0] == 1) {
        // one byte repeated (zeros, bool, 8-bit types): a memset
        const uint8_t *b = (const uint8_t *)vals;
        bool same = true;
        for (size_t k = 1; k < esz; k++) same = same && b[k] == b[0];
        if (same) {
            RGPU_CUDA_TRY(cudaMemsetAsync(out->data, b[0], (size_t)it.numel * esz, s), err, errlen);
            return RGPU_OK;
        }
    }
    unsigned g = grid_for(it.numel);
    switch (esz) {
    case 1: fill_kernel<uint8_t><<<g, THREADS, 0, s>>>((uint8_t *)out->data, (uint8_t)val, it); break;
    case 2: fill_kernel<uint16_t><<<g, THREADS, 0, s>>>((uint16_t *)out->data, (uint16_t)val, it); break;
    case 4: fill_kernel<uint32_t><<<g, THREADS, 0, s>>>((uint32_t *)out->data, (uint32_t)val, it); break;
    case 16: fill_kernel<elem16><<<g, THREADS, 0, s>>>((elem16 *)out->data, elem16{ vals[0], vals[1] }, it); break;
    default: fill_kernel<uint64_t><<<g, THREADS, 0, s>>>((uint64_t *)out->data, val, it); break;
    }
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

static rgpu_status op_arange(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen) {
    for (int i = 0; i < 2; i++) {
        FORWARD_IF_ERROR(rgpu_op_check_scalar_arg(e, i, i ? "step" : "start", err, errlen));
        if (e->args[i].kind == RGPU_ARG_BOOL) RETURN_ERROR(RGPU_ERR_BAD_ARG, "arange: arg %d is a bool, want int or float", i);
    }
    rgpu_view *out = e->out[0];
    if (out->ndim != 1) RETURN_ERROR(RGPU_ERR_SHAPE, "arange: out has %d dims, want 1", out->ndim);
    const rgpu_arg *a0 = &e->args[0], *a1 = &e->args[1];
    int dt = out->dtype;
    long long n = out->sizes[0], os = out->strides[0];
    void *o = out->data;
    cudaStream_t s = c->stream;
    unsigned g = grid_for(n);
    bool isf = dt == RGPU_F32 || dt == RGPU_F64 || dt == RGPU_F16 || dt == RGPU_BF16;
    if (!isf && dt != RGPU_BOOL) {
        uint64_t start = (uint64_t)(a0->kind == RGPU_ARG_FLOAT ? op_f64_to_i64_sat(a0->v.f) : a0->v.i);
        uint64_t step = (uint64_t)(a1->kind == RGPU_ARG_FLOAT ? op_f64_to_i64_sat(a1->v.f) : a1->v.i);
        if (n == 0) return RGPU_OK;
        COPY_EACH_DTYPE(dt, (arange_int_kernel<DT_><<<g, THREADS, 0, s>>>(o, n, os, start, step)));
    } else if (dt == RGPU_F16 || dt == RGPU_BF16) {
        float start = a0->kind == RGPU_ARG_FLOAT ? (float)a0->v.f : (float)a0->v.i;
        float step = a1->kind == RGPU_ARG_FLOAT ? (float)a1->v.f : (float)a1->v.i;
        if (n == 0) return RGPU_OK;
        if (dt == RGPU_F16) arange_f32_kernel<RGPU_F16><<<g, THREADS, 0, s>>>(o, n, os, start, step);
        else arange_f32_kernel<RGPU_BF16><<<g, THREADS, 0, s>>>(o, n, os, start, step);
    } else if (dt == RGPU_BOOL) {
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "arange: bool output is not supported (ATen rejects it)");
    } else {
        double start = a0->kind == RGPU_ARG_FLOAT ? a0->v.f : (double)a0->v.i;
        double step = a1->kind == RGPU_ARG_FLOAT ? a1->v.f : (double)a1->v.i;
        if (n == 0) return RGPU_OK;
        if (dt == RGPU_F32) arange_f64_kernel<RGPU_F32><<<g, THREADS, 0, s>>>(o, n, os, start, step);
        else arange_f64_kernel<RGPU_F64><<<g, THREADS, 0, s>>>(o, n, os, start, step);
    }
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// Family entry points

extern "C" rgpu_status rgpu_cuda_copy_exec(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (e->n_in < 0 || e->n_in > RGPU_MAX_IN || e->n_out < 0 || e->n_out > RGPU_MAX_OUT || e->n_args < 0)
        RETURN_ERROR(RGPU_ERR_ARITY, "%s: bad counts (%d in, %d out, %d args)", rgpu_op_name(e->op), e->n_in, e->n_out,
             e->n_args);
    switch (e->op) {
    case RGPU_OP_FULL:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, false, err, errlen));
        return op_full(c, e, err, errlen);
    case RGPU_OP_ARANGE:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, false, err, errlen));
        return op_arange(c, e, err, errlen);
    case RGPU_OP_COPY:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, false, err, errlen));
        return op_copy(c, e, err, errlen);
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "the cuda copy family has no kernel for %s", rgpu_op_name(e->op));
    }
}
