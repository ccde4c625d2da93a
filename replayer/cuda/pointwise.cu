// pointwise.cu — (being written)
#include "common.cuh"

extern "C" bool rgpu_cuda_pointwise_owns(int op) { (void)op; return false; }
extern "C" rgpu_status rgpu_cuda_pointwise_exec(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen) {
    (void)c;
    snprintf(err, errlen, "the cuda backend has no kernel for %s yet", rgpu_op_name(e->op));
    return RGPU_ERR_UNSUPPORTED;
}
