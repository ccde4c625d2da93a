// sort.cu — the sort family on the GPU (CPU reference: replayer/cpu/cpu_sort.c;
// the math is op/sort.h's OP_FN code, shared with it): sort and mode (a
// stable bottom-up merge sort of (key, index) pairs per line, one kernel
// launch per pass, one thread per element), the scans cummax / cummin /
// logcumsumexp / cumprod (one thread per line, sequential along the dim, as
// the CPU), searchsorted (one thread per value) and histc (integer atomics:
// the counts do not depend on the order) and histogram.
#include "common.cuh"
#include "convert.cuh"
#include "index.cuh"

#include "op/sort.h"

// Launch shape, grid-stride loops and scratch holders: index.cuh's.
using rgpu_ix::ix_blocks;
using rgpu_ix::ix_scratch;
#define SO_THREADS IX_THREADS
#define SO_FOR IX_FOR

struct sort_args {
    op_sort_lines L;
    long long n, is, vs, xs;   // line length, element strides of the dim
    const char *in;
    char *vals, *idx;
    int dt, esz;
    bool desc;
};

static __global__ void sort_keys_kernel(sort_args a, uint64_t *k, int64_t *ix)
{
    SO_FOR(t, a.L.total * a.n) {
        long long l = t / a.n, i = t % a.n;
        int64_t off[1];
        op_sort_line_offs(&a.L, 1, l, off);
        k[t] = op_sort_key(a.in + (off[0] + i * a.is) * a.esz, a.dt, a.desc);
        ix[t] = i;
    }
}

static __global__ void sort_pass_kernel(long long total, long long n, long long w, const uint64_t *ks, const int64_t *is,
                                 uint64_t *kd, int64_t *id)
{
    SO_FOR(t, total) {
        long long l = t / n;
        op_sort_merge_at(ks + l * n, is + l * n, kd + l * n, id + l * n, n, w, t % n);
    }
}

static __global__ void sort_write_kernel(sort_args a, const int64_t *ix)
{
    SO_FOR(t, a.L.total * a.n) {
        long long l = t / a.n, i = t % a.n;
        int64_t off[3];
        op_sort_line_offs(&a.L, 3, l, off);
        int64_t j = ix[t];
        op_elem_copy(a.vals + (off[1] + i * a.vs) * a.esz, a.in + (off[0] + j * a.is) * a.esz, a.esz);
        *(int64_t *)(a.idx + (off[2] + i * a.xs) * 8) = j;
    }
}

static __global__ void mode_write_kernel(sort_args a, const uint64_t *k, const int64_t *ix)
{
    SO_FOR(l, a.L.total) {
        int64_t off[3];
        op_sort_line_offs(&a.L, 3, l, off);
        int64_t p = op_sort_mode_pos(k + l * a.n, a.n);
        int64_t j = ix[l * a.n + p];
        op_elem_copy(a.vals + off[1] * a.esz, a.in + (off[0] + j * a.is) * a.esz, a.esz);
        *(int64_t *)(a.idx + off[2] * 8) = j;
    }
}

static rgpu_status so_sort(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    sort_args a;
    int dim;
    int64_t n;
    FORWARD_IF_ERROR(rgpu_op_sort_check(e, &dim, &n, &a.desc, &a.L, err, errlen));
    const rgpu_view *in = e->in[0];
    rgpu_view *vals = e->out[0], *idx = e->out[1];
    long long total = a.L.total * n;
    if (total == 0) return RGPU_OK;
    a.n = n;
    a.is = in->ndim ? in->strides[dim] : 0;
    a.vs = in->ndim ? vals->strides[dim] : 0;
    a.xs = in->ndim ? idx->strides[dim] : 0;
    a.in = (const char *)in->data;
    a.vals = (char *)vals->data;
    a.idx = (char *)idx->data;
    a.dt = in->dtype;
    a.esz = (int)rgpu_dtype_size(in->dtype);
    ix_scratch hold(c);
    size_t nb = (size_t)total * 16 * 2;
    hold.get(nb);
    if (hold.p == NULL)
        RETURN_ERROR(RGPU_ERR_NOMEM, "out of device memory for %s (%llu bytes)", rgpu_op_name(e->op),
                     (unsigned long long)nb);
    uint64_t *k[2] = {(uint64_t *)hold.p, (uint64_t *)hold.p + total};
    int64_t *ix[2] = {(int64_t *)((uint64_t *)hold.p + 2 * total), (int64_t *)((uint64_t *)hold.p + 3 * total)};
    unsigned nbk = ix_blocks(total);
    sort_keys_kernel<<<nbk, SO_THREADS, 0, c->stream>>>(a, k[0], ix[0]);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    int passes = op_sort_passes(n);
    long long w = 1;
    for (int p = 0; p < passes; p++, w *= 2) {
        sort_pass_kernel<<<nbk, SO_THREADS, 0, c->stream>>>(total, n, w, k[p & 1], ix[p & 1], k[!(p & 1)],
                                                            ix[!(p & 1)]);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    if (e->op == RGPU_OP_MODE)
        mode_write_kernel<<<ix_blocks(a.L.total), SO_THREADS, 0, c->stream>>>(a, k[passes & 1], ix[passes & 1]);
    else
        sort_write_kernel<<<nbk, SO_THREADS, 0, c->stream>>>(a, ix[passes & 1]);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

struct scan_args {
    op_sort_lines L;
    long long n, is, os, xs;   // byte strides of the dim
    const char *in;
    char *out, *idx;
    int kind, idt, odt, ie, oe;
};

static __global__ void scan_kernel(scan_args a)
{
    SO_FOR(l, a.L.total) {
        int64_t off[3];
        op_sort_line_offs(&a.L, 3, l, off);
        op_scan_line(a.kind, a.in + off[0] * a.ie, a.is, a.idt, a.out + off[1] * a.oe, a.os, a.odt,
                     a.idx ? a.idx + off[2] * 8 : NULL, a.xs, a.n);
    }
}

static rgpu_status so_scan(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    scan_args a;
    int64_t n, is, os, xs;
    FORWARD_IF_ERROR(rgpu_op_scan_check(e, &a.kind, &n, &is, &os, &xs, &a.L, err, errlen));
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0], *idx = e->n_out > 1 ? e->out[1] : NULL;
    if (a.L.total == 0 || n == 0) return RGPU_OK;
    a.idt = in->dtype;
    a.odt = out->dtype;
    a.ie = (int)rgpu_dtype_size(a.idt);
    a.oe = (int)rgpu_dtype_size(a.odt);
    a.n = n;
    a.is = is * a.ie;
    a.os = os * a.oe;
    a.xs = xs * 8;
    a.in = (const char *)in->data;
    a.out = (char *)out->data;
    a.idx = idx ? (char *)idx->data : NULL;
    scan_kernel<<<ix_blocks(a.L.total), 128, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

struct ss_args {
    op_searchsorted_args s;
    const char *bd, *v, *so;
    char *out;
    int bdt, vdt, odt, be, ve, oe;
};

static __global__ void searchsorted_kernel(ss_args a)
{
    SO_FOR(t, a.s.L.total * a.s.m) {
        long long l = t / a.s.m, j = t % a.s.m;
        int64_t off[4];
        op_sort_line_offs(&a.s.L, 4, l, off);
        int64_t r = op_searchsorted_one(a.bd + off[2] * a.be, a.s.bs * a.be, a.bdt,
                                        a.so ? a.so + off[3] * 8 : NULL, a.s.ss * 8, a.s.n,
                                        a.v + (off[0] + j * a.s.vs) * a.ve, a.vdt, a.s.right);
        op_store_u64(a.out + (off[1] + j * a.s.os) * a.oe, a.odt, (uint64_t)r);
    }
}

static rgpu_status so_searchsorted(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    ss_args a;
    FORWARD_IF_ERROR(rgpu_op_searchsorted_check(e, &a.s, err, errlen));
    const rgpu_view *bd = e->in[0], *v = e->in[1], *so = e->in[2];
    rgpu_view *out = e->out[0];
    long long total = a.s.L.total * a.s.m;
    if (total == 0) return RGPU_OK;
    a.bd = (const char *)bd->data;
    a.v = (const char *)v->data;
    a.so = so ? (const char *)so->data : NULL;
    a.out = (char *)out->data;
    a.bdt = bd->dtype; a.vdt = v->dtype; a.odt = out->dtype;
    a.be = (int)rgpu_dtype_size(a.bdt); a.ve = (int)rgpu_dtype_size(a.vdt); a.oe = (int)rgpu_dtype_size(a.odt);
    searchsorted_kernel<<<ix_blocks(total), SO_THREADS, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// histc: scratch s[0], s[1] the min / max keys (from_data), s[2..2+bins) the counts.
static __global__ void histc_init_kernel(unsigned long long *s, long long n)
{
    SO_FOR(i, n) s[i] = i == 0 ? ~0ull : 0ull;
}

static __global__ void histc_minmax_kernel(rgpu_cuda_view v, long long n, int dt, unsigned long long *s)
{
    int esz = op_dtype_esize(dt);
    SO_FOR(i, n) {
        unsigned long long k = op_sort_key((const char *)v.data + rgpu_cuda_offset(v, i) * esz, dt, false);
        atomicMin(&s[0], k);
        atomicMax(&s[1], k);
    }
}

static __global__ void histc_count_kernel(rgpu_cuda_view v, long long n, int dt, double lo, double hi, bool from_data,
                                   long long bins, unsigned long long *s)
{
    int esz = op_dtype_esize(dt);
    if (from_data) {
        lo = op_sort_key_f64(s[0]);
        hi = op_sort_key_f64(s[1]);
        op_histc_widen(&lo, &hi);
    }
    SO_FOR(i, n) {
        int64_t b = op_histc_bin((const char *)v.data + rgpu_cuda_offset(v, i) * esz, dt, lo, hi, bins);
        if (b >= 0) atomicAdd(&s[2 + b], 1ull);
    }
}

static __global__ void histc_write_kernel(char *out, long long st, int dt, long long bins, const unsigned long long *s)
{
    int esz = op_dtype_esize(dt);
    SO_FOR(b, bins) op_store_f64(out + b * st * esz, dt, (double)s[2 + b]);
}

static rgpu_status so_histc(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    int64_t bins;
    double lo, hi;
    bool from_data;
    FORWARD_IF_ERROR(rgpu_op_histc_check(e, &bins, &lo, &hi, &from_data, err, errlen));
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    long long n = rgpu_op_numel(in);
    ix_scratch hold(c);
    size_t nb = (size_t)(bins + 2) * 8;
    hold.get(nb);
    if (hold.p == NULL)
        RETURN_ERROR(RGPU_ERR_NOMEM, "out of device memory for histc (%llu bytes)", (unsigned long long)nb);
    unsigned long long *s = (unsigned long long *)hold.p;
    histc_init_kernel<<<ix_blocks(bins + 2), SO_THREADS, 0, c->stream>>>(s, bins + 2);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    rgpu_cuda_view v = rgpu_cuda_view_of(in);
    if (from_data && n > 0) {
        histc_minmax_kernel<<<ix_blocks(n), SO_THREADS, 0, c->stream>>>(v, n, in->dtype, s);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    if (n > 0) {
        histc_count_kernel<<<ix_blocks(n), SO_THREADS, 0, c->stream>>>(v, n, in->dtype, lo, hi, from_data, bins, s);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    histc_write_kernel<<<ix_blocks(bins), SO_THREADS, 0, c->stream>>>((char *)out->data, out->strides[0],
                                                                     out->dtype, bins, s);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// histogram: bin_edges := bins; unweighted counts by integer atomics (any
// order gives the same), weighted sums one thread per bin over the elements in
// order (the CPU's order: the same bits); density by one thread.
struct hg_args {
    rgpu_cuda_view x, w;
    const char *bins;
    char *hist, *edges;
    long long n, ne, es, hs, eos;   // es, hs, eos byte strides of bins, hist, bin_edges
    int dt, esz;
    bool weighted;
};

static __global__ void histogram_count_kernel(hg_args a, unsigned long long *cnt)
{
    SO_FOR(i, a.n) {
        int64_t b = op_histogram_bin((const char *)a.x.data + rgpu_cuda_offset(a.x, i) * a.esz, a.dt, a.bins,
                                     a.es, a.ne);
        if (b >= 0) atomicAdd(&cnt[b], 1ull);
    }
}

static __global__ void histogram_sum_kernel(hg_args a, const unsigned long long *cnt)
{
    SO_FOR(b, a.ne - 1) {
        char *h = a.hist + b * a.hs;
        op_store_f64(h, a.dt, 0.0);
        if (!a.weighted) {
            op_store_f64(h, a.dt, (double)cnt[b]);
            continue;
        }
        for (long long i = 0; i < a.n; i++) {
            const char *p = (const char *)a.x.data + rgpu_cuda_offset(a.x, i) * a.esz;
            if (op_histogram_bin(p, a.dt, a.bins, a.es, a.ne) == b)
                op_histogram_add(h, (const char *)a.w.data + rgpu_cuda_offset(a.w, i) * a.esz, a.dt);
        }
    }
}

static __global__ void histogram_edges_kernel(hg_args a, bool density)
{
    SO_FOR(b, a.ne) op_elem_copy(a.edges + b * a.eos, a.bins + b * a.es, a.esz);
    if (density && blockIdx.x == 0 && threadIdx.x == 0 && a.ne > 1)
        op_histogram_density(a.hist, a.hs, a.bins, a.es, a.dt, a.ne - 1);
}

static rgpu_status so_histogram(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    bool density;
    FORWARD_IF_ERROR(rgpu_op_histogram_check(e, &density, err, errlen));
    const rgpu_view *in = e->in[0], *bins = e->in[1], *w = e->in[2];
    rgpu_view *hist = e->out[0], *edges = e->out[1];
    hg_args a;
    a.x = rgpu_cuda_view_of(in);
    a.weighted = w != NULL;
    a.w = w ? rgpu_cuda_view_of(w) : a.x;
    a.dt = in->dtype;
    a.esz = (int)rgpu_dtype_size(a.dt);
    a.n = rgpu_op_numel(in);
    a.ne = bins->sizes[0];
    a.bins = (const char *)bins->data;
    a.es = bins->strides[0] * a.esz;
    a.hist = (char *)hist->data;
    a.hs = a.ne > 1 ? hist->strides[0] * a.esz : 0;
    a.edges = (char *)edges->data;
    a.eos = edges->strides[0] * a.esz;
    ix_scratch hold(c);
    long long nb = a.ne - 1;
    unsigned long long *cnt = NULL;
    if (nb > 0 && !a.weighted) {
        size_t bytes = (size_t)nb * 8;
        hold.get(bytes);
        if (hold.p == NULL)
            RETURN_ERROR(RGPU_ERR_NOMEM, "out of device memory for histogram (%llu bytes)", (unsigned long long)bytes);
        cnt = (unsigned long long *)hold.p;
        RGPU_CUDA_TRY(cudaMemsetAsync(cnt, 0, bytes, c->stream), err, errlen);
        if (a.n > 0) {
            histogram_count_kernel<<<ix_blocks(a.n), SO_THREADS, 0, c->stream>>>(a, cnt);
            RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        }
    }
    if (nb > 0) {
        histogram_sum_kernel<<<ix_blocks(nb), SO_THREADS, 0, c->stream>>>(a, cnt);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    histogram_edges_kernel<<<ix_blocks(a.ne), SO_THREADS, 0, c->stream>>>(a, density);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

extern "C" rgpu_status rgpu_cuda_sort_exec(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    switch (e->op) {
    case RGPU_OP_SORT: case RGPU_OP_MODE:
        return so_sort(c, e, err, errlen);
    case RGPU_OP_CUMMAX: case RGPU_OP_CUMMIN: case RGPU_OP_LOGCUMSUMEXP: case RGPU_OP_CUMPROD:
        return so_scan(c, e, err, errlen);
    case RGPU_OP_SEARCHSORTED:
        return so_searchsorted(c, e, err, errlen);
    case RGPU_OP_HISTC:
        return so_histc(c, e, err, errlen);
    case RGPU_OP_HISTOGRAM:
        return so_histogram(c, e, err, errlen);
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "cuda backend: unsupported op %s", rgpu_op_name(e->op));
    }
}
