"""Run PyTorch's OpInfo samples on rgpu and compare each with PyTorch CPU.

    python3 tests/py/opinfo_runner.py [--dtype float32] [--samples 6] [--ops a,b]
                                       [--json out.json] [--fails]

For every op in torch's `op_db` (torch.testing._internal.common_methods_invocations)
that supports the dtype on CPU, up to --samples of its sample inputs run twice:
on CPU, and with every tensor moved to rgpu. The op passes when every sample's
outputs match CPU's (torch.testing.assert_close, NaNs equal, dtype-scaled
tolerances) or both sides raise. Prints the pass rate; --fails lists each
failing op with its first error. Needs `expecttest` (torch's test helpers).
"""
import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "torchhook"))

import torch  # noqa: E402

TOL = {torch.float32: (1.3e-5, 1e-4), torch.float64: (1e-7, 1e-7),
       torch.float16: (1e-3, 1e-2), torch.bfloat16: (1.6e-2, 1e-2),
       torch.complex64: (1.3e-5, 1e-4), torch.complex128: (1e-7, 1e-7)}


def _map(x, fn):
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, (list, tuple)):
        t = [_map(v, fn) for v in x]
        return type(x)(t) if not hasattr(x, "_fields") else type(x)(*t)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return x


def _to_rgpu(t):
    r = t.detach().to("rgpu")
    if t.requires_grad:
        r.requires_grad_(True)
    return r


def _cpu(t):
    return t.detach().to("cpu") if t.device.type != "cpu" else t.detach()


def _flat(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _flat(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _flat(v, out)
    else:
        out.append(x)
    return out


def _compare(expect, got, dtype):
    e, g = _flat(expect, []), _flat(got, [])
    if len(e) != len(g):
        raise AssertionError(f"{len(g)} outputs, cpu gives {len(e)}")
    rtol, atol = TOL.get(dtype, (1e-5, 1e-5))
    for a, b in zip(e, g):
        if isinstance(a, torch.Tensor):
            if not isinstance(b, torch.Tensor):
                raise AssertionError(f"got {type(b).__name__}, cpu gives a tensor")
            if b.device.type != "rgpu" and a.device.type == "cpu" and b.device.type != "cpu":
                raise AssertionError(f"output on {b.device}")
            b = _cpu(b)
            if a.dtype != b.dtype:
                raise AssertionError(f"dtype {b.dtype}, cpu gives {a.dtype}")
            if a.shape != b.shape:
                raise AssertionError(f"shape {tuple(b.shape)}, cpu gives {tuple(a.shape)}")
            if a.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16,
                           torch.complex64, torch.complex128):
                torch.testing.assert_close(b, a, rtol=rtol, atol=atol, equal_nan=True,
                                           check_device=False)
            else:
                torch.testing.assert_close(b, a, rtol=0, atol=0, check_device=False)
        elif isinstance(a, float) and isinstance(b, float):
            if not (a == b or (a != a and b != b) or abs(a - b) <= atol + rtol * abs(a)):
                raise AssertionError(f"{b} != cpu's {a}")
        elif a != b:
            raise AssertionError(f"{b!r} != cpu's {a!r}")


def compare_cpu_skipped(op):
    """True when the OpInfo skips its own device-vs-CPU comparison (test_compare_cpu)
    on every device: outputs that are random or uninitialised (empty, dropout, rand_like)."""
    for d in op.decorators:
        if getattr(d, "test_name", None) != "test_compare_cpu" or d.device_type is not None:
            continue
        if d.dtypes is not None or d.active_if is not True:
            continue
        if any("skip" in getattr(x, "__qualname__", "") for x in d.decorators):
            return True
    return False


def run_op(op, dtype, nsamples, on_device=False):
    """Returns None when every sample matches CPU, else a one-line reason.
    Samples are made on CPU and every tensor is moved to rgpu; with on_device
    they are made on rgpu and copied to CPU (as PyTorch's test_compare_cpu
    does: tensors a sample keeps on CPU on purpose stay there)."""
    try:
        samples = list(op.sample_inputs("rgpu" if on_device else "cpu", dtype,
                                        requires_grad=False))[:nsamples]
    except Exception as e:  # noqa: BLE001
        return None if False else f"(samples: {type(e).__name__})"
    if not samples:
        return "(no samples)"
    for i, s in enumerate(samples):
        if on_device:
            dev, s = s, s.transform(lambda t: t.to("cpu") if isinstance(t, torch.Tensor) else t)
        torch.manual_seed(0)
        try:
            expect = s.output_process_fn_grad(op(s.input, *s.args, **s.kwargs))
            cpu_err = None
        except Exception as e:  # noqa: BLE001
            cpu_err = e
        try:
            if on_device:
                inp, args, kwargs = dev.input, dev.args, dev.kwargs
            else:
                inp = _map(s.input, _to_rgpu)
                args = _map(s.args, _to_rgpu)
                kwargs = _map(s.kwargs, _to_rgpu)
            torch.manual_seed(0)
            got = _map(s.output_process_fn_grad(op(inp, *args, **kwargs)), _cpu)
        except Exception as e:  # noqa: BLE001
            if cpu_err is not None:
                continue
            msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
            return f"sample {i}: {type(e).__name__}: {msg}"
        if cpu_err is not None:
            return f"sample {i}: cpu raises {type(cpu_err).__name__}, rgpu does not"
        try:
            _compare(expect, got, dtype)
        except Exception as e:  # noqa: BLE001
            msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else ""
            return f"sample {i}: mismatch: {msg}"
    return None


def run(dtype=torch.float32, nsamples=6, ops=None, on_device=False):
    """({op key: None or why it fails}, {keys whose OpInfo skips test_compare_cpu})."""
    import rgpu  # noqa: F401
    from torch.testing._internal.common_methods_invocations import op_db
    res, skipped = {}, set()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        for op in op_db:
            key = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
            if ops and key not in ops and op.name not in ops:
                continue
            if dtype not in op.supported_dtypes("cpu"):
                continue
            res[key] = run_op(op, dtype, nsamples, on_device)
            if compare_cpu_skipped(op):
                skipped.add(key)
    return res, skipped


FLOOR_DTYPES = ("float32", "complex64")     # the dtypes test_opinfo.py keeps a floor for


def floor_path(dtype="float32"):
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), f"opinfo_{dtype}_pass.txt")


def read_floor(dtype="float32"):
    with open(floor_path(dtype)) as f:
        return {ln.strip() for ln in f if ln.strip() and not ln.startswith("#")}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--samples", type=int, default=6)
    ap.add_argument("--ops", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--fails", action="store_true")
    ap.add_argument("--on-device", action="store_true",
                    help="make the samples on rgpu and copy them to CPU (test_compare_cpu's way)")
    ap.add_argument("--write-floor", action="store_true",
                    help="write the passing ops to opinfo_<dtype>_pass.txt (test_opinfo.py's floor; "
                         "float32 and complex64)")
    a = ap.parse_args(argv)
    dtype = getattr(torch, a.dtype)
    t0 = time.time()
    res, skipped = run(dtype, a.samples, set(a.ops.split(",")) if a.ops else None, a.on_device)
    n = len(res)
    ok = sum(1 for v in res.values() if v is None)
    nc = n - len(skipped)
    okc = sum(1 for k, v in res.items() if v is None and k not in skipped)
    if a.fails:
        for k in sorted(res):
            if res[k] is not None:
                print(f"FAIL {k}: {res[k]}")
    print(f"opinfo {a.dtype}: {ok}/{n} ops pass ({100.0 * ok / max(n, 1):.1f}%); "
          f"without the {len(skipped)} whose OpInfo skips test_compare_cpu (random or "
          f"uninitialised outputs): {okc}/{nc} ({100.0 * okc / max(nc, 1):.1f}%); "
          f"{time.time() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"dtype": a.dtype, "pass": ok, "total": n, "results": res,
                       "compare_cpu_skipped": sorted(skipped)}, f, indent=1, sort_keys=True)
    if a.write_floor:
        assert a.dtype in FLOOR_DTYPES and not a.ops
        with open(floor_path(a.dtype), "w") as f:
            f.write(f"# OpInfo ops whose {a.dtype} samples all match CPU on rgpu (torch "
                    f"{torch.__version__.split('+')[0]}); tests/py/test_opinfo.py fails when one stops passing.\n"
                    f"# Written by: python3 tests/py/opinfo_runner.py --dtype {a.dtype} --write-floor\n")
            f.writelines(k + "\n" for k in sorted(res) if res[k] is None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
