/* cpu_reduce2.h — private to the reduce2 family: the kernels of
 * cpu_reduce2_norm.c, called by the family's dispatch in cpu_reduce2.c. The
 * helpers both files share: cpu_reduce2_util.h. */
#ifndef RGPU_CPU_REDUCE2_H
#define RGPU_CPU_REDUCE2_H

#include "cpu_internal.h"
#include "op/reduce.h"

/* ---------------------------------------------------------------------------
 * Kernels in cpu_reduce2_norm.c (called after rgpu_op_reduce_check_exec) */
rgpu_status rgpu_r2_softmax(const rgpu_exec *e, bool is_log, char *err, size_t errlen);
rgpu_status rgpu_r2_softmax_backward(const rgpu_exec *e, bool is_log, char *err, size_t errlen);
rgpu_status rgpu_r2_layer_norm(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_r2_rms_norm(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_r2_cross_entropy(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_r2_cross_entropy_backward(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_r2_rms_norm_backward(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_r2_layer_norm_backward(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_r2_nll_loss(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_r2_nll_loss_backward(const rgpu_exec *e, char *err, size_t errlen);
/* _ctc_loss / _ctc_loss_backward (op/ctc.h), one batch element after another */
rgpu_status rgpu_r2_ctc_loss(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_r2_ctc_loss_backward(const rgpu_exec *e, char *err, size_t errlen);

#endif
