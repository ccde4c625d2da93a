/* cpu_dense.h — private helpers of the CPU dense family (cpu_dense*.c):
 * matmul, convolution, batch norm, pooling. Not part of the backend API.
 *
 * The dense kernels work on contiguous compute buffers: an operand is packed
 * (converted to the compute type, row-major in its logical order) with
 * dense_load, the kernel runs on plain arrays, and the result goes back
 * through the output's own strides with dense_store. Matmul skips the packing
 * for f32/f64 operands BLAS can read in place. */
#ifndef RGPU_CPU_DENSE_H
#define RGPU_CPU_DENSE_H

#include "cpu_internal.h"

/* Compute types of the dense kernels: f32 for f32/f16/bf16 (ATen's opmath),
 * f64 for f64, int64 with wrapping (held as uint64) for the integer dtypes. */

static inline int dense_ct_of(int dtype)
{
    if (dtype == RGPU_F64) return OP_CT_F64;
    if (op_dtype_is_float(dtype)) return OP_CT_F32;
    return OP_CT_I64;
}

static inline size_t dense_ct_size(int ct) { return ct == OP_CT_F32 ? 4 : 8; }

/* ---------------------------------------------------------------------------
 * Checks and args (cpu_dense.c) */

/* op_check_exec without check_args: arity as ops.def says; every
 * input/output view not NULL is checked; those whose bit is clear in opt_in /
 * opt_out must be present. (The CUDA dense files call it too.) */
rgpu_status dense_check_io(const rgpu_exec *e, uint64_t opt_in, uint32_t opt_out, char *err, size_t errlen);

/* args[i] as a list of n ints with min_n <= n <= max_n, copied to v. */
rgpu_status dense_arg_ints(const rgpu_exec *e, int i, const char *what, uint32_t min_n, uint32_t max_n,
                           int64_t *v, uint32_t *n, char *err, size_t errlen);
/* args[i] as bool (BOOL or INT 0/1), int (INT), float (FLOAT or INT). */
rgpu_status dense_arg_bool(const rgpu_exec *e, int i, const char *what, bool *v, char *err, size_t errlen);
rgpu_status dense_arg_int(const rgpu_exec *e, int i, const char *what, int64_t *v, char *err, size_t errlen);
rgpu_status dense_arg_float(const rgpu_exec *e, int i, const char *what, double *v, char *err, size_t errlen);
/* True when args[i] is NONE. */
bool dense_arg_is_none(const rgpu_exec *e, int i);

/* Ops the dense family owns (as cpu_families.h; the CUDA dense dispatch asks it too). */
bool cpu_dense_owns(int op);

/* "[2, 3, 4]" into buf (truncated to fit). */
const char *dense_shape_str(char *buf, size_t n, const int64_t *sizes, int ndim);
/* v has exactly these sizes; otherwise RGPU_ERR_SHAPE naming what. */
rgpu_status dense_check_shape(const rgpu_view *v, const char *what, const int64_t *sizes, int ndim,
                              int op, char *err, size_t errlen);

/* ---------------------------------------------------------------------------
 * Buffers (cpu_dense.c) */

/* Like op_alloc, zero-filled. */
void *dense_calloc(int64_t n, size_t esz);

/* v with dim removed, data advanced to index idx of that dim. */
rgpu_view dense_subview(const rgpu_view *v, int dim, int64_t idx);
/* v with a size-1 dim inserted at dim (stride 0). */
rgpu_view dense_unsqueeze(const rgpu_view *v, int dim);

/* Packs v (row-major over its logical sizes) into dst as compute type ct. */
void dense_load(const rgpu_view *v, int ct, void *dst);
/* Writes src (row-major, compute type ct) through v's strides. */
void dense_store(const rgpu_view *v, int ct, const void *src);

/* Element i of a 1-D view, as double (for per-channel params). */
static inline double dense_at_f64(const rgpu_view *v, int64_t i)
{
    return op_load_f64((const char *)v->data + i * v->strides[0] * (int64_t)rgpu_dtype_size(v->dtype), v->dtype);
}

/* C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C on row-major compute
 * buffers, through cblas for f32/f64 and plain wrapping loops for int64.
 * ta/tb: op(X) = X^T, X stored (K,M)/(N,K) with leading dim lda/ldb.
 * beta == 0 does not read C. Dims and leading dims must fit in an int. */
void dense_gemm(int ct, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc);

/* ---------------------------------------------------------------------------
 * Op entry points (one file each), with the argument parsing and checks the
 * CUDA dense files share (both backends accept the same records and report
 * the same messages). */
rgpu_status cpu_dense_matmul(const rgpu_exec *e, char *err, size_t errlen);          /* cpu_dense.c */

/* Matmul operands, checked: out = beta*self + alpha*(a @ b) over nb batches
 * of (n, k) @ (k, m); self (NULL for mm/bmm) broadcast to out with strides
 * ss (0 on broadcast dims). */
typedef struct dense_mm {
    bool batched, has_self, use_self;
    const rgpu_view *self, *a, *b;
    rgpu_view *out;
    int nd, dt;
    int64_t nb, n, k, m;
    int64_t want[3];               /* { nb, n, m } */
    int64_t ss[3];
    double alpha, beta;
} dense_mm;
rgpu_status dense_mm_args(const rgpu_exec *e, dense_mm *q, char *err, size_t errlen);
/* How BLAS can read a (rows, cols) operand with element strides s0, s1 in
 * place: row-major (no transpose, ld = s0) or column-major (transpose,
 * ld = s1). Size-1 dims take any stride. False when neither fits. */
bool dense_blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, bool *trans, int64_t *ld);
/* a and b touch a common byte. */
bool dense_views_overlap(const rgpu_view *a, const rgpu_view *b);

rgpu_status cpu_dense_conv(const rgpu_exec *e, char *err, size_t errlen);            /* cpu_dense_conv.c */
rgpu_status cpu_dense_conv_backward(const rgpu_exec *e, char *err, size_t errlen);
/* Convolution geometry, parsed and checked once for both backends. */
typedef struct conv_geom {
    int64_t N, C, H, W;            /* I side */
    int64_t O, Ho, Wo;             /* G side */
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t groups, Cg, Og;
    bool pointwise;                /* 1x1, stride 1, no padding, same size: im2col(I) == I */
} conv_geom;
typedef struct conv_args {
    int spatial;                   /* 1 or 2 */
    bool transposed;
    int64_t stride[2], padding[2], dilation[2], out_pad[2], groups;
} conv_args;
/* args from position base: stride, padding, dilation, transposed, output_padding, groups. */
rgpu_status conv_parse_args(const rgpu_exec *e, int base, int spatial, conv_args *a, char *err, size_t errlen);
/* Geometry from the forward input x and weight w (already 4-d; 1-d ones have
 * H = kh = 1 inserted). Also gives the forward output's shape in y[4]. */
rgpu_status conv_geometry(const rgpu_exec *e, const rgpu_view *x, const rgpu_view *w, const conv_args *a,
                          conv_geom *g, int64_t y[4], char *err, size_t errlen);
/* Products the cores need must fit BLAS's int and size_t. */
rgpu_status conv_check_sizes(const rgpu_exec *e, const conv_geom *g, char *err, size_t errlen);
/* 3-d views (N,C,L) become (N,C,1,L). */
rgpu_view conv_as_4d(const rgpu_view *v);

rgpu_status cpu_dense_batch_norm(const rgpu_exec *e, char *err, size_t errlen);      /* cpu_dense_norm.c */
rgpu_status cpu_dense_batch_norm_backward(const rgpu_exec *e, char *err, size_t errlen);
/* Batch norm args and checks, for both backends. saves (forward only):
 * save_mean / save_invstd, NULL when absent or empty (eval). */
typedef struct bn_setup {
    bool training;
    double momentum, eps;          /* momentum: forward only */
    int64_t C, n;                  /* channels, elements per channel */
    rgpu_view *saves[2];
    int stat_dt;                   /* forward: the dtype ATen keeps the stats in */
} bn_setup;
/* in x, w?, b?, running_mean?, running_var?; training, momentum, eps; outs y, save_mean, save_invstd */
rgpu_status bn_forward_setup(const rgpu_exec *e, bn_setup *s, char *err, size_t errlen);
/* in grad, x, w?, running_mean?, running_var?, save_mean?, save_invstd?; training, eps; outs dx?, dw?, db? */
rgpu_status bn_backward_setup(const rgpu_exec *e, bn_setup *s, char *err, size_t errlen);
/* Pooling geometry, parsed and checked once for both backends (cpu_dense_pool.c). */
typedef struct pool_geom {
    int64_t N, C, H, W, Ho, Wo;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    bool ceil_mode, count_include_pad;
    bool has_divisor;
    int64_t divisor;
} pool_geom;
/* x is (C,H,W) or (N,C,H,W) with C, H, W > 0 (N may be 0), as ATen. */
rgpu_status pool_input(const rgpu_exec *e, const rgpu_view *x, pool_geom *g, char *err, size_t errlen);
/* max: kernel, stride, padding, dilation, ceil_mode; avg: kernel, stride,
 * padding, ceil_mode, count_include_pad, divisor_override|NONE. */
rgpu_status pool_args(const rgpu_exec *e, bool is_max, pool_geom *g, char *err, size_t errlen);
/* Sizes of x with the last two dims replaced by (h, w). */
void pool_shape(const rgpu_view *x, int64_t h, int64_t w, int64_t out[4]);
/* Each pooling op's args and checks, up to the kernel (both backends). */
rgpu_status pool_max_check(const rgpu_exec *e, pool_geom *g, char *err, size_t errlen);
rgpu_status pool_max_backward_check(const rgpu_exec *e, pool_geom *g, char *err, size_t errlen);
rgpu_status pool_avg_check(const rgpu_exec *e, pool_geom *g, char *err, size_t errlen);
rgpu_status pool_avg_backward_check(const rgpu_exec *e, pool_geom *g, char *err, size_t errlen);
rgpu_status pool_adaptive_check(const rgpu_exec *e, pool_geom *g, char *err, size_t errlen);
rgpu_status pool_adaptive_backward_check(const rgpu_exec *e, pool_geom *g, char *err, size_t errlen);

rgpu_status cpu_dense_max_pool(const rgpu_exec *e, char *err, size_t errlen);        /* cpu_dense_pool.c */
rgpu_status cpu_dense_max_pool_backward(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status cpu_dense_avg_pool(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status cpu_dense_avg_pool_backward(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status cpu_dense_adaptive_pool(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status cpu_dense_adaptive_pool_backward(const rgpu_exec *e, char *err, size_t errlen);

#endif
