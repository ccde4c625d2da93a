/* files.c — the server folders of files.h: mounts, path rules, resolution
 * beneath a mount's descriptor, stat/list/read with the identity check,
 * the XXH3-128 identity cache, the zip index reader and the zip writer
 * (torch.save's layout: stored entries, data 64-byte aligned, data
 * descriptors, zip64 where needed).
 *
 * Every byte of a zip read here is untrusted: each offset, size and count is
 * checked against the file before it is used. */
#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "op/error.h"

int rgpu_files_force_walk;
uint64_t rgpu_zip64_threshold = 0xFFFFFFFFu;

#define FAIL(st, ...) rgpu_op_fail(why, whylen, (st), __VA_ARGS__)
#define HINT "paths are NAME/relative/path beneath a folder exposed with rgpu-server --data"
#define QLEN 320            /* a quoted path in a message: long ones are cut with "..." */

/* ---------------------------------------------------------------------------
 * Mounts */
typedef struct mount {
    char name[65];
    char *dir;
    int fd;                 /* O_PATH | O_DIRECTORY, held for the process's life */
    bool writable;
} mount;

struct rgpu_files {
    int n;
    mount m[RGPU_FILES_MAX_MOUNTS];
};

rgpu_files *rgpu_files_new(void) { return calloc(1, sizeof(rgpu_files)); }

void rgpu_files_free(rgpu_files *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) {
        close(f->m[i].fd);
        free(f->m[i].dir);
    }
    free(f);
}

int rgpu_files_count(const rgpu_files *f) { return f ? f->n : 0; }
const char *rgpu_files_name(const rgpu_files *f, int i) { return f->m[i].name; }
const char *rgpu_files_dir(const rgpu_files *f, int i) { return f->m[i].dir; }
bool rgpu_files_writable(const rgpu_files *f, int i) { return f->m[i].writable; }

static bool name_char_ok(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

rgpu_status rgpu_files_add(rgpu_files *f, const char *spec, bool writable, char *why, size_t whylen) {
    const char *flag = writable ? "--data-rw" : "--data";
    const char *eq = strchr(spec, '=');
    /* NAME=DIR when what comes before the first '=' has no '/'; else all of it is DIR */
    bool named = eq && memchr(spec, '/', (size_t)(eq - spec)) == NULL;
    const char *dir = named ? eq + 1 : spec;
    if (!*dir) return FAIL(RGPU_ERR_PATH, "%s \"%s\": no folder given (%s [NAME=]DIR)", flag, spec, flag);
    char name[80];
    if (named) {
        snprintf(name, sizeof name, "%.*s", (int)(eq - spec < 79 ? eq - spec : 79), spec);
    } else {
        size_t e = strlen(dir);
        while (e > 1 && dir[e - 1] == '/') e--;
        size_t b = e;
        while (b > 0 && dir[b - 1] != '/') b--;
        snprintf(name, sizeof name, "%.*s", (int)(e - b < 79 ? e - b : 79), dir + b);
    }
    size_t nl = named ? (size_t)(eq - spec) : strlen(name);
    bool ok = nl >= 1 && nl <= 64 && strcmp(name, ".") && strcmp(name, "..");
    for (size_t i = 0; ok && i < nl; i++) ok = name_char_ok(name[i]);
    if (!ok)
        return FAIL(RGPU_ERR_PATH, "%s \"%s\": the folder name \"%s\" must be 1 to 64 of A-Z a-z 0-9 . _ - "
                    "(not \".\" or \"..\")%s", flag, spec, name, named ? "" : "; give one with NAME=DIR");
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->m[i].name, name))
            return FAIL(RGPU_ERR_PATH, "%s \"%s\": a folder named \"%s\" is already exposed (%s); "
                        "give this one another with NAME=DIR", flag, spec, name, f->m[i].dir);
    if (f->n == RGPU_FILES_MAX_MOUNTS)
        return FAIL(RGPU_ERR_PATH, "%s \"%s\": at most %d folders can be exposed", flag, spec, RGPU_FILES_MAX_MOUNTS);
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return FAIL(RGPU_ERR_PATH, "%s \"%s\": %s", flag, spec,
                    errno == ENOENT ? "no such folder" : errno == ENOTDIR ? "is not a folder" : strerror(errno));
    char *d = strdup(dir);
    if (!d) {
        close(fd);
        return FAIL(RGPU_ERR_NOMEM, "%s \"%s\": out of memory", flag, spec);
    }
    mount *m = &f->m[f->n++];
    memcpy(m->name, name, nl + 1);   /* nl <= 64, checked above */
    m->dir = d;
    m->fd = fd;
    m->writable = writable;
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Path rules */

/* path (n bytes) quoted for a message: control bytes, '"' and '\' escaped,
 * cut with "..." past about 300 bytes. */
static void quote(char out[QLEN], const char *p, size_t n) {
    size_t o = 0;
    out[o++] = '"';
    for (size_t i = 0; i < n; i++) {
        if (o > QLEN - 12) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(out + o, QLEN - o, "\\x%02x", c);
        else {
            if (c == '"' || c == '\\') out[o++] = '\\';
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    out[o] = 0;
}

/* A checked path: its mount and the part beneath it ("" for the mount itself). */
typedef struct parsed {
    int mi;
    char rel[RGPU_FILES_MAX_PATH + 1];
    char q[QLEN];           /* the whole path, quoted */
} parsed;

static rgpu_status parse_path(const rgpu_files *f, const char *path, size_t n, parsed *p, char *why, size_t whylen) {
    quote(p->q, path, n);
    const char *q = p->q;
    if (n == 0) return FAIL(RGPU_ERR_PATH, "server path \"\": empty (" HINT ")");
    if (n > RGPU_FILES_MAX_PATH)
        return FAIL(RGPU_ERR_PATH, "server path %s: %zu bytes, over the limit of %d", q, n, RGPU_FILES_MAX_PATH);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)path[i];
        if (c == 0) return FAIL(RGPU_ERR_PATH, "server path %s: contains a NUL byte", q);
        if (c < 0x20 || c == 0x7f)
            return FAIL(RGPU_ERR_PATH, "server path %s: contains the control byte 0x%02x", q, c);
    }
    if (path[0] == '/') return FAIL(RGPU_ERR_PATH, "server path %s: absolute paths are not allowed (" HINT ")", q);
    int depth = 0;
    size_t first_len = 0;
    for (size_t s = 0; s <= n;) {
        size_t e = s;
        while (e < n && path[e] != '/') e++;
        size_t len = e - s;
        if (len == 0)
            return FAIL(RGPU_ERR_PATH, "server path %s: empty components (\"//\" or a trailing \"/\") are not allowed", q);
        if (len == 1 && path[s] == '.') return FAIL(RGPU_ERR_PATH, "server path %s: \".\" is not allowed (" HINT ")", q);
        if (len == 2 && path[s] == '.' && path[s + 1] == '.')
            return FAIL(RGPU_ERR_PATH, "server path %s: \"..\" is not allowed (" HINT ")", q);
        if (len > RGPU_FILES_MAX_NAME)
            return FAIL(RGPU_ERR_PATH, "server path %s: a component of %zu bytes, over the limit of %d", q, len,
                        RGPU_FILES_MAX_NAME);
        if (++depth > RGPU_FILES_MAX_DEPTH)
            return FAIL(RGPU_ERR_PATH, "server path %s: more than %d components", q, RGPU_FILES_MAX_DEPTH);
        if (depth == 1) first_len = len;
        s = e + 1;
    }
    if (f == NULL || f->n == 0)
        return FAIL(RGPU_ERR_PATH, "server path %s: no folder is exposed (rgpu-server --data DIR / --data-rw DIR)", q);
    p->mi = -1;
    for (int i = 0; i < f->n; i++)
        if (strlen(f->m[i].name) == first_len && !memcmp(f->m[i].name, path, first_len)) p->mi = i;
    if (p->mi < 0) {
        char list[RGPU_FILES_MAX_MOUNTS * 68] = "";
        size_t o = 0;
        for (int i = 0; i < f->n; i++) o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", f->m[i].name);
        char nq[QLEN];
        quote(nq, path, first_len);
        return FAIL(RGPU_ERR_PATH, "server path %s: no exposed folder named %s (exposed: %s)", q, nq, list);
    }
    size_t rl = first_len < n ? n - first_len - 1 : 0;
    memcpy(p->rel, path + n - rl, rl);
    p->rel[rl] = 0;
    return RGPU_OK;
}

rgpu_status rgpu_files_check_path(const rgpu_files *f, const char *path, size_t n, char *why, size_t whylen) {
    parsed p;
    return parse_path(f, path, n, &p, why, whylen);
}

static rgpu_status need_writable(const rgpu_files *f, const parsed *p, char *why, size_t whylen) {
    if (f->m[p->mi].writable) return RGPU_OK;
    return FAIL(RGPU_ERR_PATH, "server path %s: the folder \"%s\" is read-only (exposed with --data; --data-rw to write)",
                p->q, f->m[p->mi].name);
}

/* ---------------------------------------------------------------------------
 * Resolution beneath a mount */

/* The walk: one component at a time from mfd, O_NOFOLLOW, every symlink
 * refused (ELOOP). *bad: bytes of rel up to the component that failed. */
static int walk(int mfd, const char *rel, int flags, size_t *bad) {
    if (!*rel) return openat(mfd, ".", flags);
    int cur = mfd;
    for (size_t s = 0;;) {
        const char *slash = strchr(rel + s, '/');
        size_t e = slash ? (size_t)(slash - rel) : strlen(rel);
        char comp[RGPU_FILES_MAX_NAME + 1];
        memcpy(comp, rel + s, e - s);
        comp[e - s] = 0;
        bool last = !slash;
        int fl = last ? flags | O_NOFOLLOW : O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
        int nfd = openat(cur, comp, fl);
        int err = errno;
        struct stat st;
        if (nfd < 0 && (err == ENOTDIR || err == ELOOP) && fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISLNK(st.st_mode))
            err = ELOOP;
        else if (nfd >= 0 && (fl & O_PATH) && fstat(nfd, &st) == 0 && S_ISLNK(st.st_mode)) {
            close(nfd);     /* O_PATH | O_NOFOLLOW opens the link itself */
            nfd = -1;
            err = ELOOP;
        }
        if (cur != mfd) close(cur);
        if (nfd < 0) {
            *bad = e;
            errno = err;
            return -1;
        }
        if (last) return nfd;
        cur = nfd;
        s = e + 1;
    }
}

/* Opens rel beneath mount mi with flags (openat2 RESOLVE_BENEATH, else the
 * walk). On failure: the status, with a message naming the path. */
static rgpu_status resolve(const rgpu_files *f, const parsed *p, const char *rel, int flags, int *out,
                           char *why, size_t whylen) {
    const mount *m = &f->m[p->mi];
    int fd = -1, err = 0;
    bool walked = true;
    size_t bad = 0;
    if (!rgpu_files_force_walk) {
        struct open_how how = { .flags = (uint64_t)flags, .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
        fd = (int)syscall(SYS_openat2, m->fd, *rel ? rel : ".", &how, sizeof how);
        err = errno;
        walked = fd < 0 && (err == ENOSYS || err == EPERM || err == E2BIG);
    }
    if (walked) {
        fd = walk(m->fd, rel, flags, &bad);
        err = errno;
    }
    if (fd >= 0) {
        *out = fd;
        return RGPU_OK;
    }
    const char *q = p->q;
    switch (err) {
    case ENOENT: return FAIL(RGPU_ERR_PATH, "server path %s: no such file", q);
    case ENOTDIR: return FAIL(RGPU_ERR_PATH, "server path %s: a component of it is not a folder", q);
    case EISDIR: return FAIL(RGPU_ERR_PATH, "server path %s: is a folder, not a file", q);
    case EACCES: return FAIL(RGPU_ERR_PATH, "server path %s: permission denied", q);
    case EXDEV:
        return FAIL(RGPU_ERR_PATH, "server path %s: resolves outside the exposed folder %s (a symlink or mount point leads out)",
                    q, m->name);
    case ELOOP:
        if (walked) {
            char bq[QLEN], full[RGPU_FILES_MAX_PATH + 70];
            snprintf(full, sizeof full, "%s/%.*s", m->name, (int)bad, rel);
            quote(bq, full, strlen(full));
            return FAIL(RGPU_ERR_PATH, "server path %s: %s is a symlink (symlinks are not followed on this kernel)", q, bq);
        }
        return FAIL(RGPU_ERR_PATH, "server path %s: too many symlinks, or a /proc magic link, on the way", q);
    default: return FAIL(RGPU_ERR_IO, "server path %s: %s", q, strerror(err));
    }
}

static int64_t ns_of(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

static uint8_t kind_of(mode_t m) { return S_ISREG(m) ? RGPU_FILE_REG : S_ISDIR(m) ? RGPU_FILE_DIR : RGPU_FILE_OTHER; }

/* Opens a regular file for reading (a folder, device, FIFO or socket
 * refused without blocking), with its fstat. */
static rgpu_status open_reg(const rgpu_files *f, const parsed *p, int *fd, struct stat *st, char *why, size_t whylen) {
    FORWARD_IF_ERROR(resolve(f, p, p->rel, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, fd, why, whylen));
    if (fstat(*fd, st) != 0) {
        int e = errno;
        close(*fd);
        return FAIL(RGPU_ERR_IO, "server path %s: %s", p->q, strerror(e));
    }
    if (!S_ISREG(st->st_mode)) {
        close(*fd);
        return FAIL(RGPU_ERR_PATH, "server path %s: %s", p->q, S_ISDIR(st->st_mode) ? "is a folder, not a file"
                                                                                  : "is not a regular file");
    }
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Identity: XXH3-128 of a whole file, cached by (dev, ino, size, mtime, ctime).
 * A file changed within the same timestamp tick as its hashing keeps its
 * stat: an entry hashed less than RACY_NS after the file's ctime is not
 * trusted and the file is hashed again (git's "racily clean" rule). Kernel
 * timestamps are at worst a jiffy (<= 10 ms) coarse; so a file just written
 * is hashed again for at most RACY_NS, then the cache answers. */
#define CACHE_SLOTS 256
#define RACY_NS 100000000ll
#define HASH_PIECE (4u << 20)

typedef struct cache_key { uint64_t dev, ino, size; int64_t mtime, ctime; } cache_key;
typedef struct cache_slot { bool used; cache_key k; int64_t hashed_at; rgpu_hash h; } cache_slot;

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static cache_slot cache[CACHE_SLOTS];

static cache_key key_of(const struct stat *st) {
    return (cache_key){ (uint64_t)st->st_dev, (uint64_t)st->st_ino, (uint64_t)st->st_size, ns_of(st->st_mtim),
                        ns_of(st->st_ctim) };
}
static bool key_eq(const cache_key *a, const cache_key *b) {
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime == b->mtime && a->ctime == b->ctime;
}
static cache_slot *slot_of(const cache_key *k) {
    uint64_t x = (k->dev * 0x9E3779B97F4A7C15ull) ^ (k->ino * 0xC2B2AE3D27D4EB4Full);
    return &cache[(x >> 32) % CACHE_SLOTS];
}
static bool cache_get(const cache_key *k, rgpu_hash *h) {
    pthread_mutex_lock(&cache_mu);
    cache_slot *s = slot_of(k);
    bool hit = s->used && key_eq(&s->k, k) && s->hashed_at >= k->ctime + RACY_NS;
    if (hit) *h = s->h;
    pthread_mutex_unlock(&cache_mu);
    return hit;
}
static void cache_put(const cache_key *k, int64_t hashed_at, const rgpu_hash *h) {
    pthread_mutex_lock(&cache_mu);
    cache_slot *s = slot_of(k);
    *s = (cache_slot){ true, *k, hashed_at, *h };
    pthread_mutex_unlock(&cache_mu);
}

static rgpu_hash digest(XXH3_state_t *xx) {
    rgpu_hash h;
    XXH128_canonicalFromHash((XXH128_canonical_t *)h.b, XXH3_128bits_digest(xx));
    return h;
}

/* Bytes [off, off + len) of fd, all of them: 0 done, else -1 with errno
 * (0 when the file ended first, *got the bytes read). */
static int pread_all(int fd, void *buf, size_t len, uint64_t off, size_t *got) {
    size_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            if (r == 0) errno = 0;
            if (got) *got = done;
            return -1;
        }
        done += (size_t)r;
    }
    if (got) *got = done;
    return 0;
}

static rgpu_status file_hash(int fd, const struct stat *st, const char *q, rgpu_hash *out, char *why, size_t whylen) {
    cache_key k = key_of(st);
    if (cache_get(&k, out)) return RGPU_OK;
    struct timespec t0;
    clock_gettime(CLOCK_REALTIME, &t0);
    uint8_t *buf = malloc(HASH_PIECE);
    XXH3_state_t *xx = XXH3_createState();
    rgpu_status rc = RGPU_OK;
    if (!buf || !xx) rc = FAIL(RGPU_ERR_NOMEM, "server file %s: out of memory for hashing", q);
    else XXH3_128bits_reset(xx);
    for (uint64_t off = 0; rc == RGPU_OK && off < k.size;) {
        size_t n = k.size - off < HASH_PIECE ? (size_t)(k.size - off) : HASH_PIECE, got = 0;
        if (pread_all(fd, buf, n, off, &got) != 0)
            rc = errno ? FAIL(RGPU_ERR_IO, "reading server file %s: %s", q, strerror(errno))
                       : FAIL(RGPU_ERR_CHANGED, "server file %s changed while it was hashed: it ended at byte %llu "
                              "of %llu", q, (unsigned long long)(off + got), (unsigned long long)k.size);
        else XXH3_128bits_update(xx, buf, n);
        off += n;
    }
    struct stat now;
    if (rc == RGPU_OK && fstat(fd, &now) != 0) rc = FAIL(RGPU_ERR_IO, "server file %s: %s", q, strerror(errno));
    cache_key k2 = rc == RGPU_OK ? key_of(&now) : k;
    if (rc == RGPU_OK && !key_eq(&k, &k2))
        rc = FAIL(RGPU_ERR_CHANGED, "server file %s changed while it was hashed (%llu bytes, now %llu)", q,
                  (unsigned long long)k.size, (unsigned long long)k2.size);
    if (rc == RGPU_OK) {
        *out = digest(xx);
        cache_put(&k, ns_of(t0), out);
    }
    XXH3_freeState(xx);
    free(buf);
    return rc;
}

/* ---------------------------------------------------------------------------
 * stat, list */
static void fill_stat(rgpu_file_stat *o, const struct stat *st, bool writable) {
    memset(o, 0, sizeof *o);
    o->kind = kind_of(st->st_mode);
    o->writable = writable;
    o->size = o->kind == RGPU_FILE_REG ? (uint64_t)st->st_size : 0;
    o->mtime_ns = ns_of(st->st_mtim);
}

rgpu_status rgpu_files_stat(rgpu_files *f, const char *path, size_t n, bool with_hash, rgpu_file_stat *out,
                            char *why, size_t whylen) {
    parsed p;
    FORWARD_IF_ERROR(parse_path(f, path, n, &p, why, whylen));
    int fd;
    FORWARD_IF_ERROR(resolve(f, &p, p.rel, O_PATH | O_CLOEXEC, &fd, why, whylen));
    struct stat st;
    int r = fstat(fd, &st), e = errno;
    close(fd);
    if (r != 0) return FAIL(RGPU_ERR_IO, "server path %s: %s", p.q, strerror(e));
    if (with_hash && S_ISREG(st.st_mode)) {
        FORWARD_IF_ERROR(open_reg(f, &p, &fd, &st, why, whylen));   /* O_PATH can't be read: open it again */
        rgpu_hash h;
        rgpu_status rc = file_hash(fd, &st, p.q, &h, why, whylen);
        close(fd);
        FORWARD_IF_ERROR(rc);
        fill_stat(out, &st, f->m[p.mi].writable);
        out->hash = h;
        return RGPU_OK;
    }
    fill_stat(out, &st, f->m[p.mi].writable);
    return RGPU_OK;
}

static int entry_cmp(const void *a, const void *b) {
    return strcmp(((const rgpu_file_entry *)a)->name, ((const rgpu_file_entry *)b)->name);
}

static rgpu_status list_mounts(const rgpu_files *f, rgpu_file_entry **out, size_t *count, char *why, size_t whylen) {
    int n = f ? f->n : 0;
    rgpu_file_entry *e = calloc((size_t)n + 1, sizeof *e);
    if (!e) return FAIL(RGPU_ERR_NOMEM, "listing the exposed folders: out of memory");
    for (int i = 0; i < n; i++) {
        struct stat st;
        snprintf(e[i].name, sizeof e[i].name, "%s", f->m[i].name);
        e[i].kind = RGPU_FILE_DIR;
        e[i].writable = f->m[i].writable;
        if (fstat(f->m[i].fd, &st) == 0) e[i].mtime_ns = ns_of(st.st_mtim);
    }
    qsort(e, (size_t)n, sizeof *e, entry_cmp);
    *out = e;
    *count = (size_t)n;
    return RGPU_OK;
}

rgpu_status rgpu_files_list(rgpu_files *f, const char *path, size_t n, rgpu_file_entry **out, size_t *count,
                            char *why, size_t whylen) {
    *out = NULL;
    *count = 0;
    if (n == 0) return list_mounts(f, out, count, why, whylen);
    parsed p;
    FORWARD_IF_ERROR(parse_path(f, path, n, &p, why, whylen));
    int fd;
    FORWARD_IF_ERROR(resolve(f, &p, p.rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC, &fd, why, whylen));
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return FAIL(RGPU_ERR_IO, "listing server folder %s: %s", p.q, strerror(e));
    }
    bool w = f->m[p.mi].writable;
    size_t cap = 64, k = 0;
    rgpu_file_entry *e = malloc(cap * sizeof *e);
    rgpu_status rc = e ? RGPU_OK : FAIL(RGPU_ERR_NOMEM, "listing server folder %s: out of memory", p.q);
    struct dirent *de;
    while (rc == RGPU_OK && (errno = 0, de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (k == RGPU_FILES_MAX_LIST) {
            rc = FAIL(RGPU_ERR_TOO_LARGE, "server folder %s: more than %d entries", p.q, RGPU_FILES_MAX_LIST);
            break;
        }
        if (k == cap) {
            rgpu_file_entry *ne = realloc(e, 2 * cap * sizeof *e);
            if (!ne) {
                rc = FAIL(RGPU_ERR_NOMEM, "listing server folder %s: out of memory", p.q);
                break;
            }
            e = ne;
            cap *= 2;
        }
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;   /* gone meanwhile */
        rgpu_file_entry *x = &e[k++];
        memset(x, 0, sizeof *x);
        snprintf(x->name, sizeof x->name, "%s", de->d_name);
        x->writable = w;
        x->kind = RGPU_FILE_OTHER;
        x->mtime_ns = ns_of(st.st_mtim);
        if (S_ISLNK(st.st_mode)) {
            /* what it resolves to beneath the mount; OTHER, size 0 when it leads out (never stat a target outside) */
            char sub[RGPU_FILES_MAX_PATH + RGPU_FILES_MAX_NAME + 2];
            snprintf(sub, sizeof sub, "%s%s%s", p.rel, *p.rel ? "/" : "", de->d_name);
            int lfd;
            if (resolve(f, &p, sub, O_PATH | O_CLOEXEC, &lfd, NULL, 0) == RGPU_OK) {
                if (fstat(lfd, &st) == 0) {
                    x->kind = kind_of(st.st_mode);
                    x->mtime_ns = ns_of(st.st_mtim);
                    x->size = x->kind == RGPU_FILE_REG ? (uint64_t)st.st_size : 0;
                }
                close(lfd);
            }
        } else {
            x->kind = kind_of(st.st_mode);
            x->size = x->kind == RGPU_FILE_REG ? (uint64_t)st.st_size : 0;
        }
    }
    if (rc == RGPU_OK && errno) rc = FAIL(RGPU_ERR_IO, "listing server folder %s: %s", p.q, strerror(errno));
    closedir(d);
    if (rc != RGPU_OK) {
        free(e);
        return rc;
    }
    qsort(e, k, sizeof *e, entry_cmp);
    *out = e;
    *count = k;
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Readers */
struct rgpu_file_reader {
    int fd;
    struct stat st;
    char q[QLEN];
};

static rgpu_status reader_open(rgpu_files *f, const parsed *p, rgpu_file_reader **out, char *why, size_t whylen) {
    rgpu_file_reader *r = malloc(sizeof *r);
    if (!r) return FAIL(RGPU_ERR_NOMEM, "server file %s: out of memory", p->q);
    rgpu_status rc = open_reg(f, p, &r->fd, &r->st, why, whylen);
    if (rc != RGPU_OK) {
        free(r);
        return rc;
    }
    memcpy(r->q, p->q, QLEN);
    *out = r;
    return RGPU_OK;
}

rgpu_status rgpu_files_open(rgpu_files *f, const char *path, size_t n, const uint64_t *want_size,
                            const rgpu_hash *want_hash, rgpu_file_reader **out, char *why, size_t whylen) {
    *out = NULL;
    parsed p;
    FORWARD_IF_ERROR(parse_path(f, path, n, &p, why, whylen));
    rgpu_file_reader *r = NULL;
    FORWARD_IF_ERROR(reader_open(f, &p, &r, why, whylen));
    uint64_t size = (uint64_t)r->st.st_size;
    rgpu_hash h = { { 0 } };
    rgpu_status rc = RGPU_OK;
    if (want_hash || (want_size && *want_size != size)) rc = file_hash(r->fd, &r->st, p.q, &h, why, whylen);
    if (rc == RGPU_OK && ((want_size && *want_size != size) || (want_hash && !rgpu_hash_eq(want_hash, &h)))) {
        char then[80] = "", now[80];
        char hx[33];
        size_t o = 0;
        if (want_size) o += (size_t)snprintf(then, sizeof then, "%llu bytes", (unsigned long long)*want_size);
        if (want_hash) {
            rgpu_hash_hex(want_hash, hx);
            snprintf(then + o, sizeof then - o, "%sXXH3 %s", o ? ", " : "", hx);
        }
        rgpu_hash_hex(&h, hx);
        snprintf(now, sizeof now, "%llu bytes, XXH3 %s", (unsigned long long)size, hx);
        rc = FAIL(RGPU_ERR_CHANGED, "server file %s changed since it was recorded: %s then; %s now", p.q, then, now);
    }
    if (rc != RGPU_OK) {
        rgpu_file_reader_close(r);
        return rc;
    }
    *out = r;
    return RGPU_OK;
}

uint64_t rgpu_file_reader_size(const rgpu_file_reader *r) { return (uint64_t)r->st.st_size; }

rgpu_status rgpu_file_read(rgpu_file_reader *r, uint64_t off, void *buf, size_t len, char *why, size_t whylen) {
    uint64_t size = (uint64_t)r->st.st_size;
    if (off > size || len > size - off)
        return FAIL(RGPU_ERR_OUT_OF_BOUNDS, "reads bytes [%llu, %llu) of %s, which has %llu bytes", (unsigned long long)off,
                    (unsigned long long)off + len, r->q, (unsigned long long)size);
    size_t got = 0;
    if (pread_all(r->fd, buf, len, off, &got) != 0) {
        if (errno) return FAIL(RGPU_ERR_IO, "reading server file %s: %s", r->q, strerror(errno));
        return FAIL(RGPU_ERR_CHANGED, "server file %s changed while it was read: it ended at byte %llu, %llu bytes "
                    "when opened", r->q, (unsigned long long)(off + got), (unsigned long long)size);
    }
    struct stat now;
    cache_key k = key_of(&r->st), k2;
    if (fstat(r->fd, &now) != 0) return FAIL(RGPU_ERR_IO, "server file %s: %s", r->q, strerror(errno));
    k2 = key_of(&now);
    if (!key_eq(&k, &k2))
        return FAIL(RGPU_ERR_CHANGED, "server file %s changed while it was read (%llu bytes when opened, %llu now)",
                    r->q, (unsigned long long)k.size, (unsigned long long)k2.size);
    return RGPU_OK;
}

void rgpu_file_reader_close(rgpu_file_reader *r) {
    if (!r) return;
    close(r->fd);
    free(r);
}

/* ---------------------------------------------------------------------------
 * Zip records (APPNOTE.TXT 6.3): little-endian fields */
#define ZIP_LOCAL     0x04034b50u
#define ZIP_CENTRAL   0x02014b50u
#define ZIP_DESC      0x08074b50u
#define ZIP_EOCD      0x06054b50u
#define ZIP64_EOCD    0x06064b50u
#define ZIP64_LOCATOR 0x07064b50u
#define ZIP_CD_MAX    (256ull << 20)   /* bytes of a central directory read into memory */

static uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint64_t ld64(const uint8_t *p) { return rgpu_ld32(p) | (uint64_t)rgpu_ld32(p + 4) << 32; }
static uint8_t *st16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); return p + 2; }
static uint8_t *st32(uint8_t *p, uint32_t v) { rgpu_st32(p, v); return p + 4; }
static uint8_t *st64(uint8_t *p, uint64_t v) { rgpu_st32(p, (uint32_t)v); rgpu_st32(p + 4, (uint32_t)(v >> 32)); return p + 8; }

/* ---------------------------------------------------------------------------
 * Zip index */
typedef struct zip_src {
    int fd;
    uint64_t size;
    const char *q;
} zip_src;

#define BAD(...) FAIL(RGPU_ERR_BAD_ARG, __VA_ARGS__)

static rgpu_status zread(const zip_src *z, uint64_t off, void *buf, size_t len, const char *what, char *why, size_t whylen) {
    if (off > z->size || len > z->size - off)
        return BAD("zip %s: the %s at byte %llu runs past the end of the file (%llu bytes)", z->q, what,
                   (unsigned long long)off, (unsigned long long)z->size);
    if (pread_all(z->fd, buf, len, off, NULL) != 0)
        return errno ? FAIL(RGPU_ERR_IO, "reading zip %s: %s", z->q, strerror(errno))
                     : FAIL(RGPU_ERR_CHANGED, "zip %s changed while it was read (it ended early)", z->q);
    return RGPU_OK;
}

typedef struct zip_end { uint64_t count, cd_size, cd_off, cd_end; } zip_end;

/* The end of central directory record, and the zip64 one where there is one. */
static rgpu_status zip_find_end(const zip_src *z, zip_end *ze, char *why, size_t whylen) {
    if (z->size < 22) return BAD("zip %s: not a zip (%llu bytes, shorter than its end record)", z->q, (unsigned long long)z->size);
    size_t tail = z->size < 65535 + 22 ? (size_t)z->size : 65535 + 22;
    uint8_t *t = malloc(tail);
    if (!t) return FAIL(RGPU_ERR_NOMEM, "zip %s: out of memory", z->q);
    uint64_t base = z->size - tail;
    rgpu_status rc = zread(z, base, t, tail, "end record", why, whylen);
    size_t at = SIZE_MAX;
    for (size_t i = tail - 22 + 1; rc == RGPU_OK && i-- > 0;)
        if (rgpu_ld32(t + i) == ZIP_EOCD && i + 22 + ld16(t + i + 20) <= tail) {
            at = i;
            break;
        }
    if (rc == RGPU_OK && at == SIZE_MAX) rc = BAD("zip %s: not a zip (no end of central directory record)", z->q);
    if (rc != RGPU_OK) {
        free(t);
        return rc;
    }
    const uint8_t *e = t + at;
    uint64_t eocd = base + at;
    uint16_t disk = ld16(e + 4), cd_disk = ld16(e + 6);
    ze->count = ld16(e + 10);
    ze->cd_size = rgpu_ld32(e + 12);
    ze->cd_off = rgpu_ld32(e + 16);
    ze->cd_end = eocd;
    bool multi = ld16(e + 8) != ld16(e + 10) || (disk != 0 && disk != 0xFFFF) || (cd_disk != 0 && cd_disk != 0xFFFF);
    free(t);
    uint8_t loc[20];
    bool has_loc = false;
    if (eocd >= 20) {
        FORWARD_IF_ERROR(zread(z, eocd - 20, loc, 20, "zip64 locator", why, whylen));
        has_loc = rgpu_ld32(loc) == ZIP64_LOCATOR;
    }
    if (has_loc) {
        uint64_t r_off = ld64(loc + 8);
        uint8_t r[56];
        FORWARD_IF_ERROR(zread(z, r_off, r, sizeof r, "zip64 end record", why, whylen));
        if (rgpu_ld32(r) != ZIP64_EOCD) return BAD("zip %s: the zip64 locator points at byte %llu, not a zip64 end record",
                                                   z->q, (unsigned long long)r_off);
        if (r_off + 56 > eocd - 20) return BAD("zip %s: the zip64 end record overlaps its locator", z->q);
        multi = multi || rgpu_ld32(loc + 4) != 0 || rgpu_ld32(loc + 16) > 1 || rgpu_ld32(r + 16) != 0 ||
                rgpu_ld32(r + 20) != 0 || ld64(r + 24) != ld64(r + 32);
        ze->count = ld64(r + 32);
        ze->cd_size = ld64(r + 40);
        ze->cd_off = ld64(r + 48);
        ze->cd_end = r_off;
    } else if (ze->count == 0xFFFF || ze->cd_size == 0xFFFFFFFFu || ze->cd_off == 0xFFFFFFFFu) {
        return BAD("zip %s: its end record asks for zip64 but there is no zip64 locator", z->q);
    }
    if (multi) return BAD("zip %s: spans several disks (multi-part zips are not read)", z->q);
    if (ze->count > RGPU_FILES_MAX_ZIP)
        return FAIL(RGPU_ERR_TOO_LARGE, "zip %s: %llu entries, over the limit of %d", z->q, (unsigned long long)ze->count,
                    RGPU_FILES_MAX_ZIP);
    if (ze->cd_off > ze->cd_end || ze->cd_size > ze->cd_end - ze->cd_off)
        return BAD("zip %s: its central directory (%llu bytes at byte %llu) does not lie before its end record", z->q,
                   (unsigned long long)ze->cd_size, (unsigned long long)ze->cd_off);
    if (ze->cd_size > ZIP_CD_MAX)
        return FAIL(RGPU_ERR_TOO_LARGE, "zip %s: a central directory of %llu bytes, over the limit of %llu", z->q,
                    (unsigned long long)ze->cd_size, ZIP_CD_MAX);
    if (ze->cd_size < ze->count * 46)
        return BAD("zip %s: %llu entries can't fit its central directory of %llu bytes", z->q,
                   (unsigned long long)ze->count, (unsigned long long)ze->cd_size);
    return RGPU_OK;
}

/* The zip64 extra field (id 1) of an entry: the fields that are 0xFFFFFFFF,
 * in the order usize, csize, offset. */
static rgpu_status zip64_extra(const zip_src *z, const char *nq, const uint8_t *x, size_t xl, uint64_t *usize,
                               uint64_t *csize, uint64_t *off, char *why, size_t whylen) {
    uint64_t *want[3] = { *usize == 0xFFFFFFFFu ? usize : NULL, *csize == 0xFFFFFFFFu ? csize : NULL,
                          *off == 0xFFFFFFFFu ? off : NULL };
    if (!want[0] && !want[1] && !want[2]) return RGPU_OK;
    for (size_t i = 0; i + 4 <= xl;) {
        uint16_t id = ld16(x + i), len = ld16(x + i + 2);
        if (len > xl - i - 4) break;
        if (id == 1) {
            const uint8_t *v = x + i + 4;
            size_t left = len;
            for (int j = 0; j < 3; j++) {
                if (!want[j]) continue;
                if (left < 8) return BAD("zip %s: entry %s: its zip64 field is too short", z->q, nq);
                *want[j] = ld64(v);
                v += 8;
                left -= 8;
            }
            return RGPU_OK;
        }
        i += 4 + (size_t)len;
    }
    return BAD("zip %s: entry %s: a size or offset of 0xFFFFFFFF without its zip64 field", z->q, nq);
}

rgpu_status rgpu_files_zip_index(rgpu_files *f, const char *path, size_t n, rgpu_zip_index *out, char *why, size_t whylen) {
    memset(out, 0, sizeof *out);
    parsed p;
    FORWARD_IF_ERROR(parse_path(f, path, n, &p, why, whylen));
    int fd;
    struct stat st;
    FORWARD_IF_ERROR(open_reg(f, &p, &fd, &st, why, whylen));
    zip_src z = { fd, (uint64_t)st.st_size, p.q };
    rgpu_hash h;
    zip_end ze = { 0, 0, 0, 0 };
    uint8_t *cd = NULL;
    rgpu_zip_entry *e = NULL;
    rgpu_status rc = file_hash(fd, &st, p.q, &h, why, whylen);
    if (rc == RGPU_OK) rc = zip_find_end(&z, &ze, why, whylen);
    if (rc == RGPU_OK) {
        /* one allocation: the entries, then their names (each at most its
         * central record's name bytes + NUL, so cd_size + count in all) */
        size_t bytes = (size_t)ze.count * sizeof *e + (size_t)ze.cd_size + (size_t)ze.count;
        cd = malloc(ze.cd_size ? (size_t)ze.cd_size : 1);
        e = malloc(bytes ? bytes : 1);
        if (!cd || !e) rc = FAIL(RGPU_ERR_NOMEM, "zip %s: out of memory for %llu entries", p.q, (unsigned long long)ze.count);
    }
    if (rc == RGPU_OK) rc = zread(&z, ze.cd_off, cd, (size_t)ze.cd_size, "central directory", why, whylen);
    char *names = rc == RGPU_OK ? (char *)(e + ze.count) : NULL;
    size_t pos = 0;
    for (uint64_t i = 0; rc == RGPU_OK && i < ze.count; i++) {
        const uint8_t *c = cd + pos;
        if (ze.cd_size - pos < 46 || rgpu_ld32(c) != ZIP_CENTRAL) {
            rc = BAD("zip %s: central directory record %llu is malformed", p.q, (unsigned long long)i);
            break;
        }
        uint16_t flags = ld16(c + 8), method = ld16(c + 10), nl = ld16(c + 28), xl = ld16(c + 30), cl = ld16(c + 32);
        if ((uint64_t)46 + nl + xl + cl > ze.cd_size - pos) {
            rc = BAD("zip %s: central directory record %llu runs past the directory", p.q, (unsigned long long)i);
            break;
        }
        char nq[QLEN];
        quote(nq, (const char *)c + 46, nl);
        if (memchr(c + 46, 0, nl)) {
            rc = BAD("zip %s: entry %s: its name contains a NUL byte", p.q, nq);
            break;
        }
        uint64_t csize = rgpu_ld32(c + 20), usize = rgpu_ld32(c + 24), loff = rgpu_ld32(c + 42);
        uint16_t disk = ld16(c + 34);
        rc = zip64_extra(&z, nq, c + 46 + nl, xl, &usize, &csize, &loff, why, whylen);
        if (rc != RGPU_OK) break;
        if (flags & 0x41) {
            rc = BAD("zip %s: entry %s is encrypted", p.q, nq);
            break;
        }
        if (method != 0) {
            rc = BAD("zip %s: entry %s is compressed (method %u); only stored entries (torch.save's) are read in place",
                     p.q, nq, method);
            break;
        }
        if (csize != usize || (disk != 0 && disk != 0xFFFF)) {
            rc = BAD("zip %s: entry %s: a stored entry of %llu bytes claims %llu compressed", p.q, nq,
                     (unsigned long long)usize, (unsigned long long)csize);
            break;
        }
        uint8_t lh[30];
        if (loff > ze.cd_off || ze.cd_off - loff < 30) {
            rc = BAD("zip %s: entry %s: its local header (byte %llu) is not before the central directory", p.q, nq,
                     (unsigned long long)loff);
            break;
        }
        rc = zread(&z, loff, lh, 30, "local header", why, whylen);
        if (rc != RGPU_OK) break;
        uint64_t data = loff + 30 + ld16(lh + 26) + ld16(lh + 28);
        if (rgpu_ld32(lh) != ZIP_LOCAL || ld16(lh + 26) != nl) {
            rc = BAD("zip %s: entry %s: no local header at byte %llu", p.q, nq, (unsigned long long)loff);
            break;
        }
        if (data > ze.cd_off || usize > ze.cd_off - data) {
            rc = BAD("zip %s: entry %s: its %llu bytes at byte %llu run into the central directory (byte %llu)", p.q, nq,
                     (unsigned long long)usize, (unsigned long long)data, (unsigned long long)ze.cd_off);
            break;
        }
        char lname[RGPU_FILES_MAX_NAME + 1];   /* the local name must be the central one: compare a prefix */
        size_t cmp = nl < sizeof lname ? nl : sizeof lname;
        rc = zread(&z, loff + 30, lname, cmp, "local name", why, whylen);
        if (rc != RGPU_OK) break;
        if (memcmp(lname, c + 46, cmp)) {
            rc = BAD("zip %s: entry %s: its local header names another entry", p.q, nq);
            break;
        }
        memcpy(names, c + 46, nl);
        names[nl] = 0;
        e[i] = (rgpu_zip_entry){ names, data, usize };
        names += nl + 1;
        pos += 46 + (size_t)nl + xl + cl;
    }
    free(cd);
    close(fd);
    if (rc != RGPU_OK) {
        free(e);
        return rc;
    }
    fill_stat(&out->st, &st, f->m[p.mi].writable);
    out->st.hash = h;
    out->count = (size_t)ze.count;
    out->e = e;
    return RGPU_OK;
}

void rgpu_zip_index_free(rgpu_zip_index *z) {
    if (!z) return;
    free(z->e);
    z->e = NULL;
    z->count = 0;
}

/* ---------------------------------------------------------------------------
 * CRC-32 (IEEE 802.3, reflected 0xEDB88320), slicing by 8 */
static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xFF];
}

static uint32_t crc32_update(uint32_t crc, const void *buf, size_t n) {
    pthread_once(&crc_once, crc_init);
    const uint8_t *p = buf;
    uint32_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t a = c ^ rgpu_ld32(p), b = rgpu_ld32(p + 4);
        c = crc_tab[7][a & 0xFF] ^ crc_tab[6][(a >> 8) & 0xFF] ^ crc_tab[5][(a >> 16) & 0xFF] ^ crc_tab[4][a >> 24] ^
            crc_tab[3][b & 0xFF] ^ crc_tab[2][(b >> 8) & 0xFF] ^ crc_tab[1][(b >> 16) & 0xFF] ^ crc_tab[0][b >> 24];
    }
    while (n--) c = crc_tab[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return ~c;
}

/* ---------------------------------------------------------------------------
 * Zip writer */
#define ZW_BUF (1u << 20)

typedef struct zw_entry { uint64_t off, size; size_t name_at; uint16_t name_len; uint32_t crc; bool z64; } zw_entry;

struct rgpu_zip_writer {
    rgpu_files *f;
    bool dry, failed;
    int dirfd, fd;
    char tmp[RGPU_FILES_MAX_NAME + 1], last[RGPU_FILES_MAX_NAME + 1];
    char q[QLEN];
    XXH3_state_t *xx;
    uint64_t off;                 /* bytes emitted */
    uint8_t *buf;
    size_t blen;
    zw_entry *ent;
    size_t n, cap;
    char *names;
    size_t names_len, names_cap;
    uint64_t left;                /* bytes the open entry still wants */
    bool open_entry;
};

static bool zw_big(uint64_t v) { return v >= rgpu_zip64_threshold || v >= 0xFFFFFFFFu; }
static bool zw_big16(uint64_t v) { return v >= rgpu_zip64_threshold || v >= 0xFFFFu; }

static void zw_drop_tmp(rgpu_zip_writer *w) {
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
        if (w->tmp[0]) unlinkat(w->dirfd, w->tmp, 0);
    }
}

static rgpu_status zw_fail(rgpu_zip_writer *w, rgpu_status st) {
    w->failed = true;
    zw_drop_tmp(w);
    return st;
}

static rgpu_status zw_write(rgpu_zip_writer *w, const uint8_t *p, size_t n, char *why, size_t whylen) {
    while (n) {
        ssize_t r = write(w->fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return zw_fail(w, FAIL(RGPU_ERR_IO, "writing server file %s: %s", w->q, strerror(r < 0 ? errno : EIO)));
        p += r;
        n -= (size_t)r;
    }
    return RGPU_OK;
}

static rgpu_status zw_flush(rgpu_zip_writer *w, char *why, size_t whylen) {
    rgpu_status rc = w->blen ? zw_write(w, w->buf, w->blen, why, whylen) : RGPU_OK;
    w->blen = 0;
    return rc;
}

/* Every byte of the file goes through here: hashed, counted, buffered. */
static rgpu_status zw_emit(rgpu_zip_writer *w, const void *p, size_t n, char *why, size_t whylen) {
    XXH3_128bits_update(w->xx, p, n);
    w->off += n;
    if (w->dry) return RGPU_OK;
    if (n >= ZW_BUF) {
        FORWARD_IF_ERROR(zw_flush(w, why, whylen));
        return zw_write(w, p, n, why, whylen);
    }
    if (w->blen + n > ZW_BUF) FORWARD_IF_ERROR(zw_flush(w, why, whylen));
    memcpy(w->buf + w->blen, p, n);
    w->blen += n;
    return RGPU_OK;
}

static rgpu_status zw_usable(rgpu_zip_writer *w, char *why, size_t whylen) {
    if (w->failed) return FAIL(RGPU_ERR_BAD_ARG, "zip %s: the writer failed earlier", w->q);
    return RGPU_OK;
}

rgpu_status rgpu_files_zip_begin(rgpu_files *f, const char *path, size_t n, bool dry_run, rgpu_zip_writer **out,
                                 char *why, size_t whylen) {
    *out = NULL;
    parsed p;
    FORWARD_IF_ERROR(parse_path(f, path, n, &p, why, whylen));
    FORWARD_IF_ERROR(need_writable(f, &p, why, whylen));
    if (!*p.rel) return FAIL(RGPU_ERR_PATH, "server path %s: is the exposed folder itself, not a file", p.q);
    rgpu_zip_writer *w = calloc(1, sizeof *w);
    if (!w) return FAIL(RGPU_ERR_NOMEM, "zip %s: out of memory", p.q);
    w->f = f;
    w->dry = dry_run;
    w->dirfd = w->fd = -1;
    memcpy(w->q, p.q, QLEN);
    w->xx = XXH3_createState();
    w->buf = dry_run ? NULL : malloc(ZW_BUF);
    rgpu_status rc = w->xx && (dry_run || w->buf) ? RGPU_OK : FAIL(RGPU_ERR_NOMEM, "zip %s: out of memory", p.q);
    if (rc == RGPU_OK) XXH3_128bits_reset(w->xx);
    char *slash = strrchr(p.rel, '/');
    const char *last = slash ? slash + 1 : p.rel;
    memcpy(w->last, last, strlen(last) + 1);   /* a component: at most RGPU_FILES_MAX_NAME bytes */
    if (rc == RGPU_OK && !dry_run) {
        if (slash) *slash = 0;
        rc = resolve(f, &p, slash ? p.rel : "", O_RDONLY | O_DIRECTORY | O_CLOEXEC, &w->dirfd, why, whylen);
    }
    struct stat st;
    if (rc == RGPU_OK && !dry_run && fstatat(w->dirfd, w->last, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
        rc = FAIL(RGPU_ERR_PATH, "server path %s: %s", p.q,
                  S_ISDIR(st.st_mode) ? "is a folder, not a file"
                  : S_ISLNK(st.st_mode) ? "is a symlink (a checkpoint is written to a regular file, never through a link)"
                                        : "is not a regular file");
    for (int tries = 0; rc == RGPU_OK && !dry_run && w->fd < 0; tries++) {
        uint8_t rnd[8];
        if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
            rc = FAIL(RGPU_ERR_IO, "zip %s: getrandom: %s", p.q, strerror(errno));
            break;
        }
        snprintf(w->tmp, sizeof w->tmp, ".%.200s.rgpu-tmp-%016llx", w->last, (unsigned long long)ld64(rnd));
        w->fd = openat(w->dirfd, w->tmp, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (w->fd < 0 && (errno != EEXIST || tries == 8))
            rc = FAIL(errno == EACCES || errno == EROFS ? RGPU_ERR_PATH : RGPU_ERR_IO, "server path %s: can't create "
                      "a file in its folder: %s", p.q, strerror(errno));
    }
    if (rc != RGPU_OK) {
        rgpu_zip_abort(w);
        return rc;
    }
    *out = w;
    return RGPU_OK;
}

rgpu_status rgpu_zip_entry_begin(rgpu_zip_writer *w, const char *name, size_t name_len, uint64_t size,
                                 char *why, size_t whylen) {
    FORWARD_IF_ERROR(zw_usable(w, why, whylen));
    char nq[QLEN];
    quote(nq, name, name_len);
    if (w->open_entry && w->left)
        return zw_fail(w, FAIL(RGPU_ERR_BAD_ARG, "zip %s: entry %s began with %llu bytes of the one before still missing",
                               w->q, nq, (unsigned long long)w->left));
    if (name_len == 0 || name_len > 65535 || memchr(name, 0, name_len))
        return zw_fail(w, FAIL(RGPU_ERR_BAD_ARG, "zip %s: entry %s: a name must be 1 to 65535 bytes, no NUL", w->q, nq));
    if (w->n == RGPU_FILES_MAX_ZIP)
        return zw_fail(w, FAIL(RGPU_ERR_TOO_LARGE, "zip %s: more than %d entries", w->q, RGPU_FILES_MAX_ZIP));
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        zw_entry *ne = realloc(w->ent, cap * sizeof *ne);
        if (!ne) return zw_fail(w, FAIL(RGPU_ERR_NOMEM, "zip %s: out of memory", w->q));
        w->ent = ne;
        w->cap = cap;
    }
    if (w->names_len + name_len > w->names_cap) {
        size_t cap = w->names_cap ? 2 * w->names_cap : 1024;
        while (cap < w->names_len + name_len) cap *= 2;
        char *nn = realloc(w->names, cap);
        if (!nn) return zw_fail(w, FAIL(RGPU_ERR_NOMEM, "zip %s: out of memory", w->q));
        w->names = nn;
        w->names_cap = cap;
    }
    zw_entry *e = &w->ent[w->n++];
    *e = (zw_entry){ w->off, size, w->names_len, (uint16_t)name_len, 0, zw_big(size) || zw_big(w->off) };
    memcpy(w->names + w->names_len, name, name_len);
    w->names_len += name_len;
    /* local header: sizes and crc 0 (they follow the data, flag bit 3);
     * zip64: 0xFFFFFFFF and a zip64 field of zeros; then "FB" padding so
     * the data starts at a multiple of 64 (torch.save's layout) */
    size_t z64 = e->z64 ? 20 : 0;
    uint64_t start = w->off + 30 + name_len + z64 + 4;
    uint16_t pad = (uint16_t)((64 - start % 64) % 64);
    uint8_t h[30 + 20 + 4 + 64], *o = h;
    o = st32(o, ZIP_LOCAL);
    o = st16(o, e->z64 ? 45 : 20);
    o = st16(o, 0x0808);                  /* data descriptor; UTF-8 names */
    o = st16(o, 0);                       /* stored */
    o = st16(o, 0);                       /* DOS time 00:00:00 */
    o = st16(o, 0x0021);                  /* DOS date 1980-01-01 */
    o = st32(o, 0);
    o = st32(o, e->z64 ? 0xFFFFFFFFu : 0);
    o = st32(o, e->z64 ? 0xFFFFFFFFu : 0);
    o = st16(o, (uint16_t)name_len);
    o = st16(o, (uint16_t)(z64 + 4 + pad));
    FORWARD_IF_ERROR(zw_emit(w, h, (size_t)(o - h), why, whylen));
    FORWARD_IF_ERROR(zw_emit(w, name, name_len, why, whylen));
    o = h;
    if (e->z64) {
        o = st16(o, 1);
        o = st16(o, 16);
        o = st64(o, 0);
        o = st64(o, 0);
    }
    o = st16(o, 0x4246);                  /* "FB" */
    o = st16(o, pad);
    memset(o, 'Z', pad);
    o += pad;
    FORWARD_IF_ERROR(zw_emit(w, h, (size_t)(o - h), why, whylen));
    w->open_entry = true;
    w->left = size;
    return size == 0 ? rgpu_zip_data(w, NULL, 0, why, whylen) : RGPU_OK;
}

rgpu_status rgpu_zip_data(rgpu_zip_writer *w, const void *buf, size_t len, char *why, size_t whylen) {
    FORWARD_IF_ERROR(zw_usable(w, why, whylen));
    if (!w->open_entry)
        return zw_fail(w, FAIL(RGPU_ERR_BAD_ARG, "zip %s: %zu data bytes with no entry begun", w->q, len));
    zw_entry *e = &w->ent[w->n - 1];
    if (len > w->left)
        return zw_fail(w, FAIL(RGPU_ERR_BAD_ARG, "zip %s: entry %.*s: %llu bytes given past its %llu", w->q,
                               e->name_len > 200 ? 200 : (int)e->name_len, w->names + e->name_at,
                               (unsigned long long)(len - w->left), (unsigned long long)e->size));
    if (len) {
        e->crc = crc32_update(e->crc, buf, len);
        FORWARD_IF_ERROR(zw_emit(w, buf, len, why, whylen));
        w->left -= len;
    }
    if (w->left) return RGPU_OK;
    uint8_t d[24], *o = d;                /* the data descriptor */
    o = st32(o, ZIP_DESC);
    o = st32(o, e->crc);
    if (e->z64) {
        o = st64(o, e->size);
        o = st64(o, e->size);
    } else {
        o = st32(o, (uint32_t)e->size);
        o = st32(o, (uint32_t)e->size);
    }
    w->open_entry = false;
    return zw_emit(w, d, (size_t)(o - d), why, whylen);
}

/* The central directory and the end records. */
static rgpu_status zw_finish(rgpu_zip_writer *w, char *why, size_t whylen) {
    uint64_t cd_off = w->off;
    for (size_t i = 0; i < w->n; i++) {
        const zw_entry *e = &w->ent[i];
        bool bs = zw_big(e->size), bo = zw_big(e->off);
        uint16_t xl = (bs || bo) ? (uint16_t)(4 + 16 * bs + 8 * bo) : 0;
        uint8_t c[46 + 28], *o = c;
        o = st32(o, ZIP_CENTRAL);
        o = st16(o, e->z64 ? 45 : 20);    /* made by: MS-DOS, the version needed */
        o = st16(o, e->z64 ? 45 : 20);
        o = st16(o, 0x0808);
        o = st16(o, 0);
        o = st16(o, 0);
        o = st16(o, 0x0021);
        o = st32(o, e->crc);
        o = st32(o, bs ? 0xFFFFFFFFu : (uint32_t)e->size);
        o = st32(o, bs ? 0xFFFFFFFFu : (uint32_t)e->size);
        o = st16(o, e->name_len);
        o = st16(o, xl);
        o = st16(o, 0);                   /* comment */
        o = st16(o, 0);                   /* disk */
        o = st16(o, 0);                   /* internal attributes */
        o = st32(o, 0);                   /* external attributes */
        o = st32(o, bo ? 0xFFFFFFFFu : (uint32_t)e->off);
        FORWARD_IF_ERROR(zw_emit(w, c, (size_t)(o - c), why, whylen));
        FORWARD_IF_ERROR(zw_emit(w, w->names + e->name_at, e->name_len, why, whylen));
        if (xl) {
            o = c;
            o = st16(o, 1);
            o = st16(o, (uint16_t)(xl - 4));
            if (bs) {
                o = st64(o, e->size);
                o = st64(o, e->size);
            }
            if (bo) o = st64(o, e->off);
            FORWARD_IF_ERROR(zw_emit(w, c, (size_t)(o - c), why, whylen));
        }
    }
    uint64_t cd_size = w->off - cd_off, count = w->n;
    bool bn = zw_big16(count), bsz = zw_big(cd_size), boff = zw_big(cd_off);
    uint8_t r[56 + 20 + 22], *o = r;
    if (bn || bsz || boff) {
        uint64_t z64_off = w->off;
        o = st32(o, ZIP64_EOCD);
        o = st64(o, 44);
        o = st16(o, 45);
        o = st16(o, 45);
        o = st32(o, 0);
        o = st32(o, 0);
        o = st64(o, count);
        o = st64(o, count);
        o = st64(o, cd_size);
        o = st64(o, cd_off);
        o = st32(o, ZIP64_LOCATOR);
        o = st32(o, 0);
        o = st64(o, z64_off);
        o = st32(o, 1);
    }
    o = st32(o, ZIP_EOCD);
    o = st16(o, 0);
    o = st16(o, 0);
    o = st16(o, bn ? 0xFFFF : (uint16_t)count);
    o = st16(o, bn ? 0xFFFF : (uint16_t)count);
    o = st32(o, bsz ? 0xFFFFFFFFu : (uint32_t)cd_size);
    o = st32(o, boff ? 0xFFFFFFFFu : (uint32_t)cd_off);
    o = st16(o, 0);
    FORWARD_IF_ERROR(zw_emit(w, r, (size_t)(o - r), why, whylen));
    return w->dry ? RGPU_OK : zw_flush(w, why, whylen);
}

rgpu_status rgpu_zip_commit(rgpu_zip_writer *w, uint64_t *size, rgpu_hash *hash, char *why, size_t whylen) {
    rgpu_status rc = zw_usable(w, why, whylen);
    if (rc == RGPU_OK && w->open_entry && w->left) {
        const zw_entry *e = &w->ent[w->n - 1];
        rc = FAIL(RGPU_ERR_BAD_ARG, "zip %s: entry %.*s is missing %llu of its %llu bytes", w->q,
                  e->name_len > 200 ? 200 : (int)e->name_len, w->names + e->name_at, (unsigned long long)w->left,
                  (unsigned long long)e->size);
    }
    if (rc == RGPU_OK) rc = zw_finish(w, why, whylen);
    rgpu_hash h = rc == RGPU_OK ? digest(w->xx) : (rgpu_hash){ { 0 } };
    if (rc == RGPU_OK && !w->dry) {
        struct stat st;
        if (fsync(w->fd) != 0) rc = FAIL(RGPU_ERR_IO, "writing server file %s: fsync: %s", w->q, strerror(errno));
        else if (renameat(w->dirfd, w->tmp, w->dirfd, w->last) != 0)
            rc = FAIL(errno == EISDIR ? RGPU_ERR_PATH : RGPU_ERR_IO, "server path %s: renaming the new file over it: %s",
                      w->q, strerror(errno));
        else {
            w->tmp[0] = 0;                /* renamed: nothing to remove any more */
            if (fsync(w->dirfd) != 0) rc = FAIL(RGPU_ERR_IO, "server path %s: fsync of its folder: %s", w->q, strerror(errno));
            if (fstat(w->fd, &st) == 0 && (uint64_t)st.st_size == w->off) {
                cache_key k = key_of(&st);
                cache_put(&k, INT64_MAX, &h);   /* its bytes are the ones hashed: a ZIP_INDEX next needn't re-read */
            }
        }
    }
    if (rc == RGPU_OK) {
        if (size) *size = w->off;
        if (hash) *hash = h;
    }
    rgpu_zip_abort(w);
    return rc;
}

void rgpu_zip_abort(rgpu_zip_writer *w) {
    if (!w) return;
    zw_drop_tmp(w);
    if (w->dirfd >= 0) close(w->dirfd);
    if (w->xx) XXH3_freeState(w->xx);
    free(w->buf);
    free(w->ent);
    free(w->names);
    free(w);
}
