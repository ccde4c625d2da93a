/* op/rnn.h — the fused recurrent cells nn.LSTM and nn.GRU run off the CPU
 * (_thnn_fused_lstm_cell, _thnn_fused_gru_cell and their backwards), one
 * (b, j) element of the (B, H) hidden state at a time, written once for both
 * backends (cpu/cpu_dense.c loops, cuda/rnn.cu runs a thread each). Math
 * in double, stored in the tensors' dtype.
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

OP_FN double op_cell_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* in input_gates, hidden_gates, cx, input_bias?, hidden_bias?; outs hy, cy, workspace */
OP_FN void op_lstm_cell_one(const op_cell *a, int64_t b, int64_t j)
{
    const int64_t H = a->H;
    double v[4];
    for (int k = 0; k < 4; k++)
        v[k] = op_cell_ld(&a->in[0], b, k * H + j) + op_cell_ld(&a->in[1], b, k * H + j) +
               (op_cell_ld(&a->in[3], 0, k * H + j) + op_cell_ld(&a->in[4], 0, k * H + j));
    double i = op_cell_sigmoid(v[0]), f = op_cell_sigmoid(v[1]), g = tanh(v[2]), o = op_cell_sigmoid(v[3]);
    double c = f * op_cell_ld(&a->in[2], b, j) + i * g;
    op_cell_st(&a->out[0], b, j, o * tanh(c));
    op_cell_st(&a->out[1], b, j, c);
    op_cell_st(&a->out[2], b, j, i);
    op_cell_st(&a->out[2], b, H + j, f);
    op_cell_st(&a->out[2], b, 2 * H + j, g);
    op_cell_st(&a->out[2], b, 3 * H + j, o);
}

/* in grad_hy?, grad_cy?, cx, cy, workspace; outs grad_gates, grad_cx */
OP_FN void op_lstm_cell_backward_one(const op_cell *a, int64_t b, int64_t j)
{
    const int64_t H = a->H;
    double i = op_cell_ld(&a->in[4], b, j), f = op_cell_ld(&a->in[4], b, H + j);
    double g = op_cell_ld(&a->in[4], b, 2 * H + j), o = op_cell_ld(&a->in[4], b, 3 * H + j);
    double gh = op_cell_ld(&a->in[0], b, j), tc = tanh(op_cell_ld(&a->in[3], b, j));
    double gc = gh * o * (1.0 - tc * tc) + op_cell_ld(&a->in[1], b, j);
    op_cell_st(&a->out[0], b, j, gc * g * (i * (1.0 - i)));
    op_cell_st(&a->out[0], b, H + j, gc * op_cell_ld(&a->in[2], b, j) * (f * (1.0 - f)));
    op_cell_st(&a->out[0], b, 2 * H + j, gc * i * (1.0 - g * g));
    op_cell_st(&a->out[0], b, 3 * H + j, gh * tc * (o * (1.0 - o)));
    op_cell_st(&a->out[1], b, j, gc * f);
}

/* in input_gates, hidden_gates, hx, input_bias?, hidden_bias?; outs hy, workspace */
OP_FN void op_gru_cell_one(const op_cell *a, int64_t b, int64_t j)
{
    const int64_t H = a->H;
    double ig[3], hg[3];
    for (int k = 0; k < 3; k++) {
        ig[k] = op_cell_ld(&a->in[0], b, k * H + j) + op_cell_ld(&a->in[3], 0, k * H + j);
        hg[k] = op_cell_ld(&a->in[1], b, k * H + j) + op_cell_ld(&a->in[4], 0, k * H + j);
    }
    double r = op_cell_sigmoid(ig[0] + hg[0]), z = op_cell_sigmoid(ig[1] + hg[1]);
    double n = tanh(ig[2] + r * hg[2]), hx = op_cell_ld(&a->in[2], b, j);
    op_cell_st(&a->out[0], b, j, n + z * (hx - n));
    op_cell_st(&a->out[1], b, j, r);
    op_cell_st(&a->out[1], b, H + j, z);
    op_cell_st(&a->out[1], b, 2 * H + j, n);
    op_cell_st(&a->out[1], b, 3 * H + j, hg[2]);
    op_cell_st(&a->out[1], b, 4 * H + j, hx);
}

/* in grad_hy, workspace; outs grad_input_gates, grad_hidden_gates, grad_hx */
OP_FN void op_gru_cell_backward_one(const op_cell *a, int64_t b, int64_t j)
{
    const int64_t H = a->H;
    double r = op_cell_ld(&a->in[1], b, j), z = op_cell_ld(&a->in[1], b, H + j);
    double n = op_cell_ld(&a->in[1], b, 2 * H + j), hn = op_cell_ld(&a->in[1], b, 3 * H + j);
    double hx = op_cell_ld(&a->in[1], b, 4 * H + j), gh = op_cell_ld(&a->in[0], b, j);
    double dz = gh * (hx - n) * (z * (1.0 - z));
    double dn = gh * (1.0 - z) * (1.0 - n * n);
    double dr = dn * hn * (r * (1.0 - r));
    op_cell_st(&a->out[0], b, j, dr);
    op_cell_st(&a->out[0], b, H + j, dz);
    op_cell_st(&a->out[0], b, 2 * H + j, dn);
    op_cell_st(&a->out[1], b, j, dr);
    op_cell_st(&a->out[1], b, H + j, dz);
    op_cell_st(&a->out[1], b, 2 * H + j, dn * r);
    op_cell_st(&a->out[2], b, j, gh * z);
}

#endif
