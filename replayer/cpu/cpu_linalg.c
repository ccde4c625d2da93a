/* cpu_linalg.c — the CPU linalg family: the steps of op/linalg.h (which
 * writes each op once) on LAPACK (OpenBLAS's, through LAPACKE's _work entry
 * points, which do not scan inputs for NaN) and the shared per-matrix math
 * of op/linalg.h. Matrices are factored one by one in batch order; LAPACK's
 * results do not depend on anything but the input and OpenBLAS's thread
 * count, which is fixed for a process. */
#include <lapacke.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_families.h"
#include "op/check.h"
#include "op/dtype.h"
#include "op/error.h"
#include "op/linalg.h"

/* Element offset of batch b (row-major over the batch dims) of a view whose
 * last two dims are the matrix. */
static int64_t batch_off(const rgpu_view *v, int64_t b)
{
    int64_t off = 0;
    for (int d = v->ndim - 3; d >= 0; d--) {
        int64_t s = v->sizes[d];
        off += (b % s) * v->strides[d];
        b /= s;
    }
    return off;
}

static int64_t nbatch(const rgpu_view *v)
{
    int64_t nb = 1;
    for (int d = 0; d < v->ndim - 2; d++) nb *= v->sizes[d];
    return nb;
}

static void *c_alloc(void *ctx, size_t n) { (void)ctx; return malloc(n); }
static void c_release(void *ctx, void *p) { (void)ctx; free(p); }

/* v's matrices to (to_ws) or from the column-major workspace ws. Complex
 * workspaces store (re, im) (conjugated with OP_LA_CONJ); real ones store x
 * and give (x, 0) into complex views; mask (op_la_masked) applies on the way
 * out. */
static void c_move(const rgpu_view *v, double *ws, int wsf, int mask, bool to_ws)
{
    int64_t nb = nbatch(v), r = v->sizes[v->ndim - 2], c = v->sizes[v->ndim - 1];
    int64_t s0 = v->strides[v->ndim - 2], s1 = v->strides[v->ndim - 1];
    size_t es = rgpu_dtype_size(v->dtype);
    bool cx = wsf & OP_LA_CX;
    double cj = wsf & OP_LA_CONJ ? -1.0 : 1.0;
    for (int64_t b = 0; b < nb; b++) {
        char *base = (char *)v->data + batch_off(v, b) * (int64_t)es;
        double *w = ws + (cx ? 2 : 1) * b * r * c;
        for (int64_t j = 0; j < c; j++)
            for (int64_t i = 0; i < r; i++) {
                char *p = base + (i * s0 + j * s1) * (int64_t)es;
                double *x = w + (cx ? 2 : 1) * (i + j * r);
                if (to_ws && cx) {
                    op_load_c128(p, v->dtype, &x[0], &x[1]);
                    x[1] *= cj;
                } else if (to_ws) {
                    x[0] = op_load_f64(p, v->dtype);
                } else {
                    op_store_c128(p, v->dtype, op_la_masked(x[0], i, j, mask),
                                  cx ? cj * op_la_masked_im(x[1], i, j, mask) : 0.0);
                }
            }
    }
}

static rgpu_status c_pack(void *ctx, const rgpu_view *v, double *ws, int wsf, char *err, size_t errlen)
{
    (void)ctx; (void)err; (void)errlen;
    c_move(v, ws, wsf, 0, true);
    return RGPU_OK;
}

static rgpu_status c_unpack(void *ctx, const double *ws, int wsf, const rgpu_view *v, int mask, char *err,
                            size_t errlen)
{
    (void)ctx; (void)err; (void)errlen;
    c_move(v, (double *)ws, wsf, mask, false);   /* reads ws only */
    return RGPU_OK;
}

static rgpu_status c_pack_i(void *ctx, const rgpu_view *v, int32_t *ws, char *err, size_t errlen)
{
    (void)ctx; (void)err; (void)errlen;
    int64_t nb = nbatch(v), r = v->sizes[v->ndim - 2], c = v->sizes[v->ndim - 1];
    int64_t s0 = v->strides[v->ndim - 2], s1 = v->strides[v->ndim - 1];
    for (int64_t b = 0; b < nb; b++) {
        const int32_t *base = (const int32_t *)v->data + batch_off(v, b);
        for (int64_t j = 0; j < c; j++)
            for (int64_t i = 0; i < r; i++) ws[b * r * c + i + j * r] = base[i * s0 + j * s1];
    }
    return RGPU_OK;
}

static rgpu_status c_unpack_i(void *ctx, const int32_t *ws, const rgpu_view *v, char *err, size_t errlen)
{
    (void)ctx; (void)err; (void)errlen;
    int64_t nb = nbatch(v), r = v->sizes[v->ndim - 2], c = v->sizes[v->ndim - 1];
    int64_t s0 = v->strides[v->ndim - 2], s1 = v->strides[v->ndim - 1];
    for (int64_t b = 0; b < nb; b++) {
        int32_t *base = (int32_t *)v->data + batch_off(v, b);
        for (int64_t j = 0; j < c; j++)
            for (int64_t i = 0; i < r; i++) base[i * s0 + j * s1] = ws[b * r * c + i + j * r];
    }
    return RGPU_OK;
}

static rgpu_status c_eye(void *ctx, bool cx, double *ws, int64_t nb, int64_t n, char *err, size_t errlen)
{
    (void)ctx; (void)err; (void)errlen;
    int64_t e = cx ? 2 : 1;
    memset(ws, 0, (size_t)(e * nb * n * n) * sizeof *ws);
    for (int64_t b = 0; b < nb; b++)
        for (int64_t i = 0; i < n; i++) ws[e * (b * n * n + i + i * n)] = 1.0;
    return RGPU_OK;
}

/* LAPACK's complex128 element */
#define ZP(p) ((lapack_complex_double *)(p))

/* A LAPACK argument error (info < 0) is a bug of ours, said as such. */
#define LAPACK_OK(call, what)                                                                   \
    do {                                                                                        \
        lapack_int r_ = (call);                                                                 \
        RETURN_ERROR_IF(r_ < 0, RGPU_ERR_BAD_ARG, "cpu linalg: LAPACK %s rejected argument %d", \
                        what, (int)-r_);                                                        \
    } while (0)

static rgpu_status c_getrf(void *ctx, bool cx, double *a, int64_t nb, int64_t m, int64_t n, int32_t *piv,
                           int32_t *info, char *err, size_t errlen)
{
    (void)ctx;
    int64_t k = m < n ? m : n, e = cx ? 2 : 1;
    for (int64_t b = 0; b < nb; b++) {
        info[b] = 0;
        if (k == 0) continue;
        double *ab = a + e * b * m * n;
        lapack_int r = cx ? LAPACKE_zgetrf_work(LAPACK_COL_MAJOR, (lapack_int)m, (lapack_int)n, ZP(ab), (lapack_int)m,
                                                piv + b * k)
                          : LAPACKE_dgetrf_work(LAPACK_COL_MAJOR, (lapack_int)m, (lapack_int)n, ab, (lapack_int)m,
                                                piv + b * k);
        LAPACK_OK(r, "getrf");
        info[b] = (int32_t)r;
    }
    return RGPU_OK;
}

/* Solves with a factor f (n, n) per matrix, in place on x (n, k): getrs with
 * f's LU and piv (lu; mode 'N', 'T' or 'C'), else potrs with its Cholesky
 * factor (mode 'L' or 'U'). */
static rgpu_status c_solve(bool cx, bool lu, char mode, const double *f, const int32_t *piv, double *x, int64_t nb,
                           int64_t n, int64_t k, char *err, size_t errlen)
{
    if (n == 0 || k == 0) return RGPU_OK;
    int64_t e = cx ? 2 : 1;
    lapack_int N = (lapack_int)n, K = (lapack_int)k;
    for (int64_t b = 0; b < nb; b++) {
        const double *fb = f + e * b * n * n;
        double *xb = x + e * b * n * k;
        if (lu && cx)
            LAPACK_OK(LAPACKE_zgetrs_work(LAPACK_COL_MAJOR, mode, N, K, ZP(fb), N, piv + b * n, ZP(xb), N), "zgetrs");
        else if (lu)
            LAPACK_OK(LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, mode, N, K, fb, N, piv + b * n, xb, N), "dgetrs");
        else if (cx)
            LAPACK_OK(LAPACKE_zpotrs_work(LAPACK_COL_MAJOR, mode, N, K, ZP(fb), N, ZP(xb), N), "zpotrs");
        else
            LAPACK_OK(LAPACKE_dpotrs_work(LAPACK_COL_MAJOR, mode, N, K, fb, N, xb, N), "dpotrs");
    }
    return RGPU_OK;
}

static rgpu_status c_getrs(void *ctx, bool cx, const double *lu, const int32_t *piv, double *x, int64_t nb, int64_t n,
                           int64_t k, bool trans, char *err, size_t errlen)
{
    (void)ctx;
    return c_solve(cx, true, trans ? (cx ? 'C' : 'T') : 'N', lu, piv, x, nb, n, k, err, errlen);
}

static rgpu_status c_potrf(void *ctx, bool cx, double *a, int64_t nb, int64_t n, bool lower, int32_t *info,
                           char *err, size_t errlen)
{
    (void)ctx;
    int64_t e = cx ? 2 : 1;
    for (int64_t b = 0; b < nb; b++) {
        info[b] = 0;
        if (n == 0) continue;
        double *ab = a + e * b * n * n;
        char uplo = lower ? 'L' : 'U';
        lapack_int r = cx ? LAPACKE_zpotrf_work(LAPACK_COL_MAJOR, uplo, (lapack_int)n, ZP(ab), (lapack_int)n)
                          : LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, uplo, (lapack_int)n, ab, (lapack_int)n);
        LAPACK_OK(r, "potrf");
        info[b] = (int32_t)r;
    }
    return RGPU_OK;
}

static rgpu_status c_potrs(void *ctx, bool cx, const double *l, double *x, int64_t nb, int64_t n, int64_t k,
                           bool lower, char *err, size_t errlen)
{
    (void)ctx;
    return c_solve(cx, false, lower ? 'L' : 'U', l, NULL, x, nb, n, k, err, errlen);
}

static rgpu_status c_trsm(void *ctx, bool cx, const double *a, double *x, int64_t nb, int64_t n, int64_t k,
                          bool upper, bool trans, bool unit, char *err, size_t errlen)
{
    (void)ctx; (void)err; (void)errlen;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t j = 0; j < k; j++) {
            if (cx) op_la_trsv_c(a + 2 * b * n * n, n, x + 2 * (b * n * k + j * n), n, upper, trans, unit);
            else op_la_trsv(a + b * n * n, n, x + b * n * k + j * n, n, upper, trans, unit);
        }
    return RGPU_OK;
}

static rgpu_status c_lu_det(void *ctx, bool cx, const double *lu, const int32_t *piv, int64_t nb, int64_t n,
                            double *d, double *lg, char *err, size_t errlen)
{
    (void)ctx; (void)err; (void)errlen;
    for (int64_t b = 0; b < nb; b++) {
        if (cx) op_la_lu_det1_c(lu + 2 * b * n * n, piv + b * n, n, d + 2 * b, lg ? lg + b : NULL);
        else op_la_lu_det1(lu + b * n * n, piv + b * n, n, d + b, lg ? lg + b : NULL);
    }
    return RGPU_OK;
}

static rgpu_status c_lu_perm(void *ctx, const int32_t *piv, int64_t nb, int64_t m, int64_t k, double *p,
                             char *err, size_t errlen)
{
    (void)ctx; (void)err; (void)errlen;
    for (int64_t b = 0; b < nb; b++) op_la_perm1(piv + b * k, m, k, p + b * m * m);
    return RGPU_OK;
}

static rgpu_status c_crop(void *ctx, bool cx, const double *src, int64_t sr, int64_t sc, double *dst, int64_t dr,
                          int64_t dc, int64_t nb, char *err, size_t errlen)
{
    (void)ctx; (void)err; (void)errlen;
    int64_t e = cx ? 2 : 1;
    for (int64_t b = 0; b < nb; b++)
        for (int64_t j = 0; j < dc; j++)
            for (int64_t i = 0; i < dr; i++)
                for (int64_t h = 0; h < e; h++)
                    dst[e * (b * dr * dc + i + j * dr) + h] =
                        i < sr && j < sc ? src[e * (b * sr * sc + i + j * sr) + h] : 0.0;
    return RGPU_OK;
}

static rgpu_status c_geqrf(void *ctx, bool cx, double *a, int64_t nb, int64_t m, int64_t n, double *tau, char *err,
                           size_t errlen)
{
    (void)ctx;
    int64_t k = m < n ? m : n, e = cx ? 2 : 1;
    if (k == 0) return RGPU_OK;
    for (int64_t b = 0; b < nb; b++) {
        double *ab = a + e * b * m * n, *tb = tau + e * b * k;
        if (cx)
            LAPACK_OK(LAPACKE_zgeqrf(LAPACK_COL_MAJOR, (lapack_int)m, (lapack_int)n, ZP(ab), (lapack_int)m, ZP(tb)),
                      "zgeqrf");
        else
            LAPACK_OK(LAPACKE_dgeqrf(LAPACK_COL_MAJOR, (lapack_int)m, (lapack_int)n, ab, (lapack_int)m, tb), "dgeqrf");
    }
    return RGPU_OK;
}

static rgpu_status c_orgqr(void *ctx, bool cx, double *a, int64_t nb, int64_t m, int64_t n, int64_t k,
                           const double *tau, char *err, size_t errlen)
{
    (void)ctx;
    if (m == 0 || n == 0) return RGPU_OK;
    int64_t e = cx ? 2 : 1;
    for (int64_t b = 0; b < nb; b++) {
        double *ab = a + e * b * m * n;
        const double *tb = tau + e * b * k;
        if (cx)
            LAPACK_OK(LAPACKE_zungqr(LAPACK_COL_MAJOR, (lapack_int)m, (lapack_int)n, (lapack_int)k, ZP(ab),
                                     (lapack_int)m, ZP(tb)), "zungqr");
        else
            LAPACK_OK(LAPACKE_dorgqr(LAPACK_COL_MAJOR, (lapack_int)m, (lapack_int)n, (lapack_int)k, ab, (lapack_int)m,
                                     tb), "dorgqr");
    }
    return RGPU_OK;
}

static rgpu_status c_ormqr(void *ctx, bool cx, const double *a, const double *tau, double *c, int64_t nb, int64_t m,
                           int64_t n, int64_t k, bool left, bool trans, char *err, size_t errlen)
{
    (void)ctx;
    int64_t r = left ? m : n, e = cx ? 2 : 1;
    for (int64_t b = 0; b < nb; b++) {
        const double *ab = a + e * b * r * k, *tb = tau + e * b * k;
        double *cb = c + e * b * m * n;
        if (cx)
            LAPACK_OK(LAPACKE_zunmqr(LAPACK_COL_MAJOR, left ? 'L' : 'R', trans ? 'C' : 'N', (lapack_int)m,
                                     (lapack_int)n, (lapack_int)k, ZP(ab), (lapack_int)r, ZP(tb), ZP(cb),
                                     (lapack_int)m), "zunmqr");
        else
            LAPACK_OK(LAPACKE_dormqr(LAPACK_COL_MAJOR, left ? 'L' : 'R', trans ? 'T' : 'N', (lapack_int)m,
                                     (lapack_int)n, (lapack_int)k, ab, (lapack_int)r, tb, cb, (lapack_int)m), "dormqr");
    }
    return RGPU_OK;
}

static rgpu_status c_syevd(void *ctx, bool cx, double *a, int64_t nb, int64_t n, bool lower, bool v, double *w,
                           char *err, size_t errlen)
{
    (void)ctx;
    for (int64_t b = 0; b < nb; b++) {
        lapack_int r = cx ? LAPACKE_zheevd(LAPACK_COL_MAJOR, v ? 'V' : 'N', lower ? 'L' : 'U', (lapack_int)n,
                                           ZP(a + 2 * b * n * n), (lapack_int)n, w + b * n)
                          : LAPACKE_dsyevd(LAPACK_COL_MAJOR, v ? 'V' : 'N', lower ? 'L' : 'U', (lapack_int)n,
                                           a + b * n * n, (lapack_int)n, w + b * n);
        LAPACK_OK(r, "syevd/heevd");
        RETURN_ERROR_IF(r > 0, RGPU_ERR_EXEC, "linalg.eigh: The algorithm failed to converge (batch element %lld)",
                        (long long)b);
    }
    return RGPU_OK;
}

/* gesdd, ATen's CPU driver */
static rgpu_status c_gesvd(void *ctx, bool cx, double *a, int64_t nb, int64_t m, int64_t n, double *s, double *u,
                           double *vt, bool full, bool uv, char *err, size_t errlen)
{
    (void)ctx;
    int64_t uc = full ? m : n, e = cx ? 2 : 1;
    double dummy[2] = { 0, 0 };
    char job = !uv ? 'N' : full ? 'A' : 'S';
    for (int64_t b = 0; b < nb; b++) {
        double *ab = a + e * b * m * n, *ub = uv ? u + e * b * m * uc : dummy, *vb = uv ? vt + e * b * n * n : dummy;
        lapack_int r = cx ? LAPACKE_zgesdd(LAPACK_COL_MAJOR, job, (lapack_int)m, (lapack_int)n, ZP(ab), (lapack_int)m,
                                           s + b * n, ZP(ub), (lapack_int)m, ZP(vb), (lapack_int)(n ? n : 1))
                          : LAPACKE_dgesdd(LAPACK_COL_MAJOR, job, (lapack_int)m, (lapack_int)n, ab, (lapack_int)m,
                                           s + b * n, ub, (lapack_int)m, vb, (lapack_int)(n ? n : 1));
        LAPACK_OK(r, "gesdd");
        RETURN_ERROR_IF(r > 0, RGPU_ERR_EXEC, "linalg.svd: The algorithm failed to converge (batch element %lld)",
                        (long long)b);
    }
    return RGPU_OK;
}

/* geev, ATen's CPU driver; a real A's pairs made complex as ATen does */
static rgpu_status c_geev(void *ctx, bool cx, double *a, int64_t nb, int64_t n, double *w, double *v, char *err,
                          size_t errlen)
{
    (void)ctx;
    double dummy[2] = { 0, 0 }, *tmp = NULL;
    if (!cx) {
        tmp = malloc((size_t)(2 * n + (v ? n * n : 0)) * sizeof(double));
        RETURN_ERROR_IF(!tmp, RGPU_ERR_NOMEM, "cpu linalg: out of memory for geev's workspace");
    }
    rgpu_status st = RGPU_OK;
    for (int64_t b = 0; b < nb && st == RGPU_OK; b++) {
        lapack_int r;
        if (cx) {
            r = LAPACKE_zgeev(LAPACK_COL_MAJOR, 'N', v ? 'V' : 'N', (lapack_int)n, ZP(a + 2 * b * n * n),
                              (lapack_int)n, ZP(w + 2 * b * n), ZP(dummy), 1, ZP(v ? v + 2 * b * n * n : dummy),
                              (lapack_int)(v ? n : 1));
        } else {
            double *wr = tmp, *wi = tmp + n, *vr = v ? tmp + 2 * n : dummy;
            r = LAPACKE_dgeev(LAPACK_COL_MAJOR, 'N', v ? 'V' : 'N', (lapack_int)n, a + b * n * n, (lapack_int)n, wr,
                              wi, dummy, 1, vr, (lapack_int)(v ? n : 1));
            if (r == 0) op_la_eig_pairs(wr, wi, v ? vr : NULL, n, w + 2 * b * n, v ? v + 2 * b * n * n : NULL);
        }
        if (r < 0) {
            rgpu_op_errf(err, errlen, "cpu linalg: LAPACK geev rejected argument %d", (int)-r);
            st = RGPU_ERR_BAD_ARG;
        } else if (r > 0) {
            rgpu_op_errf(err, errlen, "linalg.eig: The algorithm failed to converge because the input matrix is "
                         "ill-conditioned or has too many repeated eigenvalues (error code: %d)", (int)r);
            st = RGPU_ERR_EXEC;
        }
    }
    free(tmp);
    return st;
}

/* sytrf/hetrf 'L', ATen's CPU driver */
static rgpu_status c_sytrf(void *ctx, bool cx, bool herm, double *a, int64_t nb, int64_t n, int32_t *piv,
                           int32_t *info, char *err, size_t errlen)
{
    (void)ctx;
    for (int64_t b = 0; b < nb; b++) {
        info[b] = 0;
        if (n == 0) continue;
        lapack_int r;
        if (cx && herm)
            r = LAPACKE_zhetrf(LAPACK_COL_MAJOR, 'L', (lapack_int)n, ZP(a + 2 * b * n * n), (lapack_int)n, piv + b * n);
        else if (cx)
            r = LAPACKE_zsytrf(LAPACK_COL_MAJOR, 'L', (lapack_int)n, ZP(a + 2 * b * n * n), (lapack_int)n, piv + b * n);
        else
            r = LAPACKE_dsytrf(LAPACK_COL_MAJOR, 'L', (lapack_int)n, a + b * n * n, (lapack_int)n, piv + b * n);
        LAPACK_OK(r, "sytrf");
        info[b] = (int32_t)r;
    }
    return RGPU_OK;
}

static rgpu_status c_sytrs(void *ctx, bool cx, bool herm, const double *ld, const int32_t *piv, double *x,
                           int64_t nb, int64_t n, int64_t k, char *err, size_t errlen)
{
    (void)ctx;
    if (n == 0 || k == 0) return RGPU_OK;
    for (int64_t b = 0; b < nb; b++) {
        lapack_int r;
        if (cx && herm)
            r = LAPACKE_zhetrs(LAPACK_COL_MAJOR, 'L', (lapack_int)n, (lapack_int)k, ZP(ld + 2 * b * n * n),
                               (lapack_int)n, piv + b * n, ZP(x + 2 * b * n * k), (lapack_int)n);
        else if (cx)
            r = LAPACKE_zsytrs(LAPACK_COL_MAJOR, 'L', (lapack_int)n, (lapack_int)k, ZP(ld + 2 * b * n * n),
                               (lapack_int)n, piv + b * n, ZP(x + 2 * b * n * k), (lapack_int)n);
        else
            r = LAPACKE_dsytrs(LAPACK_COL_MAJOR, 'L', (lapack_int)n, (lapack_int)k, ld + b * n * n, (lapack_int)n,
                               piv + b * n, x + b * n * k, (lapack_int)n);
        LAPACK_OK(r, "sytrs");
    }
    return RGPU_OK;
}

static const op_la_dev CPU_LA = {
    NULL, "cpu", c_alloc, c_release, c_pack, c_unpack, c_pack_i, c_unpack_i, c_eye,
    c_getrf, c_getrs, c_potrf, c_potrs, c_trsm, c_lu_det, c_lu_perm,
    c_crop, c_geqrf, c_orgqr, c_ormqr, c_syevd, c_gesvd, c_geev, c_sytrf, c_sytrs,
};

rgpu_status rgpu_cpu_linalg_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    LAPACKE_set_nancheck(0);   /* NaNs go through, as in ATen's LAPACK calls */
    return rgpu_op_la_exec(e, &CPU_LA, err, errlen);
}
