#!/usr/bin/env bash
# gpu-check.sh — what a machine with an NVIDIA GPU runs to check the CUDA
# backend, in under 8 minutes, writing everything into one log:
#
#   1. environment: GPU, driver, nvcc, python/torch, our Debian -dev packages,
#      where cuBLAS is (sets RGPU_CUBLAS_PATH from the pip wheels if needed)
#   2. build: make (nvcc for sm_90 only, to save time)
#   3. the CUDA backend: does it start, how many ops of ops.def it runs
#   4. C tests (make test-c)
#   5. smoke: a few ops on an explicit `rgpu-server --backend cuda` whose own
#      log is kept (the embedded servers' logs vanish with them)
#   5b. speed, family by family: tools/bench/gpu.py (add, gelu, casts, softmax,
#      layer_norm, cross-entropy, sum, dropout, SDPA, AdamW, conv2d, matmul,
#      then GPT-2-small and nanoGPT steps) against PyTorch CUDA on this GPU,
#      every line's result checked against PyTorch's; table in
#      $OUT/gpu-bench.out, JSON in $OUT/gpu-bench.json
#   6. conformance: tests/py/test_conformance.py against the cuda backend
#   7. training: the reduced GPT (GPTConfig.tiny), 20 AdamW steps on the cuda
#      backend and on the cpu backend, loss curves compared (1e-4 relative);
#      the cuda run is recorded (RGPU_RECORD) for step 8
#   2b. per-kernel registers, spills, shared memory (tools/ptxas-table.sh)
#   8. determinism: the cuda training run's trace replayed by rgpu-diff,
#      cuda against cuda (bitwise) and cuda against cpu (tolerances, --resync)
#   8b. graphs: `rgpu-server --backend cuda --graphs on` (its log kept):
#      tests/py/test_compile.py against it, then the reduced GPT compiled
#      (model and AdamW step), 12 steps with graphs on and off: losses and
#      weights must be bitwise equal; the server log's "graphs:" lines say how
#      many template calls replayed as CUDA graphs and why any was refused
#      (alone: tools/gpu-check.sh --run graphs_check)
#   9. bench: tools/bench/nanogpt.py --compile with the cuda backend (eager
#      and compiled rgpu), PyTorch eager CUDA and torch.compile (inductor) on
#      the same GPU with the same model
#  10. with the time left: tests/py/test_compile.py, test_amp.py and
#      test_train.py on cuda
# then a PASS/FAIL/SKIP table. Every step runs under `timeout` and within an
# overall deadline; a failed step does not stop the next.
#
#   OUT=/some/dir tools/gpu-check.sh      # default ./gpu-check-out
#   GPU_CHECK_BUDGET_S=470                # overall deadline (seconds)
#   GPU_CHECK_SKIP_BUILD=1                # use build/ as it is (a rerun)
#   GPU_CHECK_CUDA_ARCH="-gencode ..."    # default sm_90 only
#   RGPU_CUDA_PARTIAL=1                   # set automatically when the backend
#                                         # lacks ops, so the rest still runs
# Exit status: 0 when every step passed, 1 otherwise.
# The machine cannot download anything: nothing here installs packages.

set -u
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.."
REPO=$(pwd)
PY=${PYTHON:-python3}
BENCH_ARGS=(--batch 16 --block 128 --layers 4 --heads 4 --embd 256 --iters 10 --warmup 2)
# sm_90 only, to halve compile time (H100/H200); objects in build/ keep whatever
# arch they were built with, so do not run this where another make shares build/
ARCH=${GPU_CHECK_CUDA_ARCH:-"-gencode arch=compute_90,code=sm_90"}
DEV_PKGS="libzstd-dev libxxhash-dev libsqlite3-dev check libopenblas-dev pkg-config"
# what `make all` builds, less `develop` (it writes a .pth into site-packages,
# which may be read-only here; PYTHONPATH does its job)
BUILD_TARGETS="build/lib/librgpu_format.a build/lib/librgpu_recorder.a build/lib/librgpu_replayer.a
  build/bin/rgpu-server build/bin/rgpu-replay build/bin/rgpu-diff build/bin/rgpu-trace torchhook/rgpu/_C.abi3.so"

RESULTS=()
log() { echo "$*" | tee -a "$LOG"; }
now() { date +%s; }
left() { echo $((START + BUDGET - $(now))); }

# step NAME MAX_SECONDS COMMAND... | step NAME MAX_SECONDS fn FUNCTION...:
# runs the command (or a function of this file, in a fresh bash) with its
# output in the log, under timeout min(MAX, time left); timeout signals the
# whole process group, servers included. Records PASS / FAIL (rc) / TIMEOUT / SKIP.
step() {
    local name=$1 max=$2; shift 2
    local t; t=$(left)
    [ "$t" -gt "$max" ] && t=$max
    log ""
    log "=================================================================="
    log "== $name   (limit ${t}s, $(( $(now) - START ))s elapsed)"
    log "== \$ $*"
    if [ "$t" -lt 5 ]; then
        log "== SKIP: out of time budget"
        RESULTS+=("SKIP     $name (out of time)")
        return 2
    fi
    local t0; t0=$(now)
    if [ "$1" = fn ]; then shift; set -- bash "$SELF" --run "$@"; fi   # a function of this file
    timeout --kill-after=10 "$t" "$@" >> "$LOG" 2>&1
    local rc=$?
    local dt=$(( $(now) - t0 ))
    if [ $rc -eq 0 ]; then
        RESULTS+=("PASS     $name (${dt}s)")
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        RESULTS+=("TIMEOUT  $name (${dt}s, limit ${t}s)")
    else
        RESULTS+=("FAIL     $name (rc $rc, ${dt}s)")
    fi
    log "== $name: rc $rc in ${dt}s"
    return $rc
}
skip() { log ""; log "== SKIP $1: $2"; RESULTS+=("SKIP     $1 ($2)"); }
note() { RESULTS+=("NOTE     $*"); log "NOTE: $*"; }
# SKIPNAME NAME MAX CMD...: step NAME when rgpu-server and rgpu._C were built, else skip SKIPNAME
built_step() {
    local what=$1; shift
    if [ "$HAVE_SERVER" = 1 ] && [ "$HAVE_PYEXT" = 1 ]; then step "$@"; else skip "$what" "no build"; fi
}

# ================================================================ the steps' functions
# ---------------------------------------------------------------- 1. environment
env_info() {
    echo "date: $(date -u)   host: $(hostname)   cpus: $(nproc)"
    echo "repo: $REPO   commit: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed files"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || echo "nvidia-smi: not available"
    local nvcc; nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
    if [ -n "$nvcc" ]; then "$nvcc" --version | tail -2; else echo "nvcc: NOT FOUND (the build will have no CUDA backend)"; fi
    ls -d /usr/local/cuda*/lib64/libcudart.so* 2>/dev/null | head -3
    gcc --version | head -1
    $PY -c 'import sys, sysconfig, os; print("python", sys.version.split()[0], "Python.h:", os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
    $PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -1
    $PY -c 'import pytest, numpy; print("pytest", pytest.__version__, "numpy", numpy.__version__)' 2>&1 | tail -1
    local missing=""
    for p in $DEV_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
    if [ -n "$missing" ]; then echo "MISSING Debian packages:$missing (make deps cannot download them here)"; else echo "Debian -dev packages: all present"; fi
    echo "cuBLAS: RGPU_CUBLAS_PATH=${RGPU_CUBLAS_PATH:-<unset>}"
    ldconfig -p 2>/dev/null | grep -E "libcublas\.so" | head -3
}

# The first libcublas.so.12/13 of the pip wheels PyTorch brings
# (nvidia-cublas, nvidia-cublas-cu12) or of torch/lib; prints nothing if none.
cublas_from_wheels() {
    $PY - <<'PY' 2>/dev/null
import glob, os, site, sys
dirs = []
try:
    dirs += site.getsitepackages()
except Exception:
    pass
try:
    dirs.append(site.getusersitepackages())
except Exception:
    pass
dirs += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
hits = []
for d in dict.fromkeys(dirs):
    for sub in ("nvidia/cu13/lib", "nvidia/cublas/lib", "torch/lib"):
        hits += sorted(glob.glob(os.path.join(d, sub, "libcublas.so.1[23]*")))
print(hits[0] if hits else "")
PY
}

# ---------------------------------------------------------------- 2. build
build() {
    # shellcheck disable=SC2086
    make -j"$(nproc)" CUDA_ARCH="$ARCH" $BUILD_TARGETS || {
        echo "make failed; building what can be built (make -k)"
        make -k -j"$(nproc)" CUDA_ARCH="$ARCH" $BUILD_TARGETS
        return 1
    }
    if grep -aq "built without CUDA" build/bin/rgpu-server; then
        echo "build/bin/rgpu-server has NO CUDA backend (nvcc missing at build time?)"
        return 1
    fi
}

# ---------------------------------------------------------------- 2b. kernel resources (no GPU needed)
step "kernel registers/spills/smem (tools/ptxas-table.sh, nvcc -Xptxas -v)" 120 tools/ptxas-table.sh sm_90

# ---------------------------------------------------------------- 3. the CUDA backend
# Starts `rgpu-server --backend cuda` once without RGPU_CUDA_PARTIAL: it
# refuses when ops are missing and says which; then the remaining steps run
# with RGPU_CUDA_PARTIAL=1 so that each missing op fails on its own.
probe_backend() {
    local d; d=$(mktemp -d)
    env -u RGPU_CUDA_PARTIAL RGPU_CUDA_VERBOSE=1 build/bin/rgpu-server --unix "$d/sock" --backend cuda \
        --token-file "$d/token" --journal none > "$d/log" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do
        [ -S "$d/sock" ] && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    local ok=1
    [ -S "$d/sock" ] && ok=0
    kill $pid 2>/dev/null; wait $pid 2>/dev/null
    cat "$d/log"
    rm -rf "$d"
    return $ok
}

# ---------------------------------------------------------------- 5. smoke, with the server's log kept
smoke() {
    local d; d=$(mktemp -d)
    RGPU_CUDA_VERBOSE=1 build/bin/rgpu-server --unix "$d/sock" --backend cuda --token-file "$d/token" \
        --journal none > "$OUT/server-cuda-smoke.log" 2>&1 &
    local pid=$!
    for _ in $(seq 100); do [ -S "$d/sock" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    RGPU_SERVER="unix:$d/sock" RGPU_TOKEN_FILE="$d/token" $PY - <<'PY'
import torch, rgpu
print("handshake:", {k: v for k, v in rgpu.connect().items() if k in ("backend", "session")})
torch.manual_seed(0)
checks = []
def chk(name, fn, *xs, tol=1e-5):
    try:
        want = fn(*xs)
        got = fn(*[x.to("rgpu") for x in xs]).cpu()
        ok = want.dtype == got.dtype and want.shape == got.shape and torch.allclose(
            got.double(), want.double(), rtol=tol, atol=tol, equal_nan=True)
        print(f"{'ok ' if ok else 'BAD'} {name}")
        if not ok:
            print("   want", want.flatten()[:8], "\n   got ", got.flatten()[:8])
    except Exception as e:
        ok = False
        print(f"ERR {name}: {type(e).__name__}: {str(e)[:300]}")
    checks.append(ok)
a, b = torch.randn(33, 17), torch.randn(17, 9)
chk("copy (round trip)", lambda x: x.clone(), a)
chk("copy transposed", lambda x: x.t().contiguous(), a)
chk("copy cast f32->f16->f32", lambda x: x.half().float(), a * 1000)
chk("copy cast f32->i64", lambda x: x.to(torch.int64), a * 1e3)
chk("copy cast f32->u8", lambda x: x.to(torch.uint8), a.abs() * 50)
chk("full", lambda x: torch.full((5, 7), 2.5, device=x.device) + x[:5, :7] * 0, a)
chk("arange", lambda x: torch.arange(3, 50, 0.5, device=x.device), a)
chk("add", lambda x, y: x + y, a, a.flip(0))
chk("sum", lambda x: x.sum(1), a)
chk("mm (cuBLAS)", lambda x, y: x @ y, a, b, tol=1e-4)
chk("softmax", lambda x: torch.softmax(x, -1), a)
print(f"{sum(checks)}/{len(checks)} smoke checks ok")
raise SystemExit(0 if all(checks) else 1)
PY
    local rc=$?
    kill $pid 2>/dev/null; wait $pid 2>/dev/null
    echo "--- server log ($OUT/server-cuda-smoke.log):"; tail -20 "$OUT/server-cuda-smoke.log"
    rm -rf "$d"
    return $rc
}

# ---------------------------------------------------------------- 7. training
train_gpt() {   # BACKEND [RECORD]: reduced GPT, 20 steps; prints the losses as JSON
    RGPU_BACKEND=$1 RGPU_RECORD=${2:-} $PY - "$1" <<'PY'
import json, os, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "tools"))
import torch
import rgpu
from models.train import check_gpt
info = rgpu.connect()
step = check_gpt()
losses = []
t0 = time.perf_counter()
for _ in range(20):
    losses.append(step().item())
print("RESULT " + json.dumps({"backend": info.get("backend"), "losses": losses,
                              "s_per_step": (time.perf_counter() - t0) / 20}))
PY
}

compare_training() {
    local c p
    rm -f "$OUT/gpt-cuda.rgt"
    train_gpt cuda "$OUT/gpt-cuda.rgt" > "$OUT/train-cuda.out" 2>&1; local rc1=$?
    train_gpt cpu > "$OUT/train-cpu.out" 2>&1; local rc2=$?
    cat "$OUT/train-cuda.out" "$OUT/train-cpu.out" | grep -v "^RESULT" | tail -30
    c=$(grep "^RESULT " "$OUT/train-cuda.out" | cut -c8-)
    p=$(grep "^RESULT " "$OUT/train-cpu.out" | cut -c8-)
    [ $rc1 -ne 0 ] && echo "cuda run failed (rc $rc1)"
    [ $rc2 -ne 0 ] && echo "cpu run failed (rc $rc2)"
    [ -z "$c" ] || [ -z "$p" ] && return 1
    $PY - "$c" "$p" <<'PY'
import json, sys
c, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"backends: {c['backend']} vs {p['backend']};  s/step {c['s_per_step']:.4f} vs {p['s_per_step']:.4f}")
worst = 0.0
for i, (a, b) in enumerate(zip(c["losses"], p["losses"])):
    r = abs(a - b) / max(abs(b), 1e-12)
    worst = max(worst, r)
    print(f"  step {i:2d}  cuda {a:.7f}  cpu {b:.7f}  rel {r:.1e}")
ok = c["backend"] == "cuda" and p["backend"] == "cpu" and len(c["losses"]) == len(p["losses"]) == 20 and worst <= 1e-4
print(f"worst relative loss difference {worst:.2e} (limit 1e-4): {'ok' if ok else 'BAD'}")
raise SystemExit(0 if ok else 1)
PY
}

# ---------------------------------------------------------------- 8b. graphs
# A cuda server (GRAPHS_CHECK_BACKEND=cpu: a dry run anywhere) on DIR/sock with its log in DIR/log and extra ARGS; waits
# until it listens. Its pid goes to DIR/pid.
cuda_server() {
    local d=$1; shift
    mkdir -p "$d"
    RGPU_CUDA_VERBOSE=1 build/bin/rgpu-server --unix "$d/sock" --backend "${GRAPHS_CHECK_BACKEND:-cuda}" \
        --token-file "$d/token" --journal none "$@" > "$d/log" 2>&1 &
    echo $! > "$d/pid"
    for _ in $(seq 150); do [ -S "$d/sock" ] && return 0; kill -0 "$(cat "$d/pid")" 2>/dev/null || break; sleep 0.1; done
    echo "server in $d did not start:"; cat "$d/log"; return 1
}

train_compiled() {   # STEPS: the reduced GPT, model and optimizer step compiled; prints RESULT json
    $PY - "$1" <<'PY'
import json, os, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "tools"))
import torch
import rgpu
from models import data, gpt
info = rgpu.connect()
torch.manual_seed(0)
model = gpt.GPT(gpt.GPTConfig.tiny()).to("rgpu")
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, foreach=True, capturable=True)
fwd = torch.compile(model, backend="rgpu")
ostep = torch.compile(lambda: opt.step(), backend="rgpu")
train, _ = data.train_val(50_000)
g = torch.Generator().manual_seed(0)
losses, t0 = [], time.perf_counter()
for i in range(int(sys.argv[1])):
    if i == 2:
        t0 = time.perf_counter()
    x, y = data.get_batch(train, 4, 32, g)
    _, loss = fwd(x.to("rgpu"), y.to("rgpu"))
    loss.backward()
    ostep()
    opt.zero_grad(set_to_none=True)
    losses.append(loss.item())
w = [p.detach().cpu() for p in model.parameters()]
digest = [float(t.double().sum()).hex() + "/" + float(t.double().abs().max()).hex() for t in w]
print("RESULT " + json.dumps({"backend": info.get("backend"), "losses": [v.hex() for v in losses], "w": digest,
                              "s_per_step": (time.perf_counter() - t0) / max(1, int(sys.argv[1]) - 2),
                              "compile": rgpu.stats()["compile"]}))
PY
}

graphs_check() {
    : "${OUT:=$(pwd)/gpu-check-out}" "${PY:=python3}"
    mkdir -p "$OUT"
    local d rc=0 rc_t=0
    d=$(mktemp -d)
    cuda_server "$d/on" --graphs on || return 1
    cuda_server "$d/off" --graphs off || { kill "$(cat "$d/on/pid")"; return 1; }
    echo "--- tests/py/test_compile.py against rgpu-server --backend cuda --graphs on"
    RGPU_SERVER="unix:$d/on/sock" RGPU_TOKEN_FILE="$d/on/token" RGPU_GRAPHS=1 RGPU_BACKEND="${GRAPHS_CHECK_BACKEND:-cuda}" \
        $PY -m pytest -q -p no:cacheprovider --tb=short -W ignore tests/py/test_compile.py || rc_t=$?
    echo "--- the reduced GPT compiled, 12 steps: graphs on vs off (same backend: bitwise)"
    RGPU_SERVER="unix:$d/on/sock" RGPU_TOKEN_FILE="$d/on/token" train_compiled 12 > "$OUT/graphs-on.out" 2>&1 || rc=1
    RGPU_SERVER="unix:$d/off/sock" RGPU_TOKEN_FILE="$d/off/token" train_compiled 12 > "$OUT/graphs-off.out" 2>&1 || rc=1
    grep -v "^RESULT" "$OUT/graphs-on.out" "$OUT/graphs-off.out" | tail -20
    $PY - "$(grep "^RESULT " "$OUT/graphs-on.out" | cut -c8-)" "$(grep "^RESULT " "$OUT/graphs-off.out" | cut -c8-)" \
        "${GRAPHS_CHECK_BACKEND:-cuda}" <<'PY' || rc=1
import json, sys
try:
    a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
except ValueError:
    print("a run printed no RESULT"); raise SystemExit(1)
print(f"backends {a['backend']} / {b['backend']};  s/step graphs on {a['s_per_step']:.4f}, off {b['s_per_step']:.4f}")
print("compile stats (on):", a["compile"])
for i, (x, y) in enumerate(zip(a["losses"], b["losses"])):
    print(f"  step {i:2d}  on {float.fromhex(x):.9f}  off {float.fromhex(y):.9f}  {'same' if x == y else 'DIFFERENT'}")
ok = a["backend"] == b["backend"] == sys.argv[3] and a["losses"] == b["losses"] and a["w"] == b["w"]
print("losses and weights bitwise equal with graphs on and off:", "ok" if ok else "BAD")
raise SystemExit(0 if ok else 1)
PY
    kill "$(cat "$d/on/pid")" "$(cat "$d/off/pid")" 2>/dev/null
    wait 2>/dev/null
    cp "$d/on/log" "$OUT/server-cuda-graphs.log"
    echo "--- $OUT/server-cuda-graphs.log: graphs per session (template calls replayed as graphs)"
    grep -E "graphs" "$OUT/server-cuda-graphs.log" | tail -20
    rm -rf "$d"
    [ $rc_t -ne 0 ] && echo "test_compile.py with graphs on failed (rc $rc_t)"
    [ $rc -eq 0 ] && [ $rc_t -eq 0 ]
}

# ---------------------------------------------------------------- 9. bench
# nanogpt.py times rgpu (here: a cuda server on this host) against PyTorch CPU
# eager; it has no PyTorch-CUDA baseline, so eager CUDA is timed here with
# the same model, optimizer and batches.
eager_cuda() {
    $PY - "${BENCH_ARGS[@]}" <<'PY'
import argparse, os, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "tools"))
import torch
from models import data, gpt
ap = argparse.ArgumentParser()
for k in ("batch", "block", "layers", "heads", "embd", "iters", "warmup"):
    ap.add_argument("--" + k, type=int)
a = ap.parse_args()
if not torch.cuda.is_available():
    print("PyTorch here has no CUDA (torch.cuda.is_available() is False): no eager-CUDA baseline")
    raise SystemExit(1)
print("GPU:", torch.cuda.get_device_name(0), " TF32 matmul:", torch.backends.cuda.matmul.allow_tf32)
cfg = gpt.GPTConfig(n_layer=a.layers, n_head=a.heads, n_embd=a.embd, block_size=a.block, dropout=0.0)
torch.manual_seed(0)
model = gpt.GPT(cfg).to("cuda")
opt = model.configure_optimizer(lr=1e-3, foreach=False)
train, _ = data.train_val(max(200_000, 4 * a.batch * a.block))
g = torch.Generator().manual_seed(0)
batches = [data.get_batch(train, a.batch, a.block, g) for _ in range(a.warmup + a.iters)]
# warmup steps, then a.iters timed ones of fwd (model, or torch.compile(model))
# with opt; prints the loss range and the seconds per iteration under tag
def timed(fwd, model, opt, label, tag):
    def step(x, y):
        _, loss = fwd(x.to("cuda"), y.to("cuda"))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()
    losses = [step(*b) for b in batches[:a.warmup]]
    t0 = time.perf_counter()
    for b in batches[a.warmup:]:
        losses.append(step(*b))
    dt = (time.perf_counter() - t0) / a.iters
    print(f"{label}{dt:9.4f} s/iter   loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    print(f"{tag} {dt}")
timed(model, model, opt, "PyTorch eager CUDA       ", "EAGER_CUDA_S_PER_ITER")
# torch.compile on CUDA (inductor), same model and step: the compiled baseline
try:
    torch.manual_seed(0)
    model = gpt.GPT(cfg).to("cuda")
    opt = model.configure_optimizer(lr=1e-3, foreach=False)
    timed(torch.compile(model), model, opt, "PyTorch torch.compile CUDA ", "COMPILE_CUDA_S_PER_ITER")
except Exception as e:  # inductor needs triton; report and go on
    print(f"torch.compile on CUDA failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
PY
}

gpu_bench() {
    # eager steps only here (step 9 compiles nanoGPT); the script's own budget
    # leaves the step's limit a margin
    $PY tools/bench/gpu.py --no-compile --budget 140 --json "$OUT/gpu-bench.json" 2>&1 | tee "$OUT/gpu-bench.out"
    return "${PIPESTATUS[0]}"
}

bench() {
    $PY tools/bench/nanogpt.py --backend cuda --compile "${BENCH_ARGS[@]}" 2>&1 | tee "$OUT/bench-nanogpt.out"
    local rc1=${PIPESTATUS[0]}
    eager_cuda 2>&1 | tee "$OUT/bench-eager.out"
    local rc2=${PIPESTATUS[0]}
    local r e
    r=$(grep -E "^rgpu, cuda server" "$OUT/bench-nanogpt.out" | head -1 | awk '{for (i = 1; i <= NF; i++) if ($(i+1) == "s/iter") { print $i; exit }}')
    e=$(grep "^EAGER_CUDA_S_PER_ITER" "$OUT/bench-eager.out" | awk '{print $2}')
    if [ -n "$r" ] && [ -n "$e" ]; then
        $PY -c "print(f'rgpu on cuda {float(\"$r\"):.4f} s/iter vs PyTorch eager CUDA {float(\"$e\"):.4f} s/iter: rgpu/eager = {float(\"$r\") / float(\"$e\"):.2f}x')"
    else
        echo "could not put the two timings side by side (rgpu: '${r}', eager: '${e}')"
    fi
    local rc c ce
    rc=$(grep -E "^rgpu compiled, cuda server" "$OUT/bench-nanogpt.out" | head -1 | awk '{for (i = 1; i <= NF; i++) if ($(i+1) == "s/iter") { print $i; exit }}')
    ce=$(grep "^COMPILE_CUDA_S_PER_ITER" "$OUT/bench-eager.out" | awk '{print $2}')
    if [ -n "$rc" ] && [ -n "$e" ]; then
        $PY -c "print(f'rgpu compiled on cuda {float(\"$rc\"):.4f} s/iter: vs PyTorch eager CUDA {float(\"$rc\") / float(\"$e\"):.2f}x' + (f', vs torch.compile CUDA {float(\"$rc\") / float(\"$ce\"):.2f}x' if \"$ce\" else ''))"
    fi
    [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ]
}

# ================================================================ main
# `gpu-check.sh --run FUNCTION ARGS...` is how step() runs a function of this
# file under timeout (a fresh bash reads the definitions above, then this).
if [ "${1:-}" = --run ]; then shift; "$@"; exit $?; fi

OUT=${OUT:-./gpu-check-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export OUT
LOG=$OUT/gpu-check.log
: > "$LOG"
START=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET_S:-470}
export PYTHONPATH="$REPO/torchhook${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
unset RGPU_SERVER RGPU_RECORD RGPU_BACKEND

# ---------------------------------------------------------------- 1. environment
step "environment" 30 fn env_info

MISSING_DEV=""
for p in $DEV_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || MISSING_DEV="$MISSING_DEV $p"; done
[ -n "$MISSING_DEV" ] && note "missing Debian packages:$MISSING_DEV"

# cuBLAS from the pip wheels PyTorch brings (nvidia-cublas[-cu12]), unless the
# dynamic loader finds one already or RGPU_CUBLAS_PATH is set.
if [ -z "${RGPU_CUBLAS_PATH:-}" ] && ! ldconfig -p 2>/dev/null | grep -q "libcublas\.so\.1[23]" \
   && ! ls /usr/local/cuda/lib64/libcublas.so.1[23] >/dev/null 2>&1; then
    found=$(cublas_from_wheels)
    if [ -n "$found" ]; then
        export RGPU_CUBLAS_PATH=$found
        log "cuBLAS: using the pip wheel's $found (RGPU_CUBLAS_PATH)"
    else
        log "cuBLAS: no libcublas.so.12/13 found on the loader path, in /usr/local/cuda or in the pip wheels"
    fi
fi

# ---------------------------------------------------------------- 2. build
if [ "${GPU_CHECK_SKIP_BUILD:-}" = 1 ]; then skip "build" "GPU_CHECK_SKIP_BUILD=1"
else step "build (make, sm_90)" 240 fn build; fi
HAVE_SERVER=0; [ -x build/bin/rgpu-server ] && HAVE_SERVER=1
HAVE_PYEXT=0; [ -f torchhook/rgpu/_C.abi3.so ] && HAVE_PYEXT=1
[ $HAVE_SERVER = 0 ] && note "no build/bin/rgpu-server: later steps cannot run"
[ $HAVE_PYEXT = 0 ] && note "no torchhook/rgpu/_C.abi3.so (Python.h missing?): python steps cannot run"

# ---------------------------------------------------------------- 2b. kernel resources (no GPU needed)
step "kernel registers/spills/smem (tools/ptxas-table.sh, nvcc -Xptxas -v)" 120 tools/ptxas-table.sh sm_90

# ---------------------------------------------------------------- 3. the CUDA backend
FULL_COVERAGE=0
if [ $HAVE_SERVER = 1 ]; then
    if step "cuda backend starts with every op of ops.def" 20 fn probe_backend; then
        FULL_COVERAGE=1
    else
        export RGPU_CUDA_PARTIAL=1
        note "cuda backend lacks ops (see the log): continuing with RGPU_CUDA_PARTIAL=1"
    fi
else
    skip "cuda backend starts" "no rgpu-server"
fi

# ---------------------------------------------------------------- 4. C tests
if [ $HAVE_SERVER = 1 ]; then
    step "C tests (make test-c)" 90 make --no-print-directory -j"$(nproc)" CUDA_ARCH="$ARCH" test-c
else
    skip "C tests" "no build"
fi

# ---------------------------------------------------------------- 5. smoke
built_step smoke "smoke: a few ops on rgpu-server --backend cuda" 40 fn smoke

# ---------------------------------------------------------------- 5b. speed, family by family
built_step gpu_bench "bench: tools/bench/gpu.py families vs PyTorch CUDA" 160 fn gpu_bench

# ---------------------------------------------------------------- 6. conformance
built_step conformance "conformance suite on cuda (tests/py/test_conformance.py)" 150 \
    env RGPU_BACKEND=cuda $PY -m pytest -q -p no:cacheprovider --tb=line -W ignore tests/py/test_conformance.py

# ---------------------------------------------------------------- 7. training
built_step training "train reduced GPT 20 steps: cuda vs cpu backend" 90 fn compare_training

# ---------------------------------------------------------------- 8. determinism
if [ -s "$OUT/gpt-cuda.rgt" ] && [ -x build/bin/rgpu-diff ]; then
    step "determinism: rgpu-diff --a cuda --b cuda (bitwise)" 45 \
        build/bin/rgpu-diff "$OUT/gpt-cuda.rgt" --a cuda --b cuda --quiet
    # --resync: b's state is reset to a's after every op, so one op's rounding
    # difference is judged alone instead of growing through 20 AdamW steps
    step "rgpu-diff --a cuda --b cpu --resync (per-dtype tolerances)" 45 \
        build/bin/rgpu-diff "$OUT/gpt-cuda.rgt" --a cuda --b cpu --resync --quiet --top 15
else
    skip "determinism" "no trace recorded (training step failed?) or no rgpu-diff"
fi

# ---------------------------------------------------------------- 8b. graphs
built_step graphs "graphs: test_compile.py and compiled GPT on cuda --graphs on (bitwise vs off)" 150 fn graphs_check

# ---------------------------------------------------------------- 9. bench
built_step bench "bench: nanogpt.py rgpu-on-cuda vs PyTorch eager CUDA" 120 fn bench

# ---------------------------------------------------------------- 10. extra, with the time left
if [ $HAVE_SERVER = 1 ] && [ $HAVE_PYEXT = 1 ]; then
    step "tests/py/test_compile.py + test_amp.py on cuda" 150 \
        env RGPU_BACKEND=cuda $PY -m pytest -q -p no:cacheprovider --tb=short -W ignore tests/py/test_compile.py tests/py/test_amp.py
    step "tests/py/test_train.py on cuda" 150 \
        env RGPU_BACKEND=cuda $PY -m pytest -q -p no:cacheprovider --tb=short -W ignore tests/py/test_train.py
fi

# ---------------------------------------------------------------- summary
log ""
log "=================================================================="
log "== summary ($(( $(now) - START ))s; log: $LOG)"
[ $FULL_COVERAGE = 0 ] && [ "${RGPU_CUDA_PARTIAL:-}" = 1 ] && log "   (ran with RGPU_CUDA_PARTIAL=1: the cuda backend lacks ops)"
status=0
for r in "${RESULTS[@]}"; do
    log "   $r"
    case $r in FAIL*|TIMEOUT*) status=1 ;; esac
done
exit $status
