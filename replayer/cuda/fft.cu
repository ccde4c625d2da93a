// fft.cu — placeholder
#include "common.cuh"
#include "op/fft.h"
extern "C" rgpu_status rgpu_cuda_fft_exec(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen) {
    (void)c;
    RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cuda backend: %s needs cuFFT", rgpu_op_name(e->op));
}
