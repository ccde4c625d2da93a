/* cpu_dense_matmul.c — matrix multiplication on the CPU (mm, bmm, addmm,
 * baddbmm), on the shared helpers of cpu_dense_util.h.
 *
 * Matmul semantics are ATen's: out = beta*self + alpha*(a @ b), self
 * broadcast to out, beta == 0 ignores self entirely (NaNs in it do not
 * propagate), k == 0 gives beta*self (or zeros). f32/f64 go to OpenBLAS,
 * reading strided operands in place when one of their two inner strides is 1
 * (x.t() is common); f16/bf16 are converted to f32, multiplied by sgemm and
 * rounded once (ATen's CPU gemm accumulates reduced types in f32 too);
 * integer dtypes use plain loops in wrapping int64; complex64/complex128 go
 * to cgemm/zgemm (real alpha/beta), strided operands they cannot read in place
 * copied contiguous in their own dtype. OpenBLAS splits work over
 * rows/columns of C, never over k, so results do not depend on its threads. */
#include <cblas.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_dense.h"
#include "cpu_dense_util.h"
#include "cpu_pool.h"

/* Row-major complex GEMM on (re, im) pairs of dtype dt (C64 or C128),
 * real alpha/beta as rgpu_dense_gemm: beta == 0 does not read C. */
static void gemm_complex(int dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                         const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc)
{
    if (M == 0 || N == 0) return;
    if (K == 0) {
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < 2 * N; j++) {
                if (dt == RGPU_C64) {
                    float *c = (float *)C + 2 * i * ldc + j;
                    *c = beta == 0 ? 0.0f : (float)beta * *c;
                } else {
                    double *c = (double *)C + 2 * i * ldc + j;
                    *c = beta == 0 ? 0.0 : beta * *c;
                }
            }
        return;
    }
    enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    if (dt == RGPU_C64) {
        float al[2] = { (float)alpha, 0.0f }, be[2] = { (float)beta, 0.0f };
        cblas_cgemm(CblasRowMajor, TA, TB, (blasint)M, (blasint)N, (blasint)K, al, A, (blasint)lda,
                    B, (blasint)ldb, be, C, (blasint)ldc);
    } else {
        double al[2] = { alpha, 0.0 }, be[2] = { beta, 0.0 };
        cblas_zgemm(CblasRowMajor, TA, TB, (blasint)M, (blasint)N, (blasint)K, al, A, (blasint)lda,
                    B, (blasint)ldb, be, C, (blasint)ldc);
    }
}

/* ---------------------------------------------------------------------------
 * MM, BMM, ADDMM, BADDBMM
 *
 * a is (B,n,k), b (B,k,m), out (B,n,m); mm/addmm are the B = 1 case with no
 * batch dim. self (addmm/baddbmm) broadcasts to out. Batch strides may be 0
 * (expand views). */

/* A (rows, cols) matrix inside a batched operand: data pointer and strides. */
typedef struct mat_ref {
    char *p;
    int dtype;
    int64_t rows, cols, s0, s1;
} mat_ref;

static rgpu_view mat_view(const mat_ref *m)
{
    rgpu_view v;
    memset(&v, 0, sizeof v);
    v.data = m->p;
    v.dtype = m->dtype;
    v.ndim = 2;
    v.sizes[0] = m->rows; v.sizes[1] = m->cols;
    v.strides[0] = m->s0; v.strides[1] = m->s1;
    return v;
}

/* dst (rows, cols) at its strides = src (same shape, same dtype) at its strides. */
#define MAT_COPY(T) do {                                                        \
        for (int64_t i = 0; i < dst->rows; i++) {                               \
            T *d = (T *)dst->p + i * dst->s0;                                   \
            const T *s = (const T *)src->p + i * src->s0;                       \
            for (int64_t j = 0; j < dst->cols; j++) d[j * dst->s1] = s[j * src->s1]; \
        } } while (0)

static void mat_copy_same_dtype(const mat_ref *dst, const mat_ref *src)
{
    size_t esz = rgpu_dtype_size(dst->dtype);
    if (dst->s1 == 1 && src->s1 == 1) {      /* rows in place (addmm's bias: every row the same one) */
        for (int64_t i = 0; i < dst->rows; i++)
            memmove(dst->p + (size_t)(i * dst->s0) * esz, src->p + (size_t)(i * src->s0) * esz, (size_t)dst->cols * esz);
        return;
    }
    switch (esz) {
    case 1: MAT_COPY(uint8_t); break;
    case 2: MAT_COPY(uint16_t); break;
    case 4: MAT_COPY(uint32_t); break;
    case 16: MAT_COPY(op_pair64); break;
    default: MAT_COPY(uint64_t); break;
    }
}
#undef MAT_COPY

/* A matrix to (load) or from (store) a contiguous (rows, cols) buffer:
 * converted to/from compute type ct, or, complex, copied in its own dtype. */
static void mat_load(const mat_ref *src, int ct, bool cplx, void *buf)
{
    if (cplx) {
        mat_ref d = { buf, src->dtype, src->rows, src->cols, src->cols, 1 };
        mat_copy_same_dtype(&d, src);
    } else {
        rgpu_view v = mat_view(src);
        rgpu_dense_load(&v, ct, buf);
    }
}

static void mat_store(const mat_ref *dst, int ct, bool cplx, void *buf)
{
    if (cplx) {
        mat_ref s = { buf, dst->dtype, dst->rows, dst->cols, dst->cols, 1 };
        mat_copy_same_dtype(dst, &s);
    } else {
        rgpu_view v = mat_view(dst);
        rgpu_dense_store(&v, ct, buf);
    }
}

static void gemm_any(int dt, int ct, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                     const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc)
{
    if (op_dtype_is_complex(dt)) gemm_complex(dt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else rgpu_dense_gemm(ct, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* One matmul's batch items [b0, b1): each chunk converts strided or reduced
 * operands into buffers of its own; with overlap every item's result goes to
 * its slot of cbuf_all, stored after all are computed. */
typedef struct mm_job {
    int dt, ct;
    bool cplx;
    int64_t esz, csz, n, k, m;
    double alpha, beta;
    bool use_self, self_is_out, overlap, a_direct, b_direct, o_direct, ta, tb, to;
    int64_t lda, ldb, ldo, ab, bb, ob;
    mat_ref A, B, O, S;
    int64_t sb;          /* self's batch stride */
    void *cbuf_all;      /* overlap: nb results */
    bool nomem;
} mm_job;

static void mm_task(void *vj, int64_t b0, int64_t b1)
{
    mm_job *j = vj;
    int64_t n = j->n, k = j->k, m = j->m, esz = j->esz;
    void *abuf = NULL, *bbuf = NULL, *cbuf = NULL;
    if (!j->a_direct) abuf = rgpu_op_alloc(n * k, (size_t)j->csz);
    if (!j->b_direct) bbuf = rgpu_op_alloc(k * m, (size_t)j->csz);
    if (!j->o_direct && !j->overlap) cbuf = rgpu_op_alloc(n * m, (size_t)j->csz);
    if ((!j->a_direct && !abuf) || (!j->b_direct && !bbuf) || (!j->o_direct && !j->overlap && !cbuf)) {
        __atomic_store_n(&j->nomem, true, __ATOMIC_RELAXED);
        free(abuf); free(bbuf); free(cbuf);
        return;
    }
    double beta = j->use_self ? j->beta : 0.0;
    for (int64_t bi = b0; bi < b1; bi++) {
        mat_ref Ai = j->A, Bi = j->B, Oi = j->O, Si = j->S;
        Ai.p += bi * j->ab * esz;
        Bi.p += bi * j->bb * esz;
        Oi.p += bi * j->ob * esz;
        if (Si.p) Si.p += bi * j->sb * esz;
        const void *pa = Ai.p, *pb = Bi.p;
        if (!j->a_direct) { mat_load(&Ai, j->ct, j->cplx, abuf); pa = abuf; }
        if (!j->b_direct) { mat_load(&Bi, j->ct, j->cplx, bbuf); pb = bbuf; }
        if (j->o_direct) {
            if (j->use_self && !j->self_is_out) mat_copy_same_dtype(&Oi, &Si);
            if (!j->to)
                gemm_any(j->dt, j->ct, j->ta, j->tb, n, m, k, j->alpha, pa, j->lda, pb, j->ldb, beta, Oi.p, j->ldo);
            else   /* column-major out: C^T = B^T A^T, row-major with ld = its column stride */
                gemm_any(j->dt, j->ct, !j->tb, !j->ta, m, n, k, j->alpha, pb, j->ldb, pa, j->lda, beta, Oi.p, j->ldo);
        } else {
            char *c = j->overlap ? (char *)j->cbuf_all + bi * n * m * j->csz : cbuf;
            if (j->use_self) mat_load(&Si, j->ct, j->cplx, c);
            gemm_any(j->dt, j->ct, j->ta, j->tb, n, m, k, j->alpha, pa, j->lda, pb, j->ldb, beta, c, m);
            if (!j->overlap) mat_store(&Oi, j->ct, j->cplx, c);
        }
    }
    free(abuf); free(bbuf); free(cbuf);
}

rgpu_status rgpu_cpu_dense_matmul(const rgpu_exec *e, char *err, size_t errlen)
{
    op_dense_mm q;
    FORWARD_IF_ERROR(rgpu_op_dense_mm_args(e, &q, err, errlen));
    OP_DENSE_MM_LOCALS(q);
    if (rgpu_op_numel(out) == 0) return RGPU_OK;

    int ct = op_dense_ct_of(dt);
    bool cplx = op_dtype_is_complex(dt);   /* buffers hold dt itself */
    int64_t esz = (int64_t)rgpu_dtype_size(dt), csz = cplx ? esz : (int64_t)op_dense_ct_size(ct);
    bool native = dt == RGPU_F32 || dt == RGPU_F64 || cplx;   /* BLAS reads the operands' own bytes */
    int64_t ab = batched ? a->strides[0] : 0, bb = batched ? b->strides[0] : 0;
    int64_t ob = batched ? out->strides[0] : 0;
    mat_ref A = { a->data, dt, n, k, a->strides[nd - 2], a->strides[nd - 1] };
    mat_ref Bm = { b->data, dt, k, m, b->strides[nd - 2], b->strides[nd - 1] };
    mat_ref O = { out->data, dt, n, m, out->strides[nd - 2], out->strides[nd - 1] };
    mat_ref S = { self ? self->data : NULL, dt, n, m, ss[1], ss[2] };

    bool ta = false, tb = false, to = false;
    int64_t lda = k, ldb = m, ldo = m;
    bool a_direct = native && rgpu_op_dense_blas_layout(n, k, A.s0, A.s1, &ta, &lda);
    bool b_direct = native && rgpu_op_dense_blas_layout(k, m, Bm.s0, Bm.s1, &tb, &ldb);
    if (!a_direct) { ta = false; lda = k > 0 ? k : 1; }
    if (!b_direct) { tb = false; ldb = m; }

    /* self is out itself (in-place addmm_): same bytes at the same strides */
    bool self_is_out = false;
    if (use_self && self->data == out->data) {
        self_is_out = true;
        for (int d = batched ? 0 : 1; d < 3; d++) {
            int64_t os = d == 0 ? ob : d == 1 ? O.s0 : O.s1;
            if (want[d] > 1 && ss[d] != os) self_is_out = false;
        }
    }
    /* Writing out while reading an operand it overlaps would corrupt it:
     * then the whole result goes to a buffer first and is stored last. */
    bool overlap = rgpu_op_dense_views_overlap(out, a) || rgpu_op_dense_views_overlap(out, b) ||
                   (use_self && !self_is_out && rgpu_op_dense_views_overlap(out, self));
    bool o_direct = native && !overlap && rgpu_op_dense_blas_layout(n, m, O.s0, O.s1, &to, &ldo);

    mm_job j = { dt, ct, cplx, esz, csz, n, k, m, alpha, beta, use_self, self_is_out, overlap,
                 a_direct, b_direct, o_direct, ta, tb, to, lda, ldb, ldo, ab, bb, ob,
                 A, Bm, O, S, ss[0], NULL, false };
    if (overlap && !(j.cbuf_all = rgpu_op_alloc(nb * n * m, (size_t)csz)))
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lldx%lldx%lld buffers", name,
                 (long long)nb, (long long)n, (long long)m);
    /* batch items over the pool (attention's bmm: many small products) */
    int64_t grain = to ? rgpu_dense_items_grain(nb, 1, m, n, k) : rgpu_dense_items_grain(nb, 1, n, m, k);
    rgpu_pool_for(nb, grain, mm_task, &j);
    if (j.nomem) {
        free(j.cbuf_all);
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lldx%lldx%lld buffers", name,
                 (long long)n, (long long)k, (long long)m);
    }
    if (overlap) {
        for (int64_t bi = 0; bi < nb; bi++) {
            mat_ref Oi = O;
            Oi.p += bi * ob * esz;
            mat_store(&Oi, ct, cplx, (char *)j.cbuf_all + bi * n * m * csz);
        }
    }
    free(j.cbuf_all);
    return RGPU_OK;
}
