/* cpu_fft.c — the fft family on the CPU: _fft_c2c, _fft_r2c, _fft_c2r run
 * op/fft.c's host FFT (double, mixed radix and Bluestein), the same code
 * cudaemu's cuFFT reference runs. */
#include "cpu_families.h"
#include "op/error.h"
#include "op/fft.h"

rgpu_status rgpu_cpu_fft_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_FFT_C2C: case RGPU_OP_FFT_R2C: case RGPU_OP_FFT_C2R: {
        rgpu_fft_args a;
        FORWARD_IF_ERROR(rgpu_op_fft_check(e, &a, err, errlen));
        return rgpu_op_fft_host(e, &a, err, errlen);
    }
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cpu backend: unsupported op %s", rgpu_op_name(e->op));
    }
}
