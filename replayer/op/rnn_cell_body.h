/* op/rnn_cell_body.h — op/rnn.h's cell functions, included by it twice:
 * in double (no suffix: any floating dtype, the cpu backend's and CUDA's
 * float64 math) and in float (suffix _f: float32/float16/bfloat16 operands
 * only, CUDA's float opmath). The includer defines OPC_T, OPC(name),
 * OPC_EXP, OPC_TANH and op_cell_ld/st's OPC versions. */

OP_FN OPC_T OPC(op_cell_sigmoid)(OPC_T x) { return (OPC_T)1 / ((OPC_T)1 + OPC_EXP(-x)); }

/* in input_gates, hidden_gates, cx, input_bias?, hidden_bias?; outs hy, cy, workspace */
OP_FN void OPC(op_lstm_cell_one)(const op_cell *a, int64_t b, int64_t j)
{
    const int64_t H = a->H;
    OPC_T v[4];
    for (int k = 0; k < 4; k++)
        v[k] = OPC(op_cell_ld)(&a->in[0], b, k * H + j) + OPC(op_cell_ld)(&a->in[1], b, k * H + j) +
               (OPC(op_cell_ld)(&a->in[3], 0, k * H + j) + OPC(op_cell_ld)(&a->in[4], 0, k * H + j));
    OPC_T i = OPC(op_cell_sigmoid)(v[0]), f = OPC(op_cell_sigmoid)(v[1]), g = OPC_TANH(v[2]), o = OPC(op_cell_sigmoid)(v[3]);
    OPC_T c = f * OPC(op_cell_ld)(&a->in[2], b, j) + i * g;
    OPC(op_cell_st)(&a->out[0], b, j, o * OPC_TANH(c));
    OPC(op_cell_st)(&a->out[1], b, j, c);
    OPC(op_cell_st)(&a->out[2], b, j, i);
    OPC(op_cell_st)(&a->out[2], b, H + j, f);
    OPC(op_cell_st)(&a->out[2], b, 2 * H + j, g);
    OPC(op_cell_st)(&a->out[2], b, 3 * H + j, o);
}

/* in grad_hy?, grad_cy?, cx, cy, workspace; outs grad_gates, grad_cx */
OP_FN void OPC(op_lstm_cell_backward_one)(const op_cell *a, int64_t b, int64_t j)
{
    const int64_t H = a->H;
    OPC_T i = OPC(op_cell_ld)(&a->in[4], b, j), f = OPC(op_cell_ld)(&a->in[4], b, H + j);
    OPC_T g = OPC(op_cell_ld)(&a->in[4], b, 2 * H + j), o = OPC(op_cell_ld)(&a->in[4], b, 3 * H + j);
    OPC_T gh = OPC(op_cell_ld)(&a->in[0], b, j), tc = OPC_TANH(OPC(op_cell_ld)(&a->in[3], b, j));
    OPC_T gc = gh * o * ((OPC_T)1 - tc * tc) + OPC(op_cell_ld)(&a->in[1], b, j);
    OPC(op_cell_st)(&a->out[0], b, j, gc * g * (i * ((OPC_T)1 - i)));
    OPC(op_cell_st)(&a->out[0], b, H + j, gc * OPC(op_cell_ld)(&a->in[2], b, j) * (f * ((OPC_T)1 - f)));
    OPC(op_cell_st)(&a->out[0], b, 2 * H + j, gc * i * ((OPC_T)1 - g * g));
    OPC(op_cell_st)(&a->out[0], b, 3 * H + j, gh * tc * (o * ((OPC_T)1 - o)));
    OPC(op_cell_st)(&a->out[1], b, j, gc * f);
}

/* in input_gates, hidden_gates, hx, input_bias?, hidden_bias?; outs hy, workspace */
OP_FN void OPC(op_gru_cell_one)(const op_cell *a, int64_t b, int64_t j)
{
    const int64_t H = a->H;
    OPC_T ig[3], hg[3];
    for (int k = 0; k < 3; k++) {
        ig[k] = OPC(op_cell_ld)(&a->in[0], b, k * H + j) + OPC(op_cell_ld)(&a->in[3], 0, k * H + j);
        hg[k] = OPC(op_cell_ld)(&a->in[1], b, k * H + j) + OPC(op_cell_ld)(&a->in[4], 0, k * H + j);
    }
    OPC_T r = OPC(op_cell_sigmoid)(ig[0] + hg[0]), z = OPC(op_cell_sigmoid)(ig[1] + hg[1]);
    OPC_T n = OPC_TANH(ig[2] + r * hg[2]), hx = OPC(op_cell_ld)(&a->in[2], b, j);
    OPC(op_cell_st)(&a->out[0], b, j, n + z * (hx - n));
    OPC(op_cell_st)(&a->out[1], b, j, r);
    OPC(op_cell_st)(&a->out[1], b, H + j, z);
    OPC(op_cell_st)(&a->out[1], b, 2 * H + j, n);
    OPC(op_cell_st)(&a->out[1], b, 3 * H + j, hg[2]);
    OPC(op_cell_st)(&a->out[1], b, 4 * H + j, hx);
}

/* in grad_hy, workspace; outs grad_input_gates, grad_hidden_gates, grad_hx */
OP_FN void OPC(op_gru_cell_backward_one)(const op_cell *a, int64_t b, int64_t j)
{
    const int64_t H = a->H;
    OPC_T r = OPC(op_cell_ld)(&a->in[1], b, j), z = OPC(op_cell_ld)(&a->in[1], b, H + j);
    OPC_T n = OPC(op_cell_ld)(&a->in[1], b, 2 * H + j), hn = OPC(op_cell_ld)(&a->in[1], b, 3 * H + j);
    OPC_T hx = OPC(op_cell_ld)(&a->in[1], b, 4 * H + j), gh = OPC(op_cell_ld)(&a->in[0], b, j);
    OPC_T dz = gh * (hx - n) * (z * ((OPC_T)1 - z));
    OPC_T dn = gh * ((OPC_T)1 - z) * ((OPC_T)1 - n * n);
    OPC_T dr = dn * hn * (r * ((OPC_T)1 - r));
    OPC(op_cell_st)(&a->out[0], b, j, dr);
    OPC(op_cell_st)(&a->out[0], b, H + j, dz);
    OPC(op_cell_st)(&a->out[0], b, 2 * H + j, dn);
    OPC(op_cell_st)(&a->out[1], b, j, dr);
    OPC(op_cell_st)(&a->out[1], b, H + j, dz);
    OPC(op_cell_st)(&a->out[1], b, 2 * H + j, dn * r);
    OPC(op_cell_st)(&a->out[2], b, j, gh * z);
}

/* element (b, j) of op (LSTM_CELL, LSTM_CELL_BACKWARD, GRU_CELL or
 * GRU_CELL_BACKWARD) */
OP_FN void OPC(op_rnn_cell_one)(int op, const op_cell *a, int64_t b, int64_t j)
{
    switch (op) {
    case RGPU_OP_LSTM_CELL:          OPC(op_lstm_cell_one)(a, b, j); break;
    case RGPU_OP_LSTM_CELL_BACKWARD: OPC(op_lstm_cell_backward_one)(a, b, j); break;
    case RGPU_OP_GRU_CELL:           OPC(op_gru_cell_one)(a, b, j); break;
    default:                         OPC(op_gru_cell_backward_one)(a, b, j); break;
    }
}
