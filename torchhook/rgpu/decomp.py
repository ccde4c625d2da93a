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


# --- issue 13: modules (packed sequences, rrelu, weight_norm, the fused transformer) --

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
_OWN = {aten.copy.default: _copy, aten.flip.default: _flip, aten.var_mean.correction: _var_mean,
        aten.std_mean.correction: _std_mean,
        # issue 13: modules
        aten._pack_padded_sequence.default: _pack_padded_sequence,
        aten.rrelu_with_noise.default: _rrelu_with_noise,
        aten.rrelu_with_noise_functional.default: _rrelu_with_noise_functional,
        aten._weight_norm_interface_backward.default: _weight_norm_interface_backward,
        aten._nested_tensor_from_mask_left_aligned.default: _nested_tensor_from_mask_left_aligned,
        aten._nested_tensor_from_mask.default: _nested_tensor_from_mask,
        aten.to_padded_tensor.default: _to_padded_tensor,
        aten.slice_backward.default: _slice_backward, aten.slice_scatter.default: _slice_scatter,
        aten._native_multi_head_attention.default: _native_multi_head_attention,
        aten._transformer_encoder_layer_fwd.default: _transformer_encoder_layer_fwd}
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
