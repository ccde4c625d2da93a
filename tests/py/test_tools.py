"""rgpu-replay, rgpu-diff and rgpu-trace on traces recorded by real torch programs.

A child python records a small computation with RGPU_RECORD (and, for one test,
through an rgpu-server --record); the tools then replay, verify, diff and list
it, and must refuse damaged copies with exit 2 and one line on stderr.
The binaries come from $RGPU_BIN (e.g. build-asan/bin), else build/bin."""
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
TORCHHOOK = os.path.join(REPO, "torchhook")
BIN = os.environ.get("RGPU_BIN") or os.path.join(REPO, "build", "bin")

PROGRAM = r"""
import torch, rgpu
a = torch.arange(1, 13, dtype=torch.float32).reshape(3, 4).to("rgpu")   # upload
w = torch.full((3, 4), 1.5, device="rgpu")
c = a * w                         # mul.Tensor: the op the fault tests break
d = c * 3.0 + 1                   # downstream of it
e = d.sum(dim=1)
print(e.cpu().tolist())
print(d.mean().item())
again = torch.arange(1, 13, dtype=torch.float32).reshape(3, 4).to("rgpu")  # same bytes again
print((again - a).sum().item())
f = (d / 7).sum()
print(f.item())
"""


def tool(name, *args, env=None, check_code=None):
    e = dict(os.environ)
    e.pop("RGPU_CPU_FAULT", None)
    if env:
        e.update(env)
    p = subprocess.run([os.path.join(BIN, name), *map(str, args)], capture_output=True, text=True, env=e,
                       timeout=120)
    assert p.returncode >= 0, f"{name} died of signal {-p.returncode}: {p.stderr}"
    assert "runtime error" not in p.stderr and "Sanitizer" not in p.stderr, p.stderr
    if check_code is not None:
        assert p.returncode == check_code, (p.returncode, p.stdout, p.stderr)
    return p


def record(path, extra_env=None):
    env = dict(os.environ, RGPU_RECORD=str(path), PYTHONPATH=TORCHHOOK)
    env.pop("RGPU_SERVER", None)
    if extra_env:
        env.update(extra_env)
    p = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("tools") / "run.rgt"
    out = record(path)
    assert "[" in out
    return path


def dump_lines(path):
    p = tool("rgpu-trace", "dump", path, check_code=0)
    return p.stdout.splitlines()


def op_index(path, name):
    for line in dump_lines(path):
        idx, op = line.split()[:2]
        if op == name:
            return int(idx)
    raise AssertionError(f"no {name} in the trace")


def copy_with(trace, tmp_path, name, sql):
    p = tmp_path / f"{name}.rgt"
    shutil.copy(trace, p)
    db = sqlite3.connect(p)
    db.executescript(sql)
    db.commit()
    db.close()
    return p


# --- rgpu-replay ------------------------------------------------------------

def test_replay_verify_passes_with_summary(trace):
    p = tool("rgpu-replay", trace, "--verify", "--backend", "cpu", check_code=0)
    line = p.stdout.strip().splitlines()[-1]
    assert re.match(r"rgpu-replay: ok: \d+ ops in [\d.]+ s \(.* ops/s\) on cpu;", line), line
    assert "results verified (bitwise)" in line
    n_results = sqlite3.connect(trace).execute("select count(*) from results").fetchone()[0]
    assert n_results >= 4
    assert f"; {n_results} results verified" in line
    # auto picks some backend and still verifies (within tolerance when it is not cpu)
    tool("rgpu-replay", trace, "--verify", check_code=0)
    # --quiet: nothing on stdout
    assert tool("rgpu-replay", trace, "--verify", "--quiet", "--backend", "cpu", check_code=0).stdout == ""


def test_replay_profile_counts_every_record(trace):
    """--profile: one row per op that ran, its record count equal to the
    trace's (rgpu-trace dump), shares summing to ~100% of a total that is
    at most the wall time; results still verified."""
    p = tool("rgpu-replay", trace, "--verify", "--profile", "--backend", "cpu", check_code=0)
    out = p.stdout.splitlines()
    head = [i for i, l in enumerate(out) if l.startswith("rgpu-replay: profile: ")]
    assert len(head) == 1, p.stdout
    m = re.match(r"rgpu-replay: profile: ([\d.]+) ms in records of ([\d.]+) ms of wall time", out[head[0]])
    total, wall = float(m.group(1)), float(m.group(2))
    assert 0 < total <= wall + 1e-3
    rows = {}
    for l in out[head[0] + 2:]:
        op, n, ms, us, share = l.split()
        rows[op] = (int(n), float(ms), float(us), float(share.rstrip("%")))
    counts = {}
    for l in dump_lines(trace):
        op = l.split()[1]
        counts[op] = counts.get(op, 0) + 1
    assert rows and all(rows[op][0] == counts[op] for op in rows), (rows, counts)
    assert "mul.Tensor" in rows and "sum.dim_IntList" in rows, rows
    assert 99.0 <= sum(r[3] for r in rows.values()) <= 100.5
    assert abs(sum(r[1] for r in rows.values()) - total) <= 0.01 * total + 0.01 * len(rows)
    for n, ms, us, share in rows.values():
        assert abs(us * n - ms * 1e3) <= 0.01 * ms * 1e3 + 0.005 * n + 0.5   # both rounded
    assert "results verified" in p.stdout
    # without --profile: no table
    assert "profile:" not in tool("rgpu-replay", trace, "--backend", "cpu", check_code=0).stdout


def test_replay_profile_timeline_json(trace, tmp_path):
    """--profile FILE.json: a Chrome trace with one complete event per record,
    named by its op, in op-index order, non-overlapping and inside the run;
    the ops and counts are the table's (rgpu-trace dump's)."""
    out = tmp_path / "timeline.json"
    p = tool("rgpu-replay", trace, "--profile", out, "--backend", "cpu", check_code=0)
    assert "rgpu-replay: profile: " in p.stdout          # the table too
    d = json.loads(out.read_text())
    assert d["otherData"]["backend"] == "cpu" and d["otherData"]["dropped"] == 0
    meta = [e for e in d["traceEvents"] if e["ph"] == "M"]
    assert {e["name"] for e in meta} == {"process_name", "thread_name"}
    ev = [e for e in d["traceEvents"] if e["ph"] == "X"]
    dump = [l.split()[:2] for l in dump_lines(trace)]
    assert len(ev) == len(dump) == d["otherData"]["records"]
    assert [e["args"]["op"] for e in ev] == [int(i) for i, _ in dump]
    assert [e["name"] for e in ev] == [op for _, op in dump]
    assert ev[0]["ts"] == 0
    for a, b in zip(ev, ev[1:]):
        assert a["dur"] >= 0 and b["ts"] >= a["ts"] + a["dur"] - 1e-3, (a, b)
    # without a .json argument: no file, the next word is the trace
    p = tool("rgpu-replay", "--profile", trace, "--backend", "cpu", check_code=0)
    assert "rgpu-replay: profile: " in p.stdout
    bad = tmp_path / "no" / "such" / "dir.json"
    p = tool("rgpu-replay", trace, "--profile", bad, "--backend", "cpu")
    assert p.returncode == 2 and "cannot create" in p.stderr


def test_replay_timeline_device_spans_on_cuda(trace, tmp_path):
    """On cuda, --profile FILE.json adds a second row: each record's kernels
    between two CUDA timing events, in stream order (run by
    tests/cudaemu/run-tests.sh, whose layer implements the events' times)."""
    out = tmp_path / "cuda.json"
    p = tool("rgpu-replay", trace, "--profile", out, "--backend", "cuda", "--quiet")
    if p.returncode == 2 and "--backend cuda" in p.stderr:
        pytest.skip("no cuda backend in this build: tests/cudaemu/run-tests.sh runs this on the CUDA-on-CPU layer")
    assert p.returncode == 0, p.stderr
    d = json.loads(out.read_text())
    rec = [e for e in d["traceEvents"] if e.get("cat") == "record"]
    dev = [e for e in d["traceEvents"] if e.get("cat") == "device"]
    assert {(e["name"], e["args"].get("name")) for e in d["traceEvents"] if e["ph"] == "M" and e["tid"] == 2} == \
        {("thread_name", "cuda kernels")}
    assert [(e["name"], e["args"]["op"]) for e in dev] == [(e["name"], e["args"]["op"]) for e in rec]
    assert all(e["tid"] == 2 and e["dur"] >= 0 for e in dev)
    for a, b in zip(dev, dev[1:]):                  # one stream: in order, no overlap
        assert b["ts"] >= a["ts"] + a["dur"] - 1e-2, (a, b)
    # the kernels ran: the device row is not all zero-length
    assert sum(e["dur"] for e in dev) > 0


def test_server_profile_timeline(tmp_path):
    """RGPU_PROFILE=DIR: at the session's end the embedded server's
    DIR/session-N.json holds one host span per record it ran, the same records
    in the same order as the session's trace (RGPU_RECORD); the client's
    DIR/client-<pid>.json holds a span per wait and per recorded chunk. Both
    stamp CLOCK_MONOTONIC: every op a wait asked for ran on the server before
    that wait returned, and timeline_merge.py puts them in one trace."""
    prof = tmp_path / "prof"
    path = tmp_path / "live.rgt"
    record(path, {"RGPU_PROFILE": str(prof)})
    for _ in range(100):                       # the server writes it as the session ends
        files = sorted(prof.glob("session-*.json")) if prof.exists() else []
        if files:
            break
        time.sleep(0.05)
    assert len(files) == 1, files
    d = json.loads(files[0].read_text())
    assert d["otherData"]["dropped"] == 0 and d["otherData"]["label"].startswith("session ")
    ev = [e for e in d["traceEvents"] if e["ph"] == "X"]
    dump = [l.split()[:2] for l in dump_lines(path)]
    assert [(e["args"]["op"], e["name"]) for e in ev] == [(int(i), op) for i, op in dump]
    assert all(e["dur"] >= 0 for e in ev)
    server = {e["args"]["op"]: e for e in ev}

    clients = sorted(prof.glob("client-*.json"))
    assert len(clients) == 1, clients
    c = json.loads(clients[0].read_text())
    spans = [e for e in c["traceEvents"] if e["ph"] == "X"]
    waits = [e for e in spans if e["name"] == "wait"]
    chunks = [e for e in spans if e["name"] == "record"]
    assert len(waits) == 4                     # PROGRAM's .cpu() and three .item()
    assert sum(e["args"]["records"] for e in chunks) == len(dump)
    assert [e["args"]["first_op"] for e in chunks] == sorted(e["args"]["first_op"] for e in chunks)
    for w in waits:
        assert w["args"]["status"] == 0
        s = server[w["args"]["op"]]
        assert s["ts"] + s["dur"] <= w["ts"] + w["dur"] + 1.0, (s, w)   # µs; one clock

    out = tmp_path / "merged.json"
    p = subprocess.run([sys.executable, os.path.join(REPO, "tools", "timeline_merge.py"), str(prof), "-o", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    m = json.loads(out.read_text())
    assert len([e for e in m["traceEvents"] if e["ph"] == "X"]) == len(ev) + len(spans)
    assert len({e["pid"] for e in m["traceEvents"]}) == 2


def test_replay_twice_bitwise_equal(trace, tmp_path):
    r1, r2 = tmp_path / "r1", tmp_path / "r2"
    tool("rgpu-replay", trace, "--backend", "cpu", "--dump-results", r1, "--quiet", check_code=0)
    tool("rgpu-replay", trace, "--backend", "cpu", "--dump-results", r2, "--quiet", check_code=0)
    a, b = r1.read_bytes(), r2.read_bytes()
    assert a == b
    lines = a.decode().splitlines()
    assert any(" rgpu::download 0 " in l for l in lines) and any(" _local_scalar_dense 0 " in l for l in lines)
    # and equal to what the live run received
    db = sqlite3.connect(trace)
    for op, status, data in db.execute("select op_index, status, data from results"):
        mine = [l for l in lines if l.startswith(f"{op} ")]
        if mine and status == 0:
            assert mine[0].split()[3:] == ([data.hex()] if data else []), (op, mine[0], data.hex())


def test_replay_corrupted_result_names_the_op(trace, tmp_path):
    db = sqlite3.connect(trace)
    op, data = db.execute("select op_index, data from results where length(data) > 0 "
                          "order by op_index desc limit 1").fetchone()
    db.close()
    bad = bytearray(data)
    bad[0] ^= 0x40
    p = copy_with(trace, tmp_path, "badres", "")
    db = sqlite3.connect(p)
    db.execute("update results set data=? where op_index=?", (bytes(bad), op))
    db.commit()
    db.close()
    r = tool("rgpu-replay", p, "--verify", "--backend", "cpu", check_code=1)
    assert re.search(rf"mismatch at op {op} \((_local_scalar_dense|rgpu::download)\)", r.stdout), r.stdout
    assert "MISMATCH" in r.stdout
    # ops before --from still run, but the mismatch is outside [from, to): not reported
    tool("rgpu-replay", p, "--verify", "--backend", "cpu", "--to", op, check_code=0)
    tool("rgpu-replay", p, "--verify", "--backend", "cpu", "--from", op, check_code=1)
    tool("rgpu-replay", p, "--verify", "--backend", "cpu", "--from", op + 1, check_code=0)


def test_replay_verify_tolerance_on_another_backend(trace, tmp_path):
    """A trace recorded on another backend is verified within tolerance, decoding the
    result bytes with the dtype of the op's input (float32 here)."""
    db = sqlite3.connect(trace)
    op, data = db.execute("select op_index, data from results where length(data) = 4 "
                          "order by op_index limit 1").fetchone()
    db.close()
    for name, flip, code in (("ulp", 0x01, 0), ("big", 0x40, 1)):
        bad = bytearray(data)
        bad[0 if flip == 0x01 else 3] ^= flip          # little-endian: byte 0 is the lowest mantissa bits
        p = copy_with(trace, tmp_path, name, "update meta set value='cuda' where key='backend'")
        db = sqlite3.connect(p)
        db.execute("update results set data=? where op_index=?", (bytes(bad), op))
        db.commit()
        db.close()
        r = tool("rgpu-replay", p, "--verify", "--backend", "cpu", check_code=code)
        if code:
            assert f"mismatch at op {op} (_local_scalar_dense): float32" in r.stdout and "over tolerance" in r.stdout
        else:
            assert "(within tolerance)" in r.stdout, r.stdout
        # on the recording backend the same one-ulp change is a mismatch
        tool("rgpu-replay", copy_with(p, tmp_path, name + "cpu", "update meta set value='cpu' where key='backend'"),
             "--verify", "--backend", "cpu", check_code=1)


# --- rgpu-diff --------------------------------------------------------------

def test_diff_cpu_cpu_passes(trace):
    r = tool("rgpu-diff", trace, "--a", "cpu", "--b", "cpu", check_code=0)
    assert "0 over tolerance" in r.stdout and "(bitwise)" in r.stdout


def test_diff_fault_names_op_and_index(trace):
    idx = op_index(trace, "mul.Tensor")
    r = tool("rgpu-diff", trace, "--a", "cpu", "--b", "cpu", env={"RGPU_CPU_FAULT": "mul.Tensor"}, check_code=1)
    assert f"first difference: op {idx} (mul.Tensor)" in r.stdout, r.stdout
    # without --resync the error flows downstream into later ops
    j = json.loads(tool("rgpu-diff", trace, "--a", "cpu", "--b", "cpu", "--json",
                        env={"RGPU_CPU_FAULT": "mul.Tensor"}, check_code=1).stdout)
    over = {w["op"] for w in j["worst"] if w["over"]}
    assert "mul.Tensor" in over and len(over) > 1, over


def test_diff_resync_limits_report(trace):
    idx = op_index(trace, "mul.Tensor")
    r = tool("rgpu-diff", trace, "--a", "cpu", "--b", "cpu", "--resync", env={"RGPU_CPU_FAULT": "mul.Tensor"},
             check_code=1)
    table = r.stdout.split("worst ops (by name)")[1]
    names = [l.split()[0] for l in table.splitlines()[2:] if l.strip()]
    assert names == ["mul.Tensor"], r.stdout
    j = json.loads(tool("rgpu-diff", trace, "--a", "cpu", "--b", "cpu", "--resync", "--json",
                        env={"RGPU_CPU_FAULT": "mul.Tensor"}, check_code=1).stdout)
    assert j["pass"] is False and j["differences"] == 1 and j["resync"] is True
    assert j["first"]["index"] == idx and j["first"]["op"] == "mul.Tensor"
    assert j["first"]["dtype_a"] == "float32" and j["first"]["shape_a"] == [3, 4]
    assert [w["op"] for w in j["worst"] if w["over"]] == ["mul.Tensor"]


def test_diff_json_and_op_filter(trace):
    j = json.loads(tool("rgpu-diff", trace, "--a", "cpu", "--b", "cpu", "--json", check_code=0).stdout)
    assert j["pass"] is True and j["first"] is None and j["differences"] == 0
    assert j["ops"] == len(dump_lines(trace)) and j["ops_compared"] > 0
    j = json.loads(tool("rgpu-diff", trace, "--a", "cpu", "--b", "cpu", "--json", "--op", "add.Scalar",
                        env={"RGPU_CPU_FAULT": "mul.Tensor"}, check_code=1).stdout)
    assert j["op_filter"] == "add.Scalar" and j["first"]["op"] == "add.Scalar"
    assert {w["op"] for w in j["worst"]} == {"add.Scalar"}
    # explicit tolerances: a one-ulp fault passes
    tool("rgpu-diff", trace, "--a", "cpu", "--b", "cpu", "--rtol", "1e-5", "--atol", "1e-6", "--resync",
         env={"RGPU_CPU_FAULT": "mul.Tensor"}, check_code=0)


# --- rgpu-trace -------------------------------------------------------------

def test_trace_info_ops_dump_counts(trace):
    db = sqlite3.connect(trace)
    n_ops = db.execute("select sum(op_count) from stream").fetchone()[0]
    n_stream = db.execute("select count(*) from stream").fetchone()[0]
    n_chunks = db.execute("select count(*) from chunks").fetchone()[0]
    n_blobs, blob_raw = db.execute("select count(*), sum(raw_len) from blobs").fetchone()
    n_results = db.execute("select count(*) from results").fetchone()[0]
    info = tool("rgpu-trace", "info", trace, check_code=0).stdout
    assert f"ops: {n_ops}\n" in info
    assert f"chunks: {n_stream} stream entries, {n_chunks} unique" in info
    assert f"blobs: {n_blobs}, {blob_raw} raw bytes" in info
    assert f"results: {n_results} (0 failed)" in info
    assert "meta.format_version: 1" in info and "(matches this build)" in info
    assert "meta.creator: rgpu recorder" in info and "compression ratio" in info and "dedupe ratio" in info

    lines = dump_lines(trace)
    assert len(lines) == n_ops
    assert [int(l.split()[0]) for l in lines] == list(range(n_ops))
    names = [l.split()[1] for l in lines]
    ops = tool("rgpu-trace", "ops", trace, check_code=0).stdout.splitlines()
    hist = {l.split()[2]: int(l.split()[0]) for l in ops[1:-1]}
    assert hist == {n: names.count(n) for n in set(names)}
    counts = [int(l.split()[0]) for l in ops[1:-1]]
    assert counts == sorted(counts, reverse=True)
    assert ops[-1].split()[0] == str(n_ops)
    mul = [l for l in lines if l.split()[1] == "mul.Tensor"][0]
    assert re.search(r"out=\[t\d+=s\d+:float32\[3,4\]/\[4,1\]\+0 new\(48\)\] in=\[t\d+, t\d+\]", mul), mul
    assert any(re.search(r"rgpu::upload .* args=\[hash:[0-9a-f]{32}, 48\]", l) for l in lines)


def test_client_trace_is_complete(trace):
    """Every blob an UPLOAD names is in the trace, even the one uploaded twice."""
    lines = dump_lines(trace)
    named = {m.group(1) for l in lines for m in [re.search(r"hash:([0-9a-f]{32})", l)] if m}
    db = sqlite3.connect(trace)
    stored = {h.hex() for (h,) in db.execute("select hash from blobs")}
    assert named and named <= stored
    uploads = [l for l in lines if l.split()[1] == "rgpu::upload"]
    assert len(uploads) == 2 and len(named) == 1      # the same bytes twice: one blob, still stored
    # the stream covers every op index once
    rows = db.execute("select first_op, op_count from stream order by seq").fetchall()
    nxt = 0
    for first, count in rows:
        assert first == nxt
        nxt += count


def test_server_recording_replays(tmp_path):
    """rgpu-server --record DIR writes a trace as complete as the client's."""
    sock = tmp_path / "sock"
    rec = tmp_path / "rec"
    srv = subprocess.Popen([os.path.join(BIN, "rgpu-server"), "--unix", str(sock), "--backend", "cpu",
                            "--record", str(rec), "--quiet"])
    try:
        for _ in range(300):
            if sock.exists():
                break
            time.sleep(0.01)
        client = tmp_path / "client.rgt"
        record(client, {"RGPU_SERVER": f"unix:{sock}"})
        server_trace = rec / "session-1.rgt"
        want = tool("rgpu-trace", "ops", client, check_code=0).stdout
        for _ in range(500):      # the session thread closes its trace once the client is gone
            if server_trace.exists() and tool("rgpu-trace", "ops", server_trace).stdout == want:
                break
            time.sleep(0.01)
        assert tool("rgpu-trace", "ops", server_trace, check_code=0).stdout == want
        for t in (client, server_trace):
            tool("rgpu-replay", t, "--verify", "--backend", "cpu", check_code=0)
        c = sqlite3.connect(client).execute("select count(*) from blobs").fetchone()[0]
        s = sqlite3.connect(server_trace).execute("select count(*) from blobs").fetchone()[0]
        assert c == s >= 1
        info = tool("rgpu-trace", "info", server_trace, check_code=0).stdout
        assert "meta.creator: rgpu-server --record" in info and "meta.backend: cpu" in info
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=10)


# --- bad input ---------------------------------------------------------------

ALL = [("rgpu-replay", "--verify", "--backend", "cpu"), ("rgpu-diff", "--a", "cpu", "--b", "cpu"),
       ("rgpu-trace", "dump"), ("rgpu-trace", "info")]


def expect_bad(path, needle=None, tools=ALL):
    for t in tools:
        args = [t[1], path, *t[2:]] if t[0] == "rgpu-trace" else [path, *t[1:]]
        r = tool(t[0], *args, check_code=2)
        assert len(r.stderr.strip().splitlines()) == 1, (t, r.stderr)
        assert r.stderr.startswith(t[0] + ": ")
        if needle:
            assert needle in r.stderr, (t, r.stderr)


def test_truncated_garbage_version_missing_chunk(trace, tmp_path):
    data = trace.read_bytes()
    for cut in [0, 100, len(data) // 3, len(data) // 2, len(data) - 4096, len(data) - 1]:
        p = tmp_path / f"trunc{cut}.rgt"
        p.write_bytes(data[:cut])
        expect_bad(p)
    g = tmp_path / "garbage.rgt"
    g.write_bytes(bytes((i * 7919 + 13) % 251 for i in range(20000)))
    expect_bad(g, "not an rgpu trace")
    expect_bad(copy_with(trace, tmp_path, "version", "update meta set value='2' where key='format_version'"),
               "BAD_VERSION")
    expect_bad(copy_with(trace, tmp_path, "optable", "update meta set value='0' where key='op_table_hash'"),
               "OP_TABLE")
    expect_bad(copy_with(trace, tmp_path, "nochunk",
                         "delete from chunks where hash=(select hash from stream where seq=0)"), "BAD_TRACE")
    expect_bad(copy_with(trace, tmp_path, "nostream", "delete from stream where seq=0"))
    p = copy_with(trace, tmp_path, "frame", "")
    db = sqlite3.connect(p)
    h, f = db.execute("select hash, frame from chunks limit 1").fetchone()
    f = bytearray(f)
    f[len(f) // 2] ^= 0xff
    db.execute("update chunks set frame=? where hash=?", (bytes(f), h))
    db.commit()
    db.close()
    expect_bad(p, tools=ALL[:3])      # info reads no frames
    expect_bad(copy_with(trace, tmp_path, "noblob", "delete from blobs"), "MISSING_BLOB", tools=ALL[:2])
    expect_bad(tmp_path / "does-not-exist.rgt")


def test_usage_errors_and_help():
    for name in ("rgpu-replay", "rgpu-diff", "rgpu-trace"):
        h = tool(name, "--help", check_code=0).stdout
        assert h.startswith("usage: " + name) and "Exit status" in h
        for args in ([], ["--no-such-option", "x.rgt"]):
            r = tool(name, *args, check_code=2)
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "RGPU_CPU_FAULT" in tool("rgpu-diff", "--help").stdout
    assert "test-only" in tool("rgpu-diff", "--help").stdout
    tool("rgpu-trace", "frobnicate", "x.rgt", check_code=2)
    tool("rgpu-replay", "x.rgt", "--from", "5", "--to", "2", check_code=2)
    tool("rgpu-diff", "x.rgt", "--rtol", "nope", check_code=2)
