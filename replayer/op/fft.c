/* op/fft.c — the fft family's checks and its host FFT (op/fft.h).
 *
 * The 1-d transform: smooth sizes (every prime factor <= MAX_RADIX) run a
 * recursive decimation in time over the factors (4s first, then 2, 3, 5, and
 * any other prime), each stage one generic radix-p butterfly that takes its
 * twiddles from one table of exp(sign*2*pi*i*t/n); other sizes run
 * Bluestein's chirp-z, a convolution through a power-of-two FFT. Everything
 * is double; a complex64 record loses nothing but its final rounding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtype.h"
#include "fft.h"
#include "index.h"

#define MAX_RADIX 31
#define MAX_FACTORS 64

struct rgpu_fft_plan {
    int64_t n;
    int sign;
    int nf;
    int64_t fac[MAX_FACTORS][2];  /* (p, m): radix, and the size left below it */
    double *tw;                   /* n twiddles exp(sign*2*pi*i*t/n), interleaved */
    double *tmp;                  /* n complex: the input copy */
    double *scr;                  /* MAX_RADIX complex: a butterfly's inputs */
    /* Bluestein (bm > 0) */
    int64_t bm;
    rgpu_fft_plan *sub;           /* forward, size bm */
    double *chirp;                /* n: exp(sign*pi*i*t^2/n) */
    double *bk;                   /* bm: the forward FFT of the conjugate chirp, / bm */
    double *buf;                  /* bm */
};

/* exp(sign*2*pi*i*t/n) for 0 <= t < n, the angle reduced to the first octant
 * so cos and sin see an argument below pi/4 (accurate to about 1 ulp). */
static void cis(int64_t t, int64_t n, int sign, double *re, double *im)
{
    int64_t r = t % n;
    /* 4r = q*n + r', angle = (pi/2)*(q + r'/n); 4r fits: n is a tensor size */
    int64_t q = (4 * r) / n;
    r = 4 * r - q * n;
    double c, s;
    if (2 * r <= n) {
        double a = (M_PI / 2) * (double)r / (double)n;
        c = cos(a); s = sin(a);
    } else {
        double a = (M_PI / 2) * (double)(n - r) / (double)n;
        c = sin(a); s = cos(a);
    }
    /* rotate by q quarter turns */
    double cr, ci;
    switch (q & 3) {
    case 0: cr = c; ci = s; break;
    case 1: cr = -s; ci = c; break;
    case 2: cr = -c; ci = -s; break;
    default: cr = s; ci = -c; break;
    }
    *re = cr;
    *im = sign < 0 ? -ci : ci;
}

static int64_t smallest_factor(int64_t n)
{
    if (n % 4 == 0) return 4;
    if (n % 2 == 0) return 2;
    for (int64_t p = 3; p * p <= n; p += 2)
        if (n % p == 0) return p;
    return n;
}

/* True when every prime factor of n is at most MAX_RADIX; fills the stages. */
static bool factorize(rgpu_fft_plan *p)
{
    int64_t n = p->n;
    p->nf = 0;
    while (n > 1) {
        int64_t f = smallest_factor(n);
        if (f > MAX_RADIX || p->nf == MAX_FACTORS) return false;
        n /= f;
        p->fac[p->nf][0] = f;
        p->fac[p->nf][1] = n;
        p->nf++;
    }
    return true;
}

rgpu_fft_plan *rgpu_fft_plan_new(int64_t n, int sign)
{
    if (n < 1 || n > ((int64_t)1 << 40)) return NULL;
    rgpu_fft_plan *p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->n = n;
    p->sign = sign < 0 ? -1 : 1;
    if (n == 1) return p;
    if (factorize(p)) {
        p->tw = malloc((size_t)n * 2 * sizeof(double));
        p->tmp = malloc((size_t)n * 2 * sizeof(double));
        p->scr = malloc(MAX_RADIX * 2 * sizeof(double));
        if (p->tw == NULL || p->tmp == NULL || p->scr == NULL) goto fail;
        for (int64_t t = 0; t < n; t++) cis(t, n, p->sign, &p->tw[2 * t], &p->tw[2 * t + 1]);
        return p;
    }
    /* Bluestein: X_k = c_k * sum_j (x_j c_j) conj(c_{k-j}), c_t = exp(sign*pi*i*t^2/n) */
    int64_t m = 1;
    while (m < 2 * n - 1) m *= 2;
    p->bm = m;
    p->sub = rgpu_fft_plan_new(m, -1);
    p->chirp = malloc((size_t)n * 2 * sizeof(double));
    p->bk = calloc((size_t)m * 2, sizeof(double));
    p->buf = malloc((size_t)m * 2 * sizeof(double));
    if (p->sub == NULL || p->chirp == NULL || p->bk == NULL || p->buf == NULL) goto fail;
    int64_t t2 = 0;                 /* t^2 mod 2n, exactly */
    for (int64_t t = 0; t < n; t++) {
        cis(t2, 2 * n, p->sign, &p->chirp[2 * t], &p->chirp[2 * t + 1]);
        t2 += 2 * t + 1;            /* (t+1)^2 = t^2 + 2t + 1 */
        while (t2 >= 2 * n) t2 -= 2 * n;
    }
    for (int64_t t = 0; t < n; t++) {
        double re = p->chirp[2 * t], im = -p->chirp[2 * t + 1];
        p->bk[2 * t] = re; p->bk[2 * t + 1] = im;
        if (t > 0) { p->bk[2 * (m - t)] = re; p->bk[2 * (m - t) + 1] = im; }
    }
    if (!rgpu_fft_exec(p->sub, p->bk)) goto fail;
    for (int64_t i = 0; i < 2 * m; i++) p->bk[i] /= (double)m;
    return p;
fail:
    rgpu_fft_plan_free(p);
    return NULL;
}

void rgpu_fft_plan_free(rgpu_fft_plan *p)
{
    if (p == NULL) return;
    free(p->tw); free(p->tmp); free(p->scr);
    rgpu_fft_plan_free(p->sub);
    free(p->chirp); free(p->bk); free(p->buf);
    free(p);
}

/* out[k*m + u], k < p, from the p sub-transforms already in out: one generic
 * radix-p butterfly per u. fstride: n / (p*m). */
static void butterfly(const rgpu_fft_plan *pl, double *out, int64_t fstride, int64_t p, int64_t m)
{
    const double *tw = pl->tw;
    double *s = pl->scr;
    int64_t n = pl->n;
    if (p == 2) {
        for (int64_t u = 0; u < m; u++) {
            double *a = out + 2 * u, *b = out + 2 * (u + m);
            const double *w = tw + 2 * (u * fstride);
            double br = b[0] * w[0] - b[1] * w[1], bi = b[0] * w[1] + b[1] * w[0];
            b[0] = a[0] - br; b[1] = a[1] - bi;
            a[0] += br; a[1] += bi;
        }
        return;
    }
    for (int64_t u = 0; u < m; u++) {
        for (int64_t q = 0; q < p; q++) {
            s[2 * q] = out[2 * (u + q * m)];
            s[2 * q + 1] = out[2 * (u + q * m) + 1];
        }
        for (int64_t q1 = 0; q1 < p; q1++) {
            int64_t k = u + q1 * m, step = fstride * k, idx = 0;
            double re = s[0], im = s[1];
            for (int64_t q = 1; q < p; q++) {
                idx += step;
                if (idx >= n) idx -= n;
                const double *w = tw + 2 * idx;
                re += s[2 * q] * w[0] - s[2 * q + 1] * w[1];
                im += s[2 * q] * w[1] + s[2 * q + 1] * w[0];
            }
            out[2 * k] = re;
            out[2 * k + 1] = im;
        }
    }
}

/* kissfft's recursion: out (contiguous, p*m) := the DFT of in[0], in[fstride],
 * ... over the stages from f on. */
static void work(const rgpu_fft_plan *pl, double *out, const double *in, int64_t fstride, int f)
{
    int64_t p = pl->fac[f][0], m = pl->fac[f][1];
    if (m == 1) {
        for (int64_t q = 0; q < p; q++) {
            out[2 * q] = in[2 * q * fstride];
            out[2 * q + 1] = in[2 * q * fstride + 1];
        }
    } else {
        for (int64_t q = 0; q < p; q++) work(pl, out + 2 * q * m, in + 2 * q * fstride, fstride * p, f + 1);
    }
    butterfly(pl, out, fstride, p, m);
}

bool rgpu_fft_exec(rgpu_fft_plan *p, double *x)
{
    int64_t n = p->n;
    if (n == 1) return true;
    if (p->bm == 0) {
        memcpy(p->tmp, x, (size_t)n * 2 * sizeof(double));
        work(p, x, p->tmp, 1, 0);
        return true;
    }
    int64_t m = p->bm;
    double *b = p->buf;
    const double *c = p->chirp, *k = p->bk;
    for (int64_t j = 0; j < n; j++) {
        b[2 * j] = x[2 * j] * c[2 * j] - x[2 * j + 1] * c[2 * j + 1];
        b[2 * j + 1] = x[2 * j] * c[2 * j + 1] + x[2 * j + 1] * c[2 * j];
    }
    memset(b + 2 * n, 0, (size_t)(m - n) * 2 * sizeof(double));
    rgpu_fft_exec(p->sub, b);
    /* times the kernel's transform, conjugated: the inverse is conj(F(conj)) */
    for (int64_t j = 0; j < m; j++) {
        double re = b[2 * j] * k[2 * j] - b[2 * j + 1] * k[2 * j + 1];
        double im = b[2 * j] * k[2 * j + 1] + b[2 * j + 1] * k[2 * j];
        b[2 * j] = re; b[2 * j + 1] = -im;
    }
    rgpu_fft_exec(p->sub, b);
    for (int64_t j = 0; j < n; j++) {
        double re = b[2 * j], im = -b[2 * j + 1];
        x[2 * j] = re * c[2 * j] - im * c[2 * j + 1];
        x[2 * j + 1] = re * c[2 * j + 1] + im * c[2 * j];
    }
    return true;
}

/* ------------------------------------------------------------ checks */

static const char *op_nm(const rgpu_exec *e) { return rgpu_op_name(e->op); }

rgpu_status rgpu_op_fft_check(const rgpu_exec *e, rgpu_fft_args *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "r", "r", err, errlen));
    const rgpu_view *in = e->in[0], *out = e->out[0];
    RETURN_ERROR_IF(e->n_args != 3 || e->args[0].kind != RGPU_ARG_INTS, RGPU_ERR_BAD_ARG,
                    "%s: want args (dim, normalization, %s)", op_nm(e),
                    e->op == RGPU_OP_FFT_C2R ? "last_dim_size" : e->op == RGPU_OP_FFT_R2C ? "onesided" : "forward");
    int64_t norm, third;
    FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 1, "normalization", &norm, err, errlen));
    if (e->op == RGPU_OP_FFT_C2R) {
        FORWARD_IF_ERROR(rgpu_op_index_arg_int(e, 2, "last_dim_size", &third, err, errlen));
    } else {
        bool b;
        FORWARD_IF_ERROR(rgpu_op_index_arg_bool(e, 2, e->op == RGPU_OP_FFT_R2C ? "onesided" : "forward", &b,
                                                err, errlen));
        third = b;
    }
    RETURN_ERROR_IF(norm < 0 || norm > 2, RGPU_ERR_BAD_ARG, "%s: normalization %lld, want 0, 1 or 2", op_nm(e),
                    (long long)norm);
    a->norm = (int)norm;
    uint32_t nd = e->args[0].v.ints.n;
    RETURN_ERROR_IF(nd > (uint32_t)in->ndim || nd > RGPU_MAX_DIMS, RGPU_ERR_BAD_ARG,
                    "%s: %u dims for a %d-d input", op_nm(e), nd, in->ndim);
    RETURN_ERROR_IF(nd == 0 && e->op != RGPU_OP_FFT_C2C, RGPU_ERR_BAD_ARG, "%s: no dim to transform", op_nm(e));
    bool seen[RGPU_MAX_DIMS] = {false};
    for (uint32_t i = 0; i < nd; i++) {
        int64_t d = rgpu_arg_int_at(&e->args[0], i);
        int w;
        FORWARD_IF_ERROR(rgpu_op_index_wrap_dim(e, d, in->ndim, &w, err, errlen));
        RETURN_ERROR_IF(seen[w], RGPU_ERR_BAD_ARG, "%s: dim %d given twice", op_nm(e), w);
        seen[w] = true;
        a->dims[i] = w;
    }
    a->ndim = (int)nd;
    int idt = in->dtype, odt = out->dtype;
    int64_t want[RGPU_MAX_DIMS];
    for (int d = 0; d < in->ndim; d++) want[d] = in->sizes[d];
    int last = nd ? a->dims[nd - 1] : -1;
    switch (e->op) {
    case RGPU_OP_FFT_C2C:
        RETURN_ERROR_IF(idt != RGPU_C64 && idt != RGPU_C128, RGPU_ERR_UNSUPPORTED,
                        "%s: input dtype %s, want complex64 or complex128", op_nm(e), rgpu_dtype_name(idt));
        RETURN_ERROR_IF(odt != idt, RGPU_ERR_BAD_ARG, "%s: output dtype %s, want %s", op_nm(e),
                        rgpu_dtype_name(odt), rgpu_dtype_name(idt));
        a->forward = third != 0;
        break;
    case RGPU_OP_FFT_R2C:
        RETURN_ERROR_IF(idt != RGPU_F32 && idt != RGPU_F64, RGPU_ERR_UNSUPPORTED,
                        "%s: input dtype %s, want float32 or float64", op_nm(e), rgpu_dtype_name(idt));
        RETURN_ERROR_IF(odt != (idt == RGPU_F32 ? RGPU_C64 : RGPU_C128), RGPU_ERR_BAD_ARG,
                        "%s: output dtype %s, want %s", op_nm(e), rgpu_dtype_name(odt),
                        idt == RGPU_F32 ? "complex64" : "complex128");
        a->forward = true;
        a->onesided = third != 0;
        if (a->onesided) want[last] = in->sizes[last] / 2 + 1;
        break;
    default: /* C2R */
        RETURN_ERROR_IF(idt != RGPU_C64 && idt != RGPU_C128, RGPU_ERR_UNSUPPORTED,
                        "%s: input dtype %s, want complex64 or complex128", op_nm(e), rgpu_dtype_name(idt));
        RETURN_ERROR_IF(odt != (idt == RGPU_C64 ? RGPU_F32 : RGPU_F64), RGPU_ERR_BAD_ARG,
                        "%s: output dtype %s, want %s", op_nm(e), rgpu_dtype_name(odt),
                        idt == RGPU_C64 ? "float32" : "float64");
        RETURN_ERROR_IF(third < 1, RGPU_ERR_BAD_ARG, "%s: last_dim_size %lld, want at least 1", op_nm(e),
                        (long long)third);
        /* ATen's CPU kernel asserts this (pocketfft reads the first L//2+1) */
        RETURN_ERROR_IF(in->sizes[last] != third / 2 + 1 && in->sizes[last] != third, RGPU_ERR_SHAPE,
                        "%s: input has %lld elements along dim %d, want last_dim_size//2+1 = %lld (or %lld)",
                        op_nm(e), (long long)in->sizes[last], last, (long long)(third / 2 + 1), (long long)third);
        a->onesided = true;
        a->last_dim_size = third;
        want[last] = third;
        break;
    }
    FORWARD_IF_ERROR(rgpu_op_index_check_out_shape(e, out, in->ndim, want, err, errlen));
    double prod = 1;
    for (int i = 0; i < a->ndim; i++) {
        a->n[i] = e->op == RGPU_OP_FFT_C2R ? out->sizes[a->dims[i]] : in->sizes[a->dims[i]];
        prod *= (double)a->n[i];
    }
    a->scale = a->norm == 0 || prod == 0 ? 1.0 : a->norm == 1 ? 1.0 / sqrt(prod) : 1.0 / prod;
    return RGPU_OK;
}

/* ------------------------------------------------------------ host runner */

/* Element offset of row-major index i of v. */
static int64_t view_off(const rgpu_view *v, int64_t i)
{
    int64_t off = 0;
    for (int d = v->ndim - 1; d >= 0; d--) {
        off += (i % v->sizes[d]) * v->strides[d];
        i /= v->sizes[d];
    }
    return off;
}

/* Transforms every line along dim d of w (contiguous, complex, shape sh[nd])
 * with plan p; line: scratch of sh[d] complex. */
static void lines(double *w, const int64_t *sh, int nd, int d, rgpu_fft_plan *p, double *line)
{
    int64_t len = sh[d], inner = 1, outer = 1;
    for (int k = d + 1; k < nd; k++) inner *= sh[k];
    for (int k = 0; k < d; k++) outer *= sh[k];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double *base = w + 2 * (o * len * inner + i);
            for (int64_t j = 0; j < len; j++) {
                line[2 * j] = base[2 * j * inner];
                line[2 * j + 1] = base[2 * j * inner + 1];
            }
            rgpu_fft_exec(p, line);
            for (int64_t j = 0; j < len; j++) {
                base[2 * j * inner] = line[2 * j];
                base[2 * j * inner + 1] = line[2 * j + 1];
            }
        }
}

/* c2c along dims[0..nd) of w in order. */
static rgpu_status transform(const rgpu_exec *e, double *w, const int64_t *sh, int ndim, const int *dims, int nd,
                             int sign, char *err, size_t errlen)
{
    for (int i = 0; i < nd; i++) {
        int64_t len = sh[dims[i]];
        if (len <= 1) continue;
        rgpu_fft_plan *p = rgpu_fft_plan_new(len, sign);
        double *line = rgpu_op_alloc(len, 2 * sizeof(double));
        if (p == NULL || line == NULL) {
            rgpu_fft_plan_free(p);
            free(line);
            RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for a size-%lld plan", op_nm(e), (long long)len);
        }
        lines(w, sh, ndim, dims[i], p, line);
        rgpu_fft_plan_free(p);
        free(line);
    }
    return RGPU_OK;
}

rgpu_status rgpu_op_fft_host(const rgpu_exec *e, const rgpu_fft_args *a, char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    int nd = in->ndim;
    if (rgpu_op_numel(out) == 0) return RGPU_OK;
    /* w's shape: the input's (c2c, r2c), the onesided input (c2r) */
    int64_t sh[RGPU_MAX_DIMS];
    for (int d = 0; d < nd; d++) sh[d] = in->sizes[d];
    int last = a->ndim ? a->dims[a->ndim - 1] : -1;
    int64_t L = 0, h = 0;
    if (e->op == RGPU_OP_FFT_C2R) {
        L = a->last_dim_size;
        h = L / 2 + 1;
        sh[last] = h;
    }
    int64_t nw = 1;
    for (int d = 0; d < nd; d++) nw *= sh[d];
    double *w = rgpu_op_alloc(nw, 2 * sizeof(double));
    RETURN_ERROR_IF(w == NULL, RGPU_ERR_NOMEM, "%s: out of memory for %lld elements", op_nm(e), (long long)nw);
    size_t ies = rgpu_dtype_size(in->dtype), oes = rgpu_dtype_size(out->dtype);
    /* load (c2r: zeros past the input's end along the last dim) */
    int64_t idx[RGPU_MAX_DIMS] = {0};
    for (int64_t i = 0; i < nw; i++) {
        int64_t off = 0;
        bool pad = false;
        for (int d = 0; d < nd; d++) {
            if (idx[d] >= in->sizes[d]) pad = true;
            off += idx[d] * in->strides[d];
        }
        if (pad) w[2 * i] = w[2 * i + 1] = 0;
        else op_load_c128((const char *)in->data + off * (int64_t)ies, in->dtype, &w[2 * i], &w[2 * i + 1]);
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < sh[d]) break;
            idx[d] = 0;
        }
    }
    rgpu_status st = RGPU_OK;
    if (e->op == RGPU_OP_FFT_C2C || e->op == RGPU_OP_FFT_R2C) {
        st = transform(e, w, sh, nd, a->dims, a->ndim, a->forward ? -1 : 1, err, errlen);
        if (st == RGPU_OK) {
            int64_t no = rgpu_op_numel(out);
            int64_t oi[RGPU_MAX_DIMS] = {0};
            for (int64_t i = 0; i < no; i++) {
                int64_t wi = 0;
                for (int d = 0; d < nd; d++) wi = wi * sh[d] + oi[d];
                op_store_c128((char *)out->data + view_off(out, i) * (int64_t)oes, out->dtype, w[2 * wi] * a->scale,
                              w[2 * wi + 1] * a->scale);
                for (int d = nd - 1; d >= 0; d--) {
                    if (++oi[d] < out->sizes[d]) break;
                    oi[d] = 0;
                }
            }
        }
        free(w);
        return st;
    }
    /* c2r: backward c2c over all but the last dim, then per line along the
     * last: the Hermitian extension (DC's and Nyquist's imaginary parts
     * dropped), a backward c2c, its real part. */
    st = transform(e, w, sh, nd, a->dims, a->ndim - 1, 1, err, errlen);
    rgpu_fft_plan *p = st == RGPU_OK ? rgpu_fft_plan_new(L, 1) : NULL;
    double *line = rgpu_op_alloc(L, 2 * sizeof(double));
    if (st == RGPU_OK && (p == NULL || line == NULL)) {
        rgpu_op_errf(err, errlen, "%s: out of memory for a size-%lld plan", op_nm(e), (long long)L);
        st = RGPU_ERR_NOMEM;
    }
    if (st == RGPU_OK) {
        int64_t inner = 1, outer = 1;
        for (int k = last + 1; k < nd; k++) inner *= sh[k];
        for (int k = 0; k < last; k++) outer *= sh[k];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                const double *base = w + 2 * (o * h * inner + i);
                for (int64_t k = 0; k < h; k++) {
                    line[2 * k] = base[2 * k * inner];
                    line[2 * k + 1] = (k == 0 || 2 * k == L) ? 0.0 : base[2 * k * inner + 1];
                }
                for (int64_t k = h; k < L; k++) {
                    line[2 * k] = line[2 * (L - k)];
                    line[2 * k + 1] = -line[2 * (L - k) + 1];
                }
                rgpu_fft_exec(p, line);
                /* out's element at (o, k, i) over out's dims split at last */
                for (int64_t k = 0; k < L; k++) {
                    int64_t li = (o * L + k) * inner + i;
                    op_store_f64((char *)out->data + view_off(out, li) * (int64_t)oes, out->dtype,
                                 line[2 * k] * a->scale);
                }
            }
    }
    rgpu_fft_plan_free(p);
    free(line);
    free(w);
    return st;
}
