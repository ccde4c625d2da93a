"""Run PyTorch's OpInfo samples on rgpu and compare each with PyTorch CPU.

    python3 tests/py/opinfo_runner.py [--kind op|inplace|out|foreach|foreach_inplace]
                                       [--dtype float32] [--samples N] [--ops a,b]
                                       [--json out.json] [--fails] [--write-floor]

Kinds (each op passes when every sample matches CPU: torch.testing.assert_close,
NaNs equal, dtype-scaled tolerances):

  op       the out-of-place call of every op in torch's `op_db`
           (torch.testing._internal.common_methods_invocations) that supports the
           dtype on CPU; CPU and rgpu both raising counts as a match.
  inplace  `op.inplace_variant` (add_, ...) on the samples where CPU's in-place call
           succeeds: the returned value, the mutated input, and that the call returns
           the very input object, as CPU does.
  out      the out= form of every op with `supports_out` (PyTorch's test_out): out
           tensors shaped like CPU's out-of-place result, filled with NaN (integer
           max), so an out= that is not written shows; then a 0-element out that ATen
           resizes. The out tensors and the returned object (it must be the out).
  foreach  the ForeachFuncInfos (foreach_unary/binary/pointwise/reduce/other_op_db):
           `_foreach_add(list, ...)`; the result list and the input lists afterwards
           (unchanged, or, for _foreach_zero_/_foreach_copy_, which have no
           out-of-place form, mutated).
  foreach_inplace  their in-place variants (`_foreach_add_`): result (None) and the
           mutated list.

Samples are made on CPU and every tensor is moved to rgpu (--on-device: made on rgpu
and copied, op kind only). Prints the pass rate and the time; --fails lists each
failing op with its first error; --write-floor writes the ops that pass to the kind's
floor file, tests/py/test_opinfo.py's floor (floor_path). Needs `expecttest`.
"""
import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "torchhook"))

import torch  # noqa: E402

def _seed(s=0):
    """torch.manual_seed for the two generators the runner uses, CPU's and
    rgpu's: torch.manual_seed also queues a lazy seed call for cuda, mtia and
    xpu with a formatted stack each (2-3 ms a call once transformers is
    imported; the runner seeds ~10,000 times a floor)."""
    torch.default_generator.manual_seed(s)
    torch.rgpu.manual_seed_all(s)


def _no_tracked_input():
    """torch.testing's sample iterators look for the running unittest
    TestCase with inspect.stack() when a sample raises (0.1 s a call with many
    modules loaded); there is none here."""
    from torch.testing._internal import common_utils
    common_utils.extract_test_fn = lambda: None


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
        _seed(0)
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
            _seed(0)
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


def _ops_for(db, dtype, ops=None):
    """(key, OpInfo) of each op of db that CPU supports at dtype (only those in ops, when given)."""
    _no_tracked_input()
    for op in db:
        key = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
        if ops and key not in ops and op.name not in ops:
            continue
        if dtype in op.supported_dtypes("cpu"):
            yield key, op


def run(dtype=torch.float32, nsamples=6, ops=None, on_device=False):
    """({op key: None or why it fails}, {keys whose OpInfo skips test_compare_cpu})."""
    import rgpu  # noqa: F401
    from torch.testing._internal.common_methods_invocations import op_db
    res, skipped = {}, set()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        for key, op in _ops_for(op_db, dtype, ops):
            res[key] = run_op(op, dtype, nsamples, on_device)
            if compare_cpu_skipped(op):
                skipped.add(key)
    return res, skipped


KINDS = ("op", "inplace", "out", "foreach", "foreach_inplace")
NEW_KINDS = KINDS[1:]                    # the variant kinds beside op
NEW_DTYPES = ("float32", "bfloat16")     # the dtypes test_opinfo.py keeps a floor for, for NEW_KINDS
NEW_SAMPLES = 6                          # samples per op for inplace and out, as for op
FOREACH_TENSORS = 3                      # tensors per foreach list (PyTorch: 20 and 23)

NA = "n/a"   # a run_* answer: no sample that CPU runs, so nothing to compare (not counted)


def _why(e):
    """One line: the exception's first line, and assert_close's mismatch counts."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    msg = "; ".join(lines[:1] + [ln for ln in lines[1:] if ln.startswith(("Mismatched elements",
                                                                           "Greatest absolute"))])
    return f"{type(e).__name__}: {msg[:240]}"


def _changed(before, after):
    """Per tensor of after: whether it differs from before (shape, or a value; NaN == NaN)."""
    out = []
    for b, a in zip(_flat(before, []), _flat(after, [])):
        if not isinstance(a, torch.Tensor):
            continue
        a = _cpu(a)
        if b.shape != a.shape:
            out.append(True)
        elif b.dtype.is_floating_point or b.dtype.is_complex:
            out.append(bool(((b != a) & ~(b.isnan() & a.isnan())).any()))
        else:
            out.append(bool((b != a).any()))
    return out


def _compare_targets(before, cpu_after, got_after, dtype, values, what):
    """The written tensors (the in-place input, the out tensors) against CPU's: their
    values; or, for ops whose values are random (values=False), their shapes and dtypes
    and which of them the call wrote (changed from before), as on CPU; before=None
    (uninitialised outputs): shapes and dtypes only."""
    try:
        if values:
            _compare(cpu_after, got_after, dtype)
            return
        e, g = _flat(cpu_after, []), _flat(got_after, [])
        for a, b in zip(e, g):
            if isinstance(a, torch.Tensor) and (a.shape != b.shape or a.dtype != b.dtype):
                raise AssertionError(f"{tuple(b.shape)} {b.dtype}, cpu gives {tuple(a.shape)} {a.dtype}")
        if before is None:          # uninitialised outputs: nothing more to compare
            return
        ce, ge = _changed(before, cpu_after), _changed(before, got_after)
        if ce != ge:
            raise AssertionError(f"written: {ge}, on cpu: {ce} (random values, not compared)")
    except AssertionError as e:
        raise AssertionError(f"{what} after the call: {_why(e)}") from None


def _clone(t):
    return t.detach().clone()


def _to_rgpu_strided(t):
    """t on rgpu with t's strides and storage offset (.to("rgpu") makes a non-dense
    tensor contiguous; in-place and out= writes into strided targets are worth testing)."""
    if t.layout != torch.strided or t.is_contiguous() or t.requires_grad or t.numel() == 0:
        return _to_rgpu(t)
    base = torch.empty(t.untyped_storage().nbytes() // t.element_size(), dtype=t.dtype, device="rgpu")
    v = base.as_strided(t.shape, t.stride(), t.storage_offset())
    v.copy_(t.detach())
    return v


def _rgpu_args(s):
    """A sample's input, args and kwargs on rgpu, strides kept; a factory's device="cpu"
    made "rgpu" (PyTorch makes the samples on the device under test, so its factories
    get that device)."""
    kw = _map(s.kwargs, _to_rgpu_strided)
    d = kw.get("device")
    if d is not None and torch.device(d).type == "cpu":
        kw["device"] = "rgpu"
    return _map(s.input, _to_rgpu_strided), _map(s.args, _to_rgpu_strided), kw


def _samples(op, dtype, nsamples):
    _seed(0)        # the same sample values every run: a floor that does not flake
    try:
        return list(op.sample_inputs("cpu", dtype, requires_grad=False))[:nsamples], None
    except Exception as e:  # noqa: BLE001
        return None, f"(samples: {type(e).__name__})"


def _same_objects(cpu_ret, cpu_targets, got_ret, got_targets, what):
    """The call returned its input/out object(s) on CPU; rgpu must return the same objects."""
    if isinstance(cpu_targets, torch.Tensor):
        if cpu_ret is cpu_targets and got_ret is not got_targets:
            raise AssertionError(f"returns a new {type(got_ret).__name__}, not the {what} object "
                                 "(cpu returns the " + what + ")")
        return
    for i, (c, g) in enumerate(zip(cpu_targets, got_targets)):
        if (isinstance(cpu_ret, (list, tuple)) and i < len(cpu_ret) and cpu_ret[i] is c
                and not (isinstance(got_ret, (list, tuple)) and i < len(got_ret) and got_ret[i] is g)):
            raise AssertionError(f"result {i} is not the {what} object {i} (cpu returns it)")


def _refused(i, cpu_err, fn, s, target=None):
    """With refusals: a reason when rgpu accepts the call CPU refused (cpu_err), else None."""
    try:
        inp, args, kwargs = _rgpu_args(s)
        before = tuple(inp.shape) if isinstance(inp, torch.Tensor) else None
        fn(inp, args, kwargs)
        _map(inp, _cpu)
    except Exception:  # noqa: BLE001
        return None
    shape = (f"; input {before} -> {tuple(inp.shape)}"
             if before is not None and before != tuple(inp.shape) else "")
    return f"sample {i}: cpu raises {_why(cpu_err)}; rgpu does not{shape}"


def run_inplace_op(op, dtype, nsamples=NEW_SAMPLES, samples=None, values=True, refusals=False):
    """op.inplace_variant on each sample where CPU's in-place call succeeds: None when
    the returned value, the mutated input and the returned object match CPU's; NA
    when CPU raises on every sample; else a one-line reason. values=False (random
    ops): the input must be written when CPU's is, not to the same values.
    refusals: also a reason when CPU raises and rgpu does not (add_ of a self that
    would have to broadcast)."""
    fn = op.inplace_variant
    if samples is None:
        samples, err = _samples(op, dtype, nsamples)
        if err:
            return err
    ran = 0
    for i, s in enumerate(samples):
        cin = _map(s.input, _clone)
        _seed(0)
        try:
            cret = fn(cin, *s.args, **s.kwargs)
        except Exception as e:  # noqa: BLE001  (e.g. the result dtype cannot be cast to the input's)
            why = refusals and _refused(i, e, lambda x, a, k: fn(x, *a, **k), s)
            if why:
                return why
            continue
        ran += 1
        _seed(0)
        try:       # s.input is as it was: the CPU call mutated its clone
            inp, args, kwargs = _rgpu_args(s)
            ret = fn(inp, *args, **kwargs)
        except Exception as e:  # noqa: BLE001
            return f"sample {i}: {_why(e)}"
        try:
            _same_objects(cret, cin, ret, inp, "input")
            _compare_targets(s.input, cin, inp, dtype, values, "input")
            if values:
                _compare(cret, ret, dtype)
        except Exception as e:  # noqa: BLE001
            return f"sample {i}: mismatch: {_why(e)}"
    return None if ran else NA


def _fill(t):
    """Like PyTorch's test_out case 0: NaN (integer max) everywhere, so an out= the op
    does not write shows."""
    if t.dtype == torch.bool:
        return torch.ones_like(t)
    try:
        return torch.full_like(t, torch.iinfo(t.dtype).max)
    except TypeError:
        return torch.full_like(t, float("nan"))


def run_out_op(op, dtype, nsamples=NEW_SAMPLES, samples=None, values=True, refusals=False):
    """op(input, *args, **kwargs, out=out) for each sample whose out-of-place result is
    a tensor or a tuple of tensors: first out tensors of the result's shape and dtype
    filled with NaN, then 0-element ones (ATen resizes them). None when the out tensors
    and the returned object match CPU's; NA when CPU's out= raises on every sample.
    values=False (random ops): shapes, dtypes and which outs are written only; ops whose
    name says empty (uninitialised outputs): shapes and dtypes only. refusals: also a
    reason when CPU's out= call raises and rgpu's does not."""
    uninit = "empty" in op.name
    if samples is None:
        samples, err = _samples(op, dtype, nsamples)
        if err:
            return err
    ran, resized = 0, False
    for i, s in enumerate(samples):
        _seed(0)
        try:
            expect = op(s.input, *s.args, **s.kwargs)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(expect, torch.Tensor):
            single = True
        elif (isinstance(expect, (tuple, list)) and expect
              and all(isinstance(t, torch.Tensor) for t in expect)):
            single = False
        else:
            continue
        for case, make in (("out of the result's shape", _fill),
                           ("0-element out", lambda t: t.new_empty((0,)))):
            if case == "0-element out" and resized:
                continue        # once per op: rgpu's resize_ of an out is slow (gc.get_referrers)
            resized = resized or case == "0-element out"
            cout = make(expect) if single else tuple(make(t) for t in expect)
            rout0 = _map(cout, _clone)
            _seed(0)
            try:
                cret = op(s.input, *s.args, **s.kwargs, out=cout)
            except Exception as e:  # noqa: BLE001
                why = refusals and _refused(i, e, lambda x, a, k: op(x, *a, **k, out=_map(rout0, _to_rgpu)), s)
                if why:
                    return f"{why} ({case})"
                continue
            ran += 1
            _seed(0)
            try:
                inp, args, kwargs = _rgpu_args(s)
                rout = _map(rout0, _to_rgpu)
                ret = op(inp, *args, **kwargs, out=rout)
            except Exception as e:  # noqa: BLE001
                return f"sample {i}, {case}: {_why(e)}"
            try:
                _same_objects(cret, cout, ret, rout, "out")
                _compare_targets(None if uninit else rout0, cout, rout, dtype, values and not uninit, "out")
                if values and not uninit:
                    _compare(cret, ret, dtype)
            except Exception as e:  # noqa: BLE001
                return f"sample {i}, {case}: mismatch: {_why(e)}"
    return None if ran else NA


def foreach_db():
    from torch.testing._internal import common_methods_invocations as cmi
    _no_tracked_input()
    return (cmi.foreach_unary_op_db + cmi.foreach_binary_op_db + cmi.foreach_pointwise_op_db
            + cmi.foreach_reduce_op_db + cmi.foreach_other_op_db)


def _foreach_samples(op, dtype, ntensors=FOREACH_TENSORS):
    """The op's samples with lists of ntensors tensors: contiguous ones, with scalars of
    a higher dtype too (complex scalars on float lists), as test_foreach's binary tests
    make them; then noncontiguous ones (test_foreach's slow path)."""
    out = []
    _seed(0)
    try:
        out += op.sample_inputs("cpu", dtype, requires_grad=False, num_input_tensors=[ntensors],
                                allow_higher_dtype_scalars=True)
        nc = list(op.sample_inputs("cpu", dtype, requires_grad=False, num_input_tensors=[ntensors],
                                   noncontiguous=True))
        # a sample function that ignores these keywords (_foreach_mm) gives the same again
        out += [x for x in nc if any(isinstance(t, torch.Tensor) and not t.is_contiguous()
                                     for t in _flat([x.input, x.args], []))]
    except Exception as e:  # noqa: BLE001
        return None, f"(samples: {type(e).__name__})"
    return out, None


def run_foreach_op(op, dtype, inplace=False, samples=None):
    """A ForeachFuncInfo's out-of-place op (op.op) or in-place variant on each of its
    samples (lists of FOREACH_TENSORS tensors; every rightmost-argument kind: tensor
    list, scalar, scalar list, tensor): the result and every tensor list argument after
    the call against CPU's. None, NA (CPU raises on every sample) or a reason."""
    fn = op.inplace_variant if inplace else op.op
    if samples is None:
        samples, err = _foreach_samples(op, dtype)
        if err:
            return err
    ran = 0
    for i, s in enumerate(samples):
        cin, cargs = _map(s.input, _clone), _map(s.args, _clone)
        _seed(0)
        try:
            cret = fn(cin, *cargs, **s.kwargs)
        except Exception:  # noqa: BLE001
            continue
        ran += 1
        _seed(0)
        try:
            inp, args, kwargs = _rgpu_args(s)
            ret = fn(inp, *args, **kwargs)
        except Exception as e:  # noqa: BLE001
            return f"sample {i}: {_why(e)}"
        try:
            for what, c, g in (("input list after the call", cin, inp), ("result", cret, ret),
                               ("other arguments after the call", cargs, args)):
                try:
                    _compare(c, g, dtype)
                except AssertionError as e:
                    raise AssertionError(f"{what}: {_why(e)}") from None
        except Exception as e:  # noqa: BLE001
            return f"sample {i}: mismatch: {_why(e)}"
    return None if ran else NA


# random values not marked so in their OpInfo (no test_compare_cpu skip): compared as random
_RANDOM = frozenset({"randn", "randint", "nn.functional.alpha_dropout"})


def random_values(op):
    return compare_cpu_skipped(op) or op.name in _RANDOM


def run_kind(kind, dtype=torch.float32, nsamples=None, ops=None, refusals=False):
    """({op key: None or why it fails}, {keys with random values}) for one of KINDS
    (op: run(); the second set is then the keys whose OpInfo skips test_compare_cpu).
    Keys: the OpInfo's name[.variant] (inplace, out: the op's key, as for op), the
    foreach op's name (_foreach_add; foreach_inplace: _foreach_add_). Ops with nothing
    to compare (CPU raises on every sample) are left out. nsamples: per op (default 6;
    foreach: all its samples). refusals (inplace, out; not what the floors hold): an
    op also fails where CPU raises and rgpu does not."""
    if kind == "op":
        return run(dtype, 6 if nsamples is None else nsamples, ops)
    import rgpu  # noqa: F401
    res, skipped = {}, set()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore")
        if kind in ("inplace", "out"):
            from torch.testing._internal.common_methods_invocations import op_db
            for key, op in _ops_for(op_db, dtype, ops):
                if kind == "inplace" and op.inplace_variant is None:
                    continue
                if kind == "out" and not op.supports_out:
                    continue
                n = NEW_SAMPLES if nsamples is None else nsamples
                values = not random_values(op)
                r = (run_inplace_op(op, dtype, n, values=values, refusals=refusals) if kind == "inplace"
                     else run_out_op(op, dtype, n, values=values, refusals=refusals))
                if r is NA:
                    continue
                res[key] = r
                if not values:
                    skipped.add(key)
        elif kind in ("foreach", "foreach_inplace"):
            inplace = kind == "foreach_inplace"
            for op in foreach_db():
                fn = op.inplace_variant if inplace else op.op
                if fn is None or (not inplace and fn is op.inplace_variant):
                    continue    # no in-place form; or (_foreach_zero_, _copy_) no out-of-place one
                key = op.name + ("_" if inplace else "")
                if ops and key not in ops and op.name not in ops:
                    continue
                if dtype not in op.supported_dtypes("cpu"):
                    continue
                samples, err = _foreach_samples(op, dtype)
                if nsamples is not None and samples:
                    samples = samples[:nsamples]
                r = err or run_foreach_op(op, dtype, inplace, samples)
                if r is NA:
                    continue
                res[key] = r
        else:
            raise ValueError(f"kind {kind!r}: one of {', '.join(KINDS)}")
    return res, skipped


FLOOR_DTYPES = ("float32", "complex64")     # the dtypes test_opinfo.py keeps a floor for


def floor_path(dtype="float32", kind="op"):
    """opinfo_<dtype>_pass.txt for kind op, opinfo_<kind>_<dtype>_pass.txt for the others."""
    name = f"opinfo_{dtype}_pass.txt" if kind == "op" else f"opinfo_{kind}_{dtype}_pass.txt"
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


def read_floor(dtype="float32", kind="op"):
    with open(floor_path(dtype, kind)) as f:
        return {ln.strip() for ln in f if ln.strip() and not ln.startswith("#")}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", default="op", choices=KINDS)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--samples", type=int, default=None,
                    help=f"samples per op (op: 6, inplace and out: {NEW_SAMPLES}, foreach: all of them, "
                         f"lists of {FOREACH_TENSORS} tensors)")
    ap.add_argument("--ops", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--fails", action="store_true")
    ap.add_argument("--refusals", action="store_true",
                    help="inplace, out: an op also fails where CPU raises and rgpu does not (an in-place "
                         "op that resizes its input where CPU refuses to broadcast it); not in the floors")
    ap.add_argument("--on-device", action="store_true",
                    help="make the samples on rgpu and copy them to CPU (test_compare_cpu's way; kind op)")
    ap.add_argument("--write-floor", action="store_true",
                    help="write the passing ops to the kind's floor, test_opinfo.py's: opinfo_<dtype>_pass.txt "
                         "(op: float32, complex64), opinfo_<kind>_<dtype>_pass.txt (the others: float32, bfloat16)")
    a = ap.parse_args(argv)
    dtype = getattr(torch, a.dtype)
    ops = set(a.ops.split(",")) if a.ops else None
    t0 = time.time()
    if a.kind == "op":
        res, skipped = run(dtype, 6 if a.samples is None else a.samples, ops, a.on_device)
    else:
        assert not a.on_device, "--on-device: kind op only"
        res, skipped = run_kind(a.kind, dtype, a.samples, ops, a.refusals)
    dt = time.time() - t0
    n = len(res)
    ok = sum(1 for v in res.values() if v is None)
    nc = n - len(skipped)
    okc = sum(1 for k, v in res.items() if v is None and k not in skipped)
    if a.fails:
        for k in sorted(res):
            if res[k] is not None:
                print(f"FAIL {k}: {res[k]}")
    label = a.dtype if a.kind == "op" else f"{a.kind} {a.dtype}"
    tail = ""
    if a.kind == "op":
        tail = (f"; without the {len(skipped)} whose OpInfo skips test_compare_cpu (random or "
                f"uninitialised outputs): {okc}/{nc} ({100.0 * okc / max(nc, 1):.1f}%)")
    elif a.kind in ("inplace", "out"):
        tail = (f"; without the {len(skipped)} with random values (compared by shape and by which "
                f"tensors are written): {okc}/{nc} ({100.0 * okc / max(nc, 1):.1f}%)")
    print(f"opinfo {label}: {ok}/{n} ops pass ({100.0 * ok / max(n, 1):.1f}%){tail}; {dt:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"kind": a.kind, "dtype": a.dtype, "pass": ok, "total": n, "results": res,
                       "compare_cpu_skipped": sorted(skipped), "seconds": dt}, f, indent=1, sort_keys=True)
    if a.write_floor:
        assert (a.dtype in (FLOOR_DTYPES if a.kind == "op" else NEW_DTYPES) and not a.ops and a.samples is None
                and not a.refusals)
        kind_arg = "" if a.kind == "op" else f"--kind {a.kind} "
        what = "" if a.kind == "op" else f"{a.kind} "
        with open(floor_path(a.dtype, a.kind), "w") as f:
            f.write(f"# OpInfo ops whose {what}{a.dtype} samples all match CPU on rgpu (torch "
                    f"{torch.__version__.split('+')[0]}); tests/py/test_opinfo.py fails when one stops passing.\n"
                    f"# Written by: python3 tests/py/opinfo_runner.py {kind_arg}--dtype {a.dtype} --write-floor\n")
            f.writelines(k + "\n" for k in sorted(res) if res[k] is None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
