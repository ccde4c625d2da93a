/* backend.c — pick a backend by name (shared by rgpu-server and the tools). */
#include "backend.h"
#include "backend_selfcheck.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

rgpu_backend *rgpu_backend_create(const char *name, char *why, size_t whylen) {
    char cwhy[256] = "";
    if (!strcmp(name, "cpu")) return rgpu_backend_cpu_create();
    if (!strcmp(name, "null")) return rgpu_backend_null_create();
    if (!strcmp(name, "cuda")) {
        rgpu_backend *b = rgpu_backend_cuda_create(cwhy, sizeof cwhy);
        if (!b) snprintf(why, whylen, "cuda backend unavailable: %s", cwhy);
        return b;
    }
    if (!strcmp(name, "auto")) {
        rgpu_backend *b = rgpu_backend_cuda_create(cwhy, sizeof cwhy);
        int have = 0;
        for (int op = 0; b && op < RGPU_OP_COUNT; op++) have += b->supports(b, op);
        if (b && have < RGPU_OP_COUNT) {   /* RGPU_CUDA_PARTIAL is for --backend cuda only */
            snprintf(cwhy, sizeof cwhy, "cuda backend runs %d of %d ops", have, RGPU_OP_COUNT);
            b->destroy(b);
            b = NULL;
        }
        /* the kernels must agree with the reference before cuda is the default */
        char sc[200] = "";
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (b && !rgpu_backend_selfcheck(b, sc, sizeof sc)) {
            snprintf(cwhy, sizeof cwhy, "cuda self-check failed: %s", sc);
            b->destroy(b);
            b = NULL;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        if (b) { snprintf(why, whylen, "backend auto: using cuda (self-check in %.0f ms: %s)", ms, sc); return b; }
        snprintf(why, whylen, "backend auto: cuda not used (%s); using cpu", cwhy);
        return rgpu_backend_cpu_create();
    }
    snprintf(why, whylen, "unknown backend '%s' (cpu, cuda, null, auto)", name);
    return NULL;
}
