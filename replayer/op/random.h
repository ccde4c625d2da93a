/* op/random.h — the random ops' arguments and checks (UNIFORM, NORMAL,
 * BERNOULLI, RANDOM, RANDPERM) and randperm's order, for both backends
 * (cpu/rgpu_cpu_index_random.c, cuda/random.cu). The values themselves are
 * op/philox.h's. */
#ifndef RGPU_OP_RANDOM_H
#define RGPU_OP_RANDOM_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct op_random_args {
    int kind;               /* RGPU_OP_* */
    uint64_t seed, offset;
    double a, b;            /* uniform: from, to; normal: mean, std; bernoulli: p */
    float af, bf;           /* uniform in f32: (float)from, (float)to */
    uint64_t from, range;   /* random_: range 0 means 2^64 */
    const rgpu_view *p;     /* bernoulli p tensor (broadcast to out), or NULL */
    int64_t n;              /* randperm */
} op_random_args;

/* The record's views, args and ranges, as ATen checks them. A bernoulli p
 * tensor is checked for dtype and broadcast here; that every p is in [0, 1]
 * the backend checks, where the values are. */
rgpu_status rgpu_op_random_check(const rgpu_exec *e, op_random_args *r, char *err, size_t errlen);

/* randperm: order[j] = the i (0 <= i < n) with the j-th smallest (r64 of
 * element i, i). scratch holds n * OP_RANDPERM_SCRATCH bytes. */
#define OP_RANDPERM_SCRATCH 16
void rgpu_op_randperm_order(uint64_t seed, uint64_t offset, int64_t n, uint64_t *order, void *scratch);

/* NATIVE_DROPOUT's args (p, train, seed, offset) and views: x floating, y of
 * x's dtype, y and mask (optional) of x's shape. */
typedef struct op_dropout_args {
    double p;
    bool train;
    uint64_t seed, offset;
    double p1m, scale;      /* 1 - p; 1/(1-p), 0 when p == 1 */
    uint64_t keep_lim;      /* element kept: (rgpu_philox_r64 >> 11) < keep_lim (op_dropout_keep_lim) */
} op_dropout_args;
rgpu_status rgpu_op_dropout_check(const rgpu_exec *e, op_dropout_args *d, char *err, size_t errlen);

/* The keep test u < p1m (u = rgpu_philox_u_f64 = k 2^-53, k = r64 >> 11 <
 * 2^53) in integers: k < ceil(p1m 2^53), exact (scaling by 2^53 and ceil
 * are exact for p1m in [0, 1]): the decision of both backends (keep_lim),
 * and a CUDA kernel's without FP64. */
static inline uint64_t op_dropout_keep_lim(double p1m)
{
    return (uint64_t)ceil(p1m * 9007199254740992.0);
}

/* NATIVE_DROPOUT_BACKWARD's args (scale) and views: out and grad floating,
 * grad and mask broadcast to out (it: their iterator, op/iter.h). */
struct op_iter;
rgpu_status rgpu_op_dropout_backward_check(const rgpu_exec *e, double *scale, struct op_iter *it,
                                      char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
