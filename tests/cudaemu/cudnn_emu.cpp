// cudnn_emu.cpp — a reference for exactly the cuDNN entry points that
// replayer/cuda/cudnn_loader.cu resolves, built as cudaemu's libcudnn.so.9 so
// the backend finds it through its own loader (the emulated binaries'
// RUNPATH, or $RGPU_CUDNN_PATH). Each convolution is checked when called
// (descriptors, geometry, dtypes, the algorithm and its workspace) and queued
// on the handle's stream (so a capture records it); it runs at the stream's
// next synchronisation, with its operands checked against the allocations.
//
// Cross-correlation over 2 or 3 spatial dims with padding, stride, dilation
// and groups, tensors of any positive strides, filters NCHW or NHWC packed.
// Products are summed in a fixed order in double and rounded once to the
// data type (alpha * sum + beta * out; out not read when beta == 0), so
// results are deterministic. float data under a math type that permits
// tensor cores (DEFAULT, TENSOR_OP, TENSOR_OP_ALLOW_CONVERSION: TF32 on
// A100 and later) has its inputs rounded to TF32 first, as cuBLAS's reference
// does; FMA math is exact.
//
// The heuristic queries (_v7) list a nondeterministic algorithm first for
// backward data and backward filter (ALGO_0, as cuDNN does), then
// deterministic ones, one of them with a workspace. Running a
// nondeterministic algorithm is a fault here: rgpu promises bitwise reruns.
// The workspace is filled with poison while the call runs.
// Batch norm (spatial): ForwardTraining / ForwardInference / Backward with
// the formulas of cuDNN's documentation, sums in double in index order.
// CUDAEMU_STATS counts the calls as "cudnn forward", "cudnn backward data",
// "cudnn backward filter", "cudnn batch norm training" / "inference" /
// "backward".
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudaemu_api.h"
#include "emu_elem.h"

namespace {

enum { ST_OK = 0, ST_NOT_INITIALIZED = 1001, ST_BAD_PARAM = 2000, ST_NOT_SUPPORTED = 3000, ST_EXECUTION_FAILED = 5000 };
enum { D_FLOAT = 0, D_DOUBLE = 1, D_HALF = 2, D_BF16 = 9 };
enum { F_NCHW = 0, F_NHWC = 1 };
enum { M_DEFAULT = 0, M_TENSOR_OP = 1, M_CONVERSION = 2, M_FMA = 3 };
enum { XCORR = 1 };
enum { FWD = 0, DATA = 1, FILTER = 2 };

struct handle { cudaStream_t stream; };
struct tensor { bool set; int dt, nd; long long dims[5], strides[5]; };
struct filter { bool set; int dt, fmt, nd; long long dims[5]; };
struct conv {
    bool set;
    int n, pad[3], stride[3], dil[3], mode, compute, groups, math;
};
struct perf { int algo, status; float time; size_t memory; int determinism, math_type, reserved[3]; };

bool dtype_ok(int dt) { return dt == D_FLOAT || dt == D_DOUBLE || dt == D_HALF || dt == D_BF16; }
// A data type's element type (emu_elem.h).
emu_elem elem_of(int dt) { return dt == D_FLOAT ? EMU_F32 : dt == D_DOUBLE ? EMU_F64 : dt == D_HALF ? EMU_F16 : EMU_BF16; }
size_t esize(int dt) { return emu_esize(elem_of(dt)); }
double load(const void *p, int t, long long i) { return emu_load(p, elem_of(t), i); }
void store(void *p, int t, long long i, double v) { emu_store(p, elem_of(t), i, v); }

// One queued call: every operand as (pointer, dims, element strides) over
// (N or K, C, D, H, W) with D = 1 for 2-d.
struct operand { const void *p; long long dims[5], st[5]; };
struct call {
    int kind, dt, algo;
    bool tf32;
    double alpha, beta;
    operand x, w, y;    // x: the input side, w: the filter, y: the output side (whichever is written)
    int pad[3], stride[3], dil[3], groups;
    void *ws;
    size_t ws_bytes;
};

operand as5(const void *p, int nd, const long long *dims, const long long *st) {
    operand o;
    o.p = p;
    // 4-d (N,C,H,W) -> (N,C,1,H,W)
    int src = 0;
    for (int d = 0; d < 5; d++) {
        if (nd == 4 && d == 2) { o.dims[d] = 1; o.st[d] = 0; continue; }
        o.dims[d] = dims[src];
        o.st[d] = st[src];
        src++;
    }
    return o;
}

long long span_bytes(const operand &o, int dt) {
    long long last = 0;
    for (int d = 0; d < 5; d++) {
        if (o.dims[d] == 0) return 0;
        last += (o.dims[d] - 1) * o.st[d];
    }
    return (last + 1) * (long long)esize(dt);
}

long long at(const operand &o, long long a, long long b, long long c, long long d, long long e) {
    return a * o.st[0] + b * o.st[1] + c * o.st[2] + d * o.st[3] + e * o.st[4];
}

void run_call(void *arg) {
    call &q = *(call *)arg;
    static const char *const kinds[] = { "forward", "backward data", "backward filter" };
    const operand *ops[3] = { &q.x, &q.w, &q.y };
    static const char *const names[3] = { "x", "w", "y" };
    for (int i = 0; i < 3; i++) {
        long long b = span_bytes(*ops[i], q.dt);
        if (b && !cudaemu_device_range_ok(ops[i]->p, (size_t)b)) {
            char msg[256];
            snprintf(msg, sizeof msg, "cuDNN convolution %s: operand %s (%lld bytes at %p) is not inside one device allocation",
                     kinds[q.kind], names[i], b, ops[i]->p);
            cudaemu_report_fault(msg);
            return;
        }
    }
    if (q.ws_bytes) {
        if (!cudaemu_device_range_ok(q.ws, q.ws_bytes)) {
            cudaemu_report_fault("cuDNN convolution: the workspace is not inside one device allocation");
            return;
        }
        memset(q.ws, 0xab, q.ws_bytes);
    }
    const operand &X = q.x, &W = q.w, &Y = q.y;
    long long N = X.dims[0], C = X.dims[1], K = W.dims[0], Cg = W.dims[1], Kg = K / q.groups;
    long long kt = W.dims[2], kh = W.dims[3], kw = W.dims[4];
    long long D = X.dims[2], H = X.dims[3], Wd = X.dims[4], Do = Y.dims[2], Ho = Y.dims[3], Wo = Y.dims[4];
    // (depth, height, width); 2-d: depth 1 with stride 1, no padding, dilation 1
    long long s0 = q.stride[0], p0 = q.pad[0], d0 = q.dil[0];
    long long s1 = q.stride[1], p1 = q.pad[1], d1 = q.dil[1];
    long long s2 = q.stride[2], p2 = q.pad[2], d2 = q.dil[2];
    auto in = [&](const operand &o, long long i) { double v = load(o.p, q.dt, i); return q.tf32 ? emu_tf32(v) : v; };
    auto put = [&](const operand &o, long long i, double s) {
        double v = q.alpha * s;
        if (q.beta != 0) v += q.beta * load(o.p, q.dt, i);
        store((void *)o.p, q.dt, i, v);
    };
    if (q.kind == FWD) {
        for (long long n = 0; n < N; n++)
            for (long long k = 0; k < K; k++) {
                long long g = k / Kg;
                for (long long od = 0; od < Do; od++)
                    for (long long oh = 0; oh < Ho; oh++)
                        for (long long ow = 0; ow < Wo; ow++) {
                            double s = 0;
                            for (long long c = 0; c < Cg; c++)
                                for (long long a = 0; a < kt; a++) {
                                    long long id = od * s0 - p0 + a * d0;
                                    if (id < 0 || id >= D) continue;
                                    for (long long b = 0; b < kh; b++) {
                                        long long ih = oh * s1 - p1 + b * d1;
                                        if (ih < 0 || ih >= H) continue;
                                        for (long long e = 0; e < kw; e++) {
                                            long long iw = ow * s2 - p2 + e * d2;
                                            if (iw < 0 || iw >= Wd) continue;
                                            s += in(X, at(X, n, g * Cg + c, id, ih, iw)) * in(W, at(W, k, c, a, b, e));
                                        }
                                    }
                                }
                            put(Y, at(Y, n, k, od, oh, ow), s);
                        }
            }
    } else if (q.kind == DATA) {   // x is written: dx = sum over the outputs each input feeds
        for (long long n = 0; n < N; n++)
            for (long long cc = 0; cc < C; cc++) {
                long long g = cc / Cg, c = cc % Cg;
                for (long long id = 0; id < D; id++)
                    for (long long ih = 0; ih < H; ih++)
                        for (long long iw = 0; iw < Wd; iw++) {
                            double s = 0;
                            for (long long k = g * Kg; k < (g + 1) * Kg; k++)
                                for (long long a = 0; a < kt; a++) {
                                    long long td = id + p0 - a * d0;
                                    if (td < 0 || td % s0 || td / s0 >= Do) continue;
                                    for (long long b = 0; b < kh; b++) {
                                        long long th = ih + p1 - b * d1;
                                        if (th < 0 || th % s1 || th / s1 >= Ho) continue;
                                        for (long long e = 0; e < kw; e++) {
                                            long long tw = iw + p2 - e * d2;
                                            if (tw < 0 || tw % s2 || tw / s2 >= Wo) continue;
                                            s += in(Y, at(Y, n, k, td / s0, th / s1, tw / s2)) * in(W, at(W, k, c, a, b, e));
                                        }
                                    }
                                }
                            put(X, at(X, n, cc, id, ih, iw), s);
                        }
            }
    } else {   // w is written: dw = sum over images and outputs
        for (long long k = 0; k < K; k++) {
            long long g = k / Kg;
            for (long long c = 0; c < Cg; c++)
                for (long long a = 0; a < kt; a++)
                    for (long long b = 0; b < kh; b++)
                        for (long long e = 0; e < kw; e++) {
                            double s = 0;
                            for (long long n = 0; n < N; n++)
                                for (long long od = 0; od < Do; od++) {
                                    long long id = od * s0 - p0 + a * d0;
                                    if (id < 0 || id >= D) continue;
                                    for (long long oh = 0; oh < Ho; oh++) {
                                        long long ih = oh * s1 - p1 + b * d1;
                                        if (ih < 0 || ih >= H) continue;
                                        for (long long ow = 0; ow < Wo; ow++) {
                                            long long iw = ow * s2 - p2 + e * d2;
                                            if (iw < 0 || iw >= Wd) continue;
                                            s += in(Y, at(Y, n, k, od, oh, ow)) * in(X, at(X, n, g * Cg + c, id, ih, iw));
                                        }
                                    }
                                }
                            put(W, at(W, k, c, a, b, e), s);
                        }
        }
    }
    if (q.ws_bytes) memset(q.ws, 0xab, q.ws_bytes);
}

// The filter's element strides from its format.
void filter_strides(const filter *f, long long st[5]) {
    long long s = 1;
    if (f->fmt == F_NCHW) {
        for (int d = f->nd - 1; d >= 0; d--) { st[d] = s; s *= f->dims[d]; }
    } else {   // K, spatial..., C innermost
        st[1] = 1;
        s = f->dims[1];
        for (int d = f->nd - 1; d >= 2; d--) { st[d] = s; s *= f->dims[d]; }
        st[0] = s;
    }
}

// Checks a (x, w, y) triple against the convolution: the output's dims follow
// from the input's, the filter's and the geometry.
int check(const tensor *x, const filter *w, const conv *cv, const tensor *y) {
    if (!x || !w || !cv || !y || !x->set || !w->set || !cv->set || !y->set) return ST_BAD_PARAM;
    if (x->dt != w->dt || y->dt != w->dt || x->nd != w->nd || y->nd != w->nd || cv->n != x->nd - 2) return ST_BAD_PARAM;
    if (cv->mode != XCORR) return ST_NOT_SUPPORTED;
    if ((x->dt == D_DOUBLE) != (cv->compute == D_DOUBLE) || (cv->compute != D_FLOAT && cv->compute != D_DOUBLE))
        return ST_NOT_SUPPORTED;
    long long G = cv->groups;
    if (G < 1 || x->dims[1] % G || w->dims[0] % G || w->dims[1] * G != x->dims[1]) return ST_BAD_PARAM;
    if (y->dims[0] != x->dims[0] || y->dims[1] != w->dims[0]) return ST_BAD_PARAM;
    for (int i = 0; i < cv->n; i++) {
        long long in = x->dims[2 + i], k = w->dims[2 + i];
        long long o = (in + 2LL * cv->pad[i] - (long long)cv->dil[i] * (k - 1) - 1) / cv->stride[i] + 1;
        if (o < 1 || y->dims[2 + i] != o) return ST_BAD_PARAM;
    }
    return ST_OK;
}

// What the algorithm needs: algo 1 of each kind takes a workspace.
size_t workspace_of(int kind, int algo, const filter *w) {
    (void)kind;
    if (algo != 1) return 0;
    long long n = 1;
    for (int d = 0; d < w->nd; d++) n *= w->dims[d];
    return (size_t)n * esize(w->dt) + 256;
}

int heuristics(int kind, const tensor *x, const filter *w, const conv *cv, const tensor *y, int n, int *got, perf *out) {
    if (!got || !out || n < 1) return ST_BAD_PARAM;
    int st = check(x, w, cv, y);
    if (st) return st;
    // (algo, deterministic): the nondeterministic ALGO_0 first for the backward kinds
    static const int list[3][3][2] = { { { 1, 1 }, { 0, 1 }, { 2, 1 } },
                                       { { 0, 0 }, { 1, 1 }, { 4, 1 } },
                                       { { 0, 0 }, { 1, 1 }, { 3, 0 } } };
    int k = 0;
    for (int i = 0; i < 3 && k < n; i++, k++) {
        memset(&out[k], 0, sizeof out[k]);
        out[k].algo = list[kind][i][0];
        out[k].determinism = list[kind][i][1];
        out[k].status = ST_OK;
        out[k].time = -1;
        out[k].memory = workspace_of(kind, out[k].algo, w);
        out[k].math_type = cv->math;
    }
    *got = k;
    return ST_OK;
}

// CUDAEMU_CUDNN_REFUSE=conv,bn (either or both): the convolution / batch
// norm calls answer NOT_SUPPORTED, as a cuDNN without a kernel for a case
// does, so the backend's way back to its own kernels runs in the tests.
bool refused(const char *what) {
    const char *env = getenv("CUDAEMU_CUDNN_REFUSE");
    return env && strstr(env, what);
}

int enqueue(void *hv, int kind, const void *alpha, const tensor *x, const void *xp, const filter *w, const void *wp,
            const conv *cv, int algo, void *ws, size_t ws_bytes, const void *beta, const tensor *y, const void *yp) {
    handle *h = (handle *)hv;
    if (!h) return ST_NOT_INITIALIZED;
    if (refused("conv")) return ST_NOT_SUPPORTED;
    int st = check(x, w, cv, y);
    if (st) return st;
    static const int allowed[3][8] = { { 1, 1, 1, 0, 0, 0, 0, 0 }, { 1, 1, 0, 0, 1, 0, 0, 0 }, { 1, 1, 0, 1, 0, 0, 0, 0 } };
    if (algo < 0 || algo >= 8 || !allowed[kind][algo]) return ST_NOT_SUPPORTED;
    if ((kind != FWD && algo == 0) || (kind == FILTER && algo == 3)) {
        char msg[200];
        snprintf(msg, sizeof msg, "cuDNN convolution %s: algorithm %d is nondeterministic (rgpu promises bitwise reruns)",
                 kind == DATA ? "backward data" : "backward filter", algo);
        cudaemu_report_fault(msg);
        return ST_EXECUTION_FAILED;
    }
    size_t need = workspace_of(kind, algo, w);
    if (ws_bytes < need || (need && !ws)) return ST_BAD_PARAM;
    call *q = new call();
    q->kind = kind;
    q->dt = w->dt;
    q->algo = algo;
    q->tf32 = w->dt == D_FLOAT && cv->math != M_FMA;
    q->alpha = w->dt == D_DOUBLE ? *(const double *)alpha : *(const float *)alpha;
    q->beta = w->dt == D_DOUBLE ? *(const double *)beta : *(const float *)beta;
    q->x = as5(xp, x->nd, x->dims, x->strides);
    q->y = as5(yp, y->nd, y->dims, y->strides);
    long long fst[5];
    filter_strides(w, fst);
    q->w = as5(wp, w->nd, w->dims, fst);
    for (int i = 0; i < 3; i++) {
        int src = i - (3 - cv->n);
        q->pad[i] = src >= 0 ? cv->pad[src] : 0;
        q->stride[i] = src >= 0 ? cv->stride[src] : 1;
        q->dil[i] = src >= 0 ? cv->dil[src] : 1;
    }
    q->groups = cv->groups;
    q->ws = ws;
    q->ws_bytes = need;
    static const char *const labels[3] = { "cudnn forward", "cudnn backward data", "cudnn backward filter" };
    int e = cudaemu_enqueue_host(h->stream, labels[kind], run_call, q, [](void *p) { delete (call *)p; });
    return e ? ST_EXECUTION_FAILED : ST_OK;
}

// Batch norm, spatial: per channel of (N, C, *) x. Sums in double in index
// order; y = alpha * ((x - mean) * invstd * scale + bias) + beta * y.
struct bn_call {
    int kind;                      // 0 training, 1 inference, 2 backward
    int dt, pdt;                   // x's data type, the per-channel tensors'
    double alpha, beta, alpha_p, beta_p, factor, eps;
    operand x, y, dy, dx;          // (N, C, D, H, W) as as5 makes them
    const void *scale, *bias, *mean_in, *var_in;
    void *run_mean, *run_var, *save_mean, *save_inv, *dscale, *dbias;
    long long C;
};

void run_bn(void *arg) {
    bn_call &q = *(bn_call *)arg;
    const operand *ops[4] = { &q.x, q.kind == 2 ? &q.dx : &q.y, &q.dy, NULL };
    for (int i = 0; i < 3 && !(i == 2 && q.kind != 2); i++) {
        long long b = span_bytes(*ops[i], q.dt);
        if (b && !cudaemu_device_range_ok(ops[i]->p, (size_t)b)) {
            cudaemu_report_fault("cuDNN batch norm: a tensor operand is not inside one device allocation");
            return;
        }
    }
    void *pars[10] = { (void *)q.scale, (void *)q.bias, (void *)q.mean_in, (void *)q.var_in, q.run_mean, q.run_var,
                       q.save_mean, q.save_inv, q.dscale, q.dbias };
    for (void *p : pars)
        if (p && !cudaemu_device_range_ok(p, (size_t)q.C * esize(q.pdt))) {
            cudaemu_report_fault("cuDNN batch norm: a per-channel operand is not inside one device allocation");
            return;
        }
    const operand &X = q.x;
    long long N = X.dims[0], inner = X.dims[2] * X.dims[3] * X.dims[4], n = N * inner;
    auto idx = [&](const operand &o, long long a, long long c, long long r) {
        return at(o, a, c, r / (X.dims[3] * X.dims[4]), r / X.dims[4] % X.dims[3], r % X.dims[4]);
    };
    for (long long c = 0; c < q.C; c++) {
        double mean, invstd;
        if (q.kind == 1) {
            mean = load(q.mean_in, q.pdt, c);
            invstd = 1.0 / sqrt(load(q.var_in, q.pdt, c) + q.eps);
        } else if (q.kind == 0) {
            double s = 0, v = 0;
            for (long long a = 0; a < N; a++)
                for (long long r = 0; r < inner; r++) s += load(X.p, q.dt, idx(X, a, c, r));
            mean = s / n;
            for (long long a = 0; a < N; a++)
                for (long long r = 0; r < inner; r++) {
                    double d = load(X.p, q.dt, idx(X, a, c, r)) - mean;
                    v += d * d;
                }
            double var = v / n;
            invstd = 1.0 / sqrt(var + q.eps);
            if (q.run_mean) store(q.run_mean, q.pdt, c, (1 - q.factor) * load(q.run_mean, q.pdt, c) + q.factor * mean);
            if (q.run_var)
                store(q.run_var, q.pdt, c,
                      (1 - q.factor) * load(q.run_var, q.pdt, c) + q.factor * (n > 1 ? v / (n - 1) : var));
            if (q.save_mean) store(q.save_mean, q.pdt, c, mean);
            if (q.save_inv) store(q.save_inv, q.pdt, c, invstd);
        } else {
            mean = load(q.mean_in, q.pdt, c);
            invstd = load(q.var_in, q.pdt, c);   // the saved inverse std
        }
        double sc = load(q.scale, q.pdt, c);
        if (q.kind != 2) {
            double bi = load(q.bias, q.pdt, c);
            for (long long a = 0; a < N; a++)
                for (long long r = 0; r < inner; r++) {
                    double v = ((load(X.p, q.dt, idx(X, a, c, r)) - mean) * invstd * sc + bi) * q.alpha;
                    long long o = idx(q.y, a, c, r);
                    if (q.beta != 0) v += q.beta * load(q.y.p, q.dt, o);
                    store((void *)q.y.p, q.dt, o, v);
                }
            continue;
        }
        double sdy = 0, sdyx = 0;
        for (long long a = 0; a < N; a++)
            for (long long r = 0; r < inner; r++) {
                double g = load(q.dy.p, q.dt, idx(q.dy, a, c, r));
                sdy += g;
                sdyx += g * (load(X.p, q.dt, idx(X, a, c, r)) - mean) * invstd;
            }
        for (long long a = 0; a < N; a++)
            for (long long r = 0; r < inner; r++) {
                double xh = (load(X.p, q.dt, idx(X, a, c, r)) - mean) * invstd;
                double g = load(q.dy.p, q.dt, idx(q.dy, a, c, r));
                double v = q.alpha * (sc * invstd * (g - sdy / n - xh * sdyx / n));
                long long o = idx(q.dx, a, c, r);
                if (q.beta != 0) v += q.beta * load(q.dx.p, q.dt, o);
                store((void *)q.dx.p, q.dt, o, v);
            }
        double ds = q.alpha_p * sdyx, dbv = q.alpha_p * sdy;
        if (q.beta_p != 0) { ds += q.beta_p * load(q.dscale, q.pdt, c); dbv += q.beta_p * load(q.dbias, q.pdt, c); }
        store(q.dscale, q.pdt, c, ds);
        store(q.dbias, q.pdt, c, dbv);
    }
}

// The per-channel descriptor of x: (1, C, 1, 1[, 1]), float (double for double x).
bool bn_desc_ok(const tensor *p, const tensor *x) {
    return p && p->set && x && x->set && p->nd == x->nd && p->dims[1] == x->dims[1] &&
           p->dt == (x->dt == D_DOUBLE ? D_DOUBLE : D_FLOAT);
}

int bn_enqueue(void *hv, int mode, bn_call *q, const tensor *x, const tensor *y, const tensor *p, const char *label) {
    handle *h = (handle *)hv;
    if (!h) { delete q; return ST_NOT_INITIALIZED; }
    if (refused("bn")) { delete q; return ST_NOT_SUPPORTED; }
    if (mode != 1 && mode != 2) { delete q; return ST_NOT_SUPPORTED; }   // SPATIAL, SPATIAL_PERSISTENT
    if (!x || !y || !x->set || !y->set || x->dt != y->dt || x->nd != y->nd || !bn_desc_ok(p, x)) { delete q; return ST_BAD_PARAM; }
    for (int d = 0; d < x->nd; d++)
        if (x->dims[d] != y->dims[d]) { delete q; return ST_BAD_PARAM; }
    q->dt = x->dt;
    q->pdt = p->dt;
    q->C = x->dims[1];
    int e = cudaemu_enqueue_host(h->stream, label, run_bn, q, [](void *a) { delete (bn_call *)a; });
    return e ? ST_EXECUTION_FAILED : ST_OK;
}

double scal(const void *p, const tensor *x) { return x && x->dt == D_DOUBLE ? *(const double *)p : *(const float *)p; }

}  // namespace

extern "C" {

size_t cudnnGetVersion(void) { return 90100; }

const char *cudnnGetErrorString(int s) {
    switch (s) {
    case ST_OK: return "CUDNN_STATUS_SUCCESS";
    case ST_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case ST_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case ST_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case ST_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_UNKNOWN";
    }
}

int cudnnCreate(void **h) {
    if (!h) return ST_BAD_PARAM;
    *h = new handle{ nullptr };
    return ST_OK;
}

int cudnnDestroy(void *h) {
    delete (handle *)h;
    return ST_OK;
}

int cudnnSetStream(void *h, cudaStream_t s) {
    if (!h) return ST_NOT_INITIALIZED;
    ((handle *)h)->stream = s;
    return ST_OK;
}

int cudnnCreateTensorDescriptor(void **d) { *d = new tensor(); return ST_OK; }
int cudnnDestroyTensorDescriptor(void *d) { delete (tensor *)d; return ST_OK; }
int cudnnCreateFilterDescriptor(void **d) { *d = new filter(); return ST_OK; }
int cudnnDestroyFilterDescriptor(void *d) { delete (filter *)d; return ST_OK; }
int cudnnCreateConvolutionDescriptor(void **d) { *d = new conv(); ((conv *)*d)->groups = 1; return ST_OK; }
int cudnnDestroyConvolutionDescriptor(void *d) { delete (conv *)d; return ST_OK; }

int cudnnSetTensorNdDescriptor(void *d, int dt, int nd, const int *dims, const int *strides) {
    tensor *t = (tensor *)d;
    if (!t || !dtype_ok(dt) || nd < 4 || nd > 5) return nd > 5 ? ST_NOT_SUPPORTED : ST_BAD_PARAM;
    for (int i = 0; i < nd; i++)
        if (dims[i] < 1 || strides[i] < 1) return ST_BAD_PARAM;
    t->dt = dt;
    t->nd = nd;
    for (int i = 0; i < nd; i++) { t->dims[i] = dims[i]; t->strides[i] = strides[i]; }
    t->set = true;
    return ST_OK;
}

int cudnnSetFilterNdDescriptor(void *d, int dt, int fmt, int nd, const int *dims) {
    filter *f = (filter *)d;
    if (!f || !dtype_ok(dt) || (fmt != F_NCHW && fmt != F_NHWC) || nd < 4 || nd > 5) return ST_BAD_PARAM;
    for (int i = 0; i < nd; i++)
        if (dims[i] < 1) return ST_BAD_PARAM;
    f->dt = dt;
    f->fmt = fmt;
    f->nd = nd;
    for (int i = 0; i < nd; i++) f->dims[i] = dims[i];
    f->set = true;
    return ST_OK;
}

int cudnnSetConvolutionNdDescriptor(void *d, int n, const int *pad, const int *stride, const int *dil, int mode,
                                    int compute) {
    conv *c = (conv *)d;
    if (!c || n < 2 || n > 3) return n == 1 ? ST_NOT_SUPPORTED : ST_BAD_PARAM;
    for (int i = 0; i < n; i++)
        if (pad[i] < 0 || stride[i] < 1 || dil[i] < 1) return ST_BAD_PARAM;
    c->n = n;
    for (int i = 0; i < n; i++) { c->pad[i] = pad[i]; c->stride[i] = stride[i]; c->dil[i] = dil[i]; }
    c->mode = mode;
    c->compute = compute;
    c->set = true;
    return ST_OK;
}

int cudnnSetConvolutionGroupCount(void *d, int groups) {
    if (!d || groups < 1) return ST_BAD_PARAM;
    ((conv *)d)->groups = groups;
    return ST_OK;
}

int cudnnSetConvolutionMathType(void *d, int math) {
    if (!d || math < M_DEFAULT || math > M_FMA) return ST_BAD_PARAM;
    ((conv *)d)->math = math;
    return ST_OK;
}

int cudnnGetConvolutionForwardAlgorithm_v7(void *h, void *x, void *w, void *cv, void *y, int n, int *got, void *out) {
    if (!h) return ST_NOT_INITIALIZED;
    return heuristics(FWD, (tensor *)x, (filter *)w, (conv *)cv, (tensor *)y, n, got, (perf *)out);
}

int cudnnGetConvolutionBackwardDataAlgorithm_v7(void *h, void *w, void *dy, void *cv, void *dx, int n, int *got,
                                                void *out) {
    if (!h) return ST_NOT_INITIALIZED;
    return heuristics(DATA, (tensor *)dx, (filter *)w, (conv *)cv, (tensor *)dy, n, got, (perf *)out);
}

int cudnnGetConvolutionBackwardFilterAlgorithm_v7(void *h, void *x, void *dy, void *cv, void *dw, int n, int *got,
                                                  void *out) {
    if (!h) return ST_NOT_INITIALIZED;
    return heuristics(FILTER, (tensor *)x, (filter *)dw, (conv *)cv, (tensor *)dy, n, got, (perf *)out);
}

int cudnnConvolutionForward(void *h, const void *alpha, void *xd, const void *x, void *wd, const void *w, void *cv,
                            int algo, void *ws, size_t ws_bytes, const void *beta, void *yd, void *y) {
    return enqueue(h, FWD, alpha, (tensor *)xd, x, (filter *)wd, w, (conv *)cv, algo, ws, ws_bytes, beta,
                   (tensor *)yd, y);
}

int cudnnConvolutionBackwardData(void *h, const void *alpha, void *wd, const void *w, void *dyd, const void *dy,
                                 void *cv, int algo, void *ws, size_t ws_bytes, const void *beta, void *dxd, void *dx) {
    return enqueue(h, DATA, alpha, (tensor *)dxd, dx, (filter *)wd, w, (conv *)cv, algo, ws, ws_bytes, beta,
                   (tensor *)dyd, dy);
}

int cudnnConvolutionBackwardFilter(void *h, const void *alpha, void *xd, const void *x, void *dyd, const void *dy,
                                   void *cv, int algo, void *ws, size_t ws_bytes, const void *beta, void *dwd,
                                   void *dw) {
    return enqueue(h, FILTER, alpha, (tensor *)xd, x, (filter *)dwd, dw, (conv *)cv, algo, ws, ws_bytes, beta,
                   (tensor *)dyd, dy);
}

int cudnnDeriveBNTensorDescriptor(void *pd, void *xd, int mode) {
    tensor *p = (tensor *)pd, *x = (tensor *)xd;
    if (!p || !x || !x->set || (mode != 1 && mode != 2)) return ST_BAD_PARAM;
    p->dt = x->dt == D_DOUBLE ? D_DOUBLE : D_FLOAT;
    p->nd = x->nd;
    for (int d = 0; d < x->nd; d++) { p->dims[d] = d == 1 ? x->dims[1] : 1; p->strides[d] = d == 0 ? x->dims[1] : 1; }
    p->set = true;
    return ST_OK;
}

int cudnnBatchNormalizationForwardTraining(void *h, int mode, const void *alpha, const void *beta, void *xd, const void *x,
                                           void *yd, void *y, void *pd, const void *scale, const void *bias,
                                           double factor, void *run_mean, void *run_var, double eps, void *save_mean,
                                           void *save_inv) {
    const tensor *xt = (const tensor *)xd, *yt = (const tensor *)yd;
    if (!scale || !bias || !alpha || !beta || (!run_mean) != (!run_var) || (!save_mean) != (!save_inv) || eps <= 0)
        return ST_BAD_PARAM;
    bn_call *q = new bn_call();
    q->kind = 0;
    q->alpha = scal(alpha, xt); q->beta = scal(beta, xt);
    q->factor = factor; q->eps = eps;
    q->x = as5(x, xt->nd, xt->dims, xt->strides);
    q->y = as5(y, yt->nd, yt->dims, yt->strides);
    q->scale = scale; q->bias = bias;
    q->run_mean = run_mean; q->run_var = run_var; q->save_mean = save_mean; q->save_inv = save_inv;
    return bn_enqueue(h, mode, q, xt, yt, (const tensor *)pd, "cudnn batch norm training");
}

int cudnnBatchNormalizationForwardInference(void *h, int mode, const void *alpha, const void *beta, void *xd,
                                            const void *x, void *yd, void *y, void *pd, const void *scale,
                                            const void *bias, const void *mean, const void *var, double eps) {
    const tensor *xt = (const tensor *)xd, *yt = (const tensor *)yd;
    if (!scale || !bias || !mean || !var || !alpha || !beta || eps <= 0) return ST_BAD_PARAM;
    bn_call *q = new bn_call();
    q->kind = 1;
    q->alpha = scal(alpha, xt); q->beta = scal(beta, xt);
    q->eps = eps;
    q->x = as5(x, xt->nd, xt->dims, xt->strides);
    q->y = as5(y, yt->nd, yt->dims, yt->strides);
    q->scale = scale; q->bias = bias; q->mean_in = mean; q->var_in = var;
    return bn_enqueue(h, mode, q, xt, yt, (const tensor *)pd, "cudnn batch norm inference");
}

int cudnnBatchNormalizationBackward(void *h, int mode, const void *alpha_d, const void *beta_d, const void *alpha_p,
                                    const void *beta_p, void *xd, const void *x, void *dyd, const void *dy, void *dxd,
                                    void *dx, void *pd, const void *scale, void *dscale, void *dbias, double eps,
                                    const void *save_mean, const void *save_inv) {
    const tensor *xt = (const tensor *)xd, *dyt = (const tensor *)dyd, *dxt = (const tensor *)dxd;
    // cuDNN may recompute the stats when none were saved; rgpu always passes them
    if (!scale || !dscale || !dbias || !save_mean || !save_inv || !dyt || !dyt->set || !xt || !xt->set ||
        dyt->dt != xt->dt || dyt->nd != xt->nd)
        return ST_BAD_PARAM;
    for (int d = 0; d < xt->nd; d++)
        if (dyt->dims[d] != xt->dims[d]) return ST_BAD_PARAM;
    bn_call *q = new bn_call();
    q->kind = 2;
    q->alpha = scal(alpha_d, xt); q->beta = scal(beta_d, xt);
    q->alpha_p = scal(alpha_p, xt); q->beta_p = scal(beta_p, xt);
    q->eps = eps;
    q->x = as5(x, xt->nd, xt->dims, xt->strides);
    q->dy = as5(dy, dyt->nd, dyt->dims, dyt->strides);
    q->dx = as5(dx, dxt->nd, dxt->dims, dxt->strides);
    q->scale = scale; q->dscale = dscale; q->dbias = dbias; q->mean_in = save_mean; q->var_in = save_inv;
    return bn_enqueue(h, mode, q, xt, dxt, (const tensor *)pd, "cudnn batch norm backward");
}

}  // extern "C"
