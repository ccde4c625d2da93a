/* op/sort.c — the sort family's checks, shared by both backends (op/sort.h). */
#include <stdio.h>

#include "check.h"
#include "index.h"
#include "sort.h"

/* L over v's dims but skip (-1: none), strides of views vs[0..nv) (each of
 * v's ndim). */
static void lines_init(op_sort_lines *L, const rgpu_view *v, int skip, const rgpu_view *const *vs, int nv)
{
    memset(L, 0, sizeof *L);
    L->total = 1;
    for (int d = 0; d < v->ndim; d++) {
        if (d == skip) continue;
        L->sz[L->nd] = v->sizes[d];
        for (int k = 0; k < nv; k++) L->st[k][L->nd] = vs[k] ? vs[k]->strides[d] : 0;
        L->total *= v->sizes[d];
        L->nd++;
    }
}

static rgpu_status want_shape(const rgpu_exec *e, const rgpu_view *o, const char *what, int nd, const int64_t *sz,
                              char *err, size_t errlen)
{
    (void)what;
    return rgpu_op_index_check_out_shape(e, o, nd, sz, err, errlen);
}

rgpu_status rgpu_op_sort_check(const rgpu_exec *e, int *dim, int64_t *n, bool *desc, op_sort_lines *L,
                          char *err, size_t errlen)
{
    bool mode = e->op == RGPU_OP_MODE;
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "r", "rr", err, errlen));
    const rgpu_view *in = e->in[0];
    rgpu_view *vals = e->out[0], *idx = e->out[1];
    int64_t d64;
    bool b1;
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 0, "dim", &d64, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_bool(e, 1, mode ? "keepdim" : "descending", &b1, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_wrap_dim(e, d64, in->ndim, dim, err, errlen));
    *desc = mode ? false : b1;
    RETURN_ERROR_IF(vals->dtype != in->dtype, RGPU_ERR_BAD_ARG, "%s: values have dtype %s, want %s",
                    rgpu_op_name(e->op), rgpu_dtype_name(vals->dtype), rgpu_dtype_name(in->dtype));
    RETURN_ERROR_IF(idx->dtype != RGPU_I64, RGPU_ERR_BAD_ARG, "%s: indices have dtype %s, want int64",
                    rgpu_op_name(e->op), rgpu_dtype_name(idx->dtype));
    *n = in->ndim ? in->sizes[*dim] : 1;
    if (!mode) {
        FORWARD_IF_ERROR(want_shape(e, vals, "values", in->ndim, in->sizes, err, errlen));
        FORWARD_IF_ERROR(want_shape(e, idx, "indices", in->ndim, in->sizes, err, errlen));
        const rgpu_view *vs[3] = {in, vals, idx};
        lines_init(L, in, in->ndim ? *dim : -1, vs, 3);
        return RGPU_OK;
    }
    RETURN_ERROR_IF(*n == 0, RGPU_ERR_SHAPE, "mode(): expected reduction dim %d to have non-zero size", *dim);
    /* outs: in's shape with the dim 1 (keepdim) or dropped */
    int64_t sz[RGPU_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < in->ndim; d++)
        if (d != *dim) sz[nd++] = in->sizes[d];
        else if (b1) sz[nd++] = 1;
    FORWARD_IF_ERROR(want_shape(e, vals, "values", nd, sz, err, errlen));
    FORWARD_IF_ERROR(want_shape(e, idx, "indices", nd, sz, err, errlen));
    /* the outputs as views of in's rank (the dim: size 1, stride 0) */
    rgpu_view v2[2] = {*vals, *idx};
    if (!b1 && in->ndim > 0)
        for (int k = 0; k < 2; k++) {
            const rgpu_view *o = k ? idx : vals;
            for (int d = 0, s = 0; d < in->ndim; d++)
                v2[k].strides[d] = d == *dim ? 0 : o->strides[s++];
        }
    const rgpu_view *vs[3] = {in, &v2[0], &v2[1]};
    lines_init(L, in, in->ndim ? *dim : -1, vs, 3);
    return RGPU_OK;
}

rgpu_status rgpu_op_scan_check(const rgpu_exec *e, int *kind, int64_t *n, int64_t *is, int64_t *os, int64_t *xs,
                          op_sort_lines *L, char *err, size_t errlen)
{
    bool two = e->op == RGPU_OP_CUMMAX || e->op == RGPU_OP_CUMMIN;
    *kind = e->op == RGPU_OP_CUMMAX ? OP_SCAN_CUMMAX : e->op == RGPU_OP_CUMMIN ? OP_SCAN_CUMMIN
            : e->op == RGPU_OP_LOGCUMSUMEXP ? OP_SCAN_LOGCUMSUMEXP : OP_SCAN_CUMPROD;
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "r", two ? "rr" : "r", err, errlen));
    const rgpu_view *in = e->in[0], *out = e->out[0], *idx = two ? e->out[1] : NULL;
    int64_t d64;
    int dim;
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 0, "dim", &d64, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_wrap_dim(e, d64, in->ndim, &dim, err, errlen));
    FORWARD_IF_ERROR(want_shape(e, out, "out", in->ndim, in->sizes, err, errlen));
    if (two) {
        FORWARD_IF_ERROR(want_shape(e, idx, "indices", in->ndim, in->sizes, err, errlen));
        RETURN_ERROR_IF(out->dtype != in->dtype, RGPU_ERR_BAD_ARG, "%s: values have dtype %s, want %s",
                        rgpu_op_name(e->op), rgpu_dtype_name(out->dtype), rgpu_dtype_name(in->dtype));
        RETURN_ERROR_IF(idx->dtype != RGPU_I64, RGPU_ERR_BAD_ARG, "%s: indices have dtype %s, want int64",
                        rgpu_op_name(e->op), rgpu_dtype_name(idx->dtype));
    }
    if (*kind == OP_SCAN_LOGCUMSUMEXP)
        RETURN_ERROR_IF(!op_dtype_is_float(out->dtype), RGPU_ERR_UNSUPPORTED,
                        "logcumsumexp: out dtype %s is not floating", rgpu_dtype_name(out->dtype));
    *n = in->ndim ? in->sizes[dim] : 1;
    *is = in->ndim ? in->strides[dim] : 0;
    *os = in->ndim ? out->strides[dim] : 0;
    *xs = in->ndim && idx ? idx->strides[dim] : 0;
    const rgpu_view *vs[3] = {in, out, idx};
    lines_init(L, in, in->ndim ? dim : -1, vs, 3);
    return RGPU_OK;
}

rgpu_status rgpu_op_searchsorted_check(const rgpu_exec *e, op_searchsorted_args *a, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "rr?", "r", err, errlen));
    const rgpu_view *bd = e->in[0], *v = e->in[1], *so = e->in[2], *out = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_index_arg_bool(e, 0, "right", &a->right, err, errlen));
    RETURN_ERROR_IF(bd->ndim == 0, RGPU_ERR_SHAPE,
                    "searchsorted(): boundaries tensor should have positive dimension, but got 0 dimension");
    RETURN_ERROR_IF(out->dtype != RGPU_I64 && out->dtype != RGPU_I32, RGPU_ERR_BAD_ARG,
                    "searchsorted: out dtype %s, want int64 or int32", rgpu_dtype_name(out->dtype));
    RETURN_ERROR_IF(bd->dtype == RGPU_BOOL || v->dtype == RGPU_BOOL, RGPU_ERR_UNSUPPORTED,
                    "searchsorted: bool tensors are not supported");
    FORWARD_IF_ERROR(want_shape(e, out, "out", v->ndim, v->sizes, err, errlen));
    if (so) {
        FORWARD_IF_ERROR(rgpu_op_index_check_index_dtype(e, so, false, err, errlen));
        RETURN_ERROR_IF(!rgpu_op_index_same_shape(so, bd), RGPU_ERR_SHAPE,
                        "searchsorted(): boundary and sorter must have the same size");
    }
    bool one = bd->ndim == 1;
    if (!one) {
        bool ok = bd->ndim == v->ndim;
        for (int d = 0; ok && d + 1 < v->ndim; d++) ok = bd->sizes[d] == v->sizes[d];
        RETURN_ERROR_IF(!ok, RGPU_ERR_SHAPE, "searchsorted(): boundaries tensor should be 1 dimension or the "
                        "first N-1 dimensions of boundaries tensor and input value tensor must match");
    }
    a->n = bd->sizes[bd->ndim - 1];
    a->bs = bd->strides[bd->ndim - 1];
    a->ss = so ? so->strides[so->ndim - 1] : 0;
    if (v->ndim == 0) {
        memset(&a->L, 0, sizeof a->L);
        a->L.total = 1;
        a->m = 1; a->vs = 0; a->os = 0;
        return RGPU_OK;
    }
    a->m = v->sizes[v->ndim - 1];
    a->vs = v->strides[v->ndim - 1];
    a->os = out->strides[v->ndim - 1];
    const rgpu_view *vs[4] = {v, out, one ? NULL : bd, one ? NULL : so};
    lines_init(&a->L, v, v->ndim - 1, vs, 4);
    return RGPU_OK;
}

rgpu_status rgpu_op_histc_check(const rgpu_exec *e, int64_t *bins, double *lo, double *hi, bool *from_data,
                           char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "r", "r", err, errlen));
    const rgpu_view *in = e->in[0], *out = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 0, "bins", bins, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_f64(e, 1, "min", lo, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_f64(e, 2, "max", hi, err, errlen));
    RETURN_ERROR_IF(!op_dtype_is_float(in->dtype), RGPU_ERR_UNSUPPORTED,
                    "histc: input dtype %s is not floating", rgpu_dtype_name(in->dtype));
    RETURN_ERROR_IF(out->dtype != in->dtype, RGPU_ERR_BAD_ARG, "histc: out dtype %s, want %s",
                    rgpu_dtype_name(out->dtype), rgpu_dtype_name(in->dtype));
    RETURN_ERROR_IF(*bins <= 0, RGPU_ERR_BAD_ARG, "histc(): bins must be > 0, but got %lld for dimension 0",
                    (long long)*bins);
    FORWARD_IF_ERROR(want_shape(e, out, "out", 1, bins, err, errlen));
    *from_data = *lo == *hi && rgpu_op_numel(in) > 0;
    if (!*from_data) {
        op_histc_widen(lo, hi);
        RETURN_ERROR_IF(isinf(*lo) || isinf(*hi) || isnan(*lo) || isnan(*hi), RGPU_ERR_BAD_ARG,
                        "torch.histc: range of [%g, %g] is not finite", *lo, *hi);
        RETURN_ERROR_IF(*lo > *hi, RGPU_ERR_BAD_ARG, "torch.histc: max must be larger than min");
    }
    return RGPU_OK;
}

rgpu_status rgpu_op_histogram_check(const rgpu_exec *e, bool *density, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "rr?", "rr", err, errlen));
    const rgpu_view *in = e->in[0], *bins = e->in[1], *w = e->in[2];
    FORWARD_IF_ERROR(rgpu_op_index_arg_bool(e, 0, "density", density, err, errlen));
    RETURN_ERROR_IF(!op_dtype_is_float(in->dtype), RGPU_ERR_UNSUPPORTED,
                    "histogram: input dtype %s is not floating", rgpu_dtype_name(in->dtype));
    RETURN_ERROR_IF(bins->ndim != 1 || bins->dtype != in->dtype, RGPU_ERR_BAD_ARG,
                    "torch.histogram: bins must be a 1-d tensor of the input's dtype");
    RETURN_ERROR_IF(bins->sizes[0] < 1, RGPU_ERR_BAD_ARG,
                    "torch.histogram(): bins tensor should have at least 1 element");
    if (w) {
        RETURN_ERROR_IF(!rgpu_op_index_same_shape(w, in) || w->dtype != in->dtype, RGPU_ERR_BAD_ARG,
                        "torch.histogram: weight must have the input's shape and dtype");
    }
    int64_t nb = bins->sizes[0] - 1;
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, e->out[0], "hist", in->dtype, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, e->out[1], "bin_edges", in->dtype, err, errlen));
    FORWARD_IF_ERROR(want_shape(e, e->out[0], "hist", 1, &nb, err, errlen));
    FORWARD_IF_ERROR(want_shape(e, e->out[1], "bin_edges", 1, bins->sizes, err, errlen));
    return RGPU_OK;
}
