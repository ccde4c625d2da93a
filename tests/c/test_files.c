/* test_files.c — the server folders of replayer/session/files.c: the path
 * rules (each refusal and its message), escapes through "..", absolute
 * paths, symlinks out and a folder swapped for a symlink after the mount was
 * opened, on both resolutions (openat2 and the forced component walk), FIFOs
 * and folders refused without blocking, stat and list, the identity check
 * (one byte changed, the size changed), reads past the end and from a file
 * that shrank, and zips: written by the writer (zip64 forms off and on),
 * read back by the index, by Python's zipfile (CRCs checked) and by
 * torch.load (a real torch.save rewritten entry by entry), refusals of
 * compressed, encrypted and corrupt zips, and random corruptions that must
 * give an error or a sound index, never a crash. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "files.h"
#include "check_util.h"

/* ---------------------------------------------------------------------------
 * A fresh tree per test:
 *   ROOT/data (read-only "data"): a.bin (10 bytes), b.txt, sub/c.bin, fifo,
 *        etc -> /etc, sib -> ../outside, in -> sub (stays inside)
 *   ROOT/ckpt (read-write "ckpt"), ROOT/outside/secret */
static char g_root[256];
static rgpu_files *g_f;
static char why[1024];

static void path_of(char *out, size_t n, const char *rel) { snprintf(out, n, "%s/%s", g_root, rel); }

static void put_file(const char *rel, const void *p, size_t n) {
    char path[512];
    path_of(path, sizeof path, rel);
    FILE *fp = fopen(path, "wb");
    ck_assert_msg(fp != NULL, "create %s: %s", path, strerror(errno));
    ck_assert_uint_eq(fwrite(p, 1, n, fp), n);
    ck_assert_int_eq(fclose(fp), 0);
}

static uint8_t *get_file(const char *rel, size_t *n) {
    char path[512];
    path_of(path, sizeof path, rel);
    FILE *fp = fopen(path, "rb");
    ck_assert_msg(fp != NULL, "open %s: %s", path, strerror(errno));
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)len + 1);
    ck_assert_uint_eq(fread(p, 1, (size_t)len, fp), (size_t)len);
    fclose(fp);
    *n = (size_t)len;
    return p;
}

static void mk(const char *rel) {
    char path[512];
    path_of(path, sizeof path, rel);
    ck_assert_msg(mkdir(path, 0755) == 0, "mkdir %s: %s", path, strerror(errno));
}

static void ln(const char *target, const char *rel) {
    char path[512];
    path_of(path, sizeof path, rel);
    ck_assert_msg(symlink(target, path) == 0, "symlink %s: %s", path, strerror(errno));
}

static void setup(void) {
    snprintf(g_root, sizeof g_root, "%s/rgpu-files-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert(mkdtemp(g_root) != NULL);
    mk("data");
    mk("data/sub");
    mk("ckpt");
    mk("outside");
    put_file("data/a.bin", "0123456789", 10);
    put_file("data/b.txt", "hello", 5);
    put_file("data/sub/c.bin", "inside", 6);
    put_file("outside/secret", "secret", 6);
    char path[512];
    path_of(path, sizeof path, "data/fifo");
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    ln("/etc", "data/etc");
    ln("../outside", "data/sib");
    ln("sub", "data/in");
    g_f = rgpu_files_new();
    char spec[300];
    snprintf(spec, sizeof spec, "%s/data", g_root);
    ck_assert_msg(rgpu_files_add(g_f, spec, false, why, sizeof why) == RGPU_OK, "%s", why);
    snprintf(spec, sizeof spec, "%s/ckpt/", g_root);   /* a trailing '/': the name is still "ckpt" */
    ck_assert_msg(rgpu_files_add(g_f, spec, true, why, sizeof why) == RGPU_OK, "%s", why);
    rgpu_files_force_walk = 0;
    rgpu_zip64_threshold = 0xFFFFFFFFu;
}

static void teardown(void) {
    rgpu_files_free(g_f);
    g_f = NULL;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "test_files: could not remove %s\n", g_root);
}

/* expr must fail with status st and a message containing sub. */
#define CK_FAILS(expr, st, sub) do {                                                                   \
        why[0] = 0;                                                                                    \
        rgpu_status s_ = (expr);                                                                       \
        ck_assert_msg(s_ == (st), "%s: %s, not %s (%s)", #expr, rgpu_status_name(s_), rgpu_status_name(st), why); \
        ck_assert_msg(strstr(why, (sub)) != NULL, "%s: message \"%s\" lacks \"%s\"", #expr, why, (sub));  \
    } while (0)
#define CK_OK(expr) do {                                                                               \
        why[0] = 0;                                                                                    \
        rgpu_status s_ = (expr);                                                                       \
        ck_assert_msg(s_ == RGPU_OK, "%s: %s (%s)", #expr, rgpu_status_name(s_), why);                \
    } while (0)
#define P(s) (s), strlen(s)

static rgpu_status stat_of(const char *p, bool hash, rgpu_file_stat *st) {
    return rgpu_files_stat(g_f, P(p), hash, st, why, sizeof why);
}

/* Reads all of p through a reader (no identity asked). */
static rgpu_status read_all(const char *p, char *buf, size_t cap, size_t *n) {
    rgpu_file_reader *r;
    rgpu_status st = rgpu_files_open(g_f, P(p), NULL, NULL, &r, why, sizeof why);
    if (st != RGPU_OK) return st;
    *n = (size_t)rgpu_file_reader_size(r);
    st = *n <= cap ? rgpu_file_read(r, 0, buf, *n, why, sizeof why) : RGPU_ERR_TOO_LARGE;
    rgpu_file_reader_close(r);
    return st;
}

/* ---------------------------------------------------------------------------
 * Mounts and path rules */
START_TEST(test_add_specs)
{
    ck_assert_int_eq(rgpu_files_count(g_f), 2);
    ck_assert_str_eq(rgpu_files_name(g_f, 0), "data");
    ck_assert_str_eq(rgpu_files_name(g_f, 1), "ckpt");
    ck_assert(!rgpu_files_writable(g_f, 0));
    ck_assert(rgpu_files_writable(g_f, 1));
    char spec[400], dir[300];
    path_of(dir, sizeof dir, "outside");
    CK_FAILS(rgpu_files_add(g_f, "/no/such/folder", false, why, sizeof why), RGPU_ERR_PATH, "no such folder");
    snprintf(spec, sizeof spec, "%s/data/a.bin", g_root);
    CK_FAILS(rgpu_files_add(g_f, spec, false, why, sizeof why), RGPU_ERR_PATH, "is not a folder");
    snprintf(spec, sizeof spec, "data=%s", dir);
    CK_FAILS(rgpu_files_add(g_f, spec, false, why, sizeof why), RGPU_ERR_PATH, "a folder named \"data\" is already exposed");
    snprintf(spec, sizeof spec, "my data=%s", dir);
    CK_FAILS(rgpu_files_add(g_f, spec, false, why, sizeof why), RGPU_ERR_PATH, "must be 1 to 64 of A-Z a-z 0-9 . _ -");
    snprintf(spec, sizeof spec, "..=%s", dir);
    CK_FAILS(rgpu_files_add(g_f, spec, false, why, sizeof why), RGPU_ERR_PATH, "the folder name \"..\"");
    CK_FAILS(rgpu_files_add(g_f, "/", false, why, sizeof why), RGPU_ERR_PATH, "give one with NAME=DIR");
    CK_FAILS(rgpu_files_add(g_f, "x=", true, why, sizeof why), RGPU_ERR_PATH, "--data-rw \"x=\": no folder given");
    ck_assert_int_eq(rgpu_files_count(g_f), 2);   /* nothing added by a refusal */
    snprintf(spec, sizeof spec, "out=%s", dir);
    CK_OK(rgpu_files_add(g_f, spec, false, why, sizeof why));
    ck_assert_str_eq(rgpu_files_name(g_f, 2), "out");
    ck_assert_str_eq(rgpu_files_dir(g_f, 2), dir);
    size_t n = 0;
    char buf[16];
    CK_OK(read_all("out/secret", buf, sizeof buf, &n));
    ck_assert_uint_eq(n, 6);
    ck_assert(!memcmp(buf, "secret", 6));
    for (int i = 3; i < RGPU_FILES_MAX_MOUNTS; i++) {
        snprintf(spec, sizeof spec, "m%d=%s", i, dir);
        CK_OK(rgpu_files_add(g_f, spec, false, why, sizeof why));
    }
    snprintf(spec, sizeof spec, "last=%s", dir);
    CK_FAILS(rgpu_files_add(g_f, spec, false, why, sizeof why), RGPU_ERR_PATH, "at most 16 folders");
}
END_TEST

START_TEST(test_path_rules)
{
    static const struct { const char *path; const char *msg; } bad[] = {
        { "../x", "server path \"../x\": \"..\" is not allowed (paths are NAME/relative/path beneath a folder "
                  "exposed with rgpu-server --data)" },
        { "data/../ckpt/x", "\"..\" is not allowed" },
        { "/etc/passwd", "server path \"/etc/passwd\": absolute paths are not allowed" },
        { "nope/x", "server path \"nope/x\": no exposed folder named \"nope\" (exposed: data, ckpt)" },
        { "data//a.bin", "empty components" },
        { "data/", "empty components" },
        { "data/./a.bin", "\".\" is not allowed" },
        { ".", "\".\" is not allowed" },
        { "data/a\nb", "server path \"data/a\\x0ab\": contains the control byte 0x0a" },
        { "data/a\x7f", "control byte 0x7f" },
        { "", "server path \"\": empty" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CK_FAILS(rgpu_files_check_path(g_f, P(bad[i].path), why, sizeof why), RGPU_ERR_PATH, bad[i].msg);
    CK_FAILS(rgpu_files_check_path(g_f, "data/a\0b", 8, why, sizeof why), RGPU_ERR_PATH, "contains a NUL byte");
    char longp[RGPU_FILES_MAX_PATH + 8];
    memset(longp, 'a', sizeof longp);
    memcpy(longp, "data/", 5);
    CK_FAILS(rgpu_files_check_path(g_f, longp, RGPU_FILES_MAX_PATH + 1, why, sizeof why), RGPU_ERR_PATH,
             "1025 bytes, over the limit of 1024");
    CK_FAILS(rgpu_files_check_path(g_f, longp, 5 + 256, why, sizeof why), RGPU_ERR_PATH,
             "a component of 256 bytes, over the limit of 255");
    CK_OK(rgpu_files_check_path(g_f, longp, 5 + 255, why, sizeof why));
    char deep[400] = "data";
    for (int i = 0; i < RGPU_FILES_MAX_DEPTH; i++) strcat(deep, "/d");   /* 65 components */
    CK_FAILS(rgpu_files_check_path(g_f, P(deep), why, sizeof why), RGPU_ERR_PATH, "more than 64 components");
    deep[strlen(deep) - 2] = 0;
    CK_OK(rgpu_files_check_path(g_f, P(deep), why, sizeof why));
    CK_OK(rgpu_files_check_path(g_f, P("data"), why, sizeof why));
    CK_OK(rgpu_files_check_path(g_f, P("data/..a/.b/a..b/x y/\xc3\xa9t\xc3\xa9"), why, sizeof why));
    /* nothing exposed: every path refused, naming the flags */
    rgpu_files *none = rgpu_files_new();
    CK_FAILS(rgpu_files_check_path(none, P("data/a.bin"), why, sizeof why), RGPU_ERR_PATH,
             "no folder is exposed (rgpu-server --data DIR / --data-rw DIR)");
    rgpu_file_stat st;
    CK_FAILS(rgpu_files_stat(none, P("data/a.bin"), false, &st, why, sizeof why), RGPU_ERR_PATH, "no folder is exposed");
    rgpu_files_free(none);
    /* the writers refuse a read-only folder, dry runs too */
    rgpu_zip_writer *w;
    for (int dry = 0; dry < 2; dry++)
        CK_FAILS(rgpu_files_zip_begin(g_f, P("data/x.pt"), dry, &w, why, sizeof why), RGPU_ERR_PATH,
                 "server path \"data/x.pt\": the folder \"data\" is read-only (exposed with --data; --data-rw to write)");
}
END_TEST

/* ---------------------------------------------------------------------------
 * Escapes, on both resolutions */
static const char *walk_or(const char *beneath, const char *walk) { return rgpu_files_force_walk ? walk : beneath; }

START_TEST(test_escapes)
{
    rgpu_files_force_walk = _i;
    const char *out = walk_or("resolves outside the exposed folder data (a symlink or mount point leads out)",
                              "is a symlink (symlinks are not followed on this kernel)");
    rgpu_file_stat st;
    char buf[64];
    size_t n;
    CK_FAILS(stat_of("data/etc/passwd", false, &st), RGPU_ERR_PATH, out);
    CK_FAILS(read_all("data/etc/passwd", buf, sizeof buf, &n), RGPU_ERR_PATH, out);
    CK_FAILS(read_all("data/sib/secret", buf, sizeof buf, &n), RGPU_ERR_PATH, out);
    CK_FAILS(stat_of("data/sib", false, &st), RGPU_ERR_PATH, out);
    if (_i) CK_FAILS(stat_of("data/sib/secret", false, &st), RGPU_ERR_PATH, "\"data/sib\" is a symlink");
    rgpu_file_entry *e;
    size_t count;
    CK_FAILS(rgpu_files_list(g_f, P("data/etc"), &e, &count, why, sizeof why), RGPU_ERR_PATH, out);
    /* a symlink that stays inside: followed by openat2, refused by the walk */
    if (_i) {
        CK_FAILS(read_all("data/in/c.bin", buf, sizeof buf, &n), RGPU_ERR_PATH, "\"data/in\" is a symlink");
    } else {
        CK_OK(read_all("data/in/c.bin", buf, sizeof buf, &n));
        ck_assert_uint_eq(n, 6);
        ck_assert(!memcmp(buf, "inside", 6));
    }
    /* mid-run: a sub-folder swapped for a symlink to outside after the mount was opened */
    CK_OK(read_all("data/sub/c.bin", buf, sizeof buf, &n));
    char a[512], b[512];
    path_of(a, sizeof a, "data/sub");
    path_of(b, sizeof b, "data/sub.old");
    ck_assert_int_eq(rename(a, b), 0);
    put_file("outside/c.bin", "leaked", 6);
    ln("../outside", "data/sub");
    CK_FAILS(read_all("data/sub/c.bin", buf, sizeof buf, &n), RGPU_ERR_PATH, out);
    CK_FAILS(read_all("data/sub/secret", buf, sizeof buf, &n), RGPU_ERR_PATH, out);
    /* and the exposed folder itself swapped for a symlink: the held descriptor still reads the old one */
    path_of(a, sizeof a, "data");
    path_of(b, sizeof b, "data.old");
    ck_assert_int_eq(rename(a, b), 0);
    ln("outside", "data");
    CK_OK(read_all("data/a.bin", buf, sizeof buf, &n));
    ck_assert_uint_eq(n, 10);
    ck_assert(!memcmp(buf, "0123456789", 10));
    CK_FAILS(read_all("data/secret", buf, sizeof buf, &n), RGPU_ERR_PATH, "no such file");
    /* the writer's folder resolves the same way */
    rgpu_zip_writer *w;
    ln("../outside", "ckpt/out");
    CK_FAILS(rgpu_files_zip_begin(g_f, P("ckpt/out/x.pt"), false, &w, why, sizeof why), RGPU_ERR_PATH,
             walk_or("resolves outside the exposed folder ckpt", "\"ckpt/out\" is a symlink"));
}
END_TEST

START_TEST(test_not_files)
{
    rgpu_files_force_walk = _i;
    rgpu_file_stat st;
    char buf[64];
    size_t n;
    /* a FIFO: refused at once, never blocking on a writer */
    CK_FAILS(read_all("data/fifo", buf, sizeof buf, &n), RGPU_ERR_PATH, "server path \"data/fifo\": is not a regular file");
    CK_OK(stat_of("data/fifo", true, &st));
    ck_assert_int_eq(st.kind, RGPU_FILE_OTHER);
    ck_assert_uint_eq(st.size, 0);
    rgpu_zip_index z;
    CK_FAILS(rgpu_files_zip_index(g_f, P("data/fifo"), &z, why, sizeof why), RGPU_ERR_PATH, "is not a regular file");
    CK_FAILS(read_all("data/sub", buf, sizeof buf, &n), RGPU_ERR_PATH, "server path \"data/sub\": is a folder, not a file");
    CK_FAILS(read_all("data", buf, sizeof buf, &n), RGPU_ERR_PATH, "is a folder, not a file");
    CK_FAILS(read_all("data/missing", buf, sizeof buf, &n), RGPU_ERR_PATH, "server path \"data/missing\": no such file");
    CK_FAILS(read_all("data/a.bin/x", buf, sizeof buf, &n), RGPU_ERR_PATH, "not a folder");
    rgpu_file_entry *e;
    size_t count;
    CK_FAILS(rgpu_files_list(g_f, P("data/a.bin"), &e, &count, why, sizeof why), RGPU_ERR_PATH, "not a folder");
    /* the writer: a folder, a symlink or a FIFO at the last component, the folder itself */
    rgpu_zip_writer *w;
    mk("ckpt/dir");
    ln("../outside/secret", "ckpt/link");
    char path[512];
    path_of(path, sizeof path, "ckpt/fifo");
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    CK_FAILS(rgpu_files_zip_begin(g_f, P("ckpt/dir"), false, &w, why, sizeof why), RGPU_ERR_PATH, "is a folder, not a file");
    CK_FAILS(rgpu_files_zip_begin(g_f, P("ckpt/link"), false, &w, why, sizeof why), RGPU_ERR_PATH, "is a symlink");
    CK_FAILS(rgpu_files_zip_begin(g_f, P("ckpt/fifo"), false, &w, why, sizeof why), RGPU_ERR_PATH, "is not a regular file");
    CK_FAILS(rgpu_files_zip_begin(g_f, P("ckpt"), false, &w, why, sizeof why), RGPU_ERR_PATH, "the exposed folder itself");
    CK_FAILS(rgpu_files_zip_begin(g_f, P("ckpt/nope/x.pt"), false, &w, why, sizeof why), RGPU_ERR_PATH, "no such file");
    size_t sn;
    uint8_t *secret = get_file("outside/secret", &sn);
    ck_assert(sn == 6 && !memcmp(secret, "secret", 6));
    free(secret);
}
END_TEST

/* ---------------------------------------------------------------------------
 * stat, list */
START_TEST(test_stat_list)
{
    rgpu_files_force_walk = _i;
    rgpu_file_stat st;
    CK_OK(stat_of("data/a.bin", true, &st));
    ck_assert_int_eq(st.kind, RGPU_FILE_REG);
    ck_assert(!st.writable);
    ck_assert_uint_eq(st.size, 10);
    rgpu_hash want = rgpu_hash_bytes("0123456789", 10);
    ck_assert(rgpu_hash_eq(&st.hash, &want));
    struct stat os;
    char path[512];
    path_of(path, sizeof path, "data/a.bin");
    ck_assert_int_eq(stat(path, &os), 0);
    ck_assert_int_eq(st.mtime_ns, (int64_t)os.st_mtim.tv_sec * 1000000000 + os.st_mtim.tv_nsec);
    CK_OK(stat_of("data/b.txt", false, &st));
    rgpu_hash zero = { { 0 } };
    ck_assert(rgpu_hash_eq(&st.hash, &zero));   /* not asked */
    CK_OK(stat_of("data/sub", true, &st));
    ck_assert_int_eq(st.kind, RGPU_FILE_DIR);
    ck_assert(rgpu_hash_eq(&st.hash, &zero));
    CK_OK(stat_of("ckpt", false, &st));
    ck_assert_int_eq(st.kind, RGPU_FILE_DIR);
    ck_assert(st.writable);
    put_file("data/empty", "", 0);
    CK_OK(stat_of("data/empty", true, &st));
    want = rgpu_hash_bytes("", 0);
    ck_assert(st.size == 0 && rgpu_hash_eq(&st.hash, &want));

    rgpu_file_entry *e;
    size_t n;
    CK_OK(rgpu_files_list(g_f, P("data"), &e, &n, why, sizeof why));
    static const struct { const char *name; int kind; uint64_t size; } want_e[] = {
        { "a.bin", RGPU_FILE_REG, 10 }, { "b.txt", RGPU_FILE_REG, 5 }, { "empty", RGPU_FILE_REG, 0 },
        { "etc", RGPU_FILE_OTHER, 0 }, { "fifo", RGPU_FILE_OTHER, 0 }, { "in", RGPU_FILE_DIR, 0 },
        { "sib", RGPU_FILE_OTHER, 0 }, { "sub", RGPU_FILE_DIR, 0 },
    };
    ck_assert_uint_eq(n, sizeof want_e / sizeof want_e[0]);
    for (size_t i = 0; i < n; i++) {
        int kind = want_e[i].kind;
        if (_i && !strcmp(want_e[i].name, "in")) kind = RGPU_FILE_OTHER;   /* the walk follows no symlink */
        ck_assert_str_eq(e[i].name, want_e[i].name);
        ck_assert_msg(e[i].kind == kind, "%s: kind %d, not %d", e[i].name, e[i].kind, kind);
        ck_assert_uint_eq(e[i].size, want_e[i].size);
        ck_assert(!e[i].writable);
    }
    free(e);
    CK_OK(rgpu_files_list(g_f, P("data/sub"), &e, &n, why, sizeof why));
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(e[0].name, "c.bin");
    ck_assert_uint_eq(e[0].size, 6);
    free(e);
    put_file("ckpt/Z", "z", 1);        /* byte order: 'Z' < 'a' < '\xc3' */
    put_file("ckpt/a", "aa", 2);
    put_file("ckpt/\xc3\xa9", "e", 1);
    CK_OK(rgpu_files_list(g_f, P("ckpt"), &e, &n, why, sizeof why));
    ck_assert_uint_eq(n, 3);
    ck_assert_str_eq(e[0].name, "Z");
    ck_assert_str_eq(e[1].name, "a");
    ck_assert_str_eq(e[2].name, "\xc3\xa9");
    ck_assert(e[0].writable && e[1].size == 2);
    free(e);
    CK_OK(rgpu_files_list(g_f, "", 0, &e, &n, why, sizeof why));   /* the exposed folders, sorted */
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(e[0].name, "ckpt");
    ck_assert_str_eq(e[1].name, "data");
    ck_assert(e[0].kind == RGPU_FILE_DIR && e[0].writable && !e[1].writable);
    free(e);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Identity and reads */
START_TEST(test_identity)
{
    uint64_t size = 10;
    rgpu_hash h = rgpu_hash_bytes("0123456789", 10);
    rgpu_file_reader *r;
    CK_OK(rgpu_files_open(g_f, P("data/a.bin"), &size, &h, &r, why, sizeof why));
    char buf[16];
    CK_OK(rgpu_file_read(r, 3, buf, 4, why, sizeof why));
    ck_assert(!memcmp(buf, "3456", 4));
    CK_OK(rgpu_file_read(r, 10, buf, 0, why, sizeof why));
    CK_FAILS(rgpu_file_read(r, 8, buf, 12, why, sizeof why), RGPU_ERR_OUT_OF_BOUNDS,
             "reads bytes [8, 20) of \"data/a.bin\", which has 10 bytes");
    CK_FAILS(rgpu_file_read(r, UINT64_MAX, buf, 2, why, sizeof why), RGPU_ERR_OUT_OF_BOUNDS, "which has 10 bytes");
    rgpu_file_reader_close(r);
    /* one byte changed, same size, within the same second (the cache must not answer) */
    put_file("data/a.bin", "0123456780", 10);
    rgpu_hash now = rgpu_hash_bytes("0123456780", 10);
    char then_hx[33], now_hx[33], msg[256];
    rgpu_hash_hex(&h, then_hx);
    rgpu_hash_hex(&now, now_hx);
    snprintf(msg, sizeof msg, "server file \"data/a.bin\" changed since it was recorded: 10 bytes, XXH3 %s then; "
             "10 bytes, XXH3 %s now", then_hx, now_hx);
    CK_FAILS(rgpu_files_open(g_f, P("data/a.bin"), &size, &h, &r, why, sizeof why), RGPU_ERR_CHANGED, msg);
    CK_OK(rgpu_files_open(g_f, P("data/a.bin"), &size, &now, &r, why, sizeof why));
    rgpu_file_reader_close(r);
    /* the size changed */
    put_file("data/a.bin", "012345678901", 12);
    now = rgpu_hash_bytes("012345678901", 12);
    rgpu_hash_hex(&now, now_hx);
    snprintf(msg, sizeof msg, "10 bytes, XXH3 %s then; 12 bytes, XXH3 %s now", then_hx, now_hx);
    CK_FAILS(rgpu_files_open(g_f, P("data/a.bin"), &size, &h, &r, why, sizeof why), RGPU_ERR_CHANGED, msg);
    CK_FAILS(rgpu_files_open(g_f, P("data/a.bin"), &size, NULL, &r, why, sizeof why), RGPU_ERR_CHANGED, "10 bytes then; 12 bytes");
    /* hashes agree between stat and open, and with the cache warm */
    rgpu_file_stat st;
    for (int k = 0; k < 2; k++) {
        CK_OK(stat_of("data/a.bin", true, &st));
        ck_assert(rgpu_hash_eq(&st.hash, &now));
    }
    /* a file that shrinks after it was opened */
    uint64_t s12 = 12;
    CK_OK(rgpu_files_open(g_f, P("data/a.bin"), &s12, &now, &r, why, sizeof why));
    char path[512];
    path_of(path, sizeof path, "data/a.bin");
    ck_assert_int_eq(truncate(path, 4), 0);
    CK_FAILS(rgpu_file_read(r, 0, buf, 12, why, sizeof why), RGPU_ERR_CHANGED,
             "server file \"data/a.bin\" changed while it was read: it ended at byte 4, 12 bytes when opened");
    rgpu_file_reader_close(r);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Zips */
typedef struct zent { const char *name; size_t size; uint8_t *data; } zent;

static void fill(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
}

/* Writes the entries to path (data in pieces of piece bytes): the size and hash. */
static void write_zip(const char *path, bool dry, zent *z, int n, size_t piece, uint64_t *size, rgpu_hash *h) {
    rgpu_zip_writer *w;
    CK_OK(rgpu_files_zip_begin(g_f, P(path), dry, &w, why, sizeof why));
    for (int i = 0; i < n; i++) {
        CK_OK(rgpu_zip_entry_begin(w, P(z[i].name), z[i].size, why, sizeof why));
        for (size_t o = 0; o < z[i].size;) {
            size_t k = z[i].size - o < piece ? z[i].size - o : piece;
            CK_OK(rgpu_zip_data(w, z[i].data + o, k, why, sizeof why));
            o += k;
        }
    }
    CK_OK(rgpu_zip_commit(w, size, h, why, sizeof why));
}

static bool have_python(const char *module) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "python3 -c 'import %s' >/dev/null 2>&1", module);
    return system(cmd) == 0;
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* No temporary file left in ckpt. */
static void no_tmp_left(void) {
    rgpu_file_entry *e;
    size_t n;
    CK_OK(rgpu_files_list(g_f, P("ckpt"), &e, &n, why, sizeof why));
    for (size_t i = 0; i < n; i++) ck_assert_msg(!strstr(e[i].name, ".rgpu-tmp-"), "left behind: %s", e[i].name);
    free(e);
}

START_TEST(test_zip_roundtrip)
{
    rgpu_zip64_threshold = _i ? 0 : 0xFFFFFFFFu;
    static uint8_t pkl[100], big[3 << 20], ver[2] = { '3', '\n' };
    fill(pkl, sizeof pkl, 1);
    fill(big, sizeof big, 2);
    zent z[] = { { "archive/data.pkl", sizeof pkl, pkl }, { "archive/data/0", sizeof big, big },
                 { "archive/empty", 0, NULL }, { "archive/version", 2, ver },
                 { "archive/\xc3\xa9t\xc3\xa9", 7, pkl + 3 } };
    int nz = (int)(sizeof z / sizeof z[0]);
    uint64_t size, dsize;
    rgpu_hash h, dh;
    write_zip("ckpt/m.pt", false, z, nz, 1000003, &size, &h);
    size_t n;
    uint8_t *bytes = get_file("ckpt/m.pt", &n);
    ck_assert_uint_eq(n, size);
    rgpu_hash fh = rgpu_hash_bytes(bytes, n);
    ck_assert(rgpu_hash_eq(&fh, &h));
    struct stat st;
    char path[512];
    path_of(path, sizeof path, "ckpt/m.pt");
    ck_assert_int_eq(stat(path, &st), 0);
    mode_t um = umask(0);
    umask(um);
    ck_assert_int_eq(st.st_mode & 0777, 0644 & ~um);
    /* the same entries, other pieces, a dry run: the same bytes */
    write_zip("ckpt/m2.pt", false, z, nz, 1 << 20, &size, &h);
    size_t n2;
    uint8_t *bytes2 = get_file("ckpt/m2.pt", &n2);
    ck_assert(n2 == n && !memcmp(bytes, bytes2, n));
    free(bytes2);
    write_zip("ckpt/dry.pt", true, z, nz, 8 << 20, &dsize, &dh);
    ck_assert(dsize == size && rgpu_hash_eq(&dh, &h));
    rgpu_file_stat fs;
    CK_FAILS(stat_of("ckpt/dry.pt", false, &fs), RGPU_ERR_PATH, "no such file");
    no_tmp_left();
    /* the index: same names, sizes, data at 64-byte aligned offsets */
    rgpu_zip_index ix;
    CK_OK(rgpu_files_zip_index(g_f, P("ckpt/m.pt"), &ix, why, sizeof why));
    ck_assert_uint_eq(ix.count, (size_t)nz);
    ck_assert(rgpu_hash_eq(&ix.st.hash, &h) && ix.st.size == size && ix.st.writable);
    for (int i = 0; i < nz; i++) {
        ck_assert_str_eq(ix.e[i].name, z[i].name);
        ck_assert_uint_eq(ix.e[i].size, z[i].size);
        ck_assert_msg(ix.e[i].offset % 64 == 0, "%s at %llu", z[i].name, (unsigned long long)ix.e[i].offset);
        ck_assert(ix.e[i].offset + z[i].size <= n);
        ck_assert(z[i].size == 0 || !memcmp(bytes + ix.e[i].offset, z[i].data, z[i].size));
    }
    rgpu_zip_index_free(&ix);
    free(bytes);
    /* Python's zipfile: CRCs, names, bytes */
    if (have_python("zipfile")) {
        put_file("ckpt/pkl.bin", pkl, sizeof pkl);
        put_file("ckpt/big.bin", big, sizeof big);
        ck_assert_int_eq(sh("cd '%s/ckpt' && python3 -c '\n"
                            "import zipfile\n"
                            "z = zipfile.ZipFile(\"m.pt\")\n"
                            "assert z.testzip() is None\n"
                            "names = [i.filename for i in z.infolist()]\n"
                            "assert names == [\"archive/data.pkl\", \"archive/data/0\", \"archive/empty\", \"archive/version\", "
                            "\"archive/\\u00e9t\\u00e9\"], names\n"
                            "assert z.read(\"archive/data.pkl\") == open(\"pkl.bin\", \"rb\").read()\n"
                            "assert z.read(\"archive/data/0\") == open(\"big.bin\", \"rb\").read()\n"
                            "assert z.read(\"archive/version\") == b\"3\\n\" and z.read(\"archive/empty\") == b\"\"\n"
                            "assert all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in z.infolist())\n'", g_root), 0);
    } else {
        fprintf(stderr, "test_files: no python3: zipfile check skipped\n");
    }
}
END_TEST

START_TEST(test_zip_replace)
{
    /* an existing file replaced whole; a failed write leaves it and no temporary file */
    put_file("ckpt/m.pt", "old", 3);
    uint8_t d[10] = "abcdefghij";
    zent z[] = { { "archive/x", 10, d } };
    uint64_t size;
    rgpu_hash h;
    write_zip("ckpt/m.pt", false, z, 1, 3, &size, &h);
    rgpu_zip_index ix;
    CK_OK(rgpu_files_zip_index(g_f, P("ckpt/m.pt"), &ix, why, sizeof why));   /* the hash from the writer's seed */
    ck_assert(ix.count == 1 && ix.st.size == size && rgpu_hash_eq(&ix.st.hash, &h));
    rgpu_zip_index_free(&ix);
    rgpu_zip_writer *w;
    CK_OK(rgpu_files_zip_begin(g_f, P("ckpt/m.pt"), false, &w, why, sizeof why));
    CK_OK(rgpu_zip_entry_begin(w, P("a"), 4, why, sizeof why));
    CK_FAILS(rgpu_zip_data(w, d, 5, why, sizeof why), RGPU_ERR_BAD_ARG, "entry a: 1 bytes given past its 4");
    no_tmp_left();
    CK_FAILS(rgpu_zip_entry_begin(w, P("b"), 1, why, sizeof why), RGPU_ERR_BAD_ARG, "the writer failed earlier");
    rgpu_zip_abort(w);
    CK_OK(rgpu_files_zip_begin(g_f, P("ckpt/m.pt"), false, &w, why, sizeof why));
    CK_OK(rgpu_zip_entry_begin(w, P("a"), 4, why, sizeof why));
    CK_OK(rgpu_zip_data(w, d, 3, why, sizeof why));
    CK_FAILS(rgpu_zip_entry_begin(w, P("b"), 1, why, sizeof why), RGPU_ERR_BAD_ARG,
             "entry \"b\" began with 1 bytes of the one before still missing");
    rgpu_zip_abort(w);
    CK_OK(rgpu_files_zip_begin(g_f, P("ckpt/m.pt"), false, &w, why, sizeof why));
    CK_OK(rgpu_zip_entry_begin(w, P("a"), 4, why, sizeof why));
    CK_FAILS(rgpu_zip_commit(w, &size, &h, why, sizeof why), RGPU_ERR_BAD_ARG, "entry a is missing 4 of its 4 bytes");
    CK_OK(rgpu_files_zip_begin(g_f, P("ckpt/m.pt"), false, &w, why, sizeof why));
    CK_FAILS(rgpu_zip_entry_begin(w, "a\0b", 3, 1, why, sizeof why), RGPU_ERR_BAD_ARG, "1 to 65535 bytes, no NUL");
    rgpu_zip_abort(w);
    CK_OK(rgpu_files_zip_begin(g_f, P("ckpt/m.pt"), false, &w, why, sizeof why));
    CK_OK(rgpu_zip_entry_begin(w, P("a"), 1, why, sizeof why));
    rgpu_zip_abort(w);                 /* abort: the old file stays */
    no_tmp_left();
    CK_OK(rgpu_files_zip_index(g_f, P("ckpt/m.pt"), &ix, why, sizeof why));
    ck_assert(ix.count == 1 && !strcmp(ix.e[0].name, "archive/x") && rgpu_hash_eq(&ix.st.hash, &h));
    rgpu_zip_index_free(&ix);
    /* an empty zip */
    write_zip("ckpt/none.pt", false, z, 0, 1, &size, &h);
    ck_assert_uint_eq(size, 22);
    CK_OK(rgpu_files_zip_index(g_f, P("ckpt/none.pt"), &ix, why, sizeof why));
    ck_assert_uint_eq(ix.count, 0);
    rgpu_zip_index_free(&ix);
}
END_TEST

/* A valid zip's bytes (zip64 forms everywhere when z64). */
static uint8_t *sample_zip(bool z64, size_t *n) {
    rgpu_zip64_threshold = z64 ? 0 : 0xFFFFFFFFu;
    static uint8_t a[300], b[1000];
    fill(a, sizeof a, 5);
    fill(b, sizeof b, 6);
    zent z[] = { { "archive/data.pkl", sizeof a, a }, { "archive/data/0", sizeof b, b }, { "archive/version", 2, a } };
    uint64_t size;
    rgpu_hash h;
    write_zip("ckpt/sample.pt", false, z, 3, 64, &size, &h);
    rgpu_zip64_threshold = 0xFFFFFFFFu;
    return get_file("ckpt/sample.pt", n);
}

/* Offset of the central directory record of entry i (walking from the EOCD's cd offset). */
static size_t central_of(const uint8_t *p, size_t n, int i) {
    size_t at = n - 22;
    ck_assert_uint_eq(rgpu_ld32(p + at), 0x06054b50u);
    size_t c = rgpu_ld32(p + at + 16);
    for (; i > 0; i--) c += 46 + (size_t)(p[c + 28] | p[c + 29] << 8) + (p[c + 30] | p[c + 31] << 8);
    ck_assert_uint_eq(rgpu_ld32(p + c), 0x02014b50u);
    return c;
}

START_TEST(test_zip_refusals)
{
    size_t n;
    uint8_t *p = sample_zip(false, &n);
    rgpu_zip_index ix;
    uint8_t *q = malloc(n);
    struct { const char *what; size_t at; uint8_t v; const char *msg; } cases[] = {
        { "method", central_of(p, n, 1) + 10, 8,
          "entry \"archive/data/0\" is compressed (method 8); only stored entries (torch.save's) are read in place" },
        { "encrypted", central_of(p, n, 0) + 8, 0x09, "entry \"archive/data.pkl\" is encrypted" },
        { "local sig", rgpu_ld32(p + central_of(p, n, 1) + 42), 'X', "entry \"archive/data/0\": no local header" },
        { "size", central_of(p, n, 2) + 24, 0xFF, "a stored entry of" },
        { "eocd sig", n - 22, 'X', "not a zip (no end of central directory record)" },
        { "cd offset", n - 22 + 19, 0x40, "does not lie before its end record" },
        { "name nul", central_of(p, n, 0) + 46 + 3, 0, "its name contains a NUL byte" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        memcpy(q, p, n);
        q[cases[k].at] = cases[k].v;
        put_file("ckpt/bad.pt", q, n);
        why[0] = 0;
        rgpu_status st = rgpu_files_zip_index(g_f, P("ckpt/bad.pt"), &ix, why, sizeof why);
        ck_assert_msg(st == RGPU_ERR_BAD_ARG && strstr(why, cases[k].msg) && strstr(why, "zip \"ckpt/bad.pt\""),
                      "%s: %s: %s", cases[k].what, rgpu_status_name(st), why);
    }
    put_file("ckpt/bad.pt", "PK", 2);
    CK_FAILS(rgpu_files_zip_index(g_f, P("ckpt/bad.pt"), &ix, why, sizeof why), RGPU_ERR_BAD_ARG,
             "not a zip (2 bytes, shorter than its end record)");
    /* a zip with a deflated entry, as Python writes one */
    if (have_python("zipfile")) {
        ck_assert_int_eq(sh("cd '%s/ckpt' && python3 -c 'import zipfile; z = zipfile.ZipFile(\"defl.zip\", \"w\"); "
                            "z.writestr(\"a\", b\"x\" * 1000, compress_type=zipfile.ZIP_DEFLATED); z.close()'", g_root), 0);
        CK_FAILS(rgpu_files_zip_index(g_f, P("ckpt/defl.zip"), &ix, why, sizeof why), RGPU_ERR_BAD_ARG,
                 "entry \"a\" is compressed (method 8)");
    }
    free(q);
    free(p);
}
END_TEST

/* Random corruptions of a valid zip: an error with a message, or an index
 * whose every entry lies inside the file; never a crash (run it under
 * ASan/UBSan: make test-asan). */
START_TEST(test_zip_fuzz)
{
    size_t n;
    uint8_t *p = sample_zip(_i, &n);
    uint8_t *q = malloc(n);
    uint32_t seed = 12345u + (uint32_t)_i;
    int ok = 0, bad = 0;
    for (int it = 0; it < 1500; it++) {
        memcpy(q, p, n);
        size_t len = n;
        seed = seed * 1664525u + 1013904223u;
        int flips = 1 + (int)(seed >> 29);
        for (int k = 0; k < flips; k++) {
            seed = seed * 1664525u + 1013904223u;
            /* most corruptions in the directory and end records, where the parser looks */
            size_t at = (seed >> 8) % 4 ? n - 1 - (seed >> 12) % 400 : (seed >> 12) % n;
            seed = seed * 1664525u + 1013904223u;
            q[at] = (seed >> 28) < 4 ? 0xFF : (seed >> 28) < 6 ? 0 : (uint8_t)(seed >> 16);
        }
        if (it % 10 == 0) len -= (seed >> 4) % n;   /* truncated */
        put_file("ckpt/fz.pt", q, len);
        rgpu_zip_index ix;
        why[0] = 0;
        rgpu_status st = rgpu_files_zip_index(g_f, P("ckpt/fz.pt"), &ix, why, sizeof why);
        if (st == RGPU_OK) {
            ok++;
            for (size_t i = 0; i < ix.count; i++) ck_assert(ix.e[i].offset + ix.e[i].size <= len);
            rgpu_zip_index_free(&ix);
        } else {
            bad++;
            ck_assert_msg(st == RGPU_ERR_BAD_ARG || st == RGPU_ERR_TOO_LARGE, "%s: %s", rgpu_status_name(st), why);
            ck_assert(strstr(why, "zip \"ckpt/fz.pt\"") != NULL);
        }
    }
    ck_assert(ok > 0 && bad > 0);
    free(q);
    free(p);
}
END_TEST

/* A real torch.save, read by the index (torch's own zip64 end records),
 * rewritten entry by entry by the writer, must torch.load to the same. */
START_TEST(test_zip_torch)
{
    if (!have_python("torch")) {
        fprintf(stderr, "test_files: no torch: the torch.save/torch.load check skipped\n");
        return;
    }
    ck_assert_int_eq(sh("cd '%s/ckpt' && python3 -c 'import torch; torch.manual_seed(0); "
                        "torch.save({\"w\": torch.randn(3, 5), \"b\": torch.arange(7, dtype=torch.int64), "
                        "\"h\": torch.randn(4).half(), \"step\": 3, \"view\": torch.randn(10)[2:6]}, \"orig.pt\")'", g_root), 0);
    rgpu_zip_index ix;
    CK_OK(rgpu_files_zip_index(g_f, P("ckpt/orig.pt"), &ix, why, sizeof why));
    ck_assert_uint_ge(ix.count, 5);
    size_t n;
    uint8_t *orig = get_file("ckpt/orig.pt", &n);
    rgpu_hash oh = rgpu_hash_bytes(orig, n);
    ck_assert(ix.st.size == n && rgpu_hash_eq(&ix.st.hash, &oh));
    zent z[64];
    ck_assert_uint_le(ix.count, 64);
    bool saw_pkl = false;
    for (size_t i = 0; i < ix.count; i++) {
        z[i] = (zent){ ix.e[i].name, (size_t)ix.e[i].size, orig + ix.e[i].offset };
        saw_pkl |= !strcmp(ix.e[i].name, "orig/data.pkl");
    }
    ck_assert(saw_pkl);
    uint64_t size;
    rgpu_hash h;
    write_zip("ckpt/mine.pt", false, z, (int)ix.count, 5, &size, &h);
    rgpu_zip64_threshold = 0;          /* and with every size and offset in the zip64 form */
    write_zip("ckpt/mine64.pt", false, z, (int)ix.count, 5, &size, &h);
    rgpu_zip_index_free(&ix);
    free(orig);
    ck_assert_int_eq(sh("cd '%s/ckpt' && python3 -c '\n"
                        "import torch, zipfile\n"
                        "a = torch.load(\"orig.pt\")\n"
                        "for f in (\"mine.pt\", \"mine64.pt\"):\n"
                        "    assert zipfile.ZipFile(f).testzip() is None\n"
                        "    b = torch.load(f); c = torch.load(f, mmap=True)\n"
                        "    assert a.keys() == b.keys() == c.keys() and a[\"step\"] == b[\"step\"] == c[\"step\"] == 3\n"
                        "    for k in (\"w\", \"b\", \"h\", \"view\"):\n"
                        "        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) and torch.equal(a[k], c[k]), (f, k)\n"
                        "'", g_root), 0);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("files");
    TCase *tc = add_tcase(s, "paths", 0, setup, teardown);
    ADD_TESTS(tc, test_add_specs, test_path_rules);
    tc = add_tcase(s, "resolve", 0, setup, teardown);
    tcase_add_loop_test(tc, test_escapes, 0, 2);      /* 0: openat2, 1: the walk */
    tcase_add_loop_test(tc, test_not_files, 0, 2);
    tcase_add_loop_test(tc, test_stat_list, 0, 2);
    tc = add_tcase(s, "read", 0, setup, teardown);
    ADD_TESTS(tc, test_identity);
    tc = add_tcase(s, "zip", 60, setup, teardown);
    tcase_add_loop_test(tc, test_zip_roundtrip, 0, 2);   /* 1: every size and offset in the zip64 form */
    ADD_TESTS(tc, test_zip_replace, test_zip_refusals);
    tcase_add_loop_test(tc, test_zip_fuzz, 0, 2);
    ADD_TESTS(tc, test_zip_torch);
    return s;
}

int main(void) { return run_suite(suite()); }
