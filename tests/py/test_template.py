"""Compiled-graph templates through the real _C API and a server (FORMAT.md §5.1):
capture eager ops on one thread, wrap the captured records into a template blob,
register it with put_blob, run it with CALL records binding inputs and fresh
outputs, and compare with PyTorch CPU. Also: what a capture refuses, frees of
template-local ids, other threads during a capture, Philox offsets rebased per
call, a failing CALL, and a recorded trace with CALLs replayed offline."""
import os
import struct
import subprocess
import sys
import threading

import pytest
import torch

import rgpu
from rgpu import _C
from rgpu import random as rrandom
from rgpu.tensor import Storage, wrap

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
TORCHHOOK = os.path.join(REPO, "torchhook")
BIN = os.environ.get("RGPU_BIN") or os.path.join(REPO, "build", "bin")
LOCAL = 1 << 62


def template(raw, binds, base_offset=0):
    """The blob of FORMAT.md §5.1 around captured records raw."""
    return (struct.pack("<IIIIQ", _C.TEMPLATE_MAGIC, _C.TEMPLATE_VERSION, len(binds), 0, base_offset)
            + struct.pack(f"<{len(binds)}Q", *binds) + raw)


def capture(fn):
    _C.capture_begin()
    try:
        out = fn()
    except BaseException:
        _C.capture_abort()
        raise
    return out, _C.capture_end()


def call(h, bindings, seed=0, offset=0):
    return _C.record(_C.OP_CALL, (), (), (h, tuple(bindings), seed, offset))


def new_like(t):
    """A fresh (tid, sid) and the RemoteTensor a CALL defining them gives, with t's metadata."""
    tid, sid = _C.new_id(), _C.new_id()
    return tid, sid, wrap(t._key, Storage(sid, t._st.nbytes), tid)


def test_capture_call_twice_matches_cpu():
    x = torch.randn(8, device="rgpu")
    z = torch.arange(8, dtype=torch.float32, device="rgpu")
    xc, zc = x.cpu(), z.cpu()
    s0 = rgpu.stats()
    y, raw = capture(lambda: (x * 2 + 1) * x)
    # nothing reached the stream; the ids are template-local
    assert rgpu.stats()["ops"] == s0["ops"]
    assert y._tid & LOCAL and y._st.sid & LOCAL
    assert len(raw) > 0
    blob = template(raw, [x._tid, y._tid, y._st.sid])
    h = _C.put_blob(blob)
    assert isinstance(h, bytes) and len(h) == 16
    assert _C.put_blob(bytearray(blob)) == h          # deduplicated, any buffer
    outs = []
    for src in (x, z):
        tid, sid, out = new_like(y)
        assert call(h, [src._tid, tid, sid]) > 0       # an op index, as for any record
        outs.append(out)
    torch.testing.assert_close(outs[0].cpu(), (xc * 2 + 1) * xc)
    torch.testing.assert_close(outs[1].cpu(), (zc * 2 + 1) * zc)
    # the outputs are ordinary tensors
    torch.testing.assert_close((outs[0] + outs[1]).cpu(), (xc * 2 + 1) * xc + (zc * 2 + 1) * zc)
    s1 = rgpu.stats()
    assert s1["calls"] == s0["calls"] + 2
    assert s1["templates"] == s0["templates"] + 1
    del y


def test_view_of_bound_storage_and_upload_inside():
    x = torch.arange(10, dtype=torch.float32, device="rgpu")

    def graph():
        c = torch.tensor([1.0, 2.0, 3.0]).to("rgpu")    # an UPLOAD inside the template
        v = x[2:5]                                       # a view over x's storage
        return v, v * c
    (v, w), raw = capture(graph)
    h = _C.put_blob(template(raw, [x._tid, x._st.sid, v._tid, w._tid, w._st.sid]))
    vt = _C.new_id()
    wt, ws, wout = new_like(w)
    call(h, [x._tid, x._st.sid, vt, wt, ws])
    vout = wrap(v._key, x._st, vt)
    assert vout.cpu().tolist() == [2.0, 3.0, 4.0]
    assert wout.cpu().tolist() == [2.0, 6.0, 12.0]
    x.add_(100)                                          # the view shares x's storage
    assert vout.cpu().tolist() == [102.0, 103.0, 104.0]
    # called again (the upload's bytes are kept for every call)
    wt2, ws2, wout2 = new_like(w)
    call(h, [x._tid, x._st.sid, _C.new_id(), wt2, ws2])
    assert wout2.cpu().tolist() == [102.0, 206.0, 312.0]


def test_random_offsets_rebased_per_call():
    rrandom.manual_seed(7)
    seed, base = rrandom.get_state()
    r, raw = capture(lambda: torch.randn(16, device="rgpu") + torch.rand(16, device="rgpu"))
    assert rrandom.get_state()[1] == base + 2        # two random records captured
    h = _C.put_blob(template(raw, [r._tid, r._st.sid], base_offset=base))
    got = []
    for s, o in ((99, 1000), (99, 5000)):
        tid, sid, out = new_like(r)
        call(h, [tid, sid], rrandom._i64(s), rrandom._i64(o))
        got.append(out.cpu())
        rrandom.set_state(s, o)                       # the same draws, eagerly
        want = (torch.randn(16, device="rgpu") + torch.rand(16, device="rgpu")).cpu()
        assert torch.equal(got[-1], want)
    assert not torch.equal(got[0], got[1])


def test_wait_inside_capture_raises():
    x = torch.ones(4, device="rgpu")
    _C.capture_begin()
    try:
        with pytest.raises(RuntimeError, match=r"rgpu: _local_scalar_dense needs a wait, which a captured graph cannot do"):
            x.sum().item()
        with pytest.raises(RuntimeError, match=r"rgpu: rgpu::download needs a wait"):
            (x + 1).cpu()
        with pytest.raises(RuntimeError, match=r"needs a wait, which a captured graph cannot do"):
            _C.wait(0)
        with pytest.raises(RuntimeError, match=r"nest"):
            _C.capture_begin()
        with pytest.raises(RuntimeError, match=r"templates do not nest"):
            call(b"\0" * 16, [])
    finally:
        _C.capture_abort()
    _C.capture_abort()                                 # none active: no error
    with pytest.raises(RuntimeError, match=r"not capturing"):
        _C.capture_end()
    assert (x * 3).sum().item() == 12.0                # normal again


def test_frees_of_capture_ids_dropped_after_end():
    x = torch.ones(4, device="rgpu")

    def graph():
        t = x * 3
        u = t + 1
        del t                                          # a FREE inside the template
        return u
    import gc
    u, raw = capture(graph)
    gc.collect()                                       # earlier tests' garbage frees now, not below
    torch.rgpu.synchronize()
    f0 = rgpu.stats()["frees"]
    del u                                              # a local id after the capture: dropped
    gc.collect()
    _C.free(LOCAL | 12345)
    torch.rgpu.synchronize()                           # a FREE of an unknown id would fail here
    assert rgpu.stats()["frees"] == f0
    h = _C.put_blob(template(raw, [x._tid]))           # only x bound: the rest local, all freed
    mem0 = torch.rgpu.memory_allocated()
    call(h, [x._tid])
    assert torch.rgpu.memory_allocated() == mem0
    torch.rgpu.synchronize()


def test_other_threads_record_normally_during_capture():
    x = torch.full((4,), 2.0, device="rgpu")
    seen = {}

    def other():
        seen["v"] = (x * 5).sum().item()               # waits: fine on another thread
        seen["id"] = _C.new_id()
    _C.capture_begin()
    try:
        t = threading.Thread(target=other)
        t.start()
        t.join()
        y = x + 1
    finally:
        raw = _C.capture_end()
    assert seen["v"] == 40.0 and not seen["id"] & LOCAL
    assert y._tid & LOCAL and raw


def test_bad_call_is_an_op_failure():
    x = torch.ones(4, device="rgpu")
    y, raw = capture(lambda: x + 1)
    h = _C.put_blob(template(raw, [x._tid, y._tid, y._st.sid]))
    call(h, [x._tid, _C.new_id()])                     # two bindings for three bind ids
    with pytest.raises(rgpu.RemoteError, match=r"\(rgpu::call\) failed: .*has 3 bind ids, the call gives 2 bindings"):
        torch.rgpu.synchronize()
    # a failing record inside: y's definition collides with x's id
    call(h, [x._tid, x._tid, _C.new_id()])
    with pytest.raises(rgpu.RemoteError, match=r"\(rgpu::call\) failed: template record 0 \(add.Scalar\)"):
        torch.rgpu.synchronize()
    assert (x + 2).sum().item() == 12.0                # the session goes on


PROGRAM = r"""
import struct, torch, rgpu
from rgpu import _C
from rgpu.tensor import Storage, wrap
x = torch.arange(1, 13, dtype=torch.float32).reshape(3, 4).to("rgpu")
_C.capture_begin()
y = (x * 1.5 + 1).sum(dim=1)
raw = _C.capture_end()
binds = [x._tid, y._tid, y._st.sid]
h = _C.put_blob(struct.pack("<IIIIQ", _C.TEMPLATE_MAGIC, 1, 3, 0, 0) + struct.pack("<3Q", *binds) + raw)
outs = []
for i in range(3):
    tid, sid = _C.new_id(), _C.new_id()
    _C.record(_C.OP_CALL, (), (), (h, (x._tid, tid, sid), 0, 0))
    outs.append(wrap(y._key, Storage(sid, y._st.nbytes), tid))
    x.add_(1)
for o in outs:
    print(o.cpu().tolist())
print(sum(o.sum() for o in outs).item())
"""


def test_recorded_trace_with_calls_replays(tmp_path):
    path = tmp_path / "calls.rgt"
    env = dict(os.environ, RGPU_RECORD=str(path), PYTHONPATH=TORCHHOOK)
    env.pop("RGPU_SERVER", None)
    p = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = [eval(l) for l in p.stdout.splitlines()[:3]]
    xc = torch.arange(1, 13, dtype=torch.float32).reshape(3, 4)
    for i, row in enumerate(rows):
        assert row == ((xc + i) * 1.5 + 1).sum(dim=1).tolist()

    def tool(name, *args, code=0):
        r = subprocess.run([os.path.join(BIN, name), *map(str, args)], capture_output=True, text=True, timeout=120)
        assert r.returncode == code, (name, r.returncode, r.stdout, r.stderr)
        return r.stdout
    out = tool("rgpu-replay", path, "--verify", "--backend", "cpu")
    assert "rgpu-replay: ok:" in out and "results verified (bitwise)" in out and "ops failed" not in out
    dump = tool("rgpu-trace", "dump", path)
    calls = [l for l in dump.splitlines() if l.split()[1] == "rgpu::call"]
    assert len(calls) == 3
    assert all(" bindings=3" in l and " template=" in l for l in calls)
    assert "rgpu::call" in tool("rgpu-trace", "ops", path)
    diff = tool("rgpu-diff", path, "--a", "cpu", "--b", "cpu", "--json")
    import json
    d = json.loads(diff)
    assert d["pass"] and d["outputs_compared"] >= 3
    assert any(w["op"] == "rgpu::call" and w["compared"] == 3 for w in d["worst"])
    # a diff that breaks an op inside the template names the CALL
    r = subprocess.run([os.path.join(BIN, "rgpu-diff"), str(path), "--a", "cpu", "--b", "cpu"],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, RGPU_CPU_FAULT="sum.dim_IntList"))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "first difference: op" in r.stdout and "(rgpu::call)" in r.stdout, r.stdout


# A loop of CALLs (an upload and a random op inside the template, Philox
# offsets advanced per call as a compiled graph would) whose server is
# SIGKILLed and restarted on its journal: the results are bitwise those of an
# undisturbed run, so templates and their blobs were journaled and refetched.
LOOP = r"""
import json, os, struct, torch, rgpu
from rgpu import _C
from rgpu import random as rr
from rgpu.tensor import Storage, wrap
torch.manual_seed(0)
w = torch.randn(8, 8, device="rgpu") * 0.5
x = torch.randn(4, 8, device="rgpu")
seed, base = rr.get_state()
_C.capture_begin()
c = torch.full((8,), 0.25).to("rgpu")
y = torch.tanh(x @ w + c) + torch.rand(4, 8, device="rgpu") * 0.01
raw = _C.capture_end()
n_rand = rr.get_state()[1] - base
rr.set_state(seed, base)
h = _C.put_blob(struct.pack("<IIIIQ", _C.TEMPLATE_MAGIC, 1, 4, 0, base) + struct.pack("<4Q", x._tid, w._tid, y._tid, y._st.sid) + raw)
out = []
for i in range(int(os.environ["STEPS"])):
    s, o = rr.get_state()
    rr.set_state(s, o + n_rand)
    tid, sid = _C.new_id(), _C.new_id()
    _C.record(_C.OP_CALL, (), (), (h, (x._tid, w._tid, tid, sid), rr._i64(s), rr._i64(o)))
    x = wrap(y._key, Storage(sid, y._st.nbytes), tid)
    out.append(x.sum().item().hex())
    print("step", i, flush=True)
print(json.dumps({"out": out, "stats": {k: v for k, v in rgpu.stats().items() if isinstance(v, int)}}), flush=True)
"""


def test_calls_survive_a_server_restart_on_its_journal(tmp_path):
    from test_resume import Server, child, finish, restart_during
    steps = "60"
    base = tmp_path / "base"
    base.mkdir()
    srv = Server(base, "--journal", "none")
    try:
        want = finish(child(LOOP, srv.port, srv.token_file, STEPS=steps))
    finally:
        srv.stop()
    assert want["stats"]["calls"] == 60 and want["stats"]["templates"] == 1
    assert len(set(want["out"])) > 50          # the values move (random op, feedback)
    journal = tmp_path / "journal"
    srv = Server(tmp_path, "--journal", str(journal))
    got, _ = restart_during(srv, child(LOOP, srv.port, srv.token_file, STEPS=steps), 20)
    assert got["out"] == want["out"]
    assert "rebuilt from its journal" in srv.log() and got["stats"]["reconnects"] == 1
