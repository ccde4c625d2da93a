// fill.cu — FULL (fill_) over any strided output, every dtype.
// kernel -> launcher (takes the stream) -> entry point.
#include "common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

template <typename T>
__global__ void fill_kernel(rgpu_cuda_view out, long long numel, T value) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= numel) return;
    ((T *)out.data)[rgpu_cuda_offset(out, i)] = value;
}

template <typename T>
static rgpu_status launch_fill(cudaStream_t st, const rgpu_view *o, T value, char *err, size_t errlen) {
    long long numel = 1;
    for (int d = 0; d < o->ndim; d++) numel *= o->sizes[d];
    if (numel == 0) return RGPU_OK;
    int threads = 256;
    long long blocks = (numel + threads - 1) / threads;
    fill_kernel<T><<<(unsigned)blocks, threads, 0, st>>>(rgpu_cuda_view_of(o), numel, value);
    RGPU_CUDA_TRY(cudaGetLastError(), err, errlen);
    return RGPU_OK;
}

extern "C" rgpu_status rgpu_cuda_fill(cudaStream_t st, const rgpu_exec *e, char *err, size_t errlen) {
    if (e->n_out != 1 || e->n_args != 1) return RGPU_ERR_ARITY;
    const rgpu_arg *a = &e->args[0];
    if (a->kind != RGPU_ARG_INT && a->kind != RGPU_ARG_FLOAT && a->kind != RGPU_ARG_BOOL) return RGPU_ERR_BAD_ARG;
    double v = rgpu_arg_as_f64(a);
    long long iv = a->kind == RGPU_ARG_FLOAT ? (long long)v : (long long)rgpu_arg_as_i64(a);
    const rgpu_view *o = e->out[0];
    switch (o->dtype) {
    case RGPU_F32: return launch_fill<float>(st, o, (float)v, err, errlen);
    case RGPU_F64: return launch_fill<double>(st, o, v, err, errlen);
    case RGPU_F16: return launch_fill<__half>(st, o, __float2half_rn((float)v), err, errlen);
    case RGPU_BF16: return launch_fill<__nv_bfloat16>(st, o, __float2bfloat16_rn((float)v), err, errlen);
    case RGPU_I64: return launch_fill<int64_t>(st, o, (int64_t)iv, err, errlen);
    case RGPU_I32: return launch_fill<int32_t>(st, o, (int32_t)iv, err, errlen);
    case RGPU_I16: return launch_fill<int16_t>(st, o, (int16_t)iv, err, errlen);
    case RGPU_I8: return launch_fill<int8_t>(st, o, (int8_t)iv, err, errlen);
    case RGPU_U8: return launch_fill<uint8_t>(st, o, (uint8_t)iv, err, errlen);
    case RGPU_BOOL: return launch_fill<uint8_t>(st, o, (uint8_t)(v != 0), err, errlen);
    default: return RGPU_ERR_BAD_DTYPE;
    }
}
