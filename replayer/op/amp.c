/* op/amp.c — see amp.h. */
#include "amp.h"

#include "check.h"
#include "dtype.h"

/* A one-element tensor of dtype dt (ATen: "x must be a 1-element tensor",
 * "x must be a float tensor"). */
static rgpu_status want_scalar(const rgpu_exec *e, const rgpu_view *v, int dt, const char *what,
                               char *err, size_t errlen)
{
    if (rgpu_op_numel(v) != 1)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: %s must be a 1-element tensor, has %lld elements",
                 rgpu_op_name(e->op), what, (long long)rgpu_op_numel(v));
    if (v->dtype != dt)
        RETURN_ERROR(RGPU_ERR_BAD_DTYPE, "%s: %s must be a %s tensor, is %s", rgpu_op_name(e->op), what,
                 rgpu_dtype_name(dt), rgpu_dtype_name(v->dtype));
    return RGPU_OK;
}

/* A FLOAT or INT arg as a double. */
static rgpu_status arg_f64(const rgpu_exec *e, int i, const char *what, double *out, char *err, size_t errlen)
{
    if (i >= e->n_args)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: missing arg %d (%s)", rgpu_op_name(e->op), i, what);
    const rgpu_arg *a = &e->args[i];
    if (a->kind == RGPU_ARG_FLOAT) *out = a->v.f;
    else if (a->kind == RGPU_ARG_INT) *out = (double)a->v.i;
    else RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want float", rgpu_op_name(e->op), i, what, a->kind);
    return RGPU_OK;
}

rgpu_status rgpu_op_amp_unscale_check(const rgpu_exec *e, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *g = e->in[0], *inv = e->in[1];
    const rgpu_view *out = e->out[0], *found = e->out[1];
    FORWARD_IF_ERROR(want_scalar(e, inv, RGPU_F32, "inv_scale", err, errlen));
    FORWARD_IF_ERROR(want_scalar(e, found, RGPU_F32, "found_inf", err, errlen));
    if (!op_dtype_is_float(g->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: grad has dtype %s, want a floating dtype", name, rgpu_dtype_name(g->dtype));
    if (out->dtype != g->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_DTYPE, "%s: out[0] has dtype %s, grad %s (it is the grad, written in place)", name,
                 rgpu_dtype_name(out->dtype), rgpu_dtype_name(g->dtype));
    bool same = out->ndim == g->ndim;
    for (int d = 0; same && d < g->ndim; d++) same = out->sizes[d] == g->sizes[d];
    if (!same) RETURN_ERROR(RGPU_ERR_SHAPE, "%s: out[0] and grad differ in shape (it is the grad, written in place)", name);
    return RGPU_OK;
}

rgpu_status rgpu_op_amp_update_scale_args(const rgpu_exec *e, double *growth, double *backoff, int64_t *interval,
                                     char *err, size_t errlen)
{
    FORWARD_IF_ERROR(want_scalar(e, e->out[0], RGPU_F32, "current_scale", err, errlen));
    FORWARD_IF_ERROR(want_scalar(e, e->out[1], RGPU_I32, "growth_tracker", err, errlen));
    FORWARD_IF_ERROR(want_scalar(e, e->in[0], RGPU_F32, "found_inf", err, errlen));
    FORWARD_IF_ERROR(arg_f64(e, 0, "growth_factor", growth, err, errlen));
    FORWARD_IF_ERROR(arg_f64(e, 1, "backoff_factor", backoff, err, errlen));
    if (e->n_args < 3 || e->args[2].kind != RGPU_ARG_INT)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg 2 (growth_interval) missing or not an int", rgpu_op_name(e->op));
    *interval = e->args[2].v.i;
    return RGPU_OK;
}
