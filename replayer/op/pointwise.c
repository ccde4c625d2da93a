/* op/pointwise.c — pointwise op layouts, compute classes, ATen's per-op
 * dtype support and the host-side checks (op/pointwise.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "pointwise.h"
#include "special_math.h"

/* ---------------------------------------------------------------------------
 * Op layouts (generated from ops.def: tools/gen_ops.py pw_layout) */

#include "op_gen_pointwise.inc"

bool rgpu_op_pointwise_layout_of(int op, pw_layout *L)
{
    if (op < 0 || op >= RGPU_OP_COUNT || !op_gen_pw[op].is) {
        memset(L, 0, sizeof *L);
        L->own = -1;
        return false;
    }
    *L = op_gen_pw[op].L;
    return true;
}

/* Compute classes (CT_*: cpu_pointwise.h): the opmath type the loops run in. */
int rgpu_op_pointwise_compute_class(int dt)
{
    switch (dt) {
    case RGPU_F32: case RGPU_F16: case RGPU_BF16: return OP_CT_F32;
    case RGPU_F64: return OP_CT_F64;
    case RGPU_BOOL: return OP_CT_BOOL;
    default: return OP_CT_I64;
    }
}

/* Which compute classes ATen's CPU kernel of each op accepts (its
 * AT_DISPATCH list, said by ops.def's FLOATY / NO_BOOL / INTEGRAL flags); the
 * rest fail as "not implemented for 'Bool'" does. */
bool rgpu_op_pointwise_supports(int op, int ct)
{
    bool fl = ct == OP_CT_F32 || ct == OP_CT_F64;
    uint32_t f = op >= 0 && op < RGPU_OP_COUNT ? rgpu_op_table[op].flags : 0;
    if (f & RGPU_OPF_FLOATY) return fl;
    if (f & RGPU_OPF_NO_BOOL) return ct != OP_CT_BOOL;
    if (f & RGPU_OPF_INTEGRAL) return !fl;
    return true;
}

/* out's shape must be the broadcast of the tensor inputs' shapes. */
static rgpu_status check_broadcast(const rgpu_exec *e, const rgpu_view *out, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    int nd = 0;
    for (int i = 0; i < e->n_in; i++)
        if (e->in[i] && e->in[i]->ndim > nd) nd = e->in[i]->ndim;
    int64_t shape[RGPU_MAX_DIMS];
    for (int d = 0; d < nd; d++) shape[d] = 1;
    for (int i = 0; i < e->n_in; i++) {
        const rgpu_view *v = e->in[i];
        if (v == NULL) continue;
        int lead = nd - v->ndim;
        for (int d = 0; d < v->ndim; d++) {
            int64_t s = v->sizes[d];
            if (shape[lead + d] == 1) shape[lead + d] = s;
            else if (s != 1 && s != shape[lead + d])
                RETURN_ERROR(RGPU_ERR_SHAPE, "%s: in[%d] size %lld at dim %d does not broadcast with %lld",
                         name, i, (long long)s, d, (long long)shape[lead + d]);
        }
    }
    bool same = out->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = out->sizes[d] == shape[d];
    if (!same) {
        char want[160], got[160];
        rgpu_op_shape_str(want, sizeof want, shape, nd, ",");
        rgpu_op_shape_str(got, sizeof got, out->sizes, out->ndim, ",");
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: out has shape %s, the op produces %s", name, got, want);
    }
    return RGPU_OK;
}

rgpu_status rgpu_op_pointwise_check(const rgpu_exec *e, const pw_layout *L, bool present[PW_MAX_IN],
                                char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    const rgpu_op_info *info = &rgpu_op_table[e->op];
    if (e->n_in != info->n_in || e->n_out != info->n_out)
        RETURN_ERROR(RGPU_ERR_ARITY, "%s: got %d inputs / %d outputs, ops.def says %d / %d",
                 name, e->n_in, e->n_out, info->n_in, info->n_out);
    FORWARD_IF_ERROR(rgpu_op_check_view(e->out[0], "out[0]", e->op, err, errlen));
    if (e->n_args != L->nargs || e->args == NULL)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: got %d args, want %d", name, e->n_args, L->nargs);
    const rgpu_arg *dta = &e->args[L->nargs - 1];
    if (dta->kind != RGPU_ARG_DTYPE)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: last arg (compute dtype) has kind %d, want dtype", name, dta->kind);
    if (dta->v.i < 0 || dta->v.i >= RGPU_DTYPE_COUNT)
        RETURN_ERROR(RGPU_ERR_BAD_DTYPE, "%s: compute dtype %lld", name, (long long)dta->v.i);

    /* inputs: a tensor, or (slots) a scalar arg, or (optional slots) nothing */
    int ntensor = 0;
    for (int i = 0; i < e->n_in; i++) {
        present[i] = true;
        if (e->in[i] != NULL) {
            char what[16];
            snprintf(what, sizeof what, "in[%d]", i);
            FORWARD_IF_ERROR(rgpu_op_check_view(e->in[i], what, e->op, err, errlen));
            ntensor++;
            continue;
        }
        if (!(L->slots & (1u << i))) RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: in[%d] is missing", name, i);
        int k = e->args[i].kind;
        if (k == RGPU_ARG_NONE && (L->optional & (1u << i))) { present[i] = false; continue; }
        if (!rgpu_op_is_scalar_kind(k))
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: in[%d] is absent and arg %d has kind %d, want int/float/bool",
                     name, i, i, k);
    }
    if (ntensor == 0) RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: no tensor input", name);
    return check_broadcast(e, e->out[0], err, errlen);
}

rgpu_status rgpu_op_pointwise_check_tri(const rgpu_exec *e, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    if (e->n_in != 1 || e->n_out != 1)
        RETURN_ERROR(RGPU_ERR_ARITY, "%s: got %d inputs / %d outputs, ops.def says 1 / 1", name, e->n_in, e->n_out);
    FORWARD_IF_ERROR(rgpu_op_check_view(e->in[0], "in[0]", e->op, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_check_view(e->out[0], "out[0]", e->op, err, errlen));
    if (e->n_args != 1 || e->args == NULL || e->args[0].kind != RGPU_ARG_INT)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: want one int arg (diagonal)", name);
    const rgpu_view *x = e->in[0];
    rgpu_view *out = e->out[0];
    int nd = x->ndim;
    if (nd < 2) RETURN_ERROR(RGPU_ERR_SHAPE, "%s: input tensor must have at least 2 dimensions", name);
    bool same = out->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = out->sizes[d] == x->sizes[d];
    if (!same) {
        char want[160], got[160];
        rgpu_op_shape_str(want, sizeof want, x->sizes, nd, ",");
        rgpu_op_shape_str(got, sizeof got, out->sizes, out->ndim, ",");
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: out has shape %s, the op produces %s", name, got, want);
    }
    if (out->dtype != x->dtype)
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: out dtype %s differs from input dtype %s", name,
                 rgpu_dtype_name(out->dtype), rgpu_dtype_name(x->dtype));
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * add/sub/rsub/mul/div, Tensor and Scalar overloads */

rgpu_status rgpu_op_binary_check(const rgpu_exec *e, op_binary_args *b, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    int kind, other_arg = -1, alpha_arg = -1;
    bool swap = false;
    switch (e->op) {
    case RGPU_OP_ADD_TENSOR: kind = RGPU_OP_ADD_TENSOR; alpha_arg = 0; break;
    case RGPU_OP_SUB_TENSOR: kind = RGPU_OP_SUB_TENSOR; alpha_arg = 0; break;
    case RGPU_OP_MUL_TENSOR: kind = RGPU_OP_MUL_TENSOR; break;
    case RGPU_OP_DIV_TENSOR: kind = RGPU_OP_DIV_TENSOR; break;
    case RGPU_OP_ADD_SCALAR: kind = RGPU_OP_ADD_TENSOR; other_arg = 0; alpha_arg = 1; break;
    case RGPU_OP_SUB_SCALAR: kind = RGPU_OP_SUB_TENSOR; other_arg = 0; alpha_arg = 1; break;
    case RGPU_OP_RSUB_SCALAR: kind = RGPU_OP_SUB_TENSOR; other_arg = 0; alpha_arg = 1; swap = true; break;
    case RGPU_OP_MUL_SCALAR: kind = RGPU_OP_MUL_TENSOR; other_arg = 0; break;
    default: kind = RGPU_OP_DIV_TENSOR; other_arg = 0; break;   /* DIV_SCALAR */
    }
    if (other_arg >= 0) FORWARD_IF_ERROR(rgpu_op_check_scalar_arg(e, other_arg, "other", err, errlen));
    if (alpha_arg >= 0) FORWARD_IF_ERROR(rgpu_op_check_scalar_arg(e, alpha_arg, "alpha", err, errlen));

    const rgpu_view *out = e->out[0];
    memset(b, 0, sizeof *b);
    b->kind = kind;
    b->other_arg = other_arg;
    b->swap = swap;
    b->ct = rgpu_op_pointwise_compute_class(out->dtype);

    /* ATen's own rejections */
    if (kind == RGPU_OP_DIV_TENSOR && (b->ct == OP_CT_I64 || b->ct == OP_CT_BOOL))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: true division into %s output", name, rgpu_dtype_name(out->dtype));
    if (kind == RGPU_OP_SUB_TENSOR) {
        bool any_bool = out->dtype == RGPU_BOOL;
        for (int i = 0; i < e->n_in; i++) any_bool = any_bool || e->in[i]->dtype == RGPU_BOOL;
        if (other_arg >= 0 && e->args[other_arg].kind == RGPU_ARG_BOOL) any_bool = true;
        if (any_bool) RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: subtraction with a bool operand", name);
    }
    if (alpha_arg >= 0) {
        const rgpu_arg *al = &e->args[alpha_arg];
        if (al->kind == RGPU_ARG_BOOL && out->dtype != RGPU_BOOL)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: bool alpha only supported for bool results", name);
        if (al->kind == RGPU_ARG_FLOAT && !op_dtype_is_float(out->dtype))
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: float alpha with %s output", name, rgpu_dtype_name(out->dtype));
        b->alpha_one = al->kind == RGPU_ARG_FLOAT ? al->v.f == 1.0 : al->v.i == 1;
        b->alpha_f = al->kind == RGPU_ARG_FLOAT ? (float)al->v.f : (float)al->v.i;
        b->alpha_d = al->kind == RGPU_ARG_FLOAT ? al->v.f : (double)al->v.i;
        b->alpha_i = al->kind == RGPU_ARG_FLOAT ? (uint64_t)op_f64_to_i64_sat(al->v.f) : (uint64_t)al->v.i;
        b->alpha_b = b->alpha_f != 0.0f;
    } else {
        b->alpha_one = true;
        b->alpha_b = true;
    }
    if (b->alpha_one) { b->alpha_f = 1.0f; b->alpha_d = 1.0; b->alpha_i = 1; b->alpha_b = true; }
    return RGPU_OK;
}

static double arg_as_f64(const rgpu_arg *a)
{
    return a->kind == RGPU_ARG_FLOAT ? a->v.f : a->kind == RGPU_ARG_BOOL ? (double)(a->v.i != 0) : (double)a->v.i;
}

void rgpu_op_pw_own_scalar(const rgpu_arg *a, int cdt, double *d, float *f, uint64_t *i)
{
    *d = arg_as_f64(a);
    *f = (float)*d;
    uint64_t buf = 0;
    int idt = cdt == RGPU_BOOL ? RGPU_I64 : cdt;
    rgpu_op_scalar_to(a, idt, &buf);
    *i = op_load_u64((const char *)&buf, idt);
}

void rgpu_op_pw_pow_exponent(const rgpu_arg *a, int cdt, double *exp, int *mode)
{
    double e = arg_as_f64(a);
    if (cdt == RGPU_F16) e = rgpu_half_to_float(rgpu_float_to_half((float)e));
    if (cdt == RGPU_BF16) e = rgpu_bf16_to_float(rgpu_float_to_bf16((float)e));
    *exp = e;
    *mode = POW_SCALAR;
    if (cdt == RGPU_F16) return;
    if (e == 0.5) *mode = POW_SQRT;
    else if (e == -0.5) *mode = POW_RSQRT;
    else if (e == -1.0) *mode = POW_RECIP;
    else if (e == 2.0) *mode = POW_SQUARE;
    else if (e == 3.0) *mode = POW_CUBE;
    else if (e == -2.0) *mode = POW_INVSQ;
}

rgpu_status rgpu_op_pw_params_of(const rgpu_exec *e, const pw_layout *L, const bool present[PW_MAX_IN], int cdt, int ct,
                            op_pw_params *p, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    memset(p, 0, sizeof *p);
    if ((cdt == RGPU_F16 || cdt == RGPU_BF16) && op_special_nin(e->op) && !op_special_takes_half(e->op))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for compute dtype %s", name, rgpu_dtype_name(cdt));
    if (L->own >= 0) {
        const rgpu_arg *a = &e->args[L->own];
        switch (e->op) {
        case RGPU_OP_GELU: case RGPU_OP_GELU_BACKWARD:
            if (a->kind != RGPU_ARG_INT || (a->v.i != 0 && a->v.i != 1))
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: approximate must be int 0 (none) or 1 (tanh)", name);
            p->approx_tanh = a->v.i == 1;
            break;
        case RGPU_OP_DIV_MODE:
            if (a->kind != RGPU_ARG_INT || (a->v.i != DIV_TRUNC && a->v.i != DIV_FLOOR))
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: rounding mode must be int 1 (trunc) or 2 (floor)", name);
            p->mode = (int)a->v.i;
            break;
        case RGPU_OP_POLYGAMMA:
            if (a->kind != RGPU_ARG_INT || a->v.i < 0)
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: polygamma(n, x) does not support negative n.", name);
            p->n = a->v.i;
            break;
        case RGPU_OP_ROUND_DECIMALS: {   /* ATen: 10^|decimals| in double, then in opmath */
            if (a->kind != RGPU_ARG_INT)
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: decimals must be an int", name);
            int64_t d = a->v.i;
            p->neg_decimals = d < 0;
            p->ten_pow = pow(10.0, (double)(d < 0 ? -d : d));
            p->ten_pow_f = (float)p->ten_pow;
            break;
        }
        default:   /* addcmul/addcdiv value, threshold */
            if (!rgpu_op_is_scalar_kind(a->kind))
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: arg %d has kind %d, want int/float/bool", name, L->own, a->kind);
            rgpu_op_pw_own_scalar(a, cdt, &p->own_d, &p->own_f, &p->own_i);
            break;
        }
    }
    if (e->op == RGPU_OP_WHERE) {
        int cd = e->in[0]->dtype;
        if (cd != RGPU_BOOL && cd != RGPU_U8)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: condition has dtype %s, want bool", name, rgpu_dtype_name(cd));
        p->cond_first = true;
    }
    if (e->op == RGPU_OP_CLAMP) {
        p->has_lo = present[1];
        p->has_hi = present[2];
        if (!p->has_lo && !p->has_hi)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: at least one of 'min' or 'max' must not be None", name);
    }
    if (e->op == RGPU_OP_POW && e->in[1] == NULL) {
        const rgpu_arg *a = &e->args[1];
        if (ct == OP_CT_I64) {
            if (a->kind != RGPU_ARG_FLOAT && a->v.i < 0)
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: Integers to negative integer powers are not allowed.", name);
        } else {
            rgpu_op_pw_pow_exponent(a, cdt, &p->pow_exp, &p->pow_mode);
            p->pow_exp_f = (float)p->pow_exp;
        }
    }
    return RGPU_OK;
}
