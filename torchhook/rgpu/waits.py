"""A wait on the server (_C.wait: `.item()`, `.cpu()`, a data-dependent
shape, `torch.rgpu.synchronize()`, ...), visible to torch.profiler: while a
torch.profiler (or autograd profiler) session runs, each wait is a
`record_function` range named "rgpu::wait" whose args give the waited op's
index, nested in the aten op that waited. The server's spans per record are
in its own timeline (`--profile DIR` / `RGPU_PROFILE=DIR`): torch's profiler
takes no events with timestamps of another process."""
import torch.autograd.profiler as _prof

from . import _C


def wait(idx):
    if not _prof._is_profiler_enabled:
        return _C.wait(idx)
    with _prof.record_function("rgpu::wait", str(idx)):
        return _C.wait(idx)
