"""The op table: which record each ATen overload on rgpu tensors becomes.

TABLE maps an OpOverload to an Entry(kind, op, mapper, prep, overlap, pre); every
overload rgpu runs as ops of trace-format/ops.def is here, once. dispatch.py
turns an entry into the overload's handler (output metadata, the cache,
recording); it keeps only overloads that aren't one op: views, transfers,
the *_like factories, and the op families that register handlers of their
own (random.py, datadep.py, amp.py).
  kind "one"    one record with one output: new, or the written in-place/out=
                argument itself (overlap: check the written argument for
                overlapping inputs, as TensorIterator does; fill_ doesn't)
  kind "multi"  one record with several new outputs (an output ATen returns
                as None, output_mask false, is recorded absent: tid 0)
  kind "handler" mapper is a whole handler(func, args, kwargs): composites that
                re-enter dispatch with smaller ops (stack, mv, dot)
mapper(args, kwargs, extra) -> (op, ins, record args, temps to free or None)
runs per op; prep(args, kwargs) -> extra runs once per cache key (dispatch
keeps it in the cached spec): the DTYPE compute of pointwise ops and every
record arg that depends only on the key (normalised dims, pool windows ...).
pre(handler, func, args, kwargs) runs in place of the op's handler: it calls
handler(func, args, kwargs) when one record can do the op, and otherwise
does it itself (cat of more tensors than a record takes, index with boolean
or CPU indices, copy_ across devices).

Adding an op is one line in _table(); a plain pointwise op (one tensor, or
two tensor-or-scalar operands, and the DTYPE compute: opinfo.UNARY / BINARY)
needs none, its ops.def line maps every ATen overload of its name. Ops of
other kinds go to decomp.py. Per-op facts that are ops.def's (compute class,
input limits) come from opinfo.py.

Conventions from ops.def: a "t|s" slot holds a tensor id, or 0 with the
scalar in the record arg of the same position; the last arg of a pointwise op
is its DTYPE compute, the dtype TensorIterator computes in."""
import torch

from . import _C, opinfo, transfer
from ._dtypes import TO_RGPU, c10_name
from .args import arg, need_remote, operand, slot_of as _slot, tid_of as _tid
from .datadep import expand_masks
from .tensor import DEVICE, RemoteTensor, key_of, meta_of, out_def, record_new, record_view

aten = torch.ops.aten
C = _C
_META = torch.device("meta")

DT = {d: bytes((n,)) for d, n in TO_RGPU.items()}       # a DTYPE record arg (rgpu._C)


class Entry:
    __slots__ = ("kind", "op", "mapper", "prep", "overlap", "pre")

    def __init__(self, kind, op, mapper, prep=None, overlap=True, pre=None):
        self.kind, self.op, self.mapper, self.prep, self.overlap, self.pre = kind, op, mapper, prep, overlap, pre


# --- type promotion (ATen's ResultTypeState) ----------------------------------------

def _promote(a, b):
    return b if a is None else a if b is None else torch.promote_types(a, b)


def _combine(hi, lo):
    if hi is None:
        return lo
    if lo is None or hi.is_floating_point:
        return hi
    if hi is torch.bool or lo.is_floating_point:
        return torch.promote_types(hi, lo)
    return hi


def result_type(*xs):
    """torch.result_type over any number of operands: tensors with dims, then
    zero-dim tensors, then Python scalars (a float one counts as the default
    dtype); None is skipped."""
    dim = zero = wrapped = None
    for x in xs:
        if x is None:
            continue
        if isinstance(x, torch.Tensor):
            if x.dim():
                dim = _promote(dim, x.dtype)
            else:
                zero = _promote(zero, x.dtype)
        elif type(x) is bool:
            wrapped = _promote(wrapped, torch.bool)
        elif type(x) is int:
            wrapped = _promote(wrapped, torch.int64)
        elif type(x) is float:
            wrapped = _promote(wrapped, torch.get_default_dtype())
        else:
            raise TypeError(f"rgpu: unsupported scalar operand of type {type(x).__name__}")
    return _combine(dim, _combine(zero, wrapped))


def _compute(floaty, *xs):
    """The DTYPE arg: the common dtype; integer inputs of float ops (exp, atan2 ...)
    compute in the default float dtype like TensorIterator's promote_integer_inputs_to_float."""
    dt = result_type(*xs)
    if floaty and not dt.is_floating_point:
        dt = torch.get_default_dtype()
    return DT[dt]


def _compute_of(*pos, floaty=False):
    """A prep: the DTYPE compute of the arguments at positions pos."""
    def prep(args, kwargs):
        return _compute(floaty, *[args[p] for p in pos])
    return prep


# --- arithmetic: ops.def's first ops, a tensor and a scalar form each -------------------

def _arith(op_t, op_s, alpha_pos):
    """add/sub (alpha_pos: where alpha sits, -1 for kwarg-only) and mul/div (alpha_pos None)."""
    def mapper(args, kwargs, _):
        a, b = args[0], args[1]
        temps = []
        if alpha_pos is None:
            targs = ()
        else:
            alpha = kwargs.get("alpha", 1) if alpha_pos < 0 else arg(args, kwargs, alpha_pos, "alpha", 1)
            targs = (alpha,)
        if not isinstance(a, torch.Tensor):     # a Python scalar first: torch.sub(1, x) in decompositions
            return _arith_scalar_first(op_t, a, b, targs, temps)
        if isinstance(b, torch.Tensor):
            if type(b) is RemoteTensor or type(a) is not RemoteTensor:
                return op_t, (operand(a, temps), operand(b, temps)), targs, temps
            b = b.item()                        # CPU scalar tensor: a scalar op
        return op_s, (operand(a, temps),), (b,) + targs, temps
    return op_t, None, mapper


def _safe_cast_prep(inplace):
    """A prep for the in-place and out= forms of add/sub/mul/div: TensorIterator's
    rule that the common dtype casts safely to the written tensor (ATen raises;
    torch's meta kernel of mul_ does not check it, and the record would
    truncate: int.mul_(0.5) gave zeros)."""
    def prep(args, kwargs):
        out = args[0] if inplace else kwargs["out"]
        common = result_type(args[0], args[1])
        if not torch.can_cast(common, out.dtype):
            raise RuntimeError(f"result type {c10_name(common)} can't be cast to the desired output type "
                               f"{c10_name(out.dtype)}")
        return None
    return prep


def _arith_scalar_first(op_t, a, b, targs, temps):
    """a OP b with a Python scalar a and a tensor b: mul, and add without alpha, as
    b OP a; sub as rsub (a - alpha*b); otherwise a as a 0-d CPU tensor of its own
    (exact) value, uploaded for the record, which computes in the result dtype."""
    alpha = targs[0] if targs else 1
    if op_t == C.OP_MUL_TENSOR or (op_t == C.OP_ADD_TENSOR and alpha == 1):
        return (C.OP_MUL_SCALAR if op_t == C.OP_MUL_TENSOR else C.OP_ADD_SCALAR), (operand(b, temps),), \
            (a,) + targs, temps
    if op_t == C.OP_SUB_TENSOR:
        return C.OP_RSUB_SCALAR, (operand(b, temps),), (a, alpha), temps
    dt = torch.bool if type(a) is bool else torch.int64 if type(a) is int else torch.float64
    return op_t, (operand(torch.tensor(a, dtype=dt), temps), operand(b, temps)), targs, temps


def _alpha_pos(f):
    """Where f's alpha argument sits: its position, or -1 when it is keyword-only."""
    a = next(a for a in f._schema.arguments if a.name == "alpha")
    return -1 if a.kwarg_only else f._schema.arguments.index(a)


def _rsub(args, kwargs, _):
    a, b = args[0], args[1]                     # b - alpha * a
    alpha = arg(args, kwargs, 2, "alpha", 1)
    temps = []
    if isinstance(b, torch.Tensor):
        return C.OP_SUB_TENSOR, (operand(b, temps), operand(a, temps)), (alpha,), temps
    return C.OP_RSUB_SCALAR, (operand(a, temps),), (b, alpha), temps


def _fill(args, kwargs, _):
    v = args[1]
    if isinstance(v, torch.Tensor):
        if v.dim() != 0:
            raise RuntimeError("fill_ only supports 0-dimension value tensor but got tensor with "
                               f"{v.dim()} dimensions.")
        if type(v) is RemoteTensor:
            return C.OP_COPY, (v._tid,), (), None
        v = v.item()
    return C.OP_FULL, (), (v,), None


def _zero(args, kwargs, _):
    return C.OP_FULL, (), (0,), None


def _copy(args, kwargs, _):
    return C.OP_COPY, (args[1]._tid,), (), None


def _copy_pre(handler, func, args, kwargs):
    """copy_ between rgpu tensors is the table's COPY; from or to a CPU tensor, a transfer."""
    dst, src = args[0], args[1]
    if type(dst) is RemoteTensor:
        if type(src) is RemoteTensor:
            return handler(func, args, kwargs)
        if not isinstance(src, torch.Tensor):
            raise TypeError(f"copy_(): argument 'src' must be Tensor, not {type(src).__name__}")
        meta_of(dst).copy_(torch.empty(src.shape, dtype=src.dtype, device=_META))   # shape check
        transfer.copy_from_cpu(dst, src)
        return dst
    if dst.device.type != "cpu":
        raise NotImplementedError(f"rgpu: copy from rgpu to {dst.device} is not supported")
    dst.copy_(transfer.download(src))
    return dst


# --- pointwise --------------------------------------------------------------------------

_APPROX = {"none": 0, "tanh": 1}


def _gelu_approx(args, kwargs):
    return _APPROX[kwargs.get("approximate", "none")]


def _unary(op, own=None):
    prep = _compute_of(0, floaty=op in opinfo.FLOAT_COMPUTE)
    if own is None:
        def mapper(args, kwargs, dt):
            return op, (_tid(args[0]),), (dt,), None
    else:
        def mapper(args, kwargs, dt):
            return op, (_tid(args[0]),), (own(args, kwargs), dt), None
    return op, prep, mapper


def _binary_slots(op, mode=None):
    """op(a, b) with two "t|s" slots; mode: DIV_MODE's rounding arg, before the DTYPE."""
    prep = _compute_of(0, 1, floaty=op in opinfo.FLOAT_COMPUTE)
    if mode is None:
        def mapper(args, kwargs, dt):
            ta, sa = _slot(args[0])
            tb, sb = _slot(args[1])
            return op, (ta, tb), (sa, sb, dt), None
    else:
        def mapper(args, kwargs, dt):
            ta, sa = _slot(args[0])
            tb, sb = _slot(args[1])
            return op, (ta, tb), (sa, sb, mode, dt), None
    return op, prep, mapper


def _div_mode(op_t, op_s):
    """div.Tensor_mode / div.Scalar_mode: DIV_MODE for trunc/floor, plain div for None."""
    _, prep, trunc = _binary_slots(C.OP_DIV_MODE, 1)
    floor = _binary_slots(C.OP_DIV_MODE, 2)[2]

    def mapper(args, kwargs, dt):
        mode = kwargs.get("rounding_mode")
        if mode is None:
            a, b = args[0], args[1]
            if isinstance(b, torch.Tensor) and type(b) is RemoteTensor:
                return op_t, (_tid(a), b._tid), (), None
            if isinstance(b, torch.Tensor):
                b = b.item()
            return op_s, (_tid(a),), (b,), None
        return (trunc if mode == "trunc" else floor)(args, kwargs, dt)
    return C.OP_DIV_MODE, prep, mapper


def _where():
    prep = _compute_of(1, 2)

    def mapper(args, kwargs, dt):
        ta, sa = _slot(args[1])
        tb, sb = _slot(args[2])
        return C.OP_WHERE, (_tid(args[0]), ta, tb), (None, sa, sb, dt), None
    return C.OP_WHERE, prep, mapper


def _masked_fill():
    """masked_fill(self, mask, value) = where(mask, value, self), computed in self's dtype."""
    def prep(args, kwargs):
        return DT[args[0].dtype]

    def mapper(args, kwargs, dt):
        tv, sv = _slot(args[2])
        return C.OP_WHERE, (_tid(args[1]), tv, _tid(args[0])), (None, sv, None, dt), None
    return C.OP_WHERE, prep, mapper


def _clamp(min_pos, max_pos):
    """clamp(self, min?, max?); clamp_min/clamp_max have one bound at position 1."""
    def bounds(args, kwargs):
        lo = arg(args, kwargs, 1, "min") if min_pos else None
        hi = arg(args, kwargs, max_pos, "max") if max_pos else None
        return lo, hi

    def prep(args, kwargs):
        lo, hi = bounds(args, kwargs)
        return _compute(False, args[0], lo, hi)

    def mapper(args, kwargs, dt):
        lo, hi = bounds(args, kwargs)
        tl, sl = _slot(lo)
        th, sh = _slot(hi)
        return C.OP_CLAMP, (_tid(args[0]), tl, th), (None, sl, sh, dt), None
    return C.OP_CLAMP, prep, mapper


def _lerp():
    prep = _compute_of(0, 1)

    def mapper(args, kwargs, dt):
        tw, sw = _slot(args[2])
        return C.OP_LERP, (_tid(args[0]), _tid(args[1]), tw), (None, None, sw, dt), None
    return C.OP_LERP, prep, mapper


def _addc(op, writes=None):
    """addcmul/addcdiv; writes: "self" (in-place), "out", or None. The written
    tensor must take the common dtype safely (TensorIterator; torch's meta
    kernels do not check it: int.addcmul_ of floats truncated)."""
    compute = _compute_of(0, 1, 2)

    def prep(args, kwargs):
        if writes is not None:
            out = args[0] if writes == "self" else kwargs["out"]
            common = result_type(args[0], args[1], args[2])
            if not torch.can_cast(common, out.dtype):
                raise RuntimeError(f"result type {c10_name(common)} can't be cast to the desired output type "
                                   f"{c10_name(out.dtype)}")
        return compute(args, kwargs)

    def mapper(args, kwargs, dt):
        return (op, (_tid(args[0]), _tid(args[1]), _tid(args[2])),
                (kwargs.get("value", 1), dt), None)
    return op, prep, mapper


def _act_backward(op, own=None):
    prep = _compute_of(0, 1)
    if own is None:
        def mapper(args, kwargs, dt):
            return op, (_tid(args[0]), _tid(args[1])), (dt,), None
    else:
        def mapper(args, kwargs, dt):
            return op, (_tid(args[0]), _tid(args[1])), (own(args, kwargs), dt), None
    return op, prep, mapper


# --- ops whose record args depend only on the cache key ------------------------------------

def _fixed(op, tensor_pos, prep):
    """ins: the tensor arguments at tensor_pos ((pos, name) pairs; None arguments,
    and a pos of None, give an absent input); args: prep's result, cached."""
    if len(tensor_pos) == 1 and tensor_pos[0][0] == 0:
        def mapper(args, kwargs, ra):
            return op, (_tid(args[0]),), ra, None
        return op, prep, mapper

    def mapper(args, kwargs, ra):
        temps = []
        ins = tuple(None if p is None else operand(arg(args, kwargs, p, n), temps)
                    for p, n in tensor_pos)
        return op, ins, ra, temps
    return op, prep, mapper


def _wrap(d, nd):
    return d % nd if nd else 0


def _dims(x, dim):
    """A dims list, wrapped; [] for all dims (None, or a 0-dim x)."""
    nd = x.dim()
    if dim is None or nd == 0:
        return []
    if type(dim) is int:
        return [dim % nd]
    return [d % nd for d in dim]


def _dims_keep(dim_pos, keep_pos):
    def prep(args, kwargs):
        x = args[0]
        dims = [] if dim_pos is None else _dims(x, arg(args, kwargs, dim_pos, "dim"))
        keep = False if keep_pos is None else bool(arg(args, kwargs, keep_pos, "keepdim", False))
        return (dims, keep)
    return prep


def _argdim():
    def prep(args, kwargs):
        d = arg(args, kwargs, 1, "dim")
        return (None if d is None else _wrap(d, args[0].dim()),
                bool(arg(args, kwargs, 2, "keepdim", False)))
    return prep


def _dim_keep_int():
    def prep(args, kwargs):
        return (_wrap(args[1], args[0].dim()), bool(arg(args, kwargs, 2, "keepdim", False)))
    return prep


def _var():
    def prep(args, kwargs):
        x = args[0]
        c = kwargs.get("correction")
        return (_dims(x, arg(args, kwargs, 1, "dim")), 1.0 if c is None else float(c),
                bool(kwargs.get("keepdim", False)))
    return prep


def _norm():
    def prep(args, kwargs):
        x = args[0]
        return (float(arg(args, kwargs, 1, "ord", 2)), _dims(x, arg(args, kwargs, 2, "dim")),
                bool(arg(args, kwargs, 3, "keepdim", False)))
    return prep


def _one_dim(pos):
    def prep(args, kwargs):
        return (_wrap(arg(args, kwargs, pos, "dim"), args[0].dim()),)
    return prep


def _int_arg(pos, name, default):
    def prep(args, kwargs):
        return (arg(args, kwargs, pos, name, default),)
    return prep


def _softmax_prep(args, kwargs):
    return (_wrap(args[1], args[0].dim()), bool(args[2]))


def _softmax_bw_prep(args, kwargs):
    return (_wrap(args[2], args[1].dim()), DT[args[3]])


def _pair(v, default=None):
    if v is None or (not isinstance(v, int) and len(v) == 0):
        return default
    if isinstance(v, int):
        return [v, v]
    v = list(v)
    return v * 2 if len(v) == 1 else v


def _pool_max(k_pos):
    def prep(args, kwargs):
        k = _pair(arg(args, kwargs, k_pos, "kernel_size"))
        s = _pair(arg(args, kwargs, k_pos + 1, "stride", []), k)
        p = _pair(arg(args, kwargs, k_pos + 2, "padding", 0))
        d = _pair(arg(args, kwargs, k_pos + 3, "dilation", 1))
        return (k, s, p, d, bool(arg(args, kwargs, k_pos + 4, "ceil_mode", False)))
    return prep


def _pool_avg(k_pos):
    def prep(args, kwargs):
        k = _pair(arg(args, kwargs, k_pos, "kernel_size"))
        s = _pair(arg(args, kwargs, k_pos + 1, "stride", []), k)
        p = _pair(arg(args, kwargs, k_pos + 2, "padding", 0))
        return (k, s, p, bool(arg(args, kwargs, k_pos + 3, "ceil_mode", False)),
                bool(arg(args, kwargs, k_pos + 4, "count_include_pad", True)),
                arg(args, kwargs, k_pos + 5, "divisor_override"))
    return prep


def _conv_prep(args, kwargs):
    return (list(args[3]), list(args[4]), list(args[5]), bool(args[6]), list(args[7]), args[8])


def _conv_bw_prep(args, kwargs):
    bs = args[3]
    return (None if bs is None else list(bs), list(args[4]), list(args[5]), list(args[6]),
            bool(args[7]), list(args[8]), args[9])


def _scatter(has_src, has_reduce):
    _RED = {None: 0, "add": 1, "multiply": 2}

    def prep(args, kwargs):
        return (_wrap(args[1], args[0].dim()), _RED[kwargs.get("reduce")] if has_reduce else 0)

    def mapper(args, kwargs, ra):
        dim, red = ra
        if has_src:
            return (C.OP_SCATTER, (_tid(args[0]), _tid(args[2]), _tid(args[3])),
                    (dim, None, red), None)
        v = args[3]
        if isinstance(v, torch.Tensor):
            v = v.item()
        return C.OP_SCATTER, (_tid(args[0]), _tid(args[2]), None), (dim, v, red), None
    return C.OP_SCATTER, prep, mapper


_SCATTER_REDUCE = {"sum": 0, "prod": 1, "mean": 2, "amax": 3, "amin": 4}


def _scatter_reduce_args(args, kwargs):
    """scatter_reduce.two's (dim, reduce, include_self)."""
    red = arg(args, kwargs, 4, "reduce")
    if red not in _SCATTER_REDUCE:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {red}")
    return (_wrap(args[1], args[0].dim()), _SCATTER_REDUCE[red], bool(arg(args, kwargs, 5, "include_self", True)))


def _gather_pre(handler, func, args, kwargs):
    """gather's index rules, at the call as on the CPU: a non-empty index is int64
    or int32; an empty one (any dtype, any dims) gives an empty result."""
    ix = arg(args, kwargs, 2, "index")
    if ix.numel() == 0 and func is aten.gather.default:
        # ATen checks neither dims nor dtype of an empty index
        return torch.empty(ix.shape, dtype=args[0].dtype, device=args[0].device)
    if ix.dtype not in (torch.int64, torch.int32) and ix.numel() != 0:
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    return handler(func, args, kwargs)


def _embedding_pre(handler, func, args, kwargs):
    """embedding(..., sparse=True) with a weight that will get a gradient: its
    backward makes a sparse COO gradient, and rgpu has no sparse tensors. Raised
    here, at the forward call: inside backward (autograd's device thread) the
    failure would abort the process."""
    if arg(args, kwargs, 4, "sparse", False) and torch.is_grad_enabled() and args[0].requires_grad:
        raise NotImplementedError("rgpu: embedding with sparse=True (nn.Embedding(sparse=True)) is not "
                                  "supported: its gradient is a sparse tensor, and rgpu has no sparse "
                                  "tensors; use sparse=False")
    return handler(func, args, kwargs)


def _index_add():
    def prep(args, kwargs):
        return _wrap(args[1], args[0].dim())

    def mapper(args, kwargs, dim):
        return (C.OP_INDEX_ADD, (_tid(args[0]), _tid(args[2]), _tid(args[3])),
                (dim, kwargs.get("alpha", 1)), None)
    return C.OP_INDEX_ADD, prep, mapper


def _mm(op, has_self):
    if not has_self:
        def mapper(args, kwargs, _):
            return op, (_tid(args[0]), _tid(args[1])), (), None
        return op, None, mapper

    def mapper(args, kwargs, _):
        temps = []
        return (op, (operand(args[0], temps), _tid(args[1]), _tid(args[2])),
                (_real_scalar(kwargs.get("beta", 1)), _real_scalar(kwargs.get("alpha", 1))), temps)
    return op, None, mapper


# --- complex matmul ---------------------------------------------------------------------------
# MM/BMM/ADDMM/BADDBMM take complex64/complex128 operands; their alpha/beta
# record args are real. A complex alpha or beta with no imaginary part is
# recorded as its real part; one with an imaginary part makes addmm/baddbmm
# beta*self + alpha*(a @ b) from mm/bmm, mul and add (the complex pointwise
# layer), beta == 0 ignoring self as ATen.

def _real_scalar(x):
    return x.real if isinstance(x, complex) else x


def _mm_complex_scalars_pre(handler, func, args, kwargs):
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    if not (isinstance(beta, complex) and beta.imag) and not (isinstance(alpha, complex) and alpha.imag):
        return handler(func, args, kwargs)
    self, a, b = args[0], args[1], args[2]
    if not self.dtype.is_complex:
        raise RuntimeError(f"{func}: a complex alpha or beta needs complex operands, got {self.dtype}")
    r = (aten.bmm if a.dim() == 3 else aten.mm).default(a, b)
    if alpha != 1:
        r = aten.mul.Tensor(r, alpha)
    if beta != 0:
        r = aten.add.Tensor(r, aten.mul.Tensor(self, beta) if beta != 1 else self)
    name = func._schema.name
    out = kwargs.get("out")
    if name.endswith("_"):
        return aten.copy_.default(self, r)
    if out is not None:
        if out.shape != r.shape:
            aten.resize_.default(out, r.shape)
        return aten.copy_.default(out, r)
    return r


def _pad():
    def mapper(args, kwargs, pad):
        return C.OP_CONSTANT_PAD_ND, (_tid(args[0]),), (pad, arg(args, kwargs, 2, "value", 0)), None
    return C.OP_CONSTANT_PAD_ND, (lambda args, kwargs: list(args[1])), mapper


def _legacy_empty(t):
    return t.dim() == 1 and t.shape[0] == 0


def _cat():
    """CAT of the inputs ATen doesn't skip (legacy 1-D empty ones); dim wrapped."""
    def prep(args, kwargs):
        ts = args[0]
        keep = tuple(i for i, t in enumerate(ts) if not _legacy_empty(t)) or (0,)
        nd = ts[keep[0]].dim()
        return (_wrap(arg(args, kwargs, 1, "dim", 0), nd),), keep

    def mapper(args, kwargs, extra):
        ra, keep = extra
        ts = args[0]
        return C.OP_CAT, tuple(_tid(ts[i]) for i in keep), ra, None
    return C.OP_CAT, prep, mapper


def _index():
    def mapper(args, kwargs, _):
        return C.OP_INDEX, (_tid(args[0]),) + tuple(None if i is None else _tid(i) for i in args[1]), (), None
    return C.OP_INDEX, None, mapper


def _index_put():
    def mapper(args, kwargs, _):
        temps = []
        ins = (_tid(args[0]), operand(args[2], temps)) + tuple(None if i is None else _tid(i)
                                                                for i in args[1])
        return C.OP_INDEX_PUT, ins, (bool(arg(args, kwargs, 3, "accumulate", False)),), temps
    return C.OP_INDEX_PUT, None, mapper


# --- composites: re-enter dispatch with table ops -------------------------------------------

def _unsqueezed(t, d):
    """aten.unsqueeze(t, d) with d in [0, t.dim()]: for an rgpu tensor the ALIAS
    record itself, its metadata by ATen's inferUnsqueezeGeometry, without a
    dispatch (a stack of many small tensors: clip_grad_norm_'s norms)."""
    if type(t) is not RemoteTensor:
        return aten.unsqueeze.default(t, d)
    sizes, strides, offset, dtype = t._key
    st = 1 if d >= len(sizes) else sizes[d] * strides[d]
    key = (sizes[:d] + (1,) + sizes[d:], strides[:d] + (st,) + strides[d:], offset, dtype)
    return record_view(t, key, out_def(key, -1))


def _stack(func, args, kwargs):
    ts = args[0]
    if not ts:
        raise RuntimeError("stack expects a non-empty TensorList")
    dim = arg(args, kwargs, 1, "dim", 0)
    nd = ts[0].dim() + 1
    if not -nd <= dim < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], "
                         f"but got {dim})")
    dim %= nd
    for i, t in enumerate(ts):
        if t.shape != ts[0].shape:
            raise RuntimeError("stack expects each tensor to be equal size, but got "
                               f"{list(ts[0].shape)} at entry 0 and {list(t.shape)} at entry {i}")
    parts = [_unsqueezed(t, dim) for t in ts]
    out = kwargs.get("out")
    if out is not None:
        return aten.cat.out(parts, dim, out=out)
    return aten.cat.default(parts, dim)


def _mm_squeezed(a, b, dims, kwargs):
    """mm(a, b) with dims squeezed away, into kwargs' out when there is one."""
    r = aten.mm.default(a, b)
    for d in dims:
        r = aten.squeeze.dim(r, d)
    out = kwargs.get("out")
    if out is None:
        return r
    if out.shape != r.shape:
        aten.resize_.default(out, r.shape)
    return aten.copy_.default(out, r)


def _mv(func, args, kwargs):
    a, v = args[0], args[1]
    if a.dim() != 2 or v.dim() != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {a.dim()}, {v.dim()}")
    return _mm_squeezed(a, aten.unsqueeze.default(v, 1), (1,), kwargs)


def _dot(func, args, kwargs):
    a, b = args[0], args[1]
    if a.dim() != 1 or b.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.dim()}D and {b.dim()}D tensors")
    if a.dtype != b.dtype:
        raise RuntimeError("dot : expected both vectors to have same dtype, but found "
                           f"{a.dtype} and {b.dtype}")
    return _mm_squeezed(aten.unsqueeze.default(a, 0), aten.unsqueeze.default(b, 1), (0, 0), kwargs)


# --- pre-passes: what a record can't take becomes table ops first ------------------------------

def _cat_pre(handler, func, args, kwargs):
    """cat of more tensors than a record takes: cat groups, then the groups."""
    ts = args[0]
    n = opinfo.CAT_MAX_IN
    if len(ts) <= n:
        return handler(func, args, kwargs)
    dim = arg(args, kwargs, 1, "dim", 0)
    parts = [aten.cat.default(list(ts[i:i + n]), dim) for i in range(0, len(ts), n)]
    return func(parts, dim, **kwargs)


def _to_rgpu_index(i):
    if i is None or type(i) is RemoteTensor:
        return i
    if isinstance(i, torch.Tensor) and i.device.type == "cpu":
        return i.to(DEVICE)
    return i


def _expand_masks(self, indices):
    """Boolean (and uint8) index tensors become the integer indices of their
    nonzero elements, one per mask dim, as ATen's expandTensors does (one wait
    for an rgpu mask, none for a CPU one), with ATen's mask shape checks."""
    return [_to_rgpu_index(i) for i in expand_masks(self, list(indices))]


def _needs_pre(indices):
    for i in indices:
        if i is not None and (type(i) is not RemoteTensor or i.dtype in (torch.bool, torch.uint8)):
            return True
    return False


def _index_pre(handler, func, args, kwargs):
    if not _needs_pre(args[1]):
        return handler(func, args, kwargs)
    indices = _expand_masks(args[0], args[1])
    return func(args[0], indices, *args[2:], **kwargs)


def _index_put_pre(handler, func, args, kwargs):
    indices = args[1]
    if not _needs_pre(indices):
        return handler(func, args, kwargs)
    self, values = args[0], args[2]
    indices = [_to_rgpu_index(i) for i in indices]
    accumulate = arg(args, kwargs, 3, "accumulate", False)
    m = indices[0] if len(indices) == 1 else None
    if (m is not None and m.dtype is torch.bool and not accumulate and values.numel() == 1
            and m.dim() <= self.dim() and tuple(m.shape) == tuple(self.shape[:m.dim()])):
        # self[mask] = v: a masked fill, no wait for the mask's count
        m = aten.view.default(m, list(m.shape) + [1] * (self.dim() - m.dim()))
        v = values if values.dim() == 0 else aten.view.default(values, [])
        out = kwargs.get("out")
        if func._schema.name.endswith("_"):
            return aten.masked_fill_.Tensor(self, m, v)
        if out is not None:
            return aten.masked_fill.Tensor_out(self, m, v, out=out)
        return aten.masked_fill.Tensor(self, m, v)
    return func(self, _expand_masks(self, args[1]), values, *args[3:], **kwargs)


# batch norm's pre-passes (nn modules' ops)
def _bn_eval_pre(handler, func, args, kwargs):
    """native_batch_norm / _native_batch_norm_legit in eval mode: ATen's CPU kernel
    returns save_mean and save_invstd of shape (0,) (the record still writes (C,))."""
    y, sm, si = handler(func, args, kwargs)
    if arg(args, kwargs, 5, "training", False):
        return y, sm, si
    return y, aten.new_empty.default(sm, [0]), aten.new_empty.default(si, [0])


def _bn_backward_pre(handler, func, args, kwargs):
    """Eval-mode backward reads the running stats only: (0,) saved stats go as absent."""
    if not arg(args, kwargs, 7, "train", False) and len(args) > 6:
        a = list(args)
        for i in (5, 6):
            if a[i] is not None and a[i].numel() == 0:
                a[i] = None
        args = tuple(a)
    return handler(func, args, kwargs)


# --- sorting --------------------------------------------------------------------------------

def _sort_prep(stable_overload):
    """sort.default (self, dim, descending) / sort.stable (self, *, stable, dim,
    descending): (dim wrapped, descending). Always stable on rgpu."""
    def prep(args, kwargs):
        if stable_overload:
            d, desc = kwargs.get("dim", -1), kwargs.get("descending", False)
        else:
            d, desc = arg(args, kwargs, 1, "dim", -1), arg(args, kwargs, 2, "descending", False)
        return (_wrap(d, args[0].dim()), bool(desc))
    return prep


def _argdim_default(default):
    def prep(args, kwargs):
        return (_wrap(arg(args, kwargs, 1, "dim", default), args[0].dim()),
                bool(arg(args, kwargs, 2, "keepdim", False)))
    return prep


def _histc_int_pre(handler, func, args, kwargs):
    """histc of an integer tensor, as on CUDA (ATen's CPU kernel refuses it;
    transformers' MoE routing counts int32 expert ids with it on GPUs): the
    counts of the values as float64 (exact below 2^53), in the input's dtype."""
    x = args[0]
    if x.dtype.is_floating_point or x.dtype == torch.bool or func is not aten.histc.default:
        return handler(func, args, kwargs)
    r = handler(func, (aten._to_copy.default(x, dtype=torch.float64),) + tuple(args[1:]), kwargs)
    return aten._to_copy.default(r, dtype=x.dtype)


def _searchsorted_prep(args, kwargs):
    side = kwargs.get("side")
    return (bool(kwargs.get("right", False)) or side == "right",)


# --- the table ----------------------------------------------------------------------------

def _overloads(name, names):
    """The OpOverloads name.<o> for o in names that exist."""
    pk = getattr(aten, name, None)
    if pk is None:
        return []
    have = set(pk.overloads())
    return [getattr(pk, o) for o in names if o in have]


def _pointwise_overloads(name, n_in):
    """The overloads of aten.<name> and aten.<name>_ that compute one Tensor from
    n_in operands, each a Tensor or a Scalar (at least one a Tensor), and
    optionally write it into a keyword out= tensor: what a plain pointwise op
    of ops.def (opinfo.UNARY, opinfo.BINARY) records. Taken from the schemas
    torch has, so the overload sets follow ATen's naming, which differs by op
    (pow.Tensor_Scalar, special_zeta.self_scalar, xlogy.OutScalar_Self ...);
    overloads over Python numbers only (eq(Scalar a, Scalar b) -> bool) are not
    tensor ops and are left out."""
    out = []
    for nm in (name, name + "_"):
        pk = getattr(aten, nm, None)
        if pk is None:
            continue
        for o in pk.overloads():
            f = getattr(pk, o)
            if _operands(f._schema) == n_in:
                out.append(f)
    return out


def _operands(schema):
    """How many Tensor/Scalar operands a pointwise schema has (an out= tensor
    not counted), or None when it has any other argument or result."""
    if len(schema.returns) != 1 or str(schema.returns[0].type) != "Tensor":
        return None
    n, tensors = 0, 0
    for a in schema.arguments:
        t = str(a.type)                 # "number" is a Scalar
        if a.kwarg_only and a.name == "out" and t == "Tensor" and a.alias_info is not None \
                and a.alias_info.is_write:
            continue
        if a.kwarg_only or t not in ("Tensor", "number"):
            return None
        n += 1
        tensors += t == "Tensor"
    return n if tensors else None


def _put(t, funcs, spec, overlap=True, pre=None):
    """Map each OpOverload of funcs to spec = (op, prep, mapper), op the record's op
    (the tensor form's where a mapper picks one of two); several outputs make it a
    "multi" entry."""
    op, prep, mapper = spec
    e = Entry("multi" if opinfo.multi_out(op) else "one", op, mapper, prep, overlap, pre)
    for f in funcs:
        assert f not in t, f"rgpu: {f} is in the op table twice"
        t[f] = e


def _composite(t, funcs, handler):
    e = Entry("handler", None, handler)
    for f in funcs:
        assert f not in t, f"rgpu: {f} is in the op table twice"
        t[f] = e


# --- more pointwise: prims, polygamma, round(decimals=), frexp ----------------------------
# prims.* overloads of table ops (torch._refs' decompositions emit them:
# cumprod's prims.prod, logaddexp2's prims.exp2 ...), polygamma,
# round(decimals=), frexp (two records: mantissa, exponent).
#
# The prims overloads mapped, by prims name -> ops.def name. Listed by hand,
# not derived from opinfo.UNARY / BINARY: a prims op does no type promotion
# and may differ from the aten op of its name, so each one is added when a
# decomposition rgpu runs needs it (other prims stay unsupported).
_PRIMS_UNARY = {n: n for n in ("acos", "asin", "atan", "acosh", "asinh", "atanh", "sinh", "cosh", "tan", "log2",
                               "log10", "exp2", "erfc", "lgamma", "digamma", "signbit")}
_PRIMS_UNARY.update(erf_inv="erfinv", round="round")
_PRIMS_BINARY = ("fmax", "fmin", "nextafter")


def _polygamma(npos, xpos):
    """polygamma(n, self) / polygamma_(self, n): POLYGAMMA with the int n."""
    def prep(args, kwargs):
        return _compute(True, args[xpos])

    def mapper(args, kwargs, dt):
        return C.OP_POLYGAMMA, (_tid(args[xpos]),), (args[npos], dt), None
    return C.OP_POLYGAMMA, prep, mapper


def _round_decimals():
    def prep(args, kwargs):
        return _compute(False, args[0])

    def mapper(args, kwargs, dt):
        return C.OP_ROUND_DECIMALS, (_tid(args[0]),), (kwargs.get("decimals", 0), dt), None
    return C.OP_ROUND_DECIMALS, prep, mapper


def _frexp(func, args, kwargs):
    """frexp(self) -> (mantissa (self's dtype), exponent (int32)): one record each."""
    x = args[0]
    need_remote(x, func)
    if not x.dtype.is_floating_point:
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    outs = []
    for op, m in zip((C.OP_FREXP_MANTISSA, C.OP_FREXP_EXPONENT), aten.frexp.Tensor(meta_of(x))):
        k = key_of(m)
        outs.append(record_new(op, k, out_def(k, m.untyped_storage().nbytes()), (x._tid,), (DT[x.dtype],), m))
    if "mantissa" in kwargs:                        # frexp.Tensor_out
        rm, re = kwargs["mantissa"], kwargs["exponent"]
        aten.resize_.default(rm, x.shape)
        aten.resize_.default(re, x.shape)
        aten.copy_.default(rm, outs[0])
        aten.copy_.default(re, outs[1])
        return rm, re
    return tuple(outs)


def _prims_prod(args, kwargs):
    x = args[0]
    return (_dims(x, arg(args, kwargs, 1, "dims")), False)


def _table_pointwise13(t):
    import torch._prims                 # noqa: F401 - registers torch.ops.prims
    prims = torch.ops.prims
    for name, op in _PRIMS_UNARY.items():
        _put(t, [getattr(prims, name).default], _unary(opinfo.BY_NAME[op]))
    for name in _PRIMS_BINARY:
        _put(t, [getattr(prims, name).default], _binary_slots(opinfo.BY_NAME[name]))
    _put(t, [prims.mul.default], _arith(C.OP_MUL_TENSOR, C.OP_MUL_SCALAR, None))
    _put(t, [prims.prod.default], _fixed(C.OP_PROD, ((0, "inp"),), _prims_prod))
    _put(t, _overloads("polygamma", ("default", "out")), _polygamma(0, 1))
    _put(t, _overloads("polygamma_", ("default",)), _polygamma(1, 0))
    _put(t, _overloads("round", ("decimals", "decimals_out")) + _overloads("round_", ("decimals",)),
         _round_decimals())
    _composite(t, _overloads("frexp", ("Tensor", "Tensor_out")) + [prims.frexp.default], _frexp)


# --- linalg ---------------------------------------------------------------------------------
# float32/float64/complex64/complex128 LAPACK-style ops (ops.def's LINALG family). The non-_ex ops
# (linalg.cholesky, linalg.inv, linalg.solve ...) are ATen composites that call the
# _ex op and then _linalg_check_errors, which waits for info as CUDA PyTorch does.

def _la_bools(*spec):
    """Record args: bools at (pos, name, default) of the ATen call."""
    def prep(args, kwargs):
        return tuple(bool(arg(args, kwargs, p, n, d)) for p, n, d in spec)
    return prep


def _la_check_errors(func, args, kwargs):
    info = args[0]
    api = arg(args, kwargs, 1, "api_name")
    is_matrix = arg(args, kwargs, 2, "is_matrix")
    torch._linalg_check_errors(info.cpu() if info.device.type != "cpu" else info, api, is_matrix=is_matrix)


def _la_checked(api, info_pos, is_matrix_of=lambda args: args[0].dim() == 2):
    """pre for an _ex op called with check_errors=True: the op, then ATen's check."""
    def pre(handler, func, args, kwargs):
        r = handler(func, args, kwargs)
        if arg(args, kwargs, 99, "check_errors", False):
            _la_check_errors(None, (r[info_pos], api, is_matrix_of(args)), {})
        return r
    return pre


def _la_lu(func, args, kwargs):
    """linalg_lu as ATen's CPU kernel runs it: lu_factor, then lu_unpack."""
    pivot = bool(arg(args, kwargs, 1, "pivot", True))
    lu, piv, _ = aten.linalg_lu_factor_ex.default(args[0], pivot=pivot)
    return aten.lu_unpack.default(lu, piv)


def _la_cholesky(func, args, kwargs):
    """The old torch.cholesky: linalg_cholesky_ex, then ATen's check as "cholesky"."""
    a, upper = args[0], bool(arg(args, kwargs, 1, "upper", False))
    lo, info = aten.linalg_cholesky_ex.default(a, upper=upper)
    _la_check_errors(None, (info, "cholesky", a.dim() == 2), {})
    return lo


_QR_MODES = {"reduced": 0, "complete": 1, "r": 2}


def _la_pinv(func, args, kwargs):
    """linalg_pinv.atol_rtol_tensor (CompositeExplicitAutogradNonFunctional in ATen: it
    arrives whole) as ATen's kernel computes it, through the SVD, or eigh when hermitian."""
    a = args[0]
    atol, rtol = kwargs.get("atol"), kwargs.get("rtol")
    herm = bool(kwargs.get("hermitian", False))
    m, n = a.shape[-2], a.shape[-1]
    if a.numel() == 0:
        return aten.new_empty.default(a, a.shape[:-2] + (n, m))
    rdt = {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(a.dtype, a.dtype)
    zero = torch.zeros((), dtype=rdt, device=a.device)      # tolerances are real, as singular values
    if atol is None:
        atol_t = zero
    else:
        atol_t = atol
    if rtol is None:
        dflt = torch.full((), torch.finfo(rdt).eps * max(m, n), dtype=rdt, device=a.device)
        rtol = dflt if atol is None else torch.where(atol > 0, zero, dflt)
    if herm:
        w, v = torch.linalg.eigh(a)
        mx = w.abs().amax(dim=-1, keepdim=True)
        tol = torch.maximum(atol_t.unsqueeze(-1), rtol.unsqueeze(-1) * mx)
        winv = torch.where(w.abs() > tol, w.reciprocal(), zero).to(a.dtype)
        return torch.matmul(v * winv.unsqueeze(-2), v.mH)
    u, s_, vh = torch.linalg.svd(a, full_matrices=False)
    mx = s_.narrow(-1, 0, 1)
    tol = torch.maximum(atol_t.unsqueeze(-1), rtol.unsqueeze(-1) * mx)
    sinv = torch.where(s_ > tol, s_.reciprocal(), zero).to(a.dtype)
    return torch.matmul(vh.mH * sinv.unsqueeze(-2), u.mH)


def _la_eigvals(func, args, kwargs):
    """_linalg_eigvals: linalg_eig's eigenvalues (geev computes them alike with or without vectors)."""
    return aten.linalg_eig.default(args[0])[0]


_LA_LIB = []    # the Library of the Meta kernels below, kept alive for the process


def _geqrf_meta(a):
    """geqrf has no Meta kernel in torch: a batched column-major (a, tau) as ATen's CPU kernel makes."""
    m, n = a.shape[-2], a.shape[-1]
    qr = torch.empty_strided(a.shape, _colmajor_strides(a.shape), dtype=a.dtype, device=a.device)
    return qr, torch.empty(a.shape[:-2] + (min(m, n),), dtype=a.dtype, device=a.device)


def _colmajor_strides(shape):
    m, n = shape[-2], shape[-1]
    st, acc = [1, max(m, 1)], max(m, 1) * max(n, 1)
    for d in reversed(shape[:-2]):
        st.insert(0, acc)
        acc *= max(d, 1)
    return tuple(st)


def _la_lstsq(func, args, kwargs):
    """linalg_lstsq, drivers gelsy (ATen's CPU default) and gels: the minimum-norm
    least-squares solution through the pseudo-inverse; gelsy: rank as matrix_rank
    at its default rcond, residuals and singular values empty; gels: residuals
    when m > n, no rank."""
    a, b = args[0], args[1]
    rcond = arg(args, kwargs, 2, "rcond")
    driver = kwargs.get("driver")
    if driver not in (None, "gelsy", "gels"):
        raise NotImplementedError(f"rgpu: linalg.lstsq driver {driver!r} is not supported yet (gelsy, gels are)")
    m, n = a.shape[-2], a.shape[-1]
    vec = b.dim() == 1 or (b.dim() == a.dim() - 1 and tuple(b.shape) == tuple(a.shape[:-1]))
    bb = b.unsqueeze(-1) if vec else b
    x = torch.matmul(torch.linalg.pinv(a), bb)
    if vec:
        x = x.squeeze(-1)
    rdt = {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(a.dtype, a.dtype)
    none = torch.empty((0,), dtype=rdt, device=a.device)        # residuals, singular values: real
    if driver == "gels":      # full rank assumed; residuals when m > n, no rank
        res = none
        if m > n:
            xm = x.unsqueeze(-1) if vec else x
            res = (torch.matmul(a, xm) - bb).abs().pow(2).sum(-2)
            res = res.squeeze(-1) if vec else res
        return x, res, torch.empty((0,), dtype=torch.int64, device=a.device), none
    tol = torch.finfo(rdt).eps * max(m, n) if rcond is None or rcond < 0 else rcond
    batch = torch.broadcast_shapes(a.shape[:-2], bb.shape[:-2])
    rank = torch.linalg.matrix_rank(a, rtol=tol).expand(batch)
    return x, none, rank, none


def _la_register_metas():
    if not torch._C._dispatch_has_kernel_for_dispatch_key("aten::geqrf", "Meta"):
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("geqrf", _geqrf_meta, "Meta")
        _LA_LIB.append(lib)


def _linalg(t):
    _la_register_metas()
    a = ((0, "self"),)
    _put(t, [aten.linalg_cholesky_ex.default],
         _fixed(C.OP_LINALG_CHOLESKY, a, _la_bools((99, "upper", False))),
         pre=_la_checked("linalg.cholesky_ex", 1))
    _put(t, [aten.linalg_lu_factor_ex.default],
         _fixed(C.OP_LINALG_LU_FACTOR, ((0, "A"),), _la_bools((99, "pivot", True))),
         pre=_la_checked("linalg.lu_factor_ex", 2))
    _put(t, [aten.linalg_lu_solve.default],
         _fixed(C.OP_LINALG_LU_SOLVE, ((0, "LU"), (1, "pivots"), (2, "B")),
                _la_bools((99, "left", True), (99, "adjoint", False))))
    _put(t, [aten.lu_unpack.default],
         _fixed(C.OP_LU_UNPACK, ((0, "LU_data"), (1, "LU_pivots")),
                _la_bools((2, "unpack_data", True), (3, "unpack_pivots", True))))
    _put(t, [aten._linalg_solve_ex.default],
         _fixed(C.OP_LINALG_SOLVE, ((0, "A"), (1, "B")), _la_bools((99, "left", True))),
         pre=_la_checked("linalg.solve_ex", 3))
    _put(t, [aten.linalg_inv_ex.default], _fixed(C.OP_LINALG_INV, ((0, "A"),), lambda args, kwargs: ()),
         pre=_la_checked("linalg.inv_ex", 1))
    _put(t, [aten._linalg_det.default], _fixed(C.OP_LINALG_DET, ((0, "A"),), lambda args, kwargs: ()))
    _put(t, [aten._linalg_slogdet.default], _fixed(C.OP_LINALG_SLOGDET, ((0, "A"),), lambda args, kwargs: ()))
    _put(t, [aten.linalg_solve_triangular.default],
         _fixed(C.OP_SOLVE_TRIANGULAR, ((0, "self"), (1, "B")),
                _la_bools((99, "upper", False), (99, "left", True), (99, "unitriangular", False))))
    _put(t, [aten.triangular_solve.default],
         _fixed(C.OP_TRIANGULAR_SOLVE, ((0, "self"), (1, "A")),
                _la_bools((2, "upper", True), (3, "transpose", False), (4, "unitriangular", False))))
    _put(t, [aten.cholesky_solve.default],
         _fixed(C.OP_CHOLESKY_SOLVE, ((0, "self"), (1, "input2")), _la_bools((2, "upper", False))))
    _put(t, [aten.cholesky_inverse.default],
         _fixed(C.OP_CHOLESKY_INVERSE, a, _la_bools((1, "upper", False))))
    _composite(t, [aten._linalg_check_errors.default], _la_check_errors)
    _composite(t, [aten.linalg_lu.default], _la_lu)
    _composite(t, [aten.cholesky.default], _la_cholesky)
    _composite(t, [aten.linalg_pinv.atol_rtol_tensor], _la_pinv)
    _composite(t, [aten.linalg_lstsq.default], _la_lstsq)
    _put(t, [aten.geqrf.default], _fixed(C.OP_GEQRF, a, lambda args, kwargs: ()))
    _put(t, [aten.linalg_householder_product.default],
         _fixed(C.OP_HOUSEHOLDER_PRODUCT, ((0, "input"), (1, "tau")), lambda args, kwargs: ()))
    _put(t, [aten.ormqr.default],
         _fixed(C.OP_ORMQR, ((0, "self"), (1, "input2"), (2, "input3")),
                _la_bools((3, "left", True), (4, "transpose", False))))
    _put(t, [aten.linalg_qr.default],
         _fixed(C.OP_LINALG_QR, ((0, "A"),), lambda args, kwargs: (_QR_MODES[arg(args, kwargs, 1, "mode", "reduced")],)))
    _put(t, [aten._linalg_eigh.default],
         _fixed(C.OP_LINALG_EIGH, ((0, "A"),),
                lambda args, kwargs: (str(arg(args, kwargs, 1, "UPLO", "L")).upper() == "U",
                                      bool(arg(args, kwargs, 2, "compute_v", True)))))
    _put(t, [aten._linalg_svd.default],
         _fixed(C.OP_LINALG_SVD, ((0, "A"),), _la_bools((1, "full_matrices", False), (2, "compute_uv", True))))
    # --- complex linalg (eig; the ops above take complex64/complex128 too)
    _put(t, [aten.linalg_eig.default], _fixed(C.OP_LINALG_EIG, ((0, "self"),), lambda args, kwargs: ()))
    _composite(t, [aten._linalg_eigvals.default], _la_eigvals)
    _put(t, [aten.linalg_ldl_factor_ex.default],
         _fixed(C.OP_LINALG_LDL_FACTOR, ((0, "self"),), _la_bools((99, "hermitian", False))),
         pre=_la_checked("torch.linalg.ldl_factor_ex", 2))
    _put(t, [aten.linalg_ldl_solve.default],
         _fixed(C.OP_LINALG_LDL_SOLVE, ((0, "LD"), (1, "pivots"), (2, "B")), _la_bools((99, "hermitian", False))))


# --- fft ------------------------------------------------------------------------------------
# torch.fft.* and stft/istft reach the backend as these three; fftfreq, fftshift
# (roll) and the rest are composites of ordinary ops.

def _fft_prep(third, default):
    def prep(args, kwargs):
        x = args[0]
        dims = arg(args, kwargs, 1, "dim")
        return ([int(d) % x.dim() if x.dim() else int(d) for d in dims],
                int(arg(args, kwargs, 2, "normalization")), third(arg(args, kwargs, 3, default)))
    return prep


def _fft(t):
    x = ((0, "self"),)
    _put(t, _overloads("_fft_c2c", ("default", "out")), _fixed(C.OP_FFT_C2C, x, _fft_prep(bool, "forward")))
    _put(t, _overloads("_fft_r2c", ("default", "out")), _fixed(C.OP_FFT_R2C, x, _fft_prep(bool, "onesided")))
    _put(t, _overloads("_fft_c2r", ("default", "out")), _fixed(C.OP_FFT_C2R, x, _fft_prep(int, "last_dim_size")))


def _table():
    t = {}
    # arithmetic, fills and copies
    for name, op_t, op_s, alpha in (("add", C.OP_ADD_TENSOR, C.OP_ADD_SCALAR, True),
                                    ("sub", C.OP_SUB_TENSOR, C.OP_SUB_SCALAR, True),
                                    ("mul", C.OP_MUL_TENSOR, C.OP_MUL_SCALAR, False),
                                    ("div", C.OP_DIV_TENSOR, C.OP_DIV_SCALAR, False)):
        fam, fam_ = getattr(aten, name), getattr(aten, name + "_")
        for f in (fam.Tensor, fam_.Tensor, fam.out, fam.Scalar, fam_.Scalar, fam.Scalar_out):
            op, _, mapper = _arith(op_t, op_s, _alpha_pos(f) if alpha else None)
            writes = f in (fam_.Tensor, fam_.Scalar) or f in (fam.out, fam.Scalar_out)
            _put(t, [f], (op, _safe_cast_prep(f in (fam_.Tensor, fam_.Scalar)) if writes else None, mapper))
    _put(t, [aten.rsub.Tensor, aten.rsub.Scalar, aten.rsub.Tensor_out, aten.rsub.Scalar_out],
         (C.OP_SUB_TENSOR, None, _rsub))
    _put(t, [aten.fill_.Scalar, aten.fill_.Tensor], (C.OP_FULL, None, _fill), overlap=False)
    _put(t, [aten.zero_.default], (C.OP_FULL, None, _zero), overlap=False)
    _put(t, [aten.copy_.default], (C.OP_COPY, None, _copy), pre=_copy_pre)

    # pointwise: ops.def's plain pointwise ops (opinfo.UNARY, opinfo.BINARY: neg,
    # exp, atan2, the special functions (replayer/op/special_math.h) ...), every
    # ATen overload of their shape; integer inputs of the INT_TO_FLOAT ones
    # compute in the default float dtype (opinfo.FLOAT_COMPUTE)
    for name, op in opinfo.UNARY:
        _put(t, _pointwise_overloads(name, 1), _unary(op))
    for name, op in opinfo.BINARY:
        _put(t, _pointwise_overloads(name, 2), _binary_slots(op))
    # gelu: its record has the approximate arg too ("i approximate, dt compute")
    _put(t, _overloads("gelu", ("default", "out")) + _overloads("gelu_", ("default",)),
         _unary(C.OP_GELU, _gelu_approx))
    _put(t, [aten.max.other, aten.max.out], _binary_slots(C.OP_MAXIMUM))
    _put(t, [aten.min.other, aten.min.out], _binary_slots(C.OP_MINIMUM))
    _put(t, [aten.div.Tensor_mode, aten.div_.Tensor_mode, aten.div.out_mode, aten.div.Scalar_mode,
             aten.div_.Scalar_mode, aten.div.Scalar_mode_out], _div_mode(C.OP_DIV_TENSOR, C.OP_DIV_SCALAR))
    _put(t, _pointwise_overloads("floor_divide", 2), _binary_slots(C.OP_DIV_MODE, 2))
    _put(t, _overloads("where", ("self", "ScalarSelf", "ScalarOther", "Scalar", "self_out")), _where())
    _put(t, _overloads("masked_fill", ("Scalar", "Tensor", "Scalar_out", "Tensor_out"))
         + _overloads("masked_fill_", ("Scalar", "Tensor")), _masked_fill())
    cl = ("default", "Tensor", "out", "Tensor_out")
    _put(t, _overloads("clamp", cl) + _overloads("clamp_", cl), _clamp(1, 2))
    _put(t, _overloads("clamp_min", cl) + _overloads("clamp_min_", cl), _clamp(1, 0))
    _put(t, _overloads("clamp_max", cl) + _overloads("clamp_max_", cl), _clamp(0, 1))
    lo = ("Scalar", "Tensor", "Scalar_out", "Tensor_out")
    _put(t, _overloads("lerp", lo) + _overloads("lerp_", lo), _lerp())
    for name, op in (("addcmul", C.OP_ADDCMUL), ("addcdiv", C.OP_ADDCDIV)):
        _put(t, _overloads(name, ("default",)), _addc(op))
        _put(t, _overloads(name, ("out",)), _addc(op, "out"))
        _put(t, _overloads(name + "_", ("default",)), _addc(op, "self"))
    bw = ("default", "grad_input")
    _put(t, _overloads("threshold_backward", bw),
         _act_backward(C.OP_THRESHOLD_BACKWARD, lambda args, kwargs: args[2]))
    _put(t, _overloads("gelu_backward", bw), _act_backward(C.OP_GELU_BACKWARD, _gelu_approx))
    _put(t, _overloads("silu_backward", bw), _act_backward(C.OP_SILU_BACKWARD))
    _put(t, _overloads("sigmoid_backward", bw), _act_backward(C.OP_SIGMOID_BACKWARD))
    _put(t, _overloads("tanh_backward", bw), _act_backward(C.OP_TANH_BACKWARD))
    for name, op in (("tril", C.OP_TRIL), ("triu", C.OP_TRIU)):
        _put(t, _overloads(name, ("default", "out")) + _overloads(name + "_", ("default",)),
             _fixed(op, ((0, "self"),), _int_arg(1, "diagonal", 0)))

    # reductions
    x = ((0, "self"),)
    _put(t, [aten.sum.dim_IntList, aten.sum.IntList_out], _fixed(C.OP_SUM, x, _dims_keep(1, 2)))
    _put(t, [aten.sum.default, aten.sum.out], _fixed(C.OP_SUM, x, _dims_keep(None, None)))
    _put(t, [aten.mean.dim, aten.mean.out], _fixed(C.OP_MEAN, x, _dims_keep(1, 2)))
    _put(t, [aten.mean.default, aten.mean.dtype_out], _fixed(C.OP_MEAN, x, _dims_keep(None, None)))
    for name, op in (("amax", C.OP_AMAX), ("amin", C.OP_AMIN)):
        _put(t, _overloads(name, ("default", "out")), _fixed(op, x, _dims_keep(1, 2)))
    _put(t, _overloads("max", ("default", "unary_out")), _fixed(C.OP_AMAX, x, _dims_keep(None, None)))
    _put(t, _overloads("min", ("default", "unary_out")), _fixed(C.OP_AMIN, x, _dims_keep(None, None)))
    for name, op in (("argmax", C.OP_ARGMAX), ("argmin", C.OP_ARGMIN)):
        _put(t, _overloads(name, ("default", "out")), _fixed(op, x, _argdim()))
    _put(t, [aten.max.dim], _fixed(C.OP_MAX_DIM, x, _dim_keep_int()))
    _put(t, [aten.min.dim], _fixed(C.OP_MIN_DIM, x, _dim_keep_int()))
    for name, op in (("var", C.OP_VAR), ("std", C.OP_STD)):
        _put(t, _overloads(name, ("correction", "correction_out")), _fixed(op, x, _var()))
    _put(t, _overloads("linalg_vector_norm", ("default", "out")), _fixed(C.OP_NORM, x, _norm()))
    for name, op in (("any", C.OP_ANY), ("all", C.OP_ALL)):
        _put(t, _overloads(name, ("default", "all_out")), _fixed(op, x, _dims_keep(None, None)))
        _put(t, _overloads(name, ("dim", "dims", "out", "dims_out")), _fixed(op, x, _dims_keep(1, 2)))
    _put(t, _overloads("prod", ("default", "out")), _fixed(C.OP_PROD, x, _dims_keep(None, None)))
    _put(t, _overloads("prod", ("dim_int", "int_out")), _fixed(C.OP_PROD, x, _dims_keep(1, 2)))
    _put(t, _overloads("cumsum", ("default", "out")) + _overloads("cumsum_", ("default",)),
         _fixed(C.OP_CUMSUM, x, _one_dim(1)))

    # softmax, norms, losses
    for name, op in (("_softmax", C.OP_SOFTMAX), ("_log_softmax", C.OP_LOG_SOFTMAX)):
        _put(t, _overloads(name, ("default", "out")), _fixed(op, x, _softmax_prep))
    gy = ((0, "grad_output"), (1, "output"))
    _put(t, _overloads("_softmax_backward_data", ("default", "out")),
         _fixed(C.OP_SOFTMAX_BACKWARD, gy, _softmax_bw_prep))
    _put(t, _overloads("_log_softmax_backward_data", ("default", "out")),
         _fixed(C.OP_LOG_SOFTMAX_BACKWARD, gy, _softmax_bw_prep))
    _put(t, [aten.native_layer_norm.default],
         _fixed(C.OP_LAYER_NORM, ((0, "input"), (2, "weight"), (3, "bias")),
                lambda args, kwargs: (list(args[1]), float(args[4]))))
    _put(t, [aten.native_layer_norm_backward.default],
         _fixed(C.OP_LAYER_NORM_BACKWARD, ((0, "grad_out"), (1, "input"), (3, "mean"), (4, "rstd"),
                                           (5, "weight"), (6, "bias")),
                lambda args, kwargs: (list(args[2]),)))
    _put(t, [aten.nll_loss_forward.default],
         _fixed(C.OP_NLL_LOSS, ((0, "self"), (1, "target"), (2, "weight")),
                lambda args, kwargs: (args[3], args[4])))
    _put(t, _overloads("nll_loss_backward", ("default", "grad_input")),
         _fixed(C.OP_NLL_LOSS_BACKWARD, ((0, "grad_output"), (1, "self"), (2, "target"), (3, "weight"),
                                         (6, "total_weight")),
                lambda args, kwargs: (args[4], args[5])))

    # dense
    _put(t, _overloads("mm", ("default", "out")), _mm(C.OP_MM, False))
    _put(t, _overloads("bmm", ("default", "out")), _mm(C.OP_BMM, False))
    _put(t, _overloads("addmm", ("default", "out")) + _overloads("addmm_", ("default",)),
         _mm(C.OP_ADDMM, True), pre=_mm_complex_scalars_pre)
    _put(t, _overloads("baddbmm", ("default", "out")) + _overloads("baddbmm_", ("default",)),
         _mm(C.OP_BADDBMM, True), pre=_mm_complex_scalars_pre)
    _put(t, _overloads("convolution", ("default", "out")),
         _fixed(C.OP_CONVOLUTION, ((0, "input"), (1, "weight"), (2, "bias")), _conv_prep))
    _put(t, [aten.convolution_backward.default],
         _fixed(C.OP_CONVOLUTION_BACKWARD, ((0, "grad_output"), (1, "input"), (2, "weight")), _conv_bw_prep))
    bn_in = ((0, "input"), (1, "weight"), (2, "bias"), (3, "running_mean"), (4, "running_var"))
    _put(t, [aten.native_batch_norm.default, aten._native_batch_norm_legit.default],
         _fixed(C.OP_BATCH_NORM, bn_in, lambda args, kwargs: (bool(args[5]), float(args[6]), float(args[7]))),
         pre=_bn_eval_pre)
    _put(t, [aten._native_batch_norm_legit.no_stats],
         _fixed(C.OP_BATCH_NORM, ((0, "input"), (1, "weight"), (2, "bias"), (None, None), (None, None)),
                lambda args, kwargs: (bool(args[3]), float(args[4]), float(args[5]))))
    _put(t, [aten._native_batch_norm_legit_no_training.default],
         _fixed(C.OP_BATCH_NORM, bn_in, lambda args, kwargs: (False, float(args[5]), float(args[6]))))
    _put(t, [aten.native_batch_norm_backward.default],
         _fixed(C.OP_BATCH_NORM_BACKWARD, ((0, "grad_out"), (1, "input"), (2, "weight"), (3, "running_mean"),
                                           (4, "running_var"), (5, "save_mean"), (6, "save_invstd")),
                lambda args, kwargs: (bool(args[7]), float(args[8]))), pre=_bn_backward_pre)
    _put(t, [aten.max_pool2d_with_indices.default], _fixed(C.OP_MAX_POOL2D, x, _pool_max(1)))
    _put(t, _overloads("max_pool2d_with_indices_backward", ("default", "grad_input")),
         _fixed(C.OP_MAX_POOL2D_BACKWARD, ((0, "grad_output"), (1, "self"), (7, "indices")), _pool_max(2)))
    _put(t, _overloads("avg_pool2d", ("default", "out")), _fixed(C.OP_AVG_POOL2D, x, _pool_avg(1)))
    _put(t, _overloads("avg_pool2d_backward", ("default", "grad_input")),
         _fixed(C.OP_AVG_POOL2D_BACKWARD, ((0, "grad_output"), (1, "self")), _pool_avg(2)))
    _put(t, _overloads("_adaptive_avg_pool2d", ("default", "out")),
         _fixed(C.OP_ADAPTIVE_AVG_POOL2D, x, lambda args, kwargs: (list(args[1]),)))
    _put(t, _overloads("_adaptive_avg_pool2d_backward", ("default", "out")),
         _fixed(C.OP_ADAPTIVE_AVG_POOL2D_BACKWARD, ((0, "grad_output"), (1, "self")),
                lambda args, kwargs: ()))

    # index family
    _put(t, _overloads("embedding", ("default", "out")),
         _fixed(C.OP_EMBEDDING, ((0, "weight"), (1, "indices")), _int_arg(2, "padding_idx", -1)),
         pre=_embedding_pre)
    _put(t, _overloads("embedding_dense_backward", ("default", "out")),
         _fixed(C.OP_EMBEDDING_BACKWARD, ((0, "grad_output"), (1, "indices")),
                lambda args, kwargs: (args[2], args[3], bool(args[4]))))
    si = ((0, "self"), (2, "index"))
    _put(t, _overloads("gather", ("default", "out")), _fixed(C.OP_GATHER, si, _one_dim(1)), pre=_gather_pre)
    _put(t, _overloads("index_select", ("default", "out")), _fixed(C.OP_INDEX_SELECT, si, _one_dim(1)))
    _put(t, _overloads("scatter_add", ("default", "out")) + _overloads("scatter_add_", ("default",)),
         _fixed(C.OP_SCATTER_ADD, ((0, "self"), (2, "index"), (3, "src")), _one_dim(1)))
    _put(t, _overloads("scatter", ("src", "src_out")) + _overloads("scatter_", ("src",)),
         _scatter(True, False))
    _put(t, _overloads("scatter", ("value", "value_out")) + _overloads("scatter_", ("value",)),
         _scatter(False, False))
    _put(t, _overloads("scatter", ("reduce", "reduce_out")) + _overloads("scatter_", ("reduce",)),
         _scatter(True, True))
    _put(t, _overloads("scatter", ("value_reduce", "value_reduce_out")) + _overloads("scatter_", ("value_reduce",)),
         _scatter(False, True))
    _put(t, _overloads("index_add", ("default", "out")) + _overloads("index_add_", ("default",)),
         _index_add())
    _put(t, _overloads("constant_pad_nd", ("default", "out")), _pad())
    _put(t, _overloads("cat", ("default", "out")), _cat(), pre=_cat_pre)
    _put(t, _overloads("index", ("Tensor", "Tensor_out")), _index(), pre=_index_pre)
    _put(t, _overloads("index_put", ("default", "out")) + _overloads("index_put_", ("default",))
         + _overloads("_index_put_impl", ("default", "out")) + _overloads("_index_put_impl_", ("default",)),
         _index_put(), pre=_index_put_pre)

    # index: scatter_reduce
    _put(t, _overloads("scatter_reduce", ("two", "two_out")) + _overloads("scatter_reduce_", ("two",)),
         _fixed(C.OP_SCATTER_REDUCE, ((0, "self"), (2, "index"), (3, "src")), _scatter_reduce_args))


    # sorting (sort family; topk, median ... are decompositions: decomp.py)
    _put(t, _overloads("sort", ("default", "values")), _fixed(C.OP_SORT, x, _sort_prep(False)))
    _put(t, _overloads("sort", ("stable", "values_stable")), _fixed(C.OP_SORT, x, _sort_prep(True)))
    _put(t, _overloads("mode", ("default", "values")), _fixed(C.OP_MODE, x, _argdim_default(-1)))
    for name, op in (("cummax", C.OP_CUMMAX), ("cummin", C.OP_CUMMIN), ("logcumsumexp", C.OP_LOGCUMSUMEXP)):
        _put(t, _overloads(name, ("default", "out")), _fixed(op, x, _one_dim(1)))
    _put(t, _overloads("cumprod", ("default", "out")) + _overloads("cumprod_", ("default",)),
         _fixed(C.OP_CUMPROD, x, _one_dim(1)))
    _put(t, _overloads("searchsorted", ("Tensor", "Tensor_out")),
         _fixed(C.OP_SEARCHSORTED, ((0, "sorted_sequence"), (1, "self"), (99, "sorter")), _searchsorted_prep))
    _put(t, _overloads("histc", ("default", "out")),
         _fixed(C.OP_HISTC, x, lambda args, kwargs: (int(arg(args, kwargs, 1, "bins", 100)),
                                                    float(arg(args, kwargs, 2, "min", 0)),
                                                    float(arg(args, kwargs, 3, "max", 0)))),
         pre=_histc_int_pre)

    # composites and pre-passes
    _composite(t, [aten.stack.default, aten.stack.out], _stack)
    _composite(t, [aten.mv.default, aten.mv.out], _mv)
    _composite(t, [aten.dot.default, aten.dot.out], _dot)
    _table_pointwise13(t)


    _linalg(t)
    _fft(t)
    return t


TABLE = _table()
