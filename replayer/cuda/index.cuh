// index.cuh — private to the CUDA index family (index.cu, index_data.cu,
// random.cu): device element helpers mirroring replayer/cpu/cpu_internal.h,
// an N-d offset walker, launch helpers and the host helpers the three files
// share. The CPU reference (replayer/cpu/cpu_index*.c) defines the
// semantics; host-side argument and shape checks reuse its helpers from
// cpu_index.h (they only read view metadata), so messages match exactly.
#pragma once

#include "common.cuh"
#include "convert.cuh"

#include <stdlib.h>
#include <string.h>

#include "op/index.h"
#include "op/iter.h"

// Everything of the family lives in this namespace (the entry points,
// extern "C", are outside it).
namespace rgpu_ix {

// ---------------------------------------------------------------------------
// Launch shape: one-dimensional grids, capped, with grid-stride loops.
#define IX_THREADS 256
#define IX_MAX_BLOCKS 16384

static inline unsigned ix_blocks(long long n)
{
    long long b = (n + IX_THREADS - 1) / IX_THREADS;
    if (b < 1) b = 1;
    if (b > IX_MAX_BLOCKS) b = IX_MAX_BLOCKS;
    return (unsigned)b;
}

#define IX_FOR(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// Elements: convert.cuh (op/dtype.h, the CPU backend's own casts).

// One element of ESZ bytes copied as one typed load and store (two for 16):
// same-dtype copies need no conversion code.
template <int ESZ> __device__ inline void ix_copy_elem(char *d, const char *s)
{
    if constexpr (ESZ == 1) *(uint8_t *)d = *(const uint8_t *)s;
    else if constexpr (ESZ == 2) *(uint16_t *)d = *(const uint16_t *)s;
    else if constexpr (ESZ == 4) *(uint32_t *)d = *(const uint32_t *)s;
    else if constexpr (ESZ == 8) *(uint64_t *)d = *(const uint64_t *)s;
    else {
        ((uint64_t *)d)[0] = ((const uint64_t *)s)[0];
        ((uint64_t *)d)[1] = ((const uint64_t *)s)[1];
    }
}

// An index element (i64 or i32).
__device__ inline int64_t ix_load_index(const char *p, int dt)
{
    return dt == RGPU_I32 ? (int64_t)*(const int32_t *)p : *(const int64_t *)p;
}

// ---------------------------------------------------------------------------
// N-d walker: row-major decomposition of a linear index over sz[0..nd),
// giving up to IX_NW byte offsets (one per stride set). Set from the host;
// passed to kernels by value.
#define IX_NW 4

struct ix_walk {
    int nd;
    long long sz[RGPU_MAX_DIMS];
    long long st[IX_NW][RGPU_MAX_DIMS];   // bytes
};

static inline void ix_walk_init(ix_walk *w, int nd, const int64_t *sizes)
{
    memset(w, 0, sizeof *w);
    w->nd = nd;
    for (int d = 0; d < nd; d++) w->sz[d] = sizes[d];
}

// Stride set k from a view's element strides (bytes), over its first
// min(v->ndim, nd) dims; the rest stay 0 (as op_walk_strides).
static inline void ix_walk_strides(ix_walk *w, int k, const rgpu_view *v)
{
    long long esz = (long long)rgpu_dtype_size(v->dtype);
    for (int d = 0; d < v->ndim && d < w->nd; d++) w->st[k][d] = v->strides[d] * esz;
}

static inline long long ix_walk_numel(const ix_walk *w)
{
    long long n = 1;
    for (int d = 0; d < w->nd; d++) n *= w->sz[d];
    return n;
}

__device__ inline void ix_walk_at(const ix_walk &w, long long i, long long off[IX_NW])
{
    for (int k = 0; k < IX_NW; k++) off[k] = 0;
    for (int d = w.nd - 1; d >= 0; d--) {
        long long s = w.sz[d];
        long long c = i % s;
        i /= s;
        for (int k = 0; k < IX_NW; k++) off[k] += c * w.st[k][d];
    }
}

// As ix_walk_at, also returning the coordinate of dim `dim`.
__device__ inline long long ix_walk_at_dim(const ix_walk &w, long long i, long long off[IX_NW], int dim)
{
    long long cd = 0;
    for (int k = 0; k < IX_NW; k++) off[k] = 0;
    for (int d = w.nd - 1; d >= 0; d--) {
        long long s = w.sz[d];
        long long c = i % s;
        i /= s;
        if (d == dim) cd = c;
        for (int k = 0; k < IX_NW; k++) off[k] += c * w.st[k][d];
    }
    return cd;
}

// Host: byte offset of linear index i over sizes with byte strides st.
static inline long long ix_host_offset(int nd, const long long *sz, const long long *st, long long i)
{
    long long off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (i % sz[d]) * st[d];
        i /= sz[d];
    }
    return off;
}

// ---------------------------------------------------------------------------
// Accumulation modes, as cpu_index.h's op_idx_alpha / op_idx_elem_reduce.
struct ix_alpha {
    int one, round_prod, fused, b;
    float f;
    double d;
    uint64_t i;
};

static inline ix_alpha ix_alpha_of(const op_idx_alpha *a)
{
    ix_alpha r;
    r.one = a->one; r.round_prod = a->round_prod; r.fused = a->fused; r.b = a->b;
    r.f = a->f; r.d = a->d; r.i = a->i;
    return r;
}

static inline ix_alpha ix_alpha_one(void)
{
    op_idx_alpha a = op_idx_alpha_one();
    return ix_alpha_of(&a);
}

// x (f32 opmath of dtype dt) after one reduce step with y; not yet rounded
// to dt. No contraction: every product and sum rounds once (CPU: -std=c11
// means -ffp-contract=off), fmaf only where the CPU calls fmaf.
__device__ inline float ix_step_f32(float x, float y, int dt, int mode, const ix_alpha &a)
{
    if (mode == OP_IDX_MUL) return __fmul_rn(x, y);
    if (a.one) return __fadd_rn(x, y);
    if (a.round_prod) return __fadd_rn(x, op_round_to(dt, __fmul_rn(y, a.f)));
    if (a.fused) return __fmaf_rn(a.f, y, x);
    return __fadd_rn(x, __fmul_rn(a.f, y));
}

__device__ inline double ix_step_f64(double x, double y, int mode, const ix_alpha &a)
{
    if (mode == OP_IDX_MUL) return __dmul_rn(x, y);
    if (a.one) return __dadd_rn(x, y);
    if (a.fused) return __fma_rn(a.d, y, x);
    return __dadd_rn(x, __dmul_rn(a.d, y));
}

// *d (op)= *s in place, both of dtype dt (op_idx_elem_reduce).
__device__ inline void ix_elem_reduce(char *d, const char *s, int dt, int mode, const ix_alpha &a)
{
    if (mode == OP_IDX_ASSIGN) { op_elem_copy(d, s, op_dtype_esize(dt)); return; }
    switch (dt) {
    case RGPU_F32: case RGPU_F16: case RGPU_BF16:
        op_store_f32(d, dt, ix_step_f32(op_load_f32(d, dt), op_load_f32(s, dt), dt, mode, a));
        break;
    case RGPU_F64:
        *(double *)d = ix_step_f64(*(const double *)d, *(const double *)s, mode, a);
        break;
    default: op_idx_elem_reduce_exact(d, s, dt, mode, a.b != 0, a.i); break;
    }
}

// ---------------------------------------------------------------------------
// Host helpers shared by the family (defined in index.cu).

// Device scratch freed when the holder goes out of scope (on every path).
struct ix_scratch {
    rgpu_cuda_ctx *c;
    void *p;
    explicit ix_scratch(rgpu_cuda_ctx *ctx) : c(ctx), p(NULL) {}
    ~ix_scratch() { if (p) rgpu_cuda_scratch_free(c, p); }
    void *get(size_t n) { p = rgpu_cuda_scratch(c, n); return p; }
    ix_scratch(const ix_scratch &) = delete;
    ix_scratch &operator=(const ix_scratch &) = delete;
};

// `type ptr` = scratch of nbytes from holder, or fail with RGPU_ERR_NOMEM.
#define IX_SCRATCH(holder, ptr, type, nbytes, what)                                      \
    type ptr = (type)(holder).get(nbytes);                                               \
    if (ptr == NULL)                                                                     \
        RETURN_ERROR(RGPU_ERR_NOMEM, "out of device memory for %s (%llu bytes)", what,       \
                 (unsigned long long)(nbytes))

// n bytes of device memory at src into host dst, in stream order, waiting
// for them.
static inline cudaError_t ix_read_back(rgpu_cuda_ctx *c, void *dst, const void *src, size_t n)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, c->stream);
    return e != cudaSuccess ? e : cudaStreamSynchronize(c->stream);
}

// The position a check kernel flags first: launch(bad) runs the kernel, which
// atomicMin's each bad position into *bad (a device slot that starts at
// ~0ull); *pos is that slot read back in stream order, ~0ull when none.
// what names the slot in the out-of-memory message.
template <class Launch>
static inline rgpu_status ix_first_flagged(rgpu_cuda_ctx *c, const char *what, Launch launch,
                                           unsigned long long *pos, char *err, size_t errlen)
{
    ix_scratch s(c);
    IX_SCRATCH(s, bad, unsigned long long *, sizeof(unsigned long long), what);
    RGPU_CUDA_TRY(cudaMemsetAsync(bad, 0xff, sizeof *bad, c->stream), err, errlen);
    launch(bad);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    *pos = ~0ull;
    RGPU_CUDA_TRY(ix_read_back(c, pos, bad, sizeof *pos), err, errlen);
    return RGPU_OK;
}

// Host memory freed when the holder goes out of scope.
struct ix_host {
    void *p;
    ix_host() : p(NULL) {}
    ~ix_host() { free(p); }
    void *get(size_t n) { p = malloc(n ? n : 1); return p; }
    ix_host(const ix_host &) = delete;
    ix_host &operator=(const ix_host &) = delete;
};

// Every index of the view ix walked over (nd, sizes) in row-major order
// (ix's strides on its first min(ndim, nd) dims, 0 beyond, as the CPU's
// walker) in [0, hi), else the cpu backend's error for the first bad one in
// that order ("<name>: index v is out of bounds for dimension <dim> with size
// <hi>"). With e's device error word (rgpu_cuda_dev_word) that check stays on
// the device and the error comes at the session's next wait: the op's kernels
// that address memory by ix must then return while the word is set (they take
// it: rgpu_dev_failed). Else it synchronises the stream.
rgpu_status ix_check_index(rgpu_cuda_ctx *c, const rgpu_exec *e, const char *name, int dim, const rgpu_view *ix,
                           int nd, const int64_t *sizes, int64_t hi, char *err, size_t errlen);

// dst = src elementwise over dst's shape (same shape; dtype cast when they
// differ), on the stream.
rgpu_status ix_copy_view(rgpu_cuda_ctx *c, const rgpu_view *dst, const rgpu_view *src, char *err, size_t errlen);

// Every element of dst = the esz-byte value at val (host memory).
rgpu_status ix_fill_view(rgpu_cuda_ctx *c, const rgpu_view *dst, const void *val, char *err, size_t errlen);

// A host array of numel(dst) elements of dst's dtype, row-major, written
// into dst's strided layout. Synchronises the stream (host may be reused).
rgpu_status ix_upload_view(rgpu_cuda_ctx *c, const rgpu_view *dst, const void *host, char *err, size_t errlen);

// The elements of v, row-major, packed into host memory (numel * esz bytes,
// v's dtype). Synchronises the stream.
rgpu_status ix_download_view(rgpu_cuda_ctx *c, const rgpu_view *v, void *host, char *err, size_t errlen);

// Per-file entry points (dispatched from index.cu).
rgpu_status ix_cat(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_pad(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_count_nonzero(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_nonzero(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_masked_select(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_unique(rgpu_cuda_ctx *c, const rgpu_exec *e, bool count_only, char *err, size_t errlen);
rgpu_status ix_random(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_dropout(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);
rgpu_status ix_dropout_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen);

}  // namespace rgpu_ix
