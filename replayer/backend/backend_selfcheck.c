/* backend_selfcheck.c — the start-up check `--backend auto` runs before it
 * trusts the cuda backend: a fixed set of small ops, at least one per op
 * family (copy, pointwise, reduce, dense, index, sort), executed on the candidate
 * and on the cpu reference from the same inputs, outputs compared at
 * per-dtype tolerances. A few milliseconds on a GPU; the first op that
 * fails (an error, or a value out of tolerance) is named so the server can
 * fall back to cpu and say why.
 *
 * RGPU_SELFCHECK_FAULT=<op name> (tests only) perturbs the candidate's
 * result of that op, so the fallback path can be exercised anywhere. */
#include "backend_selfcheck.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op/error.h"
#include "op/half.h"


#define MAXT 3   /* tensors per side of a case */

typedef struct sc_tensor {
    int dtype, ndim;
    int64_t sizes[4];
    int index_below;   /* inputs: integer values in [0, index_below) instead of floats */
} sc_tensor;

typedef struct sc_case {
    int op;
    int n_in, n_out, n_args;
    sc_tensor in[MAXT], out[MAXT];
    rgpu_arg args[8];
} sc_case;

static int64_t numel_of(const sc_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
    return n;
}

static size_t bytes_of(const sc_tensor *t) { return (size_t)numel_of(t) * rgpu_dtype_size(t->dtype); }

static rgpu_view view_of(void *data, const sc_tensor *t) {
    rgpu_view v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = t->dtype;
    v.ndim = t->ndim;
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        v.sizes[d] = t->sizes[d];
        v.strides[d] = s;
        s *= t->sizes[d];
    }
    return v;
}

/* ---------------------------------------------------------------------------
 * Values: deterministic inputs, element reads for the comparison */

static void fill(void *p, const sc_tensor *t, int salt) {
    int64_t n = numel_of(t);
    for (int64_t i = 0; i < n; i++) {
        double x = sin(0.7 * (double)i + 1.3 * salt) * 1.5;
        int64_t k = t->index_below ? (i * 7 + salt) % t->index_below : (int64_t)floor(x * 4);
        switch (t->dtype) {
        case RGPU_F32: ((float *)p)[i] = (float)x; break;
        case RGPU_F64: ((double *)p)[i] = x; break;
        case RGPU_F16: ((uint16_t *)p)[i] = rgpu_float_to_half((float)x); break;
        case RGPU_BF16: ((uint16_t *)p)[i] = rgpu_float_to_bf16((float)x); break;
        case RGPU_I64: ((int64_t *)p)[i] = k; break;
        case RGPU_I32: ((int32_t *)p)[i] = (int32_t)k; break;
        default: memset(p, 0, bytes_of(t)); return;
        }
    }
}

static double get(const void *p, int dtype, int64_t i) {
    switch (dtype) {
    case RGPU_F32: return ((const float *)p)[i];
    case RGPU_F64: return ((const double *)p)[i];
    case RGPU_F16: return rgpu_half_to_float(((const uint16_t *)p)[i]);
    case RGPU_BF16: return rgpu_bf16_to_float(((const uint16_t *)p)[i]);
    case RGPU_I64: return (double)((const int64_t *)p)[i];
    case RGPU_I32: return ((const int32_t *)p)[i];
    case RGPU_BOOL: return ((const uint8_t *)p)[i];
    default: return 0;
    }
}

static void tol_of(int dtype, double *rtol, double *atol) {
    switch (dtype) {
    case RGPU_F32: *rtol = 1e-5; *atol = 1e-5; break;
    case RGPU_F64: *rtol = 1e-12; *atol = 1e-12; break;
    case RGPU_F16: *rtol = 2e-3; *atol = 2e-3; break;
    case RGPU_BF16: *rtol = 2e-2; *atol = 2e-2; break;
    default: *rtol = 0; *atol = 0; break;
    }
}

/* ---------------------------------------------------------------------------
 * The cases */

static rgpu_arg a_int(int64_t i) { rgpu_arg a; memset(&a, 0, sizeof a); a.kind = RGPU_ARG_INT; a.v.i = i; return a; }
static rgpu_arg a_flt(double f) { rgpu_arg a; memset(&a, 0, sizeof a); a.kind = RGPU_ARG_FLOAT; a.v.f = f; return a; }
static rgpu_arg a_dtype(int d) { rgpu_arg a; memset(&a, 0, sizeof a); a.kind = RGPU_ARG_DTYPE; a.v.i = d; return a; }
static rgpu_arg a_bool(int b) { rgpu_arg a; memset(&a, 0, sizeof a); a.kind = RGPU_ARG_BOOL; a.v.i = b != 0; return a; }

/* INTS args point at little-endian bytes; one buffer per use, kept for the run */
static uint8_t g_ints[16][8 * 4];
static int g_ints_next;
static rgpu_arg a_ints(int n, int64_t a0, int64_t a1) {
    uint8_t *b = g_ints[g_ints_next++ % 16];
    int64_t v[2] = { a0, a1 };
    for (int i = 0; i < n; i++) rgpu_st64(b + 8 * i, (uint64_t)v[i]);
    rgpu_arg a;
    memset(&a, 0, sizeof a);
    a.kind = RGPU_ARG_INTS;
    a.v.ints.p = b;
    a.v.ints.n = (uint32_t)n;
    return a;
}

#define T1(dt, a) { (dt), 1, { (a) }, 0 }
#define T2(dt, a, b) { (dt), 2, { (a), (b) }, 0 }
#define T3(dt, a, b, c) { (dt), 3, { (a), (b), (c) }, 0 }
#define T4(dt, a, b, c, d) { (dt), 4, { (a), (b), (c), (d) }, 0 }

static int build_cases(sc_case *cs) {
    int n = 0;
    sc_case *c;
    memset(cs, 0, 16 * sizeof *cs);
    g_ints_next = 0;
    /* copy family */
    c = &cs[n++]; c->op = RGPU_OP_ARANGE; c->n_out = 1; c->out[0] = (sc_tensor)T1(RGPU_F32, 37);
    c->n_args = 2; c->args[0] = a_flt(0.5); c->args[1] = a_flt(0.25);
    c = &cs[n++]; c->op = RGPU_OP_COPY; c->n_in = 1; c->n_out = 1;
    c->in[0] = (sc_tensor)T2(RGPU_F32, 4, 67); c->out[0] = (sc_tensor)T2(RGPU_F16, 4, 67);
    /* pointwise */
    c = &cs[n++]; c->op = RGPU_OP_ADD_TENSOR; c->n_in = 2; c->n_out = 1;
    c->in[0] = (sc_tensor)T2(RGPU_F32, 5, 70); c->in[1] = (sc_tensor)T1(RGPU_F32, 70); c->out[0] = (sc_tensor)T2(RGPU_F32, 5, 70);
    c->n_args = 1; c->args[0] = a_flt(2.0);
    c = &cs[n++]; c->op = RGPU_OP_MUL_TENSOR; c->n_in = 2; c->n_out = 1;
    c->in[0] = (sc_tensor)T2(RGPU_BF16, 3, 300); c->in[1] = (sc_tensor)T2(RGPU_BF16, 3, 300); c->out[0] = (sc_tensor)T2(RGPU_BF16, 3, 300);
    c = &cs[n++]; c->op = RGPU_OP_EXP; c->n_in = 1; c->n_out = 1;
    c->in[0] = (sc_tensor)T1(RGPU_F32, 513); c->out[0] = (sc_tensor)T1(RGPU_F32, 513);
    c->n_args = 1; c->args[0] = a_dtype(RGPU_F32);   /* compute dtype */
    /* reduce */
    c = &cs[n++]; c->op = RGPU_OP_SUM; c->n_in = 1; c->n_out = 1;
    c->in[0] = (sc_tensor)T3(RGPU_F32, 4, 130, 5); c->out[0] = (sc_tensor)T2(RGPU_F32, 4, 5);
    c->n_args = 2; c->args[0] = a_ints(1, 1, 0); c->args[1] = a_bool(0);
    c = &cs[n++]; c->op = RGPU_OP_SOFTMAX; c->n_in = 1; c->n_out = 1;
    c->in[0] = (sc_tensor)T2(RGPU_F32, 6, 333); c->out[0] = (sc_tensor)T2(RGPU_F32, 6, 333);
    c->n_args = 2; c->args[0] = a_int(1); c->args[1] = a_bool(0);
    c = &cs[n++]; c->op = RGPU_OP_LAYER_NORM; c->n_in = 3; c->n_out = 3;
    c->in[0] = (sc_tensor)T2(RGPU_F32, 6, 96); c->in[1] = (sc_tensor)T1(RGPU_F32, 96); c->in[2] = (sc_tensor)T1(RGPU_F32, 96);
    c->out[0] = (sc_tensor)T2(RGPU_F32, 6, 96); c->out[1] = (sc_tensor)T2(RGPU_F32, 6, 1); c->out[2] = (sc_tensor)T2(RGPU_F32, 6, 1);
    c->n_args = 2; c->args[0] = a_ints(1, 96, 0); c->args[1] = a_flt(1e-5);
    c = &cs[n++]; c->op = RGPU_OP_CUMSUM; c->n_in = 1; c->n_out = 1;
    c->in[0] = (sc_tensor)T2(RGPU_F32, 3, 200); c->out[0] = (sc_tensor)T2(RGPU_F32, 3, 200);
    c->n_args = 1; c->args[0] = a_int(1);
    /* dense (cuBLAS, im2col, pooling) */
    c = &cs[n++]; c->op = RGPU_OP_MM; c->n_in = 2; c->n_out = 1;
    c->in[0] = (sc_tensor)T2(RGPU_F32, 9, 33); c->in[1] = (sc_tensor)T2(RGPU_F32, 33, 17); c->out[0] = (sc_tensor)T2(RGPU_F32, 9, 17);
    c = &cs[n++]; c->op = RGPU_OP_CONVOLUTION; c->n_in = 3; c->n_out = 1;
    c->in[0] = (sc_tensor)T4(RGPU_F32, 1, 2, 6, 6); c->in[1] = (sc_tensor)T4(RGPU_F32, 3, 2, 3, 3); c->in[2] = (sc_tensor)T1(RGPU_F32, 3);
    c->out[0] = (sc_tensor)T4(RGPU_F32, 1, 3, 6, 6);
    c->n_args = 6; c->args[0] = a_ints(2, 1, 1); c->args[1] = a_ints(2, 1, 1); c->args[2] = a_ints(2, 1, 1);
    c->args[3] = a_bool(0); c->args[4] = a_ints(2, 0, 0); c->args[5] = a_int(1);
    c = &cs[n++]; c->op = RGPU_OP_MAX_POOL2D; c->n_in = 1; c->n_out = 2;
    c->in[0] = (sc_tensor)T4(RGPU_F32, 1, 2, 4, 6); c->out[0] = (sc_tensor)T4(RGPU_F32, 1, 2, 2, 3); c->out[1] = (sc_tensor)T4(RGPU_I64, 1, 2, 2, 3);
    c->n_args = 5; c->args[0] = a_ints(2, 2, 2); c->args[1] = a_ints(2, 2, 2); c->args[2] = a_ints(2, 0, 0);
    c->args[3] = a_ints(2, 1, 1); c->args[4] = a_bool(0);
    /* index */
    c = &cs[n++]; c->op = RGPU_OP_EMBEDDING; c->n_in = 2; c->n_out = 1;
    c->in[0] = (sc_tensor)T2(RGPU_F32, 10, 24); c->in[1] = (sc_tensor)T1(RGPU_I64, 9); c->in[1].index_below = 10;
    c->out[0] = (sc_tensor)T2(RGPU_F32, 9, 24);
    c->n_args = 1; c->args[0] = a_int(-1);
    /* sort (the merge passes; random floats: no ties) */
    c = &cs[n++]; c->op = RGPU_OP_SORT; c->n_in = 1; c->n_out = 2;
    c->in[0] = (sc_tensor)T2(RGPU_F32, 3, 77); c->out[0] = (sc_tensor)T2(RGPU_F32, 3, 77); c->out[1] = (sc_tensor)T2(RGPU_I64, 3, 77);
    c->n_args = 2; c->args[0] = a_int(1); c->args[1] = a_bool(1);
    return n;
}

/* ---------------------------------------------------------------------------
 * Running a case on one backend: fresh buffers, same inputs, outputs read back */

typedef struct sc_run {
    void *in[MAXT], *out[MAXT];
    void *host_out[MAXT];
} sc_run;

static void run_free(rgpu_backend *b, sc_run *r) {
    for (int i = 0; i < MAXT; i++) {
        if (r->in[i]) b->free(b, r->in[i]);
        if (r->out[i]) b->free(b, r->out[i]);
        free(r->host_out[i]);
    }
    memset(r, 0, sizeof *r);
}

static rgpu_status run_case(rgpu_backend *b, const sc_case *c, sc_run *r, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    rgpu_view vin[MAXT], vout[MAXT];
    rgpu_exec e;
    memset(&e, 0, sizeof e);
    e.op = c->op;
    e.n_in = c->n_in;
    e.n_out = c->n_out;
    e.n_args = c->n_args;
    e.args = c->args;
    for (int i = 0; i < c->n_in; i++) {
        size_t nb = bytes_of(&c->in[i]);
        void *h = malloc(nb ? nb : 1);
        r->in[i] = b->alloc(b, nb);
        if (!h || !r->in[i]) { free(h); return rgpu_op_fail(err, errlen, RGPU_ERR_NOMEM, "out of memory"); }
        fill(h, &c->in[i], i + 1);
        rgpu_status st = b->upload(b, r->in[i], h, nb);
        free(h);
        if (st) return rgpu_op_fail(err, errlen, st, "upload: %s", rgpu_status_str(st));
        vin[i] = view_of(r->in[i], &c->in[i]);
        e.in[i] = &vin[i];
    }
    for (int i = 0; i < c->n_out; i++) {
        r->out[i] = b->alloc(b, bytes_of(&c->out[i]));
        if (!r->out[i]) return rgpu_op_fail(err, errlen, RGPU_ERR_NOMEM, "out of memory");
        vout[i] = view_of(r->out[i], &c->out[i]);
        e.out[i] = &vout[i];
    }
    rgpu_status st = b->exec(b, &e, err, errlen);
    if (st) return st;
    for (int i = 0; i < c->n_out; i++) {
        size_t nb = bytes_of(&c->out[i]);
        r->host_out[i] = malloc(nb ? nb : 1);
        if (!r->host_out[i]) return rgpu_op_fail(err, errlen, RGPU_ERR_NOMEM, "out of memory");
        if ((st = b->download(b, r->host_out[i], r->out[i], nb))) return rgpu_op_fail(err, errlen, st, "download: %s", rgpu_status_str(st));
    }
    return b->sync(b);
}

bool rgpu_backend_selfcheck(rgpu_backend *cand, char *why, size_t whylen) {
    rgpu_backend *ref = rgpu_backend_cpu_create();
    if (!ref) { snprintf(why, whylen, "no cpu backend to compare with"); return false; }
    const char *fault = getenv("RGPU_SELFCHECK_FAULT");
    sc_case cs[16];
    int n = build_cases(cs);
    bool ok = true;
    for (int k = 0; k < n && ok; k++) {
        const sc_case *c = &cs[k];
        const char *name = rgpu_op_name(c->op);
        sc_run rr, rc;
        char e1[256] = "", e2[256] = "";
        rgpu_status s1 = run_case(ref, c, &rr, e1, sizeof e1);
        rgpu_status s2 = s1 ? RGPU_OK : run_case(cand, c, &rc, e2, sizeof e2);
        if (s1) {
            snprintf(why, whylen, "%s: the cpu reference failed: %s", name, e1[0] ? e1 : rgpu_status_str(s1));
            ok = false;
        } else if (s2) {
            snprintf(why, whylen, "%s: %s", name, e2[0] ? e2 : rgpu_status_str(s2));
            ok = false;
        } else {
            if (fault && !strcmp(fault, name))   /* the top byte of element 0: sign and exponent */
                ((uint8_t *)rc.host_out[0])[rgpu_dtype_size(c->out[0].dtype) - 1] ^= 0x40;
            for (int i = 0; i < c->n_out && ok; i++) {
                const sc_tensor *t = &c->out[i];
                double rtol, atol;
                tol_of(t->dtype, &rtol, &atol);
                int64_t ne = numel_of(t);
                for (int64_t j = 0; j < ne; j++) {
                    double a = get(rc.host_out[i], t->dtype, j), b = get(rr.host_out[i], t->dtype, j);
                    if (isnan(a) && isnan(b)) continue;
                    if (!(fabs(a - b) <= atol + rtol * fabs(b))) {
                        snprintf(why, whylen, "%s: output %d element %lld is %.9g, the cpu reference %.9g", name, i,
                                 (long long)j, a, b);
                        ok = false;
                        break;
                    }
                }
            }
        }
        run_free(ref, &rr);
        if (!s1) run_free(cand, &rc);
    }
    ref->destroy(ref);
    if (ok) snprintf(why, whylen, "%d ops agree with the cpu reference", n);
    return ok;
}
