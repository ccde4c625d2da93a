/* op/pointwise.h — what a pointwise op means, for both backends
 * (cpu/cpu_pointwise.c, cuda/pointwise.cu): the op layouts, compute classes
 * and ATen's per-op dtype support, and the host-side argument checks, so
 * both validate with the same code and the same messages. */
#ifndef RGPU_OP_POINTWISE_H
#define RGPU_OP_POINTWISE_H

#include <stdbool.h>

#include "backend.h"
#include "dtype.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PW_MAX_IN 3

/* Integer compute: int64 held as uint64 (+ - * wrap), the same code on the
 * CPU and in the CUDA kernels. */
OP_FN int64_t op_pw_sv(uint64_t v) { return (int64_t)v; }

/* ATen's powi: exponent by squaring; negative exponents give 1, +-1 or 0. */
OP_FN uint64_t op_pw_powi(uint64_t a, uint64_t b)
{
    if (op_pw_sv(b) < 0) {
        if (op_pw_sv(a) == 1) return 1;
        if (op_pw_sv(a) == -1) return (b & 1u) ? (uint64_t)-1 : 1;
        return 0;
    }
    uint64_t r = 1;
    while (b) {
        if (b & 1u) r *= a;
        b >>= 1;
        a *= a;
    }
    return r;
}

/* C's truncating a / b and a % b without the INT64_MIN / -1 trap (b != 0). */
OP_FN uint64_t op_pw_idiv(uint64_t a, uint64_t b)
{
    return op_pw_sv(b) == -1 ? 0 - a : (uint64_t)(op_pw_sv(a) / op_pw_sv(b));
}
OP_FN uint64_t op_pw_imod(uint64_t a, uint64_t b) { return op_pw_sv(b) == -1 ? 0 : (uint64_t)(op_pw_sv(a) % op_pw_sv(b)); }

/* Op layouts: which input slots may hold a scalar, how many args, where the
 * op's own arg sits, whether the result is boolean. */
typedef struct pw_layout {
    unsigned slots;      /* bit i: in[i] is "t|s" (args[i] holds the scalar when in[i] is absent) */
    unsigned optional;   /* bit i: the slot may be empty altogether (args[i] NONE: clamp's bounds) */
    int nargs;           /* args the record must carry; the DTYPE compute is the last */
    int own;             /* index of the op's own scalar/int arg, -1 if none */
    bool res_bool;       /* result is 0/1: comparisons, logical ops, isnan */
} pw_layout;

/* The layout of a pointwise op of the training set; false for any other op. */
bool rgpu_op_pointwise_layout_of(int op, pw_layout *L);

/* Compute classes: the opmath type the loops run in. */
int rgpu_op_pointwise_compute_class(int dt);
/* Whether ATen's kernel of op accepts compute class ct (its AT_DISPATCH list). */
bool rgpu_op_pointwise_supports(int op, int ct);

/* op_pointwise's checks up to the compute dtype's support: arity, out, the
 * args and the DTYPE last arg, each input (a tensor, a scalar arg, or for an
 * optional slot nothing: present[i] false), at least one tensor, and out's
 * shape the broadcast of the inputs'. */
rgpu_status rgpu_op_pointwise_check(const rgpu_exec *e, const pw_layout *L, bool present[PW_MAX_IN],
                                char *err, size_t errlen);
/* TRIL / TRIU's checks: arity, views, the int diagonal arg, x at least 2-d,
 * out of x's shape and dtype. */
rgpu_status rgpu_op_pointwise_check_tri(const rgpu_exec *e, char *err, size_t errlen);

/* add/sub/rsub/mul/div (Tensor and Scalar overloads) as the ATen op each
 * runs: kind is RGPU_OP_ADD_TENSOR, _SUB_TENSOR, _MUL_TENSOR or
 * _DIV_TENSOR; the compute class comes from the OUTPUT dtype; a Scalar
 * overload's "other" is args[other_arg] (rsub: swapped, other - in[0]). */
typedef struct op_binary_args {
    int kind;
    int other_arg;             /* -1 for the Tensor overloads */
    bool swap;
    int ct;                    /* OP_CT_* */
    bool alpha_one, alpha_b;   /* alpha == 1; alpha as a bool */
    float alpha_f;
    double alpha_d;
    uint64_t alpha_i;
} op_binary_args;
/* The overload's args (scalars), ATen's rejections (true division into an
 * integer output, bool subtraction, bool/float alpha), alpha in each type.
 * Arity and views: rgpu_op_check_exec first. */
rgpu_status rgpu_op_binary_check(const rgpu_exec *e, op_binary_args *b, char *err, size_t errlen);

/* pow's kernel modes: a tensor exponent, ATen's pow_tensor_scalar special
 * cases, or std::pow with the scalar. */
enum { POW_TENSOR, POW_SQRT, POW_RSQRT, POW_RECIP, POW_SQUARE, POW_CUBE, POW_INVSQ, POW_SCALAR };

/* DIV_MODE's rounding mode arg. */
enum { DIV_TRUNC = 1, DIV_FLOOR = 2 };

/* What a pointwise op's args and operands ask of the kernel beyond the
 * operands (both backends' kernel contexts hold one). */
typedef struct op_pw_params {
    bool cond_first;         /* WHERE: in0 is the condition, read as bool */
    bool approx_tanh;        /* GELU, GELU_BACKWARD */
    int mode;                /* DIV_MODE: DIV_TRUNC / DIV_FLOOR */
    int pow_mode;            /* POW: POW_TENSOR or a scalar-exponent case */
    double pow_exp;
    float pow_exp_f;         /* the same in float (the CUDA backend's f32 opmath: powf, as ATen's CUDA) */
    bool has_lo, has_hi;     /* CLAMP */
    int64_t n;               /* POLYGAMMA's order */
    bool neg_decimals;       /* ROUND_DECIMALS: decimals < 0 (divide, round, multiply) */
    double ten_pow;          /* ROUND_DECIMALS: 10^|decimals| */
    float ten_pow_f;         /* the same in float */
    float own_f;             /* the op's own scalar in each opmath type */
    double own_d;
    uint64_t own_i;
} op_pw_params;
/* The op's own arg (L->own), WHERE's condition dtype, CLAMP's bounds
 * (present as rgpu_op_pointwise_check gives), POW's scalar exponent, checked for
 * compute dtype cdt of compute class ct. */
rgpu_status rgpu_op_pw_params_of(const rgpu_exec *e, const pw_layout *L, const bool present[PW_MAX_IN], int cdt, int ct,
                            op_pw_params *p, char *err, size_t errlen);

/* A pointwise op's own scalar arg (FLOAT, INT or BOOL) in each opmath type:
 * as double, as float, and as an integer wrapped to cdt (int64 for bool). */
void rgpu_op_pw_own_scalar(const rgpu_arg *a, int cdt, double *d, float *f, uint64_t *i);
/* pow with a scalar exponent: ATen's pow_tensor_scalar special cases (f32,
 * f64, bf16; f16 always goes through std::pow). *exp is the compute dtype's
 * value for f16/bf16 and the double itself for f32/f64; *mode a POW_*. */
void rgpu_op_pw_pow_exponent(const rgpu_arg *a, int cdt, double *exp, int *mode);

#ifdef __cplusplus
}
#endif

#endif
