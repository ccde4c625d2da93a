/* op/amp.h — the checks of the two torch.amp.GradScaler ops, for both
 * backends (cpu/cpu_amp.c, cuda/amp.cu): same codes, same messages. */
#ifndef RGPU_OP_AMP_H
#define RGPU_OP_AMP_H

#include <stdint.h>

#include "backend.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* AMP_UNSCALE: in grad (floating), inv_scale (1 elem f32); out grad (the same
 * tensor: same shape and dtype), found_inf (1 elem f32). */
rgpu_status rgpu_op_amp_unscale_check(const rgpu_exec *e, char *err, size_t errlen);

/* AMP_UPDATE_SCALE: in found_inf (1 elem f32); out scale (1 elem f32),
 * growth_tracker (1 elem i32); args growth_factor, backoff_factor (FLOAT or
 * INT), growth_interval (INT). */
rgpu_status rgpu_op_amp_update_scale_args(const rgpu_exec *e, double *growth, double *backoff, int64_t *interval,
                                     char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
