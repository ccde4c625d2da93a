// emu_elem.h — the real element types of the library references (cuBLAS,
// cuDNN): reads as double, writes rounded once from double (half/bf16 by
// cuda_fp16/cuda_bf16's round to nearest even), and TF32 rounding. Each
// reference maps its own data-type enum onto emu_elem.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>

enum emu_elem { EMU_F32, EMU_F64, EMU_F16, EMU_BF16 };

static inline size_t emu_esize(emu_elem t) { return t == EMU_F64 ? 8 : t == EMU_F32 ? 4 : 2; }

static inline double emu_load(const void *p, emu_elem t, long long i) {
    switch (t) {
    case EMU_F32: return ((const float *)p)[i];
    case EMU_F64: return ((const double *)p)[i];
    case EMU_F16: return (double)__half2float(((const __half *)p)[i]);
    default: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
    }
}

static inline void emu_store(void *p, emu_elem t, long long i, double v) {
    switch (t) {
    case EMU_F32: ((float *)p)[i] = (float)v; break;
    case EMU_F64: ((double *)p)[i] = v; break;
    case EMU_F16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    default: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    }
}

// v as float rounded to TF32's 10 mantissa bits (nearest even), as tensor cores take float inputs.
static inline double emu_tf32(double v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1)) & ~0x1fffu;
    memcpy(&f, &u, 4);
    return f;
}
