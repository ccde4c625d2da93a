/* test_pool.c — the cpu backend's thread pool (replayer/cpu/cpu_pool.h):
 * every index of a job is covered exactly once, chunk bounds depend only on
 * (n, grain) and never on the number of threads, nested and concurrent jobs
 * run (inline) to completion, a job returns only after its last chunk
 * (spinning or sleeping for it), a reduction that combines per-chunk partials in
 * chunk order is bitwise the same at 1, 2 and 7 threads, and the default
 * thread count is the cores the process may run on.
 *
 * The pool is process-wide; Check forks each test (CK_FORK=no runs them in one
 * process, which works too: every test sets the thread count it wants). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#endif
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/cpu_pool.h"
#include "check_util.h"

static const int THREADS[] = { 1, 2, 7 };
#define NTHREADS (int)(sizeof THREADS / sizeof THREADS[0])

/* ---------------------------------------------------------------------------
 * Coverage and chunk bounds */

/* What a job saw: a hit count per index and the bounds of each chunk, filled
 * at the chunk's own slot (begin / grain), so the record does not depend on
 * which thread ran which chunk or in which order. */
typedef struct cover {
    int64_t n, grain;
    atomic_int *hits;
    int64_t *chunk_begin, *chunk_end;
    atomic_int bad;               /* a chunk with bounds out of range */
    atomic_int calls;
} cover;

static void cover_task(void *ctx, int64_t b, int64_t e)
{
    cover *c = ctx;
    atomic_fetch_add(&c->calls, 1);
    if (b < 0 || e > c->n || b >= e || b % c->grain) { atomic_store(&c->bad, 1); return; }
    int64_t k = b / c->grain;
    c->chunk_begin[k] = b;
    c->chunk_end[k] = e;
    for (int64_t i = b; i < e; i++) atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
}

/* Runs a coverage job of (n, grain); asserts every index hit once and the
 * chunk count; returns the chunk bounds (2 per chunk, caller frees). */
static int64_t *run_cover(int64_t n, int64_t grain)
{
    int64_t g = grain < 1 ? 1 : grain;
    int64_t nch = rgpu_pool_chunks(n, grain);
    cover c = { .n = n, .grain = g };
    c.hits = calloc((size_t)(n > 0 ? n : 1), sizeof *c.hits);
    c.chunk_begin = calloc((size_t)(nch > 0 ? nch : 1), sizeof(int64_t));
    c.chunk_end = calloc((size_t)(nch > 0 ? nch : 1), sizeof(int64_t));
    ck_assert(c.hits && c.chunk_begin && c.chunk_end);
    for (int64_t i = 0; i < nch; i++) c.chunk_begin[i] = c.chunk_end[i] = -1;
    rgpu_pool_for(n, grain, cover_task, &c);
    ck_assert_msg(!atomic_load(&c.bad), "n=%lld grain=%lld: a chunk out of range", (long long)n, (long long)grain);
    ck_assert_msg(atomic_load(&c.calls) == nch, "n=%lld grain=%lld: %d chunks, want %lld",
                  (long long)n, (long long)grain, atomic_load(&c.calls), (long long)nch);
    /* a plain loop first: each ck_assert is a message to Check's parent */
    int64_t i = 0;
    while (i < n && atomic_load(&c.hits[i]) == 1) i++;
    if (i < n)
        ck_abort_msg("n=%lld grain=%lld: index %lld hit %d times",
                     (long long)n, (long long)grain, (long long)i, atomic_load(&c.hits[i]));
    int64_t *bounds = malloc(2 * (size_t)(nch > 0 ? nch : 1) * sizeof *bounds);
    ck_assert(bounds);
    for (int64_t k = 0; k < nch; k++) {
        /* the documented bounds: [k*grain, min(n, (k+1)*grain)) */
        int64_t want_e = (k + 1) * g < n ? (k + 1) * g : n;
        if (c.chunk_begin[k] != k * g || c.chunk_end[k] != want_e)
            ck_abort_msg("n=%lld grain=%lld: chunk %lld is [%lld, %lld), want [%lld, %lld)",
                         (long long)n, (long long)grain, (long long)k, (long long)c.chunk_begin[k],
                         (long long)c.chunk_end[k], (long long)(k * g), (long long)want_e);
        bounds[2 * k] = c.chunk_begin[k];
        bounds[2 * k + 1] = c.chunk_end[k];
    }
    free(c.hits);
    free(c.chunk_begin);
    free(c.chunk_end);
    return bounds;
}

static const int64_t SIZES[][2] = {
    { 0, 1 }, { 0, 64 }, { -5, 4 }, { 1, 1 }, { 1, 1000 }, { 5, 0 }, { 5, -3 }, { 7, 1 },
    { 7, 7 }, { 8, 7 }, { 64, 64 }, { 65, 64 }, { 100, 3 }, { 1000, 1 }, { 1023, 32 },
    { 4096, 4096 }, { 4097, 4096 }, { 10007, 97 }, { 65536, 4096 }, { 100000, 32768 },
    { 262144, 1 << 15 }, { 1 << 20, 1 << 12 },
};
#define NSIZES (int)(sizeof SIZES / sizeof SIZES[0])

START_TEST(test_covers_each_index_once)
{
    for (int t = 0; t < NTHREADS; t++) {
        ck_assert_int_eq(rgpu_pool_set_threads(THREADS[t]), THREADS[t]);
        ck_assert_int_eq(rgpu_pool_threads(), THREADS[t]);
        for (int s = 0; s < NSIZES; s++) free(run_cover(SIZES[s][0], SIZES[s][1]));
    }
}
END_TEST

START_TEST(test_chunks_independent_of_threads)
{
    for (int s = 0; s < NSIZES; s++) {
        int64_t n = SIZES[s][0], grain = SIZES[s][1];
        int64_t nch = rgpu_pool_chunks(n, grain);
        int64_t *ref = NULL;
        for (int t = 0; t < NTHREADS; t++) {
            rgpu_pool_set_threads(THREADS[t]);
            int64_t *b = run_cover(n, grain);
            if (!ref) ref = b;
            else {
                ck_assert_msg(!memcmp(ref, b, 2 * (size_t)nch * sizeof *b),
                              "n=%lld grain=%lld: chunks differ at %d threads",
                              (long long)n, (long long)grain, THREADS[t]);
                free(b);
            }
        }
        free(ref);
    }
}
END_TEST

/* With several threads a large job really runs in parallel (otherwise the
 * tests above would prove nothing about thread counts). */
START_TEST(test_parallel_jobs_counted)
{
    rgpu_pool_set_threads(7);
    rgpu_pool_stats s0, s1;
    rgpu_pool_get_stats(&s0);
    for (int i = 0; i < 20; i++) free(run_cover(1 << 16, 256));
    rgpu_pool_get_stats(&s1);
    ck_assert_uint_gt(s1.parallel_jobs + s1.inline_busy, s0.parallel_jobs + s0.inline_busy);
    ck_assert_uint_ge(s1.parallel_jobs - s0.parallel_jobs, 1);
    ck_assert_uint_ge(s1.chunks - s0.chunks, 256);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Nested and concurrent jobs */

typedef struct nested {
    int64_t inner_n, inner_grain;
    atomic_llong *hits;           /* outer_n * inner_n counters */
} nested;

typedef struct inner_ctx { nested *nd; int64_t row; } inner_ctx;

static void inner_task(void *ctx, int64_t b, int64_t e)
{
    inner_ctx *ic = ctx;
    for (int64_t j = b; j < e; j++)
        atomic_fetch_add_explicit(&ic->nd->hits[ic->row * ic->nd->inner_n + j], 1, memory_order_relaxed);
}

static void outer_task(void *ctx, int64_t b, int64_t e)
{
    nested *nd = ctx;
    for (int64_t i = b; i < e; i++) {
        inner_ctx ic = { nd, i };
        rgpu_pool_for(nd->inner_n, nd->inner_grain, inner_task, &ic);
    }
}

START_TEST(test_nested_runs_inline)
{
    for (int t = 0; t < NTHREADS; t++) {
        rgpu_pool_set_threads(THREADS[t]);
        nested nd = { .inner_n = 1000, .inner_grain = 7 };
        int64_t outer_n = 64;
        nd.hits = calloc((size_t)(outer_n * nd.inner_n), sizeof *nd.hits);
        ck_assert(nd.hits);
        rgpu_pool_stats s0, s1;
        rgpu_pool_get_stats(&s0);
        rgpu_pool_for(outer_n, 3, outer_task, &nd);
        rgpu_pool_get_stats(&s1);
        int64_t i = 0;
        while (i < outer_n * nd.inner_n && atomic_load(&nd.hits[i]) == 1) i++;
        if (i < outer_n * nd.inner_n)
            ck_abort_msg("%d threads: item %lld hit %lld times",
                         THREADS[t], (long long)i, (long long)atomic_load(&nd.hits[i]));
        if (THREADS[t] > 1) {
            /* the outer job is the parallel one; every inner job ran inline */
            ck_assert_uint_eq(s1.parallel_jobs - s0.parallel_jobs, 1);
            ck_assert_uint_eq(s1.inline_busy - s0.inline_busy, (uint64_t)outer_n);
        }
        free(nd.hits);
    }
}
END_TEST

typedef struct submitter {
    int id, jobs;
    int failures;
} submitter;

typedef struct sum_ctx { const int64_t *v; atomic_llong total; } sum_ctx;

static void sum_task(void *ctx, int64_t b, int64_t e)
{
    sum_ctx *c = ctx;
    long long s = 0;
    for (int64_t i = b; i < e; i++) s += c->v[i];
    atomic_fetch_add(&c->total, s);
}

static void *submit_main(void *arg)
{
    submitter *sb = arg;
    int64_t n = 50000 + 1000 * sb->id;
    int64_t *v = malloc((size_t)n * sizeof *v);
    if (!v) { sb->failures = -1; return NULL; }
    long long want = 0;
    for (int64_t i = 0; i < n; i++) { v[i] = (i * 2654435761u + (uint64_t)sb->id) % 1000; want += v[i]; }
    for (int j = 0; j < sb->jobs; j++) {
        sum_ctx c = { .v = v };
        atomic_init(&c.total, 0);
        rgpu_pool_for(n, 512 + 64 * sb->id, sum_task, &c);
        if (atomic_load(&c.total) != want) sb->failures++;
        /* coverage too, with this thread's own (n, grain) */
        free(run_cover(n / 10 + j, 37 + sb->id));
    }
    free(v);
    return NULL;
}

START_TEST(test_concurrent_submitters)
{
    for (int t = 0; t < NTHREADS; t++) {
        rgpu_pool_set_threads(THREADS[t]);
        enum { NSUB = 3 };
        submitter sb[NSUB];
        pthread_t th[NSUB];
        for (int i = 0; i < NSUB; i++) {
            sb[i] = (submitter){ .id = i, .jobs = 200 };
            ck_assert_int_eq(pthread_create(&th[i], NULL, submit_main, &sb[i]), 0);
        }
        for (int i = 0; i < NSUB; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < NSUB; i++)
            ck_assert_msg(sb[i].failures == 0, "%d threads: submitter %d: %d wrong sums",
                          THREADS[t], i, sb[i].failures);
    }
}
END_TEST

/* ---------------------------------------------------------------------------
 * A fixed-order reduction */

/* Float partials per chunk, combined in chunk order on the caller: the sum
 * depends on (n, grain) only. A reduction that added partials as threads
 * finish (or an atomic float add) would differ between runs and thread counts
 * for these values, whose sums round differently in different orders. */
typedef struct red_ctx { const float *x; int64_t grain; float *partial; } red_ctx;

static void red_task(void *ctx, int64_t b, int64_t e)
{
    red_ctx *c = ctx;
    float s = 0.0f;
    for (int64_t i = b; i < e; i++) s += c->x[i];
    c->partial[b / c->grain] = s;
}

static float reduce(const float *x, int64_t n, int64_t grain)
{
    int64_t nch = rgpu_pool_chunks(n, grain);
    red_ctx c = { x, grain, calloc((size_t)nch, sizeof(float)) };
    ck_assert(c.partial);
    rgpu_pool_for(n, grain, red_task, &c);
    float s = 0.0f;
    for (int64_t k = 0; k < nch; k++) s += c.partial[k];
    free(c.partial);
    return s;
}

START_TEST(test_reduction_bitwise)
{
    const int64_t n = 1 << 20;
    float *x = malloc((size_t)n * sizeof *x);
    ck_assert(x);
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        /* wide dynamic range, so summation order changes the rounding */
        x[i] = ldexpf((float)((int64_t)(st >> 40) - (1 << 23)), (int)(st >> 59) - 16);
    }
    static const int64_t grains[] = { 1000, 4096, 10007, 32768 };
    for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
        /* the serial sum in the same chunk order, on this thread */
        float want = 0.0f;
        for (int64_t b = 0; b < n; b += grains[g]) {
            float s = 0.0f;
            for (int64_t i = b; i < n && i < b + grains[g]; i++) s += x[i];
            want += s;
        }
        /* the values are order-sensitive: the partials added in another
         * chunk order (reversed, or odd chunks first) round differently, so
         * a reduction combining them in the order threads finish, or with
         * a float atomic, would fail this test */
        int64_t nch = rgpu_pool_chunks(n, grains[g]);
        float *part = malloc((size_t)nch * sizeof *part);
        ck_assert(part);
        for (int64_t k = 0; k < nch; k++) {
            float s = 0.0f;
            for (int64_t i = k * grains[g]; i < n && i < (k + 1) * grains[g]; i++) s += x[i];
            part[k] = s;
        }
        float rev = 0.0f, odd_first = 0.0f;
        for (int64_t k = nch - 1; k >= 0; k--) rev += part[k];
        for (int64_t k = 1; k < nch; k += 2) odd_first += part[k];
        for (int64_t k = 0; k < nch; k += 2) odd_first += part[k];
        free(part);
        ck_assert_msg(rev != want || odd_first != want,
                      "grain %lld: the partials' sum does not depend on their order", (long long)grains[g]);
        for (int rep = 0; rep < 3; rep++)
            for (int t = 0; t < NTHREADS; t++) {
                rgpu_pool_set_threads(THREADS[t]);
                float got = reduce(x, n, grains[g]);
                uint32_t gb, wb;
                memcpy(&gb, &got, 4);
                memcpy(&wb, &want, 4);
                ck_assert_msg(gb == wb, "grain %lld, %d threads: sum 0x%08x, want 0x%08x",
                              (long long)grains[g], THREADS[t], gb, wb);
            }
    }
    free(x);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Thread counts */

/* cgroup v2 cpu.max quota in CPUs (rounded up), 0 when unlimited or absent. */
static int cgroup_limit(void)
{
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    if (!f) return 0;
    char q[32] = "";
    long long period = 0;
    int got = fscanf(f, "%31s %lld", q, &period);
    fclose(f);
    if (got != 2 || !strcmp(q, "max") || period <= 0 || atoll(q) <= 0) return 0;
    return (int)((atoll(q) + period - 1) / period);
}

START_TEST(test_default_threads)
{
    cpu_set_t set;
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int want = CPU_COUNT(&set);
    int cg = cgroup_limit();
    if (cg > 0 && cg < want) want = cg;      /* a quota caps it */
    if (want > 256) want = 256;
    int got = rgpu_pool_default_threads();
    ck_assert_int_ge(got, 1);
    ck_assert_int_eq(got, want);
    /* n <= 0 means the default */
    ck_assert_int_eq(rgpu_pool_set_threads(0), got);
    ck_assert_int_eq(rgpu_pool_set_threads(-4), got);
    ck_assert_int_eq(rgpu_pool_threads(), got);
}
END_TEST

/* Affinity narrowed to one CPU (when the process has more): the default
 * follows it. */
START_TEST(test_default_follows_affinity)
{
    cpu_set_t set, one;
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int first = -1;
    for (int i = 0; i < CPU_SETSIZE && first < 0; i++)
        if (CPU_ISSET(i, &set)) first = i;
    ck_assert_int_ge(first, 0);
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0);
    ck_assert_int_eq(rgpu_pool_default_threads(), 1);
    ck_assert_int_eq(sched_setaffinity(0, sizeof set, &set), 0);
}
END_TEST

/* RGPU_THREADS is the default of a process that never sets a count (only
 * testable where the test has a fresh process: Check's fork mode). */
START_TEST(test_env_threads)
{
    const char *fork_mode = getenv("CK_FORK");
    if (fork_mode && !strcmp(fork_mode, "no")) return;
    setenv("RGPU_THREADS", "3", 1);
    ck_assert_int_eq(rgpu_pool_threads(), 3);
    free(run_cover(100000, 1000));
}
END_TEST

/* ---------------------------------------------------------------------------
 * main */

/* ---------------------------------------------------------------------------
 * A job returns only after every chunk has ended, whether the submitter's
 * wait for the last workers ends in its spin (short chunks) or on the
 * condition variable (chunks longer than the spin time): a chunk still
 * running after rgpu_pool_for returned would use a context that is gone. */

typedef struct late_ctx {
    int64_t us;                   /* each odd chunk's duration */
    atomic_int done;
    atomic_int returned;          /* set by the submitter once the job returned */
    atomic_int late;              /* a chunk ended after that */
} late_ctx;

static void late_task(void *ctx, int64_t b, int64_t e)
{
    late_ctx *c = ctx;
    (void)e;
    if ((b & 1) && c->us > 0) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do clock_gettime(CLOCK_MONOTONIC, &t);
        while ((t.tv_sec - t0.tv_sec) * 1000000 + (t.tv_nsec - t0.tv_nsec) / 1000 < c->us);
    }
    if (atomic_load(&c->returned)) atomic_store(&c->late, 1);
    atomic_fetch_add(&c->done, 1);
}

START_TEST(test_return_waits_for_every_chunk)
{
    static late_ctx c;            /* outlives each job, so a late chunk is seen, not a crash */
    const int64_t durations[] = { 0, 3, 200 };   /* µs: the spin ends the wait; 200: the sleep does */
    for (int t = 1; t < NTHREADS; t++) {
        rgpu_pool_set_threads(THREADS[t]);
        for (int d = 0; d < 3; d++)
            for (int rep = 0; rep < (durations[d] > 100 ? 20 : 300); rep++) {
                c.us = durations[d];
                atomic_store(&c.done, 0);
                atomic_store(&c.returned, 0);
                atomic_store(&c.late, 0);
                rgpu_pool_for(16, 1, late_task, &c);
                int done = atomic_load(&c.done);
                atomic_store(&c.returned, 1);
                ck_assert_msg(done == 16, "%d threads, %lld us chunks: returned with %d of 16 chunks done",
                              THREADS[t], (long long)durations[d], done);
                ck_assert_int_eq(atomic_load(&c.late), 0);
            }
    }
}
END_TEST

int main(void)
{
    /* one case per property, so CK_RUN_CASE=NAME runs one of them */
    Suite *s = suite_create("pool");
    ADD_TESTS(add_tcase(s, "cover", 60, NULL, NULL), test_covers_each_index_once,
              test_chunks_independent_of_threads, test_parallel_jobs_counted);
    ADD_TESTS(add_tcase(s, "nested", 60, NULL, NULL), test_nested_runs_inline);
    ADD_TESTS(add_tcase(s, "concurrent", 60, NULL, NULL), test_concurrent_submitters);
    ADD_TESTS(add_tcase(s, "wait", 60, NULL, NULL), test_return_waits_for_every_chunk);
    ADD_TESTS(add_tcase(s, "reduction", 60, NULL, NULL), test_reduction_bitwise);
    ADD_TESTS(add_tcase(s, "threads", 60, NULL, NULL), test_default_threads, test_default_follows_affinity,
              test_env_threads);
    return run_suite(s);
}
