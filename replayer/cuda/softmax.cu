// softmax.cu — _softmax, _log_softmax and their backwards on the GPU (CPU
// reference: rgpu_r2_softmax / rgpu_r2_softmax_backward in replayer/cpu/cpu_reduce2_norm.c).
//
// A row is the line along dim; every other dim counts rows. One warp per row
// for rows up to RF_WARP_ROW_MAX elements (the GPT hot path: attention rows
// of T, logits rows of the vocabulary), one block per row beyond. Each lane
// folds its elements (lane, lane + G, ..) in order, in float (double for
// float64: reduce.cuh's opmath), then a fixed butterfly: deterministic, and every lane holds the same max
// and sum. Passes re-read the row (from L1/L2) instead of buffering it; the
// writes come after every read of the row, so out may alias in.
#include "reduce.cuh"

// Operands: a (x, or grad), b (the saved output for the backwards), out.
struct sm_args {
    rf_ctr<3> rows;     // a, b, out over every dim but dim
    long long n;        // row length
    long long rs[3];    // element strides along dim
    const void *a;
    const void *b;
    void *out;
    int adt, bdt, odt;
    int is_log;
};

//   y = exp(x - max) / sum(exp(x - max))     y = x - (max + log(sum(exp(x - max))))
// T: the opmath (reduce.cuh's rf_ld/rf_st), float unless an operand is float64.
template <bool BLK, typename T> __global__ void softmax_kernel(sm_args g)
{
    __shared__ T sh[32];
    const rf_group gr = rf_group_of<BLK>();
    for (long long row = gr.row0; row < g.rows.total; row += gr.rstep) {
        long long off[3];
        rf_ctr_offs(g.rows, row, off);
        const long long xo = off[0], yo = off[2], xs = g.rs[0], ys = g.rs[2];
        T mx = -INFINITY;
        for (long long i = gr.lane; i < g.n; i += gr.size) {
            T v = rf_ld<T>(g.a, xo + i * xs, g.adt);
            if (mx == mx && !(v <= mx)) mx = v;   // a NaN wins and sticks
        }
        mx = rf_group_max<BLK>(mx, sh);
        T sum = 0;
        for (long long i = gr.lane; i < g.n; i += gr.size) sum += exp(rf_ld<T>(g.a, xo + i * xs, g.adt) - mx);
        sum = rf_group_sum<BLK>(sum, sh);
        if (g.is_log) {
            const T sub = mx + log(sum);
            for (long long i = gr.lane; i < g.n; i += gr.size)
                rf_st(g.out, yo + i * ys, g.odt, rf_ld<T>(g.a, xo + i * xs, g.adt) - sub);
        } else {
            for (long long i = gr.lane; i < g.n; i += gr.size)
                rf_st(g.out, yo + i * ys, g.odt, exp(rf_ld<T>(g.a, xo + i * xs, g.adt) - mx) / sum);
        }
    }
}

//   softmax:     gx = y * (g - sum(g * y))
//   log_softmax: gx = g - exp(y) * sum(g)
template <bool BLK, typename T> __global__ void softmax_backward_kernel(sm_args g)
{
    __shared__ T sh[32];
    const rf_group gr = rf_group_of<BLK>();
    for (long long row = gr.row0; row < g.rows.total; row += gr.rstep) {
        long long off[3];
        rf_ctr_offs(g.rows, row, off);
        T sum = 0;
        for (long long i = gr.lane; i < g.n; i += gr.size) {
            T gv = rf_ld<T>(g.a, off[0] + i * g.rs[0], g.adt);
            if (g.is_log) sum += gv;
            else sum = rf_add(sum, rf_mul(gv, rf_ld<T>(g.b, off[1] + i * g.rs[1], g.bdt)));
        }
        sum = rf_group_sum<BLK>(sum, sh);
        for (long long i = gr.lane; i < g.n; i += gr.size) {
            T gv = rf_ld<T>(g.a, off[0] + i * g.rs[0], g.adt);
            T yv = rf_ld<T>(g.b, off[1] + i * g.rs[1], g.bdt);
            T r = g.is_log ? rf_sub(gv, rf_mul(exp(yv), sum)) : rf_mul(yv, rf_sub(gv, sum));
            rf_st(g.out, off[2] + i * g.rs[2], g.odt, r);
        }
    }
}

// Rows along dim of the operands v[0..nv) (v[0]'s shape), into g.
static void rows_along(sm_args *g, const rgpu_view *const *v, int nv, int dim)
{
    const rgpu_view *v0 = v[0];
    int64_t sz[RF_MAXD];
    for (int d = 0; d < v0->ndim; d++) sz[d] = d == dim ? 1 : v0->sizes[d];
    rf_ctr_init(&g->rows, v0->ndim, sz);
    g->n = v0->ndim > 0 ? v0->sizes[dim] : 1;
    for (int k = 0; k < 3; k++) {
        const rgpu_view *vk = v[k < nv ? k : 0];
        rf_ctr_set(&g->rows, k, vk->strides);
        g->rs[k] = v0->ndim > 0 ? vk->strides[dim] : 0;
    }
    rf_ctr_coalesce(&g->rows);
}

template <typename T> static void launch_rows_t(rgpu_cuda_ctx *c, const sm_args &g, bool backward, bool blk, unsigned grid)
{
    if (backward) {
        if (blk) softmax_backward_kernel<true, T><<<grid, RF_ROW_THREADS, 0, c->stream>>>(g);
        else softmax_backward_kernel<false, T><<<grid, RF_ROW_THREADS, 0, c->stream>>>(g);
    } else {
        if (blk) softmax_kernel<true, T><<<grid, RF_ROW_THREADS, 0, c->stream>>>(g);
        else softmax_kernel<false, T><<<grid, RF_ROW_THREADS, 0, c->stream>>>(g);
    }
}

static rgpu_status launch_rows(rgpu_cuda_ctx *c, const sm_args &g, bool backward, char *err, size_t errlen)
{
    const bool blk = g.n > RF_WARP_ROW_MAX;
    const unsigned grid = rf_row_grid(g.rows.total, blk);
    if (rf_opmath_float({ g.adt, g.bdt, g.odt })) launch_rows_t<float>(c, g, backward, blk, grid);
    else launch_rows_t<double>(c, g, backward, blk, grid);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// Rows along dim of a (the input or the grad), b (the input again, or the
// output y) into out; one launch of the forward or the backward kernel.
static rgpu_status softmax_rows(rgpu_cuda_ctx *c, const rgpu_view *a, const rgpu_view *b, rgpu_view *out, int dim,
                                bool is_log, bool backward, char *err, size_t errlen)
{
    sm_args g;
    memset(&g, 0, sizeof g);
    const rgpu_view *vs[3] = { a, b, out };
    rows_along(&g, vs, 3, dim);
    if (g.rows.total == 0 || g.n == 0) return RGPU_OK;
    g.a = a->data; g.adt = a->dtype;
    g.b = b->data; g.bdt = b->dtype;
    g.out = out->data; g.odt = out->dtype;
    g.is_log = is_log;
    return launch_rows(c, g, backward, err, errlen);
}

// in x, out y (x's shape); args int dim, bool half_to_float (only out's
// dtype changes, which the client already chose).
rgpu_status rgpu_cuda_red_softmax(rgpu_cuda_ctx *c, const rgpu_exec *e, bool is_log, char *err, size_t errlen)
{
    int dim;
    FORWARD_IF_ERROR(rgpu_op_softmax_check(e, &dim, err, errlen));
    return softmax_rows(c, e->in[0], e->in[0], e->out[0], dim, is_log, false, err, errlen);
}

// in grad g, output y (same shape); args int dim, DTYPE input_dtype (out's dtype).
rgpu_status rgpu_cuda_red_softmax_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, bool is_log, char *err,
                                           size_t errlen)
{
    int dim;
    FORWARD_IF_ERROR(rgpu_op_softmax_backward_check(e, &dim, err, errlen));
    return softmax_rows(c, e->in[0], e->in[1], e->out[0], dim, is_log, true, err, errlen);
}
