/* cpu_index.h — private helpers of the CPU index family (cpu_index.c,
 * cpu_index_data.c, cpu_index_random.c): input/output and arg checks, a
 * multi-offset N-d walker, and per-element copy/convert/accumulate. */
#ifndef RGPU_CPU_INDEX_H
#define RGPU_CPU_INDEX_H

#include <math.h>
#include <stdlib.h>

#include "cpu_internal.h"

/* ---------------------------------------------------------------------------
 * Checks */

/* Inputs/outputs against a slot pattern: one char per slot, 'r' required,
 * '?' optional (may be NULL). n_in/n_out must equal the pattern lengths.
 * Present views pass op_check_view. */
rgpu_status cpu_index_check_io(const rgpu_exec *e, const char *in_pat, const char *out_pat,
                               char *err, size_t errlen);
/* Variadic: n_in in [min_in, RGPU_MAX_IN]; the first n_req inputs required,
 * later ones optional when opt_rest, else required. */
rgpu_status cpu_index_check_io_var(const rgpu_exec *e, int min_in, int n_req, bool opt_rest,
                                   const char *out_pat, char *err, size_t errlen);

/* args[i] must exist and be INT (bool accepted for want_bool). */
rgpu_status cpu_index_arg_int(const rgpu_exec *e, int i, const char *what, int64_t *v,
                              char *err, size_t errlen);
rgpu_status cpu_index_arg_bool(const rgpu_exec *e, int i, const char *what, bool *v,
                               char *err, size_t errlen);
/* A number (INT, FLOAT or BOOL) as double. */
rgpu_status cpu_index_arg_f64(const rgpu_exec *e, int i, const char *what, double *v,
                              char *err, size_t errlen);
/* True when args[i] exists and is NONE. */
bool cpu_index_arg_none(const rgpu_exec *e, int i);

/* Same view: same data, dtype, shape and strides (an in-place op). */
bool cpu_index_same_view(const rgpu_view *a, const rgpu_view *b);
/* Sizes of a and b equal (ndim too). */
bool cpu_index_same_shape(const rgpu_view *a, const rgpu_view *b);
/* "[2, 3]" into buf. */
const char *cpu_index_shape_str(const rgpu_view *v, char *buf, size_t n);
/* Copy src into dst elementwise (same shape, dtype cast when they differ). */
void cpu_index_copy_view(rgpu_view *dst, const rgpu_view *src);

/* ---------------------------------------------------------------------------
 * Checks and arg helpers of the family's ops, shared with the CUDA backend
 * (replayer/cuda/index*.cu, random.cu) so both give the same messages. */

/* cpu_index.c */
/* Out shape must be (nd, sizes). */
rgpu_status cpu_index_check_out_shape(const rgpu_exec *e, const rgpu_view *out, int nd, const int64_t *sizes,
                                      char *err, size_t errlen);
/* v's dtype must be dt. */
rgpu_status cpu_index_check_same_dtype(const rgpu_exec *e, const rgpu_view *v, const char *what, int dt,
                                       char *err, size_t errlen);
/* An index dtype: int64, or int32 too when allow_i32. */
rgpu_status cpu_index_check_index_dtype(const rgpu_exec *e, const rgpu_view *v, bool allow_i32,
                                        char *err, size_t errlen);
/* dim in [-n, n) with n = max(ndim, 1) (a 0-d tensor takes dim 0 / -1). */
rgpu_status cpu_index_wrap_dim(const rgpu_exec *e, int64_t dim, int ndim, int *out, char *err, size_t errlen);
/* Sizes with a 0-d view read as 1-d of size 1 (ATen's ensure_nonempty_size),
 * into sz; returns the dim count (>= 1). */
int cpu_index_nonempty_sizes(const rgpu_view *v, int64_t *sz);
/* Byte stride of dim d (0 for a 0-d view). */
int64_t cpu_index_bstride(const rgpu_view *v, int d);

/* cpu_index_data.c */
/* A legacy empty 1-d tensor (size (0,)), which cat skips. */
bool cpu_index_cat_skipped(const rgpu_view *t);
/* CAT's io, arg and shape checks; *dim is the wrapped dim, or -1 when every
 * input is skipped (out then is empty: nothing to do). */
rgpu_status cpu_index_cat_check(const rgpu_exec *e, int *dim, char *err, size_t errlen);
/* CONSTANT_PAD_ND's io, arg and shape checks: *value is the fill value's bits
 * in out's dtype; lo[RGPU_MAX_DIMS] the pad before each dim (0 where none),
 * want[0..ndim) out's sizes. */
rgpu_status cpu_index_pad_check(const rgpu_exec *e, uint64_t *value, int64_t *lo, int64_t *want,
                                char *err, size_t errlen);
/* out[0] of a WAIT op: a one-element i64 scratch. */
rgpu_status cpu_index_check_count_out(const rgpu_exec *e, char *err, size_t errlen);

/* cpu_index_random.c */
/* args[i], args[i + 1]: seed and offset (INTs read as u64). */
rgpu_status cpu_index_seed_offset(const rgpu_exec *e, int i, uint64_t *seed, uint64_t *offset,
                                  char *err, size_t errlen);
/* v's dtype must be floating (what names it). */
rgpu_status cpu_index_need_float(const rgpu_exec *e, const rgpu_view *v, const char *what, char *err, size_t errlen);
/* Largest finite value of a floating dtype. */
double cpu_index_float_max(int dt);
/* 2^digits of a floating dtype (the exact-integer limit). */
int64_t cpu_index_float_digits_pow(int dt);
/* Range of an integer dtype (bool: [0, 1]). */
void cpu_index_int_range(int dt, int64_t *lo, int64_t *hi);

/* ---------------------------------------------------------------------------
 * N-d walk in row-major order over sizes[0..nd), keeping up to IDX_NW byte
 * offsets (one per stride set). Usage:
 *   idx_walk w; idx_walk_init(&w, nd, sizes);  set w.st[k][d];  then
 *   if (numel > 0) do { ... w.off[k], w.idx[d] ... } while (idx_walk_next(&w)); */
#define IDX_NW 4

typedef struct idx_walk {
    int nd;
    int64_t sz[RGPU_MAX_DIMS];
    int64_t st[IDX_NW][RGPU_MAX_DIMS];
    int64_t idx[RGPU_MAX_DIMS];
    int64_t off[IDX_NW];
} idx_walk;

static inline void idx_walk_init(idx_walk *w, int nd, const int64_t *sizes)
{
    memset(w, 0, sizeof *w);
    w->nd = nd;
    for (int d = 0; d < nd; d++) w->sz[d] = sizes[d];
}

/* Sets stride set k from a view's element strides (bytes), over the same dims. */
static inline void idx_walk_strides(idx_walk *w, int k, const rgpu_view *v)
{
    int64_t esz = (int64_t)rgpu_dtype_size(v->dtype);
    for (int d = 0; d < v->ndim && d < w->nd; d++) w->st[k][d] = v->strides[d] * esz;
}

static inline bool idx_walk_next(idx_walk *w)
{
    for (int d = w->nd - 1; d >= 0; d--) {
        if (++w->idx[d] < w->sz[d]) {
            for (int k = 0; k < IDX_NW; k++) w->off[k] += w->st[k][d];
            return true;
        }
        for (int k = 0; k < IDX_NW; k++) w->off[k] -= w->st[k][d] * (w->sz[d] - 1);
        w->idx[d] = 0;
    }
    return false;
}

/* ---------------------------------------------------------------------------
 * Elements */

static inline void idx_elem_copy(char *d, const char *s, size_t esz)
{
    switch (esz) {
    case 1: *(uint8_t *)d = *(const uint8_t *)s; break;
    case 2: memcpy(d, s, 2); break;
    case 4: memcpy(d, s, 4); break;
    default: memcpy(d, s, 8); break;
    }
}

/* d (dtype ddt) = s (dtype sdt), cast as copy_ does. */
static inline void idx_elem_convert(char *d, int ddt, const char *s, int sdt)
{
    if (ddt == sdt) idx_elem_copy(d, s, rgpu_dtype_size(ddt));
    else if (op_dtype_is_float(sdt)) op_store_f64(d, ddt, op_load_f64(s, sdt));
    else op_store_u64(d, ddt, op_load_u64(s, sdt));
}

/* Reductions of an element into a destination of the same dtype, in the
 * dtype's opmath (f32 for f16/bf16/f32, f64, wrapping int64, logical bool):
 *   ASSIGN d = s;  ADD d = d + alpha*s (d + s when alpha is one);  MUL d = d*s */
enum { IDX_ASSIGN = 0, IDX_ADD = 1, IDX_MUL = 2 };

typedef struct idx_alpha {
    bool one;
    float f;
    double d;
    uint64_t i;
    bool b;
    bool round_prod;   /* f16/bf16: d + round(alpha*s), alpha already rounded (c10 Half ops) */
    bool fused;        /* d + alpha*s as one fma (ATen's vectorised add_ with alpha) */
} idx_alpha;

static inline idx_alpha idx_alpha_one(void)
{
    idx_alpha a = { true, 1.0f, 1.0, 1, true, false, false };
    return a;
}

/* v rounded to dtype dt (f32 opmath values of f16/bf16 tensors). */
static inline float idx_round_to(int dt, float v)
{
    if (dt == RGPU_F16) return rgpu_half_to_float(rgpu_float_to_half(v));
    if (dt == RGPU_BF16) return rgpu_bf16_to_float(rgpu_float_to_bf16(v));
    return v;
}

static inline void idx_elem_reduce(char *d, const char *s, int dt, int mode, const idx_alpha *a)
{
    if (mode == IDX_ASSIGN) { idx_elem_copy(d, s, rgpu_dtype_size(dt)); return; }
    switch (dt) {
    case RGPU_F32: case RGPU_F16: case RGPU_BF16: {
        float x = op_load_f32(d, dt), y = op_load_f32(s, dt);
        if (mode == IDX_MUL) x = x * y;
        else if (a->one) x = x + y;
        else if (a->round_prod) x = x + idx_round_to(dt, y * a->f);
        else if (a->fused) x = fmaf(a->f, y, x);
        else x = x + a->f * y;
        op_store_f32(d, dt, x);
        break;
    }
    case RGPU_F64: {
        double x = *(const double *)d, y = *(const double *)s;
        if (mode == IDX_MUL) x = x * y;
        else if (a->one) x = x + y;
        else if (a->fused) x = fma(a->d, y, x);
        else x = x + a->d * y;
        *(double *)d = x;
        break;
    }
    case RGPU_BOOL: {
        bool x = *(const uint8_t *)d != 0, y = *(const uint8_t *)s != 0;
        *(uint8_t *)d = mode == IDX_MUL ? (x && y) : (x || (a->b && y));
        break;
    }
    default: {
        uint64_t x = op_load_u64(d, dt), y = op_load_u64(s, dt);
        x = mode == IDX_MUL ? x * y : x + a->i * y;
        op_store_u64(d, dt, x);
        break;
    }
    }
}

/* malloc of n elements of sz bytes; NULL when n is negative or n*sz
 * overflows (hostile sizes: a stride-0 view can be huge). At least one element. */
static inline void *idx_alloc(int64_t n, size_t sz)
{
    if (n < 0 || (uint64_t)n > SIZE_MAX / sz) return NULL;
    return malloc(n > 0 ? (size_t)n * sz : sz);
}

/* An index element (i64 or i32) as int64. */
static inline int64_t idx_load_index(const char *p, int dt)
{
    return dt == RGPU_I32 ? (int64_t)*(const int32_t *)p : *(const int64_t *)p;
}

/* ---------------------------------------------------------------------------
 * Per-file entry points (dispatched from cpu_index.c) */
rgpu_status cpu_index_cat(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status cpu_index_pad(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status cpu_index_count_nonzero(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status cpu_index_nonzero(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status cpu_index_masked_select(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status cpu_index_unique(const rgpu_exec *e, bool count_only, char *err, size_t errlen);
rgpu_status cpu_index_random(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status cpu_index_dropout(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status cpu_index_dropout_backward(const rgpu_exec *e, char *err, size_t errlen);

#endif
