#!/usr/bin/env bash
# ptxas-table.sh — per-kernel resources of replayer/cuda/ as ptxas reports
# them (nvcc -Xptxas -v): registers, spill stores/loads, stack frame, static
# shared memory, one row per kernel, worst register users first. Needs nvcc,
# no GPU. tools/gpu-check.sh runs it as a step.
#
#   tools/ptxas-table.sh [ARCH]        # default sm_90
#   NVCC=/path/to/nvcc tools/ptxas-table.sh sm_80
# Exit status: 0, or 1 when nvcc is missing or a file does not compile.
set -u
cd "$(dirname "$0")/.."
ARCH=${1:-sm_90}
NVCC=${NVCC:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)}
[ -n "$NVCC" ] || { echo "ptxas-table: nvcc not found"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
rc=0
for f in replayer/cuda/*.cu; do
    if ! "$NVCC" -std=c++17 -O2 -gencode "arch=compute_${ARCH#sm_},code=$ARCH" -Itrace-format -Ireplayer -Ireplayer/backend \
         -Xptxas -v -c "$f" -o "$TMP/k.o" > "$TMP/$(basename "$f").log" 2>&1; then
        echo "ptxas-table: $f does not compile:"; tail -5 "$TMP/$(basename "$f").log"; rc=1
    fi
done
python3 - "$TMP" "$ARCH" <<'PY'
import glob, os, re, subprocess, sys
tmp, arch = sys.argv[1], sys.argv[2]
rows = []
for log in sorted(glob.glob(os.path.join(tmp, "*.log"))):
    src = os.path.basename(log)[:-4]
    cur = None
    for line in open(log, errors="replace"):
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = {"file": src, "kernel": m.group(1), "regs": 0, "spill_st": 0, "spill_ld": 0, "stack": 0, "smem": 0}
            rows.append(cur)
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur["stack"], cur["spill_st"], cur["spill_ld"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = int(s.group(1)) if s else 0
if not rows:
    print("ptxas-table: no kernels found (did nvcc run?)")
    sys.exit(1)
names = subprocess.run(["c++filt"], input="\n".join(r["kernel"] for r in rows), capture_output=True, text=True).stdout.split("\n")
for r, n in zip(rows, names):
    n = re.sub(r"\(.*\)$", "", n) if n else r["kernel"]
    r["name"] = n if len(n) <= 60 else n[:57] + "..."
rows.sort(key=lambda r: (-r["regs"], r["file"], r["name"]))
print(f"per-kernel resources ({arch}, nvcc -Xptxas -v): {len(rows)} kernels")
print(f"{'file':<16} {'kernel':<60} {'regs':>5} {'spill st':>9} {'spill ld':>9} {'stack':>6} {'smem':>6}")
for r in rows:
    print(f"{r['file']:<16} {r['name']:<60} {r['regs']:>5} {r['spill_st']:>9} {r['spill_ld']:>9} {r['stack']:>6} {r['smem']:>6}")
sp = [r for r in rows if r["spill_st"] or r["spill_ld"]]
print(f"kernels spilling: {len(sp)}" + ("" if not sp else ": " + ", ".join(r["name"] for r in sp[:10])))
PY
[ $? -eq 0 ] || rc=1
exit $rc
