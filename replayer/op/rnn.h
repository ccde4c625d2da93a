/* op/rnn.h — the fused recurrent cells nn.LSTM and nn.GRU run off the CPU
 * (_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backwards), one
 * (b, j) element of the (B, H) hidden state at a time, written once for both
 * backends (cpu/cpu_dense.c loops, cuda/rnn.cu runs a thread each). Math
 * in double, stored in the tensors' dtype; the _f versions (CUDA's float
 * opmath for float32/float16/bfloat16) in float.
 *
 * LSTM: gates (B, 4H) in the order i, f, g, o; v = input_gates + hidden_gates
 *   (+ input_bias + hidden_bias); i, f, o = sigmoid, g = tanh;
 *   cy = f*cx + i*g, hy = o*tanh(cy); workspace (B, 4H) = the activated gates.
 *   backward (grad_hy?, grad_cy? absent = 0): gc = grad_hy*o*(1-tanh(cy)^2) + grad_cy,
 *   d_i = gc*g*i(1-i), d_f = gc*cx*f(1-f), d_g = gc*i*(1-g^2),
 *   d_o = grad_hy*tanh(cy)*o(1-o); grad_cx = gc*f.
 * GRU: gates (B, 3H) in the order r, z, n; r = sigmoid(ir + hr),
 *   z = sigmoid(iz + hz), n = tanh(in + r*hn) (biases added to their gates);
 *   hy = n + z*(hx - n); workspace (B, 5H) = r, z, n, hn, hx.
 *   backward: d_z = g*(hx-n)*z(1-z), d_n = g*(1-z)*(1-n^2), d_hn = d_n*r,
 *   d_r = d_n*hn*r(1-r); grad_input_gates = (d_r, d_z, d_n),
 *   grad_hidden_gates = (d_r, d_z, d_hn), grad_hx = g*z.
 * Bias gradients (the gate gradients summed over the batch) are sums the
 * client records. */
#ifndef RGPU_OP_RNN_H
#define RGPU_OP_RNN_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"

/* a (rows, cols) operand: element (i, j) at p + (i*s0 + j*s1) elements; p NULL
 * for an absent one (reads 0); a 1-d bias has s0 = 0 */
typedef struct op_cell_mat {
    char *p;
    int dt;
    int64_t s0, s1;
} op_cell_mat;

typedef struct op_cell {
    int64_t B, H;
    op_cell_mat in[5], out[3];
} op_cell;

OP_FN double op_cell_ld(const op_cell_mat *m, int64_t i, int64_t j)
{
    return m->p ? op_load_f64(m->p + (i * m->s0 + j * m->s1) * op_dtype_esize(m->dt), m->dt) : 0.0;
}

OP_FN void op_cell_st(const op_cell_mat *m, int64_t i, int64_t j, double v)
{
    op_store_f64(m->p + (i * m->s0 + j * m->s1) * op_dtype_esize(m->dt), m->dt, v);
}

/* float32/float16/bfloat16 operands only: no float64 conversion in the code */
OP_FN float op_cell_ld_f(const op_cell_mat *m, int64_t i, int64_t j)
{
    if (!m->p) return 0.0f;
    const char *p = m->p + (i * m->s0 + j * m->s1) * op_dtype_esize(m->dt);
    if (m->dt == RGPU_F16) return rgpu_half_to_float(*(const uint16_t *)p);
    if (m->dt == RGPU_BF16) return rgpu_bf16_to_float(*(const uint16_t *)p);
    return *(const float *)p;
}

OP_FN void op_cell_st_f(const op_cell_mat *m, int64_t i, int64_t j, float v)
{
    char *p = m->p + (i * m->s0 + j * m->s1) * op_dtype_esize(m->dt);
    if (m->dt == RGPU_F16) *(uint16_t *)p = rgpu_float_to_half(v);
    else if (m->dt == RGPU_BF16) *(uint16_t *)p = rgpu_float_to_bf16(v);
    else *(float *)p = v;
}

/* True when every present operand of a is float32, float16 or bfloat16: the
 * float (_f) functions may run on it. */
static inline bool op_cell_all_float(const op_cell *a)
{
    for (int k = 0; k < 8; k++) {
        const op_cell_mat *m = k < 5 ? &a->in[k] : &a->out[k - 5];
        if (m->p && m->dt != RGPU_F32 && m->dt != RGPU_F16 && m->dt != RGPU_BF16) return false;
    }
    return true;
}

#define OPC_T double
#define OPC(name) name
#define OPC_EXP exp
#define OPC_TANH tanh
#include "rnn_cell_body.h"
#undef OPC_T
#undef OPC
#undef OPC_EXP
#undef OPC_TANH

#define OPC_T float
#define OPC(name) name##_f
#define OPC_EXP expf
#define OPC_TANH tanhf
#include "rnn_cell_body.h"
#undef OPC_T
#undef OPC
#undef OPC_EXP
#undef OPC_TANH

#endif
