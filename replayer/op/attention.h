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
#include <math.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest head dim (E, Ev) the cuda kernels take; the client routes larger
 * ones to the unfused composite. */
#define RGPU_SDPA_MAX_HEAD 128

/* Dropout (dropout_p > 0): element (b, h, i, j) is kept iff the first Philox
 * word w0 of (seed, offset, ((b*Hq + h)*L + i)*S + j) has (w0 >> 8) >= thr,
 * thr = ceil(dropout_p * 2^24) (2^24 for dropout_p 1: nothing kept); kept
 * weights p_ij are scaled by 1 / (1 - dropout_p):
 *   out_i = sum_j p_ij z_ij v_j,   z_ij = keep_ij / (1 - dropout_p)
 *   dv_j  = sum_i p_ij z_ij grad_out_i,  dS_ij = p_ij (z_ij grad_out_i . v_j - D_i)
 * (logsumexp and D as without dropout). The forward writes (seed, offset)
 * into philox_seed / philox_offset; the backward reads them from there. */
static inline uint32_t op_sdpa_drop_threshold(double p)
{
    if (!(p > 0)) return 0;
    if (p >= 1) return 1u << 24;
    return (uint32_t)ceil(p * 16777216.0);
}

typedef struct op_sdpa {
    int64_t B, Hq, Hk, L, S, E, Ev;
    int64_t group;          /* Hq / Hk */
    bool causal;
    double scale;
    double dropout_p;       /* 0: no dropout */
    uint32_t drop_thr;      /* op_sdpa_drop_threshold(dropout_p) */
    double drop_scale;      /* 1 / (1 - dropout_p), 0 when dropout_p == 1 */
    uint64_t seed, offset;  /* forward: the record's Philox pair */
    const rgpu_view *pseed, *poffset;                    /* backward: philox_seed?, philox_offset? */
    const rgpu_view *q, *k, *v, *bias, *out, *lse, *g;   /* g: grad_out (backward) */
    rgpu_view *dq, *dk, *dv;                             /* backward; NULL when not wanted */
    rgpu_view *pseed_out, *poffset_out;                  /* forward: philox_seed?, philox_offset? */
} op_sdpa;

/* Checks an SDPA or SDPA_BACKWARD exec (arity, args, dtypes, shapes) and
 * fills a; the messages name the op and the operand. */
rgpu_status rgpu_op_sdpa_check(const rgpu_exec *e, op_sdpa *a, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
