// pool.cu — 2-d pooling on the CUDA backend, (N,C,H,W) or (C,H,W) input:
// max_pool2d_with_indices, avg_pool2d, _adaptive_avg_pool2d and their
// backwards. CPU reference: cpu_dense_pool.c (same checks, messages, window
// arithmetic and compute types).
//
// Forward: one thread per output element, the window walked in the CPU's
// order. Backward: one thread per input element, summing the contributions
// of the outputs whose windows hold it in ascending output order, the order
// the CPU's scatter adds them (f16/bf16 round after every add, as ATen's
// kernels accumulate in the tensor's own type) — no atomics. Max pool
// backward checks the indices first (a device flag read back on the host):
// an index out of the plane fails as on the CPU; one inside the plane but
// outside its output's window (not something max_pool2d writes) makes the
// op fall back to one thread per plane scattering in output order.
#include "dense.cuh"


// ---------------------------------------------------------------------------
// Geometry: op_pool_geom, rgpu_op_pool_input, rgpu_op_pool_args, rgpu_op_pool_shape from cpu_dense.h
// (the CPU backend parses and checks the same records).

// ---------------------------------------------------------------------------
// Device side. Tensors as (N, C, h, w) with element strides s[4].

struct t4 {
    char *p;
    int dt;
    int64_t s[4];
};

static t4 t4_of(const rgpu_view *v)
{
    rgpu_view v4 = v->ndim == 3 ? rgpu_op_dense_unsqueeze(v, 0) : *v;
    t4 t;
    t.p = (char *)v4.data;
    t.dt = v4.dtype;
    for (int d = 0; d < 4; d++) t.s[d] = v4.strides[d];
    return t;
}

__device__ __forceinline__ char *at4(const t4 &t, int64_t n, int64_t c, int64_t h, int64_t w)
{
    return t.p + (n * t.s[0] + c * t.s[1] + h * t.s[2] + w * t.s[3]) * op_dtype_esize(t.dt);
}

struct dgeom {
    int64_t N, C, H, W, Ho, Wo, kh, kw, sh, sw, ph, pw, dh, dw;
    bool count_include_pad, has_divisor;
    int64_t divisor;
};

static dgeom dgeom_of(const op_pool_geom *g)
{
    dgeom d = { g->N, g->C, g->H, g->W, g->Ho, g->Wo, g->kh, g->kw, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw,
                g->count_include_pad, g->has_divisor, g->divisor };
    return d;
}

__device__ __forceinline__ int64_t dfloor(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
__device__ __forceinline__ int64_t dceil(int64_t a, int64_t b) { return -dfloor(-a, b); }

// Outputs o in [lo, hi] along one dim whose window start o*s - p satisfies
// start <= i <= start + ext (ext = extent - 1 of the window's bounding box).
__device__ __forceinline__ void out_range(int64_t i, int64_t s, int64_t p, int64_t ext, int64_t no, int64_t *lo,
                                          int64_t *hi)
{
    int64_t a = dceil(i + p - ext, s), b = dfloor(i + p, s);
    *lo = a > 0 ? a : 0;
    *hi = b < no - 1 ? b : no - 1;
}

template <typename T> __device__ __forceinline__ T lowest();
template <> __device__ __forceinline__ float lowest<float>() { return -INFINITY; }
template <> __device__ __forceinline__ double lowest<double>() { return -INFINITY; }
template <> __device__ __forceinline__ int64_t lowest<int64_t>() { return INT64_MIN; }
template <typename T> __device__ __forceinline__ bool is_nan(T v) { return v != v; }
template <typename T> __device__ __forceinline__ T load_val(const char *p, int dt) { return cvt_load<T>(p, dt); }
template <> __device__ __forceinline__ int64_t load_val<int64_t>(const char *p, int dt) { return (int64_t)op_load_u64(p, dt); }
__device__ __forceinline__ void store_val(char *p, int dt, float v) { op_store_f32(p, dt, v); }
__device__ __forceinline__ void store_val(char *p, int dt, double v) { op_store_f64(p, dt, v); }
__device__ __forceinline__ void store_val(char *p, int dt, int64_t v) { op_store_u64(p, dt, (uint64_t)v); }

template <typename T>
static __global__ void max_fwd_kernel(dgeom g, t4 x, t4 y, t4 ind)
{
    int64_t total = g.N * g.C * g.Ho * g.Wo;
    DCU_LOOP(t, total) {
        int64_t ow = t % g.Wo, r = t / g.Wo;
        int64_t oh = r % g.Ho; r /= g.Ho;
        int64_t c = r % g.C, n = r / g.C;
        int64_t ih0 = oh * g.sh - g.ph;
        int64_t ih1 = ih0 + (g.kh - 1) * g.dh + 1;
        if (ih1 > g.H) ih1 = g.H;
        while (ih0 < 0) ih0 += g.dh;
        int64_t iw0 = ow * g.sw - g.pw;
        int64_t iw1 = iw0 + (g.kw - 1) * g.dw + 1;
        if (iw1 > g.W) iw1 = g.W;
        while (iw0 < 0) iw0 += g.dw;
        int64_t maxindex = ih0 * g.W + iw0;
        T maxval = lowest<T>();
        for (int64_t ih = ih0; ih < ih1; ih += g.dh)
            for (int64_t iw = iw0; iw < iw1; iw += g.dw) {
                T v = load_val<T>(at4(x, n, c, ih, iw), x.dt);
                if (v > maxval || is_nan(v)) { maxval = v; maxindex = ih * g.W + iw; }
            }
        store_val(at4(y, n, c, oh, ow), y.dt, maxval);
        *(int64_t *)at4(ind, n, c, oh, ow) = maxindex;
    }
}

// Index check: flags[0] = smallest linear output position with an index out
// of the plane (UINT64_MAX: none); flags[1] != 0 when an index is in the
// plane but outside its output's window bounding box.
// Output t's index (t in (n, c, oh, ow) order).
__device__ __forceinline__ int64_t max_index_at(const dgeom &g, const t4 &ind, int64_t t, int64_t *oh, int64_t *ow)
{
    int64_t r = t / g.Wo;
    *ow = t % g.Wo;
    *oh = r % g.Ho; r /= g.Ho;
    int64_t c = r % g.C, n = r / g.C;
    return *(const int64_t *)at4(ind, n, c, *oh, *ow);
}

// bad: the first index outside the plane (a scratch slot, seq 0, or the
// session's device error word: rgpu_dev_flag); *outside: some index lies
// outside its window (the backward then scatters plane by plane).
static __global__ void max_check_kernel(dgeom g, t4 ind, unsigned long long *bad, unsigned long long seq,
                                        unsigned long long *outside)
{
    int64_t total = g.N * g.C * g.Ho * g.Wo, hw = g.H * g.W;
    DCU_LOOP(t, total) {
        int64_t oh, ow, k = max_index_at(g, ind, t, &oh, &ow);
        if (k == -1) continue;
        if (k < 0 || k >= hw) { rgpu_dev_flag(bad, seq, (unsigned long long)t); continue; }
        int64_t kh_ = k / g.W, kw_ = k % g.W;
        int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
        if (kh_ < h0 || kh_ > h0 + (g.kh - 1) * g.dh || kw_ < w0 || kw_ > w0 + (g.kw - 1) * g.dw)
            atomicOr(outside, 1ull);
    }
}

static __global__ void max_check_finish(rgpu_dev_word *w, rgpu_dev_site s, dgeom g, t4 ind)
{
    int64_t oh, ow;
    if (rgpu_dev_mine(w, s)) rgpu_dev_finish(w, s, max_index_at(g, ind, (int64_t)w->pos, &oh, &ow));
}

// One thread per dx element: sum grad over the outputs (ascending) whose
// index names it. T is float (rounded to dx's dtype after each add) or double.
// outside (NULL: chosen on the host): runs only when no index lies outside its window.
template <typename T>
static __global__ void max_bwd_kernel(dgeom g, t4 gr, t4 ind, t4 dx, const unsigned long long *outside)
{
    if (outside && *outside) return;
    int64_t total = g.N * g.C * g.H * g.W;
    DCU_LOOP(t, total) {
        int64_t iw = t % g.W, r = t / g.W;
        int64_t ih = r % g.H; r /= g.H;
        int64_t c = r % g.C, n = r / g.C;
        int64_t k = ih * g.W + iw, oh0, oh1, ow0, ow1;
        out_range(ih, g.sh, g.ph, (g.kh - 1) * g.dh, g.Ho, &oh0, &oh1);
        out_range(iw, g.sw, g.pw, (g.kw - 1) * g.dw, g.Wo, &ow0, &ow1);
        T acc = 0;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++)
                if (*(const int64_t *)at4(ind, n, c, oh, ow) == k) {
                    acc = acc + cvt_load<T>(at4(gr, n, c, oh, ow), gr.dt);
                    if (sizeof(T) == 4) acc = (T)rgpu_dcu::rnd_dt(dx.dt, (float)acc);
                }
        store_val(at4(dx, n, c, ih, iw), dx.dt, acc);
    }
}

// Fallback: one thread per plane, zero it, then scatter in output order.
// outside (NULL: chosen on the host): runs only when an index lies outside its window.
template <typename T>
static __global__ void max_bwd_plane_kernel(dgeom g, t4 gr, t4 ind, t4 dx, const unsigned long long *outside)
{
    if (outside && !*outside) return;
    int64_t planes = g.N * g.C;
    DCU_LOOP(pl, planes) {
        int64_t c = pl % g.C, n = pl / g.C;
        for (int64_t ih = 0; ih < g.H; ih++)
            for (int64_t iw = 0; iw < g.W; iw++) store_val(at4(dx, n, c, ih, iw), dx.dt, (T)0);
        for (int64_t oh = 0; oh < g.Ho; oh++)
            for (int64_t ow = 0; ow < g.Wo; ow++) {
                int64_t k = *(const int64_t *)at4(ind, n, c, oh, ow);
                if (k < 0 || k >= g.H * g.W) continue;   /* -1, or a bad one (reported by the check) */
                char *p = at4(dx, n, c, k / g.W, k % g.W);
                T v = cvt_load<T>(p, dx.dt) + cvt_load<T>(at4(gr, n, c, oh, ow), gr.dt);
                store_val(p, dx.dt, v);   /* f16/bf16: the store is the rounding */
            }
    }
}

// Avg window of output (oh, ow): clipped bounds and divisor (as the CPU).
__device__ __forceinline__ bool avg_window(const dgeom &g, int64_t oh, int64_t ow, int64_t *ih0, int64_t *ih1,
                                           int64_t *iw0, int64_t *iw1, int64_t *div)
{
    int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
    int64_t h1 = h0 + g.kh, w1 = w0 + g.kw;
    if (h1 > g.H + g.ph) h1 = g.H + g.ph;
    if (w1 > g.W + g.pw) w1 = g.W + g.pw;
    int64_t pool_size = (h1 - h0) * (w1 - w0);
    if (h0 < 0) h0 = 0;
    if (w0 < 0) w0 = 0;
    if (h1 > g.H) h1 = g.H;
    if (w1 > g.W) w1 = g.W;
    *ih0 = h0; *ih1 = h1; *iw0 = w0; *iw1 = w1;
    if (h0 >= h1 || w0 >= w1) return false;
    *div = g.has_divisor ? g.divisor : g.count_include_pad ? pool_size : (h1 - h0) * (w1 - w0);
    return true;
}

__device__ __forceinline__ int64_t idiv(int64_t a, int64_t b)
{
    if (b == -1) return (int64_t)(0 - (uint64_t)a);
    return a / b;
}

// T: float, double or uint64_t (int64 input, wrapping sum, truncating division).
template <typename T> __device__ __forceinline__ T avg_div(T sum, int64_t div) { return sum / (T)div; }
template <> __device__ __forceinline__ uint64_t avg_div<uint64_t>(uint64_t sum, int64_t div)
{
    return (uint64_t)idiv((int64_t)sum, div);
}

template <typename T>
static __global__ void avg_fwd_kernel(dgeom g, t4 x, t4 y)
{
    int64_t total = g.N * g.C * g.Ho * g.Wo;
    DCU_LOOP(t, total) {
        int64_t ow = t % g.Wo, r = t / g.Wo;
        int64_t oh = r % g.Ho; r /= g.Ho;
        int64_t c = r % g.C, n = r / g.C;
        int64_t h0, h1, w0, w1, div = 1;
        bool any = avg_window(g, oh, ow, &h0, &h1, &w0, &w1, &div);
        T sum = 0;
        if (any)
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t iw = w0; iw < w1; iw++) sum = sum + cvt_load<T>(at4(x, n, c, ih, iw), x.dt);
        cvt_store(at4(y, n, c, oh, ow), y.dt, any ? avg_div<T>(sum, div) : (T)0);
    }
}

template <typename T>
static __global__ void avg_bwd_kernel(dgeom g, t4 gr, t4 dx)
{
    int64_t total = g.N * g.C * g.H * g.W;
    DCU_LOOP(t, total) {
        int64_t iw = t % g.W, r = t / g.W;
        int64_t ih = r % g.H; r /= g.H;
        int64_t c = r % g.C, n = r / g.C;
        int64_t oh0, oh1, ow0, ow1;
        out_range(ih, g.sh, g.ph, g.kh - 1, g.Ho, &oh0, &oh1);
        out_range(iw, g.sw, g.pw, g.kw - 1, g.Wo, &ow0, &ow1);
        T acc = 0;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) {
                int64_t h0, h1, w0, w1, div = 1;
                if (!avg_window(g, oh, ow, &h0, &h1, &w0, &w1, &div)) continue;
                if (ih < h0 || ih >= h1 || iw < w0 || iw >= w1) continue;
                T d = avg_div<T>(cvt_load<T>(at4(gr, n, c, oh, ow), gr.dt), div);
                if (sizeof(T) == 4) {
                    d = (T)rgpu_dcu::rnd_dt(dx.dt, (float)d);
                    acc = (T)rgpu_dcu::rnd_dt(dx.dt, (float)(acc + d));
                } else {
                    acc = acc + d;
                }
            }
        cvt_store(at4(dx, n, c, ih, iw), dx.dt, acc);
    }
}

// Adaptive windows: [start, end) of output o of n over an input of size in.
__device__ __forceinline__ int64_t ad_start(int64_t o, int64_t n, int64_t in) { return (o / n) * in + ((o % n) * in) / n; }
__device__ __forceinline__ int64_t ad_end(int64_t o, int64_t n, int64_t in) { return 1 + ((o + 1) * in - 1) / n; }

// Outputs [lo, hi] (along one dim) whose adaptive windows hold input i: both
// bounds are monotone in o, so binary searches find the range.
__device__ inline void ad_range(int64_t i, int64_t no, int64_t in, int64_t *lo, int64_t *hi)
{
    int64_t a = 0, b = no;   /* first o with end(o) > i */
    while (a < b) { int64_t m = a + (b - a) / 2; if (ad_end(m, no, in) > i) b = m; else a = m + 1; }
    *lo = a;
    a = 0; b = no;           /* first o with start(o) > i, minus one */
    while (a < b) { int64_t m = a + (b - a) / 2; if (ad_start(m, no, in) > i) b = m; else a = m + 1; }
    *hi = a - 1;
}

template <typename T>
static __global__ void adaptive_fwd_kernel(dgeom g, t4 x, t4 y)
{
    int64_t total = g.N * g.C * g.Ho * g.Wo;
    DCU_LOOP(t, total) {
        int64_t ow = t % g.Wo, r = t / g.Wo;
        int64_t oh = r % g.Ho; r /= g.Ho;
        int64_t c = r % g.C, n = r / g.C;
        int64_t h0 = ad_start(oh, g.Ho, g.H), h1 = ad_end(oh, g.Ho, g.H);
        int64_t w0 = ad_start(ow, g.Wo, g.W), w1 = ad_end(ow, g.Wo, g.W);
        T sum = 0;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) sum = sum + cvt_load<T>(at4(x, n, c, ih, iw), x.dt);
        cvt_store(at4(y, n, c, oh, ow), y.dt, sum / (T)(h1 - h0) / (T)(w1 - w0));
    }
}

template <typename T>
static __global__ void adaptive_bwd_kernel(dgeom g, t4 gr, t4 dx)
{
    int64_t total = g.N * g.C * g.H * g.W;
    DCU_LOOP(t, total) {
        int64_t iw = t % g.W, r = t / g.W;
        int64_t ih = r % g.H; r /= g.H;
        int64_t c = r % g.C, n = r / g.C;
        int64_t oh0, oh1, ow0, ow1;
        ad_range(ih, g.Ho, g.H, &oh0, &oh1);
        ad_range(iw, g.Wo, g.W, &ow0, &ow1);
        T acc = 0;
        for (int64_t oh = oh0; oh <= oh1; oh++) {
            int64_t h0 = ad_start(oh, g.Ho, g.H), h1 = ad_end(oh, g.Ho, g.H);
            if (ih < h0 || ih >= h1) continue;
            for (int64_t ow = ow0; ow <= ow1; ow++) {
                int64_t w0 = ad_start(ow, g.Wo, g.W), w1 = ad_end(ow, g.Wo, g.W);
                if (iw < w0 || iw >= w1) continue;
                T gv = cvt_load<T>(at4(gr, n, c, oh, ow), gr.dt);
                if (sizeof(T) == 4) {
                    float d = rgpu_dcu::rnd_dt(dx.dt, rgpu_dcu::rnd_dt(dx.dt, (float)gv / (float)(h1 - h0)) / (float)(w1 - w0));
                    acc = (T)rgpu_dcu::rnd_dt(dx.dt, (float)acc + d);
                } else {
                    acc = acc + gv / (T)(h1 - h0) / (T)(w1 - w0);
                }
            }
        }
        cvt_store(at4(dx, n, c, ih, iw), dx.dt, acc);
    }
}

// dx = 0 (through its strides).
static __global__ void zero_kernel(dgeom g, t4 dx)
{
    int64_t total = g.N * g.C * g.H * g.W;
    DCU_LOOP(t, total) {
        int64_t iw = t % g.W, r = t / g.W;
        int64_t ih = r % g.H; r /= g.H;
        int64_t c = r % g.C, n = r / g.C;
        op_store_f64(at4(dx, n, c, ih, iw), dx.dt, 0.0);
    }
}

// ---------------------------------------------------------------------------
// Launch helpers

#define LAUNCH(kernel, total, ...) do {                                                         \
        if ((total) > 0) {                                                                      \
            kernel<<<rgpu_dcu::blocks_for(total), rgpu_dcu::THREADS, 0, c->stream>>>(__VA_ARGS__);         \
            RGPU_CUDA_CHECK_LAUNCH(err, errlen);                                                \
        }                                                                                       \
    } while (0)

static rgpu_status max_forward(rgpu_cuda_ctx *c, const op_pool_geom *pg, const rgpu_view *x, rgpu_view *y,
                               rgpu_view *ind, char *err, size_t errlen)
{
    dgeom g = dgeom_of(pg);
    int64_t total = g.N * g.C * g.Ho * g.Wo;
    int ct = op_dense_ct_of(x->dtype);
    if (ct == OP_CT_F32) LAUNCH(max_fwd_kernel<float>, total, g, t4_of(x), t4_of(y), t4_of(ind));
    else if (ct == OP_CT_F64) LAUNCH(max_fwd_kernel<double>, total, g, t4_of(x), t4_of(y), t4_of(ind));
    else LAUNCH(max_fwd_kernel<int64_t>, total, g, t4_of(x), t4_of(y), t4_of(ind));
    return RGPU_OK;
}

// Indices checked (the CPU's first bad one in (n, c, output) order), then the
// backward: one thread per dx element when every index lies inside its
// window, else plane by plane. With the session's device error word both
// decisions stay on the device (both kernels are launched, one returns at
// once; a bad index is reported at the next wait, and neither kernel touches
// memory through it); else the check is read back, waiting.
static rgpu_status max_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, const op_pool_geom *pg, const rgpu_view *gr,
                                const rgpu_view *ind, rgpu_view *dx, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    dgeom g = dgeom_of(pg);
    int64_t nout = g.N * g.C * g.Ho * g.Wo, nin = g.N * g.C * g.H * g.W;
    if (nin == 0) return RGPU_OK;
    t4 ti = t4_of(ind), tg = t4_of(gr), td = t4_of(dx);
    bool f64 = dx->dtype == RGPU_F64;
    rgpu_dev_word *wd = rgpu_cuda_dev_word(c, e);
    rgpu_dcu::scratch sc(c);
    if (wd) {
        unsigned long long *outside = (unsigned long long *)sc.get(1, sizeof(unsigned long long));
        if (!outside) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of device memory", name);
        RGPU_CUDA_TRY(cudaMemsetAsync(outside, 0, sizeof *outside, c->stream), err, errlen);
        LAUNCH(max_check_kernel, nout, g, ti, (unsigned long long *)wd, e->dev_seq, outside);
        max_check_finish<<<1, 1, 0, c->stream>>>(wd, rgpu_cuda_dev_site(e, RGPU_DEVERR_PLANE, name, 0, g.H * g.W), g, ti);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        if (f64) {
            LAUNCH(max_bwd_plane_kernel<double>, g.N * g.C, g, tg, ti, td, outside);
            LAUNCH(max_bwd_kernel<double>, nin, g, tg, ti, td, outside);
        } else {
            LAUNCH(max_bwd_plane_kernel<float>, g.N * g.C, g, tg, ti, td, outside);
            LAUNCH(max_bwd_kernel<float>, nin, g, tg, ti, td, outside);
        }
        return RGPU_OK;
    }
    RGPU_CUDA_NEEDS_HOST(c, "the index bounds check", err, errlen);
    unsigned long long *flags = (unsigned long long *)sc.get(2, sizeof(unsigned long long));
    if (!flags) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of device memory", name);
    unsigned long long host[2] = { ~0ull, 0ull };
    RGPU_CUDA_TRY(cudaMemcpyAsync(flags, host, sizeof host, cudaMemcpyHostToDevice, c->stream), err, errlen);
    LAUNCH(max_check_kernel, nout, g, ti, flags, 0ull, flags + 1);
    RGPU_CUDA_TRY(cudaMemcpyAsync(host, flags, sizeof host, cudaMemcpyDeviceToHost, c->stream), err, errlen);
    RGPU_CUDA_TRY(rgpu_cuda_stream_wait(c->stream), err, errlen);
    if (host[0] != ~0ull) {
        /* the CPU reports the first bad index in (n, c, output) order: read its value */
        int64_t t = (int64_t)host[0], ow = t % g.Wo, r = t / g.Wo;
        int64_t oh = r % g.Ho; r /= g.Ho;
        int64_t ch = r % g.C, n = r / g.C;
        int64_t k = 0;
        const char *p = ti.p + (n * ti.s[0] + ch * ti.s[1] + oh * ti.s[2] + ow * ti.s[3]) * 8;
        RGPU_CUDA_TRY(cudaMemcpyAsync(&k, p, 8, cudaMemcpyDeviceToHost, c->stream), err, errlen);
        RGPU_CUDA_TRY(rgpu_cuda_stream_wait(c->stream), err, errlen);
        RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: index %lld is out of bounds for a plane of size %lld", name, (long long)k,
                 (long long)(g.H * g.W));
    }
    if (host[1] != 0) {
        if (f64) LAUNCH(max_bwd_plane_kernel<double>, g.N * g.C, g, tg, ti, td, (const unsigned long long *)NULL);
        else LAUNCH(max_bwd_plane_kernel<float>, g.N * g.C, g, tg, ti, td, (const unsigned long long *)NULL);
    } else {
        if (f64) LAUNCH(max_bwd_kernel<double>, nin, g, tg, ti, td, (const unsigned long long *)NULL);
        else LAUNCH(max_bwd_kernel<float>, nin, g, tg, ti, td, (const unsigned long long *)NULL);
    }
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// Entry points

// Args and checks: pool_*_check from cpu_dense.h (the CPU's, up to its kernels).

/* in x; kernel, stride, padding, dilation, ceil_mode; outs y, indices (i64) */
static rgpu_status max_pool(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_pool_geom g;
    FORWARD_IF_ERROR(rgpu_op_pool_max_check(e, &g, err, errlen));
    return max_forward(c, &g, e->in[0], e->out[0], e->out[1], err, errlen);
}

/* in grad, x, indices; same args as forward; out dx */
static rgpu_status max_pool_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_pool_geom g;
    FORWARD_IF_ERROR(rgpu_op_pool_max_backward_check(e, &g, err, errlen));
    return max_backward(c, e, &g, e->in[0], e->in[2], e->out[0], err, errlen);
}

/* in x; kernel, stride, padding, ceil_mode, count_include_pad, divisor_override|NONE */
static rgpu_status avg_pool(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_pool_geom g;
    FORWARD_IF_ERROR(rgpu_op_pool_avg_check(e, &g, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0];
    dgeom dg = dgeom_of(&g);
    int64_t total = g.N * g.C * g.Ho * g.Wo;
    int ct = op_dense_ct_of(x->dtype);
    if (ct == OP_CT_F32) LAUNCH(avg_fwd_kernel<float>, total, dg, t4_of(x), t4_of(y));
    else if (ct == OP_CT_F64) LAUNCH(avg_fwd_kernel<double>, total, dg, t4_of(x), t4_of(y));
    else LAUNCH(avg_fwd_kernel<uint64_t>, total, dg, t4_of(x), t4_of(y));
    return RGPU_OK;
}

/* in grad, x; same args as forward; out dx */
static rgpu_status avg_pool_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_pool_geom g;
    FORWARD_IF_ERROR(rgpu_op_pool_avg_backward_check(e, &g, err, errlen));
    const rgpu_view *gr = e->in[0], *x = e->in[1];
    rgpu_view *dx = e->out[0];
    dgeom dg = dgeom_of(&g);
    int64_t total = g.N * g.C * g.H * g.W;
    int ct = op_dense_ct_of(x->dtype);
    if (ct == OP_CT_F32) LAUNCH(avg_bwd_kernel<float>, total, dg, t4_of(gr), t4_of(dx));
    else if (ct == OP_CT_F64) LAUNCH(avg_bwd_kernel<double>, total, dg, t4_of(gr), t4_of(dx));
    else LAUNCH(avg_bwd_kernel<uint64_t>, total, dg, t4_of(gr), t4_of(dx));
    return RGPU_OK;
}

/* in x; ints output_size (2) */
static rgpu_status adaptive_pool(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_pool_geom g;
    FORWARD_IF_ERROR(rgpu_op_pool_adaptive_check(e, &g, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *y = e->out[0];
    if (rgpu_op_numel(y) == 0) return RGPU_OK;
    dgeom dg = dgeom_of(&g);
    int64_t total = g.N * g.C * g.Ho * g.Wo;
    if (x->dtype == RGPU_F64) LAUNCH(adaptive_fwd_kernel<double>, total, dg, t4_of(x), t4_of(y));
    else LAUNCH(adaptive_fwd_kernel<float>, total, dg, t4_of(x), t4_of(y));
    return RGPU_OK;
}

/* in grad (.., Ho, Wo), x; out dx */
static rgpu_status adaptive_pool_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_pool_geom g;
    FORWARD_IF_ERROR(rgpu_op_pool_adaptive_backward_check(e, &g, err, errlen));
    const rgpu_view *gr = e->in[0], *x = e->in[1];
    rgpu_view *dx = e->out[0];
    dgeom dg = dgeom_of(&g);
    int64_t total = g.N * g.C * g.H * g.W;
    if (rgpu_op_numel(gr) == 0) {   /* nothing pooled: the gradient is zero */
        LAUNCH(zero_kernel, total, dg, t4_of(dx));
        return RGPU_OK;
    }
    if (x->dtype == RGPU_F64) LAUNCH(adaptive_bwd_kernel<double>, total, dg, t4_of(gr), t4_of(dx));
    else LAUNCH(adaptive_bwd_kernel<float>, total, dg, t4_of(gr), t4_of(dx));
    return RGPU_OK;
}

rgpu_status rgpu_cuda_dense_pool(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_MAX_POOL2D:                   return max_pool(c, e, err, errlen);
    case RGPU_OP_MAX_POOL2D_BACKWARD:          return max_pool_backward(c, e, err, errlen);
    case RGPU_OP_AVG_POOL2D:                   return avg_pool(c, e, err, errlen);
    case RGPU_OP_AVG_POOL2D_BACKWARD:          return avg_pool_backward(c, e, err, errlen);
    case RGPU_OP_ADAPTIVE_AVG_POOL2D:          return adaptive_pool(c, e, err, errlen);
    default:                                   return adaptive_pool_backward(c, e, err, errlen);
    }
}
