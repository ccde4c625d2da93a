/* op/op.h — what every header of replayer/op/ shares.
 *
 * replayer/op/ says what an op MEANS, independent of where it runs: layouts,
 * shape rules, dtype promotion and compute classes, argument readers and the
 * checks both backends make (so they accept the same records and report the
 * same messages), half/bf16 conversion, Philox. replayer/cpu/ and
 * replayer/cuda/ include op/; neither includes the other.
 *
 * Headers are plain C11 that C++ (nvcc, cudaemu's g++) also compiles.
 * Functions marked OP_FN are static inline and, under nvcc, __host__
 * __device__: the CUDA kernels call the very code the CPU backend runs
 * (element conversions, Philox), so both give the same bits. */
#ifndef RGPU_OP_OP_H
#define RGPU_OP_OP_H

#ifdef __CUDACC__
#define OP_FN static inline __host__ __device__
#else
#define OP_FN static inline
#endif

#endif
