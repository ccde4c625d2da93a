/* cpu_reduce2.h — private to the reduce2 family (cpu_reduce2*.c): argument
 * checks, an N-d counter carrying byte offsets for several operands, row
 * addressing over trailing dims, and the kernels of the second file. */
#ifndef RGPU_CPU_REDUCE2_H
#define RGPU_CPU_REDUCE2_H

#include <stdlib.h>

#include "cpu_internal.h"

/* ---------------------------------------------------------------------------
 * Checks (each fails with a one-line message naming the op) */

/* op_check_exec with check_args: arity as ops.def says; an args array when
 * n_args > 0; every present view well formed. in[i]/out[i] may be NULL only
 * when bit i of opt_in / opt_out is set. */
rgpu_status r2_check_exec(const rgpu_exec *e, unsigned opt_in, unsigned opt_out, char *err, size_t errlen);
/* args[i] exists and has one of the kinds in mask (bit per RGPU_ARG_*). */
rgpu_status r2_arg(const rgpu_exec *e, int i, unsigned mask, const char *what, char *err, size_t errlen);
#define R2K(kind) (1u << (kind))
/* Floating input dtype (f32, f64, f16, bf16) or UNSUPPORTED. */
rgpu_status r2_want_float(const rgpu_exec *e, const rgpu_view *v, const char *what, char *err, size_t errlen);
/* v's sizes equal sizes[0..nd) or RGPU_ERR_SHAPE. */
rgpu_status r2_want_shape(const rgpu_exec *e, const rgpu_view *v, const char *what, int nd,
                          const int64_t *sizes, char *err, size_t errlen);
/* Wraps dim into [0, nd) (a 0-d tensor takes 0 and -1, giving 0). */
rgpu_status r2_wrap_dim(const rgpu_exec *e, int64_t dim, int nd, int *out, char *err, size_t errlen);

/* malloc of n items of per bytes; NULL when n < 0 or the size overflows
 * (a stride-0 view can have a huge numel over a tiny storage). */
static inline void *r2_alloc(int64_t n, size_t per)
{
    size_t bytes;
    if (n < 0 || __builtin_mul_overflow((size_t)n, per, &bytes)) return NULL;
    return malloc(bytes > 0 ? bytes : 1);
}

/* ---------------------------------------------------------------------------
 * N-d counter over sizes[0..n), row-major, with one byte offset per operand.
 * Usage: r2_ctr_init, add operands, then do { ... } while (r2_ctr_next(&c)). */
#define R2_MAX_OPS 6

typedef struct r2_ctr {
    int n, nops;
    int64_t total;                                /* product of sizes */
    int64_t sz[RGPU_MAX_DIMS];
    int64_t st[R2_MAX_OPS][RGPU_MAX_DIMS];        /* bytes */
    int64_t idx[RGPU_MAX_DIMS];
    int64_t off[R2_MAX_OPS];                      /* bytes, current position */
} r2_ctr;

/* A counter over the n sizes (sizes may be NULL when n == 0). */
void r2_ctr_init(r2_ctr *c, int n, const int64_t *sizes);
/* Adds an operand whose element strides over the counter's dims are
 * strides[0..n) (NULL: all 0), element size esz; returns its slot. */
int r2_ctr_add(r2_ctr *c, const int64_t *strides, int64_t esz);
/* Advances; false after the last position (offsets are then back at 0). */
static inline bool r2_ctr_next(r2_ctr *c)
{
    for (int d = c->n - 1; d >= 0; d--) {
        if (++c->idx[d] < c->sz[d]) {
            for (int k = 0; k < c->nops; k++) c->off[k] += c->st[k][d];
            return true;
        }
        for (int k = 0; k < c->nops; k++) c->off[k] -= c->st[k][d] * (c->sz[d] - 1);
        c->idx[d] = 0;
    }
    return false;
}

/* ---------------------------------------------------------------------------
 * Row addressing: the trailing dims [first, ndim) of a view as one row of n
 * elements, in row-major order. When they collapse to one stride the row is
 * (n, stride); otherwise offs holds each element's byte offset. */
typedef struct r2_row {
    int64_t n;
    int64_t stride;       /* bytes, when offs == NULL */
    int64_t *offs;        /* malloc'd, or NULL */
    int dtype;
} r2_row;

rgpu_status r2_row_init(r2_row *r, const rgpu_view *v, int first, char *err, size_t errlen);
void r2_row_free(r2_row *r);
/* Row at base to/from a packed double buffer. */
void r2_row_load(const r2_row *r, const char *base, double *dst);
void r2_row_store(const r2_row *r, char *base, const double *src);

/* ---------------------------------------------------------------------------
 * Kernels in cpu_reduce2_norm.c (called after r2_check_exec) */
rgpu_status r2_softmax(const rgpu_exec *e, bool is_log, char *err, size_t errlen);
rgpu_status r2_softmax_backward(const rgpu_exec *e, bool is_log, char *err, size_t errlen);
rgpu_status r2_layer_norm(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status r2_layer_norm_backward(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status r2_nll_loss(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status r2_nll_loss_backward(const rgpu_exec *e, char *err, size_t errlen);

#endif
