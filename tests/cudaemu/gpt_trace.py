"""gpt_trace.py — the reduced GPT (GPTConfig.tiny) trained STEPS AdamW steps on
the backend RGPU_BACKEND names (recorded when RGPU_RECORD is set), as in
tools/gpu-check.sh step 7. Prints the backend and the losses, one line each."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import torch  # noqa: E402

import rgpu  # noqa: E402
from models import data, gpt  # noqa: E402

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
info = rgpu.connect()
print("backend", info.get("backend"))
torch.manual_seed(0)
model = gpt.GPT(gpt.GPTConfig.tiny()).to("rgpu")
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99), weight_decay=0.1)
train, _ = data.train_val(50_000)
g = torch.Generator().manual_seed(0)
for _ in range(steps):
    x, y = data.get_batch(train, 4, 32, g)
    _, loss = model(x.to("rgpu"), y.to("rgpu"))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("loss %.6f" % loss.item())
