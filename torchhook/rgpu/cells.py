"""The fused recurrent cells nn.LSTM and nn.GRU call off the CPU: one record per
cell per time step (LSTM_CELL, GRU_CELL and their backwards; the math is
replayer/op/rnn.h's), plus a sum for each bias gradient."""
import torch

from . import _C
from .args import arg, need_remote
from .registry import register
from .tensor import RemoteTensor, record_multi

aten = torch.ops.aten
_META = torch.device("meta")


def _tid(t):
    if t is None:
        return 0
    if type(t) is not RemoteTensor:
        raise RuntimeError(f"rgpu: a recurrent cell got a tensor on {t.device}")
    return t._tid


def _meta(b, n, like):
    return torch.empty((b, n), dtype=like.dtype, device=_META)


def _lstm_cell(func, args, kwargs):
    ig, hg, cx = args[0], args[1], args[2]
    ib, hb = arg(args, kwargs, 3, "input_bias"), arg(args, kwargs, 4, "hidden_bias")
    need_remote(ig, func)
    b, h = cx.shape
    hy, cy, ws = record_multi(_C.OP_LSTM_CELL, [_meta(b, h, cx), _meta(b, h, cx), _meta(b, 4 * h, ig)],
                              tuple(_tid(t) for t in (ig, hg, cx, ib, hb)), ())
    return hy, cy, ws


def _lstm_cell_backward(func, args, kwargs):
    ghy, gcy, cx, cy, ws = args[:5]
    has_bias = bool(arg(args, kwargs, 5, "has_bias", True))
    need_remote(ws, func)
    b, h = cx.shape
    gg, gcx = record_multi(_C.OP_LSTM_CELL_BACKWARD, [_meta(b, 4 * h, ws), _meta(b, h, cx)],
                           tuple(_tid(t) for t in (ghy, gcy, cx, cy, ws)), ())
    return gg, gcx, aten.sum.dim_IntList(gg, [0]) if has_bias else None


def _gru_cell(func, args, kwargs):
    ig, hg, hx = args[0], args[1], args[2]
    ib, hb = arg(args, kwargs, 3, "input_bias"), arg(args, kwargs, 4, "hidden_bias")
    need_remote(ig, func)
    b, h = hx.shape
    hy, ws = record_multi(_C.OP_GRU_CELL, [_meta(b, h, hx), _meta(b, 5 * h, ig)],
                          tuple(_tid(t) for t in (ig, hg, hx, ib, hb)), ())
    return hy, ws


def _gru_cell_backward(func, args, kwargs):
    ghy, ws = args[0], args[1]
    has_bias = bool(arg(args, kwargs, 2, "has_bias", True))
    need_remote(ws, func)
    b, h = ghy.shape
    gi, gh, ghx = record_multi(_C.OP_GRU_CELL_BACKWARD, [_meta(b, 3 * h, ws), _meta(b, 3 * h, ws), _meta(b, h, ghy)],
                               (_tid(ghy), _tid(ws)), ())
    if has_bias:
        return gi, gh, ghx, aten.sum.dim_IntList(gi, [0]), aten.sum.dim_IntList(gh, [0])
    return gi, gh, ghx, None, None


def _register():
    register((aten._thnn_fused_lstm_cell.default,), _lstm_cell)
    register((aten._thnn_fused_lstm_cell_backward_impl.default,), _lstm_cell_backward)
    register((aten._thnn_fused_gru_cell.default,), _gru_cell)
    register((aten._thnn_fused_gru_cell_backward.default,), _gru_cell_backward)


_register()
