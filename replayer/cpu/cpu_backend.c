/* cpu_backend.c — the cpu backend's vtable (the reference backend: host
 * memory, kernels in cpu_kernels.c and the family files), its graphs
 * (captured exec calls replayed in order) and the test-only faulty variant. */
#include "backend.h"
#include "cpu_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *host_alloc(rgpu_backend *b, size_t nbytes) { (void)b; return rgpu_cpu_alloc(nbytes); }
static void host_free(rgpu_backend *b, void *p) { (void)b; rgpu_cpu_free(p); }
static rgpu_status host_copy(rgpu_backend *b, void *dst, const void *src, size_t n) {
    (void)b;
    if (n) memcpy(dst, src, n);
    return RGPU_OK;
}
static rgpu_status host_sync(rgpu_backend *b) { (void)b; return RGPU_OK; }

/* ---------------------------------------------------------------------------
 * cpu graphs (backend.h): a capture keeps deep copies of the exec calls the
 * capturing thread makes (views by value, args with their INTS payloads:
 * an exec's args point into a record that is gone by launch time) and
 * computes nothing; a launch runs them in order. Nothing here is faster than
 * running the records: it exists so that the session's graph logic (static
 * buffers, input copies, write-back, copy-out, fallback) is proven on this
 * backend with the same contract the CUDA one implements with stream capture. */
typedef struct cpu_step {
    int op, n_in, n_out, n_args;
    uint32_t present;                 /* bit i: in[i]; bit 16 + i: out[i] */
    rgpu_view in[RGPU_MAX_IN], out[RGPU_MAX_OUT];
    rgpu_arg args[RGPU_MAX_ARGS];     /* INTS payloads point into ints */
    uint8_t *ints;
    const uint64_t *philox;           /* a random op's (seed, offset), read at each launch (rgpu_exec) */
} cpu_step;

typedef struct cpu_graph { cpu_step *steps; size_t n; } cpu_graph;

/* One capture per thread (the server runs one thread per connection over a
 * shared backend; other threads' execs run as usual meanwhile). */
typedef struct cpu_capture {
    rgpu_backend *b;
    cpu_graph g;
    size_t cap;
    rgpu_status st;                   /* first refusal */
    char why[200];
} cpu_capture;
static _Thread_local cpu_capture *tl_capture;

typedef struct cpu_ctx { int refuse_op; bool transient; } cpu_ctx;   /* test-only refusal */

static void graph_free(cpu_graph *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n; i++) free(g->steps[i].ints);
    free(g->steps);
}

static rgpu_status capture_exec(cpu_capture *c, const rgpu_exec *e, char *err, size_t errlen) {
    const cpu_ctx *x = c->b->ctx;
    if (x && e->op == x->refuse_op) {
        c->st = x->transient ? RGPU_ERR_NOMEM : RGPU_ERR_UNSUPPORTED;
        snprintf(c->why, sizeof c->why, "%s cannot be captured (test refusal%s)", rgpu_op_name(e->op),
                 x->transient ? ", transient" : "");
        snprintf(err, errlen, "%s", c->why);
        return c->st;
    }
    if (e->n_in > RGPU_MAX_IN || e->n_out > RGPU_MAX_OUT || e->n_args > RGPU_MAX_ARGS) return RGPU_ERR_TOO_LARGE;
    if (c->g.n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        cpu_step *p = realloc(c->g.steps, cap * sizeof *p);
        if (!p) return RGPU_ERR_NOMEM;
        c->g.steps = p;
        c->cap = cap;
    }
    cpu_step *s = &c->g.steps[c->g.n];
    memset(s, 0, sizeof *s);
    s->op = e->op; s->n_in = e->n_in; s->n_out = e->n_out; s->n_args = e->n_args;
    if (e->philox && (!rgpu_op_is_random(e->op) || e->n_args < 2)) return RGPU_ERR_BAD_ARG;
    s->philox = e->philox;
    for (int i = 0; i < e->n_in; i++) if (e->in[i]) { s->in[i] = *e->in[i]; s->present |= 1u << i; }
    for (int i = 0; i < e->n_out; i++) if (e->out[i]) { s->out[i] = *e->out[i]; s->present |= 1u << (16 + i); }
    size_t nints = 0;
    for (int i = 0; i < e->n_args; i++) {
        s->args[i] = e->args[i];
        s->args[i].ints_owned = NULL;
        if (e->args[i].kind == RGPU_ARG_INTS) nints += 8 * (size_t)e->args[i].v.ints.n;
    }
    if (nints) {
        if (!(s->ints = malloc(nints))) return RGPU_ERR_NOMEM;
        size_t off = 0;
        for (int i = 0; i < e->n_args; i++) {
            if (e->args[i].kind != RGPU_ARG_INTS) continue;
            size_t n = 8 * (size_t)e->args[i].v.ints.n;
            if (n) memcpy(s->ints + off, e->args[i].v.ints.p, n);
            s->args[i].v.ints.p = s->ints + off;
            off += n;
        }
    }
    c->g.n++;
    return RGPU_OK;
}

static rgpu_status cpu_graph_begin(rgpu_backend *b, char *err, size_t errlen) {
    if (tl_capture) { snprintf(err, errlen, "a capture is already running on this thread"); return RGPU_ERR_SEQUENCE; }
    if (!(tl_capture = calloc(1, sizeof *tl_capture))) return RGPU_ERR_NOMEM;
    tl_capture->b = b;
    return RGPU_OK;
}

static rgpu_status cpu_graph_end(rgpu_backend *b, void **graph, char *err, size_t errlen) {
    *graph = NULL;
    cpu_capture *c = tl_capture;
    if (!c || c->b != b) { snprintf(err, errlen, "no capture is running on this thread"); return RGPU_ERR_SEQUENCE; }
    tl_capture = NULL;
    rgpu_status st = c->st;
    if (st) snprintf(err, errlen, "%s", c->why);
    cpu_graph *g = st ? NULL : malloc(sizeof *g);
    if (!st && !g) st = RGPU_ERR_NOMEM;
    if (st) graph_free(&c->g);
    else { *g = c->g; *graph = g; }
    free(c);
    return st;
}

static rgpu_status cpu_graph_launch(rgpu_backend *b, void *graph, char *err, size_t errlen) {
    (void)b;
    const cpu_graph *g = graph;
    for (size_t i = 0; i < g->n; i++) {
        const cpu_step *s = &g->steps[i];
        rgpu_exec e = { .op = s->op, .n_in = s->n_in, .n_out = s->n_out, .n_args = s->n_args, .args = s->args };
        rgpu_arg args[RGPU_MAX_ARGS];
        if (s->philox) {   /* this launch's pair: the last two args (ops.def RANDOM) */
            memcpy(args, s->args, sizeof args);
            args[s->n_args - 2].v.i = (int64_t)s->philox[0];
            args[s->n_args - 1].v.i = (int64_t)s->philox[1];
            e.args = args;
        }
        rgpu_view out[RGPU_MAX_OUT];   /* exec may not write the views, but they are not const */
        for (int k = 0; k < s->n_in; k++) e.in[k] = (s->present >> k) & 1 ? &s->in[k] : NULL;
        for (int k = 0; k < s->n_out; k++) {
            out[k] = s->out[k];
            e.out[k] = (s->present >> (16 + k)) & 1 ? &out[k] : NULL;
        }
        rgpu_status st = rgpu_cpu_exec(&e, err, errlen);
        if (st) return st;
    }
    return RGPU_OK;
}

static void cpu_graph_destroy(rgpu_backend *b, void *graph) {
    (void)b;
    graph_free(graph);
    free(graph);
}

void rgpu_backend_cpu_graph_refuse(rgpu_backend *b, int refuse_op, bool transient) {
    cpu_ctx *x = b->ctx;
    if (x) { x->refuse_op = refuse_op; x->transient = transient; }
}

static void cpu_destroy(rgpu_backend *b) {
    if (!b) return;
    free(b->ctx);
    free(b);
    rgpu_cpu_alloc_backend_ref(-1);
}

static rgpu_status cpu_exec(rgpu_backend *b, const rgpu_exec *e, char *err, size_t errlen) {
    if (tl_capture && tl_capture->b == b) return capture_exec(tl_capture, e, err, errlen);
    return rgpu_cpu_exec(e, err, errlen);
}
static bool cpu_supports(rgpu_backend *b, int op) { (void)b; return rgpu_cpu_supports(op); }

rgpu_backend *rgpu_backend_cpu_create(void) {
    rgpu_backend *b = calloc(1, sizeof *b);
    cpu_ctx *x = calloc(1, sizeof *x);
    if (!b || !x) { free(b); free(x); return NULL; }
    x->refuse_op = -1;
    rgpu_cpu_alloc_backend_ref(+1);
    *b = (rgpu_backend){
        /* .name          = */ "cpu",
        /* .ctx           = */ x,
        /* .alloc         = */ host_alloc,
        /* .free          = */ host_free,
        /* .upload        = */ host_copy,
        /* .download      = */ host_copy,
        /* .exec          = */ cpu_exec,
        /* .sync          = */ host_sync,
        /* .supports      = */ cpu_supports,
        /* .destroy       = */ cpu_destroy,
        /* .graph_begin   = */ cpu_graph_begin,
        /* .graph_end     = */ cpu_graph_end,
        /* .graph_launch  = */ cpu_graph_launch,
        /* .graph_destroy = */ cpu_graph_destroy,
        /* .device_memory = */ false,
        /* timers: none */ NULL, NULL, NULL,
        /* device error words: none (checks on the host) */ NULL, NULL, NULL, NULL, NULL,
        /* .counters = */ NULL,
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
    case RGPU_F32: case RGPU_C64: { float *p = v->data; *p = nextafterf(*p, INFINITY); break; }
    case RGPU_F64: case RGPU_C128: { double *p = v->data; *p = nextafter(*p, INFINITY); break; }
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

static void faulty_destroy(rgpu_backend *b) { free(b->ctx); free(b); rgpu_cpu_alloc_backend_ref(-1); }

rgpu_backend *rgpu_backend_cpu_create_faulty(int fault_op) {
    rgpu_backend *b = rgpu_backend_cpu_create();
    fault_ctx *f = calloc(1, sizeof *f);
    if (!b || !f) { if (b) b->destroy(b); free(f); return NULL; }
    f->op = fault_op;
    free(b->ctx);   /* no graphs here: its exec is not the one they would record */
    b->graph_begin = NULL; b->graph_end = NULL; b->graph_launch = NULL; b->graph_destroy = NULL;
    b->name = "cpu+fault";
    b->ctx = f;
    b->exec = faulty_exec;
    b->destroy = faulty_destroy;
    return b;
}
