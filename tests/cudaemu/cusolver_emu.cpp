// cusolver_emu.cpp — a reference for exactly the cuSOLVER entry points that
// replayer/cuda/cusolver_loader.cu resolves, built as cudaemu's
// libcusolver.so.12 so the backend finds it through its own loader (the
// emulated binaries' RUNPATH, the folder of cudaemu's cuBLAS, or
// $RGPU_CUSOLVER_PATH). Emulated device memory is host memory: each call is
// checked when made (arguments, and the device ranges it touches when it
// runs), queued on the handle's stream, and runs LAPACK (LAPACKE's _work
// entry points) there. Workspaces are asked for and checked, not used.
#include <lapacke.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cudaemu_api.h"

namespace {

enum { ST_OK = 0, ST_NOT_INITIALIZED = 1, ST_INVALID_VALUE = 3, ST_EXECUTION_FAILED = 6 };

struct handle {
    cudaStream_t stream;
};

enum kind { GETRF, GETRS, POTRF, POTRS, GEQRF, ORGQR, ORMQR, SYEVD, GESVD, GEEV, SYTRF };

struct call {
    kind k;
    int m, n, nrhs, lda, ldb, flag;   // flag: trans (getrs) or uplo (potrf/potrs), cuBLAS's values
    double *A, *B;
    int *ipiv, *info;
    // geqrf/orgqr/ormqr (nrhs = k reflectors, B = C), syevd (flag uplo, flag2 jobz, B = W),
    // gesvd (ju, jv; B = S, U (ldu), VT (ldvt))
    int flag2 = 0;
    double *tau = nullptr, *U = nullptr, *VT = nullptr;
    int ldu = 1, ldvt = 1;
    char ju = 'N', jv = 'N';
    bool z = false;           // the Z (complex128) routine: A, B (not W/S), tau, U, VT are (re, im) pairs
};

#define ZP(p) ((lapack_complex_double *)(p))

bool range(const void *p, size_t n, const char *what) {
    if (!n || cudaemu_device_range_ok(p, n)) return true;
    char msg[200];
    snprintf(msg, sizeof msg, "cusolver: %s [%p, +%zu) is outside device memory", what, p, n);
    cudaemu_report_fault(msg);
    return false;
}

size_t mat_bytes(int ld, int cols, bool z = false) {
    return cols > 0 ? ((size_t)ld * (size_t)(cols - 1) + (size_t)ld) * sizeof(double) * (z ? 2 : 1) : 0;
}

void run(void *p) {
    call *c = (call *)p;
    int info = 0;
    switch (c->k) {
    case GETRF: {
        int k = c->m < c->n ? c->m : c->n;
        if (!range(c->A, mat_bytes(c->lda, c->n, c->z), "getrf A") || !range(c->ipiv, (size_t)k * 4, "getrf ipiv") ||
            !range(c->info, 4, "getrf info"))
            return;
        info = c->z ? LAPACKE_zgetrf_work(LAPACK_COL_MAJOR, c->m, c->n, ZP(c->A), c->lda, c->ipiv)
                    : LAPACKE_dgetrf_work(LAPACK_COL_MAJOR, c->m, c->n, c->A, c->lda, c->ipiv);
        break;
    }
    case GETRS:
        if (!range(c->A, mat_bytes(c->lda, c->n, c->z), "getrs A") ||
            !range(c->B, mat_bytes(c->ldb, c->nrhs, c->z), "getrs B") ||
            !range(c->ipiv, (size_t)c->n * 4, "getrs ipiv") || !range(c->info, 4, "getrs info"))
            return;
        info = c->z ? LAPACKE_zgetrs_work(LAPACK_COL_MAJOR, "NTC"[c->flag], c->n, c->nrhs, ZP(c->A), c->lda, c->ipiv,
                                          ZP(c->B), c->ldb)
                    : LAPACKE_dgetrs_work(LAPACK_COL_MAJOR, c->flag ? 'T' : 'N', c->n, c->nrhs, c->A, c->lda, c->ipiv,
                                          c->B, c->ldb);
        break;
    case POTRF:
        if (!range(c->A, mat_bytes(c->lda, c->n, c->z), "potrf A") || !range(c->info, 4, "potrf info")) return;
        info = c->z ? LAPACKE_zpotrf_work(LAPACK_COL_MAJOR, c->flag ? 'U' : 'L', c->n, ZP(c->A), c->lda)
                    : LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, c->flag ? 'U' : 'L', c->n, c->A, c->lda);
        break;
    case POTRS:
        if (!range(c->A, mat_bytes(c->lda, c->n, c->z), "potrs A") ||
            !range(c->B, mat_bytes(c->ldb, c->nrhs, c->z), "potrs B") || !range(c->info, 4, "potrs info"))
            return;
        info = c->z ? LAPACKE_zpotrs_work(LAPACK_COL_MAJOR, c->flag ? 'U' : 'L', c->n, c->nrhs, ZP(c->A), c->lda,
                                          ZP(c->B), c->ldb)
                    : LAPACKE_dpotrs_work(LAPACK_COL_MAJOR, c->flag ? 'U' : 'L', c->n, c->nrhs, c->A, c->lda, c->B,
                                          c->ldb);
        break;
    case GEQRF: {
        int k = c->m < c->n ? c->m : c->n;
        if (!range(c->A, mat_bytes(c->lda, c->n, c->z), "geqrf A") ||
            !range(c->tau, (size_t)k * 8 * (c->z ? 2 : 1), "geqrf tau") || !range(c->info, 4, "geqrf info"))
            return;
        info = !k ? 0
             : c->z ? LAPACKE_zgeqrf(LAPACK_COL_MAJOR, c->m, c->n, ZP(c->A), c->lda, ZP(c->tau))
                    : LAPACKE_dgeqrf(LAPACK_COL_MAJOR, c->m, c->n, c->A, c->lda, c->tau);
        break;
    }
    case ORGQR:
        if (!range(c->A, mat_bytes(c->lda, c->n, c->z), "orgqr A") ||
            !range(c->tau, (size_t)c->nrhs * 8 * (c->z ? 2 : 1), "orgqr tau") || !range(c->info, 4, "orgqr info"))
            return;
        info = c->z ? LAPACKE_zungqr(LAPACK_COL_MAJOR, c->m, c->n, c->nrhs, ZP(c->A), c->lda, ZP(c->tau))
                    : LAPACKE_dorgqr(LAPACK_COL_MAJOR, c->m, c->n, c->nrhs, c->A, c->lda, c->tau);
        break;
    case ORMQR: {
        int r = c->flag2 ? c->n : c->m;   // flag2: side right
        (void)r;
        if (!range(c->A, mat_bytes(c->lda, c->nrhs, c->z), "ormqr A") ||
            !range(c->tau, (size_t)c->nrhs * 8 * (c->z ? 2 : 1), "ormqr tau") ||
            !range(c->B, mat_bytes(c->ldb, c->n, c->z), "ormqr C") || !range(c->info, 4, "ormqr info"))
            return;
        info = c->z ? LAPACKE_zunmqr(LAPACK_COL_MAJOR, c->flag2 ? 'R' : 'L', c->flag ? 'C' : 'N', c->m, c->n, c->nrhs,
                                     ZP(c->A), c->lda, ZP(c->tau), ZP(c->B), c->ldb)
                    : LAPACKE_dormqr(LAPACK_COL_MAJOR, c->flag2 ? 'R' : 'L', c->flag ? 'T' : 'N', c->m, c->n, c->nrhs,
                                     c->A, c->lda, c->tau, c->B, c->ldb);
        break;
    }
    case SYEVD:
        if (!range(c->A, mat_bytes(c->lda, c->n, c->z), "syevd A") || !range(c->B, (size_t)c->n * 8, "syevd W") ||
            !range(c->info, 4, "syevd info"))
            return;
        info = c->z ? LAPACKE_zheevd(LAPACK_COL_MAJOR, c->flag2 ? 'V' : 'N', c->flag ? 'U' : 'L', c->n, ZP(c->A),
                                     c->lda, c->B)
                    : LAPACKE_dsyevd(LAPACK_COL_MAJOR, c->flag2 ? 'V' : 'N', c->flag ? 'U' : 'L', c->n, c->A, c->lda,
                                     c->B);
        break;
    case GESVD: {
        int k = c->m < c->n ? c->m : c->n;
        int ucols = c->ju == 'A' ? c->m : k;
        if (!range(c->A, mat_bytes(c->lda, c->n, c->z), "gesvd A") || !range(c->B, (size_t)k * 8, "gesvd S") ||
            (c->ju != 'N' && !range(c->U, mat_bytes(c->ldu, ucols, c->z), "gesvd U")) ||
            (c->jv != 'N' && !range(c->VT, mat_bytes(c->ldvt, c->n, c->z), "gesvd VT")) ||
            !range(c->info, 4, "gesvd info"))
            return;
        double dummy[2] = { 0, 0 };
        double *superb = new double[k > 1 ? k : 1];
        info = c->z ? LAPACKE_zgesvd(LAPACK_COL_MAJOR, c->ju, c->jv, c->m, c->n, ZP(c->A), c->lda, c->B,
                                     ZP(c->U ? c->U : dummy), c->ldu, ZP(c->VT ? c->VT : dummy), c->ldvt, superb)
                    : LAPACKE_dgesvd(LAPACK_COL_MAJOR, c->ju, c->jv, c->m, c->n, c->A, c->lda, c->B,
                                     c->U ? c->U : dummy, c->ldu, c->VT ? c->VT : dummy, c->ldvt, superb);
        delete[] superb;
        break;
    }
    case SYTRF:    // flag: uplo (cuBLAS's), ipiv n
        if (!range(c->A, mat_bytes(c->lda, c->n, c->z), "sytrf A") || !range(c->ipiv, (size_t)c->n * 4, "sytrf ipiv") ||
            !range(c->info, 4, "sytrf info"))
            return;
        info = c->z ? LAPACKE_zsytrf(LAPACK_COL_MAJOR, c->flag ? 'U' : 'L', c->n, ZP(c->A), c->lda, c->ipiv)
                    : LAPACKE_dsytrf(LAPACK_COL_MAJOR, c->flag ? 'U' : 'L', c->n, c->A, c->lda, c->ipiv);
        break;
    case GEEV: {   // flag2: jobvr; B = W ((WR, WI) for a real A, complex n for a complex one); U = VR (ldu)
        size_t wbytes = (size_t)c->n * 16;
        if (!range(c->A, mat_bytes(c->lda, c->n, c->z), "geev A") || !range(c->B, wbytes, "geev W") ||
            (c->flag2 && !range(c->U, mat_bytes(c->ldu, c->n, c->z), "geev VR")) || !range(c->info, 4, "geev info"))
            return;
        double dummy[2] = { 0, 0 };
        double *vr = c->flag2 ? c->U : dummy;
        char jv = c->flag2 ? 'V' : 'N';
        info = c->z ? LAPACKE_zgeev(LAPACK_COL_MAJOR, 'N', jv, c->n, ZP(c->A), c->lda, ZP(c->B), ZP(dummy), 1, ZP(vr),
                                    c->ldu)
                    : LAPACKE_dgeev(LAPACK_COL_MAJOR, 'N', jv, c->n, c->A, c->lda, c->B, c->B + c->n, dummy, 1, vr,
                                    c->ldu);
        break;
    }
    }
    *c->info = info;
}

int enqueue(void *h, const call &c0) {
    if (!h) return ST_NOT_INITIALIZED;
    call *c = new call(c0);
    int e = cudaemu_enqueue_host(((handle *)h)->stream, "cusolver", run, c, [](void *p) { delete (call *)p; });
    return e ? ST_EXECUTION_FAILED : ST_OK;
}

bool bad_ld(int ld, int rows) { return ld < (rows > 1 ? rows : 1); }

}  // namespace

// The D and Z entry points share one body each (z: the complex128 routine).
static int la_getrf_bufferSize(bool z, void *h, int m, int n, double *A, int lda, int *lwork) {
    (void)z;
    (void)A;
    if (!h) return ST_NOT_INITIALIZED;
    if (m < 0 || n < 0 || bad_ld(lda, m) || !lwork) return ST_INVALID_VALUE;
    *lwork = m * (n > 0 ? 1 : 0) + 1;
    return ST_OK;
}

static int la_getrf(bool z, void *h, int m, int n, double *A, int lda, double *work, int *ipiv, int *info) {
    if (m < 0 || n < 0 || bad_ld(lda, m) || !work || !ipiv || !info) return ST_INVALID_VALUE;
    call c = { GETRF, m, n, 0, lda, 0, 0, A, nullptr, ipiv, info };
    c.z = z;
    return enqueue(h, c);
}

static int la_getrs(bool z, void *h, int trans, int n, int nrhs, const double *A, int lda, const int *ipiv, double *B,
                     int ldb, int *info) {
    if (n < 0 || nrhs < 0 || trans < 0 || trans > (z ? 2 : 1) || bad_ld(lda, n) || bad_ld(ldb, n) || !info)
        return ST_INVALID_VALUE;
    call c = { GETRS, n, n, nrhs, lda, ldb, trans, (double *)A, B, (int *)ipiv, info };
    c.z = z;
    return enqueue(h, c);
}

static int la_potrf_bufferSize(bool z, void *h, int uplo, int n, double *A, int lda, int *lwork) {
    (void)z;
    (void)A;
    if (!h) return ST_NOT_INITIALIZED;
    if (n < 0 || (uplo != 0 && uplo != 1) || bad_ld(lda, n) || !lwork) return ST_INVALID_VALUE;
    *lwork = n + 1;
    return ST_OK;
}

static int la_potrf(bool z, void *h, int uplo, int n, double *A, int lda, double *work, int lwork, int *info) {
    if (n < 0 || (uplo != 0 && uplo != 1) || bad_ld(lda, n) || !work || lwork < 1 || !info) return ST_INVALID_VALUE;
    if (!cudaemu_device_range_ok(work, (size_t)lwork * sizeof(double) * (z ? 2 : 1))) return ST_INVALID_VALUE;
    call c = { POTRF, n, n, 0, lda, 0, uplo, A, nullptr, nullptr, info };
    c.z = z;
    return enqueue(h, c);
}

static int la_potrs(bool z, void *h, int uplo, int n, int nrhs, const double *A, int lda, double *B, int ldb,
                    int *info) {
    if (n < 0 || nrhs < 0 || (uplo != 0 && uplo != 1) || bad_ld(lda, n) || bad_ld(ldb, n) || !info)
        return ST_INVALID_VALUE;
    call c = { POTRS, n, n, nrhs, lda, ldb, uplo, (double *)A, B, nullptr, info };
    c.z = z;
    return enqueue(h, c);
}

static int la_geqrf_bufferSize(bool z, void *h, int m, int n, double *A, int lda, int *lwork) {
    (void)z;
    (void)A;
    if (!h) return ST_NOT_INITIALIZED;
    if (m < 0 || n < 0 || bad_ld(lda, m) || !lwork) return ST_INVALID_VALUE;
    *lwork = n + 1;
    return ST_OK;
}

static int la_geqrf(bool z, void *h, int m, int n, double *A, int lda, double *tau, double *work, int lwork,
                    int *info) {
    if (m < 0 || n < 0 || bad_ld(lda, m) || !work || lwork < 1 || !info) return ST_INVALID_VALUE;
    call c = { GEQRF, m, n, 0, lda, 0, 0, A, nullptr, nullptr, info };
    c.tau = tau;
    c.z = z;
    return enqueue(h, c);
}

static int la_orgqr_bufferSize(bool z, void *h, int m, int n, int k, const double *A, int lda,
                               const double *tau, int *lwork) {
    (void)z;
    (void)A; (void)tau;
    if (!h) return ST_NOT_INITIALIZED;
    if (m < 0 || n < 0 || n > m || k < 0 || k > n || bad_ld(lda, m) || !lwork) return ST_INVALID_VALUE;
    *lwork = n + 1;
    return ST_OK;
}

static int la_orgqr(bool z, void *h, int m, int n, int k, double *A, int lda, const double *tau, double *work,
                    int lwork,
                     int *info) {
    if (m < 0 || n < 0 || n > m || k < 0 || k > n || bad_ld(lda, m) || !work || lwork < 1 || !info)
        return ST_INVALID_VALUE;
    call c = { ORGQR, m, n, k, lda, 0, 0, A, nullptr, nullptr, info };
    c.tau = (double *)tau;
    c.z = z;
    return enqueue(h, c);
}

static int la_ormqr_bufferSize(bool z, void *h, int side, int trans, int m, int n, int k, const double *A, int lda,
                                const double *tau, const double *C, int ldc, int *lwork) {
    (void)z;
    (void)A; (void)tau; (void)C;
    if (!h) return ST_NOT_INITIALIZED;
    int r = side ? n : m;
    if ((side != 0 && side != 1) || (trans != 0 && trans != (z ? 2 : 1)) || m < 0 || n < 0 || k < 0 || k > r ||
        bad_ld(lda, r) || bad_ld(ldc, m) || !lwork)
        return ST_INVALID_VALUE;
    *lwork = (side ? m : n) + 1;
    return ST_OK;
}

static int la_ormqr(bool z, void *h, int side, int trans, int m, int n, int k, const double *A, int lda,
                    const double *tau,
                     double *C, int ldc, double *work, int lwork, int *info) {
    int r = side ? n : m;
    if ((side != 0 && side != 1) || (trans != 0 && trans != (z ? 2 : 1)) || m < 0 || n < 0 || k < 0 || k > r ||
        bad_ld(lda, r) || bad_ld(ldc, m) || !work || lwork < 1 || !info)
        return ST_INVALID_VALUE;
    call c = { ORMQR, m, n, k, lda, ldc, trans != 0, (double *)A, C, nullptr, info };
    c.flag2 = side;
    c.tau = (double *)tau;
    c.z = z;
    return enqueue(h, c);
}

static int la_syevd_bufferSize(bool z, void *h, int jobz, int uplo, int n, const double *A, int lda, const double *W,
                                int *lwork) {
    (void)z;
    (void)A; (void)W;
    if (!h) return ST_NOT_INITIALIZED;
    if ((jobz != 0 && jobz != 1) || (uplo != 0 && uplo != 1) || n < 0 || bad_ld(lda, n) || !lwork)
        return ST_INVALID_VALUE;
    *lwork = 2 * n + 1;
    return ST_OK;
}

static int la_syevd(bool z, void *h, int jobz, int uplo, int n, double *A, int lda, double *W, double *work, int lwork,
                     int *info) {
    if ((jobz != 0 && jobz != 1) || (uplo != 0 && uplo != 1) || n < 0 || bad_ld(lda, n) || !work || lwork < 1 ||
        !info)
        return ST_INVALID_VALUE;
    call c = { SYEVD, n, n, 0, lda, 0, uplo, A, W, nullptr, info };
    c.flag2 = jobz;
    c.z = z;
    return enqueue(h, c);
}

static int la_gesvd_bufferSize(bool z, void *h, int m, int n, int *lwork) {
    (void)z;
    if (!h) return ST_NOT_INITIALIZED;
    if (m < 0 || n < 0 || m < n || !lwork) return ST_INVALID_VALUE;
    *lwork = 5 * m + 1;
    return ST_OK;
}

// cuSOLVER's gesvd: m >= n only; jobu A/S/O/N, jobvt A/S/O/N (O is not referenced here: refused)
static int la_gesvd(bool z, void *h, signed char jobu, signed char jobvt, int m, int n, double *A, int lda, double *S,
                     double *U, int ldu, double *VT, int ldvt, double *work, int lwork, double *rwork, int *info) {
    (void)rwork;
    auto ok_job = [](signed char j) { return j == 'A' || j == 'S' || j == 'N'; };
    if (m < 0 || n < 0 || m < n || !ok_job(jobu) || !ok_job(jobvt) || bad_ld(lda, m) || !work || lwork < 1 || !info ||
        (jobu != 'N' && (!U || bad_ld(ldu, m))) || (jobvt != 'N' && (!VT || bad_ld(ldvt, n))))
        return ST_INVALID_VALUE;
    call c = { GESVD, m, n, 0, lda, 0, 0, A, S, nullptr, info };
    c.U = U;
    c.VT = VT;
    c.ldu = ldu;
    c.ldvt = ldvt;
    c.ju = (char)jobu;
    c.jv = (char)jobvt;
    c.z = z;
    return enqueue(h, c);
}


extern "C" {

int cusolverDnCreate(void **out) {
    LAPACKE_set_nancheck(0);   // NaNs go through, as on a GPU
    *out = new handle{ nullptr };
    return ST_OK;
}

int cusolverDnDestroy(void *h) {
    delete (handle *)h;
    return ST_OK;
}

int cusolverDnSetStream(void *h, cudaStream_t s) {
    if (!h) return ST_NOT_INITIALIZED;
    ((handle *)h)->stream = s;
    return ST_OK;
}

int cusolverDnDgetrf_bufferSize(void *h, int m, int n, double *A, int lda, int *lwork) {
    return la_getrf_bufferSize(false, h, m, n, A, lda, lwork);
}
int cusolverDnZgetrf_bufferSize(void *h, int m, int n, double *A, int lda, int *lwork) {
    return la_getrf_bufferSize(true, h, m, n, A, lda, lwork);
}
int cusolverDnDgetrf(void *h, int m, int n, double *A, int lda, double *work, int *ipiv, int *info) {
    return la_getrf(false, h, m, n, A, lda, work, ipiv, info);
}
int cusolverDnZgetrf(void *h, int m, int n, double *A, int lda, double *work, int *ipiv, int *info) {
    return la_getrf(true, h, m, n, A, lda, work, ipiv, info);
}
int cusolverDnDgetrs(void *h, int trans, int n, int nrhs, const double *A, int lda, const int *ipiv,
                     double *B, int ldb, int *info) {
    return la_getrs(false, h, trans, n, nrhs, A, lda, ipiv, B, ldb, info);
}
int cusolverDnZgetrs(void *h, int trans, int n, int nrhs, const double *A, int lda, const int *ipiv,
                     double *B, int ldb, int *info) {
    return la_getrs(true, h, trans, n, nrhs, A, lda, ipiv, B, ldb, info);
}
int cusolverDnDpotrf_bufferSize(void *h, int uplo, int n, double *A, int lda, int *lwork) {
    return la_potrf_bufferSize(false, h, uplo, n, A, lda, lwork);
}
int cusolverDnZpotrf_bufferSize(void *h, int uplo, int n, double *A, int lda, int *lwork) {
    return la_potrf_bufferSize(true, h, uplo, n, A, lda, lwork);
}
int cusolverDnDpotrf(void *h, int uplo, int n, double *A, int lda, double *work, int lwork, int *info) {
    return la_potrf(false, h, uplo, n, A, lda, work, lwork, info);
}
int cusolverDnZpotrf(void *h, int uplo, int n, double *A, int lda, double *work, int lwork, int *info) {
    return la_potrf(true, h, uplo, n, A, lda, work, lwork, info);
}
int cusolverDnDpotrs(void *h, int uplo, int n, int nrhs, const double *A, int lda, double *B, int ldb, int *info) {
    return la_potrs(false, h, uplo, n, nrhs, A, lda, B, ldb, info);
}
int cusolverDnZpotrs(void *h, int uplo, int n, int nrhs, const double *A, int lda, double *B, int ldb, int *info) {
    return la_potrs(true, h, uplo, n, nrhs, A, lda, B, ldb, info);
}
int cusolverDnDgeqrf_bufferSize(void *h, int m, int n, double *A, int lda, int *lwork) {
    return la_geqrf_bufferSize(false, h, m, n, A, lda, lwork);
}
int cusolverDnZgeqrf_bufferSize(void *h, int m, int n, double *A, int lda, int *lwork) {
    return la_geqrf_bufferSize(true, h, m, n, A, lda, lwork);
}
int cusolverDnDgeqrf(void *h, int m, int n, double *A, int lda, double *tau, double *work, int lwork, int *info) {
    return la_geqrf(false, h, m, n, A, lda, tau, work, lwork, info);
}
int cusolverDnZgeqrf(void *h, int m, int n, double *A, int lda, double *tau, double *work, int lwork, int *info) {
    return la_geqrf(true, h, m, n, A, lda, tau, work, lwork, info);
}
int cusolverDnDorgqr_bufferSize(void *h, int m, int n, int k, const double *A, int lda, const double *tau, int *lwork) {
    return la_orgqr_bufferSize(false, h, m, n, k, A, lda, tau, lwork);
}
int cusolverDnZungqr_bufferSize(void *h, int m, int n, int k, const double *A, int lda, const double *tau, int *lwork) {
    return la_orgqr_bufferSize(true, h, m, n, k, A, lda, tau, lwork);
}
int cusolverDnDorgqr(void *h, int m, int n, int k, double *A, int lda, const double *tau, double *work,
                     int lwork, int *info) {
    return la_orgqr(false, h, m, n, k, A, lda, tau, work, lwork, info);
}
int cusolverDnZungqr(void *h, int m, int n, int k, double *A, int lda, const double *tau, double *work,
                     int lwork, int *info) {
    return la_orgqr(true, h, m, n, k, A, lda, tau, work, lwork, info);
}
int cusolverDnDormqr_bufferSize(void *h, int side, int trans, int m, int n, int k, const double *A, int lda,
                                const double *tau, const double *C, int ldc, int *lwork) {
    return la_ormqr_bufferSize(false, h, side, trans, m, n, k, A, lda, tau, C, ldc, lwork);
}
int cusolverDnZunmqr_bufferSize(void *h, int side, int trans, int m, int n, int k, const double *A, int lda,
                                const double *tau, const double *C, int ldc, int *lwork) {
    return la_ormqr_bufferSize(true, h, side, trans, m, n, k, A, lda, tau, C, ldc, lwork);
}
int cusolverDnDormqr(void *h, int side, int trans, int m, int n, int k, const double *A, int lda,
                     const double *tau, double *C, int ldc, double *work, int lwork, int *info) {
    return la_ormqr(false, h, side, trans, m, n, k, A, lda, tau, C, ldc, work, lwork, info);
}
int cusolverDnZunmqr(void *h, int side, int trans, int m, int n, int k, const double *A, int lda,
                     const double *tau, double *C, int ldc, double *work, int lwork, int *info) {
    return la_ormqr(true, h, side, trans, m, n, k, A, lda, tau, C, ldc, work, lwork, info);
}
int cusolverDnDsyevd_bufferSize(void *h, int jobz, int uplo, int n, const double *A, int lda,
                                const double *W, int *lwork) {
    return la_syevd_bufferSize(false, h, jobz, uplo, n, A, lda, W, lwork);
}
int cusolverDnZheevd_bufferSize(void *h, int jobz, int uplo, int n, const double *A, int lda,
                                const double *W, int *lwork) {
    return la_syevd_bufferSize(true, h, jobz, uplo, n, A, lda, W, lwork);
}
int cusolverDnDsyevd(void *h, int jobz, int uplo, int n, double *A, int lda, double *W, double *work,
                     int lwork, int *info) {
    return la_syevd(false, h, jobz, uplo, n, A, lda, W, work, lwork, info);
}
int cusolverDnZheevd(void *h, int jobz, int uplo, int n, double *A, int lda, double *W, double *work,
                     int lwork, int *info) {
    return la_syevd(true, h, jobz, uplo, n, A, lda, W, work, lwork, info);
}
int cusolverDnDgesvd_bufferSize(void *h, int m, int n, int *lwork) {
    return la_gesvd_bufferSize(false, h, m, n, lwork);
}
int cusolverDnZgesvd_bufferSize(void *h, int m, int n, int *lwork) {
    return la_gesvd_bufferSize(true, h, m, n, lwork);
}
int cusolverDnDgesvd(void *h, signed char jobu, signed char jobvt, int m, int n, double *A, int lda,
                     double *S, double *U, int ldu, double *VT, int ldvt, double *work, int lwork,
                     double *rwork, int *info) {
    return la_gesvd(false, h, jobu, jobvt, m, n, A, lda, S, U, ldu, VT, ldvt, work, lwork, rwork, info);
}
int cusolverDnZgesvd(void *h, signed char jobu, signed char jobvt, int m, int n, double *A, int lda,
                     double *S, double *U, int ldu, double *VT, int ldvt, double *work, int lwork,
                     double *rwork, int *info) {
    return la_gesvd(true, h, jobu, jobvt, m, n, A, lda, S, U, ldu, VT, ldvt, work, lwork, rwork, info);
}

// sytrf (symmetric Bunch-Kaufman, LAPACK's ipiv; no Hermitian variant in cuSOLVER)
static int la_sytrf_bufferSize(bool z, void *h, int n, double *A, int lda, int *lwork) {
    (void)z; (void)A;
    if (!h) return ST_NOT_INITIALIZED;
    if (n < 0 || bad_ld(lda, n) || !lwork) return ST_INVALID_VALUE;
    *lwork = 64 * (n > 0 ? n : 1);
    return ST_OK;
}

static int la_sytrf(bool z, void *h, int uplo, int n, double *A, int lda, int *ipiv, double *work, int lwork,
                    int *info) {
    if (n < 0 || (uplo != 0 && uplo != 1) || bad_ld(lda, n) || !ipiv || !work || lwork < 1 || !info)
        return ST_INVALID_VALUE;
    if (!cudaemu_device_range_ok(work, (size_t)lwork * sizeof(double) * (z ? 2 : 1))) return ST_INVALID_VALUE;
    call c = { SYTRF, n, n, 0, lda, 0, uplo, A, nullptr, ipiv, info };
    c.z = z;
    return enqueue(h, c);
}

extern "C" {
int cusolverDnDsytrf_bufferSize(void *h, int n, double *A, int lda, int *lwork) {
    return la_sytrf_bufferSize(false, h, n, A, lda, lwork);
}
int cusolverDnZsytrf_bufferSize(void *h, int n, double *A, int lda, int *lwork) {
    return la_sytrf_bufferSize(true, h, n, A, lda, lwork);
}
int cusolverDnDsytrf(void *h, int uplo, int n, double *A, int lda, int *ipiv, double *work, int lwork, int *info) {
    return la_sytrf(false, h, uplo, n, A, lda, ipiv, work, lwork, info);
}
int cusolverDnZsytrf(void *h, int uplo, int n, double *A, int lda, int *ipiv, double *work, int lwork, int *info) {
    return la_sytrf(true, h, uplo, n, A, lda, ipiv, work, lwork, info);
}
}  // extern "C"

// The 64-bit API's params object and general eigensolver (CUDA >= 12.6):
// double precision only (A, W, VR and compute all R_64F, or all C_64F), no
// left eigenvectors; the host workspace is asked for and checked, not used.
int cusolverDnCreateParams(void **p) {
    if (!p) return ST_INVALID_VALUE;
    *p = new int(0);
    return ST_OK;
}

int cusolverDnDestroyParams(void *p) {
    delete (int *)p;
    return ST_OK;
}

static bool geev_args(void *params, int jobvl, int jobvr, int64_t n, int dtA, int64_t lda, int dtW, int dtVL,
                      int dtVR, int64_t ldvr, int dtC) {
    const int R64 = 1, C64 = 5;
    return params && jobvl == 0 && (jobvr == 0 || jobvr == 1) && n >= 0 && n <= (1 << 20) &&
           (dtA == R64 || dtA == C64) && dtW == dtA && dtVL == dtA && dtVR == dtA && dtC == dtA &&
           lda >= (n > 1 ? n : 1) && (jobvr == 0 || ldvr >= (n > 1 ? n : 1)) && ldvr >= 1;
}

int cusolverDnXgeev_bufferSize(void *h, void *params, int jobvl, int jobvr, int64_t n, int dtA, const void *A,
                               int64_t lda, int dtW, const void *W, int dtVL, const void *VL, int64_t ldvl, int dtVR,
                               const void *VR, int64_t ldvr, int dtC, size_t *dev_bytes, size_t *host_bytes) {
    (void)A; (void)W; (void)VL; (void)ldvl; (void)VR;
    if (!h) return ST_NOT_INITIALIZED;
    if (!geev_args(params, jobvl, jobvr, n, dtA, lda, dtW, dtVL, dtVR, ldvr, dtC) || !dev_bytes || !host_bytes)
        return ST_INVALID_VALUE;
    *dev_bytes = (size_t)(4 * n + 1) * 16;
    *host_bytes = (size_t)(n + 1) * 16;
    return ST_OK;
}

int cusolverDnXgeev(void *h, void *params, int jobvl, int jobvr, int64_t n, int dtA, void *A, int64_t lda, int dtW,
                    void *W, int dtVL, void *VL, int64_t ldvl, int dtVR, void *VR, int64_t ldvr, int dtC,
                    void *dev_buf, size_t dev_bytes, void *host_buf, size_t host_bytes, int *info) {
    (void)VL; (void)ldvl;
    if (!geev_args(params, jobvl, jobvr, n, dtA, lda, dtW, dtVL, dtVR, ldvr, dtC) || !info || !W ||
        (jobvr && !VR) || !dev_buf || dev_bytes < (size_t)(4 * n + 1) * 16 || !host_buf ||
        host_bytes < (size_t)(n + 1) * 16)
        return ST_INVALID_VALUE;
    if (!cudaemu_device_range_ok(dev_buf, dev_bytes)) return ST_INVALID_VALUE;
    call c = { GEEV, (int)n, (int)n, 0, (int)lda, 0, 0, (double *)A, (double *)W, nullptr, info };
    c.flag2 = jobvr;
    c.U = (double *)VR;
    c.ldu = (int)ldvr;
    c.z = dtA == 5;
    return enqueue(h, c);
}

}  // extern "C"
