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
#include "half.h"

/* ---------------------------------------------------------------------------
 * Errors: one line into err, then return the code. */
void cpu_errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CPU_FAIL(code, ...) do { cpu_errf(err, errlen, __VA_ARGS__); return (code); } while (0)
#define CPU_FORWARD_IF_ERROR(expr) do { rgpu_status s_ = (expr); if (s_ != RGPU_OK) return s_; } while (0)

/* Checks a view is well formed (dtype, ndim, non-negative sizes/strides, data
 * present when numel > 0). what names it in the message ("in[0]"). */
rgpu_status cpu_check_view(const rgpu_view *v, const char *what, int op, char *err, size_t errlen);
/* Checks e against ops.def, in this order: n_in / n_out as the op's arity
 * says; with check_args, an args array when n_args > 0; every input and output
 * view with cpu_check_view, where in[i] / out[i] may be NULL only when bit i
 * of opt_in / opt_out is set. Each family calls it before its kernels. */
rgpu_status cpu_check_exec(const rgpu_exec *e, uint64_t opt_in, uint32_t opt_out, bool check_args,
                           char *err, size_t errlen);
int64_t cpu_numel(const rgpu_view *v);

/* ---------------------------------------------------------------------------
 * Element conversions. Semantics (ATen's, with UB replaced by clamping):
 *   float -> signed int: truncate toward zero, clamped to the target range, NaN -> 0
 *   float -> u8: truncate to int64 (clamped), then wrap mod 256 (c10 casts to
 *                uint8 through int64, so -1.0 -> 255)
 *   int -> narrower int: wrap (two's complement)
 *   x -> bool: x != 0 (NaN -> true); bool -> x: 0/1
 *   int64 -> f32 one rounding; anything -> f16/bf16 goes through f32. */
static inline int64_t cpu_f64_to_i64_sat(double x)
{
    if (x != x) return 0;
    if (x >= 9223372036854775808.0) return INT64_MAX;
    if (x <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)x;
}

static inline double cpu_clamp_trunc(double x, double lo, double hi)
{
    if (x != x) return 0.0;
    if (x < lo) return lo;
    if (x > hi) return hi;
    return x;
}

/* Load one element of dtype dt at p. */
static inline double cpu_load_f64(const char *p, int dt)
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
    default:        return 0.0;
    }
}

static inline float cpu_load_f32(const char *p, int dt)
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
    default:        return 0.0f;
    }
}

/* As int64 (floats truncated, clamped, NaN -> 0). Returned as uint64 so the
 * integer kernels can do wrapping arithmetic without signed-overflow UB. */
static inline uint64_t cpu_load_u64(const char *p, int dt)
{
    switch (dt) {
    case RGPU_F32:  return (uint64_t)cpu_f64_to_i64_sat(*(const float *)p);
    case RGPU_F64:  return (uint64_t)cpu_f64_to_i64_sat(*(const double *)p);
    case RGPU_F16:  return (uint64_t)cpu_f64_to_i64_sat(rgpu_half_to_float(*(const uint16_t *)p));
    case RGPU_BF16: return (uint64_t)cpu_f64_to_i64_sat(rgpu_bf16_to_float(*(const uint16_t *)p));
    case RGPU_I64:  return (uint64_t)*(const int64_t *)p;
    case RGPU_I32:  return (uint64_t)(int64_t)*(const int32_t *)p;
    case RGPU_I16:  return (uint64_t)(int64_t)*(const int16_t *)p;
    case RGPU_I8:   return (uint64_t)(int64_t)*(const int8_t *)p;
    case RGPU_U8:   return *(const uint8_t *)p;
    case RGPU_BOOL: return *(const uint8_t *)p != 0;
    default:        return 0;
    }
}

static inline bool cpu_load_bool(const char *p, int dt)
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
    default:        return false;
    }
}

/* Store a double into dtype dt at p (f16/bf16 via f32, as c10). */
static inline void cpu_store_f64(char *p, int dt, double v)
{
    switch (dt) {
    case RGPU_F32:  *(float *)p = (float)v; break;
    case RGPU_F64:  *(double *)p = v; break;
    case RGPU_F16:  *(uint16_t *)p = rgpu_float_to_half((float)v); break;
    case RGPU_BF16: *(uint16_t *)p = rgpu_float_to_bf16((float)v); break;
    case RGPU_I64:  *(int64_t *)p = cpu_f64_to_i64_sat(v); break;
    case RGPU_I32:  *(int32_t *)p = (int32_t)cpu_clamp_trunc(v, -2147483648.0, 2147483647.0); break;
    case RGPU_I16:  *(int16_t *)p = (int16_t)cpu_clamp_trunc(v, -32768.0, 32767.0); break;
    case RGPU_I8:   *(int8_t *)p = (int8_t)cpu_clamp_trunc(v, -128.0, 127.0); break;
    case RGPU_U8:   *(uint8_t *)p = (uint8_t)(uint64_t)cpu_f64_to_i64_sat(v); break;
    case RGPU_BOOL: *(uint8_t *)p = v != 0.0; break;
    default: break;
    }
}

/* Store a float (computed in f32 opmath) into dtype dt at p. */
static inline void cpu_store_f32(char *p, int dt, float v)
{
    switch (dt) {
    case RGPU_F32:  *(float *)p = v; break;
    case RGPU_F16:  *(uint16_t *)p = rgpu_float_to_half(v); break;
    case RGPU_BF16: *(uint16_t *)p = rgpu_float_to_bf16(v); break;
    default:        cpu_store_f64(p, dt, v); break;   /* exact widening, then as above */
    }
}

/* Store an int64 (given as its uint64 bit pattern): narrower ints wrap. */
static inline void cpu_store_u64(char *p, int dt, uint64_t v)
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
    default: break;
    }
}

static inline bool cpu_dtype_is_float(int dt)
{
    return dt == RGPU_F32 || dt == RGPU_F64 || dt == RGPU_F16 || dt == RGPU_BF16;
}

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

static inline void cpu_load_row_f64(double *dst, const char *src, int dt, int64_t s, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) dst[i] = cpu_load_f64(src + i * s, DT_)); }
static inline void cpu_load_row_f32(float *dst, const char *src, int dt, int64_t s, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) dst[i] = cpu_load_f32(src + i * s, DT_)); }
static inline void cpu_load_row_u64(uint64_t *dst, const char *src, int dt, int64_t s, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) dst[i] = cpu_load_u64(src + i * s, DT_)); }
static inline void cpu_load_row_bool(uint8_t *dst, const char *src, int dt, int64_t s, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) dst[i] = cpu_load_bool(src + i * s, DT_)); }
static inline void cpu_store_row_f64(char *dst, int dt, int64_t s, const double *src, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) cpu_store_f64(dst + i * s, DT_, src[i])); }
static inline void cpu_store_row_f32(char *dst, int dt, int64_t s, const float *src, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) cpu_store_f32(dst + i * s, DT_, src[i])); }
static inline void cpu_store_row_u64(char *dst, int dt, int64_t s, const uint64_t *src, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) cpu_store_u64(dst + i * s, DT_, src[i])); }

/* Elements per chunk when a row is converted through a compute-type buffer. */
#define CPU_CHUNK 256

/* ---------------------------------------------------------------------------
 * Strided N-d iterator.
 *
 * Operand 0 is the output; every operand is addressed over the output's
 * shape (inputs already broadcast: stride 0 on broadcast dims). Dims are
 * ordered by the output's strides (largest outermost), size-1 dims dropped
 * and mergeable dims coalesced, so a contiguous problem becomes one row.
 * run() calls row() once per innermost row: no div/mod per element. */
#define CPU_MAX_OPS 4

typedef struct cpu_iter {
    int nops;
    int ndim;                                   /* >= 1; ndim-1 is the inner dim */
    int64_t numel;
    int64_t sizes[RGPU_MAX_DIMS];
    int64_t strides[CPU_MAX_OPS][RGPU_MAX_DIMS];  /* bytes */
    char *base[CPU_MAX_OPS];
    int dtype[CPU_MAX_OPS];
} cpu_iter;

/* ptrs: first element of the row per operand; strides: bytes per operand. */
typedef void (*cpu_row_fn)(char *const *ptrs, const int64_t *strides, int64_t n, void *ctx);

/* Builds an iterator over out's shape. ins[k] (k < nin) are broadcast to out
 * (numpy rules, trailing dims aligned); a NULL in ins with scalar_data set
 * means "a 0-d operand at that address of that dtype" (stride 0 everywhere).
 * Returns RGPU_ERR_SHAPE with a message when an input does not broadcast. */
typedef struct cpu_operand {
    const rgpu_view *view;      /* or NULL for a scalar held in memory below */
    const void *scalar_data;
    int scalar_dtype;
} cpu_operand;

rgpu_status cpu_iter_init(cpu_iter *it, const rgpu_view *out, const cpu_operand *ins, int nin,
                          int op, char *err, size_t errlen);
void cpu_iter_run(const cpu_iter *it, cpu_row_fn row, void *ctx);

/* ---------------------------------------------------------------------------
 * Kernel families (one file each). */
rgpu_status cpu_reduce_sum_mean(const rgpu_exec *e, bool mean, char *err, size_t errlen);

#endif
