"""Which record each ATen overload becomes: the mapping table of dispatch.py.

TABLE maps an OpOverload to an Entry(kind, mapper, prep, overlap):
  kind "one"    one record with one output: new, or the written in-place/out=
                argument itself
  kind "multi"  one record with several new outputs (an output ATen returns
                as None, output_mask false, is recorded absent: tid 0)
  kind "handler" mapper is a whole handler(func, args, kwargs): composites that
                re-enter dispatch with smaller ops (stack, cat of >16, index
                with bool or CPU indices, mv, dot)
mapper(args, kwargs, extra) -> (op, ins, record args, temps to free or None)
runs per op; prep(args, kwargs) -> extra runs once per cache key (dispatch
keeps it in the cached spec): the DTYPE compute of pointwise ops and every
record arg that depends only on the key (normalised dims, pool windows ...).
Only ops of trace-format/ops.def are here; others go to decomp.py.

Conventions from ops.def: a "t|s" slot holds a tensor id, or 0 with the
scalar in the record arg of the same position; the last arg of a pointwise op
is its DTYPE compute, the dtype TensorIterator computes in."""
import torch

from . import _C, transfer
from ._dtypes import TO_RGPU
from .tensor import RemoteTensor

aten = torch.ops.aten
C = _C

DT = {d: bytes((n,)) for d, n in TO_RGPU.items()}       # a DTYPE record arg (rgpu._C)


class Entry:
    __slots__ = ("kind", "mapper", "prep", "overlap")

    def __init__(self, kind, mapper, prep=None, overlap=True):
        self.kind, self.mapper, self.prep, self.overlap = kind, mapper, prep, overlap


def _device_error(t):
    return RuntimeError("Expected all tensors to be on the same device, but found at least two "
                        f"devices, rgpu:0 and {t.device}!")


def _arg(args, kwargs, pos, name, default=None):
    return args[pos] if len(args) > pos else kwargs.get(name, default)


def _tid(x):
    if type(x) is RemoteTensor:
        return x._tid
    raise _device_error(x)


def _operand(x, temps):
    """The tid of a tensor input (None stays None), uploading a CPU scalar tensor."""
    if type(x) is RemoteTensor:
        return x._tid
    if x is None:
        return None
    if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() == 0:
        tid = transfer.upload_tensor(x)
        temps.append(tid)
        return tid
    raise _device_error(x)


def _slot(x):
    """A "t|s" operand: (tid, None) for an rgpu tensor, (None, value) for a scalar
    (a CPU scalar tensor gives its value; None stays absent)."""
    if type(x) is RemoteTensor:
        return x._tid, None
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu" or x.dim() != 0:
            raise _device_error(x)
        return None, x.item()
    return None, x


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


# --- pointwise --------------------------------------------------------------------------

_APPROX = {"none": 0, "tanh": 1}
_FLOATY = {"exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid", "sin",
           "cos", "erf", "atan2"}


def _gelu_approx(args, kwargs):
    return _APPROX[kwargs.get("approximate", "none")]


def _unary(op, floaty, own=None):
    def prep(args, kwargs):
        return _compute(floaty, args[0])
    if own is None:
        def mapper(args, kwargs, dt):
            return op, (_tid(args[0]),), (dt,), None
    else:
        def mapper(args, kwargs, dt):
            return op, (_tid(args[0]),), (own(args, kwargs), dt), None
    return prep, mapper


def _binary_slots(op, floaty=False):
    def prep(args, kwargs):
        return _compute(floaty, args[0], args[1])

    def mapper(args, kwargs, dt):
        ta, sa = _slot(args[0])
        tb, sb = _slot(args[1])
        return op, (ta, tb), (sa, sb, dt), None
    return prep, mapper


def _div_mode(op_t, op_s):
    """div.Tensor_mode / div.Scalar_mode: DIV_MODE for trunc/floor, plain div for None."""
    def prep(args, kwargs):
        return _compute(False, args[0], args[1])

    def mapper(args, kwargs, dt):
        mode = kwargs.get("rounding_mode")
        a, b = args[0], args[1]
        if mode is None:
            if isinstance(b, torch.Tensor) and type(b) is RemoteTensor:
                return op_t, (_tid(a), b._tid), (), None
            if isinstance(b, torch.Tensor):
                b = b.item()
            return op_s, (_tid(a),), (b,), None
        ta, sa = _slot(a)
        tb, sb = _slot(b)
        return C.OP_DIV_MODE, (ta, tb), (sa, sb, 1 if mode == "trunc" else 2, dt), None
    return prep, mapper


def _floor_divide():
    def prep(args, kwargs):
        return _compute(False, args[0], args[1])

    def mapper(args, kwargs, dt):
        ta, sa = _slot(args[0])
        tb, sb = _slot(args[1])
        return C.OP_DIV_MODE, (ta, tb), (sa, sb, 2, dt), None
    return prep, mapper


def _where():
    def prep(args, kwargs):
        return _compute(False, args[1], args[2])

    def mapper(args, kwargs, dt):
        ta, sa = _slot(args[1])
        tb, sb = _slot(args[2])
        return C.OP_WHERE, (_tid(args[0]), ta, tb), (None, sa, sb, dt), None
    return prep, mapper


def _masked_fill():
    """masked_fill(self, mask, value) = where(mask, value, self), computed in self's dtype."""
    def prep(args, kwargs):
        return DT[args[0].dtype]

    def mapper(args, kwargs, dt):
        tv, sv = _slot(args[2])
        return C.OP_WHERE, (_tid(args[1]), tv, _tid(args[0])), (None, sv, None, dt), None
    return prep, mapper


def _clamp(min_pos, max_pos):
    """clamp(self, min?, max?); clamp_min/clamp_max have one bound at position 1."""
    def bounds(args, kwargs):
        lo = _arg(args, kwargs, 1, "min") if min_pos else None
        hi = _arg(args, kwargs, max_pos, "max") if max_pos else None
        return lo, hi

    def prep(args, kwargs):
        lo, hi = bounds(args, kwargs)
        return _compute(False, args[0], lo, hi)

    def mapper(args, kwargs, dt):
        lo, hi = bounds(args, kwargs)
        tl, sl = _slot(lo)
        th, sh = _slot(hi)
        return C.OP_CLAMP, (_tid(args[0]), tl, th), (None, sl, sh, dt), None
    return prep, mapper


def _lerp():
    def prep(args, kwargs):
        return _compute(False, args[0], args[1])

    def mapper(args, kwargs, dt):
        tw, sw = _slot(args[2])
        return C.OP_LERP, (_tid(args[0]), _tid(args[1]), tw), (None, None, sw, dt), None
    return prep, mapper


def _addc(op):
    def prep(args, kwargs):
        return _compute(False, args[0], args[1], args[2])

    def mapper(args, kwargs, dt):
        return (op, (_tid(args[0]), _tid(args[1]), _tid(args[2])),
                (kwargs.get("value", 1), dt), None)
    return prep, mapper


def _act_backward(op, own=None):
    def prep(args, kwargs):
        return _compute(False, args[0], args[1])
    if own is None:
        def mapper(args, kwargs, dt):
            return op, (_tid(args[0]), _tid(args[1])), (dt,), None
    else:
        def mapper(args, kwargs, dt):
            return op, (_tid(args[0]), _tid(args[1])), (own(args, kwargs), dt), None
    return prep, mapper


# --- ops whose record args depend only on the cache key ------------------------------------

def _fixed(op, tensor_pos, prep):
    """ins: the tensor arguments at tensor_pos ((pos, name) pairs; None arguments,
    and a pos of None, give an absent input); args: prep's result, cached."""
    if len(tensor_pos) == 1 and tensor_pos[0][0] == 0:
        def mapper(args, kwargs, ra):
            return op, (_tid(args[0]),), ra, None
        return prep, mapper

    def mapper(args, kwargs, ra):
        temps = []
        ins = tuple(None if p is None else _operand(_arg(args, kwargs, p, n), temps)
                    for p, n in tensor_pos)
        return op, ins, ra, temps
    return prep, mapper


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
        dims = [] if dim_pos is None else _dims(x, _arg(args, kwargs, dim_pos, "dim"))
        keep = False if keep_pos is None else bool(_arg(args, kwargs, keep_pos, "keepdim", False))
        return (dims, keep)
    return prep


def _argdim():
    def prep(args, kwargs):
        d = _arg(args, kwargs, 1, "dim")
        return (None if d is None else _wrap(d, args[0].dim()),
                bool(_arg(args, kwargs, 2, "keepdim", False)))
    return prep


def _dim_keep_int():
    def prep(args, kwargs):
        return (_wrap(args[1], args[0].dim()), bool(_arg(args, kwargs, 2, "keepdim", False)))
    return prep


def _var():
    def prep(args, kwargs):
        x = args[0]
        c = kwargs.get("correction")
        return (_dims(x, _arg(args, kwargs, 1, "dim")), 1.0 if c is None else float(c),
                bool(kwargs.get("keepdim", False)))
    return prep


def _norm():
    def prep(args, kwargs):
        x = args[0]
        return (float(_arg(args, kwargs, 1, "ord", 2)), _dims(x, _arg(args, kwargs, 2, "dim")),
                bool(_arg(args, kwargs, 3, "keepdim", False)))
    return prep


def _one_dim(pos):
    def prep(args, kwargs):
        return (_wrap(_arg(args, kwargs, pos, "dim"), args[0].dim()),)
    return prep


def _int_arg(pos, name, default):
    def prep(args, kwargs):
        return (_arg(args, kwargs, pos, name, default),)
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
        k = _pair(_arg(args, kwargs, k_pos, "kernel_size"))
        s = _pair(_arg(args, kwargs, k_pos + 1, "stride", []), k)
        p = _pair(_arg(args, kwargs, k_pos + 2, "padding", 0))
        d = _pair(_arg(args, kwargs, k_pos + 3, "dilation", 1))
        return (k, s, p, d, bool(_arg(args, kwargs, k_pos + 4, "ceil_mode", False)))
    return prep


def _pool_avg(k_pos):
    def prep(args, kwargs):
        k = _pair(_arg(args, kwargs, k_pos, "kernel_size"))
        s = _pair(_arg(args, kwargs, k_pos + 1, "stride", []), k)
        p = _pair(_arg(args, kwargs, k_pos + 2, "padding", 0))
        return (k, s, p, bool(_arg(args, kwargs, k_pos + 3, "ceil_mode", False)),
                bool(_arg(args, kwargs, k_pos + 4, "count_include_pad", True)),
                _arg(args, kwargs, k_pos + 5, "divisor_override"))
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
    return prep, mapper


def _index_add():
    def prep(args, kwargs):
        return _wrap(args[1], args[0].dim())

    def mapper(args, kwargs, dim):
        return (C.OP_INDEX_ADD, (_tid(args[0]), _tid(args[2]), _tid(args[3])),
                (dim, kwargs.get("alpha", 1)), None)
    return prep, mapper


def _mm(op, has_self):
    if not has_self:
        def mapper(args, kwargs, _):
            return op, (_tid(args[0]), _tid(args[1])), (), None
        return None, mapper

    def mapper(args, kwargs, _):
        temps = []
        return (op, (_operand(args[0], temps), _tid(args[1]), _tid(args[2])),
                (kwargs.get("beta", 1), kwargs.get("alpha", 1)), temps)
    return None, mapper


def _pad():
    def mapper(args, kwargs, pad):
        return C.OP_CONSTANT_PAD_ND, (_tid(args[0]),), (pad, _arg(args, kwargs, 2, "value", 0)), None
    return (lambda args, kwargs: list(args[1])), mapper


def _legacy_empty(t):
    return t.dim() == 1 and t.shape[0] == 0


def _cat():
    """CAT of the inputs ATen doesn't skip (legacy 1-D empty ones); dim wrapped."""
    def prep(args, kwargs):
        ts = args[0]
        keep = tuple(i for i, t in enumerate(ts) if not _legacy_empty(t)) or (0,)
        nd = ts[keep[0]].dim()
        return (_wrap(_arg(args, kwargs, 1, "dim", 0), nd),), keep

    def mapper(args, kwargs, extra):
        ra, keep = extra
        ts = args[0]
        return C.OP_CAT, tuple(_tid(ts[i]) for i in keep), ra, None
    return prep, mapper


def _index():
    def mapper(args, kwargs, _):
        return C.OP_INDEX, (_tid(args[0]),) + tuple(None if i is None else _tid(i) for i in args[1]), (), None
    return None, mapper


def _index_put():
    def mapper(args, kwargs, _):
        temps = []
        ins = (_tid(args[0]), _operand(args[2], temps)) + tuple(None if i is None else _tid(i)
                                                                for i in args[1])
        return C.OP_INDEX_PUT, ins, (bool(_arg(args, kwargs, 3, "accumulate", False)),), temps
    return None, mapper


# --- the table ----------------------------------------------------------------------------

def _overloads(name, names):
    """The OpOverloads name.<o> for o in names that exist."""
    pk = getattr(aten, name, None)
    if pk is None:
        return []
    have = set(pk.overloads())
    return [getattr(pk, o) for o in names if o in have]


_UNARY = [("neg", "NEG"), ("abs", "ABS"), ("exp", "EXP"), ("log", "LOG"), ("log1p", "LOG1P"),
          ("expm1", "EXPM1"), ("sqrt", "SQRT"), ("rsqrt", "RSQRT"), ("reciprocal", "RECIPROCAL"),
          ("tanh", "TANH"), ("sigmoid", "SIGMOID"), ("sin", "SIN"), ("cos", "COS"), ("erf", "ERF"),
          ("floor", "FLOOR"), ("ceil", "CEIL"), ("round", "ROUND"), ("trunc", "TRUNC"),
          ("sign", "SIGN"), ("relu", "RELU"), ("silu", "SILU"), ("gelu", "GELU"),
          ("logical_not", "LOGICAL_NOT"), ("bitwise_not", "BITWISE_NOT"), ("isnan", "ISNAN")]
_BINARY = [("pow", "POW"), ("maximum", "MAXIMUM"), ("minimum", "MINIMUM"), ("eq", "EQ"), ("ne", "NE"),
           ("lt", "LT"), ("le", "LE"), ("gt", "GT"), ("ge", "GE"), ("logical_and", "LOGICAL_AND"),
           ("logical_or", "LOGICAL_OR"), ("logical_xor", "LOGICAL_XOR"),
           ("bitwise_and", "BITWISE_AND"), ("bitwise_or", "BITWISE_OR"),
           ("bitwise_xor", "BITWISE_XOR"), ("remainder", "REMAINDER"), ("fmod", "FMOD"),
           ("atan2", "ATAN2"), ("hypot", "HYPOT")]
_BINARY_OVERLOADS = ("default", "out", "Tensor", "Scalar", "Scalar_Tensor", "Tensor_out",
                     "Scalar_out", "Scalar_Tensor_out", "Tensor_Tensor", "Tensor_Scalar",
                     "Tensor_Tensor_out", "Tensor_Scalar_out")


def _put(t, funcs, kind, pm, overlap=True):
    prep, mapper = pm
    e = Entry(kind, mapper, prep, overlap)
    for f in funcs:
        t[f] = e


def build(handlers):
    """The table; handlers holds the composite handlers dispatch provides (keyed by name)."""
    t = {}
    one, multi = "one", "multi"
    for name, op in _UNARY:
        own = _gelu_approx if name == "gelu" else None
        pm = _unary(getattr(C, "OP_" + op), name in _FLOATY, own)
        _put(t, _overloads(name, ("default", "out")) + _overloads(name + "_", ("default",)), one, pm)
    for name, op in _BINARY:
        pm = _binary_slots(getattr(C, "OP_" + op), name in _FLOATY)
        _put(t, _overloads(name, _BINARY_OVERLOADS) + _overloads(name + "_", _BINARY_OVERLOADS),
             one, pm)
    _put(t, [aten.max.other, aten.max.out], one, _binary_slots(C.OP_MAXIMUM))
    _put(t, [aten.min.other, aten.min.out], one, _binary_slots(C.OP_MINIMUM))
    _put(t, [aten.div.Tensor_mode, aten.div_.Tensor_mode, aten.div.out_mode, aten.div.Scalar_mode,
             aten.div_.Scalar_mode, aten.div.Scalar_mode_out], one,
         _div_mode(C.OP_DIV_TENSOR, C.OP_DIV_SCALAR))
    _put(t, _overloads("floor_divide", _BINARY_OVERLOADS) + _overloads("floor_divide_", _BINARY_OVERLOADS),
         one, _floor_divide())
    _put(t, _overloads("where", ("self", "ScalarSelf", "ScalarOther", "Scalar", "self_out")), one, _where())
    _put(t, _overloads("masked_fill", ("Scalar", "Tensor", "Scalar_out", "Tensor_out"))
         + _overloads("masked_fill_", ("Scalar", "Tensor")), one, _masked_fill())
    cl = ("default", "Tensor", "out", "Tensor_out")
    _put(t, _overloads("clamp", cl) + _overloads("clamp_", cl), one, _clamp(1, 2))
    _put(t, _overloads("clamp_min", cl) + _overloads("clamp_min_", cl), one, _clamp(1, 0))
    _put(t, _overloads("clamp_max", cl) + _overloads("clamp_max_", cl), one, _clamp(0, 1))
    lo = ("Scalar", "Tensor", "Scalar_out", "Tensor_out")
    _put(t, _overloads("lerp", lo) + _overloads("lerp_", lo), one, _lerp())
    for name, op in (("addcmul", C.OP_ADDCMUL), ("addcdiv", C.OP_ADDCDIV)):
        _put(t, _overloads(name, ("default", "out")) + _overloads(name + "_", ("default",)), one, _addc(op))
    bw = ("default", "grad_input")
    _put(t, _overloads("threshold_backward", bw), one,
         _act_backward(C.OP_THRESHOLD_BACKWARD, lambda args, kwargs: args[2]))
    _put(t, _overloads("gelu_backward", bw), one, _act_backward(C.OP_GELU_BACKWARD, _gelu_approx))
    _put(t, _overloads("silu_backward", bw), one, _act_backward(C.OP_SILU_BACKWARD))
    _put(t, _overloads("sigmoid_backward", bw), one, _act_backward(C.OP_SIGMOID_BACKWARD))
    _put(t, _overloads("tanh_backward", bw), one, _act_backward(C.OP_TANH_BACKWARD))
    for name, op in (("tril", C.OP_TRIL), ("triu", C.OP_TRIU)):
        _put(t, _overloads(name, ("default", "out")) + _overloads(name + "_", ("default",)), one,
             _fixed(op, ((0, "self"),), _int_arg(1, "diagonal", 0)))

    # reductions
    x = ((0, "self"),)
    for name, op in (("amax", C.OP_AMAX), ("amin", C.OP_AMIN)):
        _put(t, _overloads(name, ("default", "out")), one, _fixed(op, x, _dims_keep(1, 2)))
    _put(t, _overloads("max", ("default", "unary_out")), one, _fixed(C.OP_AMAX, x, _dims_keep(None, None)))
    _put(t, _overloads("min", ("default", "unary_out")), one, _fixed(C.OP_AMIN, x, _dims_keep(None, None)))
    for name, op in (("argmax", C.OP_ARGMAX), ("argmin", C.OP_ARGMIN)):
        _put(t, _overloads(name, ("default", "out")), one, _fixed(op, x, _argdim()))
    _put(t, [aten.max.dim], multi, _fixed(C.OP_MAX_DIM, x, _dim_keep_int()))
    _put(t, [aten.min.dim], multi, _fixed(C.OP_MIN_DIM, x, _dim_keep_int()))
    for name, op in (("var", C.OP_VAR), ("std", C.OP_STD)):
        _put(t, _overloads(name, ("correction", "correction_out")), one, _fixed(op, x, _var()))
    _put(t, _overloads("linalg_vector_norm", ("default", "out")), one, _fixed(C.OP_NORM, x, _norm()))
    for name, op in (("any", C.OP_ANY), ("all", C.OP_ALL)):
        _put(t, _overloads(name, ("default", "all_out")), one, _fixed(op, x, _dims_keep(None, None)))
        _put(t, _overloads(name, ("dim", "dims", "out", "dims_out")), one, _fixed(op, x, _dims_keep(1, 2)))
    _put(t, _overloads("prod", ("default", "out")), one, _fixed(C.OP_PROD, x, _dims_keep(None, None)))
    _put(t, _overloads("prod", ("dim_int", "int_out")), one, _fixed(C.OP_PROD, x, _dims_keep(1, 2)))
    _put(t, _overloads("cumsum", ("default", "out")) + _overloads("cumsum_", ("default",)), one,
         _fixed(C.OP_CUMSUM, x, _one_dim(1)))

    # softmax, norms, losses
    for name, op in (("_softmax", C.OP_SOFTMAX), ("_log_softmax", C.OP_LOG_SOFTMAX)):
        _put(t, _overloads(name, ("default", "out")), one, _fixed(op, x, _softmax_prep))
    gy = ((0, "grad_output"), (1, "output"))
    _put(t, _overloads("_softmax_backward_data", ("default", "out")), one,
         _fixed(C.OP_SOFTMAX_BACKWARD, gy, _softmax_bw_prep))
    _put(t, _overloads("_log_softmax_backward_data", ("default", "out")), one,
         _fixed(C.OP_LOG_SOFTMAX_BACKWARD, gy, _softmax_bw_prep))
    _put(t, [aten.native_layer_norm.default], multi,
         _fixed(C.OP_LAYER_NORM, ((0, "input"), (2, "weight"), (3, "bias")),
                lambda args, kwargs: (list(args[1]), float(args[4]))))
    _put(t, [aten.native_layer_norm_backward.default], multi,
         _fixed(C.OP_LAYER_NORM_BACKWARD, ((0, "grad_out"), (1, "input"), (3, "mean"), (4, "rstd"),
                                           (5, "weight"), (6, "bias")),
                lambda args, kwargs: (list(args[2]),)))
    _put(t, [aten.nll_loss_forward.default], multi,
         _fixed(C.OP_NLL_LOSS, ((0, "self"), (1, "target"), (2, "weight")),
                lambda args, kwargs: (args[3], args[4])))
    _put(t, _overloads("nll_loss_backward", ("default", "grad_input")), one,
         _fixed(C.OP_NLL_LOSS_BACKWARD, ((0, "grad_output"), (1, "self"), (2, "target"), (3, "weight"),
                                         (6, "total_weight")),
                lambda args, kwargs: (args[4], args[5])))

    # dense
    _put(t, _overloads("mm", ("default", "out")), one, _mm(C.OP_MM, False))
    _put(t, _overloads("bmm", ("default", "out")), one, _mm(C.OP_BMM, False))
    _put(t, _overloads("addmm", ("default", "out")) + _overloads("addmm_", ("default",)), one,
         _mm(C.OP_ADDMM, True))
    _put(t, _overloads("baddbmm", ("default", "out")) + _overloads("baddbmm_", ("default",)), one,
         _mm(C.OP_BADDBMM, True))
    _put(t, _overloads("convolution", ("default", "out")), one,
         _fixed(C.OP_CONVOLUTION, ((0, "input"), (1, "weight"), (2, "bias")), _conv_prep))
    _put(t, [aten.convolution_backward.default], multi,
         _fixed(C.OP_CONVOLUTION_BACKWARD, ((0, "grad_output"), (1, "input"), (2, "weight")), _conv_bw_prep))
    bn_in = ((0, "input"), (1, "weight"), (2, "bias"), (3, "running_mean"), (4, "running_var"))
    _put(t, [aten.native_batch_norm.default, aten._native_batch_norm_legit.default], multi,
         _fixed(C.OP_BATCH_NORM, bn_in, lambda args, kwargs: (bool(args[5]), float(args[6]), float(args[7]))))
    _put(t, [aten._native_batch_norm_legit.no_stats], multi,
         _fixed(C.OP_BATCH_NORM, ((0, "input"), (1, "weight"), (2, "bias"), (None, None), (None, None)),
                lambda args, kwargs: (bool(args[3]), float(args[4]), float(args[5]))))
    _put(t, [aten._native_batch_norm_legit_no_training.default], multi,
         _fixed(C.OP_BATCH_NORM, bn_in, lambda args, kwargs: (False, float(args[5]), float(args[6]))))
    _put(t, [aten.native_batch_norm_backward.default], multi,
         _fixed(C.OP_BATCH_NORM_BACKWARD, ((0, "grad_out"), (1, "input"), (2, "weight"), (3, "running_mean"),
                                           (4, "running_var"), (5, "save_mean"), (6, "save_invstd")),
                lambda args, kwargs: (bool(args[7]), float(args[8]))))
    _put(t, [aten.max_pool2d_with_indices.default], multi, _fixed(C.OP_MAX_POOL2D, x, _pool_max(1)))
    _put(t, _overloads("max_pool2d_with_indices_backward", ("default", "grad_input")), one,
         _fixed(C.OP_MAX_POOL2D_BACKWARD, ((0, "grad_output"), (1, "self"), (7, "indices")), _pool_max(2)))
    _put(t, _overloads("avg_pool2d", ("default", "out")), one, _fixed(C.OP_AVG_POOL2D, x, _pool_avg(1)))
    _put(t, _overloads("avg_pool2d_backward", ("default", "grad_input")), one,
         _fixed(C.OP_AVG_POOL2D_BACKWARD, ((0, "grad_output"), (1, "self")), _pool_avg(2)))
    _put(t, _overloads("_adaptive_avg_pool2d", ("default", "out")), one,
         _fixed(C.OP_ADAPTIVE_AVG_POOL2D, x, lambda args, kwargs: (list(args[1]),)))
    _put(t, _overloads("_adaptive_avg_pool2d_backward", ("default", "out")), one,
         _fixed(C.OP_ADAPTIVE_AVG_POOL2D_BACKWARD, ((0, "grad_output"), (1, "self")),
                lambda args, kwargs: ()))

    # index family
    _put(t, _overloads("embedding", ("default", "out")), one,
         _fixed(C.OP_EMBEDDING, ((0, "weight"), (1, "indices")), _int_arg(2, "padding_idx", -1)))
    _put(t, _overloads("embedding_dense_backward", ("default", "out")), one,
         _fixed(C.OP_EMBEDDING_BACKWARD, ((0, "grad_output"), (1, "indices")),
                lambda args, kwargs: (args[2], args[3], bool(args[4]))))
    si = ((0, "self"), (2, "index"))
    _put(t, _overloads("gather", ("default", "out")), one, _fixed(C.OP_GATHER, si, _one_dim(1)))
    _put(t, _overloads("index_select", ("default", "out")), one, _fixed(C.OP_INDEX_SELECT, si, _one_dim(1)))
    _put(t, _overloads("scatter_add", ("default", "out")) + _overloads("scatter_add_", ("default",)), one,
         _fixed(C.OP_SCATTER_ADD, ((0, "self"), (2, "index"), (3, "src")), _one_dim(1)))
    _put(t, _overloads("scatter", ("src", "src_out")) + _overloads("scatter_", ("src",)), one,
         _scatter(True, False))
    _put(t, _overloads("scatter", ("value", "value_out")) + _overloads("scatter_", ("value",)), one,
         _scatter(False, False))
    _put(t, _overloads("scatter", ("reduce", "reduce_out")) + _overloads("scatter_", ("reduce",)), one,
         _scatter(True, True))
    _put(t, _overloads("scatter", ("value_reduce", "value_reduce_out")) + _overloads("scatter_", ("value_reduce",)),
         one, _scatter(False, True))
    _put(t, _overloads("index_add", ("default", "out")) + _overloads("index_add_", ("default",)), one,
         _index_add())
    _put(t, _overloads("constant_pad_nd", ("default", "out")), one, _pad())
    _put(t, _overloads("cat", ("default", "out")), one, _cat())
    _put(t, _overloads("index", ("Tensor", "Tensor_out")), one, _index())
    _put(t, _overloads("index_put", ("default", "out")) + _overloads("index_put_", ("default",))
         + _overloads("_index_put_impl", ("default", "out")) + _overloads("_index_put_impl_", ("default",)),
         one, _index_put())

    # composites (handlers from dispatch, which re-enter it with table ops)
    for funcs, name in (([aten.stack.default, aten.stack.out], "stack"),
                        ([aten.mv.default, aten.mv.out], "mv"),
                        ([aten.dot.default, aten.dot.out], "dot")):
        e = Entry("handler", handlers[name])
        for f in funcs:
            t[f] = e
    return t


# which of the composites' table entries get a pre-pass in dispatch
PREPASS = {
    "cat": _overloads("cat", ("default", "out")),
    "index": _overloads("index", ("Tensor", "Tensor_out")),
    "index_put": (_overloads("index_put", ("default", "out")) + _overloads("index_put_", ("default",))
                  + _overloads("_index_put_impl", ("default", "out"))
                  + _overloads("_index_put_impl_", ("default",))),
}
