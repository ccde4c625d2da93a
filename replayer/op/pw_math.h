/* op/pw_math.h — the pointwise math that is not one libm call, for both
 * backends (cpu/cpu_pointwise_float.h, cuda/pointwise.cu): digamma,
 * trigamma, polygamma (with a Hurwitz zeta), erfinv, frexp's two halves and
 * signbit. Each comes in float (_f) and double (_d); the float ones compute
 * in float where ATen's CPU kernel does (digamma, trigamma), so both round
 * alike, and in double where ATen accumulates in double (zeta) or where a
 * double evaluation is simply closer (erfinv).
 *
 * Facts taken from ATen (native/Math.h), the code is ours: digamma(+-0) is
 * -+inf and NaN at the negative integers; digamma and trigamma reflect
 * arguments below 0 (0.5 for trigamma) and step up to 10 (6 steps for
 * trigamma) before the asymptotic series; polygamma(n >= 2, x) is
 * (-1)^(n+1) n! zeta(n+1, x); zeta(1, q) is inf, zeta(s < 1, q) NaN, and for
 * q <= 0: inf at the integers, NaN for a non-integer s. */
#ifndef RGPU_OP_PW_MATH_H
#define RGPU_OP_PW_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "half.h"
#include "op.h"

#define OP_PI_D 3.14159265358979323846
#define OP_PSI_10 2.25175258906672110764   /* digamma(10) = H_9 - Euler's gamma */

/* --- digamma: psi(x) = d/dx log Gamma(x) */

/* The asymptotic tail for x >= 10: log x - 1/(2x) - sum_k B_2k / (2k x^2k),
 * the sum to k = 7 as a polynomial in z = 1/x^2 (Horner, highest first). */
#define OP_PSI_SERIES(T, z) \
    ((z) * ((((((((T)(1.0 / 12) * (z) + (T)(-691.0 / 32760)) * (z) + (T)(1.0 / 132)) * (z) \
               + (T)(-1.0 / 240)) * (z) + (T)(1.0 / 252)) * (z) + (T)(-1.0 / 120)) * (z) + (T)(1.0 / 12))))

OP_FN double op_digamma_d(double x)
{
    if (x == 0) return copysign(INFINITY, -x);
    double refl = 0;
    if (x < 0) {
        if (x == trunc(x)) return NAN;
        /* psi(x) = psi(1 - x) - pi / tan(pi x); tan has period pi, so take
         * the fractional part (exact) rather than round pi * x */
        refl = OP_PI_D / tan(OP_PI_D * (x - trunc(x)));
        x = 1 - x;
    }
    double acc = 0;
    for (; x < 10; x += 1) acc -= 1 / x;
    if (x == 10) return acc + OP_PSI_10 - refl;
    double tail = 0;
    if (x < 1e17) {
        double z = 1 / (x * x);
        tail = OP_PSI_SERIES(double, z);
    }
    return acc + log(x) - 0.5 / x - tail - refl;
}

OP_FN float op_digamma_f(float x)
{
    if (x == 0) return copysignf(INFINITY, -x);
    float refl = 0;
    if (x < 0) {
        if (x == truncf(x)) return NAN;
        double xd = x;
        refl = (float)(OP_PI_D / tan(OP_PI_D * (xd - trunc(xd))));
        x = 1 - x;
    }
    float acc = 0;
    for (; x < 10; x += 1) acc -= 1 / x;
    if (x == 10) return acc + (float)OP_PSI_10 - refl;
    float tail = 0;
    if (x < 1e17f) {
        float z = 1 / (x * x);
        tail = OP_PSI_SERIES(float, z);
    }
    return acc + logf(x) - 0.5f / x - tail - refl;
}

/* --- trigamma: psi'(x). Reflection psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x)
 * below 0.5, six steps up, then 1/x + 1/(2x^2) + 1/(6x^3) - 1/(30x^5) + 1/(42x^7). */

OP_FN double op_trigamma_d(double x)
{
    double sign = 1, acc = 0;
    if (x < 0.5) {
        double s = sin(OP_PI_D * x);
        acc -= OP_PI_D * OP_PI_D / (s * s);
        sign = -1;
        x = 1 - x;
    }
    for (int i = 0; i < 6; i++, x += 1) acc += 1 / (x * x);
    double w = 1 / (x * x);
    acc += (1 + 1 / (2 * x) + w * (1.0 / 6 - w * (1.0 / 30 - w * (1.0 / 42)))) / x;
    return sign * acc;
}

OP_FN float op_trigamma_f(float x)
{
    const float pi = (float)OP_PI_D;
    float sign = 1, acc = 0;
    if (x < 0.5f) {
        float s = sinf(pi * x);
        acc -= pi * pi / (s * s);
        sign = -1;
        x = 1 - x;
    }
    for (int i = 0; i < 6; i++, x += 1) acc += 1 / (x * x);
    float w = 1 / (x * x);
    acc += (1 + 1 / (2 * x) + w * (1.0f / 6 - w * (1.0f / 30 - w * (1.0f / 42)))) / x;
    return sign * acc;
}

/* --- Hurwitz zeta(s, q) = sum_k (q + k)^-s, by Euler-Maclaurin: the first
 * terms summed until a = q + N >= max(10, s), then
 * a^(1-s)/(s-1) + a^-s/2 + sum_j B_2j/(2j)! s(s+1)..(s+2j-2) a^(-s-2j+1). */

OP_FN double op_zeta_d(double s, double q)
{
    if (s == 1) return INFINITY;
    if (s < 1) return NAN;   /* NaN s too */
    if (q <= 0) {
        if (q == floor(q)) return INFINITY;
        if (s != floor(s)) return NAN;
    }
    double sum = 0, a = q;
    for (int k = 0; (a < 10 || a < s) && k < 100000; k++, a += 1) sum += pow(a, -s);
    double p = pow(a, -s);
    sum += a * p / (s - 1) + 0.5 * p;
    /* B_2j / (2j)! for j = 1..10 */
    const double b0 = 8.333333333333333e-02, b1 = -1.388888888888889e-03, b2 = 3.306878306878307e-05,
                 b3 = -8.267195767195768e-07, b4 = 2.08767569878681e-08, b5 = -5.284190138687493e-10,
                 b6 = 1.3382536530684679e-11, b7 = -3.3896802963225827e-13, b8 = 8.586062056277845e-15,
                 b9 = -2.174868698558062e-16;
    double bj[10] = { b0, b1, b2, b3, b4, b5, b6, b7, b8, b9 };
    double f = s * p / a, ia2 = 1 / (a * a);   /* s a^(-s-1) */
    for (int j = 0; j < 10; j++) {
        double t = bj[j] * f;
        sum += t;
        if (fabs(t) <= 1e-17 * fabs(sum)) break;
        f *= (s + 2 * j + 1) * (s + 2 * j + 2) * ia2;
    }
    return sum;
}

/* polygamma(n, x): digamma, trigamma, else (-1)^(n+1) n! zeta(n+1, x). n >= 0. */
OP_FN double op_polygamma_d(int64_t n, double x)
{
    if (n == 0) return op_digamma_d(x);
    if (n == 1) return op_trigamma_d(x);
    double fact = 1;
    for (int64_t k = 2; k <= n; k++) fact *= (double)k;
    return ((n & 1) ? fact : -fact) * op_zeta_d((double)(n + 1), x);
}

OP_FN float op_polygamma_f(int64_t n, float x)
{
    if (n == 0) return op_digamma_f(x);
    if (n == 1) return op_trigamma_f(x);
    float fact = 1;
    for (int64_t k = 2; k <= n; k++) fact *= (float)k;
    return ((n & 1) ? fact : -fact) * (float)op_zeta_d((double)(n + 1), (double)x);
}

/* --- erfinv: Winitzki's closed form as the start, then Halley steps on
 * erf(x) - y, the residual taken as (1 - y) - erfc(x) past 0.5 so it keeps
 * its digits near 1. |y| > 1: NaN; +-1: +-inf. */

OP_FN double op_erfinv_d(double y)
{
    double ay = fabs(y);
    if (ay > 1) return NAN;
    if (ay == 1) return copysign(INFINITY, y);
    if (ay != ay) return y;
    const double a = 0.147, two_over_sqrtpi = 1.12837916709551257390;
    double l = log((1 - ay) * (1 + ay));
    double t = 2 / (OP_PI_D * a) + 0.5 * l;
    double x = sqrt(sqrt(t * t - l / a) - t);
    for (int i = 0; i < 3; i++) {
        double r = ay < 0.5 ? erf(x) - ay : (1 - ay) - erfc(x);
        double u = r / (two_over_sqrtpi * exp(-x * x));
        x -= u / (1 + x * u);
    }
    return copysign(x, y);
}

OP_FN float op_erfinv_f(float y) { return (float)op_erfinv_d((double)y); }

/* --- frexp: x = m 2^e, |m| in [0.5, 1) (m = x, e = 0 for 0, inf, NaN) */

OP_FN double op_frexp_mantissa_d(double x) { int e; return frexp(x, &e); }
OP_FN float op_frexp_mantissa_f(float x) { int e; return frexpf(x, &e); }
OP_FN double op_frexp_exponent_d(double x)
{
    int e = 0;
    if (isfinite(x)) frexp(x, &e);
    return (double)e;
}
OP_FN float op_frexp_exponent_f(float x)
{
    int e = 0;
    if (isfinite(x)) frexpf(x, &e);
    return (float)e;
}

/* --- nextafter in f16 / bf16 (ATen steps in the 16-bit type): a and b are
 * values of that type held in float; the neighbour of a towards b. */
OP_FN float op_nextafter_half(float a, float b, bool bf16)
{
    if (a != a || b != b) return a + b;   /* NaN */
    if (a == b) return b;
    if (a == 0) return copysignf(bf16 ? 9.18354961579912115600e-41f : 5.96046447753906250000e-08f, b);
    uint16_t h = bf16 ? rgpu_float_to_bf16(a) : rgpu_float_to_half(a);
    h = (uint16_t)(((a < b) == (a > 0)) ? h + 1 : h - 1);   /* away from / towards zero */
    return bf16 ? rgpu_bf16_to_float(h) : rgpu_half_to_float(h);
}

/* --- signbit: set for -0, negative values and NaNs with the sign bit */
OP_FN bool op_signbit_d(double x) { return signbit(x) != 0; }
OP_FN bool op_signbit_f(float x) { return signbit(x) != 0; }

#endif
