/* test_cpu_kernels.c — known-value tests for the CPU reference kernels
 * (replayer/cpu/): f16/bf16 conversions, factories, copy_ casts, binary
 * arithmetic with broadcast/strided/in-place operands, sum/mean, and the
 * error paths. Expected values are what PyTorch's CPU ATen produces.
 *
 * Build: gcc -std=c11 -Wall -Wextra -Werror -O1 -g -Itrace-format -Ireplayer -Ireplayer/backend \
 *   tests/c/test_cpu_kernels.c replayer/cpu/\*.c trace-format/\*.c -o /tmp/tck \
 *   $(pkg-config --cflags --libs check) -lzstd -lxxhash -lsqlite3 -lm -lpthread */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "op/half.h"
#include "check_cpu.h"
#include "cpu/cpu_vmath.h"

/* ---------------------------------------------------------------------------
 * Helpers */

/* Runs op with ops.def's arity: out, up to two inputs, args. */
static rgpu_status run(int op, rgpu_view *out, const rgpu_view *in0, const rgpu_view *in1,
                       const rgpu_arg *args, int nargs)
{
    return run_op(op, INS(in0, in1), OUTS(out), args, nargs);
}

#define RUN_OK(...) ASSERT_STATUS_OK(run(__VA_ARGS__))
#define RUN_ERR(code, ...) ASSERT_STATUS_ERR(code, run(__VA_ARGS__))

static float ffrom(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ---------------------------------------------------------------------------
 * half.h */

START_TEST(test_f16_known)
{
    static const struct { uint32_t f; uint16_t h; } t[] = {
        { 0x3f800000u, 0x3c00 },   /* 1.0 */
        { 0xbf800000u, 0xbc00 },   /* -1.0 */
        { 0x00000000u, 0x0000 },
        { 0x80000000u, 0x8000 },   /* -0.0 keeps its sign */
        { 0x477fe000u, 0x7bff },   /* 65504, the max */
        { 0x477fefffu, 0x7bff },   /* just under 65520 */
        { 0x477ff000u, 0x7c00 },   /* 65520: tie, rounds to even = inf */
        { 0x7f800000u, 0x7c00 },   /* inf */
        { 0xff800000u, 0xfc00 },   /* -inf */
        { 0x7fc00000u, 0x7e00 },   /* NaN */
        { 0xffc00001u, 0xfe00 },   /* -NaN keeps its sign, canonical payload */
        { 0x7f800001u, 0x7e00 },   /* signalling NaN stays NaN */
        { 0x3dcccccdu, 0x2e66 },   /* 0.1f */
        { 0x38800000u, 0x0400 },   /* 2^-14, smallest normal */
        { 0x38000000u, 0x0200 },   /* 2^-15, subnormal */
        { 0x33800000u, 0x0001 },   /* 2^-24, smallest subnormal */
        { 0x33000000u, 0x0000 },   /* 2^-25: tie, rounds to even = 0 */
        { 0x33000001u, 0x0001 },   /* just above 2^-25 */
        { 0xb3000001u, 0x8001 },
        { 0x33c00000u, 0x0002 },   /* 1.5 * 2^-24: tie, rounds to even = 2 */
        { 0x34200000u, 0x0002 },   /* 2.5 * 2^-24: tie, rounds to even = 2 */
        { 0x387fc000u, 0x03ff },   /* max subnormal 1023 * 2^-24 */
        { 0x387fe000u, 0x0400 },   /* 1023.5 * 2^-24: tie -> 1024 (even) = smallest normal */
        { 0x3f801000u, 0x3c00 },   /* 1 + 2^-11: tie, even = 1.0 */
        { 0x3f803000u, 0x3c02 },   /* 1 + 3*2^-11: tie, even = 0x3c02 */
        { 0x3f801001u, 0x3c01 },   /* just above the tie */
        { 0x00000001u, 0x0000 },   /* f32 subnormal -> 0 */
        { 0x0ff00000u, 0x0000 },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        uint16_t h = rgpu_float_to_half(ffrom(t[i].f));
        ck_assert_msg(h == t[i].h, "f32 0x%08x -> f16 0x%04x, want 0x%04x", t[i].f, h, t[i].h);
    }
    ASSERT_F32_BITS(rgpu_half_to_float(0x0001), 0x1p-24f);
    ASSERT_F32_BITS(rgpu_half_to_float(0x03ff), 1023 * 0x1p-24f);
    ASSERT_F32_BITS(rgpu_half_to_float(0x8001), -0x1p-24f);
    ASSERT_F32_BITS(rgpu_half_to_float(0x8000), -0.0f);
    ASSERT_F32_BITS(rgpu_half_to_float(0x7bff), 65504.0f);
    ASSERT_F32_BITS(rgpu_half_to_float(0x7c00), INFINITY);
    ASSERT_F32_BITS(rgpu_half_to_float(0xfc00), -INFINITY);
    ck_assert(isnan(rgpu_half_to_float(0x7e00)));
    ck_assert(isnan(rgpu_half_to_float(0x7c01)));
}
END_TEST

/* Every f16 value round-trips; every midpoint between neighbours rounds to
 * the even one, and one f32 ulp either side rounds to the nearer one. */
START_TEST(test_f16_exhaustive)
{
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = rgpu_half_to_float((uint16_t)h);
        uint16_t back = rgpu_float_to_half(f);
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) {
            ck_assert_msg(back == ((h & 0x8000u) | 0x7e00u), "NaN 0x%04x -> 0x%04x", h, back);
            continue;
        }
        ck_assert_msg(back == h, "f16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
        uint32_t lo = h & 0x7fffu;
        if (lo >= 0x7bffu) continue;           /* no finite upper neighbour */
        uint32_t sign = h & 0x8000u;
        float a = rgpu_half_to_float((uint16_t)h), b = rgpu_half_to_float((uint16_t)(h + 1));
        float mid = (a + b) / 2;               /* exact: needs 12 significant bits */
        uint16_t even = (lo & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
        ck_assert_msg(rgpu_float_to_half(mid) == even, "midpoint after 0x%04x", h);
        if (lo == 0 && sign) continue;
        uint32_t mb = fbits(mid);
        ck_assert_msg(rgpu_float_to_half(ffrom(mb - 1)) == h, "below midpoint after 0x%04x", h);
        ck_assert_msg(rgpu_float_to_half(ffrom(mb + 1)) == h + 1, "above midpoint after 0x%04x", h);
    }
}
END_TEST

/* The vectorised row conversions (cpu_internal.h) agree bit for bit with
 * op/half.h's: every f16 and bf16 input, and f32 inputs covering every
 * exponent with the low bits at each rounding boundary, the whole f16
 * subnormal range (every 61st pattern) and 2M scattered patterns. (All 2^32
 * f32 inputs were checked once by a standalone run: 0 mismatches.) */
static void check_f32_block(const uint32_t *bits, int64_t n)
{
    static float f[4096];
    static uint16_t h[4096], b[4096];
    for (int64_t i = 0; i < n; i++) f[i] = ffrom(bits[i]);
    cpu_f32_to_f16_n(h, f, n);
    cpu_f32_to_bf16_n(b, f, n);
    int64_t bad = -1;   /* the first mismatch (ck_assert per element is too slow here) */
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (h[i] != rgpu_float_to_half(f[i]) || b[i] != rgpu_float_to_bf16(f[i])) bad = i;
    if (bad >= 0)
        ck_abort_msg("f32 0x%08x -> f16 0x%04x (want 0x%04x), bf16 0x%04x (want 0x%04x)", bits[bad], h[bad],
                     rgpu_float_to_half(f[bad]), b[bad], rgpu_float_to_bf16(f[bad]));
}

static void vec_half_conversions(void);

/* ... on every ISA build of the bfloat16 rows (cpu_vmath) this CPU runs */
START_TEST(test_vec_half_conversions)
{
    static const char *const isas[] = { "base", "avx2", "avx512" };
    int ran = 0;
    for (int k = 0; k < 3; k++) {
        if (!rgpu_vm_set_isa(isas[k])) continue;
        vec_half_conversions();
        ran++;
    }
    ck_assert_int_ge(ran, 1);
}
END_TEST

static void vec_half_conversions(void)
{
    static uint16_t in[65536];
    static float out[65536];
    for (uint32_t i = 0; i < 65536; i++) in[i] = (uint16_t)i;
    cpu_f16_to_f32_n(out, in, 65536);
    for (uint32_t i = 0; i < 65536; i++)
        if (fbits(out[i]) != fbits(rgpu_half_to_float((uint16_t)i))) ck_abort_msg("f16 0x%04x", i);
    cpu_bf16_to_f32_n(out, in, 65536);
    for (uint32_t i = 0; i < 65536; i++)
        if (fbits(out[i]) != fbits(rgpu_bf16_to_float((uint16_t)i))) ck_abort_msg("bf16 0x%04x", i);

    static const uint32_t low[] = { 0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2fff, 0x3000, 0x3001,
                                    0x7fff, 0x8000, 0x8001, 0xffff, 0x5555, 0xaaaa };
    static uint32_t bits[4096];
    int64_t n = 0;
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (size_t k = 0; k < sizeof low / sizeof low[0]; k++) {
            bits[n++] = hi << 16 | low[k];
            if (n == 4096) { check_f32_block(bits, n); n = 0; }
        }
    for (uint32_t x = 0x33000000u; x < 0x38800000u; x += 61) {
        bits[n++] = x;
        bits[n++] = x | 0x80000000u;
        if (n >= 4094) { check_f32_block(bits, n); n = 0; }
    }
    for (uint32_t i = 0; i < (1u << 21); i++) {
        bits[n++] = i * 0x9E3779B1u;
        if (n == 4096) { check_f32_block(bits, n); n = 0; }
    }
    check_f32_block(bits, n);
}

/* copy_ f32 <-> f16/bf16, unit-stride and strided, against the element helpers */
START_TEST(test_copy_half_fast_paths)
{
    enum { N = 1000 };
    static float src[2 * N], back[2 * N];
    static uint16_t h[2 * N];
    for (int i = 0; i < 2 * N; i++) src[i] = ffrom((uint32_t)i * 0x9E3779B1u);
    src[0] = NAN; src[1] = -INFINITY; src[2] = 65520.0f; src[3] = 0x1p-25f; src[4] = -0x1.8p-25f;
    for (int dt = 0; dt < 2; dt++) {
        int hdt = dt ? RGPU_BF16 : RGPU_F16;
        for (int st = 1; st <= 2; st++) {
            rgpu_view vs = view(src, RGPU_F32, 1, SZ(N), SZ(st));
            rgpu_view vh = view(h, hdt, 1, SZ(N), SZ(st));
            rgpu_view vb = view(back, RGPU_F32, 1, SZ(N), SZ(st));
            ASSERT_STATUS_OK(run_op(RGPU_OP_COPY, INS(&vs), OUTS(&vh), NOARGS));
            ASSERT_STATUS_OK(run_op(RGPU_OP_COPY, INS(&vh), OUTS(&vb), NOARGS));
            for (int i = 0; i < N; i++) {
                uint16_t want = dt ? rgpu_float_to_bf16(src[i * st]) : rgpu_float_to_half(src[i * st]);
                ck_assert_msg(h[i * st] == want, "dt %d stride %d: element %d", hdt, st, i);
                float wb = dt ? rgpu_bf16_to_float(want) : rgpu_half_to_float(want);
                ck_assert_msg(fbits(back[i * st]) == fbits(wb), "dt %d stride %d: back %d", hdt, st, i);
            }
        }
    }
}
END_TEST

/* native_dropout and uniform_ on dense tensors (split over the pool) give the
 * values the element walk gives on strided ones: Philox by logical index. */
START_TEST(test_random_dense_matches_strided)
{
    enum { N = 10000 };
    static float x[N], y1[N], y2[2 * N], u1[N], u2[2 * N];
    static uint8_t m1[N], m2[2 * N];
    for (int i = 0; i < N; i++) x[i] = (float)(i % 97) - 40.0f;
    rgpu_view X = view(x, RGPU_F32, 1, SZ(N), NULL);
    rgpu_view Y1 = view(y1, RGPU_F32, 1, SZ(N), NULL), Y2 = view(y2, RGPU_F32, 1, SZ(N), SZ(2));
    rgpu_view M1 = view(m1, RGPU_BOOL, 1, SZ(N), NULL), M2 = view(m2, RGPU_BOOL, 1, SZ(N), SZ(2));
    rgpu_arg da[] = { a_flt(0.3), a_bool(1), a_int(12345), a_int(77) };
    ASSERT_STATUS_OK(run_op(RGPU_OP_NATIVE_DROPOUT, INS(&X), OUTS(&Y1, &M1), da, 4));
    ASSERT_STATUS_OK(run_op(RGPU_OP_NATIVE_DROPOUT, INS(&X), OUTS(&Y2, &M2), da, 4));
    int kept = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_msg(fbits(y1[i]) == fbits(y2[2 * i]) && m1[i] == m2[2 * i], "dropout element %d", i);
        ck_assert_msg(fbits(y1[i]) == fbits(m1[i] ? x[i] * (float)(1 / 0.7) : 0.0f * x[i]), "dropout value %d", i);
        kept += m1[i];
    }
    ck_assert_int_gt(kept, N * 6 / 10);
    ck_assert_int_lt(kept, N * 8 / 10);
    rgpu_view U1 = view(u1, RGPU_F32, 1, SZ(N), NULL), U2 = view(u2, RGPU_F32, 1, SZ(N), SZ(2));
    rgpu_arg ua[] = { a_flt(-1), a_flt(3), a_int(9), a_int(4) };
    ASSERT_STATUS_OK(run_op(RGPU_OP_UNIFORM, INS(NULL), OUTS(&U1), ua, 4));
    ASSERT_STATUS_OK(run_op(RGPU_OP_UNIFORM, INS(NULL), OUTS(&U2), ua, 4));
    for (int i = 0; i < N; i++) {
        ck_assert_msg(fbits(u1[i]) == fbits(u2[2 * i]), "uniform element %d", i);
        ck_assert(u1[i] >= -1.0f && u1[i] < 3.0f);
    }
}
END_TEST

START_TEST(test_bf16)
{
    static const struct { uint32_t f; uint16_t b; } t[] = {
        { 0x3f800000u, 0x3f80 }, { 0x3f808000u, 0x3f80 },  /* tie -> even */
        { 0x3f818000u, 0x3f82 }, { 0x3f808001u, 0x3f81 },
        { 0x3dcccccdu, 0x3dcd },                           /* 0.1f */
        { 0x7f800000u, 0x7f80 }, { 0xff800000u, 0xff80 },
        { 0x7f7fffffu, 0x7f80 },                           /* FLT_MAX rounds to inf */
        { 0x7fc00000u, 0x7fc0 }, { 0xffc00000u, 0x7fc0 },  /* NaN -> 0x7FC0 (c10) */
        { 0x7f800001u, 0x7fc0 },
        { 0x00010000u, 0x0001 }, { 0x00008000u, 0x0000 },  /* f32 subnormals */
        { 0x80000000u, 0x8000 },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        uint16_t b = rgpu_float_to_bf16(ffrom(t[i].f));
        ck_assert_msg(b == t[i].b, "f32 0x%08x -> bf16 0x%04x, want 0x%04x", t[i].f, b, t[i].b);
    }
    for (uint32_t h = 0; h < 0x10000u; h++) {
        float f = rgpu_bf16_to_float((uint16_t)h);
        ck_assert_uint_eq(fbits(f), h << 16);
        if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu)) ck_assert_uint_eq(rgpu_float_to_bf16(f), 0x7fc0);
        else ck_assert_uint_eq(rgpu_float_to_bf16(f), h);
    }
}
END_TEST

/* ---------------------------------------------------------------------------
 * FULL */

START_TEST(test_full)
{
    /* every element of a (2,2) output holds want's low bytes: float args are
     * truncated and clamped into ints, anything nonzero (NaN too) is true */
#define FL(x) { .kind = RGPU_ARG_FLOAT, .v.f = (x) }
#define IN_(x) { .kind = RGPU_ARG_INT, .v.i = (x) }
    static const struct { int dt; rgpu_arg a; uint64_t want; } t[] = {
        { RGPU_F32, FL(1.5), 0x3fc00000u },
        { RGPU_I32, FL(-2.7), 0xfffffffeu },
        { RGPU_I32, FL(3e9), 0x7fffffffu },               /* out of range: clamped, not UB */
        { RGPU_BOOL, FL(0.0), 0 },
        { RGPU_BOOL, FL(0.1), 1 },
        { RGPU_BOOL, IN_(-3), 1 },
        { RGPU_F16, FL(0.1), 0x2e66 },
        { RGPU_BF16, FL(0.1), 0x3dcd },
        { RGPU_F64, IN_(7), 0x401c000000000000ull },      /* 7.0 */
        { RGPU_I64, { .kind = RGPU_ARG_BOOL, .v.i = 1 }, 1 },
        { RGPU_I64, IN_(INT64_MIN), 0x8000000000000000ull },
    };
#undef FL
#undef IN_
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        uint8_t buf[4 * 8];
        memset(buf, GUARD, sizeof buf);
        rgpu_view v = view(buf, t[k].dt, 2, SZ(2, 2), NULL);
        RUN_OK(RGPU_OP_FULL, &v, NULL, NULL, &t[k].a, 1);
        size_t es = rgpu_dtype_size(t[k].dt);
        for (int i = 0; i < 4; i++) {
            uint64_t got = 0;
            memcpy(&got, buf + i * es, es);
            ck_assert_msg(got == t[k].want, "case %zu element %d: 0x%llx, want 0x%llx", k, i,
                          (unsigned long long)got, (unsigned long long)t[k].want);
        }
    }
}
END_TEST

START_TEST(test_full_strided_and_empty)
{
    /* (2,2) view with strides (4,2) over 8 floats: only 4 elements written */
    float f[8];
    for (int i = 0; i < 8; i++) f[i] = -1.0f;
    rgpu_view v = view(f, RGPU_F32, 2, SZ(2, 2), SZ(4, 2));
    rgpu_arg a = a_int(3);
    RUN_OK(RGPU_OP_FULL, &v, NULL, NULL, &a, 1);
    static const float want[8] = { 3, -1, 3, -1, 3, -1, 3, -1 };
    for (int i = 0; i < 8; i++) ASSERT_F32_BITS(f[i], want[i]);

    /* zero-size: nothing written; NULL data allowed */
    uint8_t g[8];
    memset(g, GUARD, sizeof g);
    rgpu_view z = view(g, RGPU_F32, 2, SZ(0, 2), NULL);
    RUN_OK(RGPU_OP_FULL, &z, NULL, NULL, &a, 1);
    check_guard(g, sizeof g);
    z.data = NULL;
    RUN_OK(RGPU_OP_FULL, &z, NULL, NULL, &a, 1);

    /* 0-d */
    float s = 0;
    rgpu_view v0 = view(&s, RGPU_F32, 0, NULL, NULL);
    RUN_OK(RGPU_OP_FULL, &v0, NULL, NULL, &a, 1);
    ASSERT_F32_BITS(s, 3.0f);
}
END_TEST

START_TEST(test_full_errors)
{
    float f[2];
    rgpu_view v = view(f, RGPU_F32, 1, SZ(2), NULL);
    rgpu_arg a = a_ints_n(SZ(1, 2), 2);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_FULL, &v, NULL, NULL, &a, 1);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_FULL, &v, NULL, NULL, NULL, 0);
    rgpu_arg n;
    memset(&n, 0, sizeof n);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_FULL, &v, NULL, NULL, &n, 1);
    a = a_int(1);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_FULL, NULL, NULL, NULL, &a, 1);
    v.dtype = 42;
    RUN_ERR(RGPU_ERR_BAD_DTYPE, RGPU_OP_FULL, &v, NULL, NULL, &a, 1);
    v.dtype = RGPU_F32;
    v.strides[0] = -1;
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_FULL, &v, NULL, NULL, &a, 1);
    v.strides[0] = 1;
    v.ndim = RGPU_MAX_DIMS + 1;
    RUN_ERR(RGPU_ERR_TOO_MANY_DIMS, RGPU_OP_FULL, &v, NULL, NULL, &a, 1);
    v.ndim = 1;
    v.data = NULL;
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_FULL, &v, NULL, NULL, &a, 1);
}
END_TEST

/* ---------------------------------------------------------------------------
 * ARANGE */

START_TEST(test_arange)
{
    int64_t l[5];
    rgpu_view vl = view(l, RGPU_I64, 1, SZ(5), NULL);
    rgpu_arg a[2] = { a_int(2), a_int(3) };
    RUN_OK(RGPU_OP_ARANGE, &vl, NULL, NULL, a, 2);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(l[i], 2 + 3 * i);
    a[0] = a_int(10); a[1] = a_int(-4);
    RUN_OK(RGPU_OP_ARANGE, &vl, NULL, NULL, a, 2);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(l[i], 10 - 4 * i);

    float f[4];
    rgpu_view vf = view(f, RGPU_F32, 1, SZ(4), NULL);
    a[0] = a_flt(0.5); a[1] = a_flt(0.25);
    RUN_OK(RGPU_OP_ARANGE, &vf, NULL, NULL, a, 2);
    for (int i = 0; i < 4; i++) ASSERT_F32_BITS(f[i], 0.5f + 0.25f * (float)i);
    a[0] = a_flt(0.0); a[1] = a_flt(0.1);   /* computed in double, then rounded */
    RUN_OK(RGPU_OP_ARANGE, &vf, NULL, NULL, a, 2);
    for (int i = 0; i < 4; i++) ASSERT_F32_BITS(f[i], (float)(0.1 * i));

    double d[4];
    rgpu_view vd = view(d, RGPU_F64, 1, SZ(4), NULL);
    RUN_OK(RGPU_OP_ARANGE, &vd, NULL, NULL, a, 2);
    for (int i = 0; i < 4; i++) ck_assert(d[i] == 0.1 * i);

    uint16_t h[4];   /* f16: accumulated in float (ATen acc_type<Half, false>) */
    rgpu_view vh = view(h, RGPU_F16, 1, SZ(4), NULL);
    RUN_OK(RGPU_OP_ARANGE, &vh, NULL, NULL, a, 2);
    for (int i = 0; i < 4; i++) ck_assert_uint_eq(h[i], rgpu_float_to_half(0.1f * (float)i));

    int32_t i32[6];   /* int output: float start/step truncated to int64 */
    for (int i = 0; i < 6; i++) i32[i] = -7;
    rgpu_view vi = view(i32, RGPU_I32, 1, SZ(3), SZ(2));
    a[0] = a_flt(1.9); a[1] = a_int(2);
    RUN_OK(RGPU_OP_ARANGE, &vi, NULL, NULL, a, 2);
    static const int32_t want[6] = { 1, -7, 3, -7, 5, -7 };
    for (int i = 0; i < 6; i++) ck_assert_int_eq(i32[i], want[i]);

    rgpu_view v0 = view(NULL, RGPU_F32, 1, SZ(0), NULL);
    RUN_OK(RGPU_OP_ARANGE, &v0, NULL, NULL, a, 2);
}
END_TEST

START_TEST(test_arange_errors)
{
    float f[4];
    rgpu_view v2 = view(f, RGPU_F32, 2, SZ(2, 2), NULL);
    rgpu_arg a[2] = { a_int(0), a_int(1) };
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_ARANGE, &v2, NULL, NULL, a, 2);
    rgpu_view v = view(f, RGPU_F32, 1, SZ(4), NULL);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_ARANGE, &v, NULL, NULL, a, 1);
    a[1] = a_ints_n(SZ(1), 1);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_ARANGE, &v, NULL, NULL, a, 2);
}
END_TEST

/* ---------------------------------------------------------------------------
 * COPY */

START_TEST(test_copy_layouts)
{
    float src[6] = { 0, 1, 2, 3, 4, 5 };   /* (2,3) */
    float dst[6];

    rgpu_view s = view(src, RGPU_F32, 2, SZ(2, 3), NULL);
    rgpu_view d = view(dst, RGPU_F32, 2, SZ(2, 3), NULL);
    RUN_OK(RGPU_OP_COPY, &d, &s, NULL, NULL, 0);
    for (int i = 0; i < 6; i++) ASSERT_F32_BITS(dst[i], src[i]);

    /* transposed source: src.t() is (3,2) strides (1,3) */
    rgpu_view st = view(src, RGPU_F32, 2, SZ(3, 2), SZ(1, 3));
    rgpu_view d32 = view(dst, RGPU_F32, 2, SZ(3, 2), NULL);
    RUN_OK(RGPU_OP_COPY, &d32, &st, NULL, NULL, 0);
    static const float tw[6] = { 0, 3, 1, 4, 2, 5 };
    for (int i = 0; i < 6; i++) ASSERT_F32_BITS(dst[i], tw[i]);

    /* transposed destination: dst (2,3) with strides (1,2) */
    rgpu_view dt = view(dst, RGPU_F32, 2, SZ(2, 3), SZ(1, 2));
    RUN_OK(RGPU_OP_COPY, &dt, &s, NULL, NULL, 0);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) ASSERT_F32_BITS(dst[i + 2 * j], src[3 * i + j]);

    /* broadcast: (3,) -> (2,3), (2,1) -> (2,3), explicit stride-0 view */
    rgpu_view row = view(src, RGPU_F32, 1, SZ(3), NULL);
    RUN_OK(RGPU_OP_COPY, &d, &row, NULL, NULL, 0);
    for (int i = 0; i < 6; i++) ASSERT_F32_BITS(dst[i], src[i % 3]);
    rgpu_view col = view(src, RGPU_F32, 2, SZ(2, 1), SZ(3, 1));
    RUN_OK(RGPU_OP_COPY, &d, &col, NULL, NULL, 0);
    for (int i = 0; i < 6; i++) ASSERT_F32_BITS(dst[i], src[3 * (i / 3)]);
    rgpu_view ex = view(src + 1, RGPU_F32, 2, SZ(2, 3), SZ(0, 1));
    RUN_OK(RGPU_OP_COPY, &d, &ex, NULL, NULL, 0);
    for (int i = 0; i < 6; i++) ASSERT_F32_BITS(dst[i], src[1 + i % 3]);

    /* 0-d source fills */
    float seven = 7;
    rgpu_view s0 = view(&seven, RGPU_F32, 0, NULL, NULL);
    RUN_OK(RGPU_OP_COPY, &d, &s0, NULL, NULL, 0);
    for (int i = 0; i < 6; i++) ASSERT_F32_BITS(dst[i], 7.0f);
    float one = 0;
    rgpu_view d0 = view(&one, RGPU_F32, 0, NULL, NULL);
    RUN_OK(RGPU_OP_COPY, &d0, &s0, NULL, NULL, 0);
    ASSERT_F32_BITS(one, 7.0f);

    /* 3-d permuted with a size-1 dim, int16 */
    int16_t a3[24], b3[24];
    for (int i = 0; i < 24; i++) { a3[i] = (int16_t)i; b3[i] = -1; }
    /* src viewed as (4,1,6)->(permuted) sizes (2,3,4) strides (1,2,6) */
    rgpu_view s3 = view(a3, RGPU_I16, 3, SZ(2, 3, 4), SZ(1, 2, 6));
    rgpu_view d3 = view(b3, RGPU_I16, 3, SZ(2, 3, 4), NULL);
    RUN_OK(RGPU_OP_COPY, &d3, &s3, NULL, NULL, 0);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) ck_assert_int_eq(b3[12 * i + 4 * j + k], i + 2 * j + 6 * k);
}
END_TEST

START_TEST(test_copy_guard_and_empty)
{
    /* dst is a (2,2) window in a 4x4 with guard bytes around */
    float buf[16];
    memset(buf, GUARD, sizeof buf);
    float src[4] = { 1, 2, 3, 4 };
    rgpu_view s = view(src, RGPU_F32, 2, SZ(2, 2), NULL);
    rgpu_view d = view(buf + 5, RGPU_F32, 2, SZ(2, 2), SZ(4, 1));
    RUN_OK(RGPU_OP_COPY, &d, &s, NULL, NULL, 0);
    for (int i = 0; i < 16; i++) {
        int r = i / 4, c = i % 4;
        if (r >= 1 && r <= 2 && c >= 1 && c <= 2) ASSERT_F32_BITS(buf[i], src[(r - 1) * 2 + (c - 1)]);
        else check_guard((const uint8_t *)&buf[i], 4);
    }
    /* zero-size dst and src */
    uint8_t g[16];
    memset(g, GUARD, sizeof g);
    rgpu_view z = view(g, RGPU_F32, 2, SZ(3, 0), NULL);
    rgpu_view zs = view(NULL, RGPU_F32, 1, SZ(0), NULL);
    RUN_OK(RGPU_OP_COPY, &z, &zs, NULL, NULL, 0);
    rgpu_view one = view(src, RGPU_F32, 1, SZ(1), NULL);
    RUN_OK(RGPU_OP_COPY, &z, &one, NULL, NULL, 0);
    check_guard(g, sizeof g);
}
END_TEST

START_TEST(test_copy_shape_errors)
{
    float a[6], b[6];
    rgpu_view s3 = view(a, RGPU_F32, 1, SZ(3), NULL);
    rgpu_view d2 = view(b, RGPU_F32, 1, SZ(2), NULL);
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_COPY, &d2, &s3, NULL, NULL, 0);
    rgpu_view s13 = view(a, RGPU_F32, 2, SZ(1, 3), NULL);   /* more dims than dst */
    rgpu_view d3 = view(b, RGPU_F32, 1, SZ(3), NULL);
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_COPY, &d3, &s13, NULL, NULL, 0);
    rgpu_view s0 = view(a, RGPU_F32, 1, SZ(0), NULL);       /* size 0 does not broadcast to 1 */
    rgpu_view d1 = view(b, RGPU_F32, 1, SZ(1), NULL);
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_COPY, &d1, &s0, NULL, NULL, 0);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_COPY, &d3, NULL, NULL, NULL, 0);
}
END_TEST

/* one element src (dtype sdt, bytes at sp) -> dst dtype ddt into dp */
static void copy1(int sdt, const void *sp, int ddt, void *dp)
{
    rgpu_view s = view((void *)(uintptr_t)sp, sdt, 1, SZ(1), NULL);
    rgpu_view d = view(dp, ddt, 1, SZ(1), NULL);
    RUN_OK(RGPU_OP_COPY, &d, &s, NULL, NULL, 0);
}

START_TEST(test_copy_casts)
{
    /* f32 -> i32: truncation, NaN -> 0, out of range clamped */
    static const float fs[] = { -1.7f, 2.9f, -0.0f, NAN, INFINITY, -INFINITY, 3e9f, -3e9f };
    static const int32_t fi[] = { -1, 2, 0, 0, INT32_MAX, INT32_MIN, INT32_MAX, INT32_MIN };
    float fsrc[8];
    int32_t idst[8];
    memcpy(fsrc, fs, sizeof fs);
    rgpu_view s = view(fsrc, RGPU_F32, 1, SZ(8), NULL);
    rgpu_view d = view(idst, RGPU_I32, 1, SZ(8), NULL);
    RUN_OK(RGPU_OP_COPY, &d, &s, NULL, NULL, 0);
    for (int i = 0; i < 8; i++) ck_assert_msg(idst[i] == fi[i], "f32[%d] -> i32 %d, want %d", i, idst[i], fi[i]);

    /* f32 -> u8 goes through int64 (c10): -1 -> 255, 300 -> 44 */
    float f; uint8_t u; int8_t i8; int16_t i16; int64_t l; double dd; uint16_t h; int32_t i32;
    f = -1.0f; copy1(RGPU_F32, &f, RGPU_U8, &u); ck_assert_int_eq(u, 255);
    f = 300.5f; copy1(RGPU_F32, &f, RGPU_U8, &u); ck_assert_int_eq(u, 44);
    f = 255.9f; copy1(RGPU_F32, &f, RGPU_U8, &u); ck_assert_int_eq(u, 255);
    f = NAN; copy1(RGPU_F32, &f, RGPU_U8, &u); ck_assert_int_eq(u, 0);
    /* f32 -> i8/i16/i64: truncation, clamped */
    f = -1.5f; copy1(RGPU_F32, &f, RGPU_I8, &i8); ck_assert_int_eq(i8, -1);
    f = 200.0f; copy1(RGPU_F32, &f, RGPU_I8, &i8); ck_assert_int_eq(i8, 127);
    f = -40000.0f; copy1(RGPU_F32, &f, RGPU_I16, &i16); ck_assert_int_eq(i16, -32768);
    f = 1e30f; copy1(RGPU_F32, &f, RGPU_I64, &l); ck_assert(l == INT64_MAX);
    f = NAN; copy1(RGPU_F32, &f, RGPU_I64, &l); ck_assert(l == 0);
    f = -123456.75f; copy1(RGPU_F32, &f, RGPU_I64, &l); ck_assert(l == -123456);
    dd = 9007199254740993.0; copy1(RGPU_F64, &dd, RGPU_I64, &l); ck_assert(l == 9007199254740992LL);

    /* anything -> bool is != 0 (NaN -> true, -0 -> false); bool -> x is 0/1 */
    static const float bs[] = { 0.0f, -0.0f, NAN, 0.5f, -INFINITY, 1e-45f };
    static const uint8_t bw[] = { 0, 0, 1, 1, 1, 1 };
    for (int i = 0; i < 6; i++) { copy1(RGPU_F32, &bs[i], RGPU_BOOL, &u); ck_assert_int_eq(u, bw[i]); }
    h = 0x8000; copy1(RGPU_F16, &h, RGPU_BOOL, &u); ck_assert_int_eq(u, 0);
    h = 0x0001; copy1(RGPU_F16, &h, RGPU_BOOL, &u); ck_assert_int_eq(u, 1);
    l = 256; copy1(RGPU_I64, &l, RGPU_BOOL, &u); ck_assert_int_eq(u, 1);
    u = 1; copy1(RGPU_BOOL, &u, RGPU_F32, &f); ASSERT_F32_BITS(f, 1.0f);
    u = 1; copy1(RGPU_BOOL, &u, RGPU_I64, &l); ck_assert(l == 1);
    u = 0; copy1(RGPU_BOOL, &u, RGPU_F16, &h); ck_assert_uint_eq(h, 0);

    /* int -> narrower int wraps */
    u = 200; copy1(RGPU_U8, &u, RGPU_I8, &i8); ck_assert_int_eq(i8, -56);
    i8 = -1; copy1(RGPU_I8, &i8, RGPU_U8, &u); ck_assert_int_eq(u, 255);
    i32 = 70000; copy1(RGPU_I32, &i32, RGPU_I16, &i16); ck_assert_int_eq(i16, 4464);
    l = -1; copy1(RGPU_I64, &l, RGPU_I32, &i32); ck_assert_int_eq(i32, -1);
    i8 = -5; copy1(RGPU_I8, &i8, RGPU_I64, &l); ck_assert(l == -5);

    /* int -> float: one rounding; -> f16 via f32 (c10) */
    l = 16777217; copy1(RGPU_I64, &l, RGPU_F32, &f); ASSERT_F32_BITS(f, 16777216.0f);
    l = 2049; copy1(RGPU_I64, &l, RGPU_F16, &h); ck_assert_uint_eq(h, 0x6800);   /* 2048: tie to even */
    l = 2051; copy1(RGPU_I64, &l, RGPU_F16, &h); ck_assert_uint_eq(h, 0x6802);   /* 2052 */
    l = 70000; copy1(RGPU_I64, &l, RGPU_F16, &h); ck_assert_uint_eq(h, 0x7c00);  /* inf */
    l = 257; copy1(RGPU_I64, &l, RGPU_BF16, &h); ck_assert_uint_eq(h, 0x4380);   /* 256 */
    l = (int64_t)1 << 62; copy1(RGPU_I64, &l, RGPU_F64, &dd); ck_assert(dd == 0x1p62);

    /* float <-> float */
    dd = 0.1; copy1(RGPU_F64, &dd, RGPU_F32, &f); ASSERT_F32_BITS(f, 0.1f);
    dd = 1e300; copy1(RGPU_F64, &dd, RGPU_F32, &f); ASSERT_F32_BITS(f, INFINITY);
    f = 0.1f; copy1(RGPU_F32, &f, RGPU_F16, &h); ck_assert_uint_eq(h, 0x2e66);
    f = 0x1p-24f; copy1(RGPU_F32, &f, RGPU_F16, &h); ck_assert_uint_eq(h, 0x0001);
    f = NAN; copy1(RGPU_F32, &f, RGPU_F16, &h); ck_assert_uint_eq(h & 0x7e00, 0x7e00);
    f = -INFINITY; copy1(RGPU_F32, &f, RGPU_BF16, &h); ck_assert_uint_eq(h, 0xff80);
    f = 0.1f; copy1(RGPU_F32, &f, RGPU_BF16, &h); ck_assert_uint_eq(h, 0x3dcd);
    h = 0x0001; copy1(RGPU_F16, &h, RGPU_F32, &f); ASSERT_F32_BITS(f, 0x1p-24f);
    h = 0x03ff; copy1(RGPU_F16, &h, RGPU_F64, &dd); ck_assert(dd == 1023 * 0x1p-24);
    h = 0x3dcd; copy1(RGPU_BF16, &h, RGPU_F32, &f); ASSERT_F32_BITS(f, ffrom(0x3dcd0000u));
    h = 0x3c01; copy1(RGPU_F16, &h, RGPU_BF16, &h); ck_assert_uint_eq(h, 0x3f80);  /* 1+2^-10 -> 1.0 */
    h = 0xc100; copy1(RGPU_F16, &h, RGPU_I32, &i32); ck_assert_int_eq(i32, -2);  /* -2.5 */
    /* f64 -> f16 rounds via f32, as c10 does: 1 + 2^-11 + 2^-40 becomes the
     * f32 tie 1 + 2^-11, then rounds to even 1.0 (direct rounding: 0x3c01) */
    dd = 1.0 + 0x1p-11 + 0x1p-40; copy1(RGPU_F64, &dd, RGPU_F16, &h); ck_assert_uint_eq(h, 0x3c00);
    dd = 65504.0; copy1(RGPU_F64, &dd, RGPU_F16, &h); ck_assert_uint_eq(h, 0x7bff);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Binary arithmetic */

START_TEST(test_add_f32_fast)
{
    enum { N = 1000 };
    static float a[N], b[N], o[N], keep[N];
    for (int i = 0; i < N; i++) { a[i] = (float)i * 0.37f - 100.0f; b[i] = 1.0f / (float)(i + 1); }
    rgpu_view va = view(a, RGPU_F32, 2, SZ(10, 100), NULL);
    rgpu_view vb = view(b, RGPU_F32, 2, SZ(10, 100), NULL);
    rgpu_view vo = view(o, RGPU_F32, 2, SZ(10, 100), NULL);
    rgpu_arg al = a_int(1);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vo, &va, &vb, &al, 1);
    for (int i = 0; i < N; i++) ASSERT_F32_BITS(o[i], a[i] + b[i]);
    al = a_flt(2.5);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vo, &va, &vb, &al, 1);
    for (int i = 0; i < N; i++) ASSERT_F32_BITS(o[i], a[i] + 2.5f * b[i]);
    al = a_flt(1.0);   /* alpha 1.0 is exact a+b too */
    RUN_OK(RGPU_OP_ADD_TENSOR, &vo, &va, &vb, &al, 1);
    for (int i = 0; i < N; i++) ASSERT_F32_BITS(o[i], a[i] + b[i]);
    /* in place: a.add_(b) */
    memcpy(keep, a, sizeof a);
    al = a_int(-3);
    RUN_OK(RGPU_OP_ADD_TENSOR, &va, &va, &vb, &al, 1);
    for (int i = 0; i < N; i++) ASSERT_F32_BITS(a[i], keep[i] + -3.0f * b[i]);
    /* in place, strided (slow path) */
    memcpy(a, keep, sizeof a);
    rgpu_view vs = view(a, RGPU_F32, 1, SZ(500), SZ(2));
    rgpu_view vbs = view(b, RGPU_F32, 1, SZ(500), SZ(2));
    al = a_int(1);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vs, &vs, &vbs, &al, 1);
    for (int i = 0; i < N; i++) ASSERT_F32_BITS(a[i], (i % 2) ? keep[i] : keep[i] + b[i]);
}
END_TEST

START_TEST(test_add_broadcast_transposed)
{
    float a[6] = { 1, 2, 3, 4, 5, 6 };      /* (2,3) */
    float r[3] = { 10, 20, 30 };            /* (3,) */
    float c[2] = { 100, 200 };              /* (2,1) */
    float o[6];
    rgpu_view va = view(a, RGPU_F32, 2, SZ(2, 3), NULL);
    rgpu_view vr = view(r, RGPU_F32, 1, SZ(3), NULL);
    rgpu_view vc = view(c, RGPU_F32, 2, SZ(2, 1), NULL);
    rgpu_view vo = view(o, RGPU_F32, 2, SZ(2, 3), NULL);
    rgpu_arg al = a_int(1);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vo, &va, &vr, &al, 1);
    for (int i = 0; i < 6; i++) ASSERT_F32_BITS(o[i], a[i] + r[i % 3]);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vo, &vc, &va, &al, 1);    /* broadcast first operand */
    for (int i = 0; i < 6; i++) ASSERT_F32_BITS(o[i], c[i / 3] + a[i]);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vo, &vc, &vr, &al, 1);    /* (2,1) + (3,) -> (2,3) */
    for (int i = 0; i < 6; i++) ASSERT_F32_BITS(o[i], c[i / 3] + r[i % 3]);
    /* a.t() (3,2) + b (3,2) contiguous -> out (3,2) */
    float b[6] = { 0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f };
    rgpu_view vat = view(a, RGPU_F32, 2, SZ(3, 2), SZ(1, 3));
    rgpu_view vb = view(b, RGPU_F32, 2, SZ(3, 2), NULL);
    rgpu_view vo2 = view(o, RGPU_F32, 2, SZ(3, 2), NULL);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vo2, &vat, &vb, &al, 1);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) ASSERT_F32_BITS(o[2 * i + j], a[i + 3 * j] + b[2 * i + j]);
    /* out transposed (column-major) */
    rgpu_view vot = view(o, RGPU_F32, 2, SZ(2, 3), SZ(1, 2));
    RUN_OK(RGPU_OP_ADD_TENSOR, &vot, &va, &vr, &al, 1);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) ASSERT_F32_BITS(o[i + 2 * j], a[3 * i + j] + r[j]);
    /* does not broadcast */
    float z[4];
    rgpu_view v4 = view(z, RGPU_F32, 1, SZ(4), NULL);
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_ADD_TENSOR, &vo, &va, &v4, &al, 1);
    rgpu_view v23 = view(z, RGPU_F32, 2, SZ(2, 3), NULL);
    rgpu_view vo3 = view(o, RGPU_F32, 1, SZ(3), NULL);    /* out smaller than an input */
    RUN_ERR(RGPU_ERR_SHAPE, RGPU_OP_ADD_TENSOR, &vo3, &vr, &v23, &al, 1);
}
END_TEST

START_TEST(test_add_mixed_dtypes)
{
    rgpu_arg al = a_int(1);
    /* i64 + f32 -> f32 */
    int64_t l[3] = { 16777217, -3, 5 };
    float f[3] = { 0.5f, 0.25f, -5.0f }, o[3];
    rgpu_view vl = view(l, RGPU_I64, 1, SZ(3), NULL);
    rgpu_view vf = view(f, RGPU_F32, 1, SZ(3), NULL);
    rgpu_view vo = view(o, RGPU_F32, 1, SZ(3), NULL);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vo, &vl, &vf, &al, 1);
    ASSERT_F32_BITS(o[0], 16777216.0f + 0.5f);
    ASSERT_F32_BITS(o[1], -2.75f);
    ASSERT_F32_BITS(o[2], 0.0f);
    /* u8 + i8 -> i16 */
    uint8_t u[3] = { 200, 255, 0 };
    int8_t s[3] = { -100, 127, -128 };
    int16_t o16[3];
    rgpu_view vu = view(u, RGPU_U8, 1, SZ(3), NULL);
    rgpu_view vs = view(s, RGPU_I8, 1, SZ(3), NULL);
    rgpu_view vo16 = view(o16, RGPU_I16, 1, SZ(3), NULL);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vo16, &vu, &vs, &al, 1);
    ck_assert_int_eq(o16[0], 100); ck_assert_int_eq(o16[1], 382); ck_assert_int_eq(o16[2], -128);
    /* f16 + f16 -> f16: computed in float, one rounding at the end */
    uint16_t ha[3] = { 0x3c00, 0x3c01, 0x7bff }, hb[3] = { 0x1000, 0x1000, 0x7bff }, ho[3];
    rgpu_view vha = view(ha, RGPU_F16, 1, SZ(3), NULL);
    rgpu_view vhb = view(hb, RGPU_F16, 1, SZ(3), NULL);
    rgpu_view vho = view(ho, RGPU_F16, 1, SZ(3), NULL);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vho, &vha, &vhb, &al, 1);
    ck_assert_uint_eq(ho[0], 0x3c00);   /* 1 + 2^-11: tie -> even */
    ck_assert_uint_eq(ho[1], 0x3c02);   /* (1+2^-10) + 2^-11: tie -> even */
    ck_assert_uint_eq(ho[2], 0x7c00);   /* overflow -> inf */
    /* bf16 */
    uint16_t ba[1] = { 0x3f80 }, bb[1] = { 0x3b80 }, bo[1];   /* 1 + 2^-8: tie -> 1.0 */
    rgpu_view vba = view(ba, RGPU_BF16, 1, SZ(1), NULL);
    rgpu_view vbb = view(bb, RGPU_BF16, 1, SZ(1), NULL);
    rgpu_view vbo = view(bo, RGPU_BF16, 1, SZ(1), NULL);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vbo, &vba, &vbb, &al, 1);
    ck_assert_uint_eq(bo[0], 0x3f80);
    /* f64 + f32 -> f64 */
    double d[1] = { 0.1 }, dout[1];
    float f1[1] = { 0.1f };
    rgpu_view vd = view(d, RGPU_F64, 1, SZ(1), NULL);
    rgpu_view vf1 = view(f1, RGPU_F32, 1, SZ(1), NULL);
    rgpu_view vdo = view(dout, RGPU_F64, 1, SZ(1), NULL);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vdo, &vd, &vf1, &al, 1);
    ck_assert(dout[0] == 0.1 + (double)0.1f);
    /* bool + f32 -> f32 */
    uint8_t bl[3] = { 1, 0, 1 };
    rgpu_view vbl = view(bl, RGPU_BOOL, 1, SZ(3), NULL);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vo, &vbl, &vf, &al, 1);
    ASSERT_F32_BITS(o[0], 1.5f); ASSERT_F32_BITS(o[1], 0.25f); ASSERT_F32_BITS(o[2], -4.0f);
}
END_TEST

START_TEST(test_add_int_and_bool)
{
    int32_t a[3] = { INT32_MAX, -5, 100 }, b[3] = { 1, 2, -7 }, o[3];
    rgpu_view va = view(a, RGPU_I32, 1, SZ(3), NULL);
    rgpu_view vb = view(b, RGPU_I32, 1, SZ(3), NULL);
    rgpu_view vo = view(o, RGPU_I32, 1, SZ(3), NULL);
    rgpu_arg al = a_int(1);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vo, &va, &vb, &al, 1);
    ck_assert_int_eq(o[0], INT32_MIN); ck_assert_int_eq(o[1], -3); ck_assert_int_eq(o[2], 93);
    al = a_int(3);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vo, &va, &vb, &al, 1);
    ck_assert_int_eq(o[1], 1); ck_assert_int_eq(o[2], 79);
    int64_t la[2] = { INT64_MAX, INT64_MIN }, lb[2] = { 1, 1 }, lo[2];
    rgpu_view vla = view(la, RGPU_I64, 1, SZ(2), NULL);
    rgpu_view vlb = view(lb, RGPU_I64, 1, SZ(2), NULL);
    rgpu_view vlo = view(lo, RGPU_I64, 1, SZ(2), NULL);
    al = a_int(1);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vlo, &vla, &vlb, &al, 1);
    ck_assert(lo[0] == INT64_MIN);
    RUN_OK(RGPU_OP_SUB_TENSOR, &vlo, &vla, &vlb, &al, 1);
    ck_assert(lo[1] == INT64_MAX);
    uint8_t u[2] = { 250, 3 }, uo[2];
    rgpu_view vu = view(u, RGPU_U8, 1, SZ(2), NULL);
    rgpu_view vuo = view(uo, RGPU_U8, 1, SZ(2), NULL);
    rgpu_arg sa[2] = { a_int(10), a_int(1) };
    RUN_OK(RGPU_OP_ADD_SCALAR, &vuo, &vu, NULL, sa, 2);
    ck_assert_int_eq(uo[0], 4); ck_assert_int_eq(uo[1], 13);

    /* bool: add is or, mul is and */
    uint8_t ba[4] = { 0, 0, 1, 1 }, bb[4] = { 0, 1, 0, 1 }, bo[4];
    rgpu_view vba = view(ba, RGPU_BOOL, 1, SZ(4), NULL);
    rgpu_view vbb = view(bb, RGPU_BOOL, 1, SZ(4), NULL);
    rgpu_view vbo = view(bo, RGPU_BOOL, 1, SZ(4), NULL);
    al = a_bool(1);
    RUN_OK(RGPU_OP_ADD_TENSOR, &vbo, &vba, &vbb, &al, 1);
    ck_assert(bo[0] == 0 && bo[1] == 1 && bo[2] == 1 && bo[3] == 1);
    al = a_int(0);   /* a || (0 && b) = a */
    RUN_OK(RGPU_OP_ADD_TENSOR, &vbo, &vba, &vbb, &al, 1);
    ck_assert(bo[0] == 0 && bo[1] == 0 && bo[2] == 1 && bo[3] == 1);
    RUN_OK(RGPU_OP_MUL_TENSOR, &vbo, &vba, &vbb, NULL, 0);
    ck_assert(bo[0] == 0 && bo[1] == 0 && bo[2] == 0 && bo[3] == 1);
    rgpu_arg zero = a_int(0);
    RUN_OK(RGPU_OP_MUL_SCALAR, &vbo, &vba, NULL, &zero, 1);
    ck_assert(bo[0] == 0 && bo[1] == 0 && bo[2] == 0 && bo[3] == 0);
}
END_TEST

START_TEST(test_sub_and_scalar_ops)
{
    float a[4] = { 1.0f, -2.0f, 3.5f, 0.1f }, b[4] = { 0.5f, 0.5f, -1.0f, 0.2f }, o[4];
    rgpu_view va = view(a, RGPU_F32, 1, SZ(4), NULL);
    rgpu_view vb = view(b, RGPU_F32, 1, SZ(4), NULL);
    rgpu_view vo = view(o, RGPU_F32, 1, SZ(4), NULL);
    rgpu_arg al = a_int(1);
    RUN_OK(RGPU_OP_SUB_TENSOR, &vo, &va, &vb, &al, 1);
    for (int i = 0; i < 4; i++) ASSERT_F32_BITS(o[i], a[i] - b[i]);
    al = a_int(2);
    RUN_OK(RGPU_OP_SUB_TENSOR, &vo, &va, &vb, &al, 1);
    for (int i = 0; i < 4; i++) ASSERT_F32_BITS(o[i], a[i] - 2.0f * b[i]);

    rgpu_arg sa[2] = { a_flt(2.5), a_int(2) };
    RUN_OK(RGPU_OP_ADD_SCALAR, &vo, &va, NULL, sa, 2);
    for (int i = 0; i < 4; i++) ASSERT_F32_BITS(o[i], a[i] + 2.0f * 2.5f);
    RUN_OK(RGPU_OP_SUB_SCALAR, &vo, &va, NULL, sa, 2);
    for (int i = 0; i < 4; i++) ASSERT_F32_BITS(o[i], a[i] - 2.0f * 2.5f);
    sa[0] = a_int(10);
    RUN_OK(RGPU_OP_RSUB_SCALAR, &vo, &va, NULL, sa, 2);   /* 10 - 2*a */
    for (int i = 0; i < 4; i++) ASSERT_F32_BITS(o[i], 10.0f - 2.0f * a[i]);
    sa[1] = a_int(1);
    RUN_OK(RGPU_OP_RSUB_SCALAR, &vo, &va, NULL, sa, 2);
    for (int i = 0; i < 4; i++) ASSERT_F32_BITS(o[i], 10.0f - a[i]);
    rgpu_arg other = a_flt(0.1);   /* the scalar becomes (float)0.1 */
    RUN_OK(RGPU_OP_MUL_SCALAR, &vo, &va, NULL, &other, 1);
    for (int i = 0; i < 4; i++) ASSERT_F32_BITS(o[i], a[i] * 0.1f);
    other = a_flt(3.0);
    RUN_OK(RGPU_OP_DIV_SCALAR, &vo, &va, NULL, &other, 1);
    for (int i = 0; i < 4; i++) ASSERT_F32_BITS(o[i], a[i] / 3.0f);
    /* in place scalar op, strided */
    RUN_OK(RGPU_OP_MUL_SCALAR, &va, &va, NULL, &other, 1);
    ASSERT_F32_BITS(a[0], 3.0f); ASSERT_F32_BITS(a[3], 0.1f * 3.0f);

    /* f64 scalar keeps double precision */
    double d[2] = { 1.0, 2.0 }, dout[2];
    rgpu_view vd = view(d, RGPU_F64, 1, SZ(2), NULL);
    rgpu_view vdo = view(dout, RGPU_F64, 1, SZ(2), NULL);
    other = a_flt(0.1);
    RUN_OK(RGPU_OP_MUL_SCALAR, &vdo, &vd, NULL, &other, 1);
    ck_assert(dout[1] == 2.0 * 0.1);
    /* int rsub and mul */
    int64_t l[3] = { 1, 2, 3 }, lo[3];
    rgpu_view vl = view(l, RGPU_I64, 1, SZ(3), NULL);
    rgpu_view vlo = view(lo, RGPU_I64, 1, SZ(3), NULL);
    rgpu_arg ia[2] = { a_int(5), a_int(3) };
    RUN_OK(RGPU_OP_RSUB_SCALAR, &vlo, &vl, NULL, ia, 2);
    ck_assert(lo[0] == 2 && lo[1] == -1 && lo[2] == -4);
    RUN_OK(RGPU_OP_MUL_SCALAR, &vlo, &vl, NULL, ia, 1);
    ck_assert(lo[0] == 5 && lo[1] == 10 && lo[2] == 15);
    /* f16 output with a scalar */
    uint16_t h[2] = { 0x3c00, 0x4000 }, ho[2];
    rgpu_view vh = view(h, RGPU_F16, 1, SZ(2), NULL);
    rgpu_view vho = view(ho, RGPU_F16, 1, SZ(2), NULL);
    rgpu_arg ha[2] = { a_flt(0.1), a_int(1) };
    RUN_OK(RGPU_OP_ADD_SCALAR, &vho, &vh, NULL, ha, 2);
    ck_assert_uint_eq(ho[0], rgpu_float_to_half(1.0f + 0.1f));
    ck_assert_uint_eq(ho[1], rgpu_float_to_half(2.0f + 0.1f));
}
END_TEST

START_TEST(test_mul_div)
{
    float a[5] = { 1, -1, 0, 6, 1 }, b[5] = { 0, 0, 0, 4, 3 }, o[5];
    rgpu_view va = view(a, RGPU_F32, 1, SZ(5), NULL);
    rgpu_view vb = view(b, RGPU_F32, 1, SZ(5), NULL);
    rgpu_view vo = view(o, RGPU_F32, 1, SZ(5), NULL);
    RUN_OK(RGPU_OP_DIV_TENSOR, &vo, &va, &vb, NULL, 0);
    ck_assert(isinf(o[0]) && o[0] > 0);
    ck_assert(isinf(o[1]) && o[1] < 0);
    ck_assert(isnan(o[2]));
    ASSERT_F32_BITS(o[3], 1.5f);
    ASSERT_F32_BITS(o[4], 1.0f / 3.0f);
    RUN_OK(RGPU_OP_MUL_TENSOR, &vo, &va, &vb, NULL, 0);
    ASSERT_F32_BITS(o[3], 24.0f);
    ASSERT_F32_BITS(o[1], -0.0f);
    /* int / int -> float output (true division) */
    int32_t ia[2] = { 7, -7 }, ib[2] = { 2, 2 };
    rgpu_view via = view(ia, RGPU_I32, 1, SZ(2), NULL);
    rgpu_view vib = view(ib, RGPU_I32, 1, SZ(2), NULL);
    rgpu_view vo2 = view(o, RGPU_F32, 1, SZ(2), NULL);
    RUN_OK(RGPU_OP_DIV_TENSOR, &vo2, &via, &vib, NULL, 0);
    ASSERT_F32_BITS(o[0], 3.5f); ASSERT_F32_BITS(o[1], -3.5f);
    /* integer output for division: unsupported */
    int32_t io[2];
    rgpu_view vio = view(io, RGPU_I32, 1, SZ(2), NULL);
    RUN_ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_DIV_TENSOR, &vio, &via, &vib, NULL, 0);
    rgpu_arg two = a_int(2);
    RUN_ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_DIV_SCALAR, &vio, &via, NULL, &two, 1);
    /* int mul */
    RUN_OK(RGPU_OP_MUL_TENSOR, &vio, &via, &vib, NULL, 0);
    ck_assert_int_eq(io[0], 14); ck_assert_int_eq(io[1], -14);
}
END_TEST

/* Operands over several chunks, mixed dtypes and strides (no fast path). */
START_TEST(test_binary_chunks_3d)
{
    enum { A = 3, B = 7, C = 301 };   /* rows longer than one chunk */
    static int32_t x[A * B * C];
    static float y[C], o[A * B * C * 2];
    for (int i = 0; i < A * B * C; i++) x[i] = i - 1000;
    for (int i = 0; i < C; i++) y[i] = (float)i * 0.5f;
    for (int i = 0; i < A * B * C * 2; i++) o[i] = -1.0f;
    /* x viewed (A,B,C) contiguous; y (C,) broadcast; out (A,B,C) with stride 2 on the last dim */
    rgpu_view vx = view(x, RGPU_I32, 3, SZ(A, B, C), NULL);
    rgpu_view vy = view(y, RGPU_F32, 1, SZ(C), NULL);
    rgpu_view vo = view(o, RGPU_F32, 3, SZ(A, B, C), SZ(2 * B * C, 2 * C, 2));
    rgpu_arg al = a_int(-2);
    RUN_OK(RGPU_OP_SUB_TENSOR, &vo, &vx, &vy, &al, 1);
    for (int i = 0; i < A * B * C; i++) {
        ASSERT_F32_BITS(o[2 * i], (float)x[i] - -2.0f * y[i % C]);
        ASSERT_F32_BITS(o[2 * i + 1], -1.0f);
    }
    /* permuted output (C,A,B) memory order, a permuted, 0-d b */
    static double od[A * B * C];
    double half = 0.5;
    rgpu_view vod = view(od, RGPU_F64, 3, SZ(A, B, C), SZ(B, 1, A * B));
    rgpu_view vb0 = view(&half, RGPU_F64, 0, NULL, NULL);
    RUN_OK(RGPU_OP_MUL_TENSOR, &vod, &vx, &vb0, NULL, 0);
    for (int i = 0; i < A; i++)
        for (int j = 0; j < B; j++)
            for (int k = 0; k < C; k++)
                ck_assert(od[i * B + j + k * A * B] == 0.5 * x[(i * B + j) * C + k]);
}
END_TEST

START_TEST(test_binary_errors)
{
    int32_t a[2] = { 1, 2 }, o[2];
    float f[2] = { 1, 2 }, fo[2];
    uint8_t bl[2] = { 1, 0 }, bo[2];
    rgpu_view va = view(a, RGPU_I32, 1, SZ(2), NULL);
    rgpu_view vo = view(o, RGPU_I32, 1, SZ(2), NULL);
    rgpu_view vf = view(f, RGPU_F32, 1, SZ(2), NULL);
    rgpu_view vfo = view(fo, RGPU_F32, 1, SZ(2), NULL);
    rgpu_view vb = view(bl, RGPU_BOOL, 1, SZ(2), NULL);
    rgpu_view vbo = view(bo, RGPU_BOOL, 1, SZ(2), NULL);
    rgpu_arg al = a_flt(1.5);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_ADD_TENSOR, &vo, &va, &va, &al, 1);   /* float alpha, int out */
    al = a_bool(1);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_ADD_TENSOR, &vfo, &vf, &vf, &al, 1);  /* bool alpha, float out */
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_ADD_TENSOR, &vfo, &vf, &vf, NULL, 0); /* missing alpha */
    al = a_ints_n(SZ(1), 1);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_ADD_TENSOR, &vfo, &vf, &vf, &al, 1);
    al = a_int(1);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_ADD_TENSOR, &vfo, &vf, NULL, &al, 1); /* NULL input */
    RUN_ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_SUB_TENSOR, &vbo, &vb, &vb, &al, 1);
    RUN_ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_SUB_TENSOR, &vfo, &vb, &vf, &al, 1);
    rgpu_arg sa[2] = { a_int(1), a_int(1) };
    RUN_ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_RSUB_SCALAR, &vbo, &vb, NULL, sa, 2);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_MUL_SCALAR, &vfo, &vf, NULL, NULL, 0);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SUB_SCALAR, &vfo, &vf, NULL, sa, 1);  /* no alpha */

    /* arity */
    ck_assert_int_eq(exec_op(RGPU_OP_MUL_TENSOR, INS(&vf), 1, OUTS(&vfo), 1, NOARGS), RGPU_ERR_ARITY);
    rgpu_exec e;
    memset(&e, 0, sizeof e);
    e.op = RGPU_OP_MUL_TENSOR;
    e.n_in = 2; e.in[0] = &vf; e.in[1] = &vf; e.n_out = 0;
    ck_assert_int_eq(rgpu_cpu_exec(&e, g_err, sizeof g_err), RGPU_ERR_ARITY);
    e.n_out = 1; e.out[0] = &vfo;
    ck_assert_int_eq(rgpu_cpu_exec(&e, NULL, 0), RGPU_OK);   /* no err buffer is fine */
    e.n_in = 1000;
    ck_assert_int_eq(rgpu_cpu_exec(&e, g_err, 1), RGPU_ERR_ARITY);
    ck_assert_int_eq(g_err[0], '\0');
    ck_assert_int_eq(rgpu_cpu_exec(NULL, g_err, sizeof g_err), RGPU_ERR_BAD_ARG);
}
END_TEST

/* ---------------------------------------------------------------------------
 * SUM / MEAN */

static rgpu_status reduce(int op, rgpu_view *out, const rgpu_view *in, const int64_t *dims, uint32_t nd, int keepdim)
{
    rgpu_arg a[2] = { a_ints_n(dims, nd), a_bool(keepdim) };
    return run(op, out, in, NULL, a, 2);
}
#define RED_OK(...) ASSERT_STATUS_OK(reduce(__VA_ARGS__))
#define RED_ERR(code, ...) do { rgpu_status st_ = reduce(__VA_ARGS__); \
    ck_assert_msg(st_ == (code), "want %d, got %d (%s)", (int)(code), (int)st_, g_err); } while (0)

START_TEST(test_sum_dims)
{
    float x[6] = { 1, 2, 3, 4, 5, 6 };   /* (2,3) */
    float o[6];
    rgpu_view vx = view(x, RGPU_F32, 2, SZ(2, 3), NULL);
    rgpu_view o2 = view(o, RGPU_F32, 1, SZ(2), NULL);
    RED_OK(RGPU_OP_SUM, &o2, &vx, SZ(1), 1, 0);
    ASSERT_F32_BITS(o[0], 6.0f); ASSERT_F32_BITS(o[1], 15.0f);
    RED_OK(RGPU_OP_SUM, &o2, &vx, SZ(-1), 1, 0);
    ASSERT_F32_BITS(o[0], 6.0f); ASSERT_F32_BITS(o[1], 15.0f);
    rgpu_view o21 = view(o, RGPU_F32, 2, SZ(2, 1), NULL);
    RED_OK(RGPU_OP_SUM, &o21, &vx, SZ(1), 1, 1);
    ASSERT_F32_BITS(o[0], 6.0f); ASSERT_F32_BITS(o[1], 15.0f);
    rgpu_view o3 = view(o, RGPU_F32, 1, SZ(3), NULL);
    RED_OK(RGPU_OP_SUM, &o3, &vx, SZ(0), 1, 0);
    ASSERT_F32_BITS(o[0], 5.0f); ASSERT_F32_BITS(o[1], 7.0f); ASSERT_F32_BITS(o[2], 9.0f);
    /* out with a stride: (1,3) keepdim, written every other element */
    for (int i = 0; i < 6; i++) o[i] = -1;
    rgpu_view o13 = view(o, RGPU_F32, 2, SZ(1, 3), SZ(6, 2));
    RED_OK(RGPU_OP_SUM, &o13, &vx, SZ(-2), 1, 1);
    ASSERT_F32_BITS(o[0], 5.0f); ASSERT_F32_BITS(o[1], -1.0f); ASSERT_F32_BITS(o[4], 9.0f);
    /* all dims: empty list -> 0-d; both dims listed -> 0-d; keepdim -> (1,1) */
    rgpu_view o0 = view(o, RGPU_F32, 0, NULL, NULL);
    RED_OK(RGPU_OP_SUM, &o0, &vx, NULL, 0, 0);
    ASSERT_F32_BITS(o[0], 21.0f);
    RED_OK(RGPU_OP_SUM, &o0, &vx, SZ(1, 0), 2, 0);
    ASSERT_F32_BITS(o[0], 21.0f);
    rgpu_view o11 = view(o, RGPU_F32, 2, SZ(1, 1), NULL);
    RED_OK(RGPU_OP_SUM, &o11, &vx, NULL, 0, 1);
    ASSERT_F32_BITS(o[0], 21.0f);
    /* transposed input: x.t() (3,2), sum dim 1 -> (3,) */
    rgpu_view vt = view(x, RGPU_F32, 2, SZ(3, 2), SZ(1, 3));
    RED_OK(RGPU_OP_SUM, &o3, &vt, SZ(1), 1, 0);
    ASSERT_F32_BITS(o[0], 5.0f); ASSERT_F32_BITS(o[1], 7.0f); ASSERT_F32_BITS(o[2], 9.0f);
    /* 3-d (2,3,4) over {0,2} -> (3,) ; broadcast (stride 0) input */
    double y[24], yo[3];
    for (int i = 0; i < 24; i++) y[i] = i;
    rgpu_view vy = view(y, RGPU_F64, 3, SZ(2, 3, 4), NULL);
    rgpu_view vyo = view(yo, RGPU_F64, 1, SZ(3), NULL);
    RED_OK(RGPU_OP_SUM, &vyo, &vy, SZ(0, -1), 2, 0);
    for (int j = 0; j < 3; j++) {
        double s = 0;
        for (int i = 0; i < 2; i++) for (int k = 0; k < 4; k++) s += y[12 * i + 4 * j + k];
        ck_assert(yo[j] == s);
    }
    rgpu_view vbc = view(y, RGPU_F64, 2, SZ(3, 5), SZ(1, 0));   /* y[i] repeated 5 times */
    RED_OK(RGPU_OP_SUM, &vyo, &vbc, SZ(1), 1, 0);
    ck_assert(yo[0] == 0 && yo[1] == 5 && yo[2] == 10);
    /* f32 accumulates in double: 2^24 + 1 + 1 exact before the final rounding */
    float big[3] = { 16777216.0f, 1.0f, 1.0f };
    rgpu_view vbig = view(big, RGPU_F32, 1, SZ(3), NULL);
    RED_OK(RGPU_OP_SUM, &o0, &vbig, NULL, 0, 0);
    ASSERT_F32_BITS(o[0], 16777218.0f);
}
END_TEST

START_TEST(test_sum_dtypes)
{
    int32_t x[4] = { INT32_MAX, INT32_MAX, -1, 5 };
    int64_t l[2];
    rgpu_view vx = view(x, RGPU_I32, 2, SZ(2, 2), NULL);
    rgpu_view vl = view(l, RGPU_I64, 1, SZ(2), NULL);
    RED_OK(RGPU_OP_SUM, &vl, &vx, SZ(0), 1, 0);   /* i32 sums into i64, no overflow */
    ck_assert(l[0] == (int64_t)INT32_MAX - 1 && l[1] == (int64_t)INT32_MAX + 5);
    uint8_t b[5] = { 1, 0, 1, 1, 0 };
    rgpu_view vb = view(b, RGPU_BOOL, 1, SZ(5), NULL);
    rgpu_view l0 = view(l, RGPU_I64, 0, NULL, NULL);
    RED_OK(RGPU_OP_SUM, &l0, &vb, NULL, 0, 0);
    ck_assert(l[0] == 3);
    int64_t w[2] = { INT64_MAX, 1 };
    rgpu_view vw = view(w, RGPU_I64, 1, SZ(2), NULL);
    RED_OK(RGPU_OP_SUM, &l0, &vw, NULL, 0, 0);   /* wraps like ATen */
    ck_assert(l[0] == INT64_MIN);
    uint16_t h[3] = { 0x3c00, 0x1000, 0x1000 }, ho;   /* 1 + 2^-11 + 2^-11 in double, then f16 */
    rgpu_view vh = view(h, RGPU_F16, 1, SZ(3), NULL);
    rgpu_view vho = view(&ho, RGPU_F16, 0, NULL, NULL);
    RED_OK(RGPU_OP_SUM, &vho, &vh, NULL, 0, 0);
    ck_assert_uint_eq(ho, 0x3c01);
    float fo;   /* sum(int tensor, dtype=float32) */
    rgpu_view vfo = view(&fo, RGPU_F32, 0, NULL, NULL);
    RED_OK(RGPU_OP_SUM, &vfo, &vx, NULL, 0, 0);
    ASSERT_F32_BITS(fo, (float)(2.0 * INT32_MAX + 4));
    uint8_t bo;   /* sum(dtype=bool): any non-zero */
    rgpu_view vbo = view(&bo, RGPU_BOOL, 0, NULL, NULL);
    RED_OK(RGPU_OP_SUM, &vbo, &vb, NULL, 0, 0);
    ck_assert_int_eq(bo, 1);
}
END_TEST

START_TEST(test_sum_0d_and_empty)
{
    float s = 4.5f, o = 0, big[6];
    rgpu_view vs = view(&s, RGPU_F32, 0, NULL, NULL);
    rgpu_view vo = view(&o, RGPU_F32, 0, NULL, NULL);
    RED_OK(RGPU_OP_SUM, &vo, &vs, NULL, 0, 0);
    ASSERT_F32_BITS(o, 4.5f);
    o = 0;
    RED_OK(RGPU_OP_SUM, &vo, &vs, SZ(0), 1, 1);
    ASSERT_F32_BITS(o, 4.5f);
    RED_OK(RGPU_OP_SUM, &vo, &vs, SZ(-1), 1, 0);
    RED_ERR(RGPU_ERR_SHAPE, RGPU_OP_SUM, &vo, &vs, SZ(1), 1, 0);
    RED_ERR(RGPU_ERR_SHAPE, RGPU_OP_SUM, &vo, &vs, SZ(0, -1), 2, 0);
    RED_OK(RGPU_OP_MEAN, &vo, &vs, NULL, 0, 0);
    ASSERT_F32_BITS(o, 4.5f);

    /* (0,3) sum over dim 0 -> (3,) zeros */
    for (int i = 0; i < 6; i++) big[i] = -1;
    rgpu_view e03 = view(NULL, RGPU_F32, 2, SZ(0, 3), NULL);
    rgpu_view o3 = view(big, RGPU_F32, 1, SZ(3), NULL);
    RED_OK(RGPU_OP_SUM, &o3, &e03, SZ(0), 1, 0);
    for (int i = 0; i < 3; i++) ASSERT_F32_BITS(big[i], 0.0f);
    ASSERT_F32_BITS(big[3], -1.0f);
    RED_OK(RGPU_OP_MEAN, &o3, &e03, SZ(0), 1, 0);   /* mean over nothing: NaN */
    for (int i = 0; i < 3; i++) ck_assert(isnan(big[i]));
    /* (0,3) over dim 1 -> (0,): nothing written */
    uint8_t g[8];
    memset(g, GUARD, sizeof g);
    rgpu_view o0 = view(g, RGPU_F32, 1, SZ(0), NULL);
    RED_OK(RGPU_OP_SUM, &o0, &e03, SZ(1), 1, 0);
    check_guard(g, sizeof g);
    /* all of an empty tensor -> 0 */
    RED_OK(RGPU_OP_SUM, &vo, &e03, NULL, 0, 0);
    ASSERT_F32_BITS(o, 0.0f);
    int64_t lo = 9;
    rgpu_view vlo = view(&lo, RGPU_I64, 0, NULL, NULL);
    rgpu_view ei = view(NULL, RGPU_I32, 1, SZ(0), NULL);
    RED_OK(RGPU_OP_SUM, &vlo, &ei, NULL, 0, 0);
    ck_assert(lo == 0);
}
END_TEST

START_TEST(test_sum_errors)
{
    float x[6] = { 0 }, o[6];
    rgpu_view vx = view(x, RGPU_F32, 2, SZ(2, 3), NULL);
    rgpu_view o2 = view(o, RGPU_F32, 1, SZ(2), NULL);
    rgpu_view o3 = view(o, RGPU_F32, 1, SZ(3), NULL);
    rgpu_view o21 = view(o, RGPU_F32, 2, SZ(2, 1), NULL);
    RED_ERR(RGPU_ERR_SHAPE, RGPU_OP_SUM, &o2, &vx, SZ(1, -1), 2, 0);   /* twice */
    RED_ERR(RGPU_ERR_SHAPE, RGPU_OP_SUM, &o2, &vx, SZ(2), 1, 0);       /* out of range */
    RED_ERR(RGPU_ERR_SHAPE, RGPU_OP_SUM, &o2, &vx, SZ(-3), 1, 0);
    RED_ERR(RGPU_ERR_SHAPE, RGPU_OP_SUM, &o3, &vx, SZ(1), 1, 0);       /* wrong out sizes */
    RED_ERR(RGPU_ERR_SHAPE, RGPU_OP_SUM, &o2, &vx, SZ(1), 1, 1);       /* keepdim wants (2,1) */
    RED_ERR(RGPU_ERR_SHAPE, RGPU_OP_SUM, &o21, &vx, SZ(1), 1, 0);      /* no keepdim wants (2,) */
    ck_assert_msg(strstr(g_err, "[2,1]") && strstr(g_err, "[2]"), "message: %s", g_err);
    /* arg kinds */
    rgpu_arg a[2] = { a_int(1), a_bool(0) };
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SUM, &o2, &vx, NULL, a, 2);
    a[0] = a_ints_n(SZ(1), 1);
    a[1] = a_flt(0);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SUM, &o2, &vx, NULL, a, 2);
    RUN_ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SUM, &o2, &vx, NULL, a, 1);
    /* mean into an integer dtype */
    int64_t l[2];
    rgpu_view lo = view(l, RGPU_I64, 1, SZ(2), NULL);
    RED_ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_MEAN, &lo, &vx, SZ(1), 1, 0);
}
END_TEST

START_TEST(test_mean)
{
    float x[6] = { 1, 2, 3, 4, 5, 6 }, o[3];
    rgpu_view vx = view(x, RGPU_F32, 2, SZ(2, 3), NULL);
    rgpu_view o3 = view(o, RGPU_F32, 1, SZ(3), NULL);
    RED_OK(RGPU_OP_MEAN, &o3, &vx, SZ(0), 1, 0);
    ASSERT_F32_BITS(o[0], 2.5f); ASSERT_F32_BITS(o[1], 3.5f); ASSERT_F32_BITS(o[2], 4.5f);
    rgpu_view o0 = view(o, RGPU_F32, 0, NULL, NULL);
    RED_OK(RGPU_OP_MEAN, &o0, &vx, NULL, 0, 0);
    ASSERT_F32_BITS(o[0], 3.5f);
    rgpu_view o21 = view(o, RGPU_F32, 2, SZ(2, 1), NULL);
    RED_OK(RGPU_OP_MEAN, &o21, &vx, SZ(1), 1, 1);
    ASSERT_F32_BITS(o[0], 2.0f); ASSERT_F32_BITS(o[1], 5.0f);
    /* x / 3 rounded once from double */
    float t[3] = { 0.1f, 0.2f, 0.3f };
    rgpu_view vt = view(t, RGPU_F32, 1, SZ(3), NULL);
    RED_OK(RGPU_OP_MEAN, &o0, &vt, SZ(0), 1, 0);
    ASSERT_F32_BITS(o[0], (float)(((double)0.1f + (double)0.2f + (double)0.3f) / 3.0));
    /* int input, f16 output (mean(dtype=half)) */
    int32_t ix[4] = { 1, 2, 3, 5 };
    uint16_t ho;
    rgpu_view vix = view(ix, RGPU_I32, 1, SZ(4), NULL);
    rgpu_view vho = view(&ho, RGPU_F16, 0, NULL, NULL);
    RED_OK(RGPU_OP_MEAN, &vho, &vix, NULL, 0, 0);
    ck_assert_uint_eq(ho, rgpu_float_to_half(2.75f));
    double d[3] = { 1, 2, 4 }, dm;
    rgpu_view vd = view(d, RGPU_F64, 1, SZ(3), NULL);
    rgpu_view vdm = view(&dm, RGPU_F64, 0, NULL, NULL);
    RED_OK(RGPU_OP_MEAN, &vdm, &vd, SZ(0), 1, 0);
    ck_assert(dm == 7.0 / 3.0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Dispatch */

START_TEST(test_dispatch)
{
    for (int op = 0; op < RGPU_OP_COUNT; op++) ck_assert_msg(rgpu_cpu_supports(op), "op %s", rgpu_op_name(op));
    ck_assert(!rgpu_cpu_supports(RGPU_OP_COUNT));
    ck_assert(!rgpu_cpu_supports(-1));
    static const int control[] = { RGPU_OP_NOP, RGPU_OP_FREE, RGPU_OP_SYNC, RGPU_OP_UPLOAD,
                                   RGPU_OP_DOWNLOAD, RGPU_OP_ALIAS, RGPU_OP_LOCAL_SCALAR_DENSE,
                                   RGPU_OP_EMPTY };
    for (size_t i = 0; i < sizeof control / sizeof control[0]; i++) {
        rgpu_exec e;
        memset(&e, 0, sizeof e);
        e.op = control[i];
        ck_assert_int_eq(rgpu_cpu_exec(&e, g_err, sizeof g_err), RGPU_OK);
    }
    rgpu_exec e;
    memset(&e, 0, sizeof e);
    e.op = RGPU_OP_COUNT;
    ck_assert_int_eq(rgpu_cpu_exec(&e, g_err, sizeof g_err), RGPU_ERR_UNSUPPORTED);
    ck_assert(strstr(g_err, "unsupported") != NULL);
    e.op = 9999;
    ck_assert_int_eq(rgpu_cpu_exec(&e, g_err, sizeof g_err), RGPU_ERR_UNSUPPORTED);
    e.op = -3;
    ck_assert_int_eq(rgpu_cpu_exec(&e, g_err, sizeof g_err), RGPU_ERR_UNSUPPORTED);
}
END_TEST

/* ---------------------------------------------------------------------------
 * main */

int main(void)
{
    Suite *s = suite_create("cpu_kernels");
    TCase *tc = add_tcase(s, "core", 60, NULL, NULL);
    ADD_TESTS(tc, test_f16_known, test_f16_exhaustive, test_vec_half_conversions, test_copy_half_fast_paths, test_random_dense_matches_strided, test_bf16, test_full, test_full_strided_and_empty,
                  test_full_errors, test_arange, test_arange_errors, test_copy_layouts,
                  test_copy_guard_and_empty, test_copy_shape_errors, test_copy_casts, test_add_f32_fast,
                  test_add_broadcast_transposed, test_add_mixed_dtypes, test_add_int_and_bool,
                  test_sub_and_scalar_ops, test_mul_div, test_binary_chunks_3d, test_binary_errors,
                  test_sum_dims, test_sum_dtypes, test_sum_0d_and_empty, test_sum_errors, test_mean,
                  test_dispatch);

    return run_suite(s);
}
