/* fuzz_record.c — libFuzzer target: the record decoder over arbitrary bytes.
 * A decoded record must re-encode to the bytes it came from (the codec is
 * canonical), and nothing may read past the input (ASan). The same bytes go
 * through the template parser (FORMAT.md §5.1): an accepted template's
 * records must all decode. */
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
    rgpu_template_info t;
    if (rgpu_template_parse(data, size, &t) == RGPU_OK) {
        size_t o = 0;
        uint32_t k = 0;
        while (o < t.records_len) {
            size_t used = 0;
            if (rgpu_record_decode(t.records + o, t.records_len - o, &r, &used) != RGPU_OK || !used) abort();
            o += used;
            k++;
        }
        if (k != t.n_records || t.records + t.records_len != data + size) abort();
        for (uint32_t i = 0; i < t.n_bind; i++)
            if (!rgpu_template_bind_id(&t, i)) abort();
    }
    return 0;
}
