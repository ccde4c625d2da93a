/* cpu_amp.c — the CPU reference for the two ops of torch.amp.GradScaler:
 *
 *   AMP_UNSCALE       _amp_foreach_non_finite_check_and_unscale_, one record
 *                     per gradient: grad := grad * inv_scale (in place, any
 *                     strides), found_inf := 1 when grad holds an inf or NaN
 *                     (left as it is otherwise).
 *   AMP_UPDATE_SCALE  _amp_update_scale_: backoff on found_inf, growth after
 *                     growth_interval clean steps, never to inf.
 *
 * Semantics are ATen's CPU kernels (AmpGradScalerKernels.cpp), which the CUDA
 * ones match:
 *   - f16/bf16 grads compute in f32 (opmath), f32 in f32, f64 in f64; the value
 *     is checked for finiteness before the multiply, and left untouched (not
 *     multiplied) when inv_scale == 1;
 *   - the scale update multiplies the f32 scale by the double factor in double
 *     and rounds once to f32; a grown scale that is not finite is dropped (the
 *     tracker still resets); any nonzero found_inf, NaN included, backs off.
 * Each fails with a one-line message on bad input; nothing here aborts. */
#include <math.h>

#include "cpu_internal.h"
#include "cpu_families.h"
#include "op/amp.h"

#define CHUNK CPU_CHUNK

/* ---------------------------------------------------------------------------
 * AMP_UNSCALE: in grad (any shape, floating), inv_scale (1 elem f32);
 * out grad (the same tensor: same shape and dtype), found_inf (1 elem f32). */

typedef struct unscale_ctx {
    int dt;             /* grad dtype */
    float inv;          /* inv_scale */
    bool inv_one;       /* inv_scale == 1: values pass through unmultiplied */
    _Atomic bool found; /* a non-finite value was seen (from any pool thread) */
} unscale_ctx;

static void unscale_row(char *const *p, const int64_t *s, int64_t n, void *vctx)
{
    unscale_ctx *c = vctx;
    char *o = p[0];
    const char *a = p[1];
    bool found = false;
    if (c->dt == RGPU_F64) {
        const double inv = c->inv;
        for (int64_t i = 0; i < n; i++) {
            double v = *(const double *)(a + i * s[1]);
            found |= !isfinite(v);
            *(double *)(o + i * s[0]) = c->inv_one ? v : v * inv;
        }
    } else {
        const float inv = c->inv;
        for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
            int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
            float buf[CHUNK];
            cpu_load_row_f32(buf, a + i0 * s[1], c->dt, s[1], m);
            for (int64_t i = 0; i < m; i++) {
                found |= !isfinite(buf[i]);
                if (!c->inv_one) buf[i] = buf[i] * inv;
            }
            cpu_store_row_f32(o + i0 * s[0], c->dt, s[0], buf, m);
        }
    }
    if (found) c->found = true;
}

static rgpu_status op_unscale(const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *g = e->in[0], *inv = e->in[1];
    rgpu_view *out = e->out[0], *found = e->out[1];
    FORWARD_IF_ERROR(rgpu_op_amp_unscale_check(e, err, errlen));

    unscale_ctx c = { g->dtype, *(const float *)inv->data, false, false };
    c.inv_one = c.inv == 1.0f;
    op_operand src = { g, NULL, 0 };
    op_iter it;
    FORWARD_IF_ERROR(rgpu_op_iter_init(&it, out, &src, 1, e->op, err, errlen));
    rgpu_cpu_iter_run(&it, unscale_row, &c, CPU_ITER_GRAIN);
    if (c.found) *(float *)found->data = 1.0f;
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * AMP_UPDATE_SCALE: in found_inf (1 elem f32); out scale (1 elem f32),
 * growth_tracker (1 elem i32), both read and written; args growth_factor,
 * backoff_factor, growth_interval. */

static rgpu_status op_update_scale(const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *found = e->in[0];
    rgpu_view *scale = e->out[0], *tracker = e->out[1];
    double growth, backoff;
    int64_t interval;
    FORWARD_IF_ERROR(rgpu_op_amp_update_scale_args(e, &growth, &backoff, &interval, err, errlen));

    float *s = scale->data;
    int32_t *t = tracker->data;
    if (*(const float *)found->data != 0.0f) {   /* NaN compares unequal: backs off too */
        *s = (float)((double)*s * backoff);
        *t = 0;
    } else {
        int32_t successful = (int32_t)((uint32_t)*t + 1u);   /* ATen's int + 1, wrapping */
        if ((int64_t)successful == interval) {
            float grown = (float)((double)*s * growth);
            if (isfinite(grown)) *s = grown;
            *t = 0;
        } else {
            *t = successful;
        }
    }
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * The family */

rgpu_status rgpu_cpu_amp_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_AMP_UNSCALE:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, true, err, errlen));
        return op_unscale(e, err, errlen);
    case RGPU_OP_AMP_UPDATE_SCALE:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, true, err, errlen));
        return op_update_scale(e, err, errlen);
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cpu backend: unsupported op %s", rgpu_op_name(e->op));
    }
}
