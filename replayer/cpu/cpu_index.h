/* cpu_index.h — private helpers of the CPU index family (cpu_index.c,
 * cpu_index_data.c, rgpu_cpu_index_random.c): input/output and arg checks, a
 * multi-offset N-d walker, and per-element copy/convert/accumulate. */
#ifndef RGPU_CPU_INDEX_H
#define RGPU_CPU_INDEX_H

#include <math.h>
#include <stdlib.h>

#include "cpu_internal.h"
#include "op/index.h"

/* Copy src into dst elementwise (same shape, dtype cast when they differ). */
void rgpu_cpu_index_copy_view(rgpu_view *dst, const rgpu_view *src);

/* ---------------------------------------------------------------------------
 * Per-file entry points (dispatched from cpu_index.c) */
rgpu_status rgpu_cpu_index_cat(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_pad(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_count_nonzero(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_nonzero(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_masked_select(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_unique(const rgpu_exec *e, bool count_only, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_random(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_dropout(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_cpu_index_dropout_backward(const rgpu_exec *e, char *err, size_t errlen);

#endif
