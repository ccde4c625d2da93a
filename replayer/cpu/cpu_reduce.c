/* cpu_reduce.c — sum.dim_IntList and mean.dim on the CPU, over the thread pool.
 *
 * in is (d0, .., dn-1); dims (INTS, may be negative, empty = all) are reduced;
 * out is the reduced shape (size 1 kept when keepdim, dim removed otherwise),
 * any dtype for sum, floating for mean. Accumulators: double for a floating
 * output, int64 (wrapping) for an integer output, a count of non-zeros for a
 * bool output. Each input element is converted to the accumulator directly.
 * mean = sum / count in double; count 0 -> NaN.
 *
 * The kept (K) and reduced (R) dims are coalesced, then one of two plans runs:
 *   rows:    R's innermost dim is contiguous, or K's is not: every output sums
 *            its reduced elements (row-major over R) in chunks of SUM_CHUNK
 *            elements, each chunk by rows with R2_LANES lane accumulators;
 *            an output of several chunks combines their partials in chunk
 *            order on the calling thread (a full reduction is one output).
 *   columns: K's innermost dim is contiguous and R's is not (a bias gradient:
 *            sum over dim 0 of (B*T, C)): whole input rows are added into a
 *            vector of accumulators, one per output column, in blocks of
 *            SUM_COLS columns; when the columns alone give little parallel
 *            work the reduced rows are cut into fixed blocks whose partial
 *            vectors are combined in block order.
 * Every split depends on the shape only, so results are the same bitwise at
 * any thread count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "cpu_pool.h"
#include "cpu_vmath.h"
#include "cpu_reduce2_util.h"
#include "op/reduce.h"

#define SUM_CHUNK 32768   /* reduced elements per partial (rows plan) */
#define SUM_COLS 512      /* accumulator columns per task (columns plan) */
#define SUM_MAX_BLOCKS 64 /* reduced-row blocks per column block, at most */

/* ---------------------------------------------------------------------------
 * One row segment: n elements at p (byte stride s, dtype dt). */

static double seg_sum_f64(const char *p, int dt, int64_t s, int64_t n)
{
    double t = 0.0;
    if (dt == RGPU_F32 && s == 4) {
        t = rgpu_vm_sum_f32((const float *)p, n);
    } else if (dt == RGPU_F64 && s == 8) {
        t = rgpu_vm_sum_f64((const double *)p, n);
    } else {
#define LDG_(i) op_load_f64(p + (i) * s, DT_)
        CPU_EACH_DTYPE(dt, R2_LANE_SUM(n, LDG_, t));
#undef LDG_
    }
    return t;
}

/* Integer sums wrap, so their order does not matter. */
static uint64_t seg_sum_u64(const char *p, int dt, int64_t s, int64_t n, bool as_bool)
{
    uint64_t acc = 0;
    if (as_bool) CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) acc += op_load_bool(p + i * s, DT_));
    else CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) acc += op_load_u64(p + i * s, DT_));
    return acc;
}

/* ---------------------------------------------------------------------------
 * The plan */

typedef struct sum_job {
    r2_ctr keep;          /* operands: 0 in, 1 out (bytes) */
    r2_ctr red;           /* rows plan: R without its innermost dim; columns plan: all of R */
    int64_t rn, rs;       /* rows plan: innermost reduced row, elements and byte stride */
    int64_t count;        /* reduced elements per output */
    int64_t chunks;       /* rows plan: chunks per output */
    int64_t cols, os;     /* columns plan: K's innermost size, out's byte stride along it */
    int64_t cblocks, rblock, rblocks;   /* columns plan: column blocks, rows per block, blocks */
    const char *ib;
    char *ob;
    int idt, odt;
    bool facc, as_bool, mean;
    double *part;         /* partials (double or uint64 bits) */
    uint64_t *upart;
} sum_job;

static void store_out(const sum_job *j, char *o, double accf, uint64_t acci)
{
    if (j->mean) op_store_f64(o, j->odt, j->count > 0 ? accf / (double)j->count : (double)NAN);
    else if (j->facc) op_store_f64(o, j->odt, accf);
    else op_store_u64(o, j->odt, acci);
}

/* Rows plan: the sum of reduced elements [lo, hi) of the output whose input
 * starts at in_off, segment by segment in row-major order. */
static void chunk_sum(const sum_job *j, int64_t in_off, int64_t lo, int64_t hi, double *accf, uint64_t *acci)
{
    r2_ctr red = j->red;
    int64_t row = lo / j->rn, col = lo % j->rn;
    rgpu_r2_ctr_seek(&red, row);
    double f = 0.0;
    uint64_t u = 0;
    while (lo < hi) {
        int64_t m = j->rn - col;
        if (m > hi - lo) m = hi - lo;
        const char *p = j->ib + in_off + red.off[0] + col * j->rs;
        if (j->facc) f += seg_sum_f64(p, j->idt, j->rs, m);
        else u += seg_sum_u64(p, j->idt, j->rs, m, j->as_bool);
        lo += m;
        col = 0;
        if (lo < hi) r2_ctr_next(&red);
    }
    *accf = f;
    *acci = u;
}

/* items are outputs (chunks == 1): each one summed and stored */
static void rows_task(void *vj, int64_t b, int64_t e)
{
    const sum_job *j = vj;
    r2_ctr keep = j->keep;
    rgpu_r2_ctr_seek(&keep, b);
    for (int64_t t = b; t < e; t++) {
        double f = 0.0;
        uint64_t u = 0;
        if (j->count > 0) chunk_sum(j, keep.off[0], 0, j->count, &f, &u);
        store_out(j, j->ob + keep.off[1], f, u);
        r2_ctr_next(&keep);
    }
}

/* items are (output, chunk) pairs: partials */
static void rows_part_task(void *vj, int64_t b, int64_t e)
{
    const sum_job *j = vj;
    for (int64_t t = b; t < e; t++) {
        r2_ctr keep = j->keep;
        rgpu_r2_ctr_seek(&keep, t / j->chunks);
        int64_t lo = t % j->chunks * SUM_CHUNK, hi = lo + SUM_CHUNK < j->count ? lo + SUM_CHUNK : j->count;
        double f;
        uint64_t u;
        chunk_sum(j, keep.off[0], lo, hi, &f, &u);
        if (j->facc) j->part[t] = f;
        else j->upart[t] = u;
    }
}

/* Columns plan: items are (outer output, column block, row block) triples. */
static void cols_task(void *vj, int64_t b, int64_t e)
{
    const sum_job *j = vj;
    double acc[SUM_COLS];
    for (int64_t t = b; t < e; t++) {
        int64_t rb = t % j->rblocks, cb = t / j->rblocks % j->cblocks, ko = t / j->rblocks / j->cblocks;
        int64_t c0 = cb * SUM_COLS, w = j->cols - c0 < SUM_COLS ? j->cols - c0 : SUM_COLS;
        int64_t r0 = rb * j->rblock, r1 = r0 + j->rblock < j->count ? r0 + j->rblock : j->count;
        r2_ctr keep = j->keep, red = j->red;
        rgpu_r2_ctr_seek(&keep, ko);
        rgpu_r2_ctr_seek(&red, r0);
        for (int64_t c = 0; c < w; c++) acc[c] = 0.0;
        const char *base = j->ib + keep.off[0] + c0 * (int64_t)rgpu_dtype_size(j->idt);
        for (int64_t r = r0; r < r1; r++) {
            const char *p = base + red.off[0];
            if (j->idt == RGPU_F32) rgpu_vm_acc_f32(acc, (const float *)p, w);   /* f32 and f64 only */
            else rgpu_vm_acc_f64(acc, (const double *)p, w);
            r2_ctr_next(&red);
        }
        if (j->rblocks == 1) {
            char *o = j->ob + keep.off[1] + c0 * j->os;
            for (int64_t c = 0; c < w; c++) store_out(j, o + c * j->os, acc[c], 0);
        } else {
            double *dst = j->part + (ko * j->rblocks + rb) * j->cols + c0;
            for (int64_t c = 0; c < w; c++) dst[c] = acc[c];
        }
    }
}

rgpu_status rgpu_cpu_reduce_sum_mean(const rgpu_exec *e, bool mean, char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    op_reduce2_args ra;
    FORWARD_IF_ERROR(rgpu_op_sum_mean_parse(e, mean, &ra, err, errlen));
    int nd = in->ndim;

    /* expected out shape, and the kept (K) / reduced (R) dims with byte strides */
    int ond = 0, nk = 0, nr = 0;
    int64_t ksz[RGPU_MAX_DIMS], kin[RGPU_MAX_DIMS], kout[RGPU_MAX_DIMS];
    int64_t rsz[RGPU_MAX_DIMS], rin[RGPU_MAX_DIMS];
    int64_t iesz = (int64_t)rgpu_dtype_size(in->dtype), oesz = (int64_t)rgpu_dtype_size(out->dtype);
    int64_t count = 1, outer = 1;
    for (int d = 0; d < nd; d++) {
        int64_t want = ra.red[d] ? 1 : in->sizes[d];
        if (ra.red[d] && !ra.keepdim) {
            rsz[nr] = in->sizes[d]; rin[nr++] = in->strides[d] * iesz;
            count *= in->sizes[d];
            continue;
        }
        if (ond >= out->ndim || out->sizes[ond] != want)
            break;   /* reported below */
        if (ra.red[d]) {
            rsz[nr] = in->sizes[d]; rin[nr++] = in->strides[d] * iesz;
            count *= in->sizes[d];
        } else {
            ksz[nk] = in->sizes[d]; kin[nk] = in->strides[d] * iesz; kout[nk++] = out->strides[ond] * oesz;
            outer *= in->sizes[d];
        }
        ond++;
    }
    int want_nd = 0;
    for (int d = 0; d < nd; d++) want_nd += (!ra.red[d] || ra.keepdim);
    if (ond != want_nd || out->ndim != want_nd)
        return rgpu_op_reduce_bad_out(rgpu_op_name(e->op), in, out, ra.red, ra.keepdim, err, errlen);
    if (outer == 0) return RGPU_OK;

    sum_job j;
    memset(&j, 0, sizeof j);
    j.ib = in->data;
    j.ob = out->data;
    j.idt = in->dtype;
    j.odt = out->dtype;
    j.facc = op_dtype_is_float(j.odt);
    j.as_bool = j.odt == RGPU_BOOL;
    j.mean = mean;
    j.count = count;
    rgpu_r2_ctr_init(&j.keep, nk, ksz);
    rgpu_r2_ctr_add(&j.keep, kin, 1);
    rgpu_r2_ctr_add(&j.keep, kout, 1);
    rgpu_r2_ctr_coalesce(&j.keep);
    rgpu_r2_ctr_init(&j.red, nr, rsz);
    rgpu_r2_ctr_add(&j.red, rin, 1);
    rgpu_r2_ctr_coalesce(&j.red);
    if (count == 0) {   /* zeros, or NaN for mean */
        rgpu_r2_ctr_seek(&j.keep, 0);
        do store_out(&j, j.ob + j.keep.off[1], 0.0, 0); while (r2_ctr_next(&j.keep));
        return RGPU_OK;
    }

    bool red_inner_contig = j.red.n > 0 && j.red.st[0][j.red.n - 1] == iesz;
    bool keep_inner_contig = j.keep.n > 0 && j.keep.st[0][j.keep.n - 1] == iesz && j.keep.sz[j.keep.n - 1] > 1;
    bool typed = j.idt == RGPU_F32 || j.idt == RGPU_F64;
    if (j.facc && typed && keep_inner_contig && !red_inner_contig && j.red.n > 0) {
        /* columns plan: K's innermost dim becomes the accumulator vector */
        j.keep.n--;
        j.cols = j.keep.sz[j.keep.n];
        j.os = j.keep.st[1][j.keep.n];
        j.keep.total /= j.cols;
        j.cblocks = (j.cols + SUM_COLS - 1) / SUM_COLS;
        int64_t width = j.cols < SUM_COLS ? j.cols : SUM_COLS;
        j.rblock = count;
        j.rblocks = 1;
        if (j.keep.total * j.cblocks < 16) {   /* few column tasks: cut the rows too */
            int64_t rb = rgpu_pool_grain(width);
            int64_t minrb = (count + SUM_MAX_BLOCKS - 1) / SUM_MAX_BLOCKS;
            j.rblock = rb > minrb ? rb : minrb;
            j.rblocks = (count + j.rblock - 1) / j.rblock;
        }
        int64_t items = j.keep.total * j.cblocks * j.rblocks;
        if (j.rblocks > 1) {
            j.part = rgpu_op_alloc(j.keep.total * j.rblocks * j.cols, sizeof *j.part);
            if (j.part == NULL)
                RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lld partial sums", rgpu_op_name(e->op),
                             (long long)(j.keep.total * j.rblocks * j.cols));
        }
        int64_t per_item = (j.rblock < count ? j.rblock : count) * width;
        rgpu_pool_for(items, rgpu_pool_grain(per_item), cols_task, &j);
        if (j.rblocks > 1) {
            r2_ctr keep = j.keep;
            rgpu_r2_ctr_seek(&keep, 0);
            for (int64_t ko = 0; ko < j.keep.total; ko++) {
                const double *p = j.part + ko * j.rblocks * j.cols;
                char *o = j.ob + keep.off[1];
                for (int64_t c = 0; c < j.cols; c++) {
                    double s = 0.0;
                    for (int64_t rb = 0; rb < j.rblocks; rb++) s += p[rb * j.cols + c];
                    store_out(&j, o + c * j.os, s, 0);
                }
                r2_ctr_next(&keep);
            }
            free(j.part);
        }
        return RGPU_OK;
    }

    /* rows plan */
    j.rn = 1;
    j.rs = 0;
    if (j.red.n > 0) {
        j.red.n--;
        j.rn = j.red.sz[j.red.n];
        j.rs = j.red.st[0][j.red.n];
        j.red.total /= j.rn;
    }
    j.chunks = rgpu_pool_chunks(count, SUM_CHUNK);
    if (j.chunks == 1) {
        rgpu_pool_for(outer, rgpu_pool_grain(count), rows_task, &j);
        return RGPU_OK;
    }
    int64_t items = outer * j.chunks;
    void *part = rgpu_op_alloc(items, sizeof(double));
    if (part == NULL)
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lld partial sums", rgpu_op_name(e->op), (long long)items);
    j.part = part;
    j.upart = part;
    rgpu_pool_for(items, 1, rows_part_task, &j);
    r2_ctr keep = j.keep;
    rgpu_r2_ctr_seek(&keep, 0);
    for (int64_t o = 0; o < outer; o++) {
        double f = 0.0;
        uint64_t u = 0;
        for (int64_t c = 0; c < j.chunks; c++) {
            if (j.facc) f += j.part[o * j.chunks + c];
            else u += j.upart[o * j.chunks + c];
        }
        store_out(&j, j.ob + keep.off[1], f, u);
        r2_ctr_next(&keep);
    }
    free(part);
    return RGPU_OK;
}
