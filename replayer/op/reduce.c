/* op/reduce.c — the reduction family's checks (op/reduce.h). */
#include <stdio.h>

#include "reduce.h"

rgpu_status op_reduce_check_exec(const rgpu_exec *e, unsigned opt_in, unsigned opt_out, char *err, size_t errlen)
{
    return op_check_exec(e, opt_in, opt_out, true, err, errlen);
}

rgpu_status op_reduce_arg(const rgpu_exec *e, int i, unsigned mask, const char *what, char *err, size_t errlen)
{
    if (i >= e->n_args)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: missing arg %d (%s)", rgpu_op_name(e->op), i, what);
    int k = e->args[i].kind;
    if (k < 0 || k >= 32 || !(mask >> k & 1u))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d", rgpu_op_name(e->op), i, what, k);
    return RGPU_OK;
}

rgpu_status op_reduce_want_float(const rgpu_exec *e, const rgpu_view *v, const char *what, char *err, size_t errlen)
{
    if (!op_dtype_is_float(v->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: %s has dtype %s, want a floating dtype",
                 rgpu_op_name(e->op), what, rgpu_dtype_name(v->dtype));
    return RGPU_OK;
}

rgpu_status op_reduce_want_shape(const rgpu_exec *e, const rgpu_view *v, const char *what, int nd,
                          const int64_t *sizes, char *err, size_t errlen)
{
    bool ok = v->ndim == nd;
    for (int d = 0; ok && d < nd; d++) ok = v->sizes[d] == sizes[d];
    if (!ok) {
        char got[128], want[128];
        op_shape_str(got, sizeof got, v->sizes, v->ndim, ",");
        op_shape_str(want, sizeof want, sizes, nd, ",");
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: %s has shape %s, want %s", rgpu_op_name(e->op), what, got, want);
    }
    return RGPU_OK;
}

rgpu_status op_reduce_wrap_dim(const rgpu_exec *e, int64_t dim, int nd, int *out, char *err, size_t errlen)
{
    int64_t w = nd > 0 ? nd : 1;
    if (dim < -w || dim >= w)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: Dimension out of range (expected to be in range of [%lld, %lld], but got %lld)",
                 rgpu_op_name(e->op), (long long)-w, (long long)(w - 1), (long long)dim);
    if (dim < 0) dim += w;
    *out = nd > 0 ? (int)dim : 0;
    return RGPU_OK;
}

rgpu_status op_reduce_bad_out(const char *name, const rgpu_view *in, const rgpu_view *out, const bool *red,
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
