/* graph.c — templates and CALL: the template cache, a CALL's records run
 * with its ids remapped (FORMAT.md §5.1), and the later calls of a template
 * replayed as one captured graph (--graphs on). It stands on the session's
 * tables (store.h); the record executor it runs a template's records through
 * is session.c's, reached only through s->run_record (the CALL recursion). */
#include "graph.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void inst_free(rgpu_session *s, tplent *e, struct ginst *gi);
static rgpu_status dev_copy(rgpu_session *s, void *dst, const void *src, uint64_t n, char *why, size_t whylen);

/* ---------------------------------------------------------------------------
 * Templates (keyed like blobs; least recently used evicted first) */
/* A template entry leaving the cache (its bytes were taken in tpl_add). */
static void tpl_drop(rgpu_session *s, tplent *e) {
    s->tpl_bytes -= e->bytes;
    rgpu_sess_mem_give(s, e->bytes, true);
    rgpu_sess_tpl_free(s, e);
}

void rgpu_sess_tpl_free(rgpu_session *s, tplent *e) {
    if (!e) return;
    while (e->inst) inst_free(s, e, e->inst);
    free(e->raw);
    u64map_free(&e->bind);
    free(e);
}

static tplent *tpl_find(rgpu_session *s, const rgpu_hash *h) {
    tplent *e = u64map_get(&s->tpls, rgpu_sess_blob_key(h));
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
        u64map_del(&s->tpls, rgpu_sess_blob_key(&old->h));
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
                rgpu_sess_tpl_free(s, e);
                return RGPU_ERR_NOMEM;
            }
        e->bytes += n + e->bind.cap * (sizeof(uint64_t) + sizeof(void *));
    }
    rgpu_status st = rgpu_sess_mem_take(s, e->bytes, true, "a template", NULL, 0);
    if (st) { rgpu_sess_tpl_free(s, e); return st; }
    tplent *old = u64map_get(&s->tpls, rgpu_sess_blob_key(h));   /* a colliding 64-bit prefix: replaced */
    if (!u64map_put(&s->tpls, rgpu_sess_blob_key(h), e)) { rgpu_sess_mem_give(s, e->bytes, true); rgpu_sess_tpl_free(s, e); return RGPU_ERR_NOMEM; }
    if (old) tpl_drop(s, old);
    s->tpl_bytes += e->bytes;
    e->last_use = ++s->tpl_clock;
    tpl_evict(s, e);
    *out = e;
    return RGPU_OK;
}

/* The template named h: cached, among the upload blobs, or fetched. A blob
 * that is no template still gives RGPU_OK here, with (*out)->status set. */
rgpu_status rgpu_sess_tpl_get(rgpu_session *s, const rgpu_hash *h, tplent **out) {
    tplent *e = tpl_find(s, h);
    if (!e) {
        uint8_t *data = NULL;
        size_t n = 0;
        const blobent *b = rgpu_sess_blob_find(s, h);
        rgpu_status st;
        if (b) {
            if (!(data = malloc(b->n ? b->n : 1))) return RGPU_ERR_NOMEM;
            if (b->n) memcpy(data, b->data, b->n);
            n = b->n;
        } else if ((st = rgpu_sess_fetch_checked(s, h, UINT64_MAX, &data, &n, NULL, 0))) {
            return st;
        }
        if ((st = tpl_add(s, h, data, n, &e))) return st;
    }
    e->last_use = ++s->tpl_clock;
    *out = e;
    return RGPU_OK;
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
        if (t) rgpu_sess_tensor_drop(s, t);
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
        return rgpu_op_fail(why, whylen, RGPU_ERR_BAD_ARG, "CALL takes (HASH template, INTS bindings, INT seed, INT offset)");
    }
    char hex[33];
    rgpu_hash_hex(&r->args[0].v.h, hex);
    tplent *e;
    rgpu_status st = rgpu_sess_tpl_get(s, &r->args[0].v.h, &e);
    if (st) {
        return rgpu_op_fail(why, whylen, st, "template %s: %s", hex, st == RGPU_ERR_MISSING_BLOB ? "nobody holds it" : rgpu_status_str(st));
    }
    if (e->status) {
        return rgpu_op_fail(why, whylen, e->status, "template %s is not a valid template (%s)", hex,
                              rgpu_status_name(e->status));
    }
    uint32_t nb = r->args[1].v.ints.n;
    if (nb != e->info.n_bind) {
        return rgpu_op_fail(why, whylen, RGPU_ERR_BAD_ARG, "template %s has %u bind ids, the call gives %u bindings", hex, e->info.n_bind, nb);
    }
    uint64_t *b = malloc(sizeof *b * (nb ? nb : 1));
    if (!b) return RGPU_ERR_NOMEM;
    for (uint32_t i = 0; i < nb; i++) {
        if (!(b[i] = (uint64_t)rgpu_arg_int_at(&r->args[1], i))) {
            free(b);
            return rgpu_op_fail(why, whylen, RGPU_ERR_BAD_ARG, "binding %u is id 0", i);
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
            rgpu_sess_op_fail(s, c->idx, r.op, RGPU_ERR_NOMEM, "mapping the template's ids");
            break;
        }
        s->run_record(s, &r, c->idx, poisoned && r.op != RGPU_OP_FREE, poison_op);
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

rgpu_status rgpu_sess_exec_call(ctx *c) {
    rgpu_session *s = c->s;
    if (s->in_call) return RECORD_FAIL(c, RGPU_ERR_BAD_OP, "a template cannot CALL");
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
 * the record-by-record path already. Random ops are captured reading their
 * (seed, offset) from the instance's device pair buffer (rgpu_exec philox,
 * one pair per random exec): each replay writes the call's rebased pairs
 * there (one small upload) before the launch. Templates with UPLOAD records
 * are never graphed. A graph runs the same kernels with the same arguments
 * over the same byte offsets as the records would: results are bitwise those
 * of the record-by-record path. */

enum { GRAPH_MAX_INSTANCES = 4, GRAPH_MAX_CAPTURES = 8, GRAPH_MAX_TRANSIENT = 3 };
enum { GI_SEEN, GI_READY, GI_OFF };
enum { GS_INPUT, GS_LOCAL, GS_OUTPUT };

typedef struct gslot {
    uint64_t nbytes;
    void *buf;                /* the instance's static buffer; NULL for a direct input */
    void *ptr;                /* an input: its session pointer at capture (what a direct one is read at) */
    uint64_t sid;             /* created: its storage id in the logged call */
    const storage *st;        /* created, while logging: its storage */
    storage *lent;            /* an output: the live storage that took buf itself (storage lender) */
    uint64_t where;           /* created: (template record << 4 | output position) + 1 */
    uint8_t kind;
    bool staged, written;     /* inputs */
} gslot;

typedef struct gview { int32_t slot; uint64_t off; rgpu_view v; } gview;   /* slot -1: absent */

typedef struct gexec {
    int op, n_in, n_out, n_args;
    bool checked;                   /* its backend left a check to the device error word */
    int32_t ph;                     /* a random exec: its pair in the philox buffer; -1: none */
    int32_t rec;                    /* its template record + 1 */
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
    void **last;              /* n_in: input pointers of the last call */
    bool settled;             /* captured again once with its settled staged inputs direct */
    bool prev_replayed;       /* the last call was a replay (its pointers in last) */
    u64map slot_of;           /* created slot's where -> slot + 1 */
    void *graph;
    bool *checked;            /* per captured exec: it left a check to the word (the replays' taint) */
    int32_t *ph_of;           /* per captured exec: its (seed, offset) pair in ph_buf, -1: none */
    uint64_t *ph_buf;         /* backend memory: n_ph pairs, written before each launch */
    uint32_t n_ph;
    uint32_t n_ex;
    uint32_t calls, captures, transient;
    uint64_t last_use, bytes, created_bytes;
} ginst;

typedef struct gcall {
    bool replay;
    ginst *gi;
    storage **in;             /* the bound storages (each pinned) */
    uint32_t n_in;
    /* logging */
    gslot *slots;             /* inputs, then created storages */
    uint32_t n_slots, cap_slots;
    u64map slot_of_st;        /* storage pointer -> slot + 1 */
    gexec **ex;
    size_t n_ex, cap_ex;
    uint32_t n_ph;            /* random execs logged */
    bool bad;
    char why[200];
    /* replaying: per slot, the storage the call defined for it; the execs passed */
    storage **made;
    uint64_t *made_sid;
    size_t n_replayed;
    uint64_t *ph_host;        /* the call's pairs, 2 per random exec, for the launch */
} gcall;

bool rgpu_sess_graph_replaying(const rgpu_session *s) { return s->g && s->g->replay; }

bool rgpu_sess_graph_replay_exec(rgpu_session *s, const rgpu_exec *e) {
    gcall *g = s->g;
    size_t k = g->n_replayed++;
    if (k >= g->gi->n_ex) return false;
    int32_t j = g->gi->ph_of[k];
    if (j >= 0 && e->n_args >= 2) {   /* this call's rebased pair (call_records), the last two args */
        g->ph_host[2 * (size_t)j] = (uint64_t)e->args[e->n_args - 2].v.i;
        g->ph_host[2 * (size_t)j + 1] = (uint64_t)e->args[e->n_args - 1].v.i;
    }
    return g->gi->checked[k];
}

static void graph_refused(rgpu_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void graph_refused(rgpu_session *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->gst.last_refusal, sizeof s->gst.last_refusal, fmt, ap);
    va_end(ap);
    s->gst.refusals++;
}

void rgpu_session_graph_stats(const rgpu_session *s, rgpu_graph_stats *st) { *st = s->gst; }

/* An exec that draws random numbers: a random op, except attention without
 * dropout (its kernels then take seed and offset 0 and write those as its
 * Philox pair: nothing to feed per call). */
static bool exec_draws(const rgpu_exec *e) {
    return rgpu_op_is_random(e->op) &&
           !(e->op == RGPU_OP_SDPA && e->n_args > 2 && e->args[2].kind == RGPU_ARG_FLOAT && e->args[2].v.f == 0.0);
}

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
        if (r.op == RGPU_OP_UPLOAD) why = "it has UPLOAD records";
        /* A FREE of a bound tensor (an input the caller handed over) is
         * fine: call_layout pins every bound storage, so its bytes stay where
         * the graph reads them until the call is done. */
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
    for (uint32_t j = 0; j < n; j++) rgpu_sess_storage_unpin(s, in[j]);
    free(in);
}

/* For each binding, what the session holds under its id: a tensor (its
 * storage's position among the call's distinct bound storages, dtype,
 * shape, strides, offset), a storage (its position), or nothing; each
 * storage's size at its first position. Equal layouts mean the same views of
 * the same number of storages with the same aliasing: what a graph bakes in.
 * The distinct storages go to *in, each pinned (a bound tensor the template
 * frees leaves its bytes where the graph reads them until the call is done). */
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
                x->pins++;
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
    for (uint32_t k = 0; k < gi->n_slots; k++) {   /* outputs living in their buffers keep them */
        storage *o = gi->slots[k].lent;
        if (!o) continue;
        o->lender = NULL;
        o->orphan = true;
        gi->slots[k].buf = NULL;
        gi->slots[k].lent = NULL;
        gi->bytes -= o->nbytes;
        s->gst.bytes -= o->nbytes;
    }
    free(gi->checked);
    gi->checked = NULL;
    free(gi->ph_of);
    gi->ph_of = NULL;
    if (gi->ph_buf) s->b->free(s->b, gi->ph_buf);
    gi->ph_buf = NULL;
    gi->n_ph = 0;
    gi->n_ex = 0;
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
    free(gi->last);
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
void *rgpu_sess_graph_storage_data(rgpu_session *s, storage *sg, int *slot) {
    gcall *g = s->g;
    *slot = -1;
    if (!g->replay) return NULL;
    uintptr_t k = (uintptr_t)u64map_get(&g->gi->slot_of, (((uint64_t)s->call_rec << 4) | (uint64_t)s->rec_out) + 1);
    if (!k || g->gi->slots[k - 1].nbytes != sg->nbytes) return NULL;   /* cannot happen: same template, same layout */
    *slot = (int)(k - 1);
    gslot *x = &g->gi->slots[k - 1];
    if (x->kind == GS_OUTPUT) {   /* the call's output takes the buffer, unless a live one holds it */
        if (x->lent || !x->buf) return NULL;
        sg->borrowed = true;
        sg->lender = x;
        x->lent = sg;
        s->gst.outputs_lent++;
        return x->buf;
    }
    if (x->kind != GS_LOCAL) return NULL;
    sg->borrowed = true;
    return x->buf;
}

void rgpu_sess_graph_storage_gone(rgpu_session *s, storage *sg) {
    (void)s;
    gslot *x = sg->lender;
    if (x && x->lent == sg) x->lent = NULL;
    sg->lender = NULL;
}

/* Before a replay writes its output buffers: an output of an earlier call
 * still living in one moves out into memory of its own (the session's, as any
 * storage), so the launch never overwrites what the program holds. False when
 * that cannot be done (a limit, no memory): then the call runs record by
 * record, the graph is not launched and nothing moved is lost. */
static bool outputs_reclaim(rgpu_session *s, ginst *gi) {
    for (uint32_t k = gi->n_in; k < gi->n_slots; k++) {
        gslot *x = &gi->slots[k];
        storage *o = x->lent;
        if (!o) continue;
        bool host = rgpu_sess_storage_host(s);
        if (rgpu_sess_mem_take(s, o->nbytes, host, "a storage", NULL, 0)) return false;
        void *p = s->b->alloc(s->b, (size_t)o->nbytes);
        char why[160];
        if (!p || dev_copy(s, p, x->buf, o->nbytes, why, sizeof why)) {
            if (p) s->b->free(s->b, p);
            rgpu_sess_mem_give(s, o->nbytes, host);
            return false;
        }
        o->data = p;
        o->borrowed = false;
        o->lender = NULL;
        x->lent = NULL;
        s->gst.output_copies++;
    }
    return true;
}

void rgpu_sess_graph_storage_made(rgpu_session *s, storage *sg, int slot) {
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
void rgpu_sess_graph_log_exec(rgpu_session *s, const rgpu_exec *e, tensor **outs, const tensor **ins) {
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
    x->checked = s->dev_checked;
    x->ph = exec_draws(e) ? (int32_t)g->n_ph++ : -1;
    x->rec = e->rec;
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
    free(g->ph_host);
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
    if (!st && (!(gi->checked = calloc(g->n_ex, sizeof *gi->checked)) ||
                !(gi->ph_of = calloc(g->n_ex, sizeof *gi->ph_of))))
        st = RGPU_ERR_NOMEM;
    if (!st && g->n_ph && !(gi->ph_buf = s->b->alloc(s->b, 16 * (size_t)g->n_ph))) st = RGPU_ERR_NOMEM;
    if (st) snprintf(why, sizeof why, "no memory for its static buffers");
    else {
        gi->n_ex = (uint32_t)g->n_ex;
        gi->n_ph = g->n_ph;
        for (size_t i = 0; i < g->n_ex; i++) { gi->checked[i] = g->ex[i]->checked; gi->ph_of[i] = g->ex[i]->ph; }
    }
    bool begun = false;
    if (!st) {
        st = s->b->graph_begin(s->b, why, sizeof why);
        begun = !st;
    }
    for (size_t i = 0; i < g->n_ex && !st; i++) {
        const gexec *x = g->ex[i];
        rgpu_view v[RGPU_MAX_IN + RGPU_MAX_OUT];
        /* checks on the device: serials relative to each launch's call (err_call) */
        rgpu_exec ex = { .op = x->op, .n_in = x->n_in, .n_out = x->n_out, .n_args = x->n_args, .args = x->args,
                         .dev_err = s->dev_err, .dev_seq = RGPU_DEV_SEQ_REL | (uint64_t)(i + 1), .rec = x->rec,
                         .philox = x->ph >= 0 ? gi->ph_buf + 2 * (size_t)x->ph : NULL };
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
    g.ph_host = calloc(2 * (size_t)gi->n_ph + 1, sizeof *g.ph_host);
    if (!g.made || !g.made_sid || !g.ph_host) st = RGPU_ERR_NOMEM;
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
    uint64_t base = s->dev_seq;   /* the graph's checks count from here */
    s->dev_seq += gi->n_ex + 1;
    s->g = &g;
    call_records(c, e, bind, seed, offset, false, 0);   /* bookkeeping: no exec */
    s->g = NULL;
    if (s->dev_err && s->b->err_call) s->b->err_call(s->b, s->dev_err, base, c->idx);
    /* the call's Philox pairs, in stream order after the previous launch read them */
    if (gi->n_ph && (st = s->b->upload(s->b, gi->ph_buf, g.ph_host, 16 * (size_t)gi->n_ph)))
        snprintf(why, sizeof why, "writing its random ops' seeds: %s", rgpu_status_str(st));
    if (!st) st = s->b->graph_launch(s->b, gi->graph, why, sizeof why);
    for (uint32_t j = 0; j < gi->n_in && !st; j++)
        if (gi->slots[j].staged && gi->slots[j].written)
            st = dev_copy(s, in[j]->data, gi->slots[j].buf, in[j]->nbytes, why, sizeof why);
    for (uint32_t k = gi->n_in; k < gi->n_slots && !st; k++) {
        if (gi->slots[k].kind != GS_OUTPUT || !g.made[k]) continue;
        if (u64map_get(&s->storages, g.made_sid[k]) != g.made[k]) continue;   /* gone (a failed record's) */
        if (g.made[k]->data == gi->slots[k].buf) continue;                   /* it is the buffer */
        st = dev_copy(s, g.made[k]->data, gi->slots[k].buf, gi->slots[k].nbytes, why, sizeof why);
        s->gst.output_copies++;
    }
    if (st) {
        char msg[240];
        snprintf(msg, sizeof msg, "graph replay: %s", why);
        rgpu_sess_op_fail(s, c->idx, RGPU_OP_CALL, st, msg);
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
    gi->last = calloc(n_in ? n_in : 1, sizeof *gi->last);
    if (!gi->seen || !gi->force_staged || !gi->last) {
        free(gi->seen); free(gi->force_staged); free(gi->last); free(gi);
        return NULL;
    }
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
        /* Staged inputs found at the same pointer as in the last replay (e.g.
         * another graph's outputs, which now live in its static buffers):
         * captured again, once, with them read in place (no copy per call). */
        uint32_t settled = 0;
        bool prev = gi->prev_replayed;
        gi->prev_replayed = false;
        for (uint32_t j = 0; j < n_in && same && !gi->settled && prev; j++)
            if (gi->slots[j].staged && gi->last[j] == in[j]->data) settled++;
        if (settled) {
            for (uint32_t j = 0; j < n_in; j++) {
                if (gi->slots[j].staged && gi->last[j] == in[j]->data) gi->force_staged[j] = false;
                gi->seen[j] = in[j]->data;
            }
            gi->settled = true;
            inst_release(s, gi);
            gi->state = GI_SEEN;   /* logged and captured below */
        } else if (same && replay_fits(s, gi)) {
            if (!outputs_reclaim(s, gi)) {   /* the buffers stay with what holds them: not launched */
                call_records(c, e, bind, seed, offset, false, 0);
                inputs_release(s, in, n_in);
                return;
            }
            for (uint32_t j = 0; j < n_in; j++) gi->last[j] = in[j]->data;
            gi->prev_replayed = true;
            call_replay(c, e, bind, seed, offset, gi, in);
            inputs_release(s, in, n_in);
            return;
        }
        if (same && !settled) {   /* near a session limit */
            call_records(c, e, bind, seed, offset, false, 0);
            inputs_release(s, in, n_in);
            return;
        }
        if (!settled) {
            inst_release(s, gi);   /* an input moved: log this call and capture again */
            gi->state = GI_SEEN;
        }
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
