/* rgpu-trace — look inside a .rgt trace: what it is (info), which ops it
 * runs (ops), every record in readable form (dump).
 *
 * Nothing is executed. Every chunk is still checked as rgpu-replay checks it
 * (frame, hash, stream continuity, record decoding), so a trace this tool
 * reads without complaint is one the replayer can at least decode. Exit
 * codes: 0 ok, 2 usage or bad trace. */
#include "trace_common.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char *PROG = "rgpu-trace";

static const char USAGE[] =
    "usage: rgpu-trace info TRACE.rgt\n"
    "       rgpu-trace ops  TRACE.rgt\n"
    "       rgpu-trace dump TRACE.rgt [--from N] [--to M]\n"
    "       rgpu-trace digest TRACE.rgt\n"
    "\n"
    "  info   meta (format version, op-table hash, creator, backend, ...), op count,\n"
    "         chunks (stream entries and unique chunks) with raw and compressed\n"
    "         bytes and the compression ratio, the dedupe ratio (stream chunk bytes\n"
    "         / unique chunk bytes), blobs (count, bytes), recorded wait results\n"
    "  ops    histogram of op names, most frequent first: count, share, name\n"
    "  dump   one line per record:\n"
    "           INDEX NAME out=[...] in=[...] args=[...]\n"
    "         an output is tTID=sSID:DTYPE[SIZES]/[STRIDES]+OFFSET followed by\n"
    "         new(NBYTES) for a new storage, view for a view of an existing one;\n"
    "         tTID=existing writes into a defined tensor, - is an unwanted output;\n"
    "         inputs are tTID or None; long int lists are abbreviated. A CALL\n"
    "         (rgpu::call) ends with template=HASH bindings=N.\n"
    "         --from N / --to M print only ops in [N, M).\n"
    "  digest `records N ops HASH frees HASH`: the content hash of every record's\n"
    "         bytes but FREE's, in stream order (blobs and templates are named by\n"
    "         hash inside records), and of the sorted freed ids: two traces of one\n"
    "         program agree, however the client chunked and batched its FREEs\n"
    "  --help this text\n"
    "\n"
    "Exit status: 0 ok, 2 usage error or unreadable, corrupt or version-mismatched\n"
    "trace (one line on stderr).\n";

/* ---------------------------------------------------------------------------
 * info */
static void print_meta(void *ud, const char *k, const char *v) {
    (void)ud;
    char hex[33];
    rgpu_hash h;
    printf("meta.%s: %s", k, v);
    if (!strcmp(k, "op_table_hash")) {
        rgpu_op_table_hash(h.b);
        rgpu_hash_hex(&h, hex);
        printf(" (%s this build)", strcmp(hex, v) ? "differs from" : "matches");
    }
    printf("\n");
}

static double ratio(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0.0; }

static int cmd_info(tc_trace *t) {
    tc_stats s;
    if (tc_check_stream(t) || tc_stats_get(t, &s) || tc_meta_each(t, print_meta, NULL)) {
        fprintf(stderr, "%s: %s\n", PROG, t->err);
        return 2;
    }
    /* every chunk of the stream is read, its frame checked and its records
     * decoded: a trace that would not replay is not reported as fine */
    for (;;) {
        tc_chunk c;
        if (tc_next_chunk(t, &c)) { fprintf(stderr, "%s: %s\n", PROG, t->err); return 2; }
        if (!c.raw) break;
        free(c.raw);
    }
    char b1[32], b2[32], b3[32];
    printf("ops: %" PRIu64 "\n", s.stream_ops);
    printf("chunks: %" PRIu64 " stream entries, %" PRIu64 " unique\n", s.stream, s.chunks);
    printf("chunk bytes: %" PRIu64 " raw (%s), %" PRIu64 " compressed (%s), compression ratio %.2f\n",
           s.chunk_raw, tc_bytes(s.chunk_raw, b1), s.chunk_frame, tc_bytes(s.chunk_frame, b2),
           ratio(s.chunk_raw, s.chunk_frame));
    printf("stream chunk bytes: %" PRIu64 " raw (%s), dedupe ratio %.2f\n", s.stream_raw, tc_bytes(s.stream_raw, b3),
           ratio(s.stream_raw, s.chunk_raw));
    printf("blobs: %" PRIu64 ", %" PRIu64 " raw bytes (%s), %" PRIu64 " compressed (%s), compression ratio %.2f\n",
           s.blobs, s.blob_raw, tc_bytes(s.blob_raw, b1), s.blob_frame, tc_bytes(s.blob_frame, b2),
           ratio(s.blob_raw, s.blob_frame));
    printf("results: %" PRIu64 " (%" PRIu64 " failed)\n", s.results, s.results_failed);
    return 0;
}

/* ---------------------------------------------------------------------------
 * ops */
typedef struct { const char *name; uint64_t n; } opcount;

static int by_count(const void *a, const void *b) {
    const opcount *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? 1 : -1;
    return strcmp(x->name, y->name);
}

static int cmd_ops(tc_trace *t) {
    uint64_t counts[RGPU_OP_COUNT] = { 0 }, total = 0;
    tc_walk w = { 0 };
    rgpu_record r;
    bool more;
    rgpu_status st;
    while (!(st = tc_next_record(t, &w, &r, &more)) && more) {
        counts[r.op]++;
        total++;
    }
    if (st) { fprintf(stderr, "%s: %s\n", PROG, t->err); return 2; }
    opcount v[RGPU_OP_COUNT];
    int n = 0;
    for (int i = 0; i < RGPU_OP_COUNT; i++)
        if (counts[i]) v[n++] = (opcount){ rgpu_op_name(i), counts[i] };
    qsort(v, (size_t)n, sizeof v[0], by_count);
    printf("%10s %7s  %s\n", "count", "share", "op");
    for (int i = 0; i < n; i++) printf("%10" PRIu64 " %6.2f%%  %s\n", v[i].n, 100.0 * ratio(v[i].n, total), v[i].name);
    printf("%10" PRIu64 " %6.2f%%  total (%d distinct ops)\n", total, total ? 100.0 : 0.0, n);
    return 0;
}

/* ---------------------------------------------------------------------------
 * dump */
#define INTS_SHOWN 8

static void print_ints(const int64_t *v, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) printf("%s%" PRId64, i ? "," : "", v[i]);
    putchar(']');
}

static void print_tdef(const rgpu_tdef *d) {
    if (d->flags & RGPU_TDEF_EXISTING) {
        if (d->tid) printf("t%" PRIu64 "=existing", d->tid);
        else printf("-");
        return;
    }
    printf("t%" PRIu64 "=s%" PRIu64 ":%s", d->tid, d->sid, rgpu_dtype_name(d->dtype));
    print_ints(d->sizes, d->ndim);
    putchar('/');
    print_ints(d->strides, d->ndim);
    printf("+%" PRId64, d->offset);
    if (d->flags & RGPU_TDEF_NEW_STORAGE) printf(" new(%" PRIu64 ")", d->nbytes);
    else printf(" view");
}

static void print_arg(const rgpu_arg *a) {
    char hex[33];
    switch (a->kind) {
    case RGPU_ARG_NONE: printf("None"); break;
    case RGPU_ARG_INT: printf("%" PRId64, a->v.i); break;
    case RGPU_ARG_FLOAT: printf("%.17g", a->v.f); break;
    case RGPU_ARG_BOOL: printf("%s", a->v.i ? "True" : "False"); break;
    case RGPU_ARG_DTYPE: printf("%s", rgpu_dtype_name((int)a->v.i)); break;
    case RGPU_ARG_HASH: rgpu_hash_hex(&a->v.h, hex); printf("hash:%s", hex); break;
    case RGPU_ARG_INTS: {
        uint32_t n = a->v.ints.n, shown = n > INTS_SHOWN ? INTS_SHOWN : n;
        putchar('[');
        for (uint32_t i = 0; i < shown; i++) printf("%s%" PRId64, i ? "," : "", rgpu_arg_int_at(a, i));
        if (n > shown) printf(",...(%u more)", n - shown);
        putchar(']');
        break;
    }
    default: printf("?"); break;
    }
}

static void print_record(uint64_t idx, const rgpu_record *r) {
    printf("%" PRIu64 " %s out=[", idx, rgpu_op_name(r->op));
    for (int i = 0; i < r->n_out; i++) { if (i) printf(", "); print_tdef(&r->out[i]); }
    printf("] in=[");
    for (int i = 0; i < r->n_in; i++) {
        if (i) printf(", ");
        if (r->in[i]) printf("t%" PRIu64, r->in[i]); else printf("None");
    }
    printf("] args=[");
    for (int i = 0; i < r->n_args; i++) { if (i) printf(", "); print_arg(&r->args[i]); }
    printf("]");
    if (r->op == RGPU_OP_CALL && r->n_args >= 2 && r->args[0].kind == RGPU_ARG_HASH && r->args[1].kind == RGPU_ARG_INTS) {
        char hex[33];
        rgpu_hash_hex(&r->args[0].v.h, hex);
        printf(" template=%s bindings=%u", hex, r->args[1].v.ints.n);
    }
    printf("\n");
}

static int cmd_dump(tc_trace *t, uint64_t from, uint64_t to) {
    tc_walk w = { 0 };
    rgpu_record r;
    bool more;
    rgpu_status st;
    while (!(st = tc_next_record(t, &w, &r, &more)) && more && w.idx < to)
        if (w.idx >= from) print_record(w.idx, &r);
    tc_walk_end(&w);
    if (st) { fflush(stdout); fprintf(stderr, "%s: %s\n", PROG, t->err); return 2; }
    return 0;
}

/* Appends n bytes to a growing buffer; false when out of memory. */
static bool buf_put(uint8_t **b, size_t *n, size_t *cap, const void *p, size_t len) {
    if (*n + len > *cap) {
        size_t nc = *cap ? *cap : 1 << 20;
        while (nc < *n + len) nc *= 2;
        uint8_t *q = realloc(*b, nc);
        if (!q) return false;
        *b = q, *cap = nc;
    }
    memcpy(*b + *n, p, len);
    *n += len;
    return true;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The ops (every record but FREE, bytes in stream order) and the frees (every
 * freed id, sorted): the client batches FREEs when it flushes, which timing
 * decides; everything else a program records is its own. */
static int cmd_digest(tc_trace *t) {
    uint8_t *ops = NULL, *freed = NULL;
    size_t n_ops = 0, cap_ops = 0, n_freed = 0, cap_freed = 0;
    uint64_t records = 0;
    int rc = 0;
    tc_walk w = { 0 };
    rgpu_record r;
    bool more;
    rgpu_status st = RGPU_OK;
    while (!rc && !(st = tc_next_record(t, &w, &r, &more)) && more) {
        bool ok = true;
        if (r.op == RGPU_OP_FREE && r.n_args == 1 && r.args[0].kind == RGPU_ARG_INTS) {
            for (uint32_t i = 0; i < r.args[0].v.ints.n && ok; i++) {
                uint64_t tid = (uint64_t)rgpu_arg_int_at(&r.args[0], i);
                ok = buf_put(&freed, &n_freed, &cap_freed, &tid, sizeof tid);
            }
        } else {
            ok = buf_put(&ops, &n_ops, &cap_ops, w.bytes, w.n_bytes);
        }
        if (!ok) { fprintf(stderr, "%s: out of memory\n", PROG); rc = 2; }
        records++;
    }
    tc_walk_end(&w);
    if (st) { fprintf(stderr, "%s: %s\n", PROG, t->err); rc = 2; }
    if (!rc) {
        qsort(freed, n_freed / sizeof(uint64_t), sizeof(uint64_t), cmp_u64);
        rgpu_hash h1 = rgpu_hash_bytes(ops, n_ops), h2 = rgpu_hash_bytes(freed, n_freed);
        char x1[33], x2[33];
        rgpu_hash_hex(&h1, x1);
        rgpu_hash_hex(&h2, x2);
        printf("records %llu ops %s frees %s\n", (unsigned long long)records, x1, x2);
    }
    free(ops);
    free(freed);
    return rc;
}

int main(int argc, char **argv) {
    const char *cmd = NULL, *path = NULL;
    uint64_t from = 0, to = UINT64_MAX;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(USAGE, stdout); return 0; }
        else if (!strcmp(a, "--from")) { if (++i >= argc || !tc_parse_u64(argv[i], &from)) return tc_usage_error(PROG, "%s needs an op index", a); }
        else if (!strcmp(a, "--to")) { if (++i >= argc || !tc_parse_u64(argv[i], &to)) return tc_usage_error(PROG, "%s needs an op index", a); }
        else if (a[0] == '-' && a[1]) return tc_usage_error(PROG, "unknown option '%s'", a);
        else if (!cmd) cmd = a;
        else if (!path) path = a;
        else return tc_usage_error(PROG, "unexpected argument '%s'", a);
    }
    if (!cmd) return tc_usage_error(PROG, "%s", "no command (info, ops, dump or digest)");
    if (strcmp(cmd, "info") && strcmp(cmd, "ops") && strcmp(cmd, "dump") && strcmp(cmd, "digest"))
        return tc_usage_error(PROG, "unknown command '%s' (info, ops, dump or digest)", cmd);
    if (!path) return tc_usage_error(PROG, "%s", "no trace given");
    if ((from || to != UINT64_MAX) && strcmp(cmd, "dump")) return tc_usage_error(PROG, "%s", "--from/--to go with dump");

    char err[640];
    tc_trace *t;
    if (tc_open(path, &t, err, sizeof err)) { fprintf(stderr, "%s: %s\n", PROG, err); return 2; }
    int rc = !strcmp(cmd, "info") ? cmd_info(t) : !strcmp(cmd, "ops") ? cmd_ops(t)
           : !strcmp(cmd, "digest") ? cmd_digest(t) : cmd_dump(t, from, to);
    if (fflush(stdout) != 0 && !rc) rc = 2;
    tc_close(t);
    return rc;
}
