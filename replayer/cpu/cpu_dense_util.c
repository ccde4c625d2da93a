/* cpu_dense_util.c — the helpers the CPU dense files share (cpu_dense_util.h):
 * zeroed compute buffers, packing a view into a row-major compute buffer and
 * back, and GEMM on compute buffers (cblas for f32/f64, wrapping loops for
 * int64). Below every cpu_dense*.c file; calls none of them. */
#include <cblas.h>
#include <stdint.h>
#include <limits.h>
#include <stdlib.h>

#include "cpu_dense_util.h"
#include "cpu_pool.h"

/* ---------------------------------------------------------------------------
 * Buffers */

void *rgpu_dense_calloc(int64_t n, size_t esz)
{
    if (n < 0 || (uint64_t)n > SIZE_MAX / 2 / esz) return NULL;
    return calloc(n ? (size_t)n : 1, esz);
}

/* Row-major walk over v's outer dims; the inner dim is converted as a row. */
static void dense_walk(const rgpu_view *v, int ct, void *buf, bool store)
{
    int64_t numel = rgpu_op_numel(v);
    if (numel == 0) return;
    int nd = v->ndim;
    int64_t esz = (int64_t)rgpu_dtype_size(v->dtype), csz = (int64_t)op_dense_ct_size(ct);
    int64_t inner = nd ? v->sizes[nd - 1] : 1, is = nd ? v->strides[nd - 1] * esz : 0;
    int64_t idx[RGPU_MAX_DIMS] = {0}, off = 0;
    char *base = v->data, *b = buf;
    for (int64_t pos = 0; pos < numel; pos += inner) {
        char *p = base + off, *q = b + pos * csz;
        if (store) {
            if (ct == OP_CT_F32) cpu_store_row_f32(p, v->dtype, is, (const float *)q, inner);
            else if (ct == OP_CT_F64) cpu_store_row_f64(p, v->dtype, is, (const double *)q, inner);
            else cpu_store_row_u64(p, v->dtype, is, (const uint64_t *)q, inner);
        } else {
            if (ct == OP_CT_F32) cpu_load_row_f32((float *)q, p, v->dtype, is, inner);
            else if (ct == OP_CT_F64) cpu_load_row_f64((double *)q, p, v->dtype, is, inner);
            else cpu_load_row_u64((uint64_t *)q, p, v->dtype, is, inner);
        }
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < v->sizes[d]) { off += v->strides[d] * esz; break; }
            off -= v->strides[d] * esz * (v->sizes[d] - 1);
            idx[d] = 0;
        }
    }
}

void rgpu_dense_load(const rgpu_view *v, int ct, void *dst) { dense_walk(v, ct, dst, false); }
void rgpu_dense_store(const rgpu_view *v, int ct, const void *src) { dense_walk(v, ct, (void *)(uintptr_t)src, true); }

/* ---------------------------------------------------------------------------
 * GEMM on compute buffers */

static void gemm_i64(bool ta, bool tb, int64_t M, int64_t N, int64_t K, uint64_t alpha,
                     const uint64_t *A, int64_t lda, const uint64_t *B, int64_t ldb, uint64_t beta,
                     uint64_t *C, int64_t ldc)
{
    for (int64_t i = 0; i < M; i++) {
        uint64_t *c = C + i * ldc;
        for (int64_t j = 0; j < N; j++) c[j] = beta == 0 ? 0 : beta * c[j];
        for (int64_t l = 0; l < K; l++) {
            uint64_t a = alpha * (ta ? A[l * lda + i] : A[i * lda + l]);
            if (tb) for (int64_t j = 0; j < N; j++) c[j] += a * B[j * ldb + l];
            else for (int64_t j = 0; j < N; j++) c[j] += a * B[l * ldb + j];
        }
    }
}

typedef struct gemm_job {
    int ct; bool ta, tb;
    int64_t M, N, K;
    double alpha;
    const void *A; int64_t lda;
    const void *B; int64_t ldb;
    double beta;
    void *C; int64_t ldc;
} gemm_job;

/* Rows [r0, r1) of C = alpha op(A) op(B) + beta C. */
static void gemm_block(void *ctx, int64_t r0, int64_t r1)
{
    const gemm_job *j = ctx;
    enum CBLAS_TRANSPOSE TA = j->ta ? CblasTrans : CblasNoTrans, TB = j->tb ? CblasTrans : CblasNoTrans;
    size_t es = j->ct == OP_CT_F32 ? 4 : 8;
    const char *A = (const char *)j->A + (size_t)(j->ta ? r0 : r0 * j->lda) * es;
    char *C = (char *)j->C + (size_t)(r0 * j->ldc) * es;
    blasint m = (blasint)(r1 - r0);
    if (j->ct == OP_CT_F32)
        cblas_sgemm(CblasRowMajor, TA, TB, m, (blasint)j->N, (blasint)j->K, (float)j->alpha, (const float *)A,
                    (blasint)j->lda, j->B, (blasint)j->ldb, (float)j->beta, (float *)C, (blasint)j->ldc);
    else
        cblas_dgemm(CblasRowMajor, TA, TB, m, (blasint)j->N, (blasint)j->K, j->alpha, (const double *)A,
                    (blasint)j->lda, j->B, (blasint)j->ldb, j->beta, (double *)C, (blasint)j->ldc);
}

void rgpu_dense_gemm(int ct, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc)
{
    if (M == 0 || N == 0) return;
    if (ct == OP_CT_I64) {
        gemm_i64(ta, tb, M, N, K, (uint64_t)op_f64_to_i64_sat(alpha), A, lda, B, ldb,
                 (uint64_t)op_f64_to_i64_sat(beta), C, ldc);
        return;
    }
    if (K == 0) {   /* C = beta*C; BLAS wants lda >= 1 even then, so do it here */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                if (ct == OP_CT_F32) {
                    float *c = (float *)C + i * ldc + j;
                    *c = beta == 0 ? 0.0f : (float)beta * *c;
                } else {
                    double *c = (double *)C + i * ldc + j;
                    *c = beta == 0 ? 0.0 : beta * *c;
                }
            }
        return;
    }
    gemm_job j = { ct, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc };
    rgpu_pool_for(M, rgpu_dense_gemm_block_rows(M, N, K), gemm_block, &j);
}

/* Row blocks of C over the pool (OpenBLAS runs each on the calling thread,
 * and packs op(B) again for each): ~32 MFLOP per block so the packing is
 * amortised, but no more than an eighth of M's rows so a product still
 * spreads over up to 8 threads; at least 64 rows, a multiple of 16. The
 * bounds depend on the sizes only. */
int64_t rgpu_dense_gemm_block_rows(int64_t M, int64_t N, int64_t K)
{
    int64_t per_row = N * K;
    if (per_row <= 0) return INT64_MAX;
    int64_t rows = ((int64_t)1 << 24) / per_row;
    int64_t eighth = (M + 7) / 8;
    if (rows > eighth) rows = eighth;
    rows = (rows + 15) / 16 * 16;
    return rows < 64 ? 64 : rows;
}

int64_t rgpu_dense_items_grain(int64_t items, int64_t gemms, int64_t M, int64_t N, int64_t K)
{
    if (M > rgpu_dense_gemm_block_rows(M, N, K)) return items > 0 ? items : 1;
    int64_t flops = 2 * gemms * M * N * (K > 0 ? K : 1);
    return flops >= ((int64_t)1 << 17) ? 1 : ((int64_t)1 << 17) / (flops > 0 ? flops : 1);
}
