"""Training on rgpu against PyTorch CPU: the same model (built on CPU from one seed,
deep-copied, moved with .to("rgpu")), the same batches and optimizer, step by
step. Losses must agree to 1e-4 relative and the parameters after the last step
to 1e-4; reading the loss each step must be the step's only wait."""
import copy
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import rgpu

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from models import cnn, data, gpt  # noqa: E402

DEV = "rgpu"
STEPS = 20
RTOL = ATOL = 1e-4


def waits():
    return rgpu.stats()["waits"]


# --- helpers --------------------------------------------------------------------------

def twin(make, seed=0):
    """(cpu model, rgpu model) with identical initial weights."""
    torch.manual_seed(seed)
    m = make()
    return m, copy.deepcopy(m).to(DEV)


def run(model, make_opt, batches, loss_fn, device, clip=1.0, zero_kw=None):
    """Train one step per batch; returns the losses, read every step."""
    opt = make_opt(model.parameters())
    losses = []
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        loss = loss_fn(model, x, y)
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad(**(zero_kw or {}))
        losses.append(loss.item())
    return losses


def train_pair(make, make_opt, batches, loss_fn, clip=1.0, seed=0):
    """Train twins; assert one wait per step on rgpu; return (cpu, rgpu, cpu losses, rgpu losses)."""
    mc, mr = twin(make, seed)
    lc = run(mc, make_opt, batches, loss_fn, "cpu", clip)
    w0 = waits()
    lr = run(mr, make_opt, batches, loss_fn, DEV, clip)
    assert waits() - w0 == len(batches), "reading the loss must be the one wait of each step"
    return mc, mr, lc, lr


def assert_losses_close(lr, lc):
    for i, (a, b) in enumerate(zip(lr, lc)):
        assert abs(a - b) <= RTOL * abs(b), f"step {i}: rgpu loss {a!r} vs cpu {b!r}"


def assert_state_close(mr, mc):
    """Every parameter and buffer to 1e-4 (integers exactly). One exception: in a GPT
    the key third of attn.qkv.bias has a gradient that is mathematically zero (softmax
    over keys ignores a shift common to all of them), so what AdamW does with it is
    rounding noise scaled up to steps of order lr by m / sqrt(v): it is checked to 1e-3."""
    sc = mc.state_dict()
    sr = mr.state_dict()
    assert sr.keys() == sc.keys()
    for k in sc:
        r = sr[k]
        assert isinstance(r, rgpu.RemoteTensor), (k, type(r))
        got, want = r.cpu(), sc[k]
        if not want.is_floating_point():
            assert torch.equal(got, want), k
            continue
        if isinstance(mc, gpt.GPT) and k.endswith("attn.qkv.bias"):
            c = mc.cfg.n_embd
            torch.testing.assert_close(got[c:2 * c], want[c:2 * c], rtol=0, atol=1e-3)
            got, want = torch.cat([got[:c], got[2 * c:]]), torch.cat([want[:c], want[2 * c:]])
        torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL, msg=lambda m: f"{k}: {m}")


def gpt_loss(model, x, y):
    return model(x, y)[1]


def ce_loss(model, x, y):
    return F.cross_entropy(model(x), y)


def mse_loss(model, x, y):
    return F.mse_loss(model(x), y)


_TEXT = None


def text():
    global _TEXT
    if _TEXT is None:
        _TEXT = data.train_val(50_000)[0]
    return _TEXT


def gpt_batches(steps=STEPS, batch=4, block=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [data.get_batch(text(), batch, block, g) for _ in range(steps)]


def adamw(params):
    return torch.optim.AdamW(params, lr=3e-3, betas=(0.9, 0.99), weight_decay=0.1)


# --- the GPT -------------------------------------------------------------------------

@pytest.mark.parametrize("attn", ["sdpa", "mask"])
def test_gpt_adamw_matches_cpu(attn):
    make = lambda: gpt.GPT(gpt.GPTConfig.tiny(attn=attn))    # noqa: E731
    mc, mr, lc, lr = train_pair(make, adamw, gpt_batches(), gpt_loss)
    assert lc[-1] < lc[0]
    assert_losses_close(lr, lc)
    assert_state_close(mr, mc)
    assert mr.head.weight is mr.tok.weight


def test_module_to_keeps_shared_parameters():
    """A Parameter shared by two modules (weight tying) stays one Parameter through
    Module.to("rgpu"), as through .to("cuda") (which sets .data and keeps the object;
    optimizers built before .to() rely on that too). gpt.GPT re-ties its head itself."""
    torch.manual_seed(0)
    m = nn.Module()
    m.emb = nn.Embedding(10, 4)
    m.head = nn.Linear(4, 10, bias=False)
    m.head.weight = m.emb.weight
    params = list(m.parameters())
    m.to(DEV)
    assert isinstance(m.emb.weight, rgpu.RemoteTensor)
    tied = m.head.weight is m.emb.weight
    assert tied, "Module.to('rgpu') made head.weight a Parameter apart from emb.weight"
    same = all(a is b for a, b in zip(params, m.parameters()))
    assert same, "Module.to('rgpu') replaced the Parameter objects"


def test_gpt_configure_optimizer_groups():
    """nanoGPT's two AdamW groups (decay on matrices only), no clipping"""
    mc, mr = twin(lambda: gpt.GPT(gpt.GPTConfig.tiny()))
    batches = gpt_batches(steps=5)
    oc, orr = mc.configure_optimizer(lr=3e-3), mr.configure_optimizer(lr=3e-3)
    for (x, y) in batches:
        for m, o, d in ((mc, oc, "cpu"), (mr, orr, DEV)):
            loss = gpt_loss(m, x.to(d), y.to(d))
            loss.backward()
            o.step()
            o.zero_grad()
    assert_state_close(mr, mc)


def test_gpt_dropout_two_rgpu_runs_bitwise_equal():
    cfg = gpt.GPTConfig.tiny(dropout=0.2)
    batches = gpt_batches(steps=8)

    def once(rgpu_seed):
        torch.manual_seed(0)                                # same initial weights
        m = copy.deepcopy(gpt.GPT(cfg)).to(DEV)
        torch.rgpu.manual_seed(rgpu_seed)                   # the dropout masks
        w0 = waits()
        losses = run(m, adamw, batches, gpt_loss, DEV)
        assert waits() - w0 == len(batches), "random ops must not wait"
        return losses, {k: v.cpu() for k, v in m.state_dict().items()}

    la, sa = once(0)
    lb, sb = once(0)
    assert la == lb
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    lc, _ = once(5)                                         # other masks, other losses
    assert la[0] != lc[0] and la[-1] != lc[-1]
    torch.manual_seed(0)                                    # dropout really drops something
    m = copy.deepcopy(gpt.GPT(cfg)).to(DEV)
    m.eval()
    x, y = (t.to(DEV) for t in batches[0])
    assert gpt_loss(m, x, y).item() != la[0]


# --- the CNN -------------------------------------------------------------------------

def image_batches(steps=STEPS, n=8, size=16):
    x, y = data.images(n * 2, size=size, seed=1)
    return [(x[(i % 2) * n:(i % 2 + 1) * n], y[(i % 2) * n:(i % 2 + 1) * n]) for i in range(steps)]


def test_cnn_sgd_momentum_matches_cpu():
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=5e-4)   # noqa: E731
    mc, mr, lc, lr = train_pair(cnn.ResNetSmall, sgd, image_batches(), ce_loss)
    assert lc[-1] < lc[0]
    assert_losses_close(lr, lc)
    assert_state_close(mr, mc)                  # weights and batch-norm running stats
    mc.eval()
    mr.eval()
    x = data.images(4, seed=3)[0]
    torch.testing.assert_close(mr(x.to(DEV)).cpu(), mc(x), rtol=RTOL, atol=ATOL)


# --- optimizers on a small MLP -------------------------------------------------------

def mlp():
    return nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3))


def mlp_batches(steps=STEPS):
    g = torch.Generator().manual_seed(2)
    w = torch.randn(12, 3, generator=g)
    out = []
    for _ in range(steps):
        x = torch.randn(16, 12, generator=g)
        out.append((x, torch.tanh(x @ w)))
    return out


OPTIMIZERS = {
    "adam": lambda ps, fe: torch.optim.Adam(ps, lr=1e-2, foreach=fe),
    "adamw": lambda ps, fe: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05, foreach=fe),
    "sgd": lambda ps, fe: torch.optim.SGD(ps, lr=0.1, foreach=fe),
    "sgd_momentum": lambda ps, fe: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True,
                                                   foreach=fe),
}


@pytest.mark.parametrize("foreach", [False, True], ids=["loop", "foreach"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_mlp_optimizers_match_cpu(name, foreach):
    make_opt = lambda ps: OPTIMIZERS[name](ps, foreach)      # noqa: E731
    mc, mr, lc, lr = train_pair(mlp, make_opt, mlp_batches(), mse_loss)
    assert lc[-1] < lc[0]
    assert_losses_close(lr, lc)
    assert_state_close(mr, mc)


def test_printing_the_loss_is_the_one_wait(capsys):
    mc, mr = twin(mlp)
    opt = torch.optim.SGD(mr.parameters(), lr=0.1)
    batches = mlp_batches(5)
    w0 = waits()
    for x, y in batches:
        loss = mse_loss(mr, x.to(DEV), y.to(DEV))
        loss.backward()
        nn.utils.clip_grad_norm_(mr.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        print(loss)
    assert waits() - w0 == len(batches)
    out = capsys.readouterr().out
    assert out.count("device='rgpu:0'") == len(batches)


# --- state dicts and gradients -------------------------------------------------------

def test_state_dict_round_trip():
    make = lambda: gpt.GPT(gpt.GPTConfig.tiny())            # noqa: E731
    mc, mr = twin(make)
    run(mr, adamw, gpt_batches(steps=2), gpt_loss, DEV)     # weights no longer the init
    sd = mr.state_dict()
    fresh = make()
    fresh.load_state_dict(sd)                               # rgpu -> CPU
    for k, v in fresh.state_dict().items():
        assert type(v) is torch.Tensor and v.device.type == "cpu"
        assert torch.equal(v, sd[k].cpu()), k
    assert fresh.head.weight is fresh.tok.weight

    torch.manual_seed(7)
    cpu_sd = make().state_dict()
    mr.load_state_dict(cpu_sd)                              # CPU -> rgpu
    for k, p in mr.named_parameters():
        assert isinstance(p, nn.Parameter) and p.device.type == DEV and p.requires_grad, k
        assert torch.equal(p.cpu(), cpu_sd[k]), k
    mc.load_state_dict(cpu_sd)
    x, y = gpt_batches(steps=1)[0]
    torch.testing.assert_close(gpt_loss(mr, x.to(DEV), y.to(DEV)).cpu(), gpt_loss(mc, x, y),
                               rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad(set_to_none):
    make_opt = lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.5)   # noqa: E731
    batches = mlp_batches(4)
    mc, mr = twin(mlp)
    kw = {"set_to_none": set_to_none}
    lc = run(mc, make_opt, batches, mse_loss, "cpu", zero_kw=kw)
    lr = run(mr, make_opt, batches, mse_loss, DEV, zero_kw=kw)
    assert_losses_close(lr, lc)
    assert_state_close(mr, mc)
    for pc, pr in zip(mc.parameters(), mr.parameters()):
        if set_to_none:
            assert pr.grad is None and pc.grad is None
        else:
            assert isinstance(pr.grad, rgpu.RemoteTensor)
            assert torch.equal(pr.grad.cpu(), torch.zeros_like(pc))
    x, y = batches[0]                                       # grads accumulate onto the zeros
    for _ in range(2):
        mse_loss(mc, x, y).backward()
        mse_loss(mr, x.to(DEV), y.to(DEV)).backward()
    for pc, pr in zip(mc.parameters(), mr.parameters()):
        torch.testing.assert_close(pr.grad.cpu(), pc.grad, rtol=RTOL, atol=1e-6)
