/* op/fft_check.c — the fft family's record checks (op/fft.h), shared by both
 * backends: dtypes, dims, output sizes, the normalization's factor. */
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
