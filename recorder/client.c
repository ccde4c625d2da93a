/* client.c — the recorder: open chunk, sender and receiver threads.
 *
 * Locking: one mutex (c->mu) guards every field below it in the struct. The
 * recording path holds it only to append encoded bytes; compression, hashing
 * and socket writes happen in the sender thread outside the lock. Only the
 * sender writes to the socket; only the receiver reads from it. The .rgt tee
 * has its own mutex (SQLite calls from sender and receiver). */
#include "recorder.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* An item for the sender, in send order. */
enum { ITEM_CHUNK = 1, ITEM_MSG = 2, ITEM_NEED = 3, ITEM_RGT_BLOB = 4 };
typedef struct item {
    struct item *next;
    int kind;
    rgpu_buf buf;            /* CHUNK: raw records; MSG: payload */
    int msg_type;            /* MSG */
    uint64_t first_op;       /* CHUNK */
    uint32_t count;          /* CHUNK */
    rgpu_hash hash;          /* NEED, RGT_BLOB */
} item;

typedef struct blob {
    struct blob *next;
    rgpu_hash hash;
    uint8_t *data;
    size_t n;
    uint64_t op_index;       /* the UPLOAD record; freed once the server applied it */
    bool need_rgt;           /* not yet written into the .rgt tee */
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

struct rgpu_client {
    int fd;
    pthread_t sender, receiver;
    bool threads_started;
    rgpu_server_info info;
    rgpu_rgt *rgt;
    pthread_mutex_t rgt_mu;

    pthread_mutex_t mu;
    pthread_cond_t cv_send, cv_wait;
    bool closing, dead;
    int dead_status;
    char dead_msg[256];
    rgpu_buf cur;            /* open chunk */
    uint64_t cur_first;
    uint32_t cur_count;
    struct timespec cur_t0;
    uint64_t next_op, next_id, acked;
    item *q_head, *q_tail;
    blob *blobs;
    waiter *waiters;
    uint64_t *frees;
    size_t nfree, capfree;
    rgpu_client_stats st;
};

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------------------
 * Connection */
static int dial(const char *address, char *err, size_t errlen) {
    int fd = -1;
    if (strncmp(address, "unix:", 5) == 0) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(address + 5) >= sizeof sa.sun_path) { set_err(err, errlen, "unix socket path too long"); return -1; }
        strcpy(sa.sun_path, address + 5);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        close(fd); fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) { set_err(err, errlen, "cannot connect to %s: %s", address, strerror(errno)); return -1; }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* HELLO: u32 version | hash[16] op table | u64 session | u64 last_ack | u32 token_len | token
 * WELCOME: u32 version | hash[16] | u64 session | u64 applied | u8[32] backend | u32 nbits | bitmap */
static rgpu_status handshake(rgpu_client *c, char *err, size_t errlen) {
    uint8_t h[44] = { 0 };
    rgpu_st32(h, RGPU_FORMAT_VERSION);
    rgpu_op_table_hash(h + 4);
    /* session 0 (new), last ack 0, no token (authentication: issue 6) */
    rgpu_status s = rgpu_wire_send(c->fd, RGPU_MSG_HELLO, h, 40, NULL, 0);
    if (s) { set_err(err, errlen, "handshake: %s", rgpu_status_str(s)); return s; }
    rgpu_msg_header mh;
    uint8_t *p;
    if ((s = rgpu_wire_recv(c->fd, 1 << 20, &mh, &p))) {
        set_err(err, errlen, "handshake: %s", rgpu_status_str(s));
        return s;
    }
    if (mh.type == RGPU_MSG_ERROR) {
        int code = mh.len >= 4 ? (int)rgpu_ld32(p) : RGPU_ERR_BAD_MESSAGE;
        set_err(err, errlen, "server refused: %.*s", (int)(mh.len > 8 ? mh.len - 8 : 0), (const char *)p + 8);
        free(p);
        return code ? code : RGPU_ERR_BAD_MESSAGE;
    }
    if (mh.type != RGPU_MSG_WELCOME || mh.len < 72) {
        free(p);
        set_err(err, errlen, "handshake: expected WELCOME, got %s", rgpu_msg_name(mh.type));
        return RGPU_ERR_BAD_MESSAGE;
    }
    c->info.session = rgpu_ld64(p + 20);
    memcpy(c->info.backend, p + 36, 31);
    c->info.backend[31] = 0;
    uint32_t nbits = rgpu_ld32(p + 68);
    size_t nb = (nbits + 7) / 8;
    if (mh.len >= 72 + nb) memcpy(c->info.supports, p + 72, nb < sizeof c->info.supports ? nb : sizeof c->info.supports);
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
    c->nfree = 0;
    return append_record_locked(c, &r, NULL);
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
    memset(&c->cur, 0, sizeof c->cur);
    c->cur_count = 0;
    c->st.chunks++;
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
        if (b->op_index < c->acked && !b->need_rgt) {
            *pp = b->next;
            free(b->data);
            free(b);
        } else {
            pp = &b->next;
        }
    }
}

static rgpu_status send_item(rgpu_client *c, item *it) {
    rgpu_status s = RGPU_OK;
    rgpu_buf frame = { 0 };
    if (it->kind == ITEM_CHUNK) {
        rgpu_hash h = rgpu_hash_bytes(it->buf.p, it->buf.len);
        uint8_t hdr[32];
        rgpu_st64(hdr, it->first_op);
        rgpu_st32(hdr + 8, it->count);
        rgpu_st32(hdr + 12, 0);
        memcpy(hdr + 16, h.b, 16);
        if ((s = rgpu_frame_compress(it->buf.p, it->buf.len, 1, &frame))) goto out;
        if (c->rgt) {
            pthread_mutex_lock(&c->rgt_mu);
            rgpu_rgt_put_chunk(c->rgt, &h, it->first_op, it->count, it->buf.len, frame.p, frame.len);
            pthread_mutex_unlock(&c->rgt_mu);
        }
        s = rgpu_wire_send(c->fd, RGPU_MSG_CHUNK, hdr, sizeof hdr, frame.p, frame.len);
        if (!s) {
            pthread_mutex_lock(&c->mu);
            c->st.bytes_out += RGPU_WIRE_HEADER + sizeof hdr + frame.len;
            pthread_mutex_unlock(&c->mu);
        }
    } else if (it->kind == ITEM_MSG) {
        s = rgpu_wire_send(c->fd, it->msg_type, it->buf.p, it->buf.len, NULL, 0);
        if (!s) {
            pthread_mutex_lock(&c->mu);
            c->st.bytes_out += RGPU_WIRE_HEADER + it->buf.len;
            pthread_mutex_unlock(&c->mu);
        }
    } else if (it->kind == ITEM_NEED || it->kind == ITEM_RGT_BLOB) {
        /* The blob cannot be freed while we use it: only this thread reaps. */
        pthread_mutex_lock(&c->mu);
        blob *b = find_blob_locked(c, &it->hash);
        pthread_mutex_unlock(&c->mu);
        if (!b) {
            if (it->kind == ITEM_NEED) {
                /* Unknown hash: tell the server plainly instead of hanging it. */
                uint8_t e[8 + 64];
                rgpu_st32(e, RGPU_ERR_MISSING_BLOB); rgpu_st32(e + 4, 0);
                int n = snprintf((char *)e + 8, 64, "client does not hold the requested blob");
                s = rgpu_wire_send(c->fd, RGPU_MSG_ERROR, e, 8 + (size_t)n, NULL, 0);
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
            s = rgpu_wire_send(c->fd, RGPU_MSG_BLOB, b->hash.b, 16, frame.p, frame.len);
            pthread_mutex_lock(&c->mu);
            c->st.bytes_out += RGPU_WIRE_HEADER + 16 + frame.len;
            c->st.blobs_sent++;
            pthread_mutex_unlock(&c->mu);
        }
    }
out:
    rgpu_buf_free(&frame);
    return s;
}

static void *sender_main(void *arg) {
    rgpu_client *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->q_head && !c->dead) {
            if (c->closing && !c->cur_count) goto done;
            if (c->cur_count) {
                struct timespec dl = c->cur_t0;
                dl.tv_nsec += RGPU_CHUNK_MS * 1000000L;
                if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
                struct timespec now;
                clock_gettime(CLOCK_MONOTONIC, &now);
                if (c->closing || now.tv_sec > dl.tv_sec || (now.tv_sec == dl.tv_sec && now.tv_nsec >= dl.tv_nsec)) {
                    close_chunk_locked(c);
                    continue;
                }
                pthread_cond_timedwait(&c->cv_send, &c->mu, &dl);
            } else {
                pthread_cond_wait(&c->cv_send, &c->mu);
            }
        }
        if (c->dead) break;
        item *it = c->q_head;
        c->q_head = it->next;
        if (!c->q_head) c->q_tail = NULL;
        pthread_mutex_unlock(&c->mu);
        rgpu_status s = send_item(c, it);
        rgpu_buf_free(&it->buf);
        free(it);
        pthread_mutex_lock(&c->mu);
        if (s) {
            char m[128];
            snprintf(m, sizeof m, "sending to rgpu-server failed: %s", rgpu_status_str(s));
            mark_dead_locked(c, s, m);
            break;
        }
        reap_blobs_locked(c);
    }
done:
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---------------------------------------------------------------------------
 * Receiver thread */
static void *receiver_main(void *arg) {
    rgpu_client *c = arg;
    for (;;) {
        rgpu_msg_header h;
        uint8_t *p;
        rgpu_status s = rgpu_wire_recv(c->fd, RGPU_MAX_FRAME, &h, &p);
        if (s) {
            pthread_mutex_lock(&c->mu);
            if (!c->closing || c->waiters) {
                char m[160];
                snprintf(m, sizeof m, "connection to rgpu-server lost: %s", rgpu_status_str(s));
                mark_dead_locked(c, s == RGPU_ERR_CLOSED ? RGPU_ERR_CLOSED : s, m);
            } else {
                mark_dead_locked(c, RGPU_ERR_CLOSED, "connection closed");
            }
            pthread_mutex_unlock(&c->mu);
            return NULL;
        }
        pthread_mutex_lock(&c->mu);
        c->st.bytes_in += RGPU_WIRE_HEADER + h.len;
        switch (h.type) {
        case RGPU_MSG_ACK:
            if (h.len >= 8) { uint64_t a = rgpu_ld64(p); if (a > c->acked) c->acked = a; }
            break;
        case RGPU_MSG_NEED:
            if (h.len >= 16) {
                item *it = calloc(1, sizeof *it);
                if (it) { it->kind = ITEM_NEED; memcpy(it->hash.b, p, 16); enqueue(c, it, true); }
            }
            break;
        case RGPU_MSG_RESULT:
            /* u64 op | u32 status | u32 reserved | u64 err_op | u32 msg_len | msg | data */
            if (h.len >= 28) {
                uint64_t op = rgpu_ld64(p);
                uint32_t ml = rgpu_ld32(p + 24);
                if (ml <= h.len - 28) {
                    if (op + 1 > c->acked) c->acked = op + 1;
                    for (waiter *w = c->waiters; w; w = w->next) {
                        if (w->op != op || w->done) continue;
                        w->status = (int)rgpu_ld32(p + 8);
                        w->msg = strndup((const char *)p + 28, ml);
                        w->n = h.len - 28 - ml;
                        w->data = malloc(w->n ? w->n : 1);
                        if (w->data) memcpy(w->data, p + 28 + ml, w->n);
                        w->done = true;
                        if (c->rgt) {
                            pthread_mutex_lock(&c->rgt_mu);
                            rgpu_rgt_put_result(c->rgt, op, w->status, w->data, w->status ? 0 : w->n);
                            pthread_mutex_unlock(&c->rgt_mu);
                        }
                        break;
                    }
                    pthread_cond_broadcast(&c->cv_wait);
                }
            }
            break;
        case RGPU_MSG_ERROR: {
            char m[256];
            int code = h.len >= 4 ? (int)rgpu_ld32(p) : RGPU_ERR_BAD_MESSAGE;
            snprintf(m, sizeof m, "rgpu-server closed the session: %.*s (%s)",
                     (int)(h.len > 8 ? (h.len - 8 < 200 ? h.len - 8 : 200) : 0), (const char *)p + 8,
                     rgpu_status_str(code));
            mark_dead_locked(c, code ? code : RGPU_ERR_BAD_MESSAGE, m);
            break;
        }
        case RGPU_MSG_BYE:
            mark_dead_locked(c, RGPU_ERR_CLOSED, "rgpu-server said goodbye");
            break;
        default:
            break;   /* unknown server messages are ignored: forward compatible */
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
    *out = NULL;
    rgpu_client *c = calloc(1, sizeof *c);
    if (!c) return RGPU_ERR_NOMEM;
    c->next_id = 1;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->rgt_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv_send, &ca);
    pthread_cond_init(&c->cv_wait, &ca);
    pthread_condattr_destroy(&ca);
    c->fd = dial(address, err, errlen);
    rgpu_status s;
    if (c->fd < 0) { s = RGPU_ERR_IO; goto fail; }
    if ((s = handshake(c, err, errlen))) goto fail;
    if (record_path && *record_path) {
        if ((s = rgpu_rgt_create(record_path, "rgpu recorder", &c->rgt))) {
            set_err(err, errlen, "cannot create trace %s", record_path);
            goto fail;
        }
        rgpu_rgt_set_meta(c->rgt, "backend", c->info.backend);
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
    rgpu_rgt_close(c->rgt);
    free(c);
    return s;
}

const rgpu_server_info *rgpu_client_server(const rgpu_client *c) { return &c->info; }

uint64_t rgpu_client_new_id(rgpu_client *c) {
    return __atomic_fetch_add(&c->next_id, 1, __ATOMIC_RELAXED);
}

rgpu_status rgpu_client_record(rgpu_client *c, const rgpu_record *r, uint64_t *op_index) {
    pthread_mutex_lock(&c->mu);
    rgpu_status s = c->dead ? (rgpu_status)c->dead_status : RGPU_OK;
    /* Frees queued before a wait op go before it, so what it observes
     * (memory stats) already reflects tensors the program dropped. */
    if (!s && r->op < RGPU_OP_COUNT && (rgpu_op_table[r->op].flags & RGPU_OPF_WAIT)) s = emit_frees_locked(c);
    if (!s) s = append_record_locked(c, r, op_index);
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
    pthread_mutex_lock(&c->mu);
    rgpu_status s = c->dead ? (rgpu_status)c->dead_status : append_record_locked(c, &r, &b->op_index);
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
        if (c->cur.len >= RGPU_CHUNK_BYTES) s = close_chunk_locked(c);
    }
    pthread_mutex_unlock(&c->mu);
    if (!linked) { free(copy); free(b); }
    return s;
}

void rgpu_client_free_tensor(rgpu_client *c, uint64_t tid) {
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

static double wait_timeout_s(void) {
    const char *e = getenv("RGPU_WAIT_TIMEOUT");
    double t = e ? atof(e) : 0;
    return t > 0 ? t : 3600.0;
}

rgpu_status rgpu_client_wait(rgpu_client *c, uint64_t op_index, uint8_t **data, size_t *n,
                             char *err, size_t errlen) {
    if (data) *data = NULL;
    if (n) *n = 0;
    waiter w = { .op = op_index };
    pthread_mutex_lock(&c->mu);
    rgpu_status s = RGPU_OK;
    if (c->dead) { set_err(err, errlen, "%s", c->dead_msg); s = c->dead_status; goto out; }
    if (op_index >= c->next_op) { set_err(err, errlen, "wait for op %llu that was never recorded", (unsigned long long)op_index); s = RGPU_ERR_SEQUENCE; goto out; }
    w.next = c->waiters;
    c->waiters = &w;
    c->st.waits++;
    /* A WAIT message asks for a RESULT at op_index whatever the op is; for
     * ops with RGPU_OPF_WAIT the server answers on its own. The message goes
     * after the chunk holding the op, in queue order. */
    if ((s = close_chunk_locked(c))) goto unlink;
    item *it = calloc(1, sizeof *it);
    if (!it || rgpu_buf_reserve(&it->buf, 8)) { free(it); s = RGPU_ERR_NOMEM; goto unlink; }
    it->kind = ITEM_MSG; it->msg_type = RGPU_MSG_WAIT;
    rgpu_st64(it->buf.p, op_index); it->buf.len = 8;
    enqueue(c, it, false);
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    double to = wait_timeout_s();
    dl.tv_sec += (time_t)to;
    while (!w.done && !c->dead) {
        if (pthread_cond_timedwait(&c->cv_wait, &c->mu, &dl) == ETIMEDOUT && !w.done) {
            set_err(err, errlen, "no answer from rgpu-server for op %llu within %.0f s (RGPU_WAIT_TIMEOUT)",
                    (unsigned long long)op_index, to);
            s = RGPU_ERR_TIMEOUT;
            goto unlink;
        }
    }
    if (!w.done) { set_err(err, errlen, "%s", c->dead_msg); s = c->dead_status; goto unlink; }
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
    pthread_mutex_unlock(&c->mu);
    if (c->rgt) {
        pthread_mutex_lock(&c->rgt_mu);
        rgpu_rgt_flush(c->rgt);
        pthread_mutex_unlock(&c->rgt_mu);
    }
    return s;
}

void rgpu_client_get_stats(rgpu_client *c, rgpu_client_stats *s) {
    pthread_mutex_lock(&c->mu);
    *s = c->st;
    pthread_mutex_unlock(&c->mu);
}

void rgpu_client_close(rgpu_client *c) {
    if (!c) return;
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
        shutdown(c->fd, SHUT_RDWR);
        pthread_join(c->receiver, NULL);
    }
    close(c->fd);
    if (c->rgt) { rgpu_rgt_flush(c->rgt); rgpu_rgt_close(c->rgt); }
    while (c->q_head) { item *it = c->q_head; c->q_head = it->next; rgpu_buf_free(&it->buf); free(it); }
    while (c->blobs) { blob *b = c->blobs; c->blobs = b->next; free(b->data); free(b); }
    rgpu_buf_free(&c->cur);
    free(c->frees);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->rgt_mu);
    pthread_cond_destroy(&c->cv_send);
    pthread_cond_destroy(&c->cv_wait);
    free(c);
}
