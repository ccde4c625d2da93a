// fft.cu — the CUDA fft family (_fft_c2c, _fft_r2c, _fft_c2r) on cuFFT,
// loaded at run time (dlopen, as cuBLAS and cuSOLVER are): without it the
// ops fail with "needs cuFFT". The record's checks are op/fft_check.c's, shared
// with the CPU backend.
//
// Every op gathers its input into a contiguous buffer with the batch dims
// first and the transformed dims last (in the record's order), runs cuFFT
// there and scatters into the output with a kernel that also scales
// (normalization) and, for r2c with onesided false, fills the other half
// by Hermitian symmetry. r2c: R2C along the last transformed dim, then C2C
// over the others (in groups of up to 3); c2r: C2C backward over all but the
// last, the imaginary parts of DC and Nyquist zeroed (pocketfft's and
// ATen's CPU meaning of a non-Hermitian input), then C2R along the last.
// complex64 computes in float (C2C, R2C, C2R), complex128 in double (Z2Z,
// D2Z, Z2D). Plans are cached for the process (cuFFT plans are bound to a
// device, not a stream: the stream is set before each exec).
#include "common.cuh"
#include "op/fft.h"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------
// cuFFT, found at run time. cufftHandle is an int, cufftResult an int (0 ok).

enum { CUFFT_R2C = 0x2a, CUFFT_C2R = 0x2c, CUFFT_C2C = 0x29, CUFFT_D2Z = 0x6a, CUFFT_Z2D = 0x6c, CUFFT_Z2Z = 0x69 };

struct fft_lib {
    void *lib;
    bool tried;
    char why[400];
    int (*Create)(int *plan);
    int (*MakePlanMany64)(int plan, int rank, long long *n, long long *inembed, long long istride, long long idist,
                          long long *onembed, long long ostride, long long odist, int type, long long batch,
                          size_t *work);
    int (*SetStream)(int plan, cudaStream_t s);
    int (*ExecC2C)(int plan, void *in, void *out, int dir);
    int (*ExecZ2Z)(int plan, void *in, void *out, int dir);
    int (*ExecR2C)(int plan, void *in, void *out);
    int (*ExecD2Z)(int plan, void *in, void *out);
    int (*ExecC2R)(int plan, void *in, void *out);
    int (*ExecZ2D)(int plan, void *in, void *out);
    int (*Destroy)(int plan);
};

static fft_lib g_lib;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;   // the library, the plan cache, plan use

static bool lib_open(const char *path) {
    if (g_lib.lib) return true;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) g_lib.lib = h;
    return h != NULL;
}

// libcufft.so.12 (CUDA 13), .so.11 (CUDA 12), .so in folder dir.
static bool lib_dir(const char *dir) {
    static const char *const names[] = { "libcufft.so.12", "libcufft.so.11", "libcufft.so" };
    for (size_t i = 0; i < 3 && !g_lib.lib; i++) {
        char p[1100];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        FILE *fp = fopen(p, "rb");
        if (!fp) continue;
        fclose(fp);
        lib_open(p);
    }
    return g_lib.lib != NULL;
}

static bool lib_glob(const char *pattern) {
    glob_t g;
    memset(&g, 0, sizeof g);
    if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0)
        for (size_t i = g.gl_pathc; i-- > 0 && !g_lib.lib;) lib_dir(g.gl_pathv[i]);
    globfree(&g);
    return g_lib.lib != NULL;
}

// Where: $RGPU_CUFFT_PATH (':'-separated files or folders), cuBLAS's folder
// (and its pip sibling nvidia/cufft/lib), the loader's search, the toolkit folders.
static bool lib_find(const rgpu_cublas *blas) {
    const char *env = getenv("RGPU_CUFFT_PATH");
    if (env && *env) {
        char buf[4096];
        snprintf(buf, sizeof buf, "%s", env);
        for (char *save = NULL, *tok = strtok_r(buf, ":", &save); tok && !g_lib.lib; tok = strtok_r(NULL, ":", &save))
            if (!lib_dir(tok) && strstr(tok, "libcufft")) lib_open(tok);
        if (g_lib.lib) return true;
    }
    if (blas && blas->lib) {
        // toolkits and CUDA 13 wheels (nvidia/cu13/lib) keep cuFFT beside cuBLAS;
        // CUDA 12 wheels in a sibling (nvidia/cublas/lib -> nvidia/cufft/lib)
        char origin[1024] = "", sib[1100];
        if (dlinfo(blas->lib, RTLD_DI_ORIGIN, origin) == 0 && origin[0]) {
            if (lib_dir(origin)) return true;
            snprintf(sib, sizeof sib, "%s/../../cufft/lib", origin);
            if (lib_dir(sib)) return true;
        }
    }
    if (lib_open("libcufft.so.12") || lib_open("libcufft.so.11") || lib_open("libcufft.so")) return true;
    if (lib_dir("/usr/local/cuda/lib64") || lib_glob("/usr/local/cuda-*/lib64") ||
        lib_glob("/usr/local/cuda-*/targets/x86_64-linux/lib") || lib_dir("/usr/lib/x86_64-linux-gnu"))
        return true;
    return false;
}

// Under g_mu. false with the reason in g_lib.why.
static bool lib_ready(const rgpu_cublas *blas) {
    if (g_lib.tried) return g_lib.lib != NULL;
    g_lib.tried = true;
    if (!lib_find(blas)) {
        snprintf(g_lib.why, sizeof g_lib.why, "cuFFT not found (tried $RGPU_CUFFT_PATH, cuBLAS's folder, "
                 "libcufft.so.12/.so.11/.so, /usr/local/cuda*/lib64)");
        return false;
    }
    struct sym { const char *name; void **slot; };
    const sym syms[] = {
        { "cufftCreate", (void **)&g_lib.Create }, { "cufftMakePlanMany64", (void **)&g_lib.MakePlanMany64 },
        { "cufftSetStream", (void **)&g_lib.SetStream }, { "cufftExecC2C", (void **)&g_lib.ExecC2C },
        { "cufftExecZ2Z", (void **)&g_lib.ExecZ2Z }, { "cufftExecR2C", (void **)&g_lib.ExecR2C },
        { "cufftExecD2Z", (void **)&g_lib.ExecD2Z }, { "cufftExecC2R", (void **)&g_lib.ExecC2R },
        { "cufftExecZ2D", (void **)&g_lib.ExecZ2D }, { "cufftDestroy", (void **)&g_lib.Destroy },
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(g_lib.lib, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(g_lib.why, sizeof g_lib.why, "cuFFT has no %s (too old?)", syms[i].name);
            dlclose(g_lib.lib);
            g_lib.lib = NULL;
            return false;
        }
    }
    return true;
}

// ---------------------------------------------------------------------------
// Plans: (type, rank, n, inner) -> cufftHandle. rank <= 3 dims of sizes n
// with `inner` contiguous elements after them: inner == 1 is cuFFT's basic
// layout batched over `batch`; otherwise stride inner, distance 1, batch inner.

struct plan_key {
    int type, rank;
    long long n[3], inner, batch;
};

#define PLAN_CACHE 64
static plan_key g_keys[PLAN_CACHE];
static int g_plans[PLAN_CACHE];
static int g_nplans;

// One op's state; plans made past a full cache while capturing a graph are
// the op's own (destroyed after a sync, once the capture is over: refused).
struct fft_run {
    rgpu_cuda_ctx *c;
    const rgpu_fft_args *a;
    int cdt;                      // working complex dtype (C64 or C128)
    plan_key okeys[4];
    int owned[4];
    int nowned;
};

// Under g_mu. A plan for k: cached, or made and cached. A full cache is
// emptied first, after a device sync (plans serve every stream), except
// during a capture, where the plan stays the op's own.
static rgpu_status get_plan(fft_run *R, const plan_key &k, int *plan, char *err, size_t errlen) {
    for (int i = 0; i < g_nplans; i++)
        if (memcmp(&g_keys[i], &k, sizeof k) == 0) { *plan = g_plans[i]; return RGPU_OK; }
    for (int i = 0; i < R->nowned; i++)
        if (memcmp(&R->okeys[i], &k, sizeof k) == 0) { *plan = R->owned[i]; return RGPU_OK; }
    bool own = false;
    if (g_nplans == PLAN_CACHE) {
        if (R->c->capturing) {
            own = true;
            RETURN_ERROR_IF(R->nowned == 4, RGPU_ERR_UNSUPPORTED, "cuFFT: too many new plans to capture in one op");
        } else {
            rgpu_cuda_tcount.host_waits++;
            RGPU_CUDA_TRY(cudaDeviceSynchronize(), err, errlen);
            for (int i = 0; i < g_nplans; i++) g_lib.Destroy(g_plans[i]);
            g_nplans = 0;
        }
    }
    int p = 0;
    RETURN_ERROR_IF(g_lib.Create(&p) != 0, RGPU_ERR_EXEC, "cufftCreate failed");
    long long n[3] = { k.n[0], k.n[1], k.n[2] }, emb[3] = { k.n[0], k.n[1], k.n[2] };
    long long oemb[3] = { k.n[0], k.n[1], k.n[2] };
    size_t work = 0;
    int r = k.inner == 1 ? g_lib.MakePlanMany64(p, k.rank, n, NULL, 1, 0, NULL, 1, 0, k.type, k.batch, &work)
                         : g_lib.MakePlanMany64(p, k.rank, n, emb, k.inner, 1, oemb, k.inner, 1, k.type, k.inner, &work);
    if (r != 0) {
        g_lib.Destroy(p);
        RETURN_ERROR(r == 2 ? RGPU_ERR_NOMEM : RGPU_ERR_EXEC,
                     "cufftMakePlanMany64 (type 0x%x, rank %d, last n %lld) failed: %d", k.type, k.rank,
                     k.n[k.rank - 1], r);
    }
    *plan = p;
    if (own) {
        R->okeys[R->nowned] = k;
        R->owned[R->nowned++] = p;
    } else {
        g_keys[g_nplans] = k;
        g_plans[g_nplans++] = p;
    }
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// Kernels

#define FFT_LOOP(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// The buffer's shape: nd dims (perm order), and for each logical dim of the
// view its position in that order.
struct fft_layout {
    int nd;
    long long bsz[RGPU_MAX_DIMS];   // buffer sizes, perm order
    long long bst[RGPU_MAX_DIMS];   // buffer strides (elements), by LOGICAL dim
    int pos[RGPU_MAX_DIMS];         // logical dim d sits at perm position pos[d]
    int perm[RGPU_MAX_DIMS];        // perm position p holds logical dim perm[p]
};

// buf[j] := v[logical index of j], j over the buffer (elements of esz bytes).
static __global__ void fft_gather_kernel(rgpu_cuda_view v, int esz, fft_layout L, char *buf, long long n) {
    FFT_LOOP(j, n) {
        long long r = j, off = 0;
        for (int p = L.nd - 1; p >= 0; p--) {
            long long ip = r % L.bsz[p];
            r /= L.bsz[p];
            off += ip * v.strides[L.perm[p]];
        }
        op_elem_copy(buf + j * esz, (const char *)v.data + off * esz, esz);
    }
}

// out[i] := scale * buf[...] over out's elements; mirror (r2c, not onesided):
// past the buffer's last transformed dim, conj of the element at minus the
// index over the transformed dims (tmask bit d).
static __global__ void fft_scatter_kernel(const char *buf, int bdt, fft_layout L, rgpu_cuda_view o, int odt,
                                          double scale, bool mirror, unsigned tmask, int last, long long h,
                                          long long n) {
    long long bes = bdt == RGPU_C128 ? 16 : bdt == RGPU_C64 || bdt == RGPU_F64 ? 8 : 4;
    long long oes = odt == RGPU_C128 ? 16 : odt == RGPU_C64 || odt == RGPU_F64 ? 8 : 4;
    FFT_LOOP(i, n) {
        long long r = i, ooff = 0, boff = 0, moff = 0;
        bool past = false;
        for (int d = o.ndim - 1; d >= 0; d--) {
            long long id = r % o.sizes[d];
            r /= o.sizes[d];
            ooff += id * o.strides[d];
            boff += id * L.bst[d];
            if (mirror) {
                long long m = id;
                if (tmask >> d & 1) m = id == 0 ? 0 : o.sizes[d] - id;
                moff += m * L.bst[d];
                if (d == last && id >= h) past = true;
            }
        }
        double re, im;
        op_load_c128(buf + (past ? moff : boff) * bes, bdt, &re, &im);
        if (past) im = -im;
        op_store_c128((char *)o.data + ooff * oes, odt, re * scale, im * scale);
    }
}

// Lines of h complex elements: imaginary parts of element 0 and (L even) L/2 := 0.
static __global__ void fft_real_ends_kernel(char *buf, int bdt, long long h, long long L, long long lines) {
    FFT_LOOP(l, lines) {
        if (bdt == RGPU_C128) {
            double *p = (double *)buf + 2 * l * h;
            p[1] = 0;
            if (L % 2 == 0) p[2 * (L / 2) + 1] = 0;
        } else {
            float *p = (float *)buf + 2 * l * h;
            p[1] = 0;
            if (L % 2 == 0) p[2 * (L / 2) + 1] = 0;
        }
    }
}

static unsigned fft_blocks(long long n) {
    long long b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

// ---------------------------------------------------------------------------
// Steps

// Executes one plan on the stream (under g_mu).
static rgpu_status exec_plan(fft_run *R, const plan_key &k, void *in, void *out, int dir, char *err, size_t errlen) {
    int plan;
    FORWARD_IF_ERROR(get_plan(R, k, &plan, err, errlen));
    RETURN_ERROR_IF(g_lib.SetStream(plan, R->c->stream) != 0, RGPU_ERR_EXEC, "cufftSetStream failed");
    int r;
    bool dbl = R->cdt == RGPU_C128;
    switch (k.type) {
    case CUFFT_C2C: r = g_lib.ExecC2C(plan, in, out, dir); break;
    case CUFFT_Z2Z: r = g_lib.ExecZ2Z(plan, in, out, dir); break;
    case CUFFT_R2C: case CUFFT_D2Z: r = dbl ? g_lib.ExecD2Z(plan, in, out) : g_lib.ExecR2C(plan, in, out); break;
    default: r = dbl ? g_lib.ExecZ2D(plan, in, out) : g_lib.ExecC2R(plan, in, out); break;
    }
    RETURN_ERROR_IF(r != 0, RGPU_ERR_EXEC, "cufftExec (type 0x%x) failed: %d", k.type, r);
    return RGPU_OK;
}

// C2C (in place, direction dir) over perm positions [s, e) of a buffer of
// sizes bsz[0..nd), in groups of up to 3 dims from the end.
static rgpu_status c2c_range(fft_run *R, void *buf, const long long *bsz, int nd, int s, int e, int dir, char *err,
                             size_t errlen) {
    size_t es = R->cdt == RGPU_C128 ? 16 : 8;
    while (e > s) {
        int g = e - s < 3 ? e - s : 3, b = e - g;
        plan_key k;
        memset(&k, 0, sizeof k);
        k.type = R->cdt == RGPU_C128 ? CUFFT_Z2Z : CUFFT_C2C;
        k.rank = g;
        long long outer = 1, inner = 1, block = 1;
        for (int p = 0; p < b; p++) outer *= bsz[p];
        for (int p = e; p < nd; p++) inner *= bsz[p];
        for (int q = 0; q < g; q++) { k.n[q] = bsz[b + q]; block *= bsz[b + q]; }
        k.inner = inner;
        if (inner == 1) {
            k.batch = outer;
            FORWARD_IF_ERROR(exec_plan(R, k, buf, buf, dir, err, errlen));
        } else {
            for (long long o = 0; o < outer; o++) {
                char *p = (char *)buf + (size_t)(o * block * inner) * es;
                FORWARD_IF_ERROR(exec_plan(R, k, p, p, dir, err, errlen));
            }
        }
        e = b;
    }
    return RGPU_OK;
}

// A rank-1 plan over `lines` contiguous lines of n (basic layout).
static plan_key line_key(int type, long long n, long long lines) {
    plan_key k;
    memset(&k, 0, sizeof k);
    k.type = type;
    k.rank = 1;
    k.n[0] = n;
    k.inner = 1;
    k.batch = lines;
    return k;
}

// The layout with the batch dims (in order) first, then dims[] (in order).
static void make_layout(fft_layout *L, const rgpu_view *v, const rgpu_fft_args *a) {
    memset(L, 0, sizeof *L);
    L->nd = v->ndim;
    bool t[RGPU_MAX_DIMS] = { false };
    for (int i = 0; i < a->ndim; i++) t[a->dims[i]] = true;
    int p = 0;
    for (int d = 0; d < v->ndim; d++)
        if (!t[d]) L->perm[p++] = d;
    for (int i = 0; i < a->ndim; i++) L->perm[p++] = a->dims[i];
    for (int q = 0; q < L->nd; q++) {
        L->pos[L->perm[q]] = q;
        L->bsz[q] = v->sizes[L->perm[q]];
    }
}

// Contiguous strides for L's buffer sizes, stored by logical dim.
static void layout_strides(fft_layout *L) {
    long long s = 1;
    for (int q = L->nd - 1; q >= 0; q--) {
        L->bst[L->perm[q]] = s;
        s *= L->bsz[q];
    }
}

static long long layout_numel(const fft_layout *L) {
    long long n = 1;
    for (int q = 0; q < L->nd; q++) n *= L->bsz[q];
    return n;
}

static rgpu_status gather(fft_run *R, const rgpu_view *v, const fft_layout *L, void *buf, char *err, size_t errlen) {
    long long n = layout_numel(L);
    if (n == 0) return RGPU_OK;
    fft_gather_kernel<<<fft_blocks(n), 256, 0, R->c->stream>>>(rgpu_cuda_view_of(v), (int)rgpu_dtype_size(v->dtype),
                                                               *L, (char *)buf, n);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

static rgpu_status scatter(fft_run *R, const void *buf, int bdt, const fft_layout *L, rgpu_view *o, bool mirror,
                           long long h, char *err, size_t errlen) {
    long long n = rgpu_op_numel(o);
    if (n == 0) return RGPU_OK;
    unsigned tmask = 0;
    for (int i = 0; i < R->a->ndim; i++) tmask |= 1u << R->a->dims[i];
    int last = R->a->ndim ? R->a->dims[R->a->ndim - 1] : -1;
    fft_scatter_kernel<<<fft_blocks(n), 256, 0, R->c->stream>>>((const char *)buf, bdt, *L, rgpu_cuda_view_of(o),
                                                                o->dtype, R->a->scale, mirror, tmask, last, h, n);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

static rgpu_status run_op(fft_run *R, const rgpu_exec *e, void **bufs, char *err, size_t errlen) {
    const rgpu_fft_args *a = R->a;
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    fft_layout L;
    make_layout(&L, in, a);
    int nd = L.nd, k = a->ndim, nb = nd - k;
    size_t ces = R->cdt == RGPU_C128 ? 16 : 8, res = ces / 2;
    int rdt = R->cdt == RGPU_C128 ? RGPU_F64 : RGPU_F32;
    if (e->op == RGPU_OP_FFT_C2C) {
        layout_strides(&L);
        bufs[0] = rgpu_cuda_scratch(R->c, (size_t)layout_numel(&L) * ces);
        RETURN_ERROR_IF(bufs[0] == NULL, RGPU_ERR_NOMEM, "%s: out of device memory", rgpu_op_name(e->op));
        FORWARD_IF_ERROR(gather(R, in, &L, bufs[0], err, errlen));
        FORWARD_IF_ERROR(c2c_range(R, bufs[0], L.bsz, nd, nb, nd, a->forward ? -1 : 1, err, errlen));
        return scatter(R, bufs[0], R->cdt, &L, out, false, 0, err, errlen);
    }
    if (e->op == RGPU_OP_FFT_R2C) {
        long long n = L.bsz[nd - 1], h = n / 2 + 1, lines = layout_numel(&L) / (n ? n : 1);
        bufs[0] = rgpu_cuda_scratch(R->c, (size_t)layout_numel(&L) * res);
        bufs[1] = rgpu_cuda_scratch(R->c, (size_t)(lines * h) * ces);
        RETURN_ERROR_IF(bufs[0] == NULL || bufs[1] == NULL, RGPU_ERR_NOMEM, "%s: out of device memory",
                        rgpu_op_name(e->op));
        FORWARD_IF_ERROR(gather(R, in, &L, bufs[0], err, errlen));
        plan_key pk = line_key(R->cdt == RGPU_C128 ? CUFFT_D2Z : CUFFT_R2C, n, lines);
        FORWARD_IF_ERROR(exec_plan(R, pk, bufs[0], bufs[1], -1, err, errlen));
        L.bsz[nd - 1] = h;                  // the buffer is onesided now
        layout_strides(&L);
        FORWARD_IF_ERROR(c2c_range(R, bufs[1], L.bsz, nd, nb, nd - 1, -1, err, errlen));
        return scatter(R, bufs[1], R->cdt, &L, out, !a->onesided, h, err, errlen);
    }
    // C2R: the input's first h along the last transformed dim
    long long Ls = a->last_dim_size, h = Ls / 2 + 1;
    L.bsz[nd - 1] = h;
    long long lines = layout_numel(&L) / h;
    bufs[0] = rgpu_cuda_scratch(R->c, (size_t)(lines * h) * ces);
    bufs[1] = rgpu_cuda_scratch(R->c, (size_t)(lines * Ls) * res);
    RETURN_ERROR_IF(bufs[0] == NULL || bufs[1] == NULL, RGPU_ERR_NOMEM, "%s: out of device memory",
                    rgpu_op_name(e->op));
    FORWARD_IF_ERROR(gather(R, in, &L, bufs[0], err, errlen));
    FORWARD_IF_ERROR(c2c_range(R, bufs[0], L.bsz, nd, nb, nd - 1, 1, err, errlen));
    fft_real_ends_kernel<<<fft_blocks(lines), 256, 0, R->c->stream>>>((char *)bufs[0], R->cdt, h, Ls, lines);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    plan_key pk = line_key(R->cdt == RGPU_C128 ? CUFFT_Z2D : CUFFT_C2R, Ls, lines);
    FORWARD_IF_ERROR(exec_plan(R, pk, bufs[0], bufs[1], 1, err, errlen));
    L.bsz[nd - 1] = Ls;
    layout_strides(&L);
    return scatter(R, bufs[1], rdt, &L, out, false, 0, err, errlen);
}

extern "C" rgpu_status rgpu_cuda_fft_exec(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen) {
    rgpu_fft_args a;
    FORWARD_IF_ERROR(rgpu_op_fft_check(e, &a, err, errlen));
    if (rgpu_op_numel(e->out[0]) == 0) return RGPU_OK;
    pthread_mutex_lock(&g_mu);
    if (!lib_ready(&c->blas)) {
        rgpu_op_errf(err, errlen, "%s needs cuFFT: %s", rgpu_op_name(e->op), g_lib.why);
        pthread_mutex_unlock(&g_mu);
        return RGPU_ERR_UNSUPPORTED;
    }
    fft_run R;
    memset(&R, 0, sizeof R);
    R.c = c;
    R.a = &a;
    R.cdt = e->op == RGPU_OP_FFT_C2C ? e->in[0]->dtype : e->op == RGPU_OP_FFT_R2C ? e->out[0]->dtype
                                                                                 : e->in[0]->dtype;
    void *bufs[2] = { NULL, NULL };
    rgpu_status st = run_op(&R, e, bufs, err, errlen);
    if (R.nowned > 0) {
        // plans past a full cache during a capture: the graph would outlive them
        if (st == RGPU_OK) {
            rgpu_op_errf(err, errlen, "%s: cuFFT's plan cache is full: cannot be captured into a graph",
                         rgpu_op_name(e->op));
            st = RGPU_ERR_UNSUPPORTED;
        }
        for (int i = 0; i < R.nowned; i++) g_lib.Destroy(R.owned[i]);
    }
    pthread_mutex_unlock(&g_mu);
    for (int i = 0; i < 2; i++)
        if (bufs[i]) rgpu_cuda_scratch_free(c, bufs[i]);
    return st;
}
