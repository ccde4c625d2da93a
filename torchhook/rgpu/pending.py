"""Records of new tensors made later, when first used.

PENDING maps a tensor id to (op, output definition, args): zeros autograd
makes inside backward for outputs that got no gradient (a compiled backward
binds a shared zero instead, compile.py), and empty tensors from the
factories (torch.tensor / x.to("rgpu") fill one at once: one UPLOAD then
defines it, transfer.upload_into). Every path that records a tensor's id
calls flush_pending() first when PENDING is not empty; a pending tensor that
dies was never recorded and is not freed.

tensor.py makes pending tensors (record_later) and re-exports these names;
they live here, below both tensor.py and transfer.py, which read them."""
from . import _C

PENDING = {}


def drop_pending(tid):
    """A pending tensor dies: a constant (FULL) never used is never recorded
    (returns True); an allocation (EMPTY) is recorded as the program made it,
    so memory statistics see it, and then freed as usual (returns False). The
    other pending allocations are alive now: they are recorded first, so its
    FREE (which goes before the next allocation) cannot make room for them."""
    p = PENDING.pop(tid, None)
    if p is None:
        return False
    if p[0] == _C.OP_FULL:
        return True
    for t in [t for t, q in list(PENDING.items()) if q[0] != _C.OP_FULL]:
        q = PENDING.pop(t, None)
        if q is not None:
            _C.record(q[0], (q[1],), (), q[2])
    _C.record(p[0], (p[1],), (), p[2])
    return False


def flush_pending():
    """Record the pending tensors (before any record that may use them)."""
    while PENDING:              # (popitem: atomic, another thread may add or take)
        try:
            _, (op, d, args) = PENDING.popitem()
        except KeyError:
            break
        _C.record(op, (d,), (), args)
