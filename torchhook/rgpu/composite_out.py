"""out= overloads whose CompositeImplicitAutograd kernel does not write `out`.

ATen's linalg_matrix_rank out= kernels assign their result to the `out`
reference (`result = at::sum(...)`) instead of writing into it: on CPU the
CPU kernels below it write, on a Python device the rank is computed and
dropped, and `out` keeps its old values, with no error. A PrivateUse1 kernel
for each such overload stops autograd from running the composite above us,
so the op reaches __torch_dispatch__ whole; there it is the functional
overload's value copied into `out` (resized as ATen resizes it), one more
record, and dispatch's write check holds it to that."""
import torch
from torch._prims_common.wrappers import _resize_output_check

from .tensor import RemoteTensor
from .writes import functional_of

aten = torch.ops.aten
_lib = torch.library.Library("aten", "IMPL")    # kept alive for the process

OVERLOADS = (aten.linalg_matrix_rank.out, aten.linalg_matrix_rank.out_tol_tensor,
             aten.linalg_matrix_rank.atol_rtol_tensor_out, aten.linalg_matrix_rank.atol_rtol_float_out)


def _unreachable(*args, **kwargs):
    # RemoteTensors carry the Python key, which comes first: only a call with
    # no rgpu tensor in it could land here
    raise RuntimeError("rgpu: an out= kernel reached without an rgpu tensor argument")


def _copy_out(functional):
    def handler(*args, out, **kwargs):
        if type(out) is not RemoteTensor:
            raise RuntimeError(f"Expected out tensor to have device rgpu:0, but got {out.device} instead")
        r = functional(*args, **kwargs)
        if r.dtype != out.dtype and not torch.can_cast(r.dtype, out.dtype):
            raise RuntimeError(f"result type {r.dtype} can't be cast to the desired output type {out.dtype}")
        if _resize_output_check(out, r.shape):
            aten.resize_.default(out, r.shape)
        return aten.copy_.default(out, r)
    return handler


TABLE = {f: _copy_out(functional_of(f)) for f in OVERLOADS}

for _f in OVERLOADS:
    _lib.impl(_f._schema.name.split("::")[1] + "." + _f._overloadname, _unreachable, "PrivateUse1")
