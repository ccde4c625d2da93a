// attention.cu — SDPA and SDPA_BACKWARD on the GPU (the math: op/attention.h;
// CPU reference: replayer/cpu/cpu_dense_attn.c). FlashAttention-2's
// algorithm in the opmath (float for float32/float16/bfloat16, double for
// float64): keys stream through shared memory in tiles of 32 with the online
// softmax, logsumexp is saved, the backward recomputes P from it; no (L, S)
// buffer, no atomics, every sum in a fixed order (bitwise reruns).
//
// Layout: a warp owns R query rows (dq, forward) or R key rows (dk/dv) and
// its lanes take turns as the 32 keys (query rows) of a tile for the dot
// products, then as head-dim columns (lane + 32c) for the accumulations,
// with the other side's value broadcast by a shuffle. Tiles read by lane are
// stored transposed in shared memory ([d][lane]: conflict-free); rows read by
// the whole warp at once are stored plainly (broadcast). Scalar FMAs for
// float32 and float64; float16/bfloat16 run on tensor cores (WMMA:
// sdpa_fwd_wmma_kernel, sdpa_dq_wmma_kernel, sdpa_dkv_wmma_kernel below).
#include "dense.cuh"
#include "reduce.cuh"

#include <mma.h>

#include "op/attention.h"
#include "op/philox.h"

#define AT_WARPS 4
#define AT_RF 4                      // rows per warp, forward
#define AT_RB 3                      // rows per warp, backward (its tiles take more shared memory)
#define AT_TS 33                     // row stride of a transposed tile: reads by lane and by column both conflict-free
#define AT_SMEM_MAX (48 * 1024)

// One operand: base pointer, dtype and element strides of (b, h, row, col).
struct at_op {
    const void *p;
    long long s0, s1, s2, s3;
    int dt;
};

struct at_args {
    at_op q, k, v, bias, out, lse, g, dq, dk, dv;   // p NULL: absent
    long long *pseed_out, *poffset_out;             // forward: philox_seed?, philox_offset? (written)
    const long long *pseed, *poffset;               // backward: the forward's (read on the device)
    unsigned long long seed, offset;                // forward: the record's Philox pair
    const uint64_t *ph;                             // forward in a graph: the pair in device memory (rgpu_exec philox)
    float *Dbuf;                                    // backward on tensor cores: D per (b, h, row) (sdpa_D_kernel)
    unsigned drop_thr;                              // 0: no dropout (op/attention.h)
    double drop_scale;
    float drop_scalef;
    long long B, Hq, Hk, L, S, E, Ev, group, nblk;
    int causal;
    double scale;
    float scalef;
};

static at_op op_of(const rgpu_view *v)
{
    at_op o;
    memset(&o, 0, sizeof o);
    if (v == NULL) return o;
    o.p = v->data;
    o.dt = v->dtype;
    o.s0 = v->strides[0]; o.s1 = v->strides[1]; o.s2 = v->strides[2];
    o.s3 = v->ndim > 3 ? v->strides[3] : 0;
    return o;
}

__device__ __forceinline__ long long at_off(const at_op &o, long long b, long long h, long long i, long long j)
{
    return b * o.s0 + h * o.s1 + i * o.s2 + j * o.s3;
}

template <typename T> __device__ __forceinline__ T at_ld(const at_op &o, long long off) { return rf_ld<T>(o.p, off, o.dt); }

// The scaled, masked score of key j for query row i of (b, h), from the dot product.
template <typename T>
__device__ __forceinline__ T at_score(const at_args &g, T dot, long long b, long long h, long long i, long long j)
{
    if (j >= g.S || i >= g.L || (g.causal && j > i)) return (T)-INFINITY;
    T s = rf_mul(dot, rf_pick<T>(g.scale, g.scalef));
    if (g.bias.p) s = rf_add(s, at_ld<T>(g.bias, at_off(g.bias, b, h, i, j)));
    return s;
}

// Dropout's factor z for key j of query row i of (b, h): 1 without dropout,
// else 1 / (1 - p) when kept, 0 when dropped (op/attention.h).
template <typename T>
__device__ __forceinline__ T at_z(const at_args &g, unsigned long long seed, unsigned long long off, long long b,
                                  long long h, long long i, long long j)
{
    if (!g.drop_thr) return (T)1;
    uint32_t w[4];
    rgpu_philox_draw(seed, off, (((unsigned long long)b * g.Hq + h) * g.L + i) * g.S + j, w);
    return (w[0] >> 8) >= g.drop_thr ? rf_pick<T>(g.drop_scale, g.drop_scalef) : (T)0;
}

// Keys [0, n) that rows up to `last` can see.
__device__ __forceinline__ long long at_keys(const at_args &g, long long last)
{
    return g.causal ? (last + 1 < g.S ? last + 1 : g.S) : g.S;
}

// Loads rows [r0, r0 + nr) of o[b, h] (cols [0, n)) into sh[row][col]
// (zeros past the last row).
template <typename T>
__device__ void at_load_rows(T *sh, const at_op &o, long long b, long long h, long long r0, long long rows, long long n,
                             int nr)
{
    for (long long t = threadIdx.x; t < nr * n; t += blockDim.x) {
        const long long r = t / n, c = t - r * n;
        sh[t] = r0 + r < rows ? at_ld<T>(o, at_off(o, b, h, r0 + r, c)) : (T)0;
    }
}

// Loads rows [r0, r0 + 32) of o[b, h] (cols [0, n)) transposed into
// sh[col * AT_TS + lane] (zeros past the last row).
template <typename T>
__device__ void at_load_tile_t(T *sh, const at_op &o, long long b, long long h, long long r0, long long rows, long long n)
{
    for (long long t = threadIdx.x; t < 32 * n; t += blockDim.x) {
        const long long c = t >> 5, r = t & 31;
        sh[c * AT_TS + r] = r0 + r < rows ? at_ld<T>(o, at_off(o, b, h, r0 + r, c)) : (T)0;
    }
}

// sum_d row[d] * tile[d][col] over d < n: a shared row against column col
// of a transposed tile (lane = col: conflict-free).
template <typename T> __device__ __forceinline__ T at_dot(const T *row, const T *tile, long long n, int col)
{
    T s = 0;
    for (long long d = 0; d < n; d++) s += row[d] * tile[d * AT_TS + col];
    return s;
}

// acc[c] += s * v[d * dstride] for the lane's head-dim columns d = lane + 32c < n.
template <typename T, int N>
__device__ __forceinline__ void at_axpy(T (&acc)[N], T s, const T *v, long long dstride, long long n, int lane)
{
#pragma unroll
    for (int c = 0; c < N; c++) {
        const long long d = lane + 32 * c;
        if (d < n) acc[c] += s * v[d * dstride];
    }
}

// o[b, h, i, d] = acc[c] * s for the lane's head-dim columns d = lane + 32c < n.
template <typename T, int N>
__device__ __forceinline__ void at_store(const at_op &o, long long b, long long h, long long i, const T (&acc)[N], T s,
                                         long long n, int lane)
{
#pragma unroll
    for (int c = 0; c < N; c++) {
        const long long d = lane + 32 * c;
        if (d < n) rf_st((void *)o.p, at_off(o, b, h, i, d), o.dt, acc[c] * s);
    }
}

// ---------------------------------------------------------------------------
// Forward: block = (b, h, AT_BQ query rows); shared Qs[AT_BQ][E], Ks[E][AT_TS],
// Vs[32][Ev] (the tile's values, read by column: lane = d).

#define AT_R AT_RF
#define AT_BQ (AT_WARPS * AT_R)
template <typename T, int NV> __global__ void sdpa_fwd_kernel(at_args g)
{
    extern __shared__ long long at_smem[];
    T *Qs = (T *)at_smem, *Ks = Qs + AT_BQ * g.E, *Vs = Ks + AT_TS * g.E;
    const long long bh = blockIdx.x / g.nblk, i0 = blockIdx.x % g.nblk * AT_BQ;
    const long long b = bh / g.Hq, h = bh % g.Hq, kh = h / g.group;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long last = (i0 + AT_BQ < g.L ? i0 + AT_BQ : g.L) - 1;
    const long long nkeys = at_keys(g, last);
    at_load_rows(Qs, g.q, b, h, i0, g.L, g.E, AT_BQ);
    const unsigned long long seed = g.ph ? g.ph[0] : g.seed, offset = g.ph ? g.ph[1] : g.offset;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        if (g.pseed_out) *g.pseed_out = (long long)seed;
        if (g.poffset_out) *g.poffset_out = (long long)offset;
    }
    T acc[AT_R][NV], m[AT_R], l[AT_R];
#pragma unroll
    for (int r = 0; r < AT_R; r++) {
        m[r] = -INFINITY; l[r] = 0;
#pragma unroll
        for (int c = 0; c < NV; c++) acc[r][c] = 0;
    }
    for (long long k0 = 0; k0 < nkeys; k0 += 32) {
        __syncthreads();                       // the previous tile is consumed (and Qs is loaded)
        at_load_tile_t(Ks, g.k, b, kh, k0, g.S, g.E);
        at_load_rows(Vs, g.v, b, kh, k0, g.S, g.Ev, 32);
        __syncthreads();
        const long long j = k0 + lane;
        const int nk = nkeys - k0 < 32 ? (int)(nkeys - k0) : 32;
#pragma unroll
        for (int r = 0; r < AT_R; r++) {
            const long long i = i0 + w * AT_R + r;
            const T *qr = Qs + (w * AT_R + r) * g.E;
            const T s = at_score<T>(g, at_dot(qr, Ks, g.E, lane), b, h, i, j);
            const T mn = rf_max_nan(m[r], rf_warp_max(s));
            T p = 0, alpha = 1;
            if (mn != (T)-INFINITY) {
                p = exp(s - mn);
                alpha = m[r] == (T)-INFINITY ? (T)0 : exp(m[r] - mn);
            }
            l[r] = l[r] * alpha + rf_warp_sum(p);
            m[r] = mn;
            const T pd = p * at_z<T>(g, seed, offset, b, h, i, j);   // dropout after the sum
#pragma unroll
            for (int c = 0; c < NV; c++) acc[r][c] *= alpha;
            for (int jj = 0; jj < nk; jj++)
                at_axpy(acc[r], __shfl_sync(0xffffffffu, pd, jj), Vs + jj * g.Ev, 1, g.Ev, lane);
        }
    }
#pragma unroll
    for (int r = 0; r < AT_R; r++) {
        const long long i = i0 + w * AT_R + r;
        if (i >= g.L) continue;
        at_store(g.out, b, h, i, acc[r], l[r] > 0 ? (T)1 / l[r] : (T)0, g.Ev, lane);
        if (lane == 0) {
            const T lse = m[r] == (T)-INFINITY || !(l[r] > 0) ? (T)-INFINITY : m[r] + log(l[r]);
            rf_st((void *)g.lse.p, at_off(g.lse, b, h, i, 0), g.lse.dt, m[r] != m[r] ? m[r] : lse);
        }
    }
}

// ---------------------------------------------------------------------------
// Backward, dq: block = (b, h, AT_BQ query rows); shared Qs[AT_BQ][E],
// Gs[AT_BQ][Ev] (grad_out rows), Ks[E][AT_TS], Vs[Ev][AT_TS].

#undef AT_R
#undef AT_BQ

template <typename T> __device__ __forceinline__ T at_p(T s, T lse)
{
    return lse == (T)-INFINITY || s == (T)-INFINITY ? (T)0 : exp(s - lse);
}

// D_i = grad_out_i . out_i, by the whole warp (every lane gets it).
template <typename T>
__device__ __forceinline__ T at_D(const at_args &g, long long b, long long h, long long i)
{
    T d = 0;
    if (i < g.L)
        for (long long c = threadIdx.x & 31; c < g.Ev; c += 32)
            d += at_ld<T>(g.g, at_off(g.g, b, h, i, c)) * at_ld<T>(g.out, at_off(g.out, b, h, i, c));
    return rf_warp_sum(d);
}

#define AT_R AT_RB
#define AT_BQ (AT_WARPS * AT_R)
template <typename T, int NE> __global__ void sdpa_dq_kernel(at_args g)
{
    extern __shared__ long long at_smem[];
    T *Qs = (T *)at_smem, *Gs = Qs + AT_BQ * g.E, *Ks = Gs + AT_BQ * g.Ev, *Vs = Ks + AT_TS * g.E;
    const long long bh = blockIdx.x / g.nblk, i0 = blockIdx.x % g.nblk * AT_BQ;
    const long long b = bh / g.Hq, h = bh % g.Hq, kh = h / g.group;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const long long last = (i0 + AT_BQ < g.L ? i0 + AT_BQ : g.L) - 1;
    const long long nkeys = at_keys(g, last);
    at_load_rows(Qs, g.q, b, h, i0, g.L, g.E, AT_BQ);
    at_load_rows(Gs, g.g, b, h, i0, g.L, g.Ev, AT_BQ);
    const unsigned long long seed = g.drop_thr ? (unsigned long long)*g.pseed : 0;
    const unsigned long long off = g.drop_thr ? (unsigned long long)*g.poffset : 0;
    T acc[AT_R][NE], D[AT_R], lse[AT_R];
#pragma unroll
    for (int r = 0; r < AT_R; r++) {
        const long long i = i0 + w * AT_R + r;
        D[r] = at_D<T>(g, b, h, i);
        lse[r] = i < g.L ? at_ld<T>(g.lse, at_off(g.lse, b, h, i, 0)) : (T)-INFINITY;
#pragma unroll
        for (int c = 0; c < NE; c++) acc[r][c] = 0;
    }
    for (long long k0 = 0; k0 < nkeys; k0 += 32) {
        __syncthreads();
        at_load_tile_t(Ks, g.k, b, kh, k0, g.S, g.E);
        at_load_tile_t(Vs, g.v, b, kh, k0, g.S, g.Ev);
        __syncthreads();
        const long long j = k0 + lane;
        const int nk = nkeys - k0 < 32 ? (int)(nkeys - k0) : 32;
#pragma unroll
        for (int r = 0; r < AT_R; r++) {
            const long long i = i0 + w * AT_R + r;
            const T *qr = Qs + (w * AT_R + r) * g.E, *gr = Gs + (w * AT_R + r) * g.Ev;
            const T p = at_p(at_score<T>(g, at_dot(qr, Ks, g.E, lane), b, h, i, j), lse[r]);
            const T ds = p * (at_dot(gr, Vs, g.Ev, lane) * at_z<T>(g, seed, off, b, h, i, j) - D[r]);
            for (int jj = 0; jj < nk; jj++)
                at_axpy(acc[r], __shfl_sync(0xffffffffu, ds, jj), Ks + jj, AT_TS, g.E, lane);
        }
    }
    const T sc = rf_pick<T>(g.scale, g.scalef);
#pragma unroll
    for (int r = 0; r < AT_R; r++) {
        const long long i = i0 + w * AT_R + r;
        if (i < g.L) at_store(g.dq, b, h, i, acc[r], sc, g.E, lane);
    }
}

// ---------------------------------------------------------------------------
// Backward, dk and dv: block = (b, kv head, AT_BQ key rows), over the query
// heads of the group and tiles of 32 query rows; shared Ks[AT_BQ][E],
// Vs[AT_BQ][Ev] (the block's keys), Qs[E][AT_TS], Gs[Ev][AT_TS] (the tile's
// query and grad_out rows, transposed), Ls[32], Ds[32] (their lse and D).

template <typename T, int NE, int NV> __global__ void sdpa_dkv_kernel(at_args g)
{
    extern __shared__ long long at_smem[];
    T *Ks = (T *)at_smem, *Vs = Ks + AT_BQ * g.E, *Qs = Vs + AT_BQ * g.Ev, *Gs = Qs + AT_TS * g.E;
    T *Ls = Gs + AT_TS * g.Ev, *Ds = Ls + 32;
    const long long bk = blockIdx.x / g.nblk, j0 = blockIdx.x % g.nblk * AT_BQ;
    const long long b = bk / g.Hk, kh = bk % g.Hk;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    at_load_rows(Ks, g.k, b, kh, j0, g.S, g.E, AT_BQ);
    at_load_rows(Vs, g.v, b, kh, j0, g.S, g.Ev, AT_BQ);
    const unsigned long long seed = g.drop_thr ? (unsigned long long)*g.pseed : 0;
    const unsigned long long off = g.drop_thr ? (unsigned long long)*g.poffset : 0;
    T dk[AT_R][NE], dv[AT_R][NV];
#pragma unroll
    for (int r = 0; r < AT_R; r++) {
#pragma unroll
        for (int c = 0; c < NE; c++) dk[r][c] = 0;
#pragma unroll
        for (int c = 0; c < NV; c++) dv[r][c] = 0;
    }
    const long long first = g.causal ? j0 / 32 * 32 : 0;
    for (long long hh = 0; hh < g.group; hh++) {
        const long long h = kh * g.group + hh;
        for (long long t0 = first; t0 < g.L; t0 += 32) {
            __syncthreads();
            at_load_tile_t(Qs, g.q, b, h, t0, g.L, g.E);
            at_load_tile_t(Gs, g.g, b, h, t0, g.L, g.Ev);
            for (int r = w; r < 32; r += AT_WARPS) {       // D and lse of the tile's rows
                const T dd = at_D<T>(g, b, h, t0 + r);
                if (lane == 0) {
                    Ds[r] = dd;
                    Ls[r] = t0 + r < g.L ? at_ld<T>(g.lse, at_off(g.lse, b, h, t0 + r, 0)) : (T)-INFINITY;
                }
            }
            __syncthreads();
            const long long i = t0 + lane;
            const int ni = g.L - t0 < 32 ? (int)(g.L - t0) : 32;
#pragma unroll
            for (int r = 0; r < AT_R; r++) {
                const long long j = j0 + w * AT_R + r;
                const T *kr = Ks + (w * AT_R + r) * g.E, *vr = Vs + (w * AT_R + r) * g.Ev;
                const T p = at_p(at_score<T>(g, at_dot(kr, Qs, g.E, lane), b, h, i, j), Ls[lane]);
                const T z = at_z<T>(g, seed, off, b, h, i, j);
                const T ds = p * (at_dot(vr, Gs, g.Ev, lane) * z - Ds[lane]), pd = p * z;
                for (int ii = 0; ii < ni; ii++) {
                    at_axpy(dv[r], __shfl_sync(0xffffffffu, pd, ii), Gs + ii, AT_TS, g.Ev, lane);
                    at_axpy(dk[r], __shfl_sync(0xffffffffu, ds, ii), Qs + ii, AT_TS, g.E, lane);
                }
            }
        }
    }
    const T sc = rf_pick<T>(g.scale, g.scalef);
#pragma unroll
    for (int r = 0; r < AT_R; r++) {
        const long long j = j0 + w * AT_R + r;
        if (j >= g.S) continue;
        if (g.dk.p) at_store(g.dk, b, kh, j, dk[r], sc, g.E, lane);
        if (g.dv.p) at_store(g.dv, b, kh, j, dv[r], (T)1, g.Ev, lane);
    }
}

#undef AT_R
#undef AT_BQ

// ---------------------------------------------------------------------------
// Host side

// Head-dim chunks of 32 columns (per lane) a kernel is instantiated for.
static int at_chunks(long long n) { return n <= 32 ? 1 : n <= 64 ? 2 : 4; }

template <typename T>
static void at_launch_fwd(rgpu_cuda_ctx *c, const at_args &g, unsigned grid, size_t smem)
{
    switch (at_chunks(g.Ev)) {
    case 1: sdpa_fwd_kernel<T, 1><<<grid, AT_WARPS * 32, smem, c->stream>>>(g); break;
    case 2: sdpa_fwd_kernel<T, 2><<<grid, AT_WARPS * 32, smem, c->stream>>>(g); break;
    default: sdpa_fwd_kernel<T, 4><<<grid, AT_WARPS * 32, smem, c->stream>>>(g); break;
    }
}

template <typename T>
static void at_launch_dq(rgpu_cuda_ctx *c, const at_args &g, unsigned grid, size_t smem)
{
    switch (at_chunks(g.E)) {
    case 1: sdpa_dq_kernel<T, 1><<<grid, AT_WARPS * 32, smem, c->stream>>>(g); break;
    case 2: sdpa_dq_kernel<T, 2><<<grid, AT_WARPS * 32, smem, c->stream>>>(g); break;
    default: sdpa_dq_kernel<T, 4><<<grid, AT_WARPS * 32, smem, c->stream>>>(g); break;
    }
}

template <typename T, int NE>
static void at_launch_dkv_e(rgpu_cuda_ctx *c, const at_args &g, unsigned grid, size_t smem)
{
    switch (at_chunks(g.Ev)) {
    case 1: sdpa_dkv_kernel<T, NE, 1><<<grid, AT_WARPS * 32, smem, c->stream>>>(g); break;
    case 2: sdpa_dkv_kernel<T, NE, 2><<<grid, AT_WARPS * 32, smem, c->stream>>>(g); break;
    default: sdpa_dkv_kernel<T, NE, 4><<<grid, AT_WARPS * 32, smem, c->stream>>>(g); break;
    }
}

template <typename T>
static void at_launch_dkv(rgpu_cuda_ctx *c, const at_args &g, unsigned grid, size_t smem)
{
    switch (at_chunks(g.E)) {
    case 1: at_launch_dkv_e<T, 1>(c, g, grid, smem); break;
    case 2: at_launch_dkv_e<T, 2>(c, g, grid, smem); break;
    default: at_launch_dkv_e<T, 4>(c, g, grid, smem); break;
    }
}

// ---------------------------------------------------------------------------
// Forward on tensor cores (float16 / bfloat16 q, k, v, out; head dims up to
// 128): the same algorithm with the two products through WMMA 16x16x16
// fragments (float accumulators). Block = (b, h, 64 query rows), a warp per
// 16 rows; keys in tiles of 32. Shared: Qs[64][EP], Ks[32][EP], Vs[32][EVP]
// (the tensors' own 16-bit values, zero padded to multiples of 16), per warp
// Sw[16][32] float (scores; then a 16x16 product chunk) and Pw[16][32] (the
// tile's probabilities, rounded to the 16-bit type for the second product,
// as FlashAttention does). Lane l keeps row l/2, keys / value columns of its
// half (l & 1): the running max, sum and its 8 columns of each 16-column
// output chunk in registers. Scores, masks, dropout, fully masked rows and
// the logsumexp are the scalar kernel's (at_score, at_z); the row sums add
// in a fixed order. RGPU_CUDA_SDPA_WMMA=0 keeps the scalar kernel.

#define AT_WQ 64                     // query rows per block (4 warps x 16)
#define AT_WK 32                     // keys per tile

static size_t at_wmma_smem(long long EP, long long EVP)
{
    return (size_t)(AT_WQ * EP + AT_WK * EP + AT_WK * EVP) * 2 + (size_t)AT_WARPS * 16 * AT_WK * (4 + 2) + 128;
}

// rows [r0, r0 + nr) of o[b, h] (cols [0, n), its dtype TI) into sh[row][ld], zero padded
template <typename TI>
__device__ void at_wmma_rows(TI *sh, int nr, int ld, const at_op &o, long long b, long long h, long long r0,
                             long long rows, long long n)
{
    const TI zero = (TI)0.0f;
    for (long long t = threadIdx.x; t < (long long)nr * ld; t += blockDim.x) {
        const long long rr = t / ld, cc = t - rr * ld;
        sh[t] = r0 + rr < rows && cc < n ? ((const TI *)o.p)[at_off(o, b, h, r0 + rr, cc)] : zero;
    }
}

// The warp's 16x32 tile A B^T (A: 16 rows, B: 32 rows, both [row][ld] with n
// columns, n a multiple of 16) into out[16][32] (float), two 16x16 halves.
template <typename TI>
__device__ __forceinline__ void at_wmma_abt(float *out, const TI *A, const TI *B, int ld, int n)
{
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, TI, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, TI, wmma::col_major> fbt;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    for (int half = 0; half < 2; half++) {
        wmma::fill_fragment(acc, 0.0f);
        for (int c = 0; c < n / 16; c++) {
            wmma::load_matrix_sync(fa, A + c * 16, ld);
            wmma::load_matrix_sync(fbt, B + half * 16 * ld + c * 16, ld);
            wmma::mma_sync(acc, fa, fbt, acc);
        }
        wmma::store_matrix_sync(out + half * 16, acc, 32, wmma::mem_row_major);
    }
}

template <typename TI, int NJ>
__global__ void __launch_bounds__(AT_WARPS * 32) sdpa_fwd_wmma_kernel(at_args g, int EP, int EVP)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    extern __shared__ long long at_smem[];
    TI *Qs = (TI *)(((uintptr_t)at_smem + 127) & ~(uintptr_t)127);   // 32-byte aligned tiles (WMMA)
    TI *Ks = Qs + AT_WQ * EP, *Vs = Ks + AT_WK * EP;
    float *Ss = (float *)(Vs + AT_WK * EVP);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, hf = lane & 1;
    float *Sw = Ss + w * 16 * AT_WK;
    TI *Pw = (TI *)(Ss + AT_WARPS * 16 * AT_WK) + w * 16 * AT_WK;
    const long long bh = blockIdx.x / g.nblk, i0 = blockIdx.x % g.nblk * AT_WQ;
    const long long b = bh / g.Hq, h = bh % g.Hq, kh = h / g.group;
    const long long last = (i0 + AT_WQ < g.L ? i0 + AT_WQ : g.L) - 1, wlast = i0 + w * 16 + 15;
    const long long nkeys = at_keys(g, last), i = i0 + w * 16 + r;
    at_wmma_rows(Qs, AT_WQ, EP, g.q, b, h, i0, g.L, g.E);
    const unsigned long long seed = g.ph ? g.ph[0] : g.seed, offset = g.ph ? g.ph[1] : g.offset;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        if (g.pseed_out) *g.pseed_out = (long long)seed;
        if (g.poffset_out) *g.poffset_out = (long long)offset;
    }
    float m = -INFINITY, l = 0, o[NJ][8];
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int c = 0; c < 8; c++) o[j][c] = 0;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, TI, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, TI, wmma::row_major> fv;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    for (long long k0 = 0; k0 < nkeys; k0 += AT_WK) {
        __syncthreads();                       // the previous tile is consumed (and Qs is loaded)
        at_wmma_rows(Ks, AT_WK, EP, g.k, b, kh, k0, g.S, g.E);
        at_wmma_rows(Vs, AT_WK, EVP, g.v, b, kh, k0, g.S, g.Ev);
        __syncthreads();
        if (g.causal && k0 > wlast) continue;  // every key of the tile is masked for this warp's rows
        at_wmma_abt(Sw, Qs + w * 16 * EP, Ks, EP, EP);   // S = Q K^T: the warp's 16 rows, the tile's 32 keys
        __syncwarp();
        float sv[16], mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < 16; c++) {
            const long long j = k0 + hf * 16 + c;
            sv[c] = at_score<float>(g, Sw[r * AT_WK + hf * 16 + c], b, h, i, j);
            mx = rf_max_nan(mx, sv[c]);
        }
        const float mn = rf_max_nan(m, rf_max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
        float alpha = 1, ps = 0;
        if (mn != -INFINITY) alpha = m == -INFINITY ? 0.0f : exp(m - mn);
#pragma unroll
        for (int c = 0; c < 16; c++) {
            const long long j = k0 + hf * 16 + c;
            const float p = mn != -INFINITY ? exp(sv[c] - mn) : 0.0f;
            ps += p;
            Pw[r * AT_WK + hf * 16 + c] = (TI)(p * at_z<float>(g, seed, offset, b, h, i, j));   // dropout after the sum
        }
        const float po = __shfl_xor_sync(0xffffffffu, ps, 1);
        l = l * alpha + (hf ? po + ps : ps + po);   // the same order in both lanes of a row
        m = mn;
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int c = 0; c < 8; c++) o[j][c] *= alpha;
        __syncwarp();
        // O += P V, a 16-column chunk at a time through Sw
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            if (j * 16 >= EVP) break;
            wmma::fill_fragment(acc, 0.0f);
            for (int kc = 0; kc < AT_WK / 16; kc++) {
                wmma::load_matrix_sync(fa, Pw + kc * 16, AT_WK);
                wmma::load_matrix_sync(fv, Vs + kc * 16 * EVP + j * 16, EVP);
                wmma::mma_sync(acc, fa, fv, acc);
            }
            wmma::store_matrix_sync(Sw, acc, 16, wmma::mem_row_major);
            __syncwarp();
#pragma unroll
            for (int c = 0; c < 8; c++) o[j][c] += Sw[r * 16 + hf * 8 + c];
            __syncwarp();
        }
    }
    if (i >= g.L) return;
    const float inv = l > 0 ? 1.0f / l : 0.0f;
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int c = 0; c < 8; c++) {
            const long long d = j * 16 + hf * 8 + c;
            if (d < g.Ev) rf_st((void *)g.out.p, at_off(g.out, b, h, i, d), g.out.dt, o[j][c] * inv);
        }
    if (hf == 0) {
        const float lse = m == -INFINITY || !(l > 0) ? -INFINITY : m + log(l);
        rf_st((void *)g.lse.p, at_off(g.lse, b, h, i, 0), g.lse.dt, m != m ? m : lse);
    }
#endif
}

// ---------------------------------------------------------------------------
// Backward on tensor cores (float16 / bfloat16): the scalar kernels' math with
// the products through WMMA. Blocks of 32 rows (2 warps x 16: the shared
// tiles of both operands' sides fit 48 KiB at head dims of 128). dq: per key
// tile, S = Q K^T and dP = dO V^T (float), then dS = P (z dP - D) rounded to
// the 16-bit type, dQ += dS K in float accumulator fragments (no rescaling in
// the backward), times scale at the end. dk/dv: per kv head block of 32 keys,
// over the group's query heads in order and tiles of 32 query rows, S^T = K
// Q^T and dP^T = V dO^T, then P_d^T = P z and dS^T (16-bit), dV += P_d^T dO,
// dK += dS^T Q. D = dO.O computed once per row beforehand (sdpa_D_kernel,
// at_D's values) and the saved logsumexp; masks, dropout and GQA as the
// scalar kernels.

// D_i = grad_out_i . out_i once per (b, h, row) into g.Dbuf (a warp per row,
// at_D's order: the values the scalar kernels compute), for both backward
// kernels, which would otherwise re-read grad_out and out per key block.
static __global__ void sdpa_D_kernel(at_args g)
{
    const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= g.B * g.Hq * g.L) return;       // whole warps: blockDim.x is a multiple of 32
    const long long i = row % g.L, bh = row / g.L;
    const float d = at_D<float>(g, bh / g.Hq, bh % g.Hq, i);
    if ((threadIdx.x & 31) == 0) g.Dbuf[row] = d;
}

__device__ __forceinline__ float at_Dv(const at_args &g, long long b, long long h, long long i)
{
    return i < g.L ? g.Dbuf[(b * g.Hq + h) * g.L + i] : 0.0f;
}

#define AT_BW 2                      // warps per block, backward on tensor cores
#define AT_BR (AT_BW * 16)           // rows (queries for dq, keys for dk/dv) per block

static size_t at_wmma_bwd_smem(long long EP, long long EVP)
{
    return (size_t)(2 * AT_BR * EP + 2 * AT_BR * EVP) * 2 + 2 * AT_BR * 4 + (size_t)AT_BW * 16 * 32 * (4 + 4 + 2 + 2) + 128;
}

// acc (16x16 float) * s written to rows [r0, r0 + 16) x cols [c0, c0 + 16) of
// o[b, h] (rows < nr, cols < nc) through the warp's 16x16 float staging st.
template <typename F>
__device__ __forceinline__ void at_wmma_out(F &acc, float s, float *st, const at_op &o, long long b, long long h,
                                           long long r0, long long c0, long long nr, long long nc)
{
    for (int t = 0; t < acc.num_elements; t++) acc.x[t] *= s;
    nvcuda::wmma::store_matrix_sync(st, acc, 16, nvcuda::wmma::mem_row_major);
    __syncwarp();
    const int lane = threadIdx.x & 31, r = lane >> 1, hf = lane & 1;
    for (int c = 0; c < 8; c++) {
        const long long i = r0 + r, d = c0 + hf * 8 + c;
        if (i < nr && d < nc) rf_st((void *)o.p, at_off(o, b, h, i, d), o.dt, st[r * 16 + hf * 8 + c]);
    }
    __syncwarp();
}

template <typename TI, int NJ>
__global__ void __launch_bounds__(AT_BW * 32) sdpa_dq_wmma_kernel(at_args g, int EP, int EVP)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    extern __shared__ long long at_smem[];
    TI *Qs = (TI *)(((uintptr_t)at_smem + 127) & ~(uintptr_t)127);
    TI *Gs = Qs + AT_BR * EP, *Ks = Gs + AT_BR * EVP, *Vs = Ks + AT_BR * EP;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, hf = lane & 1;
    float *S0 = (float *)(Vs + AT_BR * EVP);   // per warp: scores, dP (float), dS (16-bit)
    float *Sw = S0 + w * 16 * 32, *Dw = S0 + (AT_BW + w) * 16 * 32;
    TI *Pw = (TI *)(S0 + 2 * AT_BW * 16 * 32) + w * 16 * 32;
    const long long bh = blockIdx.x / g.nblk, i0 = blockIdx.x % g.nblk * AT_BR;
    const long long b = bh / g.Hq, h = bh % g.Hq, kh = h / g.group;
    const long long last = (i0 + AT_BR < g.L ? i0 + AT_BR : g.L) - 1, wlast = i0 + w * 16 + 15;
    const long long nkeys = at_keys(g, last), i = i0 + w * 16 + r;
    at_wmma_rows(Qs, AT_BR, EP, g.q, b, h, i0, g.L, g.E);
    at_wmma_rows(Gs, AT_BR, EVP, g.g, b, h, i0, g.L, g.Ev);
    const unsigned long long seed = g.drop_thr ? (unsigned long long)*g.pseed : 0;
    const unsigned long long off = g.drop_thr ? (unsigned long long)*g.poffset : 0;
    const float Dr = at_Dv(g, b, h, i);
    const float lr = i < g.L ? at_ld<float>(g.lse, at_off(g.lse, b, h, i, 0)) : -INFINITY;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, TI, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, TI, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> dq[NJ];
#pragma unroll
    for (int e = 0; e < NJ; e++) wmma::fill_fragment(dq[e], 0.0f);
    for (long long k0 = 0; k0 < nkeys; k0 += 32) {
        __syncthreads();
        at_wmma_rows(Ks, AT_BR, EP, g.k, b, kh, k0, g.S, g.E);
        at_wmma_rows(Vs, AT_BR, EVP, g.v, b, kh, k0, g.S, g.Ev);
        __syncthreads();
        if (g.causal && k0 > wlast) continue;
        at_wmma_abt(Sw, Qs + w * 16 * EP, Ks, EP, EP);       // S = Q K^T
        at_wmma_abt(Dw, Gs + w * 16 * EVP, Vs, EVP, EVP);    // dP = dO V^T
        __syncwarp();
        for (int c = 0; c < 16; c++) {
            const int jj = hf * 16 + c;
            const long long j = k0 + jj;
            const float p = at_p(at_score<float>(g, Sw[r * 32 + jj], b, h, i, j), lr);
            Pw[r * 32 + jj] = (TI)(p * (Dw[r * 32 + jj] * at_z<float>(g, seed, off, b, h, i, j) - Dr));
        }
        __syncwarp();
#pragma unroll
        for (int e = 0; e < NJ; e++) {
            if (e * 16 >= EP) break;
            for (int kc = 0; kc < 2; kc++) {
                wmma::load_matrix_sync(fa, Pw + kc * 16, 32);
                wmma::load_matrix_sync(fb, Ks + kc * 16 * EP + e * 16, EP);
                wmma::mma_sync(dq[e], fa, fb, dq[e]);
            }
        }
    }
#pragma unroll
    for (int e = 0; e < NJ; e++)
        if (e * 16 < EP) at_wmma_out(dq[e], g.scalef, Sw, g.dq, b, h, i0 + w * 16, e * 16, g.L, g.E);
#endif
}

template <typename TI, int NJ>
__global__ void __launch_bounds__(AT_BW * 32) sdpa_dkv_wmma_kernel(at_args g, int EP, int EVP)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    extern __shared__ long long at_smem[];
    TI *Kb = (TI *)(((uintptr_t)at_smem + 127) & ~(uintptr_t)127);
    TI *Vb = Kb + AT_BR * EP, *Qt = Vb + AT_BR * EVP, *Gt = Qt + AT_BR * EP;
    float *Ls = (float *)(Gt + AT_BR * EVP), *Ds = Ls + AT_BR;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, hf = lane & 1;
    float *S0 = Ds + AT_BR;                     // per warp: S^T, dP^T (float), P_d^T, dS^T (16-bit)
    float *St = S0 + w * 16 * 32, *dPt = S0 + (AT_BW + w) * 16 * 32;
    TI *T0 = (TI *)(S0 + 2 * AT_BW * 16 * 32), *Pt = T0 + w * 16 * 32, *dSt = T0 + (AT_BW + w) * 16 * 32;
    const long long bk = blockIdx.x / g.nblk, j0 = blockIdx.x % g.nblk * AT_BR;
    const long long b = bk / g.Hk, kh = bk % g.Hk, j = j0 + w * 16 + r;
    at_wmma_rows(Kb, AT_BR, EP, g.k, b, kh, j0, g.S, g.E);
    at_wmma_rows(Vb, AT_BR, EVP, g.v, b, kh, j0, g.S, g.Ev);
    const unsigned long long seed = g.drop_thr ? (unsigned long long)*g.pseed : 0;
    const unsigned long long off = g.drop_thr ? (unsigned long long)*g.poffset : 0;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, TI, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, TI, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk[NJ], dv[NJ];
#pragma unroll
    for (int e = 0; e < NJ; e++) { wmma::fill_fragment(dk[e], 0.0f); wmma::fill_fragment(dv[e], 0.0f); }
    const long long first = g.causal ? j0 / AT_BR * AT_BR : 0;
    for (long long hh = 0; hh < g.group; hh++) {
        const long long h = kh * g.group + hh;
        for (long long t0 = first; t0 < g.L; t0 += AT_BR) {
            __syncthreads();
            at_wmma_rows(Qt, AT_BR, EP, g.q, b, h, t0, g.L, g.E);
            at_wmma_rows(Gt, AT_BR, EVP, g.g, b, h, t0, g.L, g.Ev);
            for (int rr = threadIdx.x; rr < AT_BR; rr += blockDim.x) {   // D and lse of the tile's rows
                Ds[rr] = at_Dv(g, b, h, t0 + rr);
                Ls[rr] = t0 + rr < g.L ? at_ld<float>(g.lse, at_off(g.lse, b, h, t0 + rr, 0)) : -INFINITY;
            }
            __syncthreads();
            if (g.causal && t0 + AT_BR - 1 < j0 + w * 16) continue;   // no row of the tile sees the warp's keys
            at_wmma_abt(St, Kb + w * 16 * EP, Qt, EP, EP);        // S^T = K Q^T
            at_wmma_abt(dPt, Vb + w * 16 * EVP, Gt, EVP, EVP);    // dP^T = V dO^T
            __syncwarp();
            for (int c = 0; c < 16; c++) {
                const int ii = hf * 16 + c;
                const long long i = t0 + ii;
                const float p = at_p(at_score<float>(g, St[r * 32 + ii], b, h, i, j), Ls[ii]);
                const float z = at_z<float>(g, seed, off, b, h, i, j);
                Pt[r * 32 + ii] = (TI)(p * z);
                dSt[r * 32 + ii] = (TI)(p * (dPt[r * 32 + ii] * z - Ds[ii]));
            }
            __syncwarp();
#pragma unroll
            for (int e = 0; e < NJ; e++) {
                for (int qc = 0; qc < 2; qc++) {
                    if (e * 16 < EVP) {
                        wmma::load_matrix_sync(fa, Pt + qc * 16, 32);
                        wmma::load_matrix_sync(fb, Gt + qc * 16 * EVP + e * 16, EVP);
                        wmma::mma_sync(dv[e], fa, fb, dv[e]);
                    }
                    if (e * 16 < EP) {
                        wmma::load_matrix_sync(fa, dSt + qc * 16, 32);
                        wmma::load_matrix_sync(fb, Qt + qc * 16 * EP + e * 16, EP);
                        wmma::mma_sync(dk[e], fa, fb, dk[e]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int e = 0; e < NJ; e++) {
        if (g.dk.p && e * 16 < EP) at_wmma_out(dk[e], g.scalef, St, g.dk, b, kh, j0 + w * 16, e * 16, g.S, g.E);
        if (g.dv.p && e * 16 < EVP) at_wmma_out(dv[e], 1.0f, St, g.dv, b, kh, j0 + w * 16, e * 16, g.S, g.Ev);
    }
#endif
}

template <typename TI>
static void at_launch_bwd_wmma(rgpu_cuda_ctx *c, bool dkv, const at_args &g, unsigned grid, size_t smem, int EP,
                               int EVP)
{
    const int nj = (EP > EVP ? EP : EVP) / 16;
#define AT_BWD_LAUNCH(NJ)                                                                                         \
    do {                                                                                                          \
        if (dkv) sdpa_dkv_wmma_kernel<TI, NJ><<<grid, AT_BW * 32, smem, c->stream>>>(g, EP, EVP);                \
        else sdpa_dq_wmma_kernel<TI, NJ><<<grid, AT_BW * 32, smem, c->stream>>>(g, EP, EVP);                     \
    } while (0)
    if (nj <= 2) AT_BWD_LAUNCH(2);
    else if (nj <= 4) AT_BWD_LAUNCH(4);
    else AT_BWD_LAUNCH(8);
#undef AT_BWD_LAUNCH
}

// The tensor-core kernels take this record: q, k, v, out (and grad_out) of one
// 16-bit dtype, a float32 logsumexp, head dims up to 128; RGPU_CUDA_SDPA_WMMA=0
// turns them off.
static bool at_wmma_ok(const op_sdpa *a)
{
    static int off = -1;
    if (off < 0) {
        const char *env = getenv("RGPU_CUDA_SDPA_WMMA");
        off = env && !strcmp(env, "0");
    }
    int dt = a->q->dtype;
    return !off && (dt == RGPU_F16 || dt == RGPU_BF16) && a->k->dtype == dt && a->v->dtype == dt &&
           a->out->dtype == dt && a->lse->dtype == RGPU_F32 && (!a->bias || rf_opmath_float({ a->bias->dtype })) &&
           (!a->g || a->g->dtype == dt) && a->E <= 128 && a->Ev <= 128;
}

template <typename TI>
static void at_launch_fwd_wmma(rgpu_cuda_ctx *c, const at_args &g, unsigned grid, size_t smem, int EP, int EVP)
{
    const int nj = EVP / 16;
    if (nj <= 2) sdpa_fwd_wmma_kernel<TI, 2><<<grid, AT_WARPS * 32, smem, c->stream>>>(g, EP, EVP);
    else if (nj <= 4) sdpa_fwd_wmma_kernel<TI, 4><<<grid, AT_WARPS * 32, smem, c->stream>>>(g, EP, EVP);
    else sdpa_fwd_wmma_kernel<TI, 8><<<grid, AT_WARPS * 32, smem, c->stream>>>(g, EP, EVP);
}

static rgpu_status at_prepare(const rgpu_exec *e, op_sdpa *a, at_args *g, bool *opf, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_sdpa_check(e, a, err, errlen));
    const char *name = rgpu_op_name(e->op);
    if (a->E > RGPU_SDPA_MAX_HEAD || a->Ev > RGPU_SDPA_MAX_HEAD)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: cuda backend: head dims over %d are not supported yet (got %lld, %lld)",
                     name, RGPU_SDPA_MAX_HEAD, (long long)a->E, (long long)a->Ev);
    memset(g, 0, sizeof *g);
    g->q = op_of(a->q); g->k = op_of(a->k); g->v = op_of(a->v); g->bias = op_of(a->bias);
    g->out = op_of(a->out); g->lse = op_of(a->lse); g->g = op_of(a->g);
    g->dq = op_of(a->dq); g->dk = op_of(a->dk); g->dv = op_of(a->dv);
    g->B = a->B; g->Hq = a->Hq; g->Hk = a->Hk; g->L = a->L; g->S = a->S; g->E = a->E; g->Ev = a->Ev;
    g->group = a->group;
    g->causal = a->causal;
    g->scale = a->scale;
    g->scalef = (float)a->scale;
    g->drop_thr = a->drop_thr;
    g->drop_scale = a->drop_scale;
    g->drop_scalef = (float)a->drop_scale;
    g->pseed = a->pseed ? (const long long *)a->pseed->data : NULL;
    g->poffset = a->poffset ? (const long long *)a->poffset->data : NULL;
    *opf = rf_opmath_float({ a->q->dtype, a->lse->dtype, a->bias ? a->bias->dtype : -1 });
    return RGPU_OK;
}

static rgpu_status at_smem_fits(const char *name, size_t smem, char *err, size_t errlen)
{
    if (smem > AT_SMEM_MAX)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: cuda backend: these head dims need %zu bytes of shared memory "
                     "(over %d; float64 takes head dims up to 64)", name, smem, AT_SMEM_MAX);
    return RGPU_OK;
}

#define AT_GRID_MAX ((1ll << 31) - 1)

rgpu_status rgpu_cuda_dense_sdpa(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_sdpa a;
    at_args g;
    bool opf;
    FORWARD_IF_ERROR(at_prepare(e, &a, &g, &opf, err, errlen));
    const char *name = rgpu_op_name(e->op);
    g.pseed_out = a.pseed_out ? (long long *)a.pseed_out->data : NULL;
    g.poffset_out = a.poffset_out ? (long long *)a.poffset_out->data : NULL;
    g.seed = a.drop_thr ? a.seed : 0;        // no dropout: no Philox state
    g.offset = a.drop_thr ? a.offset : 0;
    g.ph = a.drop_thr ? e->philox : NULL;
    if (g.B * g.Hq * g.L == 0) {             // no block runs: the pair goes up as bytes
        for (int t = 0; g.ph && t < 2; t++) {   // a graph's: copied from its device pair
            long long *p = t ? g.poffset_out : g.pseed_out;
            if (p) RGPU_CUDA_TRY(cudaMemcpyAsync(p, g.ph + t, sizeof *p, cudaMemcpyDeviceToDevice, c->stream), err, errlen);
        }
        for (int t = 0; !g.ph && t < 2; t++) {
            long long *p = t ? g.poffset_out : g.pseed_out;
            const long long v = (long long)(t ? g.offset : g.seed);
            if (p && !v) RGPU_CUDA_TRY(cudaMemsetAsync(p, 0, sizeof v, c->stream), err, errlen);   // a graph may hold it
            else if (p) FORWARD_IF_ERROR(rgpu_cuda_upload_async(c, p, &v, sizeof v, err, errlen));
        }
        return RGPU_OK;
    }
    if (at_wmma_ok(&a)) {
        const int EP = (int)((g.E + 15) / 16 * 16), EVP = (int)((g.Ev + 15) / 16 * 16);
        g.nblk = (g.L + AT_WQ - 1) / AT_WQ;
        const long long grid = g.B * g.Hq * g.nblk;
        if (grid > AT_GRID_MAX)
            RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: cuda backend: %lld blocks is over the grid limit", name, grid);
        const size_t smem = at_wmma_smem(EP, EVP);
        FORWARD_IF_ERROR(at_smem_fits(name, smem, err, errlen));
        if (a.q->dtype == RGPU_F16) at_launch_fwd_wmma<__half>(c, g, (unsigned)grid, smem, EP, EVP);
        else at_launch_fwd_wmma<__nv_bfloat16>(c, g, (unsigned)grid, smem, EP, EVP);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        return RGPU_OK;
    }
    const int bq = AT_WARPS * AT_RF;
    g.nblk = (g.L + bq - 1) / bq;
    const long long grid = g.B * g.Hq * g.nblk;
    if (grid > AT_GRID_MAX)
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: cuda backend: %lld blocks is over the grid limit", name, grid);
    const size_t smem = ((size_t)(bq + AT_TS) * (size_t)g.E + 32 * (size_t)g.Ev) * (opf ? sizeof(float) : sizeof(double));
    FORWARD_IF_ERROR(at_smem_fits(name, smem, err, errlen));
    if (opf) at_launch_fwd<float>(c, g, (unsigned)grid, smem);
    else at_launch_fwd<double>(c, g, (unsigned)grid, smem);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

rgpu_status rgpu_cuda_dense_sdpa_backward(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    op_sdpa a;
    at_args g;
    bool opf;
    FORWARD_IF_ERROR(at_prepare(e, &a, &g, &opf, err, errlen));
    const char *name = rgpu_op_name(e->op);
    if (at_wmma_ok(&a)) {
        const int EP = (int)((g.E + 15) / 16 * 16), EVP = (int)((g.Ev + 15) / 16 * 16);
        const size_t smem = at_wmma_bwd_smem(EP, EVP);
        FORWARD_IF_ERROR(at_smem_fits(name, smem, err, errlen));
        const long long rows = g.B * g.Hq * g.L;
        rgpu_dcu::scratch sc(c);
        if (rows > 0) {
            g.Dbuf = (float *)sc.get(rows, sizeof(float));
            RETURN_ERROR_IF(!g.Dbuf, RGPU_ERR_NOMEM, "%s: out of device memory for D (%lld rows)", name, rows);
            if ((rows + 3) / 4 > AT_GRID_MAX)
                RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: cuda backend: %lld rows is over the grid limit", name, rows);
            sdpa_D_kernel<<<(unsigned)((rows + 3) / 4), 128, 0, c->stream>>>(g);
            RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        }
        for (int dkv = 0; dkv < 2; dkv++) {
            const long long rows = dkv ? g.S : g.L, heads = dkv ? g.Hk : g.Hq;
            if (!(dkv ? (a.dk || a.dv) : a.dq != NULL) || g.B * heads * rows == 0) continue;
            g.nblk = (rows + AT_BR - 1) / AT_BR;
            const long long grid = g.B * heads * g.nblk;
            if (grid > AT_GRID_MAX)
                RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: cuda backend: %lld blocks is over the grid limit", name, grid);
            if (a.q->dtype == RGPU_F16) at_launch_bwd_wmma<__half>(c, dkv, g, (unsigned)grid, smem, EP, EVP);
            else at_launch_bwd_wmma<__nv_bfloat16>(c, dkv, g, (unsigned)grid, smem, EP, EVP);
            RGPU_CUDA_CHECK_LAUNCH(err, errlen);
        }
        return RGPU_OK;
    }
    const size_t es = opf ? sizeof(float) : sizeof(double);
    const int bq = AT_WARPS * AT_RB;
    const size_t smem = (size_t)(bq + AT_TS) * (size_t)(g.E + g.Ev) * es + 64 * es;
    FORWARD_IF_ERROR(at_smem_fits(name, smem, err, errlen));
    if (a.dq && g.B * g.Hq * g.L > 0) {
        g.nblk = (g.L + bq - 1) / bq;
        const long long grid = g.B * g.Hq * g.nblk;
        if (grid > AT_GRID_MAX)
            RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: cuda backend: %lld blocks is over the grid limit", name, grid);
        if (opf) at_launch_dq<float>(c, g, (unsigned)grid, smem);
        else at_launch_dq<double>(c, g, (unsigned)grid, smem);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    if ((a.dk || a.dv) && g.B * g.Hk * g.S > 0) {
        g.nblk = (g.S + bq - 1) / bq;
        const long long grid = g.B * g.Hk * g.nblk;
        if (grid > AT_GRID_MAX)
            RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: cuda backend: %lld blocks is over the grid limit", name, grid);
        if (opf) at_launch_dkv<float>(c, g, (unsigned)grid, smem);
        else at_launch_dkv<double>(c, g, (unsigned)grid, smem);
        RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    }
    return RGPU_OK;
}
