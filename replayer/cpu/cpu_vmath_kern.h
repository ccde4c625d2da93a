/* cpu_vmath_kern.h — the cpu backend's vector math rows, one body compiled
 * once per instruction set (cpu_vmath_sse2.c, _avx2.c, _avx512.c define
 * VM_SUFFIX and include this). cpu_vmath.c picks one table at run time.
 *
 * Each row is plain loops over lanes with no branch and no libm call inside
 * them (a row's one log or sqrt is scalar), so the compiler vectorises them
 * at the width its ISA has; where it cannot see the instruction (the max, a
 * compressed list of lanes) intrinsics of each ISA say it. Every lane does
 * the same IEEE double operations in the same order (no contraction: -std=c11
 * and -ffp-contract=off; no reassociation; sums in documented lane orders),
 * so the SSE2, AVX2 and AVX-512 builds give bit-identical results and a trace
 * replays bitwise on any x86-64 host (tests/c/test_cpu_vmath.c checks the
 * three against each other and against the documented orders).
 *
 * Float results are computed in double and rounded once: within 1 ulp of
 * the true value, equal to the correctly rounded one but for rare ties
 * (glibc's expf/erff/tanhf are also within 1 ulp; ATen's vectorised
 * float versions are too). Only for float results: exp clamps its argument
 * to [-708, 709] (results rounded to float from there are 0 and inf). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#if defined(VM_AVX512) || defined(VM_AVX2)
#include <immintrin.h>      /* intrinsics inside VM_TARGET functions only */
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF   /* clang contracts a*b+c by default, even in ISO C mode */
#endif
#ifndef VM_TARGET
#define VM_TARGET            /* the includer's ISA attribute, if any (GCC and clang) */
#endif
#define VM_CAT2(a, b) a##b
#define VM_CAT(a, b) VM_CAT2(a, b)
#define VM(name) VM_CAT(name, VM_SUFFIX)

#define VM_LOG2E  0x1.71547652b82fep+0
#define VM_LN2_HI 0x1.62e42fee00000p-1     /* n * LN2_HI exact for |n| < 2^11 */
#define VM_LN2_LO 0x1.a39ef35793c76p-33
#define VM_SHIFTER 0x1.8p52                /* x + SHIFTER: x rounded to an integer, in the low bits */

/* exp(x) for x in [-708, 709] (clamped there; below -708 gives 0; NaN stays
 * NaN): x = n ln2 + r, |r| <= ln2/2, exp(r) by its Taylor polynomial of
 * degree 12 (truncation < 2.7e-16 relative), times 2^n built in the exponent
 * bits. */
VM_TARGET static inline double VM(exp_core)(double x)
{
    double xc = x < -708.0 ? -708.0 : x;
    xc = xc > 709.0 ? 709.0 : xc;
    double k = xc * VM_LOG2E + VM_SHIFTER;
    double n = k - VM_SHIFTER;
    double r = (xc - n * VM_LN2_HI) - n * VM_LN2_LO;
    /* Estrin's scheme: Horner's terms in a tree of depth 4 instead of a
     * chain of 12, so consecutive vectors overlap in the pipeline */
    double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    double e0 = 1.0 + r, e1 = 1.0 / 2 + r * (1.0 / 6), e2 = 1.0 / 24 + r * (1.0 / 120);
    double e3 = 1.0 / 720 + r * (1.0 / 5040), e4 = 1.0 / 40320 + r * (1.0 / 362880);
    double e5 = 1.0 / 3628800 + r * (1.0 / 39916800), e6 = 1.0 / 479001600;
    double f0 = e0 + e1 * r2, f1 = e2 + e3 * r2, f2 = e4 + e5 * r2;
    double g0 = f0 + f1 * r4, g1 = f2 + e6 * r4;
    double p = g0 + g1 * r8;
    int64_t kb, sb;
    memcpy(&kb, &k, sizeof kb);
    sb = (kb - (int64_t)0x4338000000000000 + 1023) << 52;   /* 2^n: n = bits(k) - bits(SHIFTER) */
    double s;
    memcpy(&s, &sb, sizeof s);
    double y = p * s;
    return x < -708.0 ? 0.0 : y;
}

/* erf(a) = a * P(a^2), a < 1: fit error 3.9e-16 */
static const double VM_ERF_P[11] = { 0x1.43f6d0dee7032p-27, -0x1.462a758d4591dp-23, 0x1.b5d3ea9fd0b5ap-20, -0x1.f4684782919e8p-17, 0x1.f99c295886f05p-14, -0x1.c02d67e37081ep-11, 0x1.565bcb082cca2p-8, -0x1.b82ce3026aae0p-6, 0x1.ce2f21a000d30p-4, -0x1.812746b037352p-2, 0x1.20dd750429b6bp+0 };
/* erfc(a) exp(a^2) = G(a - 2.5), 1 <= a <= 4: fit error 6.8e-15 */
static const double VM_ERFC_G[20] = { -0x1.f472c0fa9bb00p-39, 0x1.2627408a336eap-36, -0x1.4954597374e03p-35, 0x1.6ae04b5e6c000p-33, -0x1.f121e6b2c9f44p-31, 0x1.0d1854aa723a7p-28, -0x1.153659e3c140dp-26, 0x1.1faa63edc36c4p-24, -0x1.251df40e01cb3p-22, 0x1.235b30bc83cf0p-20, -0x1.1ad0b2f0cda92p-18, 0x1.0bcb3563c2553p-16, -0x1.edd4278d24e11p-15, 0x1.ba8a6c980785ap-13, -0x1.809ce8a02830bp-11, 0x1.435c04d484d65p-9, -0x1.0632076816160p-7, 0x1.98958a7aabd72p-6, -0x1.3086d7f01ac3fp-4, 0x1.afbb3f3b73391p-3 };

/* erf(x) for float results: |x| < 1 as x P(x^2); 1 <= |x| < 4 as
 * 1 - exp(-x^2) G(|x| - 2.5) (erf_big); beyond, +-1 (erfc(4) < half an ulp
 * of 1.0f). erf_small gives every lane but those of erf_big. */
VM_TARGET static inline double VM(erf_small)(double x)
{
    double a = x < 0 ? -x : x;
    double u = a * a;                   /* exact for a float's 24 bits */
    /* Estrin's scheme (see exp_core); Q(C, N, k) is the coefficient of x^k */
#define Q_(C, N, k) C[(N) - 1 - (k)]
#define P_(k) Q_(VM_ERF_P, 11, k)
    double u2 = u * u, u4 = u2 * u2, u8 = u4 * u4;
    double pe0 = P_(0) + P_(1) * u, pe1 = P_(2) + P_(3) * u, pe2 = P_(4) + P_(5) * u;
    double pe3 = P_(6) + P_(7) * u, pe4 = P_(8) + P_(9) * u;
    double pf0 = pe0 + pe1 * u2, pf1 = pe2 + pe3 * u2, pf2 = pe4 + P_(10) * u2;
    double p = (pf0 + pf1 * u4) + pf2 * u8;
#undef P_
    double one = x < 0 ? -1.0 : 1.0;
    double y = a < 1.0 ? x * p : one;   /* x * p keeps the sign of -0 */
    return x != x ? x : y;
}

VM_TARGET static inline double VM(erf_big)(double x)
{
    double a = x < 0 ? -x : x;
    double u = a * a;
    double t = (a < 4.0 ? a : 4.0) - 2.5;
#define G_(k) Q_(VM_ERFC_G, 20, k)
    double t2 = t * t, t4 = t2 * t2, t8 = t4 * t4, t16 = t8 * t8;
    double ge0 = G_(0) + G_(1) * t, ge1 = G_(2) + G_(3) * t, ge2 = G_(4) + G_(5) * t;
    double ge3 = G_(6) + G_(7) * t, ge4 = G_(8) + G_(9) * t, ge5 = G_(10) + G_(11) * t;
    double ge6 = G_(12) + G_(13) * t, ge7 = G_(14) + G_(15) * t, ge8 = G_(16) + G_(17) * t;
    double ge9 = G_(18) + G_(19) * t;
    double gf0 = ge0 + ge1 * t2, gf1 = ge2 + ge3 * t2, gf2 = ge4 + ge5 * t2, gf3 = ge6 + ge7 * t2;
    double gf4 = ge8 + ge9 * t2;
    double gh0 = gf0 + gf1 * t4, gh1 = gf2 + gf3 * t4;
    double g = (gh0 + gh1 * t8) + gf4 * t16;
#undef G_
#undef Q_
    double big = 1.0 - VM(exp_core)(-(u < 16.0 ? u : 16.0)) * g;
    return x < 0 ? -big : big;
}

/* tanh(x) for float results: |x| < 1/16 by its Taylor series to x^9
 * (truncation < 4e-13 relative); else 1 - 2 / (exp(2|x|) + 1), whose
 * cancellation costs < 2e-15 relative there. */
VM_TARGET static inline double VM(tanh_core)(double x)
{
    double a = x < 0 ? -x : x;
    double u = a * a;
    double small = x + x * u * (-1.0 / 3.0 + u * (2.0 / 15.0 + u * (-17.0 / 315.0 + u * (62.0 / 2835.0))));
    double big = 1.0 - 2.0 / (VM(exp_core)(a + a) + 1.0);
    big = x < 0 ? -big : big;
    small = a < 0x1p-30 ? x : small;        /* tanh(x) rounds to x there; keeps -0 */
    double y = a < 0.0625 ? small : big;
    return x != x ? x : y;
}

VM_TARGET void VM(rgpu_vm_exp_f32)(float *r, const float *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) r[i] = (float)VM(exp_core)((double)a[i]);
}

/* The lanes of ab[0..m) that erf_big takes (1 <= |x| < 4, by |x|'s bits:
 * bits - bits(1.0f) < bits(4.0f) - bits(1.0f), false for NaN and inf),
 * their indices in order into at (room for m + 16) and their arguments into
 * xb (the same); returns how many. Every build lists the same lanes. */
VM_TARGET static inline int VM(erf_list_big)(const float *ab, int64_t m, int32_t *at, float *xb)
{
    int k = 0;
    int64_t i = 0;
#if defined(VM_AVX512)
    /* sixteen lanes per step: a compare to a mask, the lanes compressed in
     * a register (compress to memory is microcoded on some CPUs) and stored
     * whole; the next step writes over the unused tail */
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), lo = _mm512_set1_epi32(0x3f800000);
    const __m512i span = _mm512_set1_epi32(0x01000000), step = _mm512_set1_epi32(16);
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (; i + 16 <= m; i += 16) {
        __m512i v = _mm512_loadu_si512((const void *)(ab + i));
        __mmask16 mk = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(_mm512_and_si512(v, absm), lo), span);
        _mm512_storeu_si512((void *)(at + k), _mm512_maskz_compress_epi32(mk, idx));
        _mm512_storeu_si512((void *)(xb + k), _mm512_maskz_compress_epi32(mk, v));
        k += __builtin_popcount((unsigned)mk);
        idx = _mm512_add_epi32(idx, step);
    }
#endif
    for (; i < m; i++) {                    /* branch-free */
        uint32_t u;
        memcpy(&u, &ab[i], sizeof u);
        at[k] = (int32_t)i;
        xb[k] = ab[i];
        k += ((u & 0x7fffffffu) - 0x3f800000u) < 0x01000000u;
    }
    return k;
}

/* erf_small on every lane, erf_big only on the lanes that need it (about a
 * sixth of a GELU's arguments): listed first (before r, which may be a, is
 * written), computed apart and stored back over erf_small's values; each
 * element gets the same operations as a select of the two would give it. */
VM_TARGET void VM(rgpu_vm_erf_f32)(float *r, const float *a, int64_t n)
{
    enum { BLK = 256 };
    float xb[BLK + 16], yb[BLK];
    int32_t at[BLK + 16];
    for (int64_t i0 = 0; i0 < n; i0 += BLK) {
        int64_t m = n - i0 < BLK ? n - i0 : BLK;
        const float *ab = a + i0;
        float *rb = r + i0;
        int k = VM(erf_list_big)(ab, m, at, xb);
        for (int64_t i = 0; i < m; i++) rb[i] = (float)VM(erf_small)((double)ab[i]);
        for (int j = 0; j < k; j++) yb[j] = (float)VM(erf_big)((double)xb[j]);
        for (int j = 0; j < k; j++) rb[at[j]] = yb[j];
    }
}

VM_TARGET void VM(rgpu_vm_tanh_f32)(float *r, const float *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) r[i] = (float)VM(tanh_core)((double)a[i]);
}

/* Sums of float32 or float64 rows into double: VM_SUM_LANES partial sums
 * (lane j takes the elements j mod VM_SUM_LANES), added pairwise in a fixed
 * tree, then the tail in order. 32 lanes: four AVX-512 (eight AVX2)
 * accumulators, so the adds overlap instead of waiting on one register;
 * every ISA adds the same numbers in the same order. */
#define VM_SUM_LANES 32
#define VM_SUM_BODY(LD) do {                                                    \
        double a_[VM_SUM_LANES] = {0};                                          \
        int64_t i_ = 0;                                                         \
        for (; i_ + VM_SUM_LANES <= n; i_ += VM_SUM_LANES)                      \
            for (int j_ = 0; j_ < VM_SUM_LANES; j_++) a_[j_] += LD(i_ + j_);    \
        for (int w_ = VM_SUM_LANES / 2; w_ >= 1; w_ /= 2)                       \
            for (int j_ = 0; j_ < w_; j_++) a_[j_] = a_[j_] + a_[j_ + w_];      \
        double t_ = a_[0];                                                      \
        for (; i_ < n; i_++) t_ += LD(i_);                                      \
        return t_;                                                              \
    } while (0)

VM_TARGET double VM(rgpu_vm_sum_f32)(const float *q, int64_t n)
{
#define VM_LDF_(i) (double)q[i]
    VM_SUM_BODY(VM_LDF_);
#undef VM_LDF_
}

VM_TARGET double VM(rgpu_vm_sum_f64)(const double *q, int64_t n)
{
#define VM_LDD_(i) q[i]
    VM_SUM_BODY(VM_LDD_);
#undef VM_LDD_
}
#undef VM_SUM_BODY

/* acc[i] += q[i] (float32 or float64 q), element by element: a row of a
 * reduction over rows (sum(0): each column its own sum, in row order). */
VM_TARGET void VM(rgpu_vm_acc_f32)(double *restrict acc, const float *restrict q, int64_t n)
{
    for (int64_t i = 0; i < n; i++) acc[i] += (double)q[i];
}

VM_TARGET void VM(rgpu_vm_acc_f64)(double *restrict acc, const double *restrict q, int64_t n)
{
    for (int64_t i = 0; i < n; i++) acc[i] += q[i];
}

/* sqrt and 1 / sqrt of float rows (rounded twice, as ATen's rsqrt): the
 * IEEE square root instruction of each ISA (correctly rounded: the same bits
 * everywhere; libm's sqrtf would also set errno for a negative argument,
 * which keeps the compiler from vectorising a loop over it). */
VM_TARGET void VM(rgpu_vm_sqrt_f32)(float *r, const float *a, int64_t n)
{
    int64_t i = 0;
#if defined(VM_AVX512)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(r + i, _mm512_sqrt_ps(_mm512_loadu_ps(a + i)));
#elif defined(VM_AVX2)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(r + i, _mm256_sqrt_ps(_mm256_loadu_ps(a + i)));
#elif defined(__SSE2__)
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(r + i, _mm_sqrt_ps(_mm_loadu_ps(a + i)));
#endif
    for (; i < n; i++) r[i] = sqrtf(a[i]);
}

VM_TARGET void VM(rgpu_vm_rsqrt_f32)(float *r, const float *a, int64_t n)
{
    int64_t i = 0;
#if defined(VM_AVX512)
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(r + i, _mm512_div_ps(one, _mm512_sqrt_ps(_mm512_loadu_ps(a + i))));
#elif defined(VM_AVX2)
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(r + i, _mm256_div_ps(one, _mm256_sqrt_ps(_mm256_loadu_ps(a + i))));
#elif defined(__SSE2__)
    const __m128 one = _mm_set1_ps(1.0f);
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(r + i, _mm_div_ps(one, _mm_sqrt_ps(_mm_loadu_ps(a + i))));
#endif
    for (; i < n; i++) r[i] = 1.0f / sqrtf(a[i]);
}

/* float <-> bfloat16 rows: round to nearest even on the bits, NaN to the
 * quiet 0x7fc0 (cpu_internal.h's cpu_f32_to_bf16, lane by lane), and the
 * exact widening back: integer operations, the same bits on every build. */
VM_TARGET void VM(rgpu_vm_f32_to_bf16)(uint16_t *restrict r, const float *restrict a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, &a[i], 4);
        uint32_t q = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
        r[i] = (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : q);
    }
}

VM_TARGET void VM(rgpu_vm_bf16_to_f32)(float *restrict r, const uint16_t *restrict a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)a[i] << 16;
        memcpy(&r[i], &x, 4);
    }
}

/* Conversions between float and double rows (exact one way, IEEE rounding
 * the other: the same on every build). */
VM_TARGET void VM(rgpu_vm_f32_to_f64)(double *restrict r, const float *restrict a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) r[i] = (double)a[i];
}

VM_TARGET void VM(rgpu_vm_f64_to_f32)(float *restrict r, const double *restrict a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) r[i] = (float)a[i];
}

/* The sum of n doubles in 8 lanes (lane j the elements j mod 8), the lanes
 * added ((0+1)+(2+3))+((4+5)+(6+7)), then the tail in order: cpu_reduce2's
 * R2_LANE_SUM order, which these rows keep. */
#define VM_LANE8_SUM(n, LOAD, out) do {                                         \
        double a_[8] = {0};                                                     \
        int64_t i_ = 0;                                                         \
        for (; i_ + 8 <= (n); i_ += 8)                                          \
            for (int j_ = 0; j_ < 8; j_++) a_[j_] += LOAD(i_ + j_);             \
        double t_ = ((a_[0] + a_[1]) + (a_[2] + a_[3])) + ((a_[4] + a_[5]) + (a_[6] + a_[7])); \
        for (; i_ < (n); i_++) t_ += LOAD(i_);                                  \
        (out) = t_;                                                             \
    } while (0)

/* Layer norm (rms: mean taken as 0) of one row of N >= 1 doubles in place:
 * mu = sum(b) / N, var = sum((b - mu)^2) / N, rs = 1 / sqrt(var + eps),
 * b = (b - mu) * rs * w + bias (cpu_reduce2_norm.c's forward). */
VM_TARGET void VM(rgpu_vm_ln_row)(double *restrict b, int64_t N, const double *restrict w,
                                  const double *restrict bias, double eps, bool rms, double *mu_out, double *rs_out)
{
    double rN = 1.0 / (double)N, mu = 0.0, var;
    if (!rms) {
#define VM_LD_(i) b[i]
        VM_LANE8_SUM(N, VM_LD_, mu);
#undef VM_LD_
        mu *= rN;
    }
#define VM_LD_(i) ((b[i] - mu) * (b[i] - mu))
    VM_LANE8_SUM(N, VM_LD_, var);
#undef VM_LD_
    var *= rN;
    double rs = 1.0 / __builtin_sqrt(var + eps);     /* a NaN from a negative sum is the answer */
    for (int64_t i = 0; i < N; i++) b[i] = (b[i] - mu) * rs * w[i] + bias[i];
    *mu_out = mu;
    *rs_out = rs;
}

/* Layer norm backward of one row of N >= 1 (cpu_reduce2_norm.c): g the
 * gradient, x the input (becomes xhat, then dx when want_dx), gw scratch;
 * dw[i] += g xhat, db[i] += g; dx = rs (g w - mean(g w) - xhat mean(g w xhat))
 * (rms: without the mean(g w) term). */
VM_TARGET void VM(rgpu_vm_ln_bw_row)(const double *restrict g, double *restrict x, double *restrict gw,
                                     double *restrict dw, double *restrict db, const double *restrict w,
                                     int64_t N, double mu, double rs, bool rms, bool want_dx)
{
    for (int64_t i = 0; i < N; i++) x[i] = (x[i] - mu) * rs;      /* xhat */
    for (int64_t i = 0; i < N; i++) gw[i] = g[i] * w[i];
    for (int64_t i = 0; i < N; i++) dw[i] += g[i] * x[i];
    for (int64_t i = 0; i < N; i++) db[i] += g[i];
    if (!want_dx) return;
    double rN = 1.0 / (double)N, sgw, sgwx;
#define VM_LD_(i) gw[i]
    VM_LANE8_SUM(N, VM_LD_, sgw);
#undef VM_LD_
#define VM_LD_(i) (gw[i] * x[i])
    VM_LANE8_SUM(N, VM_LD_, sgwx);
#undef VM_LD_
    double a = rms ? 0.0 : sgw * rN, bq = sgwx * rN;
    for (int64_t i = 0; i < N; i++) x[i] = rs * (gw[i] - a - x[i] * bq);
}
/* The max of n doubles, NaN if any is NaN: lane j keeps m = v > m ? v : m
 * over the elements j mod 8, the lanes are folded in order 0..7, then the
 * tail (the sign of a zero max never shows in a softmax or a logsumexp). */
VM_TARGET static inline double VM(row_max)(const double *restrict b, int64_t n)
{
    double m[8], un[8];
    for (int j = 0; j < 8; j++) { m[j] = -__builtin_inf(); un[j] = 0.0; }
    int64_t i = 0;
    /* m = x > m ? x : m is the max instruction exactly (its second operand
     * when either is NaN), which the compiler does not find in the select */
#if defined(VM_AVX512)
    __m512d v = _mm512_set1_pd(-__builtin_inf());
    __mmask8 bad = 0;
    for (; i + 8 <= n; i += 8) {
        __m512d x = _mm512_loadu_pd(b + i);
        v = _mm512_max_pd(x, v);
        bad |= _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q);
    }
    _mm512_storeu_pd(m, v);
    un[0] = bad ? 1.0 : 0.0;
#elif defined(VM_AVX2)
    __m256d v0 = _mm256_set1_pd(-__builtin_inf()), v1 = v0, u = _mm256_setzero_pd();
    for (; i + 8 <= n; i += 8) {
        __m256d x0 = _mm256_loadu_pd(b + i), x1 = _mm256_loadu_pd(b + i + 4);
        v0 = _mm256_max_pd(x0, v0);
        v1 = _mm256_max_pd(x1, v1);
        u = _mm256_or_pd(u, _mm256_or_pd(_mm256_cmp_pd(x0, x0, _CMP_UNORD_Q), _mm256_cmp_pd(x1, x1, _CMP_UNORD_Q)));
    }
    _mm256_storeu_pd(m, v0);
    _mm256_storeu_pd(m + 4, v1);
    un[0] = _mm256_movemask_pd(u) ? 1.0 : 0.0;
#elif defined(__SSE2__)
    __m128d v0 = _mm_set1_pd(-__builtin_inf()), v1 = v0, v2 = v0, v3 = v0, u = _mm_setzero_pd();
    for (; i + 8 <= n; i += 8) {
        __m128d x0 = _mm_loadu_pd(b + i), x1 = _mm_loadu_pd(b + i + 2);
        __m128d x2 = _mm_loadu_pd(b + i + 4), x3 = _mm_loadu_pd(b + i + 6);
        v0 = _mm_max_pd(x0, v0); v1 = _mm_max_pd(x1, v1);
        v2 = _mm_max_pd(x2, v2); v3 = _mm_max_pd(x3, v3);
        u = _mm_or_pd(u, _mm_or_pd(_mm_or_pd(_mm_cmpunord_pd(x0, x0), _mm_cmpunord_pd(x1, x1)),
                                   _mm_or_pd(_mm_cmpunord_pd(x2, x2), _mm_cmpunord_pd(x3, x3))));
    }
    _mm_storeu_pd(m, v0); _mm_storeu_pd(m + 2, v1); _mm_storeu_pd(m + 4, v2); _mm_storeu_pd(m + 6, v3);
    un[0] = _mm_movemask_pd(u) ? 1.0 : 0.0;
#else
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) {
            double x = b[i + j];
            m[j] = x > m[j] ? x : m[j];
            un[j] = x != x ? 1.0 : un[j];
        }
#endif
    double mx = -__builtin_inf();
    bool nan = false;
    for (int j = 0; j < 8; j++) { mx = m[j] > mx ? m[j] : mx; nan |= un[j] != 0.0; }
    for (; i < n; i++) { mx = b[i] > mx ? b[i] : mx; nan |= b[i] != b[i]; }
    return nan ? __builtin_nan("") : mx;
}

VM_TARGET double VM(rgpu_vm_max_f64)(const double *b, int64_t n) { return VM(row_max)(b, n); }

/* Softmax (log: log_softmax) of one row of n >= 1 doubles in place, for
 * float results (exp as rgpu_vm_exp_d2f; cpu_reduce2_norm.c's order):
 *   y = exp(x - max) * (1 / sum),  log: y = x - (max + log(sum)),
 * sum the 8-lane sum of exp(x - max); ex is n doubles of scratch. */
VM_TARGET void VM(rgpu_vm_softmax_row)(double *restrict b, double *restrict ex, int64_t n, bool is_log)
{
    double mx = VM(row_max)(b, n), sum;
    if (is_log) {
        for (int64_t i = 0; i < n; i++) ex[i] = VM(exp_core)(b[i] - mx);
#define VM_LD_(i) ex[i]
        VM_LANE8_SUM(n, VM_LD_, sum);
#undef VM_LD_
        double sub = mx + log(sum);
        for (int64_t i = 0; i < n; i++) b[i] = b[i] - sub;
    } else {
        for (int64_t i = 0; i < n; i++) b[i] = VM(exp_core)(b[i] - mx);
#define VM_LD_(i) b[i]
        VM_LANE8_SUM(n, VM_LD_, sum);
#undef VM_LD_
        double inv = 1.0 / sum;
        for (int64_t i = 0; i < n; i++) b[i] *= inv;
    }
}

/* Softmax backward of one row in place of g, y the forward's output (log:
 * log_softmax's, overwritten by exp(y); float results only, as above):
 *   g = y (g - sum(g y)),   log: g = g - exp(y) sum(g)                    */
VM_TARGET void VM(rgpu_vm_softmax_bw_row)(double *restrict g, double *restrict y, int64_t n, bool is_log)
{
    double sum;
    if (is_log) {
#define VM_LD_(i) g[i]
        VM_LANE8_SUM(n, VM_LD_, sum);
#undef VM_LD_
        for (int64_t i = 0; i < n; i++) y[i] = VM(exp_core)(y[i]);
        for (int64_t i = 0; i < n; i++) g[i] -= y[i] * sum;
    } else {
#define VM_LD_(i) (g[i] * y[i])
        VM_LANE8_SUM(n, VM_LD_, sum);
#undef VM_LD_
        for (int64_t i = 0; i < n; i++) g[i] = y[i] * (g[i] - sum);
    }
}
#undef VM_LANE8_SUM

VM_TARGET void VM(rgpu_vm_exp_d2f)(double *r, const double *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) r[i] = VM(exp_core)(a[i]);
}
