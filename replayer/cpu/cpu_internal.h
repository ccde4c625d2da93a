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
#include "op/iter.h"

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
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) dst[i] = op_load_f64(src + i * s, DT_)); }
static inline void cpu_load_row_f32(float *dst, const char *src, int dt, int64_t s, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) dst[i] = op_load_f32(src + i * s, DT_)); }
static inline void cpu_load_row_u64(uint64_t *dst, const char *src, int dt, int64_t s, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) dst[i] = op_load_u64(src + i * s, DT_)); }
static inline void cpu_load_row_bool(uint8_t *dst, const char *src, int dt, int64_t s, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) dst[i] = op_load_bool(src + i * s, DT_)); }
static inline void cpu_store_row_f64(char *dst, int dt, int64_t s, const double *src, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) op_store_f64(dst + i * s, DT_, src[i])); }
static inline void cpu_store_row_f32(char *dst, int dt, int64_t s, const float *src, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) op_store_f32(dst + i * s, DT_, src[i])); }
static inline void cpu_store_row_u64(char *dst, int dt, int64_t s, const uint64_t *src, int64_t n)
{ CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) op_store_u64(dst + i * s, DT_, src[i])); }

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
