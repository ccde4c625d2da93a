/* cpu_dense_attn.c — SDPA and SDPA_BACKWARD on the CPU (op/attention.h has
 * the math and the checks): FlashAttention's blocking on the CPU, as ATen's
 * CPU flash kernel does it. A pool item is one (batch, head, block of BR
 * query rows) (dk/dv: one (batch, kv head, block of BK keys)); it packs its
 * operands into compute buffers (float for float32/float16/bfloat16, double
 * for float64), computes the block's scores with one GEMM, the row softmax
 * in double, and the output with a second GEMM. Scratch is O(BR * S), never
 * (L, S). Items are independent and each is computed the same way whatever
 * thread runs it, so results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_dense.h"
#include "cpu_dense_util.h"
#include "cpu_pool.h"
#include "op/attention.h"

#define BR 64       /* query rows per item */
#define BK 64       /* keys per dk/dv item */

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

/* The keys query row i sees: [0, lim). */
static inline int64_t keys_of(const op_sdpa *a, int64_t i)
{
    return a->causal ? (i + 1 < a->S ? i + 1 : a->S) : a->S;
}

typedef struct attn_job {
    const op_sdpa *a;
    int ct;
    int64_t nblk;           /* row (or key) blocks per head */
    double *D;              /* backward: grad_out_i . out_i per row (B*Hq*L) */
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
                for (int64_t c = 0; c < lim; c++) {
                    double p = exp(bget(Sc, ct, r * Se + c) - m);
                    bset(Sc, ct, r * Se + c, p);
                    l += bget(Sc, ct, r * Se + c);
                }
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
 * Backward */

static inline double p_of(double s, double lse)
{
    return lse == -INFINITY ? 0.0 : exp(s - lse);
}

static void d_task(void *vj, int64_t lo, int64_t hi)
{
    attn_job *j = vj;
    const op_sdpa *a = j->a;
    for (int64_t row = lo; row < hi; row++) {
        const int64_t i = row % a->L, bh = row / a->L, b = bh / a->Hq, h = bh % a->Hq;
        double d = 0.0;
        for (int64_t c = 0; c < a->Ev; c++) d += elem4(a->g, b, h, i, c) * elem4(a->out, b, h, i, c);
        j->D[row] = d;
    }
}

static void dq_task(void *vj, int64_t lo, int64_t hi)
{
    attn_job *j = vj;
    const op_sdpa *a = j->a;
    const int ct = j->ct;
    const int64_t E = a->E, Ev = a->Ev, S = a->S;
    /* Qb (BR,E) | Kb (S,E) | Vb (S,Ev) | Gb (BR,Ev) | Sc (BR,S) | dP (BR,S) | dQb (BR,E) */
    void *buf = rgpu_op_alloc(BR * E + S * E + S * Ev + BR * Ev + 2 * BR * S + BR * E, 8);
    if (buf == NULL) { j->nomem = 1; return; }
    void *Qb = buf, *Kb = badv(Qb, ct, BR * E), *Vb = badv(Kb, ct, S * E), *Gb = badv(Vb, ct, S * Ev);
    void *Sc = badv(Gb, ct, BR * Ev), *dP = badv(Sc, ct, BR * S), *dQb = badv(dP, ct, BR * S);
    for (int64_t it = lo; it < hi; it++) {
        const int64_t bh = it / j->nblk, i0 = it % j->nblk * BR;
        const int64_t b = bh / a->Hq, h = bh % a->Hq, g = h / a->group;
        const int64_t n = a->L - i0 < BR ? a->L - i0 : BR;
        const int64_t Se = keys_of(a, i0 + n - 1);
        rgpu_view vdq = rows_of(a->dq, b, h, i0, n);
        if (Se == 0) {
            memset(dQb, 0, (size_t)(n * E) * (ct == RGPU_F32 ? 4 : 8));
            rgpu_dense_store(&vdq, ct, dQb);
            continue;
        }
        rgpu_view vq = rows_of(a->q, b, h, i0, n), vk = rows_of(a->k, b, g, 0, Se), vv = rows_of(a->v, b, g, 0, Se);
        rgpu_view vg = rows_of(a->g, b, h, i0, n);
        rgpu_dense_load(&vq, ct, Qb);
        rgpu_dense_load(&vk, ct, Kb);
        rgpu_dense_load(&vv, ct, Vb);
        rgpu_dense_load(&vg, ct, Gb);
        rgpu_dense_gemm(ct, false, true, n, Se, E, a->scale, Qb, E, Kb, E, 0.0, Sc, Se);
        rgpu_dense_gemm(ct, false, true, n, Se, Ev, 1.0, Gb, Ev, Vb, Ev, 0.0, dP, Se);
        for (int64_t r = 0; r < n; r++) {
            const int64_t i = i0 + r, lim = keys_of(a, i);
            const double lse = elem3(a->lse, b, h, i), D = j->D[bh * a->L + i];
            for (int64_t c = 0; c < Se; c++) {
                double ds = 0.0;
                if (c < lim) {
                    const double p = p_of(score(a, bget(Sc, ct, r * Se + c), b, h, i, c), lse);
                    ds = p * (bget(dP, ct, r * Se + c) - D);
                }
                bset(Sc, ct, r * Se + c, ds);
            }
        }
        rgpu_dense_gemm(ct, false, false, n, E, Se, a->scale, Sc, Se, Kb, E, 0.0, dQb, E);
        rgpu_dense_store(&vdq, ct, dQb);
    }
    free(buf);
}

static void dkv_task(void *vj, int64_t lo, int64_t hi)
{
    attn_job *j = vj;
    const op_sdpa *a = j->a;
    const int ct = j->ct;
    const int64_t E = a->E, Ev = a->Ev;
    /* Kb (BK,E) | Vb (BK,Ev) | dKb (BK,E) | dVb (BK,Ev) | Qb (BR,E) | Gb (BR,Ev) | St (BK,BR) | dPt (BK,BR) */
    void *buf = rgpu_op_alloc(2 * BK * E + 2 * BK * Ev + BR * E + BR * Ev + 2 * BK * BR, 8);
    if (buf == NULL) { j->nomem = 1; return; }
    void *Kb = buf, *Vb = badv(Kb, ct, BK * E), *dKb = badv(Vb, ct, BK * Ev), *dVb = badv(dKb, ct, BK * E);
    void *Qb = badv(dVb, ct, BK * Ev), *Gb = badv(Qb, ct, BR * E), *St = badv(Gb, ct, BR * Ev);
    void *dPt = badv(St, ct, BK * BR);
    const size_t es = ct == RGPU_F32 ? 4 : 8;
    for (int64_t it = lo; it < hi; it++) {
        const int64_t bg = it / j->nblk, j0 = it % j->nblk * BK;
        const int64_t b = bg / a->Hk, g = bg % a->Hk;
        const int64_t m = a->S - j0 < BK ? a->S - j0 : BK;
        rgpu_view vk = rows_of(a->k, b, g, j0, m), vv = rows_of(a->v, b, g, j0, m);
        rgpu_dense_load(&vk, ct, Kb);
        rgpu_dense_load(&vv, ct, Vb);
        memset(dKb, 0, (size_t)(m * E) * es);
        memset(dVb, 0, (size_t)(m * Ev) * es);
        for (int64_t hh = 0; hh < a->group; hh++) {
            const int64_t h = g * a->group + hh;
            for (int64_t i0 = a->causal ? j0 / BR * BR : 0; i0 < a->L; i0 += BR) {
                const int64_t n = a->L - i0 < BR ? a->L - i0 : BR;
                rgpu_view vq = rows_of(a->q, b, h, i0, n), vg = rows_of(a->g, b, h, i0, n);
                rgpu_dense_load(&vq, ct, Qb);
                rgpu_dense_load(&vg, ct, Gb);
                rgpu_dense_gemm(ct, false, true, m, n, E, a->scale, Kb, E, Qb, E, 0.0, St, n);
                rgpu_dense_gemm(ct, false, true, m, n, Ev, 1.0, Vb, Ev, Gb, Ev, 0.0, dPt, n);
                for (int64_t c = 0; c < m; c++) {
                    const int64_t jj = j0 + c;
                    for (int64_t r = 0; r < n; r++) {
                        const int64_t i = i0 + r;
                        double p = 0.0, ds = 0.0;
                        if (!(a->causal && jj > i)) {
                            p = p_of(score(a, bget(St, ct, c * n + r), b, h, i, jj), elem3(a->lse, b, h, i));
                            ds = p * (bget(dPt, ct, c * n + r) - j->D[(b * a->Hq + h) * a->L + i]);
                        }
                        bset(St, ct, c * n + r, p);
                        bset(dPt, ct, c * n + r, ds);
                    }
                }
                if (a->dv) rgpu_dense_gemm(ct, false, false, m, Ev, n, 1.0, St, n, Gb, Ev, 1.0, dVb, Ev);
                if (a->dk) rgpu_dense_gemm(ct, false, false, m, E, n, a->scale, dPt, n, Qb, E, 1.0, dKb, E);
            }
        }
        if (a->dk) { rgpu_view o = rows_of(a->dk, b, g, j0, m); rgpu_dense_store(&o, ct, dKb); }
        if (a->dv) { rgpu_view o = rows_of(a->dv, b, g, j0, m); rgpu_dense_store(&o, ct, dVb); }
    }
    free(buf);
}

/* ---------------------------------------------------------------------------
 * Entry points */

static int compute_type(int dt) { return dt == RGPU_F64 ? RGPU_F64 : RGPU_F32; }

rgpu_status rgpu_cpu_dense_sdpa(const rgpu_exec *e, char *err, size_t errlen)
{
    op_sdpa a;
    FORWARD_IF_ERROR(rgpu_op_sdpa_check(e, &a, err, errlen));
    const int64_t rows = a.B * a.Hq * a.L;
    if (a.seed) *(int64_t *)a.seed->data = 0;        /* no dropout: no Philox state */
    if (a.offset) *(int64_t *)a.offset->data = 0;
    if (rows == 0) return RGPU_OK;
    attn_job j = { &a, compute_type(a.q->dtype), (a.L + BR - 1) / BR, NULL, 0 };
    rgpu_pool_for(a.B * a.Hq * j.nblk, 1, fwd_task, &j);
    if (j.nomem) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for the attention scratch", rgpu_op_name(e->op));
    return RGPU_OK;
}

rgpu_status rgpu_cpu_dense_sdpa_backward(const rgpu_exec *e, char *err, size_t errlen)
{
    op_sdpa a;
    FORWARD_IF_ERROR(rgpu_op_sdpa_check(e, &a, err, errlen));
    const int64_t rows = a.B * a.Hq * a.L;
    attn_job j = { &a, compute_type(a.q->dtype), (a.L + BR - 1) / BR, NULL, 0 };
    if (rows > 0) {
        j.D = rgpu_op_alloc(rows, sizeof *j.D);
        if (j.D == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lld rows", rgpu_op_name(e->op), (long long)rows);
        rgpu_pool_for(rows, 256, d_task, &j);
        if (a.dq) rgpu_pool_for(a.B * a.Hq * j.nblk, 1, dq_task, &j);
    }
    if ((a.dk || a.dv) && a.B * a.Hk * a.S > 0) {
        j.nblk = (a.S + BK - 1) / BK;
        rgpu_pool_for(a.B * a.Hk * j.nblk, 1, dkv_task, &j);
    }
    free(j.D);
    if (j.nomem) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for the attention scratch", rgpu_op_name(e->op));
    return RGPU_OK;
}
