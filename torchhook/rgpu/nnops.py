"""Ops outside aten that torch.nn itself calls, run by their own reference kernels.

F.linear_cross_entropy (nn.LinearCrossEntropyLoss) with options != None calls
one of two custom ops (torch.library.custom_op, torch/nn/modules/
linear_cross_entropy.py), registered when that module is first imported:
  torch_nn::_linear_cross_entropy_batch_chunked (reduction mean / sum): the
      loss and the gradients of input, linear_weight and linear_bias, computed
      in forward; its autograd formula scales them by the upstream gradient
  torch_nn::_linear_cross_entropy_batch_chunked_no_reduction (none): the loss
      per row; its autograd formula recomputes the gradients by calling the
      same chunked loop (plain aten ops, no op of its own)
Each has one kernel, CompositeExplicitAutograd: the Python chunked loop (per
batch_chunk_size rows: mm into a logits buffer, + bias, - amax, gather of the
target logit, exp_ and sum, log; the gradients by index_select / addmm /
index_add_; the class weight and ignore_index folded into a per-row weight),
which is what CPU runs. On an rgpu tensor the op reaches __torch_dispatch__
whole (the Python key comes before CompositeExplicitAutograd), so rgpu runs
that same kernel, whose aten ops are then rgpu's. device.type is neither
"cuda" nor "mps", so the loop takes CPU's branches: the same ops in the same
order as on CPU, every argument (reduction, ignore_index, weight, bias,
batch_chunk_size, acc_policy, acc_dtype, compute_*_grad) handled as there,
and the op's own errors (label_smoothing > 0 ...) raised as there.
BY_NAME maps schema names to decompositions; decomp.py merges it into
_OWN_BY_NAME (by name: the ops don't exist before torch.nn registers them)."""
import torch

_CEA = torch._C.DispatchKey.CompositeExplicitAutograd


def _composite(name):
    """Run name's CompositeExplicitAutograd kernel on the arguments."""
    ns, _, op = name.partition("::")

    def run(*args, **kwargs):
        func = getattr(getattr(torch.ops, ns), op).default
        return func._op_dk(_CEA, *args, **kwargs)
    run.__name__ = op
    return run


BY_NAME = {n: _composite(n) for n in ("torch_nn::_linear_cross_entropy_batch_chunked",
                                      "torch_nn::_linear_cross_entropy_batch_chunked_no_reduction")}
