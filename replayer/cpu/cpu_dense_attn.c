/* cpu_dense_attn.c — SDPA and SDPA_BACKWARD on the CPU (op/attention.h has
 * the math and the checks): FlashAttention's blocking on the CPU, as ATen's
 * CPU flash kernel does it. A pool item is one (batch, head, block of BR
 * query rows); it packs its
 * operands into compute buffers (float for float32/float16/bfloat16, double
 * for float64), computes the block's scores with one GEMM, the row softmax
 * in double, and the output with a second GEMM. Scratch is O(BR * S), never
 * (L, S). Items are independent and each is computed the same way whatever
 * thread runs it, so results do not depend on the thread count. The
 * backward's item is one (batch, kv head) (bwd_task below). exp of float rows
 * is cpu_vmath's (vectorised, libm's bits). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_dense.h"
#include "cpu_dense_util.h"
#include "cpu_pool.h"
#include "cpu_vmath.h"
#include "op/attention.h"
#include "op/philox.h"

#define BR 64       /* query rows per item */

static inline double bget(const void *p, int ct, int64_t i)
{
    return ct == RGPU_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}
static inline void bset(void *p, int ct, int64_t i, double v)
{
    if (ct == RGPU_F32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
}
static inline void *badv(void *p, int ct, int64_t n) { return (char *)p + n * (ct == RGPU_F32 ? 4 : 8); }

/* Rows [r0, r0 + n) of v[b, h] as a 2-d (n, last dim) view. */
static rgpu_view rows_of(const rgpu_view *v, int64_t b, int64_t h, int64_t r0, int64_t n)
{
    rgpu_view s;
    memset(&s, 0, sizeof s);
    s.dtype = v->dtype;
    s.ndim = 2;
    s.sizes[0] = n; s.sizes[1] = v->sizes[3];
    s.strides[0] = v->strides[2]; s.strides[1] = v->strides[3];
    s.data = (char *)v->data + (b * v->strides[0] + h * v->strides[1] + r0 * v->strides[2]) * rgpu_dtype_size(v->dtype);
    return s;
}

static inline double elem4(const rgpu_view *v, int64_t b, int64_t h, int64_t i, int64_t j)
{
    const int64_t off = b * v->strides[0] + h * v->strides[1] + i * v->strides[2] + j * v->strides[3];
    return op_load_f64((const char *)v->data + off * rgpu_dtype_size(v->dtype), v->dtype);
}

static inline double elem3(const rgpu_view *v, int64_t b, int64_t h, int64_t i)
{
    const int64_t off = b * v->strides[0] + h * v->strides[1] + i * v->strides[2];
    return op_load_f64((const char *)v->data + off * rgpu_dtype_size(v->dtype), v->dtype);
}

/* Whether dropout keeps key j of query row i of (b, h) (op/attention.h). */
static inline bool kept(const op_sdpa *a, int64_t b, int64_t h, int64_t i, int64_t j)
{
    uint32_t w[4];
    rgpu_philox_draw(a->seed, a->offset, (((uint64_t)b * (uint64_t)a->Hq + (uint64_t)h) * (uint64_t)a->L + (uint64_t)i) *
                     (uint64_t)a->S + (uint64_t)j, w);
    return (w[0] >> 8) >= a->drop_thr;
}

/* The keys query row i sees: [0, lim). */
static inline int64_t keys_of(const op_sdpa *a, int64_t i)
{
    return a->causal ? (i + 1 < a->S ? i + 1 : a->S) : a->S;
}

typedef struct attn_job {
    const op_sdpa *a;
    int ct;
    int64_t nblk;           /* forward: row blocks per head */
    int nomem;
} attn_job;

/* s := scale * q.k + bias, masked; the score of key j of query row i of (b, h). */
static inline double score(const op_sdpa *a, double s, int64_t b, int64_t h, int64_t i, int64_t j)
{
    return a->bias ? s + elem4(a->bias, b, h, i, j) : s;
}

/* ---------------------------------------------------------------------------
 * Forward */

static void fwd_task(void *vj, int64_t lo, int64_t hi)
{
    attn_job *j = vj;
    const op_sdpa *a = j->a;
    const int ct = j->ct;
    const int64_t E = a->E, Ev = a->Ev, S = a->S;
    /* Qb (BR,E) | Kb (S,E) | Vb (S,Ev) | Sc (BR,S) | Ob (BR,Ev) */
    void *buf = rgpu_op_alloc(BR * E + S * E + S * Ev + BR * S + BR * Ev, 8);
    double *inv = rgpu_op_alloc(BR, sizeof *inv);
    if (buf == NULL || inv == NULL) { free(buf); free(inv); j->nomem = 1; return; }
    void *Qb = buf, *Kb = badv(Qb, ct, BR * E), *Vb = badv(Kb, ct, S * E), *Sc = badv(Vb, ct, S * Ev);
    void *Ob = badv(Sc, ct, BR * S);
    for (int64_t it = lo; it < hi; it++) {
        const int64_t bh = it / j->nblk, i0 = it % j->nblk * BR;
        const int64_t b = bh / a->Hq, h = bh % a->Hq, g = h / a->group;
        const int64_t n = a->L - i0 < BR ? a->L - i0 : BR;
        const int64_t Se = keys_of(a, i0 + n - 1);
        if (Se > 0) {
            rgpu_view vq = rows_of(a->q, b, h, i0, n), vk = rows_of(a->k, b, g, 0, Se), vv = rows_of(a->v, b, g, 0, Se);
            rgpu_dense_load(&vq, ct, Qb);
            rgpu_dense_load(&vk, ct, Kb);
            rgpu_dense_load(&vv, ct, Vb);
            rgpu_dense_gemm(ct, false, true, n, Se, E, a->scale, Qb, E, Kb, E, 0.0, Sc, Se);
        }
        for (int64_t r = 0; r < n; r++) {
            const int64_t i = i0 + r, lim = keys_of(a, i);
            double m = -INFINITY;
            for (int64_t c = 0; c < lim; c++) {
                double s = score(a, bget(Sc, ct, r * Se + c), b, h, i, c);
                bset(Sc, ct, r * Se + c, s);
                if (!(s <= m)) m = s;          /* a NaN wins */
            }
            double l = 0.0;
            if (m == -INFINITY) {
                for (int64_t c = 0; c < lim; c++) bset(Sc, ct, r * Se + c, 0.0);
            } else {
                for (int64_t c = 0; c < lim; c++) bset(Sc, ct, r * Se + c, bget(Sc, ct, r * Se + c) - m);
                if (ct == RGPU_F32) rgpu_vm_exp_f32((float *)Sc + r * Se, (const float *)Sc + r * Se, lim);
                else for (int64_t c = 0; c < lim; c++) ((double *)Sc)[r * Se + c] = exp(((double *)Sc)[r * Se + c]);
                for (int64_t c = 0; c < lim; c++) l += bget(Sc, ct, r * Se + c);
                if (a->drop_thr)
                    for (int64_t c = 0; c < lim; c++)
                        bset(Sc, ct, r * Se + c, kept(a, b, h, i, c) ? bget(Sc, ct, r * Se + c) * a->drop_scale : 0.0);
            }
            for (int64_t c = lim; c < Se; c++) bset(Sc, ct, r * Se + c, 0.0);
            inv[r] = l > 0 ? 1.0 / l : 0.0;
            const double lse = m == -INFINITY ? -INFINITY : m + log(l);
            const int64_t lo3 = b * a->lse->strides[0] + h * a->lse->strides[1] + i * a->lse->strides[2];
            op_store_f64((char *)a->lse->data + lo3 * rgpu_dtype_size(a->lse->dtype), a->lse->dtype, lse);
        }
        if (Se > 0) rgpu_dense_gemm(ct, false, false, n, Ev, Se, 1.0, Sc, Se, Vb, Ev, 0.0, Ob, Ev);
        else memset(Ob, 0, (size_t)(n * Ev) * (ct == RGPU_F32 ? 4 : 8));
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < Ev; d++) bset(Ob, ct, r * Ev + d, bget(Ob, ct, r * Ev + d) * inv[r]);
        rgpu_view vo = rows_of(a->out, b, h, i0, n);
        rgpu_dense_store(&vo, ct, Ob);
    }
    free(buf);
    free(inv);
}

/* ---------------------------------------------------------------------------
 * Backward: one item per (batch, kv head), over the query heads of its group
 * and blocks of BR query rows. Per block: the scores against every key the
 * block sees (one GEMM), P = exp(s - lse) once, dP = grad_out V^T, dS =
 * P (dP - D); dv += P^T grad_out, dq = scale dS K (the block's rows are
 * complete: written), dk += scale dS^T q. dk and dv live in head-sized
 * buffers and accumulate over the blocks in increasing order. */

static void bwd_task(void *vj, int64_t lo, int64_t hi)
{
    attn_job *j = vj;
    const op_sdpa *a = j->a;
    const int ct = j->ct;
    const int64_t E = a->E, Ev = a->Ev, S = a->S;
    const size_t es = ct == RGPU_F32 ? 4 : 8;
    /* Kh, dKh (S,E) | Vh, dVh (S,Ev) | Qb, dQb (BR,E) | Gb, Ob (BR,Ev) | Sc, dP (BR,S) */
    void *buf = rgpu_op_alloc(2 * S * E + 2 * S * Ev + 2 * BR * E + 2 * BR * Ev + 2 * BR * S, 8);
    double *rowv = rgpu_op_alloc(2 * BR, sizeof *rowv);     /* lse, D of the block's rows */
    if (buf == NULL || rowv == NULL) { free(buf); free(rowv); j->nomem = 1; return; }
    void *Kh = buf, *dKh = badv(Kh, ct, S * E), *Vh = badv(dKh, ct, S * E), *dVh = badv(Vh, ct, S * Ev);
    void *Qb = badv(dVh, ct, S * Ev), *dQb = badv(Qb, ct, BR * E), *Gb = badv(dQb, ct, BR * E);
    void *Ob = badv(Gb, ct, BR * Ev), *Sc = badv(Ob, ct, BR * Ev), *dP = badv(Sc, ct, BR * S);
    double *lse = rowv, *D = rowv + BR;
    for (int64_t it = lo; it < hi; it++) {
        const int64_t b = it / a->Hk, g = it % a->Hk;
        if (S > 0) {
            rgpu_view vk = rows_of(a->k, b, g, 0, S), vv = rows_of(a->v, b, g, 0, S);
            rgpu_dense_load(&vk, ct, Kh);
            rgpu_dense_load(&vv, ct, Vh);
        }
        memset(dKh, 0, (size_t)(S * E) * es);
        memset(dVh, 0, (size_t)(S * Ev) * es);
        for (int64_t hh = 0; hh < a->group; hh++) {
            const int64_t h = g * a->group + hh;
            for (int64_t i0 = 0; i0 < a->L; i0 += BR) {
                const int64_t n = a->L - i0 < BR ? a->L - i0 : BR;
                const int64_t Se = keys_of(a, i0 + n - 1);
                rgpu_view vdq = a->dq ? rows_of(a->dq, b, h, i0, n) : (rgpu_view){ 0 };
                if (Se == 0) {
                    if (a->dq) { memset(dQb, 0, (size_t)(n * E) * es); rgpu_dense_store(&vdq, ct, dQb); }
                    continue;
                }
                rgpu_view vq = rows_of(a->q, b, h, i0, n), vg = rows_of(a->g, b, h, i0, n);
                rgpu_view vo = rows_of(a->out, b, h, i0, n);
                rgpu_dense_load(&vq, ct, Qb);
                rgpu_dense_load(&vg, ct, Gb);
                rgpu_dense_load(&vo, ct, Ob);
                for (int64_t r = 0; r < n; r++) {
                    double d = 0.0;
                    for (int64_t c = 0; c < Ev; c++) d += bget(Gb, ct, r * Ev + c) * bget(Ob, ct, r * Ev + c);
                    D[r] = d;
                    lse[r] = elem3(a->lse, b, h, i0 + r);
                }
                rgpu_dense_gemm(ct, false, true, n, Se, E, a->scale, Qb, E, Kh, E, 0.0, Sc, Se);
                rgpu_dense_gemm(ct, false, true, n, Se, Ev, 1.0, Gb, Ev, Vh, Ev, 0.0, dP, Se);
                for (int64_t r = 0; r < n; r++) {
                    const int64_t i = i0 + r, lim = lse[r] == -INFINITY ? 0 : keys_of(a, i);
                    for (int64_t c = 0; c < lim; c++)
                        bset(Sc, ct, r * Se + c, score(a, bget(Sc, ct, r * Se + c), b, h, i, c) - lse[r]);
                    if (ct == RGPU_F32) rgpu_vm_exp_f32((float *)Sc + r * Se, (const float *)Sc + r * Se, lim);
                    else for (int64_t c = 0; c < lim; c++) ((double *)Sc)[r * Se + c] = exp(((double *)Sc)[r * Se + c]);
                    if (a->drop_thr) {
                        for (int64_t c = 0; c < lim; c++) {
                            const double z = kept(a, b, h, i, c) ? a->drop_scale : 0.0, pv = bget(Sc, ct, r * Se + c);
                            bset(dP, ct, r * Se + c, pv * (bget(dP, ct, r * Se + c) * z - D[r]));
                            bset(Sc, ct, r * Se + c, pv * z);
                        }
                    } else {
                        for (int64_t c = 0; c < lim; c++)
                            bset(dP, ct, r * Se + c, bget(Sc, ct, r * Se + c) * (bget(dP, ct, r * Se + c) - D[r]));
                    }
                    for (int64_t c = lim; c < Se; c++) { bset(Sc, ct, r * Se + c, 0.0); bset(dP, ct, r * Se + c, 0.0); }
                }
                if (a->dv) rgpu_dense_gemm(ct, true, false, Se, Ev, n, 1.0, Sc, Se, Gb, Ev, 1.0, dVh, Ev);
                if (a->dq) {
                    rgpu_dense_gemm(ct, false, false, n, E, Se, a->scale, dP, Se, Kh, E, 0.0, dQb, E);
                    rgpu_dense_store(&vdq, ct, dQb);
                }
                if (a->dk) rgpu_dense_gemm(ct, true, false, Se, E, n, a->scale, dP, Se, Qb, E, 1.0, dKh, E);
            }
        }
        if (S > 0 && a->dk) { rgpu_view o = rows_of(a->dk, b, g, 0, S); rgpu_dense_store(&o, ct, dKh); }
        if (S > 0 && a->dv) { rgpu_view o = rows_of(a->dv, b, g, 0, S); rgpu_dense_store(&o, ct, dVh); }
    }
    free(buf);
    free(rowv);
}

/* ---------------------------------------------------------------------------
 * Entry points */

static int compute_type(int dt) { return dt == RGPU_F64 ? RGPU_F64 : RGPU_F32; }

rgpu_status rgpu_cpu_dense_sdpa(const rgpu_exec *e, char *err, size_t errlen)
{
    op_sdpa a;
    FORWARD_IF_ERROR(rgpu_op_sdpa_check(e, &a, err, errlen));
    const int64_t rows = a.B * a.Hq * a.L;
    if (!a.drop_thr) a.seed = a.offset = 0;          /* no dropout: no Philox state */
    if (a.pseed_out) *(int64_t *)a.pseed_out->data = (int64_t)a.seed;
    if (a.poffset_out) *(int64_t *)a.poffset_out->data = (int64_t)a.offset;
    if (rows == 0) return RGPU_OK;
    attn_job j = { &a, compute_type(a.q->dtype), (a.L + BR - 1) / BR, 0 };
    rgpu_pool_for(a.B * a.Hq * j.nblk, 1, fwd_task, &j);
    if (j.nomem) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for the attention scratch", rgpu_op_name(e->op));
    return RGPU_OK;
}

rgpu_status rgpu_cpu_dense_sdpa_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    op_sdpa a;
    FORWARD_IF_ERROR(rgpu_op_sdpa_check(e, &a, err, errlen));
    if (!a.dq && !a.dk && !a.dv) return RGPU_OK;
    if (a.drop_thr) {
        a.seed = (uint64_t)*(const int64_t *)a.pseed->data;
        a.offset = (uint64_t)*(const int64_t *)a.poffset->data;
    }
    attn_job j = { &a, compute_type(a.q->dtype), 0, 0 };
    rgpu_pool_for(a.B * a.Hk, 1, bwd_task, &j);
    if (j.nomem) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for the attention scratch", rgpu_op_name(e->op));
    return RGPU_OK;
}
