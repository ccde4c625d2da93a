/* test_cpu_vmath.c — the cpu backend's vector math rows (cpu_vmath.h) and
 * its caching storage allocator (cpu_alloc.c).
 *
 * vmath: exp, erf, tanh on float rows are within 1 ulp of the correctly
 * rounded value (libm's double function rounded to float stands in for it)
 * and equal to it for all but a tiny share of inputs, over a sweep of every
 * 127th float bit pattern; special values (NaN, +-inf, +-0, overflow,
 * underflow, subnormals) are right; exp_d2f is within 6e-16 relative of exp
 * over its range; and every ISA build this CPU runs (base, avx2, avx512) gives
 * bit-identical results, the property that lets a trace replay bitwise on
 * any x86-64 host whatever build cpu_vmath.c picks there.
 *
 * alloc: a freed large block is reused for the next allocation of its size
 * class (hits counted), alignment, small blocks, the cache cap, and the
 * cache emptied when the last backend goes. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "cpu/cpu_vmath.h"
#include "check_util.h"

static const char *const ISAS[] = { "base", "avx2", "avx512" };
#define NISA 3

static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* distance in ulps between two finite floats of the same sign (or zeros) */
static int64_t ulps(float a, float b)
{
    int64_t ia = (int32_t)u_of(a), ib = (int32_t)u_of(b);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return ia > ib ? ia - ib : ib - ia;
}

/* every 127th float bit pattern, NaNs dropped */
static float *sweep(int64_t *n)
{
    int64_t cap = ((int64_t)1 << 32) / 127 + 1, k = 0;
    float *x = malloc((size_t)cap * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (uint64_t u = 0; u < ((uint64_t)1 << 32); u += 127) {
        float f = f_of((uint32_t)u);
        if (f == f) x[k++] = f;
    }
    *n = k;
    return x;
}

typedef void (*row_fn)(float *, const float *, int64_t);
typedef double (*ref_fn)(double);

static void check_accuracy(const char *name, row_fn fn, ref_fn ref)
{
    int64_t n;
    float *x = sweep(&n), *y = malloc((size_t)n * sizeof *y);
    ck_assert_ptr_nonnull(y);
    fn(y, x, n);
    int64_t off = 0, worst = 0;
    float worst_x = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = (float)ref((double)x[i]);
        if (u_of(want) == u_of(y[i])) continue;
        int64_t d = (isinf(want) || isinf(y[i]) || (want < 0) != (y[i] < 0)) ? 1 << 30 : ulps(want, y[i]);
        off++;
        if (d > worst) { worst = d; worst_x = x[i]; }
    }
    printf("vmath %s (%s): %lld of %lld inputs off the rounded libm value, worst %lld ulp at %a\n",
           name, rgpu_vm_isa(), (long long)off, (long long)n, (long long)worst, (double)worst_x);
    ck_assert_msg(worst <= 1, "%s: %lld ulps from libm at x = %a", name, (long long)worst, (double)worst_x);
    ck_assert_msg(off * 100000 <= n, "%s: %lld of %lld inputs differ from libm's rounding", name,
                  (long long)off, (long long)n);
    free(x);
    free(y);
}

START_TEST(test_exp_accuracy) { check_accuracy("exp", rgpu_vm_exp_f32, exp); }
END_TEST
START_TEST(test_erf_accuracy) { check_accuracy("erf", rgpu_vm_erf_f32, erf); }
END_TEST
START_TEST(test_tanh_accuracy) { check_accuracy("tanh", rgpu_vm_tanh_f32, tanh); }
END_TEST

static float one(row_fn fn, float x) { float y; fn(&y, &x, 1); return y; }

START_TEST(test_specials)
{
    float inf = INFINITY, nan = NAN;
    ck_assert(isnan(one(rgpu_vm_exp_f32, nan)));
    ck_assert(isnan(one(rgpu_vm_erf_f32, nan)));
    ck_assert(isnan(one(rgpu_vm_tanh_f32, nan)));
    ck_assert(one(rgpu_vm_exp_f32, inf) == inf);
    ck_assert(one(rgpu_vm_exp_f32, -inf) == 0.0f);
    ck_assert(one(rgpu_vm_exp_f32, 89.0f) == inf);        /* overflow */
    ck_assert(one(rgpu_vm_exp_f32, -104.0f) == 0.0f);     /* underflow */
    ck_assert(one(rgpu_vm_exp_f32, -100.0f) == (float)exp(-100.0));   /* a subnormal result */
    ck_assert(one(rgpu_vm_exp_f32, 0.0f) == 1.0f);
    ck_assert(one(rgpu_vm_erf_f32, inf) == 1.0f && one(rgpu_vm_erf_f32, -inf) == -1.0f);
    ck_assert(one(rgpu_vm_tanh_f32, inf) == 1.0f && one(rgpu_vm_tanh_f32, -inf) == -1.0f);
    /* signed zeros and subnormal arguments keep their sign and value */
    ck_assert(u_of(one(rgpu_vm_erf_f32, -0.0f)) == u_of(-0.0f));
    ck_assert(u_of(one(rgpu_vm_tanh_f32, -0.0f)) == u_of(-0.0f));
    ck_assert(u_of(one(rgpu_vm_erf_f32, 0.0f)) == 0);
    float sub = f_of(5);
    ck_assert(one(rgpu_vm_tanh_f32, sub) == sub && one(rgpu_vm_tanh_f32, -sub) == -sub);
    ck_assert(one(rgpu_vm_erf_f32, sub) == (float)erf((double)sub));
    /* exp_d2f: -inf gives 0, NaN stays, and it tracks exp closely over its range */
    double d[4] = { -INFINITY, NAN, 0.0, -745.0 };
    rgpu_vm_exp_d2f(d, d, 4);
    ck_assert(d[0] == 0.0 && isnan(d[1]) && d[2] == 1.0 && d[3] == 0.0);
    double worst = 0;
    for (int i = 0; i <= 200000; i++) {
        double x = -708.0 + (709.0 + 708.0) * i / 200000.0, y;
        rgpu_vm_exp_d2f(&y, &x, 1);
        double e = fabs(y - exp(x)) / exp(x);
        if (e > worst) worst = e;
    }
    ck_assert_msg(worst < 6e-16, "exp_d2f: relative error %g", worst);
}
END_TEST

/* The same rows through every build this CPU runs: bit-identical. */
START_TEST(test_isas_bitwise)
{
    int64_t n;
    float *x = sweep(&n);
    float *ref[5] = { NULL, NULL, NULL, NULL, NULL }, *y = malloc((size_t)n * sizeof *y);
    double *dx = malloc((size_t)n * sizeof *dx), *dy = malloc((size_t)n * sizeof *dy), *dref = NULL;
    ck_assert(y && dx && dy);
    for (int64_t i = 0; i < n; i++) dx[i] = (double)x[i] * 0.001 - 3.0;
    row_fn fns[5] = { rgpu_vm_exp_f32, rgpu_vm_erf_f32, rgpu_vm_tanh_f32, rgpu_vm_sqrt_f32, rgpu_vm_rsqrt_f32 };
    int ran = 0;
    for (int k = 0; k < NISA; k++) {
        if (!rgpu_vm_set_isa(ISAS[k])) { printf("vmath: this CPU has no %s build to compare\n", ISAS[k]); continue; }
        ck_assert_str_eq(rgpu_vm_isa(), ISAS[k]);
        ran++;
        for (int f = 0; f < 5; f++) {
            /* odd offsets and lengths: the vector loops' heads and tails too */
            int64_t off = k + 1, m = n - 2 * off - f;
            if (!ref[f]) {
                ref[f] = malloc((size_t)n * sizeof *ref[f]);
                fns[f](ref[f], x, n);
            }
            fns[f](y + off, x + off, m);
            ck_assert_msg(memcmp(y + off, ref[f] + off, (size_t)m * sizeof *y) == 0,
                          "function %d: %s differs from %s", f, ISAS[k], ISAS[0]);
        }
        rgpu_vm_exp_d2f(dy, dx, n);
        if (!dref) { dref = malloc((size_t)n * sizeof *dref); memcpy(dref, dy, (size_t)n * sizeof *dy); }
        ck_assert_msg(memcmp(dy, dref, (size_t)n * sizeof *dy) == 0, "exp_d2f: %s differs", ISAS[k]);
    }
    ck_assert_int_ge(ran, 1);
    /* sqrt and rsqrt are libm's expressions exactly (ref: the first build) */
    for (int64_t i = 0; i < n; i++) {
        float want = sqrtf(x[i]), wr = 1.0f / sqrtf(x[i]);
        ck_assert_msg(u_of(ref[3][i]) == u_of(want) || (isnan(want) && isnan(ref[3][i])), "sqrt(%a)", (double)x[i]);
        ck_assert_msg(u_of(ref[4][i]) == u_of(wr) || (isnan(wr) && isnan(ref[4][i])), "rsqrt(%a)", (double)x[i]);
    }
    ck_assert(!rgpu_vm_set_isa("sse9"));
    for (int f = 0; f < 5; f++) free(ref[f]);
    free(x); free(y); free(dx); free(dy); free(dref);
}
END_TEST

/* erf_big's lanes listed among erf_small's (AVX-512: sixteen at a time by a
 * compressed mask, else one by one): arguments where 1 <= |x| < 4 lanes are
 * scattered among others (and NaN, inf, +-0), in place and not, at lengths
 * and offsets around the vector width: every build gives erf's own value at
 * each element, bit for bit. Fails if a listed lane is lost, doubled or
 * written to the wrong element. */
START_TEST(test_erf_mixed_lanes)
{
    enum { N = 4099 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *ref = malloc(N * sizeof *ref);
    ck_assert(x && y && ref);
    uint32_t st = 777;
    for (int i = 0; i < N; i++) {
        st = st * 1664525u + 1013904223u;
        x[i] = (float)((int32_t)st >> 8) * 0x1p-21f;           /* +-4 */
        if (i % 97 == 5) x[i] = i % 2 ? INFINITY : -INFINITY;
        if (i % 101 == 7) x[i] = NAN;
        if (i % 89 == 3) x[i] = i % 2 ? -0.0f : 0.0f;
    }
    for (int i = 0; i < N; i++) ref[i] = (float)erf((double)x[i]);   /* within the sweep's 1 ulp */
    int64_t lens[] = { 1, 15, 16, 17, 255, 256, 257, 300, 4099 - 3 };
    float *first = malloc(N * sizeof *first);
    ck_assert_ptr_nonnull(first);
    bool have = false;
    for (int k = 0; k < NISA; k++) {
        if (!rgpu_vm_set_isa(ISAS[k])) continue;
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (int64_t off = 0; off < 3; off++) {
                int64_t m = lens[li];
                if (off + m > N) continue;
                memset(y, 0, N * sizeof *y);
                rgpu_vm_erf_f32(y + off, x + off, m);
                for (int64_t i = off; i < off + m; i++) {
                    if (isnan(x[i])) { ck_assert(isnan(y[i])); continue; }
                    ck_assert_msg(ulps(y[i], ref[i]) <= 1 && (y[i] < 0) == (ref[i] < 0),
                                  "%s: erf(%a) = %a at %lld of a row of %lld", ISAS[k], (double)x[i],
                                  (double)y[i], (long long)(i - off), (long long)m);
                }
                ck_assert(off == 0 || y[off - 1] == 0.0f);          /* nothing outside the row */
                ck_assert(off + m == N || y[off + m] == 0.0f);
            }
        memcpy(y, x, N * sizeof *y);
        rgpu_vm_erf_f32(y, y, N);                                   /* in place */
        if (!have) { memcpy(first, y, N * sizeof *y); have = true; }
        ck_assert_msg(memcmp(y, first, N * sizeof *y) == 0, "%s: in-place erf differs from the first build", ISAS[k]);
    }
    ck_assert(have);
    free(x); free(y); free(ref); free(first);
}
END_TEST

/* Layer norm rows (forward and backward) written out scalar in the order
 * cpu_vmath_kern.h documents (8 lane sums, ((0+1)+(2+3))+((4+5)+(6+7)),
 * then the tail): every build must give exactly these bits, for layer and
 * rms norm, at lengths around the vector widths. */
static double lane8_ref(const double *p, const double *q, double mu, int kind, int64_t n)
{
    double a[8] = {0};
    int64_t i = 0;
#define TERM_(k) (kind == 0 ? p[k] : kind == 1 ? (p[k] - mu) * (p[k] - mu) : p[k] * q[k])
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) a[j] += TERM_(i + j);
    double t = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; i < n; i++) t += TERM_(i);
#undef TERM_
    return t;
}

START_TEST(test_ln_rows_bitwise)
{
    enum { N = 300 };
    double x[N], w[N], bias[N], g[N], y[N], yr[N], xb[N], xr[N], gw[N], dw[N], db[N], dwr[N], dbr[N];
    uint32_t st = 99;
    for (int i = 0; i < N; i++) {
        st = st * 1664525u + 1013904223u;
        x[i] = (double)((int32_t)st >> 8) * 0x1p-20 + 3.0;
        st = st * 1664525u + 1013904223u;
        g[i] = (double)((int32_t)st >> 8) * 0x1p-23;
        w[i] = 1.0 + (double)(i % 13) * 0.01;
        bias[i] = (double)(i % 7) * 0.1 - 0.3;
    }
    int64_t lens[] = { 1, 7, 8, 9, 16, 17, 64, 127, 128, 129, 300 };
    int ran = 0;
    for (int k = 0; k < NISA; k++) {
        if (!rgpu_vm_set_isa(ISAS[k])) continue;
        ran++;
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (int rms = 0; rms < 2; rms++) {
                int64_t n = lens[li];
                double rN = 1.0 / (double)n, eps = 1e-5;
                /* forward */
                double mu_r = rms ? 0.0 : lane8_ref(x, NULL, 0, 0, n) * rN;
                double rs_r = 1.0 / sqrt(lane8_ref(x, NULL, mu_r, 1, n) * rN + eps);
                for (int64_t i = 0; i < n; i++) yr[i] = (x[i] - mu_r) * rs_r * w[i] + bias[i];
                double mu, rs;
                memcpy(y, x, sizeof x);
                rgpu_vm_ln_row(y, n, w, bias, eps, rms, &mu, &rs);
                ck_assert_msg(mu == mu_r && rs == rs_r && memcmp(y, yr, (size_t)n * sizeof *y) == 0,
                              "ln_row %s n=%lld rms=%d differs from the documented order", ISAS[k], (long long)n, rms);
                /* backward, accumulating into nonzero dw/db */
                for (int64_t i = 0; i < n; i++) { dw[i] = dwr[i] = 0.5; db[i] = dbr[i] = -0.25; }
                for (int64_t i = 0; i < n; i++) xr[i] = (x[i] - mu) * rs;
                double gwr[N];
                for (int64_t i = 0; i < n; i++) { gwr[i] = g[i] * w[i]; dwr[i] += g[i] * xr[i]; dbr[i] += g[i]; }
                double a = rms ? 0.0 : lane8_ref(gwr, NULL, 0, 0, n) * rN, bq = lane8_ref(gwr, xr, 0, 2, n) * rN;
                for (int64_t i = 0; i < n; i++) xr[i] = rs * (gwr[i] - a - xr[i] * bq);
                memcpy(xb, x, sizeof x);
                rgpu_vm_ln_bw_row(g, xb, gw, dw, db, w, n, mu, rs, rms, true);
                ck_assert_msg(memcmp(xb, xr, (size_t)n * sizeof *xb) == 0 && memcmp(dw, dwr, (size_t)n * sizeof *dw) == 0 &&
                              memcmp(db, dbr, (size_t)n * sizeof *db) == 0,
                              "ln_bw_row %s n=%lld rms=%d differs from the documented order", ISAS[k], (long long)n, rms);
            }
    }
    ck_assert_int_ge(ran, 1);
}
END_TEST

/* Softmax rows (forward, log, backwards) in the order cpu_vmath_kern.h
 * documents, exp as rgpu_vm_exp_d2f: every build gives exactly these bits,
 * on rows with a NaN, with -inf and +inf, and at lengths around the widths. */
static void softmax_ref(const double *x, double *y, int64_t n, bool is_log)
{
    double mx = -INFINITY;
    bool nan = false;
    double m[8];
    for (int j = 0; j < 8; j++) m[j] = -INFINITY;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) { m[j] = x[i + j] > m[j] ? x[i + j] : m[j]; nan |= x[i + j] != x[i + j]; }
    for (int j = 0; j < 8; j++) mx = m[j] > mx ? m[j] : mx;
    for (; i < n; i++) { mx = x[i] > mx ? x[i] : mx; nan |= x[i] != x[i]; }
    if (nan) mx = NAN;
    double *ex = malloc((size_t)n * sizeof *ex);
    ck_assert_ptr_nonnull(ex);
    for (i = 0; i < n; i++) ex[i] = x[i] - mx;
    rgpu_vm_exp_d2f(ex, ex, n);
    double sum = lane8_ref(ex, NULL, 0, 0, n);
    if (is_log) { double sub = mx + log(sum); for (i = 0; i < n; i++) y[i] = x[i] - sub; }
    else { double inv = 1.0 / sum; for (i = 0; i < n; i++) y[i] = ex[i] * inv; }
    free(ex);
}

static bool same_bits(const double *a, const double *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

START_TEST(test_softmax_rows_bitwise)
{
    enum { N = 300 };
    double x[N], g[N], y[N], yr[N], gb[N], yb[N], gr[N];
    uint32_t st = 5;
    for (int i = 0; i < N; i++) {
        st = st * 1664525u + 1013904223u;
        x[i] = (double)((int32_t)st >> 8) * 0x1p-19;
        st = st * 1664525u + 1013904223u;
        g[i] = (double)((int32_t)st >> 8) * 0x1p-23;
    }
    int64_t lens[] = { 1, 7, 8, 9, 17, 64, 129, 300 };
    int ran = 0;
    for (int k = 0; k < NISA; k++) {
        if (!rgpu_vm_set_isa(ISAS[k])) continue;
        ran++;
        for (int special = 0; special < 4; special++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
                for (int is_log = 0; is_log < 2; is_log++) {
                    int64_t n = lens[li];
                    double xs[N];
                    memcpy(xs, x, sizeof x);
                    if (special == 1) xs[n / 2] = NAN;
                    if (special == 2) xs[n - 1] = INFINITY;
                    if (special == 3) for (int64_t i = 0; i < n; i += 2) xs[i] = -INFINITY;
                    softmax_ref(xs, yr, n, is_log);
                    double ex[N];
                    memcpy(y, xs, sizeof xs);
                    rgpu_vm_softmax_row(y, ex, n, is_log);
                    ck_assert_msg(same_bits(y, yr, n), "softmax_row %s n=%lld log=%d special=%d", ISAS[k],
                                  (long long)n, is_log, special);
                    /* backward from the forward's output */
                    memcpy(gr, g, sizeof g);
                    double ybr[N];
                    memcpy(ybr, yr, sizeof yr);
                    if (is_log) {
                        double sum = lane8_ref(gr, NULL, 0, 0, n);
                        rgpu_vm_exp_d2f(ybr, ybr, n);
                        for (int64_t i = 0; i < n; i++) gr[i] -= ybr[i] * sum;
                    } else {
                        double sum = lane8_ref(gr, ybr, 0, 2, n);
                        for (int64_t i = 0; i < n; i++) gr[i] = ybr[i] * (gr[i] - sum);
                    }
                    memcpy(gb, g, sizeof g);
                    memcpy(yb, yr, sizeof yr);
                    rgpu_vm_softmax_bw_row(gb, yb, n, is_log);
                    ck_assert_msg(same_bits(gb, gr, n), "softmax_bw_row %s n=%lld log=%d special=%d", ISAS[k],
                                  (long long)n, is_log, special);
                }
    }
    ck_assert_int_ge(ran, 1);
}
END_TEST

/* The documented order of rgpu_vm_sum_*: lane j sums elements j mod 32 in
 * order, the lanes are added pairwise (j + w into j, w = 16, 8, 4, 2, 1),
 * then the tail in order; written out scalar here. */
static double sum_ref(const float *qf, const double *qd, int64_t n)
{
    double a[32] = {0};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 32; j++) a[j] += qf ? (double)qf[i + j] : qd[i + j];
    for (int w = 16; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) a[j] = a[j] + a[j + w];
    double t = a[0];
    for (; i < n; i++) t += qf ? (double)qf[i] : qd[i];
    return t;
}

/* Sums and row accumulations: the documented order exactly, and
 * bit-identical on every build, at lengths around the lane count (heads,
 * tails, empty rows) and on values whose sum depends on the order. */
START_TEST(test_sums_bitwise)
{
    enum { N = 1000 };
    float *qf = malloc(N * sizeof *qf);
    double *qd = malloc(N * sizeof *qd), *acc = malloc(N * sizeof *acc), *ref = malloc(N * sizeof *ref);
    ck_assert(qf && qd && acc && ref);
    uint32_t st = 12345;
    for (int i = 0; i < N; i++) {
        st = st * 1664525u + 1013904223u;
        float v = (float)((int32_t)st >> 8) * 0x1p-10f;      /* +-2^13, 24-bit mantissas */
        qf[i] = i % 7 == 0 ? v * 0x1p20f : v;                   /* large terms: rounding matters */
        qd[i] = (double)qf[i] * (1.0 + 0x1p-40 * (double)i);
    }
    int64_t lens[] = { 0, 1, 31, 32, 33, 63, 64, 65, 100, 999, 1000 };
    int ran = 0;
    for (int k = 0; k < NISA; k++) {
        if (!rgpu_vm_set_isa(ISAS[k])) continue;
        ran++;
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            int64_t n = lens[l];
            double sf = rgpu_vm_sum_f32(qf, n), sd = rgpu_vm_sum_f64(qd, n);
            double rf = sum_ref(qf, NULL, n), rd = sum_ref(NULL, qd, n);
            ck_assert_msg(memcmp(&sf, &rf, sizeof sf) == 0, "sum_f32 %s n=%lld: %.17g vs %.17g", ISAS[k],
                          (long long)n, sf, rf);
            ck_assert_msg(memcmp(&sd, &rd, sizeof sd) == 0, "sum_f64 %s n=%lld", ISAS[k], (long long)n);
            for (int64_t i = 0; i < n; i++) { acc[i] = qd[i]; ref[i] = qd[i] + (double)qf[i]; }
            rgpu_vm_acc_f32(acc, qf, n);
            ck_assert_msg(n == 0 || memcmp(acc, ref, (size_t)n * sizeof *acc) == 0, "acc_f32 %s", ISAS[k]);
            for (int64_t i = 0; i < n; i++) { acc[i] = (double)qf[i]; ref[i] = (double)qf[i] + qd[i]; }
            rgpu_vm_acc_f64(acc, qd, n);
            ck_assert_msg(n == 0 || memcmp(acc, ref, (size_t)n * sizeof *acc) == 0, "acc_f64 %s", ISAS[k]);
        }
    }
    ck_assert_int_ge(ran, 1);
    free(qf); free(qd); free(acc); free(ref);
}
END_TEST

/* ---------------------------------------------------------------------------
 * alloc */

START_TEST(test_alloc_reuse)
{
    rgpu_cpu_alloc_backend_ref(+1);
    rgpu_cpu_alloc_stats s0 = rgpu_cpu_alloc_get_stats();
    size_t big = (size_t)3 << 20;
    char *p = rgpu_cpu_alloc(big);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq((uintptr_t)p % 4096, 0);
    memset(p, 7, big);
    rgpu_cpu_free(p);
    ck_assert_uint_ge(rgpu_cpu_alloc_get_stats().cached_bytes, big);
    char *q = rgpu_cpu_alloc(big - 1000);      /* same size class */
    ck_assert_ptr_eq(q, p);
    rgpu_cpu_alloc_stats s1 = rgpu_cpu_alloc_get_stats();
    ck_assert_uint_eq(s1.hits - s0.hits, 1);
    ck_assert_uint_eq(s1.misses - s0.misses, 1);
    char *r = rgpu_cpu_alloc(big * 2);         /* another class: a new block */
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_ne(r, q);
    memset(r, 1, big * 2);
    rgpu_cpu_free(q);
    rgpu_cpu_free(r);
    /* small blocks: malloc's, 64-aligned, writable to their size */
    for (size_t n = 0; n < 5000; n += 777) {
        char *m = rgpu_cpu_alloc(n);
        ck_assert_ptr_nonnull(m);
        ck_assert_int_eq((uintptr_t)m % 64, 0);
        memset(m, 3, n);
        rgpu_cpu_free(m);
    }
    rgpu_cpu_free(NULL);
    /* the last backend gone: the cache is empty */
    rgpu_cpu_alloc_backend_ref(-1);
    ck_assert_uint_eq(rgpu_cpu_alloc_get_stats().cached_bytes, 0);
    ck_assert_ptr_null(rgpu_cpu_alloc((size_t)1 << 63));   /* absurd sizes fail cleanly */
}
END_TEST

/* Check forks each test, so the cap read from the environment here is this
 * process's own. */
START_TEST(test_alloc_cap)
{
    setenv("RGPU_CPU_CACHE_BYTES", "5000000", 1);
    rgpu_cpu_alloc_backend_ref(+1);
    size_t big = (size_t)2 << 20;
    void *a = rgpu_cpu_alloc(big), *b = rgpu_cpu_alloc(big), *c = rgpu_cpu_alloc(big);
    ck_assert(a && b && c);
    rgpu_cpu_alloc_stats s0 = rgpu_cpu_alloc_get_stats();
    rgpu_cpu_free(a);
    rgpu_cpu_free(b);
    rgpu_cpu_free(c);   /* the third is past the 5 MB cap: unmapped */
    rgpu_cpu_alloc_stats s1 = rgpu_cpu_alloc_get_stats();
    ck_assert_uint_eq(s1.unmapped - s0.unmapped, 1);
    ck_assert_uint_le(s1.cached_bytes, 5000000);
    rgpu_cpu_alloc_backend_ref(-1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cpu_vmath");
    ADD_TESTS(add_tcase(s, "accuracy", 120, NULL, NULL), test_exp_accuracy, test_erf_accuracy,
              test_tanh_accuracy, test_specials);
    ADD_TESTS(add_tcase(s, "isa", 120, NULL, NULL), test_isas_bitwise, test_erf_mixed_lanes,
              test_ln_rows_bitwise, test_softmax_rows_bitwise, test_sums_bitwise);
    ADD_TESTS(add_tcase(s, "alloc", 60, NULL, NULL), test_alloc_reuse, test_alloc_cap);
    return run_suite(s);
}
