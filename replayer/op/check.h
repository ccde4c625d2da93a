/* op/check.h — the checks every op makes before its kernel, whatever the
 * backend: a view is well formed, a record's arity and views match ops.def.
 * Each fails with one line naming the op (op/error.h). */
#ifndef RGPU_OP_CHECK_H
#define RGPU_OP_CHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Product of v's sizes (1 for a 0-d view). */
int64_t rgpu_op_numel(const rgpu_view *v);

/* Checks a view is well formed (dtype, ndim, non-negative sizes/strides, data
 * present when numel > 0). what names it in the message ("in[0]"). */
rgpu_status rgpu_op_check_view(const rgpu_view *v, const char *what, int op, char *err, size_t errlen);

/* Checks e against ops.def, in this order: n_in / n_out as the op's arity
 * says; with check_args, an args array when n_args > 0; every input and output
 * view with rgpu_op_check_view, where in[i] / out[i] may be NULL only when bit i
 * of opt_in / opt_out is set. Each family calls it before its kernels. */
rgpu_status rgpu_op_check_exec(const rgpu_exec *e, uint64_t opt_in, uint32_t opt_out, bool check_args,
                          char *err, size_t errlen);

/* malloc of n elements of sz bytes (at least one element); NULL when n is
 * negative or n*sz overflows (hostile sizes: a stride-0 view can have a huge
 * numel over a tiny storage). */
void *rgpu_op_alloc(int64_t n, size_t sz);

/* "[2, 3, 4]" (sep ", ") or "[2,3,4]" (sep ",") into buf, truncated to fit;
 * returns buf. */
const char *rgpu_op_shape_str(char *buf, size_t n, const int64_t *sizes, int nd, const char *sep);

/* args[i] must exist and be a scalar (INT, FLOAT or BOOL). */
rgpu_status rgpu_op_check_scalar_arg(const rgpu_exec *e, int i, const char *what, char *err, size_t errlen);
/* True for the arg kinds a Scalar arrives as: INT, FLOAT, BOOL. */
bool rgpu_op_is_scalar_kind(int kind);
/* A scalar arg converted to dtype dt (as Scalar.to<T>() does), written to buf
 * (8 bytes, zeroed first). */
/* RGPU_ERR_UNSUPPORTED when a view of e is complex and ops.def does not mark
 * e's op COMPLEX; both backends call it before their dispatch. */
rgpu_status rgpu_op_check_complex(const rgpu_exec *e, char *err, size_t errlen);
/* buf: 8 bytes, 16 for complex128 */
void rgpu_op_scalar_to(const rgpu_arg *a, int dt, void *buf);

#ifdef __cplusplus
}
#endif

#endif
