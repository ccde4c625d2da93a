/* client.c — the recorder: open chunk, sender and receiver threads.
 *
 * Locking: one mutex (c->mu) guards every field below it in the struct. The
 * recording path holds it only to append encoded bytes; compression, hashing
 * and socket writes happen in the sender thread outside the lock. Only the
 * sender writes to the socket; only the receiver reads from it. The .rgt tee
 * has its own mutex (SQLite calls from sender and receiver).
 *
 * Resume: a sent chunk stays (as its exact frame) on the `sent` list until an
 * ACK or RESULT covers its last op. When the link drops (EOF, reset, a
 * message cut short), the receiver parks the sender, redials with backoff
 * for RGPU_RECONNECT_TIMEOUT seconds and sends HELLO naming the session, its
 * secret (from the first WELCOME: no other client can resume it) and the last
 * acknowledged op; WELCOME says which op the server applies next.
 * The receiver then requeues the sent chunks the server lacks, in order,
 * ahead of everything unsent, and a WAIT for every waiter still waiting, and
 * lets the sender go. Upload bytes stay until their UPLOAD is acknowledged, so
 * a NEED after a resume is answered. If resuming is impossible the client
 * dies with RGPU_ERR_SESSION_LOST naming the first op lost.
 *
 * Backlog: un-acknowledged chunk bytes (queued and sent) are bounded by
 * RGPU_MAX_UNACKED (default 64 MiB). The server ACKs every chunk it applies,
 * so no extra request is needed: rgpu_client_throttle, called by the
 * recording thread after recording, closes the open chunk and blocks until
 * ACKs bring the backlog under the bound (at most RGPU_WAIT_TIMEOUT). */
#include "recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#ifdef SOCK_CLOEXEC
#define RGPU_HAVE_SOCK_CLOEXEC 1
#else
#define SOCK_CLOEXEC 0
#endif

/* Error texts are built with snprintf into fixed buffers; cutting a long one
 * short is intended. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#define BYE_WAIT_S 2.0   /* seconds a close waits at most for the server's BYE (FORMAT.md §7.2) */

/* An item for the sender, in send order. */
enum { ITEM_CHUNK = 1, ITEM_MSG = 2, ITEM_NEED = 3, ITEM_RGT_BLOB = 4, ITEM_PUSH = 5 };
typedef struct item {
    struct item *next;
    int kind;
    rgpu_buf buf;            /* CHUNK: raw records until compressed; MSG: payload */
    int msg_type;            /* MSG */
    uint64_t first_op;       /* CHUNK */
    uint32_t count;          /* CHUNK */
    rgpu_hash hash;          /* NEED, RGT_BLOB, PUSH; CHUNK: hash of the raw records */
    rgpu_buf frame;          /* CHUNK: the compressed frame, kept for a resend */
    bool teed;               /* CHUNK: already in the .rgt tee */
    uint64_t push_n;         /* PUSH: its blob's bytes, counted in the backlog until sent */
} item;

typedef struct blob {
    struct blob *next;
    rgpu_hash hash;
    uint8_t *data;
    size_t n;
    uint64_t op_index;       /* the UPLOAD record; freed once the server applied it */
    bool need_rgt;           /* not yet written into the .rgt tee */
    bool pinned;             /* kept for the session: a template, or an upload inside one */
    bool tpl;                /* registered with rgpu_client_put_blob (counted once) */
} blob;

typedef struct waiter {
    struct waiter *next;
    uint64_t op;
    bool done;
    int status;
    char *msg;
    uint8_t *data;
    size_t n;
} waiter;

/* A span of the client's own timeline (RGPU_PROFILE=DIR): what, when
 * (CLOCK_MONOTONIC ns), and an op index or a record count. */
typedef struct cspan { const char *what; uint64_t t0, t1, a, b; } cspan;

struct rgpu_client {
    int fd;
    pthread_t sender, receiver;
    bool threads_started;
    rgpu_server_info info;
    uint8_t secret[RGPU_SESSION_SECRET];   /* the session's, from WELCOME: a resume carries it */
    rgpu_rgt *rgt;
    pthread_mutex_t rgt_mu;
    char address[512];
    pid_t ssh_pid;              /* ssh://: the ssh process carrying the link (0: none) */
    int ssh_err;                /* ... and its stderr, a temporary file (0: none) */
    char token[1024];           /* given at connect; "" = look it up at each (re)connect */
    double reconnect_timeout;   /* seconds; 0 = no resume */
    uint64_t max_unacked;

    pthread_mutex_t mu;
    pthread_cond_t cv_send, cv_wait;
    bool closing, dead;
    bool broken;             /* link lost: the receiver is reconnecting, the sender parked */
    bool sending;            /* the sender is inside send_item (using fd) */
    item *in_flight;         /* the item it is sending */
    int dead_status;
    char dead_msg[1024];
    rgpu_buf cur;            /* open chunk */
    uint64_t cur_first;
    /* RGPU_PROFILE=DIR: spans of waits and of each chunk's recording, written
     * to DIR/client-<pid>.json at close (mu) */
    char prof_dir[4096];
    cspan *spans;
    size_t nspans, capspans;
    uint32_t cur_count;
    struct timespec cur_t0;
    uint64_t drained_ns;     /* when a wait for the last recorded op returned (0: never): the server idle since */
    uint64_t next_op, next_id, acked;
    item *q_head, *q_tail;
    item *sent_head, *sent_tail;   /* sent chunks not yet acknowledged, in op order */
    uint64_t backlog;        /* bytes of chunks queued (raw) or sent (frame), not acknowledged */
    blob *blobs;
    /* Blobs pushed in this session (so the server holds them, or NEEDs them
     * back): a FIFO ring of hash prefixes bounded like the server's upload
     * cache, so a repeated upload is sent by hash only. */
    struct { uint64_t key, n; } *known;
    size_t known_cap, known_len, known_head;
    uint64_t known_bytes;
    char journal[320];       /* the session's journal on the server: "on", "off: why", "none" (NOTICE) */
    bool journal_news;       /* it turned off and the program has not been told (rgpu_client_take_notice) */
    waiter *waiters;
    uint64_t *frees;
    size_t nfree, capfree;
    rgpu_client_stats st;

    /* capture (atomics, no lock): threads capturing now, this client's
     * serial (a thread's capture belongs to one client), local id counter */
    uint32_t ncapture;
    uint64_t serial;
    uint64_t next_local;
};

/* A thread's capture: the records it made since capture_begin. Only that
 * thread touches it, so no lock. */
typedef struct capture {
    uint64_t serial;
    rgpu_buf buf;
    uint64_t frees[RGPU_CAPTURE_FREE_BATCH];
    size_t nfree;
} capture;

static _Thread_local capture *t_cap;
static uint64_t g_serial;

/* The calling thread's capture for c, or NULL. One relaxed load when no
 * thread captures: the recording path pays nothing more. */
static inline capture *capturing(const rgpu_client *c) {
    if (!__atomic_load_n(&c->ncapture, __ATOMIC_RELAXED)) return NULL;
    capture *k = t_cap;
    return (k && k->serial == c->serial) ? k : NULL;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static double env_seconds(const char *name, double dflt) {
    const char *e = getenv(name);
    if (!e || !*e) return dflt;
    char *end;
    double t = strtod(e, &end);
    return (end != e && t >= 0) ? t : dflt;
}

static double mono_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Portability: the client (recorder/, trace-format/, the extension) is
 * POSIX, so that it builds on a macOS laptop too. There, no SOCK_CLOEXEC
 * (set with fcntl), no MSG_NOSIGNAL (SO_NOSIGPIPE on the socket instead, see
 * wire.c), and condition variables only wait on the realtime clock (the
 * monotonic deadlines used here are converted). */
static int cloexec(int fd) {
#ifndef RGPU_HAVE_SOCK_CLOEXEC
    if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
#endif
#ifdef SO_NOSIGPIPE
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
    return fd;
}

#ifdef __APPLE__
#define RGPU_COND_MONOTONIC 0
#else
#define RGPU_COND_MONOTONIC 1
#endif

/* pthread_cond_timedwait until a CLOCK_MONOTONIC deadline. */
static int cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, const struct timespec *mono) {
#if RGPU_COND_MONOTONIC
    return pthread_cond_timedwait(cv, mu, mono);
#else
    struct timespec now, rt;
    clock_gettime(CLOCK_MONOTONIC, &now);
    clock_gettime(CLOCK_REALTIME, &rt);
    long long ns = (long long)(mono->tv_sec - now.tv_sec) * 1000000000LL + (mono->tv_nsec - now.tv_nsec);
    if (ns < 0) ns = 0;
    rt.tv_sec += (time_t)(ns / 1000000000LL);
    rt.tv_nsec += (long)(ns % 1000000000LL);
    if (rt.tv_nsec >= 1000000000L) { rt.tv_sec++; rt.tv_nsec -= 1000000000L; }
    return pthread_cond_timedwait(cv, mu, &rt);
#endif
}

static struct timespec deadline_in(double s) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += (time_t)s;
    dl.tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
    if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
    return dl;
}

/* ---------------------------------------------------------------------------
 * Connection */
/* ssh:// links: the user's own OpenSSH (RGPU_SSH replaces the command)
 * runs `rgpu-server --stdio` on the host (RGPU_REMOTE_SERVER replaces the
 * path), and the protocol goes over its stdin/stdout: one end of a socket
 * pair here, so the rest of the client sees a socket as for TCP. Its stderr
 * goes to a temporary file, whose last line is named in connection errors. */
static void ssh_stop(rgpu_client *c, double until) {
    if (c->ssh_pid > 0) {
        /* after an orderly close ssh ends by itself once the host end has
         * (until: a monotonic deadline); a link given up is cut at once */
        pid_t r;
        while ((r = waitpid(c->ssh_pid, NULL, WNOHANG)) == 0 && mono_now() < until) usleep(2000);
        if (r == 0) {
            kill(c->ssh_pid, SIGTERM);
            waitpid(c->ssh_pid, NULL, 0);
        }
        c->ssh_pid = 0;
    }
    if (c->ssh_err > 0) { close(c->ssh_err); c->ssh_err = 0; }
}

/* ssh's last line on stderr, for an error message ("" when none). */
static void ssh_errline(const rgpu_client *c, char *out, size_t n) {
    out[0] = 0;
    if (c->ssh_err <= 0) return;
    char buf[2048];
    ssize_t r = pread(c->ssh_err, buf, sizeof buf - 1, 0);
    if (r <= 0) return;
    buf[r] = 0;
    while (r > 0 && (buf[r - 1] == '\n' || buf[r - 1] == '\r')) buf[--r] = 0;
    char *line = strrchr(buf, '\n');
    snprintf(out, n, "%s", line ? line + 1 : buf);
}

static int dial_ssh(rgpu_client *c, const char *spec, char *err, size_t errlen) {
    ssh_stop(c, 0);
    char target[300], port[16] = "", cmd[600], opt_to[64];
    snprintf(target, sizeof target, "%s", spec);
    char *colon = strrchr(target, ':');
    if (colon) { snprintf(port, sizeof port, "%s", colon + 1); *colon = 0; }
    if (!target[0] || strchr(target, '/') || target[0] == '-') {
        set_err(err, errlen, "bad server address 'ssh://%s' (want ssh://[user@]host[:port])", spec);
        return -1;
    }
    const char *remote = getenv("RGPU_REMOTE_SERVER");
    snprintf(cmd, sizeof cmd, "%s --stdio", remote && *remote ? remote : "rgpu-server");
    const char *to = getenv("RGPU_CONNECT_TIMEOUT");
    snprintf(opt_to, sizeof opt_to, "ConnectTimeout=%d", to && atoi(to) > 0 ? atoi(to) : 30);
    char sshcmd[512];
    const char *rs = getenv("RGPU_SSH");
    snprintf(sshcmd, sizeof sshcmd, "%s", rs && *rs ? rs : "ssh");
    char *argv[48];
    int n = 0;
    for (char *tok = strtok(sshcmd, " \t"); tok && n < 32; tok = strtok(NULL, " \t")) argv[n++] = tok;
    if (!n) argv[n++] = "ssh";
    argv[n++] = "-T";                            /* no terminal: a byte stream */
    argv[n++] = "-o"; argv[n++] = "BatchMode=yes";   /* no password prompt nobody would see */
    argv[n++] = "-o"; argv[n++] = opt_to;
    if (port[0]) { argv[n++] = "-p"; argv[n++] = port; }
    argv[n++] = target;
    argv[n++] = cmd;
    argv[n] = NULL;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) || cloexec(sv[0]) < 0 || cloexec(sv[1]) < 0) {
        set_err(err, errlen, "socketpair: %s", strerror(errno));
        return -1;
    }
    char ep[] = "/tmp/rgpu-ssh-XXXXXX";
    int ef = mkostemp(ep, O_CLOEXEC);
    if (ef >= 0) unlink(ep);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
    if (ef >= 0) posix_spawn_file_actions_adddup2(&fa, ef, 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(sv[1]);
    if (rc) {
        set_err(err, errlen, "cannot run '%s' for ssh://%s: %s (RGPU_SSH)", argv[0], spec, strerror(rc));
        close(sv[0]);
        if (ef >= 0) close(ef);
        return -1;
    }
    c->ssh_pid = pid;
    c->ssh_err = ef > 0 ? ef : 0;
    return sv[0];
}

/* After a failed handshake over ssh: wait for ssh to end (it says why on
 * stderr as it exits) and append its last line to err. */
static void ssh_note(rgpu_client *c, char *err, size_t errlen) {
    if (c->ssh_pid <= 0) return;
    pid_t r = 0;
    int ws = 0;
    for (int i = 0; i < 50 && (r = waitpid(c->ssh_pid, &ws, WNOHANG)) == 0; i++) usleep(20000);
    if (r == c->ssh_pid) c->ssh_pid = -1;   /* reaped */
    char line[400];
    ssh_errline(c, line, sizeof line);
    size_t l = strlen(err);
    if (line[0]) snprintf(err + l, errlen > l ? errlen - l : 0, " (ssh: %s)", line);
    l = strlen(err);
    if (r > 0 && WIFEXITED(ws) && WEXITSTATUS(ws) == 127)   /* the remote shell found no such command */
        snprintf(err + l, errlen > l ? errlen - l : 0, "; no rgpu-server on the host's PATH (install it there, "
                 "or name it with RGPU_REMOTE_SERVER)");
}

/* RGPU_CONNECT_TIMEOUT (seconds, default 30): a connect, and a handshake,
 * take no longer (an unreachable host or a server that never answers is an
 * error in bounded time, not a hang). */
static double connect_timeout_s(void) {
    const char *e = getenv("RGPU_CONNECT_TIMEOUT");
    double t = e ? strtod(e, NULL) : 0;
    return t > 0 ? t : 30.0;
}

/* connect(2) that gives up after `to` seconds (errno ETIMEDOUT). */
static int connect_within(int fd, const struct sockaddr *sa, socklen_t len, double to) {
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int rc = connect(fd, sa, len);
    if (rc < 0 && errno == EINPROGRESS) {
        struct pollfd pf = { .fd = fd, .events = POLLOUT };
        int pr;
        do pr = poll(&pf, 1, (int)(to * 1000)); while (pr < 0 && errno == EINTR);
        if (pr == 0) { errno = ETIMEDOUT; rc = -1; }
        else {
            int e = 0;
            socklen_t el = sizeof e;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
            if (e) { errno = e; rc = -1; } else rc = 0;
        }
    }
    int saved = errno;
    fcntl(fd, F_SETFL, fl);
    errno = saved;
    return rc;
}

static int dial(rgpu_client *c, const char *address, char *err, size_t errlen) {
    int fd = -1;
    if (strncmp(address, "ssh://", 6) == 0) return dial_ssh(c, address + 6, err, errlen);
    if (strncmp(address, "unix:", 5) == 0) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(address + 5) >= sizeof sa.sun_path) { set_err(err, errlen, "unix socket path too long"); return -1; }
        strcpy(sa.sun_path, address + 5);
        fd = cloexec(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            set_err(err, errlen, "cannot connect to %s: %s", address, strerror(errno));
            if (fd >= 0) close(fd);
            return -1;
        }
        return fd;
    }
    char host[256];
    const char *colon = strrchr(address, ':');
    if (!colon || colon == address || (size_t)(colon - address) >= sizeof host) {
        set_err(err, errlen, "bad server address '%s' (want HOST:PORT or unix:PATH)", address);
        return -1;
    }
    memcpy(host, address, (size_t)(colon - address));
    host[colon - address] = 0;
    if (host[0] == '[') { memmove(host, host + 1, strlen(host)); host[strcspn(host, "]")] = 0; }
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res, *ai;
    int rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc) { set_err(err, errlen, "cannot resolve %s: %s", address, gai_strerror(rc)); return -1; }
    double to = connect_timeout_s();
    for (ai = res; ai; ai = ai->ai_next) {
        fd = cloexec(socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
        if (fd < 0) continue;
        if (connect_within(fd, ai->ai_addr, ai->ai_addrlen, to) == 0) break;
        close(fd); fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) { set_err(err, errlen, "cannot connect to %s: %s", address, strerror(errno)); return -1; }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* The token for HELLO: RGPU_TOKEN, else the file RGPU_TOKEN_FILE, else the
 * server's default token file if it exists. Read at every (re)connect, so a
 * restarted server's new token is picked up. Returns its length (0: none). */
static size_t read_token(const char *given, char *out, size_t cap) {
    if (given && *given) { snprintf(out, cap, "%s", given); return strlen(out); }
    const char *t = getenv("RGPU_TOKEN");
    if (t && *t) { snprintf(out, cap, "%s", t); return strlen(out); }
    char path[1024];
    const char *f = getenv("RGPU_TOKEN_FILE");
    if (f && *f) snprintf(path, sizeof path, "%s", f);
    else {
        const char *x = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
        if (x && x[0] == '/') snprintf(path, sizeof path, "%s/rgpu/token", x);
        else if (home && *home) snprintf(path, sizeof path, "%s/.local/state/rgpu/token", home);
        else return 0;
    }
    FILE *fp = fopen(path, "r");
    if (!fp) return 0;
    size_t n = fread(out, 1, cap - 1, fp);
    fclose(fp);
    out[n] = 0;
    out[strcspn(out, "\r\n \t")] = 0;
    return strlen(out);
}

/* HELLO, then WELCOME (rgpu_msg.h). secret: in, the session's (zeros for a
 * new session); out, WELCOME's. On an ERROR reply, returns its code (err:
 * the server's message). */
static rgpu_status handshake_(int fd, const char *token, uint64_t session, uint8_t secret[RGPU_SESSION_SECRET],
                              uint64_t last_ack, rgpu_server_info *info, uint64_t *applied, char *err, size_t errlen);

/* The handshake within RGPU_CONNECT_TIMEOUT: the socket's timeouts are set
 * for it and cleared after (a WAIT may then take as long as its op). */
static rgpu_status handshake(int fd, const char *token, uint64_t session, uint8_t secret[RGPU_SESSION_SECRET],
                             uint64_t last_ack, rgpu_server_info *info, uint64_t *applied, char *err, size_t errlen) {
    double to = connect_timeout_s();
    struct timeval tv = { (time_t)to, (suseconds_t)((to - (double)(time_t)to) * 1e6) }, zero = { 0, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    rgpu_status s = handshake_(fd, token, session, secret, last_ack, info, applied, err, errlen);
    if (s == RGPU_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        s = RGPU_ERR_TIMEOUT;
        set_err(err, errlen, "no answer to the handshake within %g s (RGPU_CONNECT_TIMEOUT)", to);
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &zero, sizeof zero);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &zero, sizeof zero);
    return s;
}

static rgpu_status handshake_(int fd, const char *token, uint64_t session, uint8_t secret[RGPU_SESSION_SECRET],
                              uint64_t last_ack, rgpu_server_info *info, uint64_t *applied, char *err, size_t errlen) {
    char tok[RGPU_MAX_TOKEN_LEN] = { 0 };
    rgpu_msg_hello hello = { .version = RGPU_WIRE_VERSION, .session = session, .last_ack = last_ack,
                             .token = (const uint8_t *)tok, .has_sw_version = true,   /* this client's version */
                             .sw_version_len = (uint8_t)strlen(RGPU_VERSION), .sw_version = RGPU_VERSION };
    rgpu_op_table_hash(hello.op_table);
    memcpy(hello.secret, secret, RGPU_SESSION_SECRET);
    hello.token_len = (uint32_t)read_token(token, tok, sizeof tok);
    rgpu_status s = rgpu_msg_hello_send(fd, &hello);
    if (s) { set_err(err, errlen, "handshake: %s", rgpu_status_str(s)); return s; }
    rgpu_msg_header mh;
    uint8_t *p;
    if ((s = rgpu_wire_recv(fd, 1 << 20, &mh, &p))) {
        set_err(err, errlen, "handshake: %s", rgpu_status_str(s));
        return s;
    }
    if (mh.type == RGPU_MSG_ERROR) {
        rgpu_msg_error e;
        int code = rgpu_msg_error_decode(p, mh.len, &e) ? RGPU_ERR_BAD_MESSAGE : (int)e.code;
        set_err(err, errlen, "server refused: %.*s", (int)(e.msg_len < 400 ? e.msg_len : 400), e.msg ? e.msg : "");
        if (code == RGPU_ERR_BAD_VERSION || code == RGPU_ERR_OP_TABLE) {   /* name this side too */
            size_t l = strlen(err);
            snprintf(err + l, errlen > l ? errlen - l : 0, " [this client: rgpu %s, wire protocol %u, trace format %u, %d ops]",
                     RGPU_VERSION, RGPU_WIRE_VERSION, RGPU_FORMAT_VERSION, RGPU_OP_COUNT);
        }
        free(p);
        return code ? code : RGPU_ERR_BAD_MESSAGE;
    }
    rgpu_msg_welcome w;
    if (mh.type != RGPU_MSG_WELCOME || rgpu_msg_welcome_decode(p, mh.len, &w)) {
        free(p);
        set_err(err, errlen, mh.type == RGPU_MSG_WELCOME ? "handshake: malformed WELCOME"
                                                         : "handshake: expected WELCOME, got %s", rgpu_msg_name(mh.type));
        return RGPU_ERR_BAD_MESSAGE;
    }
    info->session = w.session;
    memcpy(secret, w.secret, RGPU_SESSION_SECRET);
    *applied = w.applied;
    snprintf(info->backend, sizeof info->backend, "%s", w.backend);
    size_t nb = ((size_t)w.nbits + 7) / 8;
    memcpy(info->supports, w.bitmap, nb < sizeof info->supports ? nb : sizeof info->supports);
    snprintf(info->version, sizeof info->version, "?");
    if (w.has_sw_version && w.sw_version_len < sizeof info->version)
        snprintf(info->version, sizeof info->version, "%.*s", (int)w.sw_version_len, w.sw_version);
    free(p);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Queue (mu held) */
static void enqueue(rgpu_client *c, item *it, bool front) {
    it->next = NULL;
    if (front) {
        it->next = c->q_head;
        c->q_head = it;
        if (!c->q_tail) c->q_tail = it;
    } else {
        if (c->q_tail) c->q_tail->next = it; else c->q_head = it;
        c->q_tail = it;
    }
    pthread_cond_signal(&c->cv_send);
}

/* ---------------------------------------------------------------------------
 * Pushed blobs: the bytes of an upload the server does not hold travel
 * before the chunk that names them (FORMAT.md §7.2), never waiting for a NEED */
#define KNOWN_MAX_BYTES (256ull << 20)   /* the server's default upload cache */
#define KNOWN_MAX       8192

static uint64_t known_key(const rgpu_hash *h) { return rgpu_ld64(h->b) | 1; }

static bool known_has_locked(const rgpu_client *c, const rgpu_hash *h) {
    uint64_t k = known_key(h);
    for (size_t i = 0; i < c->known_len; i++)
        if (c->known[(c->known_head + i) % c->known_cap].key == k) return true;
    return false;
}

static void known_add_locked(rgpu_client *c, const rgpu_hash *h, uint64_t n) {
    if (!c->known) {
        if (!(c->known = calloc(KNOWN_MAX, sizeof *c->known))) return;
        c->known_cap = KNOWN_MAX;
    }
    while (c->known_len && (c->known_len == c->known_cap || c->known_bytes + n > KNOWN_MAX_BYTES)) {
        c->known_bytes -= c->known[c->known_head].n;
        c->known_head = (c->known_head + 1) % c->known_cap;
        c->known_len--;
    }
    size_t at = (c->known_head + c->known_len) % c->known_cap;
    c->known[at].key = known_key(h);
    c->known[at].n = n;
    c->known_len++;
    c->known_bytes += n;
}

static void enqueue(rgpu_client *c, item *it, bool front);

/* Queue b's bytes for the server unless this session pushed them already
 * (mu held). Called right after its UPLOAD went into the open chunk, so the
 * BLOB goes out before that chunk. */
static void push_blob_locked(rgpu_client *c, const blob *b) {
    if (known_has_locked(c, &b->hash)) { c->st.blobs_deduped++; return; }
    item *it = calloc(1, sizeof *it);
    if (!it) return;   /* the server will NEED it */
    it->kind = ITEM_PUSH;
    it->hash = b->hash;
    it->push_n = b->n;
    c->backlog += b->n;   /* RGPU_MAX_UNACKED bounds uploads in flight too */
    enqueue(c, it, false);
    known_add_locked(c, &b->hash, b->n);
}

static void item_free(item *it) {
    rgpu_buf_free(&it->buf);
    rgpu_buf_free(&it->frame);
    free(it);
}

static uint64_t ts_ns(const struct timespec *t) { return (uint64_t)t->tv_sec * 1000000000ull + (uint64_t)t->tv_nsec; }

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return ts_ns(&t);
}

/* One span of the client's timeline (caller holds mu); dropped when there is
 * no memory for it. */
static void span_locked(rgpu_client *c, const char *what, uint64_t t0, uint64_t t1, uint64_t a, uint64_t b) {
    if (!c->prof_dir[0]) return;
    if (c->nspans == c->capspans) {
        size_t cap = c->capspans ? 2 * c->capspans : 1024;
        cspan *n = realloc(c->spans, cap * sizeof *n);
        if (!n) return;
        c->spans = n;
        c->capspans = cap;
    }
    c->spans[c->nspans++] = (cspan){ what, t0, t1, a, b };
}

/* DIR/client-<pid>.json: the spans as a Chrome trace, timestamps in µs of
 * CLOCK_MONOTONIC (the clock of rgpu-server --profile's files: on one host
 * they line up; tools/timeline_merge.py puts them in one file). */
static void write_spans(rgpu_client *c) {
    if (!c->prof_dir[0]) return;
    char path[4200];
    snprintf(path, sizeof path, "%s/client-%ld.json", c->prof_dir, (long)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"label\":\"rgpu client %ld\",\"clock\":\"monotonic\"},\n"
               "\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%ld,\"tid\":1,"
               "\"args\":{\"name\":\"rgpu client %ld\"}}", (long)getpid(), (long)getpid(), (long)getpid());
    for (size_t i = 0; i < c->nspans; i++) {
        const cspan *e = &c->spans[i];
        bool wait = !strcmp(e->what, "wait");
        fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"client\",\"ph\":\"X\",\"pid\":%ld,\"tid\":%d,\"ts\":%.3f,"
                   "\"dur\":%.3f,\"args\":{\"%s\":%llu,\"%s\":%llu}}",
                e->what, (long)getpid(), wait ? 2 : 1, (double)e->t0 * 1e-3, (double)(e->t1 - e->t0) * 1e-3,
                wait ? "op" : "first_op", (unsigned long long)e->a, wait ? "status" : "records",
                (unsigned long long)e->b);
    }
    fprintf(f, "\n]}\n");
    fclose(f);
}

static rgpu_status append_record_locked(rgpu_client *c, const rgpu_record *r, uint64_t *op_index) {
    if (c->cur_count == 0) {
        c->cur_first = c->next_op;
        clock_gettime(CLOCK_MONOTONIC, &c->cur_t0);
        pthread_cond_signal(&c->cv_send);  /* start the sender's chunk timer */
    }
    rgpu_status s = rgpu_record_encode(&c->cur, r);
    if (s) return s;
    if (op_index) *op_index = c->next_op;
    c->next_op++;
    c->cur_count++;
    c->st.ops++;
    return RGPU_OK;
}

static rgpu_status emit_frees_locked(rgpu_client *c) {
    if (!c->nfree) return RGPU_OK;
    rgpu_record r = { .op = RGPU_OP_FREE, .n_args = 1 };
    r.args[0].kind = RGPU_ARG_INTS;
    /* frees[] holds host-order ids; the record wants LE int64s */
    for (size_t i = 0; i < c->nfree; i++) rgpu_st64((uint8_t *)&c->frees[i], c->frees[i]);
    r.args[0].v.ints.p = (const uint8_t *)c->frees;
    r.args[0].v.ints.n = (uint32_t)c->nfree;
    c->st.frees += c->nfree;
    c->st.free_records++;
    c->nfree = 0;
    return append_record_locked(c, &r, NULL);
}

/* Whether the server allocates running r: an output over a new storage, or a
 * CALL (a template's locals and outputs). The frees queued before such a
 * record go first, so the memory they release is there for it to reuse, as
 * PyTorch's allocator reuses it (FORMAT.md §4.1); between allocations the
 * frees stay batched. */
static inline bool allocates(const rgpu_record *r) {
    if (r->op == RGPU_OP_CALL) return true;
    for (int i = 0; i < r->n_out; i++)
        if (r->out[i].flags & RGPU_TDEF_NEW_STORAGE) return true;
    return false;
}

static rgpu_status close_chunk_locked(rgpu_client *c) {
    rgpu_status s = emit_frees_locked(c);
    if (s) return s;
    if (!c->cur_count) return RGPU_OK;
    item *it = calloc(1, sizeof *it);
    if (!it) return RGPU_ERR_NOMEM;
    it->kind = ITEM_CHUNK;
    it->buf = c->cur;
    it->first_op = c->cur_first;
    it->count = c->cur_count;
    if (c->prof_dir[0]) span_locked(c, "record", ts_ns(&c->cur_t0), now_ns(), c->cur_first, c->cur_count);
    memset(&c->cur, 0, sizeof c->cur);
    c->cur_count = 0;
    c->st.chunks++;
    c->backlog += it->buf.len;
    enqueue(c, it, false);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Sender thread */
static void mark_dead_locked(rgpu_client *c, int status, const char *msg) {
    if (!c->dead) {
        c->dead = true;
        c->dead_status = status;
        snprintf(c->dead_msg, sizeof c->dead_msg, "%s", msg);
    }
    pthread_cond_broadcast(&c->cv_wait);
    pthread_cond_broadcast(&c->cv_send);
}

/* A dropped link (worth a resume), as opposed to a protocol error. */
static bool link_lost(rgpu_status s) { return s == RGPU_ERR_CLOSED || s == RGPU_ERR_TRUNCATED || s == RGPU_ERR_IO; }

static void link_broken_locked(rgpu_client *c) {
    if (!c->broken) {
        c->broken = true;
        shutdown(c->fd, SHUT_RDWR);   /* wakes the other thread */
    }
}

static blob *find_blob_locked(rgpu_client *c, const rgpu_hash *h) {
    for (blob *b = c->blobs; b; b = b->next)
        if (rgpu_hash_eq(&b->hash, h)) return b;
    return NULL;
}

/* Free blobs the server has applied (and the tee has written). */
static void reap_blobs_locked(rgpu_client *c) {
    blob **pp = &c->blobs;
    while (*pp) {
        blob *b = *pp;
        if (!b->pinned && b->op_index < c->acked && !b->need_rgt) {
            *pp = b->next;
            free(b->data);
            free(b);
        } else {
            pp = &b->next;
        }
    }
}

/* Free sent chunks the server acknowledged (all their ops < acked). */
static void reap_sent_locked(rgpu_client *c) {
    bool freed = false;
    while (c->sent_head && c->sent_head != c->in_flight && c->sent_head->first_op + c->sent_head->count <= c->acked) {
        item *it = c->sent_head;
        c->sent_head = it->next;
        if (!c->sent_head) c->sent_tail = NULL;
        c->backlog -= it->frame.len;
        item_free(it);
        freed = true;
    }
    if (freed) pthread_cond_broadcast(&c->cv_wait);   /* a recorder blocked on the backlog */
}

static rgpu_status send_item(rgpu_client *c, item *it) {
    rgpu_status s = RGPU_OK;
    rgpu_buf frame = { 0 };
    if (it->kind == ITEM_CHUNK) {
        if (!it->frame.len) {   /* first send: compress once, keep the frame for a resend */
            it->hash = rgpu_hash_bytes(it->buf.p, it->buf.len);
            if ((s = rgpu_frame_compress(it->buf.p, it->buf.len, 1, &it->frame))) goto out;
            pthread_mutex_lock(&c->mu);
            c->backlog = c->backlog - it->buf.len + it->frame.len;
            pthread_mutex_unlock(&c->mu);
            rgpu_buf_free(&it->buf);
        }
        if (c->rgt && !it->teed) {
            uint8_t *raw;
            size_t rn;
            pthread_mutex_lock(&c->rgt_mu);
            if (rgpu_frame_decompress(it->frame.p, it->frame.len, RGPU_MAX_CHUNK_RAW, &raw, &rn) == RGPU_OK) {
                rgpu_rgt_put_chunk(c->rgt, &it->hash, it->first_op, it->count, rn, it->frame.p, it->frame.len);
                free(raw);
            }
            pthread_mutex_unlock(&c->rgt_mu);
            it->teed = true;
        }
        rgpu_msg_chunk m = { .first_op = it->first_op, .count = it->count, .hash = it->hash, .frame = it->frame.p,
                             .frame_len = it->frame.len };
        s = rgpu_msg_chunk_send(c->fd, &m);
        if (!s) {
            pthread_mutex_lock(&c->mu);
            c->st.bytes_out += RGPU_WIRE_HEADER + RGPU_MSG_CHUNK_HEAD + it->frame.len;
            pthread_mutex_unlock(&c->mu);
        }
    } else if (it->kind == ITEM_MSG) {
        s = rgpu_wire_send(c->fd, it->msg_type, it->buf.p, it->buf.len, NULL, 0);
        if (!s) {
            pthread_mutex_lock(&c->mu);
            c->st.bytes_out += RGPU_WIRE_HEADER + it->buf.len;
            pthread_mutex_unlock(&c->mu);
        }
    } else if (it->kind == ITEM_NEED || it->kind == ITEM_RGT_BLOB || it->kind == ITEM_PUSH) {
        /* The blob cannot be freed while we use it: only this thread reaps. */
        pthread_mutex_lock(&c->mu);
        blob *b = find_blob_locked(c, &it->hash);
        pthread_mutex_unlock(&c->mu);
        if (!b) {
            if (it->kind == ITEM_NEED) {
                /* Unknown hash: tell the server plainly instead of hanging it. */
                static const char why[] = "client does not hold the requested blob";
                rgpu_msg_error e = { .code = RGPU_ERR_MISSING_BLOB, .msg_len = sizeof why - 1, .msg = why };
                s = rgpu_msg_error_send(c->fd, &e);
            }
            goto out;
        }
        if (it->kind != ITEM_RGT_BLOB && b->n > RGPU_BLOB_PIECE) {
            /* a big blob goes in pieces: one piece's frame in memory at a time */
            for (uint64_t off = 0; off < b->n && !s; off += RGPU_BLOB_PIECE) {
                size_t pn = b->n - off < RGPU_BLOB_PIECE ? (size_t)(b->n - off) : RGPU_BLOB_PIECE;
                frame.len = 0;
                if ((s = rgpu_frame_compress(b->data + off, pn, 1, &frame))) break;
                rgpu_msg_blob_part m = { .hash = b->hash, .total = b->n, .offset = off, .frame = frame.p,
                                         .frame_len = frame.len };
                s = rgpu_msg_blob_part_send(c->fd, &m);
                pthread_mutex_lock(&c->mu);
                c->st.bytes_out += RGPU_WIRE_HEADER + RGPU_MSG_BLOB_PART_HEAD + frame.len;
                pthread_mutex_unlock(&c->mu);
            }
            if (!s) {
                pthread_mutex_lock(&c->mu);
                c->st.blobs_sent++;
                pthread_mutex_unlock(&c->mu);
            }
            goto out;
        }
        if ((s = rgpu_frame_compress(b->data, b->n, 1, &frame))) goto out;
        if (it->kind == ITEM_RGT_BLOB) {
            pthread_mutex_lock(&c->rgt_mu);
            rgpu_rgt_put_blob(c->rgt, &b->hash, b->n, frame.p, frame.len);
            pthread_mutex_unlock(&c->rgt_mu);
            pthread_mutex_lock(&c->mu);
            b->need_rgt = false;
            pthread_mutex_unlock(&c->mu);
        } else {
            rgpu_msg_blob m = { .hash = b->hash, .frame = frame.p, .frame_len = frame.len };
            s = rgpu_msg_blob_send(c->fd, &m);
            pthread_mutex_lock(&c->mu);
            c->st.bytes_out += RGPU_WIRE_HEADER + RGPU_MSG_BLOB_HEAD + frame.len;
            c->st.blobs_sent++;
            pthread_mutex_unlock(&c->mu);
        }
    }
out:
    rgpu_buf_free(&frame);
    return s;
}

/* How long the open chunk stays open after its first record: RGPU_CHUNK_MS,
 * but shorter while the server is known to have drained (a wait for the last
 * recorded op returned) and the chunk began less than RGPU_CHUNK_MS after
 * that: as long as that interval, at least RGPU_CHUNK_MIN_US. A training
 * step's first chunk then reaches the idle server after ~0.1 ms instead of
 * 5, and the chunks after it double in length (0.1, 0.1, 0.2, 0.4, ... ms)
 * while the server works on the ones before. */
static long chunk_ns_locked(const rgpu_client *c) {
    const long full = RGPU_CHUNK_MS * 1000000L, min = RGPU_CHUNK_MIN_US * 1000L;
    if (!c->drained_ns) return full;
    uint64_t t0 = ts_ns(&c->cur_t0);
    if (t0 < c->drained_ns) return full;
    uint64_t since = t0 - c->drained_ns;
    return since >= (uint64_t)full ? full : since < (uint64_t)min ? min : (long)since;
}

static void *sender_main(void *arg) {
    rgpu_client *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while ((!c->q_head || c->broken) && !c->dead) {
            if (c->closing && (c->broken || !c->cur_count)) goto done;
            if (c->cur_count && !c->broken) {
                struct timespec dl = c->cur_t0;
                dl.tv_nsec += chunk_ns_locked(c);
                if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
                struct timespec now;
                clock_gettime(CLOCK_MONOTONIC, &now);
                if (c->closing || now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec)) {
                    close_chunk_locked(c);
                    continue;
                }
                cond_wait_until(&c->cv_send, &c->mu, &dl);
            } else {
                pthread_cond_wait(&c->cv_send, &c->mu);
            }
        }
        if (c->dead) break;
        item *it = c->q_head;
        c->q_head = it->next;
        if (!c->q_head) c->q_tail = NULL;
        if (it->kind == ITEM_CHUNK) {   /* on the sent list from now: resent if the link drops */
            it->next = NULL;
            if (c->sent_tail) c->sent_tail->next = it; else c->sent_head = it;
            c->sent_tail = it;
        }
        c->sending = true;
        c->in_flight = it;
        pthread_mutex_unlock(&c->mu);
        rgpu_status s = send_item(c, it);
        pthread_mutex_lock(&c->mu);
        c->sending = false;
        c->in_flight = NULL;
        if (it->kind == ITEM_PUSH) c->backlog -= it->push_n;   /* sent (or, the link dropped: pushed again at the resume) */
        pthread_cond_broadcast(&c->cv_wait);
        if (it->kind != ITEM_CHUNK) item_free(it);
        if (s) {
            if (link_lost(s) && c->reconnect_timeout > 0 && !c->closing) {
                link_broken_locked(c);   /* the receiver reconnects; we park until it is done */
                continue;
            }
            char m[128];
            snprintf(m, sizeof m, "sending to rgpu-server failed: %s", rgpu_status_str(s));
            mark_dead_locked(c, s, m);
            break;
        }
        reap_sent_locked(c);
        reap_blobs_locked(c);
    }
done:
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Resume (receiver thread) */

/* Dial and handshake with backoff until reconnect_timeout; the session must
 * still exist. *fd_out and *applied on success; else why (one line). */
static rgpu_status redial(rgpu_client *c, uint64_t session, uint8_t secret[RGPU_SESSION_SECRET], uint64_t last_ack,
                          int *fd_out, rgpu_server_info *info, uint64_t *applied, char *why, size_t whylen) {
    double deadline = mono_now() + c->reconnect_timeout, delay = 0.02;
    char err[512] = "";
    for (int attempt = 1;; attempt++) {
        int fd = dial(c, c->address, err, sizeof err);
        if (fd >= 0) {
            rgpu_status s = handshake(fd, c->token, session, secret, last_ack, info, applied, err, sizeof err);
            if (!s) { *fd_out = fd; return RGPU_OK; }
            close(fd);
            ssh_note(c, err, sizeof err);
            if (!link_lost(s) && s != RGPU_ERR_TIMEOUT) {   /* the server answered: no */
                snprintf(why, whylen, "%s", err);
                return s;
            }
        }
        pthread_mutex_lock(&c->mu);
        bool give_up = c->closing;
        pthread_mutex_unlock(&c->mu);
        if (give_up || mono_now() + delay > deadline) {
            snprintf(why, whylen, "no rgpu-server at %s took the session back within %g s "
                     "(RGPU_RECONNECT_TIMEOUT; %d attempts; last: %.300s)", c->address, c->reconnect_timeout, attempt, err);
            return RGPU_ERR_TIMEOUT;
        }
        struct timespec ts = { (time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9) };
        nanosleep(&ts, NULL);
        delay = delay * 2 > 1.0 ? 1.0 : delay * 2;
    }
}

/* Put a WAIT for op at the tail of the queue (mu held). */
static rgpu_status enqueue_wait_locked(rgpu_client *c, uint64_t op) {
    item *it = calloc(1, sizeof *it);
    if (!it || rgpu_buf_reserve(&it->buf, RGPU_MSG_WAIT_HEAD)) { free(it); return RGPU_ERR_NOMEM; }
    it->kind = ITEM_MSG; it->msg_type = RGPU_MSG_WAIT;
    it->buf.len = rgpu_msg_wait_encode(&(rgpu_msg_wait){ op }, it->buf.p, RGPU_MSG_WAIT_HEAD);
    enqueue(c, it, false);
    return RGPU_OK;
}

/* The link dropped: reconnect and resume, or die with SESSION_LOST. Returns
 * false when the client is dead. */
static bool resume_session(rgpu_client *c) {
    pthread_mutex_lock(&c->mu);
    link_broken_locked(c);
    while (c->sending) pthread_cond_wait(&c->cv_wait, &c->mu);   /* the sender is off the fd */
    uint64_t session = c->info.session, last_ack = c->acked;
    pthread_mutex_unlock(&c->mu);
    close(c->fd);

    int fd = -1;
    uint64_t applied = 0;
    rgpu_server_info info = c->info;
    char why[600] = "";
    rgpu_status s = redial(c, session, c->secret, last_ack, &fd, &info, &applied, why, sizeof why);

    pthread_mutex_lock(&c->mu);
    c->fd = fd;   /* -1 when failed: further sends fail at once */
    /* The op the server must apply next has to be where our kept chunks start. */
    if (!s) {
        if (applied > c->acked) c->acked = applied;
        reap_sent_locked(c);
        uint64_t expect = c->sent_head ? c->sent_head->first_op : c->acked;
        if (applied < c->acked || (c->sent_head && applied != expect)) {
            snprintf(why, sizeof why, "the server resumed at op %llu, but op %llu was acknowledged and the "
                     "kept chunks start at op %llu", (unsigned long long)applied, (unsigned long long)c->acked,
                     (unsigned long long)expect);
            s = RGPU_ERR_SEQUENCE;
        }
    }
    if (s) {
        char m[1024];
        snprintf(m, sizeof m, "rgpu session lost: the connection to %s dropped and the session could not be "
                 "resumed; ops from %llu on (through %llu) were not executed: %.400s", c->address,
                 (unsigned long long)c->acked, (unsigned long long)(c->next_op ? c->next_op - 1 : 0), why);
        c->broken = false;
        mark_dead_locked(c, c->closing ? RGPU_ERR_CLOSED : RGPU_ERR_SESSION_LOST, m);
        pthread_mutex_unlock(&c->mu);
        return false;
    }
    c->info.session = info.session;
    /* Requeue: the kept chunks first (exact bytes), then what was never sent
     * minus stale WAITs and NEEDs, then a WAIT per pending waiter. */
    item *old = c->q_head, *keep_h = NULL, **keep_t = &keep_h;
    while (old) {
        item *n = old->next;
        if (old->kind == ITEM_PUSH) c->backlog -= old->push_n;   /* pushed again below when still needed */
        if (old->kind == ITEM_NEED || old->kind == ITEM_PUSH || (old->kind == ITEM_MSG && old->msg_type == RGPU_MSG_WAIT))
            item_free(old);
        else { old->next = NULL; *keep_t = old; keep_t = &old->next; }
        old = n;
    }
    if (c->sent_head) {
        c->sent_tail->next = keep_h;
        c->q_head = c->sent_head;
    } else {
        c->q_head = keep_h;
    }
    c->sent_head = c->sent_tail = NULL;
    /* the bytes of uploads not yet applied go again first: pushed on the
     * dropped link, they may never have arrived */
    for (blob *b = c->blobs; b; b = b->next) {
        if (b->pinned || b->op_index < c->acked || !b->data) continue;
        item *it = calloc(1, sizeof *it);
        if (!it) continue;   /* the server NEEDs it */
        it->kind = ITEM_PUSH;
        it->hash = b->hash;
        it->push_n = b->n;
        c->backlog += b->n;
        it->next = c->q_head;
        c->q_head = it;
    }
    c->q_tail = NULL;
    for (item *it = c->q_head; it; it = it->next) c->q_tail = it;
    for (waiter *w = c->waiters; w; w = w->next)
        if (!w->done) enqueue_wait_locked(c, w->op);
    c->st.reconnects++;
    c->st.round_trips++;
    c->broken = false;
    pthread_cond_broadcast(&c->cv_send);
    pthread_mutex_unlock(&c->mu);
    return true;
}

/* ---------------------------------------------------------------------------
 * Receiver thread */

/* The server broke the protocol (FORMAT.md §7): a message that does not
 * decode, one a server never sends, a type this client does not know. The
 * session cannot go on: every waiter fails at once with a message naming
 * what came (mu held). */
static void protocol_error_locked(rgpu_client *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void protocol_error_locked(rgpu_client *c, const char *fmt, ...) {
    char what[256], m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(m, sizeof m, "protocol error: rgpu-server at %s sent %s; the session cannot go on", c->address, what);
    mark_dead_locked(c, RGPU_ERR_BAD_MESSAGE, m);
}

/* A header rgpu_wire_recv refused (mu held). */
static void bad_header_locked(rgpu_client *c, rgpu_status s, const rgpu_msg_header *h) {
    if (s == RGPU_ERR_BAD_MESSAGE)
        protocol_error_locked(c, "a message of unknown type %u (this client, wire protocol %u, knows types 1 to %d)",
                              h->type, RGPU_WIRE_VERSION, RGPU_MSG_TYPE_COUNT_ - 1);
    else if (s == RGPU_ERR_TOO_LARGE)
        protocol_error_locked(c, "a %s message of %llu bytes (over %llu)", rgpu_msg_name(h->type),
                              (unsigned long long)h->len, (unsigned long long)RGPU_MAX_FRAME);
    else
        protocol_error_locked(c, "a message header that does not decode (%s)", rgpu_status_str(s));
}

static void take_result_locked(rgpu_client *c, const rgpu_msg_result *r) {
    if (r->op + 1 > c->acked) c->acked = r->op + 1;   /* chunks apply whole: op's chunk is done */
    reap_sent_locked(c);
    for (waiter *w = c->waiters; w; w = w->next) {
        if (w->op != r->op || w->done) continue;
        w->status = (int)r->status;
        w->msg = strndup(r->msg, r->msg_len);
        w->n = r->data_len;
        w->data = malloc(w->n ? w->n : 1);
        if (w->data) memcpy(w->data, r->data, w->n);
        w->done = true;
        if (c->rgt) {
            pthread_mutex_lock(&c->rgt_mu);
            rgpu_rgt_put_result(c->rgt, r->op, w->status, w->data, w->status ? 0 : w->n);
            pthread_mutex_unlock(&c->rgt_mu);
        }
        break;
    }
    pthread_cond_broadcast(&c->cv_wait);
}

static void *receiver_main(void *arg) {
    rgpu_client *c = arg;
    for (;;) {
        rgpu_msg_header h = { 0 };
        uint8_t *p;
        rgpu_status s = rgpu_wire_recv(c->fd, RGPU_MAX_FRAME, &h, &p);
        if (s) {
            pthread_mutex_lock(&c->mu);
            bool resume = link_lost(s) && c->reconnect_timeout > 0 && !c->dead && !c->closing;
            bool bad_header = s == RGPU_ERR_BAD_MAGIC || s == RGPU_ERR_RESERVED || s == RGPU_ERR_BAD_MESSAGE ||
                              s == RGPU_ERR_TOO_LARGE;
            if (bad_header) {
                bad_header_locked(c, s, &h);
            } else if (!resume && (!c->closing || c->waiters)) {
                char m[160];
                snprintf(m, sizeof m, "connection to rgpu-server lost: %s", rgpu_status_str(s));
                mark_dead_locked(c, s == RGPU_ERR_CLOSED ? RGPU_ERR_CLOSED : s, m);
            } else if (!resume) {
                mark_dead_locked(c, RGPU_ERR_CLOSED, "connection closed");
            }
            pthread_mutex_unlock(&c->mu);
            if (resume && resume_session(c)) continue;
            return NULL;
        }
        pthread_mutex_lock(&c->mu);
        c->st.bytes_in += RGPU_WIRE_HEADER + h.len;
        /* Every message a server sends is decoded or refused: none is
         * skipped, since FORMAT.md §7.1 names every type (an unknown one was
         * refused above) and says which way each goes. */
        switch (h.type) {
        case RGPU_MSG_ACK: {
            rgpu_msg_ack a;
            if (rgpu_msg_ack_decode(p, h.len, &a)) { protocol_error_locked(c, "an ACK of %llu bytes (not 8)", (unsigned long long)h.len); break; }
            if (a.applied > c->acked) c->acked = a.applied;
            reap_sent_locked(c);
            break;
        }
        case RGPU_MSG_NEED: {
            rgpu_msg_need nd;
            if (rgpu_msg_need_decode(p, h.len, &nd)) { protocol_error_locked(c, "a NEED of %llu bytes (not 16)", (unsigned long long)h.len); break; }
            item *it = calloc(1, sizeof *it);
            if (it) { it->kind = ITEM_NEED; it->hash = nd.hash; enqueue(c, it, true); }
            c->st.round_trips++;   /* the server waits for these bytes */
            break;
        }
        case RGPU_MSG_RESULT: {
            rgpu_msg_result r;
            if (rgpu_msg_result_decode(p, h.len, &r)) {
                protocol_error_locked(c, "a RESULT that does not decode (%llu bytes; FORMAT.md §7.1: %d fixed bytes, "
                                      "reserved 0, msg_len within the payload)", (unsigned long long)h.len,
                                      RGPU_MSG_RESULT_HEAD);
                break;
            }
            take_result_locked(c, &r);
            break;
        }
        case RGPU_MSG_ERROR: {
            char m[256];
            rgpu_msg_error e;
            int code = rgpu_msg_error_decode(p, h.len, &e) ? RGPU_ERR_BAD_MESSAGE : (int)e.code;
            snprintf(m, sizeof m, "rgpu-server closed the session: %.*s (%s)",
                     (int)(e.msg_len < 200 ? e.msg_len : 200), e.msg ? e.msg : "", rgpu_status_str(code));
            mark_dead_locked(c, code ? code : RGPU_ERR_BAD_MESSAGE, m);
            break;
        }
        case RGPU_MSG_NOTICE: {   /* not fatal; a code this client does not know is ignored */
            rgpu_msg_notice nt;
            if (rgpu_msg_notice_decode(p, h.len, &nt)) {
                protocol_error_locked(c, "a NOTICE that does not decode (%llu bytes)", (unsigned long long)h.len);
                break;
            }
            if (nt.code == RGPU_NOTICE_JOURNAL_OFF && strncmp(c->journal, "off", 3) != 0) {
                snprintf(c->journal, sizeof c->journal, "off: %.*s", (int)(nt.msg_len < 300 ? nt.msg_len : 300), nt.msg);
                c->journal_news = true;
            } else if (nt.code == RGPU_NOTICE_JOURNAL_NONE) {
                snprintf(c->journal, sizeof c->journal, "none");
            }
            break;
        }
        case RGPU_MSG_BYE:
            mark_dead_locked(c, RGPU_ERR_CLOSED, "rgpu-server said goodbye");
            break;
        default:   /* HELLO, WELCOME (after the handshake), CHUNK, type 4, BLOB, WAIT, BLOB_PART */
            protocol_error_locked(c, "an unexpected %s message (type %u: a server never sends it)",
                                  rgpu_msg_name(h.type), h.type);
            break;
        }
        bool stop = c->dead;
        pthread_mutex_unlock(&c->mu);
        free(p);
        if (stop) return NULL;
    }
}

/* ---------------------------------------------------------------------------
 * Public API */
rgpu_status rgpu_client_connect(const char *address, const char *record_path,
                                rgpu_client **out, char *err, size_t errlen) {
    return rgpu_client_connect_token(address, record_path, NULL, out, err, errlen);
}

rgpu_status rgpu_client_connect_token(const char *address, const char *record_path, const char *token,
                                      rgpu_client **out, char *err, size_t errlen) {
    *out = NULL;
    rgpu_client *c = calloc(1, sizeof *c);
    if (!c) return RGPU_ERR_NOMEM;
    c->next_id = 1;
    c->next_local = 1;
    snprintf(c->journal, sizeof c->journal, "on");
    c->serial = __atomic_add_fetch(&g_serial, 1, __ATOMIC_RELAXED);
    snprintf(c->address, sizeof c->address, "%s", address);
    if (token) snprintf(c->token, sizeof c->token, "%s", token);
    c->reconnect_timeout = env_seconds("RGPU_RECONNECT_TIMEOUT", 60);
    const char *pd = getenv("RGPU_PROFILE");
    if (pd && *pd && strlen(pd) < sizeof c->prof_dir) {
        mkdir(pd, 0700);                      /* the embedded server makes it too */
        snprintf(c->prof_dir, sizeof c->prof_dir, "%s", pd);
    }
    c->max_unacked = (uint64_t)(env_seconds("RGPU_MAX_UNACKED", 64.0 * (1 << 20)));
    if (c->max_unacked < (64u << 10)) c->max_unacked = 64u << 10;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->rgt_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
#if RGPU_COND_MONOTONIC
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
#endif
    pthread_cond_init(&c->cv_send, &ca);
    pthread_cond_init(&c->cv_wait, &ca);
    pthread_condattr_destroy(&ca);
    c->fd = dial(c, address, err, errlen);
    rgpu_status s;
    uint64_t applied;
    if (c->fd < 0) { s = RGPU_ERR_IO; goto fail; }
    if ((s = handshake(c->fd, c->token, 0, c->secret, 0, &c->info, &applied, err, errlen))) { ssh_note(c, err, errlen); goto fail; }
    c->st.round_trips = 1;   /* the handshake */
    if (record_path && *record_path) {
        if ((s = rgpu_rgt_create(record_path, "rgpu recorder", &c->rgt))) {
            set_err(err, errlen, "cannot create trace %s", record_path);
            goto fail;
        }
        char bname[32];   /* the backend's name: "cuda" of "cuda (NVIDIA H200)" */
        snprintf(bname, sizeof bname, "%.*s", (int)strcspn(c->info.backend, " "), c->info.backend);
        rgpu_rgt_set_meta(c->rgt, "backend", bname);
        rgpu_rgt_flush(c->rgt);
    }
    if (pthread_create(&c->sender, NULL, sender_main, c)) { s = RGPU_ERR_NOMEM; goto fail; }
    if (pthread_create(&c->receiver, NULL, receiver_main, c)) {
        pthread_mutex_lock(&c->mu);
        mark_dead_locked(c, RGPU_ERR_NOMEM, "no thread");
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->sender, NULL);
        s = RGPU_ERR_NOMEM;
        goto fail;
    }
    c->threads_started = true;
    *out = c;
    return RGPU_OK;
fail:
    if (c->fd >= 0) close(c->fd);
    ssh_stop(c, 0);
    rgpu_rgt_close(c->rgt);
    free(c);
    return s;
}

const rgpu_server_info *rgpu_client_server(const rgpu_client *c) { return &c->info; }

uint64_t rgpu_client_new_id(rgpu_client *c) {
    if (capturing(c)) return RGPU_TEMPLATE_LOCAL_BIT | __atomic_fetch_add(&c->next_local, 1, __ATOMIC_RELAXED);
    return __atomic_fetch_add(&c->next_id, 1, __ATOMIC_RELAXED);
}

static double wait_timeout_s(void) {
    double t = env_seconds("RGPU_WAIT_TIMEOUT", 0);
    return t > 0 ? t : 3600.0;
}

/* Backpressure (mu held): while un-acknowledged chunk bytes are over the
 * bound, close the open chunk and wait for ACKs. */
static rgpu_status throttle_locked(rgpu_client *c);

bool rgpu_client_backlogged(rgpu_client *c) {
    return __atomic_load_n(&c->backlog, __ATOMIC_RELAXED) + __atomic_load_n(&c->cur.len, __ATOMIC_RELAXED) > c->max_unacked;
}

rgpu_status rgpu_client_throttle(rgpu_client *c) {
    pthread_mutex_lock(&c->mu);
    rgpu_status s = c->dead ? (rgpu_status)c->dead_status : throttle_locked(c);
    pthread_mutex_unlock(&c->mu);
    return s;
}

static rgpu_status throttle_locked(rgpu_client *c) {
    if (c->backlog + c->cur.len <= c->max_unacked) return RGPU_OK;
    rgpu_status s = close_chunk_locked(c);
    if (s) return s;
    double to = wait_timeout_s();
    struct timespec dl = deadline_in(to);
    while (c->backlog > c->max_unacked && !c->dead) {
        if (cond_wait_until(&c->cv_wait, &c->mu, &dl) == ETIMEDOUT && c->backlog > c->max_unacked) {
            mark_dead_locked(c, RGPU_ERR_TIMEOUT, "rgpu-server acknowledged nothing for RGPU_WAIT_TIMEOUT seconds "
                             "while RGPU_MAX_UNACKED bytes of ops were waiting");
            break;
        }
    }
    return c->dead ? (rgpu_status)c->dead_status : RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Capture: the thread's records go into its buffer (FORMAT.md §5.1) */
static void capture_emit_frees(capture *k) {
    if (!k->nfree) return;
    rgpu_record r = { .op = RGPU_OP_FREE, .n_args = 1 };
    uint8_t ids[8 * RGPU_CAPTURE_FREE_BATCH];
    for (size_t i = 0; i < k->nfree; i++) rgpu_st64(ids + 8 * i, k->frees[i]);
    r.args[0].kind = RGPU_ARG_INTS;
    r.args[0].v.ints.p = ids;
    r.args[0].v.ints.n = (uint32_t)k->nfree;
    rgpu_record_encode(&k->buf, &r);   /* best effort: the call frees its locals at its end anyway */
    k->nfree = 0;
}

static rgpu_status capture_record(capture *k, const rgpu_record *r) {
    if (r->op < RGPU_OP_COUNT && (r->op == RGPU_OP_CALL || (rgpu_op_table[r->op].flags & RGPU_OPF_WAIT)))
        return RGPU_ERR_UNSUPPORTED;
    if (k->nfree && allocates(r)) capture_emit_frees(k);   /* a call reuses its dead locals' memory */
    size_t before = k->buf.len;
    rgpu_status s = rgpu_record_encode(&k->buf, r);
    if (!s && k->buf.len > RGPU_MAX_CHUNK_RAW) { k->buf.len = before; s = RGPU_ERR_TOO_LARGE; }
    return s;
}

bool rgpu_client_capturing(const rgpu_client *c) { return capturing(c) != NULL; }

rgpu_status rgpu_client_capture_begin(rgpu_client *c) {
    if (capturing(c)) return RGPU_ERR_SEQUENCE;
    capture *k = calloc(1, sizeof *k);
    if (!k) return RGPU_ERR_NOMEM;
    pthread_mutex_lock(&c->mu);
    rgpu_status s = c->dead ? (rgpu_status)c->dead_status : emit_frees_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (s) { free(k); return s; }
    if (t_cap) { rgpu_buf_free(&t_cap->buf); free(t_cap); }   /* left by a client closed meanwhile */
    k->serial = c->serial;
    t_cap = k;
    __atomic_add_fetch(&c->ncapture, 1, __ATOMIC_RELAXED);
    return RGPU_OK;
}

static capture *capture_take(rgpu_client *c) {
    capture *k = capturing(c);
    if (!k) return NULL;
    t_cap = NULL;
    __atomic_sub_fetch(&c->ncapture, 1, __ATOMIC_RELAXED);
    return k;
}

rgpu_status rgpu_client_capture_end(rgpu_client *c, rgpu_buf *records) {
    capture *k = capture_take(c);
    if (!k) return RGPU_ERR_SEQUENCE;
    capture_emit_frees(k);
    *records = k->buf;
    free(k);
    return RGPU_OK;
}

void rgpu_client_capture_abort(rgpu_client *c) {
    capture *k = capture_take(c);
    if (!k) return;
    rgpu_buf_free(&k->buf);
    free(k);
}

/* Link b into the blobs (mu held). With pin: kept for the session, and
 * deduplicated: when the hash is known already, that blob is pinned and b
 * freed. Returns the blob now holding the bytes. */
static blob *add_blob_locked(rgpu_client *c, blob *b, bool pin) {
    if (pin) {
        blob *old = find_blob_locked(c, &b->hash);
        if (old) {
            old->pinned = true;
            free(b->data);
            free(b);
            return old;
        }
        b->pinned = true;
    }
    b->need_rgt = c->rgt != NULL;
    b->next = c->blobs;
    c->blobs = b;
    if (b->need_rgt) {
        item *it = calloc(1, sizeof *it);
        if (it) { it->kind = ITEM_RGT_BLOB; it->hash = b->hash; enqueue(c, it, false); }
        else b->need_rgt = false;
    }
    push_blob_locked(c, b);
    return b;
}

rgpu_status rgpu_client_put_blob(rgpu_client *c, const void *data, size_t n, rgpu_hash *h) {
    if (n > RGPU_MAX_BLOB_RAW) return RGPU_ERR_TOO_LARGE;
    *h = rgpu_hash_bytes(data, n);
    blob *b = calloc(1, sizeof *b);
    uint8_t *copy = malloc(n ? n : 1);
    if (!b || !copy) { free(b); free(copy); return RGPU_ERR_NOMEM; }
    if (n) memcpy(copy, data, n);
    b->hash = *h; b->data = copy; b->n = n; b->op_index = UINT64_MAX;
    pthread_mutex_lock(&c->mu);
    rgpu_status s = c->dead ? (rgpu_status)c->dead_status : RGPU_OK;
    if (!s) {
        blob *kept = add_blob_locked(c, b, true);
        if (!kept->tpl) { kept->tpl = true; c->st.templates++; }
    }
    pthread_mutex_unlock(&c->mu);
    if (s) { free(copy); free(b); }
    return s;
}

rgpu_status rgpu_client_record(rgpu_client *c, const rgpu_record *r, uint64_t *op_index) {
    capture *k = capturing(c);
    if (k) {
        if (op_index) *op_index = 0;
        return capture_record(k, r);
    }
    pthread_mutex_lock(&c->mu);
    rgpu_status s = c->dead ? (rgpu_status)c->dead_status : RGPU_OK;
    /* Frees queued before an allocation go before it (allocates), and before
     * a wait op, so what it observes (memory stats) already reflects tensors
     * the program dropped. */
    if (!s && c->nfree && (allocates(r) || (r->op < RGPU_OP_COUNT && (rgpu_op_table[r->op].flags & RGPU_OPF_WAIT))))
        s = emit_frees_locked(c);
    if (!s) s = append_record_locked(c, r, op_index);
    if (!s && r->op == RGPU_OP_CALL) c->st.calls++;
    if (!s && c->cur.len >= RGPU_CHUNK_BYTES) s = close_chunk_locked(c);
    pthread_mutex_unlock(&c->mu);
    return s;
}

rgpu_status rgpu_client_upload(rgpu_client *c, const rgpu_tdef *out, const void *data, size_t n,
                               uint64_t *op_index) {
    if (!(out->flags & RGPU_TDEF_NEW_STORAGE) || out->nbytes != n) return RGPU_ERR_BAD_ARG;
    if (n > RGPU_MAX_BLOB_RAW) return RGPU_ERR_TOO_LARGE;
    rgpu_hash h = rgpu_hash_bytes(data, n);
    blob *b = calloc(1, sizeof *b);
    uint8_t *copy = malloc(n ? n : 1);
    if (!b || !copy) { free(b); free(copy); return RGPU_ERR_NOMEM; }
    if (n) memcpy(copy, data, n);
    b->hash = h; b->data = copy; b->n = n; b->need_rgt = c->rgt != NULL;
    rgpu_record r = { .op = RGPU_OP_UPLOAD, .n_out = 1, .n_args = 2 };
    r.out[0] = *out;
    r.args[0].kind = RGPU_ARG_HASH; r.args[0].v.h = h;
    r.args[1].kind = RGPU_ARG_INT; r.args[1].v.i = (int64_t)n;
    capture *k = capturing(c);
    if (k) {   /* into the capture; the bytes stay for every later CALL */
        b->op_index = UINT64_MAX;
        if (op_index) *op_index = 0;
        rgpu_status s = capture_record(k, &r);
        pthread_mutex_lock(&c->mu);
        if (!s && c->dead) s = (rgpu_status)c->dead_status;
        if (!s) add_blob_locked(c, b, true);
        pthread_mutex_unlock(&c->mu);
        if (s) { free(copy); free(b); }
        return s;
    }
    pthread_mutex_lock(&c->mu);
    rgpu_status s = c->dead ? (rgpu_status)c->dead_status : emit_frees_locked(c);   /* an upload allocates */
    if (!s) s = append_record_locked(c, &r, &b->op_index);
    bool linked = !s;
    if (!s) {
        b->next = c->blobs;
        c->blobs = b;
        if (op_index) *op_index = b->op_index;
        if (b->need_rgt) {
            item *it = calloc(1, sizeof *it);
            if (it) { it->kind = ITEM_RGT_BLOB; it->hash = h; enqueue(c, it, false); }
            else b->need_rgt = false;
        }
        push_blob_locked(c, b);
        if (c->cur.len >= RGPU_CHUNK_BYTES) s = close_chunk_locked(c);
    }
    pthread_mutex_unlock(&c->mu);
    if (!linked) { free(copy); free(b); }
    return s;
}

bool rgpu_client_capture_free(rgpu_client *c, uint64_t tid) {
    capture *k = capturing(c);
    if (!k) return false;
    k->frees[k->nfree++] = tid;
    if (k->nfree == RGPU_CAPTURE_FREE_BATCH) capture_emit_frees(k);
    return true;
}

void rgpu_client_free_tensor(rgpu_client *c, uint64_t tid) {
    if (tid & RGPU_TEMPLATE_LOCAL_BIT) {
        rgpu_client_capture_free(c, tid);
        return;   /* no capture here: the server frees a call's locals at its end */
    }
    pthread_mutex_lock(&c->mu);
    if (!c->dead) {
        if (c->nfree == c->capfree) {
            size_t cap = c->capfree ? 2 * c->capfree : RGPU_FREE_BATCH;
            uint64_t *f = realloc(c->frees, cap * sizeof *f);
            if (f) { c->frees = f; c->capfree = cap; }
        }
        if (c->nfree < c->capfree) c->frees[c->nfree++] = tid;
        if (c->nfree >= RGPU_FREE_BATCH) emit_frees_locked(c);
    }
    pthread_mutex_unlock(&c->mu);
}

rgpu_status rgpu_client_flush(rgpu_client *c) {
    pthread_mutex_lock(&c->mu);
    rgpu_status s = c->dead ? (rgpu_status)c->dead_status : close_chunk_locked(c);
    pthread_mutex_unlock(&c->mu);
    return s;
}

rgpu_status rgpu_client_wait(rgpu_client *c, uint64_t op_index, uint8_t **data, size_t *n,
                             char *err, size_t errlen) {
    if (data) *data = NULL;
    if (n) *n = 0;
    waiter w = { .op = op_index };
    uint64_t t0 = c->prof_dir[0] ? now_ns() : 0;
    pthread_mutex_lock(&c->mu);
    rgpu_status s = RGPU_OK;
    if (c->dead) { set_err(err, errlen, "%s", c->dead_msg); s = c->dead_status; goto out; }
    if (op_index >= c->next_op) { set_err(err, errlen, "wait for op %llu that was never recorded", (unsigned long long)op_index); s = RGPU_ERR_SEQUENCE; goto out; }
    w.next = c->waiters;
    c->waiters = &w;
    c->st.waits++;
    c->st.round_trips++;
    /* A WAIT message asks for a RESULT at op_index whatever the op is; for
     * ops with RGPU_OPF_WAIT the server answers on its own. The message goes
     * after the chunk holding the op, in queue order. (While the link is
     * down it is queued too, and a resume requeues one per pending waiter.) */
    if ((s = close_chunk_locked(c))) goto unlink;
    if ((s = enqueue_wait_locked(c, op_index))) goto unlink;
    double to = wait_timeout_s();
    struct timespec dl = deadline_in(to);
    while (!w.done && !c->dead) {
        if (cond_wait_until(&c->cv_wait, &c->mu, &dl) == ETIMEDOUT && !w.done) {
            set_err(err, errlen, "no answer from rgpu-server for op %llu within %g s (RGPU_WAIT_TIMEOUT)%s",
                    (unsigned long long)op_index, to, c->broken ? "; the connection is down and being resumed" : "");
            s = RGPU_ERR_TIMEOUT;
            goto unlink;
        }
    }
    if (!w.done) { set_err(err, errlen, "%s", c->dead_msg); s = c->dead_status; goto unlink; }
    if (op_index + 1 == c->next_op) c->drained_ns = now_ns();
    if (w.status) {
        set_err(err, errlen, "%s", w.msg ? w.msg : rgpu_status_str(w.status));
        s = w.status;
        free(w.data);
    } else if (data) {
        *data = w.data;
        if (n) *n = w.n;
    } else {
        free(w.data);
    }
    free(w.msg);
unlink:
    for (waiter **pp = &c->waiters; *pp; pp = &(*pp)->next)
        if (*pp == &w) { *pp = w.next; break; }
out:
    if (c->prof_dir[0]) span_locked(c, "wait", t0, now_ns(), op_index, (uint64_t)s);
    pthread_mutex_unlock(&c->mu);
    if (c->rgt) {
        pthread_mutex_lock(&c->rgt_mu);
        rgpu_rgt_flush(c->rgt);
        pthread_mutex_unlock(&c->rgt_mu);
    }
    return s;
}

const char *rgpu_client_failure(rgpu_client *c) {
    pthread_mutex_lock(&c->mu);
    bool dead = c->dead;
    pthread_mutex_unlock(&c->mu);
    return dead ? c->dead_msg : NULL;   /* written once, before dead is set */
}

void rgpu_client_journal(rgpu_client *c, char *out, size_t n) {
    pthread_mutex_lock(&c->mu);
    snprintf(out, n, "%s", c->journal);
    pthread_mutex_unlock(&c->mu);
}

bool rgpu_client_take_notice(rgpu_client *c, char *out, size_t n) {
    pthread_mutex_lock(&c->mu);
    bool news = c->journal_news;
    if (news)
        snprintf(out, n, "rgpu-server turned this session's journal off (%s): the run goes on, but a server "
                 "restart will not resume it", c->journal + 5);
    c->journal_news = false;
    pthread_mutex_unlock(&c->mu);
    return news;
}

void rgpu_client_get_stats(rgpu_client *c, rgpu_client_stats *s) {
    pthread_mutex_lock(&c->mu);
    *s = c->st;
    s->unacked_bytes = c->backlog;
    pthread_mutex_unlock(&c->mu);
}

void rgpu_client_close(rgpu_client *c) {
    if (!c) return;
    double bye_by = 0;   /* when an orderly close stops waiting for the server (0: none) */
    if (c->threads_started) {
        pthread_mutex_lock(&c->mu);
        bool dead = c->dead;
        if (!dead) {
            close_chunk_locked(c);
            item *it = calloc(1, sizeof *it);
            if (it) { it->kind = ITEM_MSG; it->msg_type = RGPU_MSG_BYE; enqueue(c, it, false); }
        }
        c->closing = true;
        pthread_cond_broadcast(&c->cv_send);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->sender, NULL);
        pthread_mutex_lock(&c->mu);
        if (c->fd >= 0 && !c->broken) {
            if (!c->dead) {
                /* BYE went out: the server answers BYE once it has freed the
                 * session (FORMAT.md §7.2). Wait for that, or for the link
                 * to end (an older server just closes), at most
                 * BYE_WAIT_S: cut before, the BYE can be lost on the way
                 * (in ssh's buffers) and the session kept for --grace. Our
                 * write side ends first: over ssh, that is ssh's stdin EOF. */
                shutdown(c->fd, SHUT_WR);
                bye_by = mono_now() + BYE_WAIT_S;
                struct timespec dl = deadline_in(BYE_WAIT_S);
                while (!c->dead && cond_wait_until(&c->cv_wait, &c->mu, &dl) != ETIMEDOUT) {}
            }
            shutdown(c->fd, SHUT_RDWR);
        }
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->receiver, NULL);
    }
    if (c->fd >= 0) close(c->fd);
    ssh_stop(c, bye_by);
    if (c->rgt) { rgpu_rgt_flush(c->rgt); rgpu_rgt_close(c->rgt); }
    while (c->q_head) { item *it = c->q_head; c->q_head = it->next; item_free(it); }
    while (c->sent_head) { item *it = c->sent_head; c->sent_head = it->next; item_free(it); }
    while (c->blobs) { blob *b = c->blobs; c->blobs = b->next; free(b->data); free(b); }
    free(c->known);
    rgpu_buf_free(&c->cur);
    free(c->frees);
    write_spans(c);
    free(c->spans);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->rgt_mu);
    pthread_cond_destroy(&c->cv_send);
    pthread_cond_destroy(&c->cv_wait);
    free(c);
}
