/* frame.c — the compressed frame used for chunks and blobs (FORMAT.md, "Frames").
 *   u32 magic | u32 flags (0) | u64 raw_len | u64 XXH3-64(raw) | zstd frame */
#include "rgpu_format.h"

#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

rgpu_status rgpu_frame_compress(const void *raw, size_t n, int level, rgpu_buf *out) {
    size_t bound = ZSTD_compressBound(n);
    rgpu_status s = rgpu_buf_reserve(out, RGPU_FRAME_HEADER + bound);
    if (s) return s;
    uint8_t *h = out->p + out->len;
    rgpu_st32(h, RGPU_FRAME_MAGIC);
    rgpu_st32(h + 4, 0);
    rgpu_st64(h + 8, n);
    rgpu_st64(h + 16, XXH3_64bits(raw, n));
    size_t z = ZSTD_compress(h + RGPU_FRAME_HEADER, bound, raw, n, level);
    if (ZSTD_isError(z)) return RGPU_ERR_COMPRESS;
    out->len += RGPU_FRAME_HEADER + z;
    return RGPU_OK;
}

rgpu_status rgpu_frame_decompress(const uint8_t *p, size_t n, uint64_t max_raw,
                                  uint8_t **raw, size_t *raw_len) {
    *raw = NULL; *raw_len = 0;
    if (n < RGPU_FRAME_HEADER) return RGPU_ERR_TRUNCATED;
    if (rgpu_ld32(p) != RGPU_FRAME_MAGIC) return RGPU_ERR_BAD_MAGIC;
    if (rgpu_ld32(p + 4) != 0) return RGPU_ERR_RESERVED;
    uint64_t len = rgpu_ld64(p + 8), sum = rgpu_ld64(p + 16);
    if (len > max_raw || len > SIZE_MAX - 1) { *raw_len = (size_t)(len > SIZE_MAX ? SIZE_MAX : len); return RGPU_ERR_TOO_LARGE; }
    const uint8_t *z = p + RGPU_FRAME_HEADER;
    size_t zn = n - RGPU_FRAME_HEADER;
    unsigned long long fsz = ZSTD_getFrameContentSize(z, zn);
    if (fsz == ZSTD_CONTENTSIZE_ERROR) {   /* a short zstd header is truncation, not corruption */
        size_t fz = ZSTD_findFrameCompressedSize(z, zn);
        return ZSTD_isError(fz) && ZSTD_getErrorCode(fz) == ZSTD_error_srcSize_wrong
            ? RGPU_ERR_TRUNCATED : RGPU_ERR_COMPRESS;
    }
    if (fsz != ZSTD_CONTENTSIZE_UNKNOWN && fsz != len) return RGPU_ERR_COMPRESS;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return RGPU_ERR_NOMEM;
    size_t got = ZSTD_decompress(buf, len, z, zn);
    if (ZSTD_isError(got)) {
        free(buf);
        return ZSTD_getErrorCode(got) == ZSTD_error_srcSize_wrong ? RGPU_ERR_TRUNCATED : RGPU_ERR_COMPRESS;
    }
    if (got != len) { free(buf); return RGPU_ERR_TRUNCATED; }
    if (XXH3_64bits(buf, len) != sum) { free(buf); return RGPU_ERR_BAD_CHECKSUM; }
    *raw = buf; *raw_len = len;
    return RGPU_OK;
}
