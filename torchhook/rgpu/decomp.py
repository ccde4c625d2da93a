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


_OWN = {aten.copy.default: _copy, aten.flip.default: _flip, aten.var_mean.correction: _var_mean,
        aten.std_mean.correction: _std_mean}
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
