/* session_internal.h — what session.c (records, tables, blobs, results,
 * checkpoints) and graph.c (templates, CALL, graphs) share: the session's
 * tables and the functions each side calls in the other. Not an API: only
 * these two files include it. */
#ifndef RGPU_SESSION_INTERNAL_H
#define RGPU_SESSION_INTERNAL_H

#include "session.h"
#include "u64map.h"

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
 * One record */
typedef struct ctx {
    rgpu_session *s;
    const rgpu_record *r;
    uint64_t idx;
    char why[200];
} ctx;

/* ---- session.c, for graph.c */
/* Take n bytes from the session's limits (host: also from the pool); on
 * RGPU_ERR_LIMIT why names the limit. mem_give returns them. */
rgpu_status rgpu_sess_mem_take(rgpu_session *s, uint64_t n, bool host, const char *what, char *why, size_t whylen);
void rgpu_sess_mem_give(rgpu_session *s, uint64_t n, bool host);
void rgpu_sess_storage_unref(rgpu_session *s, storage *st);
void rgpu_sess_tensor_drop(rgpu_session *s, tensor *t);
/* Blobs and templates share one key: the first 8 hash bytes (never 0). */
uint64_t rgpu_sess_blob_key(const rgpu_hash *h);
blobent *rgpu_sess_blob_find(rgpu_session *s, const rgpu_hash *h);
/* Blob h through the fetch callback, bounded by the session's room, hash checked. */
rgpu_status rgpu_sess_fetch_checked(rgpu_session *s, const rgpu_hash *h, uint8_t **data, size_t *n, char *why,
                                    size_t whylen);
/* Record op idx as failed (the first failure is reported at the next wait). */
rgpu_status rgpu_sess_op_fail(rgpu_session *s, uint64_t idx, int op, rgpu_status st, const char *why);
/* Run one record (force_poison: as if an input were poisoned by poison_op). */
void rgpu_sess_run_record(rgpu_session *s, const rgpu_record *r, uint64_t idx, bool force_poison, uint64_t poison_op);

/* ---- graph.c, for session.c */
void rgpu_sess_tpl_free(rgpu_session *s, tplent *e);
/* The template named h: cached, among the upload blobs, or fetched; a blob
 * that is no template gives RGPU_OK with (*out)->status set. */
rgpu_status rgpu_sess_tpl_get(rgpu_session *s, const rgpu_hash *h, tplent **out);
/* Execute the CALL record c->r (record by record, or its graph). */
rgpu_status rgpu_sess_exec_call(ctx *c);
/* Hooks of the record executor while a graphed CALL runs (s->g set): the
 * call is being replayed (no exec); a storage's data from the instance's
 * static buffers (slot for storage_made, -1: none); an exec to log. */
bool rgpu_sess_graph_replaying(const rgpu_session *s);
void *rgpu_sess_graph_storage_data(rgpu_session *s, storage *sg, int *slot);
void rgpu_sess_graph_storage_made(rgpu_session *s, storage *sg, int slot);
void rgpu_sess_graph_log_exec(rgpu_session *s, const rgpu_exec *e, tensor **outs, const tensor **ins);

#endif
