"""Mixture-of-experts layers as transformers 5 runs them on a GPU-like device:
aten._grouped_mm (a decomposition with no waits: every group's product, then
each row/column takes its group's) and histc of int32 expert ids (as CUDA
counts them). Then a tiny Mixtral trained, evaluated and sampled greedily
against CPU."""
import copy

import pytest
import torch

import rgpu  # noqa: F401

G = torch.Generator().manual_seed(0)
I32 = torch.int32
CASES = {   # self, mat2, offs (cumulative group ends; None: batched)
    "rows_2d_3d": ((8, 4), (4, 4, 8), torch.tensor([2, 2, 7, 8], dtype=I32)),
    "rows_empty_groups": ((8, 4), (4, 4, 8), torch.tensor([0, 5, 5, 8], dtype=I32)),
    "batched_3d_3d": ((4, 8, 4), (4, 4, 8), None),
    "k_groups_2d_2d": ((8, 8), (8, 4), torch.tensor([4, 4, 8], dtype=I32)),
    "columns_3d_2d": ((3, 8, 4), (4, 8), torch.tensor([4, 4, 8], dtype=I32)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_grouped_mm_and_grads_equal_cpu(name):
    sa, sb, offs = CASES[name]
    a, b = torch.randn(sa, generator=G), torch.randn(sb, generator=G)
    ca, cb = a.clone().requires_grad_(), b.clone().requires_grad_()
    ra, rb = a.to("rgpu").requires_grad_(), b.to("rgpu").requires_grad_()
    waits = rgpu.stats()["waits"]
    c = torch._grouped_mm(ca, cb, offs)
    r = torch._grouped_mm(ra, rb, None if offs is None else offs.to("rgpu"))
    w = torch.randn(c.shape, generator=G)
    (r * w.to("rgpu")).sum().backward()
    assert rgpu.stats()["waits"] == waits
    (c * w).sum().backward()
    torch.testing.assert_close(r.detach().cpu(), c.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ra.grad.cpu(), ca.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rb.grad.cpu(), cb.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_histc_of_integers_counts_like_cuda(dtype):
    x = torch.tensor([0, 3, 3, 1, 7, 2, 3], dtype=dtype)
    r = torch.histc(x.to("rgpu"), bins=8, min=0, max=7)
    assert r.dtype == dtype
    assert r.cpu().tolist() == torch.histc(x.double(), bins=8, min=0, max=7).long().tolist()
    r = torch.histc(x.to("rgpu"), bins=3)                    # range from the data
    assert r.cpu().tolist() == torch.histc(x.double(), bins=3).long().tolist()


def test_tiny_mixtral_trains_and_generates_like_cpu():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.MixtralConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2, max_position_embeddings=64)
    torch.manual_seed(0)
    mc = transformers.AutoModelForCausalLM.from_config(cfg)
    mr = copy.deepcopy(mc).to("rgpu")
    ids = torch.randint(0, 64, (2, 10), generator=G)
    for m, dev in ((mc, "cpu"), (mr, "rgpu")):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        losses = []
        for _ in range(2):
            loss = m(input_ids=ids.to(dev), labels=ids.to(dev)).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach().cpu())
        m.eval()
        with torch.no_grad():
            gen = m.generate(ids[:, :4].to(dev), max_new_tokens=4, do_sample=False).cpu()
        m.result = (losses, gen)
    torch.testing.assert_close(torch.stack(mr.result[0]), torch.stack(mc.result[0]), rtol=1e-4, atol=1e-4)
    assert torch.equal(mr.result[1], mc.result[1])
