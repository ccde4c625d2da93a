/* test_tools.c — rgpu-replay, rgpu-diff and rgpu-trace on synthetic traces.
 *
 * Builds .rgt files with the format API (no torch needed): the results table
 * is filled by running the same chunks on an in-process cpu session, exactly
 * what a live run would have received. Then runs the tool binaries — from
 * $RGPU_BIN, else the folder of $RGPU_SERVER_BIN, so `make test-asan` runs
 * the sanitizer builds — on the good trace and on truncated, garbage,
 * version-changed, hash-changed and internally inconsistent copies: each bad
 * one must exit 2 with one line on stderr, never a signal; a trace whose blob
 * inflates past the memory limits (the server's, rgpu-server's options) is
 * refused before it is inflated, within bounded memory. */
#include <check.h>
#include <libgen.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <zstd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <time.h>
#include <unistd.h>

#include "session.h"
#include "check_util.h"

static char g_dir[64], g_bin[1024];

/* ---------------------------------------------------------------------------
 * Building traces */
typedef struct builder {
    rgpu_rgt *t;
    rgpu_session *s;          /* computes the results a live run would see */
    rgpu_buf chunk;
    uint64_t first, n_in_chunk, next_op, next_id;
    uint64_t wait_ops[4096];
    size_t n_wait;
    uint64_t first_mul;       /* index of the first mul.Tensor */
} builder;

static uint64_t new_id(builder *b) { return ++b->next_id; }

static void flush_chunk(builder *b) {
    if (!b->n_in_chunk) return;
    rgpu_hash h = rgpu_hash_bytes(b->chunk.p, b->chunk.len);
    rgpu_buf frame = { 0 };
    ck_assert_int_eq(rgpu_frame_compress(b->chunk.p, b->chunk.len, 1, &frame), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_put_chunk(b->t, &h, b->first, (uint32_t)b->n_in_chunk, b->chunk.len, frame.p, frame.len), RGPU_OK);
    ck_assert_int_eq(rgpu_session_run_chunk(b->s, b->chunk.p, b->chunk.len, b->first, (uint32_t)b->n_in_chunk), RGPU_OK);
    for (size_t i = 0; i < b->n_wait; i++) {
        int st;
        uint64_t eo;
        char msg[256];
        uint8_t *data;
        size_t n;
        ck_assert_int_eq(rgpu_session_take_result(b->s, b->wait_ops[i], &st, &eo, msg, sizeof msg, &data, &n), RGPU_OK);
        ck_assert_msg(st == 0, "synthetic trace op failed: %s", msg);
        ck_assert_int_eq(rgpu_rgt_put_result(b->t, b->wait_ops[i], st, data, n), RGPU_OK);
        free(data);
    }
    b->n_wait = 0;
    rgpu_buf_free(&frame);
    b->chunk.len = 0;
    b->first = b->next_op;
    b->n_in_chunk = 0;
}

static uint64_t add(builder *b, const rgpu_record *r) {
    ck_assert_int_eq(rgpu_record_encode(&b->chunk, r), RGPU_OK);
    if (rgpu_op_table[r->op].flags & RGPU_OPF_WAIT) b->wait_ops[b->n_wait++] = b->next_op;
    b->n_in_chunk++;
    return b->next_op++;
}

static rgpu_tdef vec(builder *b, int64_t n) {
    rgpu_tdef d = { .tid = new_id(b), .flags = RGPU_TDEF_NEW_STORAGE, .sid = new_id(b), .dtype = RGPU_F32,
                    .ndim = 1, .nbytes = (uint64_t)n * 4 };
    d.sizes[0] = n;
    d.strides[0] = 1;
    return d;
}

static uint64_t upload(builder *b, int64_t n, float base) {
    float *v = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) v[i] = base + 0.25f * (float)i;
    rgpu_hash h = rgpu_hash_bytes(v, (size_t)n * 4);
    rgpu_buf frame = { 0 };
    ck_assert_int_eq(rgpu_frame_compress(v, (size_t)n * 4, 1, &frame), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_put_blob(b->t, &h, (uint64_t)n * 4, frame.p, frame.len), RGPU_OK);
    rgpu_buf_free(&frame);
    ck_assert_int_eq(rgpu_session_put_blob(b->s, &h, (uint8_t *)v, (size_t)n * 4), RGPU_OK);   /* owns v now */
    rgpu_record r = { .op = RGPU_OP_UPLOAD, .n_out = 1, .n_args = 2 };
    r.out[0] = vec(b, n);
    r.args[0].kind = RGPU_ARG_HASH; r.args[0].v.h = h;
    r.args[1].kind = RGPU_ARG_INT; r.args[1].v.i = n * 4;
    add(b, &r);
    return r.out[0].tid;
}

static uint64_t binary(builder *b, int op, uint64_t x, uint64_t y, int64_t n) {
    rgpu_record r = { .op = (uint16_t)op, .n_out = 1, .n_in = 2 };
    r.out[0] = vec(b, n);
    r.in[0] = x; r.in[1] = y;
    if (op == RGPU_OP_ADD_TENSOR) { r.n_args = 1; r.args[0].kind = RGPU_ARG_INT; r.args[0].v.i = 1; }
    uint64_t idx = add(b, &r);
    if (op == RGPU_OP_MUL_TENSOR && !b->first_mul) b->first_mul = idx;
    return r.out[0].tid;
}

static void wait_op(builder *b, int op, uint64_t x) {
    rgpu_record r = { .op = (uint16_t)op, .n_in = 1 };
    r.in[0] = x;
    add(b, &r);
}

static uint64_t sum_all(builder *b, uint64_t x) {
    static const uint8_t none[1];
    rgpu_record r = { .op = RGPU_OP_SUM, .n_out = 1, .n_in = 1, .n_args = 2 };
    r.out[0] = vec(b, 1);
    r.out[0].ndim = 0;
    r.in[0] = x;
    r.args[0].kind = RGPU_ARG_INTS; r.args[0].v.ints.p = none; r.args[0].v.ints.n = 0;
    r.args[1].kind = RGPU_ARG_BOOL; r.args[1].v.i = 0;
    add(b, &r);
    return r.out[0].tid;
}

static void free_tensor(builder *b, uint64_t tid) {
    uint8_t le[8];
    rgpu_st64(le, tid);
    rgpu_record r = { .op = RGPU_OP_FREE, .n_args = 1 };
    r.args[0].kind = RGPU_ARG_INTS; r.args[0].v.ints.p = le; r.args[0].v.ints.n = 1;
    add(b, &r);
}

/* A trace of about 9*iters ops, chunk_ops records per chunk, waits every 50
 * iterations; returns the index of the first mul.Tensor. */
static uint64_t make_trace(const char *path, int iters, int chunk_ops) {
    builder b = { 0 };
    rgpu_backend *cpu = rgpu_backend_cpu_create();
    b.s = rgpu_session_new(cpu, NULL);
    ck_assert_int_eq(rgpu_rgt_create(path, "test_tools", &b.t), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_set_meta(b.t, "backend", "cpu"), RGPU_OK);
    const int64_t n = 16;
    uint64_t x = upload(&b, n, 1.0f), w = upload(&b, n, 0.5f);
    for (int i = 0; i < iters; i++) {
        uint64_t y = binary(&b, RGPU_OP_MUL_TENSOR, x, w, n);
        uint64_t z = binary(&b, RGPU_OP_ADD_TENSOR, y, x, n);
        uint64_t q = binary(&b, RGPU_OP_DIV_TENSOR, z, w, n);
        free_tensor(&b, y);
        free_tensor(&b, z);
        free_tensor(&b, x);
        x = q;
        if (i % 50 == 0) {
            uint64_t s = sum_all(&b, x);
            wait_op(&b, RGPU_OP_LOCAL_SCALAR_DENSE, s);
            free_tensor(&b, s);
        }
        if (b.n_in_chunk >= (uint64_t)chunk_ops || b.n_wait) flush_chunk(&b);
    }
    wait_op(&b, RGPU_OP_DOWNLOAD, x);
    flush_chunk(&b);
    rgpu_rgt_close(b.t);
    rgpu_session_free(b.s);
    cpu->destroy(cpu);
    rgpu_buf_free(&b.chunk);
    return b.first_mul;
}

/* ---------------------------------------------------------------------------
 * Running the tools */
typedef struct run_out { int code; char out[65536], err[4096]; int err_lines; long maxrss_kb; } run_out;

static rlim_t g_child_as;   /* RLIMIT_AS of the next run()'s child; 0: unchanged */

static void slurp(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = 0;
    if (f) fclose(f);
}

/* Run tool with args (NULL-terminated); fault: RGPU_CPU_FAULT value or NULL. */
static void run(run_out *o, const char *fault, const char *tool, ...) {
    char *argv[16];
    char exe[1200];
    snprintf(exe, sizeof exe, "%s/%s", g_bin, tool);
    argv[0] = exe;
    int n = 1;
    va_list ap;
    va_start(ap, tool);
    const char *a;
    while ((a = va_arg(ap, const char *)) && n < 15) argv[n++] = (char *)a;
    va_end(ap);
    argv[n] = NULL;
    char outp[128], errp[128];
    snprintf(outp, sizeof outp, "%s/stdout", g_dir);
    snprintf(errp, sizeof errp, "%s/stderr", g_dir);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(outp, "w", stdout) || !freopen(errp, "w", stderr)) _exit(126);
        if (fault) setenv("RGPU_CPU_FAULT", fault, 1); else unsetenv("RGPU_CPU_FAULT");
        struct rlimit rl = { g_child_as, g_child_as };
        if (g_child_as && setrlimit(RLIMIT_AS, &rl) != 0) _exit(126);
        execv(exe, argv);
        _exit(127);
    }
    int st;
    struct rusage ru;
    ck_assert(wait4(pid, &st, 0, &ru) == pid);
    o->maxrss_kb = ru.ru_maxrss;
    slurp(outp, o->out, sizeof o->out);
    slurp(errp, o->err, sizeof o->err);
    ck_assert_msg(WIFEXITED(st), "%s %s died of signal %d; stderr: %s", tool, argv[1], WTERMSIG(st), o->err);
    o->code = WEXITSTATUS(st);
    ck_assert_msg(o->code != 127, "cannot run %s", exe);
    ck_assert_msg(!strstr(o->err, "runtime error") && !strstr(o->err, "Sanitizer"), "%s: %s", tool, o->err);
    o->err_lines = 0;
    for (const char *p = o->err; *p; p++) o->err_lines += *p == '\n';
}

static char g_good[128];
static uint64_t g_first_mul;

static void setup(void) {
    const char *bin = getenv("RGPU_BIN");
    if (bin) snprintf(g_bin, sizeof g_bin, "%s", bin);
    else {
        const char *srv = getenv("RGPU_SERVER_BIN");
        ck_assert_msg(srv != NULL, "set RGPU_BIN or RGPU_SERVER_BIN");
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s", srv);
        snprintf(g_bin, sizeof g_bin, "%s", dirname(tmp));
    }
    strcpy(g_dir, "/tmp/rgpu-tools-XXXXXX");
    ck_assert(mkdtemp(g_dir) != NULL);
    snprintf(g_good, sizeof g_good, "%s/good.rgt", g_dir);
    g_first_mul = make_trace(g_good, 120, 40);
}

static void teardown(void) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
}

/* A copy of the good trace with one SQL statement applied. */
static const char *edited(const char *name, const char *sql) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s.rgt", g_dir, name);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", g_good, path);
    ck_assert(system(cmd) == 0);
    sqlite3 *db;
    ck_assert(sqlite3_open(path, &db) == SQLITE_OK);
    char *err = NULL;
    ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, &err) == SQLITE_OK, "%s: %s", sql, err ? err : "");
    sqlite3_close(db);
    return path;
}

static const char *raw_file(const char *name, const void *p, size_t n) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s.rgt", g_dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert(f != NULL);
    if (n) ck_assert(fwrite(p, 1, n, f) == n);
    fclose(f);
    return path;
}

/* The tools must refuse path with exit 2 and exactly one stderr line (all
 * three; rgpu-trace reads no blobs, so not it when only_exec). */
static void expect_bad_(const char *path, const char *needle, bool only_exec) {
    run_out o;
    const char *tools[3][3] = { { "rgpu-replay", "--verify", "--backend" }, { "rgpu-diff", "--a", "cpu" }, { "rgpu-trace", "dump", NULL } };
    for (int i = 0; i < (only_exec ? 2 : 3); i++) {
        if (i == 0) run(&o, NULL, "rgpu-replay", path, "--verify", "--backend", "cpu", NULL);
        else if (i == 1) run(&o, NULL, "rgpu-diff", path, "--a", "cpu", "--b", "cpu", NULL);
        else run(&o, NULL, "rgpu-trace", "dump", path, NULL);
        ck_assert_msg(o.code == 2, "%s on %s: exit %d, stderr %s", tools[i][0], path, o.code, o.err);
        ck_assert_msg(o.err_lines == 1, "%s on %s: %d stderr lines: %s", tools[i][0], path, o.err_lines, o.err);
        if (needle) ck_assert_msg(strstr(o.err, needle), "%s: '%s' not in: %s", tools[i][0], needle, o.err);
    }
}
static void expect_bad(const char *path, const char *needle) { expect_bad_(path, needle, false); }

/* ---------------------------------------------------------------------------
 * Tests */
START_TEST(replay_verifies_good_trace) {
    run_out o;
    run(&o, NULL, "rgpu-replay", g_good, "--verify", "--backend", "cpu", NULL);
    ck_assert_msg(o.code == 0, "exit %d: %s %s", o.code, o.out, o.err);
    ck_assert_msg(strstr(o.out, "rgpu-replay: ok:") && strstr(o.out, "ops/s") && strstr(o.out, "results verified (bitwise)"), "%s", o.out);
    run(&o, NULL, "rgpu-replay", g_good, "--verify", "--backend", "null", "--quiet", NULL);
    ck_assert_int_eq(o.code, 1);                  /* null answers zeros */
    ck_assert_msg(strstr(o.out, "mismatch at op"), "%s", o.out);
}
END_TEST

START_TEST(replay_twice_is_bitwise_equal) {
    char d1[160], d2[160];
    snprintf(d1, sizeof d1, "%s/r1", g_dir);
    snprintf(d2, sizeof d2, "%s/r2", g_dir);
    run_out o;
    run(&o, NULL, "rgpu-replay", g_good, "--backend", "cpu", "--dump-results", d1, "--quiet", NULL);
    ck_assert_int_eq(o.code, 0);
    run(&o, NULL, "rgpu-replay", g_good, "--backend", "cpu", "--dump-results", d2, "--quiet", NULL);
    ck_assert_int_eq(o.code, 0);
    static char a[65536], b[65536];
    slurp(d1, a, sizeof a);
    slurp(d2, b, sizeof b);
    ck_assert(strlen(a) > 100);
    ck_assert_str_eq(a, b);
}
END_TEST

START_TEST(replay_names_corrupted_result) {
    /* the last result is the final DOWNLOAD: flip a byte of its data */
    const char *p = edited("badres", "UPDATE results SET data = X'00000000' || substr(data, 5) "
                                     "WHERE op_index = (SELECT max(op_index) FROM results)");
    sqlite3 *db;
    sqlite3_stmt *st;
    ck_assert(sqlite3_open(g_good, &db) == SQLITE_OK);
    ck_assert(sqlite3_prepare_v2(db, "SELECT max(op_index) FROM results", -1, &st, NULL) == SQLITE_OK);
    ck_assert(sqlite3_step(st) == SQLITE_ROW);
    long long last = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    run_out o;
    run(&o, NULL, "rgpu-replay", p, "--verify", "--backend", "cpu", NULL);
    ck_assert_int_eq(o.code, 1);
    char want[96];
    snprintf(want, sizeof want, "mismatch at op %lld (rgpu::download)", last);
    ck_assert_msg(strstr(o.out, want), "'%s' not in %s", want, o.out);
    /* outside [from, to) it is not reported */
    char to[32];
    snprintf(to, sizeof to, "%lld", last);
    run(&o, NULL, "rgpu-replay", p, "--verify", "--backend", "cpu", "--to", to, NULL);
    ck_assert_int_eq(o.code, 0);
}
END_TEST

START_TEST(diff_finds_the_faulty_op) {
    run_out o;
    run(&o, NULL, "rgpu-diff", g_good, "--a", "cpu", "--b", "cpu", NULL);
    ck_assert_msg(o.code == 0, "%s %s", o.out, o.err);
    run(&o, "mul.Tensor", "rgpu-diff", g_good, "--a", "cpu", "--b", "cpu", "--resync", NULL);
    ck_assert_int_eq(o.code, 1);
    char want[96];
    snprintf(want, sizeof want, "first difference: op %llu (mul.Tensor)", (unsigned long long)g_first_mul);
    ck_assert_msg(strstr(o.out, want), "'%s' not in %s", want, o.out);
    ck_assert_msg(!strstr(o.out, "add.Tensor") && !strstr(o.out, "div.Tensor"), "resync leaks: %s", o.out);
    run(&o, "mul.Tensor", "rgpu-diff", g_good, "--a", "cpu", "--b", "cpu", NULL);
    ck_assert_int_eq(o.code, 1);
    ck_assert_msg(strstr(o.out, want) && strstr(o.out, "div.Tensor"), "no downstream differences without --resync: %s", o.out);
    run(&o, "mul.Tensor", "rgpu-diff", g_good, "--a", "cpu", "--b", "cpu", "--op", "add.Tensor", NULL);
    ck_assert_int_eq(o.code, 1);                  /* add.Tensor reads the faulty mul output */
    ck_assert_msg(strstr(o.out, "(add.Tensor)"), "%s", o.out);
    run(&o, "no.such_op", "rgpu-diff", g_good, "--a", "cpu", "--b", "cpu", NULL);
    ck_assert_int_eq(o.code, 2);
}
END_TEST

START_TEST(trace_info_ops_dump) {
    run_out o;
    run(&o, NULL, "rgpu-trace", "info", g_good, NULL);
    ck_assert_int_eq(o.code, 0);
    /* 2 uploads; per iteration mul, add, div, 3 frees; every 50th: sum, item, free; a download */
    int iters = 120, waits = 3;
    int ops = 2 + iters * 6 + waits * 3 + 1;
    char want[64];
    snprintf(want, sizeof want, "ops: %d\n", ops);
    ck_assert_msg(strstr(o.out, want), "'%s' not in %s", want, o.out);
    ck_assert_msg(strstr(o.out, "meta.creator: test_tools") && strstr(o.out, "meta.backend: cpu"), "%s", o.out);
    snprintf(want, sizeof want, "results: %d (0 failed)", waits + 1);
    ck_assert_msg(strstr(o.out, want), "'%s' not in %s", want, o.out);
    ck_assert_msg(strstr(o.out, "blobs: 2,"), "%s", o.out);
    run(&o, NULL, "rgpu-trace", "ops", g_good, NULL);
    ck_assert_int_eq(o.code, 0);
    snprintf(want, sizeof want, "%10d ", iters * 3 + waits);
    ck_assert_msg(strstr(o.out, want) && strstr(o.out, "rgpu::free"), "%s", o.out);
    ck_assert_msg(strstr(o.out, "       120  ") != NULL, "%s", o.out);
    run(&o, NULL, "rgpu-trace", "dump", g_good, NULL);
    ck_assert_int_eq(o.code, 0);
    int lines = 0;
    for (const char *p = o.out; *p; p++) lines += *p == '\n';
    ck_assert_int_eq(lines, ops);
    snprintf(want, sizeof want, "\n%llu mul.Tensor out=[t", (unsigned long long)g_first_mul);
    ck_assert_msg(strstr(o.out, want), "'%s' not in dump", want);
}
END_TEST

START_TEST(bad_traces_exit_2) {
    expect_bad(raw_file("empty", "", 0), "not an rgpu trace");
    static uint8_t junk[8192];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 2654435761u >> 13);
    expect_bad(raw_file("garbage", junk, sizeof junk), "not an rgpu trace");
    char missing[160];
    snprintf(missing, sizeof missing, "%s/no-such.rgt", g_dir);
    expect_bad(missing, NULL);
    /* truncated at many lengths */
    FILE *f = fopen(g_good, "rb");
    ck_assert(f != NULL);
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ck_assert(n > 4096 && n < sizeof buf);
    for (size_t cut = 0; cut < n; cut += n / 7 + 1) expect_bad(raw_file("trunc", buf, cut), NULL);
    expect_bad(raw_file("trunc", buf, n - 1), NULL);
    expect_bad(edited("version", "UPDATE meta SET value='2' WHERE key='format_version'"), "BAD_VERSION");
    expect_bad(edited("optable", "UPDATE meta SET value='00000000000000000000000000000000' WHERE key='op_table_hash'"), "OP_TABLE");
    expect_bad(edited("nomagic", "DELETE FROM meta WHERE key='magic'"), "BAD_MAGIC");
    expect_bad(edited("nochunk", "DELETE FROM chunks WHERE hash=(SELECT hash FROM stream WHERE seq=1)"), "BAD_TRACE");
    expect_bad(edited("gap", "DELETE FROM stream WHERE seq=1"), NULL);
    expect_bad(edited("order", "UPDATE stream SET first_op=first_op+1 WHERE seq=2"), "expected");
    expect_bad(edited("count", "UPDATE stream SET op_count=op_count+1 WHERE seq=0"), NULL);
    expect_bad(edited("frame", "UPDATE chunks SET frame = substr(frame,1,40) || zeroblob(4) || substr(frame,45)"), NULL);
    expect_bad(edited("frametext", "UPDATE chunks SET frame = 'not a frame'"), NULL);
    expect_bad(edited("hash", "UPDATE stream SET hash = (SELECT hash FROM stream WHERE seq=0) WHERE seq=1"), NULL);
    expect_bad_(edited("noblob", "DELETE FROM blobs"), "MISSING_BLOB", true);
    expect_bad_(edited("blobframe", "UPDATE blobs SET frame = substr(frame,1,30)"), NULL, true);
    expect_bad(edited("nostream", "DROP TABLE stream"), NULL);
    /* a chunk whose frame and hash are right but whose records are not */
    {
        static const uint8_t raw[] = { 0xff, 0x7f, 1, 0, 0, 0 };   /* op 32767 */
        rgpu_hash h = rgpu_hash_bytes(raw, sizeof raw);
        rgpu_buf fr = { 0 };
        ck_assert_int_eq(rgpu_frame_compress(raw, sizeof raw, 1, &fr), RGPU_OK);
        char path[160];
        snprintf(path, sizeof path, "%s/badrec.rgt", g_dir);
        rgpu_rgt *t;
        ck_assert_int_eq(rgpu_rgt_create(path, "test_tools", &t), RGPU_OK);
        ck_assert_int_eq(rgpu_rgt_put_chunk(t, &h, 0, 1, sizeof raw, fr.p, fr.len), RGPU_OK);
        rgpu_rgt_close(t);
        rgpu_buf_free(&fr);
        expect_bad(path, "BAD_OP");
    }
}
END_TEST

START_TEST(usage_errors) {
    run_out o;
    const char *tools[] = { "rgpu-replay", "rgpu-diff", "rgpu-trace" };
    for (int i = 0; i < 3; i++) {
        run(&o, NULL, tools[i], "--help", NULL);
        ck_assert_int_eq(o.code, 0);
        ck_assert_msg(strstr(o.out, "usage:") && strstr(o.out, "Exit status"), "%s", o.out);
        run(&o, NULL, tools[i], NULL);
        ck_assert_int_eq(o.code, 2);
        ck_assert_int_eq(o.err_lines, 1);
        run(&o, NULL, tools[i], "--bogus", g_good, NULL);
        ck_assert_int_eq(o.code, 2);
        ck_assert_int_eq(o.err_lines, 1);
    }
    run(&o, NULL, "rgpu-diff", "--help", NULL);
    ck_assert_msg(strstr(o.out, "RGPU_CPU_FAULT") && strstr(o.out, "test-only"), "%s", o.out);
    run(&o, NULL, "rgpu-replay", g_good, "--backend", "nosuch", NULL);
    ck_assert_int_eq(o.code, 2);
    ck_assert_int_eq(o.err_lines, 1);
    run(&o, NULL, "rgpu-replay", g_good, "--from", "10", "--to", "5", NULL);
    ck_assert_int_eq(o.code, 2);
    run(&o, NULL, "rgpu-trace", "frobnicate", g_good, NULL);
    ck_assert_int_eq(o.code, 2);
    run(&o, NULL, "rgpu-diff", g_good, "--a", "cpu", "--b", "cpu", "--op", "nosuch", NULL);
    ck_assert_int_eq(o.code, 2);
    run(&o, NULL, "rgpu-diff", g_good, "--a", "cpu", "--b", "cpu", "--rtol", "abc", NULL);
    ck_assert_int_eq(o.code, 2);
}
END_TEST

/* A trace of one UPLOAD of a blob of n zero bytes into a float32 vector of
 * upload_n bytes (n: an honest trace), its sum and the sum's value (0.0f, the
 * results row): the blob is a frame of a few hundred KB declaring n bytes,
 * built piece by piece so that this process never holds n. */
static void make_zero_blob_trace(const char *path, uint64_t n, uint64_t upload_n) {
    static const uint8_t zeros[1 << 20];
    XXH3_state_t *h64 = XXH3_createState(), *h128 = XXH3_createState();
    XXH3_64bits_reset(h64);
    XXH3_128bits_reset(h128);
    ZSTD_CCtx *z = ZSTD_createCCtx();
    ck_assert_int_eq(ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(z, n)), 0);
    rgpu_buf frame = { 0 };
    ck_assert_int_eq(rgpu_buf_reserve(&frame, RGPU_FRAME_HEADER + (1 << 20)), RGPU_OK);
    frame.len = RGPU_FRAME_HEADER;
    for (uint64_t done = 0;;) {
        size_t piece = n - done < sizeof zeros ? (size_t)(n - done) : sizeof zeros;
        bool last = done + piece == n;
        XXH3_64bits_update(h64, zeros, piece);
        XXH3_128bits_update(h128, zeros, piece);
        ZSTD_inBuffer in = { zeros, piece, 0 };
        size_t left;
        do {
            ck_assert_int_eq(rgpu_buf_reserve(&frame, 1 << 16), RGPU_OK);
            ZSTD_outBuffer out = { frame.p + frame.len, frame.cap - frame.len, 0 };
            left = ZSTD_compressStream2(z, &out, &in, last ? ZSTD_e_end : ZSTD_e_continue);
            ck_assert_int_eq(ZSTD_isError(left), 0);
            frame.len += out.pos;
        } while (last ? left != 0 : in.pos < in.size);
        done += piece;
        if (last) break;
    }
    rgpu_st32(frame.p, RGPU_FRAME_MAGIC);
    rgpu_st32(frame.p + 4, 0);
    rgpu_st64(frame.p + 8, n);
    rgpu_st64(frame.p + 16, XXH3_64bits_digest(h64));
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(h128));
    rgpu_hash h;                       /* rgpu_hash_bytes's: the canonical (big-endian) XXH3-128 */
    memcpy(h.b, c.digest, 16);
    ZSTD_freeCCtx(z);
    XXH3_freeState(h64);
    XXH3_freeState(h128);

    builder b = { 0 };
    ck_assert_int_eq(rgpu_rgt_create(path, "test_tools", &b.t), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_set_meta(b.t, "backend", "cpu"), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_put_blob(b.t, &h, n, frame.p, frame.len), RGPU_OK);
    rgpu_buf_free(&frame);
    rgpu_record r = { .op = RGPU_OP_UPLOAD, .n_out = 1, .n_args = 2 };
    r.out[0] = vec(&b, (int64_t)(upload_n / 4));
    r.args[0].kind = RGPU_ARG_HASH; r.args[0].v.h = h;
    r.args[1].kind = RGPU_ARG_INT; r.args[1].v.i = (int64_t)upload_n;
    add(&b, &r);
    uint64_t sum = sum_all(&b, r.out[0].tid);
    wait_op(&b, RGPU_OP_LOCAL_SCALAR_DENSE, sum);
    rgpu_hash ch = rgpu_hash_bytes(b.chunk.p, b.chunk.len);
    rgpu_buf cf = { 0 };
    ck_assert_int_eq(rgpu_frame_compress(b.chunk.p, b.chunk.len, 1, &cf), RGPU_OK);
    ck_assert_int_eq(rgpu_rgt_put_chunk(b.t, &ch, 0, (uint32_t)b.n_in_chunk, b.chunk.len, cf.p, cf.len), RGPU_OK);
    const float zero = 0.0f;
    ck_assert_int_eq(rgpu_rgt_put_result(b.t, b.wait_ops[0], 0, &zero, sizeof zero), RGPU_OK);
    rgpu_buf_free(&cf);
    rgpu_buf_free(&b.chunk);
    rgpu_rgt_close(b.t);
}

/* rgpu-replay and rgpu-diff take rgpu-server's memory limits: a blob over
 * them stops the run with exit 2 naming the limit, before it is inflated
 * (the tool's peak RSS stays far below the blob); the defaults come from the
 * machine (here an RLIMIT_AS of 3 GiB: --max-memory 2.25 GiB, sessions 1.69
 * GiB, under the 2 GiB blob); raising the limit replays the trace. */
START_TEST(blob_over_the_limits_is_refused_in_bounded_memory) {
    char bomb[160], small[160], liar[160];
    snprintf(bomb, sizeof bomb, "%s/zeros-2g.rgt", g_dir);
    snprintf(small, sizeof small, "%s/zeros-96m.rgt", g_dir);
    snprintf(liar, sizeof liar, "%s/zeros-2g-into-4k.rgt", g_dir);
    make_zero_blob_trace(bomb, 2ull << 30, 2ull << 30);
    make_zero_blob_trace(small, 96ull << 20, 96ull << 20);
    make_zero_blob_trace(liar, 2ull << 30, 4096);
    struct stat st;
    ck_assert(stat(bomb, &st) == 0 && st.st_size < (1 << 20));   /* 2 GiB of zeros in a small file */
    const long bound_kb = 200 << 10;   /* the tool itself, a few MiB of frame: nowhere near the blob */
    run_out o;

    run(&o, NULL, "rgpu-replay", bomb, "--backend", "cpu", "--max-session-bytes", "64M", NULL);
    ck_assert_msg(o.code == 2 && o.err_lines == 1, "exit %d: %s%s", o.code, o.out, o.err);
    ck_assert_msg(strstr(o.err, "op 0 (rgpu::upload)") && strstr(o.err, "--max-session-bytes") &&
                  strstr(o.err, "67108864"), "%s", o.err);
    ck_assert_msg(o.maxrss_kb < bound_kb, "rgpu-replay peaked at %ld KiB", o.maxrss_kb);

    run(&o, NULL, "rgpu-diff", bomb, "--a", "cpu", "--b", "cpu", "--max-memory", "96M", NULL);
    ck_assert_msg(o.code == 2 && o.err_lines == 1, "exit %d: %s%s", o.code, o.out, o.err);
    ck_assert_msg(strstr(o.err, "op 0 (rgpu::upload)") && strstr(o.err, "--max-session-bytes") &&
                  strstr(o.err, "75497472"), "%s", o.err);   /* 3/4 of 96M */
    ck_assert_msg(o.maxrss_kb < bound_kb, "rgpu-diff peaked at %ld KiB", o.maxrss_kb);

    g_child_as = (rlim_t)3 << 30;      /* the defaults, from the machine's (the process's) memory */
    run(&o, NULL, "rgpu-replay", bomb, "--backend", "cpu", NULL);
    g_child_as = 0;
    ck_assert_msg(o.code == 2 && o.err_lines == 1, "exit %d: %s%s", o.code, o.out, o.err);
    ck_assert_msg(strstr(o.err, "--max-session-bytes") && strstr(o.err, "1811939328"), "%s", o.err);
    ck_assert_msg(o.maxrss_kb < bound_kb, "rgpu-replay peaked at %ld KiB", o.maxrss_kb);

    /* the same kind of trace, smaller: refused under a low limit, replayed and verified under a raised one */
    run(&o, NULL, "rgpu-replay", small, "--backend", "cpu", "--max-session-bytes", "64M", NULL);
    ck_assert_msg(o.code == 2 && strstr(o.err, "--max-session-bytes"), "exit %d: %s", o.code, o.err);
    run(&o, NULL, "rgpu-replay", small, "--backend", "cpu", "--verify", "--max-session-bytes", "512M", NULL);
    ck_assert_msg(o.code == 0 && strstr(o.out, "1 results verified"), "exit %d: %s%s", o.code, o.out, o.err);
    run(&o, NULL, "rgpu-diff", small, "--a", "cpu", "--b", "cpu", "--quiet", "--max-memory", "1G",
        "--max-session-bytes", "300M", NULL);
    ck_assert_msg(o.code == 0, "exit %d: %s%s", o.code, o.out, o.err);
    /* a 2 GiB blob named by an UPLOAD of 4 KiB, under limits it fits: refused by the size the record
     * names, before it is inflated (the op fails, the replay goes on) */
    run(&o, NULL, "rgpu-replay", liar, "--backend", "cpu", "--max-memory", "16G", "--max-session-bytes", "8G", NULL);
    ck_assert_msg(o.code == 0 && strstr(o.out, "op 0 (rgpu::upload) failed") &&
                  strstr(o.out, "has 2147483648 bytes, its record says 4096"), "exit %d: %s%s", o.code, o.out, o.err);
    ck_assert_msg(o.maxrss_kb < bound_kb, "rgpu-replay peaked at %ld KiB", o.maxrss_kb);
    /* bad values are usage errors */
    run(&o, NULL, "rgpu-replay", small, "--max-memory", "0", NULL);
    ck_assert_msg(o.code == 2 && o.err_lines == 1 && strstr(o.err, "--max-memory"), "%s", o.err);
    run(&o, NULL, "rgpu-diff", small, "--max-session-bytes", "lots", NULL);
    ck_assert_msg(o.code == 2 && o.err_lines == 1 && strstr(o.err, "'lots'"), "%s", o.err);
}
END_TEST

START_TEST(long_trace_replays_fast) {
    char path[160];
    snprintf(path, sizeof path, "%s/long.rgt", g_dir);
    make_trace(path, 4000, 500);          /* ~24k ops */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_out o;
    run(&o, NULL, "rgpu-replay", path, "--verify", "--backend", "cpu", NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_msg(o.code == 0, "%s %s", o.out, o.err);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    ck_assert_msg(s < 20, "24k ops took %.1f s", s);
    run(&o, NULL, "rgpu-diff", path, "--a", "cpu", "--b", "cpu", "--quiet", NULL);
    ck_assert_msg(o.code == 0, "%s %s", o.out, o.err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("tools");
    TCase *tc = add_tcase(s, "tools", 120, setup, teardown);
    ADD_TESTS(tc, replay_verifies_good_trace, replay_twice_is_bitwise_equal, replay_names_corrupted_result,
                  diff_finds_the_faulty_op, trace_info_ops_dump, bad_traces_exit_2, usage_errors,
                  long_trace_replays_fast, blob_over_the_limits_is_refused_in_bounded_memory);
    return run_suite(s);
}
