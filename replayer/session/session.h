/* session.h — one client's server state and the record executor.
 *
 * A session holds storages (device buffers by id) and tensors (a storage
 * plus dtype/sizes/strides/offset, by id; views are just more tensors over
 * the same storage). It executes decoded records in op-index order on a
 * backend. Used by rgpu-server per connection and by the offline tools. */
#ifndef RGPU_SESSION_H
#define RGPU_SESSION_H

#include <stdio.h>
#include "backend.h"
#include "files.h"

typedef struct rgpu_session rgpu_session;

/* Called when an UPLOAD (or a CALL, for its template) names a blob the session lacks. Must return the
 * bytes (malloc'd; the session takes ownership) or an error status. max_n is the room the session has
 * left (its limit and the pool's): a blob that inflates to more must be refused *before* inflating,
 * with RGPU_ERR_LIMIT and *n set to its size (the session names the limit in the op's error). */
typedef rgpu_status (*rgpu_blob_fetch_fn)(void *ud, const rgpu_hash *h, uint64_t max_n, uint8_t **data, size_t *n);

/* Host memory shared by the sessions of one process (rgpu-server
 * --max-memory). Every byte a session holds in host memory (storages of a
 * host backend, uploaded blobs, templates, results not yet taken, download
 * temporaries) is taken from the pool before it is allocated and given back
 * when freed; the server takes its message buffers from it too. Thread-safe.
 * limit 0: unbounded (only counted). */
typedef struct rgpu_mem_pool {
    uint64_t limit;
    uint64_t used, peak;          /* atomics: read with rgpu_mem_pool_used */
} rgpu_mem_pool;
/* false (and nothing taken) when n more bytes would pass the limit. */
bool rgpu_mem_pool_take(rgpu_mem_pool *p, uint64_t n);
void rgpu_mem_pool_give(rgpu_mem_pool *p, uint64_t n);
uint64_t rgpu_mem_pool_used(const rgpu_mem_pool *p);

typedef struct rgpu_session_limits {
    uint64_t max_storage_bytes;   /* one storage */
    uint64_t max_blob_cache;      /* bytes of uploaded blobs kept for dedupe after their chunk ran */
    uint64_t max_storages;        /* live storages; 0 = no limit */
    uint64_t max_total_bytes;     /* bytes of everything the session holds: storages, blobs,
                                     templates, results not yet taken; 0 = no limit */
    rgpu_mem_pool *pool;          /* shared host-memory pool, or NULL */
    uint64_t max_templates;       /* parsed templates kept (0: 1024); evicted ones are fetched again */
    uint64_t max_template_bytes;  /* their bytes (0: 256 MiB) */
    bool graphs;                  /* replay templates as captured graphs where the backend
                                     has graph hooks (rgpu-server --graphs on); off: never */
} rgpu_session_limits;

rgpu_session *rgpu_session_new(rgpu_backend *b, const rgpu_session_limits *lim);
void rgpu_session_free(rgpu_session *s);
void rgpu_session_set_fetch(rgpu_session *s, rgpu_blob_fetch_fn fn, void *ud);

/* Next op index the session expects (= number of ops applied). */
uint64_t rgpu_session_applied(const rgpu_session *s);

/* Execute the records of one decoded chunk. first_op must equal applied.
 * A malformed record (decode error) stops the chunk and returns its status:
 * the caller treats that as a protocol error. A failing op does not: it
 * poisons its outputs and is reported by the next take_result. */
rgpu_status rgpu_session_run_chunk(rgpu_session *s, const uint8_t *raw, size_t n,
                                   uint64_t first_op, uint32_t count);
/* Asked between the records of a chunk: when fn returns true the rest of
 * the chunk is not run and run_chunk returns RGPU_ERR_TIMEOUT — the session
 * is then mid-chunk and must end (rgpu-server: its client has been gone
 * longer than --grace). NULL: never. */
void rgpu_session_set_cancel(rgpu_session *s, bool (*fn)(void *ud), void *ud);

/* Time per op (rgpu-replay --profile): when set, run_chunk adds each
 * record's wall time (ns, CLOCK_MONOTONIC) and count to p, indexed by op
 * (a CALL's time includes its template's records). On the cpu backend that
 * is the kernel's time; on cuda, the launch's. NULL (the default): not timed. */
typedef struct rgpu_op_event {
    uint64_t idx;            /* the record's op index */
    uint64_t t0_ns, t1_ns;   /* CLOCK_MONOTONIC: the host's span */
    uint64_t dev0, dev1;     /* the backend's timer marks around it (timer_mark; 0: none) */
    int op;
} rgpu_op_event;
typedef struct rgpu_op_profile {
    uint64_t ns[RGPU_OP_COUNT], count[RGPU_OP_COUNT];
    /* a timeline (rgpu-replay --profile FILE.json): with timeline set, every
     * record's span is appended to events (grown with realloc; records that
     * find no memory are counted in dropped); the owner frees events */
    bool timeline;
    bool device_marks;       /* and the backend's timer marks around each record (one session per backend) */
    rgpu_op_event *events;
    size_t n_events, cap_events;
    uint64_t dropped;
} rgpu_op_profile;
void rgpu_session_set_profile(rgpu_session *s, rgpu_op_profile *p);
rgpu_op_profile *rgpu_session_profile(const rgpu_session *s);   /* the one set, or NULL */

/* p's timeline as a Chrome trace (Perfetto, chrome://tracing; the JSON
 * object format) into f, which it closes: process `who` (on backend b), a
 * row of host spans (an X event per record named by its op, its index in
 * args.op; microseconds from the first record, or with absolute_ts of
 * CLOCK_MONOTONIC, the clock of the client's RGPU_PROFILE spans) and, when the events carry
 * timer marks, a row of b's device spans (after a sync of b; the marks are
 * released). `label` goes to otherData.label. Nonzero when f could not be
 * written. */
int rgpu_op_profile_write_chrome(const rgpu_op_profile *p, FILE *f, const char *who, const char *label,
                                 rgpu_backend *b, bool absolute_ts);

/* Server folders (rgpu-server --data/--data-rw; FORMAT.md §7.5) for the file
 * ops FILE_STAT, FILE_LIST, FROM_FILE, ZIP_INDEX and SAVE_ZIP: f is shared,
 * not owned (NULL, the default: every file op fails with RGPU_ERR_PATH,
 * nothing exposed). dry_run_writes (the offline tools): SAVE_ZIP computes
 * its file's size and hash and writes nothing. */
void rgpu_session_set_files(rgpu_session *s, rgpu_files *f, bool dry_run_writes);

/* Rebuilding the session from its journal (rgpu-server restarted on its
 * --journal; written NULL: off). A SAVE_ZIP op for which written(ud, op) is
 * true -- its result was journaled, so its file was written -- is not run
 * again and leaves no result (the journal's is the answer). A FROM_FILE
 * whose file changed or can no longer be read (RGPU_ERR_CHANGED,
 * RGPU_ERR_PATH) stops run_chunk, which returns that status; the session is
 * then not the one the journal describes and must be freed.
 * rgpu_session_stop_reason names the op, the file and what differs ("" when
 * nothing stopped it). */
void rgpu_session_set_rebuild(rgpu_session *s, bool (*written)(void *ud, uint64_t op), void *ud);
const char *rgpu_session_stop_reason(const rgpu_session *s);
/* True once after a SAVE_ZIP replaced a file that a FROM_FILE of this
 * session read since its last checkpoint (rgpu.load then rgpu.save of one
 * name): a rebuild from the journal would find that file changed, so
 * rgpu-server checkpoints the session into its journal now. */
bool rgpu_session_take_rewrote(rgpu_session *s);

/* The checks run_chunk makes before it runs anything: first_op == applied,
 * every record decodes, count records. why names the failing record. The
 * chunk passed is the session's checked chunk: its records are kept decoded
 * for prefetch_checked and run_checked (raw must stay alive until then; a
 * chunk is decoded once). */
rgpu_status rgpu_session_check_chunk(rgpu_session *s, const uint8_t *raw, size_t n, uint64_t first_op,
                                     uint32_t count, char *why, size_t whylen);
/* prefetch and run_chunk on the checked chunk, from its decoded records;
 * RGPU_ERR_SEQUENCE when there is none (none passed check_chunk since the
 * last run). run_checked runs it once. */
rgpu_status rgpu_session_prefetch_checked(rgpu_session *s);
rgpu_status rgpu_session_run_checked(rgpu_session *s);

/* Before running a chunk: fetch (through the fetch callback) every blob its
 * UPLOAD and file-op records name that the session lacks, every template its CALL records
 * name, and the blobs of the UPLOAD records inside those templates, so that a
 * connection lost while fetching leaves the chunk unapplied rather than
 * half-applied. The chunk must decode (run_chunk checks it again); returns
 * the fetch's status. A fetched blob that is no valid template is not an
 * error here: the CALL fails when it runs. */
rgpu_status rgpu_session_prefetch(rgpu_session *s, const uint8_t *raw, size_t n);

/* Keep an uploaded blob (the session owns data afterwards). Its hash is
 * checked: RGPU_ERR_BAD_CHECKSUM when it doesn't match. */
rgpu_status rgpu_session_put_blob(rgpu_session *s, const rgpu_hash *h, uint8_t *data, size_t n);
bool rgpu_session_has_blob(rgpu_session *s, const rgpu_hash *h);

/* Answer a wait for op: status is the first failure since the last answer
 * (err_op its index, msg its text) or RGPU_OK; when op is a WAIT-flag op its
 * result bytes go to *data (malloc'd, caller frees). op must be < applied. */
rgpu_status rgpu_session_take_result(rgpu_session *s, uint64_t op, int *status, uint64_t *err_op,
                                     char *msg, size_t msglen, uint8_t **data, size_t *n);

/* Execute one decoded record as op idx (idx must equal applied). Same
 * failure rules as run_chunk. Tools that step through a trace use this. */
rgpu_status rgpu_session_run_record(rgpu_session *s, const rgpu_record *r, uint64_t idx);

typedef struct rgpu_tensor_info {
    int dtype, ndim;
    int64_t sizes[RGPU_MAX_DIMS];
    bool poisoned;
    uint64_t poison_op;
} rgpu_tensor_info;

/* Metadata of tensor tid; RGPU_ERR_UNKNOWN_TENSOR when absent. */
rgpu_status rgpu_session_tensor_info(rgpu_session *s, uint64_t tid, rgpu_tensor_info *info);
/* A failure a data check left in the backend's device error word (backend.h
 * err_new), taken now with a sync of its own: reported at the next
 * take_result, its op's dependents poisoned. rgpu-diff calls it after every
 * record, so such a check fails at its own op, as on the cpu backend. */
void rgpu_session_check_device(rgpu_session *s);
/* Tensor tid's elements, contiguous in its dtype (malloc'd, caller frees).
 * A poisoned tensor gives RGPU_ERR_POISONED (a failure still in a device
 * error word is taken first, with a sync). */
rgpu_status rgpu_session_read_tensor(rgpu_session *s, uint64_t tid, uint8_t **data, size_t *n);
/* Overwrite tensor tid's elements (contiguous bytes in its dtype) through
 * its strides; clears its poison. */
rgpu_status rgpu_session_write_tensor(rgpu_session *s, uint64_t tid, const uint8_t *data, size_t n);

/* Checkpoint (server journals, FORMAT.md §7.3): the session's whole state
 * between chunks — storages (their bytes), tensors (views, poison), results
 * not yet taken, the pending error, the blob cache and templates — as bytes
 * appended to out, naming blobs by hash. Every blob it names is handed to
 * put (storage bytes, results, cached uploads, template blobs), so that
 * everything else a journal holds before this op can go. *state_bytes gets
 * the bytes of storages and results put. */
typedef rgpu_status (*rgpu_blob_put_fn)(void *ud, const rgpu_hash *h, const void *data, size_t n);
rgpu_status rgpu_session_checkpoint(rgpu_session *s, rgpu_blob_put_fn put, void *ud, rgpu_buf *out,
                                    uint64_t *state_bytes);
/* Load a checkpoint into a fresh session (applied == 0), its blobs through
 * the fetch callback; afterwards applied is the checkpoint's op. A
 * malformed checkpoint gives RGPU_ERR_BAD_TRACE. */
rgpu_status rgpu_session_restore(rgpu_session *s, const uint8_t *p, size_t n);

/* Bytes currently allocated for storages, and the peak. */
void rgpu_session_memory(const rgpu_session *s, uint64_t *allocated, uint64_t *peak);
/* Bytes the session holds in all (storages, blobs, templates, results: what
 * max_total_bytes bounds). */
uint64_t rgpu_session_held(const rgpu_session *s);
/* How many more bytes of host memory the session may take now (session limit
 * and pool together): a blob that inflates to more is refused before it is
 * inflated. why (when not NULL) gets the limit that binds, for an error. */
uint64_t rgpu_session_room(const rgpu_session *s, char *why, size_t whylen);
uint64_t rgpu_session_tensor_count(const rgpu_session *s);
/* Its live storage count. */
uint64_t rgpu_session_storage_count(const rgpu_session *s);
/* Templates kept (parsed, or remembered as bad) and their bytes. */
uint64_t rgpu_session_template_count(const rgpu_session *s);
uint64_t rgpu_session_template_bytes(const rgpu_session *s);

/* Graph replay of templates (limits.graphs; FORMAT.md §5.1): an execution
 * strategy that never changes a result. Counters since the session began. */
typedef struct rgpu_graph_stats {
    uint64_t calls;          /* CALLs run while graphs were on (poisoned ones excepted) */
    uint64_t replays;        /* of them, replayed as a captured graph */
    uint64_t captures;       /* graphs captured */
    uint64_t refusals;       /* captures that failed or templates that cannot be graphed */
    uint64_t input_copies;   /* bound input storages copied into static buffers before replays */
    uint64_t output_copies;  /* outputs copied out of static buffers: an earlier call's output still
                                lived in the buffer (moved out first) or a fresh storage took the copy */
    uint64_t outputs_lent;   /* outputs that took their static buffer itself (no copy) */
    uint64_t instances;      /* graph instances held now */
    uint64_t bytes;          /* their static buffers (not in rgpu_session_memory) */
    char last_refusal[200];  /* why the last refusal happened ("" when none) */
} rgpu_graph_stats;
void rgpu_session_graph_stats(const rgpu_session *s, rgpu_graph_stats *st);

/* The session tensors a CALL record stands for, as an op's outputs: the
 * bindings of the bind ids its template defines or writes (output tensor
 * definitions, new or existing; not EMPTY's, whose bytes are undefined), in
 * template order, each once. Up to max
 * ids go to tids, *n gets the count (which may exceed max). Fetches the
 * template when the session lacks it. RGPU_ERR_BAD_ARG when r is not a
 * well-formed CALL for its template; the template's parse status when it is
 * not one. */
rgpu_status rgpu_session_call_outputs(rgpu_session *s, const rgpu_record *r, uint64_t *tids, size_t max, size_t *n);

#endif
