// random.cu — the random ops (uniform_, normal_, bernoulli, random_.from,
// randperm) and native_dropout (+ backward) on the GPU (CPU reference:
// replayer/cpu/rgpu_cpu_index_random.c, same checks and messages).
//
// Every value comes from replayer/cpu/philox.h, the cross-backend contract:
// element i (row-major over the op's logical output shape, whatever its
// strides) draws Philox4x32-10(key = seed, counter = (i, offset)); one
// thread per element, so launch shapes never change values. Arithmetic is
// written with explicit round-to-nearest intrinsics (__fmul_rn, __dadd_rn,
// ...) so nvcc cannot contract a * b + c into an fma: uniform_, bernoulli,
// random_, randperm and the dropout masks/outputs are bit-identical to the
// CPU. normal_ uses CUDA's double log/cos (within 1-2 ulp of glibc), so it
// agrees with the CPU to rounding, possibly not in the last bit.
// randperm sorts on the host (keys drawn there with the same philox.h).
#include "index.cuh"
#include "op/philox.h"
#include "op/random.h"

namespace rgpu_ix {

// ---------------------------------------------------------------------------
// The per-element generators (rgpu_cpu_index_random.c's rnd_element).

// q as rgpu_op_random_check read it (its view pointer stays unread on the device)
struct rnd_args {
    op_random_args q;
    const char *p;          // bernoulli p tensor's data (walk set 1) or NULL
    int pdt;
    const uint64_t *ph;     // a graph's (seed, offset) in device memory (rgpu_exec philox), or NULL: q's
};

// w: out's shape; set 0 out, set 1 p (broadcast)
__global__ void k_random(ix_walk w, char *out, int dt, rnd_args r, long long n)
{
    const uint64_t seed = r.ph ? r.ph[0] : r.q.seed, offset = r.ph ? r.ph[1] : r.q.offset;
    IX_FOR(i, n) {
        long long off[IX_NW];
        ix_walk_at(w, i, off);
        uint32_t wd[4];
        rgpu_philox_draw(seed, offset, (uint64_t)i, wd);
        char *o = out + off[0];
        switch (r.q.kind) {
        case RGPU_OP_UNIFORM:
            if (dt == RGPU_F64)
                op_store_f64(o, dt, __dadd_rn(r.q.a, __dmul_rn(rgpu_philox_u_f64(wd), __dsub_rn(r.q.b, r.q.a))));
            else
                op_store_f32(o, dt, __fadd_rn(r.q.af, __fmul_rn(rgpu_philox_u_f32(wd), __fsub_rn(r.q.bf, r.q.af))));
            break;
        case RGPU_OP_NORMAL: {
            double u1 = rgpu_philox_bm_u1(wd), u2 = rgpu_philox_bm_u2(wd);
            double z = __dmul_rn(__dsqrt_rn(__dmul_rn(-2.0, log(u1))),
                                 cos(__dmul_rn(2.0 * 3.14159265358979323846, u2)));
            op_store_f64(o, dt, __dadd_rn(r.q.a, __dmul_rn(r.q.b, z)));
            break;
        }
        case RGPU_OP_BERNOULLI: {
            double p = r.p ? op_load_f64(r.p + off[1], r.pdt) : r.q.a;
            op_store_u64(o, dt, rgpu_philox_u_f64(wd) < p ? 1u : 0u);
            break;
        }
        default: {   // RANDOM
            uint64_t v = rgpu_philox_r64(wd);
            op_store_u64(o, dt, r.q.from + (r.q.range ? v % r.q.range : v));
            break;
        }
        }
    }
}

// First element (row-major) of p outside [0, 1] (NaN included).
// seq != 0: bad is the session's device error word (rgpu_dev_flag), else a
// position flag (atomicMin).
__global__ void k_check_p(ix_walk w, const char *p, int dt, long long n, unsigned long long *bad,
                          unsigned long long seq)
{
    IX_FOR(i, n) {
        long long off[IX_NW];
        ix_walk_at(w, i, off);
        double v = op_load_f64(p + off[0], dt);
        if (v >= 0.0 && v <= 1.0) continue;
        if (seq) rgpu_dev_flag(bad, seq, (unsigned long long)i);
        else atomicMin(bad, (unsigned long long)i);
    }
}

// The word's fields for check s.seq when it failed: the first bad p's bytes
// in value (RGPU_DEVERR_PROB; s.dim is its dtype, the host converts it).
__global__ void k_check_p_finish(rgpu_dev_word *wd, rgpu_dev_site s, ix_walk w, const char *p, int dt)
{
    if (!rgpu_dev_mine(wd, s)) return;
    long long off[IX_NW];
    ix_walk_at(w, (long long)wd->pos, off);
    long long bits = 0;
    memcpy(&bits, p + off[0], op_dtype_esize(dt));
    rgpu_dev_finish(wd, s, bits);
}

static rgpu_status rnd_fill(rgpu_cuda_ctx *c, const rnd_args *r, const rgpu_view *p, rgpu_view *out,
                            char *err, size_t errlen)
{
    long long n = rgpu_op_numel(out);
    if (n == 0) return RGPU_OK;
    ix_walk w;
    ix_walk_init(&w, out->ndim, out->sizes);
    ix_walk_strides(&w, 0, out);
    if (p) {   // p broadcast to out, trailing dims aligned
        int lead = out->ndim - p->ndim;
        long long esz = (long long)rgpu_dtype_size(p->dtype);
        for (int d = 0; d < p->ndim; d++) w.st[1][lead + d] = p->sizes[d] == 1 ? 0 : p->strides[d] * esz;
    }
    k_random<<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(w, (char *)out->data, out->dtype, *r, n);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// Every p of a bernoulli probability tensor is in [0, 1] (its dtype and
// shape: rgpu_op_random_check); the first bad one is read back for the message.
// With e's device error word the check stays on the device and the error
// comes at the session's next wait (the draws for a bad p are poisoned).
static rgpu_status check_p_values(rgpu_cuda_ctx *c, const rgpu_exec *e, const rgpu_view *p, char *err, size_t errlen)
{
    long long n = rgpu_op_numel(p);
    if (n == 0) return RGPU_OK;
    ix_walk w;
    ix_walk_init(&w, p->ndim, p->sizes);
    ix_walk_strides(&w, 0, p);
    rgpu_dev_word *wd = rgpu_cuda_dev_word(c, e);
    if (wd) {
        k_check_p<<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(w, (const char *)p->data, p->dtype, n,
                                                              (unsigned long long *)wd, e->dev_seq);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        k_check_p_finish<<<1, 1, 0, c->stream>>>(wd, rgpu_cuda_dev_site(e, RGPU_DEVERR_PROB, "bernoulli", p->dtype, 0), w,
                                                 (const char *)p->data, p->dtype);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        return RGPU_OK;
    }
    RGPU_CUDA_NEEDS_HOST(c, "bernoulli's p check", err, errlen);
    unsigned long long pos;
    FORWARD_IF_ERROR(ix_first_flagged(c, "the p check", [&](unsigned long long *bad) {
        k_check_p<<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(w, (const char *)p->data, p->dtype, n, bad, 0ull);
    }, &pos, err, errlen));
    if (pos == ~0ull) return RGPU_OK;
    long long off = ix_host_offset(w.nd, w.sz, w.st[0], (long long)pos);
    char buf[8] = { 0 };
    RGPU_CUDA_TRY(ix_read_back(c, buf, (const char *)p->data + off, rgpu_dtype_size(p->dtype)), err, errlen);
    RETURN_ERROR(RGPU_ERR_BAD_ARG, "bernoulli: expected p_in >= 0 && p_in <= 1, got %g", op_load_f64(buf, p->dtype));
}

// UNIFORM (from, to), NORMAL (mean, std), BERNOULLI (p?; p_scalar|NONE),
// RANDOM (from, to|NONE), RANDPERM (n); args end with seed, offset.
rgpu_status ix_random(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_random_args q;
    FORWARD_IF_ERROR(rgpu_op_random_check(e, &q, err, errlen));
    rgpu_view *out = e->out[0];
    if (q.kind != RGPU_OP_RANDPERM) {
        rnd_args r;
        memset(&r, 0, sizeof r);
        r.q = q;
        r.ph = e->philox;
        if (q.p != NULL) {
            FORWARD_IF_ERROR(check_p_values(c, e, q.p, err, errlen));
            r.p = (const char *)q.p->data;
            r.pdt = q.p->dtype;
        }
        return rnd_fill(c, &r, q.p, out, err, errlen);
    }

    // RANDPERM: out (n,) = 0..n-1 sorted by (r64 of element i, i), on the host
    // (a capture would keep the logged call's permutation: refused)
    RGPU_CUDA_NEEDS_HOST(c, "randperm (drawn on the host)", err, errlen);
    int64_t n = q.n;
    int dt = out->dtype;
    if (n == 0) return RGPU_OK;
    ix_host ho, hs, hv;
    uint64_t *order = (uint64_t *)rgpu_op_alloc(n, sizeof *order);
    ho.p = order;
    void *scratch = rgpu_op_alloc(n, OP_RANDPERM_SCRATCH);
    hs.p = scratch;
    size_t esz = rgpu_dtype_size(dt);
    char *vals = (char *)rgpu_op_alloc(n, esz);
    hv.p = vals;
    if (order == NULL || scratch == NULL || vals == NULL)
        RETURN_ERROR(RGPU_ERR_NOMEM, "randperm: out of memory for n = %lld", (long long)n);
    rgpu_op_randperm_order(q.seed, q.offset, n, order, scratch);
    for (int64_t j = 0; j < n; j++) op_store_u64(vals + (size_t)j * esz, dt, order[j]);
    return ix_upload_view(c, out, vals, err, errlen);
}

// ---------------------------------------------------------------------------
// NATIVE_DROPOUT: x -> (y, mask); args p, train (bool or NONE = true), seed,
// offset. Training: keep_i = u_f64(i) < 1 - p, y = (x * keep) * scale, each
// product rounded to x's dtype; mask = keep. Eval: y = x, mask = 1.

// w: x's shape; set 0 x, set 1 y, set 2 mask
// T: float for float32/float16/bfloat16 data (float opmath: no FP64
// instruction; the keep test in integers, op_dropout_keep_lim), double for
// float64. mask is bool, keep_lim op_dropout_args' (rgpu_op_dropout_check).
template <typename T>
__global__ void k_dropout(ix_walk w, const char *x, char *y, char *mask, int dt, int train, uint64_t seed,
                          uint64_t offset, const uint64_t *ph, uint64_t keep_lim, T scale, long long n)
{
    if (ph) { seed = ph[0]; offset = ph[1]; }   // a graph's pair (rgpu_exec philox)
    IX_FOR(i, n) {
        long long off[IX_NW];
        ix_walk_at(w, i, off);
        const char *xp = x + off[0];
        char *yp = y + off[1];
        bool keep = true;
        if (train) {
            uint32_t r[4];
            rgpu_philox_draw(seed, offset, (uint64_t)i, r);
            keep = (rgpu_philox_r64(r) >> 11) < keep_lim;
            if constexpr (sizeof(T) == 8) {
                double v = __dmul_rn(*(const double *)xp, keep ? 1.0 : 0.0);
                *(double *)yp = __dmul_rn(v, scale);
            } else {
                float v = op_round_to(dt, __fmul_rn(rf_ld<float>(xp, 0, dt), keep ? 1.0f : 0.0f));
                rf_st(yp, 0, dt, __fmul_rn(v, scale));
            }
        } else {
            op_elem_copy(yp, xp, op_dtype_esize(dt));
        }
        if (mask) *(uint8_t *)(mask + off[2]) = keep;
    }
}

rgpu_status ix_dropout(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_dropout_args d;
    FORWARD_IF_ERROR(rgpu_op_dropout_check(e, &d, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0], *mask = e->out[1];
    long long n = rgpu_op_numel(x);
    if (n == 0) return RGPU_OK;

    ix_walk w;
    ix_walk_init(&w, x->ndim, x->sizes);
    ix_walk_strides(&w, 0, x);
    ix_walk_strides(&w, 1, y);
    if (mask) ix_walk_strides(&w, 2, mask);
    char *mp = mask ? (char *)mask->data : NULL;
    if (!rf_opmath_float({ x->dtype }))
        k_dropout<double><<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(w, (const char *)x->data, (char *)y->data, mp,
                                                                      x->dtype, d.train, d.seed, d.offset, e->philox,
                                                                      d.keep_lim, d.scale, n);
    else
        k_dropout<float><<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(w, (const char *)x->data, (char *)y->data, mp,
                                                                     x->dtype, d.train, d.seed, d.offset, e->philox,
                                                                     d.keep_lim, (float)d.scale, n);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// NATIVE_DROPOUT_BACKWARD: out = (grad * mask) * scale, each product
// rounded to out's dtype; grad and mask broadcast to out.

// w: out's shape; set 0 out, set 1 grad, set 2 mask
// T: float when out and grad are float32/float16/bfloat16 (float opmath, no
// FP64 instruction), double when either is float64 (each product rounded
// to out's dtype, in double for a float64 out, in float otherwise). m is bool.
template <typename T>
__global__ void k_dropout_bw(ix_walk w, char *out, int dt, const char *g, int gdt, const char *m,
                             T scale, long long n)
{
    IX_FOR(i, n) {
        long long off[IX_NW];
        ix_walk_at(w, i, off);
        char *o = out + off[0];
        const char *gp = g + off[1];
        bool keep = *(const uint8_t *)(m + off[2]) != 0;
        if constexpr (sizeof(T) == 8) {
            if (dt == RGPU_F64) {
                double v = __dmul_rn(op_load_f64(gp, gdt), keep ? 1.0 : 0.0);
                *(double *)o = __dmul_rn(v, scale);
            } else {
                float v = op_round_to(dt, __fmul_rn(op_load_f32(gp, gdt), keep ? 1.0f : 0.0f));
                op_store_f32(o, dt, __fmul_rn(v, (float)scale));
            }
        } else {
            float v = op_round_to(dt, __fmul_rn(rf_ld<float>(gp, 0, gdt), keep ? 1.0f : 0.0f));
            rf_st(o, 0, dt, __fmul_rn(v, scale));
        }
    }
}

// Byte strides of in broadcast to out (trailing dims aligned) into set k;
// the shapes were checked by rgpu_op_iter_init.
static void broadcast_strides(ix_walk *w, int k, const rgpu_view *in, const rgpu_view *out)
{
    int lead = out->ndim - in->ndim;
    long long esz = (long long)rgpu_dtype_size(in->dtype);
    for (int d = 0; d < in->ndim; d++)
        w->st[k][lead + d] = in->sizes[d] == out->sizes[lead + d] && in->sizes[d] != 1 ? in->strides[d] * esz : 0;
}

rgpu_status ix_dropout_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    double scale;
    op_iter it;   // the CPU's broadcast checks and messages (metadata only; nothing is read)
    FORWARD_IF_ERROR(rgpu_op_dropout_backward_check(e, &scale, &it, err, errlen));
    rgpu_view *out = e->out[0];
    long long n = rgpu_op_numel(out);
    if (n == 0) return RGPU_OK;
    ix_walk w;
    ix_walk_init(&w, out->ndim, out->sizes);
    ix_walk_strides(&w, 0, out);
    broadcast_strides(&w, 1, e->in[0], out);
    broadcast_strides(&w, 2, e->in[1], out);
    const rgpu_view *g = e->in[0];
    if (!rf_opmath_float({ out->dtype, g->dtype }))
        k_dropout_bw<double><<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(w, (char *)out->data, out->dtype,
                                                                         (const char *)g->data, g->dtype,
                                                                         (const char *)e->in[1]->data, scale, n);
    else
        k_dropout_bw<float><<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(w, (char *)out->data, out->dtype,
                                                                        (const char *)g->data, g->dtype,
                                                                        (const char *)e->in[1]->data, (float)scale, n);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

}  // namespace rgpu_ix
