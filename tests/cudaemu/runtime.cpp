// runtime.cpp — cudaemu's runtime: the subset of the CUDA runtime API that
// replayer/cuda/ calls, executed on the CPU, plus the machinery behind the
// prelude (cudaemu.h): kernels as blocks of fibers, barriers, warp
// collectives, shared memory.
//
// Semantics chosen to make missing synchronisation visible:
//   - every stream operation (kernel, async copy/memset, cuBLAS call, event
//     record) is queued and runs only at a synchronisation point: stream,
//     event or device sync, a blocking cudaMemcpy/cudaMemset, cudaFree; a
//     device-to-host cudaMemcpyAsync does not complete before its stream is
//     synchronised (stricter than CUDA for pageable memory, where the call
//     returns after the copy: code that reads without a sync is fragile);
//   - a host-to-device cudaMemcpyAsync from pageable memory copies the source
//     at the call (as CUDA stages it); from pinned memory it reads at run time;
//   - fresh device and shared memory is 0xff bytes (NaN, -1);
//   - copies and memsets are bounds-checked against the allocations;
//   - a kernel fault (barrier not reached, bad shuffle, too much shared
//     memory, bad pointer in a copy at run time) is printed with the kernel's
//     name and launch site and becomes the sticky cudaErrorLaunchFailure.
// One global lock: API calls and execution are serialised; kernels run on
// the thread that synchronises.
//
// Environment: CUDAEMU_ORDER=forward|reverse|random (order of a block's
// threads between barriers; CUDAEMU_SEED for random), CUDAEMU_DEVICES=0
// (no device), CUDAEMU_MEM_MB (reported device memory, default 16384),
// CUDAEMU_VERBOSE=1 (a line per kernel run), CUDAEMU_STATS=DIR (launch
// counts per kernel written to DIR/launches-<pid>.json at exit).
#include "cudaemu.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cudaemu_api.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define STACK_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define STACK_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace cudaemu {

thread_ctx *cur_thread;
block_ctx cur_block;

// ---------------------------------------------------------------------------
// Global state

struct op {
    enum kind_t { KERNEL, COPY, SET, EVENT, HOST, WAIT } kind;
    // KERNEL
    launch_site site;
    std::shared_ptr<kernel_body> body;
    // COPY / SET
    void *dst = nullptr;
    const void *src = nullptr;
    size_t n = 0;
    int value = 0;
    cudaMemcpyKind ckind = cudaMemcpyDefault;
    std::shared_ptr<std::vector<char>> staged;   // pageable H2D source, copied at the call
    // EVENT
    struct event *ev = nullptr;
    uint64_t ev_seq = 0;
    // HOST
    std::function<void()> fn;
    const char *what = "";
    // WAIT (cudaStreamWaitEvent): the event's stream up to its record
    struct stream *wait_s = nullptr;
    uint64_t wait_seq = 0;
};

struct graph { std::vector<op> ops; };
struct graph_exec { std::vector<op> ops; };

struct stream {
    unsigned flags = 0;
    std::deque<op> q;
    uint64_t enq = 0, done = 0;          // operations queued / run, ever
    unsigned made = 0;                   // creation order, from 1 (CUDAEMU_STREAMS=odd|even)
    graph *cap = nullptr;               // capturing into
    bool cap_invalid = false;
};

struct event {
    stream *s = nullptr;
    uint64_t seq = 0;                   // done when s->done >= seq
    bool recorded = false;
    bool timing = true;                 // not created with cudaEventDisableTiming
    int64_t ns = 0;                     // CLOCK_MONOTONIC when its record ran (timing)
};

struct alloc_info { size_t size; bool pinned; };

static std::recursive_mutex g_mu;
static std::map<uintptr_t, alloc_info> g_allocs;   // device and pinned host memory
static size_t g_device_bytes;
static stream g_legacy;                           // stream 0
static std::vector<stream *> g_streams;           // created streams (for device sync)
static cudaError_t g_last = cudaSuccess;          // for cudaGetLastError
static cudaError_t g_sticky = cudaSuccess;        // a kernel fault: every call reports it
static char g_fault[1024];
static int g_device;
static int g_order = -1;                          // 0 forward, 1 reverse, 2 random
static unsigned long long g_rng = 0x9e3779b97f4a7c15ull;
static bool g_verbose;
static int g_streams_mode;                        // CUDAEMU_STREAMS: 0 defer, 1 odd, 2 even
static unsigned g_streams_made;                   // created streams, ever (their creation order)
static unsigned long long g_kernels_run;

typedef std::lock_guard<std::recursive_mutex> guard;

static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) g_last = e;
    return e;
}

#if defined(__SANITIZE_ADDRESS__)
static bool g_protect = false;
#else
static bool g_protect = true;
#endif

// A fault on a device allocation from host code gets a line saying so before
// the process dies as it would have (the handler is reset by SA_RESETHAND).
static void segv_note(int sig, siginfo_t *si, void *) {
    char msg[200];
    int n = snprintf(msg, sizeof msg, "cudaemu: signal %d at %p: host code touched device memory (a device pointer "
                     "used on the host), or a kernel overflowed its fiber stack\n", sig, si->si_addr);
    if (n > 0) { ssize_t w = write(2, msg, (size_t)n); (void)w; }
}

static void install_segv_note() {
    static bool done;
    if (done) return;
    done = true;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = segv_note;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    struct sigaction old;
    if (sigaction(SIGSEGV, NULL, &old) == 0 && old.sa_handler == SIG_DFL) sigaction(SIGSEGV, &sa, NULL);
}

static void stats_init();

static void init_env() {
    if (g_order >= 0) return;
    stats_init();
    const char *o = getenv("CUDAEMU_ORDER");
    g_order = !o || !*o || !strcmp(o, "forward") ? 0 : !strcmp(o, "reverse") ? 1 : 2;
    const char *sd = getenv("CUDAEMU_SEED");
    if (sd && *sd) g_rng = strtoull(sd, NULL, 0) * 2654435761ull + 1;
    const char *pr = getenv("CUDAEMU_PROTECT");
    if (pr && *pr) g_protect = strcmp(pr, "0") != 0;
    install_segv_note();
    const char *sm = getenv("CUDAEMU_STREAMS");
    g_streams_mode = !sm || !*sm ? 0 : !strcmp(sm, "odd") ? 1 : !strcmp(sm, "even") ? 2 : 0;
    const char *v = getenv("CUDAEMU_VERBOSE");
    g_verbose = v && *v && strcmp(v, "0");
}

static bool has_device() {
    const char *d = getenv("CUDAEMU_DEVICES");
    return !(d && !strcmp(d, "0"));
}

static stream *S(cudaStream_t s) { return s ? (stream *)s : &g_legacy; }

// The allocation holding [p, p+n), or NULL.
static const alloc_info *find_alloc(const void *p, size_t n, uintptr_t *base = nullptr) {
    uintptr_t a = (uintptr_t)p;
    auto it = g_allocs.upper_bound(a);
    if (it == g_allocs.begin()) return nullptr;
    --it;
    if (a < it->first || a - it->first > it->second.size || n > it->second.size - (a - it->first)) return nullptr;
    if (base) *base = it->first;
    return &it->second;
}
static bool is_device(const void *p, size_t n) {
    const alloc_info *a = find_alloc(p, n);
    return a && !a->pinned;
}
static bool is_pinned(const void *p, size_t n) {
    const alloc_info *a = find_alloc(p, n);
    return a && a->pinned;
}

// the arguments after fmt, printf-formatted into the char array buf
#define FORMAT_VARARGS(buf, fmt) do { va_list ap_; va_start(ap_, fmt); \
    vsnprintf(buf, sizeof buf, fmt, ap_); va_end(ap_); } while (0)

static void fault(const char *fmt, ...) {
    char msg[900];
    FORMAT_VARARGS(msg, fmt);
    if (g_sticky == cudaSuccess) {
        snprintf(g_fault, sizeof g_fault, "%s", msg);
        g_sticky = cudaErrorLaunchFailure;
    }
    fprintf(stderr, "cudaemu: FAULT: %s\n", msg);
}

// Guard bytes after every allocation: a kernel (or cuBLAS call) that writes
// past the end of one is reported after it runs, with or without ASan.
static const size_t GUARD = 64;
static const unsigned char GUARD_BYTE = 0x5a;

static void guard_fill(void *m, size_t n) { memset((char *)m + n, GUARD_BYTE, GUARD); }

// The first allocation whose guard was written, as a fault naming `who`.
// Device memory is mapped PROT_NONE except while queued work runs, so host
// code that dereferences a device pointer faults here as it does next to a
// real GPU (instead of reading host memory that happens to be there).
// CUDAEMU_PROTECT=0 turns it off (plain malloc; the default under ASan, which
// then checks the accesses itself).
static int g_open_depth;

static size_t map_bytes(size_t n) { return (n + GUARD + 4095) / 4096 * 4096; }

// Protected device memory comes from one reserved arena, so opening and
// closing it is one mprotect however many allocations there are: first fit
// over the freed ranges (page multiples, coalesced), else past the end.
static char *g_arena;
static const size_t ARENA_BYTES = (size_t)256 << 30;   // address space only (MAP_NORESERVE)
static size_t g_arena_high;
static std::map<size_t, size_t> g_arena_free;          // offset -> bytes

static void *arena_alloc(size_t bytes) {
    if (!g_arena) {
        void *m = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) return nullptr;
        g_arena = (char *)m;
    }
    for (auto it = g_arena_free.begin(); it != g_arena_free.end(); ++it)
        if (it->second >= bytes) {
            size_t off = it->first, left = it->second - bytes;
            g_arena_free.erase(it);
            if (left) g_arena_free[off + bytes] = left;
            return g_arena + off;
        }
    if (bytes > ARENA_BYTES - g_arena_high) return nullptr;
    size_t off = g_arena_high;
    g_arena_high += bytes;
    return g_arena + off;
}

static void arena_free(void *p, size_t bytes) {
    size_t off = (size_t)((char *)p - g_arena);
    auto next = g_arena_free.lower_bound(off);
    if (next != g_arena_free.end() && next->first == off + bytes) {
        bytes += next->second;
        next = g_arena_free.erase(next);
    }
    if (next != g_arena_free.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == off) {
            prev->second += bytes;
            return;
        }
    }
    g_arena_free[off] = bytes;
}

static void set_device_access(bool open) {
    if (g_arena_high) mprotect(g_arena, g_arena_high, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

struct device_open {
    device_open() { if (g_protect && g_open_depth++ == 0) set_device_access(true); }
    ~device_open() { if (g_protect && --g_open_depth == 0) set_device_access(false); }
};

static void guard_check(const char *who) {
    for (auto &kv : g_allocs) {
        const unsigned char *g = (const unsigned char *)kv.first + kv.second.size;
        for (size_t k = 0; k < GUARD; k++)
            if (g[k] != GUARD_BYTE) {
                fault("%s wrote past the end of a %zu-byte %s allocation at %p (byte +%zu)", who, kv.second.size,
                      kv.second.pinned ? "pinned host" : "device", (void *)kv.first, k);
                guard_fill((void *)kv.first, kv.second.size);
                return;
            }
    }
}

// ---------------------------------------------------------------------------
// Fibers (x86-64): a context is a saved stack pointer; the switch saves the
// callee-saved registers, MXCSR and the x87 control word on the old stack.

extern "C" void cudaemu_ctx_switch(void **save_sp, void *load_sp);
extern "C" void cudaemu_fiber_entry();
#if defined(__x86_64__)
asm(R"(
    .text
    .globl cudaemu_ctx_switch
    .type cudaemu_ctx_switch,@function
cudaemu_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cudaemu_ctx_switch, .-cudaemu_ctx_switch
    .globl cudaemu_fiber_entry
    .type cudaemu_fiber_entry,@function
cudaemu_fiber_entry:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size cudaemu_fiber_entry, .-cudaemu_fiber_entry
)");
#else
#error "cudaemu: the fiber switch is written for x86-64 only"
#endif

static const size_t STACK_BYTES = 256 * 1024;   // per CUDA thread, plus a guard page below

static std::vector<char *> g_free_stacks;

static char *stack_get() {
    if (!g_free_stacks.empty()) {
        char *s = g_free_stacks.back();
        g_free_stacks.pop_back();
        return s;
    }
    char *m = (char *)mmap(NULL, STACK_BYTES + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    mprotect(m, 4096, PROT_NONE);   // overflow -> SIGSEGV, not silent corruption
    return m + 4096;
}

static void *stack_init(char *stack, void (*fn)(void *), void *arg) {
    // a reused stack still carries ASan's redzones of frames that never returned
    STACK_UNPOISON(stack, STACK_BYTES);
    uintptr_t top = ((uintptr_t)stack + STACK_BYTES) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 80);
    // [0] mxcsr | fpucw, [1] r15, [2] r14, [3] r13 = fn, [4] r12 = arg, [5] rbx, [6] rbp, [7] return -> entry
    sp[0] = 0x1F80ull | (0x037Full << 32);
    sp[1] = 0;
    sp[2] = 0;
    sp[3] = (uint64_t)(uintptr_t)fn;
    sp[4] = (uint64_t)(uintptr_t)arg;
    sp[5] = 0;
    sp[6] = 0;
    sp[7] = (uint64_t)(uintptr_t)&cudaemu_fiber_entry;
    sp[8] = 0;
    sp[9] = 0;
    return sp;
}

// ---------------------------------------------------------------------------
// A block: its threads as fibers, run in rounds. A round runs every runnable
// thread until it finishes or waits (block barrier or warp collective); then
// warp collectives whose lanes all arrived complete, else a barrier every
// live thread reached releases, else the block is stuck: a fault.

enum tstate { T_NEW, T_READY, T_BARRIER, T_WARP, T_DONE };

struct fthread {
    thread_ctx ctx;
    tstate st;
    char *stack;
    void *sp;
    // warp collective in progress
    warp_kind wk;
    unsigned wmask;
    uint64_t wval, wres;
    int wparam, wwidth;
};

struct block_run {
    const launch_site *site;
    kernel_body *body;
    std::vector<fthread> th;
    unsigned n;
    void *sched_sp;
    fthread *running;
    bool faulted;
    // shared memory
    std::vector<char> smem;                 // static
    size_t smem_used;
    std::vector<std::pair<const char *, size_t>> smem_keys;
    std::vector<char> dyn;
    size_t barriers;                        // barrier releases, for messages
};

static block_run *g_blk;
static const size_t STATIC_SMEM_LIMIT = 48 * 1024;
static const size_t DYN_SMEM_LIMIT = 48 * 1024;   // without cudaFuncSetAttribute opt-in

static void fiber_main(void *arg) {
    fthread *t = (fthread *)arg;
    g_blk->body->run();
    t->st = T_DONE;
    g_free_stacks.push_back(t->stack);   // reused once we have switched away
    void *dummy;
    cudaemu_ctx_switch(&dummy, g_blk->sched_sp);
    __builtin_unreachable();
}

static void yield_to_scheduler(fthread *t) {
    cudaemu_ctx_switch(&t->sp, g_blk->sched_sp);
    cur_thread = &t->ctx;   // back on this fiber
}

static void blk_fault(const char *fmt, ...) {
    char msg[700];
    FORMAT_VARARGS(msg, fmt);
    const launch_site *s = g_blk->site;
    fault("kernel %s (launched at %s:%d) block (%u,%u,%u): %s", s->name, s->file, s->line, cur_block.bid.x,
          cur_block.bid.y, cur_block.bid.z, msg);
    g_blk->faulted = true;
}

void syncthreads() {
    fthread *t = g_blk->running;
    t->st = T_BARRIER;
    yield_to_scheduler(t);
}

uint64_t warp_collective(warp_kind kind, unsigned mask, uint64_t value, int param, int width) {
    fthread *t = g_blk->running;
    t->st = T_WARP;
    t->wk = kind;
    t->wmask = mask;
    t->wval = value;
    t->wparam = param;
    t->wwidth = width;
    yield_to_scheduler(t);
    return t->wres;
}

void *shared_alloc(const char *key, size_t size, size_t align) {
    block_run *b = g_blk;
    for (auto &k : b->smem_keys)
        if (k.first == key) return b->smem.data() + k.second;
    size_t off = (b->smem_used + align - 1) / align * align;
    if (off + size > STATIC_SMEM_LIMIT) {
        blk_fault("static __shared__ memory over %zu bytes (%s needs %zu at offset %zu)", STATIC_SMEM_LIMIT, key, size, off);
        // give the thread memory to run on until the block is abandoned at its next wait
        static std::vector<char> scratch;
        scratch.assign(size, (char)0xff);
        return scratch.data();
    }
    memset(b->smem.data() + off, 0xff, size);   // poisoned for every block
    b->smem_used = off + size;
    b->smem_keys.push_back({key, off});
    return b->smem.data() + off;
}

void *shared_dynamic() { return g_blk->dyn.data(); }

// Complete the warp collectives whose lanes have all arrived. Returns false
// (after a fault) when a lane named in a mask can never arrive.
static bool resolve_warps(block_run *b, bool *progress) {
    unsigned nwarps = (b->n + 31) / 32;
    for (unsigned w = 0; w < nwarps; w++) {
        unsigned base = w * 32, lanes = std::min(32u, b->n - base);
        int first = -1;
        for (unsigned l = 0; l < lanes; l++)
            if (b->th[base + l].st == T_WARP) { first = (int)l; break; }
        if (first < 0) continue;
        fthread &f = b->th[base + first];
        unsigned mask = f.wmask;
        bool all = true;
        for (unsigned l = 0; l < lanes; l++) {
            fthread &t = b->th[base + l];
            bool named = mask >> l & 1;
            if (t.st == T_WARP && !named) {
                // a lane waiting in a collective whose own mask does not include itself
                if (!(t.wmask >> l & 1)) {
                    blk_fault("warp %u lane %u: its mask 0x%08x does not include itself", w, l, t.wmask);
                    return false;
                }
                continue;
            }
            if (!named) continue;
            if (t.st == T_WARP) {
                if (t.wk != f.wk || t.wmask != mask) {
                    blk_fault("warp %u: lanes %d and %u wait in different warp collectives (kind %d mask 0x%08x vs kind %d mask 0x%08x)",
                              w, first, l, (int)f.wk, mask, (int)t.wk, t.wmask);
                    return false;
                }
            } else if (t.st == T_DONE || t.st == T_BARRIER) {
                blk_fault("warp %u: lane %u is named in the mask 0x%08x of a %s but %s", w, l, mask,
                          f.wk == WARP_SYNC ? "__syncwarp" : "warp shuffle/vote",
                          t.st == T_DONE ? "has exited" : "waits at __syncthreads()");
                return false;
            } else {
                all = false;   // not yet there (cannot happen after a full round, kept for safety)
            }
        }
        if (lanes < 32 && (mask >> lanes)) {
            blk_fault("warp %u: mask 0x%08x names lanes past the block's %u threads", w, mask, b->n);
            return false;
        }
        if (!all) continue;
        // exchange: every participant's result from the values as they were
        unsigned ballot = 0;
        for (unsigned l = 0; l < lanes; l++)
            if (mask >> l & 1 && b->th[base + l].wval) ballot |= 1u << l;
        for (unsigned l = 0; l < lanes; l++) {
            if (!(mask >> l & 1)) continue;
            fthread &t = b->th[base + l];
            int wd = t.wwidth <= 0 || t.wwidth > 32 ? 32 : t.wwidth;
            int seg = (int)l / wd * wd, lo = (int)l - seg, src = (int)l;
            switch (t.wk) {
            case WARP_SHFL_IDX: src = seg + (t.wparam % wd + wd) % wd; break;
            case WARP_SHFL_UP: src = lo - t.wparam >= 0 ? (int)l - t.wparam : (int)l; break;
            case WARP_SHFL_DOWN: src = lo + t.wparam < wd ? (int)l + t.wparam : (int)l; break;
            case WARP_SHFL_XOR: src = (int)l ^ t.wparam; if (src < seg || src >= seg + wd) src = (int)l; break;
            default: break;
            }
            if (t.wk >= WARP_SHFL_IDX && t.wk <= WARP_SHFL_XOR) {
                if (src >= (int)lanes || !(mask >> src & 1)) {
                    blk_fault("warp %u lane %u: shuffle reads lane %d, which is not in the mask 0x%08x", w, l, src, mask);
                    return false;
                }
                t.wres = b->th[base + src].wval;
            } else if (t.wk == WARP_BALLOT) {
                t.wres = ballot;
            } else if (t.wk == WARP_ANY) {
                t.wres = ballot != 0;
            } else if (t.wk == WARP_ALL) {
                t.wres = ballot == (mask & (lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1)));
            } else {
                t.wres = 0;
            }
        }
        for (unsigned l = 0; l < lanes; l++)
            if (mask >> l & 1) b->th[base + l].st = T_READY;
        *progress = true;
    }
    return true;
}

static unsigned long long rng_next() {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

// Runs one block to completion; false after a fault.
static bool run_block(block_run *b) {
    std::vector<unsigned> order(b->n);
    for (unsigned i = 0; i < b->n; i++) order[i] = i;
    for (;;) {
        if (g_order == 1) std::reverse(order.begin(), order.end());
        else if (g_order == 2)
            for (unsigned i = b->n; i > 1; i--) std::swap(order[i - 1], order[rng_next() % i]);
        for (unsigned k = 0; k < b->n; k++) {
            fthread &t = b->th[order[k]];
            if (t.st != T_NEW && t.st != T_READY) continue;
            if (t.st == T_NEW) {
                t.stack = stack_get();
                if (!t.stack) { blk_fault("out of memory for fiber stacks"); return false; }
                t.sp = stack_init(t.stack, fiber_main, &t);
            }
            t.st = T_READY;
            b->running = &t;
            cur_thread = &t.ctx;
            cudaemu_ctx_switch(&b->sched_sp, t.sp);
            if (b->faulted) return false;
        }
        // everyone is waiting or done
        bool progress = false;
        if (!resolve_warps(b, &progress)) return false;
        if (progress) continue;
        unsigned at_bar = 0, done = 0;
        for (auto &t : b->th) at_bar += t.st == T_BARRIER, done += t.st == T_DONE;
        if (done == b->n) return true;
        if (at_bar + done == b->n && done == 0) {
            for (auto &t : b->th) t.st = T_READY;
            b->barriers++;
            continue;
        }
        if (at_bar + done == b->n) {
            blk_fault("__syncthreads() #%zu reached by %u threads while %u threads of the block have exited "
                      "without reaching it (first exited thread: %u)", b->barriers + 1, at_bar, done,
                      [&] { for (unsigned i = 0; i < b->n; i++) if (b->th[i].st == T_DONE) return i; return 0u; }());
            return false;
        }
        blk_fault("block cannot make progress (%u at __syncthreads(), %u exited, %u in warp collectives)", at_bar, done,
                  b->n - at_bar - done);
        return false;
    }
}

static void run_kernel(const op &o) {
    const launch_site &s = o.site;
    unsigned n = s.block.x * s.block.y * s.block.z;
    block_run b;
    b.site = &s;
    b.body = o.body.get();
    b.n = n;
    b.th.resize(n);
    b.faulted = false;
    b.smem.resize(STATIC_SMEM_LIMIT);
    b.dyn.resize(s.shmem ? s.shmem : 1);
    block_run *prev = g_blk;
    g_blk = &b;
    cur_block.bdim = s.block;
    cur_block.gdim = s.grid;
    if (g_verbose) fprintf(stderr, "cudaemu: run %s <<<(%u,%u,%u),(%u,%u,%u),%zu>>> from %s:%d\n", s.name, s.grid.x, s.grid.y,
                           s.grid.z, s.block.x, s.block.y, s.block.z, s.shmem, s.file, s.line);
    // blocks in the same order as threads (CUDA promises none): forward,
    // reverse, or shuffled, so a kernel that counts on one block running
    // before another is exposed
    unsigned long long nblocks = (unsigned long long)s.grid.x * s.grid.y * s.grid.z;
    std::vector<unsigned long long> border;
    if (g_order != 0) {
        border.resize(nblocks);
        for (unsigned long long i = 0; i < nblocks; i++) border[i] = g_order == 1 ? nblocks - 1 - i : i;
        if (g_order == 2)
            for (unsigned long long i = nblocks; i > 1; i--) std::swap(border[i - 1], border[rng_next() % i]);
    }
    for (unsigned long long k = 0; k < nblocks && !b.faulted; k++) {
            {
                unsigned long long lin = g_order ? border[k] : k;
                unsigned bx = (unsigned)(lin % s.grid.x), by = (unsigned)(lin / s.grid.x % s.grid.y),
                         bz = (unsigned)(lin / s.grid.x / s.grid.y);
                cur_block.bid = make_uint3(bx, by, bz);
                unsigned i = 0;
                for (unsigned z = 0; z < s.block.z; z++)
                    for (unsigned y = 0; y < s.block.y; y++)
                        for (unsigned x = 0; x < s.block.x; x++, i++) {
                            fthread &t = b.th[i];
                            t.ctx.tid = make_uint3(x, y, z);
                            t.ctx.linear = i;
                            t.st = T_NEW;
                            t.stack = nullptr;
                        }
                b.smem_used = 0;
                b.smem_keys.clear();
                b.barriers = 0;
                memset(b.dyn.data(), 0xff, b.dyn.size());
                if (!run_block(&b)) {
                    // abandon the block's fibers: their stacks go back to the pool
                    for (auto &t : b.th)
                        if (t.st != T_NEW && t.st != T_DONE && t.stack) g_free_stacks.push_back(t.stack);
                }
            }
    }
    g_kernels_run++;
    g_blk = prev;
    char who[300];
    snprintf(who, sizeof who, "kernel %s (launched at %s:%d)", s.name, s.file, s.line);
    guard_check(who);
}

// ---------------------------------------------------------------------------
// Executing queued work

static void drain(stream *s, uint64_t upto);
static void drain_for_legacy();

static void run_op(stream *st, op &o) {
    if (g_sticky != cudaSuccess) return;   // a faulted context runs nothing more
    switch (o.kind) {
    case op::KERNEL: run_kernel(o); break;
    case op::COPY: {
        const void *src = o.staged ? (const void *)o.staged->data() : o.src;
        bool d_dev = is_device(o.dst, o.n), s_dev = o.staged ? false : is_device(src, o.n);
        bool ok = true;
        switch (o.ckind) {
        case cudaMemcpyHostToDevice: ok = d_dev; break;
        case cudaMemcpyDeviceToHost: ok = s_dev; break;
        case cudaMemcpyDeviceToDevice: ok = d_dev && s_dev; break;
        default: break;
        }
        if (!ok) { fault("cudaMemcpyAsync of %zu bytes (kind %d): a device range is outside every allocation when it runs (freed?)", o.n, (int)o.ckind); break; }
        memmove(o.dst, src, o.n);
        break;
    }
    case op::SET:
        if (!is_device(o.dst, o.n)) { fault("cudaMemsetAsync of %zu bytes: outside every allocation when it runs (freed?)", o.n); break; }
        memset(o.dst, o.value, o.n);
        break;
    case op::EVENT: {   // the time it ran at, in stream order (cudaEventElapsedTime)
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        o.ev->ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        break;
    }
    case op::HOST: o.fn(); guard_check(o.what); break;
    case op::WAIT:   // the other stream's work up to the event runs first (nothing runs concurrently here)
        if (o.wait_s) {
            if (o.wait_s == &g_legacy) drain_for_legacy();
            drain(o.wait_s, o.wait_seq);
        }
        break;
    }
    (void)st;
}

// Runs s's queue until s->done >= upto.
static void drain(stream *s, uint64_t upto) {
    if (s->done >= upto || s->q.empty()) return;
    device_open open_;
    while (s->done < upto && !s->q.empty()) {
        op o = std::move(s->q.front());
        s->q.pop_front();
        run_op(s, o);
        s->done++;
    }
}
static void drain_all(stream *s) { drain(s, s->enq); }

static void drain_device() {
    drain_all(&g_legacy);
    for (stream *s : g_streams) drain_all(s);
}

// The legacy default stream waits for (and is waited on by) the blocking streams.
static void drain_for_legacy() {
    for (stream *s : g_streams)
        if (!(s->flags & cudaStreamNonBlocking)) drain_all(s);
}

// Work queued and not run: on s (the legacy stream: also on the blocking
// streams it waits for), or on any stream.
static bool pending(const stream *s) {
    if (s->enq > s->done) return true;
    if (s == &g_legacy)
        for (stream *b : g_streams)
            if (!(b->flags & cudaStreamNonBlocking) && b->enq > b->done) return true;
    return false;
}
static bool pending_any() {
    if (g_legacy.enq > g_legacy.done) return true;
    for (stream *b : g_streams)
        if (b->enq > b->done) return true;
    return false;
}

// CUDAEMU_STREAMS: a GPU may run any stream's work as soon as its waits
// allow; by default this layer runs it only when a sync asks. To make one
// stream run ahead of another, so that a missing cross-stream wait reads or
// writes too early: odd / even: the 1st, 3rd, ... (odd) or the 2nd, 4th, ...
// (even) created streams run every operation at its enqueue (as far as its
// waits allow), the others stay deferred.
static cudaError_t enqueue(stream *s, op &&o) {
    if (s->cap) {
        if (s->cap_invalid) return cudaErrorStreamCaptureInvalidated;
        s->cap->ops.push_back(std::move(o));
        return cudaSuccess;
    }
    s->q.push_back(std::move(o));
    s->enq++;
    if (g_streams_mode && g_sticky == cudaSuccess && s->made && (s->made & 1) == (g_streams_mode == 1 ? 1u : 0u))
        drain(s, s->enq);
    return cudaSuccess;
}

// A synchronising call on a capturing stream spoils the capture (CUDA).
static bool spoil_if_capturing(stream *s) {
    if (!s->cap) return false;
    s->cap_invalid = true;
    return true;
}

static cudaError_t sync_stream(stream *s) {
    if (spoil_if_capturing(s)) return cudaErrorStreamCaptureUnsupported;
    if (s == &g_legacy) drain_for_legacy();
    drain_all(s);
    return g_sticky;
}

// ---------------------------------------------------------------------------
// Launch statistics (CUDAEMU_STATS=DIR)
//
// Counts what host code launches, which is what a GPU pays launch overhead
// for: kernels per launch site name (as the rewrite spells it, e.g.
// "pw_kernel<T, Op>") and file, counted at the launch, not when they run;
// launches into a stream capture are counted apart ("captured"), and each
// cudaGraphLaunch once. Library calls that queue host work through
// cudaemu_enqueue_host (the cuBLAS, cuFFT and cuSOLVER references) are counted
// by their label ("cublas gemm", "cufft", "cusolver"). Host waits are counted
// by the call that blocks the host until the device caught up
// (cudaStreamSynchronize, cudaEventSynchronize, cudaDeviceSynchronize and
// cudaFree when work it waits for was queued and not run -- this layer runs
// work only when waited for, so that is a GPU far behind the host --, and every
// blocking cudaMemcpy), and the device allocations (cudaMalloc, cudaFree,
// cudaHostAlloc) by call: "host_waits" and "allocations". Written at exit as
// DIR/launches-<pid>.json (the server returns from main on SIGTERM/SIGINT, so
// exit handlers run); off and free (one branch per launch) when unset. Its own
// mutex: the exit handler must not wait on g_mu, which a thread running a
// kernel may hold while the process exits.

struct launch_count { unsigned long long launches = 0, captured = 0; };
static bool g_stats;
static std::string *g_stats_dir;                  // never freed: used by the exit handler
static std::mutex *g_stats_mu;
static std::map<std::pair<std::string, std::string>, launch_count> *g_stats_kernels;   // (file, name)
static std::map<std::string, unsigned long long> *g_stats_host;
static std::map<std::string, unsigned long long> *g_stats_waits, *g_stats_allocs;
static unsigned long long g_stats_graphs;

static void json_str(FILE *f, const std::string &v) {
    fputc('"', f);
    for (unsigned char c : v) {
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void stats_write() {
    if (!g_stats) return;
    std::lock_guard<std::mutex> l(*g_stats_mu);
    std::string path = *g_stats_dir + "/launches-" + std::to_string((long)getpid()) + ".json";
    std::string tmp = path + ".tmp";
    FILE *f = fopen(tmp.c_str(), "w");
    if (!f) { fprintf(stderr, "cudaemu: CUDAEMU_STATS: cannot write %s: %s\n", tmp.c_str(), strerror(errno)); return; }
    unsigned long long total = 0;
    for (auto &kv : *g_stats_kernels) total += kv.second.launches;
    fprintf(f, "{\"pid\": %ld, \"kernel_launches\": %llu, \"graph_launches\": %llu,\n \"kernels\": [", (long)getpid(), total,
            g_stats_graphs);
    bool first = true;
    for (auto &kv : *g_stats_kernels) {
        fprintf(f, "%s\n  {\"file\": ", first ? "" : ",");
        json_str(f, kv.first.first);
        fprintf(f, ", \"name\": ");
        json_str(f, kv.first.second);
        fprintf(f, ", \"launches\": %llu, \"captured\": %llu}", kv.second.launches, kv.second.captured);
        first = false;
    }
    const char *maps[3] = { "host_ops", "host_waits", "allocations" };
    const std::map<std::string, unsigned long long> *vals[3] = { g_stats_host, g_stats_waits, g_stats_allocs };
    for (int k = 0; k < 3; k++) {
        fprintf(f, "%s\n \"%s\": {", k ? "," : "],", maps[k]);
        first = true;
        for (auto &kv : *vals[k]) {
            fprintf(f, "%s", first ? "" : ", ");
            json_str(f, kv.first);
            fprintf(f, ": %llu", kv.second);
            first = false;
        }
        fprintf(f, "}");
    }
    fprintf(f, "}\n");
    if (fclose(f) != 0 || rename(tmp.c_str(), path.c_str()) != 0)
        fprintf(stderr, "cudaemu: CUDAEMU_STATS: cannot write %s: %s\n", path.c_str(), strerror(errno));
}

// Reads CUDAEMU_STATS (again after cudaemu_reset_for_tests: counts restart).
static void stats_init() {
    const char *d = getenv("CUDAEMU_STATS");
    bool on = d && *d;
    if (on && !g_stats_mu) {
        g_stats_mu = new std::mutex;
        g_stats_dir = new std::string;
        g_stats_kernels = new std::map<std::pair<std::string, std::string>, launch_count>;
        g_stats_host = new std::map<std::string, unsigned long long>;
        g_stats_waits = new std::map<std::string, unsigned long long>;
        g_stats_allocs = new std::map<std::string, unsigned long long>;
        atexit(stats_write);
    }
    if (g_stats_mu) {
        std::lock_guard<std::mutex> l(*g_stats_mu);
        if (on) {
            *g_stats_dir = d;
            mkdir(d, 0777);     // an existing folder is fine; a failure shows when writing
        }
        g_stats_kernels->clear();
        g_stats_host->clear();
        g_stats_waits->clear();
        g_stats_allocs->clear();
        g_stats_graphs = 0;
    }
    g_stats = on;
}

static void stats_kernel(const launch_site &site, bool captured) {
    std::lock_guard<std::mutex> l(*g_stats_mu);
    launch_count &c = (*g_stats_kernels)[{site.file ? site.file : "", site.name ? site.name : ""}];
    (captured ? c.captured : c.launches)++;
}

static void stats_host(const char *what) {
    std::lock_guard<std::mutex> l(*g_stats_mu);
    (*g_stats_host)[what ? what : ""]++;
}

// A host wait (wait) or a device allocation (!wait), by the call's name.
static void stats_call(bool wait, const char *what) {
    if (!g_stats) return;
    std::lock_guard<std::mutex> l(*g_stats_mu);
    (*(wait ? g_stats_waits : g_stats_allocs))[what]++;
}

// ---------------------------------------------------------------------------
// Launch

void submit(const launch_site &site, std::shared_ptr<kernel_body> body) {
    guard g(g_mu);
    init_env();
    if (g_sticky != cudaSuccess) { ret(g_sticky); return; }
    const dim3 &gr = site.grid, &bl = site.block;
    unsigned long long threads = (unsigned long long)bl.x * bl.y * bl.z;
    if (!gr.x || !gr.y || !gr.z || !bl.x || !bl.y || !bl.z || threads > 1024 || bl.x > 1024 || bl.y > 1024 || bl.z > 64 ||
        gr.x > 2147483647u || gr.y > 65535 || gr.z > 65535) {
        fprintf(stderr, "cudaemu: launch of %s at %s:%d: invalid configuration grid (%u,%u,%u) block (%u,%u,%u)\n", site.name,
                site.file, site.line, gr.x, gr.y, gr.z, bl.x, bl.y, bl.z);
        ret(cudaErrorInvalidConfiguration);
        return;
    }
    if (site.shmem > DYN_SMEM_LIMIT) {
        fprintf(stderr, "cudaemu: launch of %s at %s:%d: %zu bytes of dynamic shared memory (limit %zu)\n", site.name,
                site.file, site.line, site.shmem, DYN_SMEM_LIMIT);
        ret(cudaErrorInvalidValue);
        return;
    }
    op o;
    o.kind = op::KERNEL;
    o.site = site;
    o.body = std::move(body);
    stream *st = S(site.stream);
    cudaError_t e = enqueue(st, std::move(o));
    if (e) ret(e);
    else if (g_stats) stats_kernel(site, st->cap != nullptr);
}

}  // namespace cudaemu

using namespace cudaemu;

// ---------------------------------------------------------------------------
// The layer's own API (cudaemu_api.h): for the cuBLAS reference and tests.

extern "C" int cudaemu_enqueue_host(cudaStream_t s, const char *what, void (*fn)(void *), void *arg, void (*release)(void *)) {
    guard g(g_mu);
    init_env();
    if (g_sticky != cudaSuccess) return g_sticky;
    if (g_stats) stats_host(what);
    std::shared_ptr<void> keep(arg, release ? release : [](void *) {});
    op o;
    o.kind = op::HOST;
    o.what = what;
    o.fn = [fn, keep] { fn(keep.get()); };
    return enqueue(S(s), std::move(o));
}

extern "C" int cudaemu_device_range_ok(const void *p, size_t n) {
    guard g(g_mu);
    return is_device(p, n);
}

extern "C" void cudaemu_report_fault(const char *msg) {
    guard g(g_mu);
    fault("%s", msg);
}

extern "C" const char *cudaemu_last_fault(void) { return g_fault; }
extern "C" unsigned long long cudaemu_kernels_run(void) { return g_kernels_run; }
extern "C" size_t cudaemu_pending(cudaStream_t s) {
    guard g(g_mu);
    return S(s)->q.size();
}
extern "C" void cudaemu_reset_for_tests(void) {
    guard g(g_mu);
    g_sticky = cudaSuccess;
    g_last = cudaSuccess;
    g_fault[0] = 0;
    g_order = -1;
    init_env();     // re-reads the environment, CUDAEMU_STATS too
}

// ---------------------------------------------------------------------------
// CUDA runtime API

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
    guard g(g_mu);
    if (!has_device()) { *count = 0; return ret(cudaErrorNoDevice); }
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    guard g(g_mu);
    if (!has_device() || device != 0) return ret(cudaErrorInvalidDevice);
    g_device = device;
    return g_sticky ? ret(g_sticky) : cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    *device = g_device;
    return cudaSuccess;
}

static size_t mem_total() {
    const char *m = getenv("CUDAEMU_MEM_MB");
    size_t mb = m && *m ? strtoull(m, NULL, 10) : 16384;
    return mb << 20;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device) {
    guard g(g_mu);
    if (!has_device() || device != 0) return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cudaemu");   // "cuda (cudaemu)" in the handshake
    p->totalGlobalMem = mem_total();
    p->sharedMemPerBlock = STATIC_SMEM_LIMIT;
    p->sharedMemPerBlockOptin = STATIC_SMEM_LIMIT;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    p->maxThreadsPerMultiProcessor = 2048;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_, size_t *total) {
    guard g(g_mu);
    if (g_sticky) return ret(g_sticky);
    *total = mem_total();
    *free_ = g_device_bytes < *total ? *total - g_device_bytes : 0;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
    guard g(g_mu);
    init_env();
    stats_call(false, "cudaMalloc");
    *p = nullptr;
    if (g_sticky) return ret(g_sticky);
    if (!has_device()) return ret(cudaErrorNoDevice);
    if (n > mem_total() - std::min(mem_total(), g_device_bytes)) return ret(cudaErrorMemoryAllocation);
    init_env();
    void *m;
    if (g_protect) {
        if (!(m = arena_alloc(map_bytes(n)))) return ret(cudaErrorMemoryAllocation);
        mprotect(m, map_bytes(n), PROT_READ | PROT_WRITE);
    } else if (!(m = malloc(n + GUARD))) {
        return ret(cudaErrorMemoryAllocation);
    }
    memset(m, 0xff, n);   // poisoned: NaN, -1
    guard_fill(m, n);
    if (g_protect && !g_open_depth) mprotect(m, map_bytes(n), PROT_NONE);
    g_allocs[(uintptr_t)m] = alloc_info{n, false};
    g_device_bytes += n;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    guard g(g_mu);
    if (!p) return cudaSuccess;
    // cudaFree waits for the device (streams not capturing)
    stats_call(false, "cudaFree");
    if (pending_any()) stats_call(true, "cudaFree");
    drain_device();
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || it->second.pinned) return ret(cudaErrorInvalidValue);
    g_device_bytes -= it->second.size;
    if (g_protect) {   // a use after free reads garbage in a kernel, faults on the host
        mprotect(p, map_bytes(it->second.size), PROT_READ | PROT_WRITE);
        memset(p, 0xfe, map_bytes(it->second.size));
        if (!g_open_depth) mprotect(p, map_bytes(it->second.size), PROT_NONE);
        arena_free(p, map_bytes(it->second.size));
    } else {
        memset(p, 0xfe, it->second.size);        // a use after free reads garbage
        free(p);
    }
    g_allocs.erase(it);
    return g_sticky ? ret(g_sticky) : cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
    guard g(g_mu);
    init_env();
    stats_call(false, "cudaHostAlloc");
    (void)flags;
    *p = nullptr;
    void *m = malloc(n + GUARD);
    if (!m) return ret(cudaErrorMemoryAllocation);
    memset(m, 0xff, n);
    guard_fill(m, n);
    g_allocs[(uintptr_t)m] = alloc_info{n, true};
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t n) { return cudaHostAlloc(p, n, 0); }

cudaError_t cudaFreeHost(void *p) {
    guard g(g_mu);
    if (!p) return cudaSuccess;
    drain_device();
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || !it->second.pinned) return ret(cudaErrorInvalidValue);
    free(p);
    g_allocs.erase(it);
    return cudaSuccess;
}

// Checks a copy's ranges at the call: device sides inside an allocation.
static cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind *kind) {
    bool dd = is_device(dst, n), sd = is_device(src, n);
    if (*kind == cudaMemcpyDefault) *kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice) : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    bool ok = true;
    switch (*kind) {
    case cudaMemcpyHostToDevice: ok = dd && !is_device(src, 1); break;
    case cudaMemcpyDeviceToHost: ok = sd && !is_device(dst, 1); break;
    case cudaMemcpyDeviceToDevice: ok = dd && sd; break;
    case cudaMemcpyHostToHost: ok = true; break;
    default: return cudaErrorInvalidMemcpyDirection;
    }
    if (!ok) {
        fprintf(stderr, "cudaemu: cudaMemcpy of %zu bytes (kind %d) from %p to %p: a device range is not inside one allocation\n",
                n, (int)*kind, src, dst);
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

static cudaError_t memcpy_async(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s_) {
    if (g_sticky) return ret(g_sticky);
    stream *s = S(s_);
    if (!n) return cudaSuccess;
    cudaError_t e = check_copy(dst, src, n, &kind);
    if (e) return ret(e);
    op o;
    o.kind = op::COPY;
    o.dst = dst;
    o.src = src;
    o.n = n;
    o.ckind = kind;
    bool host_src = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost;
    bool host_dst = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost;
    if (s->cap && ((host_src && !is_pinned(src, n)) || (host_dst && !is_pinned(dst, n)))) {
        s->cap_invalid = true;   // pageable memory cannot be captured
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    if (host_src && !is_pinned(src, n)) o.staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
    e = enqueue(s, std::move(o));
    return e ? ret(e) : cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    guard g(g_mu);
    return memcpy_async(dst, src, n, kind, s);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    guard g(g_mu);
    init_env();
    stats_call(true, "cudaMemcpy");
    cudaError_t e = memcpy_async(dst, src, n, kind, 0);
    if (e) return e;
    e = sync_stream(&g_legacy);
    return e ? ret(e) : cudaSuccess;
}

static cudaError_t memset_async(void *p, int v, size_t n, cudaStream_t s) {
    if (g_sticky) return ret(g_sticky);
    if (!n) return cudaSuccess;
    if (!is_device(p, n)) {
        fprintf(stderr, "cudaemu: cudaMemset of %zu bytes at %p: not inside one allocation\n", n, p);
        return ret(cudaErrorInvalidValue);
    }
    op o;
    o.kind = op::SET;
    o.dst = p;
    o.n = n;
    o.value = v;
    cudaError_t e = enqueue(S(s), std::move(o));
    return e ? ret(e) : cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    guard g(g_mu);
    return memset_async(p, v, n, s);
}

cudaError_t cudaMemset(void *p, int v, size_t n) {
    guard g(g_mu);
    cudaError_t e = memset_async(p, v, n, 0);
    if (e) return e;
    e = sync_stream(&g_legacy);
    return e ? ret(e) : cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *ps, unsigned int flags) {
    guard g(g_mu);
    stream *s = new stream;
    s->flags = flags;
    s->made = ++g_streams_made;
    g_streams.push_back(s);
    *ps = (cudaStream_t)s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *ps) { return cudaStreamCreateWithFlags(ps, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t ps) {
    guard g(g_mu);
    if (!ps) return ret(cudaErrorInvalidResourceHandle);
    stream *s = S(ps);
    drain_all(s);   // pending work completes (CUDA: destroy returns at once, work finishes)
    for (size_t i = 0; i < g_streams.size(); i++)
        if (g_streams[i] == s) { g_streams.erase(g_streams.begin() + (long)i); break; }
    // waits queued on other streams for s's work: that work has run
    auto unlink = [s](std::deque<op> &q) { for (op &o : q) if (o.kind == op::WAIT && o.wait_s == s) o.wait_s = nullptr; };
    unlink(g_legacy.q);
    for (stream *o : g_streams) unlink(o->q);
    delete s->cap;
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    guard g(g_mu);
    init_env();
    if (pending(S(s))) stats_call(true, "cudaStreamSynchronize");
    cudaError_t e = sync_stream(S(s));
    return e ? ret(e) : cudaSuccess;
}

// Not a synchronisation point: work does not progress.
cudaError_t cudaStreamQuery(cudaStream_t ps) {
    guard g(g_mu);
    stream *s = S(ps);
    if (spoil_if_capturing(s)) return ret(cudaErrorStreamCaptureUnsupported);
    if (g_sticky) return ret(g_sticky);
    return s->q.empty() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize(void) {
    guard g(g_mu);
    init_env();
    if (pending_any()) stats_call(true, "cudaDeviceSynchronize");
    for (stream *s : g_streams)
        if (s->cap) { s->cap_invalid = true; return ret(cudaErrorStreamCaptureUnsupported); }
    drain_device();
    return g_sticky ? ret(g_sticky) : cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *pe, unsigned int flags) {
    event *e = new event;
    e->timing = !(flags & cudaEventDisableTiming);
    *pe = (cudaEvent_t)e;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *pe) { return cudaEventCreateWithFlags(pe, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    guard g(g_mu);
    delete (event *)e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t pe, cudaStream_t ps) {
    guard g(g_mu);
    if (g_sticky) return ret(g_sticky);
    event *e = (event *)pe;
    stream *s = S(ps);
    if (s->cap) return cudaSuccess;   // an event node in a graph orders nothing here: one stream
    op o;
    o.kind = op::EVENT;
    o.ev = e;
    cudaError_t r = enqueue(s, std::move(o));
    e->s = s;
    e->seq = s->enq;
    e->recorded = true;
    return r ? ret(r) : cudaSuccess;
}

// The stream's later work waits for the event's record (as it was at this
// call); the host does not wait. An event never recorded: nothing to wait for.
cudaError_t cudaStreamWaitEvent(cudaStream_t ps, cudaEvent_t pe, unsigned int flags) {
    guard g(g_mu);
    if (g_sticky) return ret(g_sticky);
    event *e = (event *)pe;
    stream *s = S(ps);
    if (!e || flags != 0) return ret(cudaErrorInvalidValue);
    if (!e->recorded || e->s == s) return cudaSuccess;
    if (s->cap) { s->cap_invalid = true; return ret(cudaErrorStreamCaptureUnsupported); }   // a join: not emulated
    if (e->s->done >= e->seq) return cudaSuccess;
    op o;
    o.kind = op::WAIT;
    o.wait_s = e->s;
    o.wait_seq = e->seq;
    cudaError_t r = enqueue(s, std::move(o));
    return r ? ret(r) : cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t pe) {
    guard g(g_mu);
    init_env();
    event *e = (event *)pe;
    if (e->recorded && e->s->done < e->seq) stats_call(true, "cudaEventSynchronize");
    if (e->recorded) {
        if (e->s == &g_legacy) drain_for_legacy();
        drain(e->s, e->seq);
    }
    return g_sticky ? ret(g_sticky) : cudaSuccess;
}

// Milliseconds between two completed events, from the host clock at the
// moment each one's record ran (the layer runs kernels when the stream is
// drained: a kernel's span is the time the host spent running it).
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t pa, cudaEvent_t pb) {
    guard g(g_mu);
    event *a = (event *)pa, *b = (event *)pb;
    if (!a || !b || !ms) return ret(cudaErrorInvalidValue);
    if (!a->timing || !b->timing) return ret(cudaErrorInvalidResourceHandle);
    if (!a->recorded || !b->recorded) return ret(cudaErrorInvalidResourceHandle);
    if (a->s->done < a->seq || b->s->done < b->seq) return cudaErrorNotReady;
    *ms = (float)((double)(b->ns - a->ns) * 1e-6);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t pe) {
    guard g(g_mu);
    event *e = (event *)pe;
    if (g_sticky) return ret(g_sticky);
    return !e->recorded || e->s->done >= e->seq ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t ps, cudaStreamCaptureMode mode) {
    guard g(g_mu);
    (void)mode;
    if (!ps) return ret(cudaErrorStreamCaptureUnsupported);   // the legacy stream cannot capture
    stream *s = S(ps);
    if (s->cap) return ret(cudaErrorIllegalState);
    s->cap = new graph;
    s->cap_invalid = false;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t ps, cudaGraph_t *pg) {
    guard g(g_mu);
    stream *s = S(ps);
    *pg = nullptr;
    if (!s->cap) return ret(cudaErrorIllegalState);
    graph *gr = s->cap;
    bool bad = s->cap_invalid;
    s->cap = nullptr;
    s->cap_invalid = false;
    if (bad) { delete gr; return ret(cudaErrorStreamCaptureInvalidated); }
    *pg = (cudaGraph_t)gr;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t ps, cudaStreamCaptureStatus *st) {
    guard g(g_mu);
    stream *s = S(ps);
    *st = !s->cap ? cudaStreamCaptureStatusNone : s->cap_invalid ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *px, cudaGraph_t pg, unsigned long long flags) {
    guard g(g_mu);
    (void)flags;
    if (!pg) return ret(cudaErrorInvalidValue);
    graph_exec *x = new graph_exec;
    x->ops = ((graph *)pg)->ops;
    *px = (cudaGraphExec_t)x;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *px, cudaGraph_t pg, unsigned long long flags) {
    return cudaGraphInstantiate(px, pg, flags);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t px, cudaStream_t ps) {
    guard g(g_mu);
    if (g_sticky) return ret(g_sticky);
    if (!px) return ret(cudaErrorInvalidValue);
    stream *s = S(ps);
    if (g_stats) {
        std::lock_guard<std::mutex> l(*g_stats_mu);
        g_stats_graphs++;
    }
    for (const op &o : ((graph_exec *)px)->ops) {
        op c = o;
        cudaError_t e = enqueue(s, std::move(c));
        if (e) return ret(e);
    }
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t px) {
    guard g(g_mu);
    delete (graph_exec *)px;   // queued launches hold their own copies of the operations
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t pg) {
    guard g(g_mu);
    delete (graph *)pg;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    guard g(g_mu);
    cudaError_t e = g_last;
    g_last = g_sticky;   // a sticky error is never cleared
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return g_last; }

cudaError_t cudaDeviceReset(void) {
    guard g(g_mu);
    drain_device();
    g_sticky = cudaSuccess;
    g_last = cudaSuccess;
    return cudaSuccess;
}

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define N(x) case x: return #x;
    N(cudaSuccess) N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation) N(cudaErrorInitializationError)
    N(cudaErrorInvalidConfiguration) N(cudaErrorInvalidDevice) N(cudaErrorInvalidMemcpyDirection)
    N(cudaErrorNoDevice) N(cudaErrorInvalidResourceHandle) N(cudaErrorNotReady) N(cudaErrorIllegalState)
    N(cudaErrorStreamCaptureUnsupported) N(cudaErrorStreamCaptureInvalidated) N(cudaErrorLaunchFailure)
    N(cudaErrorIllegalAddress) N(cudaErrorLaunchOutOfResources)
#undef N
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalState: return "the operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorLaunchFailure: return g_fault[0] ? g_fault : "unspecified launch failure";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    default: return "unknown error";
    }
}

}  // extern "C"
