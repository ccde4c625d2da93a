"""Files on the server's host (rgpu.listdir, stat, from_file; serverfiles.py):
values against numpy's reading of the same bytes, every refusal with its
exception type and the server's message, hostile paths that never read
outside the exposed folders, the embedded server taking RGPU_REMOTE_DATA
from the client's environment, the nanoGPT pattern (a uint16 train.bin on
the server, batches gathered there: the same losses as uploading them, and
only records on the link), a journal rebuild and rgpu-replay refusing a file
that changed, and tools/models/vision_data.py's loader against the same
computation on the CPU.

Each case runs in a child process (a process connects once) against an
rgpu-server started here with --data data=<tmp>/data and --data-rw
ckpt=<tmp>/ckpt (test_resume's Server); the child shares this machine, so it
reads the folders directly to compare. test_server_checkpoints.py shares the
fixture."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_resume import TORCHHOOK, TOOLS, Server, child, finish, rest, until_step  # noqa: E402

REPLAY = os.path.join(HERE, "..", "..", "build", "bin", "rgpu-replay")
SECRET = b"TOPSECRET-" * 10000          # the outside file: none of it may reach a client

# dtypes from_file reads, with numpy's name for each (None: numpy has none)
DTYPES = [("float32", "f4"), ("float64", "f8"), ("float16", "f2"), ("bfloat16", None), ("int64", "i8"),
          ("int32", "i4"), ("int16", "i2"), ("int8", "i1"), ("uint8", "u1"), ("bool", "?"), ("complex64", "c8")]


class Folders:
    """data/ (read-only), ckpt/ (read-write) and outside/ (not exposed) under tmp."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.data, self.ckpt, self.outside = (str(tmp / n) for n in ("data", "ckpt", "outside"))
        for d in (self.data, self.ckpt, self.outside, self.data + "/sub", self.data + "/swap/sub"):
            os.makedirs(d)
        rng = np.random.default_rng(0)
        for name, np_name in DTYPES:
            raw = (rng.integers(0, 2, 4096, dtype=np.uint8) if name == "bool"
                   else rng.integers(0, 256, 4096, dtype=np.uint8))
            if name in ("float16", "bfloat16", "float32", "float64", "complex64"):
                # finite values (NaN bits would still compare, but keep them readable)
                raw = rng.standard_normal(4096 // 4, dtype=np.float32).view(np.uint8) if name != "float16" else \
                    rng.standard_normal(2048).astype(np.float16).view(np.uint8)
            raw.tofile(f"{self.data}/{name}.bin")
        np.array([0, 1, 32767, 32768, 40000, 65535, 7, 12345], dtype=np.uint16).tofile(self.data + "/u16.bin")
        np.array([0, 2**31 - 1, 2**31, 2**32 - 1], dtype=np.uint32).tofile(self.data + "/u32.bin")
        open(self.data + "/odd.bin", "wb").write(bytes(range(10)))
        open(self.data + "/copy.bin", "wb").write(open(self.data + "/float32.bin", "rb").read())
        open(self.data + "/sub/x.bin", "wb").write(b"x" * 64)
        open(self.data + "/swap/sub/x.bin", "wb").write(b"y" * 64)
        open(self.outside + "/secret.bin", "wb").write(SECRET)
        os.symlink(self.outside + "/secret.bin", self.data + "/link_out")
        os.symlink(self.outside, self.data + "/dir_out")

    def args(self):
        return ["--data", "data=" + self.data, "--data-rw", "ckpt=" + self.ckpt]

    def env(self):
        return {"DATA_DIR": self.data, "CKPT_DIR": self.ckpt, "OUT_DIR": self.outside}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(Folders, Server): one server for the module, no journal."""
    f = Folders(tmp_path_factory.mktemp("files"))
    srv = Server(f.tmp, "--journal", "none", *f.args())
    yield f, srv
    srv.stop()


def run(code, files, **env):
    """Runs code in a child connected to the module's server; returns the JSON of its last line."""
    f, srv = files
    return finish(child(code, srv.port, srv.token_file, **f.env(), **env), timeout=120)


# Shared by the children: expect(cls, fn, *words) calls fn, which must raise
# cls (also an rgpu.RemoteError when it is a server's refusal) with every one
# of words in its message and none of the outside file's bytes.
PRELUDE = """
import json, os, sys
import numpy as np
import torch
import rgpu
from rgpu import serverfiles as sf
D, C, OUT = os.environ["DATA_DIR"], os.environ["CKPT_DIR"], os.environ["OUT_DIR"]

def expect(cls, fn, *words, remote=True):
    try:
        fn()
    except cls as e:
        msg = str(e)
        assert all(w in msg for w in words), (cls, words, msg)
        assert "TOPSECRET" not in msg, msg
        assert not remote or isinstance(e, rgpu.RemoteError), type(e).__mro__
        assert not remote or (isinstance(e.status, str) and e.status.startswith("RGPU_ERR_")), e.status
        assert not isinstance(e, OSError) or e.status == "RGPU_ERR_PATH", (type(e), e.status)
        return msg
    raise AssertionError(f"no {cls.__name__} from {fn}")
"""


def test_listdir_and_stat(files):
    r = run(PRELUDE + """
assert rgpu.listdir("") == ["ckpt", "data"], rgpu.listdir("")
assert rgpu.listdir("data") == sorted(os.listdir(D)), (rgpu.listdir("data"), os.listdir(D))
assert rgpu.listdir("data/sub/") == ["x.bin"]
st, os_st = rgpu.stat("data/float32.bin"), os.stat(D + "/float32.bin")
assert st.is_file() and not st.is_dir() and not st.writable and st.hash is None, st
assert (st.st_size, st.st_mtime_ns) == (os_st.st_size, os_st.st_mtime_ns) and st.st_mtime == os_st.st_mtime_ns / 1e9
h = rgpu.stat("data/float32.bin", hash=True).hash
assert len(h) == 32 and h == rgpu.stat("data/copy.bin", hash=True).hash != rgpu.stat("data/int32.bin", hash=True).hash
assert rgpu.stat("data/sub").is_dir() and rgpu.stat("data/sub", hash=True).hash is None
assert rgpu.stat("ckpt").writable and rgpu.stat("ckpt").is_dir()
ents = {e.name: e for e in rgpu.scandir("data")}
assert ents["sub"].is_dir() and ents["sub"].path == "data/sub" and ents["u16.bin"].stat().st_size == 16
assert ents["float32.bin"].is_file() and ents["float32.bin"].stat().st_mtime_ns == os_st.st_mtime_ns
# a symlink leading out is listed, but as "other", with nothing of its target
assert ents["link_out"].stat().kind == 3 and ents["link_out"].stat().st_size == 0, ents["link_out"].stat()
print(json.dumps({"bytes_in": rgpu.stats()["bytes_in"]}))
""", files)
    assert r["bytes_in"] < 20000


def test_from_file_equals_numpy(files):
    run(PRELUDE + f"""
DTYPES = {DTYPES!r}
n = 0
for name, np_name in DTYPES:
    dtype, path = getattr(torch, name), D + f"/{{name}}.bin"
    raw = open(path, "rb").read()
    size = dtype.itemsize
    for offset, shape in [(0, None), (8, None), (16, (3, 5)), (24, 7), (5, (2, 2, 2)), (4096 - 2 * size, (2,))]:
        t = rgpu.from_file("data/" + name + ".bin", dtype, shape, offset)
        want_shape = ((4096 - offset) // size,) if shape is None else ((shape,) if isinstance(shape, int) else shape)
        if shape is None and (4096 - offset) % size:
            continue
        nbytes = int(np.prod(want_shape)) * size
        want = raw[offset:offset + nbytes]      # compared as bytes: a misaligned float may be a NaN
        if np_name is not None:                 # what numpy's memmap reads
            mm = np.memmap(path, np_name, "r", offset, shape)
            assert mm.shape == want_shape and np.array(mm).tobytes() == want
        got = t.cpu()
        assert t.device.type == "rgpu" and got.dtype == dtype and tuple(got.shape) == want_shape, (name, got.shape)
        assert got.view(torch.uint8).numpy().tobytes() == want, (name, offset, shape)
        n += 1
# unsigned types the server lacks come back widened, values exact
u16 = rgpu.from_file("data/u16.bin", torch.uint16)
assert u16.dtype == torch.int32 and u16.cpu().tolist() == np.fromfile(D + "/u16.bin", np.uint16).tolist()
assert u16[3:6].long().cpu().tolist() == [32768, 40000, 65535]
u32 = rgpu.from_file("data/u32.bin", torch.uint32, (2, 2))
assert u32.dtype == torch.int64 and u32.cpu().tolist() == np.fromfile(D + "/u32.bin", np.uint32).reshape(2, 2).tolist()
# numpy's rules for what does not fit
expect(ValueError, lambda: rgpu.from_file("data/odd.bin", torch.int32), "odd.bin", "not a multiple", remote=False)
expect(ValueError, lambda: rgpu.from_file("data/odd.bin", torch.int16, offset=1), "not a multiple", remote=False)
assert rgpu.from_file("data/odd.bin", torch.int16, offset=2).cpu().tolist() == \\
    np.fromfile(D + "/odd.bin", np.int16, offset=2).tolist()
expect(ValueError, lambda: rgpu.from_file("data/float32.bin", torch.float32, (1025,)), "[0, 4100)",
       "data/float32.bin", "which has 4096 bytes", remote=False)
expect(ValueError, lambda: rgpu.from_file("data/float32.bin", torch.float32, 2, offset=4090), remote=False)
expect(ValueError, lambda: rgpu.from_file("data/float32.bin", offset=-1), "negative", remote=False)
expect(ValueError, lambda: rgpu.from_file("data/float32.bin", torch.float32, (2, -1)), "negative", remote=False)
expect(TypeError, lambda: rgpu.from_file("data/float32.bin", torch.uint64), "uint64", remote=False)
# the server's own checks, under a client that skips its own: a read past the
# end, and an identity that is not the file's, each fail their op at the next wait
ph, st = rgpu._C.put_blob(b"data/float32.bin"), rgpu.stat("data/float32.bin", hash=True)
ident = (st.st_size, bytes.fromhex(st.hash))
past = sf._from_file(ph, ident, torch.float32, (2000,), 0)
expect(rgpu.RemoteError, lambda: past.sum().item(), "rgpu::from_file", "bytes [0, 8000)", "data/float32.bin",
       "4096 bytes")
wrong = sf._from_file(ph, (st.st_size, bytes(16)), torch.float32, (4,), 0)
expect(rgpu.RemoteError, lambda: wrong.sum().item(), "server file changed", "data/float32.bin")
assert rgpu.from_file("data/float32.bin", torch.float32, 3).cpu().numpy().tobytes() == open(D + "/float32.bin", "rb").read(12)
print(json.dumps({{"cases": n}}))
""", files)


def test_refusals_and_hostile_paths(files):
    """Missing, folder, not a folder, not exposed, escapes ("..", absolute, a
    symlink to a file or folder outside, a sub-folder swapped for a symlink
    to outside between two reads), writes into the read-only folder: each
    refused with its exception and the server's message, none of the outside
    file's bytes in any message or through the link."""
    r = run(PRELUDE + """
b0 = rgpu.stats()["bytes_in"]
for fn in (rgpu.stat, rgpu.from_file, rgpu.load, rgpu.listdir):
    expect(FileNotFoundError, lambda: fn("data/nope.bin"), 'server path "data/nope.bin": no such file')
    expect(FileNotFoundError, lambda: fn("data/nope/deeper.bin"), "data/nope/deeper.bin")
    expect(PermissionError, lambda: fn("nope/x.bin"), 'no exposed folder named "nope"', "exposed: data, ckpt")
for fn in (rgpu.from_file, rgpu.load):
    expect(IsADirectoryError, lambda: fn("data/sub"), "data/sub", "folder")
expect(NotADirectoryError, lambda: rgpu.listdir("data/float32.bin"), "data/float32.bin", "not a folder")
expect(NotADirectoryError, lambda: rgpu.stat("data/float32.bin/x"), "not a folder")
hostile = ["../outside/secret.bin", "data/../../outside/secret.bin", "data/sub/../../outside/secret.bin",
           "/etc/passwd", OUT + "/secret.bin", "data/link_out", "data/dir_out/secret.bin", "data//float32.bin",
           "data/./float32.bin", "data/sub/x.bin\\n", "data/" + "a" * 300, "/".join(["data"] + ["d"] * 70)]
for p in hostile:
    for fn in (rgpu.stat, rgpu.from_file, rgpu.load):
        assert "server path" in expect(PermissionError, lambda: fn(p))
expect(PermissionError, lambda: rgpu.listdir("data/dir_out"), "data/dir_out", "outside")
expect(PermissionError, lambda: rgpu.from_file("data/link_out"), "data/link_out", "outside")
expect(PermissionError, lambda: rgpu.from_file("../x"), '".." is not allowed')
expect(PermissionError, lambda: rgpu.from_file("/etc/passwd"), "absolute paths are not allowed")
expect(TypeError, lambda: rgpu.stat(b"data/float32.bin"), "str", remote=False)
# mid-run: a folder read once is swapped for a symlink to outside; the next read is refused
assert rgpu.from_file("data/swap/sub/x.bin").cpu().numpy().tobytes() == b"y" * 64
os.rename(D + "/swap/sub", D + "/swap/real")
os.symlink(OUT, D + "/swap/sub")
for p in ("data/swap/sub/secret.bin", "data/swap/sub"):
    expect(PermissionError, lambda: rgpu.from_file(p), p)
    expect(PermissionError, lambda: rgpu.stat(p), p)
expect(PermissionError, lambda: rgpu.listdir("data/swap/sub"), "data/swap/sub")
assert rgpu.from_file("data/swap/real/x.bin").cpu().numpy().tobytes() == b"y" * 64
# nothing is written into the read-only folder, nor outside
before = sorted(os.listdir(D)), sorted(os.listdir(OUT))
t = torch.arange(4.).to("rgpu")
expect(PermissionError, lambda: rgpu.save({"t": t}, "data/x.pt"), '"data" is read-only', "--data-rw")
expect(PermissionError, lambda: rgpu.save({"t": t}, "data/sub/x.pt"), "read-only")
expect(PermissionError, lambda: rgpu.save({"t": t}, "ckpt/../data/x.pt"), '".." is not allowed')
expect(PermissionError, lambda: rgpu.save({"t": t}, OUT + "/x.pt"), "absolute")
assert (sorted(os.listdir(D)), sorted(os.listdir(OUT))) == before
assert t.sum().item() == 6.0                  # the session goes on
print(json.dumps({"bytes_in": rgpu.stats()["bytes_in"] - b0}))
""", files)
    assert r["bytes_in"] < 40000, r          # messages only: the outside file alone is 100 kB


EMBEDDED = """
import json, sys, torch, rgpu
try:
    out = {"list": rgpu.listdir(""), "data": rgpu.listdir("data")}
except PermissionError as e:
    out = {"err": str(e)}
print(json.dumps(out))
"""


def test_embedded_server_inherits_rgpu_remote_data(tmp_path):
    """`RGPU_REMOTE_DATA=ro:data=DIR python -c ...`: the server the client
    starts (no RGPU_SERVER) exposes DIR; without the variable nothing is."""
    (tmp_path / "x.bin").write_bytes(b"1234")
    env = dict(os.environ, PYTHONPATH=TORCHHOOK, RGPU_BACKEND="cpu")
    for k in ("RGPU_SERVER", "RGPU_REMOTE_DATA"):
        env.pop(k, None)
    outs = []
    for extra in ({"RGPU_REMOTE_DATA": f"ro:data={tmp_path}"}, {}):
        p = subprocess.run([sys.executable, "-c", EMBEDDED], env=dict(env, **extra), capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr[-3000:]
        outs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    assert outs[0] == {"list": ["data"], "data": ["x.bin"]}, outs[0]
    assert "no folder is exposed (rgpu-server --data DIR / --data-rw DIR)" in outs[1]["err"], outs[1]


NANOGPT = PRELUDE + """
from models.gpt import GPT, GPTConfig
B, T, STEPS = 64, 32, 6
cfg = GPTConfig.tiny()
arr = np.memmap(D + "/train.bin", np.uint16, "r")

def host_batch(ix):
    x = np.stack([arr[i:i + T].astype(np.int64) for i in ix.tolist()])
    y = np.stack([arr[i + 1:i + 1 + T].astype(np.int64) for i in ix.tolist()])
    return torch.from_numpy(x), torch.from_numpy(y)

def train(mode):
    torch.manual_seed(0)
    model = GPT(cfg).to("rgpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(7)
    if mode == "server":        # nanoGPT's get_batch, the data on the server
        data = rgpu.from_file("data/train.bin", torch.uint16)
        n, ar = data.shape[0], torch.arange(T, device="rgpu")
    else:
        n = len(arr)
    if mode == "fixed":         # records only: one batch uploaded before the loop
        fx, fy = (t.to("rgpu") for t in host_batch(torch.randint(n - T - 1, (B,), generator=g)))
    losses, per_step = [], []
    for i in range(STEPS):
        b0 = rgpu.stats()["bytes_out"]
        ix = torch.randint(n - T - 1, (B,), generator=g)
        if mode == "server":
            idx = ix.to("rgpu")[:, None] + ar
            x, y = data[idx].long(), data[idx + 1].long()
        elif mode == "upload":
            x, y = (t.to("rgpu") for t in host_batch(ix))
        else:
            x, y = fx, fy
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item().hex())
        per_step.append(rgpu.stats()["bytes_out"] - b0)
    return losses, sum(per_step[1:]) / (STEPS - 1)

def wire(fn):
    rgpu.synchronize()
    b0 = rgpu.stats()["bytes_out"]
    fn()
    rgpu.synchronize()
    return rgpu.stats()["bytes_out"] - b0

out = {m: train(m) for m in ("server", "upload", "fixed")}
x, y = host_batch(torch.arange(B) * 97)
out["batch_wire"] = wire(lambda: (x.to("rgpu"), y.to("rgpu"))) - wire(lambda: None)
print(json.dumps(out))
"""


def test_nanogpt_pattern_trains_with_records_only_on_the_link(files):
    """A uint16 train.bin on the server; per step B offsets go up and the
    batch is gathered there. The losses equal the loop that uploads its
    batches (bitwise: the same server). The bytes the client sends per step
    are a loop's with no data at all (records only) plus the B offsets and
    the gather's few records; the uploading loop's are that plus the batch's
    own wire bytes (zstd: 65 symbols in int64s compress ~8x), so the server
    loop sends less by most of them."""
    f, _ = files
    sys.path.insert(0, TOOLS)
    from models.data import train_val
    train, _ = train_val(20000)
    assert int(train.max()) < 65
    train.numpy().astype(np.uint16).tofile(f.data + "/train.bin")
    r = run(NANOGPT, files)
    (srv_losses, srv_b), (up_losses, up_b), (_, fixed_b) = r["server"], r["upload"], r["fixed"]
    assert srv_losses == up_losses, (srv_losses, up_losses)
    print(f"bytes_out per step: server data {srv_b:.0f}, uploading {up_b:.0f}, records only {fixed_b:.0f}; "
          f"the batch's wire bytes {r['batch_wire']} (raw {2 * 64 * 32 * 8})")
    overhead = 64 * 8 + 1500                        # the offsets and the gather's records
    assert srv_b - fixed_b <= overhead, r
    assert up_b - fixed_b >= 0.8 * r["batch_wire"] > 1000, r
    assert up_b - srv_b >= r["batch_wire"] - overhead, r


RESUME = PRELUDE + """
x = rgpu.from_file("data/v.bin", torch.float32)
y = x * 2
print("sum", y.sum().item(), flush=True)
print("step 0", flush=True)
sys.stdin.readline()                  # the server is killed and restarted here
try:
    print(json.dumps({"ok": (y + x).sum().item()}))
except rgpu.RemoteError as e:
    print(json.dumps({"err": str(e), "lost": isinstance(e, rgpu.SessionLost)}))
"""


@pytest.mark.parametrize("change", [False, True], ids=["unchanged", "changed"])
def test_journal_rebuild_refuses_a_changed_file(tmp_path, change):
    """SIGKILL the server after a from_file and a few ops, restart it on its
    journal: unchanged, the session resumes with the values; with one byte of
    the file changed (same size) the resume is refused, naming the file."""
    f = Folders(tmp_path)
    v = np.arange(256, dtype=np.float32)
    v.tofile(f.data + "/v.bin")
    srv = Server(f.tmp, "--journal", str(tmp_path / "journal"), "--grace", "30", *f.args())
    p = child(RESUME, srv.port, srv.token_file, **f.env())
    try:
        until_step(p, 0)
        srv.kill(signal.SIGKILL)
        if change:
            with open(f.data + "/v.bin", "r+b") as fh:
                fh.seek(100)
                fh.write(b"\x01")
        srv.start()
        out, err = rest(p, "go\n", timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
        srv.stop()
    assert p.returncode == 0, err[-3000:]
    r = json.loads(out.strip().splitlines()[-1])
    if not change:
        assert r == {"ok": float(3 * v.sum())}, r
    else:
        assert r.get("lost") is True and 'server file "data/v.bin" changed since it was recorded' in r["err"], r


REPLAYED = PRELUDE + """
x = rgpu.from_file("data/v.bin", torch.float32, (16, 16))
w = torch.ones(16, 4, device="rgpu")
y = (x @ w).relu()
print(json.dumps({"sum": y.sum().item()}))
rgpu.save({"y": y, "x": x}, "ckpt/replayed.pt")
print(json.dumps({"sum": y.sum().item()}))
"""


def test_replay_verifies_and_refuses_a_changed_file(tmp_path):
    """rgpu-replay --verify of a --record trace that read a server file and
    saved a checkpoint: bitwise with --data (the checkpoint's zip hashed, not
    written); after the file changed, a nonzero exit naming the file."""
    f = Folders(tmp_path)
    np.arange(256, dtype=np.float32).tofile(f.data + "/v.bin")
    trace = str(tmp_path / "run.rgt")
    srv = Server(f.tmp, "--journal", "none", *f.args())
    try:
        finish(child(REPLAYED, srv.port, srv.token_file, RGPU_RECORD=trace, **f.env()), timeout=120)
    finally:
        srv.stop()
    ck = os.path.join(f.ckpt, "replayed.pt")
    st = os.stat(ck)
    cmd = [REPLAY, trace, "--backend", "cpu", "--verify", "--quiet", "--data", "data=" + f.data,
           "--data-rw", "ckpt=" + f.ckpt]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert os.stat(ck).st_mtime_ns == st.st_mtime_ns and sorted(os.listdir(f.ckpt)) == ["replayed.pt"]
    with open(f.data + "/v.bin", "r+b") as fh:
        fh.seek(8)
        fh.write(b"\x07")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "data/v.bin" in p.stdout + p.stderr, p.stdout + p.stderr


VISION = PRELUDE + """
from models import vision_data as vd
N, H, W = 50, 12, 10
g = torch.Generator().manual_seed(3)
imgs = torch.randint(0, 256, (N, 3, H, W), dtype=torch.uint8, generator=g)
labels = torch.randint(0, 10, (N,), generator=g)
vd.pack(C + "/vision", imgs, labels)
loader = vd.ServerImages("ckpt/vision", mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3), pad=4)
assert (loader.n, loader.h, loader.w) == (N, H, W)
for step in range(3):
    draws = loader.draw(16, g)                       # CPU draws, seeded
    x, y = loader.batch(draws)
    xc, yc = vd.augment(imgs, labels, *draws, loader.mean_cpu, loader.std_cpu, 4)
    assert x.device.type == "rgpu" and x.dtype == torch.float32 and tuple(x.shape) == (16, 3, H, W)
    assert torch.equal(y.cpu(), yc) and torch.equal(x.cpu(), xc), (x.cpu() - xc).abs().max()
# the CPU computation itself, by hand for one sample: crop window and flip
idx, dy, dx, flip = draws
k = int(flip.nonzero()[0]) if flip.any() else 0
pad = torch.nn.functional.pad(imgs[idx[k]].float(), (4, 4, 4, 4))
win = pad[:, int(dy[k]):int(dy[k]) + H, int(dx[k]):int(dx[k]) + W]
if flip[k]:
    win = win.flip(-1)
want = (win / 255 - torch.tensor([0.5, 0.4, 0.3])[:, None, None]) / torch.tensor([0.2, 0.25, 0.3])[:, None, None]
torch.testing.assert_close(xc[k], want, rtol=0, atol=1e-6)
print(json.dumps({"flips": int(flip.sum())}))
"""


def test_vision_loader_on_the_server_equals_cpu(files):
    r = run(VISION, files)
    assert 0 < r["flips"] < 16
