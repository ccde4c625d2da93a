"""torch.nn's losses on rgpu against CPU: value and gradient of the input, every
reduction. Several run through rgpu's own decompositions (decomp.py), where
torch's disagree with ATen's kernels (multilabel_margin_loss counts targets
past the first -1; multi_margin_loss of a 1-d input) or are missing
(multi_margin_loss_backward, multilabel_margin_loss_backward)."""
import pytest
import torch
import torch.nn.functional as F

import rgpu  # noqa: F401

G = torch.Generator().manual_seed(0)


def _rand(*shape):
    return torch.rand(shape, generator=G)


def _randn(*shape):
    return torch.randn(shape, generator=G)


T5 = torch.tensor([0, 1, 2, 3, 4, 0])
MLM = torch.tensor([[0, 1, -1, 0, 0], [3, 3, 1, -1, 2], [4, 0, 1, 2, 3], [-1, 1, 1, 1, 1], [2, -1, 0, 0, 0],
                    [1, 0, 4, -1, 0]])
W5 = _rand(5)

LOSSES = {
    "cross_entropy_smoothing": (lambda y, t, r: F.cross_entropy(y, t, label_smoothing=0.1, reduction=r), T5),
    "cross_entropy_probs": (lambda y, t, r: F.cross_entropy(y, t, reduction=r), torch.softmax(_randn(6, 5), -1)),
    "cross_entropy_weight_ignore": (lambda y, t, r: F.cross_entropy(y, t, weight=W5.to(y.device), ignore_index=2,
                                                                    reduction=r), T5),
    "bce_logits_pos_weight": (lambda y, t, r: F.binary_cross_entropy_with_logits(y, t, pos_weight=W5.to(y.device),
                                                                                 reduction=r), _rand(6, 5).round()),
    "bce": (lambda y, t, r: F.binary_cross_entropy(torch.sigmoid(y), t, reduction=r), _rand(6, 5)),
    "kl_div": (lambda y, t, r: F.kl_div(F.log_softmax(y, -1), t, reduction=r), torch.softmax(_randn(6, 5), -1)),
    "huber": (lambda y, t, r: F.huber_loss(y, t, delta=0.5, reduction=r), _randn(6, 5)),
    "smooth_l1": (lambda y, t, r: F.smooth_l1_loss(y, t, beta=0.5, reduction=r), _randn(6, 5)),
    "soft_margin": (lambda y, t, r: F.soft_margin_loss(y, t, reduction=r), _randn(6, 5).sign()),
    "multilabel_margin": (lambda y, t, r: F.multilabel_margin_loss(y, t, reduction=r), MLM),
    "multilabel_margin_1d": (lambda y, t, r: F.multilabel_margin_loss(y[0], t, reduction=r),
                             torch.tensor([3, 0, -1, 1, 1])),
    "multilabel_soft_margin": (lambda y, t, r: F.multilabel_soft_margin_loss(y, t, reduction=r), _rand(6, 5).round()),
    "multi_margin_p1": (lambda y, t, r: F.multi_margin_loss(y, t, margin=0.7, reduction=r), T5),
    "multi_margin_p2_weight": (lambda y, t, r: F.multi_margin_loss(y, t, p=2, weight=W5.to(y.device), reduction=r),
                               T5),
    "multi_margin_1d": (lambda y, t, r: F.multi_margin_loss(y[0], t, reduction=r), torch.tensor(3)),
    "poisson_nll": (lambda y, t, r: F.poisson_nll_loss(y, t, reduction=r), _rand(6, 5) * 3),
    "gaussian_nll": (lambda y, t, r: F.gaussian_nll_loss(y, t, torch.ones_like(y) * 0.5, reduction=r), _randn(6, 5)),
    "hinge_embedding": (lambda y, t, r: F.hinge_embedding_loss(y, t, reduction=r), _randn(6, 5).sign()),
    "cosine_embedding": (lambda y, t, r: F.cosine_embedding_loss(y[:3], y[3:], t, reduction=r),
                         torch.tensor([1, -1, 1])),
    "margin_ranking": (lambda y, t, r: F.margin_ranking_loss(y[:3, 0], y[3:, 0], t, reduction=r),
                       torch.tensor([1., -1., 1.])),
    "triplet_margin": (lambda y, t, r: F.triplet_margin_loss(y[:2], y[2:4], y[4:], reduction=r), None),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_and_grad_equal_cpu(name, reduction):
    fn, t = LOSSES[name]
    x = _randn(6, 5)
    xc = x.clone().requires_grad_()
    xr = x.to("rgpu").requires_grad_()
    a = fn(xc, t, reduction)
    b = fn(xr, None if t is None else t.to("rgpu"), reduction)
    assert b.shape == a.shape and b.dtype == a.dtype
    w = _randn(*a.shape) if a.dim() else _randn()
    (a * w).sum().backward()
    (b * w.to("rgpu")).sum().backward()
    torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xr.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
