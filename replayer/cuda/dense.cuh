// dense.cuh — private to the CUDA dense family (dense.cu, matmul.cu, conv.cu,
// batchnorm.cu, pool.cu): element conversions on the device, launch helpers,
// scratch ownership and the shared host launchers (pack/unpack, same-dtype
// copies, GEMM through cuBLAS or a plain integer kernel).
//
// Argument parsing and validation reuse the CPU dense helpers (cpu_dense.h:
// rgpu_op_dense_check_io, dense_arg_*, rgpu_op_dense_check_shape, ...) so both backends
// accept the same records and report the same messages. Compute types are the
// CPU's (OP_CT_F32 for f32/f16/bf16, OP_CT_F64, OP_CT_I64 held as uint64 with
// wrapping arithmetic); conversions round like c10 (cuda_fp16/cuda_bf16 RNE).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>

#include "common.cuh"
#include "convert.cuh"

#include "op/dense.h"

namespace rgpu_dcu {

// ---------------------------------------------------------------------------
// Launch helpers: 256 threads, capped grid, grid-stride loops, 64-bit indices.
enum { THREADS = 256 };

static inline unsigned blocks_for(int64_t n)
{
    int64_t b = (n + THREADS - 1) / THREADS;
    const int64_t cap = 65535LL * 32;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

#define DCU_LOOP(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

// ---------------------------------------------------------------------------
// Elements: convert.cuh (op/dtype.h's casts; cvt_load<T> / cvt_store by compute type).

// f32 rounded to dtype dt and back (f16/bf16 round; identity otherwise):
// ATen's reduced-type backward kernels accumulate in the tensor's own type.
__device__ __forceinline__ float rnd_dt(int dt, float v) { return op_round_to(dt, v); }

// Element pointer of a 1-d per-channel parameter (NULL p = absent).
struct param {
    char *p;
    int dt;
    int64_t stride;   // elements
};
static inline param param_of(const rgpu_view *v)
{
    param r = { v ? (char *)v->data : NULL, v ? v->dtype : RGPU_F32, v ? v->strides[0] : 0 };
    return r;
}
__device__ __forceinline__ double param_at(const param &q, int64_t i) { return op_load_f64(q.p + i * q.stride * op_dtype_esize(q.dt), q.dt); }
__device__ __forceinline__ void param_set(const param &q, int64_t i, double v) { op_store_f64(q.p + i * q.stride * op_dtype_esize(q.dt), q.dt, v); }

// Sum over the block (blockDim.x a power of two, sh has blockDim.x slots)
// in a fixed tree order, in the opmath T: the same bits on every run. Every
// thread gets it.
template <typename T> __device__ inline T block_sum(T v, T *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = rf_add(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}

// ---------------------------------------------------------------------------
// Scratch owned by one op: freed (stream-ordered) when it goes out of scope.
struct scratch {
    rgpu_cuda_ctx *c;
    void *p[16];
    int n;
    explicit scratch(rgpu_cuda_ctx *ctx) : c(ctx), n(0) {}
    ~scratch() { for (int i = n - 1; i >= 0; i--) rgpu_cuda_scratch_free(c, p[i]); }
    scratch(const scratch &) = delete;
    scratch &operator=(const scratch &) = delete;
    // count elements of esz bytes; NULL on overflow, out of memory or too many buffers.
    void *get(int64_t count, size_t esz)
    {
        if (n == 16 || count < 0 || (uint64_t)count > SIZE_MAX / 4 / esz) return NULL;
        void *q = rgpu_cuda_scratch(c, (size_t)count * esz);
        if (q) p[n++] = q;
        return q;
    }
};

// Compute-type size and the dtype a compute buffer is held in.
static inline size_t ct_size(int ct) { return ct == OP_CT_F32 ? 4 : 8; }
static inline int ct_dtype(int ct) { return ct == OP_CT_F32 ? RGPU_F32 : ct == OP_CT_F64 ? RGPU_F64 : RGPU_I64; }

// A contiguous (row-major) view of sizes over data.
rgpu_view contig_view(void *data, int dtype, int ndim, const int64_t *sizes);

// ---------------------------------------------------------------------------
// Host launchers (dense.cu). All enqueue on c->stream; errors go to err.

// dst (contiguous, compute type ct) = v's elements in row-major logical order.
rgpu_status pack(rgpu_cuda_ctx *c, const rgpu_view *v, int ct, void *dst, char *err, size_t errlen);
// v (through its strides) = src (contiguous, ct) + bias[(i / bias_len) % bias_rows]
// when bias (ct, bias_rows entries) is not NULL; rounded once to v's dtype.
rgpu_status unpack(rgpu_cuda_ctx *c, const rgpu_view *v, int ct, const void *src, const void *bias,
                   int64_t bias_rows, int64_t bias_len, char *err, size_t errlen);
// dst = src, same dtype and sizes, any strides (src may broadcast with 0 strides).
rgpu_status copy(rgpu_cuda_ctx *c, const rgpu_view *dst, const rgpu_view *src, char *err, size_t errlen);
// Zeroes a contiguous buffer.
rgpu_status zero(rgpu_cuda_ctx *c, void *p, size_t nbytes, char *err, size_t errlen);

// Row-major GEMM, strided-batched: for b < batch,
//   C_b (M,N) = alpha * op(A_b) (M,K) @ op(B_b) (K,N) + beta * C_b
// (ta: A_b stored (K,M); tb: B_b stored (N,K); lda/ldb/ldc row strides;
// sA/sB/sC batch strides in elements, 0 allowed for A and B). dt is the
// buffers' dtype: F32 (TF32 only when c->allow_tf32), F64, F16/BF16 (f32
// accumulation, one rounding) through cuBLAS; I64 = uint64 buffers with
// wrapping arithmetic in a plain kernel (alpha/beta truncated as the CPU).
// beta == 0 does not read C; K == 0 gives beta*C. Dims must fit an int.
rgpu_status gemm(rgpu_cuda_ctx *c, int dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                 const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, double beta,
                 void *C, int64_t ldc, int64_t sC, int64_t batch, const char *opname, char *err, size_t errlen);

// True when cuBLAS was loaded; else writes the UNSUPPORTED message.
bool have_blas(rgpu_cuda_ctx *c, const char *opname, char *err, size_t errlen);

}  // namespace rgpu_dcu

// Op entry points, one file each.
rgpu_status rgpu_cuda_dense_matmul(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);          // matmul.cu
rgpu_status rgpu_cuda_dense_conv(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);            // conv.cu
rgpu_status rgpu_cuda_dense_conv_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_dense_batch_norm(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);      // batchnorm.cu
rgpu_status rgpu_cuda_dense_rnn_cell(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);        // rnn.cu
rgpu_status rgpu_cuda_dense_sdpa(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);            // attention.cu
rgpu_status rgpu_cuda_dense_sdpa_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_dense_batch_norm_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cuda_dense_pool(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);            // pool.cu
