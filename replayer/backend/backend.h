/* backend.h — what an executor backend (cpu, cuda, null) provides.
 *
 * The session layer (replayer/session/) owns storages and tensors and turns
 * each decoded record into one exec call on resolved views. A backend only
 * sees device pointers with dtype/sizes/strides; it never parses records.
 * Dispatch inside exec is one switch whose default returns UNSUPPORTED. */
#ifndef RGPU_BACKEND_H
#define RGPU_BACKEND_H

#include "rgpu_format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor as the kernel sees it. data already includes the storage offset. */
typedef struct rgpu_view {
    void *data;
    int dtype;
    int ndim;
    int64_t sizes[RGPU_MAX_DIMS];
    int64_t strides[RGPU_MAX_DIMS];   /* elements */
} rgpu_view;

/* One op invocation with everything resolved. Inputs may be NULL for an
 * absent optional tensor. args point into the record. */
typedef struct rgpu_exec {
    int op;
    int n_in, n_out, n_args;
    const rgpu_view *in[RGPU_MAX_IN];
    rgpu_view *out[RGPU_MAX_OUT];
    const rgpu_arg *args;
    /* Where a data-dependent check (an index or target out of range) records
     * a failure on a backend with device error words (err_new below): the
     * session's word (NULL: check on the host and fail exec, as the cpu
     * backend always does), the check's serial (increasing in stream order
     * within a session), the record's index and, inside a CALL, its template
     * record + 1 (0 outside). The backend sets *dev_checked (when not NULL)
     * to true when it left a check to the word: the outputs then depend on it. */
    void *dev_err;
    uint64_t dev_seq, idx;
    int32_t rec;
    bool *dev_checked;
    /* A random op captured into a graph: its (seed, offset) pair, two
     * uint64, in backend memory, read when its kernels run (the session
     * writes each call's pair there before the launch); the pair in its args
     * is then only the logged call's. NULL: the args' pair. */
    const uint64_t *philox;
} rgpu_exec;

/* A dev_seq with this bit is relative to the call a graph launch runs for
 * (err_call): a capture's checks get serials 1, 2, .. | RGPU_DEV_SEQ_REL and
 * report the record index err_call names. */
#define RGPU_DEV_SEQ_REL (1ull << 63)

/* What a device error word holds once a check failed (err_read). The message
 * is rgpu_dev_error_format's, the cpu backend's for the same failure. */
enum { RGPU_DEVERR_INDEX = 1, RGPU_DEVERR_TARGET = 2, RGPU_DEVERR_PLANE = 3, RGPU_DEVERR_ZERO_DIV = 4,
       RGPU_DEVERR_PROB = 5 };
typedef struct rgpu_dev_error {
    uint64_t op;          /* the failing record's index */
    int32_t opcode;       /* its op (a template's record inside a CALL) */
    int32_t rec;          /* template record + 1, 0 outside a CALL */
    int32_t kind;         /* RGPU_DEVERR_* */
    int32_t dim;
    int64_t value, bound; /* the bad value, the size it must stay below */
    const char *name;     /* the op's name in the message (a string literal) */
} rgpu_dev_error;

/* INDEX: "<name>: index <value> is out of bounds for dimension <dim> with
 * size <bound>"; TARGET: "<name>: Target <value> is out of bounds."; PLANE
 * (max-pool indices): "<name>: index <value> is out of bounds for a plane of
 * size <bound>"; ZERO_DIV (integer %, fmod, div): "<name>: ZeroDivisionError";
 * PROB (bernoulli's p tensor; value: the bad p's bytes, dim: its dtype): "<name>:
 * expected p_in >= 0 && p_in <= 1, got <p>". */
void rgpu_dev_error_format(const rgpu_dev_error *d, char *out, size_t n);

typedef struct rgpu_backend rgpu_backend;
typedef struct rgpu_backend_counters {
    uint64_t host_waits, device_allocs, device_frees, graph_launches;
} rgpu_backend_counters;
struct rgpu_backend {
    const char *name;
    void *ctx;
    /* Device memory. alloc returns NULL when out of memory. nbytes may be 0
     * (return a valid, unique, non-NULL pointer). */
    void *(*alloc)(rgpu_backend *b, size_t nbytes);
    void (*free)(rgpu_backend *b, void *p);
    /* Host <-> device bytes (contiguous). */
    rgpu_status (*upload)(rgpu_backend *b, void *dst, const void *src, size_t n);
    rgpu_status (*download)(rgpu_backend *b, void *dst, const void *src, size_t n);
    /* Run one op. On failure write a one-line reason into err. */
    rgpu_status (*exec)(rgpu_backend *b, const rgpu_exec *e, char *err, size_t errlen);
    rgpu_status (*sync)(rgpu_backend *b);
    /* True when exec can run op (over any dtype it accepts). */
    bool (*supports)(rgpu_backend *b, int op);
    void (*destroy)(rgpu_backend *b);

    /* Graphs: record a run of exec calls once, replay it as one launch.
     * All four optional (NULL: the backend has none; the session then runs
     * every call record by record). The session's contract:
     * - between graph_begin and graph_end the calling thread makes only exec
     *   calls (no alloc, free, upload, download, sync); each records its work
     *   instead of doing it: nothing is computed until graph_launch. An exec
     *   that cannot be recorded (it needs the host: a device-to-host copy, a
     *   sync, a host-side decision on data) returns an error; the capture is
     *   then spoiled and graph_end says so. Other threads' calls on the same
     *   backend are unaffected (they wait or run beside it, never recorded).
     * - graph_end always ends the capture. RGPU_OK: *graph is an executable
     *   graph that replays the recorded work reading and writing exactly the
     *   addresses the execs were given. RGPU_ERR_UNSUPPORTED: this sequence
     *   can never be captured (err says why); any other status: it could not
     *   be captured this time (e.g. NOMEM), a later try may succeed.
     * - graph_launch runs it in order after earlier work, like one exec.
     * - graph_destroy releases it (after any launch of it has run: safe to
     *   call right after graph_launch). */
    rgpu_status (*graph_begin)(rgpu_backend *b, char *err, size_t errlen);
    rgpu_status (*graph_end)(rgpu_backend *b, void **graph, char *err, size_t errlen);
    rgpu_status (*graph_launch)(rgpu_backend *b, void *graph, char *err, size_t errlen);
    void (*graph_destroy)(rgpu_backend *b, void *graph);

    /* Storages live in device memory, not the host's (cuda): they are not
     * taken from the session's host-memory pool (false: cpu, null). */
    bool device_memory;

    /* Device timing for timelines (rgpu-replay --profile FILE.json); all
     * three optional (NULL: none). timer_mark records a timestamp in stream
     * order, after the work enqueued so far, and returns its handle (0: it
     * could not); after a sync, timer_ms gives the milliseconds from mark a
     * to mark z (false: unknown); timer_release frees every mark. */
    uint64_t (*timer_mark)(rgpu_backend *b);
    bool (*timer_ms)(rgpu_backend *b, uint64_t a, uint64_t z, double *ms);
    void (*timer_release)(rgpu_backend *b);

    /* Device error words (all four optional; NULL: exec checks data on the
     * host, waiting for it). A session takes one word (err_new; NULL: out of
     * memory, the session then checks on the host) and names it in each
     * exec; a check writes the first failure into it and does not wait, and
     * the kernels of a checked op skip their work once the word is set, so
     * nothing is read or written out of bounds. At a wait the session calls
     * err_fetch (enqueue a copy of the word after all work so far), then the
     * wait's own download or sync, then err_read: true when a check failed
     * (*out filled; the word is reset in stream order). A capture may record
     * checks with relative serials (RGPU_DEV_SEQ_REL); before each launch of
     * such a graph err_call sets, in stream order, the serial they count from
     * and the record index they report. */
    void *(*err_new)(rgpu_backend *b);
    void (*err_free)(rgpu_backend *b, void *w);
    void (*err_fetch)(rgpu_backend *b, void *w);
    bool (*err_read)(rgpu_backend *b, void *w, rgpu_dev_error *out);
    void (*err_call)(rgpu_backend *b, void *w, uint64_t seq_base, uint64_t idx);

    /* Optional (NULL: none): what the calling thread made the backend do so
     * far, since the thread started (rgpu-server logs each session's, from
     * its connection thread). host_waits: calls that blocked the host on the
     * device (a stream, event or device sync found the work unfinished);
     * device_allocs / device_frees: cudaMalloc / cudaFree calls;
     * graph_launches. */
    void (*counters)(rgpu_backend *b, rgpu_backend_counters *out);
};

/* By name: cpu, cuda, null or auto (cuda when usable, else cpu). why gets a
 * one-line note (auto's choice) or, on NULL, the reason. */
rgpu_backend *rgpu_backend_create(const char *name, char *why, size_t whylen);
rgpu_backend *rgpu_backend_cpu_create(void);
/* Test-only: cpu, but every result of op fault_op is one ulp off (first
 * element of each floating output). */
rgpu_backend *rgpu_backend_cpu_create_faulty(int fault_op);
/* Test-only, on a cpu backend: a capture that records op refuse_op fails
 * (graph_end: UNSUPPORTED), as a CUDA op that needs the host would; -1 for
 * none. With transient, it fails with NOMEM instead (a later try may work). */
void rgpu_backend_cpu_graph_refuse(rgpu_backend *b, int refuse_op, bool transient);
/* Decodes nothing, computes nothing: outputs are zero-filled on alloc. */
rgpu_backend *rgpu_backend_null_create(void);
/* NULL when the CUDA backend is not built or no device is usable; *why says which. */
rgpu_backend *rgpu_backend_cuda_create(char *why, size_t whylen);
/* The name of CUDA device 0 ("" when there is none or no CUDA in the build). */
void rgpu_cuda_device_name(char *out, size_t n);
/* b's name for people and the handshake: "cuda (NVIDIA H200)" for a cuda
 * backend, "cpu (cuda self-check failed: mm)" when auto fell back after the
 * self-check, else b->name. Valid while b lives. */
const char *rgpu_backend_describe(const rgpu_backend *b);

/* ---------------------------------------------------------------------------
 * CPU kernel entry point (replayer/cpu/): executes e on host memory. */
rgpu_status rgpu_cpu_exec(const rgpu_exec *e, char *err, size_t errlen);
bool rgpu_cpu_supports(int op);

#ifdef __cplusplus
}
#endif
#endif
