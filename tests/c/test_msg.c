/* test_msg.c — Check tests for the wire-message codecs (trace-format/msg.c,
 * rgpu_msg.h): every message round-trips, _send puts exactly _encode's bytes
 * on the wire, truncated, oversized and reserved-field-damaged payloads are
 * refused with their status, and FORMAT.md §7.1's layout table agrees with
 * the codecs: each documented field is read back at its documented offset
 * from an encoded message, fixed parts are contiguous and as long as
 * RGPU_MSG_X_HEAD, and the "Fixed sizes" line names the same sizes.
 *
 * FORMAT.md is read at test time: trace-format/FORMAT.md from the current
 * directory (make test-c runs from the repository root), else from this
 * file's place in the tree, else $RGPU_FORMAT_MD. */
#include "rgpu_format.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check_util.h"

/* ---------------------------------------------------------------------------
 * One sample of each message: its struct, encoded, and what each of its
 * fields must read as (the field's name as FORMAT.md starts it, its bytes). */
typedef struct field { const char *key; uint8_t b[64]; size_t n; const void *var; } field;
typedef struct sample {
    int type;
    const char *name;
    size_t head;                 /* RGPU_MSG_X_HEAD */
    uint8_t enc[2048];
    size_t len;
    field f[12];
    int nf;
    uint64_t msg_len;            /* for "@28+msg_len" */
} sample;

static void le(field *f, uint64_t v, size_t n) { f->n = n; for (size_t i = 0; i < n; i++) f->b[i] = (uint8_t)(v >> (8 * i)); }
static void put_int(sample *s, const char *key, uint64_t v, size_t n) { field *f = &s->f[s->nf++]; f->key = key; le(f, v, n); }
static void put_bytes(sample *s, const char *key, const void *p, size_t n) {
    field *f = &s->f[s->nf++];
    f->key = key; f->n = n;
    if (n <= sizeof f->b) memcpy(f->b, p, n); else f->var = p;
}

static const char TOKEN[] = "0123456789abcdef0123456789abcdef";
static const uint8_t FRAME[40] = { 'R', 'G', 'F', '1', 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3 };
static const uint8_t BITS[3] = { 0xa5, 0x5a, 0x03 };
static rgpu_hash H = { { 0x10, 0x21, 0x32, 0x43, 0x54, 0x65, 0x76, 0x87, 0x98, 0xa9, 0xba, 0xcb, 0xdc, 0xed, 0xfe, 0x0f } };

static rgpu_msg_hello hello_sample(void) {
    rgpu_msg_hello m = { .version = 0x01020304, .session = 0x1112131415161718ull, .last_ack = 0x2122232425262728ull,
                         .token_len = sizeof TOKEN - 1, .token = (const uint8_t *)TOKEN, .has_sw_version = true,
                         .sw_version_len = 5, .sw_version = "9.8.7" };
    for (int i = 0; i < 16; i++) m.op_table[i] = (uint8_t)(0xc0 + i);
    for (int i = 0; i < RGPU_SESSION_SECRET; i++) m.secret[i] = (uint8_t)(0x60 + 3 * i);
    return m;
}

static rgpu_msg_welcome welcome_sample(void) {
    rgpu_msg_welcome m = { .version = 0x01020304, .session = 0x3132333435363738ull, .applied = 0x4142434445464748ull,
                           .nbits = 18, .bitmap = BITS, .has_sw_version = true, .sw_version_len = 3, .sw_version = "1.2" };
    for (int i = 0; i < 16; i++) m.op_table[i] = (uint8_t)(0xd0 + i);
    for (int i = 0; i < RGPU_SESSION_SECRET; i++) m.secret[i] = (uint8_t)(0x90 + 5 * i);
    snprintf(m.backend, sizeof m.backend, "cpu (test)");
    return m;
}

static const rgpu_msg_chunk CHUNK = { .first_op = 0x5152535455565758ull, .count = 0x61626364,
                                      .hash = { { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 } },
                                      .frame = FRAME, .frame_len = sizeof FRAME };
static const rgpu_msg_blob_part PART = { .hash = { { 0xee, 1, 0xee, 2 } }, .total = 0x0000000300000007ull,
                                         .offset = 0x0000000100000003ull, .frame = FRAME, .frame_len = sizeof FRAME };
static const char RMSG[] = "op 7 failed";
static const uint8_t RDATA[5] = { 9, 8, 7, 6, 5 };
static const char EMSG[] = "something went wrong";
static const rgpu_msg_result RESULT_M = { .op = 0x7172737475767778ull, .status = 0x81828384, .err_op = 0x9192939495969798ull,
                                        .msg_len = sizeof RMSG - 1, .msg = RMSG, .data = RDATA, .data_len = sizeof RDATA };
static const rgpu_msg_error ERROR_M = { .code = 0xb1b2b3b4, .msg_len = sizeof EMSG - 1, .msg = EMSG };
static const char NMSG[] = "journal write failed: disk I/O error";
static const rgpu_msg_notice NOTICE_M = { .code = 0xc1c2c3c4, .msg_len = sizeof NMSG - 1, .msg = NMSG };
static const rgpu_msg_wait WAIT = { 0x0102030405060708ull };
static const rgpu_msg_ack ACK = { 0xa1a2a3a4a5a6a7a8ull };

static sample make(int type) {
    sample s = { .type = type, .name = rgpu_msg_name(type) };
    switch (type) {
    case RGPU_MSG_HELLO: {
        rgpu_msg_hello m = hello_sample();
        s.head = RGPU_MSG_HELLO_HEAD;
        s.len = rgpu_msg_hello_encode(&m, s.enc, sizeof s.enc);
        put_int(&s, "version", m.version, 4); put_bytes(&s, "op-table hash", m.op_table, 16);
        put_int(&s, "session", m.session, 8); put_int(&s, "last_ack", m.last_ack, 8);
        put_bytes(&s, "secret", m.secret, RGPU_SESSION_SECRET); put_int(&s, "token_len", m.token_len, 4); put_bytes(&s, "token", TOKEN, m.token_len);
        break;
    }
    case RGPU_MSG_WELCOME: {
        rgpu_msg_welcome m = welcome_sample();
        s.head = RGPU_MSG_WELCOME_HEAD;
        s.len = rgpu_msg_welcome_encode(&m, s.enc, sizeof s.enc);
        char be[32] = { 0 };
        memcpy(be, m.backend, strlen(m.backend));
        put_int(&s, "version", m.version, 4); put_bytes(&s, "op-table hash", m.op_table, 16);
        put_int(&s, "session", m.session, 8); put_int(&s, "applied", m.applied, 8);
        put_bytes(&s, "secret", m.secret, RGPU_SESSION_SECRET); put_bytes(&s, "backend name", be, 32); put_int(&s, "nbits", m.nbits, 4); put_bytes(&s, "bitmap", BITS, 3);
        break;
    }
    case RGPU_MSG_CHUNK:
        s.head = RGPU_MSG_CHUNK_HEAD;
        s.len = rgpu_msg_chunk_encode(&CHUNK, s.enc, sizeof s.enc);
        put_int(&s, "first_op", CHUNK.first_op, 8); put_int(&s, "count", CHUNK.count, 4);
        put_int(&s, "reserved", 0, 4); put_bytes(&s, "hash", CHUNK.hash.b, 16);
        put_bytes(&s, "frame", FRAME, sizeof FRAME);
        break;
    case RGPU_MSG_BLOB: {
        rgpu_msg_blob m = { .hash = H, .frame = FRAME, .frame_len = sizeof FRAME };
        s.head = RGPU_MSG_BLOB_HEAD;
        s.len = rgpu_msg_blob_encode(&m, s.enc, sizeof s.enc);
        put_bytes(&s, "hash", H.b, 16); put_bytes(&s, "frame", FRAME, sizeof FRAME);
        break;
    }
    case RGPU_MSG_NEED:
        s.head = RGPU_MSG_NEED_HEAD;
        s.len = rgpu_msg_need_encode(&(rgpu_msg_need){ H }, s.enc, sizeof s.enc);
        put_bytes(&s, "hash", H.b, 16);
        break;
    case RGPU_MSG_WAIT: case RGPU_MSG_ACK:   /* one u64 */
        s.head = type == RGPU_MSG_WAIT ? RGPU_MSG_WAIT_HEAD : RGPU_MSG_ACK_HEAD;
        s.len = type == RGPU_MSG_WAIT ? rgpu_msg_wait_encode(&WAIT, s.enc, sizeof s.enc)
                                      : rgpu_msg_ack_encode(&ACK, s.enc, sizeof s.enc);
        put_int(&s, type == RGPU_MSG_WAIT ? "op_index" : "applied", type == RGPU_MSG_WAIT ? WAIT.op_index : ACK.applied, 8);
        break;
    case RGPU_MSG_RESULT:
        s.head = RGPU_MSG_RESULT_HEAD;
        s.len = rgpu_msg_result_encode(&RESULT_M, s.enc, sizeof s.enc);
        s.msg_len = RESULT_M.msg_len;
        put_int(&s, "op", RESULT_M.op, 8); put_int(&s, "status", RESULT_M.status, 4); put_int(&s, "reserved", 0, 4);
        put_int(&s, "err_op", RESULT_M.err_op, 8); put_int(&s, "msg_len", RESULT_M.msg_len, 4);
        put_bytes(&s, "msg", RMSG, RESULT_M.msg_len); put_bytes(&s, "data", RDATA, sizeof RDATA);
        break;
    case RGPU_MSG_ERROR:
        s.head = RGPU_MSG_ERROR_HEAD;
        s.len = rgpu_msg_error_encode(&ERROR_M, s.enc, sizeof s.enc);
        put_int(&s, "code", ERROR_M.code, 4); put_int(&s, "reserved", 0, 4);
        put_bytes(&s, "UTF-8 message", EMSG, ERROR_M.msg_len);
        break;
    case RGPU_MSG_NOTICE:
        s.head = RGPU_MSG_NOTICE_HEAD;
        s.len = rgpu_msg_notice_encode(&NOTICE_M, s.enc, sizeof s.enc);
        put_int(&s, "code", NOTICE_M.code, 4); put_int(&s, "reserved", 0, 4);
        put_bytes(&s, "UTF-8 message", NMSG, NOTICE_M.msg_len);
        break;
    case RGPU_MSG_BYE:
        s.head = RGPU_MSG_BYE_HEAD;
        s.len = rgpu_msg_bye_encode(&(rgpu_msg_bye){ 0 }, s.enc, sizeof s.enc);
        break;
    case RGPU_MSG_BLOB_PART:
        s.head = RGPU_MSG_BLOB_PART_HEAD;
        s.len = rgpu_msg_blob_part_encode(&PART, s.enc, sizeof s.enc);
        put_bytes(&s, "hash", PART.hash.b, 16); put_int(&s, "total", PART.total, 8);
        put_int(&s, "offset", PART.offset, 8); put_bytes(&s, "frame", FRAME, sizeof FRAME);
        break;
    }
    return s;
}

/* Decode p[0..n) as a message of type; the status. */
static rgpu_status decode(int type, const uint8_t *p, size_t n) {
    union { rgpu_msg_hello h; rgpu_msg_welcome w; rgpu_msg_chunk c; rgpu_msg_blob b; rgpu_msg_blob_part bp;
            rgpu_msg_need nd; rgpu_msg_wait wt; rgpu_msg_ack a; rgpu_msg_result r; rgpu_msg_error e; rgpu_msg_bye y;
            rgpu_msg_notice no; } u;
    switch (type) {
    case RGPU_MSG_HELLO: return rgpu_msg_hello_decode(p, n, &u.h);
    case RGPU_MSG_WELCOME: return rgpu_msg_welcome_decode(p, n, &u.w);
    case RGPU_MSG_CHUNK: return rgpu_msg_chunk_decode(p, n, &u.c);
    case RGPU_MSG_BLOB: return rgpu_msg_blob_decode(p, n, &u.b);
    case RGPU_MSG_BLOB_PART: return rgpu_msg_blob_part_decode(p, n, &u.bp);
    case RGPU_MSG_NEED: return rgpu_msg_need_decode(p, n, &u.nd);
    case RGPU_MSG_WAIT: return rgpu_msg_wait_decode(p, n, &u.wt);
    case RGPU_MSG_ACK: return rgpu_msg_ack_decode(p, n, &u.a);
    case RGPU_MSG_RESULT: return rgpu_msg_result_decode(p, n, &u.r);
    case RGPU_MSG_ERROR: return rgpu_msg_error_decode(p, n, &u.e);
    case RGPU_MSG_BYE: return rgpu_msg_bye_decode(p, n, &u.y);
    case RGPU_MSG_NOTICE: return rgpu_msg_notice_decode(p, n, &u.no);
    }
    return RGPU_ERR_BAD_MESSAGE;
}

/* ---------------------------------------------------------------------------
 * Round trips */
START_TEST(test_round_trips) {
    rgpu_msg_hello h0 = hello_sample(), h;
    sample s = make(RGPU_MSG_HELLO);
    ck_assert_uint_eq(s.len, 56 + 32 + 1 + 5);
    ck_assert_uint_eq(s.len, rgpu_msg_hello_size(&h0));
    ck_assert_int_eq(rgpu_msg_hello_decode(s.enc, s.len, &h), RGPU_OK);
    ck_assert(h.version == h0.version && h.session == h0.session && h.last_ack == h0.last_ack);
    ck_assert(!memcmp(h.op_table, h0.op_table, 16) && h.token_len == 32 && !memcmp(h.token, TOKEN, 32));
    ck_assert(!memcmp(h.secret, h0.secret, RGPU_SESSION_SECRET));
    ck_assert(h.has_sw_version && h.sw_version_len == 5 && !memcmp(h.sw_version, "9.8.7", 5));
    h0.has_sw_version = false;   /* the trailer is optional */
    size_t n = rgpu_msg_hello_encode(&h0, s.enc, sizeof s.enc);
    ck_assert_uint_eq(n, 88);
    ck_assert_int_eq(rgpu_msg_hello_decode(s.enc, n, &h), RGPU_OK);
    ck_assert(!h.has_sw_version && h.sw_version == NULL);

    rgpu_msg_welcome w0 = welcome_sample(), w;
    s = make(RGPU_MSG_WELCOME);
    ck_assert_uint_eq(s.len, 88 + 3 + 1 + 3);
    ck_assert_int_eq(rgpu_msg_welcome_decode(s.enc, s.len, &w), RGPU_OK);
    ck_assert(w.session == w0.session && w.applied == w0.applied && w.nbits == 18 && !memcmp(w.bitmap, BITS, 3));
    ck_assert(!memcmp(w.secret, w0.secret, RGPU_SESSION_SECRET));
    ck_assert_str_eq(w.backend, "cpu (test)");
    ck_assert(w.has_sw_version && w.sw_version_len == 3 && !memcmp(w.sw_version, "1.2", 3));
    memset(w0.backend, 'x', 32);   /* 32 characters: 31 go out, then NUL */
    w0.backend[32] = 0;
    n = rgpu_msg_welcome_encode(&w0, s.enc, sizeof s.enc);
    ck_assert_int_eq(rgpu_msg_welcome_decode(s.enc, n, &w), RGPU_OK);
    ck_assert_uint_eq(strlen(w.backend), 31);

    rgpu_msg_chunk c;
    s = make(RGPU_MSG_CHUNK);
    ck_assert_int_eq(rgpu_msg_chunk_decode(s.enc, s.len, &c), RGPU_OK);
    ck_assert(c.first_op == CHUNK.first_op && c.count == CHUNK.count && rgpu_hash_eq(&c.hash, &CHUNK.hash));
    ck_assert(c.frame_len == sizeof FRAME && !memcmp(c.frame, FRAME, sizeof FRAME));

    rgpu_msg_blob b;
    s = make(RGPU_MSG_BLOB);
    ck_assert_int_eq(rgpu_msg_blob_decode(s.enc, s.len, &b), RGPU_OK);
    ck_assert(rgpu_hash_eq(&b.hash, &H) && b.frame_len == sizeof FRAME && !memcmp(b.frame, FRAME, sizeof FRAME));

    rgpu_msg_blob_part bp;
    s = make(RGPU_MSG_BLOB_PART);
    ck_assert_int_eq(rgpu_msg_blob_part_decode(s.enc, s.len, &bp), RGPU_OK);
    ck_assert(bp.total == PART.total && bp.offset == PART.offset && bp.frame_len == sizeof FRAME);

    rgpu_msg_need nd;
    s = make(RGPU_MSG_NEED);
    ck_assert_int_eq(rgpu_msg_need_decode(s.enc, s.len, &nd), RGPU_OK);
    ck_assert(rgpu_hash_eq(&nd.hash, &H));
    rgpu_msg_wait wt;
    s = make(RGPU_MSG_WAIT);
    ck_assert_int_eq(rgpu_msg_wait_decode(s.enc, s.len, &wt), RGPU_OK);
    ck_assert(wt.op_index == WAIT.op_index);
    rgpu_msg_ack a;
    s = make(RGPU_MSG_ACK);
    ck_assert_int_eq(rgpu_msg_ack_decode(s.enc, s.len, &a), RGPU_OK);
    ck_assert(a.applied == ACK.applied);

    rgpu_msg_result r;
    s = make(RGPU_MSG_RESULT);
    ck_assert_int_eq(rgpu_msg_result_decode(s.enc, s.len, &r), RGPU_OK);
    ck_assert(r.op == RESULT_M.op && r.status == RESULT_M.status && r.err_op == RESULT_M.err_op);
    ck_assert(r.msg_len == sizeof RMSG - 1 && !memcmp(r.msg, RMSG, r.msg_len));
    ck_assert(r.data_len == sizeof RDATA && !memcmp(r.data, RDATA, sizeof RDATA));

    rgpu_msg_error e;
    s = make(RGPU_MSG_ERROR);
    ck_assert_int_eq(rgpu_msg_error_decode(s.enc, s.len, &e), RGPU_OK);
    ck_assert(e.code == ERROR_M.code && e.msg_len == sizeof EMSG - 1 && !memcmp(e.msg, EMSG, e.msg_len));

    rgpu_msg_notice no;
    s = make(RGPU_MSG_NOTICE);
    ck_assert_int_eq(rgpu_msg_notice_decode(s.enc, s.len, &no), RGPU_OK);
    ck_assert(no.code == NOTICE_M.code && no.msg_len == sizeof NMSG - 1 && !memcmp(no.msg, NMSG, no.msg_len));
    ck_assert_str_eq(rgpu_msg_name(RGPU_MSG_NOTICE), "NOTICE");

    rgpu_msg_bye y;
    s = make(RGPU_MSG_BYE);
    ck_assert_uint_eq(s.len, 0);
    ck_assert_int_eq(rgpu_msg_bye_decode(s.enc, 0, &y), RGPU_OK);
}
END_TEST

/* _send writes header + exactly _encode's payload. */
typedef rgpu_status (*send_fn)(int fd, const void *m);
#define SEND_(name, T) static rgpu_status send_##name(int fd, const void *m) { return rgpu_msg_##name##_send(fd, (const T *)m); }
SEND_(hello, rgpu_msg_hello) SEND_(welcome, rgpu_msg_welcome) SEND_(chunk, rgpu_msg_chunk)
SEND_(blob, rgpu_msg_blob) SEND_(blob_part, rgpu_msg_blob_part) SEND_(need, rgpu_msg_need) SEND_(wait, rgpu_msg_wait)
SEND_(ack, rgpu_msg_ack) SEND_(result, rgpu_msg_result) SEND_(error, rgpu_msg_error) SEND_(bye, rgpu_msg_bye)
SEND_(notice, rgpu_msg_notice)

static void check_sent(int type, send_fn send, const void *m) {
    sample s = make(type);
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(send(sv[0], m), RGPU_OK);
    rgpu_msg_header h;
    uint8_t *p;
    ck_assert_int_eq(rgpu_wire_recv(sv[1], 1 << 20, &h, &p), RGPU_OK);
    ck_assert_int_eq(h.type, type);
    ck_assert_uint_eq(h.len, s.len);
    ck_assert(!memcmp(p, s.enc, s.len));
    free(p);
    close(sv[0]); close(sv[1]);
}

START_TEST(test_send_is_encode) {
    rgpu_msg_hello h = hello_sample();
    rgpu_msg_welcome w = welcome_sample();
    rgpu_msg_blob b = { .hash = H, .frame = FRAME, .frame_len = sizeof FRAME };
    check_sent(RGPU_MSG_HELLO, send_hello, &h);
    check_sent(RGPU_MSG_WELCOME, send_welcome, &w);
    check_sent(RGPU_MSG_CHUNK, send_chunk, &CHUNK);
    check_sent(RGPU_MSG_BLOB, send_blob, &b);
    check_sent(RGPU_MSG_BLOB_PART, send_blob_part, &PART);
    check_sent(RGPU_MSG_NEED, send_need, &(rgpu_msg_need){ H });
    check_sent(RGPU_MSG_WAIT, send_wait, &WAIT);
    check_sent(RGPU_MSG_ACK, send_ack, &ACK);
    check_sent(RGPU_MSG_RESULT, send_result, &RESULT_M);
    check_sent(RGPU_MSG_ERROR, send_error, &ERROR_M);
    check_sent(RGPU_MSG_BYE, send_bye, &(rgpu_msg_bye){ 0 });
    check_sent(RGPU_MSG_NOTICE, send_notice, &NOTICE_M);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Refusals */
static const int ALL[] = { RGPU_MSG_HELLO, RGPU_MSG_WELCOME, RGPU_MSG_CHUNK, RGPU_MSG_BLOB,
                           RGPU_MSG_NEED, RGPU_MSG_WAIT, RGPU_MSG_RESULT, RGPU_MSG_ACK, RGPU_MSG_ERROR,
                           RGPU_MSG_BYE, RGPU_MSG_BLOB_PART, RGPU_MSG_NOTICE };

START_TEST(test_truncated_and_oversized) {
    for (size_t k = 0; k < sizeof ALL / sizeof ALL[0]; k++) {
        sample s = make(ALL[k]);
        ck_assert_msg(s.len >= s.head, "%s encodes", s.name);
        ck_assert_int_eq(decode(s.type, s.enc, s.len), RGPU_OK);
        /* cut anywhere inside the fixed part: refused */
        for (size_t n = 0; n < s.head; n++) {
            rgpu_status st = decode(s.type, s.enc, n);
            ck_assert_msg(st != RGPU_OK, "%s cut to %zu bytes decodes", s.name, n);
            rgpu_status want = (s.type == RGPU_MSG_CHUNK || s.type == RGPU_MSG_BLOB ||
                                s.type == RGPU_MSG_BLOB_PART) ? RGPU_ERR_TRUNCATED : RGPU_ERR_BAD_MESSAGE;
            ck_assert_msg(st == want, "%s cut to %zu: %s", s.name, n, rgpu_status_name(st));
        }
        /* cut inside the declared variable part (token, bitmap, trailer, msg) or one byte too many where
         * the length is fixed or declared: refused */
        size_t declared = s.type == RGPU_MSG_HELLO || s.type == RGPU_MSG_WELCOME ? s.len
                        : s.type == RGPU_MSG_RESULT ? s.head + s.msg_len
                        : s.type == RGPU_MSG_BLOB_PART ? s.head + RGPU_FRAME_HEADER : s.head;
        size_t optional_at = s.type == RGPU_MSG_HELLO ? s.len - 1 - 5 : s.type == RGPU_MSG_WELCOME ? s.len - 1 - 3 : 0;
        for (size_t n = s.head; n < declared; n++)
            if (n != optional_at)   /* where the optional trailer would start: decodes, without it */
                ck_assert_msg(decode(s.type, s.enc, n) != RGPU_OK, "%s cut to %zu bytes decodes", s.name, n);
        bool fixed = s.type == RGPU_MSG_HELLO || s.type == RGPU_MSG_WELCOME ||
                     s.type == RGPU_MSG_NEED || s.type == RGPU_MSG_WAIT || s.type == RGPU_MSG_ACK || s.type == RGPU_MSG_BYE;
        s.enc[s.len] = 0;
        if (fixed) ck_assert_msg(decode(s.type, s.enc, s.len + 1) == RGPU_ERR_BAD_MESSAGE, "%s + 1 byte decodes", s.name);
    }
    /* encoders: out of room, out of range */
    uint8_t out[2048];
    rgpu_msg_hello h = hello_sample();
    ck_assert_uint_eq(rgpu_msg_hello_encode(&h, out, rgpu_msg_hello_size(&h) - 1), 0);
    h.sw_version_len = RGPU_MAX_PEER_VERSION + 1;
    ck_assert_uint_eq(rgpu_msg_hello_encode(&h, out, sizeof out), 0);
    ck_assert_int_eq(rgpu_msg_hello_send(-1, &h), RGPU_ERR_TOO_LARGE);
    h = hello_sample();
    h.token_len = RGPU_MAX_TOKEN_LEN + 1;
    ck_assert_uint_eq(rgpu_msg_hello_encode(&h, out, sizeof out), 0);
    rgpu_msg_error e = { .code = 1, .msg_len = RGPU_MAX_ERROR_MSG + 1, .msg = (const char *)out };
    ck_assert_uint_eq(rgpu_msg_error_encode(&e, out, sizeof out), 0);
    ck_assert_uint_eq(rgpu_msg_chunk_encode(&CHUNK, out, 32 + sizeof FRAME - 1), 0);
    ck_assert_uint_eq(rgpu_msg_wait_encode(&(rgpu_msg_wait){ 1 }, out, 7), 0);
}
END_TEST

START_TEST(test_damaged_fields) {
    sample s = make(RGPU_MSG_CHUNK);
    s.enc[12] = 1;
    ck_assert_int_eq(decode(RGPU_MSG_CHUNK, s.enc, s.len), RGPU_ERR_RESERVED);
    s = make(RGPU_MSG_RESULT);
    s.enc[13] = 1;
    ck_assert_int_eq(decode(RGPU_MSG_RESULT, s.enc, s.len), RGPU_ERR_BAD_MESSAGE);
    s = make(RGPU_MSG_RESULT);
    rgpu_st32(s.enc + 24, (uint32_t)(s.len - 28 + 1));   /* msg_len past the payload */
    ck_assert_int_eq(decode(RGPU_MSG_RESULT, s.enc, s.len), RGPU_ERR_BAD_MESSAGE);
    s = make(RGPU_MSG_ERROR);
    s.enc[4] = 1;
    ck_assert_int_eq(decode(RGPU_MSG_ERROR, s.enc, s.len), RGPU_ERR_BAD_MESSAGE);
    s = make(RGPU_MSG_NOTICE);
    s.enc[5] = 1;
    ck_assert_int_eq(decode(RGPU_MSG_NOTICE, s.enc, s.len), RGPU_ERR_BAD_MESSAGE);
    ck_assert_int_eq(decode(RGPU_MSG_NOTICE, s.enc, 7), RGPU_ERR_BAD_MESSAGE);

    /* HELLO: token_len past the payload, a trailer too long or too short; the fixed fields still read */
    s = make(RGPU_MSG_HELLO);
    rgpu_msg_hello h;
    rgpu_st32(s.enc + 52, 1000);
    ck_assert_int_eq(rgpu_msg_hello_decode(s.enc, s.len, &h), RGPU_ERR_BAD_MESSAGE);
    ck_assert(h.version == 0x01020304 && h.session == 0x1112131415161718ull && h.token == NULL);
    /* shorter than the fixed part (a format-1 HELLO is 40 bytes): only the version reads */
    ck_assert_int_eq(rgpu_msg_hello_decode(s.enc, 40, &h), RGPU_ERR_BAD_MESSAGE);
    ck_assert(h.version == 0x01020304 && h.session == 0 && h.token_len == 0);
    ck_assert_int_eq(rgpu_msg_hello_decode(s.enc, 3, &h), RGPU_ERR_BAD_MESSAGE);
    ck_assert_uint_eq(h.version, 0);
    s = make(RGPU_MSG_HELLO);
    s.enc[56 + 32] = 6;   /* says 6 version bytes, 5 follow */
    ck_assert_int_eq(rgpu_msg_hello_decode(s.enc, s.len, &h), RGPU_ERR_BAD_MESSAGE);
    rgpu_msg_hello big = hello_sample();
    char v[40];
    memset(v, '1', sizeof v);
    big.has_sw_version = false;
    size_t n = rgpu_msg_hello_encode(&big, s.enc, sizeof s.enc);
    s.enc[n] = RGPU_MAX_PEER_VERSION + 1;
    memcpy(s.enc + n + 1, v, RGPU_MAX_PEER_VERSION + 1);
    ck_assert_int_eq(rgpu_msg_hello_decode(s.enc, n + 2 + RGPU_MAX_PEER_VERSION, &h), RGPU_ERR_BAD_MESSAGE);
    s.enc[n] = RGPU_MAX_PEER_VERSION;
    ck_assert_int_eq(rgpu_msg_hello_decode(s.enc, n + 1 + RGPU_MAX_PEER_VERSION, &h), RGPU_OK);

    /* WELCOME: nbits past the payload */
    s = make(RGPU_MSG_WELCOME);
    rgpu_st32(s.enc + 84, 0xffffffffu);
    ck_assert_int_eq(decode(RGPU_MSG_WELCOME, s.enc, s.len), RGPU_ERR_BAD_MESSAGE);

    /* BLOB_PART: offset at or past total, total over the limit */
    rgpu_msg_blob_part bp = PART;
    uint8_t out[256];
    bp.offset = bp.total;
    n = rgpu_msg_blob_part_encode(&bp, out, sizeof out);
    ck_assert_int_eq(decode(RGPU_MSG_BLOB_PART, out, n), RGPU_ERR_BAD_MESSAGE);
    bp = PART;
    bp.total = RGPU_MAX_BLOB_RAW + 1;
    n = rgpu_msg_blob_part_encode(&bp, out, sizeof out);
    ck_assert_int_eq(decode(RGPU_MSG_BLOB_PART, out, n), RGPU_ERR_BAD_MESSAGE);
}
END_TEST

/* ---------------------------------------------------------------------------
 * FORMAT.md §7.1 against the codecs */
static char *read_format_md(void) {
    const char *env = getenv("RGPU_FORMAT_MD");
    char here[4096];
    snprintf(here, sizeof here, "%s", __FILE__);
    char *slash = strrchr(here, '/');
    if (slash) snprintf(slash + 1, sizeof here - (size_t)(slash + 1 - here), "../../trace-format/FORMAT.md");
    const char *paths[] = { env, "trace-format/FORMAT.md", slash ? here : NULL };
    for (size_t i = 0; i < 3; i++) {
        if (!paths[i]) continue;
        FILE *f = fopen(paths[i], "rb");
        if (!f) continue;
        char *buf = malloc(1 << 20);
        size_t n = fread(buf, 1, (1 << 20) - 1, f);
        fclose(f);
        buf[n] = 0;
        return buf;
    }
    return NULL;
}

/* The §7.1 table row of a message: "| 3 | CHUNK | …", or NULL. */
static const char *row_of(const char *md, const char *name, int *type_no) {
    const char *sec = strstr(md, "### 7.1 Messages"), *end = sec ? strstr(sec, "\n### ") : NULL;
    ck_assert_msg(sec != NULL, "FORMAT.md has no section 7.1 Messages");
    for (const char *p = sec; (p = strstr(p, "\n| ")) && (!end || p < end); p++) {
        int no;
        char nm[32];
        if (sscanf(p + 3, "%d | %31[A-Z_] |", &no, nm) == 2 && !strcmp(nm, name)) {
            *type_no = no;
            return p + 1;
        }
    }
    return NULL;
}

/* One documented field "u64 session @20 (0 = new)": its width (0: variable)
 * and offset (base + the value of a named field after '+'). */
typedef struct docf { char name[80]; size_t width; size_t off; bool has_off; } docf;

static int parse_fields(const char *row, const sample *s, docf *out, int max) {
    const char *a = strchr(row, '`'), *eol = strchr(row, '\n');
    if (!a || (eol && a > eol)) return 0;   /* BYE: "empty" */
    const char *b = strchr(a + 1, '`');
    ck_assert(b != NULL);
    int n = 0;
    for (const char *p = a + 1; p < b && n < max;) {
        const char *q = memchr(p, '|', (size_t)(b - p));
        if (!q) q = b;
        char piece[160];
        size_t pl = (size_t)(q - p) < sizeof piece - 1 ? (size_t)(q - p) : sizeof piece - 1;
        memcpy(piece, p, pl);
        piece[pl] = 0;
        p = q + 1;
        char *t = piece;
        while (*t == ' ') t++;
        docf *d = &out[n++];
        memset(d, 0, sizeof *d);
        unsigned w;
        int used = 0;
        if (sscanf(t, "u8[%u] %n", &w, &used) == 1 && used) d->width = w;
        else if (sscanf(t, "char[%u] %n", &w, &used) == 1 && used) d->width = w;
        else if (sscanf(t, "u%u %n", &w, &used) == 1 && used && (w == 8 || w == 16 || w == 32 || w == 64)) d->width = w / 8;
        else used = 0;
        t += used;
        char *at = strchr(t, '@');
        size_t nl = at ? (size_t)(at - t) : strlen(t);
        while (nl && t[nl - 1] == ' ') nl--;
        snprintf(d->name, sizeof d->name, "%.*s", (int)nl, t);
        if (at) {
            char *end;
            d->off = strtoul(at + 1, &end, 10);
            d->has_off = true;
            if (*end == '+') {
                ck_assert_msg(!strncmp(end + 1, "msg_len", 7), "%s: offset %s", s->name, at);
                d->off += s->msg_len;
            }
        }
    }
    return n;
}

/* "hash of the raw records" is the field "hash"; "token_len" is not "token". */
static bool key_matches(const char *docname, const char *key) {
    size_t k = strlen(key);
    return !strncmp(docname, key, k) && (docname[k] == 0 || docname[k] == ' ' || docname[k] == ',');
}

START_TEST(test_format_md_agrees) {
    char *md = read_format_md();
    ck_assert_msg(md != NULL, "cannot read trace-format/FORMAT.md (run from the repository root or set RGPU_FORMAT_MD)");
    const char *fixed = strstr(md, "Fixed sizes:");
    ck_assert(fixed != NULL);
    for (size_t k = 0; k < sizeof ALL / sizeof ALL[0]; k++) {
        sample s = make(ALL[k]);
        int no = 0;
        const char *row = row_of(md, s.name, &no);
        ck_assert_msg(row != NULL, "FORMAT.md §7.1 has no row for %s", s.name);
        ck_assert_msg(no == s.type, "FORMAT.md: %s is type %d, the code's %d", s.name, no, s.type);
        docf d[16];
        int nd = parse_fields(row, &s, d, 16);
        if (nd == 1 && !d[0].has_off) { d[0].off = 0; d[0].has_off = true; }   /* "u64 op_index": the whole payload */
        size_t fixed_end = 0;
        bool contiguous = true;
        for (int i = 0; i < nd; i++) {
            ck_assert_msg(d[i].has_off, "FORMAT.md %s: field '%s' has no @offset", s.name, d[i].name);
            const field *f = NULL;
            for (int j = 0; j < s.nf && !f; j++) if (key_matches(d[i].name, s.f[j].key)) f = &s.f[j];
            ck_assert_msg(f != NULL, "FORMAT.md %s: field '%s' is not one the codec writes", s.name, d[i].name);
            if (d[i].width) ck_assert_msg(d[i].width == f->n, "FORMAT.md %s: '%s' is %zu bytes, the codec's %zu",
                                          s.name, d[i].name, d[i].width, f->n);
            ck_assert_msg(d[i].off + f->n <= s.len, "FORMAT.md %s: '%s' @%zu past the encoded %zu bytes", s.name,
                          d[i].name, d[i].off, s.len);
            ck_assert_msg(!memcmp(s.enc + d[i].off, f->var ? f->var : f->b, f->n),
                          "FORMAT.md %s: '%s' @%zu is not where the codec writes it", s.name, d[i].name, d[i].off);
            if (d[i].width && contiguous) {
                ck_assert_msg(d[i].off == fixed_end, "FORMAT.md %s: '%s' @%zu, the previous field ends at %zu",
                              s.name, d[i].name, d[i].off, fixed_end);
                fixed_end += d[i].width;
            } else if (contiguous) {
                contiguous = false;
                ck_assert_msg(d[i].off == s.head, "FORMAT.md %s: variable '%s' @%zu, the codec's fixed part is %zu",
                              s.name, d[i].name, d[i].off, s.head);
            }
        }
        if (contiguous) ck_assert_msg(fixed_end == s.head, "FORMAT.md %s: fields end at %zu, the codec's fixed part is %zu",
                                      s.name, fixed_end, s.head);
        for (int j = 0; j < s.nf; j++) {   /* every field the codec writes is documented */
            bool found = false;
            for (int i = 0; i < nd; i++) found |= key_matches(d[i].name, s.f[j].key);
            ck_assert_msg(found, "FORMAT.md %s does not document '%s'", s.name, s.f[j].key);
        }
        if (s.type == RGPU_MSG_HELLO || s.type == RGPU_MSG_WELCOME) {
            const char *eol = strchr(row, '\n'), *opt = strstr(row, "then, optionally, `u8 n |");
            ck_assert_msg(opt && opt < eol, "FORMAT.md %s: the optional version trailer is not documented", s.name);
        }
        /* "Fixed sizes: HELLO 40 + …; … RESULT_M ≥ 28; …" */
        const char *p = fixed, *para_end = strstr(fixed, "\n\n");
        size_t nl = strlen(s.name);
        while ((p = strstr(p + 1, s.name)) && (!para_end || p < para_end) &&
               !((p[-1] == ' ' || p[-1] == '\n') && p[nl] == ' ')) {}
        ck_assert_msg(p && (!para_end || p < para_end), "FORMAT.md's Fixed sizes line has no %s", s.name);
        p += nl + 1;
        if (!strncmp(p, "≥ ", strlen("≥ "))) p += strlen("≥ ");
        ck_assert_msg(strtoul(p, NULL, 10) == s.head, "FORMAT.md: Fixed size of %s is %lu, the codec's %zu", s.name,
                      strtoul(p, NULL, 10), s.head);
    }
    free(md);
}
END_TEST

int main(void) {
    Suite *s = suite_create("msg");
    TCase *tc = tcase_create("codec");
    tcase_add_test(tc, test_round_trips);
    tcase_add_test(tc, test_send_is_encode);
    tcase_add_test(tc, test_truncated_and_oversized);
    tcase_add_test(tc, test_damaged_fields);
    tcase_add_test(tc, test_format_md_agrees);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
