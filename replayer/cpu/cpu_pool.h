/* cpu_pool.h — the cpu backend's thread pool: one per process, shared by
 * every session of a server (so two clients never oversubscribe the cores),
 * used by the kernel families through rgpu_pool_for.
 *
 * Results never depend on the number of threads: a job is split into chunks
 * whose bounds depend only on the problem size and the grain the kernel asks
 * for, each chunk is computed by the same code whichever thread runs it, and a
 * kernel that combines partial results (a reduction) combines them in chunk
 * order on the calling thread. A trace replays bitwise at --threads 1 and 64.
 *
 * The caller takes part in its own job. A job submitted while the pool is
 * busy (another session's job, or a chunk that itself calls rgpu_pool_for)
 * runs inline on the submitting thread: same chunks, same results. */
#ifndef RGPU_CPU_POOL_H
#define RGPU_CPU_POOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Call first thing in main(): OpenBLAS starts its own threads when the
 * library loads (they spin a while, then sleep) unless OPENBLAS_NUM_THREADS
 * says otherwise; the pool runs GEMMs in blocks itself, so those threads only
 * burn the cores the client and the pool need. When the variable is unset
 * this sets it to 1 and re-executes the program (same pid, argv, fds); on any
 * failure it returns and the run goes on as before. */
void rgpu_pool_prepare_process(char **argv);

/* Chunk [begin, end) of a job of n items. */
typedef void (*rgpu_pool_task)(void *ctx, int64_t begin, int64_t end);

/* The threads the process may run on: sched_getaffinity, capped by a cgroup
 * v2 cpu.max quota (rounded up); at least 1. */
int rgpu_pool_default_threads(void);

/* Sets the number of threads (the caller included) that jobs run on; n <= 0
 * means rgpu_pool_default_threads(). OpenBLAS runs on one thread: the pool
 * is BLAS's parallelism too (rgpu_dense_gemm splits C in row blocks), so the
 * process never runs two sets of spinning threads. Safe to call while no job runs (at startup). Returns the
 * number in use. The RGPU_THREADS environment variable, when set, is the
 * default for a process that never calls this. */
int rgpu_pool_set_threads(int n);
int rgpu_pool_threads(void);

/* Runs task over [0, n) in chunks of grain items (the last one shorter):
 * task(ctx, c*grain, min(n, (c+1)*grain)) for every chunk c, spread over the
 * pool's threads and the caller; returns when every chunk is done. n <= grain
 * runs inline with no synchronisation. */
void rgpu_pool_for(int64_t n, int64_t grain, rgpu_pool_task task, void *ctx);

/* The number of chunks rgpu_pool_for(n, grain, ...) makes. */
static inline int64_t rgpu_pool_chunks(int64_t n, int64_t grain)
{
    if (grain < 1) grain = 1;
    return n <= 0 ? 0 : (n + grain - 1) / grain;
}

/* Grains by work: a chunk of about RGPU_POOL_WORK element-operations keeps
 * the per-chunk overhead (~1 µs) under a few percent. A kernel whose item
 * costs `per_item` elementary operations asks for rgpu_pool_grain(per_item). */
#define RGPU_POOL_WORK 32768
static inline int64_t rgpu_pool_grain(int64_t per_item)
{
    if (per_item < 1) per_item = 1;
    int64_t g = RGPU_POOL_WORK / per_item;
    return g < 1 ? 1 : g;
}

/* Counters for tests and benchmarks: jobs that ran on more than one thread,
 * and jobs that ran inline because the pool was busy. */
typedef struct rgpu_pool_stats { uint64_t parallel_jobs, inline_busy, chunks; } rgpu_pool_stats;
void rgpu_pool_get_stats(rgpu_pool_stats *s);

#ifdef __cplusplus
}
#endif

#endif
