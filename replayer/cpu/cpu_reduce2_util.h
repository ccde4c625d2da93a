/* cpu_reduce2_util.h — private to the reduce2 family (cpu_reduce2*.c): an
 * N-d counter carrying byte offsets for several operands and row addressing
 * over trailing dims (cpu_reduce2_util.c). */
#ifndef RGPU_CPU_REDUCE2_UTIL_H
#define RGPU_CPU_REDUCE2_UTIL_H

#include <stdlib.h>

#include "cpu_internal.h"
#include "op/reduce.h"

/* ---------------------------------------------------------------------------
 * N-d counter over sizes[0..n), row-major, with one byte offset per operand.
 * Usage: rgpu_r2_ctr_init, add operands, then do { ... } while (r2_ctr_next(&c)). */
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
void rgpu_r2_ctr_init(r2_ctr *c, int n, const int64_t *sizes);
/* Adds an operand whose element strides over the counter's dims are
 * strides[0..n) (NULL: all 0), element size esz; returns its slot. */
int rgpu_r2_ctr_add(r2_ctr *c, const int64_t *strides, int64_t esz);
/* Drops size-1 dims and merges dims every operand steps through as one
 * (row-major order is kept). */
void rgpu_r2_ctr_coalesce(r2_ctr *c);
/* Moves to row-major position pos (0 <= pos < total): indices and offsets.
 * A pool chunk seeks to its first position, then advances. */
void rgpu_r2_ctr_seek(r2_ctr *c, int64_t pos);
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

rgpu_status rgpu_r2_row_init(r2_row *r, const rgpu_view *v, int first, char *err, size_t errlen);
void rgpu_r2_row_free(r2_row *r);
/* Row at base to/from a packed double buffer. */
void rgpu_r2_row_load(const r2_row *r, const char *base, double *dst);
void rgpu_r2_row_store(const r2_row *r, char *base, const double *src);

/* ---------------------------------------------------------------------------
 * Vectorizable row helpers (also used by cpu_reduce.c). Contiguous f32/f64
 * rows take typed loops the compiler vectorizes at -O3; the rest goes through
 * op_load_f64 / op_store_f64 per element. */

/* Independent accumulators of a lane sum: lane j adds elements j, j+8, ...
 * in order; the lanes are combined pairwise, then the tail is added. The
 * order depends only on n, never on threads or alignment. */
#define R2_LANES 8
#define R2_LANE_SUM(n, LOAD, out) do {                                          \
    double a_[R2_LANES] = {0};                                                  \
    int64_t i_ = 0;                                                             \
    for (; i_ + R2_LANES <= (n); i_ += R2_LANES)                                \
        for (int j_ = 0; j_ < R2_LANES; j_++) a_[j_] += LOAD(i_ + j_);          \
    double t_ = ((a_[0] + a_[1]) + (a_[2] + a_[3])) + ((a_[4] + a_[5]) + (a_[6] + a_[7])); \
    for (; i_ < (n); i_++) t_ += LOAD(i_);                                      \
    (out) = t_;                                                                 \
} while (0)

/* Lane sum of n doubles. */
static inline double r2_sum_f64(const double *restrict p, int64_t n)
{
    double t;
#define R2_LD_(i) p[i]
    R2_LANE_SUM(n, R2_LD_, t);
#undef R2_LD_
    return t;
}

#endif
