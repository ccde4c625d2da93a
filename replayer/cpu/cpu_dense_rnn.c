/* cpu_dense_rnn.c — the fused LSTM and GRU cells and their backwards on the
 * CPU: op/rnn.h's per-element math over the (B, H) hidden state. */
#include "cpu_dense.h"
#include "op/rnn.h"

rgpu_status rgpu_cpu_dense_rnn_cell(const rgpu_exec *e, char *err, size_t errlen)
{
    op_cell a;
    FORWARD_IF_ERROR(rgpu_op_cell_check(e, &a, err, errlen));
    for (int64_t b = 0; b < a.B; b++)
        for (int64_t j = 0; j < a.H; j++) {
            switch (e->op) {
            case RGPU_OP_LSTM_CELL:          op_lstm_cell_one(&a, b, j); break;
            case RGPU_OP_LSTM_CELL_BACKWARD: op_lstm_cell_backward_one(&a, b, j); break;
            case RGPU_OP_GRU_CELL:           op_gru_cell_one(&a, b, j); break;
            default:                         op_gru_cell_backward_one(&a, b, j); break;
            }
        }
    return RGPU_OK;
}
