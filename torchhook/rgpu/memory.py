"""Server memory statistics: the bytes of this session's storages on the server.

Each query records one MEMORY_STATS (a WAIT op; result: u64 allocated, u64
peak, little-endian) and waits for it, so it reports the state after every op
recorded before it. Frees of dead tensors are batched into FREE records that
the recorder emits when it closes a chunk, which a wait does only after its
own record; so the open chunk is flushed first, putting pending frees ahead
of the query."""
import struct

from . import _C, server
from .waits import wait
from . import tensor as _tensor


def _query(reset_peak=False):
    server.ensure()
    if _tensor.PENDING:                 # tensors whose record waits for their first use
        _tensor.flush_pending()
    _C.flush()                          # pending FREE records go before the query
    data = wait(_C.record(_C.OP_MEMORY_STATS, (), (), (bool(reset_peak),)))
    if len(data) != 16:
        raise RuntimeError(f"rgpu: memory_stats returned {len(data)} bytes, expected 16")
    return struct.unpack("<QQ", data)


def memory_allocated(device=None):
    """Bytes of the server storages this process holds now."""
    return _query()[0]


def max_memory_allocated(device=None):
    """The most bytes held at once since the session began or the last reset_peak_memory_stats()."""
    return _query()[1]


def reset_peak_memory_stats(device=None):
    """Restart the peak at the current allocation."""
    _query(True)


def memory_stats(device=None):
    """A dict in torch.cuda.memory_stats()'s vocabulary. The server allocates each
    storage directly, so reserved equals allocated."""
    cur, peak = _query()
    return {
        "allocated_bytes.all.current": cur,
        "allocated_bytes.all.peak": peak,
        "reserved_bytes.all.current": cur,
        "reserved_bytes.all.peak": peak,
        "active_bytes.all.current": cur,
        "active_bytes.all.peak": peak,
    }
