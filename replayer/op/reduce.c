/* op/reduce.c — the reduction family's checks (op/reduce.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "reduce.h"
#include "ctc.h"

rgpu_status rgpu_op_reduce_check_exec(const rgpu_exec *e, unsigned opt_in, unsigned opt_out, char *err, size_t errlen)
{
    return rgpu_op_check_exec(e, opt_in, opt_out, true, err, errlen);
}

rgpu_status rgpu_op_reduce_arg(const rgpu_exec *e, int i, unsigned mask, const char *what, char *err, size_t errlen)
{
    if (i >= e->n_args)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: missing arg %d (%s)", rgpu_op_name(e->op), i, what);
    int k = e->args[i].kind;
    if (k < 0 || k >= 32 || !(mask >> k & 1u))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d", rgpu_op_name(e->op), i, what, k);
    return RGPU_OK;
}

rgpu_status rgpu_op_reduce_want_float(const rgpu_exec *e, const rgpu_view *v, const char *what, char *err, size_t errlen)
{
    if (!op_dtype_is_float(v->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: %s has dtype %s, want a floating dtype",
                 rgpu_op_name(e->op), what, rgpu_dtype_name(v->dtype));
    return RGPU_OK;
}

rgpu_status rgpu_op_reduce_want_shape(const rgpu_exec *e, const rgpu_view *v, const char *what, int nd,
                          const int64_t *sizes, char *err, size_t errlen)
{
    bool ok = v->ndim == nd;
    for (int d = 0; ok && d < nd; d++) ok = v->sizes[d] == sizes[d];
    if (!ok) {
        char got[128], want[128];
        rgpu_op_shape_str(got, sizeof got, v->sizes, v->ndim, ",");
        rgpu_op_shape_str(want, sizeof want, sizes, nd, ",");
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: %s has shape %s, want %s", rgpu_op_name(e->op), what, got, want);
    }
    return RGPU_OK;
}

rgpu_status rgpu_op_reduce_wrap_dim(const rgpu_exec *e, int64_t dim, int nd, int *out, char *err, size_t errlen)
{
    int64_t w = nd > 0 ? nd : 1;
    if (dim < -w || dim >= w)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: Dimension out of range (expected to be in range of [%lld, %lld], but got %lld)",
                 rgpu_op_name(e->op), (long long)-w, (long long)(w - 1), (long long)dim);
    if (dim < 0) dim += w;
    *out = nd > 0 ? (int)dim : 0;
    return RGPU_OK;
}

rgpu_status rgpu_op_reduce_bad_out(const char *name, const rgpu_view *in, const rgpu_view *out, const bool *red,
                              bool keepdim, char *err, size_t errlen)
{
    char got[160], exp[160];
    int gl = 0, el = 0;
    got[0] = exp[0] = '\0';
    for (int d = 0; d < out->ndim && gl < 120; d++)
        gl += snprintf(got + gl, sizeof got - (size_t)gl, "%s%lld", d ? "," : "", (long long)out->sizes[d]);
    for (int d = 0, k = 0; d < in->ndim && el < 120; d++) {
        if (red[d] && !keepdim) continue;
        el += snprintf(exp + el, sizeof exp - (size_t)el, "%s%lld", k++ ? "," : "",
                       red[d] ? 1LL : (long long)in->sizes[d]);
    }
    RETURN_ERROR(RGPU_ERR_SHAPE, "%s: out has shape [%s], the reduction gives [%s]", name, got, exp);
}

rgpu_status rgpu_op_reduce_parse_dims(const rgpu_exec *e, const rgpu_arg *a, int nd, bool *red, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    for (int d = 0; d < RGPU_MAX_DIMS; d++) red[d] = false;
    bool scalar_seen = false;
    uint32_t n = a->kind == RGPU_ARG_INTS ? a->v.ints.n : a->kind == RGPU_ARG_INT ? 1 : 0;
    for (uint32_t i = 0; i < n; i++) {
        int64_t d = a->kind == RGPU_ARG_INTS ? rgpu_arg_int_at(a, i) : a->v.i;
        int w;
        FORWARD_IF_ERROR(rgpu_op_reduce_wrap_dim(e, d, nd, &w, err, errlen));
        bool *seen = nd == 0 ? &scalar_seen : &red[w];
        if (*seen) RETURN_ERROR(RGPU_ERR_SHAPE, "%s: dim %d appears multiple times in the list of dims", name, w);
        *seen = true;
    }
    if (n == 0)
        for (int d = 0; d < nd; d++) red[d] = true;
    return RGPU_OK;
}


static rgpu_status check_dtypes(const rgpu_exec *e, const op_reduce2_args *a, char *err, size_t errlen)
{
    if (e->op != RGPU_OP_VAR && e->op != RGPU_OP_STD && e->op != RGPU_OP_NORM) return RGPU_OK;
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, e->in[0], "in[0]", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, e->out[0], "out[0]", err, errlen));
    RETURN_ERROR_IF(e->op == RGPU_OP_NORM && a->ord != a->ord, RGPU_ERR_BAD_ARG, "%s: ord is NaN", rgpu_op_name(e->op));
    return RGPU_OK;
}

/* The error for a reduced dim of size 0 (RGPU_OK when there is none). */
static rgpu_status empty_dim(const rgpu_exec *e, const op_reduce2_args *a, char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0];
    for (int d = 0; d < in->ndim; d++)
        RETURN_ERROR_IF(a->red[d] && in->sizes[d] == 0, RGPU_ERR_SHAPE,
                        "%s(): Expected reduction dim %d to have non-zero size.", rgpu_op_name(e->op), d);
    return RGPU_OK;
}

static rgpu_status check_nonempty(const rgpu_exec *e, const op_reduce2_args *a, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    bool norm = e->op == RGPU_OP_NORM;
    bool needs_elems = e->op == RGPU_OP_AMAX || e->op == RGPU_OP_AMIN || (norm && (a->ord == INFINITY || a->ord < 0.0));
    if (!needs_elems || a->count != 0) return RGPU_OK;
    RETURN_ERROR_IF(norm, RGPU_ERR_SHAPE, "%s: cannot compute the %g norm over an empty dimension "
                    "because the operation does not have an identity", name, a->ord);
    return empty_dim(e, a, err, errlen);
}


static rgpu_status arg_check_nonempty(const rgpu_exec *e, const op_reduce2_args *a, char *err, size_t errlen)
{
    if (a->count != 0) return RGPU_OK;
    RETURN_ERROR_IF(e->args[0].kind == RGPU_ARG_NONE, RGPU_ERR_SHAPE,
                    "%s(): Expected reduction dim to be specified for input.numel() == 0.", rgpu_op_name(e->op));
    return empty_dim(e, a, err, errlen);
}

rgpu_status rgpu_op_ln_shape_get(const rgpu_exec *e, const rgpu_view *x, const rgpu_arg *ns, op_ln_shape *s,
                            char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    if (ns->v.ints.n < 1 || ns->v.ints.n > (uint32_t)x->ndim)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: normalized_shape has %u dims, input has %d (want 1..%d)", name,
                 ns->v.ints.n, x->ndim, x->ndim);
    s->k = (int)ns->v.ints.n;
    s->lead = x->ndim - s->k;
    s->M = 1; s->N = 1;
    for (int d = 0; d < s->lead; d++) {
        if (__builtin_mul_overflow(s->M, x->sizes[d], &s->M))
            RETURN_ERROR(RGPU_ERR_OVERFLOW, "%s: input has more than 2^63 elements", name);
        s->stat[d] = x->sizes[d];
    }
    for (int d = 0; d < s->k; d++) {
        s->norm[d] = rgpu_arg_int_at(ns, (uint32_t)d);
        s->stat[s->lead + d] = 1;
        if (s->norm[d] != x->sizes[s->lead + d])
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: normalized_shape[%d] is %lld but input dim %d has size %lld", name, d,
                     (long long)s->norm[d], s->lead + d, (long long)x->sizes[s->lead + d]);
        if (__builtin_mul_overflow(s->N, s->norm[d], &s->N))
            RETURN_ERROR(RGPU_ERR_OVERFLOW, "%s: normalized_shape has more than 2^63 elements", name);
    }
    return RGPU_OK;
}

/* v absent, or floating with shape sizes[0..nd). */
static rgpu_status want_opt(const rgpu_exec *e, const rgpu_view *v, const char *what, int nd, const int64_t *sizes,
                            char *err, size_t errlen)
{
    if (v == NULL) return RGPU_OK;
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, v, what, err, errlen));
    return rgpu_op_reduce_want_shape(e, v, what, nd, sizes, err, errlen);
}

rgpu_status rgpu_op_layer_norm_check(const rgpu_exec *e, op_ln_shape *s, char *err, size_t errlen)
{
    const rgpu_view *x = e->in[0], *w = e->in[1], *b = e->in[2];
    const rgpu_view *y = e->out[0], *mean = e->out[1], *rstd = e->out[2];
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 0, OP_ARGK(RGPU_ARG_INTS), "normalized_shape", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 1, OP_ARGK(RGPU_ARG_FLOAT) | OP_ARGK(RGPU_ARG_INT), "eps", err, errlen));
    s->eps = rgpu_arg_as_f64(&e->args[1]);
    FORWARD_IF_ERROR(rgpu_op_ln_shape_get(e, x, &e->args[0], s, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, x, "in[0] (x)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, y, "out[0] (y)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, y, "out[0] (y)", x->ndim, x->sizes, err, errlen));
    FORWARD_IF_ERROR(want_opt(e, w, "in[1] (weight)", s->k, s->norm, err, errlen));
    FORWARD_IF_ERROR(want_opt(e, b, "in[2] (bias)", s->k, s->norm, err, errlen));
    if (mean) FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, mean, "out[1] (mean)", x->ndim, s->stat, err, errlen));
    if (rstd) FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, rstd, "out[2] (rstd)", x->ndim, s->stat, err, errlen));
    return RGPU_OK;
}

rgpu_status rgpu_op_layer_norm_backward_check(const rgpu_exec *e, op_ln_shape *s, char *err, size_t errlen)
{
    const rgpu_view *g = e->in[0], *x = e->in[1], *mean = e->in[2], *rstd = e->in[3], *w = e->in[4];
    const rgpu_view *dx = e->out[0], *dw = e->out[1], *db = e->out[2];
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 0, OP_ARGK(RGPU_ARG_INTS), "normalized_shape", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_ln_shape_get(e, x, &e->args[0], s, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, g, "in[0] (grad)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, x, "in[1] (x)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, mean, "in[2] (mean)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, rstd, "in[3] (rstd)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, g, "in[0] (grad)", x->ndim, x->sizes, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, mean, "in[2] (mean)", x->ndim, s->stat, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, rstd, "in[3] (rstd)", x->ndim, s->stat, err, errlen));
    FORWARD_IF_ERROR(want_opt(e, w, "in[4] (weight)", s->k, s->norm, err, errlen));
    FORWARD_IF_ERROR(want_opt(e, dx, "out[0] (dx)", x->ndim, x->sizes, err, errlen));
    FORWARD_IF_ERROR(want_opt(e, dw, "out[1] (dw)", s->k, s->norm, err, errlen));
    FORWARD_IF_ERROR(want_opt(e, db, "out[2] (db)", s->k, s->norm, err, errlen));
    return RGPU_OK;
}

rgpu_status rgpu_op_rms_norm_check(const rgpu_exec *e, op_ln_shape *s, char *err, size_t errlen)
{
    const rgpu_view *x = e->in[0], *w = e->in[1], *y = e->out[0], *rstd = e->out[1];
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 0, OP_ARGK(RGPU_ARG_INTS), "normalized_shape", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 1, OP_ARGK(RGPU_ARG_FLOAT) | OP_ARGK(RGPU_ARG_INT), "eps", err, errlen));
    s->eps = rgpu_arg_as_f64(&e->args[1]);
    FORWARD_IF_ERROR(rgpu_op_ln_shape_get(e, x, &e->args[0], s, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, x, "in[0] (x)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, y, "out[0] (y)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, y, "out[0] (y)", x->ndim, x->sizes, err, errlen));
    FORWARD_IF_ERROR(want_opt(e, w, "in[1] (weight)", s->k, s->norm, err, errlen));
    FORWARD_IF_ERROR(want_opt(e, rstd, "out[1] (rstd)", x->ndim, s->stat, err, errlen));
    return RGPU_OK;
}

rgpu_status rgpu_op_rms_norm_backward_check(const rgpu_exec *e, op_ln_shape *s, char *err, size_t errlen)
{
    const rgpu_view *g = e->in[0], *x = e->in[1], *rstd = e->in[2], *w = e->in[3];
    const rgpu_view *dx = e->out[0], *dw = e->out[1];
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 0, OP_ARGK(RGPU_ARG_INTS), "normalized_shape", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_ln_shape_get(e, x, &e->args[0], s, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, g, "in[0] (grad)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, x, "in[1] (x)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, rstd, "in[2] (rstd)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, g, "in[0] (grad)", x->ndim, x->sizes, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, rstd, "in[2] (rstd)", x->ndim, s->stat, err, errlen));
    FORWARD_IF_ERROR(want_opt(e, w, "in[3] (weight)", s->k, s->norm, err, errlen));
    FORWARD_IF_ERROR(want_opt(e, dx, "out[0] (dx)", x->ndim, x->sizes, err, errlen));
    FORWARD_IF_ERROR(want_opt(e, dw, "out[1] (dw)", s->k, s->norm, err, errlen));
    return RGPU_OK;
}

rgpu_status rgpu_op_nll_shape_get(const rgpu_exec *e, const rgpu_view *logp, const rgpu_view *t, const rgpu_view *w,
                             op_nll_shape *s, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 0, OP_ARGK(RGPU_ARG_INT), "reduction", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 1, OP_ARGK(RGPU_ARG_INT), "ignore_index", err, errlen));
    s->reduction = e->args[0].v.i;
    s->ignore = e->args[1].v.i;
    if (s->reduction < 0 || s->reduction > 2)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: reduction %lld is not 0 (none), 1 (mean) or 2 (sum)", name,
                (long long)s->reduction);
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, logp, "logp", err, errlen));
    if (t->dtype != RGPU_I64 && t->dtype != RGPU_U8)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: expected target dtype to be Long or Byte, but got %s", name,
                rgpu_dtype_name(t->dtype));
    if (logp->ndim < 1 || logp->ndim > 2)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: input tensor should be 1D or 2D, got %d dims", name, logp->ndim);
    if (t->ndim > 1)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: 0D or 1D target tensor expected, multi-target not supported", name);
    s->batched = logp->ndim == 2;
    s->per_row = s->reduction == 0 && s->batched;
    s->N = s->batched ? logp->sizes[0] : 1;
    s->C = logp->sizes[logp->ndim - 1];
    s->ls0 = s->batched ? logp->strides[0] : 0;
    s->ls1 = logp->strides[logp->ndim - 1];
    s->ts = t->ndim == 1 ? t->strides[0] : 0;
    if (s->batched && (t->ndim != 1 || t->sizes[0] != s->N))
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: Expected input batch_size (%lld) to match target batch_size (%lld).", name,
                (long long)s->N, (long long)(t->ndim == 1 ? t->sizes[0] : 0));
    if (!s->batched && t->ndim == 1 && t->sizes[0] != 1)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: For 1D input, 1D target must have size 1, but got target size: %lld", name,
                (long long)t->sizes[0]);
    s->ws = 0;
    if (w) {
        FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, w, "weight", err, errlen));
        if (w->ndim != 1 || w->sizes[0] != s->C)
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: weight tensor should be defined either for all %lld classes or no classes "
                    "but got weight tensor of shape with %d dims", name, (long long)s->C, w->ndim);
        s->ws = w->strides[0];
    }
    return RGPU_OK;
}

rgpu_status rgpu_op_nll_loss_check(const rgpu_exec *e, op_nll_shape *s, char *err, size_t errlen)
{
    const rgpu_view *logp = e->in[0], *t = e->in[1], *w = e->in[2];
    const rgpu_view *loss = e->out[0], *tw = e->out[1];
    FORWARD_IF_ERROR(rgpu_op_nll_shape_get(e, logp, t, w, s, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, loss, "out[0] (loss)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, loss, "out[0] (loss)", s->per_row ? 1 : 0, &s->N, err, errlen));
    return want_opt(e, tw, "out[1] (total_weight)", 0, NULL, err, errlen);
}

rgpu_status rgpu_op_nll_loss_backward_check(const rgpu_exec *e, op_nll_shape *s, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *go = e->in[0], *logp = e->in[1], *t = e->in[2], *w = e->in[3], *twv = e->in[4];
    const rgpu_view *gx = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_nll_shape_get(e, logp, t, w, s, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, go, "in[0] (grad)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, twv, "in[4] (total_weight)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, gx, "out[0]", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, gx, "out[0]", logp->ndim, logp->sizes, err, errlen));
    if (s->per_row) FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, go, "in[0] (grad)", 1, &s->N, err, errlen));
    else if (rgpu_op_numel(go) != 1)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: Expected a single element grad_output tensor, but got: %lld", name,
                (long long)rgpu_op_numel(go));
    if (rgpu_op_numel(twv) != 1)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: expected total_weight to be a single element tensor, got: %lld elements",
                name, (long long)rgpu_op_numel(twv));
    return RGPU_OK;
}

static rgpu_status want_lse(const rgpu_exec *e, const rgpu_view *lse, const op_nll_shape *s, char *err, size_t errlen)
{
    if (lse->dtype != RGPU_F32 && lse->dtype != RGPU_F64)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: lse has dtype %s, want float32 or float64", rgpu_op_name(e->op),
                     rgpu_dtype_name(lse->dtype));
    return rgpu_op_reduce_want_shape(e, lse, "lse", s->batched ? 1 : 0, &s->N, err, errlen);
}

rgpu_status rgpu_op_cross_entropy_check(const rgpu_exec *e, op_nll_shape *s, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_nll_loss_check(e, s, err, errlen));    /* in logits, target, weight?; outs loss, tw? */
    return want_lse(e, e->out[2], s, err, errlen);
}

rgpu_status rgpu_op_cross_entropy_backward_check(const rgpu_exec *e, op_nll_shape *s, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_nll_loss_backward_check(e, s, err, errlen));   /* in grad, logits, target, w?, tw */
    return want_lse(e, e->in[5], s, err, errlen);
}

rgpu_status rgpu_op_sum_mean_parse(const rgpu_exec *e, bool mean, op_reduce2_args *a, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    if (e->n_args < 2 || e->args == NULL)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: want 2 args (dims, keepdim), got %d", name, e->n_args);
    const rgpu_arg *dims = &e->args[0], *kd = &e->args[1];
    if (dims->kind != RGPU_ARG_INTS)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg 0 (dims) has kind %d, want ints", name, dims->kind);
    if (kd->kind != RGPU_ARG_BOOL)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg 1 (keepdim) has kind %d, want bool", name, kd->kind);
    const rgpu_view *in = e->in[0], *out = e->out[0];
    a->keepdim = kd->v.i != 0;
    a->correction = 1.0;
    a->ord = 2.0;
    int nd = in->ndim;
    int wrap = nd > 0 ? nd : 1;   /* a 0-d tensor accepts dim 0 / -1 (ATen's wrap_scalar) */

    bool *red = a->red;
    for (int d = 0; d < RGPU_MAX_DIMS; d++) red[d] = false;
    bool scalar_seen = false;
    for (uint32_t i = 0; i < dims->v.ints.n; i++) {
        int64_t d = rgpu_arg_int_at(dims, i);
        if (d < -wrap || d >= wrap)
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: dim %lld out of range for a %d-d input", name, (long long)d, nd);
        if (d < 0) d += wrap;
        bool *seen = nd == 0 ? &scalar_seen : &red[d];
        if (*seen) RETURN_ERROR(RGPU_ERR_SHAPE, "%s: dim %lld appears twice in dims", name, (long long)d);
        *seen = true;
    }
    if (dims->v.ints.n == 0)
        for (int d = 0; d < nd; d++) red[d] = true;
    if (mean && !op_dtype_is_float(out->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: output dtype %s is not floating", name, rgpu_dtype_name(out->dtype));
    return RGPU_OK;
}

rgpu_status rgpu_op_softmax_check(const rgpu_exec *e, int *dim, char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0], *out = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 0, OP_ARGK(RGPU_ARG_INT), "dim", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 1, OP_ARGK(RGPU_ARG_BOOL), "half_to_float", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, in, "in[0]", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, out, "out[0]", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, out, "out[0]", in->ndim, in->sizes, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_wrap_dim(e, e->args[0].v.i, in->ndim, dim, err, errlen));
    return RGPU_OK;
}

rgpu_status rgpu_op_softmax_backward_check(const rgpu_exec *e, int *dim, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *g = e->in[0], *y = e->in[1], *out = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 0, OP_ARGK(RGPU_ARG_INT), "dim", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 1, OP_ARGK(RGPU_ARG_DTYPE), "input_dtype", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, g, "in[0] (grad)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, y, "in[1] (output)", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, out, "out[0]", err, errlen));
    if (e->args[1].v.i != out->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: out has dtype %s but input_dtype is %lld", name,
                 rgpu_dtype_name(out->dtype), (long long)e->args[1].v.i);
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, y, "in[1] (output)", g->ndim, g->sizes, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, out, "out[0]", g->ndim, g->sizes, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_wrap_dim(e, e->args[0].v.i, g->ndim, dim, err, errlen));
    return RGPU_OK;
}

rgpu_status rgpu_op_exec_begin(const rgpu_exec *e, const char *backend, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (e == NULL) RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s exec: no op", backend);
    if (e->op < 0 || e->op >= RGPU_OP_COUNT)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s backend: unsupported op %d (%s)", backend, e->op, rgpu_op_name(e->op));
    if (e->n_in < 0 || e->n_in > RGPU_MAX_IN || e->n_out < 0 || e->n_out > RGPU_MAX_OUT || e->n_args < 0)
        RETURN_ERROR(RGPU_ERR_ARITY, "%s: bad counts (%d in, %d out, %d args)", rgpu_op_name(e->op),
                     e->n_in, e->n_out, e->n_args);
    return RGPU_OK;
}

rgpu_status rgpu_op_reduce_check_outs(const rgpu_exec *e, op_reduce2_args *a, rgpu_view *const *outs, int nout,
                                 char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0];
    int ond = 0;
    int64_t want[RGPU_MAX_DIMS];
    a->count = 1;
    for (int d = 0; d < in->ndim; d++) {
        if (a->red[d]) a->count *= in->sizes[d];
        if (!a->red[d] || a->keepdim) want[ond++] = a->red[d] ? 1 : in->sizes[d];
    }
    for (int k = 0; k < nout; k++) {
        if (outs[k] == NULL) continue;
        char what[24];
        snprintf(what, sizeof what, "out[%d]", k);
        FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, outs[k], what, ond, want, err, errlen));
    }
    return RGPU_OK;
}
rgpu_status rgpu_op_reduce2_parse(const rgpu_exec *e, op_reduce2_args *a, char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0], *out = e->out[0];
    const unsigned dims_kinds = OP_ARGK(RGPU_ARG_INTS) | OP_ARGK(RGPU_ARG_NONE) |
                                (e->op == RGPU_OP_PROD ? OP_ARGK(RGPU_ARG_INT) : 0u);
    const unsigned num_kinds = OP_ARGK(RGPU_ARG_FLOAT) | OP_ARGK(RGPU_ARG_INT);
    int a_dims = 0, a_keep = 1;
    a->correction = 1.0;
    a->ord = 2.0;
    if (e->op == RGPU_OP_VAR || e->op == RGPU_OP_STD) {
        a_keep = 2;
        FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 1, num_kinds | OP_ARGK(RGPU_ARG_NONE), "correction", err, errlen));
        if (e->args[1].kind != RGPU_ARG_NONE) a->correction = rgpu_arg_as_f64(&e->args[1]);
    } else if (e->op == RGPU_OP_NORM) {
        a_dims = 1; a_keep = 2;
        FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 0, num_kinds, "ord", err, errlen));
        a->ord = rgpu_arg_as_f64(&e->args[0]);
    }
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, a_dims, dims_kinds, "dims", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, a_keep, OP_ARGK(RGPU_ARG_BOOL), "keepdim", err, errlen));
    a->keepdim = e->args[a_keep].v.i != 0;
    FORWARD_IF_ERROR(rgpu_op_reduce_parse_dims(e, &e->args[a_dims], in->ndim, a->red, err, errlen));
    if ((e->op == RGPU_OP_ANY || e->op == RGPU_OP_ALL) && e->args[a_dims].kind == RGPU_ARG_INTS &&
        e->args[a_dims].v.ints.n == 0 && out->ndim == in->ndim &&
        memcmp(out->sizes, in->sizes, sizeof(int64_t) * (size_t)in->ndim) == 0)
        for (int d = 0; d < in->ndim; d++) a->red[d] = false;
    a->fl = op_dtype_is_float(e->op == RGPU_OP_PROD ? out->dtype : in->dtype);   /* prod casts in to out's dtype */
    double ord = a->ord;
    a->norm = ord == 0.0 ? OP_NORM_0 : ord == 1.0 ? OP_NORM_1 : ord == 2.0 ? OP_NORM_2
            : ord == INFINITY ? OP_NORM_INF : ord == -INFINITY ? OP_NORM_NINF : OP_NORM_P;
    rgpu_view *const outs[1] = { e->out[0] };
    FORWARD_IF_ERROR(rgpu_op_reduce_check_outs(e, a, outs, 1, err, errlen));
    FORWARD_IF_ERROR(check_dtypes(e, a, err, errlen));
    return check_nonempty(e, a, err, errlen);
}
rgpu_status rgpu_op_argreduce_parse(const rgpu_exec *e, op_reduce2_args *a, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    bool is_arg = e->op == RGPU_OP_ARGMAX || e->op == RGPU_OP_ARGMIN;
    const rgpu_view *in = e->in[0];
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 0, OP_ARGK(RGPU_ARG_INT) | (is_arg ? OP_ARGK(RGPU_ARG_NONE) : 0u), "dim", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 1, OP_ARGK(RGPU_ARG_BOOL), "keepdim", err, errlen));
    a->keepdim = e->args[1].v.i != 0;
    a->correction = 1.0;
    a->ord = 2.0;
    FORWARD_IF_ERROR(rgpu_op_reduce_parse_dims(e, &e->args[0], in->ndim, a->red, err, errlen));
    const rgpu_view *idxs = is_arg ? e->out[0] : e->out[1];
    RETURN_ERROR_IF(is_arg && in->dtype == RGPU_BOOL, RGPU_ERR_UNSUPPORTED, "%s(): does not support bool input", name);
    RETURN_ERROR_IF(idxs && idxs->dtype != RGPU_I64, RGPU_ERR_BAD_ARG, "%s: indices have dtype %s, want int64",
                    name, rgpu_dtype_name(idxs->dtype));
    a->outs[0] = is_arg ? NULL : e->out[0];
    a->outs[1] = e->out[is_arg ? 0 : 1];
    FORWARD_IF_ERROR(rgpu_op_reduce_check_outs(e, a, a->outs, 2, err, errlen));
    return arg_check_nonempty(e, a, err, errlen);
}

rgpu_status rgpu_op_cumsum_check(const rgpu_exec *e, int *dim, int64_t *lines, char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0], *out = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 0, OP_ARGK(RGPU_ARG_INT), "dim", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_wrap_dim(e, e->args[0].v.i, in->ndim, dim, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, out, "out[0]", in->ndim, in->sizes, err, errlen));
    for (int d = 0; d < in->ndim; d++) lines[d] = d == *dim ? 1 : in->sizes[d];
    return RGPU_OK;
}

/* --- CTC loss --------------------------------------------------------------------- */

static rgpu_status ctc_want_int(const rgpu_exec *e, const rgpu_view *v, const char *what, int nd, char *err,
                                size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    if (v->dtype != RGPU_I64 && v->dtype != RGPU_I32 && v->dtype != RGPU_I16 && v->dtype != RGPU_I8 &&
        v->dtype != RGPU_U8)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: %s must be an integer tensor, got %s", name, what,
                rgpu_dtype_name(v->dtype));
    if (nd >= 0 && v->ndim != nd)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: %s must be %d-d, got %d dims", name, what, nd, v->ndim);
    return RGPU_OK;
}

rgpu_status rgpu_op_ctc_check(const rgpu_exec *e, op_ctc *a, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    bool bw = e->op == RGPU_OP_CTC_LOSS_BACKWARD;
    int k = bw ? 1 : 0;
    const rgpu_view *lp = e->in[k], *tg = e->in[k + 1], *il = e->in[k + 2], *tl = e->in[k + 3];
    const rgpu_view *nll = bw ? e->in[5] : e->out[0], *la = bw ? e->in[6] : e->out[1];
    memset(a, 0, sizeof *a);
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 0, OP_ARGK(RGPU_ARG_INT), "blank", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, lp, "log_probs", err, errlen));
    if (lp->ndim != 3)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: log_probs must be 3-d (T, N, C), got %d dims", name, lp->ndim);
    a->T = lp->sizes[0]; a->N = lp->sizes[1]; a->C = lp->sizes[2];
    a->blank = e->args[0].v.i;
    if (a->blank < 0 || a->blank >= a->C)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: blank must be in label range", name);
    FORWARD_IF_ERROR(ctc_want_int(e, tg, "targets", -1, err, errlen));
    if (tg->ndim != 1 && tg->ndim != 2)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: targets must be 1-d or 2-d, got %d dims", name, tg->ndim);
    a->tg2d = tg->ndim == 2;
    if (a->tg2d && tg->sizes[0] != a->N)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: targets have %lld rows for a batch of %lld", name,
                (long long)tg->sizes[0], (long long)a->N);
    FORWARD_IF_ERROR(ctc_want_int(e, il, "input_lengths", 1, err, errlen));
    FORWARD_IF_ERROR(ctc_want_int(e, tl, "target_lengths", 1, err, errlen));
    if (il->sizes[0] != a->N || tl->sizes[0] != a->N)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: input_lengths and target_lengths must have %lld elements", name,
                (long long)a->N);
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, nll, "neg_log_likelihood", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, nll, "neg_log_likelihood", 1, &a->N, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, la, "log_alpha", err, errlen));
    if (la->ndim != 3 || la->sizes[0] != a->N || la->sizes[1] != a->T || la->sizes[2] < 1)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: log_alpha must be (N, T, Sp)", name);
    if (nll->dtype != lp->dtype || la->dtype != lp->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: neg_log_likelihood and log_alpha must have log_probs' dtype", name);
    a->lp = (const char *)lp->data; a->lpdt = lp->dtype;
    a->lps0 = lp->strides[0]; a->lps1 = lp->strides[1]; a->lps2 = lp->strides[2];
    a->tg = (const char *)tg->data; a->tgdt = tg->dtype;
    a->tgs0 = tg->strides[0]; a->tgs1 = a->tg2d ? tg->strides[1] : 0;
    a->S = a->tg2d ? tg->sizes[1] : tg->sizes[0];
    a->il = (const char *)il->data; a->ildt = il->dtype; a->ils = il->strides[0];
    a->tl = (const char *)tl->data; a->tldt = tl->dtype; a->tls = tl->strides[0];
    a->la = (char *)la->data; a->ladt = la->dtype;
    a->las0 = la->strides[0]; a->las1 = la->strides[1]; a->las2 = la->strides[2]; a->Sp = la->sizes[2];
    a->nll = (char *)nll->data; a->nlldt = nll->dtype; a->nlls = nll->strides[0];
    if (!bw) return RGPU_OK;
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 1, OP_ARGK(RGPU_ARG_BOOL) | OP_ARGK(RGPU_ARG_INT), "zero_infinity", err,
                                   errlen));
    a->zero_infinity = e->args[1].v.i != 0;
    const rgpu_view *go = e->in[0];
    rgpu_view *gx = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, go, "grad", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, go, "grad", 1, &a->N, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_float(e, gx, "out[0]", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, gx, "out[0]", 3, lp->sizes, err, errlen));
    if (gx->dtype != lp->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: the gradient must have log_probs' dtype", name);
    a->go = (const char *)go->data; a->godt = go->dtype; a->gos = go->strides[0];
    a->gx = (char *)gx->data; a->gxdt = gx->dtype;
    a->gxs0 = gx->strides[0]; a->gxs1 = gx->strides[1]; a->gxs2 = gx->strides[2];
    return RGPU_OK;
}
