/* trace_common.c — shared by the offline tools (see trace_common.h).
 *
 * A .rgt is untrusted input: every stream entry is decompressed with its
 * checksum, hashed against its name, checked to start where the previous one
 * ended, and decoded whole before a tool executes any of it. Container-level
 * questions the rgpu_rgt API does not answer (meta rows, results, sizes) go
 * through a second read-only SQLite handle on the same file. */
#include "trace_common.h"

#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------
 * Opening */
static rgpu_status db_fail(tc_trace *t, const char *what) {
    snprintf(t->err, sizeof t->err, "%s: %s: %s", t->path, what,
             t->db ? sqlite3_errmsg(t->db) : "cannot open");
    return RGPU_ERR_DB;
}

/* SQLite reads pages past the end of a cut-off file as zeros, and a query that
 * never touches them succeeds: compare the header's page count with the file
 * size instead (valid when the change counter matches version-valid-for). */
static rgpu_status check_not_truncated(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot read the file", path); return RGPU_ERR_IO; }
    uint8_t h[100];
    size_t got = fread(h, 1, sizeof h, f);
    long size = (fseek(f, 0, SEEK_END) == 0) ? ftell(f) : -1;
    fclose(f);
    if (got < sizeof h || memcmp(h, "SQLite format 3", 16) != 0) return RGPU_OK;   /* rgpu_rgt_open names it */
    uint32_t page = (uint32_t)(h[16] << 8 | h[17]);
    if (page == 1) page = 65536;
    uint32_t pages = (uint32_t)h[28] << 24 | (uint32_t)h[29] << 16 | (uint32_t)h[30] << 8 | h[31];
    bool valid = memcmp(h + 24, h + 92, 4) == 0 && pages > 0;
    if (valid && size >= 0 && (uint64_t)size < (uint64_t)pages * page) {
        snprintf(err, errlen, "%s: truncated: %ld bytes, the database header says %llu (RGPU_ERR_TRUNCATED)", path, size,
                 (unsigned long long)pages * page);
        return RGPU_ERR_TRUNCATED;
    }
    return RGPU_OK;
}

rgpu_status tc_open(const char *path, tc_trace **out, char *err, size_t errlen) {
    *out = NULL;
    if (access(path, R_OK) != 0) {
        snprintf(err, errlen, "%s: cannot read the file", path);
        return RGPU_ERR_IO;
    }
    rgpu_status ts = check_not_truncated(path, err, errlen);
    if (ts) return ts;
    tc_trace *t = calloc(1, sizeof *t);
    if (!t) { snprintf(err, errlen, "out of memory"); return RGPU_ERR_NOMEM; }
    t->path = path;
    rgpu_status s = rgpu_rgt_open(path, &t->rgt);
    if (s) {
        snprintf(err, errlen, "%s (%s)", rgpu_rgt_errmsg(NULL), rgpu_status_name(s));
        free(t);
        return s;
    }
    char ck[32];
    if (rgpu_rgt_get_meta(t->rgt, "checkpoint_op", ck, sizeof ck) == RGPU_OK) {
        snprintf(err, errlen, "%s: a compacted rgpu-server journal (its history before op %s is a checkpoint): "
                 "only the server rebuilds from it (RGPU_ERR_BAD_TRACE)", path, ck);
        rgpu_rgt_close(t->rgt);
        free(t);
        return RGPU_ERR_BAD_TRACE;
    }
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        t->db = db;
        s = db_fail(t, "open");
        goto fail;
    }
    t->db = db;
    /* Schema and totals in one go: a file with the meta rows but no (or a
     * broken) stream table fails here, before anything runs. */
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT count(*), coalesce(sum(op_count),0), coalesce(max(seq)+1,0), "
                           "coalesce(min(seq),0), min(op_count) FROM stream", -1, &st, NULL) != SQLITE_OK) {
        s = db_fail(t, "reading the stream table");
        goto fail;
    }
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        t->n_stream = (uint64_t)sqlite3_column_int64(st, 0);
        t->n_ops = (uint64_t)sqlite3_column_int64(st, 1);
        uint64_t end = (uint64_t)sqlite3_column_int64(st, 2), lo = (uint64_t)sqlite3_column_int64(st, 3);
        bool neg = sqlite3_column_type(st, 4) != SQLITE_NULL && sqlite3_column_int64(st, 4) < 0;
        sqlite3_finalize(st);
        if (t->n_stream && (end != t->n_stream || lo != 0)) {
            snprintf(t->err, sizeof t->err, "%s: stream entries are not numbered 0..%llu", path,
                     (unsigned long long)t->n_stream - 1);
            s = RGPU_ERR_BAD_TRACE;
            goto fail;
        }
        if (neg) { snprintf(t->err, sizeof t->err, "%s: negative op count in the stream", path); s = RGPU_ERR_BAD_TRACE; goto fail; }
    } else {
        sqlite3_finalize(st);
        s = db_fail(t, "reading the stream table");
        goto fail;
    }
    static const char *const probes[] = {
        "SELECT hash, raw_len, frame FROM chunks LIMIT 0",
        "SELECT hash, raw_len, frame FROM blobs LIMIT 0",
        "SELECT op_index, status, data FROM results LIMIT 0",
    };
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        if (sqlite3_prepare_v2(db, probes[i], -1, &st, NULL) != SQLITE_OK) { s = db_fail(t, "schema"); goto fail; }
        sqlite3_finalize(st);
    }
    *out = t;
    return RGPU_OK;
fail:
    snprintf(err, errlen, "%s (%s)", t->err, rgpu_status_name(s));
    tc_close(t);
    return s;
}

void tc_close(tc_trace *t) {
    if (!t) return;
    rgpu_rgt_close(t->rgt);
    if (t->db) sqlite3_close(t->db);
    free(t);
}

bool tc_meta(tc_trace *t, const char *key, char *out, size_t outlen) {
    sqlite3_stmt *st;
    bool ok = false;
    if (sqlite3_prepare_v2(t->db, "SELECT value FROM meta WHERE key=?", -1, &st, NULL) != SQLITE_OK) return false;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0)) {
        snprintf(out, outlen, "%s", (const char *)sqlite3_column_text(st, 0));
        ok = true;
    }
    sqlite3_finalize(st);
    return ok;
}

rgpu_status tc_meta_each(tc_trace *t, void (*fn)(void *, const char *, const char *), void *ud) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(t->db, "SELECT key, value FROM meta ORDER BY key", -1, &st, NULL) != SQLITE_OK)
        return db_fail(t, "meta");
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(st, 0), *v = (const char *)sqlite3_column_text(st, 1);
        fn(ud, k ? k : "", v ? v : "");
    }
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? RGPU_OK : db_fail(t, "meta");
}

/* ---------------------------------------------------------------------------
 * The stream */
rgpu_status tc_next_chunk(tc_trace *t, tc_chunk *c) {
    memset(c, 0, sizeof *c);
    if (t->next_seq >= t->n_stream) return RGPU_OK;
    c->seq = t->next_seq;
    uint8_t *frame = NULL;
    size_t flen = 0;
    rgpu_status s = rgpu_rgt_get_stream(t->rgt, c->seq, &c->hash, &c->first_op, &c->count, &frame, &flen);
    if (s) {
        snprintf(t->err, sizeof t->err, "%s: %s (%s)", t->path, rgpu_rgt_errmsg(t->rgt), rgpu_status_name(s));
        free(frame);
        return s;
    }
    c->frame_len = flen;
    if (c->first_op != t->next_op) {
        snprintf(t->err, sizeof t->err, "%s: stream entry %llu starts at op %llu, expected %llu", t->path,
                 (unsigned long long)c->seq, (unsigned long long)c->first_op, (unsigned long long)t->next_op);
        free(frame);
        return RGPU_ERR_BAD_TRACE;
    }
    s = rgpu_frame_decompress(frame, flen, RGPU_MAX_CHUNK_RAW, &c->raw, &c->raw_len);
    free(frame);
    if (s) {
        snprintf(t->err, sizeof t->err, "%s: chunk of stream entry %llu (ops %llu..): %s (%s)", t->path,
                 (unsigned long long)c->seq, (unsigned long long)c->first_op, rgpu_status_str(s), rgpu_status_name(s));
        c->raw = NULL;
        return s;
    }
    rgpu_hash got = rgpu_hash_bytes(c->raw, c->raw_len);
    if (!rgpu_hash_eq(&got, &c->hash)) {
        snprintf(t->err, sizeof t->err, "%s: chunk of stream entry %llu does not match its hash (RGPU_ERR_BAD_CHECKSUM)",
                 t->path, (unsigned long long)c->seq);
        free(c->raw); c->raw = NULL;
        return RGPU_ERR_BAD_CHECKSUM;
    }
    size_t off = 0;
    uint32_t k = 0;
    rgpu_record r;
    while (off < c->raw_len) {
        size_t used;
        s = rgpu_record_decode(c->raw + off, c->raw_len - off, &r, &used);
        if (s) {
            snprintf(t->err, sizeof t->err, "%s: record %llu (op %llu) does not decode: %s (%s)", t->path,
                     (unsigned long long)k, (unsigned long long)(c->first_op + k), rgpu_status_str(s), rgpu_status_name(s));
            free(c->raw); c->raw = NULL;
            return s;
        }
        off += used;
        k++;
    }
    if (k != c->count) {
        snprintf(t->err, sizeof t->err, "%s: stream entry %llu says %u ops, its chunk holds %u", t->path,
                 (unsigned long long)c->seq, c->count, k);
        free(c->raw); c->raw = NULL;
        return RGPU_ERR_BAD_TRACE;
    }
    t->next_seq++;
    t->next_op += c->count;
    t->raw_bytes += c->raw_len;
    if (!c->raw) c->raw = malloc(1);   /* an empty chunk still is one */
    return c->raw ? RGPU_OK : RGPU_ERR_NOMEM;
}

rgpu_status tc_next_record(tc_trace *t, tc_walk *w, rgpu_record *r, bool *more) {
    while (!w->c.raw || w->k >= w->c.count) {
        free(w->c.raw);
        w->off = 0, w->k = 0;
        rgpu_status s = tc_next_chunk(t, &w->c);
        if (s || !w->c.raw) { *more = false; return s; }
        w->chunks++;
    }
    size_t used;
    rgpu_record_decode(w->c.raw + w->off, w->c.raw_len - w->off, r, &used);   /* checked by tc_next_chunk */
    w->idx = w->c.first_op + w->k;
    w->bytes = w->c.raw + w->off;
    w->n_bytes = used;
    w->off += used;
    w->k++;
    *more = true;
    return RGPU_OK;
}

void tc_walk_end(tc_walk *w) {
    free(w->c.raw);
    w->c.raw = NULL;
}

rgpu_status tc_fetch_blob(void *ud, const rgpu_hash *h, uint64_t max_n, uint8_t **data, size_t *n) {
    tc_trace *t = ud;
    uint8_t *frame = NULL;
    size_t flen = 0;
    char hex[33];
    rgpu_hash_hex(h, hex);
    rgpu_status s = rgpu_rgt_get_blob(t->rgt, h, &frame, &flen);
    if (!s) {
        s = rgpu_frame_decompress(frame, flen, max_n < RGPU_MAX_BLOB_RAW ? max_n : RGPU_MAX_BLOB_RAW, data, n);
        free(frame);
        if (s == RGPU_ERR_TOO_LARGE && *n <= RGPU_MAX_BLOB_RAW) return RGPU_ERR_LIMIT;   /* *n: its size */
        if (!s) {
            rgpu_hash got = rgpu_hash_bytes(*data, *n);
            if (rgpu_hash_eq(&got, h)) {
                t->blob_bytes += *n;
                t->n_blobs_fetched++;
                return RGPU_OK;
            }
            free(*data);
            s = RGPU_ERR_BAD_CHECKSUM;
        }
    }
    *data = NULL; *n = 0;
    if (!t->blob_err) {
        t->blob_err = s;
        snprintf(t->err, sizeof t->err, "%s: blob %s: %s (%s)", t->path, hex,
                 s == RGPU_ERR_MISSING_BLOB ? "not in the trace" : rgpu_status_str(s), rgpu_status_name(s));
    }
    return s;
}

bool tc_malformed(int op, int status) {
    bool file_op = op == RGPU_OP_FILE_STAT || op == RGPU_OP_FILE_LIST || op == RGPU_OP_FROM_FILE ||
                   op == RGPU_OP_ZIP_INDEX || op == RGPU_OP_SAVE_ZIP;
    if (file_op && (status == RGPU_ERR_OUT_OF_BOUNDS || status == RGPU_ERR_TOO_LARGE || status == RGPU_ERR_UNKNOWN_TENSOR))
        return false;
    switch (status) {
    case RGPU_ERR_OUT_OF_BOUNDS: case RGPU_ERR_TOO_LARGE: case RGPU_ERR_OVERFLOW: case RGPU_ERR_TOO_MANY_DIMS:
    case RGPU_ERR_UNKNOWN_TENSOR: case RGPU_ERR_UNKNOWN_STORAGE: case RGPU_ERR_DUPLICATE_ID:
        return true;
    default:
        return false;
    }
}

void tc_limits_init(tc_limits *l) {
    rgpu_limits_resolve(&l->opts);
    memset(&l->pool, 0, sizeof l->pool);
    l->pool.limit = l->opts.max_memory;
    memset(&l->lim, 0, sizeof l->lim);
    l->lim.max_total_bytes = l->opts.max_session_bytes;
    l->lim.max_storages = l->opts.max_storages;
    l->lim.pool = &l->pool;
}

bool tc_over_limit(int status) { return status == RGPU_ERR_LIMIT; }

bool tc_input_changed(int status) { return status == RGPU_ERR_CHANGED; }

/* ---------------------------------------------------------------------------
 * Results and sizes */
rgpu_status tc_load_results(tc_trace *t, tc_results *out) {
    out->v = NULL; out->n = 0;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(t->db, "SELECT op_index, status, data FROM results ORDER BY op_index", -1, &st, NULL) != SQLITE_OK)
        return db_fail(t, "results");
    size_t cap = 0;
    int rc;
    rgpu_status s = RGPU_OK;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (sqlite3_column_int64(st, 0) < 0) {
            snprintf(t->err, sizeof t->err, "%s: a result for op %lld", t->path, (long long)sqlite3_column_int64(st, 0));
            s = RGPU_ERR_BAD_TRACE;
            break;
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 64;
            tc_result *v = realloc(out->v, cap * sizeof *v);
            if (!v) { s = RGPU_ERR_NOMEM; break; }
            out->v = v;
        }
        tc_result *r = &out->v[out->n];
        r->op = (uint64_t)sqlite3_column_int64(st, 0);
        r->status = sqlite3_column_int(st, 1);
        const void *p = sqlite3_column_blob(st, 2);
        int len = sqlite3_column_bytes(st, 2);
        r->n = len > 0 ? (size_t)len : 0;
        r->data = malloc(r->n ? r->n : 1);
        if (!r->data) { s = RGPU_ERR_NOMEM; break; }
        if (r->n) memcpy(r->data, p, r->n);
        out->n++;
    }
    if (!s && rc != SQLITE_DONE) s = db_fail(t, "results");
    sqlite3_finalize(st);
    if (s) tc_results_free(out);
    return s;
}

void tc_results_free(tc_results *r) {
    for (size_t i = 0; i < r->n; i++) free(r->v[i].data);
    free(r->v);
    r->v = NULL; r->n = 0;
}

static rgpu_status query_u64s(tc_trace *t, const char *sql, uint64_t *v, int n) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(t->db, sql, -1, &st, NULL) != SQLITE_OK) return db_fail(t, "statistics");
    rgpu_status s = RGPU_OK;
    if (sqlite3_step(st) == SQLITE_ROW) {
        for (int i = 0; i < n; i++) v[i] = (uint64_t)sqlite3_column_int64(st, i);
    } else {
        s = db_fail(t, "statistics");
    }
    sqlite3_finalize(st);
    return s;
}

rgpu_status tc_stats_get(tc_trace *t, tc_stats *s) {
    memset(s, 0, sizeof *s);
    uint64_t a[4];
    rgpu_status st;
    if ((st = query_u64s(t, "SELECT count(*), coalesce(sum(s.op_count),0), coalesce(sum(c.raw_len),0), "
                         "coalesce(sum(length(c.frame)),0) FROM stream s LEFT JOIN chunks c ON c.hash = s.hash", a, 4)))
        return st;
    s->stream = a[0]; s->stream_ops = a[1]; s->stream_raw = a[2]; s->stream_frame = a[3];
    if ((st = query_u64s(t, "SELECT count(*), coalesce(sum(raw_len),0), coalesce(sum(length(frame)),0) FROM chunks", a, 3)))
        return st;
    s->chunks = a[0]; s->chunk_raw = a[1]; s->chunk_frame = a[2];
    if ((st = query_u64s(t, "SELECT count(*), coalesce(sum(raw_len),0), coalesce(sum(length(frame)),0) FROM blobs", a, 3)))
        return st;
    s->blobs = a[0]; s->blob_raw = a[1]; s->blob_frame = a[2];
    if ((st = query_u64s(t, "SELECT count(*), coalesce(sum(status != 0),0) FROM results", a, 2))) return st;
    s->results = a[0]; s->results_failed = a[1];
    return RGPU_OK;
}

rgpu_status tc_check_stream(tc_trace *t) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(t->db, "SELECT s.seq, s.first_op, s.op_count, c.hash IS NOT NULL FROM stream s "
                           "LEFT JOIN chunks c ON c.hash = s.hash ORDER BY s.seq", -1, &st, NULL) != SQLITE_OK)
        return db_fail(t, "stream");
    uint64_t next = 0;
    rgpu_status s = RGPU_OK;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        unsigned long long seq = (unsigned long long)sqlite3_column_int64(st, 0);
        uint64_t first = (uint64_t)sqlite3_column_int64(st, 1), count = (uint64_t)sqlite3_column_int64(st, 2);
        if (!sqlite3_column_int(st, 3)) {
            snprintf(t->err, sizeof t->err, "%s: stream entry %llu names a chunk the file lacks (RGPU_ERR_BAD_TRACE)", t->path, seq);
            s = RGPU_ERR_BAD_TRACE;
            break;
        }
        if (first != next) {
            snprintf(t->err, sizeof t->err, "%s: stream entry %llu starts at op %llu, expected %llu (RGPU_ERR_BAD_TRACE)",
                     t->path, seq, (unsigned long long)first, (unsigned long long)next);
            s = RGPU_ERR_BAD_TRACE;
            break;
        }
        next += count;
    }
    if (!s && rc != SQLITE_DONE) s = db_fail(t, "stream");
    sqlite3_finalize(st);
    return s;
}

/* ---------------------------------------------------------------------------
 * Elements and comparison */
static double half_to_f64(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0) v = ldexp((double)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexp((double)(m | 0x400), e - 25);
    return sign ? -v : v;
}

static double bf16_to_f64(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

double tc_elem(int dtype, const void *p, size_t i) {
    const uint8_t *b = (const uint8_t *)p + i * rgpu_dtype_size(dtype);
    switch (dtype) {
    case RGPU_F32: { float f; memcpy(&f, b, 4); return f; }
    case RGPU_F64: { double d; memcpy(&d, b, 8); return d; }
    case RGPU_F16: { uint16_t h; memcpy(&h, b, 2); return half_to_f64(h); }
    case RGPU_BF16: { uint16_t h; memcpy(&h, b, 2); return bf16_to_f64(h); }
    case RGPU_I64: { int64_t v; memcpy(&v, b, 8); return (double)v; }
    case RGPU_I32: { int32_t v; memcpy(&v, b, 4); return v; }
    case RGPU_I16: { int16_t v; memcpy(&v, b, 2); return v; }
    case RGPU_I8: return (int8_t)b[0];
    case RGPU_U8: return b[0];
    case RGPU_BOOL: return b[0];
    default: return NAN;
    }
}

/* A complex dtype's parts: complex64 -> float32 and so on; -1 for a real dtype. */
static int complex_part(int dtype) {
    return dtype == RGPU_C64 ? RGPU_F32 : dtype == RGPU_C128 ? RGPU_F64 : dtype == RGPU_C32 ? RGPU_F16 : -1;
}

tc_tol tc_default_tol(int dtype) {
    if (complex_part(dtype) >= 0) dtype = complex_part(dtype);
    switch (dtype) {
    case RGPU_F32: return (tc_tol){ 1e-5, 1e-6, false };
    case RGPU_F64: return (tc_tol){ 1e-12, 1e-12, false };
    case RGPU_F16: return (tc_tol){ 1e-3, 1e-5, false };
    case RGPU_BF16: return (tc_tol){ 1e-2, 1e-4, false };
    default: return (tc_tol){ 0, 0, true };
    }
}

void tc_compare(int dtype, const void *a, const void *b, size_t n, tc_tol tol, tc_cmp *c) {
    memset(c, 0, sizeof *c);
    c->first_bad = -1;
    if (complex_part(dtype) >= 0) {   /* complex: real and imaginary parts compared as reals */
        dtype = complex_part(dtype);
        n *= 2;
    }
    c->n = n;
    size_t es = rgpu_dtype_size(dtype);
    bool fl = rgpu_dtype_is_float(dtype), exact = tol.exact || !fl;
    for (size_t i = 0; i < n; i++) {
        bool same_bits = memcmp((const uint8_t *)a + i * es, (const uint8_t *)b + i * es, es) == 0;
        if (same_bits) continue;
        double va = tc_elem(dtype, a, i), vb = tc_elem(dtype, b, i);
        bool bad, nonfinite = !isfinite(va) || !isfinite(vb);
        double norm;
        if (nonfinite) {
            bool agree = (isnan(va) && isnan(vb)) || (va == vb);
            bad = !agree || exact;
            norm = bad ? INFINITY : 0;
            if (!agree) c->n_nonfinite_mismatch++;
        } else {
            double d = fabs(va - vb), den = tol.atol + tol.rtol * fabs(vb);
            if (d > c->max_abs) c->max_abs = d;
            double rel = vb != 0 ? d / fabs(vb) : (d > 0 ? INFINITY : 0);
            if (rel > c->max_rel) c->max_rel = rel;
            if (exact) norm = INFINITY;
            else norm = den > 0 ? d / den : (d > 0 ? INFINITY : 0);
            bad = exact || norm > 1;
            if (!bad && d == 0) norm = 0;   /* -0.0 against 0.0 */
        }
        if (norm > c->max_norm) c->max_norm = norm;
        if (bad) {
            if (c->first_bad < 0) { c->first_bad = (int64_t)i; c->first_a = va; c->first_b = vb; }
            c->n_bad++;
        }
    }
}

/* ---------------------------------------------------------------------------
 * Printing */
int tc_usage_error(const char *prog, const char *fmt, const char *arg) {
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see %s --help)\n", prog);
    return 2;
}

double tc_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *tc_bytes(uint64_t n, char buf[32]) {
    static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) { v /= 1024; u++; }
    if (u == 0) snprintf(buf, 32, "%llu B", (unsigned long long)n);
    else snprintf(buf, 32, "%.1f %s", v, unit[u]);
    return buf;
}

const char *tc_rate(double v, char buf[32]) {
    if (!isfinite(v)) snprintf(buf, 32, "-");
    else if (v >= 1e6) snprintf(buf, 32, "%.1fM", v / 1e6);
    else if (v >= 1e3) snprintf(buf, 32, "%.1fk", v / 1e3);
    else snprintf(buf, 32, "%.0f", v);
    return buf;
}

void tc_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

void tc_json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fputs("null", f);
}

bool tc_parse_u64(const char *s, uint64_t *v) {
    if (!s || !*s || *s == '-') return false;
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    if (*end) return false;
    *v = x;
    return true;
}

bool tc_parse_f64(const char *s, double *v) {
    if (!s || !*s) return false;
    char *end;
    double x = strtod(s, &end);
    if (*end || !isfinite(x) || x < 0) return false;
    *v = x;
    return true;
}

void tc_tensor_desc(rgpu_session *s, uint64_t tid, char *out, size_t outlen) {
    rgpu_tensor_info ti;
    if (!tid) { snprintf(out, outlen, "None"); return; }
    if (rgpu_session_tensor_info(s, tid, &ti)) { snprintf(out, outlen, "t%llu?", (unsigned long long)tid); return; }
    size_t k = (size_t)snprintf(out, outlen, "%s[", rgpu_dtype_name(ti.dtype));
    for (int d = 0; d < ti.ndim && k < outlen; d++)
        k += (size_t)snprintf(out + k, outlen - k, "%s%lld", d ? "," : "", (long long)ti.sizes[d]);
    if (k < outlen) snprintf(out + k, outlen - k, "]");
}

int tc_op_by_name(const char *name) {
    for (int i = 0; i < RGPU_OP_COUNT; i++)
        if (!strcmp(rgpu_op_table[i].name, name)) return i;
    return -1;
}

/* ---------------------------------------------------------------------------
 * Progress */
void tc_progress_start(tc_progress *p, const char *what, bool enabled) {
    p->on = enabled && isatty(2);
    p->t0 = p->last = tc_now();
    p->what = what;
}

void tc_progress_update(tc_progress *p, uint64_t done, uint64_t total) {
    if (!p->on) return;
    double now = tc_now();
    if (now - p->t0 < 0.5 || now - p->last < 0.1) return;
    p->last = now;
    int width = 30, fill = total ? (int)((double)done / (double)total * width) : 0;
    if (fill > width) fill = width;
    char bar[64], rate[32];
    memset(bar, '#', (size_t)fill);
    memset(bar + fill, '.', (size_t)(width - fill));
    bar[width] = 0;
    fprintf(stderr, "\r%s [%s] %3d%% %llu/%llu ops, %s ops/s ", p->what, bar,
            total ? (int)(100.0 * (double)done / (double)total) : 0, (unsigned long long)done,
            (unsigned long long)total, tc_rate((double)done / (now - p->t0), rate));
    fflush(stderr);
}

void tc_progress_end(tc_progress *p) {
    if (p->on && p->last > p->t0) fprintf(stderr, "\r\033[K");
    p->on = false;
}
