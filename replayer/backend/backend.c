/* backend.c — pick a backend by name (shared by rgpu-server and the tools). */
#include "backend.h"
#include "backend_selfcheck.h"
#include "op/dtype.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* the description of the last backend created here (one per process in practice) */
static char g_desc[192];   /* room for the format and its 128-byte argument */
static const rgpu_backend *g_desc_for;

static rgpu_backend *described(rgpu_backend *b, const char *fmt, const char *arg) {
    if (!b) return b;
    snprintf(g_desc, sizeof g_desc, fmt, arg);
    g_desc_for = b;
    return b;
}

const char *rgpu_backend_describe(const rgpu_backend *b) {
    if (!b) return "?";
    return b == g_desc_for ? g_desc : b->name;
}

static rgpu_backend *cuda_described(rgpu_backend *b) {
    char dev[48] = "";
    rgpu_cuda_device_name(dev, sizeof dev);
    return dev[0] ? described(b, "cuda (%s)", dev) : b;
}

rgpu_backend *rgpu_backend_create(const char *name, char *why, size_t whylen) {
    char cwhy[256] = "";
    if (!strcmp(name, "cpu")) return rgpu_backend_cpu_create();
    if (!strcmp(name, "null")) return rgpu_backend_null_create();
    if (!strcmp(name, "cuda")) {
        rgpu_backend *b = rgpu_backend_cuda_create(cwhy, sizeof cwhy);
        if (!b) snprintf(why, whylen, "cuda backend unavailable: %s", cwhy);
        return cuda_described(b);
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
        char failed_op[64] = "";
        if (b && !rgpu_backend_selfcheck(b, sc, sizeof sc)) {
            snprintf(cwhy, sizeof cwhy, "cuda self-check failed: %s", sc);
            snprintf(failed_op, sizeof failed_op, "%.*s", (int)strcspn(sc, ":"), sc);
            b->destroy(b);
            b = NULL;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        if (b) { snprintf(why, whylen, "backend auto: using cuda (self-check in %.0f ms: %s)", ms, sc); return cuda_described(b); }
        snprintf(why, whylen, "backend auto: cuda not used (%s); using cpu", cwhy);
        if (!failed_op[0]) return rgpu_backend_cpu_create();
        char d[128];   /* the handshake carries 31 characters of it */
        snprintf(d, sizeof d, "cpu (cuda self-check failed: %s)", failed_op);
        if (strlen(d) > 31) snprintf(d, sizeof d, "cpu (cuda failed: %s)", failed_op);
        return described(rgpu_backend_cpu_create(), "%s", d);
    }
    snprintf(why, whylen, "unknown backend '%s' (cpu, cuda, null, auto)", name);
    return NULL;
}

void rgpu_dev_error_format(const rgpu_dev_error *d, char *out, size_t n) {
    const char *name = d->name ? d->name : rgpu_op_name(d->opcode);
    if (d->kind == RGPU_DEVERR_TARGET)
        snprintf(out, n, "%s: Target %lld is out of bounds.", name, (long long)d->value);
    else if (d->kind == RGPU_DEVERR_ZERO_DIV)
        snprintf(out, n, "%s: ZeroDivisionError", name);
    else if (d->kind == RGPU_DEVERR_PROB) {   /* value: the p's bytes, dim: its dtype */
        char bytes[8];
        memcpy(bytes, &d->value, sizeof bytes);
        snprintf(out, n, "%s: expected p_in >= 0 && p_in <= 1, got %g", name, op_load_f64(bytes, d->dim));
    } else if (d->kind == RGPU_DEVERR_PLANE)
        snprintf(out, n, "%s: index %lld is out of bounds for a plane of size %lld", name, (long long)d->value,
                 (long long)d->bound);
    else if (d->kind == RGPU_DEVERR_INDEX)
        snprintf(out, n, "%s: index %lld is out of bounds for dimension %d with size %lld", name, (long long)d->value,
                 d->dim, (long long)d->bound);
    else
        snprintf(out, n, "%s: a device-side check failed (kind %d)", name, d->kind);
}
