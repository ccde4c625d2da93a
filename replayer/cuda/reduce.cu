// reduce.cu — reductions on the GPU: sum.dim_IntList and mean.dim (CPU
// reference: replayer/cpu/cpu_reduce.c), amax, amin, argmax, argmin,
// max.dim, min.dim, var, std, linalg_vector_norm, any, all, prod and cumsum
// (replayer/cpu/cpu_reduce2.c), and the family's dispatch (softmax.cu,
// norm.cu and loss.cu hold the row ops).
//
// in is (d0, .., dn-1); the listed dims are reduced into out (kept as 1 with
// keepdim, removed otherwise). Argument parsing, validation and messages are
// the CPU's. Accumulation in ATen's opmath: float for float32/float16/bfloat16
// (the CPU reference uses double: the two agree within tolerance), double for
// float64, int64 (wrapping) for integers, a count for bool sums.
//
// One engine runs every reduction: a block of (BX, BY) threads owns BX
// consecutive outputs; thread (x, y) folds the elements y, y + BY, .. of its
// output's reduced range (in row-major order of the reduced dims) and a
// fixed shared-memory tree folds the BY partials. When there are few outputs
// and many elements the reduced range is also split into S chunks (grid.y),
// whose partials a second kernel folds in chunk order. BX, BY and S depend
// only on the shapes, so results are the same bits on every run. With BY = 1
// and S = 1 (short reductions) the order is exactly the CPU's.
#include "reduce.cuh"

#include <type_traits>

// ---------------------------------------------------------------------------
// The engine

enum red_kind {
    RK_MAXF, RK_MINF, RK_MAXI, RK_MINI,            // value + first index
    RK_SUMF, RK_SUMU, RK_COUNT,                    // double / wrapping int64 / non-zero count
    RK_SQDEV,                                      // sum of (x - centre)^2
    RK_NORM0, RK_NORM1, RK_NORM2, RK_NORMINF, RK_NORMNINF, RK_NORMP,
    RK_ANY, RK_ALL, RK_PRODF, RK_PRODU,
};

enum red_fin {
    FIN_F,        // out0 = f
    FIN_U,        // out0 = u
    FIN_MEAN,     // out0 = f / count (NaN for count 0)
    FIN_VAR,      // out0 = f / max(count - correction, 0) (NaN for count 0)
    FIN_STD,      // sqrt of the above
    FIN_SQRT,     // out0 = sqrt(f)
    FIN_POWINV,   // out0 = pow(f, 1 / ord)
    FIN_ARGF,     // out0? = f, out1? = idx
    FIN_ARGI,     // out0? = u, out1? = idx
    FIN_CENTER,   // centre_out[o] = f / count (var's first pass)
};

// Integer kinds: their accumulator is u (and idx); f is never read.
template <int K> struct red_is_int {
    static constexpr bool value = K == RK_MAXI || K == RK_MINI || K == RK_SUMU || K == RK_COUNT || K == RK_ANY ||
                                  K == RK_ALL || K == RK_PRODU;
};

// F: the opmath of the floating kinds (reduce.cuh): float when the input and
// a floating output are float32/float16/bfloat16, double otherwise (float64,
// or integer elements summed into a floating dtype). The integer kinds' f is
// never used: their float instantiation runs on integer and bool operands
// only (rf_int_dtype), the double one on the rest (e.g. a float's non-zero count).
template <typename F> struct red_acc {
    F f;
    unsigned long long u;
    long long idx;    // max/min kinds: index of the best so far, -1 before the first element
};

struct red_args {
    rf_ctr<3> keep;             // over the outputs: in, out0, out1
    rf_ctr<1> red;              // over one output's reduced elements: in
    long long outer, count;
    const void *in;
    int idt;
    void *out0;
    int odt;
    long long *out1;            // int64 indices
    int fin;
    double p;                   // norm: ord; var/std: correction
    float pf;                   // the same in float
    const void *center;         // RK_SQDEV: per output, F
    void *center_out;           // FIN_CENTER, F
    void *partial;              // red_acc<F>[nsplit][outer] when nsplit > 1
    long long nsplit, chunk;
};

// An integer kind's loads and stores: integer and bool operands only in the
// float instantiation (reduce.cuh's rf_*_int), any dtype in the double one.
template <typename F> __device__ __forceinline__ unsigned long long red_ld_u(const void *p, long long i, int dt)
{
    return sizeof(F) == 4 ? rf_ld_int(p, i, dt) : cvt_ld_u64(p, i, dt);
}
template <typename F> __device__ __forceinline__ bool red_ld_b(const void *p, long long i, int dt)
{
    return sizeof(F) == 4 ? rf_ld_int_bool(p, i, dt) : cvt_ld_bool(p, i, dt);
}
template <typename F> __device__ __forceinline__ void red_st_u(void *p, long long i, int dt, unsigned long long v)
{
    if (sizeof(F) == 4) rf_st_int(p, i, dt, v);
    else cvt_st_u64(p, i, dt, v);
}

template <int K, typename F> __device__ __forceinline__ red_acc<F> red_init()
{
    red_acc<F> a;
    a.f = (K == RK_PRODF) ? (F)1 : (F)0;
    a.u = (K == RK_ALL || K == RK_PRODU) ? 1ull : 0ull;
    a.idx = -1;
    return a;
}

// "v beats the best so far" for a max (MAX) or min, NaN winning and sticking;
// the first element always takes (the CPU's step_max_f / step_absmax).
template <bool MAX, typename F> __device__ __forceinline__ void red_step_best(red_acc<F> &a, F v, long long r)
{
    if (a.idx < 0 || (a.f == a.f && (v != v || (MAX ? v > a.f : v < a.f)))) { a.f = v; a.idx = r; }
}

template <int K, typename F> __device__ __forceinline__ void red_step(red_acc<F> &a, const red_args &g, long long off,
                                                                      long long r, F ctr)
{
    if constexpr (K == RK_MAXF) red_step_best<true>(a, rf_ld<F>(g.in, off, g.idt), r);
    else if constexpr (K == RK_MINF) red_step_best<false>(a, rf_ld<F>(g.in, off, g.idt), r);
    else if constexpr (K == RK_NORMINF) red_step_best<true>(a, fabs(rf_ld<F>(g.in, off, g.idt)), r);
    else if constexpr (K == RK_NORMNINF) red_step_best<false>(a, fabs(rf_ld<F>(g.in, off, g.idt)), r);
    else if constexpr (K == RK_MAXI || K == RK_MINI) {
        unsigned long long v = red_ld_u<F>(g.in, off, g.idt);
        bool better = K == RK_MAXI ? (long long)v > (long long)a.u : (long long)v < (long long)a.u;
        if (a.idx < 0 || better) { a.u = v; a.idx = r; }
    }
    else if constexpr (K == RK_SUMF) a.f += rf_ld<F>(g.in, off, g.idt);
    else if constexpr (K == RK_SUMU) a.u += red_ld_u<F>(g.in, off, g.idt);
    else if constexpr (K == RK_COUNT) a.u += red_ld_b<F>(g.in, off, g.idt);
    else if constexpr (K == RK_SQDEV) {
        F d = rf_ld<F>(g.in, off, g.idt) - ctr;
        a.f = rf_add(a.f, rf_mul(d, d));   // as the CPU: no fused multiply-add
    }
    else if constexpr (K == RK_NORM0) a.f += rf_ld<F>(g.in, off, g.idt) != (F)0;
    else if constexpr (K == RK_NORM1) a.f += fabs(rf_ld<F>(g.in, off, g.idt));
    else if constexpr (K == RK_NORM2) {
        F v = rf_ld<F>(g.in, off, g.idt);
        a.f = rf_add(a.f, rf_mul(v, v));
    }
    else if constexpr (K == RK_NORMP) a.f += pow(fabs(rf_ld<F>(g.in, off, g.idt)), rf_pick<F>(g.p, g.pf));
    else if constexpr (K == RK_ANY) a.u |= red_ld_b<F>(g.in, off, g.idt);
    else if constexpr (K == RK_ALL) a.u &= red_ld_b<F>(g.in, off, g.idt);
    else if constexpr (K == RK_PRODF) a.f *= rf_ld<F>(g.in, off, g.idt);
    else if constexpr (K == RK_PRODU) a.u *= red_ld_u<F>(g.in, off, g.idt);
}

// Folds two partials. For the max/min kinds the result is the sequential one
// whatever the fold order: a NaN beats numbers (the first NaN among NaNs),
// otherwise the larger (smaller) value, ties to the smaller index.
template <int K, typename F> __device__ __forceinline__ red_acc<F> red_combine(red_acc<F> a, red_acc<F> b)
{
    if constexpr (K == RK_MAXF || K == RK_MINF || K == RK_NORMINF || K == RK_NORMNINF) {
        const bool mx = K == RK_MAXF || K == RK_NORMINF;
        if (b.idx < 0) return a;
        if (a.idx < 0) return b;
        bool an = a.f != a.f, bn = b.f != b.f;
        if (an || bn) {
            if (an && bn) return a.idx <= b.idx ? a : b;
            return an ? a : b;
        }
        if (mx ? a.f > b.f : a.f < b.f) return a;
        if (mx ? b.f > a.f : b.f < a.f) return b;
        return a.idx <= b.idx ? a : b;
    } else if constexpr (K == RK_MAXI || K == RK_MINI) {
        if (b.idx < 0) return a;
        if (a.idx < 0) return b;
        long long av = (long long)a.u, bv = (long long)b.u;
        if (K == RK_MAXI ? av > bv : av < bv) return a;
        if (K == RK_MAXI ? bv > av : bv < av) return b;
        return a.idx <= b.idx ? a : b;
    } else {
        red_acc<F> r = a;
        if constexpr (K == RK_SUMU || K == RK_COUNT) r.u = a.u + b.u;
        else if constexpr (K == RK_ANY) r.u = a.u | b.u;
        else if constexpr (K == RK_ALL) r.u = a.u & b.u;
        else if constexpr (K == RK_PRODU) r.u = a.u * b.u;
        else if constexpr (K == RK_PRODF) r.f = a.f * b.f;
        else r.f = a.f + b.f;
        return r;
    }
}

template <int K, typename F> static __device__ void red_finish(const red_args &g, long long o, const red_acc<F> &a)
{
    long long off[3];
    if constexpr (red_is_int<K>::value) {   // FIN_U, FIN_ARGI
        rf_ctr_offs(g.keep, o, off);
        if (g.out0) red_st_u<F>(g.out0, off[1], g.odt, a.u);
        if (g.fin == FIN_ARGI && g.out1) g.out1[off[2]] = a.idx;
    } else {
        const F n = (F)g.count;
        if (g.fin == FIN_CENTER) { ((F *)g.center_out)[o] = a.f / n; return; }
        rf_ctr_offs(g.keep, o, off);
        switch (g.fin) {
        case FIN_F: rf_st(g.out0, off[1], g.odt, a.f); break;
        case FIN_MEAN: rf_st(g.out0, off[1], g.odt, g.count > 0 ? a.f / n : (F)NAN); break;
        case FIN_VAR: case FIN_STD: {
            F dof = n - rf_pick<F>(g.p, g.pf);
            F var = a.f / (dof > (F)0 ? dof : (F)0);
            if (g.count == 0) var = NAN;
            rf_st(g.out0, off[1], g.odt, g.fin == FIN_STD ? sqrt(var) : var);
            break;
        }
        case FIN_SQRT: rf_st(g.out0, off[1], g.odt, sqrt(a.f)); break;
        case FIN_POWINV: rf_st(g.out0, off[1], g.odt, pow(a.f, (F)1 / rf_pick<F>(g.p, g.pf))); break;
        case FIN_ARGF:
            if (g.out0) rf_st(g.out0, off[1], g.odt, a.f);
            if (g.out1) g.out1[off[2]] = a.idx;
            break;
        default: break;
        }
    }
}

template <int K, typename F> __global__ void red_kernel(red_args g)
{
    extern __shared__ long long red_smem[];   // red_acc<F>[BY][BX] when BY > 1
    red_acc<F> *const red_sh = (red_acc<F> *)red_smem;
    const int x = threadIdx.x, y = threadIdx.y, BX = blockDim.x, BY = blockDim.y;
    const long long s = blockIdx.y;
    const long long r0 = s * g.chunk;
    const long long r1 = min(g.count, r0 + g.chunk);
    const long long nblk = (g.outer + BX - 1) / BX;
    for (long long b = blockIdx.x; b < nblk; b += gridDim.x) {
        const long long o = b * BX + x;
        red_acc<F> a = red_init<K, F>();
        if (o < g.outer) {
            long long ko[3];
            rf_ctr_offs(g.keep, o, ko);
            const F ctr = g.center ? ((const F *)g.center)[o] : (F)0;
            for (long long r = r0 + y; r < r1; r += BY) {
                long long ro[1];
                rf_ctr_offs(g.red, r, ro);
                red_step<K, F>(a, g, ko[0] + ro[0], r, ctr);
            }
        }
        if (BY > 1) {
            red_sh[y * BX + x] = a;
            __syncthreads();
            for (int st = BY / 2; st > 0; st >>= 1) {
                if (y < st) red_sh[y * BX + x] = red_combine<K, F>(red_sh[y * BX + x], red_sh[(y + st) * BX + x]);
                __syncthreads();
            }
            a = red_sh[x];
        }
        if (y == 0 && o < g.outer) {
            if (g.nsplit > 1) ((red_acc<F> *)g.partial)[s * g.outer + o] = a;
            else red_finish<K, F>(g, o, a);
        }
        __syncthreads();   // red_sh is reused by the next output block
    }
}

// Folds the nsplit partials of each output in chunk order.
template <int K, typename F> __global__ void red_combine_kernel(red_args g)
{
    const red_acc<F> *const partial = (const red_acc<F> *)g.partial;
    for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < g.outer;
         o += (long long)gridDim.x * blockDim.x) {
        red_acc<F> a = partial[o];
        for (long long s = 1; s < g.nsplit; s++) a = red_combine<K, F>(a, partial[s * g.outer + o]);
        red_finish<K, F>(g, o, a);
    }
}

template <int K, typename F>
static void red_launch(const red_args &g, dim3 grid, dim3 block, size_t shmem, cudaStream_t st, bool second)
{
    if (second) {
        long long nb = (g.outer + 255) / 256;
        if (nb > RF_MAX_GRID) nb = RF_MAX_GRID;
        red_combine_kernel<K, F><<<(unsigned)nb, 256, 0, st>>>(g);
    } else {
        red_kernel<K, F><<<grid, block, shmem, st>>>(g);
    }
}

// opf: the float instantiation (floating kinds: float opmath; integer
// kinds: integer and bool operands only), else the double one.
static void red_launch_kind(int kind, bool opf, const red_args &g, dim3 grid, dim3 block, size_t shmem,
                            cudaStream_t st, bool second)
{
    switch (kind) {
#define RK_CASE(k) case k: \
        if (opf) red_launch<k, float>(g, grid, block, shmem, st, second); \
        else red_launch<k, double>(g, grid, block, shmem, st, second); \
        break;
    RK_CASE(RK_MAXF) RK_CASE(RK_MINF) RK_CASE(RK_MAXI) RK_CASE(RK_MINI)
    RK_CASE(RK_SUMF) RK_CASE(RK_SUMU) RK_CASE(RK_COUNT) RK_CASE(RK_SQDEV)
    RK_CASE(RK_NORM0) RK_CASE(RK_NORM1) RK_CASE(RK_NORM2) RK_CASE(RK_NORMINF) RK_CASE(RK_NORMNINF)
    RK_CASE(RK_NORMP) RK_CASE(RK_ANY) RK_CASE(RK_ALL) RK_CASE(RK_PRODF) RK_CASE(RK_PRODU)
#undef RK_CASE
    default: break;
    }
}

static bool red_kind_is_int(int kind)
{
    return kind == RK_MAXI || kind == RK_MINI || kind == RK_SUMU || kind == RK_COUNT || kind == RK_ANY ||
           kind == RK_ALL || kind == RK_PRODU;
}

// The opmath of a floating reduction of g: float when the input and a
// floating output are float32/float16/bfloat16 (reduce.cuh's rf_opmath_float).
static bool red_opmath_float(const red_args &g)
{
    return rf_opmath_float({ g.idt, g.out0 ? g.odt : -1 });
}

// Runs one reduction (g.keep, g.red, outer, count and the operands set;
// outer > 0), its floating kinds in opf's opmath. Picks the block shape and
// split from the shapes alone.
static rgpu_status red_run(rgpu_cuda_ctx *c, const char *name, int kind, bool opf, red_args g, char *err,
                           size_t errlen)
{
    if (red_kind_is_int(kind)) opf = rf_all_int({ g.idt, g.out0 ? g.odt : -1 });
    const size_t acc_size = opf ? sizeof(red_acc<float>) : sizeof(red_acc<double>);
    int BX, BY;
    const bool keep_unit = g.keep.n > 0 && g.keep.st[0][g.keep.n - 1] == 1;
    const bool red_unit = g.red.n > 0 && g.red.st[0][g.red.n - 1] == 1;
    if (g.count <= 16) {                        // short: one thread per output, the CPU's order
        BX = 128; BY = 1;
    } else if (keep_unit && !red_unit) {        // columns: neighbouring outputs are neighbours in memory
        BX = 32; BY = 8;
    } else {                                    // rows: a block per output
        BX = 1; BY = 32;
        while (BY < 256 && BY < g.count) BY *= 2;
    }
    long long nblk = (g.outer + BX - 1) / BX;
    long long S = 1;
    if (g.count >= 4096 && nblk < 256) {
        long long per = (long long)BY * 32;           // at least 32 elements per thread
        long long cap = (512 + nblk - 1) / nblk;
        S = (g.count + per - 1) / per;
        if (S > cap) S = cap;
        if (S < 1) S = 1;
    }
    g.chunk = g.count > 0 ? (g.count + S - 1) / S : 0;
    if (g.count > 0) S = (g.count + g.chunk - 1) / g.chunk;
    g.nsplit = S;
    g.partial = NULL;
    if (S > 1) {
        g.partial = rgpu_cuda_scratch(c, (size_t)S * (size_t)g.outer * acc_size);
        if (g.partial == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of device memory for partial results", name);
    }
    dim3 grid((unsigned)(nblk > RF_MAX_GRID ? RF_MAX_GRID : nblk), (unsigned)S);
    dim3 block((unsigned)BX, (unsigned)BY);
    size_t shmem = BY > 1 ? (size_t)BX * BY * acc_size : 0;
    red_launch_kind(kind, opf, g, grid, block, shmem, c->stream, false);
    cudaError_t ce = cudaGetLastError();
    if (ce == cudaSuccess && S > 1) {
        red_launch_kind(kind, opf, g, grid, block, 0, c->stream, true);
        ce = cudaGetLastError();
    }
    if (g.partial) rgpu_cuda_scratch_free(c, g.partial);
    RGPU_CUDA_TRY(ce, err, errlen);
    return RGPU_OK;
}

// Kept dims (sizes, in strides, out strides per output) and reduced dims
// (sizes, in strides) as collected by a plan builder, into g.
struct red_dims {
    int nk, nr;
    int64_t ksz[RF_MAXD], kin[RF_MAXD], kout[2][RF_MAXD];
    int64_t rsz[RF_MAXD], rin[RF_MAXD];
};

static void red_args_set(red_args *g, const red_dims *d)
{
    memset(g, 0, sizeof *g);
    rf_ctr_build(&g->keep, d->nk, d->ksz, { d->kin, d->kout[0], d->kout[1] });
    g->outer = g->keep.total;   // coalescing keeps the total
    rf_ctr_build(&g->red, d->nr, d->rsz, { d->rin });
    g->count = g->red.total;
}

// ---------------------------------------------------------------------------
// sum.dim_IntList, mean.dim (cpu_reduce.c)

static rgpu_status op_sum_mean(rgpu_cuda_ctx *c, const rgpu_exec *e, bool mean, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    op_reduce2_args ra;
    FORWARD_IF_ERROR(rgpu_op_sum_mean_parse(e, mean, &ra, err, errlen));
    int nd = in->ndim;

    red_dims rd;
    memset(&rd, 0, sizeof rd);
    int ond = 0;
    for (int d = 0; d < nd; d++) {
        int64_t want = ra.red[d] ? 1 : in->sizes[d];
        if (ra.red[d] && !ra.keepdim) {
            rd.rsz[rd.nr] = in->sizes[d]; rd.rin[rd.nr++] = in->strides[d];
            continue;
        }
        if (ond >= out->ndim || out->sizes[ond] != want)
            break;   // reported below
        if (ra.red[d]) {
            rd.rsz[rd.nr] = in->sizes[d]; rd.rin[rd.nr++] = in->strides[d];
        } else {
            rd.ksz[rd.nk] = in->sizes[d]; rd.kin[rd.nk] = in->strides[d];
            rd.kout[0][rd.nk++] = out->strides[ond];
        }
        ond++;
    }
    int want_nd = 0;
    for (int d = 0; d < nd; d++) want_nd += (!ra.red[d] || ra.keepdim);
    if (ond != want_nd || out->ndim != want_nd)
        return rgpu_op_reduce_bad_out(name, in, out, ra.red, ra.keepdim, err, errlen);
    red_args g;
    red_args_set(&g, &rd);
    if (g.outer == 0) return RGPU_OK;
    g.in = in->data; g.idt = in->dtype;
    g.out0 = out->data; g.odt = out->dtype;
    int kind;
    if (op_dtype_is_float(out->dtype)) { kind = RK_SUMF; g.fin = mean ? FIN_MEAN : FIN_F; }
    else { kind = out->dtype == RGPU_BOOL ? RK_COUNT : RK_SUMU; g.fin = FIN_U; }
    return red_run(c, name, kind, red_opmath_float(g), g, err, errlen);
}

// ---------------------------------------------------------------------------
// amax, amin, var, std, linalg_vector_norm, any, all, prod (cpu_reduce2.c)

// The CPU's plan_build: fills g (op/reduce has checked the outs' shapes).
static void plan_build(red_args *g, const rgpu_view *in, const bool *red, bool keepdim,
                       rgpu_view *const *outs, int nout)
{
    int nd = in->ndim, ond = 0;
    red_dims rd;
    memset(&rd, 0, sizeof rd);
    for (int d = 0; d < nd; d++) {
        if (red[d]) {
            rd.rsz[rd.nr] = in->sizes[d]; rd.rin[rd.nr++] = in->strides[d];
            ond += keepdim;
            continue;
        }
        rd.ksz[rd.nk] = in->sizes[d]; rd.kin[rd.nk] = in->strides[d];
        for (int k = 0; k < nout; k++) rd.kout[k][rd.nk] = outs[k] ? outs[k]->strides[ond] : 0;
        rd.nk++;
        ond++;
    }
    red_args_set(g, &rd);
}

static rgpu_status op_reduce(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    op_reduce2_args ra;
    FORWARD_IF_ERROR(rgpu_op_reduce2_parse(e, &ra, err, errlen));
    red_args g;
    plan_build(&g, in, ra.red, ra.keepdim, &out, 1);

    int idt = in->dtype, odt = out->dtype;
    bool fl = ra.fl;
    int kind = RK_SUMF;
    bool is_var = false;
    switch (e->op) {
    case RGPU_OP_AMAX: kind = fl ? RK_MAXF : RK_MAXI; g.fin = fl ? FIN_F : FIN_U; break;
    case RGPU_OP_AMIN: kind = fl ? RK_MINF : RK_MINI; g.fin = fl ? FIN_F : FIN_U; break;
    case RGPU_OP_ANY: kind = RK_ANY; g.fin = FIN_U; break;
    case RGPU_OP_ALL: kind = RK_ALL; g.fin = FIN_U; break;
    case RGPU_OP_PROD:
        kind = fl ? RK_PRODF : RK_PRODU;
        g.fin = fl ? FIN_F : FIN_U;
        break;
    case RGPU_OP_VAR: case RGPU_OP_STD:
        is_var = true;
        break;
    case RGPU_OP_NORM:
        kind = RK_NORM0 + ra.norm;
        g.fin = ra.norm == OP_NORM_2 ? FIN_SQRT : ra.norm == OP_NORM_P ? FIN_POWINV : FIN_F;
        break;
    default: break;
    }
    if (g.outer == 0) return RGPU_OK;
    g.in = in->data; g.idt = idt;
    g.out0 = out->data; g.odt = odt;
    g.p = ra.ord;
    g.pf = (float)ra.ord;
    const bool opf = red_opmath_float(g);
    if (!is_var) return red_run(c, name, kind, opf, g, err, errlen);

    // var / std: two passes in the opmath, the first writing each output's mean
    void *centre = rgpu_cuda_scratch(c, (size_t)g.outer * (opf ? sizeof(float) : sizeof(double)));
    if (centre == NULL) RETURN_ERROR(RGPU_ERR_NOMEM, "%s: out of device memory for %lld means", name, g.outer);
    red_args g1 = g;
    g1.fin = FIN_CENTER;
    g1.center_out = centre;
    rgpu_status st = red_run(c, name, RK_SUMF, opf, g1, err, errlen);
    if (st == RGPU_OK) {
        g.center = centre;
        g.p = ra.correction;
        g.pf = (float)ra.correction;
        g.fin = e->op == RGPU_OP_STD ? FIN_STD : FIN_VAR;
        st = red_run(c, name, RK_SQDEV, opf, g, err, errlen);
    }
    rgpu_cuda_scratch_free(c, centre);
    return st;
}

// ---------------------------------------------------------------------------
// argmax, argmin (dim or flattened), max.dim, min.dim

static rgpu_status op_argreduce(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    const char *name = rgpu_op_name(e->op);
    bool is_max = e->op == RGPU_OP_ARGMAX || e->op == RGPU_OP_MAX_DIM;
    const rgpu_view *in = e->in[0];
    op_reduce2_args ra;
    FORWARD_IF_ERROR(rgpu_op_argreduce_parse(e, &ra, err, errlen));
    red_args g;
    plan_build(&g, in, ra.red, ra.keepdim, ra.outs, 2);
    const rgpu_view *vals = ra.outs[0], *idxs = ra.outs[1];
    if (g.outer == 0) return RGPU_OK;
    bool fl = op_dtype_is_float(in->dtype);
    g.in = in->data; g.idt = in->dtype;
    g.out0 = vals ? vals->data : NULL;
    g.odt = vals ? vals->dtype : 0;
    g.out1 = idxs ? (long long *)idxs->data : NULL;
    g.fin = fl ? FIN_ARGF : FIN_ARGI;
    int kind = fl ? (is_max ? RK_MAXF : RK_MINF) : (is_max ? RK_MAXI : RK_MINI);
    return red_run(c, name, kind, red_opmath_float(g), g, err, errlen);
}

// ---------------------------------------------------------------------------
// cumsum: out[.., i, ..] = sum_{j <= i} in[.., j, ..] along dim. As ATen:
// each element is first cast to out's dtype, then accumulated in float for
// f32/f16/bf16 (ATen's CUDA; the CPU's double for f32 where float64 is
// involved), double for f64, int64 (wrapping) for integers, or for bool. One thread per line, sequential along the dim (the CPU's order,
// and an in-place run reads each element before overwriting it).

struct cumsum_args {
    rf_ctr<2> lines;    // in, out over every dim but the scan dim
    long long n, is, os;
    const void *in;
    void *out;
    int idt, odt;
};

// T: float (in and out float32/float16/bfloat16: a float sum, ATen's CUDA
// opmath; the CPU reference sums float32 in double), unsigned long long
// (integer and bool operands), double (the rest, float64 among them: the
// generic conversions, a double sum for f32/f64 outputs).
template <typename T> __global__ void cumsum_kernel(cumsum_args a)
{
    const bool same = a.idt == a.odt;
    for (long long l = (long long)blockIdx.x * blockDim.x + threadIdx.x; l < a.lines.total;
         l += (long long)gridDim.x * blockDim.x) {
        long long off[2];
        rf_ctr_offs(a.lines, l, off);
        if constexpr (std::is_same<T, float>::value) {
            float acc = 0.0f;
            for (long long i = 0; i < a.n; i++) {
                float v = rf_ld<float>(a.in, off[0] + i * a.is, a.idt);
                if (!same) {   // cast to out's dtype first
                    uint32_t t = 0;
                    rf_st(&t, 0, a.odt, v);
                    v = rf_ld<float>(&t, 0, a.odt);
                }
                acc += v;
                rf_st(a.out, off[1] + i * a.os, a.odt, acc);
            }
        } else if constexpr (std::is_same<T, unsigned long long>::value) {
            unsigned long long acc = 0;
            for (long long i = 0; i < a.n; i++) {
                unsigned long long v = rf_ld_int(a.in, off[0] + i * a.is, a.idt);
                if (!same) {
                    unsigned long long t = 0;
                    rf_st_int(&t, 0, a.odt, v);
                    v = rf_ld_int(&t, 0, a.odt);
                }
                if (a.odt == RGPU_BOOL) acc |= v;
                else acc += v;
                rf_st_int(a.out, off[1] + i * a.os, a.odt, acc);
            }
        } else {
            const bool ifl = op_dtype_is_float(a.idt);
            double accd = 0.0;
            float accf = 0.0f;
            unsigned long long accu = 0;
            for (long long i = 0; i < a.n; i++) {
                const long long io = off[0] + i * a.is, oo = off[1] + i * a.os;
                // the element cast to out's dtype: in itself when the dtypes agree,
                // else stored into v in out's dtype and read back from there
                unsigned long long v = 0;
                const void *src = a.in;
                long long si = io;
                if (!same) {
                    if (ifl) cvt_st_f64(&v, 0, a.odt, cvt_ld_f64(a.in, io, a.idt));
                    else cvt_st_u64(&v, 0, a.odt, cvt_ld_u64(a.in, io, a.idt));
                    src = &v;
                    si = 0;
                }
                switch (a.odt) {
                case RGPU_F32: case RGPU_F64:
                    accd += cvt_ld_f64(src, si, a.odt);
                    cvt_st_f64(a.out, oo, a.odt, accd);
                    break;
                case RGPU_F16: case RGPU_BF16:
                    accf += cvt_ld_f32(src, si, a.odt);
                    cvt_st_f32(a.out, oo, a.odt, accf);
                    break;
                case RGPU_BOOL:
                    accu |= cvt_ld_bool(src, si, a.odt);
                    cvt_st_u64(a.out, oo, a.odt, accu);
                    break;
                default:
                    accu += cvt_ld_u64(src, si, a.odt);
                    cvt_st_u64(a.out, oo, a.odt, accu);
                    break;
                }
            }
        }
    }
}

static rgpu_status op_cumsum(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    const rgpu_view *in = e->in[0];
    rgpu_view *out = e->out[0];
    int dim;
    int64_t osz[RF_MAXD];   /* the lines: in's sizes, the scan dim's set to 1 */
    FORWARD_IF_ERROR(rgpu_op_cumsum_check(e, &dim, osz, err, errlen));
    cumsum_args a;
    rf_ctr_build(&a.lines, in->ndim, osz, { in->strides, out->strides });
    a.n = 1; a.is = 0; a.os = 0;
    if (in->ndim > 0) { a.n = in->sizes[dim]; a.is = in->strides[dim]; a.os = out->strides[dim]; }
    if (a.lines.total == 0 || a.n == 0) return RGPU_OK;
    a.in = in->data; a.out = out->data;
    a.idt = in->dtype; a.odt = out->dtype;
    long long nb = (a.lines.total + 127) / 128;
    if (nb > RF_MAX_GRID) nb = RF_MAX_GRID;
    if (rf_opmath_float({ a.idt, a.odt })) cumsum_kernel<float><<<(unsigned)nb, 128, 0, c->stream>>>(a);
    else if (rf_all_int({ a.idt, a.odt })) cumsum_kernel<unsigned long long><<<(unsigned)nb, 128, 0, c->stream>>>(a);
    else cumsum_kernel<double><<<(unsigned)nb, 128, 0, c->stream>>>(a);
    RGPU_CUDA_CHECK_LAUNCH(err, errlen);
    return RGPU_OK;
}

// ---------------------------------------------------------------------------
// The family

extern "C" rgpu_status rgpu_cuda_reduce_exec(rgpu_cuda_ctx *c, const rgpu_exec *e, char *err, size_t errlen)
{
    FORWARD_IF_ERROR(rgpu_op_exec_begin(e, "cuda", err, errlen));
    switch (e->op) {
    case RGPU_OP_SUM: case RGPU_OP_MEAN:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, false, err, errlen));
        return op_sum_mean(c, e, e->op == RGPU_OP_MEAN, err, errlen);
    case RGPU_OP_AMAX: case RGPU_OP_AMIN: case RGPU_OP_VAR: case RGPU_OP_STD:
    case RGPU_OP_NORM: case RGPU_OP_ANY: case RGPU_OP_ALL: case RGPU_OP_PROD:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, true, err, errlen));
        return op_reduce(c, e, err, errlen);
    case RGPU_OP_ARGMAX: case RGPU_OP_ARGMIN:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, true, err, errlen));
        return op_argreduce(c, e, err, errlen);
    case RGPU_OP_MAX_DIM: case RGPU_OP_MIN_DIM:   // either output may be unwanted
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 3u, true, err, errlen));
        return op_argreduce(c, e, err, errlen);
    case RGPU_OP_CUMSUM:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, true, err, errlen));
        return op_cumsum(c, e, err, errlen);
    case RGPU_OP_SOFTMAX: case RGPU_OP_LOG_SOFTMAX:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, true, err, errlen));
        return rgpu_cuda_red_softmax(c, e, e->op == RGPU_OP_LOG_SOFTMAX, err, errlen);
    case RGPU_OP_SOFTMAX_BACKWARD: case RGPU_OP_LOG_SOFTMAX_BACKWARD:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, true, err, errlen));
        return rgpu_cuda_red_softmax_backward(c, e, e->op == RGPU_OP_LOG_SOFTMAX_BACKWARD, err, errlen);
    case RGPU_OP_LAYER_NORM:   // weight, bias optional; mean, rstd may be unwanted
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 6u, 6u, true, err, errlen));
        return rgpu_cuda_red_layer_norm(c, e, err, errlen);
    case RGPU_OP_LAYER_NORM_BACKWARD:   // weight, bias optional; each output optional
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0x30u, 7u, true, err, errlen));
        return rgpu_cuda_red_layer_norm_backward(c, e, err, errlen);
    case RGPU_OP_RMS_NORM:   // weight optional; rstd may be unwanted
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 2u, 2u, true, err, errlen));
        return rgpu_cuda_red_rms_norm(c, e, err, errlen);
    case RGPU_OP_RMS_NORM_BACKWARD:   // weight optional; each output optional
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 8u, 3u, true, err, errlen));
        return rgpu_cuda_red_rms_norm_backward(c, e, err, errlen);
    case RGPU_OP_CROSS_ENTROPY:   // weight optional; total_weight may be unwanted
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 4u, 2u, true, err, errlen));
        return rgpu_cuda_red_cross_entropy(c, e, err, errlen);
    case RGPU_OP_CROSS_ENTROPY_BACKWARD:   // weight optional
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 8u, 0, true, err, errlen));
        return rgpu_cuda_red_cross_entropy_backward(c, e, err, errlen);
    case RGPU_OP_NLL_LOSS:   // weight optional; total_weight may be unwanted
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 4u, 2u, true, err, errlen));
        return rgpu_cuda_red_nll_loss(c, e, err, errlen);
    case RGPU_OP_NLL_LOSS_BACKWARD:   // weight optional
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 8u, 0, true, err, errlen));
        return rgpu_cuda_red_nll_loss_backward(c, e, err, errlen);
    case RGPU_OP_CTC_LOSS:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, true, err, errlen));
        return rgpu_cuda_red_ctc_loss(c, e, err, errlen);
    case RGPU_OP_CTC_LOSS_BACKWARD:
        FORWARD_IF_ERROR(rgpu_op_check_exec(e, 0, 0, true, err, errlen));
        return rgpu_cuda_red_ctc_loss_backward(c, e, err, errlen);
    default:
        RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "the cuda backend has no kernel for %s in the reduce family",
                rgpu_op_name(e->op));
    }
}
