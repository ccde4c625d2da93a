/* op/attention.c — the checks of SDPA and SDPA_BACKWARD (op/attention.h). */
#include <math.h>
#include <string.h>

#include "attention.h"
#include "check.h"
#include "dtype.h"
#include "reduce.h"

static bool sdpa_dtype(int dt)
{
    return dt == RGPU_F32 || dt == RGPU_F16 || dt == RGPU_BF16 || dt == RGPU_F64;
}

/* v (not NULL) has dtype dt (or, dt < 0, any of the four) and shape sizes[0..nd). */
static rgpu_status want(const rgpu_exec *e, const rgpu_view *v, const char *what, int dt, int nd,
                        const int64_t *sizes, char *err, size_t errlen)
{
    if (dt >= 0 ? v->dtype != dt : !sdpa_dtype(v->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: %s has dtype %s, want %s", rgpu_op_name(e->op), what,
                     rgpu_dtype_name(v->dtype), dt >= 0 ? rgpu_dtype_name(dt) : "float32, float16, bfloat16 or float64");
    return rgpu_op_reduce_want_shape(e, v, what, nd, sizes, err, errlen);
}

rgpu_status rgpu_op_sdpa_check(const rgpu_exec *e, op_sdpa *a, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    const bool bw = e->op == RGPU_OP_SDPA_BACKWARD;
    /* forward: q k v bias? -> out lse; backward: g q k v bias? out lse -> dq? dk? dv? */
    FORWARD_IF_ERROR(rgpu_op_check_exec(e, bw ? (1u << 4) | (3u << 7) : 1u << 3, bw ? 7u : 12u, true, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 0, OP_ARGK(RGPU_ARG_BOOL) | OP_ARGK(RGPU_ARG_INT), "is_causal", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 1, OP_ARGK(RGPU_ARG_FLOAT) | OP_ARGK(RGPU_ARG_INT), "scale", err, errlen));
    memset(a, 0, sizeof *a);
    const int o = bw ? 1 : 0;
    a->g = bw ? e->in[0] : NULL;
    a->q = e->in[o]; a->k = e->in[o + 1]; a->v = e->in[o + 2]; a->bias = e->in[o + 3];
    a->out = bw ? e->in[5] : e->out[0];
    a->lse = bw ? e->in[6] : e->out[1];
    if (bw) { a->dq = e->out[0]; a->dk = e->out[1]; a->dv = e->out[2]; }
    else { a->pseed_out = e->out[2]; a->poffset_out = e->out[3]; }
    a->causal = e->args[0].v.i != 0;
    a->scale = rgpu_arg_as_f64(&e->args[1]);
    if (!isfinite(a->scale))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: scale %g is not finite", name, a->scale);
    FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 2, OP_ARGK(RGPU_ARG_FLOAT) | OP_ARGK(RGPU_ARG_INT), "dropout_p", err, errlen));
    a->dropout_p = rgpu_arg_as_f64(&e->args[2]);
    if (!(a->dropout_p >= 0 && a->dropout_p <= 1))
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: dropout probability has to be between 0 and 1, but got %g", name, a->dropout_p);
    a->drop_thr = op_sdpa_drop_threshold(a->dropout_p);
    a->drop_scale = a->dropout_p < 1 ? 1.0 / (1.0 - a->dropout_p) : 0.0;
    if (!bw) {
        FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 3, OP_ARGK(RGPU_ARG_INT), "seed", err, errlen));
        FORWARD_IF_ERROR(rgpu_op_reduce_arg(e, 4, OP_ARGK(RGPU_ARG_INT), "offset", err, errlen));
        a->seed = (uint64_t)e->args[3].v.i;
        a->offset = (uint64_t)e->args[4].v.i;
    } else {
        a->pseed = e->in[7];
        a->poffset = e->in[8];
        for (int t = 0; t < 2; t++) {
            const rgpu_view *p = t ? a->poffset : a->pseed;
            if (p == NULL) {
                if (a->drop_thr)
                    RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: dropout_p > 0 needs the forward's %s", name,
                                 t ? "philox_offset" : "philox_seed");
            } else if (p->ndim != 0 || p->dtype != RGPU_I64) {
                RETURN_ERROR(RGPU_ERR_SHAPE, "%s: %s must be a 0-d int64 tensor", name, t ? "philox_offset" : "philox_seed");
            }
        }
    }

    const rgpu_view *q = a->q, *k = a->k, *v = a->v;
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: q, k, v must be 4-d (batch, heads, seq, head_dim), got %d, %d, %d dims",
                     name, q->ndim, k->ndim, v->ndim);
    if (!sdpa_dtype(q->dtype))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: q has dtype %s, want float32, float16, bfloat16 or float64", name,
                     rgpu_dtype_name(q->dtype));
    a->B = q->sizes[0]; a->Hq = q->sizes[1]; a->L = q->sizes[2]; a->E = q->sizes[3];
    a->Hk = k->sizes[1]; a->S = k->sizes[2]; a->Ev = v->sizes[3];
    if (a->Hk == 0 ? a->Hq != 0 : a->Hq % a->Hk != 0)
        RETURN_ERROR(RGPU_ERR_SHAPE, "%s: the query's %lld heads are not a multiple of the key's %lld heads", name,
                     (long long)a->Hq, (long long)a->Hk);
    a->group = a->Hk ? a->Hq / a->Hk : 1;
    if (a->E < 1 || a->Ev < 1)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: head dims must be at least 1, got %lld (q, k) and %lld (v)", name,
                     (long long)a->E, (long long)a->Ev);
    int64_t n;
    if (__builtin_mul_overflow(a->B, a->Hq, &n) || __builtin_mul_overflow(n, a->L, &n) ||
        __builtin_mul_overflow(n, a->S, &n) || __builtin_mul_overflow(n, a->E > a->Ev ? a->E : a->Ev, &n))
        RETURN_ERROR(RGPU_ERR_OVERFLOW, "%s: batch * heads * L * S * head_dim is over 2^63", name);
    const int64_t ksz[4] = { a->B, a->Hk, a->S, a->E }, vsz[4] = { a->B, a->Hk, a->S, a->Ev };
    const int64_t osz[4] = { a->B, a->Hq, a->L, a->Ev }, bsz[4] = { a->B, a->Hq, a->L, a->S };
    const int64_t lsz[3] = { a->B, a->Hq, a->L };
    FORWARD_IF_ERROR(want(e, k, bw ? "in[2] (key)" : "in[1] (key)", q->dtype, 4, ksz, err, errlen));
    FORWARD_IF_ERROR(want(e, v, bw ? "in[3] (value)" : "in[2] (value)", q->dtype, 4, vsz, err, errlen));
    if (a->bias) FORWARD_IF_ERROR(want(e, a->bias, "attn_bias", -1, 4, bsz, err, errlen));
    FORWARD_IF_ERROR(want(e, a->out, "out", q->dtype, 4, osz, err, errlen));
    if (a->lse->dtype != RGPU_F32 && a->lse->dtype != RGPU_F64)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: logsumexp has dtype %s, want float32 or float64", name,
                     rgpu_dtype_name(a->lse->dtype));
    FORWARD_IF_ERROR(rgpu_op_reduce_want_shape(e, a->lse, "logsumexp", 3, lsz, err, errlen));
    for (int t = 0; !bw && t < 2; t++) {
        const rgpu_view *p = t ? a->poffset_out : a->pseed_out;
        if (p && (p->ndim != 0 || p->dtype != RGPU_I64))
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: %s must be a 0-d int64 tensor", name, t ? "philox_offset" : "philox_seed");
    }
    if (bw) {
        FORWARD_IF_ERROR(want(e, a->g, "grad_out", q->dtype, 4, osz, err, errlen));
        if (a->dq) FORWARD_IF_ERROR(want(e, a->dq, "out[0] (dq)", q->dtype, 4, q->sizes, err, errlen));
        if (a->dk) FORWARD_IF_ERROR(want(e, a->dk, "out[1] (dk)", q->dtype, 4, ksz, err, errlen));
        if (a->dv) FORWARD_IF_ERROR(want(e, a->dv, "out[2] (dv)", q->dtype, 4, vsz, err, errlen));
    }
    return RGPU_OK;
}
