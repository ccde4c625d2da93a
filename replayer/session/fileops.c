/* fileops.c — the server-file ops of the record executor (FORMAT.md §7.5):
 * FILE_STAT, FILE_LIST, FROM_FILE, ZIP_INDEX and SAVE_ZIP, over the folders
 * rgpu-server exposes (files.h). Result layouts: ops.def's comments, all
 * little-endian.
 *
 * A path is a blob the client put (UTF-8 "NAME/rel/path"), fetched like an
 * upload's. FROM_FILE reads the file's bytes into its new storage (pread;
 * straight into a host backend's storage, through a bounded host buffer into
 * a device's) after checking that the file still has the size and XXH3-128
 * the record carries. SAVE_ZIP streams a torch.save zip from a manifest: the
 * client's inline entries (the pickle, small records) and the whole storage
 * of each named tensor. Every buffer counts against the session's memory. */
#include "fileops.h"
#include "files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IO_PIECE    (8u << 20)   /* bytes a device storage moves through host memory at a time */
#define NAME_SHOWN  80           /* bytes of a zip entry's name an error message shows */

bool rgpu_sess_is_file_op(int op) {
    switch (op) {
    case RGPU_OP_FILE_STAT: case RGPU_OP_FILE_LIST: case RGPU_OP_FROM_FILE: case RGPU_OP_ZIP_INDEX: case RGPU_OP_SAVE_ZIP:
        return true;
    default:
        return false;
    }
}

/* The blobs of r: its path (arg 0) and a SAVE_ZIP's manifest (arg 1). */
static uint64_t blob_bound(int arg) { return arg == 0 ? RGPU_FILES_MAX_PATH : UINT64_MAX; }

rgpu_status rgpu_sess_file_prefetch(rgpu_session *s, const rgpu_record *r) {
    int n = r->op == RGPU_OP_SAVE_ZIP ? 2 : 1;
    for (int a = 0; a < n && a < r->n_args; a++) {
        if (r->args[a].kind != RGPU_ARG_HASH) continue;
        blobent *e;
        rgpu_status st = rgpu_sess_blob_get(s, &r->args[a].v.h, blob_bound(a), &e, NULL, 0);
        if (st && st != RGPU_ERR_LIMIT && st != RGPU_ERR_BAD_ARG) return st;   /* those fail the op when it runs */
    }
    return RGPU_OK;
}

/* Blob arg a of the record (its path, or SAVE_ZIP's manifest). */
static rgpu_status blob_arg(ctx *c, int a, const uint8_t **p, size_t *n) {
    blobent *e;
    rgpu_status st = rgpu_sess_blob_get(c->s, &c->r->args[a].v.h, blob_bound(a), &e, c->why, sizeof c->why);
    if (a == 0 && (st == RGPU_ERR_BAD_ARG || (!st && e->n > RGPU_FILES_MAX_PATH)))
        return RECORD_FAIL(c, RGPU_ERR_PATH, "its path blob is over the limit of %d bytes for a path", RGPU_FILES_MAX_PATH);
    if (st) return st;
    *p = e->data;
    *n = e->n;
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Moving a storage's bytes through host memory in pieces */

/* A host buffer for total bytes moved piecewise: at most IO_PIECE bytes,
 * taken from the session's host memory first (piece_give returns them). */
static uint8_t *piece_take(ctx *c, uint64_t total, size_t *len, rgpu_status *st) {
    *len = total < IO_PIECE ? (size_t)total : IO_PIECE;
    if ((*st = rgpu_sess_mem_take(c->s, *len, true, "a file transfer buffer", c->why, sizeof c->why))) return NULL;
    uint8_t *b = malloc(*len ? *len : 1);
    if (!b) { rgpu_sess_mem_give(c->s, *len, true); *st = RGPU_ERR_NOMEM; }
    return b;
}

static void piece_give(ctx *c, uint8_t *b, size_t len) {
    free(b);
    rgpu_sess_mem_give(c->s, len, true);
}

/* ---------------------------------------------------------------------------
 * The ops */

/* The 24 bytes FILE_STAT's result and each FILE_LIST entry start with:
 * u8 kind | u8 writable | u16 name_len | u32 0 | u64 size | i64 mtime_ns. */
static void put_head(uint8_t *d, uint8_t kind, bool writable, uint16_t name_len, uint64_t size, int64_t mtime_ns) {
    d[0] = kind;
    d[1] = writable;
    rgpu_st16(d + 2, name_len);
    rgpu_st32(d + 4, 0);
    rgpu_st64(d + 8, size);
    rgpu_st64(d + 16, (uint64_t)mtime_ns);
}

static rgpu_status file_stat(ctx *c, const char *p, size_t n) {
    rgpu_file_stat fs;
    rgpu_status st = rgpu_files_stat(c->s->files, p, n, c->r->args[1].v.i != 0, &fs, c->why, sizeof c->why);
    if (st) return st;
    uint8_t *d = rgpu_sess_take_bytes(c->s, 40, &st, c->why, sizeof c->why);
    if (!d) return st;
    put_head(d, fs.kind, fs.writable, 0, fs.size, fs.mtime_ns);
    memcpy(d + 24, fs.hash.b, 16);
    return rgpu_sess_store_result(c->s, c->idx, d, 40);
}

static rgpu_status file_list(ctx *c, const char *p, size_t n) {
    rgpu_file_entry *v;
    size_t count;
    rgpu_status st = rgpu_files_list(c->s->files, p, n, &v, &count, c->why, sizeof c->why);
    if (st) return st;
    size_t total = 4;
    for (size_t i = 0; i < count; i++) total += 24 + strlen(v[i].name);
    uint8_t *d = rgpu_sess_take_bytes(c->s, total, &st, c->why, sizeof c->why);
    if (d) {
        rgpu_st32(d, (uint32_t)count);
        uint8_t *q = d + 4;
        for (size_t i = 0; i < count; i++) {
            size_t nl = strlen(v[i].name);
            put_head(q, v[i].kind, v[i].writable, (uint16_t)nl, v[i].size, v[i].mtime_ns);
            memcpy(q + 24, v[i].name, nl);
            q += 24 + nl;
        }
        st = rgpu_sess_store_result(c->s, c->idx, d, total);
    }
    free(v);
    return st;
}

static rgpu_status zip_index(ctx *c, const char *p, size_t n) {
    rgpu_zip_index z;
    rgpu_status st = rgpu_files_zip_index(c->s->files, p, n, &z, c->why, sizeof c->why);
    if (st) return st;
    size_t total = 36;
    for (size_t i = 0; i < z.count; i++) total += 18 + strlen(z.e[i].name);
    uint8_t *d = rgpu_sess_take_bytes(c->s, total, &st, c->why, sizeof c->why);
    if (d) {
        rgpu_st64(d, z.st.size);
        rgpu_st64(d + 8, (uint64_t)z.st.mtime_ns);
        memcpy(d + 16, z.st.hash.b, 16);
        rgpu_st32(d + 32, (uint32_t)z.count);
        uint8_t *q = d + 36;
        for (size_t i = 0; i < z.count; i++) {
            size_t nl = strlen(z.e[i].name);   /* a zip's name field is u16: it fits */
            rgpu_st64(q, z.e[i].offset);
            rgpu_st64(q + 8, z.e[i].size);
            rgpu_st16(q + 16, (uint16_t)nl);
            memcpy(q + 18, z.e[i].name, nl);
            q += 18 + nl;
        }
        st = rgpu_sess_store_result(c->s, c->idx, d, total);
    }
    rgpu_zip_index_free(&z);
    return st;
}

/* out's new storage := the file's bytes [offset, offset + nbytes), once the
 * file is shown to be the one the record names (its size and hash). */
static rgpu_status from_file(ctx *c, tensor *out, const char *p, size_t n) {
    rgpu_session *s = c->s;
    const rgpu_record *r = c->r;
    if (!(r->out[0].flags & RGPU_TDEF_NEW_STORAGE))
        return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "its output must define a new storage (the file's bytes fill it)");
    int64_t off = r->args[1].v.i, size = r->args[2].v.i;
    if (off < 0 || size < 0)
        return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "offset %lld and file_size %lld must not be negative", (long long)off,
                           (long long)size);
    storage *sg = out->st;
    uint64_t want = (uint64_t)size, nbytes = sg->nbytes;
    if ((uint64_t)off > want || nbytes > want - (uint64_t)off)
        return RECORD_FAIL(c, RGPU_ERR_OUT_OF_BOUNDS, "server file \"%.*s\": bytes [%lld, %llu) are past its end (%llu bytes)",
                           (int)n, p, (long long)off, (unsigned long long)((uint64_t)off + nbytes), (unsigned long long)want);
    rgpu_file_reader *rd;
    rgpu_status st = rgpu_files_open(s->files, p, n, &want, &r->args[3].v.h, &rd, c->why, sizeof c->why);
    if (st) return st;
    if (rgpu_sess_storage_host(s)) {
        st = rgpu_file_read(rd, (uint64_t)off, sg->data, (size_t)nbytes, c->why, sizeof c->why);
    } else {
        size_t len;
        uint8_t *buf = piece_take(c, nbytes, &len, &st);
        for (uint64_t done = 0, k; buf && !st && done < nbytes; done += k) {
            k = nbytes - done < len ? nbytes - done : len;
            st = rgpu_file_read(rd, (uint64_t)off + done, buf, (size_t)k, c->why, sizeof c->why);
            if (!st) st = s->b->upload(s->b, (uint8_t *)sg->data + done, buf, (size_t)k);
        }
        if (buf) piece_give(c, buf, len);
    }
    rgpu_file_reader_close(rd);
    return st;
}

/* SAVE_ZIP's manifest: u32 count | count x (u16 name_len | name | u8 kind |
 * kind 0: u32 n, n inline bytes; kind 1: u32 k, the storage of tensor tids[k]). */
typedef struct mf_reader { const uint8_t *p; size_t n, off; uint32_t count, i; } mf_reader;
typedef struct mf_entry {
    const uint8_t *name;
    uint16_t name_len;
    const uint8_t *data;      /* inline bytes, or NULL for a tensor's storage */
    uint64_t n;               /* bytes of the entry */
    const storage *sg;
} mf_entry;

static rgpu_status mf_open(ctx *c, const uint8_t *p, size_t n, mf_reader *m) {
    if (n < 4) return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "its manifest has %zu bytes, not even a count", n);
    *m = (mf_reader){ .p = p, .n = n, .off = 4, .count = rgpu_ld32(p) };
    if (m->count > RGPU_FILES_MAX_ZIP)
        return RECORD_FAIL(c, RGPU_ERR_TOO_LARGE, "its manifest has %u entries, over the limit of %d", m->count,
                           RGPU_FILES_MAX_ZIP);
    return RGPU_OK;
}

/* The manifest's next entry, every bound checked. */
static rgpu_status mf_next(ctx *c, mf_reader *m, mf_entry *e) {
    uint32_t i = m->i;
    size_t left = m->n - m->off;
    const uint8_t *q = m->p + m->off;
    if (left < 2 || left < 7u + rgpu_ld16(q))
        return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "its manifest ends inside entry %u of %u", i, m->count);
    e->name_len = rgpu_ld16(q);
    e->name = q + 2;
    uint8_t kind = q[2 + e->name_len];
    uint32_t v = rgpu_ld32(q + 3 + e->name_len);
    int shown = e->name_len < NAME_SHOWN ? e->name_len : NAME_SHOWN;
    m->off += 7u + e->name_len;
    if (!e->name_len) return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "manifest entry %u has an empty name", i);
    if (kind == 0) {
        if (v > m->n - m->off)
            return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "manifest entry %u ('%.*s') has %u inline bytes, the manifest %zu more",
                               i, shown, (const char *)e->name, v, m->n - m->off);
        e->data = m->p + m->off;
        e->n = v;
        e->sg = NULL;
        m->off += v;
    } else if (kind == 1) {
        const rgpu_arg *tids = &c->r->args[2];
        if (v >= tids->v.ints.n)
            return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "manifest entry %u ('%.*s') names tensor %u of the %u in tids", i,
                               shown, (const char *)e->name, v, tids->v.ints.n);
        uint64_t tid = (uint64_t)rgpu_arg_int_at(tids, v);
        const tensor *t = u64map_get(&c->s->tensors, tid);
        if (!t)
            return RECORD_FAIL(c, RGPU_ERR_UNKNOWN_TENSOR, "manifest entry %u ('%.*s'): tensor %llu", i, shown,
                               (const char *)e->name, (unsigned long long)tid);
        if (t->poisoned || !t->st)
            return RECORD_FAIL(c, RGPU_ERR_POISONED, "manifest entry %u ('%.*s'): tensor %llu is poisoned by failed op %llu",
                               i, shown, (const char *)e->name, (unsigned long long)tid, (unsigned long long)t->poison_op);
        e->data = NULL;
        e->sg = t->st;
        e->n = t->st->nbytes;
    } else {
        return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "manifest entry %u ('%.*s') has kind %u (0: inline bytes, 1: a tensor)",
                           i, shown, (const char *)e->name, kind);
    }
    m->i++;
    return RGPU_OK;
}

/* One entry's bytes into the zip: inline, a host storage as it is, a device
 * storage through buf (len bytes). */
static rgpu_status zip_entry(ctx *c, rgpu_zip_writer *w, const mf_entry *e, uint8_t *buf, size_t len) {
    rgpu_status st = rgpu_zip_entry_begin(w, (const char *)e->name, e->name_len, e->n, c->why, sizeof c->why);
    if (st || !e->n) return st;
    if (e->data) return rgpu_zip_data(w, e->data, (size_t)e->n, c->why, sizeof c->why);
    if (rgpu_sess_storage_host(c->s)) return rgpu_zip_data(w, e->sg->data, (size_t)e->n, c->why, sizeof c->why);
    for (uint64_t done = 0, k; !st && done < e->n; done += k) {
        k = e->n - done < len ? e->n - done : len;
        st = c->s->b->download(c->s->b, buf, (const uint8_t *)e->sg->data + done, (size_t)k);
        if (!st) st = rgpu_zip_data(w, buf, (size_t)k, c->why, sizeof c->why);
    }
    return st;
}

static rgpu_status save_zip(ctx *c, const char *p, size_t n) {
    rgpu_session *s = c->s;
    const uint8_t *mp = NULL;
    size_t mn = 0;
    rgpu_status st = blob_arg(c, 1, &mp, &mn);
    if (st) return st;
    /* a failure still on the device poisons what it wrote before any is read */
    rgpu_sess_dev_err_poll(s);
    /* the whole manifest is checked before a byte is written */
    mf_reader m;
    mf_entry e;
    uint64_t largest = 0;
    if ((st = mf_open(c, mp, mn, &m))) return st;
    while (m.i < m.count) {
        if ((st = mf_next(c, &m, &e))) return st;
        if (e.sg && e.n > largest) largest = e.n;
    }
    if (m.off != m.n) return RECORD_FAIL(c, RGPU_ERR_BAD_ARG, "its manifest has %zu bytes after its last entry", m.n - m.off);
    size_t len = 0;
    uint8_t *buf = NULL;
    if (!rgpu_sess_storage_host(s) && largest && !(buf = piece_take(c, largest, &len, &st))) return st;
    rgpu_zip_writer *w;
    if (!(st = rgpu_files_zip_begin(s->files, p, n, s->files_dry, &w, c->why, sizeof c->why))) {
        mf_open(c, mp, mn, &m);
        while (!st && m.i < m.count && !(st = mf_next(c, &m, &e))) st = zip_entry(c, w, &e, buf, len);
        uint64_t size;
        rgpu_hash h;
        if (st) rgpu_zip_abort(w);
        else st = rgpu_zip_commit(w, &size, &h, c->why, sizeof c->why);
        uint8_t *d = st ? NULL : rgpu_sess_take_bytes(s, 24, &st, c->why, sizeof c->why);
        if (d) {
            rgpu_st64(d, size);
            memcpy(d + 8, h.b, 16);
            st = rgpu_sess_store_result(s, c->idx, d, 24);
        }
    }
    if (buf) piece_give(c, buf, len);
    return st;
}

rgpu_status rgpu_sess_exec_file(ctx *c, tensor **outs) {
    rgpu_session *s = c->s;
    int op = c->r->op;
    if (s->in_call)
        return RECORD_FAIL(c, RGPU_ERR_UNSUPPORTED, "%s cannot run inside a template (CALL)", rgpu_op_name(op));
    /* rebuilding from a journal: a checkpoint whose result the client got was written; not again */
    if (op == RGPU_OP_SAVE_ZIP && s->written && s->written(s->written_ud, c->idx)) return RGPU_OK;
    const uint8_t *p = NULL;
    size_t n = 0;
    rgpu_status st = blob_arg(c, 0, &p, &n);
    if (st) return st;
    const char *path = (const char *)p;
    if (!s->files)   /* as files.c says it for an empty set */
        return RECORD_FAIL(c, RGPU_ERR_PATH, "server path \"%.*s\": no folder is exposed (rgpu-server --data DIR / --data-rw DIR)",
                           (int)n, path);
    switch (op) {
    case RGPU_OP_FILE_STAT: return file_stat(c, path, n);
    case RGPU_OP_FILE_LIST: return file_list(c, path, n);
    case RGPU_OP_ZIP_INDEX: return zip_index(c, path, n);
    case RGPU_OP_SAVE_ZIP:
        if ((st = save_zip(c, path, n)) == RGPU_OK && !s->files_dry &&
            u64map_get(&s->read_paths, rgpu_sess_blob_key(&c->r->args[0].v.h)))
            s->rewrote_read = true;
        return st;
    default: break;
    }
    st = from_file(c, outs[0], path, n);
    if (!st) u64map_put(&s->read_paths, rgpu_sess_blob_key(&c->r->args[0].v.h), (void *)1);
    if (s->written && (st == RGPU_ERR_CHANGED || st == RGPU_ERR_PATH) && !s->stop_status) {
        /* the file a rebuilt session read is not the one it read before: the rebuild must stop */
        s->stop_status = st;
        snprintf(s->stop_why, sizeof s->stop_why, "op %llu (%s): %.440s", (unsigned long long)c->idx, rgpu_op_name(op),
                 c->why);
    }
    return st;
}
