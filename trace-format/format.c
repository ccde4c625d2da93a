/* format.c — status strings, dtypes, the op table, hashing, int-list args.
 * Small pieces every module needs; nothing here allocates. */
#include "rgpu_format.h"

#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

/* ---------------------------------------------------------------------------
 * Status codes */
static const char *const status_str[RGPU_STATUS_COUNT_] = {
    [RGPU_OK] = "ok",
    [RGPU_ERR_NOMEM] = "out of memory",
    [RGPU_ERR_BAD_MAGIC] = "bad magic",
    [RGPU_ERR_BAD_CHECKSUM] = "bad checksum",
    [RGPU_ERR_TRUNCATED] = "truncated input",
    [RGPU_ERR_BAD_OP] = "op number out of range",
    [RGPU_ERR_BAD_DTYPE] = "dtype number out of range",
    [RGPU_ERR_TOO_MANY_DIMS] = "too many dimensions",
    [RGPU_ERR_OUT_OF_BOUNDS] = "view outside its storage",
    [RGPU_ERR_TOO_LARGE] = "length or count over its limit",
    [RGPU_ERR_BAD_VERSION] = "unsupported format version",
    [RGPU_ERR_OP_TABLE] = "op table differs between peers",
    [RGPU_ERR_RESERVED] = "reserved field not zero",
    [RGPU_ERR_BAD_ARG] = "bad scalar argument",
    [RGPU_ERR_UNKNOWN_TENSOR] = "unknown tensor id",
    [RGPU_ERR_UNKNOWN_STORAGE] = "unknown storage id",
    [RGPU_ERR_DUPLICATE_ID] = "id already in use",
    [RGPU_ERR_UNSUPPORTED] = "unsupported on this backend",
    [RGPU_ERR_IO] = "i/o error",
    [RGPU_ERR_CLOSED] = "connection closed by peer",
    [RGPU_ERR_COMPRESS] = "corrupt compressed data",
    [RGPU_ERR_DB] = "trace database error",
    [RGPU_ERR_BAD_MESSAGE] = "malformed wire message",
    [RGPU_ERR_POISONED] = "input poisoned by an earlier error",
    [RGPU_ERR_EXEC] = "kernel failed",
    [RGPU_ERR_MISSING_BLOB] = "missing blob",
    [RGPU_ERR_ARITY] = "wrong number of inputs or outputs",
    [RGPU_ERR_SHAPE] = "incompatible shapes",
    [RGPU_ERR_OVERFLOW] = "size arithmetic overflows",
    [RGPU_ERR_SEQUENCE] = "op index out of sequence",
    [RGPU_ERR_BAD_TRACE] = "inconsistent trace file",
    [RGPU_ERR_TIMEOUT] = "timed out",
    [RGPU_ERR_AUTH] = "authentication failed",
    [RGPU_ERR_SESSION_LOST] = "session lost",
    [RGPU_ERR_LIMIT] = "session limit reached",
    [RGPU_ERR_PATH] = "server path refused",
    [RGPU_ERR_CHANGED] = "server file changed",
};
static const char *const status_name[RGPU_STATUS_COUNT_] = {
    "RGPU_OK", "RGPU_ERR_NOMEM", "RGPU_ERR_BAD_MAGIC", "RGPU_ERR_BAD_CHECKSUM",
    "RGPU_ERR_TRUNCATED", "RGPU_ERR_BAD_OP", "RGPU_ERR_BAD_DTYPE", "RGPU_ERR_TOO_MANY_DIMS",
    "RGPU_ERR_OUT_OF_BOUNDS", "RGPU_ERR_TOO_LARGE", "RGPU_ERR_BAD_VERSION", "RGPU_ERR_OP_TABLE",
    "RGPU_ERR_RESERVED", "RGPU_ERR_BAD_ARG", "RGPU_ERR_UNKNOWN_TENSOR", "RGPU_ERR_UNKNOWN_STORAGE",
    "RGPU_ERR_DUPLICATE_ID", "RGPU_ERR_UNSUPPORTED", "RGPU_ERR_IO", "RGPU_ERR_CLOSED",
    "RGPU_ERR_COMPRESS", "RGPU_ERR_DB", "RGPU_ERR_BAD_MESSAGE", "RGPU_ERR_POISONED",
    "RGPU_ERR_EXEC", "RGPU_ERR_MISSING_BLOB", "RGPU_ERR_ARITY", "RGPU_ERR_SHAPE",
    "RGPU_ERR_OVERFLOW", "RGPU_ERR_SEQUENCE", "RGPU_ERR_BAD_TRACE", "RGPU_ERR_TIMEOUT",
    "RGPU_ERR_AUTH", "RGPU_ERR_SESSION_LOST", "RGPU_ERR_LIMIT",
    "RGPU_ERR_PATH", "RGPU_ERR_CHANGED",
};
_Static_assert(RGPU_STATUS_COUNT_ == 37, "status codes are append-only: update both tables");

const char *rgpu_status_str(int s) {
    return (s >= 0 && s < RGPU_STATUS_COUNT_) ? status_str[s] : "unknown status";
}
const char *rgpu_status_name(int s) {
    return (s >= 0 && s < RGPU_STATUS_COUNT_) ? status_name[s] : "RGPU_ERR_?";
}

/* ---------------------------------------------------------------------------
 * Dtypes */
static const uint8_t dtype_size[RGPU_DTYPE_COUNT] = { 4, 8, 2, 2, 8, 4, 2, 1, 1, 1, 8, 16, 4 };
static const char *const dtype_name[RGPU_DTYPE_COUNT] = {
    "float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
    "complex64", "complex128", "complex32" };

size_t rgpu_dtype_size(int d) { return (d >= 0 && d < RGPU_DTYPE_COUNT) ? dtype_size[d] : 0; }
const char *rgpu_dtype_name(int d) { return (d >= 0 && d < RGPU_DTYPE_COUNT) ? dtype_name[d] : "?"; }
bool rgpu_dtype_is_float(int d) { return d == RGPU_F32 || d == RGPU_F64 || d == RGPU_F16 || d == RGPU_BF16; }
bool rgpu_dtype_is_complex(int d) { return d == RGPU_C64 || d == RGPU_C128 || d == RGPU_C32; }

/* ---------------------------------------------------------------------------
 * Op table */
const rgpu_op_info rgpu_op_table[RGPU_OP_COUNT] = {
#define X(e, name, nin, nout, flags, fam, sig) [RGPU_OP_##e] = { name, nin, nout, RGPU_OPFAM_##fam, flags, sig },
#include "ops.def"
#undef X
};
static const char *const family_name[RGPU_OPFAM_COUNT_] = {
    "session", "copy", "arith", "reduce", "pointwise", "reduce2", "dense", "index", "amp", "sort", "linalg", "fft" };

const char *rgpu_op_family_name(int f) { return (f >= 0 && f < RGPU_OPFAM_COUNT_) ? family_name[f] : "?"; }
/* Appending an op changes RGPU_OP_COUNT and the table hash; the generated
 * replayer/op/op_gen_args.inc pins the count (tools/gen_ops.py rewrites it
 * and FORMAT.md's op list). */

const char *rgpu_op_name(int op) { return (op >= 0 && op < RGPU_OP_COUNT) ? rgpu_op_table[op].name : "?"; }

void rgpu_op_table_hash(uint8_t out[16]) {
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    uint8_t v[4];
    rgpu_st32(v, RGPU_FORMAT_VERSION);
    XXH3_128bits_update(&st, v, 4);
    for (int i = 0; i < RGPU_OP_COUNT; i++) {
        const rgpu_op_info *o = &rgpu_op_table[i];
        XXH3_128bits_update(&st, o->name, strlen(o->name) + 1);
        uint8_t a[6] = { o->n_in, o->n_out };
        rgpu_st32(a + 2, o->flags & RGPU_OPF_HASHED_);   /* newer flags are not hashed: old traces still open */
        XXH3_128bits_update(&st, a, sizeof a);
    }
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    XXH128_canonicalFromHash((XXH128_canonical_t *)out, h);
}

/* ---------------------------------------------------------------------------
 * Hashing */
rgpu_hash rgpu_hash_bytes(const void *p, size_t n) {
    rgpu_hash r;
    XXH128_hash_t h = XXH3_128bits(p, n);
    XXH128_canonicalFromHash((XXH128_canonical_t *)r.b, h);
    return r;
}
bool rgpu_hash_from_hex(const char *s, rgpu_hash *h) {
    for (int i = 0; i < 32; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) return false;
        if (i % 2 == 0) h->b[i / 2] = (uint8_t)(v << 4); else h->b[i / 2] |= (uint8_t)v;
    }
    return s[32] == 0;
}

void rgpu_hash_hex(const rgpu_hash *h, char out[33]) {
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", h->b[i]);
}
bool rgpu_hash_eq(const rgpu_hash *a, const rgpu_hash *b) { return memcmp(a->b, b->b, 16) == 0; }

/* ---------------------------------------------------------------------------
 * Scalar args */
int64_t rgpu_arg_int_at(const rgpu_arg *a, uint32_t i) {
    if (a->kind != RGPU_ARG_INTS || i >= a->v.ints.n) return 0;
    return (int64_t)rgpu_ld64(a->v.ints.p + 8 * (size_t)i);
}
double rgpu_arg_as_f64(const rgpu_arg *a) {
    switch (a->kind) {
    case RGPU_ARG_FLOAT: return a->v.f;
    case RGPU_ARG_INT: case RGPU_ARG_BOOL: return (double)a->v.i;
    default: return 0.0;
    }
}
int64_t rgpu_arg_as_i64(const rgpu_arg *a) {
    switch (a->kind) {
    case RGPU_ARG_INT: case RGPU_ARG_BOOL: case RGPU_ARG_DTYPE: return a->v.i;
    case RGPU_ARG_FLOAT: return (int64_t)a->v.f;
    default: return 0;
    }
}

/* ---------------------------------------------------------------------------
 * Growable buffer */
rgpu_status rgpu_buf_reserve(rgpu_buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return RGPU_OK;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) {
        if (cap > SIZE_MAX / 2) return RGPU_ERR_NOMEM;
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (!p) return RGPU_ERR_NOMEM;
    b->p = p; b->cap = cap;
    return RGPU_OK;
}
rgpu_status rgpu_buf_append(rgpu_buf *b, const void *p, size_t n) {
    rgpu_status s = rgpu_buf_reserve(b, n);
    if (s) return s;
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    return RGPU_OK;
}
void rgpu_buf_free(rgpu_buf *b) { free(b->p); b->p = NULL; b->len = b->cap = 0; }
