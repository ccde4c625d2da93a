/* backend_null.c — the null backend: host tokens, executes nothing (for
 * measuring the client alone). */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

static void null_free(rgpu_backend *b, void *p) { (void)b; free(p); }
static rgpu_status null_sync(rgpu_backend *b) { (void)b; return RGPU_OK; }
static void null_destroy(rgpu_backend *b) { free(b); }

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
        /* .free     = */ null_free,
        /* .upload   = */ null_upload,
        /* .download = */ null_download,
        /* .exec     = */ null_exec,
        /* .sync     = */ null_sync,
        /* .supports = */ null_supports,
        /* .destroy  = */ null_destroy,
        /* graphs: none */ NULL, NULL, NULL, NULL,
        /* .device_memory = */ false,
        /* timers: none */ NULL, NULL, NULL,
        /* device error words: none (checks on the host) */ NULL, NULL, NULL, NULL, NULL,
    };
    return b;
}
