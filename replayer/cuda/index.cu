// index.cu — the CUDA index family: dispatch, the host helpers the family
// shares, and the gather/scatter/index kernels (embedding and its backward,
// gather, scatter, scatter_add, scatter_reduce, index_select, index_add, index.Tensor,
// index_put). cat/pad/nonzero/masked_select/unique live in index_data.cu,
// the Philox random ops and dropout in random.cu.
//
// Semantics, checks and messages are those of replayer/cpu/cpu_index.c.
// Indices: every index is validated before anything is written: a check
// kernel records the first bad position (integer atomicMin), the host reads
// it back (one stream sync) and fails with the CPU's message.
//
// Determinism without float atomics: every accumulation runs in a fixed
// order, the CPU's (row-major over the index), so results are bit-identical
// to the CPU reference, not only run to run:
//   - embedding_dense_backward, index_add, index_put: the indices (or the
//     index_put target offsets) are grouped by destination with a stable
//     sort: on the device with a session's device error word (a counting
//     sort in slices for the first two, group_on_device; a merge sort of the
//     target offsets for index_put, index_put_dev), else on the host
//     (counting sort, or qsort on (key, position) for sparse keys, copied
//     there and back: host waits); one thread per (destination, inner element)
//     then walks its group in ascending position, accumulating in a register
//     with the CPU's per-add rounding (or f32 accumulation on the paths
//     where the CPU uses one).
//   - scatter / scatter_add (reduce add/multiply): one thread per index line
//     (all coordinates but `dim` fixed) walks the line in order; lines write
//     disjoint destinations. f16/bf16 accumulate in an f32 scratch as the
//     CPU's facc. A scatter whose index has few, long lines (a 1-d index)
//     therefore runs on few threads: correct, slow for huge 1-d scatters.
#include "index.cuh"
#include "op/sort.h"

#include <type_traits>

namespace rgpu_ix {

// ---------------------------------------------------------------------------
// Kernels of the shared host helpers

// bad: a scratch slot (seq 0) or the session's device error word (rgpu_dev_flag)
__global__ void k_find_bad(ix_walk w, const char *data, int dt, long long hi, long long n, unsigned long long *bad,
                           unsigned long long seq)
{
    IX_FOR(i, n) {
        long long off[IX_NW];
        ix_walk_at(w, i, off);
        long long v = ix_load_index(data + off[0], dt);
        if (v < 0 || v >= hi) rgpu_dev_flag(bad, seq, (unsigned long long)i);
    }
}

// The word's fields for check s.seq when it failed: the first bad index's value.
__global__ void k_find_bad_finish(rgpu_dev_word *wd, rgpu_dev_site s, ix_walk w, const char *data, int dt)
{
    if (!rgpu_dev_mine(wd, s)) return;
    long long off[IX_NW];
    ix_walk_at(w, (long long)wd->pos, off);
    rgpu_dev_finish(wd, s, ix_load_index(data + off[0], dt));
}

// set 0: dst, set 1: src
__global__ void k_copy(ix_walk w, char *d, int ddt, int desz, const char *s, int sdt, long long n)
{
    IX_FOR(i, n) {
        long long off[IX_NW];
        ix_walk_at(w, i, off);
        op_elem_convert(d + off[0], ddt, s + off[1], sdt);
    }
}

// Same dtype: ESZ bytes as one typed load and store (two for 16), no
// conversion code (index_select/gather/embedding copies, uploads, downloads).
template <int ESZ> __global__ void k_copy_same(ix_walk w, char *d, const char *s, long long n)
{
    IX_FOR(i, n) {
        long long off[IX_NW];
        ix_walk_at(w, i, off);
        ix_copy_elem<ESZ>(d + off[0], s + off[1]);
    }
}

// Stride set 0 of w (in d, dtype ddt) from set 1 (in s, dtype sdt): the
// same-dtype kernel when the dtypes agree, else k_copy's conversion.
static void ix_launch_copy(rgpu_cuda_ctx *c, const ix_walk &w, char *d, int ddt, const char *s, int sdt, long long n)
{
    const unsigned nb = ix_blocks(n);
    if (ddt == sdt) {
        switch (rgpu_dtype_size(ddt)) {
        case 1: k_copy_same<1><<<nb, IX_THREADS, 0, c->stream>>>(w, d, s, n); return;
        case 2: k_copy_same<2><<<nb, IX_THREADS, 0, c->stream>>>(w, d, s, n); return;
        case 4: k_copy_same<4><<<nb, IX_THREADS, 0, c->stream>>>(w, d, s, n); return;
        case 8: k_copy_same<8><<<nb, IX_THREADS, 0, c->stream>>>(w, d, s, n); return;
        case 16: k_copy_same<16><<<nb, IX_THREADS, 0, c->stream>>>(w, d, s, n); return;
        default: break;
        }
    }
    k_copy<<<nb, IX_THREADS, 0, c->stream>>>(w, d, ddt, (int)rgpu_dtype_size(ddt), s, sdt, n);
}

__global__ void k_fill(ix_walk w, char *d, int esz, uint64_t bits, uint64_t bits_hi, long long n)
{
    IX_FOR(i, n) {
        long long off[IX_NW];
        ix_walk_at(w, i, off);
        uint64_t v[2] = { bits, bits_hi };   /* up to 16 bytes (complex128) */
        op_elem_copy(d + off[0], (const char *)v, esz);
    }
}

// Row-major contiguous byte strides of w's shape into stride set k.
static void walk_contig(ix_walk *w, int k, long long esz)
{
    long long s = esz;
    for (int d = w->nd - 1; d >= 0; d--) { w->st[k][d] = s; s *= w->sz[d]; }
}

// ---------------------------------------------------------------------------
// Shared host helpers (index.cuh)

rgpu_status ix_check_index(rgpu_cuda_ctx *c, const rgpu_exec *e, const char *name, int dim, const rgpu_view *ix,
                           int nd, const int64_t *sizes, int64_t hi, char *err, size_t errlen)
{
    ix_walk w;
    ix_walk_init(&w, nd, sizes);
    ix_walk_strides(&w, 0, ix);
    long long n = ix_walk_numel(&w);
    if (n <= 0) return RGPU_OK;
    const char *data = (const char *)ix->data;
    rgpu_dev_word *wd = rgpu_cuda_dev_word(c, e);
    if (wd) {   // on the device: reported at the session's next wait
        k_find_bad<<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(w, data, ix->dtype, hi, n, (unsigned long long *)wd,
                                                               e->dev_seq);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        k_find_bad_finish<<<1, 1, 0, c->stream>>>(wd, rgpu_cuda_dev_site(e, RGPU_DEVERR_INDEX, name, dim, hi), w, data,
                                                  ix->dtype);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        return RGPU_OK;
    }
    RGPU_CUDA_NEEDS_HOST(c, "an index bounds check", err, errlen);
    unsigned long long pos;
    FORWARD_IF_ERROR(ix_first_flagged(c, "the index check", [&](unsigned long long *bad) {
        k_find_bad<<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(w, data, ix->dtype, hi, n, bad, 0);
    }, &pos, err, errlen));
    if (pos == ~0ull) return RGPU_OK;
    const char *p = data + ix_host_offset(w.nd, w.sz, w.st[0], (long long)pos);
    int64_t v;
    if (ix->dtype == RGPU_I32) {
        int32_t v32;
        RGPU_CUDA_TRY(ix_read_back(c, &v32, p, sizeof v32), err, errlen);
        v = v32;
    } else {
        RGPU_CUDA_TRY(ix_read_back(c, &v, p, sizeof v), err, errlen);
    }
    RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: index %lld is out of bounds for dimension %d with size %lld", name, (long long)v,
                 dim, (long long)hi);
}

rgpu_status ix_copy_view(rgpu_cuda_ctx *c, const rgpu_view *dst, const rgpu_view *src, char *err, size_t errlen)
{
    ix_walk w;
    ix_walk_init(&w, dst->ndim, dst->sizes);
    ix_walk_strides(&w, 0, dst);
    ix_walk_strides(&w, 1, src);
    long long n = ix_walk_numel(&w);
    if (n <= 0) return RGPU_OK;
    ix_launch_copy(c, w, (char *)dst->data, dst->dtype, (const char *)src->data, src->dtype, n);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

rgpu_status ix_fill_view(rgpu_cuda_ctx *c, const rgpu_view *dst, const void *val, char *err, size_t errlen)
{
    ix_walk w;
    ix_walk_init(&w, dst->ndim, dst->sizes);
    ix_walk_strides(&w, 0, dst);
    long long n = ix_walk_numel(&w);
    if (n <= 0) return RGPU_OK;
    int esz = (int)rgpu_dtype_size(dst->dtype);
    uint64_t bits[2] = { 0, 0 };
    memcpy(bits, val, (size_t)esz);
    k_fill<<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(w, (char *)dst->data, esz, bits[0], bits[1], n);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// v's elements from (upload) or to a contiguous row-major host buffer,
// through a device staging buffer of the same layout; waits for the copy.
static rgpu_status stage_view(rgpu_cuda_ctx *c, const rgpu_view *v, void *host, bool upload, char *err,
                              size_t errlen)
{
    // k_copy writes stride set 0 from set 1: the view is the destination of
    // an upload and the source of a download, the staging buffer the other
    const int kv = upload ? 0 : 1;
    ix_walk w;
    ix_walk_init(&w, v->ndim, v->sizes);
    ix_walk_strides(&w, kv, v);
    long long n = ix_walk_numel(&w);
    if (n <= 0) return RGPU_OK;
    int esz = (int)rgpu_dtype_size(v->dtype);
    walk_contig(&w, 1 - kv, esz);
    size_t nbytes = (size_t)n * (size_t)esz;
    RGPU_CUDA_NEEDS_HOST(c, upload ? "an upload from the host" : "a read-back to the host", err, errlen);
    ix_scratch s(c);
    IX_SCRATCH(s, tmp, char *, nbytes, upload ? "an upload" : "a download");
    if (upload) RGPU_CUDA_TRY(cudaMemcpyAsync(tmp, host, nbytes, cudaMemcpyHostToDevice, c->stream), err, errlen);
    char *dst = upload ? (char *)v->data : tmp;
    const char *src = upload ? tmp : (const char *)v->data;
    ix_launch_copy(c, w, dst, v->dtype, src, v->dtype, n);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    if (!upload) RGPU_CUDA_TRY(cudaMemcpyAsync(host, tmp, nbytes, cudaMemcpyDeviceToHost, c->stream), err, errlen);
    RGPU_CUDA_TRY(rgpu_cuda_stream_wait(c->stream), err, errlen);
    return RGPU_OK;
}

rgpu_status ix_upload_view(rgpu_cuda_ctx *c, const rgpu_view *dst, const void *host, char *err, size_t errlen)
{
    return stage_view(c, dst, (void *)host, true, err, errlen);
}

rgpu_status ix_download_view(rgpu_cuda_ctx *c, const rgpu_view *v, void *host, char *err, size_t errlen)
{
    return stage_view(c, v, host, false, err, errlen);
}

// ---------------------------------------------------------------------------
// Checks: cpu_index.h's rgpu_op_index_check_out_shape, _check_same_dtype,
// _check_index_dtype, _wrap_dim, _nonempty_sizes and _bstride, plus these.

static rgpu_status copy_self_into_out(rgpu_cuda_ctx *c, const rgpu_exec *e, rgpu_view *out, const rgpu_view *self,
                                      char *err, size_t errlen)
{
    bool copy;
    FORWARD_IF_ERROR(rgpu_op_index_self_into_out(e, out, self, &copy, err, errlen));
    return copy ? ix_copy_view(c, out, self, err, errlen) : RGPU_OK;
}

// The index out-of-range message of the family.
static rgpu_status bad_index(const rgpu_exec *e, const char *name, int64_t v, int dim, int64_t size,
                             char *err, size_t errlen)
{
    (void)e;
    RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: index %lld is out of bounds for dimension %d with size %lld",
             name, (long long)v, dim, (long long)size);
}

// ---------------------------------------------------------------------------
// Destination groups (embedding backward, index_add, index_put).
//
// keys[0..n) (int64 destinations, in the CPU's processing order) are grouped
// stably: group g has key gkey[g] and the positions ord[start[g]..start[g+1])
// in ascending order. A counting sort when the key range is small, else
// qsort on (key, position), which is a total order: both are deterministic.

struct ix_kp { int64_t key, pos; };

static int kp_cmp(const void *pa, const void *pb)
{
    const ix_kp *a = (const ix_kp *)pa, *b = (const ix_kp *)pb;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->pos < b->pos ? -1 : a->pos > b->pos;
}

struct ix_grouping {
    int64_t ng;
    int64_t *gkey;    // ng
    int64_t *start;   // ng + 1
    int64_t *ord;     // n positions
    ix_grouping() : ng(0), gkey(NULL), start(NULL), ord(NULL) {}
    ~ix_grouping() { free(gkey); free(start); free(ord); }
    ix_grouping(const ix_grouping &) = delete;
    ix_grouping &operator=(const ix_grouping &) = delete;
};

// Positions with skip[pos] set (may be NULL) are left out.
static bool group_keys(ix_grouping *g, const int64_t *keys, const uint8_t *skip, int64_t n)
{
    int64_t m = 0, lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t i = 0; i < n; i++) {
        if (skip && skip[i]) continue;
        m++;
        if (keys[i] < lo) lo = keys[i];
        if (keys[i] > hi) hi = keys[i];
    }
    g->ord = (int64_t *)malloc((size_t)(m > 0 ? m : 1) * sizeof(int64_t));
    if (!g->ord) return false;
    if (m == 0) {
        g->gkey = (int64_t *)malloc(sizeof(int64_t));
        g->start = (int64_t *)calloc(1, sizeof(int64_t));
        g->ng = 0;
        return g->gkey && g->start;
    }
    uint64_t range = (uint64_t)hi - (uint64_t)lo + 1u;
    if (range != 0 && range <= (uint64_t)(4 * m + 65536)) {   // counting sort
        int64_t *cnt = (int64_t *)calloc((size_t)range + 1, sizeof(int64_t));
        if (!cnt) return false;
        for (int64_t i = 0; i < n; i++)
            if (!(skip && skip[i])) cnt[keys[i] - lo + 1]++;
        int64_t ng = 0;
        for (uint64_t k = 1; k <= range; k++) ng += cnt[k] > 0;
        g->gkey = (int64_t *)malloc((size_t)(ng > 0 ? ng : 1) * sizeof(int64_t));
        g->start = (int64_t *)malloc((size_t)(ng + 1) * sizeof(int64_t));
        if (!g->gkey || !g->start) { free(cnt); return false; }
        int64_t gi = 0;
        for (uint64_t k = 1; k <= range; k++) {
            if (cnt[k] > 0) g->gkey[gi++] = lo + (int64_t)(k - 1);
            cnt[k] += cnt[k - 1];   // cnt[k] = first slot of key lo + k
        }
        gi = 0;
        for (uint64_t k = 0; k < range; k++)
            if (cnt[k + 1] > cnt[k]) g->start[gi++] = cnt[k];
        g->start[gi] = m;
        for (int64_t i = 0; i < n; i++)
            if (!(skip && skip[i])) g->ord[cnt[keys[i] - lo]++] = i;
        g->ng = ng;
        free(cnt);
        return true;
    }
    ix_kp *kp = (ix_kp *)malloc((size_t)m * sizeof *kp);
    if (!kp) return false;
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(skip && skip[i])) { kp[j].key = keys[i]; kp[j].pos = i; j++; }
    qsort(kp, (size_t)m, sizeof *kp, kp_cmp);
    int64_t ng = 0;
    for (int64_t i = 0; i < m; i++) ng += i == 0 || kp[i].key != kp[i - 1].key;
    g->gkey = (int64_t *)malloc((size_t)ng * sizeof(int64_t));
    g->start = (int64_t *)malloc((size_t)(ng + 1) * sizeof(int64_t));
    if (!g->gkey || !g->start) { free(kp); return false; }
    int64_t gi = 0;
    for (int64_t i = 0; i < m; i++) {
        if (i == 0 || kp[i].key != kp[i - 1].key) { g->gkey[gi] = kp[i].key; g->start[gi] = i; gi++; }
        g->ord[i] = kp[i].pos;
    }
    g->start[ng] = m;
    g->ng = ng;
    free(kp);
    return true;
}

// Device form: byte offset of each group's destination in out, group
// starts, and per entry the byte offset of its source slice.
struct ix_groups_dev {
    const long long *target;   // ng
    const long long *start;    // ng + 1
    const long long *list;     // m
    long long ng;
    const long long *dng;      // NULL, or the group count in device memory (ng: at least as many)
};

// One thread per (group, inner element): walk the group in order.
// Inner walker: set 0 = out, set 1 = src. by_freq: alpha = 1/group size
// (embedding_dense_backward's scale_grad_by_freq, as the CPU sets it).
// T: the arithmetic (float: float32/float16/bfloat16, double: float64,
// bool, uint64_t: the integers wrapping), one per instantiation.
template <typename T>
__global__ void k_grouped(ix_groups_dev g, ix_walk w, long long ninner, char *out, const char *src, int dt,
                          int mode, ix_alpha a, int f32acc, int by_freq)
{
    const long long ng = g.dng ? *g.dng : g.ng;   // g.ng: the launch's bound
    IX_FOR(t, g.ng * ninner) {
        long long gi = t / ninner, u = t - gi * ninner;
        if (gi >= ng) continue;
        long long off[IX_NW];
        ix_walk_at(w, u, off);
        char *d = out + g.target[gi] + off[0];
        const char *sb = src + off[1];
        long long s0 = g.start[gi], s1 = g.start[gi + 1];
        if (mode == OP_IDX_ASSIGN) {   // the last write wins
            op_elem_copy(d, sb + g.list[s1 - 1], op_dtype_esize(dt));
            continue;
        }
        ix_alpha al = a;
        if (by_freq) {
            al.one = s1 - s0 == 1;
            al.fused = 1;
            if constexpr (std::is_same<T, double>::value) {
                al.d = 1.0 / (double)(s1 - s0);
            } else {
                // 1/n correctly rounded to float, as (float)(1.0 / n) for n < 2^24
                al.f = op_round_to(dt, 1.0f / (float)(s1 - s0));
                al.round_prod = dt == RGPU_F16 || dt == RGPU_BF16;
            }
        }
        if constexpr (std::is_same<T, float>::value) {
            float x = rf_ld<float>(d, 0, dt);
            if (f32acc) {
#pragma unroll 4
                for (long long s = s0; s < s1; s++) x = __fadd_rn(x, rf_ld<float>(sb + g.list[s], 0, dt));
            } else {
#pragma unroll 4
                for (long long s = s0; s < s1; s++)
                    x = op_round_to(dt, ix_step_f32(x, rf_ld<float>(sb + g.list[s], 0, dt), dt, OP_IDX_ADD, al));
            }
            rf_st(d, 0, dt, x);
        } else if constexpr (std::is_same<T, double>::value) {
            double x = *(const double *)d;
#pragma unroll 4
            for (long long s = s0; s < s1; s++) x = ix_step_f64(x, *(const double *)(sb + g.list[s]), OP_IDX_ADD, al);
            *(double *)d = x;
        } else if constexpr (std::is_same<T, bool>::value) {
            bool x = *(const uint8_t *)d != 0;
            for (long long s = s0; s < s1; s++) x = x || (al.b && *(const uint8_t *)(sb + g.list[s]) != 0);
            *(uint8_t *)d = x;
        } else {   // integers wrap; keeping 64 bits and narrowing at the end is the same
            uint64_t x = rf_ld_int(d, 0, dt);
            for (long long s = s0; s < s1; s++) x += al.i * rf_ld_int(sb + g.list[s], 0, dt);
            rf_st_int(d, 0, dt, x);
        }
    }
}

// k_grouped over gd (gd.ng groups at most), in dt's arithmetic.
static rgpu_status launch_grouped(rgpu_cuda_ctx *c, const ix_groups_dev &gd, const ix_walk *inner, long long ninner,
                                  char *out, const char *src, int dt, int mode, ix_alpha a, bool f32acc, bool by_freq,
                                  char *err, size_t errlen)
{
    const unsigned nb = ix_blocks(gd.ng * ninner);
    if (dt == RGPU_F32 || dt == RGPU_F16 || dt == RGPU_BF16)
        k_grouped<float><<<nb, IX_THREADS, 0, c->stream>>>(gd, *inner, ninner, out, src, dt, mode, a, f32acc, by_freq);
    else if (dt == RGPU_F64)
        k_grouped<double><<<nb, IX_THREADS, 0, c->stream>>>(gd, *inner, ninner, out, src, dt, mode, a, f32acc, by_freq);
    else if (dt == RGPU_BOOL)
        k_grouped<bool><<<nb, IX_THREADS, 0, c->stream>>>(gd, *inner, ninner, out, src, dt, mode, a, f32acc, by_freq);
    else   // the integers; complex only assigned (op_elem_copy)
        k_grouped<uint64_t><<<nb, IX_THREADS, 0, c->stream>>>(gd, *inner, ninner, out, src, dt, mode, a, f32acc, by_freq);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// Uploads a grouping (targets = gkey * tscale, list = srcoff[ord]) and runs
// k_grouped over it. srcoff may be NULL: list = ord * sscale.
static rgpu_status run_groups(rgpu_cuda_ctx *c, const rgpu_exec *e, const ix_grouping *g, int64_t tscale,
                              const int64_t *srcoff, int64_t sscale, const ix_walk *inner, char *out,
                              const char *src, int dt, int mode, ix_alpha a, bool f32acc, bool by_freq,
                              char *err, size_t errlen)
{
    if (g->ng == 0) return RGPU_OK;
    if (mode != OP_IDX_ASSIGN && (dt == RGPU_C64 || dt == RGPU_C128 || dt == RGPU_C32))   // k_grouped sums no complex
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: the cuda backend accumulates no %s elements here", rgpu_op_name(e->op),
                     rgpu_dtype_name(dt));
    long long ninner = ix_walk_numel(inner);
    if (ninner <= 0) return RGPU_OK;
    int64_t m = g->start[g->ng];
    size_t nwords = (size_t)(g->ng + g->ng + 1 + m);
    RGPU_CUDA_NEEDS_HOST(c, "index groups from the host", err, errlen);
    ix_host h;
    long long *hb = (long long *)h.get(nwords * sizeof(long long));
    if (!hb) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lld index groups", rgpu_op_name(e->op), (long long)g->ng);
    long long *ht = hb, *hs = hb + g->ng, *hl = hb + 2 * g->ng + 1;
    for (int64_t i = 0; i < g->ng; i++) ht[i] = g->gkey[i] * tscale;
    for (int64_t i = 0; i <= g->ng; i++) hs[i] = g->start[i];
    for (int64_t i = 0; i < m; i++) hl[i] = srcoff ? srcoff[g->ord[i]] : g->ord[i] * sscale;
    ix_scratch s(c);
    IX_SCRATCH(s, db, long long *, nwords * sizeof(long long), "index groups");
    RGPU_CUDA_TRY(cudaMemcpyAsync(db, hb, nwords * sizeof(long long), cudaMemcpyHostToDevice, c->stream), err, errlen);
    const ix_groups_dev gd = { db, db + g->ng, db + 2 * g->ng + 1, g->ng, NULL };
    FORWARD_IF_ERROR(launch_grouped(c, gd, inner, ninner, out, src, dt, mode, a, f32acc, by_freq, err, errlen));
    RGPU_CUDA_TRY(rgpu_cuda_stream_wait(c->stream), err, errlen);   // hb is pageable host memory
    return RGPU_OK;
}

// The index (0-d or 1-d, or any when any_shape) copied to the host as int64.
static rgpu_status download_index(rgpu_cuda_ctx *c, const rgpu_exec *e, const rgpu_view *ix, ix_host *h,
                                  int64_t **out, char *err, size_t errlen)
{
    int64_t n = rgpu_op_numel(ix);
    size_t esz = rgpu_dtype_size(ix->dtype);
    char *raw = (char *)malloc((size_t)(n > 0 ? n : 1) * esz);
    int64_t *v = (int64_t *)h->get((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
    if (!raw || !v) {
        free(raw);
        RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lld indices", rgpu_op_name(e->op), (long long)n);
    }
    rgpu_status st = ix_download_view(c, ix, raw, err, errlen);
    if (st == RGPU_OK)
        for (int64_t i = 0; i < n; i++) v[i] = op_idx_load_index(raw + (size_t)i * esz, ix->dtype);
    free(raw);
    *out = v;
    return st;
}

// ---------------------------------------------------------------------------
// EMBEDDING: weight (V, D), indices (*) -> out (*, D) = weight[indices].

template <typename T>
__global__ void k_embedding(const rgpu_dev_word *fail, ix_walk w, const char *ix, int idt, long long nrows,
                            const char *wt, long long ws0, long long ws1, char *out, long long os, long long D)
{
    if (rgpu_dev_failed(fail)) return;
    for (long long r = blockIdx.x; r < nrows; r += gridDim.x) {
        long long off[IX_NW];
        ix_walk_at(w, r, off);
        long long v = ix_load_index(ix + off[0], idt);
        const char *src = wt + v * ws0;
        char *dst = out + off[1];
        for (long long j = threadIdx.x; j < D; j += blockDim.x) *(T *)(dst + j * os) = *(const T *)(src + j * ws1);
    }
}

static unsigned row_threads(long long D)
{
    if (D >= IX_THREADS) return IX_THREADS;
    long long t = (D + 31) / 32 * 32;
    return (unsigned)(t < 32 ? 32 : t);
}

static rgpu_status op_embedding(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_embedding_check(e, err, errlen));
    const rgpu_view *wt = e->in[0], *ix = e->in[1];
    rgpu_view *out = e->out[0];
    int64_t n = rgpu_op_numel(ix);
    if (n == 0) return RGPU_OK;

    int64_t V = wt->sizes[0], D = wt->sizes[1];
    FORWARD_IF_ERROR(ix_check_index(c, e, "embedding", 0, ix, ix->ndim, ix->sizes, V, err, errlen));
    if (D == 0) return RGPU_OK;

    ix_walk w;
    ix_walk_init(&w, ix->ndim, ix->sizes);
    ix_walk_strides(&w, 0, ix);
    ix_walk_strides(&w, 1, out);
    unsigned blocks = (unsigned)(n < IX_MAX_BLOCKS ? n : IX_MAX_BLOCKS), th = row_threads(D);
    const char *wp = (const char *)wt->data, *ip = (const char *)ix->data;
    const rgpu_dev_word *fail = rgpu_cuda_dev_word(c, e);
    char *op = (char *)out->data;
    int64_t ws0 = rgpu_op_index_bstride(wt, 0), ws1 = rgpu_op_index_bstride(wt, 1), os = rgpu_op_index_bstride(out, ix->ndim);
    switch (rgpu_dtype_size(wt->dtype)) {
    case 1: k_embedding<uint8_t><<<blocks, th, 0, c->stream>>>(fail, w, ip, ix->dtype, n, wp, ws0, ws1, op, os, D); break;
    case 2: k_embedding<uint16_t><<<blocks, th, 0, c->stream>>>(fail, w, ip, ix->dtype, n, wp, ws0, ws1, op, os, D); break;
    case 4: k_embedding<uint32_t><<<blocks, th, 0, c->stream>>>(fail, w, ip, ix->dtype, n, wp, ws0, ws1, op, os, D); break;
    default: k_embedding<uint64_t><<<blocks, th, 0, c->stream>>>(fail, w, ip, ix->dtype, n, wp, ws0, ws1, op, os, D); break;
    }
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// EMBEDDING_BACKWARD: grad (*, D), indices (*) -> out (num_weights, D);
// out[k] = sum over positions i (ascending) with indices[i] == k != padding_idx
// of grad[i] (* 1/count(k) with scale_grad_by_freq), per-add rounding as the CPU.

// Grouping on the device (with a session's device error word: embedding
// backward, index_add): the same groups as group_keys, by a stable counting
// sort in G slices of the positions. Slice t (one thread) counts its indices
// per key (k_group_slices, count pass), each key's counts become slice
// offsets (k_group_offsets), one block scans the keys into group starts
// (k_group_starts), and slice t lists its positions, ascending, at its
// offsets (k_group_slices, place pass): each group's positions in ascending
// order, so k_grouped adds in the CPU's order. Integers only: no atomics, the
// same groups whatever the thread order. A bad index is flagged in the word
// (its first position, as the CPU's check) and left out.

// Slice t of G: positions [n t / G, n (t + 1) / G).
__device__ __forceinline__ void group_slice(long long n, int G, int t, long long *i0, long long *i1)
{
    *i0 = n * t / G;
    *i1 = n * (t + 1) / G;
}

// Slice t walks its positions in order (one thread). Count pass (first
// NULL): cnt[t * nw + k] = its indices equal to k (cnt zeroed), an index equal
// to pad (has_pad) left out, one outside [0, nw) flagged. Place pass: each
// position's source offset (walk set 1) listed at its key's next slot,
// list[first[k] + cnt[t * nw + k]++].
__global__ void k_group_slices(ix_walk w, const char *ix, int idt, long long n, long long nw, int has_pad,
                               long long pad, int G, unsigned *cnt, unsigned long long *bad, unsigned long long seq,
                               const long long *first, long long *list)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= G) return;
    long long i0, i1;
    group_slice(n, G, t, &i0, &i1);
    unsigned *ct = cnt + (size_t)t * (size_t)nw;
    for (long long i = i0; i < i1; i++) {
        long long off[IX_NW];
        ix_walk_at(w, i, off);
        long long v = ix_load_index(ix + off[0], idt);
        if (has_pad && v == pad) continue;
        if (v < 0 || v >= nw) {
            if (!first) rgpu_dev_flag(bad, seq, (unsigned long long)i);
            continue;
        }
        if (first) list[first[v] + ct[v]++] = off[1];
        else ct[v]++;
    }
}

// Per key k: cnt[t][k] = the count of slices before t (exclusive), tot[k] = all.
__global__ void k_group_offsets(unsigned *cnt, long long nw, int G, long long *tot)
{
    IX_FOR(k, nw) {
        long long run = 0;
        for (int t = 0; t < G; t++) {
            unsigned c = cnt[(size_t)t * (size_t)nw + (size_t)k];
            cnt[(size_t)t * (size_t)nw + (size_t)k] = (unsigned)run;
            run += c;
        }
        tot[k] = run;
    }
}

// One block: tot[k] becomes key k's first list slot; the groups (keys with a
// position, ascending) get target = k * tscale and start; start[ng] = m, *dng = ng.
#define GROUP_SCAN_THREADS 1024
__global__ void __launch_bounds__(GROUP_SCAN_THREADS) k_group_starts(long long *tot, long long nw, long long tscale,
                                                                     long long *target, long long *start, long long *dng)
{
    __shared__ long long s_pos[GROUP_SCAN_THREADS], s_grp[GROUP_SCAN_THREADS];
    const long long seg = (nw + GROUP_SCAN_THREADS - 1) / GROUP_SCAN_THREADS;
    const long long k0 = threadIdx.x * seg, k1 = k0 + seg < nw ? k0 + seg : nw;
    long long pos = 0, grp = 0;
    for (long long k = k0; k < k1; k++) { pos += tot[k]; grp += tot[k] > 0; }
    s_pos[threadIdx.x] = pos;
    s_grp[threadIdx.x] = grp;
    __syncthreads();
    if (threadIdx.x == 0) {   // exclusive, in thread order
        long long p = 0, q = 0;
        for (int i = 0; i < GROUP_SCAN_THREADS; i++) {
            long long a = s_pos[i], b = s_grp[i];
            s_pos[i] = p; s_grp[i] = q;
            p += a; q += b;
        }
        start[q] = p;
        *dng = q;
    }
    __syncthreads();
    pos = s_pos[threadIdx.x];
    grp = s_grp[threadIdx.x];
    for (long long k = k0; k < k1; k++) {
        long long c = tot[k];
        tot[k] = pos;
        if (c > 0) { target[grp] = k * tscale; start[grp] = pos; grp++; }
        pos += c;
    }
}

// The groups of the n keys of ix (walk w: set 0 the keys, set 1 each
// position's source offset in src) over [0, nw) on the device, then
// k_grouped: out[key * tscale + inner] (mode)= src[offset + inner]. Before
// k_grouped, prepare (may be NULL) writes out's starting values. A key
// outside [0, nw) is reported at the next wait as "<name>: index v is out of
// bounds for dimension <dim> with size <nw>" and left out.
template <class Prepare>
static rgpu_status group_on_device(rgpu_cuda_ctx *c, const rgpu_exec *e, rgpu_dev_word *wd, const ix_walk &w,
                                   const rgpu_view *ix, long long n, long long nw, bool has_pad, long long pad,
                                   const char *name, int dim, long long tscale, const ix_walk *inner, char *out,
                                   const char *src, int dt, int mode, ix_alpha a, bool f32acc, bool by_freq,
                                   Prepare prepare, char *err, size_t errlen)
{
    int G = (int)(n / 128 < 1 ? 1 : n / 128 > 64 ? 64 : n / 128);
    while (G > 1 && (long long)G * nw > ((long long)32 << 20)) G /= 2;   // at most 128 MiB of counts
    const long long ngmax = n < nw ? n : nw;
    const size_t cnt_bytes = ((size_t)G * (size_t)nw * sizeof(unsigned) + 255) & ~(size_t)255;
    const size_t words = (size_t)nw + (size_t)ngmax + (size_t)ngmax + 1 + (size_t)n + 1;
    ix_scratch s(c);
    IX_SCRATCH(s, base, char *, cnt_bytes + words * sizeof(long long), "index groups");
    unsigned *cnt = (unsigned *)base;
    long long *tot = (long long *)(base + cnt_bytes), *target = tot + nw, *start = target + ngmax,
              *list = start + ngmax + 1, *dng = list + n;
    RGPU_CUDA_TRY(cudaMemsetAsync(cnt, 0, (size_t)G * (size_t)nw * sizeof(unsigned), c->stream), err, errlen);
    const unsigned tb = 64, sb = (unsigned)((G + tb - 1) / tb);
    const char *ip = (const char *)ix->data;
    k_group_slices<<<sb, tb, 0, c->stream>>>(w, ip, ix->dtype, n, nw, has_pad, pad, G, cnt, (unsigned long long *)wd,
                                             e->dev_seq, (const long long *)NULL, (long long *)NULL);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    k_find_bad_finish<<<1, 1, 0, c->stream>>>(wd, rgpu_cuda_dev_site(e, RGPU_DEVERR_INDEX, name, dim, nw), w, ip,
                                              ix->dtype);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    k_group_offsets<<<ix_blocks(nw), IX_THREADS, 0, c->stream>>>(cnt, nw, G, tot);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    k_group_starts<<<1, GROUP_SCAN_THREADS, 0, c->stream>>>(tot, nw, tscale, target, start, dng);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    k_group_slices<<<sb, tb, 0, c->stream>>>(w, ip, ix->dtype, n, nw, has_pad, pad, G, cnt, (unsigned long long *)wd,
                                             e->dev_seq, tot, list);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    FORWARD_IF_ERROR(prepare());
    return launch_grouped(c, { target, start, list, ngmax, dng }, inner, ix_walk_numel(inner), out, src, dt, mode, a, f32acc, by_freq, err, errlen);
}

// Where the device groups apply: a word, keys and room for int32 counts, no complex sums.
static bool groups_on_device(const rgpu_dev_word *wd, long long n, long long nw, int dt)
{
    return wd && n > 0 && nw > 0 && n < ((long long)1 << 31) && dt != RGPU_C64 && dt != RGPU_C128 && dt != RGPU_C32;
}

static rgpu_status embedding_backward_dev(rgpu_cuda_ctx *c, const rgpu_exec *e, const op_index_embbw *p,
                                          rgpu_dev_word *wd, char *err, size_t errlen)
{
    const rgpu_view *g = e->in[0], *ix = e->in[1];
    rgpu_view *out = e->out[0];
    ix_walk w;
    ix_walk_init(&w, ix->ndim, ix->sizes);
    ix_walk_strides(&w, 0, ix);
    ix_walk_strides(&w, 1, g);   // g's leading dims: the positions' grad rows
    int64_t Dsz = p->D;
    ix_walk inner;
    ix_walk_init(&inner, 1, &Dsz);
    inner.st[0][0] = rgpu_op_index_bstride(out, 1);
    inner.st[1][0] = rgpu_op_index_bstride(g, g->ndim - 1);
    return group_on_device(c, e, wd, w, ix, p->n, p->nw, true, p->pad, "embedding_dense_backward", 0,
                           rgpu_op_index_bstride(out, 0), &inner, (char *)out->data, (const char *)g->data,
                           out->dtype, OP_IDX_ADD, ix_alpha_one(), false, p->by_freq, [&]() -> rgpu_status {
                               uint64_t zero[2] = { 0, 0 };
                               return ix_fill_view(c, out, zero, err, errlen);
                           }, err, errlen);
}

static rgpu_status op_embedding_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_embbw p;
    FORWARD_IF_ERROR(rgpu_op_index_embedding_backward_check(e, &p, err, errlen));
    const rgpu_view *g = e->in[0], *ix = e->in[1];
    rgpu_view *out = e->out[0];
    const char *name = "embedding_dense_backward";
    rgpu_dev_word *wd = rgpu_cuda_dev_word(c, e);
    if (p.D > 0 && groups_on_device(wd, p.n, p.nw, out->dtype)) return embedding_backward_dev(c, e, &p, wd, err, errlen);

    ix_host hk, hskip, hrow;
    int64_t *keys = NULL;
    if (p.n > 0) {   // validate before writing (row-major: the first bad index)
        FORWARD_IF_ERROR(download_index(c, e, ix, &hk, &keys, err, errlen));
        for (int64_t i = 0; i < p.n; i++)
            if (keys[i] != p.pad && (keys[i] < 0 || keys[i] >= p.nw))
                RETURN_ERROR(RGPU_ERR_BAD_ARG, "%s: index %lld is out of bounds for dimension 0 with size %lld",
                         name, (long long)keys[i], (long long)p.nw);
    }
    uint64_t zero[2] = { 0, 0 };
    FORWARD_IF_ERROR(ix_fill_view(c, out, zero, err, errlen));
    if (p.n == 0 || p.D == 0) return RGPU_OK;

    uint8_t *skip = (uint8_t *)hskip.get((size_t)p.n);
    int64_t *rowoff = (int64_t *)hrow.get((size_t)p.n * sizeof(int64_t));
    if (!skip || !rowoff) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lld indices", name, (long long)p.n);
    op_walk wg;   // grad rows in row-major order, in lockstep with the indices
    op_walk_init(&wg, g->ndim - 1, g->sizes);
    op_walk_strides(&wg, 0, g);
    for (int64_t i = 0; i < p.n; i++) {
        skip[i] = keys[i] == p.pad;
        rowoff[i] = wg.off[0];
        op_walk_next(&wg);
    }
    ix_grouping gr;
    if (!group_keys(&gr, keys, skip, p.n)) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for index groups", name);

    int64_t Dsz = p.D;
    ix_walk inner;
    ix_walk_init(&inner, 1, &Dsz);
    inner.st[0][0] = rgpu_op_index_bstride(out, 1);
    inner.st[1][0] = rgpu_op_index_bstride(g, g->ndim - 1);
    return run_groups(c, e, &gr, rgpu_op_index_bstride(out, 0), rowoff, 0, &inner, (char *)out->data, (const char *)g->data,
                      out->dtype, OP_IDX_ADD, ix_alpha_one(), false, p.by_freq, err, errlen);
}

// ---------------------------------------------------------------------------
// GATHER: out[p] = self[p with dim := index[p]].

// set 0 ix, set 1 out, set 2 self (dim stride 0)
__global__ void k_gather(const rgpu_dev_word *fail, ix_walk w, const char *ix, int idt, char *out, const char *self,
                         long long sdim, int esz, long long n)
{
    if (rgpu_dev_failed(fail)) return;
    IX_FOR(i, n) {
        long long off[IX_NW];
        ix_walk_at(w, i, off);
        long long v = ix_load_index(ix + off[0], idt);
        op_elem_copy(out + off[1], self + off[2] + v * sdim, esz);
    }
}

static rgpu_status op_gather(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_dimop p;
    FORWARD_IF_ERROR(rgpu_op_index_gather_check(e, &p, err, errlen));
    if (rgpu_op_numel(p.ix) == 0) return RGPU_OK;

    FORWARD_IF_ERROR(ix_check_index(c, e, "gather", p.dim, p.ix, p.nd, p.isz, p.ssz[p.dim], err, errlen));

    ix_walk w;
    ix_walk_init(&w, p.nd, p.isz);
    ix_walk_strides(&w, 0, p.ix);
    ix_walk_strides(&w, 1, p.out);
    ix_walk_strides(&w, 2, p.self);
    w.st[2][p.dim] = 0;
    long long n = ix_walk_numel(&w);
    k_gather<<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(rgpu_cuda_dev_word(c, e), w, (const char *)p.ix->data, p.ix->dtype, (char *)p.out->data,
                                                         (const char *)p.self->data, rgpu_op_index_bstride(p.self, p.dim),
                                                         (int)rgpu_dtype_size(p.self->dtype), n);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// SCATTER / SCATTER_ADD: out = self, then for each index position p in
// row-major order, out[p with dim := index[p]] (op)= src[p] (or the value).
// One thread per line (p's coordinates but dim fixed), walking dim in order.

// w: index shape with dim's size 1; set 0 ix, set 1 out (dim 0), set 2 src,
// set 3 out's row-major element numbers (dim 0), for the f32 accumulator.
__global__ void k_scatter_lines(const rgpu_dev_word *fail, ix_walk w, long long nlines, long long len, long long ixs, long long srcs,
                                long long odim, long long cdim, const char *ix, int idt, char *out,
                                const char *src, uint64_t value, int dt, int mode, int f32acc, float *acc,
                                uint8_t *touched)
{
    ix_alpha one;
    one.one = 1; one.round_prod = 0; one.fused = 0; one.b = 1; one.f = 1.0f; one.d = 1.0; one.i = 1;
    uint64_t val = value;
    if (rgpu_dev_failed(fail)) return;
    IX_FOR(l, nlines) {
        long long off[IX_NW];
        ix_walk_at(w, l, off);
        for (long long t = 0; t < len; t++) {
            long long v = ix_load_index(ix + off[0] + t * ixs, idt);
            const char *s = src ? src + off[2] + t * srcs : (const char *)&val;
            char *d = out + off[1] + v * odim;
            if (f32acc) {
                long long slot = off[3] + v * cdim;
                if (!touched[slot]) { acc[slot] = op_load_f32(d, dt); touched[slot] = 1; }
                float y = op_load_f32(s, dt);
                acc[slot] = mode == OP_IDX_MUL ? __fmul_rn(acc[slot], y) : __fadd_rn(acc[slot], y);
            } else {
                ix_elem_reduce(d, s, dt, mode, one);
            }
        }
    }
}

// out's element l (row-major) = acc[l] where touched.
__global__ void k_facc_flush(ix_walk w, char *out, int dt, const float *acc, const uint8_t *touched, long long n)
{
    IX_FOR(l, n) {
        if (!touched[l]) continue;
        long long off[IX_NW];
        ix_walk_at(w, l, off);
        op_store_f32(out + off[0], dt, acc[l]);
    }
}

// Every index in [0, self's size at dim) (else the CPU's error, nothing
// written), then out = self; *any: the index has elements.
static rgpu_status scatter_start(rgpu_cuda_ctx *c, const rgpu_exec *e, const op_index_dimop *p, bool *any,
                                 char *err, size_t errlen)
{
    *any = rgpu_op_numel(p->ix) > 0;
    if (*any) FORWARD_IF_ERROR(ix_check_index(c, e, p->name, p->dim, p->ix, p->nd, p->isz, p->ssz[p->dim], err, errlen));
    return copy_self_into_out(c, e, p->out, p->self, err, errlen);
}

// The line walk of the scatter kernels (index shape with dim's size 1): set 0
// ix, set 1 out (dim 0), set 2 src (when given), set 3 out's row-major
// element numbers (dim 0); cst: row-major strides of self's shape.
static void scatter_line_walk(const op_index_dimop *p, int64_t *cst, ix_walk *w)
{
    int64_t s = 1, lsz[RGPU_MAX_DIMS];
    for (int d = p->nd - 1; d >= 0; d--) { cst[d] = s; s *= p->ssz[d]; }
    for (int d = 0; d < p->nd; d++) lsz[d] = d == p->dim ? 1 : p->isz[d];
    ix_walk_init(w, p->nd, lsz);
    ix_walk_strides(w, 0, p->ix);
    ix_walk_strides(w, 1, p->out);
    w->st[1][p->dim] = 0;
    if (p->src) ix_walk_strides(w, 2, p->src);
    for (int d = 0; d < p->nd; d++) w->st[3][d] = d == p->dim ? 0 : cst[d];
}

static rgpu_status op_scatter(rgpu_cuda_ctx *c, const rgpu_exec *e, bool add_only, char *err, size_t errlen)
{
    op_index_dimop p;
    FORWARD_IF_ERROR(rgpu_op_index_scatter_check(e, add_only, &p, err, errlen));
    bool any;
    FORWARD_IF_ERROR(scatter_start(c, e, &p, &any, err, errlen));
    if (!any) return RGPU_OK;

    int dt = p.out->dtype;
    bool f32acc = (dt == RGPU_F16 || dt == RGPU_BF16) && p.reduce != OP_IDX_ASSIGN;
    long long nout = rgpu_op_numel(p.out);
    ix_scratch sacc(c);
    float *acc = NULL;
    uint8_t *touched = NULL;
    if (f32acc) {
        size_t nb = (size_t)nout * (sizeof(float) + 1);
        IX_SCRATCH(sacc, base, char *, nb, "an f32 accumulator");
        acc = (float *)base;
        touched = (uint8_t *)(base + (size_t)nout * sizeof(float));
        RGPU_CUDA_TRY(cudaMemsetAsync(touched, 0, (size_t)nout, c->stream), err, errlen);
    }
    int64_t cst[RGPU_MAX_DIMS];
    ix_walk w;
    scatter_line_walk(&p, cst, &w);
    long long nlines = ix_walk_numel(&w);
    long long ixs = rgpu_op_index_bstride(p.ix, p.dim), srcs = p.src ? rgpu_op_index_bstride(p.src, p.dim) : 0;
    k_scatter_lines<<<ix_blocks(nlines), IX_THREADS, 0, c->stream>>>(
        rgpu_cuda_dev_word(c, e), w, nlines, p.isz[p.dim], ixs, srcs, rgpu_op_index_bstride(p.out, p.dim), cst[p.dim], (const char *)p.ix->data, p.ix->dtype,
        (char *)p.out->data, p.src ? (const char *)p.src->data : NULL, p.value, dt, (int)p.reduce, f32acc, acc, touched);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    if (f32acc) {
        ix_walk wo;
        ix_walk_init(&wo, p.out->ndim, p.out->sizes);
        ix_walk_strides(&wo, 0, p.out);
        k_facc_flush<<<ix_blocks(nout), IX_THREADS, 0, c->stream>>>(wo, (char *)p.out->data, dt, acc, touched, nout);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// SCATTER_REDUCE: as SCATTER, one thread per index line walking dim in order
// (lines reach disjoint out elements), each out element reduced in an
// accumulator (op/index.h: op_sr_*), then stored by a second kernel: the
// CPU's order and arithmetic, so the same bits, no atomics.

// w: index shape with dim's size 1; set 0 ix, set 1 out (dim 0), set 2 src,
// set 3 out's row-major element numbers (dim 0).
__global__ void k_scatter_reduce_lines(const rgpu_dev_word *fail, ix_walk w, long long nlines, long long len, long long ixs, long long srcs,
                                       long long odim, long long cdim, const char *ix, int idt, const char *out,
                                       const char *src, int dt, int mode, int incl, op_sr_acc *acc, long long *cnt)
{
    if (rgpu_dev_failed(fail)) return;
    IX_FOR(l, nlines) {
        long long off[IX_NW];
        ix_walk_at(w, l, off);
        for (long long t = 0; t < len; t++) {
            long long v = ix_load_index(ix + off[0] + t * ixs, idt);
            long long slot = off[3] + v * cdim;
            if (cnt[slot]++ == 0) op_sr_start(&acc[slot], out + off[1] + v * odim, dt, mode, incl != 0);
            op_sr_combine(&acc[slot], src + off[2] + t * srcs, dt, mode);
        }
    }
}

// out's element l (row-major) from acc[l] where touched.
__global__ void k_sr_flush(ix_walk w, char *out, int dt, int mode, int incl, const op_sr_acc *acc,
                           const long long *cnt, long long n)
{
    IX_FOR(l, n) {
        if (!cnt[l]) continue;
        long long off[IX_NW];
        ix_walk_at(w, l, off);
        op_sr_finish(out + off[0], &acc[l], cnt[l], dt, mode, incl != 0);
    }
}

static rgpu_status op_scatter_reduce(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_dimop p;
    bool incl;
    FORWARD_IF_ERROR(rgpu_op_index_scatter_reduce_check(e, &p, &incl, err, errlen));
    bool any;
    FORWARD_IF_ERROR(scatter_start(c, e, &p, &any, err, errlen));
    if (!any) return RGPU_OK;

    int dt = p.out->dtype;
    long long nout = rgpu_op_numel(p.out);
    ix_scratch sacc(c);
    size_t nb = (size_t)nout * (sizeof(op_sr_acc) + sizeof(long long));
    IX_SCRATCH(sacc, base, char *, nb, "the scatter_reduce accumulators");
    op_sr_acc *acc = (op_sr_acc *)base;
    long long *cnt = (long long *)(base + (size_t)nout * sizeof(op_sr_acc));
    RGPU_CUDA_TRY(cudaMemsetAsync(cnt, 0, (size_t)nout * sizeof(long long), c->stream), err, errlen);
    int64_t cst[RGPU_MAX_DIMS];
    ix_walk w;
    scatter_line_walk(&p, cst, &w);
    long long nlines = ix_walk_numel(&w);
    k_scatter_reduce_lines<<<ix_blocks(nlines), IX_THREADS, 0, c->stream>>>(
        rgpu_cuda_dev_word(c, e), w, nlines, p.isz[p.dim], rgpu_op_index_bstride(p.ix, p.dim), rgpu_op_index_bstride(p.src, p.dim),
        rgpu_op_index_bstride(p.out, p.dim), cst[p.dim], (const char *)p.ix->data, p.ix->dtype,
        (const char *)p.out->data, (const char *)p.src->data, dt, (int)p.reduce, incl, acc, cnt);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    ix_walk wo;
    ix_walk_init(&wo, p.nd, p.ssz);
    for (int d = 0; d < p.nd; d++) wo.st[0][d] = rgpu_op_index_bstride(p.out, d);
    k_sr_flush<<<ix_blocks(nout), IX_THREADS, 0, c->stream>>>(wo, (char *)p.out->data, dt, (int)p.reduce, incl,
                                                              acc, cnt, nout);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// INDEX_SELECT: out = self with dim restricted to index (0-d/1-d).

// set 0 out, set 1 self (dim stride 0)
__global__ void k_index_select(const rgpu_dev_word *fail, ix_walk w, int dim, const char *ix, int idt, long long ixs,
                               char *out, const char *self, long long sdim, int esz, long long n)
{
    if (rgpu_dev_failed(fail)) return;
    IX_FOR(i, n) {
        long long off[IX_NW];
        long long cd = ix_walk_at_dim(w, i, off, dim);
        long long v = ix_load_index(ix + cd * ixs, idt);
        op_elem_copy(out + off[0], self + off[1] + v * sdim, esz);
    }
}

static rgpu_status op_index_select(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_dimop p;
    FORWARD_IF_ERROR(rgpu_op_index_select_check(e, &p, err, errlen));
    if (p.ix->ndim > 1)
        RETURN_ERROR(RGPU_ERR_SHAPE, "index_select: index is supposed to be a vector, got %d dims", p.ix->ndim);
    FORWARD_IF_ERROR(ix_check_index(c, e, "index_select", p.dim, p.ix, p.ix->ndim, p.ix->sizes, p.ssz[p.dim], err, errlen));
    if (rgpu_op_numel(p.out) == 0) return RGPU_OK;

    op_walk ow;
    rgpu_op_index_select_walk(&p, &ow);
    ix_walk w;
    ix_walk_init(&w, ow.nd, ow.sz);
    for (int d = 0; d < ow.nd; d++)
        for (int k = 0; k < 2; k++) w.st[k][d] = ow.st[k][d];
    long long n = ix_walk_numel(&w);
    k_index_select<<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(rgpu_cuda_dev_word(c, e), w, p.dim, (const char *)p.ix->data, p.ix->dtype, rgpu_op_index_bstride(p.ix, 0),
                                                               (char *)p.out->data, (const char *)p.self->data,
                                                               rgpu_op_index_bstride(p.self, p.dim), (int)rgpu_dtype_size(p.self->dtype), n);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// INDEX_ADD: out = self; out[.., index[i], ..] += alpha * source[.., i, ..]
// along dim, i ascending: grouped by destination index on the host.

static rgpu_status op_index_add(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_dimop p;
    FORWARD_IF_ERROR(rgpu_op_index_add_check(e, &p, err, errlen));
    int dt = p.self->dtype, dim = p.dim, nd = p.nd;
    int64_t n = rgpu_op_numel(p.ix);
    // ATen's scatter_add path (f16/bf16 accumulate in f32), see cpu_index.c
    bool f32acc = (dt == RGPU_F16 || dt == RGPU_BF16) && p.self->ndim > 1 && (dim == 0 || dim == nd - 1) &&
                  p.alpha_v == 1.0 && p.ix->dtype == RGPU_I64;
    ix_walk inner;   // every dim but `dim`
    memset(&inner, 0, sizeof inner);
    for (int d = 0; d < nd; d++) {
        if (d == dim) continue;
        inner.sz[inner.nd] = p.rsz[d];
        inner.st[0][inner.nd] = rgpu_op_index_bstride(p.out, d);
        inner.st[1][inner.nd] = rgpu_op_index_bstride(p.src, d);
        inner.nd++;
    }
    rgpu_dev_word *wd = rgpu_cuda_dev_word(c, e);
    if (rgpu_op_numel(p.src) > 0 && groups_on_device(wd, n, p.ssz[dim], dt)) {
        ix_walk w;   // the index (0-d or 1-d) and its source slices along dim
        ix_walk_init(&w, p.ix->ndim, p.ix->sizes);
        ix_walk_strides(&w, 0, p.ix);
        if (p.ix->ndim == 1) w.st[1][0] = rgpu_op_index_bstride(p.src, dim);
        return group_on_device(c, e, wd, w, p.ix, n, p.ssz[dim], false, 0, "index_add", dim,
                               rgpu_op_index_bstride(p.out, dim), &inner, (char *)p.out->data, (const char *)p.src->data,
                               dt, OP_IDX_ADD, ix_alpha_of(&p.alpha), f32acc, false,
                               [&]() { return copy_self_into_out(c, e, p.out, p.self, err, errlen); }, err, errlen);
    }
    ix_host hk;
    int64_t *iv = NULL;
    if (n > 0) {
        FORWARD_IF_ERROR(download_index(c, e, p.ix, &hk, &iv, err, errlen));
        for (int64_t i = 0; i < n; i++)
            if (iv[i] < 0 || iv[i] >= p.ssz[dim]) return bad_index(e, "index_add", iv[i], dim, p.ssz[dim], err, errlen);
    }
    FORWARD_IF_ERROR(copy_self_into_out(c, e, p.out, p.self, err, errlen));
    if (rgpu_op_numel(p.src) == 0) return RGPU_OK;
    ix_grouping gr;
    if (!group_keys(&gr, iv, NULL, n)) RETURN_ERROR(RGPU_ERR_NOMEM, "index_add: out of memory for index groups");
    return run_groups(c, e, &gr, rgpu_op_index_bstride(p.out, dim), NULL, rgpu_op_index_bstride(p.src, dim), &inner, (char *)p.out->data,
                      (const char *)p.src->data, dt, OP_IDX_ADD, ix_alpha_of(&p.alpha), f32acc, false, err, errlen);
}

// ---------------------------------------------------------------------------
// Advanced indexing geometry (index.Tensor, index_put), as cpu_index.c's
// geom_build: the shape part runs on the host; the per-B-element target
// offsets (boff) and their validation run on the device.

struct geom_dev {
    int nb, nk;
    long long bsz[RGPU_MAX_DIMS];
    struct {
        const char *data;
        int dt, k;
        long long size, ts;
        long long st[RGPU_MAX_DIMS];   // bytes over B's dims (0 where broadcast)
    } t[RGPU_MAX_DIMS];
};

// bad: per index tensor j the first bad B element (a scratch slot each, seq
// 0), or the session's device error word with position j * nbel + b (the
// first tensor with a bad index, then its first: the CPU's order). A bad
// index adds nothing to boff, which stays inside the target.
__global__ void k_geom(geom_dev g, long long nbel, long long *boff, unsigned long long *bad, unsigned long long seq)
{
    IX_FOR(b, nbel) {
        long long co[RGPU_MAX_DIMS], r = b;
        for (int d = g.nb - 1; d >= 0; d--) { co[d] = r % g.bsz[d]; r /= g.bsz[d]; }
        long long acc = 0;
        for (int j = 0; j < g.nk; j++) {
            long long off = 0;
            for (int d = 0; d < g.nb; d++) off += co[d] * g.t[j].st[d];
            long long x = ix_load_index(g.t[j].data + off, g.t[j].dt), size = g.t[j].size;
            if (x < -size || x >= size) {
                if (seq) rgpu_dev_flag(bad, seq, (unsigned long long)(j * nbel + b));
                else atomicMin(&bad[j], (unsigned long long)b);
                continue;
            }
            if (x < 0) x += size;
            acc += x * g.t[j].ts;
        }
        boff[b] = acc;
    }
}

// The word's fields for check s.seq when it failed: the bad index, its dim and size.
__global__ void k_geom_finish(rgpu_dev_word *w, rgpu_dev_site s, geom_dev g, long long nbel)
{
    if (!rgpu_dev_mine(w, s)) return;
    long long j = (long long)(w->pos / (unsigned long long)nbel), b = (long long)(w->pos % (unsigned long long)nbel), off = 0;
    for (int d = g.nb - 1; d >= 0; d--) { off += (b % g.bsz[d]) * g.t[j].st[d]; b /= g.bsz[d]; }
    s.dim = g.t[j].k;
    s.bound = g.t[j].size;
    rgpu_dev_finish(w, s, ix_load_index(g.t[j].data + off, g.t[j].dt));
}

// boff (device, nbel entries, in the scratch holder) = byte offsets into
// target of each B element; fails with the CPU's message on a bad index
// (the first index tensor with one, its first in B's row-major order): at
// the session's next wait with a device error word, else at once (waiting).
static rgpu_status geom_offsets(rgpu_cuda_ctx *c, const rgpu_exec *e, const op_index_geom *g, const rgpu_view *self,
                                const rgpu_view *target, const rgpu_view *const *idx, int nidx, ix_scratch *hold,
                                long long **boff, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    size_t nbytes = (size_t)(g->nbel > 0 ? g->nbel : 1) * sizeof(long long) + RGPU_MAX_DIMS * sizeof(unsigned long long);
    IX_SCRATCH(*hold, base, char *, nbytes, "index offsets");
    unsigned long long *bad = (unsigned long long *)base;
    *boff = (long long *)(base + RGPU_MAX_DIMS * sizeof(unsigned long long));
    if (g->nbel == 0) return RGPU_OK;
    geom_dev gd;
    memset(&gd, 0, sizeof gd);
    gd.nb = g->nb;
    for (int d = 0; d < g->nb; d++) gd.bsz[d] = g->bsz[d];
    for (int k = 0; k < nidx; k++) {
        const rgpu_view *v = idx[k];
        if (v == NULL) continue;
        int j = gd.nk++;
        gd.t[j].data = (const char *)v->data;
        gd.t[j].dt = v->dtype;
        gd.t[j].k = k;
        gd.t[j].size = self->sizes[k];
        gd.t[j].ts = rgpu_op_index_bstride(target, k);
        int lead = g->nb - v->ndim;
        int64_t esz = (int64_t)rgpu_dtype_size(v->dtype);
        for (int d = 0; d < v->ndim; d++) gd.t[j].st[lead + d] = v->sizes[d] == 1 ? 0 : v->strides[d] * esz;
    }
    rgpu_dev_word *wd = rgpu_cuda_dev_word(c, e);
    if (wd) {
        k_geom<<<ix_blocks(g->nbel), IX_THREADS, 0, c->stream>>>(gd, g->nbel, *boff, (unsigned long long *)wd, e->dev_seq);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        k_geom_finish<<<1, 1, 0, c->stream>>>(wd, rgpu_cuda_dev_site(e, RGPU_DEVERR_INDEX, name, 0, 0), gd, g->nbel);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        return RGPU_OK;
    }
    RGPU_CUDA_NEEDS_HOST(c, "an index bounds check", err, errlen);
    RGPU_CUDA_TRY(cudaMemsetAsync(bad, 0xff, RGPU_MAX_DIMS * sizeof *bad, c->stream), err, errlen);
    k_geom<<<ix_blocks(g->nbel), IX_THREADS, 0, c->stream>>>(gd, g->nbel, *boff, bad, 0ull);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    unsigned long long hbad[RGPU_MAX_DIMS];
    RGPU_CUDA_TRY(cudaMemcpyAsync(hbad, bad, sizeof hbad, cudaMemcpyDeviceToHost, c->stream), err, errlen);
    RGPU_CUDA_TRY(rgpu_cuda_stream_wait(c->stream), err, errlen);
    for (int j = 0; j < gd.nk; j++) {
        if (hbad[j] == ~0ull) continue;
        long long b = (long long)hbad[j], off = 0;
        for (int d = g->nb - 1; d >= 0; d--) { off += (b % gd.bsz[d]) * gd.t[j].st[d]; b /= gd.bsz[d]; }
        int64_t x;
        if (gd.t[j].dt == RGPU_I32) {
            int32_t v;
            RGPU_CUDA_TRY(ix_read_back(c, &v, gd.t[j].data + off, sizeof v), err, errlen);
            x = v;
        } else {
            RGPU_CUDA_TRY(ix_read_back(c, &x, gd.t[j].data + off, sizeof x), err, errlen);
        }
        return bad_index(e, name, x, gd.t[j].k, gd.t[j].size, err, errlen);
    }
    return RGPU_OK;
}

// set 0 out, set 1 self's un-indexed dims, set 2 B element number
__global__ void k_index(ix_walk w, char *out, const char *self, const long long *boff, int esz, long long n)
{
    IX_FOR(i, n) {
        long long off[IX_NW];
        ix_walk_at(w, i, off);
        op_elem_copy(out + off[0], self + off[1] + boff[off[2]], esz);
    }
}

// Walk over the result dims: set 1 = target's un-indexed dims (bytes),
// set 2 = B element number (as cpu_index.c's geom_walk).
static void geom_walk(const op_index_geom *g, ix_walk *w, const rgpu_view *target)
{
    ix_walk_init(w, g->R, g->rsz);
    int64_t bst[RGPU_MAX_DIMS], s = 1;
    for (int j = g->nb - 1; j >= 0; j--) { bst[j] = s; s *= g->bsz[j]; }
    for (int r = 0; r < g->R; r++) {
        if (g->rdim[r] >= 0) w->st[1][r] = rgpu_op_index_bstride(target, g->rdim[r]);
        else w->st[2][r] = bst[-1 - g->rdim[r]];
    }
}

static rgpu_status op_index(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io_var(e, 1, 1, true, "r", err, errlen));
    const rgpu_view *self = e->in[0];
    rgpu_view *out = e->out[0];
    FORWARD_IF_ERROR(rgpu_op_index_check_same_dtype(e, out, "out", self->dtype, err, errlen));
    op_index_geom g;
    const rgpu_view *const *idx = &e->in[1];
    int nidx = e->n_in - 1;
    FORWARD_IF_ERROR(rgpu_op_index_geom_shape(e, &g, self, idx, nidx, err, errlen));
    ix_scratch hold(c);
    long long *boff;
    FORWARD_IF_ERROR(geom_offsets(c, e, &g, self, self, idx, nidx, &hold, &boff, err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_out_shape(e, out, g.R, g.rsz, err, errlen));
    long long n = rgpu_op_numel(out);
    if (n == 0) return RGPU_OK;
    ix_walk w;
    geom_walk(&g, &w, self);
    for (int r = 0; r < g.R; r++) w.st[0][r] = rgpu_op_index_bstride(out, r);
    k_index<<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(w, (char *)out->data, (const char *)self->data, boff,
                                                        (int)rgpu_dtype_size(self->dtype), n);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// RGPU_CUDA_PUT_DEV=0: index_put groups on the host (the reference the tests compare with)
static bool put_dev_enabled()
{
    static int on = -1;
    return rgpu_cuda_env_flag(&on, "RGPU_CUDA_PUT_DEV");
}

// INDEX_PUT's groups on the device (with a session's device error word): the
// destinations boff sorted stably with their B element numbers (op/sort.h's
// merge passes, one launch each, as sort), each run's length at its head
// (k_put_runs), k_group_starts over those lengths (a group's start is its
// head's sorted position), then each group's target (its key) and each
// sorted position's value offset (k_put_list). The same groups, in the same
// ascending order within each, as group_keys on the host: no host wait.
__global__ void k_put_keys(const long long *boff, long long n, uint64_t *k, int64_t *ix)
{
    IX_FOR(i, n) { k[i] = (uint64_t)boff[i]; ix[i] = i; }
}

__global__ void k_put_merge(const uint64_t *ks, const int64_t *is, uint64_t *kd, int64_t *id, long long n, long long w)
{
    IX_FOR(i, n) op_sort_merge_at(ks, is, kd, id, n, w, i);
}

__global__ void k_put_runs(const uint64_t *k, long long n, long long *tot)
{
    IX_FOR(i, n) {
        if (i > 0 && k[i] == k[i - 1]) { tot[i] = 0; continue; }
        long long j = i + 1;
        while (j < n && k[j] == k[i]) j++;
        tot[i] = j - i;
    }
}

// vw: a walk over the B dims, set 0 = the values' strides there (bytes)
__global__ void k_put_list(const uint64_t *k, const int64_t *ix, long long n, ix_walk vw, const long long *start,
                           const long long *dng, long long *target, long long *list)
{
    const long long ng = *dng;
    IX_FOR(i, n) {
        long long off[IX_NW];
        ix_walk_at(vw, ix[i], off);
        list[i] = off[0];
        if (i < ng) target[i] = (long long)k[start[i]];
    }
}

static rgpu_status index_put_dev(rgpu_cuda_ctx *c, const op_index_geom *g, const long long *boff,
                                 const int64_t *vbst, const ix_walk *inner, char *out, const char *vals, int dt,
                                 int mode, char *err, size_t errlen)
{
    const long long n = g->nbel;
    ix_scratch s(c);
    IX_SCRATCH(s, base, char *, (size_t)(8 * n + 2) * sizeof(long long), "index_put groups");
    uint64_t *k[2] = { (uint64_t *)base, (uint64_t *)base + n };
    int64_t *ix[2] = { (int64_t *)base + 2 * n, (int64_t *)base + 3 * n };
    long long *tot = (long long *)base + 4 * n, *target = tot + n, *start = target + n, *list = start + n + 1,
              *dng = list + n;
    const unsigned nb = ix_blocks(n);
    k_put_keys<<<nb, IX_THREADS, 0, c->stream>>>(boff, n, k[0], ix[0]);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    int p = 0;
    for (long long w = 1; w < n; w *= 2, p ^= 1) {
        k_put_merge<<<nb, IX_THREADS, 0, c->stream>>>(k[p], ix[p], k[p ^ 1], ix[p ^ 1], n, w);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    k_put_runs<<<nb, IX_THREADS, 0, c->stream>>>(k[p], n, tot);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    k_group_starts<<<1, GROUP_SCAN_THREADS, 0, c->stream>>>(tot, n, 0, target, start, dng);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    ix_walk vw;
    ix_walk_init(&vw, g->nb, g->bsz);
    for (int j = 0; j < g->nb; j++) vw.st[0][j] = vbst[j];
    k_put_list<<<nb, IX_THREADS, 0, c->stream>>>(k[p], ix[p], n, vw, start, dng, target, list);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return launch_grouped(c, { target, start, list, n, dng }, inner, ix_walk_numel(inner), out, vals, dt, mode, ix_alpha_one(), false, false,
                          err, errlen);
}

// INDEX_PUT: out = self; out[idx0, ...] = values (broadcast to the result
// shape), or += with accumulate; per destination in row-major order over the
// result (the last write wins, adds in that order): grouped by boff.
static rgpu_status op_index_put(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_put_args p;
    FORWARD_IF_ERROR(rgpu_op_index_put_check(e, &p, err, errlen));
    op_index_geom g;
    FORWARD_IF_ERROR(rgpu_op_index_geom_shape(e, &g, p.self, p.idx, p.nidx, err, errlen));
    ix_scratch hold(c);
    long long *boff;
    FORWARD_IF_ERROR(geom_offsets(c, e, &g, p.self, p.out, p.idx, p.nidx, &hold, &boff, err, errlen));

    // values broadcast to the result shape: vst[r] (bytes)
    int64_t vst[RGPU_MAX_DIMS] = { 0 };
    bool ok = p.vals->ndim <= g.R;
    int lead = g.R - p.vals->ndim;
    int64_t vesz = (int64_t)rgpu_dtype_size(p.vals->dtype);
    for (int d = 0; ok && d < p.vals->ndim; d++) {
        int64_t s = p.vals->sizes[d];
        if (s == g.rsz[lead + d]) vst[lead + d] = s == 1 ? 0 : p.vals->strides[d] * vesz;
        else if (s == 1) vst[lead + d] = 0;
        else ok = false;
    }
    if (!ok) {
        rgpu_view rv;
        memset(&rv, 0, sizeof rv);
        rv.ndim = g.R;
        for (int r = 0; r < g.R; r++) rv.sizes[r] = g.rsz[r];
        char a[96], b[96];
        RETURN_ERROR(RGPU_ERR_SHAPE, "index_put: shape mismatch: value tensor of shape %s cannot be broadcast "
                 "to indexing result of shape %s", rgpu_op_index_shape_str(p.vals, a, sizeof a),
                 rgpu_op_index_shape_str(&rv, b, sizeof b));
    }
    FORWARD_IF_ERROR(copy_self_into_out(c, e, p.out, p.self, err, errlen));
    int64_t nres = 1;
    for (int r = 0; r < g.R; r++) nres *= g.rsz[r];
    if (nres == 0) return RGPU_OK;

    // each B element's value offset vB(b) over the B dims of the result (vbst),
    // the inner walk over the rest
    int64_t nbel = g.nbel;
    int64_t vbst[RGPU_MAX_DIMS] = { 0 };
    ix_walk inner;
    memset(&inner, 0, sizeof inner);
    for (int r = 0; r < g.R; r++) {
        if (g.rdim[r] < 0) { vbst[-1 - g.rdim[r]] = vst[r]; continue; }
        inner.sz[inner.nd] = g.rsz[r];
        inner.st[0][inner.nd] = rgpu_op_index_bstride(p.out, g.rdim[r]);
        inner.st[1][inner.nd] = vst[r];
        inner.nd++;
    }
    const int mode = p.acc ? OP_IDX_ADD : OP_IDX_ASSIGN;
    const bool cplx = p.dt == RGPU_C64 || p.dt == RGPU_C128 || p.dt == RGPU_C32;
    if (rgpu_cuda_dev_word(c, e) && nbel > 0 && ix_walk_numel(&inner) > 0 && !(cplx && p.acc) && put_dev_enabled())
        return index_put_dev(c, &g, boff, vbst, &inner, (char *)p.out->data, (const char *)p.vals->data, p.dt, mode,
                             err, errlen);

    // else boff to the host, grouped by destination
    RGPU_CUDA_NEEDS_HOST(c, "index_put (its offsets grouped on the host)", err, errlen);
    ix_host hb, hv;
    int64_t *hboff = (int64_t *)hb.get((size_t)nbel * sizeof(int64_t));
    int64_t *vb = (int64_t *)hv.get((size_t)nbel * sizeof(int64_t));
    if (!hboff || !vb) RETURN_ERROR(RGPU_ERR_NOMEM, "index_put: out of memory for %lld index offsets", (long long)nbel);
    RGPU_CUDA_TRY(cudaMemcpyAsync(hboff, boff, (size_t)nbel * sizeof(int64_t), cudaMemcpyDeviceToHost, c->stream),
                  err, errlen);
    RGPU_CUDA_TRY(rgpu_cuda_stream_wait(c->stream), err, errlen);
    {
        op_walk wb;
        op_walk_init(&wb, g.nb, g.bsz);
        for (int j = 0; j < g.nb; j++) wb.st[0][j] = vbst[j];
        for (int64_t b = 0; b < nbel; b++) { vb[b] = wb.off[0]; op_walk_next(&wb); }
    }
    ix_grouping gr;
    if (!group_keys(&gr, hboff, NULL, nbel)) RETURN_ERROR(RGPU_ERR_NOMEM, "index_put: out of memory for index groups");
    return run_groups(c, e, &gr, 1, vb, 0, &inner, (char *)p.out->data, (const char *)p.vals->data, p.dt,
                      mode, ix_alpha_one(), false, false, err, errlen);
}

}  // namespace rgpu_ix

// ---------------------------------------------------------------------------
// Dispatch

using namespace rgpu_ix;

extern "C" rgpu_status rgpu_cuda_index_exec(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_EMBEDDING:          return op_embedding(c, e, err, errlen);
    case RGPU_OP_EMBEDDING_BACKWARD: return op_embedding_backward(c, e, err, errlen);
    case RGPU_OP_GATHER:             return op_gather(c, e, err, errlen);
    case RGPU_OP_SCATTER:            return op_scatter(c, e, false, err, errlen);
    case RGPU_OP_SCATTER_ADD:        return op_scatter(c, e, true, err, errlen);
    case RGPU_OP_SCATTER_REDUCE:     return op_scatter_reduce(c, e, err, errlen);
    case RGPU_OP_INDEX_SELECT:       return op_index_select(c, e, err, errlen);
    case RGPU_OP_INDEX_ADD:          return op_index_add(c, e, err, errlen);
    case RGPU_OP_INDEX:              return op_index(c, e, err, errlen);
    case RGPU_OP_INDEX_PUT:          return op_index_put(c, e, err, errlen);
    case RGPU_OP_CAT:                return ix_cat(c, e, err, errlen);
    case RGPU_OP_CONSTANT_PAD_ND:    return ix_pad(c, e, err, errlen);
    case RGPU_OP_UNIFORM: case RGPU_OP_NORMAL: case RGPU_OP_BERNOULLI:
    case RGPU_OP_RANDOM: case RGPU_OP_RANDPERM:
        return ix_random(c, e, err, errlen);
    case RGPU_OP_NATIVE_DROPOUT:     return ix_dropout(c, e, err, errlen);
    case RGPU_OP_NATIVE_DROPOUT_BACKWARD: return ix_dropout_backward(c, e, err, errlen);
    case RGPU_OP_COUNT_NONZERO:      return ix_count_nonzero(c, e, err, errlen);
    case RGPU_OP_NONZERO:            return ix_nonzero(c, e, err, errlen);
    case RGPU_OP_MASKED_SELECT:      return ix_masked_select(c, e, err, errlen);
    case RGPU_OP_COUNT_UNIQUE:       return ix_unique(c, e, true, err, errlen);
    case RGPU_OP_UNIQUE:             return ix_unique(c, e, false, err, errlen);
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cuda index family: unsupported op %s", rgpu_op_name(e->op));
    }
}
