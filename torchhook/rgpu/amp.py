"""Mixed precision on rgpu: torch.autocast("rgpu") with CUDA's policy, and the
two ops torch.amp.GradScaler("rgpu") runs.

Autocast. Every rgpu tensor carries the AutocastPrivateUse1 dispatch key, which
torch keeps in the thread's excluded set until `torch.autocast("rgpu")` is
entered: outside an autocast region the dispatcher skips the key and nothing
here runs (no cost on the per-op path). Inside, ops without a kernel here fall
through (the fallthrough fallback below); the ops of POLICY get a kernel that
casts as ATen's CUDA autocast does and then calls the op again with every
Autocast key excluded, so autograd records the casts and the op sees cast
inputs:
  lower_precision_fp  eligible tensors -> torch.get_autocast_dtype("rgpu")
  fp32                eligible tensors -> float32
  fp32_set_opt_dtype  an unset `dtype` becomes float32 when the first argument
                      is eligible; tensors are not cast
  fp32_append_dtype   calls the overload that takes a dtype, with float32 when
                      the first argument is eligible (else its own dtype)
  promote             eligible tensors -> the widest of them (float32 wins over
                      the low-precision dtype; float64 tensors are ignored)
  banned              raises (binary_cross_entropy, as on CUDA)
"Eligible" is ATen's is_eligible: a tensor on the rgpu device (a RemoteTensor,
or a fake tensor while torch.compile traces) of a floating dtype other than
float64. `Tensor?[]` arguments (index_put's indices) are neither cast nor
looked at, as in ATen. ATen's cache of low-precision weight casts is not
reproduced: a weight used twice in one region is cast twice (same values).

POLICY is the table of ATen's CUDA registrations (aten/src/ATen/autocast_mode.h
AT_FORALL_* lists and autocast_mode.cpp's TORCH_LIBRARY_IMPL(aten, Autocast, m),
torch 2.13; ops and overloads the running torch lacks are skipped).

GradScaler. `_amp_foreach_non_finite_check_and_unscale_` becomes one
AMP_UNSCALE record per gradient and `_amp_update_scale_` one AMP_UPDATE_SCALE
record; neither waits (GradScaler.step's found_inf.item() is the wait)."""
import torch

from . import _C
from ._dtypes import c10_name
from .registry import register
from .tensor import RemoteTensor

aten = torch.ops.aten

# --- the policy: op name or "name.overload" -> cast policy ------------------------------

LOWER_PRECISION_FP = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
    "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr",
    "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul",
    "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
    # CUDA only (autocast_mode.cpp)
    "cudnn_convolution", "cudnn_convolution_transpose",
)
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
    "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
    "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)
FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "prod.dim_Dimname", "softmax.int", "softmax.Dimname", "log_softmax.int",
    "log_softmax.Dimname", "cumprod", "cumprod.dimname", "cumsum", "cumsum.dimname", "linalg_vector_norm",
    "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList", "sum.dim_DimnameList",
)
FP32_APPEND_DTYPE = {      # registered overload -> the overload called with the dtype appended
    "norm.Scalar": "norm.ScalarOpt_dtype",
    "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype",
    "norm.names_ScalarOpt_dim": "norm.names_ScalarOpt_dim_dtype",
}
PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
           "tensordot", "scatter_add")
BANNED = {
    "binary_cross_entropy": (
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
        "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
        "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
        "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
        "safe to autocast."),
}


def policy():
    """{"name.overload": policy} over the whole table (overload "default" for bare names)."""
    p = {}
    for names, kind in ((LOWER_PRECISION_FP, "lower_precision_fp"), (FP32, "fp32"),
                        (FP32_SET_OPT_DTYPE, "fp32_set_opt_dtype"), (FP32_APPEND_DTYPE, "fp32_append_dtype"),
                        (PROMOTE, "promote"), (BANNED, "banned")):
        for n in names:
            p[n if "." in n else n + ".default"] = kind
    return p


# --- the kernels ---------------------------------------------------------------------------

_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)
for _k in ("AutocastCPU", "AutocastCUDA", "AutocastXPU", "AutocastMPS", "AutocastHPU", "AutocastIPU",
           "AutocastXLA", "AutocastMTIA", "AutocastMAIA"):
    if hasattr(torch._C.DispatchKey, _k):       # ATen excludes the whole Autocast functionality
        _KEYS = _KEYS | torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, _k))
_Exclude = torch._C._ExcludeDispatchKeyGuard
_F32, _F64 = torch.float32, torch.float64


def _eligible(t):
    # on the rgpu device: RemoteTensors, and the fake/functional tensors on
    # "rgpu" that torch.compile traces with (so compiled graphs cast alike)
    return isinstance(t, torch.Tensor) and t.dtype.is_floating_point and t.dtype is not _F64 \
        and (type(t) is RemoteTensor or t.device.type == "rgpu")


def _overload(name):
    packet, _, ov = name.partition(".")
    pk = getattr(aten, packet, None)
    if pk is None or (ov or "default") not in pk.overloads():
        return None
    return getattr(pk, ov or "default")


def _tensor_slots(func):
    """[(position, name, is_list)] of the Tensor, Tensor? and Tensor[] arguments
    (not Tensor?[]: ATen's cached_cast leaves those alone)."""
    slots = []
    for i, a in enumerate(func._schema.arguments):
        t = a.type
        kind = t.kind()
        if kind == "OptionalType":
            t = t.getElementType()
            kind = t.kind()
        if kind == "TensorType":
            slots.append((None if a.kwarg_only else i, a.name, False))
        elif kind == "ListType" and t.getElementType().kind() == "TensorType":
            slots.append((None if a.kwarg_only else i, a.name, True))
    return slots


def _get(args, kwargs, pos, name):
    if pos is not None and pos < len(args):
        return args[pos]
    return kwargs.get(name)


def _put(args, kwargs, pos, name, value):
    if pos is not None and pos < len(args):
        args[pos] = value
    elif name in kwargs:
        kwargs[name] = value


def _cast(t, dtype):
    return t.to(dtype) if _eligible(t) and t.dtype is not dtype else t


def _cast_all(slots, args, kwargs, dtype):
    args = list(args)
    kwargs = dict(kwargs)
    for pos, name, is_list in slots:
        v = _get(args, kwargs, pos, name)
        if v is None:
            continue
        _put(args, kwargs, pos, name, [_cast(t, dtype) for t in v] if is_list else _cast(v, dtype))
    return args, kwargs


def _widest(slots, args, kwargs, low):
    """ATen's promote_type: float32 if any eligible tensor is float32, else low."""
    cur = low
    for pos, name, is_list in slots:
        v = _get(args, kwargs, pos, name)
        if v is None:
            continue
        for t in (v if is_list else (v,)):
            if not _eligible(t):
                continue
            if cur is _F32 or t.dtype is _F32:
                cur = _F32
            elif t.dtype is not low:
                raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
    return cur


def _first_eligible(func, args, kwargs):
    a0 = func._schema.arguments[0]
    return _eligible(args[0] if args else kwargs.get(a0.name))


def _kernel(func, kind, target=None):
    slots = _tensor_slots(func)
    if kind == "lower_precision_fp":
        def k(*args, **kwargs):
            low = torch.get_autocast_dtype("rgpu")
            with _Exclude(_KEYS):
                a, kw = _cast_all(slots, args, kwargs, low)
                return func(*a, **kw)
    elif kind == "fp32":
        def k(*args, **kwargs):
            with _Exclude(_KEYS):
                a, kw = _cast_all(slots, args, kwargs, _F32)
                return func(*a, **kw)
    elif kind == "promote":
        def k(*args, **kwargs):
            low = torch.get_autocast_dtype("rgpu")
            with _Exclude(_KEYS):
                a, kw = _cast_all(slots, args, kwargs, _widest(slots, args, kwargs, low))
                return func(*a, **kw)
    elif kind == "fp32_set_opt_dtype":
        names = [a.name for a in func._schema.arguments]
        dpos = names.index("dtype")
        dkw = func._schema.arguments[dpos].kwarg_only

        def k(*args, **kwargs):
            with _Exclude(_KEYS):
                if _first_eligible(func, args, kwargs) and _get(args, kwargs, None if dkw else dpos, "dtype") is None:
                    if not dkw and dpos < len(args):
                        args = args[:dpos] + (_F32,) + args[dpos + 1:]
                    else:
                        kwargs = dict(kwargs, dtype=_F32)
                return func(*args, **kwargs)
    elif kind == "fp32_append_dtype":
        nargs = len(func._schema.arguments)

        def k(*args, **kwargs):
            with _Exclude(_KEYS):
                x = args[0]
                dt = _F32 if _eligible(x) else x.dtype
                full = list(args) + [kwargs[a.name] if a.name in kwargs else a.default_value
                                     for a in func._schema.arguments[len(args):nargs]]
                return target(*full, dtype=dt)
    else:   # banned
        msg = BANNED[func._schema.name.split("::")[1]]

        def k(*args, **kwargs):
            raise RuntimeError(msg)
    return k


_LIBS = []


def _register_autocast():
    fb = torch.library.Library("_", "IMPL")
    fb.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    lib = torch.library.Library("aten", "IMPL")
    _LIBS.extend((fb, lib))
    for name, kind in policy().items():
        func = _overload(name)
        if func is None:
            continue            # not in this torch (or a Dimname overload of a build without them)
        target = None
        if kind == "fp32_append_dtype":
            target = _overload(FP32_APPEND_DTYPE[name])
            if target is None:
                continue
        reg = name[:-len(".default")] if name.endswith(".default") else name
        lib.impl(reg, _kernel(func, kind, target), "AutocastPrivateUse1")


# --- GradScaler's ops -----------------------------------------------------------------------

def _want_scalar(t, what, dtype, dtype_word):
    if type(t) is not RemoteTensor:
        raise RuntimeError(f"{what} must be an rgpu tensor, got one on {t.device}.")
    if t.numel() != 1:
        raise RuntimeError(f"{what} must be a 1-element tensor.")
    if t.dtype is not dtype:
        raise RuntimeError(f"{what} must be {dtype_word} tensor.")


_UNSCALE_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _unscale(func, args, kwargs):
    grads = args[0]
    found = args[1] if len(args) > 1 else kwargs["found_inf"]
    inv = args[2] if len(args) > 2 else kwargs["inv_scale"]
    if not grads:
        return None
    _want_scalar(inv, "inv_scale", torch.float32, "a float")
    _want_scalar(found, "found_inf", torch.float32, "a float")
    for g in grads:
        if type(g) is not RemoteTensor:
            raise RuntimeError("one of scaled_grads was not an rgpu tensor.")
        if g.dtype not in _UNSCALE_DTYPES:
            raise NotImplementedError(f'"_amp_foreach_non_finite_check_and_unscale_" not implemented for '
                                      f"'{c10_name(g.dtype)}'")
    rec, op, ft, it = _C.record, _C.OP_AMP_UNSCALE, found._tid, inv._tid
    for g in grads:
        rec(op, (g._tid, ft), (g._tid, it), ())
    return None


def _update_scale(func, args, kwargs):
    scale, tracker, found = args[0], args[1], args[2]
    growth, backoff, interval = args[3], args[4], args[5]
    _want_scalar(tracker, "growth_tracker", torch.int32, "an int")
    _want_scalar(scale, "current_scale", torch.float32, "a float")
    _want_scalar(found, "found_inf", torch.float32, "a float")
    _C.record(_C.OP_AMP_UPDATE_SCALE, (scale._tid, tracker._tid), (found._tid,),
              (float(growth), float(backoff), int(interval)))
    return scale


register((aten._amp_foreach_non_finite_check_and_unscale_.default,), _unscale)
register((aten._amp_update_scale_.default,), _update_scale)
_register_autocast()
