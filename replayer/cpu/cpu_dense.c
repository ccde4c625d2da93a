/* cpu_dense.c — the CPU dense family: dispatch, the helpers the dense files
 * share (cpu_dense.h), and matrix multiplication (mm, bmm, addmm, baddbmm).
 *
 * Matmul semantics are ATen's: out = beta*self + alpha*(a @ b), self
 * broadcast to out, beta == 0 ignores self entirely (NaNs in it do not
 * propagate), k == 0 gives beta*self (or zeros). f32/f64 go to OpenBLAS,
 * reading strided operands in place when one of their two inner strides is 1
 * (x.t() is common); f16/bf16 are converted to f32, multiplied by sgemm and
 * rounded once (ATen's CPU gemm accumulates reduced types in f32 too);
 * integer dtypes use plain loops in wrapping int64. OpenBLAS splits work over
 * rows/columns of C, never over k, so results do not depend on its threads. */
#include <cblas.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_dense.h"
#include "cpu_families.h"

/* ---------------------------------------------------------------------------
 * Dispatch */

bool cpu_dense_owns(int op)
{
    switch (op) {
    case RGPU_OP_MM: case RGPU_OP_BMM: case RGPU_OP_ADDMM: case RGPU_OP_BADDBMM:
    case RGPU_OP_CONVOLUTION: case RGPU_OP_CONVOLUTION_BACKWARD:
    case RGPU_OP_BATCH_NORM: case RGPU_OP_BATCH_NORM_BACKWARD:
    case RGPU_OP_MAX_POOL2D: case RGPU_OP_MAX_POOL2D_BACKWARD:
    case RGPU_OP_AVG_POOL2D: case RGPU_OP_AVG_POOL2D_BACKWARD:
    case RGPU_OP_ADAPTIVE_AVG_POOL2D: case RGPU_OP_ADAPTIVE_AVG_POOL2D_BACKWARD:
        return true;
    default:
        return false;
    }
}

rgpu_status cpu_dense_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_MM: case RGPU_OP_BMM: case RGPU_OP_ADDMM: case RGPU_OP_BADDBMM:
        return cpu_dense_matmul(e, err, errlen);
    case RGPU_OP_CONVOLUTION:                  return cpu_dense_conv(e, err, errlen);
    case RGPU_OP_CONVOLUTION_BACKWARD:         return cpu_dense_conv_backward(e, err, errlen);
    case RGPU_OP_BATCH_NORM:                   return cpu_dense_batch_norm(e, err, errlen);
    case RGPU_OP_BATCH_NORM_BACKWARD:          return cpu_dense_batch_norm_backward(e, err, errlen);
    case RGPU_OP_MAX_POOL2D:                   return cpu_dense_max_pool(e, err, errlen);
    case RGPU_OP_MAX_POOL2D_BACKWARD:          return cpu_dense_max_pool_backward(e, err, errlen);
    case RGPU_OP_AVG_POOL2D:                   return cpu_dense_avg_pool(e, err, errlen);
    case RGPU_OP_AVG_POOL2D_BACKWARD:          return cpu_dense_avg_pool_backward(e, err, errlen);
    case RGPU_OP_ADAPTIVE_AVG_POOL2D:          return cpu_dense_adaptive_pool(e, err, errlen);
    case RGPU_OP_ADAPTIVE_AVG_POOL2D_BACKWARD: return cpu_dense_adaptive_pool_backward(e, err, errlen);
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cpu backend (dense): unsupported op %s", rgpu_op_name(e->op));
    }
}

/* ---------------------------------------------------------------------------
 * Checks and args */

rgpu_status dense_check_io(const rgpu_exec *e, uint64_t opt_in, uint32_t opt_out, char *err, size_t errlen)
{
    return op_check_exec(e, opt_in, opt_out, false, err, errlen);
}

static rgpu_status arg_get(const rgpu_exec *e, int i, const char *what, const rgpu_arg **a,
                           char *err, size_t errlen)
{
    if (i >= e->n_args || e->args == NULL)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: missing arg %d (%s)", rgpu_op_name(e->op), i, what);
    *a = &e->args[i];
    return RGPU_OK;
}

bool dense_arg_is_none(const rgpu_exec *e, int i)
{
    return i < e->n_args && e->args != NULL && e->args[i].kind == RGPU_ARG_NONE;
}

rgpu_status dense_arg_ints(const rgpu_exec *e, int i, const char *what, uint32_t min_n, uint32_t max_n,
                           int64_t *v, uint32_t *n, char *err, size_t errlen)
{
    const rgpu_arg *a;
    FORWARD_IF_ERROR(arg_get(e, i, what, &a, err, errlen));
    if (a->kind != RGPU_ARG_INTS)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want ints", rgpu_op_name(e->op), i, what, a->kind);
    if (a->v.ints.n < min_n || a->v.ints.n > max_n)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has %u ints, want %u to %u", rgpu_op_name(e->op), i, what,
                 a->v.ints.n, min_n, max_n);
    for (uint32_t k = 0; k < a->v.ints.n; k++) v[k] = rgpu_arg_int_at(a, k);
    *n = a->v.ints.n;
    return RGPU_OK;
}

rgpu_status dense_arg_bool(const rgpu_exec *e, int i, const char *what, bool *v, char *err, size_t errlen)
{
    const rgpu_arg *a;
    FORWARD_IF_ERROR(arg_get(e, i, what, &a, err, errlen));
    if (a->kind != RGPU_ARG_BOOL && a->kind != RGPU_ARG_INT)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want bool", rgpu_op_name(e->op), i, what, a->kind);
    *v = a->v.i != 0;
    return RGPU_OK;
}

rgpu_status dense_arg_int(const rgpu_exec *e, int i, const char *what, int64_t *v, char *err, size_t errlen)
{
    const rgpu_arg *a;
    FORWARD_IF_ERROR(arg_get(e, i, what, &a, err, errlen));
    if (a->kind != RGPU_ARG_INT)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want int", rgpu_op_name(e->op), i, what, a->kind);
    *v = a->v.i;
    return RGPU_OK;
}

rgpu_status dense_arg_float(const rgpu_exec *e, int i, const char *what, double *v, char *err, size_t errlen)
{
    const rgpu_arg *a;
    FORWARD_IF_ERROR(arg_get(e, i, what, &a, err, errlen));
    if (a->kind == RGPU_ARG_FLOAT) *v = a->v.f;
    else if (a->kind == RGPU_ARG_INT) *v = (double)a->v.i;
    else RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want float", rgpu_op_name(e->op), i, what, a->kind);
    return RGPU_OK;
}

const char *dense_shape_str(char *buf, size_t n, const int64_t *sizes, int ndim)
{
    size_t l = 0;
    buf[0] = '\0';
    l += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && l < n; d++)
        l += (size_t)snprintf(buf + l, n - l, "%s%lld", d ? ", " : "", (long long)sizes[d]);
    if (l < n) snprintf(buf + l, n - l, "]");
    return buf;
}

rgpu_status dense_check_shape(const rgpu_view *v, const char *what, const int64_t *sizes, int ndim,
                              int op, char *err, size_t errlen)
{
    bool ok = v->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = v->sizes[d] == sizes[d];
    if (!ok) {
        char got[96], want[96];
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: %s has shape %s, the op gives %s", rgpu_op_name(op), what,
                 dense_shape_str(got, sizeof got, v->sizes, v->ndim), dense_shape_str(want, sizeof want, sizes, ndim));
    }
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Buffers */

void *dense_calloc(int64_t n, size_t esz)
{
    if (n < 0 || (uint64_t)n > SIZE_MAX / 2 / esz) return NULL;
    return calloc(n ? (size_t)n : 1, esz);
}

rgpu_view dense_subview(const rgpu_view *v, int dim, int64_t idx)
{
    rgpu_view s = *v;
    s.data = (char *)v->data + idx * v->strides[dim] * (int64_t)rgpu_dtype_size(v->dtype);
    for (int d = dim; d + 1 < v->ndim; d++) {
        s.sizes[d] = v->sizes[d + 1];
        s.strides[d] = v->strides[d + 1];
    }
    s.ndim = v->ndim - 1;
    return s;
}

rgpu_view dense_unsqueeze(const rgpu_view *v, int dim)
{
    rgpu_view s = *v;
    for (int d = v->ndim; d > dim; d--) {
        s.sizes[d] = v->sizes[d - 1];
        s.strides[d] = v->strides[d - 1];
    }
    s.sizes[dim] = 1;
    s.strides[dim] = 0;
    s.ndim = v->ndim + 1;
    return s;
}

/* Row-major walk over v's outer dims; the inner dim is converted as a row. */
static void dense_walk(const rgpu_view *v, int ct, void *buf, bool store)
{
    int64_t numel = op_numel(v);
    if (numel == 0) return;
    int nd = v->ndim;
    int64_t esz = (int64_t)rgpu_dtype_size(v->dtype), csz = (int64_t)dense_ct_size(ct);
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

void dense_load(const rgpu_view *v, int ct, void *dst) { dense_walk(v, ct, dst, false); }
void dense_store(const rgpu_view *v, int ct, const void *src) { dense_walk(v, ct, (void *)(uintptr_t)src, true); }

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

void dense_gemm(int ct, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
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
    enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    if (ct == OP_CT_F32)
        cblas_sgemm(CblasRowMajor, TA, TB, (blasint)M, (blasint)N, (blasint)K, (float)alpha, A, (blasint)lda,
                    B, (blasint)ldb, (float)beta, C, (blasint)ldc);
    else
        cblas_dgemm(CblasRowMajor, TA, TB, (blasint)M, (blasint)N, (blasint)K, alpha, A, (blasint)lda,
                    B, (blasint)ldb, beta, C, (blasint)ldc);
}

/* ---------------------------------------------------------------------------
 * MM, BMM, ADDMM, BADDBMM
 *
 * a is (B,n,k), b (B,k,m), out (B,n,m); mm/addmm are the B = 1 case with no
 * batch dim. self (addmm/baddbmm) broadcasts to out. Batch strides may be 0
 * (expand views). */

/* How BLAS can read a (rows, cols) operand with element strides s0, s1 in
 * place: row-major (no transpose, ld = s0) or column-major (transpose,
 * ld = s1). Size-1 dims take any stride. False when neither fits. */
bool dense_blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, bool *trans, int64_t *ld)
{
    int64_t r1 = rows > 1 ? rows : 1, c1 = cols > 1 ? cols : 1;
    if ((cols == 1 || s1 == 1) && (rows == 1 || s0 >= c1)) {
        *trans = false;
        *ld = rows == 1 ? c1 : s0;
    } else if ((rows == 1 || s0 == 1) && (cols == 1 || s1 >= r1)) {
        *trans = true;
        *ld = cols == 1 ? r1 : s1;
    } else {
        return false;
    }
    return *ld <= INT_MAX;
}

/* Byte range [lo, hi) a view's elements can touch (empty view: lo == hi). */
static void view_span(const rgpu_view *v, uintptr_t *lo, uintptr_t *hi)
{
    *lo = *hi = (uintptr_t)v->data;
    if (op_numel(v) == 0) return;
    int64_t last = 0;
    for (int d = 0; d < v->ndim; d++) last += (v->sizes[d] - 1) * v->strides[d];
    *hi = *lo + (uintptr_t)((last + 1) * (int64_t)rgpu_dtype_size(v->dtype));
}

bool dense_views_overlap(const rgpu_view *a, const rgpu_view *b)
{
    uintptr_t alo, ahi, blo, bhi;
    view_span(a, &alo, &ahi);
    view_span(b, &blo, &bhi);
    return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

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
    switch (rgpu_dtype_size(dst->dtype)) {
    case 1: MAT_COPY(uint8_t); break;
    case 2: MAT_COPY(uint16_t); break;
    case 4: MAT_COPY(uint32_t); break;
    default: MAT_COPY(uint64_t); break;
    }
}
#undef MAT_COPY

rgpu_status dense_mm_args(const rgpu_exec *e, dense_mm *q, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(dense_check_io(e, 0, 0, err, errlen));
    memset(q, 0, sizeof *q);
    const char *name = rgpu_op_name(e->op);
    bool batched = q->batched = e->op == RGPU_OP_BMM || e->op == RGPU_OP_BADDBMM;
    bool has_self = q->has_self = e->op == RGPU_OP_ADDMM || e->op == RGPU_OP_BADDBMM;
    const rgpu_view *self = q->self = has_self ? e->in[0] : NULL;
    const rgpu_view *a = q->a = e->in[has_self ? 1 : 0], *b = q->b = e->in[has_self ? 2 : 1];
    rgpu_view *out = q->out = e->out[0];
    int nd = q->nd = batched ? 3 : 2;
    char s1[96], s2[96];

    if (a->ndim != nd || b->ndim != nd)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: operands must be %d-d, got %d-d and %d-d", name, nd, a->ndim, b->ndim);
    int64_t nb = q->nb = batched ? a->sizes[0] : 1;
    int64_t n = q->n = a->sizes[nd - 2], k = q->k = a->sizes[nd - 1], m = q->m = b->sizes[nd - 1];
    if (b->sizes[nd - 2] != k || (batched && b->sizes[0] != nb))
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: shapes %s and %s cannot be multiplied", name,
                 dense_shape_str(s1, sizeof s1, a->sizes, nd), dense_shape_str(s2, sizeof s2, b->sizes, nd));
    int dt = q->dt = out->dtype;
    if (a->dtype != dt || b->dtype != dt || (self && self->dtype != dt))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: operands must share the output's dtype %s (got %s, %s%s%s)", name,
                 rgpu_dtype_name(dt), rgpu_dtype_name(a->dtype), rgpu_dtype_name(b->dtype),
                 self ? ", " : "", self ? rgpu_dtype_name(self->dtype) : "");
    if (dt == RGPU_BOOL) RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for bool (as ATen)", name);
    int64_t *want = q->want;
    want[0] = nb; want[1] = n; want[2] = m;
    FORWARD_IF_ERROR(dense_check_shape(out, "out", batched ? want : want + 1, nd, e->op, err, errlen));
    if (n > INT_MAX || m > INT_MAX || k > INT_MAX)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: a dimension over %d is too large for BLAS", name, INT_MAX);

    double alpha = 1.0, beta = 0.0;
    if (has_self) {
        const rgpu_arg *args[2];
        for (int i = 0; i < 2; i++) {
            FORWARD_IF_ERROR(arg_get(e, i, i ? "alpha" : "beta", &args[i], err, errlen));
            int kd = args[i]->kind;
            if (kd != RGPU_ARG_INT && kd != RGPU_ARG_FLOAT && kd != RGPU_ARG_BOOL)
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want a scalar", name, i,
                         i ? "alpha" : "beta", kd);
        }
        beta = rgpu_arg_as_f64(args[0]);
        alpha = rgpu_arg_as_f64(args[1]);
        if (!op_dtype_is_float(dt)) {   /* Scalar.to<int>() truncates */
            beta = (double)(args[0]->kind == RGPU_ARG_FLOAT ? op_f64_to_i64_sat(beta) : rgpu_arg_as_i64(args[0]));
            alpha = (double)(args[1]->kind == RGPU_ARG_FLOAT ? op_f64_to_i64_sat(alpha) : rgpu_arg_as_i64(args[1]));
        }
    }
    q->alpha = alpha; q->beta = beta;
    q->use_self = has_self && beta != 0.0;

    /* self broadcast over out's (B, n, m): strides ss, 0 on broadcast dims */
    int64_t *ss = q->ss;
    if (self) {
        if (self->ndim > nd)
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: self has %d dims, more than the output's %d", name, self->ndim, nd);
        int lead = nd - self->ndim;
        for (int d = lead; d < nd; d++) {
            int64_t s = self->sizes[d - lead], o = (batched ? want : want + 1)[d];
            if (s != o && s != 1)
                RETURN_ERROR(RGPU_ERR_SHAPE, "%s: self %s does not broadcast to the output's shape", name,
                         dense_shape_str(s1, sizeof s1, self->sizes, self->ndim));
            ss[d + (batched ? 0 : 1)] = s == 1 ? 0 : self->strides[d - lead];
        }
    }
    return RGPU_OK;
}

rgpu_status cpu_dense_matmul(const rgpu_exec *e, char *err, size_t errlen)
{
    dense_mm q;
    FORWARD_IF_ERROR(dense_mm_args(e, &q, err, errlen));
    const char *name = rgpu_op_name(e->op);
    bool batched = q.batched, use_self = q.use_self;
    const rgpu_view *self = q.self, *a = q.a, *b = q.b;
    rgpu_view *out = q.out;
    int nd = q.nd, dt = q.dt;
    int64_t nb = q.nb, n = q.n, k = q.k, m = q.m;
    const int64_t *want = q.want, *ss = q.ss;
    double alpha = q.alpha, beta = q.beta;
    if (op_numel(out) == 0) return RGPU_OK;

    int ct = dense_ct_of(dt);
    int64_t esz = (int64_t)rgpu_dtype_size(dt), csz = (int64_t)dense_ct_size(ct);
    bool native = dt == RGPU_F32 || dt == RGPU_F64;   /* BLAS reads the operands' own bytes */
    int64_t ab = batched ? a->strides[0] : 0, bb = batched ? b->strides[0] : 0;
    int64_t ob = batched ? out->strides[0] : 0;
    mat_ref A = { a->data, dt, n, k, a->strides[nd - 2], a->strides[nd - 1] };
    mat_ref Bm = { b->data, dt, k, m, b->strides[nd - 2], b->strides[nd - 1] };
    mat_ref O = { out->data, dt, n, m, out->strides[nd - 2], out->strides[nd - 1] };
    mat_ref S = { self ? self->data : NULL, dt, n, m, ss[1], ss[2] };

    bool ta = false, tb = false, to = false;
    int64_t lda = k, ldb = m, ldo = m;
    bool a_direct = native && dense_blas_layout(n, k, A.s0, A.s1, &ta, &lda);
    bool b_direct = native && dense_blas_layout(k, m, Bm.s0, Bm.s1, &tb, &ldb);
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
    bool overlap = dense_views_overlap(out, a) || dense_views_overlap(out, b) ||
                   (use_self && !self_is_out && dense_views_overlap(out, self));
    bool o_direct = native && !overlap && dense_blas_layout(n, m, O.s0, O.s1, &to, &ldo);

    void *abuf = NULL, *bbuf = NULL, *cbuf = NULL;
    if (!a_direct) abuf = op_alloc(n * k, (size_t)csz);
    if (!b_direct) bbuf = op_alloc(k * m, (size_t)csz);
    if (!o_direct) cbuf = op_alloc((overlap ? nb : 1) * n * m, (size_t)csz);
    if ((!a_direct && !abuf) || (!b_direct && !bbuf) || (!o_direct && !cbuf)) {
        free(abuf); free(bbuf); free(cbuf);
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lldx%lldx%lld buffers", name,
                 (long long)n, (long long)k, (long long)m);
    }

    for (int64_t bi = 0; bi < nb; bi++) {
        mat_ref Ai = A, Bi = Bm, Oi = O, Si = S;
        Ai.p += bi * ab * esz;
        Bi.p += bi * bb * esz;
        Oi.p += bi * ob * esz;
        if (Si.p) Si.p += bi * ss[0] * esz;
        const void *pa = Ai.p, *pb = Bi.p;
        if (!a_direct) { rgpu_view v = mat_view(&Ai); dense_load(&v, ct, abuf); pa = abuf; }
        if (!b_direct) { rgpu_view v = mat_view(&Bi); dense_load(&v, ct, bbuf); pb = bbuf; }
        if (o_direct) {
            if (use_self && !self_is_out) mat_copy_same_dtype(&Oi, &Si);
            if (!to)
                dense_gemm(ct, ta, tb, n, m, k, alpha, pa, lda, pb, ldb, use_self ? beta : 0.0, Oi.p, ldo);
            else   /* column-major out: C^T = B^T A^T, row-major with ld = its column stride */
                dense_gemm(ct, !tb, !ta, m, n, k, alpha, pb, ldb, pa, lda, use_self ? beta : 0.0, Oi.p, ldo);
        } else {
            char *c = (char *)cbuf + (overlap ? bi * n * m * csz : 0);
            if (use_self) { rgpu_view v = mat_view(&Si); dense_load(&v, ct, c); }
            dense_gemm(ct, ta, tb, n, m, k, alpha, pa, lda, pb, ldb, use_self ? beta : 0.0, c, m);
            if (!overlap) { rgpu_view v = mat_view(&Oi); dense_store(&v, ct, c); }
        }
    }
    if (overlap) dense_store(out, ct, cbuf);
    free(abuf); free(bbuf); free(cbuf);
    return RGPU_OK;
}
