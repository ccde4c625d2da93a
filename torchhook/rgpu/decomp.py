"""Decompositions: ops outside trace-format/ops.def, rewritten into ops inside it.

dispatch asks handler_for(func) for an op it has no mapping, special or view
handler for. In order:
  _foreach_*    per-tensor calls of the base op (what torch.optim's foreach
                paths call), through torch's own argument parsing
  our own few (_OWN: where torch's would emit prims.* ops or wait)
  CompositeImplicitAutograd kernels (func.decompose): these arrive when a
                decomposition calls them below autograd (var_mean.dim, reshape)
  torch._decomp.decomposition_table
Each sub-op re-enters __torch_dispatch__. Every decomposed call is counted by
op name; rgpu.stats()["decomposed"] shows the counts. None means the op can't
be decomposed: dispatch raises NotImplementedError naming it, at the call."""
import threading

import torch
from torch._decomp import decomposition_table

aten = torch.ops.aten

_COUNTS = {}
_LOCK = threading.Lock()


def counts():
    """{op name: times decomposed} since the start of the process."""
    with _LOCK:
        return dict(_COUNTS)


def _count(name):
    with _LOCK:
        _COUNTS[name] = _COUNTS.get(name, 0) + 1


def has_implicit_kernel(func):
    """A CompositeImplicitAutograd op: autograd decomposes it above us, but one
    called inside a decomposition (below autograd) arrives whole."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")


def handler_for(func):
    """A handler(func, args, kwargs) decomposing func, or None."""
    if not isinstance(func, torch._ops.OpOverload):
        return None
    name = func._schema.name
    if name.startswith("aten::_foreach_"):
        return _foreach_handler(func)
    d = _OWN.get(func) or _OWN_BY_NAME.get(name)
    if d is None and has_implicit_kernel(func):
        d = func.decompose          # ATen's own aten-level decomposition (var_mean.dim, reshape ...)
    if d is None:
        d = decomposition_table.get(func)
    if d is None:
        return None
    label = str(func)

    def handler(func, args, kwargs):
        _count(label)
        r = d(*args, **kwargs)
        if r is NotImplemented:
            raise NotImplementedError(f"rgpu: {func} is not supported (its decomposition does not "
                                      "apply to these arguments)")
        return r
    return handler


# --- our own, where torch's would leave ops.def (prims) or wait ------------------------

def _flip(x, dims):
    """flip as index_select with reversed aranges (torch's goes to prims.rev)."""
    nd = x.dim()
    r = x
    for d in dict.fromkeys(d % nd for d in dims) if nd else ():
        n = x.shape[d]
        r = aten.index_select.default(r, d, torch.arange(n - 1, -1, -1, device=x.device))
    return aten.clone.default(r) if r is x else r


def _var_mean(x, dim=None, *, correction=None, keepdim=False):
    """var_mean as VAR and MEAN (torch's goes to prims.var)."""
    return (aten.var.correction(x, dim, correction=correction, keepdim=keepdim),
            aten.mean.dim(x, dim if dim is not None else [], keepdim))


def _std_mean(x, dim=None, *, correction=None, keepdim=False):
    return (aten.std.correction(x, dim, correction=correction, keepdim=keepdim),
            aten.mean.dim(x, dim if dim is not None else [], keepdim))


def _fma(a, b, c):
    """prims.fma (torch.compile's lerp/addcmul in optimizers) as a*b + c; ATen
    rounds a*b before the add too except where a fused kernel is used."""
    return aten.add.Tensor(aten.mul.Tensor(a, b), c)


def _copy(self, src, non_blocking=False):
    """aten.copy (functional copy_, in compiled graphs): self's layout, src's values."""
    r = aten.empty_strided.default(self.shape, self.stride(), dtype=self.dtype, device=self.device)
    return aten.copy_.default(r, src)


def _fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """_thnn_fused_lstm_cell (nn.LSTM on a device that isn't the CPU): the CUDA
    kernel's math. gates (B, 4H) in the order i, f, g, o; returns hy, cy and
    the workspace, the activated gates, that the backward reads."""
    gates = aten.add.Tensor(input_gates, hidden_gates)
    if input_bias is not None:
        gates = aten.add.Tensor(aten.add.Tensor(gates, input_bias), hidden_bias)
    i, f, g, o = aten.split.Tensor(gates, gates.shape[1] // 4, 1)
    i, f, g, o = aten.sigmoid.default(i), aten.sigmoid.default(f), aten.tanh.default(g), aten.sigmoid.default(o)
    cy = aten.add.Tensor(aten.mul.Tensor(f, cx), aten.mul.Tensor(i, g))
    hy = aten.mul.Tensor(o, aten.tanh.default(cy))
    return hy, cy, aten.cat.default([i, f, g, o], 1)


def _fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """_thnn_fused_lstm_cell_backward_impl: gradients of the gates (B, 4H), of
    cx, and of the bias (the gates' gradient summed over the batch)."""
    i, f, g, o = aten.split.Tensor(workspace, workspace.shape[1] // 4, 1)
    tcy = aten.tanh.default(cy)

    def dsig(y):                        # sigmoid' from its output: y (1 - y)
        return aten.mul.Tensor(y, aten.rsub.Scalar(y, 1))

    def dtanh(y):                       # tanh' from its output: 1 - y^2
        return aten.rsub.Scalar(aten.mul.Tensor(y, y), 1)
    if grad_hy is None:
        go = aten.zeros_like.default(o)
        gc = aten.zeros_like.default(cy)
    else:
        go = aten.mul.Tensor(aten.mul.Tensor(grad_hy, tcy), dsig(o))
        gc = aten.mul.Tensor(aten.mul.Tensor(dtanh(tcy), o), grad_hy)
    if grad_cy is not None:
        gc = aten.add.Tensor(gc, grad_cy)
    gi = aten.mul.Tensor(aten.mul.Tensor(dsig(i), gc), g)
    gf = aten.mul.Tensor(aten.mul.Tensor(dsig(f), gc), cx)
    gg = aten.mul.Tensor(aten.mul.Tensor(dtanh(g), gc), i)
    grad_gates = aten.cat.default([gi, gf, gg, go], 1)
    grad_cx = aten.mul.Tensor(gc, f)
    grad_bias = aten.sum.dim_IntList(grad_gates, [0]) if has_bias else None
    return grad_gates, grad_cx, grad_bias


def _fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """_thnn_fused_gru_cell (nn.GRU off the CPU), the CUDA kernel's math: gates
    (B, 3H) in the order r, z, n; returns hy and the workspace (B, 5H): r, z,
    n, the hidden n-gate with its bias, hx."""
    if input_bias is not None:
        input_gates = aten.add.Tensor(input_gates, input_bias)
        hidden_gates = aten.add.Tensor(hidden_gates, hidden_bias)
    h = input_gates.shape[1] // 3
    ir, iz, i_n = aten.split.Tensor(input_gates, h, 1)
    hr, hz, hn = aten.split.Tensor(hidden_gates, h, 1)
    r = aten.sigmoid.default(aten.add.Tensor(ir, hr))
    z = aten.sigmoid.default(aten.add.Tensor(iz, hz))
    n = aten.tanh.default(aten.add.Tensor(i_n, aten.mul.Tensor(r, hn)))
    hy = aten.add.Tensor(n, aten.mul.Tensor(z, aten.sub.Tensor(hx, n)))
    return hy, aten.cat.default([r, z, n, hn, hx], 1)


def _fused_gru_cell_backward(grad_hy, workspace, has_bias):
    """_thnn_fused_gru_cell_backward: gradients of the input gates, hidden
    gates, hx and the two biases."""
    r, z, n, hn, hx = aten.split.Tensor(workspace, workspace.shape[1] // 5, 1)
    one_minus = lambda y: aten.rsub.Scalar(y, 1)       # noqa: E731
    gz = aten.mul.Tensor(aten.mul.Tensor(grad_hy, aten.sub.Tensor(hx, n)), aten.mul.Tensor(z, one_minus(z)))
    ghx = aten.mul.Tensor(grad_hy, z)
    gn = aten.mul.Tensor(aten.mul.Tensor(grad_hy, one_minus(z)), one_minus(aten.mul.Tensor(n, n)))
    ghn = aten.mul.Tensor(gn, r)
    gr = aten.mul.Tensor(aten.mul.Tensor(gn, hn), aten.mul.Tensor(r, one_minus(r)))
    gi = aten.cat.default([gr, gz, gn], 1)
    gh = aten.cat.default([gr, gz, ghn], 1)
    if has_bias:
        return gi, gh, ghx, aten.sum.dim_IntList(gi, [0]), aten.sum.dim_IntList(gh, [0])
    return gi, gh, ghx, None, None


# --- issue 13: sorting: through the SORT / SEARCHSORTED ops ---------------------------

def _sorted(x, dim, descending=False):
    return aten.sort.stable(x, stable=True, dim=dim, descending=descending)


def _topk(x, k, dim=-1, largest=True, sorted=True):
    """topk: the first k of a stable sort (descending when largest)."""
    v, i = _sorted(x, dim, largest)
    if x.dim() == 0:
        return v, i
    return aten.slice.Tensor(v, dim, 0, k), aten.slice.Tensor(i, dim, 0, k)


def _at_pos(v, i, dim, pos, keepdim, nd):
    """(v, i) gathered along dim at pos (int64, size 1 along dim); dim dropped
    unless keepdim."""
    rv, ri = aten.gather.default(v, dim, pos), aten.gather.default(i, dim, pos)
    if nd == 0:
        return aten.squeeze.dim(rv, 0), aten.squeeze.dim(ri, 0)
    if not keepdim:
        rv, ri = aten.squeeze.dim(rv, dim), aten.squeeze.dim(ri, dim)
    return rv, ri


def _as_1d(x, dim):
    """x with at least one dim (a 0-d x as (1,)), dim wrapped."""
    nd = max(x.dim(), 1)
    if not -nd <= dim < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {dim})")
    if x.dim() == 0:
        return aten.reshape.default(x, [1]), 0
    return x, dim % nd


def _kthvalue(x, k, dim=-1, keepdim=False):
    nd = x.dim()
    x1, d = _as_1d(x, dim)
    v, i = _sorted(x1, d)
    shape = list(x1.shape)
    shape[d] = 1
    pos = aten.full.default(shape, k - 1, dtype=torch.int64, device=x.device)
    return _at_pos(v, i, d, pos, keepdim, nd)


def _median_dim(x, dim=-1, keepdim=False, ignore_nan=False):
    """The lower median along dim (ATen's): median takes the first NaN of a row
    that has one; nanmedian the lower median of the row's non-NaN values."""
    nd = x.dim()
    x1, d = _as_1d(x, dim)
    n = x1.shape[d]
    v, i = _sorted(x1, d)            # NaN greatest: a row's NaNs come last, in index order
    nan = aten.sum.dim_IntList(aten.isnan.default(x1), [d], True)
    if ignore_nan:
        valid = aten.rsub.Scalar(nan, n)
        pos = aten.clamp_min.default(aten.div.Tensor_mode(aten.sub.Scalar(valid, 1), 2, rounding_mode="floor"), 0)
    else:
        pos = aten.where.ScalarOther(aten.gt.Scalar(nan, 0), aten.rsub.Scalar(nan, n), (n - 1) // 2)
    return _at_pos(v, i, d, pos, keepdim, nd)


def _median(x):
    return _median_dim(aten.reshape.default(x, [-1]), 0)[0]


def _nanmedian_dim(x, dim=-1, keepdim=False):
    return _median_dim(x, dim, keepdim, True)


def _nanmedian(x):
    return _median_dim(aten.reshape.default(x, [-1]), 0, False, True)[0]


def _equal(a, b):
    """One wait: eq, all, the bool."""
    if a.shape != b.shape:
        return False
    return bool(aten.all.default(aten.eq.Tensor(a, b)).item())


def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(aten.all.default(aten.isclose.default(a, b, rtol, atol, equal_nan)).item())


def _searchsorted_scalar(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    dt = sorted_sequence.dtype
    if isinstance(self, float) and not dt.is_floating_point:
        dt = torch.float64
    v = aten.full.default([], self, dtype=dt, device=sorted_sequence.device)
    return aten.searchsorted.Tensor(sorted_sequence, v, out_int32=out_int32, right=right, side=side,
                                    sorter=sorter)


def _repeat_interleave(repeats, *, output_size=None):
    """repeat_interleave.Tensor: out[j] = i for the repeats[i] slots j of i:
    searchsorted(cumsum(repeats), arange(total), right). One wait (the total)
    unless output_size is given."""
    r = aten.reshape.default(repeats, [-1])
    total = output_size
    if total is None:
        total = int(aten.sum.default(r).item())
    cs = aten.cumsum.default(r, 0)
    j = aten.arange.start_step(0, total, 1, dtype=cs.dtype, device=repeats.device)
    return aten.searchsorted.Tensor(cs, j, out_int32=repeats.dtype == torch.int32, right=True)


_OWN_SORT = {aten.topk.default: _topk, aten.kthvalue.default: _kthvalue, aten.median.default: _median,
             aten.median.dim: _median_dim, aten.nanmedian.default: _nanmedian,
             aten.nanmedian.dim: _nanmedian_dim, aten.equal.default: _equal, aten.allclose.default: _allclose,
             aten.searchsorted.Scalar: _searchsorted_scalar,
             aten.repeat_interleave.Tensor: _repeat_interleave}


_OWN = {aten.copy.default: _copy, aten.flip.default: _flip, aten.var_mean.correction: _var_mean,
        aten.std_mean.correction: _std_mean, aten._thnn_fused_lstm_cell.default: _fused_lstm_cell,
        aten._thnn_fused_lstm_cell_backward_impl.default: _fused_lstm_cell_backward,
        aten._thnn_fused_gru_cell.default: _fused_gru_cell,
        aten._thnn_fused_gru_cell_backward.default: _fused_gru_cell_backward}
_OWN.update(_OWN_SORT)
_OWN_BY_NAME = {"prims::fma": _fma}       # prims register late (torch._prims)


# --- _foreach_* ------------------------------------------------------------------------

def _elementwise_fn(base, inplace, scalar_other):
    """The per-tensor function of _foreach_<base>[_]: a torch.Tensor method."""
    if base == "norm":
        return lambda t, ord=2, dtype=None: torch.linalg.vector_norm(t, ord, dtype=dtype)
    if scalar_other and base in ("maximum", "minimum"):
        base = "clamp_min" if base == "maximum" else "clamp_max"
    fn = getattr(torch.Tensor, base + ("_" if inplace else ""), None)
    if fn is None:
        fn = getattr(torch, base, None)
    return fn


def _foreach_handler(func):
    s = func._schema
    op = s.name[len("aten::_foreach_"):]
    inplace = op.endswith("_")
    base = op[:-1] if inplace else op
    params = s.arguments
    if any(a.name == "out" for a in params):
        return None                     # _out variants: not needed by torch.optim
    kinds = []                          # per argument: "list", "scalarlist", "tensorscalars", "same"
    scalar_other = False
    for a in params:
        ty = str(a.type)
        if ty == "List[Tensor]" or ty == "List[Optional[Tensor]]":
            kinds.append("list")
        elif ty == "List[number]":
            kinds.append("scalarlist")
            scalar_other = True
        elif ty == "Tensor" and a.name == "scalars":
            kinds.append("tensorscalars")
            scalar_other = True
        else:
            kinds.append("same")
            if ty == "number" and a.name not in ("alpha", "value"):
                scalar_other = True
    fn = _elementwise_fn(base, inplace, scalar_other)
    if kinds and kinds[0] != "list":        # _foreach_pow.ScalarAndTensor: a scalar base
        fn = getattr(torch, base, None)
    if fn is None or "list" not in kinds:
        return None
    first_list = kinds.index("list")
    label = str(func)
    # which foreach arguments go to the per-tensor call as keywords
    as_kw = [a.kwarg_only or a.name in ("value", "dtype", "non_blocking") for a in params]
    if base in ("addcmul", "addcdiv"):
        as_kw = [k or a.name == "scalars" for k, a in zip(as_kw, params)]
    kw_names = ["value" if base in ("addcmul", "addcdiv") and a.name == "scalars" else a.name
                for a in params]
    names = [a.name for a in params]

    def handler(func, args, kwargs):
        _count(label)
        vals = list(args) + [kwargs[n] if n in kwargs else params[i].default_value
                             for i, n in enumerate(names) if i >= len(args)]
        n = len(vals[first_list])
        ks = kinds
        if "tensorscalars" in kinds:
            ks = list(kinds)
            for i, k in enumerate(kinds):
                if k == "tensorscalars":
                    vals[i] = vals[i].tolist()      # a wait: per-tensor scalars from a tensor
                    ks[i] = "scalarlist"
        results = []
        for j in range(n):
            pos, kw = [], {}
            for i, k in enumerate(ks):
                v = vals[i]
                if k == "list" or k == "scalarlist":
                    v = v[j]
                if as_kw[i]:
                    kw[kw_names[i]] = v
                else:
                    pos.append(v)
            results.append(fn(*pos, **kw))
        return None if inplace else results
    return handler
