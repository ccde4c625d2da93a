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
import math
import operator
import threading

import torch
from torch._decomp import decomposition_table

from . import decomp_sample as _decomp_sample
from . import mexp as _mexp
from . import composite_out as _composite_out
from . import nnops as _nnops
from ._dtypes import c10_name
from .registry import HANDLERS
from .tensor import RemoteTensor, call_single as _call_single

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
        if d is not None and name.endswith("_") and not name.startswith("aten::_"):
            d = _inplace_from_functional(func) or d
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


def _inplace_from_functional(func):
    """x.op_(...) as x.copy_(op(x, ...)) with ATen's checks: torch's in-place
    decompositions call the out= form with out=x, whose wrapper resizes x where
    ATen raises (x (5, 1), other (5, 5))."""
    s = func._schema
    packet = getattr(aten, s.name[len("aten::"):-1], None)
    if packet is None or func._overloadname not in packet.overloads():
        return None
    functional = getattr(packet, func._overloadname)
    if [(a.name, str(a.type)) for a in functional._schema.arguments] != \
            [(a.name, str(a.type)) for a in s.arguments]:
        return None

    def d(self, *args, **kwargs):
        r = functional(self, *args, **kwargs)
        if r.shape != self.shape:
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                               f"{list(r.shape)}")
        if not torch.can_cast(r.dtype, self.dtype):
            raise RuntimeError(f"result type {c10_name(r.dtype)} can't be cast to the desired output "
                               f"type {c10_name(self.dtype)}")
        return aten.copy_.default(self, r)
    return d


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


# --- index ops ------------------------------------------------------------------------
# Index ops and reductions that are a few records of ops.def ops with ATen CPU's values
# (no waits): scatter_reduce (its kernel) carries index_reduce, segment_reduce and the
# max of embedding_bag; index_put/index_add/cumsum carry put, masked_scatter,
# nonzero_static, embedding_renorm_ and the embedding_bag sums.

def _i64(t):
    return t if t.dtype == torch.int64 else aten._to_copy.default(t, dtype=torch.int64)


def _index_reduce(self, dim, index, source, reduce, *, include_self=True):
    """index_reduce as scatter_reduce with the index expanded along source."""
    if source.dim() == 0:
        source = aten.reshape.default(source, [1])
    dim = dim % max(source.dim(), 1)
    shape = [1] * source.dim()
    shape[dim] = -1
    ix = aten.expand.default(aten.reshape.default(index, shape), list(source.shape))
    return aten.scatter_reduce.two(self, dim, ix, source, reduce, include_self=include_self)


def _index_reduce_(self, dim, index, source, reduce, *, include_self=True):
    return aten.copy_.default(self, _index_reduce(self, dim, index, source, reduce, include_self=include_self))


def _addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """sum_b batch1[b] @ batch2[b] as one mm: (n, B*m) @ (B*m, p)."""
    b, n, m = batch1.shape
    p = batch2.shape[2]
    a = aten.reshape.default(aten.permute.default(batch1, [1, 0, 2]), [n, b * m])
    c = aten.reshape.default(batch2, [b * m, p])
    return aten.addmm.default(self, a, c, beta=beta, alpha=alpha)


def _addbmm_(self, batch1, batch2, *, beta=1, alpha=1):
    return aten.copy_.default(self, _addbmm(self, batch1, batch2, beta=beta, alpha=alpha))


def _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """_trilinear (F.bilinear): each input unsqueezed at its expand dims, the three
    multiplied and summed over sumdim: one einsum."""
    n = i1.dim() + len(expand1)
    letters = "abcdefghijklmnopqrstuvwxyz"[:n]

    def sub(t, exp):
        return "".join(letters[d] for d in range(n) if d not in exp)
    sums = {d % n for d in sumdim}
    eq = "%s,%s,%s->%s" % (sub(i1, expand1), sub(i2, expand2), sub(i3, expand3),
                           "".join(letters[d] for d in range(n) if d not in sums))
    return torch.einsum(eq, i1, i2, i3)


def _cdist_direct(x1, x2, p):
    d = aten.sub.Tensor(aten.unsqueeze.default(x1, -2), aten.unsqueeze.default(x2, -3))
    return aten.linalg_vector_norm.default(d, p, [-1])


def _cdist_forward(x1, x2, p, compute_mode=None):
    """ATen CPU's two paths: for p = 2 with many rows (or compute_mode 1) the
    matmul form ||a||^2 - 2ab + ||b||^2 (clamped to 1e-30 before the sqrt, as
    ATen's), else the norm of the differences."""
    r1, r2 = x1.shape[-2], x2.shape[-2]
    mm = p == 2 and (compute_mode == 1 or ((compute_mode is None or compute_mode == 0) and (r1 > 25 or r2 > 25)))
    if not mm:
        r = _cdist_direct(x1, x2, p)
        if r.shape[-1] == 0 or x1.shape[-1] == 0:
            return aten.zeros_like.default(r)
        return r
    n1 = aten.sum.dim_IntList(aten.pow.Tensor_Scalar(x1, 2), [-1], True)
    n2 = aten.sum.dim_IntList(aten.pow.Tensor_Scalar(x2, 2), [-1], True)
    a = aten.cat.default([aten.mul.Tensor(x1, -2), n1, aten.ones_like.default(n1)], -1)
    b = aten.cat.default([x2, aten.ones_like.default(n2), n2], -1)
    r = torch.matmul(a, aten.transpose.int(b, -1, -2))
    return aten.sqrt.default(aten.clamp_min.default(r, 1e-30))


def _cdist_backward(grad, x1, x2, p, cdist):
    """d cdist / d x1: sum_j grad_ij * f(x1_i - x2_j), f the norm's gradient."""
    if p == 0 or x1.shape[-1] == 0 or x1.shape[-2] == 0 or x2.shape[-2] == 0:
        return aten.zeros_like.default(x1)
    d = aten.sub.Tensor(aten.unsqueeze.default(x1, -2), aten.unsqueeze.default(x2, -3))
    g = aten.unsqueeze.default(grad, -1)
    c = aten.unsqueeze.default(cdist, -1)
    if p == 1:
        f = aten.sign.default(d)
    elif p == float("inf"):
        ad = aten.abs.default(d)
        f = aten.mul.Tensor(aten.sign.default(d), aten.eq.Tensor(ad, c))
    else:
        if p == 2:
            num = d
        else:
            num = aten.mul.Tensor(d, aten.pow.Tensor_Scalar(aten.abs.default(d), p - 2))
        den = c if p == 2 else aten.pow.Tensor_Scalar(c, p - 1)
        f = aten.where.self(aten.eq.Scalar(c, 0), aten.zeros_like.default(d), aten.div.Tensor(num, den))
    r = aten.sum.dim_IntList(aten.mul.Tensor(g, f), [-2])
    if list(r.shape) != list(x1.shape):      # x1 broadcast over batch dims
        lead = r.dim() - x1.dim()
        dims = list(range(lead)) + [i + lead for i in range(x1.dim() - 2) if x1.shape[i] == 1 and r.shape[i + lead] != 1]
        r = aten.reshape.default(aten.sum.dim_IntList(r, dims, True), list(x1.shape)) if dims else r
    return r


def _triu_flat(n, device):
    i, j = torch.triu_indices(n, n, 1)
    return (i * n + j).to(device)


def _pdist_forward(x, p=2.0):
    """pdist: the upper triangle (row-major) of the direct cdist(x, x)."""
    n = x.shape[0]
    if n <= 1:
        return aten.new_zeros.default(x, [0])
    full = _cdist_direct(x, x, p)
    return aten.index_select.default(aten.reshape.default(full, [n * n]), 0, _triu_flat(n, x.device))


def _pdist_backward(grad, x, p, pdist):
    n = x.shape[0]
    if n <= 1 or p == 0:
        return aten.zeros_like.default(x)
    flat = _triu_flat(n, x.device)
    g = aten.index_put.default(aten.new_zeros.default(grad, [n * n]), [flat], grad)
    g = aten.reshape.default(g, [n, n])
    g = aten.add.Tensor(g, aten.transpose.int(g, 0, 1))
    full = _cdist_direct(x, x, p)
    return _cdist_backward(g, x, x, p, full)


def _masked_scatter(self, mask, source):
    """self's elements where mask (broadcast) is true, in row-major order, taken
    from source's elements in order: a cumsum picks each one's source element."""
    shape = torch.broadcast_shapes(self.shape, mask.shape)
    s = aten.expand.default(self, list(shape))
    m = aten.reshape.default(aten.expand.default(mask, list(shape)), [-1])
    if source.numel() == 0:
        return aten.clone.default(s)
    pos = aten.sub.Tensor(aten.cumsum.default(m, 0, dtype=torch.int64), 1)
    pos = aten.clamp.default(pos, 0, source.numel() - 1)
    vals = aten.index_select.default(aten.reshape.default(source, [-1]), 0, pos)
    r = aten.where.self(m, vals, aten.reshape.default(s, [-1]))
    return aten.reshape.default(r, list(shape))


def _masked_scatter_(self, mask, source):
    return aten.copy_.default(self, _masked_scatter(self, mask, source))


def _put(self, index, source, accumulate=False):
    """put: index_put on self's row-major flattening."""
    flat = aten.reshape.default(aten.clone.default(self, memory_format=torch.contiguous_format), [-1])
    r = aten.index_put.default(flat, [aten.reshape.default(index, [-1])], aten.reshape.default(source, [-1]),
                               accumulate)
    return aten.reshape.default(r, list(self.shape))


def _put_(self, index, source, accumulate=False):
    return aten.copy_.default(self, _put(self, index, source, accumulate))


def _nonzero_static(self, *, size, fill_value=-1):
    """nonzero_static: each nonzero's coordinates land at its rank (a cumsum);
    ranks >= size and zeros go to a spare row, dropped."""
    nd = self.dim()
    dev = self.device
    if nd == 0:
        self = aten.reshape.default(self, [1])
    n = self.numel()
    out = torch.full((size + 1, nd), fill_value, dtype=torch.int64, device=dev)
    if n == 0 or size == 0 or nd == 0:
        if nd == 0:
            return torch.full((size, 0), fill_value, dtype=torch.int64, device=dev)
        return aten.clone.default(aten.slice.Tensor(out, 0, 0, size))
    m = aten.ne.Scalar(aten.reshape.default(self, [-1]), 0)
    pos = aten.sub.Tensor(aten.cumsum.default(m, 0, dtype=torch.int64), 1)
    keep = aten.logical_and.default(m, aten.lt.Scalar(pos, size))
    tgt = aten.where.self(keep, pos, aten.full_like.default(pos, size))
    lin = torch.arange(n, dtype=torch.int64, device=dev)
    coords, stride = [], 1
    for d in range(nd - 1, -1, -1):
        c = aten.remainder.Scalar(aten.floor_divide.Scalar(lin, stride), self.shape[d])
        coords.append(c)
        stride *= self.shape[d]
    coords = aten.stack.default(coords[::-1], 1)
    out = aten.index_put.default(out, [tgt], coords)
    return aten.clone.default(aten.slice.Tensor(out, 0, 0, size))


def _embedding_renorm_(self, indices, max_norm, norm_type):
    """Rows of self that indices name, with a norm above max_norm, scaled by
    max_norm / (norm + 1e-7); ATen CPU's rule, without its wait for the rows."""
    v = self.shape[0]
    norms = aten.linalg_vector_norm.default(self, norm_type, [1])
    hit = aten.index_put.default(aten.new_zeros.default(norms, [v], dtype=torch.bool),
                                 [aten.reshape.default(_i64(indices), [-1])],
                                 aten.new_ones.default(norms, [], dtype=torch.bool))
    cond = aten.logical_and.default(hit, aten.gt.Scalar(norms, max_norm))
    scale = aten.reciprocal.default(aten.add.Scalar(norms, 1e-7))
    scale = aten.mul.Scalar(scale, max_norm)
    scaled = aten.mul.Tensor(self, aten.unsqueeze.default(scale, 1))
    return aten.copy_.default(self, aten.where.self(aten.unsqueeze.default(cond, 1), scaled, self))


def _bag_of(n, offsets, num_bags, dev):
    """offset2bag: each index's bag (offsets ascending, offsets[0] = 0)."""
    marks = aten.index_add.default(torch.zeros(n + 1, dtype=torch.int64, device=dev), 0,
                                   aten.slice.Tensor(_i64(offsets), 0, 0, num_bags),
                                   torch.ones(num_bags, dtype=torch.int64, device=dev))
    bag = aten.sub.Tensor(aten.cumsum.default(marks, 0), 1)
    return aten.clamp_min.default(aten.slice.Tensor(bag, 0, 0, n), 0)


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """_embedding_bag (modes 0 sum, 1 mean, 2 max): (output, offset2bag, bag_size,
    max_indices), the bags summed by index_add in index order, maxima by
    scatter_reduce amax and their first index by scatter_reduce amin."""
    dev = weight.device
    idx = aten.reshape.default(_i64(indices), [-1])
    n, dim = idx.shape[0], weight.shape[1]
    nb = offsets.shape[0] - (1 if include_last_offset else 0)
    bag = _bag_of(n, offsets, nb, dev)
    valid = aten.ne.Scalar(idx, padding_idx) if padding_idx >= 0 else aten.ge.Scalar(idx, 0)
    bag_size = aten.index_add.default(torch.zeros(nb, dtype=torch.int64, device=dev), 0, bag,
                                      aten._to_copy.default(valid, dtype=torch.int64))
    rows = aten.index_select.default(weight, 0, idx)
    if per_sample_weights is not None:
        rows = aten.mul.Tensor(rows, aten.unsqueeze.default(per_sample_weights, 1))
    v2 = aten.unsqueeze.default(valid, 1)
    zero = aten.new_zeros.default(weight, [nb, dim])
    if mode == 2:
        ex = aten.expand.default(aten.unsqueeze.default(bag, 1), [n, dim])
        # padding rows: aimed at a spare bag nb
        exv = aten.where.self(v2, ex, aten.full_like.default(ex, nb))
        big = aten.new_zeros.default(weight, [nb + 1, dim])
        out = aten.scatter_reduce.two(big, 0, exv, rows, "amax", include_self=False)
        hitv = aten.eq.Tensor(rows, aten.gather.default(out, 0, exv))
        first = torch.full((nb + 1, dim), n, dtype=torch.int64, device=dev)
        posn = aten.where.self(hitv, aten.expand.default(aten.unsqueeze.default(
            torch.arange(n, dtype=torch.int64, device=dev), 1), [n, dim]), aten.full_like.default(ex, n))
        first = aten.scatter_reduce.two(first, 0, exv, posn, "amin", include_self=True)
        first = aten.slice.Tensor(first, 0, 0, nb)
        idx_pad = aten.cat.default([idx, torch.zeros(1, dtype=torch.int64, device=dev)])
        mi = aten.reshape.default(aten.index_select.default(idx_pad, 0, aten.reshape.default(first, [-1])), [nb, dim])
        return aten.clone.default(aten.slice.Tensor(out, 0, 0, nb)), bag, bag_size, mi
    rows = aten.where.self(v2, rows, aten.zeros_like.default(rows))
    out = aten.index_add.default(zero, 0, bag, rows)
    if mode == 1:
        cnt = aten.unsqueeze.default(aten._to_copy.default(aten.clamp_min.default(bag_size, 1), dtype=weight.dtype), 1)
        out = aten.div.Tensor(out, cnt)
    return out, bag, bag_size, aten.clone.default(bag_size)


def _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                  scale_grad_by_freq, mode, per_sample_weights, padding_idx=-1):
    dev = grad.device
    idx = aten.reshape.default(_i64(indices), [-1])
    dim = grad.shape[1]
    gw = aten.new_zeros.default(grad, [num_weights, dim])
    if mode == 2:
        nb = grad.shape[0]
        mi = _i64(maximum_indices)
        ok = aten.unsqueeze.default(aten.gt.Scalar(bag_size, 0), 1)
        g = aten.where.self(ok, grad, aten.zeros_like.default(grad))
        cols = aten.expand.default(aten.unsqueeze.default(torch.arange(dim, dtype=torch.int64, device=dev), 0), [nb, dim])
        mi = aten.where.self(ok, mi, aten.zeros_like.default(mi))
        gw = aten.index_put.default(gw, [mi, cols], g, True)
    else:
        bag = _i64(offset2bag)
        g = aten.index_select.default(grad, 0, bag)
        if mode == 1:
            cnt = aten._to_copy.default(aten.clamp_min.default(aten.index_select.default(bag_size, 0, bag), 1),
                                        dtype=grad.dtype)
            g = aten.div.Tensor(g, aten.unsqueeze.default(cnt, 1))
        if per_sample_weights is not None:
            g = aten.mul.Tensor(g, aten.unsqueeze.default(per_sample_weights, 1))
        if padding_idx >= 0:
            g = aten.where.self(aten.unsqueeze.default(aten.ne.Scalar(idx, padding_idx), 1), g, aten.zeros_like.default(g))
        gw = aten.index_add.default(gw, 0, idx, g)
    if scale_grad_by_freq:
        freq = aten.index_add.default(torch.zeros(num_weights, dtype=torch.int64, device=dev), 0, idx,
                                      torch.ones(idx.shape[0], dtype=torch.int64, device=dev))
        freq = aten._to_copy.default(aten.clamp_min.default(freq, 1), dtype=grad.dtype)
        gw = aten.div.Tensor(gw, aten.unsqueeze.default(freq, 1))
    if padding_idx >= 0 and mode == 2:
        keep = aten.unsqueeze.default(aten.ne.Scalar(torch.arange(num_weights, device=dev), padding_idx), 1)
        gw = aten.where.self(keep, gw, aten.zeros_like.default(gw))
    return gw


def _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                            scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    if sparse:
        raise NotImplementedError("rgpu: EmbeddingBag with sparse=True (sparse gradients) is not supported")
    return _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
                                         scale_grad_by_freq, mode, per_sample_weights, padding_idx)


def _embedding_bag_psw_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx=-1):
    """d out / d per_sample_weights (mode sum): <grad[bag_j], weight[idx_j]>."""
    idx = aten.reshape.default(_i64(indices), [-1])
    g = aten.index_select.default(grad, 0, _i64(offset2bag))
    w = aten.index_select.default(weight, 0, idx)
    r = aten.sum.dim_IntList(aten.mul.Tensor(g, w), [1])
    if padding_idx >= 0:
        r = aten.where.self(aten.ne.Scalar(idx, padding_idx), r, aten.zeros_like.default(r))
    return r


def _segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False, initial=None):
    """segment_reduce (1-d lengths or offsets) as scatter_reduce over segment ids,
    started from initial (or the reduction's identity); mean divides by the count."""
    if indices is not None or (lengths is not None and lengths.dim() != 1) or (offsets is not None and offsets.dim() != 1):
        return NotImplemented
    axis = axis % data.dim()
    ix, lens, ns = _segment_ids(data, lengths, offsets, axis)
    ident = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}[reduce]
    shape = list(data.shape)
    shape[axis] = ns
    base = torch.full(shape, ident if initial is None else initial, dtype=data.dtype, device=data.device)
    red = {"sum": "sum", "mean": "sum", "prod": "prod", "max": "amax", "min": "amin"}[reduce]
    out = aten.scatter_reduce.two(base, axis, ix, data, red, include_self=True)
    if reduce == "mean":
        cnt = aten._to_copy.default(lens, dtype=data.dtype)
        q = aten.div.Tensor(out, cnt)
        out = q if initial is None else aten.where.self(aten.gt.Scalar(cnt, 0), q, out)
    return out


def _segment_ids(data, lengths, offsets, axis):
    """(segment id of each position along axis, expanded to data's shape; lengths
    reshaped to broadcast along axis; the number of segments)."""
    dev = data.device
    if lengths is not None:
        lens = _i64(lengths)
        offs = aten.sub.Tensor(aten.cumsum.default(lens, 0), lens)
    else:
        o = _i64(offsets)
        offs = aten.slice.Tensor(o, 0, 0, o.shape[0] - 1)
        lens = aten.sub.Tensor(aten.slice.Tensor(o, 0, 1, o.shape[0]), offs)
    ns, n = offs.shape[0], data.shape[axis]
    marks = aten.index_add.default(torch.zeros(n + 1, dtype=torch.int64, device=dev), 0, offs,
                                   torch.ones(ns, dtype=torch.int64, device=dev))
    seg = aten.slice.Tensor(aten.sub.Tensor(aten.cumsum.default(marks, 0), 1), 0, 0, n)
    vs = [1] * data.dim()
    vs[axis] = -1
    return aten.expand.default(aten.reshape.default(seg, vs), list(data.shape)), aten.reshape.default(lens, vs), ns


def _segment_reduce_backward(grad, output, data, reduce, *, lengths=None, offsets=None, axis=0, initial=None):
    """The gradient of segment_reduce (1-d lengths or offsets): sum and mean spread
    the segment's gradient (mean over its length); max/min split it among the
    elements equal to the result; prod: the product of the others (a zero's
    share is the product of the rest, the others' none)."""
    if (lengths is not None and lengths.dim() != 1) or (offsets is not None and offsets.dim() != 1):
        return NotImplemented
    axis = axis % data.dim()
    ix, lens, ns = _segment_ids(data, lengths, offsets, axis)
    g = aten.gather.default(grad, axis, ix)
    zero = aten.zeros_like.default(data)
    if reduce == "sum":
        return g
    if reduce == "mean":
        n = aten.gather.default(aten.expand.default(aten._to_copy.default(lens, dtype=data.dtype), list(grad.shape)),
                                axis, ix)
        return aten.div.Tensor(g, n)
    if reduce in ("max", "min"):
        hit = aten.eq.Tensor(data, aten.gather.default(output, axis, ix))
        cnt = aten.scatter_add.default(aten.zeros_like.default(grad), axis, ix, aten._to_copy.default(hit, dtype=data.dtype))
        share = aten.div.Tensor(g, aten.gather.default(aten.clamp_min.default(cnt, 1), axis, ix))
        return aten.where.self(hit, share, zero)
    if reduce == "prod":
        nz = aten.ne.Scalar(data, 0)
        one = aten.ones_like.default(grad)
        pnz = aten.scatter_reduce.two(one, axis, ix, aten.where.self(nz, data, aten.ones_like.default(data)), "prod")
        zc = aten.scatter_add.default(aten.zeros_like.default(grad), axis, ix,
                                      aten._to_copy.default(aten.logical_not.default(nz), dtype=data.dtype))
        zc, pnz = aten.gather.default(zc, axis, ix), aten.gather.default(pnz, axis, ix)
        if initial is not None:
            pnz = aten.mul.Scalar(pnz, initial)
        other = aten.where.self(nz, aten.where.self(aten.eq.Scalar(zc, 0), aten.div.Tensor(pnz, aten.where.self(
            nz, data, aten.ones_like.default(data))), zero), aten.where.self(aten.eq.Scalar(zc, 1), pnz, zero))
        return aten.mul.Tensor(g, other)
    return NotImplemented


_OWN_INDEX = {
    aten.index_reduce.default: _index_reduce, aten.index_reduce_.default: _index_reduce_,
    aten.addbmm.default: _addbmm, aten.addbmm_.default: _addbmm_,
    aten._trilinear.default: _trilinear,
    aten._cdist_forward.default: _cdist_forward, aten._cdist_backward.default: _cdist_backward,
    aten._pdist_forward.default: _pdist_forward, aten._pdist_backward.default: _pdist_backward,
    aten.masked_scatter.default: _masked_scatter, aten.masked_scatter_.default: _masked_scatter_,
    aten.put.default: _put, aten.put_.default: _put_,
    aten.nonzero_static.default: _nonzero_static,
    aten.embedding_renorm_.default: _embedding_renorm_,
    aten._embedding_bag.default: _embedding_bag, aten._embedding_bag_forward_only.default: _embedding_bag,
    aten._embedding_bag_backward.default: _embedding_bag_backward,
    aten._embedding_bag_dense_backward.default: _embedding_bag_dense_backward,
    aten._embedding_bag_per_sample_weights_backward.default: _embedding_bag_psw_backward,
    aten.segment_reduce.default: _segment_reduce,
    aten._segment_reduce_backward.default: _segment_reduce_backward,
}



# --- nn modules' ops (packed sequences, rrelu, weight_norm, the fused transformer) ----

def _packed_rows(batch_sizes, t_len, b_len, batch_first):
    """Rows of the (T*B, ...) or (B*T, ...) flattened padded input that the packed
    data holds, time-major: one CPU index, built from the CPU batch sizes."""
    rows = []
    for t, n in enumerate(batch_sizes.tolist()):
        rows.extend(b * t_len + t if batch_first else t * b_len + b for b in range(n))
    return torch.tensor(rows, dtype=torch.int64)


def _pack_padded_sequence(input, lengths, batch_first):
    """_pack_padded_sequence: data (sum(lengths), *) as one index_select of the
    padded input; batch_sizes stay a CPU tensor, as in PyTorch."""
    lens = lengths.tolist()             # lengths are a CPU tensor (pack_padded_sequence puts them there)
    if not lens or min(lens) <= 0:
        raise RuntimeError("rgpu: _pack_padded_sequence: every length must be positive")
    if any(a < b for a, b in zip(lens, lens[1:])):
        raise RuntimeError("rgpu: _pack_padded_sequence: lengths must be sorted in decreasing order "
                           "(use enforce_sorted=False)")
    t_len, b_len = (input.shape[1], input.shape[0]) if batch_first else (input.shape[0], input.shape[1])
    if lens[0] > t_len:
        raise RuntimeError("rgpu: _pack_padded_sequence: a length exceeds the sequence length")
    batch_sizes = torch.tensor([sum(1 for n in lens if n > t) for t in range(lens[0])], dtype=torch.int64)
    rows = _packed_rows(batch_sizes, t_len, b_len, batch_first).to(input.device)
    flat = aten.reshape.default(input, [t_len * b_len] + list(input.shape[2:]))
    return aten.index_select.default(flat, 0, rows), batch_sizes


def _rrelu_with_noise(self, noise, lower=0.125, upper=1.0 / 3, training=False, generator=None):
    """rrelu_with_noise: in training a negative x is scaled by a slope drawn from
    U(lower, upper) (noise := the slopes, 1 elsewhere); in eval by (lower+upper)/2."""
    if not training:
        return aten.leaky_relu.default(self, (lower + upper) / 2)
    slopes = aten.uniform_.default(aten.empty_like.default(self), lower, upper, generator=generator)
    r = aten.where.ScalarOther(aten.le.Scalar(self, 0), slopes, 1.0)
    aten.copy_.default(noise, r)
    return aten.mul.Tensor(self, r)


def _rrelu_with_noise_functional(self, noise, lower=0.125, upper=1.0 / 3, training=False, generator=None):
    noise = aten.clone.default(noise)
    return _rrelu_with_noise(self, noise, lower, upper, training, generator), noise


def _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """_weight_norm_interface_backward (w = v * g / |v|, the norm over every dim
    but dim): grad_g = sum(grad_w * v) / |v|, grad_v = g / |v| * (grad_w - v * grad_g / |v|)."""
    nd = saved_v.dim()
    others = [d for d in range(nd) if d != dim % nd] if nd else []
    s = aten.sum.dim_IntList(aten.mul.Tensor(grad_w, saved_v), others, True)
    grad_g = aten.div.Tensor(s, saved_norms)
    grad_v = aten.mul.Tensor(aten.div.Tensor(saved_g, saved_norms),
                             aten.sub.Tensor(grad_w, aten.mul.Tensor(saved_v, aten.div.Tensor(grad_g, saved_norms))))
    return grad_v, aten.reshape.default(grad_g, list(saved_g.shape))


# nested tensors of TransformerEncoder's fast path: an rgpu "nested" tensor is the
# padded tensor with its padding zeroed, and the (B, L) mask of valid positions
# kept beside it here; the fused layer reads it as a key padding mask.
import weakref                                                  # noqa: E402


class _ByIdentity:
    """tensor -> value while the tensor lives (a WeakKeyDictionary would compare
    tensors with ==)."""

    def __init__(self):
        self._d = {}

    def __setitem__(self, t, v):
        k = id(t)
        self._d[k] = (weakref.ref(t, lambda _r, k=k, d=self._d: d.pop(k, None)), v)

    def get(self, t):
        e = self._d.get(id(t))
        return e[1] if e is not None and e[0]() is t else None


_NESTED = _ByIdentity()


def _zero_padding(t, valid):
    return aten.masked_fill.Scalar(t, aten.unsqueeze.default(aten.logical_not.default(valid), -1), 0.0)


def _nested_tensor_from_mask_left_aligned(t, mask):
    """Whether each row of mask is ones then zeros (one wait, as on the CPU)."""
    m = aten._to_copy.default(mask, dtype=torch.int64)
    # left aligned: the mask never rises along the sequence
    rises = aten.gt.Tensor(aten.slice.Tensor(m, 1, 1), aten.slice.Tensor(m, 1, 0, -1))
    return not bool(aten.any.default(rises).item())


def _nested_tensor_from_mask(t, mask, mask_check=True):
    if mask_check and not _nested_tensor_from_mask_left_aligned(t, mask):
        raise RuntimeError("rgpu: _nested_tensor_from_mask: mask is not left aligned")
    valid = aten._to_copy.default(mask, dtype=torch.bool)
    r = _zero_padding(t, valid)
    _NESTED[r] = valid
    return r


def _to_padded_tensor(self, padding, output_size=None):
    valid = _NESTED.get(self)
    if valid is None:
        raise NotImplementedError("rgpu: to_padded_tensor of a tensor that is not nested")
    r = aten.masked_fill.Scalar(self, aten.unsqueeze.default(aten.logical_not.default(valid), -1), padding)
    if output_size is not None and list(output_size) != list(r.shape):
        full = aten.full.default(list(output_size), padding, dtype=r.dtype, device=r.device)
        idx = [slice(0, n) for n in r.shape]
        aten.copy_.default(aten.slice.Tensor(aten.slice.Tensor(full, 0, 0, r.shape[0]), 1, 0, r.shape[1]), r)
        r = full
    return r


def _slice_backward(grad, input_sizes, dim, start, end, step):
    """slice_backward as zeros and one copy into the slice (torch's goes through
    an index gather: many records per call, and RNN backward calls it per step)."""
    r = aten.zeros.default(list(input_sizes), dtype=grad.dtype, device=grad.device)
    aten.copy_.default(aten.slice.Tensor(r, dim, start, end, step), grad)
    return r


def _slice_scatter(self, src, dim=0, start=None, end=None, step=1):
    r = aten.clone.default(self)
    aten.copy_.default(aten.slice.Tensor(r, dim, start, end, step), src)
    return r


def _mha_core(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
              mask, need_weights, average_attn_weights, mask_type):
    """The math of _native_multi_head_attention on batch-first (B, L, E) inputs:
    a mask (bool, or any dtype read as bool: nonzero masks) of type 0 (L, S),
    1 (B, S) key padding or 2 (B, H, L, S); a fully masked row gives zeros."""
    b, lq, e = query.shape
    s = key.shape[1]
    d = e // num_head
    wq, wk, wv = aten.split.Tensor(qkv_weight, e, 0)
    bq, bk, bv = aten.split.Tensor(qkv_bias, e, 0) if qkv_bias is not None else (None, None, None)

    def heads(x, w, bias, n):
        y = aten.linear.default(x, w, bias)
        return aten.permute.default(aten.reshape.default(y, [b, n, num_head, d]), [0, 2, 1, 3])
    q = aten.div.Scalar(heads(query, wq, bq, lq), d ** 0.5)
    k = heads(key, wk, bk, s)
    v = heads(value, wv, bv, s)
    scores = aten.matmul.default(q, aten.transpose.int(k, -1, -2))         # (B, H, L, S)
    m = None
    if mask is not None:
        m = mask if mask.dtype == torch.bool else aten.ne.Scalar(mask, 0)
        if mask_type == 1 or (mask_type is None and m.dim() == 2 and m.shape[0] == b and lq != b):
            m = aten.reshape.default(m, [b, 1, 1, s])
        scores = aten.masked_fill.Scalar(scores, m, float("-inf"))
    attn = aten._softmax.default(scores, -1, False)
    if m is not None:
        attn = aten.masked_fill.Scalar(attn, m, 0.0)       # fully masked rows: 0, not NaN
    out = aten.matmul.default(attn, v)                                       # (B, H, L, D)
    out = aten.reshape.default(aten.permute.default(out, [0, 2, 1, 3]), [b, lq, e])
    out = aten.linear.default(out, proj_weight, proj_bias)
    if not need_weights:
        return out, None
    if average_attn_weights:
        attn = aten.div.Scalar(aten.sum.dim_IntList(attn, [1]), num_head)
    return out, attn


def _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
                                 proj_bias, mask=None, need_weights=True, average_attn_weights=True,
                                 mask_type=None):
    nested = _NESTED.get(query)
    if nested is not None and mask is None:
        mask, mask_type = aten.logical_not.default(nested), 1
    return _mha_core(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
                     mask, need_weights, average_attn_weights, mask_type)


def _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                   use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2,
                                   norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
                                   mask=None, mask_type=None):
    """The fused TransformerEncoderLayer (eval, no grad) as its ops: attention
    block and feed-forward block, each with its residual and layer norm."""
    valid = _NESTED.get(src)
    if valid is not None and mask is None:
        mask, mask_type = aten.logical_not.default(valid), 1
    e = [src.shape[-1]]

    def ln(x, w, b):
        return aten.native_layer_norm.default(x, e, w, b, eps)[0]
    x = ln(src, norm_weight_1, norm_bias_1) if norm_first else src
    x = _mha_core(x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                  mask, False, False, mask_type)[0]
    x = aten.add.Tensor(x, src)
    if not norm_first:
        x = ln(x, norm_weight_1, norm_bias_1)
    res = x
    if norm_first:
        x = ln(x, norm_weight_2, norm_bias_2)
    x = aten.linear.default(x, ffn_weight_1, ffn_bias_1)
    x = aten.gelu.default(x) if use_gelu else aten.relu.default(x)
    x = aten.add.Tensor(aten.linear.default(x, ffn_weight_2, ffn_bias_2), res)
    if not norm_first:
        x = ln(x, norm_weight_2, norm_bias_2)
    if valid is not None:
        x = _zero_padding(x, valid)
        _NESTED[x] = valid
    return x


# The fused cells above run as ops now (cells.py: LSTM_CELL, GRU_CELL ...); their
# aten math stays as the CPU reference of the conformance cases (ATen has no
# CPU kernel for them).

# --- sorting: through the SORT / SEARCHSORTED ops ------------------------------------

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


def _grouped_mm(self, mat2, offs=None, bias=None, out_dtype=None):
    """_grouped_mm (transformers' MoE experts): every group's product at once,
    then each row (column) takes its group's; the groups come from offs (cumulative
    ends) on the device, so nothing waits. 2-d x 3-d: rows grouped; 3-d x 2-d:
    columns grouped; 2-d x 2-d: K grouped, out (G, M, N); 3-d x 3-d: bmm."""
    if bias is not None:
        return NotImplemented
    if offs is None:
        if self.dim() != 3 or mat2.dim() != 3:
            return NotImplemented
        r = aten.bmm.default(self, mat2)
    elif self.dim() == 2 and mat2.dim() == 2:
        k = aten.arange.default(self.shape[1], device=self.device)
        ends = aten.view.default(offs, [-1, 1])
        starts = aten.sub.Tensor(ends, aten.view.default(aten.diff.default(offs, prepend=aten.zeros.default(
            [1], dtype=offs.dtype, device=offs.device)), [-1, 1]))
        mask = aten.logical_and.default(aten.ge.Tensor(k, starts), aten.lt.Tensor(k, ends))   # (G, K)
        r = aten.matmul.default(aten.mul.Tensor(aten.unsqueeze.default(self, 0),
                                                aten.unsqueeze.default(mask.to(self.dtype), 1)), mat2)
    else:
        rows = self.dim() == 2                          # 2-d x 3-d: rows; 3-d x 2-d: columns
        if rows == (mat2.dim() == 2):
            return NotImplemented
        allg = aten.matmul.default(aten.unsqueeze.default(self, 0) if rows else self, mat2)   # (G, M, N)
        n = allg.shape[1] if rows else allg.shape[2]
        idx = aten.arange.default(n, dtype=offs.dtype, device=self.device)
        gid = aten.searchsorted.Tensor(offs, idx, right=True)
        inside = aten.lt.Scalar(gid, offs.shape[0])
        gid = aten.clamp_max.default(gid, offs.shape[0] - 1)
        shape = [1, n, allg.shape[2]] if rows else [1, allg.shape[1], n]
        view = [1, n, 1] if rows else [1, 1, n]
        r = aten.squeeze.dim(aten.gather.default(allg, 0, aten.expand.default(aten.view.default(gid, view), shape)), 0)
        r = aten.where.ScalarOther(aten.view.default(inside, view[1:]), r, 0)
    return r if out_dtype is None or out_dtype == r.dtype else aten._to_copy.default(r, dtype=out_dtype)


_OWN = {aten.copy.default: _copy, aten.flip.default: _flip, aten.var_mean.correction: _var_mean,
        aten.std_mean.correction: _std_mean,
        aten.multilabel_margin_loss_forward.default: _multilabel_margin_loss_forward,
        aten.multilabel_margin_loss_backward.default: _multilabel_margin_loss_backward,
        aten.multi_margin_loss.default: _multi_margin_loss,
        aten.multi_margin_loss_backward.default: _multi_margin_loss_backward,
        aten.hardshrink_backward.default: _shrink_backward, aten.softshrink_backward.default: _shrink_backward,
        aten.replication_pad1d_backward.default: _replication_pad_backward,
        aten.replication_pad2d_backward.default: _replication_pad_backward,
        aten.replication_pad3d_backward.default: _replication_pad_backward,
        # nn modules' ops
        aten._pack_padded_sequence.default: _pack_padded_sequence,
        aten.rrelu_with_noise.default: _rrelu_with_noise,
        aten.rrelu_with_noise_functional.default: _rrelu_with_noise_functional,
        aten._weight_norm_interface_backward.default: _weight_norm_interface_backward,
        aten._nested_tensor_from_mask_left_aligned.default: _nested_tensor_from_mask_left_aligned,
        aten._nested_tensor_from_mask.default: _nested_tensor_from_mask,
        aten.to_padded_tensor.default: _to_padded_tensor,
        aten.slice_backward.default: _slice_backward, aten.slice_scatter.default: _slice_scatter,
        aten._native_multi_head_attention.default: _native_multi_head_attention,
        aten._transformer_encoder_layer_fwd.default: _transformer_encoder_layer_fwd,
        aten._grouped_mm.default: _grouped_mm}


def _copy_to(a, b):
    """prims.copy_to (torch's diagonal_scatter/select_scatter decompositions): copy_ into a."""
    return aten.copy_.default(a, b)


def _as_strided_scatter(self, src, size, stride, storage_offset):
    """prims.as_strided_scatter: a copy of self with src written through the view."""
    out = aten.clone.default(self)
    aten.copy_.default(aten.as_strided.default(out, size, stride, storage_offset), src)
    return out


def _angle(x):
    """angle of a real tensor: pi where x < 0, else 0; NaN stays NaN (ints give floats)."""
    if not x.is_floating_point():
        x = aten._to_copy.default(x, dtype=torch.get_default_dtype())
    r = aten.mul.Scalar(aten._to_copy.default(aten.lt.Scalar(x, 0), dtype=x.dtype), math.pi)
    return aten.where.self(aten.isnan.default(x), x, r)


def _convert_element_type(a, dtype):
    """prims.convert_element_type (decompositions at low precision: renorm) is a cast."""
    return aten._to_copy.default(a, dtype=dtype)


_OWN_BY_NAME = {"prims::fma": _fma,       # prims register late (torch._prims)
                "prims::convert_element_type": _convert_element_type,
                "prims::copy_to": _copy_to, "prims::as_strided_scatter": _as_strided_scatter}
_OWN[aten.angle.default] = _angle
_OWN.update(_decomp_sample.TABLE)         # pooling, upsampling, grid sampling
_OWN.update(_OWN_INDEX)                   # index ops
_OWN.update(_OWN_SORT)                    # sorting
_OWN.update(_mexp.TABLE)                  # matrix_exp
_OWN.update(_composite_out.TABLE)          # out= composites that don't write out
_OWN_BY_NAME.update(_nnops.BY_NAME)        # torch_nn:: custom ops (LinearCrossEntropyLoss)


# --- _foreach_* ------------------------------------------------------------------------

def _powsum(t, ord=2, dtype=None):
    """_foreach_powsum's per-tensor value: sum(|t| ** ord), as ATen computes it."""
    a = aten.abs.default(t)
    if dtype is not None:
        a = a.to(dtype)
    return aten.sum.default(aten.pow.Tensor_Scalar(a, ord))


def _elementwise_fn(base, inplace, scalar_other):
    """The per-tensor function of _foreach_<base>[_]: a torch.Tensor method; for
    an in-place form without one (maximum_, minimum_), the out= form written
    into the target (one record, like the method's)."""
    if base == "norm":
        return lambda t, ord=2, dtype=None: torch.linalg.vector_norm(t, ord, dtype=dtype)
    if base == "powsum":
        return _powsum
    if base == "zero" and not inplace:
        return lambda t: torch.zeros_like(t)
    if base == "copy" and not inplace:
        return lambda t, src, non_blocking=False: aten.copy.default(t, src, non_blocking)
    if scalar_other and base in ("maximum", "minimum"):
        base = "clamp_min" if base == "maximum" else "clamp_max"
    fn = getattr(torch.Tensor, base + ("_" if inplace else ""), None)
    if fn is None and inplace:
        oop = getattr(torch, base, None)
        if oop is None:
            return None
        def into_self(t, *a, **k):
            return oop(t, *a, out=t, **k)
        into_self.out_is_self = True
        return into_self
    if fn is None:
        fn = getattr(torch, base, None)
    return fn


# The per-tensor calls of a _foreach_* op go through torch's dispatcher and back
# into __torch_dispatch__ (autograd, argument parsing, the wrapper: more than
# half of each call's client time). The first call shows which ATen op the
# per-tensor function sends and how the dispatcher lays out its arguments; when
# it sent exactly one op and _plan reproduces that layout, the other tensors'
# calls go straight to that op's handler with their arguments laid out the same
# way: the same records. Autograd and the version counter are the foreach op's
# own, above __torch_dispatch__ (its in-place lists were bumped there), and the
# write check is the foreach op's (every target written); an in-place target's
# shape is checked here. _FAST = False takes the dispatcher for every call.
_FAST = True
_MISSING = object()
_PLAIN = frozenset({RemoteTensor, type(None), int, float, bool})


def _is_default(a, v):
    if not a.has_default_value():
        return False
    d = a.default_value
    return v is None if d is None else type(v) is type(d) and v == d


def _plan(top, srcs, vals, j):
    """The layout of the other tensors' calls, or None. top = (func, args,
    kwargs), the first call's dispatch; srcs: the per-tensor function's
    arguments, [(name or None when positional, index into vals, varies with
    the tensor)]. The dispatcher hands __torch_dispatch__ the arguments up to
    the last positional one given, leaving out trailing positional defaults,
    and keyword-only ones unless equal to their default. The plan: ([(vals
    index, varies)] positional, [(name, vals index, varies)] keyword), laid
    out from the first call's values, and checked against what the dispatcher
    made of them. An argument that varies and has a default is left out
    where it equals the default: the plan's third list names them, and a
    tensor whose value is the default takes the dispatcher."""
    if top is None:
        return None
    func, args, kwargs = top
    params = func._schema.arguments
    npos = sum(1 for name, _, _ in srcs if name is None)
    if npos > len(params) or any(a.kwarg_only for a in params[:npos]):
        return None
    src = [None] * len(params)
    k = 0
    for name, i, var in srcs:
        if name is None:
            src[k] = (i, var)
            k += 1
            continue
        p = next((q for q, a in enumerate(params) if a.name == name), None)
        if p is None or src[p] is not None:
            return None
        src[p] = (i, var)
    pos, kw, dflt = [], [], []
    for p, a in enumerate(params):
        if src[p] is None:
            if not a.has_default_value():
                return None
            if not a.kwarg_only:
                pos.append((p, None, False))
            continue
        i, var = src[p]
        v = vals[i][j] if var else vals[i]
        if var and a.has_default_value():
            if _is_default(a, v):
                return None
            dflt.append((i, a))
        if type(v) not in _PLAIN:
            return None
        if a.kwarg_only:
            if not _is_default(a, v):
                kw.append((a.name, i, var))
        else:
            pos.append((p, src[p], _is_default(a, v)))
    while pos and (pos[-1][1] is None or pos[-1][2]):
        pos.pop()
    if any(s is None for _, s, _ in pos):
        return None                     # a default in the middle: not a layout seen here
    plan = ([s for _, s, _ in pos], kw, dflt)
    a, k = _lay_out(plan, vals, j)
    if not _same_layout(a, args) or set(k) != set(kwargs or ()) or \
            not all(_same_layout((k[n],), (kwargs[n],)) for n in k):
        return None
    return plan


def _lay_out(plan, vals, j):
    return (tuple([vals[i][j] if var else vals[i] for i, var in plan[0]]),
            {n: vals[i][j] if var else vals[i] for n, i, var in plan[1]})


def _same_layout(xs, ys):
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if x is not y:
                return False
        elif type(x) is not type(y) or x != y:
            return False
    return True


def _args_of(srcs, vals, j):
    """The per-tensor function's (positional, keyword) arguments for tensor j."""
    pos, kw = [], {}
    for name, i, var in srcs:
        v = vals[i][j] if var else vals[i]
        if name is None:
            pos.append(v)
        else:
            kw[name] = v
    return pos, kw


# A foreach call whose per-tensor calls all took their op's table handler
# leaves its specs (output metadata and prep, one per tensor, as that handler
# cached them) under the keys of the whole call: the tensors' keys list by
# list, the scalars as the per-tensor keys hold them (a float by its type
# where the op's key does), which lists' tensors share a storage at each
# position. A later call with the same keys (every optimizer step: the same
# parameters, states and gradients' shapes) skips the dispatcher's key and
# cache lookup per tensor and records through the table handler's tail: the
# same records. _LISTS holds them; _FF, per foreach overload, whether its
# per-tensor op keys a float by type (learned at its first call).
_LISTS = {}
_LISTS_MAX = 4096
_FF = {}
_RT = frozenset((RemoteTensor,))
_NUM = frozenset((int, float, bool))
_CPLX = frozenset((torch.complex32, torch.complex64, torch.complex128))


def _list_sig(func, vals, kinds, ff):
    """The keys of a foreach call's per-tensor calls as one tuple, or None
    when a list holds anything but rgpu tensors of real dtypes or numbers, or
    a single tensor argument shares a storage with a list's tensor."""
    parts = [id(func), ff]
    sts, consts = [], []
    for k, v in zip(kinds, vals):
        if k == "list":
            if frozenset(map(type, v)) != _RT:
                return None
            keys = tuple([t._key for t in v])
            if any(key[3] in _CPLX for key in keys):
                return None
            parts.append(keys)
            sts.append([t._st for t in v])
        elif k == "scalarlist":
            if ff and all(type(x) is float for x in v):
                parts.append((float, len(v)))
            elif frozenset(map(type, v)) <= _NUM:
                parts.append(tuple([(type(x), x) for x in v]))
            else:
                return None
        else:
            tv = type(v)
            if tv is RemoteTensor:
                if v._key[3] in _CPLX:
                    return None
                parts.append(("tensor", v._key))
                consts.append(v._st)
            elif tv in _NUM:
                parts.append((float,) if ff and tv is float else (tv, v))
            elif v is None or tv is torch.dtype:
                parts.append(v)
            else:
                return None
    for a in range(len(sts)):
        for b in range(a + 1, len(sts)):
            parts.append(tuple(map(operator.is_, sts[a], sts[b])))
    if consts and any(c in st for c in consts for st in sts):
        return None
    return tuple(parts)


def _any_bits(vals, kinds):
    """Whether a list's tensor has the lazy conj or neg bit (torch's fallbacks
    resolve them before a foreach op; checked where the per-tensor op's
    handler would resolve them itself)."""
    return any(t.is_conj() or t.is_neg() for k, v in zip(kinds, vals) if k == "list" for t in v)


def _learn(func, vals, kinds, n, plan, h):
    """Keep a call's specs in _LISTS after each of its n tensors took h, the
    handler of a table op (else nothing is kept), with arguments laid out by
    plan."""
    table = getattr(h, "table", None)
    if table is None:
        return
    ff = table.float_free
    _FF[id(func)] = ff
    sig = _list_sig(func, vals, kinds, ff)
    if sig is None:
        return
    specs = []
    for j in range(n):
        spec = table.spec_of(*_lay_out(plan, vals, j))
        if spec is None:
            return
        specs.append(spec)
    if len(_LISTS) >= _LISTS_MAX:
        _LISTS.clear()
    _LISTS[sig] = (table.tail, plan, specs, getattr(h, "resolves", False))


def _foreach_handler(func):
    """Per-tensor calls of the base op. In-place forms write each target
    (dispatch's write check holds them to it); out= forms compute the
    out-of-place values and copy them into `out`."""
    s = func._schema
    op = s.name[len("aten::_foreach_"):]
    inplace = op.endswith("_")
    base = op[:-1] if inplace else op
    params = [a for a in s.arguments if a.name != "out"]
    has_out = len(params) != len(s.arguments)
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
        vals = list(args[:len(params)]) + [kwargs[n] if n in kwargs else params[i].default_value
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
        srcs = [(kw_names[i] if as_kw[i] else None, i, k == "list" or k == "scalarlist") for i, k in enumerate(ks)]
        varying = [i for _, i, var in srcs if var]
        j = 0
        ff = _FF.get(id(func))
        sig = _list_sig(func, vals, ks, ff) if n > 1 and _FAST and ff is not None else None
        known = _LISTS.get(sig) if sig is not None else None
        if known is not None:
            tail, plan, specs, bits = known
            # a value the dispatcher would leave out as its default: another layout (the dispatcher's path)
            if not any(_is_default(p, x) for i, p in plan[2] for x in vals[i]) and \
                    not (bits and _any_bits(vals, ks)):
                for j in range(n):
                    results.append(tail(*_lay_out(plan, vals, j), specs[j]))
                j = n
        if j < n and n > 1 and _FAST:
            pos, kw = _args_of(srcs, vals, 0)
            r, top = _call_single(fn, pos, kw)
            results.append(r)
            j = 1
            # the out= form written into the target: its out argument is the tensor itself
            plan = _plan(top, srcs + [("out", 0, True)] if getattr(fn, "out_is_self", False) else srcs, vals, 0)
            if plan is not None:
                f = top[0]
                h = HANDLERS.get(id(f))
                h = getattr(h, "unchecked", h)
                dflt = plan[2]
                while h is not None and j < n:
                    if any(type(vals[i][j]) not in _PLAIN for i in varying) or \
                            (dflt and any(_is_default(p, vals[i][j]) for i, p in dflt)):
                        pos, kw = _args_of(srcs, vals, j)
                        results.append(fn(*pos, **kw))
                    elif inplace:
                        t = vals[0][j]
                        key = t._key
                        results.append(h(f, *_lay_out(plan, vals, j)))
                        if t._key is not key and t._key[0] != key[0]:
                            raise RuntimeError(f"output with shape {list(key[0])} doesn't match the broadcast "
                                               f"shape {list(t._key[0])} (rgpu: {label} resized its input)")
                    else:
                        results.append(h(f, *_lay_out(plan, vals, j)))
                    j += 1
                if j == n and len(results) == n:
                    _learn(func, vals, ks, n, plan, h)
        for j in range(j, n):
            pos, kw = _args_of(srcs, vals, j)
            results.append(fn(*pos, **kw))
        if has_out:
            out = kwargs["out"] if "out" in kwargs else args[len(params)]
            if len(out) != n:
                raise RuntimeError(f"{label}: out has {len(out)} tensors, self has {n}")
            for o, r in zip(out, results):
                if o.shape != r.shape:
                    o.resize_(r.shape)
                o.copy_(r)
            return None
        return None if inplace else results
    return handler
