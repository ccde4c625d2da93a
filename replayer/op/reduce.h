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

/* op_check_exec with check_args: arity as ops.def says; an args array when
 * n_args > 0; every present view well formed. in[i]/out[i] may be NULL only
 * when bit i of opt_in / opt_out is set. */
rgpu_status op_reduce_check_exec(const rgpu_exec *e, unsigned opt_in, unsigned opt_out, char *err, size_t errlen);
/* args[i] exists and has one of the kinds in mask (bit per RGPU_ARG_*: OP_ARGK). */
rgpu_status op_reduce_arg(const rgpu_exec *e, int i, unsigned mask, const char *what, char *err, size_t errlen);
#define OP_ARGK(kind) (1u << (kind))
/* Floating input dtype (f32, f64, f16, bf16) or UNSUPPORTED. */
rgpu_status op_reduce_want_float(const rgpu_exec *e, const rgpu_view *v, const char *what, char *err, size_t errlen);
/* v's sizes equal sizes[0..nd) or RGPU_ERR_SHAPE. */
rgpu_status op_reduce_want_shape(const rgpu_exec *e, const rgpu_view *v, const char *what, int nd,
                                 const int64_t *sizes, char *err, size_t errlen);
/* Wraps dim into [0, nd) (a 0-d tensor takes 0 and -1, giving 0). */
rgpu_status op_reduce_wrap_dim(const rgpu_exec *e, int64_t dim, int nd, int *out, char *err, size_t errlen);

/* SUM / MEAN: the RGPU_ERR_SHAPE for an out that is not the reduction's
 * shape (in's sizes, dims with red[d] set kept as 1 with keepdim, else
 * dropped). */
rgpu_status op_reduce_bad_out(const char *name, const rgpu_view *in, const rgpu_view *out, const bool *red,
                              bool keepdim, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
