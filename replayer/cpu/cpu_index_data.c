/* cpu_index_data.c — index-family ops that move whole blocks or depend on
 * the data for their output size: cat, constant_pad_nd, count_nonzero,
 * nonzero, masked_select, count_unique and _unique2.
 *
 * The data-dependent ops arrive in pairs: the client first asks for the
 * count (COUNT_NONZERO / COUNT_UNIQUE, a WAIT op whose out[0] is a 0-d i64
 * scratch the session adds), then records the op with an output of that
 * size. Each op recounts and fails with RGPU_ERR_SHAPE when out's size does
 * not match. Element order is row-major over the input's logical shape. */
#include <stdio.h>
#include <stdlib.h>

#include "cpu_index.h"

/* ---------------------------------------------------------------------------
 * CAT: inputs t0..tk-1 joined along dim into out; each input cast to out's
 * dtype. A legacy empty 1-d tensor (size (0,)) is skipped as ATen does; dim
 * is wrapped against the first input that is not skipped. */

rgpu_status rgpu_cpu_index_cat(const rgpu_exec *e, char *err, size_t errlen)
{
    int dim;
    FORWARD_IF_ERROR(rgpu_op_index_cat_check(e, &dim, err, errlen));
    if (dim < 0) return RGPU_OK;   /* every input is legacy-empty */
    for (int i = 0; i < e->n_in; i++) {
        rgpu_view slice;   /* out's part for input i */
        if (!rgpu_op_index_cat_slice(e, dim, i, &slice)) continue;
        rgpu_cpu_index_copy_view(&slice, e->in[i]);   /* over the pool, in rows */
    }
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * CONSTANT_PAD_ND: pad (INTS) pairs (before, after) from the last dim
 * backwards, negative entries crop; new cells get value (scalar arg, NONE or
 * absent = 0) cast to out's dtype. */

rgpu_status rgpu_cpu_index_pad(const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_pad_args pa;
    FORWARD_IF_ERROR(rgpu_op_index_pad_prepare(e, &pa, err, errlen));
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    if (rgpu_op_numel(out) == 0) return RGPU_OK;

    /* out = value (a 0-d view of it, broadcast), then the part the input covers */
    rgpu_view fill;
    memset(&fill, 0, sizeof fill);
    fill.data = &pa.value;
    fill.dtype = out->dtype;
    rgpu_cpu_index_copy_view(out, &fill);

    int nd = in->ndim;
    int64_t esz = (int64_t)rgpu_dtype_size(out->dtype);
    rgpu_view ob = *out, ib = *in;
    for (int d = 0; d < nd; d++) {
        int64_t r = pa.b[d] > pa.a[d] ? pa.b[d] - pa.a[d] : 0;
        if (r == 0) return RGPU_OK;
        ob.sizes[d] = ib.sizes[d] = r;
        ob.data = (char *)ob.data + pa.a[d] * out->strides[d] * esz;
        ib.data = (char *)ib.data + (pa.a[d] - pa.lo[d]) * in->strides[d] * esz;
    }
    rgpu_cpu_index_copy_view(&ob, &ib);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Nonzero family */

static int64_t count_nonzero(const rgpu_view *x)
{
    if (rgpu_op_numel(x) == 0) return 0;
    int64_t n = 0;
    op_walk w;
    op_walk_init(&w, x->ndim, x->sizes);
    op_walk_strides(&w, 0, x);
    const char *p = x->data;
    do n += op_load_bool(p + w.off[0], x->dtype);
    while (op_walk_next(&w));
    return n;
}

/* COUNT_NONZERO: out[0] (0-d i64) = number of x != 0 (NaN counts). */
rgpu_status rgpu_cpu_index_count_nonzero(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "r", "r", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_count_out(e, err, errlen));
    *(int64_t *)e->out[0]->data = count_nonzero(e->in[0]);
    return RGPU_OK;
}

/* NONZERO: out (n, ndim) i64 (or i32), the coordinates of x's nonzeros in
 * row-major order. */
rgpu_status rgpu_cpu_index_nonzero(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_nonzero_check(e, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *out = e->out[0];
    int64_t n = count_nonzero(x);
    FORWARD_IF_ERROR(rgpu_op_index_nonzero_check_out(e, n, err, errlen));
    if (n == 0 || x->ndim == 0) return RGPU_OK;
    int64_t esz = (int64_t)rgpu_dtype_size(out->dtype);
    int64_t rs = out->strides[0] * esz, cs = out->strides[1] * esz;
    op_walk w;
    op_walk_init(&w, x->ndim, x->sizes);
    op_walk_strides(&w, 0, x);
    const char *p = x->data;
    char *row = out->data;
    do {
        if (!op_load_bool(p + w.off[0], x->dtype)) continue;
        for (int d = 0; d < x->ndim; d++) op_store_u64(row + d * cs, out->dtype, (uint64_t)w.idx[d]);
        row += rs;
    } while (op_walk_next(&w));
    return RGPU_OK;
}

/* MASKED_SELECT: self and mask (bool) of one shape -> out (n,) = self's
 * elements where mask is true, row-major. */
rgpu_status rgpu_cpu_index_masked_select(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_masked_select_check(e, err, errlen));
    const rgpu_view *self = e->in[0], *mask = e->in[1];
    rgpu_view *out = e->out[0];
    int64_t n = count_nonzero(mask);
    FORWARD_IF_ERROR(rgpu_op_index_masked_select_check_out(e, n, err, errlen));
    if (n == 0) return RGPU_OK;
    size_t esz = rgpu_dtype_size(self->dtype);
    int64_t os = out->strides[0] * (int64_t)esz;
    op_walk w;
    op_walk_init(&w, self->ndim, self->sizes);
    op_walk_strides(&w, 0, self);
    op_walk_strides(&w, 1, mask);
    char *o = out->data;
    do {
        if (*((const uint8_t *)mask->data + w.off[1]) == 0) continue;
        op_elem_copy(o, (const char *)self->data + w.off[0], esz);
        o += os;
    } while (op_walk_next(&w));
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Unique (torch.unique on CPU, which always sorts): values ascending, NaN
 * after every number and each NaN distinct, -0.0 == 0.0. Equal values are
 * ordered by position, and a group's value is its first element's bits. */


/* COUNT_UNIQUE (count_only): out[0] = the number of distinct values.
 * UNIQUE: outs values (n,) in x's dtype, inverse? (x's shape, i64), counts?
 * (n,) i64; args sorted, return_inverse, return_counts (bools). */
rgpu_status rgpu_cpu_index_unique(const rgpu_exec *e, bool count_only, char *err, size_t errlen)
{
    op_index_unique_args u;
    FORWARD_IF_ERROR(rgpu_op_index_unique_check(e, count_only, &u, err, errlen));
    const rgpu_view *x = e->in[0];
    op_index_uq_item *it = NULL;
    if (u.N > 0) {
        it = rgpu_op_alloc(u.N, sizeof *it);
        if (it == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lld elements", u.name, (long long)u.N);
        op_walk w;
        op_walk_init(&w, x->ndim, x->sizes);
        op_walk_strides(&w, 0, x);
        int64_t i = 0;
        const char *p = x->data;
        do {
            if (u.fl) it[i].k.f = op_load_f64(p + w.off[0], x->dtype);
            else it[i].k.i = (int64_t)op_load_u64(p + w.off[0], x->dtype);
            it[i].pos = i;
            it[i].off = w.off[0];
            i++;
        } while (op_walk_next(&w));
    }
    int64_t n = rgpu_op_index_uq_sort(it, u.N, u.fl);   /* sorted; n groups */
    if (count_only) {
        *(int64_t *)e->out[0]->data = n;
        free(it);
        return RGPU_OK;
    }
    const rgpu_view *vo = e->out[0], *co = u.want_cnt ? e->out[2] : NULL;
    rgpu_status st = rgpu_op_index_unique_check_out(e, u.want_cnt, n, err, errlen);
    int64_t *inv = NULL;
    if (st == RGPU_OK && u.want_inv && u.N > 0) {
        inv = rgpu_op_alloc(u.N, sizeof *inv);
        if (inv == NULL) { rgpu_op_errf(err, errlen, "%s: out of memory", u.name); st = RGPU_ERR_NOMEM; }
    }
    if (st == RGPU_OK && u.N > 0) {
        size_t esz = rgpu_dtype_size(x->dtype);
        int64_t vs = vo->strides[0] * (int64_t)esz, cs = co ? co->strides[0] * 8 : 0;
        int64_t g = -1, cnt = 0;
        for (int64_t i = 0; i < u.N; i++) {
            if (rgpu_op_index_uq_new_group(it, i, u.fl)) {
                if (co && g >= 0) *(int64_t *)((char *)co->data + g * cs) = cnt;
                g++;
                cnt = 0;
                op_elem_copy((char *)vo->data + g * vs, (const char *)x->data + it[i].off, esz);
            }
            cnt++;
            if (inv) inv[it[i].pos] = g;
        }
        if (co) *(int64_t *)((char *)co->data + g * cs) = cnt;
        if (inv) {
            const rgpu_view *io = e->out[1];
            op_walk w;
            op_walk_init(&w, io->ndim, io->sizes);
            op_walk_strides(&w, 0, io);
            int64_t i = 0;
            do *(int64_t *)((char *)io->data + w.off[0]) = inv[i++];
            while (op_walk_next(&w));
        }
    }
    free(inv);
    free(it);
    return st;
}
