/* cpu_alloc.c — the cpu backend's storage memory: a caching allocator for
 * large blocks, shared by every session of the process.
 *
 * Why: a training step frees and re-allocates the same activation sizes
 * every step. Through malloc, blocks of that size are mmap'd (or the heap top
 * is trimmed with brk) and every page is faulted in and zeroed by the kernel
 * again on first touch: for a 16 MiB output that is 4,096 page faults, more
 * time than the add that writes it (perf: 60% of a replay of x + y at 4M
 * elements was in the kernel). Here a freed block of >= CACHE_MIN bytes is
 * kept, keyed by its size class, and handed to the next allocation of that
 * class with its pages already mapped, as PyTorch's CUDA caching allocator
 * does for device memory.
 *
 * Classes: 8 per power of two (a block is at most 12.5% larger than asked;
 * pages past the asked size are never touched, so they cost no memory).
 * The cache holds at most RGPU_CPU_CACHE_BYTES (default 1 GiB); a free past
 * that unmaps the block. A failed mmap empties the cache and retries once.
 * When the last cpu backend of the process is destroyed the cache is emptied.
 * Contents of a reused block are stale, as malloc's are: every op writes its
 * outputs before reading them. Every block, cached or not, carries a 64-byte
 * tag before its data (the backend's free gets no size). */
#include "cpu_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CACHE_MIN   ((size_t)256 << 10)     /* smaller blocks: malloc */
#define CLASS_STEPS 8
#define MAX_CLASSES (64 * CLASS_STEPS)

/* Every block carries a 64-byte tag just before the pointer handed out, so
 * free (which gets no size) tells a malloc'd block from a mapped one. A mapped
 * block's tag sits at the end of a header page, keeping the data page-aligned. */
#define TAG ((size_t)64)
#define HDR ((size_t)4096)

typedef struct blk {
    uint32_t magic;
    uint32_t mapped;
    size_t map_bytes;     /* mapped: the whole mapping, header page included */
    int cls;
    struct blk *next;     /* in a class's free list */
} blk;
_Static_assert(sizeof(blk) <= TAG, "the tag fits its 64 bytes");
#define BLK_MAGIC 0x52475055u  /* "RGPU" */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static blk *g_free[MAX_CLASSES];
static size_t g_cached, g_cap = (size_t)-1;
static int g_backends;
static rgpu_cpu_alloc_stats g_stats;

static size_t cache_cap(void)
{
    if (g_cap == (size_t)-1) {
        const char *s = getenv("RGPU_CPU_CACHE_BYTES");
        g_cap = (size_t)1 << 30;
        if (s && *s) {
            char *end;
            unsigned long long v = strtoull(s, &end, 10);
            if (*end == '\0') g_cap = (size_t)v;
        }
    }
    return g_cap;
}

/* The class of n bytes (n >= CACHE_MIN) and the class's block size. */
static int size_class(size_t n, size_t *cls_bytes)
{
    int e = 63 - __builtin_clzll((unsigned long long)n);   /* 2^e <= n < 2^(e+1) */
    size_t step = ((size_t)1 << e) / CLASS_STEPS;
    size_t k = (n - ((size_t)1 << e) + step - 1) / step;    /* 0..CLASS_STEPS */
    *cls_bytes = ((size_t)1 << e) + k * step;
    return e * CLASS_STEPS + (int)k;   /* k == CLASS_STEPS: the size of the next power's 0 */
}

static blk *tag_of(void *p) { return (blk *)((char *)p - TAG); }
static void unmap_blk(blk *t) { munmap((char *)t + TAG - HDR, t->map_bytes); }

/* Empties the cache (caller holds g_mu). */
static void drain_locked(void)
{
    for (int c = 0; c < MAX_CLASSES; c++) {
        while (g_free[c]) {
            blk *t = g_free[c];
            g_free[c] = t->next;
            unmap_blk(t);
        }
    }
    g_cached = 0;
}

void *rgpu_cpu_alloc(size_t nbytes)
{
    if (nbytes > ((size_t)1 << 62)) return NULL;
    if (nbytes < CACHE_MIN) {
        size_t n = TAG + ((nbytes + 63) & ~(size_t)63);
        char *base = aligned_alloc(64, n);
        if (!base) return NULL;
        blk *t = (blk *)base;
        *t = (blk){ .magic = BLK_MAGIC, .mapped = 0 };
        return base + TAG;
    }
    size_t cb;
    int cls = size_class(nbytes, &cb);
    pthread_mutex_lock(&g_mu);
    blk *t = g_free[cls];
    if (t) {
        g_free[cls] = t->next;
        g_cached -= t->map_bytes;
        g_stats.hits++;
        pthread_mutex_unlock(&g_mu);
        t->next = NULL;
        return (char *)t + TAG;
    }
    g_stats.misses++;
    pthread_mutex_unlock(&g_mu);
    size_t map = cb + HDR;
    void *p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {            /* give the cache back and try once more */
        pthread_mutex_lock(&g_mu);
        drain_locked();
        pthread_mutex_unlock(&g_mu);
        p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
    }
#ifdef MADV_HUGEPAGE
    if (map >= ((size_t)4 << 20)) madvise(p, map, MADV_HUGEPAGE);   /* fewer faults on first touch */
#endif
    t = (blk *)((char *)p + HDR - TAG);
    *t = (blk){ .magic = BLK_MAGIC, .mapped = 1, .map_bytes = map, .cls = cls };
    return (char *)p + HDR;
}

void rgpu_cpu_free(void *p)
{
    if (!p) return;
    blk *t = tag_of(p);
    if (t->magic != BLK_MAGIC) abort();   /* not ours: a caller bug, never data-dependent */
    if (!t->mapped) { t->magic = 0; free(t); return; }
    pthread_mutex_lock(&g_mu);
    if (g_cached + t->map_bytes <= cache_cap()) {
        t->next = g_free[t->cls];
        g_free[t->cls] = t;
        g_cached += t->map_bytes;
        pthread_mutex_unlock(&g_mu);
        return;
    }
    g_stats.unmapped++;
    pthread_mutex_unlock(&g_mu);
    unmap_blk(t);
}

void rgpu_cpu_alloc_backend_ref(int delta)
{
    pthread_mutex_lock(&g_mu);
    g_backends += delta;
    if (g_backends <= 0) { g_backends = 0; drain_locked(); }
    pthread_mutex_unlock(&g_mu);
}

rgpu_cpu_alloc_stats rgpu_cpu_alloc_get_stats(void)
{
    pthread_mutex_lock(&g_mu);
    rgpu_cpu_alloc_stats s = g_stats;
    s.cached_bytes = g_cached;
    pthread_mutex_unlock(&g_mu);
    return s;
}
