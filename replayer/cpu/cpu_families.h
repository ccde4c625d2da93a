/* cpu_families.h — the CPU backend's op families beyond the core file.
 *
 * Each family file (cpu_pointwise.c, cpu_reduce2.c, cpu_dense.c, cpu_index.c,
 * cpu_amp.c) defines one `exec` with a switch over its ops. Which family runs
 * an op is ops.def's FAMILY column: rgpu_cpu_exec/supports are the generated
 * switch replayer/cpu/op_dispatch_cpu.inc (tools/gen_ops.py). */
#ifndef RGPU_CPU_FAMILIES_H
#define RGPU_CPU_FAMILIES_H

#include "backend.h"

/* pointwise: unary, binary, ternary, activation backwards, tril/triu */
rgpu_status rgpu_cpu_pointwise_exec(const rgpu_exec *e, char *err, size_t errlen);
/* reductions beyond sum/mean, softmax family, layer norm, nll loss */
rgpu_status rgpu_cpu_reduce2_exec(const rgpu_exec *e, char *err, size_t errlen);
/* matmul (OpenBLAS), convolution, batch norm, pooling */
rgpu_status rgpu_cpu_dense_exec(const rgpu_exec *e, char *err, size_t errlen);
/* embedding, gather/scatter, index ops, cat, pad, random, dropout, nonzero, unique */
rgpu_status rgpu_cpu_index_exec(const rgpu_exec *e, char *err, size_t errlen);
/* mixed precision: GradScaler's unscale + inf check, scale update */
rgpu_status rgpu_cpu_amp_exec(const rgpu_exec *e, char *err, size_t errlen);
/* sort, mode, cummax/cummin/logcumsumexp/cumprod, searchsorted, histc (cpu_sort.c) */
rgpu_status rgpu_cpu_sort_exec(const rgpu_exec *e, char *err, size_t errlen);
/* linear algebra (LAPACK): cholesky, LU, solves, inverse, det (cpu_linalg.c) */
rgpu_status rgpu_cpu_linalg_exec(const rgpu_exec *e, char *err, size_t errlen);
/* _fft_c2c, _fft_r2c, _fft_c2r (cpu_fft.c, on op/fft_plan.c's FFT) */
rgpu_status rgpu_cpu_fft_exec(const rgpu_exec *e, char *err, size_t errlen);

#endif
