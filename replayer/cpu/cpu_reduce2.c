/* cpu_reduce2.c — the CPU reference for reductions beyond sum/mean (amax,
 * amin, argmax, argmin, max.dim, min.dim, var, std, linalg_vector_norm, any,
 * all, prod), cumsum, and the family's dispatch. Softmax, layer norm and
 * nll_loss live in cpu_reduce2_norm.c.
 *
 * A reduction reads in (d0, .., dn-1) and reduces the listed dims (negative
 * dims wrap, an empty list means all) into out, whose shape is the input's
 * with reduced dims kept as 1 (keepdim) or removed. Elements of one output are
 * visited in row-major order of the reduced dims, so every result is
 * deterministic and "first index" means ATen's first index. Floating inputs
 * accumulate in double, integer ones in int64 (wrapping).
 *
 * Outputs run over the thread pool; sums along a contiguous row use R2_LANES
 * lane accumulators (a fixed order). A floating sum-like reduction with few
 * outputs and many elements (a full norm, var) is cut into fixed chunks of
 * RED_CHUNK elements whose partials are added in chunk order. Lines of cumsum
 * run over the pool. Every split depends on the shape only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_families.h"
#include "cpu_pool.h"
#include "cpu_reduce2.h"
#include "cpu_reduce2_util.h"

/* ---------------------------------------------------------------------------
 * Reduction plans
 *
 * keep walks the output elements (operands: 0 in, 1 out0, 2 out1); red walks
 * the reduced dims except the innermost, which is handed over as a row. */
typedef struct red_plan {
    r2_ctr keep, red;
    int64_t rn, rs;          /* innermost reduced row: elements, byte stride */
    int64_t count;           /* elements per output */
} red_plan;

static void plan_build(red_plan *pl, const rgpu_view *in, const bool *red, bool keepdim,
                       rgpu_view *const *outs, int nout)
{
    int nd = in->ndim, ond = 0, nk = 0, nr = 0;
    int64_t ksz[RGPU_MAX_DIMS], kin[RGPU_MAX_DIMS], kout[2][RGPU_MAX_DIMS];
    int64_t rsz[RGPU_MAX_DIMS], rin[RGPU_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        if (red[d]) {
            rsz[nr] = in->sizes[d]; rin[nr++] = in->strides[d];
            ond += keepdim;
            continue;
        }
        ksz[nk] = in->sizes[d]; kin[nk] = in->strides[d];
        for (int k = 0; k < nout; k++) kout[k][nk] = outs[k] ? outs[k]->strides[ond] : 0;
        nk++;
        ond++;
    }
    rgpu_r2_ctr_init(&pl->keep, nk, ksz);
    rgpu_r2_ctr_add(&pl->keep, kin, (int64_t)rgpu_dtype_size(in->dtype));
    for (int k = 0; k < nout; k++)
        rgpu_r2_ctr_add(&pl->keep, outs[k] ? kout[k] : NULL, outs[k] ? (int64_t)rgpu_dtype_size(outs[k]->dtype) : 0);
    rgpu_r2_ctr_coalesce(&pl->keep);
    rgpu_r2_ctr_init(&pl->red, nr, rsz);
    rgpu_r2_ctr_add(&pl->red, rin, (int64_t)rgpu_dtype_size(in->dtype));
    pl->count = pl->red.total;
    rgpu_r2_ctr_coalesce(&pl->red);
    pl->rn = 1; pl->rs = 0;
    if (pl->red.n > 0) {
        pl->red.n--;
        pl->rn = pl->red.sz[pl->red.n];
        pl->rs = pl->red.st[0][pl->red.n];
    }
}

/* ---------------------------------------------------------------------------
 * Accumulators: one per output element; step functions take one element. */
typedef struct red_acc {
    double f;            /* floating running value */
    uint64_t u;          /* integer running value (int64 bits) */
    int64_t pos;         /* logical index of the next element */
    int64_t idx;         /* arg ops: index of the best so far */
    double mean;         /* var: pass-two centre */
    double p;            /* norm: ord */
} red_acc;

typedef enum red_kind {
    RK_MAX, RK_MIN, RK_SUM, RK_SQDEV, RK_NORM0, RK_NORM1, RK_NORM2, RK_NORMINF, RK_NORMNINF, RK_NORMP,
    RK_ANY, RK_ALL, RK_PROD
} red_kind;

/* max/min with ATen's rules: NaN wins and sticks (first NaN), ties keep the
 * first index. pos 0 always takes the element. */
static inline void step_max_f(red_acc *a, double v)
{
    if (a->pos == 0 || (a->f == a->f && (v != v || v > a->f))) { a->f = v; a->idx = a->pos; }
    a->pos++;
}
static inline void step_min_f(red_acc *a, double v)
{
    if (a->pos == 0 || (a->f == a->f && (v != v || v < a->f))) { a->f = v; a->idx = a->pos; }
    a->pos++;
}
static inline void step_max_i(red_acc *a, uint64_t v)
{
    if (a->pos == 0 || (int64_t)v > (int64_t)a->u) { a->u = v; a->idx = a->pos; }
    a->pos++;
}
static inline void step_min_i(red_acc *a, uint64_t v)
{
    if (a->pos == 0 || (int64_t)v < (int64_t)a->u) { a->u = v; a->idx = a->pos; }
    a->pos++;
}
/* inf-norms: NaN propagates (and sticks) */
static inline void step_absmax(red_acc *a, double v)
{
    v = fabs(v);
    if (a->pos++ == 0 || (a->f == a->f && (v != v || v > a->f))) a->f = v;
}
static inline void step_absmin(red_acc *a, double v)
{
    v = fabs(v);
    if (a->pos++ == 0 || (a->f == a->f && (v != v || v < a->f))) a->f = v;
}

/* The sum over a row of x (RK_SUM), (x - m)^2, |x| or x^2, by lanes. */
static inline double lane_term(red_kind k, double v, double m)
{
    switch (k) {
    case RK_SQDEV: return (v - m) * (v - m);
    case RK_NORM1: return fabs(v);
    case RK_NORM2: return v * v;
    default: return v;
    }
}

static double lane_row(red_kind k, double m, const char *p, int dt, int64_t s, int64_t n)
{
    double t = 0.0;
    if (dt == RGPU_F32 && s == 4) {
        const float *restrict q = (const float *)p;
        switch (k) {   /* one instantiation per kind, so each loop vectorizes */
#define LDF_(i) lane_term(KIND_, (double)q[i], m)
#define KIND_ RK_SQDEV
        case RK_SQDEV: R2_LANE_SUM(n, LDF_, t); break;
#undef KIND_
#define KIND_ RK_NORM1
        case RK_NORM1: R2_LANE_SUM(n, LDF_, t); break;
#undef KIND_
#define KIND_ RK_NORM2
        case RK_NORM2: R2_LANE_SUM(n, LDF_, t); break;
#undef KIND_
#define KIND_ RK_SUM
        default: R2_LANE_SUM(n, LDF_, t); break;
#undef KIND_
#undef LDF_
        }
        return t;
    }
#define LDG_(i) lane_term(k, op_load_f64(p + (i) * s, DT_), m)
    CPU_EACH_DTYPE(dt, R2_LANE_SUM(n, LDG_, t));
#undef LDG_
    return t;
}

/* One row of n elements at p (byte stride s, dtype dt) into a. */
static void red_row(red_kind k, bool fl, red_acc *a, const char *p, int dt, int64_t s, int64_t n)
{
    switch (k) {
    case RK_MAX:
        if (fl) CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) step_max_f(a, op_load_f64(p + i * s, DT_)));
        else CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) step_max_i(a, op_load_u64(p + i * s, DT_)));
        break;
    case RK_MIN:
        if (fl) CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) step_min_f(a, op_load_f64(p + i * s, DT_)));
        else CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) step_min_i(a, op_load_u64(p + i * s, DT_)));
        break;
    case RK_SUM: case RK_SQDEV: case RK_NORM1: case RK_NORM2:
        a->f += lane_row(k, a->mean, p, dt, s, n);
        break;
    case RK_NORM0:
        CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) a->f += op_load_f64(p + i * s, DT_) != 0.0);
        break;
    case RK_NORMINF:
        CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) step_absmax(a, op_load_f64(p + i * s, DT_)));
        break;
    case RK_NORMNINF:
        CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) step_absmin(a, op_load_f64(p + i * s, DT_)));
        break;
    case RK_NORMP: {
        double q = a->p;
        CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) a->f += pow(fabs(op_load_f64(p + i * s, DT_)), q));
        break;
    }
    case RK_ANY:
        CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) a->u |= op_load_bool(p + i * s, DT_));
        break;
    case RK_ALL:
        CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) a->u &= op_load_bool(p + i * s, DT_));
        break;
    case RK_PROD:
        if (fl) CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) a->f *= op_load_f64(p + i * s, DT_));
        else CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) a->u *= op_load_u64(p + i * s, DT_));
        break;
    }
}

/* Elements [lo, hi) (row-major over the reduced dims) of the output whose
 * input starts at base, into a; pl->red is the caller's own copy. */
static void red_range(red_plan *pl, red_kind k, bool fl, red_acc *a, const char *base, int dt, int64_t lo, int64_t hi)
{
    if (lo >= hi) return;
    int64_t col = lo % pl->rn;
    rgpu_r2_ctr_seek(&pl->red, lo / pl->rn);
    while (lo < hi) {
        int64_t m = pl->rn - col < hi - lo ? pl->rn - col : hi - lo;
        red_row(k, fl, a, base + pl->red.off[0] + col * pl->rs, dt, pl->rs, m);
        lo += m;
        col = 0;
        if (lo < hi) r2_ctr_next(&pl->red);
    }
}

/* All elements of the output at keep position: rows of the reduced dims. */
static void red_walk(red_plan *pl, red_kind k, bool fl, red_acc *a, const char *base, int dt)
{
    red_range(pl, k, fl, a, base, dt, 0, pl->count);
}

/* ---------------------------------------------------------------------------
 * amax, amin, var, std, linalg_vector_norm, any, all, prod */

#define RED_CHUNK 32768   /* elements per partial of a chunked reduction */

typedef struct red_job {
    red_plan pl;
    const rgpu_exec *e;
    const op_reduce2_args *ra;
    red_kind k, pass;
    const rgpu_view *in, *out;
    int64_t chunks;       /* per output; 1: not chunked */
    double *part;         /* [output][chunk] */
    double *mean;         /* var pass two: per output */
} red_job;

/* The output value from the accumulated a (k's finishing step). */
static void finish(const red_job *j, red_acc *a, char *o)
{
    int odt = j->out->dtype;
    bool fl = j->ra->fl;
    double n = (double)j->pl.count;
    switch (j->k) {
    case RK_MAX: case RK_MIN: case RK_PROD:
        if (fl) op_store_f64(o, odt, a->f);
        else op_store_u64(o, odt, a->u);
        break;
    case RK_ANY: case RK_ALL:
        op_store_u64(o, odt, a->u);
        break;
    case RK_SUM: {   /* var / std: a->f is the sum of squared deviations */
        double dof = n - j->ra->correction;
        double var = a->f / (dof > 0.0 ? dof : 0.0);
        if (j->pl.count == 0) var = NAN;
        op_store_f64(o, odt, j->e->op == RGPU_OP_STD ? sqrt(var) : var);
        break;
    }
    case RK_NORM0: case RK_NORM1: case RK_NORMINF: case RK_NORMNINF:
        op_store_f64(o, odt, a->f);
        break;
    case RK_NORM2:
        op_store_f64(o, odt, sqrt(a->f));
        break;
    case RK_NORMP:
        op_store_f64(o, odt, pow(a->f, 1.0 / j->ra->ord));
        break;
    case RK_SQDEV:
        break;
    }
}

/* outputs [b, e): each reduced whole */
static void reduce_task(void *vj, int64_t b, int64_t e)
{
    const red_job *j = vj;
    red_plan pl = j->pl;
    rgpu_r2_ctr_seek(&pl.keep, b);
    red_kind k = j->k;
    for (int64_t t = b; t < e; t++, r2_ctr_next(&pl.keep)) {
        const char *base = (const char *)j->in->data + pl.keep.off[0];
        red_acc a;
        memset(&a, 0, sizeof a);
        a.p = j->ra->ord;
        if (k == RK_ALL) a.u = 1;
        if (k == RK_PROD) { a.f = 1.0; a.u = 1; }
        red_walk(&pl, k, j->ra->fl, &a, base, j->in->dtype);
        if (k == RK_SUM) {   /* var / std: two passes in double */
            a.mean = a.f / (double)pl.count;
            a.f = 0.0;
            red_walk(&pl, RK_SQDEV, true, &a, base, j->in->dtype);
        }
        finish(j, &a, (char *)j->out->data + pl.keep.off[1]);
    }
}

/* (output, chunk) pairs [b, e): partial sums of pass j->pass */
static void reduce_part_task(void *vj, int64_t b, int64_t e)
{
    const red_job *j = vj;
    red_plan pl = j->pl;
    for (int64_t t = b; t < e; t++) {
        int64_t o = t / j->chunks, lo = t % j->chunks * RED_CHUNK;
        int64_t hi = lo + RED_CHUNK < pl.count ? lo + RED_CHUNK : pl.count;
        rgpu_r2_ctr_seek(&pl.keep, o);
        red_acc a;
        memset(&a, 0, sizeof a);
        a.p = j->ra->ord;
        if (j->pass == RK_SQDEV) a.mean = j->mean[o];
        red_range(&pl, j->pass, true, &a, (const char *)j->in->data + pl.keep.off[0], j->in->dtype, lo, hi);
        j->part[t] = a.f;
    }
}

static double part_total(const red_job *j, int64_t o)
{
    double s = 0.0;
    for (int64_t c = 0; c < j->chunks; c++) s += j->part[o * j->chunks + c];
    return s;
}

static rgpu_status op_reduce(const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    op_reduce2_args ra;
    FORWARD_IF_ERROR(rgpu_op_reduce2_parse(e, &ra, err, errlen));
    red_kind k = RK_SUM;   /* var / std */
    switch (e->op) {
    case RGPU_OP_AMAX: k = RK_MAX; break;
    case RGPU_OP_AMIN: k = RK_MIN; break;
    case RGPU_OP_ANY:  k = RK_ANY; break;
    case RGPU_OP_ALL:  k = RK_ALL; break;
    case RGPU_OP_PROD: k = RK_PROD; break;
    case RGPU_OP_NORM: k = (red_kind)(RK_NORM0 + ra.norm); break;
    default: break;
    }
    red_job j;
    memset(&j, 0, sizeof j);
    plan_build(&j.pl, in, ra.red, ra.keepdim, &out, 1);
    if (j.pl.keep.total == 0) return RGPU_OK;
    j.e = e;
    j.ra = &ra;
    j.k = k;
    j.in = in;
    j.out = out;
    int64_t count = j.pl.count, outs = j.pl.keep.total;
    bool sumlike = ra.fl && (k == RK_SUM || k == RK_NORM0 || k == RK_NORM1 || k == RK_NORM2 || k == RK_NORMP);
    j.chunks = sumlike && outs < 16 ? rgpu_pool_chunks(count, RED_CHUNK) : 1;
    if (j.chunks <= 1) {
        rgpu_pool_for(outs, rgpu_pool_grain(count), reduce_task, &j);
        return RGPU_OK;
    }
    /* few outputs of many elements: chunk partials, added in chunk order */
    j.part = rgpu_op_alloc(outs * j.chunks, sizeof *j.part);
    if (j.part == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for partial sums", rgpu_op_name(e->op));
    j.mean = rgpu_op_alloc(outs, sizeof *j.mean);
    if (j.mean == NULL) { free(j.part); RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for partial sums", rgpu_op_name(e->op)); }
    j.pass = k;
    rgpu_pool_for(outs * j.chunks, 1, reduce_part_task, &j);
    for (int64_t o = 0; o < outs; o++) j.mean[o] = part_total(&j, o) / (double)count;
    if (k == RK_SUM) {   /* var / std: the second pass around the mean */
        j.pass = RK_SQDEV;
        rgpu_pool_for(outs * j.chunks, 1, reduce_part_task, &j);
    }
    r2_ctr keep = j.pl.keep;
    rgpu_r2_ctr_seek(&keep, 0);
    for (int64_t o = 0; o < outs; o++) {
        red_acc a;
        memset(&a, 0, sizeof a);
        a.f = part_total(&j, o);
        finish(&j, &a, (char *)out->data + keep.off[1]);
        r2_ctr_next(&keep);
    }
    free(j.part);
    free(j.mean);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * argmax, argmin (dim or flattened), max.dim, min.dim */

typedef struct arg_job {
    red_plan pl;
    const rgpu_view *in, *vals, *idxs;
    bool fl;
    red_kind k;
} arg_job;

static void arg_task(void *vj, int64_t b, int64_t e)
{
    const arg_job *j = vj;
    red_plan pl = j->pl;
    rgpu_r2_ctr_seek(&pl.keep, b);
    for (int64_t t = b; t < e; t++, r2_ctr_next(&pl.keep)) {
        red_acc a;
        memset(&a, 0, sizeof a);
        red_walk(&pl, j->k, j->fl, &a, (const char *)j->in->data + pl.keep.off[0], j->in->dtype);
        if (j->vals) {
            char *o = (char *)j->vals->data + pl.keep.off[1];
            if (j->fl) op_store_f64(o, j->vals->dtype, a.f);
            else op_store_u64(o, j->vals->dtype, a.u);
        }
        if (j->idxs) *(int64_t *)((char *)j->idxs->data + pl.keep.off[2]) = a.idx;
    }
}

static rgpu_status op_argreduce(const rgpu_exec *e, char *err, size_t errlen)
{
    bool is_max = e->op == RGPU_OP_ARGMAX || e->op == RGPU_OP_MAX_DIM;
    const rgpu_view *in = e->in[0];
    op_reduce2_args ra;
    FORWARD_IF_ERROR(rgpu_op_argreduce_parse(e, &ra, err, errlen));
    const rgpu_view *vals = ra.outs[0], *idxs = ra.outs[1];
    bool fl = op_dtype_is_float(in->dtype);
    arg_job j = { .in = in, .vals = vals, .idxs = idxs, .fl = fl, .k = is_max ? RK_MAX : RK_MIN };
    plan_build(&j.pl, in, ra.red, ra.keepdim, ra.outs, 2);
    if (j.pl.keep.total == 0) return RGPU_OK;
    rgpu_pool_for(j.pl.keep.total, rgpu_pool_grain(j.pl.count * 2), arg_task, &j);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * cumsum: out[.., i, ..] = sum_{j <= i} in[.., j, ..] along dim; out has in's
 * shape, maybe another dtype. As ATen: in is first cast to out's dtype, then
 * accumulated in acc_type<out, cpu>: double for f32/f64, float for f16/bf16,
 * int64 for integers (wrapping), or for bool. Sequential along the dim, so an
 * in-place run (out aliasing in) reads each element before overwriting it. */

typedef struct cumsum_job {
    r2_ctr c;             /* the lines: operands in, out */
    const rgpu_view *in, *out;
    int64_t n, is, os;    /* line length, byte strides along it */
} cumsum_job;

/* lines [b, e) */
static void cumsum_task(void *vj, int64_t b, int64_t e)
{
    const cumsum_job *j = vj;
    int idt = j->in->dtype, odt = j->out->dtype;
    int64_t n = j->n, is = j->is, os = j->os, oe = (int64_t)rgpu_dtype_size(odt);
    bool ifl = op_dtype_is_float(idt);
    r2_ctr c = j->c;
    rgpu_r2_ctr_seek(&c, b);
    for (int64_t t = b; t < e; t++, r2_ctr_next(&c)) {
        const char *p = (const char *)j->in->data + c.off[0];
        char *o = (char *)j->out->data + c.off[1];
        double accd = 0.0;
        float accf = 0.0f;
        uint64_t accu = 0;
        if (idt == RGPU_F32 && odt == RGPU_F32) {   /* the common case, one typed loop */
            for (int64_t i = 0; i < n; i++) {
                accd += *(const float *)(p + i * is);
                *(float *)(o + i * os) = (float)accd;
            }
            continue;
        }
        for (int64_t i = 0; i < n; i++) {
            _Alignas(16) char v[16];   /* the element cast to out's dtype (any, complex128 included) */
            if (idt == odt) memcpy(v, p + i * is, (size_t)oe);
            else if (ifl) op_store_f64(v, odt, op_load_f64(p + i * is, idt));
            else op_store_u64(v, odt, op_load_u64(p + i * is, idt));
            switch (odt) {
            case RGPU_F32: case RGPU_F64:
                accd += op_load_f64(v, odt);
                op_store_f64(o + i * os, odt, accd);
                break;
            case RGPU_F16: case RGPU_BF16:
                accf += op_load_f32(v, odt);
                op_store_f32(o + i * os, odt, accf);
                break;
            case RGPU_BOOL:
                accu |= op_load_bool(v, odt);
                op_store_u64(o + i * os, odt, accu);
                break;
            default:
                accu += op_load_u64(v, odt);
                op_store_u64(o + i * os, odt, accu);
                break;
            }
        }
    }
}

static rgpu_status op_cumsum(const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    int dim;
    int64_t osz[RGPU_MAX_DIMS];   /* the lines: in's sizes, the scan dim's set to 1 */
    FORWARD_IF_ERROR(rgpu_op_cumsum_check(e, &dim, osz, err, errlen));
    int idt = in->dtype, odt = out->dtype;
    int64_t ie = (int64_t)rgpu_dtype_size(idt), oe = (int64_t)rgpu_dtype_size(odt);
    int64_t n = 1, is = 0, os = 0;
    if (in->ndim > 0) { n = in->sizes[dim]; is = in->strides[dim] * ie; os = out->strides[dim] * oe; }
    r2_ctr c;
    rgpu_r2_ctr_init(&c, in->ndim, osz);
    rgpu_r2_ctr_add(&c, in->strides, ie);
    rgpu_r2_ctr_add(&c, out->strides, oe);
    rgpu_r2_ctr_coalesce(&c);
    if (c.total == 0 || n == 0) return RGPU_OK;
    cumsum_job j = { c, in, out, n, is, os };
    rgpu_pool_for(c.total, rgpu_pool_grain(n * 2), cumsum_task, &j);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * The family */

rgpu_status rgpu_cpu_reduce2_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_AMAX: case RGPU_OP_AMIN: case RGPU_OP_VAR: case RGPU_OP_STD:
    case RGPU_OP_NORM: case RGPU_OP_ANY: case RGPU_OP_ALL: case RGPU_OP_PROD:
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 0, 0, err, errlen));
        return op_reduce(e, err, errlen);
    case RGPU_OP_ARGMAX: case RGPU_OP_ARGMIN:
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 0, 0, err, errlen));
        return op_argreduce(e, err, errlen);
    case RGPU_OP_MAX_DIM: case RGPU_OP_MIN_DIM:   /* either output may be unwanted */
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 0, 3u, err, errlen));
        return op_argreduce(e, err, errlen);
    case RGPU_OP_CUMSUM:
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 0, 0, err, errlen));
        return op_cumsum(e, err, errlen);
    case RGPU_OP_SOFTMAX: case RGPU_OP_LOG_SOFTMAX:
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 0, 0, err, errlen));
        return rgpu_r2_softmax(e, e->op == RGPU_OP_LOG_SOFTMAX, err, errlen);
    case RGPU_OP_SOFTMAX_BACKWARD: case RGPU_OP_LOG_SOFTMAX_BACKWARD:
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 0, 0, err, errlen));
        return rgpu_r2_softmax_backward(e, e->op == RGPU_OP_LOG_SOFTMAX_BACKWARD, err, errlen);
    case RGPU_OP_LAYER_NORM:   /* weight, bias optional; mean, rstd may be unwanted */
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 6u, 6u, err, errlen));
        return rgpu_r2_layer_norm(e, err, errlen);
    case RGPU_OP_LAYER_NORM_BACKWARD:   /* weight, bias optional; each output optional */
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 0x30u, 7u, err, errlen));
        return rgpu_r2_layer_norm_backward(e, err, errlen);
    case RGPU_OP_RMS_NORM:   /* weight optional; rstd may be unwanted */
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 2u, 2u, err, errlen));
        return rgpu_r2_rms_norm(e, err, errlen);
    case RGPU_OP_RMS_NORM_BACKWARD:   /* weight optional; each output optional */
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 8u, 3u, err, errlen));
        return rgpu_r2_rms_norm_backward(e, err, errlen);
    case RGPU_OP_CROSS_ENTROPY:   /* weight optional; total_weight may be unwanted */
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 4u, 2u, err, errlen));
        return rgpu_r2_cross_entropy(e, err, errlen);
    case RGPU_OP_CROSS_ENTROPY_BACKWARD:   /* weight optional */
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 8u, 0, err, errlen));
        return rgpu_r2_cross_entropy_backward(e, err, errlen);
    case RGPU_OP_NLL_LOSS:   /* weight optional; total_weight may be unwanted */
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 4u, 2u, err, errlen));
        return rgpu_r2_nll_loss(e, err, errlen);
    case RGPU_OP_NLL_LOSS_BACKWARD:   /* weight optional */
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 8u, 0, err, errlen));
        return rgpu_r2_nll_loss_backward(e, err, errlen);
    case RGPU_OP_CTC_LOSS: case RGPU_OP_CTC_LOSS_BACKWARD:
        FORWARD_IF_ERROR(rgpu_op_reduce_check_exec(e, 0, 0, err, errlen));
        return e->op == RGPU_OP_CTC_LOSS ? rgpu_r2_ctc_loss(e, err, errlen) : rgpu_r2_ctc_loss_backward(e, err, errlen);
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cpu backend: unsupported op %s", rgpu_op_name(e->op));
    }
}
