#!/usr/bin/env bash
# run-tests.sh — what `make test-cuda-emu` runs, on binaries built by
# `make CUDA_EMU=1` (the CUDA backend on cudaemu) in $EMU_B (default build-emu):
#   1. the layer's own tests (test_cudaemu)
#   2. the Check suites that start or link the backend (test_server, test_tools,
#      test_selfcheck: auto's self-check against the emulated cuda backend),
#      built against the emulated backend
#   3. tests/py/test_conformance.py on --backend cuda, once per thread order
#      in $ORDERS (forward, reverse, random)
#   3b. tests/py/test_attention.py, tests/cudaemu/test_sdpa_wmma.py (float16/bfloat16
#       attention on tensor cores: WMMA on the layer's emulation),
#       tests/cudaemu/test_cudnn.py (convolution and batch norm on cudaemu's cuDNN
#       reference: one cuDNN call per core, equal to CPU and to rgpu's own
#       kernels, bitwise reruns), test_rmsnorm.py, test_crossentropy.py (the
#       fused row ops) on cuda, in all three thread orders
#   4. tests/py/test_fft.py on cuda (fft.cu on cudaemu's cuFFT reference);
#      tests/cudaemu/test_large_shapes.py (multi-block rows, reductions, scans);
#      tests/cudaemu/test_multi_tensor.py (multi-tensor launches: a foreach AdamW
#      step in <= 12 launches, bitwise those of one launch per record; dependent
#      records), in the reverse thread order; tests/cudaemu/test_pw_vec.py (the
#      contiguous pointwise kernels: the generic kernel's bits) and
#      tests/cudaemu/test_index_put.py (index_put grouped on the device: no host
#      wait, the host grouping's bits), random order;
#      test_datadep.py (ops that read back to the host), test_random.py (Philox
#      equal to the cpu backend's), test_basic.py, test_complex_mm.py (complex GEMM,
#      matrix_exp), test_memory.py (frees in stream order: peaks near the live set),
#      test_device_errors.py (index/target checks on the device, reported at the
#      next wait) on cuda; tests/cudaemu/test_host_waits.py (a GPT step: one
#      host wait per wait, no cudaMalloc);
#      tests/py/test_compile.py on cuda with graph replay on (RGPU_GRAPHS=1)
#   5. tests/py/test_amp.py on cuda
#   6. the reduced GPT trained 20 steps on cuda (recorded), then
#      rgpu-diff --a cuda --b cuda (bitwise) and --a cuda --b cpu --resync
# A cudaemu FAULT line in any server log fails the run. STOP_ON_FAIL=1 stops
# at the first failure (the mutation check uses it). Exit status 0 = all passed.
set -u
cd "$(dirname "$0")/../.."
EMU_B=${EMU_B:-build-emu}
PY=${PYTHON:-python3}
ORDERS=${ORDERS:-forward random}
STOP=${STOP_ON_FAIL:-0}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/cudaemu-tests.XXXXXX")
export RGPU_SERVER_BIN=$PWD/$EMU_B/bin/rgpu-server RGPU_BACKEND=cuda
# the offline tools the Python suites call (rgpu-replay, rgpu-diff): the emulated
# build's, so this runs on a fresh clone without `make all` first
export RGPU_BIN=$PWD/$EMU_B/bin
# the emulated cuBLAS, also where the binaries' RUNPATH is not used (an ASan
# build: its dlopen interceptor hides the caller)
export RGPU_CUBLAS_PATH=$PWD/$EMU_B/lib LD_LIBRARY_PATH=$PWD/$EMU_B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset RGPU_SERVER RGPU_RECORD RGPU_GRAPHS CUDAEMU_ORDER
# JOBS > 1 (make: PYTEST_JOBS) and pytest-xdist: the op-by-op suites run on that many processes
XDIST=()
if [ "${JOBS:-1}" -gt 1 ] && $PY -c 'import xdist' 2>/dev/null; then XDIST=(-n "$JOBS"); fi
RESULTS=()
FAILED=0
T0=$(date +%s)

step() {   # NAME COMMAND...: runs it with a server log of its own; a FAULT there fails it
    local name=$1; shift
    local log=$LOGS/$(echo "$name" | tr -c 'a-zA-Z0-9_\n-' '_').log t=$(date +%s)
    echo "== cuda-emu: $name"
    RGPU_SERVER_LOG=$log.server "$@" > "$log" 2>&1
    local rc=$?
    if [ $rc -eq 0 ] && grep -qs "cudaemu: FAULT" "$log.server"; then rc=99; fi
    local dt=$(( $(date +%s) - t ))
    if [ $rc -eq 0 ]; then
        RESULTS+=("PASS  $name (${dt}s): $(grep -E 'passed|failed|checks|Checks|over tolerance|ok$' "$log" | tail -1)")
    else
        FAILED=1
        RESULTS+=("FAIL  $name (rc $rc, ${dt}s)")
        tail -40 "$log"
        grep -hs "cudaemu: FAULT" "$log.server" | head -5
        if [ "$STOP" = 1 ]; then summary; exit 1; fi
    fi
}

summary() {
    echo ""
    echo "== cuda-emu summary ($(( $(date +%s) - T0 ))s; logs in $LOGS)"
    printf '%s\n' "${RESULTS[@]}"
}

step "layer tests (test_cudaemu)" "$EMU_B/tests/test_cudaemu"
for t in test_server test_tools test_selfcheck test_server_files; do
    [ -x "$EMU_B/tests/$t" ] && step "check $t" "$EMU_B/tests/$t"
done
for o in $ORDERS; do
    step "conformance on cuda, $o thread order" env CUDAEMU_ORDER="$o" CUDAEMU_SEED=$$ \
        $PY -m pytest -q -p no:cacheprovider "${XDIST[@]}" tests/py/test_conformance.py
done
for o in forward reverse random; do
    step "fused attention (its tensor-core kernels too), convolution and batch norm on cuDNN, rms norm, cross-entropy on cuda, $o thread order (test_attention.py, test_sdpa_wmma.py, test_cudnn.py, test_rmsnorm.py, test_crossentropy.py)" \
        env CUDAEMU_ORDER="$o" CUDAEMU_SEED=$$ $PY -m pytest -q -p no:cacheprovider tests/py/test_attention.py \
        tests/cudaemu/test_sdpa_wmma.py tests/cudaemu/test_cudnn.py tests/py/test_rmsnorm.py tests/py/test_crossentropy.py
done
step "torch.fft on cuda (test_fft.py: cuFFT reference)" $PY -m pytest -q -p no:cacheprovider "${XDIST[@]}" tests/py/test_fft.py
step "large shapes on cuda (tests/cudaemu/test_large_shapes.py)" $PY -m pytest -q -p no:cacheprovider tests/cudaemu/test_large_shapes.py
# reverse: a launch that wrongly merged dependent records would run the later one first
step "multi-tensor launches on cuda, reverse thread order (tests/cudaemu/test_multi_tensor.py)" \
    env CUDAEMU_ORDER=reverse $PY -m pytest -q -p no:cacheprovider tests/cudaemu/test_multi_tensor.py
step "test_datadep.py, test_random.py, test_basic.py, test_complex_mm.py, test_memory.py, test_device_errors.py on cuda" \
    $PY -m pytest -q -p no:cacheprovider "${XDIST[@]}" --dist loadfile tests/py/test_datadep.py tests/py/test_random.py tests/py/test_basic.py \
    tests/py/test_complex_mm.py tests/py/test_memory.py tests/py/test_device_errors.py
# the copy stream's uploads and the compute stream, each running ahead of the
# other (a missing cross-stream wait reads or writes a buffer too early)
for m in odd even; do
    step "uploads beside kernels on cuda, CUDAEMU_STREAMS=$m (test_basic.py, test_memory.py)" \
        env CUDAEMU_STREAMS=$m $PY -m pytest -q -p no:cacheprovider tests/py/test_basic.py tests/py/test_memory.py \
        -k "large_uploads or memory"
done
step "uploads without the copy stream's buffers (tests/cudaemu/test_uploads.py)" \
    $PY -m pytest -q -p no:cacheprovider tests/cudaemu/test_uploads.py
step "contiguous pointwise kernels, index_put grouped on the device; random thread order (test_pw_vec.py, test_index_put.py)" \
    env CUDAEMU_ORDER=random $PY -m pytest -q -p no:cacheprovider tests/cudaemu/test_pw_vec.py tests/cudaemu/test_index_put.py
step "host waits of a GPT training step on cuda: one per wait, no cudaMalloc (tests/cudaemu/test_host_waits.py)" \
    $PY -m pytest -q -p no:cacheprovider tests/cudaemu/test_host_waits.py
step "test_compile.py on cuda, graphs on" env RGPU_GRAPHS=1 $PY -m pytest -q -p no:cacheprovider tests/py/test_compile.py
step "test_amp.py on cuda" $PY -m pytest -q -p no:cacheprovider tests/py/test_amp.py
step "rgpu-replay --profile FILE.json on cuda (device spans from CUDA events)" \
    $PY -m pytest -q -p no:cacheprovider tests/py/test_tools.py -k "timeline"
step "complex tensors and complex linalg on cuda (test_complex.py, test_linalg_complex.py)" \
    $PY -m pytest -q -p no:cacheprovider tests/py/test_complex.py tests/py/test_linalg_complex.py

gpt() {
    local trace=$LOGS/gpt-cuda.rgt
    rm -f "$trace"
    RGPU_RECORD=$trace $PY tests/cudaemu/gpt_trace.py 20 || return 1
    # the replays sync after every op (--resync, comparisons): device memory
    # protection (exercised by the live run above) would cost most of the time
    CUDAEMU_PROTECT=0 "$EMU_B/bin/rgpu-diff" "$trace" --a cuda --b cuda --quiet || return 1
    CUDAEMU_PROTECT=0 "$EMU_B/bin/rgpu-diff" "$trace" --a cuda --b cpu --resync --quiet --top 5 || return 1
    # with dropout: attention's fused records and native_dropout draw the same Philox bits on both
    rm -f "$trace"
    RGPU_RECORD=$trace $PY tests/cudaemu/gpt_trace.py 5 0.1 || return 1
    CUDAEMU_PROTECT=0 "$EMU_B/bin/rgpu-diff" "$trace" --a cuda --b cpu --resync --quiet --top 3
}
step "reduced GPT: rgpu-diff cuda vs cuda, cuda vs cpu --resync (and with dropout 0.1)" gpt

summary
exit $FAILED
