/* cpu_dense.c — the CPU dense family's dispatch: each op to its file
 * (cpu_dense_matmul.c, cpu_dense_conv.c, cpu_dense_norm.c, cpu_dense_pool.c;
 * helpers they share: cpu_dense_util.c), and the fused LSTM and GRU cells and
 * their backwards, op/rnn.h's per-element math over the (B, H) hidden state. */
#include "cpu_dense.h"
#include "cpu_families.h"
#include "op/rnn.h"

/* ---------------------------------------------------------------------------
 * LSTM and GRU cells */

static rgpu_status rnn_cell(const rgpu_exec *e, char *err, size_t errlen)
{
    op_cell a;
    FORWARD_IF_ERROR(rgpu_op_cell_check(e, &a, err, errlen));
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t j = 0; j < a.H; j++) op_rnn_cell_one(e->op, &a, b, j);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Dispatch */

rgpu_status rgpu_cpu_dense_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_MM: case RGPU_OP_BMM: case RGPU_OP_ADDMM: case RGPU_OP_BADDBMM:
        return rgpu_cpu_dense_matmul(e, err, errlen);
    case RGPU_OP_CONVOLUTION:                  return rgpu_cpu_dense_conv(e, err, errlen);
    case RGPU_OP_CONVOLUTION_BACKWARD:         return rgpu_cpu_dense_conv_backward(e, err, errlen);
    case RGPU_OP_BATCH_NORM:                   return rgpu_cpu_dense_batch_norm(e, err, errlen);
    case RGPU_OP_BATCH_NORM_BACKWARD:          return rgpu_cpu_dense_batch_norm_backward(e, err, errlen);
    case RGPU_OP_MAX_POOL2D:                   return rgpu_cpu_dense_max_pool(e, err, errlen);
    case RGPU_OP_MAX_POOL2D_BACKWARD:          return rgpu_cpu_dense_max_pool_backward(e, err, errlen);
    case RGPU_OP_AVG_POOL2D:                   return rgpu_cpu_dense_avg_pool(e, err, errlen);
    case RGPU_OP_AVG_POOL2D_BACKWARD:          return rgpu_cpu_dense_avg_pool_backward(e, err, errlen);
    case RGPU_OP_ADAPTIVE_AVG_POOL2D:          return rgpu_cpu_dense_adaptive_pool(e, err, errlen);
    case RGPU_OP_ADAPTIVE_AVG_POOL2D_BACKWARD: return rgpu_cpu_dense_adaptive_pool_backward(e, err, errlen);
    case RGPU_OP_LSTM_CELL: case RGPU_OP_LSTM_CELL_BACKWARD:
    case RGPU_OP_GRU_CELL: case RGPU_OP_GRU_CELL_BACKWARD:
        return rnn_cell(e, err, errlen);
    case RGPU_OP_SDPA:                         return rgpu_cpu_dense_sdpa(e, err, errlen);
    case RGPU_OP_SDPA_BACKWARD:                return rgpu_cpu_dense_sdpa_backward(e, err, errlen);
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cpu backend (dense): unsupported op %s", rgpu_op_name(e->op));
    }
}

