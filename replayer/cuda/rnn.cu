// rnn.cu — the fused LSTM and GRU cells and their backwards on the GPU: one
// thread per (b, j) element of the (B, H) hidden state running op/rnn.h, the
// code the CPU backend runs (cpu/cpu_dense.c): in float (its _f functions)
// when every operand is float32/float16/bfloat16, as ATen's opmath, else in
// double.
#include "dense.cuh"
#include "op/rnn.h"

template <typename T>
static __global__ void rnn_cell_kernel(op_cell a, int op)
{
    long long n = a.B * a.H;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += (long long)gridDim.x * blockDim.x) {
        long long b = k / a.H, j = k - b * a.H;
        if constexpr (sizeof(T) == 4) op_rnn_cell_one_f(op, &a, b, j);
        else op_rnn_cell_one(op, &a, b, j);
    }
}

rgpu_status rgpu_cuda_dense_rnn_cell(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_cell a;
    FORWARD_IF_ERROR(rgpu_op_cell_check(e, &a, err, errlen));
    long long n = a.B * a.H;
    if (n == 0) return RGPU_OK;
    long long nb = (n + 255) / 256;
    if (nb > 4096) nb = 4096;
    if (op_cell_all_float(&a)) rnn_cell_kernel<float><<<(unsigned)nb, 256, 0, c->stream>>>(a, e->op);
    else rnn_cell_kernel<double><<<(unsigned)nb, 256, 0, c->stream>>>(a, e->op);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}
