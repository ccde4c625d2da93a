/* rgpu_format.h — the trace format shared by recorder, replayer and tools.
 *
 * Everything here is about bytes: the op table, records, chunks, blobs, wire
 * messages and the .rgt container. trace-format/FORMAT.md is the byte-level
 * spec; this header is the API. All multi-byte integers are little-endian.
 *
 * Conventions: functions return rgpu_status (0 = RGPU_OK); objects are opaque
 * handles; X_free(NULL) is a no-op; nothing here exits or aborts on bad input. */
#ifndef RGPU_FORMAT_H
#define RGPU_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Versions and limits */
#define RGPU_VERSION          "0.1.0"  /* the software (pyproject.toml's version) */
#define RGPU_FORMAT_VERSION   1u       /* records, frames, .rgt traces, the op-table hash */
#define RGPU_WIRE_VERSION     2u       /* the wire protocol; 2: the session secret (HELLO/WELCOME), NOTICE */
#define RGPU_MAX_DIMS         12       /* ndim above this is rejected */
#define RGPU_MAX_OUT          8        /* outputs per record */
#define RGPU_MAX_IN           64       /* tensor inputs per record (variadic ops: cat) */
#define RGPU_MAX_ARGS         16       /* scalar args per record */
#define RGPU_MAX_INTS         (1u << 20) /* elements in one int-list arg */
#define RGPU_MAX_CHUNK_RAW    (64u << 20)  /* decoded chunk bytes */
#define RGPU_MAX_BLOB_RAW     (1ull << 34) /* one upload: 16 GiB */
#define RGPU_MAX_FRAME        ((1ull << 34) + 4096) /* one wire message payload */
#define RGPU_BLOB_PIECE       (4u << 20)   /* a blob larger than this travels as BLOB_PART pieces of this size */
#define RGPU_MAX_TENSOR_BYTES (1ull << 34) /* numel x element size of any tensor, views included:
                                              16 GiB (a [2^50] stride-0 view of 4 bytes is refused) */

/* ---------------------------------------------------------------------------
 * Status codes: stable numbers, never renumbered, only appended. */
typedef enum rgpu_status {
    RGPU_OK = 0,
    RGPU_ERR_NOMEM = 1,             /* allocation failed */
    RGPU_ERR_BAD_MAGIC = 2,         /* a frame or file does not start with its magic */
    RGPU_ERR_BAD_CHECKSUM = 3,      /* a checksum or content hash does not match */
    RGPU_ERR_TRUNCATED = 4,         /* input ends inside a field */
    RGPU_ERR_BAD_OP = 5,            /* op number >= RGPU_OP_COUNT */
    RGPU_ERR_BAD_DTYPE = 6,         /* dtype number >= RGPU_DTYPE_COUNT */
    RGPU_ERR_TOO_MANY_DIMS = 7,     /* ndim > RGPU_MAX_DIMS */
    RGPU_ERR_OUT_OF_BOUNDS = 8,     /* a view reaches outside its storage */
    RGPU_ERR_TOO_LARGE = 9,         /* a length or count field over its limit */
    RGPU_ERR_BAD_VERSION = 10,      /* format version not supported */
    RGPU_ERR_OP_TABLE = 11,         /* op-table hash differs between peers */
    RGPU_ERR_RESERVED = 12,         /* a reserved field or bit is not zero */
    RGPU_ERR_BAD_ARG = 13,          /* a scalar argument has the wrong kind or value */
    RGPU_ERR_UNKNOWN_TENSOR = 14,   /* a tensor id the session does not hold */
    RGPU_ERR_UNKNOWN_STORAGE = 15,  /* a storage id the session does not hold */
    RGPU_ERR_DUPLICATE_ID = 16,     /* a new tensor or storage id already in use */
    RGPU_ERR_UNSUPPORTED = 17,      /* op/dtype combination this backend can't run */
    RGPU_ERR_IO = 18,               /* read/write/socket failure */
    RGPU_ERR_CLOSED = 19,           /* peer closed the connection */
    RGPU_ERR_COMPRESS = 20,         /* zstd failed (corrupt frame) */
    RGPU_ERR_DB = 21,               /* SQLite error in a .rgt file */
    RGPU_ERR_BAD_MESSAGE = 22,      /* unknown or malformed wire message */
    RGPU_ERR_POISONED = 23,         /* input poisoned by an earlier failed op */
    RGPU_ERR_EXEC = 24,             /* kernel failed */
    RGPU_ERR_MISSING_BLOB = 25,     /* an upload names a blob nobody sent */
    RGPU_ERR_ARITY = 26,            /* record's input/output count differs from ops.def */
    RGPU_ERR_SHAPE = 27,            /* shapes that can't go together (broadcast, reduce) */
    RGPU_ERR_OVERFLOW = 28,         /* size * stride arithmetic overflows */
    RGPU_ERR_SEQUENCE = 29,         /* chunk or op index out of order */
    RGPU_ERR_BAD_TRACE = 30,        /* .rgt content inconsistent (missing chunk, schema) */
    RGPU_ERR_TIMEOUT = 31,          /* waited too long for the peer */
    RGPU_ERR_AUTH = 32,             /* missing or wrong token in HELLO */
    RGPU_ERR_SESSION_LOST = 33,     /* a session to resume no longer exists */
    RGPU_ERR_LIMIT = 34,            /* a per-session limit (storages, bytes) reached */
    RGPU_ERR_PATH = 35,             /* a server path refused (not beneath an exposed folder, read-only, bad name) */
    RGPU_ERR_CHANGED = 36,          /* a server file differs from the identity its record carries */
    RGPU_STATUS_COUNT_ = 37
} rgpu_status;

/* Static string naming the status ("bad checksum"); never NULL. */
const char *rgpu_status_str(int status);
/* Short identifier ("RGPU_ERR_BAD_CHECKSUM"); never NULL. */
const char *rgpu_status_name(int status);

/* ---------------------------------------------------------------------------
 * Dtypes */
typedef enum rgpu_dtype {
    RGPU_F32 = 0, RGPU_F64 = 1, RGPU_F16 = 2, RGPU_BF16 = 3,
    RGPU_I64 = 4, RGPU_I32 = 5, RGPU_I16 = 6, RGPU_I8 = 7,
    RGPU_U8 = 8, RGPU_BOOL = 9,
    RGPU_C64 = 10, RGPU_C128 = 11, RGPU_C32 = 12,   /* complex: (real, imag) pairs of f32, f64, f16 */
    RGPU_DTYPE_COUNT = 13
} rgpu_dtype;

size_t rgpu_dtype_size(int dtype);       /* 0 for an invalid dtype */
const char *rgpu_dtype_name(int dtype);  /* "float32"…; "?" when invalid */
bool rgpu_dtype_is_float(int dtype);
bool rgpu_dtype_is_complex(int dtype);

/* ---------------------------------------------------------------------------
 * The op table (generated from ops.def; the flags and families are described
 * there) */
enum {
    RGPU_OPF_WAIT = 1, RGPU_OPF_FACTORY = 2, RGPU_OPF_VIEW = 4, RGPU_OPF_CONTROL = 8, RGPU_OPF_VARIADIC = 16,
    RGPU_OPF_HASHED_ = 31,   /* the bits rgpu_op_table_hash covers: the five above */
    RGPU_OPF_SESSION = 32, RGPU_OPF_RANDOM = 64, RGPU_OPF_CUBLAS = 128, RGPU_OPF_DATA_DEPENDENT = 256,
    RGPU_OPF_FLOATY = 512, RGPU_OPF_INT_TO_FLOAT = 1024, RGPU_OPF_COMPLEX = 2048,
    RGPU_OPF_BOOL_OUT = 4096, RGPU_OPF_NO_BOOL = 8192, RGPU_OPF_INTEGRAL = 16384, RGPU_OPF_OPTIONAL = 32768,
};

/* Op families (ops.def's FAMILY column): which family's code executes an op. */
typedef enum rgpu_op_family {
    RGPU_OPFAM_SESSION, RGPU_OPFAM_COPY, RGPU_OPFAM_ARITH, RGPU_OPFAM_REDUCE, RGPU_OPFAM_POINTWISE,
    RGPU_OPFAM_REDUCE2, RGPU_OPFAM_DENSE, RGPU_OPFAM_INDEX, RGPU_OPFAM_AMP,
    RGPU_OPFAM_SORT, RGPU_OPFAM_LINALG, RGPU_OPFAM_FFT,
    RGPU_OPFAM_COUNT_
} rgpu_op_family;
const char *rgpu_op_family_name(int family);   /* "pointwise"…; "?" when invalid */

typedef enum rgpu_op {
#define X(e, name, nin, nout, flags, fam, sig) RGPU_OP_##e,
#include "ops.def"
#undef X
    RGPU_OP_COUNT
} rgpu_op;

typedef struct rgpu_op_info {
    const char *name;
    uint8_t n_in, n_out;
    uint8_t family;          /* rgpu_op_family */
    uint32_t flags;          /* RGPU_OPF_* */
    const char *sig;         /* the ARGS signature, as written in ops.def */
} rgpu_op_info;

extern const rgpu_op_info rgpu_op_table[RGPU_OP_COUNT];
const char *rgpu_op_name(int op);        /* "?" when op >= RGPU_OP_COUNT */
/* XXH3-128 over the table (names, arities, the RGPU_OPF_HASHED_ flags,
 * version): 16 bytes. */
void rgpu_op_table_hash(uint8_t out[16]);

/* ---------------------------------------------------------------------------
 * Hashing */
typedef struct rgpu_hash { uint8_t b[16]; } rgpu_hash;   /* XXH3-128, canonical (big-endian) bytes */
rgpu_hash rgpu_hash_bytes(const void *p, size_t n);
void rgpu_hash_hex(const rgpu_hash *h, char out[33]);
/* The inverse: 32 hex digits (either case) into h; false when s is not that. */
bool rgpu_hash_from_hex(const char *s, rgpu_hash *h);
bool rgpu_hash_eq(const rgpu_hash *a, const rgpu_hash *b);

/* ---------------------------------------------------------------------------
 * Records
 *
 * A record is one op invocation: outputs (tensor definitions or references to
 * existing tensors), inputs (tensor ids), scalar arguments. Decoded records
 * point into the chunk buffer they came from (int lists) and stay valid as
 * long as that buffer. */
enum { RGPU_TDEF_EXISTING = 1, RGPU_TDEF_NEW_STORAGE = 2 };

typedef struct rgpu_tdef {
    uint64_t tid;
    uint8_t flags;          /* RGPU_TDEF_* */
    /* the fields below are absent on the wire when flags & EXISTING */
    uint64_t sid;
    uint8_t dtype;
    uint8_t ndim;
    uint64_t nbytes;        /* storage size, only with NEW_STORAGE */
    int64_t offset;         /* elements */
    int64_t sizes[RGPU_MAX_DIMS];
    int64_t strides[RGPU_MAX_DIMS];  /* elements */
} rgpu_tdef;

typedef enum rgpu_arg_kind {
    RGPU_ARG_NONE = 0, RGPU_ARG_INT = 1, RGPU_ARG_FLOAT = 2, RGPU_ARG_BOOL = 3,
    RGPU_ARG_INTS = 4, RGPU_ARG_DTYPE = 5, RGPU_ARG_HASH = 6,
    RGPU_ARG_KIND_COUNT = 7
} rgpu_arg_kind;

typedef struct rgpu_arg {
    uint8_t kind;
    union {
        int64_t i;          /* INT, BOOL (0/1), DTYPE */
        double f;           /* FLOAT */
        struct { const uint8_t *p; uint32_t n; } ints;  /* INTS: n LE i64 at p (unaligned) */
        rgpu_hash h;        /* HASH */
    } v;
    int64_t *ints_owned;    /* encoder side: INTS given as an array */
} rgpu_arg;

typedef struct rgpu_record {
    uint16_t op;
    uint8_t n_out, n_in, n_args;
    rgpu_tdef out[RGPU_MAX_OUT];
    uint64_t in[RGPU_MAX_IN];
    rgpu_arg args[RGPU_MAX_ARGS];
} rgpu_record;

/* Int-list element i of an INTS arg (reads unaligned LE). */
int64_t rgpu_arg_int_at(const rgpu_arg *a, uint32_t i);
/* Scalar arg as double / int64 (INT, FLOAT, BOOL accepted). */
double rgpu_arg_as_f64(const rgpu_arg *a);
int64_t rgpu_arg_as_i64(const rgpu_arg *a);

/* Growable byte buffer used by encoders. */
typedef struct rgpu_buf { uint8_t *p; size_t len, cap; } rgpu_buf;
rgpu_status rgpu_buf_reserve(rgpu_buf *b, size_t extra);
rgpu_status rgpu_buf_append(rgpu_buf *b, const void *p, size_t n);
void rgpu_buf_free(rgpu_buf *b);

/* Encoded size of a record (exact). */
size_t rgpu_record_size(const rgpu_record *r);
/* Append the encoding of r to b. For INTS args, v.ints.p/n are used
 * (p points at n LE int64s). Validates op, arity, ndim, dtype. */
rgpu_status rgpu_record_encode(rgpu_buf *b, const rgpu_record *r);
/* Decode one record from p[0..n). On success *used is the bytes consumed.
 * Checks op < COUNT, arity per ops.def, ndim, dtype, arg kinds, reserved
 * fields, lengths. Does not check storage bounds (the replayer does). */
rgpu_status rgpu_record_decode(const uint8_t *p, size_t n, rgpu_record *r, size_t *used);

/* Validate that a tensor definition lies inside a storage of nbytes:
 * overflow-checked; negative strides/offsets rejected; a tensor whose
 * logical size (numel x element size, stride-0 dims counted in full) passes
 * RGPU_MAX_TENSOR_BYTES is RGPU_ERR_TOO_LARGE, whatever its storage: every
 * size computation downstream (downloads, copies, kernels) fits in 64 bits
 * and no op does absurd work for its storage. The one place this is checked. */
rgpu_status rgpu_tdef_check_bounds(const rgpu_tdef *t, uint64_t storage_nbytes);
/* Number of elements (sizes product); -1 on overflow. */
int64_t rgpu_tdef_numel(const rgpu_tdef *t);

/* ---------------------------------------------------------------------------
 * Templates (FORMAT.md §5.1): a captured run of records whose ids are
 * parameters, stored as a content-addressed blob and run by CALL records.
 *   u32 magic 'RGTP' | u32 version=1 | u32 n_bind | u32 reserved=0 | u64 base_offset
 *   u64 bind_ids[n_bind] | records (a chunk's raw bytes) */
#define RGPU_TEMPLATE_MAGIC     0x50544752u   /* "RGTP" */
#define RGPU_TEMPLATE_VERSION   1u
#define RGPU_TEMPLATE_HEADER    24
#define RGPU_MAX_TEMPLATE_BINDS (1u << 20)    /* bind ids in one template */

typedef struct rgpu_template_info {
    uint32_t n_bind;
    uint64_t base_offset;       /* the client's Philox offset when the capture began */
    const uint8_t *bind_ids;    /* n_bind LE u64 (unaligned), into the parsed buffer */
    const uint8_t *records;     /* the records, back to back, into the parsed buffer */
    size_t records_len;
    uint32_t n_records;
    uint32_t err_record;        /* on a record error: its position (0-based) */
} rgpu_template_info;

/* Parse and validate a template blob p[0..n) (checks and their statuses in
 * FORMAT.md §5.1). On success *t points into p (valid as long as p). On a
 * failing record, t->err_record names it. Allocates only a scratch copy of
 * the bind ids (RGPU_ERR_NOMEM when that fails). */
rgpu_status rgpu_template_parse(const uint8_t *p, size_t n, rgpu_template_info *t);
/* bind_ids[i] of a parsed template. */
uint64_t rgpu_template_bind_id(const rgpu_template_info *t, uint32_t i);
/* Append a template blob to b: header, bind ids, then the records as given
 * (not validated here: rgpu_template_parse is the check). */
rgpu_status rgpu_template_write(rgpu_buf *b, uint64_t base_offset, const uint64_t *bind_ids, uint32_t n_bind,
                                const void *records, size_t records_len);
/* True for the random ops (RGPU_OPF_RANDOM), whose last two args are INT
 * seed, INT offset. */
bool rgpu_op_is_random(int op);

/* ---------------------------------------------------------------------------
 * Frames: zstd-compressed payload with header and checksum.
 * Used for chunks (payload = records) and blobs (payload = tensor bytes).
 *   u32 magic 'RGF1' | u32 flags=0 | u64 raw_len | u64 XXH3-64(raw) | zstd frame */
#define RGPU_FRAME_MAGIC 0x31464752u   /* "RGF1" */
#define RGPU_FRAME_HEADER 24
rgpu_status rgpu_frame_compress(const void *raw, size_t n, int level, rgpu_buf *out);
/* Decompress into *raw (malloc'd, caller frees). raw_len over max_raw is
 * rejected before allocating: RGPU_ERR_TOO_LARGE with *raw_len set to the
 * size the frame declares (so the caller can name it in an error). */
rgpu_status rgpu_frame_decompress(const uint8_t *p, size_t n, uint64_t max_raw,
                                  uint8_t **raw, size_t *raw_len);

/* ---------------------------------------------------------------------------
 * Wire messages
 *   header: u8 type | u8 flags=0 | u16 reserved=0 | u32 magic 'RGPW' | u64 payload_len
 * Payload layouts per type are in FORMAT.md §7.1, and their codecs in
 * rgpu_msg.h (included below). */
#define RGPU_WIRE_MAGIC 0x57504752u    /* "RGPW" */
#define RGPU_WIRE_HEADER 16
typedef enum rgpu_msg_type {
    RGPU_MSG_HELLO = 1,       /* c->s: version, op-table hash, session, last ack, token */
    RGPU_MSG_WELCOME = 2,     /* s->c: version, op-table hash, session, applied, backend, supports */
    RGPU_MSG_CHUNK = 3,       /* c->s: first op, count, hash, frame */
    RGPU_MSG_CHUNK_REF = 4,   /* reserved: a retired chunk-by-hash message; no codec, the server refuses it */
    RGPU_MSG_BLOB = 5,        /* c->s: hash, frame */
    RGPU_MSG_NEED = 6,        /* s->c: hash of a blob or chunk the server lacks */
    RGPU_MSG_WAIT = 7,        /* c->s: op index; reply RESULT when applied */
    RGPU_MSG_RESULT = 8,      /* s->c: op index, status, error op, message/bytes */
    RGPU_MSG_ACK = 9,         /* s->c: last applied op index + 1 */
    RGPU_MSG_ERROR = 10,      /* either: fatal protocol error, code + message */
    RGPU_MSG_BYE = 11,        /* either: orderly close */
    RGPU_MSG_BLOB_PART = 12,  /* c->s: hash, total raw length, offset, frame of the next piece */
    RGPU_MSG_NOTICE = 13,     /* s->c: not fatal: code + message (the session's journal turned off) */
    RGPU_MSG_TYPE_COUNT_ = 14
} rgpu_msg_type;
const char *rgpu_msg_name(int type);

typedef struct rgpu_msg_header { uint8_t type; uint64_t len; } rgpu_msg_header;
void rgpu_wire_header_encode(uint8_t out[RGPU_WIRE_HEADER], int type, uint64_t len);
/* BAD_MAGIC, RESERVED, BAD_MESSAGE (type 0 or unknown: ≥ RGPU_MSG_TYPE_COUNT_)
 * or TOO_LARGE (len > max_len); after the magic and reserved checks, *h holds
 * the header's type and len even when refused (for the error message). */
rgpu_status rgpu_wire_header_decode(const uint8_t in[RGPU_WIRE_HEADER], uint64_t max_len,
                                    rgpu_msg_header *h);

/* Blocking helpers over a file descriptor (EINTR handled). */
rgpu_status rgpu_io_write_all(int fd, const void *p, size_t n);
rgpu_status rgpu_io_read_all(int fd, void *p, size_t n);  /* CLOSED on EOF at start, TRUNCATED mid-way */
/* Send header + payload parts (gathered write). */
rgpu_status rgpu_wire_send(int fd, int type, const void *a, size_t an, const void *b, size_t bn);
/* Read one message: header then payload into *payload (malloc'd; caller frees).
 * A refused header (rgpu_wire_header_decode's statuses) leaves its type and
 * len in *h and its payload unread: the stream cannot go on. */
rgpu_status rgpu_wire_recv(int fd, uint64_t max_len, rgpu_msg_header *h, uint8_t **payload);

/* Little-endian load/store helpers. */
static inline void rgpu_st16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void rgpu_st32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline void rgpu_st64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i)); }
static inline uint16_t rgpu_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t rgpu_ld32(const uint8_t *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = (v << 8) | p[i]; return v; }
static inline uint64_t rgpu_ld64(const uint8_t *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = (v << 8) | p[i]; return v; }

/* Each message's payload: a struct and its encode/decode/send (rgpu_msg.h). */
#include "rgpu_msg.h"

/* ---------------------------------------------------------------------------
 * .rgt container (SQLite, WAL). Schema in FORMAT.md. */
typedef struct rgpu_rgt rgpu_rgt;
/* Create (truncating) a trace file for writing; meta keys written. The
 * file is mode 0600 (and so are its -wal and -shm). */
rgpu_status rgpu_rgt_create(const char *path, const char *creator, rgpu_rgt **out);
/* The same, but never over an existing file: RGPU_ERR_DUPLICATE_ID when
 * path exists (rgpu-server --journal and --record). */
rgpu_status rgpu_rgt_create_new(const char *path, const char *creator, rgpu_rgt **out);
/* Open an existing trace read-only; checks magic/version/op-table hash.
 * A different op-table hash fails with RGPU_ERR_OP_TABLE. */
rgpu_status rgpu_rgt_open(const char *path, rgpu_rgt **out);
void rgpu_rgt_close(rgpu_rgt *t);
rgpu_status rgpu_rgt_set_meta(rgpu_rgt *t, const char *key, const char *value);
/* Store a chunk frame (dedup by hash) and append it to the stream. */
rgpu_status rgpu_rgt_put_chunk(rgpu_rgt *t, const rgpu_hash *h, uint64_t first_op, uint32_t count,
                               uint64_t raw_len, const void *frame, size_t frame_len);
rgpu_status rgpu_rgt_put_blob(rgpu_rgt *t, const rgpu_hash *h, uint64_t raw_len,
                              const void *frame, size_t frame_len);
rgpu_status rgpu_rgt_put_result(rgpu_rgt *t, uint64_t op_index, int status,
                                const void *data, size_t n);
/* Open an existing trace for appending (a server journal after a restart):
 * the same checks as rgpu_rgt_open; new stream entries continue its seq. */
rgpu_status rgpu_rgt_open_append(const char *path, rgpu_rgt **out);
/* Results rows in op order: calls fn for each (data points into SQLite's
 * buffer, valid during the call). fn returning nonzero stops the walk. */
rgpu_status rgpu_rgt_each_result(rgpu_rgt *t, int (*fn)(void *ud, uint64_t op, int status,
                                                        const void *data, size_t n), void *ud);
/* Stream iteration: seq 0..count-1. frame is malloc'd; caller frees. */
rgpu_status rgpu_rgt_stream_count(rgpu_rgt *t, uint64_t *count);
rgpu_status rgpu_rgt_get_stream(rgpu_rgt *t, uint64_t seq, rgpu_hash *h, uint64_t *first_op,
                                uint32_t *count, uint8_t **frame, size_t *frame_len);
rgpu_status rgpu_rgt_get_blob(rgpu_rgt *t, const rgpu_hash *h, uint8_t **frame, size_t *frame_len);
/* Commit pending writes (writes are batched in a transaction). */
rgpu_status rgpu_rgt_flush(rgpu_rgt *t);
/* What a commit (rgpu_rgt_flush) waits for, on a writable trace (FORMAT.md
 * §7.3): RGPU_RGT_SYNC_NORMAL (the default; SQLite synchronous=NORMAL in WAL
 * mode: the commit is in the OS when flush returns, so it survives the
 * process being killed, not a power cut) or RGPU_RGT_SYNC_FULL
 * (synchronous=FULL: the WAL is fsynced at every commit: it survives a power
 * cut, when the disk honours fsync). */
typedef enum { RGPU_RGT_SYNC_NORMAL = 0, RGPU_RGT_SYNC_FULL = 1 } rgpu_rgt_sync;
rgpu_status rgpu_rgt_set_sync(rgpu_rgt *t, rgpu_rgt_sync sync);
/* Meta value of key (RGPU_ERR_MISSING_BLOB when absent). */
rgpu_status rgpu_rgt_get_meta(rgpu_rgt *t, const char *key, char *out, size_t outlen);
/* Server journals (FORMAT.md §7.3): after a checkpoint of the session at
 * upto_op was written (its blob and the blobs it names put, meta
 * `checkpoint_op`/`checkpoint_hash` set), drop the stream entries before
 * upto_op, the chunks no entry names, every blob not in keep, and results
 * before results_from; commit; give the freed pages back. The stream's seq
 * numbers start at 0 again. */
rgpu_status rgpu_rgt_compact(rgpu_rgt *t, uint64_t upto_op, const rgpu_hash *keep, size_t n_keep, uint64_t results_from);
/* Last error text of t; with t == NULL, why this thread's last create/open failed. */
const char *rgpu_rgt_errmsg(rgpu_rgt *t);

#ifdef __cplusplus
}
#endif
#endif
