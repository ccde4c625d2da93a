// linalg.cu — the CUDA linalg family: the steps of op/linalg.h (which writes
// each op once) on cuSOLVER (getrf, getrs, potrf, potrs, one matrix per call,
// in batch order on the backend's stream) and small kernels for packing,
// triangular solves, determinants and permutations, which run the per-matrix
// math of op/linalg.h that the CPU backend runs too.
#include <stdlib.h>

#include "common.cuh"
#include "op/linalg.h"

// ---------------------------------------------------------------------------
// Kernels

// Element offset of batch b of a view whose last two dims are the matrix.
__device__ inline long long la_batch_off(const rgpu_cuda_view &v, long long b) {
    return rgpu_cuda_offset_lead(v, v.ndim - 2, b);
}

#define LA_LOOP(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// ws index w = b*r*c + i + j*r <-> view element (b, i, j)
__device__ inline long long la_elem(const rgpu_cuda_view &v, long long w, long long *i, long long *j) {
    long long r = v.sizes[v.ndim - 2], c = v.sizes[v.ndim - 1];
    long long b = w / (r * c), rem = w % (r * c);
    *i = rem % r;
    *j = rem / r;
    return la_batch_off(v, b) + *i * v.strides[v.ndim - 2] + *j * v.strides[v.ndim - 1];
}

static __global__ void la_pack_kernel(rgpu_cuda_view v, int dt, long long es, double *ws, int wsf, long long n) {
    LA_LOOP(w, n) {
        long long i, j, off = la_elem(v, w, &i, &j);
        const char *p = (const char *)v.data + off * es;
        if (wsf & OP_LA_CX) {
            double re, im;
            op_load_c128(p, dt, &re, &im);
            ws[2 * w] = re;
            ws[2 * w + 1] = wsf & OP_LA_CONJ ? -im : im;
        } else {
            ws[w] = op_load_f64(p, dt);
        }
    }
}

static __global__ void la_unpack_kernel(const double *ws, int wsf, rgpu_cuda_view v, int dt, long long es, int mask,
                                        long long n) {
    LA_LOOP(w, n) {
        long long i, j, off = la_elem(v, w, &i, &j);
        char *p = (char *)v.data + off * es;
        if (wsf & OP_LA_CX) {
            double im = op_la_masked_im(ws[2 * w + 1], i, j, mask);
            op_store_c128(p, dt, op_la_masked(ws[2 * w], i, j, mask), wsf & OP_LA_CONJ ? -im : im);
        } else {
            op_store_c128(p, dt, op_la_masked(ws[w], i, j, mask), 0.0);
        }
    }
}

static __global__ void la_pack_i_kernel(rgpu_cuda_view v, int32_t *ws, long long n) {
    LA_LOOP(w, n) {
        long long i, j, off = la_elem(v, w, &i, &j);
        ws[w] = ((const int32_t *)v.data)[off];
    }
}

static __global__ void la_unpack_i_kernel(const int32_t *ws, rgpu_cuda_view v, long long n) {
    LA_LOOP(w, n) {
        long long i, j, off = la_elem(v, w, &i, &j);
        ((int32_t *)v.data)[off] = ws[w];
    }
}

// total counts doubles: (re, im) pairs of a complex workspace are two (e = 2)
static __global__ void la_eye_kernel(double *ws, long long n, int e, long long total) {
    LA_LOOP(w, total) {
        long long rem = (w / e) % (n * n);
        ws[w] = rem % n == rem / n && w % e == 0 ? 1.0 : 0.0;
    }
}

static __global__ void la_trsm_kernel(bool cx, const double *a, double *b, long long nb, long long n, long long k,
                                      bool upper, bool trans, bool unit) {
    LA_LOOP(t, nb * k) {
        long long m = t / k, j = t % k;
        if (cx) op_la_trsv_c(a + 2 * m * n * n, n, b + 2 * (m * n * k + j * n), n, upper, trans, unit);
        else op_la_trsv(a + m * n * n, n, b + m * n * k + j * n, n, upper, trans, unit);
    }
}

static __global__ void la_det_kernel(bool cx, const double *lu, const int32_t *piv, long long nb, long long n,
                                     double *d, double *lg) {
    LA_LOOP(m, nb) {
        if (cx) op_la_lu_det1_c(lu + 2 * m * n * n, piv + m * n, n, d + 2 * m, lg ? lg + m : NULL);
        else op_la_lu_det1(lu + m * n * n, piv + m * n, n, d + m, lg ? lg + m : NULL);
    }
}

static __global__ void la_perm_kernel(const int32_t *piv, long long nb, long long m, long long k, double *p) {
    LA_LOOP(t, nb) op_la_perm1(piv + t * k, m, k, p + t * m * m);
}

static __global__ void la_crop_kernel(const double *src, long long sr, long long sc, double *dst, long long dr,
                                      long long dc, int e, long long total) {
    LA_LOOP(x, total) {
        long long w = x / e, h = x % e;
        long long b = w / (dr * dc), rem = w % (dr * dc), i = rem % dr, j = rem / dr;
        dst[x] = i < sr && j < sc ? src[e * (b * sr * sc + i + j * sr) + h] : 0.0;
    }
}

// A real geev's (WR, WI) of 2n per matrix and VR (NULL: none) into complex w, v.
static __global__ void la_eig_pairs_kernel(const double *wri, const double *vr, long long nb, long long n, double *w,
                                           double *v) {
    LA_LOOP(m, nb) op_la_eig_pairs(wri + 2 * m * n, wri + 2 * m * n + n, vr ? vr + m * n * n : NULL, n,
                                   w + 2 * m * n, v ? v + 2 * m * n * n : NULL);
}

// sytrs (cuSOLVER has none): one thread per right-hand side column, LAPACK's steps (op/linalg.h)
static __global__ void la_sytrs_kernel(bool cx, bool herm, const double *ld, const int32_t *piv, double *b,
                                       long long nb, long long n, long long k) {
    LA_LOOP(t, nb * k) {
        long long m = t / k, j = t % k, e = cx ? 2 : 1;
        op_la_sytrs1(ld + e * m * n * n, piv + m * n, n, b + e * (m * n * k + j * n), cx, herm);
    }
}

// ---------------------------------------------------------------------------
// Steps

static unsigned la_blocks(long long n) {
    long long b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

#define LA_LAUNCH(kernel, n, ...)                                             \
    do {                                                                      \
        if ((n) > 0) {                                                        \
            kernel<<<la_blocks(n), 256, 0, c->stream>>>(__VA_ARGS__);         \
            RGPU_CUDA_CHECK_LAUNCH(err, errlen);                              \
        }                                                                     \
        return RGPU_OK;                                                       \
    } while (0)

static long long mat_elems(const rgpu_view *v) { return rgpu_op_numel(v); }

static void *g_alloc(void *ctx, size_t n) { return rgpu_cuda_scratch((rgpu_cuda_ctx *)ctx, n); }
static void g_release(void *ctx, void *p) { rgpu_cuda_scratch_free((rgpu_cuda_ctx *)ctx, p); }

static rgpu_status g_pack(void *ctx, const rgpu_view *v, double *ws, int wsf, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    long long n = mat_elems(v);
    LA_LAUNCH(la_pack_kernel, n, rgpu_cuda_view_of(v), v->dtype, (long long)rgpu_dtype_size(v->dtype), ws, wsf, n);
}

static rgpu_status g_unpack(void *ctx, const double *ws, int wsf, const rgpu_view *v, int mask, char *err,
                            size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    long long n = mat_elems(v);
    LA_LAUNCH(la_unpack_kernel, n, ws, wsf, rgpu_cuda_view_of(v), v->dtype, (long long)rgpu_dtype_size(v->dtype),
              mask, n);
}

static rgpu_status g_pack_i(void *ctx, const rgpu_view *v, int32_t *ws, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    long long n = mat_elems(v);
    LA_LAUNCH(la_pack_i_kernel, n, rgpu_cuda_view_of(v), ws, n);
}

static rgpu_status g_unpack_i(void *ctx, const int32_t *ws, const rgpu_view *v, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    long long n = mat_elems(v);
    LA_LAUNCH(la_unpack_i_kernel, n, ws, rgpu_cuda_view_of(v), n);
}

static rgpu_status g_eye(void *ctx, bool cx, double *ws, int64_t nb, int64_t n, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    int e = cx ? 2 : 1;
    long long total = e * nb * n * n;
    LA_LAUNCH(la_eye_kernel, total, ws, (long long)n, e, total);
}

static rgpu_status g_trsm(void *ctx, bool cx, const double *a, double *b, int64_t nb, int64_t n, int64_t k,
                          bool upper, bool trans, bool unit, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    long long t = n ? nb * k : 0;
    LA_LAUNCH(la_trsm_kernel, t, cx, a, b, (long long)nb, (long long)n, (long long)k, upper, trans, unit);
}

static rgpu_status g_lu_det(void *ctx, bool cx, const double *lu, const int32_t *piv, int64_t nb, int64_t n,
                            double *d, double *lg, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    LA_LAUNCH(la_det_kernel, (long long)nb, cx, lu, piv, (long long)nb, (long long)n, d, lg);
}

static rgpu_status g_lu_perm(void *ctx, const int32_t *piv, int64_t nb, int64_t m, int64_t k, double *p,
                             char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    LA_LAUNCH(la_perm_kernel, (long long)nb, piv, (long long)nb, (long long)m, (long long)k, p);
}

// cuSOLVER calls

#define SOLVER_TRY(call, what)                                                                  \
    do {                                                                                        \
        int s_ = (call);                                                                        \
        RETURN_ERROR_IF(s_ != 0, RGPU_ERR_EXEC, "cuda linalg: %s failed (cusolverStatus %d)", what, s_); \
    } while (0)

// call(b) for each matrix b of the batch in order, until one returns a
// cusolverStatus other than 0: that one as "cusolverDn<Z|D><what> failed".
template <class F>
static rgpu_status la_each_matrix(int64_t nb, bool cx, const char *what, F call, char *err, size_t errlen)
{
    for (int64_t b = 0; b < nb; b++) {
        int s = call(b);
        if (s != 0)
            RETURN_ERROR(RGPU_ERR_EXEC, "cuda linalg: cusolverDn%c%s failed (cusolverStatus %d)", cx ? 'Z' : 'D', what,
                         s);
    }
    return RGPU_OK;
}

// cx picks the Z routine (complex128 as (re, im) pairs; the table types it as
// double *, the same pointer), workspaces in units of e doubles.
static rgpu_status g_getrf(void *ctx, bool cx, double *a, int64_t nb, int64_t m, int64_t n, int32_t *piv,
                           int32_t *info, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    rgpu_cusolver *S = &c->solver;
    int64_t k = m < n ? m : n, e = cx ? 2 : 1;
    if (k == 0) {
        RGPU_CUDA_TRY(cudaMemsetAsync(info, 0, (size_t)nb * sizeof(int32_t), c->stream), err, errlen);
        return RGPU_OK;
    }
    int lwork = 0;
    SOLVER_TRY((cx ? S->Zgetrf_bufferSize : S->Dgetrf_bufferSize)(S->handle, (int)m, (int)n, a, (int)m, &lwork),
               "cusolverDn<t>getrf_bufferSize");
    double *work = (double *)rgpu_cuda_scratch(c, (size_t)(lwork > 0 ? lwork : 1) * e * sizeof(double));
    RETURN_ERROR_IF(!work, RGPU_ERR_NOMEM, "cuda linalg: out of memory for getrf's workspace");
    rgpu_status st = la_each_matrix(nb, cx, "getrf", [&](int64_t b) {
        return (cx ? S->Zgetrf : S->Dgetrf)(S->handle, (int)m, (int)n, a + e * b * m * n, (int)m, work, piv + b * k,
            info + b);
    }, err, errlen);
    rgpu_cuda_scratch_free(c, work);
    return st;
}

static rgpu_status g_getrs(void *ctx, bool cx, const double *lu, const int32_t *piv, double *x, int64_t nb, int64_t n,
                           int64_t k, bool trans, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    rgpu_cusolver *S = &c->solver;
    if (n == 0 || k == 0) return RGPU_OK;
    int64_t e = cx ? 2 : 1;
    int op = trans ? (cx ? 2 : 1) : 0;    // CUBLAS_OP_C / _T
    int *dinfo = (int *)rgpu_cuda_scratch(c, sizeof(int));
    RETURN_ERROR_IF(!dinfo, RGPU_ERR_NOMEM, "cuda linalg: out of memory");
    rgpu_status st = la_each_matrix(nb, cx, "getrs", [&](int64_t b) {
        return (cx ? S->Zgetrs : S->Dgetrs)(S->handle, op, (int)n, (int)k, lu + e * b * n * n, (int)n, piv + b * n,
            x + e * b * n * k, (int)n, dinfo);
    }, err, errlen);
    rgpu_cuda_scratch_free(c, dinfo);
    return st;
}

static rgpu_status g_potrf(void *ctx, bool cx, double *a, int64_t nb, int64_t n, bool lower, int32_t *info,
                           char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    rgpu_cusolver *S = &c->solver;
    if (n == 0) {
        RGPU_CUDA_TRY(cudaMemsetAsync(info, 0, (size_t)nb * sizeof(int32_t), c->stream), err, errlen);
        return RGPU_OK;
    }
    int64_t e = cx ? 2 : 1;
    int uplo = lower ? 0 : 1, lwork = 0;
    SOLVER_TRY((cx ? S->Zpotrf_bufferSize : S->Dpotrf_bufferSize)(S->handle, uplo, (int)n, a, (int)n, &lwork),
               "cusolverDn<t>potrf_bufferSize");
    double *work = (double *)rgpu_cuda_scratch(c, (size_t)(lwork > 0 ? lwork : 1) * e * sizeof(double));
    RETURN_ERROR_IF(!work, RGPU_ERR_NOMEM, "cuda linalg: out of memory for potrf's workspace");
    rgpu_status st = la_each_matrix(nb, cx, "potrf", [&](int64_t b) {
        return (cx ? S->Zpotrf : S->Dpotrf)(S->handle, uplo, (int)n, a + e * b * n * n, (int)n, work, lwork,
            info + b);
    }, err, errlen);
    rgpu_cuda_scratch_free(c, work);
    return st;
}

static rgpu_status g_potrs(void *ctx, bool cx, const double *l, double *x, int64_t nb, int64_t n, int64_t k,
                           bool lower, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    rgpu_cusolver *S = &c->solver;
    if (n == 0 || k == 0) return RGPU_OK;
    int64_t e = cx ? 2 : 1;
    int *dinfo = (int *)rgpu_cuda_scratch(c, sizeof(int));
    RETURN_ERROR_IF(!dinfo, RGPU_ERR_NOMEM, "cuda linalg: out of memory");
    rgpu_status st = la_each_matrix(nb, cx, "potrs", [&](int64_t b) {
        return (cx ? S->Zpotrs : S->Dpotrs)(S->handle, lower ? 0 : 1, (int)n, (int)k, l + e * b * n * n, (int)n,
            x + e * b * n * k, (int)n, dinfo);
    }, err, errlen);
    rgpu_cuda_scratch_free(c, dinfo);
    return st;
}

static rgpu_status g_crop(void *ctx, bool cx, const double *src, int64_t sr, int64_t sc, double *dst, int64_t dr,
                          int64_t dc, int64_t nb, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    int e = cx ? 2 : 1;
    long long total = e * nb * dr * dc;
    LA_LAUNCH(la_crop_kernel, total, src, (long long)sr, (long long)sc, dst, (long long)dr, (long long)dc, e, total);
}

// One cuSOLVER routine over nb matrices with one workspace of lwork elements
// (e doubles each) and one devInfo (the routines here report no info the ops
// return).
#define SOLVER_LOOP(what, lwork_call, call)                                                      \
    do {                                                                                        \
        int lwork = 0;                                                                          \
        SOLVER_TRY(lwork_call, what "_bufferSize");                                             \
        double *work = (double *)rgpu_cuda_scratch(c, (size_t)(lwork > 0 ? lwork : 1) * e * sizeof(double)); \
        int *dinfo = (int *)rgpu_cuda_scratch(c, sizeof(int));                                  \
        rgpu_status st_ = work && dinfo ? RGPU_OK : RGPU_ERR_NOMEM;                             \
        if (st_ != RGPU_OK) rgpu_op_errf(err, errlen, "cuda linalg: out of memory for %s's workspace", what); \
        for (int64_t b = 0; b < nb && st_ == RGPU_OK; b++) {                                    \
            int s_ = (call);                                                                    \
            if (s_ != 0) {                                                                      \
                rgpu_op_errf(err, errlen, "cuda linalg: %s failed (cusolverStatus %d)", what, s_);   \
                st_ = RGPU_ERR_EXEC;                                                            \
            }                                                                                   \
        }                                                                                       \
        if (work) rgpu_cuda_scratch_free(c, work);                                              \
        if (dinfo) rgpu_cuda_scratch_free(c, dinfo);                                            \
        return st_;                                                                             \
    } while (0)

static rgpu_status g_geqrf(void *ctx, bool cx, double *a, int64_t nb, int64_t m, int64_t n, double *tau, char *err,
                           size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    rgpu_cusolver *S = &c->solver;
    int64_t k = m < n ? m : n, e = cx ? 2 : 1;
    if (k == 0) return RGPU_OK;
    SOLVER_LOOP("cusolverDn<t>geqrf",
                (cx ? S->Zgeqrf_bufferSize : S->Dgeqrf_bufferSize)(S->handle, (int)m, (int)n, a, (int)m, &lwork),
                (cx ? S->Zgeqrf : S->Dgeqrf)(S->handle, (int)m, (int)n, a + e * b * m * n, (int)m, tau + e * b * k,
                                             work, lwork, dinfo));
}

static rgpu_status g_orgqr(void *ctx, bool cx, double *a, int64_t nb, int64_t m, int64_t n, int64_t k,
                           const double *tau, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    rgpu_cusolver *S = &c->solver;
    int64_t e = cx ? 2 : 1;
    if (m == 0 || n == 0) return RGPU_OK;
    SOLVER_LOOP("cusolverDn<t>orgqr/ungqr",
                (cx ? S->Zungqr_bufferSize : S->Dorgqr_bufferSize)(S->handle, (int)m, (int)n, (int)k, a, (int)m, tau,
                                                                   &lwork),
                (cx ? S->Zungqr : S->Dorgqr)(S->handle, (int)m, (int)n, (int)k, a + e * b * m * n, (int)m,
                                             tau + e * b * k, work, lwork, dinfo));
}

static rgpu_status g_ormqr(void *ctx, bool cx, const double *a, const double *tau, double *cm, int64_t nb, int64_t m,
                           int64_t n, int64_t k, bool left, bool trans, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    rgpu_cusolver *S = &c->solver;
    int64_t r = left ? m : n, e = cx ? 2 : 1;
    int side = left ? 0 : 1, op = trans ? (cx ? 2 : 1) : 0;
    SOLVER_LOOP("cusolverDn<t>ormqr/unmqr",
                (cx ? S->Zunmqr_bufferSize : S->Dormqr_bufferSize)(S->handle, side, op, (int)m, (int)n, (int)k, a,
                                                                   (int)r, tau, cm, (int)m, &lwork),
                (cx ? S->Zunmqr : S->Dormqr)(S->handle, side, op, (int)m, (int)n, (int)k, a + e * b * r * k, (int)r,
                                             tau + e * b * k, cm + e * b * m * n, (int)m, work, lwork, dinfo));
}

static rgpu_status g_syevd(void *ctx, bool cx, double *a, int64_t nb, int64_t n, bool lower, bool v, double *w,
                           char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    rgpu_cusolver *S = &c->solver;
    int64_t e = cx ? 2 : 1;
    int jobz = v ? 1 : 0, uplo = lower ? 0 : 1;
    SOLVER_LOOP("cusolverDn<t>syevd/heevd",
                (cx ? S->Zheevd_bufferSize : S->Dsyevd_bufferSize)(S->handle, jobz, uplo, (int)n, a, (int)n, w,
                                                                   &lwork),
                (cx ? S->Zheevd : S->Dsyevd)(S->handle, jobz, uplo, (int)n, a + e * b * n * n, (int)n, w + b * n,
                                             work, lwork, dinfo));
}

static rgpu_status g_gesvd(void *ctx, bool cx, double *a, int64_t nb, int64_t m, int64_t n, double *s, double *u,
                           double *vt, bool full, bool uv, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    rgpu_cusolver *S = &c->solver;
    int64_t uc = full ? m : n, e = cx ? 2 : 1;
    signed char ju = !uv ? 'N' : full ? 'A' : 'S', jv = uv ? 'A' : 'N';
    SOLVER_LOOP("cusolverDn<t>gesvd", (cx ? S->Zgesvd_bufferSize : S->Dgesvd_bufferSize)(S->handle, (int)m, (int)n,
                                                                                          &lwork),
                (cx ? S->Zgesvd : S->Dgesvd)(S->handle, ju, jv, (int)m, (int)n, a + e * b * m * n, (int)m, s + b * n,
                                             uv ? u + e * b * m * uc : NULL, (int)m, uv ? vt + e * b * n * n : NULL,
                                             (int)n, work, lwork, NULL, dinfo));
}

// cusolverDn<t>sytrf 'L'; a Hermitian complex A is refused as ATen's cuSOLVER path does (no hetrf).
static rgpu_status g_sytrf(void *ctx, bool cx, bool herm, double *a, int64_t nb, int64_t n, int32_t *piv,
                           int32_t *info, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    rgpu_cusolver *S = &c->solver;
    RETURN_ERROR_IF(cx && herm, RGPU_ERR_UNSUPPORTED,
                    "torch.linalg.ldl_factor: complex tensors with hermitian=True are not supported on the cuda "
                    "backend (cuSOLVER has no hetrf)");
    if (n == 0) {
        RGPU_CUDA_TRY(cudaMemsetAsync(info, 0, (size_t)nb * sizeof(int32_t), c->stream), err, errlen);
        return RGPU_OK;
    }
    int64_t e = cx ? 2 : 1;
    int lwork = 0;
    SOLVER_TRY((cx ? S->Zsytrf_bufferSize : S->Dsytrf_bufferSize)(S->handle, (int)n, a, (int)n, &lwork),
               "cusolverDn<t>sytrf_bufferSize");
    double *work = (double *)rgpu_cuda_scratch(c, (size_t)(lwork > 0 ? lwork : 1) * e * sizeof(double));
    RETURN_ERROR_IF(!work, RGPU_ERR_NOMEM, "cuda linalg: out of memory for sytrf's workspace");
    rgpu_status st = la_each_matrix(nb, cx, "sytrf", [&](int64_t b) {
        return (cx ? S->Zsytrf : S->Dsytrf)(S->handle, 0, (int)n, a + e * b * n * n, (int)n, piv + b * n, work,
            lwork > 0 ? lwork : 1, info + b);
    }, err, errlen);
    rgpu_cuda_scratch_free(c, work);
    return st;
}

static rgpu_status g_sytrs(void *ctx, bool cx, bool herm, const double *ld, const int32_t *piv, double *b,
                           int64_t nb, int64_t n, int64_t k, char *err, size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    long long t = n ? nb * k : 0;
    LA_LAUNCH(la_sytrs_kernel, t, cx, herm, ld, piv, b, (long long)nb, (long long)n, (long long)k);
}

// cusolverDnXgeev (CUDA >= 12.6), one matrix per call; a real A in real
// arithmetic, its pairs made complex by a kernel as on the CPU.
static rgpu_status g_geev(void *ctx, bool cx, double *a, int64_t nb, int64_t n, double *w, double *v, char *err,
                          size_t errlen) {
    rgpu_cuda_ctx *c = (rgpu_cuda_ctx *)ctx;
    rgpu_cusolver *S = &c->solver;
    RETURN_ERROR_IF(!S->Xgeev, RGPU_ERR_UNSUPPORTED,
                    "cuda backend: linalg.eig needs cusolverDnXgeev (CUDA 12.6 or later); this cuSOLVER has none");
    if (!S->params) SOLVER_TRY(S->CreateParams(&S->params), "cusolverDnCreateParams");
    const int R64 = 1, C64 = 5, dt = cx ? C64 : R64, jobvr = v ? 1 : 0;
    int64_t e = cx ? 2 : 1, ldvr = v ? n : 1;
    // real A: W holds (WR, WI), VR real, both in scratch until the pairs kernel
    double *wr = cx ? NULL : (double *)rgpu_cuda_scratch(c, (size_t)(2 * nb * n) * sizeof(double));
    double *vr = cx || !v ? NULL : (double *)rgpu_cuda_scratch(c, (size_t)(nb * n * n) * sizeof(double));
    int *dinfo = (int *)rgpu_cuda_scratch(c, sizeof(int));
    void *dwork = NULL;
    size_t dsz = 0, hsz = 0;
    rgpu_status st = (!cx && !wr) || (!cx && v && !vr) || !dinfo ? RGPU_ERR_NOMEM : RGPU_OK;
    if (st != RGPU_OK) rgpu_op_errf(err, errlen, "cuda linalg: out of memory for geev's workspace");
    if (st == RGPU_OK) {
        int s = S->Xgeev_bufferSize(S->handle, S->params, 0, jobvr, n, dt, a, n, dt, cx ? w : wr, dt, NULL, 1, dt,
                                    cx ? v : vr, ldvr, dt, &dsz, &hsz);
        if (s != 0) {
            rgpu_op_errf(err, errlen, "cuda linalg: cusolverDnXgeev_bufferSize failed (cusolverStatus %d)", s);
            st = RGPU_ERR_EXEC;
        }
    }
    if (st == RGPU_OK && hsz > S->hostbuf_len) {
        void *h = realloc(S->hostbuf, hsz);
        if (h) { S->hostbuf = h; S->hostbuf_len = hsz; }
        else { rgpu_op_errf(err, errlen, "cuda linalg: out of host memory for geev"); st = RGPU_ERR_NOMEM; }
    }
    if (st == RGPU_OK && !(dwork = rgpu_cuda_scratch(c, dsz ? dsz : 1))) {
        rgpu_op_errf(err, errlen, "cuda linalg: out of memory for geev's workspace");
        st = RGPU_ERR_NOMEM;
    }
    for (int64_t b = 0; b < nb && st == RGPU_OK; b++) {
        void *wb = cx ? (void *)(w + 2 * b * n) : (void *)(wr + 2 * b * n);
        void *vb = !v ? NULL : cx ? (void *)(v + 2 * b * n * n) : (void *)(vr + b * n * n);
        int s = S->Xgeev(S->handle, S->params, 0, jobvr, n, dt, a + e * b * n * n, n, dt, wb, dt, NULL, 1, dt, vb,
                         ldvr, dt, dwork, dsz, S->hostbuf, hsz, dinfo);
        if (s != 0) {
            rgpu_op_errf(err, errlen, "cuda linalg: cusolverDnXgeev failed (cusolverStatus %d)", s);
            st = RGPU_ERR_EXEC;
        }
    }
    if (st == RGPU_OK && !cx && nb > 0) {
        la_eig_pairs_kernel<<<la_blocks(nb), 256, 0, c->stream>>>(wr, vr, (long long)nb, (long long)n, w, v);
        cudaError_t ce = cudaGetLastError();
        if (ce != cudaSuccess) {
            rgpu_op_errf(err, errlen, "cuda linalg: eig pairs kernel: %s", cudaGetErrorString(ce));
            st = RGPU_ERR_EXEC;
        }
    }
    if (dwork) rgpu_cuda_scratch_free(c, dwork);
    if (wr) rgpu_cuda_scratch_free(c, wr);
    if (vr) rgpu_cuda_scratch_free(c, vr);
    if (dinfo) rgpu_cuda_scratch_free(c, dinfo);
    return st;
}

// cuSOLVER on the backend's stream, loaded on first use; a clear error when absent.
static rgpu_status solver_ready(rgpu_cuda_ctx *c, char *err, size_t errlen) {
    rgpu_cusolver *S = &c->solver;
    if (S->handle) return RGPU_OK;
    if (!S->tried) {
        char why[sizeof S->why];
        if (rgpu_cusolver_load(S, &c->blas, why, sizeof why)) {
            void *h = NULL;
            int s = S->Create(&h);
            if (s != 0) snprintf(why, sizeof why, "cusolverDnCreate failed (cusolverStatus %d)", s);
            else if ((s = S->SetStream(h, c->stream)) != 0) {
                snprintf(why, sizeof why, "cusolverDnSetStream failed (cusolverStatus %d)", s);
                S->Destroy(h);
            } else S->handle = h;
        }
        S->tried = true;
        snprintf(S->why, sizeof S->why, "%s", why);
    }
    RETURN_ERROR_IF(!S->handle, RGPU_ERR_UNSUPPORTED, "cuda backend: linalg needs cuSOLVER: %s", S->why);
    return RGPU_OK;
}

extern "C" rgpu_status rgpu_cuda_linalg_exec(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen) {
    switch (e->op) {
    case RGPU_OP_LINALG_CHOLESKY: case RGPU_OP_LINALG_LU_FACTOR: case RGPU_OP_LINALG_LU_SOLVE:
    case RGPU_OP_LINALG_SOLVE: case RGPU_OP_LINALG_INV: case RGPU_OP_LINALG_DET: case RGPU_OP_LINALG_SLOGDET:
    case RGPU_OP_CHOLESKY_SOLVE: case RGPU_OP_CHOLESKY_INVERSE: case RGPU_OP_GEQRF:
    case RGPU_OP_HOUSEHOLDER_PRODUCT: case RGPU_OP_ORMQR: case RGPU_OP_LINALG_QR: case RGPU_OP_LINALG_EIGH:
    case RGPU_OP_LINALG_SVD: case RGPU_OP_LINALG_EIG: case RGPU_OP_LINALG_LDL_FACTOR:
        FORWARD_IF_ERROR(solver_ready(c, err, errlen));
        break;
    default:
        break;
    }
    op_la_dev dev = { c, "cuda", g_alloc, g_release, g_pack, g_unpack, g_pack_i, g_unpack_i, g_eye,
                      g_getrf, g_getrs, g_potrf, g_potrs, g_trsm, g_lu_det, g_lu_perm,
                      g_crop, g_geqrf, g_orgqr, g_ormqr, g_syevd, g_gesvd, g_geev, g_sytrf, g_sytrs };
    return rgpu_op_la_exec(e, &dev, err, errlen);
}
