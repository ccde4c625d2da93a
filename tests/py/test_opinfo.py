"""PyTorch's OpInfo samples on rgpu against CPU (tests/py/opinfo_runner.py): the
out-of-place ops at float32 and complex64; their in-place variants, out= forms and
the _foreach_* ops (out-of-place and in-place) at float32 and bfloat16.

A floor that cannot drop: every op listed in opinfo_<dtype>_pass.txt (out-of-place)
or opinfo_<kind>_<dtype>_pass.txt must still pass all its samples. Prints the pass
rate; ops that newly pass are listed so the floor can be raised
(opinfo_runner.py [--kind KIND] --dtype DTYPE --write-floor)."""
import os
import sys
import time

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opinfo_runner  # noqa: E402

pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest (make deps installs it)")


@pytest.mark.parametrize("dtype", opinfo_runner.FLOOR_DTYPES)
def test_opinfo_floor(capsys, dtype):
    res, skipped = opinfo_runner.run(getattr(torch, dtype))
    floor = opinfo_runner.read_floor(dtype)
    ok = {k for k, v in res.items() if v is None}
    comparable = [k for k in res if k not in skipped]
    okc = ok - skipped
    with capsys.disabled():
        print(f"\nopinfo {dtype}: {len(ok)}/{len(res)} ops pass; without the {len(skipped)} whose OpInfo "
              f"skips test_compare_cpu: {len(okc)}/{len(comparable)} "
              f"({100.0 * len(okc) / max(len(comparable), 1):.1f}%)")
        new = sorted(ok - floor)
        if new:
            print(f"newly passing ({len(new)}; raise the floor with opinfo_runner.py --dtype {dtype} "
                  "--write-floor): "
                  + ", ".join(new))
    lost = sorted(k for k in floor if k in res and res[k] is not None)
    assert not lost, "ops that passed and fail now:\n" + "\n".join(f"{k}: {res[k]}" for k in lost)


@pytest.mark.parametrize("kind,dtype", [(k, d) for k in opinfo_runner.NEW_KINDS for d in opinfo_runner.NEW_DTYPES])
def test_opinfo_variant_floor(capsys, kind, dtype):
    """In-place / out= / foreach results and the tensors they write, against CPU: a
    variant that leaves its target unwritten is a wrong number with no error."""
    t0 = time.time()
    res, skipped = opinfo_runner.run_kind(kind, getattr(torch, dtype))
    floor = opinfo_runner.read_floor(dtype, kind)
    ok = {k for k, v in res.items() if v is None}
    with capsys.disabled():
        extra = (f"; without the {len(skipped)} with random values: {len(ok - skipped)}/{len(res) - len(skipped)}"
                 if skipped else "")
        print(f"\nopinfo {kind} {dtype}: {len(ok)}/{len(res)} ops pass "
              f"({100.0 * len(ok) / max(len(res), 1):.1f}%){extra}; {time.time() - t0:.0f} s")
        new = sorted(ok - floor)
        if new:
            print(f"newly passing ({len(new)}; raise the floor with opinfo_runner.py --kind {kind} --dtype {dtype} "
                  "--write-floor): " + ", ".join(new))
    missing = sorted(floor - set(res))
    lost = sorted(k for k in floor if k in res and res[k] is not None)
    assert not lost, "ops that passed and fail now:\n" + "\n".join(f"{k}: {res[k]}" for k in lost)
    assert not missing, "ops in the floor that no longer run (no sample CPU runs, or gone from the OpInfo db): " \
        + ", ".join(missing)
