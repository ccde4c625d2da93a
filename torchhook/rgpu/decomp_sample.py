"""Decompositions of pooling, upsampling and grid sampling.

Everything here is separable or an index scatter, so it needs no kernel of
its own:
  max-pool backward (max_pool3d, adaptive_max_pool2d/3d, fractional_max_pool2d/3d):
      a scatter_add of grad into x's flattened spatial dims at the saved indices
  adaptive_max_pool2d (any sizes): gathered windows, max over the window dim
  upsample_* (nearest, nearest-exact, linear, bilinear, bicubic, trilinear,
  anti-aliased) forward and backward, avg_pool3d and adaptive_avg_pool3d
  forward and backward: per spatial dim a (out, in) interpolation matrix M,
      y = M x along that dim, dx = M^T dy. M comes from PyTorch's own CPU
      kernel run on a one-hot input (so its indices and weights are ATen's,
      bit for bit), on the host; the device sees a few uploads, index_select /
      index_add per tap (or a matmul when a row has many taps)
  fractional_max_pool2d/3d: window starts from the samples on the device
  grid_sampler_3d, grid_sampler_2d/3d_backward: gathered corners, scatter_add
(3-d convolution is the convolution kernel's, both backends.)
TABLE maps each aten overload to its function; decomp.py merges it."""
import functools
import math

import torch

aten = torch.ops.aten


def _acc_dtype(dt):
    return torch.float32 if dt in (torch.float16, torch.bfloat16) else dt


def _upload(t, device):
    return t.to(device)


# --- per-dim linear maps ---------------------------------------------------------------

@functools.lru_cache(maxsize=256)
def _matrix(kind, n_in, n_out, extra, dtype):
    """(n_out, n_in) CPU matrix of one spatial dim of a separable op, from ATen's
    CPU kernel on a one-hot input: channel c holds e_c along the dim."""
    x = torch.eye(n_in, dtype=dtype).unsqueeze(0)           # (1, C=n_in, L=n_in)
    if kind[0] == "up":                                       # ("up", aten op name, sp)
        op, sp = kind[1], kind[2]
        # the dim measured is put last; the other dims are size 1 (in and out)
        xs = x.reshape((1, n_in) + (1,) * (sp - 1) + (n_in,))
        out_size = [1] * (sp - 1) + [n_out]
        align, scale = extra
        scales = [None] * (sp - 1) + [scale]
        f = getattr(aten, op).default
        if align is None:
            y = f(xs, out_size, *scales)
        else:
            y = f(xs, out_size, align, *scales)
    elif kind[0] == "avg":                                    # ("avg",)
        k, s, p, ceil, cip = extra
        y = torch.nn.functional.avg_pool1d(x, k, s, p, ceil, cip)
    else:                                                     # ("adaptive_avg",)
        y = torch.nn.functional.adaptive_avg_pool1d(x, n_out)
    y = y.reshape(n_in, n_out)
    assert y.shape[1] == n_out
    return y.t().contiguous()


@functools.lru_cache(maxsize=256)
def _taps(M):
    """M (n_out, n_in) as T taps: idx (T, n_out) int64, w (T, n_out), or None
    when a row has more than 4 taps (then a matmul is used)."""
    nz = M != 0
    T = int(nz.sum(1).max()) if M.numel() else 0
    if T > 4:
        return None
    T = max(T, 1)
    n_out = M.shape[0]
    idx = torch.zeros(T, n_out, dtype=torch.int64)
    w = torch.zeros(T, n_out, dtype=M.dtype)
    for o in range(n_out):
        cols = nz[o].nonzero().flatten().tolist()
        for t, c in enumerate(cols):
            idx[t, o] = c
            w[t, o] = M[o, c]
    return idx, w


def _apply(x, dim, M, transpose):
    """x with dim mapped by M (n_out, n_in): y = M x, or M^T x when transpose."""
    n_out, n_in = M.shape
    size_out = n_in if transpose else n_out
    acc = _acc_dtype(x.dtype)
    shape = list(x.shape)
    shape[dim] = size_out
    if x.numel() == 0 or size_out == 0 or x.shape[dim] == 0:
        return x.new_zeros(shape, dtype=acc)
    tp = _taps(M)
    wshape = [1] * x.dim()
    if tp is None:
        Md = _upload(M.to(acc), x.device)
        xm = x.to(acc).movedim(dim, -1)
        y = xm @ (Md if transpose else Md.t())
        return y.movedim(-1, dim)
    idx, w = tp
    idx_d = _upload(idx, x.device)
    ones = bool((w == 1).all())                          # nearest: no weights to apply
    w_d = None if ones else _upload(w.to(acc), x.device)
    wshape[dim] = n_out

    def weighted(v, t):
        return v if ones else v * w_d[t].reshape(wshape)
    if not transpose:
        y = None
        for t in range(idx.shape[0]):
            term = weighted(x.index_select(dim, idx_d[t]).to(acc), t)
            y = term if y is None else y + term
        return y
    y = x.new_zeros(shape, dtype=acc)
    for t in range(idx.shape[0]):
        y = y.index_add(dim, idx_d[t], weighted(x.to(acc), t))
    return y


def _separable(x, mats, transpose, out_dtype):
    sp = len(mats)
    y = x
    for j in range(sp):
        y = _apply(y, x.dim() - sp + j, mats[j], transpose)
    return y.to(out_dtype)


def _scalar_or_none(s):
    return None if s is None else float(s)


# --- upsample ---------------------------------------------------------------------------

def _up_mats(op, sp, in_sizes, out_sizes, align, scales, dtype):
    dt = torch.float64 if dtype == torch.float64 else torch.float32
    scales = list(scales) if scales is not None else [None] * sp
    return [_matrix(("up", op, sp), int(in_sizes[j]), int(out_sizes[j]),
                    (align, _scalar_or_none(scales[j])), dt) for j in range(sp)]


def _upsample_fwd(op, sp, has_align):
    def f(x, output_size, *rest):
        align = rest[0] if has_align else None
        scales = rest[1:] if has_align else rest
        scales = list(scales) + [None] * (sp - len(scales))
        mats = _up_mats(op, sp, x.shape[-sp:], output_size, align, scales, x.dtype)
        return _separable(x, mats, False, x.dtype)
    return f


def _upsample_bwd(op, sp, has_align):
    def f(grad, output_size, input_size, *rest):
        align = rest[0] if has_align else None
        scales = rest[1:] if has_align else rest
        scales = list(scales) + [None] * (sp - len(scales))
        mats = _up_mats(op, sp, input_size[-sp:], output_size, align, scales, grad.dtype)
        return _separable(grad, mats, True, grad.dtype)
    return f


# --- avg pooling ----------------------------------------------------------------------

def _tuple(v, n):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v


def _avg_mats(x_sizes, kernel, stride, padding, ceil_mode, cip, dtype):
    sp = len(x_sizes)
    k = _tuple(kernel, sp)
    s = _tuple(stride, sp) if stride else k
    p = _tuple(padding, sp)
    dt = torch.float64 if dtype == torch.float64 else torch.float32
    mats = []
    for j in range(sp):
        # n_out is what avg_pool1d gives; found by a probe through the cache key
        probe = torch.nn.functional.avg_pool1d(torch.zeros(1, 1, int(x_sizes[j]), dtype=dt), k[j], s[j], p[j],
                                               ceil_mode, cip)
        mats.append(_matrix(("avg",), int(x_sizes[j]), probe.shape[-1],
                            (int(k[j]), int(s[j]), int(p[j]), bool(ceil_mode), bool(cip)), dt))
    return mats


def _divisor_fix(mats, divisor_override):
    """With divisor_override: every tap weighs 1/divisor overall (1 per dim, then
    one scale)."""
    if divisor_override is None:
        return mats, 1.0
    return [(m != 0).to(m.dtype) for m in mats], 1.0 / float(divisor_override)


def _avg_pool3d_map(t, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                    transpose):
    """avg_pool3d of t (x's geometry), or its transpose (the backward)."""
    mats = _avg_mats(x.shape[-3:], kernel_size, stride, padding, ceil_mode, count_include_pad, x.dtype)
    mats, scale = _divisor_fix(mats, divisor_override)
    y = _separable(t, mats, transpose, _acc_dtype(t.dtype))
    if scale != 1.0:
        y = y * scale
    return y.to(t.dtype)


def _avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    return _avg_pool3d_map(x, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, False)


def _avg_pool3d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return _avg_pool3d_map(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                           True)


def _adaptive_avg_mats(in_sizes, out_sizes, dtype):
    dt = torch.float64 if dtype == torch.float64 else torch.float32
    return [_matrix(("adaptive_avg",), int(i), int(o), None, dt) for i, o in zip(in_sizes, out_sizes)]


def _adaptive_avg_pool3d(x, output_size):
    mats = _adaptive_avg_mats(x.shape[-3:], output_size, x.dtype)
    return _separable(x, mats, False, x.dtype)


def _adaptive_avg_pool3d_backward(grad, x):
    mats = _adaptive_avg_mats(x.shape[-3:], grad.shape[-3:], x.dtype)
    return _separable(grad, mats, True, grad.dtype)


# --- max pooling ----------------------------------------------------------------------

def _max_backward_from_indices(grad, x, indices, sp):
    """dx: grad scattered (added) into x's flattened spatial dims at indices."""
    lead = list(x.shape[:-sp])
    n = 1
    for s in x.shape[-sp:]:
        n *= s
    acc = _acc_dtype(grad.dtype)
    out = grad.new_zeros(lead + [n], dtype=acc)
    if grad.numel() > 0:
        out = out.scatter_add(-1, indices.flatten(-sp), grad.to(acc).flatten(-sp))
    return out.reshape(x.shape).to(grad.dtype)


def _max_pool3d_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _max_backward_from_indices(grad, x, indices, 3)


def _adaptive_max_pool2d_backward(grad, x, indices):
    return _max_backward_from_indices(grad, x, indices, 2)


def _adaptive_max_pool3d_backward(grad, x, indices):
    return _max_backward_from_indices(grad, x, indices, 3)


def _fractional_backward(sp):
    def f(grad, x, kernel_size, output_size, indices):
        return _max_backward_from_indices(grad, x, indices, sp)
    return f


def _window_max(x, pos, sp):
    """pos[j]: (.., out_j, k_j) int64 positions along spatial dim j, broadcastable
    against x's leading dims (shape lead + [out_j, k_j] or [out_j, k_j]). Returns
    (values, flat indices) of the max over each window, the first max in window
    order (row-major), or the last NaN where the window has one (as ATen)."""
    sizes = list(x.shape[-sp:])
    lead = list(x.shape[:-sp])
    nl = len(lead)
    # flat index of every window element: lead + [o_0.., k_0..] -> lead + [o.., K]
    flat = None
    for j in range(sp):
        p = pos[j]
        stride_j = 1
        for s in sizes[j + 1:]:
            stride_j *= s
        # p has shape (lead or 1s) + [o_j, k_j]; place o_j at out slot j, k_j at k slot j
        pl = list(p.shape[:-2])
        shape = pl + [1] * (2 * sp)
        shape[len(pl) + j] = p.shape[-2]
        shape[len(pl) + sp + j] = p.shape[-1]
        term = p.reshape(shape) * stride_j
        flat = term if flat is None else flat + term
    outs = [pos[j].shape[-2] for j in range(sp)]
    ks = [pos[j].shape[-1] for j in range(sp)]
    K = 1
    for k in ks:
        K *= k
    full = lead + outs + ks
    if flat.dim() < len(full):
        flat = flat.reshape([1] * (len(full) - flat.dim()) + list(flat.shape))
    flat = flat.expand(full).reshape(lead + outs + [K])
    n = 1
    for s in sizes:
        n *= s
    xf = x.reshape(lead + [n])
    no = 1
    for o in outs:
        no *= o
    vals = xf.gather(-1, flat.reshape(lead + [no * K])).reshape(lead + outs + [K])
    if vals.is_floating_point():
        # ATen's `val > max || isnan(val)`: the first max of the non-NaN values,
        # unless the window has a NaN, when its last NaN wins (over +inf too)
        isn = vals != vals
        amax = vals.masked_fill(isn, float("-inf")).argmax(-1, keepdim=True)
        order = torch.arange(1, K + 1, dtype=torch.int64).to(vals.device)
        last_nan = (isn.to(torch.int64) * order).argmax(-1, keepdim=True)
        amax = torch.where(isn.any(-1, keepdim=True), last_nan, amax)
    else:
        amax = vals.argmax(-1, keepdim=True)
    v = vals.gather(-1, amax).squeeze(-1)
    i = flat.gather(-1, amax).squeeze(-1)
    return v, i


def _adaptive_positions(n_in, n_out, device):
    starts = [(o * n_in) // n_out for o in range(n_out)]
    ends = [-((-(o + 1) * n_in) // n_out) for o in range(n_out)]
    k = max(e - s for s, e in zip(starts, ends))
    pos = torch.tensor([[min(s + t, e - 1) for t in range(k)] for s, e in zip(starts, ends)], dtype=torch.int64)
    return _upload(pos, device)


def _adaptive_max_pool(x, output_size, sp):
    output_size = _tuple(output_size, sp)
    if any(o == 0 for o in output_size) or x.numel() == 0:
        shape = list(x.shape[:-sp]) + list(output_size)
        return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)
    pos = [_adaptive_positions(int(x.shape[-sp + j]), int(output_size[j]), x.device) for j in range(sp)]
    return _window_max(x, pos, sp)


def _adaptive_max_pool2d(x, output_size):
    return _adaptive_max_pool(x, output_size, 2)


def _adaptive_max_pool3d(x, output_size):
    return _adaptive_max_pool(x, output_size, 3)


_FRAC_DIMS = {2: ("height", "width"), 3: ("time", "height", "width")}


def _fractional_check(x, kernel_size, output_size, samples, sp):
    """ATen's argument checks of fractional_max_pool2d/3d (CPU: the meta function,
    then fractional_max_pool_check_shape), in its order and with its messages."""
    name = f"fractional_max_pool{sp}d"
    of = "Ints" if sp == 2 else "three Ints"
    if isinstance(kernel_size, (list, tuple)) and len(kernel_size) != sp:
        raise RuntimeError(f"{name}: kernel_size must either be a single Int or tuple of {of}")
    if isinstance(output_size, (list, tuple)) and len(output_size) != sp:
        raise RuntimeError(f"{name}: output_size must either be a single Int or tuple of {of}")
    fn = name + ("()" if sp == 2 else "_out()")
    nd = x.dim()
    if nd not in (sp + 1, sp + 2):
        raise RuntimeError(f"{fn}: Expected {sp + 1}D or {sp + 2}D tensor, but got: {list(x.shape)}")
    for i in range(1, nd):
        if x.shape[i] == 0:
            raise RuntimeError(f"{fn}: Expected input to have non-zero size for non-batch dimensions, but "
                               f"got{list(x.shape)} with dimension {i} being empty.")
    ks, outs = _tuple(kernel_size, sp), _tuple(output_size, sp)
    ins = x.shape[-sp:]
    # 2-d: out + k - 1 <= in, height then width; 3-d: out + k - 1 < in, time, width, height
    for j in ((0, 1) if sp == 2 else (0, 2, 1)):
        o, k, n = int(outs[j]), int(ks[j]), int(ins[j])
        if not (o + k - 1 <= n if sp == 2 else o + k - 1 < n):
            d = _FRAC_DIMS[sp][j]
            raise RuntimeError(f"{fn}: pool {d} {k} too large relative to input {d} {n}")
    if samples.dtype != x.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    if samples.dim() != 3:
        raise RuntimeError(f"Expect _random_samples to have 3 dimensions, got {samples.dim()}")
    n_batch, n_chan = (1, x.shape[0]) if nd == sp + 1 else (x.shape[0], x.shape[1])
    if samples.shape[0] < n_batch:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if samples.shape[1] != n_chan:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    if samples.shape[2] != sp:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {sp}; got {samples.shape[2]}.")
    return ks, outs


def _fractional(sp):
    def f(x, kernel_size, output_size, random_samples):
        ks, outs = _fractional_check(x, kernel_size, output_size, random_samples, sp)
        batched = x.dim() == sp + 2
        xb = x if batched else x.unsqueeze(0)
        N, C = xb.shape[0], xb.shape[1]
        # ATen reads the samples of batch element n from row n: an unbatched input
        # (one element) takes row 0, and rows past the batch are never read
        samples = random_samples[:N]
        if xb.numel() == 0 or any(int(o) == 0 for o in outs):
            shape = [N, C] + list(outs)
            v, i = xb.new_empty(shape), xb.new_empty(shape, dtype=torch.int64)
        else:
            empty = any(int(k) <= 0 for k in ks)
            starts_all = []
            for j in range(sp):
                n_in, n_out, k = int(xb.shape[2 + j]), int(outs[j]), int(ks[j])
                # ATen's sample order: (W, H) in 2-d, (T, H, W) in 3-d
                u = samples[:, :, 1 - j if sp == 2 else j]              # (N, C)
                if n_out == 1:
                    starts = xb.new_full((N, C, 1), n_in - k, dtype=torch.int64)
                else:
                    alpha = torch.tensor((n_in - k), dtype=samples.dtype) / torch.tensor(n_out - 1,
                                                                                          dtype=samples.dtype)
                    alpha = float(alpha)
                    i = torch.arange(n_out - 1, dtype=samples.dtype).to(xb.device)
                    a = ((i + u.unsqueeze(-1)) * alpha).to(torch.int64)
                    b = (u * alpha).to(torch.int64).unsqueeze(-1)
                    last = xb.new_full((N, C, 1), n_in - k, dtype=torch.int64)
                    starts = torch.cat([a - b, last], -1)
                starts_all.append(starts)                                 # (N, C, out)
            if empty:
                # an empty window (a pool size <= 0): ATen writes -inf and the
                # window's first position, reading nothing
                i = None
                for j in range(sp):
                    stride_j = 1
                    for s in xb.shape[3 + j:]:
                        stride_j *= int(s)
                    shape = [N, C] + [1] * sp
                    shape[2 + j] = int(outs[j])
                    term = starts_all[j].reshape(shape) * stride_j
                    i = term if i is None else i + term
                i = i.expand([N, C] + [int(o) for o in outs]).contiguous()
                v = xb.new_full(i.shape, float("-inf"))
            else:
                pos = [starts_all[j].unsqueeze(-1) + torch.arange(int(ks[j]), dtype=torch.int64).to(xb.device)
                       for j in range(sp)]                                # (N, C, out, k)
                v, i = _window_max(xb, pos, sp)
        if not batched:
            v, i = v.squeeze(0), i.squeeze(0)
        return v, i
    return f


# --- grid sampling -------------------------------------------------------------------

def _grid_clip(ix, size):
    """ATen's clip_coordinates and its gradient (1 strictly inside, else 0)."""
    g = ((ix > 0) & (ix < size - 1)).to(ix.dtype)
    return ix.clamp(0, size - 1), g


def _grid_axis(c, size, padding, align):
    """Source coordinate of grid values c along an input dim of size, and
    d(coordinate)/dc, as ATen's grid_sampler_compute_source_index(_set_grad)."""
    if align:
        ix = ((c + 1) / 2) * (size - 1)
        m = (size - 1) / 2
    else:
        ix = ((c + 1) * size - 1) / 2
        m = size / 2
    g = None
    if padding == 1:                                     # border
        ix, g = _grid_clip(ix, size)
    elif padding == 2:                                   # reflection
        lo2, hi2 = (0, 2 * (size - 1)) if align else (-1, 2 * size - 1)
        if lo2 == hi2:
            ix = torch.zeros_like(ix)
            g = torch.zeros_like(ix)
        else:
            mn, span = lo2 / 2, (hi2 - lo2) / 2
            t = ix - mn
            sgn = torch.where(t < 0, -1.0, 1.0).to(ix.dtype)
            t = t.abs()
            extra = torch.fmod(t, span)
            odd = torch.fmod(torch.floor(t / span), 2) != 0
            ix = torch.where(odd, span - extra + mn, extra + mn)
            g = torch.where(odd, -sgn, sgn)
        ix, g2 = _grid_clip(ix, size)
        g = g * g2
    g = g * m if g is not None else m
    return ix, g


def _grid_taps(inp, grid, mode, padding, align):
    """Per tap (corner): flat index (N, P) int64, validity (N, P), weight (N, P),
    and per axis d(weight)/d(coordinate) (trilinear only); plus the per-axis
    coordinate gradient multipliers. Axes are in input dim order (D, H, W)."""
    sp = grid.shape[-1]
    N = grid.shape[0]
    sizes = [int(s) for s in inp.shape[2:]]
    g2 = grid.reshape(N, -1, sp)
    coords, mults = [], []
    for a in range(sp):                                  # input dim a <- grid component sp-1-a
        ix, m = _grid_axis(g2[:, :, sp - 1 - a], sizes[a], padding, align)
        coords.append(ix)
        mults.append(m)
    taps = []
    if mode == 1:                                        # nearest (round half to even, as nearbyint)
        pos = [torch.round(c) for c in coords]
        taps.append((pos, None, None))
    else:
        lo = [torch.floor(c) for c in coords]
        w1 = [c - l for c, l in zip(coords, lo)]
        w0 = [(l + 1) - c for c, l in zip(coords, lo)]
        import itertools
        for corner in itertools.product((0, 1), repeat=sp):
            pos = [lo[a] + corner[a] for a in range(sp)]
            ws = [w1[a] if corner[a] else w0[a] for a in range(sp)]
            # weight: product in x, y, z order as ATen
            w = None
            for a in reversed(range(sp)):
                w = ws[a] if w is None else w * ws[a]
            # d weight / d coordinate a: the others' product, signed
            dws = []
            for a in range(sp):
                d = None
                for b in reversed(range(sp)):
                    if b != a:
                        d = ws[b] if d is None else d * ws[b]
                d = d if d is not None else torch.ones_like(w)
                dws.append(d if corner[a] else -d)
            taps.append((pos, w, dws))
    out = []
    for pos, w, dws in taps:
        valid = None
        flat = None
        for a in range(sp):
            v = (pos[a] >= 0) & (pos[a] < sizes[a])
            valid = v if valid is None else valid & v
            pi = pos[a].clamp(0, sizes[a] - 1).to(torch.int64)
            flat = pi if flat is None else flat * sizes[a] + pi
        out.append((flat, valid, w, dws))
    return out, mults


def _grid_sampler(sp):
    def f(inp, grid, mode, padding, align):
        if mode not in (0, 1):                          # bicubic: 2-d only, torch's decomposition
            return NotImplemented
        N, C = inp.shape[0], inp.shape[1]
        out_sp = list(grid.shape[1:-1])
        P = math.prod(out_sp)
        if inp.numel() == 0 or P == 0:
            return inp.new_zeros([N, C] + out_sp)
        xf = inp.reshape(N, C, -1)
        taps, _ = _grid_taps(inp, grid, mode, padding, align)
        y = None
        for flat, valid, w, _ in taps:
            vals = xf.gather(2, flat.reshape(N, 1, P).expand(N, C, P))
            t = vals if w is None else vals * w.reshape(N, 1, P)
            t = torch.where(valid.reshape(N, 1, P), t, 0)
            y = t if y is None else y + t
        return y.reshape([N, C] + out_sp)
    return f


def _grid_sampler_backward(sp):
    def f(grad, inp, grid, mode, padding, align, output_mask):
        if mode not in (0, 1):
            return NotImplemented
        N, C = inp.shape[0], inp.shape[1]
        out_sp = list(grid.shape[1:-1])
        P = math.prod(out_sp)
        acc = _acc_dtype(grad.dtype)
        gi = grad.new_zeros(inp.shape, dtype=acc).reshape(N, C, -1)
        gg = grid.new_zeros(grid.shape)
        if inp.numel() == 0 or P == 0:
            return gi.reshape(inp.shape).to(inp.dtype), gg
        g = grad.reshape(N, C, P).to(acc)
        xf = inp.reshape(N, C, -1)
        taps, mults = _grid_taps(inp, grid, mode, padding, align)
        gcoord = [None] * sp
        for flat, valid, w, dws in taps:
            idx = flat.reshape(N, 1, P).expand(N, C, P)
            vm = valid.reshape(N, 1, P)
            if output_mask[0]:
                t = g if w is None else g * w.reshape(N, 1, P).to(acc)
                gi = gi.scatter_add(2, idx, torch.where(vm, t, 0))
            if output_mask[1] and dws is not None:
                s = torch.where(vm, xf.gather(2, idx), 0).to(acc).mul(g).sum(1)     # (N, P)
                for a in range(sp):
                    t = s * dws[a].to(acc)
                    gcoord[a] = t if gcoord[a] is None else gcoord[a] + t
        if output_mask[1] and mode == 0:
            comps = [gcoord[sp - 1 - k] * mults[sp - 1 - k] for k in range(sp)]    # grid component k <- dim sp-1-k
            gg = torch.stack(comps, -1).reshape(grid.shape).to(grid.dtype)
        return gi.reshape(inp.shape).to(inp.dtype), gg
    return f


def _table():
    t = {}
    ups = [("upsample_nearest1d", 1, False), ("upsample_nearest2d", 2, False), ("upsample_nearest3d", 3, False),
           ("_upsample_nearest_exact1d", 1, False), ("_upsample_nearest_exact2d", 2, False),
           ("_upsample_nearest_exact3d", 3, False),
           ("upsample_linear1d", 1, True), ("upsample_bilinear2d", 2, True), ("upsample_bicubic2d", 2, True),
           ("upsample_trilinear3d", 3, True), ("_upsample_bilinear2d_aa", 2, True),
           ("_upsample_bicubic2d_aa", 2, True)]
    for op, sp, has_align in ups:
        t[getattr(aten, op + "_backward").default] = _upsample_bwd(op, sp, has_align)
        if op.endswith("_aa"):
            t[getattr(aten, op).default] = _upsample_fwd(op, sp, has_align)
    t[aten.avg_pool3d.default] = _avg_pool3d
    t[aten.avg_pool3d_backward.default] = _avg_pool3d_backward
    t[aten._adaptive_avg_pool3d.default] = _adaptive_avg_pool3d
    t[aten._adaptive_avg_pool3d_backward.default] = _adaptive_avg_pool3d_backward
    t[aten.max_pool3d_with_indices_backward.default] = _max_pool3d_backward
    t[aten.adaptive_max_pool2d.default] = _adaptive_max_pool2d
    t[aten.adaptive_max_pool3d.default] = _adaptive_max_pool3d
    t[aten.adaptive_max_pool2d_backward.default] = _adaptive_max_pool2d_backward
    t[aten.adaptive_max_pool3d_backward.default] = _adaptive_max_pool3d_backward
    t[aten.fractional_max_pool2d.default] = _fractional(2)
    t[aten.fractional_max_pool3d.default] = _fractional(3)
    t[aten.fractional_max_pool2d_backward.default] = _fractional_backward(2)
    t[aten.fractional_max_pool3d_backward.default] = _fractional_backward(3)
    t[aten.grid_sampler_3d.default] = _grid_sampler(3)
    t[aten.grid_sampler_3d_backward.default] = _grid_sampler_backward(3)
    t[aten.grid_sampler_2d_backward.default] = _grid_sampler_backward(2)
    return t


TABLE = _table()
