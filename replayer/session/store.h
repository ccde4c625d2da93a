/* store.h — the session's tables and state (store.c), below both the record
 * executor (session.c) and templates/CALL/graphs (graph.c): storages,
 * tensors, the upload blob cache, results, memory accounting and the error
 * slot. Not an API: only replayer/session/ includes it.
 *
 * Layers: session.c -> graph.c -> store.c (and session.c -> store.c). The
 * one call back up is the CALL recursion, through s->run_record. */
#ifndef RGPU_SESSION_STORE_H
#define RGPU_SESSION_STORE_H

#include "session.h"
#include "u64map.h"
#include "op/error.h"

typedef struct storage {
    uint64_t sid;
    void *data;
    uint64_t nbytes;
    uint32_t refs;            /* tensors over this storage */
    uint32_t pins;            /* a graphed call's holds on a bound storage (graph.c): its
                                 bytes outlive its last tensor until the call is done */
    bool borrowed;            /* data is a graph instance's static buffer: not freed with it */
    bool orphan;              /* borrowed from an instance since released: the buffer is its own now
                                 (freed with it; not counted against the limits, as it never was) */
    void *lender;             /* an output slot (graph.c gslot) whose buffer it borrows, while that
                                 instance lives: the slot's next replay moves it out first */
    uint64_t wr;              /* 1 + the latest record whose check was left on the device
                                 (backend.h dev_checked) these bytes may depend on, 0: none;
                                 a failure found at a wait poisons what depends on it or later */
    struct storage *next_free;  /* in the session's pool of spare structs */
} storage;

typedef struct rgpu_spares { void *head; uint32_t n; } rgpu_spares;   /* store.c */

typedef struct tensor {
    uint64_t tid;
    storage *st;              /* NULL when poisoned at definition */
    uint8_t dtype, ndim;
    int64_t offset;
    int64_t sizes[RGPU_MAX_DIMS], strides[RGPU_MAX_DIMS];
    bool poisoned;
    uint64_t poison_op;       /* the failed op that poisoned it */
    struct tensor *next_free; /* in the session's pool of spare structs */
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

struct tplent;
struct gcall;

struct rgpu_session {
    rgpu_backend *b;
    rgpu_session_limits lim;
    rgpu_blob_fetch_fn fetch;
    void *fetch_ud;
    u64map tensors, storages, blobs, results;
    /* spare tensor and storage structs (rgpu_sess_tensor_new): a steady
     * training step defines and frees the same number each step, so no
     * record allocates one */
    rgpu_spares spare_t, spare_sg;
    /* the chunk rgpu_session_check_chunk accepted last, its records decoded
     * into pk (session.c: packed, reused from chunk to chunk) up to a cap;
     * records after pk_n are decoded from raw at pk_raw_off when run */
    struct {
        const uint8_t *raw;
        size_t n, pk_len, pk_cap, pk_raw_off;
        uint64_t first;
        uint32_t count, pk_n;
        uint8_t *pk;
        bool valid;
    } ck;
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
    const struct tplent *call_tpl;
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
    rgpu_op_profile *prof;    /* per-op times (rgpu_session_set_profile), or NULL */
    /* The record executor (session.c's run_record): graph.c runs a CALL's
     * template records through it, the one call from below back up into
     * session.c (set by rgpu_session_new). force_poison: run r as if an
     * input were poisoned by poison_op. */
    void (*run_record)(rgpu_session *s, const rgpu_record *r, uint64_t idx, bool force_poison, uint64_t poison_op);
    /* server folders (rgpu_session_set_files; fileops.c) */
    rgpu_files *files;        /* NULL: none exposed */
    bool files_dry;           /* SAVE_ZIP computes its size and hash, writes nothing */
    u64map read_paths;        /* path blob key -> 1: the files FROM_FILE read since the last checkpoint */
    bool rewrote_read;        /* a SAVE_ZIP replaced one of them (rgpu_session_take_rewrote) */
    bool (*written)(void *ud, uint64_t op);   /* rebuilding (rgpu_session_set_rebuild), or NULL */
    void *written_ud;
    rgpu_status stop_status;  /* a rebuild that must not go on: run_chunk returns it */
    char stop_why[RGPU_MAX_ERROR_MSG + 1];
    /* the backend's device error word (backend.h err_new; NULL: checks on the
     * host) and the serial of the last check named to it */
    void *dev_err;
    uint64_t dev_seq;
    bool dev_checked;         /* the record running left a check to the word */
    /* first failure since the last take_result (a RESULT's message holds at most RGPU_MAX_ERROR_MSG bytes) */
    int err_status;
    uint64_t err_op;
    char err_msg[RGPU_MAX_ERROR_MSG + 1];
};

/* ---------------------------------------------------------------------------
 * store.c */
/* Take n bytes from the session's limits (host: also from the pool); on
 * RGPU_ERR_LIMIT why names the limit. mem_give returns them. */
rgpu_status rgpu_sess_mem_take(rgpu_session *s, uint64_t n, bool host, const char *what, char *why, size_t whylen);
void rgpu_sess_mem_give(rgpu_session *s, uint64_t n, bool host);
/* Storages of a host backend are host memory. */
static inline bool rgpu_sess_storage_host(const rgpu_session *s) { return !s->b->device_memory; }
/* Zeroed tensor and storage structs, from the session's spares when it has
 * some (NULL: out of memory); tensor_put/storage_put give one back. */
tensor *rgpu_sess_tensor_new(rgpu_session *s);
storage *rgpu_sess_storage_new(rgpu_session *s);
void rgpu_sess_tensor_put(rgpu_session *s, tensor *t);
void rgpu_sess_storage_put(rgpu_session *s, storage *sg);
void rgpu_sess_spares_free(rgpu_session *s);
/* A storage losing a tensor (freed with its last), a tensor leaving the table. */
void rgpu_sess_storage_unref(rgpu_session *s, storage *st);
/* graph.c: a storage borrowing an output slot's buffer is going away. */
void rgpu_sess_graph_storage_gone(rgpu_session *s, storage *sg);
/* A storage's last tensor gone is freed for the program at once (unknown id,
 * out of memory_stats); its bytes go back when the last pin does too. */
void rgpu_sess_storage_unpin(rgpu_session *s, storage *st);
void rgpu_sess_tensor_drop(rgpu_session *s, tensor *t);
/* Blobs and templates share one key: the first 8 hash bytes (never 0). */
uint64_t rgpu_sess_blob_key(const rgpu_hash *h);
blobent *rgpu_sess_blob_find(rgpu_session *s, const rgpu_hash *h);
/* Drop the oldest blobs until those kept fit in `keep` bytes, sparing the
 * ones fetched for the chunk about to run (gen == blob_gen) unless all. */
void rgpu_sess_blob_evict_to(rgpu_session *s, uint64_t keep, bool all);
/* Blob h through the fetch callback, bounded by the session's room (RGPU_ERR_LIMIT) and by size, the
 * bytes the record naming it needs (RGPU_ERR_BAD_ARG; UINT64_MAX: any), both before it is inflated;
 * hash checked. */
rgpu_status rgpu_sess_fetch_checked(rgpu_session *s, const rgpu_hash *h, uint64_t size, uint8_t **data, size_t *n,
                                    char *why, size_t whylen);
/* The blob of size bytes a record names (see rgpu_sess_fetch_checked): kept,
 * or fetched and kept; one refused for a memory limit fails at once after. */
rgpu_status rgpu_sess_blob_get(rgpu_session *s, const rgpu_hash *h, uint64_t size, blobent **out, char *why, size_t whylen);
/* Keep data (n bytes, already taken from the session's memory; owned by the
 * session from here, on failure too) as the result of WAIT op idx. */
rgpu_status rgpu_sess_store_result(rgpu_session *s, uint64_t idx, uint8_t *data, size_t n);
/* n bytes for a result: taken from the session's memory, then allocated
 * (NULL with *st, why naming the limit, when either fails). */
uint8_t *rgpu_sess_take_bytes(rgpu_session *s, size_t n, rgpu_status *st, char *why, size_t whylen);
/* Record op idx as failed (the first failure is reported at the next wait). */
rgpu_status rgpu_sess_op_fail(rgpu_session *s, uint64_t idx, int op, rgpu_status st, const char *why);
/* At a wait: before its download or sync, dev_err_fetch; after it (waited:
 * its status), dev_err_take reports a failure the device error word holds
 * (rgpu_sess_dev_error). dev_err_poll does all three with a sync of its own. */
void rgpu_sess_dev_err_fetch(rgpu_session *s);
void rgpu_sess_dev_err_take(rgpu_session *s, rgpu_status waited);
void rgpu_sess_dev_err_poll(rgpu_session *s);
/* A check that failed on the device at record d->op: reported at this wait
 * unless an earlier op's failure is, and every tensor whose bytes depend on
 * that record's check or a later one's is poisoned by it (computed from
 * unchecked data, or skipped: storage.wr). */
void rgpu_sess_dev_error(rgpu_session *s, const rgpu_dev_error *d);

#endif
