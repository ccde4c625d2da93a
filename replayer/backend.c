/* backend.c — pick a backend by name (shared by rgpu-server and the tools). */
#include "backend.h"

#include <stdio.h>
#include <string.h>

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
        if (b) { snprintf(why, whylen, "backend auto: using cuda"); return b; }
        snprintf(why, whylen, "backend auto: cuda not used (%s); using cpu", cwhy);
        return rgpu_backend_cpu_create();
    }
    snprintf(why, whylen, "unknown backend '%s' (cpu, cuda, null, auto)", name);
    return NULL;
}
