// conv.cu — convolution and convolution_backward on the CUDA backend:
// im2col + cuBLAS GEMM per (chunk of images, group), 3-D (N,C,D,H,W), 2-D
// (N,C,H,W) as D = 1 and 1-D (N,C,L) as D = H = 1, plain and transposed.
// CPU reference: rgpu_cpu_dense_conv.c
// (same checks, messages, geometry and compute types).
//
// Three cores over one geometry: an input-space tensor I (N,C,H,W), an
// output-space tensor G (N,O,Ho,Wo) and the weight (O, C/groups, kh, kw):
//   conv_fwd:    G = conv(I, w)                 (W_g @ im2col(I_g))
//   conv_data:   I = conv^T(G, w)               (col2im(W_g^T @ G_g))
//   conv_weight: dw = sum over images of G_g @ im2col(I_g)^T, image by image
// A plain convolution runs fwd forward and data/weight backward; a transposed
// one is the same geometry with x on the G side.
// Compute: f32 for f32/f16/bf16 (rounded once at the end), f64, wrapping
// int64 for integer forward. Determinism: col2im is one thread per input
// element summing its (ki, kj) contributions in order (no atomics); dw
// accumulates image after image with beta = 1; db is a fixed-order tree sum.
#include "dense.cuh"

// ---------------------------------------------------------------------------
// Geometry: op_conv_geom, op_conv_args, rgpu_op_conv_parse_args, rgpu_op_conv_geometry,
// rgpu_op_conv_check_sizes, rgpu_op_conv_as_4d from cpu_dense.h (the CPU backend parses and
// checks the same records).


// ---------------------------------------------------------------------------
// Kernels. x is (nc, C, D, H, W) packed; col is (nc, C*kt*kh*kw, Do*Ho*Wo) packed, the
// rows of group g being those of its channels (g*Cg .. (g+1)*Cg).

struct kgeom {
    int64_t C, D, H, W, Do, Ho, Wo, kt, kh, kw, st, sh, sw, pt, ph, pw, dt, dh, dw;
};

static kgeom kgeom_of(const op_conv_geom *g)
{
    kgeom k = { g->C, g->D, g->H, g->W, g->Do, g->Ho, g->Wo, g->kt, g->kh, g->kw, g->st, g->sh, g->sw,
                g->pt, g->ph, g->pw, g->dt, g->dh, g->dw };
    return k;
}

// One thread per col element (n, c, kt, ki, kj, od, oh, ow); padding reads as zero.
template <typename T>
static __global__ void im2col_kernel(kgeom g, int64_t nc, const T *x, T *col)
{
    int64_t hwo = g.Do * g.Ho * g.Wo, total = nc * g.C * g.kt * g.kh * g.kw * hwo;
    DCU_LOOP(t, total) {
        int64_t ow = t % g.Wo, r = t / g.Wo;
        int64_t oh = r % g.Ho; r /= g.Ho;
        int64_t od = r % g.Do; r /= g.Do;
        int64_t kj = r % g.kw; r /= g.kw;
        int64_t ki = r % g.kh; r /= g.kh;
        int64_t kt = r % g.kt; r /= g.kt;
        int64_t ch = r % g.C, n = r / g.C;
        int64_t id = od * g.st - g.pt + kt * g.dt;
        int64_t ih = oh * g.sh - g.ph + ki * g.dh, iw = ow * g.sw - g.pw + kj * g.dw;
        T v = 0;
        if (id >= 0 && id < g.D && ih >= 0 && ih < g.H && iw >= 0 && iw < g.W)
            v = x[(((n * g.C + ch) * g.D + id) * g.H + ih) * g.W + iw];
        col[t] = v;
    }
}

// One thread per x element (n, c, id, ih, iw): the sum of its col entries in
// (kt, ki, kj) order, starting from 0 — the order the CPU's col2im adds them.
template <typename T>
static __global__ void col2im_kernel(kgeom g, int64_t nc, const T *col, T *x)
{
    int64_t hwo = g.Do * g.Ho * g.Wo, total = nc * g.C * g.D * g.H * g.W;
    DCU_LOOP(t, total) {
        int64_t iw = t % g.W, r = t / g.W;
        int64_t ih = r % g.H; r /= g.H;
        int64_t id = r % g.D; r /= g.D;
        int64_t ch = r % g.C, n = r / g.C;
        const T *cbase = col + (n * g.C + ch) * g.kt * g.kh * g.kw * hwo;
        T acc = 0;
        for (int64_t kt = 0; kt < g.kt; kt++) {
            int64_t td = id + g.pt - kt * g.dt;   /* = od * st */
            if (td < 0 || td % g.st != 0) continue;
            int64_t od = td / g.st;
            if (od >= g.Do) continue;
            for (int64_t ki = 0; ki < g.kh; ki++) {
                int64_t th = ih + g.ph - ki * g.dh;   /* = oh * sh */
                if (th < 0 || th % g.sh != 0) continue;
                int64_t oh = th / g.sh;
                if (oh >= g.Ho) continue;
                for (int64_t kj = 0; kj < g.kw; kj++) {
                    int64_t tw = iw + g.pw - kj * g.dw;
                    if (tw < 0 || tw % g.sw != 0) continue;
                    int64_t ow = tw / g.sw;
                    if (ow >= g.Wo) continue;
                    acc += cbase[((kt * g.kh + ki) * g.kw + kj) * hwo + (od * g.Ho + oh) * g.Wo + ow];
                }
            }
        }
        x[t] = acc;
    }
}

// db[c] = sum over (n, h, w) of grad in the opmath T (float for
// float32/float16/bfloat16, double for float64): a block per channel, each
// thread a strided run in index order, then a fixed tree.
template <typename T>
static __global__ void bias_grad_kernel(rgpu_cuda_view gr, int gdt, int64_t C, int64_t per, int64_t cstride,
                                        rgpu_dcu::param db)
{
    __shared__ T sh[rgpu_dcu::THREADS];
    for (int64_t ch = blockIdx.x; ch < C; ch += gridDim.x) {
        const char *base = (const char *)gr.data + ch * cstride * op_dtype_esize(gdt);
        T s = 0;
        for (int64_t i = threadIdx.x; i < per; i += blockDim.x)
            s = rf_add(s, rf_ld<T>(base, rgpu_cuda_offset(gr, i), gdt));
        s = rgpu_dcu::block_sum(s, sh);
        if (threadIdx.x == 0) rf_st(db.p, ch * db.stride, db.dt, s);
    }
}

// ---------------------------------------------------------------------------
// Cores

// Buffers per chunk of images stay under this many bytes (at least one image).
static const int64_t CHUNK_BYTES = 512LL << 20;

static int64_t chunk_images(const op_conv_geom *g, size_t cs, bool need_col)
{
    int64_t per = (g->C * g->in_sp + g->O * g->out_sp) * (int64_t)cs;
    if (need_col) per += g->C * g->kvol * g->out_sp * (int64_t)cs;
    int64_t nc = per > 0 ? CHUNK_BYTES / per : g->N;
    if (nc < 1) nc = 1;
    return nc < g->N ? nc : g->N;
}

// Images [n0, n0+nc) of a 4-d view.
static rgpu_view images(const rgpu_view *v, int64_t n0, int64_t nc)
{
    rgpu_view s = *v;
    s.data = (char *)v->data + n0 * v->strides[0] * (int64_t)rgpu_dtype_size(v->dtype);
    s.sizes[0] = nc;
    return s;
}

// nimg x groups GEMMs (A, B, C advanced by n*s?n + g*s?g elements), batched
// over the larger of the two unless images_in_order (then one call per image,
// in image order, batched over groups: dw accumulates image after image).
struct gemm2 {
    int dt;
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    const char *A, *B;
    char *C;
    int64_t sAn, sAg, sBn, sBg, sCn, sCg;
    double beta;
};

static rgpu_status run_gemm2(rgpu_cuda_ctx *c, const gemm2 &q, int64_t nimg, int64_t groups, bool images_in_order,
                             const char *name, char *err, size_t errlen)
{
    int64_t es = (int64_t)rgpu_dtype_size(q.dt);
    if (!images_in_order && nimg >= groups) {
        for (int64_t g = 0; g < groups; g++)
            FORWARD_IF_ERROR(rgpu_dcu::gemm(c, q.dt, q.ta, q.tb, q.M, q.N, q.K, 1.0, q.A + g * q.sAg * es, q.lda, q.sAn,
                          q.B + g * q.sBg * es, q.ldb, q.sBn, q.beta, q.C + g * q.sCg * es, q.ldc, q.sCn, nimg,
                          name, err, errlen));
    } else {
        for (int64_t n = 0; n < nimg; n++)
            FORWARD_IF_ERROR(rgpu_dcu::gemm(c, q.dt, q.ta, q.tb, q.M, q.N, q.K, 1.0, q.A + n * q.sAn * es, q.lda, q.sAg,
                          q.B + n * q.sBn * es, q.ldb, q.sBg, q.beta, q.C + n * q.sCn * es, q.ldc, q.sCg, groups,
                          name, err, errlen));
    }
    return RGPU_OK;
}

template <typename T>
static rgpu_status launch_im2col(rgpu_cuda_ctx *c, const op_conv_geom *g, int64_t nc, const void *x, void *col,
                                 char *err, size_t errlen)
{
    int64_t total = nc * g->C * g->kvol * g->out_sp;
    if (total == 0) return RGPU_OK;
    im2col_kernel<T><<<rgpu_dcu::blocks_for(total), rgpu_dcu::THREADS, 0, c->stream>>>(kgeom_of(g), nc, (const T *)x, (T *)col);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

static rgpu_status im2col(rgpu_cuda_ctx *c, int ct, const op_conv_geom *g, int64_t nc, const void *x, void *col,
                          char *err, size_t errlen)
{
    if (ct == OP_CT_F32) return launch_im2col<float>(c, g, nc, x, col, err, errlen);
    if (ct == OP_CT_F64) return launch_im2col<double>(c, g, nc, x, col, err, errlen);
    return launch_im2col<uint64_t>(c, g, nc, x, col, err, errlen);
}

template <typename T>
static rgpu_status launch_col2im(rgpu_cuda_ctx *c, const op_conv_geom *g, int64_t nc, const void *col, void *x,
                                 char *err, size_t errlen)
{
    int64_t total = nc * g->C * g->in_sp;
    if (total == 0) return RGPU_OK;
    col2im_kernel<T><<<rgpu_dcu::blocks_for(total), rgpu_dcu::THREADS, 0, c->stream>>>(kgeom_of(g), nc, (const T *)col, (T *)x);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

static rgpu_status col2im(rgpu_cuda_ctx *c, int ct, const op_conv_geom *g, int64_t nc, const void *col, void *x,
                          char *err, size_t errlen)
{
    if (ct == OP_CT_F32) return launch_col2im<float>(c, g, nc, col, x, err, errlen);
    if (ct == OP_CT_F64) return launch_col2im<double>(c, g, nc, col, x, err, errlen);
    return launch_col2im<uint64_t>(c, g, nc, col, x, err, errlen);
}

#define NOMEM_IF(cond) do { if (cond) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of device memory for convolution buffers", \
                                                rgpu_op_name(op)); } while (0)

// wbuf: the weight packed as (O, Cg*kh*kw) in ct; bias: packed per row of the
// tensor written (O for fwd, C for data), or NULL.
static rgpu_status conv_fwd(rgpu_cuda_ctx *c, int op, int ct, const op_conv_geom *g, const void *wbuf, const void *bias,
                            const rgpu_view *I, rgpu_view *G, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(op);
    size_t cs = rgpu_dcu::ct_size(ct);
    int64_t kd = g->Cg * g->kvol, hwo = g->out_sp, hw = g->in_sp;
    int64_t nc = chunk_images(g, cs, !g->pointwise);
    rgpu_dcu::scratch sc(c);
    char *x = (char *)sc.get(nc * g->C * hw, cs);
    char *col = g->pointwise ? NULL : (char *)sc.get(nc * g->C * g->kvol * hwo, cs);
    char *y = (char *)sc.get(nc * g->O * hwo, cs);
    NOMEM_IF(!x || (!g->pointwise && !col) || !y);
    for (int64_t n0 = 0; n0 < g->N; n0 += nc) {
        int64_t cnt = g->N - n0 < nc ? g->N - n0 : nc;
        rgpu_view in = images(I, n0, cnt), out = images(G, n0, cnt);
        FORWARD_IF_ERROR(rgpu_dcu::pack(c, &in, ct, x, err, errlen));
        if (!g->pointwise) FORWARD_IF_ERROR(im2col(c, ct, g, cnt, x, col, err, errlen));
        gemm2 q;
        q.dt = rgpu_dcu::ct_dtype(ct); q.ta = false; q.tb = false;
        q.M = g->Og; q.N = hwo; q.K = kd; q.lda = kd; q.ldb = hwo; q.ldc = hwo;
        q.A = (const char *)wbuf; q.sAn = 0; q.sAg = g->Og * kd;
        q.B = g->pointwise ? x : col;
        q.sBn = g->pointwise ? g->C * hw : g->C * g->kvol * hwo;
        q.sBg = g->pointwise ? g->Cg * hw : kd * hwo;
        q.C = y; q.sCn = g->O * hwo; q.sCg = g->Og * hwo;
        q.beta = 0.0;
        FORWARD_IF_ERROR(run_gemm2(c, q, cnt, g->groups, false, name, err, errlen));
        FORWARD_IF_ERROR(rgpu_dcu::unpack(c, &out, ct, y, bias, g->O, hwo, err, errlen));
    }
    return RGPU_OK;
}

static rgpu_status conv_data(rgpu_cuda_ctx *c, int op, int ct, const op_conv_geom *g, const void *wbuf, const void *bias,
                             const rgpu_view *G, rgpu_view *I, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(op);
    size_t cs = rgpu_dcu::ct_size(ct);
    int64_t kd = g->Cg * g->kvol, hwo = g->out_sp, hw = g->in_sp;
    int64_t nc = chunk_images(g, cs, !g->pointwise);
    rgpu_dcu::scratch sc(c);
    char *gb = (char *)sc.get(nc * g->O * hwo, cs);
    char *col = g->pointwise ? NULL : (char *)sc.get(nc * g->C * g->kvol * hwo, cs);
    char *x = (char *)sc.get(nc * g->C * hw, cs);
    NOMEM_IF(!gb || (!g->pointwise && !col) || !x);
    for (int64_t n0 = 0; n0 < g->N; n0 += nc) {
        int64_t cnt = g->N - n0 < nc ? g->N - n0 : nc;
        rgpu_view in = images(G, n0, cnt), out = images(I, n0, cnt);
        FORWARD_IF_ERROR(rgpu_dcu::pack(c, &in, ct, gb, err, errlen));
        gemm2 q;
        q.dt = rgpu_dcu::ct_dtype(ct); q.ta = true; q.tb = false;
        q.N = hwo; q.K = g->Og; q.lda = kd; q.ldb = hwo;
        q.A = (const char *)wbuf; q.sAn = 0; q.sAg = g->Og * kd;
        q.B = gb; q.sBn = g->O * hwo; q.sBg = g->Og * hwo;
        q.beta = 0.0;
        if (g->pointwise) {   /* straight into x: (Cg, hw) per (image, group) */
            q.M = g->Cg; q.ldc = hw;
            q.C = x; q.sCn = g->C * hw; q.sCg = g->Cg * hw;
            FORWARD_IF_ERROR(run_gemm2(c, q, cnt, g->groups, false, name, err, errlen));
        } else {
            q.M = kd; q.ldc = hwo;
            q.C = col; q.sCn = g->C * g->kvol * hwo; q.sCg = kd * hwo;
            FORWARD_IF_ERROR(run_gemm2(c, q, cnt, g->groups, false, name, err, errlen));
            FORWARD_IF_ERROR(col2im(c, ct, g, cnt, col, x, err, errlen));
        }
        FORWARD_IF_ERROR(rgpu_dcu::unpack(c, &out, ct, x, bias, g->C, hw, err, errlen));
    }
    return RGPU_OK;
}

static rgpu_status conv_weight(rgpu_cuda_ctx *c, int op, int ct, const op_conv_geom *g, const rgpu_view *I,
                               const rgpu_view *G, rgpu_view *dw, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(op);
    size_t cs = rgpu_dcu::ct_size(ct);
    int64_t kd = g->Cg * g->kvol, hwo = g->out_sp, hw = g->in_sp;
    int64_t nc = chunk_images(g, cs, !g->pointwise);
    rgpu_dcu::scratch sc(c);
    char *x = (char *)sc.get(nc * g->C * hw, cs);
    char *col = g->pointwise ? NULL : (char *)sc.get(nc * g->C * g->kvol * hwo, cs);
    char *gb = (char *)sc.get(nc * g->O * hwo, cs);
    char *wb = (char *)sc.get(g->O * kd, cs);
    NOMEM_IF(!x || (!g->pointwise && !col) || !gb || !wb);
    FORWARD_IF_ERROR(rgpu_dcu::zero(c, wb, (size_t)(g->O * kd) * cs, err, errlen));
    for (int64_t n0 = 0; n0 < g->N; n0 += nc) {
        int64_t cnt = g->N - n0 < nc ? g->N - n0 : nc;
        rgpu_view in = images(I, n0, cnt), gv = images(G, n0, cnt);
        FORWARD_IF_ERROR(rgpu_dcu::pack(c, &in, ct, x, err, errlen));
        FORWARD_IF_ERROR(rgpu_dcu::pack(c, &gv, ct, gb, err, errlen));
        if (!g->pointwise) FORWARD_IF_ERROR(im2col(c, ct, g, cnt, x, col, err, errlen));
        gemm2 q;
        q.dt = rgpu_dcu::ct_dtype(ct); q.ta = false; q.tb = true;
        q.M = g->Og; q.N = kd; q.K = hwo; q.lda = hwo; q.ldb = hwo; q.ldc = kd;
        q.A = gb; q.sAn = g->O * hwo; q.sAg = g->Og * hwo;
        q.B = g->pointwise ? x : col;
        q.sBn = g->pointwise ? g->C * hw : g->C * g->kvol * hwo;
        q.sBg = g->pointwise ? g->Cg * hw : kd * hwo;
        q.C = wb; q.sCn = 0; q.sCg = g->Og * kd;
        q.beta = 1.0;
        FORWARD_IF_ERROR(run_gemm2(c, q, cnt, g->groups, true, name, err, errlen));
    }
    return rgpu_dcu::unpack(c, dw, ct, wb, NULL, 0, 0, err, errlen);
}

static rgpu_status conv_bias_grad(rgpu_cuda_ctx *c, const rgpu_view *grad, rgpu_view *db, char *err, size_t errlen)
{
    int64_t C = grad->sizes[1], per = grad->sizes[0];
    for (int d = 2; d < grad->ndim; d++) per *= grad->sizes[d];
    rgpu_view rest = rgpu_op_dense_subview(grad, 1, 0);   /* (N, [D,] H, W) of channel 0 */
    rest.data = grad->data;
    int64_t blocks = C < 65535 ? C : 65535;
    if (rf_opmath_float({ grad->dtype, db->dtype }))
        bias_grad_kernel<float><<<(unsigned)blocks, rgpu_dcu::THREADS, 0, c->stream>>>(
            rgpu_cuda_view_of(&rest), grad->dtype, C, per, grad->strides[1], rgpu_dcu::param_of(db));
    else
        bias_grad_kernel<double><<<(unsigned)blocks, rgpu_dcu::THREADS, 0, c->stream>>>(
            rgpu_cuda_view_of(&rest), grad->dtype, C, per, grad->strides[1], rgpu_dcu::param_of(db));
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// Weight (O, Cg, kh, kw) packed as (O, Cg*kh*kw) into sc.
static void *pack_weight(rgpu_cuda_ctx *c, int op, rgpu_dcu::scratch &sc, int ct, const rgpu_view *w, rgpu_status *st,
                         char *err, size_t errlen)
{
    void *buf = sc.get(rgpu_op_numel(w), rgpu_dcu::ct_size(ct));
    if (!buf) {
        snprintf(err, errlen, "%s: out of device memory packing the weight", rgpu_op_name(op));
        *st = RGPU_ERR_NOMEM;
        return NULL;
    }
    *st = rgpu_dcu::pack(c, w, ct, buf, err, errlen);
    return *st == RGPU_OK ? buf : NULL;
}

// ---------------------------------------------------------------------------
// Entry points

/* in x, w, bias?; stride, padding, dilation, transposed, output_padding, groups */
rgpu_status rgpu_cuda_dense_conv(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_conv_fwd q;
    FORWARD_IF_ERROR(rgpu_op_conv_fwd_args(e, "cuda", &q, err, errlen));
    if (q.empty) return RGPU_OK;
    const char *name = rgpu_op_name(e->op);

    int ct = op_dense_ct_of(q.dt);
    if (ct != OP_CT_I64 && !rgpu_dcu::have_blas(c, name, err, errlen)) return RGPU_ERR_UNSUPPORTED;
    rgpu_dcu::scratch sc(c);
    rgpu_status st;
    void *wb = pack_weight(c, e->op, sc, ct, &q.w, &st, err, errlen);
    if (!wb) return st;
    void *bb = NULL;
    if (q.bias) {
        bb = sc.get(q.nb, rgpu_dcu::ct_size(ct));
        if (!bb) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of device memory packing the bias", name);
        FORWARD_IF_ERROR(rgpu_dcu::pack(c, q.bias, ct, bb, err, errlen));
    }
    if (!q.a.transposed) return conv_fwd(c, e->op, ct, &q.g, wb, bb, &q.x, &q.y, err, errlen);
    return conv_data(c, e->op, ct, &q.g, wb, bb, &q.x, &q.y, err, errlen);
}

/* in grad, x, w; bias_sizes|NONE, stride, padding, dilation, transposed,
 * output_padding, groups; outs dx?, dw?, db? */
rgpu_status rgpu_cuda_dense_conv_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_conv_bwd q;
    FORWARD_IF_ERROR(rgpu_op_conv_bwd_args(e, "cuda", &q, err, errlen));
    const char *name = rgpu_op_name(e->op);

    int ct = op_dense_ct_of(q.dt);
    bool want_dx = q.dx0 && rgpu_op_numel(q.dx0) > 0, want_dw = q.dw0 && rgpu_op_numel(q.dw0) > 0;
    if ((want_dx || want_dw) && !rgpu_dcu::have_blas(c, name, err, errlen)) return RGPU_ERR_UNSUPPORTED;
    if (want_dx) {
        rgpu_view dx = rgpu_op_conv_as_4d(q.dx0);
        rgpu_dcu::scratch sc(c);
        rgpu_status st;
        void *wb = pack_weight(c, e->op, sc, ct, &q.w, &st, err, errlen);
        if (!wb) return st;
        if (!q.a.transposed) FORWARD_IF_ERROR(conv_data(c, e->op, ct, &q.g, wb, NULL, &q.gr, &dx, err, errlen));
        else FORWARD_IF_ERROR(conv_fwd(c, e->op, ct, &q.g, wb, NULL, &q.gr, &dx, err, errlen));
    }
    if (want_dw) {
        rgpu_view dw = rgpu_op_conv_as_4d(q.dw0);
        if (!q.a.transposed) FORWARD_IF_ERROR(conv_weight(c, e->op, ct, &q.g, &q.x, &q.gr, &dw, err, errlen));
        else FORWARD_IF_ERROR(conv_weight(c, e->op, ct, &q.g, &q.gr, &q.x, &dw, err, errlen));
    }
    if (q.db && rgpu_op_numel(q.db) > 0) FORWARD_IF_ERROR(conv_bias_grad(c, &q.gr, q.db, err, errlen));
    return RGPU_OK;
}
