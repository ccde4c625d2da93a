/* test_cpu_amp.c — known-value tests for the mixed-precision family of the
 * CPU reference backend (replayer/cpu/cpu_amp.c): AMP_UNSCALE
 * (_amp_foreach_non_finite_check_and_unscale_, one grad per record) on f32,
 * f16, bf16 and f64 grads, contiguous, transposed and strided, with inf/NaN,
 * inv_scale == 1, f16 overflow after the multiply (not an inf input: found_inf
 * stays 0) and a found_inf that is already set; AMP_UPDATE_SCALE
 * (_amp_update_scale_): backoff, counting, growth, growth past f32 bounds
 * refused, NaN and negative found_inf, non-power-of-two factors; and the error
 * paths. Expected values are PyTorch 2.13 CPU results (pasted below).
 *
 * Build: make build/tests/test_cpu_amp && build/tests/test_cpu_amp */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_families.h"
#include "op/half.h"
#include "check_cpu.h"

/* The family of op per ops.def (the generated dispatch reads the same column). */
static bool family_owns(int op)
{
    return op >= 0 && op < RGPU_OP_COUNT && rgpu_op_table[op].family == RGPU_OPFAM_AMP;
}

/* ---------------------------------------------------------------------------
 * Reference values (torch 2.13 CPU):
 *   g = view(X34.to(dtype)); found = full((), found0)
 *   torch._amp_foreach_non_finite_check_and_unscale_([g], found, full((), inv))
 * X34 is (3,4) f32; Xi has inf at [1,2], Xn NaN at [2,0]. Arrays hold the
 * view's elements in its logical row-major order. */
static const double X34[12] = {0.5, -1.25, 3.0, 0.0010000000474974513, 7.0, -0.10000000149011612, 25000.0, 61000.0, -3.299999952316284, 0.0, 1.7000000476837158, -2.200000047683716};
/* f32, inv 0.125: found 0 */
static const double U_F32[12] = {0.0625, -0.15625, 0.375, 0.0001250000059371814, 0.875, -0.012500000186264515, 3125.0, 7625.0, -0.4124999940395355, 0.0, 0.21250000596046448, -0.2750000059604645};
/* f32 Xi, inv 0.125: found 1 */
static const double U_F32_INF[12] = {0.0625, -0.15625, 0.375, 0.0001250000059371814, 0.875, -0.012500000186264515, INFINITY, 7625.0, -0.4124999940395355, 0.0, 0.21250000596046448, -0.2750000059604645};
/* f16 Xn transposed (4,3), inv 1/3 (f32 0.3333333432674408): found 1 */
static const double U_F16_T_NAN[12] = {0.1666259765625, 2.333984375, NAN, -0.416748046875, -0.0333251953125, 0.0, 1.0, 8328.0, 0.56689453125, 0.00033354759216308594, 20336.0, -0.73291015625};
/* bf16 X[:, ::2] (3,2), inv 1/3: found 0 */
static const double U_BF16_S[6] = {0.1669921875, 1.0, 2.328125, 8320.0, -1.1015625, 0.56640625};
/* f16, inv 2: 61000*2 overflows to inf after the check: found 0 */
static const double U_F16_OVF[12] = {1.0, -2.5, 6.0, 0.0020008087158203125, 14.0, -0.199951171875, 49984.0, INFINITY, -6.6015625, 0.0, 3.400390625, -4.3984375};
/* f64, inv 0.1f (0.10000000149011612): found 0 */
static const double U_F64[12] = {0.05000000074505806, -0.12500000186264515, 0.30000000447034836, 0.00010000000623986132, 0.7000000104308128, -0.010000000298023226, 2500.000037252903, 6100.000090897083, -0.33000000014901154, 0.0, 0.17000000730156906, -0.22000000804662712};
/* f32 Xn, inv 1: values untouched, found 1 */
static const double U_F32_ONE_NAN[12] = {0.5, -1.25, 3.0, 0.0010000000474974513, 7.0, -0.10000000149011612, 25000.0, 61000.0, NAN, 0.0, 1.7000000476837158, -2.200000047683716};
/* f32, inv 0.5, found already 1: stays 1 */
static const double U_F32_KEEP[12] = {0.25, -0.625, 1.5, 0.0005000000237487257, 3.5, -0.05000000074505806, 12500.0, 30500.0, -1.649999976158142, 0.0, 0.8500000238418579, -1.100000023841858};

/* torch._amp_update_scale_(scale, tracker, found, growth, backoff, interval)
 * -> (scale, tracker), torch 2.13 CPU */
static const struct {
    float scale; int32_t tracker; float found; double growth, backoff; int64_t interval;
    double want_scale; int32_t want_tracker;
} UPD[] = {
    { 65536.0f, 0, 1.0f, 2.0, 0.5, 2000, 32768.0, 0 },
    { 65536.0f, 1998, 0.0f, 2.0, 0.5, 2000, 65536.0, 1999 },
    { 65536.0f, 1999, 0.0f, 2.0, 0.5, 2000, 131072.0, 0 },
    { 3e+38f, 4, 0.0f, 2.0, 0.5, 5, 3.0000000054977558e+38, 0 },   /* grown scale is inf: kept */
    { 65536.0f, 7, NAN, 2.0, 0.5, 10, 32768.0, 0 },
    { 1000.1f, 0, 0.0f, 1.7, 0.3, 1, 1700.169921875, 0 },
    { 1000.1f, 3, 2.0f, 1.7, 0.3, 100, 300.0299987792969, 0 },
    { 1.0f, 0, 0.0f, 2.0, 0.5, 1, 2.0, 0 },
    { 5.0f, 2, -1.0f, 2.0, 0.25, 3, 1.25, 0 },
};

/* ---------------------------------------------------------------------------
 * Helpers (tensors with guard bytes, the runner: check_cpu.h); comparisons */

/* v's elements (logical order) equal want bit for bit, NaN matching NaN */
static void expect(const rgpu_view *v, const double *want, int64_t n, const char *what)
{
    ck_assert_int_eq(numel(v), n);
    for (int64_t i = 0; i < n; i++) {
        double got = vget(v, i);
        if (isnan(want[i])) ck_assert_msg(isnan(got), "%s[%lld]: got %.17g, want NaN", what, (long long)i, got);
        else ck_assert_msg(got == want[i] && signbit(got) == signbit(want[i]),
                           "%s[%lld]: got %.17g, want %.17g", what, (long long)i, got, want[i]);
    }
}

static double XI[12], XN[12];

static void setup(void)
{
    memcpy(XI, X34, sizeof XI);
    XI[6] = INFINITY;
    memcpy(XN, X34, sizeof XN);
    XN[8] = NAN;
}

/* unscale one grad view g with inv, found starting at found0; checks the
 * grad against want and found_inf against want_found */
static void unscale(rgpu_view g, float inv, float found0, const double *want, double want_found, const char *what)
{
    double i1 = inv, f1 = found0;
    rgpu_view vi = mk(RGPU_F32, 0, NULL, &i1), vf = mk(RGPU_F32, 0, NULL, &f1);
    ck_assert_msg(run_op(RGPU_OP_AMP_UNSCALE, INS(&g, &vi), OUTS(&g, &vf), NULL, 0) == RGPU_OK, "%s: %s", what, g_err);
    expect(&g, want, numel(&g), what);
    ck_assert_msg(vget(&vf, 0) == want_found, "%s: found_inf %g, want %g", what, vget(&vf, 0), want_found);
    ck_assert(vget(&vi, 0) == (double)inv);
}

/* ---------------------------------------------------------------------------
 * AMP_UNSCALE */

START_TEST(test_unscale_f32)
{
    unscale(mk(RGPU_F32, 2, SZ(3, 4), X34), 0.125f, 0.0f, U_F32, 0.0, "f32");
    unscale(mk(RGPU_F32, 2, SZ(3, 4), XI), 0.125f, 0.0f, U_F32_INF, 1.0, "f32 inf");
    unscale(mk(RGPU_F32, 2, SZ(3, 4), XN), 1.0f, 0.0f, U_F32_ONE_NAN, 1.0, "f32 inv 1, NaN");
    unscale(mk(RGPU_F32, 2, SZ(3, 4), X34), 0.5f, 1.0f, U_F32_KEEP, 1.0, "f32 found already set");
    /* a 0-d grad and an empty one */
    double inf1 = -INFINITY, want1 = -INFINITY;
    unscale(mk(RGPU_F32, 0, NULL, &inf1), 0.25f, 0.0f, &want1, 1.0, "f32 0-d -inf");
    unscale(mk(RGPU_F32, 2, SZ(0, 4), NULL), 0.25f, 0.0f, NULL, 0.0, "f32 empty");
}
END_TEST

START_TEST(test_unscale_half_strided)
{
    /* f16: (3,4) storage seen transposed as (4,3) */
    rgpu_view b16 = mk(RGPU_F16, 2, SZ(3, 4), XN);
    unscale(tr(b16, 0, 1), 1.0f / 3.0f, 0.0f, U_F16_T_NAN, 1.0, "f16 transposed NaN");
    /* bf16: every other column of a (3,4) storage; the others stay untouched */
    rgpu_view b = mk(RGPU_BF16, 2, SZ(3, 4), X34);
    rgpu_view s = mk(RGPU_BF16, 0, NULL, NULL);
    s = b;
    s.sizes[1] = 2;
    s.strides[1] = 2;
    unscale(s, 1.0f / 3.0f, 0.0f, U_BF16_S, 0.0, "bf16 strided");
    for (int r = 0; r < 3; r++)
        for (int c = 1; c < 4; c += 2)
            ck_assert(vget(&b, r * 4 + c) == (double)rgpu_bf16_to_float(rgpu_float_to_bf16((float)X34[r * 4 + c])));
    /* f16 overflow by the multiply is not a non-finite input */
    unscale(mk(RGPU_F16, 2, SZ(3, 4), X34), 2.0f, 0.0f, U_F16_OVF, 0.0, "f16 overflow");
    /* f64 computes in double with the f32 inv_scale widened */
    unscale(mk(RGPU_F64, 2, SZ(3, 4), X34), 0.1f, 0.0f, U_F64, 0.0, "f64");
    /* a long row (more than one conversion chunk) with one inf at the end */
    enum { N = 1000 };
    static double big[N], want[N];
    for (int i = 0; i < N; i++) { big[i] = (i % 7) - 3; want[i] = ((i % 7) - 3) * 0.5; }
    big[N - 1] = want[N - 1] = INFINITY;
    unscale(mk(RGPU_BF16, 1, SZ(N), big), 0.5f, 0.0f, want, 1.0, "bf16 long row");
}
END_TEST

START_TEST(test_unscale_errors)
{
    double one = 1.0, zero = 0.0;
    rgpu_view g = mk(RGPU_F32, 2, SZ(3, 4), X34), vi = mk(RGPU_F32, 0, NULL, &one), vf = mk(RGPU_F32, 0, NULL, &zero);
    rgpu_view i64 = mk(RGPU_I64, 1, SZ(2), X34), vi2 = mk(RGPU_F32, 1, SZ(2), X34), vh = mk(RGPU_F16, 0, NULL, &one);
    ck_assert_int_eq(run_op(RGPU_OP_AMP_UNSCALE, INS(&i64, &vi), OUTS(&i64, &vf), NULL, 0), RGPU_ERR_UNSUPPORTED);
    ck_assert(strstr(g_err, "floating") != NULL);
    ck_assert_int_eq(run_op(RGPU_OP_AMP_UNSCALE, INS(&g, &vi2), OUTS(&g, &vf), NULL, 0), RGPU_ERR_SHAPE);
    ck_assert(strstr(g_err, "inv_scale must be a 1-element tensor") != NULL);
    ck_assert_int_eq(run_op(RGPU_OP_AMP_UNSCALE, INS(&g, &vi), OUTS(&g, &vh), NULL, 0), RGPU_ERR_BAD_DTYPE);
    ck_assert(strstr(g_err, "found_inf must be a float32 tensor") != NULL);
    rgpu_view other = mk(RGPU_F32, 2, SZ(4, 3), X34);
    ck_assert_int_eq(run_op(RGPU_OP_AMP_UNSCALE, INS(&g, &vi), OUTS(&other, &vf), NULL, 0), RGPU_ERR_SHAPE);
    rgpu_view g16 = mk(RGPU_F16, 2, SZ(3, 4), X34);
    ck_assert_int_eq(run_op(RGPU_OP_AMP_UNSCALE, INS(&g16, &vi), OUTS(&g, &vf), NULL, 0), RGPU_ERR_BAD_DTYPE);
    /* nothing was written by the failed runs */
    expect(&g, X34, 12, "grad after errors");
    ck_assert(vget(&vf, 0) == 0.0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * AMP_UPDATE_SCALE */

START_TEST(test_update_scale)
{
    for (size_t k = 0; k < sizeof UPD / sizeof UPD[0]; k++) {
        double s = UPD[k].scale, t = UPD[k].tracker, f = UPD[k].found;
        rgpu_view vs = mk(RGPU_F32, 0, NULL, &s), vt = mk(RGPU_I32, 0, NULL, &t), vf = mk(RGPU_F32, 1, SZ(1), &f);
        rgpu_status st = run_op(RGPU_OP_AMP_UPDATE_SCALE, INS(&vf), OUTS(&vs, &vt),
                                ARGS(a_flt(UPD[k].growth), a_flt(UPD[k].backoff), a_int(UPD[k].interval)));
        ck_assert_msg(st == RGPU_OK, "case %zu: %s", k, g_err);
        ck_assert_msg(vget(&vs, 0) == UPD[k].want_scale, "case %zu: scale %.17g, want %.17g", k, vget(&vs, 0),
                      UPD[k].want_scale);
        ck_assert_msg(vget(&vt, 0) == UPD[k].want_tracker, "case %zu: tracker %g, want %d", k, vget(&vt, 0),
                      UPD[k].want_tracker);
        teardown();
    }
    /* an int growth factor is accepted as a number */
    double s = 3, t = 0, f = 0;
    rgpu_view vs = mk(RGPU_F32, 0, NULL, &s), vt = mk(RGPU_I32, 0, NULL, &t), vf = mk(RGPU_F32, 0, NULL, &f);
    ck_assert_int_eq(run_op(RGPU_OP_AMP_UPDATE_SCALE, INS(&vf), OUTS(&vs, &vt), ARGS(a_int(2), a_flt(0.5), a_int(1))),
                     RGPU_OK);
    ck_assert(vget(&vs, 0) == 6.0 && vget(&vt, 0) == 0.0);
}
END_TEST

START_TEST(test_update_scale_errors)
{
    double s = 4, t = 1, f = 0;
    rgpu_view vs = mk(RGPU_F32, 0, NULL, &s), vt = mk(RGPU_I32, 0, NULL, &t), vf = mk(RGPU_F32, 0, NULL, &f);
    rgpu_view t64 = mk(RGPU_I64, 0, NULL, &t), s2 = mk(RGPU_F32, 1, SZ(2), X34), fh = mk(RGPU_F16, 0, NULL, &f);
    ck_assert_int_eq(run_op(RGPU_OP_AMP_UPDATE_SCALE, INS(&vf), OUTS(&vs, &t64), ARGS(a_flt(2), a_flt(0.5), a_int(3))),
                     RGPU_ERR_BAD_DTYPE);
    ck_assert(strstr(g_err, "growth_tracker must be a int32 tensor") != NULL);
    ck_assert_int_eq(run_op(RGPU_OP_AMP_UPDATE_SCALE, INS(&vf), OUTS(&s2, &vt), ARGS(a_flt(2), a_flt(0.5), a_int(3))),
                     RGPU_ERR_SHAPE);
    ck_assert_int_eq(run_op(RGPU_OP_AMP_UPDATE_SCALE, INS(&fh), OUTS(&vs, &vt), ARGS(a_flt(2), a_flt(0.5), a_int(3))),
                     RGPU_ERR_BAD_DTYPE);
    ck_assert_int_eq(run_op(RGPU_OP_AMP_UPDATE_SCALE, INS(&vf), OUTS(&vs, &vt), ARGS(a_flt(2), a_flt(0.5))),
                     RGPU_ERR_BAD_ARG);
    ck_assert_int_eq(run_op(RGPU_OP_AMP_UPDATE_SCALE, INS(&vf), OUTS(&vs, &vt), ARGS(a_flt(2), a_none(), a_int(3))),
                     RGPU_ERR_BAD_ARG);
    ck_assert_int_eq(run_op(RGPU_OP_AMP_UPDATE_SCALE, INS(&vf), OUTS(&vs, &vt), ARGS(a_flt(2), a_flt(0.5), a_flt(3))),
                     RGPU_ERR_BAD_ARG);
    ck_assert(vget(&vs, 0) == 4.0 && vget(&vt, 0) == 1.0);   /* untouched */
    ck_assert_int_eq(exec_op(RGPU_OP_AMP_UPDATE_SCALE, INS(&vf), 1, OUTS(&vs), 1, NOARGS), RGPU_ERR_ARITY);
}
END_TEST

START_TEST(test_family)
{
    ck_assert(family_owns(RGPU_OP_AMP_UNSCALE) && family_owns(RGPU_OP_AMP_UPDATE_SCALE));
    ck_assert(!family_owns(RGPU_OP_ADD_TENSOR));
    ck_assert(rgpu_cpu_supports(RGPU_OP_AMP_UNSCALE) && rgpu_cpu_supports(RGPU_OP_AMP_UPDATE_SCALE));
    rgpu_exec e;
    memset(&e, 0, sizeof e);
    e.op = RGPU_OP_ADD_TENSOR;
    ck_assert_int_eq(rgpu_cpu_amp_exec(&e, g_err, sizeof g_err), RGPU_ERR_UNSUPPORTED);
}
END_TEST

/* ---------------------------------------------------------------------------*/

static Suite *suite(void)
{
    Suite *s = suite_create("cpu_amp");
    TCase *tc = add_tcase(s, "ops", 60, setup, teardown);
    ADD_TESTS(tc, test_unscale_f32, test_unscale_half_strided, test_unscale_errors, test_update_scale,
                  test_update_scale_errors, test_family);
    return s;
}

int main(void)
{
    return run_suite(suite());
}
