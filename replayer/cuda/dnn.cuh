// dnn.cuh — what the families on cuDNN (conv.cu, batchnorm.cu) share: the
// handle made ready on first use, cuDNN's enum values, tensor descriptors
// from views. The function table is common.cuh's rgpu_cudnn.
#pragma once

#include <limits.h>

#include "common.cuh"

// cuDNN enums (cudnnDataType_t, cudnnTensorFormat_t, cudnnConvolutionMode_t,
// cudnnMathType_t, cudnnBatchNormMode_t)
enum { DNN_FLOAT = 0, DNN_DOUBLE = 1, DNN_HALF = 2, DNN_BF16 = 9 };
enum { DNN_NCHW = 0, DNN_NHWC = 1, DNN_XCORR = 1 };
enum { DNN_DEFAULT_MATH = 0, DNN_TENSOR_OP_MATH = 1, DNN_TENSOR_OP_CONVERSION = 2, DNN_FMA_MATH = 3 };
enum { DNN_BN_SPATIAL = 1 };

// cudnn_loader.cu: cuDNN on the backend's stream, loaded on first use; false
// when turned off (RGPU_CUDNN=0) or absent, said once on the server's log
// (the families then run their own kernels).
bool rgpu_cuda_dnn_ready(rgpu_cuda_ctx *c);

// The cuDNN data type of a floating dtype (-1: none).
static inline int rgpu_dnn_dtype(int dt)
{
    return dt == RGPU_F32 ? DNN_FLOAT : dt == RGPU_F64 ? DNN_DOUBLE : dt == RGPU_F16 ? DNN_HALF
         : dt == RGPU_BF16 ? DNN_BF16 : -1;
}

// A tensor operand as cuDNN takes it: sizes and strides as ints.
struct dnn_td { int nd, dims[5], strides[5]; };

// false when cuDNN cannot take v as it is: a stride <= 0 on a dim of size > 1,
// or a size, stride or span past int. A size-1 dim gets the stride its inner
// dims span (its own is never used; cuDNN reads layouts from strides).
static inline bool rgpu_dnn_td_of(const rgpu_view *v, dnn_td *t)
{
    long long inner = 1, span = 1;
    t->nd = v->ndim;
    for (int d = v->ndim - 1; d >= 0; d--) {
        long long n = v->sizes[d], st = n == 1 ? inner : v->strides[d];
        if (st <= 0 || n > INT_MAX || st > INT_MAX) return false;
        span += (n - 1) * st;
        if (span > INT_MAX) return false;
        t->dims[d] = (int)n;
        t->strides[d] = (int)st;
        if (n * st > inner) inner = n * st;
    }
    return true;
}
