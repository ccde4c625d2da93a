/* op/fft_plan.c — the host FFT of op/fft.h: 1-d plans, self-contained (libm
 * only), so cudaemu's cuFFT reference links it alone.
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

#include "fft.h"

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
