/* recorder.h — the client side of rgpu: record ops, stream them to a server.
 *
 * One rgpu_client per connection. Any thread may record; records are
 * appended to the open chunk under a mutex and the call returns. A sender
 * thread closes chunks (at a wait, at RGPU_CHUNK_BYTES, or RGPU_CHUNK_MS after
 * the chunk's first record), compresses and sends them, and answers the
 * server's NEED for blob bytes. A receiver thread takes ACK, NEED, RESULT and
 * ERROR messages. Only waits block, and only on the server.
 *
 * A dropped connection is resumed on its own (client.c explains how):
 *   RGPU_RECONNECT_TIMEOUT  seconds to keep redialling (default 60; 0 = never
 *                           resume: a drop kills the client as before)
 *   RGPU_MAX_UNACKED        bytes of un-acknowledged chunks kept for a resend
 *                           (default 64 MiB, at least 64 KiB); over it,
 *                           rgpu_client_throttle blocks until ACKs catch up
 *   RGPU_WAIT_TIMEOUT       seconds any wait may take (default 3600)
 *   RGPU_TOKEN, RGPU_TOKEN_FILE  the server's token (else its default file)
 * A session the server no longer holds fails every later call with
 * RGPU_ERR_SESSION_LOST. */
#ifndef RGPU_RECORDER_H
#define RGPU_RECORDER_H

#include "rgpu_format.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RGPU_CHUNK_BYTES (256u << 10)   /* close a chunk at this many raw bytes */
#define RGPU_CHUNK_MS    5              /* ... or this long after its first record */
#define RGPU_CHUNK_MIN_US 100           /* ... shorter right after the server drained (client.c) */
#define RGPU_FREE_BATCH  256            /* tensor frees per FREE record */

typedef struct rgpu_client rgpu_client;

typedef struct rgpu_client_stats {
    uint64_t ops, chunks, waits, bytes_out, bytes_in;
    uint64_t blobs_sent, blobs_deduped, frees;
    uint64_t free_records;    /* FREE records among ops (frees: the tensor ids they name) */
    uint64_t reconnects;      /* links that dropped and were resumed */
    uint64_t unacked_bytes;   /* chunk bytes held for a resend (now) */
    uint64_t templates;       /* distinct blobs registered with rgpu_client_put_blob */
    uint64_t calls;           /* CALL records recorded */
    uint64_t round_trips;     /* times the program or the server waited on the network: the
                                 handshake, waits, the server's NEEDs, reconnects */
} rgpu_client_stats;

typedef struct rgpu_server_info {
    char backend[32];
    uint64_t session;
    uint8_t supports[(RGPU_OP_COUNT + 7) / 8];   /* bit op set: backend runs it */
    char version[33];                             /* the server's software version ("?": not said) */
} rgpu_server_info;

/* Connect to "unix:/path" or "host:port" and handshake. record_path, when
 * not NULL, also writes everything sent into a .rgt file. On failure *out is
 * NULL and err holds a one-line reason. */
rgpu_status rgpu_client_connect(const char *address, const char *record_path,
                                rgpu_client **out, char *err, size_t errlen);
/* The same with the server's token given (NULL or "": RGPU_TOKEN, else
 * the file RGPU_TOKEN_FILE, else the server's default token file). */
rgpu_status rgpu_client_connect_token(const char *address, const char *record_path, const char *token,
                                      rgpu_client **out, char *err, size_t errlen);
/* Flush, say BYE and wait (at most 2 s) for the server's BYE, which says it
 * freed the session; join threads, close the trace. NULL is a no-op. */
void rgpu_client_close(rgpu_client *c);
const rgpu_server_info *rgpu_client_server(const rgpu_client *c);

/* A fresh id for a tensor or storage (one counter, never 0). While the
 * calling thread captures: a template-local id, RGPU_TEMPLATE_LOCAL_BIT set. */
uint64_t rgpu_client_new_id(rgpu_client *c);

/* Append one record; *op_index gets its global index (0 while the calling
 * thread captures: the record goes into the capture, no index is used).
 * INTS args are read from v.ints.p (n little-endian int64s) and copied.
 * While capturing, a WAIT-flag op or a CALL gives RGPU_ERR_UNSUPPORTED and
 * more than RGPU_MAX_CHUNK_RAW bytes of records RGPU_ERR_TOO_LARGE. */
rgpu_status rgpu_client_record(rgpu_client *c, const rgpu_record *r, uint64_t *op_index);

/* Record an UPLOAD of n bytes into the new tensor out (flags must include
 * NEW_STORAGE, nbytes == n). The bytes are copied and sent only if the server
 * asks for them (NEED); the record names them by XXH3-128. */
rgpu_status rgpu_client_upload(rgpu_client *c, const rgpu_tdef *out, const void *data, size_t n,
                               uint64_t *op_index);

/* Queue a tensor id to free; recorded as one FREE record per RGPU_FREE_BATCH
 * ids, before the next record that allocates (a new storage, an UPLOAD, a
 * CALL) or waits, or when the open chunk closes: the server frees in stream
 * order, so the next allocation can reuse the bytes (FORMAT.md §4.1). Never
 * blocks on the network. A template-local id (RGPU_TEMPLATE_LOCAL_BIT) goes
 * into the calling thread's capture (FREE records of RGPU_CAPTURE_FREE_BATCH
 * ids, before its next allocating record, and at its end); with no capture on
 * this thread it is dropped: the server frees a call's locals when the call
 * ends. */
void rgpu_client_free_tensor(rgpu_client *c, uint64_t tid);

/* ---------------------------------------------------------------------------
 * Capture (compiled-graph templates, FORMAT.md §5.1). Per thread: between
 * begin and end, the calling thread's records and uploads go into a capture
 * buffer instead of the stream (other threads record normally), and its
 * new ids are template-local. The caller wraps the captured records into a
 * template blob, registers it with rgpu_client_put_blob, and records CALLs. */
#define RGPU_TEMPLATE_LOCAL_BIT (1ull << 62)
#define RGPU_CAPTURE_FREE_BATCH 32       /* local frees per FREE record in a capture */

/* Start capturing on the calling thread; queued frees go to the stream
 * first. RGPU_ERR_SEQUENCE when this thread already captures. */
rgpu_status rgpu_client_capture_begin(rgpu_client *c);
/* Stop capturing; *records (caller frees with rgpu_buf_free) gets the
 * captured records back to back. RGPU_ERR_SEQUENCE when none is active. */
rgpu_status rgpu_client_capture_end(rgpu_client *c, rgpu_buf *records);
/* Stop capturing and drop what was captured; a no-op without a capture. */
void rgpu_client_capture_abort(rgpu_client *c);
/* True while the calling thread captures for c. */
bool rgpu_client_capturing(const rgpu_client *c);
/* Free tid inside the calling thread's capture, at this point of its
 * records: a FREE of a bound input the caller hands over (the template drops
 * it after its last use, so every CALL frees it there). Returns false, doing
 * nothing, when this thread does not capture. */
bool rgpu_client_capture_free(rgpu_client *c, uint64_t tid);

/* Register bytes the server may ask for (NEED) by their XXH3-128 *h, kept
 * for the whole session (reconnects too) and written into the record_path
 * trace. Deduplicated by hash. Uploads recorded while capturing are kept
 * the same way (a template may run them at any later CALL). */
rgpu_status rgpu_client_put_blob(rgpu_client *c, const void *data, size_t n, rgpu_hash *h);

/* Block until op_index has executed on the server. For an op with
 * RGPU_OPF_WAIT, *data (malloc'd, caller frees) gets its result bytes.
 * If any op failed since the last wait, returns that op's status with err =
 * "op N (name): reason" (the error is reported once). */
rgpu_status rgpu_client_wait(rgpu_client *c, uint64_t op_index, uint8_t **data, size_t *n,
                             char *err, size_t errlen);

/* Bounded memory: true when un-acknowledged chunk bytes exceed
 * RGPU_MAX_UNACKED (a cheap check, no lock). rgpu_client_throttle then
 * blocks until the server's ACKs bring them under (RGPU_ERR_TIMEOUT after
 * RGPU_WAIT_TIMEOUT; the client is then dead). Recording never blocks on its
 * own: callers throttle after recording (the Python extension does, with the
 * GIL released). */
bool rgpu_client_backlogged(rgpu_client *c);
rgpu_status rgpu_client_throttle(rgpu_client *c);

/* Close the open chunk and hand it to the sender. */
rgpu_status rgpu_client_flush(rgpu_client *c);

void rgpu_client_get_stats(rgpu_client *c, rgpu_client_stats *s);

/* The session's journal on the server (FORMAT.md §7.2, NOTICE) into out:
 * "on" until the server says otherwise, "off: <why>" once it stopped (the
 * session goes on, but a server restart will not resume it), "none" when the
 * server keeps no journal (--journal none). */
void rgpu_client_journal(rgpu_client *c, char *out, size_t n);
/* True, once, when the journal turned off since the last call, with a
 * sentence for the program's user in out (the extension warns with it at
 * the next wait). */
bool rgpu_client_take_notice(rgpu_client *c, char *out, size_t n);

/* Why the client stopped working (connection lost, session lost, the server's
 * ERROR), or NULL while it works. The text lives as long as c. */
const char *rgpu_client_failure(rgpu_client *c);

#ifdef __cplusplus
}
#endif
#endif
