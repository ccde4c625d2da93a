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
