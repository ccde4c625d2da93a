"""Checkpoints on the server's host (rgpu.save / rgpu.load; serverfiles.py):
a model's and an Adam optimizer's state_dict through rgpu.save, read back by
a plain torch.load of the file (the pickle byte for byte torch.save's) and by
rgpu.load with almost nothing downloaded; training continued from it equal
to training never stopped; views and tied weights still sharing storage;
the weights-only refusals torch.load makes; a failed save leaving the old
file and no temporary one.

Children and the server are test_server_files.py's (module fixture `files`)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_server_files import PRELUDE, files, run  # noqa: E402,F401  (files: the fixture)

ROUND_TRIP = PRELUDE + """
import io, zipfile
import torch.nn as nn, torch.nn.functional as F

def make():
    return nn.Sequential(nn.Linear(64, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                         nn.Linear(256, 10))

def step(m, opt, b):
    loss = F.cross_entropy(m(b[0].to("rgpu")), b[1].to("rgpu"))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item().hex()

def same(a, b, path="obj"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, path
        assert torch.equal(a.cpu(), b.cpu()), path
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b), path
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    else:
        assert a == b, (path, a, b)

torch.manual_seed(0)
m = make().to("rgpu")
opt = torch.optim.Adam(m.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
batches = [(torch.randn(16, 64, generator=g), torch.randint(10, (16,), generator=g)) for _ in range(6)]
first = [step(m, opt, b) for b in batches[:3]]
ckpt = {"model": m.state_dict(), "opt": opt.state_dict(), "step": 3, "note": "after 3 steps"}
rgpu.save(ckpt, "ckpt/run.pt")
nbytes = sum(v.numel() * v.element_size() for v in m.state_dict().values()) + \\
    sum(t.numel() * t.element_size() for s in opt.state_dict()["state"].values() for t in s.values())

# a plain torch.load on the server's host: weights_only (its default), CPU values
disk = torch.load(C + "/run.pt")
same(ckpt, disk)
assert all(v.device.type == "cpu" for v in disk["model"].values())
assert disk["model"]._metadata == m.state_dict()._metadata
# the pickle is torch.save's own, byte for byte, and the records torch.save writes
buf = io.BytesIO()
torch.save(disk, buf)
ours, theirs = zipfile.ZipFile(C + "/run.pt"), zipfile.ZipFile(buf)
assert ours.testzip() is None
assert [n.split("/", 1)[1] for n in ours.namelist()] == [n.split("/", 1)[1] for n in theirs.namelist()]
assert ours.namelist()[0] == "run/data.pkl" and ours.read("run/data.pkl") == theirs.read("archive/data.pkl")
for n in ours.namelist():
    if n.startswith("run/data/"):
        assert ours.read(n) == theirs.read("archive/" + n[4:]), n
assert all(i.compress_type == 0 for i in ours.infolist())
# the same entries give the same bytes
os.makedirs(C + "/again")
rgpu.save(ckpt, "ckpt/again/run.pt")
assert open(C + "/run.pt", "rb").read() == open(C + "/again/run.pt", "rb").read()

rest = [step(m, opt, b) for b in batches[3:]]           # training never stopped

torch.manual_seed(5)
m2 = make().to("rgpu")
opt2 = torch.optim.Adam(m2.parameters(), lr=1e-2)
b0 = rgpu.stats()["bytes_in"]
back = rgpu.load("ckpt/run.pt")
loaded_in = rgpu.stats()["bytes_in"] - b0
assert all(v.device.type == "rgpu" for v in back["model"].values())
same(disk, back)
m2.load_state_dict(back["model"])
opt2.load_state_dict(back["opt"])
rest2 = [step(m2, opt2, b) for b in batches[3:]]
assert rest2 == rest, (rest, rest2)

cpu = rgpu.load("ckpt/run.pt", map_location="cpu")
assert all(v.device.type == "cpu" for v in cpu["model"].values())
same(disk, cpu)
print(json.dumps({"nbytes": nbytes, "loaded_in": loaded_in, "pkl": len(ours.read("run/data.pkl"))}))
"""


def test_model_and_optimizer_round_trip(files):
    r = run(ROUND_TRIP, files)
    print(f"checkpoint tensors {r['nbytes']} bytes; rgpu.load downloaded {r['loaded_in']} "
          f"(its pickle {r['pkl']})")
    assert r["nbytes"] > 500_000
    assert r["loaded_in"] < r["pkl"] + 8192, r        # the pickle, the zip's index, the replies


SHARING = PRELUDE + """
import argparse, pickle, zipfile
import torch.nn as nn
base = torch.arange(12.).to("rgpu")
a = base.view(3, 4)
v = a[:, 1::2]
tied = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
tied[1].weight = tied[0].weight
tied = tied.to("rgpu")
w0 = tied[0].weight.detach().cpu()
p = nn.Parameter(torch.ones(3).to("rgpu"))
cplx = (torch.arange(4.) + 1j).to("rgpu")
obj = {"a": a, "v": v, "tied": tied.state_dict(), "c": torch.arange(3).to("rgpu"), "p": p, "cpu": torch.arange(5),
       "conj": cplx.conj(), "half": torch.ones(2, 2, dtype=torch.float16).to("rgpu").t(), "empty": torch.zeros(0).to("rgpu")}
rgpu.save(obj, "ckpt/views.pt")
names = zipfile.ZipFile(C + "/views.pt").namelist()
# one record per storage: base (a, v), the tied weight, c, p, the CPU tensor, conj's resolved copy, half, empty
assert sum(n.startswith("views/data/") for n in names) == 8, names
disk = torch.load(C + "/views.pt")
assert disk["a"].untyped_storage().data_ptr() == disk["v"].untyped_storage().data_ptr()
for name, back in (("disk", disk), ("rgpu", rgpu.load("ckpt/views.pt"))):
    for k in ("a", "v", "c", "cpu", "half", "empty"):
        assert torch.equal(back[k].cpu(), obj[k].cpu()) and back[k].stride() == obj[k].stride(), (name, k)
    assert torch.equal(back["conj"].cpu(), cplx.conj().cpu()) and not back["conj"].is_conj()
    assert isinstance(back["p"], nn.Parameter) and back["p"].requires_grad
    if name == "rgpu":
        assert all(t.device.type == "rgpu" for t in back.values() if isinstance(t, torch.Tensor))
        back["a"].add_(100)                          # a view of the same server storage
        assert torch.equal(back["v"].cpu(), v.cpu() + 100)
        t0, t1 = back["tied"]["0.weight"], back["tied"]["1.weight"]
        t0.mul_(2)
        assert torch.equal(t1.cpu(), 2 * w0)

# weights_only: what torch.load refuses, rgpu.load refuses
rgpu.save({"ns": argparse.Namespace(a=1), "t": torch.ones(2).to("rgpu")}, "ckpt/unsafe.pt")
expect(pickle.UnpicklingError, lambda: torch.load(C + "/unsafe.pt"), "Namespace", remote=False)
expect(pickle.UnpicklingError, lambda: rgpu.load("ckpt/unsafe.pt"), "weights only", "Namespace", remote=False)
back = rgpu.load("ckpt/unsafe.pt", weights_only=False)
assert back["ns"].a == 1 and back["t"].device.type == "rgpu" and back["t"].cpu().tolist() == [1.0, 1.0]
with torch.serialization.safe_globals([argparse.Namespace]):
    assert rgpu.load("ckpt/unsafe.pt")["ns"].a == 1
# a file torch.save wrote on the server's host (its own zip writer's layout)
torch.save({"x": torch.arange(6).view(2, 3), "y": [torch.ones(2, dtype=torch.bfloat16)]}, C + "/theirs.pt")
back = rgpu.load("ckpt/theirs.pt")
assert back["x"].device.type == "rgpu" and back["x"].cpu().tolist() == [[0, 1, 2], [3, 4, 5]]
assert back["y"][0].dtype == torch.bfloat16 and back["y"][0].cpu().tolist() == [1.0, 1.0]
expect(ValueError, lambda: rgpu.load("ckpt/theirs.pt", map_location="cuda"), "map_location", remote=False)
expect(RuntimeError, lambda: rgpu.load("data/float32.bin"), "data/float32.bin")       # not a zip
print(json.dumps({}))
"""


def test_views_tied_weights_and_weights_only(files):
    run(SHARING, files)


FAILED_SAVE = PRELUDE + """
import pickle
rgpu.save({"x": torch.ones(3).to("rgpu")}, "ckpt/keep.pt")
before = open(C + "/keep.pt", "rb").read()
os.makedirs(C + "/afolder")
listing = sorted(os.listdir(C))
# a poisoned tensor: its FROM_FILE carries an identity that is not the file's
ph, st = rgpu._C.put_blob(b"data/float32.bin"), rgpu.stat("data/float32.bin")
bad = sf._from_file(ph, (st.st_size, bytes(16)), torch.float32, (4,), 0)
expect(rgpu.RemoteError, rgpu.synchronize, "server file changed")
msg = expect(rgpu.RemoteError, lambda: rgpu.save({"x": torch.zeros(2).to("rgpu"), "bad": bad}, "ckpt/keep.pt"),
             "rgpu::save_zip")
assert "poison" in msg.lower(), msg
# an object pickle refuses: nothing reaches the server
expect((pickle.PicklingError, AttributeError, TypeError), lambda: rgpu.save({"f": lambda: 0}, "ckpt/keep.pt"),
       remote=False)
expect(NotADirectoryError, lambda: rgpu.save({"x": torch.ones(1).to("rgpu")}, "ckpt/keep.pt/x"), "keep.pt")
expect(IsADirectoryError, lambda: rgpu.save({"x": torch.ones(1).to("rgpu")}, "ckpt/afolder"), "ckpt/afolder")
assert open(C + "/keep.pt", "rb").read() == before and sorted(os.listdir(C)) == listing, os.listdir(C)
assert rgpu.load("ckpt/keep.pt")["x"].cpu().tolist() == [1.0, 1.0, 1.0]
print(json.dumps({}))
"""


def test_failed_save_keeps_the_old_file(files):
    run(FAILED_SAVE, files)
