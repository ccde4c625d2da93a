/* cpu_reduce.c — sum.dim_IntList and mean.dim on the CPU.
 *
 * in is (d0, .., dn-1); dims (INTS, may be negative, empty = all) are reduced;
 * out is the reduced shape (size 1 kept when keepdim, dim removed otherwise),
 * any dtype for sum, floating for mean. Accumulation is sequential in a fixed
 * order (row-major over the reduced dims), so results are deterministic:
 * double for a floating output, int64 (wrapping) for an integer output, a
 * count of non-zeros for a bool output. Each input element is converted to
 * the accumulator directly. mean = sum / count in double; count 0 -> NaN. */
#include <math.h>
#include <stdio.h>

#include "cpu_internal.h"
#include "op/reduce.h"

/* acc += the n elements at p (byte stride s, dtype dt), in order. */
static double sum_row_f64(double acc, const char *p, int dt, int64_t s, int64_t n)
{
    CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) acc += op_load_f64(p + i * s, DT_));
    return acc;
}

static uint64_t sum_row_u64(uint64_t acc, const char *p, int dt, int64_t s, int64_t n, bool as_bool)
{
    if (as_bool) CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) acc += op_load_bool(p + i * s, DT_));
    else CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) acc += op_load_u64(p + i * s, DT_));
    return acc;
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
    if (nr == 0) { rsz[0] = 1; rin[0] = 0; nr = 1; }
    if (nk == 0) { ksz[0] = 1; kin[0] = 0; kout[0] = 0; nk = 1; }

    int odt = out->dtype, idt = in->dtype;
    bool facc = op_dtype_is_float(odt);
    int64_t kidx[RGPU_MAX_DIMS] = {0}, ridx[RGPU_MAX_DIMS];
    int64_t in_off = 0, out_off = 0;
    const char *ib = in->data;
    char *ob = out->data;
    for (;;) {
        /* one output element: walk the reduced dims, innermost as a row */
        double accf = 0.0;
        uint64_t acci = 0;
        if (count > 0) {
            int64_t roff = 0;
            for (int d = 0; d < nr; d++) ridx[d] = 0;
            for (;;) {
                const char *p = ib + in_off + roff;
                if (facc) accf = sum_row_f64(accf, p, idt, rin[nr - 1], rsz[nr - 1]);
                else acci = sum_row_u64(acci, p, idt, rin[nr - 1], rsz[nr - 1], odt == RGPU_BOOL);
                int d = nr - 2;
                for (; d >= 0; d--) {
                    if (++ridx[d] < rsz[d]) { roff += rin[d]; break; }
                    roff -= rin[d] * (rsz[d] - 1);
                    ridx[d] = 0;
                }
                if (d < 0) break;
            }
        }
        char *o = ob + out_off;
        if (mean) op_store_f64(o, odt, count > 0 ? accf / (double)count : (double)NAN);
        else if (facc) op_store_f64(o, odt, accf);
        else op_store_u64(o, odt, acci);

        int d = nk - 1;
        for (; d >= 0; d--) {
            if (++kidx[d] < ksz[d]) { in_off += kin[d]; out_off += kout[d]; break; }
            in_off -= kin[d] * (ksz[d] - 1);
            out_off -= kout[d] * (ksz[d] - 1);
            kidx[d] = 0;
        }
        if (d < 0) break;
    }
    return RGPU_OK;
}
