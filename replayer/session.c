/* session.c — the record executor: resolve ids, validate, run on a backend.
 *
 * Trust boundary: records come from the network or a file. Every id is
 * looked up, every new tensor is bounds-checked against its storage, every
 * size is overflow-checked, before any kernel sees a pointer. Failures of a
 * single op poison its outputs and are reported at the next wait; they never
 * stop the session. */
#include "session.h"
#include "u64map.h"
#include "op/op_args.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct storage {
    uint64_t sid;
    void *data;
    uint64_t nbytes;
    uint32_t refs;            /* tensors over this storage */
    bool borrowed;            /* data is a graph instance's static buffer: not freed with it */
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
    uint64_t gen;             /* the chunk it was fetched for: not evicted before that chunk ran */
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
    int8_t graphable;         /* 0: not looked at yet; 1: may be graphed; -1: never */
    struct ginst *inst;       /* its graph instances (one per bindings layout) */
    uint32_t n_inst;
} tplent;

struct gcall;

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
    u64map refused;           /* blob key -> 1: blobs refused for a memory limit (their UPLOADs fail) */
    char refused_why[200];    /* the last refusal, for those UPLOADs' errors */
    blobent *blob_head, *blob_tail;
    uint64_t blob_bytes, blob_gen;
    /* templates, and the state of the CALL being executed */
    u64map tpls;
    uint64_t tpl_bytes, tpl_clock;
    u64map locals;            /* template-local id -> server id, for one call */
    uint64_t local_next;
    bool in_call, call_nomem;
    uint32_t call_rec;        /* position of the template record running */
    const tplent *call_tpl;
    const uint64_t *call_bind;
    uint32_t call_fail;       /* records of this call that failed */
    int rec_out;              /* output position of the tdef being defined */
    struct gcall *g;          /* the graphed CALL running (logging or replaying), or NULL */
    rgpu_graph_stats gst;
    uint64_t applied;
    uint64_t mem, peak;       /* storage bytes (torch.rgpu.memory_allocated) */
    uint64_t held, held_host; /* everything held (max_total_bytes), and of it host memory (the pool) */
    bool (*cancel)(void *ud); /* asked between records: true stops the chunk (rgpu_session_set_cancel) */
    void *cancel_ud;
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
    s->lim.graphs = lim && lim->graphs;
    s->lim.pool = lim ? lim->pool : NULL;
    return s;
}

/* ---------------------------------------------------------------------------
 * Memory accounting: every byte held is taken before it is allocated */
bool rgpu_mem_pool_take(rgpu_mem_pool *p, uint64_t n) {
    if (!p) return true;
    uint64_t cur = __atomic_load_n(&p->used, __ATOMIC_RELAXED), next;
    do {
        if (__builtin_add_overflow(cur, n, &next) || (p->limit && next > p->limit)) return false;
    } while (!__atomic_compare_exchange_n(&p->used, &cur, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    uint64_t pk = __atomic_load_n(&p->peak, __ATOMIC_RELAXED);
    while (next > pk && !__atomic_compare_exchange_n(&p->peak, &pk, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    return true;
}
void rgpu_mem_pool_give(rgpu_mem_pool *p, uint64_t n) { if (p) __atomic_sub_fetch(&p->used, n, __ATOMIC_RELAXED); }
uint64_t rgpu_mem_pool_used(const rgpu_mem_pool *p) { return p ? __atomic_load_n(&p->used, __ATOMIC_RELAXED) : 0; }

/* Take n bytes of `what` for the session (host: from the pool too), or say
 * which limit it would pass. */
static rgpu_status mem_take(rgpu_session *s, uint64_t n, bool host, const char *what, char *why, size_t whylen) {
    uint64_t lim = s->lim.max_total_bytes;
    if (lim && (n > lim || s->held > lim - n)) {
        if (why) snprintf(why, whylen, "%s of %llu bytes would pass the session limit of %llu bytes "
                          "(--max-session-bytes; %llu held)", what, (unsigned long long)n,
                          (unsigned long long)lim, (unsigned long long)s->held);
        return RGPU_ERR_LIMIT;
    }
    if (host && !rgpu_mem_pool_take(s->lim.pool, n)) {
        if (why) snprintf(why, whylen, "%s of %llu bytes would pass the server's memory limit of %llu bytes "
                          "(--max-memory; %llu in use by all sessions)", what, (unsigned long long)n,
                          (unsigned long long)s->lim.pool->limit, (unsigned long long)rgpu_mem_pool_used(s->lim.pool));
        return RGPU_ERR_LIMIT;
    }
    s->held += n;
    if (host) s->held_host += n;
    return RGPU_OK;
}

static void mem_give(rgpu_session *s, uint64_t n, bool host) {
    s->held -= n;
    if (host) { s->held_host -= n; rgpu_mem_pool_give(s->lim.pool, n); }
}

/* Storages of a host backend are host memory. */
static bool storage_host(const rgpu_session *s) { return !s->b->device_memory; }

uint64_t rgpu_session_held(const rgpu_session *s) { return s->held; }
uint64_t rgpu_session_held_host(const rgpu_session *s) { return s->held_host; }

uint64_t rgpu_session_room(const rgpu_session *s, char *why, size_t whylen) {
    uint64_t room = UINT64_MAX;
    if (why && whylen) why[0] = 0;
    if (s->lim.max_total_bytes) {
        room = s->held < s->lim.max_total_bytes ? s->lim.max_total_bytes - s->held : 0;
        if (why) snprintf(why, whylen, "the session limit of %llu bytes (--max-session-bytes; %llu held)",
                          (unsigned long long)s->lim.max_total_bytes, (unsigned long long)s->held);
    }
    const rgpu_mem_pool *p = s->lim.pool;
    if (p && p->limit) {
        uint64_t used = rgpu_mem_pool_used(p), r = used < p->limit ? p->limit - used : 0;
        if (r < room) {
            room = r;
            if (why) snprintf(why, whylen, "the server's memory limit of %llu bytes (--max-memory; %llu in use)",
                              (unsigned long long)p->limit, (unsigned long long)used);
        }
    }
    return room;
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
    if (!st->borrowed) s->b->free(s->b, st->data);
    s->mem -= st->nbytes;
    if (!st->borrowed) mem_give(s, st->nbytes, storage_host(s));
    free(st);
}

static void tensor_drop(rgpu_session *s, tensor *t) {
    storage_unref(s, t->st);
    free(t);
}

static void inst_free(rgpu_session *s, tplent *e, struct ginst *gi);
static void tpl_free(rgpu_session *s, tplent *e);

/* A template entry leaving the cache (its bytes were taken in tpl_add). */
static void tpl_drop(rgpu_session *s, tplent *e) {
    s->tpl_bytes -= e->bytes;
    mem_give(s, e->bytes, true);
    tpl_free(s, e);
}

static void tpl_free(rgpu_session *s, tplent *e) {
    if (!e) return;
    while (e->inst) inst_free(s, e, e->inst);
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
    u64map_free(&s->refused);
    for (size_t i = 0; i < s->results.cap; i++)
        if (s->results.keys[i]) { result *r = s->results.vals[i]; free(r->data); free(r); }   /* pool: below */
    u64map_free(&s->results);
    for (size_t i = 0; i < s->tpls.cap; i++)
        if (s->tpls.keys[i]) tpl_free(s, s->tpls.vals[i]);
    rgpu_mem_pool_give(s->lim.pool, s->held_host);   /* blobs, results, templates: all it still held */
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

/* Drop the oldest blobs until those kept fit in `keep` bytes, sparing the
 * ones fetched for the chunk about to run (gen == blob_gen) unless all. */
static void blob_evict_to(rgpu_session *s, uint64_t keep, bool all) {
    blobent **pp = &s->blob_head, *prev = NULL;
    while (s->blob_bytes > keep && *pp) {
        blobent *e = *pp;
        if (!all && e->gen == s->blob_gen) { prev = e; pp = &e->next; continue; }
        *pp = e->next;
        if (s->blob_tail == e) s->blob_tail = prev;
        if (u64map_get(&s->blobs, blob_key(&e->h)) == e) u64map_del(&s->blobs, blob_key(&e->h));
        s->blob_bytes -= e->n;
        mem_give(s, e->n, true);
        free(e->data);
        free(e);
    }
}

/* After a chunk ran: what its uploads consumed may go, past the dedupe cache. */
static void blob_evict(rgpu_session *s) { blob_evict_to(s, s->lim.max_blob_cache, true); }

rgpu_status rgpu_session_put_blob(rgpu_session *s, const rgpu_hash *h, uint8_t *data, size_t n) {
    rgpu_hash got = rgpu_hash_bytes(data, n);
    if (!rgpu_hash_eq(&got, h)) { free(data); return RGPU_ERR_BAD_CHECKSUM; }
    if (blob_find(s, h)) { free(data); return RGPU_OK; }
    /* room first: older blobs beyond the cache go before this one is counted */
    blob_evict_to(s, n < s->lim.max_blob_cache ? s->lim.max_blob_cache - n : 0, false);
    rgpu_status st = mem_take(s, n, true, "an uploaded blob", NULL, 0);
    if (st) { free(data); return st; }
    blobent *e = calloc(1, sizeof *e);
    if (!e) { mem_give(s, n, true); free(data); return RGPU_ERR_NOMEM; }
    e->h = *h; e->data = data; e->n = n; e->gen = s->blob_gen;
    blobent *old = u64map_get(&s->blobs, blob_key(h));
    (void)old;  /* a colliding 64-bit prefix: the newer blob wins the slot */
    if (!u64map_put(&s->blobs, blob_key(h), e)) { mem_give(s, n, true); free(data); free(e); return RGPU_ERR_NOMEM; }
    if (s->blob_tail) s->blob_tail->next = e; else s->blob_head = e;
    s->blob_tail = e;
    s->blob_bytes += n;
    return RGPU_OK;
}

bool rgpu_session_has_blob(rgpu_session *s, const rgpu_hash *h) { return blob_find(s, h) != NULL; }

/* Fetch blob h through the fetch callback, bounded by the session's room: a
 * blob over it is refused before it is inflated (RGPU_ERR_LIMIT, why names
 * the limit). The bytes' hash is checked. */
static rgpu_status fetch_checked(rgpu_session *s, const rgpu_hash *h, uint8_t **data, size_t *n, char *why, size_t whylen) {
    *data = NULL; *n = 0;
    if (!s->fetch) return RGPU_ERR_MISSING_BLOB;
    char lim[160];
    uint64_t room = rgpu_session_room(s, lim, sizeof lim);
    rgpu_status st = s->fetch(s->fetch_ud, h, room, data, n);
    if (st == RGPU_ERR_LIMIT || (st == RGPU_ERR_TOO_LARGE && *n > room)) {
        char hex[33];
        rgpu_hash_hex(h, hex);
        if (why) snprintf(why, whylen, "blob %.12s of %zu bytes would pass %s", hex, *n, lim);
        return RGPU_ERR_LIMIT;
    }
    if (st) return st;
    rgpu_hash got = rgpu_hash_bytes(*data, *n);
    if (!rgpu_hash_eq(&got, h)) { free(*data); *data = NULL; return RGPU_ERR_BAD_CHECKSUM; }
    return RGPU_OK;
}

/* The blob an UPLOAD names: kept, or fetched and kept. A blob refused for a
 * memory limit is remembered, so its UPLOAD fails at once with the reason
 * instead of asking the client for it again. */
static rgpu_status blob_get(rgpu_session *s, const rgpu_hash *h, blobent **out, char *why, size_t whylen) {
    if ((*out = blob_find(s, h))) {   /* pushed, or kept: now it belongs to this chunk too */
        (*out)->gen = s->blob_gen;
        return RGPU_OK;
    }
    if (u64map_get(&s->refused, blob_key(h))) {
        if (why) snprintf(why, whylen, "%s", s->refused_why);
        return RGPU_ERR_LIMIT;
    }
    uint8_t *data;
    size_t n;
    rgpu_status st = fetch_checked(s, h, &data, &n, s->refused_why, sizeof s->refused_why);
    if (!st) {
        st = rgpu_session_put_blob(s, h, data, n);
        if (st == RGPU_ERR_LIMIT)
            rgpu_session_room(s, s->refused_why, sizeof s->refused_why);
    }
    if (st == RGPU_ERR_LIMIT) {
        u64map_put(&s->refused, blob_key(h), (void *)1);
        if (why) snprintf(why, whylen, "%s", s->refused_why);
        return st;
    }
    if (st) return st;
    *out = blob_find(s, h);
    return *out ? RGPU_OK : RGPU_ERR_MISSING_BLOB;
}

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
        tpl_drop(s, old);
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
                tpl_free(s, e);
                return RGPU_ERR_NOMEM;
            }
        e->bytes += n + e->bind.cap * (sizeof(uint64_t) + sizeof(void *));
    }
    rgpu_status st = mem_take(s, e->bytes, true, "a template", NULL, 0);
    if (st) { tpl_free(s, e); return st; }
    tplent *old = u64map_get(&s->tpls, blob_key(h));   /* a colliding 64-bit prefix: replaced */
    if (!u64map_put(&s->tpls, blob_key(h), e)) { mem_give(s, e->bytes, true); tpl_free(s, e); return RGPU_ERR_NOMEM; }
    if (old) tpl_drop(s, old);
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
        } else if ((st = fetch_checked(s, h, &data, &n, NULL, 0))) {
            return st;
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
    if (s->in_call) s->call_fail++;
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
        mem_give(s, r->n, true);   /* the caller owns the bytes now */
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
        snprintf(why, whylen, "a tensor with %lld elements cannot be converted to a scalar", (long long)numel);
        return RGPU_ERR_SHAPE;
    }
    size_t es = rgpu_dtype_size(t->dtype), n = (size_t)numel * es;
    rgpu_status st = mem_take(s, n, true, "a download", why, whylen);
    if (st) return st;
    uint8_t *host = malloc(n ? n : 1);
    if (!host) { mem_give(s, n, true); return RGPU_ERR_NOMEM; }
    rgpu_view v;
    view_of(t, &v);
    if (tensor_contiguous(t)) {
        st = s->b->download(s->b, host, v.data, n);
    } else {
        bool th = storage_host(s);
        if ((st = mem_take(s, n, th, "a download's gather buffer", why, whylen))) {
            free(host); mem_give(s, n, true); return st;
        }
        void *tmp = s->b->alloc(s->b, n);
        if (!tmp) { mem_give(s, n, th); free(host); mem_give(s, n, true); return RGPU_ERR_NOMEM; }
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
        mem_give(s, n, th);
    }
    if (st) { free(host); mem_give(s, n, true); return st; }
    *out = host; *outn = n;
    return RGPU_OK;
}

/* Keep the result bytes of WAIT op idx until the client's WAIT takes them.
 * data's n bytes are already taken from the session's memory (download_tensor,
 * take_small); they are given back when the result is taken or dropped. */
static void result_drop(rgpu_session *s, result *r) {
    mem_give(s, r->n, true);
    free(r->data);
    free(r);
}

static rgpu_status store_result(rgpu_session *s, uint64_t idx, uint8_t *data, size_t n) {
    result *res = calloc(1, sizeof *res);
    if (!res) { free(data); mem_give(s, n, true); return RGPU_ERR_NOMEM; }
    res->data = data; res->n = n;
    result *old = u64map_del(&s->results, idx + 1);
    if (old) result_drop(s, old);
    if (!u64map_put(&s->results, idx + 1, res)) { result_drop(s, res); return RGPU_ERR_NOMEM; }
    return RGPU_OK;
}

/* A small result (counts, memory stats): n bytes taken, then allocated. */
static uint8_t *take_small(rgpu_session *s, size_t n, rgpu_status *st, char *why, size_t whylen) {
    if ((*st = mem_take(s, n, true, "a result", why, whylen))) return NULL;
    uint8_t *p = malloc(n);
    if (!p) { mem_give(s, n, true); *st = RGPU_ERR_NOMEM; }
    return p;
}

/* ---------------------------------------------------------------------------
 * One record */
typedef struct ctx {
    rgpu_session *s;
    const rgpu_record *r;
    uint64_t idx;
    char why[200];
} ctx;

static void *graph_storage_data(rgpu_session *s, storage *sg, int *slot);
static void graph_storage_made(rgpu_session *s, storage *sg, int slot);
static void graph_log_exec(rgpu_session *s, const rgpu_exec *e, tensor **outs, const tensor **ins);

/* Why rgpu_tdef_check_bounds refused d (st), into c->why. */
static rgpu_status tdef_refused(ctx *c, const rgpu_tdef *d, rgpu_status st) {
    if (st == RGPU_ERR_TOO_LARGE)
        snprintf(c->why, sizeof c->why, "tensor %llu: %lld elements of %zu bytes are over the limit of %llu bytes "
                 "for any tensor, views included", (unsigned long long)d->tid, (long long)rgpu_tdef_numel(d),
                 rgpu_dtype_size(d->dtype), (unsigned long long)RGPU_MAX_TENSOR_BYTES);
    return st;
}

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
        if ((st = rgpu_tdef_check_bounds(d, d->nbytes))) { t->poisoned = true; return tdef_refused(c, d, st); }
        sg = calloc(1, sizeof *sg);
        if (!sg) { t->poisoned = true; return RGPU_ERR_NOMEM; }
        sg->sid = d->sid; sg->nbytes = d->nbytes;
        int slot = -1;   /* a graph replay's static buffer for it, or its output slot */
        if (s->g) sg->data = graph_storage_data(s, sg, &slot);
        if (!sg->data && (st = mem_take(s, d->nbytes, storage_host(s), "a storage", c->why, sizeof c->why))) {
            free(sg);
            t->poisoned = true;
            return st;
        }
        if (!sg->data && !(sg->data = s->b->alloc(s->b, (size_t)d->nbytes))) {
            mem_give(s, d->nbytes, storage_host(s));
            free(sg);
            snprintf(c->why, sizeof c->why, "cannot allocate %llu bytes on %s", (unsigned long long)d->nbytes, s->b->name);
            t->poisoned = true;
            return RGPU_ERR_NOMEM;
        }
        if (!u64map_put(&s->storages, sg->sid, sg)) {
            if (!sg->borrowed) { s->b->free(s->b, sg->data); mem_give(s, d->nbytes, storage_host(s)); }
            free(sg);
            t->poisoned = true;
            return RGPU_ERR_NOMEM;
        }
        s->mem += sg->nbytes;
        if (s->mem > s->peak) s->peak = s->mem;
        if (s->g) graph_storage_made(s, sg, slot);
    } else {
        sg = u64map_get(&s->storages, d->sid);
        if (!sg) {
            snprintf(c->why, sizeof c->why, "storage %llu", (unsigned long long)d->sid);
            t->poisoned = true;
            return RGPU_ERR_UNKNOWN_STORAGE;
        }
        if ((st = rgpu_tdef_check_bounds(d, sg->nbytes))) {
            t->poisoned = true;
            if (st == RGPU_ERR_TOO_LARGE) return tdef_refused(c, d, st);
            snprintf(c->why, sizeof c->why, "tensor %llu outside storage %llu of %llu bytes", (unsigned long long)d->tid,
                     (unsigned long long)d->sid, (unsigned long long)sg->nbytes);
            return st;
        }
    }
    sg->refs++;
    t->st = sg;
    return RGPU_OK;
}

static void run_record(rgpu_session *s, const rgpu_record *r, uint64_t idx, bool force_poison, uint64_t poison_op);
static rgpu_status exec_call(ctx *c);
static bool graph_replaying(const rgpu_session *s);

static rgpu_status exec_record(ctx *c, tensor **outs, const tensor **ins) {
    rgpu_session *s = c->s;
    const rgpu_record *r = c->r;
    rgpu_status st;
    /* arity and scalar args against ops.def: once here, for every backend */
    if ((st = rgpu_op_args_check(r->op, r->n_in, r->n_out, r->n_args, r->args, c->why, sizeof c->why))) return st;
    switch (r->op) {   /* the RGPU_OPF_SESSION ops */
    case RGPU_OP_NOP: case RGPU_OP_EMPTY: case RGPU_OP_ALIAS:
        if (r->op == RGPU_OP_ALIAS && outs[0]->st != ins[0]->st) {
            snprintf(c->why, sizeof c->why, "alias over a different storage than its base");
            return RGPU_ERR_BAD_ARG;
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
            tensor_drop(s, t);
        }
        return first;
    }
    case RGPU_OP_UPLOAD: {
        uint64_t n = (uint64_t)r->args[1].v.i;
        if (n != outs[0]->st->nbytes) {
            snprintf(c->why, sizeof c->why, "upload of %llu bytes into a storage of %llu", (unsigned long long)n,
                     (unsigned long long)outs[0]->st->nbytes);
            return RGPU_ERR_BAD_ARG;
        }
        blobent *e;
        if ((st = blob_get(s, &r->args[0].v.h, &e, c->why, sizeof c->why))) return st;
        if (e->n != n) { snprintf(c->why, sizeof c->why, "blob has %zu bytes, record says %llu", e->n, (unsigned long long)n); return RGPU_ERR_BAD_ARG; }
        st = s->b->upload(s->b, outs[0]->st->data, e->data, e->n);
        blob_evict_to(s, s->lim.max_blob_cache, false);
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
        uint8_t *data = take_small(s, 16, &st, c->why, sizeof c->why);
        if (!data) return st;
        rgpu_st64(data, s->mem);
        rgpu_st64(data + 8, s->peak);
        if (r->args[0].v.i) s->peak = s->mem;
        return store_result(s, c->idx, data, 16);
    }
    default:
        if (rgpu_op_table[r->op].flags & RGPU_OPF_SESSION) {
            snprintf(c->why, sizeof c->why, "the session has no handler for %s", rgpu_op_name(r->op));
            return RGPU_ERR_UNSUPPORTED;
        }
        break;
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
        uint8_t *data = take_small(s, 8, &st, c->why, sizeof c->why);
        if (!data) return st;
        rgpu_st64(data, (uint64_t)host);
        return store_result(s, c->idx, data, 8);
    }
    if (s->g && graph_replaying(s)) return RGPU_OK;   /* the call's graph computes it */
    rgpu_status st2 = s->b->exec(s->b, &e, c->why, sizeof c->why);
    if (!st2 && s->g) graph_log_exec(s, &e, outs, ins);
    return st2;
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

/* Run template e's records as op c->idx with bindings bind, record by
 * record (with s->g set: logged for a capture, or replayed as a graph, whose
 * hooks are in define_tensor and exec_record). A failure of one template
 * record is reported as that record's (op_fail names the CALL, the position
 * and the op) and poisons what depends on it; the call goes on, like a
 * chunk after a failing op. The call's locals are freed at the end. */
static void call_records(ctx *c, const tplent *e, const uint64_t *bind, uint64_t seed, uint64_t offset,
                         bool poisoned, uint64_t poison_op) {
    rgpu_session *s = c->s;
    uint8_t *ids = NULL;                 /* a FREE record's remapped ids */
    size_t ids_cap = 0;
    s->in_call = true;
    s->call_fail = 0;
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
}

static bool graphs_on(const rgpu_session *s) {
    const rgpu_backend *b = s->b;
    return s->lim.graphs && b->graph_begin && b->graph_end && b->graph_launch && b->graph_destroy;
}
static void call_graphed(ctx *c, tplent *e, const uint64_t *bind, uint64_t seed, uint64_t offset);

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
    if (!poisoned && graphs_on(s)) call_graphed(c, e, bind, seed, offset);
    else call_records(c, e, bind, seed, offset, poisoned, poison_op);
    free(bind);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Graphs: the later calls of a template replayed as one captured graph
 *
 * Per template and bindings layout (call_layout: what each binding names,
 * with shapes and aliasing) a graph instance goes through three states:
 *   SEEN   its first call ran record by record; the bound storages' device
 *          pointers were noted. The next call runs record by record too, with
 *          its execs logged, and the log is then captured (graph_begin, the
 *          execs over the instance's static buffers, graph_end): capture on
 *          the second call, so that inputs whose pointer did not change
 *          between two calls (parameters, optimizer state) are read in place
 *          (direct) and only the others are copied (staged), and a template
 *          called once costs nothing.
 *   READY  a call with every direct input at its captured pointer (and room
 *          under the session's limits) is replayed: staged inputs copied into
 *          their static buffers, the records run for their bookkeeping only
 *          (tensors defined, locals over static buffers, no exec), the graph
 *          launched, staged inputs the template writes copied back, outputs
 *          copied from their static buffers into the call's fresh storages.
 *          A direct input at another pointer becomes staged for good and the
 *          call is logged and captured again (at most GRAPH_MAX_CAPTURES).
 *   OFF    never graphed (why in the stats): a record failed while logging,
 *          the backend refused the capture (UNSUPPORTED: a kernel needs the
 *          host), or transient refusals (NOMEM) GRAPH_MAX_TRANSIENT times.
 * The capture replays the log after the logged call has finished, so a
 * refusal never leaves anything half done: that call's results came from
 * the record-by-record path already. Templates with random ops (the CALL's
 * seed and offset change their args every call), UPLOAD records, or a FREE
 * of a bound id are never graphed. A graph runs the same kernels with the
 * same arguments over the same byte offsets as the records would: results
 * are bitwise those of the record-by-record path. */

enum { GRAPH_MAX_INSTANCES = 4, GRAPH_MAX_CAPTURES = 8, GRAPH_MAX_TRANSIENT = 3 };
enum { GI_SEEN, GI_READY, GI_OFF };
enum { GS_INPUT, GS_LOCAL, GS_OUTPUT };

typedef struct gslot {
    uint64_t nbytes;
    void *buf;                /* the instance's static buffer; NULL for a direct input */
    void *ptr;                /* an input: its session pointer at capture (what a direct one is read at) */
    uint64_t sid;             /* created: its storage id in the logged call */
    const storage *st;        /* created, while logging: its storage */
    uint64_t where;           /* created: (template record << 4 | output position) + 1 */
    uint8_t kind;
    bool staged, written;     /* inputs */
} gslot;

typedef struct gview { int32_t slot; uint64_t off; rgpu_view v; } gview;   /* slot -1: absent */

typedef struct gexec {
    int op, n_in, n_out, n_args;
    rgpu_arg args[RGPU_MAX_ARGS];   /* INTS point into the template, alive for the call */
    gview v[];                      /* n_in inputs, then n_out outputs */
} gexec;

typedef struct ginst {
    struct ginst *next;
    uint64_t *key;
    size_t key_n;
    int state;
    uint32_t n_in, n_slots;   /* slots: the n_in bound storages, then those the call creates */
    gslot *slots;
    void **seen;              /* n_in: input pointers of the last call run record by record */
    bool *force_staged;       /* n_in: inputs once found at another pointer */
    u64map slot_of;           /* created slot's where -> slot + 1 */
    void *graph;
    uint32_t calls, captures, transient;
    uint64_t last_use, bytes, created_bytes;
} ginst;

typedef struct gcall {
    bool replay;
    ginst *gi;
    storage **in;             /* the bound storages (a reference held on each) */
    uint32_t n_in;
    /* logging */
    gslot *slots;             /* inputs, then created storages */
    uint32_t n_slots, cap_slots;
    u64map slot_of_st;        /* storage pointer -> slot + 1 */
    gexec **ex;
    size_t n_ex, cap_ex;
    bool bad;
    char why[200];
    /* replaying: per slot, the storage the call defined for it */
    storage **made;
    uint64_t *made_sid;
} gcall;

static bool graph_replaying(const rgpu_session *s) { return s->g && s->g->replay; }

static void graph_refused(rgpu_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void graph_refused(rgpu_session *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->gst.last_refusal, sizeof s->gst.last_refusal, fmt, ap);
    va_end(ap);
    s->gst.refusals++;
}

void rgpu_session_graph_stats(const rgpu_session *s, rgpu_graph_stats *st) { *st = s->gst; }

/* Templates that are never graphed, found once per template. */
static bool tpl_graphable(rgpu_session *s, tplent *e) {
    if (e->graphable) return e->graphable > 0;
    e->graphable = 1;
    const char *why = NULL;
    size_t off = 0;
    for (uint32_t k = 0; k < e->info.n_records && !why; k++) {
        rgpu_record r;
        size_t used;
        rgpu_record_decode(e->info.records + off, e->info.records_len - off, &r, &used);   /* checked at parse */
        off += used;
        if (rgpu_op_is_random(r.op)) why = "it has random ops (their seed and offset change with every call)";
        else if (r.op == RGPU_OP_UPLOAD) why = "it has UPLOAD records";
        else if (r.op == RGPU_OP_FREE && r.n_args == 1 && r.args[0].kind == RGPU_ARG_INTS)
            for (uint32_t i = 0; i < r.args[0].v.ints.n && !why; i++)
                if (u64map_get(&e->bind, (uint64_t)rgpu_arg_int_at(&r.args[0], i))) why = "it frees a bound id";
    }
    if (why) {
        char hex[33];
        rgpu_hash_hex(&e->h, hex);
        graph_refused(s, "template %.12s is not graphed: %s", hex, why);
        e->graphable = -1;
    }
    return e->graphable > 0;
}

/* ---- the bindings layout */
typedef struct u64vec { uint64_t *p; size_t n, cap; bool nomem; } u64vec;
static void vpush(u64vec *v, uint64_t x) {
    if (v->nomem) return;
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 64;
        uint64_t *p = realloc(v->p, cap * sizeof *p);
        if (!p) { v->nomem = true; return; }
        v->p = p; v->cap = cap;
    }
    v->p[v->n++] = x;
}

static void inputs_release(rgpu_session *s, storage **in, uint32_t n) {
    if (!in) return;
    for (uint32_t j = 0; j < n; j++) storage_unref(s, in[j]);
    free(in);
}

/* For each binding, what the session holds under its id: a tensor (its
 * storage's position among the call's distinct bound storages, dtype,
 * shape, strides, offset), a storage (its position), or nothing; each
 * storage's size at its first position. Equal layouts mean the same views of
 * the same number of storages with the same aliasing: what a graph bakes in.
 * The distinct storages go to *in, each with a reference held. */
static rgpu_status call_layout(rgpu_session *s, const tplent *e, const uint64_t *bind, uint64_t **key, size_t *key_n,
                               storage ***in, uint32_t *n_in) {
    u64vec k = { 0 };
    u64map pos = { 0 };
    storage **st = NULL;
    uint32_t n = 0, cap = 0;
    bool nomem = false;
    for (uint32_t i = 0; i < e->info.n_bind && !nomem; i++) {
        const tensor *t = u64map_get(&s->tensors, bind[i]);
        storage *sg = u64map_get(&s->storages, bind[i]);
        vpush(&k, (t ? 1u : 0u) | (sg ? 2u : 0u));
        storage *both[2] = { t ? t->st : NULL, sg };
        if (t && !t->st) { nomem = true; break; }   /* poisoned at definition: not graphed (caller checks first) */
        for (int w = 0; w < 2 && !nomem; w++) {
            storage *x = both[w];
            if (!x) continue;
            uintptr_t p = (uintptr_t)u64map_get(&pos, (uint64_t)(uintptr_t)x);
            if (!p) {
                if (n == cap) {
                    uint32_t nc = cap ? 2 * cap : 16;
                    storage **q = realloc(st, nc * sizeof *q);
                    if (!q) { nomem = true; break; }
                    st = q; cap = nc;
                }
                st[n++] = x;
                x->refs++;
                p = n;
                if (!u64map_put(&pos, (uint64_t)(uintptr_t)x, (void *)p)) { nomem = true; break; }
                vpush(&k, x->nbytes);
            }
            vpush(&k, p);
        }
        if (t && !nomem) {
            vpush(&k, ((uint64_t)t->dtype << 8) | t->ndim);
            vpush(&k, (uint64_t)t->offset);
            for (int d = 0; d < t->ndim; d++) { vpush(&k, (uint64_t)t->sizes[d]); vpush(&k, (uint64_t)t->strides[d]); }
        }
    }
    u64map_free(&pos);
    if (nomem || k.nomem) {
        inputs_release(s, st, n);
        free(k.p);
        return RGPU_ERR_NOMEM;
    }
    *key = k.p; *key_n = k.n;
    *in = st; *n_in = n;
    return RGPU_OK;
}

/* ---- instances */
static void inst_release(rgpu_session *s, ginst *gi) {   /* its graph and static buffers */
    if (gi->graph) s->b->graph_destroy(s->b, gi->graph);   /* after its launches: backend.h */
    gi->graph = NULL;
    for (uint32_t k = 0; k < gi->n_slots; k++)
        if (gi->slots[k].buf) s->b->free(s->b, gi->slots[k].buf);
    free(gi->slots);
    gi->slots = NULL;
    gi->n_slots = 0;
    u64map_free(&gi->slot_of);
    s->gst.bytes -= gi->bytes;
    gi->bytes = gi->created_bytes = 0;
}

static void inst_free(rgpu_session *s, tplent *e, ginst *gi) {
    for (ginst **pp = &e->inst; *pp; pp = &(*pp)->next)
        if (*pp == gi) { *pp = gi->next; break; }
    e->n_inst--;
    s->gst.instances--;
    inst_release(s, gi);
    free(gi->key);
    free(gi->seen);
    free(gi->force_staged);
    free(gi);
}

static void inst_off(rgpu_session *s, const tplent *e, ginst *gi, const char *why) {
    char hex[33];
    rgpu_hash_hex(&e->h, hex);
    inst_release(s, gi);
    gi->state = GI_OFF;
    graph_refused(s, "template %.12s is not graphed: %s", hex, why);
}

/* ---- the hooks in define_tensor and exec_record */

/* Replaying: a local storage's data is its static buffer (*slot set too); an
 * output gets fresh memory (NULL: allocate), the graph's result is copied
 * into it after the launch. Logging: nothing to do before allocation. */
static void *graph_storage_data(rgpu_session *s, storage *sg, int *slot) {
    gcall *g = s->g;
    *slot = -1;
    if (!g->replay) return NULL;
    uintptr_t k = (uintptr_t)u64map_get(&g->gi->slot_of, (((uint64_t)s->call_rec << 4) | (uint64_t)s->rec_out) + 1);
    if (!k || g->gi->slots[k - 1].nbytes != sg->nbytes) return NULL;   /* cannot happen: same template, same layout */
    *slot = (int)(k - 1);
    if (g->gi->slots[k - 1].kind != GS_LOCAL) return NULL;
    sg->borrowed = true;
    return g->gi->slots[k - 1].buf;
}

static void graph_storage_made(rgpu_session *s, storage *sg, int slot) {
    gcall *g = s->g;
    if (g->replay) {
        if (slot >= 0) { g->made[slot] = sg; g->made_sid[slot] = sg->sid; }
        return;
    }
    if (g->bad) return;
    if (g->n_slots == g->cap_slots) {
        uint32_t cap = g->cap_slots ? 2 * g->cap_slots : 16;
        gslot *p = realloc(g->slots, cap * sizeof *p);
        if (!p) { g->bad = true; snprintf(g->why, sizeof g->why, "out of host memory"); return; }
        g->slots = p; g->cap_slots = cap;
    }
    gslot *x = &g->slots[g->n_slots];
    memset(x, 0, sizeof *x);
    x->nbytes = sg->nbytes; x->sid = sg->sid; x->st = sg; x->kind = GS_LOCAL;
    x->where = (((uint64_t)s->call_rec << 4) | (uint64_t)s->rec_out) + 1;
    g->n_slots++;
    if (!u64map_put(&g->slot_of_st, (uint64_t)(uintptr_t)sg, (void *)(uintptr_t)g->n_slots)) {
        g->bad = true;
        snprintf(g->why, sizeof g->why, "out of host memory");
    }
}

static int32_t log_view(gcall *g, const rgpu_view *v, const tensor *t, gview *out) {
    memset(out, 0, sizeof *out);
    out->slot = -1;
    if (!v || !t) return -1;
    uintptr_t k = (uintptr_t)u64map_get(&g->slot_of_st, (uint64_t)(uintptr_t)t->st);
    if (!k) {
        g->bad = true;
        snprintf(g->why, sizeof g->why, "a view of a storage the call neither binds nor creates");
        return -1;
    }
    out->slot = (int32_t)(k - 1);
    out->off = (uint64_t)((const uint8_t *)v->data - (const uint8_t *)t->st->data);
    out->v = *v;
    out->v.data = NULL;
    return out->slot;
}

/* Logging: keep exec e (done already) in terms of slots and byte offsets. */
static void graph_log_exec(rgpu_session *s, const rgpu_exec *e, tensor **outs, const tensor **ins) {
    gcall *g = s->g;
    if (g->bad) return;
    if (g->n_ex == g->cap_ex) {
        size_t cap = g->cap_ex ? 2 * g->cap_ex : 64;
        gexec **p = realloc(g->ex, cap * sizeof *p);
        if (!p) { g->bad = true; snprintf(g->why, sizeof g->why, "out of host memory"); return; }
        g->ex = p; g->cap_ex = cap;
    }
    gexec *x = malloc(sizeof *x + (size_t)(e->n_in + e->n_out) * sizeof(gview));
    if (!x) { g->bad = true; snprintf(g->why, sizeof g->why, "out of host memory"); return; }
    x->op = e->op; x->n_in = e->n_in; x->n_out = e->n_out; x->n_args = e->n_args;
    for (int i = 0; i < e->n_args; i++) x->args[i] = e->args[i];
    for (int i = 0; i < e->n_in; i++) log_view(g, e->in[i], ins[i], &x->v[i]);
    for (int i = 0; i < e->n_out; i++) {
        int32_t k = log_view(g, e->out[i], outs[i], &x->v[e->n_in + i]);
        if (k >= 0 && (uint32_t)k < g->n_in) g->slots[k].written = true;
    }
    g->ex[g->n_ex++] = x;
}

static void gcall_free(gcall *g) {
    for (size_t i = 0; i < g->n_ex; i++) free(g->ex[i]);
    free(g->ex);
    free(g->slots);
    u64map_free(&g->slot_of_st);
    free(g->made);
    free(g->made_sid);
}

/* Contiguous bytes, device to device, as one COPY exec. */
static rgpu_status dev_copy(rgpu_session *s, void *dst, const void *src, uint64_t n, char *why, size_t whylen) {
    if (!n || dst == src) return RGPU_OK;
    rgpu_view vs = { .data = (void *)src, .dtype = RGPU_U8, .ndim = 1 }, vd;
    vs.sizes[0] = (int64_t)n;
    vs.strides[0] = 1;
    vd = vs;
    vd.data = dst;
    rgpu_exec e = { .op = RGPU_OP_COPY, .n_in = 1, .n_out = 1 };
    e.in[0] = &vs;
    e.out[0] = &vd;
    return s->b->exec(s->b, &e, why, whylen);
}

/* ---- capture, after a logged call that went through without a failure */
static void inst_capture(rgpu_session *s, tplent *e, ginst *gi, gcall *g) {
    char why[320] = "";
    if (++gi->captures > GRAPH_MAX_CAPTURES) {
        snprintf(why, sizeof why, "captured %d times: its inputs keep moving", GRAPH_MAX_CAPTURES);
        inst_off(s, e, gi, why);
        return;
    }
    if (!g->n_ex) { inst_off(s, e, gi, "no kernels to capture"); return; }
    inst_release(s, gi);
    gi->slots = g->slots;                /* taken over */
    gi->n_slots = g->n_slots;
    g->slots = NULL;
    g->n_slots = g->cap_slots = 0;
    rgpu_status st = RGPU_OK;
    for (uint32_t k = 0; k < gi->n_slots && !st; k++) {
        gslot *x = &gi->slots[k];
        if (k < gi->n_in) {
            x->ptr = g->in[k]->data;
            x->staged = gi->force_staged[k] || gi->seen[k] != x->ptr;
            gi->force_staged[k] = x->staged;
        } else {
            const storage *sg = u64map_get(&s->storages, x->sid);
            x->kind = sg && sg == x->st ? GS_OUTPUT : GS_LOCAL;   /* alive after the call: an output */
            x->st = NULL;
            gi->created_bytes += x->nbytes;
            if (!u64map_put(&gi->slot_of, x->where, (void *)(uintptr_t)(k + 1))) st = RGPU_ERR_NOMEM;
        }
        if (!st && (k >= gi->n_in || x->staged)) {
            /* before graph_begin: nothing is allocated during a capture */
            if (!(x->buf = s->b->alloc(s->b, (size_t)x->nbytes))) st = RGPU_ERR_NOMEM;
            else { gi->bytes += x->nbytes; s->gst.bytes += x->nbytes; }
        }
    }
    if (st) snprintf(why, sizeof why, "no memory for its static buffers");
    bool begun = false;
    if (!st) {
        st = s->b->graph_begin(s->b, why, sizeof why);
        begun = !st;
    }
    for (size_t i = 0; i < g->n_ex && !st; i++) {
        const gexec *x = g->ex[i];
        rgpu_view v[RGPU_MAX_IN + RGPU_MAX_OUT];
        rgpu_exec ex = { .op = x->op, .n_in = x->n_in, .n_out = x->n_out, .n_args = x->n_args, .args = x->args };
        for (int j = 0; j < x->n_in + x->n_out; j++) {
            const gview *gv = &x->v[j];
            rgpu_view *p = NULL;
            if (gv->slot >= 0) {
                const gslot *sl = &gi->slots[gv->slot];
                v[j] = gv->v;
                v[j].data = (uint8_t *)(sl->buf ? sl->buf : sl->ptr) + gv->off;
                p = &v[j];
            }
            if (j < x->n_in) ex.in[j] = p; else ex.out[j - x->n_in] = p;
        }
        char ewhy[160] = "";
        if ((st = s->b->exec(s->b, &ex, ewhy, sizeof ewhy)))
            snprintf(why, sizeof why, "capturing %s: %s%s%s", rgpu_op_name(x->op), rgpu_status_str(st), *ewhy ? ": " : "", ewhy);
    }
    if (begun) {
        void *graph = NULL;
        char ewhy[160] = "";
        rgpu_status est = s->b->graph_end(s->b, &graph, ewhy, sizeof ewhy);
        if (!st && est) { st = est; snprintf(why, sizeof why, "the backend refused the capture: %s", ewhy); }
        if (st && graph) s->b->graph_destroy(s->b, graph);
        else gi->graph = graph;
    }
    if (!st) {
        gi->state = GI_READY;
        s->gst.captures++;
        return;
    }
    if (st == RGPU_ERR_NOMEM && ++gi->transient < GRAPH_MAX_TRANSIENT) {
        inst_release(s, gi);           /* a later call tries again */
        gi->state = GI_SEEN;
        char hex[33];
        rgpu_hash_hex(&e->h, hex);
        graph_refused(s, "template %.12s: capture failed, will retry: %s", hex, why);
        return;
    }
    inst_off(s, e, gi, why);
}

/* Poison what the template defines or writes among the bindings (a replay
 * whose launch failed). */
static void call_poison_outputs(rgpu_session *s, const tplent *e, const uint64_t *bind, uint64_t idx) {
    size_t off = 0;
    for (uint32_t k = 0; k < e->info.n_records; k++) {
        rgpu_record r;
        size_t used;
        rgpu_record_decode(e->info.records + off, e->info.records_len - off, &r, &used);
        off += used;
        for (int i = 0; i < r.n_out; i++) {
            void *v = u64map_get(&e->bind, r.out[i].tid);
            tensor *t = v ? u64map_get(&s->tensors, bind[(uintptr_t)v - 1]) : NULL;
            if (t) { t->poisoned = true; t->poison_op = idx; }
        }
    }
}

/* ---- replay */
static bool replay_fits(const rgpu_session *s, const ginst *gi) {
    /* the records' own checks see what the record-by-record path would,
     * except the session limits: leave calls near them to that path */
    uint64_t created = gi->n_slots - gi->n_in;
    if (s->lim.max_storages && s->storages.len + created > s->lim.max_storages) return false;
    if (s->lim.max_total_bytes && s->held + gi->created_bytes > s->lim.max_total_bytes) return false;
    return true;
}

static void call_replay(ctx *c, tplent *e, const uint64_t *bind, uint64_t seed, uint64_t offset, ginst *gi, storage **in) {
    rgpu_session *s = c->s;
    char why[200] = "";
    rgpu_status st = RGPU_OK;
    gcall g = { .replay = true, .gi = gi, .in = in, .n_in = gi->n_in };
    g.made = calloc(gi->n_slots, sizeof *g.made);
    g.made_sid = calloc(gi->n_slots, sizeof *g.made_sid);
    if (!g.made || !g.made_sid) st = RGPU_ERR_NOMEM;
    uint64_t copies = 0;
    for (uint32_t j = 0; j < gi->n_in && !st; j++)
        if (gi->slots[j].staged) {
            st = dev_copy(s, gi->slots[j].buf, in[j]->data, in[j]->nbytes, why, sizeof why);
            copies++;
        }
    if (st) {   /* nothing is defined yet: the record-by-record path does the call */
        gcall_free(&g);
        call_records(c, e, bind, seed, offset, false, 0);
        return;
    }
    s->gst.input_copies += copies;
    s->g = &g;
    call_records(c, e, bind, seed, offset, false, 0);   /* bookkeeping: no exec */
    s->g = NULL;
    st = s->b->graph_launch(s->b, gi->graph, why, sizeof why);
    for (uint32_t j = 0; j < gi->n_in && !st; j++)
        if (gi->slots[j].staged && gi->slots[j].written)
            st = dev_copy(s, in[j]->data, gi->slots[j].buf, in[j]->nbytes, why, sizeof why);
    for (uint32_t k = gi->n_in; k < gi->n_slots && !st; k++) {
        if (gi->slots[k].kind != GS_OUTPUT || !g.made[k]) continue;
        if (u64map_get(&s->storages, g.made_sid[k]) != g.made[k]) continue;   /* gone (a failed record's) */
        st = dev_copy(s, g.made[k]->data, gi->slots[k].buf, gi->slots[k].nbytes, why, sizeof why);
    }
    if (st) {
        char msg[240];
        snprintf(msg, sizeof msg, "graph replay: %s", why);
        op_fail(s, c->idx, RGPU_OP_CALL, st, msg);
        call_poison_outputs(s, e, bind, c->idx);
    }
    s->gst.replays++;
    gcall_free(&g);
}

static ginst *inst_new(rgpu_session *s, tplent *e, uint64_t *key, size_t key_n, uint32_t n_in) {
    if (e->n_inst >= GRAPH_MAX_INSTANCES) {   /* least recently used out */
        ginst *old = e->inst;
        for (ginst *x = e->inst; x; x = x->next) if (x->last_use < old->last_use) old = x;
        inst_free(s, e, old);
    }
    ginst *gi = calloc(1, sizeof *gi);
    if (!gi) return NULL;
    gi->seen = calloc(n_in ? n_in : 1, sizeof *gi->seen);
    gi->force_staged = calloc(n_in ? n_in : 1, sizeof *gi->force_staged);
    if (!gi->seen || !gi->force_staged) { free(gi->seen); free(gi->force_staged); free(gi); return NULL; }
    gi->key = key; gi->key_n = key_n;
    gi->n_in = n_in;
    gi->state = GI_SEEN;
    gi->next = e->inst;
    e->inst = gi;
    e->n_inst++;
    s->gst.instances++;
    return gi;
}

static void call_graphed(ctx *c, tplent *e, const uint64_t *bind, uint64_t seed, uint64_t offset) {
    rgpu_session *s = c->s;
    s->gst.calls++;
    uint64_t *key;
    size_t key_n;
    storage **in;
    uint32_t n_in;
    if (!tpl_graphable(s, e) || call_layout(s, e, bind, &key, &key_n, &in, &n_in)) {
        call_records(c, e, bind, seed, offset, false, 0);
        return;
    }
    ginst *gi = e->inst;
    while (gi && !(gi->key_n == key_n && !memcmp(gi->key, key, key_n * sizeof *key))) gi = gi->next;
    if (gi) free(key);
    else if (!(gi = inst_new(s, e, key, key_n, n_in))) free(key);
    if (!gi) {
        call_records(c, e, bind, seed, offset, false, 0);
        inputs_release(s, in, n_in);
        return;
    }
    gi->last_use = ++s->tpl_clock;
    bool first = gi->calls++ == 0;
    if (gi->state == GI_READY) {
        bool same = true;
        for (uint32_t j = 0; j < n_in; j++)
            if (!gi->slots[j].staged && gi->slots[j].ptr != in[j]->data) { same = false; gi->force_staged[j] = true; }
        if (same && replay_fits(s, gi)) {
            call_replay(c, e, bind, seed, offset, gi, in);
            inputs_release(s, in, n_in);
            return;
        }
        if (same) {   /* near a session limit */
            call_records(c, e, bind, seed, offset, false, 0);
            inputs_release(s, in, n_in);
            return;
        }
        inst_release(s, gi);   /* an input moved: log this call and capture again */
        gi->state = GI_SEEN;
    }
    if (gi->state == GI_OFF || first) {
        call_records(c, e, bind, seed, offset, false, 0);
        for (uint32_t j = 0; j < n_in; j++) gi->seen[j] = in[j]->data;
        inputs_release(s, in, n_in);
        return;
    }
    /* seen before: run this call logged, then capture the log */
    gcall g = { .gi = gi, .in = in, .n_in = n_in };
    if (n_in) {
        g.slots = calloc(n_in, sizeof *g.slots);
        g.cap_slots = n_in;
        if (!g.slots) g.bad = true;
    }
    for (uint32_t j = 0; j < n_in && !g.bad; j++) {
        g.slots[j].nbytes = in[j]->nbytes;
        g.slots[j].kind = GS_INPUT;
        if (!u64map_put(&g.slot_of_st, (uint64_t)(uintptr_t)in[j], (void *)(uintptr_t)(j + 1))) g.bad = true;
    }
    g.n_slots = n_in;
    if (g.bad) snprintf(g.why, sizeof g.why, "out of host memory");
    s->g = &g;
    call_records(c, e, bind, seed, offset, false, 0);
    s->g = NULL;
    if (!g.bad && s->call_fail) { g.bad = true; snprintf(g.why, sizeof g.why, "a record failed"); }
    if (g.bad) inst_off(s, e, gi, g.why);
    else inst_capture(s, e, gi, &g);
    for (uint32_t j = 0; j < n_in; j++) gi->seen[j] = in[j]->data;
    gcall_free(&g);
    inputs_release(s, in, n_in);
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
            blobent *e;
            st = blob_get(s, &r.args[0].v.h, &e, NULL, 0);
            if (st && st != RGPU_ERR_LIMIT) return st;   /* a refused blob fails its UPLOAD when it runs */
        } else if (r.op == RGPU_OP_CALL && templates) {
            tplent *e;
            if ((st = tpl_get(s, &r.args[0].v.h, &e))) return st;
            if (!e->status && (st = prefetch_records(s, e->info.records, e->info.records_len, false))) return st;
        }
    }
    return RGPU_OK;
}

rgpu_status rgpu_session_prefetch(rgpu_session *s, const uint8_t *raw, size_t n) {
    s->blob_gen++;   /* what this fetches stays until the chunk ran */
    u64map_free(&s->refused);   /* refusals hold for one chunk: memory may have been freed since */
    return prefetch_records(s, raw, n, true);
}

rgpu_status rgpu_session_check_chunk(rgpu_session *s, const uint8_t *raw, size_t n, uint64_t first_op,
                                     uint32_t count, char *why, size_t whylen) {
    if (first_op != s->applied) {
        snprintf(why, whylen, "starts at op %llu, expected %llu", (unsigned long long)first_op, (unsigned long long)s->applied);
        return RGPU_ERR_SEQUENCE;
    }
    size_t off = 0;
    uint32_t k = 0;
    rgpu_record r;
    while (off < n) {
        size_t used;
        rgpu_status st = rgpu_record_decode(raw + off, n - off, &r, &used);
        if (st) {
            snprintf(why, whylen, "record %u (op %llu, byte %zu of %zu) does not decode: %s", k,
                     (unsigned long long)(first_op + k), off, n, rgpu_status_str(st));
            return st;
        }
        off += used;
        k++;
    }
    if (k != count) {
        snprintf(why, whylen, "holds %u records, its header says %u", k, count);
        return RGPU_ERR_BAD_MESSAGE;
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
    size_t off = 0;
    rgpu_record r;
    for (uint32_t i = 0; i < count; i++) {
        size_t used;
        rgpu_record_decode(raw + off, n - off, &r, &used);
        off += used;
        if (s->cancel && s->cancel(s->cancel_ud)) { blob_evict(s); return RGPU_ERR_TIMEOUT; }
        run_record(s, &r, first_op + i, false, 0);
        s->applied++;
    }
    blob_evict(s);
    return RGPU_OK;
}

void rgpu_session_set_cancel(rgpu_session *s, bool (*fn)(void *ud), void *ud) { s->cancel = fn; s->cancel_ud = ud; }

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
        if ((st = mem_take(s, n, true, "a checkpoint buffer", NULL, 0))) break;
        uint8_t *host = malloc(n ? n : 1);
        if (!host) st = RGPU_ERR_NOMEM;
        if (!st) st = s->b->download(s->b, host, sg->data, n);
        rgpu_hash hh = st ? (rgpu_hash){ { 0 } } : rgpu_hash_bytes(host, n);
        if (!st) st = put(ud, &hh, host, n);
        free(host);
        mem_give(s, n, true);
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
    rgpu_status st = fetch_checked(s, &h, data, n, NULL, 0);
    if (!st && want != SIZE_MAX && *n != want) { free(*data); *data = NULL; st = RGPU_ERR_BAD_TRACE; }
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
        if (!sg || (st = mem_take(s, nbytes, storage_host(s), "a storage", NULL, 0))) {
            free(sg); free(data);
            if (!st) st = RGPU_ERR_NOMEM;
            break;
        }
        sg->sid = sid; sg->nbytes = nbytes;
        if (!(sg->data = s->b->alloc(s->b, (size_t)nbytes)) || !u64map_put(&s->storages, sid, sg)) {
            if (sg->data) s->b->free(s->b, sg->data);
            mem_give(s, nbytes, storage_host(s));
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
        if ((st = mem_take(s, dn, true, "a result", NULL, 0))) { free(data); break; }
        st = store_result(s, op, data, dn);
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
