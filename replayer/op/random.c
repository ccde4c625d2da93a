/* op/random.c — the random ops' checks and randperm's order (op/random.h). */
#include <stdlib.h>
#include <string.h>

#include "index.h"
#include "iter.h"
#include "philox.h"
#include "random.h"

/* p (a bernoulli probability tensor) is floating and broadcasts to out. */
static rgpu_status check_p_shape(const rgpu_exec *e, const rgpu_view *p, const rgpu_view *out,
                                  char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_need_float(e, p, "p", err, errlen));
    bool ok = p->ndim <= out->ndim;
    int lead = out->ndim - p->ndim;
    for (int d = 0; ok && d < p->ndim; d++) ok = p->sizes[d] == 1 || p->sizes[d] == out->sizes[lead + d];
    if (!ok) {
        char a[96], b[96];
        RETURN_ERROR(RGPU_ERR_SHAPE, "bernoulli: p of shape %s does not broadcast to out %s",
                 rgpu_op_index_shape_str(p, a, sizeof a), rgpu_op_index_shape_str(out, b, sizeof b));
    }
    return RGPU_OK;
}

/* UNIFORM (from, to), NORMAL (mean, std), BERNOULLI (p?; p_scalar|NONE),
 * RANDOM (from, to|NONE), RANDPERM (n); args end with seed, offset. */
rgpu_status rgpu_op_random_check(const rgpu_exec *e, op_random_args *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    r->kind = e->op;
    switch (e->op) {
    case RGPU_OP_UNIFORM: case RGPU_OP_NORMAL: {
        bool uni = e->op == RGPU_OP_UNIFORM;
        FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "", "r", err, errlen));
        FORWARD_IF_ERROR(rgpu_op_index_arg_f64(e, 0, uni ? "from" : "mean", &r->a, err, errlen));
        FORWARD_IF_ERROR(rgpu_op_index_arg_f64(e, 1, uni ? "to" : "std", &r->b, err, errlen));
        FORWARD_IF_ERROR(rgpu_op_index_seed_offset(e, 2, &r->seed, &r->offset, err, errlen));
        rgpu_view *out = e->out[0];
        FORWARD_IF_ERROR(rgpu_op_index_need_float(e, out, "out", err, errlen));
        if (uni) {
            if (!(r->a <= r->b))
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "uniform_ expects to return a [from, to) range, but found from=%g > to=%g", r->a, r->b);
            if (!(r->b - r->a <= rgpu_op_index_float_max(out->dtype)))
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "uniform_ expects to-from <= the dtype's max, but found to=%g and from=%g",
                         r->b, r->a);
            r->af = (float)r->a;
            r->bf = (float)r->b;
        } else if (!(r->b >= 0.0)) {
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "normal expects std >= 0.0, but found std %g", r->b);
        }
        return RGPU_OK;
    }
    case RGPU_OP_BERNOULLI: {
        FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "?", "r", err, errlen));
        FORWARD_IF_ERROR(rgpu_op_index_seed_offset(e, 1, &r->seed, &r->offset, err, errlen));
        rgpu_view *out = e->out[0];
        if (e->in[0] != NULL) {
            FORWARD_IF_ERROR(check_p_shape(e, e->in[0], out, err, errlen));
            r->p = e->in[0];
        } else {
            FORWARD_IF_ERROR(rgpu_op_index_arg_f64(e, 0, "p", &r->a, err, errlen));
            if (!(r->a >= 0.0 && r->a <= 1.0))
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "bernoulli_ expects p to be in [0, 1], but got p=%g", r->a);
        }
        return RGPU_OK;
    }
    case RGPU_OP_RANDOM: {
        FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "", "r", err, errlen));
        int64_t from;
        FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 0, "from", &from, err, errlen));
        FORWARD_IF_ERROR(rgpu_op_index_seed_offset(e, 2, &r->seed, &r->offset, err, errlen));
        rgpu_view *out = e->out[0];
        int dt = out->dtype;
        bool fl = op_dtype_is_float(dt);
        int64_t lo = 0, hi = 0;
        if (fl) { hi = rgpu_op_index_float_digits_pow(dt); lo = -hi; }
        else rgpu_op_index_int_range(dt, &lo, &hi);
        const char *dn = rgpu_dtype_name(dt);
        if (rgpu_op_index_arg_none(e, 1)) {   /* [from, to_inc] */
            if (!fl && from < lo) RETURN_ERROR(RGPU_ERR_BAD_ARG, "random_: from is out of bounds for %s", dn);
            if (from > hi)
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "random_ expects 'from' to be less than or equal to 'to_inc', but got "
                         "from=%lld > to_inc=%lld", (long long)from, (long long)hi);
            r->range = (uint64_t)hi - (uint64_t)from + 1u;   /* 0: the full 2^64 range */
        } else {
            int64_t to;
            FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 1, "to", &to, err, errlen));
            if (from >= to)
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                         (long long)from, (long long)to);
            /* ATen only warns for floats outside [-2^digits, 2^digits] */
            if (!fl && from < lo) RETURN_ERROR(RGPU_ERR_BAD_ARG, "random_: from is out of bounds for %s", dn);
            if (!fl && to - 1 > hi) RETURN_ERROR(RGPU_ERR_BAD_ARG, "random_: to - 1 is out of bounds for %s", dn);
            r->range = (uint64_t)to - (uint64_t)from;
        }
        r->from = (uint64_t)from;
        return RGPU_OK;
    }
    default:   /* RANDPERM */
        break;
    }

    /* RANDPERM: out (n,) = 0..n-1 sorted by (r64 of element i, i) */
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "", "r", err, errlen));
    int64_t n;
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 0, "n", &n, err, errlen));
    r->n = n;
    FORWARD_IF_ERROR(rgpu_op_index_seed_offset(e, 1, &r->seed, &r->offset, err, errlen));
    rgpu_view *out = e->out[0];
    int dt = out->dtype;
    if (n < 0) RETURN_ERROR(RGPU_ERR_BAD_ARG, "randperm: n must be non-negative, got %lld", (long long)n);
    if (dt == RGPU_BOOL) RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "randperm: bool output is not supported");
    if (op_dtype_is_float(dt)) {
        if (n > rgpu_op_index_float_digits_pow(dt) + 1)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "randperm: n cannot be greater than %lld for %s",
                     (long long)(rgpu_op_index_float_digits_pow(dt) + 1), rgpu_dtype_name(dt));
    } else {
        int64_t lo, hi;
        rgpu_op_index_int_range(dt, &lo, &hi);
        if (n > 0 && n - 1 > hi)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "randperm: n %lld does not fit %s", (long long)n, rgpu_dtype_name(dt));
    }
    if (out->ndim != 1 || out->sizes[0] != n)
        RETURN_ERROR(RGPU_ERR_SHAPE, "randperm: out must be (%lld,)", (long long)n);
    return RGPU_OK;
}

typedef struct perm_kv { uint64_t key, i; } perm_kv;

static int perm_cmp(const void *pa, const void *pb)
{
    const perm_kv *a = pa, *b = pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

void rgpu_op_randperm_order(uint64_t seed, uint64_t offset, int64_t n, uint64_t *order, void *scratch)
{
    perm_kv *a = scratch;
    for (int64_t i = 0; i < n; i++) {
        uint32_t w[4];
        rgpu_philox_draw(seed, offset, (uint64_t)i, w);
        a[i].key = rgpu_philox_r64(w);
        a[i].i = (uint64_t)i;
    }
    /* (key, i) pairs are all distinct: the order is total, qsort deterministic */
    qsort(a, (size_t)n, sizeof *a, perm_cmp);
    for (int64_t j = 0; j < n; j++) order[j] = a[j].i;
}

/* NATIVE_DROPOUT: x -> (y, mask); args p, train (bool or NONE = true), seed, offset. */
rgpu_status rgpu_op_dropout_check(const rgpu_exec *e, op_dropout_args *d, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "r", "r?", err, errlen));
    memset(d, 0, sizeof *d);
    d->train = true;
    FORWARD_IF_ERROR(rgpu_op_index_arg_f64(e, 0, "p", &d->p, err, errlen));
    if (!rgpu_op_index_arg_none(e, 1)) FORWARD_IF_ERROR(rgpu_op_index_arg_bool(e, 1, "train", &d->train, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_seed_offset(e, 2, &d->seed, &d->offset, err, errlen));
    const rgpu_view *x = e->in[0];
    const rgpu_view *y = e->out[0], *mask = e->out[1];
    if (!(d->p >= 0.0 && d->p <= 1.0))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "native_dropout: dropout probability has to be between 0 and 1, but got %g", d->p);
    FORWARD_IF_ERROR(rgpu_op_index_need_float(e, x, "input", err, errlen));
    if (y->dtype != x->dtype)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "native_dropout: y dtype %s differs from the input's %s",
                 rgpu_dtype_name(y->dtype), rgpu_dtype_name(x->dtype));
    if (!rgpu_op_index_same_shape(y, x) || (mask && !rgpu_op_index_same_shape(mask, x)))
        RETURN_ERROR(RGPU_ERR_SHAPE, "native_dropout: y and mask must have the input's shape");
    if (mask && mask->dtype != RGPU_BOOL)   /* ATen's mask is bool */
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "native_dropout: mask must be bool, got %s", rgpu_dtype_name(mask->dtype));
    d->p1m = 1.0 - d->p;
    d->scale = d->p1m == 0.0 ? 0.0 : 1.0 / d->p1m;
    d->keep_lim = op_dropout_keep_lim(d->p1m);
    return RGPU_OK;
}

rgpu_status rgpu_op_dropout_backward_check(const rgpu_exec *e, double *scale, struct op_iter *it,
                                      char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "rr", "r", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_f64(e, 0, "scale", scale, err, errlen));
    rgpu_view *out = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_index_need_float(e, out, "out", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_need_float(e, e->in[0], "grad", err, errlen));
    if (e->in[1]->dtype != RGPU_BOOL)       /* ATen's check and message */
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "native_dropout_backward: Mask should be Bool Scalar Type %s",
                     rgpu_dtype_name(e->in[1]->dtype));
    op_operand ops[2] = { { e->in[0], NULL, 0 }, { e->in[1], NULL, 0 } };
    return rgpu_op_iter_init(it, out, ops, 2, e->op, err, errlen);
}
