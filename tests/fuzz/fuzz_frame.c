/* fuzz_frame.c — libFuzzer target: the chunk/blob frame codec and the wire
 * header. A frame that decompresses must hash and recompress to a frame that
 * decompresses to the same bytes. */
#include "rgpu_format.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size >= RGPU_WIRE_HEADER) {
        rgpu_msg_header h;
        (void)rgpu_wire_header_decode(data, 1 << 20, &h);
    }
    uint8_t *raw = NULL;
    size_t n = 0;
    if (rgpu_frame_decompress(data, size, 1 << 22, &raw, &n) == RGPU_OK) {
        rgpu_buf f = { 0 };
        uint8_t *again = NULL;
        size_t m = 0;
        if (rgpu_frame_compress(raw, n, 1, &f) != RGPU_OK ||
            rgpu_frame_decompress(f.p, f.len, 1 << 22, &again, &m) != RGPU_OK || m != n ||
            (n && memcmp(raw, again, n) != 0))
            abort();
        (void)rgpu_hash_bytes(raw, n);
        free(again);
        rgpu_buf_free(&f);
        free(raw);
    }
    return 0;
}
