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

from . import decomp_sample as _decomp_sample

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


def _mlm_terms(input, target):
    """multilabel_margin_loss's pieces as ATen's CPU kernel defines them: per
    sample the targets are target[:end] (end: the first -1); for target k and
    non-target j, z[k, n, j] = max(0, 1 - x[t_k] + x[j]) / dim."""
    dim = input.shape[1]
    idx = aten.arange.default(dim, device=input.device)
    end = aten.amin.default(aten.where.ScalarOther(aten.eq.Scalar(target, -1), idx, dim), [-1], True)
    valid = aten.lt.Tensor(idx, end)                                   # (N, K): target k is used
    tidx = aten.where.ScalarOther(valid, target, 0)
    u = aten.gather.default(input, 1, tidx)                            # x[t_k]
    is_target = aten.any.dim(aten.eq.Tensor(aten.unsqueeze.default(aten.where.ScalarOther(valid, target, -1), -1),
                                            idx), 1)                   # (N, J)
    z = aten.add.Tensor(aten.rsub.Scalar(aten.unsqueeze.default(aten.t.default(u), -1), 1), input)  # (K, N, J)
    keep = aten.logical_and.default(aten.unsqueeze.default(aten.t.default(valid), -1),
                                    aten.logical_not.default(is_target))
    return z, keep, tidx, is_target


def _multilabel_margin_loss_forward(input, target, reduction):
    """torch's decomposition also counts the k past the first -1 (as target 0)."""
    shape = input.shape
    x, t = (input, target) if input.dim() == 2 else (aten.view.default(input, [1, -1]),
                                                     aten.view.default(target, [1, -1]))
    z, keep, _, is_target = _mlm_terms(x, t)
    z = aten.where.ScalarOther(keep, aten.div.Scalar(aten.clamp_min.default(z, 0), x.shape[1]), 0)
    per = aten.sum.dim_IntList(z, [0, 2])
    if reduction == 1:
        out = aten.mean.default(per)
    elif reduction == 2:
        out = aten.sum.default(per)
    else:
        out = per if input.dim() == 2 else aten.view.default(per, [])
    return out, aten.view.default(aten._to_copy.default(is_target, dtype=input.dtype), shape)


def _multilabel_margin_loss_backward(grad_output, input, target, reduction, is_target):
    """d loss / d x: +1/dim at j and -1/dim at t_k for each active (k, j) pair."""
    shape = input.shape
    x, t = (input, target) if input.dim() == 2 else (aten.view.default(input, [1, -1]),
                                                     aten.view.default(target, [1, -1]))
    z, keep, tidx, _ = _mlm_terms(x, t)
    act = aten._to_copy.default(aten.logical_and.default(keep, aten.gt.Scalar(z, 0)), dtype=x.dtype)
    g = aten.sub.Tensor(aten.sum.dim_IntList(act, [0]),                        # as j
                        aten.scatter_add.default(aten.zeros_like.default(x), 1, tidx,
                                                 aten.t.default(aten.sum.dim_IntList(act, [2]))))  # as t_k
    g = aten.div.Scalar(g, x.shape[1])
    if reduction == 1:
        g = aten.div.Scalar(g, x.shape[0])
    go = grad_output if reduction != 0 or input.dim() != 2 else aten.unsqueeze.default(grad_output, 1)
    return aten.view.default(aten.mul.Tensor(g, go), shape)


def _multi_margin_loss(input, target, p=1, margin=1, weight=None, reduction=1):
    """multi_margin_loss: per sample sum over i != y of max(0, margin - x[y] + x[i])^p
    w[y] / dim (torch's decomposition gives shape (1,) for a 1-d input, ATen ())."""
    if p not in (1, 2):
        raise RuntimeError("only p == 1 and p == 2 supported")
    x = input if input.dim() == 2 else aten.view.default(input, [1, -1])
    y = aten.view.default(target, [-1, 1])
    z = aten.clamp_min.default(aten.add.Tensor(aten.rsub.Scalar(aten.gather.default(x, 1, y), margin), x), 0)
    if p == 2:
        z = aten.mul.Tensor(z, z)
    idx = aten.arange.default(x.shape[1], device=x.device)
    z = aten.where.ScalarOther(aten.ne.Tensor(idx, y), z, 0)
    if weight is not None:
        z = aten.mul.Tensor(z, aten.view.default(aten.index_select.default(weight, 0, aten.view.default(y, [-1])),
                                                 [-1, 1]))
    per = aten.div.Scalar(aten.sum.dim_IntList(z, [1]), x.shape[1])
    if reduction == 1:
        return aten.mean.default(per)
    if reduction == 2:
        return aten.sum.default(per)
    return per if input.dim() == 2 else aten.view.default(per, [])


def _multi_margin_loss_backward(grad_output, input, target, p, margin, weight=None, reduction=1):
    """d loss / d x of multi_margin_loss: z_i = margin - x[y] + x[i] (i != y);
    each z_i > 0 adds p z_i^(p-1) w[y] / dim at i and subtracts it at y."""
    shape = input.shape
    x = input if input.dim() == 2 else aten.view.default(input, [1, -1])
    y = aten.view.default(target, [-1, 1])
    xy = aten.gather.default(x, 1, y)
    z = aten.add.Tensor(aten.rsub.Scalar(xy, margin), x)
    idx = aten.arange.default(x.shape[1], device=x.device)
    on = aten.logical_and.default(aten.gt.Scalar(z, 0), aten.ne.Tensor(idx, y))
    d = aten.mul.Scalar(z, 2) if p == 2 else aten.ones_like.default(z)
    d = aten.where.ScalarOther(on, d, 0)
    if weight is not None:
        d = aten.mul.Tensor(d, aten.view.default(aten.index_select.default(weight, 0, aten.view.default(y, [-1])),
                                                 [-1, 1]))
    g = aten.scatter_add.default(d, 1, y, aten.neg.default(aten.sum.dim_IntList(d, [1], True)))
    g = aten.div.Scalar(g, x.shape[1])
    if reduction == 1:
        g = aten.div.Scalar(g, x.shape[0])
    go = aten.view.default(grad_output, [-1, 1]) if reduction == 0 and grad_output.dim() == 1 else grad_output
    return aten.view.default(aten.mul.Tensor(g, go), shape)


def _shrink_backward(grad_out, x, lambd):
    """hardshrink_backward / softshrink_backward: the gradient passes where |x| > lambd."""
    return aten.where.ScalarOther(aten.gt.Scalar(aten.abs.default(x), lambd), grad_out, 0)


def _replication_pad_backward(grad_out, x, padding):
    """replication_padNd_backward: each padded dim's gradient summed back onto the
    edge it replicates (index_add over the clamped source index)."""
    g = grad_out
    for k in range(len(padding) // 2):
        d = x.dim() - 1 - k
        lo, hi = padding[2 * k], padding[2 * k + 1]
        n = x.shape[d]
        src = aten.clamp.default(aten.arange.start(-lo, n + hi, device=x.device), 0, n - 1)
        shape = list(g.shape)
        shape[d] = n
        g = aten.index_add.default(aten.zeros.default(shape, dtype=g.dtype, device=g.device), d, src, g)
    return g


_OWN = {aten.copy.default: _copy, aten.flip.default: _flip, aten.var_mean.correction: _var_mean,
        aten.std_mean.correction: _std_mean, aten._thnn_fused_lstm_cell.default: _fused_lstm_cell,
        aten._thnn_fused_lstm_cell_backward_impl.default: _fused_lstm_cell_backward,
        aten._thnn_fused_gru_cell.default: _fused_gru_cell,
        aten._thnn_fused_gru_cell_backward.default: _fused_gru_cell_backward,
        aten.multilabel_margin_loss_forward.default: _multilabel_margin_loss_forward,
        aten.multilabel_margin_loss_backward.default: _multilabel_margin_loss_backward,
        aten.multi_margin_loss.default: _multi_margin_loss,
        aten.multi_margin_loss_backward.default: _multi_margin_loss_backward,
        aten.hardshrink_backward.default: _shrink_backward, aten.softshrink_backward.default: _shrink_backward,
        aten.replication_pad1d_backward.default: _replication_pad_backward,
        aten.replication_pad2d_backward.default: _replication_pad_backward,
        aten.replication_pad3d_backward.default: _replication_pad_backward}


def _convert_element_type(a, dtype):
    """prims.convert_element_type (decompositions at low precision: renorm) is a cast."""
    return aten._to_copy.default(a, dtype=dtype)


_OWN_BY_NAME = {"prims::fma": _fma,       # prims register late (torch._prims)
                "prims::convert_element_type": _convert_element_type}
_OWN.update(_decomp_sample.TABLE)         # issue 13: conv-pool-sample


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
