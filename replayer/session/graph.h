/* graph.h — templates, CALL and graphs (graph.c), for the record executor
 * (session.c) above it; both stand on the session's tables (store.h). Not an
 * API: only replayer/session/ includes it. */
#ifndef RGPU_SESSION_GRAPH_H
#define RGPU_SESSION_GRAPH_H

#include "store.h"

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

_Static_assert(sizeof(uintptr_t) >= sizeof(uint64_t), "call-local ids are kept in pointer-sized map values");

/* Ids the server makes for a call's template-local tensors and storages:
 * the top bit set, which client ids never have (FORMAT.md §5.1). */
#define LOCAL_ID_BIT (1ull << 63)

/* ---------------------------------------------------------------------------
 * One record */
typedef struct ctx {
    rgpu_session *s;
    const rgpu_record *r;
    uint64_t idx;
    char why[RGPU_MAX_ERROR_MSG + 1];   /* the failure, as a RESULT carries it */
} ctx;

/* A record's failure: its message into c->why, status st returned. */
#define RECORD_FAIL(c, st, ...) rgpu_op_fail((c)->why, sizeof (c)->why, (st), __VA_ARGS__)

/* ---------------------------------------------------------------------------
 * graph.c, for session.c */
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
/* In a replay's bookkeeping, at the exec e its graph does: whether that exec
 * left a check to the device error word when captured (its outputs' taint);
 * a random exec's (seed, offset) pair is kept for the launch. */
bool rgpu_sess_graph_replay_exec(rgpu_session *s, const rgpu_exec *e);
void *rgpu_sess_graph_storage_data(rgpu_session *s, storage *sg, int *slot);
void rgpu_sess_graph_storage_made(rgpu_session *s, storage *sg, int slot);
void rgpu_sess_graph_log_exec(rgpu_session *s, const rgpu_exec *e, tensor **outs, const tensor **ins);

#endif
