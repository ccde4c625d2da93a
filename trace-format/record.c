/* record.c — record encoder and decoder (byte layout: FORMAT.md, "Records").
 *
 * The decoder is the first thing that touches untrusted bytes: every length
 * is checked against what remains, every enum against its COUNT, and reserved
 * fields must be zero. It never allocates: int lists point into the input. */
#include "rgpu_format.h"

#include <string.h>

#define REC_HEADER 6

static size_t tdef_size(const rgpu_tdef *t) {
    if (t->flags & RGPU_TDEF_EXISTING) return 9;
    return 9 + 8 + 2 + ((t->flags & RGPU_TDEF_NEW_STORAGE) ? 8 : 0) + 8 + 16 * (size_t)t->ndim;
}

static size_t arg_size(const rgpu_arg *a) {
    switch (a->kind) {
    case RGPU_ARG_NONE: return 1;
    case RGPU_ARG_INT: case RGPU_ARG_FLOAT: return 9;
    case RGPU_ARG_BOOL: case RGPU_ARG_DTYPE: return 2;
    case RGPU_ARG_INTS: return 5 + 8 * (size_t)a->v.ints.n;
    case RGPU_ARG_HASH: return 17;
    default: return 0;
    }
}

size_t rgpu_record_size(const rgpu_record *r) {
    size_t n = REC_HEADER + 8 * (size_t)r->n_in;
    for (int i = 0; i < r->n_out; i++) n += tdef_size(&r->out[i]);
    for (int i = 0; i < r->n_args; i++) n += arg_size(&r->args[i]);
    return n;
}

static rgpu_status check_shape(const rgpu_record *r) {
    if (r->op >= RGPU_OP_COUNT) return RGPU_ERR_BAD_OP;
    const rgpu_op_info *o = &rgpu_op_table[r->op];
    bool in_ok = (o->flags & RGPU_OPF_VARIADIC) ? (r->n_in >= o->n_in && r->n_in <= RGPU_MAX_IN) : r->n_in == o->n_in;
    if (!in_ok || r->n_out != o->n_out) return RGPU_ERR_ARITY;
    if (r->n_args > RGPU_MAX_ARGS) return RGPU_ERR_TOO_LARGE;
    return RGPU_OK;
}

rgpu_status rgpu_record_encode(rgpu_buf *b, const rgpu_record *r) {
    rgpu_status s = check_shape(r);
    if (s) return s;
    for (int i = 0; i < r->n_out; i++) {
        const rgpu_tdef *t = &r->out[i];
        if (t->flags & ~(RGPU_TDEF_EXISTING | RGPU_TDEF_NEW_STORAGE)) return RGPU_ERR_RESERVED;
        if (t->flags & RGPU_TDEF_EXISTING) {
            if (t->flags & RGPU_TDEF_NEW_STORAGE) return RGPU_ERR_RESERVED;
            continue;
        }
        if (t->ndim > RGPU_MAX_DIMS) return RGPU_ERR_TOO_MANY_DIMS;
        if (t->dtype >= RGPU_DTYPE_COUNT) return RGPU_ERR_BAD_DTYPE;
        if (t->offset < 0) return RGPU_ERR_OUT_OF_BOUNDS;
        for (int d = 0; d < t->ndim; d++)
            if (t->sizes[d] < 0 || t->strides[d] < 0) return RGPU_ERR_OUT_OF_BOUNDS;
    }
    for (int i = 0; i < r->n_args; i++) {
        const rgpu_arg *a = &r->args[i];
        if (a->kind >= RGPU_ARG_KIND_COUNT) return RGPU_ERR_BAD_ARG;
        if (a->kind == RGPU_ARG_INTS && a->v.ints.n > RGPU_MAX_INTS) return RGPU_ERR_TOO_LARGE;
        if (a->kind == RGPU_ARG_BOOL && (uint64_t)a->v.i > 1) return RGPU_ERR_BAD_ARG;
        if (a->kind == RGPU_ARG_DTYPE && (uint64_t)a->v.i >= RGPU_DTYPE_COUNT) return RGPU_ERR_BAD_DTYPE;
    }
    size_t need = rgpu_record_size(r);
    if ((s = rgpu_buf_reserve(b, need))) return s;
    uint8_t *p = b->p + b->len;
    rgpu_st16(p, r->op); p[2] = r->n_out; p[3] = r->n_in; p[4] = r->n_args; p[5] = 0;
    p += REC_HEADER;
    for (int i = 0; i < r->n_out; i++) {
        const rgpu_tdef *t = &r->out[i];
        rgpu_st64(p, t->tid); p[8] = t->flags; p += 9;
        if (t->flags & RGPU_TDEF_EXISTING) continue;
        rgpu_st64(p, t->sid); p[8] = t->dtype; p[9] = t->ndim; p += 10;
        if (t->flags & RGPU_TDEF_NEW_STORAGE) { rgpu_st64(p, t->nbytes); p += 8; }
        rgpu_st64(p, (uint64_t)t->offset); p += 8;
        for (int d = 0; d < t->ndim; d++) { rgpu_st64(p, (uint64_t)t->sizes[d]); p += 8; }
        for (int d = 0; d < t->ndim; d++) { rgpu_st64(p, (uint64_t)t->strides[d]); p += 8; }
    }
    for (int i = 0; i < r->n_in; i++) { rgpu_st64(p, r->in[i]); p += 8; }
    for (int i = 0; i < r->n_args; i++) {
        const rgpu_arg *a = &r->args[i];
        *p++ = a->kind;
        switch (a->kind) {
        case RGPU_ARG_INT: rgpu_st64(p, (uint64_t)a->v.i); p += 8; break;
        case RGPU_ARG_FLOAT: { uint64_t u; memcpy(&u, &a->v.f, 8); rgpu_st64(p, u); p += 8; break; }
        case RGPU_ARG_BOOL: case RGPU_ARG_DTYPE: *p++ = (uint8_t)a->v.i; break;
        case RGPU_ARG_INTS:
            rgpu_st32(p, a->v.ints.n); p += 4;
            if (a->v.ints.n) memcpy(p, a->v.ints.p, 8 * (size_t)a->v.ints.n);
            p += 8 * (size_t)a->v.ints.n;
            break;
        case RGPU_ARG_HASH: memcpy(p, a->v.h.b, 16); p += 16; break;
        default: break;
        }
    }
    b->len += need;
    return RGPU_OK;
}

/* Cursor over untrusted bytes. */
typedef struct { const uint8_t *p, *end; } cur;
#define NEED(c, k) do { if ((size_t)((c)->end - (c)->p) < (size_t)(k)) return RGPU_ERR_TRUNCATED; } while (0)

rgpu_status rgpu_record_decode(const uint8_t *p, size_t n, rgpu_record *r, size_t *used) {
    cur c = { p, p + n };
    NEED(&c, REC_HEADER);
    r->op = rgpu_ld16(c.p);
    r->n_out = c.p[2]; r->n_in = c.p[3]; r->n_args = c.p[4];
    if (c.p[5] != 0) return RGPU_ERR_RESERVED;
    c.p += REC_HEADER;
    if (r->op >= RGPU_OP_COUNT) return RGPU_ERR_BAD_OP;
    if (r->n_out > RGPU_MAX_OUT || r->n_in > RGPU_MAX_IN || r->n_args > RGPU_MAX_ARGS) return RGPU_ERR_TOO_LARGE;
    rgpu_status s = check_shape(r);
    if (s) return s;
    for (int i = 0; i < r->n_out; i++) {
        rgpu_tdef *t = &r->out[i];
        NEED(&c, 9);
        t->tid = rgpu_ld64(c.p); t->flags = c.p[8]; c.p += 9;
        if (t->flags & ~(RGPU_TDEF_EXISTING | RGPU_TDEF_NEW_STORAGE)) return RGPU_ERR_RESERVED;
        if (t->flags & RGPU_TDEF_EXISTING) {
            if (t->flags & RGPU_TDEF_NEW_STORAGE) return RGPU_ERR_RESERVED;
            t->sid = 0; t->dtype = 0; t->ndim = 0; t->nbytes = 0; t->offset = 0;
            continue;
        }
        NEED(&c, 10);
        t->sid = rgpu_ld64(c.p); t->dtype = c.p[8]; t->ndim = c.p[9]; c.p += 10;
        if (t->dtype >= RGPU_DTYPE_COUNT) return RGPU_ERR_BAD_DTYPE;
        if (t->ndim > RGPU_MAX_DIMS) return RGPU_ERR_TOO_MANY_DIMS;
        t->nbytes = 0;
        if (t->flags & RGPU_TDEF_NEW_STORAGE) { NEED(&c, 8); t->nbytes = rgpu_ld64(c.p); c.p += 8; }
        NEED(&c, 8 + 16 * (size_t)t->ndim);
        t->offset = (int64_t)rgpu_ld64(c.p); c.p += 8;
        for (int d = 0; d < t->ndim; d++) { t->sizes[d] = (int64_t)rgpu_ld64(c.p); c.p += 8; }
        for (int d = 0; d < t->ndim; d++) { t->strides[d] = (int64_t)rgpu_ld64(c.p); c.p += 8; }
        if (t->offset < 0) return RGPU_ERR_OUT_OF_BOUNDS;
        for (int d = 0; d < t->ndim; d++)
            if (t->sizes[d] < 0 || t->strides[d] < 0) return RGPU_ERR_OUT_OF_BOUNDS;
    }
    NEED(&c, 8 * (size_t)r->n_in);
    for (int i = 0; i < r->n_in; i++) { r->in[i] = rgpu_ld64(c.p); c.p += 8; }
    for (int i = 0; i < r->n_args; i++) {
        rgpu_arg *a = &r->args[i];
        a->ints_owned = NULL;
        NEED(&c, 1);
        a->kind = *c.p++;
        switch (a->kind) {
        case RGPU_ARG_NONE: break;
        case RGPU_ARG_INT: NEED(&c, 8); a->v.i = (int64_t)rgpu_ld64(c.p); c.p += 8; break;
        case RGPU_ARG_FLOAT: { NEED(&c, 8); uint64_t u = rgpu_ld64(c.p); memcpy(&a->v.f, &u, 8); c.p += 8; break; }
        case RGPU_ARG_BOOL:
            NEED(&c, 1);
            if (*c.p > 1) return RGPU_ERR_BAD_ARG;
            a->v.i = *c.p++;
            break;
        case RGPU_ARG_DTYPE:
            NEED(&c, 1);
            if (*c.p >= RGPU_DTYPE_COUNT) return RGPU_ERR_BAD_DTYPE;
            a->v.i = *c.p++;
            break;
        case RGPU_ARG_INTS: {
            NEED(&c, 4);
            uint32_t k = rgpu_ld32(c.p); c.p += 4;
            if (k > RGPU_MAX_INTS) return RGPU_ERR_TOO_LARGE;
            NEED(&c, 8 * (size_t)k);
            a->v.ints.p = c.p; a->v.ints.n = k; c.p += 8 * (size_t)k;
            break;
        }
        case RGPU_ARG_HASH: NEED(&c, 16); memcpy(a->v.h.b, c.p, 16); c.p += 16; break;
        default: return RGPU_ERR_BAD_ARG;
        }
    }
    *used = (size_t)(c.p - p);
    return RGPU_OK;
}

int64_t rgpu_tdef_numel(const rgpu_tdef *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->sizes[d] < 0) return -1;
        if (__builtin_mul_overflow(n, t->sizes[d], &n)) return -1;
    }
    return n;
}

rgpu_status rgpu_tdef_check_bounds(const rgpu_tdef *t, uint64_t storage_nbytes) {
    size_t es = rgpu_dtype_size(t->dtype);
    if (!es) return RGPU_ERR_BAD_DTYPE;
    if (t->ndim > RGPU_MAX_DIMS) return RGPU_ERR_TOO_MANY_DIMS;
    if (t->offset < 0) return RGPU_ERR_OUT_OF_BOUNDS;
    int64_t numel = rgpu_tdef_numel(t);
    if (numel < 0) return RGPU_ERR_OVERFLOW;
    if ((uint64_t)numel > RGPU_MAX_TENSOR_BYTES / es) return RGPU_ERR_TOO_LARGE;
    /* an empty view touches no element: any offset is valid (as in PyTorch,
       x[:, 1] of an empty (0, 3) tensor), kept small enough that offset*es
       cannot overflow where a backend forms its base address */
    if (numel == 0) return (uint64_t)t->offset <= RGPU_MAX_TENSOR_BYTES / es ? RGPU_OK : RGPU_ERR_OUT_OF_BOUNDS;
    /* last element index = offset + sum (size-1)*stride */
    int64_t last = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        int64_t span;
        if (t->strides[d] < 0) return RGPU_ERR_OUT_OF_BOUNDS;
        if (__builtin_mul_overflow(t->sizes[d] - 1, t->strides[d], &span)) return RGPU_ERR_OVERFLOW;
        if (__builtin_add_overflow(last, span, &last)) return RGPU_ERR_OVERFLOW;
    }
    uint64_t end;  /* bytes up to and including the last element */
    if (__builtin_mul_overflow((uint64_t)last + 1, (uint64_t)es, &end)) return RGPU_ERR_OVERFLOW;
    return end <= storage_nbytes ? RGPU_OK : RGPU_ERR_OUT_OF_BOUNDS;
}
