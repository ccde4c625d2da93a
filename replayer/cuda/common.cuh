// common.cuh — shared by the CUDA op-family files: status checks, views,
// the backend context (stream, scratch memory, cuBLAS) and the family entry
// points. Every CUDA call is checked and turned into an rgpu_status; nothing
// here aborts. Layering per family file: kernel -> launcher (takes the
// stream) -> extern "C" entry point.
#pragma once

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "backend.h"
}
#include "op/check.h"
#include "op/dtype.h"
#include "op/error.h"

#define RGPU_CUDA_TRY(expr, err, errlen)                                              \
    do {                                                                              \
        cudaError_t e_ = (expr);                                                      \
        if (e_ != cudaSuccess) {                                                      \
            if (err) snprintf(err, errlen, "%s: %s", #expr, cudaGetErrorString(e_));  \
            return e_ == cudaErrorMemoryAllocation ? RGPU_ERR_NOMEM : RGPU_ERR_EXEC;  \
        }                                                                             \
    } while (0)

// Check the launch that was just made (kernel launches return nothing).
#define RGPU_CUDA_CHECK_LAUNCH(err, errlen) RGPU_CUDA_TRY(cudaGetLastError(), err, errlen)

// The calling thread's counts (backend.h counters): every host wait of the
// backend goes through rgpu_cuda_stream_wait / rgpu_cuda_event_wait (counted
// when the work was unfinished, i.e. the host blocked), every cudaMalloc and
// cudaFree through the allocator (backend_cuda.cu).
extern thread_local rgpu_backend_counters rgpu_cuda_tcount;
static inline cudaError_t rgpu_cuda_stream_wait(cudaStream_t s) {
    if (cudaStreamQuery(s) != cudaSuccess) rgpu_cuda_tcount.host_waits++;   // unfinished (an error: the sync says)
    return cudaStreamSynchronize(s);
}
static inline cudaError_t rgpu_cuda_event_wait(cudaEvent_t e) {
    if (cudaEventQuery(e) != cudaSuccess) rgpu_cuda_tcount.host_waits++;
    return cudaEventSynchronize(e);
}

// ---------------------------------------------------------------------------
// cuBLAS, loaded at run time (dlopen "libcublas.so.13", then ".so.12", ".so")
// so the backend builds and links without cuBLAS headers or libraries. Enum
// arguments are passed as their int values (CUBLAS_OP_N = 0, CUBLAS_OP_T = 1;
// cudaDataType CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2,
// CUDA_R_16BF = 14; cublasComputeType_t CUBLAS_COMPUTE_32F = 68,
// CUBLAS_COMPUTE_32F_FAST_TF32 = 77, CUBLAS_COMPUTE_64F = 70;
// CUBLAS_GEMM_DEFAULT = -1; math mode CUBLAS_DEFAULT_MATH = 0,
// CUBLAS_PEDANTIC_MATH = 2). All return cublasStatus_t (0 = success).
struct rgpu_cublas {
    void *lib;                    // dlopen handle; NULL when cuBLAS is absent
    void *handle;                 // cublasHandle_t
    int (*Create)(void **handle);
    int (*Destroy)(void *handle);
    int (*SetStream)(void *handle, cudaStream_t s);
    int (*SetMathMode)(void *handle, int mode);
    int (*SetWorkspace)(void *handle, void *ws, size_t bytes);
    int (*SgemmStridedBatched)(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
                               const float *A, int lda, long long sA, const float *B, int ldb, long long sB,
                               const float *beta, float *C, int ldc, long long sC, int batch);
    int (*DgemmStridedBatched)(void *h, int ta, int tb, int m, int n, int k, const double *alpha,
                               const double *A, int lda, long long sA, const double *B, int ldb, long long sB,
                               const double *beta, double *C, int ldc, long long sC, int batch);
    // cublasCgemmStridedBatched / cublasZgemmStridedBatched: alpha, beta, A, B, C
    // are cuComplex / cuDoubleComplex ((re, im) pairs of float / double)
    typedef int (*cz_gemm_fn)(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A,
                              int lda, long long sA, const void *B, int ldb, long long sB, const void *beta,
                              void *C, int ldc, long long sC, int batch);
    cz_gemm_fn CgemmStridedBatched, ZgemmStridedBatched;
    int (*GemmStridedBatchedEx)(void *h, int ta, int tb, int m, int n, int k, const void *alpha,
                                const void *A, int Atype, int lda, long long sA,
                                const void *B, int Btype, int ldb, long long sB, const void *beta,
                                void *C, int Ctype, int ldc, long long sC, int batch, int compute, int algo);
};

// cublas_loader.cu: finds and dlopens cuBLAS (see the file for where it
// looks; $RGPU_CUBLAS_PATH first) and fills the table, handle left NULL
// (backend_cuda.cu creates it on the backend's stream). false with the reason
// in why when absent; on success why names the library. unload dlcloses and
// zeroes the table.
extern "C" bool rgpu_cublas_load(rgpu_cublas *b, char *why, size_t whylen);
extern "C" void rgpu_cublas_unload(rgpu_cublas *b);

// ---------------------------------------------------------------------------
// cuSOLVER (dense), loaded at run time like cuBLAS, on first use by the
// linalg family (linalg.cu). Enums as ints: cublasFillMode_t LOWER = 0,
// UPPER = 1; cublasOperation_t N = 0, T = 1, C = 2; cublasSideMode_t LEFT = 0, RIGHT = 1;
// cusolverEigMode_t NOVECTOR = 0, VECTOR = 1. All return cusolverStatus_t
// (0 = success); devInfo and pivots are device int32.

// The D (double) and Z (complex128) routines: D's name, Z's name, their
// arguments. Z takes cuDoubleComplex arrays as double * (the same pointers);
// W, S, rwork real; trans/op also takes CUBLAS_OP_C = 2; work is lwork
// complex elements. Bunch-Kaufman LDL^T ('L' as uplo 0) with LAPACK's ipiv:
// cuSOLVER has no hetrf/sytrs. cusolver_loader.cu binds cusolverDn<name>.
#define RGPU_CUSOLVER_DZ(X) \
    X(Dgetrf_bufferSize, Zgetrf_bufferSize, (void *h, int m, int n, double *A, int lda, int *lwork)) \
    X(Dgetrf, Zgetrf, (void *h, int m, int n, double *A, int lda, double *work, int *ipiv, int *info)) \
    X(Dgetrs, Zgetrs, (void *h, int trans, int n, int nrhs, const double *A, int lda, const int *ipiv, \
      double *B, int ldb, int *info)) \
    X(Dpotrf_bufferSize, Zpotrf_bufferSize, (void *h, int uplo, int n, double *A, int lda, int *lwork)) \
    X(Dpotrf, Zpotrf, (void *h, int uplo, int n, double *A, int lda, double *work, int lwork, int *info)) \
    X(Dpotrs, Zpotrs, (void *h, int uplo, int n, int nrhs, const double *A, int lda, double *B, int ldb, \
      int *info)) \
    X(Dgeqrf_bufferSize, Zgeqrf_bufferSize, (void *h, int m, int n, double *A, int lda, int *lwork)) \
    X(Dgeqrf, Zgeqrf, (void *h, int m, int n, double *A, int lda, double *tau, double *work, int lwork, int *info)) \
    X(Dorgqr_bufferSize, Zungqr_bufferSize, (void *h, int m, int n, int k, const double *A, int lda, \
      const double *tau, int *lwork)) \
    X(Dorgqr, Zungqr, (void *h, int m, int n, int k, double *A, int lda, const double *tau, double *work, \
      int lwork, int *info)) \
    X(Dormqr_bufferSize, Zunmqr_bufferSize, (void *h, int side, int trans, int m, int n, int k, const double *A, \
      int lda, const double *tau, const double *C, int ldc, int *lwork)) \
    X(Dormqr, Zunmqr, (void *h, int side, int trans, int m, int n, int k, const double *A, int lda, \
      const double *tau, double *C, int ldc, double *work, int lwork, int *info)) \
    X(Dsyevd_bufferSize, Zheevd_bufferSize, (void *h, int jobz, int uplo, int n, const double *A, int lda, \
      const double *W, int *lwork)) \
    X(Dsyevd, Zheevd, (void *h, int jobz, int uplo, int n, double *A, int lda, double *W, double *work, \
      int lwork, int *info)) \
    X(Dgesvd_bufferSize, Zgesvd_bufferSize, (void *h, int m, int n, int *lwork)) \
    X(Dgesvd, Zgesvd, (void *h, signed char jobu, signed char jobvt, int m, int n, double *A, int lda, \
      double *S, double *U, int ldu, double *VT, int ldvt, double *work, int lwork, double *rwork, int *info)) \
    X(Dsytrf_bufferSize, Zsytrf_bufferSize, (void *h, int n, double *A, int lda, int *lwork)) \
    X(Dsytrf, Zsytrf, (void *h, int uplo, int n, double *A, int lda, int *ipiv, double *work, int lwork, \
      int *info))

struct rgpu_cusolver {
    void *lib;                    // dlopen handle; NULL when absent
    void *handle;                 // cusolverDnHandle_t
    bool tried;                   // load attempted (why says the outcome)
    char why[400];
    int (*Create)(void **handle);
    int (*Destroy)(void *handle);
    int (*SetStream)(void *handle, cudaStream_t s);
#define RGPU_CUSOLVER_FIELD_(d, z, args) int (*d) args; int (*z) args;
    RGPU_CUSOLVER_DZ(RGPU_CUSOLVER_FIELD_)
#undef RGPU_CUSOLVER_FIELD_
    // The 64-bit API's general eigensolver (CUDA >= 12.6), optional: NULL when
    // this cuSOLVER has none (linalg.eig then says so). cudaDataType as ints
    // (CUDA_R_64F = 1, CUDA_C_64F = 5); a real A with real W gives W = (WR, WI)
    // and VR in LAPACK's pair layout. params: created on first use;
    // hostbuf: the host workspace, kept (grown) until unload.
    int (*CreateParams)(void **params);
    int (*DestroyParams)(void *params);
    int (*Xgeev_bufferSize)(void *h, void *params, int jobvl, int jobvr, int64_t n, int dtA, const void *A,
                            int64_t lda, int dtW, const void *W, int dtVL, const void *VL, int64_t ldvl, int dtVR,
                            const void *VR, int64_t ldvr, int dtCompute, size_t *dev_bytes, size_t *host_bytes);
    int (*Xgeev)(void *h, void *params, int jobvl, int jobvr, int64_t n, int dtA, void *A, int64_t lda, int dtW,
                 void *W, int dtVL, void *VL, int64_t ldvl, int dtVR, void *VR, int64_t ldvr, int dtCompute,
                 void *dev_buf, size_t dev_bytes, void *host_buf, size_t host_bytes, int *info);
    void *params;
    void *hostbuf;
    size_t hostbuf_len;
};

// cusolver_loader.cu: finds and dlopens cuSOLVER ($RGPU_CUSOLVER_PATH, the
// folder cuBLAS came from, libcusolver.so.12/.so.11/.so, the toolkit, pip
// wheels) and fills the table, handle left NULL. false with the reason in
// why when absent; on success why names the library.
extern "C" bool rgpu_cusolver_load(rgpu_cusolver *s, const rgpu_cublas *blas, char *why, size_t whylen);
extern "C" void rgpu_cusolver_unload(rgpu_cusolver *s);

// ---------------------------------------------------------------------------
// cuDNN (legacy convolution and batch norm API, cuDNN 9 or 8), loaded at run
// time like cuBLAS, on the first convolution or batch norm (dnn.cuh): without
// it convolution runs on im2col + cuBLAS, batch norm on batchnorm.cu's kernels. Handles and descriptors are opaque pointers; enums are
// ints: cudnnDataType_t FLOAT = 0, DOUBLE = 1, HALF = 2, BFLOAT16 = 9;
// cudnnTensorFormat_t NCHW = 0, NHWC = 1; cudnnConvolutionMode_t
// CROSS_CORRELATION = 1; cudnnMathType_t DEFAULT = 0, TENSOR_OP = 1, FMA = 3;
// cudnnDeterminism_t DETERMINISTIC = 1. cudnnStatus_t 0 = success.
// Algorithm perf results (fwd, bwd data, bwd filter share the layout):
struct rgpu_cudnn_perf {
    int algo, status;
    float time;
    size_t memory;
    int determinism, math_type;
    int reserved[3];
};
struct rgpu_cudnn {
    void *lib;                    // dlopen handle; NULL when absent
    void *handle;                 // cudnnHandle_t on the backend's stream
    bool tried;                   // load attempted (why says the outcome)
    char why[400];
    void *cache;                  // conv.cu's algorithm cache (per shape)
    size_t (*GetVersion)(void);
    const char *(*GetErrorString)(int status);
    int (*Create)(void **handle);
    int (*Destroy)(void *handle);
    int (*SetStream)(void *handle, cudaStream_t s);
    int (*CreateTensorDescriptor)(void **d);
    int (*DestroyTensorDescriptor)(void *d);
    int (*SetTensorNdDescriptor)(void *d, int dtype, int nb_dims, const int *dims, const int *strides);
    int (*CreateFilterDescriptor)(void **d);
    int (*DestroyFilterDescriptor)(void *d);
    int (*SetFilterNdDescriptor)(void *d, int dtype, int format, int nb_dims, const int *dims);
    int (*CreateConvolutionDescriptor)(void **d);
    int (*DestroyConvolutionDescriptor)(void *d);
    int (*SetConvolutionNdDescriptor)(void *d, int n, const int *pad, const int *stride, const int *dilation, int mode,
                                      int compute_type);
    int (*SetConvolutionGroupCount)(void *d, int groups);
    int (*SetConvolutionMathType)(void *d, int math_type);
    // Get*Algorithm_v7(handle, the three operand descriptors in the order of
    // the call below, conv, requested, *returned, perf[requested])
    int (*GetConvolutionForwardAlgorithm_v7)(void *h, void *x, void *w, void *conv, void *y, int n, int *got,
                                             rgpu_cudnn_perf *perf);
    int (*GetConvolutionBackwardDataAlgorithm_v7)(void *h, void *w, void *dy, void *conv, void *dx, int n, int *got,
                                                  rgpu_cudnn_perf *perf);
    int (*GetConvolutionBackwardFilterAlgorithm_v7)(void *h, void *x, void *dy, void *conv, void *dw, int n, int *got,
                                                    rgpu_cudnn_perf *perf);
    // alpha/beta point at double for double data, at float otherwise
    int (*ConvolutionForward)(void *h, const void *alpha, void *xd, const void *x, void *wd, const void *w, void *conv,
                              int algo, void *ws, size_t ws_bytes, const void *beta, void *yd, void *y);
    int (*ConvolutionBackwardData)(void *h, const void *alpha, void *wd, const void *w, void *dyd, const void *dy,
                                   void *conv, int algo, void *ws, size_t ws_bytes, const void *beta, void *dxd, void *dx);
    int (*ConvolutionBackwardFilter)(void *h, const void *alpha, void *xd, const void *x, void *dyd, const void *dy,
                                     void *conv, int algo, void *ws, size_t ws_bytes, const void *beta, void *dwd,
                                     void *dw);
    // batch norm (mode: cudnnBatchNormMode_t; bnd: the (1, C, 1, 1) descriptor
    // DeriveBNTensorDescriptor makes; factor: the running stats' momentum;
    // save_invvar: 1 / sqrt(biased var + eps))
    int (*DeriveBNTensorDescriptor)(void *bnd, void *xd, int mode);
    int (*BatchNormalizationForwardTraining)(void *h, int mode, const void *alpha, const void *beta, void *xd,
                                             const void *x, void *yd, void *y, void *bnd, const void *scale,
                                             const void *bias, double factor, void *running_mean, void *running_var,
                                             double eps, void *save_mean, void *save_invvar);
    int (*BatchNormalizationForwardInference)(void *h, int mode, const void *alpha, const void *beta, void *xd,
                                              const void *x, void *yd, void *y, void *bnd, const void *scale,
                                              const void *bias, const void *mean, const void *var, double eps);
    int (*BatchNormalizationBackward)(void *h, int mode, const void *alpha_data, const void *beta_data,
                                      const void *alpha_param, const void *beta_param, void *xd, const void *x,
                                      void *dyd, const void *dy, void *dxd, void *dx, void *bnd, const void *scale,
                                      void *dscale, void *dbias, double eps, const void *save_mean,
                                      const void *save_invvar);
};

// cudnn_loader.cu: finds and dlopens cuDNN ($RGPU_CUDNN_PATH, the loader's
// search for libcudnn.so.9/.so.8/.so, the toolkit folders, pip wheels
// nvidia/{cu13,cudnn}/lib) and fills the table, handle left NULL. false with
// the reason in why when absent; on success why names the library.
extern "C" bool rgpu_cudnn_load(rgpu_cudnn *d, char *why, size_t whylen);
// Destroys the handle and the cache (conv.cu's rgpu_cuda_conv_cache_free), dlcloses.
extern "C" void rgpu_cudnn_unload(rgpu_cudnn *d);
extern "C" void rgpu_cuda_conv_cache_free(rgpu_cudnn *d);

// ---------------------------------------------------------------------------
// The backend context every family entry point receives.
struct rgpu_cuda_ctx {
    int device;
    cudaStream_t stream;          // all work of the backend goes here, in order
    rgpu_cublas blas;
    bool allow_tf32;              // false unless the client recorded that the user enabled it
    void *alloc_state;            // the caching allocator (backend_cuda.cu)
    bool capturing;               // a graph capture is recording this stream (backend.h graph_begin)
    rgpu_cusolver solver;         // loaded by the first linalg op (linalg.cu)
    void *pw_batch;               // pointwise launches held back to run as one (pointwise.cu)
    rgpu_cudnn dnn;               // loaded by the first convolution (conv.cu)
};

// 32-bit division by a fixed divisor d (0 < d < 2^31) for n < 2^31:
// q = (umulhi(n, mul) + n) >> shift, with shift = ceil(log2 d) and
// mul = floor(2^32 (2^shift - d) / d) + 1 (Granlund-Montgomery, ATen's
// IntDivider<unsigned int>): index math over dims without 64-bit divides.
static inline void rgpu_fastdiv_init(unsigned long long d, unsigned *mul, unsigned char *shift)
{
    unsigned sh = 0;
    while ((1ull << sh) < d) sh++;
    *shift = (unsigned char)sh;
    *mul = (unsigned)(((1ull << 32) * ((1ull << sh) - d)) / d + 1);
}
__host__ __device__ static __forceinline__ unsigned rgpu_fastdiv(unsigned n, unsigned mul, unsigned shift)
{
#ifdef __CUDA_ARCH__
    return (__umulhi(n, mul) + n) >> shift;
#else
    return (unsigned)((((unsigned long long)n * mul >> 32) + n) >> shift);
#endif
}
// The next digit of a row-major index walked from the last dim: *rem % size,
// and *rem becomes *rem / size.
__host__ __device__ static __forceinline__ long long rgpu_fastdiv_digit(unsigned &rem, unsigned mul, unsigned shift, unsigned size)
{
    unsigned q = rgpu_fastdiv(rem, mul, shift);
    long long id = (long long)(rem - q * size);
    rem = q;
    return id;
}

// Multi-tensor pointwise launches (pointwise.cu): consecutive pointwise and
// binary-arithmetic records over 1-d (coalesced) operands that touch disjoint
// memory (what a _foreach_* op becomes: one record per tensor of its lists)
// are held back and run as one kernel launch, like ATen's multi_tensor_apply;
// each element is computed by the same code as alone, so results are bitwise
// those of one launch per record. Every other entry point of the backend
// (another op's exec, upload, download, free, sync, graphs, destroy) runs the
// held launches first: rgpu_cuda_pw_flush, under the exec lock. A launch error
// of held work surfaces at that flush. RGPU_CUDA_BATCH=0 turns holding off.
extern "C" rgpu_status rgpu_cuda_pw_flush(rgpu_cuda_ctx *c, char *err, size_t errlen);
extern "C" void rgpu_cuda_pw_batch_free(rgpu_cuda_ctx *c);
// A 1-d cast among float32/float16/bfloat16 (n elements, byte strides) as a
// pointwise record, held like one (AMP's casts before each matmul come
// together): op_load_f32 then op_store_f32, cast_kernel's own values. *done
// false: another pair of dtypes, the caller casts.
extern "C" rgpu_status rgpu_cuda_pw_cast(rgpu_cuda_ctx *c, void *out, int dd, long long ost, const void *in, int sd,
                                         long long ist, long long n, bool *done, char *err, size_t errlen);
// A block of n bytes at p is freed: when held launches use it, it is given
// back after they are launched (true); false: free it now. (exec lock held)
extern "C" bool rgpu_cuda_pw_defer_free(rgpu_cuda_ctx *c, void *p, size_t n);
// Host -> device copy of n bytes (the held launches' arguments) through the
// backend's pinned staging buffers, in stream order; src may be reused at once.
extern "C" rgpu_status rgpu_cuda_upload_async(rgpu_cuda_ctx *c, void *dst, const void *src, size_t n, char *err,
                                              size_t errlen);

// Before an op's work that needs the host: a device-to-host copy it reads, a
// stream sync, a host-to-device copy from pageable memory. None of these can
// be recorded into a graph (and a sync on a capturing stream spoils the
// capture), so during a capture the op refuses with UNSUPPORTED and the
// session runs that template record by record. Put it before the first such
// call, after the early returns that need none.
#define RGPU_CUDA_NEEDS_HOST(c, what, err, errlen)                                            \
    do {                                                                                      \
        if ((c)->capturing) {                                                                 \
            if (err) snprintf(err, errlen, "%s needs the host (a read-back or a sync): it cannot be captured into a graph", what); \
            return RGPU_ERR_UNSUPPORTED;                                                      \
        }                                                                                     \
    } while (0)

// ---------------------------------------------------------------------------
// Device error words (backend.h err_new). A session's word lives in device
// memory; a data-dependent check (k_find_bad, nll's target check) flags each
// bad position with rgpu_dev_flag: the smallest serial wins (serials grow in
// stream order, so the first failing check of the session since the last
// wait), then the smallest position within it (integer atomicMin: the same
// answer in any thread order), as the cpu backend's first error. A one-thread
// finish kernel then writes the rest (op, value, message fields). Kernels that
// address memory by the checked data return at once while the word is set
// (rgpu_dev_failed): the outputs of a failed op, and of every op after it up
// to the wait, are poisoned by the session, never read.
struct rgpu_dev_word {
    unsigned long long seq, pos;     // ~0: none (reset with 0xff bytes)
    unsigned long long op;
    unsigned long long name;         // a host string literal's address
    long long value, bound;
    int kind, opcode, rec, dim;
    // a graph launch's call (err_call): the base of its relative serials and its record index
    unsigned long long call_base, call_op;
};
#define RGPU_DEV_WORD_RESET_BYTES (2 * sizeof(unsigned long long))

// The backend's handle (err_new): the word and its pinned host copy.
struct rgpu_cuda_err_slot {
    rgpu_dev_word *dev;
    rgpu_dev_word *host;
    bool fetched;                    // a copy into host is enqueued (err_fetch)
};

// What the finish kernel writes besides the value: everything known on the host.
struct rgpu_dev_site {
    unsigned long long seq, op, name;
    long long bound;
    int kind, opcode, rec, dim;
};

// A server switch read once: on unless the variable is set and starts with
// '0' (RGPU_CUDA_BATCH=0, ...); *cache starts at -1.
static inline bool rgpu_cuda_env_flag(int *cache, const char *name)
{
    if (*cache < 0) { const char *v = getenv(name); *cache = !(v && v[0] == '0'); }
    return *cache != 0;
}

// e's word when its checks may stay on the device (in a capture only with a
// relative serial, RGPU_DEV_SEQ_REL: an absolute one would be replayed stale);
// NULL: check on the host.
static inline rgpu_dev_word *rgpu_cuda_dev_word(const rgpu_cuda_ctx *c, const rgpu_exec *e)
{
    if (!e->dev_err || (c->capturing && !(e->dev_seq & RGPU_DEV_SEQ_REL))) return NULL;
    return ((const rgpu_cuda_err_slot *)e->dev_err)->dev;
}

static inline rgpu_dev_site rgpu_cuda_dev_site(const rgpu_exec *e, int kind, const char *name, int dim, long long bound)
{
    if (e->dev_checked) *e->dev_checked = true;   // the check is left to the word
    rgpu_dev_site s;
    s.seq = e->dev_seq; s.op = e->idx; s.name = (unsigned long long)(uintptr_t)name;
    s.bound = bound; s.kind = kind; s.opcode = e->op; s.rec = e->rec; s.dim = dim;
    return s;
}

// The serial a check runs with: relative ones count from the launch's call base.
__host__ __device__ __forceinline__ unsigned long long rgpu_dev_seq(const rgpu_dev_word *w, unsigned long long seq)
{
    return seq & RGPU_DEV_SEQ_REL ? w->call_base + (seq & ~RGPU_DEV_SEQ_REL) : seq;
}

// Flags position pos as bad: into a plain slot (seq 0: the host path's
// scratch, atomicMin) or into a word for check serial seq.
__device__ __forceinline__ void rgpu_dev_flag(unsigned long long *slot, unsigned long long seq, unsigned long long pos)
{
    if (!seq) { atomicMin(slot, pos); return; }
    rgpu_dev_word *w = (rgpu_dev_word *)slot;
    seq = rgpu_dev_seq(w, seq);
    if (atomicMin(&w->seq, seq) >= seq) atomicMin(&w->pos, pos);   // an earlier check's failure stays
}

// The word holds check s's failure (a finish kernel's test).
__device__ __forceinline__ bool rgpu_dev_mine(const rgpu_dev_word *w, const rgpu_dev_site &s)
{
    return w->seq == rgpu_dev_seq(w, s.seq);
}

__device__ __forceinline__ bool rgpu_dev_failed(const rgpu_dev_word *w)
{
    return w && *(volatile const unsigned long long *)&w->seq != ~0ull;
}

// The finish of check s.seq (one thread): the fields the host reads, when
// that check is the one the word holds.
__device__ __forceinline__ void rgpu_dev_finish(rgpu_dev_word *w, const rgpu_dev_site &s, long long value)
{
    w->op = s.seq & RGPU_DEV_SEQ_REL ? w->call_op : s.op;
    w->name = s.name; w->value = value; w->bound = s.bound;
    w->kind = s.kind; w->opcode = s.opcode; w->rec = s.rec; w->dim = s.dim;
}

// Device scratch from the caching allocator, valid for the current op; freed
// with rgpu_cuda_scratch_free (stream-ordered: safe to free right after the
// launches that use it). NULL on out of memory.
extern "C" void *rgpu_cuda_scratch(rgpu_cuda_ctx *c, size_t nbytes);
extern "C" void rgpu_cuda_scratch_free(rgpu_cuda_ctx *c, void *p);

// ---------------------------------------------------------------------------
// Views as kernels see them: sizes/strides by value, up to RGPU_MAX_DIMS.
struct rgpu_cuda_view {
    void *data;
    int ndim;
    long long sizes[RGPU_MAX_DIMS];
    long long strides[RGPU_MAX_DIMS];
};

static inline rgpu_cuda_view rgpu_cuda_view_of(const rgpu_view *v) {
    rgpu_cuda_view r;
    r.data = v->data;
    r.ndim = v->ndim;
    for (int d = 0; d < v->ndim; d++) { r.sizes[d] = v->sizes[d]; r.strides[d] = v->strides[d]; }
    return r;
}

// Element offset of linear index i, row-major over v's leading nd dims
// (a batch index when the trailing dims are a matrix).
__device__ inline long long rgpu_cuda_offset_lead(const rgpu_cuda_view &v, int nd, long long i) {
    long long off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        long long s = v.sizes[d];
        off += (i % s) * v.strides[d];
        i /= s;
    }
    return off;
}

// Element offset of linear index i (row-major over sizes) in view v.
__device__ inline long long rgpu_cuda_offset(const rgpu_cuda_view &v, long long i) {
    return rgpu_cuda_offset_lead(v, v.ndim, i);
}

// ---------------------------------------------------------------------------
// Op families: one file (or a few) each, mirroring replayer/cpu/. Which
// family runs an op is ops.def's FAMILY column: backend_cuda.cu dispatches
// through the generated switch replayer/cuda/op_dispatch_cuda.inc.
#define RGPU_CUDA_FAMILY(name) \
    extern "C" rgpu_status rgpu_cuda_##name##_exec(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
RGPU_CUDA_FAMILY(copy)       // copy.cu: COPY (strided, broadcast, cast), FULL, ARANGE
RGPU_CUDA_FAMILY(pointwise)  // pointwise.cu: add/sub/mul/div + every pointwise op of ops.def
RGPU_CUDA_FAMILY(reduce)     // reduce.cu, softmax.cu, norm.cu, loss.cu: sum/mean + the reduce2 ops
RGPU_CUDA_FAMILY(dense)      // matmul.cu (cuBLAS), conv.cu, batchnorm.cu, pool.cu
RGPU_CUDA_FAMILY(index)      // index.cu, index_data.cu, random.cu
RGPU_CUDA_FAMILY(amp)        // amp.cu: GradScaler's AMP_UNSCALE, AMP_UPDATE_SCALE
RGPU_CUDA_FAMILY(sort)       // sort.cu: sort, mode, cummax/cummin/logcumsumexp/cumprod, searchsorted, histc
RGPU_CUDA_FAMILY(linalg)     // linalg.cu (cuSOLVER): cholesky, LU, solves, inverse, det
RGPU_CUDA_FAMILY(fft)        // fft.cu (cuFFT): _fft_c2c, _fft_r2c, _fft_c2r
#undef RGPU_CUDA_FAMILY
