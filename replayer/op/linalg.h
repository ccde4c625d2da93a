/* op/linalg.h — what the linalg family means, for both backends
 * (cpu/cpu_linalg.c, cuda/linalg.cu).
 *
 * Every op of the family is written once, in op/linalg.c, as a sequence of
 * steps over column-major f64 workspaces: pack the (broadcast) input
 * matrices, factor or solve, unpack into the outputs through their strides.
 * A backend supplies only the steps (op_la_dev): LAPACK on the CPU, cuSOLVER
 * and small kernels on CUDA. f32 inputs are computed in f64 and rounded once
 * when stored; complex64/complex128 inputs in complex128 workspaces (cx:
 * elements are (re, im) pairs of doubles, LAPACK's z* layout).
 *
 * Workspace layout: nb matrices of r x c, matrix b at ws + b*r*c, element
 * (i, j) at i + j*r (LAPACK's column-major, lda = r); for a complex
 * workspace, those are indexes of (re, im) pairs. Pivots and info are
 * int32 workspaces, nb*k and nb long; pivots 1-based as LAPACK's.
 *
 * Steps given cx run on complex workspaces (the real ones they also take,
 * eigenvalues, singular values, log|det|, stay real). Transposes: getrs'
 * and ormqr's trans is the conjugate transpose (LAPACK 'C'), trsm's the
 * plain one (ATen's triangular_solve and the left=False transposes). */
#ifndef RGPU_OP_LINALG_H
#define RGPU_OP_LINALG_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How unpack masks the matrix it stores. */
enum { OP_LA_FULL, OP_LA_LOWER, OP_LA_UPPER, OP_LA_UNIT_LOWER };

/* pack/unpack's ws flags: the workspace is complex; conjugate on the way. */
enum { OP_LA_CX = 1, OP_LA_CONJ = 2 };

/* A backend's steps. Views given to pack/unpack have their batch dims
 * already broadcast (stride 0) and end in two matrix dims (r, c); nb is the
 * product of the batch dims. Each returns RGPU_OK or writes a one-line
 * reason into err. */
typedef struct op_la_dev {
    void *ctx;
    const char *name;                                   /* "cpu", "cuda": for messages */
    void *(*alloc)(void *ctx, size_t nbytes);           /* scratch; NULL when out of memory */
    void (*release)(void *ctx, void *p);
    rgpu_status (*pack)(void *ctx, const rgpu_view *v, double *ws, int wsf, char *err, size_t errlen);
    rgpu_status (*unpack)(void *ctx, const double *ws, int wsf, const rgpu_view *v, int mask, char *err,
                          size_t errlen);
    rgpu_status (*pack_i)(void *ctx, const rgpu_view *v, int32_t *ws, char *err, size_t errlen);
    rgpu_status (*unpack_i)(void *ctx, const int32_t *ws, const rgpu_view *v, char *err, size_t errlen);
    rgpu_status (*eye)(void *ctx, bool cx, double *ws, int64_t nb, int64_t n, char *err, size_t errlen);
    /* LU with partial pivoting of nb m x n matrices: piv nb*min(m,n), info nb */
    rgpu_status (*getrf)(void *ctx, bool cx, double *a, int64_t nb, int64_t m, int64_t n, int32_t *piv,
                         int32_t *info, char *err, size_t errlen);
    /* op(A) X = B for nb LU-factored n x n A, B n x k (trans: op = conjugate transpose) */
    rgpu_status (*getrs)(void *ctx, bool cx, const double *lu, const int32_t *piv, double *b, int64_t nb, int64_t n,
                         int64_t k, bool trans, char *err, size_t errlen);
    /* Cholesky of nb n x n matrices (the lower or upper triangle) */
    rgpu_status (*potrf)(void *ctx, bool cx, double *a, int64_t nb, int64_t n, bool lower, int32_t *info,
                         char *err, size_t errlen);
    rgpu_status (*potrs)(void *ctx, bool cx, const double *l, double *b, int64_t nb, int64_t n, int64_t k,
                         bool lower, char *err, size_t errlen);
    /* op(A) X = B, A n x n triangular (only its triangle read), B n x k; op = plain transpose */
    rgpu_status (*trsm)(void *ctx, bool cx, const double *a, double *b, int64_t nb, int64_t n, int64_t k,
                        bool upper, bool trans, bool unit, char *err, size_t errlen);
    /* From an LU: d[b] = det (lg NULL), or d[b] = sign and lg[b] = log|det| (d complex when cx, lg real) */
    rgpu_status (*lu_det)(void *ctx, bool cx, const double *lu, const int32_t *piv, int64_t nb, int64_t n,
                          double *d, double *lg, char *err, size_t errlen);
    /* The m x m permutation matrix P of A = P L U from k pivots (a real workspace) */
    rgpu_status (*lu_perm)(void *ctx, const int32_t *piv, int64_t nb, int64_t m, int64_t k, double *p,
                           char *err, size_t errlen);
    /* dst (nb of dr x dc) := the top-left block of src (nb of sr x sc), zeros elsewhere */
    rgpu_status (*crop)(void *ctx, bool cx, const double *src, int64_t sr, int64_t sc, double *dst, int64_t dr,
                        int64_t dc, int64_t nb, char *err, size_t errlen);
    /* QR: Householder reflectors of nb m x n matrices, tau nb*min(m,n) */
    rgpu_status (*geqrf)(void *ctx, bool cx, double *a, int64_t nb, int64_t m, int64_t n, double *tau, char *err,
                         size_t errlen);
    /* The first n columns of Q = H_1 ... H_k, in place of the m x n reflectors (tau nb*k) */
    rgpu_status (*orgqr)(void *ctx, bool cx, double *a, int64_t nb, int64_t m, int64_t n, int64_t k,
                         const double *tau, char *err, size_t errlen);
    /* c (m x n) := op(Q) c (left) or c op(Q), Q from the k reflectors of a (r x k, r = m or n; tau nb*k) */
    rgpu_status (*ormqr)(void *ctx, bool cx, const double *a, const double *tau, double *c, int64_t nb, int64_t m,
                         int64_t n, int64_t k, bool left, bool trans, char *err, size_t errlen);
    /* Symmetric (Hermitian) eigendecomposition of nb n x n (one triangle read): w nb*n ascending (real),
     * a := eigenvectors when v */
    rgpu_status (*syevd)(void *ctx, bool cx, double *a, int64_t nb, int64_t n, bool lower, bool v, double *w,
                         char *err, size_t errlen);
    /* SVD of nb m x n, m >= n: s nb*n descending (real); when uv, u nb*(m x (full ? m : n)), vt nb*(n x n) */
    rgpu_status (*gesvd)(void *ctx, bool cx, double *a, int64_t nb, int64_t m, int64_t n, double *s, double *u,
                         double *vt, bool full, bool uv, char *err, size_t errlen);
    /* Eigenvalues w (complex, nb*n) and, when v, right eigenvectors v (complex, nb*(n x n)) of nb general
     * n x n a (real or complex by cx), as geev gives them; a real a's pairs as op_la_eig_pairs builds them */
    rgpu_status (*geev)(void *ctx, bool cx, double *a, int64_t nb, int64_t n, double *w, double *v, char *err,
                        size_t errlen);
    /* LDL^T (LDL^H when herm and cx) of the lower triangles of nb n x n a, as sytrf/hetrf 'L': piv nb*n, info nb */
    rgpu_status (*sytrf)(void *ctx, bool cx, bool herm, double *a, int64_t nb, int64_t n, int32_t *piv,
                         int32_t *info, char *err, size_t errlen);
    /* A X = B from sytrf's factors (ld, piv), B n x k */
    rgpu_status (*sytrs)(void *ctx, bool cx, bool herm, const double *ld, const int32_t *piv, double *b, int64_t nb,
                         int64_t n, int64_t k, char *err, size_t errlen);
} op_la_dev;

/* Runs a LINALG-family record on dev's steps. */
rgpu_status rgpu_op_la_exec(const rgpu_exec *e, const op_la_dev *dev, char *err, size_t errlen);

/* ---------------------------------------------------------------------------
 * The math both backends run per matrix (host and device) */

/* Solve op(A) x = b in place for one column b (stride 1), A n x n
 * column-major (lda), triangular. Substitution in a fixed order. */
OP_FN void op_la_trsv(const double *a, int64_t lda, double *b, int64_t n, bool upper, bool trans, bool unit)
{
    /* op(A) is lower when (lower and not trans) or (upper and trans): forward */
    bool fwd = upper == trans;
    for (int64_t t = 0; t < n; t++) {
        int64_t i = fwd ? t : n - 1 - t;
        double s = b[i];
        if (fwd) {
            for (int64_t j = 0; j < i; j++) s -= (trans ? a[j + i * lda] : a[i + j * lda]) * b[j];
        } else {
            for (int64_t j = i + 1; j < n; j++) s -= (trans ? a[j + i * lda] : a[i + j * lda]) * b[j];
        }
        b[i] = unit ? s : s / a[i + i * lda];
    }
}

/* Complex a*b into (*re, *im). */
OP_FN void op_la_cmul(double ar, double ai, double br, double bi, double *re, double *im)
{
    *re = ar * br - ai * bi;
    *im = ar * bi + ai * br;
}

/* Complex a/b (Smith's scaling, as C99's and ATen's complex division). */
OP_FN void op_la_cdiv(double ar, double ai, double br, double bi, double *re, double *im)
{
    if (fabs(br) >= fabs(bi)) {
        double r = bi / br, d = br + bi * r;
        *re = (ar + ai * r) / d;
        *im = (ai - ar * r) / d;
    } else {
        double r = br / bi, d = bi + br * r;
        *re = (ar * r + ai) / d;
        *im = (ai * r - ar) / d;
    }
}

/* op_la_trsv on a complex A and b ((re, im) pairs), op = plain transpose. */
OP_FN void op_la_trsv_c(const double *a, int64_t lda, double *b, int64_t n, bool upper, bool trans, bool unit)
{
    bool fwd = upper == trans;
    for (int64_t t = 0; t < n; t++) {
        int64_t i = fwd ? t : n - 1 - t;
        double sr = b[2 * i], si = b[2 * i + 1];
        int64_t j0 = fwd ? 0 : i + 1, j1 = fwd ? i : n;
        for (int64_t j = j0; j < j1; j++) {
            int64_t q = trans ? j + i * lda : i + j * lda;
            double pr, pi;
            op_la_cmul(a[2 * q], a[2 * q + 1], b[2 * j], b[2 * j + 1], &pr, &pi);
            sr -= pr;
            si -= pi;
        }
        if (unit) {
            b[2 * i] = sr;
            b[2 * i + 1] = si;
        } else {
            int64_t q = i + i * lda;
            op_la_cdiv(sr, si, a[2 * q], a[2 * q + 1], &b[2 * i], &b[2 * i + 1]);
        }
    }
}

/* op_la_lu_det1 of a complex LU: d = det (re, im), or d = sign (re, im),
 * the product of u/|u| (0 when a u is 0, as ATen's sgn), and lg = log|det|. */
OP_FN void op_la_lu_det1_c(const double *lu, const int32_t *piv, int64_t n, double *d, double *lg)
{
    double pr = 1.0, pi = 0.0, logs = 0.0;
    bool neg = false;
    for (int64_t i = 0; i < n; i++) {
        double ur = lu[2 * (i + i * n)], ui = lu[2 * (i + i * n) + 1];
        if (piv[i] != i + 1) neg = !neg;
        if (lg) {
            double a = hypot(ur, ui);
            logs += log(a);
            if (a == 0) { ur = 0.0; ui = 0.0; } else { ur /= a; ui /= a; }
        }
        double r, m;
        op_la_cmul(pr, pi, ur, ui, &r, &m);
        pr = r;
        pi = m;
    }
    d[0] = neg ? -pr : pr;
    d[1] = neg ? -pi : pi;
    if (lg) lg[0] = logs;
}

/* Complex eigenvalues w and eigenvectors v (NULL: none) of one real n x n
 * matrix from real geev's wr, wi and vr (column-major, ld n): a conjugate
 * pair j, j+1 (wi[j] != 0) has vectors vr[:, j] +- i vr[:, j+1]. */
OP_FN void op_la_eig_pairs(const double *wr, const double *wi, const double *vr, int64_t n, double *w, double *v)
{
    for (int64_t j = 0; j < n; j++) {
        w[2 * j] = wr[j];
        w[2 * j + 1] = wi[j];
    }
    if (!v) return;
    for (int64_t j = 0; j < n; j++) {
        bool pair = wi[j] != 0.0 && j + 1 < n;
        for (int64_t i = 0; i < n; i++) {
            double re = vr[i + j * n], im = pair ? vr[i + (j + 1) * n] : 0.0;
            v[2 * (i + j * n)] = re;
            v[2 * (i + j * n) + 1] = im;
            if (pair) {
                v[2 * (i + (j + 1) * n)] = re;
                v[2 * (i + (j + 1) * n) + 1] = -im;
            }
        }
        if (pair) j++;
    }
}

/* Element i of a workspace column as (re, im): real workspaces have im 0. */
OP_FN void op_la_get(const double *p, int64_t i, bool cx, double *re, double *im)
{
    if (cx) { *re = p[2 * i]; *im = p[2 * i + 1]; }
    else { *re = p[i]; *im = 0.0; }
}

OP_FN void op_la_put(double *p, int64_t i, bool cx, double re, double im)
{
    if (cx) { p[2 * i] = re; p[2 * i + 1] = im; }
    else p[i] = re;
}

OP_FN void op_la_swap(double *b, int64_t i, int64_t j, bool cx)
{
    if (i == j) return;
    int64_t e = cx ? 2 : 1;
    for (int64_t h = 0; h < e; h++) {
        double t = b[e * i + h];
        b[e * i + h] = b[e * j + h];
        b[e * j + h] = t;
    }
}

/* A x = b in place for one column b (stride 1) from sytrf/hetrf 'L''s
 * factors of one n x n matrix (ld column-major, lda n; ipiv 1-based, < 0
 * for 2x2 blocks): LAPACK's sytrs/hetrs steps, L D y = b, then L^T x = y
 * (L^H when herm: conjugates where hetrs takes them, D's diagonal real). */
OP_FN void op_la_sytrs1(const double *a, const int32_t *ipiv, int64_t n, double *b, bool cx, bool herm)
{
    double cj = herm && cx ? -1.0 : 1.0;
    int64_t k = 0;
    while (k < n) {
        double br, bi, ar, ai, pr, pi, xr, xi;
        if (ipiv[k] > 0) {
            op_la_swap(b, k, (int64_t)ipiv[k] - 1, cx);
            op_la_get(b, k, cx, &br, &bi);
            for (int64_t i = k + 1; i < n; i++) {
                op_la_get(a, i + k * n, cx, &ar, &ai);
                op_la_cmul(ar, ai, br, bi, &pr, &pi);
                op_la_get(b, i, cx, &xr, &xi);
                op_la_put(b, i, cx, xr - pr, xi - pi);
            }
            op_la_get(a, k + k * n, cx, &ar, &ai);
            if (herm) ai = 0.0;
            op_la_cdiv(br, bi, ar, ai, &xr, &xi);
            op_la_put(b, k, cx, xr, xi);
            k += 1;
        } else {
            op_la_swap(b, k + 1, (int64_t)-ipiv[k] - 1, cx);
            double b0r, b0i, b1r, b1i;
            op_la_get(b, k, cx, &b0r, &b0i);
            op_la_get(b, k + 1, cx, &b1r, &b1i);
            for (int64_t i = k + 2; i < n; i++) {
                double qr, qi;
                op_la_get(a, i + k * n, cx, &ar, &ai);
                op_la_cmul(ar, ai, b0r, b0i, &pr, &pi);
                op_la_get(a, i + (k + 1) * n, cx, &ar, &ai);
                op_la_cmul(ar, ai, b1r, b1i, &qr, &qi);
                op_la_get(b, i, cx, &xr, &xi);
                op_la_put(b, i, cx, xr - pr - qr, xi - pi - qi);
            }
            double kr, ki, dr, di, er, ei, m1r, m1i, m0r, m0i, dnr, dni, tr, ti;
            op_la_get(a, k + 1 + k * n, cx, &kr, &ki);                     /* akm1k */
            op_la_get(a, k + k * n, cx, &dr, &di);
            op_la_cdiv(dr, di, kr, cj * ki, &m1r, &m1i);                     /* akm1 = a(k,k) / conj?(akm1k) */
            op_la_get(a, k + 1 + (k + 1) * n, cx, &er, &ei);
            op_la_cdiv(er, ei, kr, ki, &m0r, &m0i);                          /* ak = a(k+1,k+1) / akm1k */
            op_la_cmul(m1r, m1i, m0r, m0i, &dnr, &dni);
            dnr -= 1.0;                                                      /* denom = akm1 * ak - 1 */
            double c0r, c0i, c1r, c1i;
            op_la_cdiv(b0r, b0i, kr, cj * ki, &c0r, &c0i);                   /* bkm1 */
            op_la_cdiv(b1r, b1i, kr, ki, &c1r, &c1i);                        /* bk */
            op_la_cmul(m0r, m0i, c0r, c0i, &tr, &ti);
            op_la_cdiv(tr - c1r, ti - c1i, dnr, dni, &xr, &xi);
            op_la_put(b, k, cx, xr, xi);
            op_la_cmul(m1r, m1i, c1r, c1i, &tr, &ti);
            op_la_cdiv(tr - c0r, ti - c0i, dnr, dni, &xr, &xi);
            op_la_put(b, k + 1, cx, xr, xi);
            k += 2;
        }
    }
    k = n - 1;
    while (k >= 0) {
        bool two = ipiv[k] <= 0;
        for (int64_t c = 0; c < (two ? 2 : 1); c++) {
            int64_t col = k - c;                 /* rows k, then k-1 of a 2x2 block */
            double sr, si, ar, ai, xr, xi, pr, pi;
            op_la_get(b, col, cx, &sr, &si);
            for (int64_t i = k + 1; i < n; i++) {
                op_la_get(a, i + col * n, cx, &ar, &ai);
                op_la_get(b, i, cx, &xr, &xi);
                op_la_cmul(ar, cj * ai, xr, xi, &pr, &pi);
                sr -= pr;
                si -= pi;
            }
            op_la_put(b, col, cx, sr, si);
        }
        op_la_swap(b, k, (int64_t)(two ? -ipiv[k] : ipiv[k]) - 1, cx);
        k -= two ? 2 : 1;
    }
}

/* det, or sign and log|det|, of one n x n LU (lda n) with its pivots. */
OP_FN void op_la_lu_det1(const double *lu, const int32_t *piv, int64_t n, double *d, double *lg)
{
    double sign = 1.0, prod = 1.0, logs = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double u = lu[i + i * n];
        if (piv[i] != i + 1) sign = -sign;
        if (lg) {
            if (u < 0) sign = -sign;
            else if (!(u > 0) && u == 0) sign = 0.0;
            logs += log(fabs(u));
        } else {
            prod *= u;
        }
    }
    if (lg) {
        if (sign != sign) sign = 0.0;
        d[0] = sign;
        lg[0] = logs;
    } else {
        d[0] = sign * prod;
    }
}

/* The m x m permutation matrix of k LAPACK pivots (p column-major): the
 * identity with columns i and piv[i]-1 swapped in pivot order, so
 * P[perm[i], i] = 1 where perm is 0..m-1 with the rows swapped as LAPACK
 * swapped them. Out-of-range pivots are ignored. */
OP_FN void op_la_perm1(const int32_t *piv, int64_t m, int64_t k, double *p)
{
    for (int64_t i = 0; i < m * m; i++) p[i] = 0.0;
    for (int64_t i = 0; i < m; i++) p[i + i * m] = 1.0;
    for (int64_t i = 0; i < k; i++) {
        int64_t j = (int64_t)piv[i] - 1;
        if (j < 0 || j >= m || j == i) continue;
        for (int64_t r = 0; r < m; r++) {
            double t = p[r + i * m];
            p[r + i * m] = p[r + j * m];
            p[r + j * m] = t;
        }
    }
}

/* Whether unpack keeps element (i, j) under mask, and the value it stores. */
OP_FN double op_la_masked(double v, int64_t i, int64_t j, int mask)
{
    switch (mask) {
    case OP_LA_LOWER:      return i >= j ? v : 0.0;
    case OP_LA_UPPER:      return i <= j ? v : 0.0;
    case OP_LA_UNIT_LOWER: return i > j ? v : i == j ? 1.0 : 0.0;
    default:               return v;
    }
}

/* op_la_masked for the imaginary part: the unit diagonal is 1 + 0i. */
OP_FN double op_la_masked_im(double v, int64_t i, int64_t j, int mask)
{
    return mask == OP_LA_UNIT_LOWER && i == j ? 0.0 : op_la_masked(v, i, j, mask);
}

#ifdef __cplusplus
}
#endif

#endif
