/* rgt.c — the .rgt trace container on SQLite (FORMAT.md, ".rgt container").
 *
 * Writers batch inserts inside one open transaction and commit on flush and
 * close. WAL mode, synchronous=NORMAL unless rgpu_rgt_set_sync says FULL: a
 * commit then costs no fsync (FULL: one, of the WAL). */
#include "rgpu_format.h"

#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct rgpu_rgt {
    sqlite3 *db;
    bool writable, in_tx;
    uint64_t next_seq;
    sqlite3_stmt *put_chunk, *put_stream, *put_blob, *put_result;
    char err[256];
};

static const char *SCHEMA =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE chunks(hash BLOB PRIMARY KEY, raw_len INTEGER NOT NULL, frame BLOB NOT NULL);"
    "CREATE TABLE stream(seq INTEGER PRIMARY KEY, hash BLOB NOT NULL REFERENCES chunks(hash),"
    " first_op INTEGER NOT NULL, op_count INTEGER NOT NULL);"
    "CREATE TABLE blobs(hash BLOB PRIMARY KEY, raw_len INTEGER NOT NULL, frame BLOB NOT NULL);"
    "CREATE TABLE results(op_index INTEGER PRIMARY KEY, status INTEGER NOT NULL, data BLOB);";

static rgpu_status db_err(rgpu_rgt *t) {
    int e = t->db ? sqlite3_system_errno(t->db) : 0;   /* the OS's reason, when a system call failed */
    snprintf(t->err, sizeof t->err, "%s%s%s%s", t->db ? sqlite3_errmsg(t->db) : "cannot open database", e ? " (" : "",
             e ? strerror(e) : "", e ? ")" : "");
    return RGPU_ERR_DB;
}

/* Why the last create/open on this thread failed (they free the handle). */
static _Thread_local char last_err[1024];
const char *rgpu_rgt_errmsg(rgpu_rgt *t) { return t ? t->err : last_err; }

static void table_hash_hex(char out[33]) {
    rgpu_hash h;
    rgpu_op_table_hash(h.b);
    rgpu_hash_hex(&h, out);
}

static int prepare_writes(rgpu_rgt *t) {
    if (sqlite3_prepare_v2(t->db, "INSERT OR IGNORE INTO chunks VALUES(?,?,?)", -1, &t->put_chunk, NULL) ||
        sqlite3_prepare_v2(t->db, "INSERT INTO stream VALUES(?,?,?,?)", -1, &t->put_stream, NULL) ||
        sqlite3_prepare_v2(t->db, "INSERT OR IGNORE INTO blobs VALUES(?,?,?)", -1, &t->put_blob, NULL) ||
        sqlite3_prepare_v2(t->db, "INSERT OR REPLACE INTO results VALUES(?,?,?)", -1, &t->put_result, NULL))
        return -1;
    t->writable = true;
    return 0;
}

static rgpu_status create_trace(const char *path, const char *creator, bool excl, rgpu_rgt **out) {
    *out = NULL;
    rgpu_rgt *t = calloc(1, sizeof *t);
    if (!t) return RGPU_ERR_NOMEM;
    char wal[4096];
    if (!excl) {
        remove(path);
        snprintf(wal, sizeof wal, "%s-wal", path); remove(wal);
        snprintf(wal, sizeof wal, "%s-shm", path); remove(wal);
    }
    /* the file exists (empty: a valid empty database) before SQLite opens it,
     * mode 0600: traces hold tensor data; SQLite gives its -wal and -shm
     * files the same mode */
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(last_err, sizeof last_err, "cannot create trace %.500s: %s", path, strerror(errno));
        free(t);
        return errno == EEXIST ? RGPU_ERR_DUPLICATE_ID : RGPU_ERR_IO;
    }
    close(fd);
    if (sqlite3_open_v2(path, &t->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK)
        goto fail;
    /* incremental auto-vacuum: a compacted server journal (rgpu_rgt_compact)
     * gives its free pages back to the file system */
    if (sqlite3_exec(t->db, "PRAGMA auto_vacuum=INCREMENTAL; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                     NULL, NULL, NULL) != SQLITE_OK) goto fail;
    if (sqlite3_exec(t->db, SCHEMA, NULL, NULL, NULL) != SQLITE_OK) goto fail;
    if (prepare_writes(t)) goto fail;
    char hex[33], ver[16];
    table_hash_hex(hex);
    snprintf(ver, sizeof ver, "%u", RGPU_FORMAT_VERSION);
    rgpu_status s;
    if ((s = rgpu_rgt_set_meta(t, "magic", "rgpu-trace")) || (s = rgpu_rgt_set_meta(t, "format_version", ver)) ||
        (s = rgpu_rgt_set_meta(t, "op_table_hash", hex)) || (s = rgpu_rgt_set_meta(t, "creator", creator ? creator : "?"))) {
        rgpu_rgt_close(t);
        return s;
    }
    *out = t;
    return RGPU_OK;
fail:;
    rgpu_status e = db_err(t);
    snprintf(last_err, sizeof last_err, "cannot create trace %.500s: %.255s", path, t->err);
    rgpu_rgt_close(t);
    return e;
}

rgpu_status rgpu_rgt_create(const char *path, const char *creator, rgpu_rgt **out) {
    return create_trace(path, creator, false, out);
}

rgpu_status rgpu_rgt_create_new(const char *path, const char *creator, rgpu_rgt **out) {
    return create_trace(path, creator, true, out);
}

static bool get_meta(rgpu_rgt *t, const char *key, char *out, size_t outlen) {
    sqlite3_stmt *st;
    bool ok = false;
    if (sqlite3_prepare_v2(t->db, "SELECT value FROM meta WHERE key=?", -1, &st, NULL) != SQLITE_OK) return false;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *v = sqlite3_column_text(st, 0);
        if (v) { snprintf(out, outlen, "%s", (const char *)v); ok = true; }
    }
    sqlite3_finalize(st);
    return ok;
}

static rgpu_status open_checked(const char *path, bool append, rgpu_rgt **out) {
    *out = NULL;
    rgpu_rgt *t = calloc(1, sizeof *t);
    if (!t) return RGPU_ERR_NOMEM;
    char v[128], hex[33];
    rgpu_status s = RGPU_OK;
    int flags = (append ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY) | SQLITE_OPEN_FULLMUTEX;
    if (sqlite3_open_v2(path, &t->db, flags, NULL) != SQLITE_OK) { s = db_err(t); goto fail; }
    if (!get_meta(t, "magic", v, sizeof v)) {
        snprintf(t->err, sizeof t->err, "not an rgpu trace (no meta table or magic)");
        s = RGPU_ERR_BAD_MAGIC; goto fail;
    }
    if (strcmp(v, "rgpu-trace") != 0) { snprintf(t->err, sizeof t->err, "bad magic '%s'", v); s = RGPU_ERR_BAD_MAGIC; goto fail; }
    char *endp = NULL;
    if (!get_meta(t, "format_version", v, sizeof v)) snprintf(v, sizeof v, "(missing)");
    unsigned long ver = strtoul(v, &endp, 10);
    if (endp == v || *endp || ver != RGPU_FORMAT_VERSION) {
        snprintf(t->err, sizeof t->err, "format version %s, this build reads %u", v, RGPU_FORMAT_VERSION);
        s = RGPU_ERR_BAD_VERSION; goto fail;
    }
    table_hash_hex(hex);
    if (!get_meta(t, "op_table_hash", v, sizeof v)) snprintf(v, sizeof v, "(missing)");
    if (strcmp(v, hex) != 0) {
        snprintf(t->err, sizeof t->err, "op table %s differs from this build's %s", v, hex);
        s = RGPU_ERR_OP_TABLE; goto fail;
    }
    if (append) {
        uint64_t n;
        if (sqlite3_exec(t->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL, NULL) != SQLITE_OK ||
            prepare_writes(t)) { s = db_err(t); goto fail; }
        if ((s = rgpu_rgt_stream_count(t, &n))) goto fail;
        t->next_seq = n;
    }
    *out = t;
    return RGPU_OK;
fail:
    snprintf(last_err, sizeof last_err, "%.500s: %.255s", path, t->err);
    rgpu_rgt_close(t);
    return s;
}

rgpu_status rgpu_rgt_open(const char *path, rgpu_rgt **out) { return open_checked(path, false, out); }
rgpu_status rgpu_rgt_open_append(const char *path, rgpu_rgt **out) { return open_checked(path, true, out); }

static rgpu_status begin(rgpu_rgt *t) {
    if (!t->writable) return RGPU_ERR_DB;
    if (t->in_tx) return RGPU_OK;
    if (sqlite3_exec(t->db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) return db_err(t);
    t->in_tx = true;
    return RGPU_OK;
}

rgpu_status rgpu_rgt_set_sync(rgpu_rgt *t, rgpu_rgt_sync sync) {
    if (!t->writable) return RGPU_ERR_DB;
    const char *sql = sync == RGPU_RGT_SYNC_FULL ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL";
    return sqlite3_exec(t->db, sql, NULL, NULL, NULL) == SQLITE_OK ? RGPU_OK : db_err(t);
}

rgpu_status rgpu_rgt_flush(rgpu_rgt *t) {
    if (!t->in_tx) return RGPU_OK;
    t->in_tx = false;
    if (sqlite3_exec(t->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) return db_err(t);
    return RGPU_OK;
}

void rgpu_rgt_close(rgpu_rgt *t) {
    if (!t) return;
    if (t->db && t->in_tx) rgpu_rgt_flush(t);
    sqlite3_finalize(t->put_chunk); sqlite3_finalize(t->put_stream);
    sqlite3_finalize(t->put_blob); sqlite3_finalize(t->put_result);
    if (t->db) sqlite3_close(t->db);
    free(t);
}

rgpu_status rgpu_rgt_set_meta(rgpu_rgt *t, const char *key, const char *value) {
    if (!t->writable) return RGPU_ERR_DB;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(t->db, "INSERT OR REPLACE INTO meta VALUES(?,?)", -1, &st, NULL) != SQLITE_OK) return db_err(t);
    sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, value, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? RGPU_OK : db_err(t);
}

static rgpu_status step_reset(rgpu_rgt *t, sqlite3_stmt *st) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? RGPU_OK : db_err(t);
}

rgpu_status rgpu_rgt_put_chunk(rgpu_rgt *t, const rgpu_hash *h, uint64_t first_op, uint32_t count,
                               uint64_t raw_len, const void *frame, size_t frame_len) {
    rgpu_status s = begin(t);
    if (s) return s;
    sqlite3_bind_blob(t->put_chunk, 1, h->b, 16, SQLITE_STATIC);
    sqlite3_bind_int64(t->put_chunk, 2, (sqlite3_int64)raw_len);
    sqlite3_bind_blob64(t->put_chunk, 3, frame, frame_len, SQLITE_STATIC);
    if ((s = step_reset(t, t->put_chunk))) return s;
    sqlite3_bind_int64(t->put_stream, 1, (sqlite3_int64)t->next_seq);
    sqlite3_bind_blob(t->put_stream, 2, h->b, 16, SQLITE_STATIC);
    sqlite3_bind_int64(t->put_stream, 3, (sqlite3_int64)first_op);
    sqlite3_bind_int64(t->put_stream, 4, count);
    if ((s = step_reset(t, t->put_stream))) return s;
    t->next_seq++;
    return RGPU_OK;
}

rgpu_status rgpu_rgt_put_blob(rgpu_rgt *t, const rgpu_hash *h, uint64_t raw_len,
                              const void *frame, size_t frame_len) {
    rgpu_status s = begin(t);
    if (s) return s;
    sqlite3_bind_blob(t->put_blob, 1, h->b, 16, SQLITE_STATIC);
    sqlite3_bind_int64(t->put_blob, 2, (sqlite3_int64)raw_len);
    sqlite3_bind_blob64(t->put_blob, 3, frame, frame_len, SQLITE_STATIC);
    return step_reset(t, t->put_blob);
}

rgpu_status rgpu_rgt_put_result(rgpu_rgt *t, uint64_t op_index, int status, const void *data, size_t n) {
    rgpu_status s = begin(t);
    if (s) return s;
    sqlite3_bind_int64(t->put_result, 1, (sqlite3_int64)op_index);
    sqlite3_bind_int(t->put_result, 2, status);
    sqlite3_bind_blob64(t->put_result, 3, n ? data : "", n, SQLITE_STATIC);
    return step_reset(t, t->put_result);
}

rgpu_status rgpu_rgt_each_result(rgpu_rgt *t, int (*fn)(void *ud, uint64_t op, int status,
                                                        const void *data, size_t n), void *ud) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(t->db, "SELECT op_index, status, data FROM results ORDER BY op_index", -1, &st, NULL) != SQLITE_OK)
        return db_err(t);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const void *d = sqlite3_column_blob(st, 2);
        size_t n = (size_t)sqlite3_column_bytes(st, 2);
        if (fn(ud, (uint64_t)sqlite3_column_int64(st, 0), sqlite3_column_int(st, 1), d, n)) break;
    }
    rgpu_status s = (rc == SQLITE_ROW || rc == SQLITE_DONE) ? RGPU_OK : db_err(t);
    sqlite3_finalize(st);
    return s;
}

rgpu_status rgpu_rgt_get_meta(rgpu_rgt *t, const char *key, char *out, size_t outlen) {
    return get_meta(t, key, out, outlen) ? RGPU_OK : RGPU_ERR_MISSING_BLOB;
}

static rgpu_status exec_sql(rgpu_rgt *t, const char *sql) {
    return sqlite3_exec(t->db, sql, NULL, NULL, NULL) == SQLITE_OK ? RGPU_OK : db_err(t);
}

rgpu_status rgpu_rgt_compact(rgpu_rgt *t, uint64_t upto_op, const rgpu_hash *keep, size_t n_keep, uint64_t results_from) {
    rgpu_status s = begin(t);
    sqlite3_stmt *st = NULL;
    char sql[160];
    if (s) return s;
    snprintf(sql, sizeof sql, "DELETE FROM stream WHERE first_op < %llu", (unsigned long long)upto_op);
    if ((s = exec_sql(t, sql)) || (s = exec_sql(t, "DELETE FROM chunks WHERE hash NOT IN (SELECT hash FROM stream)")) ||
        (s = exec_sql(t, "CREATE TEMP TABLE IF NOT EXISTS keep_blobs(hash BLOB PRIMARY KEY)")) ||
        (s = exec_sql(t, "DELETE FROM keep_blobs")))
        return s;
    if (sqlite3_prepare_v2(t->db, "INSERT OR IGNORE INTO keep_blobs VALUES(?)", -1, &st, NULL) != SQLITE_OK) return db_err(t);
    for (size_t i = 0; i < n_keep && !s; i++) {
        sqlite3_bind_blob(st, 1, keep[i].b, 16, SQLITE_STATIC);
        s = step_reset(t, st);
    }
    sqlite3_finalize(st);
    if (s) return s;
    snprintf(sql, sizeof sql, "DELETE FROM results WHERE op_index < %llu", (unsigned long long)results_from);
    if ((s = exec_sql(t, "DELETE FROM blobs WHERE hash NOT IN (SELECT hash FROM keep_blobs)")) || (s = exec_sql(t, sql)) ||
        (s = exec_sql(t, "UPDATE stream SET seq = seq - (SELECT min(seq) FROM stream)")))
        return s;
    uint64_t n;
    if ((s = rgpu_rgt_stream_count(t, &n)) || (s = rgpu_rgt_flush(t))) return s;
    t->next_seq = n;
    /* the WAL back into the file, and the freed pages out of it */
    sqlite3_exec(t->db, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA incremental_vacuum;", NULL, NULL, NULL);
    return RGPU_OK;
}

rgpu_status rgpu_rgt_stream_count(rgpu_rgt *t, uint64_t *count) {
    sqlite3_stmt *st;
    *count = 0;
    if (sqlite3_prepare_v2(t->db, "SELECT count(*) FROM stream", -1, &st, NULL) != SQLITE_OK) return db_err(t);
    rgpu_status s = RGPU_OK;
    if (sqlite3_step(st) == SQLITE_ROW) *count = (uint64_t)sqlite3_column_int64(st, 0);
    else s = db_err(t);
    sqlite3_finalize(st);
    return s;
}

static rgpu_status copy_blob_col(sqlite3_stmt *st, int col, uint8_t **out, size_t *n) {
    int len = sqlite3_column_bytes(st, col);
    const void *p = sqlite3_column_blob(st, col);
    *out = malloc(len ? (size_t)len : 1);
    if (!*out) return RGPU_ERR_NOMEM;
    if (len) memcpy(*out, p, (size_t)len);
    *n = (size_t)len;
    return RGPU_OK;
}

rgpu_status rgpu_rgt_get_stream(rgpu_rgt *t, uint64_t seq, rgpu_hash *h, uint64_t *first_op,
                                uint32_t *count, uint8_t **frame, size_t *frame_len) {
    sqlite3_stmt *st;
    *frame = NULL;
    if (sqlite3_prepare_v2(t->db, "SELECT s.hash, s.first_op, s.op_count, c.frame FROM stream s "
                           "LEFT JOIN chunks c ON c.hash = s.hash WHERE s.seq=?", -1, &st, NULL) != SQLITE_OK)
        return db_err(t);
    sqlite3_bind_int64(st, 1, (sqlite3_int64)seq);
    rgpu_status s = RGPU_ERR_BAD_TRACE;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_bytes(st, 0) == 16 &&
        sqlite3_column_type(st, 3) == SQLITE_BLOB) {
        memcpy(h->b, sqlite3_column_blob(st, 0), 16);
        *first_op = (uint64_t)sqlite3_column_int64(st, 1);
        *count = (uint32_t)sqlite3_column_int64(st, 2);
        s = copy_blob_col(st, 3, frame, frame_len);
    } else {
        snprintf(t->err, sizeof t->err, "stream entry %llu missing or its chunk absent", (unsigned long long)seq);
    }
    sqlite3_finalize(st);
    return s;
}

rgpu_status rgpu_rgt_get_blob(rgpu_rgt *t, const rgpu_hash *h, uint8_t **frame, size_t *frame_len) {
    sqlite3_stmt *st;
    *frame = NULL;
    if (sqlite3_prepare_v2(t->db, "SELECT frame FROM blobs WHERE hash=?", -1, &st, NULL) != SQLITE_OK) return db_err(t);
    sqlite3_bind_blob(st, 1, h->b, 16, SQLITE_STATIC);
    rgpu_status s = RGPU_ERR_MISSING_BLOB;
    if (sqlite3_step(st) == SQLITE_ROW) s = copy_blob_col(st, 0, frame, frame_len);
    sqlite3_finalize(st);
    return s;
}
