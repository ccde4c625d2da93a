/* session.c — the record executor: resolve ids, validate, run on a backend.
 *
 * Trust boundary: records come from the network or a file. Every id is
 * looked up, every new tensor is bounds-checked against its storage, every
 * size is overflow-checked, before any kernel sees a pointer. Failures of a
 * single op poison its outputs and are reported at the next wait; they never
 * stop the session. */
#include "session.h"
#include "u64map.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct storage {
    uint64_t sid;
    void *data;
    uint64_t nbytes;
    uint32_t refs;            /* tensors over this storage */
} storage;

typedef struct tensor {
    uint64_t tid;
    storage *st;              /* NULL when poisoned at definition */
    uint8_t dtype, ndim;
    int64_t offset;
    int64_t sizes[RGPU_MAX_DIMS], strides[RGPU_MAX_DIMS];
    bool poisoned;
    uint64_t poison_op;       /* the failed op that poisoned it */
} tensor;

typedef struct blobent {
    rgpu_hash h;
    uint8_t *data;
    size_t n;
    struct blobent *next;     /* FIFO for eviction */
} blobent;

typedef struct result {
    uint8_t *data;
    size_t n;
} result;

/* A parsed template (FORMAT.md §5.1), kept per session apart from the
 * evictable upload blobs. A blob that is no template is remembered too, with
 * its status, so a bad CALL fails at once instead of fetching it again. */
typedef struct tplent {
    rgpu_hash h;
    rgpu_status status;       /* RGPU_OK, or why the blob is not a template */
    uint8_t *raw;             /* the blob (NULL when status != OK) */
    size_t n;
    rgpu_template_info info;  /* points into raw */
    u64map bind;              /* bind id -> its index + 1 */
    uint64_t last_use;        /* LRU clock */
    uint64_t bytes;           /* accounted against max_template_bytes */
} tplent;

_Static_assert(sizeof(uintptr_t) >= sizeof(uint64_t), "call-local ids are kept in pointer-sized map values");

/* Ids the server makes for a call's template-local tensors and storages:
 * the top bit set, which client ids never have (FORMAT.md §5.1). */
#define LOCAL_ID_BIT (1ull << 63)

struct rgpu_session {
    rgpu_backend *b;
    rgpu_session_limits lim;
    rgpu_blob_fetch_fn fetch;
    void *fetch_ud;
    u64map tensors, storages, blobs, results;
    blobent *blob_head, *blob_tail;
    uint64_t blob_bytes;
    /* templates, and the state of the CALL being executed */
    u64map tpls;
    uint64_t tpl_bytes, tpl_clock;
    u64map locals;            /* template-local id -> server id, for one call */
    uint64_t local_next;
    bool in_call, call_nomem;
    uint32_t call_rec;        /* position of the template record running */
    const tplent *call_tpl;
    const uint64_t *call_bind;
    uint64_t applied;
    uint64_t mem, peak;
    /* first failure since the last take_result */
    int err_status;
    uint64_t err_op;
    char err_msg[256];
};

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
    return s;
}

void rgpu_session_set_fetch(rgpu_session *s, rgpu_blob_fetch_fn fn, void *ud) { s->fetch = fn; s->fetch_ud = ud; }
uint64_t rgpu_session_applied(const rgpu_session *s) { return s->applied; }
void rgpu_session_memory(const rgpu_session *s, uint64_t *a, uint64_t *p) { *a = s->mem; *p = s->peak; }
uint64_t rgpu_session_tensor_count(const rgpu_session *s) { return s->tensors.len; }
uint64_t rgpu_session_blob_bytes(const rgpu_session *s) { return s->blob_bytes; }
uint64_t rgpu_session_storage_count(const rgpu_session *s) { return s->storages.len; }
uint64_t rgpu_session_template_count(const rgpu_session *s) { return s->tpls.len; }
uint64_t rgpu_session_template_bytes(const rgpu_session *s) { return s->tpl_bytes; }

static void storage_unref(rgpu_session *s, storage *st) {
    if (!st || --st->refs) return;
    u64map_del(&s->storages, st->sid);
    s->b->free(s->b, st->data);
    s->mem -= st->nbytes;
    free(st);
}

static void tensor_drop(rgpu_session *s, tensor *t) {
    storage_unref(s, t->st);
    free(t);
}

static void tpl_free(tplent *e) {
    if (!e) return;
    free(e->raw);
    u64map_free(&e->bind);
    free(e);
}

void rgpu_session_free(rgpu_session *s) {
    if (!s) return;
    for (size_t i = 0; i < s->tensors.cap; i++)
        if (s->tensors.keys[i]) tensor_drop(s, s->tensors.vals[i]);
    u64map_free(&s->tensors);
    u64map_free(&s->storages);
    while (s->blob_head) { blobent *e = s->blob_head; s->blob_head = e->next; free(e->data); free(e); }
    u64map_free(&s->blobs);
    for (size_t i = 0; i < s->results.cap; i++)
        if (s->results.keys[i]) { result *r = s->results.vals[i]; free(r->data); free(r); }
    u64map_free(&s->results);
    for (size_t i = 0; i < s->tpls.cap; i++)
        if (s->tpls.keys[i]) tpl_free(s->tpls.vals[i]);
    u64map_free(&s->tpls);
    u64map_free(&s->locals);
    free(s);
}

/* ---------------------------------------------------------------------------
 * Blobs (keyed by the first 8 hash bytes; full hash compared) */
static uint64_t blob_key(const rgpu_hash *h) {
    uint64_t k = rgpu_ld64(h->b);
    return k ? k : 1;
}

static blobent *blob_find(rgpu_session *s, const rgpu_hash *h) {
    blobent *e = u64map_get(&s->blobs, blob_key(h));
    return (e && rgpu_hash_eq(&e->h, h)) ? e : NULL;
}

static void blob_evict(rgpu_session *s) {
    while (s->blob_bytes > s->lim.max_blob_cache && s->blob_head) {
        blobent *e = s->blob_head;
        s->blob_head = e->next;
        if (!s->blob_head) s->blob_tail = NULL;
        if (u64map_get(&s->blobs, blob_key(&e->h)) == e) u64map_del(&s->blobs, blob_key(&e->h));
        s->blob_bytes -= e->n;
        free(e->data);
        free(e);
    }
}

rgpu_status rgpu_session_put_blob(rgpu_session *s, const rgpu_hash *h, uint8_t *data, size_t n) {
    rgpu_hash got = rgpu_hash_bytes(data, n);
    if (!rgpu_hash_eq(&got, h)) { free(data); return RGPU_ERR_BAD_CHECKSUM; }
    if (blob_find(s, h)) { free(data); return RGPU_OK; }
    blobent *e = calloc(1, sizeof *e);
    if (!e) { free(data); return RGPU_ERR_NOMEM; }
    e->h = *h; e->data = data; e->n = n;
    blobent *old = u64map_get(&s->blobs, blob_key(h));
    (void)old;  /* a colliding 64-bit prefix: the newer blob wins the slot */
    if (!u64map_put(&s->blobs, blob_key(h), e)) { free(data); free(e); return RGPU_ERR_NOMEM; }
    if (s->blob_tail) s->blob_tail->next = e; else s->blob_head = e;
    s->blob_tail = e;
    s->blob_bytes += n;
    return RGPU_OK;
}

bool rgpu_session_has_blob(rgpu_session *s, const rgpu_hash *h) { return blob_find(s, h) != NULL; }

/* ---------------------------------------------------------------------------
 * Templates (keyed like blobs; least recently used evicted first) */
static tplent *tpl_find(rgpu_session *s, const rgpu_hash *h) {
    tplent *e = u64map_get(&s->tpls, blob_key(h));
    return (e && rgpu_hash_eq(&e->h, h)) ? e : NULL;
}

static void tpl_evict(rgpu_session *s, const tplent *keep) {
    while (s->tpls.len > s->lim.max_templates || s->tpl_bytes > s->lim.max_template_bytes) {
        tplent *old = NULL;
        for (size_t i = 0; i < s->tpls.cap; i++) {
            tplent *e = s->tpls.vals[i];
            if (s->tpls.keys[i] && e != keep && (!old || e->last_use < old->last_use)) old = e;
        }
        if (!old) return;
        u64map_del(&s->tpls, blob_key(&old->h));
        s->tpl_bytes -= old->bytes;
        tpl_free(old);
    }
}

/* Parse blob bytes (owned from here) into a cache entry, a bad one too. */
static rgpu_status tpl_add(rgpu_session *s, const rgpu_hash *h, uint8_t *data, size_t n, tplent **out) {
    tplent *e = calloc(1, sizeof *e);
    if (!e) { free(data); return RGPU_ERR_NOMEM; }
    e->h = *h;
    e->status = rgpu_template_parse(data, n, &e->info);
    if (e->status == RGPU_ERR_NOMEM) { free(data); free(e); return RGPU_ERR_NOMEM; }   /* not the blob's fault */
    e->bytes = sizeof *e;
    if (e->status) {
        free(data);
    } else {
        e->raw = data; e->n = n;
        for (uint32_t i = 0; i < e->info.n_bind; i++)
            if (!u64map_put(&e->bind, rgpu_template_bind_id(&e->info, i), (void *)(uintptr_t)(i + 1))) {
                tpl_free(e);
                return RGPU_ERR_NOMEM;
            }
        e->bytes += n + e->bind.cap * (sizeof(uint64_t) + sizeof(void *));
    }
    tplent *old = u64map_get(&s->tpls, blob_key(h));   /* a colliding 64-bit prefix: replaced */
    if (!u64map_put(&s->tpls, blob_key(h), e)) { tpl_free(e); return RGPU_ERR_NOMEM; }
    if (old) { s->tpl_bytes -= old->bytes; tpl_free(old); }
    s->tpl_bytes += e->bytes;
    e->last_use = ++s->tpl_clock;
    tpl_evict(s, e);
    *out = e;
    return RGPU_OK;
}

/* The template named h: cached, among the upload blobs, or fetched. A blob
 * that is no template still gives RGPU_OK here, with (*out)->status set. */
static rgpu_status tpl_get(rgpu_session *s, const rgpu_hash *h, tplent **out) {
    tplent *e = tpl_find(s, h);
    if (!e) {
        uint8_t *data = NULL;
        size_t n = 0;
        const blobent *b = blob_find(s, h);
        rgpu_status st;
        if (b) {
            if (!(data = malloc(b->n ? b->n : 1))) return RGPU_ERR_NOMEM;
            if (b->n) memcpy(data, b->data, b->n);
            n = b->n;
        } else {
            if (!s->fetch) return RGPU_ERR_MISSING_BLOB;
            if ((st = s->fetch(s->fetch_ud, h, &data, &n))) return st;
            rgpu_hash got = rgpu_hash_bytes(data, n);
            if (!rgpu_hash_eq(&got, h)) { free(data); return RGPU_ERR_BAD_CHECKSUM; }
        }
        if ((st = tpl_add(s, h, data, n, &e))) return st;
    }
    e->last_use = ++s->tpl_clock;
    *out = e;
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Errors */
static rgpu_status op_fail(rgpu_session *s, uint64_t idx, int op, rgpu_status st, const char *why) {
    if (!s->err_status) {
        s->err_status = st;
        s->err_op = idx;
        if (s->in_call)   /* a record of the template a CALL runs */
            snprintf(s->err_msg, sizeof s->err_msg, "op %llu (%s) failed: template record %u (%s): %s%s%s",
                     (unsigned long long)idx, rgpu_op_name(RGPU_OP_CALL), s->call_rec, rgpu_op_name(op),
                     rgpu_status_str(st), why && *why ? ": " : "", why ? why : "");
        else
            snprintf(s->err_msg, sizeof s->err_msg, "op %llu (%s) failed: %s%s%s",
                     (unsigned long long)idx, rgpu_op_name(op), rgpu_status_str(st),
                     why && *why ? ": " : "", why ? why : "");
    }
    return st;
}

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

/* Result bytes of a WAIT-flag op: the tensor's elements, contiguous. */
static rgpu_status download_tensor(rgpu_session *s, const tensor *t, int64_t max_numel,
                                   uint8_t **out, size_t *outn, char *why, size_t whylen) {
    int64_t numel = tensor_numel(t);
    if (max_numel >= 0 && numel != max_numel) {
        snprintf(why, whylen, "a tensor with %lld elements cannot be converted to a scalar", (long long)numel);
        return RGPU_ERR_SHAPE;
    }
    size_t es = rgpu_dtype_size(t->dtype), n = (size_t)numel * es;
    uint8_t *host = malloc(n ? n : 1);
    if (!host) return RGPU_ERR_NOMEM;
    rgpu_view v;
    view_of(t, &v);
    rgpu_status st;
    if (tensor_contiguous(t)) {
        st = s->b->download(s->b, host, v.data, n);
    } else {
        void *tmp = s->b->alloc(s->b, n);
        if (!tmp) { free(host); return RGPU_ERR_NOMEM; }
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
    }
    if (st) { free(host); return st; }
    *out = host; *outn = n;
    return RGPU_OK;
}

/* Keep the result bytes of WAIT op idx until the client's WAIT takes them. */
static rgpu_status store_result(rgpu_session *s, uint64_t idx, uint8_t *data, size_t n) {
    result *res = calloc(1, sizeof *res);
    if (!res) { free(data); return RGPU_ERR_NOMEM; }
    res->data = data; res->n = n;
    result *old = u64map_del(&s->results, idx + 1);
    if (old) { free(old->data); free(old); }
    if (!u64map_put(&s->results, idx + 1, res)) { free(data); free(res); return RGPU_ERR_NOMEM; }
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * One record */
typedef struct ctx {
    rgpu_session *s;
    const rgpu_record *r;
    uint64_t idx;
    char why[200];
} ctx;

/* Define a new tensor from a tdef: storage allocation or alias, bounds. */
static rgpu_status define_tensor(ctx *c, const rgpu_tdef *d, tensor **out) {
    rgpu_session *s = c->s;
    *out = NULL;
    if (!d->tid) { snprintf(c->why, sizeof c->why, "tensor id 0"); return RGPU_ERR_BAD_ARG; }
    if (u64map_get(&s->tensors, d->tid)) {
        snprintf(c->why, sizeof c->why, "tensor %llu already defined", (unsigned long long)d->tid);
        return RGPU_ERR_DUPLICATE_ID;
    }
    tensor *t = calloc(1, sizeof *t);
    if (!t) return RGPU_ERR_NOMEM;
    t->tid = d->tid; t->dtype = d->dtype; t->ndim = d->ndim; t->offset = d->offset;
    memcpy(t->sizes, d->sizes, sizeof(int64_t) * d->ndim);
    memcpy(t->strides, d->strides, sizeof(int64_t) * d->ndim);
    if (!u64map_put(&s->tensors, t->tid, t)) { free(t); return RGPU_ERR_NOMEM; }
    *out = t;
    rgpu_status st;
    storage *sg;
    if (d->flags & RGPU_TDEF_NEW_STORAGE) {
        if (!d->sid || u64map_get(&s->storages, d->sid)) {
            snprintf(c->why, sizeof c->why, "storage %llu already defined", (unsigned long long)d->sid);
            t->poisoned = true;
            return RGPU_ERR_DUPLICATE_ID;
        }
        if (d->nbytes > s->lim.max_storage_bytes) {
            snprintf(c->why, sizeof c->why, "storage of %llu bytes over the limit of %llu",
                     (unsigned long long)d->nbytes, (unsigned long long)s->lim.max_storage_bytes);
            t->poisoned = true;
            return RGPU_ERR_TOO_LARGE;
        }
        if (s->lim.max_storages && s->storages.len >= s->lim.max_storages) {
            snprintf(c->why, sizeof c->why, "the session holds %llu storages, the server's limit (--max-storages)",
                     (unsigned long long)s->storages.len);
            t->poisoned = true;
            return RGPU_ERR_LIMIT;
        }
        if (s->lim.max_total_bytes &&
            (d->nbytes > s->lim.max_total_bytes || s->mem > s->lim.max_total_bytes - d->nbytes)) {
            snprintf(c->why, sizeof c->why, "%llu more bytes would pass the session limit of %llu (--max-session-bytes; %llu in use)",
                     (unsigned long long)d->nbytes, (unsigned long long)s->lim.max_total_bytes, (unsigned long long)s->mem);
            t->poisoned = true;
            return RGPU_ERR_LIMIT;
        }
        if ((st = rgpu_tdef_check_bounds(d, d->nbytes))) { t->poisoned = true; return st; }
        sg = calloc(1, sizeof *sg);
        if (!sg) { t->poisoned = true; return RGPU_ERR_NOMEM; }
        sg->sid = d->sid; sg->nbytes = d->nbytes;
        sg->data = s->b->alloc(s->b, (size_t)d->nbytes);
        if (!sg->data) {
            free(sg);
            snprintf(c->why, sizeof c->why, "cannot allocate %llu bytes on %s", (unsigned long long)d->nbytes, s->b->name);
            t->poisoned = true;
            return RGPU_ERR_NOMEM;
        }
        if (!u64map_put(&s->storages, sg->sid, sg)) { s->b->free(s->b, sg->data); free(sg); t->poisoned = true; return RGPU_ERR_NOMEM; }
        s->mem += sg->nbytes;
        if (s->mem > s->peak) s->peak = s->mem;
    } else {
        sg = u64map_get(&s->storages, d->sid);
        if (!sg) {
            snprintf(c->why, sizeof c->why, "storage %llu", (unsigned long long)d->sid);
            t->poisoned = true;
            return RGPU_ERR_UNKNOWN_STORAGE;
        }
        if ((st = rgpu_tdef_check_bounds(d, sg->nbytes))) {
            snprintf(c->why, sizeof c->why, "tensor %llu outside storage %llu of %llu bytes", (unsigned long long)d->tid,
                     (unsigned long long)d->sid, (unsigned long long)sg->nbytes);
            t->poisoned = true;
            return st;
        }
    }
    sg->refs++;
    t->st = sg;
    return RGPU_OK;
}

static void run_record(rgpu_session *s, const rgpu_record *r, uint64_t idx, bool force_poison, uint64_t poison_op);
static rgpu_status exec_call(ctx *c);

static rgpu_status exec_record(ctx *c, tensor **outs, const tensor **ins) {
    rgpu_session *s = c->s;
    const rgpu_record *r = c->r;
    rgpu_status st;
    switch (r->op) {
    case RGPU_OP_NOP: case RGPU_OP_EMPTY: case RGPU_OP_ALIAS:
        if (r->op == RGPU_OP_ALIAS && outs[0]->st != ins[0]->st) {
            snprintf(c->why, sizeof c->why, "alias over a different storage than its base");
            return RGPU_ERR_BAD_ARG;
        }
        return RGPU_OK;
    case RGPU_OP_FREE: {
        if (r->n_args != 1 || r->args[0].kind != RGPU_ARG_INTS) return RGPU_ERR_BAD_ARG;
        rgpu_status first = RGPU_OK;
        for (uint32_t i = 0; i < r->args[0].v.ints.n; i++) {
            uint64_t tid = (uint64_t)rgpu_arg_int_at(&r->args[0], i);
            tensor *t = u64map_del(&s->tensors, tid);
            if (!t) {
                if (!first) { first = RGPU_ERR_UNKNOWN_TENSOR; snprintf(c->why, sizeof c->why, "free of tensor %llu", (unsigned long long)tid); }
                continue;
            }
            tensor_drop(s, t);
        }
        return first;
    }
    case RGPU_OP_UPLOAD: {
        if (r->n_args != 2 || r->args[0].kind != RGPU_ARG_HASH || r->args[1].kind != RGPU_ARG_INT) return RGPU_ERR_BAD_ARG;
        uint64_t n = (uint64_t)r->args[1].v.i;
        if (n != outs[0]->st->nbytes) {
            snprintf(c->why, sizeof c->why, "upload of %llu bytes into a storage of %llu", (unsigned long long)n,
                     (unsigned long long)outs[0]->st->nbytes);
            return RGPU_ERR_BAD_ARG;
        }
        blobent *e = blob_find(s, &r->args[0].v.h);
        if (!e) {
            uint8_t *data = NULL;
            size_t dn = 0;
            if (!s->fetch) return RGPU_ERR_MISSING_BLOB;
            if ((st = s->fetch(s->fetch_ud, &r->args[0].v.h, &data, &dn))) return st;
            if ((st = rgpu_session_put_blob(s, &r->args[0].v.h, data, dn))) return st;
            e = blob_find(s, &r->args[0].v.h);
            if (!e) return RGPU_ERR_MISSING_BLOB;
        }
        if (e->n != n) { snprintf(c->why, sizeof c->why, "blob has %zu bytes, record says %llu", e->n, (unsigned long long)n); return RGPU_ERR_BAD_ARG; }
        st = s->b->upload(s->b, outs[0]->st->data, e->data, e->n);
        blob_evict(s);
        return st;
    }
    case RGPU_OP_DOWNLOAD: case RGPU_OP_LOCAL_SCALAR_DENSE: {
        uint8_t *data = NULL;
        size_t n = 0;
        st = download_tensor(s, ins[0], r->op == RGPU_OP_LOCAL_SCALAR_DENSE ? 1 : -1, &data, &n, c->why, sizeof c->why);
        if (st) return st;
        return store_result(s, c->idx, data, n);
    }
    case RGPU_OP_SYNC:
        return s->b->sync(s->b);
    case RGPU_OP_CALL:
        return exec_call(c);
    case RGPU_OP_MEMORY_STATS: {
        if (r->n_args != 1 || r->args[0].kind != RGPU_ARG_BOOL) return RGPU_ERR_BAD_ARG;
        uint8_t *data = malloc(16);
        if (!data) return RGPU_ERR_NOMEM;
        rgpu_st64(data, s->mem);
        rgpu_st64(data + 8, s->peak);
        if (r->args[0].v.i) s->peak = s->mem;
        return store_result(s, c->idx, data, 16);
    }
    default: break;
    }
    /* a compute op: hand views to the backend */
    if (!s->b->supports(s->b, r->op)) {
        snprintf(c->why, sizeof c->why, "the %s backend has no kernel for %s", s->b->name, rgpu_op_name(r->op));
        return RGPU_ERR_UNSUPPORTED;
    }
    rgpu_view vin[RGPU_MAX_IN], vout[RGPU_MAX_OUT];
    rgpu_exec e = { .op = r->op, .n_in = r->n_in, .n_out = r->n_out, .n_args = r->n_args, .args = r->args };
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
        if (!st) st = s->b->download(s->b, &host, tmp, 8);
        s->b->free(s->b, tmp);
        if (st) return st;
        uint8_t *data = malloc(8);
        if (!data) return RGPU_ERR_NOMEM;
        rgpu_st64(data, (uint64_t)host);
        return store_result(s, c->idx, data, 8);
    }
    return s->b->exec(s->b, &e, c->why, sizeof c->why);
}

/* ---------------------------------------------------------------------------
 * CALL: run a template's records with its ids remapped (FORMAT.md §5.1) */

/* A template id as this call sees it: a bind id becomes its binding; any
 * other id is local to the call and gets a fresh server id on first sight. */
static uint64_t call_map(rgpu_session *s, uint64_t id) {
    if (!id) return 0;
    void *v = u64map_get(&s->call_tpl->bind, id);
    if (v) return s->call_bind[(uintptr_t)v - 1];
    if ((v = u64map_get(&s->locals, id))) return (uint64_t)(uintptr_t)v;
    uint64_t fresh = LOCAL_ID_BIT | ++s->local_next;
    if (!u64map_put(&s->locals, id, (void *)(uintptr_t)fresh)) { s->call_nomem = true; return 0; }
    return fresh;
}

/* Free what the call's locals still hold (their storages go with their last
 * tensor) and empty the map, keeping its capacity for the next call. */
static void call_free_locals(rgpu_session *s) {
    for (size_t i = 0; i < s->locals.cap; i++) {
        if (!s->locals.keys[i]) continue;
        tensor *t = u64map_del(&s->tensors, (uint64_t)(uintptr_t)s->locals.vals[i]);
        if (t) tensor_drop(s, t);
    }
    if (s->locals.cap) {
        memset(s->locals.keys, 0, s->locals.cap * sizeof *s->locals.keys);
        memset(s->locals.vals, 0, s->locals.cap * sizeof *s->locals.vals);
    }
    s->locals.len = 0;
}

/* Check a CALL record's args against its template; on success *tp is the
 * template and *bind the bindings (malloc'd, n_bind of them). */
static rgpu_status call_prepare(rgpu_session *s, const rgpu_record *r, tplent **tp, uint64_t **bind,
                                char *why, size_t whylen) {
    *bind = NULL;
    if (r->n_args != 4 || r->args[0].kind != RGPU_ARG_HASH || r->args[1].kind != RGPU_ARG_INTS ||
        r->args[2].kind != RGPU_ARG_INT || r->args[3].kind != RGPU_ARG_INT) {
        snprintf(why, whylen, "CALL takes (HASH template, INTS bindings, INT seed, INT offset)");
        return RGPU_ERR_BAD_ARG;
    }
    char hex[33];
    rgpu_hash_hex(&r->args[0].v.h, hex);
    tplent *e;
    rgpu_status st = tpl_get(s, &r->args[0].v.h, &e);
    if (st) {
        snprintf(why, whylen, "template %s: %s", hex, st == RGPU_ERR_MISSING_BLOB ? "nobody holds it" : rgpu_status_str(st));
        return st;
    }
    if (e->status) {
        snprintf(why, whylen, "template %s is not a valid template (%s)", hex, rgpu_status_name(e->status));
        return e->status;
    }
    uint32_t nb = r->args[1].v.ints.n;
    if (nb != e->info.n_bind) {
        snprintf(why, whylen, "template %s has %u bind ids, the call gives %u bindings", hex, e->info.n_bind, nb);
        return RGPU_ERR_BAD_ARG;
    }
    uint64_t *b = malloc(sizeof *b * (nb ? nb : 1));
    if (!b) return RGPU_ERR_NOMEM;
    for (uint32_t i = 0; i < nb; i++) {
        if (!(b[i] = (uint64_t)rgpu_arg_int_at(&r->args[1], i))) {
            snprintf(why, whylen, "binding %u is id 0", i);
            free(b);
            return RGPU_ERR_BAD_ARG;
        }
    }
    *tp = e;
    *bind = b;
    return RGPU_OK;
}

/* A failure of one template record is reported as that record's (op_fail
 * names the CALL, the position and the op) and poisons what depends on it;
 * the call goes on, like a chunk after a failing op. */
static rgpu_status exec_call(ctx *c) {
    rgpu_session *s = c->s;
    if (s->in_call) { snprintf(c->why, sizeof c->why, "a template cannot CALL"); return RGPU_ERR_BAD_OP; }
    tplent *e;
    uint64_t *bind;
    rgpu_status st = call_prepare(s, c->r, &e, &bind, c->why, sizeof c->why);
    if (st) return st;
    /* A poisoned binding poisons everything the template defines or writes,
     * without running it and without a second report. */
    bool poisoned = false;
    uint64_t poison_op = 0;
    for (uint32_t i = 0; i < e->info.n_bind && !poisoned; i++) {
        const tensor *t = u64map_get(&s->tensors, bind[i]);
        if (t && (t->poisoned || !t->st)) { poisoned = true; poison_op = t->poison_op; }
    }
    uint64_t seed = (uint64_t)c->r->args[2].v.i, offset = (uint64_t)c->r->args[3].v.i;
    uint8_t *ids = NULL;                 /* a FREE record's remapped ids */
    size_t ids_cap = 0;
    s->in_call = true;
    s->call_nomem = false;
    s->call_tpl = e;
    s->call_bind = bind;
    size_t off = 0;
    for (uint32_t k = 0; k < e->info.n_records; k++) {
        rgpu_record r;
        size_t used;
        rgpu_record_decode(e->info.records + off, e->info.records_len - off, &r, &used);   /* checked at parse */
        off += used;
        s->call_rec = k;
        for (int i = 0; i < r.n_out; i++) {
            r.out[i].tid = call_map(s, r.out[i].tid);
            if (!(r.out[i].flags & RGPU_TDEF_EXISTING)) r.out[i].sid = call_map(s, r.out[i].sid);
        }
        for (int i = 0; i < r.n_in; i++) r.in[i] = call_map(s, r.in[i]);
        if (r.op == RGPU_OP_FREE && r.n_args == 1 && r.args[0].kind == RGPU_ARG_INTS) {
            size_t need = 8 * (size_t)r.args[0].v.ints.n;
            if (need > ids_cap) {
                uint8_t *p = realloc(ids, need);
                if (!p) { s->call_nomem = true; } else { ids = p; ids_cap = need; }
            }
            if (!s->call_nomem) {
                for (uint32_t i = 0; i < r.args[0].v.ints.n; i++)
                    rgpu_st64(ids + 8 * (size_t)i, call_map(s, (uint64_t)rgpu_arg_int_at(&r.args[0], i)));
                r.args[0].v.ints.p = ids;
            }
        }
        if (rgpu_op_is_random(r.op)) {   /* the capture's Philox offsets, rebased to this call's */
            rgpu_arg *sa = &r.args[r.n_args - 2], *oa = &r.args[r.n_args - 1];
            sa->v.i = (int64_t)seed;
            oa->v.i = (int64_t)((uint64_t)oa->v.i - e->info.base_offset + offset);
        }
        if (s->call_nomem) {
            op_fail(s, c->idx, r.op, RGPU_ERR_NOMEM, "mapping the template's ids");
            break;
        }
        run_record(s, &r, c->idx, poisoned && r.op != RGPU_OP_FREE, poison_op);
    }
    call_free_locals(s);
    s->in_call = false;
    s->call_tpl = NULL;
    s->call_bind = NULL;
    free(ids);
    free(bind);
    return RGPU_OK;
}

rgpu_status rgpu_session_call_outputs(rgpu_session *s, const rgpu_record *r, uint64_t *tids, size_t max, size_t *n) {
    *n = 0;
    if (r->op != RGPU_OP_CALL) return RGPU_ERR_BAD_ARG;
    tplent *e;
    uint64_t *bind;
    char why[200];
    rgpu_status st = call_prepare(s, r, &e, &bind, why, sizeof why);
    if (st) return st;
    u64map seen = { 0 };
    size_t off = 0;
    for (uint32_t k = 0; k < e->info.n_records && !st; k++) {
        rgpu_record rr;
        size_t used;
        rgpu_record_decode(e->info.records + off, e->info.records_len - off, &rr, &used);
        off += used;
        if (rr.op == RGPU_OP_EMPTY) continue;   /* undefined bytes; a later write names it again */
        for (int i = 0; i < rr.n_out; i++) {
            void *v = u64map_get(&e->bind, rr.out[i].tid);
            if (!v) continue;
            uint64_t tid = bind[(uintptr_t)v - 1];
            if (u64map_get(&seen, tid)) continue;
            if (!u64map_put(&seen, tid, (void *)1)) { st = RGPU_ERR_NOMEM; break; }
            if (*n < max) tids[*n] = tid;
            (*n)++;
        }
    }
    u64map_free(&seen);
    free(bind);
    return st;
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
            rgpu_status ds = define_tensor(&c, d, &outs[i]);
            if (ds && !st) st = ds;
        }
    }
    if (!st && poisoned) {
        /* a poisoned input makes poisoned outputs; its error was reported already */
        for (int i = 0; i < r->n_out; i++) if (outs[i]) { outs[i]->poisoned = true; outs[i]->poison_op = poison_op; }
        if (rgpu_op_table[r->op].flags & RGPU_OPF_WAIT) {
            snprintf(c.why, sizeof c.why, "input poisoned by failed op %llu", (unsigned long long)poison_op);
            op_fail(s, idx, r->op, RGPU_ERR_POISONED, c.why);
        }
        return;
    }
    if (!st) {
        for (int i = 0; i < r->n_out; i++) if (outs[i] && (outs[i]->poisoned || !outs[i]->st)) { st = RGPU_ERR_POISONED; break; }
    }
    if (!st) st = exec_record(&c, outs, ins);
    if (st) {
        op_fail(s, idx, r->op, st, c.why);
        for (int i = 0; i < r->n_out; i++) if (outs[i]) { outs[i]->poisoned = true; outs[i]->poison_op = idx; }
    }
}

rgpu_status rgpu_session_run_record(rgpu_session *s, const rgpu_record *r, uint64_t idx) {
    if (idx != s->applied) return RGPU_ERR_SEQUENCE;
    run_record(s, r, idx, false, 0);
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

rgpu_status rgpu_session_read_tensor(rgpu_session *s, uint64_t tid, uint8_t **data, size_t *n) {
    *data = NULL; *n = 0;
    const tensor *t = u64map_get(&s->tensors, tid);
    if (!t) return RGPU_ERR_UNKNOWN_TENSOR;
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

/* Fetch the blobs the UPLOAD records of raw[0..n) name; with templates,
 * also the templates CALL records name and the blobs inside them. */
static rgpu_status prefetch_records(rgpu_session *s, const uint8_t *raw, size_t n, bool templates) {
    size_t off = 0;
    rgpu_record r;
    while (off < n) {
        size_t used;
        rgpu_status st = rgpu_record_decode(raw + off, n - off, &r, &used);
        if (st) return st;
        off += used;
        if (r.n_args < 1 || r.args[0].kind != RGPU_ARG_HASH || !s->fetch) continue;
        if (r.op == RGPU_OP_UPLOAD) {
            if (blob_find(s, &r.args[0].v.h)) continue;
            uint8_t *data;
            size_t dn;
            if ((st = s->fetch(s->fetch_ud, &r.args[0].v.h, &data, &dn))) return st;
            if ((st = rgpu_session_put_blob(s, &r.args[0].v.h, data, dn))) return st;
        } else if (r.op == RGPU_OP_CALL && templates) {
            tplent *e;
            if ((st = tpl_get(s, &r.args[0].v.h, &e))) return st;
            if (!e->status && (st = prefetch_records(s, e->info.records, e->info.records_len, false))) return st;
        }
    }
    return RGPU_OK;
}

rgpu_status rgpu_session_prefetch(rgpu_session *s, const uint8_t *raw, size_t n) {
    return prefetch_records(s, raw, n, true);
}

rgpu_status rgpu_session_run_chunk(rgpu_session *s, const uint8_t *raw, size_t n,
                                   uint64_t first_op, uint32_t count) {
    if (first_op != s->applied) return RGPU_ERR_SEQUENCE;
    /* Decode everything first: a malformed chunk is rejected whole, so no
     * half-applied chunk exists and the index stays consistent. */
    size_t off = 0;
    uint32_t k = 0;
    rgpu_record r;
    while (off < n) {
        size_t used;
        rgpu_status st = rgpu_record_decode(raw + off, n - off, &r, &used);
        if (st) return st;
        off += used;
        k++;
    }
    if (k != count) return RGPU_ERR_BAD_MESSAGE;
    off = 0;
    for (uint32_t i = 0; i < count; i++) {
        size_t used;
        rgpu_record_decode(raw + off, n - off, &r, &used);
        off += used;
        run_record(s, &r, first_op + i, false, 0);
        s->applied++;
    }
    return RGPU_OK;
}
