/* cpu_pointwise.c — the CPU reference kernels of the pointwise family:
 * unary math (neg … isnan), binary (pow … div.Tensor_mode), ternary (where,
 * clamp, lerp, addcmul, addcdiv), activation backwards, and tril/triu.
 *
 * Contract (ops.def, "Training op set"): every input broadcasts to out, whose
 * shape must be exactly the broadcast shape. A "t|s" input slot i whose
 * tensor is absent takes its value from args[i]. The last arg is the DTYPE
 * ATen computes in (the common dtype): each operand is converted to it
 * (scalars too), the op runs in that dtype's opmath (f16/bf16 -> float,
 * integers -> int64 with wrapping, bool -> 0/1), and the result is rounded to
 * the compute dtype before the cast to out's dtype. Comparisons, logical ops
 * and isnan produce 0/1 in whatever dtype out has (normally bool).
 *
 * Layout: (the per-op layouts, dtype support and checks are op/pointwise.c) a 4-operand strided
 * iterator (op_iter), per-compute-class chunk loops that
 * convert operands into 256-element buffers (contiguous operands already in
 * the compute type are used in place: the f32 fast path), and the compute
 * loops themselves (floating ones in cpu_pointwise_float.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu_families.h"
#include "cpu_internal.h"
#include "cpu_vmath.h"
#include "op/pointwise.h"
#include "op/pw_math.h"
#include "op/special_math.h"

#define CHUNK CPU_CHUNK
#define PW_MAX_OPS (1 + PW_MAX_IN)

/* libm constants spelled out (M_SQRT2 etc. need feature macros) */
#define PW_SQRT2     1.41421356237309504880
#define PW_SQRT1_2   0.70710678118654752440
#define PW_2_SQRTPI  1.12837916709551257390

/* ---------------------------------------------------------------------------
 * Kernel context */

struct pw_ctx;
/* kern_f32's signature (its builds: below) */
typedef void (*kern_f32_fn)(struct pw_ctx *, float *, uint8_t *, const float *const *, const uint8_t *, int64_t);

typedef struct pw_ctx {
    int op;
    int ct;                  /* CT_* */
    int cdt;                 /* the compute dtype */
    int nin;                 /* inputs (operands 1..nin) */
    int dt[PW_MAX_OPS];      /* operand dtypes: out, in0, in1, in2 */
    bool round[PW_MAX_OPS];  /* OP_CT_F32 with f16/bf16 compute: round this operand to cdt on load */
    bool res_bool;
    op_pw_params p;          /* the op's own args, WHERE, CLAMP, POW */
    _Atomic bool zero_div;   /* set by integer division by zero (from any pool thread) */
    kern_f32_fn kf32;        /* the build of kern_f32 for this CPU (kern_f32_pick) */
} pw_ctx;

/* block of the vector math rows in kern_f32/_f64 (two on the stack) */
#define PW_VBLK 256

/* kern_f32 in three builds, picked per op by cpu_vmath's ISA choice (the
 * CPU's widest, RGPU_CPU_ISA caps it): element for element the same
 * operations (no FMA contraction: -ffp-contract=off; libm is the same
 * library), so the same bits, only wider loops (4, 8 or 16 floats). */
#define PW_T float
#define PW_F(fn) fn##f
#define PW_VROW(fn, r, a, n) rgpu_vm_##fn##_f32(r, a, n)
#define PW_OWN p.own_f
#define PW_M(fn) op_##fn##_f
#define PW_V(fn) rgpu_vm_##fn##_f32   /* sqrt, rsqrt: this CPU's widest build */
#define PW_SPECIAL op_special_f
#define PW_TARGET
#define PW_KERNEL kern_f32_base
#include "cpu_pointwise_float.h"
#undef PW_TARGET
#undef PW_KERNEL
#if defined(__x86_64__)
#define PW_TARGET __attribute__((target("avx2")))
#define PW_KERNEL kern_f32_avx2
#include "cpu_pointwise_float.h"
#undef PW_TARGET
#undef PW_KERNEL
#define PW_TARGET __attribute__((target("avx512f")))
#define PW_KERNEL kern_f32_avx512
#include "cpu_pointwise_float.h"
#undef PW_TARGET
#undef PW_KERNEL
#endif
#undef PW_T
#undef PW_F
#undef PW_OWN
#undef PW_M
#undef PW_V
#undef PW_VROW
#undef PW_SPECIAL

/* the build of kern_f32 for the ISA cpu_vmath runs */
static kern_f32_fn kern_f32_pick(void)
{
#if defined(__x86_64__)
    const char *isa = rgpu_vm_isa();
    if (!strcmp(isa, "avx512")) return kern_f32_avx512;
    if (!strcmp(isa, "avx2")) return kern_f32_avx2;
#endif
    return kern_f32_base;
}

#define PW_T double
#define PW_F(fn) fn
#define PW_VROW(fn, r, a, n) do { for (int64_t i_ = 0; i_ < (n); i_++) (r)[i_] = fn((a)[i_]); } while (0)
#define PW_OWN p.own_d
#define PW_M(fn) op_##fn##_d
#define PW_TARGET
#define PW_KERNEL kern_f64
#define PW_V(fn) vm_##fn##_f64
#define PW_SPECIAL op_special_d
#include "cpu_pointwise_float.h"
#undef PW_T
#undef PW_F
#undef PW_OWN
#undef PW_M
#undef PW_KERNEL
#undef PW_TARGET
#undef PW_V
#undef PW_SPECIAL

/* ---------------------------------------------------------------------------
 * Integer compute loops: values are int64 held as uint64 so + - * wrap
 * without UB; the store rounds them to the compute dtype's width. Narrower
 * signed dtypes arrive sign-extended, u8 zero-extended, so comparisons on the
 * int64 value are right for every integer dtype. */

static void kern_i64(pw_ctx *c, uint64_t *r, uint8_t *rb, const uint64_t *const *x,
                     const uint8_t *cond, int64_t n)
{
    const uint64_t *a = x[0], *b = x[1], *w = x[2];
    switch (c->op) {
    case RGPU_OP_NEG:   for (int64_t i = 0; i < n; i++) r[i] = 0 - a[i]; break;
    case RGPU_OP_ABS:   for (int64_t i = 0; i < n; i++) r[i] = op_pw_sv(a[i]) < 0 ? 0 - a[i] : a[i]; break;
    case RGPU_OP_FLOOR: case RGPU_OP_CEIL: case RGPU_OP_ROUND: case RGPU_OP_TRUNC:
        for (int64_t i = 0; i < n; i++) r[i] = a[i];
        break;
    case RGPU_OP_SIGN:  for (int64_t i = 0; i < n; i++) r[i] = (uint64_t)(int64_t)((0 < op_pw_sv(a[i])) - (op_pw_sv(a[i]) < 0)); break;
    case RGPU_OP_RELU:  for (int64_t i = 0; i < n; i++) r[i] = op_pw_sv(a[i]) < 0 ? 0 : a[i]; break;
    case RGPU_OP_BITWISE_NOT: for (int64_t i = 0; i < n; i++) r[i] = ~a[i]; break;
    case RGPU_OP_LOGICAL_NOT: for (int64_t i = 0; i < n; i++) rb[i] = a[i] == 0; break;
    case RGPU_OP_ISNAN:       for (int64_t i = 0; i < n; i++) rb[i] = 0; break;
    case RGPU_OP_POW:     for (int64_t i = 0; i < n; i++) r[i] = op_pw_powi(a[i], b[i]); break;
    case RGPU_OP_MAXIMUM: for (int64_t i = 0; i < n; i++) r[i] = op_pw_sv(a[i]) < op_pw_sv(b[i]) ? b[i] : a[i]; break;
    case RGPU_OP_MINIMUM: for (int64_t i = 0; i < n; i++) r[i] = op_pw_sv(b[i]) < op_pw_sv(a[i]) ? b[i] : a[i]; break;
    case RGPU_OP_FMAX:    for (int64_t i = 0; i < n; i++) r[i] = op_pw_sv(a[i]) < op_pw_sv(b[i]) ? b[i] : a[i]; break;
    case RGPU_OP_FMIN:    for (int64_t i = 0; i < n; i++) r[i] = op_pw_sv(b[i]) < op_pw_sv(a[i]) ? b[i] : a[i]; break;
    case RGPU_OP_SIGNBIT: for (int64_t i = 0; i < n; i++) rb[i] = op_pw_sv(a[i]) < 0; break;
    case RGPU_OP_EQ: for (int64_t i = 0; i < n; i++) rb[i] = a[i] == b[i]; break;
    case RGPU_OP_NE: for (int64_t i = 0; i < n; i++) rb[i] = a[i] != b[i]; break;
    case RGPU_OP_LT: for (int64_t i = 0; i < n; i++) rb[i] = op_pw_sv(a[i]) < op_pw_sv(b[i]); break;
    case RGPU_OP_LE: for (int64_t i = 0; i < n; i++) rb[i] = op_pw_sv(a[i]) <= op_pw_sv(b[i]); break;
    case RGPU_OP_GT: for (int64_t i = 0; i < n; i++) rb[i] = op_pw_sv(a[i]) > op_pw_sv(b[i]); break;
    case RGPU_OP_GE: for (int64_t i = 0; i < n; i++) rb[i] = op_pw_sv(a[i]) >= op_pw_sv(b[i]); break;
    case RGPU_OP_LOGICAL_AND: for (int64_t i = 0; i < n; i++) rb[i] = a[i] != 0 && b[i] != 0; break;
    case RGPU_OP_LOGICAL_OR:  for (int64_t i = 0; i < n; i++) rb[i] = a[i] != 0 || b[i] != 0; break;
    case RGPU_OP_LOGICAL_XOR: for (int64_t i = 0; i < n; i++) rb[i] = (a[i] != 0) != (b[i] != 0); break;
    case RGPU_OP_BITWISE_AND: for (int64_t i = 0; i < n; i++) r[i] = a[i] & b[i]; break;
    case RGPU_OP_BITWISE_OR:  for (int64_t i = 0; i < n; i++) r[i] = a[i] | b[i]; break;
    case RGPU_OP_BITWISE_XOR: for (int64_t i = 0; i < n; i++) r[i] = a[i] ^ b[i]; break;
    /* integer %, fmod and div by zero raise ZeroDivisionError in ATen */
    case RGPU_OP_REMAINDER:
        for (int64_t i = 0; i < n; i++) {
            if (b[i] == 0) { c->zero_div = true; r[i] = 0; continue; }
            uint64_t m = op_pw_imod(a[i], b[i]);
            if (m != 0 && ((op_pw_sv(m) < 0) != (op_pw_sv(b[i]) < 0))) m += b[i];
            r[i] = m;
        }
        break;
    case RGPU_OP_FMOD:
        for (int64_t i = 0; i < n; i++) {
            if (b[i] == 0) { c->zero_div = true; r[i] = 0; continue; }
            r[i] = op_pw_imod(a[i], b[i]);
        }
        break;
    case RGPU_OP_DIV_MODE:
        for (int64_t i = 0; i < n; i++) {
            if (b[i] == 0) { c->zero_div = true; r[i] = 0; continue; }
            uint64_t q = op_pw_idiv(a[i], b[i]);
            /* div_floor_integer: step down when the signs differ and it was inexact */
            if (c->p.mode == DIV_FLOOR && (op_pw_sv(a[i]) < 0) != (op_pw_sv(b[i]) < 0) && op_pw_imod(a[i], b[i]) != 0) q -= 1;
            r[i] = q;
        }
        break;
    case RGPU_OP_WHERE: for (int64_t i = 0; i < n; i++) r[i] = cond[i] ? b[i] : w[i]; break;
    case RGPU_OP_CLAMP:
        for (int64_t i = 0; i < n; i++) {
            uint64_t v = a[i];
            if (c->p.has_lo && op_pw_sv(v) < op_pw_sv(b[i])) v = b[i];
            if (c->p.has_hi && op_pw_sv(w[i]) < op_pw_sv(v)) v = w[i];
            r[i] = v;
        }
        break;
    case RGPU_OP_ADDCMUL: {
        uint64_t v = c->p.own_i;
        for (int64_t i = 0; i < n; i++) r[i] = a[i] + v * b[i] * w[i];
        break;
    }
    case RGPU_OP_THRESHOLD_BACKWARD: {
        int64_t th = op_pw_sv(c->p.own_i);
        for (int64_t i = 0; i < n; i++) r[i] = op_pw_sv(b[i]) <= th ? 0 : a[i];
        break;
    }
    default: break;   /* rgpu_op_pointwise_supports() let no other op through */
    }
}

/* Bool compute: values are 0/1; r and rb are the same kind of buffer. */
static void kern_bool(pw_ctx *c, uint8_t *r, const uint8_t *const *x, const uint8_t *cond, int64_t n)
{
    const uint8_t *a = x[0], *b = x[1], *w = x[2];
    switch (c->op) {
    case RGPU_OP_SIGN:        for (int64_t i = 0; i < n; i++) r[i] = a[i]; break;
    case RGPU_OP_LOGICAL_NOT: case RGPU_OP_BITWISE_NOT:
        for (int64_t i = 0; i < n; i++) r[i] = !a[i];
        break;
    case RGPU_OP_ISNAN: case RGPU_OP_SIGNBIT: for (int64_t i = 0; i < n; i++) r[i] = 0; break;
    case RGPU_OP_MAXIMUM: case RGPU_OP_LOGICAL_OR: case RGPU_OP_BITWISE_OR: case RGPU_OP_FMAX:
        for (int64_t i = 0; i < n; i++) r[i] = a[i] | b[i];
        break;
    case RGPU_OP_MINIMUM: case RGPU_OP_LOGICAL_AND: case RGPU_OP_BITWISE_AND: case RGPU_OP_FMIN:
        for (int64_t i = 0; i < n; i++) r[i] = a[i] & b[i];
        break;
    case RGPU_OP_LOGICAL_XOR: case RGPU_OP_BITWISE_XOR: case RGPU_OP_NE:
        for (int64_t i = 0; i < n; i++) r[i] = a[i] ^ b[i];
        break;
    case RGPU_OP_EQ: for (int64_t i = 0; i < n; i++) r[i] = a[i] == b[i]; break;
    case RGPU_OP_LT: for (int64_t i = 0; i < n; i++) r[i] = a[i] < b[i]; break;
    case RGPU_OP_LE: for (int64_t i = 0; i < n; i++) r[i] = a[i] <= b[i]; break;
    case RGPU_OP_GT: for (int64_t i = 0; i < n; i++) r[i] = a[i] > b[i]; break;
    case RGPU_OP_GE: for (int64_t i = 0; i < n; i++) r[i] = a[i] >= b[i]; break;
    case RGPU_OP_WHERE: for (int64_t i = 0; i < n; i++) r[i] = cond[i] ? b[i] : w[i]; break;
    default: break;
    }
}

/* ---------------------------------------------------------------------------
 * Conversions into and out of the compute type */

/* x := x rounded to f16/bf16 (the compute dtype), back in float. */
static void round_row_half(float *x, int cdt, int64_t n)
{
    if (cdt == RGPU_F16) for (int64_t i = 0; i < n; i++) x[i] = rgpu_half_to_float(rgpu_float_to_half(x[i]));
    else for (int64_t i = 0; i < n; i++) x[i] = rgpu_bf16_to_float(rgpu_float_to_bf16(x[i]));
}

/* x := x wrapped to the width of integer dtype cdt (sign- or zero-extended). */
static void wrap_row_int(uint64_t *x, int cdt, int64_t n)
{
    switch (cdt) {
    case RGPU_I32: for (int64_t i = 0; i < n; i++) x[i] = (uint64_t)(int64_t)(int32_t)(uint32_t)x[i]; break;
    case RGPU_I16: for (int64_t i = 0; i < n; i++) x[i] = (uint64_t)(int64_t)(int16_t)(uint16_t)x[i]; break;
    case RGPU_I8:  for (int64_t i = 0; i < n; i++) x[i] = (uint64_t)(int64_t)(int8_t)(uint8_t)x[i]; break;
    case RGPU_U8:  for (int64_t i = 0; i < n; i++) x[i] = (uint8_t)x[i]; break;
    default: break;
    }
}

/* 0/1 values into any dtype. */
static void store_row_01(char *dst, int dt, int64_t s, const uint8_t *src, int64_t n)
{
    CPU_EACH_DTYPE(dt, for (int64_t i = 0; i < n; i++) op_store_u64(dst + i * s, DT_, src[i]));
}

/* ---------------------------------------------------------------------------
 * Chunk loops: m elements of a row starting at element i0. */

static void chunk_f32(pw_ctx *c, char *const *p, const int64_t *s, int64_t i0, int64_t m)
{
    float buf[PW_MAX_IN][CHUNK], res[CHUNK];
    uint8_t cond[CHUNK], rb[CHUNK];
    const float *x[PW_MAX_IN] = { NULL, NULL, NULL };
    bool f32 = c->cdt == RGPU_F32;
    for (int k = 1; k <= c->nin; k++) {
        const char *src = p[k] + i0 * s[k];
        if (k == 1 && c->p.cond_first) { cpu_load_row_bool(cond, src, c->dt[k], s[k], m); continue; }
        if (f32 && c->dt[k] == RGPU_F32 && s[k] == 4) { x[k - 1] = (const float *)src; continue; }
        cpu_load_row_f32(buf[k - 1], src, c->dt[k], s[k], m);
        if (c->round[k]) round_row_half(buf[k - 1], c->cdt, m);
        x[k - 1] = buf[k - 1];
    }
    char *dst = p[0] + i0 * s[0];
    if (c->res_bool) {
        c->kf32(c, NULL, rb, x, cond, m);
        store_row_01(dst, c->dt[0], s[0], rb, m);
    } else if (f32 && c->dt[0] == RGPU_F32 && s[0] == 4) {
        c->kf32(c, (float *)dst, NULL, x, cond, m);
    } else {
        c->kf32(c, res, NULL, x, cond, m);
        if (!f32 && c->dt[0] != c->cdt) round_row_half(res, c->cdt, m);
        cpu_store_row_f32(dst, c->dt[0], s[0], res, m);
    }
}

static void chunk_f64(pw_ctx *c, char *const *p, const int64_t *s, int64_t i0, int64_t m)
{
    double buf[PW_MAX_IN][CHUNK], res[CHUNK];
    uint8_t cond[CHUNK], rb[CHUNK];
    const double *x[PW_MAX_IN] = { NULL, NULL, NULL };
    for (int k = 1; k <= c->nin; k++) {
        const char *src = p[k] + i0 * s[k];
        if (k == 1 && c->p.cond_first) { cpu_load_row_bool(cond, src, c->dt[k], s[k], m); continue; }
        if (c->dt[k] == RGPU_F64 && s[k] == 8) { x[k - 1] = (const double *)src; continue; }
        cpu_load_row_f64(buf[k - 1], src, c->dt[k], s[k], m);
        x[k - 1] = buf[k - 1];
    }
    char *dst = p[0] + i0 * s[0];
    if (c->res_bool) {
        kern_f64(c, NULL, rb, x, cond, m);
        store_row_01(dst, c->dt[0], s[0], rb, m);
    } else if (c->dt[0] == RGPU_F64 && s[0] == 8) {
        kern_f64(c, (double *)dst, NULL, x, cond, m);
    } else {
        kern_f64(c, res, NULL, x, cond, m);
        cpu_store_row_f64(dst, c->dt[0], s[0], res, m);
    }
}

static void chunk_i64(pw_ctx *c, char *const *p, const int64_t *s, int64_t i0, int64_t m)
{
    uint64_t buf[PW_MAX_IN][CHUNK], res[CHUNK];
    uint8_t cond[CHUNK], rb[CHUNK];
    const uint64_t *x[PW_MAX_IN] = { NULL, NULL, NULL };
    for (int k = 1; k <= c->nin; k++) {
        const char *src = p[k] + i0 * s[k];
        if (k == 1 && c->p.cond_first) { cpu_load_row_bool(cond, src, c->dt[k], s[k], m); continue; }
        if (c->cdt == RGPU_I64 && c->dt[k] == RGPU_I64 && s[k] == 8) { x[k - 1] = (const uint64_t *)src; continue; }
        cpu_load_row_u64(buf[k - 1], src, c->dt[k], s[k], m);
        if (c->dt[k] != c->cdt) wrap_row_int(buf[k - 1], c->cdt, m);
        x[k - 1] = buf[k - 1];
    }
    char *dst = p[0] + i0 * s[0];
    if (c->res_bool) {
        kern_i64(c, NULL, rb, x, cond, m);
        store_row_01(dst, c->dt[0], s[0], rb, m);
    } else if (c->cdt == RGPU_I64 && c->dt[0] == RGPU_I64 && s[0] == 8) {
        kern_i64(c, (uint64_t *)dst, NULL, x, cond, m);
    } else {
        kern_i64(c, res, NULL, x, cond, m);
        if (c->dt[0] != c->cdt) wrap_row_int(res, c->cdt, m);
        cpu_store_row_u64(dst, c->dt[0], s[0], res, m);
    }
}

static void chunk_bool(pw_ctx *c, char *const *p, const int64_t *s, int64_t i0, int64_t m)
{
    uint8_t buf[PW_MAX_IN][CHUNK], res[CHUNK], cond[CHUNK];
    const uint8_t *x[PW_MAX_IN] = { NULL, NULL, NULL };
    for (int k = 1; k <= c->nin; k++) {
        const char *src = p[k] + i0 * s[k];
        if (k == 1 && c->p.cond_first) { cpu_load_row_bool(cond, src, c->dt[k], s[k], m); continue; }
        cpu_load_row_bool(buf[k - 1], src, c->dt[k], s[k], m);
        x[k - 1] = buf[k - 1];
    }
    kern_bool(c, res, x, cond, m);
    store_row_01(p[0] + i0 * s[0], c->dt[0], s[0], res, m);
}

/* Every operand f32 and unit-stride, the compute dtype f32: the kernel runs
 * on the memory itself, in one call for the whole row (the row is a piece of
 * at most CPU_ITER_GRAIN-ish elements when the pool splits it). */
static bool pw_row_f32_direct(pw_ctx *c, char *const *p, const int64_t *s, int64_t n)
{
    if (c->ct != OP_CT_F32 || c->cdt != RGPU_F32 || c->res_bool || c->p.cond_first) return false;
    for (int k = 0; k <= c->nin; k++)
        if (c->dt[k] != RGPU_F32 || s[k] != 4) return false;
    const float *x[PW_MAX_IN] = { NULL, NULL, NULL };
    for (int k = 1; k <= c->nin; k++) x[k - 1] = (const float *)p[k];
    c->kf32(c, (float *)p[0], NULL, x, NULL, n);
    return true;
}

static void pw_row(char *const *p, const int64_t *s, int64_t n, void *vctx)
{
    pw_ctx *c = vctx;
    if (pw_row_f32_direct(c, p, s, n)) return;
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        switch (c->ct) {
        case OP_CT_F32: chunk_f32(c, p, s, i0, m); break;
        case OP_CT_F64: chunk_f64(c, p, s, i0, m); break;
        case OP_CT_I64: chunk_i64(c, p, s, i0, m); break;
        default:     chunk_bool(c, p, s, i0, m); break;
        }
    }
}

/* ---------------------------------------------------------------------------
 * Validation helpers */


/* ---------------------------------------------------------------------------
 * The elementwise ops */

static rgpu_status op_pointwise(const rgpu_exec *e, const pw_layout *L, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    bool present[PW_MAX_IN];
    FORWARD_IF_ERROR(rgpu_op_pointwise_check(e, L, present, err, errlen));
    const rgpu_arg *dta = &e->args[L->nargs - 1];
    rgpu_view *out = e->out[0];

    pw_ctx c;
    memset(&c, 0, sizeof c);
    c.op = e->op;
    c.cdt = (int)dta->v.i;
    c.ct = rgpu_op_pointwise_compute_class(c.cdt);
    c.nin = e->n_in;
    c.res_bool = L->res_bool;
    c.kf32 = kern_f32_pick();
    if (!rgpu_op_pointwise_supports(e->op, c.ct))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for compute dtype %s", name, rgpu_dtype_name(c.cdt));

    FORWARD_IF_ERROR(rgpu_op_pw_params_of(e, L, present, c.cdt, c.ct, &c.p, err, errlen));

    /* operands: tensors as they are; scalars as 0-d values in the compute
     * dtype (lerp's weight in opmath, as ATen's lerp_scalar) */
    op_operand ops[PW_MAX_IN];
    uint64_t sbuf[PW_MAX_IN] = { 0, 0, 0 };
    c.dt[0] = out->dtype;
    for (int i = 0; i < e->n_in; i++) {
        if (e->in[i] != NULL) {
            ops[i] = (op_operand){ e->in[i], NULL, 0 };
            c.dt[i + 1] = e->in[i]->dtype;
        } else {
            int sdt = c.cdt;
            if (e->op == RGPU_OP_LERP) sdt = c.ct == OP_CT_F64 ? RGPU_F64 : RGPU_F32;
            if (present[i]) rgpu_op_scalar_to(&e->args[i], sdt, &sbuf[i]);
            ops[i] = (op_operand){ NULL, &sbuf[i], sdt };
            c.dt[i + 1] = sdt;
        }
        c.round[i + 1] = (c.cdt == RGPU_F16 || c.cdt == RGPU_BF16) && c.dt[i + 1] != c.cdt
                         && !(e->op == RGPU_OP_LERP && e->in[i] == NULL);
    }
    if (rgpu_op_numel(out) == 0) return RGPU_OK;

    op_iter it;   /* operand 0 is out; inputs broadcast to it (checked above) */
    FORWARD_IF_ERROR(rgpu_op_iter_init(&it, out, ops, e->n_in, e->op, err, errlen));
    rgpu_cpu_iter_run(&it, pw_row, &c, CPU_ITER_GRAIN);
    if (c.zero_div) RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: ZeroDivisionError", name);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * TRIL / TRIU: x is (..., R, C); out[..., i, j] = x[..., i, j] where
 * j - i <= diagonal (tril) / j - i >= diagonal (triu), else 0. out has x's
 * shape and dtype (in place when it is x). */

static rgpu_status op_tri(const rgpu_exec *e, bool upper, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_pointwise_check_tri(e, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *out = e->out[0];
    int nd = x->ndim;
    if (rgpu_op_numel(out) == 0) return RGPU_OK;

    int64_t R = x->sizes[nd - 2], C = x->sizes[nd - 1];
    int64_t k = e->args[0].v.i;   /* clamped to [-R, C]: beyond, all or nothing is kept */
    if (k > C) k = C;
    if (k < -R) k = -R;
    size_t esz = rgpu_dtype_size(x->dtype);
    int64_t xrs = x->strides[nd - 2] * (int64_t)esz, xcs = x->strides[nd - 1] * (int64_t)esz;
    int64_t ors = out->strides[nd - 2] * (int64_t)esz, ocs = out->strides[nd - 1] * (int64_t)esz;
    int nb = nd - 2;
    int64_t idx[RGPU_MAX_DIMS] = {0};
    int64_t xoff = 0, ooff = 0;
    for (;;) {
        const char *xb = (const char *)x->data + xoff;
        char *ob = (char *)out->data + ooff;
        for (int64_t i = 0; i < R; i++) {
            /* kept columns: tril j in [0, i+k], triu j in [i+k, C) */
            int64_t lo = upper ? i + k : 0, hi = upper ? C : i + k + 1;
            if (lo < 0) lo = 0;
            if (hi > C) hi = C;
            const char *xr = xb + i * xrs;
            char *orow = ob + i * ors;
            for (int64_t j = 0; j < C; j++) {
                char *o = orow + j * ocs;
                if (j >= lo && j < hi) { if (o != xr + j * xcs) memcpy(o, xr + j * xcs, esz); }
                else memset(o, 0, esz);   /* all-zero bytes are 0 in every dtype */
            }
        }
        int d = nb - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < x->sizes[d]) {
                xoff += x->strides[d] * (int64_t)esz;
                ooff += out->strides[d] * (int64_t)esz;
                break;
            }
            xoff -= x->strides[d] * (int64_t)esz * (x->sizes[d] - 1);
            ooff -= out->strides[d] * (int64_t)esz * (out->sizes[d] - 1);
            idx[d] = 0;
        }
        if (d < 0) break;
    }
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Family entry points */

rgpu_status rgpu_cpu_pointwise_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    pw_layout L;
    switch (e->op) {
    case RGPU_OP_TRIL: return op_tri(e, false, err, errlen);
    case RGPU_OP_TRIU: return op_tri(e, true, err, errlen);
    default:
        if (rgpu_op_pointwise_layout_of(e->op, &L)) return op_pointwise(e, &L, err, errlen);
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cpu pointwise: unsupported op %s", rgpu_op_name(e->op));
    }
}
