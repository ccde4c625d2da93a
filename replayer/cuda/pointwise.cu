// pointwise.cu — the CUDA pointwise family: binary arithmetic (add/sub/rsub/
// mul/div, Tensor and Scalar overloads), every pointwise op of the training
// set (unary neg … isnan, binary pow … div.Tensor_mode, where, clamp, lerp,
// addcmul, addcdiv, the activation backwards) and tril/triu.
//
// Mirrors the CPU reference line by line: replayer/cpu/cpu_kernels.c
// (op_binary: compute type from the OUTPUT dtype, alpha, bool rules) and
// replayer/cpu/cpu_pointwise.c + cpu_pointwise_float.h (compute type from the
// record's DTYPE arg, f16/bf16 operands rounded to it, integers wrapped to
// its width). Same validation, same messages, same formulas in the same
// operation order; + - * / and sqrt use the _rn intrinsics so nvcc never
// contracts them into FMAs (the CPU build never contracts), which keeps the
// non-transcendental ops bit-identical to the CPU backend.
//
// Layout: element conversions (host+device), the kernel arguments, the
// per-element compute (host+device, so it can be checked against the CPU
// backend on a machine without a GPU), one grid-stride kernel per
// (compute class, 1-d or N-d addressing) with a runtime switch on the op and
// on each operand's dtype, the host-side validation (pw_prepare_*) and the
// family entry points.
#include "common.cuh"
#include "convert.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "op/pointwise.h"
#include "op/pw_math.h"
#include "op/special_math.h"

#define PW_HD static __host__ __device__ inline
#ifdef __CUDA_ARCH__
#define PW_UNROLL _Pragma("unroll")
#define PW_NO_UNROLL _Pragma("unroll 1")
#else
#define PW_UNROLL
#define PW_NO_UNROLL
#endif

#define PW_NOPS (1 + PW_MAX_IN)     // out + inputs
#define PW_THREADS 256
#define PW_MAX_BLOCKS 8192          // grid-stride beyond this

// libm constants spelled out, as cpu_pointwise.c
#define PW_SQRT2     1.41421356237309504880
#define PW_SQRT1_2   0.70710678118654752440
#define PW_2_SQRTPI  1.12837916709551257390


// Everything up to the entry points has internal linkage (the other family
// files are linked into the same library).
namespace {

// ---------------------------------------------------------------------------
// Elements: convert.cuh (op/dtype.h's casts, the CPU backend's own, on host
// and device).

// x rounded to f16/bf16 (the compute dtype), back in float.
PW_HD float pw_round_half(float x, int cdt) {
    return cdt == RGPU_F16 ? rgpu_half_to_float(rgpu_float_to_half(x)) : rgpu_bf16_to_float(rgpu_float_to_bf16(x));
}
// x wrapped to the width of integer dtype cdt (sign- or zero-extended).
PW_HD uint64_t pw_wrap_int(uint64_t x, int cdt) {
    switch (cdt) {
    case RGPU_I32: return (uint64_t)(int64_t)(int32_t)(uint32_t)x;
    case RGPU_I16: return (uint64_t)(int64_t)(int16_t)(uint16_t)x;
    case RGPU_I8:  return (uint64_t)(int64_t)(int8_t)(uint8_t)x;
    case RGPU_U8:  return (uint8_t)x;
    default:       return x;
    }
}

// ---------------------------------------------------------------------------
// Arithmetic without contraction, and the math library per type.

PW_HD float pw_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
PW_HD double pw_add(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
PW_HD float pw_sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
PW_HD double pw_sub(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dsub_rn(a, b);
#else
    return a - b;
#endif
}
PW_HD float pw_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
PW_HD double pw_mul(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
PW_HD float pw_div(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
PW_HD double pw_div(double a, double b) {
#ifdef __CUDA_ARCH__
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}
PW_HD float pw_sqrt(float a) {
#ifdef __CUDA_ARCH__
    return __fsqrt_rn(a);
#else
    return sqrtf(a);
#endif
}
PW_HD double pw_sqrt(double a) {
#ifdef __CUDA_ARCH__
    return __dsqrt_rn(a);
#else
    return sqrt(a);
#endif
}

#define PW_MATH1(name, ff, df) \
    PW_HD float name(float x) { return ff(x); } \
    PW_HD double name(double x) { return df(x); }
#define PW_MATH2(name, ff, df) \
    PW_HD float name(float x, float y) { return ff(x, y); } \
    PW_HD double name(double x, double y) { return df(x, y); }
PW_MATH1(pw_fabs, fabsf, fabs)
PW_MATH1(pw_exp, expf, exp)
PW_MATH1(pw_log, logf, log)
PW_MATH1(pw_log1p, log1pf, log1p)
PW_MATH1(pw_expm1, expm1f, expm1)
PW_MATH1(pw_tanh, tanhf, tanh)
PW_MATH1(pw_sin, sinf, sin)
PW_MATH1(pw_cos, cosf, cos)
PW_MATH1(pw_erf, erff, erf)
PW_MATH1(pw_floor, floorf, floor)
PW_MATH1(pw_ceil, ceilf, ceil)
PW_MATH1(pw_nearbyint, nearbyintf, nearbyint)   // half to even
PW_MATH1(pw_trunc, truncf, trunc)
PW_MATH2(pw_pow, powf, pow)
PW_MATH2(pw_fmod, fmodf, fmod)
PW_MATH2(pw_atan2, atan2f, atan2)
PW_MATH2(pw_hypot, hypotf, hypot)
PW_MATH2(pw_copysign, copysignf, copysign)
PW_MATH1(pw_acos, acosf, acos)
PW_MATH1(pw_asin, asinf, asin)
PW_MATH1(pw_atan, atanf, atan)
PW_MATH1(pw_acosh, acoshf, acosh)
PW_MATH1(pw_asinh, asinhf, asinh)
PW_MATH1(pw_atanh, atanhf, atanh)
PW_MATH1(pw_sinh, sinhf, sinh)
PW_MATH1(pw_cosh, coshf, cosh)
PW_MATH1(pw_tan, tanf, tan)
PW_MATH1(pw_log2, log2f, log2)
PW_MATH1(pw_log10, log10f, log10)
PW_MATH1(pw_exp2, exp2f, exp2)
PW_MATH1(pw_erfc, erfcf, erfc)
PW_MATH1(pw_lgamma, lgammaf, lgamma)
PW_MATH1(pw_erfinv, op_erfinv_f, op_erfinv_d)
PW_MATH1(pw_digamma, op_digamma_f, op_digamma_d)
PW_MATH1(pw_frexp_mantissa, op_frexp_mantissa_f, op_frexp_mantissa_d)
PW_MATH1(pw_frexp_exponent, op_frexp_exponent_f, op_frexp_exponent_d)
PW_MATH2(pw_fmax, fmaxf, fmax)
PW_MATH2(pw_fmin, fminf, fmin)
PW_MATH2(pw_nextafter, nextafterf, nextafter)
#undef PW_MATH1
#undef PW_MATH2
PW_HD float pw_polygamma(int64_t n, float x) { return op_polygamma_f(n, x); }
PW_HD double pw_polygamma(int64_t n, double x) { return op_polygamma_d(n, x); }
PW_HD bool pw_signbit(float x) { return op_signbit_f(x); }
PW_HD bool pw_signbit(double x) { return op_signbit_d(x); }

// The quiet NaN C's NAN macro gives (0x7fc00000, widened for double).
template <typename T> PW_HD T pw_nan();
template <> __host__ __device__ inline float pw_nan<float>() { return rgpu_f32_from_bits(0x7fc00000u); }
template <> __host__ __device__ inline double pw_nan<double>() { return (double)rgpu_f32_from_bits(0x7fc00000u); }

// ---------------------------------------------------------------------------
// Kernel arguments. Operand 0 is out, 1..nin the inputs, addressed over the
// (coalesced) iteration dims with byte strides; a scalar operand has no base
// and its value already sits in the compute type (sf/sd/su/sb).
//
// op: the rgpu op; the binary arithmetic family uses ADD_TENSOR, SUB_TENSOR,
// MUL_TENSOR and DIV_TENSOR for its four kinds (Scalar overloads and rsub
// become those with a 0-d operand).

struct pw_args {
    int op;
    int ct;                               // CT_*
    int cdt;                              // the compute dtype
    int nin;
    int ndim;                             // >= 1
    long long numel;
    long long sizes[RGPU_MAX_DIMS];
    long long st[PW_NOPS][RGPU_MAX_DIMS]; // bytes; 0 for scalars and unused operands
    char *base[PW_NOPS];                  // NULL: scalar operand
    int dt[PW_NOPS];
    float sf[PW_NOPS];
    double sd[PW_NOPS];
    unsigned long long su[PW_NOPS];
    unsigned char sb[PW_NOPS];
    bool fix_in[PW_NOPS];                 // OP_CT_F32: round to cdt (f16/bf16); OP_CT_I64: wrap to cdt
    bool fix_out;                         // same, for the result before the cast to out
    bool res_bool;                        // comparisons, logical ops, isnan
    op_pw_params p;                       // the op's own args, WHERE, CLAMP, POW
    bool alpha_one, alpha_b;              // binary arithmetic
    float alpha_f;
    double alpha_d;
    unsigned long long alpha_i;
    void *zero_div;                       // integer division by zero sets this int flag (or NULL), or with
    unsigned long long zd_seq;            // zd_seq != 0 flags the session's device error word (common.cuh)
    // numel < 2^31 (pw_set_divisors): the linear index splits into dims with
    // 32-bit multiply-high divisions (ATen's IntDivider), not 64-bit divides
    bool i32;
    bool vec4;                            // pw_multi_kernel: float32 throughout, contiguous, aligned (pw_vec_dtype)
    // pw_bvec_kernel (pw_bvec_prepare): per operand 0 = contiguous over (rows, C),
    // 1 = one row of C broadcast over the rows, 2 = one element per row;
    // vcols = C / V vectors per row and its division constants
    unsigned char vmode[PW_NOPS];
    unsigned vcols, vmul;
    unsigned char vshift;
    unsigned dmul[RGPU_MAX_DIMS];
    unsigned char dshift[RGPU_MAX_DIMS];
};

template <typename T> PW_HD T pw_load_t(const char *p, int dt);
template <> __host__ __device__ inline float pw_load_t<float>(const char *p, int dt) { return op_load_f32(p, dt); }
template <> __host__ __device__ inline double pw_load_t<double>(const char *p, int dt) { return op_load_f64(p, dt); }
template <typename T> PW_HD T pw_scalar_t(const pw_args &a, int k);
template <> __host__ __device__ inline float pw_scalar_t<float>(const pw_args &a, int k) { return a.sf[k]; }
template <> __host__ __device__ inline double pw_scalar_t<double>(const pw_args &a, int k) { return a.sd[k]; }
template <typename T> PW_HD T pw_own_t(const pw_args &a);
template <> __host__ __device__ inline float pw_own_t<float>(const pw_args &a) { return a.p.own_f; }
template <> __host__ __device__ inline double pw_own_t<double>(const pw_args &a) { return a.p.own_d; }
// POW's scalar exponent and ROUND_DECIMALS' 10^|d| in the opmath (no double in the f32 kernels)
template <typename T> PW_HD T pw_powexp_t(const op_pw_params &p);
template <> __host__ __device__ inline float pw_powexp_t<float>(const op_pw_params &p) { return p.pow_exp_f; }
template <> __host__ __device__ inline double pw_powexp_t<double>(const op_pw_params &p) { return p.pow_exp; }
template <typename T> PW_HD T pw_tenpow_t(const op_pw_params &p);
template <> __host__ __device__ inline float pw_tenpow_t<float>(const op_pw_params &p) { return p.ten_pow_f; }
template <> __host__ __device__ inline double pw_tenpow_t<double>(const op_pw_params &p) { return p.ten_pow; }
template <typename T> PW_HD T pw_alpha_t(const pw_args &a);
template <> __host__ __device__ inline float pw_alpha_t<float>(const pw_args &a) { return a.alpha_f; }
template <> __host__ __device__ inline double pw_alpha_t<double>(const pw_args &a) { return a.alpha_d; }

PW_HD void pw_flag_zero_div(const pw_args &a) {
    if (a.zero_div == NULL) return;
#ifdef __CUDA_ARCH__
    if (a.zd_seq) rgpu_dev_flag((unsigned long long *)a.zero_div, a.zd_seq, 0);
    else atomicOr((int *)a.zero_div, 1);
#else   // host code (cudaemu runs kernels here, one thread at a time): rgpu_dev_flag's effect
    if (!a.zd_seq) { *(int *)a.zero_div = 1; return; }
    rgpu_dev_word *w = (rgpu_dev_word *)a.zero_div;
    unsigned long long seq = rgpu_dev_seq(w, a.zd_seq);
    if (w->seq >= seq) { w->seq = seq; w->pos = 0; }
#endif
}

// ---------------------------------------------------------------------------
// Floating compute (cpu_pointwise_float.h and op_binary's float loops): a, b,
// w are inputs 0..2 in T; cond is WHERE's condition. Boolean results go to rb.

// OP >= 0 fixes the op at compile time (the contiguous kernels' hot ops:
// the switch folds to one case); -1 reads A.op.
template <typename T, int OP = -1>
PW_HD T pw_fop(const pw_args &A, T a, T b, T w, bool cond, bool &rb) {
    const T zero = 0, one = 1, half = (T)0.5;
    switch (OP >= 0 ? OP : A.op) {
    // --- binary arithmetic (op_binary)
    case RGPU_OP_ADD_TENSOR: return A.alpha_one ? pw_add(a, b) : pw_add(a, pw_mul(pw_alpha_t<T>(A), b));
    case RGPU_OP_SUB_TENSOR: return A.alpha_one ? pw_sub(a, b) : pw_sub(a, pw_mul(pw_alpha_t<T>(A), b));
    case RGPU_OP_MUL_TENSOR: return pw_mul(a, b);
    case RGPU_OP_DIV_TENSOR: return pw_div(a, b);
    // --- unary
    case RGPU_OP_NEG:        return -a;
    case RGPU_OP_ABS:        return pw_fabs(a);
    case RGPU_OP_EXP:        return pw_exp(a);
    case RGPU_OP_LOG:        return pw_log(a);
    case RGPU_OP_LOG1P:      return pw_log1p(a);
    case RGPU_OP_EXPM1:      return pw_expm1(a);
    case RGPU_OP_SQRT:       return pw_sqrt(a);
    case RGPU_OP_RSQRT:      return pw_div(one, pw_sqrt(a));
    case RGPU_OP_RECIPROCAL: return pw_div(one, a);
    case RGPU_OP_TANH:       return pw_tanh(a);
    case RGPU_OP_SIGMOID:    return pw_div(one, pw_add(one, pw_exp(-a)));
    case RGPU_OP_SIN:        return pw_sin(a);
    case RGPU_OP_COS:        return pw_cos(a);
    case RGPU_OP_ERF:        return pw_erf(a);
    case RGPU_OP_FLOOR:      return pw_floor(a);
    case RGPU_OP_CEIL:       return pw_ceil(a);
    case RGPU_OP_ROUND:      return pw_nearbyint(a);
    case RGPU_OP_TRUNC:      return pw_trunc(a);
    // sign(NaN) is 0 on ATen's CPU kernel, as (0 < x) - (x < 0) gives
    case RGPU_OP_SIGN:       return (T)((zero < a) - (a < zero));
    // clamp_min(x, 0): keeps NaN and -0
    case RGPU_OP_RELU:       return zero > a ? zero : a;
    case RGPU_OP_SILU:       return pw_div(a, pw_add(one, pw_exp(-a)));
    case RGPU_OP_GELU:
        if (A.p.approx_tanh) {
            const T kBeta = (T)(PW_SQRT2 * PW_2_SQRTPI * 0.5), kKappa = (T)0.044715;
            T cube = pw_mul(pw_mul(a, a), a);
            T inner = pw_mul(kBeta, pw_add(a, pw_mul(kKappa, cube)));
            return pw_mul(pw_mul(half, a), pw_add(one, pw_tanh(inner)));
        } else {
            const T kAlpha = (T)PW_SQRT1_2;
            return pw_mul(pw_mul(a, half), pw_add(one, pw_erf(pw_mul(a, kAlpha))));
        }
    case RGPU_OP_LOGICAL_NOT: rb = a == zero; return zero;
    case RGPU_OP_ISNAN:       rb = a != a; return zero;
    case RGPU_OP_ACOS:    return pw_acos(a);
    case RGPU_OP_ASIN:    return pw_asin(a);
    case RGPU_OP_ATAN:    return pw_atan(a);
    case RGPU_OP_ACOSH:   return pw_acosh(a);
    case RGPU_OP_ASINH:   return pw_asinh(a);
    case RGPU_OP_ATANH:   return pw_atanh(a);
    case RGPU_OP_SINH:    return pw_sinh(a);
    case RGPU_OP_COSH:    return pw_cosh(a);
    case RGPU_OP_TAN:     return pw_tan(a);
    case RGPU_OP_LOG2:    return pw_log2(a);
    case RGPU_OP_LOG10:   return pw_log10(a);
    case RGPU_OP_EXP2:    return pw_exp2(a);
    case RGPU_OP_ERFC:    return pw_erfc(a);
    case RGPU_OP_LGAMMA:  return pw_lgamma(a);
    // ERFINV, DIGAMMA, POLYGAMMA: pw_heavy (the special-function kernel)
    case RGPU_OP_FREXP_MANTISSA: return pw_frexp_mantissa(a);
    case RGPU_OP_FREXP_EXPONENT: return pw_frexp_exponent(a);
    case RGPU_OP_SIGNBIT: rb = pw_signbit(a); return zero;
    case RGPU_OP_ROUND_DECIMALS: {   // ATen's order: scale, round half to even, unscale
        T ten = pw_tenpow_t<T>(A.p);
        return A.p.neg_decimals ? pw_mul(pw_nearbyint(pw_div(a, ten)), ten) : pw_div(pw_nearbyint(pw_mul(a, ten)), ten);
    }

    // --- binary
    case RGPU_OP_POW:
        switch (A.p.pow_mode) {
        case POW_SQRT:   return pw_sqrt(a);
        case POW_RSQRT:  return pw_div(one, pw_sqrt(a));
        case POW_RECIP:  return pw_div(one, a);
        case POW_SQUARE: return pw_mul(a, a);
        case POW_CUBE:   return pw_mul(pw_mul(a, a), a);
        case POW_INVSQ:  return pw_div(one, pw_mul(a, a));
        // in the opmath, as ATen's CUDA kernel (the CPU reference, as ATen's
        // CPU, evaluates std::pow(scalar_t base, double exp) in double)
        case POW_SCALAR: return pw_pow(a, pw_powexp_t<T>(A.p));
        default:         return pw_pow(a, b);
        }
    case RGPU_OP_MAXIMUM: return (a != a || b != b) ? pw_nan<T>() : (a < b ? b : a);
    case RGPU_OP_MINIMUM: return (a != a || b != b) ? pw_nan<T>() : (b < a ? b : a);
    case RGPU_OP_EQ: rb = a == b; return zero;
    case RGPU_OP_NE: rb = a != b; return zero;
    case RGPU_OP_LT: rb = a < b; return zero;
    case RGPU_OP_LE: rb = a <= b; return zero;
    case RGPU_OP_GT: rb = a > b; return zero;
    case RGPU_OP_GE: rb = a >= b; return zero;
    case RGPU_OP_LOGICAL_AND: rb = (a != zero) && (b != zero); return zero;
    case RGPU_OP_LOGICAL_OR:  rb = (a != zero) || (b != zero); return zero;
    case RGPU_OP_LOGICAL_XOR: rb = (a != zero) != (b != zero); return zero;
    case RGPU_OP_REMAINDER: {   // Python's %: the result takes the divisor's sign
        T mod = pw_fmod(a, b);
        if (mod != zero && ((b < zero) != (mod < zero))) mod = pw_add(mod, b);
        return mod;
    }
    case RGPU_OP_FMOD:  return pw_fmod(a, b);
    case RGPU_OP_ATAN2: return pw_atan2(a, b);
    case RGPU_OP_HYPOT: return pw_hypot(a, b);
    // ATen's xlogy: y's NaN first, then x == 0 gives 0 (log(0), log(inf) too)
    case RGPU_OP_XLOGY: return b != b ? pw_nan<T>() : (a == zero ? zero : pw_mul(a, pw_log(b)));
    // fmax/fmin: a NaN operand loses to a number
    case RGPU_OP_FMAX:      return pw_fmax(a, b);
    case RGPU_OP_FMIN:      return pw_fmin(a, b);
    case RGPU_OP_COPYSIGN:  return pw_copysign(a, b);
    case RGPU_OP_NEXTAFTER:   // f16/bf16: the neighbour in that type
        if (A.cdt == RGPU_F16 || A.cdt == RGPU_BF16) return (T)op_nextafter_half((float)a, (float)b, A.cdt == RGPU_BF16);
        return pw_nextafter(a, b);
    case RGPU_OP_DIV_MODE: {
        if (A.p.mode == DIV_TRUNC) return pw_trunc(pw_div(a, b));
        // div_floor_floating (ATen's BinaryOps.h)
        if (b == zero) return pw_div(a, b);
        T mod = pw_fmod(a, b);
        T div = pw_div(pw_sub(a, mod), b);
        if (mod != zero && (b < zero) != (mod < zero)) div = pw_sub(div, one);
        T fd;
        if (div != zero) {
            fd = pw_floor(div);
            if (pw_sub(div, fd) > half) fd = pw_add(fd, one);
        } else {
            fd = pw_copysign(zero, pw_div(a, b));
        }
        return fd;
    }

    // --- ternary (input 0 of WHERE is the condition, given in cond)
    case RGPU_OP_WHERE: return cond ? b : w;
    case RGPU_OP_CLAMP: {   // a NaN value or a NaN bound gives NaN; otherwise min(max(x, lo), hi)
        T v = a;
        if (v != v) return v;
        if (A.p.has_lo) {
            if (b != b) return pw_nan<T>();
            v = v < b ? b : v;
        }
        if (A.p.has_hi) {
            if (w != w) return pw_nan<T>();
            v = w < v ? w : v;
        }
        return v;
    }
    case RGPU_OP_LERP:
        return pw_fabs(w) < half ? pw_add(a, pw_mul(w, pw_sub(b, a)))
                                 : pw_sub(b, pw_mul(pw_sub(b, a), pw_sub(one, w)));
    case RGPU_OP_ADDCMUL: return pw_add(a, pw_mul(pw_mul(pw_own_t<T>(A), b), w));
    case RGPU_OP_ADDCDIV: return pw_add(a, pw_div(pw_mul(pw_own_t<T>(A), b), w));

    // --- activation backwards: a = grad, b = input (or output)
    case RGPU_OP_THRESHOLD_BACKWARD: return b <= pw_own_t<T>(A) ? zero : a;
    case RGPU_OP_GELU_BACKWARD:
        if (A.p.approx_tanh) {
            const T kBeta = (T)(PW_SQRT2 * PW_2_SQRTPI * 0.5), kKappa = (T)0.044715;
            const T three = 3;
            T v = b;
            T x_sq = pw_mul(v, v), x_cube = pw_mul(x_sq, v);
            T inner = pw_mul(kBeta, pw_add(v, pw_mul(kKappa, x_cube)));
            T tanh_inner = pw_tanh(inner);
            T left = pw_mul(half, v), right = pw_add(one, tanh_inner);
            T left_derivative = pw_mul(half, right);
            T tanh_derivative = pw_sub(one, pw_mul(tanh_inner, tanh_inner));
            T inner_derivative = pw_mul(kBeta, pw_add(one, pw_mul(pw_mul(three, kKappa), x_sq)));
            T right_derivative = pw_mul(pw_mul(left, tanh_derivative), inner_derivative);
            return pw_mul(a, pw_add(left_derivative, right_derivative));
        } else {
            const T kAlpha = (T)PW_SQRT1_2, kBeta = (T)(PW_2_SQRTPI * PW_SQRT1_2 * 0.5);
            const T mhalf = (T)-0.5;
            T v = b;
            T cdf = pw_mul(half, pw_add(one, pw_erf(pw_mul(v, kAlpha))));
            T pdf = pw_mul(kBeta, pw_exp(pw_mul(pw_mul(v, v), mhalf)));
            return pw_mul(a, pw_add(cdf, pw_mul(v, pdf)));
        }
    case RGPU_OP_SILU_BACKWARD: {
        T sig = pw_div(one, pw_add(one, pw_exp(-b)));
        return pw_mul(pw_mul(a, sig), pw_add(one, pw_mul(b, pw_sub(one, sig))));
    }
    case RGPU_OP_SIGMOID_BACKWARD: return pw_mul(pw_mul(a, pw_sub(one, b)), b);
    case RGPU_OP_TANH_BACKWARD:    return pw_mul(a, pw_sub(one, pw_mul(b, b)));
    default: return zero;   // the host let no other op through
    }
}

// ---------------------------------------------------------------------------
// Integer compute (int64 held as uint64: + - * wrap; kern_i64 and op_binary's
// integer loop). Narrower signed dtypes arrive sign-extended, u8
// zero-extended, so comparisons on the int64 value are right for all.

PW_HD uint64_t pw_iop(const pw_args &A, uint64_t a, uint64_t b, uint64_t w, bool cond, bool &rb) {
    switch (A.op) {
    // --- binary arithmetic (op_binary; no DIV here)
    case RGPU_OP_ADD_TENSOR: return A.alpha_one ? a + b : a + A.alpha_i * b;
    case RGPU_OP_SUB_TENSOR: return A.alpha_one ? a - b : a - A.alpha_i * b;
    case RGPU_OP_MUL_TENSOR: return a * b;
    // --- pointwise
    case RGPU_OP_NEG:   return 0 - a;
    case RGPU_OP_ABS:   return op_pw_sv(a) < 0 ? 0 - a : a;
    case RGPU_OP_FLOOR: case RGPU_OP_CEIL: case RGPU_OP_ROUND: case RGPU_OP_TRUNC: return a;
    case RGPU_OP_SIGN:  return (uint64_t)(int64_t)((0 < op_pw_sv(a)) - (op_pw_sv(a) < 0));
    case RGPU_OP_RELU:  return op_pw_sv(a) < 0 ? 0 : a;
    case RGPU_OP_BITWISE_NOT: return ~a;
    case RGPU_OP_LOGICAL_NOT: rb = a == 0; return 0;
    case RGPU_OP_ISNAN:       rb = false; return 0;
    case RGPU_OP_POW:     return op_pw_powi(a, b);
    case RGPU_OP_MAXIMUM: return op_pw_sv(a) < op_pw_sv(b) ? b : a;
    case RGPU_OP_MINIMUM: return op_pw_sv(b) < op_pw_sv(a) ? b : a;
    case RGPU_OP_FMAX:    return op_pw_sv(a) < op_pw_sv(b) ? b : a;
    case RGPU_OP_FMIN:    return op_pw_sv(b) < op_pw_sv(a) ? b : a;
    case RGPU_OP_SIGNBIT: rb = op_pw_sv(a) < 0; return 0;
    case RGPU_OP_EQ: rb = a == b; return 0;
    case RGPU_OP_NE: rb = a != b; return 0;
    case RGPU_OP_LT: rb = op_pw_sv(a) < op_pw_sv(b); return 0;
    case RGPU_OP_LE: rb = op_pw_sv(a) <= op_pw_sv(b); return 0;
    case RGPU_OP_GT: rb = op_pw_sv(a) > op_pw_sv(b); return 0;
    case RGPU_OP_GE: rb = op_pw_sv(a) >= op_pw_sv(b); return 0;
    case RGPU_OP_LOGICAL_AND: rb = a != 0 && b != 0; return 0;
    case RGPU_OP_LOGICAL_OR:  rb = a != 0 || b != 0; return 0;
    case RGPU_OP_LOGICAL_XOR: rb = (a != 0) != (b != 0); return 0;
    case RGPU_OP_BITWISE_AND: return a & b;
    case RGPU_OP_BITWISE_OR:  return a | b;
    case RGPU_OP_BITWISE_XOR: return a ^ b;
    // integer %, fmod and div by zero raise ZeroDivisionError in ATen
    case RGPU_OP_REMAINDER: {
        if (b == 0) { pw_flag_zero_div(A); return 0; }
        uint64_t m = op_pw_imod(a, b);
        if (m != 0 && ((op_pw_sv(m) < 0) != (op_pw_sv(b) < 0))) m += b;
        return m;
    }
    case RGPU_OP_FMOD:
        if (b == 0) { pw_flag_zero_div(A); return 0; }
        return op_pw_imod(a, b);
    case RGPU_OP_DIV_MODE: {
        if (b == 0) { pw_flag_zero_div(A); return 0; }
        uint64_t q = op_pw_idiv(a, b);
        // div_floor_integer: step down when the signs differ and it was inexact
        if (A.p.mode == DIV_FLOOR && (op_pw_sv(a) < 0) != (op_pw_sv(b) < 0) && op_pw_imod(a, b) != 0) q -= 1;
        return q;
    }
    case RGPU_OP_WHERE: return cond ? b : w;
    case RGPU_OP_CLAMP: {
        uint64_t v = a;
        if (A.p.has_lo && op_pw_sv(v) < op_pw_sv(b)) v = b;
        if (A.p.has_hi && op_pw_sv(w) < op_pw_sv(v)) v = w;
        return v;
    }
    case RGPU_OP_ADDCMUL: return a + A.p.own_i * b * w;
    case RGPU_OP_THRESHOLD_BACKWARD: return op_pw_sv(b) <= op_pw_sv(A.p.own_i) ? 0 : a;
    default: return 0;   // the host let no other op through
    }
}

// Bool compute: values 0/1 (kern_bool and op_binary's bool loop).
PW_HD bool pw_bop(const pw_args &A, bool a, bool b, bool w, bool cond) {
    switch (A.op) {
    case RGPU_OP_ADD_TENSOR: return a || (A.alpha_b && b);
    case RGPU_OP_MUL_TENSOR: return a && b;
    case RGPU_OP_SIGN:       return a;
    case RGPU_OP_LOGICAL_NOT: case RGPU_OP_BITWISE_NOT: return !a;
    case RGPU_OP_ISNAN: case RGPU_OP_SIGNBIT: return false;
    case RGPU_OP_MAXIMUM: case RGPU_OP_LOGICAL_OR: case RGPU_OP_BITWISE_OR: case RGPU_OP_FMAX: return a | b;
    case RGPU_OP_MINIMUM: case RGPU_OP_LOGICAL_AND: case RGPU_OP_BITWISE_AND: case RGPU_OP_FMIN: return a & b;
    case RGPU_OP_LOGICAL_XOR: case RGPU_OP_BITWISE_XOR: case RGPU_OP_NE: return a ^ b;
    case RGPU_OP_EQ: return a == b;
    case RGPU_OP_LT: return a < b;
    case RGPU_OP_LE: return a <= b;
    case RGPU_OP_GT: return a > b;
    case RGPU_OP_GE: return a >= b;
    case RGPU_OP_WHERE: return cond ? b : w;
    default: return false;
    }
}

// ---------------------------------------------------------------------------
// Issue 13's special functions (op/special_math.h, the CPU's very code): a
// kernel of their own (SP), so the training ops' kernel stays small.
PW_HD float pw_special(int op, float a, float b) { return op_special_f(op, a, b); }
PW_HD double pw_special(int op, double a, double b) { return op_special_d(op, a, b); }

// Ops whose float evaluation goes through double (op/pw_math.h, the CPU's
// code): they run in the special-function kernel too, so the training ops'
// f32 kernel holds no FP64 instruction.
static inline bool pw_heavy_op(int op) {
    return op == RGPU_OP_ERFINV || op == RGPU_OP_DIGAMMA || op == RGPU_OP_POLYGAMMA;
}
template <typename T> PW_HD T pw_heavy(const pw_args &A, T a, T b) {
    switch (A.op) {
    case RGPU_OP_ERFINV:    return pw_erfinv(a);
    case RGPU_OP_DIGAMMA:   return pw_digamma(a);
    case RGPU_OP_POLYGAMMA: return pw_polygamma(A.p.n, a);
    default:                return pw_special(A.op, a, b);
    }
}

// One element: load the inputs into the compute type (rounded / wrapped to
// the compute dtype where the CPU does), compute, store into out's dtype.
// off[k]: byte offset of operand k.

template <int CT, bool SP>
PW_HD void pw_elem(const pw_args &A, const long long *off) {
    char *o = A.base[0] + off[0];
    bool cond = false, rb = false;
    if constexpr (CT == OP_CT_F32 || CT == OP_CT_F64) {
        typedef typename std::conditional<CT == OP_CT_F32, float, double>::type T;
        T x[PW_MAX_IN] = { 0, 0, 0 };
PW_UNROLL
        for (int k = 1; k <= PW_MAX_IN; k++) {
            if (k > A.nin) break;
            const char *p = A.base[k] != NULL ? A.base[k] + off[k] : NULL;
            if (k == 1 && A.p.cond_first) { cond = p != NULL ? op_load_bool(p, A.dt[k]) : A.sb[k] != 0; continue; }
            T v = p != NULL ? pw_load_t<T>(p, A.dt[k]) : pw_scalar_t<T>(A, k);
            if constexpr (CT == OP_CT_F32) { if (A.fix_in[k]) v = (T)pw_round_half((float)v, A.cdt); }
            x[k - 1] = v;
        }
        T r;
        if constexpr (SP) r = pw_heavy<T>(A, x[0], x[1]);
        else r = pw_fop<T>(A, x[0], x[1], x[2], cond, rb);
        if (A.res_bool) { op_store_u64(o, A.dt[0], rb); return; }
        if constexpr (CT == OP_CT_F32) {
            if (A.fix_out) r = (T)pw_round_half((float)r, A.cdt);
            op_store_f32(o, A.dt[0], (float)r);
        } else {
            op_store_f64(o, A.dt[0], (double)r);
        }
    } else if constexpr (CT == OP_CT_I64) {
        uint64_t x[PW_MAX_IN] = { 0, 0, 0 };
PW_UNROLL
        for (int k = 1; k <= PW_MAX_IN; k++) {
            if (k > A.nin) break;
            const char *p = A.base[k] != NULL ? A.base[k] + off[k] : NULL;
            if (k == 1 && A.p.cond_first) { cond = p != NULL ? op_load_bool(p, A.dt[k]) : A.sb[k] != 0; continue; }
            uint64_t v = p != NULL ? op_load_u64(p, A.dt[k]) : (uint64_t)A.su[k];
            if (A.fix_in[k]) v = pw_wrap_int(v, A.cdt);
            x[k - 1] = v;
        }
        uint64_t r = pw_iop(A, x[0], x[1], x[2], cond, rb);
        if (A.res_bool) { op_store_u64(o, A.dt[0], rb); return; }
        if (A.fix_out) r = pw_wrap_int(r, A.cdt);
        op_store_u64(o, A.dt[0], r);
    } else {
        bool x[PW_MAX_IN] = { false, false, false };
PW_UNROLL
        for (int k = 1; k <= PW_MAX_IN; k++) {
            if (k > A.nin) break;
            const char *p = A.base[k] != NULL ? A.base[k] + off[k] : NULL;
            bool v = p != NULL ? op_load_bool(p, A.dt[k]) : A.sb[k] != 0;
            if (k == 1 && A.p.cond_first) { cond = v; continue; }
            x[k - 1] = v;
        }
        op_store_u64(o, A.dt[0], pw_bop(A, x[0], x[1], x[2], cond));
    }
}

// Linear index i (row-major over the iteration dims) -> byte offsets.
template <int CT, bool ONED, bool SP>
PW_HD void pw_apply(const pw_args &A, long long i) {
    long long off[PW_NOPS];
    if (ONED) {
PW_UNROLL
        for (int k = 0; k < PW_NOPS; k++) off[k] = i * A.st[k][0];
    } else {
PW_UNROLL
        for (int k = 0; k < PW_NOPS; k++) off[k] = 0;
        if (A.i32) {
            unsigned rem = (unsigned)i;
            for (int d = A.ndim - 1; d >= 0; d--) {
                long long id = rgpu_fastdiv_digit(rem, A.dmul[d], A.dshift[d], (unsigned)A.sizes[d]);
PW_UNROLL
                for (int k = 0; k < PW_NOPS; k++) off[k] += id * A.st[k][d];
            }
        } else {
            long long rem = i;
            for (int d = A.ndim - 1; d >= 0; d--) {
                long long s = A.sizes[d], q = rem / s, id = rem - q * s;
                rem = q;
PW_UNROLL
                for (int k = 0; k < PW_NOPS; k++) off[k] += id * A.st[k][d];
            }
        }
    }
    pw_elem<CT, SP>(A, off);
}

template <int CT, bool ONED, bool SP = false>
__global__ void __launch_bounds__(PW_THREADS) pw_kernel(const __grid_constant__ pw_args A) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < A.numel; i += stride)
        pw_apply<CT, ONED, SP>(A, i);
}

// ---------------------------------------------------------------------------
// The contiguous kernels (ATen's vectorized elementwise loop): out and every
// tensor input 1-d contiguous, one dtype DT (float32, float16 or bfloat16),
// 16-byte aligned; scalar inputs as in pw_kernel (pw_vec_dtype decides). A
// thread loads 16 bytes per operand (4 or 8 elements), computes each element
// as pw_elem's OP_CT_F32 path does (the same conversions, rounding and
// formula: the same bits) and stores 16 bytes; the last numel % V elements
// go one per thread. The dtype is a template argument (no switch per
// element), and so is the op for the training set's hot ops (pw_vec_op);
// indices are 32-bit when the tensor has < 2^31 vectors.

struct alignas(16) pw_v16 { unsigned w[4]; };

template <int DT> struct pw_vec_dt {
    static constexpr int V = DT == RGPU_F32 ? 4 : 8;      // elements per 16 bytes
    static constexpr int ES = 16 / V;
};
// element j of a 16-byte vector, and its store (op_load_f32 / op_store_f32 of DT)
template <int DT> PW_HD float pw_vec_get(const pw_v16 &q, int j) {
    if constexpr (DT == RGPU_F32) return rgpu_f32_from_bits(q.w[j]);
    else {
        uint16_t h = (uint16_t)(q.w[j >> 1] >> ((j & 1) * 16));
        return DT == RGPU_F16 ? rgpu_half_to_float(h) : rgpu_bf16_to_float(h);
    }
}
template <int DT> PW_HD void pw_vec_set(pw_v16 &q, int j, float v) {
    if constexpr (DT == RGPU_F32) q.w[j] = rgpu_f32_bits(v);
    else {
        unsigned h = DT == RGPU_F16 ? rgpu_float_to_half(v) : rgpu_float_to_bf16(v);
        q.w[j >> 1] = (j & 1) ? (q.w[j >> 1] & 0xffffu) | (h << 16) : h;
    }
}

// One element from its inputs in float (pw_elem's OP_CT_F32 steps after the loads).
template <int OP>
PW_HD float pw_vec_one(const pw_args &A, const float *in) {
    float x[PW_MAX_IN] = { 0, 0, 0 };
PW_UNROLL
    for (int k = 1; k <= PW_MAX_IN; k++) {
        if (k > A.nin) break;
        float v = A.base[k] != NULL ? in[k - 1] : A.sf[k];
        if (A.fix_in[k]) v = pw_round_half(v, A.cdt);
        x[k - 1] = v;
    }
    bool rb = false;
    float r = pw_fop<float, OP>(A, x[0], x[1], x[2], false, rb);
    if (A.fix_out) r = pw_round_half(r, A.cdt);
    return r;
}

template <int DT, int OP, typename I>
PW_HD void pw_vec_apply(const pw_args &A, I v) {
    constexpr int V = pw_vec_dt<DT>::V;
    pw_v16 q[PW_MAX_IN], r;
PW_UNROLL
    for (int k = 1; k <= PW_MAX_IN; k++) {
        if (k > A.nin) break;
        if (A.base[k] != NULL) q[k - 1] = ((const pw_v16 *)A.base[k])[v];
    }
PW_UNROLL
    for (int j = 0; j < V; j++) {
        float in[PW_MAX_IN];
PW_UNROLL
        for (int k = 0; k < PW_MAX_IN; k++) in[k] = k < A.nin && A.base[k + 1] != NULL ? pw_vec_get<DT>(q[k], j) : 0.0f;
        pw_vec_set<DT>(r, j, pw_vec_one<OP>(A, in));
    }
    ((pw_v16 *)A.base[0])[v] = r;
}

template <int DT, int OP>
PW_HD void pw_vec_tail(const pw_args &A, long long i) {
    constexpr int ES = pw_vec_dt<DT>::ES;
    float in[PW_MAX_IN];
PW_UNROLL
    for (int k = 0; k < PW_MAX_IN; k++)
        in[k] = k < A.nin && A.base[k + 1] != NULL ? op_load_f32(A.base[k + 1] + i * ES, DT) : 0.0f;
    op_store_f32(A.base[0] + i * ES, DT, pw_vec_one<OP>(A, in));
}

// (minimum 1 block per SM: ptxas otherwise holds the three-input 16-bit
// kernels to 48 registers and spills)
template <int DT, int OP>
__global__ void __launch_bounds__(PW_THREADS, 1) pw_vec_kernel(const __grid_constant__ pw_args A) {
    constexpr int V = pw_vec_dt<DT>::V;
    long long nv = A.numel / V;
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
    // (not unrolled: four iterations' loads in flight at once spill the three-input ops)
    if (nv < (1LL << 31)) {
PW_NO_UNROLL
        for (unsigned v = (unsigned)t; v < (unsigned)nv; v += (unsigned)stride) pw_vec_apply<DT, OP, unsigned>(A, v);
    } else {
PW_NO_UNROLL
        for (long long v = t; v < nv; v += stride) pw_vec_apply<DT, OP, long long>(A, v);
    }
    if (t < A.numel - nv * V) pw_vec_tail<DT, OP>(A, nv * V + t);
}

// Two dims (rows, C), C a multiple of V, out contiguous: the row-broadcast
// binary arithmetic (x + bias, x * scale over the rows, x * s[:, None]). A
// vector lies within a row; a mode-1 operand loads the same 16 bytes for
// every row, a mode-2 one a single element for the whole vector.
template <int DT, int OP>
__global__ void __launch_bounds__(PW_THREADS, 1) pw_bvec_kernel(const __grid_constant__ pw_args A) {
    constexpr int V = pw_vec_dt<DT>::V;
    const unsigned nv = (unsigned)(A.numel / V);
    const unsigned stride = gridDim.x * blockDim.x;
PW_NO_UNROLL
    for (unsigned v = blockIdx.x * blockDim.x + threadIdx.x; v < nv; v += stride) {
        unsigned r = rgpu_fastdiv(v, A.vmul, A.vshift), cb = v - r * A.vcols;
        pw_v16 q[PW_MAX_IN], o;
        float one[PW_MAX_IN] = { 0, 0, 0 };
PW_UNROLL
        for (int k = 1; k <= PW_MAX_IN; k++) {
            if (k > A.nin) break;
            if (A.base[k] == NULL) continue;
            if (A.vmode[k] == 0) q[k - 1] = ((const pw_v16 *)A.base[k])[v];
            else if (A.vmode[k] == 1) q[k - 1] = ((const pw_v16 *)A.base[k])[cb];
            else one[k - 1] = op_load_f32(A.base[k] + (long long)r * A.st[k][0], DT);
        }
PW_UNROLL
        for (int j = 0; j < V; j++) {
            float in[PW_MAX_IN];
PW_UNROLL
            for (int k = 0; k < PW_MAX_IN; k++)
                in[k] = k >= A.nin || A.base[k + 1] == NULL ? 0.0f
                      : A.vmode[k + 1] == 2 ? one[k] : pw_vec_get<DT>(q[k], j);
            pw_vec_set<DT>(o, j, pw_vec_one<OP>(A, in));
        }
        ((pw_v16 *)A.base[0])[v] = o;
    }
}

// ---------------------------------------------------------------------------
// TRIL / TRIU: x is (..., R, C); out[..., i, j] = x[..., i, j] where kept
// (tril: j <= i + k, triu: j >= i + k), else 0. One thread per element of out.

struct pw_tri_args {
    int ndim;
    int esz;
    bool upper;
    long long k;                          // clamped to [-R, C]
    long long numel;
    long long sizes[RGPU_MAX_DIMS];
    long long xst[RGPU_MAX_DIMS], ost[RGPU_MAX_DIMS];   // bytes
    const char *x;
    char *o;
};

PW_HD void pw_tri_apply(const pw_tri_args &A, long long i) {
    long long rem = i, xo = 0, oo = 0, row = 0, col = 0;
    for (int d = A.ndim - 1; d >= 0; d--) {
        long long s = A.sizes[d], q = rem / s, id = rem - q * s;
        rem = q;
        if (d == A.ndim - 1) col = id;
        if (d == A.ndim - 2) row = id;
        xo += id * A.xst[d];
        oo += id * A.ost[d];
    }
    long long C = A.sizes[A.ndim - 1];
    long long lo = A.upper ? row + A.k : 0, hi = A.upper ? C : row + A.k + 1;
    bool keep = col >= lo && col < hi;
    const char *xp = A.x + xo;
    char *op = A.o + oo;
    switch (A.esz) {   // all-zero bytes are 0 in every dtype
    case 1: *(uint8_t *)op = keep ? *(const uint8_t *)xp : 0; break;
    case 2: *(uint16_t *)op = keep ? *(const uint16_t *)xp : 0; break;
    case 4: *(uint32_t *)op = keep ? *(const uint32_t *)xp : 0; break;
    default: *(uint64_t *)op = keep ? *(const uint64_t *)xp : 0; break;
    }
}

__global__ void __launch_bounds__(PW_THREADS) pw_tri_kernel(const __grid_constant__ pw_tri_args A) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < A.numel; i += stride)
        pw_tri_apply(A, i);
}

// ---------------------------------------------------------------------------
// Host side: validation (cpu_kernels.c's and cpu_pointwise.c's checks and
// messages) and the kernel arguments.


// An operand before iteration set-up: a view, or a scalar of dtype sdt held
// in buf (8 bytes), or an absent optional input (view NULL, buf zero).
struct pw_operand {
    const rgpu_view *view;
    uint64_t buf;
    int sdt;
};

// Broadcast the operands to out (rgpu_op_iter_init's checks and messages), order
// dims by out's strides (largest outermost, size-1 dims dropped), coalesce,
// and fill the addressing part of A. Scalars become the compute-type values.
static rgpu_status pw_setup_iter(pw_args *A, rgpu_view *out, const pw_operand *ins, int nin,
                                 int op, char *err, size_t errlen) {
    int nd = out->ndim;
    long long st[PW_NOPS][RGPU_MAX_DIMS];
    memset(st, 0, sizeof st);
    long long esz0 = (long long)rgpu_dtype_size(out->dtype);
    A->nin = nin;
    A->numel = rgpu_op_numel(out);
    A->base[0] = (char *)out->data;
    A->dt[0] = out->dtype;
    for (int d = 0; d < nd; d++) st[0][d] = out->strides[d] * esz0;
    for (int k = 0; k < nin; k++) {
        const rgpu_view *v = ins[k].view;
        if (v == NULL) {
            int sdt = ins[k].sdt;
            const char *p = (const char *)&ins[k].buf;
            A->base[k + 1] = NULL;
            A->dt[k + 1] = sdt;
            A->sf[k + 1] = op_load_f32(p, sdt);
            A->sd[k + 1] = op_load_f64(p, sdt);
            A->su[k + 1] = op_load_u64(p, sdt);
            A->sb[k + 1] = op_load_bool(p, sdt);
            continue;
        }
        A->base[k + 1] = (char *)v->data;
        A->dt[k + 1] = v->dtype;
        if (v->ndim > nd)
            RETURN_ERROR(RGPU_ERR_SHAPE, "%s: in[%d] has %d dims, more than the output's %d",
                    rgpu_op_name(op), k, v->ndim, nd);
        long long esz = (long long)rgpu_dtype_size(v->dtype);
        int lead = nd - v->ndim;
        for (int d = 0; d < nd; d++) {
            if (d < lead) continue;
            long long s = v->sizes[d - lead];
            if (s == out->sizes[d]) st[k + 1][d] = (s == 1) ? 0 : v->strides[d - lead] * esz;
            else if (s != 1)
                RETURN_ERROR(RGPU_ERR_SHAPE, "%s: in[%d] size %lld at dim %d does not broadcast to %lld",
                        rgpu_op_name(op), k, s, d - lead, (long long)out->sizes[d]);
        }
    }

    int perm[RGPU_MAX_DIMS];
    int np = 0;
    for (int d = 0; d < nd; d++) {
        if (out->sizes[d] == 1) continue;
        int j = np++;
        while (j > 0 && st[0][perm[j - 1]] < st[0][d]) { perm[j] = perm[j - 1]; j--; }
        perm[j] = d;
    }
    int n = 0;
    for (int i = 0; i < np; i++) {
        int d = perm[i];
        if (n > 0) {
            bool merge = true;
            for (int k = 0; k < PW_NOPS; k++)
                if (A->st[k][n - 1] != st[k][d] * out->sizes[d]) { merge = false; break; }
            if (merge) {
                A->sizes[n - 1] *= out->sizes[d];
                for (int k = 0; k < PW_NOPS; k++) A->st[k][n - 1] = st[k][d];
                continue;
            }
        }
        A->sizes[n] = out->sizes[d];
        for (int k = 0; k < PW_NOPS; k++) A->st[k][n] = st[k][d];
        n++;
    }
    if (n == 0) {   // 0-d or all size-1: one element
        A->sizes[0] = 1;
        for (int k = 0; k < PW_NOPS; k++) A->st[k][0] = 0;
        n = 1;
    }
    A->ndim = n;
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// Binary arithmetic (cpu_kernels.c op_binary): out = a OP b, compute type
// from the OUTPUT dtype, each operand loaded straight into it; the scalar
// "other" becomes a 0-d operand in the compute type; rsub swaps operands.

static rgpu_status pw_prepare_binary(const rgpu_exec *e, pw_args *A, char *err, size_t errlen) {
    FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, false, err, errlen));
    op_binary_args bin;
    FORWARD_IF_ERROR(rgpu_op_binary_check(e, &bin, err, errlen));
    int other_arg = bin.other_arg;
    rgpu_view *out = e->out[0];
    memset(A, 0, sizeof *A);
    A->op = bin.kind;
    A->ct = bin.ct;
    A->cdt = out->dtype;
    A->alpha_one = bin.alpha_one;
    A->alpha_f = bin.alpha_f;
    A->alpha_d = bin.alpha_d;
    A->alpha_i = bin.alpha_i;
    A->alpha_b = bin.alpha_b;

    pw_operand ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].view = e->in[0];
    if (other_arg >= 0) {
        ops[1].sdt = op_ct_dtype(A->ct);
        rgpu_op_scalar_to(&e->args[other_arg], ops[1].sdt, &ops[1].buf);
    } else {
        ops[1].view = e->in[1];
    }
    if (bin.swap) { pw_operand t = ops[0]; ops[0] = ops[1]; ops[1] = t; }
    return pw_setup_iter(A, out, ops, 2, e->op, err, errlen);
}

// ---------------------------------------------------------------------------
// The training set's pointwise ops (cpu_pointwise.c op_pointwise).

static rgpu_status pw_prepare_pointwise(const rgpu_exec *e, const pw_layout *L, pw_args *A, char *err, size_t errlen) {
    const char *name = rgpu_op_name(e->op);
    bool present[PW_MAX_IN];
    FORWARD_IF_ERROR(rgpu_op_pointwise_check(e, L, present, err, errlen));
    const rgpu_arg *dta = &e->args[L->nargs - 1];
    rgpu_view *out = e->out[0];

    memset(A, 0, sizeof *A);
    A->op = e->op;
    A->cdt = (int)dta->v.i;
    A->ct = rgpu_op_pointwise_compute_class(A->cdt);
    A->res_bool = L->res_bool;
    if (!rgpu_op_pointwise_supports(e->op, A->ct))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: not implemented for compute dtype %s", name, rgpu_dtype_name(A->cdt));

    FORWARD_IF_ERROR(rgpu_op_pw_params_of(e, L, present, A->cdt, A->ct, &A->p, err, errlen));

    // operands: tensors as they are; scalars as 0-d values in the compute
    // dtype (lerp's weight in opmath, as ATen's lerp_scalar)
    pw_operand ops[PW_MAX_IN];
    memset(ops, 0, sizeof ops);
    bool half_cdt = A->cdt == RGPU_F16 || A->cdt == RGPU_BF16;
    for (int i = 0; i < e->n_in; i++) {
        int dt;
        if (e->in[i] != NULL) {
            ops[i].view = e->in[i];
            dt = e->in[i]->dtype;
        } else {
            int sdt = A->cdt;
            if (e->op == RGPU_OP_LERP) sdt = A->ct == OP_CT_F64 ? RGPU_F64 : RGPU_F32;
            if (present[i]) rgpu_op_scalar_to(&e->args[i], sdt, &ops[i].buf);
            ops[i].sdt = sdt;
            dt = sdt;
        }
        if (i == 0 && A->p.cond_first) continue;
        if (A->ct == OP_CT_F32)
            A->fix_in[i + 1] = half_cdt && dt != A->cdt && !(e->op == RGPU_OP_LERP && e->in[i] == NULL);
        else if (A->ct == OP_CT_I64)
            A->fix_in[i + 1] = dt != A->cdt;
    }
    if (!A->res_bool) {
        if (A->ct == OP_CT_F32) A->fix_out = half_cdt && out->dtype != A->cdt;
        else if (A->ct == OP_CT_I64) A->fix_out = out->dtype != A->cdt;
    }
    if (rgpu_op_numel(out) == 0) { A->numel = 0; return RGPU_OK; }
    return pw_setup_iter(A, out, ops, e->n_in, e->op, err, errlen);
}

// ---------------------------------------------------------------------------
// TRIL / TRIU (cpu_pointwise.c op_tri)

static rgpu_status pw_prepare_tri(const rgpu_exec *e, bool upper, pw_tri_args *A, char *err, size_t errlen) {
    FORWARD_IF_ERROR(rgpu_op_pointwise_check_tri(e, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *out = e->out[0];
    int nd = x->ndim;
    memset(A, 0, sizeof *A);
    A->numel = rgpu_op_numel(out);
    if (A->numel == 0) return RGPU_OK;

    long long R = x->sizes[nd - 2], C = x->sizes[nd - 1];
    long long k = e->args[0].v.i;   // clamped to [-R, C]: beyond, all or nothing is kept
    if (k > C) k = C;
    if (k < -R) k = -R;
    long long esz = (long long)rgpu_dtype_size(x->dtype);
    A->ndim = nd;
    A->esz = (int)esz;
    A->upper = upper;
    A->k = k;
    for (int d = 0; d < nd; d++) {
        A->sizes[d] = x->sizes[d];
        A->xst[d] = x->strides[d] * esz;
        A->ost[d] = out->strides[d] * esz;
    }
    A->x = (const char *)x->data;
    A->o = (char *)out->data;
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// Launchers (take the stream)

static unsigned pw_blocks(long long numel) {
    long long nb = (numel + PW_THREADS - 1) / PW_THREADS;
    return (unsigned)(nb > PW_MAX_BLOCKS ? PW_MAX_BLOCKS : nb);
}

static bool pw_vec_enabled() {
    static int on = -1;
    return rgpu_cuda_env_flag(&on, "RGPU_CUDA_PW_VEC");
}

// The ops with contiguous kernels: the training set's activations and their
// backwards, arithmetic and the optimizers' (one kernel per op and dtype, the
// op fixed at compile time; the others run on pw_kernel).
#define PW_VEC_OPS(X) \
    X(RGPU_OP_ADD_TENSOR) X(RGPU_OP_SUB_TENSOR) X(RGPU_OP_MUL_TENSOR) X(RGPU_OP_DIV_TENSOR) \
    X(RGPU_OP_NEG) X(RGPU_OP_EXP) X(RGPU_OP_LOG) X(RGPU_OP_SQRT) X(RGPU_OP_RSQRT) X(RGPU_OP_RECIPROCAL) \
    X(RGPU_OP_RELU) X(RGPU_OP_GELU) X(RGPU_OP_SILU) X(RGPU_OP_TANH) X(RGPU_OP_SIGMOID) \
    X(RGPU_OP_THRESHOLD_BACKWARD) X(RGPU_OP_GELU_BACKWARD) X(RGPU_OP_SILU_BACKWARD) \
    X(RGPU_OP_TANH_BACKWARD) X(RGPU_OP_SIGMOID_BACKWARD) \
    X(RGPU_OP_ADDCMUL) X(RGPU_OP_ADDCDIV) X(RGPU_OP_LERP) X(RGPU_OP_MAXIMUM) X(RGPU_OP_CLAMP)

static bool pw_vec_op(int op) {
    switch (op) {
#define PW_VEC_CASE(o) case o:
    PW_VEC_OPS(PW_VEC_CASE)
#undef PW_VEC_CASE
        return true;
    default: return false;
    }
}

// What every 16-byte kernel asks of A: ndim dims, a float compute with a
// float result (no WHERE), out float32/float16/bfloat16, turned on. Its
// dtype, or -1.
static int pw_vec_base_dtype(const pw_args &A, int ndim) {
    if (A.ct != OP_CT_F32 || A.ndim != ndim || A.res_bool || A.p.cond_first || !pw_vec_enabled()) return -1;
    int dt = A.dt[0];
    return dt == RGPU_F32 || dt == RGPU_F16 || dt == RGPU_BF16 ? dt : -1;
}

// The dtype of A's contiguous kernel (pw_vec_kernel), or -1 for pw_kernel;
// hot: only for the ops of PW_VEC_OPS (pw_multi_kernel takes any, the op
// read at run time).
static int pw_vec_dtype(const pw_args &A, bool hot = true) {
    int dt = pw_vec_base_dtype(A, 1);
    if (dt < 0 || (hot && !pw_vec_op(A.op))) return -1;
    long long es = (long long)op_dtype_esize(dt);
    for (int k = 0; k <= A.nin; k++) {
        if (k > 0 && A.base[k] == NULL) continue;   // a scalar
        if (A.dt[k] != dt || A.st[k][0] != es || ((uintptr_t)A.base[k] & 15) != 0) return -1;
    }
    return dt;
}

// A held cast (rgpu_cuda_pw_cast: two different dtypes of float32, float16 and
// bfloat16) with both operands contiguous and 16-byte aligned.
static bool pw_vec_cast_ok(const pw_args &A) {
    if (!pw_vec_enabled()) return false;
    for (int k = 0; k <= 1; k++)
        if (A.st[k][0] != (long long)op_dtype_esize(A.dt[k]) || ((uintptr_t)A.base[k] & 15) != 0) return false;
    return true;
}

// Whether A runs on pw_bvec_kernel: two dims (rows, C) after coalescing, one
// dtype of float32/float16/bfloat16, out contiguous and aligned, C a
// multiple of the vector width, binary arithmetic; fills the operand modes.
static bool pw_bvec_prepare(pw_args *A) {
    int dt = pw_vec_base_dtype(*A, 2);
    if (dt < 0 || A->numel >= (1LL << 31)) return false;
    if (A->op != RGPU_OP_ADD_TENSOR && A->op != RGPU_OP_SUB_TENSOR && A->op != RGPU_OP_MUL_TENSOR &&
        A->op != RGPU_OP_DIV_TENSOR)
        return false;
    long long es = (long long)op_dtype_esize(dt), C = A->sizes[1], V = 16 / es;
    if (C % V != 0) return false;
    for (int k = 0; k <= A->nin; k++) {
        if (k > 0 && A->base[k] == NULL) continue;   // a scalar
        if (A->dt[k] != dt) return false;
        bool aligned = ((uintptr_t)A->base[k] & 15) == 0;
        if (A->st[k][0] == C * es && A->st[k][1] == es && aligned) A->vmode[k] = 0;
        else if (k > 0 && A->st[k][0] == 0 && A->st[k][1] == es && aligned) A->vmode[k] = 1;
        else if (k > 0 && A->st[k][1] == 0) A->vmode[k] = 2;
        else return false;
        if (k == 0 && A->vmode[0] != 0) return false;
    }
    A->vcols = (unsigned)(C / V);
    rgpu_fastdiv_init(A->vcols, &A->vmul, &A->vshift);
    return true;
}

// pw_vec_kernel<DT, OP> for A's op (one of PW_VEC_OPS).
template <int DT>
static void pw_vec_launch(const pw_args &A, unsigned nb, cudaStream_t s) {
    switch (A.op) {
#define PW_VEC_CASE(o) case o: pw_vec_kernel<DT, o><<<nb, PW_THREADS, 0, s>>>(A); break;
    PW_VEC_OPS(PW_VEC_CASE)
#undef PW_VEC_CASE
    default: break;   // pw_vec_dtype let no other op through
    }
}

template <int DT>
static void pw_bvec_launch(const pw_args &A, unsigned nb, cudaStream_t s) {
    switch (A.op) {
    case RGPU_OP_ADD_TENSOR: pw_bvec_kernel<DT, RGPU_OP_ADD_TENSOR><<<nb, PW_THREADS, 0, s>>>(A); break;
    case RGPU_OP_SUB_TENSOR: pw_bvec_kernel<DT, RGPU_OP_SUB_TENSOR><<<nb, PW_THREADS, 0, s>>>(A); break;
    case RGPU_OP_MUL_TENSOR: pw_bvec_kernel<DT, RGPU_OP_MUL_TENSOR><<<nb, PW_THREADS, 0, s>>>(A); break;
    default:                 pw_bvec_kernel<DT, RGPU_OP_DIV_TENSOR><<<nb, PW_THREADS, 0, s>>>(A); break;
    }
}

static rgpu_status pw_launch(const pw_args &A, cudaStream_t s, char *err, size_t errlen) {
    if (A.ndim == 2) {
        pw_args B = A;
        if (pw_bvec_prepare(&B)) {
            int dt = B.dt[0];
            unsigned nb = pw_blocks(B.numel / (dt == RGPU_F32 ? 4 : 8));
            if (dt == RGPU_F32) pw_bvec_launch<RGPU_F32>(B, nb, s);
            else if (dt == RGPU_F16) pw_bvec_launch<RGPU_F16>(B, nb, s);
            else pw_bvec_launch<RGPU_BF16>(B, nb, s);
            RGPU_CUDA_CHECK_LAUNCH(err, errlen);
            return RGPU_OK;
        }
    }
    int vdt = pw_vec_dtype(A);
    if (vdt >= 0) {
        long long V = vdt == RGPU_F32 ? 4 : 8;
        unsigned nb = pw_blocks((A.numel + V - 1) / V);
        if (vdt == RGPU_F32) pw_vec_launch<RGPU_F32>(A, nb, s);
        else if (vdt == RGPU_F16) pw_vec_launch<RGPU_F16>(A, nb, s);
        else pw_vec_launch<RGPU_BF16>(A, nb, s);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        return RGPU_OK;
    }
    unsigned nb = pw_blocks(A.numel);
    bool oned = A.ndim == 1;
    if (op_special_nin(A.op) != 0 || pw_heavy_op(A.op)) {   // special functions (op/special_math.h, pw_heavy; floating only)
        if (A.ct == OP_CT_F64) {
            if (oned) pw_kernel<OP_CT_F64, true, true><<<nb, PW_THREADS, 0, s>>>(A);
            else pw_kernel<OP_CT_F64, false, true><<<nb, PW_THREADS, 0, s>>>(A);
        } else {
            if (oned) pw_kernel<OP_CT_F32, true, true><<<nb, PW_THREADS, 0, s>>>(A);
            else pw_kernel<OP_CT_F32, false, true><<<nb, PW_THREADS, 0, s>>>(A);
        }
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        return RGPU_OK;
    }
    switch (A.ct) {
    case OP_CT_F32:
        if (oned) pw_kernel<OP_CT_F32, true><<<nb, PW_THREADS, 0, s>>>(A);
        else pw_kernel<OP_CT_F32, false><<<nb, PW_THREADS, 0, s>>>(A);
        break;
    case OP_CT_F64:
        if (oned) pw_kernel<OP_CT_F64, true><<<nb, PW_THREADS, 0, s>>>(A);
        else pw_kernel<OP_CT_F64, false><<<nb, PW_THREADS, 0, s>>>(A);
        break;
    case OP_CT_I64:
        if (oned) pw_kernel<OP_CT_I64, true><<<nb, PW_THREADS, 0, s>>>(A);
        else pw_kernel<OP_CT_I64, false><<<nb, PW_THREADS, 0, s>>>(A);
        break;
    default:
        if (oned) pw_kernel<OP_CT_BOOL, true><<<nb, PW_THREADS, 0, s>>>(A);
        else pw_kernel<OP_CT_BOOL, false><<<nb, PW_THREADS, 0, s>>>(A);
        break;
    }
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

static rgpu_status pw_tri_launch(const pw_tri_args &A, cudaStream_t s, char *err, size_t errlen) {
    pw_tri_kernel<<<pw_blocks(A.numel), PW_THREADS, 0, s>>>(A);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// Multi-tensor launches (common.cuh): held pw_args run by one kernel. Block b
// of the grid belongs to record r where blk0[r] <= b < blk0[r + 1]; record r's
// blocks stride over its elements exactly as its own launch's grid would, and
// each element goes through pw_apply, so every value is the one-launch value.

#define PW_BATCH_MAX 256               // records per multi-tensor launch

struct pw_multi_params {
    const pw_args *as;                 // device copy of the records' args
    int n;
    unsigned blk0[PW_BATCH_MAX + 1];
};

template <int CT>
__global__ void __launch_bounds__(PW_THREADS) pw_multi_kernel(const __grid_constant__ pw_multi_params P) {
    int lo = 0, hi = P.n - 1;
    unsigned b = blockIdx.x;
    while (lo < hi) {                  // the last r with blk0[r] <= b
        int mid = (lo + hi + 1) >> 1;
        if (P.blk0[mid] <= b) lo = mid; else hi = mid - 1;
    }
    const pw_args &A = P.as[lo];
    long long stride = (long long)(P.blk0[lo + 1] - P.blk0[lo]) * blockDim.x;
    long long i0 = (long long)(b - P.blk0[lo]) * blockDim.x + threadIdx.x;
    if constexpr (CT == OP_CT_F32) {
        if (A.vec4) {                  // pw_vec_kernel's loop, the op read from A
            long long nv = A.numel / 4;
            for (long long v = i0; v < nv; v += stride) pw_vec_apply<RGPU_F32, -1, long long>(A, v);
            if (nv * 4 + i0 < A.numel) pw_vec_tail<RGPU_F32, -1>(A, nv * 4 + i0);
            return;
        }
    }
    if (CT == OP_CT_F32 && A.op == RGPU_OP_COPY) {   // a cast (rgpu_cuda_pw_cast)
        for (long long i = i0; i < A.numel; i += stride)
            op_store_f32(A.base[0] + i * A.st[0][0], A.dt[0], op_load_f32(A.base[1] + i * A.st[1][0], A.dt[1]));
        return;
    }
    for (long long i = i0; i < A.numel; i += stride)
        pw_apply<CT, true, false>(A, i);
}

// A held cast launched alone: cast_kernel's values (op_load_f32, op_store_f32).
__global__ void __launch_bounds__(PW_THREADS) pw_cast_kernel(const __grid_constant__ pw_args A) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < A.numel; i += stride)
        op_store_f32(A.base[0] + i * A.st[0][0], A.dt[0], op_load_f32(A.base[1] + i * A.st[1][0], A.dt[1]));
}

// The same for contiguous, 16-byte aligned operands (pw_vec_cast_ok): 8
// elements a thread, in 16-byte loads and stores; the same values
// (pw_vec_get / pw_vec_set are op_load_f32 / op_store_f32 of the dtype).
template <int DD, int SD>
__global__ void __launch_bounds__(PW_THREADS) pw_vec_cast_kernel(const __grid_constant__ pw_args A) {
    constexpr int E = 8, VS = pw_vec_dt<SD>::V, VD = pw_vec_dt<DD>::V;
    long long nv = A.numel / E;
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x, stride = (long long)gridDim.x * blockDim.x;
    for (long long v = t; v < nv; v += stride) {
        pw_v16 src[E / VS], dst[E / VD];
PW_UNROLL
        for (int m = 0; m < E / VS; m++) src[m] = ((const pw_v16 *)A.base[1])[v * (E / VS) + m];
PW_UNROLL
        for (int j = 0; j < E; j++) pw_vec_set<DD>(dst[j / VD], j % VD, pw_vec_get<SD>(src[j / VS], j % VS));
PW_UNROLL
        for (int m = 0; m < E / VD; m++) ((pw_v16 *)A.base[0])[v * (E / VD) + m] = dst[m];
    }
    long long i = nv * E + t;
    if (i < A.numel)
        op_store_f32(A.base[0] + i * pw_vec_dt<DD>::ES, DD, op_load_f32(A.base[1] + i * pw_vec_dt<SD>::ES, SD));
}

struct pw_range { uintptr_t lo, hi; bool write; };

// A union of byte ranges: sorted, disjoint intervals [lo, hi), so that an
// overlap query is a binary search (a foreach over hundreds of tensors checks
// each record against everything held).
struct pw_ivs {
    int n;
    uintptr_t lo[PW_BATCH_MAX * PW_NOPS], hi[PW_BATCH_MAX * PW_NOPS];
};

static int ivs_first_hi_above(const pw_ivs *s, uintptr_t x, bool or_equal) {
    int a = 0, b = s->n;
    while (a < b) {
        int m = (a + b) >> 1;
        if (s->hi[m] > x || (or_equal && s->hi[m] == x)) b = m; else a = m + 1;
    }
    return a;
}

static bool ivs_overlaps(const pw_ivs *s, uintptr_t lo, uintptr_t hi) {
    int i = ivs_first_hi_above(s, lo, false);
    return i < s->n && s->lo[i] < hi;
}

static void ivs_add(pw_ivs *s, uintptr_t lo, uintptr_t hi) {
    int i = ivs_first_hi_above(s, lo, true), j = i;   // [i, j): the intervals [lo, hi) overlaps or touches
    while (j < s->n && s->lo[j] <= hi) {
        if (s->lo[j] < lo) lo = s->lo[j];
        if (s->hi[j] > hi) hi = s->hi[j];
        j++;
    }
    if (j == i) {                      // a new interval at i
        memmove(s->lo + i + 1, s->lo + i, (size_t)(s->n - i) * sizeof s->lo[0]);
        memmove(s->hi + i + 1, s->hi + i, (size_t)(s->n - i) * sizeof s->hi[0]);
        s->n++;
    } else if (j > i + 1) {            // [i, j) become one
        memmove(s->lo + i + 1, s->lo + j, (size_t)(s->n - j) * sizeof s->lo[0]);
        memmove(s->hi + i + 1, s->hi + j, (size_t)(s->n - j) * sizeof s->hi[0]);
        s->n -= j - i - 1;
    }
    s->lo[i] = lo;
    s->hi[i] = hi;
}

struct pw_batch {
    int n;
    int ct;                            // OP_CT_F32 or OP_CT_F64
    pw_args a[PW_BATCH_MAX];
    pw_ivs wr, rd;                     // the bytes the held records write, and read
    void *freed[PW_BATCH_MAX * PW_NOPS];  // blocks freed while held records use them:
    int nfreed;                        // given back after the launch (pw_flush)
};

static bool pw_batch_enabled() {
    static int on = -1;
    return rgpu_cuda_env_flag(&on, "RGPU_CUDA_BATCH");
}

static bool pw_is_special(const pw_args &A) { return op_special_nin(A.op) != 0 || pw_heavy_op(A.op); }

// The bytes operand k of a 1-d A touches: [lo, hi).
static pw_range pw_range_of(const pw_args &A, int k) {
    long long span = (A.numel - 1) * A.st[k][0];
    uintptr_t b = (uintptr_t)A.base[k];
    uintptr_t lo = span < 0 ? b + span : b, hi = (span < 0 ? b : b + span) + (uintptr_t)op_dtype_esize(A.dt[k]);
    return { lo, hi, k == 0 };
}

// Would A, run in the same launch as the held records, read or write memory
// one of them writes, or write memory one of them reads?
static bool pw_conflicts(const pw_batch *B, const pw_args &A) {
    for (int k = 0; k <= A.nin; k++) {
        if (A.base[k] == NULL) continue;
        pw_range r = pw_range_of(A, k);
        if (ivs_overlaps(&B->wr, r.lo, r.hi) || (r.write && ivs_overlaps(&B->rd, r.lo, r.hi))) return true;
    }
    return false;
}

static rgpu_status pw_launch_held(rgpu_cuda_ctx *c, pw_batch *B, int n, char *err, size_t errlen);

static rgpu_status pw_flush(rgpu_cuda_ctx *c, char *err, size_t errlen) {
    pw_batch *B = (pw_batch *)c->pw_batch;
    if (B == NULL || B->n == 0) return RGPU_OK;
    int n = B->n;
    B->n = 0;
    B->wr.n = B->rd.n = 0;
    rgpu_status st = pw_launch_held(c, B, n, err, errlen);
    for (int i = 0; i < B->nfreed; i++) rgpu_cuda_scratch_free(c, B->freed[i]);   // stream-ordered: after the launch
    B->nfreed = 0;
    return st;
}

// One held record alone: a cast on pw_cast_kernel, the rest as pw_run launches them.
static rgpu_status pw_launch_one(rgpu_cuda_ctx *c, const pw_args &A, char *err, size_t errlen) {
    if (A.op == RGPU_OP_COPY && pw_vec_cast_ok(A)) {
        unsigned nb = pw_blocks((A.numel + 7) / 8);
        cudaStream_t s = c->stream;
#define PW_VEC_CAST(dd, sd) \
        if (A.dt[0] == dd && A.dt[1] == sd) pw_vec_cast_kernel<dd, sd><<<nb, PW_THREADS, 0, s>>>(A);
        PW_VEC_CAST(RGPU_F32, RGPU_F16) PW_VEC_CAST(RGPU_F32, RGPU_BF16)
        PW_VEC_CAST(RGPU_F16, RGPU_F32) PW_VEC_CAST(RGPU_BF16, RGPU_F32)
        PW_VEC_CAST(RGPU_F16, RGPU_BF16) PW_VEC_CAST(RGPU_BF16, RGPU_F16)
#undef PW_VEC_CAST
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        return RGPU_OK;
    }
    if (A.op == RGPU_OP_COPY) {
        pw_cast_kernel<<<pw_blocks(A.numel), PW_THREADS, 0, c->stream>>>(A);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        return RGPU_OK;
    }
    return pw_launch(A, c->stream, err, errlen);
}

static rgpu_status pw_launch_held(rgpu_cuda_ctx *c, pw_batch *B, int n, char *err, size_t errlen) {
    if (n == 1) return pw_launch_one(c, B->a[0], err, errlen);
    pw_multi_params P;
    P.n = n;
    P.blk0[0] = 0;
    for (int r = 0; r < n; r++) {
        pw_args &A = B->a[r];
        A.vec4 = A.op != RGPU_OP_COPY && pw_vec_dtype(A, false) == RGPU_F32;
        P.blk0[r + 1] = P.blk0[r] + pw_blocks(A.vec4 ? (A.numel + 3) / 4 : A.numel);
    }
    size_t bytes = (size_t)n * sizeof(pw_args);
    pw_args *dev = (pw_args *)rgpu_cuda_scratch(c, bytes);
    if (dev == NULL) {                 // no memory for the arguments: one launch each
        for (int r = 0; r < n; r++) FORWARD_IF_ERROR(pw_launch_one(c, B->a[r], err, errlen));
        return RGPU_OK;
    }
    rgpu_status st = rgpu_cuda_upload_async(c, dev, B->a, bytes, err, errlen);
    if (st != RGPU_OK) {               // the records were accepted: run them one by one, or fail here
        rgpu_cuda_scratch_free(c, dev);
        for (int r = 0; r < n; r++) FORWARD_IF_ERROR(pw_launch_one(c, B->a[r], err, errlen));
        return RGPU_OK;
    }
    P.as = dev;
    unsigned nb = P.blk0[n];
    if (B->ct == OP_CT_F32) pw_multi_kernel<OP_CT_F32><<<nb, PW_THREADS, 0, c->stream>>>(P);
    else pw_multi_kernel<OP_CT_F64><<<nb, PW_THREADS, 0, c->stream>>>(P);
    cudaError_t le = cudaGetLastError();
    if (le != cudaSuccess) {
        if (err != NULL && errlen > 0) snprintf(err, errlen, "multi-tensor pointwise launch: %s", cudaGetErrorString(le));
        st = le == cudaErrorMemoryAllocation ? RGPU_ERR_NOMEM : RGPU_ERR_EXEC;
    }
    rgpu_cuda_scratch_free(c, dev);    // stream-ordered: after the kernel
    return st;
}

// Hold A for a multi-tensor launch, or launch it now (after the held ones).
static rgpu_status pw_submit(rgpu_cuda_ctx *c, const pw_args &A, char *err, size_t errlen) {
    // floating compute types, no special functions: what optimizers' foreach
    // ops are (and no more kernel instantiations than that)
    bool holdable = A.ndim == 1 && !c->capturing && pw_batch_enabled() && !pw_is_special(A) &&
                    (A.ct == OP_CT_F32 || A.ct == OP_CT_F64);
    if (!holdable) {
        FORWARD_IF_ERROR(pw_flush(c, err, errlen));
        return pw_launch(A, c->stream, err, errlen);
    }
    pw_batch *B = (pw_batch *)c->pw_batch;
    if (B == NULL) {
        B = (pw_batch *)calloc(1, sizeof *B);
        if (B == NULL) {
            return pw_launch(A, c->stream, err, errlen);   // nothing is held without a batch
        }
        c->pw_batch = B;
    }
    if (B->n > 0 && (B->n == PW_BATCH_MAX || B->ct != A.ct || pw_conflicts(B, A)))
        FORWARD_IF_ERROR(pw_flush(c, err, errlen));
    if (B->n == 0) B->ct = A.ct;
    B->a[B->n++] = A;
    for (int k = 0; k <= A.nin; k++) {
        if (A.base[k] == NULL) continue;
        pw_range r = pw_range_of(A, k);
        ivs_add(r.write ? &B->wr : &B->rd, r.lo, r.hi);
    }
    return RGPU_OK;
}

// The 32-bit division constants of A's dims (common.cuh rgpu_fastdiv) when
// numel < 2^31: every size and every index then are below 2^31 too.
static void pw_set_divisors(pw_args *A) {
    A->i32 = A->ndim > 1 && A->numel > 0 && A->numel < (1LL << 31);
    if (!A->i32) return;
    for (int d = 0; d < A->ndim; d++) rgpu_fastdiv_init((unsigned long long)A->sizes[d], &A->dmul[d], &A->dshift[d]);
}

// The word's fields for a division by zero (its message names no value).
static __global__ void pw_zero_div_finish(rgpu_dev_word *w, rgpu_dev_site s)
{
    if (rgpu_dev_mine(w, s)) rgpu_dev_finish(w, s, 0);
}

// Runs A; integer %, fmod and div.Tensor_mode flag a division by zero (the
// CPU writes 0 there and fails): in the session's device error word, reported
// at its next wait, or else in a device flag read back after the kernel.
static rgpu_status pw_run(rgpu_cuda_ctx *c, const rgpu_exec *e, pw_args *A, char *err, size_t errlen) {
    const int op = e->op;
    if (A->numel == 0) return RGPU_OK;
    pw_set_divisors(A);
    bool can_div0 = A->ct == OP_CT_I64 && (A->op == RGPU_OP_REMAINDER || A->op == RGPU_OP_FMOD || A->op == RGPU_OP_DIV_MODE);
    if (!can_div0) return pw_submit(c, *A, err, errlen);
    rgpu_dev_word *wd = rgpu_cuda_dev_word(c, e);
    if (wd) {   // launched at once: the finish kernel comes after it
        FORWARD_IF_ERROR(pw_flush(c, err, errlen));
        A->zero_div = wd;
        A->zd_seq = e->dev_seq;
        FORWARD_IF_ERROR(pw_launch(*A, c->stream, err, errlen));
        pw_zero_div_finish<<<1, 1, 0, c->stream>>>(wd, rgpu_cuda_dev_site(e, RGPU_DEVERR_ZERO_DIV, rgpu_op_name(op), 0, 0));
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        return RGPU_OK;
    }
    RGPU_CUDA_NEEDS_HOST(c, "integer division (its division-by-zero check)", err, errlen);
    FORWARD_IF_ERROR(pw_flush(c, err, errlen));

    int *flag = (int *)rgpu_cuda_scratch(c, sizeof(int));
    if (flag == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: no device memory for the error flag", rgpu_op_name(op));
    A->zero_div = flag;
    int h = 0;
    rgpu_status st = RGPU_OK;
    cudaError_t ce = cudaMemsetAsync(flag, 0, sizeof(int), c->stream);
    if (ce == cudaSuccess) {
        st = pw_launch(*A, c->stream, err, errlen);
        if (st == RGPU_OK) {
            ce = cudaMemcpyAsync(&h, flag, sizeof(int), cudaMemcpyDeviceToHost, c->stream);
            if (ce == cudaSuccess) ce = rgpu_cuda_stream_wait(c->stream);
        }
    }
    rgpu_cuda_scratch_free(c, flag);
    if (st != RGPU_OK) return st;
    if (ce != cudaSuccess) {
        RETURN_ERROR(ce == cudaErrorMemoryAllocation ? RGPU_ERR_NOMEM : RGPU_ERR_EXEC, "%s: %s",
                rgpu_op_name(op), cudaGetErrorString(ce));
    }
    if (h) RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: ZeroDivisionError", rgpu_op_name(op));
    return RGPU_OK;
}

}  // namespace

// ---------------------------------------------------------------------------
// Family entry points

static bool pw_is_binary(int op) {
    switch (op) {
    case RGPU_OP_ADD_TENSOR: case RGPU_OP_ADD_SCALAR: case RGPU_OP_SUB_TENSOR:
    case RGPU_OP_SUB_SCALAR: case RGPU_OP_RSUB_SCALAR: case RGPU_OP_MUL_TENSOR:
    case RGPU_OP_MUL_SCALAR: case RGPU_OP_DIV_TENSOR: case RGPU_OP_DIV_SCALAR:
        return true;
    default:
        return false;
    }
}

extern "C" rgpu_status rgpu_cuda_pointwise_exec(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen) {
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (e == NULL) RETURN_ERROR(RGPU_ERR_BAD_ARG, "cuda exec: no op");
    if (e->n_in < 0 || e->n_in > RGPU_MAX_IN || e->n_out < 0 || e->n_out > RGPU_MAX_OUT || e->n_args < 0)
        RETURN_ERROR(RGPU_ERR_ARITY, "%s: bad counts (%d in, %d out, %d args)", rgpu_op_name(e->op),
                e->n_in, e->n_out, e->n_args);
    if (e->op == RGPU_OP_TRIL || e->op == RGPU_OP_TRIU) {
        pw_tri_args A;
        FORWARD_IF_ERROR(pw_prepare_tri(e, e->op == RGPU_OP_TRIU, &A, err, errlen));
        if (A.numel == 0) return RGPU_OK;
        FORWARD_IF_ERROR(pw_flush(c, err, errlen));
        return pw_tri_launch(A, c->stream, err, errlen);
    }
    pw_args A;
    if (pw_is_binary(e->op)) {
        FORWARD_IF_ERROR(pw_prepare_binary(e, &A, err, errlen));
        return pw_run(c, e, &A, err, errlen);
    }
    pw_layout L;
    if (!rgpu_op_pointwise_layout_of(e->op, &L))
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cuda pointwise: unsupported op %s", rgpu_op_name(e->op));
    FORWARD_IF_ERROR(pw_prepare_pointwise(e, &L, &A, err, errlen));
    return pw_run(c, e, &A, err, errlen);
}

extern "C" rgpu_status rgpu_cuda_pw_cast(rgpu_cuda_ctx *c, void *out, int dd, long long ost, const void *in, int sd,
                                         long long ist, long long n, bool *done, char *err, size_t errlen) {
    *done = false;
    auto narrow = [](int dt) { return dt == RGPU_F32 || dt == RGPU_F16 || dt == RGPU_BF16; };
    if (!narrow(dd) || !narrow(sd) || dd == sd || n <= 0) return RGPU_OK;
    if (c->capturing || !pw_batch_enabled()) return RGPU_OK;   // not held: cast_kernel (pw_kernel has no cast)
    pw_args A;
    memset(&A, 0, sizeof A);
    A.op = RGPU_OP_COPY;
    A.ct = OP_CT_F32;
    A.cdt = RGPU_F32;
    A.nin = 1;
    A.ndim = 1;
    A.numel = n;
    A.sizes[0] = n;
    A.base[0] = (char *)out;
    A.st[0][0] = ost;
    A.dt[0] = dd;
    A.base[1] = (char *)in;
    A.st[1][0] = ist;
    A.dt[1] = sd;
    *done = true;
    return pw_submit(c, A, err, errlen);
}

extern "C" rgpu_status rgpu_cuda_pw_flush(rgpu_cuda_ctx *c, char *err, size_t errlen) {
    return pw_flush(c, err, errlen);
}

extern "C" bool rgpu_cuda_pw_defer_free(rgpu_cuda_ctx *c, void *p, size_t n) {
    pw_batch *B = (pw_batch *)c->pw_batch;
    if (B == NULL || B->n == 0) return false;
    uintptr_t lo = (uintptr_t)p, hi = lo + n;
    if (!ivs_overlaps(&B->wr, lo, hi) && !ivs_overlaps(&B->rd, lo, hi)) return false;
    if (B->nfreed == PW_BATCH_MAX * PW_NOPS) {
        char err[320] = "";
        pw_flush(c, err, sizeof err);    // an error stays in the stream: the next sync reports it
        return false;
    }
    B->freed[B->nfreed++] = p;
    return true;
}

extern "C" void rgpu_cuda_pw_batch_free(rgpu_cuda_ctx *c) {
    free(c->pw_batch);
    c->pw_batch = NULL;
}
