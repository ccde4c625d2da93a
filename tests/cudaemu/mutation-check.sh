#!/usr/bin/env bash
# mutation-check.sh — evidence that `make test-cuda-emu` catches CUDA bugs:
# each mutant is a known bug put into the backend, built on cudaemu in its
# own tree (build-emu-mut/, the rewritten copy of the .cu file is mutated,
# replayer/cuda/ is never touched), then the tests of run-tests.sh run until
# the first failure. A mutant the tests do not fail is reported SURVIVED and
# makes this script fail.
#   (a) every __syncthreads() deleted from replayer/cuda/reduce.cu
#   (b) the stream sync before a device-to-host read removed (nonzero's
#       element count in index_data.cu)
#   (c) an off-by-one write in a pointwise kernel (pw_kernel: i <= numel)
# Needs `make cuda-emu` first (build-emu/ is the starting point). About 2-4
# minutes per mutant on 2 cores. MUTANTS="a c" runs a subset.
set -u
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
BASE=build-emu
MUT=build-emu-mut
MUTANTS=${MUTANTS:-a b c}
[ -x $BASE/bin/rgpu-server ] || { echo "mutation-check: run 'make cuda-emu' first"; exit 2; }
SUMMARY=()
RC=0

mutate() {   # MUTANT FILE(rewritten copy): applies it; fails if nothing changed
    $PY - "$1" "$2" <<'PY'
import re, sys
m, path = sys.argv[1], sys.argv[2]
s = open(path).read()
if m == "a":
    n = len(re.findall(r"__syncthreads\(\)\s*;", s))
    s2 = re.sub(r"__syncthreads\(\)\s*;", ";", s)
elif m == "b":
    anchor = s.index("cudaMemcpyAsync(&t, dtotal")
    sync = "RGPU_CUDA_TRY(cudaStreamSynchronize(c->stream), err, errlen);"
    at = s.index(sync, anchor)
    s2 = s[:at] + s[at + len(sync):]
    n = 1
else:
    old = "i < A.numel; i += stride"
    at = s.index(old)
    s2 = s[:at] + "i <= A.numel; i += stride" + s[at + len(old):]
    n = 1
assert s2 != s, "mutation did not apply"
open(path, "w").write(s2)
print(f"mutant {m}: {n} change(s) in {path}")
PY
}

for m in $MUTANTS; do
    case $m in
    a) file=replayer/cuda/reduce.cu; what="every __syncthreads() deleted from reduce.cu" ;;
    b) file=replayer/cuda/index_data.cu; what="stream sync before nonzero's device-to-host count read removed" ;;
    c) file=replayer/cuda/pointwise.cu; what="off-by-one write in pw_kernel (i <= numel)" ;;
    *) echo "unknown mutant $m"; exit 2 ;;
    esac
    echo "================ mutant ($m): $what"
    rm -rf $MUT
    cp -a $BASE $MUT
    mutate "$m" "$MUT/emu/src/$file" || { SUMMARY+=("ERROR    ($m) $what: mutation did not apply"); RC=1; continue; }
    touch "$MUT/emu/src/$file"
    if ! make --no-print-directory CUDA_EMU=1 B=$MUT EMU_B=$MUT all > $MUT.build.log 2>&1; then
        tail -20 $MUT.build.log
        SUMMARY+=("ERROR    ($m) $what: build failed")
        RC=1
        continue
    fi
    t=$(date +%s)
    out=$(EMU_B=$MUT STOP_ON_FAIL=1 ORDERS="forward" tests/cudaemu/run-tests.sh 2>&1)
    rc=$?
    dt=$(( $(date +%s) - t ))
    first=$(echo "$out" | grep -m1 '^FAIL ' | cut -c7-)
    if [ $rc -ne 0 ]; then
        SUMMARY+=("CAUGHT   ($m) $what: first failing step: ${first:-?} (${dt}s)")
        echo "$out" | grep -E "FAILED|FAULT|assert|Error" | head -8
    else
        SUMMARY+=("SURVIVED ($m) $what (${dt}s)")
        RC=1
    fi
done
rm -rf $MUT $MUT.build.log
echo ""
echo "== mutation check"
printf '%s\n' "${SUMMARY[@]}"
exit $RC
