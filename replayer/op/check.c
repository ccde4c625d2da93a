/* op/check.c — rgpu_op_errf and the checks of op/check.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype.h"

void rgpu_op_errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

rgpu_status rgpu_op_fail(char *err, size_t errlen, rgpu_status st, const char *fmt, ...)
{
    if (err == NULL || errlen == 0) return st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return st;
}

int64_t rgpu_op_numel(const rgpu_view *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++) n *= v->sizes[d];
    return n;
}

/* rgpu_op_check_view with the operand named what, or what[idx] when idx >= 0:
 * the name is formatted only on the way to an error (this runs per record). */
static rgpu_status check_view(const rgpu_view *v, const char *what, int idx, int op, char *err, size_t errlen)
{
    char nm[24];
#define WHAT (idx < 0 ? what : (snprintf(nm, sizeof nm, "%s[%d]", what, idx), nm))
    const char *name = rgpu_op_name(op);
    if (v == NULL) RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: %s is missing", name, WHAT);
    if (v->dtype < 0 || v->dtype >= RGPU_DTYPE_COUNT)
        RETURN_ERROR(RGPU_ERR_BAD_DTYPE, "%s: %s has dtype %d", name, WHAT, v->dtype);
    if (v->ndim < 0 || v->ndim > RGPU_MAX_DIMS)
        RETURN_ERROR(RGPU_ERR_TOO_MANY_DIMS, "%s: %s has ndim %d", name, WHAT, v->ndim);
    bool empty = false;
    for (int d = 0; d < v->ndim; d++) {
        if (v->sizes[d] < 0 || v->strides[d] < 0)
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: %s dim %d has size %lld stride %lld", name, WHAT, d,
                     (long long)v->sizes[d], (long long)v->strides[d]);
        if (v->sizes[d] == 0) empty = true;
    }
    if (!empty && v->data == NULL) RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: %s has no data", name, WHAT);
#undef WHAT
    return RGPU_OK;
}

rgpu_status rgpu_op_check_view(const rgpu_view *v, const char *what, int op, char *err, size_t errlen)
{
    return check_view(v, what, -1, op, err, errlen);
}

rgpu_status rgpu_op_check_exec(const rgpu_exec *e, uint64_t opt_in, uint32_t opt_out, bool check_args,
                           char *err, size_t errlen)
{
    const rgpu_op_info *info = &rgpu_op_table[e->op];
    if (e->n_in != info->n_in || e->n_out != info->n_out)
        RETURN_ERROR(RGPU_ERR_ARITY, "%s: got %d inputs / %d outputs, ops.def says %d / %d",
                 info->name, e->n_in, e->n_out, info->n_in, info->n_out);
    if (check_args && e->n_args > 0 && e->args == NULL)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: %d args but no arg array", info->name, e->n_args);
    for (int i = 0; i < e->n_in; i++) {
        if (e->in[i] == NULL && (opt_in >> i & 1)) continue;
        FORWARD_IF_ERROR(check_view(e->in[i], "in", i, e->op, err, errlen));
    }
    for (int i = 0; i < e->n_out; i++) {
        if (e->out[i] == NULL && (opt_out >> i & 1)) continue;
        FORWARD_IF_ERROR(check_view(e->out[i], "out", i, e->op, err, errlen));
    }
    return RGPU_OK;
}

rgpu_status rgpu_op_check_complex(const rgpu_exec *e, char *err, size_t errlen)
{
    if (rgpu_op_table[e->op].flags & RGPU_OPF_COMPLEX) return RGPU_OK;
    for (int i = 0; i < e->n_in + e->n_out; i++) {
        const rgpu_view *v = i < e->n_in ? e->in[i] : e->out[i - e->n_in];
        if (v != NULL && op_dtype_is_complex(v->dtype))
            RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: complex dtypes (%s) are not supported by this op",
                         rgpu_op_name(e->op), rgpu_dtype_name(v->dtype));
    }
    return RGPU_OK;
}

bool rgpu_op_is_scalar_kind(int kind)
{
    return kind == RGPU_ARG_INT || kind == RGPU_ARG_FLOAT || kind == RGPU_ARG_BOOL;
}

rgpu_status rgpu_op_check_scalar_arg(const rgpu_exec *e, int i, const char *what, char *err, size_t errlen)
{
    if (i >= e->n_args || e->args == NULL)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: missing scalar arg %d (%s)", rgpu_op_name(e->op), i, what);
    int k = e->args[i].kind;
    RETURN_ERROR_IF(!rgpu_op_is_scalar_kind(k), RGPU_ERR_BAD_ARG, "%s: arg %d (%s) has kind %d, want int/float/bool",
                    rgpu_op_name(e->op), i, what, k);
    return RGPU_OK;
}

void rgpu_op_scalar_to(const rgpu_arg *a, int dt, void *buf)
{
    memset(buf, 0, 8);
    if (dt == RGPU_C128) {      /* 16 bytes: the callers that take complex128 pass a 16-byte buffer */
        memset(buf, 0, 16);
        op_store_c128((char *)buf, dt, a->kind == RGPU_ARG_FLOAT ? a->v.f : (double)a->v.i, 0.0);
        return;
    }
    if (a->kind == RGPU_ARG_FLOAT) op_store_f64((char *)buf, dt, a->v.f);
    else if (a->kind == RGPU_ARG_BOOL) op_store_u64((char *)buf, dt, a->v.i != 0);
    else op_store_u64((char *)buf, dt, (uint64_t)a->v.i);
}

const char *rgpu_op_shape_str(char *buf, size_t n, const int64_t *sizes, int nd, const char *sep)
{
    size_t o = 0;
    buf[0] = '\0';
    o += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < nd && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? sep : "", (long long)sizes[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

void *rgpu_op_alloc(int64_t n, size_t sz)
{
    if (n < 0 || sz == 0 || (uint64_t)n > SIZE_MAX / sz) return NULL;
    return malloc(n > 0 ? (size_t)n * sz : sz);
}
