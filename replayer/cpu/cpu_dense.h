/* cpu_dense.h — the CPU dense family's op entry points, one file each
 * (cpu_dense_*.c), called by the family's dispatch in cpu_dense.c; their
 * args and checks: op/dense.h. The helpers they share: cpu_dense_util.h.
 * Not part of the backend API. */
#ifndef RGPU_CPU_DENSE_H
#define RGPU_CPU_DENSE_H

#include "cpu_internal.h"
#include "op/dense.h"

/* ---------------------------------------------------------------------------
 * Op entry points (one file each; their args and checks: op/dense.h) */
rgpu_status rgpu_cpu_dense_matmul(const rgpu_exec *e, char *err, size_t errlen);          /* cpu_dense_matmul.c */

rgpu_status rgpu_cpu_dense_conv(const rgpu_exec *e, char *err, size_t errlen);            /* cpu_dense_conv.c */
rgpu_status rgpu_cpu_dense_conv_backward(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_dense_batch_norm(const rgpu_exec *e, char *err, size_t errlen);      /* cpu_dense_norm.c */
rgpu_status rgpu_cpu_dense_batch_norm_backward(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_dense_max_pool(const rgpu_exec *e, char *err, size_t errlen);        /* cpu_dense_pool.c */
rgpu_status rgpu_cpu_dense_max_pool_backward(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_dense_avg_pool(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_dense_avg_pool_backward(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_dense_adaptive_pool(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_dense_adaptive_pool_backward(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_dense_sdpa(const rgpu_exec *e, char *err, size_t errlen);           /* cpu_dense_attn.c */
rgpu_status rgpu_cpu_dense_sdpa_backward(const rgpu_exec *e, char *err, size_t errlen);

#endif
