/* msg.c — the wire messages' payloads (FORMAT.md §7.1; API in rgpu_msg.h).
 *
 * Each message is a head written here (its fixed fields and, for HELLO,
 * WELCOME, ERROR and NOTICE, the variable bytes that follow them) and, for CHUNK,
 * BLOB, BLOB_PART and RESULT, a bulk tail (a frame, result bytes) that _send
 * passes to the gathered write from where it lies. The offsets live here and
 * nowhere else: client.c and the server (replayer/server/server_loop.c) speak
 * through these functions. */
#include "rgpu_format.h"

#include <stdlib.h>
#include <string.h>

#define BAD_LEN SIZE_MAX   /* a head length: a field is out of range */

typedef void (*head_fn)(const void *m, uint8_t *out);

static size_t encode_parts(size_t hn, head_fn head, const void *m, const void *tail, size_t tn,
                           uint8_t *out, size_t cap) {
    if (hn == BAD_LEN || tn > cap || hn > cap - tn) return 0;
    head(m, out);
    if (tn) memcpy(out + hn, tail, tn);
    return hn + tn;
}

static rgpu_status send_parts(int fd, int type, size_t hn, head_fn head, const void *m, const void *tail, size_t tn) {
    if (hn == BAD_LEN) return RGPU_ERR_TOO_LARGE;
    uint8_t stack[2048];
    uint8_t *h = hn <= sizeof stack ? stack : malloc(hn);
    if (!h) return RGPU_ERR_NOMEM;
    head(m, h);
    rgpu_status s = rgpu_wire_send(fd, type, h, hn, tail, tn);
    if (h != stack) free(h);
    return s;
}

/* encode and send of a message from its head length, head writer and tail */
#define CODEC_(name, sname, type, TAIL, TN) \
    size_t rgpu_msg_##name##_encode(const rgpu_msg_##sname *m, uint8_t *out, size_t cap) { \
        return encode_parts(name##_head_len(m), name##_head, m, TAIL, TN, out, cap); \
    } \
    rgpu_status rgpu_msg_##name##_send(int fd, const rgpu_msg_##sname *m) { \
        return send_parts(fd, type, name##_head_len(m), name##_head, m, TAIL, TN); \
    }

/* The optional trailer of HELLO and WELCOME after p[0..at): none, or exactly
 * u8 n | n bytes with n ≤ max. */
static bool trailer_decode(const uint8_t *p, size_t n, size_t at, unsigned max, bool *has, uint8_t *len,
                           const char **s) {
    *has = false; *len = 0; *s = NULL;
    if (n == at) return true;
    if (p[at] > max || n - at != 1u + p[at]) return false;
    *has = true; *len = p[at]; *s = (const char *)p + at + 1;
    return true;
}

static size_t trailer_encode(uint8_t *o, bool has, uint8_t len, const char *s) {
    if (!has) return 0;
    o[0] = len;
    if (len) memcpy(o + 1, s, len);
    return 1u + len;
}

/* ------------------------------------------------------------------ HELLO */
static size_t hello_head_len(const rgpu_msg_hello *m) {
    if (m->token_len > RGPU_MAX_TOKEN_LEN || (m->has_sw_version && m->sw_version_len > RGPU_MAX_PEER_VERSION))
        return BAD_LEN;
    return RGPU_MSG_HELLO_HEAD + m->token_len + (m->has_sw_version ? 1u + m->sw_version_len : 0);
}

static void hello_head(const void *mv, uint8_t *o) {
    const rgpu_msg_hello *m = mv;
    rgpu_st32(o, m->version);
    memcpy(o + 4, m->op_table, 16);
    rgpu_st64(o + 20, m->session);
    rgpu_st64(o + 28, m->last_ack);
    memcpy(o + 36, m->secret, RGPU_SESSION_SECRET);
    rgpu_st32(o + 52, m->token_len);
    if (m->token_len) memcpy(o + 56, m->token, m->token_len);
    trailer_encode(o + 56 + m->token_len, m->has_sw_version, m->sw_version_len, m->sw_version);
}
CODEC_(hello, hello, RGPU_MSG_HELLO, NULL, 0)
size_t rgpu_msg_hello_size(const rgpu_msg_hello *m) { return hello_head_len(m); }

rgpu_status rgpu_msg_hello_decode(const uint8_t *p, size_t n, rgpu_msg_hello *m) {
    memset(m, 0, sizeof *m);
    if (n >= 4) m->version = rgpu_ld32(p);   /* a peer of another format version is named as such */
    if (n < RGPU_MSG_HELLO_HEAD) return RGPU_ERR_BAD_MESSAGE;
    memcpy(m->op_table, p + 4, 16);
    m->session = rgpu_ld64(p + 20);
    m->last_ack = rgpu_ld64(p + 28);
    memcpy(m->secret, p + 36, RGPU_SESSION_SECRET);
    uint32_t tl = rgpu_ld32(p + 52);
    m->token_len = tl;
    if (tl > RGPU_MAX_TOKEN_LEN || tl > n - RGPU_MSG_HELLO_HEAD ||
        !trailer_decode(p, n, RGPU_MSG_HELLO_HEAD + tl, RGPU_MAX_PEER_VERSION, &m->has_sw_version,
                        &m->sw_version_len, &m->sw_version))
        return RGPU_ERR_BAD_MESSAGE;
    m->token = p + RGPU_MSG_HELLO_HEAD;
    return RGPU_OK;
}

/* ---------------------------------------------------------------- WELCOME */
static size_t welcome_head_len(const rgpu_msg_welcome *m) {
    return RGPU_MSG_WELCOME_HEAD + ((size_t)m->nbits + 7) / 8 + (m->has_sw_version ? 1u + m->sw_version_len : 0);
}

static void welcome_head(const void *mv, uint8_t *o) {
    const rgpu_msg_welcome *m = mv;
    size_t nb = ((size_t)m->nbits + 7) / 8;
    rgpu_st32(o, m->version);
    memcpy(o + 4, m->op_table, 16);
    rgpu_st64(o + 20, m->session);
    rgpu_st64(o + 28, m->applied);
    memcpy(o + 36, m->secret, RGPU_SESSION_SECRET);
    memset(o + 52, 0, 32);
    memcpy(o + 52, m->backend, strnlen(m->backend, 31));
    rgpu_st32(o + 84, m->nbits);
    if (nb) memcpy(o + 88, m->bitmap, nb);
    trailer_encode(o + 88 + nb, m->has_sw_version, m->sw_version_len, m->sw_version);
}
CODEC_(welcome, welcome, RGPU_MSG_WELCOME, NULL, 0)

rgpu_status rgpu_msg_welcome_decode(const uint8_t *p, size_t n, rgpu_msg_welcome *m) {
    memset(m, 0, sizeof *m);
    if (n < RGPU_MSG_WELCOME_HEAD) return RGPU_ERR_BAD_MESSAGE;
    size_t nb = ((size_t)rgpu_ld32(p + 84) + 7) / 8;
    if (nb > n - RGPU_MSG_WELCOME_HEAD) return RGPU_ERR_BAD_MESSAGE;
    m->version = rgpu_ld32(p);
    memcpy(m->op_table, p + 4, 16);
    m->session = rgpu_ld64(p + 20);
    m->applied = rgpu_ld64(p + 28);
    memcpy(m->secret, p + 36, RGPU_SESSION_SECRET);
    memcpy(m->backend, p + 52, 32);
    m->backend[32] = 0;
    m->nbits = rgpu_ld32(p + 84);
    m->bitmap = p + RGPU_MSG_WELCOME_HEAD;
    if (!trailer_decode(p, n, RGPU_MSG_WELCOME_HEAD + nb, 255, &m->has_sw_version, &m->sw_version_len, &m->sw_version))
        return RGPU_ERR_BAD_MESSAGE;
    return RGPU_OK;
}

/* ------------------------------------------------------------------ CHUNK */
static size_t chunk_head_len(const rgpu_msg_chunk *m) { (void)m; return RGPU_MSG_CHUNK_HEAD; }

static void chunk_head(const void *mv, uint8_t *o) {
    const rgpu_msg_chunk *m = mv;
    rgpu_st64(o, m->first_op);
    rgpu_st32(o + 8, m->count);
    rgpu_st32(o + 12, 0);
    memcpy(o + 16, m->hash.b, 16);
}
CODEC_(chunk, chunk, RGPU_MSG_CHUNK, m->frame, m->frame_len)

rgpu_status rgpu_msg_chunk_decode(const uint8_t *p, size_t n, rgpu_msg_chunk *m) {
    memset(m, 0, sizeof *m);
    if (n < RGPU_MSG_CHUNK_HEAD) return RGPU_ERR_TRUNCATED;
    if (rgpu_ld32(p + 12)) return RGPU_ERR_RESERVED;
    m->first_op = rgpu_ld64(p);
    m->count = rgpu_ld32(p + 8);
    memcpy(m->hash.b, p + 16, 16);
    m->frame = p + RGPU_MSG_CHUNK_HEAD;
    m->frame_len = n - RGPU_MSG_CHUNK_HEAD;
    return RGPU_OK;
}

/* ------------------------------------------------------------------- BLOB */
static size_t blob_head_len(const rgpu_msg_blob *m) { (void)m; return RGPU_MSG_BLOB_HEAD; }
static void blob_head(const void *mv, uint8_t *o) { memcpy(o, ((const rgpu_msg_blob *)mv)->hash.b, 16); }
CODEC_(blob, blob, RGPU_MSG_BLOB, m->frame, m->frame_len)

rgpu_status rgpu_msg_blob_decode(const uint8_t *p, size_t n, rgpu_msg_blob *m) {
    memset(m, 0, sizeof *m);
    if (n < RGPU_MSG_BLOB_HEAD) return RGPU_ERR_TRUNCATED;
    memcpy(m->hash.b, p, 16);
    m->frame = p + RGPU_MSG_BLOB_HEAD;
    m->frame_len = n - RGPU_MSG_BLOB_HEAD;
    return RGPU_OK;
}

/* -------------------------------------------------------------- BLOB_PART */
static size_t blob_part_head_len(const rgpu_msg_blob_part *m) { (void)m; return RGPU_MSG_BLOB_PART_HEAD; }

static void blob_part_head(const void *mv, uint8_t *o) {
    const rgpu_msg_blob_part *m = mv;
    memcpy(o, m->hash.b, 16);
    rgpu_st64(o + 16, m->total);
    rgpu_st64(o + 24, m->offset);
}
CODEC_(blob_part, blob_part, RGPU_MSG_BLOB_PART, m->frame, m->frame_len)

rgpu_status rgpu_msg_blob_part_decode(const uint8_t *p, size_t n, rgpu_msg_blob_part *m) {
    memset(m, 0, sizeof *m);
    if (n < RGPU_MSG_BLOB_PART_HEAD + RGPU_FRAME_HEADER) return RGPU_ERR_TRUNCATED;
    memcpy(m->hash.b, p, 16);
    m->total = rgpu_ld64(p + 16);
    m->offset = rgpu_ld64(p + 24);
    if (m->total > RGPU_MAX_BLOB_RAW || m->offset >= m->total) return RGPU_ERR_BAD_MESSAGE;
    m->frame = p + RGPU_MSG_BLOB_PART_HEAD;
    m->frame_len = n - RGPU_MSG_BLOB_PART_HEAD;
    return RGPU_OK;
}

/* ------------------------------------------------------ NEED, WAIT, ACK */
static size_t need_head_len(const rgpu_msg_need *m) { (void)m; return RGPU_MSG_NEED_HEAD; }
static void need_head(const void *mv, uint8_t *o) { memcpy(o, ((const rgpu_msg_need *)mv)->hash.b, 16); }
CODEC_(need, need, RGPU_MSG_NEED, NULL, 0)

rgpu_status rgpu_msg_need_decode(const uint8_t *p, size_t n, rgpu_msg_need *m) {
    memset(m, 0, sizeof *m);
    if (n != RGPU_MSG_NEED_HEAD) return RGPU_ERR_BAD_MESSAGE;
    memcpy(m->hash.b, p, 16);
    return RGPU_OK;
}

/* a message that is one u64 */
static rgpu_status u64_decode(const uint8_t *p, size_t n, uint64_t *v) {
    *v = 0;
    if (n != 8) return RGPU_ERR_BAD_MESSAGE;
    *v = rgpu_ld64(p);
    return RGPU_OK;
}

static size_t wait_head_len(const rgpu_msg_wait *m) { (void)m; return RGPU_MSG_WAIT_HEAD; }
static void wait_head(const void *mv, uint8_t *o) { rgpu_st64(o, ((const rgpu_msg_wait *)mv)->op_index); }
CODEC_(wait, wait, RGPU_MSG_WAIT, NULL, 0)
rgpu_status rgpu_msg_wait_decode(const uint8_t *p, size_t n, rgpu_msg_wait *m) { return u64_decode(p, n, &m->op_index); }

static size_t ack_head_len(const rgpu_msg_ack *m) { (void)m; return RGPU_MSG_ACK_HEAD; }
static void ack_head(const void *mv, uint8_t *o) { rgpu_st64(o, ((const rgpu_msg_ack *)mv)->applied); }
CODEC_(ack, ack, RGPU_MSG_ACK, NULL, 0)
rgpu_status rgpu_msg_ack_decode(const uint8_t *p, size_t n, rgpu_msg_ack *m) { return u64_decode(p, n, &m->applied); }

/* ----------------------------------------------------------------- RESULT */
static size_t result_head_len(const rgpu_msg_result *m) { return RGPU_MSG_RESULT_HEAD + (size_t)m->msg_len; }

static void result_head(const void *mv, uint8_t *o) {
    const rgpu_msg_result *m = mv;
    rgpu_st64(o, m->op);
    rgpu_st32(o + 8, m->status);
    rgpu_st32(o + 12, 0);
    rgpu_st64(o + 16, m->err_op);
    rgpu_st32(o + 24, m->msg_len);
    if (m->msg_len) memcpy(o + 28, m->msg, m->msg_len);
}
CODEC_(result, result, RGPU_MSG_RESULT, m->data, m->data_len)
size_t rgpu_msg_result_size(const rgpu_msg_result *m) { return result_head_len(m) + m->data_len; }

rgpu_status rgpu_msg_result_decode(const uint8_t *p, size_t n, rgpu_msg_result *m) {
    memset(m, 0, sizeof *m);
    if (n < RGPU_MSG_RESULT_HEAD || rgpu_ld32(p + 12)) return RGPU_ERR_BAD_MESSAGE;
    uint32_t ml = rgpu_ld32(p + 24);
    if (ml > n - RGPU_MSG_RESULT_HEAD) return RGPU_ERR_BAD_MESSAGE;
    m->op = rgpu_ld64(p);
    m->status = rgpu_ld32(p + 8);
    m->err_op = rgpu_ld64(p + 16);
    m->msg_len = ml;
    m->msg = (const char *)p + RGPU_MSG_RESULT_HEAD;
    m->data = p + RGPU_MSG_RESULT_HEAD + ml;
    m->data_len = n - RGPU_MSG_RESULT_HEAD - ml;
    return RGPU_OK;
}

/* ------------------------------------------------------------------ ERROR */
static size_t error_head_len(const rgpu_msg_error *m) {
    return m->msg_len > RGPU_MAX_ERROR_MSG ? BAD_LEN : RGPU_MSG_ERROR_HEAD + m->msg_len;
}

static void error_head(const void *mv, uint8_t *o) {
    const rgpu_msg_error *m = mv;
    rgpu_st32(o, m->code);
    rgpu_st32(o + 4, 0);
    if (m->msg_len) memcpy(o + 8, m->msg, m->msg_len);
}
CODEC_(error, error, RGPU_MSG_ERROR, NULL, 0)

rgpu_status rgpu_msg_error_decode(const uint8_t *p, size_t n, rgpu_msg_error *m) {
    memset(m, 0, sizeof *m);
    if (n < RGPU_MSG_ERROR_HEAD || rgpu_ld32(p + 4) || n - RGPU_MSG_ERROR_HEAD > UINT32_MAX) return RGPU_ERR_BAD_MESSAGE;
    m->code = rgpu_ld32(p);
    m->msg_len = (uint32_t)(n - RGPU_MSG_ERROR_HEAD);
    m->msg = (const char *)p + RGPU_MSG_ERROR_HEAD;
    return RGPU_OK;
}

/* ----------------------------------------------------------------- NOTICE */
#define notice_head_len error_head_len   /* ERROR's layout */
#define notice_head error_head
CODEC_(notice, notice, RGPU_MSG_NOTICE, NULL, 0)
rgpu_status rgpu_msg_notice_decode(const uint8_t *p, size_t n, rgpu_msg_notice *m) { return rgpu_msg_error_decode(p, n, m); }

/* -------------------------------------------------------------------- BYE */
static size_t bye_head_len(const rgpu_msg_bye *m) { (void)m; return RGPU_MSG_BYE_HEAD; }
static void bye_head(const void *mv, uint8_t *o) { (void)mv; (void)o; }
CODEC_(bye, bye, RGPU_MSG_BYE, NULL, 0)

rgpu_status rgpu_msg_bye_decode(const uint8_t *p, size_t n, rgpu_msg_bye *m) {
    (void)p;
    memset(m, 0, sizeof *m);
    return n ? RGPU_ERR_BAD_MESSAGE : RGPU_OK;
}
