"""rgpu: write device="rgpu" in PyTorch; the ops run on an rgpu-server.

`import rgpu` renames PrivateUse1 to "rgpu", installs `torch.rgpu`, the
RemoteTensor dispatch and the factory kernels. The connection to the server is
made on first use (see server.py for RGPU_SERVER, RGPU_RECORD)."""
from . import _C

__version__ = _C.VERSION                 # the C library's: client and extension are one build
from . import device as _device

_device._register()

from . import decomp as _decomp         # noqa: E402
from . import dispatch as _dispatch     # noqa: E402  (needs the "rgpu" device name)
from . import factories as _factories   # noqa: E402
from . import random as _random         # noqa: E402  (registers the random ops)
from . import datadep as _datadep       # noqa: E402  (nonzero, masked_select, unique, x[mask])
from . import ctc as _ctc               # noqa: E402  (_ctc_loss and its backward)
from . import cells as _cells           # noqa: E402  (the fused LSTM and GRU cells)
from . import attention as _attention   # noqa: E402  (fused scaled-dot-product attention)
from . import rmsnorm as _rmsnorm       # noqa: E402  (fused RMS norm)
from . import crossentropy as _crossentropy  # noqa: E402  (fused cross-entropy)
from . import memory as _memory         # noqa: E402
from . import resize as _resize         # noqa: E402
from . import amp as _amp               # noqa: E402  (autocast("rgpu"), GradScaler's ops)
from . import fused_optim as _fused_optim  # noqa: E402  (torch.optim's fused=True kernels)
from . import lazy as _lazy             # noqa: E402  (nn.Lazy* modules: uninitialized parameters on rgpu)
from . import server                    # noqa: E402
from . import compile as _compile       # noqa: E402  (torch.compile(..., backend="rgpu"))
from .tensor import RemoteTensor        # noqa: E402
from .serverfiles import (DirEntry, StatResult, from_file, listdir, load, save, scandir,  # noqa: E402
                          stat)                 # files on the server's host (--data / --data-rw folders)

RemoteError = _C.RemoteError
SessionLost = _C.SessionLost      # a RemoteError: the server no longer holds the session
synchronize = _device.synchronize
manual_seed = _device.manual_seed


def stats():
    """Client counters: ops, chunks, waits, bytes_out, bytes_in (and more),
    "decomposed": {op name: calls decomposed into other ops}, and once
    connected "backend": the server's backend as its handshake names it,
    "server_version": the server's rgpu version (rgpu.__version__ is ours) and
    "journal": whether a server restart would resume this run -- "on", "none"
    (the server keeps no journal) or "off: <why>" (it failed; the next wait
    also warns once, a RuntimeWarning)."""
    s = _C.stats()
    s["decomposed"] = _decomp.counts()
    s["compile"] = _compile.counts()
    if server.is_connected():   # "cuda (NVIDIA H200)", "cpu (cuda self-check failed: mm)", "cpu"
        s["backend"] = server.info()["backend"]
        s["server_version"] = server.info().get("server_version", "?")
    return s


_lazy.install()          # UninitializedParameter/Buffer on rgpu (their torch hooks, for them only)
_resize.install()        # UntypedStorage.resize_ of rgpu storages (no Python hook for it)
_compile.no_fake_constants()    # rgpu tensors are never FakeTensorMode constants
_compile.skip_our_frames()  # dynamo must never trace rgpu's own frames (torch._C only, cheap)
if "torch._dynamo" in __import__("sys").modules:
    _compile.register()     # dynamo is loaded already; otherwise its entry point finds us


def supported_ops():
    """{ATen op name: how rgpu runs it} for every ATen op an rgpu tensor supports:
    "kernel <ops.def op>", "view", "handler", "decomposition" or "factory"."""
    return _dispatch.supported_ops()


def connect():
    """Connect now rather than at the first rgpu op; returns the server's handshake info."""
    return server.info()


__all__ = ["DirEntry", "RemoteError", "RemoteTensor", "SessionLost", "StatResult", "connect", "from_file", "listdir",
           "load", "manual_seed", "save", "scandir", "stat", "stats", "supported_ops", "synchronize"]
