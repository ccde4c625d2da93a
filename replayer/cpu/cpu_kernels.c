/* cpu_kernels.c — the CPU reference backend's op dispatch and elementwise
 * kernels (factories, copy_, binary arithmetic). ATen semantics exactly,
 * plain loops; the CUDA backend is checked against this file.
 *
 * Every op validates arity, arg kinds and shapes first and fails with a
 * one-line message; nothing here aborts. Outputs are written through their
 * own strides; dtypes/sizes/strides were decided by the client. */
#include "cpu_internal.h"
#include "op/pointwise.h"
#include "cpu_pool.h"
#include "op/dense.h"
#include "op/reduce.h"
#include "cpu_families.h"

#define CHUNK CPU_CHUNK   /* elements converted per buffer (cpu_internal.h) */

/* ---------------------------------------------------------------------------
 * Common checks */

/* ---------------------------------------------------------------------------
 * FULL (fill_): out[...] = value cast to out's dtype */

/* typed stores by element size (a plain loop each, vectorised when unit-stride) */
#define FILL_AS(T) do { T v_; memcpy(&v_, val, sizeof v_);                              \
        if (s[0] == (int64_t)sizeof(T)) { T *q_ = (T *)o; for (int64_t i = 0; i < n; i++) q_[i] = v_; } \
        else for (int64_t i = 0; i < n; i++) *(T *)(o + i * s[0]) = v_; } while (0)

static void fill_row(char *const *p, const int64_t *s, int64_t n, void *ctx)
{
    const uint8_t *val = ctx;
    size_t esz = (size_t)val[16];
    char *o = p[0];
    switch (esz) {
    case 1: FILL_AS(uint8_t); break;
    case 2: FILL_AS(uint16_t); break;
    case 4: FILL_AS(uint32_t); break;
    case 8: FILL_AS(uint64_t); break;
    default: for (int64_t i = 0; i < n; i++) memcpy(o + i * s[0], val, esz); break;
    }
}
#undef FILL_AS

static rgpu_status op_full(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_check_scalar_arg(e, 0, "value", err, errlen));
    rgpu_view *out = e->out[0];
    uint8_t val[17];   /* [0..16): element bytes, [16]: element size */
    memset(val, 0, sizeof val);
    rgpu_op_scalar_to(&e->args[0], out->dtype, val);
    val[16] = (uint8_t)rgpu_dtype_size(out->dtype);
    op_iter it;
    FORWARD_IF_ERROR(rgpu_op_iter_init(&it, out, NULL, 0, e->op, err, errlen));
    rgpu_cpu_iter_run(&it, fill_row, val, 4 * CPU_ITER_GRAIN);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * ARANGE: out is (N,), out[i] = start + i*step.
 * Accumulate type as ATen's arange_cpu (acc_type<T, false>): int64 for every
 * integer dtype (wrapping), double for f32/f64, float for f16/bf16. */

static rgpu_status op_arange(const rgpu_exec *e, char *err, size_t errlen)
{
    for (int i = 0; i < 2; i++) {
        FORWARD_IF_ERROR(rgpu_op_check_scalar_arg(e, i, i ? "step" : "start", err, errlen));
        if (e->args[i].kind == RGPU_ARG_BOOL)
            RETURN_ERROR(RGPU_ERR_BAD_ARG, "arange: arg %d is a bool, want int or float", i);
    }
    rgpu_view *out = e->out[0];
    if (out->ndim != 1) RETURN_ERROR(RGPU_ERR_SHAPE, "arange: out has %d dims, want 1", out->ndim);
    const rgpu_arg *a0 = &e->args[0], *a1 = &e->args[1];
    int dt = out->dtype;
    int64_t n = out->sizes[0], os = out->strides[0] * (int64_t)rgpu_dtype_size(dt);
    char *o = out->data;
    if (!op_dtype_is_float(dt) && dt != RGPU_BOOL) {
        uint64_t start = (uint64_t)(a0->kind == RGPU_ARG_FLOAT ? op_f64_to_i64_sat(a0->v.f) : a0->v.i);
        uint64_t step = (uint64_t)(a1->kind == RGPU_ARG_FLOAT ? op_f64_to_i64_sat(a1->v.f) : a1->v.i);
        for (int64_t i = 0; i < n; i++) op_store_u64(o + i * os, dt, start + step * (uint64_t)i);
    } else if (dt == RGPU_F16 || dt == RGPU_BF16) {
        float start = a0->kind == RGPU_ARG_FLOAT ? (float)a0->v.f : (float)a0->v.i;
        float step = a1->kind == RGPU_ARG_FLOAT ? (float)a1->v.f : (float)a1->v.i;
        for (int64_t i = 0; i < n; i++) op_store_f32(o + i * os, dt, start + step * (float)i);
    } else if (dt == RGPU_BOOL) {
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "arange: bool output is not supported (ATen rejects it)");
    } else {
        double start = a0->kind == RGPU_ARG_FLOAT ? a0->v.f : (double)a0->v.i;
        double step = a1->kind == RGPU_ARG_FLOAT ? a1->v.f : (double)a1->v.i;
        for (int64_t i = 0; i < n; i++) op_store_f64(o + i * os, dt, start + step * (double)i);
    }
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * COPY (copy_): dst = src broadcast, cast src dtype -> dst dtype.
 * Float sources go through double (exact for f16/bf16/f32), integer and bool
 * sources through int64 (exact), so each conversion rounds at most once,
 * except X -> f16/bf16 which rounds via f32 exactly as c10 does. */

static void copy_row(char *const *p, const int64_t *s, int64_t n, void *ctx)
{
    const op_iter *it = ctx;
    int dd = it->dtype[0], sd = it->dtype[1];
    char *o = p[0];
    const char *a = p[1];
    if (dd == sd) {
        cpu_copy_row_same(o, s[0], a, s[1], n, (int64_t)rgpu_dtype_size(dd));
        return;
    }
    /* f32 <-> f16/bf16: one conversion, the vectorised one when unit-stride
     * (bit-identical to the path through double below) */
    if (sd == RGPU_F32 && (dd == RGPU_F16 || dd == RGPU_BF16)) {
        bool bf = dd == RGPU_BF16;
        if (s[0] == 2 && s[1] == 4) {
            if (bf) cpu_f32_to_bf16_n((uint16_t *)o, (const float *)a, n);
            else cpu_f32_to_f16_n((uint16_t *)o, (const float *)a, n);
        } else if (bf) {
            for (int64_t i = 0; i < n; i++) *(uint16_t *)(o + i * s[0]) = cpu_f32_to_bf16(*(const float *)(a + i * s[1]));
        } else {
            for (int64_t i = 0; i < n; i++) *(uint16_t *)(o + i * s[0]) = cpu_f32_to_f16(*(const float *)(a + i * s[1]));
        }
        return;
    }
    if (dd == RGPU_F32 && (sd == RGPU_F16 || sd == RGPU_BF16)) {
        bool bf = sd == RGPU_BF16;
        if (s[0] == 4 && s[1] == 2) {
            if (bf) cpu_bf16_to_f32_n((float *)o, (const uint16_t *)a, n);
            else cpu_f16_to_f32_n((float *)o, (const uint16_t *)a, n);
        } else if (bf) {
            for (int64_t i = 0; i < n; i++) *(float *)(o + i * s[0]) = cpu_bf16_to_f32(*(const uint16_t *)(a + i * s[1]));
        } else {
            for (int64_t i = 0; i < n; i++) *(float *)(o + i * s[0]) = cpu_f16_to_f32(*(const uint16_t *)(a + i * s[1]));
        }
        return;
    }
    if (op_dtype_is_complex(dd) || op_dtype_is_complex(sd)) {
        for (int64_t i = 0; i < n; i++) op_elem_convert(o + i * s[0], dd, a + i * s[1], sd);
        return;
    }
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        if (op_dtype_is_float(sd)) {
            double buf[CHUNK];
            cpu_load_row_f64(buf, a + i0 * s[1], sd, s[1], m);
            cpu_store_row_f64(o + i0 * s[0], dd, s[0], buf, m);
        } else {
            uint64_t buf[CHUNK];
            cpu_load_row_u64(buf, a + i0 * s[1], sd, s[1], m);
            cpu_store_row_u64(o + i0 * s[0], dd, s[0], buf, m);
        }
    }
}

/* A same-dtype copy whose source runs along the iterator's next-to-last dim
 * while out runs along the last (x.t().contiguous(), attention's head
 * transposes): element by element along out's rows each read lands on
 * another cache line (and page). Tiles of TR_TILE x TR_TILE elements keep
 * both sides' lines in L1; tiles go over the pool (a copy: the same bytes
 * whatever the split). */
#define TR_TILE 32

typedef struct tr_job {
    const op_iter *it;
    int64_t esz, nt0, nt1;
} tr_job;

#define TR_COPY(T) for (int64_t i = i0; i < ie; i++)                                        \
        for (int64_t k = k0; k < ke; k++)                                                    \
            *(T *)(o + i * so0 + k * so1) = *(const T *)(s + i * ss0 + k * ss1)

static void tr_task(void *vj, int64_t b, int64_t e)
{
    const tr_job *j = vj;
    const op_iter *it = j->it;
    const int nd = it->ndim;
    const int64_t n0 = it->sizes[nd - 2], n1 = it->sizes[nd - 1], per = j->nt0 * j->nt1;
    const int64_t so0 = it->strides[0][nd - 2], so1 = it->strides[0][nd - 1];
    const int64_t ss0 = it->strides[1][nd - 2], ss1 = it->strides[1][nd - 1];
    for (int64_t t = b; t < e; t++) {
        int64_t r = t / per, tile = t % per, oo = 0, os = 0;
        for (int d = nd - 3; d >= 0; d--) {          /* the leading dims' position */
            int64_t x = r % it->sizes[d];
            r /= it->sizes[d];
            oo += x * it->strides[0][d];
            os += x * it->strides[1][d];
        }
        char *o = it->base[0] + oo;
        const char *s = it->base[1] + os;
        const int64_t i0 = tile / j->nt1 * TR_TILE, k0 = tile % j->nt1 * TR_TILE;
        const int64_t ie = i0 + TR_TILE < n0 ? i0 + TR_TILE : n0, ke = k0 + TR_TILE < n1 ? k0 + TR_TILE : n1;
        switch (j->esz) {
        case 1: TR_COPY(uint8_t); break;
        case 2: TR_COPY(uint16_t); break;
        case 4: TR_COPY(uint32_t); break;
        case 8: TR_COPY(uint64_t); break;
        default:
            for (int64_t i = i0; i < ie; i++)
                for (int64_t k = k0; k < ke; k++) memcpy(o + i * so0 + k * so1, s + i * ss0 + k * ss1, (size_t)j->esz);
        }
    }
}
#undef TR_COPY

static bool copy_transposed(const op_iter *it)
{
    const int nd = it->ndim;
    if (nd < 2 || it->dtype[0] != it->dtype[1] || it->numel < 4 * TR_TILE * TR_TILE) return false;
    const int64_t esz = (int64_t)rgpu_dtype_size(it->dtype[0]);
    if (it->strides[0][nd - 1] != esz || it->strides[1][nd - 2] != esz || it->strides[1][nd - 1] == esz) return false;
    if (it->sizes[nd - 2] < TR_TILE || it->sizes[nd - 1] < TR_TILE) return false;
    for (int d = 0; d < nd; d++)                  /* out repeats no element */
        if (it->sizes[d] > 1 && it->strides[0][d] == 0) return false;
    tr_job j = { it, esz, (it->sizes[nd - 2] + TR_TILE - 1) / TR_TILE, (it->sizes[nd - 1] + TR_TILE - 1) / TR_TILE };
    const int64_t lead = it->numel / (it->sizes[nd - 2] * it->sizes[nd - 1]);
    rgpu_pool_for(lead * j.nt0 * j.nt1, 16, tr_task, &j);
    return true;
}

static rgpu_status op_copy(const rgpu_exec *e, char *err, size_t errlen)
{
    op_operand src = { e->in[0], NULL, 0 };
    op_iter it;
    FORWARD_IF_ERROR(rgpu_op_iter_init(&it, e->out[0], &src, 1, e->op, err, errlen));
    if (!rgpu_op_dense_views_overlap(e->out[0], e->in[0]) && copy_transposed(&it)) return RGPU_OK;
    rgpu_cpu_iter_run(&it, copy_row, &it, 2 * CPU_ITER_GRAIN);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Binary arithmetic: out = a OP b, each operand broadcast to out.
 *
 * The compute type ("opmath") follows the output dtype: f16/bf16/f32 -> float,
 * f64 -> double, integers -> int64 with wrapping (uint64 arithmetic), bool ->
 * logical. Each operand is loaded from its own dtype straight into the compute
 * type (ATen first casts each input to the common dtype; the two differ only
 * for e.g. an int64 input into an f16 output, where ATen rounds it to f16
 * first). Scalar operands (add.Scalar's other) become a 0-d operand already in
 * the compute type. With alpha == 1 the sum is a+b exactly (no multiply).
 * ATen's vectorised add uses fmadd(b, alpha, a) for alpha != 1, so results
 * with alpha != 1 may differ from ATen by one rounding; we never contract
 * (-std=c11 keeps -ffp-contract=off). */

typedef struct bin_ctx {
    int kind;              /* RGPU_OP_ADD/SUB/MUL/DIV_TENSOR (op_binary) */
    int ct;                /* CT_* */
    int dt[3];             /* out, a, b dtypes */
    bool alpha_one;
    float alpha_f;
    double alpha_d;
    uint64_t alpha_i;
    bool alpha_b;
} bin_ctx;

/* f32 everywhere, output and a unit-stride, b unit-stride or broadcast:
 * plain loops the compiler vectorises. out may alias a (in-place). */
static bool bin_row_f32_fast(const bin_ctx *c, char *const *p, const int64_t *s, int64_t n)
{
    if (c->dt[0] != RGPU_F32 || c->dt[1] != RGPU_F32 || c->dt[2] != RGPU_F32) return false;
    if (s[0] != 4 || s[1] != 4 || (s[2] != 4 && s[2] != 0)) return false;
    float *o = (float *)p[0];
    const float *a = (const float *)p[1], *b = (const float *)p[2];
    float al = c->alpha_f;
    if (s[2] == 0) {
        float bv = b[0];
        switch (c->kind) {
        case RGPU_OP_ADD_TENSOR: if (c->alpha_one) for (int64_t i = 0; i < n; i++) o[i] = a[i] + bv;
                      else for (int64_t i = 0; i < n; i++) o[i] = a[i] + al * bv;
                      break;
        case RGPU_OP_SUB_TENSOR: if (c->alpha_one) for (int64_t i = 0; i < n; i++) o[i] = a[i] - bv;
                      else for (int64_t i = 0; i < n; i++) o[i] = a[i] - al * bv;
                      break;
        case RGPU_OP_MUL_TENSOR: for (int64_t i = 0; i < n; i++) o[i] = a[i] * bv; break;
        default:      for (int64_t i = 0; i < n; i++) o[i] = a[i] / bv; break;
        }
        return true;
    }
    switch (c->kind) {
    case RGPU_OP_ADD_TENSOR: if (c->alpha_one) for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i];
                  else for (int64_t i = 0; i < n; i++) o[i] = a[i] + al * b[i];
                  break;
    case RGPU_OP_SUB_TENSOR: if (c->alpha_one) for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i];
                  else for (int64_t i = 0; i < n; i++) o[i] = a[i] - al * b[i];
                  break;
    case RGPU_OP_MUL_TENSOR: for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i]; break;
    default:      for (int64_t i = 0; i < n; i++) o[i] = a[i] / b[i]; break;
    }
    return true;
}

static void bin_row(char *const *p, const int64_t *s, int64_t n, void *vctx)
{
    const bin_ctx *c = vctx;
    if (c->ct == OP_CT_F32 && bin_row_f32_fast(c, p, s, n)) return;
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        char *o = p[0] + i0 * s[0];
        const char *pa = p[1] + i0 * s[1], *pb = p[2] + i0 * s[2];
        switch (c->ct) {
        case OP_CT_F32: {
            float A[CHUNK], B[CHUNK], al = c->alpha_f;
            cpu_load_row_f32(A, pa, c->dt[1], s[1], m);
            cpu_load_row_f32(B, pb, c->dt[2], s[2], m);
            switch (c->kind) {
            case RGPU_OP_ADD_TENSOR: if (c->alpha_one) for (int64_t i = 0; i < m; i++) A[i] = A[i] + B[i];
                          else for (int64_t i = 0; i < m; i++) A[i] = A[i] + al * B[i];
                          break;
            case RGPU_OP_SUB_TENSOR: if (c->alpha_one) for (int64_t i = 0; i < m; i++) A[i] = A[i] - B[i];
                          else for (int64_t i = 0; i < m; i++) A[i] = A[i] - al * B[i];
                          break;
            case RGPU_OP_MUL_TENSOR: for (int64_t i = 0; i < m; i++) A[i] = A[i] * B[i]; break;
            default:      for (int64_t i = 0; i < m; i++) A[i] = A[i] / B[i]; break;
            }
            cpu_store_row_f32(o, c->dt[0], s[0], A, m);
            break;
        }
        case OP_CT_F64: {
            double A[CHUNK], B[CHUNK], al = c->alpha_d;
            cpu_load_row_f64(A, pa, c->dt[1], s[1], m);
            cpu_load_row_f64(B, pb, c->dt[2], s[2], m);
            switch (c->kind) {
            case RGPU_OP_ADD_TENSOR: if (c->alpha_one) for (int64_t i = 0; i < m; i++) A[i] = A[i] + B[i];
                          else for (int64_t i = 0; i < m; i++) A[i] = A[i] + al * B[i];
                          break;
            case RGPU_OP_SUB_TENSOR: if (c->alpha_one) for (int64_t i = 0; i < m; i++) A[i] = A[i] - B[i];
                          else for (int64_t i = 0; i < m; i++) A[i] = A[i] - al * B[i];
                          break;
            case RGPU_OP_MUL_TENSOR: for (int64_t i = 0; i < m; i++) A[i] = A[i] * B[i]; break;
            default:      for (int64_t i = 0; i < m; i++) A[i] = A[i] / B[i]; break;
            }
            cpu_store_row_f64(o, c->dt[0], s[0], A, m);
            break;
        }
        case OP_CT_I64: {
            uint64_t A[CHUNK], B[CHUNK], al = c->alpha_i;
            cpu_load_row_u64(A, pa, c->dt[1], s[1], m);
            cpu_load_row_u64(B, pb, c->dt[2], s[2], m);
            switch (c->kind) {
            case RGPU_OP_ADD_TENSOR: if (c->alpha_one) for (int64_t i = 0; i < m; i++) A[i] = A[i] + B[i];
                          else for (int64_t i = 0; i < m; i++) A[i] = A[i] + al * B[i];
                          break;
            case RGPU_OP_SUB_TENSOR: if (c->alpha_one) for (int64_t i = 0; i < m; i++) A[i] = A[i] - B[i];
                          else for (int64_t i = 0; i < m; i++) A[i] = A[i] - al * B[i];
                          break;
            default:      for (int64_t i = 0; i < m; i++) A[i] = A[i] * B[i]; break;  /* no DIV here */
            }
            cpu_store_row_u64(o, c->dt[0], s[0], A, m);
            break;
        }
        default: {   /* OP_CT_BOOL: add is a || (alpha && b), mul is a && b */
            uint8_t A[CHUNK], B[CHUNK];
            cpu_load_row_bool(A, pa, c->dt[1], s[1], m);
            cpu_load_row_bool(B, pb, c->dt[2], s[2], m);
            if (c->kind == RGPU_OP_ADD_TENSOR) for (int64_t i = 0; i < m; i++) A[i] = A[i] || (c->alpha_b && B[i]);
            else for (int64_t i = 0; i < m; i++) A[i] = A[i] && B[i];
            for (int64_t i = 0; i < m; i++) *(uint8_t *)(o + i * s[0]) = A[i];
            break;
        }
        }
    }
}

/* How each binary op maps onto (kind, a, b): in0 = tensor input, the scalar
 * "other" arg (when there is one) becomes a 0-d operand; rsub swaps them. */
static rgpu_status op_binary(const rgpu_exec *e, char *err, size_t errlen)
{
    op_binary_args bin;
    FORWARD_IF_ERROR(rgpu_op_binary_check(e, &bin, err, errlen));
    int other_arg = bin.other_arg;
    rgpu_view *out = e->out[0];
    bin_ctx c;
    memset(&c, 0, sizeof c);
    c.kind = bin.kind;
    c.ct = bin.ct;
    c.alpha_one = bin.alpha_one;
    c.alpha_f = bin.alpha_f;
    c.alpha_d = bin.alpha_d;
    c.alpha_i = bin.alpha_i;
    c.alpha_b = bin.alpha_b;

    op_operand ops[2];
    uint64_t scalar_buf = 0;   /* the scalar, already in the compute type */
    ops[0] = (op_operand){ e->in[0], NULL, 0 };
    if (other_arg >= 0) {
        int sdt = op_ct_dtype(c.ct);
        rgpu_op_scalar_to(&e->args[other_arg], sdt, &scalar_buf);
        ops[1] = (op_operand){ NULL, &scalar_buf, sdt };
    } else {
        ops[1] = (op_operand){ e->in[1], NULL, 0 };
    }
    if (bin.swap) { op_operand t = ops[0]; ops[0] = ops[1]; ops[1] = t; }

    op_iter it;
    FORWARD_IF_ERROR(rgpu_op_iter_init(&it, out, ops, 2, e->op, err, errlen));
    c.dt[0] = it.dtype[0]; c.dt[1] = it.dtype[1]; c.dt[2] = it.dtype[2];
    rgpu_cpu_iter_run(&it, bin_row, &c, 2 * CPU_ITER_GRAIN);
    return RGPU_OK;
}

/* ---------------------------------------------------------------------------
 * Dispatch: the core ops here, the families' through the generated switch */

static rgpu_status cpu_core_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, false, err, errlen));
    switch (e->op) {
    case RGPU_OP_FULL: return op_full(e, err, errlen);
    case RGPU_OP_ARANGE: return op_arange(e, err, errlen);
    case RGPU_OP_COPY: return op_copy(e, err, errlen);
    case RGPU_OP_SUM: return rgpu_cpu_reduce_sum_mean(e, false, err, errlen);
    case RGPU_OP_MEAN: return rgpu_cpu_reduce_sum_mean(e, true, err, errlen);
    default: return op_binary(e, err, errlen);   /* ARITH */
    }
}

static rgpu_status cpu_unsupported(const rgpu_exec *e, char *err, size_t errlen)
{
    RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cpu backend: unsupported op %s", rgpu_op_name(e->op));
}

#include "cpu/op_dispatch_cpu.inc"

bool rgpu_cpu_supports(int op)
{
    return op >= 0 && op < RGPU_OP_COUNT && cpu_dispatch_supports(op);
}

rgpu_status rgpu_cpu_exec(const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_exec_begin(e, "cpu", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_check_complex(e, err, errlen));
    return cpu_dispatch(e, err, errlen);
}
