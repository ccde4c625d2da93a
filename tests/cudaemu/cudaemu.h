// cudaemu.h — the prelude force-included (g++ -include) into every .cu file
// that cudaemu compiles for the host: the toolkit's own headers for the types
// and the half/bf16 host paths, then what nvcc would supply and the host
// compiler lacks: execution-space qualifiers, threadIdx & co., the device
// intrinsics the kernels use, atomics, warp shuffles, __syncthreads, shared
// memory and the launch call that rewrite.py puts in place of <<<...>>>.
// The runtime behind these (fibers, streams, memory) is runtime.cpp.
#pragma once

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

// ---------------------------------------------------------------------------
// Qualifiers: host code, all of it. (The toolkit's host_defines.h maps them to
// attributes g++ does not know.)
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#undef __grid_constant__
#undef __shared__
#undef __constant__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
// rewrite.py replaces every __shared__ declaration; one it missed must not compile
#define __shared__ cudaemu_shared_declaration_not_rewritten_by_rewrite_py
#define __constant__ cudaemu_constant_memory_is_not_supported

namespace cudaemu {

// What a running CUDA thread sees (runtime.cpp switches these per fiber/block).
struct thread_ctx { uint3 tid; unsigned linear; };
struct block_ctx { uint3 bid; dim3 bdim, gdim; };
extern thread_ctx *cur_thread;
extern block_ctx cur_block;

// ---------------------------------------------------------------------------
// Launch: rewrite.py turns K<<<g, b, shmem, stream>>>(args) into
// launch(K, "K", __FILE__, __LINE__, g, b, shmem, stream)(args). The
// arguments are converted to the kernel's parameter types and copied at the
// launch (as CUDA does); the kernel runs when its stream is synchronised.
struct kernel_body {
    virtual ~kernel_body() {}
    virtual void run() = 0;
};

template <typename... P>
struct kernel_call final : kernel_body {
    void (*k)(P...);
    std::tuple<std::decay_t<P>...> args;
    template <typename... A>
    kernel_call(void (*k_)(P...), A &&...a) : k(k_), args(std::forward<A>(a)...) {}
    void run() override { std::apply(k, args); }   // each thread gets its own copy of the parameters
};

struct launch_site {
    const char *name, *file;
    int line;
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
};

// Validates the configuration (CUDA's error codes, left for cudaGetLastError)
// and queues the kernel on its stream (or into the stream's capture).
void submit(const launch_site &site, std::shared_ptr<kernel_body> body);

template <typename... P>
struct launcher {
    void (*k)(P...);
    launch_site site;
    // the parameters' own types: arguments convert as in a call (NULL, 0 -> pointer too)
    void operator()(std::decay_t<P>... a) const {
        submit(site, std::make_shared<kernel_call<P...>>(k, std::move(a)...));
    }
};

template <typename... P>
launcher<P...> launch(void (*k)(P...), const char *name, const char *file, int line, dim3 grid, dim3 block,
                      size_t shmem = 0, cudaStream_t stream = 0) {
    return launcher<P...>{k, launch_site{name, file, line, grid, block, shmem, stream}};
}

// ---------------------------------------------------------------------------
// Shared memory: one instance per block, poisoned (0xff bytes: NaN for
// floats, -1 for integers) when the block starts. key names the declaration.
void *shared_alloc(const char *key, size_t size, size_t align);
void *shared_dynamic();
template <typename T>
T *shared_static(const char *key) { return (T *)shared_alloc(key, sizeof(T), alignof(T)); }

// ---------------------------------------------------------------------------
// Barriers and warp collectives: the calling fiber waits until the block (or
// the lanes of mask) arrive; a barrier some live thread cannot reach is a
// reported fault, not a hang.
void syncthreads();
enum warp_kind { WARP_SYNC, WARP_SHFL_IDX, WARP_SHFL_UP, WARP_SHFL_DOWN, WARP_SHFL_XOR, WARP_BALLOT, WARP_ANY, WARP_ALL };
uint64_t warp_collective(warp_kind kind, unsigned mask, uint64_t value, int param, int width);

template <typename T>
T warp_shfl(warp_kind kind, unsigned mask, T var, int param, int width) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type wider than 64 bits");
    uint64_t bits = 0;
    memcpy(&bits, &var, sizeof(T));
    bits = warp_collective(kind, mask, bits, param, width);
    T r;
    memcpy(&r, &bits, sizeof(T));
    return r;
}

}  // namespace cudaemu

// ---------------------------------------------------------------------------
// Built-in variables
#define threadIdx (::cudaemu::cur_thread->tid)
#define blockIdx (::cudaemu::cur_block.bid)
#define blockDim (::cudaemu::cur_block.bdim)
#define gridDim (::cudaemu::cur_block.gdim)
static constexpr int warpSize = 32;

static inline void __syncthreads() { ::cudaemu::syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { ::cudaemu::warp_collective(::cudaemu::WARP_SYNC, mask, 0, 0, 32); }
template <typename T> static inline T __shfl_sync(unsigned m, T v, int src, int w = 32) { return ::cudaemu::warp_shfl(::cudaemu::WARP_SHFL_IDX, m, v, src, w); }
template <typename T> static inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { return ::cudaemu::warp_shfl(::cudaemu::WARP_SHFL_UP, m, v, (int)d, w); }
template <typename T> static inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return ::cudaemu::warp_shfl(::cudaemu::WARP_SHFL_DOWN, m, v, (int)d, w); }
template <typename T> static inline T __shfl_xor_sync(unsigned m, T v, int lm, int w = 32) { return ::cudaemu::warp_shfl(::cudaemu::WARP_SHFL_XOR, m, v, lm, w); }
static inline unsigned __ballot_sync(unsigned m, int p) { return (unsigned)::cudaemu::warp_collective(::cudaemu::WARP_BALLOT, m, p != 0, 0, 32); }
static inline int __any_sync(unsigned m, int p) { return (int)::cudaemu::warp_collective(::cudaemu::WARP_ANY, m, p != 0, 0, 32); }
static inline int __all_sync(unsigned m, int p) { return (int)::cudaemu::warp_collective(::cudaemu::WARP_ALL, m, p != 0, 0, 32); }

// ---------------------------------------------------------------------------
// Atomics. Fibers of one launch never run at once, but another host thread may
// touch the same memory, so these are real atomic read-modify-writes.
#define CUDAEMU_ATOMIC_INT(T)                                                                          \
    static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }       \
    static inline T atomicSub(T *p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_SEQ_CST); }       \
    static inline T atomicAnd(T *p, T v) { return __atomic_fetch_and(p, v, __ATOMIC_SEQ_CST); }       \
    static inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }         \
    static inline T atomicXor(T *p, T v) { return __atomic_fetch_xor(p, v, __ATOMIC_SEQ_CST); }       \
    static inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }     \
    static inline T atomicCAS(T *p, T cmp, T v) {                                                      \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);            \
        return cmp;                                                                                    \
    }                                                                                                  \
    static inline T atomicMin(T *p, T v) {                                                             \
        T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                                  \
        while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} \
        return old;                                                                                    \
    }                                                                                                  \
    static inline T atomicMax(T *p, T v) {                                                             \
        T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                                  \
        while (v > old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} \
        return old;                                                                                    \
    }
CUDAEMU_ATOMIC_INT(int)
CUDAEMU_ATOMIC_INT(unsigned int)
CUDAEMU_ATOMIC_INT(unsigned long long)
CUDAEMU_ATOMIC_INT(long long)
#undef CUDAEMU_ATOMIC_INT

template <typename F, typename U>
static inline F cudaemu_atomic_add_float(F *p, F v) {
    U *q = (U *)p;
    U old = __atomic_load_n(q, __ATOMIC_SEQ_CST), nw;
    F f;
    do {
        memcpy(&f, &old, sizeof f);
        F s = f + v;
        memcpy(&nw, &s, sizeof nw);
    } while (!__atomic_compare_exchange_n(q, &old, nw, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return f;
}
static inline float atomicAdd(float *p, float v) { return cudaemu_atomic_add_float<float, uint32_t>(p, v); }
static inline double atomicAdd(double *p, double v) { return cudaemu_atomic_add_float<double, uint64_t>(p, v); }

// ---------------------------------------------------------------------------
// Rounding intrinsics: IEEE operations in round-to-nearest. The layer is
// compiled with -ffp-contract=off, so a*b+c stays two roundings as written;
// the fma intrinsics are the one place with a single rounding.
// CUDAEMU_RN(T, p, FMA, fma) defines __padd_rn ... __prcp_rn for T, and FMA.
#define CUDAEMU_RN(T, p, FMA, fma)                                                 \
    static inline T __##p##add_rn(T a, T b) { return a + b; }                      \
    static inline T __##p##sub_rn(T a, T b) { return a - b; }                      \
    static inline T __##p##mul_rn(T a, T b) { return a * b; }                      \
    static inline T __##p##div_rn(T a, T b) { return a / b; }                      \
    static inline T __##p##sqrt_rn(T a) { return std::sqrt(a); }                   \
    static inline T __##p##rcp_rn(T a) { return T(1) / a; }                        \
    static inline T FMA(T a, T b, T c) { return fma(a, b, c); }
CUDAEMU_RN(float, f, __fmaf_rn, fmaf)
CUDAEMU_RN(double, d, __fma_rn, fma)
#undef CUDAEMU_RN

// Bit casts
static inline float __uint_as_float(unsigned int u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static inline double __longlong_as_double(long long u) { double f; memcpy(&f, &u, 8); return f; }
static inline long long __double_as_longlong(double f) { long long u; memcpy(&u, &f, 8); return u; }

static inline unsigned int __umulhi(unsigned int a, unsigned int b) { return (unsigned int)(((unsigned long long)a * b) >> 32); }
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
template <typename T> static inline T __ldg(const T *p) { return *p; }

// Device min/max (CUDA's overloads for mixed integer and floating types,
// result in the usual arithmetic conversion's type).
template <typename A, typename B, typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
static inline std::common_type_t<A, B> min(A a, B b) {
    typedef std::common_type_t<A, B> C;
    if (std::is_floating_point<C>::value) return (C)fmin((C)a, (C)b);   // fminf: a NaN loses
    return (C)b < (C)a ? (C)b : (C)a;
}
template <typename A, typename B, typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
static inline std::common_type_t<A, B> max(A a, B b) {
    typedef std::common_type_t<A, B> C;
    if (std::is_floating_point<C>::value) return (C)fmax((C)a, (C)b);
    return (C)a < (C)b ? (C)b : (C)a;
}

// ---------------------------------------------------------------------------
// WMMA (nvcuda::wmma of <mma.h>, which declares nothing outside nvcc): the
// 16x16x16 shapes with __half / __nv_bfloat16 inputs and float
// accumulators. Which fragment elements a lane holds is unspecified in CUDA,
// so code may treat them only uniformly (fill, scale every element); here
// every lane holds the whole tile, row-major (num_elements = rows * cols).
// Each operation is warp-collective: it first meets the warp's 32 lanes (a
// __syncwarp, so a divergent call is a fault) and then loads or multiplies
// the whole tile; a store writes the lane's share of it. Loads and stores check CUDA's requirements (a
// 32-byte aligned pointer, ldm a multiple of 16 bytes) and report a fault
// otherwise. mma_sync sums the products (exact in float for these inputs)
// onto the accumulator in float, k in order.
extern "C" void cudaemu_report_fault(const char *msg);
namespace nvcuda {
namespace wmma {
struct matrix_a;
struct matrix_b;
struct accumulator;
struct row_major;
struct col_major;
enum layout_t { mem_row_major, mem_col_major };
template <typename Use, int M, int N, int K> struct frag_dims;
template <int M, int N, int K> struct frag_dims<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct frag_dims<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct frag_dims<accumulator, M, N, K> { enum { rows = M, cols = N }; };
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "cudaemu: WMMA shapes other than 16x16x16");
    enum { rows = frag_dims<Use, M, N, K>::rows, cols = frag_dims<Use, M, N, K>::cols };
    static const int num_elements = rows * cols;
    T x[rows * cols];
};
static inline float emu_f(float v) { return v; }
static inline float emu_f(const __half &v) { return __half2float(v); }
static inline float emu_f(const __nv_bfloat16 &v) { return __bfloat162float(v); }
template <typename T> static inline void emu_check(const void *p, unsigned ldm, const char *what) {
    if (((uintptr_t)p & 31) || (ldm * sizeof(T)) % 16) {
        char msg[160];
        snprintf(msg, sizeof msg, "wmma::%s: pointer %p must be 32-byte aligned and ldm (%u) a multiple of 16 bytes",
                 what, p, ldm);
        cudaemu_report_fault(msg);
    }
}
template <typename Use, int M, int N, int K, typename T, typename L, typename V>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, const V &v) {
    __syncwarp();
    for (int i = 0; i < f.num_elements; i++) f.x[i] = (T)v;
}
template <typename Use, int M, int N, int K, typename T, typename L>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm) {
    static_assert(!std::is_void<L>::value, "cudaemu: an accumulator load needs a layout_t");
    __syncwarp();
    emu_check<T>(p, ldm, "load_matrix_sync");
    const bool cm = std::is_same<L, col_major>::value;
    for (int i = 0; i < f.rows; i++)
        for (int j = 0; j < f.cols; j++) f.x[i * f.cols + j] = cm ? p[(size_t)j * ldm + i] : p[(size_t)i * ldm + j];
}
template <int M, int N, int K, typename T>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p, unsigned ldm, layout_t l) {
    __syncwarp();
    emu_check<T>(p, ldm, "load_matrix_sync");
    for (int i = 0; i < f.rows; i++)
        for (int j = 0; j < f.cols; j++)
            f.x[i * f.cols + j] = l == mem_col_major ? p[(size_t)j * ldm + i] : p[(size_t)i * ldm + j];
}
// Each lane writes its share of the tile (elements e with e % 32 == lane), as
// the lanes of a GPU do: reading what another lane stored needs a __syncwarp.
template <int M, int N, int K, typename T>
static inline void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm, layout_t l) {
    __syncwarp();
    emu_check<T>(p, ldm, "store_matrix_sync");
    const int lane = (int)((threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y) & 31);
    for (int e = lane; e < f.num_elements; e += 32) {
        const int i = e / f.cols, j = e % f.cols;
        (l == mem_col_major ? p[(size_t)j * ldm + i] : p[(size_t)i * ldm + j]) = f.x[e];
    }
}
template <int M, int N, int K, typename TI, typename LA, typename LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, TI, LA> &a,
                            const fragment<matrix_b, M, N, K, TI, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
    __syncwarp();
    float r[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = c.x[i * N + j];
            for (int k = 0; k < K; k++) s += emu_f(a.x[i * K + k]) * emu_f(b.x[k * N + j]);
            r[i * N + j] = s;
        }
    memcpy(d.x, r, sizeof r);
}
}  // namespace wmma
}  // namespace nvcuda
