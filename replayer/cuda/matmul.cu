// matmul.cu — mm, bmm, addmm, baddbmm on the CUDA backend (CPU reference:
// cpu_dense.c, same checks and messages).
//
// out = beta*self + alpha*(a @ b), self broadcast to out, beta == 0 ignores
// self (NaNs in it do not propagate), k == 0 gives beta*self (or zeros).
// Floats go to cuBLAS strided-batched GEMM, reading an operand in place when
// one of its two inner strides is 1 (row- or column-major, batch stride any,
// 0 included), else from a contiguous copy; f16/bf16 are read as they are
// and accumulate in f32 (one rounding). An out cuBLAS cannot write (neither
// inner stride 1, or overlapping an operand) gets a contiguous buffer that is
// copied out last. Integers: packed to int64, a plain wrapping kernel.
#include "dense.cuh"

// How cuBLAS can read a (rows, cols) operand with element strides s0, s1 in
// place: row-major (no transpose, ld = s0) or column-major (transpose,
// ld = s1). Size-1 dims take any stride. False when neither fits.
static bool blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, bool *trans, int64_t *ld)
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

// Byte range [lo, hi) a view's elements can touch (empty view: lo == hi).
static void view_span(const rgpu_view *v, uintptr_t *lo, uintptr_t *hi)
{
    *lo = *hi = (uintptr_t)v->data;
    if (cpu_numel(v) == 0) return;
    int64_t last = 0;
    for (int d = 0; d < v->ndim; d++) last += (v->sizes[d] - 1) * v->strides[d];
    *hi = *lo + (uintptr_t)((last + 1) * (int64_t)rgpu_dtype_size(v->dtype));
}

static bool views_overlap(const rgpu_view *a, const rgpu_view *b)
{
    uintptr_t alo, ahi, blo, bhi;
    view_span(a, &alo, &ahi);
    view_span(b, &blo, &bhi);
    return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

// A (nb, rows, cols) view over data with strides (sb, s0, s1).
static rgpu_view mat3(void *data, int dt, int64_t nb, int64_t rows, int64_t cols, int64_t sb, int64_t s0, int64_t s1)
{
    rgpu_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = dt;
    v.ndim = 3;
    v.sizes[0] = nb; v.sizes[1] = rows; v.sizes[2] = cols;
    v.strides[0] = sb; v.strides[1] = s0; v.strides[2] = s1;
    return v;
}

#define TRY(expr) CPU_FORWARD_IF_ERROR(expr)
#define NOMEM(name) CPU_FAIL(RGPU_ERR_NOMEM, "%s: out of device memory for matmul buffers", name)

rgpu_status rgpu_cuda_dense_matmul(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    TRY(dense_check_io(e, 0, 0, err, errlen));
    const char *name = rgpu_op_name(e->op);
    bool batched = e->op == RGPU_OP_BMM || e->op == RGPU_OP_BADDBMM;
    bool has_self = e->op == RGPU_OP_ADDMM || e->op == RGPU_OP_BADDBMM;
    const rgpu_view *self = has_self ? e->in[0] : NULL;
    const rgpu_view *a = e->in[has_self ? 1 : 0], *b = e->in[has_self ? 2 : 1];
    rgpu_view *out = e->out[0];
    int nd = batched ? 3 : 2;
    char s1[96], s2[96];

    if (a->ndim != nd || b->ndim != nd)
        CPU_FAIL(RGPU_ERR_SHAPE, "%s: operands must be %d-d, got %d-d and %d-d", name, nd, a->ndim, b->ndim);
    int64_t nb = batched ? a->sizes[0] : 1;
    int64_t n = a->sizes[nd - 2], k = a->sizes[nd - 1], m = b->sizes[nd - 1];
    if (b->sizes[nd - 2] != k || (batched && b->sizes[0] != nb))
        CPU_FAIL(RGPU_ERR_SHAPE, "%s: shapes %s and %s cannot be multiplied", name,
                 dense_shape_str(s1, sizeof s1, a->sizes, nd), dense_shape_str(s2, sizeof s2, b->sizes, nd));
    int dt = out->dtype;
    if (a->dtype != dt || b->dtype != dt || (self && self->dtype != dt))
        CPU_FAIL(RGPU_ERR_BAD_ARG, "%s: operands must share the output's dtype %s (got %s, %s%s%s)", name,
                 rgpu_dtype_name(dt), rgpu_dtype_name(a->dtype), rgpu_dtype_name(b->dtype),
                 self ? ", " : "", self ? rgpu_dtype_name(self->dtype) : "");
    if (dt == RGPU_BOOL) CPU_FAIL(RGPU_ERR_UNSUPPORTED, "%s: not implemented for bool (as ATen)", name);
    int64_t want[3] = { nb, n, m };
    TRY(dense_check_shape(out, "out", batched ? want : want + 1, nd, e->op, err, errlen));
    if (n > INT_MAX || m > INT_MAX || k > INT_MAX)
        CPU_FAIL(RGPU_ERR_UNSUPPORTED, "%s: a dimension over %d is too large for BLAS", name, INT_MAX);

    double alpha = 1.0, beta = 0.0;
    if (has_self) {
        const rgpu_arg *args[2];
        for (int i = 0; i < 2; i++) {
            const char *what = i ? "alpha" : "beta";
            if (i >= e->n_args || e->args == NULL)
                CPU_FAIL(RGPU_ERR_BAD_ARG, "%s: missing arg %d (%s)", name, i, what);
            args[i] = &e->args[i];
            int kd = args[i]->kind;
            if (kd != RGPU_ARG_INT && kd != RGPU_ARG_FLOAT && kd != RGPU_ARG_BOOL)
                CPU_FAIL(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want a scalar", name, i, what, kd);
        }
        beta = rgpu_arg_as_f64(args[0]);
        alpha = rgpu_arg_as_f64(args[1]);
        if (!cpu_dtype_is_float(dt)) {   /* Scalar.to<int>() truncates */
            beta = (double)(args[0]->kind == RGPU_ARG_FLOAT ? cpu_f64_to_i64_sat(beta) : rgpu_arg_as_i64(args[0]));
            alpha = (double)(args[1]->kind == RGPU_ARG_FLOAT ? cpu_f64_to_i64_sat(alpha) : rgpu_arg_as_i64(args[1]));
        }
    }
    bool use_self = has_self && beta != 0.0;

    /* self broadcast over out's (B, n, m): strides ss, 0 on broadcast dims */
    int64_t ss[3] = { 0, 0, 0 };
    if (self) {
        if (self->ndim > nd)
            CPU_FAIL(RGPU_ERR_SHAPE, "%s: self has %d dims, more than the output's %d", name, self->ndim, nd);
        int lead = nd - self->ndim;
        for (int d = lead; d < nd; d++) {
            int64_t s = self->sizes[d - lead], o = (batched ? want : want + 1)[d];
            if (s != o && s != 1)
                CPU_FAIL(RGPU_ERR_SHAPE, "%s: self %s does not broadcast to the output's shape", name,
                         dense_shape_str(s1, sizeof s1, self->sizes, self->ndim));
            ss[d + (batched ? 0 : 1)] = s == 1 ? 0 : self->strides[d - lead];
        }
    }
    if (cpu_numel(out) == 0) return RGPU_OK;

    int64_t ab = batched ? a->strides[0] : 0, bb = batched ? b->strides[0] : 0;
    int64_t ob = batched ? out->strides[0] : 0;
    rgpu_view A = mat3(a->data, dt, nb, n, k, ab, a->strides[nd - 2], a->strides[nd - 1]);
    rgpu_view Bv = mat3(b->data, dt, nb, k, m, bb, b->strides[nd - 2], b->strides[nd - 1]);
    rgpu_view O = mat3(out->data, dt, nb, n, m, ob, out->strides[nd - 2], out->strides[nd - 1]);
    rgpu_view S = mat3(self ? self->data : NULL, dt, nb, n, m, ss[0], ss[1], ss[2]);
    dcu::scratch sc(c);

    if (!cpu_dtype_is_float(dt)) {
        /* integers: pack to int64, wrapping kernel, store (as the CPU's loops) */
        uint64_t *pa = (uint64_t *)sc.get(nb * n * k, 8), *pb = (uint64_t *)sc.get(nb * k * m, 8);
        uint64_t *pc = (uint64_t *)sc.get(nb * n * m, 8);
        if (!pa || !pb || !pc) NOMEM(name);
        TRY(dcu::pack(c, &A, DCT_I64, pa, err, errlen));
        TRY(dcu::pack(c, &Bv, DCT_I64, pb, err, errlen));
        if (use_self) TRY(dcu::pack(c, &S, DCT_I64, pc, err, errlen));
        TRY(dcu::gemm(c, RGPU_I64, false, false, n, m, k, alpha, pa, k, n * k, pb, m, k * m, use_self ? beta : 0.0,
                      pc, m, n * m, nb, name, err, errlen));
        return dcu::unpack(c, &O, DCT_I64, pc, NULL, 0, 0, err, errlen);
    }

    if (k > 0 && !dcu::have_blas(c, name, err, errlen)) return RGPU_ERR_UNSUPPORTED;
    int64_t esz = (int64_t)rgpu_dtype_size(dt);
    bool ta = false, tb = false, to = false;
    int64_t lda = k, ldb = m, ldo = m, sa = ab, sb = bb;
    const void *pa = a->data, *pb = b->data;
    bool a_direct = blas_layout(n, k, A.strides[1], A.strides[2], &ta, &lda);
    bool b_direct = blas_layout(k, m, Bv.strides[1], Bv.strides[2], &tb, &ldb);
    if (!a_direct) {
        int64_t sz[3] = { nb, n, k };
        void *buf = sc.get(nb * n * k, (size_t)esz);
        if (!buf) NOMEM(name);
        rgpu_view d = dcu::contig_view(buf, dt, 3, sz);
        TRY(dcu::copy(c, &d, &A, err, errlen));
        pa = buf; ta = false; lda = k > 0 ? k : 1; sa = n * k;
    }
    if (!b_direct) {
        int64_t sz[3] = { nb, k, m };
        void *buf = sc.get(nb * k * m, (size_t)esz);
        if (!buf) NOMEM(name);
        rgpu_view d = dcu::contig_view(buf, dt, 3, sz);
        TRY(dcu::copy(c, &d, &Bv, err, errlen));
        pb = buf; tb = false; ldb = m; sb = k * m;
    }
    if (nb == 1) { sa = 0; sb = 0; }

    /* self is out itself (in-place addmm_): same bytes at the same strides */
    bool self_is_out = false;
    if (use_self && self->data == out->data) {
        self_is_out = true;
        for (int d = batched ? 0 : 1; d < 3; d++) {
            int64_t os = O.strides[d];
            if (want[d] > 1 && ss[d] != os) self_is_out = false;
        }
    }
    /* Writing out while reading an operand it overlaps would corrupt it:
     * then the whole result goes to a buffer first and is copied last. */
    bool overlap = views_overlap(out, a) || views_overlap(out, b) ||
                   (use_self && !self_is_out && views_overlap(out, self));
    bool o_direct = !overlap && blas_layout(n, m, O.strides[1], O.strides[2], &to, &ldo);
    if (o_direct && nb > 1) {   /* one batch's matrix must end before the next starts */
        int64_t span = (n - 1) * O.strides[1] + (m - 1) * O.strides[2] + 1;
        if (ob < span) o_direct = false;
    }

    void *pc = out->data;
    int64_t so = nb == 1 ? 0 : ob;
    if (o_direct) {
        if (use_self && !self_is_out) TRY(dcu::copy(c, &O, &S, err, errlen));
    } else {
        int64_t sz[3] = { nb, n, m };
        pc = sc.get(nb * n * m, (size_t)esz);
        if (!pc) NOMEM(name);
        if (use_self) {
            rgpu_view d = dcu::contig_view(pc, dt, 3, sz);
            TRY(dcu::copy(c, &d, &S, err, errlen));
        }
        to = false; ldo = m; so = n * m;
    }
    double be = use_self ? beta : 0.0;
    if (!to)
        TRY(dcu::gemm(c, dt, ta, tb, n, m, k, alpha, pa, lda, sa, pb, ldb, sb, be, pc, ldo, so, nb, name, err, errlen));
    else   /* column-major out: C^T = B^T A^T, row-major with ld = its column stride */
        TRY(dcu::gemm(c, dt, !tb, !ta, m, n, k, alpha, pb, ldb, sb, pa, lda, sa, be, pc, ldo, so, nb, name, err, errlen));
    if (!o_direct) {
        int64_t sz[3] = { nb, n, m };
        rgpu_view s = dcu::contig_view(pc, dt, 3, sz);
        TRY(dcu::copy(c, &O, &s, err, errlen));
    }
    return RGPU_OK;
}
