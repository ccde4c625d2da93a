/* op/philox.h — Philox4x32-10 and the values rgpu's random ops derive from it.
 *
 * This header is a cross-backend contract: the CPU reference backend and the
 * CUDA backend include it unchanged, so a random op gives the same bits on
 * both. Plain C that nvcc's C++ also accepts; stdint only.
 *
 * Generator (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11; Random123's philox4x32_R with R = 10):
 *   multipliers M0 = 0xD2511F53, M1 = 0xCD9E8D57; Weyl key bumps
 *   W0 = 0x9E3779B9, W1 = 0xBB67AE85; round r (r = 0..9) uses key + r*W.
 *   Known answers (Random123 kat_vectors, counter[4] key[2] -> out[4]):
 *     0 0 0 0 / 0 0                      -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8
 *     ffffffff x4 / ffffffff x2          -> 408f276d 41c83b0e a20bc7c6 6d5451fd
 *
 * Inputs of one draw: a random op record carries (seed, offset), both u64.
 *   key     = (seed & 0xffffffff, seed >> 32)
 *   counter = (i & 0xffffffff, i >> 32, offset & 0xffffffff, offset >> 32)
 * where i is the element's row-major index over the op's logical output
 * shape (never its memory order). Each element makes exactly one Philox call
 * and gets four words w0..w3; the ops below use at most w0 and w1. Results
 * are a pure function of (seed, offset, i, shape): strides, thread counts and
 * launch shapes never change them.
 *
 * Derived values (exact definitions; every backend computes these):
 *   u24  = w0 >> 8                                   (24 bits)
 *   u_f32 = u24 * 2^-24                              in [0, 1), exact in f32
 *   r64  = (uint64)w0 << 32 | w1
 *   u_f64 = (r64 >> 11) * 2^-53                      in [0, 1), exact in f64
 *
 *   uniform_(from, to)   f32/f16/bf16: lo = (float)from, hi = (float)to,
 *                        v = lo + u_f32 * (hi - lo) in f32, then cast to out;
 *                        f64: v = from + u_f64 * (to - from) in f64.
 *   normal_(mean, std)   u1 = ((w0 >> 8) + 1) * 2^-24 in (0, 1],
 *                        u2 = (w1 >> 8) * 2^-24 in [0, 1),
 *                        z = sqrt(-2 ln u1) * cos(2 pi u2) in f64,
 *                        v = mean + std * z in f64, cast to out (f16/bf16
 *                        through f32, as c10).
 *   bernoulli(p)         out = u_f64 < p ? 1 : 0   (p in f64).
 *   random_(from, to)    range = to - from (to NONE: to_inc - from + 1 with
 *                        to_inc = 2^digits for floats (f32 2^24, f64 2^53,
 *                        f16 2^11, bf16 2^8), the dtype's max for integers,
 *                        1 for bool); v = from + r64 % range, in u64
 *                        arithmetic (range 2^64: v = from + r64).
 *   randperm(n)          out = 0..n-1 sorted by key_i = r64 of element i,
 *                        ties broken by i (ascending).
 *   native_dropout(p)    keep_i = u_f64 < 1 - p (train); y = (x * keep) *
 *                        scale in the dtype's opmath, scale = 1/(1-p), or 0
 *                        when p == 1.
 *
 * Arithmetic is IEEE round-to-nearest with no contraction: a * b + c is two
 * roundings, never an fma (CUDA: __fmul_rn/__fadd_rn or -fmad=false in the
 * random kernels). uniform_ on f16/bf16 may round up to `to` when cast, as
 * the f32 value is not clamped. normal_ calls log/cos/sqrt, whose last-ulp
 * results differ between libm and CUDA, so normal_ agrees to rounding, not
 * bit for bit; every other value above is bit-exact across backends.
 */
#ifndef RGPU_PHILOX_H
#define RGPU_PHILOX_H

#include <stdint.h>

#include "op.h"

#define RGPU_PHILOX_FN OP_FN

#define RGPU_PHILOX_M0 0xD2511F53u
#define RGPU_PHILOX_M1 0xCD9E8D57u
#define RGPU_PHILOX_W0 0x9E3779B9u
#define RGPU_PHILOX_W1 0xBB67AE85u

/* Philox4x32-10 on an explicit counter and key: out[0..3] = w0..w3. */
RGPU_PHILOX_FN void rgpu_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4])
{
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)RGPU_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)RGPU_PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += RGPU_PHILOX_W0;
        k1 += RGPU_PHILOX_W1;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* The draw of element i for a random op carrying (seed, offset). */
RGPU_PHILOX_FN void rgpu_philox_draw(uint64_t seed, uint64_t offset, uint64_t i, uint32_t w[4])
{
    uint32_t ctr[4], key[2];
    ctr[0] = (uint32_t)i; ctr[1] = (uint32_t)(i >> 32);
    ctr[2] = (uint32_t)offset; ctr[3] = (uint32_t)(offset >> 32);
    key[0] = (uint32_t)seed; key[1] = (uint32_t)(seed >> 32);
    rgpu_philox4x32_10(ctr, key, w);
}

/* u_f32 in [0, 1): (w0 >> 8) * 2^-24. */
RGPU_PHILOX_FN float rgpu_philox_u_f32(const uint32_t w[4])
{
    return (float)(w[0] >> 8) * 5.9604644775390625e-8f;
}

/* r64 = w0 << 32 | w1. */
RGPU_PHILOX_FN uint64_t rgpu_philox_r64(const uint32_t w[4])
{
    return (uint64_t)w[0] << 32 | w[1];
}

/* u_f64 in [0, 1): (r64 >> 11) * 2^-53. */
RGPU_PHILOX_FN double rgpu_philox_u_f64(const uint32_t w[4])
{
    return (double)(rgpu_philox_r64(w) >> 11) * 1.1102230246251565404e-16;
}

/* Box-Muller inputs: u1 in (0, 1], u2 in [0, 1). */
RGPU_PHILOX_FN double rgpu_philox_bm_u1(const uint32_t w[4])
{
    return (double)((w[0] >> 8) + 1u) * 5.9604644775390625e-8;
}
RGPU_PHILOX_FN double rgpu_philox_bm_u2(const uint32_t w[4])
{
    return (double)(w[1] >> 8) * 5.9604644775390625e-8;
}

#endif
