/* op/dtype.h — elements of every rgpu dtype: load as a compute type, store
 * from one, the casts between them (ATen's semantics), and which dtypes are
 * floating. OP_FN: the CPU backend and the CUDA kernels (through
 * replayer/cuda/convert.cuh) run these same functions, so a cast gives the
 * same bits on both. p points at one element of dtype dt. */
#ifndef RGPU_OP_DTYPE_H
#define RGPU_OP_DTYPE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "op.h"
#include "half.h"

/* ---------------------------------------------------------------------------
 * Element conversions. Semantics (ATen's, with UB replaced by clamping):
 *   float -> signed int: truncate toward zero, clamped to the target range, NaN -> 0
 *   float -> u8: truncate to int64 (clamped), then wrap mod 256 (c10 casts to
 *                uint8 through int64, so -1.0 -> 255)
 *   int -> narrower int: wrap (two's complement)
 *   x -> bool: x != 0 (NaN -> true); bool -> x: 0/1
 *   int64 -> f32 one rounding; anything -> f16/bf16 goes through f32. */
OP_FN int64_t op_f64_to_i64_sat(double x)
{
    if (x != x) return 0;
    if (x >= 9223372036854775808.0) return INT64_MAX;
    if (x <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)x;
}

/* The same for a float: every bound is exact in float, so the values are
 * op_f64_to_i64_sat((double)x)'s, without double arithmetic (the CUDA f32
 * kernels run no FP64 instruction). */
OP_FN int64_t op_f32_to_i64_sat(float x)
{
    if (x != x) return 0;
    if (x >= 9223372036854775808.0f) return INT64_MAX;
    if (x <= -9223372036854775808.0f) return INT64_MIN;
    return (int64_t)x;
}

OP_FN double op_clamp_trunc(double x, double lo, double hi)
{
    if (x != x) return 0.0;
    if (x < lo) return lo;
    if (x > hi) return hi;
    return x;
}

/* Load one element of dtype dt at p. */
OP_FN double op_load_f64(const char *p, int dt)
{
    switch (dt) {
    case RGPU_F32:  return *(const float *)p;
    case RGPU_F64:  return *(const double *)p;
    case RGPU_F16:  return rgpu_half_to_float(*(const uint16_t *)p);
    case RGPU_BF16: return rgpu_bf16_to_float(*(const uint16_t *)p);
    case RGPU_I64:  return (double)*(const int64_t *)p;
    case RGPU_I32:  return *(const int32_t *)p;
    case RGPU_I16:  return *(const int16_t *)p;
    case RGPU_I8:   return *(const int8_t *)p;
    case RGPU_U8:   return *(const uint8_t *)p;
    case RGPU_BOOL: return *(const uint8_t *)p != 0;
    case RGPU_C64:  return *(const float *)p;
    case RGPU_C128: return *(const double *)p;
    case RGPU_C32:  return rgpu_half_to_float(*(const uint16_t *)p);
    default:        return 0.0;
    }
}

OP_FN float op_load_f32(const char *p, int dt)
{
    switch (dt) {
    case RGPU_F32:  return *(const float *)p;
    case RGPU_F64:  return (float)*(const double *)p;
    case RGPU_F16:  return rgpu_half_to_float(*(const uint16_t *)p);
    case RGPU_BF16: return rgpu_bf16_to_float(*(const uint16_t *)p);
    case RGPU_I64:  return (float)*(const int64_t *)p;
    case RGPU_I32:  return (float)*(const int32_t *)p;
    case RGPU_I16:  return *(const int16_t *)p;
    case RGPU_I8:   return *(const int8_t *)p;
    case RGPU_U8:   return *(const uint8_t *)p;
    case RGPU_BOOL: return *(const uint8_t *)p != 0;
    case RGPU_C64:  return *(const float *)p;
    case RGPU_C128: return (float)*(const double *)p;
    case RGPU_C32:  return rgpu_half_to_float(*(const uint16_t *)p);
    default:        return 0.0f;
    }
}

/* As int64 (floats truncated, clamped, NaN -> 0). Returned as uint64 so the
 * integer kernels can do wrapping arithmetic without signed-overflow UB. */
OP_FN uint64_t op_load_u64(const char *p, int dt)
{
    switch (dt) {
    case RGPU_F32:  return (uint64_t)op_f32_to_i64_sat(*(const float *)p);
    case RGPU_F64:  return (uint64_t)op_f64_to_i64_sat(*(const double *)p);
    case RGPU_F16:  return (uint64_t)op_f32_to_i64_sat(rgpu_half_to_float(*(const uint16_t *)p));
    case RGPU_BF16: return (uint64_t)op_f32_to_i64_sat(rgpu_bf16_to_float(*(const uint16_t *)p));
    case RGPU_I64:  return (uint64_t)*(const int64_t *)p;
    case RGPU_I32:  return (uint64_t)(int64_t)*(const int32_t *)p;
    case RGPU_I16:  return (uint64_t)(int64_t)*(const int16_t *)p;
    case RGPU_I8:   return (uint64_t)(int64_t)*(const int8_t *)p;
    case RGPU_U8:   return *(const uint8_t *)p;
    case RGPU_BOOL: return *(const uint8_t *)p != 0;
    case RGPU_C64:  return (uint64_t)op_f32_to_i64_sat(*(const float *)p);
    case RGPU_C128: return (uint64_t)op_f64_to_i64_sat(*(const double *)p);
    case RGPU_C32:  return (uint64_t)op_f32_to_i64_sat(rgpu_half_to_float(*(const uint16_t *)p));
    default:        return 0;
    }
}

OP_FN bool op_load_bool(const char *p, int dt)
{
    switch (dt) {
    case RGPU_F32:  return *(const float *)p != 0.0f;
    case RGPU_F64:  return *(const double *)p != 0.0;
    case RGPU_F16:  return (*(const uint16_t *)p & 0x7fffu) != 0;
    case RGPU_BF16: return (*(const uint16_t *)p & 0x7fffu) != 0;
    case RGPU_I64:  return *(const int64_t *)p != 0;
    case RGPU_I32:  return *(const int32_t *)p != 0;
    case RGPU_I16:  return *(const int16_t *)p != 0;
    case RGPU_I8:   return *(const int8_t *)p != 0;
    case RGPU_U8:   return *(const uint8_t *)p != 0;
    case RGPU_BOOL: return *(const uint8_t *)p != 0;
    case RGPU_C64:  return ((const float *)p)[0] != 0.0f || ((const float *)p)[1] != 0.0f;
    case RGPU_C128: return ((const double *)p)[0] != 0.0 || ((const double *)p)[1] != 0.0;
    case RGPU_C32:  return ((((const uint16_t *)p)[0] | ((const uint16_t *)p)[1]) & 0x7fffu) != 0;
    default:        return false;
    }
}

/* Store a double into dtype dt at p (f16/bf16 via f32, as c10). */
OP_FN void op_store_f64(char *p, int dt, double v)
{
    switch (dt) {
    case RGPU_F32:  *(float *)p = (float)v; break;
    case RGPU_F64:  *(double *)p = v; break;
    case RGPU_F16:  *(uint16_t *)p = rgpu_float_to_half((float)v); break;
    case RGPU_BF16: *(uint16_t *)p = rgpu_float_to_bf16((float)v); break;
    case RGPU_I64:  *(int64_t *)p = op_f64_to_i64_sat(v); break;
    case RGPU_I32:  *(int32_t *)p = (int32_t)op_clamp_trunc(v, -2147483648.0, 2147483647.0); break;
    case RGPU_I16:  *(int16_t *)p = (int16_t)op_clamp_trunc(v, -32768.0, 32767.0); break;
    case RGPU_I8:   *(int8_t *)p = (int8_t)op_clamp_trunc(v, -128.0, 127.0); break;
    case RGPU_U8:   *(uint8_t *)p = (uint8_t)(uint64_t)op_f64_to_i64_sat(v); break;
    case RGPU_BOOL: *(uint8_t *)p = v != 0.0; break;
    case RGPU_C64:  ((float *)p)[0] = (float)v; ((float *)p)[1] = 0.0f; break;
    case RGPU_C128: ((double *)p)[0] = v; ((double *)p)[1] = 0.0; break;
    case RGPU_C32:  ((uint16_t *)p)[0] = rgpu_float_to_half((float)v); ((uint16_t *)p)[1] = 0; break;
    default: break;
    }
}

/* Store a float (computed in f32 opmath) into dtype dt at p. */
OP_FN void op_store_f32(char *p, int dt, float v)
{
    switch (dt) {
    case RGPU_F32:  *(float *)p = v; break;
    case RGPU_F16:  *(uint16_t *)p = rgpu_float_to_half(v); break;
    case RGPU_BF16: *(uint16_t *)p = rgpu_float_to_bf16(v); break;
    /* the integers as op_store_f64((double)v) gives them, in float (bounds
     * exact in float; 2^31 itself saturates, as 2147483648.0 > INT32_MAX) */
    case RGPU_I64:  *(int64_t *)p = op_f32_to_i64_sat(v); break;
    case RGPU_I32:
        *(int32_t *)p = v != v ? 0 : v < -2147483648.0f ? INT32_MIN : v >= 2147483648.0f ? INT32_MAX : (int32_t)v;
        break;
    case RGPU_I16:  *(int16_t *)p = (int16_t)(v != v ? 0.0f : v < -32768.0f ? -32768.0f : v > 32767.0f ? 32767.0f : v); break;
    case RGPU_I8:   *(int8_t *)p = (int8_t)(v != v ? 0.0f : v < -128.0f ? -128.0f : v > 127.0f ? 127.0f : v); break;
    case RGPU_U8:   *(uint8_t *)p = (uint8_t)(uint64_t)op_f32_to_i64_sat(v); break;
    case RGPU_BOOL: *(uint8_t *)p = v != 0.0f; break;
    case RGPU_C64:  ((float *)p)[0] = v; ((float *)p)[1] = 0.0f; break;
    case RGPU_C32:  ((uint16_t *)p)[0] = rgpu_float_to_half(v); ((uint16_t *)p)[1] = 0; break;
    default:        op_store_f64(p, dt, v); break;   /* float64, complex128: exact widening */
    }
}

/* Store an int64 (given as its uint64 bit pattern): narrower ints wrap. */
OP_FN void op_store_u64(char *p, int dt, uint64_t v)
{
    switch (dt) {
    case RGPU_F32:  *(float *)p = (float)(int64_t)v; break;
    case RGPU_F64:  *(double *)p = (double)(int64_t)v; break;
    case RGPU_F16:  *(uint16_t *)p = rgpu_float_to_half((float)(int64_t)v); break;
    case RGPU_BF16: *(uint16_t *)p = rgpu_float_to_bf16((float)(int64_t)v); break;
    case RGPU_I64:  *(uint64_t *)p = v; break;
    case RGPU_I32:  *(uint32_t *)p = (uint32_t)v; break;
    case RGPU_I16:  *(uint16_t *)p = (uint16_t)v; break;
    case RGPU_I8:
    case RGPU_U8:   *(uint8_t *)p = (uint8_t)v; break;
    case RGPU_BOOL: *(uint8_t *)p = v != 0; break;
    case RGPU_C64: case RGPU_C128: case RGPU_C32: op_store_f64(p, dt, (double)(int64_t)v); break;
    default: break;
    }
}

OP_FN bool op_dtype_is_float(int dt)
{
    return dt == RGPU_F32 || dt == RGPU_F64 || dt == RGPU_F16 || dt == RGPU_BF16;
}

/* Compute classes: the opmath type a kernel runs in. f16/bf16/f32 compute in
 * f32 (ATen's opmath), f64 in f64, the integer dtypes in int64 with wrapping
 * (held as uint64), bool as 0/1 where an op keeps it apart. */
enum { OP_CT_F32, OP_CT_F64, OP_CT_I64, OP_CT_BOOL };

/* The dtype that holds compute class ct's values (a scalar operand already
 * converted to the compute type). */
OP_FN int op_ct_dtype(int ct)
{
    switch (ct) {
    case OP_CT_F32: return RGPU_F32;
    case OP_CT_F64: return RGPU_F64;
    case OP_CT_BOOL: return RGPU_BOOL;
    default: return RGPU_I64;
    }
}

/* Bytes per element, callable from kernels (rgpu_dtype_size is host-only);
 * 1 for the 1-byte dtypes and anything invalid. */
OP_FN int op_dtype_esize(int dt)
{
    switch (dt) {
    case RGPU_C128: return 16;
    case RGPU_F64: case RGPU_I64: case RGPU_C64: return 8;
    case RGPU_F32: case RGPU_I32: case RGPU_C32: return 4;
    case RGPU_F16: case RGPU_BF16: case RGPU_I16: return 2;
    default: return 1;
    }
}

/* v rounded to dtype dt (an f32 opmath value of an f16/bf16 tensor). */
OP_FN float op_round_to(int dt, float v)
{
    if (dt == RGPU_F16) return rgpu_half_to_float(rgpu_float_to_half(v));
    if (dt == RGPU_BF16) return rgpu_bf16_to_float(rgpu_float_to_bf16(v));
    return v;
}

/* One element of esz bytes from s to d. */
OP_FN void op_elem_copy(char *d, const char *s, int esz)
{
    switch (esz) {
    case 1: *(uint8_t *)d = *(const uint8_t *)s; break;
    case 2: memcpy(d, s, 2); break;
    case 4: memcpy(d, s, 4); break;
    case 16: memcpy(d, s, 16); break;
    default: memcpy(d, s, 8); break;
    }
}

OP_FN bool op_dtype_is_complex(int dt)
{
    return dt == RGPU_C64 || dt == RGPU_C128 || dt == RGPU_C32;
}

/* A complex element as (re, im) doubles; a real one as (x, 0). */
OP_FN void op_load_c128(const char *p, int dt, double *re, double *im)
{
    switch (dt) {
    case RGPU_C64:  *re = ((const float *)p)[0]; *im = ((const float *)p)[1]; return;
    case RGPU_C128: *re = ((const double *)p)[0]; *im = ((const double *)p)[1]; return;
    case RGPU_C32:
        *re = rgpu_half_to_float(((const uint16_t *)p)[0]);
        *im = rgpu_half_to_float(((const uint16_t *)p)[1]);
        return;
    default:
        *re = op_dtype_is_float(dt) ? op_load_f64(p, dt) : (double)(int64_t)op_load_u64(p, dt);
        *im = 0.0;
        return;
    }
}

/* Store (re, im) into a complex dtype; a real dtype takes re (ATen's
 * complex -> real cast keeps the real part). */
OP_FN void op_store_c128(char *p, int dt, double re, double im)
{
    switch (dt) {
    case RGPU_C64:  ((float *)p)[0] = (float)re; ((float *)p)[1] = (float)im; return;
    case RGPU_C128: ((double *)p)[0] = re; ((double *)p)[1] = im; return;
    case RGPU_C32:
        ((uint16_t *)p)[0] = rgpu_float_to_half((float)re);
        ((uint16_t *)p)[1] = rgpu_float_to_half((float)im);
        return;
    default: op_store_f64(p, dt, re); return;
    }
}

/* d (dtype ddt) = s (dtype sdt), cast as copy_ does. */
OP_FN void op_elem_convert(char *d, int ddt, const char *s, int sdt)
{
    if (ddt == sdt) op_elem_copy(d, s, op_dtype_esize(ddt));
    else if (op_dtype_is_complex(ddt) || op_dtype_is_complex(sdt)) {
        double re, im;
        op_load_c128(s, sdt, &re, &im);
        op_store_c128(d, ddt, re, im);
    }
    else if (op_dtype_is_float(sdt)) op_store_f64(d, ddt, op_load_f64(s, sdt));
    else op_store_u64(d, ddt, op_load_u64(s, sdt));
}

#endif
