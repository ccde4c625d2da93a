/* test_graph.c — graph replay of templates (session.c "Graphs"), proven on
 * the cpu backend's graph hooks: every case runs the same records on two
 * sessions, graphs on and graphs off, and after every CALL compares every
 * tensor still held, bit for bit (earlier outputs included). The counters
 * say which calls were captured and replayed. Cases: the same input storages
 * each call, new input storages each call (copied into static buffers), an
 * input that moves after the capture (captured again), in-place updates of
 * bound inputs (written back when staged), aliasing bindings (a layout of
 * their own), random ops (graphed, a Philox pair per call), capture refusals (permanent and
 * transient), a failing record, a bound input the template frees, and
 * graphs off. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "check_records.h"

/* ---------------------------------------------------------------------------
 * Records */
enum { N = 64 };

static rgpu_tdef view_def(uint64_t tid, uint64_t sid, int64_t n, int64_t offset) {
    rgpu_tdef d = vec_def(tid, sid, n);
    d.flags = 0;
    d.nbytes = 0;
    d.offset = offset;
    return d;
}








/* ---------------------------------------------------------------------------
 * Templates, kept where both sessions' fetch finds them */
typedef struct store { rgpu_hash h[16]; rgpu_buf b[16]; int n; } store;
static store g_store;

static rgpu_status store_fetch(void *ud, const rgpu_hash *h, uint64_t max_n, uint8_t **data, size_t *n) {
    (void)max_n;   /* the test store holds small blobs */
    store *st = ud;
    for (int i = 0; i < st->n; i++) {
        if (!rgpu_hash_eq(&st->h[i], h)) continue;
        *data = malloc(st->b[i].len ? st->b[i].len : 1);
        memcpy(*data, st->b[i].p, st->b[i].len);
        *n = st->b[i].len;
        return RGPU_OK;
    }
    return RGPU_ERR_MISSING_BLOB;
}

static rgpu_hash template_of(uint64_t base, const uint64_t *ids, uint32_t n, rgpu_buf *recs) {
    rgpu_buf t = { 0 };
    ck_assert_int_eq(rgpu_template_write(&t, base, ids, n, recs->p, recs->len), RGPU_OK);
    rgpu_buf_free(recs);
    ck_assert_int_lt(g_store.n, 16);
    rgpu_hash h = rgpu_hash_bytes(t.p, t.len);
    g_store.h[g_store.n] = h;
    g_store.b[g_store.n++] = t;
    return h;
}

#define L(n) ((1ull << 62) | (n))

/* ---------------------------------------------------------------------------
 * Two sessions, graphs on (index 1) and off (index 0), fed the same records */
static rgpu_backend *g_b[2];
static rgpu_session *g_s[2];
static uint64_t g_op;
static uint64_t g_tids[512];   /* every tensor id the test holds, compared after each call */
static int g_nt;

static void setup(void) {
    memset(&g_store, 0, sizeof g_store);
    for (int k = 0; k < 2; k++) {
        g_b[k] = rgpu_backend_cpu_create();
        rgpu_session_limits lim = { .graphs = k == 1 };
        g_s[k] = rgpu_session_new(g_b[k], &lim);
        rgpu_session_set_fetch(g_s[k], store_fetch, &g_store);
    }
    g_op = 0;
    g_nt = 0;
}

static void teardown(void) {
    for (int k = 0; k < 2; k++) { rgpu_session_free(g_s[k]); g_b[k]->destroy(g_b[k]); }
    for (int i = 0; i < g_store.n; i++) rgpu_buf_free(&g_store.b[i]);
}

static void hold(uint64_t tid) { ck_assert_int_lt(g_nt, 512); g_tids[g_nt++] = tid; }
static void unhold(uint64_t tid) {
    for (int i = 0; i < g_nt; i++) if (g_tids[i] == tid) { g_tids[i] = g_tids[--g_nt]; return; }
}

/* Run the records in b as one chunk on both sessions (b emptied); both must
 * report the same status. Returns it. */
static int run(rgpu_buf *b) {
    uint32_t count = count_records(b);
    int st[2];
    char msg[2][256];
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(rgpu_session_prefetch(g_s[k], b->p, b->len), RGPU_OK);
        ck_assert_int_eq(rgpu_session_run_chunk(g_s[k], b->p, b->len, g_op, count), RGPU_OK);
        uint64_t eo;
        uint8_t *data;
        size_t dn;
        ck_assert_int_eq(rgpu_session_take_result(g_s[k], g_op + count - 1, &st[k], &eo, msg[k], 256, &data, &dn), RGPU_OK);
        free(data);
    }
    ck_assert_msg(st[0] == st[1] && !strcmp(msg[0], msg[1]), "graphs off: %d %s; on: %d %s", st[0], msg[0], st[1], msg[1]);
    g_op += count;
    b->len = 0;
    return st[0];
}

/* Every held tensor, bitwise the same in both sessions (poison included). */
static void same_everywhere(const char *when) {
    for (int i = 0; i < g_nt; i++) {
        rgpu_tensor_info ia, ib;
        ck_assert_int_eq(rgpu_session_tensor_info(g_s[0], g_tids[i], &ia), RGPU_OK);
        ck_assert_int_eq(rgpu_session_tensor_info(g_s[1], g_tids[i], &ib), RGPU_OK);
        ck_assert_msg(ia.poisoned == ib.poisoned, "%s: tensor %llu poisoned %d vs %d", when,
                      (unsigned long long)g_tids[i], ia.poisoned, ib.poisoned);
        if (ia.poisoned) continue;
        uint8_t *pa, *pb;
        size_t na, nb;
        ck_assert_int_eq(rgpu_session_read_tensor(g_s[0], g_tids[i], &pa, &na), RGPU_OK);
        ck_assert_int_eq(rgpu_session_read_tensor(g_s[1], g_tids[i], &pb, &nb), RGPU_OK);
        ck_assert_uint_eq(na, nb);
        ck_assert_msg(!memcmp(pa, pb, na), "%s: tensor %llu differs with graphs on", when, (unsigned long long)g_tids[i]);
        free(pa);
        free(pb);
    }
    uint64_t ma, pa, mb, pb;
    rgpu_session_memory(g_s[0], &ma, &pa);
    rgpu_session_memory(g_s[1], &mb, &pb);
    ck_assert_uint_eq(ma, mb);   /* the session's counted bytes: the same in both modes */
    ck_assert_uint_eq(pa, pb);
    ck_assert_uint_eq(rgpu_session_storage_count(g_s[0]), rgpu_session_storage_count(g_s[1]));
    ck_assert_uint_eq(rgpu_session_tensor_count(g_s[0]), rgpu_session_tensor_count(g_s[1]));
}

/* A new f32 vector tid (storage sid), N elements from f(i), in both sessions. */
static void make_vec(uint64_t tid, uint64_t sid, float scale, float shift) {
    rgpu_buf b = { 0 };
    rec_empty(&b, vec_def(tid, sid, N));
    run(&b);
    rgpu_buf_free(&b);
    float v[N];
    for (int i = 0; i < N; i++) v[i] = scale * (float)(i % 7) + shift + 0.1f * (float)i;
    for (int k = 0; k < 2; k++) ck_assert_int_eq(rgpu_session_write_tensor(g_s[k], tid, (const uint8_t *)v, sizeof v), RGPU_OK);
    hold(tid);
}

static void set_vec(uint64_t tid, float shift) {   /* new values, same storage */
    float v[N];
    for (int i = 0; i < N; i++) v[i] = shift - 0.25f * (float)i;
    for (int k = 0; k < 2; k++) ck_assert_int_eq(rgpu_session_write_tensor(g_s[k], tid, (const uint8_t *)v, sizeof v), RGPU_OK);
}

static void drop(uint64_t tid) {
    rgpu_buf b = { 0 };
    rec_free(&b, tid);
    run(&b);
    rgpu_buf_free(&b);
    unhold(tid);
}

static void call(const rgpu_hash *h, const uint64_t *bind, uint32_t n) {
    rgpu_buf b = { 0 };
    rec_call(&b, h, bind, n, 7, 100);
    ck_assert_int_eq(run(&b), 0);
    rgpu_buf_free(&b);
}

/* call(h, bind, n), then hold bind[first .. first + n_held) (its outputs) and
 * check that both sessions agree. */
static void call_held(const rgpu_hash *h, const uint64_t *bind, uint32_t n, int first, int n_held, const char *what) {
    call(h, bind, n);
    for (int i = first; i < first + n_held; i++) hold(bind[i]);
    same_everywhere(what);
}

static rgpu_graph_stats stats(void) {
    rgpu_graph_stats st;
    rgpu_session_graph_stats(g_s[1], &st);
    return st;
}

/* out = (x + w) * w through a local it frees, and a local left alive for the
 * end of the call; binds x, w, out, out's storage. */
enum { TX = 101, TW = 102, TOUT = 103, TOUTS = 104 };
static rgpu_hash template_affine(void) {
    rgpu_buf r = { 0 };
    rec_binary(&r, RGPU_OP_ADD_TENSOR, vec_def(L(1), L(2), N), TX, TW);
    rec_binary(&r, RGPU_OP_MUL_TENSOR, vec_def(TOUT, TOUTS, N), L(1), TW);
    rec_free(&r, L(1));
    rec_binary(&r, RGPU_OP_SUB_TENSOR, vec_def(L(3), L(4), N), TOUT, TX);
    static const uint64_t ids[] = { TX, TW, TOUT, TOUTS };
    return template_of(0, ids, 4, &r);
}

/* template_affine, with x = 1 (storage 2) and w = 3 (storage 4) made */
static rgpu_hash affine_with_inputs(void) {
    rgpu_hash h = template_affine();
    make_vec(1, 2, 1.5f, -2);
    make_vec(3, 4, 0.5f, 1);
    return h;
}

/* Call k of h on x and w = 3, its output 10 + 2k (storage 11 + 2k) held;
 * both sessions must then agree. */
static void call_affine(const rgpu_hash *h, uint64_t x, int k, const char *what) {
    uint64_t bind[] = { x, 3, 10 + 2 * (uint64_t)k, 11 + 2 * (uint64_t)k };
    call_held(h, bind, 4, 2, 1, what);
}

/* ---------------------------------------------------------------------------
 * Cases */

/* (a) + (d): the same input storages every call (new values written into
 * them between calls); each call's output is kept and must keep its values
 * while later calls replay. */
START_TEST(test_same_inputs)
{
    rgpu_hash h = affine_with_inputs();
    for (int k = 0; k < 5; k++) {
        set_vec(1, (float)k);          /* the graph must read the input's current bytes */
        call_affine(&h, 1, k, "same inputs");
        rgpu_graph_stats st = stats();
        ck_assert_uint_eq(st.calls, (uint64_t)k + 1);
        ck_assert_uint_eq(st.captures, k >= 1);                 /* captured at the second call */
        ck_assert_uint_eq(st.replays, k >= 2 ? (uint64_t)k - 1 : 0);   /* replayed from the third */
        ck_assert_uint_eq(st.input_copies, 0);                  /* unmoved inputs are read in place */
        ck_assert_uint_eq(st.refusals, 0);
    }
    ck_assert_uint_eq(stats().instances, 1);
    ck_assert_uint_gt(stats().bytes, 0);
    /* the kept outputs are ordinary tensors: freeing them frees their storages in both */
    drop(10);
    drop(12);
    same_everywhere("after frees");
}
END_TEST

/* (b): a new x every call (the old ones kept alive, so the pointers differ):
 * x is staged, copied into the static buffer before each replay; w stays put. */
START_TEST(test_new_inputs)
{
    rgpu_hash h = template_affine();
    make_vec(3, 4, 0.5f, 1);
    for (int k = 0; k < 5; k++) {
        uint64_t x = 200 + 2 * (uint64_t)k;
        make_vec(x, x + 1, (float)k + 0.25f, (float)-k);
        call_affine(&h, x, k, "new inputs");
        rgpu_graph_stats st = stats();
        ck_assert_uint_eq(st.replays, k >= 2 ? (uint64_t)k - 1 : 0);
        ck_assert_uint_eq(st.input_copies, k >= 2 ? (uint64_t)k - 1 : 0);   /* x only: w is direct */
    }
    ck_assert_uint_eq(stats().captures, 1);
}
END_TEST

/* An input that stays put for the capture, then moves: that call is logged
 * and captured again with the input staged; later calls replay. */
START_TEST(test_input_moves)
{
    rgpu_hash h = affine_with_inputs();
    uint64_t xs[5] = { 1, 1, 1, 300, 302 };
    uint64_t replays[5] = { 0, 0, 1, 1, 2 }, captures[5] = { 0, 1, 1, 2, 2 }, copies[5] = { 0, 0, 0, 0, 1 };
    for (int k = 0; k < 5; k++) {
        if (xs[k] != 1) make_vec(xs[k], xs[k] + 1, 2.0f, (float)k);
        call_affine(&h, xs[k], k, "input moves");
        rgpu_graph_stats st = stats();
        ck_assert_uint_eq(st.replays, replays[k]);
        ck_assert_uint_eq(st.captures, captures[k]);
        ck_assert_uint_eq(st.input_copies, copies[k]);
    }
}
END_TEST

/* (c): an optimizer-like step updating bound inputs in place: p += m' where
 * m' = m * d + g (m updated in place too), and a fresh output p * 2. Called
 * with one (p, m) pair for three calls (written in place, direct), then
 * alternating two pairs (staged: copied in and written back). */
START_TEST(test_inplace_update)
{
    enum { TP = 111, TM = 112, TG = 113, TD = 114, TO = 115, TOS = 116 };
    rgpu_buf r = { 0 };
    rec_binary(&r, RGPU_OP_MUL_TENSOR, existing(TM), TM, TD);
    rec_binary(&r, RGPU_OP_ADD_TENSOR, existing(TM), TM, TG);
    rec_binary(&r, RGPU_OP_ADD_TENSOR, existing(TP), TP, TM);
    rec_binary(&r, RGPU_OP_ADD_TENSOR, vec_def(TO, TOS, N), TP, TP);
    static const uint64_t ids[] = { TP, TM, TG, TD, TO, TOS };
    rgpu_hash h = template_of(0, ids, 6, &r);
    make_vec(1, 2, 1, 0);     /* p, m: pair 1 */
    make_vec(3, 4, 0, 0.5f);
    make_vec(5, 6, 2, 1);     /* p, m: pair 2 */
    make_vec(7, 8, -1, 0.25f);
    make_vec(9, 10, 0.125f, -1);   /* g */
    make_vec(11, 12, 0, 0.5f);     /* d */
    for (int k = 0; k < 7; k++) {
        bool two = k >= 3 && (k & 1);
        uint64_t bind[] = { two ? 5 : 1, two ? 7 : 3, 9, 11, 40 + 2 * (uint64_t)k, 41 + 2 * (uint64_t)k };
        call_held(&h, bind, 6, 4, 1, "in-place update");
    }
    rgpu_graph_stats st = stats();
    /* calls 0, 1 (capture), 2 replayed; 3 moves p, m: captured again (staged);
     * 4, 5, 6 replayed with both copied in and written back */
    ck_assert_uint_eq(st.captures, 2);
    ck_assert_uint_eq(st.replays, 4);
    ck_assert_uint_eq(st.input_copies, 6);
}
END_TEST

/* Views: the template aliases a bound storage (out is a view of x's storage,
 * bound through its storage id) and two bound tensors over one storage; the
 * same template with separate storages is another layout (instance). */
START_TEST(test_aliasing_layouts)
{
    enum { TA = 121, TB = 122, TSA = 123, TV = 124, TO = 125, TOS = 126 };
    rgpu_buf r = { 0 };
    rec_alias(&r, view_def(TV, TSA, N / 2, 3), TA);
    rec_binary(&r, RGPU_OP_ADD_TENSOR, vec_def(TO, TOS, N), TA, TB);
    rec_binary(&r, RGPU_OP_MUL_TENSOR, existing(TA), TA, TB);   /* writes a, and so b when they alias */
    static const uint64_t ids[] = { TA, TB, TSA, TV, TO, TOS };
    rgpu_hash h = template_of(0, ids, 6, &r);
    make_vec(1, 2, 0.5f, 0.25f);
    make_vec(3, 4, 0.25f, 1);
    /* tensor 5: a second tensor over storage 2 */
    rgpu_buf b = { 0 };
    rec_alias(&b, view_def(5, 2, N, 0), 1);
    run(&b);
    hold(5);
    for (int k = 0; k < 8; k++) {
        bool alias = k & 1;
        uint64_t bind[] = { 1, alias ? 5 : 3, alias ? 2 : 2, 60 + 3 * (uint64_t)k, 61 + 3 * (uint64_t)k, 62 + 3 * (uint64_t)k };
        set_vec(1, 0.5f);
        call_held(&h, bind, 6, 3, 2, "aliasing");
    }
    rgpu_graph_stats st = stats();
    ck_assert_uint_eq(st.instances, 2);
    ck_assert_uint_eq(st.captures, 2);
    ck_assert_uint_eq(st.replays, 4);
    rgpu_buf_free(&b);
}
END_TEST

/* (e): a template with random ops is graphed: each captured random exec
 * reads its (seed, offset) from the instance's pair buffer, which every
 * replay fills with the call's rebased pairs; every call draws what graphs
 * off draws (different numbers each call: the client's offset moves). */
START_TEST(test_random_graphed_with_pairs_per_call)
{
    enum { TU = 131, TUS = 132, TX2 = 133, TO = 134, TOS = 135, TV = 136, TVS = 137 };
    rgpu_buf r = { 0 };
    rec_empty(&r, vec_def(TU, TUS, N));
    rec_uniform(&r, TU, 1234, 43);
    rec_binary(&r, RGPU_OP_ADD_TENSOR, vec_def(TO, TOS, N), TU, TX2);
    rec_empty(&r, vec_def(TV, TVS, N));
    rec_uniform(&r, TV, 1234, 43 + N);   /* a second pair, later in the call's Philox range */
    rec_binary(&r, RGPU_OP_MUL_TENSOR, existing(TO), TO, TV);
    static const uint64_t ids[] = { TU, TUS, TX2, TO, TOS, TV, TVS };
    rgpu_hash h = template_of(40, ids, 7, &r);
    make_vec(1, 2, 1, 1);
    float prev = 0;
    for (int k = 0; k < 5; k++) {
        uint64_t t0 = 20 + 8 * (uint64_t)k;
        uint64_t bind[] = { t0, t0 + 1, 1, t0 + 2, t0 + 3, t0 + 4, t0 + 5 };
        rgpu_buf b = { 0 };
        rec_call(&b, &h, bind, 7, 99 + (uint64_t)k, 1000 + 4 * N * (uint64_t)k);   /* the client's Philox state moves */
        ck_assert_int_eq(run(&b), 0);
        rgpu_buf_free(&b);
        hold(bind[0]);
        hold(bind[3]);
        hold(bind[5]);
        same_everywhere("random");
        uint8_t *p;
        size_t n;
        ck_assert_int_eq(rgpu_session_read_tensor(g_s[1], bind[3], &p, &n), RGPU_OK);
        float v;
        memcpy(&v, p, 4);
        free(p);
        ck_assert_msg(k == 0 || v != prev, "call %d drew what call %d drew", k, k - 1);
        prev = v;
    }
    rgpu_graph_stats st = stats();
    ck_assert_uint_eq(st.calls, 5);
    ck_assert_uint_eq(st.captures, 1);
    ck_assert_uint_eq(st.replays, 3);
    ck_assert_uint_eq(st.refusals, 0);
}
END_TEST

/* (f): the backend refuses the capture (as CUDA does for a kernel that needs
 * the host): the template runs record by record from then on, right. */
START_TEST(test_capture_refused)
{
    rgpu_backend_cpu_graph_refuse(g_b[1], RGPU_OP_MUL_TENSOR, false);
    rgpu_hash h = affine_with_inputs();
    for (int k = 0; k < 5; k++) {
        call_affine(&h, 1, k, "refused");
    }
    rgpu_graph_stats st = stats();
    ck_assert_uint_eq(st.captures, 0);
    ck_assert_uint_eq(st.replays, 0);
    ck_assert_uint_eq(st.refusals, 1);   /* tried once, never again */
    ck_assert_ptr_nonnull(strstr(st.last_refusal, "test refusal"));
    ck_assert_uint_eq(st.bytes, 0);      /* its static buffers were given back */
}
END_TEST

/* A transient refusal (NOMEM) is tried again at the next call. */
START_TEST(test_capture_transient)
{
    rgpu_backend_cpu_graph_refuse(g_b[1], RGPU_OP_MUL_TENSOR, true);
    rgpu_hash h = affine_with_inputs();
    for (int k = 0; k < 6; k++) {
        if (k == 2) rgpu_backend_cpu_graph_refuse(g_b[1], -1, false);
        call_affine(&h, 1, k, "transient");
    }
    rgpu_graph_stats st = stats();
    ck_assert_uint_eq(st.refusals, 1);   /* call 1's capture; call 2 captured; 3, 4, 5 replayed */
    ck_assert_uint_eq(st.captures, 1);
    ck_assert_uint_eq(st.replays, 3);
}
END_TEST

/* A record that fails while the call is logged (w is shorter than x: a
 * shape error) keeps the template off graphs; results and reports agree. */
START_TEST(test_failing_record)
{
    rgpu_hash h = template_affine();
    make_vec(1, 2, 1, 0);
    rgpu_buf b = { 0 };
    rec_empty(&b, vec_def(3, 4, 5));
    run(&b);
    const float five[5] = { 1, 2, 3, 4, 5 };
    for (int k = 0; k < 2; k++) ck_assert_int_eq(rgpu_session_write_tensor(g_s[k], 3, (const uint8_t *)five, sizeof five), RGPU_OK);
    hold(3);
    for (int k = 0; k < 4; k++) {
        uint64_t bind[] = { 1, 3, 10 + 2 * (uint64_t)k, 11 + 2 * (uint64_t)k };
        rec_call(&b, &h, bind, 4, 0, 0);
        ck_assert_int_ne(run(&b), 0);
        hold(bind[2]);
        same_everywhere("failing record");
    }
    rgpu_graph_stats st = stats();
    ck_assert_uint_eq(st.replays, 0);
    ck_assert_uint_eq(st.refusals, 1);
    ck_assert_ptr_nonnull(strstr(st.last_refusal, "a record failed"));
    rgpu_buf_free(&b);
}
END_TEST

/* A template that frees a bound input after its last use (torch.compile's
 * backward handing over a saved activation): o1 = x * w, FREE x, o2 = o1 + w.
 * x is gone after every call, its bytes were free before o2 was allocated
 * (the peak is the bytes held before the call plus o1's), and the template
 * is still graphed. */
START_TEST(test_handed_input)
{
    enum { TX = 141, TW = 142, TO1 = 143, TO1S = 144, TO2 = 145, TO2S = 146 };
    rgpu_buf r = { 0 };
    rec_binary(&r, RGPU_OP_MUL_TENSOR, vec_def(TO1, TO1S, N), TX, TW);
    rec_free(&r, TX);
    rec_binary(&r, RGPU_OP_ADD_TENSOR, vec_def(TO2, TO2S, N), TO1, TW);
    static const uint64_t ids[] = { TX, TW, TO1, TO1S, TO2, TO2S };
    rgpu_hash h = template_of(0, ids, 6, &r);
    make_vec(3, 4, 0.5f, 1);
    for (int k = 0; k < 5; k++) {
        uint64_t x = 400 + 8 * (uint64_t)k;
        make_vec(x, x + 1, (float)k + 0.5f, -1);
        uint64_t before, peak;
        rgpu_session_memory(g_s[0], &before, &peak);
        uint64_t bind[] = { x, 3, x + 2, x + 3, x + 4, x + 5 };
        call(&h, bind, 6);
        unhold(x);
        hold(x + 2);
        hold(x + 4);
        same_everywhere("handed input");
        for (int m = 0; m < 2; m++) {
            rgpu_tensor_info ti;
            ck_assert_int_eq(rgpu_session_tensor_info(g_s[m], x, &ti), RGPU_ERR_UNKNOWN_TENSOR);
        }
        uint64_t after;
        rgpu_session_memory(g_s[0], &after, &peak);
        ck_assert_uint_eq(after, before + N * sizeof(float));   /* + o1 + o2 - x */
        ck_assert_uint_eq(peak, before + N * sizeof(float));    /* x went before o2 came */
    }
    rgpu_graph_stats st = stats();
    ck_assert_uint_eq(st.refusals, 0);
    ck_assert_uint_eq(st.captures + st.replays, 4);   /* an input that moved is captured again */
    ck_assert_uint_ge(st.replays, 2);
}
END_TEST

/* Graphs off, or a backend without hooks: nothing is counted or held. */
START_TEST(test_off_and_no_hooks)
{
    rgpu_backend *nb = rgpu_backend_null_create();
    rgpu_session_limits lim = { .graphs = true };
    rgpu_session *s = rgpu_session_new(nb, &lim);
    rgpu_graph_stats st;
    rgpu_session_graph_stats(s, &st);
    ck_assert_uint_eq(st.calls, 0);
    rgpu_session_free(s);
    nb->destroy(nb);
    rgpu_hash h = template_affine();
    make_vec(1, 2, 1, 0);
    make_vec(3, 4, 1, 0);
    for (int k = 0; k < 3; k++) {
        uint64_t bind[] = { 1, 3, 10 + 2 * (uint64_t)k, 11 + 2 * (uint64_t)k };
        call(&h, bind, 4);
    }
    rgpu_session_graph_stats(g_s[0], &st);
    ck_assert_uint_eq(st.calls, 0);
    ck_assert_uint_eq(st.instances, 0);
    ck_assert_uint_eq(stats().replays, 1);
}
END_TEST

/* Outputs take the graph's static buffers themselves when no earlier output
 * lives there (no copy); one that still lives there when the graph replays
 * is moved out first (one copy), keeping its values; an output living in a
 * buffer when its instance is released (an input moved: captured again)
 * keeps the buffer as its own. Values bitwise graphs off throughout. */
START_TEST(test_outputs_take_static_buffers)
{
    rgpu_hash h = affine_with_inputs();
    for (int k = 0; k < 6; k++) {   /* each output freed before the next call */
        set_vec(1, (float)k);
        call_affine(&h, 1, k, "outputs freed");
        drop(10 + 2 * (uint64_t)k);
    }
    rgpu_graph_stats st = stats();
    ck_assert_uint_eq(st.replays, 4);
    ck_assert_uint_eq(st.outputs_lent, 4);
    ck_assert_uint_eq(st.output_copies, 0);
    for (int k = 6; k < 9; k++) {   /* each output still held at the next replay */
        set_vec(1, (float)k);
        call_affine(&h, 1, k, "outputs held");
    }
    st = stats();
    ck_assert_uint_eq(st.replays, 7);
    ck_assert_uint_eq(st.outputs_lent, 7);
    ck_assert_uint_eq(st.output_copies, 2);   /* outputs 6 and 7 moved out before the replays of 7 and 8 */
    /* x moves to a new storage: captured again, the instance's buffers released
     * while output 8 lives in one */
    make_vec(5, 6, 2.0f, 0.5f);
    call_affine(&h, 5, 9, "input moved");
    call_affine(&h, 5, 10, "input moved, replayed");
    same_everywhere("after the recapture");
    drop(10 + 2 * 8);   /* the orphaned buffer goes with it */
    drop(10 + 2 * 6);
    same_everywhere("outputs dropped");
}
END_TEST

/* Two templates chained, as a compiled forward and backward: B reads A's
 * output. A's outputs of the first two steps are held (B's capture sees its
 * input move: staged); from then on A's output lives in A's static buffer
 * and is freed after B, so B finds its input at one pointer: after two such
 * replays B is captured once more with that input read in place, and later
 * steps copy no input. Values bitwise graphs off. */
START_TEST(test_staged_input_settles)
{
    rgpu_hash ha = template_affine();
    enum { TY = 141, TYS = 142 };
    rgpu_buf r = { 0 };
    rec_binary(&r, RGPU_OP_MUL_TENSOR, vec_def(TY, TYS, N), TX, TW);
    static const uint64_t ids[] = { TX, TW, TY, TYS };
    rgpu_hash hb = template_of(0, ids, 4, &r);
    make_vec(1, 2, 1.5f, -2);
    make_vec(3, 4, 0.5f, 1);
    uint64_t copies_at[8];
    for (int k = 0; k < 8; k++) {
        set_vec(1, (float)k);
        uint64_t a_out = 10 + 2 * (uint64_t)k, b_out = 100 + 2 * (uint64_t)k;
        uint64_t ba[] = { 1, 3, a_out, a_out + 1 }, bb[] = { a_out, 3, b_out, b_out + 1 };
        call_held(&ha, ba, 4, 2, 1, "chained: A");
        call_held(&hb, bb, 4, 2, 1, "chained: B");
        if (k >= 2) drop(a_out);
        drop(b_out);
        copies_at[k] = stats().input_copies;
    }
    rgpu_graph_stats st = stats();
    ck_assert_uint_eq(st.captures, 3);   /* A once; B at its second call, and again once settled */
    ck_assert_uint_eq(copies_at[7], copies_at[5]);   /* no input copied in the last steps */
    ck_assert_uint_gt(copies_at[5], 0);
    ck_assert_uint_eq(st.replays, 6 + 5);   /* A from its third call; B from its third, but the settling one */
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("graph");
    TCase *tc = add_tcase(s, "core", 0, setup, teardown);
    ADD_TESTS(tc, test_same_inputs, test_new_inputs, test_input_moves, test_inplace_update,
                  test_aliasing_layouts, test_random_graphed_with_pairs_per_call, test_outputs_take_static_buffers,
                  test_staged_input_settles,
                  test_capture_refused,
                  test_capture_transient, test_failing_record, test_handed_input, test_off_and_no_hooks);
    return s;
}


int main(void) {
    return run_suite(suite());
}
