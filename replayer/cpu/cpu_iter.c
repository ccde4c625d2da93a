/* cpu_iter.c — the strided N-d iterator (op/iter.h) run over the thread
 * pool: the iteration space is cut into pieces of whole rows, or of one long
 * row, whose bounds depend only on the shape and the grain, so each element is
 * computed by the same row call whatever the thread count. Only for row
 * functions that write nothing but operand 0's elements of their row (every
 * pointwise kernel; flags they raise must be atomic or idempotent). */
#include "cpu_internal.h"
#include "cpu_pool.h"

typedef struct iter_job {
    const op_iter *it;
    op_row_fn row;
    void *ctx;
    int64_t n;          /* elements per row of the iterator */
    int64_t piece;      /* elements per piece when rows are split; 0: whole rows */
    int64_t pieces;     /* pieces per row */
} iter_job;

/* Byte offsets of outer row r (dims 0..nd-2) for each operand. */
static void row_offsets(const op_iter *it, int64_t r, int64_t *off, int64_t *idx)
{
    int nd = it->ndim;
    for (int k = 0; k < it->nops; k++) off[k] = 0;
    for (int d = nd - 2; d >= 0; d--) {
        int64_t sz = it->sizes[d];
        idx[d] = r % sz;
        r /= sz;
        for (int k = 0; k < it->nops; k++) off[k] += idx[d] * it->strides[k][d];
    }
}

static void iter_task(void *vj, int64_t b, int64_t e)
{
    const iter_job *j = vj;
    const op_iter *it = j->it;
    int nd = it->ndim, nops = it->nops;
    int64_t inner[OP_ITER_MAX_OPS], off[OP_ITER_MAX_OPS], idx[RGPU_MAX_DIMS] = {0};
    char *p[OP_ITER_MAX_OPS];
    for (int k = 0; k < nops; k++) inner[k] = it->strides[k][nd - 1];
    if (j->piece) {                 /* items are (row, piece) pairs */
        for (int64_t t = b; t < e; t++) {
            int64_t r = t / j->pieces, q = t % j->pieces;
            int64_t i0 = q * j->piece, m = j->n - i0 < j->piece ? j->n - i0 : j->piece;
            row_offsets(it, r, off, idx);
            for (int k = 0; k < nops; k++) p[k] = it->base[k] + off[k] + i0 * inner[k];
            j->row(p, inner, m, j->ctx);
        }
        return;
    }
    row_offsets(it, b, off, idx);   /* items are rows: walk them as the serial loop does */
    for (int64_t r = b;;) {
        for (int k = 0; k < nops; k++) p[k] = it->base[k] + off[k];
        j->row(p, inner, j->n, j->ctx);
        if (++r >= e) break;
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < it->sizes[d]) {
                for (int k = 0; k < nops; k++) off[k] += it->strides[k][d];
                break;
            }
            for (int k = 0; k < nops; k++) off[k] -= it->strides[k][d] * (it->sizes[d] - 1);
            idx[d] = 0;
        }
    }
}

void rgpu_cpu_iter_run(const op_iter *it, op_row_fn row, void *ctx, int64_t grain)
{
    if (it->numel == 0) return;
    if (grain < 1024) grain = 1024;
    if (it->numel <= grain) { rgpu_op_iter_run(it, row, ctx); return; }
    /* operand 0 must not repeat an element across rows (no stride-0 dim) */
    for (int d = 0; d < it->ndim; d++)
        if (it->sizes[d] > 1 && it->strides[0][d] == 0) { rgpu_op_iter_run(it, row, ctx); return; }
    iter_job j = { it, row, ctx, it->sizes[it->ndim - 1], 0, 1 };
    int64_t rows = it->numel / j.n;
    if (j.n >= grain) {
        j.piece = grain / 64 * 64;               /* keeps vector loops aligned to the row's start */
        j.pieces = (j.n + j.piece - 1) / j.piece;
        rgpu_pool_for(rows * j.pieces, 1, iter_task, &j);
    } else {
        rgpu_pool_for(rows, grain / j.n, iter_task, &j);
    }
}
