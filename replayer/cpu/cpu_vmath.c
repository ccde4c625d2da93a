/* cpu_vmath.c — picks the build of cpu_vmath_kern.h's rows for this CPU:
 * AVX-512F, else AVX2, else the baseline (x86-64: SSE2). All three give
 * bit-identical results (see cpu_vmath_kern.h), so the choice only changes
 * speed. RGPU_CPU_ISA=base|avx2|avx512 caps it (tests compare them; a cap
 * above what the CPU has falls back to the best it has). */
#include "cpu_vmath.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define VM_DECL(sfx)                                                        \
    void rgpu_vm_exp_f32##sfx(float *r, const float *a, int64_t n);         \
    void rgpu_vm_erf_f32##sfx(float *r, const float *a, int64_t n);         \
    void rgpu_vm_tanh_f32##sfx(float *r, const float *a, int64_t n);        \
    void rgpu_vm_exp_d2f##sfx(double *r, const double *a, int64_t n);      \
    double rgpu_vm_sum_f32##sfx(const float *q, int64_t n);                 \
    double rgpu_vm_sum_f64##sfx(const double *q, int64_t n);                \
    void rgpu_vm_acc_f32##sfx(double *acc, const float *q, int64_t n);      \
    void rgpu_vm_acc_f64##sfx(double *acc, const double *q, int64_t n);     \
    void rgpu_vm_sqrt_f32##sfx(float *r, const float *a, int64_t n);        \
    void rgpu_vm_f32_to_bf16##sfx(uint16_t *r, const float *a, int64_t n);  \
    void rgpu_vm_bf16_to_f32##sfx(float *r, const uint16_t *a, int64_t n);  \
    void rgpu_vm_rsqrt_f32##sfx(float *r, const float *a, int64_t n);       \
    void rgpu_vm_f32_to_f64##sfx(double *r, const float *a, int64_t n);     \
    void rgpu_vm_f64_to_f32##sfx(float *r, const double *a, int64_t n);     \
    void rgpu_vm_ln_row##sfx(double *b, int64_t N, const double *w, const double *bias, double eps, bool rms, \
                             double *mu, double *rs);                       \
    void rgpu_vm_ln_bw_row##sfx(const double *g, double *x, double *gw, double *dw, double *db, const double *w, \
                                int64_t N, double mu, double rs, bool rms, bool want_dx);    \
    double rgpu_vm_max_f64##sfx(const double *b, int64_t n);                                        \
    void rgpu_vm_softmax_row##sfx(double *b, double *ex, int64_t n, bool is_log);                    \
    void rgpu_vm_softmax_bw_row##sfx(double *g, double *y, int64_t n, bool is_log);
VM_DECL(_base)
#if defined(__x86_64__)
VM_DECL(_avx2)
VM_DECL(_avx512)
#endif

typedef struct vm_table {
    const char *isa;
    void (*exp_f32)(float *, const float *, int64_t);
    void (*erf_f32)(float *, const float *, int64_t);
    void (*tanh_f32)(float *, const float *, int64_t);
    void (*exp_d2f)(double *, const double *, int64_t);
    double (*sum_f32)(const float *, int64_t);
    double (*sum_f64)(const double *, int64_t);
    void (*acc_f32)(double *, const float *, int64_t);
    void (*acc_f64)(double *, const double *, int64_t);
    void (*sqrt_f32)(float *, const float *, int64_t);
    void (*f32_to_bf16)(uint16_t *, const float *, int64_t);
    void (*bf16_to_f32)(float *, const uint16_t *, int64_t);
    void (*rsqrt_f32)(float *, const float *, int64_t);
    void (*f32_to_f64)(double *, const float *, int64_t);
    void (*f64_to_f32)(float *, const double *, int64_t);
    void (*ln_row)(double *, int64_t, const double *, const double *, double, bool, double *, double *);
    void (*ln_bw_row)(const double *, double *, double *, double *, double *, const double *, int64_t, double,
                      double, bool, bool);
    double (*max_f64)(const double *, int64_t);
    void (*softmax_row)(double *, double *, int64_t, bool);
    void (*softmax_bw_row)(double *, double *, int64_t, bool);
} vm_table;

#define VM_TABLE(name, sfx) { name, rgpu_vm_exp_f32##sfx, rgpu_vm_erf_f32##sfx, rgpu_vm_tanh_f32##sfx, rgpu_vm_exp_d2f##sfx, \
                             rgpu_vm_sum_f32##sfx, rgpu_vm_sum_f64##sfx, rgpu_vm_acc_f32##sfx, rgpu_vm_acc_f64##sfx, \
                             rgpu_vm_sqrt_f32##sfx, rgpu_vm_f32_to_bf16##sfx, rgpu_vm_bf16_to_f32##sfx, rgpu_vm_rsqrt_f32##sfx, rgpu_vm_f32_to_f64##sfx, rgpu_vm_f64_to_f32##sfx, rgpu_vm_ln_row##sfx, rgpu_vm_ln_bw_row##sfx, \
                             rgpu_vm_max_f64##sfx, rgpu_vm_softmax_row##sfx, rgpu_vm_softmax_bw_row##sfx }
static const vm_table tables[] = {
    VM_TABLE("base", _base),
#if defined(__x86_64__)
    VM_TABLE("avx2", _avx2),
    VM_TABLE("avx512", _avx512),
#endif
};
enum { N_TABLES = sizeof tables / sizeof tables[0] };

static const vm_table *cur;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* the best table this CPU runs, at most the one named max (NULL: no cap) */
static const vm_table *best(const char *max)
{
    int best_i = 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) best_i = 1;
    if (__builtin_cpu_supports("avx512f")) best_i = 2;
#endif
    if (max)
        for (int i = 0; i < N_TABLES; i++)
            if (!strcmp(tables[i].isa, max) && i < best_i) best_i = i;
    return &tables[best_i];
}

static void init(void)
{
    const char *s = getenv("RGPU_CPU_ISA");
    cur = best(s && *s ? s : NULL);
}

static const vm_table *T(void)
{
    pthread_once(&once, init);
    return cur;
}

const char *rgpu_vm_isa(void) { return T()->isa; }

bool rgpu_vm_set_isa(const char *isa)
{
    T();
    for (int i = 0; i < N_TABLES; i++)
        if (!strcmp(tables[i].isa, isa)) {
            const vm_table *t = best(isa);
            if (t != &tables[i]) return false;   /* this CPU lacks it */
            __atomic_store_n(&cur, t, __ATOMIC_RELEASE);
            return true;
        }
    return false;
}

void rgpu_vm_exp_f32(float *r, const float *a, int64_t n) { T()->exp_f32(r, a, n); }
void rgpu_vm_erf_f32(float *r, const float *a, int64_t n) { T()->erf_f32(r, a, n); }
void rgpu_vm_tanh_f32(float *r, const float *a, int64_t n) { T()->tanh_f32(r, a, n); }
void rgpu_vm_exp_d2f(double *r, const double *a, int64_t n) { T()->exp_d2f(r, a, n); }
double rgpu_vm_sum_f32(const float *q, int64_t n) { return T()->sum_f32(q, n); }
double rgpu_vm_sum_f64(const double *q, int64_t n) { return T()->sum_f64(q, n); }
void rgpu_vm_acc_f32(double *acc, const float *q, int64_t n) { T()->acc_f32(acc, q, n); }
void rgpu_vm_acc_f64(double *acc, const double *q, int64_t n) { T()->acc_f64(acc, q, n); }
void rgpu_vm_sqrt_f32(float *r, const float *a, int64_t n) { T()->sqrt_f32(r, a, n); }
void rgpu_vm_f32_to_bf16(uint16_t *r, const float *a, int64_t n) { T()->f32_to_bf16(r, a, n); }
void rgpu_vm_bf16_to_f32(float *r, const uint16_t *a, int64_t n) { T()->bf16_to_f32(r, a, n); }
void rgpu_vm_rsqrt_f32(float *r, const float *a, int64_t n) { T()->rsqrt_f32(r, a, n); }
void rgpu_vm_f32_to_f64(double *r, const float *a, int64_t n) { T()->f32_to_f64(r, a, n); }
void rgpu_vm_f64_to_f32(float *r, const double *a, int64_t n) { T()->f64_to_f32(r, a, n); }
void rgpu_vm_ln_row(double *b, int64_t N, const double *w, const double *bias, double eps, bool rms,
                    double *mu, double *rs) { T()->ln_row(b, N, w, bias, eps, rms, mu, rs); }
void rgpu_vm_ln_bw_row(const double *g, double *x, double *gw, double *dw, double *db, const double *w,
                       int64_t N, double mu, double rs, bool rms, bool want_dx)
{
    T()->ln_bw_row(g, x, gw, dw, db, w, N, mu, rs, rms, want_dx);
}
double rgpu_vm_max_f64(const double *b, int64_t n) { return T()->max_f64(b, n); }
void rgpu_vm_softmax_row(double *b, double *ex, int64_t n, bool is_log) { T()->softmax_row(b, ex, n, is_log); }
void rgpu_vm_softmax_bw_row(double *g, double *y, int64_t n, bool is_log) { T()->softmax_bw_row(g, y, n, is_log); }
