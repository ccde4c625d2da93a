/* fuzz_record.c — libFuzzer target: the record decoder over arbitrary bytes.
 * A decoded record must re-encode to the bytes it came from (the codec is
 * canonical), and nothing may read past the input (ASan). */
#include "rgpu_format.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t off = 0;
    rgpu_record r;
    while (off < size) {
        size_t used = 0;
        if (rgpu_record_decode(data + off, size - off, &r, &used) != RGPU_OK) break;
        if (used == 0 || used > size - off) abort();
        rgpu_buf b = { 0 };
        if (rgpu_record_encode(&b, &r) != RGPU_OK || b.len != used || rgpu_record_size(&r) != used ||
            memcmp(b.p, data + off, used) != 0)
            abort();   /* decode accepted what encode would not write back */
        rgpu_buf_free(&b);
        for (int i = 0; i < r.n_out; i++) {
            (void)rgpu_tdef_numel(&r.out[i]);
            (void)rgpu_tdef_check_bounds(&r.out[i], r.out[i].nbytes);
        }
        off += used;
    }
    return 0;
}
