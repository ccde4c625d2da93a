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
// copied out last. complex64/complex128: cuBLAS C/Z GEMM (real alpha/beta),
// copies in their own dtype. Integers: packed to int64, a plain wrapping kernel.
#include "dense.cuh"

// Args, checks, and the in-place layouts (rgpu_op_dense_blas_layout: row-major, or
// column-major for a transposed read; rgpu_op_dense_views_overlap) from cpu_dense.h.

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

#define NOMEM(name) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of device memory for matmul buffers", name)

// A contiguous copy in sc of the (nb, rows, cols) operand v, for one cuBLAS
// cannot read in place; *p its data.
static rgpu_status contig_operand(rgpu_cuda_ctx *c, rgpu_dcu::scratch *sc, const rgpu_view *v, const char *name,
                                  const void **p, char *err, size_t errlen)
{
    void *buf = sc->get(v->sizes[0] * v->sizes[1] * v->sizes[2], rgpu_dtype_size(v->dtype));
    if (!buf) NOMEM(name);
    rgpu_view d = rgpu_dcu::contig_view(buf, v->dtype, 3, v->sizes);
    FORWARD_IF_ERROR(rgpu_dcu::copy(c, &d, v, err, errlen));
    *p = buf;
    return RGPU_OK;
}

rgpu_status rgpu_cuda_dense_matmul(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_dense_mm q;
    FORWARD_IF_ERROR(rgpu_op_dense_mm_args(e, &q, err, errlen));
    OP_DENSE_MM_LOCALS(q);
    if (rgpu_op_numel(out) == 0) return RGPU_OK;

    int64_t ab = batched ? a->strides[0] : 0, bb = batched ? b->strides[0] : 0;
    int64_t ob = batched ? out->strides[0] : 0;
    rgpu_view A = mat3(a->data, dt, nb, n, k, ab, a->strides[nd - 2], a->strides[nd - 1]);
    rgpu_view Bv = mat3(b->data, dt, nb, k, m, bb, b->strides[nd - 2], b->strides[nd - 1]);
    rgpu_view O = mat3(out->data, dt, nb, n, m, ob, out->strides[nd - 2], out->strides[nd - 1]);
    rgpu_view S = mat3(self ? self->data : NULL, dt, nb, n, m, ss[0], ss[1], ss[2]);
    rgpu_dcu::scratch sc(c);

    if (!op_dtype_is_float(dt) && !op_dtype_is_complex(dt)) {
        /* integers: pack to int64, wrapping kernel, store (as the CPU's loops) */
        uint64_t *pa = (uint64_t *)sc.get(nb * n * k, 8), *pb = (uint64_t *)sc.get(nb * k * m, 8);
        uint64_t *pc = (uint64_t *)sc.get(nb * n * m, 8);
        if (!pa || !pb || !pc) NOMEM(name);
        FORWARD_IF_ERROR(rgpu_dcu::pack(c, &A, OP_CT_I64, pa, err, errlen));
        FORWARD_IF_ERROR(rgpu_dcu::pack(c, &Bv, OP_CT_I64, pb, err, errlen));
        if (use_self) FORWARD_IF_ERROR(rgpu_dcu::pack(c, &S, OP_CT_I64, pc, err, errlen));
        FORWARD_IF_ERROR(rgpu_dcu::gemm(c, RGPU_I64, false, false, n, m, k, alpha, pa, k, n * k, pb, m, k * m, use_self ? beta : 0.0,
                      pc, m, n * m, nb, name, err, errlen));
        return rgpu_dcu::unpack(c, &O, OP_CT_I64, pc, NULL, 0, 0, err, errlen);
    }

    if (k > 0 && !rgpu_dcu::have_blas(c, name, err, errlen)) return RGPU_ERR_UNSUPPORTED;
    int64_t esz = (int64_t)rgpu_dtype_size(dt);
    bool ta = false, tb = false, to = false;
    int64_t lda = k, ldb = m, ldo = m, sa = ab, sb = bb;
    const void *pa = a->data, *pb = b->data;
    bool a_direct = rgpu_op_dense_blas_layout(n, k, A.strides[1], A.strides[2], &ta, &lda);
    bool b_direct = rgpu_op_dense_blas_layout(k, m, Bv.strides[1], Bv.strides[2], &tb, &ldb);
    if (!a_direct) {
        FORWARD_IF_ERROR(contig_operand(c, &sc, &A, name, &pa, err, errlen));
        ta = false; lda = k > 0 ? k : 1; sa = n * k;
    }
    if (!b_direct) {
        FORWARD_IF_ERROR(contig_operand(c, &sc, &Bv, name, &pb, err, errlen));
        tb = false; ldb = m; sb = k * m;
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
    bool overlap = rgpu_op_dense_views_overlap(out, a) || rgpu_op_dense_views_overlap(out, b) ||
                   (use_self && !self_is_out && rgpu_op_dense_views_overlap(out, self));
    bool o_direct = !overlap && rgpu_op_dense_blas_layout(n, m, O.strides[1], O.strides[2], &to, &ldo);
    if (o_direct && nb > 1) {   /* one batch's matrix must end before the next starts */
        int64_t span = (n - 1) * O.strides[1] + (m - 1) * O.strides[2] + 1;
        if (ob < span) o_direct = false;
    }

    void *pc = out->data;
    int64_t so = nb == 1 ? 0 : ob;
    if (o_direct) {
        if (use_self && !self_is_out) FORWARD_IF_ERROR(rgpu_dcu::copy(c, &O, &S, err, errlen));
    } else {
        int64_t sz[3] = { nb, n, m };
        pc = sc.get(nb * n * m, (size_t)esz);
        if (!pc) NOMEM(name);
        if (use_self) {
            rgpu_view d = rgpu_dcu::contig_view(pc, dt, 3, sz);
            FORWARD_IF_ERROR(rgpu_dcu::copy(c, &d, &S, err, errlen));
        }
        to = false; ldo = m; so = n * m;
    }
    double be = use_self ? beta : 0.0;
    if (!to)
        FORWARD_IF_ERROR(rgpu_dcu::gemm(c, dt, ta, tb, n, m, k, alpha, pa, lda, sa, pb, ldb, sb, be, pc, ldo, so, nb, name, err, errlen));
    else   /* column-major out: C^T = B^T A^T, row-major with ld = its column stride */
        FORWARD_IF_ERROR(rgpu_dcu::gemm(c, dt, !tb, !ta, m, n, k, alpha, pb, ldb, sb, pa, lda, sa, be, pc, ldo, so, nb, name, err, errlen));
    if (!o_direct) {
        int64_t sz[3] = { nb, n, m };
        rgpu_view s = rgpu_dcu::contig_view(pc, dt, 3, sz);
        FORWARD_IF_ERROR(rgpu_dcu::copy(c, &O, &s, err, errlen));
    }
    return RGPU_OK;
}
