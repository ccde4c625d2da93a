/* cpu_index_random.c — the random ops (uniform_, normal_, bernoulli,
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
#include "op/philox.h"

/* ---------------------------------------------------------------------------
 * The per-element generators, walked in out's logical row-major order. */

typedef struct rnd_ctx {
    int kind;               /* RGPU_OP_* */
    uint64_t seed, offset;
    double a, b;            /* uniform: from, to; normal: mean, std; bernoulli: p */
    float af, bf;           /* uniform in f32: (float)from, (float)to */
    uint64_t from, range;   /* random_: range 0 means 2^64 */
    const rgpu_view *p;     /* bernoulli p tensor, broadcast to out (walk set 1) */
} rnd_ctx;

static void rnd_element(const rnd_ctx *c, char *o, int dt, uint64_t i, const char *pp)
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

static void rnd_fill(const rnd_ctx *c, rgpu_view *out)
{
    if (op_numel(out) == 0) return;
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

/* p (a bernoulli probability tensor) broadcasts to out, and every p is in [0, 1]. */
static rgpu_status check_p_tensor(const rgpu_exec *e, const rgpu_view *p, const rgpu_view *out,
                                  char *err, size_t errlen)
{
    FORWARD_IF_ERROR(op_index_need_float(e, p, "p", err, errlen));
    bool ok = p->ndim <= out->ndim;
    int lead = out->ndim - p->ndim;
    for (int d = 0; ok && d < p->ndim; d++) ok = p->sizes[d] == 1 || p->sizes[d] == out->sizes[lead + d];
    if (!ok) {
        char a[96], b[96];
        RETURN_ERROR(RGPU_ERR_SHAPE, "bernoulli: p of shape %s does not broadcast to out %s",
                 op_index_shape_str(p, a, sizeof a), op_index_shape_str(out, b, sizeof b));
    }
    if (op_numel(p) == 0) return RGPU_OK;
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

typedef struct perm_kv { uint64_t key, i; } perm_kv;

static int perm_cmp(const void *pa, const void *pb)
{
    const perm_kv *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

/* UNIFORM (from, to), NORMAL (mean, std), BERNOULLI (p?; p_scalar|NONE),
 * RANDOM (from, to|NONE), RANDPERM (n); args end with seed, offset. */
rgpu_status cpu_index_random(const rgpu_exec *e, char *err, size_t errlen)
{
    rnd_ctx c;
    memset(&c, 0, sizeof c);
    c.kind = e->op;
    switch (e->op) {
    case RGPU_OP_UNIFORM: case RGPU_OP_NORMAL: {
        bool uni = e->op == RGPU_OP_UNIFORM;
        FORWARD_IF_ERROR(op_index_check_io(e, "", "r", err, errlen));
        FORWARD_IF_ERROR(op_index_arg_f64(e, 0, uni ? "from" : "mean", &c.a, err, errlen));
        FORWARD_IF_ERROR(op_index_arg_f64(e, 1, uni ? "to" : "std", &c.b, err, errlen));
        FORWARD_IF_ERROR(op_index_seed_offset(e, 2, &c.seed, &c.offset, err, errlen));
        rgpu_view *out = e->out[0];
        FORWARD_IF_ERROR(op_index_need_float(e, out, "out", err, errlen));
        if (uni) {
            if (!(c.a <= c.b))
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "uniform_ expects to return a [from, to) range, but found from=%g > to=%g", c.a, c.b);
            if (!(c.b - c.a <= op_index_float_max(out->dtype)))
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "uniform_ expects to-from <= the dtype's max, but found to=%g and from=%g",
                         c.b, c.a);
            c.af = (float)c.a;
            c.bf = (float)c.b;
        } else if (!(c.b >= 0.0)) {
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "normal expects std >= 0.0, but found std %g", c.b);
        }
        rnd_fill(&c, out);
        return RGPU_OK;
    }
    case RGPU_OP_BERNOULLI: {
        FORWARD_IF_ERROR(op_index_check_io(e, "?", "r", err, errlen));
        FORWARD_IF_ERROR(op_index_seed_offset(e, 1, &c.seed, &c.offset, err, errlen));
        rgpu_view *out = e->out[0];
        if (e->in[0] != NULL) {
            FORWARD_IF_ERROR(check_p_tensor(e, e->in[0], out, err, errlen));
            c.p = e->in[0];
        } else {
            FORWARD_IF_ERROR(op_index_arg_f64(e, 0, "p", &c.a, err, errlen));
            if (!(c.a >= 0.0 && c.a <= 1.0))
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "bernoulli_ expects p to be in [0, 1], but got p=%g", c.a);
        }
        rnd_fill(&c, out);
        return RGPU_OK;
    }
    case RGPU_OP_RANDOM: {
        FORWARD_IF_ERROR(op_index_check_io(e, "", "r", err, errlen));
        int64_t from;
        FORWARD_IF_ERROR(op_index_arg_int(e, 0, "from", &from, err, errlen));
        FORWARD_IF_ERROR(op_index_seed_offset(e, 2, &c.seed, &c.offset, err, errlen));
        rgpu_view *out = e->out[0];
        int dt = out->dtype;
        bool fl = op_dtype_is_float(dt);
        int64_t lo = 0, hi = 0;
        if (fl) { hi = op_index_float_digits_pow(dt); lo = -hi; }
        else op_index_int_range(dt, &lo, &hi);
        const char *dn = rgpu_dtype_name(dt);
        if (op_index_arg_none(e, 1)) {   /* [from, to_inc] */
            if (!fl && from < lo) RETURN_ERROR(RGPU_ERR_BAD_ARG, "random_: from is out of bounds for %s", dn);
            if (from > hi)
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "random_ expects 'from' to be less than or equal to 'to_inc', but got "
                         "from=%lld > to_inc=%lld", (long long)from, (long long)hi);
            c.range = (uint64_t)hi - (uint64_t)from + 1u;   /* 0: the full 2^64 range */
        } else {
            int64_t to;
            FORWARD_IF_ERROR(op_index_arg_int(e, 1, "to", &to, err, errlen));
            if (from >= to)
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                         (long long)from, (long long)to);
            /* ATen only warns for floats outside [-2^digits, 2^digits] */
            if (!fl && from < lo) RETURN_ERROR(RGPU_ERR_BAD_ARG, "random_: from is out of bounds for %s", dn);
            if (!fl && to - 1 > hi) RETURN_ERROR(RGPU_ERR_BAD_ARG, "random_: to - 1 is out of bounds for %s", dn);
            c.range = (uint64_t)to - (uint64_t)from;
        }
        c.from = (uint64_t)from;
        rnd_fill(&c, out);
        return RGPU_OK;
    }
    default:   /* RANDPERM */
        break;
    }

    /* RANDPERM: out (n,) = 0..n-1 sorted by (r64 of element i, i) */
    FORWARD_IF_ERROR(op_index_check_io(e, "", "r", err, errlen));
    int64_t n;
    FORWARD_IF_ERROR(op_index_arg_int(e, 0, "n", &n, err, errlen));
    FORWARD_IF_ERROR(op_index_seed_offset(e, 1, &c.seed, &c.offset, err, errlen));
    rgpu_view *out = e->out[0];
    int dt = out->dtype;
    if (n < 0) RETURN_ERROR(RGPU_ERR_BAD_ARG, "randperm: n must be non-negative, got %lld", (long long)n);
    if (dt == RGPU_BOOL) RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "randperm: bool output is not supported");
    if (op_dtype_is_float(dt)) {
        if (n > op_index_float_digits_pow(dt) + 1)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "randperm: n cannot be greater than %lld for %s",
                     (long long)(op_index_float_digits_pow(dt) + 1), rgpu_dtype_name(dt));
    } else {
        int64_t lo, hi;
        op_index_int_range(dt, &lo, &hi);
        if (n > 0 && n - 1 > hi)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "randperm: n %lld does not fit %s", (long long)n, rgpu_dtype_name(dt));
    }
    if (out->ndim != 1 || out->sizes[0] != n)
        RETURN_ERROR(RGPU_ERR_SHAPE, "randperm: out must be (%lld,)", (long long)n);
    if (n == 0) return RGPU_OK;
    perm_kv *a = op_alloc(n, sizeof *a);
    if (a == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "randperm: out of memory for n = %lld", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        uint32_t w[4];
        rgpu_philox_draw(c.seed, c.offset, (uint64_t)i, w);
        a[i].key = rgpu_philox_r64(w);
        a[i].i = (uint64_t)i;
    }
    /* (key, i) pairs are all distinct: the order is total, qsort deterministic */
    qsort(a, (size_t)n, sizeof *a, perm_cmp);
    int64_t os = out->strides[0] * (int64_t)rgpu_dtype_size(dt);
    for (int64_t j = 0; j < n; j++) op_store_u64((char *)out->data + j * os, dt, a[j].i);
    free(a);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * NATIVE_DROPOUT: x -> (y, mask); args p, train (bool or NONE = true), seed,
 * offset. Training: keep_i = u_f64(i) < 1 - p, y = (x * keep) * scale with
 * scale = 1/(1-p) (0 when p == 1), each product rounded to x's dtype as
 * ATen's input.mul(mask).mul_(scale); mask = keep. Eval: y = x, mask = 1. */

rgpu_status cpu_index_dropout(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(op_index_check_io(e, "r", "r?", err, errlen));
    double p;
    bool train = true;
    uint64_t seed, offset;
    FORWARD_IF_ERROR(op_index_arg_f64(e, 0, "p", &p, err, errlen));
    if (!op_index_arg_none(e, 1)) FORWARD_IF_ERROR(op_index_arg_bool(e, 1, "train", &train, err, errlen));
    FORWARD_IF_ERROR(op_index_seed_offset(e, 2, &seed, &offset, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0], *mask = e->out[1];
    if (!(p >= 0.0 && p <= 1.0))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "native_dropout: dropout probability has to be between 0 and 1, but got %g", p);
    FORWARD_IF_ERROR(op_index_need_float(e, x, "input", err, errlen));
    if (y->dtype != x->dtype)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "native_dropout: y dtype %s differs from the input's %s",
                 rgpu_dtype_name(y->dtype), rgpu_dtype_name(x->dtype));
    if (!op_index_same_shape(y, x) || (mask && !op_index_same_shape(mask, x)))
        RETURN_ERROR(RGPU_ERR_SHAPE, "native_dropout: y and mask must have the input's shape");
    if (op_numel(x) == 0) return RGPU_OK;

    int dt = x->dtype;
    double p1m = 1.0 - p, scale = p1m == 0.0 ? 0.0 : 1.0 / p1m;
    float scale_f = (float)scale;
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
        if (train) {
            uint32_t r[4];
            rgpu_philox_draw(seed, offset, i, r);
            keep = rgpu_philox_u_f64(r) < p1m;
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

rgpu_status cpu_index_dropout_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(op_index_check_io(e, "rr", "r", err, errlen));
    dbw_ctx c;
    FORWARD_IF_ERROR(op_index_arg_f64(e, 0, "scale", &c.scale, err, errlen));
    c.scale_f = (float)c.scale;
    rgpu_view *out = e->out[0];
    FORWARD_IF_ERROR(op_index_need_float(e, out, "out", err, errlen));
    FORWARD_IF_ERROR(op_index_need_float(e, e->in[0], "grad", err, errlen));
    op_operand ops[2] = { { e->in[0], NULL, 0 }, { e->in[1], NULL, 0 } };
    op_iter it;
    FORWARD_IF_ERROR(op_iter_init(&it, out, ops, 2, e->op, err, errlen));
    c.dt[0] = it.dtype[0]; c.dt[1] = it.dtype[1]; c.dt[2] = it.dtype[2];
    op_iter_run(&it, dbw_row, &c);
    return RGPU_OK;
}
