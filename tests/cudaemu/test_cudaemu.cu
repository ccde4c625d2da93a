// test_cudaemu.cu — tests of the CUDA-on-CPU layer itself, compiled through
// the same pipeline as replayer/cuda/ (rewrite.py + cudaemu.h + g++). Each
// check states what a correct layer must do; several run a deliberately
// broken kernel and require the layer to expose it (a wrong result in some
// thread order, a reported fault), so the layer cannot pass by doing nothing.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cudaemu_api.h"

static int g_fail, g_checks;
#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        g_checks++;                                                               \
        if (!(cond)) {                                                            \
            g_fail++;                                                             \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                \
            printf(__VA_ARGS__);                                                  \
            printf("\n");                                                         \
        }                                                                         \
    } while (0)

static void set_order(const char *o) {
    setenv("CUDAEMU_ORDER", o, 1);
    cudaemu_reset_for_tests();
}

// ------------------------------------------------------------------ kernels
// Tree sum of blockDim.x values in shared memory; with_barrier=false drops
// the barriers (the classic race).
template <bool with_barrier>
__global__ void block_sum(const int *in, int *out) {
    __shared__ int sh[256];
    unsigned t = threadIdx.x;
    sh[t] = in[blockIdx.x * blockDim.x + t];
    if (with_barrier) __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        if (with_barrier) __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = sh[0];
}

// Thread 0 leaves before the barrier the others wait at.
__global__ void divergent_barrier(int *out) {
    if (threadIdx.x == 0) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void warp_reduce(const float *in, float *out) {
    float v = in[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x] = v;
}

__global__ void warp_scan(const long long *in, long long *out) {
    long long x = in[threadIdx.x];
    int lane = threadIdx.x & 31;
    for (int o = 1; o < 32; o <<= 1) {
        long long y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    out[threadIdx.x] = x;
}

// Lane 5 skips a full-warp shuffle.
__global__ void bad_shuffle(int *out) {
    int v = threadIdx.x;
    if (threadIdx.x != 5) v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

// Reads its shared memory before writing it: sees the poison.
__global__ void smem_read_first(unsigned *out) {
    __shared__ unsigned sh[64];
    extern __shared__ unsigned dyn[];
    out[blockIdx.x * 4 + 0] = sh[threadIdx.x];
    out[blockIdx.x * 4 + 1] = dyn[threadIdx.x];
    __syncthreads();
    sh[threadIdx.x] = 7;
    dyn[threadIdx.x] = 9;
}

__global__ void write_idx(int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * 3 + 1;
}

// Writes one element past n.
__global__ void write_past(int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = i;
}

// Records the order blocks ran in.
__global__ void block_order(int *counter, int *order) {
    if (threadIdx.x == 0) order[atomicAdd(counter, 1)] = blockIdx.x + blockIdx.y * gridDim.x;
}

__global__ void add_one(int *p) { p[threadIdx.x] += 1; }

__global__ void atomic_min_kernel(unsigned long long *m, int *flag) {
    unsigned long long v = 1000 - (blockIdx.x * blockDim.x + threadIdx.x);
    atomicMin(m, v);
    atomicOr(flag, 1 << (threadIdx.x % 4));
}

__global__ void dims_kernel(int *out) {
    int tid = threadIdx.x + threadIdx.y * blockDim.x;
    int bid = blockIdx.x + blockIdx.y * gridDim.x;
    out[bid * blockDim.x * blockDim.y + tid] = bid * 1000 + threadIdx.y * 10 + threadIdx.x;
}

__global__ void fp_kernel(const float *a, float *out, unsigned short *h) {
    out[0] = a[0] * a[1] + a[2];   // two roundings: -ffp-contract=off
    out[1] = __fmaf_rn(a[0], a[1], a[2]);
    out[2] = __fadd_rn(__fmul_rn(a[0], a[1]), a[2]);
    h[0] = __half_as_ushort(__float2half_rn(a[3]));
    h[1] = __bfloat16_as_ushort(__float2bfloat16_rn(a[3]));
    out[3] = __half2float(__ushort_as_half(h[0]));
}

// ------------------------------------------------------------------ tests
static void test_barrier() {
    const int B = 4, T = 256;
    int h[B * T], expect[B] = {0};
    for (int i = 0; i < B * T; i++) { h[i] = (i * 37) % 101; expect[i / T] += h[i]; }
    int *din, *dout;
    cudaMalloc(&din, sizeof h);
    cudaMalloc(&dout, B * sizeof(int));
    cudaMemcpy(din, h, sizeof h, cudaMemcpyHostToDevice);
    const char *orders[] = { "forward", "reverse", "random" };
    for (const char *o : orders) {
        set_order(o);
        int r[B];
        block_sum<true><<<B, T>>>(din, dout);
        CHECK(cudaMemcpy(r, dout, sizeof r, cudaMemcpyDeviceToHost) == cudaSuccess, "memcpy");
        for (int b = 0; b < B; b++) CHECK(r[b] == expect[b], "order %s block %d: %d != %d", o, b, r[b], expect[b]);
    }
    // without the barriers, running each thread to its end in turn reads
    // partial sums not written yet (poisoned shared memory)
    set_order("forward");
    int r[B];
    block_sum<false><<<B, T>>>(din, dout);
    cudaMemcpy(r, dout, sizeof r, cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (int b = 0; b < B; b++) wrong += r[b] != expect[b];
    CHECK(wrong > 0, "a reduction without __syncthreads() gave the right sum");
    set_order("forward");
    cudaFree(din);
    cudaFree(dout);
}

static void test_block_order() {
    int *counter, *order, h[12];
    cudaMalloc(&counter, sizeof(int));
    cudaMalloc(&order, sizeof h);
    const char *orders[] = { "forward", "reverse", "random" };
    for (int k = 0; k < 3; k++) {
        set_order(orders[k]);
        cudaMemset(counter, 0, sizeof(int));
        block_order<<<dim3(4, 3), 32>>>(counter, order);
        cudaMemcpy(h, order, sizeof h, cudaMemcpyDeviceToHost);
        int seen = 0, in_order = 1;
        for (int i = 0; i < 12; i++) { seen |= 1 << h[i]; in_order &= h[i] == (k == 1 ? 11 - i : i); }
        CHECK(seen == 0xfff, "%s: every block ran once (%03x)", orders[k], seen);
        if (k < 2) CHECK(in_order, "%s: blocks in %s order", orders[k], orders[k]);
        else CHECK(!in_order, "random: blocks not in launch order");
    }
    set_order("forward");
    cudaFree(counter);
    cudaFree(order);
}

static void test_divergent_barrier() {
    int *d;
    cudaMalloc(&d, 64 * sizeof(int));
    divergent_barrier<<<1, 64>>>(d);
    CHECK(cudaGetLastError() == cudaSuccess, "launch itself is fine");
    cudaError_t e = cudaDeviceSynchronize();
    CHECK(e == cudaErrorLaunchFailure, "sync after a divergent barrier: %s", cudaGetErrorName(e));
    CHECK(strstr(cudaemu_last_fault(), "divergent_barrier") != NULL, "fault names the kernel: '%s'", cudaemu_last_fault());
    CHECK(strstr(cudaemu_last_fault(), "__syncthreads") != NULL, "fault names the barrier: '%s'", cudaemu_last_fault());
    CHECK(strstr(cudaGetErrorString(e), "divergent_barrier") != NULL, "error string carries the fault");
    CHECK(cudaMalloc(&d, 4) == cudaErrorLaunchFailure, "the fault is sticky");
    cudaemu_reset_for_tests();
}

static void test_shuffle() {
    const int T = 64;
    float hin[T], hout[T];
    long long lin[T], lout[T];
    for (int i = 0; i < T; i++) { hin[i] = (float)(i + 1); lin[i] = i * i; }
    float *din, *dout;
    long long *lp, *lq;
    cudaMalloc(&din, sizeof hin);
    cudaMalloc(&dout, sizeof hout);
    cudaMalloc(&lp, sizeof lin);
    cudaMalloc(&lq, sizeof lout);
    cudaMemcpy(din, hin, sizeof hin, cudaMemcpyHostToDevice);
    cudaMemcpy(lp, lin, sizeof lin, cudaMemcpyHostToDevice);
    const char *orders[] = { "forward", "random" };
    for (const char *o : orders) {
        set_order(o);
        warp_reduce<<<1, T>>>(din, dout);
        warp_scan<<<1, T>>>(lp, lq);
        cudaMemcpy(hout, dout, sizeof hout, cudaMemcpyDeviceToHost);
        cudaMemcpy(lout, lq, sizeof lout, cudaMemcpyDeviceToHost);
        for (int i = 0; i < T; i++) {
            float w = 0;
            for (int l = i / 32 * 32; l < i / 32 * 32 + 32; l++) w += hin[l];
            CHECK(hout[i] == w, "xor reduce (%s) lane %d: %g != %g (warps are 32 lanes)", o, i, hout[i], w);
            long long s = 0;
            for (int l = i / 32 * 32; l <= i; l++) s += lin[l];
            CHECK(lout[i] == s, "up scan (%s) lane %d: %lld != %lld", o, i, lout[i], s);
        }
    }
    set_order("forward");
    int *d;
    cudaMalloc(&d, 32 * sizeof(int));
    bad_shuffle<<<1, 32>>>(d);
    CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure, "a lane missing from a full-warp shuffle is a fault");
    CHECK(strstr(cudaemu_last_fault(), "bad_shuffle") != NULL, "fault names the kernel: '%s'", cudaemu_last_fault());
    cudaemu_reset_for_tests();
}

static void test_smem_poison() {
    unsigned *d, h[8];
    cudaMalloc(&d, sizeof h);
    smem_read_first<<<2, 64, 64 * sizeof(unsigned)>>>(d);
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess, "memcpy");
    for (int b = 0; b < 2; b++) {
        CHECK(h[b * 4 + 0] == 0xffffffffu, "block %d static smem not poisoned: %08x", b, h[b * 4]);
        CHECK(h[b * 4 + 1] == 0xffffffffu, "block %d dynamic smem not poisoned: %08x", b, h[b * 4 + 1]);
    }
    cudaFree(d);
}

static void test_deferral() {
    const int n = 1000;
    int *d, h[n];
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMalloc(&d, n * sizeof(int));
    int fresh;
    cudaMemcpy(&fresh, d, sizeof fresh, cudaMemcpyDeviceToHost);
    CHECK(fresh == -1, "fresh device memory is poisoned (0xff bytes): %d", fresh);
    for (int i = 0; i < n; i++) h[i] = -7;
    write_idx<<<(n + 127) / 128, 128, 0, s>>>(d, n);
    cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, s);
    CHECK(cudaemu_pending(s) == 2, "two operations queued: %zu", cudaemu_pending(s));
    CHECK(h[5] == -7, "the async copy ran before any sync");
    CHECK(cudaStreamQuery(s) == cudaErrorNotReady, "query: not ready");
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
    int bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != i * 3 + 1;
    CHECK(bad == 0, "%d wrong values after the sync", bad);
    // events: a sync on an event runs the stream up to it, not past it
    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    int one = 1, two = 2, got = 0;
    cudaMemcpyAsync(d, &one, sizeof one, cudaMemcpyHostToDevice, s);   // pageable: copied at the call
    one = 5;
    cudaEventRecord(ev, s);
    cudaMemcpyAsync(d, &two, sizeof two, cudaMemcpyHostToDevice, s);
    cudaEventSynchronize(ev);
    CHECK(cudaemu_pending(s) == 1, "the event sync ran past its event: %zu left", cudaemu_pending(s));
    cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost);   // legacy stream: does not wait for s (non-blocking)
    CHECK(got == 1, "pageable H2D source is taken at the call: %d", got);
    cudaStreamSynchronize(s);
    cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost);
    CHECK(got == 2, "second copy: %d", got);
    // pinned source: read when the copy runs
    int *pin;
    cudaHostAlloc((void **)&pin, sizeof(int), cudaHostAllocDefault);
    *pin = 11;
    cudaMemcpyAsync(d, pin, sizeof(int), cudaMemcpyHostToDevice, s);
    *pin = 12;
    cudaStreamSynchronize(s);
    cudaMemcpy(&got, d, sizeof got, cudaMemcpyDeviceToHost);
    CHECK(got == 12, "pinned H2D reads at run time: %d", got);
    cudaFreeHost(pin);
    cudaEventDestroy(ev);
    cudaFree(d);
    cudaStreamDestroy(s);
}

static void test_capture() {
    int *d, h[32];
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaMalloc(&d, sizeof h);
    cudaMemsetAsync(d, 0, sizeof h, s);
    cudaStreamSynchronize(s);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess, "begin");
    add_one<<<1, 32, 0, s>>>(d);
    add_one<<<1, 32, 0, s>>>(d);
    CHECK(cudaemu_pending(s) == 0, "captured work is not queued");
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess, "end");
    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0) == cudaSuccess, "instantiate");
    cudaGraphDestroy(g);
    unsigned long long k0 = cudaemu_kernels_run();
    for (int i = 0; i < 3; i++) CHECK(cudaGraphLaunch(x, s) == cudaSuccess, "launch");
    CHECK(cudaemu_kernels_run() == k0, "graph launches are deferred too");
    cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    CHECK(h[0] == 6 && h[31] == 6, "graph replayed 3 x 2 kernels: %d %d", h[0], h[31]);
    cudaGraphExecDestroy(x);
    // a sync inside a capture spoils it
    cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    add_one<<<1, 32, 0, s>>>(d);
    CHECK(cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported, "sync while capturing");
    CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated, "capture invalidated");
    cudaGetLastError();
    cudaFree(d);
    cudaStreamDestroy(s);
}

static void test_bounds() {
    char *d, h[64];
    cudaMalloc(&d, 16);
    CHECK(cudaMemcpy(d, h, 17, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "H2D past the end");
    CHECK(cudaMemcpy(h, d + 8, 9, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue, "D2H past the end");
    CHECK(cudaMemsetAsync(d + 1, 0, 16, 0) == cudaErrorInvalidValue, "memset past the end");
    CHECK(cudaMemcpy(h, h + 8, 8, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue, "host pointer as device source");
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "last error");
    CHECK(cudaGetLastError() == cudaSuccess, "cleared");
    CHECK(cudaMemcpy(h, d, 16, cudaMemcpyDeviceToHost) == cudaSuccess, "in bounds");
    cudaFree(d);
}

static void test_guard() {
    int *d;
    cudaMalloc(&d, 100 * sizeof(int));
    write_past<<<1, 128>>>(d, 99);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "in bounds");
    write_past<<<1, 128>>>(d, 100);
    CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure, "a write past the allocation is a fault");
    CHECK(strstr(cudaemu_last_fault(), "write_past") && strstr(cudaemu_last_fault(), "past the end"),
          "fault names the kernel: '%s'", cudaemu_last_fault());
    cudaemu_reset_for_tests();
    cudaFree(d);
}

// Host code dereferencing a device pointer faults, as next to a real GPU.
static void test_host_deref_faults() {
    int *d;
    cudaMalloc(&d, 64);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        volatile int v = *(volatile int *)d;   // must fault
        (void)v;
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "host read of device memory did not fault (status %d)", st);
    write_idx<<<1, 16>>>(d, 16);   // kernels still reach it
    int h[16];
    CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess && h[15] == 46, "kernel after: %d", h[15]);
    cudaFree(d);
}

static void test_launch_validation() {
    int *d;
    cudaMalloc(&d, 4096 * sizeof(int));
    static const struct { dim3 grid, block; size_t shared; cudaError_t want; const char *what; } bad[] = {
        { dim3(1), dim3(1025), 0, cudaErrorInvalidConfiguration, "1025 threads per block" },
        { dim3(0), dim3(32), 0, cudaErrorInvalidConfiguration, "empty grid" },
        { dim3(1, 70000), dim3(32), 0, cudaErrorInvalidConfiguration, "grid y over 65535" },
        { dim3(1), dim3(8, 8, 65), 0, cudaErrorInvalidConfiguration, "block z over 64" },
        { dim3(1), dim3(32), 64 * 1024, cudaErrorInvalidValue, "64 KiB dynamic shared memory" },
    };
    for (const auto &c : bad) {
        write_idx<<<c.grid, c.block, c.shared>>>(d, 4096);
        CHECK(cudaGetLastError() == c.want, "%s", c.what);
    }
    CHECK(cudaemu_pending(0) == 0, "no invalid launch was queued");
    write_idx<<<1, 1024>>>(d, 4096);
    CHECK(cudaGetLastError() == cudaSuccess, "1024 threads is fine");
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
    cudaFree(d);
}

static void test_atomics_dims() {
    unsigned long long *m;
    int *flag, *o;
    cudaMalloc(&m, 8);
    cudaMalloc(&flag, 4);
    cudaMemset(m, 0xff, 8);
    cudaMemset(flag, 0, 4);
    atomic_min_kernel<<<3, 100>>>(m, flag);
    unsigned long long hm;
    int hf;
    cudaMemcpy(&hm, m, 8, cudaMemcpyDeviceToHost);
    cudaMemcpy(&hf, flag, 4, cudaMemcpyDeviceToHost);
    CHECK(hm == 1000 - 299, "atomicMin: %llu", hm);
    CHECK(hf == 15, "atomicOr: %d", hf);
    cudaMalloc(&o, 6 * 12 * sizeof(int));
    dims_kernel<<<dim3(3, 2), dim3(4, 3)>>>(o);
    int h[72];
    cudaMemcpy(h, o, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h[0] == 0 && h[11] == 23 && h[12 * 5 + 7] == 5000 + 13, "2-D indices: %d %d %d", h[0], h[11], h[67]);
    cudaFree(m);
    cudaFree(flag);
    cudaFree(o);
}

static void test_fp() {
    float a[4] = { 1.0f + 1.0f / 4096, 1.0f + 1.0f / 4096, -(1.0f + 1.0f / 2048), 0.1f }, r[4];
    unsigned short hh[2];
    float *da, *dr;
    unsigned short *dh;
    cudaMalloc(&da, sizeof a);
    cudaMalloc(&dr, sizeof r);
    cudaMalloc(&dh, sizeof hh);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    fp_kernel<<<1, 1>>>(da, dr, dh);
    cudaMemcpy(r, dr, sizeof r, cudaMemcpyDeviceToHost);
    cudaMemcpy(hh, dh, sizeof hh, cudaMemcpyDeviceToHost);
    CHECK(r[0] == 0.0f, "a*b+c contracted into an fma: %g", r[0]);
    CHECK(r[1] == 1.0f / (1 << 24), "__fmaf_rn: %g", r[1]);
    CHECK(r[2] == 0.0f, "__fadd_rn(__fmul_rn): %g", r[2]);
    CHECK(hh[0] == 0x2E66, "__float2half_rn(0.1f) = %04x", hh[0]);
    CHECK(hh[1] == 0x3DCD, "__float2bfloat16_rn(0.1f) = %04x", hh[1]);
    CHECK(r[3] == 0.0999755859375f, "__half2float: %.10g", r[3]);
    cudaFree(da);
    cudaFree(dr);
    cudaFree(dh);
}

// cuBLAS through the library the backend's loader would find first
// (libcublas.so.13 on this binary's RUNPATH: cudaemu's).
static void test_cublas() {
    void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL, "dlopen libcublas.so.13: %s", dlerror());
    if (!lib) return;
    typedef int (*create_t)(void **);
    typedef int (*stream_t)(void *, cudaStream_t);
    typedef int (*sgemm_t)(void *, int, int, int, int, int, const float *, const float *, int, long long, const float *,
                           int, long long, const float *, float *, int, long long, int);
    create_t create = (create_t)dlsym(lib, "cublasCreate_v2");
    stream_t set_stream = (stream_t)dlsym(lib, "cublasSetStream_v2");
    sgemm_t sgemm = (sgemm_t)dlsym(lib, "cublasSgemmStridedBatched");
    CHECK(create && set_stream && sgemm && dlsym(lib, "cublasGemmStridedBatchedEx") && dlsym(lib, "cudaemu_enqueue_host"),
          "the emulated cuBLAS (on the layer's runtime) has the entry points");
    void *h;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    create(&h);
    set_stream(h, s);
    // C(2x3) = A(2x4) B(4x3), column-major; B transposed in memory (3x4)
    const int M = 2, N = 3, K = 4;
    float A[M * K], B[N * K], C[M * N], ref[M * N];
    for (int i = 0; i < M * K; i++) A[i] = (float)(i + 1);
    for (int i = 0; i < N * K; i++) B[i] = (float)(i % 5) - 2;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0;
            for (int p = 0; p < K; p++) acc += A[i + p * M] * B[j + p * N];
            ref[i + j * M] = acc;
        }
    float *dA, *dB, *dC, one = 1, zero = 0;
    cudaMalloc(&dA, sizeof A);
    cudaMalloc(&dB, sizeof B);
    cudaMalloc(&dC, sizeof C);   // poisoned NaN: beta = 0 must not read it
    cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice);
    cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice);
    CHECK(sgemm(h, 0, 1, M, N, K, &one, dA, M, 0, dB, N, 0, &zero, dC, M, 0, 1) == 0, "sgemm");
    CHECK(cudaemu_pending(s) == 1, "the gemm is queued on the handle's stream");
    cudaMemcpyAsync(C, dC, sizeof C, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    for (int i = 0; i < M * N; i++) CHECK(C[i] == ref[i], "C[%d] = %g, want %g", i, C[i], ref[i]);
    CHECK(sgemm(h, 0, 0, M, N, K, &one, dA, 1, 0, dB, K, 0, &zero, dC, M, 0, 1) == 7, "lda < m is invalid");
    cudaFree(dA);
    cudaFree(dB);
    cudaFree(dC);
    cudaStreamDestroy(s);
}

// CUDAEMU_STATS=DIR: a child process launches add_one 7 times (plus one
// launch captured into a graph that it launches twice) and write_idx 3 times,
// then exits; DIR/launches-<pid>.json must say exactly that.
static long long stats_field(const char *json, const char *name, const char *field) {
    char key[128];
    snprintf(key, sizeof key, "\"name\": \"%s\"", name);
    const char *p = strstr(json, key);
    if (!p) return -1;
    const char *end = strchr(p, '}');
    snprintf(key, sizeof key, "\"%s\": ", field);
    const char *q = strstr(p, key);
    if (!q || (end && q > end)) return -1;
    return atoll(q + strlen(key));
}

static pid_t stats_child(const char *dir) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid != 0) return pid;
    setenv("CUDAEMU_STATS", dir, 1);
    cudaemu_reset_for_tests();      // re-reads the environment; counts start at 0
    int *d;
    cudaMalloc(&d, 64 * sizeof(int));
    for (int i = 0; i < 7; i++) add_one<<<1, 32>>>(d);
    for (int i = 0; i < 3; i++) write_idx<<<1, 16>>>(d, 16);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
    add_one<<<1, 32, 0, s>>>(d);
    cudaGraph_t g;
    cudaGraphExec_t x;
    cudaStreamEndCapture(s, &g);
    cudaGraphInstantiate(&x, g, 0);
    cudaGraphLaunch(x, s);
    cudaGraphLaunch(x, s);
    int ok = cudaDeviceSynchronize() == cudaSuccess;
    exit(ok ? 0 : 3);       // exit, not _exit: the counts are written by an exit handler
}

static void test_launch_stats() {
    char dir[] = "/tmp/cudaemu-stats.XXXXXX", path[300];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    int st = 0;
    pid_t pid = stats_child(dir);
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "stats child status %d", st);
    snprintf(path, sizeof path, "%s/launches-%ld.json", dir, (long)pid);
    static char json[8192];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(json, 1, sizeof json - 1, f) : 0;
    json[n] = 0;
    if (f) fclose(f);
    CHECK(f != NULL, "CUDAEMU_STATS wrote no %s", path);
    CHECK(stats_field(json, "add_one", "launches") == 7, "add_one launches: %lld, want 7 (%s)",
          stats_field(json, "add_one", "launches"), json);
    CHECK(stats_field(json, "add_one", "captured") == 1, "add_one captured: %lld, want 1",
          stats_field(json, "add_one", "captured"));
    CHECK(stats_field(json, "write_idx", "launches") == 3, "write_idx launches: %lld, want 3",
          stats_field(json, "write_idx", "launches"));
    CHECK(strstr(json, "\"kernel_launches\": 10,") != NULL, "total kernel launches 10: %s", json);
    CHECK(strstr(json, "\"graph_launches\": 2,") != NULL, "graph launches 2: %s", json);
    CHECK(strstr(json, "\"file\": \"tests/cudaemu/test_cudaemu.cu\"") != NULL, "the launch's file is named: %s", json);
    unlink(path);
    rmdir(dir);
}

// cudaStreamWaitEvent: the waiting stream's later work runs after the
// event's stream reached the record, and not before; the host does not wait.
static void test_stream_wait() {
    const int n = 256;
    int *x, *y, h[n];
    cudaStream_t a, b;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    cudaMalloc(&x, n * sizeof(int));
    cudaMalloc(&y, n * sizeof(int));
    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    CHECK(cudaStreamWaitEvent(b, ev, 0) == cudaSuccess, "waiting on an event never recorded");
    CHECK(cudaemu_pending(b) == 0, "a wait on an event never recorded queues nothing");
    write_idx<<<2, 128, 0, a>>>(x, n);
    cudaEventRecord(ev, a);
    cudaMemsetAsync(x, 0, n * sizeof(int), a);   // after the record: b must not see it
    CHECK(cudaStreamWaitEvent(b, ev, 0) == cudaSuccess, "wait");
    cudaMemcpyAsync(y, x, n * sizeof(int), cudaMemcpyDeviceToDevice, b);
    CHECK(cudaemu_pending(a) == 3 && cudaemu_pending(b) == 2, "queued, nothing run: a %zu, b %zu",
          cudaemu_pending(a), cudaemu_pending(b));
    cudaStreamSynchronize(b);
    CHECK(cudaemu_pending(a) == 1, "b's wait ran a up to the record, not past it: %zu left", cudaemu_pending(a));
    cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < n; i++) bad += h[i] != i * 3 + 1;
    CHECK(bad == 0, "%d values copied before a's kernel ran", bad);
    cudaStreamSynchronize(a);
    // a capture may not join another stream's work (the backend never asks)
    write_idx<<<2, 128, 0, a>>>(x, n);
    cudaEventRecord(ev, a);
    cudaStreamBeginCapture(b, cudaStreamCaptureModeRelaxed);
    CHECK(cudaStreamWaitEvent(b, ev, 0) == cudaErrorStreamCaptureUnsupported, "a join refused in a capture");
    cudaGraph_t g = nullptr;
    CHECK(cudaStreamEndCapture(b, &g) == cudaErrorStreamCaptureInvalidated, "the capture is spoiled");
    cudaGetLastError();
    cudaStreamSynchronize(a);
    // a destroyed stream's pending work runs; a wait queued for it stays valid
    cudaMemsetAsync(x, 0, n * sizeof(int), a);
    cudaEventRecord(ev, a);
    cudaStreamWaitEvent(b, ev, 0);
    cudaMemcpyAsync(y, x, n * sizeof(int), cudaMemcpyDeviceToDevice, b);
    cudaStreamDestroy(a);
    cudaStreamSynchronize(b);
    cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h[7] == 0, "after the destroyed stream's memset: %d", h[7]);
    cudaEventDestroy(ev);
    cudaFree(x);
    cudaFree(y);
    cudaStreamDestroy(b);
}

int main() {
    int n = 0;
    CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n == 1, "one device");
    test_barrier();
    test_block_order();
    test_divergent_barrier();
    test_shuffle();
    test_smem_poison();
    test_deferral();
    test_stream_wait();
    test_capture();
    test_bounds();
    test_guard();
    const char *prot = getenv("CUDAEMU_PROTECT");
    if (!prot || strcmp(prot, "0")) test_host_deref_faults();
    test_launch_validation();
    test_atomics_dims();
    test_fp();
    test_cublas();
    test_launch_stats();
    printf("test_cudaemu: %d checks, %d failed\n", g_checks, g_fail);
    return g_fail ? 1 : 0;
}
