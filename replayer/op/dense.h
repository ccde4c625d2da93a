/* op/dense.h — what the dense ops mean, for both backends (cpu/cpu_dense*.c;
 * cuda/matmul.cu, conv.cu, batchnorm.cu, pool.cu): compute types, argument
 * readers and checks, matmul operands, convolution and pooling geometry,
 * batch norm's args, so both backends accept the same records and report
 * the same messages. */
#ifndef RGPU_OP_DENSE_H
#define RGPU_OP_DENSE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "check.h"
#include "dtype.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Compute types of the dense kernels: f32 for f32/f16/bf16 (ATen's opmath),
 * f64 for f64, int64 with wrapping (held as uint64) for the integer dtypes. */

static inline int op_dense_ct_of(int dtype)
{
    if (dtype == RGPU_F64) return OP_CT_F64;
    if (op_dtype_is_float(dtype)) return OP_CT_F32;
    return OP_CT_I64;
}

static inline size_t op_dense_ct_size(int ct) { return ct == OP_CT_F32 ? 4 : 8; }

/* A complex128 element moved as raw bytes (8-byte aligned, as storage gives). */
typedef struct op_pair64 { uint64_t lo, hi; } op_pair64;

/* ---------------------------------------------------------------------------
 * Checks and args */

/* rgpu_op_check_exec without check_args: arity as ops.def says; every
 * input/output view not NULL is checked; those whose bit is clear in opt_in /
 * opt_out must be present. (The CUDA dense files call it too.) */
rgpu_status rgpu_op_dense_check_io(const rgpu_exec *e, uint64_t opt_in, uint32_t opt_out, char *err, size_t errlen);

/* args[i] as a list of n ints with min_n <= n <= max_n, copied to v. */
rgpu_status rgpu_op_dense_arg_ints(const rgpu_exec *e, int i, const char *what, uint32_t min_n, uint32_t max_n,
                           int64_t *v, uint32_t *n, char *err, size_t errlen);
/* args[i] as bool (BOOL or INT 0/1), int (INT), float (FLOAT or INT). */
rgpu_status rgpu_op_dense_arg_bool(const rgpu_exec *e, int i, const char *what, bool *v, char *err, size_t errlen);
rgpu_status rgpu_op_dense_arg_int(const rgpu_exec *e, int i, const char *what, int64_t *v, char *err, size_t errlen);
rgpu_status rgpu_op_dense_arg_float(const rgpu_exec *e, int i, const char *what, double *v, char *err, size_t errlen);
/* True when args[i] is NONE. */
bool rgpu_op_dense_arg_is_none(const rgpu_exec *e, int i);

/* v has exactly these sizes; otherwise RGPU_ERR_SHAPE naming what. */
rgpu_status rgpu_op_dense_check_shape(const rgpu_view *v, const char *what, const int64_t *sizes, int ndim,
                              int op, char *err, size_t errlen);

/* Views */
/* v with dim removed, data advanced to index idx of that dim. */
rgpu_view rgpu_op_dense_subview(const rgpu_view *v, int dim, int64_t idx);
/* v with a size-1 dim inserted at dim (stride 0). */
rgpu_view rgpu_op_dense_unsqueeze(const rgpu_view *v, int dim);

/* Element i of a 1-D view, as double (for per-channel params). */
static inline double op_dense_at_f64(const rgpu_view *v, int64_t i)
{
    return op_load_f64((const char *)v->data + i * v->strides[0] * (int64_t)rgpu_dtype_size(v->dtype), v->dtype);
}

/* ---------------------------------------------------------------------------
 * Each op's args and checks, up to the kernel */

/* Matmul operands, checked: out = beta*self + alpha*(a @ b) over nb batches
 * of (n, k) @ (k, m); self (NULL for mm/bmm) broadcast to out with strides
 * ss (0 on broadcast dims). complex64/complex128 operands take real alpha
 * and beta (the records' scalars are real); complex32 is refused. */
typedef struct op_dense_mm {
    bool batched, has_self, use_self;
    const rgpu_view *self, *a, *b;
    rgpu_view *out;
    int nd, dt;
    int64_t nb, n, k, m;
    int64_t want[3];               /* { nb, n, m } */
    int64_t ss[3];
    double alpha, beta;
} op_dense_mm;
rgpu_status rgpu_op_dense_mm_args(const rgpu_exec *e, op_dense_mm *q, char *err, size_t errlen);
/* The fields of op_dense_mm q as the locals both backends' matmul use, plus
 * name (the op's). */
#define OP_DENSE_MM_LOCALS(q)                                                  \
    const char *name = rgpu_op_name(e->op);                                    \
    bool batched = (q).batched, use_self = (q).use_self;                       \
    const rgpu_view *self = (q).self, *a = (q).a, *b = (q).b;                  \
    rgpu_view *out = (q).out;                                                  \
    int nd = (q).nd, dt = (q).dt;                                              \
    int64_t nb = (q).nb, n = (q).n, k = (q).k, m = (q).m;                      \
    const int64_t *want = (q).want, *ss = (q).ss;                              \
    double alpha = (q).alpha, beta = (q).beta
/* How BLAS can read a (rows, cols) operand with element strides s0, s1 in
 * place: row-major (no transpose, ld = s0) or column-major (transpose,
 * ld = s1). Size-1 dims take any stride. False when neither fits. */
bool rgpu_op_dense_blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, bool *trans, int64_t *ld);
/* a and b touch a common byte. */
bool rgpu_op_dense_views_overlap(const rgpu_view *a, const rgpu_view *b);

/* Convolution geometry, parsed and checked once for both backends. */
typedef struct op_conv_geom {
    int64_t N, C, D, H, W;         /* I side (D = 1 below 3-d) */
    int64_t O, Do, Ho, Wo;         /* G side */
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t kt, st, pt, dt;        /* depth: kernel, stride, padding, dilation (1, 1, 0, 1 below 3-d) */
    int64_t in_sp, out_sp, kvol;   /* D*H*W, Do*Ho*Wo, kt*kh*kw */
    int64_t groups, Cg, Og;
    bool pointwise;                /* 1x1, stride 1, no padding, same size: im2col(I) == I */
} op_conv_geom;
typedef struct op_conv_args {
    int spatial;                   /* 1, 2 or 3 */
    bool transposed;
    int64_t stride[3], padding[3], dilation[3], out_pad[3], groups;
} op_conv_args;
/* args from position base: stride, padding, dilation, transposed, output_padding, groups. */
rgpu_status rgpu_op_conv_parse_args(const rgpu_exec *e, int base, int spatial, op_conv_args *a, char *err, size_t errlen);
/* Geometry from the forward input x and weight w (4-d, 1-d ones having
 * H = kh = 1 inserted, or 5-d). Also gives the forward output's shape in
 * y[x->ndim]. */
rgpu_status rgpu_op_conv_geometry(const rgpu_exec *e, const rgpu_view *x, const rgpu_view *w, const op_conv_args *a,
                          op_conv_geom *g, int64_t y[5], char *err, size_t errlen);
/* Products the cores need must fit BLAS's int and size_t. */
rgpu_status rgpu_op_conv_check_sizes(const rgpu_exec *e, const op_conv_geom *g, char *err, size_t errlen);
/* 3-d views (N,C,L) become (N,C,1,L). */
rgpu_view rgpu_op_conv_as_4d(const rgpu_view *v);

/* x and w are (N,C,L), (N,C,H,W) or (N,C,D,H,W), as many dims each. backend
 * names the backend in messages. */
rgpu_status rgpu_op_conv_check_dims(const rgpu_exec *e, const rgpu_view *x, const rgpu_view *w, const char *backend,
                            char *err, size_t errlen);

/* CONVOLUTION (in x, w, bias?; args as rgpu_op_conv_parse_args from 0; out y),
 * checked up to the kernel: dtypes, geometry, out's and bias's shapes, and
 * (when y is not empty) the sizes. x, w, y are the 4-d views (5-d for 3-d). */
typedef struct op_conv_fwd {
    const rgpu_view *x0, *w0, *bias;
    rgpu_view *y0;
    int dt;
    int64_t nb;                    /* bias length: C transposed, O otherwise */
    bool empty;                    /* y has no elements: nothing to run */
    op_conv_args a;
    op_conv_geom g;
    rgpu_view x, w, y;
} op_conv_fwd;
rgpu_status rgpu_op_conv_fwd_args(const rgpu_exec *e, const char *backend, op_conv_fwd *q, char *err, size_t errlen);

/* CONVOLUTION_BACKWARD (in grad, x, w; bias_sizes|NONE, then the args as
 * rgpu_op_conv_parse_args from 1; outs dx?, dw?, db?), checked up to the kernels.
 * x, w, gr are the 4-d views (5-d for 3-d). */
typedef struct op_conv_bwd {
    const rgpu_view *gr0, *x0, *w0;
    rgpu_view *dx0, *dw0, *db;
    int dt;
    op_conv_args a;
    op_conv_geom g;
    rgpu_view x, w, gr;
} op_conv_bwd;
rgpu_status rgpu_op_conv_bwd_args(const rgpu_exec *e, const char *backend, op_conv_bwd *q, char *err, size_t errlen);

/* Batch norm args and checks, for both backends. saves (forward only):
 * save_mean / save_invstd, NULL when absent or empty (eval). */
typedef struct op_bn_setup {
    bool training;
    double momentum, eps;          /* momentum: forward only */
    int64_t C, n;                  /* channels, elements per channel */
    rgpu_view *saves[2];
    int stat_dt;                   /* forward: the dtype ATen keeps the stats in */
} op_bn_setup;
/* in x, w?, b?, running_mean?, running_var?; training, momentum, eps; outs y, save_mean, save_invstd */
rgpu_status rgpu_op_bn_forward_setup(const rgpu_exec *e, op_bn_setup *s, char *err, size_t errlen);
/* in grad, x, w?, running_mean?, running_var?, save_mean?, save_invstd?; training, eps; outs dx?, dw?, db? */
rgpu_status rgpu_op_bn_backward_setup(const rgpu_exec *e, op_bn_setup *s, char *err, size_t errlen);
/* Pooling geometry, parsed and checked once for both backends (cpu_dense_pool.c). */
typedef struct op_pool_geom {
    int64_t N, C, H, W, Ho, Wo;
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    bool ceil_mode, count_include_pad;
    bool has_divisor;
    int64_t divisor;
} op_pool_geom;
/* x is (C,H,W) or (N,C,H,W) with C, H, W > 0 (N may be 0), as ATen. */
rgpu_status rgpu_op_pool_input(const rgpu_exec *e, const rgpu_view *x, op_pool_geom *g, char *err, size_t errlen);
/* max: kernel, stride, padding, dilation, ceil_mode; avg: kernel, stride,
 * padding, ceil_mode, count_include_pad, divisor_override|NONE. */
rgpu_status rgpu_op_pool_args(const rgpu_exec *e, bool is_max, op_pool_geom *g, char *err, size_t errlen);
/* Sizes of x with the last two dims replaced by (h, w). */
void rgpu_op_pool_shape(const rgpu_view *x, int64_t h, int64_t w, int64_t out[4]);
/* Each pooling op's args and checks, up to the kernel (both backends). */
rgpu_status rgpu_op_pool_max_check(const rgpu_exec *e, op_pool_geom *g, char *err, size_t errlen);
rgpu_status rgpu_op_pool_max_backward_check(const rgpu_exec *e, op_pool_geom *g, char *err, size_t errlen);
rgpu_status rgpu_op_pool_avg_check(const rgpu_exec *e, op_pool_geom *g, char *err, size_t errlen);
rgpu_status rgpu_op_pool_avg_backward_check(const rgpu_exec *e, op_pool_geom *g, char *err, size_t errlen);
rgpu_status rgpu_op_pool_adaptive_check(const rgpu_exec *e, op_pool_geom *g, char *err, size_t errlen);
rgpu_status rgpu_op_pool_adaptive_backward_check(const rgpu_exec *e, op_pool_geom *g, char *err, size_t errlen);

/* The fused recurrent cells (LSTM_CELL, LSTM_CELL_BACKWARD, GRU_CELL,
 * GRU_CELL_BACKWARD; op/rnn.h): floating operands of the (B, kH) and (kH,)
 * shapes each slot takes, a filled from the views. */
struct op_cell;
rgpu_status rgpu_op_cell_check(const rgpu_exec *e, struct op_cell *a, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
