/* cpu_fft.c — the fft family on the CPU: _fft_c2c, _fft_r2c, _fft_c2r,
 * checked by op/fft_check.c, run on host memory with op/fft_plan.c's 1-d
 * plans (double, mixed radix and Bluestein), the same plans cudaemu's cuFFT
 * reference runs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_families.h"
#include "op/check.h"
#include "op/dtype.h"
#include "op/error.h"
#include "op/fft.h"
#include "op/index.h"

static const char *op_nm(const rgpu_exec *e) { return rgpu_op_name(e->op); }

/* ------------------------------------------------------------ host runner */

/* Element offset of row-major index i of v. */
static int64_t view_off(const rgpu_view *v, int64_t i)
{
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        off += (i % v->sizes[d]) * v->strides[d];
        i /= v->sizes[d];
    }
    return off;
}

/* Transforms every line along dim d of w (contiguous, complex, shape sh[nd])
 * with plan p; line: scratch of sh[d] complex. */
static void lines(double *w, const int64_t *sh, int nd, int d, rgpu_fft_plan *p, double *line)
{
    int64_t len = sh[d], inner = 1, outer = 1;
    for (int k = d + 1; k < nd; k++) inner *= sh[k];
    for (int k = 0; k < d; k++) outer *= sh[k];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double *base = w + 2 * (o * len * inner + i);
            for (int64_t j = 0; j < len; j++) {
                line[2 * j] = base[2 * j * inner];
                line[2 * j + 1] = base[2 * j * inner + 1];
            }
            rgpu_fft_exec(p, line);
            for (int64_t j = 0; j < len; j++) {
                base[2 * j * inner] = line[2 * j];
                base[2 * j * inner + 1] = line[2 * j + 1];
            }
        }
}

/* c2c along dims[0..nd) of w in order. */
static rgpu_status transform(const rgpu_exec *e, double *w, const int64_t *sh, int ndim, const int *dims, int nd,
                             int sign, char *err, size_t errlen)
{
    for (int i = 0; i < nd; i++) {
        int64_t len = sh[dims[i]];
        if (len <= 1) continue;
        rgpu_fft_plan *p = rgpu_fft_plan_new(len, sign);
        double *line = rgpu_op_alloc(len, 2 * sizeof(double));
        if (p == NULL || line == NULL) {
            rgpu_fft_plan_free(p);
            free(line);
            RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for a size-%lld plan", op_nm(e), (long long)len);
        }
        lines(w, sh, ndim, dims[i], p, line);
        rgpu_fft_plan_free(p);
        free(line);
    }
    return RGPU_OK;
}

/* Runs a checked record on host memory: the input packed into a contiguous
 * complex double buffer, c2c along each dim with op/fft_plan.c's 1-d plans. */
static rgpu_status fft_host(const rgpu_exec *e, const rgpu_fft_args *a, char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    int nd = in->ndim;
    if (rgpu_op_numel(out) == 0) return RGPU_OK;
    /* w's shape: the input's (c2c, r2c), the onesided input (c2r) */
    int64_t sh[RGPU_MAX_DIMS];
    for (int d = 0; d < nd; d++) sh[d] = in->sizes[d];
    int last = a->ndim ? a->dims[a->ndim - 1] : -1;
    int64_t L = 0, h = 0;
    if (e->op == RGPU_OP_FFT_C2R) {
        L = a->last_dim_size;
        h = L / 2 + 1;
        sh[last] = h;
    }
    int64_t nw = 1;
    for (int d = 0; d < nd; d++) nw *= sh[d];
    double *w = rgpu_op_alloc(nw, 2 * sizeof(double));
    RETURN_ERROR_IF(w == NULL, RGPU_ERR_NOMEM, "%s: out of memory for %lld elements", op_nm(e), (long long)nw);
    size_t ies = rgpu_dtype_size(in->dtype), oes = rgpu_dtype_size(out->dtype);
    /* load (c2r: zeros past the input's end along the last dim) */
    int64_t idx[RGPU_MAX_DIMS] = {0};
    for (int64_t i = 0; i < nw; i++) {
        int64_t off = 0;
        bool pad = false;
        for (int d = 0; d < nd; d++) {
            if (idx[d] >= in->sizes[d]) pad = true;
            off += idx[d] * in->strides[d];
        }
        if (pad) w[2 * i] = w[2 * i + 1] = 0;
        else op_load_c128((const char *)in->data + off * (int64_t)ies, in->dtype, &w[2 * i], &w[2 * i + 1]);
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < sh[d]) break;
            idx[d] = 0;
        }
    }
    rgpu_status st = RGPU_OK;
    if (e->op == RGPU_OP_FFT_C2C || e->op == RGPU_OP_FFT_R2C) {
        st = transform(e, w, sh, nd, a->dims, a->ndim, a->forward ? -1 : 1, err, errlen);
        if (st == RGPU_OK) {
            int64_t no = rgpu_op_numel(out);
            int64_t oi[RGPU_MAX_DIMS] = {0};
            for (int64_t i = 0; i < no; i++) {
                int64_t wi = 0;
                for (int d = 0; d < nd; d++) wi = wi * sh[d] + oi[d];
                op_store_c128((char *)out->data + view_off(out, i) * (int64_t)oes, out->dtype, w[2 * wi] * a->scale,
                              w[2 * wi + 1] * a->scale);
                for (int d = nd - 1; d >= 0; d--) {
                    if (++oi[d] < out->sizes[d]) break;
                    oi[d] = 0;
                }
            }
        }
        free(w);
        return st;
    }
    /* c2r: backward c2c over all but the last dim, then per line along the
     * last: the Hermitian extension (DC's and Nyquist's imaginary parts
     * dropped), a backward c2c, its real part. */
    st = transform(e, w, sh, nd, a->dims, a->ndim - 1, 1, err, errlen);
    rgpu_fft_plan *p = st == RGPU_OK ? rgpu_fft_plan_new(L, 1) : NULL;
    double *line = rgpu_op_alloc(L, 2 * sizeof(double));
    if (st == RGPU_OK && (p == NULL || line == NULL)) {
        rgpu_op_errf(err, errlen, "%s: out of memory for a size-%lld plan", op_nm(e), (long long)L);
        st = RGPU_ERR_NOMEM;
    }
    if (st == RGPU_OK) {
        int64_t inner = 1, outer = 1;
        for (int k = last + 1; k < nd; k++) inner *= sh[k];
        for (int k = 0; k < last; k++) outer *= sh[k];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                const double *base = w + 2 * (o * h * inner + i);
                for (int64_t k = 0; k < h; k++) {
                    line[2 * k] = base[2 * k * inner];
                    line[2 * k + 1] = (k == 0 || 2 * k == L) ? 0.0 : base[2 * k * inner + 1];
                }
                for (int64_t k = h; k < L; k++) {
                    line[2 * k] = line[2 * (L - k)];
                    line[2 * k + 1] = -line[2 * (L - k) + 1];
                }
                rgpu_fft_exec(p, line);
                /* out's element at (o, k, i) over out's dims split at last */
                for (int64_t k = 0; k < L; k++) {
                    int64_t li = (o * L + k) * inner + i;
                    op_store_f64((char *)out->data + view_off(out, li) * (int64_t)oes, out->dtype,
                                 line[2 * k] * a->scale);
                }
            }
    }
    rgpu_fft_plan_free(p);
    free(line);
    free(w);
    return st;
}

/* ------------------------------------------------------------ dispatch */

rgpu_status rgpu_cpu_fft_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_FFT_C2C: case RGPU_OP_FFT_R2C: case RGPU_OP_FFT_C2R: {
        rgpu_fft_args a;
        FORWARD_IF_ERROR(rgpu_op_fft_check(e, &a, err, errlen));
        return fft_host(e, &a, err, errlen);
    }
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cpu backend: unsupported op %s", rgpu_op_name(e->op));
    }
}
