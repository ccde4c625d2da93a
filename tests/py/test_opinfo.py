"""PyTorch's OpInfo samples at float32 and complex64 on rgpu against CPU
(tests/py/opinfo_runner.py).

A floor that cannot drop: every op listed in opinfo_<dtype>_pass.txt must still
pass all its samples. Prints the pass rate; ops that newly pass are listed so
the floor can be raised (opinfo_runner.py --write-floor)."""
import os
import sys

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
