/* fuzz_rgt.c — libFuzzer target: the .rgt reader over an arbitrary file.
 * Opens the bytes as a trace and walks everything a replay reads: the stream
 * (each chunk decompressed and decoded), blobs by hash, results. */
#include "rgpu_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_path[64];

static int on_result(void *ud, uint64_t op, int status, const void *data, size_t n) {
    (void)ud; (void)op; (void)status;
    volatile uint8_t x = 0;
    for (size_t i = 0; i < n; i++) x ^= ((const uint8_t *)data)[i];
    (void)x;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_path[0]) snprintf(g_path, sizeof g_path, "/tmp/rgpu-fuzz-rgt-%ld.rgt", (long)getpid());
    FILE *f = fopen(g_path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    rgpu_rgt *t;
    if (rgpu_rgt_open(g_path, &t) == RGPU_OK) {
        uint64_t count = 0;
        if (rgpu_rgt_stream_count(t, &count) == RGPU_OK) {
            for (uint64_t seq = 0; seq < count && seq < 64; seq++) {
                rgpu_hash h;
                uint64_t first;
                uint32_t cnt;
                uint8_t *frame, *raw;
                size_t fn, n;
                if (rgpu_rgt_get_stream(t, seq, &h, &first, &cnt, &frame, &fn) != RGPU_OK) continue;
                if (rgpu_frame_decompress(frame, fn, 1 << 22, &raw, &n) == RGPU_OK) {
                    size_t off = 0, used;
                    rgpu_record r;
                    while (off < n && rgpu_record_decode(raw + off, n - off, &r, &used) == RGPU_OK) {
                        off += used;
                        for (int a = 0; a < r.n_args; a++) {
                            if (r.args[a].kind != RGPU_ARG_HASH) continue;
                            uint8_t *bf;
                            size_t bn;
                            if (rgpu_rgt_get_blob(t, &r.args[a].v.h, &bf, &bn) == RGPU_OK) free(bf);
                        }
                    }
                    free(raw);
                }
                free(frame);
            }
        }
        rgpu_rgt_each_result(t, on_result, NULL);
        rgpu_rgt_close(t);
    }
    unlink(g_path);
    return 0;
}
