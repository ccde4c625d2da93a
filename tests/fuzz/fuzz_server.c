/* fuzz_server.c — libFuzzer target: rgpu-server's whole message loop.
 *
 * server.c is compiled in (without its main) and one connection is served per
 * input over a socketpair: the input is what the client sends, then EOF; a
 * drain thread swallows the replies. Unless the first byte is odd, a valid
 * HELLO goes first so the fuzzer explores sessions rather than handshakes.
 * No auth, no journal, no grace (each session ends with its input), small
 * limits so a record cannot ask for gigabytes. */
#define RGPU_SERVER_NO_MAIN
#pragma clang diagnostic ignored "-Wunused-function"   /* main's helpers, unused here */
#include "../../replayer/server.c"

static void *drain(void *arg) {
    int fd = (int)(intptr_t)arg;
    char buf[65536];
    while (read(fd, buf, sizeof buf) > 0) {}
    return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    char why[256];
    g_backend = rgpu_backend_create("cpu", why, sizeof why);
    if (!g_backend) abort();
    g_quiet = true;
    g_no_auth = true;
    g_grace = 0;
    g_max_msg = 1 << 20;
    g_max_chunk = 1 << 20;
    g_limits.max_storage_bytes = 1 << 20;
    g_limits.max_total_bytes = 8 << 20;
    g_limits.max_storages = 256;
    g_limits.max_blob_cache = 4 << 20;
    g_pool.limit = 64 << 20;          /* the global host-memory pool, as rgpu-server sets it */
    g_limits.pool = &g_pool;
    g_epoch = 1;
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
        uint8_t h[40] = { 0 };
        rgpu_st32(h, RGPU_FORMAT_VERSION);
        rgpu_op_table_hash(h + 4);
        rgpu_wire_send(sv[1], RGPU_MSG_HELLO, h, sizeof h, NULL, 0);
    }
    if (size > 1) rgpu_io_write_all(sv[1], data + 1, size - 1);
    shutdown(sv[1], SHUT_WR);
    conn *c = calloc(1, sizeof *c);
    if (!c) abort();
    c->fd = sv[0];
    snprintf(c->peer, sizeof c->peer, "fuzz");
    serve_conn(c);                  /* closes sv[0] */
    pthread_join(t, NULL);
    close(sv[1]);
    return 0;
}
