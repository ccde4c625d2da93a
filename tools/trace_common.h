/* trace_common.h — what rgpu-replay, rgpu-diff and rgpu-trace share: opening
 * a .rgt and walking its stream with every check a bad file needs, the blob
 * fetch callback, the recorded wait results, element-wise comparison with
 * per-dtype tolerances, and small printing helpers.
 *
 * Private to tools/: not part of any library. Functions that can fail return
 * rgpu_status and leave a one-line reason in tc_trace.err (or print it, where
 * they say so); they never exit. */
#ifndef RGPU_TOOLS_TRACE_COMMON_H
#define RGPU_TOOLS_TRACE_COMMON_H

#include "session.h"
#include "dataopts.h"
#include "memlimits.h"

#include <stdio.h>

/* ---------------------------------------------------------------------------
 * An open trace */
typedef struct tc_trace {
    const char *path;
    rgpu_rgt *rgt;            /* the container API: stream, blobs */
    void *db;                 /* a second, read-only sqlite3 handle: meta, results, sizes */
    uint64_t n_stream;        /* stream entries */
    uint64_t n_ops;           /* sum of the stream's op counts */
    /* walking the stream (tc_next_chunk) */
    uint64_t next_seq, next_op;
    uint64_t raw_bytes, blob_bytes, n_blobs_fetched;
    /* the fetch callback saw a missing/corrupt blob: the trace is bad */
    rgpu_status blob_err;
    char err[512];
} tc_trace;

/* Open path read-only (rgpu_rgt_open's magic/version/op-table checks, then the
 * schema). On failure *out is NULL and err (errlen bytes) holds one line. */
rgpu_status tc_open(const char *path, tc_trace **out, char *err, size_t errlen);
void tc_close(tc_trace *t);

/* Meta value for key into out; false when absent. */
bool tc_meta(tc_trace *t, const char *key, char *out, size_t outlen);

/* One stream entry, decompressed and checked: its frame, its content hash,
 * that it starts where the previous one ended, and that it decodes into
 * exactly count records. raw is malloc'd (caller frees). Returns RGPU_OK with
 * *raw == NULL after the last entry. */
typedef struct tc_chunk {
    uint64_t seq, first_op;
    uint32_t count;
    rgpu_hash hash;
    uint8_t *raw;
    size_t raw_len, frame_len;
} tc_chunk;
rgpu_status tc_next_chunk(tc_trace *t, tc_chunk *c);

/* The stream record by record, over tc_next_chunk (every chunk checked as it
 * says). Start from a zeroed tc_walk; each RGPU_OK call with *more true gives
 * the next record in r, its op index in idx and its encoded bytes in
 * bytes/n_bytes (r's pointers and bytes point into the current chunk: valid
 * until the next call). *more false: the stream has ended. tc_walk_end frees
 * the chunk held (after an early stop too). */
typedef struct tc_walk {
    tc_chunk c;
    size_t off;
    uint32_t k;
    uint64_t chunks;          /* chunks read so far */
    uint64_t idx;
    const uint8_t *bytes;
    size_t n_bytes;
} tc_walk;
rgpu_status tc_next_record(tc_trace *t, tc_walk *w, rgpu_record *r, bool *more);
void tc_walk_end(tc_walk *w);

/* Session blob callback over a tc_trace (ud): reads, decompresses and checks
 * the blob. A failure is also kept in t->blob_err/t->err, so the tool can
 * tell a bad trace from a failing op. */
rgpu_status tc_fetch_blob(void *ud, const rgpu_hash *h, uint64_t max_n, uint8_t **data, size_t *n);

/* An op status that no honest recording can produce: a tensor definition
 * out of bounds, over the size bound, overflowing, or naming an id that is
 * not there (or already is). A replay that meets one stops: the trace is
 * malformed (exit 2), not a run whose op failed. A file op's read past a
 * file's end, list over its bound or manifest naming a tensor that is gone
 * are that op's own failures (the live run had them too), not malformed. */
bool tc_malformed(int op, int status);

/* Recorded wait results, sorted by op index. data points into the array's
 * own storage. */
typedef struct tc_result { uint64_t op; int status; uint8_t *data; size_t n; } tc_result;
typedef struct tc_results { tc_result *v; size_t n; } tc_results;
rgpu_status tc_load_results(tc_trace *t, tc_results *out);
void tc_results_free(tc_results *r);

/* Container statistics (rgpu-trace info). */
typedef struct tc_stats {
    uint64_t stream, stream_ops, stream_raw, stream_frame;
    uint64_t chunks, chunk_raw, chunk_frame;
    uint64_t blobs, blob_raw, blob_frame;
    uint64_t results, results_failed;
} tc_stats;
rgpu_status tc_stats_get(tc_trace *t, tc_stats *s);
/* The stream table without reading frames: every entry names a stored chunk
 * and starts where the previous one ended (cheap; rgpu-trace info). */
rgpu_status tc_check_stream(tc_trace *t);
/* Calls fn for each meta row, in key order. */
rgpu_status tc_meta_each(tc_trace *t, void (*fn)(void *ud, const char *k, const char *v), void *ud);

/* ---------------------------------------------------------------------------
 * Memory limits: rgpu-server's (memlimits.h), so that a trace the server would
 * refuse is refused offline too, before a blob is inflated. */
typedef struct tc_limits {
    rgpu_limit_opts opts;         /* from rgpu_limits_option while parsing argv */
    rgpu_mem_pool pool;           /* --max-memory: all the tool's sessions together */
    rgpu_session_limits lim;      /* for rgpu_session_new */
} tc_limits;
/* After parsing: the defaults filled in, pool and lim set (lim points at pool). */
void tc_limits_init(tc_limits *l);
/* The tools' --help paragraph on the limit options. */
#define TC_LIMITS_USAGE \
    "  --max-memory BYTES, --max-session-bytes BYTES, --max-storages N\n" \
    "                   memory limits, rgpu-server's: host memory of all sessions\n" \
    "                   (default 3/4 of the machine's, the cgroup's or the rlimit's),\n" \
    "                   bytes held per session (default 3/4 of --max-memory, 0: none),\n" \
    "                   live storages per session (default none). An op over them\n" \
    "                   stops the run with exit 2, naming the limit; a blob is refused\n" \
    "                   before it is inflated. Sizes take K, M, G suffixes.\n"
/* An op status that stops a replay: RGPU_ERR_LIMIT (the run needs more memory
 * than the limits give; raising them replays it). */
bool tc_over_limit(int status);

/* ---------------------------------------------------------------------------
 * Server folders: rgpu-server's --data/--data-rw and RGPU_REMOTE_DATA
 * (dataopts.h), so that a trace's file ops find the files the live run read.
 * The tools never write: SAVE_ZIP runs dry (its size and hash computed, so
 * --verify still compares the checkpoint's bytes). */
#define TC_DATA_USAGE \
    "  --data [NAME=]DIR, --data-rw [NAME=]DIR\n" \
    "                   the folders rgpu-server exposed (its options, repeatable;\n" \
    "                   also RGPU_REMOTE_DATA, entries ro:[NAME=]DIR or rw:[NAME=]DIR\n" \
    "                   separated by ';'): the trace's file ops read there, checking\n" \
    "                   each file's size and hash against the recorded ones; nothing\n" \
    "                   is written (a checkpoint's zip is only hashed).\n"
/* A file the run read has changed since (RGPU_ERR_CHANGED): the replay
 * cannot reproduce the run and stops, naming the file. */
bool tc_input_changed(int status);

/* ---------------------------------------------------------------------------
 * Comparison */
typedef struct tc_tol { double rtol, atol; bool exact; } tc_tol;
/* f32 1e-5/1e-6, f64 1e-12/1e-12, f16 1e-3/1e-5, bf16 1e-2/1e-4; ints and bool exact. */
tc_tol tc_default_tol(int dtype);

typedef struct tc_cmp {
    uint64_t n, n_bad, n_nonfinite_mismatch;
    int64_t first_bad;          /* element index, -1 when none */
    double first_a, first_b;    /* values there */
    double max_abs, max_rel;    /* over finite pairs */
    double max_norm;            /* max |a-b| / (atol + rtol*|b|); inf for bitwise or NaN/Inf disagreement */
} tc_cmp;
/* Compare n elements of dtype (a against reference b). An element is bad when
 * its normalised error exceeds 1, when NaN/Inf status differs, or (exact, and
 * always for integer dtypes) when its bits differ. */
void tc_compare(int dtype, const void *a, const void *b, size_t n, tc_tol tol, tc_cmp *c);
/* Element i of a buffer of dtype as double. */
double tc_elem(int dtype, const void *p, size_t i);

/* ---------------------------------------------------------------------------
 * Printing and arguments */
/* "PROG: " fmt-with-arg " (see PROG --help)" on stderr; returns 2, the usage exit status. */
int tc_usage_error(const char *prog, const char *fmt, const char *arg);
double tc_now(void);                                   /* monotonic seconds */
const char *tc_bytes(uint64_t n, char buf[32]);        /* "1.2 MiB" */
const char *tc_rate(double per_s, char buf[32]);       /* "12.3k" */
void tc_json_str(FILE *f, const char *s);              /* a JSON string literal */
void tc_json_num(FILE *f, double v);                   /* null when not finite */
bool tc_parse_u64(const char *s, uint64_t *v);
bool tc_parse_f64(const char *s, double *v);
/* "float32[4,3]" for a tensor of the session; "?" forms when unknown. */
void tc_tensor_desc(rgpu_session *s, uint64_t tid, char *out, size_t outlen);
int tc_op_by_name(const char *name);                   /* -1 when no such op */

/* A progress bar on stderr, only when it is a terminal and the run is long
 * (drawn after half a second, at most ten times a second). */
typedef struct tc_progress { bool on; double t0, last; const char *what; } tc_progress;
void tc_progress_start(tc_progress *p, const char *what, bool enabled);
void tc_progress_update(tc_progress *p, uint64_t done, uint64_t total);
void tc_progress_end(tc_progress *p);

#endif
