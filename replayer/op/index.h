/* op/index.h — what the index family's ops mean, for both backends
 * (cpu/cpu_index*.c; cuda/index.cu, index_data.cu, random.cu): input/output
 * and arg checks, each op's shape rules, and the per-element accumulate of
 * index_add / index_put / scatter (OP_FN: the kernels run it too), so both
 * backends accept the same records, give the same messages and the same
 * bits. */
#ifndef RGPU_OP_INDEX_H
#define RGPU_OP_INDEX_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "dtype.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Checks */

/* Inputs/outputs against a slot pattern: one char per slot, 'r' required,
 * '?' optional (may be NULL). n_in/n_out must equal the pattern lengths.
 * Present views pass rgpu_op_check_view. */
rgpu_status rgpu_op_index_check_io(const rgpu_exec *e, const char *in_pat, const char *out_pat,
                               char *err, size_t errlen);
/* Variadic: n_in in [min_in, RGPU_MAX_IN]; the first n_req inputs required,
 * later ones optional when opt_rest, else required. */
rgpu_status rgpu_op_index_check_io_var(const rgpu_exec *e, int min_in, int n_req, bool opt_rest,
                                   const char *out_pat, char *err, size_t errlen);

/* args[i] must exist and be INT (bool accepted for want_bool). */
rgpu_status rgpu_op_index_arg_int(const rgpu_exec *e, int i, const char *what, int64_t *v,
                              char *err, size_t errlen);
rgpu_status rgpu_op_index_arg_bool(const rgpu_exec *e, int i, const char *what, bool *v,
                               char *err, size_t errlen);
/* A number (INT, FLOAT or BOOL) as double. */
rgpu_status rgpu_op_index_arg_f64(const rgpu_exec *e, int i, const char *what, double *v,
                              char *err, size_t errlen);
/* True when args[i] exists and is NONE. */
bool rgpu_op_index_arg_none(const rgpu_exec *e, int i);

/* Same view: same data, dtype, shape and strides (an in-place op). */
bool rgpu_op_index_same_view(const rgpu_view *a, const rgpu_view *b);
/* Sizes of a and b equal (ndim too). */
bool rgpu_op_index_same_shape(const rgpu_view *a, const rgpu_view *b);
/* "[2, 3]" into buf. */
const char *rgpu_op_index_shape_str(const rgpu_view *v, char *buf, size_t n);

/* ---------------------------------------------------------------------------
 * Each op's checks and arg helpers */

/* Out shape must be (nd, sizes). */
rgpu_status rgpu_op_index_check_out_shape(const rgpu_exec *e, const rgpu_view *out, int nd, const int64_t *sizes,
                                      char *err, size_t errlen);
/* v's dtype must be dt. */
rgpu_status rgpu_op_index_check_same_dtype(const rgpu_exec *e, const rgpu_view *v, const char *what, int dt,
                                       char *err, size_t errlen);
/* An index dtype: int64, or int32 too when allow_i32. */
rgpu_status rgpu_op_index_check_index_dtype(const rgpu_exec *e, const rgpu_view *v, bool allow_i32,
                                        char *err, size_t errlen);
/* dim in [-n, n) with n = max(ndim, 1) (a 0-d tensor takes dim 0 / -1). */
rgpu_status rgpu_op_index_wrap_dim(const rgpu_exec *e, int64_t dim, int ndim, int *out, char *err, size_t errlen);
/* Sizes with a 0-d view read as 1-d of size 1 (ATen's ensure_nonempty_size),
 * into sz; returns the dim count (>= 1). */
int rgpu_op_index_nonempty_sizes(const rgpu_view *v, int64_t *sz);
/* Byte stride of dim d (0 for a 0-d view). */
int64_t rgpu_op_index_bstride(const rgpu_view *v, int d);

/* A legacy empty 1-d tensor (size (0,)), which cat skips. */
bool rgpu_op_index_cat_skipped(const rgpu_view *t);
/* CAT's io, arg and shape checks; *dim is the wrapped dim, or -1 when every
 * input is skipped (out then is empty: nothing to do). */
rgpu_status rgpu_op_index_cat_check(const rgpu_exec *e, int *dim, char *err, size_t errlen);
/* CONSTANT_PAD_ND's io, arg and shape checks: *value is the fill value's bits
 * in out's dtype; lo[RGPU_MAX_DIMS] the pad before each dim (0 where none),
 * want[0..ndim) out's sizes. */
rgpu_status rgpu_op_index_pad_check(const rgpu_exec *e, uint64_t *value, int64_t *lo, int64_t *want,
                                char *err, size_t errlen);
/* out[0] of a WAIT op: a one-element i64 scratch. */
rgpu_status rgpu_op_index_check_count_out(const rgpu_exec *e, char *err, size_t errlen);

/* args[i], args[i + 1]: seed and offset (INTs read as u64). */
rgpu_status rgpu_op_index_seed_offset(const rgpu_exec *e, int i, uint64_t *seed, uint64_t *offset,
                                  char *err, size_t errlen);
/* v's dtype must be floating (what names it). */
rgpu_status rgpu_op_index_need_float(const rgpu_exec *e, const rgpu_view *v, const char *what, char *err, size_t errlen);
/* Advanced indexing geometry (index.Tensor, index_put).
 *
 * self (d0..dn-1) with indices idx[0..k), k <= n; a NULL index takes its dim
 * whole, as do dims >= k. The index tensors broadcast together to B. The
 * result holds B's dims plus the un-indexed self dims: when the indexed dims
 * are adjacent, B replaces them in place (x[:, i, j] -> (d0, *B, d3..)),
 * otherwise B goes first (x[i, :, j] -> (*B, d1, ..)). Each result dim is
 * either a B dim or a self dim. The backends then compute each B element's
 * byte offset into the target, summed over the indexed dims (negative
 * indices wrap once, out of range is an error). */
typedef struct op_index_geom {
    int nb;                         /* B's dims */
    int64_t bsz[RGPU_MAX_DIMS];
    int64_t nbel;                   /* B's elements */
    int R;                          /* result dims */
    int64_t rsz[RGPU_MAX_DIMS];
    int rdim[RGPU_MAX_DIMS];        /* >= 0: self dim; < 0: B dim -1-rdim */
} op_index_geom;
/* The shape part: index dtypes, B (the broadcast of the indices), the result
 * dims. */
rgpu_status rgpu_op_index_geom_shape(const rgpu_exec *e, op_index_geom *g, const rgpu_view *self,
                                const rgpu_view *const *idx, int nidx, char *err, size_t errlen);
/* Largest finite value of a floating dtype. */
double rgpu_op_index_float_max(int dt);
/* 2^digits of a floating dtype (the exact-integer limit). */
int64_t rgpu_op_index_float_digits_pow(int dt);
/* Range of an integer dtype (bool: [0, 1]). */
void rgpu_op_index_int_range(int dt, int64_t *lo, int64_t *hi);

#ifdef __cplusplus
}
#endif

/* ---------------------------------------------------------------------------
 * Elements */

/* Reductions of an element into a destination of the same dtype, in the
 * dtype's opmath (f32 for f16/bf16/f32, f64, wrapping int64, logical bool):
 *   ASSIGN d = s;  ADD d = d + alpha*s (d + s when alpha is one);  MUL d = d*s */
enum { OP_IDX_ASSIGN = 0, OP_IDX_ADD = 1, OP_IDX_MUL = 2 };

typedef struct op_idx_alpha {
    bool one;
    float f;
    double d;
    uint64_t i;
    bool b;
    bool round_prod;   /* f16/bf16: d + round(alpha*s), alpha already rounded (c10 Half ops) */
    bool fused;        /* d + alpha*s as one fma (ATen's vectorised add_ with alpha) */
} op_idx_alpha;

OP_FN op_idx_alpha op_idx_alpha_one(void)
{
    op_idx_alpha a = { true, 1.0f, 1.0, 1, true, false, false };
    return a;
}

/* The ADD/MUL step of op_idx_elem_reduce for bool (logical) and the integer
 * dtypes (wrapping int64): exact, so the CUDA kernels share it as it is;
 * ab, ai: alpha's b and i. */
OP_FN void op_idx_elem_reduce_exact(char *d, const char *s, int dt, int mode, bool ab, uint64_t ai)
{
    if (dt == RGPU_BOOL) {
        bool x = *(const uint8_t *)d != 0, y = *(const uint8_t *)s != 0;
        *(uint8_t *)d = mode == OP_IDX_MUL ? (x && y) : (x || (ab && y));
        return;
    }
    uint64_t x = op_load_u64(d, dt), y = op_load_u64(s, dt);
    x = mode == OP_IDX_MUL ? x * y : x + ai * y;
    op_store_u64(d, dt, x);
}

OP_FN void op_idx_elem_reduce(char *d, const char *s, int dt, int mode, const op_idx_alpha *a)
{
    if (mode == OP_IDX_ASSIGN) { op_elem_copy(d, s, op_dtype_esize(dt)); return; }
    switch (dt) {
    case RGPU_F32: case RGPU_F16: case RGPU_BF16: {
        float x = op_load_f32(d, dt), y = op_load_f32(s, dt);
        if (mode == OP_IDX_MUL) x = x * y;
        else if (a->one) x = x + y;
        else if (a->round_prod) x = x + op_round_to(dt, y * a->f);
        else if (a->fused) x = fmaf(a->f, y, x);
        else x = x + a->f * y;
        op_store_f32(d, dt, x);
        break;
    }
    case RGPU_F64: {
        double x = *(const double *)d, y = *(const double *)s;
        if (mode == OP_IDX_MUL) x = x * y;
        else if (a->one) x = x + y;
        else if (a->fused) x = fma(a->d, y, x);
        else x = x + a->d * y;
        *(double *)d = x;
        break;
    }
    default: op_idx_elem_reduce_exact(d, s, dt, mode, a->b, a->i); break;
    }
}

/* An index element (i64 or i32) as int64. */
OP_FN int64_t op_idx_load_index(const char *p, int dt)
{
    return dt == RGPU_I32 ? (int64_t)*(const int32_t *)p : *(const int64_t *)p;
}

/* ---------------------------------------------------------------------------
 * SCATTER_REDUCE (scatter_reduce.two): each out element an index position
 * reaches gets one accumulator, started on its first touch (from out, which
 * holds self, when include_self, else from the reduction's identity, as
 * ATen's scatter of the init value), combined with each src element in
 * index order, and stored at the end (mean: divided by the count, plus one
 * with include_self; integers floor-divide). The accumulator is f32 for
 * f32/f16/bf16 (ATen's opmath buffer: f16/bf16 round once, at the store),
 * f64, or int64 for the integer types and bool (wrapping; a bool stores
 * nonzero). amax/amin propagate NaN as ATen's (a NaN src wins; a NaN
 * accumulator stays). */
enum { OP_SR_SUM = 0, OP_SR_PROD = 1, OP_SR_MEAN = 2, OP_SR_AMAX = 3, OP_SR_AMIN = 4 };

typedef union op_sr_acc { float f; double d; int64_t i; } op_sr_acc;

OP_FN void op_sr_start(op_sr_acc *a, const char *out, int dt, int mode, bool include_self)
{
    bool fl = dt == RGPU_F32 || dt == RGPU_F16 || dt == RGPU_BF16;
    if (include_self) {
        if (fl) a->f = op_load_f32(out, dt);
        else if (dt == RGPU_F64) a->d = *(const double *)out;
        else a->i = (int64_t)op_load_u64(out, dt);
        return;
    }
    if (fl || dt == RGPU_F64) {
        double v = mode == OP_SR_PROD ? 1.0 : mode == OP_SR_AMAX ? -INFINITY : mode == OP_SR_AMIN ? INFINITY : 0.0;
        if (fl) a->f = (float)v; else a->d = v;
    } else {
        a->i = mode == OP_SR_PROD ? 1 : mode == OP_SR_AMAX ? INT64_MIN : mode == OP_SR_AMIN ? INT64_MAX : 0;
    }
}

OP_FN void op_sr_combine(op_sr_acc *a, const char *src, int dt, int mode)
{
    if (dt == RGPU_F32 || dt == RGPU_F16 || dt == RGPU_BF16) {
        float x = a->f, y = op_load_f32(src, dt);
        if (mode == OP_SR_PROD) x = x * y;
        else if (mode == OP_SR_AMAX) x = y != y ? y : (x < y ? y : x);
        else if (mode == OP_SR_AMIN) x = y != y ? y : (y < x ? y : x);
        else x = x + y;
        a->f = x;
    } else if (dt == RGPU_F64) {
        double x = a->d, y = *(const double *)src;
        if (mode == OP_SR_PROD) x = x * y;
        else if (mode == OP_SR_AMAX) x = y != y ? y : (x < y ? y : x);
        else if (mode == OP_SR_AMIN) x = y != y ? y : (y < x ? y : x);
        else x = x + y;
        a->d = x;
    } else {
        int64_t x = a->i, y = (int64_t)op_load_u64(src, dt);
        if (mode == OP_SR_PROD) x = (int64_t)((uint64_t)x * (uint64_t)y);
        else if (mode == OP_SR_AMAX) x = x < y ? y : x;
        else if (mode == OP_SR_AMIN) x = y < x ? y : x;
        else x = (int64_t)((uint64_t)x + (uint64_t)y);
        a->i = x;
    }
}

/* Stores the accumulator of an out element touched cnt (> 0) times. */
OP_FN void op_sr_finish(char *out, const op_sr_acc *a, int64_t cnt, int dt, int mode, bool include_self)
{
    int64_t c = cnt + (include_self ? 1 : 0);
    if (dt == RGPU_F32 || dt == RGPU_F16 || dt == RGPU_BF16) {
        op_store_f32(out, dt, a->f);
        if (mode == OP_SR_MEAN) op_store_f32(out, dt, op_load_f32(out, dt) / (float)c);
    } else if (dt == RGPU_F64) {
        *(double *)out = mode == OP_SR_MEAN ? a->d / (double)c : a->d;
    } else {
        op_store_u64(out, dt, (uint64_t)a->i);
        if (mode == OP_SR_MEAN) {
            int64_t x = (int64_t)op_load_u64(out, dt), q = x / c;
            if (x % c != 0 && x < 0) q--;
            op_store_u64(out, dt, (uint64_t)q);
        }
    }
}

/* ---------------------------------------------------------------------------
 * N-d walk in row-major order over sizes[0..nd), keeping up to OP_WALK_N byte
 * offsets (one per stride set). Usage:
 *   op_walk w; op_walk_init(&w, nd, sizes);  set w.st[k][d];  then
 *   if (numel > 0) do { ... w.off[k], w.idx[d] ... } while (op_walk_next(&w)); */
#define OP_WALK_N 4

typedef struct op_walk {
    int nd;
    int64_t sz[RGPU_MAX_DIMS];
    int64_t st[OP_WALK_N][RGPU_MAX_DIMS];
    int64_t idx[RGPU_MAX_DIMS];
    int64_t off[OP_WALK_N];
} op_walk;

static inline void op_walk_init(op_walk *w, int nd, const int64_t *sizes)
{
    memset(w, 0, sizeof *w);
    w->nd = nd;
    for (int d = 0; d < nd; d++) w->sz[d] = sizes[d];
}

/* Sets stride set k from a view's element strides (bytes), over the same dims. */
static inline void op_walk_strides(op_walk *w, int k, const rgpu_view *v)
{
    int64_t esz = (int64_t)rgpu_dtype_size(v->dtype);
    for (int d = 0; d < v->ndim && d < w->nd; d++) w->st[k][d] = v->strides[d] * esz;
}

static inline bool op_walk_next(op_walk *w)
{
    for (int d = w->nd - 1; d >= 0; d--) {
        if (++w->idx[d] < w->sz[d]) {
            for (int k = 0; k < OP_WALK_N; k++) w->off[k] += w->st[k][d];
            return true;
        }
        for (int k = 0; k < OP_WALK_N; k++) w->off[k] -= w->st[k][d] * (w->sz[d] - 1);
        w->idx[d] = 0;
    }
    return false;
}

/* ---------------------------------------------------------------------------
 * The host-side checks of the dim-indexed ops and embedding, shared by the
 * CPU and CUDA backends: io, args, dtypes, shapes; what the kernels need
 * comes back in a struct. Index values (bounds) are each backend's to check. */

typedef struct op_index_dimop {
    const char *name;                /* the op's name in messages */
    const rgpu_view *self, *ix, *src; /* in[0], in[1], in[2] (src NULL where absent) */
    rgpu_view *out;
    int dim, nd;                     /* wrapped dim; dims with a 0-d view as 1-d */
    int64_t ssz[RGPU_MAX_DIMS];      /* self's sizes (rgpu_op_index_nonempty_sizes) */
    int64_t isz[RGPU_MAX_DIMS];      /* index's (gather, scatter) */
    int64_t rsz[RGPU_MAX_DIMS];      /* src's (scatter with src, index_add) */
    int64_t reduce;                  /* scatter: OP_IDX_* */
    uint64_t value;                  /* scatter without src: the value's bits in self's dtype */
    double alpha_v;                  /* index_add: alpha as read */
    op_idx_alpha alpha;              /* index_add: alpha as the reduction takes it */
} op_index_dimop;

typedef struct op_index_embbw {
    int64_t nw, pad, D, n;           /* num_weights, padding_idx, grad's last size, indices */
    bool by_freq;
} op_index_embbw;

#ifdef __cplusplus
extern "C" {
#endif
/* EMBEDDING: weight (V, D), indices (*) -> out (*, D). */
rgpu_status rgpu_op_index_embedding_check(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_op_index_embedding_backward_check(const rgpu_exec *e, op_index_embbw *p, char *err, size_t errlen);
/* GATHER: through out's shape (index's). */
rgpu_status rgpu_op_index_gather_check(const rgpu_exec *e, op_index_dimop *p, char *err, size_t errlen);
/* SCATTER / SCATTER_ADD: through the index/src/self size checks. */
rgpu_status rgpu_op_index_scatter_check(const rgpu_exec *e, bool add_only, op_index_dimop *p, char *err, size_t errlen);
/* SCATTER_REDUCE: as SCATTER with src, plus reduce (OP_SR_*, in p->reduce)
 * and include_self. */
rgpu_status rgpu_op_index_scatter_reduce_check(const rgpu_exec *e, op_index_dimop *p, bool *include_self,
                                          char *err, size_t errlen);
/* INDEX_SELECT: through out's shape. */
rgpu_status rgpu_op_index_select_check(const rgpu_exec *e, op_index_dimop *p, char *err, size_t errlen);
/* INDEX_SELECT's walk: over out (set 0) and self (set 1, with dim's stride 0:
 * the index picks self's row). */
void rgpu_op_index_select_walk(const op_index_dimop *p, op_walk *w);
/* INDEX_ADD: alpha and the source/index/self shape checks. */
rgpu_status rgpu_op_index_add_check(const rgpu_exec *e, op_index_dimop *p, char *err, size_t errlen);
/* INDEX_PUT's operands: self, values, the index tensors (idx[0..nidx), NULL
 * for a full slice), out, the dtype and accumulate. */
typedef struct op_index_put_args {
    const rgpu_view *self, *vals;
    const rgpu_view *const *idx;
    int nidx, dt;
    rgpu_view *out;
    bool acc;
} op_index_put_args;
/* INDEX_PUT: io, accumulate, dtypes, out's shape; fills p. */
rgpu_status rgpu_op_index_put_check(const rgpu_exec *e, op_index_put_args *p, char *err, size_t errlen);
/* Writing self into out is needed (*copy) unless out is self; an error when
 * out shares self's memory as another view. */
rgpu_status rgpu_op_index_self_into_out(const rgpu_exec *e, const rgpu_view *out, const rgpu_view *self, bool *copy,
                                   char *err, size_t errlen);
/* NONZERO: io and out's dtype; then out's shape for n nonzeros. */
rgpu_status rgpu_op_index_nonzero_check(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_op_index_nonzero_check_out(const rgpu_exec *e, int64_t n, char *err, size_t errlen);
/* MASKED_SELECT: io, dtypes, self and mask of one shape; then out's shape for n true elements. */
rgpu_status rgpu_op_index_masked_select_check(const rgpu_exec *e, char *err, size_t errlen);
rgpu_status rgpu_op_index_masked_select_check_out(const rgpu_exec *e, int64_t n, char *err, size_t errlen);
/* UNIQUE / COUNT_UNIQUE: io, args, dtypes (*want_inv, *want_cnt: the
 * outputs asked for and present); then values'/counts' shape for n groups. */
typedef struct op_index_unique_args {
    const char *name;       /* the op's name in messages */
    bool want_inv, want_cnt;
    bool fl;                /* the input is floating */
    int64_t N;              /* the input's elements */
} op_index_unique_args;
rgpu_status rgpu_op_index_unique_check(const rgpu_exec *e, bool count_only, op_index_unique_args *u,
                                  char *err, size_t errlen);
rgpu_status rgpu_op_index_unique_check_out(const rgpu_exec *e, bool want_cnt, int64_t n, char *err, size_t errlen);
/* Unique's sort: by value (NaN after every number, each NaN distinct,
 * -0.0 == 0.0), then by position; qsort comparators over op_index_uq_item. */
typedef struct op_index_uq_item {
    union { double f; int64_t i; } k;
    int64_t pos;      /* row-major index in x */
    int64_t off;      /* byte offset in x (where a backend needs it) */
} op_index_uq_item;
int rgpu_op_index_uq_cmp_f(const void *pa, const void *pb);
int rgpu_op_index_uq_cmp_i(const void *pa, const void *pb);
/* Sorts it[0..N) (fl: by k.f, else k.i) and returns the number of groups. */
int64_t rgpu_op_index_uq_sort(op_index_uq_item *it, int64_t N, bool fl);
/* Whether it[i] (sorted) starts a new group. */
bool rgpu_op_index_uq_new_group(const op_index_uq_item *it, int64_t i, bool fl);
/* CONSTANT_PAD_ND's geometry, from rgpu_op_index_pad_check. */
typedef struct op_index_pad_args {
    uint64_t value;                    /* the fill value's bits in out's dtype */
    int64_t lo[RGPU_MAX_DIMS];         /* pad before each dim (0 where none; negative crops) */
    int64_t sz[RGPU_MAX_DIMS];         /* out's sizes */
    int64_t a[RGPU_MAX_DIMS], b[RGPU_MAX_DIMS];   /* the out range the input covers: [a, b) */
} op_index_pad_args;
rgpu_status rgpu_op_index_pad_prepare(const rgpu_exec *e, op_index_pad_args *pa, char *err, size_t errlen);
/* CAT: the part of out that input i fills (a view of out at its shape);
 * false when input i is skipped or empty. dim: rgpu_op_index_cat_check's. */
bool rgpu_op_index_cat_slice(const rgpu_exec *e, int dim, int i, rgpu_view *slice);
#ifdef __cplusplus
}
#endif

#endif
