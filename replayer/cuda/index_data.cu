// index_data.cu — index-family ops that move whole blocks or depend on the
// data for their output size: cat, constant_pad_nd, count_nonzero, nonzero,
// masked_select, count_unique and _unique2 (CPU reference:
// replayer/cpu/cpu_index_data.c, same checks and messages).
//
// nonzero / masked_select are a deterministic three-pass stream compaction
// with no atomics: (1) one block per tile of NZ_TILE elements counts its
// nonzeros, (2) one block scans the tile counts in order (exclusive offsets
// and the total), (3) each tile recomputes its flags, ranks them with an
// ordered block scan and writes its elements in row-major order.
// count_nonzero is passes 1-2, writing the total straight into out[0].
// unique / count_unique copy the input to the host and do exactly what the
// CPU kernel does (qsort on (value, position)), then upload the results.
#include "index.cuh"

namespace rgpu_ix {

// ---------------------------------------------------------------------------
// CAT: inputs joined along dim into out, each cast to out's dtype; a legacy
// empty 1-d tensor (size (0,)) is skipped; dim is wrapped against the first
// input that is not skipped.

// Many inputs of out's dtype (torch.stack of per-tensor norms or step
// counts, a cat of many parameters) go in one launch: the parts' walks in
// device memory, block b working on the part whose first block is the last
// at or before b, each element's bytes copied as k_copy_same copies them (ix_copy_elem).
struct cat_part {
    ix_walk w;                 // set 0: out's slice, set 1: the input
    char *d;
    const char *s;
    long long n;
    unsigned blk0;             // the part's first block
};

#define CAT_MANY_MIN 4         // inputs from which one launch pays (its arguments cross to the device)

template <int ESZ> __global__ void k_cat_same(const cat_part *parts, int np, unsigned nblocks)
{
    int lo = 0, hi = np - 1;
    unsigned b = blockIdx.x;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (parts[mid].blk0 <= b) lo = mid; else hi = mid - 1;
    }
    const cat_part &P = parts[lo];
    long long nb = (long long)((lo + 1 < np ? parts[lo + 1].blk0 : nblocks) - P.blk0);
    for (long long i = (long long)(b - P.blk0) * blockDim.x + threadIdx.x; i < P.n; i += nb * blockDim.x) {
        long long off[IX_NW];
        ix_walk_at(P.w, i, off);
        ix_copy_elem<ESZ>(P.d + off[0], P.s + off[1]);
    }
}

// One launch for every part of a cat whose inputs all have out's dtype;
// *done false: not this way (few parts, a cast, a graph capture: the host
// arguments cannot be captured), the caller copies part by part.
static rgpu_status cat_many(rgpu_cuda_ctx *c, const rgpu_exec *e, int dim, bool *done, char *err, size_t errlen)
{
    *done = false;
    const rgpu_view *out = e->out[0];
    int esz = (int)rgpu_dtype_size(out->dtype);
    if (c->capturing || e->n_in < CAT_MANY_MIN || (esz != 1 && esz != 2 && esz != 4 && esz != 8 && esz != 16))
        return RGPU_OK;
    for (int i = 0; i < e->n_in; i++)
        if (e->in[i]->dtype != out->dtype) return RGPU_OK;
    cat_part *parts = (cat_part *)malloc((size_t)e->n_in * sizeof(cat_part));
    if (parts == NULL) return RGPU_OK;   // part by part
    int np = 0;
    unsigned nblocks = 0;
    for (int i = 0; i < e->n_in; i++) {
        rgpu_view slice;
        if (!rgpu_op_index_cat_slice(e, dim, i, &slice)) continue;
        cat_part &P = parts[np];
        ix_walk_init(&P.w, slice.ndim, slice.sizes);
        ix_walk_strides(&P.w, 0, &slice);
        ix_walk_strides(&P.w, 1, e->in[i]);
        P.n = ix_walk_numel(&P.w);
        if (P.n <= 0) continue;
        P.d = (char *)slice.data;
        P.s = (const char *)e->in[i]->data;
        P.blk0 = nblocks;
        nblocks += ix_blocks(P.n);
        np++;
    }
    cat_part *dev = np < CAT_MANY_MIN ? NULL : (cat_part *)rgpu_cuda_scratch(c, (size_t)np * sizeof(cat_part));
    if (dev == NULL) {                 // few parts, or no memory for the arguments: part by part
        free(parts);
        return RGPU_OK;
    }
    rgpu_status st = rgpu_cuda_upload_async(c, dev, parts, (size_t)np * sizeof(cat_part), err, errlen);
    free(parts);                       // copied into pinned memory
    if (st == RGPU_OK) {
        switch (esz) {
        case 1: k_cat_same<1><<<nblocks, IX_THREADS, 0, c->stream>>>(dev, np, nblocks); break;
        case 2: k_cat_same<2><<<nblocks, IX_THREADS, 0, c->stream>>>(dev, np, nblocks); break;
        case 4: k_cat_same<4><<<nblocks, IX_THREADS, 0, c->stream>>>(dev, np, nblocks); break;
        case 8: k_cat_same<8><<<nblocks, IX_THREADS, 0, c->stream>>>(dev, np, nblocks); break;
        default: k_cat_same<16><<<nblocks, IX_THREADS, 0, c->stream>>>(dev, np, nblocks); break;
        }
        cudaError_t le = cudaGetLastError();
        if (le != cudaSuccess) {
            snprintf(err, errlen, "cat: %s", cudaGetErrorString(le));
            st = le == cudaErrorMemoryAllocation ? RGPU_ERR_NOMEM : RGPU_ERR_EXEC;
        }
    }
    rgpu_cuda_scratch_free(c, dev);    // stream-ordered: after the kernel
    *done = st == RGPU_OK;
    return st;
}

rgpu_status ix_cat(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    int dim;
    FORWARD_IF_ERROR(rgpu_op_index_cat_check(e, &dim, err, errlen));
    if (dim < 0) return RGPU_OK;   // every input is legacy-empty
    bool done;
    FORWARD_IF_ERROR(cat_many(c, e, dim, &done, err, errlen));
    if (done) return RGPU_OK;
    // each input into its slice of out: a view of out at the input's shape
    for (int i = 0; i < e->n_in; i++) {
        rgpu_view slice;
        if (rgpu_op_index_cat_slice(e, dim, i, &slice)) FORWARD_IF_ERROR(ix_copy_view(c, &slice, e->in[i], err, errlen));
    }
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// CONSTANT_PAD_ND: out cell = in[c - lo] where that lies inside in, else
// value. (The CPU fills then copies the covered region: the same result.)

struct pad_args {
    int nd;
    long long sz[RGPU_MAX_DIMS];    // out sizes
    long long ost[RGPU_MAX_DIMS];   // bytes
    long long ist[RGPU_MAX_DIMS];   // bytes
    long long lo[RGPU_MAX_DIMS];    // pad before (negative crops)
    long long a[RGPU_MAX_DIMS];     // covered out range [a, b)
    long long b[RGPU_MAX_DIMS];
};

__global__ void k_pad(pad_args p, char *out, const char *in, int esz, uint64_t value, long long n)
{
    uint64_t val = value;
    IX_FOR(i, n) {
        long long r = i, ooff = 0, ioff = 0;
        bool inside = true;
        for (int d = p.nd - 1; d >= 0; d--) {
            long long cd = r % p.sz[d];
            r /= p.sz[d];
            ooff += cd * p.ost[d];
            if (cd < p.a[d] || cd >= p.b[d]) inside = false;
            else ioff += (cd - p.lo[d]) * p.ist[d];
        }
        op_elem_copy(out + ooff, inside ? in + ioff : (const char *)&val, esz);
    }
}

rgpu_status ix_pad(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_index_pad_args pa;
    FORWARD_IF_ERROR(rgpu_op_index_pad_prepare(e, &pa, err, errlen));
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    long long n = rgpu_op_numel(out);
    if (n == 0) return RGPU_OK;

    int esz = (int)rgpu_dtype_size(out->dtype);
    pad_args p;
    memset(&p, 0, sizeof p);
    p.nd = in->ndim;
    for (int d = 0; d < p.nd; d++) {
        p.sz[d] = pa.sz[d];
        p.ost[d] = out->strides[d] * esz;
        p.ist[d] = in->strides[d] * esz;
        p.lo[d] = pa.lo[d];
        p.a[d] = pa.a[d];
        p.b[d] = pa.b[d];
    }
    k_pad<<<ix_blocks(n), IX_THREADS, 0, c->stream>>>(p, (char *)out->data, (const char *)in->data, esz, pa.value, n);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// Stream compaction (nonzero family)

#define NZ_T 256
#define NZ_ITEMS 16
#define NZ_TILE (NZ_T * NZ_ITEMS)

// Exclusive scan of v over the block (blockDim.x == NZ_T), in thread order;
// *total = the block's sum. Integer adds: the order cannot change results.
__device__ inline long long nz_block_scan(long long v, long long *total)
{
    __shared__ long long warp_sum[NZ_T / 32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    long long x = v;
    for (int o = 1; o < 32; o <<= 1) {
        long long y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_sum[wid] = x;
    __syncthreads();
    if (wid == 0) {
        long long s = lane < NZ_T / 32 ? warp_sum[lane] : 0;
        for (int o = 1; o < 32; o <<= 1) {
            long long y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        if (lane < NZ_T / 32) warp_sum[lane] = s;   // inclusive warp prefixes
    }
    __syncthreads();
    long long before = wid > 0 ? warp_sum[wid - 1] : 0;
    *total = warp_sum[NZ_T / 32 - 1];
    __syncthreads();   // warp_sum is reused by the next call
    return before + x - v;
}

// Pass 1: cnt[tile] = number of flagged elements (flag: element of stride
// set `fset` read as bool in dtype fdt) of the tile.
__global__ void k_nz_count(ix_walk w, const char *f, int fdt, int fset, long long n, long long *cnt)
{
    long long base = (long long)blockIdx.x * NZ_TILE, c = 0;
    for (int k = 0; k < NZ_ITEMS; k++) {
        long long i = base + (long long)k * NZ_T + threadIdx.x;
        if (i >= n) break;
        long long off[IX_NW];
        ix_walk_at(w, i, off);
        c += op_load_bool(f + off[fset], fdt);
    }
    long long tot;
    nz_block_scan(c, &tot);
    if (threadIdx.x == 0) cnt[blockIdx.x] = tot;
}

// Pass 2 (one block): cnt[] -> exclusive offsets in place; *total = the sum.
// Each thread takes 8 consecutive tiles per round.
__global__ void k_nz_scan(long long *cnt, long long ntiles, long long *total)
{
    long long carry = 0;
    for (long long base = 0; base < ntiles; base += (long long)NZ_T * 8) {
        long long v[8], s = 0;
        for (int k = 0; k < 8; k++) {
            long long t = base + (long long)threadIdx.x * 8 + k;
            v[k] = t < ntiles ? cnt[t] : 0;
            s += v[k];
        }
        long long tot, run = carry + nz_block_scan(s, &tot);
        for (int k = 0; k < 8; k++) {
            long long t = base + (long long)threadIdx.x * 8 + k;
            if (t < ntiles) cnt[t] = run;
            run += v[k];
        }
        carry += tot;
    }
    if (threadIdx.x == 0) *total = carry;
}

// Pass 3. kind 0 (nonzero): out row r = the coordinates of the r-th flagged
// element (flag from set 0), cast to odt; kind 1 (masked_select): out[r] =
// the element at set 0 (self), flag from set 1 (mask).
__global__ void k_nz_write(ix_walk w, int kind, const char *x, int xdt, const char *f, int fdt, int fset,
                           long long n, const long long *tileoff, char *out, int odt, long long rs, long long cs,
                           int esz)
{
    long long base = (long long)blockIdx.x * NZ_TILE, run = tileoff[blockIdx.x];
    for (int k = 0; k < NZ_ITEMS; k++) {
        if (base + (long long)k * NZ_T >= n) break;   // uniform over the block
        long long i = base + (long long)k * NZ_T + threadIdx.x;
        long long off[IX_NW];
        bool flag = false;
        if (i < n) {
            ix_walk_at(w, i, off);
            flag = op_load_bool(f + off[fset], fdt);
        }
        long long tot, r = run + nz_block_scan(flag ? 1 : 0, &tot);
        if (flag) {
            if (kind == 0) {
                long long q = i;
                for (int d = w.nd - 1; d >= 0; d--) {
                    op_store_u64(out + r * rs + d * cs, odt, (uint64_t)(q % w.sz[d]));
                    q /= w.sz[d];
                }
            } else {
                op_elem_copy(out + r * rs, x + off[0], esz);
            }
        }
        run += tot;
    }
}

// Passes 1-2 over the flags of set fset in w: the tile offsets (in *hold)
// and the total, written to the device int64 at dtotal.
static rgpu_status nz_count(rgpu_cuda_ctx *c, const ix_walk *w, const char *f, int fdt, int fset,
                            ix_scratch *hold, long long **tileoff, long long *dtotal, char *err, size_t errlen)
{
    long long n = ix_walk_numel(w);
    long long ntiles = (n + NZ_TILE - 1) / NZ_TILE;
    if (ntiles > 0x7fffffffLL) RETURN_ERROR(RGPU_ERR_TOO_LARGE, "nonzero: %lld elements are too many", n);
    size_t nbytes = (size_t)(ntiles > 0 ? ntiles : 1) * sizeof(long long);
    IX_SCRATCH(*hold, cnt, long long *, nbytes, "nonzero tile counts");
    *tileoff = cnt;
    if (ntiles == 0) {
        RGPU_CUDA_TRY(cudaMemsetAsync(dtotal, 0, sizeof(long long), c->stream), err, errlen);
        return RGPU_OK;
    }
    k_nz_count<<<(unsigned)ntiles, NZ_T, 0, c->stream>>>(*w, f, fdt, fset, n, cnt);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    k_nz_scan<<<1, NZ_T, 0, c->stream>>>(cnt, ntiles, dtotal);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// The count of flags, on the host (passes 1-2, one sync); the tile offsets
// stay in *hold for pass 3.
static rgpu_status nz_count_host(rgpu_cuda_ctx *c, const ix_walk *w, const char *f, int fdt, int fset,
                                 ix_scratch *hold, ix_scratch *htot, long long **tileoff, int64_t *count,
                                 char *err, size_t errlen)
{
    RGPU_CUDA_NEEDS_HOST(c, "a count read back", err, errlen);
    IX_SCRATCH(*htot, dtotal, long long *, sizeof(long long), "a count");
    FORWARD_IF_ERROR(nz_count(c, w, f, fdt, fset, hold, tileoff, dtotal, err, errlen));
    long long t = 0;
    RGPU_CUDA_TRY(cudaMemcpyAsync(&t, dtotal, sizeof t, cudaMemcpyDeviceToHost, c->stream), err, errlen);
    RGPU_CUDA_TRY(rgpu_cuda_stream_wait(c->stream), err, errlen);
    *count = t;
    return RGPU_OK;
}

// COUNT_NONZERO: out[0] (0-d i64) = number of x != 0 (NaN counts); no sync.
rgpu_status ix_count_nonzero(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_check_io(e, "r", "r", err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_check_count_out(e, err, errlen));
    const rgpu_view *x = e->in[0];
    ix_walk w;
    ix_walk_init(&w, x->ndim, x->sizes);
    ix_walk_strides(&w, 0, x);
    ix_scratch hold(c);
    long long *tileoff;
    return nz_count(c, &w, (const char *)x->data, x->dtype, 0, &hold, &tileoff, (long long *)e->out[0]->data,
                    err, errlen);
}

// NONZERO: out (n, ndim) i64 (or i32): the coordinates of x's nonzeros in row-major order.
rgpu_status ix_nonzero(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_nonzero_check(e, err, errlen));
    const rgpu_view *x = e->in[0];
    rgpu_view *out = e->out[0];
    ix_walk w;
    ix_walk_init(&w, x->ndim, x->sizes);
    ix_walk_strides(&w, 0, x);
    ix_scratch hold(c), htot(c);
    long long *tileoff;
    int64_t n;
    FORWARD_IF_ERROR(nz_count_host(c, &w, (const char *)x->data, x->dtype, 0, &hold, &htot, &tileoff, &n,
                                       err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_nonzero_check_out(e, n, err, errlen));
    if (n == 0 || x->ndim == 0) return RGPU_OK;
    long long nel = ix_walk_numel(&w), ntiles = (nel + NZ_TILE - 1) / NZ_TILE;
    int64_t esz = (int64_t)rgpu_dtype_size(out->dtype);
    k_nz_write<<<(unsigned)ntiles, NZ_T, 0, c->stream>>>(w, 0, NULL, 0, (const char *)x->data, x->dtype, 0, nel,
                                                         tileoff, (char *)out->data, out->dtype,
                                                         out->strides[0] * esz, out->strides[1] * esz, (int)esz);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// MASKED_SELECT: self and mask (bool) of one shape -> out (n,) = self's
// elements where mask is true, row-major.
rgpu_status ix_masked_select(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_index_masked_select_check(e, err, errlen));
    const rgpu_view *self = e->in[0], *mask = e->in[1];
    rgpu_view *out = e->out[0];
    ix_walk w;
    ix_walk_init(&w, self->ndim, self->sizes);
    ix_walk_strides(&w, 0, self);
    ix_walk_strides(&w, 1, mask);
    ix_scratch hold(c), htot(c);
    long long *tileoff;
    int64_t n;
    FORWARD_IF_ERROR(nz_count_host(c, &w, (const char *)mask->data, mask->dtype, 1, &hold, &htot, &tileoff, &n,
                                       err, errlen));
    FORWARD_IF_ERROR(rgpu_op_index_masked_select_check_out(e, n, err, errlen));
    if (n == 0) return RGPU_OK;
    long long nel = ix_walk_numel(&w), ntiles = (nel + NZ_TILE - 1) / NZ_TILE;
    int esz = (int)rgpu_dtype_size(self->dtype);
    k_nz_write<<<(unsigned)ntiles, NZ_T, 0, c->stream>>>(w, 1, (const char *)self->data, self->dtype,
                                                         (const char *)mask->data, mask->dtype, 1, nel, tileoff,
                                                         (char *)out->data, out->dtype,
                                                         out->strides[0] * (long long)esz, 0, esz);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// Unique (torch.unique on CPU, which always sorts): on the host, as
// cpu_index_data.c: values ascending, NaN after every number and each NaN
// distinct, -0.0 == 0.0; equal values ordered by position, a group's value
// is its first element's bits.


rgpu_status ix_unique(rgpu_cuda_ctx *c, const rgpu_exec *e, bool count_only, char *err, size_t errlen)
{
    op_index_unique_args u;
    FORWARD_IF_ERROR(rgpu_op_index_unique_check(e, count_only, &u, err, errlen));
    const rgpu_view *x = e->in[0];
    size_t esz = rgpu_dtype_size(x->dtype);
    ix_host hraw, hit;
    char *raw = NULL;
    op_index_uq_item *it = NULL;
    if (u.N > 0) {
        raw = (char *)hraw.get((size_t)u.N * esz);
        it = (op_index_uq_item *)hit.get((size_t)u.N * sizeof *it);
        if (!raw || !it) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory for %lld elements", u.name, (long long)u.N);
        FORWARD_IF_ERROR(ix_download_view(c, x, raw, err, errlen));
        for (int64_t i = 0; i < u.N; i++) {
            const char *p = raw + (size_t)i * esz;
            if (u.fl) it[i].k.f = op_load_f64(p, x->dtype);
            else it[i].k.i = (int64_t)op_load_u64(p, x->dtype);
            it[i].pos = i;
        }
    }
    int64_t n = rgpu_op_index_uq_sort(it, u.N, u.fl);   // sorted; n groups
    if (count_only) {
        RGPU_CUDA_NEEDS_HOST(c, u.name, err, errlen);
        long long hn = n;
        RGPU_CUDA_TRY(cudaMemcpyAsync(e->out[0]->data, &hn, sizeof hn, cudaMemcpyHostToDevice, c->stream), err, errlen);
        RGPU_CUDA_TRY(rgpu_cuda_stream_wait(c->stream), err, errlen);
        return RGPU_OK;
    }
    const rgpu_view *vo = e->out[0], *co = u.want_cnt ? e->out[2] : NULL;
    FORWARD_IF_ERROR(rgpu_op_index_unique_check_out(e, u.want_cnt, n, err, errlen));
    if (u.N == 0) return RGPU_OK;
    ix_host hv, hc, hi;
    char *vals = (char *)hv.get((size_t)n * esz);
    int64_t *cnts = co ? (int64_t *)hc.get((size_t)n * sizeof(int64_t)) : NULL;
    int64_t *inv = u.want_inv ? (int64_t *)hi.get((size_t)u.N * sizeof(int64_t)) : NULL;
    if (!vals || (co && !cnts) || (u.want_inv && !inv)) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of memory", u.name);
    int64_t g = -1, cnt = 0;
    for (int64_t i = 0; i < u.N; i++) {
        if (rgpu_op_index_uq_new_group(it, i, u.fl)) {
            if (cnts && g >= 0) cnts[g] = cnt;
            g++;
            cnt = 0;
            memcpy(vals + (size_t)g * esz, raw + (size_t)it[i].pos * esz, esz);
        }
        cnt++;
        if (inv) inv[it[i].pos] = g;
    }
    if (cnts) cnts[g] = cnt;
    FORWARD_IF_ERROR(ix_upload_view(c, vo, vals, err, errlen));
    if (co) FORWARD_IF_ERROR(ix_upload_view(c, co, cnts, err, errlen));
    if (inv) FORWARD_IF_ERROR(ix_upload_view(c, e->out[1], inv, err, errlen));
    return RGPU_OK;
}

}  // namespace rgpu_ix
