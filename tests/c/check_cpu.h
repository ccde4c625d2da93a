/* check_cpu.h — helpers the known-value suites of the CPU reference backend
 * (tests/c/test_cpu_*.c) share: views over caller buffers, scalar and INTS
 * arguments, guard bytes, tensors in fresh guarded storage, and a runner that
 * executes one op with ops.def's arity through rgpu_cpu_exec.
 *
 * Static inline, one program per test file: a suite includes it once and
 * uses what it needs. Tensors made by mk/mk_s live until teardown() (use it
 * as the TCase's checked-fixture teardown). */
#ifndef RGPU_CHECK_CPU_H
#define RGPU_CHECK_CPU_H

#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_internal.h"
#include "op/half.h"
#include "check_util.h"

#define SZ(...) ((const int64_t[]){__VA_ARGS__})
#define GUARD 0xA5

/* the last error message of rgpu_cpu_exec (run_op clears it first) */
static char g_err[256];

/* ---------------------------------------------------------------------------
 * Views over caller buffers */

/* sizes and strides (NULL: contiguous) into v; returns the span of its
 * elements, in elements (0 when it has none) */
static inline int64_t set_shape(rgpu_view *v, int nd, const int64_t *sizes, const int64_t *strides)
{
    int64_t s = 1, maxoff = 0;
    bool empty = false;
    v->ndim = nd;
    for (int d = nd - 1; d >= 0; d--) {
        v->sizes[d] = sizes[d];
        v->strides[d] = strides ? strides[d] : s;
        s *= sizes[d];
        if (sizes[d] == 0) empty = true;
        else maxoff += (sizes[d] - 1) * v->strides[d];
    }
    return empty ? 0 : maxoff + 1;
}

/* A view over data; strides NULL means contiguous. */
static inline rgpu_view view(void *data, int dtype, int ndim, const int64_t *sizes, const int64_t *strides)
{
    rgpu_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = dtype;
    set_shape(&v, ndim, sizes, strides);
    return v;
}

/* n bytes after (or before) a buffer still hold GUARD */
static inline void check_guard(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) ck_assert_msg(b[i] == GUARD, "guard byte %zu overwritten", i);
}

/* ---------------------------------------------------------------------------
 * Arguments */

static inline rgpu_arg a_int(int64_t i) { rgpu_arg a; memset(&a, 0, sizeof a); a.kind = RGPU_ARG_INT; a.v.i = i; return a; }
static inline rgpu_arg a_flt(double f) { rgpu_arg a; memset(&a, 0, sizeof a); a.kind = RGPU_ARG_FLOAT; a.v.f = f; return a; }
static inline rgpu_arg a_bool(int b) { rgpu_arg a; memset(&a, 0, sizeof a); a.kind = RGPU_ARG_BOOL; a.v.i = b != 0; return a; }
static inline rgpu_arg a_none(void) { rgpu_arg a; memset(&a, 0, sizeof a); a.kind = RGPU_ARG_NONE; return a; }

/* INTS arg of v[0..n) (at most A_INTS_MAX are stored); the bytes live in a
 * ring of static buffers, so the last 64 stay valid. */
#define A_INTS_MAX 64
static inline rgpu_arg a_ints_n(const int64_t *v, uint32_t n)
{
    static uint8_t bufs[64][8 * A_INTS_MAX];
    static int next;
    uint8_t *buf = bufs[next++ % 64];
    rgpu_arg a;
    memset(&a, 0, sizeof a);
    a.kind = RGPU_ARG_INTS;
    for (uint32_t i = 0; i < n && i < A_INTS_MAX; i++) rgpu_st64(buf + 8 * i, (uint64_t)v[i]);
    a.v.ints.p = buf;
    a.v.ints.n = n;
    return a;
}
#define A_INTS(...) a_ints_n(SZ(__VA_ARGS__), (uint32_t)(sizeof(SZ(__VA_ARGS__)) / sizeof(int64_t)))
#define A_NOINTS a_ints_n(NULL, 0)

/* ---------------------------------------------------------------------------
 * Tensors in fresh storage fenced by guard bytes */

#define GUARD_N 64
#define MAXT 32

static struct { uint8_t *mem; size_t span; } g_t[MAXT];
static int g_nt;

static inline int64_t numel(const rgpu_view *v)
{
    int64_t n = 1;
    for (int d = 0; d < v->ndim; d++) n *= v->sizes[d];
    return n;
}

/* byte offset of the flat (row-major, logical) index i */
static inline int64_t offset_of(const rgpu_view *v, int64_t i)
{
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        off += (i % v->sizes[d]) * v->strides[d];
        i /= v->sizes[d];
    }
    return off * (int64_t)rgpu_dtype_size(v->dtype);
}

/* element i (logical order) of v; elements load and store with the CPU
 * backend's conversions (cpu/cpu_internal.h) */
static inline double vget(const rgpu_view *v, int64_t i) { return op_load_f64((const char *)v->data + offset_of(v, i), v->dtype); }

/* A tensor of sizes with strides (NULL: contiguous) in fresh storage fenced
 * by guard bytes; vals (logical order) or NULL (storage left as guard bytes). */
static inline rgpu_view mk_s(int dt, int nd, const int64_t *sizes, const int64_t *strides, const double *vals)
{
    rgpu_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    size_t span = (size_t)set_shape(&v, nd, sizes, strides) * rgpu_dtype_size(dt);
    ck_assert_int_lt(g_nt, MAXT);
    uint8_t *mem = malloc(span + 2 * GUARD_N);
    ck_assert_ptr_nonnull(mem);
    memset(mem, GUARD, span + 2 * GUARD_N);
    g_t[g_nt].mem = mem;
    g_t[g_nt++].span = span;
    v.data = mem + GUARD_N;
    if (vals)
        for (int64_t i = 0; i < numel(&v); i++) op_store_f64((char *)v.data + offset_of(&v, i), dt, vals[i]);
    return v;
}
static inline rgpu_view mk(int dt, int nd, const int64_t *sizes, const double *vals)
{
    return mk_s(dt, nd, sizes, NULL, vals);
}

/* the same storage seen with dims a and b swapped */
static inline rgpu_view tr(rgpu_view v, int a, int b)
{
    int64_t t = v.sizes[a]; v.sizes[a] = v.sizes[b]; v.sizes[b] = t;
    t = v.strides[a]; v.strides[a] = v.strides[b]; v.strides[b] = t;
    return v;
}

/* every tensor made by mk/mk_s still has its guard bytes */
static inline void check_guards(void)
{
    for (int k = 0; k < g_nt; k++) {
        const uint8_t *m = g_t[k].mem;
        for (size_t i = 0; i < GUARD_N; i++) {
            ck_assert_msg(m[i] == GUARD, "tensor %d: guard byte before the data overwritten", k);
            ck_assert_msg(m[GUARD_N + g_t[k].span + i] == GUARD, "tensor %d: guard byte after the data overwritten", k);
        }
    }
}

static inline void teardown(void)
{
    for (int k = 0; k < g_nt; k++) free(g_t[k].mem);
    g_nt = 0;
}

/* ---------------------------------------------------------------------------
 * Running one op */

/* Runs op with n_in inputs and n_out outputs, whatever ops.def says (the
 * arity checks use it); ins/outs arrays may hold NULLs. Checks the guard
 * bytes of the tensors made by mk/mk_s afterwards. */
static inline rgpu_status exec_op(int op, const rgpu_view *const *ins, int n_in, rgpu_view *const *outs, int n_out,
                                  const rgpu_arg *args, int nargs)
{
    rgpu_exec e;
    memset(&e, 0, sizeof e);
    e.op = op;
    e.n_in = n_in;
    e.n_out = n_out;
    for (int i = 0; i < n_in && i < RGPU_MAX_IN; i++) e.in[i] = ins[i];
    for (int i = 0; i < n_out && i < RGPU_MAX_OUT; i++) e.out[i] = outs[i];
    e.args = args;
    e.n_args = nargs;
    g_err[0] = '\0';
    rgpu_status st = rgpu_cpu_exec(&e, g_err, sizeof g_err);
    check_guards();
    return st;
}

/* Runs op with ops.def's arity. */
static inline rgpu_status run_op(int op, const rgpu_view *const *ins, rgpu_view *const *outs,
                                 const rgpu_arg *args, int nargs)
{
    return exec_op(op, ins, rgpu_op_table[op].n_in, outs, rgpu_op_table[op].n_out, args, nargs);
}

/* arrays for run_op, padded with NULL to the most an op can take */
#define INS(...) ((const rgpu_view *const[RGPU_MAX_IN]){__VA_ARGS__})
#define OUTS(...) ((rgpu_view *const[RGPU_MAX_OUT]){__VA_ARGS__})
/* an args array and its length, as two arguments */
#define ARGS(...) ((const rgpu_arg[]){__VA_ARGS__}), \
    (int)(sizeof((const rgpu_arg[]){__VA_ARGS__}) / sizeof(rgpu_arg))
#define NOARGS NULL, 0

/* status of call is RGPU_OK (else fail with g_err) */
#define ASSERT_STATUS_OK(call) do { rgpu_status st_ = (call); \
    ck_assert_msg(st_ == RGPU_OK, "status %d: %s", (int)st_, g_err); } while (0)
/* status of call is code, with an error message */
#define ASSERT_STATUS_ERR(code, call) do { rgpu_status st_ = (call); \
    ck_assert_msg(st_ == (code), "want status %d, got %d (%s)", (int)(code), (int)st_, g_err); \
    ck_assert_msg(g_err[0] != '\0', "no error message"); } while (0)

/* ---------------------------------------------------------------------------
 * Bitwise float comparison */

static inline uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
#define ASSERT_F32_BITS(got, want) ck_assert_msg(fbits(got) == fbits(want), \
    "got %a (0x%08x), want %a (0x%08x)", (double)(got), fbits(got), (double)(want), fbits(want))

#endif
