/* session.c — the record executor: resolve ids, validate, run on a backend.
 *
 * Trust boundary: records come from the network or a file. Every id is
 * looked up, every new tensor is bounds-checked against its storage, every
 * size is overflow-checked, before any kernel sees a pointer. Failures of a
 * single op poison its outputs and are reported at the next wait; they never
 * stop the session. Templates, CALL and graphs are in graph.c (graph.h),
 * the server-file ops in fileops.c, the tables all use in store.c (store.h). */
#include "fileops.h"
#include "op/op_args.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static void run_record(rgpu_session *s, const rgpu_record *r, uint64_t idx, bool force_poison, uint64_t poison_op);

/* ---------------------------------------------------------------------------
 * Tables */
rgpu_session *rgpu_session_new(rgpu_backend *b, const rgpu_session_limits *lim) {
    rgpu_session *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->b = b;
    s->lim.max_storage_bytes = (lim && lim->max_storage_bytes) ? lim->max_storage_bytes : RGPU_MAX_BLOB_RAW;
    s->lim.max_blob_cache = (lim && lim->max_blob_cache) ? lim->max_blob_cache : (256u << 20);
    s->lim.max_storages = lim ? lim->max_storages : 0;
    s->lim.max_total_bytes = lim ? lim->max_total_bytes : 0;
    s->lim.max_templates = (lim && lim->max_templates) ? lim->max_templates : 1024;
    s->lim.max_template_bytes = (lim && lim->max_template_bytes) ? lim->max_template_bytes : (256u << 20);
    s->lim.graphs = lim && lim->graphs;
    s->lim.pool = lim ? lim->pool : NULL;
    s->run_record = run_record;
    /* a word from the start: taken during a graph capture it would spoil it */
    if (b->err_new) s->dev_err = b->err_new(b);
    return s;
}

uint64_t rgpu_session_held(const rgpu_session *s) { return s->held; }

void rgpu_session_set_fetch(rgpu_session *s, rgpu_blob_fetch_fn fn, void *ud) { s->fetch = fn; s->fetch_ud = ud; }
uint64_t rgpu_session_applied(const rgpu_session *s) { return s->applied; }
void rgpu_session_memory(const rgpu_session *s, uint64_t *a, uint64_t *p) { *a = s->mem; *p = s->peak; }
uint64_t rgpu_session_tensor_count(const rgpu_session *s) { return s->tensors.len; }
uint64_t rgpu_session_storage_count(const rgpu_session *s) { return s->storages.len; }
uint64_t rgpu_session_template_count(const rgpu_session *s) { return s->tpls.len; }
uint64_t rgpu_session_template_bytes(const rgpu_session *s) { return s->tpl_bytes; }


void rgpu_session_free(rgpu_session *s) {
    if (!s) return;
    if (s->dev_err) s->b->err_free(s->b, s->dev_err);
    for (size_t i = 0; i < s->tensors.cap; i++)
        if (s->tensors.keys[i]) rgpu_sess_tensor_drop(s, s->tensors.vals[i]);
    u64map_free(&s->tensors);
    u64map_free(&s->storages);
    while (s->blob_head) { blobent *e = s->blob_head; s->blob_head = e->next; free(e->data); free(e); }
    u64map_free(&s->blobs);
    u64map_free(&s->refused);
    u64map_free(&s->read_paths);
    for (size_t i = 0; i < s->results.cap; i++)
        if (s->results.keys[i]) { result *r = s->results.vals[i]; free(r->data); free(r); }   /* pool: below */
    u64map_free(&s->results);
    for (size_t i = 0; i < s->tpls.cap; i++)
        if (s->tpls.keys[i]) rgpu_sess_tpl_free(s, s->tpls.vals[i]);
    rgpu_mem_pool_give(s->lim.pool, s->held_host);   /* blobs, results, templates: all it still held */
    u64map_free(&s->tpls);
    u64map_free(&s->locals);
    rgpu_sess_spares_free(s);   /* last: freeing the above gives structs back */
    free(s->ck.pk);
    free(s);
}

/* After a chunk ran: what its uploads consumed may go, past the dedupe cache. */
static void blob_evict(rgpu_session *s) { rgpu_sess_blob_evict_to(s, s->lim.max_blob_cache, true); }

/* ---------------------------------------------------------------------------
 * Results */
rgpu_status rgpu_session_take_result(rgpu_session *s, uint64_t op, int *status, uint64_t *err_op,
                                     char *msg, size_t msglen, uint8_t **data, size_t *n) {
    *data = NULL; *n = 0;
    if (op >= s->applied) return RGPU_ERR_SEQUENCE;
    result *r = u64map_del(&s->results, op + 1);
    *status = s->err_status;
    *err_op = s->err_op;
    snprintf(msg, msglen, "%s", s->err_status ? s->err_msg : "");
    s->err_status = 0;
    if (r) {
        rgpu_sess_mem_give(s, r->n, true);   /* the caller owns the bytes now */
        if (!*status) { *data = r->data; *n = r->n; } else free(r->data);
        free(r);
    }
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Views */
static void view_of(const tensor *t, rgpu_view *v) {
    v->data = (uint8_t *)t->st->data + (size_t)t->offset * rgpu_dtype_size(t->dtype);
    v->dtype = t->dtype;
    v->ndim = t->ndim;
    memcpy(v->sizes, t->sizes, sizeof(int64_t) * t->ndim);
    memcpy(v->strides, t->strides, sizeof(int64_t) * t->ndim);
}

static int64_t tensor_numel(const tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];   /* checked at definition */
    return n;
}

static bool tensor_contiguous(const tensor *t) {
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->sizes[d] != 1 && t->strides[d] != expect) return false;
        expect *= t->sizes[d];
    }
    return true;
}

/* Result bytes of a WAIT-flag op: the tensor's elements, contiguous. The
 * bytes are taken from the session's memory (they stay held as a result
 * until the client's WAIT takes them: result_taken gives them back), and so
 * is the temporary a strided tensor is gathered into. n cannot overflow:
 * every tensor's numel x element size is bounded at its definition
 * (rgpu_tdef_check_bounds). */
static rgpu_status download_tensor(rgpu_session *s, const tensor *t, int64_t max_numel,
                                   uint8_t **out, size_t *outn, char *why, size_t whylen) {
    int64_t numel = tensor_numel(t);
    if (max_numel >= 0 && numel != max_numel) {
        return rgpu_op_fail(why, whylen, RGPU_ERR_SHAPE, "a tensor with %lld elements cannot be converted to a scalar", (long long)numel);
    }
    size_t es = rgpu_dtype_size(t->dtype), n = (size_t)numel * es;
    rgpu_status st = rgpu_sess_mem_take(s, n, true, "a download", why, whylen);
    if (st) return st;
    uint8_t *host = malloc(n ? n : 1);
    if (!host) { rgpu_sess_mem_give(s, n, true); return RGPU_ERR_NOMEM; }
    rgpu_view v;
    view_of(t, &v);
    if (tensor_contiguous(t)) {
        st = s->b->download(s->b, host, v.data, n);
    } else {
        bool th = rgpu_sess_storage_host(s);
        if ((st = rgpu_sess_mem_take(s, n, th, "a download's gather buffer", why, whylen))) {
            free(host); rgpu_sess_mem_give(s, n, true); return st;
        }
        void *tmp = s->b->alloc(s->b, n);
        if (!tmp) { rgpu_sess_mem_give(s, n, th); free(host); rgpu_sess_mem_give(s, n, true); return RGPU_ERR_NOMEM; }
        rgpu_view dst = v;
        dst.data = tmp;
        int64_t stride = 1;
        for (int d = t->ndim - 1; d >= 0; d--) { dst.strides[d] = stride; stride *= t->sizes[d]; }
        rgpu_exec e = { .op = RGPU_OP_COPY, .n_in = 1, .n_out = 1 };
        e.in[0] = &v;
        e.out[0] = &dst;
        st = s->b->exec(s->b, &e, why, whylen);
        if (!st) st = s->b->download(s->b, host, tmp, n);
        s->b->free(s->b, tmp);
        rgpu_sess_mem_give(s, n, th);
    }
    if (st) { free(host); rgpu_sess_mem_give(s, n, true); return st; }
    *out = host; *outn = n;
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * One record */

/* Why rgpu_tdef_check_bounds refused d (st), into c->why. */
static rgpu_status tdef_refused(ctx *c, const rgpu_tdef *d, rgpu_status st) {
    if (st == RGPU_ERR_TOO_LARGE)
        return RECORD_FAIL(c, st, "tensor %llu: %lld elements of %zu bytes are over the limit of %llu bytes "
                 "for any tensor, views included", (unsigned long long)d->tid, (long long)rgpu_tdef_numel(d),
                 rgpu_dtype_size(d->dtype), (unsigned long long)RGPU_MAX_TENSOR_BYTES);
    return st;
}

/* Define a new tensor from a tdef: storage allocation or alias, bounds. */
static rgpu_status define_tensor(ctx *c, const rgpu_tdef *d, tensor **out) {
    rgpu_session *s = c->s;
    *out = NULL;
    if (!d->tid) return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "tensor id 0");
    if (u64map_get(&s->tensors, d->tid)) {
        return RECORD_FAIL(c, RGPU_ERR_DUPLICATE_ID, "tensor %llu already defined", (unsigned long long)d->tid);
    }
    tensor *t = rgpu_sess_tensor_new(s);
    if (!t) return RGPU_ERR_NOMEM;
    t->tid = d->tid; t->dtype = d->dtype; t->ndim = d->ndim; t->offset = d->offset;
    memcpy(t->sizes, d->sizes, sizeof(int64_t) * d->ndim);
    memcpy(t->strides, d->strides, sizeof(int64_t) * d->ndim);
    if (!u64map_put(&s->tensors, t->tid, t)) { rgpu_sess_tensor_put(s, t); return RGPU_ERR_NOMEM; }
    *out = t;
    rgpu_status st;
    storage *sg;
    if (d->flags & RGPU_TDEF_NEW_STORAGE) {
        if (!d->sid || u64map_get(&s->storages, d->sid)) {
            t->poisoned = true;
            return RECORD_FAIL(c, RGPU_ERR_DUPLICATE_ID, "storage %llu already defined", (unsigned long long)d->sid);
        }
        if (d->nbytes > s->lim.max_storage_bytes) {
            t->poisoned = true;
            return RECORD_FAIL(c, RGPU_ERR_TOO_LARGE, "storage of %llu bytes over the limit of %llu",
                     (unsigned long long)d->nbytes, (unsigned long long)s->lim.max_storage_bytes);
        }
        if (s->lim.max_storages && s->storages.len >= s->lim.max_storages) {
            t->poisoned = true;
            return RECORD_FAIL(c, RGPU_ERR_LIMIT, "the session holds %llu storages, the server's limit (--max-storages)",
                     (unsigned long long)s->storages.len);
        }
        if ((st = rgpu_tdef_check_bounds(d, d->nbytes))) { t->poisoned = true; return tdef_refused(c, d, st); }
        sg = rgpu_sess_storage_new(s);
        if (!sg) { t->poisoned = true; return RGPU_ERR_NOMEM; }
        sg->sid = d->sid; sg->nbytes = d->nbytes;
        int slot = -1;   /* a graph replay's static buffer for it, or its output slot */
        if (s->g) sg->data = rgpu_sess_graph_storage_data(s, sg, &slot);
        if (!sg->data && (st = rgpu_sess_mem_take(s, d->nbytes, rgpu_sess_storage_host(s), "a storage", c->why, sizeof c->why))) {
            rgpu_sess_storage_put(s, sg);
            t->poisoned = true;
            return st;
        }
        if (!sg->data && !(sg->data = s->b->alloc(s->b, (size_t)d->nbytes))) {
            rgpu_sess_mem_give(s, d->nbytes, rgpu_sess_storage_host(s));
            rgpu_sess_storage_put(s, sg);
            t->poisoned = true;
            return RECORD_FAIL(c, RGPU_ERR_NOMEM, "cannot allocate %llu bytes on %s", (unsigned long long)d->nbytes, s->b->name);
        }
        if (!u64map_put(&s->storages, sg->sid, sg)) {
            if (!sg->borrowed) { s->b->free(s->b, sg->data); rgpu_sess_mem_give(s, d->nbytes, rgpu_sess_storage_host(s)); }
            else if (sg->lender) rgpu_sess_graph_storage_gone(s, sg);
            rgpu_sess_storage_put(s, sg);
            t->poisoned = true;
            return RGPU_ERR_NOMEM;
        }
        s->mem += sg->nbytes;
        if (s->mem > s->peak) s->peak = s->mem;
        if (s->g) rgpu_sess_graph_storage_made(s, sg, slot);
    } else {
        sg = u64map_get(&s->storages, d->sid);
        if (!sg) {
            t->poisoned = true;
            return RECORD_FAIL(c, RGPU_ERR_UNKNOWN_STORAGE, "storage %llu", (unsigned long long)d->sid);
        }
        if ((st = rgpu_tdef_check_bounds(d, sg->nbytes))) {
            t->poisoned = true;
            if (st == RGPU_ERR_TOO_LARGE) return tdef_refused(c, d, st);
            return RECORD_FAIL(c, st, "tensor %llu outside storage %llu of %llu bytes", (unsigned long long)d->tid,
                     (unsigned long long)d->sid, (unsigned long long)sg->nbytes);
        }
    }
    sg->refs++;
    t->st = sg;
    return RGPU_OK;
}


static rgpu_status exec_record(ctx *c, tensor **outs, const tensor **ins) {
    rgpu_session *s = c->s;
    const rgpu_record *r = c->r;
    rgpu_status st;
    /* arity and scalar args against ops.def: once here, for every backend */
    if ((st = rgpu_op_args_check(r->op, r->n_in, r->n_out, r->n_args, r->args, c->why, sizeof c->why))) return st;
    switch (r->op) {   /* the RGPU_OPF_SESSION ops */
    case RGPU_OP_NOP: case RGPU_OP_EMPTY: case RGPU_OP_ALIAS:
        if (r->op == RGPU_OP_ALIAS && outs[0]->st != ins[0]->st) {
            return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "alias over a different storage than its base");
        }
        return RGPU_OK;
    case RGPU_OP_FREE: {
        rgpu_status first = RGPU_OK;
        for (uint32_t i = 0; i < r->args[0].v.ints.n; i++) {
            uint64_t tid = (uint64_t)rgpu_arg_int_at(&r->args[0], i);
            tensor *t = u64map_del(&s->tensors, tid);
            if (!t) {
                if (!first) { first = RGPU_ERR_UNKNOWN_TENSOR; snprintf(c->why, sizeof c->why, "free of tensor %llu", (unsigned long long)tid); }
                continue;
            }
            rgpu_sess_tensor_drop(s, t);
        }
        return first;
    }
    case RGPU_OP_UPLOAD: {
        uint64_t n = (uint64_t)r->args[1].v.i;
        if (n != outs[0]->st->nbytes) {
            return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "upload of %llu bytes into a storage of %llu", (unsigned long long)n,
                     (unsigned long long)outs[0]->st->nbytes);
        }
        blobent *e;
        if ((st = rgpu_sess_blob_get(s, &r->args[0].v.h, n, &e, c->why, sizeof c->why))) return st;
        if (e->n != n) return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "blob has %zu bytes, record says %llu", e->n, (unsigned long long)n);
        st = s->b->upload(s->b, outs[0]->st->data, e->data, e->n);
        rgpu_sess_blob_evict_to(s, s->lim.max_blob_cache, false);
        return st;
    }
    case RGPU_OP_DOWNLOAD: case RGPU_OP_LOCAL_SCALAR_DENSE: {
        uint8_t *data = NULL;
        size_t n = 0;
        rgpu_sess_dev_err_fetch(s);
        st = download_tensor(s, ins[0], r->op == RGPU_OP_LOCAL_SCALAR_DENSE ? 1 : -1, &data, &n, c->why, sizeof c->why);
        rgpu_sess_dev_err_take(s, st);
        if (st) return st;
        return rgpu_sess_store_result(s, c->idx, data, n);
    }
    case RGPU_OP_SYNC:
        rgpu_sess_dev_err_fetch(s);
        st = s->b->sync(s->b);
        rgpu_sess_dev_err_take(s, st);
        return st;
    case RGPU_OP_CALL:
        return rgpu_sess_exec_call(c);
    case RGPU_OP_FILE_STAT: case RGPU_OP_FILE_LIST: case RGPU_OP_FROM_FILE: case RGPU_OP_ZIP_INDEX: case RGPU_OP_SAVE_ZIP:
        return rgpu_sess_exec_file(c, outs);
    case RGPU_OP_MEMORY_STATS: {
        uint8_t *data = rgpu_sess_take_bytes(s, 16, &st, c->why, sizeof c->why);
        if (!data) return st;
        rgpu_st64(data, s->mem);
        rgpu_st64(data + 8, s->peak);
        if (r->args[0].v.i) s->peak = s->mem;
        return rgpu_sess_store_result(s, c->idx, data, 16);
    }
    default:
        if (rgpu_op_table[r->op].flags & RGPU_OPF_SESSION) {
            return RECORD_FAIL(c, RGPU_ERR_UNSUPPORTED, "the session has no handler for %s", rgpu_op_name(r->op));
        }
        break;
    }
    /* a compute op: hand views to the backend */
    if (!s->b->supports(s->b, r->op)) {
        return RECORD_FAIL(c, RGPU_ERR_UNSUPPORTED, "the %s backend has no kernel for %s", s->b->name, rgpu_op_name(r->op));
    }
    rgpu_view vin[RGPU_MAX_IN], vout[RGPU_MAX_OUT];
    rgpu_exec e = { .op = r->op, .n_in = r->n_in, .n_out = r->n_out, .n_args = r->n_args, .args = r->args,
                    .dev_err = s->dev_err, .dev_seq = ++s->dev_seq, .idx = c->idx,
                    .rec = s->in_call ? (int32_t)s->call_rec + 1 : 0, .dev_checked = &s->dev_checked };
    for (int i = 0; i < r->n_in; i++) {
        if (ins[i]) { view_of(ins[i], &vin[i]); e.in[i] = &vin[i]; } else e.in[i] = NULL;
    }
    for (int i = 0; i < r->n_out; i++) {
        if (outs[i]) { view_of(outs[i], &vout[i]); e.out[i] = &vout[i]; } else e.out[i] = NULL;
    }
    if (rgpu_op_table[r->op].flags & RGPU_OPF_WAIT) {
        /* A computed wait result (counts): the kernel writes one i64 into a
         * scratch output, which becomes the result bytes. */
        int64_t host = 0;
        void *tmp = s->b->alloc(s->b, 8);
        if (!tmp) return RGPU_ERR_NOMEM;
        rgpu_view sv = { .data = tmp, .dtype = RGPU_I64, .ndim = 0 };
        e.out[0] = &sv;
        e.n_out = 1;
        rgpu_status st = s->b->exec(s->b, &e, c->why, sizeof c->why);
        if (!st) {
            rgpu_sess_dev_err_fetch(s);
            st = s->b->download(s->b, &host, tmp, 8);
            rgpu_sess_dev_err_take(s, st);
        }
        s->b->free(s->b, tmp);
        if (st) return st;
        uint8_t *data = rgpu_sess_take_bytes(s, 8, &st, c->why, sizeof c->why);
        if (!data) return st;
        rgpu_st64(data, (uint64_t)host);
        return rgpu_sess_store_result(s, c->idx, data, 8);
    }
    if (s->g && rgpu_sess_graph_replaying(s)) {   /* the call's graph computes it */
        s->dev_checked = rgpu_sess_graph_replay_exec(s, &e);
        return RGPU_OK;
    }
    rgpu_status st2 = s->b->exec(s->b, &e, c->why, sizeof c->why);
    if (!st2 && s->g) rgpu_sess_graph_log_exec(s, &e, outs, ins);
    return st2;
}

/* force_poison: run r as if an input were poisoned by op poison_op (a CALL
 * with a poisoned binding): its outputs are defined, poisoned, not computed. */
static void run_record(rgpu_session *s, const rgpu_record *r, uint64_t idx, bool force_poison, uint64_t poison_op) {
    ctx c = { .s = s, .r = r, .idx = idx };
    tensor *outs[RGPU_MAX_OUT] = { 0 };
    const tensor *ins[RGPU_MAX_IN] = { 0 };
    rgpu_status st = RGPU_OK;
    bool poisoned = force_poison;
    for (int i = 0; i < r->n_in && !st; i++) {
        if (!r->in[i]) continue;
        const tensor *t = u64map_get(&s->tensors, r->in[i]);
        if (!t) { st = RGPU_ERR_UNKNOWN_TENSOR; snprintf(c.why, sizeof c.why, "input %d is tensor %llu", i, (unsigned long long)r->in[i]); break; }
        if (t->poisoned) { poisoned = true; poison_op = t->poison_op; }
        ins[i] = t;
    }
    for (int i = 0; i < r->n_out; i++) {
        const rgpu_tdef *d = &r->out[i];
        if ((d->flags & RGPU_TDEF_EXISTING) && d->tid == 0) {
            outs[i] = NULL;       /* an optional output the client does not want */
        } else if (d->flags & RGPU_TDEF_EXISTING) {
            tensor *t = u64map_get(&s->tensors, d->tid);
            if (!t && !st) { st = RGPU_ERR_UNKNOWN_TENSOR; snprintf(c.why, sizeof c.why, "output %d is tensor %llu", i, (unsigned long long)d->tid); }
            outs[i] = t;
        } else {
            s->rec_out = i;
            rgpu_status ds = define_tensor(&c, d, &outs[i]);
            if (ds && !st) st = ds;
        }
    }
    if (!st && poisoned) {
        /* a poisoned input makes poisoned outputs; its error was reported already */
        for (int i = 0; i < r->n_out; i++) if (outs[i]) { outs[i]->poisoned = true; outs[i]->poison_op = poison_op; }
        if (rgpu_op_table[r->op].flags & RGPU_OPF_WAIT) {
            snprintf(c.why, sizeof c.why, "input poisoned by failed op %llu", (unsigned long long)poison_op);
            rgpu_sess_op_fail(s, idx, r->op, RGPU_ERR_POISONED, c.why);
        }
        return;
    }
    if (!st) {
        for (int i = 0; i < r->n_out; i++) if (outs[i] && (outs[i]->poisoned || !outs[i]->st)) { st = RGPU_ERR_POISONED; break; }
    }
    s->dev_checked = false;
    if (!st) st = exec_record(&c, outs, ins);
    /* what the outputs' bytes depend on among the checks left to the device */
    uint64_t wr = s->dev_checked ? idx + 1 : 0;
    s->dev_checked = false;   /* (a CALL's records each clear it) */
    for (int i = 0; i < r->n_in; i++) if (ins[i] && ins[i]->st && ins[i]->st->wr > wr) wr = ins[i]->st->wr;
    for (int i = 0; i < r->n_out; i++) if (outs[i] && outs[i]->st && outs[i]->st->wr < wr) outs[i]->st->wr = wr;
    if (st) {
        rgpu_sess_op_fail(s, idx, r->op, st, c.why);
        for (int i = 0; i < r->n_out; i++) if (outs[i]) { outs[i]->poisoned = true; outs[i]->poison_op = idx; }
    }
}

/* A record of the stream (not of a template), timed when profiling. */
static void run_top_record(rgpu_session *s, const rgpu_record *r, uint64_t idx) {
    if (!s->prof) { run_record(s, r, idx, false, 0); return; }
    struct timespec t0, t1;
    bool marks = s->prof->timeline && s->prof->device_marks && s->b->timer_mark;
    uint64_t m0 = marks ? s->b->timer_mark(s->b) : 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_record(s, r, idx, false, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint64_t m1 = marks && m0 ? s->b->timer_mark(s->b) : 0;
    rgpu_op_profile *p = s->prof;
    uint64_t a = (uint64_t)t0.tv_sec * 1000000000ull + (uint64_t)t0.tv_nsec;
    uint64_t z = (uint64_t)t1.tv_sec * 1000000000ull + (uint64_t)t1.tv_nsec;
    p->ns[r->op] += z - a;
    p->count[r->op]++;
    if (!p->timeline) return;
    if (p->n_events == p->cap_events) {
        size_t cap = p->cap_events ? 2 * p->cap_events : 4096;
        rgpu_op_event *ev = realloc(p->events, cap * sizeof *ev);
        if (!ev) { p->dropped++; return; }
        p->events = ev;
        p->cap_events = cap;
    }
    p->events[p->n_events++] = (rgpu_op_event){ .idx = idx, .t0_ns = a, .t1_ns = z, .dev0 = m1 ? m0 : 0,
                                                .dev1 = m1, .op = r->op };
}

rgpu_status rgpu_session_run_record(rgpu_session *s, const rgpu_record *r, uint64_t idx) {
    if (idx != s->applied) return RGPU_ERR_SEQUENCE;
    run_top_record(s, r, idx);
    s->applied++;
    return RGPU_OK;
}

rgpu_status rgpu_session_tensor_info(rgpu_session *s, uint64_t tid, rgpu_tensor_info *info) {
    const tensor *t = u64map_get(&s->tensors, tid);
    if (!t) return RGPU_ERR_UNKNOWN_TENSOR;
    info->dtype = t->dtype;
    info->ndim = t->ndim;
    memcpy(info->sizes, t->sizes, sizeof(int64_t) * t->ndim);
    info->poisoned = t->poisoned || !t->st;
    info->poison_op = t->poison_op;
    return RGPU_OK;
}

void rgpu_session_check_device(rgpu_session *s) { rgpu_sess_dev_err_poll(s); }

rgpu_status rgpu_session_read_tensor(rgpu_session *s, uint64_t tid, uint8_t **data, size_t *n) {
    *data = NULL; *n = 0;
    const tensor *t = u64map_get(&s->tensors, tid);
    if (!t) return RGPU_ERR_UNKNOWN_TENSOR;
    rgpu_sess_dev_err_poll(s);   /* a failure still on the device may poison it */
    if (t->poisoned || !t->st) return RGPU_ERR_POISONED;
    char why[200];
    return download_tensor(s, t, -1, data, n, why, sizeof why);
}

rgpu_status rgpu_session_write_tensor(rgpu_session *s, uint64_t tid, const uint8_t *data, size_t n) {
    tensor *t = u64map_get(&s->tensors, tid);
    if (!t) return RGPU_ERR_UNKNOWN_TENSOR;
    if (!t->st) return RGPU_ERR_POISONED;
    size_t es = rgpu_dtype_size(t->dtype);
    if ((size_t)tensor_numel(t) * es != n) return RGPU_ERR_BAD_ARG;
    void *tmp = s->b->alloc(s->b, n);
    if (!tmp) return RGPU_ERR_NOMEM;
    rgpu_status st = s->b->upload(s->b, tmp, data, n);
    if (!st) {
        rgpu_view src, dst;
        view_of(t, &dst);
        src = dst;
        src.data = tmp;
        int64_t stride = 1;
        for (int d = t->ndim - 1; d >= 0; d--) { src.strides[d] = stride; stride *= t->sizes[d]; }
        rgpu_exec e = { .op = RGPU_OP_COPY, .n_in = 1, .n_out = 1 };
        e.in[0] = &src;
        e.out[0] = &dst;
        char why[200];
        st = s->b->exec(s->b, &e, why, sizeof why);
    }
    s->b->free(s->b, tmp);
    if (!st) t->poisoned = false;
    return st;
}

/* ---------------------------------------------------------------------------
 * Chunks: decoded once. check_chunk decodes every record (the whole chunk is
 * rejected before anything of it runs) and keeps the decoded records, packed:
 * per record a 16-byte header (packed size, op, counts), its outputs (an
 * existing tensor: 16 bytes, a new one: the fixed fields then ndim sizes and
 * strides), inputs, args. Unpacking is copies, no parse or check. A chunk
 * whose packed form would pass PK_CAP keeps the rest as raw bytes, decoded
 * again when run (hostile chunks of tiny records pack up to 24x their size). */
enum { PK_CAP = 8u << 20, PK_HDR = 16, TD_FIXED = offsetof(rgpu_tdef, sizes), ARG_PACKED = offsetof(rgpu_arg, ints_owned) };

static size_t pk_size(const rgpu_record *r) {
    size_t n = PK_HDR + 8 * (size_t)r->n_in + ARG_PACKED * (size_t)r->n_args;
    for (int i = 0; i < r->n_out; i++)
        n += r->out[i].flags & RGPU_TDEF_EXISTING ? 16 : TD_FIXED + 16 * (size_t)r->out[i].ndim;
    return (n + 7) & ~(size_t)7;
}

static void pk_put(uint8_t *p, const rgpu_record *r, size_t size) {
    uint32_t sz = (uint32_t)size;
    memcpy(p, &sz, 4);
    memcpy(p + 4, &r->op, 2);
    p[6] = r->n_out; p[7] = r->n_in; p[8] = r->n_args;
    p += PK_HDR;
    for (int i = 0; i < r->n_out; i++) {
        const rgpu_tdef *t = &r->out[i];
        if (t->flags & RGPU_TDEF_EXISTING) { memcpy(p, &t->tid, 8); p[8] = t->flags; p += 16; continue; }
        memcpy(p, t, TD_FIXED); p += TD_FIXED;
        memcpy(p, t->sizes, 8 * (size_t)t->ndim); p += 8 * (size_t)t->ndim;
        memcpy(p, t->strides, 8 * (size_t)t->ndim); p += 8 * (size_t)t->ndim;
    }
    memcpy(p, r->in, 8 * (size_t)r->n_in); p += 8 * (size_t)r->n_in;
    for (int i = 0; i < r->n_args; i++) { memcpy(p, &r->args[i], ARG_PACKED); p += ARG_PACKED; }
}

/* The record packed at p, as rgpu_record_decode would have made it; its size. */
static size_t pk_get(const uint8_t *p0, rgpu_record *r) {
    const uint8_t *p = p0;
    uint32_t sz;
    memcpy(&sz, p, 4);
    memcpy(&r->op, p + 4, 2);
    r->n_out = p[6]; r->n_in = p[7]; r->n_args = p[8];
    p += PK_HDR;
    for (int i = 0; i < r->n_out; i++) {
        rgpu_tdef *t = &r->out[i];
        if (p[8] & RGPU_TDEF_EXISTING) {
            memcpy(&t->tid, p, 8); t->flags = p[8];
            t->sid = 0; t->dtype = 0; t->ndim = 0; t->nbytes = 0; t->offset = 0;
            p += 16;
            continue;
        }
        memcpy(t, p, TD_FIXED); p += TD_FIXED;
        memcpy(t->sizes, p, 8 * (size_t)t->ndim); p += 8 * (size_t)t->ndim;
        memcpy(t->strides, p, 8 * (size_t)t->ndim); p += 8 * (size_t)t->ndim;
    }
    memcpy(r->in, p, 8 * (size_t)r->n_in); p += 8 * (size_t)r->n_in;
    for (int i = 0; i < r->n_args; i++) { memcpy(&r->args[i], p, ARG_PACKED); r->args[i].ints_owned = NULL; p += ARG_PACKED; }
    return sz;
}

/* Walks the checked chunk's records in order. */
typedef struct ck_cur { uint32_t k; size_t pk, off; } ck_cur;

static void ck_next(rgpu_session *s, ck_cur *c, rgpu_record *r) {
    if (c->k < s->ck.pk_n) {
        c->pk += pk_get(s->ck.pk + c->pk, r);
    } else {
        size_t used;
        if (c->k == s->ck.pk_n) c->off = s->ck.pk_raw_off;
        rgpu_record_decode(s->ck.raw + c->off, s->ck.n - c->off, r, &used);   /* checked by check_chunk */
        c->off += used;
    }
    c->k++;
}

/* The op of the next record, without unpacking it (packed records only). */
static bool ck_peek_op(const rgpu_session *s, const ck_cur *c, uint16_t *op) {
    if (c->k >= s->ck.pk_n) return false;
    memcpy(op, s->ck.pk + c->pk + 4, 2);
    return true;
}
static void ck_skip(rgpu_session *s, ck_cur *c) {
    uint32_t sz;
    memcpy(&sz, s->ck.pk + c->pk, 4);
    c->pk += sz;
    c->k++;
}

/* Fetch the blobs r names (an UPLOAD or file-op record); with templates,
 * also the template a CALL record names and the blobs inside it. */
static rgpu_status prefetch_records(rgpu_session *s, const uint8_t *raw, size_t n, bool templates);

static rgpu_status prefetch_record(rgpu_session *s, const rgpu_record *r, bool templates) {
    rgpu_status st;
    if (r->n_args < 1 || r->args[0].kind != RGPU_ARG_HASH || !s->fetch) return RGPU_OK;
    if (r->op == RGPU_OP_UPLOAD) {
        blobent *e;
        uint64_t size = r->n_args > 1 && r->args[1].kind == RGPU_ARG_INT ? (uint64_t)r->args[1].v.i : UINT64_MAX;
        st = rgpu_sess_blob_get(s, &r->args[0].v.h, size, &e, NULL, 0);
        if (st && st != RGPU_ERR_LIMIT && st != RGPU_ERR_BAD_ARG) return st;   /* a refused blob fails its UPLOAD when it runs */
    } else if (rgpu_sess_is_file_op(r->op)) {
        if ((st = rgpu_sess_file_prefetch(s, r))) return st;
    } else if (r->op == RGPU_OP_CALL && templates) {
        tplent *e;
        if ((st = rgpu_sess_tpl_get(s, &r->args[0].v.h, &e))) return st;
        if (!e->status && (st = prefetch_records(s, e->info.records, e->info.records_len, false))) return st;
    }
    return RGPU_OK;
}

static bool prefetch_op(uint16_t op) { return op == RGPU_OP_UPLOAD || op == RGPU_OP_CALL || rgpu_sess_is_file_op(op); }

/* Fetch the blobs the UPLOAD and file-op records of raw[0..n) name;
 * with templates, also the templates CALL records name and the blobs inside them. */
static rgpu_status prefetch_records(rgpu_session *s, const uint8_t *raw, size_t n, bool templates) {
    size_t off = 0;
    rgpu_record r;
    while (off < n) {
        size_t used;
        rgpu_status st = rgpu_record_decode(raw + off, n - off, &r, &used);
        if (st) return st;
        off += used;
        if ((st = prefetch_record(s, &r, templates))) return st;
    }
    return RGPU_OK;
}

static void prefetch_begin(rgpu_session *s) {
    s->blob_gen++;   /* what this fetches stays until the chunk ran */
    u64map_free(&s->refused);   /* refusals hold for one chunk: memory may have been freed since */
}

rgpu_status rgpu_session_prefetch(rgpu_session *s, const uint8_t *raw, size_t n) {
    prefetch_begin(s);
    return prefetch_records(s, raw, n, true);
}

rgpu_status rgpu_session_prefetch_checked(rgpu_session *s) {
    if (!s->ck.valid) return RGPU_ERR_SEQUENCE;
    prefetch_begin(s);
    ck_cur c = { 0 };
    rgpu_record r;
    while (c.k < s->ck.count) {
        uint16_t op;
        if (ck_peek_op(s, &c, &op) && !prefetch_op(op)) { ck_skip(s, &c); continue; }
        ck_next(s, &c, &r);
        rgpu_status st = prefetch_record(s, &r, true);
        if (st) { s->ck.valid = false; return st; }   /* not run: it must be checked again */
    }
    return RGPU_OK;
}

rgpu_status rgpu_session_check_chunk(rgpu_session *s, const uint8_t *raw, size_t n, uint64_t first_op,
                                     uint32_t count, char *why, size_t whylen) {
    s->ck.valid = false;
    if (first_op != s->applied) {
        return rgpu_op_fail(why, whylen, RGPU_ERR_SEQUENCE, "starts at op %llu, expected %llu", (unsigned long long)first_op, (unsigned long long)s->applied);
    }
    size_t off = 0, pk_len = 0;
    uint32_t k = 0, pk_n = 0;
    bool packing = true;
    size_t pk_raw_off = 0;
    rgpu_record r;
    while (off < n) {
        size_t used;
        rgpu_status st = rgpu_record_decode(raw + off, n - off, &r, &used);
        if (st) {
            return rgpu_op_fail(why, whylen, st, "record %u (op %llu, byte %zu of %zu) does not decode: %s", k,
                     (unsigned long long)(first_op + k), off, n, rgpu_status_str(st));
        }
        off += used;
        k++;
        if (!packing) continue;
        size_t sz = pk_size(&r);
        if (pk_len + sz > s->ck.pk_cap) {   /* grow: doubling, up to the cap */
            size_t cap = s->ck.pk_cap ? s->ck.pk_cap : 64u << 10;
            while (cap < pk_len + sz && cap < PK_CAP) cap *= 2;
            uint8_t *p = cap >= pk_len + sz ? realloc(s->ck.pk, cap) : NULL;
            if (p) { s->ck.pk = p; s->ck.pk_cap = cap; }
        }
        if (pk_len + sz > s->ck.pk_cap) { packing = false; continue; }   /* the rest stays raw */
        pk_put(s->ck.pk + pk_len, &r, sz);
        pk_len += sz;
        pk_n++;
        pk_raw_off = off;
    }
    if (k != count) {
        return rgpu_op_fail(why, whylen, RGPU_ERR_BAD_MESSAGE, "holds %u records, its header says %u", k, count);
    }
    s->ck.raw = raw; s->ck.n = n; s->ck.first = first_op; s->ck.count = count;
    s->ck.pk_len = pk_len; s->ck.pk_n = pk_n; s->ck.pk_raw_off = pk_raw_off;
    s->ck.valid = true;
    return RGPU_OK;
}

rgpu_status rgpu_session_run_checked(rgpu_session *s) {
    if (!s->ck.valid || s->ck.first != s->applied) return RGPU_ERR_SEQUENCE;
    s->ck.valid = false;   /* runs once */
    ck_cur c = { 0 };
    rgpu_record r;
    for (uint32_t i = 0; i < s->ck.count; i++) {
        ck_next(s, &c, &r);
        if (s->cancel && s->cancel(s->cancel_ud)) { blob_evict(s); return RGPU_ERR_TIMEOUT; }
        run_top_record(s, &r, s->ck.first + i);
        s->applied++;
        if (s->stop_status) { blob_evict(s); return s->stop_status; }   /* a rebuild that must not go on */
    }
    blob_evict(s);
    if (s->ck.pk_cap > (1u << 20) && s->ck.pk_len < s->ck.pk_cap / 8) {   /* one big chunk: give it back */
        free(s->ck.pk);
        s->ck.pk = NULL;
        s->ck.pk_cap = 0;
    }
    return RGPU_OK;
}

rgpu_status rgpu_session_run_chunk(rgpu_session *s, const uint8_t *raw, size_t n,
                                   uint64_t first_op, uint32_t count) {
    /* Decode everything first: a malformed chunk is rejected whole, so no
     * half-applied chunk exists and the index stays consistent. */
    char why[160];
    rgpu_status st0 = rgpu_session_check_chunk(s, raw, n, first_op, count, why, sizeof why);
    if (st0) return st0;
    return rgpu_session_run_checked(s);
}

void rgpu_session_set_cancel(rgpu_session *s, bool (*fn)(void *ud), void *ud) { s->cancel = fn; s->cancel_ud = ud; }

void rgpu_session_set_profile(rgpu_session *s, rgpu_op_profile *p) { s->prof = p; }
rgpu_op_profile *rgpu_session_profile(const rgpu_session *s) { return s ? s->prof : NULL; }

static void json_str(FILE *f, const char *v)
{
    fputc('"', f);
    for (const char *c = v; *c; c++) {
        if (*c == '"' || *c == '\\') fputc('\\', f);
        if ((unsigned char)*c >= 0x20) fputc(*c, f);
    }
    fputc('"', f);
}

int rgpu_op_profile_write_chrome(const rgpu_op_profile *p, FILE *f, const char *who, const char *label,
                                 rgpu_backend *b, bool absolute_ts)
{
    uint64_t base = p->n_events && !absolute_ts ? p->events[0].t0_ns : 0;
    /* device spans from the first mark, which is put at the first record's start */
    uint64_t mark0 = 0;
    double mark0_ts = 0.0;
    for (size_t i = 0; i < p->n_events && !mark0; i++)
        if (p->events[i].dev0) { mark0 = p->events[i].dev0; mark0_ts = (double)(p->events[i].t0_ns - base) * 1e-3; }
    if (mark0 && (!b->timer_ms || b->sync(b) != RGPU_OK)) mark0 = 0;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"label\":");
    json_str(f, label);
    fprintf(f, ",\"backend\":\"%s\",\"records\":%zu,\"dropped\":%llu},\n\"traceEvents\":[\n", b->name,
            p->n_events, (unsigned long long)p->dropped);
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":");
    json_str(f, who);
    fprintf(f, "}},\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"args\":{\"name\":\"records\"}}");
    if (mark0)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":2,\"args\":{\"name\":\"%s kernels\"}}",
                b->name);
    for (size_t i = 0; i < p->n_events; i++) {
        const rgpu_op_event *e = &p->events[i];
        /* op names are ATen's (letters, digits, '_', '.', ':'): nothing to escape */
        fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"record\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.3f,"
                   "\"dur\":%.3f,\"args\":{\"op\":%llu}}",
                rgpu_op_name(e->op), (double)(e->t0_ns - base) * 1e-3, (double)(e->t1_ns - e->t0_ns) * 1e-3,
                (unsigned long long)e->idx);
        double at, dur;
        if (mark0 && e->dev0 && b->timer_ms(b, mark0, e->dev0, &at) && b->timer_ms(b, e->dev0, e->dev1, &dur))
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"device\",\"ph\":\"X\",\"pid\":1,\"tid\":2,\"ts\":%.3f,"
                       "\"dur\":%.3f,\"args\":{\"op\":%llu}}",
                    rgpu_op_name(e->op), mark0_ts + at * 1e3, dur * 1e3, (unsigned long long)e->idx);
    }
    if (p->device_marks && b->timer_release) b->timer_release(b);
    fprintf(f, "\n]}\n");
    return fclose(f) != 0;
}

void rgpu_session_set_files(rgpu_session *s, rgpu_files *f, bool dry_run_writes) { s->files = f; s->files_dry = dry_run_writes; }

void rgpu_session_set_rebuild(rgpu_session *s, bool (*written)(void *ud, uint64_t op), void *ud) {
    s->written = written;
    s->written_ud = ud;
}

const char *rgpu_session_stop_reason(const rgpu_session *s) { return s->stop_status ? s->stop_why : ""; }

bool rgpu_session_take_rewrote(rgpu_session *s) {
    bool r = s->rewrote_read;
    s->rewrote_read = false;
    return r;
}

/* ---------------------------------------------------------------------------
 * Checkpoints (FORMAT.md §7.3): the state between chunks, for journal
 * compaction. All little-endian:
 *   u32 magic 'RGCK' | u32 version 1 | u64 applied | u64 peak
 *   i32 err_status | u32 err_msg_len | u64 err_op | err_msg bytes
 *   u64 n; n × storage: u64 sid | u64 nbytes | hash(bytes)
 *   u64 n; n × tensor:  u64 tid | u64 sid (0: none) | u8 dtype | u8 ndim | u8 poisoned | u8 0
 *                       | u64 poison_op | i64 offset | ndim × i64 sizes | ndim × i64 strides
 *   u64 n; n × result:  u64 op | hash(bytes)
 *   u64 n; n × hash     (the upload blob cache, oldest first)
 *   u64 n; n × hash     (templates: kept in the journal, parsed again on use) */
#define CKPT_MAGIC 0x4b434752u   /* "RGCK" */

static rgpu_status put_u64(rgpu_buf *b, uint64_t v) { uint8_t x[8]; rgpu_st64(x, v); return rgpu_buf_append(b, x, 8); }

rgpu_status rgpu_session_checkpoint(rgpu_session *s, rgpu_blob_put_fn put, void *ud, rgpu_buf *out,
                                    uint64_t *state_bytes) {
    rgpu_status st = RGPU_OK;
    *state_bytes = 0;
    rgpu_sess_dev_err_poll(s);   /* a failure still on the device belongs to this state */
    size_t ml = s->err_status ? strlen(s->err_msg) : 0;
    uint8_t h[40];
    rgpu_st32(h, CKPT_MAGIC); rgpu_st32(h + 4, 1);
    rgpu_st64(h + 8, s->applied); rgpu_st64(h + 16, s->peak);
    rgpu_st32(h + 24, (uint32_t)s->err_status); rgpu_st32(h + 28, (uint32_t)ml); rgpu_st64(h + 32, s->err_op);
    if ((st = rgpu_buf_append(out, h, 40)) || (ml && (st = rgpu_buf_append(out, s->err_msg, ml)))) return st;
    /* storages: their bytes, one at a time through host memory */
    if ((st = put_u64(out, s->storages.len))) return st;
    for (size_t i = 0; i < s->storages.cap && !st; i++) {
        if (!s->storages.keys[i]) continue;
        storage *sg = s->storages.vals[i];
        size_t n = (size_t)sg->nbytes;
        if ((st = rgpu_sess_mem_take(s, n, true, "a checkpoint buffer", NULL, 0))) break;
        uint8_t *host = malloc(n ? n : 1);
        if (!host) st = RGPU_ERR_NOMEM;
        if (!st) st = s->b->download(s->b, host, sg->data, n);
        rgpu_hash hh = st ? (rgpu_hash){ { 0 } } : rgpu_hash_bytes(host, n);
        if (!st) st = put(ud, &hh, host, n);
        free(host);
        rgpu_sess_mem_give(s, n, true);
        if (!st && !(st = put_u64(out, sg->sid)) && !(st = put_u64(out, sg->nbytes))) st = rgpu_buf_append(out, hh.b, 16);
        *state_bytes += n;
    }
    if (st || (st = put_u64(out, s->tensors.len))) return st;
    for (size_t i = 0; i < s->tensors.cap && !st; i++) {
        if (!s->tensors.keys[i]) continue;
        const tensor *t = s->tensors.vals[i];
        uint8_t x[40];
        rgpu_st64(x, t->tid); rgpu_st64(x + 8, t->st ? t->st->sid : 0);
        x[16] = t->dtype; x[17] = t->ndim; x[18] = t->poisoned; x[19] = 0; rgpu_st32(x + 20, 0);
        rgpu_st64(x + 24, t->poison_op); rgpu_st64(x + 32, (uint64_t)t->offset);
        if ((st = rgpu_buf_append(out, x, 40))) break;
        for (int d = 0; d < t->ndim && !st; d++) st = put_u64(out, (uint64_t)t->sizes[d]);
        for (int d = 0; d < t->ndim && !st; d++) st = put_u64(out, (uint64_t)t->strides[d]);
    }
    if (st || (st = put_u64(out, s->results.len))) return st;
    for (size_t i = 0; i < s->results.cap && !st; i++) {
        if (!s->results.keys[i]) continue;
        const result *r = s->results.vals[i];
        rgpu_hash hh = rgpu_hash_bytes(r->data, r->n);
        if (!(st = put(ud, &hh, r->data, r->n)) && !(st = put_u64(out, s->results.keys[i] - 1)))
            st = rgpu_buf_append(out, hh.b, 16);
        *state_bytes += r->n;
    }
    uint64_t nb = 0;
    for (const blobent *e = s->blob_head; e; e = e->next) nb++;
    if (st || (st = put_u64(out, nb))) return st;
    for (const blobent *e = s->blob_head; e && !st; e = e->next)
        if (!(st = put(ud, &e->h, e->data, e->n))) st = rgpu_buf_append(out, e->h.b, 16);
    uint64_t nt = 0;
    for (size_t i = 0; i < s->tpls.cap; i++)
        if (s->tpls.keys[i] && !((tplent *)s->tpls.vals[i])->status) nt++;
    if (st || (st = put_u64(out, nt))) return st;
    for (size_t i = 0; i < s->tpls.cap && !st; i++) {
        const tplent *e = s->tpls.vals[i];
        if (!s->tpls.keys[i] || e->status) continue;
        if (!(st = put(ud, &e->h, e->raw, e->n))) st = rgpu_buf_append(out, e->h.b, 16);
    }
    if (!st) u64map_free(&s->read_paths);   /* a rebuild from here reads none of them again */
    return st;
}

/* A reader over checkpoint bytes: every field is bounds-checked. */
typedef struct ckr { const uint8_t *p; size_t n, off; bool bad; } ckr;
static const uint8_t *ck_take(ckr *r, size_t n) {
    if (r->bad || n > r->n - r->off) { r->bad = true; return NULL; }
    const uint8_t *q = r->p + r->off;
    r->off += n;
    return q;
}
static uint64_t ck_u64(ckr *r) { const uint8_t *q = ck_take(r, 8); return q ? rgpu_ld64(q) : 0; }

/* The bytes of blob h (n of them when n != SIZE_MAX), fetched within the session's room. */
static rgpu_status ck_blob(rgpu_session *s, const uint8_t *hb, size_t want, uint8_t **data, size_t *n) {
    rgpu_hash h;
    memcpy(h.b, hb, 16);
    rgpu_status st = rgpu_sess_fetch_checked(s, &h, want == SIZE_MAX ? UINT64_MAX : want, data, n, NULL, 0);
    if (st == RGPU_ERR_BAD_ARG || (!st && want != SIZE_MAX && *n != want)) { free(*data); *data = NULL; st = RGPU_ERR_BAD_TRACE; }
    return st;
}

rgpu_status rgpu_session_restore(rgpu_session *s, const uint8_t *p, size_t n) {
    if (s->applied || s->tensors.len || s->storages.len) return RGPU_ERR_SEQUENCE;
    ckr r = { p, n, 0, false };
    const uint8_t *h = ck_take(&r, 40);
    if (!h || rgpu_ld32(h) != CKPT_MAGIC || rgpu_ld32(h + 4) != 1) return RGPU_ERR_BAD_TRACE;
    uint64_t applied = rgpu_ld64(h + 8), peak = rgpu_ld64(h + 16), err_op = rgpu_ld64(h + 32);
    int err_status = (int)rgpu_ld32(h + 24);
    uint32_t ml = rgpu_ld32(h + 28);
    const uint8_t *msg = ck_take(&r, ml);
    if (!msg || ml >= sizeof s->err_msg) return RGPU_ERR_BAD_TRACE;
    rgpu_status st = RGPU_OK;
    uint64_t ns = ck_u64(&r);
    for (uint64_t i = 0; i < ns && !st && !r.bad; i++) {
        uint64_t sid = ck_u64(&r), nbytes = ck_u64(&r);
        const uint8_t *hb = ck_take(&r, 16);
        if (!hb || !sid || nbytes > s->lim.max_storage_bytes || u64map_get(&s->storages, sid)) { st = RGPU_ERR_BAD_TRACE; break; }
        uint8_t *data;
        size_t dn;
        if ((st = ck_blob(s, hb, (size_t)nbytes, &data, &dn))) break;
        storage *sg = calloc(1, sizeof *sg);
        if (!sg || (st = rgpu_sess_mem_take(s, nbytes, rgpu_sess_storage_host(s), "a storage", NULL, 0))) {
            free(sg); free(data);
            if (!st) st = RGPU_ERR_NOMEM;
            break;
        }
        sg->sid = sid; sg->nbytes = nbytes;
        if (!(sg->data = s->b->alloc(s->b, (size_t)nbytes)) || !u64map_put(&s->storages, sid, sg)) {
            if (sg->data) s->b->free(s->b, sg->data);
            rgpu_sess_mem_give(s, nbytes, rgpu_sess_storage_host(s));
            free(sg); free(data);
            st = RGPU_ERR_NOMEM;
            break;
        }
        s->mem += nbytes;
        st = s->b->upload(s->b, sg->data, data, dn);
        free(data);
    }
    uint64_t nt = st ? 0 : ck_u64(&r);
    for (uint64_t i = 0; i < nt && !st && !r.bad; i++) {
        const uint8_t *x = ck_take(&r, 40);
        if (!x) break;
        rgpu_tdef d = { .tid = rgpu_ld64(x), .sid = rgpu_ld64(x + 8), .dtype = x[16], .ndim = x[17],
                        .offset = (int64_t)rgpu_ld64(x + 32) };
        if (d.ndim > RGPU_MAX_DIMS) { st = RGPU_ERR_BAD_TRACE; break; }
        for (int k = 0; k < d.ndim; k++) d.sizes[k] = (int64_t)ck_u64(&r);
        for (int k = 0; k < d.ndim; k++) d.strides[k] = (int64_t)ck_u64(&r);
        storage *sg = d.sid ? u64map_get(&s->storages, d.sid) : NULL;
        if (r.bad || !d.tid || u64map_get(&s->tensors, d.tid) || (d.sid && !sg) ||
            (sg && rgpu_tdef_check_bounds(&d, sg->nbytes)) || !rgpu_dtype_size(d.dtype)) { st = RGPU_ERR_BAD_TRACE; break; }
        tensor *t = calloc(1, sizeof *t);
        if (!t || !u64map_put(&s->tensors, d.tid, t)) { free(t); st = RGPU_ERR_NOMEM; break; }
        t->tid = d.tid; t->dtype = d.dtype; t->ndim = d.ndim; t->offset = d.offset;
        memcpy(t->sizes, d.sizes, sizeof d.sizes);
        memcpy(t->strides, d.strides, sizeof d.strides);
        t->poisoned = x[18] != 0;
        t->poison_op = rgpu_ld64(x + 24);
        t->st = sg;
        if (sg) sg->refs++;
    }
    uint64_t nr = st ? 0 : ck_u64(&r);
    for (uint64_t i = 0; i < nr && !st && !r.bad; i++) {
        uint64_t op = ck_u64(&r);
        const uint8_t *hb = ck_take(&r, 16);
        uint8_t *data;
        size_t dn;
        if (!hb || op >= applied) { st = RGPU_ERR_BAD_TRACE; break; }
        if ((st = ck_blob(s, hb, SIZE_MAX, &data, &dn))) break;
        if ((st = rgpu_sess_mem_take(s, dn, true, "a result", NULL, 0))) { free(data); break; }
        st = rgpu_sess_store_result(s, op, data, dn);
    }
    uint64_t nb = st ? 0 : ck_u64(&r);
    for (uint64_t i = 0; i < nb && !st && !r.bad; i++) {
        const uint8_t *hb = ck_take(&r, 16);
        uint8_t *data;
        size_t dn;
        rgpu_hash bh;
        if (!hb) break;
        memcpy(bh.b, hb, 16);
        if ((st = ck_blob(s, hb, SIZE_MAX, &data, &dn))) break;
        st = rgpu_session_put_blob(s, &bh, data, dn);
    }
    uint64_t ntp = st ? 0 : ck_u64(&r);
    if (!st && !r.bad) ck_take(&r, (size_t)(ntp < n ? ntp : n) * 16);   /* templates: fetched again on use */
    /* storages no tensor refers to cannot exist: such a checkpoint is malformed */
    for (size_t i = 0; i < s->storages.cap && !st; i++)
        if (s->storages.keys[i] && !((storage *)s->storages.vals[i])->refs) st = RGPU_ERR_BAD_TRACE;
    if (!st && (r.bad || r.off != r.n)) st = RGPU_ERR_BAD_TRACE;
    if (st) return st;
    s->applied = applied;
    s->peak = peak > s->mem ? peak : s->mem;
    s->err_status = err_status;
    s->err_op = err_op;
    memcpy(s->err_msg, msg, ml);
    s->err_msg[ml] = 0;
    return RGPU_OK;
}
