/* test_template.c — compiled-graph templates (FORMAT.md §5.1): the blob's
 * parser, each malformed blob with its status, and CALL executed by a
 * session on the cpu backend: values against known results, bindings,
 * locals freed after the call, views of bound storages, Philox offsets
 * rebased per call, failures inside a template, bad CALLs, prefetch and the
 * template cache. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "check_util.h"
#include "check_records.h"

/* ---------------------------------------------------------------------------
 * Building records */








/* A template blob over records recs (freed). */
static rgpu_buf tpl_blob(uint64_t base, const uint64_t *ids, uint32_t n, rgpu_buf *recs) {
    rgpu_buf t = { 0 };
    ck_assert_int_eq(rgpu_template_write(&t, base, ids, n, recs->p, recs->len), RGPU_OK);
    rgpu_buf_free(recs);
    return t;
}

/* ---------------------------------------------------------------------------
 * A session on cpu with an in-memory blob store behind its fetch callback */
typedef struct store {
    rgpu_hash h[16];
    rgpu_buf b[16];
    int n;
    int fetches;
} store;

static store g_store;

static rgpu_status store_fetch(void *ud, const rgpu_hash *h, uint64_t max_n, uint8_t **data, size_t *n) {
    (void)max_n;   /* the test store holds small blobs */
    store *st = ud;
    st->fetches++;
    for (int i = 0; i < st->n; i++) {
        if (!rgpu_hash_eq(&st->h[i], h)) continue;
        *data = malloc(st->b[i].len ? st->b[i].len : 1);
        memcpy(*data, st->b[i].p, st->b[i].len);
        *n = st->b[i].len;
        return RGPU_OK;
    }
    return RGPU_ERR_MISSING_BLOB;
}

/* Keep blob b (taken) in the store; returns its hash. */
static rgpu_hash store_put(rgpu_buf *b) {
    ck_assert_int_lt(g_store.n, 16);
    rgpu_hash h = rgpu_hash_bytes(b->p, b->len);
    g_store.h[g_store.n] = h;
    g_store.b[g_store.n++] = *b;
    memset(b, 0, sizeof *b);
    return h;
}

static rgpu_backend *g_cpu;
static rgpu_session *g_s;
static uint64_t g_op;

static void setup(void) {
    memset(&g_store, 0, sizeof g_store);
    g_cpu = rgpu_backend_cpu_create();
    g_s = rgpu_session_new(g_cpu, NULL);
    rgpu_session_set_fetch(g_s, store_fetch, &g_store);
    g_op = 0;
}

static void teardown(void) {
    rgpu_session_free(g_s);
    g_cpu->destroy(g_cpu);
    for (int i = 0; i < g_store.n; i++) rgpu_buf_free(&g_store.b[i]);
}

/* Run the records in b as one chunk (b emptied). */
static void run(rgpu_buf *b) {
    uint32_t count = count_records(b);
    rgpu_status ps = rgpu_session_prefetch(g_s, b->p, b->len);
    ck_assert(ps == RGPU_OK || ps == RGPU_ERR_MISSING_BLOB);   /* the one a CALL of a missing template gets */
    ck_assert_int_eq(rgpu_session_run_chunk(g_s, b->p, b->len, g_op, count), RGPU_OK);
    g_op += count;
    b->len = 0;
}

/* The status and message of the ops run since the last call. */
static int result(char *msg, size_t n) {
    int st;
    uint64_t eo;
    uint8_t *data;
    size_t dn;
    ck_assert_int_eq(rgpu_session_take_result(g_s, g_op - 1, &st, &eo, msg, n, &data, &dn), RGPU_OK);
    free(data);
    return st;
}

/* Runs the records in b (b emptied); the last one must succeed. */
static void run_ok(rgpu_buf *b) {
    run(b);
    char msg[256];
    ck_assert_msg(result(msg, sizeof msg) == 0, "%s", msg);
}

/* A new f32 vector tid (storage sid) holding v[0..n). */
static void make_vec(uint64_t tid, uint64_t sid, const float *v, int64_t n) {
    rgpu_buf b = { 0 };
    rec_empty(&b, vec_def(tid, sid, n));
    run(&b);
    rgpu_buf_free(&b);
    ck_assert_int_eq(rgpu_session_write_tensor(g_s, tid, (const uint8_t *)v, (size_t)n * 4), RGPU_OK);
}

static void read_vec(uint64_t tid, float *v, int64_t n) {
    uint8_t *p;
    size_t len;
    ck_assert_int_eq(rgpu_session_read_tensor(g_s, tid, &p, &len), RGPU_OK);
    ck_assert_uint_eq(len, (size_t)n * 4);
    memcpy(v, p, len);
    free(p);
}

/* Template ids: as a capture makes them (bit 62), and bound ones. */
#define L(n) ((1ull << 62) | (n))
enum { TA = 101, TB = 102, TOUT = 103, TOUTS = 104 };

/* out = (a + b) * a through a local temporary, which it frees, and a local
 * it leaves for the end of the call. Binds a, b, out, out's storage. */
static rgpu_hash template_add_mul(void) {
    rgpu_buf r = { 0 };
    rec_binary(&r, RGPU_OP_ADD_TENSOR, vec_def(L(1), L(2), 4), TA, TB);
    rec_binary(&r, RGPU_OP_MUL_TENSOR, vec_def(TOUT, TOUTS, 4), L(1), TA);
    rec_free(&r, L(1));
    rec_binary(&r, RGPU_OP_SUB_TENSOR, vec_def(L(3), L(4), 4), TOUT, TB);   /* left alive */
    static const uint64_t ids[] = { TA, TB, TOUT, TOUTS };
    rgpu_buf t = tpl_blob(0, ids, 4, &r);
    return store_put(&t);
}

/* ---------------------------------------------------------------------------
 * Parsing */
static rgpu_buf good_blob(void) {
    rgpu_buf r = { 0 };
    rec_binary(&r, RGPU_OP_ADD_TENSOR, vec_def(L(1), L(2), 4), TA, TB);
    rec_free(&r, L(1));
    static const uint64_t ids[] = { TA, TB };
    return tpl_blob(77, ids, 2, &r);
}

START_TEST(test_parse_ok)
{
    rgpu_buf t = good_blob();
    rgpu_template_info info;
    ck_assert_int_eq(rgpu_template_parse(t.p, t.len, &info), RGPU_OK);
    ck_assert_uint_eq(info.n_bind, 2);
    ck_assert_uint_eq(info.base_offset, 77);
    ck_assert_uint_eq(rgpu_template_bind_id(&info, 0), TA);
    ck_assert_uint_eq(rgpu_template_bind_id(&info, 1), TB);
    ck_assert_uint_eq(info.n_records, 2);
    ck_assert_ptr_eq(info.records, t.p + 24 + 16);
    ck_assert_uint_eq(info.records_len, t.len - 40);
    /* the header, byte for byte */
    ck_assert_int_eq(memcmp(t.p, "RGTP", 4), 0);
    ck_assert_uint_eq(rgpu_ld32(t.p + 4), 1);
    ck_assert_uint_eq(rgpu_ld32(t.p + 8), 2);
    ck_assert_uint_eq(rgpu_ld32(t.p + 12), 0);
    ck_assert_uint_eq(rgpu_ld64(t.p + 16), 77);
    /* no records and no bind ids is a template too */
    rgpu_buf e = { 0 };
    ck_assert_int_eq(rgpu_template_write(&e, 0, NULL, 0, NULL, 0), RGPU_OK);
    ck_assert_int_eq(rgpu_template_parse(e.p, e.len, &info), RGPU_OK);
    ck_assert_uint_eq(info.n_records, 0);
    rgpu_buf_free(&e);
    rgpu_buf_free(&t);
    ck_assert(rgpu_op_is_random(RGPU_OP_UNIFORM) && rgpu_op_is_random(RGPU_OP_NATIVE_DROPOUT) &&
              rgpu_op_is_random(RGPU_OP_RANDPERM) && !rgpu_op_is_random(RGPU_OP_NATIVE_DROPOUT_BACKWARD) &&
              !rgpu_op_is_random(RGPU_OP_CALL) && !rgpu_op_is_random(-1) && !rgpu_op_is_random(RGPU_OP_COUNT));
}
END_TEST

/* Parse a copy of t with byte edits applied: expect status st. */
static void expect_parse(const rgpu_buf *t, size_t len, int st, uint32_t err_record) {
    rgpu_template_info info;
    ck_assert_int_eq(rgpu_template_parse(t->p, len, &info), st);
    if (err_record != UINT32_MAX) ck_assert_uint_eq(info.err_record, err_record);
}

START_TEST(test_parse_bad)
{
    rgpu_buf t = good_blob();
    expect_parse(&t, 23, RGPU_ERR_TRUNCATED, UINT32_MAX);
    expect_parse(&t, 0, RGPU_ERR_TRUNCATED, UINT32_MAX);
    t.p[0] ^= 1;  expect_parse(&t, t.len, RGPU_ERR_BAD_MAGIC, UINT32_MAX);  t.p[0] ^= 1;
    t.p[4] = 2;   expect_parse(&t, t.len, RGPU_ERR_BAD_VERSION, UINT32_MAX); t.p[4] = 1;
    t.p[13] = 1;  expect_parse(&t, t.len, RGPU_ERR_RESERVED, UINT32_MAX);   t.p[13] = 0;
    rgpu_st32(t.p + 8, RGPU_MAX_TEMPLATE_BINDS + 1); expect_parse(&t, t.len, RGPU_ERR_TOO_LARGE, UINT32_MAX);
    rgpu_st32(t.p + 8, 1000);  expect_parse(&t, t.len, RGPU_ERR_TRUNCATED, UINT32_MAX);   /* ids past the end */
    rgpu_st32(t.p + 8, 2);
    expect_parse(&t, 24 + 12, RGPU_ERR_TRUNCATED, UINT32_MAX);                           /* cut inside the ids */
    rgpu_st64(t.p + 32, 0);   expect_parse(&t, t.len, RGPU_ERR_BAD_ARG, UINT32_MAX);       /* bind id 0 */
    rgpu_st64(t.p + 32, TA);  expect_parse(&t, t.len, RGPU_ERR_DUPLICATE_ID, UINT32_MAX);  /* TA twice */
    rgpu_st64(t.p + 32, TB);
    expect_parse(&t, t.len, RGPU_OK, UINT32_MAX);
    expect_parse(&t, t.len - 3, RGPU_ERR_TRUNCATED, 1);                                  /* record 1 cut short */
    t.p[40 + 5] = 1;  expect_parse(&t, t.len, RGPU_ERR_RESERVED, 0);  t.p[40 + 5] = 0;   /* record 0's header */
    rgpu_st16(t.p + 40, RGPU_OP_COUNT);  expect_parse(&t, t.len, RGPU_ERR_BAD_OP, 0);
    rgpu_st16(t.p + 40, RGPU_OP_ADD_TENSOR);
    /* too large: over a chunk's raw limit, before reading anything */
    uint8_t *big = calloc(1, (size_t)RGPU_MAX_CHUNK_RAW + 1);
    memcpy(big, t.p, t.len);
    rgpu_template_info info;
    ck_assert_int_eq(rgpu_template_parse(big, (size_t)RGPU_MAX_CHUNK_RAW + 1, &info), RGPU_ERR_TOO_LARGE);
    free(big);
    rgpu_buf_free(&t);

    /* records a template may not hold: a CALL (record 1), a WAIT op (record 2) */
    uint64_t one = 5;
    rgpu_buf r = { 0 };
    rec_empty(&r, vec_def(L(1), L(2), 4));
    rgpu_hash h = { { 1 } };
    rec_call(&r, &h, &one, 1, 0, 0);
    t = tpl_blob(0, NULL, 0, &r);
    expect_parse(&t, t.len, RGPU_ERR_BAD_OP, 1);
    rgpu_buf_free(&t);
    rec_empty(&r, vec_def(L(1), L(2), 4));
    rec_free(&r, L(1));
    rgpu_record d = { .op = RGPU_OP_DOWNLOAD, .n_in = 1 };
    d.in[0] = L(1);
    enc(&r, &d);
    t = tpl_blob(0, NULL, 0, &r);
    expect_parse(&t, t.len, RGPU_ERR_BAD_OP, 2);
    rgpu_buf_free(&t);
    /* a random op whose seed is not an INT */
    rgpu_record u = { .op = RGPU_OP_UNIFORM, .n_out = 1, .n_args = 4 };
    u.out[0] = existing(TA);
    u.args[0].kind = RGPU_ARG_FLOAT; u.args[1].kind = RGPU_ARG_FLOAT;
    u.args[2].kind = RGPU_ARG_FLOAT; u.args[3].kind = RGPU_ARG_INT;
    enc(&r, &u);
    t = tpl_blob(0, NULL, 0, &r);
    expect_parse(&t, t.len, RGPU_ERR_BAD_ARG, 0);
    rgpu_buf_free(&t);
}
END_TEST

/* ---------------------------------------------------------------------------
 * CALL */
static const float A[4] = { 1, 2, 3, 4 }, B[4] = { 10, 20, 30, 40 };

START_TEST(test_call_values_and_locals)
{
    rgpu_hash h = template_add_mul();
    make_vec(1, 2, A, 4);
    make_vec(3, 4, B, 4);
    uint64_t mem0, peak;
    rgpu_session_memory(g_s, &mem0, &peak);
    ck_assert_uint_eq(mem0, 32);
    rgpu_buf b = { 0 };
    uint64_t bind1[] = { 1, 3, 5, 6 };
    rec_call(&b, &h, bind1, 4, 0, 0);
    run_ok(&b);
    float out[4];
    read_vec(5, out, 4);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(out[i], (A[i] + B[i]) * A[i]);
    /* a, b, out remain; the locals (the freed temporary and the one left
     * alive) and their storages are gone */
    ck_assert_uint_eq(rgpu_session_tensor_count(g_s), 3);
    ck_assert_uint_eq(rgpu_session_storage_count(g_s), 3);
    uint64_t mem;
    rgpu_session_memory(g_s, &mem, &peak);
    ck_assert_uint_eq(mem, 48);
    ck_assert_uint_eq(peak, 64);   /* a, b, out and one local at a time (the temporary is freed first) */
    ck_assert_uint_eq(g_store.fetches, 1);
    ck_assert_uint_eq(rgpu_session_template_count(g_s), 1);
    ck_assert_uint_gt(rgpu_session_template_bytes(g_s), 0);

    /* again with other bindings: (b + a) * b; the template is cached */
    uint64_t bind2[] = { 3, 1, 7, 8 };
    rec_call(&b, &h, bind2, 4, 0, 0);
    run_ok(&b);
    read_vec(7, out, 4);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(out[i], (B[i] + A[i]) * B[i]);
    read_vec(5, out, 4);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(out[i], (A[i] + B[i]) * A[i]);
    ck_assert_uint_eq(g_store.fetches, 1);
    ck_assert_uint_eq(rgpu_session_tensor_count(g_s), 4);
    ck_assert_uint_eq(rgpu_session_storage_count(g_s), 4);

    /* the outputs are ordinary session tensors: a plain record uses one, FREE drops it */
    rec_binary(&b, RGPU_OP_ADD_TENSOR, vec_def(9, 10, 4), 5, 7);
    rec_free(&b, 5);
    run_ok(&b);
    read_vec(9, out, 4);
    for (int i = 0; i < 4; i++) ck_assert_float_eq(out[i], (A[i] + B[i]) * A[i] + (B[i] + A[i]) * B[i]);
    ck_assert_uint_eq(rgpu_session_tensor_count(g_s), 4);

    /* the CALL's outputs, as tools see them */
    rgpu_record cr;
    size_t used, n;
    rec_call(&b, &h, bind2, 4, 0, 0);
    ck_assert_int_eq(rgpu_record_decode(b.p, b.len, &cr, &used), RGPU_OK);
    uint64_t tids[4];
    ck_assert_int_eq(rgpu_session_call_outputs(g_s, &cr, tids, 4, &n), RGPU_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(tids[0], 7);
    rgpu_buf_free(&b);
}
END_TEST

START_TEST(test_call_view_of_bound_storage)
{
    /* out = a view of a's storage (elements 1..2), bound through a's sid;
     * then out2 = out * out into a new bound storage */
    enum { TSA = 105, TV = 106, TO2 = 107, TO2S = 108 };
    rgpu_buf r = { 0 };
    rgpu_record al = { .op = RGPU_OP_ALIAS, .n_out = 1, .n_in = 1 };
    al.out[0] = vec_def(TV, TSA, 2);
    al.out[0].flags = 0;
    al.out[0].nbytes = 0;
    al.out[0].offset = 1;
    al.in[0] = TA;
    enc(&r, &al);
    rec_binary(&r, RGPU_OP_MUL_TENSOR, vec_def(TO2, TO2S, 2), TV, TV);
    static const uint64_t ids[] = { TA, TSA, TV, TO2, TO2S };
    rgpu_buf t = tpl_blob(0, ids, 5, &r);
    rgpu_hash h = store_put(&t);
    make_vec(1, 2, A, 4);
    rgpu_buf b = { 0 };
    uint64_t bind[] = { 1, 2, 11, 12, 13 };
    rec_call(&b, &h, bind, 5, 0, 0);
    run_ok(&b);
    float v[2];
    read_vec(11, v, 2);
    ck_assert_float_eq(v[0], 2); ck_assert_float_eq(v[1], 3);
    read_vec(12, v, 2);
    ck_assert_float_eq(v[0], 4); ck_assert_float_eq(v[1], 9);
    /* the view shares a's storage: writing a shows through it */
    const float z[4] = { 0, 7, 8, 0 };
    ck_assert_int_eq(rgpu_session_write_tensor(g_s, 1, (const uint8_t *)z, 16), RGPU_OK);
    read_vec(11, v, 2);
    ck_assert_float_eq(v[0], 7); ck_assert_float_eq(v[1], 8);
    ck_assert_uint_eq(rgpu_session_storage_count(g_s), 2);
    ck_assert_uint_eq(rgpu_session_tensor_count(g_s), 3);
    rgpu_buf_free(&b);
}
END_TEST

START_TEST(test_call_random_rebased)
{
    /* captured when the client's offset was 40: its uniform_ drew offset 43 */
    enum { TU = 110, TUS = 111 };
    rgpu_buf r = { 0 };
    rec_empty(&r, vec_def(TU, TUS, 64));
    rec_uniform(&r, TU, 1234, 43);
    static const uint64_t ids[] = { TU, TUS };
    rgpu_buf t = tpl_blob(40, ids, 2, &r);
    rgpu_hash h = store_put(&t);
    rgpu_buf b = { 0 };
    uint64_t bind[] = { 1, 2 };
    rec_call(&b, &h, bind, 2, 99, 1000);
    /* the same draw as a plain record: seed 99, offset 1000 + 3 */
    rec_empty(&b, vec_def(3, 4, 64));
    rec_uniform(&b, 3, 99, 1003);
    /* and one that must differ (the template's own seed and offset) */
    rec_empty(&b, vec_def(5, 6, 64));
    rec_uniform(&b, 5, 1234, 43);
    run_ok(&b);
    float u[64], p[64], q[64];
    read_vec(1, u, 64);
    read_vec(3, p, 64);
    read_vec(5, q, 64);
    ck_assert_int_eq(memcmp(u, p, sizeof u), 0);
    ck_assert_int_ne(memcmp(u, q, sizeof u), 0);
    for (int i = 0; i < 64; i++) ck_assert(u[i] >= 0 && u[i] < 1);
    /* u64 wrap-around: base above the call's offset */
    bind[0] = 7; bind[1] = 8;
    rec_call(&b, &h, bind, 2, 99, 0);   /* offset 0 - 40 + 43 = 3 */
    rec_empty(&b, vec_def(9, 10, 64));
    rec_uniform(&b, 9, 99, 3);
    run_ok(&b);
    read_vec(7, u, 64);
    read_vec(9, p, 64);
    ck_assert_int_eq(memcmp(u, p, sizeof u), 0);
    rgpu_buf_free(&b);
}
END_TEST

START_TEST(test_call_failing_record)
{
    /* record 1 adds a 4-vector and a 3-vector into a 4-vector: no broadcast */
    enum { TC = 120 };
    rgpu_buf r = { 0 };
    rec_binary(&r, RGPU_OP_MUL_TENSOR, vec_def(L(1), L(2), 4), TA, TA);
    rec_binary(&r, RGPU_OP_ADD_TENSOR, vec_def(L(3), L(4), 4), L(1), TC);
    rec_binary(&r, RGPU_OP_MUL_TENSOR, vec_def(TOUT, TOUTS, 4), L(3), TA);
    rec_binary(&r, RGPU_OP_MUL_TENSOR, vec_def(TB, TB + 1000, 4), TA, TA);   /* independent of the failure */
    static const uint64_t ids[] = { TA, TC, TOUT, TOUTS, TB, TB + 1000 };
    rgpu_buf t = tpl_blob(0, ids, 6, &r);
    rgpu_hash h = store_put(&t);
    make_vec(1, 2, A, 4);
    make_vec(3, 4, B, 3);
    rgpu_buf b = { 0 };
    uint64_t bind[] = { 1, 3, 5, 6, 7, 8 };
    rec_call(&b, &h, bind, 6, 0, 0);
    uint64_t call_idx = g_op;
    run(&b);
    char msg[256], want[128];
    int st = result(msg, sizeof msg);
    ck_assert_int_eq(st, RGPU_ERR_SHAPE);
    snprintf(want, sizeof want, "op %llu (rgpu::call) failed: template record 1 (add.Tensor): ", (unsigned long long)call_idx);
    ck_assert_msg(strncmp(msg, want, strlen(want)) == 0, "%s", msg);
    rgpu_tensor_info ti;
    ck_assert_int_eq(rgpu_session_tensor_info(g_s, 5, &ti), RGPU_OK);
    ck_assert(ti.poisoned);
    ck_assert_uint_eq(ti.poison_op, call_idx);
    ck_assert_int_eq(rgpu_session_tensor_info(g_s, 7, &ti), RGPU_OK);
    ck_assert(!ti.poisoned);
    float v[4];
    read_vec(7, v, 4);
    ck_assert_float_eq(v[3], 16);
    /* the session goes on; a record on the poisoned output is poisoned, unreported */
    rec_binary(&b, RGPU_OP_ADD_TENSOR, vec_def(9, 10, 4), 5, 1);
    rec_binary(&b, RGPU_OP_ADD_TENSOR, vec_def(11, 12, 4), 1, 1);
    run(&b);
    ck_assert_int_eq(result(msg, sizeof msg), 0);
    ck_assert_int_eq(rgpu_session_tensor_info(g_s, 9, &ti), RGPU_OK);
    ck_assert(ti.poisoned);
    read_vec(11, v, 4);
    ck_assert_float_eq(v[2], 6);
    /* locals gone even so */
    ck_assert_uint_eq(rgpu_session_tensor_count(g_s), 6);

    /* a poisoned binding poisons all the template defines, without a report */
    uint64_t bind2[] = { 5, 3, 13, 14, 15, 16 };
    rec_call(&b, &h, bind2, 6, 0, 0);
    run(&b);
    ck_assert_int_eq(result(msg, sizeof msg), 0);
    ck_assert_int_eq(rgpu_session_tensor_info(g_s, 13, &ti), RGPU_OK);
    ck_assert(ti.poisoned && ti.poison_op == call_idx);
    ck_assert_int_eq(rgpu_session_tensor_info(g_s, 15, &ti), RGPU_OK);
    ck_assert(ti.poisoned);
    ck_assert_uint_eq(rgpu_session_tensor_count(g_s), 8);
    rgpu_buf_free(&b);
}
END_TEST

/* One CALL op that must fail with st and a message containing needle. */
static void expect_call_fails(const rgpu_hash *h, const uint64_t *ids, uint32_t n, int st, const char *needle) {
    rgpu_buf b = { 0 };
    rec_call(&b, h, ids, n, 0, 0);
    run(&b);
    char msg[256];
    ck_assert_int_eq(result(msg, sizeof msg), st);
    ck_assert_msg(strstr(msg, "(rgpu::call) failed") && strstr(msg, needle), "%s", msg);
    /* the session works on */
    float v[4];
    rec_binary(&b, RGPU_OP_ADD_TENSOR, vec_def(900 + g_op, 1900 + g_op, 4), 1, 1);
    uint64_t tid = 900 + g_op;
    run(&b);
    ck_assert_int_eq(result(msg, sizeof msg), 0);
    read_vec(tid, v, 4);
    ck_assert_float_eq(v[1], 4);
    rgpu_buf_free(&b);
}

START_TEST(test_call_rejected)
{
    rgpu_hash h = template_add_mul();
    make_vec(1, 2, A, 4);
    make_vec(3, 4, B, 4);
    uint64_t three[] = { 1, 3, 5 }, four[] = { 1, 3, 0, 6 };
    expect_call_fails(&h, three, 3, RGPU_ERR_BAD_ARG, "has 4 bind ids, the call gives 3 bindings");
    expect_call_fails(&h, four, 4, RGPU_ERR_BAD_ARG, "binding 2 is id 0");
    rgpu_hash nobody = rgpu_hash_bytes("nobody", 6);
    expect_call_fails(&nobody, three, 3, RGPU_ERR_MISSING_BLOB, "nobody holds it");
    /* a blob that is no template: nested CALL, and a WAIT inside */
    uint64_t one = 1;
    rgpu_buf r = { 0 };
    rec_call(&r, &h, &one, 1, 0, 0);
    rgpu_buf t = tpl_blob(0, NULL, 0, &r);
    rgpu_hash nested = store_put(&t);
    expect_call_fails(&nested, NULL, 0, RGPU_ERR_BAD_OP, "is not a valid template (RGPU_ERR_BAD_OP)");
    rgpu_record sy = { .op = RGPU_OP_SYNC };
    enc(&r, &sy);
    t = tpl_blob(0, NULL, 0, &r);
    rgpu_hash waits = store_put(&t);
    int f0 = g_store.fetches;
    expect_call_fails(&waits, NULL, 0, RGPU_ERR_BAD_OP, "is not a valid template");
    expect_call_fails(&waits, NULL, 0, RGPU_ERR_BAD_OP, "is not a valid template");
    ck_assert_int_eq(g_store.fetches, f0 + 1);   /* remembered as bad: fetched once */
    /* garbage bytes */
    rgpu_buf g = { 0 };
    rgpu_buf_append(&g, "not a template at all, no", 25);
    rgpu_hash garbage = store_put(&g);
    expect_call_fails(&garbage, NULL, 0, RGPU_ERR_BAD_MAGIC, "not a valid template");
    /* wrong arg kinds */
    rgpu_buf b = { 0 };
    rgpu_record c = { .op = RGPU_OP_CALL, .n_args = 1 };
    c.args[0].kind = RGPU_ARG_HASH; c.args[0].v.h = h;
    enc(&b, &c);
    run(&b);
    char msg[256];
    ck_assert_int_eq(result(msg, sizeof msg), RGPU_ERR_BAD_ARG);
    ck_assert_msg(strstr(msg, "rgpu::call: 1 args, ops.def says 4 (h template, ints bindings, i seed, i offset)"), "%s", msg);
    /* an output id the session already holds */
    uint64_t dup[] = { 1, 3, 1, 6 };
    expect_call_fails(&h, dup, 4, RGPU_ERR_DUPLICATE_ID, "template record 1 (mul.Tensor)");
    /* nothing leaked into the session: a, b and the checks' outputs, one storage each */
    ck_assert_uint_eq(rgpu_session_storage_count(g_s), rgpu_session_tensor_count(g_s));
    ck_assert_uint_eq(rgpu_session_tensor_count(g_s), 2 + 8);
    rgpu_buf_free(&b);
}
END_TEST

START_TEST(test_prefetch_and_cache)
{
    /* a template with an UPLOAD inside: prefetch fetches both, the run none */
    float data[4] = { 5, 6, 7, 8 };
    rgpu_buf blob = { 0 };
    rgpu_buf_append(&blob, data, 16);
    rgpu_hash bh = store_put(&blob);
    rgpu_buf r = { 0 };
    rgpu_record up = { .op = RGPU_OP_UPLOAD, .n_out = 1, .n_args = 2 };
    up.out[0] = vec_def(L(1), L(2), 4);
    up.args[0].kind = RGPU_ARG_HASH; up.args[0].v.h = bh;
    up.args[1].kind = RGPU_ARG_INT; up.args[1].v.i = 16;
    enc(&r, &up);
    rec_binary(&r, RGPU_OP_ADD_TENSOR, vec_def(TOUT, TOUTS, 4), L(1), TA);
    static const uint64_t ids[] = { TA, TOUT, TOUTS };
    rgpu_buf t = tpl_blob(0, ids, 3, &r);
    rgpu_hash h = store_put(&t);
    make_vec(1, 2, A, 4);
    rgpu_buf b = { 0 };
    uint64_t bind[] = { 1, 3, 4 };
    rec_call(&b, &h, bind, 3, 0, 0);
    ck_assert_int_eq(rgpu_session_prefetch(g_s, b.p, b.len), RGPU_OK);
    ck_assert_int_eq(g_store.fetches, 2);
    ck_assert(rgpu_session_has_blob(g_s, &bh));
    run(&b);
    ck_assert_int_eq(g_store.fetches, 2);
    char msg[256];
    ck_assert_msg(result(msg, sizeof msg) == 0, "%s", msg);
    float v[4];
    read_vec(3, v, 4);
    ck_assert_float_eq(v[0], 6); ck_assert_float_eq(v[3], 12);
    /* a fetch failing in prefetch is prefetch's status (the chunk stays unapplied) */
    rgpu_hash nobody = rgpu_hash_bytes("x", 1);
    rec_call(&b, &nobody, bind, 3, 0, 0);
    ck_assert_int_eq(rgpu_session_prefetch(g_s, b.p, b.len), RGPU_ERR_MISSING_BLOB);
    rgpu_buf_free(&b);
}
END_TEST

START_TEST(test_cache_eviction)
{
    rgpu_session_free(g_s);
    rgpu_session_limits lim = { .max_templates = 1 };
    g_s = rgpu_session_new(g_cpu, &lim);
    rgpu_session_set_fetch(g_s, store_fetch, &g_store);
    rgpu_hash h1 = template_add_mul();
    rgpu_buf r = { 0 };
    rec_binary(&r, RGPU_OP_SUB_TENSOR, vec_def(TOUT, TOUTS, 4), TA, TB);
    static const uint64_t ids[] = { TA, TB, TOUT, TOUTS };
    rgpu_buf t = tpl_blob(0, ids, 4, &r);
    rgpu_hash h2 = store_put(&t);
    make_vec(1, 2, A, 4);
    make_vec(3, 4, B, 4);
    rgpu_buf b = { 0 };
    uint64_t next = 10;
    for (int i = 0; i < 3; i++) {
        uint64_t b1[] = { 1, 3, next, next + 1 }, b2[] = { 3, 1, next + 2, next + 3 };
        rec_call(&b, &h1, b1, 4, 0, 0);
        rec_call(&b, &h2, b2, 4, 0, 0);
        run_ok(&b);
        float v[4];
        read_vec(next, v, 4);
        ck_assert_float_eq(v[1], (A[1] + B[1]) * A[1]);
        read_vec(next + 2, v, 4);
        ck_assert_float_eq(v[1], B[1] - A[1]);
        next += 4;
        ck_assert_uint_eq(rgpu_session_template_count(g_s), 1);
    }
    /* one cached at a time: prefetch fetches both, each evicting the other,
     * and each CALL fetches its template again: 4 fetches per chunk */
    ck_assert_int_eq(g_store.fetches, 12);
    rgpu_buf_free(&b);
}
END_TEST

/* A chunk is decoded once (check_chunk), its records kept packed up to a cap
 * of 8 MiB and the rest decoded from the raw bytes when run: a chunk past the
 * cap gives what the same records give in small chunks. The server's path
 * (check, prefetch_checked, run_checked) and run_chunk alike; run_checked
 * runs a checked chunk once, and never one whose check failed. */
START_TEST(test_chunk_decoded_once_past_the_cap) {
    static const float A[4] = { 0.25f, -1.5f, 3.0f, 1e-3f };
    enum { N = 60000 };   /* 2N records, ~9.6 MiB packed */
    for (int path = 0; path < 2; path++) {
        uint64_t base = 1000 + (uint64_t)path * 1000000;
        make_vec(base, base, A, 4);
        rgpu_buf b = { 0 };
        uint64_t prev = base;
        for (uint64_t i = 1; i <= N; i++) {
            rec_binary(&b, RGPU_OP_ADD_TENSOR, vec_def(base + i, base + i, 4), prev, base);
            if (prev != base) rec_free(&b, prev);
            prev = base + i;
        }
        uint32_t count = count_records(&b);
        if (path == 0) {
            char why[200];
            ck_assert_int_eq(rgpu_session_run_checked(g_s), RGPU_ERR_SEQUENCE);   /* nothing checked */
            ck_assert_int_eq(rgpu_session_check_chunk(g_s, b.p, b.len, g_op, count, why, sizeof why), RGPU_OK);
            ck_assert_int_eq(rgpu_session_prefetch_checked(g_s), RGPU_OK);
            ck_assert_int_eq(rgpu_session_run_checked(g_s), RGPU_OK);
            ck_assert_int_eq(rgpu_session_run_checked(g_s), RGPU_ERR_SEQUENCE);   /* once */
            /* a failed check leaves nothing to run */
            ck_assert_int_eq(rgpu_session_check_chunk(g_s, b.p, b.len, g_op + count, count, why, sizeof why), RGPU_OK);
            ck_assert_int_ne(rgpu_session_check_chunk(g_s, b.p, b.len - 1, g_op + count, count, why, sizeof why), RGPU_OK);
            ck_assert_int_eq(rgpu_session_run_checked(g_s), RGPU_ERR_SEQUENCE);
        } else {
            ck_assert_int_eq(rgpu_session_run_chunk(g_s, b.p, b.len, g_op, count), RGPU_OK);
        }
        g_op += count;
        ck_assert_uint_eq(rgpu_session_applied(g_s), g_op);
        rgpu_buf_free(&b);
        float v[4], want[4];
        memcpy(want, A, sizeof want);
        for (int i = 1; i <= N; i++)
            for (int k = 0; k < 4; k++) want[k] = want[k] + A[k];
        read_vec(prev, v, 4);
        for (int k = 0; k < 4; k++) ck_assert_float_eq(v[k], want[k]);
        ck_assert_uint_eq(rgpu_session_tensor_count(g_s), (uint64_t)(2 * (path + 1)));
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("template");
    TCase *tc = add_tcase(s, "core", 60, setup, teardown);
    ADD_TESTS(tc, test_parse_ok, test_parse_bad, test_call_values_and_locals, test_call_view_of_bound_storage,
                  test_call_random_rebased, test_call_failing_record, test_call_rejected,
                  test_prefetch_and_cache, test_cache_eviction, test_chunk_decoded_once_past_the_cap);
    return run_suite(s);
}
