/* test_format.c — Check tests for trace-format/: op table, record codec,
 * frames, wire framing, the .rgt container and status codes.
 *
 * The codec is the first code that touches untrusted bytes, so the corrupt
 * inputs get as much attention as the round trips: each class of damage must
 * come back as its own status code, and random damage must never crash
 * (build once with -fsanitize=address,undefined to check that).
 *
 * Build (from the repository root): the Makefile compiles this file with every
 * trace-format .c file and links check, zstd, sqlite3, m and pthread. */
#include "rgpu_format.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "check_util.h"

/* ---------------------------------------------------------------------------
 * Helpers: building records and comparing them */

/* For hot loops: ck_assert records a mark point on every call (slow under
 * CK_FORK); this only reports on failure. */
#define REQUIRE(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)

static uint64_t rng_state;
static uint64_t rng(void) {            /* xorshift64*: fixed seed, reproducible */
    rng_state ^= rng_state >> 12; rng_state ^= rng_state << 25; rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static double f64_from_bits(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
static uint64_t f64_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

/* Int-list storage for INTS args: LE int64s, as the encoder expects. */
#define LONG_INTS 1000
static uint8_t ints_store[4][8 * LONG_INTS];

static rgpu_arg arg_none(void) { rgpu_arg a = { .kind = RGPU_ARG_NONE }; return a; }
static rgpu_arg arg_int(int64_t v) { rgpu_arg a = { .kind = RGPU_ARG_INT }; a.v.i = v; return a; }
static rgpu_arg arg_float(double v) { rgpu_arg a = { .kind = RGPU_ARG_FLOAT }; a.v.f = v; return a; }
static rgpu_arg arg_bool(bool v) { rgpu_arg a = { .kind = RGPU_ARG_BOOL }; a.v.i = v; return a; }
static rgpu_arg arg_dtype(int d) { rgpu_arg a = { .kind = RGPU_ARG_DTYPE }; a.v.i = d; return a; }
static rgpu_arg arg_hash(uint8_t seed) {
    rgpu_arg a = { .kind = RGPU_ARG_HASH };
    a.v.h = rgpu_hash_bytes(&seed, 1);
    return a;
}
/* slot picks one of the static int-list buffers; values are deterministic. */
static rgpu_arg arg_ints(int slot, uint32_t n) {
    rgpu_arg a = { .kind = RGPU_ARG_INTS };
    for (uint32_t i = 0; i < n; i++) {
        int64_t v = (i == 0) ? INT64_MIN : (i == 1) ? INT64_MAX : (int64_t)(i * 7919u) - 500;
        rgpu_st64(ints_store[slot] + 8 * i, (uint64_t)v);
    }
    a.v.ints.p = n ? ints_store[slot] : NULL;
    a.v.ints.n = n;
    return a;
}

static rgpu_tdef tdef_new(uint64_t tid, int dtype, int ndim) {
    rgpu_tdef t = { .tid = tid, .flags = RGPU_TDEF_NEW_STORAGE, .sid = tid + 1000,
                    .dtype = (uint8_t)dtype, .ndim = (uint8_t)ndim };
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) { t.sizes[d] = d + 2; t.strides[d] = stride; stride *= t.sizes[d]; }
    t.nbytes = (uint64_t)stride * rgpu_dtype_size(dtype);
    return t;
}
/* A view over an existing storage: no NEW_STORAGE flag, so no nbytes field. */
static rgpu_tdef tdef_alias(uint64_t tid, int dtype, int ndim) {
    rgpu_tdef t = tdef_new(tid, dtype, ndim);
    t.flags = 0; t.nbytes = 0; t.offset = 3;
    if (ndim) { t.strides[0] = 0; t.sizes[ndim - 1] = 1; }   /* broadcast dim, size-1 dim */
    return t;
}
static rgpu_tdef tdef_existing(uint64_t tid) {
    rgpu_tdef t = { .tid = tid, .flags = RGPU_TDEF_EXISTING };
    return t;
}

static void assert_tdef_eq(const rgpu_tdef *a, const rgpu_tdef *b) {
    ck_assert_uint_eq(a->tid, b->tid);
    ck_assert_uint_eq(a->flags, b->flags);
    if (a->flags & RGPU_TDEF_EXISTING) return;
    ck_assert_uint_eq(a->sid, b->sid);
    ck_assert_uint_eq(a->dtype, b->dtype);
    ck_assert_uint_eq(a->ndim, b->ndim);
    ck_assert_uint_eq(b->nbytes, (a->flags & RGPU_TDEF_NEW_STORAGE) ? a->nbytes : 0);
    ck_assert_int_eq(a->offset, b->offset);
    for (int d = 0; d < a->ndim; d++) {
        ck_assert_int_eq(a->sizes[d], b->sizes[d]);
        ck_assert_int_eq(a->strides[d], b->strides[d]);
    }
}

static void assert_arg_eq(const rgpu_arg *a, const rgpu_arg *b) {
    ck_assert_uint_eq(a->kind, b->kind);
    switch (a->kind) {
    case RGPU_ARG_NONE: break;
    case RGPU_ARG_INT: case RGPU_ARG_BOOL: case RGPU_ARG_DTYPE: ck_assert_int_eq(a->v.i, b->v.i); break;
    case RGPU_ARG_FLOAT: ck_assert_uint_eq(f64_bits(a->v.f), f64_bits(b->v.f)); break;  /* NaN payload, -0.0 */
    case RGPU_ARG_INTS:
        ck_assert_uint_eq(a->v.ints.n, b->v.ints.n);
        for (uint32_t i = 0; i < a->v.ints.n; i++)
            REQUIRE(rgpu_arg_int_at(a, i) == rgpu_arg_int_at(b, i), "ints[%u] differs", i);
        break;
    case RGPU_ARG_HASH: ck_assert(rgpu_hash_eq(&a->v.h, &b->v.h)); break;
    default: ck_abort_msg("bad kind %d", a->kind);
    }
}

static void assert_record_eq(const rgpu_record *a, const rgpu_record *b) {
    ck_assert_uint_eq(a->op, b->op);
    ck_assert_uint_eq(a->n_out, b->n_out);
    ck_assert_uint_eq(a->n_in, b->n_in);
    ck_assert_uint_eq(a->n_args, b->n_args);
    for (int i = 0; i < a->n_out; i++) assert_tdef_eq(&a->out[i], &b->out[i]);
    for (int i = 0; i < a->n_in; i++) ck_assert_uint_eq(a->in[i], b->in[i]);
    for (int i = 0; i < a->n_args; i++) assert_arg_eq(&a->args[i], &b->args[i]);
}

/* A scalar ("scalar value", "scalar alpha"): INT, FLOAT or BOOL, with the
 * edge values of each, chosen by variant v and position k. */
static rgpu_arg scalar(int v, int k) {
    switch ((v + k) % 6) {
    case 0: return arg_int(INT64_MIN);
    case 1: return arg_float(f64_from_bits(0x7ff8dead0000beefull));  /* NaN with a payload */
    case 2: return arg_bool(true);
    case 3: return arg_float(-0.0);
    case 4: return arg_int(INT64_MAX);
    default: return arg_float(-INFINITY);
    }
}

#define N_VARIANTS 4
/* Build a valid record for op, variant v (0..N_VARIANTS-1). Output slot j
 * gets a new-storage, alias or existing definition by (v + j) % 3; the args
 * follow the op's comment in ops.def. Variant 3 instead carries one arg of
 * every kind (the codec does not check kinds per op; the executor does). */
static void make_record(int op, int v, rgpu_record *r) {
    memset(r, 0, sizeof *r);
    r->op = (uint16_t)op;
    r->n_in = rgpu_op_table[op].n_in;
    r->n_out = rgpu_op_table[op].n_out;
    for (int j = 0; j < r->n_out; j++) {
        uint64_t tid = 100 + 10 * (uint64_t)op + (uint64_t)j;
        int dtype = (op + v + j) % RGPU_DTYPE_COUNT;
        int ndim = (op * 3 + v + j) % (RGPU_MAX_DIMS + 1);
        switch ((v + j) % 3) {
        case 0: r->out[j] = tdef_new(tid, dtype, ndim); break;
        case 1: r->out[j] = tdef_alias(tid, dtype, ndim); break;
        default: r->out[j] = tdef_existing(tid); break;
        }
    }
    for (int i = 0; i < r->n_in; i++) r->in[i] = (i == 1 && v == 2) ? 0 : 7 + (uint64_t)i + (v == 1 ? UINT64_MAX - 100 : 0);
    rgpu_arg *a = r->args;
    int n = 0;
    if (v == 3) {
        a[n++] = arg_none(); a[n++] = arg_int(INT64_MAX); a[n++] = arg_float(INFINITY);
        a[n++] = arg_bool(false); a[n++] = arg_ints(0, 0); a[n++] = arg_ints(1, LONG_INTS);
        a[n++] = arg_dtype(RGPU_BOOL); a[n++] = arg_hash((uint8_t)op); a[n++] = arg_float(NAN);
        r->n_args = (uint8_t)n;
        return;
    }
    switch (op) {
    case RGPU_OP_FREE: a[n++] = arg_ints(0, v == 0 ? 0 : v == 1 ? 1 : LONG_INTS); break;
    case RGPU_OP_UPLOAD: a[n++] = arg_hash((uint8_t)v); a[n++] = arg_int(v == 0 ? 0 : INT64_MAX); break;
    case RGPU_OP_FULL: a[n++] = scalar(v, 0); break;
    case RGPU_OP_ARANGE: a[n++] = scalar(v, 0); a[n++] = scalar(v, 1); break;
    case RGPU_OP_ADD_TENSOR: case RGPU_OP_SUB_TENSOR: a[n++] = scalar(v, 2); break;
    case RGPU_OP_ADD_SCALAR: case RGPU_OP_SUB_SCALAR: case RGPU_OP_RSUB_SCALAR:
        a[n++] = scalar(v, 3); a[n++] = scalar(v, 4); break;
    case RGPU_OP_MUL_SCALAR: case RGPU_OP_DIV_SCALAR: a[n++] = scalar(v, 5); break;
    case RGPU_OP_SUM: case RGPU_OP_MEAN:
        a[n++] = arg_ints(2, v == 0 ? 0 : (uint32_t)v + 1); a[n++] = arg_bool(v & 1);
        if (v == 2) a[n++] = arg_dtype(RGPU_F64);   /* optional dtype */
        break;
    default:
        /* ops without scalar args; variant 2 adds a NONE (an absent optional) */
        if (v == 2) a[n++] = arg_none();
        break;
    }
    r->n_args = (uint8_t)n;
}

static void encode_ok(rgpu_buf *b, const rgpu_record *r) {
    size_t before = b->len;
    rgpu_status s = rgpu_record_encode(b, r);
    ck_assert_msg(s == RGPU_OK, "encode %s: %s", rgpu_op_name(r->op), rgpu_status_name(s));
    ck_assert_uint_eq(b->len - before, rgpu_record_size(r));
}

/* A chunk: every op, every variant, back to back. */
static void make_chunk(rgpu_buf *b, int *n_records) {
    int n = 0;
    for (int v = 0; v < N_VARIANTS; v++)
        for (int op = 0; op < RGPU_OP_COUNT; op++) {
            rgpu_record r;
            make_record(op, v, &r);
            encode_ok(b, &r);
            n++;
        }
    if (n_records) *n_records = n;
}

static rgpu_status decode1(const uint8_t *p, size_t n) {
    rgpu_record r;
    size_t used = 0;
    return rgpu_record_decode(p, n, &r, &used);
}

/* ---------------------------------------------------------------------------
 * Record round trips */

START_TEST(test_roundtrip_op)
{
    int op = _i;
    for (int v = 0; v < N_VARIANTS; v++) {
        rgpu_record r, d;
        make_record(op, v, &r);
        rgpu_buf b = { 0 };
        encode_ok(&b, &r);
        memset(&d, 0xAB, sizeof d);
        size_t used = 0;
        rgpu_status s = rgpu_record_decode(b.p, b.len, &d, &used);
        ck_assert_msg(s == RGPU_OK, "decode %s v%d: %s", rgpu_op_name(op), v, rgpu_status_name(s));
        ck_assert_uint_eq(used, b.len);
        assert_record_eq(&r, &d);
        /* re-encoding the decoded record gives the same bytes */
        rgpu_buf b2 = { 0 };
        encode_ok(&b2, &d);
        ck_assert_uint_eq(b2.len, b.len);
        ck_assert_mem_eq(b2.p, b.p, b.len);
        /* every proper prefix is truncated, never a crash nor another error */
        for (size_t k = 0; k < b.len; k++) {
            uint8_t *cp = malloc(k ? k : 1);   /* exact-size copy: ASan sees overreads */
            memcpy(cp, b.p, k);
            rgpu_status ps = decode1(cp, k);
            REQUIRE(ps == RGPU_ERR_TRUNCATED, "%s v%d prefix %zu/%zu: %s",
                          rgpu_op_name(op), v, k, b.len, rgpu_status_name(ps));
            free(cp);
        }
        rgpu_buf_free(&b); rgpu_buf_free(&b2);
    }
}
END_TEST

START_TEST(test_roundtrip_sequence)
{
    rgpu_buf b = { 0 };
    int n = 0;
    make_chunk(&b, &n);
    ck_assert_int_eq(n, N_VARIANTS * RGPU_OP_COUNT);
    size_t pos = 0;
    int i = 0;
    for (int v = 0; v < N_VARIANTS; v++)
        for (int op = 0; op < RGPU_OP_COUNT; op++, i++) {
            rgpu_record want, got;
            make_record(op, v, &want);
            size_t used = 0;
            ck_assert_int_eq(rgpu_record_decode(b.p + pos, b.len - pos, &got, &used), RGPU_OK);
            ck_assert_uint_eq(used, rgpu_record_size(&want));
            assert_record_eq(&want, &got);
            pos += used;
        }
    ck_assert_uint_eq(pos, b.len);
    ck_assert_int_eq(decode1(b.p + pos, 0), RGPU_ERR_TRUNCATED);
    rgpu_buf_free(&b);
}
END_TEST

START_TEST(test_record_layout)
{
    /* Pin the byte layout FORMAT.md describes: add.Tensor, one new-storage
     * output (f32, ndim 1), two inputs, alpha = INT 1. */
    rgpu_record r = { .op = RGPU_OP_ADD_TENSOR, .n_out = 1, .n_in = 2, .n_args = 1 };
    r.out[0] = (rgpu_tdef){ .tid = 5, .flags = RGPU_TDEF_NEW_STORAGE, .sid = 6, .dtype = RGPU_F32,
                            .ndim = 1, .nbytes = 16, .offset = 0, .sizes = { 4 }, .strides = { 1 } };
    r.in[0] = 1; r.in[1] = 2;
    r.args[0] = arg_int(1);
    static const uint8_t want[] = {
        11, 0, 1, 2, 1, 0,                       /* op u16, n_out, n_in, n_args, reserved */
        5, 0, 0, 0, 0, 0, 0, 0, 2,               /* tid u64, flags */
        6, 0, 0, 0, 0, 0, 0, 0, 0, 1,            /* sid u64, dtype, ndim */
        16, 0, 0, 0, 0, 0, 0, 0,                 /* nbytes (NEW_STORAGE only) */
        0, 0, 0, 0, 0, 0, 0, 0,                  /* offset */
        4, 0, 0, 0, 0, 0, 0, 0,                  /* sizes */
        1, 0, 0, 0, 0, 0, 0, 0,                  /* strides */
        1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,  /* inputs */
        1, 1, 0, 0, 0, 0, 0, 0, 0,               /* INT 1 */
    };
    ck_assert_int_eq(RGPU_OP_ADD_TENSOR, 11);
    rgpu_buf b = { 0 };
    encode_ok(&b, &r);
    ck_assert_uint_eq(b.len, sizeof want);
    ck_assert_mem_eq(b.p, want, sizeof want);
    rgpu_buf_free(&b);

    /* EXISTING output: tid + flags only. */
    rgpu_record c = { .op = RGPU_OP_COPY, .n_out = 1, .n_in = 1 };
    c.out[0] = tdef_existing(9); c.in[0] = 3;
    static const uint8_t want2[] = { 9, 0, 1, 1, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 3, 0, 0, 0, 0, 0, 0, 0 };
    encode_ok(&b, &c);
    ck_assert_uint_eq(b.len, sizeof want2);
    ck_assert_mem_eq(b.p, want2, sizeof want2);
    rgpu_buf_free(&b);
}
END_TEST

START_TEST(test_arg_accessors)
{
    rgpu_arg a = arg_ints(0, 3);
    ck_assert_int_eq(rgpu_arg_int_at(&a, 0), INT64_MIN);
    ck_assert_int_eq(rgpu_arg_int_at(&a, 1), INT64_MAX);
    ck_assert_int_eq(rgpu_arg_int_at(&a, 3), 0);      /* out of range */
    rgpu_arg i = arg_int(-3), f = arg_float(2.5), t = arg_bool(true);
    ck_assert(rgpu_arg_as_f64(&i) == -3.0);
    ck_assert(rgpu_arg_as_f64(&f) == 2.5);
    ck_assert(rgpu_arg_as_f64(&t) == 1.0);
    ck_assert_int_eq(rgpu_arg_as_i64(&f), 2);
    ck_assert_int_eq(rgpu_arg_as_i64(&t), 1);
    ck_assert_int_eq(rgpu_arg_int_at(&i, 0), 0);       /* not an INTS arg */
}
END_TEST

/* ---------------------------------------------------------------------------
 * Corrupt records: each class its own code */

/* Encode add.Tensor with one new-storage output and return the buffer;
 * offsets of interesting fields follow test_record_layout. */
static void add_record(rgpu_buf *b) {
    rgpu_record r = { .op = RGPU_OP_ADD_TENSOR, .n_out = 1, .n_in = 2, .n_args = 1 };
    r.out[0] = tdef_new(5, RGPU_F32, 1);
    r.in[0] = 1; r.in[1] = 2;
    r.args[0] = arg_int(1);
    memset(b, 0, sizeof *b);
    encode_ok(b, &r);
}
enum { OFF_OP = 0, OFF_NOUT = 2, OFF_NIN = 3, OFF_NARGS = 4, OFF_RES = 5, OFF_FLAGS = 14,
       OFF_DTYPE = 23, OFF_NDIM = 24, OFF_OFFSET = 33, OFF_SIZE0 = 41, OFF_STRIDE0 = 49,
       OFF_ARG0 = 73 };

START_TEST(test_bad_op)
{
    rgpu_buf b;
    add_record(&b);
    rgpu_st16(b.p + OFF_OP, RGPU_OP_COUNT);
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_BAD_OP);
    rgpu_st16(b.p + OFF_OP, 0xFFFF);
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_BAD_OP);
    rgpu_record r = { .op = RGPU_OP_COUNT };
    rgpu_buf e = { 0 };
    ck_assert_int_eq(rgpu_record_encode(&e, &r), RGPU_ERR_BAD_OP);
    ck_assert_uint_eq(e.len, 0);
    rgpu_buf_free(&b); rgpu_buf_free(&e);
}
END_TEST

START_TEST(test_too_many_dims)
{
    rgpu_buf b;
    add_record(&b);
    b.p[OFF_NDIM] = RGPU_MAX_DIMS + 1;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_TOO_MANY_DIMS);
    b.p[OFF_NDIM] = 255;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_TOO_MANY_DIMS);
    rgpu_record r;
    make_record(RGPU_OP_EMPTY, 0, &r);
    r.out[0].ndim = RGPU_MAX_DIMS + 1;
    rgpu_buf e = { 0 };
    ck_assert_int_eq(rgpu_record_encode(&e, &r), RGPU_ERR_TOO_MANY_DIMS);
    rgpu_buf_free(&b); rgpu_buf_free(&e);
}
END_TEST

START_TEST(test_bad_dtype)
{
    rgpu_buf b;
    add_record(&b);
    b.p[OFF_DTYPE] = RGPU_DTYPE_COUNT;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_BAD_DTYPE);
    b.p[OFF_DTYPE] = 0xFF;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_BAD_DTYPE);
    rgpu_buf_free(&b);
    /* a DTYPE arg out of range */
    rgpu_record r;
    make_record(RGPU_OP_SUM, 2, &r);
    ck_assert_uint_eq(r.args[2].kind, RGPU_ARG_DTYPE);
    encode_ok(&b, &r);
    b.p[b.len - 1] = RGPU_DTYPE_COUNT;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_BAD_DTYPE);
    rgpu_buf_free(&b);
    r.out[0] = tdef_new(1, RGPU_F32, 1);
    r.out[0].dtype = RGPU_DTYPE_COUNT;
    ck_assert_int_eq(rgpu_record_encode(&b, &r), RGPU_ERR_BAD_DTYPE);
    rgpu_buf_free(&b);
}
END_TEST

START_TEST(test_reserved)
{
    rgpu_buf b;
    add_record(&b);
    b.p[OFF_RES] = 1;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_RESERVED);
    b.p[OFF_RES] = 0;
    for (int bit = 2; bit < 8; bit++) {        /* tdef flag bits other than EXISTING, NEW_STORAGE */
        b.p[OFF_FLAGS] = (uint8_t)(RGPU_TDEF_NEW_STORAGE | (1u << bit));
        ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_RESERVED);
    }
    b.p[OFF_FLAGS] = RGPU_TDEF_EXISTING | RGPU_TDEF_NEW_STORAGE;   /* contradictory */
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_RESERVED);
    rgpu_buf_free(&b);
    rgpu_record r;
    make_record(RGPU_OP_EMPTY, 0, &r);
    r.out[0].flags |= 0x80;
    ck_assert_int_eq(rgpu_record_encode(&b, &r), RGPU_ERR_RESERVED);
    rgpu_buf_free(&b);
}
END_TEST

/* r does not encode: code, and nothing is appended */
static void encode_refused(const rgpu_record *r, int code) {
    rgpu_buf b = { 0 };
    ck_assert_int_eq(rgpu_record_encode(&b, r), code);
    ck_assert_uint_eq(b.len, 0);
    rgpu_buf_free(&b);
}

START_TEST(test_arity)
{
    rgpu_buf b;
    add_record(&b);
    b.p[OFF_NIN] = 1;            /* add.Tensor takes 2 */
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_ARITY);
    b.p[OFF_NIN] = 3;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_ARITY);
    b.p[OFF_NIN] = 2; b.p[OFF_NOUT] = 0;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_ARITY);
    b.p[OFF_NOUT] = 2;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_ARITY);
    /* counts over the hard limits are TOO_LARGE before arity is looked at */
    b.p[OFF_NOUT] = RGPU_MAX_OUT + 1;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_TOO_LARGE);
    b.p[OFF_NOUT] = 1; b.p[OFF_NIN] = RGPU_MAX_IN + 1;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_TOO_LARGE);
    b.p[OFF_NIN] = 2; b.p[OFF_NARGS] = RGPU_MAX_ARGS + 1;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_TOO_LARGE);
    rgpu_buf_free(&b);
    for (int op = 0; op < RGPU_OP_COUNT; op++) {
        rgpu_record r;
        make_record(op, 0, &r);
        if (rgpu_op_table[op].flags & RGPU_OPF_VARIADIC) {
            r.n_in = (uint8_t)(rgpu_op_table[op].n_in - 1);   /* below the minimum */
            if (rgpu_op_table[op].n_in > 0) encode_refused(&r, RGPU_ERR_ARITY);
            r.n_in = (uint8_t)rgpu_op_table[op].n_in;
        } else {
            r.n_in++;
            encode_refused(&r, RGPU_ERR_ARITY);
            r.n_in--;
        }
        r.n_out++;
        encode_refused(&r, RGPU_ERR_ARITY);
    }
}
END_TEST

START_TEST(test_encode_rejects_undecodable)
{
    /* What the encoder accepts, the decoder must accept: otherwise the client
     * ships a chunk the server rejects whole, far from the call that made it. */
    rgpu_record r;
    make_record(RGPU_OP_EMPTY, 0, &r);
    r.out[0].flags = RGPU_TDEF_EXISTING | RGPU_TDEF_NEW_STORAGE;
    encode_refused(&r, RGPU_ERR_RESERVED);
    make_record(RGPU_OP_EMPTY, 0, &r);
    r.out[0].offset = -1;
    encode_refused(&r, RGPU_ERR_OUT_OF_BOUNDS);
    make_record(RGPU_OP_EMPTY, 0, &r);
    r.out[0].strides[0] = -1;
    encode_refused(&r, RGPU_ERR_OUT_OF_BOUNDS);
    make_record(RGPU_OP_SUM, 2, &r);                 /* ints, bool, dtype */
    r.args[1].v.i = 2;
    encode_refused(&r, RGPU_ERR_BAD_ARG);
    r.args[1].v.i = 256;                             /* would encode as 0 */
    encode_refused(&r, RGPU_ERR_BAD_ARG);
    make_record(RGPU_OP_SUM, 2, &r);
    r.args[2].v.i = RGPU_DTYPE_COUNT;
    encode_refused(&r, RGPU_ERR_BAD_DTYPE);
}
END_TEST

START_TEST(test_bad_args)
{
    rgpu_buf b;
    add_record(&b);
    ck_assert_uint_eq(b.p[OFF_ARG0], RGPU_ARG_INT);
    b.p[OFF_ARG0] = RGPU_ARG_KIND_COUNT;       /* unknown kind */
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_BAD_ARG);
    b.p[OFF_ARG0] = 0xFF;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_BAD_ARG);
    rgpu_buf_free(&b);

    rgpu_record r;
    make_record(RGPU_OP_SUM, 0, &r);           /* ints dims (empty), bool keepdim */
    ck_assert_uint_eq(r.args[1].kind, RGPU_ARG_BOOL);
    encode_ok(&b, &r);
    for (int v = 2; v < 256; v++) {
        b.p[b.len - 1] = (uint8_t)v;
        REQUIRE(decode1(b.p, b.len) == RGPU_ERR_BAD_ARG, "bool byte %d", v);
    }
    b.p[b.len - 1] = 1;
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_OK);
    rgpu_buf_free(&b);

    r.args[0].kind = RGPU_ARG_KIND_COUNT;
    ck_assert_int_eq(rgpu_record_encode(&b, &r), RGPU_ERR_BAD_ARG);
    rgpu_buf_free(&b);
}
END_TEST

START_TEST(test_absurd_ints)
{
    rgpu_record r;
    make_record(RGPU_OP_FREE, 0, &r);          /* one empty INTS arg, last in the record */
    rgpu_buf b = { 0 };
    encode_ok(&b, &r);
    uint8_t *cnt = b.p + b.len - 4;
    rgpu_st32(cnt, RGPU_MAX_INTS + 1);
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_TOO_LARGE);
    rgpu_st32(cnt, UINT32_MAX);
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_TOO_LARGE);
    rgpu_st32(cnt, RGPU_MAX_INTS);             /* allowed count, but the bytes aren't there */
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_TRUNCATED);
    rgpu_buf_free(&b);
    r.args[0].v.ints.n = RGPU_MAX_INTS + 1;
    r.args[0].v.ints.p = ints_store[0];
    ck_assert_int_eq(rgpu_record_encode(&b, &r), RGPU_ERR_TOO_LARGE);
    rgpu_buf_free(&b);
}
END_TEST

START_TEST(test_negative_view_fields)
{
    rgpu_buf b;
    add_record(&b);
    rgpu_st64(b.p + OFF_OFFSET, (uint64_t)-1);
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_OUT_OF_BOUNDS);
    rgpu_st64(b.p + OFF_OFFSET, 0);
    rgpu_st64(b.p + OFF_SIZE0, (uint64_t)INT64_MIN);
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_OUT_OF_BOUNDS);
    rgpu_st64(b.p + OFF_SIZE0, 2);
    rgpu_st64(b.p + OFF_STRIDE0, (uint64_t)-1);
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_ERR_OUT_OF_BOUNDS);
    rgpu_st64(b.p + OFF_STRIDE0, 1);
    ck_assert_int_eq(decode1(b.p, b.len), RGPU_OK);
    rgpu_buf_free(&b);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Complex dtypes: sizes, names, and the views view_as_real makes */

START_TEST(test_complex_dtypes)
{
    ck_assert_uint_eq(rgpu_dtype_size(RGPU_C64), 8);
    ck_assert_uint_eq(rgpu_dtype_size(RGPU_C128), 16);
    ck_assert_uint_eq(rgpu_dtype_size(RGPU_C32), 4);
    ck_assert_str_eq(rgpu_dtype_name(RGPU_C64), "complex64");
    ck_assert_str_eq(rgpu_dtype_name(RGPU_C128), "complex128");
    ck_assert_str_eq(rgpu_dtype_name(RGPU_C32), "complex32");
    ck_assert(rgpu_dtype_is_complex(RGPU_C64) && rgpu_dtype_is_complex(RGPU_C128) && rgpu_dtype_is_complex(RGPU_C32));
    ck_assert(!rgpu_dtype_is_complex(RGPU_F32) && !rgpu_dtype_is_float(RGPU_C64));
    ck_assert_uint_eq(rgpu_dtype_size(RGPU_DTYPE_COUNT), 0);
    /* 4 complex64 elements (32 bytes); element 3 fits, the real view of it too */
    rgpu_tdef c = { .dtype = RGPU_C64, .ndim = 1, .offset = 3 };
    c.sizes[0] = 1; c.strides[0] = 1;
    ck_assert_int_eq(rgpu_tdef_check_bounds(&c, 32), RGPU_OK);
    c.offset = 4;
    ck_assert_int_eq(rgpu_tdef_check_bounds(&c, 32), RGPU_ERR_OUT_OF_BOUNDS);
    rgpu_tdef r = { .dtype = RGPU_F32, .ndim = 2, .offset = 6 };   /* view_as_real(c[3:4]) */
    r.sizes[0] = 1; r.sizes[1] = 2; r.strides[0] = 2; r.strides[1] = 1;
    ck_assert_int_eq(rgpu_tdef_check_bounds(&r, 32), RGPU_OK);
    r.offset = 7;
    ck_assert_int_eq(rgpu_tdef_check_bounds(&r, 32), RGPU_ERR_OUT_OF_BOUNDS);
    /* a complex128 record round-trips through encode/decode */
    rgpu_record rec;
    memset(&rec, 0, sizeof rec);
    rec.op = RGPU_OP_COPY; rec.n_in = 1; rec.n_out = 1;
    rec.in[0] = 7;
    rec.out[0] = tdef_new(9, RGPU_C128, 2);
    rgpu_buf b = { 0 };
    ck_assert_int_eq(rgpu_record_encode(&b, &rec), RGPU_OK);
    rgpu_record back;
    size_t used = 0;
    ck_assert_int_eq(rgpu_record_decode(b.p, b.len, &back, &used), RGPU_OK);
    ck_assert_uint_eq(used, b.len);
    ck_assert_uint_eq(back.out[0].dtype, RGPU_C128);
    ck_assert_uint_eq(back.out[0].nbytes, rec.out[0].nbytes);
    rgpu_buf_free(&b);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Storage bounds */

static rgpu_tdef view1(int dtype, int64_t offset, int64_t size, int64_t stride) {
    rgpu_tdef t = { .dtype = (uint8_t)dtype, .ndim = 1, .offset = offset };
    t.sizes[0] = size; t.strides[0] = stride;
    return t;
}

START_TEST(test_bounds)
{
    rgpu_tdef t = view1(RGPU_F32, 0, 4, 1);
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_OK);          /* exactly fits */
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 15), RGPU_ERR_OUT_OF_BOUNDS);  /* too big */
    t = view1(RGPU_F32, 1, 4, 1);
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_ERR_OUT_OF_BOUNDS);
    t = view1(RGPU_F32, 4, 1, 1);                                        /* offset past end */
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_ERR_OUT_OF_BOUNDS);
    t = view1(RGPU_F32, INT64_MAX, 1, 1);
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_ERR_OVERFLOW);
    t = view1(RGPU_F32, 0, 2, 4);                                        /* stride past end */
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_ERR_OUT_OF_BOUNDS);
    t = view1(RGPU_F32, 0, 3, INT64_MAX);                                /* (size-1)*stride overflows */
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, UINT64_MAX), RGPU_ERR_OVERFLOW);
    t = view1(RGPU_F32, 1, 2, INT64_MAX);                                /* offset + span overflows */
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, UINT64_MAX), RGPU_ERR_OVERFLOW);
    t = view1(RGPU_F64, (int64_t)1 << 61, 1, 1);                         /* (last+1)*8 overflows */
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, UINT64_MAX), RGPU_ERR_OVERFLOW);
    t = view1(RGPU_F32, -1, 1, 1);
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_ERR_OUT_OF_BOUNDS);
    t = view1(RGPU_F32, 0, 2, -1);
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_ERR_OUT_OF_BOUNDS);
    t = view1(RGPU_F32, 0, 1, 1);
    t.dtype = RGPU_DTYPE_COUNT;
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_ERR_BAD_DTYPE);
    t = view1(RGPU_F32, 0, 1, 1);
    t.ndim = RGPU_MAX_DIMS + 1;
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_ERR_TOO_MANY_DIMS);

    /* sizes product overflows int64 */
    rgpu_tdef big = { .dtype = RGPU_U8, .ndim = 2 };
    big.sizes[0] = INT64_MAX / 2; big.sizes[1] = 3; big.strides[0] = 0; big.strides[1] = 0;
    ck_assert_int_eq(rgpu_tdef_numel(&big), -1);
    ck_assert_int_eq(rgpu_tdef_check_bounds(&big, UINT64_MAX), RGPU_ERR_OVERFLOW);

    /* broadcast (stride 0) over one element, scalar (ndim 0) */
    t = view1(RGPU_I64, 1, 1000, 0);
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_OK);
    rgpu_tdef s0 = { .dtype = RGPU_BOOL, .ndim = 0, .offset = 2 };
    ck_assert_int_eq(rgpu_tdef_numel(&s0), 1);
    ck_assert_int_eq(rgpu_tdef_check_bounds(&s0, 3), RGPU_OK);
    ck_assert_int_eq(rgpu_tdef_check_bounds(&s0, 2), RGPU_ERR_OUT_OF_BOUNDS);

    /* the multi-dim contiguous views the round trips use fit their storage */
    for (int nd = 0; nd <= RGPU_MAX_DIMS; nd++) {
        rgpu_tdef c = tdef_new(1, RGPU_F16, nd);
        ck_assert_int_eq(rgpu_tdef_check_bounds(&c, c.nbytes), RGPU_OK);
        ck_assert_int_eq(rgpu_tdef_check_bounds(&c, c.nbytes - 1), RGPU_ERR_OUT_OF_BOUNDS);
    }
}
END_TEST

START_TEST(test_bounds_empty_view)
{
    /* An empty view reads nothing: like ATen, any offset is valid, even past
     * the end of its storage (x[:, 1] of an empty (0, 3) tensor has offset 1
     * in a 0-byte storage), up to where offset * element size could overflow.
     * Storage of 16 bytes = 4 float32. */
    rgpu_tdef t = view1(RGPU_F32, 4, 0, 1);
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_OK);
    t.offset = 5;
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_OK);
    t.offset = 1000;
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 0), RGPU_OK);
    t.offset = (int64_t)(RGPU_MAX_TENSOR_BYTES / 4) + 1;
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_ERR_OUT_OF_BOUNDS);
    t.offset = -1;
    ck_assert_int_eq(rgpu_tdef_check_bounds(&t, 16), RGPU_ERR_OUT_OF_BOUNDS);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Frames */

static void frame_of(const void *raw, size_t n, rgpu_buf *out) {
    memset(out, 0, sizeof *out);
    ck_assert_int_eq(rgpu_frame_compress(raw, n, 3, out), RGPU_OK);
}

/* make_chunk's records in chunk, and their frame in f */
static void framed_chunk(rgpu_buf *chunk, rgpu_buf *f) {
    make_chunk(chunk, NULL);
    frame_of(chunk->p, chunk->len, f);
}

START_TEST(test_frame_roundtrip)
{
    rgpu_buf chunk = { 0 };
    make_chunk(&chunk, NULL);
    size_t sizes[] = { 0, 1, chunk.len };
    for (int i = 0; i < 3; i++) {
        rgpu_buf f;
        frame_of(chunk.p, sizes[i], &f);
        ck_assert_uint_eq(rgpu_ld32(f.p), RGPU_FRAME_MAGIC);
        ck_assert_mem_eq(f.p, "RGF1", 4);
        ck_assert_uint_eq(rgpu_ld32(f.p + 4), 0);
        ck_assert_uint_eq(rgpu_ld64(f.p + 8), sizes[i]);
        ck_assert_uint_eq(rgpu_ld64(f.p + 16), XXH3_64bits(chunk.p, sizes[i]));
        uint8_t *raw; size_t rn;
        ck_assert_int_eq(rgpu_frame_decompress(f.p, f.len, RGPU_MAX_CHUNK_RAW, &raw, &rn), RGPU_OK);
        ck_assert_uint_eq(rn, sizes[i]);
        if (rn) ck_assert_mem_eq(raw, chunk.p, rn);
        free(raw);
        rgpu_buf_free(&f);
    }
    rgpu_buf_free(&chunk);
}
END_TEST

START_TEST(test_frame_corrupt)
{
    rgpu_buf chunk = { 0 }, f;
    framed_chunk(&chunk, &f);
    uint8_t *raw; size_t rn;
    uint8_t *c = malloc(f.len);

    memcpy(c, f.p, f.len); c[0] ^= 1;                          /* magic */
    ck_assert_int_eq(rgpu_frame_decompress(c, f.len, RGPU_MAX_CHUNK_RAW, &raw, &rn), RGPU_ERR_BAD_MAGIC);
    ck_assert_ptr_null(raw);
    memcpy(c, f.p, f.len); c[4] = 1;                           /* flags reserved */
    ck_assert_int_eq(rgpu_frame_decompress(c, f.len, RGPU_MAX_CHUNK_RAW, &raw, &rn), RGPU_ERR_RESERVED);
    memcpy(c, f.p, f.len); c[16] ^= 0x40;                      /* stored XXH3-64 */
    ck_assert_int_eq(rgpu_frame_decompress(c, f.len, RGPU_MAX_CHUNK_RAW, &raw, &rn), RGPU_ERR_BAD_CHECKSUM);
    ck_assert_ptr_null(raw);
    memcpy(c, f.p, f.len); rgpu_st64(c + 8, RGPU_MAX_CHUNK_RAW + 1ull);   /* raw_len over max */
    ck_assert_int_eq(rgpu_frame_decompress(c, f.len, RGPU_MAX_CHUNK_RAW, &raw, &rn), RGPU_ERR_TOO_LARGE);
    memcpy(c, f.p, f.len); rgpu_st64(c + 8, UINT64_MAX);
    ck_assert_int_eq(rgpu_frame_decompress(c, f.len, UINT64_MAX, &raw, &rn), RGPU_ERR_TOO_LARGE);
    memcpy(c, f.p, f.len); rgpu_st64(c + 8, chunk.len - 1);   /* raw_len disagrees with zstd's */
    ck_assert_int_eq(rgpu_frame_decompress(c, f.len, RGPU_MAX_CHUNK_RAW, &raw, &rn), RGPU_ERR_COMPRESS);
    memcpy(c, f.p, f.len);
    ck_assert_int_eq(rgpu_frame_decompress(c, f.len, chunk.len - 1, &raw, &rn), RGPU_ERR_TOO_LARGE);

    /* truncated frames: header, zstd body, last byte */
    for (size_t k = 0; k < RGPU_FRAME_HEADER; k++)
        ck_assert_int_eq(rgpu_frame_decompress(f.p, k, RGPU_MAX_CHUNK_RAW, &raw, &rn), RGPU_ERR_TRUNCATED);
    ck_assert_int_eq(rgpu_frame_decompress(f.p, f.len - 1, RGPU_MAX_CHUNK_RAW, &raw, &rn), RGPU_ERR_TRUNCATED);
    ck_assert_int_eq(rgpu_frame_decompress(f.p, f.len - f.len / 3, RGPU_MAX_CHUNK_RAW, &raw, &rn), RGPU_ERR_TRUNCATED);
    for (size_t k = RGPU_FRAME_HEADER; k < f.len; k++) {       /* every prefix, the zstd header's too */
        uint8_t *cp = malloc(k);
        memcpy(cp, f.p, k);
        rgpu_status s = rgpu_frame_decompress(cp, k, RGPU_MAX_CHUNK_RAW, &raw, &rn);
        REQUIRE(s == RGPU_ERR_TRUNCATED && !raw, "prefix %zu of %zu: %s", k, f.len, rgpu_status_name(s));
        free(cp);
    }
    free(c);
    rgpu_buf_free(&f);

    /* A bit flipped in the payload itself: incompressible bytes travel in a
     * raw zstd block, so zstd still decodes and only the checksum notices. */
    uint8_t noise[4096];
    rng_state = 42;
    for (size_t i = 0; i < sizeof noise; i++) noise[i] = (uint8_t)rng();
    frame_of(noise, sizeof noise, &f);
    f.p[f.len - 100] ^= 0x10;
    ck_assert_int_eq(rgpu_frame_decompress(f.p, f.len, RGPU_MAX_CHUNK_RAW, &raw, &rn), RGPU_ERR_BAD_CHECKSUM);
    rgpu_buf_free(&f);
    rgpu_buf_free(&chunk);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Fuzz: random damage to a chunk of records (and to its frame) */

static void mutate(uint8_t *p, size_t *n, size_t cap) {
    int k = 1 + (int)(rng() % 4);
    for (int m = 0; m < k; m++) {
        if (*n == 0) return;
        size_t at = rng() % *n;
        switch (rng() % 7) {
        case 0: p[at] ^= (uint8_t)(1u << (rng() % 8)); break;
        case 1: p[at] = (uint8_t)rng(); break;
        case 2: *n = at; break;                                     /* truncate */
        case 3: if (*n + 1 <= cap) { memmove(p + at + 1, p + at, *n - at); p[at] = (uint8_t)rng(); (*n)++; } break;
        case 4: memmove(p + at, p + at + 1, *n - at - 1); (*n)--; break;
        case 5: {                                                   /* an extreme 8-byte value */
            static const uint64_t ext[] = { 0, 1, UINT64_MAX, (uint64_t)INT64_MAX, (uint64_t)INT64_MIN, 0xFFFFFFFF, 13, 255 };
            uint64_t v = ext[rng() % 8];
            for (int i = 0; i < 8 && at + i < *n; i++) p[at + i] = (uint8_t)(v >> (8 * i));
            break;
        }
        default: { uint8_t v[] = { 0, 1, 2, 0xFF, RGPU_MAX_DIMS + 1, RGPU_OP_COUNT, RGPU_DTYPE_COUNT }; p[at] = v[rng() % 7]; }
        }
    }
}

START_TEST(test_fuzz_records)
{
    rgpu_buf chunk = { 0 };
    int nrec = 0;
    make_chunk(&chunk, &nrec);
    uint8_t *work = malloc(chunk.len + 16);
    rng_state = 0x9E3779B97F4A7C15ull;
    int n_ok = 0, n_err = 0;
    for (int it = 0; it < 20000; it++) {
        size_t n = chunk.len;
        memcpy(work, chunk.p, n);
        mutate(work, &n, chunk.len + 16);
        /* exact-size heap copy so ASan catches any read past the end */
        uint8_t *in = malloc(n ? n : 1);
        memcpy(in, work, n);
        size_t pos = 0;
        rgpu_status s = RGPU_OK;
        while (pos < n) {
            rgpu_record r;
            size_t used = 0;
            s = rgpu_record_decode(in + pos, n - pos, &r, &used);
            if (s) break;
            REQUIRE(used > 0 && used <= n - pos && used == rgpu_record_size(&r), "iteration %d: used %zu", it, used);
            for (int i = 0; i < r.n_args; i++)            /* int lists point inside the input */
                if (r.args[i].kind == RGPU_ARG_INTS && r.args[i].v.ints.n)
                    REQUIRE(r.args[i].v.ints.p >= in + pos &&
                            r.args[i].v.ints.p + 8 * (size_t)r.args[i].v.ints.n <= in + pos + used,
                            "iteration %d: int list outside the record", it);
            pos += used;
        }
        REQUIRE(s >= 0 && s < RGPU_STATUS_COUNT_, "iteration %d: status %d", it, (int)s);
        if (s) n_err++; else n_ok++;
        free(in);
    }
    ck_assert_int_gt(n_err, 1000);   /* the mutations do reach the checks */
    free(work);
    rgpu_buf_free(&chunk);
}
END_TEST

START_TEST(test_fuzz_frames)
{
    rgpu_buf chunk = { 0 }, f;
    framed_chunk(&chunk, &f);
    uint8_t *work = malloc(f.len + 16);
    rng_state = 7;
    for (int it = 0; it < 3000; it++) {
        size_t n = f.len;
        memcpy(work, f.p, n);
        mutate(work, &n, f.len + 16);
        uint8_t *in = malloc(n ? n : 1);
        memcpy(in, work, n);
        uint8_t *raw; size_t rn;
        rgpu_status s = rgpu_frame_decompress(in, n, RGPU_MAX_CHUNK_RAW, &raw, &rn);
        REQUIRE(s >= 0 && s < RGPU_STATUS_COUNT_, "iteration %d: status %d", it, (int)s);
        if (s == RGPU_OK)            /* survived: the checksum vouches for the bytes */
            REQUIRE(rn == chunk.len && memcmp(raw, chunk.p, rn) == 0, "iteration %d: wrong bytes accepted", it);
        else
            REQUIRE(raw == NULL, "iteration %d: raw left set on error", it);
        free(raw);
        free(in);
    }
    free(work);
    rgpu_buf_free(&f);
    rgpu_buf_free(&chunk);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Wire */

START_TEST(test_wire_header)
{
    uint8_t h[RGPU_WIRE_HEADER];
    rgpu_msg_header mh;
    rgpu_wire_header_encode(h, RGPU_MSG_CHUNK, 0x0102030405060708ull);
    static const uint8_t want[16] = { 3, 0, 0, 0, 'R', 'G', 'P', 'W', 8, 7, 6, 5, 4, 3, 2, 1 };
    ck_assert_mem_eq(h, want, 16);
    ck_assert_int_eq(rgpu_wire_header_decode(h, UINT64_MAX, &mh), RGPU_OK);
    ck_assert_uint_eq(mh.type, RGPU_MSG_CHUNK);
    ck_assert_uint_eq(mh.len, 0x0102030405060708ull);
    ck_assert_int_eq(rgpu_wire_header_decode(h, 0x0102030405060707ull, &mh), RGPU_ERR_TOO_LARGE);
    rgpu_wire_header_encode(h, RGPU_MSG_BYE, RGPU_MAX_FRAME + 1);
    ck_assert_int_eq(rgpu_wire_header_decode(h, RGPU_MAX_FRAME, &mh), RGPU_ERR_TOO_LARGE);

    rgpu_wire_header_encode(h, RGPU_MSG_ACK, 8);
    h[5] ^= 1;
    ck_assert_int_eq(rgpu_wire_header_decode(h, RGPU_MAX_FRAME, &mh), RGPU_ERR_BAD_MAGIC);
    for (int i = 1; i < 4; i++) {
        rgpu_wire_header_encode(h, RGPU_MSG_ACK, 8);
        h[i] = 1;
        ck_assert_int_eq(rgpu_wire_header_decode(h, RGPU_MAX_FRAME, &mh), RGPU_ERR_RESERVED);
    }
    rgpu_wire_header_encode(h, 0, 8);
    ck_assert_int_eq(rgpu_wire_header_decode(h, RGPU_MAX_FRAME, &mh), RGPU_ERR_BAD_MESSAGE);
    rgpu_wire_header_encode(h, RGPU_MSG_TYPE_COUNT_, 8);
    ck_assert_int_eq(rgpu_wire_header_decode(h, RGPU_MAX_FRAME, &mh), RGPU_ERR_BAD_MESSAGE);
    ck_assert(mh.type == RGPU_MSG_TYPE_COUNT_ && mh.len == 8);   /* a refusal can name the type */

    for (int t = 1; t < RGPU_MSG_TYPE_COUNT_; t++) ck_assert_str_ne(rgpu_msg_name(t), "?");
    ck_assert_str_eq(rgpu_msg_name(RGPU_MSG_CHUNK_REF), "CHUNK_REF");
    ck_assert_str_eq(rgpu_msg_name(0), "?");
    ck_assert_str_eq(rgpu_msg_name(RGPU_MSG_TYPE_COUNT_), "?");
}
END_TEST

typedef struct { int fd, type; const uint8_t *a; size_t an; const uint8_t *b; size_t bn; rgpu_status s; } send_job;
static void *send_thread(void *arg) {
    send_job *j = arg;
    j->s = rgpu_wire_send(j->fd, j->type, j->a, j->an, j->b, j->bn);
    return NULL;
}

START_TEST(test_wire_roundtrip)
{
    size_t big = 1u << 20;
    uint8_t *data = malloc(big);
    rng_state = 3;
    for (size_t i = 0; i < big; i++) data[i] = (uint8_t)rng();
    size_t lens[] = { 0, 1, big };
    for (int i = 0; i < 3; i++) {
        int sv[2];
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        size_t an = lens[i] / 3;                 /* header part + body part */
        send_job j = { sv[0], RGPU_MSG_BLOB, data, an, data + an, lens[i] - an, -1 };
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, send_thread, &j), 0);
        rgpu_msg_header h;
        uint8_t *payload;
        rgpu_status s = rgpu_wire_recv(sv[1], RGPU_MAX_FRAME, &h, &payload);
        pthread_join(th, NULL);
        ck_assert_int_eq(j.s, RGPU_OK);
        ck_assert_int_eq(s, RGPU_OK);
        ck_assert_uint_eq(h.type, RGPU_MSG_BLOB);
        ck_assert_uint_eq(h.len, lens[i]);
        ck_assert_ptr_nonnull(payload);
        if (lens[i]) ck_assert_mem_eq(payload, data, lens[i]);
        free(payload);
        /* a second message on the same stream; then an orderly close */
        ck_assert_int_eq(rgpu_wire_send(sv[0], RGPU_MSG_BYE, NULL, 0, NULL, 0), RGPU_OK);
        ck_assert_int_eq(rgpu_wire_recv(sv[1], RGPU_MAX_FRAME, &h, &payload), RGPU_OK);
        ck_assert_uint_eq(h.type, RGPU_MSG_BYE);
        ck_assert_uint_eq(h.len, 0);
        free(payload);
        close(sv[0]);
        ck_assert_int_eq(rgpu_wire_recv(sv[1], RGPU_MAX_FRAME, &h, &payload), RGPU_ERR_CLOSED);
        ck_assert_ptr_null(payload);
        close(sv[1]);
    }
    free(data);
}
END_TEST

START_TEST(test_wire_peer_closes)
{
    int sv[2];
    rgpu_msg_header h;
    uint8_t *payload;
    uint8_t hdr[RGPU_WIRE_HEADER];

    /* closes before a header */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    close(sv[0]);
    ck_assert_int_eq(rgpu_wire_recv(sv[1], RGPU_MAX_FRAME, &h, &payload), RGPU_ERR_CLOSED);
    close(sv[1]);

    /* closes inside the header */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    rgpu_wire_header_encode(hdr, RGPU_MSG_CHUNK, 100);
    ck_assert_int_eq(rgpu_io_write_all(sv[0], hdr, 7), RGPU_OK);
    close(sv[0]);
    ck_assert_int_eq(rgpu_wire_recv(sv[1], RGPU_MAX_FRAME, &h, &payload), RGPU_ERR_TRUNCATED);
    close(sv[1]);

    /* closes mid-payload */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(rgpu_io_write_all(sv[0], hdr, sizeof hdr), RGPU_OK);
    ck_assert_int_eq(rgpu_io_write_all(sv[0], "0123456789", 10), RGPU_OK);
    close(sv[0]);
    ck_assert_int_eq(rgpu_wire_recv(sv[1], RGPU_MAX_FRAME, &h, &payload), RGPU_ERR_TRUNCATED);
    ck_assert_ptr_null(payload);
    close(sv[1]);

    /* closes after the header of a message whose payload never comes */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(rgpu_io_write_all(sv[0], hdr, sizeof hdr), RGPU_OK);
    close(sv[0]);
    ck_assert_int_eq(rgpu_wire_recv(sv[1], RGPU_MAX_FRAME, &h, &payload), RGPU_ERR_TRUNCATED);
    close(sv[1]);

    /* a bad header is reported, not read past; a length over max too */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    memcpy(hdr + 4, "XXXX", 4);
    ck_assert_int_eq(rgpu_io_write_all(sv[0], hdr, sizeof hdr), RGPU_OK);
    ck_assert_int_eq(rgpu_wire_recv(sv[1], RGPU_MAX_FRAME, &h, &payload), RGPU_ERR_BAD_MAGIC);
    rgpu_wire_header_encode(hdr, RGPU_MSG_CHUNK, 1000);
    ck_assert_int_eq(rgpu_io_write_all(sv[0], hdr, sizeof hdr), RGPU_OK);
    ck_assert_int_eq(rgpu_wire_recv(sv[1], 999, &h, &payload), RGPU_ERR_TOO_LARGE);
    ck_assert_ptr_null(payload);
    close(sv[0]); close(sv[1]);

    /* sending to a peer that is gone: CLOSED, no SIGPIPE */
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    close(sv[1]);
    ck_assert_int_eq(rgpu_wire_send(sv[0], RGPU_MSG_ACK, "12345678", 8, NULL, 0), RGPU_ERR_CLOSED);
    close(sv[0]);
}
END_TEST

START_TEST(test_wire_pipe)
{
    /* not a socket: send falls back to writev */
    int pf[2];
    ck_assert_int_eq(pipe(pf), 0);
    ck_assert_int_eq(rgpu_wire_send(pf[1], RGPU_MSG_ACK, "abcd", 4, "efgh", 4), RGPU_OK);
    rgpu_msg_header h;
    uint8_t *payload;
    ck_assert_int_eq(rgpu_wire_recv(pf[0], RGPU_MAX_FRAME, &h, &payload), RGPU_OK);
    ck_assert_uint_eq(h.type, RGPU_MSG_ACK);
    ck_assert_uint_eq(h.len, 8);
    ck_assert_mem_eq(payload, "abcdefgh", 8);
    free(payload);
    close(pf[0]); close(pf[1]);
}
END_TEST

/* ---------------------------------------------------------------------------
 * .rgt container */

static char tmpdir[256];
static void rgt_setup(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/rgpu-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}
static void rgt_teardown(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}
static void tpath(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", tmpdir, name); }

typedef struct { rgpu_buf raw, frame; rgpu_hash h; uint64_t first_op; uint32_t count; } test_chunk;

static void make_test_chunk(test_chunk *c, int v, uint64_t first_op) {
    memset(c, 0, sizeof *c);
    for (int op = 0; op < RGPU_OP_COUNT; op++) {
        rgpu_record r;
        make_record(op, v, &r);
        encode_ok(&c->raw, &r);
    }
    c->count = RGPU_OP_COUNT;
    c->first_op = first_op;
    c->h = rgpu_hash_bytes(c->raw.p, c->raw.len);       /* identity: hash of the raw records */
    frame_of(c->raw.p, c->raw.len, &c->frame);
}
static void free_test_chunk(test_chunk *c) { rgpu_buf_free(&c->raw); rgpu_buf_free(&c->frame); }

static int64_t sql_int(const char *path, const char *q) {
    sqlite3 *db;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, q, -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}
static void sql_exec(const char *path, const char *q) {
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    char *err = NULL;
    int rc = sqlite3_exec(db, q, NULL, NULL, &err);
    ck_assert_msg(rc == SQLITE_OK, "%s: %s", q, err ? err : "?");
    sqlite3_close(db);
}

/* Write a trace: chunks A, B, A (A stored once, streamed twice), a blob
 * (put twice), a big incompressible blob, two results. */
static uint8_t big_blob[256 * 1024];
/* What write_trace wrote: its two chunks, the small blob and the big one
 * (frames and hashes). */
typedef struct written { test_chunk ch[2]; rgpu_buf bf, bigf; rgpu_hash bh, bigh; } written;

static void written_free(written *w) {
    free_test_chunk(&w->ch[0]); free_test_chunk(&w->ch[1]);
    rgpu_buf_free(&w->bf); rgpu_buf_free(&w->bigf);
}

static void write_trace(const char *path, written *w) {
    test_chunk *ch = w->ch;
    rgpu_buf *blob_frame = &w->bf, *big_frame = &w->bigf;
    rgpu_hash *blob_h = &w->bh, *big_h = &w->bigh;
    make_test_chunk(&ch[0], 0, 0);
    make_test_chunk(&ch[1], 1, RGPU_OP_COUNT);
    static const char blob[] = "tensor bytes tensor bytes tensor bytes";
    *blob_h = rgpu_hash_bytes(blob, sizeof blob);
    frame_of(blob, sizeof blob, blob_frame);
    rng_state = 11;
    for (size_t i = 0; i < sizeof big_blob; i++) big_blob[i] = (uint8_t)rng();
    *big_h = rgpu_hash_bytes(big_blob, sizeof big_blob);
    frame_of(big_blob, sizeof big_blob, big_frame);

    rgpu_rgt *t;
    ck_assert_int_eq(rgpu_rgt_create(path, "test_format", &t), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_set_meta(t, "torch_version", "2.5.0"), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_put_blob(t, blob_h, sizeof blob, blob_frame->p, blob_frame->len), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_put_chunk(t, &ch[0].h, 0, ch[0].count, ch[0].raw.len, ch[0].frame.p, ch[0].frame.len), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_put_chunk(t, &ch[1].h, RGPU_OP_COUNT, ch[1].count, ch[1].raw.len, ch[1].frame.p, ch[1].frame.len), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_flush(t), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_put_blob(t, blob_h, sizeof blob, blob_frame->p, blob_frame->len), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_put_chunk(t, &ch[0].h, 2 * RGPU_OP_COUNT, ch[0].count, ch[0].raw.len, ch[0].frame.p, ch[0].frame.len), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_put_result(t, RGPU_OP_DOWNLOAD, RGPU_OK, "\x01\x02\x03", 3), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_put_result(t, RGPU_OP_SYNC, RGPU_ERR_EXEC, NULL, 0), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_put_blob(t, big_h, sizeof big_blob, big_frame->p, big_frame->len), RGPU_OK);
    rgpu_rgt_close(t);
}

static void check_trace_stream(rgpu_rgt *t, test_chunk ch[2]) {
    uint64_t n;
    ck_assert_int_eq(rgpu_rgt_stream_count(t, &n), RGPU_OK);
    ck_assert_uint_eq(n, 3);
    const int which[3] = { 0, 1, 0 };
    for (uint64_t seq = 0; seq < 3; seq++) {
        test_chunk *c = &ch[which[seq]];
        rgpu_hash h; uint64_t first; uint32_t count; uint8_t *frame; size_t flen;
        ck_assert_int_eq(rgpu_rgt_get_stream(t, seq, &h, &first, &count, &frame, &flen), RGPU_OK);
        ck_assert(rgpu_hash_eq(&h, &c->h));
        ck_assert_uint_eq(first, seq * RGPU_OP_COUNT);
        ck_assert_uint_eq(count, c->count);
        ck_assert_uint_eq(flen, c->frame.len);
        ck_assert_mem_eq(frame, c->frame.p, flen);
        uint8_t *raw; size_t rn;
        ck_assert_int_eq(rgpu_frame_decompress(frame, flen, RGPU_MAX_CHUNK_RAW, &raw, &rn), RGPU_OK);
        rgpu_hash rh = rgpu_hash_bytes(raw, rn);
        ck_assert(rgpu_hash_eq(&rh, &h));
        /* the records decode to exactly count ops */
        size_t pos = 0; uint32_t k = 0;
        while (pos < rn) {
            rgpu_record r; size_t used;
            ck_assert_int_eq(rgpu_record_decode(raw + pos, rn - pos, &r, &used), RGPU_OK);
            ck_assert_uint_eq(r.op, k);
            pos += used; k++;
        }
        ck_assert_uint_eq(k, count);
        free(raw);
        free(frame);
    }
}

START_TEST(test_rgt_roundtrip)
{
    char path[512];
    tpath(path, sizeof path, "t.rgt");
    written w;
    write_trace(path, &w);

    ck_assert_int_eq(sql_int(path, "select count(*) from chunks"), 2);
    ck_assert_int_eq(sql_int(path, "select count(*) from stream"), 3);
    ck_assert_int_eq(sql_int(path, "select count(*) from blobs"), 2);
    ck_assert_int_eq(sql_int(path, "select count(*) from results"), 2);
    ck_assert_int_eq(sql_int(path, "select status from results where op_index = 2"), RGPU_ERR_EXEC);
    ck_assert_int_eq(sql_int(path, "select length(data) from results where op_index = 4"), 3);
    ck_assert_int_eq(sql_int(path, "select min(seq) from stream"), 0);
    ck_assert_int_eq(sql_int(path, "select raw_len from chunks limit 1") > 0, 1);
    ck_assert_int_eq(sql_int(path, "select count(*) from meta where key in "
                                   "('magic','format_version','op_table_hash','creator','torch_version')"), 5);
    char q[256];
    snprintf(q, sizeof q, "select count(*) from meta where key='format_version' and value='%u'", RGPU_FORMAT_VERSION);
    ck_assert_int_eq(sql_int(path, q), 1);
    ck_assert_int_eq(sql_int(path, "select count(*) from meta where key='magic' and value='rgpu-trace'"), 1);
    FILE *hf = fopen(path, "rb");
    uint8_t dbh[20];
    ck_assert_uint_eq(fread(dbh, 1, sizeof dbh, hf), sizeof dbh);
    fclose(hf);
    ck_assert_uint_eq(dbh[18], 2);   /* file format write/read version 2: WAL */
    ck_assert_uint_eq(dbh[19], 2);

    rgpu_rgt *t;
    ck_assert_int_eq(rgpu_rgt_open(path, &t), RGPU_OK);
    check_trace_stream(t, w.ch);
    rgpu_hash h; uint64_t first; uint32_t count; uint8_t *frame; size_t flen;
    ck_assert_int_eq(rgpu_rgt_get_stream(t, 3, &h, &first, &count, &frame, &flen), RGPU_ERR_BAD_TRACE);
    ck_assert_int_eq(rgpu_rgt_get_blob(t, &w.bh, &frame, &flen), RGPU_OK);
    ck_assert_uint_eq(flen, w.bf.len);
    ck_assert_mem_eq(frame, w.bf.p, flen);
    free(frame);
    ck_assert_int_eq(rgpu_rgt_get_blob(t, &w.bigh, &frame, &flen), RGPU_OK);
    uint8_t *raw; size_t rn;
    ck_assert_int_eq(rgpu_frame_decompress(frame, flen, RGPU_MAX_BLOB_RAW, &raw, &rn), RGPU_OK);
    ck_assert_uint_eq(rn, sizeof big_blob);
    ck_assert_mem_eq(raw, big_blob, rn);
    free(raw); free(frame);
    rgpu_hash nope = rgpu_hash_bytes("nope", 4);
    ck_assert_int_eq(rgpu_rgt_get_blob(t, &nope, &frame, &flen), RGPU_ERR_MISSING_BLOB);
    ck_assert_ptr_null(frame);
    /* opened read-only */
    ck_assert_int_eq(rgpu_rgt_set_meta(t, "x", "y"), RGPU_ERR_DB);
    ck_assert_int_eq(rgpu_rgt_put_blob(t, &nope, 1, "x", 1), RGPU_ERR_DB);
    ck_assert_str_ne(rgpu_rgt_errmsg(t), "no trace");
    rgpu_rgt_close(t);
    rgpu_rgt_close(NULL);

    /* create truncates an existing file */
    ck_assert_int_eq(rgpu_rgt_create(path, NULL, &t), RGPU_OK);
    rgpu_rgt_close(t);
    ck_assert_int_eq(rgpu_rgt_open(path, &t), RGPU_OK);
    uint64_t n;
    ck_assert_int_eq(rgpu_rgt_stream_count(t, &n), RGPU_OK);
    ck_assert_uint_eq(n, 0);
    rgpu_rgt_close(t);

    written_free(&w);
}
END_TEST

START_TEST(test_rgt_bad_meta)
{
    char path[512];
    tpath(path, sizeof path, "m.rgt");
    written w;
    rgpu_rgt *t;
    struct { const char *sql; rgpu_status want; } cases[] = {
        { "update meta set value='2' where key='format_version'", RGPU_ERR_BAD_VERSION },
        { "update meta set value='0' where key='format_version'", RGPU_ERR_BAD_VERSION },
        { "delete from meta where key='format_version'", RGPU_ERR_BAD_VERSION },
        { "update meta set value='00000000000000000000000000000000' where key='op_table_hash'", RGPU_ERR_OP_TABLE },
        { "delete from meta where key='op_table_hash'", RGPU_ERR_OP_TABLE },
        { "update meta set value='rgpu-trace2' where key='magic'", RGPU_ERR_BAD_MAGIC },
        { "drop table meta", RGPU_ERR_BAD_MAGIC },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_trace(path, &w);
        sql_exec(path, cases[i].sql);
        t = (rgpu_rgt *)&t;
        ck_assert_msg(rgpu_rgt_open(path, &t) == cases[i].want, "%s", cases[i].sql);
        ck_assert_ptr_null(t);
        written_free(&w);
    }
}
END_TEST

START_TEST(test_rgt_not_a_trace)
{
    char path[512];
    rgpu_rgt *t;
    tpath(path, sizeof path, "missing.rgt");
    ck_assert_int_eq(rgpu_rgt_open(path, &t), RGPU_ERR_DB);
    ck_assert_ptr_null(t);

    tpath(path, sizeof path, "text.rgt");
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 1000; i++) fputs("this is not a database. ", f);
    fclose(f);
    ck_assert_int_eq(rgpu_rgt_open(path, &t), RGPU_ERR_BAD_MAGIC);
    ck_assert_ptr_null(t);

    tpath(path, sizeof path, "empty.rgt");
    f = fopen(path, "wb");
    fclose(f);
    ck_assert_int_eq(rgpu_rgt_open(path, &t), RGPU_ERR_BAD_MAGIC);

    /* an SQLite database that isn't a trace */
    tpath(path, sizeof path, "other.db");
    sql_exec(path, "create table x(a); insert into x values(1)");
    ck_assert_int_eq(rgpu_rgt_open(path, &t), RGPU_ERR_BAD_MAGIC);
}
END_TEST

static int read_everything(const char *path) {   /* errors seen opening/reading a trace */
    rgpu_rgt *t;
    int errors = 0;
    if (rgpu_rgt_open(path, &t) != RGPU_OK) return 1;
    uint64_t n = 0;
    if (rgpu_rgt_stream_count(t, &n)) errors++;
    for (uint64_t seq = 0; seq < n && seq < 100; seq++) {
        rgpu_hash h; uint64_t first; uint32_t count; uint8_t *frame; size_t flen;
        if (rgpu_rgt_get_stream(t, seq, &h, &first, &count, &frame, &flen)) { errors++; continue; }
        uint8_t *raw; size_t rn;
        if (rgpu_frame_decompress(frame, flen, RGPU_MAX_CHUNK_RAW, &raw, &rn)) errors++;
        else free(raw);
        free(frame);
    }
    if (n != 3) errors++;
    rgpu_rgt_close(t);
    return errors;
}

START_TEST(test_rgt_truncated)
{
    char path[512], cut[512];
    tpath(path, sizeof path, "full.rgt");
    tpath(cut, sizeof cut, "cut.rgt");
    written w;
    write_trace(path, &w);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    size_t full = (size_t)st.st_size;
    ck_assert_uint_gt(full, 16384);
    uint8_t *bytes = malloc(full);
    FILE *f = fopen(path, "rb");
    ck_assert_uint_eq(fread(bytes, 1, full, f), full);
    fclose(f);
    ck_assert_mem_eq(bytes, "SQLite format 3", 16);

    /* Every cut that loses at least a page must show up as an error. Losing
     * the tail of the last page may lose only unused bytes: that one must
     * merely not crash (and a checksum guards whatever it does return). */
    size_t cuts[] = { 1, 50, 100, 1000, 4096, 4097, 8192, 12288, full / 2, full - 4096, full - 1 };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        f = fopen(cut, "wb");
        ck_assert_uint_eq(fwrite(bytes, 1, cuts[i], f), cuts[i]);
        fclose(f);
        /* the big blob sits last: a cut before it shows up there at least */
        int errors = read_everything(cut);
        rgpu_rgt *t;
        if (rgpu_rgt_open(cut, &t) == RGPU_OK) {
            uint8_t *frame; size_t flen;
            rgpu_status s = rgpu_rgt_get_blob(t, &w.bigh, &frame, &flen);
            if (s == RGPU_OK) {
                uint8_t *raw; size_t rn;
                s = rgpu_frame_decompress(frame, flen, RGPU_MAX_BLOB_RAW, &raw, &rn);
                if (s == RGPU_OK) free(raw);
                free(frame);
            }
            if (s) errors++;
            rgpu_rgt_close(t);
        }
        if (cuts[i] <= full - 4096)
            ck_assert_msg(errors > 0, "cut at %zu of %zu read back without an error", cuts[i], full);
    }
    ck_assert_int_eq(read_everything(path), 0);
    free(bytes);
    written_free(&w);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Tables: statuses, op table, dtypes, hashing */

START_TEST(test_status_strings)
{
#define S(x) { x, #x }
    static const struct { int code; const char *name; } all[] = {
        S(RGPU_OK), S(RGPU_ERR_NOMEM), S(RGPU_ERR_BAD_MAGIC), S(RGPU_ERR_BAD_CHECKSUM),
        S(RGPU_ERR_TRUNCATED), S(RGPU_ERR_BAD_OP), S(RGPU_ERR_BAD_DTYPE), S(RGPU_ERR_TOO_MANY_DIMS),
        S(RGPU_ERR_OUT_OF_BOUNDS), S(RGPU_ERR_TOO_LARGE), S(RGPU_ERR_BAD_VERSION), S(RGPU_ERR_OP_TABLE),
        S(RGPU_ERR_RESERVED), S(RGPU_ERR_BAD_ARG), S(RGPU_ERR_UNKNOWN_TENSOR), S(RGPU_ERR_UNKNOWN_STORAGE),
        S(RGPU_ERR_DUPLICATE_ID), S(RGPU_ERR_UNSUPPORTED), S(RGPU_ERR_IO), S(RGPU_ERR_CLOSED),
        S(RGPU_ERR_COMPRESS), S(RGPU_ERR_DB), S(RGPU_ERR_BAD_MESSAGE), S(RGPU_ERR_POISONED),
        S(RGPU_ERR_EXEC), S(RGPU_ERR_MISSING_BLOB), S(RGPU_ERR_ARITY), S(RGPU_ERR_SHAPE),
        S(RGPU_ERR_OVERFLOW), S(RGPU_ERR_SEQUENCE), S(RGPU_ERR_BAD_TRACE), S(RGPU_ERR_TIMEOUT),
        S(RGPU_ERR_AUTH), S(RGPU_ERR_SESSION_LOST), S(RGPU_ERR_LIMIT), S(RGPU_ERR_PATH),
        S(RGPU_ERR_CHANGED),
    };
#undef S
    /* stable numbers: the list above is in order 0..COUNT-1 */
    ck_assert_int_eq((int)(sizeof all / sizeof all[0]), RGPU_STATUS_COUNT_);
    for (int i = 0; i < RGPU_STATUS_COUNT_; i++) {
        ck_assert_int_eq(all[i].code, i);
        ck_assert_str_eq(rgpu_status_name(i), all[i].name);
        const char *s = rgpu_status_str(i);
        ck_assert_ptr_nonnull(s);
        ck_assert_int_gt((int)strlen(s), 1);
        ck_assert_str_ne(s, "unknown status");
        for (int j = 0; j < i; j++) {
            ck_assert_str_ne(rgpu_status_str(j), s);
            ck_assert_str_ne(rgpu_status_name(j), rgpu_status_name(i));
        }
    }
    ck_assert_str_eq(rgpu_status_str(RGPU_STATUS_COUNT_), "unknown status");
    ck_assert_str_eq(rgpu_status_str(-1), "unknown status");
    ck_assert_str_eq(rgpu_status_name(RGPU_STATUS_COUNT_), "RGPU_ERR_?");
    ck_assert_str_eq(rgpu_status_name(-1), "RGPU_ERR_?");
}
END_TEST

START_TEST(test_op_table)
{
    uint8_t h1[16], h2[16], zero[16] = { 0 };
    rgpu_op_table_hash(h1);
    rgpu_op_table_hash(h2);
    ck_assert_mem_eq(h1, h2, 16);
    ck_assert(memcmp(h1, zero, 16) != 0);
    for (int op = 0; op < RGPU_OP_COUNT; op++) {
        const char *n = rgpu_op_name(op);
        ck_assert_ptr_nonnull(n);
        ck_assert_str_ne(n, "?");
        ck_assert_str_eq(n, rgpu_op_table[op].name);
        ck_assert_uint_le(rgpu_op_table[op].n_in, RGPU_MAX_IN);
        ck_assert_uint_le(rgpu_op_table[op].n_out, RGPU_MAX_OUT);
        ck_assert_uint_eq(rgpu_op_table[op].flags & ~65535u, 0);   /* the sixteen RGPU_OPF_* bits */
        ck_assert_int_lt(rgpu_op_table[op].family, RGPU_OPFAM_COUNT_);
        ck_assert_str_ne(rgpu_op_family_name(rgpu_op_table[op].family), "?");
        ck_assert_ptr_nonnull(rgpu_op_table[op].sig);
        ck_assert(((rgpu_op_table[op].flags & RGPU_OPF_SESSION) != 0) ==
                  (rgpu_op_table[op].family == RGPU_OPFAM_SESSION));
        for (int j = 0; j < op; j++) ck_assert_str_ne(rgpu_op_name(j), n);
    }
    ck_assert_str_eq(rgpu_op_name(RGPU_OP_COUNT), "?");
    ck_assert_str_eq(rgpu_op_name(-1), "?");
    /* numbers are stable: spot-check against FORMAT.md */
    ck_assert_int_eq(RGPU_OP_NOP, 0);
    ck_assert_int_eq(RGPU_OP_UPLOAD, 3);
    ck_assert_int_eq(RGPU_OP_ALIAS, 5);
    ck_assert_int_eq(RGPU_OP_MEAN, 21);
    ck_assert_uint_eq(rgpu_op_table[RGPU_OP_SYNC].flags, RGPU_OPF_WAIT | RGPU_OPF_SESSION);
    ck_assert_uint_eq(rgpu_op_table[RGPU_OP_DOWNLOAD].flags, RGPU_OPF_WAIT | RGPU_OPF_SESSION);
    ck_assert_uint_eq(rgpu_op_table[RGPU_OP_LOCAL_SCALAR_DENSE].flags, RGPU_OPF_WAIT | RGPU_OPF_SESSION);
    ck_assert(rgpu_op_is_random(RGPU_OP_UNIFORM) && !rgpu_op_is_random(RGPU_OP_ADD_TENSOR) && !rgpu_op_is_random(-1));
    ck_assert_str_eq(rgpu_op_table[RGPU_OP_SUM].sig, "ints dims, b keepdim");
    ck_assert_str_eq(rgpu_op_family_name(rgpu_op_table[RGPU_OP_MM].family), "dense");
    ck_assert_str_eq(rgpu_op_name(RGPU_OP_ADD_TENSOR), "add.Tensor");
}
END_TEST

START_TEST(test_dtypes_and_hash)
{
    static const size_t sz[RGPU_DTYPE_COUNT] = { 4, 8, 2, 2, 8, 4, 2, 1, 1, 1, 8, 16, 4 };
    for (int d = 0; d < RGPU_DTYPE_COUNT; d++) {
        ck_assert_uint_eq(rgpu_dtype_size(d), sz[d]);
        ck_assert_str_ne(rgpu_dtype_name(d), "?");
        ck_assert(rgpu_dtype_is_float(d) == (d <= RGPU_BF16));
    }
    ck_assert_uint_eq(rgpu_dtype_size(RGPU_DTYPE_COUNT), 0);
    ck_assert_uint_eq(rgpu_dtype_size(-1), 0);
    ck_assert_str_eq(rgpu_dtype_name(RGPU_DTYPE_COUNT), "?");
    ck_assert_str_eq(rgpu_dtype_name(RGPU_BF16), "bfloat16");

    /* XXH3-128 in canonical form: high 64 bits big-endian, then low 64 */
    const char *msg = "rgpu";
    rgpu_hash h = rgpu_hash_bytes(msg, 4);
    XXH128_hash_t x = XXH3_128bits(msg, 4);
    for (int i = 0; i < 8; i++) {
        ck_assert_uint_eq(h.b[i], (uint8_t)(x.high64 >> (56 - 8 * i)));
        ck_assert_uint_eq(h.b[8 + i], (uint8_t)(x.low64 >> (56 - 8 * i)));
    }
    char hex[33];
    rgpu_hash_hex(&h, hex);
    ck_assert_uint_eq(strlen(hex), 32);
    char want[33];
    snprintf(want, sizeof want, "%016llx%016llx", (unsigned long long)x.high64, (unsigned long long)x.low64);
    ck_assert_str_eq(hex, want);
    rgpu_hash e = rgpu_hash_bytes(NULL, 0);
    ck_assert(!rgpu_hash_eq(&e, &h));

    /* the op-table hash is XXH3-128 over: u32 version, then per op
     * name + NUL, u8 n_in, u8 n_out, u32 flags & 31 (FORMAT.md; newer flags
     * are not hashed, so traces recorded before them still open) */
    rgpu_buf b = { 0 };
    uint8_t v[4];
    rgpu_st32(v, RGPU_FORMAT_VERSION);
    rgpu_buf_append(&b, v, 4);
    for (int op = 0; op < RGPU_OP_COUNT; op++) {
        const rgpu_op_info *o = &rgpu_op_table[op];
        rgpu_buf_append(&b, o->name, strlen(o->name) + 1);
        uint8_t a[6] = { o->n_in, o->n_out };
        rgpu_st32(a + 2, o->flags & 31u);
        rgpu_buf_append(&b, a, 6);
    }
    rgpu_hash th = rgpu_hash_bytes(b.p, b.len);
    uint8_t t16[16];
    rgpu_op_table_hash(t16);
    ck_assert_mem_eq(th.b, t16, 16);
    rgpu_buf_free(&b);
}
END_TEST

START_TEST(test_le_helpers)
{
    uint8_t b[8];
    rgpu_st16(b, 0xBEEF); ck_assert_uint_eq(b[0], 0xEF); ck_assert_uint_eq(rgpu_ld16(b), 0xBEEF);
    rgpu_st32(b, 0xDEADBEEF); ck_assert_uint_eq(b[0], 0xEF); ck_assert_uint_eq(b[3], 0xDE);
    ck_assert_uint_eq(rgpu_ld32(b), 0xDEADBEEF);
    rgpu_st64(b, 0x0123456789ABCDEFull); ck_assert_uint_eq(b[7], 0x01);
    ck_assert_uint_eq(rgpu_ld64(b), 0x0123456789ABCDEFull);
    rgpu_buf buf = { 0 };
    for (int i = 0; i < 10000; i++) ck_assert_int_eq(rgpu_buf_append(&buf, &i, sizeof i), RGPU_OK);
    ck_assert_uint_eq(buf.len, 10000 * sizeof(int));
    ck_assert_int_eq(rgpu_buf_append(&buf, NULL, 0), RGPU_OK);
    rgpu_buf_free(&buf);
    rgpu_buf_free(&buf);
    ck_assert_ptr_null(buf.p);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Suite */

static Suite *format_suite(void) {
    Suite *s = suite_create("trace-format");
    TCase *tc;

    tc = add_tcase(s, "records", 0, NULL, NULL);
    tcase_add_loop_test(tc, test_roundtrip_op, 0, RGPU_OP_COUNT);
    ADD_TESTS(tc, test_roundtrip_sequence, test_record_layout, test_arg_accessors);

    tc = add_tcase(s, "corrupt", 0, NULL, NULL);
    ADD_TESTS(tc, test_bad_op, test_too_many_dims, test_bad_dtype, test_reserved, test_arity, test_bad_args,
                  test_encode_rejects_undecodable, test_absurd_ints, test_negative_view_fields, test_bounds,
                  test_bounds_empty_view, test_complex_dtypes);

    tc = add_tcase(s, "frames", 0, NULL, NULL);
    ADD_TESTS(tc, test_frame_roundtrip, test_frame_corrupt);

    tc = add_tcase(s, "fuzz", 120, NULL, NULL);
    ADD_TESTS(tc, test_fuzz_records, test_fuzz_frames);

    tc = add_tcase(s, "wire", 30, NULL, NULL);
    ADD_TESTS(tc, test_wire_header, test_wire_roundtrip, test_wire_peer_closes, test_wire_pipe);

    tc = add_tcase(s, "rgt", 60, rgt_setup, rgt_teardown);
    ADD_TESTS(tc, test_rgt_roundtrip, test_rgt_bad_meta, test_rgt_not_a_trace, test_rgt_truncated);

    tc = add_tcase(s, "tables", 0, NULL, NULL);
    ADD_TESTS(tc, test_status_strings, test_op_table, test_dtypes_and_hash, test_le_helpers);
    return s;
}

int main(void) {
    return run_suite(format_suite());
}
