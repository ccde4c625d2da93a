// norm.cu — native_layer_norm and native_layer_norm_backward on the GPU (CPU
// reference: rgpu_r2_layer_norm / rgpu_r2_layer_norm_backward in
// replayer/cpu/cpu_reduce2_norm.c).
//
// x is (lead..., norm...) with norm = normalized_shape: M = prod(lead) rows
// of N = prod(norm) elements; mean/rstd are (lead..., 1...); weight and bias
// are norm-shaped. Per row (one warp for N <= RF_WARP_ROW_MAX — GPT's C = 384
// — else one block), everything in the opmath (reduce.cuh: float, double
// when an operand is float64; the CPU reference runs double), sums in a fixed
// order. dw/db sum over rows in two fixed-order stages through scratch:
// (column block, row chunk) partials, then one thread per column folds the
// chunks in order. Elementwise formulas use _rn intrinsics so nothing is
// contracted into an FMA (rf_add/rf_sub/rf_mul).
#include "reduce.cuh"

// Element strides of v over the norm dims (the trailing k dims of v).
static const int64_t *norm_strides(const rgpu_view *v, int k)
{
    return v ? v->strides + (v->ndim - k) : NULL;
}

// ---------------------------------------------------------------------------
// native_layer_norm: in x, weight?, bias?; args ints normalized_shape, float
// eps; outs y (x's shape), mean?, rstd? (stat shape).
//   mean = sum(x)/N, var = sum((x - mean)^2)/N, rstd = 1/sqrt(var + eps)
//   y = (x - mean) * rstd * w + b;  N == 0 gives mean 0, rstd NaN.

struct ln_fwd_args {
    rf_ctr<4> lead;     // x, y, mean, rstd over the leading dims
    rf_ctr<4> row;      // x, y, w, b over the norm dims
    long long N;
    double rN, eps;
    float rNf, epsf;    // the same in float (rf_pick)
    const void *x, *w, *b;
    void *y, *mean, *rstd;
    int xdt, wdt, bdt, ydt, mdt, rdt;
    int rms;            // _fused_rms_norm: mean taken as 0 (no bias)
};

template <bool BLK, typename T> __global__ void ln_fwd_kernel(ln_fwd_args g)
{
    __shared__ T sh[32];
    const rf_group gr = rf_group_of<BLK>();
    for (long long m = gr.row0; m < g.lead.total; m += gr.rstep) {
        long long lo[4];
        rf_ctr_offs(g.lead, m, lo);
        T mu = 0;
        if (!g.rms) {
            for (long long i = gr.lane; i < g.N; i += gr.size) {
                long long ro[4];
                rf_ctr_offs(g.row, i, ro);
                mu += rf_ld<T>(g.x, lo[0] + ro[0], g.xdt);
            }
            mu = rf_group_sum<BLK>(mu, sh) * rf_pick<T>(g.rN, g.rNf);
        }
        T var = 0;
        for (long long i = gr.lane; i < g.N; i += gr.size) {
            long long ro[4];
            rf_ctr_offs(g.row, i, ro);
            T d = rf_ld<T>(g.x, lo[0] + ro[0], g.xdt) - mu;
            var = rf_add(var, rf_mul(d, d));
        }
        var = rf_group_sum<BLK>(var, sh) * rf_pick<T>(g.rN, g.rNf);
        T rs = (T)1 / sqrt(var + rf_pick<T>(g.eps, g.epsf));
        if (g.N == 0) { mu = 0; rs = NAN; }
        for (long long i = gr.lane; i < g.N; i += gr.size) {
            long long ro[4];
            rf_ctr_offs(g.row, i, ro);
            T xv = rf_ld<T>(g.x, lo[0] + ro[0], g.xdt);
            T wv = g.w ? rf_ld<T>(g.w, ro[2], g.wdt) : (T)1;
            T bv = g.b ? rf_ld<T>(g.b, ro[3], g.bdt) : (T)0;
            T yv = rf_add(rf_mul(rf_mul(rf_sub(xv, mu), rs), wv), bv);
            rf_st(g.y, lo[1] + ro[1], g.ydt, yv);
        }
        if (gr.lane == 0) {
            if (g.mean) rf_st(g.mean, lo[2], g.mdt, mu);
            if (g.rstd) rf_st(g.rstd, lo[3], g.rdt, rs);
        }
    }
}

static rgpu_status ln_forward(rgpu_cuda_ctx *c, const rgpu_view *x, const rgpu_view *w, const rgpu_view *b, rgpu_view *y,
                              rgpu_view *mean, rgpu_view *rstd, const op_ln_shape &s, bool rms, char *err, size_t errlen)
{
    if (s.M == 0) return RGPU_OK;
    ln_fwd_args g;
    memset(&g, 0, sizeof g);
    g.rms = rms;
    rf_ctr_build(&g.lead, s.lead, x->sizes,
                 { x->strides, y->strides, mean ? mean->strides : NULL, rstd ? rstd->strides : NULL });
    rf_ctr_build(&g.row, s.k, s.norm,
                 { norm_strides(x, s.k), norm_strides(y, s.k), norm_strides(w, s.k), norm_strides(b, s.k) });
    g.N = s.N;
    g.rN = 1.0 / (double)s.N;
    g.eps = s.eps;
    g.rNf = 1.0f / (float)s.N;
    g.epsf = (float)s.eps;
    g.x = x->data; g.xdt = x->dtype;
    g.w = w ? w->data : NULL; g.wdt = w ? w->dtype : 0;
    g.b = b ? b->data : NULL; g.bdt = b ? b->dtype : 0;
    g.y = y->data; g.ydt = y->dtype;
    g.mean = mean ? mean->data : NULL; g.mdt = mean ? mean->dtype : 0;
    g.rstd = rstd ? rstd->data : NULL; g.rdt = rstd ? rstd->dtype : 0;
    const bool blk = s.N > RF_WARP_ROW_MAX;
    const unsigned grid = rf_row_grid(g.lead.total, blk);
    if (rf_opmath_float({ g.xdt, w ? g.wdt : -1, b ? g.bdt : -1, g.ydt, mean ? g.mdt : -1, rstd ? g.rdt : -1 })) {
        if (blk) ln_fwd_kernel<true, float><<<grid, RF_ROW_THREADS, 0, c->stream>>>(g);
        else ln_fwd_kernel<false, float><<<grid, RF_ROW_THREADS, 0, c->stream>>>(g);
    } else {
        if (blk) ln_fwd_kernel<true, double><<<grid, RF_ROW_THREADS, 0, c->stream>>>(g);
        else ln_fwd_kernel<false, double><<<grid, RF_ROW_THREADS, 0, c->stream>>>(g);
    }
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

rgpu_status rgpu_cuda_red_layer_norm(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_ln_shape s;
    FORWARD_IF_ERROR(rgpu_op_layer_norm_check(e, &s, err, errlen));
    return ln_forward(c, e->in[0], e->in[1], e->in[2], e->out[0], e->out[1], e->out[2], s, false, err, errlen);
}

// _fused_rms_norm: in x, weight?; outs y, rstd?: layer norm's kernel with mean 0 and no bias.
rgpu_status rgpu_cuda_red_rms_norm(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_ln_shape s;
    FORWARD_IF_ERROR(rgpu_op_rms_norm_check(e, &s, err, errlen));
    return ln_forward(c, e->in[0], e->in[1], NULL, e->out[0], NULL, e->out[1], s, true, err, errlen);
}

// ---------------------------------------------------------------------------
// native_layer_norm_backward: in grad g, x, mean, rstd, weight?, bias?; args
// ints normalized_shape; outs dx?, dw?, db?. With xhat = (x - mean) * rstd
// and gw = g * w, per row:
//   dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
//   dw = sum over rows of g * xhat,  db = sum over rows of g
// mean/rstd are the saved ones (not recomputed), as ATen.

struct ln_bwd_args {
    rf_ctr<5> lead;     // g, x, mean, rstd, dx over the leading dims
    rf_ctr<4> row;      // g, x, dx, w over the norm dims
    long long M, N;
    double rN;
    float rNf;
    const void *g, *x, *mean, *rstd, *w;
    void *dx;
    int gdt, xdt, mdt, rdt, wdt, dxdt;
    // dw/db
    long long nsplit, chunk;
    void *partial;      // T[2][nsplit][N]: dw then db (T: the opmath)
    rf_ctr<2> prow;     // dw, db over the norm dims
    void *dw, *db;
    int dwdt, dbdt;
};

template <bool BLK, typename T> __global__ void ln_bwd_dx_kernel(ln_bwd_args a)
{
    __shared__ T sh[32];
    const rf_group gr = rf_group_of<BLK>();
    for (long long m = gr.row0; m < a.lead.total; m += gr.rstep) {
        long long lo[5];
        rf_ctr_offs(a.lead, m, lo);
        const T mu = a.mean ? rf_ld<T>(a.mean, lo[2], a.mdt) : (T)0;     // rms norm: no mean
        const T rs = rf_ld<T>(a.rstd, lo[3], a.rdt);
        T sgw = 0, sgwx = 0;
        for (long long i = gr.lane; i < a.N; i += gr.size) {
            long long ro[4];
            rf_ctr_offs(a.row, i, ro);
            T xh = rf_mul(rf_sub(rf_ld<T>(a.x, lo[1] + ro[1], a.xdt), mu), rs);
            T gw = rf_mul(rf_ld<T>(a.g, lo[0] + ro[0], a.gdt), a.w ? rf_ld<T>(a.w, ro[3], a.wdt) : (T)1);
            sgw += gw;
            sgwx = rf_add(sgwx, rf_mul(gw, xh));
        }
        sgw = rf_group_sum<BLK>(sgw, sh);
        sgwx = rf_group_sum<BLK>(sgwx, sh);
        const T ma = a.mean ? sgw * rf_pick<T>(a.rN, a.rNf) : (T)0, mb = sgwx * rf_pick<T>(a.rN, a.rNf);
        for (long long i = gr.lane; i < a.N; i += gr.size) {
            long long ro[4];
            rf_ctr_offs(a.row, i, ro);
            T xh = rf_mul(rf_sub(rf_ld<T>(a.x, lo[1] + ro[1], a.xdt), mu), rs);
            T gw = rf_mul(rf_ld<T>(a.g, lo[0] + ro[0], a.gdt), a.w ? rf_ld<T>(a.w, ro[3], a.wdt) : (T)1);
            T d = rf_mul(rs, rf_sub(rf_sub(gw, ma), rf_mul(xh, mb)));
            rf_st(a.dx, lo[4] + ro[2], a.dxdt, d);
        }
    }
}

// Stage 1 of dw/db: block (32, 8) owns 32 columns and the row chunk
// blockIdx.y; thread (x, y) folds rows y, y + 8, .. of the chunk, then a
// fixed tree over y.
#define LN_BX 32
#define LN_BY 8
template <typename T> __global__ void ln_bwd_dwdb_partial_kernel(ln_bwd_args a)
{
    __shared__ T shw[LN_BY][LN_BX], shb[LN_BY][LN_BX];
    T *const partial = (T *)a.partial;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long s = blockIdx.y;
    const long long m0 = s * a.chunk, m1 = min(a.M, m0 + a.chunk);
    const long long ncb = (a.N + LN_BX - 1) / LN_BX;
    for (long long cb = blockIdx.x; cb < ncb; cb += gridDim.x) {
        const long long j = cb * LN_BX + tx;
        T dw = 0, db = 0;
        if (j < a.N) {
            long long ro[4];
            rf_ctr_offs(a.row, j, ro);
            for (long long m = m0 + ty; m < m1; m += LN_BY) {
                long long lo[5];
                rf_ctr_offs(a.lead, m, lo);
                T gv = rf_ld<T>(a.g, lo[0] + ro[0], a.gdt);
                T xh = rf_mul(rf_sub(rf_ld<T>(a.x, lo[1] + ro[1], a.xdt), a.mean ? rf_ld<T>(a.mean, lo[2], a.mdt) : (T)0),
                              rf_ld<T>(a.rstd, lo[3], a.rdt));
                dw = rf_add(dw, rf_mul(gv, xh));
                db += gv;
            }
        }
        shw[ty][tx] = dw;
        shb[ty][tx] = db;
        __syncthreads();
        for (int st = LN_BY / 2; st > 0; st >>= 1) {
            if (ty < st) {
                shw[ty][tx] += shw[ty + st][tx];
                shb[ty][tx] += shb[ty + st][tx];
            }
            __syncthreads();
        }
        if (ty == 0 && j < a.N) {
            partial[s * a.N + j] = shw[0][tx];
            partial[(a.nsplit + s) * a.N + j] = shb[0][tx];
        }
        __syncthreads();
    }
}

// Stage 2: one thread per column folds the chunks in order.
template <typename T> __global__ void ln_bwd_dwdb_final_kernel(ln_bwd_args a)
{
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < a.N;
         j += (long long)gridDim.x * blockDim.x) {
        const T *const partial = (const T *)a.partial;
        T dw = partial[j], db = partial[a.nsplit * a.N + j];
        for (long long s = 1; s < a.nsplit; s++) {
            dw += partial[s * a.N + j];
            db += partial[(a.nsplit + s) * a.N + j];
        }
        long long po[2];
        rf_ctr_offs(a.prow, j, po);
        if (a.dw) rf_st(a.dw, po[0], a.dwdt, dw);
        if (a.db) rf_st(a.db, po[1], a.dbdt, db);
    }
}

// mean NULL: rms norm's backward (xhat = x * rstd, no mean(gw) term; db NULL).
static rgpu_status ln_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, const rgpu_view *g, const rgpu_view *x,
                               const rgpu_view *mean, const rgpu_view *rstd, const rgpu_view *w, rgpu_view *dx,
                               rgpu_view *dw, rgpu_view *db, const op_ln_shape &s, char *err, size_t errlen)
{
    if (s.N == 0 || (dx == NULL && dw == NULL && db == NULL)) return RGPU_OK;

    ln_bwd_args a;
    memset(&a, 0, sizeof a);
    rf_ctr_build(&a.lead, s.lead, x->sizes,
                 { g->strides, x->strides, mean ? mean->strides : NULL, rstd->strides, dx ? dx->strides : NULL });
    rf_ctr_build(&a.row, s.k, s.norm,
                 { norm_strides(g, s.k), norm_strides(x, s.k), norm_strides(dx, s.k), norm_strides(w, s.k) });
    rf_ctr_build(&a.prow, s.k, s.norm, { norm_strides(dw, s.k), norm_strides(db, s.k) });
    a.M = s.M; a.N = s.N;
    a.rN = 1.0 / (double)s.N;
    a.rNf = 1.0f / (float)s.N;
    a.g = g->data; a.gdt = g->dtype;
    a.x = x->data; a.xdt = x->dtype;
    a.mean = mean ? mean->data : NULL; a.mdt = mean ? mean->dtype : -1;
    a.rstd = rstd->data; a.rdt = rstd->dtype;
    a.w = w ? w->data : NULL; a.wdt = w ? w->dtype : 0;
    a.dx = dx ? dx->data : NULL; a.dxdt = dx ? dx->dtype : 0;
    a.dw = dw ? dw->data : NULL; a.dwdt = dw ? dw->dtype : 0;
    a.db = db ? db->data : NULL; a.dbdt = db ? db->dtype : 0;

    const bool opf = rf_opmath_float({ a.gdt, a.xdt, a.mdt, a.rdt, w ? a.wdt : -1, dx ? a.dxdt : -1, dw ? a.dwdt : -1,
                                       db ? a.dbdt : -1 });
    if (dx && s.M > 0) {
        const bool blk = s.N > RF_WARP_ROW_MAX;
        const unsigned grid = rf_row_grid(s.M, blk);
        if (opf) {
            if (blk) ln_bwd_dx_kernel<true, float><<<grid, RF_ROW_THREADS, 0, c->stream>>>(a);
            else ln_bwd_dx_kernel<false, float><<<grid, RF_ROW_THREADS, 0, c->stream>>>(a);
        } else {
            if (blk) ln_bwd_dx_kernel<true, double><<<grid, RF_ROW_THREADS, 0, c->stream>>>(a);
            else ln_bwd_dx_kernel<false, double><<<grid, RF_ROW_THREADS, 0, c->stream>>>(a);
        }
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    if (dw == NULL && db == NULL) return RGPU_OK;

    // row chunks: about 64 rows each, at most 256 chunks; M == 0 gives zeros
    long long S = (s.M + 63) / 64;
    if (S > 256) S = 256;
    if (S < 1) S = 1;
    a.chunk = s.M > 0 ? (s.M + S - 1) / S : 0;
    if (s.M > 0) S = (s.M + a.chunk - 1) / a.chunk;
    a.nsplit = S;
    a.partial = rgpu_cuda_scratch(c, (size_t)2 * (size_t)S * (size_t)s.N * (opf ? sizeof(float) : sizeof(double)));
    if (a.partial == NULL)
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of device memory for %lld x %lld partial sums", rgpu_op_name(e->op),
                     S, (long long)s.N);
    long long ncb = (s.N + LN_BX - 1) / LN_BX;
    if (ncb > RF_MAX_GRID) ncb = RF_MAX_GRID;
    const dim3 pgrid((unsigned)ncb, (unsigned)S), pblock(LN_BX, LN_BY);
    if (opf) ln_bwd_dwdb_partial_kernel<float><<<pgrid, pblock, 0, c->stream>>>(a);
    else ln_bwd_dwdb_partial_kernel<double><<<pgrid, pblock, 0, c->stream>>>(a);
    cudaError_t ce = cudaGetLastError();
    if (ce == cudaSuccess) {
        long long nb = (s.N + 255) / 256;
        if (nb > RF_MAX_GRID) nb = RF_MAX_GRID;
        if (opf) ln_bwd_dwdb_final_kernel<float><<<(unsigned)nb, 256, 0, c->stream>>>(a);
        else ln_bwd_dwdb_final_kernel<double><<<(unsigned)nb, 256, 0, c->stream>>>(a);
        ce = cudaGetLastError();
    }
    rgpu_cuda_scratch_free(c, a.partial);
    RGPU_CUDA_TRY(ce, err, errlen);
    return RGPU_OK;
}

rgpu_status rgpu_cuda_red_layer_norm_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_ln_shape s;
    FORWARD_IF_ERROR(rgpu_op_layer_norm_backward_check(e, &s, err, errlen));
    return ln_backward(c, e, e->in[0], e->in[1], e->in[2], e->in[3], e->in[4], e->out[0], e->out[1], e->out[2], s, err,
                       errlen);
}

// _fused_rms_norm_backward: in grad, x, rstd, weight?; outs dx?, dw?.
rgpu_status rgpu_cuda_red_rms_norm_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_ln_shape s;
    FORWARD_IF_ERROR(rgpu_op_rms_norm_backward_check(e, &s, err, errlen));
    return ln_backward(c, e, e->in[0], e->in[1], NULL, e->in[2], e->in[3], e->out[0], e->out[1], NULL, s, err, errlen);
}
