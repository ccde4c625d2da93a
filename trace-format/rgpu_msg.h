/* rgpu_msg.h — one codec per wire message (FORMAT.md §7.1). Included by
 * rgpu_format.h; do not include it alone.
 *
 * Every message has a struct naming its fields and
 *
 *   size_t rgpu_msg_X_encode(const rgpu_msg_X *m, uint8_t *out, size_t cap)
 *       the whole payload into out[0..cap): its length, 0 when it does not
 *       fit or a field is out of range (a too long token, version, message;
 *       BYE's payload is empty: 0 is its length);
 *   rgpu_status rgpu_msg_X_decode(const uint8_t *p, size_t n, rgpu_msg_X *m)
 *       validate and parse the payload p[0..n): lengths, reserved fields and
 *       counts are checked; pointers in *m point into p;
 *   rgpu_status rgpu_msg_X_send(int fd, const rgpu_msg_X *m)
 *       header + payload on fd, the bulk tail (a frame, result bytes) sent
 *       from where it lies (gathered write), never copied.
 *
 * RGPU_MSG_X_HEAD is the size of the fixed part. A status from a decoder is
 * RGPU_ERR_BAD_MESSAGE unless the message's comment says otherwise (the
 * statuses the server has always answered with). tests/c/test_msg.c checks
 * FORMAT.md's layouts against these codecs. */
#ifndef RGPU_MSG_H
#define RGPU_MSG_H

#define RGPU_MAX_TOKEN_LEN   1024   /* HELLO token bytes */
#define RGPU_MAX_PEER_VERSION 32    /* HELLO's trailing software version */
#define RGPU_MAX_ERROR_MSG   511    /* ERROR message bytes (longer is cut by the encoder's users) */

/* HELLO (c→s), 56 + token_len bytes, then optionally u8 n | n bytes:
 *   u32 version @0 | u8[16] op_table @4 | u64 session @20 | u64 last_ack @28 |
 *   u8[16] secret @36 | u32 token_len @52 | token @56 | [u8 n | software version]
 * session 0 asks for a new session (secret: zeros, ignored), else the one to
 * resume (secret: the one its WELCOME gave; last_ack: the last ACK the client
 * saw). token_len ≤ RGPU_MAX_TOKEN_LEN; the trailer, when present, is exactly
 * 1 + n bytes with n ≤ RGPU_MAX_PEER_VERSION.
 * Decoding: n < 56 is BAD_MESSAGE with *m zeroed but for version (read when
 * n ≥ 4); a token or trailer that does not match the payload is BAD_MESSAGE
 * with the fixed fields filled (a server names a version or op-table
 * mismatch before a malformed HELLO). */
#define RGPU_MSG_HELLO_HEAD 56
#define RGPU_SESSION_SECRET 16      /* bytes of a session's secret (FORMAT.md §7.2) */
typedef struct rgpu_msg_hello {
    uint32_t version;           /* RGPU_WIRE_VERSION */
    uint8_t op_table[16];       /* rgpu_op_table_hash() */
    uint64_t session;
    uint64_t last_ack;
    uint8_t secret[RGPU_SESSION_SECRET];
    uint32_t token_len;
    const uint8_t *token;
    bool has_sw_version;        /* the trailer is there */
    uint8_t sw_version_len;
    const char *sw_version;     /* not NUL-terminated */
} rgpu_msg_hello;

/* WELCOME (s→c), 88 + ceil(nbits/8) bytes, then optionally u8 n | n bytes:
 *   u32 version @0 | u8[16] op_table @4 | u64 session @20 | u64 applied @28 |
 *   u8[16] secret @36 | char[32] backend @52 (NUL-padded) | u32 nbits @84 |
 *   bitmap @88 | [u8 n | version]
 * secret: what a HELLO resuming this session must carry. Bit i of the bitmap
 * (byte i/8, bit i%8, LSB first) set: the backend runs op i. backend holds at
 * most 31 characters when encoded (the 32nd byte is NUL); decoded, it is
 * NUL-terminated whatever the peer sent. */
#define RGPU_MSG_WELCOME_HEAD 88
typedef struct rgpu_msg_welcome {
    uint32_t version;
    uint8_t op_table[16];
    uint64_t session;
    uint64_t applied;           /* the next op the server will apply */
    uint8_t secret[RGPU_SESSION_SECRET];
    char backend[33];
    uint32_t nbits;
    const uint8_t *bitmap;      /* ceil(nbits/8) bytes */
    bool has_sw_version;
    uint8_t sw_version_len;
    const char *sw_version;     /* not NUL-terminated */
} rgpu_msg_welcome;

/* CHUNK (c→s), 32 + frame bytes:
 *   u64 first_op @0 | u32 count @8 | u32 reserved 0 @12 | u8[16] hash @16 | frame @32
 * hash: XXH3-128 of the raw records. Decoding: shorter than 32 is
 * RGPU_ERR_TRUNCATED, reserved ≠ 0 RGPU_ERR_RESERVED. (Type 4, the retired
 * CHUNK_REF, has no codec: the server refuses it as an unexpected message.) */
#define RGPU_MSG_CHUNK_HEAD 32
typedef struct rgpu_msg_chunk {
    uint64_t first_op;
    uint32_t count;
    rgpu_hash hash;
    const uint8_t *frame;       /* frame_len bytes (RGPU_FRAME_*) */
    size_t frame_len;
} rgpu_msg_chunk;

/* BLOB (c→s), 16 + frame bytes:  u8[16] hash @0 | frame @16
 * Decoding: shorter than 16 is RGPU_ERR_TRUNCATED. */
#define RGPU_MSG_BLOB_HEAD 16
typedef struct rgpu_msg_blob {
    rgpu_hash hash;             /* of the raw bytes */
    const uint8_t *frame;
    size_t frame_len;
} rgpu_msg_blob;

/* BLOB_PART (c→s), 32 + frame bytes:
 *   u8[16] hash @0 | u64 total @16 | u64 offset @24 | frame @32
 * The piece of the blob `hash` (total raw bytes) at offset. Decoding: a
 * payload without a whole frame header after the 32 bytes is
 * RGPU_ERR_TRUNCATED; total > RGPU_MAX_BLOB_RAW or offset ≥ total is
 * BAD_MESSAGE. */
#define RGPU_MSG_BLOB_PART_HEAD 32
typedef struct rgpu_msg_blob_part {
    rgpu_hash hash;
    uint64_t total;
    uint64_t offset;
    const uint8_t *frame;
    size_t frame_len;
} rgpu_msg_blob_part;

/* NEED (s→c), exactly 16 bytes:  u8[16] hash @0 */
#define RGPU_MSG_NEED_HEAD 16
typedef struct rgpu_msg_need { rgpu_hash hash; } rgpu_msg_need;

/* WAIT (c→s), exactly 8 bytes:  u64 op_index @0 */
#define RGPU_MSG_WAIT_HEAD 8
typedef struct rgpu_msg_wait { uint64_t op_index; } rgpu_msg_wait;

/* ACK (s→c), exactly 8 bytes:  u64 applied @0 (the next op the server will apply) */
#define RGPU_MSG_ACK_HEAD 8
typedef struct rgpu_msg_ack { uint64_t applied; } rgpu_msg_ack;

/* RESULT (s→c), 28 + msg_len + data bytes:
 *   u64 op @0 | u32 status @8 | u32 reserved 0 @12 | u64 err_op @16 |
 *   u32 msg_len @24 | msg @28 | data @28+msg_len (the rest)
 * Decoding: reserved ≠ 0 or msg_len past the payload is BAD_MESSAGE. */
#define RGPU_MSG_RESULT_HEAD 28
typedef struct rgpu_msg_result {
    uint64_t op;
    uint32_t status;            /* rgpu_status of the ops since the previous RESULT */
    uint64_t err_op;            /* the failing op when status ≠ 0 */
    uint32_t msg_len;
    const char *msg;            /* UTF-8, not NUL-terminated */
    const uint8_t *data;        /* data_len bytes: the waited op's result */
    size_t data_len;
} rgpu_msg_result;

/* ERROR (either way), 8 + msg_len bytes:  u32 code @0 | u32 reserved 0 @4 | message @8
 * Encoding: msg_len ≤ RGPU_MAX_ERROR_MSG. Decoding: shorter than 8 or
 * reserved ≠ 0 is BAD_MESSAGE (the receiver then reports BAD_MESSAGE). */
#define RGPU_MSG_ERROR_HEAD 8
typedef struct rgpu_msg_error {
    uint32_t code;              /* rgpu_status */
    uint32_t msg_len;
    const char *msg;            /* UTF-8, not NUL-terminated */
} rgpu_msg_error;

/* NOTICE (s→c), ERROR's layout:  u32 code @0 | u32 reserved 0 @4 | message @8
 * Something the client should know that does not end the session (FORMAT.md
 * §7.2); a client ignores a code it does not know. */
typedef rgpu_msg_error rgpu_msg_notice;
#define RGPU_MSG_NOTICE_HEAD RGPU_MSG_ERROR_HEAD
enum {
    RGPU_NOTICE_JOURNAL_OFF = 1,    /* the session's journal stopped (message: why); a server restart
                                       will not resume the session, which goes on */
    RGPU_NOTICE_JOURNAL_NONE = 2,   /* the server keeps no journal (--journal none) */
};

/* BYE (either way): empty. */
#define RGPU_MSG_BYE_HEAD 0
typedef struct rgpu_msg_bye { char unused_; } rgpu_msg_bye;

#define RGPU_MSG_CODEC_(name) \
    size_t rgpu_msg_##name##_encode(const rgpu_msg_##name *m, uint8_t *out, size_t cap); \
    rgpu_status rgpu_msg_##name##_decode(const uint8_t *p, size_t n, rgpu_msg_##name *m); \
    rgpu_status rgpu_msg_##name##_send(int fd, const rgpu_msg_##name *m);
RGPU_MSG_CODEC_(hello)
RGPU_MSG_CODEC_(welcome)
RGPU_MSG_CODEC_(chunk)
RGPU_MSG_CODEC_(blob)
RGPU_MSG_CODEC_(blob_part)
RGPU_MSG_CODEC_(need)
RGPU_MSG_CODEC_(wait)
RGPU_MSG_CODEC_(ack)
RGPU_MSG_CODEC_(result)
RGPU_MSG_CODEC_(error)
RGPU_MSG_CODEC_(notice)
RGPU_MSG_CODEC_(bye)
#undef RGPU_MSG_CODEC_

/* The whole payload size of a message (what _encode writes). */
size_t rgpu_msg_hello_size(const rgpu_msg_hello *m);
size_t rgpu_msg_result_size(const rgpu_msg_result *m);

#endif
