/* cpu_vmath.h — math row functions of the cpu backend that the compiler
 * cannot vectorise from the libm call: r[i] = f(a[i]) for i < n, r may be a
 * (in place), results bit-identical to the libm expression they replace.
 *
 * sqrt: C's sqrtf/sqrt must set errno for a negative argument (-std=c11 keeps
 * -fmath-errno), so a plain loop over them stays scalar with a call per
 * negative input. The sqrt instructions are the same correctly rounded IEEE
 * square root (the one libm itself uses), NaN for negatives, minus errno:
 * float rows take the widest this CPU has (cpu_vmath_kern.h), double rows
 * SSE2's below. Elsewhere the libm loop stays. */
#ifndef RGPU_CPU_VMATH_H
#define RGPU_CPU_VMATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static inline void vm_sqrt_f64(double *r, const double *a, int64_t n)
{
    int64_t i = 0;
#if defined(__SSE2__)
    for (; i + 2 <= n; i += 2) _mm_storeu_pd(r + i, _mm_sqrt_pd(_mm_loadu_pd(a + i)));
#endif
    for (; i < n; i++) r[i] = sqrt(a[i]);
}

static inline void vm_rsqrt_f64(double *r, const double *a, int64_t n)
{
    int64_t i = 0;
#if defined(__SSE2__)
    const __m128d one = _mm_set1_pd(1.0);
    for (; i + 2 <= n; i += 2) _mm_storeu_pd(r + i, _mm_div_pd(one, _mm_sqrt_pd(_mm_loadu_pd(a + i))));
#endif
    for (; i < n; i++) r[i] = 1.0 / sqrt(a[i]);
}

/* ---------------------------------------------------------------------------
 * Rows without libm (cpu_vmath_kern.h, one build per ISA, cpu_vmath.c picks
 * one; every build gives the same bits). Float results are computed in double
 * and rounded once (within 1 ulp, nearly always the correctly rounded value).
 * r may be a. exp_d2f is exp for double rows whose results end up in float
 * (softmax of f32/f16/bf16): argument clamped to [-708, 709], below -708 0. */
void rgpu_vm_exp_f32(float *r, const float *a, int64_t n);
void rgpu_vm_erf_f32(float *r, const float *a, int64_t n);
void rgpu_vm_tanh_f32(float *r, const float *a, int64_t n);
void rgpu_vm_exp_d2f(double *r, const double *a, int64_t n);
/* Reduction rows, bit-identical on every build too: sum_* is the sum of a
 * contiguous row in double in a fixed order of 32 lanes (cpu_vmath_kern.h);
 * acc_* adds a row into n double accumulators (acc[i] += q[i]). */
double rgpu_vm_sum_f32(const float *q, int64_t n);
double rgpu_vm_sum_f64(const double *q, int64_t n);
void rgpu_vm_acc_f32(double *acc, const float *q, int64_t n);
void rgpu_vm_acc_f64(double *acc, const double *q, int64_t n);
/* sqrt, 1/sqrt of float rows at this CPU's width (IEEE sqrt: the same bits on every build) */
void rgpu_vm_sqrt_f32(float *r, const float *a, int64_t n);
void rgpu_vm_rsqrt_f32(float *r, const float *a, int64_t n);
/* float <-> bfloat16 rows (cpu_f32_to_bf16's rounding; restrict: no overlap) */
void rgpu_vm_f32_to_bf16(uint16_t *r, const float *a, int64_t n);
void rgpu_vm_bf16_to_f32(float *r, const uint16_t *a, int64_t n);
/* float <-> double rows; layer / rms norm rows of cpu_reduce2_norm.c
 * (cpu_vmath_kern.h says what they compute; every build the same bits) */
void rgpu_vm_f32_to_f64(double *r, const float *a, int64_t n);
void rgpu_vm_f64_to_f32(float *r, const double *a, int64_t n);
void rgpu_vm_ln_row(double *b, int64_t N, const double *w, const double *bias, double eps, bool rms,
                    double *mu, double *rs);
void rgpu_vm_ln_bw_row(const double *g, double *x, double *gw, double *dw, double *db, const double *w,
                       int64_t N, double mu, double rs, bool rms, bool want_dx);
double rgpu_vm_max_f64(const double *b, int64_t n);       /* NaN if any is NaN */
void rgpu_vm_softmax_row(double *b, double *ex, int64_t n, bool is_log);
void rgpu_vm_softmax_bw_row(double *g, double *y, int64_t n, bool is_log);
/* the build in use ("base", "avx2", "avx512"); set_isa switches to one the
 * CPU has (false: unknown or not available here) — for tests */
const char *rgpu_vm_isa(void);
bool rgpu_vm_set_isa(const char *isa);

#endif
