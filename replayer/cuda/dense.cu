// dense.cu — the CUDA dense family: dispatch, and the helpers its files share
// (dense.cuh): packing views into compute buffers and back, same-dtype strided
// copies, and GEMM (cuBLAS for floats, a plain wrapping kernel for integers).
// The ops live in matmul.cu, conv.cu, batchnorm.cu and pool.cu; the CPU
// reference is replayer/cpu/cpu_dense*.c.
#include "dense.cuh"

// ---------------------------------------------------------------------------
// Dispatch

extern "C" rgpu_status rgpu_cuda_dense_exec(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_MM: case RGPU_OP_BMM: case RGPU_OP_ADDMM: case RGPU_OP_BADDBMM:
        return rgpu_cuda_dense_matmul(c, e, err, errlen);
    case RGPU_OP_CONVOLUTION:          return rgpu_cuda_dense_conv(c, e, err, errlen);
    case RGPU_OP_CONVOLUTION_BACKWARD: return rgpu_cuda_dense_conv_backward(c, e, err, errlen);
    case RGPU_OP_BATCH_NORM:           return rgpu_cuda_dense_batch_norm(c, e, err, errlen);
    case RGPU_OP_BATCH_NORM_BACKWARD:  return rgpu_cuda_dense_batch_norm_backward(c, e, err, errlen);
    case RGPU_OP_MAX_POOL2D: case RGPU_OP_MAX_POOL2D_BACKWARD:
    case RGPU_OP_AVG_POOL2D: case RGPU_OP_AVG_POOL2D_BACKWARD:
    case RGPU_OP_ADAPTIVE_AVG_POOL2D: case RGPU_OP_ADAPTIVE_AVG_POOL2D_BACKWARD:
        return rgpu_cuda_dense_pool(c, e, err, errlen);
    case RGPU_OP_LSTM_CELL: case RGPU_OP_LSTM_CELL_BACKWARD:
    case RGPU_OP_GRU_CELL: case RGPU_OP_GRU_CELL_BACKWARD:
        return rgpu_cuda_dense_rnn_cell(c, e, err, errlen);
    case RGPU_OP_SDPA:                 return rgpu_cuda_dense_sdpa(c, e, err, errlen);
    case RGPU_OP_SDPA_BACKWARD:        return rgpu_cuda_dense_sdpa_backward(c, e, err, errlen);
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cuda backend (dense): unsupported op %s", rgpu_op_name(e->op));
    }
}

namespace rgpu_dcu {

rgpu_view contig_view(void *data, int dtype, int ndim, const int64_t *sizes)
{
    rgpu_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = dtype;
    v.ndim = ndim;
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        v.sizes[d] = sizes[d];
        v.strides[d] = s;
        s *= sizes[d] > 1 ? sizes[d] : 1;
    }
    return v;
}

// ---------------------------------------------------------------------------
// Pack / unpack / copy

template <typename T>
static __global__ void pack_kernel(rgpu_cuda_view v, int dt, int64_t n, T *dst)
{
    const char *base = (const char *)v.data;
    int64_t esz = op_dtype_esize(dt);
    DCU_LOOP(i, n) dst[i] = cvt_load<T>(base + rgpu_cuda_offset(v, i) * esz, dt);
}

template <typename T>
static __global__ void unpack_kernel(rgpu_cuda_view v, int dt, int64_t n, const T *src, const T *bias,
                                     int64_t bias_rows, int64_t bias_len)
{
    char *base = (char *)v.data;
    int64_t esz = op_dtype_esize(dt);
    DCU_LOOP(i, n) {
        T x = src[i];
        if (bias) x = x + bias[(i / bias_len) % bias_rows];
        cvt_store(base + rgpu_cuda_offset(v, i) * esz, dt, x);
    }
}

template <typename T>
static __global__ void copy_kernel(rgpu_cuda_view dst, rgpu_cuda_view src, int64_t n)
{
    DCU_LOOP(i, n) ((T *)dst.data)[rgpu_cuda_offset(dst, i)] = ((const T *)src.data)[rgpu_cuda_offset(src, i)];
}

static int64_t numel(const rgpu_view *v) { return rgpu_op_numel(v); }

rgpu_status pack(rgpu_cuda_ctx *c, const rgpu_view *v, int ct, void *dst, char *err, size_t errlen)
{
    int64_t n = numel(v);
    if (n == 0) return RGPU_OK;
    rgpu_cuda_view cv = rgpu_cuda_view_of(v);
    unsigned nb = blocks_for(n);
    if (ct == OP_CT_F32) pack_kernel<float><<<nb, THREADS, 0, c->stream>>>(cv, v->dtype, n, (float *)dst);
    else if (ct == OP_CT_F64) pack_kernel<double><<<nb, THREADS, 0, c->stream>>>(cv, v->dtype, n, (double *)dst);
    else pack_kernel<uint64_t><<<nb, THREADS, 0, c->stream>>>(cv, v->dtype, n, (uint64_t *)dst);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

rgpu_status unpack(rgpu_cuda_ctx *c, const rgpu_view *v, int ct, const void *src, const void *bias,
                   int64_t bias_rows, int64_t bias_len, char *err, size_t errlen)
{
    int64_t n = numel(v);
    if (n == 0) return RGPU_OK;
    if (bias && (bias_rows < 1 || bias_len < 1)) bias = NULL;
    rgpu_cuda_view cv = rgpu_cuda_view_of(v);
    unsigned nb = blocks_for(n);
    if (ct == OP_CT_F32)
        unpack_kernel<float><<<nb, THREADS, 0, c->stream>>>(cv, v->dtype, n, (const float *)src, (const float *)bias,
                                                           bias_rows, bias_len);
    else if (ct == OP_CT_F64)
        unpack_kernel<double><<<nb, THREADS, 0, c->stream>>>(cv, v->dtype, n, (const double *)src, (const double *)bias,
                                                            bias_rows, bias_len);
    else
        unpack_kernel<uint64_t><<<nb, THREADS, 0, c->stream>>>(cv, v->dtype, n, (const uint64_t *)src,
                                                              (const uint64_t *)bias, bias_rows, bias_len);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

rgpu_status copy(rgpu_cuda_ctx *c, const rgpu_view *dst, const rgpu_view *src, char *err, size_t errlen)
{
    int64_t n = numel(dst);
    if (n == 0) return RGPU_OK;
    rgpu_cuda_view d = rgpu_cuda_view_of(dst), s = rgpu_cuda_view_of(src);
    unsigned nb = blocks_for(n);
    switch (rgpu_dtype_size(dst->dtype)) {
    case 1: copy_kernel<uint8_t><<<nb, THREADS, 0, c->stream>>>(d, s, n); break;
    case 2: copy_kernel<uint16_t><<<nb, THREADS, 0, c->stream>>>(d, s, n); break;
    case 4: copy_kernel<uint32_t><<<nb, THREADS, 0, c->stream>>>(d, s, n); break;
    case 16: copy_kernel<op_pair64><<<nb, THREADS, 0, c->stream>>>(d, s, n); break;
    default: copy_kernel<uint64_t><<<nb, THREADS, 0, c->stream>>>(d, s, n); break;
    }
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

rgpu_status zero(rgpu_cuda_ctx *c, void *p, size_t nbytes, char *err, size_t errlen)
{
    if (nbytes == 0) return RGPU_OK;
    RGPU_CUDA_TRY(cudaMemsetAsync(p, 0, nbytes, c->stream), err, errlen);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// GEMM

bool have_blas(rgpu_cuda_ctx *c, const char *opname, char *err, size_t errlen)
{
    if (c->blas.handle != NULL) return true;
    snprintf(err, errlen, "cuBLAS not available: %s needs it on the cuda backend (libcublas could not be loaded)",
             opname);
    return false;
}

// C (M,N) row-major, ldc / sC: C = beta == 0 ? 0 : beta * C, in the compute
// type of dt (what a K == 0 product leaves, as the CPU's rgpu_dense_gemm).
static __global__ void scale_kernel(int dt, int64_t M, int64_t N, double beta, char *C, int64_t ldc, int64_t sC,
                                    int64_t batch)
{
    int64_t esz = op_dtype_esize(dt), mn = M * N;
    DCU_LOOP(t, batch * mn) {
        int64_t b = t / mn, r = t % mn, i = r / N, j = r % N;
        char *p = C + (b * sC + i * ldc + j) * esz;
        if (op_dtype_is_complex(dt)) {
            double re, im;
            op_load_c128(p, dt, &re, &im);
            op_store_c128(p, dt, beta == 0.0 ? 0.0 : beta * re, beta == 0.0 ? 0.0 : beta * im);
        } else if (dt == RGPU_F64) op_store_f64(p, dt, beta == 0.0 ? 0.0 : beta * op_load_f64(p, dt));
        else op_store_f32(p, dt, beta == 0.0 ? 0.0f : (float)beta * op_load_f32(p, dt));
    }
}

// Wrapping int64 GEMM, one thread per element of C, k in order.
static __global__ void gemm_u64_kernel(bool ta, bool tb, int64_t M, int64_t N, int64_t K, uint64_t alpha,
                                       const uint64_t *A, int64_t lda, int64_t sA, const uint64_t *B, int64_t ldb,
                                       int64_t sB, uint64_t beta, uint64_t *C, int64_t ldc, int64_t sC, int64_t batch)
{
    int64_t mn = M * N;
    DCU_LOOP(t, batch * mn) {
        int64_t b = t / mn, r = t % mn, i = r / N, j = r % N;
        const uint64_t *a = A + b * sA, *bb = B + b * sB;
        uint64_t *cp = C + b * sC + i * ldc + j;
        uint64_t acc = beta == 0 ? 0 : beta * *cp;
        for (int64_t l = 0; l < K; l++) {
            uint64_t av = alpha * (ta ? a[l * lda + i] : a[i * lda + l]);
            acc += av * (tb ? bb[j * ldb + l] : bb[l * ldb + j]);
        }
        *cp = acc;
    }
}

// cuBLAS enum values (common.cuh explains why they are numbers here).
enum {
    OP_N = 0, OP_T = 1,
    R_32F = 0, R_64F = 1, R_16F = 2, R_16BF = 14,
    COMPUTE_32F = 68, COMPUTE_32F_FAST_TF32 = 77,
    GEMM_DEFAULT = -1,
    DEFAULT_MATH = 0, DISALLOW_REDUCED_PRECISION_REDUCTION = 16
};

rgpu_status gemm(rgpu_cuda_ctx *c, int dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                 const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, double beta,
                 void *C, int64_t ldc, int64_t sC, int64_t batch, const char *opname, char *err, size_t errlen)
{
    if (M == 0 || N == 0 || batch == 0) return RGPU_OK;
    if (dt == RGPU_I64) {
        gemm_u64_kernel<<<blocks_for(batch * M * N), THREADS, 0, c->stream>>>(
            ta, tb, M, N, K, (uint64_t)op_f64_to_i64_sat(alpha), (const uint64_t *)A, lda, sA, (const uint64_t *)B,
            ldb, sB, (uint64_t)op_f64_to_i64_sat(beta), (uint64_t *)C, ldc, sC, batch);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        return RGPU_OK;
    }
    if (K == 0) {   /* cuBLAS wants ld >= 1 and k >= 1 to mean anything: do beta*C here */
        scale_kernel<<<blocks_for(batch * M * N), THREADS, 0, c->stream>>>(dt, M, N, beta, (char *)C, ldc, sC, batch);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        return RGPU_OK;
    }
    if (!have_blas(c, opname, err, errlen)) return RGPU_ERR_UNSUPPORTED;
    RETURN_ERROR_IF(M > INT_MAX || N > INT_MAX || K > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX,
                    RGPU_ERR_UNSUPPORTED, "%s: a GEMM dimension over %d is too large for cuBLAS", opname, INT_MAX);
    const rgpu_cublas &bl = c->blas;
    bool tf32 = dt == RGPU_F32 && c->allow_tf32;
    bool reduced = dt == RGPU_F16 || dt == RGPU_BF16;
    if (bl.SetMathMode) {
        int st = bl.SetMathMode(bl.handle, reduced ? DEFAULT_MATH | DISALLOW_REDUCED_PRECISION_REDUCTION : DEFAULT_MATH);
        RETURN_ERROR_IF(st != 0, RGPU_ERR_EXEC, "%s: cublasSetMathMode failed with status %d", opname, st);
    }
    int64_t esz = (int64_t)rgpu_dtype_size(dt);
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS
    // gets B first, with the same transpose flags and leading dims.
    int opa = ta ? OP_T : OP_N, opb = tb ? OP_T : OP_N;
    const int64_t chunk = 65535;   // batches per call (conservative grid.z)
    for (int64_t b0 = 0; b0 < batch; b0 += chunk) {
        int nb = (int)(batch - b0 < chunk ? batch - b0 : chunk);
        const char *pa = (const char *)A + b0 * sA * esz, *pb = (const char *)B + b0 * sB * esz;
        char *pc = (char *)C + b0 * sC * esz;
        int st;
        const char *fn;
        bool missing = dt == RGPU_F64 ? !bl.DgemmStridedBatched
                     : dt == RGPU_C64 ? !bl.CgemmStridedBatched : dt == RGPU_C128 ? !bl.ZgemmStridedBatched
                     : dt == RGPU_F32 && !tf32 ? !bl.SgemmStridedBatched : !bl.GemmStridedBatchedEx;
        RETURN_ERROR_IF(missing, RGPU_ERR_UNSUPPORTED,
                        "cuBLAS not available: %s: the loaded libcublas lacks the GEMM it needs", opname);
        if (dt == RGPU_F64) {
            double al = alpha, be = beta;
            fn = "cublasDgemmStridedBatched";
            st = bl.DgemmStridedBatched(bl.handle, opb, opa, (int)N, (int)M, (int)K, &al, (const double *)pb, (int)ldb,
                                        sB, (const double *)pa, (int)lda, sA, &be, (double *)pc, (int)ldc, sC, nb);
        } else if (dt == RGPU_C64) {   // real alpha/beta; cuComplex is float2
            float al[2] = { (float)alpha, 0.0f }, be[2] = { (float)beta, 0.0f };
            fn = "cublasCgemmStridedBatched";
            st = bl.CgemmStridedBatched(bl.handle, opb, opa, (int)N, (int)M, (int)K, al, pb, (int)ldb, sB, pa,
                                        (int)lda, sA, be, pc, (int)ldc, sC, nb);
        } else if (dt == RGPU_C128) {
            double al[2] = { alpha, 0.0 }, be[2] = { beta, 0.0 };
            fn = "cublasZgemmStridedBatched";
            st = bl.ZgemmStridedBatched(bl.handle, opb, opa, (int)N, (int)M, (int)K, al, pb, (int)ldb, sB, pa,
                                        (int)lda, sA, be, pc, (int)ldc, sC, nb);
        } else if (dt == RGPU_F32 && !tf32) {
            float al = (float)alpha, be = (float)beta;
            fn = "cublasSgemmStridedBatched";
            st = bl.SgemmStridedBatched(bl.handle, opb, opa, (int)N, (int)M, (int)K, &al, (const float *)pb, (int)ldb,
                                        sB, (const float *)pa, (int)lda, sA, &be, (float *)pc, (int)ldc, sC, nb);
        } else {
            // f16/bf16 (f32 accumulation) or f32 with TF32: scalars are float for COMPUTE_32F*
            float al = (float)alpha, be = (float)beta;
            int ty = dt == RGPU_F16 ? R_16F : dt == RGPU_BF16 ? R_16BF : R_32F;
            fn = "cublasGemmStridedBatchedEx";
            st = bl.GemmStridedBatchedEx(bl.handle, opb, opa, (int)N, (int)M, (int)K, &al, pb, ty, (int)ldb, sB, pa, ty,
                                         (int)lda, sA, &be, pc, ty, (int)ldc, sC, nb,
                                         tf32 ? COMPUTE_32F_FAST_TF32 : COMPUTE_32F, GEMM_DEFAULT);
        }
        RETURN_ERROR_IF(st != 0, RGPU_ERR_EXEC, "%s: %s failed with status %d (m=%lld n=%lld k=%lld batch=%d)",
                        opname, fn, st, (long long)M, (long long)N, (long long)K, nb);
    }
    return RGPU_OK;
}

}  // namespace rgpu_dcu
