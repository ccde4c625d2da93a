/* check_server.h — driving a real rgpu-server from a Check suite
 * (test_server.c, test_hostile.c): start $RGPU_SERVER_BIN on a private Unix
 * socket with a token file and a journal folder in a fresh temporary
 * directory, speak the wire protocol on raw connections (HELLO, CHUNK, BLOB,
 * WAIT), read its answers, and look at the process from outside (alive,
 * resident memory). Static inline functions: include once per program. */
#ifndef RGPU_CHECK_SERVER_H
#define RGPU_CHECK_SERVER_H

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

#include "recorder.h"

typedef struct srv {
    pid_t pid;
    char dir[64], sock[128], addr[160], token_file[128], journal[128], token[128], log[128];
} srv;

/* Start the server in a fresh directory with the common options (--unix,
 * --backend cpu, --token-file, --journal, log to DIR/log) and then extra
 * (NULL-terminated, may be NULL). Waits until its socket exists and reads
 * the token it wrote. */
static inline void srv_start(srv *s, const char *const *extra) {
    const char *bin = getenv("RGPU_SERVER_BIN");
    ck_assert_msg(bin != NULL, "set RGPU_SERVER_BIN");
    memset(s, 0, sizeof *s);
    strcpy(s->dir, "/tmp/rgpu-test-XXXXXX");
    ck_assert(mkdtemp(s->dir) != NULL);
    snprintf(s->sock, sizeof s->sock, "%s/sock", s->dir);
    snprintf(s->addr, sizeof s->addr, "unix:%s", s->sock);
    snprintf(s->token_file, sizeof s->token_file, "%s/token", s->dir);
    snprintf(s->journal, sizeof s->journal, "%s/journal", s->dir);
    snprintf(s->log, sizeof s->log, "%s/log", s->dir);
    const char *argv[64] = { bin, "--unix", s->sock, "--backend", "cpu", "--token-file", s->token_file,
                             "--journal", s->journal };
    int n = 9;
    for (int i = 0; extra && extra[i] && n < 62; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    s->pid = fork();
    if (s->pid == 0) {
        if (!freopen(s->log, "w", stderr)) _exit(126);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 1000 && access(s->sock, F_OK) != 0; i++) {
        int st;
        ck_assert_msg(waitpid(s->pid, &st, WNOHANG) == 0, "server exited at start (see %s)", s->log);
        usleep(10000);
    }
    ck_assert_msg(access(s->sock, F_OK) == 0, "server did not start");
    FILE *f = fopen(s->token_file, "r");
    ck_assert_msg(f != NULL, "no token file");
    ck_assert(fgets(s->token, sizeof s->token, f) != NULL);
    fclose(f);
    s->token[strcspn(s->token, "\n")] = 0;
    ck_assert_int_eq((int)strlen(s->token), 64);
    setenv("RGPU_TOKEN_FILE", s->token_file, 1);
}

/* True while the server process runs (it did not crash). */
static inline int srv_alive(const srv *s) {
    int st;
    return waitpid(s->pid, &st, WNOHANG) == 0;
}

static inline void srv_stop(srv *s) {
    ck_assert_msg(srv_alive(s), "the server died (see %s)", s->log);
    kill(s->pid, SIGTERM);
    int st;
    waitpid(s->pid, &st, 0);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* The server's resident memory, KiB (VmRSS), and its peak (VmHWM). */
static inline long srv_rss_kb(const srv *s, int peak) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)s->pid);
    FILE *f = fopen(path, "r");
    ck_assert(f != NULL);
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, peak ? "VmHWM:" : "VmRSS:", 6)) kb = atol(line + 6);
    fclose(f);
    return kb;
}

static inline int srv_connect(const srv *s) {
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, s->sock);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert(fd >= 0);
    ck_assert(connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    return fd;
}

/* The secrets of the sessions this program started (srv_session keeps each
 * WELCOME's), so that a resume by id carries the right one; servers restarted
 * on a journal keep them. */
static struct { uint64_t id; uint8_t secret[RGPU_SESSION_SECRET]; } g_secrets[256];
static int g_nsecrets;

static inline const uint8_t *srv_secret_of(uint64_t session) {
    for (int i = 0; i < g_nsecrets; i++)
        if (g_secrets[i].id == session) return g_secrets[i].secret;
    return NULL;
}

static inline void srv_keep_secret(uint64_t session, const uint8_t *secret) {
    if (srv_secret_of(session) || g_nsecrets == (int)(sizeof g_secrets / sizeof g_secrets[0])) return;
    g_secrets[g_nsecrets].id = session;
    memcpy(g_secrets[g_nsecrets++].secret, secret, RGPU_SESSION_SECRET);
}

/* HELLO with the given token (NULL: the server's), session and secret (NULL:
 * the one kept for that session, else zeros); the send's status (a server
 * that refuses at accept may have closed). */
static inline rgpu_status srv_hello_try(const srv *s, int fd, uint32_t version, int break_table, const char *token,
                                        uint64_t session, const uint8_t *secret) {
    rgpu_msg_hello m = { .version = version, .session = session };
    rgpu_op_table_hash(m.op_table);
    if (break_table) m.op_table[0] ^= 1;
    if (!token) token = s->token;
    m.token = (const uint8_t *)token;
    m.token_len = (uint32_t)strlen(token);
    if (!secret) secret = srv_secret_of(session);
    if (secret) memcpy(m.secret, secret, RGPU_SESSION_SECRET);
    return rgpu_msg_hello_send(fd, &m);
}

static inline void srv_hello(const srv *s, int fd, uint32_t version, int break_table, const char *token, uint64_t session,
                             const uint8_t *secret) {
    ck_assert_int_eq(srv_hello_try(s, fd, version, break_table, token, session, secret), RGPU_OK);
}

/* A raw session (new when session is 0, else resumed with its kept secret);
 * *applied from WELCOME. */
static inline int srv_session(const srv *s, uint64_t session, uint64_t *id, uint64_t *applied) {
    int fd = srv_connect(s);
    srv_hello(s, fd, RGPU_WIRE_VERSION, 0, NULL, session, NULL);
    rgpu_msg_header mh;
    uint8_t *p;
    ck_assert_int_eq(rgpu_wire_recv(fd, 1 << 20, &mh, &p), RGPU_OK);
    ck_assert_msg(mh.type == RGPU_MSG_WELCOME, "expected WELCOME, got %s%s%.200s", rgpu_msg_name(mh.type),
                  mh.type == RGPU_MSG_ERROR ? ": " : "", mh.type == RGPU_MSG_ERROR ? (char *)p + 8 : "");
    rgpu_msg_welcome w;
    ck_assert_int_eq(rgpu_msg_welcome_decode(p, mh.len, &w), RGPU_OK);
    srv_keep_secret(w.session, w.secret);
    if (id) *id = w.session;
    if (applied) *applied = w.applied;
    free(p);
    return fd;
}

/* NOTICEs (FORMAT.md §7.2) come between the answers the helpers below wait
 * for: each is skipped and the last one kept here for the test to look at. */
static int g_notice_code, g_notices;
static char g_notice_msg[512];
static inline bool took_notice(const rgpu_msg_header *mh, const uint8_t *p) {
    if (mh->type != RGPU_MSG_NOTICE) return false;
    rgpu_msg_notice m;
    ck_assert_int_eq(rgpu_msg_notice_decode(p, mh->len, &m), RGPU_OK);
    g_notice_code = (int)m.code;
    snprintf(g_notice_msg, sizeof g_notice_msg, "%.*s", (int)m.msg_len, m.msg);
    g_notices++;
    return true;
}

/* Read until ERROR (ACKs, NEEDs and NOTICEs skipped); its code, its text into msg
 * (when not NULL). Then the server must close: the fd is closed here. */
static inline int expect_error_msg(int fd, char *msg, size_t msglen) {
    for (;;) {
        rgpu_msg_header mh;
        uint8_t *p;
        rgpu_status s = rgpu_wire_recv(fd, 1 << 20, &mh, &p);
        ck_assert_msg(s == RGPU_OK, "no ERROR message, got status %s", rgpu_status_name(s));
        if (mh.type == RGPU_MSG_ACK || mh.type == RGPU_MSG_NEED || took_notice(&mh, p)) { free(p); continue; }
        ck_assert_msg(mh.type == RGPU_MSG_ERROR, "expected ERROR, got %s", rgpu_msg_name(mh.type));
        int code = (int)rgpu_ld32(p);
        if (msg) snprintf(msg, msglen, "%.*s", (int)(mh.len > 8 ? mh.len - 8 : 0), (char *)p + 8);
        free(p);
        uint8_t b;
        ck_assert(read(fd, &b, 1) <= 0);   /* EOF, or a reset when unread bytes remained */
        close(fd);
        return code;
    }
}

static inline int expect_error(int fd) { return expect_error_msg(fd, NULL, 0); }

/* A CHUNK message around raw record bytes; corrupt = 0 valid, 1 bad frame
 * magic, 2 bad checksum, 3 truncated frame, 4 wrong hash. */
static inline void send_chunk(int fd, const uint8_t *raw, size_t n, uint64_t first, uint32_t count, int corrupt) {
    rgpu_buf f = { 0 };
    ck_assert_int_eq(rgpu_frame_compress(raw, n, 1, &f), RGPU_OK);
    if (corrupt == 1) f.p[0] ^= 0xff;
    if (corrupt == 2) f.p[16] ^= 1;
    if (corrupt == 3) f.len -= 3;
    uint8_t hdr[32];
    rgpu_st64(hdr, first);
    rgpu_st32(hdr + 8, count);
    rgpu_st32(hdr + 12, 0);
    rgpu_hash h = rgpu_hash_bytes(raw, n);
    if (corrupt == 4) h.b[0] ^= 1;
    memcpy(hdr + 16, h.b, 16);
    ck_assert_int_eq(rgpu_wire_send(fd, RGPU_MSG_CHUNK, hdr, 32, f.p, f.len), RGPU_OK);
    rgpu_buf_free(&f);
}

/* A BLOB message: hash then the compressed frame of raw. */
static inline void send_blob(int fd, const void *raw, size_t n) {
    rgpu_buf f = { 0 };
    ck_assert_int_eq(rgpu_frame_compress(raw, n, 1, &f), RGPU_OK);
    rgpu_hash h = rgpu_hash_bytes(raw, n);
    ck_assert_int_eq(rgpu_wire_send(fd, RGPU_MSG_BLOB, h.b, 16, f.p, f.len), RGPU_OK);
    rgpu_buf_free(&f);
}

/* Next message of the given type (others than ACK/NEED/NOTICE fail the test). */
static inline uint8_t *expect_msg(int fd, int type, rgpu_msg_header *mh) {
    for (;;) {
        uint8_t *p;
        ck_assert_int_eq(rgpu_wire_recv(fd, 1 << 20, mh, &p), RGPU_OK);
        if (mh->type == type) return p;
        if (took_notice(mh, p)) { free(p); continue; }
        ck_assert_msg(mh->type == RGPU_MSG_ACK || mh->type == RGPU_MSG_NEED, "expected %s, got %s%s%.200s",
                      rgpu_msg_name(type), rgpu_msg_name(mh->type), mh->type == RGPU_MSG_ERROR ? ": " : "",
                      mh->type == RGPU_MSG_ERROR ? (char *)p + 8 : "");
        free(p);
    }
}

static inline uint64_t read_ack(int fd) {
    rgpu_msg_header mh;
    uint8_t *p;
    for (;;) {
        ck_assert_int_eq(rgpu_wire_recv(fd, 1 << 20, &mh, &p), RGPU_OK);
        if (!took_notice(&mh, p)) break;
        free(p);
    }
    ck_assert_int_eq(mh.type, RGPU_MSG_ACK);
    uint64_t a = rgpu_ld64(p);
    free(p);
    return a;
}

/* WAIT for op; the RESULT's status, its message into msg, data (malloc'd). */
static inline int wait_result(int fd, uint64_t op, char *msg, size_t msglen, uint8_t **data, size_t *n) {
    uint8_t b[8];
    rgpu_st64(b, op);
    ck_assert_int_eq(rgpu_wire_send(fd, RGPU_MSG_WAIT, b, 8, NULL, 0), RGPU_OK);
    rgpu_msg_header mh;
    uint8_t *p = expect_msg(fd, RGPU_MSG_RESULT, &mh);
    ck_assert_uint_eq(rgpu_ld64(p), op);
    int status = (int)rgpu_ld32(p + 8);
    uint32_t ml = rgpu_ld32(p + 24);
    if (msg) snprintf(msg, msglen, "%.*s", (int)ml, (char *)p + 28);
    if (data) {
        *n = mh.len - 28 - ml;
        *data = malloc(*n ? *n : 1);
        memcpy(*data, p + 28 + ml, *n);
    }
    free(p);
    return status;
}

/* ---------------------------------------------------------------------------
 * The honest session: the real recorder, kept open while a suite attacks the
 * server; its 4-float tensor x checks that it still computes right. */
static rgpu_client *g_honest;
static uint64_t g_x_tid;

/* sum(full(4, v) * 2) through the honest session, checked. */
static inline void honest_roundtrip(float v) {
    rgpu_record r = { .op = RGPU_OP_FULL, .n_out = 1, .n_args = 1 };
    r.out[0] = (rgpu_tdef){ .tid = g_x_tid, .flags = RGPU_TDEF_EXISTING };
    r.args[0].kind = RGPU_ARG_FLOAT; r.args[0].v.f = v;
    uint64_t idx;
    ck_assert_int_eq(rgpu_client_record(g_honest, &r, &idx), RGPU_OK);
    rgpu_record m = { .op = RGPU_OP_MUL_SCALAR, .n_out = 1, .n_in = 1, .n_args = 1 };
    m.out[0] = (rgpu_tdef){ .tid = g_x_tid, .flags = RGPU_TDEF_EXISTING };
    m.in[0] = g_x_tid;
    m.args[0].kind = RGPU_ARG_INT; m.args[0].v.i = 2;
    ck_assert_int_eq(rgpu_client_record(g_honest, &m, &idx), RGPU_OK);
    rgpu_record d = { .op = RGPU_OP_DOWNLOAD, .n_in = 1 };
    d.in[0] = g_x_tid;
    ck_assert_int_eq(rgpu_client_record(g_honest, &d, &idx), RGPU_OK);
    uint8_t *data;
    size_t n;
    char err[256];
    ck_assert_int_eq(rgpu_client_wait(g_honest, idx, &data, &n, err, sizeof err), RGPU_OK);
    ck_assert_uint_eq(n, 16);
    float f[4];
    memcpy(f, data, 16);
    free(data);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(f[i], 2 * v);
}

/* Connect the honest session to s (the token through RGPU_TOKEN_FILE) and
 * define x: tensor g_x_tid over storage g_x_tid + 1. */
static inline void honest_open(const srv *s) {
    char err[256] = "";
    ck_assert_msg(rgpu_client_connect(s->addr, NULL, &g_honest, err, sizeof err) == RGPU_OK, "%s", err);
    g_x_tid = rgpu_client_new_id(g_honest);
    rgpu_record r = { .op = RGPU_OP_EMPTY, .n_out = 1 };
    r.out[0] = (rgpu_tdef){ .tid = g_x_tid, .sid = rgpu_client_new_id(g_honest), .flags = RGPU_TDEF_NEW_STORAGE,
                            .dtype = RGPU_F32, .ndim = 1, .nbytes = 16, .sizes = { 4 }, .strides = { 1 } };
    uint64_t idx;
    ck_assert_int_eq(rgpu_client_record(g_honest, &r, &idx), RGPU_OK);
    honest_roundtrip(1.0f);
}

static inline void honest_close(void) {
    rgpu_client_close(g_honest);
    g_honest = NULL;
}

#endif
