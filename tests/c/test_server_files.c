/* test_server_files.c — the server-file ops FILE_STAT, FILE_LIST, FROM_FILE,
 * ZIP_INDEX and SAVE_ZIP (FORMAT.md §7.5).
 *
 * In a session: on cpu, and on cpu posing as a device backend (so reads and
 * checkpoints go through the session's bounded host buffer, in 8 MiB
 * pieces), against files written here and compared byte by byte; every
 * refusal with its status and a message naming the path. Over a real
 * rgpu-server ($RGPU_SERVER_BIN) with --data / --data-rw / RGPU_REMOTE_DATA:
 * the ops end to end, the options' refusals, a journal rebuild that does not
 * write a checkpoint twice and refuses a changed file, and rgpu-replay /
 * rgpu-diff of the server's --record trace (bitwise, and refusing a changed
 * file). */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_util.h"
#include "check_server.h"
#include "check_records.h"
#include "session.h"

/* ---------------------------------------------------------------------------
 * The folders: ROOT/d (exposed read-only as "data"), ROOT/c ("ckpt",
 * read-write), ROOT/rec (the server's --record) */
static char g_root[64], g_d[96], g_c[96], g_rec[96];
#define A_SIZE   (4096 + 37)
#define BIG_SIZE ((12u << 20) + 123)   /* two 8 MiB pieces and some */

static uint8_t pattern(size_t i, unsigned seed) { return (uint8_t)(i * 131u + (i >> 9) * 7u + seed); }

static void write_file(const char *dir, const char *name, size_t n, unsigned seed) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    uint8_t *b = malloc(n);
    for (size_t i = 0; i < n; i++) b[i] = pattern(i, seed);
    FILE *f = fopen(p, "wb");
    ck_assert_msg(f != NULL, "%s: %s", p, strerror(errno));
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    fclose(f);
    free(b);
}

/* The bytes of file dir/name (malloc'd), its size into *n. */
static uint8_t *read_file(const char *dir, const char *name, size_t *n) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "rb");
    ck_assert_msg(f != NULL, "%s: %s", p, strerror(errno));
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n ? *n : 1);
    ck_assert_uint_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static struct stat stat_of(const char *dir, const char *name) {
    char p[256];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    ck_assert_msg(stat(p, &st) == 0, "%s: %s", p, strerror(errno));
    return st;
}

static bool exists(const char *dir, const char *name) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static int entries_in(const char *dir) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    ck_assert(p && fscanf(p, "%d", &n) == 1);
    pclose(p);
    return n;
}

static void tree_make(void) {
    strcpy(g_root, "/tmp/rgpu-files-XXXXXX");
    ck_assert(mkdtemp(g_root) != NULL);
    snprintf(g_d, sizeof g_d, "%s/d", g_root);
    snprintf(g_c, sizeof g_c, "%s/c", g_root);
    snprintf(g_rec, sizeof g_rec, "%s/rec", g_root);
    char sub[128];
    snprintf(sub, sizeof sub, "%s/sub", g_d);
    ck_assert(mkdir(g_d, 0700) == 0 && mkdir(g_c, 0700) == 0 && mkdir(sub, 0700) == 0);
    write_file(g_d, "a.bin", A_SIZE, 1);
    write_file(g_d, "big.bin", BIG_SIZE, 2);
    write_file(sub, "b.txt", 6, 3);
}

static void tree_remove(void) {
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    ck_assert_int_eq(system(cmd), 0);
}

static rgpu_hash file_hash(const char *dir, const char *name, uint64_t *size) {
    size_t n;
    uint8_t *b = read_file(dir, name, &n);
    rgpu_hash h = rgpu_hash_bytes(b, n);
    free(b);
    if (size) *size = n;
    return h;
}

/* ---------------------------------------------------------------------------
 * Records */
static rgpu_arg harg(rgpu_hash h) { rgpu_arg a = { .kind = RGPU_ARG_HASH }; a.v.h = h; return a; }
static rgpu_arg iarg(int64_t v) { rgpu_arg a = { .kind = RGPU_ARG_INT }; a.v.i = v; return a; }
static rgpu_arg barg(bool v) { rgpu_arg a = { .kind = RGPU_ARG_BOOL }; a.v.i = v; return a; }

static rgpu_hash hash_of(const char *s) { return rgpu_hash_bytes(s, strlen(s)); }

static rgpu_record rec_stat(const char *path, bool with_hash) {
    rgpu_record r = { .op = RGPU_OP_FILE_STAT, .n_args = 2 };
    r.args[0] = harg(hash_of(path));
    r.args[1] = barg(with_hash);
    return r;
}

static rgpu_record rec_path_op(int op, const char *path) {
    rgpu_record r = { .op = (uint16_t)op, .n_args = 1 };
    r.args[0] = harg(hash_of(path));
    return r;
}

/* FROM_FILE into tensor tid (a new u8 storage of n bytes). */
static rgpu_record rec_from_file(uint64_t tid, uint64_t n, const char *path, int64_t off, uint64_t size, rgpu_hash h) {
    rgpu_record r = { .op = RGPU_OP_FROM_FILE, .n_out = 1, .n_args = 4 };
    r.out[0] = (rgpu_tdef){ .tid = tid, .sid = tid + 100000, .flags = RGPU_TDEF_NEW_STORAGE, .dtype = RGPU_U8, .ndim = 1,
                            .nbytes = n, .sizes = { (int64_t)n }, .strides = { 1 } };
    r.args[0] = harg(hash_of(path));
    r.args[1] = iarg(off);
    r.args[2] = iarg((int64_t)size);
    r.args[3] = harg(h);
    return r;
}

/* SAVE_ZIP; le holds the tids (8 bytes each, kept by the caller). */
static rgpu_record rec_save(const char *path, const rgpu_buf *manifest, const uint8_t *le, uint32_t ntids) {
    rgpu_record r = { .op = RGPU_OP_SAVE_ZIP, .n_args = 3 };
    r.args[0] = harg(hash_of(path));
    r.args[1] = harg(rgpu_hash_bytes(manifest->p, manifest->len));
    r.args[2].kind = RGPU_ARG_INTS;
    r.args[2].v.ints.p = le;
    r.args[2].v.ints.n = ntids;
    return r;
}

static rgpu_record rec_arange(uint64_t tid, int64_t n) {
    rgpu_record r = { .op = RGPU_OP_ARANGE, .n_out = 1, .n_args = 2 };
    r.out[0] = (rgpu_tdef){ .tid = tid, .sid = tid + 100000, .flags = RGPU_TDEF_NEW_STORAGE, .dtype = RGPU_I64, .ndim = 1,
                            .nbytes = 8 * (uint64_t)n, .sizes = { n }, .strides = { 1 } };
    r.args[0] = iarg(0);
    r.args[1] = iarg(1);
    return r;
}

static rgpu_record rec_dl(uint64_t tid) {
    rgpu_record r = { .op = RGPU_OP_DOWNLOAD, .n_in = 1 };
    r.in[0] = tid;
    return r;
}

/* Manifest entries (FORMAT.md §7.5; ops.def's SAVE_ZIP). */
static void mf_count(rgpu_buf *m, uint32_t n) { uint8_t b[4]; rgpu_st32(b, n); rgpu_buf_append(m, b, 4); }
static void mf_name(rgpu_buf *m, const char *name, uint8_t kind) {
    uint8_t b[2];
    rgpu_st16(b, (uint16_t)strlen(name));
    rgpu_buf_append(m, b, 2);
    rgpu_buf_append(m, name, strlen(name));
    rgpu_buf_append(m, &kind, 1);
}
static void mf_inline(rgpu_buf *m, const char *name, const void *p, uint32_t n) {
    mf_name(m, name, 0);
    uint8_t b[4];
    rgpu_st32(b, n);
    rgpu_buf_append(m, b, 4);
    rgpu_buf_append(m, p, n);
}
static void mf_tensor(rgpu_buf *m, const char *name, uint32_t k) {
    mf_name(m, name, 1);
    uint8_t b[4];
    rgpu_st32(b, k);
    rgpu_buf_append(m, b, 4);
}

/* A torch.save-like manifest: a pickle, tensors k = 0..n-1, a version. */
static void mf_model(rgpu_buf *m, uint32_t ntensors) {
    mf_count(m, ntensors + 2);
    mf_inline(m, "m/data.pkl", "PKL\0\1", 5);
    for (uint32_t k = 0; k < ntensors; k++) {
        char name[32];
        snprintf(name, sizeof name, "m/data/%u", k);
        mf_tensor(m, name, k);
    }
    mf_inline(m, "m/version", "3\n", 2);
}

/* ZIP_INDEX's result, parsed (names point into the result bytes). */
typedef struct zidx {
    uint64_t size;
    int64_t mtime;
    rgpu_hash hash;
    uint32_t count;
    uint64_t off[16], len[16];
    char name[16][64];
} zidx;

static void zidx_parse(const uint8_t *d, size_t n, zidx *z) {
    ck_assert_uint_ge(n, 36);
    z->size = rgpu_ld64(d);
    z->mtime = (int64_t)rgpu_ld64(d + 8);
    memcpy(z->hash.b, d + 16, 16);
    z->count = rgpu_ld32(d + 32);
    ck_assert_uint_le(z->count, 16);
    size_t o = 36;
    for (uint32_t i = 0; i < z->count; i++) {
        ck_assert_uint_le(o + 18, n);
        z->off[i] = rgpu_ld64(d + o);
        z->len[i] = rgpu_ld64(d + o + 8);
        uint16_t nl = rgpu_ld16(d + o + 16);
        ck_assert_uint_le(o + 18 + nl, n);
        ck_assert_uint_lt(nl, 64);
        memcpy(z->name[i], d + o + 18, nl);
        z->name[i][nl] = 0;
        o += 18u + nl;
    }
    ck_assert_uint_eq(o, n);
}

/* ---------------------------------------------------------------------------
 * A session in this process (cpu; `device`: a device backend, see env_open) */
typedef struct env {
    rgpu_backend *b;
    rgpu_files *f;
    rgpu_session *s;
    uint64_t op;
    struct { rgpu_hash h; uint8_t *p; size_t n; } blob[64];
    int nblob;
} env;

static void env_put(env *e, const void *p, size_t n) {
    ck_assert_int_lt(e->nblob, 64);
    e->blob[e->nblob].h = rgpu_hash_bytes(p, n);
    e->blob[e->nblob].p = malloc(n ? n : 1);
    memcpy(e->blob[e->nblob].p, p, n);
    e->blob[e->nblob++].n = n;
}

static rgpu_status env_fetch(void *ud, const rgpu_hash *h, uint64_t max_n, uint8_t **data, size_t *n) {
    env *e = ud;
    for (int i = 0; i < e->nblob; i++) {
        if (!rgpu_hash_eq(&e->blob[i].h, h)) continue;
        *n = e->blob[i].n;
        if (*n > max_n) return RGPU_ERR_LIMIT;
        *data = malloc(*n ? *n : 1);
        memcpy(*data, e->blob[i].p, *n);
        return RGPU_OK;
    }
    return RGPU_ERR_MISSING_BLOB;
}

static void env_open(env *e, bool device, bool with_files, bool dry) {
    memset(e, 0, sizeof *e);
    char why[256];
    /* device: the cuda backend where the run asks for it (make test-cuda-emu
     * sets RGPU_BACKEND=cuda), else cpu posing as a device backend (upload and
     * download stay memcpy): the bounce path either way */
    const char *be = getenv("RGPU_BACKEND");
    bool cuda = device && be && !strcmp(be, "cuda");
    e->b = rgpu_backend_create(cuda ? "cuda" : "cpu", why, sizeof why);
    ck_assert_msg(e->b != NULL, "%s", why);
    if (!cuda) e->b->device_memory = device;
    ck_assert(e->b->device_memory == device);
    e->s = rgpu_session_new(e->b, NULL);
    rgpu_session_set_fetch(e->s, env_fetch, e);
    if (!with_files) return;
    e->f = rgpu_files_new();
    char spec[160];
    snprintf(spec, sizeof spec, "data=%s", g_d);
    ck_assert_msg(rgpu_files_add(e->f, spec, false, why, sizeof why) == RGPU_OK, "%s", why);
    snprintf(spec, sizeof spec, "ckpt=%s", g_c);
    ck_assert_msg(rgpu_files_add(e->f, spec, true, why, sizeof why) == RGPU_OK, "%s", why);
    rgpu_session_set_files(e->s, e->f, dry);
}

static void env_close(env *e) {
    rgpu_session_free(e->s);
    rgpu_files_free(e->f);
    e->b->destroy(e->b);
    for (int i = 0; i < e->nblob; i++) free(e->blob[i].p);
}

/* Run r (its path blob, when it has one, put first); its op index. */
static uint64_t env_run(env *e, const rgpu_record *r, const char *path) {
    if (path) env_put(e, path, strlen(path));
    ck_assert_int_eq(rgpu_session_run_record(e->s, r, e->op), RGPU_OK);
    return e->op++;
}

/* The answer at op: its status, message and result bytes (malloc'd). */
static int env_take(env *e, uint64_t op, char *msg, size_t ml, uint8_t **d, size_t *n) {
    int st;
    uint64_t eo;
    uint8_t *data;
    size_t dn;
    char m[600];
    ck_assert_int_eq(rgpu_session_take_result(e->s, op, &st, &eo, m, sizeof m, &data, &dn), RGPU_OK);
    if (msg) snprintf(msg, ml, "%s", m);
    if (d) { *d = data; *n = dn; } else free(data);
    return st;
}

/* Run r and take its answer: the status; result bytes into *d when d. */
static int env_do(env *e, const rgpu_record *r, const char *path, char *msg, size_t ml, uint8_t **d, size_t *n) {
    return env_take(e, env_run(e, r, path), msg, ml, d, n);
}

static void check_tensor_bytes(env *e, uint64_t tid, const uint8_t *want, size_t n) {
    uint8_t *got;
    size_t gn;
    ck_assert_int_eq(rgpu_session_read_tensor(e->s, tid, &got, &gn), RGPU_OK);
    ck_assert_uint_eq(gn, n);
    ck_assert_msg(memcmp(got, want, n) == 0, "tensor %llu's bytes differ from the file's", (unsigned long long)tid);
    free(got);
}

/* FROM_FILE of dir/name [off, off + n) as tid: the status, its message into msg. */
static int env_from_file(env *e, uint64_t tid, const char *path, int64_t off, uint64_t n, char *msg, size_t ml) {
    const char *slash = strchr(path, '/');
    const char *dir = !strncmp(path, "data/", 5) ? g_d : g_c;
    uint64_t size;
    rgpu_hash h = file_hash(dir, slash + 1, &size);
    rgpu_record r = rec_from_file(tid, n, path, off, size, h);
    return env_do(e, &r, path, msg, ml, NULL, NULL);
}

static void setup_tree(void) { tree_make(); }
static void teardown_tree(void) { tree_remove(); }

START_TEST(stat_and_list) {
    env e;
    env_open(&e, false, true, false);
    uint8_t *d;
    size_t n;
    char msg[600];
    rgpu_record r = rec_stat("data/a.bin", true);
    ck_assert_int_eq(env_do(&e, &r, "data/a.bin", msg, sizeof msg, &d, &n), RGPU_OK);
    ck_assert_uint_eq(n, 40);
    struct stat st = stat_of(g_d, "a.bin");
    uint64_t size;
    rgpu_hash want = file_hash(g_d, "a.bin", &size);
    ck_assert_uint_eq(d[0], 1);                         /* a file */
    ck_assert_uint_eq(d[1], 0);                         /* read-only */
    ck_assert_uint_eq(rgpu_ld16(d + 2) | rgpu_ld32(d + 4), 0);
    ck_assert_uint_eq(rgpu_ld64(d + 8), A_SIZE);
    ck_assert_int_eq((int64_t)rgpu_ld64(d + 16), (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
    ck_assert_msg(memcmp(d + 24, want.b, 16) == 0, "FILE_STAT's hash is not XXH3-128 of the file");
    free(d);
    r = rec_stat("data/a.bin", false);                  /* no hash asked: zeros */
    ck_assert_int_eq(env_do(&e, &r, "data/a.bin", NULL, 0, &d, &n), RGPU_OK);
    static const uint8_t zero[16];
    ck_assert_int_eq(memcmp(d + 24, zero, 16), 0);
    free(d);
    r = rec_stat("data/sub", true);
    ck_assert_int_eq(env_do(&e, &r, "data/sub", NULL, 0, &d, &n), RGPU_OK);
    ck_assert_uint_eq(d[0], 2);
    ck_assert_int_eq(memcmp(d + 24, zero, 16), 0);
    free(d);
    r = rec_stat("ckpt", false);
    ck_assert_int_eq(env_do(&e, &r, "ckpt", NULL, 0, &d, &n), RGPU_OK);
    ck_assert_uint_eq(d[0], 2);
    ck_assert_uint_eq(d[1], 1);                         /* beneath --data-rw */
    free(d);
    /* FILE_LIST: sorted by name, kinds and sizes */
    r = rec_path_op(RGPU_OP_FILE_LIST, "data");
    ck_assert_int_eq(env_do(&e, &r, "data", msg, sizeof msg, &d, &n), RGPU_OK);
    static const char *names[3] = { "a.bin", "big.bin", "sub" };
    static const uint8_t kinds[3] = { 1, 1, 2 };
    static const uint64_t sizes[3] = { A_SIZE, BIG_SIZE, 0 };
    ck_assert_uint_eq(rgpu_ld32(d), 3);
    size_t o = 4;
    for (int i = 0; i < 3; i++) {
        uint16_t nl = rgpu_ld16(d + o + 2);
        ck_assert_uint_eq(d[o], kinds[i]);
        ck_assert_uint_eq(d[o + 1], 0);
        if (kinds[i] == 1) ck_assert_uint_eq(rgpu_ld64(d + o + 8), sizes[i]);
        ck_assert_uint_eq(nl, strlen(names[i]));
        ck_assert_int_eq(memcmp(d + o + 24, names[i], nl), 0);
        o += 24u + nl;
    }
    ck_assert_uint_eq(o, n);
    free(d);
    /* "" lists the exposed folders */
    r = rec_path_op(RGPU_OP_FILE_LIST, "");
    ck_assert_int_eq(env_do(&e, &r, "", msg, sizeof msg, &d, &n), RGPU_OK);
    ck_assert_uint_eq(rgpu_ld32(d), 2);
    ck_assert_uint_eq(n, 4 + 24 + 4 + 24 + 4);
    ck_assert_int_eq(memcmp(d + 4 + 24, "ckpt", 4), 0);
    ck_assert_uint_eq(d[4 + 1], 1);
    ck_assert_int_eq(memcmp(d + 4 + 28 + 24, "data", 4), 0);
    ck_assert_uint_eq(d[4 + 28 + 1], 0);
    free(d);
    env_close(&e);
}
END_TEST

/* Bytes at an offset, and a read of more than two 8 MiB pieces, on a host
 * backend (into the storage) and a device one (through the bounded buffer). */
START_TEST(from_file_bytes) {
    for (int device = 0; device < 2; device++) {
        env e;
        env_open(&e, device, true, false);
        char msg[600];
        size_t n;
        uint8_t *a = read_file(g_d, "a.bin", &n), *big = read_file(g_d, "big.bin", &n);
        ck_assert_int_eq(env_from_file(&e, 1, "data/a.bin", 100, 1000, msg, sizeof msg), RGPU_OK);
        check_tensor_bytes(&e, 1, a + 100, 1000);
        ck_assert_int_eq(env_from_file(&e, 2, "data/a.bin", 0, A_SIZE, msg, sizeof msg), RGPU_OK);   /* to its end */
        check_tensor_bytes(&e, 2, a, A_SIZE);
        ck_assert_int_eq(env_from_file(&e, 3, "data/big.bin", 5, BIG_SIZE - 5, msg, sizeof msg), RGPU_OK);
        check_tensor_bytes(&e, 3, big + 5, BIG_SIZE - 5);
        ck_assert_int_eq(env_from_file(&e, 4, "data/a.bin", 7, 0, msg, sizeof msg), RGPU_OK);       /* empty */
        /* the file's bytes count as the session's storage */
        uint64_t alloc, peak;
        rgpu_session_memory(e.s, &alloc, &peak);
        ck_assert_uint_eq(alloc, 1000 + A_SIZE + BIG_SIZE - 5);
        free(a);
        free(big);
        env_close(&e);
    }
}
END_TEST

/* The file's identity, its end, folders, missing files and escapes: each the
 * op's failure with its status and the path named; the output poisoned. */
START_TEST(from_file_refusals) {
    env e;
    env_open(&e, false, true, false);
    char msg[600];
    uint64_t size;
    rgpu_hash h = file_hash(g_d, "a.bin", &size);
    rgpu_hash wrong = h;
    wrong.b[3] ^= 1;
    rgpu_record r = rec_from_file(1, 16, "data/a.bin", 0, size, wrong);
    ck_assert_int_eq(env_do(&e, &r, "data/a.bin", msg, sizeof msg, NULL, NULL), RGPU_ERR_CHANGED);
    ck_assert_msg(strstr(msg, "rgpu::from_file") && strstr(msg, "data/a.bin"), "%s", msg);
    rgpu_record dl = rec_dl(1);
    ck_assert_int_eq(env_do(&e, &dl, NULL, msg, sizeof msg, NULL, NULL), RGPU_ERR_POISONED);
    r = rec_from_file(2, 16, "data/a.bin", 0, size + 1, h);          /* another size */
    ck_assert_int_eq(env_do(&e, &r, "data/a.bin", msg, sizeof msg, NULL, NULL), RGPU_ERR_CHANGED);
    ck_assert_msg(strstr(msg, "data/a.bin"), "%s", msg);
    r = rec_from_file(3, 20, "data/a.bin", (int64_t)size - 10, size, h);   /* past its end */
    ck_assert_int_eq(env_do(&e, &r, "data/a.bin", msg, sizeof msg, NULL, NULL), RGPU_ERR_OUT_OF_BOUNDS);
    ck_assert_msg(strstr(msg, "data/a.bin") && strstr(msg, "past its end"), "%s", msg);
    r = rec_from_file(4, 20, "data/a.bin", -1, size, h);
    ck_assert_int_eq(env_do(&e, &r, "data/a.bin", msg, sizeof msg, NULL, NULL), RGPU_ERR_BAD_ARG);
    static const char *bad[] = { "data/sub", "data/nope.bin", "data/../c/x.bin", "/etc/passwd", "nosuch/a.bin", "data/sub/../../d/a.bin" };
    for (int i = 0; i < 6; i++) {
        r = rec_from_file(10 + (uint64_t)i, 4, bad[i], 0, size, h);
        int st = env_do(&e, &r, bad[i], msg, sizeof msg, NULL, NULL);
        ck_assert_msg(st == RGPU_ERR_PATH, "%s: %s: %s", bad[i], rgpu_status_name(st), msg);
        ck_assert_msg(strstr(msg, "rgpu::from_file") && strstr(msg, bad[i]), "%s: %s", bad[i], msg);
    }
    /* a path blob over RGPU_FILES_MAX_PATH */
    char longp[RGPU_FILES_MAX_PATH + 40];
    memset(longp, 'x', sizeof longp - 1);
    memcpy(longp, "data/", 5);
    longp[sizeof longp - 1] = 0;
    r = rec_from_file(20, 4, longp, 0, size, h);
    ck_assert_int_eq(env_do(&e, &r, longp, msg, sizeof msg, NULL, NULL), RGPU_ERR_PATH);
    ck_assert_msg(strstr(msg, "over the limit"), "%s", msg);
    /* the output must be a new storage */
    rgpu_record ar = rec_arange(30, 4);
    ck_assert_int_eq(env_do(&e, &ar, NULL, msg, sizeof msg, NULL, NULL), RGPU_OK);
    r = rec_from_file(21, 4, "data/a.bin", 0, size, h);
    r.out[0] = existing(30);
    ck_assert_int_eq(env_do(&e, &r, "data/a.bin", msg, sizeof msg, NULL, NULL), RGPU_ERR_BAD_ARG);
    ck_assert_msg(strstr(msg, "new storage"), "%s", msg);
    env_close(&e);
    /* no folders at all */
    env_open(&e, false, false, false);
    r = rec_stat("data/a.bin", true);
    ck_assert_int_eq(env_do(&e, &r, "data/a.bin", msg, sizeof msg, NULL, NULL), RGPU_ERR_PATH);
    ck_assert_msg(strstr(msg, "no folder is exposed"), "%s", msg);
    env_close(&e);
}
END_TEST

/* SAVE_ZIP (a pickle, a 12 MiB tensor from a file, an arange, a version):
 * the file lands in the read-write folder with the size and hash its result
 * says, zipfile reads it, ZIP_INDEX finds every entry at a 64-byte aligned
 * offset, and FROM_FILE of an entry gives the tensor's bytes back. */
START_TEST(save_zip_round_trip) {
    for (int device = 0; device < 2; device++) {
        env e;
        env_open(&e, device, true, false);
        char msg[600];
        size_t bn;
        uint8_t *big = read_file(g_d, "big.bin", &bn);
        ck_assert_int_eq(env_from_file(&e, 1, "data/big.bin", 0, BIG_SIZE, msg, sizeof msg), RGPU_OK);
        rgpu_record ar = rec_arange(2, 100);
        ck_assert_int_eq(env_do(&e, &ar, NULL, msg, sizeof msg, NULL, NULL), RGPU_OK);
        rgpu_buf m = { 0 };
        mf_model(&m, 2);
        env_put(&e, m.p, m.len);
        uint8_t le[16];
        rgpu_st64(le, 1);
        rgpu_st64(le + 8, 2);
        rgpu_record sv = rec_save("ckpt/m.pt", &m, le, 2);
        uint8_t *d;
        size_t n;
        ck_assert_int_eq(env_do(&e, &sv, "ckpt/m.pt", msg, sizeof msg, &d, &n), RGPU_OK);
        ck_assert_uint_eq(n, 24);
        uint64_t size;
        rgpu_hash fh = file_hash(g_c, "m.pt", &size);
        ck_assert_uint_eq(rgpu_ld64(d), size);
        ck_assert_msg(memcmp(d + 8, fh.b, 16) == 0, "SAVE_ZIP's hash is not the file's");
        free(d);
        char cmd[300];
        snprintf(cmd, sizeof cmd, "python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); "
                 "assert z.testzip() is None and z.namelist() == [\"m/data.pkl\", \"m/data/0\", \"m/data/1\", \"m/version\"]' %s/m.pt",
                 g_c);
        ck_assert_msg(system(cmd) == 0, "python's zipfile does not read %s/m.pt as written", g_c);
        rgpu_record zi = rec_path_op(RGPU_OP_ZIP_INDEX, "ckpt/m.pt");
        ck_assert_int_eq(env_do(&e, &zi, "ckpt/m.pt", msg, sizeof msg, &d, &n), RGPU_OK);
        zidx z;
        zidx_parse(d, n, &z);
        free(d);
        ck_assert_uint_eq(z.size, size);
        ck_assert(rgpu_hash_eq(&z.hash, &fh));
        ck_assert_uint_eq(z.count, 4);
        static const char *names[4] = { "m/data.pkl", "m/data/0", "m/data/1", "m/version" };
        const uint64_t lens[4] = { 5, BIG_SIZE, 800, 2 };
        size_t zn;
        uint8_t *zip = read_file(g_c, "m.pt", &zn);
        int64_t ar_bytes[100];
        for (int i = 0; i < 100; i++) ar_bytes[i] = i;
        const void *want[4] = { "PKL\0\1", big, ar_bytes, "3\n" };
        for (int i = 0; i < 4; i++) {
            ck_assert_str_eq(z.name[i], names[i]);
            ck_assert_uint_eq(z.len[i], lens[i]);
            ck_assert_uint_eq(z.off[i] % 64, 0);
            ck_assert_uint_le(z.off[i] + z.len[i], zn);
            ck_assert_msg(memcmp(zip + z.off[i], want[i], lens[i]) == 0, "entry %s's bytes", names[i]);
        }
        free(zip);
        /* the arange back from the checkpoint, by its entry's offset */
        rgpu_record ff = rec_from_file(3, 800, "ckpt/m.pt", (int64_t)z.off[2], z.size, z.hash);
        ck_assert_int_eq(env_do(&e, &ff, "ckpt/m.pt", msg, sizeof msg, NULL, NULL), RGPU_OK);
        check_tensor_bytes(&e, 3, (const uint8_t *)ar_bytes, 800);
        rgpu_buf_free(&m);
        free(big);
        env_close(&e);
    }
}
END_TEST

/* Refused checkpoints leave nothing behind; a dry run (the offline tools)
 * writes nothing and answers what the real write answered. */
START_TEST(save_zip_refusals_and_dry_run) {
    env e;
    env_open(&e, false, true, false);
    char msg[600];
    rgpu_record ar = rec_arange(2, 10);
    ck_assert_int_eq(env_do(&e, &ar, NULL, msg, sizeof msg, NULL, NULL), RGPU_OK);
    uint8_t le[16];
    rgpu_st64(le, 2);
    rgpu_buf m = { 0 };
    mf_model(&m, 1);
    env_put(&e, m.p, m.len);
    rgpu_record sv = rec_save("data/x.pt", &m, le, 1);              /* a read-only folder */
    ck_assert_int_eq(env_do(&e, &sv, "data/x.pt", msg, sizeof msg, NULL, NULL), RGPU_ERR_PATH);
    ck_assert_msg(strstr(msg, "data/x.pt"), "%s", msg);
    ck_assert(!exists(g_d, "x.pt"));
    /* a poisoned tensor: named, with the op that poisoned it */
    uint64_t size;
    rgpu_hash h = file_hash(g_d, "a.bin", &size);
    h.b[0] ^= 1;
    rgpu_record ff = rec_from_file(7, 8, "data/a.bin", 0, size, h);
    uint64_t bad_op = env_run(&e, &ff, "data/a.bin");
    env_take(&e, bad_op, NULL, 0, NULL, NULL);
    rgpu_st64(le + 8, 7);
    sv = rec_save("ckpt/p.pt", &m, le + 8, 1);
    ck_assert_int_eq(env_do(&e, &sv, "ckpt/p.pt", msg, sizeof msg, NULL, NULL), RGPU_ERR_POISONED);
    char want[80];
    snprintf(want, sizeof want, "tensor 7 is poisoned by failed op %llu", (unsigned long long)bad_op);
    ck_assert_msg(strstr(msg, want), "%s", msg);
    /* malformed manifests */
    rgpu_buf bm[5] = { { 0 } };
    mf_count(&bm[0], 1); mf_tensor(&bm[0], "m/data/0", 1);           /* k past tids */
    mf_count(&bm[1], 2); mf_inline(&bm[1], "m/a", "xy", 2);          /* ends inside entry 1 */
    mf_count(&bm[2], 1); mf_inline(&bm[2], "m/a", "xy", 2); rgpu_buf_append(&bm[2], "!", 1);   /* trailing bytes */
    mf_count(&bm[3], 1); mf_name(&bm[3], "m/a", 7); rgpu_buf_append(&bm[3], "\0\0\0\0", 4);     /* kind 7 */
    mf_count(&bm[4], 1); mf_name(&bm[4], "m/a", 0); rgpu_buf_append(&bm[4], "\xff\0\0\0", 4);   /* 255 inline bytes, none there */
    static const char *why[5] = { "names tensor 1 of the 1", "ends inside entry 1", "after its last entry", "kind 7",
                                  "255 inline bytes" };
    for (int i = 0; i < 5; i++) {
        env_put(&e, bm[i].p, bm[i].len);
        sv = rec_save("ckpt/bad.pt", &bm[i], le, 1);
        ck_assert_int_eq(env_do(&e, &sv, "ckpt/bad.pt", msg, sizeof msg, NULL, NULL), RGPU_ERR_BAD_ARG);
        ck_assert_msg(strstr(msg, why[i]), "manifest %d: %s", i, msg);
        rgpu_buf_free(&bm[i]);
    }
    ck_assert_int_eq(entries_in(g_c), 0);                            /* no file, no temporary left */
    /* the real write, then the same in a dry-run session */
    sv = rec_save("ckpt/real.pt", &m, le, 1);
    uint8_t *real, *dry;
    size_t rn, dn;
    ck_assert_int_eq(env_do(&e, &sv, "ckpt/real.pt", msg, sizeof msg, &real, &rn), RGPU_OK);
    env_close(&e);
    env_open(&e, false, true, true);
    ck_assert_int_eq(env_do(&e, &ar, NULL, msg, sizeof msg, NULL, NULL), RGPU_OK);
    env_put(&e, m.p, m.len);
    sv = rec_save("ckpt/dry.pt", &m, le, 1);
    ck_assert_int_eq(env_do(&e, &sv, "ckpt/dry.pt", msg, sizeof msg, &dry, &dn), RGPU_OK);
    ck_assert_uint_eq(rn, 24);
    ck_assert_uint_eq(dn, 24);
    ck_assert_int_eq(memcmp(real, dry, 24), 0);
    ck_assert(!exists(g_c, "dry.pt"));
    ck_assert_int_eq(entries_in(g_c), 1);
    free(real);
    free(dry);
    rgpu_buf_free(&m);
    env_close(&e);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Over a real rgpu-server */
static srv g_s;

/* The server's options for the folders ("--data data=D --data-rw ckpt=C"). */
static char g_opt_d[128], g_opt_c[128];
static const char *const *data_opts(const char *extra1, const char *extra2) {
    static const char *v[8];
    snprintf(g_opt_d, sizeof g_opt_d, "data=%s", g_d);
    snprintf(g_opt_c, sizeof g_opt_c, "ckpt=%s", g_c);
    int n = 0;
    v[n++] = "--data"; v[n++] = g_opt_d; v[n++] = "--data-rw"; v[n++] = g_opt_c;
    if (extra1) v[n++] = extra1;
    if (extra2) v[n++] = extra2;
    v[n] = NULL;
    return v;
}

/* Kill the server (SIGKILL: no orderly end) and start it again on the same
 * socket, token and journal, with the folders. */
static void srv_kill(srv *s) {
    kill(s->pid, SIGKILL);
    int st;
    waitpid(s->pid, &st, 0);
    unlink(s->sock);
}

static void srv_restart(srv *s) {
    const char *const *extra = data_opts(NULL, NULL);
    s->pid = fork();
    if (s->pid == 0) {
        if (!freopen(s->log, "a", stderr)) _exit(126);
        const char *argv[32] = { getenv("RGPU_SERVER_BIN"), "--unix", s->sock, "--backend", "cpu", "--token-file",
                                 s->token_file, "--journal", s->journal };
        int n = 9;
        for (int i = 0; extra[i]; i++) argv[n++] = extra[i];
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    for (int i = 0; i < 1000 && access(s->sock, F_OK) != 0; i++) usleep(10000);
    ck_assert_msg(access(s->sock, F_OK) == 0, "the server did not start again (see %s)", s->log);
}

static int log_has(const srv *s, const char *what) {
    FILE *f = fopen(s->log, "r");
    char line[2048];
    int n = 0;
    while (f && fgets(line, sizeof line, f)) n += strstr(line, what) != NULL;
    if (f) fclose(f);
    return n;
}

/* A raw session: records one chunk each, path blobs pushed before. */
typedef struct wc { int fd; uint64_t op, id; } wc;

static uint64_t wc_run(wc *w, const rgpu_record *r, const char *path) {
    if (path) send_blob(w->fd, path, strlen(path));
    rgpu_buf b = { 0 };
    enc(&b, r);
    send_chunk(w->fd, b.p, b.len, w->op, 1, 0);
    rgpu_buf_free(&b);
    ck_assert_uint_eq(read_ack(w->fd), w->op + 1);
    return w->op++;
}

static int wc_do(wc *w, const rgpu_record *r, const char *path, char *msg, size_t ml, uint8_t **d, size_t *n) {
    uint64_t op = wc_run(w, r, path);
    uint8_t *data;
    size_t dn;
    int st = wait_result(w->fd, op, msg, ml, &data, &dn);
    if (d) { *d = data; *n = dn; } else free(data);
    return st;
}

/* A FROM_FILE of the whole of dir/name as tid, over w. */
static uint64_t wc_from_file(wc *w, uint64_t tid, const char *path, const char *dir, const char *name) {
    uint64_t size;
    rgpu_hash h = file_hash(dir, name, &size);
    rgpu_record r = rec_from_file(tid, size, path, 0, size, h);
    return wc_run(w, &r, path);
}

/* Run rgpu-server or a tool with args (a shell string); its exit status,
 * its stdout and stderr into out/err. */
static int run_cmd(const char *prog, const char *args, char *out, size_t on, char *err, size_t en) {
    char bin[512], cmd[2048], po[128], pe[128];
    snprintf(bin, sizeof bin, "%s", prog[0] == '/' ? prog : getenv("RGPU_SERVER_BIN"));
    if (prog[0] != '/' && strcmp(prog, "rgpu-server") != 0) {
        char *slash = strrchr(bin, '/');
        snprintf(slash + 1, sizeof bin - (size_t)(slash + 1 - bin), "%s", prog);
    }
    snprintf(po, sizeof po, "%s/out", g_root);
    snprintf(pe, sizeof pe, "%s/err", g_root);
    snprintf(cmd, sizeof cmd, "timeout 60 '%s' %s > '%s' 2> '%s'", bin, args, po, pe);
    int st = system(cmd);
    const char *paths[2] = { po, pe };
    char *bufs[2] = { out, err };
    size_t lens[2] = { on, en };
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(paths[i], "r");
        size_t k = f ? fread(bufs[i], 1, lens[i] - 1, f) : 0;
        bufs[i][k] = 0;
        if (f) fclose(f);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The ops end to end, the start log, RGPU_REMOTE_DATA, no folders, and the
 * options' refusals. */
START_TEST(server_ops_and_options) {
    srv_start(&g_s, data_opts(NULL, NULL));
    char want[400];
    snprintf(want, sizeof want, "exposing data=%s (read-only), ckpt=%s (read-write)", g_d, g_c);
    ck_assert_msg(log_has(&g_s, want), "no '%s' in %s", want, g_s.log);
    wc w = { .fd = srv_session(&g_s, 0, NULL, NULL) };
    uint8_t *d;
    size_t n;
    char msg[600];
    rgpu_record r = rec_stat("data/a.bin", true);
    ck_assert_int_eq(wc_do(&w, &r, "data/a.bin", msg, sizeof msg, &d, &n), RGPU_OK);
    rgpu_hash h = file_hash(g_d, "a.bin", NULL);
    ck_assert_uint_eq(n, 40);
    ck_assert_int_eq(memcmp(d + 24, h.b, 16), 0);
    free(d);
    wc_from_file(&w, 1, "data/a.bin", g_d, "a.bin");
    rgpu_record dl = rec_dl(1);
    ck_assert_int_eq(wc_do(&w, &dl, NULL, msg, sizeof msg, &d, &n), RGPU_OK);
    size_t an;
    uint8_t *a = read_file(g_d, "a.bin", &an);
    ck_assert_uint_eq(n, an);
    ck_assert_int_eq(memcmp(d, a, an), 0);
    free(d);
    free(a);
    rgpu_buf m = { 0 };
    mf_model(&m, 1);
    send_blob(w.fd, m.p, m.len);
    uint8_t le[8];
    rgpu_st64(le, 1);
    rgpu_record sv = rec_save("ckpt/w.pt", &m, le, 1);
    ck_assert_int_eq(wc_do(&w, &sv, "ckpt/w.pt", msg, sizeof msg, &d, &n), RGPU_OK);
    uint64_t size;
    rgpu_hash fh = file_hash(g_c, "w.pt", &size);
    ck_assert_uint_eq(rgpu_ld64(d), size);
    ck_assert_int_eq(memcmp(d + 8, fh.b, 16), 0);
    free(d);
    rgpu_buf_free(&m);
    close(w.fd);
    srv_stop(&g_s);

    /* RGPU_REMOTE_DATA in the server's environment */
    char env[300];
    snprintf(env, sizeof env, "ro:envd=%s; rw:envc=%s", g_d, g_c);
    setenv("RGPU_REMOTE_DATA", env, 1);
    srv_start(&g_s, NULL);
    unsetenv("RGPU_REMOTE_DATA");
    w = (wc){ .fd = srv_session(&g_s, 0, NULL, NULL) };
    r = rec_path_op(RGPU_OP_FILE_LIST, "");
    ck_assert_int_eq(wc_do(&w, &r, "", msg, sizeof msg, &d, &n), RGPU_OK);
    ck_assert_uint_eq(rgpu_ld32(d), 2);
    ck_assert_int_eq(memcmp(d + 4 + 24, "envc", 4), 0);
    ck_assert_uint_eq(d[4 + 1], 1);
    ck_assert_int_eq(memcmp(d + 4 + 28 + 24, "envd", 4), 0);
    ck_assert_uint_eq(d[4 + 28 + 1], 0);
    free(d);
    close(w.fd);
    srv_stop(&g_s);

    /* nothing exposed: every file op fails, saying how to expose one */
    srv_start(&g_s, NULL);
    w = (wc){ .fd = srv_session(&g_s, 0, NULL, NULL) };
    r = rec_stat("data/a.bin", true);
    ck_assert_int_eq(wc_do(&w, &r, "data/a.bin", msg, sizeof msg, NULL, NULL), RGPU_ERR_PATH);
    ck_assert_msg(strstr(msg, "no folder is exposed (rgpu-server --data DIR / --data-rw DIR)"), "%s", msg);
    close(w.fd);
    srv_stop(&g_s);

    /* bad folders: the server refuses to start, naming them */
    char out[4096], err[4096], args[600];
    snprintf(args, sizeof args, "--unix %s/s2 --no-auth --journal none --data %s/nosuch", g_root, g_root);
    ck_assert_int_eq(run_cmd("rgpu-server", args, out, sizeof out, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "--data") && strstr(err, "nosuch"), "%s", err);
    snprintf(args, sizeof args, "--unix %s/s2 --no-auth --journal none --data x=%s --data-rw x=%s", g_root, g_d, g_c);
    ck_assert_int_eq(run_cmd("rgpu-server", args, out, sizeof out, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "--data-rw 'x="), "%s", err);
    snprintf(args, sizeof args, "RGPU_REMOTE_DATA='rw:%s/nosuch' '%s' --unix %s/s2 --no-auth --journal none",
             g_root, getenv("RGPU_SERVER_BIN"), g_root);
    ck_assert_int_eq(run_cmd("/usr/bin/env", args, out, sizeof out, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "RGPU_REMOTE_DATA entry 'rw:") && strstr(err, "nosuch"), "%s", err);
    char conf[200];
    snprintf(conf, sizeof conf, "%s/server.conf", g_root);
    FILE *f = fopen(conf, "w");
    fprintf(f, "# folders\n\ndata  cf=%s\nsomething else\n", g_d);
    fclose(f);
    snprintf(args, sizeof args, "--unix %s/s2 --no-auth --journal none --config %s", g_root, conf);
    ck_assert_int_eq(run_cmd("rgpu-server", args, out, sizeof out, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "server.conf:4: unknown setting 'something'"), "%s", err);
}
END_TEST

/* --config FILE: its data lines are exposed. */
START_TEST(server_config_file) {
    char conf[200], opt[220];
    snprintf(conf, sizeof conf, "%s/server.conf", g_root);
    FILE *f = fopen(conf, "w");
    fprintf(f, "# exposed to rgpu clients\n  data cf=%s  \ndata-rw %s\n", g_d, g_c);
    fclose(f);
    snprintf(opt, sizeof opt, "%s", conf);
    const char *const extra[] = { "--config", opt, NULL };
    srv_start(&g_s, extra);
    char want[400];
    snprintf(want, sizeof want, "exposing cf=%s (read-only), c=%s (read-write)", g_d, g_c);
    ck_assert_msg(log_has(&g_s, want), "no '%s' in %s", want, g_s.log);
    srv_stop(&g_s);
}
END_TEST

/* A session that read a file and saved a checkpoint, its server killed and
 * started again on the journal: the resume does not write the checkpoint
 * again (same inode and mtime), the resent WAIT gets the journaled answer,
 * the state is intact. With the file it read modified, the resume is
 * refused naming it, the journal kept: the file restored, it resumes. */
START_TEST(journal_rebuild) {
    srv_start(&g_s, data_opts(NULL, NULL));
    uint64_t id;
    wc w = { .fd = srv_session(&g_s, 0, &id, NULL) };
    wc_from_file(&w, 1, "data/a.bin", g_d, "a.bin");
    rgpu_buf m = { 0 };
    mf_model(&m, 1);
    send_blob(w.fd, m.p, m.len);
    uint8_t le[8];
    rgpu_st64(le, 1);
    rgpu_record sv = rec_save("ckpt/j.pt", &m, le, 1);
    uint8_t *r1, *r2, *d;
    size_t n1, n2, n;
    char msg[600];
    uint64_t save_op = wc_run(&w, &sv, "ckpt/j.pt");
    ck_assert_int_eq(wait_result(w.fd, save_op, msg, sizeof msg, &r1, &n1), RGPU_OK);
    struct stat st1 = stat_of(g_c, "j.pt");
    close(w.fd);
    srv_kill(&g_s);
    usleep(20000);                                    /* a rewrite would show in the mtime */
    srv_restart(&g_s);
    uint64_t applied;
    w.fd = srv_session(&g_s, id, NULL, &applied);
    ck_assert_uint_eq(applied, 2);
    ck_assert_int_ge(log_has(&g_s, "rebuilt from its journal"), 1);
    ck_assert_int_eq(wait_result(w.fd, save_op, msg, sizeof msg, &r2, &n2), RGPU_OK);   /* resent: the journal's answer */
    ck_assert_uint_eq(n2, 24);
    ck_assert_int_eq(memcmp(r1, r2, 24), 0);
    free(r2);
    struct stat st2 = stat_of(g_c, "j.pt");
    ck_assert_uint_eq(st2.st_ino, st1.st_ino);
    ck_assert_int_eq(st2.st_mtim.tv_sec, st1.st_mtim.tv_sec);
    ck_assert_int_eq(st2.st_mtim.tv_nsec, st1.st_mtim.tv_nsec);
    rgpu_record dl = rec_dl(1);
    ck_assert_int_eq(wc_do(&w, &dl, NULL, msg, sizeof msg, &d, &n), RGPU_OK);
    size_t an;
    uint8_t *a = read_file(g_d, "a.bin", &an);
    ck_assert_uint_eq(n, an);
    ck_assert_int_eq(memcmp(d, a, an), 0);
    free(d);
    close(w.fd);
    /* the file it read changes while the server is down */
    srv_kill(&g_s);
    write_file(g_d, "a.bin", A_SIZE, 99);
    srv_restart(&g_s);
    int fd = srv_connect(&g_s);
    srv_hello(&g_s, fd, RGPU_WIRE_VERSION, 0, NULL, id, NULL);
    ck_assert_int_eq(expect_error_msg(fd, msg, sizeof msg), RGPU_ERR_SESSION_LOST);
    ck_assert_msg(strstr(msg, "rgpu::from_file") && strstr(msg, "data/a.bin"), "%s", msg);
    struct stat st3 = stat_of(g_c, "j.pt");
    ck_assert_uint_eq(st3.st_ino, st1.st_ino);
    /* the journal stays for --grace: with the file as it was, the session resumes */
    char tail[64];
    snprintf(tail, sizeof tail, "session-%016llx.rgt", (unsigned long long)id);
    ck_assert(exists(g_s.journal, tail));
    char p[256];
    snprintf(p, sizeof p, "%s/a.bin", g_d);
    FILE *f = fopen(p, "wb");
    ck_assert_uint_eq(fwrite(a, 1, an, f), an);
    fclose(f);
    w.fd = srv_session(&g_s, id, NULL, &applied);
    ck_assert_uint_eq(applied, 3);
    dl = rec_dl(1);
    w.op = applied;
    ck_assert_int_eq(wc_do(&w, &dl, NULL, msg, sizeof msg, &d, &n), RGPU_OK);
    ck_assert_int_eq(memcmp(d, a, an), 0);
    free(d);
    free(a);
    free(r1);
    rgpu_buf_free(&m);
    close(w.fd);
    srv_stop(&g_s);
}
END_TEST

/* rgpu.load then rgpu.save of one name: the SAVE_ZIP replaces the file a
 * FROM_FILE read, so the server checkpoints the session into its journal at
 * once, and a rebuild does not need the old file (it would refuse it). */
START_TEST(journal_checkpoint_after_rewrite) {
    srv_start(&g_s, data_opts(NULL, NULL));
    uint64_t id;
    wc w = { .fd = srv_session(&g_s, 0, &id, NULL) };
    char msg[600];
    rgpu_record ar = rec_arange(1, 64);
    wc_run(&w, &ar, NULL);
    rgpu_buf m = { 0 };
    mf_model(&m, 1);
    send_blob(w.fd, m.p, m.len);
    uint8_t le[16];
    rgpu_st64(le, 1);
    rgpu_record sv = rec_save("ckpt/k.pt", &m, le, 1);
    ck_assert_int_eq(wc_do(&w, &sv, "ckpt/k.pt", msg, sizeof msg, NULL, NULL), RGPU_OK);
    ck_assert_int_eq(log_has(&g_s, "journal compacted"), 0);
    size_t kn;
    uint8_t *old = read_file(g_c, "k.pt", &kn);
    wc_from_file(&w, 2, "ckpt/k.pt", g_c, "k.pt");       /* rgpu.load: the whole file, for the test */
    rgpu_record ar2 = rec_arange(3, 64);
    ar2.args[0] = iarg(1000);
    wc_run(&w, &ar2, NULL);
    rgpu_st64(le + 8, 3);
    sv = rec_save("ckpt/k.pt", &m, le + 8, 1);             /* rgpu.save over it */
    ck_assert_int_eq(wc_do(&w, &sv, "ckpt/k.pt", msg, sizeof msg, NULL, NULL), RGPU_OK);
    for (int i = 0; i < 300 && !log_has(&g_s, "journal compacted at op 5"); i++) usleep(10000);
    ck_assert_msg(log_has(&g_s, "journal compacted at op 5"), "no checkpoint after the rewrite (see %s)", g_s.log);
    close(w.fd);
    srv_kill(&g_s);
    srv_restart(&g_s);
    uint64_t applied;
    w.fd = srv_session(&g_s, id, NULL, &applied);
    ck_assert_uint_eq(applied, 5);
    w.op = applied;
    rgpu_record dl = rec_dl(2);
    uint8_t *d;
    size_t n;
    ck_assert_int_eq(wc_do(&w, &dl, NULL, msg, sizeof msg, &d, &n), RGPU_OK);
    ck_assert_uint_eq(n, kn);
    ck_assert_int_eq(memcmp(d, old, kn), 0);               /* the bytes it read then */
    free(d);
    free(old);
    rgpu_buf_free(&m);
    close(w.fd);
    srv_stop(&g_s);
}
END_TEST

/* rgpu-replay and rgpu-diff of the server's --record trace: bitwise with the
 * folders (the checkpoint only hashed, not written), a mismatch without
 * them, and a stop naming the file once it changed. */
START_TEST(replay_with_data) {
    srv_start(&g_s, data_opts("--record", g_rec));
    wc w = { .fd = srv_session(&g_s, 0, NULL, NULL) };
    char msg[600];
    wc_from_file(&w, 1, "data/a.bin", g_d, "a.bin");
    rgpu_record dl = rec_dl(1);
    ck_assert_int_eq(wc_do(&w, &dl, NULL, msg, sizeof msg, NULL, NULL), RGPU_OK);
    rgpu_record r = rec_stat("data/big.bin", true);
    ck_assert_int_eq(wc_do(&w, &r, "data/big.bin", msg, sizeof msg, NULL, NULL), RGPU_OK);
    rgpu_buf m = { 0 };
    mf_model(&m, 1);
    send_blob(w.fd, m.p, m.len);
    uint8_t le[8];
    rgpu_st64(le, 1);
    rgpu_record sv = rec_save("ckpt/r.pt", &m, le, 1);
    ck_assert_int_eq(wc_do(&w, &sv, "ckpt/r.pt", msg, sizeof msg, NULL, NULL), RGPU_OK);
    rgpu_buf_free(&m);
    ck_assert_int_eq(rgpu_msg_bye_send(w.fd, &(rgpu_msg_bye){ 0 }), RGPU_OK);
    rgpu_msg_header mh;
    free(expect_msg(w.fd, RGPU_MSG_BYE, &mh));
    close(w.fd);
    srv_stop(&g_s);
    struct stat st1 = stat_of(g_c, "r.pt");
    char out[4096], err[4096], args[1200], base[1000];
    snprintf(base, sizeof base, "%s/session-1.rgt --data data=%s --data-rw ckpt=%s", g_rec, g_d, g_c);
    snprintf(args, sizeof args, "%s --verify --backend cpu", base);
    ck_assert_int_eq(run_cmd("rgpu-replay", args, out, sizeof out, err, sizeof err), 0);
    ck_assert_msg(strstr(out, "rgpu-replay: ok:") && strstr(out, "3 results verified (bitwise)"), "%s%s", out, err);
    struct stat st2 = stat_of(g_c, "r.pt");          /* dry: not written */
    ck_assert_uint_eq(st2.st_ino, st1.st_ino);
    ck_assert_int_eq(st2.st_mtim.tv_nsec, st1.st_mtim.tv_nsec);
    ck_assert_int_eq(entries_in(g_c), 1);
    snprintf(args, sizeof args, "%s --a cpu --b cpu --quiet", base);
    ck_assert_int_eq(run_cmd("rgpu-diff", args, out, sizeof out, err, sizeof err), 0);
    /* without the folders: the live run's answers are not reproduced */
    snprintf(args, sizeof args, "%s/session-1.rgt --verify --backend cpu", g_rec);
    ck_assert_int_eq(run_cmd("rgpu-replay", args, out, sizeof out, err, sizeof err), 1);
    ck_assert_msg(strstr(out, "mismatch at op 1 (rgpu::download)") && strstr(out, "no folder is exposed"), "%s", out);
    /* the file it read changed: a mismatch at its FROM_FILE, the replay stops naming it */
    write_file(g_d, "a.bin", A_SIZE, 77);
    snprintf(args, sizeof args, "%s --verify --backend cpu", base);
    ck_assert_int_eq(run_cmd("rgpu-replay", args, out, sizeof out, err, sizeof err), 1);
    ck_assert_msg(strstr(out, "mismatch at op 0 (rgpu::from_file)") && strstr(out, "server file changed"), "%s", out);
    ck_assert_msg(strstr(err, "data/a.bin") && strstr(err, "has changed since"), "%s", err);
    snprintf(args, sizeof args, "%s --backend cpu --quiet", base);
    ck_assert_int_eq(run_cmd("rgpu-replay", args, out, sizeof out, err, sizeof err), 1);
    ck_assert_msg(strstr(err, "data/a.bin"), "%s", err);
    snprintf(args, sizeof args, "%s --a cpu --b cpu --quiet", base);
    ck_assert_int_eq(run_cmd("rgpu-diff", args, out, sizeof out, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "data/a.bin") && strstr(err, "the diff stops"), "%s", err);
}
END_TEST

/* The per-user daemon `rgpu-server --stdio` starts reads
 * $XDG_CONFIG_HOME/rgpu/server.conf and RGPU_REMOTE_DATA from the
 * environment that started it. */
START_TEST(daemon_reads_its_config) {
    char state[96], cfg[160], conf[200], env[200];
    snprintf(state, sizeof state, "%s/state", g_root);
    snprintf(cfg, sizeof cfg, "%s/cfg", g_root);
    ck_assert(mkdir(state, 0700) == 0 && mkdir(cfg, 0700) == 0);
    snprintf(conf, sizeof conf, "%s/rgpu", cfg);
    ck_assert(mkdir(conf, 0700) == 0);
    snprintf(conf, sizeof conf, "%s/rgpu/server.conf", cfg);
    FILE *f = fopen(conf, "w");
    fprintf(f, "# rgpu-server's folders\ndata cf=%s\ndata-rw %s\n", g_d, g_c);
    fclose(f);
    snprintf(env, sizeof env, "ro:envd=%s", g_d);
    setenv("XDG_STATE_HOME", state, 1);
    setenv("XDG_CONFIG_HOME", cfg, 1);
    setenv("RGPU_REMOTE_DATA", env, 1);
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    pid_t bridge = fork();
    if (bridge == 0) {
        dup2(sv[1], 0);
        dup2(sv[1], 1);
        close(sv[0]);
        close(sv[1]);
        execl(getenv("RGPU_SERVER_BIN"), "rgpu-server", "--stdio", (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    rgpu_msg_hello m = { .version = RGPU_WIRE_VERSION };
    rgpu_op_table_hash(m.op_table);
    m.token = (const uint8_t *)"x";   /* the bridge puts the daemon's token in */
    m.token_len = 1;
    ck_assert_int_eq(rgpu_msg_hello_send(sv[0], &m), RGPU_OK);
    rgpu_msg_header mh;
    free(expect_msg(sv[0], RGPU_MSG_WELCOME, &mh));
    wc w = { .fd = sv[0] };
    uint8_t *d;
    size_t n;
    char msg[600];
    rgpu_record r = rec_path_op(RGPU_OP_FILE_LIST, "");
    ck_assert_int_eq(wc_do(&w, &r, "", msg, sizeof msg, &d, &n), RGPU_OK);
    static const char *names[3] = { "c", "cf", "envd" };
    static const uint8_t rw[3] = { 1, 0, 0 };
    ck_assert_uint_eq(rgpu_ld32(d), 3);
    size_t o = 4;
    for (int i = 0; i < 3; i++) {
        uint16_t nl = rgpu_ld16(d + o + 2);
        ck_assert_uint_eq(nl, strlen(names[i]));
        ck_assert_int_eq(memcmp(d + o + 24, names[i], nl), 0);
        ck_assert_uint_eq(d[o + 1], rw[i]);
        o += 24u + nl;
    }
    free(d);
    close(sv[0]);
    int st;
    waitpid(bridge, &st, 0);
    /* the daemon says what it exposes and its pid: stopped here */
    srv daemon = { 0 };
    snprintf(daemon.log, sizeof daemon.log, "%s/rgpu/daemon/log", state);
    char want[400];
    snprintf(want, sizeof want, "exposing cf=%s (read-only), c=%s (read-write), envd=%s (read-only)", g_d, g_c, g_d);
    ck_assert_msg(log_has(&daemon, want), "no '%s' in %s", want, daemon.log);
    FILE *lf = fopen(daemon.log, "r");
    char line[2048];
    int pid = 0;
    while (lf && fgets(line, sizeof line, lf)) {
        const char *p = strstr(line, ", pid ");
        if (p) pid = atoi(p + 6);
    }
    if (lf) fclose(lf);
    ck_assert_int_gt(pid, 1);
    ck_assert_int_eq(kill(pid, SIGTERM), 0);
    for (int i = 0; i < 500 && kill(pid, 0) == 0; i++) usleep(10000);
}
END_TEST

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    Suite *s = suite_create("server files");
    TCase *tc = add_tcase(s, "session", 60, setup_tree, teardown_tree);
    ADD_TESTS(tc, stat_and_list, from_file_bytes, from_file_refusals, save_zip_round_trip, save_zip_refusals_and_dry_run);
    tc = add_tcase(s, "server", 60, setup_tree, teardown_tree);
    ADD_TESTS(tc, server_ops_and_options, server_config_file, daemon_reads_its_config, journal_rebuild,
                  journal_checkpoint_after_rewrite, replay_with_data);
    return run_suite(s);
}
