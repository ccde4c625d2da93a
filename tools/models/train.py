"""Training loops the tests run in child processes (tests/py/test_resume.py,
test_replay_gpt.py, test_ssh.py, test_auth.py): each builds its model with
torch.manual_seed(0) and yields every step's loss tensor after the optimizer
step, so the caller reads it (loss.item()) where the loop used to."""
import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from models.data import get_batch, train_val
from models.gpt import GPT, GPTConfig


def mlp_steps(steps, device="rgpu"):
    """A small MLP trained with SGD on fresh random batches (generator seed 1)
    uploaded every step."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        loss = F.mse_loss(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        yield loss


def tiny_gpt_steps(steps, data_seed, clip=False, device="rgpu"):
    """The reduced GPT (dropout 0.1) trained with AdamW on batches of the
    generated corpus (batch generator seeded with data_seed); clip: the
    gradients' norm clipped to 1 before each step."""
    torch.manual_seed(0)
    cfg = GPTConfig.tiny(dropout=0.1)
    model = GPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train, _ = train_val(n_chars=20000)
    g = torch.Generator().manual_seed(data_seed)
    for _ in range(steps):
        x, y = get_batch(train, 4, cfg.block_size, g, device=device)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        yield loss


def check_gpt(device="rgpu", autocast=None, dropout=0.0):
    """The reduced GPT as tools/gpu-check.sh (step 7) and
    tests/cudaemu/gpt_trace.py train it: AdamW (lr 3e-3, betas (0.9, 0.99),
    weight decay 0.1), batches of 4x32 characters of a 50k corpus uploaded
    every step, gradients clipped to norm 1. Builds it and returns step(),
    one training step that returns its loss tensor. autocast: a dtype
    (torch.bfloat16) runs the forward and the loss under
    torch.autocast(device, dtype) (tools/bench/gpu_proxies.py). dropout: the
    model's (attention's and the residuals'), 0 by default."""
    torch.manual_seed(0)
    model = GPT(GPTConfig.tiny(dropout=dropout)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.99), weight_decay=0.1)
    train, _ = train_val(50_000)
    g = torch.Generator().manual_seed(0)

    def step():
        x, y = get_batch(train, 4, 32, g)
        with torch.autocast(device, dtype=autocast) if autocast is not None else contextlib.nullcontext():
            _, loss = model(x.to(device), y.to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step
