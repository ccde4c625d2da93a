"""What the torch.compile tests share (test_compile.py, test_compile_models.py):
a fresh dynamo around every test, the compile counters, rgpu's warnings."""
import pytest
import torch

import rgpu


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def cc():
    return rgpu.stats()["compile"]


def rgpu_warnings(rec):
    return [str(w.message) for w in rec if "rgpu:" in str(w.message)]
