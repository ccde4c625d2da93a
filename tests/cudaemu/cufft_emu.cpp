// cufft_emu.cpp — a reference for exactly the cuFFT entry points that
// replayer/cuda/fft.cu resolves, built as cudaemu's libcufft.so.12 so the
// backend finds it through its own loader (cuBLAS's folder, or
// $RGPU_CUFFT_PATH). Emulated device memory is host memory: each exec is
// checked when made, queued on the plan's stream, and computed there with
// the project's own host FFT (replayer/op/fft_plan.c, double precision) over
// cuFFT's data layouts (basic, or advanced: embed, stride, distance).
// Unnormalized, as cuFFT; C2R drops the imaginary parts of DC and Nyquist.
#include <stdio.h>
#include <string.h>

#include <vector>

#include "cudaemu_api.h"
extern "C" {
#include "op/fft.h"
}

namespace {

enum { ST_OK = 0, ST_INVALID_PLAN = 1, ST_ALLOC_FAILED = 2, ST_INVALID_VALUE = 4, ST_EXEC_FAILED = 6,
       ST_SETUP_FAILED = 7 };
enum { R2C = 0x2a, C2R = 0x2c, C2C = 0x29, D2Z = 0x6a, Z2D = 0x6c, Z2Z = 0x69 };

struct plan {
    bool made = false;
    int type = 0, rank = 0;
    long long n[3] = {1, 1, 1};
    long long iemb[3] = {1, 1, 1}, oemb[3] = {1, 1, 1};
    long long istride = 1, idist = 0, ostride = 1, odist = 0, batch = 0;
    cudaStream_t stream = nullptr;
};

struct call {
    plan p;
    const char *in;
    char *out;
    int dir;
};

bool dbl(int t) { return t == D2Z || t == Z2D || t == Z2Z; }
bool real_in(int t) { return t == R2C || t == D2Z; }
bool real_out(int t) { return t == C2R || t == Z2D; }

// Elements (in index space) one batch member spans in a layout of embed e, stride s.
long long span(const long long *e, int rank, long long s) {
    long long m = 1;
    for (int i = 0; i < rank; i++) m *= e[i];
    return (m - 1) * s + 1;
}

bool range(const void *p, size_t n, const char *what) {
    if (!n || cudaemu_device_range_ok(p, n)) return true;
    char msg[200];
    snprintf(msg, sizeof msg, "cufft: %s [%p, +%zu) is outside device memory", what, p, n);
    cudaemu_report_fault(msg);
    return false;
}

// Offset (elements) of multi-index idx (rank dims, sizes sz) in embed e with stride s.
long long off(const long long *idx, const long long *e, int rank, long long s) {
    long long o = 0;
    for (int i = 0; i < rank; i++) o = o * e[i] + idx[i];
    return o * s;
}

// Transforms every line along dim d of w (contiguous, shape sz[rank]).
void lines(double *w, const long long *sz, int rank, int d, int sign) {
    long long len = sz[d], inner = 1, outer = 1;
    if (len <= 1) return;
    for (int k = d + 1; k < rank; k++) inner *= sz[k];
    for (int k = 0; k < d; k++) outer *= sz[k];
    rgpu_fft_plan *pl = rgpu_fft_plan_new(len, sign);
    std::vector<double> line((size_t)len * 2);
    for (long long o = 0; o < outer; o++)
        for (long long i = 0; i < inner; i++) {
            double *b = w + 2 * (o * len * inner + i);
            for (long long j = 0; j < len; j++) { line[2 * j] = b[2 * j * inner]; line[2 * j + 1] = b[2 * j * inner + 1]; }
            rgpu_fft_exec(pl, line.data());
            for (long long j = 0; j < len; j++) { b[2 * j * inner] = line[2 * j]; b[2 * j * inner + 1] = line[2 * j + 1]; }
        }
    rgpu_fft_plan_free(pl);
}

void run(void *arg) {
    call *c = (call *)arg;
    const plan &p = c->p;
    int t = p.type, r = p.rank;
    bool d = dbl(t);
    size_t ies = real_in(t) ? (d ? 8 : 4) : (d ? 16 : 8), oes = real_out(t) ? (d ? 8 : 4) : (d ? 16 : 8);
    // the logical shapes of one member: in, out, and the work array w
    long long isz[3], osz[3];
    for (int i = 0; i < r; i++) isz[i] = osz[i] = p.n[i];
    long long h = p.n[r - 1] / 2 + 1;
    if (t == R2C || t == D2Z) osz[r - 1] = h;
    if (t == C2R || t == Z2D) isz[r - 1] = h;
    long long in_n = (p.batch - 1) * p.idist + span(p.iemb, r, p.istride);
    long long out_n = (p.batch - 1) * p.odist + span(p.oemb, r, p.ostride);
    if (!range(c->in, (size_t)in_n * ies, "exec input") || !range(c->out, (size_t)out_n * oes, "exec output")) return;
    long long wn = 1;
    for (int i = 0; i < r; i++) wn *= isz[i];
    std::vector<double> w((size_t)wn * 2);
    long long full = p.n[r - 1];
    std::vector<double> line((size_t)full * 2);
    for (long long b = 0; b < p.batch; b++) {
        const char *ib = c->in + (size_t)(b * p.idist) * ies;
        char *ob = c->out + (size_t)(b * p.odist) * oes;
        long long idx[3] = {0, 0, 0};
        for (long long j = 0; j < wn; j++) {
            const char *e = ib + (size_t)off(idx, p.iemb, r, p.istride) * ies;
            if (real_in(t)) { w[2 * j] = d ? *(const double *)e : *(const float *)e; w[2 * j + 1] = 0; }
            else if (d) { w[2 * j] = ((const double *)e)[0]; w[2 * j + 1] = ((const double *)e)[1]; }
            else { w[2 * j] = ((const float *)e)[0]; w[2 * j + 1] = ((const float *)e)[1]; }
            for (int k = r - 1; k >= 0; k--) { if (++idx[k] < isz[k]) break; idx[k] = 0; }
        }
        if (!real_out(t)) {
            for (int k = 0; k < r; k++) lines(w.data(), isz, r, k, real_in(t) ? -1 : c->dir);
            long long on = 1;
            for (int k = 0; k < r; k++) on *= osz[k];
            long long oi[3] = {0, 0, 0};
            for (long long j = 0; j < on; j++) {
                long long wi = 0;
                for (int k = 0; k < r; k++) wi = wi * isz[k] + oi[k];
                char *e = ob + (size_t)off(oi, p.oemb, r, p.ostride) * oes;
                if (d) { ((double *)e)[0] = w[2 * wi]; ((double *)e)[1] = w[2 * wi + 1]; }
                else { ((float *)e)[0] = (float)w[2 * wi]; ((float *)e)[1] = (float)w[2 * wi + 1]; }
                for (int k = r - 1; k >= 0; k--) { if (++oi[k] < osz[k]) break; oi[k] = 0; }
            }
            continue;
        }
        // C2R: backward over all but the last dim, then Hermitian lines
        for (int k = 0; k < r - 1; k++) lines(w.data(), isz, r, k, 1);
        rgpu_fft_plan *pl = rgpu_fft_plan_new(full, 1);
        long long nl = wn / h;
        for (long long l = 0; l < nl; l++) {
            const double *src = w.data() + 2 * l * h;
            for (long long k = 0; k < h; k++) {
                line[2 * k] = src[2 * k];
                line[2 * k + 1] = (k == 0 || 2 * k == full) ? 0.0 : src[2 * k + 1];
            }
            for (long long k = h; k < full; k++) { line[2 * k] = line[2 * (full - k)]; line[2 * k + 1] = -line[2 * (full - k) + 1]; }
            rgpu_fft_exec(pl, line.data());
            long long oi[3] = {0, 0, 0};
            long long q = l;
            for (int k = r - 2; k >= 0; k--) { oi[k] = q % osz[k]; q /= osz[k]; }
            for (long long k = 0; k < full; k++) {
                oi[r - 1] = k;
                char *e = ob + (size_t)off(oi, p.oemb, r, p.ostride) * oes;
                if (d) *(double *)e = line[2 * k];
                else *(float *)e = (float)line[2 * k];
            }
        }
        rgpu_fft_plan_free(pl);
    }
}

std::vector<plan *> g_plans;   // cufftHandle i is g_plans[i - 1]

plan *get(int h) { return h >= 1 && (size_t)h <= g_plans.size() ? g_plans[h - 1] : nullptr; }

// kind: 0 C2C-like, 1 R2C-like, 2 C2R-like
int exec(int h, const void *in, void *out, int dir, bool want_dbl, int kind) {
    plan *p = get(h);
    if (!p || !p->made) return ST_INVALID_PLAN;
    int t = p->type;
    int k = (t == R2C || t == D2Z) ? 1 : (t == C2R || t == Z2D) ? 2 : 0;
    if (k != kind || dbl(t) != want_dbl || !in || !out) return ST_INVALID_VALUE;
    if (kind == 0 && dir != -1 && dir != 1) return ST_INVALID_VALUE;
    call *c = new call{ *p, (const char *)in, (char *)out, dir };
    int e = cudaemu_enqueue_host(p->stream, "cufft", run, c, [](void *q) { delete (call *)q; });
    return e ? ST_EXEC_FAILED : ST_OK;
}

}  // namespace

extern "C" {

int cufftCreate(int *h) {
    if (!h) return ST_INVALID_VALUE;
    g_plans.push_back(new plan());
    *h = (int)g_plans.size();
    return ST_OK;
}

int cufftDestroy(int h) {
    plan *p = get(h);
    if (!p) return ST_INVALID_PLAN;
    delete p;
    g_plans[h - 1] = nullptr;
    return ST_OK;
}

int cufftSetStream(int h, cudaStream_t s) {
    plan *p = get(h);
    if (!p) return ST_INVALID_PLAN;
    p->stream = s;
    return ST_OK;
}

int cufftMakePlanMany64(int h, int rank, long long *n, long long *inembed, long long istride, long long idist,
                        long long *onembed, long long ostride, long long odist, int type, long long batch,
                        size_t *work) {
    plan *p = get(h);
    if (!p) return ST_INVALID_PLAN;
    if (rank < 1 || rank > 3 || !n || batch < 1) return ST_INVALID_VALUE;
    if (type != R2C && type != C2R && type != C2C && type != D2Z && type != Z2D && type != Z2Z) return ST_INVALID_VALUE;
    p->type = type;
    p->rank = rank;
    for (int i = 0; i < rank; i++) {
        if (n[i] < 1) return ST_INVALID_VALUE;
        p->n[i] = n[i];
    }
    // the complex side of R2C / C2R keeps n/2+1 along the last dim
    long long ie[3], oe[3];
    for (int i = 0; i < rank; i++) ie[i] = oe[i] = n[i];
    if (type == R2C || type == D2Z) oe[rank - 1] = n[rank - 1] / 2 + 1;
    if (type == C2R || type == Z2D) ie[rank - 1] = n[rank - 1] / 2 + 1;
    if (!inembed || !onembed) {     // basic layout: the other advanced parameters are ignored
        istride = ostride = 1;
        idist = odist = 1;
        for (int i = 0; i < rank; i++) { idist *= ie[i]; odist *= oe[i]; }
    } else {
        for (int i = 0; i < rank; i++) {
            if (inembed[i] < ie[i] && i > 0) return ST_INVALID_VALUE;
            if (onembed[i] < oe[i] && i > 0) return ST_INVALID_VALUE;
            ie[i] = inembed[i];
            oe[i] = onembed[i];
        }
        if (istride < 1 || ostride < 1 || idist < 0 || odist < 0) return ST_INVALID_VALUE;
    }
    for (int i = 0; i < rank; i++) { p->iemb[i] = ie[i]; p->oemb[i] = oe[i]; }
    p->istride = istride; p->idist = idist; p->ostride = ostride; p->odist = odist;
    p->batch = batch;
    p->made = true;
    if (work) *work = 0;
    return ST_OK;
}

int cufftExecC2C(int h, void *in, void *out, int dir) { return exec(h, in, out, dir, false, 0); }
int cufftExecZ2Z(int h, void *in, void *out, int dir) { return exec(h, in, out, dir, true, 0); }
int cufftExecR2C(int h, void *in, void *out) { return exec(h, in, out, -1, false, 1); }
int cufftExecD2Z(int h, void *in, void *out) { return exec(h, in, out, -1, true, 1); }
int cufftExecC2R(int h, void *in, void *out) { return exec(h, in, out, 1, false, 2); }
int cufftExecZ2D(int h, void *in, void *out) { return exec(h, in, out, 1, true, 2); }

}  // extern "C"
