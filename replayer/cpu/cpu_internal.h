/* cpu_internal.h — private helpers shared by the CPU reference kernels:
 * error reporting, view checks, element conversions and the strided N-d
 * iterator. Nothing here is part of the backend API (see backend.h). */
#ifndef RGPU_CPU_INTERNAL_H
#define RGPU_CPU_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "op/check.h"
#include "op/dtype.h"
#include "op/error.h"
#include "op/half.h"
#include "op/iter.h"
#include "cpu_vmath.h"

/* ---------------------------------------------------------------------------
 * Storage memory (cpu_alloc.c): a process-wide caching allocator. Blocks of
 * >= 256 KiB are mapped and, when freed, kept by size class for the next
 * allocation of their class (at most RGPU_CPU_CACHE_BYTES, default 1 GiB);
 * smaller ones are malloc's. Data is 64-byte aligned (large: page-aligned).
 * rgpu_cpu_free(NULL) is a no-op. backend_ref(+1/-1) counts live cpu
 * backends; the last one gone empties the cache. */
typedef struct rgpu_cpu_alloc_stats {
    uint64_t hits, misses, unmapped;   /* cached blocks reused / mapped anew / unmapped at free */
    size_t cached_bytes;
} rgpu_cpu_alloc_stats;
void *rgpu_cpu_alloc(size_t nbytes);
void rgpu_cpu_free(void *p);
void rgpu_cpu_alloc_backend_ref(int delta);
rgpu_cpu_alloc_stats rgpu_cpu_alloc_get_stats(void);

/* ---------------------------------------------------------------------------
 * Row conversions: n elements at byte stride s to/from a packed buffer in a
 * compute type. The dtype switch sits outside the loop; each case inlines the
 * element helper above with a constant dtype, so the loop body is branch-free. */
#define CPU_EACH_DTYPE(dt, STMT) do { switch (dt) {                         \
    case RGPU_F32:  { enum { DT_ = RGPU_F32 };  STMT; } break;              \
    case RGPU_F64:  { enum { DT_ = RGPU_F64 };  STMT; } break;              \
    case RGPU_F16:  { enum { DT_ = RGPU_F16 };  STMT; } break;              \
    case RGPU_BF16: { enum { DT_ = RGPU_BF16 }; STMT; } break;              \
    case RGPU_I64:  { enum { DT_ = RGPU_I64 };  STMT; } break;              \
    case RGPU_I32:  { enum { DT_ = RGPU_I32 };  STMT; } break;              \
    case RGPU_I16:  { enum { DT_ = RGPU_I16 };  STMT; } break;              \
    case RGPU_I8:   { enum { DT_ = RGPU_I8 };   STMT; } break;              \
    case RGPU_U8:   { enum { DT_ = RGPU_U8 };   STMT; } break;              \
    case RGPU_BOOL: { enum { DT_ = RGPU_BOOL }; STMT; } break;              \
    default: break; } } while (0)

/* ---------------------------------------------------------------------------
 * Branch-free f16/bf16 <-> f32 conversions, bit-identical to op/half.h's
 * rgpu_float_to_half/_bf16 and rgpu_half_to_float (every input checked in
 * tests/c/test_cpu_kernels.c), written as selects so that loops over them
 * vectorise. The f16 subnormal case rounds by the FPU: |f| + 0.5f puts |f|
 * in units of 2^-24 (0.5's ulp), rounded to nearest even as the integer
 * code does. */
static inline uint16_t cpu_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    uint32_t hv = (ax >> 13) - (112u << 10), rem = ax & 0x1fffu;
    hv += (uint32_t)(rem > 0x1000u) | ((uint32_t)(rem == 0x1000u) & hv);   /* ties to even */
    float t = rgpu_f32_from_bits(ax) + 0.5f;
    uint32_t sub;
    memcpy(&sub, &t, 4);
    sub -= 0x3f000000u;
    uint32_t is_nrm = 0u - (uint32_t)(ax >= 0x38800000u);
    uint32_t is_inf = 0u - (uint32_t)(ax >= 0x477ff000u);
    uint32_t is_nan = 0u - (uint32_t)(ax > 0x7f800000u);
    uint32_t r = (hv & is_nrm) | (sub & ~is_nrm);
    r = (0x7c00u & is_inf) | (r & ~is_inf);
    r = (0x7e00u & is_nan) | (r & ~is_nan);
    return (uint16_t)(sign | r);
}
static inline float cpu_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = h & 0x7fffu;
    uint32_t infnan = (uint32_t)(em >= 0x7c00u);
    uint32_t nrm = (em << 13) + ((112u + 112u * infnan) << 23);
    float sub = (float)(int32_t)em * 5.9604644775390625e-8f;   /* em < 0x400: exact */
    uint32_t sb, is_sub = 0u - (uint32_t)(em < 0x400u);
    memcpy(&sb, &sub, 4);
    uint32_t r = ((sb & is_sub) | (nrm & ~is_sub)) | sign;
    float v;
    memcpy(&v, &r, 4);
    return v;
}
static inline uint16_t cpu_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : r);
}
static inline float cpu_bf16_to_f32(uint16_t b)
{
    uint32_t r = (uint32_t)b << 16;
    float v;
    memcpy(&v, &r, 4);
    return v;
}

/* n contiguous elements converted (dst and src do not overlap). */
static inline void cpu_f32_to_f16_n(uint16_t *restrict d, const float *restrict s, int64_t n)
{ for (int64_t i = 0; i < n; i++) d[i] = cpu_f32_to_f16(s[i]); }
static inline void cpu_f16_to_f32_n(float *restrict d, const uint16_t *restrict s, int64_t n)
{ for (int64_t i = 0; i < n; i++) d[i] = cpu_f16_to_f32(s[i]); }
/* the rows at this CPU's width (cpu_vmath_kern.h: the helpers above, lane by lane) */
static inline void cpu_f32_to_bf16_n(uint16_t *restrict d, const float *restrict s, int64_t n)
{ rgpu_vm_f32_to_bf16(d, s, n); }
static inline void cpu_bf16_to_f32_n(float *restrict d, const uint16_t *restrict s, int64_t n)
{ rgpu_vm_bf16_to_f32(d, s, n); }

/* ---------------------------------------------------------------------------
 * Row conversions (continued): contiguous f32/f16/bf16 rows take the
 * vectorised loops above, everything else the element helpers. */
static inline void cpu_load_row_f64(double *dst, const char *src, int dt, int64_t s, int64_t n)
{
    if (dt == RGPU_F32 && s == 4) { rgpu_vm_f32_to_f64(dst, (const float *)src, n); return; }
    if (dt == RGPU_F64 && s == 8) { memmove(dst, src, (size_t)n * sizeof *dst); return; }
    if (s == 0) {   /* a broadcast scalar: loaded once (dst could alias src for the compiler) */
        double v = 0;
        CPU_EACH_DTYPE(dt, v = op_load_f64(src, DT_));
        for (int64_t i = 0; i < n; i++) dst[i] = v;
        return;
    }
    CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) dst[i] = op_load_f64(src + i * s, DT_));
}
static inline void cpu_load_row_f32(float *dst, const char *src, int dt, int64_t s, int64_t n)
{
    if (s == 2 && dt == RGPU_BF16) { cpu_bf16_to_f32_n(dst, (const uint16_t *)src, n); return; }
    if (s == 2 && dt == RGPU_F16) { cpu_f16_to_f32_n(dst, (const uint16_t *)src, n); return; }
    if (s == 4 && dt == RGPU_F32) { memmove(dst, src, (size_t)n * 4); return; }
    if (s == 0) {
        float v = 0;
        CPU_EACH_DTYPE(dt, v = op_load_f32(src, DT_));
        for (int64_t i = 0; i < n; i++) dst[i] = v;
        return;
    }
    CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) dst[i] = op_load_f32(src + i * s, DT_));
}
static inline void cpu_load_row_u64(uint64_t *dst, const char *src, int dt, int64_t s, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) dst[i] = op_load_u64(src + i * s, DT_)); }
static inline void cpu_load_row_bool(uint8_t *dst, const char *src, int dt, int64_t s, int64_t n)
{
    if (s == 1 && (dt == RGPU_BOOL || dt == RGPU_U8)) {
        const uint8_t *b = (const uint8_t *)src;
        for (int64_t i = 0; i < n; i++) dst[i] = b[i] != 0;
        return;
    }
    CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) dst[i] = op_load_bool(src + i * s, DT_));
}
static inline void cpu_store_row_f64(char *dst, int dt, int64_t s, const double *src, int64_t n)
{
    if (dt == RGPU_F32 && s == 4) { rgpu_vm_f64_to_f32((float *)dst, src, n); return; }
    if (dt == RGPU_F64 && s == 8) { memmove(dst, src, (size_t)n * sizeof *src); return; }
    CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) op_store_f64(dst + i * s, DT_, src[i]));
}
static inline void cpu_store_row_f32(char *dst, int dt, int64_t s, const float *src, int64_t n)
{
    if (s == 2 && dt == RGPU_BF16) { cpu_f32_to_bf16_n((uint16_t *)dst, src, n); return; }
    if (s == 2 && dt == RGPU_F16) { cpu_f32_to_f16_n((uint16_t *)dst, src, n); return; }
    if (s == 4 && dt == RGPU_F32) { memmove(dst, src, (size_t)n * 4); return; }
    CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) op_store_f32(dst + i * s, DT_, src[i]));
}
static inline void cpu_store_row_u64(char *dst, int dt, int64_t s, const uint64_t *src, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) op_store_u64(dst + i * s, DT_, src[i])); }

/* n elements of esz bytes from a (byte stride sa) to o (stride so), same
 * dtype: one memmove when both are packed, else a typed loop. */
static inline void cpu_copy_row_same(char *o, int64_t so, const char *a, int64_t sa, int64_t n, int64_t esz)
{
    if (so == esz && sa == esz) { memmove(o, a, (size_t)(n * esz)); return; }
    switch (esz) {
    case 1: for (int64_t i = 0; i < n; i++) *(uint8_t *)(o + i * so) = *(const uint8_t *)(a + i * sa); break;
    case 2: for (int64_t i = 0; i < n; i++) *(uint16_t *)(o + i * so) = *(const uint16_t *)(a + i * sa); break;
    case 4: for (int64_t i = 0; i < n; i++) *(uint32_t *)(o + i * so) = *(const uint32_t *)(a + i * sa); break;
    case 8: for (int64_t i = 0; i < n; i++) *(uint64_t *)(o + i * so) = *(const uint64_t *)(a + i * sa); break;
    default: for (int64_t i = 0; i < n; i++) memcpy(o + i * so, a + i * sa, (size_t)esz); break;
    }
}

/* rgpu_op_iter_run over the thread pool (cpu_iter.c) for row functions that
 * write only operand 0's elements of their row: pieces of about `grain`
 * elements (bounds by shape only); small problems run inline. */
#define CPU_ITER_GRAIN 16384
void rgpu_cpu_iter_run(const op_iter *it, op_row_fn row, void *ctx, int64_t grain);

/* Elements per chunk when a row is converted through a compute-type buffer. */
#define CPU_CHUNK 256

/* ---------------------------------------------------------------------------
 * Kernel families (one file each). */
rgpu_status rgpu_cpu_reduce_sum_mean(const rgpu_exec *e, bool mean, char *err, size_t errlen);

#endif
