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

#include <initializer_list>

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

// Integer elements: loads and stores for kernels whose host has checked that
// no operand is floating or complex (rf_all_int): op/dtype.h's op_load_u64,
// op_load_bool and op_store_u64 restricted to the integer and bool dtypes, so
// no float conversion is compiled in.
static inline bool rf_all_int(std::initializer_list<int> dts)
{
    for (int dt : dts)
        if (dt >= 0 && (op_dtype_is_float(dt) || dt == RGPU_C64 || dt == RGPU_C128 || dt == RGPU_C32)) return false;
    return true;
}
__device__ __forceinline__ unsigned long long rf_ld_int(const void *p, long long i, int dt)
{
    switch (dt) {
    case RGPU_I64: return (unsigned long long)((const long long *)p)[i];
    case RGPU_I32: return (unsigned long long)(long long)((const int32_t *)p)[i];
    case RGPU_I16: return (unsigned long long)(long long)((const int16_t *)p)[i];
    case RGPU_I8:  return (unsigned long long)(long long)((const int8_t *)p)[i];
    case RGPU_U8:  return ((const uint8_t *)p)[i];
    case RGPU_BOOL: return ((const uint8_t *)p)[i] != 0;
    default: return 0;
    }
}
__device__ __forceinline__ bool rf_ld_int_bool(const void *p, long long i, int dt) { return rf_ld_int(p, i, dt) != 0; }
__device__ __forceinline__ void rf_st_int(void *p, long long i, int dt, unsigned long long v)
{
    switch (dt) {
    case RGPU_I64: ((unsigned long long *)p)[i] = v; break;
    case RGPU_I32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case RGPU_I16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case RGPU_I8: case RGPU_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case RGPU_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

// Element I/O in an opmath T (reduce.cuh's row kernels, batchnorm, index's
// grouped sums): rf_ld<float>/rf_st(float) know only float32/float16/bfloat16.
// True when the float instantiation may run on these dtypes (-1: absent operand).
static inline bool rf_opmath_float(std::initializer_list<int> dts)
{
    for (int dt : dts)
        if (dt >= 0 && dt != RGPU_F32 && dt != RGPU_F16 && dt != RGPU_BF16) return false;
    return true;
}

template <typename T> __device__ T rf_ld(const void *p, long long i, int dt);
template <> __device__ __forceinline__ double rf_ld<double>(const void *p, long long i, int dt) { return cvt_ld_f64(p, i, dt); }
template <> __device__ __forceinline__ float rf_ld<float>(const void *p, long long i, int dt)
{
    if (dt == RGPU_F32) return ((const float *)p)[i];
    const uint16_t h = ((const uint16_t *)p)[i];
    return dt == RGPU_BF16 ? rgpu_bf16_to_float(h) : rgpu_half_to_float(h);
}
__device__ __forceinline__ void rf_st(void *p, long long i, int dt, double v) { cvt_st_f64(p, i, dt, v); }
__device__ __forceinline__ void rf_st(void *p, long long i, int dt, float v)
{
    if (dt == RGPU_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = dt == RGPU_BF16 ? rgpu_float_to_bf16(v) : rgpu_float_to_half(v);
}
// Correctly rounded, never contracted into an FMA (the formulas stay as written).
__device__ __forceinline__ double rf_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double rf_sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double rf_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float rf_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float rf_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float rf_mul(float a, float b) { return __fmul_rn(a, b); }
