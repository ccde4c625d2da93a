/* server.c — rgpu-server: accept clients, one thread per session, speak the
 * wire protocol (FORMAT.md), execute chunks on the chosen backend.
 *
 * A session's thread reads messages in order. CHUNK: decode and execute,
 * then ACK. BLOB: keep. WAIT: answer RESULT. An UPLOAD of an unknown blob
 * sends NEED and reads on until that BLOB arrives, deferring anything else
 * that comes meanwhile. Malformed input ends only that session (ERROR then
 * close); the server keeps serving the others. */
#include "session.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_MSG ((uint64_t)RGPU_MAX_FRAME)

static rgpu_backend *g_backend;
static bool g_quiet;
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_next_session = 1;
static volatile sig_atomic_t g_stop;
static const char *g_record_dir;      /* --record DIR: one .rgt per session */

static void logf_(const char *fmt, ...) {
    if (g_quiet) return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_log_mu);
    fprintf(stderr, "rgpu-server: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&g_log_mu);
    va_end(ap);
}

/* ---------------------------------------------------------------------------
 * A connection */
typedef struct deferred { struct deferred *next; rgpu_msg_header h; uint8_t *p; } deferred;

typedef struct conn {
    int fd;
    uint64_t id;
    rgpu_session *s;
    rgpu_rgt *rec;            /* --record: everything received, and the results sent */
    deferred *dq_head, *dq_tail;
} conn;

static rgpu_status send_error(conn *c, int code, const char *fmt, ...) {
    uint8_t buf[8 + 512];
    rgpu_st32(buf, (uint32_t)code);
    rgpu_st32(buf + 4, 0);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf((char *)buf + 8, 512, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if (n > 511) n = 511;
    logf_("session %llu: error %s: %s", (unsigned long long)c->id, rgpu_status_name(code), (char *)buf + 8);
    return rgpu_wire_send(c->fd, RGPU_MSG_ERROR, buf, 8 + (size_t)n, NULL, 0);
}

/* Read the next message: deferred ones first. */
static rgpu_status next_msg(conn *c, rgpu_msg_header *h, uint8_t **p) {
    if (c->dq_head) {
        deferred *d = c->dq_head;
        c->dq_head = d->next;
        if (!c->dq_head) c->dq_tail = NULL;
        *h = d->h; *p = d->p;
        free(d);
        return RGPU_OK;
    }
    return rgpu_wire_recv(c->fd, MAX_MSG, h, p);
}

static rgpu_status blob_from_msg(const uint8_t *p, uint64_t len, rgpu_hash *h, uint8_t **data, size_t *n) {
    if (len < 16) return RGPU_ERR_TRUNCATED;
    memcpy(h->b, p, 16);
    return rgpu_frame_decompress(p + 16, len - 16, RGPU_MAX_BLOB_RAW, data, n);
}

/* Session callback: an UPLOAD needs a blob we don't have. */
static rgpu_status fetch_blob(void *ud, const rgpu_hash *want, uint8_t **data, size_t *n) {
    conn *c = ud;
    rgpu_status s = rgpu_wire_send(c->fd, RGPU_MSG_NEED, want->b, 16, NULL, 0);
    if (s) return s;
    for (;;) {
        rgpu_msg_header h;
        uint8_t *p;
        if ((s = rgpu_wire_recv(c->fd, MAX_MSG, &h, &p))) return s;
        if (h.type == RGPU_MSG_BLOB) {
            rgpu_hash got;
            uint8_t *d;
            size_t dn;
            s = blob_from_msg(p, h.len, &got, &d, &dn);
            if (!s && c->rec) rgpu_rgt_put_blob(c->rec, &got, dn, p + 16, h.len - 16);
            free(p);
            if (s) return s;
            if (rgpu_hash_eq(&got, want)) {
                rgpu_hash real = rgpu_hash_bytes(d, dn);
                if (!rgpu_hash_eq(&real, want)) { free(d); return RGPU_ERR_BAD_CHECKSUM; }
                *data = d; *n = dn;
                return RGPU_OK;
            }
            if ((s = rgpu_session_put_blob(c->s, &got, d, dn))) return s;
            continue;
        }
        if (h.type == RGPU_MSG_ERROR || h.type == RGPU_MSG_BYE) { free(p); return RGPU_ERR_MISSING_BLOB; }
        deferred *dm = calloc(1, sizeof *dm);
        if (!dm) { free(p); return RGPU_ERR_NOMEM; }
        dm->h = h; dm->p = p;
        if (c->dq_tail) c->dq_tail->next = dm; else c->dq_head = dm;
        c->dq_tail = dm;
    }
}

static rgpu_status send_ack(conn *c) {
    uint8_t b[8];
    rgpu_st64(b, rgpu_session_applied(c->s));
    return rgpu_wire_send(c->fd, RGPU_MSG_ACK, b, 8, NULL, 0);
}

static rgpu_status handle_chunk(conn *c, const uint8_t *p, uint64_t len) {
    if (len < 32) return send_error(c, RGPU_ERR_TRUNCATED, "CHUNK shorter than its header"), RGPU_ERR_TRUNCATED;
    uint64_t first = rgpu_ld64(p);
    uint32_t count = rgpu_ld32(p + 8);
    if (rgpu_ld32(p + 12)) return send_error(c, RGPU_ERR_RESERVED, "CHUNK reserved field not zero"), RGPU_ERR_RESERVED;
    rgpu_hash h;
    memcpy(h.b, p + 16, 16);
    uint64_t applied = rgpu_session_applied(c->s);
    if (first + count <= applied && count) return RGPU_OK;   /* duplicate (resend): drop */
    if (first != applied)
        return send_error(c, RGPU_ERR_SEQUENCE, "CHUNK starts at op %llu, expected %llu",
                          (unsigned long long)first, (unsigned long long)applied), RGPU_ERR_SEQUENCE;
    uint8_t *raw;
    size_t n;
    rgpu_status s = rgpu_frame_decompress(p + 32, len - 32, RGPU_MAX_CHUNK_RAW, &raw, &n);
    if (s) return send_error(c, s, "CHUNK at op %llu: %s", (unsigned long long)first, rgpu_status_str(s)), s;
    rgpu_hash got = rgpu_hash_bytes(raw, n);
    if (!rgpu_hash_eq(&got, &h)) { free(raw); return send_error(c, RGPU_ERR_BAD_CHECKSUM, "CHUNK hash mismatch"), RGPU_ERR_BAD_CHECKSUM; }
    if (c->rec) rgpu_rgt_put_chunk(c->rec, &h, first, count, n, p + 32, len - 32);
    s = rgpu_session_run_chunk(c->s, raw, n, first, count);
    free(raw);
    if (s) return send_error(c, s, "CHUNK at op %llu: %s", (unsigned long long)first, rgpu_status_str(s)), s;
    if (c->rec) rgpu_rgt_flush(c->rec);   /* WAL, synchronous=NORMAL: a commit, no fsync */
    return send_ack(c);
}

static rgpu_status handle_wait(conn *c, const uint8_t *p, uint64_t len) {
    if (len != 8) return send_error(c, RGPU_ERR_BAD_MESSAGE, "WAIT payload is %llu bytes", (unsigned long long)len), RGPU_ERR_BAD_MESSAGE;
    uint64_t op = rgpu_ld64(p);
    int status;
    uint64_t err_op;
    char msg[256];
    uint8_t *data;
    size_t n;
    rgpu_status s = rgpu_session_take_result(c->s, op, &status, &err_op, msg, sizeof msg, &data, &n);
    if (s) return send_error(c, s, "WAIT for op %llu, only %llu applied", (unsigned long long)op,
                             (unsigned long long)rgpu_session_applied(c->s)), s;
    size_t ml = strlen(msg);
    uint8_t hdr[28 + 256];
    rgpu_st64(hdr, op);
    rgpu_st32(hdr + 8, (uint32_t)status);
    rgpu_st32(hdr + 12, 0);
    rgpu_st64(hdr + 16, err_op);
    rgpu_st32(hdr + 24, (uint32_t)ml);
    memcpy(hdr + 28, msg, ml);
    s = rgpu_wire_send(c->fd, RGPU_MSG_RESULT, hdr, 28 + ml, data, n);
    if (c->rec) {
        rgpu_rgt_put_result(c->rec, op, status, data, n);
        rgpu_rgt_flush(c->rec);
    }
    free(data);
    return s;
}

static bool handshake(conn *c) {
    rgpu_msg_header h;
    uint8_t *p;
    rgpu_status s = rgpu_wire_recv(c->fd, 1 << 16, &h, &p);
    if (s) {
        if (s != RGPU_ERR_CLOSED) send_error(c, s, "bad handshake: %s", rgpu_status_str(s));
        return false;
    }
    bool ok = false;
    uint8_t table[16];
    rgpu_op_table_hash(table);
    if (h.type != RGPU_MSG_HELLO || h.len < 40) {
        send_error(c, RGPU_ERR_BAD_MESSAGE, "expected HELLO, got %s", rgpu_msg_name(h.type));
    } else if (rgpu_ld32(p) != RGPU_FORMAT_VERSION) {
        send_error(c, RGPU_ERR_BAD_VERSION, "client speaks format %u, server %u", rgpu_ld32(p), RGPU_FORMAT_VERSION);
    } else if (memcmp(p + 4, table, 16) != 0) {
        send_error(c, RGPU_ERR_OP_TABLE, "client and server were built from different ops.def");
    } else {
        uint8_t w[72 + (RGPU_OP_COUNT + 7) / 8] = { 0 };
        rgpu_st32(w, RGPU_FORMAT_VERSION);
        memcpy(w + 4, table, 16);
        rgpu_st64(w + 20, c->id);
        rgpu_st64(w + 28, 0);
        snprintf((char *)w + 36, 32, "%s", g_backend->name);
        rgpu_st32(w + 68, RGPU_OP_COUNT);
        for (int i = 0; i < RGPU_OP_COUNT; i++)
            if (g_backend->supports(g_backend, i)) w[72 + i / 8] |= (uint8_t)(1u << (i % 8));
        ok = rgpu_wire_send(c->fd, RGPU_MSG_WELCOME, w, sizeof w, NULL, 0) == RGPU_OK;
    }
    free(p);
    return ok;
}

static void *session_main(void *arg) {
    conn *c = arg;
    c->s = rgpu_session_new(g_backend, NULL);
    if (!c->s) goto out;
    rgpu_session_set_fetch(c->s, fetch_blob, c);
    if (!handshake(c)) goto out;
    if (g_record_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/session-%llu.rgt", g_record_dir, (unsigned long long)c->id);
        if (rgpu_rgt_create(path, "rgpu-server --record", &c->rec)) {
            send_error(c, RGPU_ERR_DB, "cannot record the session: %s", rgpu_rgt_errmsg(NULL));
            goto out;
        }
        rgpu_rgt_set_meta(c->rec, "backend", g_backend->name);
        logf_("session %llu: recording to %s", (unsigned long long)c->id, path);
    }
    logf_("session %llu: started", (unsigned long long)c->id);
    for (;;) {
        rgpu_msg_header h;
        uint8_t *p;
        rgpu_status s = next_msg(c, &h, &p);
        if (s) {
            if (s != RGPU_ERR_CLOSED) send_error(c, s, "reading message: %s", rgpu_status_str(s));
            else logf_("session %llu: client went away", (unsigned long long)c->id);
            break;
        }
        switch (h.type) {
        case RGPU_MSG_CHUNK: s = handle_chunk(c, p, h.len); break;
        case RGPU_MSG_WAIT: s = handle_wait(c, p, h.len); break;
        case RGPU_MSG_BLOB: {
            rgpu_hash bh;
            uint8_t *d;
            size_t dn;
            s = blob_from_msg(p, h.len, &bh, &d, &dn);
            if (!s && c->rec) rgpu_rgt_put_blob(c->rec, &bh, dn, p + 16, h.len - 16);
            if (!s) s = rgpu_session_put_blob(c->s, &bh, d, dn);
            if (s) send_error(c, s, "BLOB: %s", rgpu_status_str(s));
            break;
        }
        case RGPU_MSG_CHUNK_REF:
            s = RGPU_ERR_UNSUPPORTED;
            send_error(c, s, "CHUNK_REF: this server keeps no chunk cache yet");
            break;
        case RGPU_MSG_BYE:
            s = RGPU_ERR_CLOSED;
            logf_("session %llu: bye", (unsigned long long)c->id);
            break;
        default:
            s = RGPU_ERR_BAD_MESSAGE;
            send_error(c, s, "unexpected %s message", rgpu_msg_name(h.type));
            break;
        }
        free(p);
        if (s) break;
    }
    {
        uint64_t a, pk;
        rgpu_session_memory(c->s, &a, &pk);
        logf_("session %llu: closed after %llu ops (peak %llu bytes)", (unsigned long long)c->id,
              (unsigned long long)rgpu_session_applied(c->s), (unsigned long long)pk);
    }
out:
    while (c->dq_head) { deferred *d = c->dq_head; c->dq_head = d->next; free(d->p); free(d); }
    rgpu_session_free(c->s);
    rgpu_rgt_close(c->rec);
    close(c->fd);
    free(c);
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Listening */
static int listen_tcp(const char *spec) {
    char host[256] = "127.0.0.1", port[32] = "7437";
    const char *colon = strrchr(spec, ':');
    if (colon) {
        size_t hl = (size_t)(colon - spec);
        if (hl >= sizeof host) return -1;
        if (hl) { memcpy(host, spec, hl); host[hl] = 0; }
        snprintf(port, sizeof port, "%s", colon + 1);
    } else {
        snprintf(port, sizeof port, "%s", spec);
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *res;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) { fprintf(stderr, "rgpu-server: --listen %s: %s\n", spec, gai_strerror(rc)); return -1; }
    int fd = socket(res->ai_family, res->ai_socktype | SOCK_CLOEXEC, res->ai_protocol);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 64) < 0) {
        fprintf(stderr, "rgpu-server: cannot listen on %s: %s\n", spec, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    return fd;
}

static int listen_unix(const char *path) {
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof sa.sun_path) { fprintf(stderr, "rgpu-server: --unix path too long\n"); return -1; }
    strcpy(sa.sun_path, path);
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    mode_t old = umask(0077);   /* the socket is for this user only */
    int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof sa);
    umask(old);
    if (rc < 0 || listen(fd, 64) < 0) {
        fprintf(stderr, "rgpu-server: cannot listen on unix:%s: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

static void on_signal(int sig) { (void)sig; g_stop = 1; }

static void usage(FILE *f) {
    fprintf(f,
        "usage: rgpu-server [--listen HOST:PORT] [--unix PATH] [--backend cpu|cuda|null|auto]\n"
        "                   [--record DIR] [--quiet]\n"
        "\n"
        "Executes rgpu op traces streamed by clients (import rgpu; RGPU_SERVER=...).\n"
        "\n"
        "  --listen HOST:PORT  TCP address (default 127.0.0.1:7437 when no --unix is given;\n"
        "                      the host defaults to 127.0.0.1: expose it through an SSH tunnel)\n"
        "  --unix PATH         also (or only) listen on a Unix socket, mode 0600\n"
        "  --backend NAME      cpu (reference), cuda, null (executes nothing, answers zeros:\n"
        "                      for measuring the client), auto (cuda when usable, else cpu;\n"
        "                      default)\n"
        "  --record DIR        write each session's trace (chunks, blobs, wait results) to\n"
        "                      DIR/session-N.rgt, replayable with rgpu-replay\n"
        "  --quiet             no log lines on stderr\n"
        "  --help              this text\n");
}

int main(int argc, char **argv) {
    const char *tcp = NULL, *unix_path = NULL, *backend = "auto";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--quiet")) g_quiet = true;
        else if (!strcmp(a, "--listen") && i + 1 < argc) tcp = argv[++i];
        else if (!strcmp(a, "--unix") && i + 1 < argc) unix_path = argv[++i];
        else if (!strcmp(a, "--backend") && i + 1 < argc) backend = argv[++i];
        else if (!strcmp(a, "--record") && i + 1 < argc) g_record_dir = argv[++i];
        else { fprintf(stderr, "rgpu-server: unknown or incomplete option '%s'\n", a); usage(stderr); return 2; }
    }
    if (!tcp && !unix_path) tcp = "127.0.0.1:7437";
    if (g_record_dir && mkdir(g_record_dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "rgpu-server: --record %s: %s\n", g_record_dir, strerror(errno));
        return 1;
    }

    char why[256] = "";
    g_backend = rgpu_backend_create(backend, why, sizeof why);
    if (!g_backend) {
        fprintf(stderr, "rgpu-server: --backend %s: %s\n", backend, why);
        return strncmp(why, "unknown", 7) ? 1 : 2;
    }
    if (why[0]) logf_("%s", why);
    if (!g_backend) { fprintf(stderr, "rgpu-server: cannot create backend\n"); return 1; }

    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = { .sa_handler = on_signal };
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    struct pollfd pf[2];
    int npf = 0;
    if (tcp) { int fd = listen_tcp(tcp); if (fd < 0) return 1; pf[npf++] = (struct pollfd){ .fd = fd, .events = POLLIN }; }
    if (unix_path) { int fd = listen_unix(unix_path); if (fd < 0) return 1; pf[npf++] = (struct pollfd){ .fd = fd, .events = POLLIN }; }
    logf_("listening on %s%s%s%s (backend %s, format %u, %d ops)", tcp ? tcp : "", tcp && unix_path ? " and " : "",
          unix_path ? "unix:" : "", unix_path ? unix_path : "", g_backend->name, RGPU_FORMAT_VERSION, RGPU_OP_COUNT);

    while (!g_stop) {
        int n = poll(pf, (nfds_t)npf, 500);
        if (n < 0) { if (errno == EINTR) continue; break; }
        for (int i = 0; i < npf; i++) {
            if (!(pf[i].revents & POLLIN)) continue;
            int fd = accept4(pf[i].fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0) continue;
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            conn *c = calloc(1, sizeof *c);
            if (!c) { close(fd); continue; }
            c->fd = fd;
            c->id = __atomic_fetch_add(&g_next_session, 1, __ATOMIC_RELAXED);
            pthread_t t;
            pthread_attr_t at;
            pthread_attr_init(&at);
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &at, session_main, c)) { close(fd); free(c); }
            pthread_attr_destroy(&at);
        }
    }
    for (int i = 0; i < npf; i++) close(pf[i].fd);
    if (unix_path) unlink(unix_path);
    logf_("stopped");
    return 0;
}
