/* fuzz_server.c — libFuzzer target: rgpu-server's whole message loop.
 *
 * The server library (replayer/server/server_loop.c, server.h) is linked and one
 * connection is served per input over a socketpair: the input is what the client sends, then EOF; a
 * drain thread swallows the replies. Unless the first byte is odd, a valid
 * HELLO goes first so the fuzzer explores sessions rather than handshakes.
 * No auth, no journal, no grace (each session ends with its input), small
 * limits so a record cannot ask for gigabytes. */
#include "server.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static void *drain(void *arg) {
    int fd = (int)(intptr_t)arg;
    char buf[65536];
    while (read(fd, buf, sizeof buf) > 0) {}
    return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    char why[256];
    rgpu_server_config cfg;
    rgpu_server_config_default(&cfg);   /* no journal, no --record */
    cfg.backend = rgpu_backend_create("cpu", why, sizeof why);
    if (!cfg.backend) abort();
    cfg.quiet = true;
    cfg.no_auth = true;
    cfg.grace = 0;
    cfg.max_msg = 1 << 20;
    cfg.max_chunk = 1 << 20;
    cfg.limits.max_storage_bytes = 1 << 20;
    cfg.limits.max_total_bytes = 8 << 20;
    cfg.limits.max_storages = 256;
    cfg.limits.max_blob_cache = 4 << 20;
    cfg.max_memory = 64 << 20;        /* the global host-memory pool, as rgpu-server sets it */
    rgpu_server_init(&cfg);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return 0;
    int big = 4 << 20;   /* the whole input fits before the server reads */
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    pthread_t t;
    if (pthread_create(&t, NULL, drain, (void *)(intptr_t)sv[1])) { close(sv[0]); close(sv[1]); return 0; }
    bool raw = size && (data[0] & 1);
    if (!raw) {
        rgpu_msg_hello h = { .version = RGPU_WIRE_VERSION };
        rgpu_op_table_hash(h.op_table);
        rgpu_msg_hello_send(sv[1], &h);
    }
    if (size > 1) rgpu_io_write_all(sv[1], data + 1, size - 1);
    shutdown(sv[1], SHUT_WR);
    rgpu_server_serve(sv[0], "fuzz");   /* closes sv[0] */
    pthread_join(t, NULL);
    close(sv[1]);
    return 0;
}
