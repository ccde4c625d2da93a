"""gpt_trace.py — the reduced GPT (GPTConfig.tiny) trained STEPS AdamW steps on
the backend RGPU_BACKEND names (recorded when RGPU_RECORD is set), as in
tools/gpu-check.sh step 7. Prints the backend and the losses, one line each.
A second argument is the model's dropout (0 by default): its attention runs the
fused SDPA records with Philox dropout."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import rgpu  # noqa: E402
from models.train import check_gpt  # noqa: E402

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
info = rgpu.connect()
print("backend", info.get("backend"))
step = check_gpt(dropout=float(sys.argv[2]) if len(sys.argv) > 2 else 0.0)
for _ in range(steps):
    print("loss %.6f" % step().item())
