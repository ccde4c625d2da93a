/* test_cpu_index.c — known-value tests for the CPU index family
 * (replayer/cpu/cpu_index*.c, philox.h): embedding (+ backward), gather,
 * scatter, scatter_add, index_select, index_add, index.Tensor, index_put,
 * cat, constant_pad_nd, the Philox random ops, native_dropout (+ backward),
 * count_nonzero/nonzero/masked_select and count_unique/_unique2, with
 * strided/transposed/in-place/zero-size/dtype cases and the error paths.
 * Expected values are what PyTorch 2.13's CPU ATen produces (pasted); the
 * random ops are checked against philox.h's documented mapping.
 *
 * Build: make build/tests/test_cpu_index && build/tests/test_cpu_index */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_families.h"
#include "cpu/cpu_internal.h"
#include "op/philox.h"
#include "op/random.h"
#include "check_cpu.h"

/* The family of op per ops.def (the generated dispatch reads the same column). */
static bool family_owns(int op)
{
    return op >= 0 && op < RGPU_OP_COUNT && rgpu_op_table[op].family == RGPU_OPFAM_INDEX;
}

/* ---------------------------------------------------------------------------
 * Helpers */

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

#define IN(...) (const rgpu_view *const[]){__VA_ARGS__}, (int)(sizeof((const rgpu_view *[]){__VA_ARGS__}) / sizeof(rgpu_view *))
#define OUT(...) (rgpu_view *const[]){__VA_ARGS__}, (int)(sizeof((rgpu_view *[]){__VA_ARGS__}) / sizeof(rgpu_view *))
#define NOIN NULL, 0

#define OK(...) ASSERT_STATUS_OK(exec_op(__VA_ARGS__))
#define ERR(code, ...) ASSERT_STATUS_ERR(code, exec_op(__VA_ARGS__))

/* Logical element i (row-major) of v, as double. */
static double at(const rgpu_view *v, int64_t i)
{
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        off += (i % v->sizes[d]) * v->strides[d];
        i /= v->sizes[d];
    }
    return op_load_f64((const char *)v->data + off * (int64_t)rgpu_dtype_size(v->dtype), v->dtype);
}

static void expect(const rgpu_view *v, const double *want, int64_t n)
{
    int64_t numel = 1;
    for (int d = 0; d < v->ndim; d++) numel *= v->sizes[d];
    ck_assert_msg(numel == n, "view has %lld elements, want %lld", (long long)numel, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        double g = at(v, i);
        ck_assert_msg(g == want[i] || (isnan(g) && isnan(want[i])), "element %lld: got %.9g, want %.9g",
                      (long long)i, g, want[i]);
    }
}
#define EXPECT(v, ...) do { const double w_[] = {__VA_ARGS__}; expect((v), w_, (int64_t)COUNT_OF(w_)); } while (0)

static void fill_seq(float *p, int n, float start, float step)
{
    for (int i = 0; i < n; i++) p[i] = start + step * (float)i;
}

/* ---------------------------------------------------------------------------
 * philox.h */

START_TEST(test_philox_kat)
{
    static const struct { uint32_t c[4], k[2], o[4]; } t[] = {
        { {0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8} },
        { {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
          {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd} },
        { {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
          {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1} },
    };
    for (size_t i = 0; i < COUNT_OF(t); i++) {
        uint32_t o[4];
        rgpu_philox4x32_10(t[i].c, t[i].k, o);
        for (int j = 0; j < 4; j++) ck_assert_uint_eq(o[j], t[i].o[j]);
    }
    /* draw(seed, offset, i): key = seed halves, counter = (i halves, offset halves) */
    uint32_t a[4], b[4];
    uint64_t seed = 0x299f31d0a4093822ull, off = 0x0370734413198a2eull, i = 0x85a308d3243f6a88ull;
    rgpu_philox_draw(seed, off, i, a);
    for (int j = 0; j < 4; j++) ck_assert_uint_eq(a[j], t[2].o[j]);
    rgpu_philox_draw(1, 0, 0, a);
    rgpu_philox_draw(1, 0, 1, b);
    ck_assert(a[0] != b[0]);
    /* derived values */
    uint32_t w[4] = { 0xffffffffu, 0xffffffffu, 0, 0 };
    ck_assert(rgpu_philox_u_f32(w) == 1.0f - 0x1p-24f);
    ck_assert(rgpu_philox_u_f64(w) == 1.0 - 0x1p-53);
    ck_assert(rgpu_philox_bm_u1(w) == 1.0);
    uint32_t z[4] = { 0, 0, 0, 0 };
    ck_assert(rgpu_philox_u_f32(z) == 0.0f && rgpu_philox_u_f64(z) == 0.0);
    ck_assert(rgpu_philox_bm_u1(z) == 0x1p-24);
    ck_assert(rgpu_philox_r64(t[0].o) == 0x6627e8d5e169c58dull);
}
END_TEST

/* ---------------------------------------------------------------------------
 * embedding, embedding_dense_backward */

START_TEST(test_embedding)
{
    float w[12];
    fill_seq(w, 12, 0, 1);   /* weight (4, 3) = arange */
    int64_t ix[4] = { 1, 3, 0, 1 };
    float o[12];
    rgpu_view W = view(w, RGPU_F32, 2, SZ(4, 3), NULL), I = view(ix, RGPU_I64, 2, SZ(2, 2), NULL);
    rgpu_view O = view(o, RGPU_F32, 3, SZ(2, 2, 3), NULL);
    OK(RGPU_OP_EMBEDDING, IN(&W, &I), OUT(&O), ARGS(a_int(-1)));
    EXPECT(&O, 3, 4, 5, 9, 10, 11, 0, 1, 2, 3, 4, 5);

    /* transposed weight (memory (3,4)), i32 indices, padding_idx NONE, strided out */
    float wt[12];
    for (int r = 0; r < 4; r++) for (int c = 0; c < 3; c++) wt[c * 4 + r] = (float)(r * 3 + c);
    int32_t ix32[3] = { 2, 2, 0 };
    double o64[20];
    float ob[18];
    rgpu_view WT = view(wt, RGPU_F32, 2, SZ(4, 3), SZ(1, 4)), I32 = view(ix32, RGPU_I32, 1, SZ(3), NULL);
    rgpu_view OS = view(ob, RGPU_F32, 2, SZ(3, 3), SZ(6, 2));
    OK(RGPU_OP_EMBEDDING, IN(&WT, &I32), OUT(&OS), ARGS(a_none()));
    EXPECT(&OS, 6, 7, 8, 6, 7, 8, 0, 1, 2);

    /* zero-size indices */
    int64_t none = 0;
    rgpu_view I0 = view(&none, RGPU_I64, 1, SZ(0), NULL), O0 = view(o, RGPU_F32, 2, SZ(0, 3), NULL);
    OK(RGPU_OP_EMBEDDING, IN(&W, &I0), OUT(&O0), ARGS(a_int(-1)));

    /* errors */
    int64_t bad[2] = { 1, 4 };
    rgpu_view IB = view(bad, RGPU_I64, 1, SZ(2), NULL), OB = view(o, RGPU_F32, 2, SZ(2, 3), NULL);
    o[0] = -7;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_EMBEDDING, IN(&W, &IB), OUT(&OB), ARGS(a_int(-1)));
    ck_assert(strstr(g_err, "index 4 is out of bounds for dimension 0 with size 4") != NULL);
    ck_assert(o[0] == -7);   /* nothing written */
    bad[1] = -1;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_EMBEDDING, IN(&W, &IB), OUT(&OB), ARGS(a_int(-1)));
    rgpu_view W1 = view(w, RGPU_F32, 1, SZ(12), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_EMBEDDING, IN(&W1, &I), OUT(&O), ARGS(a_int(-1)));
    ERR(RGPU_ERR_SHAPE, RGPU_OP_EMBEDDING, IN(&W, &I), OUT(&OB), ARGS(a_int(-1)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_EMBEDDING, IN(&W, &I), OUT(&O), ARGS(a_flt(1.0)));
    rgpu_view IF = view(w, RGPU_F32, 1, SZ(2), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_EMBEDDING, IN(&W, &IF), OUT(&OB), ARGS(a_int(-1)));
    rgpu_view O64 = view(o64, RGPU_F64, 3, SZ(2, 2, 3), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_EMBEDDING, IN(&W, &I), OUT(&O64), ARGS(a_int(-1)));
    ERR(RGPU_ERR_ARITY, RGPU_OP_EMBEDDING, IN(&W), OUT(&O), ARGS(a_int(-1)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_EMBEDDING, IN(&W, NULL), OUT(&O), ARGS(a_int(-1)));
}
END_TEST

START_TEST(test_embedding_backward)
{
    float g[12];
    fill_seq(g, 12, -2, 0.5f);   /* grad (2, 2, 3) = arange*0.5 - 2 */
    int64_t ix[4] = { 1, 3, 0, 1 };
    float o[12];
    rgpu_view G = view(g, RGPU_F32, 3, SZ(2, 2, 3), NULL), I = view(ix, RGPU_I64, 2, SZ(2, 2), NULL);
    rgpu_view O = view(o, RGPU_F32, 2, SZ(4, 3), NULL);
    OK(RGPU_OP_EMBEDDING_BACKWARD, IN(&G, &I), OUT(&O), ARGS(a_int(4), a_int(0), a_bool(0)));
    EXPECT(&O, 0.0, 0.0, 0.0, 0.5, 1.5, 2.5, 0.0, 0.0, 0.0, -0.5, 0.0, 0.5);
    OK(RGPU_OP_EMBEDDING_BACKWARD, IN(&G, &I), OUT(&O), ARGS(a_int(4), a_int(-1), a_bool(1)));
    EXPECT(&O, 1.0, 1.5, 2.0, 0.25, 0.75, 1.25, 0.0, 0.0, 0.0, -0.5, 0.0, 0.5);

    /* f64, transposed out, i32 indices; grad viewed as (4, 3) */
    double g64[12], o64[12];
    for (int i = 0; i < 12; i++) g64[i] = g[i];
    int32_t ix32[4] = { 1, 3, 0, 1 };
    rgpu_view G64 = view(g64, RGPU_F64, 2, SZ(4, 3), NULL), I32 = view(ix32, RGPU_I32, 1, SZ(4), NULL);
    rgpu_view OT = view(o64, RGPU_F64, 2, SZ(4, 3), SZ(1, 4));
    OK(RGPU_OP_EMBEDDING_BACKWARD, IN(&G64, &I32), OUT(&OT), ARGS(a_int(4), a_int(0), a_bool(0)));
    EXPECT(&OT, 0.0, 0.0, 0.0, 0.5, 1.5, 2.5, 0.0, 0.0, 0.0, -0.5, 0.0, 0.5);

    /* scale_grad_by_freq adds with fma(1/count, g, acc) as ATen's add_(g, scale) */
    float g3[3] = { -0x1.3c56f2p+2f, -0x1.d67414p+2f, -0x1.d3025p+2f }, o1;
    int64_t z3[3] = { 0, 0, 0 };
    rgpu_view G3 = view(g3, RGPU_F32, 2, SZ(3, 1), NULL), Z3 = view(z3, RGPU_I64, 1, SZ(3), NULL);
    rgpu_view O1 = view(&o1, RGPU_F32, 2, SZ(1, 1), NULL);
    OK(RGPU_OP_EMBEDDING_BACKWARD, IN(&G3, &Z3), OUT(&O1), ARGS(a_int(1), a_int(-1), a_bool(1)));
    ck_assert(o1 == -0x1.a1ef1ep+2f);

    /* padding_idx is skipped before the range check (ATen too) */
    int64_t ixp[4] = { 1, 9, 0, 1 };
    rgpu_view IP = view(ixp, RGPU_I64, 2, SZ(2, 2), NULL);
    OK(RGPU_OP_EMBEDDING_BACKWARD, IN(&G, &IP), OUT(&O), ARGS(a_int(4), a_int(9), a_bool(0)));
    EXPECT(&O, 1.0, 1.5, 2.0, 0.5, 1.5, 2.5, 0, 0, 0, 0, 0, 0);
    /* errors */
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_EMBEDDING_BACKWARD, IN(&G, &IP), OUT(&O), ARGS(a_int(4), a_int(-1), a_bool(0)));
    ck_assert(strstr(g_err, "index 9 is out of bounds") != NULL);
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_EMBEDDING_BACKWARD, IN(&G, &I), OUT(&O), ARGS(a_int(4), a_int(-1)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_EMBEDDING_BACKWARD, IN(&G, &I), OUT(&O), ARGS(a_int(4), a_flt(1), a_bool(0)));
    rgpu_view O5 = view(o, RGPU_F32, 2, SZ(3, 3), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_EMBEDDING_BACKWARD, IN(&G, &I), OUT(&O5), ARGS(a_int(4), a_int(-1), a_bool(0)));
    rgpu_view I3 = view(ix, RGPU_I64, 1, SZ(3), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_EMBEDDING_BACKWARD, IN(&G, &I3), OUT(&O), ARGS(a_int(4), a_int(-1), a_bool(0)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * gather, scatter, scatter_add */

START_TEST(test_gather)
{
    float s[12], o[8];
    fill_seq(s, 12, 0, 1.5f);   /* self (3, 4) = arange*1.5 */
    int64_t gi[6] = { 0, 3, 2, 2, 1, 0 };
    rgpu_view S = view(s, RGPU_F32, 2, SZ(3, 4), NULL), I = view(gi, RGPU_I64, 2, SZ(3, 2), NULL);
    rgpu_view O = view(o, RGPU_F32, 2, SZ(3, 2), NULL);
    OK(RGPU_OP_GATHER, IN(&S, &I), OUT(&O), ARGS(a_int(1)));
    EXPECT(&O, 0.0, 4.5, 9.0, 9.0, 13.5, 12.0);
    int64_t gi0[4] = { 2, 0, 1, 1 };
    rgpu_view I0 = view(gi0, RGPU_I64, 2, SZ(1, 4), NULL), O0 = view(o, RGPU_F32, 2, SZ(1, 4), NULL);
    OK(RGPU_OP_GATHER, IN(&S, &I0), OUT(&O0), ARGS(a_int(-2)));
    EXPECT(&O0, 12.0, 1.5, 9.0, 10.5);
    /* transposed self (4, 3), index (4, 1) */
    int64_t gt[4] = { 2, 0, 1, 2 };
    rgpu_view ST = view(s, RGPU_F32, 2, SZ(4, 3), SZ(1, 4)), IT = view(gt, RGPU_I64, 2, SZ(4, 1), NULL);
    rgpu_view OT = view(o, RGPU_F32, 2, SZ(4, 1), NULL);
    OK(RGPU_OP_GATHER, IN(&ST, &IT), OUT(&OT), ARGS(a_int(1)));
    EXPECT(&OT, 12.0, 1.5, 9.0, 16.5);
    /* zero-size index */
    rgpu_view IZ = view(gi, RGPU_I64, 2, SZ(0, 2), NULL), OZ = view(o, RGPU_F32, 2, SZ(0, 2), NULL);
    OK(RGPU_OP_GATHER, IN(&S, &IZ), OUT(&OZ), ARGS(a_int(1)));
    /* errors */
    gi[3] = -1;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_GATHER, IN(&S, &I), OUT(&O), ARGS(a_int(1)));
    ck_assert(strstr(g_err, "index -1 is out of bounds for dimension 1 with size 4") != NULL);
    gi[3] = 4;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_GATHER, IN(&S, &I), OUT(&O), ARGS(a_int(1)));
    gi[3] = 2;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_GATHER, IN(&S, &I), OUT(&O), ARGS(a_int(2)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_GATHER, IN(&S, &I), OUT(&O), ARGS(a_flt(1)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_GATHER, IN(&S, &I), OUT(&O), NOARGS);
    int32_t gi32[6] = { 0, 3, 2, 2, 1, 0 };   /* int32 index (ATen 2.13 takes it) */
    rgpu_view I32 = view(gi32, RGPU_I32, 2, SZ(3, 2), NULL);
    OK(RGPU_OP_GATHER, IN(&S, &I32), OUT(&O), ARGS(a_int(1)));
    EXPECT(&O, 0.0, 4.5, 9.0, 9.0, 13.5, 12.0);
    int16_t gi16[6] = { 0 };
    rgpu_view I16 = view(gi16, RGPU_I16, 2, SZ(3, 2), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_GATHER, IN(&S, &I16), OUT(&O), ARGS(a_int(1)));
    rgpu_view I1 = view(gi, RGPU_I64, 1, SZ(6), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_GATHER, IN(&S, &I1), OUT(&O), ARGS(a_int(1)));
    rgpu_view IL = view(gi, RGPU_I64, 2, SZ(1, 6), NULL), OL = view(o, RGPU_F32, 2, SZ(1, 6), NULL);
    OK(RGPU_OP_GATHER, IN(&S, &IL), OUT(&OL), ARGS(a_int(1)));   /* index wider than self along dim: fine */
    rgpu_view IW = view(gi, RGPU_I64, 2, SZ(1, 6), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_GATHER, IN(&S, &IW), OUT(&OL), ARGS(a_int(0)));
    ERR(RGPU_ERR_SHAPE, RGPU_OP_GATHER, IN(&S, &I), OUT(&O0), ARGS(a_int(1)));
}
END_TEST

START_TEST(test_scatter)
{
    float self[12] = { 0 }, src[12], o[12];
    fill_seq(src, 12, 1, 1);
    int64_t si[8] = { 0, 1, 2, 0, 2, 0, 0, 1 };
    rgpu_view S = view(self, RGPU_F32, 2, SZ(3, 4), NULL), SRC = view(src, RGPU_F32, 2, SZ(3, 4), NULL);
    rgpu_view I = view(si, RGPU_I64, 2, SZ(2, 4), NULL), O = view(o, RGPU_F32, 2, SZ(3, 4), NULL);
    OK(RGPU_OP_SCATTER, IN(&S, &I, &SRC), OUT(&O), ARGS(a_int(0), a_none(), a_int(0)));
    EXPECT(&O, 1.0, 6.0, 7.0, 4.0, 0.0, 2.0, 0.0, 8.0, 5.0, 0.0, 3.0, 0.0);

    /* value, dim 1, in place */
    for (int i = 0; i < 12; i++) self[i] = 1;
    int64_t vi[3] = { 3, 0, 1 };
    rgpu_view IV = view(vi, RGPU_I64, 2, SZ(3, 1), NULL);
    OK(RGPU_OP_SCATTER, IN(&S, &IV, NULL), OUT(&S), ARGS(a_int(1), a_flt(2.5), a_int(0)));
    EXPECT(&S, 1.0, 1.0, 1.0, 2.5, 2.5, 1.0, 1.0, 1.0, 1.0, 2.5, 1.0, 1.0);

    /* scatter_add into a new out; self unchanged */
    for (int i = 0; i < 12; i++) self[i] = 1;
    OK(RGPU_OP_SCATTER_ADD, IN(&S, &I, &SRC), OUT(&O), ARGS(a_int(0)));
    EXPECT(&O, 2.0, 7.0, 8.0, 5.0, 1.0, 3.0, 1.0, 9.0, 6.0, 1.0, 4.0, 1.0);
    ck_assert(self[0] == 1);
    /* reduce multiply (src) and add (value), in place */
    for (int i = 0; i < 12; i++) self[i] = 2;
    OK(RGPU_OP_SCATTER, IN(&S, &I, &SRC), OUT(&S), ARGS(a_int(0), a_none(), a_int(2)));
    EXPECT(&S, 2.0, 12.0, 14.0, 8.0, 2.0, 4.0, 2.0, 16.0, 10.0, 2.0, 6.0, 2.0);
    for (int i = 0; i < 12; i++) self[i] = 2;
    OK(RGPU_OP_SCATTER, IN(&S, &I, NULL), OUT(&S), ARGS(a_int(0), a_int(3), a_int(1)));
    EXPECT(&S, 5.0, 5.0, 5.0, 5.0, 2.0, 5.0, 2.0, 5.0, 5.0, 2.0, 5.0, 2.0);

    /* int32 with duplicate indices, transposed-src (strided) case */
    int32_t z[5] = { 0 }, v[4] = { 5, 6, 7, 8 };
    int32_t di[4] = { 1, 1, 4, 1 };   /* int32 index */
    rgpu_view Z = view(z, RGPU_I32, 1, SZ(5), NULL), V = view(v, RGPU_I32, 1, SZ(4), NULL);
    rgpu_view DI = view(di, RGPU_I32, 1, SZ(4), NULL);
    OK(RGPU_OP_SCATTER_ADD, IN(&Z, &DI, &V), OUT(&Z), ARGS(a_int(0)));
    EXPECT(&Z, 0, 19, 0, 0, 7);
    /* assign with duplicates: the last write (row-major) wins */
    OK(RGPU_OP_SCATTER, IN(&Z, &DI, &V), OUT(&Z), ARGS(a_int(0), a_none(), a_int(0)));
    EXPECT(&Z, 0, 8, 0, 0, 7);
    /* bf16 scatter_add rounds after each add */
    uint16_t hb[2] = { rgpu_float_to_bf16(256.0f), 0 }, hs[3];
    for (int i = 0; i < 3; i++) hs[i] = rgpu_float_to_bf16(1.0f);
    int64_t hi[3] = { 0, 0, 0 };
    rgpu_view HB = view(hb, RGPU_BF16, 1, SZ(2), NULL), HS = view(hs, RGPU_BF16, 1, SZ(3), NULL);
    rgpu_view HI = view(hi, RGPU_I64, 1, SZ(3), NULL);
    OK(RGPU_OP_SCATTER_ADD, IN(&HB, &HI, &HS), OUT(&HB), ARGS(a_int(0)));
    EXPECT(&HB, 260, 0);   /* torch: [260., 0.]: f32 accumulation, one rounding */
    /* scatter reduce multiply on f16: (1 + 2^-10)^3 accumulated in f32 */
    uint16_t hm[1] = { rgpu_float_to_half(1.0f) }, hmv[3];
    for (int i = 0; i < 3; i++) hmv[i] = rgpu_float_to_half(1.0009765625f);
    rgpu_view HM = view(hm, RGPU_F16, 1, SZ(1), NULL), HMV = view(hmv, RGPU_F16, 1, SZ(3), NULL);
    OK(RGPU_OP_SCATTER, IN(&HM, &HI, &HMV), OUT(&HM), ARGS(a_int(0), a_none(), a_int(2)));
    EXPECT(&HM, 1.0029296875);

    /* errors: nothing is written on a bad index */
    for (int i = 0; i < 12; i++) self[i] = 9;
    si[5] = 3;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SCATTER, IN(&S, &I, &SRC), OUT(&S), ARGS(a_int(0), a_none(), a_int(0)));
    ck_assert(strstr(g_err, "index 3 is out of bounds for dimension 0 with size 3") != NULL);
    ck_assert(self[0] == 9);
    si[5] = 0;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SCATTER, IN(&S, &I, &SRC), OUT(&S), ARGS(a_int(0), a_none(), a_int(3)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SCATTER, IN(&S, &I, NULL), OUT(&S), ARGS(a_int(0), a_none(), a_int(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SCATTER_ADD, IN(&S, &I, NULL), OUT(&S), ARGS(a_int(0)));
    rgpu_view SRC64 = view(src, RGPU_F64, 2, SZ(3, 2), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_SCATTER_ADD, IN(&S, &I, &SRC64), OUT(&S), ARGS(a_int(0)));
    rgpu_view SRCS = view(src, RGPU_F32, 2, SZ(1, 4), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_SCATTER_ADD, IN(&S, &I, &SRCS), OUT(&S), ARGS(a_int(0)));
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_SCATTER_ADD, IN(&S, &I, &SRC), OUT(&Z), ARGS(a_int(0)));
    rgpu_view O43 = view(o, RGPU_F32, 2, SZ(4, 3), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_SCATTER_ADD, IN(&S, &I, &SRC), OUT(&O43), ARGS(a_int(0)));
}
END_TEST

START_TEST(test_scatter_reduce)
{
    float self[12], src[12], o[12];
    fill_seq(src, 12, 1, 1);
    for (int i = 0; i < 12; i++) self[i] = 2;
    int64_t si[8] = { 0, 1, 2, 0, 2, 0, 0, 1 };
    rgpu_view S = view(self, RGPU_F32, 2, SZ(3, 4), NULL), SRC = view(src, RGPU_F32, 2, SZ(3, 4), NULL);
    rgpu_view I = view(si, RGPU_I64, 2, SZ(2, 4), NULL), O = view(o, RGPU_F32, 2, SZ(3, 4), NULL);
    OK(RGPU_OP_SCATTER_REDUCE, IN(&S, &I, &SRC), OUT(&O), ARGS(a_int(0), a_int(3), a_bool(1)));
    EXPECT(&O, 2.0, 6.0, 7.0, 4.0, 2.0, 2.0, 2.0, 8.0, 5.0, 2.0, 3.0, 2.0);
    OK(RGPU_OP_SCATTER_REDUCE, IN(&S, &I, &SRC), OUT(&O), ARGS(a_int(0), a_int(2), a_bool(1)));
    EXPECT(&O, 1.5, 4.0, 4.5, 3.0, 2.0, 2.0, 2.0, 5.0, 3.5, 2.0, 2.5, 2.0);
    OK(RGPU_OP_SCATTER_REDUCE, IN(&S, &I, &SRC), OUT(&O), ARGS(a_int(0), a_int(4), a_bool(0)));
    EXPECT(&O, 1.0, 6.0, 7.0, 4.0, 2.0, 2.0, 2.0, 8.0, 5.0, 2.0, 3.0, 2.0);
    ck_assert(self[0] == 2);

    /* int32, duplicate indices, in place: floor mean, prod with self */
    int32_t z[5] = { 0 }, v[4] = { 5, 6, 7, 8 }, di[4] = { 1, 1, 4, 1 };
    rgpu_view Z = view(z, RGPU_I32, 1, SZ(5), NULL), V = view(v, RGPU_I32, 1, SZ(4), NULL);
    rgpu_view DI = view(di, RGPU_I32, 1, SZ(4), NULL);
    OK(RGPU_OP_SCATTER_REDUCE, IN(&Z, &DI, &V), OUT(&Z), ARGS(a_int(0), a_int(2), a_bool(0)));
    EXPECT(&Z, 0, 6, 0, 0, 7);
    for (int i = 0; i < 5; i++) z[i] = 2;
    OK(RGPU_OP_SCATTER_REDUCE, IN(&Z, &DI, &V), OUT(&Z), ARGS(a_int(0), a_int(1), a_bool(1)));
    EXPECT(&Z, 2, 480, 2, 2, 14);

    /* errors: a bad index writes nothing; reduce out of range; bool mean */
    si[5] = 3;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SCATTER_REDUCE, IN(&S, &I, &SRC), OUT(&S), ARGS(a_int(0), a_int(0), a_bool(1)));
    ck_assert(strstr(g_err, "index 3 is out of bounds for dimension 0 with size 3") != NULL);
    ck_assert(self[0] == 2);
    si[5] = 0;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_SCATTER_REDUCE, IN(&S, &I, &SRC), OUT(&S), ARGS(a_int(0), a_int(5), a_bool(1)));
    uint8_t b[3] = { 0 };
    rgpu_view BV = view(b, RGPU_BOOL, 1, SZ(3), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_SCATTER_REDUCE, IN(&BV, &DI, &BV), OUT(&BV), ARGS(a_int(0), a_int(2), a_bool(1)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * index_select, index_add */

START_TEST(test_index_select)
{
    float s[12], o[12];
    fill_seq(s, 12, 0, 1.5f);
    int64_t i1[3] = { 3, 0, 3 };
    rgpu_view S = view(s, RGPU_F32, 2, SZ(3, 4), NULL), I = view(i1, RGPU_I64, 1, SZ(3), NULL);
    rgpu_view O = view(o, RGPU_F32, 2, SZ(3, 3), NULL);
    OK(RGPU_OP_INDEX_SELECT, IN(&S, &I), OUT(&O), ARGS(a_int(1)));
    EXPECT(&O, 4.5, 0.0, 4.5, 10.5, 6.0, 10.5, 16.5, 12.0, 16.5);
    int32_t i0[2] = { 2, 0 };
    rgpu_view I0 = view(i0, RGPU_I32, 1, SZ(2), NULL);
    rgpu_view OT = view(o, RGPU_F32, 2, SZ(2, 4), SZ(1, 2));   /* transposed out */
    OK(RGPU_OP_INDEX_SELECT, IN(&S, &I0), OUT(&OT), ARGS(a_int(0)));
    EXPECT(&OT, 12.0, 13.5, 15.0, 16.5, 0.0, 1.5, 3.0, 4.5);
    /* 0-d self, 0-d index */
    float sc = 7.5f, oc = 0;
    int64_t z = 0;
    rgpu_view SC = view(&sc, RGPU_F32, 0, NULL, NULL), IZ = view(&z, RGPU_I64, 0, NULL, NULL);
    rgpu_view OC = view(&oc, RGPU_F32, 0, NULL, NULL);
    OK(RGPU_OP_INDEX_SELECT, IN(&SC, &IZ), OUT(&OC), ARGS(a_int(0)));
    ck_assert(oc == 7.5f);
    /* empty index */
    rgpu_view IE = view(i1, RGPU_I64, 1, SZ(0), NULL), OE = view(o, RGPU_F32, 2, SZ(3, 0), NULL);
    OK(RGPU_OP_INDEX_SELECT, IN(&S, &IE), OUT(&OE), ARGS(a_int(1)));
    /* errors */
    i1[1] = -1;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_INDEX_SELECT, IN(&S, &I), OUT(&O), ARGS(a_int(1)));
    ck_assert(strstr(g_err, "index -1 is out of bounds for dimension 1 with size 4") != NULL);
    rgpu_view I2 = view(i1, RGPU_I64, 2, SZ(1, 3), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_INDEX_SELECT, IN(&S, &I2), OUT(&O), ARGS(a_int(1)));
    i1[1] = 0;
    ERR(RGPU_ERR_SHAPE, RGPU_OP_INDEX_SELECT, IN(&S, &I), OUT(&O), ARGS(a_int(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_INDEX_SELECT, IN(&S, &I), OUT(&O), ARGS(a_int(-3)));
}
END_TEST

START_TEST(test_index_add)
{
    float x[15], src[12], o[15];
    fill_seq(x, 15, 0, 1);
    for (int r = 0; r < 4; r++) for (int c = 0; c < 3; c++) src[r * 3 + c] = (float)(r + 1);
    int64_t ix[4] = { 0, 4, 2, 0 };
    rgpu_view X = view(x, RGPU_F32, 2, SZ(5, 3), NULL), SRC = view(src, RGPU_F32, 2, SZ(4, 3), NULL);
    rgpu_view I = view(ix, RGPU_I64, 1, SZ(4), NULL), O = view(o, RGPU_F32, 2, SZ(5, 3), NULL);
    OK(RGPU_OP_INDEX_ADD, IN(&X, &I, &SRC), OUT(&O), ARGS(a_int(0), a_int(2)));
    EXPECT(&O, 10.0, 11.0, 12.0, 3.0, 4.0, 5.0, 12.0, 13.0, 14.0, 9.0, 10.0, 11.0, 16.0, 17.0, 18.0);
    ck_assert(x[0] == 0);
    OK(RGPU_OP_INDEX_ADD, IN(&X, &I, &SRC), OUT(&X), ARGS(a_int(0), a_flt(2.0)));   /* in place */
    EXPECT(&X, 10.0, 11.0, 12.0, 3.0, 4.0, 5.0, 12.0, 13.0, 14.0, 9.0, 10.0, 11.0, 16.0, 17.0, 18.0);

    /* int64, dim 1, alpha 3, duplicate indices; i32 index */
    int64_t y[6] = { 0, 1, 2, 3, 4, 5 }, s2[4] = { 10, 20, 30, 40 };
    int32_t i2[2] = { 2, 2 };
    rgpu_view Y = view(y, RGPU_I64, 2, SZ(2, 3), NULL), S2 = view(s2, RGPU_I64, 2, SZ(2, 2), NULL);
    rgpu_view I2 = view(i2, RGPU_I32, 1, SZ(2), NULL);
    OK(RGPU_OP_INDEX_ADD, IN(&Y, &I2, &S2), OUT(&Y), ARGS(a_int(1), a_int(3)));
    EXPECT(&Y, 0, 1, 92, 3, 4, 215);
    /* f16: each add rounds to half */
    uint16_t h[3], hs[3];
    const float hv[3] = { 1, 2, 3 }, hsv[3] = { 0.1f, 0.2f, 0.3f };
    for (int i = 0; i < 3; i++) { h[i] = rgpu_float_to_half(hv[i]); hs[i] = rgpu_float_to_half(hsv[i]); }
    int64_t hi[3] = { 1, 1, 1 };
    rgpu_view H = view(h, RGPU_F16, 1, SZ(3), NULL), HS = view(hs, RGPU_F16, 1, SZ(3), NULL);
    rgpu_view HI = view(hi, RGPU_I64, 1, SZ(3), NULL);
    OK(RGPU_OP_INDEX_ADD, IN(&H, &HI, &HS), OUT(&H), ARGS(a_int(0), a_int(1)));
    EXPECT(&H, 1.0, 2.599609375, 3.0);
    /* bf16 256 + 1 + 1 + 1: ATen's scatter_add path (2-d, dim 0 or last, alpha 1,
     * int64 index) accumulates in f32 -> 260; its slice-by-slice and 1-d paths
     * round each add -> 256 */
    uint16_t b2[4], b3[8], b1[2], ones[12];
    for (int i = 0; i < 12; i++) ones[i] = rgpu_float_to_bf16(1.0f);
    memset(b2, 0, sizeof b2); memset(b3, 0, sizeof b3); memset(b1, 0, sizeof b1);
    b2[0] = b3[0] = b1[0] = rgpu_float_to_bf16(256.0f);
    int64_t z3[3] = { 0, 0, 0 };
    int32_t z3i[3] = { 0, 0, 0 };
    rgpu_view B2 = view(b2, RGPU_BF16, 2, SZ(2, 2), NULL), O32 = view(ones, RGPU_BF16, 2, SZ(3, 2), NULL);
    rgpu_view Z3 = view(z3, RGPU_I64, 1, SZ(3), NULL), Z3I = view(z3i, RGPU_I32, 1, SZ(3), NULL);
    uint16_t r2[4];
    rgpu_view R2 = view(r2, RGPU_BF16, 2, SZ(2, 2), NULL);
    OK(RGPU_OP_INDEX_ADD, IN(&B2, &Z3, &O32), OUT(&R2), ARGS(a_int(0), a_int(1)));
    EXPECT(&R2, 260, 3, 0, 0);
    OK(RGPU_OP_INDEX_ADD, IN(&B2, &Z3I, &O32), OUT(&R2), ARGS(a_int(0), a_int(1)));
    EXPECT(&R2, 256, 3, 0, 0);
    rgpu_view O23 = view(ones, RGPU_BF16, 2, SZ(2, 3), NULL);
    OK(RGPU_OP_INDEX_ADD, IN(&B2, &Z3, &O23), OUT(&R2), ARGS(a_int(1), a_int(1)));
    EXPECT(&R2, 260, 0, 3, 0);
    rgpu_view B3 = view(b3, RGPU_BF16, 3, SZ(2, 2, 2), NULL), O232 = view(ones, RGPU_BF16, 3, SZ(2, 3, 2), NULL);
    uint16_t r3[8];
    rgpu_view R3 = view(r3, RGPU_BF16, 3, SZ(2, 2, 2), NULL);
    OK(RGPU_OP_INDEX_ADD, IN(&B3, &Z3, &O232), OUT(&R3), ARGS(a_int(1), a_int(1)));
    EXPECT(&R3, 256, 3, 0, 0, 3, 3, 0, 0);
    rgpu_view B1 = view(b1, RGPU_BF16, 1, SZ(2), NULL), O3 = view(ones, RGPU_BF16, 1, SZ(3), NULL);
    OK(RGPU_OP_INDEX_ADD, IN(&B1, &Z3, &O3), OUT(&B1), ARGS(a_int(0), a_int(1)));
    EXPECT(&B1, 256, 0);

    /* f32 alpha 0.3: torch's 2-d (slice add_, fma) and 1-d (two roundings) paths */
    float fa = -0x1.089b46p-1f, fb = 0x1.cd735p-2f, fr;
    int64_t i0 = 0;
    rgpu_view FA = view(&fa, RGPU_F32, 2, SZ(1, 1), NULL), FB = view(&fb, RGPU_F32, 2, SZ(1, 1), NULL);
    rgpu_view FR = view(&fr, RGPU_F32, 2, SZ(1, 1), NULL), I0 = view(&i0, RGPU_I64, 1, SZ(1), NULL);
    OK(RGPU_OP_INDEX_ADD, IN(&FA, &I0, &FB), OUT(&FR), ARGS(a_int(0), a_flt(0.3)));
    ck_assert(fr == -0x1.86c726p-2f);
    rgpu_view FA1 = view(&fa, RGPU_F32, 1, SZ(1), NULL), FB1 = view(&fb, RGPU_F32, 1, SZ(1), NULL);
    rgpu_view FR1 = view(&fr, RGPU_F32, 1, SZ(1), NULL);
    OK(RGPU_OP_INDEX_ADD, IN(&FA1, &I0, &FB1), OUT(&FR1), ARGS(a_int(0), a_flt(0.3)));
    ck_assert(fr == -0x1.86c728p-2f);

    /* errors */
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_INDEX_ADD, IN(&Y, &I2, &S2), OUT(&Y), ARGS(a_int(1), a_flt(1.5)));
    ix[2] = 5;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_INDEX_ADD, IN(&X, &I, &SRC), OUT(&O), ARGS(a_int(0), a_int(1)));
    ix[2] = -1;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_INDEX_ADD, IN(&X, &I, &SRC), OUT(&O), ARGS(a_int(0), a_int(1)));
    ix[2] = 2;
    rgpu_view I3 = view(ix, RGPU_I64, 1, SZ(3), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_INDEX_ADD, IN(&X, &I3, &SRC), OUT(&O), ARGS(a_int(0), a_int(1)));
    ERR(RGPU_ERR_SHAPE, RGPU_OP_INDEX_ADD, IN(&X, &I, &SRC), OUT(&O), ARGS(a_int(1), a_int(1)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_INDEX_ADD, IN(&X, &I, &SRC), OUT(&O), ARGS(a_int(0)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * index.Tensor, index_put */

START_TEST(test_index)
{
    float x[60], o[60];
    fill_seq(x, 60, 0, 1);   /* X (3, 4, 5) = arange */
    rgpu_view X = view(x, RGPU_F32, 3, SZ(3, 4, 5), NULL);
    /* X[[2, -1, 0]] */
    int64_t a[3] = { 2, -1, 0 };
    rgpu_view A = view(a, RGPU_I64, 1, SZ(3), NULL), OA = view(o, RGPU_F32, 3, SZ(3, 4, 5), NULL);
    OK(RGPU_OP_INDEX, IN(&X, &A), OUT(&OA), NOARGS);
    for (int i = 0; i < 20; i++) { ck_assert(o[i] == 40 + i); ck_assert(o[20 + i] == 40 + i); ck_assert(o[40 + i] == i); }
    /* X[:, [[1], [3]]] -> (3, 2, 1, 5) */
    int64_t b[2] = { 1, 3 };
    rgpu_view B = view(b, RGPU_I64, 2, SZ(2, 1), NULL), OB = view(o, RGPU_F32, 4, SZ(3, 2, 1, 5), NULL);
    OK(RGPU_OP_INDEX, IN(&X, NULL, &B), OUT(&OB), NOARGS);
    EXPECT(&OB, 5.0, 6.0, 7.0, 8.0, 9.0, 15.0, 16.0, 17.0, 18.0, 19.0, 25.0, 26.0, 27.0, 28.0, 29.0,
           35.0, 36.0, 37.0, 38.0, 39.0, 45.0, 46.0, 47.0, 48.0, 49.0, 55.0, 56.0, 57.0, 58.0, 59.0);
    /* X[[0, 2], :, [4, -5]]: not adjacent, B first -> (2, 4) */
    int64_t c0[2] = { 0, 2 }, c2[2] = { 4, -5 };
    rgpu_view C0 = view(c0, RGPU_I64, 1, SZ(2), NULL), C2 = view(c2, RGPU_I64, 1, SZ(2), NULL);
    rgpu_view OC = view(o, RGPU_F32, 2, SZ(2, 4), NULL);
    OK(RGPU_OP_INDEX, IN(&X, &C0, NULL, &C2), OUT(&OC), NOARGS);
    EXPECT(&OC, 4.0, 9.0, 14.0, 19.0, 40.0, 45.0, 50.0, 55.0);
    /* X[:, [[0], [3]], [1, 2, 4]]: broadcast (2, 3), adjacent -> (3, 2, 3); i32 index, strided out */
    int32_t d1[2] = { 0, 3 };
    int64_t d2[3] = { 1, 2, 4 };
    rgpu_view D1 = view(d1, RGPU_I32, 2, SZ(2, 1), NULL), D2 = view(d2, RGPU_I64, 1, SZ(3), NULL);
    float ob[36];
    rgpu_view OD = view(ob, RGPU_F32, 3, SZ(3, 2, 3), SZ(12, 6, 2));
    OK(RGPU_OP_INDEX, IN(&X, NULL, &D1, &D2), OUT(&OD), NOARGS);
    EXPECT(&OD, 1.0, 2.0, 4.0, 16.0, 17.0, 19.0, 21.0, 22.0, 24.0, 36.0, 37.0, 39.0, 41.0, 42.0, 44.0, 56.0, 57.0, 59.0);
    /* X[tensor(1), [0, 1]] -> (2, 5) */
    int64_t e0 = 1, e1[2] = { 0, 1 };
    rgpu_view E0 = view(&e0, RGPU_I64, 0, NULL, NULL), E1 = view(e1, RGPU_I64, 1, SZ(2), NULL);
    rgpu_view OE = view(o, RGPU_F32, 2, SZ(2, 5), NULL);
    OK(RGPU_OP_INDEX, IN(&X, &E0, &E1), OUT(&OE), NOARGS);
    EXPECT(&OE, 20.0, 21.0, 22.0, 23.0, 24.0, 25.0, 26.0, 27.0, 28.0, 29.0);
    /* transposed self: XT = X.transpose(0, 2) is (5, 4, 3); XT[[1, 4]] -> (2, 4, 3) */
    int64_t t[2] = { 1, 4 };
    rgpu_view XT = view(x, RGPU_F32, 3, SZ(5, 4, 3), SZ(1, 5, 20)), T = view(t, RGPU_I64, 1, SZ(2), NULL);
    rgpu_view OT = view(o, RGPU_F32, 3, SZ(2, 4, 3), NULL);
    OK(RGPU_OP_INDEX, IN(&XT, &T), OUT(&OT), NOARGS);
    ck_assert(o[0] == 1 && o[1] == 21 && o[3] == 6 && o[12] == 4 && o[23] == 59);
    /* empty index */
    rgpu_view Z = view(a, RGPU_I64, 1, SZ(0), NULL), OZ = view(o, RGPU_F32, 3, SZ(0, 4, 5), NULL);
    OK(RGPU_OP_INDEX, IN(&X, &Z), OUT(&OZ), NOARGS);
    /* errors */
    a[1] = -4;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_INDEX, IN(&X, &A), OUT(&OA), NOARGS);
    ck_assert(strstr(g_err, "index -4 is out of bounds for dimension 0 with size 3") != NULL);
    a[1] = 3;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_INDEX, IN(&X, &A), OUT(&OA), NOARGS);
    a[1] = 1;
    ERR(RGPU_ERR_SHAPE, RGPU_OP_INDEX, IN(&X, &A), OUT(&OC), NOARGS);
    int64_t three[3] = { 0, 0, 0 };
    rgpu_view T3 = view(three, RGPU_I64, 1, SZ(3), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_INDEX, IN(&X, &A, &T3), OUT(&OC), NOARGS);   /* (3,) with (3,) fine, out wrong */
    ERR(RGPU_ERR_SHAPE, RGPU_OP_INDEX, IN(&X, &C0, &T3), OUT(&OC), NOARGS);   /* (2,) vs (3,) */
    ck_assert(strstr(g_err, "broadcast") != NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_INDEX, IN(&X, &A, &A, &A, &A), OUT(&OA), NOARGS);
    /* 12-d self indexed by a 12-d index would give 23 dims */
    int64_t ones12[12] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    rgpu_view X12 = view(x, RGPU_F32, 12, ones12, NULL), I12 = view(three, RGPU_I64, 12, ones12, NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_INDEX, IN(&X12, &I12), OUT(&OA), NOARGS);
    rgpu_view AF = view(x, RGPU_F32, 1, SZ(3), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_INDEX, IN(&X, &AF), OUT(&OA), NOARGS);
    ERR(RGPU_ERR_ARITY, RGPU_OP_INDEX, NOIN, OUT(&OA), NOARGS);
}
END_TEST

START_TEST(test_index_put)
{
    float z[5] = { 0 }, v[4] = { 1, 2, 3, 4 }, o[5];
    int64_t ix[4] = { 1, 3, 1, -1 };
    rgpu_view Z = view(z, RGPU_F32, 1, SZ(5), NULL), V = view(v, RGPU_F32, 1, SZ(4), NULL);
    rgpu_view I = view(ix, RGPU_I64, 1, SZ(4), NULL), O = view(o, RGPU_F32, 1, SZ(5), NULL);
    OK(RGPU_OP_INDEX_PUT, IN(&Z, &V, &I), OUT(&O), ARGS(a_bool(0)));
    EXPECT(&O, 0.0, 3.0, 0.0, 2.0, 4.0);
    for (int i = 0; i < 5; i++) z[i] = 1;
    OK(RGPU_OP_INDEX_PUT, IN(&Z, &V, &I), OUT(&Z), ARGS(a_bool(1)));   /* in place, accumulate */
    EXPECT(&Z, 1.0, 5.0, 1.0, 3.0, 5.0);

    /* x[:, [0, 2]] = [7, 8]: values broadcast over rows; transposed self */
    float m[12] = { 0 }, mo[12];
    float val[2] = { 7, 8 };
    int64_t ci[2] = { 0, 2 };
    rgpu_view M = view(m, RGPU_F32, 2, SZ(3, 4), SZ(1, 3)), VAL = view(val, RGPU_F32, 1, SZ(2), NULL);
    rgpu_view CI = view(ci, RGPU_I64, 1, SZ(2), NULL), MO = view(mo, RGPU_F32, 2, SZ(3, 4), NULL);
    OK(RGPU_OP_INDEX_PUT, IN(&M, &VAL, NULL, &CI), OUT(&MO), ARGS(a_bool(0)));
    EXPECT(&MO, 7.0, 0.0, 8.0, 0.0, 7.0, 0.0, 8.0, 0.0, 7.0, 0.0, 8.0, 0.0);
    /* non-adjacent: x[[0, 1], :, [3, 0]] += arange(6).reshape(2, 3) */
    float n[24] = { 0 }, nv[6];
    fill_seq(nv, 6, 0, 1);
    int64_t n0[2] = { 0, 1 }, n2[2] = { 3, 0 };
    rgpu_view N = view(n, RGPU_F32, 3, SZ(2, 3, 4), NULL), NV = view(nv, RGPU_F32, 2, SZ(2, 3), NULL);
    rgpu_view N0 = view(n0, RGPU_I64, 1, SZ(2), NULL), N2 = view(n2, RGPU_I64, 1, SZ(2), NULL);
    OK(RGPU_OP_INDEX_PUT, IN(&N, &NV, &N0, NULL, &N2), OUT(&N), ARGS(a_bool(1)));
    EXPECT(&N, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 3.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0,
           5.0, 0.0, 0.0, 0.0);
    /* int64 values with a 0-d value broadcast, i32 index */
    int64_t q[4] = { 1, 1, 1, 1 }, qv = 5;
    int32_t qi[2] = { 3, 3 };
    rgpu_view Q = view(q, RGPU_I64, 1, SZ(4), NULL), QV = view(&qv, RGPU_I64, 0, NULL, NULL);
    rgpu_view QI = view(qi, RGPU_I32, 1, SZ(2), NULL);
    OK(RGPU_OP_INDEX_PUT, IN(&Q, &QV, &QI), OUT(&Q), ARGS(a_bool(1)));
    EXPECT(&Q, 1, 1, 1, 11);

    /* errors: out untouched */
    for (int i = 0; i < 5; i++) z[i] = 9;
    ix[2] = -6;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_INDEX_PUT, IN(&Z, &V, &I), OUT(&Z), ARGS(a_bool(1)));
    ck_assert(strstr(g_err, "index -6 is out of bounds for dimension 0 with size 5") != NULL);
    ck_assert(z[0] == 9 && z[1] == 9);
    ix[2] = 0;
    rgpu_view V3 = view(v, RGPU_F32, 1, SZ(3), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_INDEX_PUT, IN(&Z, &V3, &I), OUT(&Z), ARGS(a_bool(0)));
    ck_assert(strstr(g_err, "cannot be broadcast") != NULL);
    rgpu_view V64 = view(v, RGPU_F64, 1, SZ(2), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_INDEX_PUT, IN(&Z, &V64, &I), OUT(&Z), ARGS(a_bool(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_INDEX_PUT, IN(&Z, &V, &I), OUT(&Z), ARGS(a_flt(0)));
    ERR(RGPU_ERR_ARITY, RGPU_OP_INDEX_PUT, IN(&Z), OUT(&Z), ARGS(a_bool(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_INDEX_PUT, IN(&Z, NULL, &I), OUT(&Z), ARGS(a_bool(0)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * cat, constant_pad_nd */

START_TEST(test_cat)
{
    float a[2] = { 1.5f, 2.5f }, o[9], empty_f = 0;
    int64_t b[4] = { 3, 4, 5, 6 };
    rgpu_view A = view(a, RGPU_F32, 2, SZ(1, 2), NULL), B = view(b, RGPU_I64, 2, SZ(2, 2), NULL);
    rgpu_view E = view(&empty_f, RGPU_F32, 1, SZ(0), NULL), O = view(o, RGPU_F32, 2, SZ(3, 2), NULL);
    OK(RGPU_OP_CAT, IN(&E, &A, &B, &E), OUT(&O), ARGS(a_int(0)));
    EXPECT(&O, 1.5, 2.5, 3.0, 4.0, 5.0, 6.0);
    /* dim 1 (as -1), transposed input, strided out */
    float m[6], ones[3] = { 1, 1, 1 }, ob[18];
    fill_seq(m, 6, 0, 1);
    rgpu_view MT = view(m, RGPU_F32, 2, SZ(3, 2), SZ(1, 3)), ON = view(ones, RGPU_F32, 2, SZ(3, 1), NULL);
    rgpu_view OS = view(ob, RGPU_F32, 2, SZ(3, 3), SZ(6, 2));
    OK(RGPU_OP_CAT, IN(&MT, &ON), OUT(&OS), ARGS(a_int(-1)));
    EXPECT(&OS, 0.0, 3.0, 1.0, 1.0, 4.0, 1.0, 2.0, 5.0, 1.0);
    /* bool + f16 into f16; a zero-size piece */
    uint8_t bl[2] = { 1, 0 };
    uint16_t h[2] = { rgpu_float_to_half(0.5f), rgpu_float_to_half(-2.0f) }, ho[4];
    rgpu_view BL = view(bl, RGPU_BOOL, 1, SZ(2), NULL), H = view(h, RGPU_F16, 1, SZ(2), NULL);
    rgpu_view HZ = view(h, RGPU_F16, 1, SZ(0), NULL), HO = view(ho, RGPU_F16, 1, SZ(4), NULL);
    OK(RGPU_OP_CAT, IN(&BL, &HZ, &H), OUT(&HO), ARGS(a_int(0)));
    EXPECT(&HO, 1.0, 0.0, 0.5, -2.0);
    /* all legacy-empty */
    rgpu_view OE = view(o, RGPU_F32, 1, SZ(0), NULL);
    OK(RGPU_OP_CAT, IN(&E, &E), OUT(&OE), ARGS(a_int(0)));
    /* errors */
    ERR(RGPU_ERR_SHAPE, RGPU_OP_CAT, IN(&A, &ON), OUT(&O), ARGS(a_int(0)));
    ck_assert(strstr(g_err, "sizes of tensors must match except in dimension 0") != NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_CAT, IN(&A, &MT), OUT(&O), ARGS(a_int(0)));   /* (1+3, 2) vs out (3, 2) */
    ERR(RGPU_ERR_SHAPE, RGPU_OP_CAT, IN(&A, &B), OUT(&OS), ARGS(a_int(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_CAT, IN(&A, &B), OUT(&O), ARGS(a_int(2)));
    ERR(RGPU_ERR_SHAPE, RGPU_OP_CAT, IN(&A, &H), OUT(&O), ARGS(a_int(0)));
    float s0 = 1;
    rgpu_view S0 = view(&s0, RGPU_F32, 0, NULL, NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_CAT, IN(&S0, &S0), OUT(&O), ARGS(a_int(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_CAT, IN(&A, NULL), OUT(&O), ARGS(a_int(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_CAT, IN(&A, &B), OUT(&O), ARGS(a_bool(0)));
}
END_TEST

START_TEST(test_pad)
{
    float x[6], o[12];
    fill_seq(x, 6, 0, 1);
    rgpu_view X = view(x, RGPU_F32, 2, SZ(2, 3), NULL), O = view(o, RGPU_F32, 2, SZ(2, 6), NULL);
    const int64_t p1[4] = { 1, 2, -1, 1 };
    OK(RGPU_OP_CONSTANT_PAD_ND, IN(&X), OUT(&O), ARGS(a_ints_n(p1, 4), a_flt(7.5)));
    EXPECT(&O, 7.5, 3.0, 4.0, 5.0, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5, 7.5);
    /* int64, pad only the last dim, transposed input */
    int64_t y[4] = { 0, 2, 1, 3 }, yo[6];
    rgpu_view Y = view(y, RGPU_I64, 2, SZ(2, 2), SZ(1, 2)), YO = view(yo, RGPU_I64, 2, SZ(2, 3), NULL);
    const int64_t p2[2] = { 0, 1 };
    OK(RGPU_OP_CONSTANT_PAD_ND, IN(&Y), OUT(&YO), ARGS(a_ints_n(p2, 2), a_int(-3)));
    EXPECT(&YO, 0, 1, -3, 2, 3, -3);
    /* value NONE = 0; crop everything on one dim -> empty */
    rgpu_view O0 = view(o, RGPU_F32, 2, SZ(2, 5), NULL);
    const int64_t p3[2] = { 1, 1 };
    OK(RGPU_OP_CONSTANT_PAD_ND, IN(&X), OUT(&O0), ARGS(a_ints_n(p3, 2), a_none()));
    EXPECT(&O0, 0, 0, 1, 2, 0, 0, 3, 4, 5, 0);
    const int64_t p4[2] = { -2, -1 };
    rgpu_view OE = view(o, RGPU_F32, 2, SZ(2, 0), NULL);
    OK(RGPU_OP_CONSTANT_PAD_ND, IN(&X), OUT(&OE), ARGS(a_ints_n(p4, 2), a_flt(1)));
    /* pad entirely outside the input: all value */
    const int64_t p5[2] = { -3, 2 };
    rgpu_view O2 = view(o, RGPU_F32, 2, SZ(2, 2), NULL);
    OK(RGPU_OP_CONSTANT_PAD_ND, IN(&X), OUT(&O2), ARGS(a_ints_n(p5, 2), a_flt(4)));
    EXPECT(&O2, 4, 4, 4, 4);
    /* errors */
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_CONSTANT_PAD_ND, IN(&X), OUT(&O), ARGS(a_ints_n(p1, 3), a_flt(0)));
    const int64_t p6[6] = { 0, 0, 0, 0, 1, 1 };
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_CONSTANT_PAD_ND, IN(&X), OUT(&O), ARGS(a_ints_n(p6, 6), a_flt(0)));
    const int64_t p7[2] = { -3, -1 };
    ERR(RGPU_ERR_SHAPE, RGPU_OP_CONSTANT_PAD_ND, IN(&X), OUT(&O), ARGS(a_ints_n(p7, 2), a_flt(0)));
    ERR(RGPU_ERR_SHAPE, RGPU_OP_CONSTANT_PAD_ND, IN(&X), OUT(&O), ARGS(a_ints_n(p3, 2), a_flt(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_CONSTANT_PAD_ND, IN(&X), OUT(&O), ARGS(a_int(1), a_flt(0)));
    const int64_t p8[2] = { INT64_MAX, 0 };
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_CONSTANT_PAD_ND, IN(&X), OUT(&O), ARGS(a_ints_n(p8, 2), a_flt(0)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * Random ops */

#define SEED 0x0123456789abcdefull
#define OFFS 0x42ull

START_TEST(test_uniform)
{
    enum { N = 4000 };
    static float f[N];
    rgpu_view F = view(f, RGPU_F32, 1, SZ(N), NULL);
    OK(RGPU_OP_UNIFORM, NOIN, OUT(&F), ARGS(a_flt(-1.0), a_flt(3.0), a_int((int64_t)SEED), a_int(OFFS)));
    double mean = 0;
    for (int i = 0; i < N; i++) {
        uint32_t w[4];
        rgpu_philox_draw(SEED, OFFS, (uint64_t)i, w);
        float want = -1.0f + rgpu_philox_u_f32(w) * (3.0f - -1.0f);
        ck_assert_msg(f[i] == want, "element %d: %g vs %g", i, f[i], want);
        ck_assert(f[i] >= -1.0f && f[i] < 3.0f);
        mean += f[i];
    }
    mean /= N;
    ck_assert_msg(fabs(mean - 1.0) < 0.1, "mean %g", mean);
    /* layout independence: a transposed (4, 5) out holds the same logical values */
    float c[20], t[20];
    rgpu_view C = view(c, RGPU_F32, 2, SZ(4, 5), NULL), T = view(t, RGPU_F32, 2, SZ(4, 5), SZ(1, 4));
    OK(RGPU_OP_UNIFORM, NOIN, OUT(&C), ARGS(a_flt(0), a_flt(1), a_int(7), a_int(0)));
    OK(RGPU_OP_UNIFORM, NOIN, OUT(&T), ARGS(a_flt(0), a_flt(1), a_int(7), a_int(0)));
    for (int i = 0; i < 20; i++) ck_assert(at(&T, i) == c[i]);
    /* another offset gives other values */
    OK(RGPU_OP_UNIFORM, NOIN, OUT(&T), ARGS(a_flt(0), a_flt(1), a_int(7), a_int(1)));
    int same = 0;
    for (int i = 0; i < 20; i++) same += at(&T, i) == c[i];
    ck_assert(same < 3);
    /* f64 and bf16 */
    double d[8];
    rgpu_view D = view(d, RGPU_F64, 1, SZ(8), NULL);
    OK(RGPU_OP_UNIFORM, NOIN, OUT(&D), ARGS(a_flt(2), a_flt(4), a_int(-5), a_int(3)));
    for (int i = 0; i < 8; i++) {
        uint32_t w[4];
        rgpu_philox_draw((uint64_t)-5, 3, (uint64_t)i, w);
        ck_assert(d[i] == 2.0 + rgpu_philox_u_f64(w) * 2.0);
    }
    uint16_t b[8];
    rgpu_view Bv = view(b, RGPU_BF16, 1, SZ(8), NULL);
    OK(RGPU_OP_UNIFORM, NOIN, OUT(&Bv), ARGS(a_int(0), a_int(1), a_int(1), a_int(0)));
    for (int i = 0; i < 8; i++) {
        uint32_t w[4];
        rgpu_philox_draw(1, 0, (uint64_t)i, w);
        ck_assert(b[i] == rgpu_float_to_bf16(rgpu_philox_u_f32(w)));
    }
    rgpu_view Z = view(f, RGPU_F32, 2, SZ(0, 3), NULL);
    OK(RGPU_OP_UNIFORM, NOIN, OUT(&Z), ARGS(a_flt(0), a_flt(1), a_int(1), a_int(0)));
    /* errors */
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_UNIFORM, NOIN, OUT(&F), ARGS(a_flt(1), a_flt(0), a_int(1), a_int(0)));
    int64_t li[2];
    rgpu_view L = view(li, RGPU_I64, 1, SZ(2), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_UNIFORM, NOIN, OUT(&L), ARGS(a_flt(0), a_flt(1), a_int(1), a_int(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_UNIFORM, NOIN, OUT(&F), ARGS(a_flt(0), a_flt(1), a_flt(1), a_int(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_UNIFORM, NOIN, OUT(&F), ARGS(a_flt(0), a_flt(1), a_int(1)));
    uint16_t hh[2];
    rgpu_view HH = view(hh, RGPU_F16, 1, SZ(2), NULL);
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_UNIFORM, NOIN, OUT(&HH), ARGS(a_flt(-1e5), a_flt(1e5), a_int(1), a_int(0)));
    ERR(RGPU_ERR_ARITY, RGPU_OP_UNIFORM, IN(&F), OUT(&F), ARGS(a_flt(0), a_flt(1), a_int(1), a_int(0)));
}
END_TEST

START_TEST(test_normal)
{
    enum { N = 20000 };
    static float f[N];
    rgpu_view F = view(f, RGPU_F32, 1, SZ(N), NULL);
    OK(RGPU_OP_NORMAL, NOIN, OUT(&F), ARGS(a_flt(2.0), a_flt(0.5), a_int(123), a_int(0)));
    double s = 0, s2 = 0;
    for (int i = 0; i < N; i++) { s += f[i]; s2 += (double)f[i] * f[i]; }
    double mean = s / N, var = s2 / N - mean * mean;
    ck_assert_msg(fabs(mean - 2.0) < 0.02 && fabs(sqrt(var) - 0.5) < 0.02, "mean %g std %g", mean, sqrt(var));
    for (int i = 0; i < 16; i++) {
        uint32_t w[4];
        rgpu_philox_draw(123, 0, (uint64_t)i, w);
        double z = sqrt(-2.0 * log(rgpu_philox_bm_u1(w))) * cos(2.0 * 3.14159265358979323846 * rgpu_philox_bm_u2(w));
        ck_assert(f[i] == (float)(2.0 + 0.5 * z));
    }
    double d[4];
    rgpu_view D = view(d, RGPU_F64, 2, SZ(2, 2), SZ(1, 2));
    OK(RGPU_OP_NORMAL, NOIN, OUT(&D), ARGS(a_flt(0), a_flt(0), a_int(1), a_int(0)));
    for (int i = 0; i < 4; i++) ck_assert(d[i] == 0.0);
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_NORMAL, NOIN, OUT(&F), ARGS(a_flt(0), a_flt(-1), a_int(1), a_int(0)));
    int32_t li[2];
    rgpu_view L = view(li, RGPU_I32, 1, SZ(2), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_NORMAL, NOIN, OUT(&L), ARGS(a_flt(0), a_flt(1), a_int(1), a_int(0)));
}
END_TEST

START_TEST(test_bernoulli)
{
    enum { R = 2000 };
    static float o[R * 3];
    float p[3] = { 0.0f, 1.0f, 0.5f };
    rgpu_view P = view(p, RGPU_F32, 1, SZ(3), NULL), O = view(o, RGPU_F32, 2, SZ(R, 3), NULL);
    OK(RGPU_OP_BERNOULLI, IN(&P), OUT(&O), ARGS(a_none(), a_int(99), a_int(5)));
    int ones = 0;
    for (int r = 0; r < R; r++) {
        ck_assert(o[r * 3] == 0.0f && o[r * 3 + 1] == 1.0f);
        uint32_t w[4];
        rgpu_philox_draw(99, 5, (uint64_t)(r * 3 + 2), w);
        ck_assert(o[r * 3 + 2] == (rgpu_philox_u_f64(w) < 0.5 ? 1.0f : 0.0f));
        ones += o[r * 3 + 2] == 1.0f;
    }
    ck_assert_msg(abs(ones - R / 2) < 150, "ones %d", ones);
    /* scalar p into an int64 out (bernoulli_) */
    int64_t li[1000];
    rgpu_view L = view(li, RGPU_I64, 1, SZ(1000), NULL);
    OK(RGPU_OP_BERNOULLI, IN(NULL), OUT(&L), ARGS(a_flt(0.25), a_int(3), a_int(0)));
    int n1 = 0;
    for (int i = 0; i < 1000; i++) { ck_assert(li[i] == 0 || li[i] == 1); n1 += (int)li[i]; }
    ck_assert_msg(n1 > 200 && n1 < 300, "ones %d", n1);
    /* errors */
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_BERNOULLI, IN(NULL), OUT(&L), ARGS(a_flt(1.5), a_int(3), a_int(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_BERNOULLI, IN(NULL), OUT(&L), ARGS(a_none(), a_int(3), a_int(0)));
    p[0] = 2.0f;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_BERNOULLI, IN(&P), OUT(&O), ARGS(a_none(), a_int(3), a_int(0)));
    p[0] = NAN;
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_BERNOULLI, IN(&P), OUT(&O), ARGS(a_none(), a_int(3), a_int(0)));
    rgpu_view PI = view(li, RGPU_I64, 1, SZ(3), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_BERNOULLI, IN(&PI), OUT(&O), ARGS(a_none(), a_int(3), a_int(0)));
    rgpu_view P2 = view(p, RGPU_F32, 1, SZ(2), NULL);
    p[0] = 0;
    ERR(RGPU_ERR_SHAPE, RGPU_OP_BERNOULLI, IN(&P2), OUT(&O), ARGS(a_none(), a_int(3), a_int(0)));
}
END_TEST

START_TEST(test_random)
{
    int64_t o[500];
    rgpu_view O = view(o, RGPU_I64, 1, SZ(500), NULL);
    OK(RGPU_OP_RANDOM, NOIN, OUT(&O), ARGS(a_int(3), a_int(10), a_int(11), a_int(2)));
    int seen[7] = { 0 };
    for (int i = 0; i < 500; i++) {
        uint32_t w[4];
        rgpu_philox_draw(11, 2, (uint64_t)i, w);
        ck_assert(o[i] == 3 + (int64_t)(rgpu_philox_r64(w) % 7));
        seen[o[i] - 3] = 1;
    }
    for (int k = 0; k < 7; k++) ck_assert(seen[k]);
    /* to NONE on f16: [from, 2^11] */
    uint16_t h[300];
    rgpu_view H = view(h, RGPU_F16, 1, SZ(300), NULL);
    OK(RGPU_OP_RANDOM, NOIN, OUT(&H), ARGS(a_int(0), a_none(), a_int(4), a_int(0)));
    for (int i = 0; i < 300; i++) {
        uint32_t w[4];
        rgpu_philox_draw(4, 0, (uint64_t)i, w);
        float want = (float)(rgpu_philox_r64(w) % 2049);
        ck_assert(h[i] == rgpu_float_to_half(want));
    }
    /* bool NONE: 0/1; i64 full range from INT64_MIN */
    uint8_t bl[64];
    rgpu_view BL = view(bl, RGPU_BOOL, 1, SZ(64), NULL);
    OK(RGPU_OP_RANDOM, NOIN, OUT(&BL), ARGS(a_int(0), a_none(), a_int(4), a_int(0)));
    int t = 0;
    for (int i = 0; i < 64; i++) { ck_assert(bl[i] <= 1); t += bl[i]; }
    ck_assert(t > 10 && t < 54);
    OK(RGPU_OP_RANDOM, NOIN, OUT(&O), ARGS(a_int(INT64_MIN), a_none(), a_int(11), a_int(2)));
    for (int i = 0; i < 4; i++) {
        uint32_t w[4];
        rgpu_philox_draw(11, 2, (uint64_t)i, w);
        ck_assert(o[i] == (int64_t)((uint64_t)INT64_MIN + rgpu_philox_r64(w)));
    }
    /* int8 [-128, 128) */
    int8_t c[200];
    rgpu_view C = view(c, RGPU_I8, 1, SZ(200), NULL);
    OK(RGPU_OP_RANDOM, NOIN, OUT(&C), ARGS(a_int(-128), a_int(128), a_int(1), a_int(1)));
    /* errors */
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_RANDOM, NOIN, OUT(&O), ARGS(a_int(5), a_int(5), a_int(1), a_int(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_RANDOM, NOIN, OUT(&C), ARGS(a_int(0), a_int(300), a_int(1), a_int(0)));
    ck_assert(strstr(g_err, "to - 1 is out of bounds") != NULL);
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_RANDOM, NOIN, OUT(&C), ARGS(a_int(-200), a_int(3), a_int(1), a_int(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_RANDOM, NOIN, OUT(&BL), ARGS(a_int(0), a_int(3), a_int(1), a_int(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_RANDOM, NOIN, OUT(&C), ARGS(a_int(200), a_none(), a_int(1), a_int(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_RANDOM, NOIN, OUT(&C), ARGS(a_flt(0), a_int(3), a_int(1), a_int(0)));
}
END_TEST

static int cmp_key(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

START_TEST(test_randperm)
{
    enum { N = 257 };
    int64_t o[N];
    rgpu_view O = view(o, RGPU_I64, 1, SZ(N), NULL);
    OK(RGPU_OP_RANDPERM, NOIN, OUT(&O), ARGS(a_int(N), a_int(77), a_int(9)));
    uint64_t keys[N][2];
    for (int i = 0; i < N; i++) {
        uint32_t w[4];
        rgpu_philox_draw(77, 9, (uint64_t)i, w);
        keys[i][0] = rgpu_philox_r64(w);
        keys[i][1] = (uint64_t)i;
    }
    qsort(keys, N, sizeof keys[0], cmp_key);
    int fixed = 0;
    for (int j = 0; j < N; j++) { ck_assert(o[j] == (int64_t)keys[j][1]); fixed += o[j] == j; }
    ck_assert(fixed < 10);
    /* float out, strided */
    float f[16];
    rgpu_view F = view(f, RGPU_F32, 1, SZ(8), SZ(2));
    OK(RGPU_OP_RANDPERM, NOIN, OUT(&F), ARGS(a_int(8), a_int(77), a_int(9)));
    int mask = 0;
    for (int j = 0; j < 8; j++) mask |= 1 << (int)f[2 * j];
    ck_assert(mask == 0xff);
    rgpu_view E = view(o, RGPU_I64, 1, SZ(0), NULL);
    OK(RGPU_OP_RANDPERM, NOIN, OUT(&E), ARGS(a_int(0), a_int(77), a_int(9)));
    /* errors */
    ERR(RGPU_ERR_SHAPE, RGPU_OP_RANDPERM, NOIN, OUT(&O), ARGS(a_int(N + 1), a_int(77), a_int(9)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_RANDPERM, NOIN, OUT(&E), ARGS(a_int(-1), a_int(77), a_int(9)));
    uint16_t h[1];
    rgpu_view H = view(h, RGPU_F16, 1, SZ(3000), NULL);
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_RANDPERM, NOIN, OUT(&H), ARGS(a_int(3000), a_int(77), a_int(9)));
    int8_t c[1];
    rgpu_view C = view(c, RGPU_I8, 1, SZ(300), NULL);
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_RANDPERM, NOIN, OUT(&C), ARGS(a_int(300), a_int(77), a_int(9)));
}
END_TEST

START_TEST(test_dropout)
{
    enum { N = 1000 };
    static float x[N], y[N];
    static uint8_t m[N];
    fill_seq(x, N, -3, 0.01f);
    rgpu_view X = view(x, RGPU_F32, 2, SZ(100, 10), NULL), Y = view(y, RGPU_F32, 2, SZ(100, 10), NULL);
    rgpu_view M = view(m, RGPU_BOOL, 2, SZ(100, 10), NULL);
    OK(RGPU_OP_NATIVE_DROPOUT, IN(&X), OUT(&Y, &M), ARGS(a_flt(0.3), a_bool(1), a_int(5), a_int(6)));
    int kept = 0;
    float scale = (float)(1.0 / (1.0 - 0.3));
    for (int i = 0; i < N; i++) {
        uint32_t w[4];
        rgpu_philox_draw(5, 6, (uint64_t)i, w);
        bool keep = rgpu_philox_u_f64(w) < 1.0 - 0.3;
        ck_assert(m[i] == keep);
        ck_assert(y[i] == (keep ? x[i] * scale : 0.0f * scale));
        kept += keep;
    }
    ck_assert_msg(abs(kept - 700) < 60, "kept %d", kept);
    /* eval: copy, mask all true; train NONE means train */
    OK(RGPU_OP_NATIVE_DROPOUT, IN(&X), OUT(&Y, &M), ARGS(a_flt(0.3), a_bool(0), a_int(5), a_int(6)));
    for (int i = 0; i < N; i++) ck_assert(y[i] == x[i] && m[i] == 1);
    OK(RGPU_OP_NATIVE_DROPOUT, IN(&X), OUT(&Y, &M), ARGS(a_flt(1.0), a_none(), a_int(5), a_int(6)));
    for (int i = 0; i < N; i++) ck_assert(y[i] == 0.0f && m[i] == 0);
    OK(RGPU_OP_NATIVE_DROPOUT, IN(&X), OUT(&Y, &M), ARGS(a_flt(0.0), a_bool(1), a_int(5), a_int(6)));
    for (int i = 0; i < N; i++) ck_assert(y[i] == x[i] && m[i] == 1);
    /* f16, transposed in and out, mask not wanted; logical order decides the draws */
    uint16_t h[6], hy[6];
    const float hv[6] = { 1, 2, 3, 4, 5, 6 };
    for (int i = 0; i < 6; i++) h[i] = rgpu_float_to_half(hv[i]);
    rgpu_view HT = view(h, RGPU_F16, 2, SZ(3, 2), SZ(1, 3)), HY = view(hy, RGPU_F16, 2, SZ(3, 2), SZ(1, 3));
    OK(RGPU_OP_NATIVE_DROPOUT, IN(&HT), OUT(&HY, NULL), ARGS(a_flt(0.5), a_bool(1), a_int(8), a_int(0)));
    for (int i = 0; i < 6; i++) {
        uint32_t w[4];
        rgpu_philox_draw(8, 0, (uint64_t)i, w);
        double want = rgpu_philox_u_f64(w) < 0.5 ? at(&HT, i) * 2 : 0.0;
        ck_assert(at(&HY, i) == want);
    }
    /* errors */
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_NATIVE_DROPOUT, IN(&X), OUT(&Y, &M), ARGS(a_flt(1.5), a_bool(1), a_int(5), a_int(6)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_NATIVE_DROPOUT, IN(&X), OUT(&Y, &M), ARGS(a_flt(0.5), a_bool(1), a_int(5)));
    rgpu_view M2 = view(m, RGPU_BOOL, 1, SZ(10), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_NATIVE_DROPOUT, IN(&X), OUT(&Y, &M2), ARGS(a_flt(0.5), a_bool(1), a_int(5), a_int(6)));
    rgpu_view XI = view(x, RGPU_I32, 2, SZ(100, 10), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_NATIVE_DROPOUT, IN(&XI), OUT(&Y, &M), ARGS(a_flt(0.5), a_bool(1), a_int(5), a_int(6)));
}
END_TEST

START_TEST(test_dropout_backward)
{
    float g[4] = { 1, 2, 3, 4 }, o[4];
    uint8_t m[4] = { 1, 0, 1, 1 };
    rgpu_view G = view(g, RGPU_F32, 1, SZ(4), NULL), M = view(m, RGPU_BOOL, 1, SZ(4), NULL);
    rgpu_view O = view(o, RGPU_F32, 1, SZ(4), NULL);
    OK(RGPU_OP_NATIVE_DROPOUT_BACKWARD, IN(&G, &M), OUT(&O), ARGS(a_flt(2.0)));
    EXPECT(&O, 2.0, 0.0, 6.0, 8.0);
    OK(RGPU_OP_NATIVE_DROPOUT_BACKWARD, IN(&G, &M), OUT(&G), ARGS(a_flt(1.0 / 0.7)));   /* in place */
    ck_assert(g[0] == 1.0f * (float)(1.0 / 0.7) && g[1] == 0.0f);
    /* bf16 with a broadcast mask */
    uint16_t b[4], bo[4];
    for (int i = 0; i < 4; i++) b[i] = rgpu_float_to_bf16((float)(i + 1));
    uint8_t bm[2] = { 0, 1 };
    rgpu_view Bv = view(b, RGPU_BF16, 2, SZ(2, 2), NULL), BM = view(bm, RGPU_BOOL, 1, SZ(2), NULL);
    rgpu_view BO = view(bo, RGPU_BF16, 2, SZ(2, 2), NULL);
    OK(RGPU_OP_NATIVE_DROPOUT_BACKWARD, IN(&Bv, &BM), OUT(&BO), ARGS(a_flt(3.0)));
    EXPECT(&BO, 0.0, 6.0, 0.0, 12.0);
    int32_t gi[4];
    rgpu_view GI = view(gi, RGPU_I32, 1, SZ(4), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_NATIVE_DROPOUT_BACKWARD, IN(&GI, &M), OUT(&GI), ARGS(a_flt(2.0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_NATIVE_DROPOUT_BACKWARD, IN(&G, &M), OUT(&O), ARGS(a_ints_n(NULL, 0)));
    rgpu_view M3 = view(m, RGPU_BOOL, 1, SZ(3), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_NATIVE_DROPOUT_BACKWARD, IN(&G, &M3), OUT(&O), ARGS(a_flt(2.0)));
    /* ATen's masks are bool: a float mask is refused, with ATen's words */
    float fm[4] = { 1, 0, 1, 1 };
    rgpu_view FM = view(fm, RGPU_F32, 1, SZ(4), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_NATIVE_DROPOUT_BACKWARD, IN(&G, &FM), OUT(&O), ARGS(a_flt(2.0)));
    ck_assert_msg(strstr(g_err, "Mask should be Bool Scalar Type") != NULL, "%s", g_err);
}
END_TEST

/* op_dropout_keep_lim: the integer keep test (the CUDA kernels') decides as
 * u_f64 < p1m (the cpu backend's) for every draw, at the edges too: k just
 * below and at the limit, p1m 0 and 1, and p1m whose scaled value is an
 * integer (1/2, 3/4) or not (0.9, 1/3). */
START_TEST(test_dropout_keep_lim)
{
    double ps[] = { 0.0, 1.0, 0.5, 0.75, 0.9, 1.0 / 3.0, 1e-17, 1.0 - 0x1p-53, 0x1p-53 };
    uint64_t st = 88172645463325252ull;
    for (size_t a = 0; a < sizeof ps / sizeof ps[0]; a++) {
        double p1m = ps[a];
        uint64_t lim = op_dropout_keep_lim(p1m);
        uint64_t ks[40];
        int nk = 0;
        for (int d = -3; d <= 3; d++) {           /* around the limit */
            int64_t k = (int64_t)lim + d;
            if (k >= 0 && k < ((int64_t)1 << 53)) ks[nk++] = (uint64_t)k;
        }
        while (nk < 40) {                          /* and anywhere */
            st ^= st << 13; st ^= st >> 7; st ^= st << 17;
            ks[nk++] = st >> 11;
        }
        for (int i = 0; i < nk; i++) {
            uint32_t w[4] = { (uint32_t)((ks[i] << 11) >> 32), (uint32_t)(ks[i] << 11), 0, 0 };
            bool by_double = rgpu_philox_u_f64(w) < p1m, by_int = (rgpu_philox_r64(w) >> 11) < lim;
            ck_assert_msg(by_double == by_int, "p1m %.17g k %llu: %d vs %d", p1m, (unsigned long long)ks[i],
                          by_double, by_int);
        }
    }
}
END_TEST

/* ---------------------------------------------------------------------------
 * count_nonzero, nonzero, masked_select */

START_TEST(test_nonzero)
{
    float z[6] = { 0.0f, NAN, 0.0f, 1.0f, 0.0f, -0.0f };
    int64_t cnt = -1;
    rgpu_view Z = view(z, RGPU_F32, 2, SZ(2, 3), NULL), C = view(&cnt, RGPU_I64, 0, NULL, NULL);
    OK(RGPU_OP_COUNT_NONZERO, IN(&Z), OUT(&C), NOARGS);
    ck_assert_int_eq(cnt, 2);
    int64_t nz[4];
    rgpu_view NZ = view(nz, RGPU_I64, 2, SZ(2, 2), NULL);
    OK(RGPU_OP_NONZERO, IN(&Z), OUT(&NZ), NOARGS);
    EXPECT(&NZ, 0, 1, 1, 0);
    /* transposed input: logical (3, 2) order */
    rgpu_view ZT = view(z, RGPU_F32, 2, SZ(3, 2), SZ(1, 3));
    OK(RGPU_OP_NONZERO, IN(&ZT), OUT(&NZ), NOARGS);
    EXPECT(&NZ, 0, 1, 1, 0);
    /* int32 out, transposed out */
    int32_t nz32[4];
    rgpu_view NZT = view(nz32, RGPU_I32, 2, SZ(2, 2), SZ(1, 2));
    OK(RGPU_OP_NONZERO, IN(&Z), OUT(&NZT), NOARGS);
    EXPECT(&NZT, 0, 1, 1, 0);
    /* empty and 0-d inputs */
    rgpu_view ZE = view(z, RGPU_F32, 2, SZ(0, 3), NULL), NE = view(nz, RGPU_I64, 2, SZ(0, 2), NULL);
    OK(RGPU_OP_COUNT_NONZERO, IN(&ZE), OUT(&C), NOARGS);
    ck_assert_int_eq(cnt, 0);
    OK(RGPU_OP_NONZERO, IN(&ZE), OUT(&NE), NOARGS);
    int32_t s0 = 5;
    rgpu_view S0 = view(&s0, RGPU_I32, 0, NULL, NULL), N10 = view(nz, RGPU_I64, 2, SZ(1, 0), NULL);
    OK(RGPU_OP_NONZERO, IN(&S0), OUT(&N10), NOARGS);
    /* masked_select, strided self */
    float x[6], o[3];
    fill_seq(x, 6, 0, 1);
    uint8_t mk[6] = { 1, 0, 1, 0, 0, 1 };
    rgpu_view X = view(x, RGPU_F32, 2, SZ(2, 3), NULL), MK = view(mk, RGPU_BOOL, 2, SZ(2, 3), NULL);
    rgpu_view O = view(o, RGPU_F32, 1, SZ(3), NULL);
    OK(RGPU_OP_MASKED_SELECT, IN(&X, &MK), OUT(&O), NOARGS);
    EXPECT(&O, 0.0, 2.0, 5.0);
    rgpu_view XT = view(x, RGPU_F32, 2, SZ(3, 2), SZ(1, 3)), MKT = view(mk, RGPU_BOOL, 2, SZ(3, 2), NULL);
    OK(RGPU_OP_MASKED_SELECT, IN(&XT, &MKT), OUT(&O), NOARGS);
    EXPECT(&O, 0.0, 1.0, 5.0);
    /* expanded (stride 0) mask */
    uint8_t row[3] = { 0, 1, 1 };
    float o4[4];
    rgpu_view ME = view(row, RGPU_BOOL, 2, SZ(2, 3), SZ(0, 1)), O4 = view(o4, RGPU_F32, 1, SZ(4), NULL);
    OK(RGPU_OP_MASKED_SELECT, IN(&X, &ME), OUT(&O4), NOARGS);
    EXPECT(&O4, 1, 2, 4, 5);
    /* errors */
    ERR(RGPU_ERR_SHAPE, RGPU_OP_NONZERO, IN(&Z), OUT(&NE), NOARGS);
    rgpu_view NF = view(nz, RGPU_F32, 2, SZ(2, 2), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_NONZERO, IN(&Z), OUT(&NF), NOARGS);
    int32_t c32;
    rgpu_view C32 = view(&c32, RGPU_I32, 0, NULL, NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_COUNT_NONZERO, IN(&Z), OUT(&C32), NOARGS);
    ERR(RGPU_ERR_ARITY, RGPU_OP_COUNT_NONZERO, IN(&Z), NULL, 0, NOARGS);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_MASKED_SELECT, IN(&X, &MK), OUT(&O4), NOARGS);
    rgpu_view MF = view(x, RGPU_F32, 2, SZ(2, 3), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_MASKED_SELECT, IN(&X, &MF), OUT(&O), NOARGS);
    rgpu_view M1 = view(mk, RGPU_BOOL, 1, SZ(3), NULL);
    ERR(RGPU_ERR_SHAPE, RGPU_OP_MASKED_SELECT, IN(&X, &M1), OUT(&O), NOARGS);
}
END_TEST

/* ---------------------------------------------------------------------------
 * count_unique, _unique2 */

START_TEST(test_unique)
{
    /* torch._unique2([3, nan, 1, nan, 3, -0., 0., 2.], True, True, True):
     * values [-0., 1., 2., 3., nan, nan], inverse [3, 4, 1, 5, 3, 0, 0, 2], counts [2, 1, 1, 2, 1, 1] */
    float x[8] = { 3, NAN, 1, NAN, 3, -0.0f, 0.0f, 2 };
    int64_t cnt = 0;
    rgpu_view X = view(x, RGPU_F32, 1, SZ(8), NULL), C = view(&cnt, RGPU_I64, 0, NULL, NULL);
    OK(RGPU_OP_COUNT_UNIQUE, IN(&X), OUT(&C), NOARGS);
    ck_assert_int_eq(cnt, 6);
    float v[6];
    int64_t inv[8], cn[6];
    rgpu_view V = view(v, RGPU_F32, 1, SZ(6), NULL), INV = view(inv, RGPU_I64, 1, SZ(8), NULL);
    rgpu_view CN = view(cn, RGPU_I64, 1, SZ(6), NULL);
    OK(RGPU_OP_UNIQUE, IN(&X), OUT(&V, &INV, &CN), ARGS(a_bool(1), a_bool(1), a_bool(1)));
    EXPECT(&V, -0.0, 1, 2, 3, NAN, NAN);
    ck_assert(signbit(v[0]));
    EXPECT(&INV, 3, 4, 1, 5, 3, 0, 0, 2);
    EXPECT(&CN, 2, 1, 1, 2, 1, 1);
    /* [0., -0., 1.]: the first of equal values gives the bits */
    float y[3] = { 0.0f, -0.0f, 1.0f }, yv[2];
    rgpu_view Y = view(y, RGPU_F32, 1, SZ(3), NULL), YV = view(yv, RGPU_F32, 1, SZ(2), NULL);
    OK(RGPU_OP_UNIQUE, IN(&Y), OUT(&YV, NULL, NULL), ARGS(a_bool(0), a_bool(0), a_bool(0)));
    ck_assert(yv[0] == 0.0f && !signbit(yv[0]) && yv[1] == 1.0f);
    /* int64 (2, 4) transposed input: logical [[5, 1], [3, 3], ...] */
    int64_t q[8] = { 5, 3, 5, 1, 3, 9, 0, 5 }, qv[5], qinv[8], qc[5];
    /* torch._unique2(tensor([5,3,5,1,3,9,0,5]), False, True, True):
     * values [0, 1, 3, 5, 9], inverse [3, 2, 3, 1, 2, 4, 0, 3], counts [1, 1, 2, 3, 1] */
    rgpu_view Q = view(q, RGPU_I64, 2, SZ(2, 4), NULL), QV = view(qv, RGPU_I64, 1, SZ(5), NULL);
    rgpu_view QINV = view(qinv, RGPU_I64, 2, SZ(2, 4), SZ(1, 2)), QC = view(qc, RGPU_I64, 1, SZ(5), NULL);
    OK(RGPU_OP_UNIQUE, IN(&Q), OUT(&QV, &QINV, &QC), ARGS(a_bool(0), a_bool(1), a_bool(1)));
    EXPECT(&QV, 0, 1, 3, 5, 9);
    EXPECT(&QINV, 3, 2, 3, 1, 2, 4, 0, 3);
    EXPECT(&QC, 1, 1, 2, 3, 1);
    /* bool; inverse placeholder ignored when return_inverse is false */
    uint8_t b[3] = { 1, 0, 1 }, bv[2];
    int64_t bc[2], ph;
    rgpu_view Bv = view(b, RGPU_BOOL, 1, SZ(3), NULL), BV = view(bv, RGPU_BOOL, 1, SZ(2), NULL);
    rgpu_view BC = view(bc, RGPU_I64, 1, SZ(2), NULL), PH = view(&ph, RGPU_I64, 1, SZ(0), NULL);
    OK(RGPU_OP_UNIQUE, IN(&Bv), OUT(&BV, &PH, &BC), ARGS(a_bool(1), a_bool(0), a_bool(1)));
    EXPECT(&BV, 0, 1);
    EXPECT(&BC, 1, 2);
    /* empty input */
    rgpu_view E = view(x, RGPU_F32, 1, SZ(0), NULL), EV = view(v, RGPU_F32, 1, SZ(0), NULL);
    OK(RGPU_OP_COUNT_UNIQUE, IN(&E), OUT(&C), NOARGS);
    ck_assert_int_eq(cnt, 0);
    OK(RGPU_OP_UNIQUE, IN(&E), OUT(&EV, NULL, NULL), ARGS(a_bool(1), a_bool(0), a_bool(0)));
    /* errors */
    ERR(RGPU_ERR_SHAPE, RGPU_OP_UNIQUE, IN(&X), OUT(&YV, NULL, NULL), ARGS(a_bool(1), a_bool(0), a_bool(0)));
    ERR(RGPU_ERR_SHAPE, RGPU_OP_UNIQUE, IN(&X), OUT(&V, &CN, NULL), ARGS(a_bool(1), a_bool(1), a_bool(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_UNIQUE, IN(&X), OUT(&V, NULL, NULL), ARGS(a_bool(1), a_flt(0), a_bool(0)));
    rgpu_view V64 = view(v, RGPU_F64, 1, SZ(6), NULL);
    ERR(RGPU_ERR_UNSUPPORTED, RGPU_OP_UNIQUE, IN(&X), OUT(&V64, NULL, NULL), ARGS(a_bool(1), a_bool(0), a_bool(0)));
    ERR(RGPU_ERR_BAD_ARG, RGPU_OP_UNIQUE, IN(&X), OUT(NULL, NULL, NULL), ARGS(a_bool(1), a_bool(0), a_bool(0)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * Family plumbing */

START_TEST(test_family)
{
    static const int ops[] = {
        RGPU_OP_EMBEDDING, RGPU_OP_EMBEDDING_BACKWARD, RGPU_OP_GATHER, RGPU_OP_SCATTER, RGPU_OP_SCATTER_ADD,
        RGPU_OP_INDEX_SELECT, RGPU_OP_INDEX_ADD, RGPU_OP_INDEX, RGPU_OP_INDEX_PUT, RGPU_OP_CAT,
        RGPU_OP_CONSTANT_PAD_ND, RGPU_OP_UNIFORM, RGPU_OP_NORMAL, RGPU_OP_BERNOULLI, RGPU_OP_RANDOM,
        RGPU_OP_RANDPERM, RGPU_OP_NATIVE_DROPOUT, RGPU_OP_NATIVE_DROPOUT_BACKWARD, RGPU_OP_COUNT_NONZERO,
        RGPU_OP_NONZERO, RGPU_OP_MASKED_SELECT, RGPU_OP_COUNT_UNIQUE, RGPU_OP_UNIQUE,
        RGPU_OP_SCATTER_REDUCE,
    };
    int owned = 0;
    for (int op = 0; op < RGPU_OP_COUNT; op++) owned += family_owns(op);
    ck_assert_int_eq(owned, (int)COUNT_OF(ops));
    for (size_t i = 0; i < COUNT_OF(ops); i++) {
        ck_assert(family_owns(ops[i]));
        ck_assert(rgpu_cpu_supports(ops[i]));
    }
    ck_assert(!family_owns(RGPU_OP_ADD_TENSOR));
    rgpu_exec e;
    memset(&e, 0, sizeof e);
    e.op = RGPU_OP_ADD_TENSOR;
    g_err[0] = '\0';
    ck_assert_int_eq(rgpu_cpu_index_exec(&e, g_err, sizeof g_err), RGPU_ERR_UNSUPPORTED);
    ck_assert(strstr(g_err, "add.Tensor") != NULL);
    /* a view with a negative stride or bad dtype is refused */
    float f[4];
    int64_t ix[1] = { 0 };
    rgpu_view S = view(f, RGPU_F32, 1, SZ(4), NULL), I = view(ix, RGPU_I64, 1, SZ(1), NULL), O = view(f, RGPU_F32, 1, SZ(1), NULL);
    S.strides[0] = -1;
    ERR(RGPU_ERR_SHAPE, RGPU_OP_INDEX_SELECT, IN(&S, &I), OUT(&O), ARGS(a_int(0)));
    S.strides[0] = 1;
    S.dtype = 77;
    ERR(RGPU_ERR_BAD_DTYPE, RGPU_OP_INDEX_SELECT, IN(&S, &I), OUT(&O), ARGS(a_int(0)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * main */

int main(void)
{
    Suite *s = suite_create("cpu_index");
    TCase *tc = add_tcase(s, "core", 60, NULL, NULL);
    ADD_TESTS(tc, test_philox_kat, test_embedding, test_embedding_backward, test_gather, test_scatter,
                  test_scatter_reduce,
                  test_index_select, test_index_add, test_index, test_index_put, test_cat, test_pad,
                  test_uniform, test_normal, test_bernoulli, test_random, test_randperm, test_dropout,
                  test_dropout_backward, test_dropout_keep_lim, test_nonzero, test_unique, test_family);

    return run_suite(s);
}
