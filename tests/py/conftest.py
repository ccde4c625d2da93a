"""Make the `rgpu` package (torchhook/rgpu) importable for the tests."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "torchhook"))

# Every op that writes an argument (in-place, out=, _foreach_*_) is held to
# writing it, plain op-table records included (torchhook/rgpu/writes.py).
os.environ.setdefault("RGPU_CHECK_WRITES", "1")
