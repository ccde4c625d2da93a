/* cpu_dense_util.h — the helpers the CPU dense family files share
 * (cpu_dense_util.c). Not part of the backend API.
 *
 * The dense kernels work on contiguous compute buffers: an operand is packed
 * (converted to the compute type, row-major in its logical order) with
 * rgpu_dense_load, the kernel runs on plain arrays, and the result goes back
 * through the output's own strides with rgpu_dense_store. Matmul skips the packing
 * for f32/f64 operands BLAS can read in place. */
#ifndef RGPU_CPU_DENSE_UTIL_H
#define RGPU_CPU_DENSE_UTIL_H

#include "cpu_internal.h"
#include "op/dense.h"

/* ---------------------------------------------------------------------------
 * Buffers and GEMM (cpu_dense_util.c) */

/* Like rgpu_op_alloc, zero-filled. */
void *rgpu_dense_calloc(int64_t n, size_t esz);

/* Packs v (row-major over its logical sizes) into dst as compute type ct. */
void rgpu_dense_load(const rgpu_view *v, int ct, void *dst);
/* Writes src (row-major, compute type ct) through v's strides. */
void rgpu_dense_store(const rgpu_view *v, int ct, const void *src);

/* C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C on row-major compute
 * buffers, through cblas for f32/f64 and plain wrapping loops for int64.
 * ta/tb: op(X) = X^T, X stored (K,M)/(N,K) with leading dim lda/ldb.
 * beta == 0 does not read C. Dims and leading dims must fit in an int. */
/* The rows of C per pool chunk of rgpu_dense_gemm of M rows, N columns and
 * depth K: an M <= this runs as one block on one thread. */
int64_t rgpu_dense_gemm_block_rows(int64_t M, int64_t N, int64_t K);
/* The pool grain for `items` independent items (a bmm's batch, a
 * convolution's images) of `gemms` GEMMs of (M, N), depth K each: all in one
 * chunk when such a GEMM splits into row blocks itself, else about 128 KFLOP
 * a chunk. Each item is computed as the serial loop computes it (its GEMMs'
 * blocks then run inline), so results never depend on the threads. */
int64_t rgpu_dense_items_grain(int64_t items, int64_t gemms, int64_t M, int64_t N, int64_t K);
void rgpu_dense_gemm(int ct, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
                const void *A, int64_t lda, const void *B, int64_t ldb, double beta, void *C, int64_t ldc);

#endif
