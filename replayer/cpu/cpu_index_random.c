/* rgpu_cpu_index_random.c — the random ops (uniform_, normal_, bernoulli,
 * random_.from, randperm) and native_dropout (+ backward) on the CPU.
 *
 * Every value comes from philox.h: element i (row-major over the op's
 * logical output shape) draws Philox4x32-10(key = seed, counter = (i,
 * offset)) and maps the words as philox.h documents. That header is the
 * cross-backend contract; this file is its reference implementation. Args
 * end with (int seed, int offset), both read as u64. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_index.h"
#include "cpu_pool.h"
#include "op/philox.h"
#include "op/random.h"

/* ---------------------------------------------------------------------------
 * The per-element generators, walked in out's logical row-major order. */

static void rnd_element(const op_random_args *c, char *o, int dt, uint64_t i, const char *pp)
{
    uint32_t w[4];
    rgpu_philox_draw(c->seed, c->offset, i, w);
    switch (c->kind) {
    case RGPU_OP_UNIFORM:
        if (dt == RGPU_F64) op_store_f64(o, dt, c->a + rgpu_philox_u_f64(w) * (c->b - c->a));
        else op_store_f32(o, dt, c->af + rgpu_philox_u_f32(w) * (c->bf - c->af));
        break;
    case RGPU_OP_NORMAL: {
        double u1 = rgpu_philox_bm_u1(w), u2 = rgpu_philox_bm_u2(w);
        double z = sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
        op_store_f64(o, dt, c->a + c->b * z);
        break;
    }
    case RGPU_OP_BERNOULLI: {
        double p = pp ? op_load_f64(pp, c->p->dtype) : c->a;
        op_store_u64(o, dt, rgpu_philox_u_f64(w) < p ? 1u : 0u);
        break;
    }
    default: {   /* RANDOM */
        uint64_t r = rgpu_philox_r64(w);
        op_store_u64(o, dt, c->from + (c->range ? r % c->range : r));
        break;
    }
    }
}

/* v's elements are packed in row-major order (element i at offset i) */
static bool rnd_dense(const rgpu_view *v)
{
    int64_t s = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (v->sizes[d] != 1 && v->strides[d] != s) return false;
        s *= v->sizes[d];
    }
    return true;
}

/* Elements per pool chunk: one Philox call (~100 operations) each. Values are
 * a function of the element index only, so any split gives the same bits. */
#define RND_GRAIN 2048

typedef struct rnd_job { const op_random_args *c; rgpu_view *out; size_t esz; } rnd_job;

static void rnd_task(void *vj, int64_t b, int64_t e)
{
    const rnd_job *j = vj;
    char *o = (char *)j->out->data;
    for (int64_t i = b; i < e; i++) rnd_element(j->c, o + i * (int64_t)j->esz, j->out->dtype, (uint64_t)i, NULL);
}

static void rnd_fill(const op_random_args *c, rgpu_view *out)
{
    int64_t n = rgpu_op_numel(out);
    if (n == 0) return;
    if (c->p == NULL && rnd_dense(out)) {
        rnd_job j = { c, out, rgpu_dtype_size(out->dtype) };
        rgpu_pool_for(n, RND_GRAIN, rnd_task, &j);
        return;
    }
    op_walk w;
    op_walk_init(&w, out->ndim, out->sizes);
    op_walk_strides(&w, 0, out);
    if (c->p) {   /* p broadcast to out, trailing dims aligned */
        int lead = out->ndim - c->p->ndim;
        int64_t esz = (int64_t)rgpu_dtype_size(c->p->dtype);
        for (int d = 0; d < c->p->ndim; d++)
            w.st[1][lead + d] = c->p->sizes[d] == 1 ? 0 : c->p->strides[d] * esz;
    }
    uint64_t i = 0;
    do rnd_element(c, (char *)out->data + w.off[0], out->dtype, i++,
                   c->p ? (const char *)c->p->data + w.off[1] : NULL);
    while (op_walk_next(&w));
}

/* Every p of a bernoulli probability tensor is in [0, 1] (its shape:
 * rgpu_op_random_check). */
static rgpu_status check_p_values(const rgpu_exec *e, const rgpu_view *p, char *err, size_t errlen)
{
    (void)e;
    if (rgpu_op_numel(p) == 0) return RGPU_OK;
    op_walk w;
    op_walk_init(&w, p->ndim, p->sizes);
    op_walk_strides(&w, 0, p);
    do {
        double v = op_load_f64((const char *)p->data + w.off[0], p->dtype);
        if (!(v >= 0.0 && v <= 1.0))
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "bernoulli: expected p_in >= 0 && p_in <= 1, got %g", v);
    } while (op_walk_next(&w));
    return RGPU_OK;
}


/* UNIFORM (from, to), NORMAL (mean, std), BERNOULLI (p?; p_scalar|NONE),
 * RANDOM (from, to|NONE), RANDPERM (n); args end with seed, offset. */
rgpu_status rgpu_cpu_index_random(const rgpu_exec *e, char *err, size_t errlen)
{
    op_random_args r;
    FORWARD_IF_ERROR(rgpu_op_random_check(e, &r, err, errlen));
    rgpu_view *out = e->out[0];
    if (r.p != NULL) FORWARD_IF_ERROR(check_p_values(e, r.p, err, errlen));
    if (r.kind != RGPU_OP_RANDPERM) {
        rnd_fill(&r, out);
        return RGPU_OK;
    }
    /* RANDPERM: out (n,) = 0..n-1 sorted by (r64 of element i, i) */
    int64_t n = r.n;
    if (n == 0) return RGPU_OK;
    uint64_t *order = rgpu_op_alloc(n, sizeof *order);
    void *scratch = rgpu_op_alloc(n, OP_RANDPERM_SCRATCH);
    if (order == NULL || scratch == NULL) {
        free(order);
        free(scratch);
        RETURN_ERROR(RGPU_ERR_NOMEM, "randperm: out of memory for n = %lld", (long long)n);
    }
    rgpu_op_randperm_order(r.seed, r.offset, n, order, scratch);
    int64_t os = out->strides[0] * (int64_t)rgpu_dtype_size(out->dtype);
    for (int64_t j = 0; j < n; j++) op_store_u64((char *)out->data + j * os, out->dtype, order[j]);
    free(order);
    free(scratch);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * NATIVE_DROPOUT: x -> (y, mask); args p, train (bool or NONE = true), seed,
 * offset. Training: keep_i = u_f64(i) < 1 - p, y = (x * keep) * scale with
 * scale = 1/(1-p) (0 when p == 1), each product rounded to x's dtype as
 * ATen's input.mul(mask).mul_(scale); mask = keep. Eval: y = x, mask = 1. */

/* The dense case over the pool: element i of x, y and mask at offset i. */
typedef struct drop_job {
    const op_dropout_args *d;
    const rgpu_view *x;
    rgpu_view *y, *mask;
    float scale_f;
} drop_job;

static void drop_task(void *vj, int64_t b, int64_t e)
{
    const drop_job *j = vj;
    const op_dropout_args *d = j->d;
    int dt = j->x->dtype;
    size_t esz = rgpu_dtype_size(dt);
    const char *xb = (const char *)j->x->data;
    char *yb = (char *)j->y->data;
    for (int64_t i = b; i < e; i++) {
        const char *xp = xb + i * (int64_t)esz;
        char *yp = yb + i * (int64_t)esz;
        bool keep = true;
        if (d->train) {
            uint32_t r[4];
            rgpu_philox_draw(d->seed, d->offset, (uint64_t)i, r);
            keep = (rgpu_philox_r64(r) >> 11) < d->keep_lim;
            if (dt == RGPU_F64) {
                double v = *(const double *)xp * (keep ? 1.0 : 0.0);
                *(double *)yp = v * d->scale;
            } else if (dt == RGPU_F32) {
                float v = *(const float *)xp * (keep ? 1.0f : 0.0f);
                *(float *)yp = v * j->scale_f;
            } else {
                float v = op_round_to(dt, op_load_f32(xp, dt) * (keep ? 1.0f : 0.0f));
                op_store_f32(yp, dt, v * j->scale_f);
            }
        } else {
            op_elem_copy(yp, xp, esz);
        }
        if (j->mask)
            op_store_u64((char *)j->mask->data + i * (int64_t)rgpu_dtype_size(j->mask->dtype), j->mask->dtype, keep);
    }
}

rgpu_status rgpu_cpu_index_dropout(const rgpu_exec *e, char *err, size_t errlen)
{
    op_dropout_args d;
    FORWARD_IF_ERROR(rgpu_op_dropout_check(e, &d, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0], *mask = e->out[1];
    if (rgpu_op_numel(x) == 0) return RGPU_OK;

    int dt = x->dtype;
    double scale = d.scale;
    float scale_f = (float)scale;
    if (rnd_dense(x) && rnd_dense(y) && (mask == NULL || rnd_dense(mask))) {
        drop_job j = { &d, x, y, mask, scale_f };
        rgpu_pool_for(rgpu_op_numel(x), RND_GRAIN, drop_task, &j);
        return RGPU_OK;
    }
    op_walk w;
    op_walk_init(&w, x->ndim, x->sizes);
    op_walk_strides(&w, 0, x);
    op_walk_strides(&w, 1, y);
    if (mask) op_walk_strides(&w, 2, mask);
    uint64_t i = 0;
    do {
        const char *xp = (const char *)x->data + w.off[0];
        char *yp = (char *)y->data + w.off[1];
        bool keep = true;
        if (d.train) {
            uint32_t r[4];
            rgpu_philox_draw(d.seed, d.offset, i, r);
            keep = (rgpu_philox_r64(r) >> 11) < d.keep_lim;
            if (dt == RGPU_F64) {
                double v = *(const double *)xp * (keep ? 1.0 : 0.0);
                *(double *)yp = v * scale;
            } else {
                float v = op_round_to(dt, op_load_f32(xp, dt) * (keep ? 1.0f : 0.0f));
                op_store_f32(yp, dt, v * scale_f);
            }
        } else {
            op_elem_copy(yp, xp, rgpu_dtype_size(dt));
        }
        if (mask) op_store_u64((char *)mask->data + w.off[2], mask->dtype, keep);
        i++;
    } while (op_walk_next(&w));
    return RGPU_OK;
}

/* NATIVE_DROPOUT_BACKWARD: out = (grad * mask) * scale, each product
 * rounded to out's dtype (ATen: grad * mask * scale); grad and mask
 * broadcast to out. */

typedef struct dbw_ctx { int dt[3]; double scale; float scale_f; } dbw_ctx;

static void dbw_row(char *const *p, const int64_t *s, int64_t n, void *vctx)
{
    const dbw_ctx *c = vctx;
    int dt = c->dt[0];
    if (dt == RGPU_F32 && c->dt[1] == RGPU_F32 && c->dt[2] == RGPU_BOOL && s[0] == 4 && s[1] == 4 && s[2] == 1) {
        float *o = (float *)p[0];            /* the same products, in a loop that vectorises */
        const float *g = (const float *)p[1];
        const uint8_t *m = (const uint8_t *)p[2];
        float sc = c->scale_f;
        for (int64_t i = 0; i < n; i++) { float v = g[i] * (float)(m[i] != 0); o[i] = v * sc; }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        char *o = p[0] + i * s[0];
        const char *g = p[1] + i * s[1], *m = p[2] + i * s[2];
        if (dt == RGPU_F64) {
            double v = op_load_f64(g, c->dt[1]) * op_load_f64(m, c->dt[2]);
            *(double *)o = v * c->scale;
        } else {
            float v = op_round_to(dt, op_load_f32(g, c->dt[1]) * op_load_f32(m, c->dt[2]));
            op_store_f32(o, dt, v * c->scale_f);
        }
    }
}

rgpu_status rgpu_cpu_index_dropout_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    dbw_ctx c;
    op_iter it;
    FORWARD_IF_ERROR(rgpu_op_dropout_backward_check(e, &c.scale, &it, err, errlen));
    c.scale_f = (float)c.scale;
    c.dt[0] = it.dtype[0]; c.dt[1] = it.dtype[1]; c.dt[2] = it.dtype[2];
    rgpu_cpu_iter_run(&it, dbw_row, &c, 2 * CPU_ITER_GRAIN);
    return RGPU_OK;
}
