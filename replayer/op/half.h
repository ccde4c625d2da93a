/* op/half.h — IEEE binary16 (f16) and bfloat16 (bf16) <-> f32 conversions.
 *
 * Bit-exact with c10::Half / c10::BFloat16 (what ATen uses on CPU):
 *   - f32 -> f16 and f32 -> bf16 round to nearest, ties to even;
 *   - overflow rounds to +-inf, f16 subnormals are produced and read exactly;
 *   - NaN -> canonical quiet NaN: f16 keeps the sign (sign|0x7E00, as
 *     fp16_ieee_from_fp32_value), bf16 is always 0x7FC0 (as c10's
 *     round_to_nearest_even);
 *   - f16/bf16 -> f32 is exact (NaN payload kept).
 * Wider sources (f64, int64) go through f32 first, as c10 does (Half(float)),
 * so f64 -> f16 is f64 -> f32 -> f16 (double rounding, ATen-identical).
 *
 * Pure integer bit manipulation on memcpy'd bits: no FP environment
 * dependence, no UB; OP_FN, so CUDA kernels run these same lines and the two
 * backends agree bit for bit (NaN encodings included). */
#ifndef RGPU_OP_HALF_H
#define RGPU_OP_HALF_H

#include <stdint.h>
#include <string.h>

#include "op.h"

OP_FN uint32_t rgpu_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
OP_FN float rgpu_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* f16 bits -> f32 (exact). */
OP_FN float rgpu_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0) {
        /* zero or subnormal: m * 2^-24, exact in f32 (m < 2^10) */
        float v = (float)m * 5.9604644775390625e-8f;
        return rgpu_f32_from_bits(rgpu_f32_bits(v) | sign);
    }
    if (e == 31) return rgpu_f32_from_bits(sign | 0x7f800000u | (m << 13));
    return rgpu_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* f32 -> f16 bits, round to nearest even. */
OP_FN uint16_t rgpu_float_to_half(float f)
{
    uint32_t x = rgpu_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);          /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);         /* >= 65520 (or inf): inf */
    if (ax >= 0x38800000u) {                                          /* normal f16 range */
        uint32_t hv = (ax >> 13) - (112u << 10);
        uint32_t rem = ax & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (hv & 1u))) hv++;    /* carry into exponent is fine */
        return (uint16_t)(sign | hv);
    }
    /* below 2^-14: f16 subnormal or zero. value = m * 2^(e-150); in units of
     * 2^-24 that is m >> (126 - e), rounded to nearest even. */
    uint32_t e = ax >> 23;
    if (e < 102) return (uint16_t)sign;             /* < 2^-25 (incl. f32 subnormals): rounds to 0 */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;                      /* 14..24 */
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) r++;   /* r == 0x400 is the smallest normal: correct */
    return (uint16_t)(sign | r);
}

/* bf16 bits -> f32 (exact). */
OP_FN float rgpu_bf16_to_float(uint16_t b) { return rgpu_f32_from_bits((uint32_t)b << 16); }

/* f32 -> bf16 bits, round to nearest even; NaN -> 0x7FC0 (c10's choice). */
OP_FN uint16_t rgpu_float_to_bf16(float f)
{
    uint32_t x = rgpu_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    uint32_t bias = 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)((x + bias) >> 16);            /* no wrap: max |finite| + bias stays below 2^32 */
}

#endif
