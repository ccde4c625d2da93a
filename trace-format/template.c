/* template.c — compiled-graph templates (byte layout: FORMAT.md §5.1).
 *
 * A template is a captured run of ordinary records whose ids are parameters:
 * the bind ids in its header are replaced, call by call, by the session ids a
 * CALL record names. The blob is untrusted input like a chunk: every field is
 * checked before use and every record must decode; records a template cannot
 * hold (a nested CALL, anything that waits) are refused here, so the executor
 * only ever sees templates that passed this parse. */
#include "rgpu_format.h"

#include <stdlib.h>
#include <string.h>

bool rgpu_op_is_random(int op) {
    return op >= 0 && op < RGPU_OP_COUNT && (rgpu_op_table[op].flags & RGPU_OPF_RANDOM);
}

uint64_t rgpu_template_bind_id(const rgpu_template_info *t, uint32_t i) {
    return rgpu_ld64(t->bind_ids + 8 * (size_t)i);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Bind ids nonzero (BAD_ARG) and distinct (DUPLICATE_ID). */
static rgpu_status check_bind_ids(const rgpu_template_info *t) {
    if (!t->n_bind) return RGPU_OK;
    uint64_t *v = malloc(sizeof *v * t->n_bind);
    if (!v) return RGPU_ERR_NOMEM;
    rgpu_status s = RGPU_OK;
    for (uint32_t i = 0; i < t->n_bind && !s; i++)
        if (!(v[i] = rgpu_template_bind_id(t, i))) s = RGPU_ERR_BAD_ARG;
    if (!s) {
        qsort(v, t->n_bind, sizeof *v, cmp_u64);
        for (uint32_t i = 1; i < t->n_bind; i++)
            if (v[i] == v[i - 1]) { s = RGPU_ERR_DUPLICATE_ID; break; }
    }
    free(v);
    return s;
}

rgpu_status rgpu_template_parse(const uint8_t *p, size_t n, rgpu_template_info *t) {
    memset(t, 0, sizeof *t);
    if (n > RGPU_MAX_CHUNK_RAW) return RGPU_ERR_TOO_LARGE;
    if (n < RGPU_TEMPLATE_HEADER) return RGPU_ERR_TRUNCATED;
    if (rgpu_ld32(p) != RGPU_TEMPLATE_MAGIC) return RGPU_ERR_BAD_MAGIC;
    if (rgpu_ld32(p + 4) != RGPU_TEMPLATE_VERSION) return RGPU_ERR_BAD_VERSION;
    if (rgpu_ld32(p + 12) != 0) return RGPU_ERR_RESERVED;
    t->n_bind = rgpu_ld32(p + 8);
    t->base_offset = rgpu_ld64(p + 16);
    if (t->n_bind > RGPU_MAX_TEMPLATE_BINDS) return RGPU_ERR_TOO_LARGE;
    size_t ids = 8 * (size_t)t->n_bind;
    if (n - RGPU_TEMPLATE_HEADER < ids) return RGPU_ERR_TRUNCATED;
    t->bind_ids = p + RGPU_TEMPLATE_HEADER;
    t->records = t->bind_ids + ids;
    t->records_len = n - RGPU_TEMPLATE_HEADER - ids;
    rgpu_status s = check_bind_ids(t);
    if (s) return s;
    size_t off = 0;
    rgpu_record r;
    for (uint32_t k = 0; off < t->records_len; k++) {
        size_t used;
        t->err_record = k;
        if ((s = rgpu_record_decode(t->records + off, t->records_len - off, &r, &used))) return s;
        /* no nesting, and a template never waits: its records run inside one
         * op, whose only answer is the next RESULT */
        if (r.op == RGPU_OP_CALL || (rgpu_op_table[r.op].flags & RGPU_OPF_WAIT)) return RGPU_ERR_BAD_OP;
        if (rgpu_op_is_random(r.op) &&
            (r.n_args < 2 || r.args[r.n_args - 2].kind != RGPU_ARG_INT || r.args[r.n_args - 1].kind != RGPU_ARG_INT))
            return RGPU_ERR_BAD_ARG;
        off += used;
        t->n_records = k + 1;
    }
    t->err_record = 0;
    return RGPU_OK;
}

rgpu_status rgpu_template_write(rgpu_buf *b, uint64_t base_offset, const uint64_t *bind_ids, uint32_t n_bind,
                                const void *records, size_t records_len) {
    if (n_bind > RGPU_MAX_TEMPLATE_BINDS) return RGPU_ERR_TOO_LARGE;
    size_t need = RGPU_TEMPLATE_HEADER + 8 * (size_t)n_bind + records_len;
    rgpu_status s = rgpu_buf_reserve(b, need);
    if (s) return s;
    uint8_t *p = b->p + b->len;
    rgpu_st32(p, RGPU_TEMPLATE_MAGIC);
    rgpu_st32(p + 4, RGPU_TEMPLATE_VERSION);
    rgpu_st32(p + 8, n_bind);
    rgpu_st32(p + 12, 0);
    rgpu_st64(p + 16, base_offset);
    p += RGPU_TEMPLATE_HEADER;
    for (uint32_t i = 0; i < n_bind; i++, p += 8) rgpu_st64(p, bind_ids[i]);
    if (records_len) memcpy(p, records, records_len);
    b->len += need;
    return RGPU_OK;
}
