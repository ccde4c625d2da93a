/* test_hostile.c — a client that holds the token, or a crafted .rgt, against
 * rgpu-server and the offline tools (issue: hostile input can't crash,
 * exhaust or corrupt the server).
 *
 * The standard fixture starts $RGPU_SERVER_BIN with --max-memory 512M,
 * --max-session-bytes 64M, --max-connections 12 and --handshake-timeout 1,
 * and keeps an honest session (the real recorder) open throughout: after
 * each attack the server must be alive, its resident memory bounded, and the
 * honest session must still compute right. Tests that need other options
 * (a tiny global limit, --record, a file-size limit, a bad token file)
 * start their own server. Every case here was a crash, an OOM kill, a hang
 * or a silent loss before. */
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <time.h>

#include "check_util.h"
#include "check_records.h"
#include "check_server.h"

static srv g_srv;
static int run_tool(const char *name, const char *arg1, const char *arg2, char *err, size_t errlen);
static int log_count(const srv *s, const char *what);

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static const char *const STD_OPTS[] = { "--max-memory", "512M", "--max-session-bytes", "64M", "--max-connections", "12",
                                        "--handshake-timeout", "1", NULL };

static void setup(void) {
    srv_start(&g_srv, STD_OPTS);
    honest_open(&g_srv);
}

static void teardown(void) {
    honest_close();
    srv_stop(&g_srv);
}

/* Survived, memory bounded, honest session fine. */
static void after_attack(float v, long max_peak_mb) {
    ck_assert_msg(srv_alive(&g_srv), "the server died (see %s)", g_srv.log);
    long peak = srv_rss_kb(&g_srv, 1);
    ck_assert_msg(peak < max_peak_mb * 1024, "server peak RSS %ld KiB over %ld MiB", peak, max_peak_mb);
    honest_roundtrip(v);
}

/* A 1-element f32 storage x (tid 1, sid 2) and a view over it. */
static void rec_small(rgpu_buf *b) { rec_empty(b, vec_def(1, 2, 1)); }

static rgpu_tdef view_def(uint64_t tid, uint64_t sid, int ndim, const int64_t *sizes, const int64_t *strides) {
    rgpu_tdef d = { .tid = tid, .sid = sid, .dtype = RGPU_F32, .ndim = (uint8_t)ndim };
    for (int i = 0; i < ndim; i++) { d.sizes[i] = sizes[i]; d.strides[i] = strides[i]; }
    return d;
}

#define SZ1(...) ((const int64_t[]){ __VA_ARGS__ })

/* rec_small, then tensor 3: a view of its 4 bytes with sizes sz[0..nd) and
 * every stride 0 */
static void rec_stride0_view(rgpu_buf *b, int nd, const int64_t *sz) {
    static const int64_t st[RGPU_MAX_DIMS] = { 0 };
    rec_small(b);
    rec_alias(b, view_def(3, 2, nd, sz, st), 1);
}

static void rec_download(rgpu_buf *b, uint64_t tid) {
    rgpu_record r = { .op = RGPU_OP_DOWNLOAD, .n_in = 1 };
    r.in[0] = tid;
    enc(b, &r);
}

static void rec_sync(rgpu_buf *b) {
    rgpu_record r = { .op = RGPU_OP_SYNC };
    enc(b, &r);
}

static void rec_sum(rgpu_buf *b, uint64_t out_tid, uint64_t in) {
    rgpu_record r = { .op = RGPU_OP_SUM, .n_out = 1, .n_in = 1, .n_args = 2 };
    rgpu_tdef o = { .tid = out_tid, .sid = out_tid + 1, .flags = RGPU_TDEF_NEW_STORAGE, .dtype = RGPU_F32, .nbytes = 4 };
    r.out[0] = o;
    r.in[0] = in;
    r.args[0].kind = RGPU_ARG_INTS; r.args[0].v.ints.p = (const uint8_t *)""; r.args[0].v.ints.n = 0;
    r.args[1].kind = RGPU_ARG_BOOL; r.args[1].v.i = 0;
    enc(b, &r);
}

static void rec_full(rgpu_buf *b, uint64_t tid, double v) {
    rgpu_record r = { .op = RGPU_OP_FULL, .n_out = 1, .n_args = 1 };
    r.out[0] = existing(tid);
    r.args[0].kind = RGPU_ARG_FLOAT; r.args[0].v.f = v;
    enc(b, &r);
}

/* WAIT for op: its RESULT must carry status code and a message holding a and b. */
static void expect_wait_error(int fd, uint64_t op, int code, const char *a, const char *b) {
    char msg[512];
    ck_assert_int_eq(wait_result(fd, op, msg, sizeof msg, NULL, NULL), code);
    ck_assert_msg(strstr(msg, a) && strstr(msg, b), "%s", msg);
}

/* Send b's records as one chunk at first, expect its ACK. */
static void run_chunk(int fd, rgpu_buf *b, uint64_t first, uint32_t count) {
    send_chunk(fd, b->p, b->len, first, count, 0);
    ck_assert_uint_eq(read_ack(fd), first + count);
    rgpu_buf_free(b);
}

/* The chunk b (count records; b freed) on a new session: the wait on op
 * fails with code and a message holding a and why; the session is closed. */
static void refused_at_wait(rgpu_buf *b, uint32_t count, uint64_t op, int code, const char *a, const char *why) {
    int fd = srv_session(&g_srv, 0, NULL, NULL);
    run_chunk(fd, b, 0, count);
    expect_wait_error(fd, op, code, a, why);
    close(fd);
}

/* ---------------------------------------------------------------------------
 * 1. Sizes: the view that overflowed the heap, and its relatives */
START_TEST(stride0_view_of_2_62_refused) {
    int fd = srv_session(&g_srv, 0, NULL, NULL);
    rgpu_buf b = { 0 };
    rec_stride0_view(&b, 1, SZ1(1ll << 62));
    rec_download(&b, 3);
    run_chunk(fd, &b, 0, 3);
    expect_wait_error(fd, 2, RGPU_ERR_TOO_LARGE, "op 1 (rgpu::alias)", "over the limit");
    /* the session goes on */
    b = (rgpu_buf){ 0 };
    rec_sync(&b);
    run_chunk(fd, &b, 3, 1);
    ck_assert_int_eq(wait_result(fd, 3, NULL, 0, NULL, NULL), RGPU_OK);
    close(fd);
    after_attack(2.0f, 200);
}
END_TEST

/* [2^29] stride 0: 2 GiB to download under a 64 MiB session: refused up
 * front, nothing allocated (it used to allocate 4 GiB of temporaries). */
START_TEST(stride0_download_over_the_session_limit) {
    rgpu_buf b = { 0 };
    rec_stride0_view(&b, 1, SZ1(1ll << 29));
    rec_download(&b, 3);
    refused_at_wait(&b, 3, 2, RGPU_ERR_LIMIT, "op 2 (rgpu::download)", "--max-session-bytes");
    after_attack(3.0f, 200);
}
END_TEST

/* A copy into, and a sum over, a [2^50] view of 4 bytes: refused at the
 * view, not run for days. */
START_TEST(absurd_work_refused_up_front) {
    int fd = srv_session(&g_srv, 0, NULL, NULL);
    rgpu_buf b = { 0 };
    rec_stride0_view(&b, 2, SZ1(1ll << 25, 1ll << 25));
    rgpu_record c = { .op = RGPU_OP_COPY, .n_out = 1, .n_in = 1 };
    c.out[0] = existing(3);
    c.in[0] = 1;
    enc(&b, &c);
    rec_sum(&b, 5, 3);
    rec_sync(&b);
    double t0 = now_s();
    run_chunk(fd, &b, 0, 5);
    char msg[512];
    ck_assert_int_eq(wait_result(fd, 4, msg, sizeof msg, NULL, NULL), RGPU_ERR_TOO_LARGE);
    ck_assert_msg(now_s() - t0 < 5, "took %.1f s", now_s() - t0);
    close(fd);
    after_attack(4.0f, 200);
}
END_TEST

/* ---------------------------------------------------------------------------
 * 2. Memory */

/* Zip bombs: ~600 MiB of zeros compress to a few hundred KiB. Pushed BLOBs
 * that would pass the session's room are dropped before inflating; one an
 * UPLOAD asked for fails that op with the limit named. */
START_TEST(blob_bombs_are_not_inflated) {
    size_t n = 600u << 20;
    uint8_t *zeros = calloc(1, n);
    ck_assert(zeros != NULL);
    int fd = srv_session(&g_srv, 0, NULL, NULL);
    for (int k = 0; k < 3; k++) {
        zeros[0] = (uint8_t)(k + 1);
        send_blob(fd, zeros, n);
    }
    /* an UPLOAD that names a bomb: its storage alone passes the session limit */
    zeros[0] = 9;
    rgpu_hash h = rgpu_hash_bytes(zeros, n);
    rgpu_buf b = { 0 };
    rgpu_record u = { .op = RGPU_OP_UPLOAD, .n_out = 1, .n_args = 2 };
    u.out[0] = vec_def(1, 2, (int64_t)(n / 4));
    u.args[0].kind = RGPU_ARG_HASH; u.args[0].v.h = h;
    u.args[1].kind = RGPU_ARG_INT; u.args[1].v.i = (int64_t)n;
    enc(&b, &u);
    rec_sync(&b);
    send_chunk(fd, b.p, b.len, 0, 2, 0);
    rgpu_buf_free(&b);
    rgpu_msg_header mh;
    uint8_t *p = expect_msg(fd, RGPU_MSG_NEED, &mh);   /* the prefetch asks for it */
    free(p);
    send_blob(fd, zeros, n);
    free(zeros);
    ck_assert_uint_eq(read_ack(fd), 2);
    expect_wait_error(fd, 1, RGPU_ERR_LIMIT, "op 0 (rgpu::upload)", "--max-session-bytes");
    close(fd);
    after_attack(5.0f, 250);
}
END_TEST

/* BLOB_PART pieces of n zero bytes (the first byte tag) named h; corrupt = 1
 * sends piece 1 before piece 0. */
static void send_parts(int fd, const rgpu_hash *h, size_t n, uint8_t tag, int corrupt) {
    uint8_t *piece = calloc(1, RGPU_BLOB_PIECE);
    size_t k = (n + RGPU_BLOB_PIECE - 1) / RGPU_BLOB_PIECE;
    for (size_t j = 0; j < k; j++) {
        size_t i = corrupt == 1 ? (j == 0 ? 1 : j == 1 ? 0 : j) : j;
        size_t off = i * RGPU_BLOB_PIECE, pn = n - off < RGPU_BLOB_PIECE ? n - off : RGPU_BLOB_PIECE;
        piece[0] = i == 0 ? tag : 0;
        rgpu_buf f = { 0 };
        ck_assert_int_eq(rgpu_frame_compress(piece, pn, 1, &f), RGPU_OK);
        uint8_t hdr[32];
        memcpy(hdr, h->b, 16);
        rgpu_st64(hdr + 16, n);
        rgpu_st64(hdr + 24, off);
        rgpu_status s = rgpu_wire_send(fd, RGPU_MSG_BLOB_PART, hdr, 32, f.p, f.len);
        rgpu_buf_free(&f);
        if (s) break;   /* the server ended the session */
    }
    free(piece);
}

/* Pieces: a blob over the session's room is skipped piece by piece, never
 * held; its UPLOAD fails with the limit named; pieces out of order and a
 * whole whose hash is wrong end the session. */
START_TEST(blob_parts_checked) {
    size_t big = 400u << 20, small = 9u << 20;
    uint8_t *z = calloc(1, big);
    z[0] = 5;
    rgpu_hash hb = rgpu_hash_bytes(z, big), hs = rgpu_hash_bytes(z, small);
    free(z);
    int fd = srv_session(&g_srv, 0, NULL, NULL);
    send_parts(fd, &hb, big, 5, 0);       /* 400 MiB into a 64 MiB session: skipped */
    send_parts(fd, &hs, small, 5, 0);     /* 9 MiB: kept */
    rgpu_buf b = { 0 };
    rgpu_record u = { .op = RGPU_OP_UPLOAD, .n_out = 1, .n_args = 2 };
    u.out[0] = vec_def(1, 2, (int64_t)(small / 4));
    u.args[0].kind = RGPU_ARG_HASH; u.args[0].v.h = hs;
    u.args[1].kind = RGPU_ARG_INT; u.args[1].v.i = (int64_t)small;
    enc(&b, &u);
    rec_sum(&b, 3, 1);
    rec_download(&b, 3);
    run_chunk(fd, &b, 0, 3);              /* no NEED: the pieces made the blob */
    uint8_t *res;
    size_t rn;
    ck_assert_int_eq(wait_result(fd, 2, NULL, 0, &res, &rn), RGPU_OK);
    float sum, want;
    uint32_t bits = 5;                    /* zeros but the first byte: the sum is that one denormal */
    memcpy(&want, &bits, 4);
    memcpy(&sum, res, 4);
    free(res);
    ck_assert_float_eq(sum, want);
    close(fd);
    long peak = srv_rss_kb(&g_srv, 1);
    ck_assert_msg(peak < 380 * 1024, "peak RSS %ld KiB: the refused blob was held", peak);
    /* out of order */
    fd = srv_session(&g_srv, 0, NULL, NULL);
    send_parts(fd, &hs, small, 5, 1);
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_SEQUENCE);
    /* a whole whose hash is not the one named */
    fd = srv_session(&g_srv, 0, NULL, NULL);
    rgpu_hash wrong = hs;
    wrong.b[0] ^= 1;
    send_parts(fd, &wrong, small, 5, 0);
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_BAD_CHECKSUM);
    after_attack(15.0f, 200);
}
END_TEST

/* Length fields are checked before anything is reserved: a CHUNK claiming
 * 16 GiB, a BLOB claiming 8 GiB (over --max-memory), a WAIT claiming 1 GiB. */
START_TEST(lengths_checked_before_reserving) {
    struct { int type; uint64_t len; int code; const char *names; } cases[] = {
        { RGPU_MSG_CHUNK, 16ull << 30, RGPU_ERR_TOO_LARGE, "--max-chunk" },
        { RGPU_MSG_BLOB, 8ull << 30, RGPU_ERR_LIMIT, "--max-memory" },
        { RGPU_MSG_WAIT, 1ull << 30, RGPU_ERR_TOO_LARGE, "--max-message" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int fd = srv_session(&g_srv, 0, NULL, NULL);
        uint8_t h[RGPU_WIRE_HEADER + 4096] = { 0 };
        rgpu_wire_header_encode(h, cases[i].type, cases[i].len);
        ck_assert_int_eq(write(fd, h, sizeof h), (ssize_t)sizeof h);
        char msg[512];
        ck_assert_int_eq(expect_error_msg(fd, msg, sizeof msg), cases[i].code);
        ck_assert_msg(strstr(msg, cases[i].names), "%s", msg);
    }
    after_attack(6.0f, 200);
}
END_TEST

/* DOWNLOADs nobody waits for: each result is held, counted, and once the
 * session's limit is reached the next fails (the server stays small). */
START_TEST(results_never_taken_are_bounded) {
    rgpu_buf b = { 0 };
    rec_empty(&b, vec_def(1, 2, 1 << 18));          /* 1 MiB */
    for (int i = 0; i < 100; i++) rec_download(&b, 1);
    rec_sync(&b);
    refused_at_wait(&b, 102, 101, RGPU_ERR_LIMIT, "rgpu::download", "--max-session-bytes");
    after_attack(7.0f, 250);
}
END_TEST

/* Messages piled up while the server waits for a blob it asked for. */
START_TEST(messages_deferred_behind_need_are_bounded) {
    int fd = srv_session(&g_srv, 0, NULL, NULL);
    rgpu_buf b = { 0 };
    uint8_t blob[16] = { 1 };
    rgpu_record u = { .op = RGPU_OP_UPLOAD, .n_out = 1, .n_args = 2 };
    u.out[0] = vec_def(1, 2, 4);
    u.args[0].kind = RGPU_ARG_HASH; u.args[0].v.h = rgpu_hash_bytes(blob, 16);
    u.args[1].kind = RGPU_ARG_INT; u.args[1].v.i = 16;
    enc(&b, &u);
    send_chunk(fd, b.p, b.len, 0, 1, 0);
    rgpu_buf_free(&b);
    rgpu_msg_header mh;
    free(expect_msg(fd, RGPU_MSG_NEED, &mh));
    uint8_t w[8] = { 0 };
    for (int i = 0; i < 5000; i++)
        if (rgpu_wire_send(fd, RGPU_MSG_WAIT, w, 8, NULL, 0)) break;
    char msg[512];
    ck_assert_int_eq(expect_error_msg(fd, msg, sizeof msg), RGPU_ERR_TOO_LARGE);
    ck_assert_msg(strstr(msg, "waits for a blob"), "%s", msg);
    after_attack(8.0f, 200);
}
END_TEST

/* The global limit counts every session, detached ones too, until freed. */
START_TEST(global_limit_counts_dropped_sessions) {
    srv s;
    const char *opts[] = { "--max-memory", "96M", "--grace", "60", NULL };
    srv_start(&s, opts);
    int fds[3];
    int st[3];
    char msg[3][512];
    for (int k = 0; k < 3; k++) {   /* 40 MiB each; the third passes 96 MiB */
        fds[k] = srv_session(&s, 0, NULL, NULL);
        rgpu_buf b = { 0 };
        rec_empty(&b, vec_def(1, 2, 10 << 20));
        rec_full(&b, 1, 1.0);
        rec_sync(&b);
        run_chunk(fds[k], &b, 0, 3);
        st[k] = wait_result(fds[k], 2, msg[k], sizeof msg[k], NULL, NULL);
        if (k < 2) close(fds[k]);   /* dropped: kept for --grace, still holding its memory */
    }
    ck_assert_int_eq(st[0], RGPU_OK);
    ck_assert_int_eq(st[1], RGPU_OK);
    ck_assert_int_eq(st[2], RGPU_ERR_LIMIT);
    ck_assert_msg(strstr(msg[2], "--max-memory"), "%s", msg[2]);
    close(fds[2]);
    ck_assert(srv_alive(&s));
    srv_stop(&s);
}
END_TEST

/* ---------------------------------------------------------------------------
 * 3. Protocol errors are errors */

/* A record cut short inside a frame whose checksum and hash are right: the
 * session ends with ERROR naming the record (it used to be taken for a
 * dropped link: kept for 300 s, the client resending forever). */
START_TEST(malformed_record_in_a_valid_frame) {
    uint64_t id;
    int fd = srv_session(&g_srv, 0, &id, NULL);
    rgpu_buf b = { 0 };
    rec_small(&b);
    size_t one = b.len;
    rec_small(&b);
    b.len = one + (b.len - one) / 2;   /* the second record cut in half */
    send_chunk(fd, b.p, b.len, 0, 2, 0);
    rgpu_buf_free(&b);
    char msg[512];
    ck_assert_int_eq(expect_error_msg(fd, msg, sizeof msg), RGPU_ERR_TRUNCATED);
    ck_assert_msg(strstr(msg, "record 1"), "%s", msg);
    /* and the session is gone, not waiting for a resume */
    fd = srv_connect(&g_srv);
    srv_hello(&g_srv, fd, RGPU_WIRE_VERSION, 0, NULL, id, NULL);
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_SESSION_LOST);
    after_attack(9.0f, 200);
}
END_TEST

/* A resume that arrives while the session is inside a long op waits for it
 * and gets the op's results. */
START_TEST(resume_during_a_long_op) {
    uint64_t id, applied;
    int fd = srv_session(&g_srv, 0, &id, NULL);
    rgpu_buf b = { 0 };
    rec_small(&b);
    rec_full(&b, 1, 0.5);
    int64_t sz = (int64_t)1 << 30, st = 0;   /* a 4 GiB read of 4 bytes: allowed, takes a while */
    rec_alias(&b, view_def(3, 2, 1, &sz, &st), 1);
    rec_sum(&b, 5, 3);
    rec_download(&b, 5);
    send_chunk(fd, b.p, b.len, 0, 5, 0);
    rgpu_buf_free(&b);
    usleep(100000);
    close(fd);                                /* the link drops mid-op */
    fd = srv_session(&g_srv, id, NULL, &applied);
    ck_assert_uint_eq(applied, 5);
    uint8_t *data;
    size_t n;
    char msg[512];
    ck_assert_int_eq(wait_result(fd, 4, msg, sizeof msg, &data, &n), RGPU_OK);
    ck_assert_uint_eq(n, 4);
    float f;
    memcpy(&f, data, 4);
    free(data);
    ck_assert_msg(f > 0.999f * (float)(1 << 29) && f < 1.001f * (float)(1 << 29), "sum %g", (double)f);
    close(fd);
    after_attack(10.0f, 200);
}
END_TEST

/* A chunk of long ops whose client is gone for good (longer than --grace,
 * here 1 s): the rest of the chunk is cancelled and the session ends; it
 * used to run to its end however long that took. */
START_TEST(long_chunk_cancelled_when_its_client_is_gone) {
    srv s;
    const char *opts[] = { "--grace", "1", NULL };
    srv_start(&s, opts);
    uint64_t id;
    int fd = srv_session(&s, 0, &id, NULL);
    rgpu_buf b = { 0 };
    rec_stride0_view(&b, 1, SZ1(1ll << 26));   /* 256 MiB read of 4 bytes: a few hundredths of a second each */
    for (int i = 0; i < 3000; i++) rec_sum(&b, 10 + 2 * (uint64_t)i, 3);   /* a minute or more in all */
    send_chunk(fd, b.p, b.len, 0, 3002, 0);
    rgpu_buf_free(&b);
    usleep(300000);
    double t0 = now_s();
    close(fd);
    while (now_s() - t0 < 20 && !log_count(&s, "the rest of it is cancelled")) usleep(20000);
    ck_assert_msg(log_count(&s, "the rest of it is cancelled"), "not cancelled (see %s)", s.log);
    ck_assert_msg(now_s() - t0 < 10, "cancelled after %.1f s", now_s() - t0);
    fd = srv_connect(&s);
    srv_hello(&s, fd, RGPU_WIRE_VERSION, 0, NULL, id, NULL);
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_SESSION_LOST);
    srv_stop(&s);
}
END_TEST

/* ---------------------------------------------------------------------------
 * 4. Before authentication */
START_TEST(handshake_deadline_silent_and_trickling) {
    int fd = srv_connect(&g_srv);
    double t0 = now_s();
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_TIMEOUT);
    ck_assert_msg(now_s() - t0 < 4, "took %.1f s", now_s() - t0);
    /* one byte every 100 ms keeps no per-read timer from firing */
    fd = srv_connect(&g_srv);
    uint8_t h[RGPU_WIRE_HEADER + 40] = { 0 };
    rgpu_wire_header_encode(h, RGPU_MSG_HELLO, 40);
    t0 = now_s();
    for (size_t i = 0; i < sizeof h; i++) {
        if (write(fd, h + i, 1) != 1) break;
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        if (poll(&pf, 1, 100) > 0) break;       /* the server answered */
    }
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_TIMEOUT);
    ck_assert_msg(now_s() - t0 < 4, "took %.1f s", now_s() - t0);
    after_attack(11.0f, 200);
}
END_TEST

START_TEST(connection_cap) {
    int fds[32], n = 0;
    char msg[512] = "";
    int code = 0;
    for (; n < 32; n++) {   /* sessions, so the handshake deadline does not close them */
        int fd = srv_connect(&g_srv);
        srv_hello_try(&g_srv, fd, RGPU_WIRE_VERSION, 0, NULL, 0, NULL);   /* a refused one may be closed already */
        rgpu_msg_header mh;
        uint8_t *p;
        ck_assert_int_eq(rgpu_wire_recv(fd, 1 << 20, &mh, &p), RGPU_OK);
        if (mh.type == RGPU_MSG_ERROR) {
            code = (int)rgpu_ld32(p);
            snprintf(msg, sizeof msg, "%.*s", (int)mh.len - 8, (char *)p + 8);
            free(p);
            close(fd);
            break;
        }
        free(p);
        fds[n] = fd;
    }
    ck_assert_int_eq(n, 11);   /* 12 connections: the honest one and 11 more */
    ck_assert_int_eq(code, RGPU_ERR_LIMIT);
    ck_assert_msg(strstr(msg, "--max-connections"), "%s", msg);
    for (int i = 0; i < n; i++) close(fds[i]);
    usleep(300000);
    close(srv_session(&g_srv, 0, NULL, NULL));   /* room again */
    after_attack(12.0f, 200);
}
END_TEST

/* ---------------------------------------------------------------------------
 * 5. Files: no data loss across runs */

/* Run the server binary with args; its exit status and stderr. */
static int run_server(const char *const *args, char *err, size_t errlen, double timeout) {
    const char *bin = getenv("RGPU_SERVER_BIN");
    char path[] = "/tmp/rgpu-test-err-XXXXXX";
    int efd = mkstemp(path);
    ck_assert(efd >= 0);
    const char *argv[32] = { bin };
    int n = 1;
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(efd, 2);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    double t0 = now_s();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now_s() - t0 > timeout) { kill(pid, SIGKILL); waitpid(pid, &st, 0); st = -1; break; }
        usleep(20000);
    }
    ssize_t r = pread(efd, err, errlen - 1, 0);
    err[r > 0 ? r : 0] = 0;
    close(efd);
    unlink(path);
    return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

START_TEST(one_server_per_journal_and_socket) {
    char err[2048], pid[32], sock2[160];
    snprintf(pid, sizeof pid, "pid %d", (int)g_srv.pid);
    snprintf(sock2, sizeof sock2, "%s/sock2", g_srv.dir);
    const char *a[] = { "--unix", sock2, "--token-file", g_srv.token_file, "--journal", g_srv.journal, NULL };
    ck_assert_int_eq(run_server(a, err, sizeof err, 10), 1);
    ck_assert_msg(strstr(err, "in use by another rgpu-server") && strstr(err, pid), "%s", err);
    char j2[160];
    snprintf(j2, sizeof j2, "%s/journal2", g_srv.dir);
    const char *b[] = { "--unix", g_srv.sock, "--token-file", g_srv.token_file, "--journal", j2, NULL };
    ck_assert_int_eq(run_server(b, err, sizeof err, 10), 1);
    ck_assert_msg(strstr(err, "another server is listening"), "%s", err);
    after_attack(13.0f, 200);   /* the first still owns both */
}
END_TEST

static void file_digest(const char *path, rgpu_hash *h, mode_t *mode) {
    struct stat st;
    ck_assert_msg(stat(path, &st) == 0, "%s missing", path);
    *mode = st.st_mode & 0777;
    FILE *f = fopen(path, "rb");
    uint8_t *buf = malloc((size_t)st.st_size + 1);
    ck_assert(fread(buf, 1, (size_t)st.st_size, f) == (size_t)st.st_size);
    fclose(f);
    *h = rgpu_hash_bytes(buf, (size_t)st.st_size);
    free(buf);
}

/* --record: a restarted server never overwrites an earlier trace; traces,
 * journals and their companions are 0600; a blob whose bytes don't match its
 * hash never reaches the trace. */
START_TEST(record_never_overwritten_and_private) {
    srv s;
    char rec[160], t1[200], t2[200];
    strcpy(rec, "/tmp/rgpu-test-rec-XXXXXX");
    ck_assert(mkdtemp(rec) != NULL);
    const char *opts[] = { "--record", rec, NULL };
    srv_start(&s, opts);
    int fd = srv_session(&s, 0, NULL, NULL);
    rgpu_buf b = { 0 };
    rec_small(&b);
    run_chunk(fd, &b, 0, 1);
    /* a BLOB whose hash is wrong: ERROR, and not in the trace */
    uint8_t data[64] = { 7 };
    rgpu_buf f = { 0 };
    ck_assert_int_eq(rgpu_frame_compress(data, sizeof data, 1, &f), RGPU_OK);
    rgpu_hash wrong = rgpu_hash_bytes(data, sizeof data);
    wrong.b[3] ^= 1;
    ck_assert_int_eq(rgpu_wire_send(fd, RGPU_MSG_BLOB, wrong.b, 16, f.p, f.len), RGPU_OK);
    rgpu_buf_free(&f);
    ck_assert_int_eq(expect_error(fd), RGPU_ERR_BAD_CHECKSUM);
    snprintf(t1, sizeof t1, "%s/session-1.rgt", rec);
    /* the journal of a live session is private too */
    fd = srv_session(&s, 0, NULL, NULL);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "test -z \"$(find '%s' '%s' -name 'session-*' -perm /077)\"", s.journal, rec);
    ck_assert_msg(system(cmd) == 0, "a trace or journal file is readable by others");
    close(fd);
    srv_stop(&s);
    rgpu_rgt *t;
    ck_assert_int_eq(rgpu_rgt_open(t1, &t), RGPU_OK);
    uint8_t *fr;
    size_t fn;
    ck_assert_int_eq(rgpu_rgt_get_blob(t, &wrong, &fr, &fn), RGPU_ERR_MISSING_BLOB);
    rgpu_rgt_close(t);
    rgpu_hash before, after;
    mode_t mode;
    file_digest(t1, &before, &mode);
    ck_assert_int_eq(mode, 0600);
    /* restarted on the same folder */
    srv_start(&s, opts);
    fd = srv_session(&s, 0, NULL, NULL);
    b = (rgpu_buf){ 0 };
    rec_small(&b);
    run_chunk(fd, &b, 0, 1);
    close(fd);
    srv_stop(&s);
    file_digest(t1, &after, &mode);
    ck_assert_msg(rgpu_hash_eq(&before, &after), "session-1.rgt of the first run was overwritten");
    snprintf(t2, sizeof t2, "%s/session-3.rgt", rec);   /* the first run had sessions 1 and 2 */
    file_digest(t2, &after, &mode);
    ck_assert_int_eq(mode, 0600);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", rec);
    ck_assert_int_eq(system(cmd), 0);
    after_attack(14.0f, 200);
}
END_TEST

/* A journal write that fails (here: a file-size limit, as a full disk
 * would) turns the journal off for that session, loudly; training goes on. */
/* 1 MiB of incompressible data uploaded through a raw session, summed and
 * downloaded: the session must answer right whatever happened to its files. */
static void upload_sum_download(const srv *s) {
    int fd = srv_session(s, 0, NULL, NULL);
    size_t n = 1 << 20;
    uint32_t *data = malloc(n);
    uint32_t x = 12345;
    for (size_t i = 0; i < n / 4; i++) { x = x * 1664525u + 1013904223u; data[i] = x; }
    rgpu_buf b = { 0 };
    rgpu_record u = { .op = RGPU_OP_UPLOAD, .n_out = 1, .n_args = 2 };
    u.out[0] = vec_def(1, 2, (int64_t)(n / 4));
    u.args[0].kind = RGPU_ARG_HASH; u.args[0].v.h = rgpu_hash_bytes(data, n);
    u.args[1].kind = RGPU_ARG_INT; u.args[1].v.i = (int64_t)n;
    enc(&b, &u);
    rec_sum(&b, 3, 1);
    rec_download(&b, 3);
    send_blob(fd, data, n);            /* pushed, as the client does */
    send_chunk(fd, b.p, b.len, 0, 3, 0);
    rgpu_buf_free(&b);
    ck_assert_uint_eq(read_ack(fd), 3);
    uint8_t *res;
    size_t rn;
    char msg[512];
    ck_assert_int_eq(wait_result(fd, 2, msg, sizeof msg, &res, &rn), RGPU_OK);
    ck_assert_uint_eq(rn, 4);
    free(res);
    free(data);
    close(fd);
}

/* Start s with extra options under a file-size limit (as a full disk would
 * fail its writes, with EFBIG instead of ENOSPC). */
static void srv_start_small_disk(srv *s, const char *const *extra) {
    struct rlimit old, lim = { 256 << 10, 256 << 10 };
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_IGN);            /* inherited: a write past the limit fails with EFBIG */
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    srv_start(s, extra);
    setrlimit(RLIMIT_FSIZE, &old);
}

/* A journal write that fails turns the journal off for that session,
 * loudly, and the client is told (NOTICE JOURNAL_OFF with the reason);
 * training goes on. */
START_TEST(journal_write_failure_keeps_the_session) {
    srv s;
    srv_start_small_disk(&s, NULL);
    g_notices = 0;
    upload_sum_download(&s);
    ck_assert_msg(log_count(&s, "WITHOUT a journal"), "no warning in %s", s.log);
    ck_assert_msg(g_notices == 1 && g_notice_code == RGPU_NOTICE_JOURNAL_OFF && g_notice_msg[0],
                  "%d notices, the last %d '%s'", g_notices, g_notice_code, g_notice_msg);
    srv_stop(&s);
}
END_TEST

/* A --record trace whose writes fail stops there, loudly, stays readable,
 * and the session goes on. */
START_TEST(record_write_failure_keeps_the_session) {
    srv s;
    char rec[160], path[200], err[2048];
    strcpy(rec, "/tmp/rgpu-test-rec-XXXXXX");
    ck_assert(mkdtemp(rec) != NULL);
    const char *opts[] = { "--record", rec, "--journal", "none", NULL };
    srv_start_small_disk(&s, opts);
    upload_sum_download(&s);
    ck_assert_msg(log_count(&s, "recording stopped"), "no warning in %s", s.log);
    srv_stop(&s);
    snprintf(path, sizeof path, "%s/session-1.rgt", rec);
    ck_assert_int_eq(run_tool("rgpu-trace", "info", path, err, sizeof err), 0);
    snprintf(path, sizeof path, "rm -rf '%s'", rec);
    ck_assert_int_eq(system(path), 0);
}
END_TEST

/* A compacted journal: the session's state checkpointed and its history
 * dropped; a server killed and restarted on it rebuilds the session from the
 * checkpoint (views, poison, a pending result and the upload cache
 * included); a checkpoint that does not load is SESSION_LOST, not a crash. */
static int log_count(const srv *s, const char *what) {
    FILE *f = fopen(s->log, "r");
    char line[1024];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strstr(line, what) != NULL;
    if (f) fclose(f);
    return n;
}

START_TEST(compacted_journal_rebuilds_the_session) {
    srv s;
    const char *opts[] = { "--journal-compact", "4K", "--grace", "60", NULL };
    srv_start(&s, opts);
    uint64_t id;
    int fd = srv_session(&s, 0, &id, NULL);
    uint64_t op = 0;
    static float data[32768];
    uint32_t x = 1;
    for (int k = 0; k < 8; k++) {   /* 8 chunks, each uploads 4 KiB (incompressible): a checkpoint every few */
        for (int i = 0; i < 1024; i++) {
            x = x * 1664525u + 1013904223u;
            data[i] = (float)(k * 1024 + i) + (float)(x >> 8) * 0x1p-30f;
        }
        rgpu_buf b = { 0 };
        rgpu_record u = { .op = RGPU_OP_UPLOAD, .n_out = 1, .n_args = 2 };
        u.out[0] = vec_def(100 + 2 * (uint64_t)k, 101 + 2 * (uint64_t)k, 1024);
        u.args[0].kind = RGPU_ARG_HASH; u.args[0].v.h = rgpu_hash_bytes(data, 4096);
        u.args[1].kind = RGPU_ARG_INT; u.args[1].v.i = 4096;
        enc(&b, &u);
        send_chunk(fd, b.p, b.len, op, 1, 0);
        rgpu_buf_free(&b);
        rgpu_msg_header mh;
        free(expect_msg(fd, RGPU_MSG_NEED, &mh));
        send_blob(fd, data, 4096);
        ck_assert_uint_eq(read_ack(fd), ++op);
    }
    float last[4];
    memcpy(last, (float[]){ data[0], data[2], data[4], data[6] }, sizeof last);
    /* a view, a poisoned tensor and a result not yet taken */
    rgpu_buf b = { 0 };
    int64_t sz = 4, st = 2;
    rec_alias(&b, view_def(200, 115, 1, &sz, &st), 114);            /* every other element of the last upload */
    int64_t big = (int64_t)1 << 62, zero = 0;
    rec_alias(&b, view_def(202, 115, 1, &big, &zero), 114);         /* poisoned */
    rec_download(&b, 200);
    run_chunk(fd, &b, op, 3);
    op += 3;
    /* one more upload, big enough that a checkpoint comes after all that */
    for (int i = 0; i < 32768; i++) { x = x * 1664525u + 1013904223u; data[i] = (float)(x >> 8); }
    b = (rgpu_buf){ 0 };
    rgpu_record u = { .op = RGPU_OP_UPLOAD, .n_out = 1, .n_args = 2 };
    u.out[0] = vec_def(300, 301, 32768);
    u.args[0].kind = RGPU_ARG_HASH; u.args[0].v.h = rgpu_hash_bytes(data, sizeof data);
    u.args[1].kind = RGPU_ARG_INT; u.args[1].v.i = (int64_t)sizeof data;
    enc(&b, &u);
    send_chunk(fd, b.p, b.len, op, 1, 0);
    rgpu_buf_free(&b);
    rgpu_msg_header mh;
    free(expect_msg(fd, RGPU_MSG_NEED, &mh));
    send_blob(fd, data, sizeof data);
    ck_assert_uint_eq(read_ack(fd), ++op);
    close(fd);
    /* the checkpoint is written right after the chunk's ACK */
    for (int i = 0; i < 500 && !log_count(&s, "journal compacted at op 12:"); i++) usleep(10000);
    ck_assert_msg(log_count(&s, "journal compacted at op 12:") == 1, "no checkpoint after the last chunk (see %s)", s.log);
    /* killed, restarted on the same folder */
    kill(s.pid, SIGKILL);
    int wst;
    waitpid(s.pid, &wst, 0);
    /* the offline tools say what it is instead of failing on it */
    char jpath[256], terr[2048];
    snprintf(jpath, sizeof jpath, "%s/session-%016llx.rgt", s.journal, (unsigned long long)id);
    ck_assert_int_eq(run_tool("rgpu-replay", "--quiet", jpath, terr, sizeof terr), 2);
    ck_assert_msg(strstr(terr, "compacted rgpu-server journal"), "%s", terr);
    srv s2 = s;
    const char *opts2[] = { "--unix", s.sock, "--backend", "cpu", "--token-file", s.token_file, "--journal", s.journal,
                            "--journal-compact", "4K", NULL };
    char err[2048];
    (void)err;
    unlink(s.sock);
    s2.pid = fork();
    if (s2.pid == 0) {
        if (!freopen(s.log, "a", stderr)) _exit(126);
        const char *argv[16] = { getenv("RGPU_SERVER_BIN") };
        for (int i = 0; opts2[i]; i++) argv[i + 1] = opts2[i];
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 1000 && access(s.sock, F_OK) != 0; i++) usleep(10000);
    /* the secret survived the restart in the journal: without it the session is refused, not rebuilt */
    uint8_t wrong[RGPU_SESSION_SECRET];
    memcpy(wrong, srv_secret_of(id), sizeof wrong);
    wrong[0] ^= 1;
    for (int k = 0; k < 2; k++) {
        uint8_t none[RGPU_SESSION_SECRET] = { 0 };
        fd = srv_connect(&s2);
        srv_hello(&s2, fd, RGPU_WIRE_VERSION, 0, NULL, id, k ? wrong : none);
        char why[512];
        ck_assert_int_eq(expect_error_msg(fd, why, sizeof why), RGPU_ERR_AUTH);
        ck_assert_msg(strstr(why, k ? "wrong session secret" : "no session secret"), "%s", why);
    }
    ck_assert_int_eq(log_count(&s2, "rebuilt from its journal"), 0);
    ck_assert_int_eq(access(jpath, F_OK), 0);
    uint64_t applied;
    fd = srv_session(&s2, id, NULL, &applied);
    ck_assert_uint_eq(applied, op);
    ck_assert_int_ge(log_count(&s2, "rebuilt from its journal"), 1);
    char msg[512];
    uint8_t *res;
    size_t rn;
    /* the pending error (the poisoned view) comes first, with the download's wait */
    ck_assert_int_eq(wait_result(fd, 10, msg, sizeof msg, &res, &rn), RGPU_ERR_TOO_LARGE);
    free(res);
    b = (rgpu_buf){ 0 };
    rec_download(&b, 200);
    rec_download(&b, 300);
    run_chunk(fd, &b, op, 2);
    ck_assert_int_eq(wait_result(fd, op, msg, sizeof msg, &res, &rn), RGPU_OK);
    ck_assert_uint_eq(rn, 16);
    float v[4];
    memcpy(v, res, 16);
    free(res);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(v[i], last[i]);
    ck_assert_int_eq(wait_result(fd, op + 1, msg, sizeof msg, &res, &rn), RGPU_OK);
    ck_assert_uint_eq(rn, sizeof data);
    ck_assert_int_eq(memcmp(res, data, sizeof data), 0);
    free(res);
    close(fd);
    srv_stop(&s2);
}
END_TEST

/* ---------------------------------------------------------------------------
 * 6. The token file is used or refused, never replaced */
START_TEST(token_file_refused_unless_ours_and_private) {
    char dir[] = "/tmp/rgpu-test-tok-XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    char tok[128], sock[128], jnl[128], err[2048], link[128];
    snprintf(tok, sizeof tok, "%s/token", dir);
    snprintf(sock, sizeof sock, "%s/sock", dir);
    snprintf(jnl, sizeof jnl, "%s/journal", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    const char *a[] = { "--unix", sock, "--token-file", tok, "--journal", jnl, NULL };
    struct { const char *content; mode_t mode; const char *why; } cases[] = {
        { "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n", 0644, "readable or writable by others" },
        { "not a token\n", 0600, "does not hold an rgpu token" },
    };
    for (size_t i = 0; i < 2; i++) {
        FILE *f = fopen(tok, "w");
        fputs(cases[i].content, f);
        fclose(f);
        chmod(tok, cases[i].mode);
        ck_assert_int_eq(run_server(a, err, sizeof err, 10), 1);
        ck_assert_msg(strstr(err, cases[i].why), "%s", err);
        char back[128] = "";
        f = fopen(tok, "r");
        ck_assert(fgets(back, sizeof back, f) != NULL);
        fclose(f);
        ck_assert_str_eq(back, cases[i].content);   /* untouched */
        unlink(tok);
    }
    /* a symbolic link to a good token is refused too */
    FILE *f = fopen(link, "w");
    fputs("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n", f);
    fclose(f);
    chmod(link, 0600);
    ck_assert_int_eq(symlink(link, tok), 0);
    ck_assert_int_eq(run_server(a, err, sizeof err, 10), 1);
    ck_assert_msg(strstr(err, "symbolic link"), "%s", err);
    unlink(tok);
    /* absent: created, 0600 */
    srv s;
    srv_start(&s, NULL);
    struct stat st;
    ck_assert_int_eq(stat(s.token_file, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    srv_stop(&s);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * 7. Crafted traces: the offline tools exit 2, never crash */
static void tool_path(const char *name, char *out, size_t n) {
    snprintf(out, n, "%s", getenv("RGPU_SERVER_BIN"));
    char *slash = strrchr(out, '/');
    snprintf(slash + 1, n - (size_t)(slash + 1 - out), "%s", name);
}

static int run_tool(const char *name, const char *arg1, const char *arg2, char *err, size_t errlen) {
    char bin[512];
    tool_path(name, bin, sizeof bin);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "timeout 60 '%s' %s '%s' > /dev/null 2> /tmp/rgpu-tool-err.%d", bin, arg1, arg2, (int)getpid());
    int st = system(cmd);
    snprintf(cmd, sizeof cmd, "/tmp/rgpu-tool-err.%d", (int)getpid());
    FILE *f = fopen(cmd, "r");
    size_t r = f ? fread(err, 1, errlen - 1, f) : 0;
    err[r] = 0;
    if (f) fclose(f);
    unlink(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void write_trace(const char *path, const rgpu_buf *raw, uint32_t count, int corrupt_frame) {
    rgpu_rgt *t;
    ck_assert_int_eq(rgpu_rgt_create(path, "test_hostile", &t), RGPU_OK);
    rgpu_buf f = { 0 };
    ck_assert_int_eq(rgpu_frame_compress(raw->p, raw->len, 1, &f), RGPU_OK);
    if (corrupt_frame) f.p[f.len - 2] ^= 0x55;
    rgpu_hash h = rgpu_hash_bytes(raw->p, raw->len);
    ck_assert_int_eq(rgpu_rgt_put_chunk(t, &h, 0, count, raw->len, f.p, f.len), RGPU_OK);
    rgpu_buf_free(&f);
    ck_assert_int_eq(rgpu_rgt_flush(t), RGPU_OK);
    rgpu_rgt_close(t);
}

START_TEST(crafted_traces_exit_2) {
    char dir[] = "/tmp/rgpu-test-rgt-XXXXXX";
    ck_assert(mkdtemp(dir) != NULL);
    char path[128], err[4096];
    /* the heap overflow's trace, its 4 GiB-temporaries relative, and a copy into a [2^62] view */
    int64_t big = (int64_t)1 << 62, zero = 0;
    for (int k = 0; k < 2; k++) {
        rgpu_buf b = { 0 };
        rec_small(&b);
        rec_alias(&b, view_def(3, 2, 1, &big, &zero), 1);
        if (k == 0) rec_download(&b, 3);
        else {
            rgpu_record c = { .op = RGPU_OP_COPY, .n_out = 1, .n_in = 1 };
            c.out[0] = existing(3);
            c.in[0] = 1;
            enc(&b, &c);
        }
        snprintf(path, sizeof path, "%s/crafted-%d.rgt", dir, k);
        write_trace(path, &b, 3, 0);
        rgpu_buf_free(&b);
        ck_assert_int_eq(run_tool("rgpu-replay", "--quiet", path, err, sizeof err), 2);
        ck_assert_msg(strstr(err, "malformed trace") && strstr(err, "rgpu::alias"), "%s", err);
        ck_assert_int_eq(run_tool("rgpu-diff", "--a cpu", path, err, sizeof err), 2);
        ck_assert_msg(strstr(err, "malformed trace"), "%s", err);
    }
    /* a chunk whose frame is corrupt: info says so */
    rgpu_buf b = { 0 };
    rec_small(&b);
    snprintf(path, sizeof path, "%s/corrupt.rgt", dir);
    write_trace(path, &b, 1, 1);
    rgpu_buf_free(&b);
    ck_assert_int_eq(run_tool("rgpu-trace", "info", path, err, sizeof err), 2);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("hostile");
    TCase *tc = add_tcase(s, "server", 120, setup, teardown);
    ADD_TESTS(tc, stride0_view_of_2_62_refused, stride0_download_over_the_session_limit,
                  absurd_work_refused_up_front, blob_bombs_are_not_inflated, lengths_checked_before_reserving,
                  blob_parts_checked, results_never_taken_are_bounded,
                  messages_deferred_behind_need_are_bounded, malformed_record_in_a_valid_frame,
                  resume_during_a_long_op, handshake_deadline_silent_and_trickling, connection_cap,
                  one_server_per_journal_and_socket, record_never_overwritten_and_private);
    TCase *own = add_tcase(s, "own server", 120, NULL, NULL);
    ADD_TESTS(own, global_limit_counts_dropped_sessions, journal_write_failure_keeps_the_session,
                   record_write_failure_keeps_the_session, compacted_journal_rebuilds_the_session,
                   long_chunk_cancelled_when_its_client_is_gone, token_file_refused_unless_ours_and_private,
                   crafted_traces_exit_2);
    return run_suite(s);
}
