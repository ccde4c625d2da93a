// conv.cu — convolution and convolution_backward on the CUDA backend: on
// cuDNN where it is found (the section "cuDNN" below), else (and for integer
// dtypes) im2col + cuBLAS GEMM per (chunk of images, group), 3-D (N,C,D,H,W), 2-D
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
#include "dnn.cuh"

#include <map>
#include <vector>

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
// cuDNN (cudnn_loader.cu: loaded on the first convolution; RGPU_CUDNN=0 keeps
// the im2col path). The three cores are cuDNN's three calls over the same
// geometry: conv_fwd = cudnnConvolutionForward(I, w) -> G, conv_data =
// cudnnConvolutionBackwardData(w, G) -> I, conv_weight =
// cudnnConvolutionBackwardFilter(I, G) -> dw (cross-correlation, groups,
// padding, stride, dilation; 1-d as 2-d with H = 1, 3-d as 3-d).
// float32/float16/bfloat16 compute in float, float64 in double;
// float16/bfloat16 on tensor cores (CUDNN_TENSOR_OP_MATH), float32 on FMA
// (TF32 only with allow_tf32, as cuBLAS here).
// The algorithm: the first of cuDNN's heuristic list (the _v7 queries: no
// timing, so the same choice on every run with the same cuDNN and GPU) that
// is supported, deterministic and whose workspace fits DNN_WS_CAP, chosen
// once per (core, dtype, sizes, strides, layout, geometry) and kept; the same
// algorithm over the same inputs gives the same bits. Tensors of positive
// strides go as they are, a weight (or dw) NCHW- or NHWC-packed as it is; an
// input weight packed otherwise, or a broadcast (0-stride) input, through a
// packed copy. What cuDNN cannot take (integer dtypes, an empty batch, an
// output it cannot address, a shape with no deterministic algorithm, more
// than int32 can index, a call cuDNN refuses: said once) runs on im2col;
// RGPU_CUDA_VERBOSE=1 logs each choice.

namespace {

enum { DNN_FWD = 0, DNN_DATA = 1, DNN_FILTER = 2 };
const char *const DNN_CORE[] = { "forward", "backward data", "backward filter" };
const size_t DNN_WS_CAP = 1024ull << 20;
const size_t DNN_CACHE_MAX = 4096;

struct dnn_choice { int algo, math; size_t ws; bool ok; };
struct dnn_cache { std::map<std::vector<long long>, dnn_choice> m; };

// v packed in dim order perm (outermost first), sizes-1 dims free.
bool packed_as(const rgpu_view *v, const int *perm)
{
    long long want = 1;
    for (int i = v->ndim - 1; i >= 0; i--) {
        int d = perm[i];
        if (v->sizes[d] != 1 && v->strides[d] != want) return false;
        want *= v->sizes[d];
    }
    return true;
}

// The filter format a weight-shaped view is packed in: NCHW, NHWC, or -1.
int filter_format(const rgpu_view *w)
{
    static const int nchw[5] = { 0, 1, 2, 3, 4 }, nhwc4[4] = { 0, 2, 3, 1 }, nhwc5[5] = { 0, 2, 3, 4, 1 };
    if (packed_as(w, nchw)) return DNN_NCHW;
    if (packed_as(w, w->ndim == 5 ? nhwc5 : nhwc4)) return DNN_NHWC;
    return -1;
}

// The descriptors of one call, destroyed with it.
struct dnn_descs {
    rgpu_cudnn *D;
    void *a = NULL, *b = NULL, *f = NULL, *conv = NULL;   // a: the I side, b: the G side
    explicit dnn_descs(rgpu_cudnn *d) : D(d) {}
    ~dnn_descs()
    {
        if (a) D->DestroyTensorDescriptor(a);
        if (b) D->DestroyTensorDescriptor(b);
        if (f) D->DestroyFilterDescriptor(f);
        if (conv) D->DestroyConvolutionDescriptor(conv);
    }
    dnn_descs(const dnn_descs &) = delete;
    dnn_descs &operator=(const dnn_descs &) = delete;
};

}  // namespace

extern "C" void rgpu_cuda_conv_cache_free(rgpu_cudnn *d)
{
    delete (dnn_cache *)d->cache;
    d->cache = NULL;
}

// A packed copy of input v in scratch (its dtype and sizes): what cuDNN
// takes when v is not.
static rgpu_status dnn_stage(rgpu_cuda_ctx *c, rgpu_dcu::scratch &sc, const rgpu_view *v, rgpu_view *out,
                             const char *name, char *err, size_t errlen)
{
    void *p = sc.get(rgpu_op_numel(v), rgpu_dtype_size(v->dtype));
    RETURN_ERROR_IF(!p, RGPU_ERR_NOMEM, "%s: out of device memory staging a convolution operand", name);
    *out = rgpu_dcu::contig_view(p, v->dtype, v->ndim, v->sizes);
    return rgpu_dcu::copy(c, out, v, err, errlen);
}

// One core on cuDNN: I, G (4-d, or 5-d for 3-d) and W (the weight, or dw)
// of one floating dtype, the written one being I (DNN_DATA), G (DNN_FWD) or
// W (DNN_FILTER). *done false: the caller runs im2col (nothing was written;
// a staged copy went to scratch).
static rgpu_status dnn_conv(rgpu_cuda_ctx *c, int op, int core, const op_conv_geom *g, const rgpu_view *I,
                            const rgpu_view *G, const rgpu_view *W, bool *done, char *err, size_t errlen)
{
    *done = false;
    int dt = W->dtype;
    if ((dt != RGPU_F32 && dt != RGPU_F64 && dt != RGPU_F16 && dt != RGPU_BF16) || rgpu_op_numel(I) == 0 ||
        rgpu_op_numel(G) == 0 || rgpu_op_numel(W) == 0 || g->groups > INT_MAX || !rgpu_cuda_dnn_ready(c))
        return RGPU_OK;
    rgpu_cudnn *D = &c->dnn;
    const char *name = rgpu_op_name(op);
    rgpu_dcu::scratch sc(c);
    // operands as cuDNN takes them (staged: an input's packed copy; an output must be takeable as it is)
    rgpu_view v[3] = { *I, *G, *W }, staged[3];
    bool is_out[3] = { core == DNN_DATA, core == DNN_FWD, core == DNN_FILTER }, stage[3] = { false, false, false };
    dnn_td td[2];
    for (int i = 0; i < 2; i++)
        if (!rgpu_dnn_td_of(&v[i], &td[i])) {
            if (is_out[i]) return RGPU_OK;   // (the client's outputs are never broadcast)
            stage[i] = true;
            FORWARD_IF_ERROR(dnn_stage(c, sc, &v[i], &staged[i], name, err, errlen));
            if (!rgpu_dnn_td_of(&staged[i], &td[i])) return RGPU_OK;   // past int even packed
        }
    int fmt = filter_format(&v[2]);
    if (fmt < 0) {
        if (is_out[2]) return RGPU_OK;       // dw: ATen's is packed like the weight
        stage[2] = true;
        fmt = DNN_NCHW;
        FORWARD_IF_ERROR(dnn_stage(c, sc, &v[2], &staged[2], name, err, errlen));
    }
    const rgpu_view *x[3];
    for (int i = 0; i < 3; i++) x[i] = stage[i] ? &staged[i] : &v[i];
    for (int d = 0; d < W->ndim; d++)
        if (W->sizes[d] > INT_MAX || rgpu_op_numel(W) > INT_MAX) return RGPU_OK;

    int nd = W->ndim, nsp = nd - 2;
    int ddt = rgpu_dnn_dtype(dt);
    int wdims[5], pad[3], str[3], dil[3];
    for (int d = 0; d < nd; d++) wdims[d] = (int)W->sizes[d];
    const int64_t p3[3] = { g->pt, g->ph, g->pw }, s3[3] = { g->st, g->sh, g->sw }, d3[3] = { g->dt, g->dh, g->dw };
    for (int i = 0; i < nsp; i++) {
        int k = 3 - nsp + i;
        if (p3[k] > INT_MAX || s3[k] > INT_MAX || d3[k] > INT_MAX) return RGPU_OK;
        pad[i] = (int)p3[k]; str[i] = (int)s3[k]; dil[i] = (int)d3[k];
    }
    // float32 stays off TF32 unless allowed; float16/bfloat16 take tensor cores
    bool f32_exact = dt == RGPU_F32 && !c->allow_tf32;
    int math = dt == RGPU_F64 ? DNN_DEFAULT_MATH : f32_exact ? DNN_FMA_MATH : DNN_TENSOR_OP_MATH;

    // the algorithm is chosen once per key
    std::vector<long long> key = { core, dt, math, fmt, nd, (long long)g->groups };
    for (int i = 0; i < 2; i++)
        for (int d = 0; d < nd; d++) { key.push_back(td[i].dims[d]); key.push_back(td[i].strides[d]); }
    for (int d = 0; d < nd; d++) key.push_back(wdims[d]);
    for (int i = 0; i < nsp; i++) { key.push_back(pad[i]); key.push_back(str[i]); key.push_back(dil[i]); }
    if (!D->cache) D->cache = new dnn_cache;
    dnn_cache *cache = (dnn_cache *)D->cache;
    auto it = cache->m.find(key);
    if (it != cache->m.end() && !it->second.ok) return RGPU_OK;
    char shape[160];
    {
        int o = 0;
        for (int i = 0; i < 2; i++)
            for (int d = 0; d < nd && o < (int)sizeof shape - 16; d++)
                o += snprintf(shape + o, sizeof shape - o, "%s%d", d ? "x" : i ? " -> " : "", td[i].dims[d]);
    }
    dnn_descs ds(D);
    int s = 0;
    const char *call = "";
    // a call cuDNN refuses: said once, and this key runs on im2col from then on (nothing was
    // written yet; a staged copy is scratch)
    auto refuse = [&]() -> rgpu_status {
        fprintf(stderr, "rgpu cuda: cuDNN conv %s %s %s: %s failed: %s (cudnnStatus %d); im2col for this shape\n",
                DNN_CORE[core], rgpu_dtype_name(dt), shape, call, D->GetErrorString(s), s);
        if (cache->m.size() >= DNN_CACHE_MAX) cache->m.clear();
        cache->m[key] = dnn_choice{ -1, math, 0, false };
        return RGPU_OK;
    };
#define DNN_TRY(what, expr) do { if (s == 0) { call = what; s = (expr); } } while (0)
    DNN_TRY("cudnnCreateTensorDescriptor", D->CreateTensorDescriptor(&ds.a));
    DNN_TRY("cudnnCreateTensorDescriptor", D->CreateTensorDescriptor(&ds.b));
    DNN_TRY("cudnnCreateFilterDescriptor", D->CreateFilterDescriptor(&ds.f));
    DNN_TRY("cudnnCreateConvolutionDescriptor", D->CreateConvolutionDescriptor(&ds.conv));
    DNN_TRY("cudnnSetTensorNdDescriptor", D->SetTensorNdDescriptor(ds.a, ddt, nd, td[0].dims, td[0].strides));
    DNN_TRY("cudnnSetTensorNdDescriptor", D->SetTensorNdDescriptor(ds.b, ddt, nd, td[1].dims, td[1].strides));
    DNN_TRY("cudnnSetFilterNdDescriptor", D->SetFilterNdDescriptor(ds.f, ddt, fmt, nd, wdims));
    DNN_TRY("cudnnSetConvolutionNdDescriptor", D->SetConvolutionNdDescriptor(ds.conv, nsp, pad, str, dil, DNN_XCORR,
                                                                            dt == RGPU_F64 ? DNN_DOUBLE : DNN_FLOAT));
    DNN_TRY("cudnnSetConvolutionGroupCount", D->SetConvolutionGroupCount(ds.conv, (int)g->groups));
    DNN_TRY("cudnnSetConvolutionMathType", D->SetConvolutionMathType(ds.conv, math));
    if (s != 0) return refuse();
    if (it == cache->m.end()) {
        rgpu_cudnn_perf perf[8];
        int got = 0;
        if (core == DNN_FWD) DNN_TRY("cudnnGetConvolutionForwardAlgorithm_v7",
            D->GetConvolutionForwardAlgorithm_v7(D->handle, ds.a, ds.f, ds.conv, ds.b, 8, &got, perf));
        else if (core == DNN_DATA) DNN_TRY("cudnnGetConvolutionBackwardDataAlgorithm_v7",
            D->GetConvolutionBackwardDataAlgorithm_v7(D->handle, ds.f, ds.b, ds.conv, ds.a, 8, &got, perf));
        else DNN_TRY("cudnnGetConvolutionBackwardFilterAlgorithm_v7",
            D->GetConvolutionBackwardFilterAlgorithm_v7(D->handle, ds.a, ds.b, ds.conv, ds.f, 8, &got, perf));
        if (s != 0) return refuse();
        dnn_choice ch = { -1, math, 0, false };
        for (int i = 0; i < got && i < 8 && !ch.ok; i++) {
            const rgpu_cudnn_perf &p = perf[i];
            bool tf32 = p.math_type == DNN_TENSOR_OP_MATH || p.math_type == DNN_TENSOR_OP_CONVERSION;
            if (p.status != 0 || p.determinism != 1 || p.memory > DNN_WS_CAP || (f32_exact && tf32)) continue;
            ch = { p.algo, p.math_type, p.memory, true };
        }
        if (cache->m.size() >= DNN_CACHE_MAX) cache->m.clear();
        it = cache->m.emplace(key, ch).first;
        if (getenv("RGPU_CUDA_VERBOSE")) {
            if (ch.ok) fprintf(stderr, "rgpu cuda: cuDNN conv %s %s %s: algo %d, math %d, workspace %zu bytes\n",
                               DNN_CORE[core], rgpu_dtype_name(dt), shape, ch.algo, ch.math, ch.ws);
            else fprintf(stderr, "rgpu cuda: cuDNN conv %s %s %s: no deterministic algorithm, im2col\n",
                         DNN_CORE[core], rgpu_dtype_name(dt), shape);
        }
    }
    const dnn_choice ch = it->second;
    if (!ch.ok) return RGPU_OK;
    // float32 without TF32 stays on FMA math whatever the list says (its DEFAULT allows TF32 from Ampere on)
    DNN_TRY("cudnnSetConvolutionMathType", D->SetConvolutionMathType(ds.conv, f32_exact ? DNN_FMA_MATH : ch.math));
    void *ws = NULL;
    if (ch.ws) {
        ws = sc.get((int64_t)ch.ws, 1);
        RETURN_ERROR_IF(!ws, RGPU_ERR_NOMEM, "%s: out of device memory for cuDNN's workspace (%zu bytes)", name, ch.ws);
    }
    double one = 1.0, zero = 0.0;
    float onef = 1.0f, zerof = 0.0f;
    const void *alpha = dt == RGPU_F64 ? (const void *)&one : (const void *)&onef;
    const void *beta = dt == RGPU_F64 ? (const void *)&zero : (const void *)&zerof;
    if (core == DNN_FWD) DNN_TRY("cudnnConvolutionForward", D->ConvolutionForward(D->handle, alpha, ds.a, x[0]->data,
        ds.f, x[2]->data, ds.conv, ch.algo, ws, ch.ws, beta, ds.b, x[1]->data));
    else if (core == DNN_DATA) DNN_TRY("cudnnConvolutionBackwardData", D->ConvolutionBackwardData(D->handle, alpha,
        ds.f, x[2]->data, ds.b, x[1]->data, ds.conv, ch.algo, ws, ch.ws, beta, ds.a, x[0]->data));
    else DNN_TRY("cudnnConvolutionBackwardFilter", D->ConvolutionBackwardFilter(D->handle, alpha, ds.a, x[0]->data,
        ds.b, x[1]->data, ds.conv, ch.algo, ws, ch.ws, beta, ds.f, x[2]->data));
#undef DNN_TRY
    if (s != 0) return refuse();
    *done = true;
    return RGPU_OK;
}

// y[n, ch, ...] += b[ch] after a cuDNN forward (the bias added in the opmath
// T to the rounded convolution, as ATen adds it after cuDNN).
template <typename T>
static __global__ void bias_add_kernel(rgpu_cuda_view y, int dt, int64_t total, int64_t per, int64_t C,
                                       rgpu_dcu::param b)
{
    DCU_LOOP(i, total) {
        long long off = rgpu_cuda_offset(y, i);
        T v = rf_add(rf_ld<T>(y.data, off, dt), rf_ld<T>(b.p, (i / per) % C * b.stride, b.dt));   // b: y's dtype
        rf_st(y.data, off, dt, v);
    }
}

static rgpu_status dnn_bias_add(rgpu_cuda_ctx *c, const rgpu_view *y, const rgpu_view *bias, char *err, size_t errlen)
{
    int64_t total = rgpu_op_numel(y), per = 1;
    for (int d = 2; d < y->ndim; d++) per *= y->sizes[d];
    if (total == 0) return RGPU_OK;
    rgpu_cuda_view yv = rgpu_cuda_view_of(y);
    if (rf_opmath_float({ y->dtype }))
        bias_add_kernel<float><<<rgpu_dcu::blocks_for(total), rgpu_dcu::THREADS, 0, c->stream>>>(
            yv, y->dtype, total, per, y->sizes[1], rgpu_dcu::param_of(bias));
    else
        bias_add_kernel<double><<<rgpu_dcu::blocks_for(total), rgpu_dcu::THREADS, 0, c->stream>>>(
            yv, y->dtype, total, per, y->sizes[1], rgpu_dcu::param_of(bias));
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
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
    bool done;
    if (!q.a.transposed) FORWARD_IF_ERROR(dnn_conv(c, e->op, DNN_FWD, &q.g, &q.x, &q.y, &q.w, &done, err, errlen));
    else FORWARD_IF_ERROR(dnn_conv(c, e->op, DNN_DATA, &q.g, &q.y, &q.x, &q.w, &done, err, errlen));
    if (done) return q.bias ? dnn_bias_add(c, &q.y, q.bias, err, errlen) : RGPU_OK;   /* y: O (C transposed) channels */
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
    bool done = false;
    if (want_dx) {
        rgpu_view dx = rgpu_op_conv_as_4d(q.dx0);
        if (!q.a.transposed) FORWARD_IF_ERROR(dnn_conv(c, e->op, DNN_DATA, &q.g, &dx, &q.gr, &q.w, &done, err, errlen));
        else FORWARD_IF_ERROR(dnn_conv(c, e->op, DNN_FWD, &q.g, &q.gr, &dx, &q.w, &done, err, errlen));
        want_dx = !done;
    }
    if (want_dw) {
        rgpu_view dw = rgpu_op_conv_as_4d(q.dw0);
        if (!q.a.transposed) FORWARD_IF_ERROR(dnn_conv(c, e->op, DNN_FILTER, &q.g, &q.x, &q.gr, &dw, &done, err, errlen));
        else FORWARD_IF_ERROR(dnn_conv(c, e->op, DNN_FILTER, &q.g, &q.gr, &q.x, &dw, &done, err, errlen));
        want_dw = !done;
    }
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
