// backend_cuda.cu — the CUDA backend: device memory, copies, op dispatch.
//
// State of this backend: memory, uploads/downloads, sync and FULL/EMPTY run
// on the GPU; every other compute op reports unsupported (supports() tells
// the truth, and the handshake passes it to the client), so --backend auto
// keeps using cpu until the op table is covered (see issue "CUDA backend").
#include "common.cuh"

#include <stdlib.h>
#include <string.h>

typedef rgpu_cuda_ctx cuda_ctx;

static cuda_ctx *ctx_of(rgpu_backend *b) { return (cuda_ctx *)b->ctx; }

extern "C" void *rgpu_cuda_scratch(rgpu_cuda_ctx *c, size_t nbytes) {
    (void)c;
    void *p = NULL;
    if (cudaMalloc(&p, nbytes ? nbytes : 1) != cudaSuccess) { cudaGetLastError(); return NULL; }
    return p;
}
extern "C" void rgpu_cuda_scratch_free(rgpu_cuda_ctx *c, void *p) {
    cudaStreamSynchronize(c->stream);
    cudaFree(p);
}

struct family { bool (*owns)(int); rgpu_status (*exec)(rgpu_cuda_ctx *, const rgpu_exec *, char *, size_t); };
static const family families[] = {
    { rgpu_cuda_copy_owns, rgpu_cuda_copy_exec },
    { rgpu_cuda_pointwise_owns, rgpu_cuda_pointwise_exec },
    { rgpu_cuda_reduce_owns, rgpu_cuda_reduce_exec },
    { rgpu_cuda_dense_owns, rgpu_cuda_dense_exec },
    { rgpu_cuda_index_owns, rgpu_cuda_index_exec },
};
static const family *family_of(int op) {
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (families[i].owns(op)) return &families[i];
    return NULL;
}

static void *cu_alloc(rgpu_backend *b, size_t nbytes) {
    (void)b;
    void *p = NULL;
    if (cudaMalloc(&p, nbytes ? nbytes : 1) != cudaSuccess) { cudaGetLastError(); return NULL; }
    return p;
}
static void cu_free(rgpu_backend *b, void *p) {
    cudaStreamSynchronize(ctx_of(b)->stream);
    cudaFree(p);
}
static rgpu_status cu_upload(rgpu_backend *b, void *dst, const void *src, size_t n) {
    if (!n) return RGPU_OK;
    RGPU_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, ctx_of(b)->stream), (char *)NULL, 0);
    RGPU_CUDA_TRY(cudaStreamSynchronize(ctx_of(b)->stream), (char *)NULL, 0);
    return RGPU_OK;
}
static rgpu_status cu_download(rgpu_backend *b, void *dst, const void *src, size_t n) {
    if (!n) return RGPU_OK;
    RGPU_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, ctx_of(b)->stream), (char *)NULL, 0);
    RGPU_CUDA_TRY(cudaStreamSynchronize(ctx_of(b)->stream), (char *)NULL, 0);
    return RGPU_OK;
}
static rgpu_status cu_sync(rgpu_backend *b) {
    RGPU_CUDA_TRY(cudaStreamSynchronize(ctx_of(b)->stream), (char *)NULL, 0);
    return RGPU_OK;
}
static bool cu_supports(rgpu_backend *b, int op) {
    (void)b;
    switch (op) {
    case RGPU_OP_NOP: case RGPU_OP_FREE: case RGPU_OP_SYNC: case RGPU_OP_UPLOAD:
    case RGPU_OP_DOWNLOAD: case RGPU_OP_LOCAL_SCALAR_DENSE:
    case RGPU_OP_ALIAS: case RGPU_OP_EMPTY: case RGPU_OP_MEMORY_STATS:
        return true;   // the session does these with alloc/upload/download
    default:
        return family_of(op) != NULL;
    }
}
static rgpu_status cu_exec(rgpu_backend *b, const rgpu_exec *e, char *err, size_t errlen) {
    switch (e->op) {
    case RGPU_OP_NOP: case RGPU_OP_FREE: case RGPU_OP_SYNC: case RGPU_OP_UPLOAD:
    case RGPU_OP_DOWNLOAD: case RGPU_OP_LOCAL_SCALAR_DENSE:
    case RGPU_OP_ALIAS: case RGPU_OP_EMPTY: case RGPU_OP_MEMORY_STATS:
        return RGPU_OK;
    default: {
        const family *f = family_of(e->op);
        if (f) return f->exec(ctx_of(b), e, err, errlen);
        snprintf(err, errlen, "the cuda backend has no kernel for %s yet", rgpu_op_name(e->op));
        return RGPU_ERR_UNSUPPORTED;
    }
    }
}
static void cu_destroy(rgpu_backend *b) {
    cudaStreamDestroy(ctx_of(b)->stream);
    free(b->ctx);
    free(b);
}

extern "C" rgpu_backend *rgpu_backend_cuda_create(char *why, size_t whylen) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(why, whylen, "no usable CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
        return NULL;
    }
    cuda_ctx *c = (cuda_ctx *)calloc(1, sizeof *c);
    rgpu_backend *b = (rgpu_backend *)calloc(1, sizeof *b);
    if (!c || !b || cudaSetDevice(0) != cudaSuccess || cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) != cudaSuccess) {
        snprintf(why, whylen, "cannot initialise CUDA device 0");
        free(c); free(b);
        return NULL;
    }
    b->name = "cuda";
    b->ctx = c;
    b->alloc = cu_alloc;
    b->free = cu_free;
    b->upload = cu_upload;
    b->download = cu_download;
    b->exec = cu_exec;
    b->sync = cu_sync;
    b->supports = cu_supports;
    b->destroy = cu_destroy;
    // Not every op runs here yet: say so, so `auto` can pick cpu instead.
    int have = 0;
    for (int i = 0; i < RGPU_OP_COUNT; i++) have += cu_supports(b, i);
    if (getenv("RGPU_CUDA_PARTIAL") == NULL && have < RGPU_OP_COUNT) {
        snprintf(why, whylen, "cuda backend runs %d of %d ops so far (set RGPU_CUDA_PARTIAL=1 to use it anyway)", have, RGPU_OP_COUNT);
        cu_destroy(b);
        return NULL;
    }
    return b;
}
