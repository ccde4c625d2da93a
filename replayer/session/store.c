/* store.c — the session's tables, below both the record executor (session.c)
 * and templates/CALL/graphs (graph.c): memory accounting against the
 * session's and the server's limits, storages and tensors leaving the
 * tables, the upload blob cache (keep, find, evict, fetch), the results of
 * WAIT ops, and the error slot an op's failure is recorded in. Calls neither of the files above it. */
#include "store.h"

#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>


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
rgpu_status rgpu_sess_mem_take(rgpu_session *s, uint64_t n, bool host, const char *what, char *why, size_t whylen) {
    uint64_t lim = s->lim.max_total_bytes;
    if (lim && (n > lim || s->held > lim - n)) {
        return rgpu_op_fail(why, whylen, RGPU_ERR_LIMIT, "%s of %llu bytes would pass the session limit of %llu bytes "
                          "(--max-session-bytes; %llu held)", what, (unsigned long long)n,
                          (unsigned long long)lim, (unsigned long long)s->held);
    }
    if (host && !rgpu_mem_pool_take(s->lim.pool, n)) {
        return rgpu_op_fail(why, whylen, RGPU_ERR_LIMIT, "%s of %llu bytes would pass the host-memory limit of %llu bytes "
                          "(--max-memory; %llu in use by all sessions)", what, (unsigned long long)n,
                          (unsigned long long)s->lim.pool->limit, (unsigned long long)rgpu_mem_pool_used(s->lim.pool));
    }
    s->held += n;
    if (host) s->held_host += n;
    return RGPU_OK;
}

void rgpu_sess_mem_give(rgpu_session *s, uint64_t n, bool host) {
    s->held -= n;
    if (host) { s->held_host -= n; rgpu_mem_pool_give(s->lim.pool, n); }
}

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
            if (why) snprintf(why, whylen, "the host-memory limit of %llu bytes (--max-memory; %llu in use)",
                              (unsigned long long)p->limit, (unsigned long long)used);
        }
    }
    return room;
}

/* ---------------------------------------------------------------------------
 * Storages and tensors */
enum { SPARES_MAX = 4096 };   /* per kind: 1.5 MiB of tensor structs at most */

/* A list of spare structs of one kind, linked through their field at next_off. */
static void *spare_take(rgpu_spares *l, size_t size, size_t next_off) {
    void *p = l->head;
    if (!p) return calloc(1, size);
    memcpy(&l->head, (char *)p + next_off, sizeof l->head);
    l->n--;
    memset(p, 0, size);
    return p;
}

static void spare_give(rgpu_spares *l, void *p, size_t next_off) {
    if (!p) return;
    if (l->n >= SPARES_MAX) { free(p); return; }
    memcpy((char *)p + next_off, &l->head, sizeof l->head);
    l->head = p;
    l->n++;
}

static void spares_drop(rgpu_spares *l, size_t next_off) {
    while (l->head) {
        void *p = l->head;
        memcpy(&l->head, (char *)p + next_off, sizeof l->head);
        free(p);
    }
    l->n = 0;
}

tensor *rgpu_sess_tensor_new(rgpu_session *s) { return spare_take(&s->spare_t, sizeof(tensor), offsetof(tensor, next_free)); }
storage *rgpu_sess_storage_new(rgpu_session *s) { return spare_take(&s->spare_sg, sizeof(storage), offsetof(storage, next_free)); }
void rgpu_sess_tensor_put(rgpu_session *s, tensor *t) { spare_give(&s->spare_t, t, offsetof(tensor, next_free)); }
void rgpu_sess_storage_put(rgpu_session *s, storage *sg) { spare_give(&s->spare_sg, sg, offsetof(storage, next_free)); }

void rgpu_sess_spares_free(rgpu_session *s) {
    spares_drop(&s->spare_t, offsetof(tensor, next_free));
    spares_drop(&s->spare_sg, offsetof(storage, next_free));
}

static void storage_release(rgpu_session *s, storage *st) {   /* its bytes */
    if (!st->borrowed) {
        s->b->free(s->b, st->data);
        rgpu_sess_mem_give(s, st->nbytes, rgpu_sess_storage_host(s));
    } else if (st->orphan) {
        s->b->free(s->b, st->data);
    } else if (st->lender) {
        rgpu_sess_graph_storage_gone(s, st);
    }
    rgpu_sess_storage_put(s, st);
}

void rgpu_sess_storage_unref(rgpu_session *s, storage *st) {
    if (!st || --st->refs) return;
    u64map_del(&s->storages, st->sid);
    s->mem -= st->nbytes;
    if (!st->pins) storage_release(s, st);
}

void rgpu_sess_storage_unpin(rgpu_session *s, storage *st) {
    if (--st->pins || st->refs) return;
    storage_release(s, st);
}

void rgpu_sess_tensor_drop(rgpu_session *s, tensor *t) {
    rgpu_sess_storage_unref(s, t->st);
    rgpu_sess_tensor_put(s, t);
}

/* ---------------------------------------------------------------------------
 * Blobs (keyed by the first 8 hash bytes; full hash compared) */
uint64_t rgpu_sess_blob_key(const rgpu_hash *h) {
    uint64_t k = rgpu_ld64(h->b);
    return k ? k : 1;
}

blobent *rgpu_sess_blob_find(rgpu_session *s, const rgpu_hash *h) {
    blobent *e = u64map_get(&s->blobs, rgpu_sess_blob_key(h));
    return (e && rgpu_hash_eq(&e->h, h)) ? e : NULL;
}

/* Drop the oldest blobs until those kept fit in `keep` bytes, sparing the
 * ones fetched for the chunk about to run (gen == blob_gen) unless all. */
void rgpu_sess_blob_evict_to(rgpu_session *s, uint64_t keep, bool all) {
    blobent **pp = &s->blob_head, *prev = NULL;
    while (s->blob_bytes > keep && *pp) {
        blobent *e = *pp;
        if (!all && e->gen == s->blob_gen) { prev = e; pp = &e->next; continue; }
        *pp = e->next;
        if (s->blob_tail == e) s->blob_tail = prev;
        if (u64map_get(&s->blobs, rgpu_sess_blob_key(&e->h)) == e) u64map_del(&s->blobs, rgpu_sess_blob_key(&e->h));
        s->blob_bytes -= e->n;
        rgpu_sess_mem_give(s, e->n, true);
        free(e->data);
        free(e);
    }
}

rgpu_status rgpu_session_put_blob(rgpu_session *s, const rgpu_hash *h, uint8_t *data, size_t n) {
    rgpu_hash got = rgpu_hash_bytes(data, n);
    if (!rgpu_hash_eq(&got, h)) { free(data); return RGPU_ERR_BAD_CHECKSUM; }
    if (rgpu_sess_blob_find(s, h)) { free(data); return RGPU_OK; }
    /* room first: older blobs beyond the cache go before this one is counted */
    rgpu_sess_blob_evict_to(s, n < s->lim.max_blob_cache ? s->lim.max_blob_cache - n : 0, false);
    rgpu_status st = rgpu_sess_mem_take(s, n, true, "an uploaded blob", NULL, 0);
    if (st) { free(data); return st; }
    blobent *e = calloc(1, sizeof *e);
    if (!e) { rgpu_sess_mem_give(s, n, true); free(data); return RGPU_ERR_NOMEM; }
    e->h = *h; e->data = data; e->n = n; e->gen = s->blob_gen;
    blobent *old = u64map_get(&s->blobs, rgpu_sess_blob_key(h));
    (void)old;  /* a colliding 64-bit prefix: the newer blob wins the slot */
    if (!u64map_put(&s->blobs, rgpu_sess_blob_key(h), e)) { rgpu_sess_mem_give(s, n, true); free(data); free(e); return RGPU_ERR_NOMEM; }
    if (s->blob_tail) s->blob_tail->next = e; else s->blob_head = e;
    s->blob_tail = e;
    s->blob_bytes += n;
    return RGPU_OK;
}

bool rgpu_session_has_blob(rgpu_session *s, const rgpu_hash *h) { return rgpu_sess_blob_find(s, h) != NULL; }

/* Fetch blob h through the fetch callback, bounded by the session's room
 * and by the size its record names: a blob over either is refused before it
 * is inflated (RGPU_ERR_LIMIT, why names the limit; RGPU_ERR_BAD_ARG: not the
 * size the record says, which no honest client sends). The bytes' hash is
 * checked. */
rgpu_status rgpu_sess_fetch_checked(rgpu_session *s, const rgpu_hash *h, uint64_t size, uint8_t **data, size_t *n,
                                    char *why, size_t whylen) {
    *data = NULL; *n = 0;
    if (!s->fetch) return RGPU_ERR_MISSING_BLOB;
    char lim[160];
    uint64_t room = rgpu_session_room(s, lim, sizeof lim), max = size < room ? size : room;
    rgpu_status st = s->fetch(s->fetch_ud, h, max, data, n);
    if (st == RGPU_ERR_LIMIT || (st == RGPU_ERR_TOO_LARGE && *n > max)) {
        char hex[33];
        rgpu_hash_hex(h, hex);
        if (*n > size && size < room)
            return rgpu_op_fail(why, whylen, RGPU_ERR_BAD_ARG, "blob %.12s has %zu bytes, its record says %llu", hex, *n,
                                (unsigned long long)size);
        return rgpu_op_fail(why, whylen, RGPU_ERR_LIMIT, "blob %.12s of %zu bytes would pass %s", hex, *n, lim);
    }
    if (st) return st;
    rgpu_hash got = rgpu_hash_bytes(*data, *n);
    if (!rgpu_hash_eq(&got, h)) { free(*data); *data = NULL; return RGPU_ERR_BAD_CHECKSUM; }
    return RGPU_OK;
}

/* The blob of size bytes a record names (an UPLOAD's bytes, a file op's
 * path): kept, or fetched and kept. A blob refused for a memory limit is
 * remembered, so its record fails at once with the reason instead of asking
 * the client for it again. */
rgpu_status rgpu_sess_blob_get(rgpu_session *s, const rgpu_hash *h, uint64_t size, blobent **out, char *why, size_t whylen) {
    if ((*out = rgpu_sess_blob_find(s, h))) {   /* pushed, or kept: now it belongs to this chunk too */
        (*out)->gen = s->blob_gen;
        return RGPU_OK;
    }
    if (u64map_get(&s->refused, rgpu_sess_blob_key(h))) {
        return rgpu_op_fail(why, whylen, RGPU_ERR_LIMIT, "%s", s->refused_why);
    }
    uint8_t *data;
    size_t n;
    char bad[sizeof s->refused_why];
    rgpu_status st = rgpu_sess_fetch_checked(s, h, size, &data, &n, bad, sizeof bad);
    if (st == RGPU_ERR_BAD_ARG) return rgpu_op_fail(why, whylen, st, "%s", bad);
    if (st == RGPU_ERR_LIMIT) snprintf(s->refused_why, sizeof s->refused_why, "%s", bad);
    if (!st) {
        st = rgpu_session_put_blob(s, h, data, n);
        if (st == RGPU_ERR_LIMIT)
            rgpu_session_room(s, s->refused_why, sizeof s->refused_why);
    }
    if (st == RGPU_ERR_LIMIT) {
        u64map_put(&s->refused, rgpu_sess_blob_key(h), (void *)1);
        return rgpu_op_fail(why, whylen, st, "%s", s->refused_why);
    }
    if (st) return st;
    *out = rgpu_sess_blob_find(s, h);
    return *out ? RGPU_OK : RGPU_ERR_MISSING_BLOB;
}

/* ---------------------------------------------------------------------------
 * Results of WAIT ops, kept until the client's WAIT takes them. Their bytes
 * are taken from the session's memory first (rgpu_sess_take_bytes, a
 * download) and given back when the result is taken or dropped. */
static void result_drop(rgpu_session *s, result *r) {
    rgpu_sess_mem_give(s, r->n, true);
    free(r->data);
    free(r);
}

rgpu_status rgpu_sess_store_result(rgpu_session *s, uint64_t idx, uint8_t *data, size_t n) {
    result *res = calloc(1, sizeof *res);
    if (!res) { free(data); rgpu_sess_mem_give(s, n, true); return RGPU_ERR_NOMEM; }
    res->data = data; res->n = n;
    result *old = u64map_del(&s->results, idx + 1);
    if (old) result_drop(s, old);
    if (!u64map_put(&s->results, idx + 1, res)) { result_drop(s, res); return RGPU_ERR_NOMEM; }
    return RGPU_OK;
}

uint8_t *rgpu_sess_take_bytes(rgpu_session *s, size_t n, rgpu_status *st, char *why, size_t whylen) {
    if ((*st = rgpu_sess_mem_take(s, n, true, "a result", why, whylen))) return NULL;
    uint8_t *p = malloc(n ? n : 1);
    if (!p) { rgpu_sess_mem_give(s, n, true); *st = RGPU_ERR_NOMEM; }
    return p;
}

/* ---------------------------------------------------------------------------
 * Errors */
/* The failure of record idx (op; rec: template record + 1 inside a CALL, 0
 * outside) into the error slot. */
static void op_fail_msg(rgpu_session *s, uint64_t idx, int op, uint32_t rec, rgpu_status st, const char *why) {
    s->err_status = st;
    s->err_op = idx;
    if (rec)   /* a record of the template a CALL runs */
        snprintf(s->err_msg, sizeof s->err_msg, "op %llu (%s) failed: template record %u (%s): %s%s%s",
                 (unsigned long long)idx, rgpu_op_name(RGPU_OP_CALL), rec - 1, rgpu_op_name(op),
                 rgpu_status_str(st), why && *why ? ": " : "", why ? why : "");
    else
        snprintf(s->err_msg, sizeof s->err_msg, "op %llu (%s) failed: %s%s%s",
                 (unsigned long long)idx, rgpu_op_name(op), rgpu_status_str(st),
                 why && *why ? ": " : "", why ? why : "");
}

rgpu_status rgpu_sess_op_fail(rgpu_session *s, uint64_t idx, int op, rgpu_status st, const char *why) {
    if (s->in_call) s->call_fail++;
    if (!s->err_status) op_fail_msg(s, idx, op, s->in_call ? s->call_rec + 1 : 0, st, why);
    return st;
}

void rgpu_sess_dev_error(rgpu_session *s, const rgpu_dev_error *d) {
    char why[RGPU_MAX_ERROR_MSG];
    rgpu_dev_error_format(d, why, sizeof why);
    if (!s->err_status || s->err_op > d->op) op_fail_msg(s, d->op, d->opcode, (uint32_t)d->rec, RGPU_ERR_BAD_ARG, why);
    for (size_t i = 0; i < s->tensors.cap; i++) {
        tensor *t = s->tensors.keys[i] ? s->tensors.vals[i] : NULL;
        if (t && t->st && t->st->wr > d->op && !t->poisoned) { t->poisoned = true; t->poison_op = d->op; }
    }
}

void rgpu_sess_dev_err_fetch(rgpu_session *s) {
    if (s->dev_err) s->b->err_fetch(s->b, s->dev_err);
}

void rgpu_sess_dev_err_take(rgpu_session *s, rgpu_status waited) {
    rgpu_dev_error d;
    if (s->dev_err && !waited && s->b->err_read(s->b, s->dev_err, &d)) rgpu_sess_dev_error(s, &d);
}

void rgpu_sess_dev_err_poll(rgpu_session *s) {
    if (!s->dev_err) return;
    rgpu_sess_dev_err_fetch(s);
    rgpu_sess_dev_err_take(s, s->b->sync(s->b));
}
