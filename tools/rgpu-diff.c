/* rgpu-diff — run one trace on two backends side by side and compare every
 * output of every op (ggml's test-backend-ops, on a real program).
 *
 * Two sessions step through the trace record by record. After each op both
 * outputs are read back and compared element by element: normalised error
 * max |a-b| / (atol + rtol*|b|) with per-dtype tolerances (b is the
 * reference), NaN/Inf agreement, integers exact; bitwise when a and b are the
 * same backend (the kernels are deterministic, ARCHITECTURE.md invariant 7).
 * --resync copies a's outputs into b after each op so one early difference
 * does not show up again in every op downstream of it. Exit codes: 0 pass,
 * 1 differences, 2 usage, bad trace or unavailable backend. */
#include "cpu/cpu_pool.h"
#include "trace_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *PROG = "rgpu-diff";

static const char USAGE[] =
    "usage: rgpu-diff TRACE.rgt [--a BACKEND] [--b BACKEND] [--rtol R] [--atol A]\n"
    "                 [--op NAME] [--resync] [--json] [--top K] [--quiet]\n"
    "                 [--max-memory BYTES] [--max-session-bytes BYTES] [--max-storages N]\n"
    "                 [--data [NAME=]DIR]... [--data-rw [NAME=]DIR]... [--threads N]\n"
    "\n"
    "Replays the trace on backends a and b at once and compares every output\n"
    "tensor of every op (views, control ops and unwanted outputs are skipped;\n"
    "a CALL's outputs are the tensors its template defines through its bindings),\n"
    "with b as the reference. Reports the first op over tolerance (index, name,\n"
    "dtypes, shapes, max abs and rel error) and a table of the worst ops by name.\n"
    "\n"
    "  --a BACKEND   backend under test: cuda (default), cpu, null or auto\n"
    "  --b BACKEND   reference backend: cpu (default), cuda, null or auto\n"
    "  --threads N   threads of the cpu backend's kernels (default: the cores)\n"
    "  --rtol R      relative tolerance for floating outputs (default per dtype:\n"
    "                float32 1e-5, float64 1e-12, float16 1e-3, bfloat16 1e-2)\n"
    "  --atol A      absolute tolerance (default per dtype: float32 1e-6, float64\n"
    "                1e-12, float16 1e-5, bfloat16 1e-4); integer and bool\n"
    "                outputs are always compared exactly. An element fails when\n"
    "                |a-b| > atol + rtol*|b|, or when NaN/Inf disagree. When a\n"
    "                and b are the same backend and neither option is given, the\n"
    "                comparison is bitwise (kernels are deterministic).\n"
    "  --op NAME     compare only ops with this name (e.g. mul.Tensor); all ops\n"
    "                still execute\n"
    "  --resync      after each op copy a's outputs into b, so a difference is\n"
    "                reported at the op that makes it and not downstream of it\n"
    "  --json        print a machine-readable report on stdout instead\n"
    "  --top K       rows in the worst-ops table (default 10)\n"
    "  --quiet       no progress bar\n"
    TC_LIMITS_USAGE
    TC_DATA_USAGE
    "                   A file that changed since the run read it (RGPU_ERR_CHANGED)\n"
    "                   stops the diff with exit 2, naming it.\n"
    "  --help        this text\n"
    "\n"
    "An op that fails on one backend only is a difference, except an op the\n"
    "backend has no kernel for (RGPU_ERR_UNSUPPORTED), which is listed as skipped.\n"
    "\n"
    "Environment (test-only): RGPU_CPU_FAULT=OPNAME makes backend b, when it is\n"
    "cpu, a faulty cpu whose OPNAME results are one ulp off in their first element,\n"
    "so that `rgpu-diff --a cpu --b cpu` must fail and name that op. Never set it\n"
    "outside tests.\n"
    "\n"
    "Exit status: 0 no differences, 1 differences, 2 usage error, unreadable,\n"
    "corrupt or version-mismatched trace, unavailable backend, an op over the\n"
    "memory limits (a's and b's sessions share --max-memory), or a file the run read\n"
    "that has changed.\n";

/* Per op name. */
typedef struct opstat {
    uint64_t compared, over, unsupported_a, unsupported_b;
    double max_norm, max_abs, max_rel;
    int64_t first_over;
} opstat;

/* The first difference, kept for the report. */
typedef struct first_diff {
    bool set;
    uint64_t idx;
    int op, out;
    char reason[300];
    char out_a[128], out_b[128];
    int dtype_a, dtype_b, ndim_a, ndim_b;
    int64_t sizes_a[RGPU_MAX_DIMS], sizes_b[RGPU_MAX_DIMS];
    int n_in;
    char in_desc[RGPU_MAX_IN][96];
    tc_cmp c;
} first_diff;

typedef struct differ {
    rgpu_session *a, *b;
    bool exact, have_rtol, have_atol, resync;
    double rtol, atol;
    int only_op;
    opstat st[RGPU_OP_COUNT];
    uint64_t ops_compared, outputs_compared, diffs, both_failed, poisoned;
    first_diff first;
} differ;

static tc_tol tol_for(const differ *d, int dtype) {
    tc_tol t = tc_default_tol(dtype);
    if (!rgpu_dtype_is_float(dtype) && !rgpu_dtype_is_complex(dtype)) return t;
    if (d->have_rtol) t.rtol = d->rtol;
    if (d->have_atol) t.atol = d->atol;
    t.exact = d->exact;
    return t;
}

/* out: the output's position (-1: the op as a whole); tid: its tensor. */
static void note_first(differ *d, uint64_t idx, const rgpu_record *r, int out, uint64_t tid, const tc_cmp *c,
                       const char *reason) {
    if (d->first.set) return;
    first_diff *f = &d->first;
    f->set = true;
    f->idx = idx; f->op = r->op; f->out = out;
    snprintf(f->reason, sizeof f->reason, "%s", reason ? reason : "");
    if (c) f->c = *c; else { memset(&f->c, 0, sizeof f->c); f->c.first_bad = -1; f->c.max_norm = INFINITY; }
    f->dtype_a = f->dtype_b = -1;
    f->ndim_a = f->ndim_b = 0;
    if (out >= 0 && tid) {
        rgpu_tensor_info ti;
        if (!rgpu_session_tensor_info(d->a, tid, &ti)) { f->dtype_a = ti.dtype; f->ndim_a = ti.ndim; memcpy(f->sizes_a, ti.sizes, sizeof ti.sizes); }
        if (!rgpu_session_tensor_info(d->b, tid, &ti)) { f->dtype_b = ti.dtype; f->ndim_b = ti.ndim; memcpy(f->sizes_b, ti.sizes, sizeof ti.sizes); }
        tc_tensor_desc(d->a, tid, f->out_a, sizeof f->out_a);
        tc_tensor_desc(d->b, tid, f->out_b, sizeof f->out_b);
    }
    f->n_in = r->n_in;
    for (int i = 0; i < r->n_in; i++) tc_tensor_desc(d->a, r->in[i], f->in_desc[i], sizeof f->in_desc[i]);
}

static void count_diff(differ *d, uint64_t idx, int op, double norm, const tc_cmp *c) {
    opstat *s = &d->st[op];
    if (!s->over++) s->first_over = (int64_t)idx;
    if (norm > s->max_norm) s->max_norm = norm;
    if (c && c->max_abs > s->max_abs) s->max_abs = c->max_abs;
    if (c && c->max_rel > s->max_rel) s->max_rel = c->max_rel;
}

/* Outputs worth comparing (and resyncing): not views, not control ops, not
 * EMPTY (its bytes are undefined), not an unwanted optional output. */
static bool op_has_data_outputs(const rgpu_record *r) {
    uint32_t f = rgpu_op_table[r->op].flags;
    return r->n_out > 0 && !(f & (RGPU_OPF_VIEW | RGPU_OPF_CONTROL | RGPU_OPF_WAIT)) && r->op != RGPU_OP_EMPTY;
}

/* The op's output tensors, tids[0..n) (0: an unwanted output). */
static void compare_op(differ *d, uint64_t idx, const rgpu_record *r, const uint64_t *tids, size_t n, int sa,
                       const char *ma, int sb, const char *mb) {
    opstat *s = &d->st[r->op];
    if (sa && sb) { d->both_failed++; return; }
    if (sa == RGPU_ERR_UNSUPPORTED) { s->unsupported_a++; return; }
    if (sb == RGPU_ERR_UNSUPPORTED) { s->unsupported_b++; return; }
    d->ops_compared++;
    s->compared++;
    if (sa || sb) {
        char why[300];
        snprintf(why, sizeof why, "failed on %s only: %.270s", sa ? "a" : "b", sa ? ma : mb);
        d->diffs++;
        count_diff(d, idx, r->op, INFINITY, NULL);
        note_first(d, idx, r, -1, 0, NULL, why);
        return;
    }
    bool op_bad = false;
    double op_norm = 0;
    tc_cmp worst = { .first_bad = -1 };
    for (size_t i = 0; i < n; i++) {
        uint64_t tid = tids[i];
        if (!tid) continue;
        rgpu_tensor_info ia, ib;
        if (rgpu_session_tensor_info(d->a, tid, &ia) || rgpu_session_tensor_info(d->b, tid, &ib)) continue;
        if (ia.poisoned || ib.poisoned) { d->poisoned++; continue; }   /* reported where it failed */
        uint8_t *pa = NULL, *pb = NULL;
        size_t na = 0, nb = 0;
        if (rgpu_session_read_tensor(d->a, tid, &pa, &na) || rgpu_session_read_tensor(d->b, tid, &pb, &nb)) {
            free(pa); free(pb);
            continue;
        }
        d->outputs_compared++;
        tc_cmp c;
        char why[300] = "";
        if (ia.dtype != ib.dtype || na != nb) {
            snprintf(why, sizeof why, "output %zu: a is %s with %zu bytes, b %s with %zu", i, rgpu_dtype_name(ia.dtype), na,
                     rgpu_dtype_name(ib.dtype), nb);
            memset(&c, 0, sizeof c);
            c.first_bad = -1;
            c.max_norm = INFINITY;
            c.n_bad = 1;
        } else {
            tc_compare(ia.dtype, pa, pb, na / rgpu_dtype_size(ia.dtype), tol_for(d, ia.dtype), &c);
        }
        free(pa); free(pb);
        if (c.max_norm > op_norm) op_norm = c.max_norm;
        if (c.max_abs > worst.max_abs) worst.max_abs = c.max_abs;
        if (c.max_rel > worst.max_rel) worst.max_rel = c.max_rel;
        if (c.max_norm > s->max_norm) s->max_norm = c.max_norm;
        if (c.max_abs > s->max_abs) s->max_abs = c.max_abs;
        if (c.max_rel > s->max_rel) s->max_rel = c.max_rel;
        if (c.n_bad) {
            op_bad = true;
            note_first(d, idx, r, (int)i, tid, &c, why[0] ? why : NULL);
        }
    }
    if (op_bad) {
        d->diffs++;
        count_diff(d, idx, r->op, op_norm, &worst);
    }
}

/* Make b's outputs of this op equal a's. */
static void resync_op(differ *d, const uint64_t *tids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint64_t tid = tids[i];
        uint8_t *p = NULL;
        size_t n = 0;
        if (!tid || rgpu_session_read_tensor(d->a, tid, &p, &n)) continue;
        rgpu_session_write_tensor(d->b, tid, p, n);
        free(p);
    }
}

/* ---------------------------------------------------------------------------
 * Reports */
typedef struct { int op; const opstat *s; } row;

static int by_badness(const void *x, const void *y) {
    const opstat *a = ((const row *)x)->s, *b = ((const row *)y)->s;
    if ((a->over > 0) != (b->over > 0)) return a->over ? -1 : 1;
    if (a->max_norm != b->max_norm) return a->max_norm < b->max_norm ? 1 : -1;
    if (a->over != b->over) return a->over < b->over ? 1 : -1;
    if (a->over && a->first_over != b->first_over) return a->first_over < b->first_over ? -1 : 1;  /* earliest first */
    return ((const row *)x)->op - ((const row *)y)->op;
}

static int sorted_rows(const differ *d, row *rows) {
    int n = 0;
    for (int i = 0; i < RGPU_OP_COUNT; i++)
        if (d->st[i].compared || d->st[i].unsupported_a || d->st[i].unsupported_b) rows[n++] = (row){ i, &d->st[i] };
    qsort(rows, (size_t)n, sizeof rows[0], by_badness);
    return n;
}

static void fmt_err(double v, char buf[32]) {
    if (isinf(v)) snprintf(buf, 32, "inf");
    else snprintf(buf, 32, "%.3g", v);
}

static void print_human(const differ *d, const char *an, const char *bn, uint64_t ops, int top) {
    printf("%s: a = %s, b = %s (%s), %llu ops, %llu compared (%llu outputs), %llu over tolerance\n", PROG, an, bn,
           d->exact ? "bitwise" : "within tolerance", (unsigned long long)ops, (unsigned long long)d->ops_compared,
           (unsigned long long)d->outputs_compared, (unsigned long long)d->diffs);
    if (d->first.set) {
        const first_diff *f = &d->first;
        char e1[32], e2[32], e3[32];
        printf("first difference: op %llu (%s)", (unsigned long long)f->idx, rgpu_op_name(f->op));
        if (f->out >= 0) printf(" output %d: a %s, b %s", f->out, f->out_a, f->out_b);
        printf("; inputs ");
        for (int i = 0; i < f->n_in; i++) printf("%s%s", i ? ", " : "", f->in_desc[i]);
        if (!f->n_in) printf("none");
        printf("\n");
        if (f->reason[0]) printf("  %s\n", f->reason);
        else {
            fmt_err(f->c.max_abs, e1); fmt_err(f->c.max_rel, e2); fmt_err(f->c.max_norm, e3);
            printf("  %llu of %llu elements differ", (unsigned long long)f->c.n_bad, (unsigned long long)f->c.n);
            if (f->c.first_bad >= 0) printf(", first at element %lld: a=%.9g b=%.9g", (long long)f->c.first_bad, f->c.first_a, f->c.first_b);
            printf("; max abs err %s, max rel err %s, normalised err %s%s", e1, e2, e3, d->exact ? " (bitwise)" : "");
            if (f->c.n_nonfinite_mismatch) printf("; %llu NaN/Inf disagreements", (unsigned long long)f->c.n_nonfinite_mismatch);
            printf("\n");
        }
    }
    row rows[RGPU_OP_COUNT];
    int n = sorted_rows(d, rows), shown = 0;
    if (!n) return;
    printf("worst ops (by name)%s:\n", d->diffs ? ", those over tolerance" : "");
    printf("  %-32s %9s %6s %12s %12s %12s %10s\n", "op", "compared", "over", "max norm err", "max abs err", "max rel err", "first over");
    for (int i = 0; i < n && shown < top; i++) {
        const opstat *s = rows[i].s;
        if (d->diffs && !s->over) break;   /* with differences: only the ops that have them */
        if (!s->compared) continue;
        char e1[32], e2[32], e3[32], fo[32] = "-";
        fmt_err(s->max_norm, e1); fmt_err(s->max_abs, e2); fmt_err(s->max_rel, e3);
        if (s->over) snprintf(fo, sizeof fo, "%lld", (long long)s->first_over);
        printf("  %-32s %9llu %6llu %12s %12s %12s %10s\n", rgpu_op_name(rows[i].op), (unsigned long long)s->compared,
               (unsigned long long)s->over, e1, e2, e3, fo);
        shown++;
    }
    bool any_unsup = false;
    for (int i = 0; i < n; i++) {
        const opstat *s = rows[i].s;
        if (!s->unsupported_a && !s->unsupported_b) continue;
        if (!any_unsup) printf("skipped, no kernel:");
        printf(" %s (a %llu, b %llu)", rgpu_op_name(rows[i].op), (unsigned long long)s->unsupported_a, (unsigned long long)s->unsupported_b);
        any_unsup = true;
    }
    if (any_unsup) printf("\n");
    if (d->both_failed || d->poisoned)
        printf("skipped: %llu ops failed on both backends, %llu outputs poisoned by an earlier failure\n",
               (unsigned long long)d->both_failed, (unsigned long long)d->poisoned);
}

static void json_shape(FILE *f, int ndim, const int64_t *sizes) {
    fputc('[', f);
    for (int i = 0; i < ndim; i++) fprintf(f, "%s%lld", i ? "," : "", (long long)sizes[i]);
    fputc(']', f);
}

static void print_json(const differ *d, const char *path, const char *an, const char *bn, uint64_t ops) {
    FILE *f = stdout;
    fprintf(f, "{\"trace\": ");
    tc_json_str(f, path);
    fprintf(f, ", \"a\": ");
    tc_json_str(f, an);
    fprintf(f, ", \"b\": ");
    tc_json_str(f, bn);
    fprintf(f, ", \"mode\": \"%s\", \"rtol\": ", d->exact ? "bitwise" : "tolerance");
    if (d->have_rtol) tc_json_num(f, d->rtol); else fputs("null", f);
    fprintf(f, ", \"atol\": ");
    if (d->have_atol) tc_json_num(f, d->atol); else fputs("null", f);
    fprintf(f, ", \"op_filter\": ");
    if (d->only_op >= 0) tc_json_str(f, rgpu_op_name(d->only_op)); else fputs("null", f);
    fprintf(f, ", \"resync\": %s, \"ops\": %llu, \"ops_compared\": %llu, \"outputs_compared\": %llu, \"differences\": %llu, \"pass\": %s",
            d->resync ? "true" : "false", (unsigned long long)ops, (unsigned long long)d->ops_compared,
            (unsigned long long)d->outputs_compared, (unsigned long long)d->diffs, d->diffs ? "false" : "true");
    fprintf(f, ", \"first\": ");
    if (!d->first.set) fputs("null", f);
    else {
        const first_diff *x = &d->first;
        fprintf(f, "{\"index\": %llu, \"op\": ", (unsigned long long)x->idx);
        tc_json_str(f, rgpu_op_name(x->op));
        fprintf(f, ", \"output\": ");
        if (x->out >= 0) fprintf(f, "%d", x->out); else fputs("null", f);
        fprintf(f, ", \"dtype_a\": ");
        if (x->dtype_a >= 0) tc_json_str(f, rgpu_dtype_name(x->dtype_a)); else fputs("null", f);
        fprintf(f, ", \"dtype_b\": ");
        if (x->dtype_b >= 0) tc_json_str(f, rgpu_dtype_name(x->dtype_b)); else fputs("null", f);
        fprintf(f, ", \"shape_a\": ");
        json_shape(f, x->ndim_a, x->sizes_a);
        fprintf(f, ", \"shape_b\": ");
        json_shape(f, x->ndim_b, x->sizes_b);
        fprintf(f, ", \"inputs\": [");
        for (int i = 0; i < x->n_in; i++) { if (i) fputs(", ", f); tc_json_str(f, x->in_desc[i]); }
        fprintf(f, "], \"elements\": %llu, \"elements_over\": %llu, \"first_element\": ", (unsigned long long)x->c.n,
                (unsigned long long)x->c.n_bad);
        if (x->c.first_bad >= 0) fprintf(f, "%lld", (long long)x->c.first_bad); else fputs("null", f);
        fprintf(f, ", \"value_a\": ");
        tc_json_num(f, x->c.first_bad >= 0 ? x->c.first_a : NAN);
        fprintf(f, ", \"value_b\": ");
        tc_json_num(f, x->c.first_bad >= 0 ? x->c.first_b : NAN);
        fprintf(f, ", \"max_abs\": ");
        tc_json_num(f, x->c.max_abs);
        fprintf(f, ", \"max_rel\": ");
        tc_json_num(f, x->c.max_rel);
        fprintf(f, ", \"norm_err\": ");
        tc_json_num(f, x->c.max_norm);
        fprintf(f, ", \"nonfinite_mismatches\": %llu, \"reason\": ", (unsigned long long)x->c.n_nonfinite_mismatch);
        if (x->reason[0]) tc_json_str(f, x->reason); else fputs("null", f);
        fputc('}', f);
    }
    row rows[RGPU_OP_COUNT];
    int n = sorted_rows(d, rows);
    fprintf(f, ", \"worst\": [");
    for (int i = 0; i < n; i++) {
        const opstat *s = rows[i].s;
        fprintf(f, "%s{\"op\": ", i ? ", " : "");
        tc_json_str(f, rgpu_op_name(rows[i].op));
        fprintf(f, ", \"compared\": %llu, \"over\": %llu, \"max_norm\": ", (unsigned long long)s->compared, (unsigned long long)s->over);
        tc_json_num(f, s->max_norm);
        fprintf(f, ", \"max_abs\": ");
        tc_json_num(f, s->max_abs);
        fprintf(f, ", \"max_rel\": ");
        tc_json_num(f, s->max_rel);
        fprintf(f, ", \"first_over\": ");
        if (s->over) fprintf(f, "%lld", (long long)s->first_over); else fputs("null", f);
        fprintf(f, ", \"unsupported_a\": %llu, \"unsupported_b\": %llu}", (unsigned long long)s->unsupported_a,
                (unsigned long long)s->unsupported_b);
    }
    fprintf(f, "], \"both_failed\": %llu, \"poisoned_outputs\": %llu}\n", (unsigned long long)d->both_failed,
            (unsigned long long)d->poisoned);
}

/* ---------------------------------------------------------------------------
 * main */
static size_t base_len(const char *name) {
    const char *plus = strchr(name, '+');
    return plus ? (size_t)(plus - name) : strlen(name);
}

int main(int argc, char **argv) {
    rgpu_pool_prepare_process(argv);
    const char *path = NULL, *an = "cuda", *bn = "cpu", *opname = NULL;
    bool json = false, quiet = false;
    uint64_t top = 10;
    static differ state;          /* large; static so every early return is leak-free */
    differ *d = &state;
    d->only_op = -1;
    static tc_limits lim;
    rgpu_files *files = rgpu_files_new();
    if (!files) { fprintf(stderr, "%s: out of memory\n", PROG); return 2; }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int k = rgpu_limits_option(&lim.opts, PROG, argc, argv, &i);
        if (!k) k = rgpu_data_option(files, PROG, argc, argv, &i);
        if (k < 0) return 2;
        if (k) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(USAGE, stdout); return 0; }
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--resync")) d->resync = true;
        else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) quiet = true;
        else if (!strcmp(a, "--threads")) {
            uint64_t v;
            if (++i >= argc || !tc_parse_u64(argv[i], &v) || v < 1 || v > 256) return tc_usage_error(PROG, "%s needs 1..256", a);
            rgpu_pool_set_threads((int)v);
        }
        else if (!strcmp(a, "--a")) { if (++i >= argc) return tc_usage_error(PROG, "%s needs a backend", a); an = argv[i]; }
        else if (!strcmp(a, "--b")) { if (++i >= argc) return tc_usage_error(PROG, "%s needs a backend", a); bn = argv[i]; }
        else if (!strcmp(a, "--op")) { if (++i >= argc) return tc_usage_error(PROG, "%s needs an op name", a); opname = argv[i]; }
        else if (!strcmp(a, "--rtol")) { if (++i >= argc || !tc_parse_f64(argv[i], &d->rtol)) return tc_usage_error(PROG, "%s needs a number >= 0", a); d->have_rtol = true; }
        else if (!strcmp(a, "--atol")) { if (++i >= argc || !tc_parse_f64(argv[i], &d->atol)) return tc_usage_error(PROG, "%s needs a number >= 0", a); d->have_atol = true; }
        else if (!strcmp(a, "--top")) { if (++i >= argc || !tc_parse_u64(argv[i], &top)) return tc_usage_error(PROG, "%s needs a count", a); }
        else if (a[0] == '-' && a[1]) return tc_usage_error(PROG, "unknown option '%s'", a);
        else if (path) return tc_usage_error(PROG, "one trace at a time ('%s' is extra)", a);
        else path = a;
    }
    if (!path) return tc_usage_error(PROG, "%s", "no trace given");
    if (rgpu_data_from_env(files, PROG)) return 2;
    if (opname && (d->only_op = tc_op_by_name(opname)) < 0) return tc_usage_error(PROG, "--op: no op named '%s' in the op table", opname);
    const char *fault = getenv("RGPU_CPU_FAULT");
    int fault_op = -1;
    if (fault && *fault && !strcmp(bn, "cpu") && (fault_op = tc_op_by_name(fault)) < 0)
        return tc_usage_error(PROG, "RGPU_CPU_FAULT: no op named '%s' in the op table", fault);

    char err[640];
    tc_trace *t;
    if (tc_open(path, &t, err, sizeof err)) { fprintf(stderr, "%s: %s\n", PROG, err); return 2; }
    char why[256] = "";
    rgpu_backend *ba = rgpu_backend_create(an, why, sizeof why), *bb = NULL;
    if (!ba) { fprintf(stderr, "%s: --a %s: %s\n", PROG, an, why); tc_close(t); return 2; }
    if (why[0] && !quiet && !json) fprintf(stderr, "%s: a: %s\n", PROG, why);
    why[0] = 0;
    bb = fault_op >= 0 ? rgpu_backend_cpu_create_faulty(fault_op) : rgpu_backend_create(bn, why, sizeof why);
    if (!bb) { fprintf(stderr, "%s: --b %s: %s\n", PROG, bn, why[0] ? why : "cannot create"); ba->destroy(ba); tc_close(t); return 2; }
    if (why[0] && !quiet && !json) fprintf(stderr, "%s: b: %s\n", PROG, why);
    d->exact = !d->have_rtol && !d->have_atol && base_len(ba->name) == base_len(bb->name) &&
               !strncmp(ba->name, bb->name, base_len(ba->name));

    tc_limits_init(&lim);
    d->a = rgpu_session_new(ba, &lim.lim);
    d->b = rgpu_session_new(bb, &lim.lim);
    if (!d->a || !d->b) { fprintf(stderr, "%s: out of memory\n", PROG); return 2; }   /* exiting: the OS frees */
    rgpu_session_set_fetch(d->a, tc_fetch_blob, t);
    rgpu_session_set_fetch(d->b, tc_fetch_blob, t);
    rgpu_session_set_files(d->a, files, true);
    rgpu_session_set_files(d->b, files, true);

    int rc = 0;
    size_t outs_cap = 64;
    uint64_t *outs = malloc(outs_cap * sizeof *outs);
    if (!outs) { fprintf(stderr, "%s: out of memory\n", PROG); return 2; }
    tc_progress prog;
    tc_progress_start(&prog, PROG, !quiet && !json);
    for (bool done = false; !done;) {
        tc_chunk c;
        if (tc_next_chunk(t, &c)) { tc_progress_end(&prog); fprintf(stderr, "%s: %s\n", PROG, t->err); rc = 2; break; }
        if (!c.raw) break;
        size_t off = 0;
        for (uint32_t k = 0; k < c.count; k++) {
            uint64_t idx = c.first_op + k;
            rgpu_record r;
            size_t used;
            rgpu_record_decode(c.raw + off, c.raw_len - off, &r, &used);   /* checked by tc_next_chunk */
            off += used;
            rgpu_session_run_record(d->a, &r, idx);
            rgpu_session_run_record(d->b, &r, idx);
            rgpu_session_check_device(d->a);   /* a device-side check fails at its own op */
            rgpu_session_check_device(d->b);
            if (t->blob_err) {
                tc_progress_end(&prog);
                fprintf(stderr, "%s: op %llu (%s): %s\n", PROG, (unsigned long long)idx, rgpu_op_name(r.op), t->err);
                rc = 2; done = true;
                break;
            }
            int sa, sb;
            uint64_t eo;
            char ma[RGPU_MAX_ERROR_MSG + 1], mb[RGPU_MAX_ERROR_MSG + 1];
            uint8_t *da, *db;
            size_t na, nb;
            rgpu_session_take_result(d->a, idx, &sa, &eo, ma, sizeof ma, &da, &na);
            rgpu_session_take_result(d->b, idx, &sb, &eo, mb, sizeof mb, &db, &nb);
            free(da); free(db);
            if (tc_malformed(r.op, sa) || tc_malformed(r.op, sb)) {
                tc_progress_end(&prog);
                fprintf(stderr, "%s: %s: malformed trace (RGPU_ERR_BAD_TRACE): %s\n", PROG, path,
                        tc_malformed(r.op, sa) ? ma : mb);
                rc = 2; done = true;
                break;
            }
            if (tc_input_changed(sa) || tc_input_changed(sb)) {
                tc_progress_end(&prog);
                fprintf(stderr, "%s: %s; the diff stops: a file the run read has changed since (restore it to compare)\n",
                        PROG, tc_input_changed(sa) ? ma : mb);
                rc = 2; done = true;
                break;
            }
            if (tc_over_limit(sa) || tc_over_limit(sb)) {
                tc_progress_end(&prog);
                fprintf(stderr, "%s: %s: %s: %s; the diff stops (the limit's option raises it)\n", PROG, path,
                        tc_over_limit(sa) ? "a" : "b", tc_over_limit(sa) ? ma : mb);
                rc = 2; done = true;
                break;
            }
            /* a CALL's outputs are the tensors its template defines through its bindings */
            size_t n = 0;
            if (r.op == RGPU_OP_CALL) {
                if (!rgpu_session_call_outputs(d->a, &r, outs, outs_cap, &n) && n > outs_cap) {
                    uint64_t *p = realloc(outs, n * sizeof *p);
                    if (p) { outs = p; outs_cap = n; }
                    if (!p || rgpu_session_call_outputs(d->a, &r, outs, outs_cap, &n)) n = 0;
                }
            } else if (op_has_data_outputs(&r)) {
                for (int i = 0; i < r.n_out; i++) outs[n++] = r.out[i].tid;
            }
            if (r.op == RGPU_OP_CALL || op_has_data_outputs(&r)) {
                if (d->only_op < 0 || d->only_op == r.op) compare_op(d, idx, &r, outs, n, sa, ma, sb, mb);
                if (d->resync) resync_op(d, outs, n);
            }
            if ((idx & 255) == 0) tc_progress_update(&prog, idx + 1, t->n_ops);
        }
        free(c.raw);
    }
    tc_progress_end(&prog);
    if (!rc) {
        uint64_t ops = rgpu_session_applied(d->a);
        if (json) print_json(d, path, ba->name, bb->name, ops);
        else print_human(d, ba->name, bb->name, ops, (int)(top > 1000 ? 1000 : top));
        rc = d->diffs ? 1 : 0;
    }
    free(outs);
    rgpu_session_free(d->a);
    rgpu_session_free(d->b);
    rgpu_files_free(files);
    ba->destroy(ba);
    bb->destroy(bb);
    tc_close(t);
    return rc;
}
