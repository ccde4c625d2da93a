/* op/index.c — the index family's checks and shape rules (op/index.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index.h"

/* ---------------------------------------------------------------------------
 * Checks shared by the family */

static rgpu_status arg_present(const rgpu_exec *e, int i, const char *what, char *err, size_t errlen)
{
    if (e->args == NULL || i >= e->n_args)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: missing arg %d (%s)", rgpu_op_name(e->op), i, what);
    return RGPU_OK;
}


static rgpu_status check_slot(const rgpu_view *v, char pat, const char *what, int op,
                              char *err, size_t errlen)
{
    if (v == NULL) {
        if (pat == '?') return RGPU_OK;
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: %s is missing", rgpu_op_name(op), what);
    }
    return rgpu_op_check_view(v, what, op, err, errlen);
}

rgpu_status rgpu_op_index_check_io(const rgpu_exec *e, const char *in_pat, const char *out_pat,
                               char *err, size_t errlen)
{
    int nin = (int)strlen(in_pat), nout = (int)strlen(out_pat);
    if (e->n_in != nin || e->n_out != nout)
        RETURN_ERROR(RGPU_ERR_ARITY, "%s: got %d inputs / %d outputs, want %d / %d",
                 rgpu_op_name(e->op), e->n_in, e->n_out, nin, nout);
    char what[24];
    for (int i = 0; i < nin; i++) {
        snprintf(what, sizeof what, "in[%d]", i);
        FORWARD_IF_ERROR(check_slot(e->in[i], in_pat[i], what, e->op, err, errlen));
    }
    for (int i = 0; i < nout; i++) {
        snprintf(what, sizeof what, "out[%d]", i);
        FORWARD_IF_ERROR(check_slot(e->out[i], out_pat[i], what, e->op, err, errlen));
    }
    return RGPU_OK;
}

rgpu_status rgpu_op_index_check_io_var(const rgpu_exec *e, int min_in, int n_req, bool opt_rest,
                                   const char *out_pat, char *err, size_t errlen)
{
    int nout = (int)strlen(out_pat);
    if (e->n_in < min_in || e->n_in > RGPU_MAX_IN || e->n_out != nout)
        RETURN_ERROR(RGPU_ERR_ARITY, "%s: got %d inputs / %d outputs, want %d..%d / %d",
                 rgpu_op_name(e->op), e->n_in, e->n_out, min_in, RGPU_MAX_IN, nout);
    char what[24];
    for (int i = 0; i < e->n_in; i++) {
        snprintf(what, sizeof what, "in[%d]", i);
        char pat = (i < n_req || !opt_rest) ? 'r' : '?';
        FORWARD_IF_ERROR(check_slot(e->in[i], pat, what, e->op, err, errlen));
    }
    for (int i = 0; i < nout; i++) {
        snprintf(what, sizeof what, "out[%d]", i);
        FORWARD_IF_ERROR(check_slot(e->out[i], out_pat[i], what, e->op, err, errlen));
    }
    return RGPU_OK;
}

rgpu_status rgpu_op_index_arg_int(const rgpu_exec *e, int i, const char *what, int64_t *v,
                              char *err, size_t errlen)
{
    FORWARD_IF_ERROR(arg_present(e, i, what, err, errlen));
    if (e->args[i].kind != RGPU_ARG_INT)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want int",
                 rgpu_op_name(e->op), i, what, e->args[i].kind);
    *v = e->args[i].v.i;
    return RGPU_OK;
}

rgpu_status rgpu_op_index_arg_bool(const rgpu_exec *e, int i, const char *what, bool *v,
                               char *err, size_t errlen)
{
    FORWARD_IF_ERROR(arg_present(e, i, what, err, errlen));
    if (e->args[i].kind != RGPU_ARG_BOOL && e->args[i].kind != RGPU_ARG_INT)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want bool",
                 rgpu_op_name(e->op), i, what, e->args[i].kind);
    *v = e->args[i].v.i != 0;
    return RGPU_OK;
}

rgpu_status rgpu_op_index_arg_f64(const rgpu_exec *e, int i, const char *what, double *v,
                              char *err, size_t errlen)
{
    FORWARD_IF_ERROR(arg_present(e, i, what, err, errlen));
    int k = e->args[i].kind;
    if (k != RGPU_ARG_INT && k != RGPU_ARG_FLOAT && k != RGPU_ARG_BOOL)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want a number",
                 rgpu_op_name(e->op), i, what, k);
    *v = rgpu_arg_as_f64(&e->args[i]);
    return RGPU_OK;
}

bool rgpu_op_index_arg_none(const rgpu_exec *e, int i)
{
    return e->args != NULL && i < e->n_args && e->args[i].kind == RGPU_ARG_NONE;
}

bool rgpu_op_index_same_shape(const rgpu_view *a, const rgpu_view *b)
{
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d]) return false;
    return true;
}

bool rgpu_op_index_same_view(const rgpu_view *a, const rgpu_view *b)
{
    if (a->data != b->data || a->dtype != b->dtype || !rgpu_op_index_same_shape(a, b)) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != 1 && a->strides[d] != b->strides[d]) return false;
    return true;
}

const char *rgpu_op_index_shape_str(const rgpu_view *v, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < v->ndim && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, d ? ", %lld" : "%lld", (long long)v->sizes[d]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

/* Out shape must be want (ndim, sizes). */
rgpu_status rgpu_op_index_check_out_shape(const rgpu_exec *e, const rgpu_view *out, int nd, const int64_t *sizes,
                                      char *err, size_t errlen)
{
    bool ok = out->ndim == nd;
    for (int d = 0; ok && d < nd; d++) ok = out->sizes[d] == sizes[d];
    if (!ok) {
        rgpu_view want;
        memset(&want, 0, sizeof want);
        want.ndim = nd;
        for (int d = 0; d < nd; d++) want.sizes[d] = sizes[d];
        char a[96], b[96];
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: out has shape %s, want %s", rgpu_op_name(e->op),
                 rgpu_op_index_shape_str(out, a, sizeof a), rgpu_op_index_shape_str(&want, b, sizeof b));
    }
    return RGPU_OK;
}

rgpu_status rgpu_op_index_check_same_dtype(const rgpu_exec *e, const rgpu_view *v, const char *what, int dt,
                                       char *err, size_t errlen)
{
    if (v->dtype != dt)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: %s has dtype %s, want %s", rgpu_op_name(e->op), what,
                 rgpu_dtype_name(v->dtype), rgpu_dtype_name(dt));
    return RGPU_OK;
}

rgpu_status rgpu_op_index_check_index_dtype(const rgpu_exec *e, const rgpu_view *v, bool allow_i32,
                                        char *err, size_t errlen)
{
    if (v->dtype == RGPU_I64 || (allow_i32 && v->dtype == RGPU_I32)) return RGPU_OK;
    RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: index has dtype %s, want int64%s", rgpu_op_name(e->op),
             rgpu_dtype_name(v->dtype), allow_i32 ? " or int32" : "");
}

/* dim in [-n, n) with n = max(ndim, 1) (a 0-d tensor takes dim 0 / -1). */
rgpu_status rgpu_op_index_wrap_dim(const rgpu_exec *e, int64_t dim, int ndim, int *out, char *err, size_t errlen)
{
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                 rgpu_op_name(e->op), -n, n - 1, (long long)dim);
    *out = (int)(dim < 0 ? dim + n : dim);
    return RGPU_OK;
}

/* Sizes/strides with a 0-d view read as 1-d of size 1 (ATen's
 * ensure_nonempty_size), into sz; returns the dim count (>= 1). */
int rgpu_op_index_nonempty_sizes(const rgpu_view *v, int64_t *sz)
{
    if (v->ndim == 0) { sz[0] = 1; return 1; }
    for (int d = 0; d < v->ndim; d++) sz[d] = v->sizes[d];
    return v->ndim;
}

/* Byte stride of dim d (0 for a 0-d view). */
int64_t rgpu_op_index_bstride(const rgpu_view *v, int d)
{
    return v->ndim == 0 ? 0 : v->strides[d] * (int64_t)rgpu_dtype_size(v->dtype);
}

/* ---------------------------------------------------------------------------
 * CAT, CONSTANT_PAD_ND, the WAIT ops */

bool rgpu_op_index_cat_skipped(const rgpu_view *t) { return t->ndim == 1 && t->sizes[0] == 0; }

rgpu_status rgpu_op_index_cat_check(const rgpu_exec *e, int *dim_out, char *err, size_t errlen)
{
    *dim_out = -1;
    FORWARD_IF_ERROR(rgpu_op_index_check_io_var(e, 1, e->n_in, false, "r", err, errlen));
    int64_t dim64;
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 0, "dim", &dim64, err, errlen));
    rgpu_view *out = e->out[0];
    const rgpu_view *ref = NULL;
    int iref = 0;
    for (int i = 0; i < e->n_in && ref == NULL; i++)
        if (!rgpu_op_index_cat_skipped(e->in[i])) { ref = e->in[i]; iref = i; }
    if (ref == NULL) {   /* every input is legacy-empty: the result is empty too */
        if (rgpu_op_numel(out) != 0) RETURN_ERROR(RGPU_ERR_SHAPE, "cat: all inputs are empty but out is not");
        return RGPU_OK;
    }
    int nd = ref->ndim;
    if (nd == 0) RETURN_ERROR(RGPU_ERR_SHAPE, "cat: zero-dimensional tensor (at position %d) cannot be concatenated", iref);
    if (dim64 < -nd || dim64 >= nd)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "cat: dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                 -nd, nd - 1, (long long)dim64);
    int dim = (int)(dim64 < 0 ? dim64 + nd : dim64);
    int64_t total = 0;
    for (int i = 0; i < e->n_in; i++) {
        const rgpu_view *t = e->in[i];
        if (rgpu_op_index_cat_skipped(t)) continue;
        if (t->ndim != nd)
            RETURN_ERROR(RGPU_ERR_SHAPE, "cat: tensors must have same number of dimensions: got %d and %d", nd, t->ndim);
        for (int d = 0; d < nd; d++)
            if (d != dim && t->sizes[d] != ref->sizes[d])
                RETURN_ERROR(RGPU_ERR_SHAPE, "cat: sizes of tensors must match except in dimension %d. Expected size %lld "
                         "but got size %lld for tensor number %d in the list", dim, (long long)ref->sizes[d],
                         (long long)t->sizes[d], i);
        total += t->sizes[dim];
    }
    bool ok = out->ndim == nd;
    for (int d = 0; ok && d < nd; d++) ok = out->sizes[d] == (d == dim ? total : ref->sizes[d]);
    if (!ok) {
        char a[96];
        RETURN_ERROR(RGPU_ERR_SHAPE, "cat: out has shape %s, inputs give %lld along dim %d",
                 rgpu_op_index_shape_str(out, a, sizeof a), (long long)total, dim);
    }
    *dim_out = dim;
    return RGPU_OK;
}

rgpu_status rgpu_op_index_pad_check(const rgpu_exec *e, uint64_t *value_out, int64_t *lo, int64_t *want,
                                char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "r", "r", err, errlen));
    if (e->args == NULL || e->n_args < 1 || e->args[0].kind != RGPU_ARG_INTS)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "constant_pad_nd: arg 0 (pad) must be ints");
    const rgpu_arg *pad = &e->args[0];
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    int dt = out->dtype;
    if (in->dtype != dt)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "constant_pad_nd: out dtype %s differs from input's %s",
                 rgpu_dtype_name(dt), rgpu_dtype_name(in->dtype));
    uint64_t value = 0;
    if (e->n_args >= 2 && e->args[1].kind != RGPU_ARG_NONE) {
        int k = e->args[1].kind;
        if (k != RGPU_ARG_INT && k != RGPU_ARG_FLOAT && k != RGPU_ARG_BOOL)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "constant_pad_nd: arg 1 (value) has kind %d, want a number", k);
        rgpu_op_scalar_to(&e->args[1], dt, &value);
    }
    uint32_t np = pad->v.ints.n;
    int nd = in->ndim;
    if (np % 2 != 0) RETURN_ERROR(RGPU_ERR_BAD_ARG, "constant_pad_nd: length of pad must be even but instead it equals %u", np);
    if (np / 2 > (uint32_t)nd)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "constant_pad_nd: length of pad should be no more than twice the number of "
                 "dimensions of the input (pad %u, %d dims)", np, nd);
    for (int d = 0; d < RGPU_MAX_DIMS; d++) lo[d] = 0;
    for (int d = 0; d < nd; d++) want[d] = in->sizes[d];
    for (uint32_t i = 0; i < np / 2; i++) {
        int d = nd - 1 - (int)i;
        int64_t a = rgpu_arg_int_at(pad, 2 * i), b = rgpu_arg_int_at(pad, 2 * i + 1);
        /* |pad| beyond 2^62 can't be a real size; it would only overflow below */
        if (a > (INT64_C(1) << 62) || a < -(INT64_C(1) << 62) || b > (INT64_C(1) << 62) || b < -(INT64_C(1) << 62))
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "constant_pad_nd: pad (%lld, %lld) is too large", (long long)a, (long long)b);
        lo[d] = a;
        if (__builtin_add_overflow(in->sizes[d], a + b, &want[d]))
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "constant_pad_nd: padded size of dim %d overflows", d);
        if (want[d] < 0)
            RETURN_ERROR(RGPU_ERR_SHAPE, "constant_pad_nd: the input size %lld, plus negative padding %lld and %lld "
                     "resulted in a negative output size, which is invalid. Check dimension %d of your input.",
                     (long long)in->sizes[d], (long long)a, (long long)b, d);
    }
    bool ok = out->ndim == nd;
    for (int d = 0; ok && d < nd; d++) ok = out->sizes[d] == want[d];
    if (!ok) {
        char a[96];
        RETURN_ERROR(RGPU_ERR_SHAPE, "constant_pad_nd: out has shape %s, padding gives another", rgpu_op_index_shape_str(out, a, sizeof a));
    }
    *value_out = value;
    return RGPU_OK;
}

/* out[0] of a WAIT op: a one-element i64 scratch. */
rgpu_status rgpu_op_index_check_count_out(const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *o = e->out[0];
    if (o->dtype != RGPU_I64 || rgpu_op_numel(o) != 1)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: out[0] must be one int64 element, got %s with %lld elements",
                 rgpu_op_name(e->op), rgpu_dtype_name(o->dtype), (long long)rgpu_op_numel(o));
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Random ops */

rgpu_status rgpu_op_index_seed_offset(const rgpu_exec *e, int i, uint64_t *seed, uint64_t *offset,
                                     char *err, size_t errlen)
{
    int64_t s, o;
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, i, "seed", &s, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, i + 1, "offset", &o, err, errlen));
    *seed = (uint64_t)s;
    *offset = (uint64_t)o;
    return RGPU_OK;
}

rgpu_status rgpu_op_index_need_float(const rgpu_exec *e, const rgpu_view *v, const char *what, char *err, size_t errlen)
{
    if (!op_dtype_is_float(v->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: %s dtype %s is not floating", rgpu_op_name(e->op), what,
                 rgpu_dtype_name(v->dtype));
    return RGPU_OK;
}

/* Largest finite value of a floating dtype. */
double rgpu_op_index_float_max(int dt)
{
    switch (dt) {
    case RGPU_F32: return 3.4028234663852886e38;
    case RGPU_F16: return 65504.0;
    case RGPU_BF16: return 3.3895313892515355e38;
    default: return 1.7976931348623157e308;
    }
}

/* 2^digits of a floating dtype (the exact-integer limit). */
int64_t rgpu_op_index_float_digits_pow(int dt)
{
    switch (dt) {
    case RGPU_F32: return INT64_C(1) << 24;
    case RGPU_F16: return INT64_C(1) << 11;
    case RGPU_BF16: return INT64_C(1) << 8;
    default: return INT64_C(1) << 53;
    }
}

/* Range of an integer dtype (bool: [0, 1]). */
void rgpu_op_index_int_range(int dt, int64_t *lo, int64_t *hi)
{
    switch (dt) {
    case RGPU_I64: *lo = INT64_MIN; *hi = INT64_MAX; break;
    case RGPU_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case RGPU_I16: *lo = INT16_MIN; *hi = INT16_MAX; break;
    case RGPU_I8:  *lo = INT8_MIN;  *hi = INT8_MAX; break;
    case RGPU_U8:  *lo = 0; *hi = UINT8_MAX; break;
    default:       *lo = 0; *hi = 1; break;
    }
}

/* ---------------------------------------------------------------------------
 * Advanced indexing geometry (index.Tensor, index_put) */

rgpu_status rgpu_op_index_geom_shape(const rgpu_exec *e, op_index_geom *g, const rgpu_view *self, const rgpu_view *const *idx,
                                int nidx, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    memset(g, 0, sizeof *g);
    if (nidx > self->ndim)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: too many indices for tensor of dimension %d (got %d)", name, self->ndim, nidx);
    int first = -1, last = -1, count = 0;
    for (int k = 0; k < nidx; k++) {
        const rgpu_view *v = idx[k];
        if (v == NULL) continue;
        FORWARD_IF_ERROR(rgpu_op_index_check_index_dtype(e, v, true, err, errlen));
        if (first < 0) first = k;
        last = k;
        count++;
        if (v->ndim > g->nb) {   /* widen B on the left */
            int add = v->ndim - g->nb;
            for (int d = g->nb - 1; d >= 0; d--) g->bsz[d + add] = g->bsz[d];
            for (int d = 0; d < add; d++) g->bsz[d] = 1;
            g->nb = v->ndim;
        }
        int lead = g->nb - v->ndim;
        for (int d = 0; d < v->ndim; d++) {
            int64_t s = v->sizes[d], *b = &g->bsz[lead + d];
            if (*b == 1) *b = s;
            else if (s != 1 && s != *b)
                RETURN_ERROR(RGPU_ERR_SHAPE, "%s: shape mismatch: indexing tensors could not be broadcast together "
                         "(size %lld vs %lld)", name, (long long)s, (long long)*b);
        }
    }
    bool adjacent = count == 0 || last - first + 1 == count;
    if (g->nb + self->ndim - count > RGPU_MAX_DIMS)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: result would have %d dims, more than %d", name,
                 g->nb + self->ndim - count, RGPU_MAX_DIMS);
    int R = 0;
    if (adjacent) {
        int lo = count ? first : 0, hi = count ? last : -1;
        for (int d = 0; d < lo; d++) g->rdim[R++] = d;
        for (int j = 0; j < g->nb; j++) g->rdim[R++] = -1 - j;
        for (int d = hi + 1; d < self->ndim; d++) g->rdim[R++] = d;
    } else {
        for (int j = 0; j < g->nb; j++) g->rdim[R++] = -1 - j;
        for (int d = 0; d < self->ndim; d++)
            if (d >= nidx || idx[d] == NULL) g->rdim[R++] = d;
    }
    g->R = R;
    for (int r = 0; r < R; r++)
        g->rsz[r] = g->rdim[r] >= 0 ? self->sizes[g->rdim[r]] : g->bsz[-1 - g->rdim[r]];
    g->nbel = 1;
    for (int j = 0; j < g->nb; j++) g->nbel *= g->bsz[j];
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * The dim-indexed ops' and embedding's host-side checks (op/index.h). */

rgpu_status rgpu_op_index_embedding_check(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "rr", "r", err, errlen));
    if (e->args != NULL && e->n_args > 0 && e->args[0].kind != RGPU_ARG_INT && e->args[0].kind != RGPU_ARG_NONE)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "embedding: arg 0 (padding_idx) has kind %d, want int", e->args[0].kind);
    const rgpu_view *wt = e->in[0], *ix = e->in[1];
    rgpu_view *out = e->out[0];
    if (wt->ndim != 2) RETURN_ERROR(RGPU_ERR_SHAPE, "embedding: 'weight' must be 2-D, got %d dims", wt->ndim);
    FORWARD_IF_ERROR(rgpu_op_index_check_index_dtype(e, ix, true, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, out, "out", wt->dtype, err, errlen));
    if (ix->ndim + 1 > RGPU_MAX_DIMS) RETURN_ERROR(RGPU_ERR_SHAPE, "embedding: indices have too many dims");
    int64_t want[RGPU_MAX_DIMS];
    for (int d = 0; d < ix->ndim; d++) want[d] = ix->sizes[d];
    want[ix->ndim] = wt->sizes[1];
    return rgpu_op_index_check_out_shape(e, out, ix->ndim + 1, want, err, errlen);
}

rgpu_status rgpu_op_index_embedding_backward_check(const rgpu_exec *e, op_index_embbw *p, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "rr", "r", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 0, "num_weights", &p->nw, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 1, "padding_idx", &p->pad, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_bool(e, 2, "scale_grad_by_freq", &p->by_freq, err, errlen));
    const rgpu_view *g = e->in[0], *ix = e->in[1];
    rgpu_view *out = e->out[0];
    const char *name = "embedding_dense_backward";
    if (!op_dtype_is_float(g->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: grad dtype %s is not floating", name, rgpu_dtype_name(g->dtype));
    FORWARD_IF_ERROR(rgpu_op_index_check_index_dtype(e, ix, true, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, out, "out", g->dtype, err, errlen));
    if (g->ndim < 1) RETURN_ERROR(RGPU_ERR_SHAPE, "%s: grad must have at least 1 dim", name);
    if (p->nw < 0) RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: num_weights %lld is negative", name, (long long)p->nw);
    int64_t rows = 1;
    p->D = g->sizes[g->ndim - 1];
    p->n = rgpu_op_numel(ix);
    for (int d = 0; d < g->ndim - 1; d++) rows *= g->sizes[d];
    if (rows != p->n)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: grad has %lld rows of %lld, indices have %lld elements", name,
                 (long long)rows, (long long)p->D, (long long)p->n);
    int64_t want[2] = { p->nw, p->D };
    return rgpu_op_index_check_out_shape(e, out, 2, want, err, errlen);
}

rgpu_status rgpu_op_index_gather_check(const rgpu_exec *e, op_index_dimop *p, char *err, size_t errlen)
{
    p->self = e->in[0]; p->ix = e->in[1]; p->src = e->n_in > 2 ? e->in[2] : NULL; p->out = e->out[0];
    p->name = "gather";
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "rr", "r", err, errlen));
    int64_t dim64;
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 0, "dim", &dim64, err, errlen));
    const rgpu_view *self = e->in[0], *ix = e->in[1];
    rgpu_view *out = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, out, "out", self->dtype, err, errlen));
    p->nd = rgpu_op_index_nonempty_sizes(self, p->ssz);
    if (rgpu_op_numel(ix) == 0) {   /* ATen checks neither dtype nor dims of an empty index */
        p->dim = 0;
        rgpu_op_index_nonempty_sizes(ix, p->isz);
        return rgpu_op_index_check_out_shape(e, out, ix->ndim, ix->sizes, err, errlen);
    }
    FORWARD_IF_ERROR(rgpu_op_index_check_index_dtype(e, ix, true, err, errlen));
    if (rgpu_op_index_nonempty_sizes(ix, p->isz) != p->nd)
        RETURN_ERROR(RGPU_ERR_SHAPE, "gather: index tensor must have the same number of dimensions as input tensor");
    FORWARD_IF_ERROR(rgpu_op_index_wrap_dim(e, dim64, self->ndim, &p->dim, err, errlen));
    for (int d = 0; d < p->nd; d++)
        if (d != p->dim && p->isz[d] > p->ssz[d])
            RETURN_ERROR(RGPU_ERR_SHAPE, "gather: size does not match at dimension %d: index %lld is larger than self %lld",
                     d, (long long)p->isz[d], (long long)p->ssz[d]);
    return rgpu_op_index_check_out_shape(e, out, ix->ndim, ix->sizes, err, errlen);
}

/* The size rules of scatter (with src when src is given), on p's views. */
static rgpu_status scatter_shapes(const rgpu_exec *e, op_index_dimop *p, int64_t dim64, char *err, size_t errlen)
{
    const char *name = p->name;
    const rgpu_view *self = p->self, *ix = p->ix, *src = p->src;
    int nd = p->nd = rgpu_op_index_nonempty_sizes(self, p->ssz);
    if (rgpu_op_index_nonempty_sizes(ix, p->isz) != nd || (src && rgpu_op_index_nonempty_sizes(src, p->rsz) != nd))
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: index tensor must have the same number of dimensions as self and src", name);
    FORWARD_IF_ERROR(rgpu_op_index_wrap_dim(e, dim64, self->ndim, &p->dim, err, errlen));
    for (int d = 0; d < nd; d++) {
        if (src && p->isz[d] > p->rsz[d])
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: expected index %lld to be no larger than src %lld at dimension %d",
                     name, (long long)p->isz[d], (long long)p->rsz[d], d);
        if (d != p->dim && p->isz[d] > p->ssz[d])
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: expected index %lld to be no larger than self %lld at dimension %d",
                     name, (long long)p->isz[d], (long long)p->ssz[d], d);
    }
    return RGPU_OK;
}

rgpu_status rgpu_op_index_scatter_check(const rgpu_exec *e, bool add_only, op_index_dimop *p, char *err, size_t errlen)
{
    p->self = e->in[0]; p->ix = e->in[1]; p->src = e->n_in > 2 ? e->in[2] : NULL; p->out = e->out[0];
    const char *name = p->name = add_only ? "scatter_add" : "scatter";
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, add_only ? "rrr" : "rr?", "r", err, errlen));
    int64_t dim64;
    p->reduce = OP_IDX_ADD;
    p->value = 0;
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 0, "dim", &dim64, err, errlen));
    const rgpu_view *self = e->in[0], *ix = e->in[1], *src = e->in[2];
    rgpu_view *out = e->out[0];
    if (!add_only) {
        FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 2, "reduce", &p->reduce, err, errlen));
        if (p->reduce < 0 || p->reduce > 2)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "scatter: reduce %lld is not 0 (none), 1 (add) or 2 (multiply)",
                     (long long)p->reduce);
        if (op_dtype_is_complex(self->dtype) && (p->reduce != 0 || (src == NULL && self->dtype == RGPU_C128)))
            RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "scatter: %s of a %s tensor is not supported (rgpu)",
                         p->reduce ? "reduce" : "a scalar value", rgpu_dtype_name(self->dtype));
        if (src == NULL) {   /* with a src tensor, arg 1 is NONE and ignored */
            double ignored;
            FORWARD_IF_ERROR(rgpu_op_index_arg_f64(e, 1, "value", &ignored, err, errlen));
            rgpu_op_scalar_to(&e->args[1], self->dtype, &p->value);
        }
    }
    FORWARD_IF_ERROR(rgpu_op_index_check_index_dtype(e, ix, true, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, out, "out", self->dtype, err, errlen));
    if (src) FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, src, "src", self->dtype, err, errlen));
    if (!rgpu_op_index_same_shape(out, self)) RETURN_ERROR(RGPU_ERR_SHAPE, "%s: out and self differ in shape", name);
    return scatter_shapes(e, p, dim64, err, errlen);
}

rgpu_status rgpu_op_index_scatter_reduce_check(const rgpu_exec *e, op_index_dimop *p, bool *include_self,
                                          char *err, size_t errlen)
{
    p->self = e->in[0]; p->ix = e->in[1]; p->src = e->in[2]; p->out = e->out[0];
    p->name = "scatter_reduce";
    p->value = 0;
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "rrr", "r", err, errlen));
    int64_t dim64;
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 0, "dim", &dim64, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 1, "reduce", &p->reduce, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_bool(e, 2, "include_self", include_self, err, errlen));
    if (p->reduce < OP_SR_SUM || p->reduce > OP_SR_AMIN)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "scatter_reduce: reduce %lld is not 0 (sum), 1 (prod), 2 (mean), 3 (amax) or 4 (amin)",
                 (long long)p->reduce);
    FORWARD_IF_ERROR(rgpu_op_index_check_index_dtype(e, p->ix, true, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, p->out, "out", p->self->dtype, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, p->src, "src", p->self->dtype, err, errlen));
    if (p->self->dtype == RGPU_BOOL && p->reduce == OP_SR_MEAN)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "scatter_reduce: mean is not supported for bool");
    if (!rgpu_op_index_same_shape(p->out, p->self)) RETURN_ERROR(RGPU_ERR_SHAPE, "scatter_reduce: out and self differ in shape");
    return scatter_shapes(e, p, dim64, err, errlen);
}

rgpu_status rgpu_op_index_select_check(const rgpu_exec *e, op_index_dimop *p, char *err, size_t errlen)
{
    p->self = e->in[0]; p->ix = e->in[1]; p->src = e->n_in > 2 ? e->in[2] : NULL; p->out = e->out[0];
    p->name = "index_select";
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "rr", "r", err, errlen));
    int64_t dim64;
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 0, "dim", &dim64, err, errlen));
    const rgpu_view *self = e->in[0], *ix = e->in[1];
    rgpu_view *out = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_index_check_index_dtype(e, ix, true, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, out, "out", self->dtype, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_wrap_dim(e, dim64, self->ndim, &p->dim, err, errlen));
    p->nd = rgpu_op_index_nonempty_sizes(self, p->ssz);
    if (self->ndim == 0 && rgpu_op_numel(ix) != 1)
        RETURN_ERROR(RGPU_ERR_SHAPE, "index_select: index to scalar can have only 1 value, got %lld value(s)",
                 (long long)rgpu_op_numel(ix));
    int64_t want[RGPU_MAX_DIMS];
    for (int d = 0; d < self->ndim; d++) want[d] = self->sizes[d];
    if (self->ndim > 0) want[p->dim] = rgpu_op_numel(ix);
    return rgpu_op_index_check_out_shape(e, out, self->ndim, want, err, errlen);
}

rgpu_status rgpu_op_index_add_check(const rgpu_exec *e, op_index_dimop *p, char *err, size_t errlen)
{
    p->self = e->in[0]; p->ix = e->in[1]; p->src = e->n_in > 2 ? e->in[2] : NULL; p->out = e->out[0];
    p->name = "index_add";
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "rrr", "r", err, errlen));
    int64_t dim64;
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 0, "dim", &dim64, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_f64(e, 1, "alpha", &p->alpha_v, err, errlen));
    const rgpu_view *self = e->in[0], *ix = e->in[1], *src = e->in[2];
    rgpu_view *out = e->out[0];
    int dt = self->dtype;
    FORWARD_IF_ERROR(rgpu_op_index_check_index_dtype(e, ix, true, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, out, "out", dt, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, src, "source", dt, err, errlen));
    if (!rgpu_op_index_same_shape(out, self)) RETURN_ERROR(RGPU_ERR_SHAPE, "index_add: out and self differ in shape");
    const rgpu_arg *al = &e->args[1];
    if (al->kind == RGPU_ARG_FLOAT && !op_dtype_is_float(dt))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "index_add: for integral input tensors, alpha must not be a floating point number");
    if (al->kind == RGPU_ARG_BOOL && dt != RGPU_BOOL)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "index_add: bool alpha only supported for bool tensors");
    op_idx_alpha *a = &p->alpha;
    double alpha_v = p->alpha_v;
    a->d = alpha_v;
    a->f = (float)alpha_v;
    a->i = al->kind == RGPU_ARG_FLOAT ? (uint64_t)op_f64_to_i64_sat(al->v.f) : (uint64_t)al->v.i;
    a->b = alpha_v != 0.0;
    a->one = alpha_v == 1.0 && (al->kind != RGPU_ARG_INT || al->v.i == 1);
    /* ATen: f32/f64 slice-wise add_(source, alpha) is fma(alpha, s, d); the
     * 1-d loop is *self += src * alpha (two roundings). f16/bf16 round alpha
     * to the dtype and compute d + round(s * alpha) in c10 Half ops (ATen's
     * vectorised add_ fuses instead inside full 32-element blocks of a
     * contiguous slice, a 1-ulp difference we do not mimic). */
    a->fused = self->ndim > 1;
    a->round_prod = dt == RGPU_F16 || dt == RGPU_BF16;
    a->f = op_round_to(dt, a->f);

    FORWARD_IF_ERROR(rgpu_op_index_wrap_dim(e, dim64, self->ndim, &p->dim, err, errlen));
    int dim = p->dim, nd = p->nd = rgpu_op_index_nonempty_sizes(self, p->ssz);
    if (rgpu_op_index_nonempty_sizes(src, p->rsz) != nd)
        RETURN_ERROR(RGPU_ERR_SHAPE, "index_add: self and source should have the same number of dimensions");
    if (ix->ndim > 1) RETURN_ERROR(RGPU_ERR_SHAPE, "index_add: index is supposed to be a vector");
    if (p->rsz[dim] != rgpu_op_numel(ix))
        RETURN_ERROR(RGPU_ERR_SHAPE, "index_add: number of indices (%lld) should be equal to source.size(dim) (%lld)",
                 (long long)rgpu_op_numel(ix), (long long)p->rsz[dim]);
    for (int d = 0; d < nd; d++)
        if (d != dim && p->rsz[d] != p->ssz[d])
            RETURN_ERROR(RGPU_ERR_SHAPE, "index_add: source size %lld at dimension %d differs from self's %lld",
                     (long long)p->rsz[d], d, (long long)p->ssz[d]);
    return RGPU_OK;
}

rgpu_status rgpu_op_index_put_check(const rgpu_exec *e, op_index_put_args *p, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io_var(e, 2, 2, true, "r", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_bool(e, 0, "accumulate", &p->acc, err, errlen));
    p->self = e->in[0], p->vals = e->in[1], p->out = e->out[0];
    p->idx = &e->in[2], p->nidx = e->n_in - 2, p->dt = p->self->dtype;
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, p->out, "out", p->dt, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, p->vals, "values", p->dt, err, errlen));
    if (p->acc && op_dtype_is_complex(p->dt))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "index_put: accumulate into a %s tensor is not supported (rgpu)",
                     rgpu_dtype_name(p->dt));
    if (!rgpu_op_index_same_shape(p->out, p->self)) RETURN_ERROR(RGPU_ERR_SHAPE, "index_put: out and self differ in shape");
    return RGPU_OK;
}

rgpu_status rgpu_op_index_self_into_out(const rgpu_exec *e, const rgpu_view *out, const rgpu_view *self, bool *copy,
                                   char *err, size_t errlen)
{
    *copy = false;
    if (rgpu_op_index_same_view(out, self)) return RGPU_OK;
    if (out->data == self->data && rgpu_op_numel(out) > 0)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: out shares memory with self but is a different view",
                 rgpu_op_name(e->op));
    *copy = true;
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * NONZERO, MASKED_SELECT, UNIQUE: the checks both backends make (op/index.h). */

rgpu_status rgpu_op_index_nonzero_check(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "r", "r", err, errlen));
    const rgpu_view *out = e->out[0];
    if (out->dtype != RGPU_I64 && out->dtype != RGPU_I32)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "nonzero: out dtype %s, want int64", rgpu_dtype_name(out->dtype));
    return RGPU_OK;
}

rgpu_status rgpu_op_index_nonzero_check_out(const rgpu_exec *e, int64_t n, char *err, size_t errlen)
{
    const rgpu_view *x = e->in[0], *out = e->out[0];
    if (out->ndim != 2 || out->sizes[0] != n || out->sizes[1] != x->ndim)
        RETURN_ERROR(RGPU_ERR_SHAPE, "nonzero: out must be (%lld, %d) for an input with %lld nonzeros",
                 (long long)n, x->ndim, (long long)n);
    return RGPU_OK;
}

rgpu_status rgpu_op_index_masked_select_check(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "rr", "r", err, errlen));
    const rgpu_view *self = e->in[0], *mask = e->in[1], *out = e->out[0];
    if (mask->dtype != RGPU_BOOL && mask->dtype != RGPU_U8)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "masked_select: expected a bool mask, got %s", rgpu_dtype_name(mask->dtype));
    if (out->dtype != self->dtype)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "masked_select: out dtype %s differs from self's %s",
                 rgpu_dtype_name(out->dtype), rgpu_dtype_name(self->dtype));
    if (!rgpu_op_index_same_shape(self, mask)) {
        char a[96], b[96];
        RETURN_ERROR(RGPU_ERR_SHAPE, "masked_select: self %s and mask %s must already be broadcast to one shape",
                 rgpu_op_index_shape_str(self, a, sizeof a), rgpu_op_index_shape_str(mask, b, sizeof b));
    }
    return RGPU_OK;
}

rgpu_status rgpu_op_index_masked_select_check_out(const rgpu_exec *e, int64_t n, char *err, size_t errlen)
{
    const rgpu_view *out = e->out[0];
    if (out->ndim != 1 || out->sizes[0] != n)
        RETURN_ERROR(RGPU_ERR_SHAPE, "masked_select: out must be (%lld,) for a mask with %lld true elements",
                 (long long)n, (long long)n);
    return RGPU_OK;
}

rgpu_status rgpu_op_index_unique_check(const rgpu_exec *e, bool count_only, op_index_unique_args *u,
                                  char *err, size_t errlen)
{
    const char *name = u->name = rgpu_op_name(e->op);
    bool sorted, *want_inv = &u->want_inv, *want_cnt = &u->want_cnt;
    *want_inv = *want_cnt = false;
    u->fl = false;
    u->N = 0;
    if (count_only) {
        FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "r", "r", err, errlen));
        u->fl = op_dtype_is_float(e->in[0]->dtype);
        u->N = rgpu_op_numel(e->in[0]);
        return rgpu_op_index_check_count_out(e, err, errlen);
    }
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "r", "r??", err, errlen));
    u->fl = op_dtype_is_float(e->in[0]->dtype);
    u->N = rgpu_op_numel(e->in[0]);
    FORWARD_IF_ERROR(rgpu_op_index_arg_bool(e, 0, "sorted", &sorted, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_bool(e, 1, "return_inverse", want_inv, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_arg_bool(e, 2, "return_counts", want_cnt, err, errlen));
    (void)sorted;   /* CPU ATen sorts either way, and so do we */
    *want_inv = *want_inv && e->out[1] != NULL;   /* ATen's placeholder outputs are left alone */
    *want_cnt = *want_cnt && e->out[2] != NULL;
    if (e->out[0]->dtype != e->in[0]->dtype)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: values dtype %s differs from the input's %s", name,
                 rgpu_dtype_name(e->out[0]->dtype), rgpu_dtype_name(e->in[0]->dtype));
    if (*want_inv && e->out[1]->dtype != RGPU_I64)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: inverse must be int64", name);
    if (*want_cnt && e->out[2]->dtype != RGPU_I64)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: counts must be int64", name);
    if (*want_inv && !rgpu_op_index_same_shape(e->out[1], e->in[0]))
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: inverse must have the input's shape", name);
    return RGPU_OK;
}

rgpu_status rgpu_op_index_unique_check_out(const rgpu_exec *e, bool want_cnt, int64_t n, char *err, size_t errlen)
{
    const rgpu_view *vo = e->out[0], *co = want_cnt ? e->out[2] : NULL;
    if (vo->ndim != 1 || vo->sizes[0] != n || (co && (co->ndim != 1 || co->sizes[0] != n)))
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: values/counts must be (%lld,) for an input with %lld distinct values",
                 rgpu_op_name(e->op), (long long)n, (long long)n);
    return RGPU_OK;
}

int rgpu_op_index_uq_cmp_f(const void *pa, const void *pb)
{
    const op_index_uq_item *a = (const op_index_uq_item *)pa, *b = (const op_index_uq_item *)pb;
    double x = a->k.f, y = b->k.f;
    bool xn = x != x, yn = y != y;
    if (xn != yn) return xn ? 1 : -1;
    if (!xn) {
        if (x < y) return -1;
        if (x > y) return 1;
    }
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

int rgpu_op_index_uq_cmp_i(const void *pa, const void *pb)
{
    const op_index_uq_item *a = (const op_index_uq_item *)pa, *b = (const op_index_uq_item *)pb;
    if (a->k.i != b->k.i) return a->k.i < b->k.i ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

int64_t rgpu_op_index_uq_sort(op_index_uq_item *it, int64_t N, bool fl)
{
    if (N > 0) qsort(it, (size_t)N, sizeof *it, fl ? rgpu_op_index_uq_cmp_f : rgpu_op_index_uq_cmp_i);
    int64_t n = 0;
    for (int64_t i = 0; i < N; i++) n += rgpu_op_index_uq_new_group(it, i, fl);
    return n;
}

bool rgpu_op_index_uq_new_group(const op_index_uq_item *it, int64_t i, bool fl)
{
    return i == 0 || (fl ? it[i].k.f != it[i - 1].k.f : it[i].k.i != it[i - 1].k.i);
}

bool rgpu_op_index_cat_slice(const rgpu_exec *e, int dim, int i, rgpu_view *slice)
{
    const rgpu_view *t = e->in[i], *out = e->out[0];
    if (rgpu_op_index_cat_skipped(t) || rgpu_op_numel(t) == 0) return false;
    int64_t pos = 0;
    for (int j = 0; j < i; j++)
        if (!rgpu_op_index_cat_skipped(e->in[j])) pos += e->in[j]->sizes[dim];
    *slice = *out;
    slice->data = (char *)out->data + pos * out->strides[dim] * (int64_t)rgpu_dtype_size(out->dtype);
    for (int d = 0; d < out->ndim; d++) slice->sizes[d] = t->sizes[d];
    return true;
}

rgpu_status rgpu_op_index_pad_prepare(const rgpu_exec *e, op_index_pad_args *pa, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_pad_check(e, &pa->value, pa->lo, pa->sz, err, errlen));
    const rgpu_view *in = e->in[0];
    for (int d = 0; d < in->ndim; d++) {   /* out [max(0, lo), min(out, lo + in)) */
        pa->a[d] = pa->lo[d] > 0 ? pa->lo[d] : 0;
        pa->b[d] = pa->lo[d] + in->sizes[d] < pa->sz[d] ? pa->lo[d] + in->sizes[d] : pa->sz[d];
    }
    return RGPU_OK;
}

void rgpu_op_index_select_walk(const op_index_dimop *p, op_walk *w)
{
    int64_t osz[RGPU_MAX_DIMS];
    rgpu_op_index_nonempty_sizes(p->out, osz);
    op_walk_init(w, p->nd, osz);
    op_walk_strides(w, 0, p->out);
    op_walk_strides(w, 1, p->self);
    w->st[1][p->dim] = 0;
}
