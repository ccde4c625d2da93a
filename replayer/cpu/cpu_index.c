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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_families.h"
#include "cpu_index.h"
#include "cpu_pool.h"

/* The byte stride of stride set k along a walk's row (its last dim). */
#define ROW_ST(w, k) ((w)->nd ? (w)->st[k][(w)->nd - 1] : 0)

/* ---------------------------------------------------------------------------
 * Views */

/* A row of dst = src (op/iter.h row function; operand 0 dst, 1 src). */
static void copy_row(char *const *p, const int64_t *s, int64_t n, void *ctx)
{
    const op_iter *it = ctx;
    int dd = it->dtype[0], sd = it->dtype[1];
    char *o = p[0];
    const char *a = p[1];
    if (dd != sd) {
        for (int64_t i = 0; i < n; i++) op_elem_convert(o + i * s[0], dd, a + i * s[1], sd);
        return;
    }
    cpu_copy_row_same(o, s[0], a, s[1], n, (int64_t)rgpu_dtype_size(dd));
}

void rgpu_cpu_index_copy_view(rgpu_view *dst, const rgpu_view *src)
{
    if (rgpu_op_numel(dst) == 0) return;
    /* a dst that repeats elements (stride 0) keeps the row-major order below:
     * the last write wins as it always did */
    bool fanout = false;
    for (int d = 0; d < dst->ndim; d++) fanout |= dst->sizes[d] > 1 && dst->strides[d] == 0;
    op_operand in = { src, NULL, 0 };
    op_iter it;
    char msg[8];
    if (!fanout && rgpu_op_iter_init(&it, dst, &in, 1, RGPU_OP_COPY, msg, sizeof msg) == RGPU_OK) {
        rgpu_cpu_iter_run(&it, copy_row, &it, 2 * CPU_ITER_GRAIN);
        return;
    }
    op_walk w;
    op_walk_init(&w, dst->ndim, dst->sizes);
    op_walk_strides(&w, 0, dst);
    op_walk_strides(&w, 1, src);
    char *o = dst->data;
    const char *s = src->data;
    do op_elem_convert(o + w.off[0], dst->dtype, s + w.off[1], src->dtype);
    while (op_walk_next(&w));
}

/* ---------------------------------------------------------------------------
 * Walks over the pool (cpu_index.h) */

typedef struct walk_job {
    const op_walk *w;
    cpu_walk_row_fn fn;
    void *ctx;
    int64_t L, piece, pieces;   /* row length; elements per piece, pieces per row */
} walk_job;

static void walk_task(void *vj, int64_t b, int64_t e)
{
    const walk_job *j = vj;
    op_walk w = *j->w;
    int nd = w.nd;
    if (j->pieces > 1) {        /* items are (row, piece) pairs */
        for (int64_t t = b; t < e; t++) {
            int64_t r = t / j->pieces, i0 = (t % j->pieces) * j->piece;
            op_walk_seek(&w, r * j->L + i0);
            j->fn(j->ctx, &w, j->L - i0 < j->piece ? j->L - i0 : j->piece);
        }
        return;
    }
    op_walk_seek(&w, b * j->L);  /* items are rows, walked as the serial loop does */
    for (int64_t r = b;;) {
        j->fn(j->ctx, &w, j->L);
        if (++r >= e) break;
        for (int d = nd - 2; d >= 0; d--) {
            if (++w.idx[d] < w.sz[d]) {
                for (int k = 0; k < OP_WALK_N; k++) w.off[k] += w.st[k][d];
                break;
            }
            for (int k = 0; k < OP_WALK_N; k++) w.off[k] -= w.st[k][d] * (w.sz[d] - 1);
            w.idx[d] = 0;
        }
    }
}

void rgpu_cpu_index_walk_rows(const op_walk *w, int64_t cost, cpu_walk_row_fn fn, void *ctx)
{
    int64_t L = w->nd ? w->sz[w->nd - 1] : 1, rows = 1;
    for (int d = 0; d + 1 < w->nd; d++) rows *= w->sz[d];
    if (L <= 0 || rows <= 0) return;
    walk_job j = { w, fn, ctx, L, L, 1 };
    int64_t g = rgpu_pool_grain(cost);      /* elements per chunk */
    if (L > g) {
        j.piece = (g + 63) / 64 * 64;
        j.pieces = (L + j.piece - 1) / j.piece;
        if (j.pieces > 1) { rgpu_pool_for(rows * j.pieces, 1, walk_task, &j); return; }
        j.piece = L;
        j.pieces = 1;
    }
    rgpu_pool_for(rows, g / L > 1 ? g / L : 1, walk_task, &j);
}

/* Whether every index the walk's set 0 reaches (dtype dt) lies in [0, size)
 * or equals *skip (NULL: none); over the pool. A failing caller rescans serially for the
 * first bad index, the one its message names. */
typedef struct range_job {
    const char *base;
    int dt;
    int64_t size, skip;
    bool has_skip;
    atomic_int bad;
} range_job;

static void range_row(void *ctx, const op_walk *w, int64_t n)
{
    range_job *j = ctx;
    const char *p = j->base + w->off[0];
    int64_t s = ROW_ST(w, 0), size = j->size, skip = j->has_skip ? j->skip : 0;
    bool bad = false, hs = j->has_skip;
    if (j->dt == RGPU_I64)
        for (int64_t i = 0; i < n; i++) {
            int64_t v = *(const int64_t *)(p + i * s);
            bad |= (uint64_t)v >= (uint64_t)size && !(hs && v == skip);
        }
    else
        for (int64_t i = 0; i < n; i++) {
            int64_t v = *(const int32_t *)(p + i * s);
            bad |= (uint64_t)v >= (uint64_t)size && !(hs && v == skip);
        }
    if (bad) atomic_store_explicit(&j->bad, 1, memory_order_relaxed);
}

static bool indices_in_range(const op_walk *w, const rgpu_view *ix, int64_t size, const int64_t *skip)
{
    range_job j = { ix->data, ix->dtype, size, skip ? *skip : 0, skip != NULL, 0 };
    rgpu_cpu_index_walk_rows(w, 1, range_row, &j);
    return atomic_load(&j.bad) == 0;
}

/* Byte offsets of every row-major position of dims [d0, d1) of sizes sz in
 * each of the nv views (a view's stride at d: rgpu_op_index_bstride), nv per
 * position; *count the positions. NULL when out of memory. */
static int64_t *dim_offsets(const int64_t *sz, int d0, int d1, const rgpu_view *const *v, int nv, int64_t *count)
{
    int64_t n = 1;
    for (int d = d0; d < d1; d++) n *= sz[d];
    *count = n;
    int64_t *t = rgpu_op_alloc(n * nv, sizeof *t);
    if (t == NULL || n == 0) return t;
    op_walk w;
    op_walk_init(&w, d1 - d0, sz + d0);
    for (int k = 0; k < nv; k++)
        for (int d = d0; d < d1; d++) w.st[k][d - d0] = v[k] ? rgpu_op_index_bstride(v[k], d) : 0;
    int64_t p = 0;
    do {
        for (int k = 0; k < nv; k++) t[p * nv + k] = w.off[k];
        p++;
    } while (op_walk_next(&w));
    return t;
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

typedef struct emb_job {
    const rgpu_view *wt, *ix;
    rgpu_view *out;
    int64_t D, ws0, ws1, os;
    int64_t esz;
} emb_job;

/* Walk set 0 the indices, set 1 out's rows. */
static void emb_row(void *ctx, const op_walk *w, int64_t n)
{
    const emb_job *j = ctx;
    const char *ip = (const char *)j->ix->data + w->off[0];
    char *op = (char *)j->out->data + w->off[1];
    int64_t is = ROW_ST(w, 0), ob = ROW_ST(w, 1), esz = j->esz, D = j->D;
    bool contig = j->ws1 == esz && j->os == esz;
    for (int64_t i = 0; i < n; i++) {
        int64_t v = op_idx_load_index(ip + i * is, j->ix->dtype);
        const char *src = (const char *)j->wt->data + v * j->ws0;
        char *dst = op + i * ob;
        if (contig) memcpy(dst, src, (size_t)(D * esz));
        else for (int64_t k = 0; k < D; k++) op_elem_copy(dst + k * j->os, src + k * j->ws1, (int)esz);
    }
}

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
    if (!indices_in_range(&w, ix, V, NULL)) {   /* validate first: nothing written on a bad index */
        do {
            int64_t v = op_idx_load_index((const char *)ix->data + w.off[0], ix->dtype);
            if (v < 0 || v >= V)
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "embedding: index %lld is out of bounds for dimension 0 with size %lld",
                         (long long)v, (long long)V);
        } while (op_walk_next(&w));
    }

    emb_job j = { wt, ix, out, D, rgpu_op_index_bstride(wt, 0), rgpu_op_index_bstride(wt, 1),
                  rgpu_op_index_bstride(out, ix->ndim), (int64_t)rgpu_dtype_size(wt->dtype) };
    op_walk_strides(&w, 1, out);
    rgpu_cpu_index_walk_rows(&w, D > 0 ? D : 1, emb_row, &j);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Destination-owned accumulation (embedding backward, index_add): out viewed
 * as (outer, V, inner) slices along a dim, src as (outer, n, inner); source
 * position i adds into slice target[i] (< 0: nowhere). A CSR lists, for
 * each slice v, the positions aimed at it in ascending order; work units
 * are (outer, v, inner block) and each adds its contributions in that
 * order, so every out element sees the serial loop's adds in the serial
 * loop's order, whatever thread runs its unit. */

#define SACC_BLK 256

typedef struct sacc_job {
    char *out;
    const char *src;
    int dt;
    int64_t esz, V, inner, blk, nblk;
    const int64_t *outer_off;        /* (out, src) byte offsets per outer position; NULL: one, at 0 */
    const int64_t *inner_off;        /* (out, src) byte offsets per inner position */
    bool contig;                     /* inner_off[j] == (j*esz, j*esz) */
    int64_t ov;                      /* out's byte stride along the dim */
    const int64_t *soff;             /* src's byte offset of position i along the dim */
    const int64_t *start, *pos;      /* CSR: slice v's positions are pos[start[v] .. start[v+1]) */
    bool zero;                       /* out = 0 first (embedding backward) */
    bool f32acc;                     /* f16/bf16 summed in f32 from out's value, rounded once */
    op_idx_alpha alpha;              /* the adds' alpha */
    const int64_t *counts;           /* scale_grad_by_freq: alpha = 1/counts[v] */
} sacc_job;

static void sacc_task(void *vj, int64_t b, int64_t e)
{
    const sacc_job *j = vj;
    int dt = j->dt;
    int64_t esz = j->esz;
    for (int64_t u = b; u < e; u++) {
        int64_t o = u / (j->V * j->nblk), r = u % (j->V * j->nblk), v = r / j->nblk;
        int64_t j0 = (r % j->nblk) * j->blk, m = j->inner - j0 < j->blk ? j->inner - j0 : j->blk;
        char *dst = j->out + (j->outer_off ? j->outer_off[2 * o] : 0) + v * j->ov;
        const char *sb = j->src + (j->outer_off ? j->outer_off[2 * o + 1] : 0);
        const int64_t *io = j->inner_off + 2 * j0;
        if (j->zero) {
            if (j->contig) memset(dst + j0 * esz, 0, (size_t)(m * esz));
            else for (int64_t k = 0; k < m; k++) memset(dst + io[2 * k], 0, (size_t)esz);
        }
        int64_t p0 = j->start[v], p1 = j->start[v + 1];
        if (p0 == p1) continue;
        op_idx_alpha a = j->alpha;
        if (j->counts != NULL) {
            double sc = 1.0 / (double)j->counts[v];
            /* grad_weight[k].add_(grad[i], scale): as index_add's slices */
            a.one = sc == 1.0; a.d = sc; a.f = op_round_to(dt, (float)sc);
            a.fused = true;
            a.round_prod = dt == RGPU_F16 || dt == RGPU_BF16;
        }
        if (j->f32acc) {
            float acc[SACC_BLK];
            for (int64_t k = 0; k < m; k++) acc[k] = op_load_f32(dst + io[2 * k], dt);
            for (int64_t p = p0; p < p1; p++) {
                const char *s = sb + j->soff[j->pos[p]];
                for (int64_t k = 0; k < m; k++) acc[k] = acc[k] + op_load_f32(s + io[2 * k + 1], dt);
            }
            for (int64_t k = 0; k < m; k++) op_store_f32(dst + io[2 * k], dt, acc[k]);
        } else if (j->contig && a.one && dt == RGPU_F32) {
            float *restrict d = (float *)(void *)(dst + j0 * esz);
            for (int64_t p = p0; p < p1; p++) {
                const float *restrict s = (const float *)(const void *)(sb + j->soff[j->pos[p]] + j0 * esz);
                for (int64_t k = 0; k < m; k++) d[k] = d[k] + s[k];
            }
        } else if (j->contig && a.one && dt == RGPU_F64) {
            double *restrict d = (double *)(void *)(dst + j0 * esz);
            for (int64_t p = p0; p < p1; p++) {
                const double *restrict s = (const double *)(const void *)(sb + j->soff[j->pos[p]] + j0 * esz);
                for (int64_t k = 0; k < m; k++) d[k] = d[k] + s[k];
            }
        } else {
            for (int64_t p = p0; p < p1; p++) {
                const char *s = sb + j->soff[j->pos[p]];
                for (int64_t k = 0; k < m; k++) op_idx_elem_reduce(dst + io[2 * k], s + io[2 * k + 1], dt, OP_IDX_ADD, &a);
            }
        }
    }
}

/* Runs j over outer * V * blocks units: builds the CSR of target[0..n) and
 * the blocks (j's inner, esz, inner_off set); frees nothing of the caller's. */
static rgpu_status sacc_run(const rgpu_exec *e, sacc_job *j, int64_t outer, const int64_t *target, int64_t n,
                            char *err, size_t errlen)
{
    int64_t V = j->V;
    int64_t *start = calloc((size_t)(V + 2), sizeof *start);
    int64_t *pos = rgpu_op_alloc(n > 0 ? n : 1, sizeof *pos);
    if (start == NULL || pos == NULL) {
        free(start); free(pos);
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for the index's lists", rgpu_op_name(e->op));
    }
    for (int64_t i = 0; i < n; i++) if (target[i] >= 0) start[target[i] + 2]++;
    for (int64_t v = 0; v < V; v++) start[v + 2] += start[v + 1];
    for (int64_t i = 0; i < n; i++) if (target[i] >= 0) pos[start[target[i] + 1]++] = i;
    /* start[v] .. start[v + 1] now bound slice v's positions */
    j->contig = true;
    for (int64_t k = 0; k < j->inner; k++)
        j->contig &= j->inner_off[2 * k] == k * j->esz && j->inner_off[2 * k + 1] == k * j->esz;
    j->blk = j->inner <= 2 * SACC_BLK ? (j->inner < SACC_BLK ? j->inner : SACC_BLK) : SACC_BLK;
    if (j->blk < 1) j->blk = 1;
    j->nblk = (j->inner + j->blk - 1) / j->blk;
    j->start = start;
    j->pos = pos;
    int64_t units = outer * V * j->nblk;
    if (j->inner > 0) rgpu_pool_for(units, rgpu_pool_grain(j->blk * (1 + n / (V > 0 ? V : 1))), sacc_task, j);
    free(start);
    free(pos);
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
        if (!indices_in_range(&wi, ix, p.nw, &p.pad)) {
            do {
                int64_t k = op_idx_load_index((const char *)ix->data + wi.off[0], ix->dtype);
                if (k != p.pad && (k < 0 || k >= p.nw))
                    RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: index %lld is out of bounds for dimension 0 with size %lld",
                             name, (long long)k, (long long)p.nw);
            } while (op_walk_next(&wi));
        }
    }
    if (rgpu_op_numel(out) == 0) return RGPU_OK;

    /* target[i]: the row position i adds into (-1: padding_idx), soff[i]:
     * grad row i (grad rows walk in lockstep with the indices, both
     * row-major, n rows) */
    int64_t n = p.D > 0 ? p.n : 0, *target = NULL, *soff = NULL, *counts = NULL, *inner = NULL;
    rgpu_status st = RGPU_OK;
    target = rgpu_op_alloc(n > 0 ? n : 1, sizeof *target);
    soff = rgpu_op_alloc(n > 0 ? n : 1, sizeof *soff);
    inner = rgpu_op_alloc(2 * p.D > 0 ? 2 * p.D : 1, sizeof *inner);
    if (p.by_freq && n > 0) counts = calloc((size_t)(p.nw > 0 ? p.nw : 1), sizeof *counts);
    if (!target || !soff || !inner || (p.by_freq && n > 0 && !counts)) {
        rgpu_op_errf(err, errlen, "%s: out of memory for %lld indices", name, (long long)n);
        st = RGPU_ERR_NOMEM;
        goto done;
    }
    if (n > 0) {
        op_walk wg;
        op_walk_init(&wg, g->ndim - 1, g->sizes);
        op_walk_strides(&wg, 0, g);
        op_walk_init(&wi, ix->ndim, ix->sizes);
        op_walk_strides(&wi, 0, ix);
        for (int64_t i = 0; i < n; i++) {
            int64_t k = op_idx_load_index((const char *)ix->data + wi.off[0], ix->dtype);
            target[i] = k == p.pad ? -1 : k;
            if (counts && k >= 0 && k < p.nw) counts[k]++;
            soff[i] = wg.off[0];
            op_walk_next(&wi);
            op_walk_next(&wg);
        }
    }
    int64_t gs = rgpu_op_index_bstride(g, g->ndim - 1), os1 = rgpu_op_index_bstride(out, 1);
    for (int64_t k = 0; k < p.D; k++) { inner[2 * k] = k * os1; inner[2 * k + 1] = k * gs; }
    sacc_job j = { 0 };
    j.out = out->data;
    j.src = g->data;
    j.dt = out->dtype;
    j.esz = (int64_t)rgpu_dtype_size(out->dtype);
    j.V = p.nw;
    j.inner = p.D;
    j.inner_off = inner;
    j.ov = rgpu_op_index_bstride(out, 0);
    j.soff = soff;
    j.zero = true;
    j.alpha = op_idx_alpha_one();
    j.counts = counts;
    st = sacc_run(e, &j, 1, target, n, err, errlen);
done:
    free(target); free(soff); free(inner); free(counts);
    return st;
}

/* ---------------------------------------------------------------------------
 * GATHER: out[..., j, ...] = self[..., index[..., j, ...], ...] along dim.
 * index (i64 or i32, as ATen 2.13) has self's dim count and sizes <= self's except at dim; out
 * has index's shape. */

/* Copies of n esz-byte elements, dst[i*ds] = src[i*ss + off(i)] with the
 * per-element byte offset OFF (an expression of i), typed by size. */
#define COPY_N(esz, dst, ds, src, ss, n, OFF) do {                                                          \
    switch (esz) {                                                                                         \
    case 1: for (int64_t i = 0; i < (n); i++) *(uint8_t *)((dst) + i * (ds)) = *(const uint8_t *)((src) + i * (ss) + (OFF)); break; \
    case 2: for (int64_t i = 0; i < (n); i++) *(uint16_t *)((dst) + i * (ds)) = *(const uint16_t *)((src) + i * (ss) + (OFF)); break; \
    case 4: for (int64_t i = 0; i < (n); i++) *(uint32_t *)((dst) + i * (ds)) = *(const uint32_t *)((src) + i * (ss) + (OFF)); break; \
    case 8: for (int64_t i = 0; i < (n); i++) *(uint64_t *)((dst) + i * (ds)) = *(const uint64_t *)((src) + i * (ss) + (OFF)); break; \
    default: for (int64_t i = 0; i < (n); i++) memcpy((dst) + i * (ds), (src) + i * (ss) + (OFF), (size_t)(esz)); break; \
    } } while (0)

typedef struct gather_job {
    const op_index_dimop *p;
    int64_t sdim, esz;
} gather_job;

/* Walk set 0 the index, 1 out, 2 self (dim's stride 0). */
static void gather_row(void *ctx, const op_walk *w, int64_t n)
{
    const gather_job *j = ctx;
    const op_index_dimop *p = j->p;
    const char *ip = (const char *)p->ix->data + w->off[0], *sp = (const char *)p->self->data + w->off[2];
    char *op = (char *)p->out->data + w->off[1];
    int64_t is = ROW_ST(w, 0), os = ROW_ST(w, 1), ss = ROW_ST(w, 2), sd = j->sdim;
    if (p->ix->dtype == RGPU_I64) COPY_N(j->esz, op, os, sp, ss, n, *(const int64_t *)(ip + i * is) * sd);
    else COPY_N(j->esz, op, os, sp, ss, n, (int64_t)*(const int32_t *)(ip + i * is) * sd);
}

static rgpu_status op_gather(const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_dimop p;
    FORWARD_IF_ERROR(rgpu_op_index_gather_check(e, &p, err, errlen));
    if (rgpu_op_numel(p.ix) == 0) return RGPU_OK;

    op_walk w;
    op_walk_init(&w, p.nd, p.isz);
    op_walk_strides(&w, 0, p.ix);
    if (!indices_in_range(&w, p.ix, p.ssz[p.dim], NULL)) {
        do {
            int64_t v = op_idx_load_index((const char *)p.ix->data + w.off[0], p.ix->dtype);
            if (v < 0 || v >= p.ssz[p.dim])
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "gather: index %lld is out of bounds for dimension %d with size %lld",
                         (long long)v, p.dim, (long long)p.ssz[p.dim]);
        } while (op_walk_next(&w));
    }

    gather_job j = { &p, rgpu_op_index_bstride(p.self, p.dim), (int64_t)rgpu_dtype_size(p.self->dtype) };
    op_walk_strides(&w, 1, p.out);
    op_walk_strides(&w, 2, p.self);
    w.st[2][p.dim] = 0;
    rgpu_cpu_index_walk_rows(&w, 2, gather_row, &j);
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
        if (!indices_in_range(&w, p->ix, p->ssz[p->dim], NULL)) {
            do {
                int64_t v = op_idx_load_index((const char *)p->ix->data + w.off[0], p->ix->dtype);
                if (v < 0 || v >= p->ssz[p->dim])
                    RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: index %lld is out of bounds for dimension %d with size %lld",
                             p->name, (long long)v, p->dim, (long long)p->ssz[p->dim]);
            } while (op_walk_next(&w));
        }
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

/* Index position (q, l) (q: its coordinates off dim, l: along it) aims at
 * out (q, index[q, l]): positions with different q never meet. Units are
 * (outer, inner block) of q; each runs l ascending, so every out element
 * sees its updates in row-major index order, as the serial loop. Tables:
 * per outer / inner position the byte offsets into (index, out, src) and
 * out's element number. */
typedef struct scat_job {
    const op_index_dimop *p;
    int dt, mode;
    int64_t L, inner, blk, nblk;
    const int64_t *outer_off, *inner_off;   /* 4 per position */
    int64_t ixd, srcd, odim, cdim;          /* byte strides along dim; out's element-number stride */
    facc *f;                                /* f16/bf16 add/mul in f32, or NULL */
} scat_job;

static void scat_task(void *vj, int64_t b, int64_t e)
{
    const scat_job *j = vj;
    const op_index_dimop *p = j->p;
    op_idx_alpha one = op_idx_alpha_one();
    int idt = p->ix->dtype, dt = j->dt, mode = j->mode;
    bool add_f32 = dt == RGPU_F32 && mode == OP_IDX_ADD && p->src != NULL && j->f == NULL;
    for (int64_t u = b; u < e; u++) {
        int64_t o = u / j->nblk, j0 = (u % j->nblk) * j->blk, m = j->inner - j0 < j->blk ? j->inner - j0 : j->blk;
        const int64_t *oo = j->outer_off + 4 * o, *io = j->inner_off + 4 * j0;
        for (int64_t l = 0; l < j->L; l++) {
            const char *ib = (const char *)p->ix->data + oo[0] + l * j->ixd;
            char *ob = (char *)p->out->data + oo[1];
            const char *sb = p->src ? (const char *)p->src->data + oo[2] + l * j->srcd : NULL;
            if (add_f32) {      /* the common case, inlined: d = d + s in f32 */
                for (int64_t k = 0; k < m; k++) {
                    int64_t v = idt == RGPU_I64 ? *(const int64_t *)(ib + io[4 * k]) : *(const int32_t *)(ib + io[4 * k]);
                    float *t = (float *)(void *)(ob + io[4 * k + 1] + v * j->odim);
                    *t = *t + *(const float *)(const void *)(sb + io[4 * k + 2]);
                }
                continue;
            }
            for (int64_t k = 0; k < m; k++) {
                int64_t v = op_idx_load_index(ib + io[4 * k], idt);
                char *t = ob + io[4 * k + 1] + v * j->odim;
                const char *s = sb ? sb + io[4 * k + 2] : (const char *)&p->value;
                if (j->f) facc_apply(j->f, oo[3] + io[4 * k + 3] + v * j->cdim, t, s, dt, mode);
                else op_idx_elem_reduce(t, s, dt, mode, &one);
            }
        }
    }
}

static rgpu_status op_scatter(const rgpu_exec *e, bool add_only, char *err, size_t errlen)
{
    op_index_dimop p;
    FORWARD_IF_ERROR(rgpu_op_index_scatter_check(e, add_only, &p, err, errlen));
    bool any;
    FORWARD_IF_ERROR(scatter_start(e, &p, &any, err, errlen));
    if (!any) return RGPU_OK;

    int dt = p.out->dtype, dim = p.dim;
    int64_t cst[RGPU_MAX_DIMS];
    contig_strides(p.ssz, p.nd, cst);
    bool f32acc = (dt == RGPU_F16 || dt == RGPU_BF16) && p.reduce != OP_IDX_ASSIGN;
    facc f = { 0 };
    if (f32acc) FORWARD_IF_ERROR(facc_init(e, &f, p.out, err, errlen));
    /* out's element numbers as a view of 1-byte elements */
    rgpu_view num;
    memset(&num, 0, sizeof num);
    num.dtype = RGPU_U8;
    num.ndim = p.nd;
    for (int d = 0; d < p.nd; d++) { num.sizes[d] = p.ssz[d]; num.strides[d] = cst[d]; }
    const rgpu_view *vs[4] = { p.ix, p.out, p.src, &num };
    int64_t nouter, ninner;
    int64_t *oo = dim_offsets(p.isz, 0, dim, vs, 4, &nouter), *io = dim_offsets(p.isz, dim + 1, p.nd, vs, 4, &ninner);
    if (oo == NULL || io == NULL) {
        free(oo); free(io);
        if (f32acc) facc_flush(&f, p.out);
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for the index's offsets", p.name);
    }
    scat_job j = { &p, dt, (int)p.reduce, p.isz[dim], ninner, 1, 1, oo, io,
                   rgpu_op_index_bstride(p.ix, dim), p.src ? rgpu_op_index_bstride(p.src, dim) : 0,
                   rgpu_op_index_bstride(p.out, dim), cst[dim], f32acc ? &f : NULL };
    j.blk = ninner <= 2 * SACC_BLK ? ninner : SACC_BLK;
    j.nblk = (ninner + j.blk - 1) / j.blk;
    rgpu_pool_for(nouter * j.nblk, rgpu_pool_grain(j.L * j.blk * 2), scat_task, &j);
    if (f32acc) facc_flush(&f, p.out);
    free(oo); free(io);
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

typedef struct isel_job {
    const op_index_dimop *p;
    const int64_t *iv;
    int64_t sdim, esz;
} isel_job;

/* Walk set 0 out, 1 self (dim's stride 0), over out's shape. */
static void isel_row(void *ctx, const op_walk *w, int64_t n)
{
    const isel_job *j = ctx;
    const op_index_dimop *p = j->p;
    char *op = (char *)p->out->data + w->off[0];
    const char *sp = (const char *)p->self->data + w->off[1];
    int64_t os = ROW_ST(w, 0), ss = ROW_ST(w, 1), esz = j->esz, sd = j->sdim;
    const int64_t *iv = j->iv + w->idx[p->dim];
    if (p->dim == w->nd - 1) { COPY_N(esz, op, os, sp, ss, n, iv[i] * sd); return; }
    sp += iv[0] * sd;      /* the whole row comes from one selected slice */
    if (os == esz && ss == esz) memcpy(op, sp, (size_t)(n * esz));
    else COPY_N(esz, op, os, sp, ss, n, 0);
}

static rgpu_status op_index_select(const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_dimop p;
    FORWARD_IF_ERROR(rgpu_op_index_select_check(e, &p, err, errlen));
    int64_t *iv, n;
    FORWARD_IF_ERROR(load_vector_index(e, p.ix, p.dim, p.ssz[p.dim], &iv, &n, err, errlen));
    if (rgpu_op_numel(p.out) == 0) { free(iv); return RGPU_OK; }

    isel_job j = { &p, iv, rgpu_op_index_bstride(p.self, p.dim), (int64_t)rgpu_dtype_size(p.self->dtype) };
    op_walk w;
    rgpu_op_index_select_walk(&p, &w);
    rgpu_cpu_index_walk_rows(&w, 1, isel_row, &j);
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
    const rgpu_view *vs[2] = { p.out, p.src };
    int64_t nouter, ninner;
    int64_t *oo = dim_offsets(p.rsz, 0, dim, vs, 2, &nouter), *io = dim_offsets(p.rsz, dim + 1, nd, vs, 2, &ninner);
    int64_t *soff = rgpu_op_alloc(n > 0 ? n : 1, sizeof *soff);
    if (oo != NULL && io != NULL && soff != NULL) {
        int64_t sd = rgpu_op_index_bstride(p.src, dim);
        for (int64_t i = 0; i < n; i++) soff[i] = i * sd;
        sacc_job j = { 0 };
        j.out = p.out->data;
        j.src = p.src->data;
        j.dt = dt;
        j.esz = (int64_t)rgpu_dtype_size(dt);
        j.V = p.ssz[dim];
        j.inner = ninner;
        j.outer_off = oo;
        j.inner_off = io;
        j.ov = rgpu_op_index_bstride(p.out, dim);
        j.soff = soff;
        j.f32acc = f32acc;
        j.alpha = p.alpha;
        st = sacc_run(e, &j, nouter, iv, n, err, errlen);
    } else {
        rgpu_op_errf(err, errlen, "index_add: out of memory for the offsets");
        st = RGPU_ERR_NOMEM;
    }
    free(oo); free(io); free(soff); free(iv);
    return st;
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

typedef struct index_job {
    char *out;
    const char *self;
    const int64_t *boff;
    int64_t esz;
} index_job;

/* geom_walk's sets: 0 out, 1 self's un-indexed dims, 2 the B element. */
static void index_row(void *ctx, const op_walk *w, int64_t n)
{
    const index_job *j = ctx;
    char *op = j->out + w->off[0];
    const char *sp = j->self + w->off[1];
    const int64_t *bo = j->boff + w->off[2];
    int64_t os = ROW_ST(w, 0), ss = ROW_ST(w, 1), bs = ROW_ST(w, 2);
    COPY_N(j->esz, op, os, sp, ss, n, bo[i * bs]);
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
        index_job j = { out->data, self->data, g.boff, (int64_t)rgpu_dtype_size(self->dtype) };
        op_walk w;
        geom_walk(&g, &w, self);
        for (int r = 0; r < g.s.R; r++) w.st[0][r] = rgpu_op_index_bstride(out, r);
        rgpu_cpu_index_walk_rows(&w, 2, index_row, &j);
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
