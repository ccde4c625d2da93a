/* op/fft.h — the fft family (_fft_c2c, _fft_r2c, _fft_c2r), shared by both
 * backends: the checks of a record (fft_check.c), and a careful 1-d complex
 * FFT in double (fft_plan.c)
 * (mixed radix 4, 2, 3, 5 and any odd radix for smooth sizes; Bluestein's
 * chirp-z through a power-of-two FFT for sizes with a large prime factor)
 * that the CPU backend runs and that cudaemu's cuFFT reference runs.
 * Host code only. Twiddles are cos/sin of 2*pi*k/n in double with k reduced
 * to the first octant, so complex128 keeps double accuracy at any size. */
#ifndef RGPU_OP_FFT_H
#define RGPU_OP_FFT_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ 1-d plans */

/* A plan for one size and direction; x[k] = sum_j x[j] exp(sign*2*pi*i*jk/n),
 * sign -1 forward, +1 backward, unnormalized. Opaque. */
typedef struct rgpu_fft_plan rgpu_fft_plan;

/* NULL when out of memory or n < 1. */
rgpu_fft_plan *rgpu_fft_plan_new(int64_t n, int sign);
void rgpu_fft_plan_free(rgpu_fft_plan *p);   /* NULL: no-op */
/* Transforms the n interleaved (re, im) pairs of x in place. False when out
 * of scratch memory. Thread-compatible: one plan, one thread at a time. */
bool rgpu_fft_exec(rgpu_fft_plan *p, double *x);

/* ------------------------------------------------------------ records */

/* What a checked record asks for. Dims are in the record's order; sizes
 * are the signal sizes n (the input's for c2c/r2c, the output's for c2r). */
typedef struct rgpu_fft_args {
    int ndim;                     /* transformed dims */
    int dims[RGPU_MAX_DIMS];
    int64_t n[RGPU_MAX_DIMS];
    int norm;                     /* 0 none, 1 1/sqrt(prod n), 2 1/prod n */
    bool forward;                 /* c2c's; r2c true, c2r false */
    bool onesided;                /* r2c's; c2r true */
    int64_t last_dim_size;        /* c2r's: the output's size along dims[ndim-1] */
    double scale;                 /* the normalization's factor */
} rgpu_fft_args;

/* Checks an FFT_* record (dtypes, dims unique and in range, output sizes) and
 * fills a. One-line errors naming the op. */
rgpu_status rgpu_op_fft_check(const rgpu_exec *e, rgpu_fft_args *a, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
