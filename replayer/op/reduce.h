/* op/reduce.h — argument and shape checks of the reduction family (sum/mean
 * and the reduce2 ops: amax … cumsum, softmax, layer norm, nll_loss), for
 * both backends (cpu/cpu_reduce*.c, cuda/reduce.cu, softmax.cu, norm.cu,
 * loss.cu). Each fails with a one-line message naming the op. */
#ifndef RGPU_OP_REDUCE_H
#define RGPU_OP_REDUCE_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "check.h"
#include "dtype.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* rgpu_op_check_exec with check_args: arity as ops.def says; an args array when
 * n_args > 0; every present view well formed. in[i]/out[i] may be NULL only
 * when bit i of opt_in / opt_out is set. */
rgpu_status rgpu_op_reduce_check_exec(const rgpu_exec *e, unsigned opt_in, unsigned opt_out, char *err, size_t errlen);
/* args[i] exists and has one of the kinds in mask (bit per RGPU_ARG_*: OP_ARGK). */
rgpu_status rgpu_op_reduce_arg(const rgpu_exec *e, int i, unsigned mask, const char *what, char *err, size_t errlen);
#define OP_ARGK(kind) (1u << (kind))
/* Floating input dtype (f32, f64, f16, bf16) or UNSUPPORTED. */
rgpu_status rgpu_op_reduce_want_float(const rgpu_exec *e, const rgpu_view *v, const char *what, char *err, size_t errlen);
/* v's sizes equal sizes[0..nd) or RGPU_ERR_SHAPE. */
rgpu_status rgpu_op_reduce_want_shape(const rgpu_exec *e, const rgpu_view *v, const char *what, int nd,
                                 const int64_t *sizes, char *err, size_t errlen);
/* Wraps dim into [0, nd) (a 0-d tensor takes 0 and -1, giving 0). */
rgpu_status rgpu_op_reduce_wrap_dim(const rgpu_exec *e, int64_t dim, int nd, int *out, char *err, size_t errlen);

/* SUM / MEAN: the RGPU_ERR_SHAPE for an out that is not the reduction's
 * shape (in's sizes, dims with red[d] set kept as 1 with keepdim, else
 * dropped). */
rgpu_status rgpu_op_reduce_bad_out(const char *name, const rgpu_view *in, const rgpu_view *out, const bool *red,
                              bool keepdim, char *err, size_t errlen);

/* Which dims an INTS (or INT, or NONE = all) arg reduces: red[0..RGPU_MAX_DIMS)
 * set for each (wrapped, not repeated) dim; none listed reduces all nd dims. */
rgpu_status rgpu_op_reduce_parse_dims(const rgpu_exec *e, const rgpu_arg *a, int nd, bool *red, char *err, size_t errlen);

/* linalg_vector_norm's ord by the kernel it takes. */
typedef enum op_norm_ord { OP_NORM_0, OP_NORM_1, OP_NORM_2, OP_NORM_INF, OP_NORM_NINF, OP_NORM_P } op_norm_ord;

/* A reduction's args (sum/mean, amax … prod, arg*). */
typedef struct op_reduce2_args {
    bool red[RGPU_MAX_DIMS];   /* the reduced dims of in[0] */
    bool keepdim;
    double correction;         /* var / std (default 1) */
    double ord;                /* linalg_vector_norm (default 2) */
    int64_t count;             /* elements per output (rgpu_op_reduce_check_outs) */
    op_norm_ord norm;          /* rgpu_op_reduce2_parse: ord's kernel */
    bool fl;                   /* rgpu_op_reduce2_parse: accumulate in double (prod: in out's dtype) */
    rgpu_view *outs[2];        /* rgpu_op_argreduce_parse: values (NULL for arg*), indices */
} op_reduce2_args;
/* out[k] (NULL: not wanted) has the reduction's shape: in[0]'s sizes, the
 * reduced dims kept as 1 with keepdim, else dropped; sets a->count. */
rgpu_status rgpu_op_reduce_check_outs(const rgpu_exec *e, op_reduce2_args *a, rgpu_view *const *outs, int nout,
                                 char *err, size_t errlen);
/* Reads the args (any.dims / all.dims with dim=[] reduce nothing when out[0]
 * has in[0]'s shape: ATen's reading; ops.def's empty = all otherwise), then
 * checks out[0]'s shape; var / std / norm want floating in and out, norm an
 * ord that is not NaN; amax, amin and norm with ord inf or < 0 have no
 * identity, so an empty reduced dim is an error (ATen's zero_numel_check_dims). */
rgpu_status rgpu_op_reduce2_parse(const rgpu_exec *e, op_reduce2_args *a, char *err, size_t errlen);
/* SUM / MEAN: args dims (ints, empty = all) and keepdim into a->red and
 * a->keepdim; mean wants a floating out. */
rgpu_status rgpu_op_sum_mean_parse(const rgpu_exec *e, bool mean, op_reduce2_args *a, char *err, size_t errlen);
/* argmax, argmin (dim or None = flattened), max.dim, min.dim: dim and
 * keepdim into a (correction and ord unused); no bool input for arg*; int64
 * indices; the outs' shapes; no empty reduced dim (no identity). */
rgpu_status rgpu_op_argreduce_parse(const rgpu_exec *e, op_reduce2_args *a, char *err, size_t errlen);
/* Layer norm shapes: x is (lead..., norm...) with norm = normalized_shape,
 * M = prod(lead), N = prod(norm); mean/rstd are (lead..., 1...); weight and
 * bias are norm-shaped. */
typedef struct op_ln_shape {
    int k, lead;                   /* normalized dims, leading dims */
    int64_t M, N;
    int64_t norm[RGPU_MAX_DIMS];
    int64_t stat[RGPU_MAX_DIMS];   /* mean/rstd shape */
    double eps;                    /* native_layer_norm's eps */
} op_ln_shape;
rgpu_status rgpu_op_ln_shape_get(const rgpu_exec *e, const rgpu_view *x, const rgpu_arg *ns, op_ln_shape *s,
                            char *err, size_t errlen);
/* native_layer_norm (in x, weight?, bias?; args normalized_shape, eps; outs
 * y, mean?, rstd?): args, dtypes and shapes; s from x and the args. */
rgpu_status rgpu_op_layer_norm_check(const rgpu_exec *e, op_ln_shape *s, char *err, size_t errlen);
/* native_layer_norm_backward (in grad, x, mean, rstd, weight?, bias?; args
 * normalized_shape; outs dx?, dw?, db?): args, dtypes and shapes. */
rgpu_status rgpu_op_layer_norm_backward_check(const rgpu_exec *e, op_ln_shape *s, char *err, size_t errlen);
/* _fused_rms_norm (in x, weight?; args normalized_shape, eps; outs y, rstd?)
 * and _fused_rms_norm_backward (in grad, x, rstd, weight?; args
 * normalized_shape; outs dx?, dw?): as layer norm's, without mean and bias. */
rgpu_status rgpu_op_rms_norm_check(const rgpu_exec *e, op_ln_shape *s, char *err, size_t errlen);
rgpu_status rgpu_op_rms_norm_backward_check(const rgpu_exec *e, op_ln_shape *s, char *err, size_t errlen);
/* nll_loss: logp is (N,C) with target (N,), or (C,) with target () or (1,);
 * weight? is (C,); targets are int64 or uint8. Strides in elements. */
typedef struct op_nll_shape {
    bool batched;             /* logp is 2-d */
    bool per_row;             /* reduction none with a 2-d logp: loss is (N,) */
    int64_t N, C;
    int64_t ls0, ls1;         /* logp strides: row, class */
    int64_t ts;               /* target stride */
    int64_t ws;               /* weight stride */
    int64_t reduction, ignore;
} op_nll_shape;
/* args[0] reduction, args[1] ignore_index; logp, target and weight. */
rgpu_status rgpu_op_nll_shape_get(const rgpu_exec *e, const rgpu_view *logp, const rgpu_view *t, const rgpu_view *w,
                             op_nll_shape *s, char *err, size_t errlen);
/* nll_loss_forward (in logp, target, weight?; outs loss, total_weight?). */
rgpu_status rgpu_op_nll_loss_check(const rgpu_exec *e, op_nll_shape *s, char *err, size_t errlen);
/* nll_loss_backward (in grad, logp, target, weight?, total_weight; out
 * grad_input). Targets are the backend's to check. */
rgpu_status rgpu_op_nll_loss_backward_check(const rgpu_exec *e, op_nll_shape *s, char *err, size_t errlen);
/* cross_entropy_loss (in logits, target, weight?; outs loss, total_weight?,
 * lse) and its backward (in grad, logits, target, weight?, total_weight, lse;
 * out grad_logits): nll_loss's checks on the logits, and lse's shape. */
rgpu_status rgpu_op_cross_entropy_check(const rgpu_exec *e, op_nll_shape *s, char *err, size_t errlen);
rgpu_status rgpu_op_cross_entropy_backward_check(const rgpu_exec *e, op_nll_shape *s, char *err, size_t errlen);
/* _softmax / _log_softmax (in x; args int dim, bool half_to_float; out y):
 * floating x and y, y x-shaped; *dim wrapped. */
rgpu_status rgpu_op_softmax_check(const rgpu_exec *e, int *dim, char *err, size_t errlen);
/* _softmax_backward_data / _log_softmax_backward_data (in grad, output;
 * args int dim, DTYPE input_dtype = out's dtype; out): *dim wrapped. */
rgpu_status rgpu_op_softmax_backward_check(const rgpu_exec *e, int *dim, char *err, size_t errlen);
/* cumsum (in; args int dim; out in-shaped): *dim wrapped; lines[0..ndim)
 * in's sizes with the scan dim's set to 1 (one element per line). */
rgpu_status rgpu_op_cumsum_check(const rgpu_exec *e, int *dim, int64_t *lines, char *err, size_t errlen);

/* A backend's exec entry (cpu: rgpu_cpu_exec, cuda: rgpu_cuda_reduce_exec):
 * clears err; e present, its op known, its in/out/arg counts in range.
 * backend ("cpu", "cuda") names the backend in the messages. */
rgpu_status rgpu_op_exec_begin(const rgpu_exec *e, const char *backend, char *err, size_t errlen);

/* _ctc_loss (in log_probs (T,N,C), targets (N,S)|(n,), input_lengths (N,),
 * target_lengths (N,); arg blank; outs nll (N,), log_alpha (N,T,Sp)) and
 * _ctc_loss_backward (in grad (N,), log_probs, targets, input_lengths,
 * target_lengths, nll, log_alpha; args blank, zero_infinity; out grad
 * (T,N,C)): dtypes and shapes, a filled from the views (op/ctc.h). Lengths
 * and labels are data: the kernels check them per element. */
struct op_ctc;
rgpu_status rgpu_op_ctc_check(const rgpu_exec *e, struct op_ctc *a, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
