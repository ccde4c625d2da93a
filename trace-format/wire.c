/* wire.c — message framing over a stream socket (FORMAT.md, "Wire").
 *   header: u8 type | u8 flags (0) | u16 reserved (0) | u32 magic | u64 payload_len */
#include "rgpu_format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static const char *const msg_names[RGPU_MSG_TYPE_COUNT_] = {
    [0] = "?", [RGPU_MSG_HELLO] = "HELLO", [RGPU_MSG_WELCOME] = "WELCOME",
    [RGPU_MSG_CHUNK] = "CHUNK", [RGPU_MSG_CHUNK_REF] = "CHUNK_REF", [RGPU_MSG_BLOB] = "BLOB",
    [RGPU_MSG_NEED] = "NEED", [RGPU_MSG_WAIT] = "WAIT", [RGPU_MSG_RESULT] = "RESULT",
    [RGPU_MSG_ACK] = "ACK", [RGPU_MSG_ERROR] = "ERROR", [RGPU_MSG_BYE] = "BYE",
    [RGPU_MSG_BLOB_PART] = "BLOB_PART", [RGPU_MSG_NOTICE] = "NOTICE",
};
const char *rgpu_msg_name(int t) { return (t > 0 && t < RGPU_MSG_TYPE_COUNT_) ? msg_names[t] : "?"; }

void rgpu_wire_header_encode(uint8_t out[RGPU_WIRE_HEADER], int type, uint64_t len) {
    out[0] = (uint8_t)type; out[1] = 0; out[2] = 0; out[3] = 0;
    rgpu_st32(out + 4, RGPU_WIRE_MAGIC);
    rgpu_st64(out + 8, len);
}

rgpu_status rgpu_wire_header_decode(const uint8_t in[RGPU_WIRE_HEADER], uint64_t max_len,
                                    rgpu_msg_header *h) {
    if (rgpu_ld32(in + 4) != RGPU_WIRE_MAGIC) return RGPU_ERR_BAD_MAGIC;
    if (in[1] || in[2] || in[3]) return RGPU_ERR_RESERVED;
    h->type = in[0];          /* filled before the checks below: a refusal can name them */
    h->len = rgpu_ld64(in + 8);
    if (in[0] == 0 || in[0] >= RGPU_MSG_TYPE_COUNT_) return RGPU_ERR_BAD_MESSAGE;
    if (h->len > max_len) return RGPU_ERR_TOO_LARGE;
    return RGPU_OK;
}

#ifndef MSG_NOSIGNAL      /* macOS: the client's sockets carry SO_NOSIGPIPE instead */
#define MSG_NOSIGNAL 0
#endif

rgpu_status rgpu_io_write_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == ENOTSOCK) w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return (errno == EPIPE || errno == ECONNRESET) ? RGPU_ERR_CLOSED : RGPU_ERR_IO;
        }
        b += w; n -= (size_t)w;
    }
    return RGPU_OK;
}

rgpu_status rgpu_io_read_all(int fd, void *p, size_t n) {
    uint8_t *b = p;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b + got, n - got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno == ECONNRESET ? RGPU_ERR_CLOSED : RGPU_ERR_IO;
        }
        if (r == 0) return got ? RGPU_ERR_TRUNCATED : RGPU_ERR_CLOSED;
        got += (size_t)r;
    }
    return RGPU_OK;
}

rgpu_status rgpu_wire_send(int fd, int type, const void *a, size_t an, const void *b, size_t bn) {
    uint8_t h[RGPU_WIRE_HEADER];
    rgpu_wire_header_encode(h, type, (uint64_t)an + bn);
    struct iovec iov[3] = { { h, sizeof h }, { (void *)a, an }, { (void *)b, bn } };
    int cnt = 3;
    struct iovec *v = iov;
    while (cnt) {
        struct msghdr m = { .msg_iov = v, .msg_iovlen = (size_t)cnt };
        ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (w < 0 && errno == ENOTSOCK) w = writev(fd, v, cnt);
        if (w < 0) {
            if (errno == EINTR) continue;
            return (errno == EPIPE || errno == ECONNRESET) ? RGPU_ERR_CLOSED : RGPU_ERR_IO;
        }
        size_t left = (size_t)w;
        while (cnt && left >= v->iov_len) { left -= v->iov_len; v++; cnt--; }
        if (cnt) { v->iov_base = (uint8_t *)v->iov_base + left; v->iov_len -= left; }
    }
    return RGPU_OK;
}

rgpu_status rgpu_wire_recv(int fd, uint64_t max_len, rgpu_msg_header *h, uint8_t **payload) {
    uint8_t hb[RGPU_WIRE_HEADER];
    *payload = NULL;
    rgpu_status s = rgpu_io_read_all(fd, hb, sizeof hb);
    if (s) return s;
    if ((s = rgpu_wire_header_decode(hb, max_len, h))) return s;
    if (h->len > SIZE_MAX - 1) return RGPU_ERR_TOO_LARGE;
    uint8_t *p = malloc(h->len ? h->len : 1);
    if (!p) return RGPU_ERR_NOMEM;
    if ((s = rgpu_io_read_all(fd, p, h->len))) {
        free(p);
        return s == RGPU_ERR_CLOSED && h->len ? RGPU_ERR_TRUNCATED : s;
    }
    *payload = p;
    return RGPU_OK;
}
