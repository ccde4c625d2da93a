/* server_loop.c — rgpu-server's connection loop (API: server.h): accept
 * clients, one thread per connection, speak the wire protocol (FORMAT.md
 * §7), execute chunks on the chosen backend. main is in server_main.c.
 *
 * A connection's thread reads messages in order. CHUNK: decode, fetch the
 * blobs its uploads lack and the templates its CALLs name (NEED), journal,
 * execute, then ACK. BLOB: keep.
 * WAIT: answer RESULT. Malformed input ends only that session (ERROR then
 * close); the server keeps serving the others.
 *
 * Sessions outlive connections. A connection that drops (EOF, reset, a frame
 * cut short) detaches its session, which waits --grace seconds for a HELLO
 * naming it; the client then resends the chunks after WELCOME's `applied`.
 * With a journal (--journal DIR, on by default) every chunk and blob is
 * committed to DIR/session-<id>.rgt before it is acknowledged, so a server
 * started again on the same directory rebuilds a session by replaying its
 * journal when the client comes back. Every HELLO must carry the token the
 * server wrote to --token-file (compared in constant time; the file is read
 * again at each HELLO and once a second, FORMAT.md §7.2); a resume also the
 * session's own secret, which only its WELCOME carried (random, 128 bits, kept
 * in the journal's meta; compared in constant time before the session is
 * touched), so one token holder cannot enter another's session. BYE is
 * answered with BYE once the session is freed. */
#include "server.h"
#include "dataopts.h"
#include "op/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include <arpa/inet.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <spawn.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

extern char **environ;

#define TOKEN_HEX       RGPU_SERVER_TOKEN_HEX
#define RESULT_KEEP     (64ull << 20)      /* bytes of sent RESULTs kept for resent WAITs */
#define MAX_DEFERRED    4096               /* messages queued while a NEED is outstanding */
#define MAX_SMALL_MSG   (1u << 20)         /* any message but CHUNK and BLOB */
#define ACK_IDLE        0.01               /* s: a client silent this long gets the ACK of its applied chunks */
#define ACK_MAX_DELAY   0.1                /* s: ... as does one that keeps sending, at the latest */
#define ACK_BYTES       (8u << 20)         /* ... or once this many chunk frame bytes wait for their ACK */

static rgpu_server_config g_cfg;        /* the options (rgpu_server_init) */
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static volatile sig_atomic_t g_stop;
static rgpu_mem_pool g_pool;              /* g_cfg.max_memory: host memory of all sessions and messages */
static uint32_t g_conns;                  /* open connections (atomic) */

void rgpu_server_log(const char *fmt, ...) {
    if (g_cfg.quiet) return;
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_log_mu);
    fprintf(stderr, "rgpu-server: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    pthread_mutex_unlock(&g_log_mu);
    va_end(ap);
}
#define logf_ rgpu_server_log   /* this file says rgpu_server_log as logf_ */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------------------
 * Sessions (outlive connections; g_mu guards the table and attach state) */
typedef struct sent_result {      /* a RESULT payload, for a WAIT resent after a drop */
    struct sent_result *next;
    uint64_t op;
    bool earlier_conn;            /* sent on a connection that has since dropped */
    uint8_t *p;
    size_t n;
} sent_result;

struct conn;
typedef struct sess {
    struct sess *next;
    uint64_t id;                  /* random, nonzero (new_sess) */
    uint8_t secret[RGPU_SESSION_SECRET];   /* a resume must carry it (FORMAT.md §7.2) */
    bool has_secret;              /* false: dormant, the secret is still only in its journal */
    uint32_t no;                  /* the number in logs and --record file names */
    rgpu_session *s;              /* NULL: dormant, only its journal exists (after a restart) */
    rgpu_rgt *rec, *jnl;          /* open while attached: a detached session holds no file descriptors */
    char jnl_path[4200];          /* "": no journal (none, or it turned off) */
    char rec_path[4200];          /* the --record trace; "": none (or recording stopped) */
    char jnl_off[256];            /* why its journal turned off ("": it did not); the client is told (NOTICE) */
    struct conn *conn;            /* attached connection, or NULL (detached) */
    double detached_at;
    uint64_t mem_bytes;           /* storages + blobs, updated by the owning thread (atomic) */
    bool busy;                    /* its connection's thread is handling a message (atomic) */
    bool resuming;                /* a resume is taking it over (atomic): its old link's end is not a cancel */
    uint64_t jnl_since;           /* frame bytes journaled since the last checkpoint */
    uint64_t jnl_state;           /* bytes of state the last checkpoint held */
    bool jnl_force;               /* checkpoint at the next ACK: a file its journal reads was rewritten */
    sent_result *sent;            /* newest first */
    size_t sent_bytes;
    rgpu_backend_counters dev;    /* what its connections' threads made the backend do (backend.h counters) */
    uint64_t dev_ops;             /* over this many ops */
} sess;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t g_rebuild_mu = PTHREAD_MUTEX_INITIALIZER;
static sess *g_sessions;
static uint32_t g_next_no = 1;

static sess *find_sess_locked(uint64_t id) {
    for (sess *e = g_sessions; e; e = e->next)
        if (e->id == id) return e;
    return NULL;
}

static void unlink_sess_locked(sess *se) {
    for (sess **pp = &g_sessions; *pp; pp = &(*pp)->next)
        if (*pp == se) { *pp = se->next; return; }
}

static void remove_journal(const char *path) {
    if (!path[0]) return;
    char p[4300];
    remove(path);
    snprintf(p, sizeof p, "%s-wal", path); remove(p);
    snprintf(p, sizeof p, "%s-shm", path); remove(p);
}

/* An ending session's journal goes before the session leaves the table: a
 * resume that no longer finds the session must not rebuild it from its
 * journal either. */
static void drop_journal(sess *se) {
    rgpu_rgt_close(se->jnl);
    se->jnl = NULL;
    remove_journal(se->jnl_path);
    se->jnl_path[0] = 0;
}

/* The engine of a session (rgpu_session), with --profile DIR its records'
 * host spans kept, and written when it is freed (the session ends or
 * detaches, or a rebuild fails) to DIR/session-<no>.json, or
 * session-<no>.<k>.json for a later engine of the same session (after a
 * resume). Host spans only: the backend and its timers are shared.
 * Timestamps are CLOCK_MONOTONIC's, as the client's RGPU_PROFILE spans. */
static rgpu_session *engine_new(void) {
    rgpu_session *s = rgpu_session_new(g_cfg.backend, &g_cfg.limits);
    if (s && g_cfg.profile_dir) {
        rgpu_op_profile *p = calloc(1, sizeof *p);
        if (p) { p->timeline = true; rgpu_session_set_profile(s, p); }
    }
    return s;
}

static void engine_free(uint32_t no, rgpu_session *s) {
    rgpu_op_profile *p = rgpu_session_profile(s);
    rgpu_session_free(s);
    if (!p) return;
    if (!p->n_events) { free(p->events); free(p); return; }   /* nothing ran: no file */
    char path[4400], who[64], label[64];
    FILE *f = NULL;
    for (unsigned k = 1; k < 1000 && !f; k++) {
        if (k == 1) snprintf(path, sizeof path, "%s/session-%u.json", g_cfg.profile_dir, no);
        else snprintf(path, sizeof path, "%s/session-%u.%u.json", g_cfg.profile_dir, no, k);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);   /* never over an earlier one */
        if (fd >= 0 && !(f = fdopen(fd, "w"))) close(fd);
        if (fd < 0 && errno != EEXIST) break;
    }
    snprintf(who, sizeof who, "rgpu-server session %u", no);
    snprintf(label, sizeof label, "session %u", no);
    if (!f) logf_("session %u: WARNING: --profile: cannot create %s: %s", no, path, strerror(errno));
    else if (rgpu_op_profile_write_chrome(p, f, who, label, g_cfg.backend, true))
        logf_("session %u: WARNING: --profile: writing %s failed", no, path);
    free(p->events);
    free(p);
}

/* Free a session that is no longer in the table; its journal goes too. */
static void sess_destroy(sess *se) {
    engine_free(se->no, se->s);
    rgpu_rgt_close(se->rec);
    drop_journal(se);
    while (se->sent) { sent_result *r = se->sent; se->sent = r->next; rgpu_mem_pool_give(&g_pool, r->n); free(r->p); free(r); }
    free(se);
}

static void log_stats(const char *why) {
    uint64_t n = 0, detached = 0, bytes = 0;
    pthread_mutex_lock(&g_mu);
    for (sess *e = g_sessions; e; e = e->next) {
        if (!e->s) continue;
        n++;
        if (!e->conn) detached++;
        bytes += __atomic_load_n(&e->mem_bytes, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&g_mu);
    logf_("stats (%s): sessions %llu (detached %llu), session bytes %llu, host memory %llu of %llu (--max-memory)",
          why, (unsigned long long)n, (unsigned long long)detached, (unsigned long long)bytes,
          (unsigned long long)rgpu_mem_pool_used(&g_pool), (unsigned long long)g_pool.limit);
}

static void sess_update_mem(sess *se) {
    __atomic_store_n(&se->mem_bytes, rgpu_session_held(se->s), __ATOMIC_RELAXED);
}

/* Free detached sessions whose grace period is over (main thread, 2/s). */
static void reap_expired(void) {
    double t = now_s();
    for (;;) {
        pthread_mutex_lock(&g_mu);
        sess *se = g_sessions;
        while (se && (se->conn || t - se->detached_at < g_cfg.grace)) se = se->next;
        bool had_journal = se && se->jnl_path[0];
        if (se) { unlink_sess_locked(se); drop_journal(se); }   /* detached: no file open */
        pthread_mutex_unlock(&g_mu);
        if (!se) return;
        uint64_t bytes = __atomic_load_n(&se->mem_bytes, __ATOMIC_RELAXED);
        logf_("session %u: no client came back within %g s (--grace): freed %llu bytes%s", se->no, g_cfg.grace,
              (unsigned long long)bytes, had_journal ? ", journal removed" : "");
        sess_destroy(se);
        log_stats("session expired");
    }
}

/* ---------------------------------------------------------------------------
 * A connection */
typedef struct deferred { struct deferred *next; rgpu_msg_header h; uint8_t *p; } deferred;

/* A blob arriving in BLOB_PART pieces (FORMAT.md §7.1), in order. buf NULL:
 * refused (over the memory limits); its remaining pieces are skipped. */
typedef struct part {
    struct part *next;
    rgpu_hash h;
    uint8_t *buf;
    uint64_t total, got;
} part;

typedef struct conn {
    int fd;
    uint32_t no;              /* for logs before a session is attached */
    char peer[80];            /* the peer's address, in every log line about the connection */
    sess *se;                 /* after the handshake */
    rgpu_session *s;          /* se->s */
    deferred *dq_head, *dq_tail;
    size_t ndeferred;
    bool sent_error;          /* an ERROR went out: the session ends */
    bool link_err;            /* a read or write on the socket failed: the peer is gone */
    double gone_at, polled_at; /* while a chunk runs: when the peer was first seen gone (0: not), last look */
    bool bye;
    bool welcomed;            /* WELCOME went out: NOTICEs may follow */
    uint64_t acked;           /* the last ACK's `applied` */
    double unacked_since;     /* when the oldest chunk applied and not yet acknowledged was (0: none) */
    uint64_t unacked_bytes;   /* their frame bytes */
    char why[256];            /* detail of the last failure inside a fetch, for the ERROR */
    part *parts;              /* blobs being assembled from BLOB_PART pieces */
} conn;

/* "session 3 (127.0.0.1:40312)" or, before a session, "connection 7 (…)". */
static const char *tag(const conn *c, char *buf, size_t n) {
    if (c->se) snprintf(buf, n, "session %u (%s)", c->se->no, c->peer);
    else snprintf(buf, n, "connection %u (%s)", c->no, c->peer);
    return buf;
}
#define TAG(c) tag((c), (char[120]){ 0 }, 120)

/* Every wire message's payload is host memory taken from the pool while it
 * is held (read, deferred, processed). */
static void msg_free(uint8_t *p, uint64_t len) {
    if (!p) return;
    free(p);
    rgpu_mem_pool_give(&g_pool, len);
}

static void part_free(conn *c, part *pt) {
    for (part **pp = &c->parts; *pp; pp = &(*pp)->next)
        if (*pp == pt) { *pp = pt->next; break; }
    if (pt->buf) { free(pt->buf); rgpu_mem_pool_give(&g_pool, pt->total); }
    free(pt);
}


/* An ERROR (FORMAT.md §7.1) of code with the formatted message, its text
 * in buf (NUL-terminated, cut at RGPU_MAX_ERROR_MSG bytes). */
static rgpu_msg_error error_msg(char buf[RGPU_MAX_ERROR_MSG + 1], int code, const char *fmt, va_list ap) {
    int n = vsnprintf(buf, RGPU_MAX_ERROR_MSG + 1, fmt, ap);
    if (n < 0) { n = 0; buf[0] = 0; }
    if (n > RGPU_MAX_ERROR_MSG) n = RGPU_MAX_ERROR_MSG;
    return (rgpu_msg_error){ .code = (uint32_t)code, .msg_len = (uint32_t)n, .msg = buf };
}

/* The same, sent on fd. */
static rgpu_status error_sendf(int fd, char buf[RGPU_MAX_ERROR_MSG + 1], int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static rgpu_status error_sendf(int fd, char buf[RGPU_MAX_ERROR_MSG + 1], int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    rgpu_msg_error e = error_msg(buf, code, fmt, ap);
    va_end(ap);
    return rgpu_msg_error_send(fd, &e);
}

static rgpu_status send_error(conn *c, int code, const char *fmt, ...) {
    char buf[RGPU_MAX_ERROR_MSG + 1];
    va_list ap;
    va_start(ap, fmt);
    rgpu_msg_error e = error_msg(buf, code, fmt, ap);
    va_end(ap);
    c->sent_error = true;
    logf_("%s: error %s: %s", TAG(c), rgpu_status_name(code), buf);
    return rgpu_msg_error_send(c->fd, &e);
}

/* The largest payload a message of this type can need: a CHUNK carries at
 * most --max-chunk raw bytes (compressed: zstd's bound), a BLOB at most
 * --max-message, anything else is small. */
static uint64_t max_payload(int type) {
    uint64_t m = g_cfg.max_msg;
    if (type == RGPU_MSG_CHUNK) m = 32 + RGPU_FRAME_HEADER + ZSTD_compressBound((size_t)g_cfg.max_chunk);
    else if (type == RGPU_MSG_BLOB_PART) m = 32 + RGPU_FRAME_HEADER + ZSTD_compressBound(RGPU_BLOB_PIECE);
    else if (type != RGPU_MSG_BLOB) m = MAX_SMALL_MSG;
    return m < g_cfg.max_msg ? m : g_cfg.max_msg;
}

/* Read one message. Its length is checked against the limit for its type
 * (--max-message, --max-chunk) and taken from the memory pool *before*
 * anything is reserved, with the offending size and the limit in the error. */
static rgpu_status recv_msg(conn *c, rgpu_msg_header *h, uint8_t **p) {
    uint8_t hb[RGPU_WIRE_HEADER];
    *p = NULL;
    rgpu_status s = rgpu_io_read_all(c->fd, hb, sizeof hb);
    if (s) { c->link_err = true; return s; }
    if ((s = rgpu_wire_header_decode(hb, UINT64_MAX, h))) {
        if (s == RGPU_ERR_BAD_MESSAGE)   /* FORMAT.md §7.1: an unknown type is a protocol error */
            send_error(c, s, "reading message: unknown message type %u (this server, wire protocol %u, knows 1 to %d)",
                       h->type, RGPU_WIRE_VERSION, RGPU_MSG_TYPE_COUNT_ - 1);
        else
            send_error(c, s, "reading message: %s", rgpu_status_str(s));
        return s;
    }
    uint64_t lim = max_payload(h->type);
    if (h->len > lim || h->len > SIZE_MAX - 1) {
        send_error(c, RGPU_ERR_TOO_LARGE, "a %s message of %llu bytes is over this server's limit of %llu for it (%s)",
                   rgpu_msg_name(h->type), (unsigned long long)h->len, (unsigned long long)lim,
                   h->type == RGPU_MSG_CHUNK && lim < g_cfg.max_msg ? "--max-chunk" : "--max-message");
        return RGPU_ERR_TOO_LARGE;
    }
    if (!rgpu_mem_pool_take(&g_pool, h->len)) {
        send_error(c, RGPU_ERR_LIMIT, "a %s message of %llu bytes would pass the server's memory limit of %llu bytes "
                   "(--max-memory; %llu in use)", rgpu_msg_name(h->type), (unsigned long long)h->len,
                   (unsigned long long)g_pool.limit, (unsigned long long)rgpu_mem_pool_used(&g_pool));
        return RGPU_ERR_LIMIT;
    }
    uint8_t *b = malloc(h->len ? h->len : 1);
    if (!b) {
        rgpu_mem_pool_give(&g_pool, h->len);
        return send_error(c, RGPU_ERR_NOMEM, "no memory for a %llu-byte message", (unsigned long long)h->len), RGPU_ERR_NOMEM;
    }
    if ((s = rgpu_io_read_all(c->fd, b, h->len))) {
        msg_free(b, h->len);
        c->link_err = true;
        return s == RGPU_ERR_CLOSED && h->len ? RGPU_ERR_TRUNCATED : s;
    }
    *p = b;
    return RGPU_OK;
}

/* The peer is gone (a detach, not a protocol error): no ERROR to send. Only
 * a failed read or write on the socket says so (c->link_err): the same
 * codes from decoding a record (a record cut short inside a valid frame)
 * are protocol errors. */
static bool link_lost(const conn *c, rgpu_status s) {
    return c->link_err && (s == RGPU_ERR_CLOSED || s == RGPU_ERR_TRUNCATED || s == RGPU_ERR_IO);
}

/* Read the next message: deferred ones first. */
static rgpu_status next_msg(conn *c, rgpu_msg_header *h, uint8_t **p) {
    if (c->dq_head) {
        deferred *d = c->dq_head;
        c->dq_head = d->next;
        if (!c->dq_head) c->dq_tail = NULL;
        c->ndeferred--;
        *h = d->h; *p = d->p;
        free(d);
        return RGPU_OK;
    }
    return recv_msg(c, h, p);
}

/* What the client is told about the session's journal after WELCOME and when
 * it changes (FORMAT.md §7.2 NOTICE): it turned off (why), or the server keeps
 * none; nothing while it is on. */
static void send_journal_notice(conn *c) {
    const sess *se = c->se;
    rgpu_msg_notice m = { .code = RGPU_NOTICE_JOURNAL_OFF, .msg_len = (uint32_t)strlen(se->jnl_off), .msg = se->jnl_off };
    if (!se->jnl_off[0]) {
        if (g_cfg.journal_dir[0]) return;
        m = (rgpu_msg_notice){ .code = RGPU_NOTICE_JOURNAL_NONE, .msg = "" };
    }
    if (rgpu_msg_notice_send(c->fd, &m)) c->link_err = true;
}

/* The session's journal turned off: a write failed (a full disk, an I/O
 * error), or it could not be created or reopened (no file descriptor left).
 * The session goes on without one, loudly, rather than ending (training
 * keeps going; only a server restart would lose it), and its client is told
 * (NOTICE, once WELCOME went out). The file goes: it is consistent up to its
 * last commit, but missing chunks from here, so a restart must not rebuild
 * a wrong state from it. */
static void jnl_failed(conn *c, const char *why) {
    sess *se = c->se;
    snprintf(se->jnl_off, sizeof se->jnl_off, "%s", why && *why ? why : "journal write failed");
    logf_("session %u: WARNING: journal %s: %s: the session continues WITHOUT a journal (a server restart "
          "will not resume it)", se->no, se->jnl_path[0] ? se->jnl_path : "-", se->jnl_off);
    rgpu_rgt_close(se->jnl);
    se->jnl = NULL;
    remove_journal(se->jnl_path);
    se->jnl_path[0] = 0;
    if (c->welcomed) send_journal_notice(c);
}

/* A write to a --record trace failed: recording stops there; the trace keeps
 * everything up to its last commit (readable, replayable to that point). */
static void rec_failed(sess *se, const char *why) {
    logf_("session %u: WARNING: --record trace %s: %s: recording stopped; the trace holds the ops up to its last "
          "commit", se->no, se->rec_path, why);
    rgpu_rgt_close(se->rec);
    se->rec = NULL;
    se->rec_path[0] = 0;
}

/* Open a journal or --record trace for appending; a journal gets the
 * --journal-sync policy. */
static rgpu_status rgt_reopen(const char *path, bool journal, rgpu_rgt **t) {
    rgpu_status s = rgpu_rgt_open_append(path, t);
    if (!s && journal && (s = rgpu_rgt_set_sync(*t, g_cfg.journal_sync))) { rgpu_rgt_close(*t); *t = NULL; }
    return s;
}

/* Detaching: the session's files are closed (their pending writes
 * committed), so that sessions waiting --grace for their clients hold no file
 * descriptors; a resume reopens them (sess_reopen_files). */
static void sess_close_files(conn *c) {
    sess *se = c->se;
    if (se->rec && rgpu_rgt_flush(se->rec)) rec_failed(se, rgpu_rgt_errmsg(se->rec));
    if (se->jnl && rgpu_rgt_flush(se->jnl)) jnl_failed(c, rgpu_rgt_errmsg(se->jnl));
    rgpu_rgt_close(se->rec);
    rgpu_rgt_close(se->jnl);
    se->rec = se->jnl = NULL;
}

static void sess_reopen_files(conn *c) {
    sess *se = c->se;
    if (se->jnl_path[0] && !se->jnl && rgt_reopen(se->jnl_path, true, &se->jnl)) jnl_failed(c, rgpu_rgt_errmsg(NULL));
    if (se->rec_path[0] && !se->rec && rgt_reopen(se->rec_path, false, &se->rec)) rec_failed(se, rgpu_rgt_errmsg(NULL));
}

static void jnl_put_blob(conn *c, const rgpu_hash *h, uint64_t raw_len, const uint8_t *frame, size_t n) {
    if (c->se->rec && rgpu_rgt_put_blob(c->se->rec, h, raw_len, frame, n)) rec_failed(c->se, rgpu_rgt_errmsg(c->se->rec));
    if (c->se->jnl && rgpu_rgt_put_blob(c->se->jnl, h, raw_len, frame, n)) jnl_failed(c, rgpu_rgt_errmsg(c->se->jnl));
    c->se->jnl_since += n;
}

/* Between the records of a chunk (session cancel hook): has the client been
 * gone longer than --grace? Then nobody can resume the session any more and
 * the rest of the chunk is not worth running. Looks at the socket at most
 * every 100 ms; a link cut by a resume taking the session over is no cancel
 * (the resume waits for the chunk instead). */
static bool peer_gone_too_long(void *ud) {
    conn *c = ud;
    double t = now_s();
    if (t - c->polled_at < 0.1) return c->gone_at > 0 && t - c->gone_at > g_cfg.grace;
    c->polled_at = t;
    if (__atomic_load_n(&c->se->resuming, __ATOMIC_RELAXED)) return false;
    struct pollfd pf = { .fd = c->fd, .events = POLLRDHUP };
    if (!c->gone_at && poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR))) c->gone_at = t;
    return c->gone_at > 0 && t - c->gone_at > g_cfg.grace;
}

/* ---------------------------------------------------------------------------
 * Journal compaction: once a session's journal has grown by --journal-compact
 * bytes (and by twice its last checkpoint) since its last checkpoint, the
 * session's state is written into it as a checkpoint (FORMAT.md §7.3) and
 * everything older goes: a long run's journal stays about the size of its
 * state, not of its history. */
typedef struct ckput { rgpu_rgt *t; rgpu_hash *keep; size_t n, cap; } ckput;

static rgpu_status ck_put(void *ud, const rgpu_hash *h, const void *data, size_t n) {
    ckput *cp = ud;
    if (cp->n == cp->cap) {
        size_t cap = cp->cap ? 2 * cp->cap : 64;
        rgpu_hash *k = realloc(cp->keep, cap * sizeof *k);
        if (!k) return RGPU_ERR_NOMEM;
        cp->keep = k; cp->cap = cap;
    }
    cp->keep[cp->n++] = *h;
    rgpu_buf f = { 0 };
    rgpu_status s = rgpu_frame_compress(data, n, 1, &f);
    if (!s) s = rgpu_rgt_put_blob(cp->t, h, n, f.p, f.len);
    rgpu_buf_free(&f);
    return s;
}

static void jnl_compact(conn *c) {
    sess *se = c->se;
    uint64_t want = g_cfg.compact > 2 * se->jnl_state ? g_cfg.compact : 2 * se->jnl_state;
    if (!se->jnl || (se->jnl_since < want && !se->jnl_force)) return;
    double t0 = now_s();
    uint64_t op = rgpu_session_applied(c->s), state = 0, results_from = op;
    ckput cp = { se->jnl, NULL, 0, 0 };
    rgpu_buf ck = { 0 };
    rgpu_status s = rgpu_session_checkpoint(c->s, ck_put, &cp, &ck, &state);
    rgpu_hash h = rgpu_hash_bytes(ck.p, ck.len);
    char hex[33], num[24];
    rgpu_hash_hex(&h, hex);
    snprintf(num, sizeof num, "%llu", (unsigned long long)op);
    if (!s) s = ck_put(&cp, &h, ck.p, ck.len);
    if (!s) s = rgpu_rgt_set_meta(se->jnl, "checkpoint_hash", hex);
    if (!s) s = rgpu_rgt_set_meta(se->jnl, "checkpoint_op", num);
    /* results a resent WAIT may still ask for stay */
    pthread_mutex_lock(&g_mu);
    for (sent_result *r = se->sent; r; r = r->next) if (r->op < results_from) results_from = r->op;
    pthread_mutex_unlock(&g_mu);
    if (!s) s = rgpu_rgt_compact(se->jnl, op, cp.keep, cp.n, results_from);
    free(cp.keep);
    rgpu_buf_free(&ck);
    if (s == RGPU_ERR_LIMIT || s == RGPU_ERR_NOMEM) {   /* no room for it now: later */
        logf_("session %u: journal checkpoint skipped at op %llu: %s", se->no, (unsigned long long)op, rgpu_status_str(s));
        se->jnl_state = se->jnl_since;
        se->jnl_since = 0;
        se->jnl_force = false;
        return;
    }
    if (s) { jnl_failed(c, rgpu_rgt_errmsg(se->jnl)); return; }
    struct stat st;
    long long size = stat(se->jnl_path, &st) == 0 ? (long long)st.st_size : -1;
    logf_("session %u: journal compacted at op %llu: checkpoint of %llu state bytes in %.3f s, journal file %lld bytes",
          se->no, (unsigned long long)op, (unsigned long long)state, now_s() - t0, size);
    se->jnl_state = state;
    se->jnl_since = 0;
    se->jnl_force = false;
}

/* A BLOB message's blob: inflated only when it fits in max_n bytes (else
 * RGPU_ERR_LIMIT, *n its size), hash checked, then (and only then) kept in
 * the journal and the --record trace. */
static rgpu_status blob_from_msg(conn *c, const uint8_t *p, uint64_t len, uint64_t max_n, rgpu_hash *h,
                                 uint8_t **data, size_t *n) {
    *data = NULL; *n = 0;
    rgpu_msg_blob m;
    rgpu_status s = rgpu_msg_blob_decode(p, len, &m);
    if (s) return s;
    *h = m.hash;
    s = rgpu_frame_decompress(m.frame, m.frame_len, max_n < RGPU_MAX_BLOB_RAW ? max_n : RGPU_MAX_BLOB_RAW, data, n);
    if (s == RGPU_ERR_TOO_LARGE && *n <= RGPU_MAX_BLOB_RAW) return RGPU_ERR_LIMIT;
    if (s) return s;
    rgpu_hash real = rgpu_hash_bytes(*data, *n);
    if (!rgpu_hash_eq(&real, h)) { free(*data); *data = NULL; return RGPU_ERR_BAD_CHECKSUM; }
    jnl_put_blob(c, h, *n, m.frame, m.frame_len);
    return RGPU_OK;
}

/* One BLOB_PART: the piece of the blob `hash` (total bytes) at offset.
 * Pieces of a blob come in order (offset == what arrived; offset
 * 0 starts it again, as after a resume). The whole blob is taken from the
 * pool at its first piece, or refused (over the session's room: its pieces
 * are then skipped, *n = total, RGPU_ERR_LIMIT once); when the last piece
 * arrived, its hash is checked, it is journaled (compressed again, whole)
 * and handed over: *data (owned by the caller, no longer in the pool), *h. */
static rgpu_status blob_part(conn *c, const uint8_t *p, uint64_t len, rgpu_hash *h, uint8_t **data, size_t *n) {
    *data = NULL; *n = 0;
    rgpu_msg_blob_part m;
    rgpu_status s = rgpu_msg_blob_part_decode(p, len, &m);
    if (s) return s;
    *h = m.hash;
    uint64_t total = m.total, off = m.offset;
    part *pt = c->parts;
    while (pt && !rgpu_hash_eq(&pt->h, h)) pt = pt->next;
    if (pt && (off == 0 || pt->total != total)) { part_free(c, pt); pt = NULL; }
    if (!pt) {
        if (off != 0) return RGPU_ERR_SEQUENCE;
        int k = 0;
        for (part *q = c->parts; q; q = q->next)
            if (++k >= 16 && q->next) { part_free(c, q->next); break; }   /* at most 16 at once: the oldest goes */
        if (!(pt = calloc(1, sizeof *pt))) return RGPU_ERR_NOMEM;
        pt->h = *h; pt->total = total;
        pt->next = c->parts;
        c->parts = pt;
        if (total <= rgpu_session_room(c->s, NULL, 0) && rgpu_mem_pool_take(&g_pool, total)) {
            if (!(pt->buf = malloc(total))) { rgpu_mem_pool_give(&g_pool, total); part_free(c, pt); return RGPU_ERR_NOMEM; }
        }
    }
    if (off != pt->got) return RGPU_ERR_SEQUENCE;
    uint8_t *raw;
    size_t rn;
    s = rgpu_frame_decompress(m.frame, m.frame_len, total - off, &raw, &rn);
    if (s) return s == RGPU_ERR_TOO_LARGE ? RGPU_ERR_BAD_MESSAGE : s;
    if (!rn) { free(raw); return RGPU_ERR_BAD_MESSAGE; }
    if (pt->buf) memcpy(pt->buf + off, raw, rn);
    free(raw);
    pt->got += rn;
    if (pt->got < total) return RGPU_OK;
    if (!pt->buf) {   /* refused: all its pieces are in */
        *n = total;
        part_free(c, pt);
        return RGPU_ERR_LIMIT;
    }
    rgpu_hash real = rgpu_hash_bytes(pt->buf, total);
    if (!rgpu_hash_eq(&real, h)) { part_free(c, pt); return RGPU_ERR_BAD_CHECKSUM; }
    if (c->se->rec || c->se->jnl) {
        rgpu_buf f = { 0 };
        if (!rgpu_frame_compress(pt->buf, total, 1, &f)) jnl_put_blob(c, h, total, f.p, f.len);
        rgpu_buf_free(&f);
    }
    *data = pt->buf; *n = total;
    pt->buf = NULL;
    rgpu_mem_pool_give(&g_pool, total);   /* the session takes it (put_blob) or the fetch's caller */
    part_free(c, pt);
    return RGPU_OK;
}

/* A blob that arrived whole (BLOB) or completed (BLOB_PART) while nobody
 * asked for it: kept while the session has room, else dropped (NEED asks
 * again when it is needed). */
static rgpu_status keep_pushed(conn *c, const rgpu_hash *h, rgpu_status s, uint8_t *d, size_t dn) {
    if (!s && d) s = rgpu_session_put_blob(c->s, h, d, dn);
    if (s == RGPU_ERR_LIMIT) { logf_("%s: a pushed blob of %zu bytes dropped: over the memory limits", TAG(c), dn); s = RGPU_OK; }
    return s;
}

/* Session callback: an UPLOAD needs a blob we don't have. Errors from here
 * are reported by the caller (handle_chunk; the session for LIMIT). */
static rgpu_status fetch_blob(void *ud, const rgpu_hash *want, uint64_t max_n, uint8_t **data, size_t *n) {
    conn *c = ud;
    rgpu_status s = rgpu_msg_need_send(c->fd, &(rgpu_msg_need){ *want });
    if (s) { c->link_err = true; return s; }
    for (;;) {
        rgpu_msg_header h;
        uint8_t *p;
        if ((s = recv_msg(c, &h, &p))) return s;
        if (h.type == RGPU_MSG_BLOB) {
            rgpu_hash got;
            uint8_t *d;
            size_t dn;
            rgpu_msg_blob bm;
            bool wanted = !rgpu_msg_blob_decode(p, h.len, &bm) && rgpu_hash_eq(&bm.hash, want);
            s = blob_from_msg(c, p, h.len, wanted ? max_n : rgpu_session_room(c->s, NULL, 0), &got, &d, &dn);
            msg_free(p, h.len);
            if (wanted) { *data = d; *n = dn; return s; }
            if (s && s != RGPU_ERR_LIMIT) return rgpu_op_fail(c->why, sizeof c->why, s, "BLOB: %s", rgpu_status_str(s));
            if ((s = keep_pushed(c, &got, s, d, dn))) return s;
            continue;
        }
        if (h.type == RGPU_MSG_BLOB_PART) {
            rgpu_hash got;
            uint8_t *d;
            size_t dn;
            s = blob_part(c, p, h.len, &got, &d, &dn);
            msg_free(p, h.len);
            bool wanted = rgpu_hash_eq(&got, want);
            if (s && s != RGPU_ERR_LIMIT) return rgpu_op_fail(c->why, sizeof c->why, s, "BLOB_PART: %s", rgpu_status_str(s));
            if (wanted && (d || s)) {
                if (!s && dn > max_n) { free(d); d = NULL; s = RGPU_ERR_LIMIT; }
                *data = d; *n = dn;
                return s;
            }
            if ((s = keep_pushed(c, &got, s, d, dn))) return s;
            continue;
        }
        if (h.type == RGPU_MSG_ERROR || h.type == RGPU_MSG_BYE) { msg_free(p, h.len); return RGPU_ERR_MISSING_BLOB; }
        if (c->ndeferred >= MAX_DEFERRED) {
            msg_free(p, h.len);
            return rgpu_op_fail(c->why, sizeof c->why, RGPU_ERR_TOO_LARGE, "%u messages sent while the server waits for a blob (at most %u)",
                     MAX_DEFERRED + 1, MAX_DEFERRED);
        }
        deferred *dm = calloc(1, sizeof *dm);
        if (!dm) { msg_free(p, h.len); return RGPU_ERR_NOMEM; }
        dm->h = h; dm->p = p;
        if (c->dq_tail) c->dq_tail->next = dm; else c->dq_head = dm;
        c->dq_tail = dm;
        c->ndeferred++;
    }
}

/* ---------------------------------------------------------------------------
 * Group commit (FORMAT.md §7.2, §7.3). An ACK, and a RESULT (which covers
 * its op's chunk), go out only after the commit that holds their chunks: one
 * commit -- under --journal-sync full one fsync -- for all the chunks applied
 * since the last ACK. The loop commits when a WAIT is answered, when the
 * client has sent nothing for ACK_IDLE (it waits, or its backlog is full), and
 * while it keeps sending, ACK_MAX_DELAY after the oldest unacknowledged chunk
 * or once ACK_BYTES of them wait: a training step (its chunks come at least
 * every RGPU_CHUNK_MS) that ends in a wait pays one fsync. */
static void commit(conn *c) {
    sess *se = c->se;
    if (se->rec && rgpu_rgt_flush(se->rec)) rec_failed(se, rgpu_rgt_errmsg(se->rec));
    if (se->jnl && rgpu_rgt_flush(se->jnl)) jnl_failed(c, rgpu_rgt_errmsg(se->jnl));
}

/* Commit, then ACK(applied) when chunks wait for one (or always: force),
 * then maybe compact the journal. */
static rgpu_status commit_and_ack(conn *c, bool force) {
    commit(c);
    bool due = force || c->unacked_since > 0;
    c->unacked_since = 0;
    c->unacked_bytes = 0;
    if (!due) return RGPU_OK;
    c->acked = rgpu_session_applied(c->s);
    rgpu_status s = rgpu_msg_ack_send(c->fd, &(rgpu_msg_ack){ c->acked });
    if (s) c->link_err = true;
    else jnl_compact(c);
    return s;
}

/* A chunk was applied: acknowledged at once when there is nothing to commit,
 * else at the group's commit. */
static rgpu_status chunk_applied(conn *c, size_t frame_len) {
    if (!c->unacked_since) c->unacked_since = now_s();
    c->unacked_bytes += frame_len;
    return c->se->jnl || c->se->rec ? RGPU_OK : commit_and_ack(c, false);
}

/* After a message, with chunks waiting for their ACK: is the group due
 * (ACK_MAX_DELAY or ACK_BYTES reached)? Before reading the next one: wait for
 * it at most ACK_IDLE (and not past ACK_MAX_DELAY), committing when none came. */
static bool commit_due(const conn *c) {
    return c->unacked_since && (now_s() - c->unacked_since >= ACK_MAX_DELAY || c->unacked_bytes >= ACK_BYTES);
}

static rgpu_status commit_unless_input(conn *c) {
    if (!c->unacked_since || c->dq_head) return RGPU_OK;
    double left = c->unacked_since + ACK_MAX_DELAY - now_s();
    if (left > ACK_IDLE) left = ACK_IDLE;
    struct pollfd pf = { .fd = c->fd, .events = POLLIN };
    int r = left > 0 ? poll(&pf, 1, (int)(left * 1000) + 1) : 0;
    return r == 0 ? commit_and_ack(c, false) : RGPU_OK;   /* input (or a hangup, or EINTR): read it */
}

/* Chunks apply whole: a chunk ending at or before `applied` is a resend and
 * is dropped (but acknowledged, so the client frees it); one starting
 * anywhere but at `applied` is a sequence error. */
static rgpu_status handle_chunk(conn *c, const uint8_t *p, uint64_t len) {
    rgpu_msg_chunk m;
    rgpu_status s = rgpu_msg_chunk_decode(p, len, &m);
    if (s) return send_error(c, s, s == RGPU_ERR_RESERVED ? "CHUNK reserved field not zero" : "CHUNK shorter than its header"), s;
    uint64_t first = m.first_op;
    uint32_t count = m.count;
    rgpu_hash h = m.hash;
    uint64_t applied = rgpu_session_applied(c->s);
    if (count && first + count > first && first + count <= applied) return commit_and_ack(c, true);   /* resent: drop */
    if (first != applied) {
        if (first < applied)
            return send_error(c, RGPU_ERR_SEQUENCE, "CHUNK of ops %llu..%llu straddles op %llu, the next one to apply "
                              "(chunks are resent whole)", (unsigned long long)first,
                              (unsigned long long)(first + count - 1), (unsigned long long)applied), RGPU_ERR_SEQUENCE;
        return send_error(c, RGPU_ERR_SEQUENCE, "CHUNK starts at op %llu, expected %llu",
                          (unsigned long long)first, (unsigned long long)applied), RGPU_ERR_SEQUENCE;
    }
    uint8_t *raw;
    size_t n;
    s = rgpu_frame_decompress(m.frame, m.frame_len, g_cfg.max_chunk, &raw, &n);
    if (s == RGPU_ERR_TOO_LARGE)   /* n: the raw size the frame declares */
        return send_error(c, s, "CHUNK at op %llu: %llu raw bytes over this server's limit of %llu (--max-chunk)",
                          (unsigned long long)first, (unsigned long long)n, (unsigned long long)g_cfg.max_chunk), s;
    if (s) return send_error(c, s, "CHUNK at op %llu: %s", (unsigned long long)first, rgpu_status_str(s)), s;
    rgpu_hash got = rgpu_hash_bytes(raw, n);
    if (!rgpu_hash_eq(&got, &h)) { free(raw); return send_error(c, RGPU_ERR_BAD_CHECKSUM, "CHUNK hash mismatch"), RGPU_ERR_BAD_CHECKSUM; }
    /* A record that does not decode is a protocol error, found before
     * anything is fetched, journaled or run; the checked records are what
     * prefetch_checked and run_checked use (decoded once). */
    if ((s = rgpu_session_check_chunk(c->s, raw, n, first, count, c->why, sizeof c->why))) {
        free(raw);
        return send_error(c, s, "CHUNK at op %llu: %s", (unsigned long long)first, c->why), s;
    }
    /* Fetch missing blobs first: if the link drops now, nothing was applied. */
    c->why[0] = 0;
    s = rgpu_session_prefetch_checked(c->s);
    if (s) {
        free(raw);
        if (link_lost(c, s)) return s;
        return send_error(c, s, "CHUNK at op %llu: %s%s%s", (unsigned long long)first, rgpu_status_str(s),
                          c->why[0] ? ": " : "", c->why), s;
    }
    if (c->se->rec && rgpu_rgt_put_chunk(c->se->rec, &h, first, count, n, m.frame, m.frame_len))
        rec_failed(c->se, rgpu_rgt_errmsg(c->se->rec));
    if (c->se->jnl && rgpu_rgt_put_chunk(c->se->jnl, &h, first, count, n, m.frame, m.frame_len))
        jnl_failed(c, rgpu_rgt_errmsg(c->se->jnl));
    c->se->jnl_since += m.frame_len;
    c->gone_at = c->polled_at = 0;
    s = rgpu_session_run_checked(c->s);   /* the chunk check_chunk took above, decoded there */
    free(raw);
    if (s == RGPU_ERR_TIMEOUT) {   /* cancelled: mid-chunk, the session cannot go on */
        c->sent_error = true;
        logf_("%s: client gone for more than %g s (--grace) inside the chunk at op %llu: the rest of it is "
              "cancelled at op %llu and the session ends", TAG(c), g_cfg.grace, (unsigned long long)first,
              (unsigned long long)rgpu_session_applied(c->s));
        return s;
    }
    if (s) return send_error(c, s, "CHUNK at op %llu: %s", (unsigned long long)first, rgpu_status_str(s)), s;
    /* rgpu.load then rgpu.save of one file: the journal's replay could not
     * read what it read, so its state goes into the journal at this ACK */
    if (rgpu_session_take_rewrote(c->s)) c->se->jnl_force = true;
    sess_update_mem(c->se);
    return chunk_applied(c, m.frame_len);   /* committed before its ACK */
}

/* Keep a copy of a RESULT so that a WAIT resent after a drop gets it again
 * (the session hands each result out once). Bounded by RESULT_KEEP. */
static void keep_result(sess *se, const rgpu_msg_result *m) {
    size_t n = rgpu_msg_result_size(m);
    if (n > RESULT_KEEP || !rgpu_mem_pool_take(&g_pool, n)) return;
    sent_result *r = calloc(1, sizeof *r);
    if (!r || !(r->p = malloc(n))) { free(r); rgpu_mem_pool_give(&g_pool, n); return; }
    r->n = rgpu_msg_result_encode(m, r->p, n); r->op = m->op;
    pthread_mutex_lock(&g_mu);
    r->next = se->sent;
    se->sent = r;
    se->sent_bytes += r->n;
    /* drop the oldest beyond the budget */
    while (se->sent_bytes > RESULT_KEEP) {
        sent_result **pp = &se->sent;
        while ((*pp)->next) pp = &(*pp)->next;
        se->sent_bytes -= (*pp)->n;
        rgpu_mem_pool_give(&g_pool, (*pp)->n);
        free((*pp)->p); free(*pp); *pp = NULL;
    }
    pthread_mutex_unlock(&g_mu);
}

static sent_result *take_kept_result(sess *se, uint64_t op) {
    sent_result *found = NULL;
    pthread_mutex_lock(&g_mu);
    for (sent_result **pp = &se->sent; *pp; pp = &(*pp)->next)
        if ((*pp)->op == op && (*pp)->earlier_conn) { found = *pp; *pp = found->next; se->sent_bytes -= found->n; break; }
    pthread_mutex_unlock(&g_mu);
    return found;
}

/* The result of a wait, into the journal and the --record trace (committed
 * with the chunks before the RESULT goes out: commit_and_ack). */
static void jnl_put_result(conn *c, uint64_t op, int status, const uint8_t *data, size_t n) {
    sess *se = c->se;
    if (se->rec && rgpu_rgt_put_result(se->rec, op, status, data, n)) rec_failed(se, rgpu_rgt_errmsg(se->rec));
    if (se->jnl && rgpu_rgt_put_result(se->jnl, op, status, data, n)) jnl_failed(c, rgpu_rgt_errmsg(se->jnl));
}

static rgpu_status handle_wait(conn *c, const uint8_t *p, uint64_t len) {
    rgpu_msg_wait wm;
    if (rgpu_msg_wait_decode(p, len, &wm))
        return send_error(c, RGPU_ERR_BAD_MESSAGE, "WAIT payload is %llu bytes", (unsigned long long)len), RGPU_ERR_BAD_MESSAGE;
    uint64_t op = wm.op_index;
    sent_result *kept = take_kept_result(c->se, op);
    if (kept) {   /* answered on a connection that dropped: answer the same again */
        rgpu_status s = rgpu_wire_send(c->fd, RGPU_MSG_RESULT, kept->p, kept->n, NULL, 0);
        rgpu_mem_pool_give(&g_pool, kept->n);
        free(kept->p); free(kept);
        return s;
    }
    int status;
    uint64_t err_op;
    char msg[RGPU_MAX_ERROR_MSG + 1];
    uint8_t *data;
    size_t n;
    rgpu_status s = rgpu_session_take_result(c->s, op, &status, &err_op, msg, sizeof msg, &data, &n);
    if (s) return send_error(c, s, "WAIT for op %llu, only %llu applied", (unsigned long long)op,
                             (unsigned long long)rgpu_session_applied(c->s)), s;
    rgpu_msg_result r = { .op = op, .status = (uint32_t)status, .err_op = err_op, .msg_len = (uint32_t)strlen(msg),
                          .msg = msg, .data = data, .data_len = n };
    keep_result(c->se, &r);
    jnl_put_result(c, op, status, data, n);
    s = commit_and_ack(c, false);   /* the RESULT covers its op's chunk: committed first */
    if (!s) s = rgpu_msg_result_send(c->fd, &r);
    free(data);
    return s;
}

/* ---------------------------------------------------------------------------
 * Journal: create for a new session, rebuild a session after a restart */
static void journal_path(uint64_t id, char *out, size_t n) {
    snprintf(out, n, "%s/session-%016llx.rgt", g_cfg.journal_dir, (unsigned long long)id);
}

typedef struct rebuild_ctx {
    rgpu_rgt *t;
    uint64_t *answered;       /* the ops the journal holds a result of, sorted */
    size_t n_answered, cap;
    rgpu_status err;
} rebuild_ctx;

static rgpu_status journal_fetch(void *ud, const rgpu_hash *h, uint64_t max_n, uint8_t **data, size_t *n) {
    rebuild_ctx *r = ud;
    uint8_t *frame;
    size_t fn;
    rgpu_status s = rgpu_rgt_get_blob(r->t, h, &frame, &fn);
    if (s) return s;
    s = rgpu_frame_decompress(frame, fn, max_n < RGPU_MAX_BLOB_RAW ? max_n : RGPU_MAX_BLOB_RAW, data, n);
    free(frame);
    if (s == RGPU_ERR_TOO_LARGE && *n <= RGPU_MAX_BLOB_RAW) return RGPU_ERR_LIMIT;
    if (s) return s;
    rgpu_hash got = rgpu_hash_bytes(*data, *n);
    if (!rgpu_hash_eq(&got, h)) { free(*data); *data = NULL; return RGPU_ERR_BAD_CHECKSUM; }
    return RGPU_OK;
}

static int collect_answered(void *ud, uint64_t op, int status, const void *data, size_t n) {
    (void)status; (void)data; (void)n;
    rebuild_ctx *r = ud;
    if (r->n_answered == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 256;
        uint64_t *v = realloc(r->answered, cap * sizeof *v);
        if (!v) { r->err = RGPU_ERR_NOMEM; return 1; }
        r->answered = v;
        r->cap = cap;
    }
    r->answered[r->n_answered++] = op;
    return 0;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The session's question while it is rebuilt: was op's result journaled
 * (a SAVE_ZIP so answered wrote its file, and is not run again)? */
static bool was_answered(void *ud, uint64_t op) {
    const rebuild_ctx *r = ud;
    return r->n_answered && bsearch(&op, r->answered, r->n_answered, sizeof op, cmp_u64) != NULL;
}

/* The waits the journal says were answered: take their results out of the
 * rebuilt session (in op order, once the op is applied) and keep them for a
 * resent WAIT. Error details other than the status are not journaled. */
typedef struct result_walk { sess *se; uint64_t upto; uint64_t next_op; bool more; } result_walk;

static int take_journaled_result(void *ud, uint64_t op, int status, const void *data, size_t n) {
    result_walk *w = ud;
    if (op < w->next_op) return 0;
    if (op >= w->upto) { w->more = true; return 1; }
    w->next_op = op + 1;
    int st;
    uint64_t eo;
    char msg[256];
    uint8_t *d;
    size_t dn;
    if (rgpu_session_take_result(w->se->s, op, &st, &eo, msg, sizeof msg, &d, &dn) == RGPU_OK) free(d);
    char m[128];
    int ml = status ? snprintf(m, sizeof m, "op %llu failed (%s); details lost in a server restart",
                               (unsigned long long)op, rgpu_status_name(status)) : 0;
    rgpu_msg_result r = { .op = op, .status = (uint32_t)status, .err_op = op, .msg_len = (uint32_t)ml, .msg = m,
                          .data = data, .data_len = status ? 0 : n };
    keep_result(w->se, &r);
    return 0;
}

/* Replay se->jnl_path into a fresh session (deterministic kernels: the same
 * state), then reopen the journal for appending. why gets the reason on
 * failure. */
static rgpu_status rebuild_from_journal(sess *se, char *why, size_t whylen) {
    rgpu_rgt *t;
    rgpu_status s = rgpu_rgt_open(se->jnl_path, &t);
    if (s) {
        return rgpu_op_fail(why, whylen, s, "its journal cannot be read: %s (%s)", rgpu_rgt_errmsg(NULL), rgpu_status_name(s));
    }
    rebuild_ctx rc = { .t = t };
    if ((s = rgpu_rgt_each_result(t, collect_answered, &rc)) || (s = rc.err)) {
        rgpu_rgt_close(t);
        free(rc.answered);
        return rgpu_op_fail(why, whylen, s, "its journal's results cannot be read (%s)", rgpu_status_str(s));
    }
    qsort(rc.answered, rc.n_answered, sizeof *rc.answered, cmp_u64);
    se->s = engine_new();
    if (!se->s) { rgpu_rgt_close(t); free(rc.answered); return rgpu_op_fail(why, whylen, RGPU_ERR_NOMEM, "out of memory"); }
    rgpu_session_set_fetch(se->s, journal_fetch, &rc);
    rgpu_session_set_files(se->s, g_cfg.files, false);
    rgpu_session_set_rebuild(se->s, was_answered, &rc);
    uint64_t count = 0;
    result_walk w = { .se = se };
    char ckhex[64];
    if (rgpu_rgt_get_meta(t, "checkpoint_hash", ckhex, sizeof ckhex) == RGPU_OK) {   /* a compacted journal */
        rgpu_hash ch;
        uint8_t *ck = NULL;
        size_t ckn = 0;
        s = rgpu_hash_from_hex(ckhex, &ch) ? RGPU_OK : RGPU_ERR_BAD_TRACE;
        if (!s) s = journal_fetch(&rc, &ch, UINT64_MAX, &ck, &ckn);
        if (!s) s = rgpu_session_restore(se->s, ck, ckn);
        free(ck);
        if (s) {
            rgpu_rgt_close(t);
            free(rc.answered);
            return rgpu_op_fail(why, whylen, s, "its journal's checkpoint does not load (%s)", rgpu_status_str(s));
        }
        w.upto = rgpu_session_applied(se->s);
        rgpu_rgt_each_result(t, take_journaled_result, &w);
    }
    s = rgpu_rgt_stream_count(t, &count);
    for (uint64_t seq = 0; !s && seq < count; seq++) {
        rgpu_hash h;
        uint64_t first;
        uint32_t cnt;
        uint8_t *frame, *raw;
        size_t fn, n;
        if ((s = rgpu_rgt_get_stream(t, seq, &h, &first, &cnt, &frame, &fn))) break;
        s = rgpu_frame_decompress(frame, fn, RGPU_MAX_CHUNK_RAW, &raw, &n);
        free(frame);
        if (s) break;
        rgpu_hash got = rgpu_hash_bytes(raw, n);
        if (!rgpu_hash_eq(&got, &h)) s = RGPU_ERR_BAD_CHECKSUM;
        if (!s && first + cnt <= rgpu_session_applied(se->s)) { free(raw); continue; }
        if (!s) s = rgpu_session_run_chunk(se->s, raw, n, first, cnt);
        free(raw);
        if (s) break;
        w.upto = rgpu_session_applied(se->s);
        w.more = false;
        rgpu_rgt_each_result(t, take_journaled_result, &w);
    }
    rgpu_rgt_close(t);
    free(rc.answered);
    rgpu_session_set_rebuild(se->s, NULL, NULL);
    if (s && rgpu_session_stop_reason(se->s)[0]) {   /* a file it read is no longer the one it read */
        return rgpu_op_fail(why, whylen, s, "its journal cannot be replayed: %s", rgpu_session_stop_reason(se->s));
    }
    if (s) {
        return rgpu_op_fail(why, whylen, s, "its journal does not replay (%s)", rgpu_status_str(s));
    }
    if ((s = rgt_reopen(se->jnl_path, true, &se->jnl))) {
        return rgpu_op_fail(why, whylen, s, "its journal cannot be reopened: %s", rgpu_rgt_errmsg(NULL));
    }
    logf_("session %u: rebuilt from its journal %s: %llu chunks, %llu ops", se->no, se->jnl_path,
          (unsigned long long)count, (unsigned long long)rgpu_session_applied(se->s));
    return RGPU_OK;
}

/* n bytes from the kernel's random source; false when it fails. */
static bool random_bytes(void *p, size_t n) {
    uint8_t *b = p;
    while (n) {
        ssize_t r = getrandom(b, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        b += r;
        n -= (size_t)r;
    }
    return true;
}

static bool secret_is_zero(const uint8_t s[RGPU_SESSION_SECRET]) {
    uint8_t any = 0;
    for (int i = 0; i < RGPU_SESSION_SECRET; i++) any |= s[i];
    return any == 0;
}

/* Constant time: how long it takes says nothing about where a guess went wrong. */
static bool secret_eq(const uint8_t a[RGPU_SESSION_SECRET], const uint8_t b[RGPU_SESSION_SECRET]) {
    uint8_t diff = 0;
    for (int i = 0; i < RGPU_SESSION_SECRET; i++) diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}

/* A new session: a random id (nonzero, not held, no journal of that name)
 * and a random secret (never all zeros: zeros mean "none" in a HELLO).
 * NULL with why when out of memory or random bytes. */
static sess *new_sess(char *why, size_t whylen) {
    sess *se = calloc(1, sizeof *se);
    if (!se) { snprintf(why, whylen, "no memory for a session"); return NULL; }
    if (!random_bytes(se->secret, sizeof se->secret) || secret_is_zero(se->secret)) {
        snprintf(why, whylen, "no random bytes for the session's secret: %s", strerror(errno));
        free(se);
        return NULL;
    }
    se->has_secret = true;
    se->s = engine_new();
    if (!se->s) { snprintf(why, whylen, "no memory for a session"); free(se); return NULL; }
    rgpu_session_set_files(se->s, g_cfg.files, false);
    pthread_mutex_lock(&g_mu);
    for (;;) {
        uint64_t id = 0;
        if (!random_bytes(&id, sizeof id)) {
            pthread_mutex_unlock(&g_mu);
            snprintf(why, whylen, "no random bytes for the session's id: %s", strerror(errno));
            engine_free(se->no, se->s);
            free(se);
            return NULL;
        }
        char path[4200];
        if (g_cfg.journal_dir[0]) journal_path(id, path, sizeof path);
        if (id && !find_sess_locked(id) && (!g_cfg.journal_dir[0] || access(path, F_OK) != 0)) {
            se->id = id;
            break;
        }
    }
    se->no = g_next_no++;
    pthread_mutex_unlock(&g_mu);
    return se;
}

/* ---------------------------------------------------------------------------
 * Handshake: HELLO → WELCOME (new or resumed session) or ERROR */
static void token_current(char out[TOKEN_HEX + 1]);

static bool token_ok(const uint8_t *t, size_t n) {
    char tok[TOKEN_HEX + 1];
    token_current(tok);
    size_t want = strlen(tok);
    unsigned diff = (unsigned)(n != want);
    for (size_t i = 0; i < want; i++) diff |= (unsigned)((uint8_t)tok[i] ^ (i < n ? t[i] : 0));
    return diff == 0;
}

/* The journal meta key of a session's secret (32 hex digits; FORMAT.md §7.3). */
#define SECRET_META "session_secret"

/* The secret of session id as its journal keeps it; false with why when the
 * journal cannot be read or holds none. */
static bool journal_secret(uint64_t id, uint8_t out[RGPU_SESSION_SECRET], char *why, size_t whylen) {
    char path[4200], hex[64];
    journal_path(id, path, sizeof path);
    rgpu_rgt *t;
    rgpu_status s = rgpu_rgt_open(path, &t);
    if (s) {
        snprintf(why, whylen, "its journal cannot be read to check the session secret: %s (%s)", rgpu_rgt_errmsg(NULL),
                 rgpu_status_name(s));
        return false;
    }
    rgpu_hash h;
    bool ok = rgpu_rgt_get_meta(t, SECRET_META, hex, sizeof hex) == RGPU_OK && rgpu_hash_from_hex(hex, &h);
    rgpu_rgt_close(t);
    if (!ok) { snprintf(why, whylen, "its journal holds no session secret (meta %s)", SECRET_META); return false; }
    memcpy(out, h.b, RGPU_SESSION_SECRET);
    return true;
}

enum { SECRET_OK, SECRET_WRONG, SECRET_UNCHECKED, SECRET_NO_SESSION };

/* Does secret open session id? Checked before anything touches the session
 * (its connection, its journal): the secret from memory, or, for a session
 * only its journal holds (a server restarted on its --journal), from there.
 * SECRET_NO_SESSION when neither holds it; why says what is wrong. */
static int check_secret(uint64_t id, const uint8_t secret[RGPU_SESSION_SECRET], char *why, size_t whylen) {
    uint8_t want[RGPU_SESSION_SECRET];
    pthread_mutex_lock(&g_mu);
    sess *se = find_sess_locked(id);
    bool known = se && se->has_secret;
    if (known) memcpy(want, se->secret, sizeof want);
    pthread_mutex_unlock(&g_mu);
    if (!known) {
        char path[4200];
        if (g_cfg.journal_dir[0]) journal_path(id, path, sizeof path);
        if (!g_cfg.journal_dir[0] || access(path, F_OK) != 0) {
            if (!se) return SECRET_NO_SESSION;
            snprintf(why, whylen, "its journal is gone, and with it the session secret to check");
            return SECRET_UNCHECKED;
        }
        if (!journal_secret(id, want, why, whylen)) return SECRET_UNCHECKED;
    }
    if (secret_is_zero(secret)) {
        snprintf(why, whylen, "the HELLO carries no session secret (a resume must carry the secret of the session's "
                 "WELCOME: only its own client can resume it)");
        return SECRET_WRONG;
    }
    if (!secret_eq(secret, want)) {
        snprintf(why, whylen, "wrong session secret (only the client the session's WELCOME went to can resume it)");
        return SECRET_WRONG;
    }
    return SECRET_OK;
}

/* A rebuild that failed: back to dormant (no session state, no connection,
 * only its journal), reaped --grace after it was first left. */
static void sess_make_dormant(sess *se) {
    pthread_mutex_lock(&g_mu);
    rgpu_session *dead = se->s;
    sent_result *sent = se->sent;
    se->s = NULL;
    se->conn = NULL;
    se->sent = NULL;
    se->sent_bytes = 0;
    if (!se->detached_at) se->detached_at = now_s();
    pthread_mutex_unlock(&g_mu);
    engine_free(se->no, dead);
    while (sent) { sent_result *r = sent; sent = r->next; rgpu_mem_pool_give(&g_pool, r->n); free(r->p); free(r); }
}

/* Attach c to session id, once its secret is right: in memory (taking it
 * over from a connection that has not noticed its drop yet), or rebuilt from
 * a journal. A wrong secret leaves the session and its connection alone. */
static sess *resume(conn *c, uint64_t id, const uint8_t secret[RGPU_SESSION_SECRET], uint64_t last_ack) {
    char why[512] = "";
    int sc = check_secret(id, secret, why, sizeof why);
    if (sc == SECRET_WRONG || sc == SECRET_UNCHECKED) {
        send_error(c, sc == SECRET_WRONG ? RGPU_ERR_AUTH : RGPU_ERR_SESSION_LOST, "cannot resume session %016llx: %s",
                   (unsigned long long)id, why);
        return NULL;
    }
    /* Still attached to a connection that has not noticed its drop: cut it;
     * its thread detaches at its next read. While that thread is inside a
     * long op (busy), wait for the op, however long: the op's results belong
     * to the session being resumed. Idle, it gets 10 s. */
    pthread_mutex_lock(&g_mu);
    sess *se = find_sess_locked(id);
    if (se && se->conn) {
        __atomic_store_n(&se->resuming, true, __ATOMIC_RELAXED);
        shutdown(se->conn->fd, SHUT_RDWR);
        double t0 = now_s();
        while ((se = find_sess_locked(id)) && se->conn && !g_stop &&
               (__atomic_load_n(&se->busy, __ATOMIC_RELAXED) || now_s() - t0 < 10)) {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_nsec += 250000000;
            if (dl.tv_nsec >= 1000000000) { dl.tv_sec++; dl.tv_nsec -= 1000000000; }
            pthread_cond_timedwait(&g_cv, &g_mu, &dl);
        }
    }
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_lock(&g_rebuild_mu);
    pthread_mutex_lock(&g_mu);
    se = find_sess_locked(id);
    if (se && se->conn) snprintf(why, sizeof why, "it is still attached to another connection");
    if (!se && !why[0] && g_cfg.journal_dir[0]) {   /* a journal left by an earlier server process */
        char path[4200];
        journal_path(id, path, sizeof path);
        if (sc == SECRET_OK && access(path, F_OK) == 0 && (se = calloc(1, sizeof *se))) {
            se->id = id;
            se->no = g_next_no++;
            snprintf(se->jnl_path, sizeof se->jnl_path, "%s", path);
            se->next = g_sessions;
            g_sessions = se;
        }
    }
    if (se && !se->conn && !why[0]) se->conn = c;
    if (se && se->conn == c && !se->has_secret) {   /* dormant: check_secret read it from the journal */
        memcpy(se->secret, secret, sizeof se->secret);
        se->has_secret = true;
    }
    pthread_mutex_unlock(&g_mu);
    if (se && se->conn == c && !se->s) {
        rgpu_status s = rebuild_from_journal(se, why, sizeof why);
        if (s && (s == RGPU_ERR_CHANGED || s == RGPU_ERR_PATH)) {
            /* a file it read changed or is gone: the session stays dormant,
             * its journal kept for --grace, should the file come back */
            sess_make_dormant(se);
            se = NULL;
        } else if (s) {
            pthread_mutex_lock(&g_mu);
            unlink_sess_locked(se);
            pthread_mutex_unlock(&g_mu);
            sess_destroy(se);
            se = NULL;
        }
    } else if (!se && !why[0]) {
        snprintf(why, sizeof why, "this server does not hold it (it ended, its --grace period expired, or the "
                 "server restarted without its journal)");
    }
    pthread_mutex_unlock(&g_rebuild_mu);
    if (!se || se->conn != c) {
        send_error(c, RGPU_ERR_SESSION_LOST, "cannot resume session %016llx from op %llu: %s",
                   (unsigned long long)id, (unsigned long long)last_ack, why);
        return NULL;
    }
    pthread_mutex_lock(&g_mu);
    for (sent_result *r = se->sent; r; r = r->next) r->earlier_conn = true;
    __atomic_store_n(&se->resuming, false, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g_mu);
    logf_("session %u (%s): resumed at op %llu (client saw %llu acknowledged)", se->no, c->peer,
          (unsigned long long)rgpu_session_applied(se->s), (unsigned long long)last_ack);
    return se;
}

/* Read n bytes by an absolute deadline (CLOCK_MONOTONIC seconds): a peer
 * that trickles bytes gets no more time than one that sends nothing. */
static rgpu_status read_by(int fd, void *buf, size_t n, double deadline) {
    uint8_t *p = buf;
    size_t got = 0;
    while (got < n) {
        double left = deadline - now_s();
        if (left <= 0) return RGPU_ERR_TIMEOUT;
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        int r = poll(&pf, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return RGPU_ERR_IO;
        if (r == 0) continue;
        ssize_t k = read(fd, p + got, n - got);
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k < 0) return RGPU_ERR_IO;
        if (k == 0) return got ? RGPU_ERR_TRUNCATED : RGPU_ERR_CLOSED;
        got += (size_t)k;
    }
    return RGPU_OK;
}

/* HELLO, whole, within --handshake-timeout of the connection's accept. */
static rgpu_status recv_hello(conn *c, rgpu_msg_header *h, uint8_t **p) {
    double deadline = now_s() + g_cfg.hs_timeout;
    uint8_t hb[RGPU_WIRE_HEADER];
    *p = NULL;
    rgpu_status s = read_by(c->fd, hb, sizeof hb, deadline);
    if (!s) s = rgpu_wire_header_decode(hb, RGPU_MSG_HELLO_HEAD + RGPU_MAX_TOKEN_LEN, h);
    if (s) return s;
    uint8_t *b = malloc(h->len ? h->len : 1);
    if (!b) return RGPU_ERR_NOMEM;
    if ((s = read_by(c->fd, b, h->len, deadline))) { free(b); return s == RGPU_ERR_CLOSED && h->len ? RGPU_ERR_TRUNCATED : s; }
    *p = b;
    return RGPU_OK;
}

static sess *handshake(conn *c) {
    rgpu_msg_header h;
    uint8_t *p;
    rgpu_status s = recv_hello(c, &h, &p);
    if (s) {
        if (s == RGPU_ERR_TIMEOUT)
            send_error(c, s, "no complete HELLO within %g s (--handshake-timeout)", g_cfg.hs_timeout);
        else if (s != RGPU_ERR_CLOSED)
            send_error(c, s, "bad handshake: %s", rgpu_status_str(s));
        else
            logf_("%s: closed before its HELLO", TAG(c));
        return NULL;
    }
    sess *se = NULL;
    uint8_t table[16];
    rgpu_op_table_hash(table);
    /* a malformed token or trailer is named after the version and op table */
    rgpu_msg_hello m = { 0 };
    rgpu_status ms = h.type == RGPU_MSG_HELLO ? rgpu_msg_hello_decode(p, h.len, &m) : RGPU_ERR_BAD_MESSAGE;
    char cver[40] = "?";
    if (!ms && m.has_sw_version) snprintf(cver, sizeof cver, "%.*s", (int)m.sw_version_len, m.sw_version);
    char why[512] = "";
    if (h.type != RGPU_MSG_HELLO) {
        send_error(c, RGPU_ERR_BAD_MESSAGE, "expected HELLO, got %s", rgpu_msg_name(h.type));
    } else if (h.len >= 4 && m.version != RGPU_WIRE_VERSION) {   /* an older client's HELLO may be shorter */
        send_error(c, RGPU_ERR_BAD_VERSION, "client (rgpu %s) speaks wire protocol %u, this server (rgpu-server %s) "
                   "protocol %u", cver, m.version, RGPU_VERSION, RGPU_WIRE_VERSION);
    } else if (h.len < RGPU_MSG_HELLO_HEAD) {
        send_error(c, RGPU_ERR_BAD_MESSAGE, "HELLO of %llu bytes, shorter than its %d fixed bytes",
                   (unsigned long long)h.len, RGPU_MSG_HELLO_HEAD);
    } else if (memcmp(m.op_table, table, 16) != 0) {
        send_error(c, RGPU_ERR_OP_TABLE, "client and server were built from different ops.def (client: rgpu %s, op "
                   "table %02x%02x%02x%02x...; this server: rgpu-server %s, %d ops, op table %02x%02x%02x%02x...)",
                   cver, m.op_table[0], m.op_table[1], m.op_table[2], m.op_table[3], RGPU_VERSION, RGPU_OP_COUNT,
                   table[0], table[1], table[2], table[3]);
    } else if (ms) {
        send_error(c, RGPU_ERR_BAD_MESSAGE, "HELLO token_len %u does not match its payload", m.token_len);
    } else if (!g_cfg.no_auth && !token_ok(m.token, m.token_len)) {
        send_error(c, RGPU_ERR_AUTH, m.token_len == 0 ? "no token: set RGPU_TOKEN or RGPU_TOKEN_FILE to the server's token file"
                                                      : "wrong token (compare RGPU_TOKEN / RGPU_TOKEN_FILE with the server's token file)");
    } else if (m.session) {
        se = resume(c, m.session, m.secret, m.last_ack);
    } else if (!(se = new_sess(why, sizeof why))) {
        send_error(c, RGPU_ERR_NOMEM, "%s", why);
    } else {
        se->conn = c;
        c->se = se;
        if (g_cfg.journal_dir[0]) {
            journal_path(se->id, se->jnl_path, sizeof se->jnl_path);
            rgpu_status js = rgpu_rgt_create_new(se->jnl_path, "rgpu-server --journal", &se->jnl);
            if (js) {
                /* a full disk, no file descriptor left: the session runs, loudly, without a journal */
                if (js == RGPU_ERR_DUPLICATE_ID) se->jnl_path[0] = 0;   /* not ours: kept */
                jnl_failed(c, rgpu_rgt_errmsg(NULL));
            } else {
                rgpu_hash sh;   /* the secret as hex text: a restarted server checks a resume against it */
                char hex[33];
                memcpy(sh.b, se->secret, sizeof sh.b);
                rgpu_hash_hex(&sh, hex);
                if (rgpu_rgt_set_sync(se->jnl, g_cfg.journal_sync) ||
                    rgpu_rgt_set_meta(se->jnl, "backend", g_cfg.backend->name) ||
                    rgpu_rgt_set_meta(se->jnl, SECRET_META, hex) || rgpu_rgt_flush(se->jnl))
                    jnl_failed(c, rgpu_rgt_errmsg(se->jnl));
            }
        }
        if (se && g_cfg.record_dir) {
            char *path = se->rec_path;
            snprintf(path, sizeof se->rec_path, "%s/session-%u.rgt", g_cfg.record_dir, se->no);
            if (rgpu_rgt_create_new(path, "rgpu-server --record", &se->rec)) {   /* never over an earlier run's */
                logf_("%s: WARNING: cannot record the session (%s): it runs without its --record trace", TAG(c),
                      rgpu_rgt_errmsg(NULL));
                se->rec = NULL;
                path[0] = 0;
            } else {
                rgpu_rgt_set_meta(se->rec, "backend", g_cfg.backend->name);
                logf_("session %u: recording to %s", se->no, path);
            }
        }
        if (se) {
            pthread_mutex_lock(&g_mu);
            se->next = g_sessions;
            g_sessions = se;
            pthread_mutex_unlock(&g_mu);
            logf_("%s: started (id %016llx, client rgpu %s)", TAG(c), (unsigned long long)se->id, cver);
        }
    }
    free(p);
    if (!se) return NULL;
    c->se = se;
    c->s = se->s;
    sess_reopen_files(c);   /* a resumed session's, closed when it detached */
    uint8_t bits[(RGPU_OP_COUNT + 7) / 8] = { 0 };
    for (int i = 0; i < RGPU_OP_COUNT; i++)
        if (g_cfg.backend->supports(g_cfg.backend, i)) bits[i / 8] |= (uint8_t)(1u << (i % 8));
    rgpu_msg_welcome w = { .version = RGPU_WIRE_VERSION, .session = se->id, .applied = rgpu_session_applied(se->s),
                           .nbits = RGPU_OP_COUNT, .bitmap = bits, .has_sw_version = true,
                           .sw_version_len = (uint8_t)strlen(RGPU_VERSION), .sw_version = RGPU_VERSION };
    memcpy(w.op_table, table, 16);
    memcpy(w.secret, se->secret, sizeof w.secret);
    snprintf(w.backend, 32, "%s", rgpu_backend_describe(g_cfg.backend));   /* "cuda (NVIDIA H200)" */
    rgpu_msg_welcome_send(c->fd, &w);   /* a failure shows at the next read */
    c->welcomed = true;
    c->acked = w.applied;
    send_journal_notice(c);
    return se;
}

/* ---------------------------------------------------------------------------
 * One connection's life */
/* What this thread made the backend do (zeros without counters). */
static rgpu_backend_counters dev_counts(void) {
    rgpu_backend_counters k = { 0 };
    if (g_cfg.backend->counters) g_cfg.backend->counters(g_cfg.backend, &k);
    return k;
}

static void serve_conn(conn *c) {
    rgpu_backend_counters k0 = dev_counts();   /* a rebuild in the handshake counts too */
    sess *se = handshake(c);
    if (!se) goto out;
    uint64_t ops0 = rgpu_session_applied(c->s);
    rgpu_session_set_fetch(c->s, fetch_blob, c);
    rgpu_session_set_cancel(c->s, peer_gone_too_long, c);
    rgpu_status s = RGPU_OK;
    while (!s) {
        rgpu_msg_header h;
        uint8_t *p;
        if ((s = commit_unless_input(c)) || (s = next_msg(c, &h, &p))) break;
        __atomic_store_n(&se->busy, true, __ATOMIC_RELAXED);
        switch (h.type) {
        case RGPU_MSG_CHUNK: s = handle_chunk(c, p, h.len); break;
        case RGPU_MSG_WAIT: s = handle_wait(c, p, h.len); break;
        case RGPU_MSG_BLOB: {   /* pushed: kept while the session has room, else dropped (NEED asks again) */
            rgpu_hash bh;
            uint8_t *d;
            size_t dn;
            s = blob_from_msg(c, p, h.len, rgpu_session_room(c->s, NULL, 0), &bh, &d, &dn);
            if (!s || s == RGPU_ERR_LIMIT) s = keep_pushed(c, &bh, s, d, dn);
            if (s) send_error(c, s, "BLOB: %s", rgpu_status_str(s));
            break;
        }
        case RGPU_MSG_BLOB_PART: {
            rgpu_hash bh;
            uint8_t *d;
            size_t dn;
            s = blob_part(c, p, h.len, &bh, &d, &dn);
            if (!s || s == RGPU_ERR_LIMIT) s = keep_pushed(c, &bh, s, d, dn);
            if (s) send_error(c, s, "BLOB_PART: %s", rgpu_status_str(s));
            break;
        }
        case RGPU_MSG_BYE:
            s = RGPU_ERR_CLOSED;
            c->bye = true;
            break;
        default:
            s = RGPU_ERR_BAD_MESSAGE;
            send_error(c, s, "unexpected %s message", rgpu_msg_name(h.type));
            break;
        }
        msg_free(p, h.len);
        if (!s && commit_due(c)) s = commit_and_ack(c, false);
        __atomic_store_n(&se->busy, false, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&se->busy, false, __ATOMIC_RELAXED);
    sess_update_mem(se);
    uint64_t a, pk;
    rgpu_session_memory(c->s, &a, &pk);
    bool keep = !c->bye && !c->sent_error && g_cfg.grace > 0;
    rgpu_graph_stats gs;        /* read while this thread still owns the session */
    if (g_cfg.limits.graphs) rgpu_session_graph_stats(c->s, &gs);
    rgpu_backend_counters k1 = dev_counts(), kd = { k1.host_waits - k0.host_waits, k1.device_allocs - k0.device_allocs,
                                                    k1.device_frees - k0.device_frees, k1.graph_launches - k0.graph_launches };
    uint64_t ops1 = rgpu_session_applied(c->s);
    se->dev.host_waits += kd.host_waits;
    se->dev.device_allocs += kd.device_allocs;
    se->dev.device_frees += kd.device_frees;
    se->dev.graph_launches += kd.graph_launches;
    se->dev_ops += ops1 - ops0;
    rgpu_backend_counters kt = se->dev;
    uint64_t kt_ops = se->dev_ops;
    /* Once detached, a kept session belongs to whoever resumes it, who may
     * end and free it at once: what the lines below say is read before. */
    uint64_t applied = rgpu_session_applied(c->s);
    uint32_t no = se->no;
    char tg[120];
    tag(c, tg, sizeof tg);
    if (keep) sess_close_files(c);
    else drop_journal(se);
    pthread_mutex_lock(&g_mu);
    se->conn = NULL;
    se->detached_at = now_s();
    if (!keep) unlink_sess_locked(se);
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    c->se = NULL;
    c->s = NULL;
    if (g_cfg.backend->counters)    /* this connection, and the session so far */
        logf_("session %u: %s: %llu ops, %llu host waits, %llu cudaMalloc, %llu cudaFree, %llu graph launches "
              "(session: %llu ops, %llu host waits, %llu cudaMalloc, %llu cudaFree, %llu graph launches)", no,
              g_cfg.backend->name, (unsigned long long)(ops1 - ops0), (unsigned long long)kd.host_waits,
              (unsigned long long)kd.device_allocs, (unsigned long long)kd.device_frees,
              (unsigned long long)kd.graph_launches, (unsigned long long)kt_ops, (unsigned long long)kt.host_waits,
              (unsigned long long)kt.device_allocs, (unsigned long long)kt.device_frees,
              (unsigned long long)kt.graph_launches);
    if (g_cfg.limits.graphs) {      /* so far, also when the session is kept for a resume */
        logf_("session %u: graphs: %llu template calls, %llu replayed as graphs, %llu captured, %llu refused%s%s%s; "
              "%llu input copies, %llu outputs in their static buffers, %llu output copies",
              no, (unsigned long long)gs.calls, (unsigned long long)gs.replays, (unsigned long long)gs.captures,
              (unsigned long long)gs.refusals, gs.last_refusal[0] ? " (last: " : "", gs.last_refusal,
              gs.last_refusal[0] ? ")" : "", (unsigned long long)gs.input_copies,
              (unsigned long long)gs.outputs_lent, (unsigned long long)gs.output_copies);
    }
    if (keep) {
        logf_("%s: connection lost at op %llu (%s); kept for %g s (--grace)", tg, (unsigned long long)applied,
              rgpu_status_str(s), g_cfg.grace);
    } else {
        logf_("%s: %s after %llu ops (peak %llu bytes)", tg, c->bye ? "bye" : "closed", (unsigned long long)applied,
              (unsigned long long)pk);
        sess_destroy(se);
    }
    log_stats(keep ? "session detached" : "session ended");
    /* BYE answered with BYE: the session is freed, the client may go */
    if (c->bye) rgpu_msg_bye_send(c->fd, &(rgpu_msg_bye){ 0 });
out:
    while (c->dq_head) { deferred *d = c->dq_head; c->dq_head = d->next; msg_free(d->p, d->h.len); free(d); }
    while (c->parts) part_free(c, c->parts);
    if (c->sent_error) {
        /* Let the ERROR reach the peer: closing with unread input would
         * send a TCP reset that can discard it. Read what is in flight (at
         * most 1 MiB, 1 s), then close. */
        shutdown(c->fd, SHUT_WR);
        struct timeval tv = { 1, 0 };
        setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char sink[16384];
        for (int i = 0; i < 64 && read(c->fd, sink, sizeof sink) > 0; i++) {}
    }
    close(c->fd);
    free(c);
}

static void *conn_main(void *arg) {
    serve_conn(arg);
    __atomic_sub_fetch(&g_conns, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* Over --max-connections: say so and close, on the accepting thread (a
 * short write to a new socket's empty buffer does not block). */
static void refuse_conn(int fd, const char *peer) {
    char buf[RGPU_MAX_ERROR_MSG + 1];
    struct timeval tv = { 0, 200000 };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    error_sendf(fd, buf, RGPU_ERR_LIMIT, "the server has %u connections, its limit (--max-connections): "
                "try again later", g_cfg.max_conns);
    close(fd);
    static double last;
    double t = now_s();
    if (t - last > 5) { logf_("connection from %s refused: %u connections (--max-connections)", peer, g_cfg.max_conns); last = t; }
}

static void peer_name(const struct sockaddr_storage *sa, socklen_t len, char *out, size_t n) {
    char host[64] = "?";
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)sa;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        snprintf(out, n, "%s:%u", host, ntohs(a->sin_port));
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const void *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        snprintf(out, n, "[%s]:%u", host, ntohs(a->sin6_port));
    } else {
        (void)len;
        snprintf(out, n, "unix");
    }
}

/* ---------------------------------------------------------------------------
 * Listening */
int rgpu_server_listen_tcp(const char *spec) {
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

/* Bound under a temporary name and renamed once listening, so the path
 * appears only when connecting to it works. */
int rgpu_server_listen_unix(const char *path) {
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    char tmp[sizeof sa.sun_path];
    /* a live server there keeps its path: refuse rather than take it over */
    if (strlen(path) < sizeof sa.sun_path) {
        strcpy(sa.sun_path, path);
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof sa) == 0) {
            close(probe);
            fprintf(stderr, "rgpu-server: unix:%s: another server is listening there; refusing to take it over\n", path);
            return -1;
        }
        if (probe >= 0) close(probe);
    }
    if (snprintf(tmp, sizeof tmp, "%s.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        fprintf(stderr, "rgpu-server: --unix path too long\n");
        return -1;
    }
    strcpy(sa.sun_path, tmp);
    unlink(tmp);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    mode_t old = umask(0077);   /* the socket is for this user only */
    int rc = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof sa);
    umask(old);
    if (rc < 0 || listen(fd, 64) < 0 || rename(tmp, path) < 0) {
        fprintf(stderr, "rgpu-server: cannot listen on unix:%s: %s\n", path, strerror(errno));
        if (rc == 0) unlink(tmp);
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}


/* ---------------------------------------------------------------------------
 * Setup: data directory, token, journal directory */
int rgpu_server_mkdirs(const char *path) {
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *q = p + 1; *q; q++) {
        if (*q != '/') continue;
        *q = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST) return -1;
        *q = '/';
    }
    return (mkdir(p, 0700) == 0 || errno == EEXIST) ? 0 : -1;
}

/* A folder of rgpu's own (FORMAT.md §7.4): by lstat, a folder (not a
 * symbolic link) owned by this user, with none of the mode bits in deny. */
static int own_dir(const char *path, mode_t deny, char *why, size_t n) {
    struct stat st;
    if (lstat(path, &st) != 0) snprintf(why, n, "%s: %s", path, strerror(errno));
    else if (S_ISLNK(st.st_mode)) snprintf(why, n, "%s is a symbolic link: it must be a folder itself", path);
    else if (!S_ISDIR(st.st_mode)) snprintf(why, n, "%s is not a folder", path);
    else if (st.st_uid != geteuid())
        snprintf(why, n, "%s is owned by uid %u: it must be this user's (uid %u)", path, (unsigned)st.st_uid,
                 (unsigned)geteuid());
    else if (st.st_mode & deny)
        snprintf(why, n, "%s is mode %03o: it must not be %s group or others (chmod %s it)", path,
                 (unsigned)(st.st_mode & 0777), deny == 022 ? "writable by" : "open to", deny == 022 ? "go-w" : "700");
    else return 0;
    return -1;
}

int rgpu_server_check_data_dir(const char *data, char *why, size_t n) {
    if (own_dir(data, 022, why, n)) return -1;
    /* the folders above it, as the kernel resolves them: none that another
     * user could rename or replace */
    char p[PATH_MAX], up[PATH_MAX + 4];
    snprintf(up, sizeof up, "%s/..", data);
    if (!realpath(up, p)) { snprintf(why, n, "%s: %s", up, strerror(errno)); return -1; }
    for (;;) {
        struct stat st;
        if (stat(p, &st) != 0) { snprintf(why, n, "%s: %s", p, strerror(errno)); return -1; }
        if (st.st_uid != geteuid() && st.st_uid != 0) {
            snprintf(why, n, "%s (above the data folder) is owned by uid %u: every folder above it must be this "
                     "user's (uid %u) or root's", p, (unsigned)st.st_uid, (unsigned)geteuid());
            return -1;
        }
        if ((st.st_mode & 022) && !(st.st_mode & S_ISVTX)) {
            snprintf(why, n, "%s (above the data folder) is mode %03o: no folder above it may be writable by group "
                     "or others, unless sticky like /tmp", p, (unsigned)(st.st_mode & 0777));
            return -1;
        }
        if (!strcmp(p, "/")) return 0;
        char *sl = strrchr(p, '/');   /* realpath's answer is absolute */
        if (sl == p) sl[1] = 0; else *sl = 0;
    }
}

int rgpu_server_check_peer(int fd, unsigned uid, char *why, size_t n) {
    uid_t peer;
#ifdef __linux__
    struct ucred cr;
    socklen_t l = sizeof cr;
    int rc = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l);
    peer = cr.uid;
#else
    gid_t g;
    int rc = getpeereid(fd, &peer, &g);
#endif
    if (rc != 0) { snprintf(why, n, "cannot tell who serves it: %s", strerror(errno)); return -1; }
    if ((unsigned)peer != uid) {
        snprintf(why, n, "it is served by uid %u, not by this user (uid %u)", (unsigned)peer, uid);
        return -1;
    }
    return 0;
}

/* $XDG_STATE_HOME/rgpu, else ~/.local/state/rgpu. */
void rgpu_server_data_dir(char *out, size_t n) {
    const char *x = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    if (x && x[0] == '/') snprintf(out, n, "%s/rgpu", x);
    else snprintf(out, n, "%s/.local/state/rgpu", home && *home ? home : "/tmp");
}

static bool is_hex_token(const char *s) {
    if (strlen(s) != TOKEN_HEX) return false;
    for (const char *q = s; *q; q++)
        if (!((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f'))) return false;
    return true;
}

/* Read a token file: 1 with its token in out; 0 when there is none; -1 with
 * why (a phrase after the path) when it is not a regular file (a link is
 * not), owned by this user, mode 0600 (no group/other bits), holding a
 * well-formed token. */
static int token_read(const char *path, char out[TOKEN_HEX + 1], char *why, size_t n) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return 0;
        snprintf(why, n, "cannot be examined: %s", strerror(errno));
        return -1;
    }
    const char *bad = NULL;
    char buf[TOKEN_HEX + 3] = { 0 };
    if (!S_ISREG(st.st_mode)) bad = S_ISLNK(st.st_mode) ? "is a symbolic link" : "is not a regular file";
    else if (st.st_uid != geteuid()) bad = "is owned by another user";
    else if (st.st_mode & 077) bad = "is readable or writable by others (chmod 600 it)";
    else {
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        ssize_t r = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0) close(fd);
        if (r < 0) bad = "cannot be read";
        else {
            buf[r] = 0;
            buf[strcspn(buf, "\r\n")] = 0;
            if (!is_hex_token(buf)) bad = "does not hold an rgpu token (64 hex digits)";
        }
    }
    if (bad) { snprintf(why, n, "%s", bad); return -1; }
    memcpy(out, buf, TOKEN_HEX + 1);
    return 1;
}

/* Write tok to path, mode 0600, only if path is free: under a temporary
 * name, then linked in (link fails on an existing name): never half a
 * token, never over another's file. 0, or -1 (errno; EEXIST: the path, or
 * a stale temporary name, which is removed, exists: look again). */
static int token_link(const char *path, const char *tok) {
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && write(fd, tok, TOKEN_HEX) == TOKEN_HEX && write(fd, "\n", 1) == 1;
    if (fd >= 0 && close(fd) != 0) ok = false;
    ok = ok && link(tmp, path) == 0;
    int e = errno;
    unlink(tmp);
    errno = e;
    return ok ? 0 : -1;
}

/* An existing token file is used if token_read takes it (so a restarted
 * server, and servers sharing the default file, keep one token); anything
 * else refuses to start with the reason: the file is never replaced, since
 * another program may own it. When the file is absent, a fresh token from
 * /dev/urandom is created. */
int rgpu_server_setup_token(const char *path, char out[RGPU_SERVER_TOKEN_HEX + 1]) {
    for (;;) {
        char why[200];
        int r = token_read(path, out, why, sizeof why);
        if (r > 0) return 0;
        if (r < 0) {
            fprintf(stderr, "rgpu-server: token file %s %s; refusing to start (remove it to have a new token "
                    "written, or name another with --token-file)\n", path, why);
            return -1;
        }
        uint8_t rnd[TOKEN_HEX / 2];
        int u = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (u < 0 || read(u, rnd, sizeof rnd) != (ssize_t)sizeof rnd) {
            fprintf(stderr, "rgpu-server: cannot read /dev/urandom for the token\n");
            if (u >= 0) close(u);
            return -1;
        }
        close(u);
        for (size_t i = 0; i < sizeof rnd; i++) snprintf(out + 2 * i, 3, "%02x", rnd[i]);
        if (token_link(path, out) == 0) return 0;
        if (errno != EEXIST) {
            fprintf(stderr, "rgpu-server: cannot write the token file %s: %s\n", path, strerror(errno));
            return -1;
        }
        /* another server wrote it just now: use (or refuse) it */
    }
}

/* The token file under a running server (FORMAT.md §7.2), read again at
 * each HELLO and once a second, so that the file and the server never
 * disagree for long: gone, the server's token is written back; holding
 * another good token (replaced by the user, or written by a `--stdio`
 * bridge or server that found it gone), that token is the server's from
 * then on; unusable, the server keeps its token and logs why, once. */
static pthread_mutex_t g_token_mu = PTHREAD_MUTEX_INITIALIZER;   /* g_cfg.token after init */

static void token_refresh_locked(void) {
    static char said[300];      /* the last complaint logged, so it is not repeated */
    const char *path = g_cfg.token_file;
    if (g_cfg.no_auth || !path[0]) return;
    char t[TOKEN_HEX + 1], why[300] = "";
    int r = token_read(path, t, why, sizeof why);
    if (r == 0) {
        if (token_link(path, g_cfg.token) == 0) {
            logf_("token file %s was gone: this server's token written to it again", path);
            said[0] = 0;
            return;
        }
        if (errno != EEXIST) snprintf(why, sizeof why, "is gone and cannot be written again: %s", strerror(errno));
        else if ((r = token_read(path, t, why, sizeof why)) == 0) return;   /* not written meanwhile: next look */
    }
    if (r > 0) {
        if (strcmp(t, g_cfg.token) != 0) {
            memcpy(g_cfg.token, t, sizeof t);
            logf_("token file %s holds a new token: clients need that one from now on", path);
        }
        said[0] = 0;
        return;
    }
    if (strcmp(said, why) != 0) {
        logf_("WARNING: token file %s %s; this server keeps its token (fix or remove the file)", path, why);
        snprintf(said, sizeof said, "%s", why);
    }
}

/* The token a HELLO must carry now, into out. */
static void token_current(char out[TOKEN_HEX + 1]) {
    pthread_mutex_lock(&g_token_mu);
    token_refresh_locked();
    memcpy(out, g_cfg.token, TOKEN_HEX + 1);
    pthread_mutex_unlock(&g_token_mu);
}

/* One server per journal or record directory: an exclusive lock on
 * DIR/.rgpu-server.lock, held for the process's life, with the holder's pid
 * in it. Also proves the directory writable at start. */
int rgpu_server_lock_dir(const char *dir, const char *opt) {
    char path[4300];
    snprintf(path, sizeof path, "%s/.rgpu-server.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "rgpu-server: %s %s is not writable: %s\n", opt, dir, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t r = pread(fd, pid, sizeof pid - 1, 0);
        if (r > 0) pid[r] = 0;
        pid[strcspn(pid, "\n")] = 0;
        fprintf(stderr, "rgpu-server: %s %s is in use by another rgpu-server (pid %s); give this one its own "
                "directory\n", opt, dir, pid[0] ? pid : "?");
        close(fd);
        return -1;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        fprintf(stderr, "rgpu-server: %s %s is not writable: %s\n", opt, dir, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;   /* kept open: the lock lives as long as the process */
}

/* Journals left by an earlier process become dormant sessions: a client has
 * --grace seconds from now to resume one before it is removed. */
static void adopt_journals(void) {
    DIR *d = opendir(g_cfg.journal_dir);
    if (!d) return;
    struct dirent *e;
    unsigned n = 0;
    while ((e = readdir(d))) {
        unsigned long long id;
        char tail[8];
        if (sscanf(e->d_name, "session-%16llx.%7s", &id, tail) != 2 || strcmp(tail, "rgt") != 0 || !id) continue;
        sess *se = calloc(1, sizeof *se);
        if (!se) break;
        se->id = id;
        se->no = g_next_no++;
        se->detached_at = now_s();
        journal_path(id, se->jnl_path, sizeof se->jnl_path);
        se->next = g_sessions;
        g_sessions = se;
        n++;
    }
    closedir(d);
    if (n) logf_("journal %s: %u session(s) from an earlier run, resumable for %g s", g_cfg.journal_dir, n, g_cfg.grace);
}

/* ---------------------------------------------------------------------------
 * rgpu-server --stdio: the host end of an ssh:// link (FORMAT.md §7.4). It
 * connects to this user's daemon — an ordinary rgpu-server on a Unix socket
 * in DATA/daemon/ (0700) — starting it detached when none runs (under a lock,
 * so two links never start two), puts the daemon's token into the client's
 * HELLO (the token never crosses the network: SSH authenticated the user),
 * and relays bytes between stdin/stdout and the daemon until either side
 * ends. The daemon keeps the session when the link drops, so the client's
 * resume works over a new ssh. The token goes only where no one else could
 * have put the socket: DATA and the folders above it pass
 * rgpu_server_check_data_dir, DATA/daemon is this user's 0700, and the
 * socket's peer runs as this user (SO_PEERCRED). */
static int unix_connect(const char *path) {
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof sa.sun_path) return -1;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
    if (fd >= 0) close(fd);
    return -1;
}

/* An ERROR to the client on stdout (it reads the protocol there) and the same
 * line on stderr (ssh shows it). */
static int bridge_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bridge_fail(int code, const char *fmt, ...) {
    char buf[RGPU_MAX_ERROR_MSG + 1];
    va_list ap;
    va_start(ap, fmt);
    rgpu_msg_error e = error_msg(buf, code, fmt, ap);
    va_end(ap);
    rgpu_msg_error_send(1, &e);
    fprintf(stderr, "rgpu-server --stdio: %s\n", buf);
    return 1;
}

int rgpu_server_stdio_bridge(void) {
    char data[1024], dir[1100], sock[1200], lockp[1200], logp[1200], tokf[1200], self[4096];
    rgpu_server_data_dir(data, sizeof data);
    snprintf(dir, sizeof dir, "%s/daemon", data);
    snprintf(sock, sizeof sock, "%s/sock", dir);
    snprintf(lockp, sizeof lockp, "%s/lock", dir);
    snprintf(logp, sizeof logp, "%s/log", dir);
    snprintf(tokf, sizeof tokf, "%s/token", data);
    char why[RGPU_MAX_ERROR_MSG];
    if (rgpu_server_mkdirs(dir)) return bridge_fail(RGPU_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    if (rgpu_server_check_data_dir(data, why, sizeof why) || own_dir(dir, 077, why, sizeof why))
        return bridge_fail(RGPU_ERR_AUTH, "%s; refusing to use it", why);
    int fd = unix_connect(sock);
    if (fd < 0) {
        int lk = open(lockp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (lk < 0 || flock(lk, LOCK_EX)) return bridge_fail(RGPU_ERR_IO, "cannot lock %s: %s", lockp, strerror(errno));
        if ((fd = unix_connect(sock)) < 0) {   /* none came up while we waited for the lock: start it */
            ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
            if (sl <= 0) return bridge_fail(RGPU_ERR_IO, "cannot find this program: %s", strerror(errno));
            self[sl] = 0;
            unlink(sock);
            char conf[4200];   /* the daemon reads its folders there (and from RGPU_REMOTE_DATA, inherited) */
            rgpu_data_config_path(conf, sizeof conf);
            char *argv[] = { self, "--unix", sock, "--token-file", tokf, "--config", conf, NULL };
            if (access(conf, F_OK) != 0) argv[5] = NULL;
            posix_spawn_file_actions_t fa;
            posix_spawn_file_actions_init(&fa);
            posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
            posix_spawn_file_actions_addopen(&fa, 1, logp, O_WRONLY | O_CREAT | O_APPEND, 0600);
            posix_spawn_file_actions_adddup2(&fa, 1, 2);
            posix_spawnattr_t at;
            posix_spawnattr_init(&at);
            posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);   /* outlives this ssh session */
            pid_t pid;
            int rc = posix_spawn(&pid, self, &fa, &at, argv, environ);
            posix_spawn_file_actions_destroy(&fa);
            posix_spawnattr_destroy(&at);
            if (rc) return bridge_fail(RGPU_ERR_IO, "cannot start the rgpu-server daemon: %s", strerror(rc));
            for (int i = 0; i < 600 && (fd = unix_connect(sock)) < 0; i++) {
                int ws;
                if (waitpid(pid, &ws, WNOHANG) == pid)
                    return bridge_fail(RGPU_ERR_IO, "the rgpu-server daemon exited at start (see %s)", logp);
                usleep(50000);
            }
        }
        close(lk);
        if (fd < 0) return bridge_fail(RGPU_ERR_TIMEOUT, "the rgpu-server daemon did not come up in 30 s (see %s)", logp);
    }
    /* the token goes only to this user's own daemon */
    if (rgpu_server_check_peer(fd, (unsigned)geteuid(), why, sizeof why))
        return bridge_fail(RGPU_ERR_AUTH, "%s: %s; refusing to send it the token", sock, why);
    /* the client's HELLO, its token replaced by the daemon's */
    char token[TOKEN_HEX + 1];
    if (rgpu_server_setup_token(tokf, token)) return bridge_fail(RGPU_ERR_AUTH, "no usable token file %s", tokf);
    double deadline = now_s() + 60;
    uint8_t hb[RGPU_WIRE_HEADER];
    rgpu_msg_header h;
    rgpu_status s = read_by(0, hb, sizeof hb, deadline);
    if (!s) s = rgpu_wire_header_decode(hb, RGPU_MSG_HELLO_HEAD + RGPU_MAX_TOKEN_LEN, &h);
    if (!s && h.type != RGPU_MSG_HELLO) s = RGPU_ERR_BAD_MESSAGE;
    uint8_t in[RGPU_MSG_HELLO_HEAD + RGPU_MAX_TOKEN_LEN];
    rgpu_msg_hello m = { 0 };
    if (!s && h.len < RGPU_MSG_HELLO_HEAD) s = RGPU_ERR_TRUNCATED;
    if (!s) s = read_by(0, in, h.len, deadline);
    if (!s) s = rgpu_msg_hello_decode(in, h.len, &m);
    if (s) return bridge_fail(s, "bad HELLO on stdin: %s", rgpu_status_str(s));
    m.token = (const uint8_t *)token;   /* the rest, the client's version too, kept */
    m.token_len = TOKEN_HEX;
    s = rgpu_msg_hello_send(fd, &m);
    if (s) return bridge_fail(s, "the daemon closed: %s", rgpu_status_str(s));
    /* relay */
    struct pollfd pf[2] = { { .fd = 0, .events = POLLIN }, { .fd = fd, .events = POLLIN } };
    int out[2] = { fd, 1 };
    static uint8_t buf[1 << 16];
    while (pf[1].fd >= 0) {
        if (poll(pf, 2, -1) < 0) { if (errno == EINTR) continue; break; }
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t r = read(pf[i].fd, buf, sizeof buf);
            if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
            if (r <= 0 || rgpu_io_write_all(out[i], buf, (size_t)r)) {
                if (i == 0) { shutdown(fd, SHUT_WR); pf[0].fd = -1; }   /* the client is done sending */
                else pf[1].fd = -1;                                      /* the daemon closed: we are done */
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * The API (server.h) */
void rgpu_server_config_default(rgpu_server_config *c) {
    memset(c, 0, sizeof *c);
    c->grace = 300;
    c->max_msg = RGPU_MAX_FRAME;
    c->max_chunk = RGPU_MAX_CHUNK_RAW;
    c->hs_timeout = 10;
    c->max_conns = 256;
    c->compact = 64ull << 20;
    c->journal_sync = RGPU_RGT_SYNC_FULL;
    c->first_session_no = 1;
}

void rgpu_server_init(const rgpu_server_config *c) {
    g_cfg = *c;
    g_pool.limit = g_cfg.max_memory;
    g_cfg.limits.pool = &g_pool;
    g_next_no = g_cfg.first_session_no ? g_cfg.first_session_no : 1;
    if (g_cfg.journal_dir[0]) adopt_journals();
}

void rgpu_server_serve(int fd, const char *peer) {
    conn *c = calloc(1, sizeof *c);
    if (!c) { close(fd); return; }
    c->fd = fd;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    serve_conn(c);
}

void rgpu_server_stop(void) { g_stop = 1; }

int rgpu_server_run(const int *fds, int n) {
    struct pollfd pf[8];
    int npf = 0;
    for (int i = 0; i < n && npf < 8; i++) pf[npf++] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
    uint32_t conn_no = 0;
    double token_seen = now_s();
    while (!g_stop) {
        int k = poll(pf, (nfds_t)npf, 250);
        reap_expired();
        if (now_s() - token_seen >= 1) {   /* the token file, also between HELLOs */
            char tok[TOKEN_HEX + 1];
            token_current(tok);
            token_seen = now_s();
        }
        if (g_cfg.parent_pid > 0 && getppid() != g_cfg.parent_pid) {
            /* the client that started us died without stopping us (SIGKILL, abort) */
            logf_("parent process %d is gone: stopping", g_cfg.parent_pid);
            g_stop = 1;
            break;
        }
        if (k < 0) { if (errno == EINTR) continue; return -1; }
        for (int i = 0; i < npf; i++) {
            if (!(pf[i].revents & POLLIN)) continue;
            struct sockaddr_storage sa;
            socklen_t sl = sizeof sa;
            int fd = accept4(pf[i].fd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC);
            if (fd < 0) {
                /* out of file descriptors (or memory): the pending connection
                 * stays queued; back off instead of spinning on it */
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                    static double last;
                    double t = now_s();
                    if (t - last > 5) { logf_("accept: %s: backing off (connections open: %u)", strerror(errno), g_conns); last = t; }
                    usleep(100000);
                }
                continue;
            }
            char peer[80];
            peer_name(&sa, sl, peer, sizeof peer);
            if (__atomic_load_n(&g_conns, __ATOMIC_RELAXED) >= g_cfg.max_conns) { refuse_conn(fd, peer); continue; }
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            conn *c = calloc(1, sizeof *c);
            if (!c) { close(fd); continue; }
            c->fd = fd;
            c->no = ++conn_no;
            snprintf(c->peer, sizeof c->peer, "%s", peer);
            __atomic_add_fetch(&g_conns, 1, __ATOMIC_RELAXED);
            pthread_t t;
            pthread_attr_t at;
            pthread_attr_init(&at);
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &at, conn_main, c)) {
                __atomic_sub_fetch(&g_conns, 1, __ATOMIC_RELAXED);
                logf_("connection %u (%s): no thread for it: %s", c->no, peer, strerror(errno));
                close(fd);
                free(c);
            }
            pthread_attr_destroy(&at);
        }
    }
    return 0;
}
