/* op/iter.h — broadcasting and the strided N-d iterator: out's shape, each
 * input broadcast to it (numpy rules), dims ordered and coalesced. The CPU
 * kernels run on it (rgpu_op_iter_run); the CUDA families use rgpu_op_iter_init for the
 * same broadcast checks and the same reduced iteration space. */
#ifndef RGPU_OP_ITER_H
#define RGPU_OP_ITER_H

#include <stdint.h>

#include "backend.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Strided N-d iterator.
 *
 * Operand 0 is the output; every operand is addressed over the output's
 * shape (inputs already broadcast: stride 0 on broadcast dims). Dims are
 * ordered by the output's strides (largest outermost), size-1 dims dropped
 * and mergeable dims coalesced, so a contiguous problem becomes one row.
 * run() calls row() once per innermost row: no div/mod per element. */
#define OP_ITER_MAX_OPS 4

typedef struct op_iter {
    int nops;
    int ndim;                                   /* >= 1; ndim-1 is the inner dim */
    int64_t numel;
    int64_t sizes[RGPU_MAX_DIMS];
    int64_t strides[OP_ITER_MAX_OPS][RGPU_MAX_DIMS];  /* bytes */
    char *base[OP_ITER_MAX_OPS];
    int dtype[OP_ITER_MAX_OPS];
} op_iter;

/* ptrs: first element of the row per operand; strides: bytes per operand. */
typedef void (*op_row_fn)(char *const *ptrs, const int64_t *strides, int64_t n, void *ctx);

/* Builds an iterator over out's shape. ins[k] (k < nin) are broadcast to out
 * (numpy rules, trailing dims aligned); a NULL in ins with scalar_data set
 * means "a 0-d operand at that address of that dtype" (stride 0 everywhere).
 * Returns RGPU_ERR_SHAPE with a message when an input does not broadcast. */
typedef struct op_operand {
    const rgpu_view *view;      /* or NULL for a scalar held in memory below */
    const void *scalar_data;
    int scalar_dtype;
} op_operand;

rgpu_status rgpu_op_iter_init(op_iter *it, const rgpu_view *out, const op_operand *ins, int nin,
                          int op, char *err, size_t errlen);
void rgpu_op_iter_run(const op_iter *it, op_row_fn row, void *ctx);

#ifdef __cplusplus
}
#endif

#endif
