/* op/dense.c — the dense ops' argument readers, checks and geometry
 * (op/dense.h): matmul operands, convolution, batch norm, pooling. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "dense.h"
#include "rnn.h"

/* ---------------------------------------------------------------------------
 * Checks and args */

rgpu_status rgpu_op_dense_check_io(const rgpu_exec *e, uint64_t opt_in, uint32_t opt_out, char *err, size_t errlen)
{
    return rgpu_op_check_exec(e, opt_in, opt_out, false, err, errlen);
}

static rgpu_status arg_get(const rgpu_exec *e, int i, const char *what, const rgpu_arg **a,
                           char *err, size_t errlen)
{
    if (i >= e->n_args || e->args == NULL)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: missing arg %d (%s)", rgpu_op_name(e->op), i, what);
    *a = &e->args[i];
    return RGPU_OK;
}

bool rgpu_op_dense_arg_is_none(const rgpu_exec *e, int i)
{
    return i < e->n_args && e->args != NULL && e->args[i].kind == RGPU_ARG_NONE;
}

rgpu_status rgpu_op_dense_arg_ints(const rgpu_exec *e, int i, const char *what, uint32_t min_n, uint32_t max_n,
                           int64_t *v, uint32_t *n, char *err, size_t errlen)
{
    const rgpu_arg *a;
    FORWARD_IF_ERROR(arg_get(e, i, what, &a, err, errlen));
    if (a->kind != RGPU_ARG_INTS)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want ints", rgpu_op_name(e->op), i, what, a->kind);
    if (a->v.ints.n < min_n || a->v.ints.n > max_n)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has %u ints, want %u to %u", rgpu_op_name(e->op), i, what,
                 a->v.ints.n, min_n, max_n);
    for (uint32_t k = 0; k < a->v.ints.n; k++) v[k] = rgpu_arg_int_at(a, k);
    *n = a->v.ints.n;
    return RGPU_OK;
}

rgpu_status rgpu_op_dense_arg_bool(const rgpu_exec *e, int i, const char *what, bool *v, char *err, size_t errlen)
{
    const rgpu_arg *a;
    FORWARD_IF_ERROR(arg_get(e, i, what, &a, err, errlen));
    if (a->kind != RGPU_ARG_BOOL && a->kind != RGPU_ARG_INT)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want bool", rgpu_op_name(e->op), i, what, a->kind);
    *v = a->v.i != 0;
    return RGPU_OK;
}

rgpu_status rgpu_op_dense_arg_int(const rgpu_exec *e, int i, const char *what, int64_t *v, char *err, size_t errlen)
{
    const rgpu_arg *a;
    FORWARD_IF_ERROR(arg_get(e, i, what, &a, err, errlen));
    if (a->kind != RGPU_ARG_INT)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want int", rgpu_op_name(e->op), i, what, a->kind);
    *v = a->v.i;
    return RGPU_OK;
}

rgpu_status rgpu_op_dense_arg_float(const rgpu_exec *e, int i, const char *what, double *v, char *err, size_t errlen)
{
    const rgpu_arg *a;
    FORWARD_IF_ERROR(arg_get(e, i, what, &a, err, errlen));
    if (a->kind == RGPU_ARG_FLOAT) *v = a->v.f;
    else if (a->kind == RGPU_ARG_INT) *v = (double)a->v.i;
    else RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want float", rgpu_op_name(e->op), i, what, a->kind);
    return RGPU_OK;
}

rgpu_status rgpu_op_dense_check_shape(const rgpu_view *v, const char *what, const int64_t *sizes, int ndim,
                              int op, char *err, size_t errlen)
{
    bool ok = v->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = v->sizes[d] == sizes[d];
    if (!ok) {
        char got[96], want[96];
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: %s has shape %s, the op gives %s", rgpu_op_name(op), what,
                 rgpu_op_shape_str(got, sizeof got, v->sizes, v->ndim, ", "), rgpu_op_shape_str(want, sizeof want, sizes, ndim, ", "));
    }
    return RGPU_OK;
}

rgpu_view rgpu_op_dense_subview(const rgpu_view *v, int dim, int64_t idx)
{
    rgpu_view s = *v;
    s.data = (char *)v->data + idx * v->strides[dim] * (int64_t)rgpu_dtype_size(v->dtype);
    for (int d = dim; d + 1 < v->ndim; d++) {
        s.sizes[d] = v->sizes[d + 1];
        s.strides[d] = v->strides[d + 1];
    }
    s.ndim = v->ndim - 1;
    return s;
}

rgpu_view rgpu_op_dense_unsqueeze(const rgpu_view *v, int dim)
{
    rgpu_view s = *v;
    for (int d = v->ndim; d > dim; d--) {
        s.sizes[d] = v->sizes[d - 1];
        s.strides[d] = v->strides[d - 1];
    }
    s.sizes[dim] = 1;
    s.strides[dim] = 0;
    s.ndim = v->ndim + 1;
    return s;
}

/* How BLAS can read a (rows, cols) operand with element strides s0, s1 in
 * place: row-major (no transpose, ld = s0) or column-major (transpose,
 * ld = s1). Size-1 dims take any stride. False when neither fits. */
bool rgpu_op_dense_blas_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, bool *trans, int64_t *ld)
{
    int64_t r1 = rows > 1 ? rows : 1, c1 = cols > 1 ? cols : 1;
    if ((cols == 1 || s1 == 1) && (rows == 1 || s0 >= c1)) {
        *trans = false;
        *ld = rows == 1 ? c1 : s0;
    } else if ((rows == 1 || s0 == 1) && (cols == 1 || s1 >= r1)) {
        *trans = true;
        *ld = cols == 1 ? r1 : s1;
    } else {
        return false;
    }
    return *ld <= INT_MAX;
}

/* Byte range [lo, hi) a view's elements can touch (empty view: lo == hi). */
static void view_span(const rgpu_view *v, uintptr_t *lo, uintptr_t *hi)
{
    *lo = *hi = (uintptr_t)v->data;
    if (rgpu_op_numel(v) == 0) return;
    int64_t last = 0;
    for (int d = 0; d < v->ndim; d++) last += (v->sizes[d] - 1) * v->strides[d];
    *hi = *lo + (uintptr_t)((last + 1) * (int64_t)rgpu_dtype_size(v->dtype));
}

bool rgpu_op_dense_views_overlap(const rgpu_view *a, const rgpu_view *b)
{
    uintptr_t alo, ahi, blo, bhi;
    view_span(a, &alo, &ahi);
    view_span(b, &blo, &bhi);
    return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

rgpu_status rgpu_op_dense_mm_args(const rgpu_exec *e, op_dense_mm *q, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_dense_check_io(e, 0, 0, err, errlen));
    memset(q, 0, sizeof *q);
    const char *name = rgpu_op_name(e->op);
    bool batched = q->batched = e->op == RGPU_OP_BMM || e->op == RGPU_OP_BADDBMM;
    bool has_self = q->has_self = e->op == RGPU_OP_ADDMM || e->op == RGPU_OP_BADDBMM;
    const rgpu_view *self = q->self = has_self ? e->in[0] : NULL;
    const rgpu_view *a = q->a = e->in[has_self ? 1 : 0], *b = q->b = e->in[has_self ? 2 : 1];
    rgpu_view *out = q->out = e->out[0];
    int nd = q->nd = batched ? 3 : 2;
    char s1[96], s2[96];

    if (a->ndim != nd || b->ndim != nd)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: operands must be %d-d, got %d-d and %d-d", name, nd, a->ndim, b->ndim);
    int64_t nb = q->nb = batched ? a->sizes[0] : 1;
    int64_t n = q->n = a->sizes[nd - 2], k = q->k = a->sizes[nd - 1], m = q->m = b->sizes[nd - 1];
    if (b->sizes[nd - 2] != k || (batched && b->sizes[0] != nb))
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: shapes %s and %s cannot be multiplied", name,
                 rgpu_op_shape_str(s1, sizeof s1, a->sizes, nd, ", "), rgpu_op_shape_str(s2, sizeof s2, b->sizes, nd, ", "));
    int dt = q->dt = out->dtype;
    if (a->dtype != dt || b->dtype != dt || (self && self->dtype != dt))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: operands must share the output's dtype %s (got %s, %s%s%s)", name,
                 rgpu_dtype_name(dt), rgpu_dtype_name(a->dtype), rgpu_dtype_name(b->dtype),
                 self ? ", " : "", self ? rgpu_dtype_name(self->dtype) : "");
    if (dt == RGPU_BOOL) RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for bool (as ATen)", name);
    if (dt == RGPU_C32) RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for complex32", name);
    int64_t *want = q->want;
    want[0] = nb; want[1] = n; want[2] = m;
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(out, "out", batched ? want : want + 1, nd, e->op, err, errlen));
    if (n > INT_MAX || m > INT_MAX || k > INT_MAX)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: a dimension over %d is too large for BLAS", name, INT_MAX);

    double alpha = 1.0, beta = 0.0;
    if (has_self) {
        const rgpu_arg *args[2];
        for (int i = 0; i < 2; i++) {
            FORWARD_IF_ERROR(arg_get(e, i, i ? "alpha" : "beta", &args[i], err, errlen));
            int kd = args[i]->kind;
            if (kd != RGPU_ARG_INT && kd != RGPU_ARG_FLOAT && kd != RGPU_ARG_BOOL)
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want a scalar", name, i,
                         i ? "alpha" : "beta", kd);
        }
        beta = rgpu_arg_as_f64(args[0]);
        alpha = rgpu_arg_as_f64(args[1]);
        if (!op_dtype_is_float(dt) && !op_dtype_is_complex(dt)) {   /* Scalar.to<int>() truncates */
            beta = (double)(args[0]->kind == RGPU_ARG_FLOAT ? op_f64_to_i64_sat(beta) : rgpu_arg_as_i64(args[0]));
            alpha = (double)(args[1]->kind == RGPU_ARG_FLOAT ? op_f64_to_i64_sat(alpha) : rgpu_arg_as_i64(args[1]));
        }
    }
    q->alpha = alpha; q->beta = beta;
    q->use_self = has_self && beta != 0.0;

    /* self broadcast over out's (B, n, m): strides ss, 0 on broadcast dims */
    int64_t *ss = q->ss;
    if (self) {
        if (self->ndim > nd)
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: self has %d dims, more than the output's %d", name, self->ndim, nd);
        int lead = nd - self->ndim;
        for (int d = lead; d < nd; d++) {
            int64_t s = self->sizes[d - lead], o = (batched ? want : want + 1)[d];
            if (s != o && s != 1)
                RETURN_ERROR(RGPU_ERR_SHAPE, "%s: self %s does not broadcast to the output's shape", name,
                         rgpu_op_shape_str(s1, sizeof s1, self->sizes, self->ndim, ", "));
            ss[d + (batched ? 0 : 1)] = s == 1 ? 0 : self->strides[d - lead];
        }
    }
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Convolution (geometry parsed and checked once for both backends) */

#define CONV_PARAM_MAX (1LL << 31)

/* A spatial param list: 1 value (expanded) or one per spatial dim. */
static rgpu_status conv_param(const rgpu_exec *e, int i, const char *what, int spatial, bool allow_empty,
                              int64_t lo, int64_t dflt, int64_t out[3], char *err, size_t errlen)
{
    int64_t v[3];
    uint32_t n;
    FORWARD_IF_ERROR(rgpu_op_dense_arg_ints(e, i, what, allow_empty ? 0 : 1, (uint32_t)spatial, v, &n, err, errlen));
    for (int d = 0; d < spatial; d++) {
        out[d] = n == 0 ? dflt : n == 1 ? v[0] : v[d];
        if (out[d] < lo || out[d] > CONV_PARAM_MAX)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: %s %lld is out of range (want %lld to %lld)", rgpu_op_name(e->op),
                     what, (long long)out[d], (long long)lo, (long long)CONV_PARAM_MAX);
    }
    for (int d = spatial; d < 3; d++) out[d] = out[0];
    return RGPU_OK;
}

/* args from position base: stride, padding, dilation, transposed, output_padding, groups. */
rgpu_status rgpu_op_conv_parse_args(const rgpu_exec *e, int base, int spatial, op_conv_args *a, char *err, size_t errlen)
{
    a->spatial = spatial;
    FORWARD_IF_ERROR(conv_param(e, base + 0, "stride", spatial, false, 1, 1, a->stride, err, errlen));
    FORWARD_IF_ERROR(conv_param(e, base + 1, "padding", spatial, false, 0, 0, a->padding, err, errlen));
    FORWARD_IF_ERROR(conv_param(e, base + 2, "dilation", spatial, false, 1, 1, a->dilation, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_dense_arg_bool(e, base + 3, "transposed", &a->transposed, err, errlen));
    FORWARD_IF_ERROR(conv_param(e, base + 4, "output_padding", spatial, true, 0, 0, a->out_pad, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_dense_arg_int(e, base + 5, "groups", &a->groups, err, errlen));
    if (a->groups < 1 || a->groups > CONV_PARAM_MAX)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: groups %lld is out of range", rgpu_op_name(e->op), (long long)a->groups);
    return RGPU_OK;
}

/* Geometry from the forward input x and weight w (4-d, 1-d ones having
 * H = kh = 1 inserted, or 5-d). Also gives the forward output's shape in
 * y[x->ndim]. Below 3-d the depth is 1 with unit params. */
rgpu_status rgpu_op_conv_geometry(const rgpu_exec *e, const rgpu_view *x, const rgpu_view *w, const op_conv_args *a,
                          op_conv_geom *g, int64_t y[5], char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    int sp = a->spatial, nd = x->ndim;
    memset(g, 0, sizeof *g);
    /* spatial params apply to (D, H, W); a 1-d conv has H = 1, a 1-/2-d one
     * D = 1, with unit params */
    int64_t s[3], p[3], d[3], op[3], xs[3], ks[3], outs[3];
    for (int i = 0; i < 3; i++) {
        int j = i - (3 - sp);              /* index into a's lists; < 0: a unit dim */
        bool unit = j < 0;
        s[i] = unit ? 1 : a->stride[j];
        p[i] = unit ? 0 : a->padding[j];
        d[i] = unit ? 1 : a->dilation[j];
        op[i] = unit ? 0 : a->out_pad[j];
        int vd = i - (5 - nd);             /* index into the views' sizes past (N, C) */
        xs[i] = vd < 0 ? 1 : x->sizes[2 + vd];
        ks[i] = vd < 0 ? 1 : w->sizes[2 + vd];
    }
    g->kt = ks[0]; g->kh = ks[1]; g->kw = ks[2];
    g->st = s[0]; g->sh = s[1]; g->sw = s[2]; g->pt = p[0]; g->ph = p[1]; g->pw = p[2];
    g->dt = d[0]; g->dh = d[1]; g->dw = d[2];
    g->groups = a->groups;
    g->N = x->sizes[0];
    if (g->kt == 0 || g->kh == 0 || g->kw == 0 || w->sizes[0] == 0)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: weight has a zero-size dim", name);
    int64_t ch;
    if (!a->transposed) {
        g->C = x->sizes[1]; g->D = xs[0]; g->H = xs[1]; g->W = xs[2];
        g->O = w->sizes[0];
        if (g->C % g->groups != 0 || w->sizes[1] * g->groups != g->C || g->O % g->groups != 0)
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: weight (%lld, %lld, ...) does not fit %lld input channels in %lld groups",
                     name, (long long)w->sizes[0], (long long)w->sizes[1], (long long)g->C, (long long)g->groups);
        for (int i = 0; i < 3; i++) {
            int64_t span = d[i] * (ks[i] - 1) + 1, padded = xs[i] + 2 * p[i];
            if (padded < span)
                RETURN_ERROR(RGPU_ERR_SHAPE, "%s: padded input size %lld is smaller than the dilated kernel %lld",
                         name, (long long)padded, (long long)span);
            outs[i] = (padded - span) / s[i] + 1;
        }
        g->Do = outs[0]; g->Ho = outs[1]; g->Wo = outs[2];
        ch = g->O;
    } else {
        /* x is on the G side: (N, C_in, [D,] H, W), weight (C_in, C_out/groups, [kt,] kh, kw) */
        g->O = x->sizes[1]; g->Do = xs[0]; g->Ho = xs[1]; g->Wo = xs[2];
        if (w->sizes[0] != g->O || g->O % g->groups != 0)
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: transposed weight (%lld, ...) does not fit %lld input channels in %lld groups",
                     name, (long long)w->sizes[0], (long long)g->O, (long long)g->groups);
        g->C = w->sizes[1] * g->groups;
        for (int i = 0; i < 3; i++) {
            if (op[i] >= s[i] && op[i] >= d[i])
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: output padding %lld must be smaller than stride %lld or dilation %lld",
                         name, (long long)op[i], (long long)s[i], (long long)d[i]);
            outs[i] = (xs[i] - 1) * s[i] - 2 * p[i] + d[i] * (ks[i] - 1) + op[i] + 1;
            if (outs[i] < 0)   /* 0 is an empty output, as ATen */
                RETURN_ERROR(RGPU_ERR_SHAPE, "%s: transposed output size %lld is negative", name, (long long)outs[i]);
        }
        g->D = outs[0]; g->H = outs[1]; g->W = outs[2];
        ch = g->C;
    }
    y[0] = g->N; y[1] = ch;
    for (int i = 5 - nd; i < 3; i++) y[2 + i - (5 - nd)] = outs[i];
    g->in_sp = g->D * g->H * g->W;
    g->out_sp = g->Do * g->Ho * g->Wo;
    g->kvol = g->kt * g->kh * g->kw;
    g->Cg = g->C / g->groups;
    g->Og = g->O / g->groups;
    g->pointwise = g->kvol == 1 && g->st == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 && g->ph == 0 &&
                   g->pw == 0 && g->D == g->Do && g->H == g->Ho && g->W == g->Wo;   /* output_padding can make them differ */
    return RGPU_OK;
}

/* Products the cores need must fit BLAS's int and size_t. Called after the
 * shapes were matched against real views. */
rgpu_status rgpu_op_conv_check_sizes(const rgpu_exec *e, const op_conv_geom *g, char *err, size_t errlen)
{
    int64_t kd, hwo, hw, col, ob, ib, t;
    if (__builtin_mul_overflow(g->kt, g->kh * g->kw, &t) || __builtin_mul_overflow(g->Cg, t, &kd) ||
        __builtin_mul_overflow(g->Do * g->Ho, g->Wo, &hwo) ||
        __builtin_mul_overflow(g->D * g->H, g->W, &hw) || __builtin_mul_overflow(kd, hwo, &col) ||
        __builtin_mul_overflow(g->O, hwo, &ob) || __builtin_mul_overflow(g->C, hw, &ib) ||
        kd > INT_MAX || hwo > INT_MAX || hw > INT_MAX || g->Og > INT_MAX || g->Cg > INT_MAX)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: convolution too large for BLAS (int dims)", rgpu_op_name(e->op));
    return RGPU_OK;
}

/* 3-d views (N,C,L) become (N,C,1,L). */
rgpu_view rgpu_op_conv_as_4d(const rgpu_view *v)
{
    return v->ndim == 3 ? rgpu_op_dense_unsqueeze(v, 2) : *v;
}

rgpu_status rgpu_op_conv_check_dims(const rgpu_exec *e, const rgpu_view *x, const rgpu_view *w, const char *backend,
                            char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    (void)backend;
    if ((x->ndim != 3 && x->ndim != 4 && x->ndim != 5) || w->ndim != x->ndim)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: want a (N,C,L), (N,C,H,W) or (N,C,D,H,W) input with a weight of as many "
                 "dims, got %d-d and %d-d", name, x->ndim, w->ndim);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Batch norm */

/* A present per-channel param must be a floating (C) vector. */
static rgpu_status check_param(const rgpu_exec *e, const rgpu_view *v, const char *what, int64_t C,
                               char *err, size_t errlen)
{
    if (v == NULL) return RGPU_OK;
    if (v->ndim != 1 || v->sizes[0] != C)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: %s must be a vector of %lld channels", rgpu_op_name(e->op), what, (long long)C);
    if (!op_dtype_is_float(v->dtype))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: %s has dtype %s, want a floating dtype", rgpu_op_name(e->op), what,
                 rgpu_dtype_name(v->dtype));
    return RGPU_OK;
}

/* Shared checks on x (N,C,*) and the per-channel count. */
static rgpu_status check_x(const rgpu_exec *e, const rgpu_view *x, int64_t *C, int64_t *n, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    if (x->ndim < 2) RETURN_ERROR(RGPU_ERR_SHAPE, "%s: input must be (N,C) or (N,C,*), got %d-d", name, x->ndim);
    if (!op_dtype_is_float(x->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for %s (as ATen)", name, rgpu_dtype_name(x->dtype));
    int64_t numel = rgpu_op_numel(x);
    if (numel == 0) RETURN_ERROR(RGPU_ERR_SHAPE, "%s: input tensor must have at least one element", name);
    *C = x->sizes[1];
    *n = numel / *C;
    return RGPU_OK;
}

/* in x, w?, b?, running_mean?, running_var?; training, momentum, eps;
 * outs y, save_mean, save_invstd (size 0 in eval, as ATen) */
rgpu_status rgpu_op_bn_forward_setup(const rgpu_exec *e, op_bn_setup *s, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_dense_check_io(e, 0x1eu, 0x6u, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *x = e->in[0], *w = e->in[1], *b = e->in[2], *rm = e->in[3], *rv = e->in[4];
    rgpu_view *y = e->out[0], *sm = e->out[1], *si = e->out[2];
    FORWARD_IF_ERROR(rgpu_op_dense_arg_bool(e, 0, "training", &s->training, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_dense_arg_float(e, 1, "momentum", &s->momentum, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_dense_arg_float(e, 2, "eps", &s->eps, err, errlen));
    FORWARD_IF_ERROR(check_x(e, x, &s->C, &s->n, err, errlen));
    int64_t C = s->C;
    FORWARD_IF_ERROR(check_param(e, w, "weight", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, b, "bias", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, rm, "running_mean", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, rv, "running_var", C, err, errlen));
    if (!s->training && (!rm || !rv))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: running_mean and running_var must be defined in evaluation mode", name);
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(y, "out", x->sizes, x->ndim, e->op, err, errlen));
    if (!op_dtype_is_float(y->dtype))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: output dtype %s is not floating", name, rgpu_dtype_name(y->dtype));
    /* save_mean / save_invstd: (C) when written, empty when not (eval) */
    rgpu_view **saves = s->saves;
    saves[0] = sm; saves[1] = si;
    for (int k = 0; k < 2; k++) {
        if (!saves[k]) continue;
        if (rgpu_op_numel(saves[k]) == 0) { saves[k] = NULL; continue; }
        FORWARD_IF_ERROR(rgpu_op_dense_check_shape(saves[k], k ? "save_invstd" : "save_mean", &C, 1, e->op, err, errlen));
        if (!op_dtype_is_float(saves[k]->dtype))
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: saved stats must be floating", name);
    }
    /* ATen keeps the stats in tensors of x's dtype, or f32 when the params
     * are f32 and x is reduced ("mixed type"), and normalises with them as
     * stored: we round the same way */
    s->stat_dt = x->dtype;
    if (sm) s->stat_dt = sm->dtype;
    else if ((w && w->dtype != x->dtype) || (b && b->dtype != x->dtype) || (rm && rm->dtype != x->dtype) ||
             (rv && rv->dtype != x->dtype)) s->stat_dt = RGPU_F32;
    return RGPU_OK;
}

/* in grad, x, w?, running_mean?, running_var?, save_mean?, save_invstd?;
 * training, eps; outs dx?, dw?, db? */
rgpu_status rgpu_op_bn_backward_setup(const rgpu_exec *e, op_bn_setup *s, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_dense_check_io(e, 0x7cu, 0x7u, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *gr = e->in[0], *x = e->in[1], *w = e->in[2], *rm = e->in[3], *rv = e->in[4];
    const rgpu_view *sm = e->in[5], *si = e->in[6];
    rgpu_view *dx = e->out[0], *dw = e->out[1], *db = e->out[2];
    memset(s, 0, sizeof *s);
    FORWARD_IF_ERROR(rgpu_op_dense_arg_bool(e, 0, "training", &s->training, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_dense_arg_float(e, 1, "eps", &s->eps, err, errlen));
    bool training = s->training;
    FORWARD_IF_ERROR(check_x(e, x, &s->C, &s->n, err, errlen));
    int64_t C = s->C;
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(gr, "grad", x->sizes, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(check_param(e, w, "weight", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, rm, "running_mean", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, rv, "running_var", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, sm, "save_mean", C, err, errlen));
    FORWARD_IF_ERROR(check_param(e, si, "save_invstd", C, err, errlen));
    if (training && (!sm || !si))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: save_mean and save_invstd must be defined in training mode", name);
    if (!training && (!rm || !rv))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: running_mean and running_var must be defined in evaluation mode", name);
    if (!op_dtype_is_float(gr->dtype))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: grad dtype %s is not floating", name, rgpu_dtype_name(gr->dtype));
    if (dx) FORWARD_IF_ERROR(rgpu_op_dense_check_shape(dx, "grad_input", x->sizes, x->ndim, e->op, err, errlen));
    if (dw) FORWARD_IF_ERROR(rgpu_op_dense_check_shape(dw, "grad_weight", &C, 1, e->op, err, errlen));
    if (db) FORWARD_IF_ERROR(rgpu_op_dense_check_shape(db, "grad_bias", &C, 1, e->op, err, errlen));
    rgpu_view *outs[3] = { dx, dw, db };
    for (int k = 0; k < 3; k++)
        if (outs[k] && !op_dtype_is_float(outs[k]->dtype))
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: out[%d] dtype %s is not floating", name, k, rgpu_dtype_name(outs[k]->dtype));
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Pooling */

#define POOL_PARAM_MAX (1LL << 31)

static int64_t div_floor(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t s, int64_t d, bool ceil_mode)
{
    int64_t o = div_floor(in + 2 * pad - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0), s) + 1;
    if (ceil_mode && (o - 1) * s >= in + pad) o--;
    return o;
}

/* A 1-or-2 int list into (h, w); empty gives dflt when allow_empty. */
static rgpu_status pool_pair(const rgpu_exec *e, int i, const char *what, bool allow_empty, const int64_t dflt[2],
                             int64_t lo, int64_t out[2], char *err, size_t errlen)
{
    int64_t v[2];
    uint32_t n;
    FORWARD_IF_ERROR(rgpu_op_dense_arg_ints(e, i, what, allow_empty ? 0 : 1, 2, v, &n, err, errlen));
    for (int d = 0; d < 2; d++) {
        out[d] = n == 0 ? dflt[d] : n == 1 ? v[0] : v[d];
        if (out[d] < lo || out[d] > POOL_PARAM_MAX)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: %s %lld is out of range (want %lld to %lld)", rgpu_op_name(e->op), what,
                     (long long)out[d], (long long)lo, (long long)POOL_PARAM_MAX);
    }
    return RGPU_OK;
}

/* x is (C,H,W) or (N,C,H,W) with C, H, W > 0 (N may be 0), as ATen. */
rgpu_status rgpu_op_pool_input(const rgpu_exec *e, const rgpu_view *x, op_pool_geom *g, char *err, size_t errlen)
{
    char s[96];
    if (x->ndim != 3 && x->ndim != 4)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: expected a 3-d or 4-d input, got %s", rgpu_op_name(e->op),
                 rgpu_op_shape_str(s, sizeof s, x->sizes, x->ndim, ", "));
    int l = x->ndim - 3;
    for (int d = l; d < x->ndim; d++)
        if (x->sizes[d] == 0)
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: expected non-empty C, H, W dims (only the batch may be 0), got %s",
                     rgpu_op_name(e->op), rgpu_op_shape_str(s, sizeof s, x->sizes, x->ndim, ", "));
    g->N = l ? x->sizes[0] : 1;
    g->C = x->sizes[l];
    g->H = x->sizes[l + 1];
    g->W = x->sizes[l + 2];
    return RGPU_OK;
}

/* max: kernel, stride, padding, dilation, ceil_mode; avg: kernel, stride,
 * padding, ceil_mode, count_include_pad, divisor_override|NONE. */
rgpu_status rgpu_op_pool_args(const rgpu_exec *e, bool is_max, op_pool_geom *g, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    int64_t k[2], s[2], p[2], d[2] = { 1, 1 };
    FORWARD_IF_ERROR(pool_pair(e, 0, "kernel_size", false, NULL, 1, k, err, errlen));
    FORWARD_IF_ERROR(pool_pair(e, 1, "stride", true, k, 1, s, err, errlen));
    FORWARD_IF_ERROR(pool_pair(e, 2, "padding", false, NULL, 0, p, err, errlen));
    int next = 3;
    if (is_max) FORWARD_IF_ERROR(pool_pair(e, next++, "dilation", false, NULL, 1, d, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_dense_arg_bool(e, next++, "ceil_mode", &g->ceil_mode, err, errlen));
    g->count_include_pad = true;
    g->has_divisor = false;
    if (!is_max) {
        FORWARD_IF_ERROR(rgpu_op_dense_arg_bool(e, next++, "count_include_pad", &g->count_include_pad, err, errlen));
        if (!rgpu_op_dense_arg_is_none(e, next)) {
            FORWARD_IF_ERROR(rgpu_op_dense_arg_int(e, next, "divisor_override", &g->divisor, err, errlen));
            if (g->divisor == 0) RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: divisor must be not zero", name);
            g->has_divisor = true;
        }
    }
    if (k[0] / 2 < p[0] || k[1] / 2 < p[1])
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: pad should be at most half of kernel size, got pad (%lld, %lld), kernel (%lld, %lld)",
                 name, (long long)p[0], (long long)p[1], (long long)k[0], (long long)k[1]);
    g->kh = k[0]; g->kw = k[1]; g->sh = s[0]; g->sw = s[1];
    g->ph = p[0]; g->pw = p[1]; g->dh = d[0]; g->dw = d[1];
    g->Ho = pool_out_size(g->H, g->kh, g->ph, g->sh, g->dh, g->ceil_mode);
    g->Wo = pool_out_size(g->W, g->kw, g->pw, g->sw, g->dw, g->ceil_mode);
    if (g->Ho < 1 || g->Wo < 1)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: input (%lld, %lld) gives output size (%lld, %lld), too small", name,
                 (long long)g->H, (long long)g->W, (long long)g->Ho, (long long)g->Wo);
    return RGPU_OK;
}

/* Sizes of x with the last two dims replaced by (h, w). */
void rgpu_op_pool_shape(const rgpu_view *x, int64_t h, int64_t w, int64_t out[4])
{
    for (int d = 0; d < x->ndim; d++) out[d] = x->sizes[d];
    out[x->ndim - 2] = h;
    out[x->ndim - 1] = w;
}

/* in x; kernel, stride, padding, dilation, ceil_mode; outs y, indices (i64) */
rgpu_status rgpu_op_pool_max_check(const rgpu_exec *e, op_pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_dense_check_io(e, 0, 0, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0], *ind = e->out[1];
    FORWARD_IF_ERROR(rgpu_op_pool_input(e, x, g, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_pool_args(e, true, g, err, errlen));
    if (x->dtype == RGPU_BOOL) RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for bool (as ATen)", name);
    if (y->dtype != x->dtype || ind->dtype != RGPU_I64)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: want out dtype %s and int64 indices, got %s and %s", name,
                 rgpu_dtype_name(x->dtype), rgpu_dtype_name(y->dtype), rgpu_dtype_name(ind->dtype));
    int64_t ys[4];
    rgpu_op_pool_shape(x, g->Ho, g->Wo, ys);
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(y, "out", ys, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(ind, "indices", ys, x->ndim, e->op, err, errlen));
    return RGPU_OK;
}

/* in grad, x, indices; same args as forward; out dx */
rgpu_status rgpu_op_pool_max_backward_check(const rgpu_exec *e, op_pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_dense_check_io(e, 0, 0, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *gr = e->in[0], *x = e->in[1], *ind = e->in[2];
    rgpu_view *dx = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_pool_input(e, x, g, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_pool_args(e, true, g, err, errlen));
    if (!op_dtype_is_float(x->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for %s (as ATen)", name, rgpu_dtype_name(x->dtype));
    if (gr->dtype != x->dtype || dx->dtype != x->dtype || ind->dtype != RGPU_I64)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: grad and grad_input must have dtype %s and indices int64", name,
                 rgpu_dtype_name(x->dtype));
    int64_t ys[4];
    rgpu_op_pool_shape(x, g->Ho, g->Wo, ys);
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(gr, "grad", ys, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(ind, "indices", ys, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(dx, "grad_input", x->sizes, x->ndim, e->op, err, errlen));
    return RGPU_OK;
}

static rgpu_status avg_check_dtype(const rgpu_exec *e, int dt, char *err, size_t errlen)
{
    if (!op_dtype_is_float(dt) && dt != RGPU_I64)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for %s (floating or int64, as ATen)",
                 rgpu_op_name(e->op), rgpu_dtype_name(dt));
    return RGPU_OK;
}

/* in x; kernel, stride, padding, ceil_mode, count_include_pad, divisor_override|NONE */
rgpu_status rgpu_op_pool_avg_check(const rgpu_exec *e, op_pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_dense_check_io(e, 0, 0, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_pool_input(e, x, g, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_pool_args(e, false, g, err, errlen));
    FORWARD_IF_ERROR(avg_check_dtype(e, x->dtype, err, errlen));
    if (y->dtype != x->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: out dtype %s differs from the input's %s", rgpu_op_name(e->op),
                 rgpu_dtype_name(y->dtype), rgpu_dtype_name(x->dtype));
    int64_t ys[4];
    rgpu_op_pool_shape(x, g->Ho, g->Wo, ys);
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(y, "out", ys, x->ndim, e->op, err, errlen));
    return RGPU_OK;
}

/* in grad, x; same args as forward; out dx */
rgpu_status rgpu_op_pool_avg_backward_check(const rgpu_exec *e, op_pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_dense_check_io(e, 0, 0, err, errlen));
    const rgpu_view *gr = e->in[0], *x = e->in[1];
    rgpu_view *dx = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_pool_input(e, x, g, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_pool_args(e, false, g, err, errlen));
    FORWARD_IF_ERROR(avg_check_dtype(e, x->dtype, err, errlen));
    if (gr->dtype != x->dtype || dx->dtype != x->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: grad and grad_input must have the input's dtype %s", rgpu_op_name(e->op),
                 rgpu_dtype_name(x->dtype));
    int64_t ys[4];
    rgpu_op_pool_shape(x, g->Ho, g->Wo, ys);
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(gr, "grad", ys, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(dx, "grad_input", x->sizes, x->ndim, e->op, err, errlen));
    return RGPU_OK;
}

static rgpu_status adaptive_common(const rgpu_exec *e, const rgpu_view *x, op_pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_pool_input(e, x, g, err, errlen));
    if (!op_dtype_is_float(x->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for %s (as ATen)", rgpu_op_name(e->op),
                 rgpu_dtype_name(x->dtype));
    int64_t p;
    /* window arithmetic multiplies an output index by an input size */
    if (__builtin_mul_overflow(g->Ho + 1, g->H, &p) || __builtin_mul_overflow(g->Wo + 1, g->W, &p))
        RETURN_ERROR(RGPU_ERR_OVERFLOW, "%s: output size times input size overflows", rgpu_op_name(e->op));
    return RGPU_OK;
}

/* in x; ints output_size (2) */
rgpu_status rgpu_op_pool_adaptive_check(const rgpu_exec *e, op_pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_dense_check_io(e, 0, 0, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0];
    memset(g, 0, sizeof *g);
    int64_t os[2];
    uint32_t n;
    FORWARD_IF_ERROR(rgpu_op_dense_arg_ints(e, 0, "output_size", 2, 2, os, &n, err, errlen));
    if (os[0] < 0 || os[1] < 0)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: output_size must be >= 0, got (%lld, %lld)", rgpu_op_name(e->op),
                 (long long)os[0], (long long)os[1]);
    g->Ho = os[0]; g->Wo = os[1];
    int64_t ys[4];
    FORWARD_IF_ERROR(rgpu_op_pool_input(e, x, g, err, errlen));
    rgpu_op_pool_shape(x, g->Ho, g->Wo, ys);
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(y, "out", ys, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(adaptive_common(e, x, g, err, errlen));
    if (y->dtype != x->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: out dtype %s differs from the input's %s", rgpu_op_name(e->op),
                 rgpu_dtype_name(y->dtype), rgpu_dtype_name(x->dtype));
    return RGPU_OK;
}

/* in grad (.., Ho, Wo), x; out dx */
rgpu_status rgpu_op_pool_adaptive_backward_check(const rgpu_exec *e, op_pool_geom *g, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_dense_check_io(e, 0, 0, err, errlen));
    const rgpu_view *gr = e->in[0], *x = e->in[1];
    rgpu_view *dx = e->out[0];
    memset(g, 0, sizeof *g);
    FORWARD_IF_ERROR(rgpu_op_pool_input(e, x, g, err, errlen));
    if (gr->ndim != x->ndim)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: grad has %d dims, input %d", rgpu_op_name(e->op), gr->ndim, x->ndim);
    g->Ho = gr->sizes[gr->ndim - 2];
    g->Wo = gr->sizes[gr->ndim - 1];
    int64_t ys[4];
    rgpu_op_pool_shape(x, g->Ho, g->Wo, ys);
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(gr, "grad", ys, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(dx, "grad_input", x->sizes, x->ndim, e->op, err, errlen));
    FORWARD_IF_ERROR(adaptive_common(e, x, g, err, errlen));
    if (gr->dtype != x->dtype || dx->dtype != x->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: grad and grad_input must have the input's dtype %s", rgpu_op_name(e->op),
                 rgpu_dtype_name(x->dtype));
    return RGPU_OK;
}

rgpu_status rgpu_op_conv_fwd_args(const rgpu_exec *e, const char *backend, op_conv_fwd *q, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_dense_check_io(e, 1u << 2, 0, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *x0 = e->in[0], *w0 = e->in[1], *bias = e->in[2];
    rgpu_view *y0 = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_conv_check_dims(e, x0, w0, backend, err, errlen));
    int dt = y0->dtype;
    if (x0->dtype != dt || w0->dtype != dt || (bias && bias->dtype != dt))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: input, weight and bias must share the output's dtype %s", name,
                 rgpu_dtype_name(dt));
    if (dt == RGPU_BOOL) RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for bool (as ATen)", name);
    if (dt == RGPU_C32) RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for complex32", name);
    q->x0 = x0; q->w0 = w0; q->bias = bias; q->y0 = y0; q->dt = dt;
    FORWARD_IF_ERROR(rgpu_op_conv_parse_args(e, 0, x0->ndim - 2, &q->a, err, errlen));
    q->x = rgpu_op_conv_as_4d(x0); q->w = rgpu_op_conv_as_4d(w0); q->y = rgpu_op_conv_as_4d(y0);
    int64_t ys[5];
    FORWARD_IF_ERROR(rgpu_op_conv_geometry(e, &q->x, &q->w, &q->a, &q->g, ys, err, errlen));
    int64_t ys3[3] = { ys[0], ys[1], ys[3] };   /* 1-d: drop the inserted H */
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(y0, "out", x0->ndim == 3 ? ys3 : ys, x0->ndim, e->op, err, errlen));
    q->nb = q->a.transposed ? q->g.C : q->g.O;
    if (bias && (bias->ndim != 1 || bias->sizes[0] != q->nb))
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: bias must be (%lld), got %d-d", name, (long long)q->nb, bias->ndim);
    q->empty = rgpu_op_numel(y0) == 0;
    if (!q->empty) FORWARD_IF_ERROR(rgpu_op_conv_check_sizes(e, &q->g, err, errlen));
    return RGPU_OK;
}

rgpu_status rgpu_op_conv_bwd_args(const rgpu_exec *e, const char *backend, op_conv_bwd *q, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_dense_check_io(e, 0, 7u, err, errlen));
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *gr0 = e->in[0], *x0 = e->in[1], *w0 = e->in[2];
    rgpu_view *dx0 = e->out[0], *dw0 = e->out[1], *db = e->out[2];
    FORWARD_IF_ERROR(rgpu_op_conv_check_dims(e, x0, w0, backend, err, errlen));
    int dt = x0->dtype;
    if (!op_dtype_is_float(dt))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for %s (floating dtypes only, as ATen)", name,
                 rgpu_dtype_name(dt));
    if (gr0->dtype != dt || w0->dtype != dt || (dx0 && dx0->dtype != dt) || (dw0 && dw0->dtype != dt) ||
        (db && db->dtype != dt))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: grad, input, weight and the gradients must share dtype %s", name,
                 rgpu_dtype_name(dt));
    /* bias_sizes only says whether db was wanted; db's shape is checked below */
    if (!rgpu_op_dense_arg_is_none(e, 0)) {
        int64_t bs[1];
        uint32_t nbs;
        FORWARD_IF_ERROR(rgpu_op_dense_arg_ints(e, 0, "bias_sizes", 1, 1, bs, &nbs, err, errlen));
    }
    q->gr0 = gr0; q->x0 = x0; q->w0 = w0; q->dx0 = dx0; q->dw0 = dw0; q->db = db; q->dt = dt;
    FORWARD_IF_ERROR(rgpu_op_conv_parse_args(e, 1, x0->ndim - 2, &q->a, err, errlen));
    q->x = rgpu_op_conv_as_4d(x0); q->w = rgpu_op_conv_as_4d(w0); q->gr = rgpu_op_conv_as_4d(gr0);
    int64_t ys[5];
    FORWARD_IF_ERROR(rgpu_op_conv_geometry(e, &q->x, &q->w, &q->a, &q->g, ys, err, errlen));
    int nd = x0->ndim;
    int64_t ys3[3] = { ys[0], ys[1], ys[3] };
    FORWARD_IF_ERROR(rgpu_op_dense_check_shape(gr0, "grad", nd == 3 ? ys3 : ys, nd, e->op, err, errlen));
    if (dx0) FORWARD_IF_ERROR(rgpu_op_dense_check_shape(dx0, "grad_input", x0->sizes, nd, e->op, err, errlen));
    if (dw0) FORWARD_IF_ERROR(rgpu_op_dense_check_shape(dw0, "grad_weight", w0->sizes, nd, e->op, err, errlen));
    if (db) FORWARD_IF_ERROR(rgpu_op_dense_check_shape(db, "grad_bias", &ys[1], 1, e->op, err, errlen));
    return rgpu_op_conv_check_sizes(e, &q->g, err, errlen);
}

/* --- fused recurrent cells ------------------------------------------------------------ */

/* per slot: k > 0 a (B, k*H) matrix, k < 0 a (-k*H,) bias, 0 none; opt: may be absent */
typedef struct cell_sig {
    int op, hidden_in;              /* the (B, H) input that gives B and H */
    signed char in[5], out[3];
    unsigned opt_in;
} cell_sig;

static const cell_sig CELL_SIGS[] = {
    { RGPU_OP_LSTM_CELL,          2, { 4, 4, 1, -4, -4 }, { 1, 1, 4 }, 0x18u },
    { RGPU_OP_LSTM_CELL_BACKWARD, 2, { 1, 1, 1, 1, 4 },   { 4, 1, 0 }, 0x03u },
    { RGPU_OP_GRU_CELL,           2, { 3, 3, 1, -3, -3 }, { 1, 5, 0 }, 0x18u },
    { RGPU_OP_GRU_CELL_BACKWARD,  0, { 1, 5, 0, 0, 0 },   { 3, 3, 1 }, 0 },
};

static rgpu_status cell_mat(const rgpu_exec *e, const rgpu_view *v, int k, int64_t B, int64_t H, const char *what,
                            int slot, op_cell_mat *m, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    memset(m, 0, sizeof *m);
    if (v == NULL) return RGPU_OK;
    if (!op_dtype_is_float(v->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: %s[%d] must be floating, got %s", name, what, slot,
                rgpu_dtype_name(v->dtype));
    if (k > 0 ? (v->ndim != 2 || v->sizes[0] != B || v->sizes[1] != k * H) : (v->ndim != 1 || v->sizes[0] != -k * H))
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: %s[%d] must be %s%lld%s", name, what, slot, k > 0 ? "(B, " : "(",
                (long long)((k > 0 ? k : -k) * H), k > 0 ? ")" : ",)");
    m->p = (char *)v->data;
    m->dt = v->dtype;
    m->s0 = k > 0 ? v->strides[0] : 0;
    m->s1 = v->strides[v->ndim - 1];
    return RGPU_OK;
}

rgpu_status rgpu_op_cell_check(const rgpu_exec *e, op_cell *a, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    const cell_sig *sig = NULL;
    for (size_t i = 0; i < sizeof CELL_SIGS / sizeof CELL_SIGS[0]; i++)
        if (CELL_SIGS[i].op == e->op) sig = &CELL_SIGS[i];
    if (sig == NULL) RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not a recurrent cell", name);
    FORWARD_IF_ERROR(rgpu_op_dense_check_io(e, sig->opt_in, 0, err, errlen));
    memset(a, 0, sizeof *a);
    const rgpu_view *h = e->in[sig->hidden_in];
    if (h == NULL || h->ndim != 2)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: in[%d] must be (B, H)", name, sig->hidden_in);
    a->B = h->sizes[0];
    a->H = h->sizes[1];
    if ((sig->opt_in & 0x18u) == 0x18u && (e->in[3] == NULL) != (e->in[4] == NULL))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: give both biases or neither", name);
    for (int i = 0; i < 5; i++)
        if (sig->in[i]) FORWARD_IF_ERROR(cell_mat(e, e->in[i], sig->in[i], a->B, a->H, "in", i, &a->in[i], err, errlen));
    for (int i = 0; i < 3; i++)
        if (sig->out[i]) FORWARD_IF_ERROR(cell_mat(e, e->out[i], sig->out[i], a->B, a->H, "out", i, &a->out[i], err,
                                                   errlen));
    return RGPU_OK;
}
