/* backend_null.c — the null backend: host tokens, executes nothing (for
 * measuring the client alone). */
#include "backend.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* null: storages are 16-byte tokens, distinct while live, kept on a free
 * list when freed (a steady run allocates none); nothing is computed; every
 * download answers zeros. The session layer still decodes and validates
 * everything. The sessions of a server share the backend: a mutex. */
typedef union token { union token *next; char pad[16]; } token;
typedef struct null_ctx { pthread_mutex_t mu; token *free; } null_ctx;

static void *null_alloc(rgpu_backend *b, size_t nbytes) {
    (void)nbytes;
    null_ctx *c = (null_ctx *)b->ctx;
    pthread_mutex_lock(&c->mu);
    token *t = c->free;
    if (t) c->free = t->next;
    pthread_mutex_unlock(&c->mu);
    return t ? (void *)t : malloc(sizeof(token));
}
static void null_free(rgpu_backend *b, void *p) {
    if (!p) return;
    null_ctx *c = (null_ctx *)b->ctx;
    token *t = (token *)p;
    pthread_mutex_lock(&c->mu);
    t->next = c->free;
    c->free = t;
    pthread_mutex_unlock(&c->mu);
}
static rgpu_status null_sync(rgpu_backend *b) { (void)b; return RGPU_OK; }
static void null_destroy(rgpu_backend *b) {
    null_ctx *c = (null_ctx *)b->ctx;
    for (token *t = c->free, *n; t; t = n) { n = t->next; free(t); }
    pthread_mutex_destroy(&c->mu);
    free(c);
    free(b);
}
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
    null_ctx *c = calloc(1, sizeof *c);
    if (!b || !c || pthread_mutex_init(&c->mu, NULL)) { free(b); free(c); return NULL; }
    *b = (rgpu_backend){
        /* .name     = */ "null",
        /* .ctx      = */ c,
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
        /* .counters = */ NULL,
    };
    return b;
}
