/* make_seeds.c — writes the seed corpora for the fuzz targets:
 *   make_seeds DIR  ->  DIR/record/, DIR/frame/, DIR/rgt/, DIR/server/
 * Valid inputs of each kind (records, frames, a small trace, a session's
 * messages), so the fuzzers start past the first checks. */
#include "rgpu_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *g_dir;

static void put(const char *sub, const char *name, const void *p, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, sub);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", g_dir, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) { perror(path); exit(1); }
    fclose(f);
}

/* Records: x = empty(4) f32; full_(x, 2.5); y = x * 3; s = sum(y); download(s); upload; free */
static void records(rgpu_buf *b, const rgpu_hash *blob) {
    rgpu_record r = { .op = RGPU_OP_EMPTY, .n_out = 1 };
    r.out[0] = (rgpu_tdef){ .tid = 1, .sid = 2, .flags = RGPU_TDEF_NEW_STORAGE, .dtype = RGPU_F32, .ndim = 1,
                            .nbytes = 16, .sizes = { 4 }, .strides = { 1 } };
    rgpu_record_encode(b, &r);
    rgpu_record f = { .op = RGPU_OP_FULL, .n_out = 1, .n_args = 1 };
    f.out[0] = (rgpu_tdef){ .tid = 1, .flags = RGPU_TDEF_EXISTING };
    f.args[0].kind = RGPU_ARG_FLOAT; f.args[0].v.f = 2.5;
    rgpu_record_encode(b, &f);
    rgpu_record m = { .op = RGPU_OP_MUL_SCALAR, .n_out = 1, .n_in = 1, .n_args = 1 };
    m.out[0] = (rgpu_tdef){ .tid = 3, .sid = 4, .flags = RGPU_TDEF_NEW_STORAGE, .dtype = RGPU_F32, .ndim = 1,
                            .nbytes = 16, .sizes = { 4 }, .strides = { 1 } };
    m.in[0] = 1;
    m.args[0].kind = RGPU_ARG_INT; m.args[0].v.i = 3;
    rgpu_record_encode(b, &m);
    uint8_t none[1];
    rgpu_record s = { .op = RGPU_OP_SUM, .n_out = 1, .n_in = 1, .n_args = 2 };
    s.out[0] = (rgpu_tdef){ .tid = 5, .sid = 6, .flags = RGPU_TDEF_NEW_STORAGE, .dtype = RGPU_F32, .ndim = 0, .nbytes = 4 };
    s.in[0] = 3;
    s.args[0].kind = RGPU_ARG_INTS; s.args[0].v.ints.p = none; s.args[0].v.ints.n = 0;
    s.args[1].kind = RGPU_ARG_BOOL; s.args[1].v.i = 0;
    rgpu_record_encode(b, &s);
    rgpu_record d = { .op = RGPU_OP_DOWNLOAD, .n_in = 1 };
    d.in[0] = 5;
    rgpu_record_encode(b, &d);
    if (blob) {
        rgpu_record u = { .op = RGPU_OP_UPLOAD, .n_out = 1, .n_args = 2 };
        u.out[0] = (rgpu_tdef){ .tid = 7, .sid = 8, .flags = RGPU_TDEF_NEW_STORAGE, .dtype = RGPU_F32, .ndim = 1,
                                .nbytes = 16, .sizes = { 4 }, .strides = { 1 } };
        u.args[0].kind = RGPU_ARG_HASH; u.args[0].v.h = *blob;
        u.args[1].kind = RGPU_ARG_INT; u.args[1].v.i = 16;
        rgpu_record_encode(b, &u);
        uint8_t ids[16];
        rgpu_st64(ids, 1); rgpu_st64(ids + 8, 7);
        rgpu_record fr = { .op = RGPU_OP_FREE, .n_args = 1 };
        fr.args[0].kind = RGPU_ARG_INTS; fr.args[0].v.ints.p = ids; fr.args[0].v.ints.n = 2;
        rgpu_record_encode(b, &fr);
    }
}

static void msg(rgpu_buf *out, int type, const void *a, size_t an, const void *b, size_t bn) {
    uint8_t h[RGPU_WIRE_HEADER];
    rgpu_wire_header_encode(h, type, an + bn);
    rgpu_buf_append(out, h, sizeof h);
    if (an) rgpu_buf_append(out, a, an);
    if (bn) rgpu_buf_append(out, b, bn);
}

/* A server input (HELLO sent by the harness) of one chunk of raw records
 * (count of them) and a WAIT for op `wait`. */
static void chunk_seed(const char *name, const rgpu_buf *raw, uint32_t count, uint64_t wait, const rgpu_buf *pre) {
    rgpu_buf s = { 0 }, f = { 0 };
    uint8_t zero = 0, hdr[32], w[8];
    rgpu_buf_append(&s, &zero, 1);
    if (pre) rgpu_buf_append(&s, pre->p, pre->len);
    rgpu_frame_compress(raw->p, raw->len, 1, &f);
    rgpu_st64(hdr, 0); rgpu_st32(hdr + 8, count); rgpu_st32(hdr + 12, 0);
    memcpy(hdr + 16, rgpu_hash_bytes(raw->p, raw->len).b, 16);
    msg(&s, RGPU_MSG_CHUNK, hdr, 32, f.p, f.len);
    rgpu_st64(w, wait);
    msg(&s, RGPU_MSG_WAIT, w, 8, NULL, 0);
    put("server", name, s.p, s.len);
    rgpu_buf_free(&s); rgpu_buf_free(&f);
}

/* Seeds from the hostile-input suite (tests/c/test_hostile.c): a 4-byte
 * storage viewed as [2^62] and [2^29] stride 0 then downloaded, a copy into
 * such a view, a record cut short in a valid frame, a pushed blob bomb, a
 * CHUNK header claiming 16 GiB; and the first as a trace for fuzz_rgt. */
static void hostile_seeds(void) {
    static const int64_t sizes[2] = { (int64_t)1 << 62, (int64_t)1 << 29 };
    for (int k = 0; k < 3; k++) {
        rgpu_buf b = { 0 };
        rgpu_record e = { .op = RGPU_OP_EMPTY, .n_out = 1 };
        e.out[0] = (rgpu_tdef){ .tid = 1, .flags = RGPU_TDEF_NEW_STORAGE, .sid = 2, .dtype = RGPU_F32, .ndim = 1, .nbytes = 4 };
        e.out[0].sizes[0] = 1; e.out[0].strides[0] = 1;
        rgpu_record_encode(&b, &e);
        rgpu_record a = { .op = RGPU_OP_ALIAS, .n_out = 1, .n_in = 1 };
        a.out[0] = (rgpu_tdef){ .tid = 3, .sid = 2, .dtype = RGPU_F32, .ndim = 1 };
        a.out[0].sizes[0] = sizes[k == 1]; a.out[0].strides[0] = 0;
        a.in[0] = 1;
        rgpu_record_encode(&b, &a);
        rgpu_record d = { .op = k == 2 ? RGPU_OP_COPY : RGPU_OP_DOWNLOAD, .n_in = 1, .n_out = k == 2 };
        d.in[0] = k == 2 ? 1 : 3;
        if (k == 2) d.out[0] = (rgpu_tdef){ .tid = 3, .flags = RGPU_TDEF_EXISTING };
        rgpu_record_encode(&b, &d);
        chunk_seed(k == 0 ? "view-2-62" : k == 1 ? "view-2-29" : "copy-into-2-62", &b, 3, 2, NULL);
        if (k == 0) {
            char path[512];
            snprintf(path, sizeof path, "%s/rgt/view-2-62.rgt", g_dir);
            rgpu_rgt *t;
            rgpu_buf f = { 0 };
            rgpu_frame_compress(b.p, b.len, 1, &f);
            rgpu_hash h = rgpu_hash_bytes(b.p, b.len);
            if (!rgpu_rgt_create(path, "make_seeds", &t)) {
                rgpu_rgt_put_chunk(t, &h, 0, 3, b.len, f.p, f.len);
                rgpu_rgt_close(t);
            }
            snprintf(path, sizeof path, "rm -f '%s/rgt/view-2-62.rgt-wal' '%s/rgt/view-2-62.rgt-shm'", g_dir, g_dir);
            if (system(path)) {}
            rgpu_buf_free(&f);
            /* the same chunk with its last record cut in half */
            rgpu_buf cut = { 0 };
            rgpu_buf_append(&cut, b.p, b.len - 4);
            chunk_seed("record-cut-short", &cut, 3, 2, NULL);
            rgpu_buf_free(&cut);
        }
        rgpu_buf_free(&b);
    }
    /* a pushed blob that inflates to 16 MiB (the harness's session holds 8) */
    size_t n = 16u << 20;
    uint8_t *zeros = calloc(1, n);
    rgpu_buf f = { 0 }, pre = { 0 }, none = { 0 };
    rgpu_frame_compress(zeros, n, 19, &f);
    msg(&pre, RGPU_MSG_BLOB, rgpu_hash_bytes(zeros, n).b, 16, f.p, f.len);
    free(zeros);
    rgpu_record sy = { .op = RGPU_OP_SYNC };
    rgpu_record_encode(&none, &sy);
    chunk_seed("blob-bomb", &none, 1, 0, &pre);
    rgpu_buf_free(&f); rgpu_buf_free(&pre); rgpu_buf_free(&none);
    /* a CHUNK header claiming 16 GiB */
    rgpu_buf s = { 0 };
    uint8_t zero = 0, h[RGPU_WIRE_HEADER + 64] = { 0 };
    rgpu_buf_append(&s, &zero, 1);
    rgpu_wire_header_encode(h, RGPU_MSG_CHUNK, 16ull << 30);
    rgpu_buf_append(&s, h, sizeof h);
    put("server", "chunk-claims-16g", s.p, s.len);
    rgpu_buf_free(&s);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: make_seeds DIR\n"); return 2; }
    g_dir = argv[1];
    mkdir(g_dir, 0755);
    float vals[4] = { 1, 2, 3, 4 };
    rgpu_hash bh = rgpu_hash_bytes(vals, sizeof vals);
    rgpu_buf recs = { 0 }, recs2 = { 0 };
    records(&recs, NULL);
    records(&recs2, &bh);
    put("record", "chunk", recs.p, recs.len);
    put("record", "chunk-upload", recs2.p, recs2.len);
    /* templates (§5.1): the records above (refused at their DOWNLOAD), and a valid small one */
    static const uint64_t binds[] = { 1, 2 };
    rgpu_buf tpl = { 0 }, tpl2 = { 0 };
    rgpu_template_write(&tpl, 3, binds, 2, recs.p, recs.len);
    put("record", "template-wait", tpl.p, tpl.len);
    rgpu_record tm = { .op = RGPU_OP_EMPTY, .n_out = 1 };
    tm.out[0] = (rgpu_tdef){ .tid = 1, .flags = RGPU_TDEF_NEW_STORAGE, .sid = 2, .dtype = RGPU_F32, .ndim = 1, .nbytes = 16 };
    tm.out[0].sizes[0] = 4;
    tm.out[0].strides[0] = 1;
    rgpu_buf tr = { 0 };
    rgpu_record_encode(&tr, &tm);
    rgpu_template_write(&tpl2, 0, binds, 2, tr.p, tr.len);
    put("record", "template", tpl2.p, tpl2.len);
    rgpu_buf_free(&tpl); rgpu_buf_free(&tpl2); rgpu_buf_free(&tr);

    rgpu_buf frame = { 0 }, bframe = { 0 };
    rgpu_frame_compress(recs2.p, recs2.len, 1, &frame);
    rgpu_frame_compress(vals, sizeof vals, 1, &bframe);
    put("frame", "chunk", frame.p, frame.len);
    put("frame", "blob", bframe.p, bframe.len);

    /* a trace: one chunk with an upload, its blob, one result */
    char path[512];
    snprintf(path, sizeof path, "%s/rgt", g_dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/rgt/trace.rgt", g_dir);
    rgpu_rgt *t;
    if (rgpu_rgt_create(path, "make_seeds", &t)) { fprintf(stderr, "%s\n", rgpu_rgt_errmsg(NULL)); return 1; }
    rgpu_hash ch = rgpu_hash_bytes(recs2.p, recs2.len);
    uint32_t n_recs = 7;
    rgpu_rgt_put_chunk(t, &ch, 0, n_recs, recs2.len, frame.p, frame.len);
    rgpu_rgt_put_blob(t, &bh, sizeof vals, bframe.p, bframe.len);
    float res = 30;
    rgpu_rgt_put_result(t, 4, 0, &res, 4);
    rgpu_rgt_close(t);
    snprintf(path, sizeof path, "rm -f '%s/rgt/trace.rgt-wal' '%s/rgt/trace.rgt-shm'", g_dir, g_dir);
    if (system(path)) return 1;

    /* server: byte 0 even = the harness sends HELLO first */
    rgpu_buf s = { 0 };
    uint8_t zero = 0;
    rgpu_buf_append(&s, &zero, 1);
    uint8_t hdr[32];
    rgpu_st64(hdr, 0); rgpu_st32(hdr + 8, n_recs); rgpu_st32(hdr + 12, 0); memcpy(hdr + 16, ch.b, 16);
    msg(&s, RGPU_MSG_BLOB, bh.b, 16, bframe.p, bframe.len);
    msg(&s, RGPU_MSG_CHUNK, hdr, 32, frame.p, frame.len);
    uint8_t w[8];
    rgpu_st64(w, 4);
    msg(&s, RGPU_MSG_WAIT, w, 8, NULL, 0);
    rgpu_st64(w, 6);
    msg(&s, RGPU_MSG_WAIT, w, 8, NULL, 0);
    msg(&s, RGPU_MSG_CHUNK, hdr, 32, frame.p, frame.len);   /* a resend: dropped */
    msg(&s, RGPU_MSG_BYE, NULL, 0, NULL, 0);
    put("server", "session", s.p, s.len);
    /* the same without the BLOB: the server NEEDs it, the input ends */
    rgpu_buf s2 = { 0 };
    rgpu_buf_append(&s2, &zero, 1);
    msg(&s2, RGPU_MSG_CHUNK, hdr, 32, frame.p, frame.len);
    put("server", "need", s2.p, s2.len);
    /* byte 0 odd: the input is the handshake itself */
    rgpu_buf s3 = { 0 };
    uint8_t one = 1, hello[RGPU_MSG_HELLO_HEAD];
    rgpu_buf_append(&s3, &one, 1);
    rgpu_msg_hello hm = { .version = RGPU_WIRE_VERSION };
    rgpu_op_table_hash(hm.op_table);
    msg(&s3, RGPU_MSG_HELLO, hello, rgpu_msg_hello_encode(&hm, hello, sizeof hello), NULL, 0);
    rgpu_st64(hdr, 0); rgpu_st32(hdr + 8, 5); memcpy(hdr + 16, rgpu_hash_bytes(recs.p, recs.len).b, 16);
    rgpu_buf f1 = { 0 };
    rgpu_frame_compress(recs.p, recs.len, 1, &f1);
    msg(&s3, RGPU_MSG_CHUNK, hdr, 32, f1.p, f1.len);
    rgpu_st64(w, 4);
    msg(&s3, RGPU_MSG_WAIT, w, 8, NULL, 0);
    put("server", "hello", s3.p, s3.len);
    hostile_seeds();
    return 0;
}
