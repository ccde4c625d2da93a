// backend_cuda.cu — the CUDA backend: device memory (a caching allocator),
// uploads/downloads through pinned staging buffers, cuBLAS set-up, op
// dispatch to the families, and the "context lost" state.
//
// Threads: rgpu-server runs one thread per connection over one shared
// backend. All GPU work goes to the one stream, in the order it is enqueued
// (uploads of 256 KiB and more: their H2D on a copy stream beside it, then a
// device copy on the one stream; see upload_beside_locked); the allocator,
// the staging buffers and exec each have a mutex (lock order: exec -> alloc;
// staging is never held together with another).
//
// Memory: device blocks come in size classes (512 B, then powers of two up to
// 1 MiB, then quarter-steps of each power of two: 1.25, 1.5, 1.75, 2 MiB, ...),
// so rounding wastes at most 25% above 1 MiB. A freed block goes back to its
// class's free list without any sync: the next user of the block enqueues its
// work on the same stream, after all work that used the block before. Idle
// cached bytes are capped (RGPU_CUDA_CACHE_MB, default half the device);
// past the cap a freed block is released (stream sync + cudaFree). When
// cudaMalloc fails, the whole cache is released and the allocation retried
// once. The session layer counts bytes for memory_stats; nothing is counted here.
//
// Graphs (backend.h graph_*): stream capture of the one stream. A capture
// holds `gate` for writing from graph_begin to graph_end, so no other
// thread's work can land in it (every other entry point holds the gate for
// reading; the capturing thread passes). Mode relaxed: the capturing thread
// may make the host-side calls our launchers make (cuBLAS math mode, ...);
// what needs the host (read-backs, syncs) refuses first (common.cuh
// RGPU_CUDA_NEEDS_HOST). Scratch during a capture comes from blocks the
// cache already holds, or on a miss from cudaMalloc (allowed in a relaxed
// capture, as PyTorch's caching allocator does; never cudaFree while
// capturing); those blocks then belong to the graph, reused only inside it,
// until graph_destroy gives them back to the cache. Lock order: gate -> exec
// -> alloc.
//
// Errors: every CUDA status is turned into an rgpu status with the failing
// call named. An error that leaves the context unusable (illegal address,
// launch failure, ...: "sticky") puts the backend into the lost state: every
// later op, upload and download fails with RGPU_ERR_EXEC and says why,
// allocations hand out placeholder addresses that nothing dereferences, and
// the server keeps running.
#include "common.cuh"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <new>
#include <unordered_map>
#include <vector>

// ---------------------------------------------------------------------------
// State

enum { STAGE_SLOTS = 4 };
static const size_t STAGE_BYTES = (size_t)4 << 20;         // per slot
static const size_t BLAS_WORKSPACE_BYTES = (size_t)32 << 20; // cuBLAS's advice for Hopper
static const uintptr_t LOST_BASE = (uintptr_t)0xdead0000000ull; // placeholder addresses (lost state)
static const size_t IDLE = (size_t)1 << 63;                  // live-map flag: block sits in the cache

struct cuda_backend {
    rgpu_cuda_ctx c;                 // what the families see; c.alloc_state points back here

    pthread_mutex_t exec_mu;
    pthread_mutex_t alloc_mu;
    pthread_mutex_t stage_mu;
    pthread_mutex_t lost_mu;

    // allocator (alloc_mu)
    std::unordered_map<void *, size_t> *live;                  // block -> class bytes (| IDLE when cached; 0: placeholder)
    std::unordered_map<size_t, std::vector<void *>> *cached;   // class bytes -> idle blocks
    size_t cached_bytes, cache_cap;
    uintptr_t next_placeholder;

    // staging (stage_mu)
    bool stage_ready;
    unsigned stage_next;             // slot of the next chunk (rotates across calls)
    size_t stage_fill;               // bytes of slot stage_next - 1 that uploads filled
    void *stage[STAGE_SLOTS];
    cudaEvent_t stage_ev[STAGE_SLOTS];   // the last DMA that used the slot's pinned buffer
    // uploads beside compute: the copy stream's H2D lands in a device slot,
    // a device-to-device copy on the compute stream moves it to its storage
    cudaStream_t copy;
    bool copy_off;                       // its set-up failed (logged once): every upload on the one stream
    void *land[STAGE_SLOTS];             // device landing buffers, STAGE_BYTES each
    cudaEvent_t land_ev[STAGE_SLOTS];    // compute stream: the copy out of land[k] done

    // cuBLAS
    void *blas_ws;
    char blas_why[256];              // where cuBLAS came from, or why it is not usable

    // lost state: set once, never cleared
    volatile int lost;
    char lost_why[320];

    // graphs
    pthread_rwlock_t gate;           // written by a capture; read by every other entry point
    volatile int capturing;          // c.capturing, readable without the gate
    pthread_t cap_owner;             // the capturing thread (valid while capturing)
    std::unordered_map<void *, size_t> *cap_live;                 // blocks the capture took -> class bytes
    std::unordered_map<size_t, std::vector<void *>> *cap_idle;    // of them, freed again during it
    rgpu_status cap_st;              // first reason the capture is spoiled
    char cap_why[320];

    // timeline marks (timer_mark; exec_mu): mark k is marks[k - 1]
    std::vector<cudaEvent_t> *marks;
};

// A captured graph and the scratch blocks its kernels use.
struct cuda_graph {
    cudaGraphExec_t exec;
    std::vector<void *> blocks;
};

static cuda_backend *backend_of(rgpu_backend *b) { return (cuda_backend *)b->ctx; }
static cuda_backend *backend_of(rgpu_cuda_ctx *c) { return (cuda_backend *)c->alloc_state; }

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("rgpu cuda: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

// ---------------------------------------------------------------------------
// Lost state

static bool is_lost(cuda_backend *cb) { return __atomic_load_n(&cb->lost, __ATOMIC_ACQUIRE) != 0; }

static void lost_message(cuda_backend *cb, char *err, size_t errlen) {
    set_err(err, errlen, "the CUDA context is unusable since an earlier error (%s); restart rgpu-server", cb->lost_why);
}

// After a failed call: does the context still work? A sticky error is
// reported again by every call; cudaStreamQuery is the cheapest one (it
// does not wait). Records the lost state with `what` (the failing call) and
// e (its status, or cudaSuccess when the caller has none).
static bool check_lost(cuda_backend *cb, const char *what, cudaError_t e) {
    if (is_lost(cb)) return true;
    if (cb->c.capturing) return false;   // cudaStreamQuery on a capturing stream would spoil it; graph_end checks
    cudaError_t q = cudaStreamQuery(cb->c.stream);
    if (q == cudaSuccess || q == cudaErrorNotReady) return false;
    pthread_mutex_lock(&cb->lost_mu);
    if (!cb->lost) {
        if (e != cudaSuccess)
            snprintf(cb->lost_why, sizeof cb->lost_why, "%s failed: %s; the context reports %s", what,
                     cudaGetErrorString(e), cudaGetErrorName(q));
        else
            snprintf(cb->lost_why, sizeof cb->lost_why, "after %s the context reports %s: %s", what,
                     cudaGetErrorName(q), cudaGetErrorString(q));
        __atomic_store_n(&cb->lost, 1, __ATOMIC_RELEASE);
        logf_("context lost: %s", cb->lost_why);
    }
    pthread_mutex_unlock(&cb->lost_mu);
    return true;
}

// A failed CUDA call -> status + message naming the call.
static rgpu_status cuda_fail(cuda_backend *cb, cudaError_t e, const char *what, char *err, size_t errlen) {
    cudaGetLastError();   // clear a non-sticky error so it is not blamed on the next op
    if (check_lost(cb, what, e)) {
        lost_message(cb, err, errlen);
        return RGPU_ERR_EXEC;
    }
    set_err(err, errlen, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return e == cudaErrorMemoryAllocation ? RGPU_ERR_NOMEM : RGPU_ERR_EXEC;
}

#define CB_TRY(cb, expr, err, errlen)                                              \
    do {                                                                           \
        cudaError_t e_ = (expr);                                                   \
        if (e_ != cudaSuccess) return cuda_fail((cb), e_, #expr, (err), (errlen)); \
    } while (0)

// ---------------------------------------------------------------------------
// The capture gate

static bool capture_owner(cuda_backend *cb) {
    return __atomic_load_n(&cb->capturing, __ATOMIC_ACQUIRE) && pthread_equal(cb->cap_owner, pthread_self());
}

// Held by every entry point but the capturing thread's own calls: waits
// while another thread captures.
struct gate_hold {
    cuda_backend *cb;
    bool held;
    explicit gate_hold(cuda_backend *x) : cb(x), held(!capture_owner(x)) { if (held) pthread_rwlock_rdlock(&cb->gate); }
    ~gate_hold() { if (held) pthread_rwlock_unlock(&cb->gate); }
    gate_hold(const gate_hold &) = delete;
    gate_hold &operator=(const gate_hold &) = delete;
};

// The first reason the running capture cannot succeed (the capturing thread only).
static void capture_spoil(cuda_backend *cb, rgpu_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void capture_spoil(cuda_backend *cb, rgpu_status st, const char *fmt, ...) {
    if (cb->cap_st) return;
    cb->cap_st = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cb->cap_why, sizeof cb->cap_why, fmt, ap);
    va_end(ap);
}

// ---------------------------------------------------------------------------
// Caching allocator

static size_t class_bytes(size_t n) {
    if (n <= 512) return 512;
    if (n <= ((size_t)1 << 20)) {
        size_t p = 1024;
        while (p < n) p <<= 1;
        return p;
    }
    size_t p = (size_t)1 << 20;        // largest power of two below n: p < n <= 2p
    while (p * 2 < n) p <<= 1;
    size_t q = p / 4;
    return (n + q - 1) / q * q;        // p + q, p + 2q, p + 3q or 2p
}

// Every block_alloc / block_free runs inside a gate_hold or on the capturing
// thread: while c.capturing is set, only that thread gets here.

// Releases every idle block (stream sync first: the last users may still run).
static void release_cache(cuda_backend *cb) {
    if (!cb->cached_bytes) return;
    cudaError_t e = rgpu_cuda_stream_wait(cb->c.stream);
    if (e != cudaSuccess) check_lost(cb, "cudaStreamSynchronize (releasing the cache)", e);
    for (auto &kv : *cb->cached) {
        for (void *p : kv.second) {
            cb->live->erase(p);
            cudaFree(p);   // implicitly waits for the device: the stream is idle already
            rgpu_cuda_tcount.device_frees++;
        }
        kv.second.clear();
    }
    cb->cached->clear();
    cb->cached_bytes = 0;
    cudaGetLastError();
}

static void *placeholder(cuda_backend *cb) {
    void *p = (void *)(LOST_BASE + cb->next_placeholder);
    cb->next_placeholder += 512;
    try { (*cb->live)[p] = 0; } catch (...) { return NULL; }
    return p;
}

static void *block_alloc(cuda_backend *cb, size_t nbytes) {
    if (nbytes > ((size_t)1 << 56)) return NULL;
    size_t cls = class_bytes(nbytes);
    void *p = NULL;
    pthread_mutex_lock(&cb->alloc_mu);
    if (is_lost(cb)) { p = placeholder(cb); pthread_mutex_unlock(&cb->alloc_mu); return p; }
    if (cb->c.capturing) {   // only the capturing thread gets here (the gate)
        try {
            auto &idle = (*cb->cap_idle)[cls];
            if (!idle.empty()) {                    // freed earlier in this capture: the graph's already
                p = idle.back();
                idle.pop_back();
            } else {
                auto it = cb->cached->find(cls);
                if (it != cb->cached->end() && !it->second.empty()) {
                    p = it->second.back();
                    (*cb->cap_live)[p] = cls;
                    it->second.pop_back();
                    cb->cached_bytes -= cls;
                    (*cb->live)[p] = cls;
                }
            }
            if (!p) {   // a miss: a new block (cudaMalloc is allowed in a relaxed capture, as PyTorch's allocator does)
                cudaError_t e = cudaMalloc(&p, cls);
                rgpu_cuda_tcount.device_allocs++;
                if (e != cudaSuccess) { cudaGetLastError(); p = NULL; }
                else { (*cb->cap_live)[p] = cls; (*cb->live)[p] = cls; }
            }
        } catch (...) { p = NULL; }
        if (!p) capture_spoil(cb, RGPU_ERR_NOMEM, "scratch of %zu bytes: out of device memory while capturing", nbytes);
        pthread_mutex_unlock(&cb->alloc_mu);
        return p;
    }
    try {
        auto it = cb->cached->find(cls);
        if (it != cb->cached->end() && !it->second.empty()) {
            p = it->second.back();
            it->second.pop_back();
            cb->cached_bytes -= cls;
            (*cb->live)[p] = cls;                 // no longer IDLE
            pthread_mutex_unlock(&cb->alloc_mu);
            return p;
        }
        cudaError_t e = cudaMalloc(&p, cls);
        rgpu_cuda_tcount.device_allocs++;
        if (e == cudaErrorMemoryAllocation && cb->cached_bytes) {
            cudaGetLastError();
            size_t had = cb->cached_bytes;
            release_cache(cb);
            logf_("cudaMalloc(%zu) failed: released %zu cached bytes, retrying", cls, had);
            e = cudaMalloc(&p, cls);
            rgpu_cuda_tcount.device_allocs++;
        }
        if (e != cudaSuccess) {
            cudaGetLastError();
            if (e != cudaErrorMemoryAllocation) check_lost(cb, "cudaMalloc", e);
            logf_("cudaMalloc(%zu) for %zu bytes failed: %s", cls, nbytes, cudaGetErrorString(e));
            pthread_mutex_unlock(&cb->alloc_mu);
            return NULL;
        }
        (*cb->live)[p] = cls;
    } catch (...) {   // std::bad_alloc from the maps: host out of memory
        if (p) cudaFree(p);
        p = NULL;
    }
    pthread_mutex_unlock(&cb->alloc_mu);
    return p;
}

static void block_free(cuda_backend *cb, void *p) {
    if (!p) return;
    pthread_mutex_lock(&cb->alloc_mu);
    auto it = cb->live->find(p);
    if (it == cb->live->end()) {
        pthread_mutex_unlock(&cb->alloc_mu);
        logf_("free of %p, which this backend did not allocate (ignored)", p);
        return;
    }
    size_t cls = it->second;
    if (cls == 0) {                               // placeholder
        cb->live->erase(it);
        pthread_mutex_unlock(&cb->alloc_mu);
        return;
    }
    if (cls & IDLE) {
        pthread_mutex_unlock(&cb->alloc_mu);
        logf_("double free of %p (ignored)", p);
        return;
    }
    if (cb->c.capturing) {   // the capturing thread: a block of the graph stays the graph's
        bool mine = false;
        try {
            if (cb->cap_live->count(p)) { (*cb->cap_idle)[cls].push_back(p); mine = true; }
        } catch (...) {}
        if (mine) { pthread_mutex_unlock(&cb->alloc_mu); return; }
    }
    bool cached = false;
    // while capturing nothing goes back to the driver (cudaFree and its sync are illegal then)
    if (!is_lost(cb) && (cb->c.capturing || cb->cached_bytes + cls <= cb->cache_cap)) {
        try {
            (*cb->cached)[cls].push_back(p);
            it->second = cls | IDLE;
            cb->cached_bytes += cls;
            cached = true;
        } catch (...) {}
    }
    if (!cached) {                                // over the cap: give it back to the driver
        cb->live->erase(it);
        if (!is_lost(cb)) {
            cudaError_t e = rgpu_cuda_stream_wait(cb->c.stream);
            if (e != cudaSuccess) check_lost(cb, "cudaStreamSynchronize (freeing a block)", e);
        }
        cudaFree(p);
        rgpu_cuda_tcount.device_frees++;
        cudaGetLastError();
    }
    pthread_mutex_unlock(&cb->alloc_mu);
}

extern "C" void *rgpu_cuda_scratch(rgpu_cuda_ctx *c, size_t nbytes) { return block_alloc(backend_of(c), nbytes); }
extern "C" void rgpu_cuda_scratch_free(rgpu_cuda_ctx *c, void *p) { block_free(backend_of(c), p); }

// Runs the held multi-tensor pointwise launches (common.cuh) before work that
// may touch their memory. The caller holds the gate, not exec_mu.
static rgpu_status flush_held(cuda_backend *cb, const char *before, char *err, size_t errlen) {
    pthread_mutex_lock(&cb->exec_mu);
    rgpu_status st = rgpu_cuda_pw_flush(&cb->c, err, errlen);
    pthread_mutex_unlock(&cb->exec_mu);
    if (st) logf_("held pointwise launches, run before %s: %s", before, err);
    return st;
}

static void *cu_alloc(rgpu_backend *b, size_t nbytes) {
    cuda_backend *cb = backend_of(b);
    gate_hold g(cb);
    if (capture_owner(cb)) {   // backend.h: the session allocates nothing while capturing
        capture_spoil(cb, RGPU_ERR_UNSUPPORTED, "an allocation of %zu bytes during a capture", nbytes);
        return NULL;
    }
    return block_alloc(cb, nbytes);
}
static void cu_free(rgpu_backend *b, void *p) {
    cuda_backend *cb = backend_of(b);
    gate_hold g(cb);
    // a block held launches use is given back after they are launched
    // (block_free may return it to the driver)
    size_t n = 0;
    pthread_mutex_lock(&cb->alloc_mu);
    auto it = cb->live->find(p);
    if (it != cb->live->end()) n = it->second & ~IDLE;
    pthread_mutex_unlock(&cb->alloc_mu);
    pthread_mutex_lock(&cb->exec_mu);
    bool deferred = n != 0 && rgpu_cuda_pw_defer_free(&cb->c, p, n);
    pthread_mutex_unlock(&cb->exec_mu);
    if (!deferred) block_free(cb, p);
}

// ---------------------------------------------------------------------------
// Uploads and downloads: through STAGE_SLOTS pinned buffers, chunk by chunk;
// the host copy of one chunk overlaps the DMA of the previous one. A slot's
// event marks the end of the last DMA that used it.

static rgpu_status stage_init(cuda_backend *cb, char *err, size_t errlen) {
    if (cb->stage_ready) return RGPU_OK;
    for (int i = 0; i < STAGE_SLOTS; i++) {
        if (!cb->stage[i]) CB_TRY(cb, cudaHostAlloc(&cb->stage[i], STAGE_BYTES, cudaHostAllocDefault), err, errlen);
        if (!cb->stage_ev[i]) CB_TRY(cb, cudaEventCreateWithFlags(&cb->stage_ev[i], cudaEventDisableTiming), err, errlen);
    }
    cb->stage_ready = true;
    return RGPU_OK;
}

// Returns when the upload is enqueued: src may be reused at once (it was
// copied into pinned memory); the DMA completes in stream order. Uploads
// are packed into the current slot (256-byte aligned) until it is full; the
// host waits for a slot's event only when the uploads move on to it, for its
// DMAs of a round ago (STAGE_SLOTS - 1 slots of uploads since): back-pressure,
// not a wait per upload (small uploads, e.g. the held launches' arguments,
// never wait while the device keeps up).
static rgpu_status upload_locked(cuda_backend *cb, void *dst, const void *src, size_t n, char *err, size_t errlen) {
    rgpu_status st = stage_init(cb, err, errlen);
    if (st) return st;
    cudaStream_t s = cb->c.stream;
    for (size_t off = 0; off < n;) {
        size_t m = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
        if (cb->stage_fill == 0 || cb->stage_fill + m > STAGE_BYTES) {   // on to the next slot
            int k = (int)(cb->stage_next++ % STAGE_SLOTS);
            CB_TRY(cb, rgpu_cuda_event_wait(cb->stage_ev[k]), err, errlen);   // slot free again
            cb->stage_fill = 0;
        }
        int k = (int)((cb->stage_next - 1) % STAGE_SLOTS);
        char *p = (char *)cb->stage[k] + cb->stage_fill;
        memcpy(p, (const char *)src + off, m);
        CB_TRY(cb, cudaMemcpyAsync((char *)dst + off, p, m, cudaMemcpyHostToDevice, s), err, errlen);
        CB_TRY(cb, cudaEventRecord(cb->stage_ev[k], s), err, errlen);
        cb->stage_fill += (m + 255) & ~(size_t)255;
        off += m;
    }
    return RGPU_OK;
}

// Uploads of at least COPY_MIN bytes go beside compute: chunk by chunk, the
// H2D runs on the copy stream into the slot's device landing buffer, while
// kernels enqueued before it still run; the compute stream waits for it
// (cudaStreamWaitEvent, no host wait) and copies the landing buffer into dst
// in stream order, so dst is written exactly where a direct upload would
// have written it (after every earlier use of the block, before every later
// kernel). The copy stream waits for the compute stream's copy out of a
// landing buffer before it lands there again. The host waits only for a
// pinned slot's H2D of a round ago: back-pressure. Smaller uploads (and the
// held launches' arguments) go on the compute stream: for them the extra
// copy and events cost more than the overlap gives.
static const size_t COPY_MIN = (size_t)256 << 10;

static rgpu_status copy_init(cuda_backend *cb, char *err, size_t errlen) {
    if (cb->copy) return RGPU_OK;
    for (int i = 0; i < STAGE_SLOTS; i++) {
        if (!cb->land[i]) {
            rgpu_cuda_tcount.device_allocs++;
            CB_TRY(cb, cudaMalloc(&cb->land[i], STAGE_BYTES), err, errlen);
        }
        if (!cb->land_ev[i]) CB_TRY(cb, cudaEventCreateWithFlags(&cb->land_ev[i], cudaEventDisableTiming), err, errlen);
    }
    CB_TRY(cb, cudaStreamCreateWithFlags(&cb->copy, cudaStreamNonBlocking), err, errlen);
    return RGPU_OK;
}

static rgpu_status upload_beside_locked(cuda_backend *cb, void *dst, const void *src, size_t n, char *err,
                                        size_t errlen) {
    rgpu_status st = stage_init(cb, err, errlen);   // the copy stream: cu_upload set it up (copy_init)
    if (st) return st;
    cudaStream_t s = cb->c.stream;
    for (size_t off = 0; off < n;) {
        size_t m = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
        int k = (int)(cb->stage_next++ % STAGE_SLOTS);   // a whole slot, pinned and landing
        CB_TRY(cb, rgpu_cuda_event_wait(cb->stage_ev[k]), err, errlen);   // its pinned buffer's last DMA done
        memcpy(cb->stage[k], (const char *)src + off, m);
        CB_TRY(cb, cudaStreamWaitEvent(cb->copy, cb->land_ev[k], 0), err, errlen);   // land[k] copied out
        CB_TRY(cb, cudaMemcpyAsync(cb->land[k], cb->stage[k], m, cudaMemcpyHostToDevice, cb->copy), err, errlen);
        CB_TRY(cb, cudaEventRecord(cb->stage_ev[k], cb->copy), err, errlen);
        // the compute stream waits for the H2D at once: every later use of the
        // pinned slot on it (a download's D2H, a small upload) is then ordered
        // after the H2D read it, as when the H2D was on the compute stream
        CB_TRY(cb, cudaStreamWaitEvent(s, cb->stage_ev[k], 0), err, errlen);
        CB_TRY(cb, cudaMemcpyAsync((char *)dst + off, cb->land[k], m, cudaMemcpyDeviceToDevice, s), err, errlen);
        CB_TRY(cb, cudaEventRecord(cb->land_ev[k], s), err, errlen);
        off += m;
    }
    cb->stage_fill = 0;   // the next small upload takes a fresh slot
    return RGPU_OK;
}

// Waits for the stream up to the copy (events on the stream: never a device sync).
static rgpu_status download_locked(cuda_backend *cb, void *dst, const void *src, size_t n, char *err, size_t errlen) {
    rgpu_status st = stage_init(cb, err, errlen);
    if (st) return st;
    cudaStream_t s = cb->c.stream;
    size_t chunks = (n + STAGE_BYTES - 1) / STAGE_BYTES;
    unsigned base = cb->stage_next;
    cb->stage_next = base + (unsigned)chunks;   // mod STAGE_SLOTS is all that matters
    cb->stage_fill = 0;                         // the next upload takes a fresh slot
    // enqueue chunk i's DMA into slot (base + i) % STAGE_SLOTS; ordered after
    // any earlier DMA of that slot by the stream, and the host reads a slot
    // only after its event
    auto enqueue = [&](size_t i) -> rgpu_status {
        int k = (int)((base + i) % STAGE_SLOTS);
        size_t off = i * STAGE_BYTES, m = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
        CB_TRY(cb, cudaMemcpyAsync(cb->stage[k], (const char *)src + off, m, cudaMemcpyDeviceToHost, s), err, errlen);
        CB_TRY(cb, cudaEventRecord(cb->stage_ev[k], s), err, errlen);
        return RGPU_OK;
    };
    for (size_t i = 0; i < chunks && i < STAGE_SLOTS; i++)
        if ((st = enqueue(i))) return st;
    for (size_t i = 0; i < chunks; i++) {
        int k = (int)((base + i) % STAGE_SLOTS);
        size_t off = i * STAGE_BYTES, m = n - off < STAGE_BYTES ? n - off : STAGE_BYTES;
        CB_TRY(cb, rgpu_cuda_event_wait(cb->stage_ev[k]), err, errlen);
        memcpy((char *)dst + off, cb->stage[k], m);
        if (i + STAGE_SLOTS < chunks && (st = enqueue(i + STAGE_SLOTS))) return st;   // slot k is read out
    }
    return RGPU_OK;
}

// The held launches' arguments (pointwise.cu); the caller holds exec_mu.
extern "C" rgpu_status rgpu_cuda_upload_async(rgpu_cuda_ctx *c, void *dst, const void *src, size_t n, char *err,
                                              size_t errlen) {
    cuda_backend *cb = backend_of(c);
    pthread_mutex_lock(&cb->stage_mu);
    rgpu_status st = upload_locked(cb, dst, src, n, err, errlen);
    pthread_mutex_unlock(&cb->stage_mu);
    return st;
}

static rgpu_status cu_upload(rgpu_backend *b, void *dst, const void *src, size_t n) {
    cuda_backend *cb = backend_of(b);
    char err[320] = "";
    if (!n) return RGPU_OK;
    gate_hold g(cb);
    if (capture_owner(cb)) { capture_spoil(cb, RGPU_ERR_UNSUPPORTED, "an upload during a capture"); return RGPU_ERR_UNSUPPORTED; }
    if (is_lost(cb)) return RGPU_ERR_EXEC;   // logged once when it happened
    rgpu_status fst = flush_held(cb, "an upload", err, sizeof err);
    if (fst) return fst;
    pthread_mutex_lock(&cb->stage_mu);
    bool beside = n >= COPY_MIN && !cb->copy_off;
    if (beside && copy_init(cb, err, sizeof err)) {   // e.g. no device memory for the landing buffers
        logf_("uploads stay on the compute stream (no copy stream): %s", err);
        cb->copy_off = true;
        beside = false;
        err[0] = 0;
    }
    rgpu_status st = beside ? upload_beside_locked(cb, dst, src, n, err, sizeof err)
                            : upload_locked(cb, dst, src, n, err, sizeof err);
    pthread_mutex_unlock(&cb->stage_mu);
    if (st) logf_("upload of %zu bytes: %s", n, err);
    return st;
}

static rgpu_status cu_download(rgpu_backend *b, void *dst, const void *src, size_t n) {
    cuda_backend *cb = backend_of(b);
    char err[320] = "";
    if (!n) return RGPU_OK;
    gate_hold g(cb);
    if (capture_owner(cb)) { capture_spoil(cb, RGPU_ERR_UNSUPPORTED, "a download during a capture"); return RGPU_ERR_UNSUPPORTED; }
    if (is_lost(cb)) return RGPU_ERR_EXEC;   // logged once when it happened
    rgpu_status fst = flush_held(cb, "a download", err, sizeof err);
    if (fst) return fst;
    pthread_mutex_lock(&cb->stage_mu);
    rgpu_status st = download_locked(cb, dst, src, n, err, sizeof err);
    pthread_mutex_unlock(&cb->stage_mu);
    if (st) logf_("download of %zu bytes: %s", n, err);
    return st;
}

static rgpu_status cu_sync(rgpu_backend *b) {
    cuda_backend *cb = backend_of(b);
    char err[320] = "";
    gate_hold g(cb);
    if (capture_owner(cb)) { capture_spoil(cb, RGPU_ERR_UNSUPPORTED, "a sync during a capture"); return RGPU_ERR_UNSUPPORTED; }
    if (is_lost(cb)) return RGPU_ERR_EXEC;   // logged once when it happened
    rgpu_status fst = flush_held(cb, "a sync", err, sizeof err);
    if (fst) return fst;
    cudaError_t e = rgpu_cuda_stream_wait(cb->c.stream);
    if (e == cudaSuccess) return RGPU_OK;
    rgpu_status st = cuda_fail(cb, e, "cudaStreamSynchronize", err, sizeof err);
    logf_("sync: %s", err);
    return st;
}

// ---------------------------------------------------------------------------
// Timeline marks: a timing event per mark, recorded after the held pointwise
// launches are flushed (so a record's kernels fall between its two marks; a
// profiled replay batches fewer launches).

static uint64_t cu_timer_mark(rgpu_backend *b) {
    cuda_backend *cb = backend_of(b);
    char err[320] = "";
    gate_hold g(cb);
    if (capture_owner(cb) || is_lost(cb)) return 0;
    pthread_mutex_lock(&cb->exec_mu);
    uint64_t id = 0;
    cudaEvent_t ev = NULL;
    if (rgpu_cuda_pw_flush(&cb->c, err, sizeof err) == RGPU_OK && cudaEventCreate(&ev) == cudaSuccess) {
        if (cudaEventRecord(ev, cb->c.stream) == cudaSuccess) {
            if (!cb->marks) cb->marks = new std::vector<cudaEvent_t>();
            cb->marks->push_back(ev);
            id = cb->marks->size();
            ev = NULL;
        }
    }
    if (ev) cudaEventDestroy(ev);
    pthread_mutex_unlock(&cb->exec_mu);
    return id;
}

static bool cu_timer_ms(rgpu_backend *b, uint64_t a, uint64_t z, double *ms) {
    cuda_backend *cb = backend_of(b);
    pthread_mutex_lock(&cb->exec_mu);
    bool ok = false;
    if (cb->marks && a >= 1 && z >= 1 && a <= cb->marks->size() && z <= cb->marks->size()) {
        float f = 0.0f;
        ok = cudaEventElapsedTime(&f, (*cb->marks)[a - 1], (*cb->marks)[z - 1]) == cudaSuccess;
        *ms = f;
    }
    pthread_mutex_unlock(&cb->exec_mu);
    return ok;
}

static void cu_timer_release(rgpu_backend *b) {
    cuda_backend *cb = backend_of(b);
    pthread_mutex_lock(&cb->exec_mu);
    if (cb->marks) {
        for (cudaEvent_t ev : *cb->marks) cudaEventDestroy(ev);
        delete cb->marks;
        cb->marks = NULL;
    }
    pthread_mutex_unlock(&cb->exec_mu);
}

// ---------------------------------------------------------------------------
// Device error words (backend.h err_new; common.cuh): the word in device
// memory from the caching allocator, its copy in pinned host memory. Every
// enqueue runs after the held pointwise launches, under exec_mu, so it falls
// after all the session's work so far in stream order.

static bool err_enqueue_reset(cuda_backend *cb, rgpu_cuda_err_slot *sl) {
    pthread_mutex_lock(&cb->exec_mu);
    char err[160];
    bool ok = rgpu_cuda_pw_flush(&cb->c, err, sizeof err) == RGPU_OK &&
              cudaMemsetAsync(sl->dev, 0xff, RGPU_DEV_WORD_RESET_BYTES, cb->c.stream) == cudaSuccess;
    pthread_mutex_unlock(&cb->exec_mu);
    return ok;
}

static void cu_err_free(rgpu_backend *b, void *w) {
    rgpu_cuda_err_slot *sl = (rgpu_cuda_err_slot *)w;
    if (!sl) return;
    if (sl->dev) cu_free(b, sl->dev);
    if (sl->host) cudaFreeHost(sl->host);
    free(sl);
}

static void *cu_err_new(rgpu_backend *b) {
    cuda_backend *cb = backend_of(b);
    rgpu_cuda_err_slot *sl = (rgpu_cuda_err_slot *)calloc(1, sizeof *sl);
    if (!sl) return NULL;
    sl->dev = (rgpu_dev_word *)cu_alloc(b, sizeof(rgpu_dev_word));
    if (!sl->dev || cudaHostAlloc((void **)&sl->host, sizeof(rgpu_dev_word), cudaHostAllocDefault) != cudaSuccess) {
        cudaGetLastError();
        sl->host = NULL;
        cu_err_free(b, sl);
        return NULL;
    }
    gate_hold g(cb);
    if (capture_owner(cb) || is_lost(cb) || !err_enqueue_reset(cb, sl)) {
        cu_err_free(b, sl);
        return NULL;
    }
    return sl;
}

static void cu_err_fetch(rgpu_backend *b, void *w) {
    cuda_backend *cb = backend_of(b);
    rgpu_cuda_err_slot *sl = (rgpu_cuda_err_slot *)w;
    sl->fetched = false;
    gate_hold g(cb);
    if (capture_owner(cb) || is_lost(cb)) return;
    pthread_mutex_lock(&cb->exec_mu);
    char err[160];
    sl->fetched = rgpu_cuda_pw_flush(&cb->c, err, sizeof err) == RGPU_OK &&
                  cudaMemcpyAsync(sl->host, sl->dev, sizeof *sl->host, cudaMemcpyDeviceToHost, cb->c.stream) == cudaSuccess;
    pthread_mutex_unlock(&cb->exec_mu);
}

static __global__ void k_err_call(rgpu_dev_word *w, unsigned long long base, unsigned long long op)
{
    w->call_base = base;
    w->call_op = op;
}

static void cu_err_call(rgpu_backend *b, void *w, uint64_t seq_base, uint64_t idx) {
    cuda_backend *cb = backend_of(b);
    rgpu_cuda_err_slot *sl = (rgpu_cuda_err_slot *)w;
    gate_hold g(cb);
    if (capture_owner(cb) || is_lost(cb)) return;
    pthread_mutex_lock(&cb->exec_mu);
    char err[160];
    if (rgpu_cuda_pw_flush(&cb->c, err, sizeof err) == RGPU_OK)
        k_err_call<<<1, 1, 0, cb->c.stream>>>(sl->dev, (unsigned long long)seq_base, (unsigned long long)idx);
    pthread_mutex_unlock(&cb->exec_mu);
}

static bool cu_err_read(rgpu_backend *b, void *w, rgpu_dev_error *out) {
    cuda_backend *cb = backend_of(b);
    rgpu_cuda_err_slot *sl = (rgpu_cuda_err_slot *)w;
    if (!sl->fetched) return false;   // nothing copied (a lost device fails the wait itself)
    sl->fetched = false;
    const rgpu_dev_word *h = sl->host;
    if (h->seq == ~0ull) return false;
    out->op = h->op;
    out->opcode = h->opcode;
    out->rec = h->rec;
    out->kind = h->kind;
    out->dim = h->dim;
    out->value = h->value;
    out->bound = h->bound;
    out->name = (const char *)(uintptr_t)h->name;
    gate_hold g(cb);
    if (!capture_owner(cb) && !is_lost(cb)) err_enqueue_reset(cb, sl);
    return true;
}

// ---------------------------------------------------------------------------
// Dispatch

static rgpu_status cuda_unsupported(const rgpu_exec *e, char *err, size_t errlen) {
    set_err(err, errlen, "the cuda backend has no kernel for %s yet", rgpu_op_name(e->op));
    return RGPU_ERR_UNSUPPORTED;
}

// cuda_dispatch (op -> its family's exec) and cuda_dispatch_supports, from
// ops.def; SESSION ops run in the session, with alloc/upload/download.
#include "cuda/op_dispatch_cuda.inc"

// RGPU_OPF_CUBLAS ops (matmul.cu, conv.cu's im2col + gemm) are unsupported
// when cuBLAS could not be loaded.
static bool needs_cublas(int op) { return rgpu_op_table[op].flags & RGPU_OPF_CUBLAS; }
static bool session_op(int op) { return rgpu_op_table[op].flags & RGPU_OPF_SESSION; }

static bool cu_supports(rgpu_backend *b, int op) {
    if (op < 0 || op >= RGPU_OP_COUNT) return false;
    if (session_op(op)) return true;
    if (needs_cublas(op) && !backend_of(b)->c.blas.handle) return false;
    return cuda_dispatch_supports(op);
}

static rgpu_status cu_exec(rgpu_backend *b, const rgpu_exec *e, char *err, size_t errlen) {
    cuda_backend *cb = backend_of(b);
    if (err && errlen) err[0] = '\0';
    if (!e) { set_err(err, errlen, "cuda exec: no op"); return RGPU_ERR_BAD_ARG; }
    if (e->op < 0 || e->op >= RGPU_OP_COUNT) {
        set_err(err, errlen, "cuda backend: unsupported op %d", e->op);
        return RGPU_ERR_UNSUPPORTED;
    }
    if (session_op(e->op)) return RGPU_OK;
    gate_hold g(cb);
    if (is_lost(cb)) { lost_message(cb, err, errlen); return RGPU_ERR_EXEC; }
    if (needs_cublas(e->op) && !cb->c.blas.handle) {
        set_err(err, errlen, "%s needs cuBLAS, which is missing: %s", rgpu_op_name(e->op), cb->blas_why);
        return RGPU_ERR_UNSUPPORTED;
    }
    if (!cuda_dispatch_supports(e->op)) return cuda_unsupported(e, err, errlen);
    { rgpu_status cst = rgpu_op_check_complex(e, err, errlen); if (cst != RGPU_OK) return cst; }
    pthread_mutex_lock(&cb->exec_mu);
    // the pointwise families and copy_ hold or flush themselves (pointwise.cu,
    // copy.cu); any other op runs after the held launches
    int fam = rgpu_op_table[e->op].family;
    bool own = fam == RGPU_OPFAM_ARITH || fam == RGPU_OPFAM_POINTWISE || e->op == RGPU_OP_COPY;
    rgpu_status st = own ? RGPU_OK : rgpu_cuda_pw_flush(&cb->c, err, errlen);
    if (st == RGPU_OK) st = cuda_dispatch(&cb->c, e, err, errlen);
    // Safety net: a launch error a family did not check, or an asynchronous
    // fault of an earlier kernel that surfaced meanwhile.
    cudaError_t le = cudaGetLastError();
    pthread_mutex_unlock(&cb->exec_mu);
    if (cb->c.capturing && (st != RGPU_OK || le != cudaSuccess)) {   // the capturing thread (the gate)
        // nothing ran: the op could not be recorded (or a launch failed to be)
        capture_spoil(cb, st == RGPU_ERR_NOMEM ? RGPU_ERR_NOMEM : RGPU_ERR_UNSUPPORTED, "%s: %s", rgpu_op_name(e->op),
                      st != RGPU_OK ? (err && *err ? err : rgpu_status_str(st)) : cudaGetErrorString(le));
        if (st == RGPU_OK) set_err(err, errlen, "%s: %s", rgpu_op_name(e->op), cudaGetErrorString(le));
        return st != RGPU_OK ? st : RGPU_ERR_UNSUPPORTED;
    }
    if (st == RGPU_OK && le != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "CUDA error after %s (may come from an earlier kernel)", rgpu_op_name(e->op));
        return cuda_fail(cb, le, what, err, errlen);
    }
    if (st != RGPU_OK && st != RGPU_ERR_UNSUPPORTED && check_lost(cb, rgpu_op_name(e->op), le)) {
        // keep the family's message, add the consequence
        size_t n = err ? strlen(err) : 0;
        if (err && n + 1 < errlen)
            snprintf(err + n, errlen - n, "%sthe CUDA context is now unusable (%s)", n ? "; " : "", cb->lost_why);
        return RGPU_ERR_EXEC;
    }
    return st;
}

// ---------------------------------------------------------------------------
// Graphs (backend.h): stream capture of the backend's stream

static rgpu_status cu_graph_begin(rgpu_backend *b, char *err, size_t errlen) {
    cuda_backend *cb = backend_of(b);
    if (capture_owner(cb)) { set_err(err, errlen, "a capture is already running on this thread"); return RGPU_ERR_SEQUENCE; }
    pthread_rwlock_wrlock(&cb->gate);   // every other thread's work is done or waits
    if (is_lost(cb)) {
        pthread_rwlock_unlock(&cb->gate);
        lost_message(cb, err, errlen);
        return RGPU_ERR_EXEC;
    }
    pthread_mutex_lock(&cb->exec_mu);
    rgpu_status fst = rgpu_cuda_pw_flush(&cb->c, err, errlen);   // held work is not the graph's
    pthread_mutex_unlock(&cb->exec_mu);
    if (fst) {
        pthread_rwlock_unlock(&cb->gate);
        return fst;
    }
    cb->cap_st = RGPU_OK;
    cb->cap_why[0] = '\0';
    cb->cap_live->clear();
    cb->cap_idle->clear();
    cudaError_t e = cudaStreamBeginCapture(cb->c.stream, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        cudaGetLastError();
        pthread_rwlock_unlock(&cb->gate);
        set_err(err, errlen, "cudaStreamBeginCapture: %s", cudaGetErrorString(e));
        return RGPU_ERR_UNSUPPORTED;
    }
    cb->cap_owner = pthread_self();
    cb->c.capturing = true;
    __atomic_store_n(&cb->capturing, 1, __ATOMIC_RELEASE);
    return RGPU_OK;
}

static rgpu_status cu_graph_end(rgpu_backend *b, void **graph, char *err, size_t errlen) {
    cuda_backend *cb = backend_of(b);
    *graph = NULL;
    if (!capture_owner(cb)) { set_err(err, errlen, "no capture is running on this thread"); return RGPU_ERR_SEQUENCE; }
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(cb->c.stream, &g);   // ends it whatever happened
    if (e != cudaSuccess) {
        cudaGetLastError();
        capture_spoil(cb, RGPU_ERR_UNSUPPORTED, "cudaStreamEndCapture: %s", cudaGetErrorString(e));
    }
    std::vector<void *> blocks;
    try {
        for (auto &kv : *cb->cap_live) blocks.push_back(kv.first);
    } catch (...) {
        capture_spoil(cb, RGPU_ERR_NOMEM, "out of host memory");
        blocks.clear();   // the ones not listed stay out of the cache: a leak, not a fault
    }
    cudaGraphExec_t x = NULL;
    if (!cb->cap_st) {
        e = cudaGraphInstantiateWithFlags(&x, g, 0);
        if (e != cudaSuccess) {
            cudaGetLastError();
            x = NULL;
            capture_spoil(cb, e == cudaErrorMemoryAllocation ? RGPU_ERR_NOMEM : RGPU_ERR_UNSUPPORTED,
                          "cudaGraphInstantiate: %s", cudaGetErrorString(e));
        }
    }
    if (g) cudaGraphDestroy(g);   // the executable graph does not need it
    cuda_graph *cg = NULL;
    if (!cb->cap_st) {
        cg = new (std::nothrow) cuda_graph;
        if (!cg) capture_spoil(cb, RGPU_ERR_NOMEM, "out of host memory");
        else { cg->exec = x; cg->blocks.swap(blocks); }
    }
    if (cb->cap_st && x) cudaGraphExecDestroy(x);
    rgpu_status st = cb->cap_st;
    if (st) set_err(err, errlen, "%s", cb->cap_why);
    cb->cap_live->clear();
    cb->cap_idle->clear();
    cudaGetLastError();
    // the stream is an ordinary one again: let the other threads in
    cb->c.capturing = false;
    __atomic_store_n(&cb->capturing, 0, __ATOMIC_RELEASE);
    pthread_rwlock_unlock(&cb->gate);
    if (st) {
        gate_hold gh(cb);   // block_free may sync: never while another thread captures
        for (void *p : blocks) block_free(cb, p);   // nothing recorded ever ran: back to the cache
        return st;
    }
    *graph = cg;
    return RGPU_OK;
}

static rgpu_status cu_graph_launch(rgpu_backend *b, void *graph, char *err, size_t errlen) {
    cuda_backend *cb = backend_of(b);
    cuda_graph *cg = (cuda_graph *)graph;
    gate_hold g(cb);
    if (is_lost(cb)) { lost_message(cb, err, errlen); return RGPU_ERR_EXEC; }
    pthread_mutex_lock(&cb->exec_mu);
    rgpu_status fst = rgpu_cuda_pw_flush(&cb->c, err, errlen);
    cudaError_t e = fst ? cudaSuccess : cudaGraphLaunch(cg->exec, cb->c.stream);
    if (!fst) rgpu_cuda_tcount.graph_launches++;
    pthread_mutex_unlock(&cb->exec_mu);
    if (fst) return fst;
    if (e != cudaSuccess) return cuda_fail(cb, e, "cudaGraphLaunch", err, errlen);
    return RGPU_OK;
}

static void cu_graph_destroy(rgpu_backend *b, void *graph) {
    cuda_backend *cb = backend_of(b);
    cuda_graph *cg = (cuda_graph *)graph;
    if (!cg) return;
    gate_hold g(cb);
    cudaGraphExecDestroy(cg->exec);              // an in-flight launch finishes first (driver API docs)
    cudaGetLastError();
    for (void *p : cg->blocks) block_free(cb, p);   // stream-ordered reuse, like every free
    delete cg;
}

// ---------------------------------------------------------------------------
// Counts per thread (common.cuh)

thread_local rgpu_backend_counters rgpu_cuda_tcount;

static void cu_counters(rgpu_backend *b, rgpu_backend_counters *out) {
    (void)b;
    *out = rgpu_cuda_tcount;
}

// ---------------------------------------------------------------------------
// Create / destroy

static void cu_destroy(rgpu_backend *b) {
    if (!b) return;
    cuda_backend *cb = backend_of(b);
    if (cb) {
        if (cb->c.stream) {
            char err[320] = "";
            rgpu_cuda_pw_flush(&cb->c, err, sizeof err);   // what was asked for still runs
            cudaStreamSynchronize(cb->c.stream);
        }
        rgpu_cuda_pw_batch_free(&cb->c);
        if (cb->c.blas.handle && cb->c.blas.Destroy) cb->c.blas.Destroy(cb->c.blas.handle);
        cb->c.blas.handle = NULL;
        rgpu_cublas_unload(&cb->c.blas);
        rgpu_cusolver_unload(&cb->c.solver);
        rgpu_cudnn_unload(&cb->c.dnn);
        if (cb->live) {
            for (auto &kv : *cb->live)
                if (kv.second & ~IDLE) cudaFree(kv.first);   // cached and (leaked) live blocks alike
            delete cb->live;
        }
        delete cb->cached;
        delete cb->cap_live;
        delete cb->cap_idle;
        if (cb->marks) {
            for (cudaEvent_t ev : *cb->marks) cudaEventDestroy(ev);
            delete cb->marks;
        }
        if (cb->copy) { cudaStreamSynchronize(cb->copy); cudaStreamDestroy(cb->copy); }
        for (int i = 0; i < STAGE_SLOTS; i++) {
            if (cb->stage[i]) cudaFreeHost(cb->stage[i]);
            if (cb->stage_ev[i]) cudaEventDestroy(cb->stage_ev[i]);
            if (cb->land[i]) cudaFree(cb->land[i]);
            if (cb->land_ev[i]) cudaEventDestroy(cb->land_ev[i]);
        }
        if (cb->c.stream) cudaStreamDestroy(cb->c.stream);
        cudaGetLastError();
        pthread_mutex_destroy(&cb->exec_mu);
        pthread_mutex_destroy(&cb->alloc_mu);
        pthread_mutex_destroy(&cb->stage_mu);
        pthread_mutex_destroy(&cb->lost_mu);
        pthread_rwlock_destroy(&cb->gate);
        free(cb);
    }
    free(b);
}

// cuBLAS on the backend's stream with a fixed workspace (deterministic: one
// stream, one workspace); default math, no TF32 unless allow_tf32, reductions
// in the compute type. Leaves blas.handle NULL and blas_why set on failure.
static void blas_init(cuda_backend *cb) {
    rgpu_cublas *bl = &cb->c.blas;
    if (!rgpu_cublas_load(bl, cb->blas_why, sizeof cb->blas_why)) return;
    int s;
    const char *what = NULL;
    void *h = NULL;
    if ((s = bl->Create(&h)) != 0) { what = "cublasCreate_v2"; h = NULL; }
    else if ((s = bl->SetStream(h, cb->c.stream)) != 0) what = "cublasSetStream_v2";
    else {
        // CUBLAS_DEFAULT_MATH (0) or CUBLAS_TF32_TENSOR_OP_MATH (3),
        // | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (16)
        int mode = (cb->c.allow_tf32 ? 3 : 0) | 16;
        if ((s = bl->SetMathMode(h, mode)) != 0) what = "cublasSetMathMode";
        else if (!(cb->blas_ws = block_alloc(cb, BLAS_WORKSPACE_BYTES))) { what = "workspace allocation"; s = -1; }
        else if ((s = bl->SetWorkspace(h, cb->blas_ws, BLAS_WORKSPACE_BYTES)) != 0) what = "cublasSetWorkspace_v2";
    }
    if (what) {
        snprintf(cb->blas_why, sizeof cb->blas_why, "cuBLAS loaded but %s failed (cublasStatus %d)", what, s);
        if (h) bl->Destroy(h);
        if (cb->blas_ws) { block_free(cb, cb->blas_ws); cb->blas_ws = NULL; }
        rgpu_cublas_unload(bl);
        bl->handle = NULL;
        return;
    }
    bl->handle = h;
}

static size_t cache_cap_bytes(void) {
    const char *env = getenv("RGPU_CUDA_CACHE_MB");
    if (env && *env) {
        char *end;
        unsigned long long mb = strtoull(env, &end, 10);
        if (!*end) return (size_t)(mb << 20);
    }
    size_t fr = 0, total = 0;
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess) { cudaGetLastError(); return (size_t)4 << 30; }
    return total / 2;
}

extern "C" rgpu_backend *rgpu_backend_cuda_create(char *why, size_t whylen) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        set_err(why, whylen, "no usable CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
        cudaGetLastError();
        return NULL;
    }
    rgpu_backend *b = (rgpu_backend *)calloc(1, sizeof *b);
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!b || !cb) { free(b); free(cb); set_err(why, whylen, "out of host memory"); return NULL; }
    pthread_mutex_init(&cb->exec_mu, NULL);
    pthread_mutex_init(&cb->alloc_mu, NULL);
    pthread_mutex_init(&cb->stage_mu, NULL);
    pthread_mutex_init(&cb->lost_mu, NULL);
    pthread_rwlock_init(&cb->gate, NULL);
    b->name = "cuda";
    b->ctx = cb;
    b->alloc = cu_alloc;
    b->free = cu_free;
    b->upload = cu_upload;
    b->download = cu_download;
    b->exec = cu_exec;
    b->sync = cu_sync;
    b->supports = cu_supports;
    b->destroy = cu_destroy;
    b->graph_begin = cu_graph_begin;
    b->graph_end = cu_graph_end;
    b->graph_launch = cu_graph_launch;
    b->graph_destroy = cu_graph_destroy;
    b->timer_mark = cu_timer_mark;
    b->timer_ms = cu_timer_ms;
    b->timer_release = cu_timer_release;
    b->err_new = cu_err_new;
    b->err_free = cu_err_free;
    b->err_fetch = cu_err_fetch;
    b->err_read = cu_err_read;
    b->err_call = cu_err_call;
    b->counters = cu_counters;
    b->device_memory = true;
    cb->c.device = 0;
    cb->c.allow_tf32 = false;
    cb->c.alloc_state = cb;
    try {
        cb->live = new std::unordered_map<void *, size_t>();
        cb->cached = new std::unordered_map<size_t, std::vector<void *>>();
        cb->cap_live = new std::unordered_map<void *, size_t>();
        cb->cap_idle = new std::unordered_map<size_t, std::vector<void *>>();
    } catch (...) {
        set_err(why, whylen, "out of host memory");
        cu_destroy(b);
        return NULL;
    }
    if ((e = cudaSetDevice(0)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&cb->c.stream, cudaStreamNonBlocking)) != cudaSuccess) {
        set_err(why, whylen, "cannot initialise CUDA device 0: %s", cudaGetErrorString(e));
        cudaGetLastError();
        cu_destroy(b);
        return NULL;
    }
    cb->cache_cap = cache_cap_bytes();
    blas_init(cb);
    if (!cb->c.blas.handle) logf_("%s: mm, bmm, addmm, baddbmm and convolution unavailable", cb->blas_why);
    else if (getenv("RGPU_CUDA_VERBOSE")) logf_("%s", cb->blas_why);

    // `auto` takes cuda only when every op runs here; --backend cuda too,
    // unless RGPU_CUDA_PARTIAL=1. Say which ops are missing.
    int have = 0, listed = 0;
    char missing[200] = "";
    size_t ml = 0;
    for (int i = 0; i < RGPU_OP_COUNT; i++) {
        if (cu_supports(b, i)) { have++; continue; }
        if (listed++ < 8 && ml < sizeof missing)
            ml += (size_t)snprintf(missing + ml, sizeof missing - ml, "%s%s", ml ? ", " : "", rgpu_op_name(i));
    }
    if (listed > 8 && ml < sizeof missing) snprintf(missing + ml, sizeof missing - ml, ", ... %d more", listed - 8);
    if (have < RGPU_OP_COUNT) {
        bool blas_gap = !cb->c.blas.handle;
        if (getenv("RGPU_CUDA_PARTIAL") == NULL) {
            set_err(why, whylen, "cuda backend runs %d of %d ops (missing: %s)%s%s (set RGPU_CUDA_PARTIAL=1 to use it anyway)",
                    have, RGPU_OP_COUNT, missing, blas_gap ? "; cuBLAS missing: " : "", blas_gap ? cb->blas_why : "");
            cu_destroy(b);
            return NULL;
        }
        logf_("RGPU_CUDA_PARTIAL=1: running with %d of %d ops (missing: %s)", have, RGPU_OP_COUNT, missing);
    }
    return b;
}
