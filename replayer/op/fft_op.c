/* op/fft_op.c — the fft family's checks and its host runner (op/fft.h),
 * on op/fft.c's 1-d plans. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "fft.h"
#include "index.h"

/* ------------------------------------------------------------ checks */

static const char *op_nm(const rgpu_exec *e) { return rgpu_op_name(e->op); }

rgpu_status rgpu_op_fft_check(const rgpu_exec *e, rgpu_fft_args *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "r", "r", err, errlen));
    const rgpu_view *in = e->in[0], *out = e->out[0];
    RETURN_ERROR_IF(e->n_args != 3 || e->args[0].kind != RGPU_ARG_INTS, RGPU_ERR_BAD_ARG,
                    "%s: want args (dim, normalization, %s)", op_nm(e),
                    e->op == RGPU_OP_FFT_C2R ? "last_dim_size" : e->op == RGPU_OP_FFT_R2C ? "onesided" : "forward");
    int64_t norm, third;
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 1, "normalization", &norm, err, errlen));
    if (e->op == RGPU_OP_FFT_C2R) {
        FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 2, "last_dim_size", &third, err, errlen));
    } else {
        bool b;
        FORWARD_IF_ERROR(rgpu_op_index_arg_bool(e, 2, e->op == RGPU_OP_FFT_R2C ? "onesided" : "forward", &b,
                                                err, errlen));
        third = b;
    }
    RETURN_ERROR_IF(norm < 0 || norm > 2, RGPU_ERR_BAD_ARG, "%s: normalization %lld, want 0, 1 or 2", op_nm(e),
                    (long long)norm);
    a->norm = (int)norm;
    uint32_t nd = e->args[0].v.ints.n;
    RETURN_ERROR_IF(nd > (uint32_t)in->ndim || nd > RGPU_MAX_DIMS, RGPU_ERR_BAD_ARG,
                    "%s: %u dims for a %d-d input", op_nm(e), nd, in->ndim);
    RETURN_ERROR_IF(nd == 0 && e->op != RGPU_OP_FFT_C2C, RGPU_ERR_BAD_ARG, "%s: no dim to transform", op_nm(e));
    bool seen[RGPU_MAX_DIMS] = {false};
    for (uint32_t i = 0; i < nd; i++) {
        int64_t d = rgpu_arg_int_at(&e->args[0], i);
        int w;
        FORWARD_IF_ERROR(rgpu_op_index_wrap_dim(e, d, in->ndim, &w, err, errlen));
        RETURN_ERROR_IF(seen[w], RGPU_ERR_BAD_ARG, "%s: dim %d given twice", op_nm(e), w);
        seen[w] = true;
        a->dims[i] = w;
    }
    a->ndim = (int)nd;
    int idt = in->dtype, odt = out->dtype;
    int64_t want[RGPU_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++) want[d] = in->sizes[d];
    int last = nd ? a->dims[nd - 1] : -1;
    switch (e->op) {
    case RGPU_OP_FFT_C2C:
        RETURN_ERROR_IF(idt != RGPU_C64 && idt != RGPU_C128, RGPU_ERR_UNSUPPORTED,
                        "%s: input dtype %s, want complex64 or complex128", op_nm(e), rgpu_dtype_name(idt));
        RETURN_ERROR_IF(odt != idt, RGPU_ERR_BAD_ARG, "%s: output dtype %s, want %s", op_nm(e),
                        rgpu_dtype_name(odt), rgpu_dtype_name(idt));
        a->forward = third != 0;
        break;
    case RGPU_OP_FFT_R2C:
        RETURN_ERROR_IF(idt != RGPU_F32 && idt != RGPU_F64, RGPU_ERR_UNSUPPORTED,
                        "%s: input dtype %s, want float32 or float64", op_nm(e), rgpu_dtype_name(idt));
        RETURN_ERROR_IF(odt != (idt == RGPU_F32 ? RGPU_C64 : RGPU_C128), RGPU_ERR_BAD_ARG,
                        "%s: output dtype %s, want %s", op_nm(e), rgpu_dtype_name(odt),
                        idt == RGPU_F32 ? "complex64" : "complex128");
        a->forward = true;
        a->onesided = third != 0;
        if (a->onesided) want[last] = in->sizes[last] / 2 + 1;
        break;
    default: /* C2R */
        RETURN_ERROR_IF(idt != RGPU_C64 && idt != RGPU_C128, RGPU_ERR_UNSUPPORTED,
                        "%s: input dtype %s, want complex64 or complex128", op_nm(e), rgpu_dtype_name(idt));
        RETURN_ERROR_IF(odt != (idt == RGPU_C64 ? RGPU_F32 : RGPU_F64), RGPU_ERR_BAD_ARG,
                        "%s: output dtype %s, want %s", op_nm(e), rgpu_dtype_name(odt),
                        idt == RGPU_C64 ? "float32" : "float64");
        RETURN_ERROR_IF(third < 1, RGPU_ERR_BAD_ARG, "%s: last_dim_size %lld, want at least 1", op_nm(e),
                        (long long)third);
        /* ATen's CPU kernel asserts this (pocketfft reads the first L//2+1) */
        RETURN_ERROR_IF(in->sizes[last] != third / 2 + 1 && in->sizes[last] != third, RGPU_ERR_SHAPE,
                        "%s: input has %lld elements along dim %d, want last_dim_size//2+1 = %lld (or %lld)",
                        op_nm(e), (long long)in->sizes[last], last, (long long)(third / 2 + 1), (long long)third);
        a->onesided = true;
        a->last_dim_size = third;
        want[last] = third;
        break;
    }
    FORWARD_IF_ERROR(rgpu_op_index_check_out_shape(e, out, in->ndim, want, err, errlen));
    double prod = 1;
    for (int i = 0; i < a->ndim; i++) {
        a->n[i] = e->op == RGPU_OP_FFT_C2R ? out->sizes[a->dims[i]] : in->sizes[a->dims[i]];
        prod *= (double)a->n[i];
    }
    a->scale = a->norm == 0 || prod == 0 ? 1.0 : a->norm == 1 ? 1.0 / sqrt(prod) : 1.0 / prod;
    return RGPU_OK;
}

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

rgpu_status rgpu_op_fft_host(const rgpu_exec *e, const rgpu_fft_args *a, char *err, size_t errlen)
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
