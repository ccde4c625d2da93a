/* op/attention.h — scaled dot-product attention (ops SDPA, SDPA_BACKWARD):
 * the shapes both backends check, and the math they compute.
 *
 * Forward, for each batch b, query head h (k/v head g = h / (Hq / Hk)),
 * query row i:
 *   s_j   = scale * (q_i . k_j) + bias_ij      (-inf for j > i when causal)
 *   m     = max_j s_j,  l = sum_j exp(s_j - m)
 *   out_i = sum_j exp(s_j - m) v_j / l,  lse_i = m + ln l
 * A row whose scores are all -inf (every key masked, or S == 0) has out_i = 0
 * and lse_i = -inf, as ATen's _safe_softmax gives.
 * Backward (FlashAttention-2's, P recomputed from lse; no (L, S) buffer):
 *   p_ij  = exp(s_ij - lse_i)   (0 when lse_i is -inf)
 *   D_i   = grad_out_i . out_i
 *   dS_ij = p_ij * (grad_out_i . v_j - D_i)
 *   dq_i  = scale * sum_j dS_ij k_j
 *   dk_j  = scale * sum_{h in group} sum_i dS_ij q_i
 *   dv_j  = sum_{h in group} sum_i p_ij grad_out_i
 * Sums run in increasing index order; the cpu backend computes in double,
 * the cuda backend in float for float32/float16/bfloat16 (double for
 * float64), as ATen's opmath. */
#ifndef RGPU_OP_ATTENTION_H
#define RGPU_OP_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest head dim (E, Ev) the cuda kernels take; the client routes larger
 * ones to the unfused composite. */
#define RGPU_SDPA_MAX_HEAD 128

typedef struct op_sdpa {
    int64_t B, Hq, Hk, L, S, E, Ev;
    int64_t group;          /* Hq / Hk */
    bool causal;
    double scale;
    const rgpu_view *q, *k, *v, *bias, *out, *lse, *g;   /* g: grad_out (backward) */
    rgpu_view *dq, *dk, *dv;                             /* backward; NULL when not wanted */
    rgpu_view *seed, *offset;                            /* forward: 0-d int64 written 0, or NULL */
} op_sdpa;

/* Checks an SDPA or SDPA_BACKWARD exec (arity, args, dtypes, shapes) and
 * fills a; the messages name the op and the operand. */
rgpu_status rgpu_op_sdpa_check(const rgpu_exec *e, op_sdpa *a, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
