/* backend_host.c — the two host-memory backends: cpu (the reference) and
 * null (executes nothing: for measuring the client alone). */
#include "backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/half.h"

static void *host_alloc(rgpu_backend *b, size_t nbytes) {
    (void)b;
    size_t n = (nbytes + 63) & ~(size_t)63;
    if (n < nbytes) return NULL;
    return aligned_alloc(64, n ? n : 64);
}
static void host_free(rgpu_backend *b, void *p) { (void)b; free(p); }
static rgpu_status host_copy(rgpu_backend *b, void *dst, const void *src, size_t n) {
    (void)b;
    if (n) memcpy(dst, src, n);
    return RGPU_OK;
}
static rgpu_status host_sync(rgpu_backend *b) { (void)b; return RGPU_OK; }
static void host_destroy(rgpu_backend *b) { free(b); }

static rgpu_status cpu_exec(rgpu_backend *b, const rgpu_exec *e, char *err, size_t errlen) {
    (void)b;
    return rgpu_cpu_exec(e, err, errlen);
}
static bool cpu_supports(rgpu_backend *b, int op) { (void)b; return rgpu_cpu_supports(op); }

rgpu_backend *rgpu_backend_cpu_create(void) {
    rgpu_backend *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    *b = (rgpu_backend){
        /* .name     = */ "cpu",
        /* .ctx      = */ NULL,
        /* .alloc    = */ host_alloc,
        /* .free     = */ host_free,
        /* .upload   = */ host_copy,
        /* .download = */ host_copy,
        /* .exec     = */ cpu_exec,
        /* .sync     = */ host_sync,
        /* .supports = */ cpu_supports,
        /* .destroy  = */ host_destroy,
    };
    return b;
}

/* null: storages are 1-byte tokens; nothing is computed; every download
 * answers zeros. The session layer still decodes and validates everything. */
static void *null_alloc(rgpu_backend *b, size_t nbytes) { (void)b; (void)nbytes; return malloc(1); }
static rgpu_status null_upload(rgpu_backend *b, void *dst, const void *src, size_t n) {
    (void)b; (void)dst; (void)src; (void)n;
    return RGPU_OK;
}
static rgpu_status null_download(rgpu_backend *b, void *dst, const void *src, size_t n) {
    (void)b; (void)src;
    if (n) memset(dst, 0, n);
    return RGPU_OK;
}
static rgpu_status null_exec(rgpu_backend *b, const rgpu_exec *e, char *err, size_t errlen) {
    (void)b; (void)e; (void)err; (void)errlen;
    return RGPU_OK;
}
static bool null_supports(rgpu_backend *b, int op) { (void)b; return op >= 0 && op < RGPU_OP_COUNT; }

rgpu_backend *rgpu_backend_null_create(void) {
    rgpu_backend *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    *b = (rgpu_backend){
        /* .name     = */ "null",
        /* .ctx      = */ NULL,
        /* .alloc    = */ null_alloc,
        /* .free     = */ host_free,
        /* .upload   = */ null_upload,
        /* .download = */ null_download,
        /* .exec     = */ null_exec,
        /* .sync     = */ host_sync,
        /* .supports = */ null_supports,
        /* .destroy  = */ host_destroy,
    };
    return b;
}

/* ---------------------------------------------------------------------------
 * Test-only fault injection: a cpu backend whose results for one op are off
 * by one ulp in the first element of each floating output. rgpu-diff's tests
 * use it (RGPU_CPU_FAULT=<op name>) to prove a difference is found and named. */
typedef struct { int op; } fault_ctx;

static void bump_ulp(rgpu_view *v) {
    if (!v || !v->data) return;
    for (int d = 0; d < v->ndim; d++) if (v->sizes[d] == 0) return;
    switch (v->dtype) {
    case RGPU_F32: { float *p = v->data; *p = nextafterf(*p, INFINITY); break; }
    case RGPU_F64: { double *p = v->data; *p = nextafter(*p, INFINITY); break; }
    case RGPU_F16: case RGPU_BF16: { uint16_t *p = v->data; *p = (uint16_t)(*p + 1); break; }
    default: break;
    }
}

static rgpu_status faulty_exec(rgpu_backend *b, const rgpu_exec *e, char *err, size_t errlen) {
    rgpu_status s = rgpu_cpu_exec(e, err, errlen);
    if (!s && e->op == ((fault_ctx *)b->ctx)->op)
        for (int i = 0; i < e->n_out; i++) bump_ulp(e->out[i]);
    return s;
}

static void faulty_destroy(rgpu_backend *b) { free(b->ctx); free(b); }

rgpu_backend *rgpu_backend_cpu_create_faulty(int fault_op) {
    rgpu_backend *b = rgpu_backend_cpu_create();
    fault_ctx *f = calloc(1, sizeof *f);
    if (!b || !f) { free(b); free(f); return NULL; }
    f->op = fault_op;
    b->name = "cpu+fault";
    b->ctx = f;
    b->exec = faulty_exec;
    b->destroy = faulty_destroy;
    return b;
}
