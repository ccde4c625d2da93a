/* cpu_reduce2_util.c — the helpers the CPU reduce2 files share
 * (cpu_reduce2_util.h): the N-d counter with one byte offset per operand and
 * row addressing over trailing dims. Below cpu_reduce2.c and
 * cpu_reduce2_norm.c; calls neither. */
#include <stdio.h>
#include <stdlib.h>

#include "cpu_reduce2_util.h"

/* ---------------------------------------------------------------------------
 * N-d counter and row addressing */

void rgpu_r2_ctr_init(r2_ctr *c, int n, const int64_t *sizes)
{
    memset(c, 0, sizeof *c);
    c->n = n;
    c->total = 1;
    for (int d = 0; d < n; d++) { c->sz[d] = sizes[d]; c->total *= sizes[d]; }
}

int rgpu_r2_ctr_add(r2_ctr *c, const int64_t *strides, int64_t esz)
{
    int k = c->nops++;
    for (int d = 0; d < c->n; d++) c->st[k][d] = strides ? strides[d] * esz : 0;
    return k;
}

void rgpu_r2_ctr_seek(r2_ctr *c, int64_t pos)
{
    for (int k = 0; k < c->nops; k++) c->off[k] = 0;
    for (int d = c->n - 1; d >= 0; d--) {
        int64_t sz = c->sz[d];
        c->idx[d] = sz > 0 ? pos % sz : 0;
        pos = sz > 0 ? pos / sz : 0;
        for (int k = 0; k < c->nops; k++) c->off[k] += c->idx[d] * c->st[k][d];
    }
}

/* Drops size-1 dims and merges a dim into the next inner one when every
 * operand steps through both as one (row-major order is kept). */
void rgpu_r2_ctr_coalesce(r2_ctr *c)
{
    int n = 0;
    for (int d = 0; d < c->n; d++) {
        if (c->sz[d] == 1) continue;
        if (n > 0) {
            bool merge = true;
            for (int k = 0; k < c->nops; k++)
                if (c->st[k][n - 1] != c->st[k][d] * c->sz[d]) { merge = false; break; }
            if (merge) {
                c->sz[n - 1] *= c->sz[d];
                for (int k = 0; k < c->nops; k++) c->st[k][n - 1] = c->st[k][d];
                continue;
            }
        }
        c->sz[n] = c->sz[d];
        for (int k = 0; k < c->nops; k++) c->st[k][n] = c->st[k][d];
        n++;
    }
    c->n = n;
}

rgpu_status rgpu_r2_row_init(r2_row *r, const rgpu_view *v, int first, char *err, size_t errlen)
{
    r2_ctr c;
    rgpu_r2_ctr_init(&c, v->ndim - first, v->sizes + first);
    rgpu_r2_ctr_add(&c, v->strides + first, (int64_t)rgpu_dtype_size(v->dtype));
    rgpu_r2_ctr_coalesce(&c);
    r->n = c.total;
    r->dtype = v->dtype;
    r->offs = NULL;
    r->stride = c.n > 0 ? c.st[0][c.n - 1] : 0;
    if (c.n <= 1 || c.total == 0) return RGPU_OK;
    r->offs = rgpu_op_alloc(c.total, sizeof *r->offs);
    if (r->offs == NULL)
        RETURN_ERROR(RGPU_ERR_NOMEM, "out of memory for the offsets of a row of %lld elements", (long long)c.total);
    int64_t i = 0;
    do r->offs[i++] = c.off[0]; while (r2_ctr_next(&c));
    return RGPU_OK;
}

void rgpu_r2_row_free(r2_row *r) { free(r->offs); r->offs = NULL; }

void rgpu_r2_row_load(const r2_row *r, const char *base, double *dst)
{
    if (r->offs == NULL) { cpu_load_row_f64(dst, base, r->dtype, r->stride, r->n); return; }
    const int64_t *o = r->offs;
    CPU_EACH_DTYPE(r->dtype, for (int64_t i = 0; i < r->n; i++) dst[i] = op_load_f64(base + o[i], DT_));
}

void rgpu_r2_row_store(const r2_row *r, char *base, const double *src)
{
    if (r->offs == NULL) { cpu_store_row_f64(base, r->dtype, r->stride, src, r->n); return; }
    const int64_t *o = r->offs;
    CPU_EACH_DTYPE(r->dtype, for (int64_t i = 0; i < r->n; i++) op_store_f64(base + o[i], DT_, src[i]));
}
