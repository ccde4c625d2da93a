/* cpu_index.c — the CPU index family: dispatch, shared checks, and the
 * gather/scatter/index kernels (embedding and its backward, gather, scatter,
 * scatter_add, index_select, index_add, index.Tensor, index_put).
 * cat/pad/nonzero/masked_select/unique live in cpu_index_data.c, the Philox
 * random ops and dropout in rgpu_cpu_index_random.c.
 *
 * ATen semantics: indices are i64 or i32 (ATen 2.13 takes both everywhere
 * here); gather,
 * scatter, index_select, index_add and embedding reject negative indices,
 * index.Tensor/index_put wrap them (-1 -> last). Every index is validated
 * before anything is written, so a bad index leaves outputs untouched.
 * Accumulating ops (scatter_add, index_add, index_put(accumulate),
 * embedding backward) add in a fixed order (row-major over the index), so
 * results are deterministic. Ops whose out may be self (scatter, index_add,
 * index_put) first copy self into out when out is a different tensor. */
#include <stdio.h>
#include <stdlib.h>

#include "cpu_families.h"
#include "cpu_index.h"

/* ---------------------------------------------------------------------------
 * Views */

void rgpu_cpu_index_copy_view(rgpu_view *dst, const rgpu_view *src)
{
    op_walk w;
    op_walk_init(&w, dst->ndim, dst->sizes);
    op_walk_strides(&w, 0, dst);
    op_walk_strides(&w, 1, src);
    if (rgpu_op_numel(dst) == 0) return;
    char *o = dst->data;
    const char *s = src->data;
    do op_elem_convert(o + w.off[0], dst->dtype, s + w.off[1], src->dtype);
    while (op_walk_next(&w));
}

/* Loads a 0-d or 1-d index into a malloc'd int64 array of *n entries, each
 * checked to lie in [0, size). *out is NULL when n == 0. */
static rgpu_status load_vector_index(const rgpu_exec *e, const rgpu_view *index, int dim, int64_t size,
                                     int64_t **out, int64_t *n, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    if (index->ndim > 1)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: index is supposed to be a vector, got %d dims", name, index->ndim);
    int64_t cnt = rgpu_op_numel(index);
    *out = NULL;
    *n = cnt;
    if (cnt == 0) return RGPU_OK;
    int64_t *v = rgpu_op_alloc(cnt, sizeof *v);
    if (v == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lld indices", name, (long long)cnt);
    int64_t s = rgpu_op_index_bstride(index, 0);
    for (int64_t i = 0; i < cnt; i++) {
        v[i] = op_idx_load_index((const char *)index->data + i * s, index->dtype);
        if (v[i] < 0 || v[i] >= size) {
            long long bad = (long long)v[i];
            free(v);
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: index %lld is out of bounds for dimension %d with size %lld",
                     name, bad, dim, (long long)size);
        }
    }
    *out = v;
    return RGPU_OK;
}

/* Writes self into out unless out is self (in-place). */
static rgpu_status copy_self_into_out(const rgpu_exec *e, rgpu_view *out, const rgpu_view *self,
                                      char *err, size_t errlen)
{
    bool copy;
    FORWARD_IF_ERROR(rgpu_op_index_self_into_out(e, out, self, &copy, err, errlen));
    if (copy) rgpu_cpu_index_copy_view(out, self);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * EMBEDDING: weight (V, D), indices (*) i64/i32 -> out (*, D) = weight[indices].
 * padding_idx (arg 0, int or NONE, may be absent) only matters in backward. */

static rgpu_status op_embedding(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_embedding_check(e, err, errlen));
    const rgpu_view *wt = e->in[0], *ix = e->in[1];
    rgpu_view *out = e->out[0];
    if (rgpu_op_numel(ix) == 0) return RGPU_OK;

    int64_t V = wt->sizes[0], D = wt->sizes[1];
    op_walk w;
    op_walk_init(&w, ix->ndim, ix->sizes);
    op_walk_strides(&w, 0, ix);
    do {   /* validate first: nothing written on a bad index */
        int64_t v = op_idx_load_index((const char *)ix->data + w.off[0], ix->dtype);
        if (v < 0 || v >= V)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "embedding: index %lld is out of bounds for dimension 0 with size %lld",
                     (long long)v, (long long)V);
    } while (op_walk_next(&w));

    size_t esz = rgpu_dtype_size(wt->dtype);
    int64_t ws0 = rgpu_op_index_bstride(wt, 0), ws1 = rgpu_op_index_bstride(wt, 1), os = rgpu_op_index_bstride(out, ix->ndim);
    op_walk_init(&w, ix->ndim, ix->sizes);
    op_walk_strides(&w, 0, ix);
    op_walk_strides(&w, 1, out);
    do {
        int64_t v = op_idx_load_index((const char *)ix->data + w.off[0], ix->dtype);
        const char *src = (const char *)wt->data + v * ws0;
        char *dst = (char *)out->data + w.off[1];
        for (int64_t j = 0; j < D; j++) op_elem_copy(dst + j * os, src + j * ws1, esz);
    } while (op_walk_next(&w));
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * EMBEDDING_BACKWARD: grad (*, D), indices (*) -> out (num_weights, D).
 * out[k] = sum over positions i (row-major) with indices[i] == k != padding_idx
 * of grad[i] * scale, scale = 1/count(k) with scale_grad_by_freq, else 1;
 * each add is out[k] + scale*grad[i] in the dtype's opmath (ATen's
 * grad_weight[k].add_(grad[i], scale)). */

static rgpu_status op_embedding_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_embbw p;
    FORWARD_IF_ERROR(rgpu_op_index_embedding_backward_check(e, &p, err, errlen));
    const rgpu_view *g = e->in[0], *ix = e->in[1];
    rgpu_view *out = e->out[0];
    const char *name = "embedding_dense_backward";

    op_walk wi;
    if (p.n > 0) {   /* validate before writing */
        op_walk_init(&wi, ix->ndim, ix->sizes);
        op_walk_strides(&wi, 0, ix);
        do {
            int64_t k = op_idx_load_index((const char *)ix->data + wi.off[0], ix->dtype);
            if (k != p.pad && (k < 0 || k >= p.nw))
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: index %lld is out of bounds for dimension 0 with size %lld",
                         name, (long long)k, (long long)p.nw);
        } while (op_walk_next(&wi));
    }
    int64_t *counts = NULL;
    if (p.by_freq && p.n > 0) {
        counts = calloc((size_t)(p.nw > 0 ? p.nw : 1), sizeof *counts);
        if (counts == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for counts", name);
        op_walk_init(&wi, ix->ndim, ix->sizes);
        op_walk_strides(&wi, 0, ix);
        do {
            int64_t k = op_idx_load_index((const char *)ix->data + wi.off[0], ix->dtype);
            if (k >= 0 && k < p.nw) counts[k]++;
        } while (op_walk_next(&wi));
    }

    /* out = 0 */
    int dt = out->dtype;
    size_t esz = rgpu_dtype_size(dt);
    if (rgpu_op_numel(out) > 0) {
        op_walk wo;
        op_walk_init(&wo, 2, out->sizes);
        op_walk_strides(&wo, 0, out);
        char zero[16] = {0};
        do op_elem_copy((char *)out->data + wo.off[0], zero, esz);
        while (op_walk_next(&wo));
    }
    if (p.n == 0 || p.D == 0) { free(counts); return RGPU_OK; }

    /* grad rows walk in lockstep with the indices (both row-major, n rows) */
    op_walk wg;
    op_walk_init(&wg, g->ndim - 1, g->sizes);
    op_walk_strides(&wg, 0, g);
    op_walk_init(&wi, ix->ndim, ix->sizes);
    op_walk_strides(&wi, 0, ix);
    int64_t gs = rgpu_op_index_bstride(g, g->ndim - 1), os0 = rgpu_op_index_bstride(out, 0), os1 = rgpu_op_index_bstride(out, 1);
    for (int64_t i = 0; i < p.n; i++) {
        int64_t k = op_idx_load_index((const char *)ix->data + wi.off[0], ix->dtype);
        if (k != p.pad) {
            op_idx_alpha a = op_idx_alpha_one();
            if (counts != NULL) {
                double sc = 1.0 / (double)counts[k];
                /* grad_weight[k].add_(grad[i], scale): as index_add's slices */
                a.one = sc == 1.0; a.d = sc; a.f = op_round_to(dt, (float)sc);
                a.fused = true;
                a.round_prod = dt == RGPU_F16 || dt == RGPU_BF16;
            }
            const char *src = (const char *)g->data + wg.off[0];
            char *dst = (char *)out->data + k * os0;
            for (int64_t j = 0; j < p.D; j++) op_idx_elem_reduce(dst + j * os1, src + j * gs, dt, OP_IDX_ADD, &a);
        }
        op_walk_next(&wi);
        op_walk_next(&wg);
    }
    free(counts);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * GATHER: out[..., j, ...] = self[..., index[..., j, ...], ...] along dim.
 * index (i64 or i32, as ATen 2.13) has self's dim count and sizes <= self's except at dim; out
 * has index's shape. */

static rgpu_status op_gather(const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_dimop p;
    FORWARD_IF_ERROR(rgpu_op_index_gather_check(e, &p, err, errlen));
    if (rgpu_op_numel(p.ix) == 0) return RGPU_OK;

    op_walk w;
    op_walk_init(&w, p.nd, p.isz);
    op_walk_strides(&w, 0, p.ix);
    do {
        int64_t v = op_idx_load_index((const char *)p.ix->data + w.off[0], p.ix->dtype);
        if (v < 0 || v >= p.ssz[p.dim])
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "gather: index %lld is out of bounds for dimension %d with size %lld",
                     (long long)v, p.dim, (long long)p.ssz[p.dim]);
    } while (op_walk_next(&w));

    size_t esz = rgpu_dtype_size(p.self->dtype);
    int64_t sdim = rgpu_op_index_bstride(p.self, p.dim);
    op_walk_init(&w, p.nd, p.isz);
    op_walk_strides(&w, 0, p.ix);
    op_walk_strides(&w, 1, p.out);
    op_walk_strides(&w, 2, p.self);
    w.st[2][p.dim] = 0;
    do {
        int64_t v = op_idx_load_index((const char *)p.ix->data + w.off[0], p.ix->dtype);
        op_elem_copy((char *)p.out->data + w.off[1], (const char *)p.self->data + w.off[2] + v * sdim, esz);
    } while (op_walk_next(&w));
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * f16/bf16 accumulation in f32. ATen's scatter kernels (scatter_add, scatter
 * with reduce, and index_add when it takes the scatter_add path) accumulate
 * reduced-precision tensors in f32 and round once at the end; a target is
 * loaded into the f32 buffer on its first touch and stored back if touched.
 * Buffer slots are out's row-major element numbers. */

typedef struct facc {
    float *acc;
    uint8_t *touched;
    int64_t n;
} facc;

static rgpu_status facc_init(const rgpu_exec *e, facc *f, const rgpu_view *out, char *err, size_t errlen)
{
    f->n = rgpu_op_numel(out);
    f->acc = rgpu_op_alloc(f->n, sizeof *f->acc);
    f->touched = f->acc ? calloc((size_t)(f->n > 0 ? f->n : 1), 1) : NULL;
    if (f->acc == NULL || f->touched == NULL) {
        free(f->acc);
        free(f->touched);
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for an f32 accumulator of %lld elements",
                 rgpu_op_name(e->op), (long long)f->n);
    }
    return RGPU_OK;
}

/* Element l (at dst in out) op= src (both of dtype dt), in f32. */
static inline void facc_apply(facc *f, int64_t l, const char *dst, const char *src, int dt, int mode)
{
    if (!f->touched[l]) { f->acc[l] = op_load_f32(dst, dt); f->touched[l] = 1; }
    float y = op_load_f32(src, dt);
    f->acc[l] = mode == OP_IDX_MUL ? f->acc[l] * y : f->acc[l] + y;
}

static void facc_flush(facc *f, rgpu_view *out)
{
    if (f->n > 0) {
        op_walk w;
        op_walk_init(&w, out->ndim, out->sizes);
        op_walk_strides(&w, 0, out);
        int64_t l = 0;
        do {
            if (f->touched[l]) op_store_f32((char *)out->data + w.off[0], out->dtype, f->acc[l]);
            l++;
        } while (op_walk_next(&w));
    }
    free(f->acc);
    free(f->touched);
}

/* Row-major element strides of a shape (a 0-d view as (1,)) into st; the
 * element stride of dim d is st[d]. */
static void contig_strides(const int64_t *sz, int nd, int64_t *st)
{
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) { st[d] = s; s *= sz[d]; }
}

/* ---------------------------------------------------------------------------
 * SCATTER / SCATTER_ADD: out = self, then for each index position p in
 * row-major order, out[p with dim := index[p]] (op)= src[p] (or the scalar
 * value cast to self's dtype). reduce: 0 assign (last write wins), 1 add,
 * 2 multiply. */

/* Every index in [0, self's size at dim) (else an error, nothing written),
 * then out = self; *any: the index has elements. */
static rgpu_status scatter_start(const rgpu_exec *e, const op_index_dimop *p, bool *any, char *err, size_t errlen)
{
    *any = rgpu_op_numel(p->ix) > 0;
    if (*any) {
        op_walk w;
        op_walk_init(&w, p->nd, p->isz);
        op_walk_strides(&w, 0, p->ix);
        do {
            int64_t v = op_idx_load_index((const char *)p->ix->data + w.off[0], p->ix->dtype);
            if (v < 0 || v >= p->ssz[p->dim])
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: index %lld is out of bounds for dimension %d with size %lld",
                         p->name, (long long)v, p->dim, (long long)p->ssz[p->dim]);
        } while (op_walk_next(&w));
    }
    return copy_self_into_out(e, p->out, p->self, err, errlen);
}

/* The walk over index: set 0 index, set 1 out (dim's stride 0), set 2 src
 * (when given), set 3 out's row-major element numbers (dim's 0); cst: the
 * row-major strides of self's shape (contig_strides, filled here). */
static void scatter_walk(const op_index_dimop *p, int64_t *cst, op_walk *w)
{
    contig_strides(p->ssz, p->nd, cst);
    op_walk_init(w, p->nd, p->isz);
    op_walk_strides(w, 0, p->ix);
    op_walk_strides(w, 1, p->out);
    w->st[1][p->dim] = 0;
    if (p->src) op_walk_strides(w, 2, p->src);
    for (int d = 0; d < p->nd; d++) w->st[3][d] = d == p->dim ? 0 : cst[d];
}

static rgpu_status op_scatter(const rgpu_exec *e, bool add_only, char *err, size_t errlen)
{
    op_index_dimop p;
    FORWARD_IF_ERROR(rgpu_op_index_scatter_check(e, add_only, &p, err, errlen));
    bool any;
    FORWARD_IF_ERROR(scatter_start(e, &p, &any, err, errlen));
    if (!any) return RGPU_OK;

    op_walk w;
    int dt = p.out->dtype;
    int64_t odim = rgpu_op_index_bstride(p.out, p.dim), cst[RGPU_MAX_DIMS];
    op_idx_alpha one = op_idx_alpha_one();
    bool f32acc = (dt == RGPU_F16 || dt == RGPU_BF16) && p.reduce != OP_IDX_ASSIGN;
    facc f = { 0 };
    if (f32acc) FORWARD_IF_ERROR(facc_init(e, &f, p.out, err, errlen));
    scatter_walk(&p, cst, &w);
    do {
        int64_t v = op_idx_load_index((const char *)p.ix->data + w.off[0], p.ix->dtype);
        const char *s = p.src ? (const char *)p.src->data + w.off[2] : (const char *)&p.value;
        char *t = (char *)p.out->data + w.off[1] + v * odim;
        if (f32acc) facc_apply(&f, w.off[3] + v * cst[p.dim], t, s, dt, (int)p.reduce);
        else op_idx_elem_reduce(t, s, dt, (int)p.reduce, &one);
    } while (op_walk_next(&w));
    if (f32acc) facc_flush(&f, p.out);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * SCATTER_REDUCE: out = self, then each out element index reaches is reduced
 * with the src elements aimed at it, in row-major index order, through one
 * accumulator per out element (op/index.h: op_sr_*). */

static rgpu_status op_scatter_reduce(const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_dimop p;
    bool incl;
    FORWARD_IF_ERROR(rgpu_op_index_scatter_reduce_check(e, &p, &incl, err, errlen));
    bool any;
    FORWARD_IF_ERROR(scatter_start(e, &p, &any, err, errlen));
    if (!any) return RGPU_OK;

    op_walk w;
    int dt = p.out->dtype, mode = (int)p.reduce;
    int64_t nout = rgpu_op_numel(p.out), odim = rgpu_op_index_bstride(p.out, p.dim), cst[RGPU_MAX_DIMS];
    op_sr_acc *acc = rgpu_op_alloc(nout, sizeof *acc);
    int64_t *cnt = acc ? calloc((size_t)nout, sizeof *cnt) : NULL;
    if (cnt == NULL) {
        free(acc);
        RETURN_ERROR(RGPU_ERR_NOMEM, "scatter_reduce: out of memory for %lld accumulators", (long long)nout);
    }
    scatter_walk(&p, cst, &w);
    do {
        int64_t v = op_idx_load_index((const char *)p.ix->data + w.off[0], p.ix->dtype);
        int64_t l = w.off[3] + v * cst[p.dim];
        if (cnt[l]++ == 0) op_sr_start(&acc[l], (const char *)p.out->data + w.off[1] + v * odim, dt, mode, incl);
        op_sr_combine(&acc[l], (const char *)p.src->data + w.off[2], dt, mode);
    } while (op_walk_next(&w));

    op_walk_init(&w, p.nd, p.ssz);
    for (int d = 0; d < p.nd; d++) w.st[0][d] = rgpu_op_index_bstride(p.out, d);
    int64_t l = 0;
    do {
        if (cnt[l]) op_sr_finish((char *)p.out->data + w.off[0], &acc[l], cnt[l], dt, mode, incl);
        l++;
    } while (op_walk_next(&w));
    free(acc);
    free(cnt);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * INDEX_SELECT: out = self with dim restricted to index (0-d/1-d, i64/i32). */

static rgpu_status op_index_select(const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_dimop p;
    FORWARD_IF_ERROR(rgpu_op_index_select_check(e, &p, err, errlen));
    int64_t *iv, n;
    FORWARD_IF_ERROR(load_vector_index(e, p.ix, p.dim, p.ssz[p.dim], &iv, &n, err, errlen));
    if (rgpu_op_numel(p.out) == 0) { free(iv); return RGPU_OK; }

    size_t esz = rgpu_dtype_size(p.self->dtype);
    int64_t sdim = rgpu_op_index_bstride(p.self, p.dim);
    op_walk w;
    rgpu_op_index_select_walk(&p, &w);
    do op_elem_copy((char *)p.out->data + w.off[0], (const char *)p.self->data + w.off[1] + iv[w.idx[p.dim]] * sdim, esz);
    while (op_walk_next(&w));
    free(iv);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * INDEX_ADD: out = self; out[.., index[i], ..] += alpha * source[.., i, ..]
 * along dim, i ascending (row-major over source). */

static rgpu_status op_index_add(const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_dimop p;
    FORWARD_IF_ERROR(rgpu_op_index_add_check(e, &p, err, errlen));
    int dt = p.self->dtype, dim = p.dim, nd = p.nd;
    int64_t *iv, n;
    FORWARD_IF_ERROR(load_vector_index(e, p.ix, dim, p.ssz[dim], &iv, &n, err, errlen));
    rgpu_status st = copy_self_into_out(e, p.out, p.self, err, errlen);
    if (st != RGPU_OK || rgpu_op_numel(p.src) == 0) { free(iv); return st; }

    /* ATen sends alpha multi-dim index_add along the first or last dim with
     * alpha 1 and an int64 index through scatter_add, which accumulates
     * f16/bf16 in f32; the other cases add slice by slice, rounding each add. */
    bool f32acc = (dt == RGPU_F16 || dt == RGPU_BF16) && p.self->ndim > 1 && (dim == 0 || dim == nd - 1) &&
                  p.alpha_v == 1.0 && p.ix->dtype == RGPU_I64;
    facc f = { 0 };
    if (f32acc) {
        st = facc_init(e, &f, p.out, err, errlen);
        if (st != RGPU_OK) { free(iv); return st; }
    }
    int64_t odim = rgpu_op_index_bstride(p.out, dim), cst[RGPU_MAX_DIMS];
    contig_strides(p.ssz, nd, cst);
    op_walk w;
    op_walk_init(&w, nd, p.rsz);
    op_walk_strides(&w, 0, p.src);
    op_walk_strides(&w, 1, p.out);
    w.st[1][dim] = 0;
    for (int d = 0; d < nd; d++) w.st[3][d] = d == dim ? 0 : cst[d];
    do {
        int64_t v = iv[w.idx[dim]];
        char *t = (char *)p.out->data + w.off[1] + v * odim;
        const char *s = (const char *)p.src->data + w.off[0];
        if (f32acc) facc_apply(&f, w.off[3] + v * cst[dim], t, s, dt, OP_IDX_ADD);
        else op_idx_elem_reduce(t, s, dt, OP_IDX_ADD, &p.alpha);
    } while (op_walk_next(&w));
    if (f32acc) facc_flush(&f, p.out);
    free(iv);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Advanced indexing geometry (index.Tensor, index_put): rgpu_op_index_geom_shape
 * (op/index.h), plus boff[b], the byte offset into the target (self for
 * index, out for index_put) of B element b. */

typedef struct idx_geom {
    op_index_geom s;
    int64_t *boff;
} idx_geom;

static rgpu_status geom_build(const rgpu_exec *e, idx_geom *g, const rgpu_view *self, const rgpu_view *target,
                              const rgpu_view *const *idx, int nidx, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    g->boff = NULL;
    FORWARD_IF_ERROR(rgpu_op_index_geom_shape(e, &g->s, self, idx, nidx, err, errlen));
    g->boff = rgpu_op_alloc(g->s.nbel, sizeof *g->boff);
    if (g->boff != NULL) memset(g->boff, 0, (size_t)(g->s.nbel > 0 ? g->s.nbel : 1) * sizeof *g->boff);
    if (g->boff == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lld index offsets", name, (long long)g->s.nbel);
    if (g->s.nbel == 0) return RGPU_OK;
    for (int k = 0; k < nidx; k++) {
        const rgpu_view *v = idx[k];
        if (v == NULL) continue;
        op_walk w;
        op_walk_init(&w, g->s.nb, g->s.bsz);
        int lead = g->s.nb - v->ndim;
        int64_t esz = (int64_t)rgpu_dtype_size(v->dtype);
        for (int d = 0; d < v->ndim; d++)
            w.st[0][lead + d] = v->sizes[d] == 1 ? 0 : v->strides[d] * esz;
        int64_t size = self->sizes[k], ts = rgpu_op_index_bstride(target, k);
        int64_t b = 0;
        do {
            int64_t x = op_idx_load_index((const char *)v->data + w.off[0], v->dtype);
            if (x < -size || x >= size) {
                free(g->boff);
                g->boff = NULL;
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: index %lld is out of bounds for dimension %d with size %lld",
                         name, (long long)x, k, (long long)size);
            }
            if (x < 0) x += size;
            g->boff[b++] += x * ts;
        } while (op_walk_next(&w));
    }
    return RGPU_OK;
}

/* Walk over the result dims: stride set 0 = out (or values), 1 = the
 * target's un-indexed dims, 2 = B element number. */
static void geom_walk(const idx_geom *g, op_walk *w, const rgpu_view *target)
{
    op_walk_init(w, g->s.R, g->s.rsz);
    int64_t bst[RGPU_MAX_DIMS], s = 1;
    for (int j = g->s.nb - 1; j >= 0; j--) { bst[j] = s; s *= g->s.bsz[j]; }
    for (int r = 0; r < g->s.R; r++) {
        if (g->s.rdim[r] >= 0) w->st[1][r] = rgpu_op_index_bstride(target, g->s.rdim[r]);
        else w->st[2][r] = bst[-1 - g->s.rdim[r]];
    }
}

/* INDEX: out (result shape) = self[idx0, idx1, ...]. */
static rgpu_status op_index(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io_var(e, 1, 1, true, "r", err, errlen));
    const rgpu_view *self = e->in[0];
    rgpu_view *out = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, out, "out", self->dtype, err, errlen));
    idx_geom g;
    FORWARD_IF_ERROR(geom_build(e, &g, self, self, &e->in[1], e->n_in - 1, err, errlen));
    rgpu_status st = rgpu_op_index_check_out_shape(e, out, g.s.R, g.s.rsz, err, errlen);
    if (st == RGPU_OK && rgpu_op_numel(out) > 0) {
        size_t esz = rgpu_dtype_size(self->dtype);
        op_walk w;
        geom_walk(&g, &w, self);
        for (int r = 0; r < g.s.R; r++) w.st[0][r] = rgpu_op_index_bstride(out, r);
        do op_elem_copy((char *)out->data + w.off[0], (const char *)self->data + w.off[1] + g.boff[w.off[2]], esz);
        while (op_walk_next(&w));
    }
    free(g.boff);
    return st;
}

/* INDEX_PUT: out = self; out[idx0, ...] = values (broadcast to the result
 * shape), or += with accumulate. Row-major over the result: with duplicate
 * indices the last write wins, or the adds happen in that order. */
static rgpu_status op_index_put(const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_put_args p;
    FORWARD_IF_ERROR(rgpu_op_index_put_check(e, &p, err, errlen));
    idx_geom g;
    FORWARD_IF_ERROR(geom_build(e, &g, p.self, p.out, p.idx, p.nidx, err, errlen));

    /* values broadcast to the result shape */
    op_walk w;
    geom_walk(&g, &w, p.out);
    bool ok = p.vals->ndim <= g.s.R;
    int lead = g.s.R - p.vals->ndim;
    int64_t vesz = (int64_t)rgpu_dtype_size(p.vals->dtype);
    for (int d = 0; ok && d < p.vals->ndim; d++) {
        int64_t s = p.vals->sizes[d];
        if (s == g.s.rsz[lead + d]) w.st[0][lead + d] = s == 1 ? 0 : p.vals->strides[d] * vesz;
        else if (s == 1) w.st[0][lead + d] = 0;
        else ok = false;
    }
    if (!ok) {
        rgpu_view rv;
        memset(&rv, 0, sizeof rv);
        rv.ndim = g.s.R;
        for (int r = 0; r < g.s.R; r++) rv.sizes[r] = g.s.rsz[r];
        char a[96], b[96];
        free(g.boff);
        RETURN_ERROR(RGPU_ERR_SHAPE, "index_put: shape mismatch: value tensor of shape %s cannot be broadcast "
                 "to indexing result of shape %s", rgpu_op_index_shape_str(p.vals, a, sizeof a),
                 rgpu_op_index_shape_str(&rv, b, sizeof b));
    }
    rgpu_status st = copy_self_into_out(e, p.out, p.self, err, errlen);
    int64_t nres = 1;
    for (int r = 0; r < g.s.R; r++) nres *= g.s.rsz[r];
    if (st == RGPU_OK && nres > 0) {
        op_idx_alpha one = op_idx_alpha_one();
        int mode = p.acc ? OP_IDX_ADD : OP_IDX_ASSIGN;
        do op_idx_elem_reduce((char *)p.out->data + w.off[1] + g.boff[w.off[2]], (const char *)p.vals->data + w.off[0],
                           p.dt, mode, &one);
        while (op_walk_next(&w));
    }
    free(g.boff);
    return st;
}

/* ---------------------------------------------------------------------------
 * Dispatch */

rgpu_status rgpu_cpu_index_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_EMBEDDING:          return op_embedding(e, err, errlen);
    case RGPU_OP_EMBEDDING_BACKWARD: return op_embedding_backward(e, err, errlen);
    case RGPU_OP_GATHER:             return op_gather(e, err, errlen);
    case RGPU_OP_SCATTER:            return op_scatter(e, false, err, errlen);
    case RGPU_OP_SCATTER_ADD:        return op_scatter(e, true, err, errlen);
    case RGPU_OP_SCATTER_REDUCE:     return op_scatter_reduce(e, err, errlen);
    case RGPU_OP_INDEX_SELECT:       return op_index_select(e, err, errlen);
    case RGPU_OP_INDEX_ADD:          return op_index_add(e, err, errlen);
    case RGPU_OP_INDEX:              return op_index(e, err, errlen);
    case RGPU_OP_INDEX_PUT:          return op_index_put(e, err, errlen);
    case RGPU_OP_CAT:                return rgpu_cpu_index_cat(e, err, errlen);
    case RGPU_OP_CONSTANT_PAD_ND:    return rgpu_cpu_index_pad(e, err, errlen);
    case RGPU_OP_UNIFORM: case RGPU_OP_NORMAL: case RGPU_OP_BERNOULLI:
    case RGPU_OP_RANDOM: case RGPU_OP_RANDPERM:
        return rgpu_cpu_index_random(e, err, errlen);
    case RGPU_OP_NATIVE_DROPOUT:     return rgpu_cpu_index_dropout(e, err, errlen);
    case RGPU_OP_NATIVE_DROPOUT_BACKWARD: return rgpu_cpu_index_dropout_backward(e, err, errlen);
    case RGPU_OP_COUNT_NONZERO:      return rgpu_cpu_index_count_nonzero(e, err, errlen);
    case RGPU_OP_NONZERO:            return rgpu_cpu_index_nonzero(e, err, errlen);
    case RGPU_OP_MASKED_SELECT:      return rgpu_cpu_index_masked_select(e, err, errlen);
    case RGPU_OP_COUNT_UNIQUE:       return rgpu_cpu_index_unique(e, true, err, errlen);
    case RGPU_OP_UNIQUE:             return rgpu_cpu_index_unique(e, false, err, errlen);
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cpu index family: unsupported op %s", rgpu_op_name(e->op));
    }
}
