/* rgpu-replay — execute a recorded .rgt trace offline, optionally checking
 * every value the live run received at a wait against the replayed one.
 *
 * The trace is the program: chunks are decompressed, checked and decoded,
 * then run record by record on a session of the chosen backend; uploads fetch
 * their blobs from the file. Exit codes: 0 ok, 1 a verified result differs,
 * 2 usage, bad trace or no such backend. */
#include "cpu/cpu_pool.h"
#include "trace_common.h"

#include <stdlib.h>
#include <string.h>

static const char *PROG = "rgpu-replay";

static const char USAGE[] =
    "usage: rgpu-replay TRACE.rgt [--backend cpu|cuda|auto|null] [--verify]\n"
    "                   [--from N] [--to M] [--dump-results FILE] [--quiet] [--profile [FILE.json]]\n"
    "                   [--max-memory BYTES] [--max-session-bytes BYTES] [--max-storages N]\n"
    "                   [--data [NAME=]DIR]... [--data-rw [NAME=]DIR]... [--threads N]\n"
    "\n"
    "Executes a trace recorded by the client (RGPU_RECORD=path) or by the server\n"
    "(rgpu-server --record DIR), without a client: chunks in stream order, uploads\n"
    "from the trace's blobs.\n"
    "\n"
    "  --backend NAME   cpu (reference), cuda, null (executes nothing) or auto (cuda\n"
    "                   when usable, else cpu; default)\n"
    "  --threads N      threads of the cpu backend's kernels (default: the cores this\n"
    "                   process may use, or $RGPU_THREADS); results never depend on it\n"
    "  --verify         check every result the live run received at a wait (the\n"
    "                   trace's results table) against the replayed one: bitwise\n"
    "                   when replaying on the backend that recorded it (meta key\n"
    "                   \"backend\"), else within per-dtype tolerances (float32\n"
    "                   rtol 1e-5 atol 1e-6, float64 1e-12/1e-12, float16 1e-3/1e-5,\n"
    "                   bfloat16 1e-2/1e-4, integers and bool exact); a failed op\n"
    "                   must fail in both. Prints the first mismatch with its op\n"
    "                   index and name.\n"
    "  --from N         verify and report only ops with index >= N (earlier ops\n"
    "                   still execute: they build the state)\n"
    "  --to M           stop executing at op M (exclusive)\n"
    "  --dump-results FILE\n"
    "                   write every wait-op result of the replay in [N, M) to FILE,\n"
    "                   one line each: index, op name, status, hex bytes (two\n"
    "                   replays on one backend give identical files)\n"
    "  --quiet          no progress bar and no summary line\n"
    "  --profile [FILE.json]\n"
    "                   time every record; print the ops by their total time (on\n"
    "                   cuda: launch times, the kernels run asynchronously); with\n"
    "                   a FILE ending in .json, also write every record's span\n"
    "                   there as a Chrome trace (Perfetto, chrome://tracing): an\n"
    "                   event per record named by its op, its index in args; on\n"
    "                   cuda a second row of device spans (CUDA events around\n"
    "                   each record's kernels)\n"
    TC_LIMITS_USAGE
    TC_DATA_USAGE
    "                   A file that changed since the run read it (another size or\n"
    "                   hash: RGPU_ERR_CHANGED) stops the replay with exit 1, naming it.\n"
    "  --help           this text\n"
    "\n"
    "A progress bar is drawn on stderr when it is a terminal and the replay takes\n"
    "a while; a summary line (ops, ops/s, bytes, wall time) goes to stdout.\n"
    "\n"
    "Exit status: 0 replayed (and verified), 1 a result differs or a file the run\n"
    "read has changed, 2 usage error,\n"
    "unreadable, corrupt or version-mismatched trace, unavailable backend, or an\n"
    "op over the memory limits.\n";

typedef struct verifier {
    bool same_backend;
    uint64_t checked, mismatches;
    bool printed;
} verifier;

static void hexdump(FILE *f, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) fprintf(f, "%02x", p[i]);
}

/* Compare one recorded result with the replay's answer at the same op. */
static void verify_one(verifier *v, rgpu_session *s, const rgpu_record *r, const tc_result *rec,
                       int st, const char *msg, const uint8_t *data, size_t n) {
    char why[512] = "";
    v->checked++;
    if (rec->status && !st) {
        snprintf(why, sizeof why, "the live run failed (%s), the replay did not", rgpu_status_name(rec->status));
    } else if (!rec->status && st) {
        snprintf(why, sizeof why, "the replay failed: %s", msg);
    } else if (rec->status && st) {
        if (v->same_backend && rec->status != st)
            snprintf(why, sizeof why, "the live run failed with %s, the replay with %s: %s",
                     rgpu_status_name(rec->status), rgpu_status_name(st), msg);
    } else if (rec->n != n) {
        snprintf(why, sizeof why, "recorded %zu result bytes, replayed %zu", rec->n, n);
    } else if (n && memcmp(rec->data, data, n) != 0) {
        /* Decode with the dtype of the op's input (what a DOWNLOAD or .item() returns). */
        int dtype = -1;
        rgpu_tensor_info ti;
        if (r->n_in > 0 && r->in[0] && !rgpu_session_tensor_info(s, r->in[0], &ti) &&
            n % rgpu_dtype_size(ti.dtype) == 0)
            dtype = ti.dtype;
        if (dtype < 0) {
            size_t i = 0;
            while (rec->data[i] == data[i]) i++;
            snprintf(why, sizeof why, "byte %zu of %zu: recorded 0x%02x, replayed 0x%02x", i, n, rec->data[i], data[i]);
        } else {
            tc_tol tol = tc_default_tol(dtype);
            if (v->same_backend) tol.exact = true;
            tc_cmp c;
            size_t ne = n / rgpu_dtype_size(dtype);
            tc_compare(dtype, data, rec->data, ne, tol, &c);
            if (c.n_bad)
                snprintf(why, sizeof why, "%s, %llu of %zu elements differ (%s); first at element %lld: recorded %.9g, replayed %.9g; max abs err %.3g, max rel err %.3g",
                         rgpu_dtype_name(dtype), (unsigned long long)c.n_bad, ne,
                         v->same_backend ? "bitwise, same backend" : "over tolerance", (long long)c.first_bad,
                         c.first_b, c.first_a, c.max_abs, c.max_rel);
        }
    }
    if (!why[0]) return;
    v->mismatches++;
    if (!v->printed) {
        printf("%s: mismatch at op %llu (%s): %s\n", PROG, (unsigned long long)rec->op, rgpu_op_name(r->op), why);
        fflush(stdout);
        v->printed = true;
    }
}

/* --profile: ops by time spent, the largest first, down to 99.9% of the total. */
static void print_profile(const rgpu_op_profile *p, double wall) {
    int order[RGPU_OP_COUNT], n = 0;
    uint64_t total = 0;
    for (int i = 0; i < RGPU_OP_COUNT; i++) if (p->count[i]) { order[n++] = i; total += p->ns[i]; }
    for (int i = 1; i < n; i++)          /* insertion sort, by time descending */
        for (int j = i; j > 0 && p->ns[order[j]] > p->ns[order[j - 1]]; j--) { int x = order[j]; order[j] = order[j - 1]; order[j - 1] = x; }
    printf("%s: profile: %.3f ms in records of %.3f ms of wall time\n", PROG, (double)total * 1e-6, wall * 1e3);
    printf("%-34s %10s %12s %10s %7s\n", "op", "records", "total ms", "us/record", "share");
    uint64_t shown = 0;
    for (int k = 0; k < n && (double)shown < 0.999 * (double)total; k++) {
        int i = order[k];
        shown += p->ns[i];
        printf("%-34s %10llu %12.3f %10.2f %6.1f%%\n", rgpu_op_name(i), (unsigned long long)p->count[i],
               (double)p->ns[i] * 1e-6, (double)p->ns[i] * 1e-3 / (double)p->count[i],
               total ? 100.0 * (double)p->ns[i] / (double)total : 0.0);
    }
}

int main(int argc, char **argv) {
    rgpu_pool_prepare_process(argv);
    const char *path = NULL, *backend_name = "auto", *dump_path = NULL;
    bool verify = false, quiet = false, profile = false;
    const char *timeline_path = NULL;
    uint64_t from = 0, to = UINT64_MAX;
    tc_limits lim = { 0 };
    rgpu_files *files = rgpu_files_new();
    if (!files) { fprintf(stderr, "%s: out of memory\n", PROG); return 2; }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int k = rgpu_limits_option(&lim.opts, PROG, argc, argv, &i);
        if (!k) k = rgpu_data_option(files, PROG, argc, argv, &i);
        if (k < 0) return 2;
        if (k) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(USAGE, stdout); return 0; }
        else if (!strcmp(a, "--verify")) verify = true;
        else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) quiet = true;
        else if (!strcmp(a, "--profile")) {
            profile = true;
            size_t l = i + 1 < argc ? strlen(argv[i + 1]) : 0;
            if (l > 5 && !strcmp(argv[i + 1] + l - 5, ".json")) timeline_path = argv[++i];
        }
        else if (!strcmp(a, "--threads")) {
            uint64_t v;
            if (++i >= argc || !tc_parse_u64(argv[i], &v) || v < 1 || v > 256) return tc_usage_error(PROG, "%s needs 1..256", a);
            rgpu_pool_set_threads((int)v);
        }
        else if (!strcmp(a, "--backend")) { if (++i >= argc) return tc_usage_error(PROG, "%s needs a value", a); backend_name = argv[i]; }
        else if (!strcmp(a, "--dump-results")) { if (++i >= argc) return tc_usage_error(PROG, "%s needs a file", a); dump_path = argv[i]; }
        else if (!strcmp(a, "--from")) { if (++i >= argc || !tc_parse_u64(argv[i], &from)) return tc_usage_error(PROG, "%s needs an op index", a); }
        else if (!strcmp(a, "--to")) { if (++i >= argc || !tc_parse_u64(argv[i], &to)) return tc_usage_error(PROG, "%s needs an op index", a); }
        else if (a[0] == '-' && a[1]) return tc_usage_error(PROG, "unknown option '%s'", a);
        else if (path) return tc_usage_error(PROG, "one trace at a time ('%s' is extra)", a);
        else path = a;
    }
    if (!path) return tc_usage_error(PROG, "%s", "no trace given");
    if (from > to) return tc_usage_error(PROG, "%s", "--from is after --to");
    if (rgpu_data_from_env(files, PROG)) return 2;

    char err[640];
    tc_trace *t;
    if (tc_open(path, &t, err, sizeof err)) { fprintf(stderr, "%s: %s\n", PROG, err); return 2; }

    char why[256] = "", rec_backend[64] = "";
    tc_meta(t, "backend", rec_backend, sizeof rec_backend);
    rgpu_backend *b = rgpu_backend_create(backend_name, why, sizeof why);
    if (!b) { fprintf(stderr, "%s: --backend %s: %s\n", PROG, backend_name, why); tc_close(t); return 2; }
    (void)why;   /* auto's choice shows in the summary ("on cpu") */

    tc_results res = { 0 };
    if (verify && tc_load_results(t, &res)) {
        fprintf(stderr, "%s: %s\n", PROG, t->err);
        b->destroy(b); tc_close(t);
        return 2;
    }
    FILE *tl = NULL;
    if (timeline_path && !(tl = fopen(timeline_path, "w"))) {
        fprintf(stderr, "%s: --profile %s: cannot create the file\n", PROG, timeline_path);
        tc_results_free(&res); b->destroy(b); tc_close(t);
        return 2;
    }
    FILE *dump = NULL;
    if (dump_path && !(dump = fopen(dump_path, "w"))) {
        if (tl) fclose(tl);
        fprintf(stderr, "%s: --dump-results %s: cannot create the file\n", PROG, dump_path);
        tc_results_free(&res); b->destroy(b); tc_close(t);
        return 2;
    }

    tc_limits_init(&lim);
    rgpu_session *s = rgpu_session_new(b, &lim.lim);
    if (!s) { fprintf(stderr, "%s: out of memory\n", PROG); return 2; }
    rgpu_session_set_fetch(s, tc_fetch_blob, t);
    rgpu_session_set_files(s, files, true);
    rgpu_op_profile *prof = NULL;
    if (profile) {
        if (!(prof = calloc(1, sizeof *prof))) { fprintf(stderr, "%s: out of memory\n", PROG); return 2; }
        prof->timeline = prof->device_marks = timeline_path != NULL;
        rgpu_session_set_profile(s, prof);
    }

    verifier v = { .same_backend = rec_backend[0] && !strcmp(rec_backend, b->name) };
    int rc = 0;
    size_t ri = 0;                       /* next recorded result */
    uint64_t end = to < t->n_ops ? to : t->n_ops, failed = 0, chunks = 0;
    char first_fail_msg[RGPU_MAX_ERROR_MSG + 1] = "";
    /* The live run's status at a wait is the first failure since the previous
     * wait; the replay reproduces that from per-op answers. */
    int pending = 0;
    char pending_msg[RGPU_MAX_ERROR_MSG + 1] = "";
    tc_progress prog;
    tc_progress_start(&prog, PROG, !quiet);
    double t0 = tc_now();
    bool done = false;
    while (!done) {
        tc_chunk c;
        rgpu_status st = tc_next_chunk(t, &c);
        if (st) { tc_progress_end(&prog); fprintf(stderr, "%s: %s\n", PROG, t->err); rc = 2; break; }
        if (!c.raw) break;
        chunks++;
        size_t off = 0;
        for (uint32_t k = 0; k < c.count; k++) {
            uint64_t idx = c.first_op + k;
            if (idx >= end) { done = true; break; }
            rgpu_record r;
            size_t used;
            rgpu_record_decode(c.raw + off, c.raw_len - off, &r, &used);   /* checked by tc_next_chunk */
            off += used;
            rgpu_session_run_record(s, &r, idx);
            if (t->blob_err) { tc_progress_end(&prog); fprintf(stderr, "%s: op %llu (%s): %s\n", PROG, (unsigned long long)idx, rgpu_op_name(r.op), t->err); rc = 2; done = true; break; }
            int status;
            uint64_t err_op;
            char msg[RGPU_MAX_ERROR_MSG + 1];
            uint8_t *data;
            size_t n;
            rgpu_session_take_result(s, idx, &status, &err_op, msg, sizeof msg, &data, &n);
            if (tc_input_changed(status)) {
                tc_progress_end(&prog);
                if (verify) {   /* the live run read the file it recorded; the replay cannot */
                    printf("%s: mismatch at op %llu (%s): the replay failed: %s\n", PROG, (unsigned long long)idx,
                           rgpu_op_name(r.op), msg);
                    v.mismatches++;
                }
                fprintf(stderr, "%s: %s; the replay stops: a file the run read has changed since (restore it to replay)\n",
                        PROG, msg);
                free(data);
                rc = 1; done = true;
                break;
            }
            if (tc_malformed(r.op, status) || tc_over_limit(status)) {
                tc_progress_end(&prog);
                if (tc_over_limit(status))
                    fprintf(stderr, "%s: %s: %s; the replay stops (the limit's option raises it)\n", PROG, path, msg);
                else
                    fprintf(stderr, "%s: %s: malformed trace (RGPU_ERR_BAD_TRACE): %s\n", PROG, path, msg);
                free(data);
                rc = 2; done = true;
                break;
            }
            if (status) {
                if (!failed++) { snprintf(first_fail_msg, sizeof first_fail_msg, "%s", msg); }
                if (!pending) { pending = status; snprintf(pending_msg, sizeof pending_msg, "%s", msg); }
            }
            while (verify && ri < res.n && res.v[ri].op < idx) ri++;
            if (verify && ri < res.n && res.v[ri].op == idx) {
                if (idx >= from) verify_one(&v, s, &r, &res.v[ri], pending, pending_msg, data, n);
                pending = 0;
                ri++;
            }
            if (dump && idx >= from && (rgpu_op_table[r.op].flags & RGPU_OPF_WAIT)) {
                fprintf(dump, "%llu %s %d ", (unsigned long long)idx, rgpu_op_name(r.op), status);
                hexdump(dump, data, n);
                fputc('\n', dump);
            }
            free(data);
            if ((idx & 1023) == 0) tc_progress_update(&prog, idx + 1, end);
        }
        free(c.raw);
    }
    double wall = tc_now() - t0;
    tc_progress_end(&prog);

    if (!rc && verify && to >= t->n_ops) {
        for (; ri < res.n; ri++)
            if (res.v[ri].op >= t->n_ops) {
                fprintf(stderr, "%s: %s: a result is recorded for op %llu, but the trace has %llu ops (RGPU_ERR_BAD_TRACE)\n",
                        PROG, path, (unsigned long long)res.v[ri].op, (unsigned long long)t->n_ops);
                rc = 2;
                break;
            }
    }
    if (!rc && v.mismatches) rc = 1;
    if (!quiet && rc != 2) {
        uint64_t ops = rgpu_session_applied(s);
        char rate[32], rb[32], bb[32], peak_b[32];
        uint64_t alloc, peak;
        rgpu_session_memory(s, &alloc, &peak);
        printf("%s: %s: %llu ops in %.3f s (%s ops/s) on %s; %llu chunks (%s of records), %llu blobs (%s), peak memory %s",
               PROG, rc ? "MISMATCH" : verify ? "ok" : "done", (unsigned long long)ops, wall,
               tc_rate(wall > 0 ? (double)ops / wall : (double)ops, rate), b->name, (unsigned long long)chunks,
               tc_bytes(t->raw_bytes, rb), (unsigned long long)t->n_blobs_fetched, tc_bytes(t->blob_bytes, bb),
               tc_bytes(peak, peak_b));
        if (verify)
            printf("; %llu results verified (%s)", (unsigned long long)v.checked,
                   v.same_backend ? "bitwise" : "within tolerance");
        if (v.mismatches) printf(", %llu mismatching", (unsigned long long)v.mismatches);
        printf("\n");
        if (failed)
            printf("%s: %llu ops failed in the replay; the first: %s\n", PROG, (unsigned long long)failed,
                   first_fail_msg[0] ? first_fail_msg : "?");
    }
    if (prof) print_profile(prof, wall);
    if (tl) {   /* opened before the replay, so a bad path failed at once */
        char who[96];
        snprintf(who, sizeof who, "rgpu-replay (%s)", b->name);
        if (rgpu_op_profile_write_chrome(prof, tl, who, path, b, false)) {
            fprintf(stderr, "%s: --profile %s: write failed\n", PROG, timeline_path);
            if (!rc) rc = 2;
        }
    }
    if (prof) free(prof->events);
    free(prof);
    if (dump && fclose(dump) != 0 && !rc) { fprintf(stderr, "%s: --dump-results %s: write failed\n", PROG, dump_path); rc = 2; }
    rgpu_session_free(s);
    rgpu_files_free(files);
    b->destroy(b);
    tc_results_free(&res);
    tc_close(t);
    return rc;
}
