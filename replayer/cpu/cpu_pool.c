/* cpu_pool.c — the cpu backend's thread pool (cpu_pool.h).
 *
 * One job at a time: the submitter publishes it under the mutex and bumps a
 * generation counter; workers that spin (briefly, after their last job) or
 * sleep on a condition variable see the new generation, join, and claim
 * chunks with an atomic counter, as the submitter does. The submitter closes
 * the job when no chunk is left and waits until every worker that joined has
 * left it, so the job's context (on the submitter's stack) outlives its use:
 * it spins for them first (a worker still in its last chunk is a few µs
 * away; a sleep on the condition variable costs a wake-up of tens of µs on a
 * loaded machine) and sleeps only after the spin time.
 * A second submitter finds the job lock taken and runs its job inline. */
#include "cpu_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* OpenBLAS's thread count: the pool splits GEMMs itself (fixed row blocks),
 * so OpenBLAS runs each block on the calling thread. Weak: a BLAS without it
 * links too. */
extern void openblas_set_num_threads(int n) __attribute__((weak));

#define POOL_MAX_THREADS 256
/* How long a worker spins after a job before it sleeps (RGPU_POOL_SPIN_US
 * overrides): longer than the host work between two records of a training
 * step (a few µs), short enough that a pool idle between chunks gives the
 * cores back to the client beside it at once. */
#define POOL_SPIN_NS 30000
static int64_t P_spin_ns = POOL_SPIN_NS;

static inline int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

typedef struct pool {
    pthread_mutex_t job_lock;        /* held by the submitter of the running job */
    pthread_mutex_t m;
    pthread_cond_t wake, left;
    atomic_uint_fast64_t gen;        /* bumped per job */
    bool open;                       /* the current job may still be joined */
    bool quit;
    atomic_int active;               /* workers inside the current job (joined under m) */
    bool sub_waits;                  /* the submitter sleeps on `left` (under m) */
    int sleepers;
    /* the current job */
    rgpu_pool_task task;
    void *ctx;
    int64_t n, grain, nchunks;
    atomic_int_fast64_t next;
    /* threads */
    int nthreads;                    /* including the submitter */
    pthread_t tid[POOL_MAX_THREADS];
    int started;                     /* workers running */
    /* stats */
    atomic_uint_fast64_t st_parallel, st_inline, st_chunks;
} pool;

static pool P = {
    .job_lock = PTHREAD_MUTEX_INITIALIZER,
    .m = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .left = PTHREAD_COND_INITIALIZER,
};
static pthread_once_t P_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t P_config = PTHREAD_MUTEX_INITIALIZER;
static bool P_configured;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void run_chunks(rgpu_pool_task task, void *ctx, int64_t n, int64_t grain, int64_t nchunks)
{
    for (;;) {
        int64_t c = atomic_fetch_add_explicit(&P.next, 1, memory_order_relaxed);
        if (c >= nchunks) break;
        int64_t b = c * grain, e = b + grain < n ? b + grain : n;
        task(ctx, b, e);
    }
}

static void *worker_main(void *arg)
{
    (void)arg;
    uint64_t my_gen = atomic_load_explicit(&P.gen, memory_order_acquire);
    for (;;) {
        int64_t t0 = now_ns();
        for (int i = 1; atomic_load_explicit(&P.gen, memory_order_acquire) == my_gen; i++) {
            cpu_relax();
            if (!(i & 63) && now_ns() - t0 > P_spin_ns) break;
        }
        pthread_mutex_lock(&P.m);
        while (atomic_load_explicit(&P.gen, memory_order_relaxed) == my_gen && !P.quit) {
            P.sleepers++;
            pthread_cond_wait(&P.wake, &P.m);
            P.sleepers--;
        }
        if (P.quit) { pthread_mutex_unlock(&P.m); return NULL; }
        my_gen = atomic_load_explicit(&P.gen, memory_order_relaxed);
        if (!P.open) { pthread_mutex_unlock(&P.m); continue; }
        rgpu_pool_task task = P.task;
        void *ctx = P.ctx;
        int64_t n = P.n, grain = P.grain, nchunks = P.nchunks;
        atomic_fetch_add_explicit(&P.active, 1, memory_order_relaxed);
        pthread_mutex_unlock(&P.m);

        run_chunks(task, ctx, n, grain, nchunks);

        /* the release orders this worker's writes before the submitter's
         * acquire load of 0; after it the worker touches nothing of the job */
        if (atomic_fetch_sub_explicit(&P.active, 1, memory_order_release) == 1) {
            pthread_mutex_lock(&P.m);
            if (P.sub_waits) pthread_cond_signal(&P.left);
            pthread_mutex_unlock(&P.m);
        }
    }
}

static void stop_workers(void)
{
    pthread_mutex_lock(&P.m);
    P.quit = true;
    pthread_cond_broadcast(&P.wake);
    pthread_mutex_unlock(&P.m);
    for (int i = 0; i < P.started; i++) pthread_join(P.tid[i], NULL);
    P.started = 0;
    P.quit = false;
}

static int cgroup_cpus(void)
{
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (!f) return 0;
    char q[32] = "";
    long long period = 0;
    int got = fscanf(f, "%31s %lld", q, &period);
    fclose(f);
    if (got != 2 || !strcmp(q, "max") || period <= 0) return 0;
    long long quota = atoll(q);
    if (quota <= 0) return 0;
    return (int)((quota + period - 1) / period);
}

int rgpu_pool_default_threads(void)
{
    int n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n < 1) n = 1;
    int cg = cgroup_cpus();
    if (cg > 0 && cg < n) n = cg;
    return n > POOL_MAX_THREADS ? POOL_MAX_THREADS : n;
}

static int apply_threads(int n)
{
    if (n <= 0) n = rgpu_pool_default_threads();
    if (n > POOL_MAX_THREADS) n = POOL_MAX_THREADS;
    pthread_mutex_lock(&P.job_lock);          /* no job runs while threads change */
    stop_workers();
    const char *sp = getenv("RGPU_POOL_SPIN_US");
    if (sp && *sp) P_spin_ns = (int64_t)atoll(sp) * 1000;
    P.nthreads = n;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 8u << 20);  /* kernels keep chunk buffers on the stack */
    for (int i = 0; i < n - 1; i++) {
        if (pthread_create(&P.tid[i], &at, worker_main, NULL)) break;
        P.started++;
    }
    pthread_attr_destroy(&at);
    P.nthreads = P.started + 1;
    pthread_mutex_unlock(&P.job_lock);
    if (openblas_set_num_threads) openblas_set_num_threads(1);
    return P.nthreads;
}

static void init_default(void)
{
    pthread_mutex_lock(&P_config);
    if (!P_configured) {
        const char *e = getenv("RGPU_THREADS");
        apply_threads(e && *e ? atoi(e) : 0);
        P_configured = true;
    }
    pthread_mutex_unlock(&P_config);
}

int rgpu_pool_set_threads(int n)
{
    pthread_mutex_lock(&P_config);
    int r = apply_threads(n);
    P_configured = true;
    pthread_mutex_unlock(&P_config);
    return r;
}

int rgpu_pool_threads(void)
{
    pthread_once(&P_once, init_default);
    return P.nthreads;
}

void rgpu_pool_for(int64_t n, int64_t grain, rgpu_pool_task task, void *ctx)
{
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n <= grain) { task(ctx, 0, n); return; }
    int64_t nchunks = rgpu_pool_chunks(n, grain);
    if (rgpu_pool_threads() <= 1 || pthread_mutex_trylock(&P.job_lock) != 0) {
        if (P.nthreads > 1) atomic_fetch_add_explicit(&P.st_inline, 1, memory_order_relaxed);
        for (int64_t c = 0; c < nchunks; c++) {
            int64_t b = c * grain, e = b + grain < n ? b + grain : n;
            task(ctx, b, e);
        }
        return;
    }
    atomic_fetch_add_explicit(&P.st_parallel, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&P.st_chunks, (uint64_t)nchunks, memory_order_relaxed);
    pthread_mutex_lock(&P.m);
    P.task = task;
    P.ctx = ctx;
    P.n = n;
    P.grain = grain;
    P.nchunks = nchunks;
    atomic_store_explicit(&P.next, 0, memory_order_relaxed);
    P.open = true;
    atomic_fetch_add_explicit(&P.gen, 1, memory_order_release);
    if (P.sleepers) pthread_cond_broadcast(&P.wake);
    pthread_mutex_unlock(&P.m);

    run_chunks(task, ctx, n, grain, nchunks);

    pthread_mutex_lock(&P.m);
    P.open = false;                  /* no worker joins after this */
    pthread_mutex_unlock(&P.m);
    int64_t t0 = now_ns();
    for (int i = 1; atomic_load_explicit(&P.active, memory_order_acquire) > 0; i++) {
        cpu_relax();
        if (!(i & 63) && now_ns() - t0 > P_spin_ns) {
            pthread_mutex_lock(&P.m);
            P.sub_waits = true;
            while (atomic_load_explicit(&P.active, memory_order_acquire) > 0) pthread_cond_wait(&P.left, &P.m);
            P.sub_waits = false;
            pthread_mutex_unlock(&P.m);
            break;
        }
    }
    pthread_mutex_unlock(&P.job_lock);
}

void rgpu_pool_prepare_process(char **argv)
{
    if (getenv("OPENBLAS_NUM_THREADS") || !openblas_set_num_threads) return;
    if (setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0) return;
    execv("/proc/self/exe", argv);
}

void rgpu_pool_get_stats(rgpu_pool_stats *s)
{
    s->parallel_jobs = atomic_load(&P.st_parallel);
    s->inline_busy = atomic_load(&P.st_inline);
    s->chunks = atomic_load(&P.st_chunks);
}
