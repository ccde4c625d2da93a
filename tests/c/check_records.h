/* check_records.h — building records and CALLs for the Check tests of
 * templates (test_template.c) and graph replay (test_graph.c). */
#ifndef RGPU_CHECK_RECORDS_H
#define RGPU_CHECK_RECORDS_H

#include <check.h>
#include <stdlib.h>

#include "rgpu_format.h"
#include "check_util.h"

/* The number of records in b, each of which must decode. */
static inline uint32_t count_records(const rgpu_buf *b) {
    uint32_t count = 0;
    rgpu_record r;
    for (size_t off = 0, used; off < b->len; off += used, count++)
        ck_assert_int_eq(rgpu_record_decode(b->p + off, b->len - off, &r, &used), RGPU_OK);
    return count;
}

static inline rgpu_tdef vec_def(uint64_t tid, uint64_t sid, int64_t n) {
    rgpu_tdef d = { .tid = tid, .flags = RGPU_TDEF_NEW_STORAGE, .sid = sid, .dtype = RGPU_F32, .ndim = 1,
                    .nbytes = (uint64_t)n * 4 };
    d.sizes[0] = n;
    d.strides[0] = 1;
    return d;
}

static inline rgpu_tdef existing(uint64_t tid) { return (rgpu_tdef){ .tid = tid, .flags = RGPU_TDEF_EXISTING }; }

static inline void enc(rgpu_buf *b, const rgpu_record *r) { ck_assert_int_eq(rgpu_record_encode(b, r), RGPU_OK); }

static inline void rec_binary(rgpu_buf *b, int op, rgpu_tdef out, uint64_t x, uint64_t y) {
    rgpu_record r = { .op = (uint16_t)op, .n_out = 1, .n_in = 2 };
    r.out[0] = out;
    r.in[0] = x; r.in[1] = y;
    if (op == RGPU_OP_ADD_TENSOR || op == RGPU_OP_SUB_TENSOR) {
        r.n_args = 1; r.args[0].kind = RGPU_ARG_INT; r.args[0].v.i = 1;
    }
    enc(b, &r);
}

static inline void rec_alias(rgpu_buf *b, rgpu_tdef out, uint64_t base) {
    rgpu_record r = { .op = RGPU_OP_ALIAS, .n_out = 1, .n_in = 1 };
    r.out[0] = out;
    r.in[0] = base;
    enc(b, &r);
}

static inline void rec_empty(rgpu_buf *b, rgpu_tdef out) {
    rgpu_record r = { .op = RGPU_OP_EMPTY, .n_out = 1 };
    r.out[0] = out;
    enc(b, &r);
}

static inline void rec_uniform(rgpu_buf *b, uint64_t tid, uint64_t seed, uint64_t offset) {
    rgpu_record r = { .op = RGPU_OP_UNIFORM, .n_out = 1, .n_args = 4 };
    r.out[0] = existing(tid);
    r.args[0].kind = RGPU_ARG_FLOAT; r.args[0].v.f = 0.0;
    r.args[1].kind = RGPU_ARG_FLOAT; r.args[1].v.f = 1.0;
    r.args[2].kind = RGPU_ARG_INT; r.args[2].v.i = (int64_t)seed;
    r.args[3].kind = RGPU_ARG_INT; r.args[3].v.i = (int64_t)offset;
    enc(b, &r);
}

static inline void rec_free(rgpu_buf *b, uint64_t tid) {
    uint8_t le[8];
    rgpu_st64(le, tid);
    rgpu_record r = { .op = RGPU_OP_FREE, .n_args = 1 };
    r.args[0].kind = RGPU_ARG_INTS; r.args[0].v.ints.p = le; r.args[0].v.ints.n = 1;
    enc(b, &r);
}

static inline void rec_call(rgpu_buf *b, const rgpu_hash *h, const uint64_t *ids, uint32_t n, uint64_t seed, uint64_t offset) {
    uint8_t *le = malloc(8 * (size_t)n + 8);
    for (uint32_t i = 0; i < n; i++) rgpu_st64(le + 8 * i, ids[i]);
    rgpu_record r = { .op = RGPU_OP_CALL, .n_args = 4 };
    r.args[0].kind = RGPU_ARG_HASH; r.args[0].v.h = *h;
    r.args[1].kind = RGPU_ARG_INTS; r.args[1].v.ints.p = le; r.args[1].v.ints.n = n;
    r.args[2].kind = RGPU_ARG_INT; r.args[2].v.i = (int64_t)seed;
    r.args[3].kind = RGPU_ARG_INT; r.args[3].v.i = (int64_t)offset;
    enc(b, &r);
    free(le);
}

#endif
