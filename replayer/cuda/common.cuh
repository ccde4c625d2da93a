// common.cuh — shared by the CUDA op-family files: status checks, views.
// Every CUDA call is checked and turned into an rgpu_status; nothing here
// aborts. Kernels take plain arguments; launchers take the stream.
#pragma once

#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "backend.h"
}

#define RGPU_CUDA_TRY(expr, err, errlen)                                              \
    do {                                                                              \
        cudaError_t e_ = (expr);                                                      \
        if (e_ != cudaSuccess) {                                                      \
            if (err) snprintf(err, errlen, "%s: %s", #expr, cudaGetErrorString(e_));  \
            return e_ == cudaErrorMemoryAllocation ? RGPU_ERR_NOMEM : RGPU_ERR_EXEC;  \
        }                                                                             \
    } while (0)

// A view as kernels see it: sizes/strides by value, up to RGPU_MAX_DIMS.
struct rgpu_cuda_view {
    void *data;
    int ndim;
    long long sizes[RGPU_MAX_DIMS];
    long long strides[RGPU_MAX_DIMS];
};

static inline rgpu_cuda_view rgpu_cuda_view_of(const rgpu_view *v) {
    rgpu_cuda_view r;
    r.data = v->data;
    r.ndim = v->ndim;
    for (int d = 0; d < v->ndim; d++) { r.sizes[d] = v->sizes[d]; r.strides[d] = v->strides[d]; }
    return r;
}

// Element offset of linear index i (row-major over sizes) in view v.
__device__ inline long long rgpu_cuda_offset(const rgpu_cuda_view &v, long long i) {
    long long off = 0;
    for (int d = v.ndim - 1; d >= 0; d--) {
        long long s = v.sizes[d];
        off += (i % s) * v.strides[d];
        i /= s;
    }
    return off;
}

// Entry points of the op-family files (extern "C" so the backend is C-callable).
extern "C" rgpu_status rgpu_cuda_fill(cudaStream_t st, const rgpu_exec *e, char *err, size_t errlen);
