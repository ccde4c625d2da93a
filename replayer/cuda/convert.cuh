// convert.cuh — the one device-side load/store/cast layer of the CUDA
// families (ggml-cuda/convert.cuh's role): every kernel reads and writes
// elements of a runtime dtype through these, never through a copy of its own.
//
// The casts themselves are replayer/op/dtype.h and op/half.h (OP_FN: host and
// device), the very functions the CPU backend runs, so a cast gives the same
// bits on both backends, NaN encodings included (f16: sign|0x7E00, bf16:
// 0x7FC0, as c10). This file adds the shapes the kernels want: element i of
// an array, and the compute type (float, double, uint64_t) as a template
// parameter.
#pragma once

#include "common.cuh"

// Address of element i (an element index, not bytes) of an array of dtype dt.
__host__ __device__ __forceinline__ const char *cvt_at(const void *p, long long i, int dt)
{
    return (const char *)p + i * op_dtype_esize(dt);
}

// Element i of an array of dtype dt at p, in a compute type.
__host__ __device__ __forceinline__ double cvt_ld_f64(const void *p, long long i, int dt) { return op_load_f64(cvt_at(p, i, dt), dt); }
__host__ __device__ __forceinline__ float cvt_ld_f32(const void *p, long long i, int dt) { return op_load_f32(cvt_at(p, i, dt), dt); }
__host__ __device__ __forceinline__ unsigned long long cvt_ld_u64(const void *p, long long i, int dt)
{
    return (unsigned long long)op_load_u64(cvt_at(p, i, dt), dt);
}
__host__ __device__ __forceinline__ bool cvt_ld_bool(const void *p, long long i, int dt) { return op_load_bool(cvt_at(p, i, dt), dt); }

// Element i of an array of dtype dt at p, from a compute type.
__host__ __device__ __forceinline__ void cvt_st_f64(void *p, long long i, int dt, double v) { op_store_f64((char *)cvt_at(p, i, dt), dt, v); }
__host__ __device__ __forceinline__ void cvt_st_f32(void *p, long long i, int dt, float v) { op_store_f32((char *)cvt_at(p, i, dt), dt, v); }
__host__ __device__ __forceinline__ void cvt_st_u64(void *p, long long i, int dt, unsigned long long v)
{
    op_store_u64((char *)cvt_at(p, i, dt), dt, (uint64_t)v);
}

// The compute type T (float, double, uint64_t) as a template parameter.
template <typename T> __host__ __device__ T cvt_load(const char *p, int dt);
template <> __host__ __device__ __forceinline__ float cvt_load<float>(const char *p, int dt) { return op_load_f32(p, dt); }
template <> __host__ __device__ __forceinline__ double cvt_load<double>(const char *p, int dt) { return op_load_f64(p, dt); }
template <> __host__ __device__ __forceinline__ uint64_t cvt_load<uint64_t>(const char *p, int dt) { return op_load_u64(p, dt); }
__host__ __device__ __forceinline__ void cvt_store(char *p, int dt, float v) { op_store_f32(p, dt, v); }
__host__ __device__ __forceinline__ void cvt_store(char *p, int dt, double v) { op_store_f64(p, dt, v); }
__host__ __device__ __forceinline__ void cvt_store(char *p, int dt, uint64_t v) { op_store_u64(p, dt, v); }

// The same with the dtype a compile-time constant: the switch folds away and
// each instantiation is one load or store (copy.cu's per-pair loops).
template <int DT> __host__ __device__ __forceinline__ double cvt_ld_f64(const void *p, long long i) { return cvt_ld_f64(p, i, DT); }
template <int DT> __host__ __device__ __forceinline__ uint64_t cvt_ld_u64(const void *p, long long i) { return cvt_ld_u64(p, i, DT); }
template <int DT> __host__ __device__ __forceinline__ void cvt_st_f64(void *p, long long i, double v) { cvt_st_f64(p, i, DT, v); }
template <int DT> __host__ __device__ __forceinline__ void cvt_st_f32(void *p, long long i, float v) { cvt_st_f32(p, i, DT, v); }
template <int DT> __host__ __device__ __forceinline__ void cvt_st_u64(void *p, long long i, uint64_t v) { cvt_st_u64(p, i, DT, v); }
