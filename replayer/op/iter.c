/* op/iter.c — broadcasting and the strided N-d iterator (op/iter.h). */
#include <stdio.h>

#include "check.h"
#include "iter.h"

/* ---------------------------------------------------------------------------
 * Iterator construction */

rgpu_status rgpu_op_iter_init(op_iter *it, const rgpu_view *out, const op_operand *ins, int nin,
                          int op, char *err, size_t errlen)
{
    if (nin < 0 || nin >= OP_ITER_MAX_OPS)
        RETURN_ERROR(RGPU_ERR_ARITY, "%s: %d inputs, the iterator holds %d", rgpu_op_name(op), nin, OP_ITER_MAX_OPS - 1);
    int nd = out->ndim;
    it->nops = 1 + nin;
    it->numel = rgpu_op_numel(out);

    /* strides over out's dims, in bytes, for each operand */
    int64_t st[OP_ITER_MAX_OPS][RGPU_MAX_DIMS];
    int64_t esz0 = (int64_t)rgpu_dtype_size(out->dtype);
    it->base[0] = (char *)out->data;
    it->dtype[0] = out->dtype;
    for (int d = 0; d < nd; d++) st[0][d] = out->strides[d] * esz0;
    for (int k = 0; k < nin; k++) {
        const rgpu_view *v = ins[k].view;
        if (v == NULL) {   /* 0-d scalar operand */
            it->base[k + 1] = (char *)(uintptr_t)ins[k].scalar_data;
            it->dtype[k + 1] = ins[k].scalar_dtype;
            for (int d = 0; d < nd; d++) st[k + 1][d] = 0;
            continue;
        }
        it->base[k + 1] = (char *)v->data;
        it->dtype[k + 1] = v->dtype;
        if (v->ndim > nd)
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: in[%d] has %d dims, more than the output's %d",
                     rgpu_op_name(op), k, v->ndim, nd);
        int64_t esz = (int64_t)rgpu_dtype_size(v->dtype);
        int lead = nd - v->ndim;
        for (int d = 0; d < nd; d++) {
            if (d < lead) { st[k + 1][d] = 0; continue; }
            int64_t s = v->sizes[d - lead];
            if (s == out->sizes[d]) st[k + 1][d] = (s == 1) ? 0 : v->strides[d - lead] * esz;
            else if (s == 1) st[k + 1][d] = 0;
            else
                RETURN_ERROR(RGPU_ERR_SHAPE, "%s: in[%d] size %lld at dim %d does not broadcast to %lld",
                         rgpu_op_name(op), k, (long long)s, d - lead, (long long)out->sizes[d]);
        }
    }

    /* order dims by the output's strides, largest outermost (stable insertion
     * sort, so equal strides keep their logical order); skip size-1 dims */
    int perm[RGPU_MAX_DIMS];
    int np = 0;
    for (int d = 0; d < nd; d++) {
        if (out->sizes[d] == 1) continue;
        int j = np++;
        while (j > 0 && st[0][perm[j - 1]] < st[0][d]) { perm[j] = perm[j - 1]; j--; }
        perm[j] = d;
    }

    /* coalesce: dim b (inner) absorbs dim a (outer) when, for every operand,
     * stride[a] == stride[b] * size[b] */
    int n = 0;
    for (int i = 0; i < np; i++) {
        int d = perm[i];
        if (n > 0) {
            bool merge = true;
            for (int k = 0; k < it->nops; k++)
                if (it->strides[k][n - 1] != st[k][d] * out->sizes[d]) { merge = false; break; }
            if (merge) {
                it->sizes[n - 1] *= out->sizes[d];
                for (int k = 0; k < it->nops; k++) it->strides[k][n - 1] = st[k][d];
                continue;
            }
        }
        it->sizes[n] = out->sizes[d];
        for (int k = 0; k < it->nops; k++) it->strides[k][n] = st[k][d];
        n++;
    }
    if (n == 0) {   /* 0-d or all size-1: one element */
        it->sizes[0] = 1;
        for (int k = 0; k < it->nops; k++) it->strides[k][0] = 0;
        n = 1;
    }
    it->ndim = n;
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Iteration: a counter over the outer dims, offsets updated incrementally;
 * the inner dim is handed to row() whole. */

void rgpu_op_iter_run(const op_iter *it, op_row_fn row, void *ctx)
{
    if (it->numel == 0) return;
    int nd = it->ndim, nops = it->nops;
    int64_t idx[RGPU_MAX_DIMS] = {0};
    int64_t off[OP_ITER_MAX_OPS] = {0};
    int64_t inner[OP_ITER_MAX_OPS];
    char *p[OP_ITER_MAX_OPS];
    for (int k = 0; k < nops; k++) inner[k] = it->strides[k][nd - 1];
    int64_t n = it->sizes[nd - 1];
    for (;;) {
        for (int k = 0; k < nops; k++) p[k] = it->base[k] + off[k];
        row(p, inner, n, ctx);
        int d = nd - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < it->sizes[d]) {
                for (int k = 0; k < nops; k++) off[k] += it->strides[k][d];
                break;
            }
            for (int k = 0; k < nops; k++) off[k] -= it->strides[k][d] * (it->sizes[d] - 1);
            idx[d] = 0;
        }
        if (d < 0) break;
    }
}
