// cublas_emu.cpp — a reference for exactly the cuBLAS entry points that
// replayer/cuda/cublas_loader.cu resolves, built as cudaemu's
// libcublas.so.13 so the backend finds it through its own loader (the
// emulated binaries' RUNPATH, or $RGPU_CUBLAS_PATH). Each GEMM is checked
// when called and queued on the handle's stream (so a capture records it);
// it runs at the stream's next synchronisation.
//
// Column-major, as cuBLAS: C[i + j*ldc] = alpha * sum_p op(A)[i,p] op(B)[p,j]
// + beta * C (C is not read when beta == 0). Products are summed in p order
// in double (for 32F compute, rounded once at the end; TF32 compute rounds
// the inputs to 10 mantissa bits first), so results are deterministic.
// Complex (C/Z GEMM): (re, im) pairs, complex alpha/beta, 'C' conjugates.
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

enum { ST_OK = 0, ST_NOT_INITIALIZED = 1, ST_INVALID_VALUE = 7, ST_EXECUTION_FAILED = 13, ST_NOT_SUPPORTED = 15 };
enum { R_32F = 0, R_64F = 1, R_16F = 2, R_32C = 4, R_64C = 5, R_16BF = 14 };
enum { OP_N = 0, OP_T = 1, OP_C = 2 };
enum { C_32F = 68, C_32F_TF32 = 77, C_64F = 70 };

struct handle {
    cudaStream_t stream;
    int math_mode;
};

struct gemm {
    int ta, tb, m, n, k;
    double alpha, beta, alpha_im, beta_im;   // _im: complex GEMMs only
    const void *A, *B;
    void *C;
    int at, bt, ct, lda, ldb, ldc;
    long long sA, sB, sC;
    int batch;
    bool tf32;
};

size_t esize(int t) { return t == R_64C ? 16 : t == R_64F || t == R_32C ? 8 : t == R_32F ? 4 : 2; }

bool is_complex(int t) { return t == R_32C || t == R_64C; }

// Element i of a complex operand.
void load_c(const void *p, int t, long long i, double *re, double *im) {
    if (t == R_32C) { *re = ((const float *)p)[2 * i]; *im = ((const float *)p)[2 * i + 1]; }
    else { *re = ((const double *)p)[2 * i]; *im = ((const double *)p)[2 * i + 1]; }
}

void store_c(void *p, int t, long long i, double re, double im) {
    if (t == R_32C) { ((float *)p)[2 * i] = (float)re; ((float *)p)[2 * i + 1] = (float)im; }
    else { ((double *)p)[2 * i] = re; ((double *)p)[2 * i + 1] = im; }
}

// A real operand's element type (emu_elem.h).
emu_elem elem_of(int t) { return t == R_32F ? EMU_F32 : t == R_64F ? EMU_F64 : t == R_16F ? EMU_F16 : EMU_BF16; }
double load(const void *p, int t, long long i) { return emu_load(p, elem_of(t), i); }
void store(void *p, int t, long long i, double v) { emu_store(p, elem_of(t), i, v); }

// Bytes a strided batched operand spans (0 when empty), for the range check.
bool span(int rows, int cols, int ld, long long stride, int batch, size_t es, size_t *out) {
    if (!rows || !cols || !batch) { *out = 0; return true; }
    unsigned long long last = (unsigned long long)(cols - 1) * (unsigned)ld + (unsigned)rows;
    last += (unsigned long long)(batch - 1) * (unsigned long long)(stride < 0 ? -stride : stride);
    *out = (size_t)(last * es);
    return true;
}

void run_gemm(void *arg) {
    const gemm &g = *(const gemm *)arg;
    // operand ranges, checked when the GEMM runs (the memory must still be there)
    struct { const void *p; int r, c, ld; long long s; int t; const char *name; } ops[3] = {
        { g.A, g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.lda, g.sA, g.at, "A" },
        { g.B, g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.ldb, g.sB, g.bt, "B" },
        { g.C, g.m, g.n, g.ldc, g.sC, g.ct, "C" },
    };
    for (auto &o : ops) {
        size_t bytes;
        span(o.r, o.c, o.ld, o.s, g.batch, esize(o.t), &bytes);
        if (bytes && !cudaemu_device_range_ok(o.p, bytes)) {
            char msg[256];
            snprintf(msg, sizeof msg, "cuBLAS gemm (m=%d n=%d k=%d batch=%d): operand %s (%zu bytes at %p) is not inside one device allocation",
                     g.m, g.n, g.k, g.batch, o.name, bytes, o.p);
            cudaemu_report_fault(msg);
            return;
        }
    }
    bool cx = is_complex(g.ct);
    for (int b = 0; b < g.batch; b++) {
        const char *A = (const char *)g.A + (long long)b * g.sA * (long long)esize(g.at);
        const char *B = (const char *)g.B + (long long)b * g.sB * (long long)esize(g.bt);
        char *C = (char *)g.C + (long long)b * g.sC * (long long)esize(g.ct);
        for (int j = 0; j < g.n; j++)
            for (int i = 0; i < g.m; i++) {
                double sr = 0, si = 0;   // complex: (re, im) of the sum; real: sr
                for (int p = 0; p < g.k; p++) {
                    long long ia = g.ta ? p + (long long)i * g.lda : i + (long long)p * g.lda;
                    long long ib = g.tb ? j + (long long)p * g.ldb : p + (long long)j * g.ldb;
                    if (cx) {
                        double ar, ai, br, bi;
                        load_c(A, g.at, ia, &ar, &ai);
                        load_c(B, g.bt, ib, &br, &bi);
                        if (g.ta == OP_C) ai = -ai;
                        if (g.tb == OP_C) bi = -bi;
                        sr += ar * br - ai * bi;
                        si += ar * bi + ai * br;
                    } else {
                        double av = load(A, g.at, ia), bv = load(B, g.bt, ib);
                        if (g.tf32) { av = emu_tf32(av); bv = emu_tf32(bv); }
                        sr += av * bv;
                    }
                }
                long long ci = i + (long long)j * g.ldc;
                if (cx) {
                    double vr = g.alpha * sr - g.alpha_im * si, vi = g.alpha * si + g.alpha_im * sr;
                    if (g.beta != 0 || g.beta_im != 0) {
                        double cr, cim;
                        load_c(C, g.ct, ci, &cr, &cim);
                        vr += g.beta * cr - g.beta_im * cim;
                        vi += g.beta * cim + g.beta_im * cr;
                    }
                    store_c(C, g.ct, ci, vr, vi);
                } else {
                    double v = g.alpha * sr;
                    if (g.beta != 0) v += g.beta * load(C, g.ct, ci);
                    store(C, g.ct, ci, v);
                }
            }
    }
}

int enqueue(handle *h, const gemm &g0) {
    if (!h) return ST_NOT_INITIALIZED;
    int maxop = is_complex(g0.ct) ? OP_C : OP_T;   // real GEMMs here take N and T only
    if (g0.m < 0 || g0.n < 0 || g0.k < 0 || g0.batch < 0 || g0.ta < 0 || g0.ta > maxop || g0.tb < 0 || g0.tb > maxop ||
        g0.ldc < (g0.m > 1 ? g0.m : 1) || g0.lda < ((g0.ta ? g0.k : g0.m) > 1 ? (g0.ta ? g0.k : g0.m) : 1) ||
        g0.ldb < ((g0.tb ? g0.n : g0.k) > 1 ? (g0.tb ? g0.n : g0.k) : 1))
        return ST_INVALID_VALUE;
    if (!g0.m || !g0.n || !g0.batch) return ST_OK;
    gemm *g = new gemm(g0);
    int e = cudaemu_enqueue_host(h->stream, "cublas gemm", run_gemm, g, [](void *p) { delete (gemm *)p; });
    return e ? ST_EXECUTION_FAILED : ST_OK;
}

}  // namespace

extern "C" {

int cublasCreate_v2(void **out) {
    *out = new handle{ nullptr, 0 };
    return ST_OK;
}

int cublasDestroy_v2(void *h) {
    delete (handle *)h;
    return ST_OK;
}

int cublasSetStream_v2(void *h, cudaStream_t s) {
    if (!h) return ST_NOT_INITIALIZED;
    ((handle *)h)->stream = s;
    return ST_OK;
}

int cublasSetMathMode(void *h, int mode) {
    if (!h) return ST_NOT_INITIALIZED;
    ((handle *)h)->math_mode = mode;
    return ST_OK;
}

int cublasSetWorkspace_v2(void *h, void *ws, size_t bytes) {
    if (!h) return ST_NOT_INITIALIZED;
    if (bytes && !cudaemu_device_range_ok(ws, bytes)) return ST_INVALID_VALUE;
    return ST_OK;
}

int cublasSgemmStridedBatched(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *A, int lda,
                              long long sA, const float *B, int ldb, long long sB, const float *beta, float *C, int ldc,
                              long long sC, int batch) {
    gemm g = { ta, tb, m, n, k, *alpha, *beta, 0, 0, A, B, C, R_32F, R_32F, R_32F, lda, ldb, ldc, sA, sB, sC, batch, false };
    return enqueue((handle *)h, g);
}

int cublasDgemmStridedBatched(void *h, int ta, int tb, int m, int n, int k, const double *alpha, const double *A, int lda,
                              long long sA, const double *B, int ldb, long long sB, const double *beta, double *C, int ldc,
                              long long sC, int batch) {
    gemm g = { ta, tb, m, n, k, *alpha, *beta, 0, 0, A, B, C, R_64F, R_64F, R_64F, lda, ldb, ldc, sA, sB, sC, batch, false };
    return enqueue((handle *)h, g);
}

int cublasCgemmStridedBatched(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *A, int lda,
                              long long sA, const float *B, int ldb, long long sB, const float *beta, float *C, int ldc,
                              long long sC, int batch) {
    gemm g = { ta, tb, m, n, k, alpha[0], beta[0], alpha[1], beta[1], A, B, C, R_32C, R_32C, R_32C, lda, ldb, ldc,
               sA, sB, sC, batch, false };
    return enqueue((handle *)h, g);
}

int cublasZgemmStridedBatched(void *h, int ta, int tb, int m, int n, int k, const double *alpha, const double *A,
                              int lda, long long sA, const double *B, int ldb, long long sB, const double *beta,
                              double *C, int ldc, long long sC, int batch) {
    gemm g = { ta, tb, m, n, k, alpha[0], beta[0], alpha[1], beta[1], A, B, C, R_64C, R_64C, R_64C, lda, ldb, ldc,
               sA, sB, sC, batch, false };
    return enqueue((handle *)h, g);
}

int cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int Atype,
                               int lda, long long sA, const void *B, int Btype, int ldb, long long sB, const void *beta,
                               void *C, int Ctype, int ldc, long long sC, int batch, int compute, int algo) {
    (void)algo;
    auto ok_type = [](int t) { return t == R_32F || t == R_64F || t == R_16F || t == R_16BF; };
    if (!ok_type(Atype) || !ok_type(Btype) || !ok_type(Ctype)) return ST_NOT_SUPPORTED;
    double al, be;
    if (compute == C_64F) {
        if (Atype != R_64F || Btype != R_64F || Ctype != R_64F) return ST_NOT_SUPPORTED;
        al = *(const double *)alpha;
        be = *(const double *)beta;
    } else if (compute == C_32F || compute == C_32F_TF32) {
        if (Atype == R_64F || Btype == R_64F || Ctype == R_64F) return ST_NOT_SUPPORTED;
        al = *(const float *)alpha;
        be = *(const float *)beta;
    } else {
        return ST_NOT_SUPPORTED;
    }
    gemm g = { ta, tb, m, n, k, al, be, 0, 0, A, B, C, Atype, Btype, Ctype, lda, ldb, ldc, sA, sB, sC, batch,
               compute == C_32F_TF32 && Atype == R_32F };
    return enqueue((handle *)h, g);
}

}  // extern "C"
