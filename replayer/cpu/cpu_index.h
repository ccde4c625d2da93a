/* cpu_index.h — private helpers of the CPU index family (cpu_index.c,
 * cpu_index_data.c, rgpu_cpu_index_random.c): input/output and arg checks, a
 * multi-offset N-d walker, and per-element copy/convert/accumulate. */
#ifndef RGPU_CPU_INDEX_H
#define RGPU_CPU_INDEX_H

#include <math.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "op/index.h"

/* Copy src into dst elementwise (same shape, dtype cast when they differ),
 * over the thread pool in rows (memcpy where both rows are contiguous). */
void rgpu_cpu_index_copy_view(rgpu_view *dst, const rgpu_view *src);

/* ---------------------------------------------------------------------------
 * A walk over the thread pool. The walk's last dim is its row; each call
 * gets a copy of the walk positioned at the first element of its piece (off
 * and idx valid, idx[nd-1] the piece's start) and does n elements along the
 * row (set k's byte stride w->st[k][nd-1]). A 0-d walk is one row of one
 * element. Pieces are whole rows, or slices of a long row, cut by the shape
 * and cost (element-operations per element) only, so each element is done
 * by the same call whatever the thread count. For kernels whose elements
 * write disjoint outputs. */
typedef void (*cpu_walk_row_fn)(void *ctx, const op_walk *w, int64_t n);
void rgpu_cpu_index_walk_rows(const op_walk *w, int64_t cost, cpu_walk_row_fn fn, void *ctx);

/* Positions w at row-major element pos of its shape. */
static inline void op_walk_seek(op_walk *w, int64_t pos)
{
    for (int k = 0; k < OP_WALK_N; k++) w->off[k] = 0;
    for (int d = w->nd - 1; d >= 0; d--) {
        int64_t sz = w->sz[d] > 0 ? w->sz[d] : 1;
        w->idx[d] = pos % sz;
        pos /= sz;
        for (int k = 0; k < OP_WALK_N; k++) w->off[k] += w->idx[d] * w->st[k][d];
    }
}

/* ---------------------------------------------------------------------------
 * Per-file entry points (dispatched from cpu_index.c) */
rgpu_status rgpu_cpu_index_cat(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_pad(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_count_nonzero(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_nonzero(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_masked_select(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_unique(const rgpu_exec *e, bool count_only, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_random(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_dropout(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_dropout_backward(const rgpu_exec *e, char *err, size_t errlen);

#endif
