/* op/special_math.h — the special functions of torch.special (its
 * erfcx, ndtri, log_ndtr, the Bessel family, airy_ai, zeta, igamma/igammac
 * and the orthogonal polynomials), written once for both backends.
 *
 * OP_FN host+device code: the CPU pointwise loops (cpu_pointwise_float.h)
 * and the CUDA pointwise kernel (cuda/pointwise.cu) call op_special_f /
 * op_special_d with the op, so each ops.def op computes the same bits on
 * both. The bodies are special_math_t.h, instantiated for float and double;
 * the coefficients are special_tables.h. Each function follows ATen's
 * Math.h (branch points, series, recurrences, edge cases and the type each
 * step runs in); they are ours, in C. */
#ifndef RGPU_OP_SPECIAL_MATH_H
#define RGPU_OP_SPECIAL_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "rgpu_format.h"
#include "op.h"
#include "special_tables.h"

/* The two large tables live once per side (kernels read the device copy). */
static const double op_sp_erfcx_tab[100][7] = OP_SP_ERFCX_Y100;
static const double op_sp_igam_d[25][25] = OP_SP_IGAM_D;
#ifdef __CUDACC__
static __device__ const double op_sp_erfcx_tab_dev[100][7] = OP_SP_ERFCX_Y100;
static __device__ const double op_sp_igam_d_dev[25][25] = OP_SP_IGAM_D;
#endif

#define SP_T float
#define SP_F(fn) fn##f
#define SP_N(nm) nm##_f
#define SP_IS_F 1
#include "special_math_t.h"
#undef SP_T
#undef SP_F
#undef SP_N
#undef SP_IS_F

#define SP_T double
#define SP_F(fn) fn
#define SP_N(nm) nm##_d
#define SP_IS_F 0
#include "special_math_t.h"
#undef SP_T
#undef SP_F
#undef SP_N
#undef SP_IS_F

/* Tensor inputs of a special op: 1 (x), 2 (a, x / x, q / x, n), 0 for any
 * other op. */
OP_FN int op_special_nin(int op)
{
    switch (op) {
    case RGPU_OP_SPECIAL_ERFCX: case RGPU_OP_SPECIAL_NDTRI: case RGPU_OP_SPECIAL_LOG_NDTR:
    case RGPU_OP_I0: case RGPU_OP_SPECIAL_I0E: case RGPU_OP_SPECIAL_I1: case RGPU_OP_SPECIAL_I1E:
    case RGPU_OP_SPECIAL_BESSEL_J0: case RGPU_OP_SPECIAL_BESSEL_J1: case RGPU_OP_SPECIAL_BESSEL_Y0:
    case RGPU_OP_SPECIAL_BESSEL_Y1: case RGPU_OP_SPECIAL_MODIFIED_BESSEL_I0:
    case RGPU_OP_SPECIAL_MODIFIED_BESSEL_I1: case RGPU_OP_SPECIAL_MODIFIED_BESSEL_K0:
    case RGPU_OP_SPECIAL_MODIFIED_BESSEL_K1: case RGPU_OP_SPECIAL_SCALED_MODIFIED_BESSEL_K0:
    case RGPU_OP_SPECIAL_SCALED_MODIFIED_BESSEL_K1: case RGPU_OP_SPECIAL_SPHERICAL_BESSEL_J0:
    case RGPU_OP_SPECIAL_AIRY_AI:
        return 1;
    case RGPU_OP_IGAMMA: case RGPU_OP_IGAMMAC: case RGPU_OP_SPECIAL_ZETA:
    case RGPU_OP_SPECIAL_CHEBYSHEV_POLYNOMIAL_T: case RGPU_OP_SPECIAL_CHEBYSHEV_POLYNOMIAL_U:
    case RGPU_OP_SPECIAL_CHEBYSHEV_POLYNOMIAL_V: case RGPU_OP_SPECIAL_CHEBYSHEV_POLYNOMIAL_W:
    case RGPU_OP_SPECIAL_SHIFTED_CHEBYSHEV_POLYNOMIAL_T: case RGPU_OP_SPECIAL_SHIFTED_CHEBYSHEV_POLYNOMIAL_U:
    case RGPU_OP_SPECIAL_SHIFTED_CHEBYSHEV_POLYNOMIAL_V: case RGPU_OP_SPECIAL_SHIFTED_CHEBYSHEV_POLYNOMIAL_W:
    case RGPU_OP_SPECIAL_HERMITE_POLYNOMIAL_H: case RGPU_OP_SPECIAL_HERMITE_POLYNOMIAL_HE:
    case RGPU_OP_SPECIAL_LAGUERRE_POLYNOMIAL_L: case RGPU_OP_SPECIAL_LEGENDRE_POLYNOMIAL_P:
        return 2;
    default:
        return 0;
    }
}

/* Whether ATen's CPU kernel of the op takes f16/bf16 (the rest dispatch
 * float and double only). */
OP_FN bool op_special_takes_half(int op)
{
    return op == RGPU_OP_I0 || op == RGPU_OP_SPECIAL_I0E || op == RGPU_OP_SPECIAL_I1 ||
           op == RGPU_OP_SPECIAL_I1E || op == RGPU_OP_IGAMMA || op == RGPU_OP_IGAMMAC;
}

#endif
