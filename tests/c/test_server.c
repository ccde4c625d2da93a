/* test_server.c — rgpu-server against corrupt and hostile input.
 *
 * Starts $RGPU_SERVER_BIN on a private Unix socket with a token file, a
 * journal folder and small limits (--max-message 1M, --max-chunk 1M,
 * --max-storages 64, --max-session-bytes 4M). An honest client (the real recorder, given the
 * token through RGPU_TOKEN_FILE) keeps a session open throughout; each
 * corrupt input is sent on its own raw connection and must be answered with
 * ERROR carrying its specific code, after which the honest session must
 * still compute right. Also: authentication, limits, and resuming a session
 * on a new connection at the wire level. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_util.h"
#include "check_server.h"
#include "server.h"

static srv g_srv;
/* the names the tests below use */
#define g_addr g_srv.addr
#define g_token g_srv.token
#define g_token_file g_srv.token_file
#define raw_connect() srv_connect(&g_srv)
#define send_hello_full(fd, version, brk, token, session) srv_hello(&g_srv, fd, version, brk, token, session, NULL)
#define send_hello(fd, version, brk) srv_hello(&g_srv, fd, version, brk, NULL, 0, NULL)
#define raw_session_at(session, id, applied) srv_session(&g_srv, session, id, applied)
#define raw_session() srv_session(&g_srv, 0, NULL, NULL)

static void setup(void) {
    static const char *const opts[] = { "--quiet", "--max-message", "1M", "--max-chunk", "1M", "--max-storages", "64",
                                        "--max-session-bytes", "4M", NULL };
    srv_start(&g_srv, opts);
    honest_open(&g_srv);
}

static void teardown(void) {
    honest_close();
    srv_stop(&g_srv);
}

static void valid_record(rgpu_buf *b, uint64_t tid) {
    rgpu_record r = { .op = RGPU_OP_EMPTY, .n_out = 1 };
    r.out[0] = (rgpu_tdef){ .tid = tid, .sid = tid + 1000, .flags = RGPU_TDEF_NEW_STORAGE, .dtype = RGPU_F32,
                            .ndim = 1, .nbytes = 16, .sizes = { 4 }, .strides = { 1 } };
    ck_assert_int_eq(rgpu_record_encode(b, &r), RGPU_OK);
}

/* A lone message header (type, length; its magic spoiled when spoil) on a
 * new session: the error that ends the session. */
static int send_bad_header(int type, uint64_t len, bool spoil) {
    int fd = raw_session();
    uint8_t h[RGPU_WIRE_HEADER];
    rgpu_wire_header_encode(h, type, len);
    if (spoil) h[4] ^= 0x55;
    ck_assert_int_eq(write(fd, h, sizeof h), (ssize_t)sizeof h);
    return expect_error(fd);
}

/* valid_record(5), changed by poke (NULL: not), sent on a new session as
 * chunk seq with send_chunk's corruption: the error that ends the session. */
static int send_bad_chunk(void (*poke)(rgpu_buf *), uint64_t seq, int corrupt) {
    int fd = raw_session();
    rgpu_buf b = { 0 };
    valid_record(&b, 5);
    if (poke) poke(&b);
    send_chunk(fd, b.p, b.len, seq, 1, corrupt);
    rgpu_buf_free(&b);
    return expect_error(fd);
}

START_TEST(bad_wire_magic) {
    ck_assert_int_eq(send_bad_header(RGPU_MSG_WAIT, 8, true), RGPU_ERR_BAD_MAGIC);
    honest_roundtrip(3.0f);
}
END_TEST

START_TEST(absurd_length) {
    ck_assert_int_eq(send_bad_header(RGPU_MSG_CHUNK, 1ull << 62, false), RGPU_ERR_TOO_LARGE);
    honest_roundtrip(4.0f);
}
END_TEST

START_TEST(bad_frame_magic_checksum_truncated_hash) {
    static const int expect[5] = { 0, RGPU_ERR_BAD_MAGIC, RGPU_ERR_BAD_CHECKSUM, RGPU_ERR_TRUNCATED, RGPU_ERR_BAD_CHECKSUM };
    for (int k = 1; k <= 4; k++) {
        int code = send_bad_chunk(NULL, 0, k);
        ck_assert_msg(code == expect[k], "corruption %d gave %s", k, rgpu_status_name(code));
        honest_roundtrip((float)k);
    }
}
END_TEST

static void poke_op(rgpu_buf *b) { rgpu_st16(b->p, RGPU_OP_COUNT + 7); }
/* header 6, tid+flags 9, sid+dtype 9, then ndim */
static void poke_ndim(rgpu_buf *b) { b->p[6 + 9 + 9] = RGPU_MAX_DIMS + 1; }

START_TEST(op_out_of_range) {
    ck_assert_int_eq(send_bad_chunk(poke_op, 0, 0), RGPU_ERR_BAD_OP);
    honest_roundtrip(5.0f);
}
END_TEST

START_TEST(ndim_over_limit) {
    ck_assert_int_eq(send_bad_chunk(poke_ndim, 0, 0), RGPU_ERR_TOO_MANY_DIMS);
    honest_roundtrip(6.0f);
}
END_TEST

START_TEST(out_of_sequence_chunk) {
    ck_assert_int_eq(send_bad_chunk(NULL, 42, 0), RGPU_ERR_SEQUENCE);
    honest_roundtrip(7.0f);
}
END_TEST

START_TEST(wrong_version_and_table) {
    char msg[512], want[64];
    snprintf(want, sizeof want, "rgpu-server %s", RGPU_VERSION);
    int fd = raw_connect();
    send_hello(fd, RGPU_WIRE_VERSION + 1, 0);
    ck_assert_int_eq(expect_error_msg(fd, msg, sizeof msg), RGPU_ERR_BAD_VERSION);
    ck_assert_msg(strstr(msg, "protocol 2") && strstr(msg, want), "%s", msg);   /* both versions named */
    /* a protocol-1 client's HELLO (40 bytes, no token): shorter than this format's, named by its version */
    uint8_t old[40] = { 0 };
    rgpu_st32(old, 1);
    fd = raw_connect();
    ck_assert_int_eq(rgpu_wire_send(fd, RGPU_MSG_HELLO, old, sizeof old, NULL, 0), RGPU_OK);
    ck_assert_int_eq(expect_error_msg(fd, msg, sizeof msg), RGPU_ERR_BAD_VERSION);
    ck_assert_msg(strstr(msg, "protocol 1") && strstr(msg, "protocol 2"), "%s", msg);
    fd = raw_connect();
    send_hello(fd, RGPU_WIRE_VERSION, 1);
    ck_assert_int_eq(expect_error_msg(fd, msg, sizeof msg), RGPU_ERR_OP_TABLE);
    ck_assert_msg(strstr(msg, "client: rgpu") && strstr(msg, want), "%s", msg);
    honest_roundtrip(8.0f);
}
END_TEST

START_TEST(garbage_and_half_frames) {
    int fd = raw_connect();
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    ck_assert_int_eq(write(fd, junk, sizeof junk - 1), (ssize_t)(sizeof junk - 1));
    int code = expect_error(fd);
    ck_assert_msg(code == RGPU_ERR_BAD_MAGIC || code == RGPU_ERR_RESERVED || code == RGPU_ERR_BAD_MESSAGE, "%s", rgpu_status_name(code));
    /* a frame that promises 1000 bytes, sends 10, and the peer vanishes */
    fd = raw_session();
    uint8_t h[RGPU_WIRE_HEADER + 10] = { 0 };
    rgpu_wire_header_encode(h, RGPU_MSG_CHUNK, 1000);
    ck_assert_int_eq(write(fd, h, sizeof h), (ssize_t)sizeof h);
    close(fd);
    honest_roundtrip(9.0f);
    /* a type that does not go client to server, and one no format names (a protocol error, never skipped) */
    fd = raw_session();
    rgpu_wire_header_encode(h, RGPU_MSG_WELCOME, 0);
    ck_assert_int_eq(write(fd, h, RGPU_WIRE_HEADER), RGPU_WIRE_HEADER);
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_BAD_MESSAGE);
    fd = raw_session();
    rgpu_wire_header_encode(h, RGPU_MSG_TYPE_COUNT_, 0);
    ck_assert_int_eq(write(fd, h, RGPU_WIRE_HEADER), RGPU_WIRE_HEADER);
    char msg[512], want[64];
    ck_assert_int_eq(expect_error_msg(fd, msg, sizeof msg), RGPU_ERR_BAD_MESSAGE);
    snprintf(want, sizeof want, "unknown message type %d", RGPU_MSG_TYPE_COUNT_);
    ck_assert_msg(strstr(msg, want), "%s", msg);
    honest_roundtrip(10.0f);
    /* the reserved type 4 (the retired CHUNK_REF) with its old 32-byte payload */
    fd = raw_session();
    uint8_t ref[RGPU_WIRE_HEADER + 32] = { 0 };
    rgpu_wire_header_encode(ref, RGPU_MSG_CHUNK_REF, 32);
    ck_assert_int_eq(write(fd, ref, sizeof ref), (ssize_t)sizeof ref);
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_BAD_MESSAGE);
    honest_roundtrip(10.5f);
}
END_TEST

/* Op-level failures are not protocol errors: they poison and report at the
 * next wait, and the same session goes on. */
START_TEST(view_outside_storage_reported_at_wait) {
    uint64_t tid = rgpu_client_new_id(g_honest);
    rgpu_record a = { .op = RGPU_OP_ALIAS, .n_out = 1, .n_in = 1 };
    a.in[0] = g_x_tid;
    /* x's storage has 16 bytes; this view wants 8 floats */
    rgpu_tdef probe = { .tid = tid, .dtype = RGPU_F32, .ndim = 1, .sizes = { 8 }, .strides = { 1 } };
    ck_assert_int_eq(rgpu_tdef_check_bounds(&probe, 16), RGPU_ERR_OUT_OF_BOUNDS);
    a.out[0] = probe;
    /* find x's sid: the honest session made it right after x's tid */
    a.out[0].sid = g_x_tid + 1;
    uint64_t idx;
    ck_assert_int_eq(rgpu_client_record(g_honest, &a, &idx), RGPU_OK);
    rgpu_record d = { .op = RGPU_OP_DOWNLOAD, .n_in = 1 };
    d.in[0] = tid;
    ck_assert_int_eq(rgpu_client_record(g_honest, &d, &idx), RGPU_OK);
    char err[256] = "";
    uint8_t *data;
    size_t n;
    ck_assert_int_eq(rgpu_client_wait(g_honest, idx, &data, &n, err, sizeof err), RGPU_ERR_OUT_OF_BOUNDS);
    ck_assert_msg(strstr(err, "rgpu::alias") != NULL, "error names the op: %s", err);
    honest_roundtrip(11.0f);
}
END_TEST

START_TEST(many_sessions_at_once) {
    enum { N = 8 };
    rgpu_client *c[N];
    char err[256];
    for (int i = 0; i < N; i++) ck_assert_int_eq(rgpu_client_connect(g_addr, NULL, &c[i], err, sizeof err), RGPU_OK);
    uint64_t idx[N];
    for (int i = 0; i < N; i++) {
        uint64_t t = rgpu_client_new_id(c[i]);
        rgpu_record r = { .op = RGPU_OP_ARANGE, .n_out = 1, .n_args = 2 };
        r.out[0] = (rgpu_tdef){ .tid = t, .sid = t + 1, .flags = RGPU_TDEF_NEW_STORAGE, .dtype = RGPU_I64,
                                .ndim = 1, .nbytes = 8 * 100, .sizes = { 100 }, .strides = { 1 } };
        r.args[0].kind = RGPU_ARG_INT; r.args[0].v.i = i;
        r.args[1].kind = RGPU_ARG_INT; r.args[1].v.i = 1;
        ck_assert_int_eq(rgpu_client_record(c[i], &r, &idx[i]), RGPU_OK);
        uint64_t s = rgpu_client_new_id(c[i]);
        rgpu_record sm = { .op = RGPU_OP_SUM, .n_out = 1, .n_in = 1, .n_args = 2 };
        sm.in[0] = t;
        sm.out[0] = (rgpu_tdef){ .tid = s, .sid = s + 100, .flags = RGPU_TDEF_NEW_STORAGE, .dtype = RGPU_I64, .ndim = 0, .nbytes = 8 };
        sm.args[0].kind = RGPU_ARG_INTS; sm.args[0].v.ints.n = 0;
        sm.args[1].kind = RGPU_ARG_BOOL; sm.args[1].v.i = 0;
        ck_assert_int_eq(rgpu_client_record(c[i], &sm, &idx[i]), RGPU_OK);
        rgpu_record l = { .op = RGPU_OP_LOCAL_SCALAR_DENSE, .n_in = 1 };
        l.in[0] = s;
        ck_assert_int_eq(rgpu_client_record(c[i], &l, &idx[i]), RGPU_OK);
    }
    for (int i = 0; i < N; i++) {
        uint8_t *data;
        size_t n;
        ck_assert_int_eq(rgpu_client_wait(c[i], idx[i], &data, &n, err, sizeof err), RGPU_OK);
        int64_t v;
        ck_assert_uint_eq(n, 8);
        memcpy(&v, data, 8);
        free(data);
        ck_assert_int_eq(v, 100 * i + 4950);
        rgpu_client_close(c[i]);
    }
    honest_roundtrip(12.0f);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Authentication and limits */
START_TEST(token_required_and_checked) {
    struct stat st;
    ck_assert_int_eq(stat(g_token_file, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    char wrong[65];
    memcpy(wrong, g_token, 65);
    wrong[10] = wrong[10] == 'a' ? 'b' : 'a';
    const char *bad[] = { "", wrong, "short", NULL };
    char longer[160];
    snprintf(longer, sizeof longer, "%sff", g_token);
    bad[3] = longer;
    for (int i = 0; i < 4; i++) {
        int fd = raw_connect();
        send_hello_full(fd, RGPU_WIRE_VERSION, 0, bad[i], 0);
        ck_assert_int_eq(expect_error(fd), RGPU_ERR_AUTH);
    }
    /* a refused client executes nothing: a chunk after the refused HELLO is never read */
    int fd = raw_connect();
    send_hello_full(fd, RGPU_WIRE_VERSION, 0, wrong, 0);
    rgpu_buf b = { 0 };
    valid_record(&b, 5);
    send_chunk(fd, b.p, b.len, 0, 1, 0);
    rgpu_buf_free(&b);
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_AUTH);
    /* the recorder with a wrong token gets a clear reason */
    rgpu_client *c = NULL;
    char err[512] = "";
    ck_assert_int_eq(rgpu_client_connect_token(g_addr, NULL, wrong, &c, err, sizeof err), RGPU_ERR_AUTH);
    ck_assert_msg(strstr(err, "wrong token") != NULL, "%s", err);
    ck_assert_ptr_null(c);
    honest_roundtrip(13.0f);
}
END_TEST

START_TEST(message_over_max_message) {
    /* the server runs with --max-message 1M */
    ck_assert_int_eq(send_bad_header(RGPU_MSG_BLOB, 2u << 20, false), RGPU_ERR_TOO_LARGE);
    honest_roundtrip(14.0f);
}
END_TEST

/* A small message whose frame decompresses to more than --max-chunk. */
START_TEST(chunk_over_max_chunk) {
    int fd = raw_session();
    size_t n = 2u << 20;
    uint8_t *zeros = calloc(1, n);
    send_chunk(fd, zeros, n, 0, 1, 0);
    free(zeros);
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_TOO_LARGE);
    honest_roundtrip(17.0f);
}
END_TEST

/* --max-storages 64, --max-session-bytes 4M: op errors at the next wait, the
 * session goes on. */
START_TEST(storage_limits_reported_at_wait) {
    rgpu_client *c;
    char err[512];
    ck_assert_int_eq(rgpu_client_connect(g_addr, NULL, &c, err, sizeof err), RGPU_OK);
    uint64_t idx = 0;
    for (int k = 0; k < 70; k++) {   /* one storage each; the 65th is over */
        uint64_t t = rgpu_client_new_id(c);
        rgpu_record r = { .op = RGPU_OP_EMPTY, .n_out = 1 };
        r.out[0] = (rgpu_tdef){ .tid = t, .sid = rgpu_client_new_id(c), .flags = RGPU_TDEF_NEW_STORAGE,
                                .dtype = RGPU_F32, .ndim = 1, .nbytes = 16, .sizes = { 4 }, .strides = { 1 } };
        ck_assert_int_eq(rgpu_client_record(c, &r, &idx), RGPU_OK);
    }
    rgpu_record sy = { .op = RGPU_OP_SYNC };
    ck_assert_int_eq(rgpu_client_record(c, &sy, &idx), RGPU_OK);
    uint8_t *data;
    size_t n;
    ck_assert_int_eq(rgpu_client_wait(c, idx, &data, &n, err, sizeof err), RGPU_ERR_LIMIT);
    ck_assert_msg(strstr(err, "op 64 ") && strstr(err, "--max-storages"), "%s", err);
    rgpu_client_close(c);

    ck_assert_int_eq(rgpu_client_connect(g_addr, NULL, &c, err, sizeof err), RGPU_OK);
    uint64_t t = rgpu_client_new_id(c);
    rgpu_record r = { .op = RGPU_OP_EMPTY, .n_out = 1 };
    r.out[0] = (rgpu_tdef){ .tid = t, .sid = rgpu_client_new_id(c), .flags = RGPU_TDEF_NEW_STORAGE,
                            .dtype = RGPU_F32, .ndim = 1, .nbytes = 8 << 20, .sizes = { 2 << 20 }, .strides = { 1 } };
    ck_assert_int_eq(rgpu_client_record(c, &r, &idx), RGPU_OK);
    ck_assert_int_eq(rgpu_client_record(c, &sy, &idx), RGPU_OK);
    ck_assert_int_eq(rgpu_client_wait(c, idx, &data, &n, err, sizeof err), RGPU_ERR_LIMIT);
    ck_assert_msg(strstr(err, "--max-session-bytes") != NULL, "%s", err);
    ck_assert_int_eq(rgpu_client_record(c, &sy, &idx), RGPU_OK);      /* reported once; the session goes on */
    ck_assert_int_eq(rgpu_client_wait(c, idx, &data, &n, err, sizeof err), RGPU_OK);
    free(data);
    rgpu_client_close(c);
    honest_roundtrip(15.0f);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Resume at the wire level */
START_TEST(resume_on_a_new_connection) {
    uint64_t id, applied;
    int fd = raw_session_at(0, &id, &applied);
    ck_assert_uint_eq(applied, 0);
    rgpu_buf b1 = { 0 }, b2 = { 0 };
    valid_record(&b1, 5);
    valid_record(&b2, 7);
    valid_record(&b2, 9);
    send_chunk(fd, b1.p, b1.len, 0, 1, 0);
    ck_assert_uint_eq(read_ack(fd), 1);
    /* a frame cut short, then the link drops: the session is kept */
    uint8_t h[RGPU_WIRE_HEADER + 10] = { 0 };
    rgpu_wire_header_encode(h, RGPU_MSG_CHUNK, 1000);
    ck_assert_int_eq(write(fd, h, sizeof h), (ssize_t)sizeof h);
    close(fd);
    uint64_t id2;
    fd = raw_session_at(id, &id2, &applied);
    ck_assert_uint_eq(id2, id);
    ck_assert_uint_eq(applied, 1);
    send_chunk(fd, b1.p, b1.len, 0, 1, 0);            /* a resend of an applied chunk: dropped, acked */
    ck_assert_uint_eq(read_ack(fd), 1);
    send_chunk(fd, b2.p, b2.len, 1, 2, 0);
    ck_assert_uint_eq(read_ack(fd), 3);
    /* a second connection naming the session takes it over from the first */
    int fd2 = raw_session_at(id, NULL, &applied);
    ck_assert_uint_eq(applied, 3);
    uint8_t x;
    ck_assert(read(fd, &x, 1) <= 0);
    close(fd);
    /* a chunk straddling the resume point is refused */
    rgpu_buf b3 = { 0 };
    valid_record(&b3, 11);
    valid_record(&b3, 13);
    send_chunk(fd2, b3.p, b3.len, 2, 2, 0);
    ck_assert_int_eq(expect_error(fd2), RGPU_ERR_SEQUENCE);
    /* after a protocol error the session is gone: resuming it is refused */
    fd = raw_connect();
    send_hello_full(fd, RGPU_WIRE_VERSION, 0, NULL, id);
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_SESSION_LOST);
    /* and so is a session id the server never gave out */
    fd = raw_connect();
    send_hello_full(fd, RGPU_WIRE_VERSION, 0, NULL, 0x7777777700000001ull);
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_SESSION_LOST);
    rgpu_buf_free(&b1); rgpu_buf_free(&b2); rgpu_buf_free(&b3);
    honest_roundtrip(16.0f);
}
END_TEST

/* An orderly close: BYE is answered with BYE once the session is freed,
 * then the server closes; the session cannot be resumed. */
START_TEST(bye_answered_with_bye) {
    uint64_t id;
    int fd = raw_session_at(0, &id, NULL);
    rgpu_buf b = { 0 };
    valid_record(&b, 21);
    send_chunk(fd, b.p, b.len, 0, 1, 0);
    ck_assert_uint_eq(read_ack(fd), 1);
    ck_assert_int_eq(rgpu_msg_bye_send(fd, &(rgpu_msg_bye){ 0 }), RGPU_OK);
    rgpu_msg_header h;
    uint8_t *p = NULL;
    ck_assert_int_eq(rgpu_wire_recv(fd, 1024, &h, &p), RGPU_OK);
    ck_assert_uint_eq(h.type, RGPU_MSG_BYE);
    ck_assert_uint_eq(h.len, 0);
    free(p);
    uint8_t x;
    ck_assert(read(fd, &x, 1) == 0);                  /* then it closes */
    close(fd);
    fd = raw_connect();
    send_hello_full(fd, RGPU_WIRE_VERSION, 0, NULL, id);
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_SESSION_LOST);
    rgpu_buf_free(&b);
    honest_roundtrip(17.0f);
}
END_TEST

/* A HELLO resuming session id with the server's token and this secret:
 * refused with AUTH, the message naming the session and why. */
static void resume_refused(uint64_t id, const uint8_t *secret, const char *why) {
    char msg[512], idhex[20];
    int fd = raw_connect();
    srv_hello(&g_srv, fd, RGPU_WIRE_VERSION, 0, NULL, id, secret);
    ck_assert_int_eq(expect_error_msg(fd, msg, sizeof msg), RGPU_ERR_AUTH);
    snprintf(idhex, sizeof idhex, "%016llx", (unsigned long long)id);
    ck_assert_msg(strstr(msg, why) && strstr(msg, idhex), "%s", msg);
}

/* Another connection with the server's token but not the session's secret
 * (none, or a wrong one) cannot resume it, attached or detached: refused with
 * AUTH, the session and its connection untouched. Ids are random. */
START_TEST(resume_needs_the_session_secret) {
    uint64_t id, id_b, applied;
    int fd = raw_session_at(0, &id, NULL);
    close(raw_session_at(0, &id_b, NULL));
    ck_assert_msg(id && id_b && id != id_b && id_b != id + 1 && (id >> 32) != (id_b >> 32),
                  "session ids %016llx, %016llx look sequential", (unsigned long long)id, (unsigned long long)id_b);
    const uint8_t *secret = srv_secret_of(id);
    ck_assert(secret != NULL);
    uint8_t none[RGPU_SESSION_SECRET] = { 0 }, wrong[RGPU_SESSION_SECRET];
    memcpy(wrong, secret, sizeof wrong);
    wrong[15] ^= 0x80;   /* one bit off */
    rgpu_buf b = { 0 };
    /* attached: after each refusal the owner's next chunk is applied and acknowledged */
    for (uint64_t op = 0; op < 4; op++) {
        resume_refused(id, op % 2 ? wrong : none, op % 2 ? "wrong session secret" : "no session secret");
        b.len = 0;
        valid_record(&b, 5 + 2 * op);
        send_chunk(fd, b.p, b.len, op, 1, 0);
        ck_assert_uint_eq(read_ack(fd), op + 1);
    }
    /* detached: refused too, and the owner then resumes where it was */
    close(fd);
    usleep(100000);
    resume_refused(id, wrong, "wrong session secret");
    resume_refused(id, none, "no session secret");
    fd = raw_session_at(id, NULL, &applied);
    ck_assert_uint_eq(applied, 4);
    b.len = 0;
    valid_record(&b, 13);
    send_chunk(fd, b.p, b.len, 4, 1, 0);
    ck_assert_uint_eq(read_ack(fd), 5);
    close(fd);
    rgpu_buf_free(&b);
    honest_roundtrip(17.0f);
}
END_TEST

/* The ssh bridge's check of its daemon (server.h): the peer's uid. A peer
 * of another uid cannot be made here without root, so the check is asked
 * for another uid than the socket's. */
START_TEST(peer_uid_checked) {
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    char why[256] = "", want[128];
    unsigned me = (unsigned)geteuid();
    ck_assert_int_eq(rgpu_server_check_peer(sv[0], me, why, sizeof why), 0);
    ck_assert_int_eq(rgpu_server_check_peer(sv[0], me + 1, why, sizeof why), -1);
    snprintf(want, sizeof want, "it is served by uid %u, not by this user (uid %u)", me, me + 1);
    ck_assert_str_eq(why, want);
    int pp[2];                                        /* not a socket: no peer to tell */
    ck_assert_int_eq(pipe(pp), 0);
    ck_assert_int_eq(rgpu_server_check_peer(pp[0], me, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "cannot tell who serves it"), "%s", why);
    close(sv[0]); close(sv[1]); close(pp[0]); close(pp[1]);
}
END_TEST

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("server");
    TCase *tc = add_tcase(s, "hostile input", 30, setup, teardown);
    ADD_TESTS(tc, bad_wire_magic, absurd_length, bad_frame_magic_checksum_truncated_hash, op_out_of_range,
                  ndim_over_limit, out_of_sequence_chunk, wrong_version_and_table, garbage_and_half_frames,
                  view_outside_storage_reported_at_wait, many_sessions_at_once, token_required_and_checked,
                  message_over_max_message, chunk_over_max_chunk, storage_limits_reported_at_wait,
                  resume_on_a_new_connection, bye_answered_with_bye, peer_uid_checked,
                  resume_needs_the_session_secret);
    return run_suite(s);
}
