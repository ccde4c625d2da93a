/* backend_cuda_none.c — linked instead of replayer/cuda/ when the build had
 * no nvcc: says so, so --backend auto falls back to cpu with a reason. */
#include "backend.h"

#include <stdio.h>

rgpu_backend *rgpu_backend_cuda_create(char *why, size_t whylen) {
    if (why && whylen) snprintf(why, whylen, "this rgpu-server was built without CUDA (no nvcc at build time)");
    return NULL;
}

void rgpu_cuda_device_name(char *out, size_t n) {
    if (out && n) out[0] = 0;
}
