/* op/ctc.h — the CTC loss (_ctc_loss, _ctc_loss_backward): the alpha / beta
 * recursions in log space of Graves et al. (2006), one batch element at a
 * time, written once for both backends (the CPU loops over the batch, the CUDA
 * kernel runs one thread per element).
 *
 *   log_probs (T, N, C); targets (N, S) padded or (sum of lengths,) concatenated
 *   (element b's labels start at the sum of the earlier target lengths);
 *   input_lengths, target_lengths (N,), integers.
 *   l'(s), s in [0, 2L]: blank for even s, label s/2 for odd s.
 *   alpha[0][0] = lp[0][blank], alpha[0][1] = lp[0][l'(1)], the rest -inf;
 *   alpha[t][s] = lse(alpha[t-1][s], alpha[t-1][s-1], alpha[t-1][s-2] when
 *                 l'(s-2) != l'(s)) + lp[t][l'(s)]
 *   nll = -lse(alpha[In-1][2L], alpha[In-1][2L-1])      (-alpha[In-1][0] for L = 0)
 *   beta is the mirror image from t = In-1; the gradient of log_probs is
 *   exp(lp) - exp(lse_s:l'(s)=c(alpha+beta) + nll - lp), times grad[b], zero
 *   for t >= In, and zero for the element when zero_infinity and nll = inf.
 * log_alpha (N, T, Sp) holds alpha (Sp >= 2L+1; -inf where unused); alpha,
 * beta and the accumulated gradient are rounded to the tensors' dtype as ATen
 * keeps them in tensors of that dtype. An element whose lengths or labels
 * are out of range (a length past T, past the targets, a label outside
 * [0, C)) gets a NaN loss and NaN gradients: nothing is read out of bounds. */
#ifndef RGPU_OP_CTC_H
#define RGPU_OP_CTC_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"

typedef struct op_ctc {
    int64_t T, N, C, blank;
    const char *lp; int lpdt; int64_t lps0, lps1, lps2;
    const char *tg; int tgdt; bool tg2d; int64_t tgs0, tgs1, S;   /* S: size(1) (2-d) or numel (1-d) */
    const char *il; int ildt; int64_t ils;
    const char *tl; int tldt; int64_t tls;
    char *la; int ladt; int64_t las0, las1, las2, Sp;           /* log_alpha (N, T, Sp) */
    char *nll; int nlldt; int64_t nlls;                          /* forward: out; backward: in */
    /* backward */
    const char *go; int godt; int64_t gos;
    char *gx; int gxdt; int64_t gxs0, gxs1, gxs2;
    bool zero_infinity;
} op_ctc;

OP_FN double op_ctc_ld(const char *p, int dt, int64_t i) { return op_load_f64(p + i * op_dtype_esize(dt), dt); }
OP_FN void op_ctc_st(char *p, int dt, int64_t i, double v) { op_store_f64(p + i * op_dtype_esize(dt), dt, v); }
OP_FN int64_t op_ctc_ldi(const char *p, int dt, int64_t i) { return (int64_t)op_load_u64(p + i * op_dtype_esize(dt), dt); }

/* v as a tensor of dtype dt holds it */
OP_FN double op_ctc_round(int dt, double v)
{
    union { double d[2]; char c[16]; } b;   /* room for any dtype, complex128 included */
    op_store_f64(b.c, dt, v);
    return op_load_f64(b.c, dt);
}

OP_FN double op_ctc_lp(const op_ctc *a, int64_t t, int64_t b, int64_t c)
{
    return op_ctc_ld(a->lp, a->lpdt, t * a->lps0 + b * a->lps1 + c * a->lps2);
}

OP_FN double op_ctc_alpha(const op_ctc *a, int64_t b, int64_t t, int64_t s)
{
    return op_ctc_ld(a->la, a->ladt, b * a->las0 + t * a->las1 + s * a->las2);
}

/* log(exp(x) + exp(y) + exp(z)) as ATen: the max taken out, 0 when all are -inf */
OP_FN double op_ctc_lse3(double x, double y, double z)
{
    double m = x > y ? x : y;
    if (z > m) m = z;
    if (m == -INFINITY) m = 0.0;
    return log(exp(x - m) + exp(y - m) + exp(z - m)) + m;
}

typedef struct op_ctc_elem {
    int64_t in, L, off;       /* input length, target length, first label's index in targets */
} op_ctc_elem;

/* l'(s) of element b */
OP_FN int64_t op_ctc_label(const op_ctc *a, int64_t b, const op_ctc_elem *el, int64_t s)
{
    if ((s & 1) == 0) return a->blank;
    int64_t k = s / 2;
    return a->tg2d ? op_ctc_ldi(a->tg, a->tgdt, b * a->tgs0 + k * a->tgs1)
                   : op_ctc_ldi(a->tg, a->tgdt, (el->off + k) * a->tgs0);
}

/* Element b's lengths; false when they (or its labels) are out of range. */
OP_FN bool op_ctc_element(const op_ctc *a, int64_t b, op_ctc_elem *el)
{
    el->in = op_ctc_ldi(a->il, a->ildt, b * a->ils);
    el->L = op_ctc_ldi(a->tl, a->tldt, b * a->tls);
    el->off = 0;
    if (!a->tg2d)
        for (int64_t i = 0; i < b; i++) {
            int64_t n = op_ctc_ldi(a->tl, a->tldt, i * a->tls);
            if (n < 0 || n > a->S) return false;
            el->off += n;
        }
    if (el->in < 1 || el->in > a->T || el->L < 0 || el->L > a->S - (a->tg2d ? 0 : el->off) || 2 * el->L + 1 > a->Sp)
        return false;
    for (int64_t s = 1; s < 2 * el->L + 1; s += 2) {
        int64_t c = op_ctc_label(a, b, el, s);
        if (c < 0 || c >= a->C) return false;
    }
    return true;
}

/* Forward of element b: its log_alpha rows and nll. */
OP_FN void op_ctc_forward_one(const op_ctc *a, int64_t b)
{
    for (int64_t t = 0; t < a->T; t++)
        for (int64_t s = 0; s < a->Sp; s++) op_ctc_st(a->la, a->ladt, b * a->las0 + t * a->las1 + s * a->las2, -INFINITY);
    op_ctc_elem el;
    if (!op_ctc_element(a, b, &el)) {
        op_ctc_st(a->nll, a->nlldt, b * a->nlls, NAN);
        return;
    }
    int64_t L = el.L, n = 2 * L + 1;
    char *la = a->la;
    int64_t base = b * a->las0;
    op_ctc_st(la, a->ladt, base, op_ctc_lp(a, 0, b, a->blank));
    if (L > 0) op_ctc_st(la, a->ladt, base + a->las2, op_ctc_lp(a, 0, b, op_ctc_label(a, b, &el, 1)));
    for (int64_t t = 1; t < el.in; t++)
        for (int64_t s = 0; s < n; s++) {
            int64_t c = op_ctc_label(a, b, &el, s);
            double l1 = op_ctc_alpha(a, b, t - 1, s);
            double l2 = s > 0 ? op_ctc_alpha(a, b, t - 1, s - 1) : -INFINITY;
            double l3 = s > 1 && op_ctc_label(a, b, &el, s - 2) != c ? op_ctc_alpha(a, b, t - 1, s - 2) : -INFINITY;
            op_ctc_st(la, a->ladt, base + t * a->las1 + s * a->las2, op_ctc_lse3(l1, l2, l3) + op_ctc_lp(a, t, b, c));
        }
    double ll;
    if (L == 0) {
        ll = op_ctc_alpha(a, b, el.in - 1, 0);
    } else {
        double l1 = op_ctc_alpha(a, b, el.in - 1, 2 * L), l2 = op_ctc_alpha(a, b, el.in - 1, 2 * L - 1);
        ll = op_ctc_lse3(l1, l2, -INFINITY);
    }
    op_ctc_st(a->nll, a->nlldt, b * a->nlls, -ll);
}

/* Backward of element b: its (T, C) slice of the gradient. beta is scratch
 * of 2 * Sp doubles (two rows of beta). */
OP_FN void op_ctc_backward_one(const op_ctc *a, int64_t b, double *beta)
{
    int64_t gb = b * a->gxs1;
#define OP_CTC_GX(t, c) (gb + (t) * a->gxs0 + (c) * a->gxs2)
    op_ctc_elem el;
    bool ok = op_ctc_element(a, b, &el);
    double nll = op_ctc_ld(a->nll, a->nlldt, b * a->nlls);
    if (!ok || (a->zero_infinity && nll == INFINITY)) {
        for (int64_t t = 0; t < a->T; t++)
            for (int64_t c = 0; c < a->C; c++) op_ctc_st(a->gx, a->gxdt, OP_CTC_GX(t, c), ok ? 0.0 : NAN);
        return;
    }
    int64_t L = el.L, n = 2 * L + 1, in = el.in;
    for (int64_t t = 0; t < a->T; t++)
        for (int64_t c = 0; c < a->C; c++) op_ctc_st(a->gx, a->gxdt, OP_CTC_GX(t, c), -INFINITY);
    double *cur = beta, *next = beta + a->Sp;
    for (int64_t s = 0; s < n; s++) next[s] = -INFINITY;
    /* t = In-1 */
    next[2 * L] = op_ctc_round(a->lpdt, op_ctc_lp(a, in - 1, b, a->blank));
    op_ctc_st(a->gx, a->gxdt, OP_CTC_GX(in - 1, a->blank), op_ctc_alpha(a, b, in - 1, 2 * L) + next[2 * L]);
    if (L > 0) {
        int64_t c = op_ctc_label(a, b, &el, 2 * L - 1);
        next[2 * L - 1] = op_ctc_round(a->lpdt, op_ctc_lp(a, in - 1, b, c));
        op_ctc_st(a->gx, a->gxdt, OP_CTC_GX(in - 1, c), op_ctc_alpha(a, b, in - 1, 2 * L - 1) + next[2 * L - 1]);
    }
    for (int64_t t = in - 2; t >= 0; t--) {
        for (int64_t s = 2 * L; s >= 0; s--) {
            int64_t c = op_ctc_label(a, b, &el, s);
            double l1 = next[s];
            double l2 = s < 2 * L ? next[s + 1] : -INFINITY;
            double l3 = s < 2 * L - 1 && op_ctc_label(a, b, &el, s + 2) != c ? next[s + 2] : -INFINITY;
            cur[s] = op_ctc_round(a->lpdt, op_ctc_lse3(l1, l2, l3) + op_ctc_lp(a, t, b, c));
            double lab = op_ctc_alpha(a, b, t, s) + cur[s];
            double g = op_ctc_ld(a->gx, a->gxdt, OP_CTC_GX(t, c));
            g = g == -INFINITY ? lab : op_ctc_lse3(g, lab, -INFINITY);
            op_ctc_st(a->gx, a->gxdt, OP_CTC_GX(t, c), g);
        }
        double *sw = cur; cur = next; next = sw;
    }
    double gr = op_ctc_ld(a->go, a->godt, b * a->gos);
    for (int64_t t = 0; t < a->T; t++)
        for (int64_t c = 0; c < a->C; c++) {
            double v = 0.0;
            if (t < in) {
                double lp = op_ctc_lp(a, t, b, c), g = op_ctc_ld(a->gx, a->gxdt, OP_CTC_GX(t, c));
                v = (exp(lp) - exp(g + nll - lp)) * gr;
            }
            op_ctc_st(a->gx, a->gxdt, OP_CTC_GX(t, c), v);
        }
#undef OP_CTC_GX
}

#endif
