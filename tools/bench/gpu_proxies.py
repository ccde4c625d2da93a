"""GPU cost proxies measured without a GPU: FP64 instructions per CUDA kernel
(from the nvcc build's PTX) and kernel launches per training step (counted on
cudaemu, the CUDA-on-CPU layer). Prints a summary and writes everything to a
JSON file.

1. FP64 per kernel. Every replayer/cuda/*.cu is compiled to PTX for sm_90 with
   the flags tools/ptxas-table.sh uses (nvcc -std=c++17 -O2 -Itrace-format
   -Ireplayer -Ireplayer/backend -ptx); each .entry (kernel) and .func body is
   parsed and its instructions counted, statically (as written in the PTX, not
   as executed, and before ptxas: cuobjdump would be needed for SASS):
     fp64      FP arithmetic opcodes (FP_ARITH below) with a .f64 type, setp and
               selp on f64 included;
     cvt64     cvt with f64 on either side (f64 conversions), counted apart;
     arith     every arithmetic opcode (ARITH below: integer, bitwise, FP,
               compares and selects; no loads, stores, moves, branches, cvt):
               the denominator of the FP64 share;
     mem       loads and stores of global or generic memory (not local,
               param, shared, const), and mem128 those of them that move 16
               bytes at once (.v4 of 32-bit or .v2 of 64-bit elements): the
               summary counts the kernels with 16-byte accesses.
   A kernel's counts include, for each call site in its body, the counts of the
   .func it calls, transitively (a function called twice counts twice; a
   recursive call counts 0). Registers and spill bytes come from ptxas -v run
   on the same PTX. A kernel is "allowed" FP64 when its operands are float64
   by construction (fp64_allowed: double, complex<double>, cuDoubleComplex or
   double2 among its template arguments; f64/c128/double as a word of its
   name; or an integer-coded float64 instantiation of INT_CODED_F64, whose
   values are read from the headers). Any other kernel with FP64 is a finding:
   float32/bfloat16 work that pays for double math (a GPU runs FP64 at 1/64
   of FP32 on consumer parts, 1/2 on H100).
   Skipped, with a message, when nvcc is not found ($NVCC, PATH,
   /usr/local/cuda/bin).

2. Kernel launches. With the emulated build (build-emu/, `make CUDA_EMU=1
   NO_DEVELOP=1 all`, or --emu-dir), child processes run the reduced GPT of
   tools/models/train.py check_gpt on an embedded cudaemu cuda server with
   CUDAEMU_STATS set (each server writes its launch counts at exit):
     GPT training step   (launches after 3 steps - after 1 step) / 2, in
                         float32 and under torch.autocast("rgpu", bfloat16);
                         by kernel family (the kernel's .cu file) and library
                         calls queued through cudaemu (cuBLAS gemm, cuFFT,
                         cuSOLVER);
     AdamW step          the GPT's parameters with gradients from one
                         backward, then 0, 1 or 3 opt.step() alone: first
                         step = L1 - L0 (creates the state), steady step =
                         (L3 - L1) / 2;
     peak device memory  torch.rgpu.max_memory_allocated() at the end of the
                         3-step runs (rgpu.stats() reports client counters,
                         no memory);
     attention memory    a GPT-2-shaped step (1 layer, 2 heads of 32, causal
                         SDPA) at T = 256 and 1024: peak device memory above
                         the parameters (linear in T without a (T, T) buffer);
                         and, from the tensor-core kernels' tiling (sdpa_bytes,
                         computed, not counted), the global bytes of a bf16
                         attention call at GPT-2's T = 1024 and at 4096 against
                         each tensor read or written once;
     CNN step            tools/models/cnn.py's ResNetSmall (batch 8, 16x16,
                         SGD), per step as the GPT's, with convolution and
                         batch norm on cudaemu's cuDNN reference and with
                         RGPU_CUDNN=0 (im2col + cuBLAS, batchnorm.cu's kernels).
   Counts are what host code launches (each launch once, where it is made), as
   a GPU pays launch overhead. Skipped, with a message, without the build.

Not counted yet: bytes read and written per kernel.

    python3 tools/bench/gpu_proxies.py [--json gpu-proxies.json] [--emu-dir build-emu]
        [--files replayer/cuda/amp.cu ...] [--no-ptx] [--no-launches] [--all]
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
ARCH = "sm_90"
NVCC_FLAGS = ["-std=c++17", "-O2", "-Itrace-format", "-Ireplayer", "-Ireplayer/backend"]

# ---------------------------------------------------------------------------
# PTX instruction classes (by the opcode's first word)

# FP arithmetic: counted as FP64 when the opcode carries .f64
FP_ARITH = frozenset("add sub mul fma mad div rcp sqrt rsqrt min max neg abs setp selp set slct testp copysign "
                     "sin cos lg2 ex2 tanh".split())
# every arithmetic opcode: FP_ARITH plus integer and bitwise ones
ARITH = FP_ARITH | frozenset("mul24 mad24 sad rem popc clz bfind fns brev bfe bfi dp4a dp2a and or xor not cnot "
                             "lop3 shf shl shr prmt".split())

_HEADER = re.compile(r"^\s*(?:\.(?:visible|weak|extern)\s+)*\.(entry|func)\s+(?:\([^)]*\)\s*)?([A-Za-z_$][\w$]*)")
_CALL = re.compile(r"\bcall(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?([A-Za-z_$][\w$]*)")
_PRED = re.compile(r"^@!?%\w+\s+")


def classify(opcode):
    """'mul.rn.f64' -> ("fp64" | "cvt64" | "arith" | None): the one class it adds to
    besides "arith" (an FP64 arithmetic op is also arithmetic)."""
    parts = opcode.split(".")
    base, mods = parts[0], parts[1:]
    if base == "cvt":
        return "cvt64" if "f64" in mods else None
    if base in FP_ARITH and "f64" in mods:
        return "fp64"
    return "arith" if base in ARITH else None


def mem_width(opcode):
    """'ld.global.nc.v4.u32' -> (1, 1): a load or store of global or generic
    memory, and whether it moves 16 bytes at once (.v4 of 32-bit or .v2 of
    64-bit elements); (0, 0) for anything else (local, param, shared, const)."""
    parts = opcode.split(".")
    if parts[0] not in ("ld", "st", "ldu") or any(m in parts for m in ("local", "param", "shared", "const")):
        return 0, 0
    wide = ("v4" in parts and any(m in parts for m in ("u32", "b32", "f32", "s32"))) or \
           ("v2" in parts and any(m in parts for m in ("u64", "b64", "f64", "s64")))
    return 1, int(wide)


def parse_ptx(text):
    """{name: {"kind": "entry"|"func", "fp64", "cvt64", "arith": own counts,
    "calls": [callee per call site]}} for each function defined (with a body)
    in the PTX text; declarations (.extern .func ...;) are left out."""
    funcs = {}
    cur = pending = None
    depth = 0
    body = []
    for raw in text.splitlines():
        line = raw.split("//", 1)[0]
        if depth == 0:
            m = _HEADER.match(line)
            if m:
                pending = {"kind": m.group(1), "name": m.group(2)}
            if pending is None:
                continue
            if "{" not in line:
                if ";" in line:          # a declaration: no body follows
                    pending = None
                continue
            cur, pending = {"kind": pending["kind"], "name": pending["name"], "fp64": 0, "cvt64": 0, "arith": 0,
                            "mem": 0, "mem128": 0}, None
            body = []
            depth = line.count("{") - line.count("}")
            continue
        depth += line.count("{") - line.count("}")
        if depth <= 0:
            cur["calls"] = _CALL.findall("\n".join(body))
            funcs[cur.pop("name")] = cur
            cur, depth = None, 0
            continue
        body.append(line)
        ins = _PRED.sub("", line.strip())
        if not ins or ins[0] in ".{}$" or ins.endswith(":"):
            continue
        opcode = ins.split(None, 1)[0].rstrip(";")
        m, w = mem_width(opcode)
        cur["mem"] += m
        cur["mem128"] += w
        c = classify(opcode)
        if c == "fp64":
            cur["fp64"] += 1
            cur["arith"] += 1
        elif c == "cvt64":
            cur["cvt64"] += 1
        elif c == "arith":
            cur["arith"] += 1
    return funcs


def kernel_counts(funcs):
    """{kernel: {"fp64", "cvt64", "arith"}}: each .entry's own counts plus, per
    call site, the callee's (transitively; a callee not defined here, such as
    vprintf, adds 0; a call back into a function being counted adds 0)."""
    memo = {}

    def total(name, stack):
        if name in memo:
            return memo[name]
        f = funcs.get(name)
        if f is None or name in stack:
            return {"fp64": 0, "cvt64": 0, "arith": 0, "mem": 0, "mem128": 0}
        t = {k: f[k] for k in ("fp64", "cvt64", "arith", "mem", "mem128")}
        for callee in f["calls"]:
            sub = total(callee, stack | {name})
            for k in t:
                t[k] += sub[k]
        memo[name] = t
        return t

    return {n: total(n, frozenset()) for n, f in funcs.items() if f["kind"] == "entry"}


def parse_ptxas(log):
    """{mangled kernel: {"regs", "spill_st", "spill_ld", "stack"}} from ptxas -v
    output (as tools/ptxas-table.sh reads it)."""
    rows, cur = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '([^']+)'", line)
        if m:
            cur = rows.setdefault(m.group(1), {"regs": 0, "spill_st": 0, "spill_ld": 0, "stack": 0})
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur["stack"], cur["spill_st"], cur["spill_ld"] = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = int(m.group(1))
    return rows


def demangle(names):
    """Demangled names in order (c++filt; the mangled name where it is missing)."""
    if not names:
        return []
    if not shutil.which("c++filt"):
        return list(names)
    out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True).stdout.split("\n")
    return [o or n for n, o in zip(names, out + [""] * len(names))]


# ---------------------------------------------------------------------------
# Which kernels may use FP64

def _matching_open(s, end, open_, close):
    """Index of the bracket opening the one that closes at s[end]."""
    depth = 0
    for i in range(end, -1, -1):
        if s[i] == close:
            depth += 1
        elif s[i] == open_:
            depth -= 1
            if depth == 0:
                return i
    return -1


def split_signature(demangled):
    """'void ns::k<1, double>(args)' -> ("ns::k", ["1", "double"])."""
    s = demangled.strip()
    if s.endswith(")"):
        i = _matching_open(s, len(s) - 1, "(", ")")
        if i > 0:
            s = s[:i]
    args = []
    if s.endswith(">"):
        i = _matching_open(s, len(s) - 1, "<", ">")
        if i > 0:
            inner, s, depth, cur = s[i + 1:-1], s[:i], 0, ""
            for ch in inner:
                if ch in "<(":
                    depth += 1
                elif ch in ">)":
                    depth -= 1
                if ch == "," and depth == 0:
                    args.append(cur.strip())
                    cur = ""
                else:
                    cur += ch
            args.append(cur.strip())
    if s.startswith("void "):
        s = s[5:]
    return s, args


def _enum_values(path, pattern):
    """Values of the enumerators matching pattern in a C header: explicit (= N)
    or counted from the previous one."""
    vals = {}
    try:
        text = open(path).read()
    except OSError:
        return vals
    for body in re.findall(r"enum\s*\w*\s*\{([^}]*)\}", text):
        nxt = 0
        for item in re.sub(r"/\*.*?\*/", "", body, flags=re.S).split(","):
            m = re.match(r"\s*(\w+)\s*(?:=\s*(\w+))?\s*$", item)
            if not m:
                continue
            if m.group(2):
                try:
                    nxt = int(m.group(2), 0)
                except ValueError:
                    continue
            if re.fullmatch(pattern, m.group(1)):
                vals[m.group(1)] = nxt
            nxt += 1
    return vals


def int_coded_f64(repo=REPO):
    """{kernel base name: (template argument positions, values meaning float64)}
    for kernels templated on a dtype code rather than a type: pw_kernel<CT, ...> and
    pw_multi_kernel<CT> (op compute type, replayer/op/dtype.h), cast_kernel<SRC, DST>
    (rgpu dtype, trace-format/rgpu_format.h: a cast from or to float64/complex128)
    and unscale_kernel<DT> (the gradients' rgpu dtype)."""
    ct = _enum_values(os.path.join(repo, "replayer", "op", "dtype.h"), r"OP_CT_\w+")
    dt = _enum_values(os.path.join(repo, "trace-format", "rgpu_format.h"), r"RGPU_(F64|C128)")
    table = {}
    if "OP_CT_F64" in ct:
        table["pw_kernel"] = ((0,), {str(ct["OP_CT_F64"])})
        table["pw_multi_kernel"] = ((0,), {str(ct["OP_CT_F64"])})
    if dt:
        table["cast_kernel"] = ((0, 1), {str(v) for v in dt.values()})
        table["unscale_kernel"] = ((0,), {str(v) for v in dt.values()})
    return table


INT_CODED_F64 = int_coded_f64()
_DOUBLE_ARG = re.compile(r"\b(double|double2|cuDoubleComplex)\b")
_DOUBLE_WORD = re.compile(r"(?:^|_)(f64|c128|double)(?:_|$)", re.I)


def fp64_allowed(demangled, table=None):
    """True when the kernel's operands are float64 by construction: its template
    arguments name double (complex<double>, double2, cuDoubleComplex included),
    its own name has f64/c128/double as a word (arange_f64_kernel), or it is an
    integer-coded float64 instantiation of the table (int_coded_f64)."""
    table = INT_CODED_F64 if table is None else table
    base, args = split_signature(demangled)
    short = base.rsplit("::", 1)[-1]
    if any(_DOUBLE_ARG.search(a) for a in args) or _DOUBLE_WORD.search(short):
        return True
    if short in table:
        pos, vals = table[short]
        return any(p < len(args) and args[p] in vals for p in pos)
    return False


def short_name(demangled):
    """'void (anonymous namespace)::k<1, true>(args)' -> 'k<1, true>' (for tables)."""
    base, args = split_signature(demangled)
    base = base.replace("(anonymous namespace)::", "")
    return base + (f"<{', '.join(args)}>" if args else "")


# ---------------------------------------------------------------------------
# Part 1: FP64 per kernel from the PTX

def find_nvcc():
    for c in (os.environ.get("NVCC"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if c and os.access(c, os.X_OK):
            return c
    return None


def compile_one(nvcc, src, tmp, repo=REPO):
    """src -> (ptx text, ptxas -v log, error or None)."""
    ptx = os.path.join(tmp, os.path.basename(src) + ".ptx")
    r = subprocess.run([nvcc, *NVCC_FLAGS, f"-arch={ARCH}", "-ptx", src, "-o", ptx], cwd=repo,
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, "", (r.stdout + r.stderr).strip()[-2000:]
    ptxas = os.path.join(os.path.dirname(nvcc), "ptxas")
    log = ""
    if os.access(ptxas, os.X_OK):
        p = subprocess.run([ptxas, "-v", f"-arch={ARCH}", ptx, "-o", os.devnull], capture_output=True, text=True)
        log = p.stdout + p.stderr
    with open(ptx) as f:
        return f.read(), log, None


def ptx_report(files, jobs, nvcc, repo=REPO):
    """The FP64 part's JSON: per kernel and per file rows and the summary."""
    kernels, errors = [], {}
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        futs = {f: ex.submit(compile_one, nvcc, f, tmp, repo) for f in files}
        for f in files:
            text, log, err = futs[f].result()
            if err:
                errors[f] = err
                continue
            res = parse_ptxas(log)
            counts = kernel_counts(parse_ptx(text))
            names = sorted(counts)
            for mangled, dem in zip(names, demangle(names)):
                c = counts[mangled]
                r = res.get(mangled, {})
                kernels.append({"file": os.path.basename(f), "kernel": dem, "mangled": mangled, **c,
                                "allowed": fp64_allowed(dem), "regs": r.get("regs"),
                                "spill_st": r.get("spill_st"), "spill_ld": r.get("spill_ld")})
    per_file = {}
    for k in kernels:
        t = per_file.setdefault(k["file"], {"kernels": 0, "fp64_kernels": 0, "not_allowed": 0, "fp64": 0,
                                            "cvt64": 0, "arith": 0})
        t["kernels"] += 1
        t["fp64"] += k["fp64"]
        t["cvt64"] += k["cvt64"]
        t["arith"] += k["arith"]
        if k["fp64"]:
            t["fp64_kernels"] += 1
            t["not_allowed"] += not k["allowed"]
    arith = sum(k["arith"] for k in kernels)
    fp64 = sum(k["fp64"] for k in kernels)
    summary = {
        "kernels": len(kernels),
        "fp64_kernels": sum(1 for k in kernels if k["fp64"]),
        "fp64_not_allowed": sum(1 for k in kernels if k["fp64"] and not k["allowed"]),
        "cvt64_only_kernels": sum(1 for k in kernels if k["cvt64"] and not k["fp64"]),
        "fp64_instructions": fp64,
        "arith_instructions": arith,
        "fp64_share": fp64 / arith if arith else 0.0,
        "spilling_kernels": sum(1 for k in kernels if (k["spill_st"] or 0) + (k["spill_ld"] or 0)),
        "kernels_with_16_byte_access": sum(1 for k in kernels if k["mem128"]),
    }
    return {"arch": ARCH, "nvcc": nvcc, "summary": summary, "per_file": per_file, "kernels": kernels,
            "errors": errors}


def print_ptx(rep, show_all, top):
    s = rep["summary"]
    print(f"== FP64 per kernel (PTX {rep['arch']}, static counts, callees included per call site)")
    for f, e in sorted(rep["errors"].items()):
        print(f"  {f}: does not compile: {e.splitlines()[-1] if e else '?'}")
    print(f"{'file':<18} {'kernels':>7} {'w/ FP64':>7} {'not ok':>6} {'fp64':>7} {'cvt64':>6} {'arith':>8} {'share':>6}")
    for f, t in sorted(rep["per_file"].items()):
        share = t["fp64"] / t["arith"] if t["arith"] else 0
        print(f"{f:<18} {t['kernels']:>7} {t['fp64_kernels']:>7} {t['not_allowed']:>6} {t['fp64']:>7} "
              f"{t['cvt64']:>6} {t['arith']:>8} {share:>6.1%}")
    rows = [k for k in rep["kernels"] if show_all or (k["fp64"] and not k["allowed"])]
    rows.sort(key=lambda k: (-k["fp64"], k["file"], k["kernel"]))
    if not show_all:
        print(f"-- FP64 in kernels not float64 by construction (top {top} of {len(rows)}; --all for every kernel)")
        rows = rows[:top]
    print(f"{'file':<16} {'kernel':<58} {'fp64':>6} {'cvt64':>6} {'arith':>7} {'ok':>3} {'regs':>5} {'spill':>6}")
    for k in rows:
        name = short_name(k["kernel"])
        name = name if len(name) <= 58 else name[:55] + "..."
        spill = (k["spill_st"] or 0) + (k["spill_ld"] or 0)
        print(f"{k['file']:<16} {name:<58} {k['fp64']:>6} {k['cvt64']:>6} {k['arith']:>7} "
              f"{'y' if k['allowed'] else 'n':>3} {k['regs'] if k['regs'] is not None else '-':>5} {spill:>6}")
    print(f"kernels {s['kernels']}, with FP64 {s['fp64_kernels']} (not allowed: {s['fp64_not_allowed']}), "
          f"f64 conversions only {s['cvt64_only_kernels']}; FP64 share of arithmetic "
          f"{s['fp64_share']:.1%} ({s['fp64_instructions']} of {s['arith_instructions']}); "
          f"spilling {s['spilling_kernels']}; with 16-byte loads/stores {s['kernels_with_16_byte_access']}")


# ---------------------------------------------------------------------------
# Part 2: kernel launches on cudaemu

def _child(args):
    """Runs in a child process on the emulated server; prints one JSON line."""
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import torch
    import rgpu
    from models.train import check_gpt
    out = {"backend": rgpu.connect().get("backend")}
    if args.child == "gpt":
        step = check_gpt(autocast=torch.bfloat16 if args.amp == "bf16" else None)
        out["losses"] = [step().item() for _ in range(args.steps)]
    elif args.child == "cnn":   # ResNetSmall (tools/models/cnn.py) training steps, SGD with momentum
        import torch.nn.functional as F
        from models.cnn import ResNetSmall
        torch.manual_seed(0)
        model = ResNetSmall().to("rgpu")
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        g = torch.Generator().manual_seed(0)
        out["losses"] = []
        for _ in range(args.steps):
            x, y = torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 10, (8,), generator=g)
            loss = F.cross_entropy(model(x.to("rgpu")), y.to("rgpu"))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            out["losses"].append(loss.item())
    elif args.child == "attn":   # a GPT-2-shaped step (1 layer, 2 heads of 32, causal SDPA) at T = args.steps
        from models.gpt import GPT, GPTConfig
        torch.manual_seed(0)
        T = args.steps
        model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=64, block_size=T, vocab_size=65)).to("rgpu")
        x = torch.randint(0, 65, (1, T), generator=torch.Generator().manual_seed(0))
        rgpu.synchronize()
        torch.rgpu.reset_peak_memory_stats()
        base = torch.rgpu.memory_allocated()
        _, loss = model(x.to("rgpu"), x.to("rgpu"))
        loss.backward()
        rgpu.synchronize()
        out["step_peak_bytes"] = torch.rgpu.max_memory_allocated() - base
        out["losses"] = [loss.item()]
    else:   # adamw: the GPT's parameters with gradients, then opt.step() alone
        from models.data import get_batch, train_val
        from models.gpt import GPT, GPTConfig
        torch.manual_seed(0)
        model = GPT(GPTConfig.tiny()).to("rgpu")
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99), weight_decay=0.1)
        x, y = get_batch(train_val(50_000)[0], 4, 32, torch.Generator().manual_seed(0))
        _, loss = model(x.to("rgpu"), y.to("rgpu"))
        loss.backward()
        rgpu.synchronize()
        for _ in range(args.steps):
            opt.step()
        out["params"] = sum(1 for p in model.parameters())
    rgpu.synchronize()
    out["peak_bytes"] = torch.rgpu.max_memory_allocated()
    print("RESULT " + json.dumps(out))


def run_counted(emu, child_args, timeout=600, extra_env=None):
    """Runs this script as a child on the emulated server (extra_env added);
    returns (child's result, {(file, name): launches}, {host op: calls})."""
    env = dict(os.environ, **(extra_env or {}))
    for k in ("RGPU_SERVER", "RGPU_RECORD", "RGPU_GRAPHS", "CUDAEMU_ORDER", "CUDAEMU_VERBOSE"):
        env.pop(k, None)
    lib = os.path.join(emu, "lib")
    ld = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    with tempfile.TemporaryDirectory() as stats:
        # as tests/cudaemu/run-tests.sh runs the suites; device memory protection
        # changes no count and costs time
        env.update(RGPU_SERVER_BIN=os.path.join(emu, "bin", "rgpu-server"), RGPU_BACKEND="cuda",
                   RGPU_CUBLAS_PATH=lib, LD_LIBRARY_PATH=ld, CUDAEMU_STATS=stats, CUDAEMU_PROTECT="0")
        r = subprocess.run([sys.executable, os.path.abspath(__file__), *child_args], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=timeout)
        res = [ln[7:] for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
        if r.returncode != 0 or not res:
            raise RuntimeError(f"gpu_proxies: child {' '.join(child_args)} failed (rc {r.returncode}):\n"
                               f"{(r.stdout + r.stderr)[-3000:]}")
        result = json.loads(res[-1])
        if not str(result.get("backend", "")).startswith("cuda"):
            raise RuntimeError(f"gpu_proxies: the child ran on backend {result.get('backend')!r}, not cuda on cudaemu")
        files = [f for f in os.listdir(stats) if f.startswith("launches-") and f.endswith(".json")]
        if not files:
            raise RuntimeError("gpu_proxies: the server wrote no CUDAEMU_STATS file (is the emulated build "
                               "older than the counter?)")
        kernels, host = {}, {}
        for f in files:
            with open(os.path.join(stats, f)) as fh:
                d = json.load(fh)
            for k in d["kernels"]:
                key = (os.path.basename(k["file"]), k["name"])
                kernels[key] = kernels.get(key, 0) + k["launches"]
            for name, n in d["host_ops"].items():
                host[name] = host.get(name, 0) + n
        return result, kernels, host


def sdpa_bytes(B, H, L, S, E, Ev, causal=True, es=2):
    """Global-memory bytes of the tensor-core attention kernels (attention.cu's
    tiling: forward blocks of 64 query rows reading every visible key tile of
    32; dq blocks of 32 rows likewise; dk/dv blocks of 32 keys reading every
    query tile of 32 that sees them; D = dO.O computed once per row beforehand),
    against the ideal of each tensor read or written once. A GPU's
    L2 cache absorbs part of the re-reads; this counts them all."""
    def visible(rows_per_block, n_rows, n_cols):   # sum over row blocks of the columns they read (tiles of 32)
        tot = 0
        for r0 in range(0, n_rows, rows_per_block):
            last = min(n_rows, r0 + rows_per_block) - 1
            cols = min(n_cols, last + 1) if causal else n_cols
            tot += -(-cols // 32) * 32
        return tot
    bh = B * H
    fwd = bh * ((L * E + L * Ev) * es + L * 4 + visible(64, L, S) * (E + Ev) * es)
    ideal_fwd = bh * ((L * E + S * (E + Ev) + L * Ev) * es + L * 4)
    Dk = bh * (2 * L * Ev * es + L * 4)        # sdpa_D_kernel: D = dO.O once per row
    dq = bh * ((L * E + L * Ev + L * E) * es + 2 * L * 4 + visible(32, L, S) * (E + Ev) * es)
    # dk/dv: the query tiles each key block sees (rows >= its first key when causal)
    qrows = 0
    for j0 in range(0, S, 32):
        first = j0 if causal else 0
        qrows += -(-max(0, L - first) // 32) * 32
    dkv = bh * ((2 * S * (E + Ev)) * es + qrows * (E + Ev) * es + qrows * 8)
    ideal_bwd = bh * ((2 * L * E + S * (E + Ev) + 2 * L * Ev + S * (E + Ev)) * es + L * 4)
    return {"forward": fwd, "forward_ideal": ideal_fwd, "backward": Dk + dq + dkv, "backward_ideal": ideal_bwd}


def _per_step(a, b, steps):
    """(b - a) / steps per key, keys with a nonzero difference."""
    out = {}
    for k in set(a) | set(b):
        d = (b.get(k, 0) - a.get(k, 0)) / steps
        if d:
            out[k] = d
    return out


def _families(kernels, host):
    fam = {}
    for (f, _), n in kernels.items():
        fam[f] = fam.get(f, 0) + n
    for h, n in host.items():
        fam["lib: " + h] = fam.get("lib: " + h, 0) + n
    return dict(sorted(fam.items(), key=lambda kv: -kv[1]))


def launch_report(emu):
    rep = {"emu_dir": emu, "gpt": {}}
    for amp in ("fp32", "bf16"):
        r1, k1, h1 = run_counted(emu, ["--child", "gpt", "--steps", "1", "--amp", amp])
        r3, k3, h3 = run_counted(emu, ["--child", "gpt", "--steps", "3", "--amp", amp])
        kd, hd = _per_step(k1, k3, 2), _per_step(h1, h3, 2)
        rep["gpt"][amp] = {
            "launches_per_step": sum(kd.values()),
            "library_calls_per_step": sum(hd.values()),
            "one_step_run_launches": sum(k1.values()),     # the whole 1-step process: setup and step
            "families": _families(kd, hd),
            "kernels": {f"{f}: {n}": c for (f, n), c in sorted(kd.items(), key=lambda kv: -kv[1])},
            "peak_bytes": r3["peak_bytes"],
            "losses": r3["losses"],
        }
    # the CNN step with convolution and batch norm on cuDNN (cudaemu's
    # reference), and without (im2col + cuBLAS, batchnorm.cu's kernels)
    rep["cnn"] = {}
    for path, cudnn in (("cudnn", "1"), ("RGPU_CUDNN=0", "0")):
        env = {"RGPU_CUDNN": cudnn}
        r1, k1, h1 = run_counted(emu, ["--child", "cnn", "--steps", "1"], extra_env=env)
        r3, k3, h3 = run_counted(emu, ["--child", "cnn", "--steps", "3"], extra_env=env)
        kd, hd = _per_step(k1, k3, 2), _per_step(h1, h3, 2)
        conv_k = sum(n for (f, _), n in kd.items() if f == "conv.cu")
        rep["cnn"][path] = {
            "launches_per_step": sum(kd.values()),
            "library_calls_per_step": sum(hd.values()),
            "conv_kernel_launches_per_step": conv_k,
            "families": _families(kd, hd),
            "peak_bytes": r3["peak_bytes"],
            "losses": r3["losses"],
        }
    # a GPT-2-shaped step's peak device memory above its parameters, T = 256 and 1024:
    # fused attention keeps no (T, T) buffer, so it grows about linearly in T
    rep["attn"] = {}
    for T in (256, 1024):
        r, k, h = run_counted(emu, ["--child", "attn", "--steps", str(T)])
        rep["attn"][T] = {"step_peak_bytes": r["step_peak_bytes"],
                          "sdpa_launches": sum(n for (f, _), n in k.items() if f == "attention.cu")}
    rep["attn_bytes"] = {f"B{B} H{H} T{T} D{D} causal bf16": sdpa_bytes(B, H, T, T, D, D)
                         for B, H, T, D in ((8, 12, 1024, 64), (2, 12, 4096, 64))}
    r0, k0, h0 = run_counted(emu, ["--child", "adamw", "--steps", "0"])
    r1, k1, h1 = run_counted(emu, ["--child", "adamw", "--steps", "1"])
    r3, k3, h3 = run_counted(emu, ["--child", "adamw", "--steps", "3"])
    steady = _per_step(k1, k3, 2)
    rep["adamw"] = {
        "params": r3["params"],
        "launches_per_step": sum(steady.values()),
        "first_step_launches": sum(_per_step(k0, k1, 1).values()),
        "library_calls_per_step": sum(_per_step(h1, h3, 2).values()),
        "families": _families(steady, _per_step(h1, h3, 2)),
        "kernels": {f"{f}: {n}": c for (f, n), c in sorted(steady.items(), key=lambda kv: -kv[1])},
    }
    return rep


def print_launches(rep):
    print("== kernel launches on cudaemu (reduced GPT, check_gpt: batch 4x32, AdamW, clip 1)")
    for amp, g in rep["gpt"].items():
        fam = ", ".join(f"{f} {n:g}" for f, n in list(g["families"].items())[:8])
        print(f"GPT step {amp}: {g['launches_per_step']:g} kernel launches + {g['library_calls_per_step']:g} "
              f"library calls per step ({g['one_step_run_launches']} in a 1-step run); peak {g['peak_bytes'] / 2**20:.2f} MiB")
        print(f"   by family: {fam}")
    print("CNN step (ResNetSmall, batch 8x3x16x16, SGD; 6 convolutions: 6 forward, 5 backward data, 6 backward "
          "filter; 6 batch norms):")
    for path, c in rep["cnn"].items():
        fam = ", ".join(f"{f} {n:g}" for f, n in list(c["families"].items())[:8])
        print(f"   {path}: {c['launches_per_step']:g} kernel launches ({c['conv_kernel_launches_per_step']:g} in conv.cu) "
              f"+ {c['library_calls_per_step']:g} library calls per step; peak {c['peak_bytes'] / 2**20:.2f} MiB")
        print(f"      by family: {fam}")
    at = rep["attn"]
    print(f"GPT-2-shaped step (1 layer, 2 heads of 32, causal SDPA), peak device memory above the parameters: "
          f"T=256 {at[256]['step_peak_bytes'] / 2**20:.2f} MiB, T=1024 {at[1024]['step_peak_bytes'] / 2**20:.2f} MiB "
          f"({at[1024]['step_peak_bytes'] / max(1, at[256]['step_peak_bytes']):.2f}x for 4x T; a (T, T) buffer would "
          f"be 16x); attention launches per step {at[1024]['sdpa_launches']}")
    for shape, v in rep["attn_bytes"].items():
        print(f"   tensor-core attention {shape}, global bytes by the kernels' tiling: forward "
              f"{v['forward'] / 2**20:.0f} MiB ({v['forward'] / v['forward_ideal']:.1f}x the ideal "
              f"{v['forward_ideal'] / 2**20:.0f}), backward {v['backward'] / 2**20:.0f} MiB "
              f"({v['backward'] / v['backward_ideal']:.1f}x the ideal {v['backward_ideal'] / 2**20:.0f})")
    a = rep["adamw"]
    fam = ", ".join(f"{f} {n:g}" for f, n in list(a["families"].items())[:6])
    print(f"AdamW step ({a['params']} parameter tensors): {a['launches_per_step']:g} launches per step "
          f"(first step {a['first_step_launches']:g}); by family: {fam}")
    top = list(a["kernels"].items())[:5]
    print("   top kernels: " + ", ".join(f"{k} {v:g}" for k, v in top))


# ---------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default="gpu-proxies.json", help="where to write the results (default %(default)s)")
    ap.add_argument("--emu-dir", default=None, help="the emulated build (default <repo>/build-emu)")
    ap.add_argument("--files", nargs="*", default=None, help=".cu files (default replayer/cuda/*.cu)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="nvcc processes at once")
    ap.add_argument("--no-ptx", action="store_true", help="skip the FP64 part")
    ap.add_argument("--no-launches", action="store_true", help="skip the launch counts")
    ap.add_argument("--all", action="store_true", help="print every kernel, not only the FP64 findings")
    ap.add_argument("--top", type=int, default=25, help="FP64 findings printed (default %(default)s)")
    ap.add_argument("--child", choices=("gpt", "adamw", "cnn", "attn"), help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--amp", choices=("fp32", "bf16"), default="fp32", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args)
        return 0
    out, rc = {}, 0
    if not args.no_ptx:
        nvcc = find_nvcc()
        if nvcc is None:
            print("gpu_proxies: nvcc not found ($NVCC, PATH, /usr/local/cuda/bin): FP64 per kernel skipped")
            out["ptx"] = {"skipped": "nvcc not found"}
        else:
            files = args.files or sorted(os.path.join("replayer", "cuda", f)
                                         for f in os.listdir(os.path.join(REPO, "replayer", "cuda")) if f.endswith(".cu"))
            out["ptx"] = ptx_report(files, max(1, args.jobs), nvcc)
            print_ptx(out["ptx"], args.all, args.top)
            rc |= bool(out["ptx"]["errors"])
    if not args.no_launches:
        emu = os.path.abspath(args.emu_dir or os.path.join(REPO, "build-emu"))
        if not (os.access(os.path.join(emu, "bin", "rgpu-server"), os.X_OK)
                and os.path.exists(os.path.join(emu, "lib", "libcudaemu.so"))):
            print(f"gpu_proxies: no emulated build in {emu} (make CUDA_EMU=1 NO_DEVELOP=1 all, or --emu-dir): "
                  "launch counts skipped")
            out["launches"] = {"skipped": f"no emulated build in {emu}"}
        else:
            print()
            out["launches"] = launch_report(emu)
            print_launches(out["launches"])
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.json}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
