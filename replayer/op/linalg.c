/* linalg.c — the linalg family's ops, once for both backends, as steps of
 * op_la_dev (op/linalg.h). ATen's semantics:
 *   linalg_cholesky_ex     L (lower, or upper: L^H), info = order of the first
 *                          leading minor that is not positive-definite
 *   linalg_lu_factor_ex    LU and pivots of getrf, info = first zero pivot
 *   linalg_lu_solve        op(A) X = B (left) or X op(A) = B, A = P L U
 *   lu_unpack              P, L (unit lower, m x k), U (upper, k x n)
 *   _linalg_solve_ex       lu_factor of A, then lu_solve; a vector B when
 *                          ATen says so
 *   linalg_inv_ex          solve against the identity
 *   _linalg_det/_slogdet   from lu_factor of A^T when A is contiguous, of A
 *                          otherwise (ATen's copy-saving choice, which its
 *                          backward mirrors: the LU outputs must be the same)
 *   solve_triangular, triangular_solve, cholesky_solve, cholesky_inverse.
 *   geqrf, householder_product, ormqr, qr, eigh, svd
 *   linalg_eig             geev: complex eigenvalues/vectors (a real A's
 *                          conjugate pairs made complex as ATen does)
 *   ldl_factor_ex/solve    sytrf/hetrf of tril(A), LAPACK's pivots; sytrs
 * Complex inputs run on complex128 workspaces (L->cx); eigenvalues of
 * eigh, S, log|det| stay real. Batch dims of the inputs broadcast to the
 * output's batch dims. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "error.h"
#include "linalg.h"

#define MAXD RGPU_MAX_DIMS

typedef struct la {
    const rgpu_exec *e;
    const op_la_dev *dev;
    const char *name;
    void *buf[8];
    int nbuf;
    char *err;
    size_t errlen;
    bool cx;                  /* complex workspaces (a complex input) */
} la;

/* pack/unpack flags of the op's matrix workspaces */
#define WSF (L->cx ? OP_LA_CX : 0)

/* ---------------------------------------------------------------------------
 * Views */

/* v's last `tail` dims after batch dims bs[0..nbd) (v's own batch dims
 * right-aligned and broadcast, stride 0). */
static rgpu_status bview(la *L, const rgpu_view *v, int tail, const int64_t *bs, int nbd, rgpu_view *o)
{
    char *err = L->err;
    size_t errlen = L->errlen;
    int vb = v->ndim - tail;
    RETURN_ERROR_IF(vb < 0 || vb > nbd || nbd + tail > MAXD, RGPU_ERR_SHAPE,
                    "%s: an input has %d dims, want %d..%d", L->name, v->ndim, tail, nbd + tail);
    memset(o, 0, sizeof *o);
    o->data = v->data;
    o->dtype = v->dtype;
    o->ndim = nbd + tail;
    for (int d = 0; d < nbd; d++) {
        int s = d - (nbd - vb);
        o->sizes[d] = bs[d];
        if (s < 0) continue;
        RETURN_ERROR_IF(v->sizes[s] != bs[d] && v->sizes[s] != 1, RGPU_ERR_SHAPE,
                        "%s: batch dim %d of an input is %lld, does not broadcast to %lld", L->name, d,
                        (long long)v->sizes[s], (long long)bs[d]);
        o->strides[d] = v->sizes[s] == bs[d] ? v->strides[s] : 0;
    }
    for (int t = 0; t < tail; t++) {
        o->sizes[nbd + t] = v->sizes[vb + t];
        o->strides[nbd + t] = v->strides[vb + t];
    }
    return RGPU_OK;
}

/* Trailing size-1 dims until v ends in a matrix (tail 0: 1 x 1, tail 1: k x 1). */
static rgpu_view as_mat(rgpu_view v, int tail)
{
    for (int t = tail; t < 2; t++) {
        v.sizes[v.ndim] = 1;
        v.strides[v.ndim] = 0;
        v.ndim++;
    }
    return v;
}

static rgpu_view mT(rgpu_view v)
{
    int a = v.ndim - 2, b = v.ndim - 1;
    int64_t s = v.sizes[a]; v.sizes[a] = v.sizes[b]; v.sizes[b] = s;
    s = v.strides[a]; v.strides[a] = v.strides[b]; v.strides[b] = s;
    return v;
}

static int64_t rows(const rgpu_view *v) { return v->sizes[v->ndim - 2]; }
static int64_t cols(const rgpu_view *v) { return v->sizes[v->ndim - 1]; }

/* Row-major contiguous (ATen's is_contiguous). */
static bool contiguous(const rgpu_view *v)
{
    int64_t want = 1;
    for (int d = v->ndim - 1; d >= 0; d--) {
        if (v->sizes[d] != 1 && v->strides[d] != want) return false;
        want *= v->sizes[d];
    }
    return true;
}

/* ---------------------------------------------------------------------------
 * Scratch */

static void *get(la *L, int64_t n, size_t esz)
{
    if (L->nbuf == 8 || n < 0 || (uint64_t)n > ((uint64_t)1 << 40) / esz) return NULL;
    void *p = L->dev->alloc(L->dev->ctx, (size_t)(n ? n : 1) * esz);
    if (p) L->buf[L->nbuf++] = p;
    return p;
}

static rgpu_status nomem(la *L)
{
    rgpu_op_errf(L->err, L->errlen, "%s: out of memory for the %s workspace", L->name, L->dev->name);
    return RGPU_ERR_NOMEM;
}

/* A real workspace for nb matrices r x c. */
static double *rmats(la *L, int64_t nb, int64_t r, int64_t c)
{
    if (r < 0 || c < 0 || (r && c > INT32_MAX / r) || (r * c != 0 && nb > (INT64_MAX / 16) / (r * c))) return NULL;
    return (double *)get(L, nb * r * c, sizeof(double));
}

/* A workspace of the op's kind (complex when L->cx) for nb matrices r x c. */
static double *mats(la *L, int64_t nb, int64_t r, int64_t c)
{
    return rmats(L, nb, r, L->cx ? 2 * c : c);
}

static int32_t *ints(la *L, int64_t n) { return (int32_t *)get(L, n, sizeof(int32_t)); }

/* ---------------------------------------------------------------------------
 * Checks */

static rgpu_status check_float(la *L, const rgpu_view *v, const char *what, int dt)
{
    char *err = L->err;
    size_t errlen = L->errlen;
    RETURN_ERROR_IF(!v, RGPU_ERR_BAD_ARG, "%s: %s missing", L->name, what);
    RETURN_ERROR_IF(v->dtype != RGPU_F32 && v->dtype != RGPU_F64 && v->dtype != RGPU_C64 && v->dtype != RGPU_C128,
                    RGPU_ERR_UNSUPPORTED, "%s: %s is %s; linalg takes float32, float64, complex64 or complex128",
                    L->name, what, rgpu_dtype_name(v->dtype));
    RETURN_ERROR_IF(dt >= 0 && v->dtype != dt, RGPU_ERR_BAD_DTYPE, "%s: %s is %s, want %s", L->name, what,
                    rgpu_dtype_name(v->dtype), rgpu_dtype_name(dt));
    return RGPU_OK;
}

/* The real dtype of dt's values' magnitudes (eigenvalues of eigh, S, log|det|). */
static int real_dt(int dt)
{
    return dt == RGPU_C64 ? RGPU_F32 : dt == RGPU_C128 ? RGPU_F64 : dt;
}

static rgpu_status check_mat(la *L, const rgpu_view *v, const char *what, bool square)
{
    char *err = L->err;
    size_t errlen = L->errlen;
    RETURN_ERROR_IF(v->ndim < 2, RGPU_ERR_SHAPE, "%s: %s must have at least 2 dims", L->name, what);
    RETURN_ERROR_IF(square && rows(v) != cols(v), RGPU_ERR_SHAPE, "%s: %s must be square, got %lld x %lld",
                    L->name, what, (long long)rows(v), (long long)cols(v));
    RETURN_ERROR_IF(rows(v) > 65536 || cols(v) > 65536, RGPU_ERR_TOO_LARGE, "%s: %s is too large", L->name, what);
    return RGPU_OK;
}

static rgpu_status check_i32(la *L, const rgpu_view *v, const char *what)
{
    char *err = L->err;
    size_t errlen = L->errlen;
    RETURN_ERROR_IF(v && v->dtype != RGPU_I32, RGPU_ERR_BAD_DTYPE, "%s: %s is %s, want int32", L->name, what,
                    rgpu_dtype_name(v->dtype));
    return RGPU_OK;
}

static bool arg_b(const rgpu_exec *e, int i)
{
    return i < e->n_args && e->args[i].kind != RGPU_ARG_NONE && e->args[i].v.i != 0;
}

/* Batch dims of an output with `tail` core dims. */
static int batch_of(const rgpu_view *v, int tail, int64_t *bs, int64_t *nb)
{
    int nbd = v->ndim - tail;
    if (nbd < 0) nbd = 0;
    *nb = 1;
    for (int d = 0; d < nbd; d++) { bs[d] = v->sizes[d]; *nb *= bs[d]; }
    return nbd;
}

/* ---------------------------------------------------------------------------
 * Pieces the ops share */

/* Store int workspace into an output with `tail` core dims (0 or 1). */
static rgpu_status put_i(la *L, const int32_t *ws, const rgpu_view *v, int tail)
{
    if (!v || rgpu_op_numel(v) == 0) return RGPU_OK;
    rgpu_view m = as_mat(*v, tail);
    return L->dev->unpack_i(L->dev->ctx, ws, &m, L->err, L->errlen);
}

/* LU of A (batch bs, nbd): into lu (nb m x n), piv, info. */
static rgpu_status lu_factor(la *L, const rgpu_view *a, bool trans, const int64_t *bs, int nbd, int64_t nb,
                             double **lu, int32_t **piv, int32_t **info)
{
    rgpu_view av;
    FORWARD_IF_ERROR(bview(L, a, 2, bs, nbd, &av));
    if (trans) av = mT(av);
    int64_t m = rows(&av), n = cols(&av), k = m < n ? m : n;
    *lu = mats(L, nb, m, n);
    *piv = ints(L, nb * (k ? k : 1));
    *info = ints(L, nb);
    if (!*lu || !*piv || !*info) return nomem(L);
    FORWARD_IF_ERROR(L->dev->pack(L->dev->ctx, &av, *lu, WSF, L->err, L->errlen));
    return L->dev->getrf(L->dev->ctx, L->cx, *lu, nb, m, n, *piv, *info, L->err, L->errlen);
}

/* op(A) X = B (left) or X op(A) = B from an LU given as views (lu, piv),
 * into x; b and x end in matrices. */
static rgpu_status lu_solve(la *L, const rgpu_view *luv, const rgpu_view *pivv, const rgpu_view *b,
                            const rgpu_view *x, bool left, bool adjoint)
{
    int64_t bs[MAXD], nb;
    int nbd = batch_of(x, 2, bs, &nb);
    int64_t n = cols(luv);
    if (nb == 0 || rgpu_op_numel(x) == 0) return RGPU_OK;
    rgpu_view lv, pv, bv, xv = *x;
    FORWARD_IF_ERROR(bview(L, luv, 2, bs, nbd, &lv));
    FORWARD_IF_ERROR(bview(L, pivv, 1, bs, nbd, &pv));
    FORWARD_IF_ERROR(bview(L, b, 2, bs, nbd, &bv));
    pv = as_mat(pv, 1);
    int cj = 0;            /* X op(A) = B as op(A)^H X^H = B^H */
    if (!left) { bv = mT(bv); xv = mT(xv); adjoint = !adjoint; cj = OP_LA_CONJ; }
    char *err = L->err;
    size_t errlen = L->errlen;
    RETURN_ERROR_IF(rows(&bv) != n || rows(&xv) != n || cols(&bv) != cols(&xv) || rows(&pv) != n,
                    RGPU_ERR_SHAPE, "%s: shapes of LU, pivots, B and X do not agree", L->name);
    int64_t k = cols(&bv);
    double *lw = mats(L, nb, n, n), *bw = mats(L, nb, n, k);
    int32_t *pw = ints(L, nb * (n ? n : 1));
    if (!lw || !bw || !pw) return nomem(L);
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->pack(D->ctx, &lv, lw, WSF, err, errlen));
    FORWARD_IF_ERROR(D->pack_i(D->ctx, &pv, pw, err, errlen));
    FORWARD_IF_ERROR(D->pack(D->ctx, &bv, bw, WSF | cj, err, errlen));
    FORWARD_IF_ERROR(D->getrs(D->ctx, L->cx, lw, pw, bw, nb, n, k, adjoint, err, errlen));
    return D->unpack(D->ctx, bw, WSF | cj, &xv, OP_LA_FULL, err, errlen);
}

/* ATen's linalg_solve_is_vector_rhs. */
static bool vector_rhs(const rgpu_view *a, const rgpu_view *b, bool left)
{
    if (b->ndim == 1) return true;
    if (!left || b->ndim != a->ndim - 1) return false;
    for (int d = 0; d < b->ndim; d++)
        if (b->sizes[d] != a->sizes[d]) return false;
    return true;
}

/* v with a trailing size-1 dim (a vector as an n x 1 matrix). */
static rgpu_view col(rgpu_view v)
{
    v.sizes[v.ndim] = 1;
    v.strides[v.ndim] = 0;
    v.ndim++;
    return v;
}

/* ---------------------------------------------------------------------------
 * The ops */

static rgpu_status do_cholesky(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0];
    rgpu_view *l = e->out[0], *info = e->out[1];
    FORWARD_IF_ERROR(check_float(L, a, "A", -1));
    FORWARD_IF_ERROR(check_float(L, l, "L", a->dtype));
    FORWARD_IF_ERROR(check_mat(L, a, "A", true));
    FORWARD_IF_ERROR(check_i32(L, info, "info"));
    bool upper = arg_b(e, 0);
    int64_t bs[MAXD], nb;
    int nbd = batch_of(l, 2, bs, &nb);
    int64_t n = cols(a);
    if (nb == 0) return RGPU_OK;
    rgpu_view av;
    FORWARD_IF_ERROR(bview(L, a, 2, bs, nbd, &av));
    double *w = mats(L, nb, n, n);
    int32_t *iw = ints(L, nb);
    if (!w || !iw) return nomem(L);
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->pack(D->ctx, &av, w, WSF, L->err, L->errlen));
    FORWARD_IF_ERROR(D->potrf(D->ctx, L->cx, w, nb, n, !upper, iw, L->err, L->errlen));
    FORWARD_IF_ERROR(D->unpack(D->ctx, w, WSF, l, upper ? OP_LA_UPPER : OP_LA_LOWER, L->err, L->errlen));
    return put_i(L, iw, info, 0);
}

static rgpu_status do_lu_factor(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0];
    rgpu_view *lu = e->out[0], *piv = e->out[1], *info = e->out[2];
    char *err = L->err;
    size_t errlen = L->errlen;
    FORWARD_IF_ERROR(check_float(L, a, "A", -1));
    FORWARD_IF_ERROR(check_float(L, lu, "LU", a->dtype));
    FORWARD_IF_ERROR(check_mat(L, a, "A", false));
    FORWARD_IF_ERROR(check_i32(L, piv, "pivots"));
    FORWARD_IF_ERROR(check_i32(L, info, "info"));
    RETURN_ERROR_IF(!arg_b(e, 0), RGPU_ERR_UNSUPPORTED,
                    "linalg.lu_factor: LU without pivoting is not implemented on rgpu");
    int64_t bs[MAXD], nb;
    int nbd = batch_of(lu, 2, bs, &nb);
    if (nb == 0) return RGPU_OK;
    double *w;
    int32_t *pw, *iw;
    FORWARD_IF_ERROR(lu_factor(L, a, false, bs, nbd, nb, &w, &pw, &iw));
    FORWARD_IF_ERROR(L->dev->unpack(L->dev->ctx, w, WSF, lu, OP_LA_FULL, err, errlen));
    FORWARD_IF_ERROR(put_i(L, pw, piv, 1));
    return put_i(L, iw, info, 0);
}

static rgpu_status do_lu_solve(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *lu = e->in[0], *piv = e->in[1], *b = e->in[2];
    rgpu_view *x = e->out[0];
    char *err = L->err;
    size_t errlen = L->errlen;
    FORWARD_IF_ERROR(check_float(L, lu, "LU", -1));
    FORWARD_IF_ERROR(check_float(L, b, "B", lu->dtype));
    FORWARD_IF_ERROR(check_float(L, x, "X", lu->dtype));
    FORWARD_IF_ERROR(check_mat(L, lu, "LU", true));
    FORWARD_IF_ERROR(check_mat(L, b, "B", false));
    FORWARD_IF_ERROR(check_mat(L, x, "X", false));
    RETURN_ERROR_IF(!piv || piv->dtype != RGPU_I32 || piv->ndim < 1, RGPU_ERR_BAD_DTYPE,
                    "%s: pivots must be int32 with at least 1 dim", L->name);
    return lu_solve(L, lu, piv, b, x, arg_b(e, 0), arg_b(e, 1));
}

static rgpu_status do_lu_unpack(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *lu = e->in[0], *piv = e->in[1];
    rgpu_view *p = e->out[0], *lo = e->out[1], *up = e->out[2];
    char *err = L->err;
    size_t errlen = L->errlen;
    FORWARD_IF_ERROR(check_float(L, lu, "LU", -1));
    FORWARD_IF_ERROR(check_mat(L, lu, "LU", false));
    const op_la_dev *D = L->dev;
    int64_t m = rows(lu), n = cols(lu), k = m < n ? m : n;
    int64_t bs[MAXD], nb;
    (void)batch_of(lu, 2, bs, &nb);
    if (lo && up && rgpu_op_numel(lo) && rgpu_op_numel(up)) {
        FORWARD_IF_ERROR(check_float(L, lo, "L", lu->dtype));
        FORWARD_IF_ERROR(check_float(L, up, "U", lu->dtype));
        RETURN_ERROR_IF(lo->ndim != lu->ndim || up->ndim != lu->ndim || rows(lo) != m || cols(lo) != k ||
                        rows(up) != k || cols(up) != n, RGPU_ERR_SHAPE, "%s: L or U has the wrong shape", L->name);
        rgpu_view a = *lu, b = *lu;
        a.sizes[a.ndim - 1] = k;          /* LU[..., :, :k] */
        b.sizes[b.ndim - 2] = k;          /* LU[..., :k, :] */
        double *wl = mats(L, nb, m, k), *wu = mats(L, nb, k, n);
        if (!wl || !wu) return nomem(L);
        FORWARD_IF_ERROR(D->pack(D->ctx, &a, wl, WSF, err, errlen));
        FORWARD_IF_ERROR(D->unpack(D->ctx, wl, WSF, lo, OP_LA_UNIT_LOWER, err, errlen));
        FORWARD_IF_ERROR(D->pack(D->ctx, &b, wu, WSF, err, errlen));
        FORWARD_IF_ERROR(D->unpack(D->ctx, wu, WSF, up, OP_LA_UPPER, err, errlen));
    }
    if (p && rgpu_op_numel(p)) {
        FORWARD_IF_ERROR(check_float(L, p, "P", lu->dtype));
        RETURN_ERROR_IF(!piv || piv->dtype != RGPU_I32 || piv->ndim < 1 || piv->sizes[piv->ndim - 1] != k,
                        RGPU_ERR_SHAPE, "%s: pivots must be int32 (..., %lld)", L->name, (long long)k);
        RETURN_ERROR_IF(p->ndim < 2 || rows(p) != m || cols(p) != m, RGPU_ERR_SHAPE, "%s: P has the wrong shape",
                        L->name);
        int64_t pbs[MAXD], pnb;
        int pnbd = batch_of(p, 2, pbs, &pnb);
        rgpu_view pv;
        FORWARD_IF_ERROR(bview(L, piv, 1, pbs, pnbd, &pv));
        pv = as_mat(pv, 1);
        int32_t *pw = ints(L, pnb * (k ? k : 1));
        double *w = rmats(L, pnb, m, m);
        if (!pw || !w) return nomem(L);
        if (pnb) {
            FORWARD_IF_ERROR(D->pack_i(D->ctx, &pv, pw, err, errlen));
            FORWARD_IF_ERROR(D->lu_perm(D->ctx, pw, pnb, m, k, w, err, errlen));
            FORWARD_IF_ERROR(D->unpack(D->ctx, w, 0, p, OP_LA_FULL, err, errlen));
        }
    }
    return RGPU_OK;
}

static rgpu_status do_solve(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0], *b = e->in[1];
    rgpu_view *x = e->out[0], *lu = e->out[1], *piv = e->out[2], *info = e->out[3];
    FORWARD_IF_ERROR(check_float(L, a, "A", -1));
    FORWARD_IF_ERROR(check_float(L, b, "B", a->dtype));
    FORWARD_IF_ERROR(check_float(L, x, "result", a->dtype));
    FORWARD_IF_ERROR(check_float(L, lu, "LU", a->dtype));
    FORWARD_IF_ERROR(check_mat(L, a, "A", true));
    FORWARD_IF_ERROR(check_i32(L, piv, "pivots"));
    FORWARD_IF_ERROR(check_i32(L, info, "info"));
    bool left = arg_b(e, 0);
    bool use_t = false;          /* torch 2.13's solve factors A itself (its backward solves with LU as is) */
    int64_t bs[MAXD], nb;
    int nbd = batch_of(lu, 2, bs, &nb);
    if (nb) {
        double *w;
        int32_t *pw, *iw;
        FORWARD_IF_ERROR(lu_factor(L, a, use_t, bs, nbd, nb, &w, &pw, &iw));
        FORWARD_IF_ERROR(L->dev->unpack(L->dev->ctx, w, WSF, lu, OP_LA_FULL, L->err, L->errlen));
        FORWARD_IF_ERROR(put_i(L, pw, piv, 1));
        FORWARD_IF_ERROR(put_i(L, iw, info, 0));
    }
    if (vector_rhs(a, b, left)) {
        rgpu_view bc = col(*b), xc = col(*x);
        return lu_solve(L, lu, piv, &bc, &xc, left, use_t);
    }
    return lu_solve(L, lu, piv, b, x, left, use_t);
}

static rgpu_status do_inv(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0];
    rgpu_view *x = e->out[0], *info = e->out[1];
    FORWARD_IF_ERROR(check_float(L, a, "A", -1));
    FORWARD_IF_ERROR(check_float(L, x, "inverse", a->dtype));
    FORWARD_IF_ERROR(check_mat(L, a, "A", true));
    FORWARD_IF_ERROR(check_i32(L, info, "info"));
    int64_t bs[MAXD], nb;
    int nbd = batch_of(x, 2, bs, &nb);
    int64_t n = cols(a);
    if (nb == 0) return RGPU_OK;
    double *w, *bw = mats(L, nb, n, n);
    int32_t *pw, *iw;
    if (!bw) return nomem(L);
    FORWARD_IF_ERROR(lu_factor(L, a, false, bs, nbd, nb, &w, &pw, &iw));
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->eye(D->ctx, L->cx, bw, nb, n, L->err, L->errlen));
    FORWARD_IF_ERROR(D->getrs(D->ctx, L->cx, w, pw, bw, nb, n, n, false, L->err, L->errlen));
    FORWARD_IF_ERROR(D->unpack(D->ctx, bw, WSF, x, OP_LA_FULL, L->err, L->errlen));
    return put_i(L, iw, info, 0);
}

static rgpu_status do_det(la *L, bool slog)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0];
    rgpu_view *d = e->out[0], *lg = slog ? e->out[1] : NULL;
    rgpu_view *lu = e->out[slog ? 2 : 1], *piv = e->out[slog ? 3 : 2];
    FORWARD_IF_ERROR(check_float(L, a, "A", -1));
    FORWARD_IF_ERROR(check_float(L, d, slog ? "sign" : "det", a->dtype));
    if (slog) FORWARD_IF_ERROR(check_float(L, lg, "logabsdet", real_dt(a->dtype)));
    FORWARD_IF_ERROR(check_mat(L, a, "A", true));
    FORWARD_IF_ERROR(check_i32(L, piv, "pivots"));
    int64_t bs[MAXD], nb;
    int nbd = batch_of(d, 0, bs, &nb);
    int64_t n = cols(a);
    if (nb == 0) return RGPU_OK;
    double *w, *dw = mats(L, nb, 1, 1), *lw = slog ? rmats(L, nb, 1, 1) : NULL;
    int32_t *pw, *iw;
    if (!dw || (slog && !lw)) return nomem(L);
    const op_la_dev *D = L->dev;
    /* ATen factors A^T of a contiguous real A, a complex A itself */
    FORWARD_IF_ERROR(lu_factor(L, a, contiguous(a) && !L->cx, bs, nbd, nb, &w, &pw, &iw));
    if (lu && rgpu_op_numel(lu)) FORWARD_IF_ERROR(D->unpack(D->ctx, w, WSF, lu, OP_LA_FULL, L->err, L->errlen));
    FORWARD_IF_ERROR(put_i(L, pw, piv, 1));
    FORWARD_IF_ERROR(D->lu_det(D->ctx, L->cx, w, pw, nb, n, dw, lw, L->err, L->errlen));
    rgpu_view dv = as_mat(*d, 0);
    FORWARD_IF_ERROR(D->unpack(D->ctx, dw, WSF, &dv, OP_LA_FULL, L->err, L->errlen));
    if (slog) {
        rgpu_view lv = as_mat(*lg, 0);
        FORWARD_IF_ERROR(D->unpack(D->ctx, lw, 0, &lv, OP_LA_FULL, L->err, L->errlen));
    }
    return RGPU_OK;
}

/* op(A) X = B with A triangular: X and B batch-broadcast matrices. */
static rgpu_status tri_solve(la *L, const rgpu_view *a, const rgpu_view *b, const rgpu_view *x, bool upper,
                             bool trans, bool unit, bool left, const rgpu_view *clone)
{
    int64_t bs[MAXD], nb;
    int nbd = batch_of(x, 2, bs, &nb);
    int64_t n = cols(a);
    char *err = L->err;
    size_t errlen = L->errlen;
    if (nb == 0) return RGPU_OK;
    rgpu_view av, bv, xv = *x;
    FORWARD_IF_ERROR(bview(L, a, 2, bs, nbd, &av));
    FORWARD_IF_ERROR(bview(L, b, 2, bs, nbd, &bv));
    if (!left) { bv = mT(bv); xv = mT(xv); trans = !trans; }
    RETURN_ERROR_IF(rows(&bv) != n || rows(&xv) != n || cols(&xv) != cols(&bv), RGPU_ERR_SHAPE,
                    "%s: shapes of A, B and X do not agree", L->name);
    int64_t k = cols(&bv);
    double *aw = mats(L, nb, n, n), *bw = mats(L, nb, n, k);
    if (!aw || !bw) return nomem(L);
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->pack(D->ctx, &av, aw, WSF, err, errlen));
    if (clone && rgpu_op_numel(clone)) FORWARD_IF_ERROR(D->unpack(D->ctx, aw, WSF, clone, OP_LA_FULL, err, errlen));
    if (rgpu_op_numel(&xv) == 0) return RGPU_OK;
    FORWARD_IF_ERROR(D->pack(D->ctx, &bv, bw, WSF, err, errlen));
    FORWARD_IF_ERROR(D->trsm(D->ctx, L->cx, aw, bw, nb, n, k, upper, trans, unit, err, errlen));
    return D->unpack(D->ctx, bw, WSF, &xv, OP_LA_FULL, err, errlen);
}

static rgpu_status do_solve_triangular(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0], *b = e->in[1];
    rgpu_view *x = e->out[0];
    FORWARD_IF_ERROR(check_float(L, a, "A", -1));
    FORWARD_IF_ERROR(check_float(L, b, "B", a->dtype));
    FORWARD_IF_ERROR(check_float(L, x, "X", a->dtype));
    FORWARD_IF_ERROR(check_mat(L, a, "A", true));
    FORWARD_IF_ERROR(check_mat(L, b, "B", false));
    FORWARD_IF_ERROR(check_mat(L, x, "X", false));
    return tri_solve(L, a, b, x, arg_b(e, 0), false, arg_b(e, 2), arg_b(e, 1), NULL);
}

static rgpu_status do_triangular_solve(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *b = e->in[0], *a = e->in[1];
    rgpu_view *x = e->out[0], *clone = e->out[1];
    FORWARD_IF_ERROR(check_float(L, a, "A", -1));
    FORWARD_IF_ERROR(check_float(L, b, "self", a->dtype));
    FORWARD_IF_ERROR(check_float(L, x, "solution", a->dtype));
    if (clone) FORWARD_IF_ERROR(check_float(L, clone, "cloned_coefficient", a->dtype));
    FORWARD_IF_ERROR(check_mat(L, a, "A", true));
    FORWARD_IF_ERROR(check_mat(L, b, "self", false));
    FORWARD_IF_ERROR(check_mat(L, x, "solution", false));
    return tri_solve(L, a, b, x, arg_b(e, 0), arg_b(e, 1), arg_b(e, 2), true, clone);
}

static rgpu_status do_cholesky_solve(la *L, bool inverse)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *f = inverse ? e->in[0] : e->in[1], *b = inverse ? NULL : e->in[0];
    rgpu_view *x = e->out[0];
    FORWARD_IF_ERROR(check_float(L, f, "the factor", -1));
    if (b) FORWARD_IF_ERROR(check_float(L, b, "self", f->dtype));
    FORWARD_IF_ERROR(check_float(L, x, "the result", f->dtype));
    FORWARD_IF_ERROR(check_mat(L, f, "the factor", true));
    FORWARD_IF_ERROR(check_mat(L, x, "the result", false));
    bool upper = arg_b(e, 0);
    int64_t bs[MAXD], nb;
    int nbd = batch_of(x, 2, bs, &nb);
    int64_t n = cols(f), k = cols(x);
    char *err = L->err;
    size_t errlen = L->errlen;
    if (nb == 0 || rgpu_op_numel(x) == 0) return RGPU_OK;
    RETURN_ERROR_IF(rows(x) != n || (inverse && k != n), RGPU_ERR_SHAPE, "%s: the result has the wrong shape",
                    L->name);
    rgpu_view fv, bv;
    FORWARD_IF_ERROR(bview(L, f, 2, bs, nbd, &fv));
    double *fw = mats(L, nb, n, n), *bw = mats(L, nb, n, k);
    if (!fw || !bw) return nomem(L);
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->pack(D->ctx, &fv, fw, WSF, err, errlen));
    if (inverse) {
        FORWARD_IF_ERROR(D->eye(D->ctx, L->cx, bw, nb, n, err, errlen));
    } else {
        FORWARD_IF_ERROR(check_mat(L, b, "self", false));
        FORWARD_IF_ERROR(bview(L, b, 2, bs, nbd, &bv));
        RETURN_ERROR_IF(rows(&bv) != n || cols(&bv) != k, RGPU_ERR_SHAPE, "%s: self has the wrong shape", L->name);
        FORWARD_IF_ERROR(D->pack(D->ctx, &bv, bw, WSF, err, errlen));
    }
    FORWARD_IF_ERROR(D->potrs(D->ctx, L->cx, fw, bw, nb, n, k, !upper, err, errlen));
    return D->unpack(D->ctx, bw, WSF, x, OP_LA_FULL, err, errlen);
}

/* ---------------------------------------------------------------------------
 * QR, eigh, SVD */

static rgpu_status do_geqrf(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0];
    rgpu_view *o = e->out[0], *tau = e->out[1];
    FORWARD_IF_ERROR(check_float(L, a, "self", -1));
    FORWARD_IF_ERROR(check_float(L, o, "a", a->dtype));
    FORWARD_IF_ERROR(check_float(L, tau, "tau", a->dtype));
    FORWARD_IF_ERROR(check_mat(L, a, "self", false));
    int64_t bs[MAXD], nb;
    int nbd = batch_of(o, 2, bs, &nb);
    int64_t m = rows(a), n = cols(a), k = m < n ? m : n;
    if (nb == 0) return RGPU_OK;
    rgpu_view av;
    FORWARD_IF_ERROR(bview(L, a, 2, bs, nbd, &av));
    double *w = mats(L, nb, m, n), *tw = mats(L, nb, k, 1);
    if (!w || !tw) return nomem(L);
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->pack(D->ctx, &av, w, WSF, L->err, L->errlen));
    FORWARD_IF_ERROR(D->geqrf(D->ctx, L->cx, w, nb, m, n, tw, L->err, L->errlen));
    FORWARD_IF_ERROR(D->unpack(D->ctx, w, WSF, o, OP_LA_FULL, L->err, L->errlen));
    if (k == 0) return RGPU_OK;
    rgpu_view tv = as_mat(*tau, 1);
    return D->unpack(D->ctx, tw, WSF, &tv, OP_LA_FULL, L->err, L->errlen);
}

static rgpu_status do_householder(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0], *tau = e->in[1];
    rgpu_view *o = e->out[0];
    char *err = L->err;
    size_t errlen = L->errlen;
    FORWARD_IF_ERROR(check_float(L, a, "input", -1));
    FORWARD_IF_ERROR(check_float(L, tau, "tau", a->dtype));
    FORWARD_IF_ERROR(check_float(L, o, "the result", a->dtype));
    FORWARD_IF_ERROR(check_mat(L, a, "input", false));
    int64_t bs[MAXD], nb;
    int nbd = batch_of(o, 2, bs, &nb);
    int64_t m = rows(a), n = cols(a), k = tau->ndim ? tau->sizes[tau->ndim - 1] : 0;
    RETURN_ERROR_IF(tau->ndim < 1 || k > n || n > m, RGPU_ERR_SHAPE, "%s: want input m x n, m >= n >= tau's k",
                    L->name);
    if (nb == 0) return RGPU_OK;
    rgpu_view av, tv;
    FORWARD_IF_ERROR(bview(L, a, 2, bs, nbd, &av));
    FORWARD_IF_ERROR(bview(L, tau, 1, bs, nbd, &tv));
    tv = as_mat(tv, 1);
    double *w = mats(L, nb, m, n), *tw = mats(L, nb, k, 1);
    if (!w || !tw) return nomem(L);
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->pack(D->ctx, &av, w, WSF, err, errlen));
    if (k) FORWARD_IF_ERROR(D->pack(D->ctx, &tv, tw, WSF, err, errlen));
    FORWARD_IF_ERROR(D->orgqr(D->ctx, L->cx, w, nb, m, n, k, tw, err, errlen));
    return D->unpack(D->ctx, w, WSF, o, OP_LA_FULL, err, errlen);
}

static rgpu_status do_ormqr(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0], *tau = e->in[1], *c = e->in[2];
    rgpu_view *o = e->out[0];
    char *err = L->err;
    size_t errlen = L->errlen;
    FORWARD_IF_ERROR(check_float(L, a, "self", -1));
    FORWARD_IF_ERROR(check_float(L, tau, "input2", a->dtype));
    FORWARD_IF_ERROR(check_float(L, c, "input3", a->dtype));
    FORWARD_IF_ERROR(check_float(L, o, "the result", a->dtype));
    FORWARD_IF_ERROR(check_mat(L, a, "self", false));
    FORWARD_IF_ERROR(check_mat(L, c, "input3", false));
    bool left = arg_b(e, 0), trans = arg_b(e, 1);
    int64_t bs[MAXD], nb;
    int nbd = batch_of(o, 2, bs, &nb);
    int64_t m = rows(c), n = cols(c), r = rows(a), k = tau->ndim ? tau->sizes[tau->ndim - 1] : 0;
    RETURN_ERROR_IF(tau->ndim < 1 || r != (left ? m : n) || k > r || k > cols(a), RGPU_ERR_SHAPE,
                    "%s: shapes of the reflectors, tau and C do not agree", L->name);
    if (nb == 0 || m == 0 || n == 0) return RGPU_OK;
    rgpu_view av, tv, cv;
    FORWARD_IF_ERROR(bview(L, a, 2, bs, nbd, &av));
    FORWARD_IF_ERROR(bview(L, tau, 1, bs, nbd, &tv));
    FORWARD_IF_ERROR(bview(L, c, 2, bs, nbd, &cv));
    tv = as_mat(tv, 1);
    av.sizes[av.ndim - 1] = k;          /* only the k reflectors */
    double *aw = mats(L, nb, r, k), *tw = mats(L, nb, k, 1), *cw = mats(L, nb, m, n);
    if (!aw || !tw || !cw) return nomem(L);
    const op_la_dev *D = L->dev;
    if (k) {
        FORWARD_IF_ERROR(D->pack(D->ctx, &av, aw, WSF, err, errlen));
        FORWARD_IF_ERROR(D->pack(D->ctx, &tv, tw, WSF, err, errlen));
    }
    FORWARD_IF_ERROR(D->pack(D->ctx, &cv, cw, WSF, err, errlen));
    if (k) FORWARD_IF_ERROR(D->ormqr(D->ctx, L->cx, aw, tw, cw, nb, m, n, k, left, trans, err, errlen));
    return D->unpack(D->ctx, cw, WSF, o, OP_LA_FULL, err, errlen);
}

static rgpu_status do_qr(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0];
    rgpu_view *q = e->out[0], *r = e->out[1];
    char *err = L->err;
    size_t errlen = L->errlen;
    FORWARD_IF_ERROR(check_float(L, a, "A", -1));
    FORWARD_IF_ERROR(check_float(L, r, "R", a->dtype));
    FORWARD_IF_ERROR(check_mat(L, a, "A", false));
    FORWARD_IF_ERROR(check_mat(L, r, "R", false));
    int64_t mode = e->args[0].v.i;
    RETURN_ERROR_IF(mode < 0 || mode > 2, RGPU_ERR_BAD_ARG, "%s: mode %lld is not 0..2", L->name, (long long)mode);
    int64_t bs[MAXD], nb;
    int nbd = batch_of(r, 2, bs, &nb);
    int64_t m = rows(a), n = cols(a), k = m < n ? m : n, qc = mode == 1 ? m : k;
    RETURN_ERROR_IF(rows(r) != qc || cols(r) != n, RGPU_ERR_SHAPE, "%s: R has the wrong shape", L->name);
    if (nb == 0) return RGPU_OK;
    rgpu_view av;
    FORWARD_IF_ERROR(bview(L, a, 2, bs, nbd, &av));
    double *w = mats(L, nb, m, n), *tw = mats(L, nb, k, 1), *rw = mats(L, nb, qc, n);
    if (!w || !tw || !rw) return nomem(L);
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->pack(D->ctx, &av, w, WSF, err, errlen));
    FORWARD_IF_ERROR(D->geqrf(D->ctx, L->cx, w, nb, m, n, tw, err, errlen));
    FORWARD_IF_ERROR(D->crop(D->ctx, L->cx, w, m, n, rw, qc, n, nb, err, errlen));
    FORWARD_IF_ERROR(D->unpack(D->ctx, rw, WSF, r, OP_LA_UPPER, err, errlen));
    if (mode == 2 || !q || rgpu_op_numel(q) == 0) return RGPU_OK;
    FORWARD_IF_ERROR(check_float(L, q, "Q", a->dtype));
    RETURN_ERROR_IF(q->ndim < 2 || rows(q) != m || cols(q) != qc, RGPU_ERR_SHAPE, "%s: Q has the wrong shape",
                    L->name);
    double *qw = mats(L, nb, m, qc);
    if (!qw) return nomem(L);
    FORWARD_IF_ERROR(D->crop(D->ctx, L->cx, w, m, n, qw, m, qc, nb, err, errlen));
    FORWARD_IF_ERROR(D->orgqr(D->ctx, L->cx, qw, nb, m, qc, k, tw, err, errlen));
    return D->unpack(D->ctx, qw, WSF, q, OP_LA_FULL, err, errlen);
}

static rgpu_status do_eigh(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0];
    rgpu_view *w = e->out[0], *v = e->out[1];
    FORWARD_IF_ERROR(check_float(L, a, "A", -1));
    FORWARD_IF_ERROR(check_float(L, w, "eigenvalues", real_dt(a->dtype)));
    FORWARD_IF_ERROR(check_mat(L, a, "A", true));
    bool upper = arg_b(e, 0), vec = arg_b(e, 1) && v && rgpu_op_numel(v) > 0;
    if (vec) FORWARD_IF_ERROR(check_float(L, v, "eigenvectors", a->dtype));
    int64_t bs[MAXD], nb;
    int nbd = batch_of(w, 1, bs, &nb);
    int64_t n = cols(a);
    if (nb == 0 || n == 0) return RGPU_OK;
    rgpu_view av;
    FORWARD_IF_ERROR(bview(L, a, 2, bs, nbd, &av));
    double *aw = mats(L, nb, n, n), *ww = rmats(L, nb, n, 1);
    if (!aw || !ww) return nomem(L);
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->pack(D->ctx, &av, aw, WSF, L->err, L->errlen));
    FORWARD_IF_ERROR(D->syevd(D->ctx, L->cx, aw, nb, n, !upper, vec, ww, L->err, L->errlen));
    rgpu_view wv = as_mat(*w, 1);
    FORWARD_IF_ERROR(D->unpack(D->ctx, ww, 0, &wv, OP_LA_FULL, L->err, L->errlen));
    return vec ? D->unpack(D->ctx, aw, WSF, v, OP_LA_FULL, L->err, L->errlen) : RGPU_OK;
}

static rgpu_status do_svd(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0];
    rgpu_view *u = e->out[0], *s = e->out[1], *vh = e->out[2];
    char *err = L->err;
    size_t errlen = L->errlen;
    FORWARD_IF_ERROR(check_float(L, a, "A", -1));
    FORWARD_IF_ERROR(check_float(L, s, "S", real_dt(a->dtype)));
    FORWARD_IF_ERROR(check_mat(L, a, "A", false));
    bool full = arg_b(e, 0), uv = arg_b(e, 1) && u && vh && rgpu_op_numel(u) > 0 && rgpu_op_numel(vh) > 0;
    int64_t bs[MAXD], nb;
    int nbd = batch_of(s, 1, bs, &nb);
    int64_t m = rows(a), n = cols(a);
    bool tr = m < n;
    if (tr) { int64_t t = m; m = n; n = t; }    /* now m >= n: the SVD of A^T when A is wide */
    int64_t uc = full ? m : n;
    if (uv) {
        FORWARD_IF_ERROR(check_float(L, u, "U", a->dtype));
        FORWARD_IF_ERROR(check_float(L, vh, "Vh", a->dtype));
        rgpu_view ut = tr ? mT(*vh) : *u, vt = tr ? mT(*u) : *vh;   /* as the m >= n problem's U, Vt */
        RETURN_ERROR_IF(ut.ndim < 2 || vt.ndim < 2 || rows(&ut) != m || cols(&ut) != uc || rows(&vt) != n ||
                        cols(&vt) != n, RGPU_ERR_SHAPE, "%s: U or Vh has the wrong shape", L->name);
    }
    if (nb == 0) return RGPU_OK;
    if (n == 0) {              /* ATen: full U and Vh of an empty A are identities */
        rgpu_view *both[2] = { u, vh };
        for (int i = 0; i < 2 && full && arg_b(e, 1); i++) {
            rgpu_view *t = both[i];
            if (!t || !rgpu_op_numel(t) || t->ndim < 2 || rows(t) != cols(t)) continue;
            FORWARD_IF_ERROR(check_float(L, t, "U/Vh", a->dtype));
            double *ew = mats(L, nb, rows(t), rows(t));
            if (!ew) return nomem(L);
            FORWARD_IF_ERROR(L->dev->eye(L->dev->ctx, L->cx, ew, nb, rows(t), err, errlen));
            FORWARD_IF_ERROR(L->dev->unpack(L->dev->ctx, ew, WSF, t, OP_LA_FULL, err, errlen));
        }
        return RGPU_OK;
    }
    rgpu_view av;
    FORWARD_IF_ERROR(bview(L, a, 2, bs, nbd, &av));
    if (tr) av = mT(av);
    double *aw = mats(L, nb, m, n), *sw = rmats(L, nb, n, 1);
    double *uw = uv ? mats(L, nb, m, uc) : NULL, *vw = uv ? mats(L, nb, n, n) : NULL;
    if (!aw || !sw || (uv && (!uw || !vw))) return nomem(L);
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->pack(D->ctx, &av, aw, WSF, err, errlen));
    FORWARD_IF_ERROR(D->gesvd(D->ctx, L->cx, aw, nb, m, n, sw, uw, vw, full, uv, err, errlen));
    rgpu_view sv = as_mat(*s, 1);
    FORWARD_IF_ERROR(D->unpack(D->ctx, sw, 0, &sv, OP_LA_FULL, err, errlen));
    if (!uv) return RGPU_OK;
    rgpu_view ut = tr ? mT(*vh) : *u, vt = tr ? mT(*u) : *vh;
    FORWARD_IF_ERROR(D->unpack(D->ctx, uw, WSF, &ut, OP_LA_FULL, err, errlen));
    return D->unpack(D->ctx, vw, WSF, &vt, OP_LA_FULL, err, errlen);
}

/* The complex dtype of a's eigenvalues (ATen's linalg_eig: real in, complex out). */
static int complex_dt(int dt)
{
    return dt == RGPU_F32 ? RGPU_C64 : dt == RGPU_F64 ? RGPU_C128 : dt;
}

static rgpu_status do_eig(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0];
    rgpu_view *w = e->out[0], *v = e->out[1];
    FORWARD_IF_ERROR(check_float(L, a, "A", -1));
    FORWARD_IF_ERROR(check_float(L, w, "eigenvalues", complex_dt(a->dtype)));
    FORWARD_IF_ERROR(check_mat(L, a, "A", true));
    bool vec = v && rgpu_op_numel(v) > 0;
    if (vec) FORWARD_IF_ERROR(check_float(L, v, "eigenvectors", complex_dt(a->dtype)));
    int64_t bs[MAXD], nb;
    int nbd = batch_of(w, 1, bs, &nb);
    int64_t n = cols(a);
    char *err = L->err;
    size_t errlen = L->errlen;
    RETURN_ERROR_IF(w->ndim < 1 || w->sizes[w->ndim - 1] != n || (vec && (v->ndim < 2 || rows(v) != n || cols(v) != n)),
                    RGPU_ERR_SHAPE, "%s: eigenvalues or eigenvectors have the wrong shape", L->name);
    if (nb == 0 || n == 0) return RGPU_OK;
    rgpu_view av;
    FORWARD_IF_ERROR(bview(L, a, 2, bs, nbd, &av));
    double *aw = mats(L, nb, n, n), *ww = rmats(L, nb, n, 2), *vw = vec ? rmats(L, nb, n, 2 * n) : NULL;
    if (!aw || !ww || (vec && !vw)) return nomem(L);
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->pack(D->ctx, &av, aw, WSF, err, errlen));
    FORWARD_IF_ERROR(D->geev(D->ctx, L->cx, aw, nb, n, ww, vw, err, errlen));
    rgpu_view wv = as_mat(*w, 1);
    FORWARD_IF_ERROR(D->unpack(D->ctx, ww, OP_LA_CX, &wv, OP_LA_FULL, err, errlen));
    return vec ? D->unpack(D->ctx, vw, OP_LA_CX, v, OP_LA_FULL, err, errlen) : RGPU_OK;
}

static rgpu_status do_ldl_factor(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *a = e->in[0];
    rgpu_view *ld = e->out[0], *piv = e->out[1], *info = e->out[2];
    FORWARD_IF_ERROR(check_float(L, a, "A", -1));
    FORWARD_IF_ERROR(check_float(L, ld, "LD", a->dtype));
    FORWARD_IF_ERROR(check_mat(L, a, "A", true));
    FORWARD_IF_ERROR(check_i32(L, piv, "pivots"));
    FORWARD_IF_ERROR(check_i32(L, info, "info"));
    int64_t bs[MAXD], nb;
    int nbd = batch_of(ld, 2, bs, &nb);
    int64_t n = cols(a);
    if (nb == 0) return RGPU_OK;
    rgpu_view av;
    FORWARD_IF_ERROR(bview(L, a, 2, bs, nbd, &av));
    double *w = mats(L, nb, n, n);
    int32_t *pw = ints(L, nb * (n ? n : 1)), *iw = ints(L, nb);
    if (!w || !pw || !iw) return nomem(L);
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->pack(D->ctx, &av, w, WSF, L->err, L->errlen));
    FORWARD_IF_ERROR(D->sytrf(D->ctx, L->cx, arg_b(e, 0), w, nb, n, pw, iw, L->err, L->errlen));
    FORWARD_IF_ERROR(D->unpack(D->ctx, w, WSF, ld, OP_LA_LOWER, L->err, L->errlen));   /* ATen factors tril(A) */
    FORWARD_IF_ERROR(put_i(L, pw, piv, 1));
    return put_i(L, iw, info, 0);
}

static rgpu_status do_ldl_solve(la *L)
{
    const rgpu_exec *e = L->e;
    const rgpu_view *ld = e->in[0], *piv = e->in[1], *b = e->in[2];
    rgpu_view *x = e->out[0];
    char *err = L->err;
    size_t errlen = L->errlen;
    FORWARD_IF_ERROR(check_float(L, ld, "LD", -1));
    FORWARD_IF_ERROR(check_float(L, b, "B", ld->dtype));
    FORWARD_IF_ERROR(check_float(L, x, "the result", ld->dtype));
    FORWARD_IF_ERROR(check_mat(L, ld, "LD", true));
    FORWARD_IF_ERROR(check_mat(L, b, "B", false));
    FORWARD_IF_ERROR(check_mat(L, x, "the result", false));
    RETURN_ERROR_IF(!piv || piv->dtype != RGPU_I32 || piv->ndim < 1, RGPU_ERR_BAD_DTYPE,
                    "%s: pivots must be int32 with at least 1 dim", L->name);
    int64_t bs[MAXD], nb;
    int nbd = batch_of(x, 2, bs, &nb);
    int64_t n = cols(ld), k = cols(x);
    if (nb == 0 || rgpu_op_numel(x) == 0) return RGPU_OK;
    rgpu_view lv, pv, bv;
    FORWARD_IF_ERROR(bview(L, ld, 2, bs, nbd, &lv));
    FORWARD_IF_ERROR(bview(L, piv, 1, bs, nbd, &pv));
    FORWARD_IF_ERROR(bview(L, b, 2, bs, nbd, &bv));
    pv = as_mat(pv, 1);
    RETURN_ERROR_IF(rows(&bv) != n || rows(x) != n || cols(&bv) != k || rows(&pv) != n, RGPU_ERR_SHAPE,
                    "%s: shapes of LD, pivots, B and the result do not agree", L->name);
    double *lw = mats(L, nb, n, n), *bw = mats(L, nb, n, k);
    int32_t *pw = ints(L, nb * n);
    if (!lw || !bw || !pw) return nomem(L);
    const op_la_dev *D = L->dev;
    FORWARD_IF_ERROR(D->pack(D->ctx, &lv, lw, WSF, err, errlen));
    FORWARD_IF_ERROR(D->pack_i(D->ctx, &pv, pw, err, errlen));
    FORWARD_IF_ERROR(D->pack(D->ctx, &bv, bw, WSF, err, errlen));
    FORWARD_IF_ERROR(D->sytrs(D->ctx, L->cx, arg_b(e, 0), lw, pw, bw, nb, n, k, err, errlen));
    return D->unpack(D->ctx, bw, WSF, x, OP_LA_FULL, err, errlen);
}

static rgpu_status run(la *L)
{
    switch (L->e->op) {
    case RGPU_OP_LINALG_CHOLESKY:   return do_cholesky(L);
    case RGPU_OP_LINALG_LU_FACTOR:  return do_lu_factor(L);
    case RGPU_OP_LINALG_LU_SOLVE:   return do_lu_solve(L);
    case RGPU_OP_LU_UNPACK:         return do_lu_unpack(L);
    case RGPU_OP_LINALG_SOLVE:      return do_solve(L);
    case RGPU_OP_LINALG_INV:        return do_inv(L);
    case RGPU_OP_LINALG_DET:        return do_det(L, false);
    case RGPU_OP_LINALG_SLOGDET:    return do_det(L, true);
    case RGPU_OP_SOLVE_TRIANGULAR:  return do_solve_triangular(L);
    case RGPU_OP_TRIANGULAR_SOLVE:  return do_triangular_solve(L);
    case RGPU_OP_CHOLESKY_SOLVE:    return do_cholesky_solve(L, false);
    case RGPU_OP_CHOLESKY_INVERSE:  return do_cholesky_solve(L, true);
    case RGPU_OP_GEQRF:             return do_geqrf(L);
    case RGPU_OP_HOUSEHOLDER_PRODUCT: return do_householder(L);
    case RGPU_OP_ORMQR:             return do_ormqr(L);
    case RGPU_OP_LINALG_QR:         return do_qr(L);
    case RGPU_OP_LINALG_EIGH:       return do_eigh(L);
    case RGPU_OP_LINALG_SVD:        return do_svd(L);
    case RGPU_OP_LINALG_EIG:        return do_eig(L);
    case RGPU_OP_LINALG_LDL_FACTOR: return do_ldl_factor(L);
    case RGPU_OP_LINALG_LDL_SOLVE:  return do_ldl_solve(L);
    default:
        rgpu_op_errf(L->err, L->errlen, "%s backend (linalg): unsupported op %s", L->dev->name, L->name);
        return RGPU_ERR_UNSUPPORTED;
    }
}

rgpu_status rgpu_op_la_exec(const rgpu_exec *e, const op_la_dev *dev, char *err, size_t errlen)
{
    /* optional: lu_unpack's outputs (empty when not unpacked), triangular_solve's clone */
    uint32_t opt_out = e->op == RGPU_OP_LU_UNPACK ? 7u : e->op == RGPU_OP_TRIANGULAR_SOLVE ? 2u
                     : e->op == RGPU_OP_LINALG_QR ? 1u : e->op == RGPU_OP_LINALG_EIGH ? 2u
                     : e->op == RGPU_OP_LINALG_SVD ? 5u : e->op == RGPU_OP_LINALG_EIG ? 2u : 0u;
    FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, opt_out, true, err, errlen));
    la L;
    memset(&L, 0, sizeof L);
    L.e = e;
    L.dev = dev;
    L.name = rgpu_op_name(e->op);
    L.err = err;
    L.errlen = errlen;
    L.cx = e->n_in > 0 && e->in[0] && op_dtype_is_complex(e->in[0]->dtype);
    rgpu_status st = run(&L);
    for (int i = 0; i < L.nbuf; i++) dev->release(dev->ctx, L.buf[i]);
    return st;
}
